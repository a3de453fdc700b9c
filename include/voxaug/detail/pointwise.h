// voxaug: the per-element math of the fused pointwise chain (intensity + noise).
// Compiled by g++ for the OpenMP backend and by nvcc for the CUDA backend; both call
// exactly this code, so their results are bit-identical.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/detail/philox.h"
#include "voxaug/intensity.h"

namespace voxaug::detail {

enum StepFlags : uint32_t {
  kHasB = 1u << 0,        // SIR: rescale to [b_min, b_max]
  kClipLo = 1u << 1,      // SIR: clamp below at clip_lo
  kClipHi = 1u << 2,      // SIR: clamp above at clip_hi
  kDegenerate = 1u << 3,  // SIR: a_min == a_max -> x - a_min (+ b_min), as MONAI
  kAddB = 1u << 4,        // SIR degenerate with b_min given
  kRandom = 1u << 5,      // Shift/Scale: value ~ U(lo, hi)
  kChannelWise = 1u << 6,
  kSampleStd = 1u << 7,       // Noise: std ~ U(std_low, std) (p2 = std_low, 0 for MONAI)
  kPerSample = 1u << 8,       // Shift/Scale: value from per_sample[n]; Rician: std multiplier
  kMonomial = 1u << 9,        // BiasField: TorchIO's monomial basis and grid
  kInvert = 1u << 10,         // AdjustContrast: invert_image
  kNonzero = 1u << 11,        // StdShift: zeros stay zero
  kFixedMean = 1u << 12,      // ScaleFixedMean: scale about the segment's mean
  kPreserveRange = 1u << 13,  // ScaleFixedMean: clamp to the segment's [min, max]
  // Rescale reuses kHasB (minv given) and kAddB (minv and maxv given), kChannelWise.
  // Rician reuses kSampleStd, kChannelWise; AdjustContrast / Gamma reuse kRandom; Noise
  // reuses kRandom (mean ~ U(lo, hi)).
  // StdShift / ScaleFixedMean reuse kRandom, kChannelWise.
};

// A step as it travels to the kernel (by value, in the functor).
struct KStep {
  int32_t op;
  uint32_t flags;
  double p0, p1, p2, p3;  // SIR: a_min, a_max - a_min, b_max - b_min, b_min
                          // Shift: offset; Scale: factor; Noise, Rician: mean, std
                          // AdjustContrast, Gamma: gamma
  double lo, hi;          // SIR: clip bounds; random Shift/Scale/AdjustContrast/Gamma: range
  double prob;
  uint64_t seed;
  const float* per_sample;
  const double* stats;  // Rescale, AdjustContrast, HistogramShift: (min, max) pairs;
                        // StdShift: moments triples; ScaleFixedMean: (mean, min, max);
                        // Rician (optional): (mean, std) pairs per segment
  const float* coeffs;  // BiasField: (N, ncoeff) coefficients; HistogramShift: (N, ncoeff)
                        // floating control points, NaN-padded
  int32_t degree;       // BiasField
  int32_t ncoeff;       // BiasField, HistogramShift (points per row)
};

struct ChainParams {
  int32_t num_steps;
  uint32_t first_sample;  // global index of local sample 0 in the random streams
  bool any_channel_wise;
  int64_t channels;  // C: index of per-(sample, channel) statistics
  int64_t dims[3];   // D, H, W (bias field coordinates)
  KStep steps[kMaxPointwiseSteps];
};

// Validates the steps (validate_pointwise_steps) and packs them for the kernels
// (kernels/intensity/intensity.cpp).
ChainParams pack_chain(const PointwiseStep* steps, int num_steps);
// pack_chain for a chain over `data` ((N, C, D, H, W)): also sets first_sample, channels and
// dims, and checks the global sample range and the steps' per-sample arrays (device, non-null).
ChainParams pack_chain_for(const VolumeView& data, const PointwiseStep* steps, int num_steps,
                           uint32_t first_sample);

// A step's parameters resolved for one sample (and channel, for channel-wise draws).
template <class Acc>
struct Resolved {
  Acc p0, p1, p2, p3, lo, hi;
  const float* table;  // HistogramShift: this sample's control points
  double step;         // HistogramShift: 1 / (count - 1), linspace's step (once per sample)
  int32_t count;       // HistogramShift: number of control points
  bool active;
};

// n: local sample (indexes per_sample arrays); g: its global index in the random streams.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Resolved<Acc> resolve_step(const KStep& s, uint32_t n, uint32_t g,
                                                        int64_t c, int64_t channels) {
  Resolved<Acc> r{};
  const U32x4 sample_draw = philox_block(s.seed, 0, g, PhiloxStream::Sample);
  r.active = s.prob >= 1.0 || static_cast<double>(uniform01(sample_draw.x)) < s.prob;
  r.lo = static_cast<Acc>(s.lo);
  r.hi = static_cast<Acc>(s.hi);
  switch (static_cast<PointwiseOp>(s.op)) {
    case PointwiseOp::ScaleIntensityRange:
      r.p0 = static_cast<Acc>(s.p0);
      r.p1 = static_cast<Acc>(s.p1);
      r.p2 = static_cast<Acc>(s.p2);
      r.p3 = static_cast<Acc>(s.p3);
      break;
    case PointwiseOp::ShiftIntensity:
    case PointwiseOp::ScaleIntensity: {
      Acc v;
      if (s.flags & kPerSample) {
        v = static_cast<Acc>(s.per_sample[n]);
      } else if (s.flags & kRandom) {
        const uint32_t bits =
            (s.flags & kChannelWise)
                ? philox_block(s.seed, static_cast<uint64_t>(c), g, PhiloxStream::Channel).x
                : sample_draw.y;
        v = static_cast<Acc>(
            uniform_range(bits, static_cast<float>(s.lo), static_cast<float>(s.hi)));
      } else {
        v = static_cast<Acc>(s.p0);
      }
      // Scale multiplies by (1 + factor); a fixed factor has it precomputed in double.
      if (static_cast<PointwiseOp>(s.op) == PointwiseOp::ScaleIntensity) {
        r.p0 = (s.flags & (kPerSample | kRandom)) ? fadd(static_cast<Acc>(1), v)
                                                  : static_cast<Acc>(1.0 + s.p0);
      } else {
        r.p0 = v;
      }
      break;
    }
    case PointwiseOp::RescaleIntensity: {
      const int64_t seg = (s.flags & kChannelWise) ? int64_t(n) * channels + c : int64_t(n);
      const double mn = s.stats[2 * seg], mx = s.stats[2 * seg + 1];
      // MONAI computes min / max in the data dtype: round them to it before use.
      r.p0 = static_cast<Acc>(mn);
      r.p1 = fsub(static_cast<Acc>(mx), static_cast<Acc>(mn));
      r.p2 = static_cast<Acc>(s.p1 - s.p0);  // maxv - minv
      r.p3 = static_cast<Acc>(s.p0);         // minv
      break;
    }
    case PointwiseOp::GaussianNoise: {
      // mean ~ U(lo, hi) with kRandom (TorchIO); std ~ U(p2, p1) with kSampleStd (MONAI: p2 = 0,
      // where lo + (hi - lo) u is exactly hi u).
      r.p0 = (s.flags & kRandom)
                 ? static_cast<Acc>(uniform_range(sample_draw.y, static_cast<float>(s.lo),
                                                  static_cast<float>(s.hi)))
                 : static_cast<Acc>(s.p0);
      r.p1 = (s.flags & kSampleStd)
                 ? static_cast<Acc>(uniform_range(sample_draw.z, static_cast<float>(s.p2),
                                                  static_cast<float>(s.p1)))
                 : static_cast<Acc>(s.p1);
      break;
    }
    case PointwiseOp::RicianNoise: {
      // MONAI draws one std per call (per channel when channel-wise): U(0, std) with sample_std.
      const bool cw = s.flags & kChannelWise;
      const uint32_t bits =
          cw ? philox_block(s.seed, static_cast<uint64_t>(c), g, PhiloxStream::Channel).x
             : sample_draw.z;
      const int64_t seg = cw ? int64_t(n) * channels + c : int64_t(n);
      // Per-segment (mean, std) pairs (MONAI's per-channel mean / std sequences) replace the
      // step's mean and std.
      const double mean = s.stats ? s.stats[2 * seg] : s.p0;
      const double spread = s.stats ? s.stats[2 * seg + 1] : s.p1;
      r.p0 = static_cast<Acc>(mean);
      r.p1 = (s.flags & kSampleStd)
                 ? static_cast<Acc>(fmul(static_cast<float>(spread), uniform01(bits)))
                 : static_cast<Acc>(spread);
      if (s.flags & kPerSample)  // relative: times the image's (channel's) std
        r.p1 = fmul(r.p1, static_cast<Acc>(s.per_sample[seg]));
      break;
    }
    case PointwiseOp::BiasField: break;
    case PointwiseOp::AdjustContrast: {
      // MONAI: min / max / range in the data dtype, range + 1e-7 as the divisor; inverted
      // images (-x) have min -max and the same range.
      const Acc mn = static_cast<Acc>(s.stats[2 * int64_t(n)]);
      const Acc mx = static_cast<Acc>(s.stats[2 * int64_t(n) + 1]);
      const bool inv = s.flags & kInvert;
      r.p0 = inv ? -mx : mn;
      r.p1 = inv ? fsub(-mn, -mx) : fsub(mx, mn);
      r.p2 = fadd(r.p1, static_cast<Acc>(1e-7));
      r.p3 = (s.flags & kRandom)
                 ? static_cast<Acc>(uniform_range(sample_draw.y, static_cast<float>(s.lo),
                                                  static_cast<float>(s.hi)))
                 : static_cast<Acc>(s.p0);
      break;
    }
    case PointwiseOp::StdShiftIntensity: {
      // MONAI: factor * std in float32 (one factor per sample, also channel-wise).
      const int64_t seg = (s.flags & kChannelWise) ? int64_t(n) * channels + c : int64_t(n);
      const Acc f = (s.flags & kRandom)
                        ? static_cast<Acc>(uniform_range(sample_draw.y, static_cast<float>(s.lo),
                                                         static_cast<float>(s.hi)))
                        : static_cast<Acc>(s.p0);
      r.p0 = fmul(f, static_cast<Acc>(s.stats[3 * seg + 2]));
      break;
    }
    case PointwiseOp::ScaleIntensityFixedMean: {
      const bool cw = s.flags & kChannelWise;
      const int64_t seg = cw ? int64_t(n) * channels + c : int64_t(n);
      if (s.flags & kRandom) {  // one factor per sample, or per (sample, channel)
        const uint32_t bits =
            cw ? philox_block(s.seed, static_cast<uint64_t>(c), g, PhiloxStream::Channel).x
               : sample_draw.y;
        const Acc f = static_cast<Acc>(
            uniform_range(bits, static_cast<float>(s.lo), static_cast<float>(s.hi)));
        r.p1 = fadd(static_cast<Acc>(1), f);
      } else {
        r.p1 = static_cast<Acc>(1.0 + s.p0);  // MONAI: 1 + factor in double, then the dtype
      }
      r.p0 = static_cast<Acc>(s.stats[3 * seg]);
      r.lo = static_cast<Acc>(s.stats[3 * seg + 1]);
      r.hi = static_cast<Acc>(s.stats[3 * seg + 2]);
      break;
    }
    case PointwiseOp::HistogramShift: {
      // MONAI: min, max and max - min in the data dtype; the row's control points up to the
      // first NaN.
      const Acc mn = static_cast<Acc>(s.stats[2 * int64_t(n)]);
      const Acc mx = static_cast<Acc>(s.stats[2 * int64_t(n) + 1]);
      r.p0 = mn;
      r.p1 = fsub(mx, mn);
      r.table = s.coeffs + int64_t(n) * s.ncoeff;
      int32_t k = 0;
      while (k < s.ncoeff && r.table[k] == r.table[k]) ++k;
      r.count = k;
      r.step = k > 1 ? fdiv(1.0, static_cast<double>(k - 1)) : 0.0;
      break;
    }
    case PointwiseOp::Gamma: {
      if (s.flags & kRandom) {  // TorchIO: gamma = exp(beta) per channel
        const uint32_t bits =
            philox_block(s.seed, static_cast<uint64_t>(c), g, PhiloxStream::Channel).x;
        r.p0 = fexp(static_cast<Acc>(
            uniform_range(bits, static_cast<float>(s.lo), static_cast<float>(s.hi))));
      } else {
        r.p0 = static_cast<Acc>(s.p0);
      }
      break;
    }
  }
  return r;
}

