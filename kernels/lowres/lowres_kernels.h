// voxaug: the simulated-low-resolution functor (launch_cuda.cuh contract) for the CUDA
// backend; the CPU twin (lowres.cpp) calls the same lowres_tap / lowres_combine
// (include/voxaug/detail/lowres.h) from per-axis tables.
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/detail/lowres.h"

namespace voxaug::detail {

template <class T, class O>
struct LowresFunctor {
  struct State {
    LowresAxis ax[3];  // D, H, W
  };
  const T* in;
  O* out;
  int64_t in_stride[5];  // N, C, D, H, W
  Indexer out_ix;
  int64_t size[4];  // C, D, H, W
  const int64_t* low_size;
  bool nearest_up;
  bool align_corners;

  VOXAUG_HD int64_t items() const { return size[0] * size[1] * size[2] * size[3]; }

  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& s) const {
    // At least 1 so that a bad device-side table cannot divide by zero (the host path checks).
    for (int a = 0; a < 3; ++a) {
      const int64_t low = low_size[3 * n + a] < 1 ? 1 : low_size[3 * n + a];
      s.ax[a] = lowres_axis(size[a + 1], low, align_corners);
    }
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& s, int64_t n, int64_t e) const {
    const int64_t w = e % size[3];
    const int64_t t = e / size[3];
    const int64_t h = t % size[2];
    const int64_t t2 = t / size[2];
    const int64_t d = t2 % size[1];
    const int64_t c = t2 / size[1];
    const LowresTap td = lowres_tap(d, s.ax[0], nearest_up, align_corners);
    const LowresTap th = lowres_tap(h, s.ax[1], nearest_up, align_corners);
    const LowresTap tw = lowres_tap(w, s.ax[2], nearest_up, align_corners);
    const T* base = in + n * in_stride[0] + c * in_stride[1];
    const float v = lowres_combine(base, in_stride[2], in_stride[3], in_stride[4], td, th, tw);
    out[out_ix.offset(n, e)] = store_as<O, float>(v);
  }
};

}  // namespace voxaug::detail
