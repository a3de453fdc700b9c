// voxaug torch_ext: the stats family's ops (moments, percentiles, normalize_intensity,
// scale_intensity_range_percentiles, piecewise_linear). CPU and CUDA share one entry each (the core
// picks the backend from the views); Meta computes shapes. Statistics stay on the image's device:
// the transforms compute them and apply them without a host round trip. User-given subtrahend /
// divisor lists reach the device by one asynchronous copy from pinned memory.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <vector>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "voxaug/error.h"
#include "voxaug/stats.h"

namespace voxaug::torch_ext {
namespace {

void check_image(const at::Tensor& image, bool meta = false) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  TORCH_CHECK_VALUE(image.scalar_type() != at::kLong,
                    "image: int64 images are not supported (float64, float32, float16, bfloat16, "
                    "uint8, int16 or int32)");
}

int64_t segments_per_sample(const at::Tensor& image, bool channel_wise) {
  return channel_wise ? image.size(1) : 1;
}

void check_not_empty(const at::Tensor& image, const char* what) {
  TORCH_CHECK_VALUE(image.numel() > 0, "image: ", what, " of an empty volume are undefined, shape ",
                    image.sizes());
}

c10::ScalarType output_dtype(const at::Tensor& image, std::optional<c10::ScalarType> dtype) {
  if (dtype.has_value()) {
    const c10::ScalarType t = *dtype;
    TORCH_CHECK_VALUE(t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
                      "dtype must be float64, float32, float16 or bfloat16, got ", t);
    return t;
  }
  return at::isFloatingType(image.scalar_type()) ? image.scalar_type() : at::kFloat;
}

at::Tensor workspace(const at::Tensor& image, int64_t bytes) {
  return at::empty({bytes > 0 ? bytes : 1}, image.options().dtype(at::kByte));
}

// ---- moments ----
at::Tensor moments_into(const at::Tensor& image, bool channel_wise, bool nonzero) {
  const int64_t segs = segments_per_sample(image, channel_wise);
  at::Tensor out = at::empty({image.size(0), segs, 3}, image.options().dtype(at::kDouble));
  if (out.numel() == 0) return out;
  check_not_empty(image, "moments");
  const c10::DeviceGuard guard(image.device());
  const VolumeView v = to_view(image, "image");
  int64_t bytes = 0;
  call_core([&] { bytes = moments_workspace_bytes(v, channel_wise); });
  const at::Tensor ws = workspace(image, bytes);
  call_core([&] {
    moments(v, out.data_ptr<double>(), channel_wise, nonzero, ws.data_ptr(), bytes,
            current_stream(image));
  });
  return out;
}

at::Tensor moments_impl(const at::Tensor& image, bool channel_wise, bool nonzero) {
  check_image(image);
  return moments_into(image, channel_wise, nonzero);
}

at::Tensor moments_meta(const at::Tensor& image, bool channel_wise, bool /*nonzero*/) {
  check_image(image, true);
  return at::empty({image.size(0), segments_per_sample(image, channel_wise), 3},
                   image.options().dtype(at::kDouble));
}

// ---- percentiles ----
void check_q(at::ArrayRef<double> q) {
  for (size_t k = 0; k < q.size(); ++k)
    TORCH_CHECK_VALUE(q[k] >= 0.0 && q[k] <= 100.0, "q[", k,
                      "] must be a percentile in [0, 100], got ", q[k]);
}

at::Tensor percentiles_into(const at::Tensor& image, at::ArrayRef<double> q, bool channel_wise) {
  const int64_t segs = segments_per_sample(image, channel_wise);
  const int64_t nq = static_cast<int64_t>(q.size());
  at::Tensor out = at::empty({image.size(0), segs, nq}, image.options().dtype(at::kDouble));
  if (out.numel() == 0) return out;
  check_not_empty(image, "percentiles");
  const c10::DeviceGuard guard(image.device());
  const VolumeView v = to_view(image, "image");
  int64_t bytes = 0;
  call_core([&] { bytes = percentiles_workspace_bytes(v, channel_wise); });
  const at::Tensor ws = workspace(image, bytes);
  call_core([&] {
    percentiles(v, q.data(), nq, out.data_ptr<double>(), channel_wise, ws.data_ptr(), bytes,
                current_stream(image));
  });
  return out;
}

at::Tensor percentiles_impl(const at::Tensor& image, at::ArrayRef<double> q, bool channel_wise) {
  check_image(image);
  check_q(q);
  return percentiles_into(image, q, channel_wise);
}

at::Tensor percentiles_meta(const at::Tensor& image, at::ArrayRef<double> q, bool channel_wise) {
  check_image(image, true);
  check_q(q);
  return at::empty(
      {image.size(0), segments_per_sample(image, channel_wise), static_cast<int64_t>(q.size())},
      image.options().dtype(at::kDouble));
}

// ---- normalize_intensity ----
// A user value list: one value for every segment, or one per segment of a sample (channels
// when channel_wise), expanded to N * segs float64 on the image's device.
void check_values(const std::optional<at::ArrayRef<double>>& values, const char* name, int64_t segs,
                  bool channel_wise) {
  if (!values) return;
  const int64_t len = static_cast<int64_t>(values->size());
  if (channel_wise) {
    TORCH_CHECK_VALUE(len == 1 || len == segs, name, " must have 1 value or one per channel (",
                      segs, "), got ", len);
  } else {
    TORCH_CHECK_VALUE(len == 1, name, " must have 1 value when channel_wise=False, got ", len);
  }
}

at::Tensor per_segment_values(const at::Tensor& image, at::ArrayRef<double> values, int64_t segs) {
  const int64_t n = image.size(0);
  const bool cuda = image.is_cuda();
  at::Tensor host =
      at::empty({n * segs}, at::TensorOptions().dtype(at::kDouble).pinned_memory(cuda));
  double* p = host.data_ptr<double>();
  for (int64_t i = 0; i < n * segs; ++i) p[i] = values.size() == 1 ? values[0] : values[i % segs];
  return cuda ? host.to(image.device(), at::kDouble, /*non_blocking=*/true) : host;
}

at::Tensor normalize_intensity_impl(const at::Tensor& image,
                                    std::optional<at::ArrayRef<double>> subtrahend,
                                    std::optional<at::ArrayRef<double>> divisor, bool nonzero,
                                    bool channel_wise, std::optional<c10::ScalarType> dtype) {
  check_image(image);
  const int64_t segs = segments_per_sample(image, channel_wise);
  check_values(subtrahend, "subtrahend", segs, channel_wise);
  check_values(divisor, "divisor", segs, channel_wise);
  at::Tensor out =
      torch_ext::empty_output(image.sizes(), image.options().dtype(output_dtype(image, dtype)));
  if (image.numel() == 0) return out;
  const c10::DeviceGuard guard(image.device());
  at::Tensor stats, sub, div;
  if (!subtrahend || !divisor) stats = moments_into(image, channel_wise, nonzero);
  if (subtrahend) sub = per_segment_values(image, *subtrahend, segs);
  if (divisor) div = per_segment_values(image, *divisor, segs);
  NormalizeIntensityArgs args;
  args.moments = stats.defined() ? stats.data_ptr<double>() : nullptr;
  args.subtrahend = sub.defined() ? sub.data_ptr<double>() : nullptr;
  args.divisor = div.defined() ? div.data_ptr<double>() : nullptr;
  args.nonzero = nonzero;
  args.channel_wise = channel_wise;
  call_core([&] {
    normalize_intensity(to_view(image, "image"), to_view(out, "output"), args,
                        current_stream(image));
  });
  return out;
}

at::Tensor normalize_intensity_meta(const at::Tensor& image,
                                    std::optional<at::ArrayRef<double>> subtrahend,
                                    std::optional<at::ArrayRef<double>> divisor, bool /*nonzero*/,
                                    bool channel_wise, std::optional<c10::ScalarType> dtype) {
  check_image(image, true);
  const int64_t segs = segments_per_sample(image, channel_wise);
  check_values(subtrahend, "subtrahend", segs, channel_wise);
  check_values(divisor, "divisor", segs, channel_wise);
  return at::empty_symint(image.sym_sizes(), image.options().dtype(output_dtype(image, dtype)));
}

// ---- scale_intensity_range_percentiles ----
void check_srp_args(double lower, double upper, std::optional<double> b_min,
                    std::optional<double> b_max, bool relative) {
  TORCH_CHECK_VALUE(lower >= 0.0 && lower <= 100.0, "lower must be a percentile in [0, 100], got ",
                    lower);
  TORCH_CHECK_VALUE(upper >= 0.0 && upper <= 100.0, "upper must be a percentile in [0, 100], got ",
                    upper);
  TORCH_CHECK_VALUE(!relative || (b_min && b_max),
                    "relative=True needs both b_min and b_max (MONAI: \"If it is relative, b_min "
                    "and b_max should not be None.\")");
  TORCH_CHECK_VALUE(!b_min || std::isfinite(*b_min), "b_min must be finite, got ", *b_min);
  TORCH_CHECK_VALUE(!b_max || std::isfinite(*b_max), "b_max must be finite, got ", *b_max);
}

at::Tensor srp_impl(const at::Tensor& image, double lower, double upper,
                    std::optional<double> b_min, std::optional<double> b_max, bool clip,
                    bool relative, bool channel_wise, std::optional<c10::ScalarType> dtype) {
  check_image(image);
  check_srp_args(lower, upper, b_min, b_max, relative);
  at::Tensor out =
      torch_ext::empty_output(image.sizes(), image.options().dtype(output_dtype(image, dtype)));
  if (image.numel() == 0) return out;
  const c10::DeviceGuard guard(image.device());
  const std::vector<double> q{lower, upper};
  const at::Tensor pct = percentiles_into(image, q, channel_wise);
  ScaleIntensityRangePercentilesArgs args;
  args.percentiles = pct.data_ptr<double>();
  args.lower = lower;
  args.upper = upper;
  const double bmin = b_min.value_or(0.0), bmax = b_max.value_or(0.0);
  args.b_min = b_min ? &bmin : nullptr;
  args.b_max = b_max ? &bmax : nullptr;
  args.clip = clip;
  args.relative = relative;
  args.channel_wise = channel_wise;
  call_core([&] {
    scale_intensity_range_percentiles(to_view(image, "image"), to_view(out, "output"), args,
                                      current_stream(image));
  });
  return out;
}

at::Tensor srp_meta(const at::Tensor& image, double lower, double upper,
                    std::optional<double> b_min, std::optional<double> b_max, bool /*clip*/,
                    bool relative, bool /*channel_wise*/, std::optional<c10::ScalarType> dtype) {
  check_image(image, true);
  check_srp_args(lower, upper, b_min, b_max, relative);
  return at::empty_symint(image.sym_sizes(), image.options().dtype(output_dtype(image, dtype)));
}

// ---- piecewise_linear ----
void check_piecewise(const at::Tensor& image, const at::Tensor& table, int64_t pieces, bool meta) {
  check_5d(image, "image", meta);
  TORCH_CHECK_VALUE(image.scalar_type() == at::kFloat, "image must be float32, got ",
                    image.scalar_type());
  TORCH_CHECK_VALUE(pieces >= 1 && pieces <= kMaxPiecewisePieces, "pieces must be in [1, ",
                    kMaxPiecewisePieces, "], got ", pieces);
  TORCH_CHECK_VALUE(table.scalar_type() == at::kDouble && table.dim() == 2 &&
                        table.size(0) == image.size(0) && table.size(1) == 3 * pieces - 1,
                    "table must be float64 of shape (N, 3 * pieces - 1) = (", image.size(0), ", ",
                    3 * pieces - 1, "), got ", table.scalar_type(), " ", table.sizes());
  TORCH_CHECK_VALUE(table.device() == image.device(), "table must be on the image's device ",
                    image.device(), ", got ", table.device());
}

at::Tensor piecewise_linear_impl(const at::Tensor& image, const at::Tensor& table, int64_t pieces) {
  check_piecewise(image, table, pieces, false);
  at::Tensor out = torch_ext::empty_output(image.sizes(), image.options());
  if (image.numel() == 0) return out;
  const at::Tensor t = table.contiguous();
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    piecewise_linear(to_view(image, "image"), to_view(out, "output"), t.data_ptr<double>(),
                     static_cast<int>(pieces), current_stream(image));
  });
  return out;
}