// The per-op math on one value, written branch-free (selects) so the host's tiled loops
// vectorise. `d` carries d(value)/d(input) when Deriv is true.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_scale_intensity_range(uint32_t flags, const Resolved<Acc>& r,
                                                           Acc& x, Acc& d) {
  x = fsub(x, r.p0);
  if (flags & kDegenerate) {  // a_min == a_max: MONAI returns x - a_min (+ b_min)
    if (flags & kAddB) x = fadd(x, r.p3);
    return;
  }
  x = fdiv(x, r.p1);
  if (Deriv) d = fdiv(d, r.p1);
  if (flags & kHasB) {
    x = fadd(fmul(x, r.p2), r.p3);
    if (Deriv) d = fmul(d, r.p2);
  }
  // torch.clamp semantics: NaN stays NaN; the gradient passes where lo <= x <= hi.
  if (flags & kClipLo) {
    const bool below = x < r.lo;
    x = below ? r.lo : x;
    if (Deriv) d = below ? Acc(0) : d;
  }
  if (flags & kClipHi) {
    const bool above = x > r.hi;
    x = above ? r.hi : x;
    if (Deriv) d = above ? Acc(0) : d;
  }
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_shift_intensity(const Resolved<Acc>& r, Acc& x, Acc&) {
  x = fadd(x, r.p0);
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_scale_intensity(const Resolved<Acc>& r, Acc& x, Acc& d) {
  x = fmul(x, r.p0);
  if (Deriv) d = fmul(d, r.p0);
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_rescale_intensity(uint32_t flags, const Resolved<Acc>& r,
                                                       Acc& x, Acc& d) {
  if (r.p1 == Acc(0)) {  // max == min: MONAI returns x * minv, or x without minv
    if (flags & kHasB) {
      x = fmul(x, r.p3);
      if (Deriv) d = fmul(d, r.p3);
    }
    return;
  }
  x = fdiv(fsub(x, r.p0), r.p1);
  if (Deriv) d = fdiv(d, r.p1);
  if (flags & kAddB) {  // both minv and maxv given
    x = fadd(fmul(x, r.p2), r.p3);
    if (Deriv) d = fmul(d, r.p2);
  }
}

// MONAI draws noise = mean + std * z and adds it.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_gaussian_noise(const Resolved<Acc>& r, Acc& x, float z) {
  x = fadd(x, fadd(r.p0, fmul(r.p1, static_cast<Acc>(z))));
}

// MONAI RandRicianNoise: sqrt((x + n1)^2 + n2^2), n1 = mean + std z1, n2 = mean + std z2.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_rician_noise(const Resolved<Acc>& r, Acc& x, float z1,
                                                  float z2) {
  const Acc a = fadd(x, fadd(r.p0, fmul(r.p1, static_cast<Acc>(z1))));
  const Acc b = fadd(r.p0, fmul(r.p1, static_cast<Acc>(z2)));
  x = fsqrt(fadd(fmul(a, a), fmul(b, b)));
}

// MONAI AdjustContrast: ((x - mn) / (range + 1e-7))^gamma * range + mn (on -x, negated back,
// with invert_image). d/dx = gamma b^(gamma-1) range / (range + 1e-7), stats constant.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_adjust_contrast(uint32_t flags, const Resolved<Acc>& r, Acc& x,
                                                     Acc& d) {
  const bool inv = flags & kInvert;
  const Acc xi = fsel(inv, -x, x);
  const Acc b = fdiv(fsub(xi, r.p0), r.p2);
  const Acc y = fadd(fmul(fpow_nonneg(b, r.p3), r.p1), r.p0);
  if (Deriv) {
    const Acc db = fmul(r.p3, fpow_nonneg(b, fsub(r.p3, Acc(1))));
    d = fmul(d, fdiv(fmul(db, r.p1), r.p2));
  }
  x = fsel(inv, -y, y);
}

