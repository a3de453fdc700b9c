// voxaug torch_ext: the spatial family's ops (resample). CPU and CUDA share one entry
// (voxaug::resample picks the backend from the views); Meta computes shapes.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "autograd_guard.h"
#include "resample_common.h"
#include "tensor_view.h"
#include "voxaug/error.h"
#include "voxaug/resample.h"
#include "host_cache.h"

namespace voxaug::torch_ext {
namespace {

struct Checked {
  std::vector<at::Tensor> outputs;
  at::Tensor matrices;
};

// Shared argument checks of the real and the Meta kernel; allocates the outputs.
Checked check_and_allocate(at::TensorList inputs, const at::Tensor& matrices,
                           at::IntArrayRef out_size, at::IntArrayRef modes,
                           at::IntArrayRef paddings, at::ArrayRef<double> pad_values, bool meta,
                           int64_t group = 1) {
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
    TORCH_CHECK_VALUE(modes[i] >= 0 && modes[i] <= 5, "modes[", i,
                      "] must be 0 (nearest), 1 (linear), 2 (cubic B-spline) or 3 / 4 / 5 (the "
                      "B-splines of order 2 / 4 / 5), got ",
                      modes[i]);
    TORCH_CHECK_VALUE(paddings[i] >= 0 && paddings[i] <= 4, "paddings[", i,
                      "] must be 0 zeros, 1 border, 2 reflection, 3 constant or 4 cutoff (scipy's ",
                      "'constant'), got ", paddings[i]);
    (void)to_voxaug_dtype(inputs[i].scalar_type(), name.c_str());
    TORCH_CHECK_VALUE(modes[i] == 0 || at::isFloatingType(inputs[i].scalar_type()), name,
                      ": linear and B-spline interpolation need a floating tensor (labels use "
                      "nearest), got ",
                      inputs[i].scalar_type());
  }
  const int64_t batch = first.size(0) * group;
  TORCH_CHECK_VALUE(matrices.dim() == 3 && matrices.size(0) == batch && matrices.size(1) == 3 &&
                        matrices.size(2) == 4,
                    "matrices must be (N, 3, 4) with N = ", batch, ", got ", matrices.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(matrices.scalar_type()), "matrices must be floating, got ",
                    matrices.scalar_type());
  TORCH_CHECK_VALUE(matrices.device() == first.device(), "matrices must be on the inputs' device ",
                    first.device(), ", got ", matrices.device());
  Checked c;
  c.matrices = matrices.to(at::kDouble).contiguous();
  for (size_t i = 0; i < k; ++i)
    c.outputs.push_back(torch_ext::empty_output(
        {batch, inputs[i].size(1), out_size[0], out_size[1], out_size[2]}, inputs[i].options()));
  return c;
}

}  // namespace

std::vector<at::Tensor> resample_meta(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool) {
  return check_and_allocate(inputs, matrices, out_size, modes, paddings, pad_values, true).outputs;
}

std::vector<at::Tensor> resample_meta_grouped(at::TensorList inputs, const at::Tensor& matrices,
                                              at::IntArrayRef out_size, at::IntArrayRef modes,
                                              at::IntArrayRef paddings,
                                              at::ArrayRef<double> pad_values, int64_t group) {
  return check_and_allocate(inputs, matrices, out_size, modes, paddings, pad_values, true, group)
      .outputs;
}

