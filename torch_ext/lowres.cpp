// voxaug torch_ext: the lowres family's op (include/voxaug/lowres.h). The per-sample
// low-resolution grids are drawn on the host (a CPU tensor) and travel to the device through
// pinned memory without a blocking copy. CPU and CUDA share one entry; Meta computes the shape.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "transform_common.h"
#include "voxaug/lowres.h"

namespace voxaug::torch_ext {
namespace {

c10::ScalarType output_dtype(std::optional<c10::ScalarType> dtype) {
  if (!dtype.has_value()) return at::kFloat;  // MONAI computes and returns float32
  const c10::ScalarType t = *dtype;
  TORCH_CHECK_VALUE(t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                    "dtype must be float64, float32, float16 or bfloat16, got ", t);
  return t;
}

void check_args(const at::Tensor& image, const at::Tensor& low_size, int64_t upsample_mode,
                bool meta) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  TORCH_CHECK_VALUE(low_size.defined() && low_size.dim() == 2 &&
                        low_size.size(0) == image.size(0) && low_size.size(1) == 3,
                    "low_size must be (N, 3) with N = ", image.size(0),
                    " (the low-resolution D, H, W per sample), got shape ",
                    low_size.defined() ? low_size.sizes() : at::IntArrayRef{});
  TORCH_CHECK_VALUE(low_size.scalar_type() == at::kLong, "low_size must be int64, got ",
                    low_size.scalar_type());
  TORCH_CHECK_VALUE(low_size.device().is_cpu() || (meta && low_size.is_meta()),
                    "low_size must be a CPU tensor (drawn on the host; the op copies it to the "
                    "device without a sync), got ",
                    low_size.device());
  TORCH_CHECK_VALUE(upsample_mode == 0 || upsample_mode == 1,
                    "upsample_mode must be 0 (trilinear) or 1 (nearest), got ", upsample_mode);
}

at::Tensor simulate_low_resolution_impl(const at::Tensor& image, const at::Tensor& low_size,
                                        int64_t upsample_mode, bool align_corners,
                                        std::optional<c10::ScalarType> dtype) {
  check_args(image, low_size, upsample_mode, false);
  at::Tensor out =
      torch_ext::empty_output(image.sizes(), image.options().dtype(output_dtype(dtype)));
  if (image.numel() == 0) return out;
  const at::Tensor ls = low_size.contiguous();
  const int64_t* l = ls.data_ptr<int64_t>();
  for (int64_t i = 0; i < ls.numel(); ++i)
    TORCH_CHECK_VALUE(l[i] >= 1, "low_size[", i / 3, "][", i % 3, "] must be >= 1, got ", l[i]);
  const c10::DeviceGuard guard(image.device());
  const at::Tensor table = image.is_cuda() ? transforms::common::pinned_host_copy(ls).to(
                                                 image.device(), at::kLong, /*non_blocking=*/true)
                                           : ls;
  LowResolutionParams p;
  p.low_size = table.data_ptr<int64_t>();
  p.upsample = static_cast<LowresUpsample>(upsample_mode);
  p.align_corners = align_corners;
  call_core([&] {
    simulate_low_resolution(to_view(image, "image"), to_view(out, "out"), p, current_stream(image));
  });
  return out;
}

at::Tensor simulate_low_resolution_meta(const at::Tensor& image, const at::Tensor& low_size,
                                        int64_t upsample_mode, bool,
                                        std::optional<c10::ScalarType> dtype) {
  check_args(image, low_size, upsample_mode, true);
  return at::empty_symint(image.sym_sizes(), image.options().dtype(output_dtype(dtype)));
}

at::Tensor simulate_low_resolution_call(const at::Tensor& image, const at::Tensor& low_size,
                                        int64_t upsample_mode, bool align_corners,
                                        std::optional<c10::ScalarType> dtype) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::simulate_low_resolution", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, bool,
                                         std::optional<c10::ScalarType>)>();
  return op.call(image, low_size, upsample_mode, align_corners, dtype);
}

// The map is linear in the image: its backward is the adjoint of the two interpolations, per
// sample (each its own low-resolution grid): the upsampling's backward to the low grid, then the
// nearest downsampling's backward to the image (torch's upsample_*3d_backward, the adjoints of
// the index rules the forward follows). Float32 math (float64 for float64 images).
class LowResolutionFunction : public torch::autograd::Function<LowResolutionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            const at::Tensor& low_size, int64_t upsample_mode, bool align_corners,
                            std::optional<c10::ScalarType> dtype) {
    ctx->saved_data["low_size"] = low_size;
    ctx->saved_data["upsample_mode"] = upsample_mode;
    ctx->saved_data["align_corners"] = align_corners;
    ctx->saved_data["image_dtype"] = image.scalar_type();
    at::AutoDispatchBelowADInplaceOrView below;
    return simulate_low_resolution_call(image, low_size, upsample_mode, align_corners, dtype);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor ls = ctx->saved_data["low_size"].toTensor().contiguous();
    const bool trilinear = ctx->saved_data["upsample_mode"].toInt() == 0;
    const bool align = ctx->saved_data["align_corners"].toBool();
    const auto image_dtype = ctx->saved_data["image_dtype"].toScalarType();
    const at::Tensor g = grads[0].to(image_dtype == at::kDouble ? at::kDouble : at::kFloat);
    const int64_t* l = ls.data_ptr<int64_t>();
    const int64_t C = g.size(1);
    const std::vector<int64_t> full{g.size(2), g.size(3), g.size(4)};
    std::vector<at::Tensor> out;
    for (int64_t n = 0; n < g.size(0); ++n) {
      const std::vector<int64_t> low{l[3 * n], l[3 * n + 1], l[3 * n + 2]};
      const at::Tensor gn = g.narrow(0, n, 1);
      if (low == full) {  // unchanged sample
        out.push_back(gn);
        continue;
      }
      const at::Tensor g_low =
          trilinear
              ? at::upsample_trilinear3d_backward(gn, full, {1, C, low[0], low[1], low[2]}, align)
              : at::upsample_nearest3d_backward(gn, full, {1, C, low[0], low[1], low[2]});
      out.push_back(at::upsample_nearest3d_backward(g_low, low, {1, C, full[0], full[1], full[2]}));
    }
    return first_grad_only(at::cat(out).to(image_dtype), 4);
  }
};

at::Tensor simulate_low_resolution_autograd(const at::Tensor& image, const at::Tensor& low_size,
                                            int64_t upsample_mode, bool align_corners,
                                            std::optional<c10::ScalarType> dtype) {
  return LowResolutionFunction::apply(image, low_size, upsample_mode, align_corners, dtype);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("simulate_low_resolution", &simulate_low_resolution_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("simulate_low_resolution", &simulate_low_resolution_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("simulate_low_resolution", &simulate_low_resolution_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("simulate_low_resolution", &simulate_low_resolution_autograd);
}

}  // namespace voxaug::torch_ext
