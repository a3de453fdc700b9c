// voxaug: the coarse-dropout functor (launch_cpu.h / launch_cuda.cuh contract), shared by the
// CPU and CUDA backends; the per-voxel rule is include/voxaug/detail/dropout.h.
#pragma once

#include <cstdint>

#include "voxaug/detail/dropout.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/detail/philox.h"
#include "voxaug/types.h"

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

// ---- coarse shuffle ----

// The sort key of voxel i (C-order within the box) of box j, channel c (of `channels`), global
// sample g.
VOXAUG_HD VOXAUG_FORCEINLINE uint32_t shuffle_key(uint64_t seed, uint32_t g, int64_t j, int64_t c,
                                                  int64_t channels, int64_t i) {
  const uint64_t seg = static_cast<uint64_t>(j * channels + c);
  const U32x4 r =
      philox_block(seed, (seg << 40) | static_cast<uint64_t>(i >> 2), g, PhiloxStream::Shuffle);
  switch (i & 3) {
    case 0: return r.x;
    case 1: return r.y;
    case 2: return r.z;
    default: return r.w;
  }
}

// One box of one sample: where its voxels live.
struct ShuffleBox {
  int64_t base;       // element offset of (n, c = 0, d0, h0, w0)
  int64_t stride[4];  // C, D, H, W strides (elements)
  int64_t size[3];    // box extent (D, H, W)
  int64_t channels;
  int64_t volume;  // size[0] * size[1] * size[2]
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t offset(int64_t c, int64_t i) const {
    const int64_t w = i % size[2], t = i / size[2];
    return base + c * stride[0] + (t / size[1]) * stride[1] + (t % size[1]) * stride[2] +
           w * stride[3];
  }
};

// The box of table row `row` (d0, h0, w0, d1, h1, w1) of sample n of `x` (host code: CPU and the
// CUDA backend's launch loop).
inline ShuffleBox shuffle_box(const VolumeView& x, const int64_t* row, int64_t n) {
  ShuffleBox b{};
  b.base = n * x.strides[0] + row[0] * x.strides[2] + row[1] * x.strides[3] + row[2] * x.strides[4];
  for (int a = 0; a < 4; ++a) b.stride[a] = x.strides[a + 1];
  for (int a = 0; a < 3; ++a) b.size[a] = row[a + 3] - row[a];
  b.channels = x.shape[1];
  b.volume = b.size[0] * b.size[1] * b.size[2];
  return b;
}

// Keys and indices of every (channel, voxel) of a box, channel-major: keys[c V + i], idx[c V + i] =
// i.
struct ShuffleKeysBody {
  ShuffleBox b;
  uint64_t seed;
  uint32_t g;
  int64_t j;
  uint32_t* keys;
  uint32_t* idx;
  struct State {};
  VOXAUG_HD int64_t items() const { return b.channels * b.volume; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t, int64_t e) const {
    const int64_t c = e / b.volume, i = e - c * b.volume;
    keys[e] = shuffle_key(seed, g, j, c, b.channels, i);
    idx[e] = static_cast<uint32_t>(i);
  }
};

// tmp[c V + i] = x[box voxel perm[c V + i] of channel c] (Store: x[voxel i] = tmp[c V + i]).
template <class T, bool Store>
struct ShuffleMoveBody {
  ShuffleBox b;
  T* x;
  T* tmp;
  const uint32_t* perm;
  struct State {};
  VOXAUG_HD int64_t items() const { return b.channels * b.volume; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t, int64_t e) const {
    const int64_t c = e / b.volume, i = e - c * b.volume;
    if (Store)
      x[b.offset(c, i)] = tmp[e];
    else
      tmp[e] = x[b.offset(c, static_cast<int64_t>(perm[e]))];
  }
};

}  // namespace voxaug::detail
