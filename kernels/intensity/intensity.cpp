// voxaug: pointwise intensity chain -- validation, parameter packing, CPU backend, and
// routing to the CUDA backend (intensity.cu).
#include "voxaug/intensity.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/cpu_isa.h"
#include "../common/device.h"
#include "../common/launch_cpu.h"
#include "chain_dispatch.h"
#include "voxaug/detail/minmax.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void chain_forward_cuda(const VolumeView& in, const VolumeView& out, const ChainParams& p,
                        cudaStream_t stream);
void chain_backward_cuda(const VolumeView& grad_out, const VolumeView& in,
                         const VolumeView& grad_in, const ChainParams& p, cudaStream_t stream);
#endif
}  // namespace detail

PointwiseStep PointwiseStep::scale_intensity_range(double a_min, double a_max, const double* b_min,
                                                   const double* b_max, bool clip) {
  PointwiseStep s;
  s.op = PointwiseOp::ScaleIntensityRange;
  s.a_min = a_min;
  s.a_max = a_max;
  s.has_b_min = b_min != nullptr;
  s.has_b_max = b_max != nullptr;
  s.b_min = b_min ? *b_min : 0.0;
  s.b_max = b_max ? *b_max : 0.0;
  s.clip = clip;
  return s;
}
namespace {
// The random form of a step: its value drawn per sample (or channel) from [low, high) with
// Philox keyed by `seed`, applied with probability `prob`.
void randomise(PointwiseStep& s, double low, double high, double prob, uint64_t seed) {
  s.random = true;
  s.low = low;
  s.high = high;
  s.prob = prob;
  s.seed = seed;
}
}  // namespace

PointwiseStep PointwiseStep::shift_intensity(double offset) {
  PointwiseStep s;
  s.op = PointwiseOp::ShiftIntensity;
  s.value = offset;
  return s;
}
PointwiseStep PointwiseStep::shift_intensity(const float* per_sample_offsets) {
  PointwiseStep s = shift_intensity(0.0);
  s.per_sample = per_sample_offsets;
  return s;
}
PointwiseStep PointwiseStep::rand_shift_intensity(double low, double high, double prob,
                                                  uint64_t seed, bool channel_wise) {
  PointwiseStep s = shift_intensity(0.0);
  randomise(s, low, high, prob, seed);
  s.channel_wise = channel_wise;
  return s;
}
PointwiseStep PointwiseStep::scale_intensity(double factor) {
  PointwiseStep s;
  s.op = PointwiseOp::ScaleIntensity;
  s.value = factor;
  return s;
}
PointwiseStep PointwiseStep::scale_intensity(const float* per_sample_factors) {
  PointwiseStep s = scale_intensity(0.0);
  s.per_sample = per_sample_factors;
  return s;
}
PointwiseStep PointwiseStep::rand_scale_intensity(double low, double high, double prob,
                                                  uint64_t seed, bool channel_wise) {
  PointwiseStep s = scale_intensity(0.0);
  randomise(s, low, high, prob, seed);
  s.channel_wise = channel_wise;
  return s;
}
PointwiseStep PointwiseStep::rescale_intensity(const double* minmax_stats, bool channel_wise,
                                               const double* minv, const double* maxv) {
  PointwiseStep s;
  s.op = PointwiseOp::RescaleIntensity;
  s.stats = minmax_stats;
  s.channel_wise = channel_wise;
  s.has_b_min = minv != nullptr;
  s.has_b_max = maxv != nullptr;
  s.b_min = minv ? *minv : 0.0;
  s.b_max = maxv ? *maxv : 0.0;
  return s;
}
PointwiseStep PointwiseStep::gaussian_noise(double mean, double std, bool sample_std, double prob,
                                            uint64_t seed) {
  PointwiseStep s;
  s.op = PointwiseOp::GaussianNoise;
  s.mean = mean;
  s.std = std;
  s.sample_std = sample_std;
  s.prob = prob;
  s.seed = seed;
  return s;
}

PointwiseStep PointwiseStep::random_noise(double mean_low, double mean_high, double std_low,
                                          double std_high, double prob, uint64_t seed) {
  PointwiseStep s = gaussian_noise(mean_low, std_high, true, prob, seed);
  s.random = true;
  s.low = mean_low;
  s.high = mean_high;
  s.std_low = std_low;
  return s;
}