// TorchIO Gamma: sign(x) |x|^gamma (x^gamma for non-negative images, as TorchIO's power()).
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_gamma(const Resolved<Acc>& r, Acc& x, Acc& d) {
  const bool neg = x < Acc(0);
  const Acc ax = fsel(neg, -x, x);
  const Acc p = fpow_nonneg(ax, r.p0);
  if (Deriv) d = fmul(d, fmul(r.p0, fpow_nonneg(ax, fsub(r.p0, Acc(1)))));
  x = fsel(neg, -p, p);
}

// MONAI StdShiftIntensity: x + factor * std (only x != 0 with nonzero).
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_std_shift(uint32_t flags, const Resolved<Acc>& r, Acc& x,
                                               Acc&) {
  const bool keep = (flags & kNonzero) && x == Acc(0);
  x = fsel(keep, x, fadd(x, r.p0));
}

// MONAI ScaleIntensityFixedMean: ((x - mean) * (1 + f) + mean), clamped to [min, max] with
// preserve_range (torch.clamp: NaN stays NaN; the gradient passes where min <= y <= max).
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_scale_fixed_mean(uint32_t flags, const Resolved<Acc>& r,
                                                      Acc& x, Acc& d) {
  const bool fm = flags & kFixedMean;
  Acc y = fm ? fsub(x, r.p0) : x;
  y = fmul(y, r.p1);
  if (Deriv) d = fmul(d, r.p1);
  if (fm) y = fadd(y, r.p0);
  if (flags & kPreserveRange) {
    const bool below = y<r.lo, above = y> r.hi;
    y = fsel(below, r.lo, y);
    y = fsel(above, r.hi, y);
    if (Deriv) d = fsel(below || above, Acc(0), d);
  }
  x = y;
}

