// voxaug: the math of the stats family, shared by the OpenMP and CUDA backends so that both
// give bit-identical statistics and outputs.
//
// Moments use a fixed two-level reduction whose order does not depend on the backend or
// the launch shape: a segment is cut into chunks of kMomentChunk elements; in a chunk,
// lane t (of kMomentLanes) accumulates elements t, t + kMomentLanes, ... in order, shifted by
// the chunk's first value; the lanes are summed by a fixed halving tree; each chunk becomes
// (count, mean, M2) and the chunks of a segment are merged (Chan et al.) by a fixed pairwise
// tree. Every operation is a correctly rounded float64 add / mul / div / sqrt (fmath.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/indexer.h"

namespace voxaug::detail {

constexpr int kMomentLanes = 256;
constexpr int kMomentPerLane = 32;
constexpr int64_t kMomentChunk = int64_t(kMomentLanes) * kMomentPerLane;

VOXAUG_HD VOXAUG_FORCEINLINE double dsqrt(double a) {
#if VOXAUG_DEVICE_PASS
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

// Storage value -> float64 (exact for every supported dtype).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE double value_f64(T v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) {
    return static_cast<double>(load_as<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

// Segment `seg` (a sample, or a (sample, channel) pair) and its elements.
struct StatSegments {
  Indexer ix;
  int64_t per_segment = 0;  // elements in a segment
  int64_t per_sample = 1;   // segments in a sample (1, or C when channel-wise)
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t offset(int64_t seg, int64_t i) const {
    const int64_t n = seg / per_sample;
    return ix.offset(n, (seg - n * per_sample) * per_segment + i);
  }
};

// Running sums of one lane: count and sums of (x - K), (x - K)^2.
struct LaneSums {
  int64_t n;
  double s1, s2;
};
VOXAUG_HD VOXAUG_FORCEINLINE void lane_add(LaneSums& a, double x, double shift, bool nonzero) {
  const bool counted = !nonzero || x != 0.0;
  const double d = counted ? fsub(x, shift) : 0.0;
  a.n += counted ? 1 : 0;
  a.s1 = fadd(a.s1, d);
  a.s2 = fadd(a.s2, fmul(d, d));
}
VOXAUG_HD VOXAUG_FORCEINLINE void lane_merge(LaneSums& a, const LaneSums& b) {
  a.n += b.n;
  a.s1 = fadd(a.s1, b.s1);
  a.s2 = fadd(a.s2, b.s2);
}

// (count, mean, M2) of a chunk or of several merged ones.
struct Moments {
  double n, mean, m2;
};
VOXAUG_HD VOXAUG_FORCEINLINE Moments chunk_moments(const LaneSums& s, double shift) {
  if (s.n == 0) return Moments{0.0, 0.0, 0.0};
  const double n = static_cast<double>(s.n);
  const double q = fdiv(s.s1, n);
  double m2 = fsub(s.s2, fmul(s.s1, q));
  if (m2 < 0.0) m2 = 0.0;  // rounding; NaN stays NaN
  return Moments{n, fadd(shift, q), m2};
}
// Chan, Golub, LeVeque: merge two partial results.
VOXAUG_HD VOXAUG_FORCEINLINE Moments merge_moments(const Moments& a, const Moments& b) {
  if (a.n == 0.0) return b;
  if (b.n == 0.0) return a;
  const double n = fadd(a.n, b.n);
  const double d = fsub(b.mean, a.mean);
  const double fb = fdiv(b.n, n);
  return Moments{n, fadd(a.mean, fmul(d, fb)),
                 fadd(fadd(a.m2, b.m2), fmul(fmul(d, d), fmul(a.n, fb)))};
}
// Final (count, mean, population std); an empty segment gives (0, 0, 0).
VOXAUG_HD VOXAUG_FORCEINLINE void finish_moments(const Moments& m, double* out) {
  out[0] = m.n;
  out[1] = m.n > 0.0 ? m.mean : 0.0;
  out[2] = m.n > 0.0 ? dsqrt(fdiv(m.m2, m.n)) : 0.0;
}

// ---- percentiles ----

// Sort keys: an order-preserving map of the value to unsigned bits, with -0 -> +0 and every
// NaN -> one positive quiet NaN (so NaNs sort last and equal values have equal keys).
VOXAUG_HD VOXAUG_FORCEINLINE uint32_t sort_key32(float v) {
  // Branch-free (selects, one arithmetic shift): with values of both signs a branch on the sign
  // mispredicts half the time, which dominated the host's radix passes.
  uint32_t u = float_bits(v);
  u = (v != v) ? 0x7fc00000u : u;         // one NaN key
  u = (u == 0x80000000u) ? 0u : u;        // -0 -> +0
  const uint32_t flip = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u;
  return u ^ flip;                        // negatives: ~u; positives: u | sign bit
}
VOXAUG_HD VOXAUG_FORCEINLINE float key32_value(uint32_t k) {
  return bits_float((k >> 31) ? (k & 0x7fffffffu) : ~k);
}
// (Own names: fmath.h's equivalents are newer than this header.)
VOXAUG_HD VOXAUG_FORCEINLINE uint64_t stat_f64_bits(double v) {
#if VOXAUG_DEVICE_PASS
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  uint64_t u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double stat_bits_f64(uint64_t u) {
#if VOXAUG_DEVICE_PASS
  return __longlong_as_double(static_cast<long long>(u));
#else
  double v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE uint64_t sort_key64(double v) {
  if (v != v) v = stat_bits_f64(0x7ff8000000000000ull);
  if (v == 0.0) v = 0.0;
  const uint64_t u = stat_f64_bits(v);
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}
VOXAUG_HD VOXAUG_FORCEINLINE double key64_value(uint64_t k) {
  return stat_bits_f64((k >> 63) ? (k & 0x7fffffffffffffffull) : ~k);
}

// numpy.percentile / torch.quantile, method "linear": the virtual index pos = q / 100 * (n - 1)
// (float64), lo = floor(pos), weight w = pos - lo.
VOXAUG_HD VOXAUG_FORCEINLINE void percentile_rank(double q_percent, int64_t n, int64_t* lo,
                                                  double* w) {
  const double pos = fmul(fdiv(q_percent, 100.0), static_cast<double>(n - 1));
  int64_t k = static_cast<int64_t>(pos);  // pos >= 0
  if (k > n - 1) k = n - 1;
  *lo = k;
  *w = fsub(pos, static_cast<double>(k));
}
// Their lerp: a + (b - a) w for w < 0.5, else b - (b - a)(1 - w).
VOXAUG_HD VOXAUG_FORCEINLINE double percentile_lerp(double a, double b, double w) {
  const double d = fsub(b, a);
  return w < 0.5 ? fadd(a, fmul(d, w)) : fsub(b, fmul(d, fsub(1.0, w)));
}

// ---- piecewise linear map (TorchIO HistogramStandardization) ----

// One value: k = the number of edges <= x (numpy.digitize, right=False; a NaN x counts none), then
// slope[k] * x + intercept[k] in float64, rounded to float32. `row`: pieces - 1 edges, pieces
// slopes, pieces intercepts.
VOXAUG_HD VOXAUG_FORCEINLINE float piecewise_value(const double* row, int pieces, float x) {
  const double v = static_cast<double>(x);
  int k = 0;
  for (int i = 0; i < pieces - 1; ++i) k += v >= row[i] ? 1 : 0;
  return static_cast<float>(fadd(fmul(row[pieces - 1 + k], v), row[2 * pieces - 1 + k]));
}

// ---- the pointwise apply step ----

enum StatApplyMode : int32_t { kApplyNormalize = 0, kApplyRangePercentiles = 1 };

// Parameters of one apply launch (plain values; pointers are on the data's device).
struct StatApply {
  int32_t mode = kApplyNormalize;
  int64_t per_sample = 1;              // segments per sample
  int64_t per_segment = 0;             // elements per segment
  const double* stats = nullptr;       // moments (3 per segment) or percentiles (2 per segment)
  const double* subtrahend = nullptr;  // normalize: per segment, overrides the mean
  const double* divisor = nullptr;     // normalize: per segment, overrides the std
  bool nonzero = false;                // normalize: zeros stay zero and do not count
  // range percentiles: target range and clipping
  bool has_b_min = false, has_b_max = false, clip = false;
  double b_min = 0.0, b_max = 0.0;
};

// Per-segment coefficients in the compute type: y = (x - a) / b * mul + add, clamped to
// [lo, hi]; `skip_zero` keeps zeros. Unused parts are neutral (b = 1, mul = 1, add = 0,
// lo = -inf, hi = +inf), so the per-voxel function has no branches (host loops vectorise).
template <class Acc>
struct StatCoef {
  Acc a, b, mul, add, lo, hi;
  bool skip_zero;
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE StatCoef<Acc> stat_coef(const StatApply& p, int64_t seg) {
  const Acc inf = static_cast<Acc>(INFINITY);
  StatCoef<Acc> c{Acc(0), Acc(1), Acc(1), Acc(0), -inf, inf, false};
  if (p.mode == kApplyNormalize) {
    // MONAI NormalizeIntensity: (x - sub) / div, div == 0 -> 1.
    const double sub = p.subtrahend ? p.subtrahend[seg] : p.stats[3 * seg + 1];
    const double div = p.divisor ? p.divisor[seg] : p.stats[3 * seg + 2];
    c.a = static_cast<Acc>(sub);
    c.b = static_cast<Acc>(div);
    if (c.b == Acc(0)) c.b = Acc(1);
    c.skip_zero = p.nonzero;
    return c;
  }
  // MONAI ScaleIntensityRange with a_min / a_max = the segment's percentiles (in the compute
  // type, as MONAI holds them in the image's float dtype).
  const Acc a_min = static_cast<Acc>(p.stats[2 * seg]);
  const Acc a_max = static_cast<Acc>(p.stats[2 * seg + 1]);
  const Acc range = fsub(a_max, a_min);
  c.a = a_min;
  if (range == Acc(0)) {  // MONAI: img - a_min (+ b_min), no scaling, no clipping
    if (p.has_b_min) c.add = static_cast<Acc>(p.b_min);
    return c;
  }
  c.b = range;
  if (p.has_b_min && p.has_b_max) {
    c.mul = static_cast<Acc>(p.b_max - p.b_min);
    c.add = static_cast<Acc>(p.b_min);
  }
  if (p.clip) {
    if (p.has_b_min) c.lo = static_cast<Acc>(p.b_min);
    if (p.has_b_max) c.hi = static_cast<Acc>(p.b_max);
  }
  return c;
}

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc stat_apply_value(const StatCoef<Acc>& c, Acc x) {
  Acc y = fadd(fmul(fdiv(fsub(x, c.a), c.b), c.mul), c.add);
  y = y < c.lo ? c.lo : y;  // NaN stays NaN, as torch.clamp
  y = y > c.hi ? c.hi : y;
  return c.skip_zero && x == Acc(0) ? x : y;
}

}  // namespace voxaug::detail
