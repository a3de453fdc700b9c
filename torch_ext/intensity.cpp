// voxaug torch_ext: the intensity / noise ops. Every op is a pointwise chain (one or more
// steps) in the canonical flat form documented in ops.cpp; CPU and CUDA share one kernel
// entry (voxaug::pointwise_chain picks the backend from the view), Meta computes shapes,
// Autograd routes through pointwise_chain_backward, and in-place ops refuse tensors that
// require grad (they are for no-grad augmentation pipelines).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "transform_common.h"
#include "voxaug/error.h"
#include "voxaug/intensity.h"

namespace voxaug::torch_ext {
namespace {

using OptTensorList = c10::List<std::optional<at::Tensor>>;

constexpr int64_t kHasBMin = 1, kHasBMax = 2, kClip = 4, kRandom = 8, kChannelWise = 16,
                  kSampleStd = 32, kMonomialBasis = 64, kInvertImage = 128, kNonzero = 256,
                  kFixedMean = 512, kPreserveRange = 1024;
constexpr int64_t kLastOp = static_cast<int64_t>(PointwiseOp::ScaleIntensityFixedMean);
constexpr int kParamsPerStep = 8;

// The canonical flat chain (see ops.cpp).
struct Chain {
  std::vector<int64_t> ops, flags, seeds;
  std::vector<double> params;
  OptTensorList values;

