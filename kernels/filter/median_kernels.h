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
    float v[kMaxMedianWindow];
    int64_t m = 0;
    bool nan = false;
    const int64_t base = n * in_stride[0] + c * in_stride[1];
    for (int64_t a = d - radius[0]; a <= d + radius[0]; ++a) {
      const int64_t ca = a < 0 ? 0 : (a >= size[1] ? size[1] - 1 : a);
      for (int64_t b = h - radius[1]; b <= h + radius[1]; ++b) {
        const int64_t cb = b < 0 ? 0 : (b >= size[2] ? size[2] - 1 : b);
        const int64_t row = base + ca * in_stride[2] + cb * in_stride[3];
        for (int64_t x = w - radius[2]; x <= w + radius[2]; ++x) {
          const int64_t cx = x < 0 ? 0 : (x >= size[3] ? size[3] - 1 : x);
          const float f = load_dyn<float>(in, in_t, row + cx * in_stride[4]);
          nan = nan || f != f;
          v[m++] = f;
        }
      }
    }
    // A window with NaN: the host backend's NaN (std::numeric_limits<float>::quiet_NaN(), the
    // positive default quiet NaN), not the input's own payload or sign; a zero median as +0 (the
    // host's sorting network and this selection order ties of -0 and +0 differently).
    out[n * items() + e] = nan ? bits_float(0x7fc00000u) : select_kth(v, m, (m - 1) / 2) + 0.0f;
  }
};

}  // namespace voxaug::detail