at::Tensor piecewise_linear_meta(const at::Tensor& image, const at::Tensor& table, int64_t pieces) {
  check_piecewise(image, table, pieces, true);
  return at::empty_symint(image.sym_sizes(), image.options());
}

// Statistics are not differentiable functions the transforms backpropagate through: their
// outputs never require grad.
at::Tensor moments_autograd(const at::Tensor& image, bool channel_wise, bool nonzero) {
  at::AutoDispatchBelowADInplaceOrView below;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::moments", "")
                       .typed<at::Tensor(const at::Tensor&, bool, bool)>();
  return op.call(image, channel_wise, nonzero);
}
at::Tensor percentiles_autograd(const at::Tensor& image, at::ArrayRef<double> q,
                                bool channel_wise) {
  at::AutoDispatchBelowADInplaceOrView below;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::percentiles", "")
                       .typed<at::Tensor(const at::Tensor&, at::ArrayRef<double>, bool)>();
  return op.call(image, q, channel_wise);
}

// NormalizeIntensity's backward, through its statistics (as torch's layer_norm / instance_norm;
// MONAI's takes them as Python numbers, constants for its autograd):
// y = (x - c) / s per segment over its counted set S (every element, or the nonzero ones), c
// the subtrahend or the mean m, s the divisor or the population std (a std that rounds to 0 in
// the compute type is the constant 1, as the forward). With n = |S| and means over S:
//   dL/dx_j = g_j / s - [c = m] mean(g) / s - [s = std] (x_j - m) / s^2 * mean(g y),  j in S;
//   dL/dx_j = g_j (the uncounted zeros pass through unchanged).
// The statistics are the forward's (the moments op: float64 count, mean, std); the rest in
// float64 with ATen ops (the forward's float32 rounding of c and s is not differentiated).
at::Tensor normalize_intensity_call(const at::Tensor& image,
                                    std::optional<at::ArrayRef<double>> subtrahend,
                                    std::optional<at::ArrayRef<double>> divisor, bool nonzero,
                                    bool channel_wise, std::optional<c10::ScalarType> dtype) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::normalize_intensity", "")
                       .typed<at::Tensor(const at::Tensor&, std::optional<at::ArrayRef<double>>,
                                         std::optional<at::ArrayRef<double>>, bool, bool,
                                         std::optional<c10::ScalarType>)>();
  return op.call(image, subtrahend, divisor, nonzero, channel_wise, dtype);
}

