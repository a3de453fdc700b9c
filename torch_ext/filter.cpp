// voxaug torch_ext: the filter family's op (gaussian_smooth). CPU and CUDA share one entry
// (voxaug::separable_filter picks the backend from the views); Meta computes the shape;
// Autograd uses the filter's self-adjointness (symmetric taps, zero padding), and with
// scipy's reflection the fold of the mirrored terms.
//
// sigma is a CPU tensor by design: the taps are built on the host from it (MONAI computes
// them on the host as well) and reach the device by one asynchronous copy from pinned
// memory on the current stream, so the op never waits for the device. A CUDA sigma would
// need a device-to-host read (a sync) and is rejected with a message saying so.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "voxaug/error.h"
#include "voxaug/filter.h"

namespace voxaug::torch_ext {
namespace {

c10::ScalarType output_dtype(const at::Tensor& image, std::optional<c10::ScalarType> dtype) {
  if (dtype.has_value()) {
    const c10::ScalarType t = *dtype;
    TORCH_CHECK_VALUE(t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                      "dtype must be float64, float32, float16 or bfloat16, got ", t);
    return t;
  }
  return at::isFloatingType(image.scalar_type()) ? image.scalar_type() : at::kFloat;
}

struct Kind {
  GaussianTaps taps = GaussianTaps::Erf;
  FilterBorder border = FilterBorder::Zeros;
};

Kind parse_kind(c10::string_view taps, c10::string_view border) {
  Kind k;
  if (taps == "sampled") {
    k.taps = GaussianTaps::Sampled;
  } else {
    TORCH_CHECK_VALUE(taps == "erf",
                      "taps must be \"erf\" (MONAI's GaussianFilter) or \"sampled\" "
                      "(scipy.ndimage.gaussian_filter), got \"",
                      taps, "\"");
  }
  if (border == "reflect") {
    k.border = FilterBorder::Reflect;
  } else {
    TORCH_CHECK_VALUE(border == "zeros",
                      "border must be \"zeros\" (MONAI) or \"reflect\" (scipy.ndimage's "
                      "mode=\"reflect\"), got \"",
                      border, "\"");
  }
  return k;
}

void check_args(const at::Tensor& image, const at::Tensor& sigma, double truncated, bool meta) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  TORCH_CHECK_VALUE(sigma.defined(), "sigma must be a defined tensor");
  TORCH_CHECK_VALUE(sigma.dim() == 2 && sigma.size(0) == image.size(0) && sigma.size(1) == 3,
                    "sigma must be (N, 3) with N = ", image.size(0),
                    " (one sigma per sample and spatial axis D, H, W), got shape ", sigma.sizes());
  TORCH_CHECK_VALUE(at::isFloatingType(sigma.scalar_type()), "sigma must be floating, got ",
                    sigma.scalar_type());
  TORCH_CHECK_VALUE(sigma.device().is_cpu() || (meta && sigma.is_meta()),
                    "sigma must be a CPU tensor (the taps are built on the host, so the op never "
                    "syncs with the device), got ",
                    sigma.device());
  TORCH_CHECK_VALUE(std::isfinite(truncated) && truncated > 0.0,
                    "truncated must be positive and finite, got ", truncated);
}

at::Tensor gaussian_smooth_impl(const at::Tensor& image, const at::Tensor& sigma, double truncated,
                                std::optional<c10::ScalarType> dtype, c10::string_view taps,
                                c10::string_view border) {
  check_args(image, sigma, truncated, false);
  const Kind kind = parse_kind(taps, border);
  at::Tensor out =
      torch_ext::empty_output(image.sizes(), image.options().dtype(output_dtype(image, dtype)));
  const at::Tensor s = sigma.to(at::kDouble).contiguous();
  const int64_t n = image.size(0);
  int64_t width = 0;
  call_core([&] { width = gaussian_table_width(s.data_ptr<double>(), n, truncated, kind.taps); });
  if (image.numel() == 0) return out;
  const bool cuda = image.is_cuda();
  at::Tensor host =
      at::empty({n * 3 * width}, at::TensorOptions().dtype(at::kDouble).pinned_memory(cuda));
  int axes = 0;
  call_core([&] {
    axes = gaussian_table(s.data_ptr<double>(), n, truncated, width, host.data_ptr<double>(),
                          kind.taps);
  });
  const c10::DeviceGuard guard(image.device());
  const at::Tensor table =
      cuda ? host.to(image.device(), at::kDouble, /*non_blocking=*/true) : host;
  const VolumeView vin = to_view(image, "image");
  const VolumeView vout = to_view(out, "output");
  int64_t bytes = 0;
  call_core([&] { bytes = separable_filter_workspace_bytes(vin, vout, axes); });
  const at::Tensor ws = at::empty({bytes > 0 ? bytes : 1}, image.options().dtype(at::kByte));
  call_core([&] {
    separable_filter(vin, vout, FilterTaps{table.data_ptr<double>(), width, axes, kind.border},
                     ws.data_ptr(), bytes, current_stream(image));
  });
  return out;
}

at::Tensor gaussian_smooth_meta(const at::Tensor& image, const at::Tensor& sigma, double truncated,
                                std::optional<c10::ScalarType> dtype, c10::string_view taps,
                                c10::string_view border) {
  check_args(image, sigma, truncated, true);
  (void)parse_kind(taps, border);
  return at::empty_symint(image.sym_sizes(), image.options().dtype(output_dtype(image, dtype)));
}

using SmoothSig = at::Tensor(const at::Tensor&, const at::Tensor&, double,
                             std::optional<c10::ScalarType>, c10::string_view, c10::string_view);

at::Tensor call_smooth(const at::Tensor& image, const at::Tensor& sigma, double truncated,
                       std::optional<c10::ScalarType> dtype, c10::string_view taps,
                       c10::string_view border) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::gaussian_smooth", "")
                       .typed<SmoothSig>();
  return op.call(image, sigma, truncated, dtype, taps, border);
}

