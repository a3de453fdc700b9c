// voxaug: the per-voxel math of the separable filter (include/voxaug/filter.h), shared by the
// CPU backend and the CUDA kernels. One pass filters along one spatial axis.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/types.h"

namespace voxaug::detail {

// One pass: dst = correlate(src) along spatial `axis` (0 D, 1 H, 2 W) of an (N, C, D, H, W)
// volume. src and dst have their own dtype and strides (element units).
struct FilterPass {
  const void* src = nullptr;
  void* dst = nullptr;
  DType src_dtype = DType::Float32;
  DType dst_dtype = DType::Float32;
  int64_t shape[5] = {0, 0, 0, 0, 0};
  int64_t src_strides[5] = {0, 0, 0, 0, 0};
  int64_t dst_strides[5] = {0, 0, 0, 0, 0};
  int axis = 0;
  const double* table = nullptr;  // FilterTaps::table
  int64_t width = 0;
  bool identity = false;  // ignore the table: radius 0, tap 1 (a pure conversion)
  bool reflect = false;   // FilterBorder::Reflect (else Zeros)
};

// scipy.ndimage's "reflect" index: j outside [0, len) -> its mirror (half-sample symmetric),
// periodic with period 2 len, so kernels longer than the line keep reflecting.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t reflect_index(int64_t j, int64_t len) {
  if (j >= 0 && j < len) return j;
  const int64_t period = 2 * len;
  int64_t m = j % period;
  if (m < 0) m += period;
  return m < len ? m : period - 1 - m;
}

// The row of (sample n, axis) and its radius.
VOXAUG_HD VOXAUG_FORCEINLINE const double* filter_row(const FilterPass& p, int64_t n) {
  return p.table + (n * 3 + p.axis) * p.width;
}
// Clamped to what a row of the table's width can hold (NaN reads as 0), so a malformed
// table cannot make a pass read outside its row.
VOXAUG_HD VOXAUG_FORCEINLINE int filter_radius(const FilterPass& p, const double* row) {
  if (p.identity) return 0;
  const double r = row[0];
  const int64_t rmax = (p.width - 2) / 2;
  return r > 0 ? (r < static_cast<double>(rmax) ? static_cast<int>(r) : static_cast<int>(rmax)) : 0;
}
// Tap k (0 .. 2R) of a row, in the compute precision.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc filter_tap(const FilterPass& p, const double* row, int k) {
  return p.identity ? Acc(1) : static_cast<Acc>(row[1 + k]);
}

// The definition of one output value: position i of a line of length len, taps tap(0 .. 2R)
// for offsets -R .. R, line(j) the input at position j. With zero padding (all_taps false)
// terms whose input lies outside the line are left out; with all_taps every term is taken and
// line(j) is called for j outside [0, len) too (the caller's line reflects it). The terms are
// summed from the lowest offset up, starting from +0: acc = acc + tap * x, rounded after each
// operation (fadd / fmul).
template <class Acc, class Taps, class Line>
VOXAUG_HD VOXAUG_FORCEINLINE Acc filter_point(const Taps& tap, int R, int64_t i, int64_t len,
                                              const Line& line, bool all_taps = false) {
  const int64_t k0 = i < R && !all_taps ? R - i : 0;
  const int64_t k1 = i + R >= len && !all_taps ? R + (len - 1 - i) : 2 * int64_t(R);
  Acc acc = Acc(0);
  for (int64_t k = k0; k <= k1; ++k)
    acc = fadd(acc, fmul(tap(static_cast<int>(k)), line(i - R + k)));
  return acc;
}

// The pass as a per-element functor for the generic launchers (launch_cpu.h,
// launch_cuda.cuh): item = output voxel of a sample in C-order. The CPU backend overrides
// the item loop with a row-wise one (same sums, same order); the CUDA backend uses this
// functor for kernels too wide for its shared-memory tiles.
template <class Acc>
struct FilterForward {
  FilterPass p;
  struct State {
    const double* row = nullptr;
    int radius = 0;
  };

  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const {
    return p.shape[1] * p.shape[2] * p.shape[3] * p.shape[4];
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    st.row = p.identity ? nullptr : filter_row(p, n);
    st.radius = p.identity ? 0 : filter_radius(p, st.row);
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(const State& st, int64_t n, int64_t item) const {
    int64_t idx[5];
    idx[0] = n;
    int64_t r = item;
    for (int d = 4; d >= 1; --d) {
      idx[d] = r % p.shape[d];
      r /= p.shape[d];
    }
    const int da = p.axis + 2;
    int64_t src_base = 0, dst_off = 0;
    for (int d = 0; d < 5; ++d) {
      if (d != da) src_base += idx[d] * p.src_strides[d];
      dst_off += idx[d] * p.dst_strides[d];
    }
    const int64_t sa = p.src_strides[da], len = p.shape[da];
    const Acc v = filter_point<Acc>(
        [&](int k) { return filter_tap<Acc>(p, st.row, k); }, st.radius, idx[da], len,
        [&](int64_t j) {
          return load_dyn<Acc>(p.src, p.src_dtype, src_base + reflect_index(j, len) * sa);
        },
        p.reflect);
    store_dyn<Acc>(p.dst, p.dst_dtype, dst_off, v);
  }
};

}  // namespace voxaug::detail