// (N, segs, 1) float64 of a user value list (one value, or one per segment of a sample).
at::Tensor value_column(const std::vector<double>& v, int64_t n, int64_t segs,
                        const at::TensorOptions& o) {
  at::Tensor t = at::tensor(v, at::TensorOptions().dtype(at::kDouble)).to(o.device());
  return (v.size() == 1 ? t.expand({segs}) : t).reshape({1, segs, 1}).expand({n, segs, 1});
}

class NormalizeIntensityFunction : public torch::autograd::Function<NormalizeIntensityFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            std::optional<at::ArrayRef<double>> subtrahend,
                            std::optional<at::ArrayRef<double>> divisor, bool nonzero,
                            bool channel_wise, std::optional<c10::ScalarType> dtype) {
    ctx->save_for_backward({image});
    ctx->saved_data["has_sub"] = subtrahend.has_value();
    ctx->saved_data["has_div"] = divisor.has_value();
    if (subtrahend)
      ctx->saved_data["sub"] = std::vector<double>(subtrahend->begin(), subtrahend->end());
    if (divisor) ctx->saved_data["div"] = std::vector<double>(divisor->begin(), divisor->end());
    ctx->saved_data["nonzero"] = nonzero;
    ctx->saved_data["channel_wise"] = channel_wise;
    at::AutoDispatchBelowADInplaceOrView below;
    return normalize_intensity_call(image, subtrahend, divisor, nonzero, channel_wise, dtype);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    if (x.sym_numel() == 0) return first_grad_only(at::zeros_like(x), 5);
    const bool has_sub = ctx->saved_data["has_sub"].toBool();
    const bool has_div = ctx->saved_data["has_div"].toBool();
    const bool nonzero = ctx->saved_data["nonzero"].toBool();
    const bool channel_wise = ctx->saved_data["channel_wise"].toBool();
    const int64_t n = x.size(0), segs = segments_per_sample(x, channel_wise);
    const at::Tensor X = x.to(at::kDouble).reshape({n, segs, -1});
    const at::Tensor G = grads[0].to(at::kDouble).reshape({n, segs, -1});
    const at::Tensor M = nonzero ? X.ne(0).to(at::kDouble) : at::ones_like(X);
    const at::Tensor st = moments_autograd(x.detach(), channel_wise, nonzero);  // (n, segs, 3)
    const at::Tensor cnt = st.narrow(-1, 0, 1).clamp_min(1.0), mean = st.narrow(-1, 1, 1);
    const at::Tensor c =
        has_sub ? value_column(ctx->saved_data["sub"].toDoubleVector(), n, segs, X.options())
                : mean;
    at::Tensor s, learned_std;  // s as the forward divides; learned_std: where s is the std
    if (has_div) {
      s = value_column(ctx->saved_data["div"].toDoubleVector(), n, segs, X.options());
      learned_std = at::zeros_like(s, at::kBool);
    } else {
      const at::Tensor sd = st.narrow(-1, 2, 1);
      // The forward's zero test in its compute type (float64 images: float64, else float32).
      const at::Tensor rounded =
          x.scalar_type() == at::kDouble ? sd : sd.to(at::kFloat).to(at::kDouble);
      learned_std = rounded.ne(0);
      s = at::where(learned_std, sd, at::ones_like(sd));
    }
    s = at::where(s.eq(0), at::ones_like(s), s);  // a given divisor 0: 1, as the forward
    const at::Tensor Y = (X - c) / s;
    at::Tensor g = G / s;
    if (!has_sub) g = g - (G * M).sum(-1, true) / cnt / s;
    g = g - at::where(learned_std, (X - mean) / (s * s) * ((G * Y * M).sum(-1, true) / cnt),
                      at::zeros_like(X));
    g = at::where(M.to(at::kBool), g, G);
    return first_grad_only(g.reshape(x.sizes()).to(x.scalar_type()), 5);
  }
};

