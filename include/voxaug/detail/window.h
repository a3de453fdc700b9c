// voxaug: per-voxel math of the window family (sliding-window inference), shared by the CPU
// twin and the CUDA kernels.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/window.h"

namespace voxaug::detail {

// Index into an axis of `size` voxels for padded coordinate q (the image starts at pad_before),
// or -1 where constant padding applies. torch.nn.functional.pad's rules: reflect mirrors about
// the edge voxel without repeating it, replicate clamps, circular wraps.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t window_source(int64_t q, int64_t pad_before, int64_t size,
                                                   int mode) {
  int64_t i = q - pad_before;
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case 1:  // reflect (the pad is < size, checked by window_gather)
      i = i < 0 ? -i : 2 * (size - 1) - i;
      return i;
    case 2: return i < 0 ? 0 : size - 1;  // replicate
    case 3: {                             // circular
      i %= size;
      return i < 0 ? i + size : i;
    }
    default: return -1;  // constant
  }
}

// The windows along `axis` that cover padded coordinate q: [lo, hi] (empty when hi < lo).
// Windows 0 .. count-2 start at k * interval; only the last one may be moved back.
VOXAUG_HD VOXAUG_FORCEINLINE void window_cover(const WindowLayout& l, int axis, int64_t q,
                                               int64_t& lo, int64_t& hi) {
  const int64_t I = l.interval[axis], R = l.roi[axis], n = l.count[axis];
  // Regular windows: k * I <= q < k * I + R  <=>  ceil((q - R + 1) / I) <= k <= floor(q / I).
  const int64_t a = q - R + 1;
  lo = a <= 0 ? 0 : (a + I - 1) / I;
  hi = q / I;
  if (hi > n - 2) hi = n - 2;
  const int64_t last = l.start(axis, n - 1);
  if (q >= last && q < last + R) {  // the last window covers q too (starts are increasing)
    if (hi < lo) lo = n - 1;
    hi = n - 1;
  }
}

// Window k along `axis` is the first window covering padded coordinate q (the lowest-numbered
// one) exactly when q >= window_first_from(k), and the last when q < window_last_until(k): the
// starts strictly increase, so the windows before k cover q only if k - 1 does (q below its
// end), those after k only if k + 1 does (q at or past its start). A voxel's first window over
// the whole grid is the first along every axis (window order is lexicographic), its last the
// last along every axis.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t window_first_from(const WindowLayout& l, int axis, int64_t k) {
  return k == 0 ? l.start(axis, 0) : l.start(axis, k - 1) + l.roi[axis];
}
VOXAUG_HD VOXAUG_FORCEINLINE int64_t window_last_until(const WindowLayout& l, int axis, int64_t k) {
  return k == l.count[axis] - 1 ? l.start(axis, k) + l.roi[axis] : l.start(axis, k + 1);
}

// Window number w (image-major, then d, h, w) -> image n and per-axis window indices.
VOXAUG_HD VOXAUG_FORCEINLINE void window_index(const WindowLayout& l, int64_t w, int64_t& n,
                                               int64_t k[3]) {
  const int64_t per_image = l.windows_per_image();
  n = w / per_image;
  int64_t r = w - n * per_image;
  k[2] = r % l.count[2];
  r /= l.count[2];
  k[1] = r % l.count[1];
  k[0] = r / l.count[1];
}

// Compute type of a stitch: the wider of the accumulator's and the prediction's.
template <class A, class P>
struct StitchCompute {
  using type = A;
};
template <>
struct StitchCompute<float, double> {
  using type = double;
};

// One contribution, rounded as MONAI's `patch *= w` (in the predictor's dtype P) followed by
// `out += patch` (computed in the wider type, stored in A).
template <class A, class P>
VOXAUG_HD VOXAUG_FORCEINLINE A stitch_add(A acc, P pred, const A* weight, int64_t wi) {
  using C = typename StitchCompute<A, P>::type;
  C term = load_as<C>(pred);
  if (weight != nullptr) term = load_as<C>(store_as<P>(fmul(term, static_cast<C>(weight[wi]))));
  return static_cast<A>(fadd(static_cast<C>(acc), term));
}

template <>
VOXAUG_HD VOXAUG_FORCEINLINE float stitch_add<float, half_t>(float acc, half_t pred,
                                                             const float* weight, int64_t wi) {
  float term = half_to_float(pred.bits);
  if (weight != nullptr) term = half_to_float(float_to_half(fmul(term, weight[wi])));
  return fadd(acc, term);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE float stitch_add<float, bfloat16_t>(float acc, bfloat16_t pred,
                                                                 const float* weight, int64_t wi) {
  float term = bf16_to_float(pred.bits);
  if (weight != nullptr) term = bf16_to_float(float_to_bf16(fmul(term, weight[wi])));
  return fadd(acc, term);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE double stitch_add<double, half_t>(double acc, half_t pred,
                                                               const double* weight, int64_t wi) {
  // torch computes half * double in double and rounds to half (through float: c10::Half).
  double term = half_to_float(pred.bits);
  if (weight != nullptr)
    term = half_to_float(float_to_half(static_cast<float>(fmul(term, weight[wi]))));
  return fadd(acc, term);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE double stitch_add<double, bfloat16_t>(double acc, bfloat16_t pred,
                                                                   const double* weight,
                                                                   int64_t wi) {
  double term = bf16_to_float(pred.bits);
  if (weight != nullptr)
    term = bf16_to_float(float_to_bf16(static_cast<float>(fmul(term, weight[wi]))));
  return fadd(acc, term);
}

// Sum of the importance map over the windows covering padded voxel (d, h, w), in window order.
// weight null: constant weights, the exact count.
template <class A>
VOXAUG_HD VOXAUG_FORCEINLINE A window_count_at(const WindowLayout& l, const A* weight, int64_t d,
                                               int64_t h, int64_t w) {
  int64_t lo[3], hi[3];
  window_cover(l, 0, d, lo[0], hi[0]);
  window_cover(l, 1, h, lo[1], hi[1]);
  window_cover(l, 2, w, lo[2], hi[2]);
  if (weight == nullptr)
    return static_cast<A>((hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1) * (hi[2] - lo[2] + 1));
  A c = A(0);
  for (int64_t i = lo[0]; i <= hi[0]; ++i) {
    const int64_t od = (d - l.start(0, i)) * l.roi[1];
    for (int64_t j = lo[1]; j <= hi[1]; ++j) {
      const int64_t oh = (od + h - l.start(1, j)) * l.roi[2];
      for (int64_t k = lo[2]; k <= hi[2]; ++k) c = fadd(c, weight[oh + w - l.start(2, k)]);
    }
  }
  return c;
}

}  // namespace voxaug::detail