// Histogram shift control point k of K at min mn, range rg: MONAI's float64
// np.linspace(0, 1, K) (k * step, step = 1 / (K - 1), the last exactly 1) in the data dtype, times
// the range, plus the minimum; the floating points likewise from the table.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc hist_reference_point(int32_t k, int32_t K, double step, Acc mn,
                                                      Acc rg) {
  const double u = k == K - 1 ? 1.0 : fmul(static_cast<double>(k), step);
  return fadd(fmul(static_cast<Acc>(u), rg), mn);
}
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc hist_floating_point(float y, Acc mn, Acc rg) {
  return fadd(fmul(static_cast<Acc>(y), rg), mn);
}

// MONAI's torch interp: the segment (x0, f0) - (x1, f1) that searchsorted picked has slope
// m = (f1 - f0) / (x1 - x0) and intercept b = f0 - m x0 (float32 tensors in MONAI), and
// maps x to m x + b; below the first point f_first, above the last f_last (np.interp's ends).
// d/dx: m inside, 0 outside.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void hist_slope_intercept(Acc x0, Acc f0, Acc x1, Acc f1, Acc& m,
                                                       Acc& b) {
  m = fdiv(fsub(f1, f0), fsub(x1, x0));
  b = fsub(f0, fmul(m, x0));
}
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void hist_segment_value(Acc& x, Acc& d, Acc m, Acc b, Acc x_first,
                                                     Acc f_first, Acc x_last, Acc f_last) {
  const bool below = x<x_first, above = x> x_last;
  Acc y = fadd(fmul(m, x), b);
  y = fsel(below, f_first, y);
  y = fsel(above, f_last, y);
  if (Deriv) d = fsel(below || above, Acc(0), fmul(d, m));
  x = y;
}