at::Tensor normalize_intensity_autograd(const at::Tensor& image,
                                        std::optional<at::ArrayRef<double>> subtrahend,
                                        std::optional<at::ArrayRef<double>> divisor, bool nonzero,
                                        bool channel_wise, std::optional<c10::ScalarType> dtype) {
  return NormalizeIntensityFunction::apply(image, subtrahend, divisor, nonzero, channel_wise,
                                           dtype);
}

// ScaleIntensityRangePercentiles' backward, through its percentiles as MONAI's (torch.quantile
// for images of up to 10^6 voxels) differentiates: a = the lower, A = the upper percentile of
// the segment, each the linear interpolation (1 - f) v[k] + f v[k + 1] of two order statistics
// (the stable sort's elements: the gradient goes to them, weights 1 - f and f). With A != a,
// y = s z + b (z = (x - a) / (A - a), s = b_max - b_min or 1), clamped with clip, so with h the
// gradient that passes the clamp (torch.clamp's: where b_min <= y <= b_max):
//   dL/dx_j = s / (A - a) * (h_j - da_j sum(h) - (dA_j - da_j) sum(h z));
// with A == a, y = x - a (+ b_min): dL/dx_j = g_j - da_j sum(g). In float64 with ATen ops.
at::Tensor srp_call(const at::Tensor& image, double lower, double upper,
                    std::optional<double> b_min, std::optional<double> b_max, bool clip,
                    bool relative, bool channel_wise, std::optional<c10::ScalarType> dtype) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::scale_intensity_range_percentiles", "")
                       .typed<at::Tensor(const at::Tensor&, double, double, std::optional<double>,
                                         std::optional<double>, bool, bool, bool,
                                         std::optional<c10::ScalarType>)>();
  return op.call(image, lower, upper, b_min, b_max, clip, relative, channel_wise, dtype);
}