  void add(PointwiseOp op, int64_t f, std::initializer_list<double> p, double prob, int64_t seed,
           std::optional<at::Tensor> value = std::nullopt) {
    ops.push_back(static_cast<int64_t>(op));
    flags.push_back(f);
    std::vector<double> row(p);
    row.resize(kParamsPerStep - 1, 0.0);
    row.push_back(prob);
    params.insert(params.end(), row.begin(), row.end());
    seeds.push_back(seed);
    values.push_back(std::move(value));
  }
};

// Per-sample values: a 0-d or (N,) floating tensor on the image's device -> float32 (N,).
at::Tensor prepare_values(const at::Tensor& v, const at::Tensor& image, const std::string& arg) {
  TORCH_CHECK_VALUE(v.device() == image.device(), arg, " must be on the image's device ",
                    image.device(), ", got ", v.device());
  TORCH_CHECK_VALUE(at::isFloatingType(v.scalar_type()), arg, " must be a floating tensor, got ",
                    v.scalar_type());
  const int64_t n = image.size(0);
  TORCH_CHECK_VALUE(v.dim() == 0 || (v.dim() == 1 && (v.size(0) == n || v.size(0) == 1)), arg,
                    " must be a scalar tensor or have shape (N,) = (", n, ",), got ", v.sizes());
  return v.to(at::kFloat).reshape({-1}).expand({n}).contiguous();
}

// Canonical chain -> core steps. `keep` holds converted per-sample tensors alive.
std::vector<PointwiseStep> decode(const at::Tensor& image, at::IntArrayRef ops,
                                  at::IntArrayRef flags, at::ArrayRef<double> params,
                                  at::IntArrayRef seeds, const OptTensorList& values,
                                  std::vector<at::Tensor>& keep) {
  const size_t k = ops.size();
  TORCH_CHECK_VALUE(k <= static_cast<size_t>(kMaxPointwiseSteps), "ops: at most ",
                    kMaxPointwiseSteps, " steps fuse into one pass, got ", k);
  TORCH_CHECK_VALUE(flags.size() == k && seeds.size() == k && values.size() == k &&
                        params.size() == k * kParamsPerStep,
                    "chain lists disagree: ops ", k, ", flags ", flags.size(), ", seeds ",
                    seeds.size(), ", values ", values.size(), ", params ", params.size(),
                    " (expected ", kParamsPerStep, " per step)");
  std::vector<PointwiseStep> steps(k);
  for (size_t i = 0; i < k; ++i) {
    TORCH_CHECK_VALUE(ops[i] >= 0 && ops[i] <= kLastOp, "ops[", i, "] must be 0..", kLastOp,
                      ", got ", ops[i]);
    const double* p = params.data() + i * kParamsPerStep;
    PointwiseStep& s = steps[i];
    s.op = static_cast<PointwiseOp>(ops[i]);
    s.prob = p[7];
    s.seed = static_cast<uint64_t>(seeds[i]);
    const int64_t f = flags[i];
    switch (s.op) {
      case PointwiseOp::ScaleIntensityRange:
        s.a_min = p[0];
        s.a_max = p[1];
        s.b_min = p[2];
        s.b_max = p[3];
        s.has_b_min = f & kHasBMin;
        s.has_b_max = f & kHasBMax;
        s.clip = f & kClip;
        break;
      case PointwiseOp::ShiftIntensity:
      case PointwiseOp::ScaleIntensity:
        s.value = p[0];
        s.low = p[1];
        s.high = p[2];
        s.random = f & kRandom;
        s.channel_wise = f & kChannelWise;
        break;
      case PointwiseOp::GaussianNoise:  // mean, std, mean low, mean high, std low
        s.mean = p[0];
        s.std = p[1];
        s.sample_std = f & kSampleStd;
        s.low = p[2];
        s.high = p[3];
        s.std_low = p[4];
        s.random = f & kRandom;
        break;
      case PointwiseOp::RescaleIntensity:
        s.b_min = p[0];
        s.b_max = p[1];
        s.has_b_min = f & kHasBMin;
        s.has_b_max = f & kHasBMax;
        s.channel_wise = f & kChannelWise;
        break;
      case PointwiseOp::RicianNoise:
        s.mean = p[0];
        s.std = p[1];
        s.sample_std = f & kSampleStd;
        s.channel_wise = f & kChannelWise;
        break;
      case PointwiseOp::BiasField:
        TORCH_CHECK_VALUE(p[0] == std::floor(p[0]) && p[0] >= 0 && p[0] <= kMaxBiasFieldDegree,
                          "params[", i * kParamsPerStep,
                          "]: bias field degree must be an integer in [0, ", kMaxBiasFieldDegree,
                          "], got ", p[0]);
        s.degree = static_cast<int>(p[0]);
        s.monomial_basis = f & kMonomialBasis;
        break;
      case PointwiseOp::AdjustContrast:
      case PointwiseOp::Gamma:
        s.value = p[0];
        s.low = p[1];
        s.high = p[2];
        s.random = f & kRandom;
        s.invert = f & kInvertImage;
        break;
      case PointwiseOp::HistogramShift: break;
      case PointwiseOp::StdShiftIntensity:
      case PointwiseOp::ScaleIntensityFixedMean:
        s.value = p[0];
        s.low = p[1];
        s.high = p[2];
        s.random = f & kRandom;
        s.channel_wise = f & kChannelWise;
        s.nonzero = f & kNonzero;
        s.fixed_mean = f & kFixedMean;
        s.preserve_range = f & kPreserveRange;
        break;
    }
    const std::optional<at::Tensor> v = values.get(i);
    const bool has_v = v.has_value() && v->defined();
    if (s.op == PointwiseOp::BiasField) {
      const int64_t nc = bias_field_coefficients(s.degree);
      TORCH_CHECK_VALUE(has_v, "values[", i, "]: a bias field step needs the (N, ", nc,
                        ") coefficients");
      TORCH_CHECK_VALUE(v->device() == image.device(),
                        "coefficients must be on the image's device ", image.device(), ", got ",
                        v->device());
      TORCH_CHECK_VALUE(at::isFloatingType(v->scalar_type()) && v->dim() == 2 &&
                            v->size(0) == image.size(0) && v->size(1) == nc,
                        "coefficients must be a floating tensor of shape (", image.size(0), ", ",
                        nc, ") for degree ", s.degree, ", got ", v->scalar_type(), " ", v->sizes());
      keep.push_back(v->to(at::kFloat).contiguous());
      s.coefficients = keep.back().data_ptr<float>();
      continue;
    }
    if (s.op == PointwiseOp::RicianNoise) {
      // Either std multipliers (relative: the image's std), N or N * C floating values, or a
      // float64 (N, 1 or C, 2) table of (mean, std) per segment (per-channel mean / std).
      if (!has_v) continue;
      const int64_t segs = s.channel_wise ? image.size(1) : 1;
      TORCH_CHECK_VALUE(v->device() == image.device(),
                        "Rician values must be on the image's device ", image.device(), ", got ",
                        v->device());
      if (v->scalar_type() == at::kDouble && v->dim() == 3 && v->size(2) == 2) {
        TORCH_CHECK_VALUE(v->size(0) == image.size(0) && v->size(1) == segs,
                          "Rician (mean, std) table must be float64 of shape (", image.size(0),
                          ", ", segs, ", 2) (N", s.channel_wise ? ", C" : ", 1", ", 2), got ",
                          v->sizes());
        keep.push_back(v->contiguous());
        s.stats = keep.back().data_ptr<double>();
        continue;
      }
      TORCH_CHECK_VALUE(at::isFloatingType(v->scalar_type()) && v->numel() == image.size(0) * segs,
                        "std_scale (relative Rician noise) must be a floating tensor with ",
                        image.size(0) * segs, " values (N", s.channel_wise ? " x C" : "",
                        "), or a float64 (N, ", segs, ", 2) (mean, std) table, got ",
                        v->scalar_type(), " ", v->sizes());
      keep.push_back(v->to(at::kFloat).contiguous().reshape({-1}));
      s.per_sample = keep.back().data_ptr<float>();
      continue;
    }
    if (s.op == PointwiseOp::Gamma) {
      TORCH_CHECK_VALUE(!has_v, "values[", i, "]: a gamma step takes no values");
      continue;
    }
    if (s.op == PointwiseOp::HistogramShift) {
      // (N, 2 + K) float64: min, max (from voxaug::minmax), then the floating control points
      // (NaN-padded); split into the core's minmax pairs and float32 point rows.
      TORCH_CHECK_VALUE(has_v, "values[", i,
                        "]: a histogram shift step needs the (N, 2 + K) float64 table "
                        "(min, max, control points)");
      TORCH_CHECK_VALUE(v->device() == image.device(),
                        "histogram table must be on the image's device ", image.device(), ", got ",
                        v->device());
      TORCH_CHECK_VALUE(v->scalar_type() == at::kDouble && v->dim() == 2 &&
                            v->size(0) == image.size(0) && v->size(1) >= 3 &&
                            v->size(1) - 2 <= kMaxHistogramPoints,
                        "histogram table must be float64 of shape (", image.size(0),
                        ", 2 + K) with 1 <= K <= ", kMaxHistogramPoints, ", got ", v->scalar_type(),
                        " ", v->sizes());
      keep.push_back(v->narrow(1, 0, 2).contiguous());
      s.stats = keep.back().data_ptr<double>();
      keep.push_back(v->narrow(1, 2, v->size(1) - 2).to(at::kFloat).contiguous());
      s.coefficients = keep.back().data_ptr<float>();
      s.num_points = static_cast<int>(v->size(1) - 2);
      continue;
    }
    if (s.op == PointwiseOp::StdShiftIntensity || s.op == PointwiseOp::ScaleIntensityFixedMean) {
      const bool std_shift = s.op == PointwiseOp::StdShiftIntensity;
      const int64_t segs = s.channel_wise ? image.size(1) : 1;
      const char* what = std_shift ? "moments (count, mean, std; from voxaug::moments)"
                                   : "(mean, min, max) statistics";
      TORCH_CHECK_VALUE(has_v, "values[", i, "]: a ", std_shift ? "std shift" : "fixed-mean scale",
                        " step needs the (N, ", segs, ", 3) ", what);
      TORCH_CHECK_VALUE(v->device() == image.device(), "stats must be on the image's device ",
                        image.device(), ", got ", v->device());
      TORCH_CHECK_VALUE(v->scalar_type() == at::kDouble && v->dim() == 3 &&
                            v->size(0) == image.size(0) && v->size(1) == segs && v->size(2) == 3,
                        "stats must be float64 of shape (", image.size(0), ", ", segs, ", 3) (",
                        what, "), got ", v->scalar_type(), " ", v->sizes());
      keep.push_back(v->contiguous());
      s.stats = keep.back().data_ptr<double>();
      continue;
    }
    if (s.op == PointwiseOp::RescaleIntensity || s.op == PointwiseOp::AdjustContrast) {
      TORCH_CHECK_VALUE(v.has_value() && v->defined(), "values[", i, "]: a ",
                        s.op == PointwiseOp::RescaleIntensity ? "rescale" : "contrast",
                        " step needs the (N, C, 2) statistics from voxaug::minmax");
      const at::Tensor& st = *v;
      const int64_t segs = s.channel_wise ? image.size(1) : 1;
      TORCH_CHECK_VALUE(st.device() == image.device(), "stats must be on the image's device ",
                        image.device(), ", got ", st.device());
      TORCH_CHECK_VALUE(st.scalar_type() == at::kDouble && st.dim() == 3 &&
                            st.size(0) == image.size(0) && st.size(1) == segs && st.size(2) == 2,
                        "stats must be float64 of shape (", image.size(0), ", ", segs,
                        ", 2) (from voxaug::minmax), got ", st.scalar_type(), " ", st.sizes());
      keep.push_back(st.contiguous());
      s.stats = keep.back().data_ptr<double>();
      continue;
    }
    if (v.has_value() && v->defined()) {
      TORCH_CHECK_VALUE(s.op == PointwiseOp::ShiftIntensity || s.op == PointwiseOp::ScaleIntensity,
                        "values[", i, "]: only shift / scale steps take per-sample values");
      keep.push_back(
          prepare_values(*v, image, s.op == PointwiseOp::ShiftIntensity ? "offsets" : "factors"));
      s.per_sample = keep.back().data_ptr<float>();
    }
  }
  return steps;
}

c10::ScalarType output_dtype(const at::Tensor& image, std::optional<c10::ScalarType> dtype) {
  const c10::ScalarType in = image.scalar_type();
  (void)to_voxaug_dtype(in, "image");
  TORCH_CHECK_VALUE(in != at::kLong,
                    "image: int64 images are not supported by intensity ops; "
                    "expected float64, float32, float16, bfloat16, uint8, int16 or int32");
  const c10::ScalarType out = dtype.value_or(at::isFloatingType(in) ? in : at::kFloat);
  TORCH_CHECK_VALUE(
      out == at::kFloat || out == at::kHalf || out == at::kBFloat16 || out == at::kDouble,
      "dtype must be float32, float16, bfloat16 or float64, got ", out);
  TORCH_CHECK_VALUE((out == at::kDouble) == (in == at::kDouble),
                    "dtype float64 pairs only with a float64 image (got image ", in, ", dtype ",
                    out, ")");
  return out;
}

uint32_t checked_first_sample(int64_t first_sample) {
  TORCH_CHECK_VALUE(first_sample >= 0 && first_sample <= int64_t(0xffffffff),
                    "first_sample must be in [0, 2^32), got ", first_sample);
  return static_cast<uint32_t>(first_sample);
}

// The one CPU/CUDA implementation behind every forward op.
at::Tensor run_chain(const at::Tensor& image, at::IntArrayRef ops, at::IntArrayRef flags,
                     at::ArrayRef<double> params, at::IntArrayRef seeds,
                     const OptTensorList& values, int64_t first_sample,
                     std::optional<c10::ScalarType> dtype, bool in_place) {
  check_5d(image, "image");
  const uint32_t first = checked_first_sample(first_sample);
  const c10::ScalarType out_dtype = output_dtype(image, dtype);
  TORCH_CHECK_VALUE(!in_place || out_dtype == image.scalar_type(),
                    "in-place ops need a floating image (the result keeps its dtype), got ",
                    image.scalar_type());
  std::vector<at::Tensor> keep;
  const std::vector<PointwiseStep> steps = decode(image, ops, flags, params, seeds, values, keep);
  call_core([&] { validate_pointwise_steps(steps.data(), static_cast<int>(steps.size())); });
  at::Tensor out =
      in_place ? image : torch_ext::empty_output(image.sizes(), image.options().dtype(out_dtype));
  if (image.numel() == 0) return out;
  const c10::DeviceGuard guard(image.device());
  const VolumeView in_v = to_view(image, "image");
  const VolumeView out_v = in_place ? in_v : to_view(out, "output");
  call_core([&] {
    pointwise_chain(in_v, out_v, steps.data(), static_cast<int>(steps.size()),
                    current_stream(image), first);
  });
  return out;
}

at::Tensor chain_backward_impl(const at::Tensor& grad, const at::Tensor& image, at::IntArrayRef ops,
                               at::IntArrayRef flags, at::ArrayRef<double> params,
                               at::IntArrayRef seeds, const OptTensorList& values,
                               int64_t first_sample) {
  check_5d(grad, "grad");
  check_5d(image, "image");
  TORCH_CHECK_VALUE(grad.sizes() == image.sizes(), "grad must have the image's shape ",
                    image.sizes(), ", got ", grad.sizes());
  TORCH_CHECK_VALUE(grad.device() == image.device(), "grad must be on the image's device");
  TORCH_CHECK_VALUE(at::isFloatingType(image.scalar_type()),
                    "image must be floating to differentiate, got ", image.scalar_type());
  const uint32_t first = checked_first_sample(first_sample);
  std::vector<at::Tensor> keep;
  const std::vector<PointwiseStep> steps = decode(image, ops, flags, params, seeds, values, keep);
  const at::Tensor g = grad.to(image.scalar_type());
  at::Tensor grad_in = torch_ext::empty_output(image.sizes(), image.options());
  if (image.numel() == 0) return grad_in;
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    pointwise_chain_backward(to_view(g, "grad"), to_view(image, "image"),
                             to_view(grad_in, "grad_input"), steps.data(),
                             static_cast<int>(steps.size()), current_stream(image), first);
  });
  return grad_in;
}