// Per-voxel histogram shift (the device path; the host runs the same operations step-major
// in kernels/intensity/chain_cpu.h). The segment is the last k in [1, K - 2] with x_k < x,
// else 0: MONAI's clip(searchsorted(xp, x) - 1, 0, K - 2) on the sorted points.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_histogram_shift(const Resolved<Acc>& r, Acc& x, Acc& d) {
  const int32_t K = r.count;
  if (K < 2 || r.p1 == Acc(0)) return;  // gate closed / constant image: MONAI returns it
  const Acc mn = r.p0, rg = r.p1;
  Acc x0 = hist_reference_point(0, K, r.step, mn, rg), f0 = hist_floating_point(r.table[0], mn, rg);
  Acc x1 = hist_reference_point(1, K, r.step, mn, rg), f1 = hist_floating_point(r.table[1], mn, rg);
  const Acc x_first = x0, f_first = f0;
  for (int32_t k = 1; k < K - 1; ++k) {
    const Acc xk = x1, fk = f1;
    const Acc xn = hist_reference_point(k + 1, K, r.step, mn, rg);
    const Acc fn = hist_floating_point(r.table[k + 1], mn, rg);
    const bool in = xk < x;
    x0 = fsel(in, xk, x0);
    f0 = fsel(in, fk, f0);
    x1 = fsel(in, xn, x1);
    f1 = fsel(in, fn, f1);
    if (!in) break;  // sorted points: no later one is below x either
  }
  const Acc x_last = hist_reference_point(K - 1, K, r.step, mn, rg);
  const Acc f_last = hist_floating_point(r.table[K - 1], mn, rg);
  Acc m, b;
  hist_slope_intercept(x0, f0, x1, f1, m, b);
  hist_segment_value<Deriv>(x, d, m, b, x_first, f_first, x_last, f_last);
}

