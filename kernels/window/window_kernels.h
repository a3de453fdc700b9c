// voxaug: the window family's per-element bodies (one item = one output element), compiled for
// the host and the device. The CUDA backend runs them with the generic launcher; the CPU twin
// runs row loops built from the same detail/window.h functions, and its tests run these bodies
// on the host as the reference for the device path.
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/detail/window.h"
#include "voxaug/types.h"
#include "voxaug/window.h"

namespace voxaug::detail {

struct GatherParams {
  const void* in = nullptr;
  DType in_t = DType::Float32;
  int64_t in_stride[5] = {0, 0, 0, 0, 0};
  int64_t channels = 0;
  void* out = nullptr;  // dense (B, C, roi)
  DType out_t = DType::Float32;
  int64_t batch = 0;  // B
  WindowLayout l;
  int64_t first = 0;
  int pad = 0;
  double fill = 0.0;  // cval rounded to the input's dtype
};

// Windows per stitch launch: their image and start live in the kernel parameters (a longer
// batch is stitched as consecutive launches, which adds in the same order).
constexpr int64_t kStitchWindows = 64;

struct StitchParams {
  void* acc = nullptr;   // dense (N, K, depth, padded h, padded w)
  int64_t channels = 0;  // K
  int64_t depth = 0;     // acc's d planes: padded d, or a ring's depth (plane d at d % depth)
  const void* pred = nullptr;
  int64_t pred_stride[5] = {0, 0, 0, 0, 0};
  int64_t batch = 0;  // B
  const void* weight = nullptr;
  WindowLayout l;
  int32_t win[kStitchWindows][4] = {};  // image, start d, h, w of window j of the launch
  // StitchFuse: window j is a voxel's first where the voxel's padded coordinates are all >=
  // first_from[j], its last where they are all < last_until[j] (window_first_from / _last_until).
  bool first_store = false, last_divide = false;
  const void* count = nullptr;  // last_divide's count map (null: from weight, per voxel)
  int32_t first_from[kStitchWindows][3] = {};
  int32_t last_until[kStitchWindows][3] = {};
};

// Fills p.batch and the per-window tables of p for windows [first, first + batch) of the pass
// (batch <= kStitchWindows).
inline void stitch_launch_windows(StitchParams& p, int64_t first, int64_t batch) {
  p.batch = batch;
  for (int64_t j = 0; j < batch; ++j) {
    int64_t n, k[3];
    window_index(p.l, first + j, n, k);
    p.win[j][0] = static_cast<int32_t>(n);
    for (int a = 0; a < 3; ++a) {
      p.win[j][1 + a] = static_cast<int32_t>(p.l.start(a, k[a]));
      p.first_from[j][a] = static_cast<int32_t>(window_first_from(p.l, a, k[a]));
      p.last_until[j][a] = static_cast<int32_t>(window_last_until(p.l, a, k[a]));
    }
  }
}

// The count that divides padded voxel (d, h, w) (window_finalize's: the map, or on the fly).
template <class A>
VOXAUG_HD VOXAUG_FORCEINLINE A window_count_of(const WindowLayout& l, const void* count,
                                               const void* weight, int64_t d, int64_t h,
                                               int64_t w) {
  if (count != nullptr)
    return static_cast<const A*>(count)[(d * l.padded[1] + h) * l.padded[2] + w];
  return window_count_at<A>(l, static_cast<const A*>(weight), d, h, w);
}

// Acc's padded plane d: d itself in a whole accumulator, d % depth in a ring.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t ring_plane(int64_t d, int64_t depth) {
  return d < depth ? d : d % depth;
}

struct FinalizeParams {
  const void* acc = nullptr;     // dense (N, K, depth, padded h, padded w)
  int64_t depth = 0;             // acc's d planes (padded d, or a ring's depth)
  int64_t z0 = 0, z1 = 0;        // the output planes [z0, z1) to write
  const void* count = nullptr;   // dense padded; null: computed per voxel from `weight`
  const void* weight = nullptr;  // importance map (null: constant weights)
  int64_t channels = 0;
  void* out = nullptr;  // dense (N, K or 1, size)
  DType out_t = DType::Float32;
  bool argmax = false;
  WindowLayout l;
};