// The q-th percentile of each row of X (sorted values `v`, stable-sort indices `order`, both
// (n, segs, L)): its value (n, segs, 1) and its derivative with respect to X (one-hot weights).
std::pair<at::Tensor, at::Tensor> percentile_and_weights(const at::Tensor& v,
                                                         const at::Tensor& order, double q) {
  const int64_t L = v.size(-1);
  const double pos = q / 100.0 * static_cast<double>(L - 1);
  const int64_t lo = std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), L - 1);
  const int64_t hi = std::min<int64_t>(lo + 1, L - 1);
  const double f = pos - static_cast<double>(lo);
  const at::Tensor vlo = v.narrow(-1, lo, 1), vhi = v.narrow(-1, hi, 1);
  const at::Tensor value = vlo + f * (vhi - vlo);
  at::Tensor w = at::zeros_like(v);
  w.scatter_add_(-1, order.narrow(-1, lo, 1), at::full_like(vlo, 1.0 - f));
  w.scatter_add_(-1, order.narrow(-1, hi, 1), at::full_like(vlo, f));
  return {value, w};
}

class SrpFunction : public torch::autograd::Function<SrpFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            double lower, double upper, std::optional<double> b_min,
                            std::optional<double> b_max, bool clip, bool relative,
                            bool channel_wise, std::optional<c10::ScalarType> dtype) {
    ctx->save_for_backward({image});
    ctx->saved_data["lower"] = lower;
    ctx->saved_data["upper"] = upper;
    ctx->saved_data["b_min"] = b_min ? c10::IValue(*b_min) : c10::IValue();
    ctx->saved_data["b_max"] = b_max ? c10::IValue(*b_max) : c10::IValue();
    ctx->saved_data["clip"] = clip;
    ctx->saved_data["relative"] = relative;
    ctx->saved_data["channel_wise"] = channel_wise;
    at::AutoDispatchBelowADInplaceOrView below;
    return srp_call(image, lower, upper, b_min, b_max, clip, relative, channel_wise, dtype);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    if (x.sym_numel() == 0) return first_grad_only(at::zeros_like(x), 8);
    const double lower = ctx->saved_data["lower"].toDouble();
    const double upper = ctx->saved_data["upper"].toDouble();
    const c10::IValue bmin_v = ctx->saved_data["b_min"], bmax_v = ctx->saved_data["b_max"];
    std::optional<double> bmin, bmax;
    if (!bmin_v.isNone()) bmin = bmin_v.toDouble();
    if (!bmax_v.isNone()) bmax = bmax_v.toDouble();
    if (ctx->saved_data["relative"].toBool()) {  // both given (checked by the forward)
      const double lo = *bmin, span = *bmax - *bmin;
      bmin = span * (lower / 100.0) + lo;
      bmax = span * (upper / 100.0) + lo;
    }
    const int64_t n = x.size(0),
                  segs = segments_per_sample(x, ctx->saved_data["channel_wise"].toBool());
    const at::Tensor X = x.to(at::kDouble).reshape({n, segs, -1});
    const at::Tensor G = grads[0].to(at::kDouble).reshape({n, segs, -1});
    const auto sorted = at::sort(X, /*stable=*/true, -1, false);
    const auto [a, da] = percentile_and_weights(std::get<0>(sorted), std::get<1>(sorted), lower);
    const auto [A, dA] = percentile_and_weights(std::get<0>(sorted), std::get<1>(sorted), upper);
    const at::Tensor flat = A.eq(a);  // MONAI: x - a (+ b_min), unscaled, unclipped
    const at::Tensor span = at::where(flat, at::ones_like(A), A - a);
    const at::Tensor Z = (X - a) / span;
    const double s = (bmin && bmax) ? *bmax - *bmin : 1.0;
    at::Tensor H = G;
    if (ctx->saved_data["clip"].toBool()) {
      const at::Tensor Y = (bmin && bmax) ? Z * s + *bmin : Z;
      at::Tensor pass = at::ones_like(Y, at::kBool);
      if (bmin) pass = pass & Y.ge(*bmin);
      if (bmax) pass = pass & Y.le(*bmax);
      H = at::where(pass | flat, G, at::zeros_like(G));
    }
    const at::Tensor scaled =
        (s / span) * (H - da * H.sum(-1, true) - (dA - da) * (H * Z).sum(-1, true));
    const at::Tensor unscaled = G - da * G.sum(-1, true);
    const at::Tensor g = at::where(flat, unscaled, scaled);
    return first_grad_only(g.reshape(x.sizes()).to(x.scalar_type()), 8);
  }
};