// Bias field coordinate of index i on an axis of n voxels. MONAI: float32
// np.linspace(-1, 1, n) (float64 i * (2 / (n - 1)) - 1, the last one exactly 1, -1 for n = 1).
// TorchIO: (i - (n - 1) / 2) / ((n - 1) / 2) in float64, 0 for n = 1.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc bias_coordinate(int64_t i, int64_t n, bool monomial) {
  if (monomial) {
    if (n == 1) return Acc(0);
    const double h = fmul(static_cast<double>(n - 1), 0.5);
    return static_cast<Acc>(fdiv(fsub(static_cast<double>(i), h), h));
  }
  if (n == 1) return Acc(-1);
  if (i == n - 1) return Acc(1);
  const double step = fdiv(2.0, static_cast<double>(n - 1));
  return static_cast<Acc>(static_cast<float>(fadd(fmul(static_cast<double>(i), step), -1.0)));
}

// Basis values P_0..P_degree at t: Legendre (Bonnet's recurrence) or monomials.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void bias_basis(Acc t, int degree, bool monomial,
                                             Acc p[kMaxBiasFieldDegree + 1]) {
  // 1 / (m + 1), rounded once: a multiplication instead of a division (same on both sides).
  constexpr double kInv[kMaxBiasFieldDegree + 1] = {1.0,     1.0 / 2, 1.0 / 3, 1.0 / 4,
                                                    1.0 / 5, 1.0 / 6, 1.0 / 7, 1.0 / 8};
  p[0] = Acc(1);
  if (degree >= 1) p[1] = t;
  for (int m = 1; m < degree; ++m) {
    p[m + 1] = monomial ? fmul(p[m], t)
                        : fmul(fsub(fmul(Acc(2 * m + 1), fmul(t, p[m])), fmul(Acc(m), p[m - 1])),
                               static_cast<Acc>(kInv[m]));
  }
}

// exp(sum c_ijk P_i(z_d) P_j(z_h) P_k(z_w)) at element e of local sample n.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc bias_field_value(const KStep& s, const int64_t dims[3], uint32_t n,
                                                  int64_t e) {
  const int64_t hw = dims[1] * dims[2], dhw = dims[0] * hw;
  int64_t i, j, k;
  if (e < (int64_t(1) << 31) && dhw < (int64_t(1) << 31)) {  // 32-bit division (GPU: far cheaper)
    const uint32_t r = static_cast<uint32_t>(e) % static_cast<uint32_t>(dhw);
    const uint32_t i32 = r / static_cast<uint32_t>(hw), rem = r - i32 * static_cast<uint32_t>(hw);
    const uint32_t j32 = rem / static_cast<uint32_t>(dims[2]);
    i = i32;
    j = j32;
    k = rem - j32 * static_cast<uint32_t>(dims[2]);
  } else {
    const int64_t r = e % dhw;
    i = r / hw;
    const int64_t rem = r - i * hw;
    j = rem / dims[2];
    k = rem - j * dims[2];
  }
  const bool mono = s.flags & kMonomial;
  Acc pd[kMaxBiasFieldDegree + 1], ph[kMaxBiasFieldDegree + 1], pw[kMaxBiasFieldDegree + 1];
  bias_basis(bias_coordinate<Acc>(i, dims[0], mono), s.degree, mono, pd);
  bias_basis(bias_coordinate<Acc>(j, dims[1], mono), s.degree, mono, ph);
  bias_basis(bias_coordinate<Acc>(k, dims[2], mono), s.degree, mono, pw);
  const float* c = s.coeffs + int64_t(n) * s.ncoeff;
  Acc sum = Acc(0);
  int idx = 0;
  for (int a = 0; a <= s.degree; ++a) {
    Acc sa = Acc(0);
    for (int b = 0; b <= s.degree - a; ++b) {
      Acc sb = Acc(0);
      for (int q = 0; q <= s.degree - a - b; ++q)
        sb = fadd(sb, fmul(static_cast<Acc>(c[idx++]), pw[q]));
      sa = fadd(sa, fmul(sb, ph[b]));
    }
    sum = fadd(sum, fmul(sa, pd[a]));
  }
  return fexp(sum);
}