at::Tensor minmax_impl(const at::Tensor& image, bool channel_wise) {
  check_5d(image, "image");
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  TORCH_CHECK_VALUE(image.scalar_type() != at::kLong, "image: int64 images are not supported");
  const int64_t segs = channel_wise ? image.size(1) : 1;
  at::Tensor out = at::empty({image.size(0), segs, 2}, image.options().dtype(at::kDouble));
  if (out.numel() == 0) return out;
  TORCH_CHECK_VALUE(image.numel() > 0, "image: min / max of an empty volume is undefined, shape ",
                    image.sizes());
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    minmax(to_view(image, "image"), out.data_ptr<double>(), channel_wise, current_stream(image));
  });
  return out;
}

// ---- canonical chains of the single-step ops ----
Chain sir_chain(double a_min, double a_max, std::optional<double> b_min,
                std::optional<double> b_max, bool clip) {
  Chain c;
  c.add(PointwiseOp::ScaleIntensityRange,
        (b_min ? kHasBMin : 0) | (b_max ? kHasBMax : 0) | (clip ? kClip : 0),
        {a_min, a_max, b_min.value_or(0.0), b_max.value_or(0.0)}, 1.0, 0);
  return c;
}
Chain values_chain(PointwiseOp op, const at::Tensor& v) {
  Chain c;
  c.add(op, 0, {}, 1.0, 0, v);
  return c;
}
Chain rand_chain(PointwiseOp op, double low, double high, double prob, int64_t seed, bool cw) {
  Chain c;
  c.add(op, kRandom | (cw ? kChannelWise : 0), {0.0, low, high}, prob, seed);
  return c;
}
Chain noise_chain(double mean, double std, bool sample_std, double prob, int64_t seed) {
  Chain c;
  c.add(PointwiseOp::GaussianNoise, sample_std ? kSampleStd : 0, {mean, std}, prob, seed);
  return c;
}