std::vector<at::Tensor> resample_forward(at::TensorList inputs, const at::Tensor& matrices,
                                         at::IntArrayRef out_size, at::IntArrayRef modes,
                                         at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                         bool align_corners, const DeformField* field,
                                         int64_t group, const PostSteps* post) {
  Checked c =
      check_and_allocate(inputs, matrices, out_size, modes, paddings, pad_values, false, group);
  std::vector<ResampleTarget> targets(inputs.size());
  std::vector<at::Tensor> coeffs;  // B-spline coefficients, kept alive for the launch
  const c10::DeviceGuard guard(inputs[0].device());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (is_spline(static_cast<Interp>(modes[i])) && inputs[i].numel() > 0) {
      const int64_t P = kBSplinePad;
      coeffs.push_back(torch_ext::empty_output(
          {inputs[i].size(0), inputs[i].size(1), inputs[i].size(2) + 2 * P,
           inputs[i].size(3) + 2 * P, inputs[i].size(4) + 2 * P},
          inputs[i].options().dtype(inputs[i].scalar_type() == at::kDouble ? at::kDouble
                                                                           : at::kFloat)));
      targets[i].coeff = to_view(coeffs.back(), "coefficients");
      call_core([&] {
        bspline_prefilter(to_view(inputs[i], "input"), targets[i].coeff,
                          static_cast<Padding>(paddings[i]), pad_values[i], align_corners,
                          spline_order(static_cast<Interp>(modes[i])), current_stream(inputs[i]));
      });
    }
    targets[i].in = to_view(inputs[i], "input");
    targets[i].out = to_view(c.outputs[i], "output");
    targets[i].mode = static_cast<Interp>(modes[i]);
    targets[i].padding = static_cast<Padding>(paddings[i]);
    targets[i].pad_value = pad_values[i];
    targets[i].group = group;
  }
  if (post != nullptr && post->input >= 0 && !post->steps.empty()) {
    ResampleTarget& t = targets[static_cast<size_t>(post->input)];
    t.post = post->steps.data();
    t.num_post = static_cast<int>(post->steps.size());
    t.post_first_sample = post->first_sample;
  }
  call_core([&] {
    if (field == nullptr)
      resample(targets.data(), static_cast<int>(targets.size()), c.matrices.data_ptr<double>(),
               align_corners, current_stream(inputs[0]));
    else
      resample_deformed(targets.data(), static_cast<int>(targets.size()),
                        c.matrices.data_ptr<double>(), *field, align_corners,
                        current_stream(inputs[0]));
  });
  return c.outputs;
}

// resample_patches: K patches per input volume, each matrix in patch coordinates; the crop's
// start is added to the matrix offsets on the inputs' device (no host sync), then one launch.
at::Tensor patch_matrices(at::TensorList inputs, const at::Tensor& matrices,
                          const at::Tensor& starts, bool meta) {
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs: at least one tensor, got none");
  const at::Tensor& first = inputs[0];
  TORCH_CHECK_VALUE(starts.dim() == 3 && starts.size(0) == first.size(0) && starts.size(2) == 3,
                    "starts must be (M, K, 3) with M = inputs[0].size(0) = ", first.size(0),
                    ", got ", starts.sizes());
  TORCH_CHECK_VALUE(!at::isFloatingType(starts.scalar_type()) && !starts.is_complex() &&
                        starts.scalar_type() != at::kBool,
                    "starts must be an integer tensor (voxel indices), got ", starts.scalar_type());
  TORCH_CHECK_VALUE(starts.device() == first.device(), "starts must be on the inputs' device ",
                    first.device(), ", got ", starts.device());
  TORCH_CHECK_VALUE(starts.size(1) >= 1 || first.size(0) == 0,
                    "starts must hold at least one patch per volume, got ", starts.sizes());
  TORCH_CHECK_VALUE(matrices.dim() == 3 && matrices.size(0) == starts.size(0) * starts.size(1) &&
                        matrices.size(1) == 3 && matrices.size(2) == 4,
                    "matrices must be (M * K, 3, 4) = (", starts.size(0) * starts.size(1),
                    ", 3, 4), got ", matrices.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(matrices.scalar_type()), "matrices must be floating, got ",
                    matrices.scalar_type());
  TORCH_CHECK_VALUE(matrices.device() == first.device(), "matrices must be on the inputs' device ",
                    first.device(), ", got ", matrices.device());
  at::Tensor full = matrices.to(at::kDouble, /*non_blocking=*/false, /*copy=*/true).contiguous();
  if (!meta) full.select(2, 3).add_(starts.reshape({-1, 3}).to(at::kDouble));
  return full;
}

int64_t patch_group(const at::Tensor& starts) {
  return starts.dim() == 3 ? starts.size(1) : 1;
}

