// voxaug torch_ext: the spatial family's ops (resample). CPU and CUDA share one entry
// (voxaug::resample picks the backend from the views); Meta computes shapes.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#if VOXAUG_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <string>
#include <vector>

#include "tensor_view.h"
#include "voxaug/error.h"
#include "voxaug/resample.h"

namespace voxaug::torch_ext {
namespace {

struct Checked {
  std::vector<at::Tensor> outputs;
  at::Tensor matrices;
};

// Shared argument checks of the real and the Meta kernel; allocates the outputs.
Checked check_and_allocate(at::TensorList inputs, const at::Tensor& matrices,
                           at::IntArrayRef out_size, at::IntArrayRef modes,
                           at::IntArrayRef paddings, at::ArrayRef<double> pad_values, bool meta) {
  const size_t k = inputs.size();
  TORCH_CHECK_VALUE(k >= 1 && k <= static_cast<size_t>(kMaxResampleTargets), "inputs: 1 to ",
                    kMaxResampleTargets, " tensors resample together, got ", k);
  TORCH_CHECK_VALUE(modes.size() == k && paddings.size() == k && pad_values.size() == k,
                    "modes, paddings and pad_values need one entry per input (", k, "), got ",
                    modes.size(), ", ", paddings.size(), ", ", pad_values.size());
  TORCH_CHECK_VALUE(out_size.size() == 3, "out_size must be [D, H, W], got ", out_size);
  for (int64_t s : out_size) TORCH_CHECK_VALUE(s >= 0, "out_size must be >= 0, got ", out_size);
  const at::Tensor& first = inputs[0];
  for (size_t i = 0; i < k; ++i) {
    const std::string name = "inputs[" + std::to_string(i) + "]";
    check_5d(inputs[i], name.c_str(), meta);
    TORCH_CHECK_VALUE(inputs[i].size(0) == first.size(0), name, " has batch size ",
                      inputs[i].size(0), ", inputs[0] has ", first.size(0));
    TORCH_CHECK_VALUE(inputs[i].device() == first.device(), name, " is on ", inputs[i].device(),
                      ", inputs[0] on ", first.device());
    TORCH_CHECK_VALUE(modes[i] == 0 || modes[i] == 1, "modes[", i,
                      "] must be 0 (nearest) or 1 (linear), got ", modes[i]);
    TORCH_CHECK_VALUE(paddings[i] >= 0 && paddings[i] <= 3, "paddings[", i,
                      "] must be 0 zeros, 1 border, 2 reflection or 3 constant, got ", paddings[i]);
    (void)to_voxaug_dtype(inputs[i].scalar_type(), name.c_str());
    TORCH_CHECK_VALUE(modes[i] == 0 || at::isFloatingType(inputs[i].scalar_type()), name,
                      ": linear interpolation needs a floating tensor (labels use nearest), got ",
                      inputs[i].scalar_type());
  }
  TORCH_CHECK_VALUE(matrices.dim() == 3 && matrices.size(0) == first.size(0) &&
                        matrices.size(1) == 3 && matrices.size(2) == 4,
                    "matrices must be (N, 3, 4) with N = ", first.size(0), ", got ",
                    matrices.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(matrices.scalar_type()), "matrices must be floating, got ",
                    matrices.scalar_type());
  TORCH_CHECK_VALUE(matrices.device() == first.device(), "matrices must be on the inputs' device ",
                    first.device(), ", got ", matrices.device());
  Checked c;
  c.matrices = matrices.to(at::kDouble).contiguous();
  for (size_t i = 0; i < k; ++i)
    c.outputs.push_back(
        at::empty({first.size(0), inputs[i].size(1), out_size[0], out_size[1], out_size[2]},
                  inputs[i].options()));
  return c;
}

std::vector<at::Tensor> resample_impl(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool align_corners) {
  Checked c = check_and_allocate(inputs, matrices, out_size, modes, paddings, pad_values, false);
  std::vector<ResampleTarget> targets(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    targets[i].in = to_view(inputs[i], "input");
    targets[i].out = to_view(c.outputs[i], "output");
    targets[i].mode = static_cast<Interp>(modes[i]);
    targets[i].padding = static_cast<Padding>(paddings[i]);
    targets[i].pad_value = pad_values[i];
  }
  const c10::DeviceGuard guard(inputs[0].device());
  cudaStream_t stream = nullptr;
#if VOXAUG_WITH_CUDA
  if (inputs[0].is_cuda())
    stream = c10::cuda::getCurrentCUDAStream(inputs[0].get_device()).stream();
#endif
  try {
    resample(targets.data(), static_cast<int>(targets.size()), c.matrices.data_ptr<double>(),
             align_corners, stream);
  } catch (const voxaug::CudaError& e) {
    TORCH_CHECK(false, e.what());
  } catch (const voxaug::Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  return c.outputs;
}

std::vector<at::Tensor> resample_meta(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool) {
  return check_and_allocate(inputs, matrices, out_size, modes, paddings, pad_values, true).outputs;
}

// Gradients of resample are not implemented yet: refuse inputs that require grad instead of
// returning outputs that silently carry no gradient.
std::vector<at::Tensor> resample_autograd(at::TensorList inputs, const at::Tensor& matrices,
                                          at::IntArrayRef out_size, at::IntArrayRef modes,
                                          at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                          bool align_corners) {
  if (at::GradMode::is_enabled()) {
    for (const at::Tensor& t : inputs)
      TORCH_CHECK(!t.requires_grad(),
                  "voxaug::resample has no gradient yet; detach the inputs or "
                  "run under torch.no_grad()");
    TORCH_CHECK(!matrices.requires_grad(), "voxaug::resample has no gradient w.r.t. matrices yet");
  }
  at::AutoDispatchBelowADInplaceOrView below;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::resample", "")
                       .typed<std::vector<at::Tensor>(
                           at::TensorList, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                           at::IntArrayRef, at::ArrayRef<double>, bool)>();
  return op.call(inputs, matrices, out_size, modes, paddings, pad_values, align_corners);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("resample", &resample_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("resample", &resample_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("resample", &resample_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("resample", &resample_autograd);
}

}  // namespace voxaug::torch_ext