at::Tensor run(const at::Tensor& image, const Chain& c, int64_t first,
               std::optional<c10::ScalarType> dtype, bool in_place) {
  return run_chain(image, c.ops, c.flags, c.params, c.seeds, c.values, first, dtype, in_place);
}

// ---- Meta: shapes and dtypes only ----
at::Tensor meta_out(const at::Tensor& image, std::optional<c10::ScalarType> dtype) {
  check_5d(image, "image", /*allow_meta=*/true);
  return at::empty(image.sizes(), image.options().dtype(output_dtype(image, dtype)));
}

// ---- Autograd: one Function for every out-of-place op ----
class ChainFunction : public torch::autograd::Function<ChainFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            const Chain& chain, int64_t first_sample,
                            std::optional<c10::ScalarType> dtype) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      static auto op =
          c10::Dispatcher::singleton()
              .findSchemaOrThrow("voxaug::pointwise_chain", "")
              .typed<at::Tensor(const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
                                at::ArrayRef<double>, at::IntArrayRef, const OptTensorList&,
                                int64_t, std::optional<c10::ScalarType>)>();
      out = op.call(image, chain.ops, chain.flags, chain.params, chain.seeds, chain.values,
                    first_sample, dtype);
    }
    ctx->save_for_backward({image});
    ctx->saved_data["ops"] = chain.ops;
    ctx->saved_data["flags"] = chain.flags;
    ctx->saved_data["params"] = chain.params;
    ctx->saved_data["seeds"] = chain.seeds;
    ctx->saved_data["values"] = chain.values;
    ctx->saved_data["first_sample"] = first_sample;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor image = ctx->get_saved_variables()[0];
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("voxaug::pointwise_chain_backward", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                                           at::IntArrayRef, at::ArrayRef<double>, at::IntArrayRef,
                                           const OptTensorList&, int64_t)>();
    const auto ops = ctx->saved_data["ops"].toIntVector();
    const auto flags = ctx->saved_data["flags"].toIntVector();
    const auto params = ctx->saved_data["params"].toDoubleVector();
    const auto seeds = ctx->saved_data["seeds"].toIntVector();
    const auto values = ctx->saved_data["values"].to<OptTensorList>();
    at::Tensor g = op.call(grads[0], image, ops, flags, params, seeds, values,
                           ctx->saved_data["first_sample"].toInt());
    return first_grad_only(g, 3);
  }
};