PointwiseStep PointwiseStep::rician_noise(double mean, double std, bool sample_std,
                                          bool channel_wise, double prob, uint64_t seed,
                                          const float* std_scale) {
  PointwiseStep s;
  s.op = PointwiseOp::RicianNoise;
  s.mean = mean;
  s.std = std;
  s.sample_std = sample_std;
  s.channel_wise = channel_wise;
  s.prob = prob;
  s.seed = seed;
  s.per_sample = std_scale;
  return s;
}
PointwiseStep PointwiseStep::bias_field(const float* coefficients, int degree, bool monomial_basis,
                                        double prob, uint64_t seed) {
  PointwiseStep s;
  s.op = PointwiseOp::BiasField;
  s.coefficients = coefficients;
  s.degree = degree;
  s.monomial_basis = monomial_basis;
  s.prob = prob;
  s.seed = seed;
  return s;
}
PointwiseStep PointwiseStep::adjust_contrast(const double* minmax_stats, double gamma,
                                             bool invert) {
  PointwiseStep s;
  s.op = PointwiseOp::AdjustContrast;
  s.stats = minmax_stats;
  s.value = gamma;
  s.invert = invert;
  return s;
}
PointwiseStep PointwiseStep::rand_adjust_contrast(const double* minmax_stats, double low,
                                                  double high, double prob, uint64_t seed,
                                                  bool invert) {
  PointwiseStep s = adjust_contrast(minmax_stats, 1.0, invert);
  randomise(s, low, high, prob, seed);
  return s;
}
PointwiseStep PointwiseStep::gamma(double gamma) {
  PointwiseStep s;
  s.op = PointwiseOp::Gamma;
  s.value = gamma;
  return s;
}
PointwiseStep PointwiseStep::rand_gamma(double log_low, double log_high, double prob,
                                        uint64_t seed) {
  PointwiseStep s = gamma(1.0);
  randomise(s, log_low, log_high, prob, seed);
  return s;
}

PointwiseStep PointwiseStep::std_shift_intensity(const double* moments_stats, double factor,
                                                 bool nonzero, bool channel_wise) {
  PointwiseStep s;
  s.op = PointwiseOp::StdShiftIntensity;
  s.stats = moments_stats;
  s.value = factor;
  s.nonzero = nonzero;
  s.channel_wise = channel_wise;
  return s;
}
PointwiseStep PointwiseStep::rand_std_shift_intensity(const double* moments_stats, double low,
                                                      double high, double prob, uint64_t seed,
                                                      bool nonzero, bool channel_wise) {
  PointwiseStep s = std_shift_intensity(moments_stats, 0.0, nonzero, channel_wise);
  randomise(s, low, high, prob, seed);
  return s;
}
PointwiseStep PointwiseStep::scale_intensity_fixed_mean(const double* mean_min_max, double factor,
                                                        bool fixed_mean, bool preserve_range,
                                                        bool channel_wise) {
  PointwiseStep s;
  s.op = PointwiseOp::ScaleIntensityFixedMean;
  s.stats = mean_min_max;
  s.value = factor;
  s.fixed_mean = fixed_mean;
  s.preserve_range = preserve_range;
  s.channel_wise = channel_wise;
  return s;
}
PointwiseStep PointwiseStep::rand_scale_intensity_fixed_mean(const double* mean_min_max, double low,
                                                             double high, double prob,
                                                             uint64_t seed, bool fixed_mean,
                                                             bool preserve_range,
                                                             bool channel_wise) {
  PointwiseStep s =
      scale_intensity_fixed_mean(mean_min_max, 0.0, fixed_mean, preserve_range, channel_wise);
  randomise(s, low, high, prob, seed);
  return s;
}
PointwiseStep PointwiseStep::histogram_shift(const double* minmax_stats, const float* points,
                                             int num_points) {
  PointwiseStep s;
  s.op = PointwiseOp::HistogramShift;
  s.stats = minmax_stats;
  s.coefficients = points;
  s.num_points = num_points;
  return s;
}