at::Tensor srp_autograd(const at::Tensor& image, double lower, double upper,
                        std::optional<double> b_min, std::optional<double> b_max, bool clip,
                        bool relative, bool channel_wise, std::optional<c10::ScalarType> dtype) {
  return SrpFunction::apply(image, lower, upper, b_min, b_max, clip, relative, channel_wise, dtype);
}

void register_backend(torch::Library& m) {
  m.impl("moments", &moments_impl);
  m.impl("percentiles", &percentiles_impl);
  m.impl("normalize_intensity", &normalize_intensity_impl);
  m.impl("scale_intensity_range_percentiles", &srp_impl);
  m.impl("piecewise_linear", &piecewise_linear_impl);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("moments", &moments_meta);
  m.impl("percentiles", &percentiles_meta);
  m.impl("normalize_intensity", &normalize_intensity_meta);
  m.impl("scale_intensity_range_percentiles", &srp_meta);
  m.impl("piecewise_linear", &piecewise_linear_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("moments", &moments_autograd);
  m.impl("percentiles", &percentiles_autograd);
  m.impl("normalize_intensity", &normalize_intensity_autograd);
  m.impl("scale_intensity_range_percentiles", &srp_autograd);
  // piecewise_linear (RandHistogramShift's map) has no backward: it refuses inputs that
  // require grad rather than drop the gradient.
  const char* const no_backward[] = {"piecewise_linear"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
