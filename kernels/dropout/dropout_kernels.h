// voxaug: the coarse-dropout functor (launch_cpu.h / launch_cuda.cuh contract), shared by the
// CPU and CUDA backends; the per-voxel rule is include/voxaug/detail/dropout.h.
#pragma once

#include <cstdint>

#include "voxaug/detail/dropout.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/detail/philox.h"

namespace voxaug::detail {

template <class T>
struct DropoutFunctor {
  struct State {
    const int64_t* boxes;
    int64_t count;
    double lo, hi;
  };
  const T* in;
  T* out;
  Indexer in_ix, out_ix;
  int64_t size[4];  // C, D, H, W
  CoarseDropoutParams p;
  uint32_t first_sample;

  VOXAUG_HD int64_t items() const { return size[0] * size[1] * size[2] * size[3]; }

  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& s) const {
    s.boxes = p.boxes + n * p.max_boxes * 6;
    // Clamped so that a bad device-side table cannot read outside it (the host path checks).
    const int64_t count = p.counts[n];
    s.count = count < 0 ? 0 : (count > p.max_boxes ? p.max_boxes : count);
    s.lo = p.fill_low;
    s.hi = p.fill_high;
    if (p.fill == DropoutFill::ImageRange) {
      s.lo = p.minmax[2 * n];
      s.hi = p.minmax[2 * n + 1];
    }
  }

  // Whether voxel (d, h, w) of the sample is filled.
  VOXAUG_HD VOXAUG_FORCEINLINE bool filled(const State& s, int64_t d, int64_t h, int64_t w) const {
    return s.count > 0 && dropout_in_box(s.boxes, s.count, d, h, w) == p.dropout_holes;
  }

  VOXAUG_HD VOXAUG_FORCEINLINE T fill_value(const State& s, int64_t e, const U32x4& r) const {
    return dropout_to_storage<T>(
        dropout_fill_value(p.fill, p.fill_value, s.lo, s.hi, dropout_word(r, e)));
  }

  VOXAUG_HD VOXAUG_FORCEINLINE U32x4 block(int64_t n, int64_t e) const {
    return philox_block(p.seed, static_cast<uint64_t>(e >> 2),
                        first_sample + static_cast<uint32_t>(n), PhiloxStream::Element);
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& s, int64_t n, int64_t e) const {
    const int64_t w = e % size[3];
    const int64_t t = e / size[3];
    const int64_t h = t % size[2];
    const int64_t d = (t / size[2]) % size[1];
    T x = in[in_ix.offset(n, e)];
    if (filled(s, d, h, w)) {
      x = p.fill == DropoutFill::Constant ? fill_value(s, e, U32x4{0, 0, 0, 0})
                                          : fill_value(s, e, block(n, e));
    }
    out[out_ix.offset(n, e)] = x;
  }
};

}  // namespace voxaug::detail