// One step on one value. `z`, `z2`: this element's standard normals (noise steps only).
// Bias field steps are applied by the callers (they need the element's position).
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void apply_step(const KStep& s, const Resolved<Acc>& r, Acc& x, Acc& d,
                                             float z, float z2) {
  if (!r.active) return;
  switch (static_cast<PointwiseOp>(s.op)) {
    case PointwiseOp::ScaleIntensityRange:
      op_scale_intensity_range<Deriv>(s.flags, r, x, d);
      return;
    case PointwiseOp::ShiftIntensity: op_shift_intensity<Deriv>(r, x, d); return;
    case PointwiseOp::ScaleIntensity: op_scale_intensity<Deriv>(r, x, d); return;
    case PointwiseOp::RescaleIntensity: op_rescale_intensity<Deriv>(s.flags, r, x, d); return;
    case PointwiseOp::GaussianNoise: op_gaussian_noise(r, x, z); return;
    case PointwiseOp::RicianNoise: op_rician_noise(r, x, z, z2); return;
    case PointwiseOp::AdjustContrast: op_adjust_contrast<Deriv>(s.flags, r, x, d); return;
    case PointwiseOp::Gamma: op_gamma<Deriv>(r, x, d); return;
    case PointwiseOp::HistogramShift: op_histogram_shift<Deriv>(r, x, d); return;
    case PointwiseOp::StdShiftIntensity: op_std_shift<Deriv>(s.flags, r, x, d); return;
    case PointwiseOp::ScaleIntensityFixedMean: op_scale_fixed_mean<Deriv>(s.flags, r, x, d); return;
    case PointwiseOp::BiasField: return;
  }
}

// Per-thread, per-sample state: resolved steps plus the channel they were resolved for.
template <class Acc>
struct ChainState {
  Resolved<Acc> r[kMaxPointwiseSteps];
  int64_t channel;
  bool vec_ok;
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void chain_begin_sample(const ChainParams& p, uint32_t n,
                                                     ChainState<Acc>& st) {
  for (int k = 0; k < p.num_steps; ++k)
    st.r[k] = resolve_step<Acc>(p.steps[k], n, p.first_sample + n, 0, p.channels);
  st.channel = 0;
}

// Runs the chain over `cnt` (<= 4) consecutive elements e0.. of sample n. Element e uses
// normal number (e mod 4) of Philox block e / 4; e0 is a multiple of 4. Step-major over each
// run of elements in one channel (channel-wise steps are resolved once per run): a step's
// normals live in registers only while it runs (an array of every step's normals, indexed by
// the step, went to the CUDA stack); each element sees the steps in order, as element-major.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void chain_apply4(const ChainParams& p, ChainState<Acc>& st,
                                               uint32_t n, int64_t e0, int64_t spatial, int cnt,
                                               Acc x[4], Acc d[4]) {
  for (int j0 = 0; j0 < cnt;) {
    int j1 = cnt;
    if (p.any_channel_wise) {
      const int64_t c = (e0 + j0) / spatial;
      if (c != st.channel) {
        for (int k = 0; k < p.num_steps; ++k)
          if (p.steps[k].flags & kChannelWise)
            st.r[k] = resolve_step<Acc>(p.steps[k], n, p.first_sample + n, c, p.channels);
        st.channel = c;
      }
      const int64_t next = (c + 1) * spatial - e0;  // the next channel's first element
      if (next < j1) j1 = static_cast<int>(next);
    }
    for (int k = 0; k < p.num_steps; ++k) {
      const auto op = static_cast<PointwiseOp>(p.steps[k].op);
      if (op == PointwiseOp::BiasField) {
        if (!st.r[k].active) continue;
        for (int j = 0; j < 4; ++j) {  // fixed trip counts: x, d, z stay in registers
          if (j < j0 || j >= j1) continue;
          const Acc f = bias_field_value<Acc>(p.steps[k], p.dims, n, e0 + j);
          x[j] = fmul(x[j], f);
          if (Deriv) d[j] = fmul(d[j], f);
        }
        continue;
      }
      float z[4] = {0.0f, 0.0f, 0.0f, 0.0f}, z2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if ((op == PointwiseOp::GaussianNoise || op == PointwiseOp::RicianNoise) && st.r[k].active)
        normal4(p.steps[k].seed, static_cast<uint64_t>(e0 >> 2), p.first_sample + n, z);
      if (op == PointwiseOp::RicianNoise && st.r[k].active)
        normal4_stream(p.steps[k].seed, static_cast<uint64_t>(e0 >> 2), p.first_sample + n,
                       PhiloxStream::ElementAux, z2);
      for (int j = 0; j < 4; ++j)
        if (j >= j0 && j < j1) apply_step<Deriv, Acc>(p.steps[k], st.r[k], x[j], d[j], z[j], z2[j]);
    }
    j0 = j1;
  }
}