namespace {

constexpr int kNumOps = 12;

std::string step_name(const PointwiseStep& s, int k) {
  const char* names[kNumOps] = {"scale_intensity_range",
                                "shift_intensity",
                                "scale_intensity",
                                "gaussian_noise",
                                "rescale_intensity",
                                "rician_noise",
                                "bias_field",
                                "adjust_contrast",
                                "gamma",
                                "histogram_shift",
                                "std_shift_intensity",
                                "scale_intensity_fixed_mean"};
  const int op = static_cast<int>(s.op);
  return std::string("step ") + std::to_string(k) + " (" +
         (op >= 0 && op < kNumOps ? names[op] : "unknown") + ")";
}

void expect_finite(double v, const std::string& where, const char* name) {
  VOXAUG_EXPECTS(std::isfinite(v),
                 where + ": " + name + " must be finite, got " + std::to_string(v));
}

detail::ChainParams pack_impl(const PointwiseStep* steps, int num_steps) {
  validate_pointwise_steps(steps, num_steps);
  detail::ChainParams p{};
  p.num_steps = num_steps;
  for (int k = 0; k < num_steps; ++k) {
    const PointwiseStep& s = steps[k];
    detail::KStep& q = p.steps[k];
    q.op = static_cast<int32_t>(s.op);
    q.prob = s.prob;
    q.seed = s.seed;
    q.per_sample = s.per_sample;
    switch (s.op) {
      case PointwiseOp::ScaleIntensityRange:
        q.p0 = s.a_min;
        q.p1 = s.a_max - s.a_min;
        q.p2 = s.b_max - s.b_min;
        q.p3 = s.b_min;
        q.lo = s.b_min;
        q.hi = s.b_max;
        if (q.p1 == 0.0) {
          // MONAI: warns and returns img - a_min (+ b_min when given); no clipping.
          q.flags |= detail::kDegenerate;
          if (s.has_b_min) q.flags |= detail::kAddB;
        } else {
          if (s.has_b_min && s.has_b_max) q.flags |= detail::kHasB;
          if (s.clip && s.has_b_min) q.flags |= detail::kClipLo;
          if (s.clip && s.has_b_max) q.flags |= detail::kClipHi;
        }
        break;
      case PointwiseOp::ShiftIntensity:
      case PointwiseOp::ScaleIntensity:
        q.p0 = s.value;
        q.lo = s.low;
        q.hi = s.high;
        if (s.per_sample) q.flags |= detail::kPerSample;
        if (s.random) q.flags |= detail::kRandom;
        if (s.random && s.channel_wise) {
          q.flags |= detail::kChannelWise;
          p.any_channel_wise = true;
        }
        break;
      case PointwiseOp::GaussianNoise:
        q.p0 = s.mean;
        q.p1 = s.std;
        q.p2 = s.sample_std ? s.std_low : 0.0;
        q.lo = s.low;
        q.hi = s.high;
        if (s.sample_std) q.flags |= detail::kSampleStd;
        if (s.random) q.flags |= detail::kRandom;
        break;
      case PointwiseOp::RescaleIntensity:
        q.p0 = s.b_min;
        q.p1 = s.b_max;
        q.stats = s.stats;
        if (s.has_b_min) q.flags |= detail::kHasB;
        if (s.has_b_min && s.has_b_max) q.flags |= detail::kAddB;
        if (s.channel_wise) {
          q.flags |= detail::kChannelWise;
          p.any_channel_wise = true;
        }
        break;
      case PointwiseOp::RicianNoise:
        q.p0 = s.mean;
        q.p1 = s.std;
        q.stats = s.stats;  // optional per-segment (mean, std) pairs
        VOXAUG_EXPECTS(!(s.stats && s.per_sample),
                       "rician_noise: give either the (mean, std) table (its std already relative) "
                       "or the per-sample std multipliers, not both");
        if (s.sample_std) q.flags |= detail::kSampleStd;
        if (s.per_sample) q.flags |= detail::kPerSample;
        if (s.channel_wise) {
          q.flags |= detail::kChannelWise;
          p.any_channel_wise = true;
        }
        break;
      case PointwiseOp::BiasField:
        q.coeffs = s.coefficients;
        q.degree = s.degree;
        q.ncoeff = bias_field_coefficients(s.degree);
        if (s.monomial_basis) q.flags |= detail::kMonomial;
        break;
      case PointwiseOp::AdjustContrast:
        q.p0 = s.value;
        q.lo = s.low;
        q.hi = s.high;
        q.stats = s.stats;
        if (s.random) q.flags |= detail::kRandom;
        if (s.invert) q.flags |= detail::kInvert;
        break;
      case PointwiseOp::Gamma:
        q.p0 = s.value;
        q.lo = s.low;
        q.hi = s.high;
        if (s.random) {  // one gamma per (sample, channel), as TorchIO
          q.flags |= detail::kRandom | detail::kChannelWise;
          p.any_channel_wise = true;
        }
        break;
      case PointwiseOp::HistogramShift:
        q.stats = s.stats;
        q.coeffs = s.coefficients;
        q.ncoeff = s.num_points;
        break;
      case PointwiseOp::StdShiftIntensity:
      case PointwiseOp::ScaleIntensityFixedMean:
        q.p0 = s.value;
        q.lo = s.low;
        q.hi = s.high;
        q.stats = s.stats;
        if (s.random) q.flags |= detail::kRandom;
        if (s.nonzero && s.op == PointwiseOp::StdShiftIntensity) q.flags |= detail::kNonzero;
        if (s.op == PointwiseOp::ScaleIntensityFixedMean) {
          if (s.fixed_mean) q.flags |= detail::kFixedMean;
          if (s.preserve_range) q.flags |= detail::kPreserveRange;
        }
        if (s.channel_wise) {
          q.flags |= detail::kChannelWise;
          p.any_channel_wise = true;
        }
        break;
    }
  }
  return p;
}

// Byte range [lo, hi) touched by a view.
void extent(const VolumeView& v, uintptr_t* lo, uintptr_t* hi) {
  int64_t min_off = 0, max_off = 0;
  for (int k = 0; k < 5; ++k) {
    const int64_t span = (v.shape[k] - 1) * v.strides[k];
    if (span < 0)
      min_off += span;
    else
      max_off += span;
  }
  const auto base = reinterpret_cast<uintptr_t>(v.data);
  *lo = base + min_off * dtype_size(v.dtype);
  *hi = base + (max_off + 1) * dtype_size(v.dtype);
}

bool same_layout(const VolumeView& a, const VolumeView& b) {
  if (a.data != b.data || a.dtype != b.dtype) return false;
  for (int k = 0; k < 5; ++k)
    if (a.strides[k] != b.strides[k] && a.shape[k] > 1) return false;
  return true;
}

void check_pair(const VolumeView& a, const char* an, const VolumeView& b, const char* bn,
                bool allow_same) {
  for (int k = 0; k < 5; ++k) {
    VOXAUG_EXPECTS(a.shape[k] >= 0, std::string(an) + ": sizes must be non-negative");
    VOXAUG_EXPECTS(a.shape[k] == b.shape[k], std::string(bn) + " must have the shape of " + an +
                                                 ": " + a.describe() + " vs " + b.describe());
  }
  VOXAUG_EXPECTS(
      a.device == b.device && (a.device == Device::CPU || a.device_index == b.device_index),
      std::string(bn) + " must be on the device of " + an + ": " + a.describe() + " vs " +
          b.describe());
  if (a.numel() == 0) return;
  VOXAUG_EXPECTS(a.data != nullptr && b.data != nullptr,
                 std::string(an) + " and " + bn + " must not be null");
  if (allow_same && same_layout(a, b)) return;
  uintptr_t alo, ahi, blo, bhi;
  extent(a, &alo, &ahi);
  extent(b, &blo, &bhi);
  VOXAUG_EXPECTS(ahi <= blo || bhi <= alo,
                 std::string(bn) + " overlaps " + an +
                     " without being the same view; pass the "
                     "same view for in-place operation or a separate buffer");
}

void check_batch(const VolumeView& v, uint32_t first_sample) {
  VOXAUG_EXPECTS(v.shape[0] + int64_t(first_sample) <= int64_t(0xffffffff) + 1,
                 "first_sample + batch size must not exceed 2^32, got " +
                     std::to_string(first_sample) + " + " + std::to_string(v.shape[0]));
}

// CUDA views need their per-sample values and statistics in device memory of their device.
void check_per_sample_pointers(const VolumeView& v, const detail::ChainParams& p) {
#if VOXAUG_WITH_CUDA
  if (v.device != Device::CUDA) return;
  for (int k = 0; k < p.num_steps; ++k) {
    if (p.steps[k].flags & detail::kPerSample)
      detail::check_device_pointer(p.steps[k].per_sample, v.device_index,
                                   "step " + std::to_string(k) + ": per-sample values");
    if (p.steps[k].coeffs)
      detail::check_device_pointer(p.steps[k].coeffs, v.device_index,
                                   "step " + std::to_string(k) + ": coefficients");
    if (p.steps[k].stats)
      detail::check_device_pointer(p.steps[k].stats, v.device_index,
                                   "step " + std::to_string(k) + ": stats");
  }
#else
  (void)v;
  (void)p;
#endif
}

}  // namespace