// Element (j, c, d, h, w) of the gathered windows.
struct GatherBody {
  GatherParams p;
  struct State {};
  VOXAUG_HD int64_t items() const {
    return p.batch * p.channels * p.l.roi[0] * p.l.roi[1] * p.l.roi[2];
  }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD void operator()(State&, int64_t, int64_t i) const {
    const WindowLayout& l = p.l;
    int64_t r = i;
    const int64_t x = r % l.roi[2];
    r /= l.roi[2];
    const int64_t y = r % l.roi[1];
    r /= l.roi[1];
    const int64_t z = r % l.roi[0];
    r /= l.roi[0];
    const int64_t c = r % p.channels;
    const int64_t j = r / p.channels;
    int64_t n, k[3];
    window_index(l, p.first + j, n, k);
    const int64_t sd = window_source(l.start(0, k[0]) + z, l.pad_before[0], l.size[0], p.pad);
    const int64_t sh = window_source(l.start(1, k[1]) + y, l.pad_before[1], l.size[1], p.pad);
    const int64_t sw = window_source(l.start(2, k[2]) + x, l.pad_before[2], l.size[2], p.pad);
    double v = p.fill;
    if (sd >= 0 && sh >= 0 && sw >= 0)
      v = load_dyn<double>(p.in, p.in_t,
                           n * p.in_stride[0] + c * p.in_stride[1] + sd * p.in_stride[2] +
                               sh * p.in_stride[3] + sw * p.in_stride[4]);
    store_dyn<double>(p.out, p.out_t, i, v);
  }
};