at::Tensor autograd_run(const at::Tensor& image, const Chain& c, int64_t first,
                        std::optional<c10::ScalarType> dtype) {
  return ChainFunction::apply(image, c, first, dtype);
}

}  // namespace

std::vector<PointwiseStep> decode_chain(const at::Tensor& image, at::IntArrayRef ops,
                                        at::IntArrayRef flags, at::ArrayRef<double> params,
                                        at::IntArrayRef seeds,
                                        const c10::List<std::optional<at::Tensor>>& values,
                                        std::vector<at::Tensor>& keep) {
  return decode(image, ops, flags, params, seeds, values, keep);
}

// ---------------- registrations ----------------
namespace {
// Backend kernels (registered for CPU and CUDA alike).
at::Tensor k_chain(const at::Tensor& image, at::IntArrayRef ops, at::IntArrayRef flags,
                   at::ArrayRef<double> params, at::IntArrayRef seeds, const OptTensorList& values,
                   int64_t first, std::optional<c10::ScalarType> dtype) {
  return run_chain(image, ops, flags, params, seeds, values, first, dtype, false);
}
void k_chain_(at::Tensor& image, at::IntArrayRef ops, at::IntArrayRef flags,
              at::ArrayRef<double> params, at::IntArrayRef seeds, const OptTensorList& values,
              int64_t first) {
  run_chain(image, ops, flags, params, seeds, values, first, std::nullopt, true);
}
at::Tensor k_sir(const at::Tensor& image, double a_min, double a_max, std::optional<double> b_min,
                 std::optional<double> b_max, bool clip, std::optional<c10::ScalarType> dtype) {
  return run(image, sir_chain(a_min, a_max, b_min, b_max, clip), 0, dtype, false);
}
void k_sir_(at::Tensor& image, double a_min, double a_max, std::optional<double> b_min,
            std::optional<double> b_max, bool clip) {
  run(image, sir_chain(a_min, a_max, b_min, b_max, clip), 0, std::nullopt, true);
}
at::Tensor k_shift(const at::Tensor& image, const at::Tensor& offsets) {
  return run(image, values_chain(PointwiseOp::ShiftIntensity, offsets), 0, std::nullopt, false);
}
void k_shift_(at::Tensor& image, const at::Tensor& offsets) {
  run(image, values_chain(PointwiseOp::ShiftIntensity, offsets), 0, std::nullopt, true);
}
at::Tensor k_scale(const at::Tensor& image, const at::Tensor& factors,
                   std::optional<c10::ScalarType> dtype) {
  return run(image, values_chain(PointwiseOp::ScaleIntensity, factors), 0, dtype, false);
}
void k_scale_(at::Tensor& image, const at::Tensor& factors) {
  run(image, values_chain(PointwiseOp::ScaleIntensity, factors), 0, std::nullopt, true);
}
at::Tensor k_rshift(const at::Tensor& image, double low, double high, double prob, int64_t seed,
                    bool cw, int64_t first) {
  return run(image, rand_chain(PointwiseOp::ShiftIntensity, low, high, prob, seed, cw), first,
             std::nullopt, false);
}
void k_rshift_(at::Tensor& image, double low, double high, double prob, int64_t seed, bool cw,
               int64_t first) {
  run(image, rand_chain(PointwiseOp::ShiftIntensity, low, high, prob, seed, cw), first,
      std::nullopt, true);
}
at::Tensor k_rscale(const at::Tensor& image, double low, double high, double prob, int64_t seed,
                    bool cw, int64_t first, std::optional<c10::ScalarType> dtype) {
  return run(image, rand_chain(PointwiseOp::ScaleIntensity, low, high, prob, seed, cw), first,
             dtype, false);
}
void k_rscale_(at::Tensor& image, double low, double high, double prob, int64_t seed, bool cw,
               int64_t first) {
  run(image, rand_chain(PointwiseOp::ScaleIntensity, low, high, prob, seed, cw), first,
      std::nullopt, true);
}
at::Tensor k_noise(const at::Tensor& image, double mean, double std, bool sample_std, double prob,
                   int64_t seed, int64_t first, std::optional<c10::ScalarType> dtype) {
  return run(image, noise_chain(mean, std, sample_std, prob, seed), first, dtype, false);
}
void k_noise_(at::Tensor& image, double mean, double std, bool sample_std, double prob,
              int64_t seed, int64_t first) {
  run(image, noise_chain(mean, std, sample_std, prob, seed), first, std::nullopt, true);
}

// Meta kernels.
at::Tensor m_chain(const at::Tensor& image, at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>,
                   at::IntArrayRef, const OptTensorList&, int64_t,
                   std::optional<c10::ScalarType> dtype) {
  return meta_out(image, dtype);
}
void m_chain_(at::Tensor&, at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>, at::IntArrayRef,
              const OptTensorList&, int64_t) {}
at::Tensor m_chain_bwd(const at::Tensor&, const at::Tensor& image, at::IntArrayRef, at::IntArrayRef,
                       at::ArrayRef<double>, at::IntArrayRef, const OptTensorList&, int64_t) {
  return at::empty(image.sizes(), image.options());
}
at::Tensor m_sir(const at::Tensor& image, double, double, std::optional<double>,
                 std::optional<double>, bool, std::optional<c10::ScalarType> dtype) {
  return meta_out(image, dtype);
}
void m_sir_(at::Tensor&, double, double, std::optional<double>, std::optional<double>, bool) {}
at::Tensor m_shift(const at::Tensor& image, const at::Tensor&) {
  return meta_out(image, std::nullopt);
}
void m_values_(at::Tensor&, const at::Tensor&) {}
at::Tensor m_scale(const at::Tensor& image, const at::Tensor&,
                   std::optional<c10::ScalarType> dtype) {
  return meta_out(image, dtype);
}
at::Tensor m_rshift(const at::Tensor& image, double, double, double, int64_t, bool, int64_t) {
  return meta_out(image, std::nullopt);
}
void m_rand_(at::Tensor&, double, double, double, int64_t, bool, int64_t) {}
at::Tensor m_rscale(const at::Tensor& image, double, double, double, int64_t, bool, int64_t,
                    std::optional<c10::ScalarType> dtype) {
  return meta_out(image, dtype);
}
at::Tensor m_noise(const at::Tensor& image, double, double, bool, double, int64_t, int64_t,
                   std::optional<c10::ScalarType> dtype) {
  return meta_out(image, dtype);
}
void m_noise_(at::Tensor&, double, double, bool, double, int64_t, int64_t) {}

// Autograd kernels of the out-of-place ops.
at::Tensor a_chain(const at::Tensor& image, at::IntArrayRef ops, at::IntArrayRef flags,
                   at::ArrayRef<double> params, at::IntArrayRef seeds, const OptTensorList& values,
                   int64_t first, std::optional<c10::ScalarType> dtype) {
  Chain c;
  c.ops = ops.vec();
  c.flags = flags.vec();
  c.params = params.vec();
  c.seeds = seeds.vec();
  c.values = values;
  return autograd_run(image, c, first, dtype);
}
at::Tensor a_sir(const at::Tensor& image, double a_min, double a_max, std::optional<double> b_min,
                 std::optional<double> b_max, bool clip, std::optional<c10::ScalarType> dtype) {
  return autograd_run(image, sir_chain(a_min, a_max, b_min, b_max, clip), 0, dtype);
}
at::Tensor a_shift(const at::Tensor& image, const at::Tensor& offsets) {
  return autograd_run(image, values_chain(PointwiseOp::ShiftIntensity, offsets), 0, std::nullopt);
}
at::Tensor a_scale(const at::Tensor& image, const at::Tensor& factors,
                   std::optional<c10::ScalarType> dtype) {
  return autograd_run(image, values_chain(PointwiseOp::ScaleIntensity, factors), 0, dtype);
}
at::Tensor a_rshift(const at::Tensor& image, double low, double high, double prob, int64_t seed,
                    bool cw, int64_t first) {
  return autograd_run(image, rand_chain(PointwiseOp::ShiftIntensity, low, high, prob, seed, cw),
                      first, std::nullopt);
}
at::Tensor a_rscale(const at::Tensor& image, double low, double high, double prob, int64_t seed,
                    bool cw, int64_t first, std::optional<c10::ScalarType> dtype) {
  return autograd_run(image, rand_chain(PointwiseOp::ScaleIntensity, low, high, prob, seed, cw),
                      first, dtype);
}
at::Tensor a_noise(const at::Tensor& image, double mean, double std, bool sample_std, double prob,
                   int64_t seed, int64_t first, std::optional<c10::ScalarType> dtype) {
  return autograd_run(image, noise_chain(mean, std, sample_std, prob, seed), first, dtype);
}

at::Tensor m_minmax(const at::Tensor& image, bool channel_wise) {
  check_5d(image, "image", /*allow_meta=*/true);
  return at::empty({image.size(0), channel_wise ? image.size(1) : 1, 2},
                   image.options().dtype(at::kDouble));
}

void register_backend(torch::Library& m) {
  m.impl("minmax", &minmax_impl);
  m.impl("pointwise_chain", &k_chain);
  m.impl("pointwise_chain_", &k_chain_);
  m.impl("pointwise_chain_backward", &chain_backward_impl);
  m.impl("scale_intensity_range", &k_sir);
  m.impl("scale_intensity_range_", &k_sir_);
  m.impl("shift_intensity", &k_shift);
  m.impl("shift_intensity_", &k_shift_);
  m.impl("scale_intensity", &k_scale);
  m.impl("scale_intensity_", &k_scale_);
  m.impl("rand_shift_intensity", &k_rshift);
  m.impl("rand_shift_intensity_", &k_rshift_);
  m.impl("rand_scale_intensity", &k_rscale);
  m.impl("rand_scale_intensity_", &k_rscale_);
  m.impl("rand_gaussian_noise", &k_noise);
  m.impl("rand_gaussian_noise_", &k_noise_);
}

// In-place ops are for no-grad augmentation pipelines: mutating a tensor that autograd
// tracks would silently give wrong gradients, so they refuse it (autograd_guard.h).
const char* const kInPlaceOps[] = {
    "pointwise_chain_",      "scale_intensity_range_", "shift_intensity_",    "scale_intensity_",
    "rand_shift_intensity_", "rand_scale_intensity_",  "rand_gaussian_noise_"};
}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  register_backend(m);
}

TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("minmax", &m_minmax);
  m.impl("pointwise_chain", &m_chain);
  m.impl("pointwise_chain_", &m_chain_);
  m.impl("pointwise_chain_backward", &m_chain_bwd);
  m.impl("scale_intensity_range", &m_sir);
  m.impl("scale_intensity_range_", &m_sir_);
  m.impl("shift_intensity", &m_shift);
  m.impl("shift_intensity_", &m_values_);
  m.impl("scale_intensity", &m_scale);
  m.impl("scale_intensity_", &m_values_);
  m.impl("rand_shift_intensity", &m_rshift);
  m.impl("rand_shift_intensity_", &m_rand_);
  m.impl("rand_scale_intensity", &m_rscale);
  m.impl("rand_scale_intensity_", &m_rand_);
  m.impl("rand_gaussian_noise", &m_noise);
  m.impl("rand_gaussian_noise_", &m_noise_);
}

// minmax gives statistics, not a differentiable function of the image: its output never
// requires grad (a rescale step treats them as constants in its backward).
at::Tensor a_minmax(const at::Tensor& image, bool channel_wise) {
  at::AutoDispatchBelowADInplaceOrView below;
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("voxaug::minmax", "")
                       .typed<at::Tensor(const at::Tensor&, bool)>();
  return op.call(image, channel_wise);
}