void validate_pointwise_steps(const PointwiseStep* steps, int num_steps) {
  VOXAUG_EXPECTS(num_steps >= 0 && num_steps <= kMaxPointwiseSteps,
                 "num_steps must be in [0, " + std::to_string(kMaxPointwiseSteps) + "], got " +
                     std::to_string(num_steps));
  VOXAUG_EXPECTS(num_steps == 0 || steps != nullptr, "steps must not be null");
  for (int k = 0; k < num_steps; ++k) {
    const PointwiseStep& s = steps[k];
    const std::string where = step_name(s, k);
    VOXAUG_EXPECTS(static_cast<int>(s.op) >= 0 && static_cast<int>(s.op) < kNumOps,
                   where + ": unknown op " + std::to_string(static_cast<int>(s.op)));
    expect_finite(s.prob, where, "prob");
    VOXAUG_EXPECTS(s.prob >= 0.0 && s.prob <= 1.0,
                   where + ": prob must be in [0, 1], got " + std::to_string(s.prob));
    switch (s.op) {
      case PointwiseOp::ScaleIntensityRange:
        expect_finite(s.a_min, where, "a_min");
        expect_finite(s.a_max, where, "a_max");
        if (s.has_b_min) expect_finite(s.b_min, where, "b_min");
        if (s.has_b_max) expect_finite(s.b_max, where, "b_max");
        break;
      case PointwiseOp::ShiftIntensity:
      case PointwiseOp::ScaleIntensity:
        if (s.random) {
          VOXAUG_EXPECTS(!s.per_sample,
                         where + ": give either per-sample values or a random range");
          expect_finite(s.low, where, "low");
          expect_finite(s.high, where, "high");
          VOXAUG_EXPECTS(s.low <= s.high, where + ": low must be <= high, got " +
                                              std::to_string(s.low) + " > " +
                                              std::to_string(s.high));
        } else if (!s.per_sample) {
          expect_finite(s.value, where, s.op == PointwiseOp::ShiftIntensity ? "offset" : "factor");
        }
        break;
      case PointwiseOp::RescaleIntensity:
        VOXAUG_EXPECTS(s.stats != nullptr, where + ": stats (from minmax) must not be null");
        if (s.has_b_min) expect_finite(s.b_min, where, "minv");
        if (s.has_b_max) expect_finite(s.b_max, where, "maxv");
        break;
      case PointwiseOp::GaussianNoise:
      case PointwiseOp::RicianNoise:
        expect_finite(s.mean, where, "mean");
        expect_finite(s.std, where, "std");
        VOXAUG_EXPECTS(s.std >= 0.0, where + ": std must be >= 0, got " + std::to_string(s.std));
        if (s.op == PointwiseOp::GaussianNoise && s.sample_std) {
          expect_finite(s.std_low, where, "std_low");
          VOXAUG_EXPECTS(s.std_low >= 0.0 && s.std_low <= s.std,
                         where + ": std_low must be in [0, std] = [0, " + std::to_string(s.std) +
                             "], got " + std::to_string(s.std_low));
        }
        if (s.op == PointwiseOp::GaussianNoise && s.random) {
          expect_finite(s.low, where, "mean low");
          expect_finite(s.high, where, "mean high");
          VOXAUG_EXPECTS(s.low <= s.high, where + ": the mean range needs low <= high, got (" +
                                              std::to_string(s.low) + ", " +
                                              std::to_string(s.high) + ")");
        }
        break;
      case PointwiseOp::BiasField:
        VOXAUG_EXPECTS(s.coefficients != nullptr, where + ": coefficients must not be null");
        VOXAUG_EXPECTS(s.degree >= 0 && s.degree <= kMaxBiasFieldDegree,
                       where + ": degree must be in [0, " + std::to_string(kMaxBiasFieldDegree) +
                           "], got " + std::to_string(s.degree));
        break;
      case PointwiseOp::AdjustContrast:
      case PointwiseOp::Gamma:
        if (s.op == PointwiseOp::AdjustContrast)
          VOXAUG_EXPECTS(s.stats != nullptr, where + ": stats (from minmax) must not be null");
        if (s.random) {
          const bool log_range = s.op == PointwiseOp::Gamma;
          expect_finite(s.low, where, log_range ? "log_gamma low" : "gamma low");
          expect_finite(s.high, where, log_range ? "log_gamma high" : "gamma high");
          VOXAUG_EXPECTS(s.low <= s.high, where + ": low must be <= high, got " +
                                              std::to_string(s.low) + " > " +
                                              std::to_string(s.high));
          VOXAUG_EXPECTS(log_range || s.low > 0.0, where + ": gamma must be > 0, got the range [" +
                                                       std::to_string(s.low) + ", " +
                                                       std::to_string(s.high) + ")");
          // exp(log_gamma) must stay a finite float32 (the power takes finite exponents only).
          VOXAUG_EXPECTS(!log_range || (s.low >= -88.0 && s.high <= 88.0),
                         where + ": log_gamma must be in [-88, 88], got the range [" +
                             std::to_string(s.low) + ", " + std::to_string(s.high) + ")");
        } else {
          expect_finite(s.value, where, "gamma");
          VOXAUG_EXPECTS(s.value > 0.0,
                         where + ": gamma must be > 0, got " + std::to_string(s.value));
        }
        break;
      case PointwiseOp::HistogramShift:
        VOXAUG_EXPECTS(s.stats != nullptr, where + ": stats (from minmax) must not be null");
        VOXAUG_EXPECTS(s.coefficients != nullptr, where + ": control points must not be null");
        VOXAUG_EXPECTS(s.num_points >= 1 && s.num_points <= kMaxHistogramPoints,
                       where + ": num_points must be in [1, " +
                           std::to_string(kMaxHistogramPoints) + "], got " +
                           std::to_string(s.num_points));
        break;
      case PointwiseOp::StdShiftIntensity:
      case PointwiseOp::ScaleIntensityFixedMean:
        VOXAUG_EXPECTS(s.stats != nullptr,
                       where + (s.op == PointwiseOp::StdShiftIntensity
                                    ? ": stats (from moments) must not be null"
                                    : ": stats ((mean, min, max) per segment) must not be null"));
        if (s.random) {
          expect_finite(s.low, where, "factor low");
          expect_finite(s.high, where, "factor high");
          VOXAUG_EXPECTS(s.low <= s.high, where + ": low must be <= high, got " +
                                              std::to_string(s.low) + " > " +
                                              std::to_string(s.high));
        } else {
          expect_finite(s.value, where, "factor");
        }
        break;
    }
  }
}