namespace {

// The post-step arguments of resample_patches: checked, decoded for input post_input's
// output batch (M * K patches).
PostSteps post_steps(at::TensorList inputs, const at::Tensor& starts, int64_t post_input,
                     at::IntArrayRef ops, at::IntArrayRef flags, at::ArrayRef<double> params,
                     at::IntArrayRef seeds, const c10::List<std::optional<at::Tensor>>& values,
                     int64_t first_sample, std::vector<at::Tensor>& keep) {
  PostSteps ps;
  if (ops.empty()) return ps;
  TORCH_CHECK_VALUE(post_input >= 0 && post_input < static_cast<int64_t>(inputs.size()),
                    "post_input must index inputs (0..", inputs.size() - 1,
                    ") when post_ops are "
                    "given, got ",
                    post_input);
  TORCH_CHECK_VALUE(first_sample >= 0 && first_sample <= UINT32_MAX,
                    "post_first_sample must be in [0, 2^32), got ", first_sample);
  const at::Tensor& x = inputs[static_cast<size_t>(post_input)];
  // An empty stand-in for the output batch (N = M * K, C, dtype, device): what decode checks
  // the per-sample values against.
  const at::Tensor batch =
      at::empty({x.size(0) * patch_group(starts), x.size(1), 0, 0, 0}, x.options());
  ps.input = post_input;
  ps.steps = decode_chain(batch, ops, flags, params, seeds, values, keep);
  ps.first_sample = static_cast<uint32_t>(first_sample);
  return ps;
}

std::vector<at::Tensor> resample_patches_post_impl(
    at::TensorList inputs, const at::Tensor& matrices, const at::Tensor& starts,
    at::IntArrayRef out_size, at::IntArrayRef modes, at::IntArrayRef paddings,
    at::ArrayRef<double> pad_values, bool align_corners, int64_t post_input,
    at::IntArrayRef post_ops, at::IntArrayRef post_flags, at::ArrayRef<double> post_params,
    at::IntArrayRef post_seeds, const c10::List<std::optional<at::Tensor>>& post_values,
    int64_t post_first_sample) {
  const at::Tensor full = patch_matrices(inputs, matrices, starts, false);
  std::vector<at::Tensor> keep;
  const PostSteps post = post_steps(inputs, starts, post_input, post_ops, post_flags, post_params,
                                    post_seeds, post_values, post_first_sample, keep);
  return resample_forward(inputs, full, out_size, modes, paddings, pad_values, align_corners,
                          nullptr, patch_group(starts), &post);
}

std::vector<at::Tensor> resample_patches_impl(at::TensorList inputs, const at::Tensor& matrices,
                                              const at::Tensor& starts, at::IntArrayRef out_size,
                                              at::IntArrayRef modes, at::IntArrayRef paddings,
                                              at::ArrayRef<double> pad_values, bool align_corners) {
  const at::Tensor full = patch_matrices(inputs, matrices, starts, false);
  return resample_forward(inputs, full, out_size, modes, paddings, pad_values, align_corners,
                          nullptr, patch_group(starts));
}

std::vector<at::Tensor> resample_patches_meta(at::TensorList inputs, const at::Tensor& matrices,
                                              const at::Tensor& starts, at::IntArrayRef out_size,
                                              at::IntArrayRef modes, at::IntArrayRef paddings,
                                              at::ArrayRef<double> pad_values, bool) {
  const at::Tensor full = patch_matrices(inputs, matrices, starts, true);
  return check_and_allocate(inputs, full, out_size, modes, paddings, pad_values, true,
                            patch_group(starts))
      .outputs;
}

std::vector<at::Tensor> resample_patches_post_meta(
    at::TensorList inputs, const at::Tensor& matrices, const at::Tensor& starts,
    at::IntArrayRef out_size, at::IntArrayRef modes, at::IntArrayRef paddings,
    at::ArrayRef<double> pad_values, bool align_corners, int64_t, at::IntArrayRef, at::IntArrayRef,
    at::ArrayRef<double>, at::IntArrayRef, const c10::List<std::optional<at::Tensor>>&, int64_t) {
  return resample_patches_meta(inputs, matrices, starts, out_size, modes, paddings, pad_values,
                               align_corners);
}

std::vector<at::Tensor> resample_impl(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool align_corners) {
  return resample_forward(inputs, matrices, out_size, modes, paddings, pad_values, align_corners,
                          nullptr);
}

at::Tensor backward_input_impl(const at::Tensor& grad_output, const at::Tensor& input,
                               const at::Tensor& matrices, int64_t mode, int64_t padding,
                               bool align_corners) {
  check_5d(grad_output, "grad_output");
  check_5d(input, "input");
  TORCH_CHECK_VALUE(at::isFloatingType(input.scalar_type()),
                    "input must be floating to differentiate, got ", input.scalar_type());
  const at::Tensor go = grad_output.to(input.scalar_type());
  const at::Tensor m = matrices.to(at::kDouble).contiguous();
  const bool dbl = input.scalar_type() == at::kDouble;
  at::Tensor acc =
      torch_ext::empty_output(input.sizes(), input.options().dtype(dbl ? at::kDouble : at::kFloat));
  if (input.numel() == 0) return acc.to(input.scalar_type());
  ResampleTarget t;
  t.in = to_view(input, "input");
  t.out = to_view(go, "grad_output");
  t.mode = static_cast<Interp>(mode);
  t.padding = static_cast<Padding>(padding);
  const c10::DeviceGuard guard(input.device());
  call_core([&] {
    resample_backward_input(t, m.data_ptr<double>(), align_corners, acc.data_ptr(),
                            current_stream(input));
  });
  return acc.to(input.scalar_type());
}

at::Tensor backward_matrix_impl(at::TensorList grad_outputs, at::TensorList inputs,
                                const at::Tensor& matrices, at::IntArrayRef modes,
                                at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                bool align_corners) {
  TORCH_CHECK_VALUE(grad_outputs.size() == inputs.size(), "one grad_output per input");
  const at::Tensor m = matrices.to(at::kDouble).contiguous();
  // Only linear inputs whose output received a gradient contribute (nearest has none).
  std::vector<at::Tensor> gos;
  std::vector<ResampleTarget> live;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(!(grad_outputs[i].defined() && modes[i] >= 2),
                "voxaug::resample: cubic interpolation has no gradient w.r.t. the matrices "
                "(use linear; no B-spline order has one)");
    if (!grad_outputs[i].defined() || modes[i] != 1) continue;
    gos.push_back(grad_outputs[i].to(inputs[i].scalar_type()));
    ResampleTarget t;
    t.in = to_view(inputs[i], "input");
    t.out = to_view(gos.back(), "grad_output");
    t.mode = Interp::Linear;
    t.padding = static_cast<Padding>(paddings[i]);
    t.pad_value = pad_values[i];
    live.push_back(t);
  }
  at::Tensor grad = at::zeros({matrices.size(0), 3, 4}, matrices.options().dtype(at::kDouble));
  if (live.empty() || matrices.size(0) == 0) return grad.to(matrices.scalar_type());
  const c10::DeviceGuard guard(matrices.device());
  call_core([&] {
    resample_backward_matrix(live.data(), static_cast<int>(live.size()), m.data_ptr<double>(),
                             align_corners, grad.data_ptr<double>(), current_stream(matrices));
  });
  return grad.to(matrices.scalar_type());
}