at::Tensor philox_uniform_impl(int64_t seed, int64_t first_sample, int64_t batch, int64_t count,
                               std::optional<c10::Device> device) {
  TORCH_CHECK_VALUE(batch >= 0 && count >= 0, "batch and count must be >= 0, got ", batch, ", ",
                    count);
  const uint32_t first = checked_first_sample(first_sample);
  const auto options = at::TensorOptions().dtype(at::kDouble);
  if (device && device->is_meta()) return at::empty({batch, count}, options.device(*device));
  at::Tensor out = at::empty({batch, count}, options);
  call_core([&] {
    philox_uniforms(static_cast<uint64_t>(seed), first, batch, count, out.data_ptr<double>());
  });
  return device ? transforms::common::host_to(out, *device) : out;  // pinned, no blocking copy
}

TORCH_LIBRARY_IMPL(voxaug, CompositeExplicitAutograd, m) {
  m.impl("philox_uniform", &philox_uniform_impl);
}

TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("minmax", &a_minmax);
  m.impl("pointwise_chain", &a_chain);
  m.impl("scale_intensity_range", &a_sir);
  m.impl("shift_intensity", &a_shift);
  m.impl("scale_intensity", &a_scale);
  m.impl("rand_shift_intensity", &a_rshift);
  m.impl("rand_scale_intensity", &a_rscale);
  m.impl("rand_gaussian_noise", &a_noise);
  register_no_backward(m, kInPlaceOps);
  const char* const backward_ops[] = {"pointwise_chain_backward"};  // no double backward
  register_no_backward(m, backward_ops);
}

}  // namespace voxaug::torch_ext