void pointwise_chain(const VolumeView& in, const VolumeView& out, const PointwiseStep* steps,
                     int num_steps, cudaStream_t stream, uint32_t first_sample) {
  detail::ChainParams p = detail::pack_chain(steps, num_steps);
  p.first_sample = first_sample;
  p.channels = in.shape[1];
  for (int a = 0; a < 3; ++a) p.dims[a] = in.shape[2 + a];
  check_pair(in, "input", out, "output", /*allow_same=*/true);
  check_batch(in, first_sample);
  if (in.numel() == 0) return;
  check_per_sample_pointers(in, p);
  if (in.device == Device::CPU) {
    detail::visit_image_dtype(in.dtype, "input", [&](auto tag) {
      detail::chain_forward_cpu<typename decltype(tag)::type>(in, out, p);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::chain_forward_cuda(in, out, p, stream);
#else
  VOXAUG_FAIL("input is a CUDA view but this voxaug was built without CUDA");
#endif
}

void pointwise_chain_backward(const VolumeView& grad_out, const VolumeView& in,
                              const VolumeView& grad_in, const PointwiseStep* steps, int num_steps,
                              cudaStream_t stream, uint32_t first_sample) {
  detail::ChainParams p = detail::pack_chain(steps, num_steps);
  p.first_sample = first_sample;
  p.channels = in.shape[1];
  for (int a = 0; a < 3; ++a) p.dims[a] = in.shape[2 + a];
  for (int k = 0; k < num_steps; ++k)
    VOXAUG_EXPECTS(steps[k].op != PointwiseOp::RicianNoise,
                   step_name(steps[k], k) +
                       " is not differentiable (the gradient of Rician noise is not implemented)");
  check_pair(in, "input", grad_out, "grad_output", /*allow_same=*/true);
  check_pair(in, "input", grad_in, "grad_input", /*allow_same=*/false);
  VOXAUG_EXPECTS(grad_out.dtype == in.dtype && grad_in.dtype == in.dtype,
                 std::string("grad_output and grad_input must have the input's dtype ") +
                     dtype_name(in.dtype) + ", got " + dtype_name(grad_out.dtype) + " and " +
                     dtype_name(grad_in.dtype));
  check_batch(in, first_sample);
  if (in.numel() == 0) return;
  check_per_sample_pointers(in, p);
  if (in.device == Device::CPU) {
    detail::visit_float_dtype(in.dtype, "input", [&](auto tag) {
      detail::chain_backward_cpu<typename decltype(tag)::type>(grad_out, in, grad_in, p);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::chain_backward_cuda(grad_out, in, grad_in, p, stream);
#else
  VOXAUG_FAIL("input is a CUDA view but this voxaug was built without CUDA");
#endif
}

namespace detail {
ChainParams pack_chain(const PointwiseStep* steps, int num_steps) {
  return pack_impl(steps, num_steps);
}

ChainParams pack_chain_for(const VolumeView& data, const PointwiseStep* steps, int num_steps,
                           uint32_t first_sample) {
  ChainParams p = pack_impl(steps, num_steps);
  p.first_sample = first_sample;
  p.channels = data.shape[1];
  for (int a = 0; a < 3; ++a) p.dims[a] = data.shape[2 + a];
  check_batch(data, first_sample);
  if (data.numel() > 0) check_per_sample_pointers(data, p);
  return p;
}

Segments make_segments(const VolumeView& in, bool channel_wise) {
  Segments sg;
  sg.ix = make_indexer(in);
  sg.per_sample = channel_wise ? in.shape[1] : 1;
  sg.per_segment = in.sample_numel() / (channel_wise ? in.shape[1] : 1);
  return sg;
}

namespace {
// min / max of a contiguous run, NaNs ignored: independent lanes with branch-free selects
// (fsel: GCC does not if-convert a float `?:`), so the loop vectorises; min and max are exact
// in the compute type, so the lanes' order does not change the result. kLanes independent
// accumulators: 16 fill the baseline's xmm registers; the AVX clones take 64 (4 zmm / 8 ymm per
// extreme): with one vector per extreme the loop waited on the min / max latency (about 3x
// slower on Zen 4 than the cache delivers the data).
template <int kLanes, class T>
VOXAUG_FORCEINLINE void minmax_dense(const T* p, int64_t len, double& lo, double& hi) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  Acc a[kLanes], b[kLanes];
  for (int j = 0; j < kLanes; ++j) a[j] = Acc(INFINITY), b[j] = Acc(-INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const Acc v = load_as<Acc>(p[i + j]);
      a[j] = fsel(v < a[j], v, a[j]);
      b[j] = fsel(v > b[j], v, b[j]);
    }
  for (int j = 0; i < len; ++i, ++j) {
    const Acc v = load_as<Acc>(p[i]);
    a[j] = fsel(v < a[j], v, a[j]);
    b[j] = fsel(v > b[j], v, b[j]);
  }
  for (int j = 0; j < kLanes; ++j) {
    lo = a[j] < lo ? a[j] : lo;
    hi = b[j] > hi ? b[j] : hi;
  }
}

template <class T>
void minmax_dense_baseline(const T* p, int64_t len, double& lo, double& hi) {
  minmax_dense<16>(p, len, lo, hi);
}
#if VOXAUG_CPU_CLONES
template <class T>
VOXAUG_TARGET_AVX2 void minmax_dense_avx2(const T* p, int64_t len, double& lo, double& hi) {
  minmax_dense<64>(p, len, lo, hi);
}
template <class T>
VOXAUG_TARGET_AVX512 void minmax_dense_avx512(const T* p, int64_t len, double& lo, double& hi) {
  minmax_dense<64>(p, len, lo, hi);
}
#endif
// minmax_dense in this CPU's widest clone (exact selections: the same result).
template <class T>
void minmax_dense_any(const T* p, int64_t len, double& lo, double& hi) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: minmax_dense_avx512(p, len, lo, hi); return;
    case CpuIsa::Avx2: minmax_dense_avx2(p, len, lo, hi); return;
    default: break;
  }
#endif
  minmax_dense_baseline(p, len, lo, hi);
}

template <class T>
void minmax_cpu(const VolumeView& in, const Segments& sg, double* out) {
  const T* data = static_cast<const T*>(in.data);
  const int64_t segments = in.shape[0] * sg.per_sample;
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (sg.per_segment + kChunk - 1) / kChunk;
  std::vector<double> lo(segments * chunks, INFINITY), hi(segments * chunks, -INFINITY);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < segments * chunks; ++t) {
    const int64_t seg = t / chunks, begin = (t % chunks) * kChunk;
    const int64_t end = std::min(sg.per_segment, begin + kChunk);
    double a = INFINITY, b = -INFINITY;
    if (sg.ix.dense) {
      minmax_dense_any(data + sg.offset(seg, begin), end - begin, a, b);
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const double v = load_as<std::conditional_t<std::is_same_v<T, double>, double, float>>(
            data[sg.offset(seg, i)]);
        a = v < a ? v : a;  // NaN compares false: ignored
        b = v > b ? v : b;
      }
    }
    lo[t] = a;
    hi[t] = b;
  }
  for (int64_t seg = 0; seg < segments; ++seg) {
    double a = INFINITY, b = -INFINITY;
    for (int64_t c = 0; c < chunks; ++c) {
      a = std::min(a, lo[seg * chunks + c]);
      b = std::max(b, hi[seg * chunks + c]);
    }
    out[2 * seg] = a + 0.0;  // a zero extreme is +0 (as the CUDA decode): -0 and +0 tie
    out[2 * seg + 1] = b + 0.0;
  }
}
}  // namespace
#if VOXAUG_WITH_CUDA
void minmax_cuda(const VolumeView& in, const Segments& sg, double* out, cudaStream_t stream);
#endif
}  // namespace detail

void minmax(const VolumeView& in, double* out_minmax, bool channel_wise, cudaStream_t stream) {
  for (int k = 0; k < 5; ++k) VOXAUG_EXPECTS(in.shape[k] >= 0, "input: sizes must be non-negative");
  if (in.shape[0] == 0 || (channel_wise && in.shape[1] == 0)) return;
  VOXAUG_EXPECTS(out_minmax != nullptr, "out_minmax must not be null");
  VOXAUG_EXPECTS(in.numel() > 0,
                 "input: minmax of an empty volume is undefined (shape " + in.describe() + ")");
  const detail::Segments sg = detail::make_segments(in, channel_wise);
  if (in.device == Device::CPU) {
    detail::visit_image_dtype(in.dtype, "input", [&](auto tag) {
      detail::minmax_cpu<typename decltype(tag)::type>(in, sg, out_minmax);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(out_minmax, in.device_index, "out_minmax");
  detail::minmax_cuda(in, sg, out_minmax, stream);
#else
  (void)stream;
  VOXAUG_FAIL("input is a CUDA view but this voxaug was built without CUDA");
#endif
}

void philox_uniforms(uint64_t seed, uint32_t first_sample, int64_t batch, int64_t count,
                     double* out) {
  VOXAUG_EXPECTS(batch >= 0 && count >= 0, "philox_uniforms: batch and count must be >= 0");
  VOXAUG_EXPECTS(batch + int64_t(first_sample) <= int64_t(0xffffffff) + 1,
                 "philox_uniforms: first_sample + batch must not exceed 2^32");
  VOXAUG_EXPECTS(out != nullptr || batch * count == 0, "philox_uniforms: out must not be null");
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t k = 0; k < count; k += 2) {
      const detail::U32x4 r = detail::philox_block(seed, static_cast<uint64_t>(k / 2),
                                                   first_sample + static_cast<uint32_t>(i),
                                                   detail::PhiloxStream::Params);
      out[i * count + k] = detail::uniform01_f64(r.x, r.y);
      if (k + 1 < count) out[i * count + k + 1] = detail::uniform01_f64(r.z, r.w);
    }
}

void scale_intensity_range(const VolumeView& in, const VolumeView& out, double a_min, double a_max,
                           const double* b_min, const double* b_max, bool clip,
                           cudaStream_t stream) {
  const PointwiseStep s = PointwiseStep::scale_intensity_range(a_min, a_max, b_min, b_max, clip);
  pointwise_chain(in, out, &s, 1, stream);
}
void shift_intensity(const VolumeView& in, const VolumeView& out, const float* per_sample_offsets,
                     cudaStream_t stream) {
  VOXAUG_EXPECTS(per_sample_offsets != nullptr || in.numel() == 0, "offsets must not be null");
  const PointwiseStep s = PointwiseStep::shift_intensity(per_sample_offsets);
  pointwise_chain(in, out, &s, 1, stream);
}
void rand_shift_intensity(const VolumeView& in, const VolumeView& out, double low, double high,
                          double prob, uint64_t seed, cudaStream_t stream) {
  const PointwiseStep s = PointwiseStep::rand_shift_intensity(low, high, prob, seed);
  pointwise_chain(in, out, &s, 1, stream);
}
void scale_intensity(const VolumeView& in, const VolumeView& out, const float* per_sample_factors,
                     cudaStream_t stream) {
  VOXAUG_EXPECTS(per_sample_factors != nullptr || in.numel() == 0, "factors must not be null");
  const PointwiseStep s = PointwiseStep::scale_intensity(per_sample_factors);
  pointwise_chain(in, out, &s, 1, stream);
}
void rand_scale_intensity(const VolumeView& in, const VolumeView& out, double low, double high,
                          double prob, uint64_t seed, cudaStream_t stream) {
  const PointwiseStep s = PointwiseStep::rand_scale_intensity(low, high, prob, seed);
  pointwise_chain(in, out, &s, 1, stream);
}
void gaussian_noise(const VolumeView& in, const VolumeView& out, double mean, double std,
                    bool sample_std, double prob, uint64_t seed, cudaStream_t stream) {
  const PointwiseStep s = PointwiseStep::gaussian_noise(mean, std, sample_std, prob, seed);
  pointwise_chain(in, out, &s, 1, stream);
}

}  // namespace voxaug