// Window voxel (j, d, h, w) of a stitch batch, all channels. The first window of the batch that
// covers the voxel owns it and adds every covering window of the batch, in window order, so
// each accumulator element has one writer and MONAI's order of additions.
template <class A, class P>
struct StitchBody {
  StitchParams p;
  struct State {};
  VOXAUG_HD int64_t items() const { return p.batch * p.l.roi[0] * p.l.roi[1] * p.l.roi[2]; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD void operator()(State&, int64_t, int64_t i) const {
    const WindowLayout& l = p.l;
    const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
    const int64_t j = i / rv, v = i - j * rv;
    const int64_t x = v % l.roi[2], y = (v / l.roi[2]) % l.roi[1], z = v / (l.roi[2] * l.roi[1]);
    const int64_t n = p.win[j][0];
    const int64_t g[3] = {p.win[j][1] + z, p.win[j][2] + y, p.win[j][3] + x};
    for (int64_t o = 0; o < j; ++o)
      if (covers(o, n, g, nullptr)) return;  // an earlier window of the batch owns this voxel
    const int64_t pv = p.depth * l.padded[1] * l.padded[2];
    A* acc = static_cast<A*>(p.acc) + (n * p.channels) * pv +
             (ring_plane(g[0], p.depth) * l.padded[1] + g[1]) * l.padded[2] + g[2];
    const A* weight = static_cast<const A*>(p.weight);
    // StitchFuse: the owner (the launch's first covering window) may be the voxel's first window
    // of the pass; the launch's last covering window may be its last.
    const bool store = p.first_store && g[0] >= p.first_from[j][0] && g[1] >= p.first_from[j][1] &&
                       g[2] >= p.first_from[j][2];
    bool divide = false;
    A cnt = A(1);
    if (p.last_divide) {
      int64_t last = j;
      for (int64_t o = j + 1; o < p.batch; ++o)
        if (covers(o, n, g, nullptr)) last = o;
      divide = g[0] < p.last_until[last][0] && g[1] < p.last_until[last][1] &&
               g[2] < p.last_until[last][2];
      if (divide) cnt = window_count_of<A>(l, p.count, p.weight, g[0], g[1], g[2]);
    }
    for (int64_t c = 0; c < p.channels; ++c) {
      A a = store ? A(0) : acc[c * pv];
      for (int64_t o = j; o < p.batch; ++o) {
        int64_t off[3];
        if (!covers(o, n, g, off)) continue;
        const P* pred = static_cast<const P*>(p.pred) + o * p.pred_stride[0] +
                        c * p.pred_stride[1] + off[0] * p.pred_stride[2] +
                        off[1] * p.pred_stride[3] + off[2] * p.pred_stride[4];
        a = stitch_add<A, P>(a, *pred, weight, (off[0] * l.roi[1] + off[1]) * l.roi[2] + off[2]);
      }
      acc[c * pv] = divide ? fdiv(a, cnt) : a;
    }
  }
  // Whether window `o` of the batch lies in image n and covers padded voxel g (offset in `off`).
  VOXAUG_HD bool covers(int64_t o, int64_t n, const int64_t g[3], int64_t* off) const {
    if (p.win[o][0] != n) return false;
    for (int a = 0; a < 3; ++a) {
      const int64_t d = g[a] - p.win[o][1 + a];
      if (d < 0 || d >= p.l.roi[a]) return false;
      if (off != nullptr) off[a] = d;
    }
    return true;
  }
};

// Padded voxel of the count map.
template <class A>
struct CountBody {
  WindowLayout l;
  const A* weight;
  A* count;
  struct State {};
  VOXAUG_HD int64_t items() const { return l.padded[0] * l.padded[1] * l.padded[2]; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD void operator()(State&, int64_t, int64_t i) const {
    const int64_t w = i % l.padded[2], h = (i / l.padded[2]) % l.padded[1],
                  d = i / (l.padded[2] * l.padded[1]);
    count[i] = window_count_at<A>(l, weight, d, h, w);
  }
};

// Output voxel (n, d, h, w) of the planes [z0, z1), all channels.
template <class A>
struct FinalizeBody {
  FinalizeParams p;
  struct State {};
  VOXAUG_HD int64_t items() const { return (p.z1 - p.z0) * p.l.size[1] * p.l.size[2]; }
  VOXAUG_HD void begin_sample(int64_t, State&) const {}
  VOXAUG_HD void operator()(State&, int64_t n, int64_t item) const {
    const WindowLayout& l = p.l;
    const int64_t i = item + p.z0 * l.size[1] * l.size[2];  // within the sample's output
    const int64_t x = i % l.size[2], y = (i / l.size[2]) % l.size[1],
                  z = i / (l.size[2] * l.size[1]);
    const int64_t pv = p.depth * l.padded[1] * l.padded[2];
    const int64_t sv = l.size[0] * l.size[1] * l.size[2];
    const int64_t q =
        (ring_plane(z + l.pad_before[0], p.depth) * l.padded[1] + y + l.pad_before[1]) *
            l.padded[2] +
        x + l.pad_before[2];
    const A cnt = window_count_of<A>(l, p.count, p.weight, z + l.pad_before[0], y + l.pad_before[1],
                                     x + l.pad_before[2]);
    const A* acc = static_cast<const A*>(p.acc) + n * p.channels * pv + q;
    if (p.argmax) {
      int64_t best = 0;
      A bv = fdiv(acc[0], cnt);
      for (int64_t c = 1; c < p.channels; ++c) {
        const A v = fdiv(acc[c * pv], cnt);
        if (!(bv != bv) && (v > bv || v != v)) {  // torch.argmax: NaN is the maximum
          bv = v;
          best = c;
        }
      }
      store_index(n * sv + i, best);
      return;
    }
    for (int64_t c = 0; c < p.channels; ++c)
      store_dyn<A>(p.out, p.out_t, (n * p.channels + c) * sv + i, fdiv(acc[c * pv], cnt));
  }
  VOXAUG_HD void store_index(int64_t off, int64_t v) const {
    switch (p.out_t) {
      case DType::UInt8: static_cast<uint8_t*>(p.out)[off] = static_cast<uint8_t>(v); return;
      case DType::Int16: static_cast<int16_t*>(p.out)[off] = static_cast<int16_t>(v); return;
      case DType::Int32: static_cast<int32_t*>(p.out)[off] = static_cast<int32_t>(v); return;
      default: static_cast<int64_t*>(p.out)[off] = v; return;
    }
  }
};

}  // namespace voxaug::detail
