// voxaug: the median filter's per-voxel body (launch_cpu.h / launch_cuda.cuh contract), shared by
// the CPU and CUDA backends: the (2 r + 1)-voxel box around an output voxel, edges replicated,
// its lower median (torch.median's; the count is odd, so the median), NaN when the box holds
// one (torch.median propagates NaN).
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/types.h"

namespace voxaug::detail {

constexpr int64_t kMaxMedianWindow = 343;  // e.g. a radius (3, 3, 3) box

// The k-th smallest of v[0 .. m) (0-based), partially reordering v: Hoare's selection.
VOXAUG_HD VOXAUG_FORCEINLINE float select_kth(float* v, int64_t m, int64_t k) {
  int64_t lo = 0, hi = m - 1;
  while (lo < hi) {
    const float pivot = v[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot) ++i;
      while (pivot < v[j]) --j;
      if (i <= j) {
        const float t = v[i];
        v[i] = v[j];
        v[j] = t;
        ++i;
        --j;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      return v[k];
  }
  return v[k];
}

#if VOXAUG_DEVICE_PASS
#define VOXAUG_MEDIAN_UNROLL _Pragma("unroll")
#elif defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define VOXAUG_MEDIAN_UNROLL _Pragma("GCC unroll 16")
#else
#define VOXAUG_MEDIAN_UNROLL
#endif

// The median of the 27 values of a radius-(1, 1, 1) box by forgetful selection: 15 values, then
// 12 rounds that move the smallest and the largest of the set to its ends, drop both and take
// the next value in; the middle of the last three is the median. Every index is a constant once
// the loops unroll, so the CUDA body keeps the values in registers (the general path's
// 343-float array lives on the stack). The median's value does not depend on the order of
// selection (a zero median is made +0 by the caller).
VOXAUG_HD VOXAUG_FORCEINLINE float median27(const float (&v)[27]) {
  float w[15];
  VOXAUG_MEDIAN_UNROLL
  for (int i = 0; i < 15; ++i) w[i] = v[i];
  VOXAUG_MEDIAN_UNROLL
  for (int s = 0; s < 13; ++s) {  // the set is w[s .. 14]
    VOXAUG_MEDIAN_UNROLL
    for (int i = s + 1; i < 15; ++i) {
      const float lo = w[s] < w[i] ? w[s] : w[i], hi = w[s] < w[i] ? w[i] : w[s];
      w[s] = lo, w[i] = hi;
    }
    VOXAUG_MEDIAN_UNROLL
    for (int i = s + 1; i < 14; ++i) {
      const float lo = w[i] < w[14] ? w[i] : w[14], hi = w[i] < w[14] ? w[14] : w[i];
      w[i] = lo, w[14] = hi;
    }
    if (s < 12) w[14] = v[15 + s];  // drop the largest, take the next value
  }
  return w[13];
}
#undef VOXAUG_MEDIAN_UNROLL

struct MedianBody {
  const void* in;
  DType in_t;
  int64_t in_stride[5];
  float* out;       // dense (N, C, D, H, W) float32
  int64_t size[4];  // C, D, H, W
  int64_t radius[3];
  struct State {};
  VOXAUG_HD int64_t items() const { return size[0] * size[1] * size[2] * size[3]; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t e) const {
    const int64_t w = e % size[3];
    int64_t t = e / size[3];
    const int64_t h = t % size[2];
    t /= size[2];
    const int64_t d = t % size[1];
    const int64_t c = t / size[1];
    const int64_t base = n * in_stride[0] + c * in_stride[1];
    if (radius[0] == 1 && radius[1] == 1 && radius[2] == 1) {
      out[n * items() + e] = box27(base, d, h, w);
      return;
    }
    float v[kMaxMedianWindow];
    int64_t m = 0;
    bool nan = false;
    for (int64_t a = d - radius[0]; a <= d + radius[0]; ++a) {
      const int64_t ca = clamp_index(a, size[1]);
      for (int64_t b = h - radius[1]; b <= h + radius[1]; ++b) {
        const int64_t row = base + ca * in_stride[2] + clamp_index(b, size[2]) * in_stride[3];
        for (int64_t x = w - radius[2]; x <= w + radius[2]; ++x) {
          const float f = load_dyn<float>(in, in_t, row + clamp_index(x, size[3]) * in_stride[4]);
          nan = nan || f != f;
          v[m++] = f;
        }
      }
    }
    out[n * items() + e] = nan ? median_nan() : select_kth(v, m, (m - 1) / 2) + 0.0f;
  }

  // A window with NaN gives the host backend's NaN (std::numeric_limits<float>::quiet_NaN(),
  // the positive default quiet NaN), not the input's own payload or sign; a zero median is
  // written as +0 (the host's sorting network and the selections tie -0 and +0 differently).
  VOXAUG_HD VOXAUG_FORCEINLINE static float median_nan() { return bits_float(0x7fc00000u); }

  // The radius-(1, 1, 1) box around (d, h, w) of one (n, c) volume at `base`: its median by
  // median27, with the general path's NaN and zero rules.
  VOXAUG_HD VOXAUG_FORCEINLINE float box27(int64_t base, int64_t d, int64_t h, int64_t w) const {
    float v[27];
    bool nan = false;
    int m = 0;
    for (int a = -1; a <= 1; ++a) {
      const int64_t ca = clamp_index(d + a, size[1]);
      for (int b = -1; b <= 1; ++b) {
        const int64_t row = base + ca * in_stride[2] + clamp_index(h + b, size[2]) * in_stride[3];
        for (int x = -1; x <= 1; ++x) {
          const float f =
              load_dyn<float>(in, in_t, row + clamp_index(w + x, size[3]) * in_stride[4]);
          nan = nan || f != f;
          v[m++] = f;
        }
      }
    }
    return nan ? median_nan() : median27(v) + 0.0f;
  }
  VOXAUG_HD VOXAUG_FORCEINLINE static int64_t clamp_index(int64_t i, int64_t size) {
    return i < 0 ? 0 : (i >= size ? size - 1 : i);
  }
};

}  // namespace voxaug::detail