template <class T>
struct alignas(sizeof(T) * 4 <= 16 ? sizeof(T) * 4 : 16) Vec4 {
  T v[4];
};

template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE bool aligned4(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) % alignof(Vec4<T>)) == 0;
}

// Forward: out = chain(in). One item = four consecutive elements of one sample. The item
// body below is what the CUDA launcher runs; the host runs the same math in the tiled,
// vectorised loops of kernels/intensity/chain_cpu.h.
template <class TIn, class TOut, class Acc>
struct ChainForward {
  const TIn* in;
  TOut* out;
  Indexer in_ix, out_ix;
  int64_t sample_numel, spatial;
  ChainParams params;
  bool stream = false;  // CPU: dense output rows written with streaming stores (chain_cpu.h)

  using State = ChainState<Acc>;
  // Without channel-wise steps the state is per sample and read-only in operator(): the CUDA
  // launcher keeps one copy per block in shared memory (launch_cuda.cuh).
  static constexpr bool kBlockState = true;
  VOXAUG_HD VOXAUG_FORCEINLINE bool block_state() const { return !params.any_channel_wise; }
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const { return (sample_numel + 3) / 4; }

  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    chain_begin_sample(params, static_cast<uint32_t>(n), st);
    st.vec_ok = in_ix.dense && out_ix.dense && (sample_numel % 4 == 0) &&
                aligned4(in + n * in_ix.batch_stride) && aligned4(out + n * out_ix.batch_stride);
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    const int64_t e0 = item * 4;
    const int cnt = static_cast<int>(sample_numel - e0 < 4 ? sample_numel - e0 : 4);
    Acc x[4], d[4] = {Acc(1), Acc(1), Acc(1), Acc(1)};
#if VOXAUG_DEVICE_PASS
    if (st.vec_ok) {  // dense, aligned sample: one vector load per item
      const Vec4<TIn> v = *reinterpret_cast<const Vec4<TIn>*>(in + n * in_ix.batch_stride + e0);
      for (int j = 0; j < 4; ++j) x[j] = load_as<Acc>(v.v[j]);
    } else
#endif
    {
      for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(in[in_ix.offset(n, e0 + j)]);
    }
    chain_apply4<false, Acc>(params, st, static_cast<uint32_t>(n), e0, spatial, cnt, x, d);
#if VOXAUG_DEVICE_PASS
    if (st.vec_ok) {
      Vec4<TOut> v;
      for (int j = 0; j < 4; ++j) v.v[j] = store_as<TOut>(x[j]);
      *reinterpret_cast<Vec4<TOut>*>(out + n * out_ix.batch_stride + e0) = v;
    } else
#endif
    {
      for (int j = 0; j < cnt; ++j) out[out_ix.offset(n, e0 + j)] = store_as<TOut>(x[j]);
    }
  }
};

// Backward: grad_in = grad_out * d chain / d in.
template <class T, class Acc>
struct ChainBackward {
  const T* grad_out;
  const T* in;
  T* grad_in;
  Indexer go_ix, in_ix, gi_ix;
  int64_t sample_numel, spatial;
  ChainParams params;

  using State = ChainState<Acc>;
  static constexpr bool kBlockState = true;  // as ChainForward's
  VOXAUG_HD VOXAUG_FORCEINLINE bool block_state() const { return !params.any_channel_wise; }
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const { return (sample_numel + 3) / 4; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    chain_begin_sample(params, static_cast<uint32_t>(n), st);
    st.vec_ok = false;
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    const int64_t e0 = item * 4;
    const int cnt = static_cast<int>(sample_numel - e0 < 4 ? sample_numel - e0 : 4);
    Acc x[4], d[4] = {Acc(1), Acc(1), Acc(1), Acc(1)};
    for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(in[in_ix.offset(n, e0 + j)]);
    chain_apply4<true, Acc>(params, st, static_cast<uint32_t>(n), e0, spatial, cnt, x, d);
    for (int j = 0; j < cnt; ++j) {
      const Acc g = load_as<Acc>(grad_out[go_ix.offset(n, e0 + j)]);
      grad_in[gi_ix.offset(n, e0 + j)] = store_as<T>(fmul(g, d[j]));
    }
  }
};

}  // namespace voxaug::detail