at::Tensor backward_input_meta(const at::Tensor&, const at::Tensor& input, const at::Tensor&,
                               int64_t, int64_t, bool) {
  return at::empty(input.sizes(), input.options());
}
at::Tensor backward_matrix_meta(at::TensorList, at::TensorList, const at::Tensor& matrices,
                                at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>, bool) {
  return at::empty({matrices.size(0), 3, 4}, matrices.options());
}

using ResampleSig = std::vector<at::Tensor>(at::TensorList, const at::Tensor&, at::IntArrayRef,
                                            at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>,
                                            bool);

// Autograd: gradients w.r.t. every floating input (linear and nearest) and the matrices
// (through the linear inputs), by the backward ops above.
class ResampleFunction : public torch::autograd::Function<ResampleFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs, const at::Tensor& matrices,
                                                at::IntArrayRef out_size, at::IntArrayRef modes,
                                                at::IntArrayRef paddings,
                                                at::ArrayRef<double> pad_values,
                                                bool align_corners) {
    std::vector<at::Tensor> out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      static auto op = c10::Dispatcher::singleton()
                           .findSchemaOrThrow("voxaug::resample", "")
                           .typed<ResampleSig>();
      out = op.call(inputs, matrices, out_size, modes, paddings, pad_values, align_corners);
    }
    std::vector<at::Tensor> saved(inputs.begin(), inputs.end());
    saved.push_back(matrices);
    ctx->save_for_backward(saved);
    ctx->saved_data["modes"] = modes.vec();
    ctx->saved_data["paddings"] = paddings.vec();
    ctx->saved_data["pad_values"] = pad_values.vec();
    ctx->saved_data["align_corners"] = align_corners;
    for (size_t i = 0; i < out.size(); ++i)
      if (!at::isFloatingType(out[i].scalar_type())) ctx->mark_non_differentiable({out[i]});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor matrices = saved.back();
    saved.pop_back();
    const auto modes = ctx->saved_data["modes"].toIntVector();
    const auto paddings = ctx->saved_data["paddings"].toIntVector();
    const auto pad_values = ctx->saved_data["pad_values"].toDoubleVector();
    const bool ac = ctx->saved_data["align_corners"].toBool();
    static auto bwd_input = c10::Dispatcher::singleton()
                                .findSchemaOrThrow("voxaug::resample_backward_input", "")
                                .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                                  const at::Tensor&, int64_t, int64_t, bool)>();
    static auto bwd_matrix =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("voxaug::resample_backward_matrix", "")
            .typed<at::Tensor(at::TensorList, at::TensorList, const at::Tensor&, at::IntArrayRef,
                              at::IntArrayRef, at::ArrayRef<double>, bool)>();
    torch::autograd::variable_list result(saved.size() + 1);  // inputs..., matrices
    for (size_t i = 0; i < saved.size(); ++i) {
      if (!grads[i].defined() || !at::isFloatingType(saved[i].scalar_type()) ||
          !ctx->needs_input_grad(i))
        continue;
      result[i] = bwd_input.call(grads[i], saved[i], matrices, modes[i], paddings[i], ac);
    }
    if (ctx->needs_input_grad(saved.size())) {
      std::vector<at::Tensor> go(grads.begin(), grads.begin() + saved.size());
      result[saved.size()] = bwd_matrix.call(go, saved, matrices, modes, paddings, pad_values, ac);
    }
    // One entry per forward argument: inputs are a TensorList (flattened), then matrices and
    // the five non-tensor arguments.
    result.resize(saved.size() + 1 + 5);
    return result;
  }
};

std::vector<at::Tensor> resample_autograd(at::TensorList inputs, const at::Tensor& matrices,
                                          at::IntArrayRef out_size, at::IntArrayRef modes,
                                          at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                          bool align_corners) {
  return ResampleFunction::apply(inputs, matrices, out_size, modes, paddings, pad_values,
                                 align_corners);
}

}  // namespace

namespace {
void register_backend(torch::Library& m) {
  m.impl("resample", &resample_impl);
  m.impl("resample_backward_input", &backward_input_impl);
  m.impl("resample_backward_matrix", &backward_matrix_impl);
  m.impl("resample_patches", &resample_patches_impl);
  m.impl("resample_patches_post", &resample_patches_post_impl);
}
}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("resample", &resample_meta);
  m.impl("resample_backward_input", &backward_input_meta);
  m.impl("resample_backward_matrix", &backward_matrix_meta);
  m.impl("resample_patches", &resample_patches_meta);
  m.impl("resample_patches_post", &resample_patches_post_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("resample", &resample_autograd);
  // The patch gathers, and resample's own backward ops (no double backward).
  const char* const no_backward[] = {"resample_patches", "resample_patches_post",
                                     "resample_backward_input", "resample_backward_matrix"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