// The adjoint of the reflect-bordered filter, one axis at a time in reverse order (W, H, D):
// the forward pass along an axis is crop(correlate_zeros(reflect_pad(x))), so its adjoint is
// fold(correlate_zeros(zero_pad(g))) -- the taps are symmetric, so correlation is its own
// adjoint -- where fold adds each padded position onto the position it mirrors
// (scipy's "reflect", as detail::reflect_index).
at::Tensor reflect_adjoint(at::Tensor g, const at::Tensor& sigma, double truncated,
                           c10::string_view taps, at::ScalarType dtype) {
  const at::Tensor s = sigma.to(at::kDouble).contiguous();
  const int64_t n = g.size(0);
  const Kind kind = parse_kind(taps, "reflect");
  for (int a = 2; a >= 0; --a) {
    at::Tensor sa = at::zeros_like(s);
    sa.select(1, a).copy_(s.select(1, a));
    int64_t width = 0;
    call_core(
        [&] { width = gaussian_table_width(sa.data_ptr<double>(), n, truncated, kind.taps); });
    const int64_t rmax = (width - 2) / 2;
    if (rmax == 0) continue;
    const int64_t L = g.size(a + 2);
    std::vector<int64_t> pad(6, 0);
    pad[2 * (2 - a)] = rmax;
    pad[2 * (2 - a) + 1] = rmax;
    const at::Tensor ext = call_smooth(at::constant_pad_nd(g, pad, 0.0), sa, truncated,
                                       g.scalar_type(), taps, "zeros");
    // The fold: input positions j = -rmax .. L + rmax - 1 in whole periods [kL, (k + 1) L),
    // which mirror onto 0 .. L - 1 forwards for even k and backwards for odd k (scipy's
    // "reflect", detail::reflect_index): slice additions in a fixed order, deterministic.
    const int dim = a + 2;
    at::Tensor folded = ext.narrow(dim, rmax, L).clone();
    for (int64_t k = -((rmax + L - 1) / L); k <= (rmax + L - 1) / L; ++k) {
      if (k == 0) continue;
      const int64_t lo = std::max(k * L, -rmax), hi = std::min((k + 1) * L, L + rmax);
      if (lo >= hi) continue;
      at::Tensor part = ext.narrow(dim, lo + rmax, hi - lo);
      const bool odd = (k % 2) != 0;
      const int64_t first = odd ? (k + 1) * L - hi : lo - k * L;  // where the slice lands
      if (odd) part = part.flip({dim});
      folded.narrow(dim, first, hi - lo).add_(part);
    }
    g = folded;
  }
  return g.to(dtype);
}

// The filter is linear and self-adjoint with zero padding (symmetric taps), so the gradient
// w.r.t. the image is the same filter applied to the output's gradient; with reflection the
// gradient is reflect_adjoint's.
class GaussianSmoothFunction : public torch::autograd::Function<GaussianSmoothFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            const at::Tensor& sigma, double truncated,
                            std::optional<c10::ScalarType> dtype, c10::string_view taps,
                            c10::string_view border) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = call_smooth(image, sigma, truncated, dtype, taps, border);
    }
    ctx->saved_data["sigma"] = sigma.detach();
    ctx->saved_data["truncated"] = truncated;
    ctx->saved_data["image_dtype"] = static_cast<int64_t>(image.scalar_type());
    ctx->saved_data["taps"] = std::string(taps);
    ctx->saved_data["border"] = std::string(border);
    if (!at::isFloatingType(image.scalar_type())) ctx->mark_non_differentiable({out});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor sigma = ctx->saved_data["sigma"].toTensor();
    const double truncated = ctx->saved_data["truncated"].toDouble();
    const auto image_dtype = static_cast<c10::ScalarType>(ctx->saved_data["image_dtype"].toInt());
    const std::string taps = ctx->saved_data["taps"].toStringRef();
    const std::string border = ctx->saved_data["border"].toStringRef();
    at::Tensor grad_image;
    if (grads[0].defined() && ctx->needs_input_grad(0)) {
      grad_image = border == "reflect"
                       ? reflect_adjoint(grads[0], sigma, truncated, taps, image_dtype)
                       : call_smooth(grads[0], sigma, truncated, image_dtype, taps, border);
    }
    return first_grad_only(grad_image, 5);
  }
};

at::Tensor gaussian_smooth_autograd(const at::Tensor& image, const at::Tensor& sigma,
                                    double truncated, std::optional<c10::ScalarType> dtype,
                                    c10::string_view taps, c10::string_view border) {
  return GaussianSmoothFunction::apply(image, sigma, truncated, dtype, taps, border);
}

}  // namespace

// Median filter: float32 out, the core's box median (include/voxaug/filter.h).
void check_median(const at::Tensor& image, at::IntArrayRef radius, bool meta) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  TORCH_CHECK_VALUE(radius.size() == 3, "radius must have 3 entries (D, H, W), got ",
                    radius.size());
}

at::Tensor median_filter_impl(const at::Tensor& image, at::IntArrayRef radius) {
  check_median(image, radius, false);
  at::Tensor out = empty_output(image.sizes(), image.options().dtype(at::kFloat));
  if (image.numel() == 0) return out;
  const int64_t r[3] = {radius[0], radius[1], radius[2]};
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    median_filter(to_view(image, "image"), to_view(out, "out"), r, current_stream(image));
  });
  return out;
}

at::Tensor median_filter_meta(const at::Tensor& image, at::IntArrayRef radius) {
  check_median(image, radius, true);
  return at::empty(image.sizes(), image.options().dtype(at::kFloat));
}

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("median_filter", &median_filter_impl);
  m.impl("gaussian_smooth", &gaussian_smooth_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("median_filter", &median_filter_impl);
  m.impl("gaussian_smooth", &gaussian_smooth_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("median_filter", &median_filter_meta);
  m.impl("gaussian_smooth", &gaussian_smooth_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("gaussian_smooth", &gaussian_smooth_autograd);
  const char* const no_backward[] = {"median_filter"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
