// voxaug: per-voxel math of the simulated low resolution (include/voxaug/lowres.h): torch's
// interpolate index rules (ATen native/UpSample.h) fused into one gather, shared by the CPU and
// CUDA backends.
#pragma once

#include <cmath>
#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"

namespace voxaug::detail {

VOXAUG_HD VOXAUG_FORCEINLINE float lowres_floor(float x) {
#if VOXAUG_DEVICE_PASS
  return floorf(x);
#else
  return std::floor(x);
#endif
}

// ATen nearest_idx with scales unset (interpolate called with a size): the source index of
// output index `dst` when resizing in_size -> out_size in 'nearest' mode; `scale` must be
// float(in_size) / float(out_size) (ATen's compute_scales_value<float>).
VOXAUG_HD VOXAUG_FORCEINLINE int64_t torch_nearest_index(int64_t dst, int64_t in_size,
                                                         int64_t out_size, float scale) {
  if (out_size == in_size) return dst;
  if (out_size == 2 * in_size) return dst >> 1;
  const int64_t src = static_cast<int64_t>(lowres_floor(fmul(static_cast<float>(dst), scale)));
  return src < in_size - 1 ? src : in_size - 1;
}

// One axis of one sample: its size, its low-resolution size and the float32 scales torch
// computes from them (made once per sample, so the per-voxel work has no division).
struct LowresAxis {
  int64_t size, low;
  float down;  // nearest size -> low: size / low
  float up;    // nearest low -> size: low / size
  float lin;   // linear low -> size: area_pixel_compute_scale
};

VOXAUG_HD VOXAUG_FORCEINLINE LowresAxis lowres_axis(int64_t size, int64_t low, bool align_corners) {
  LowresAxis a;
  a.size = size;
  a.low = low;
  a.down = fdiv(static_cast<float>(size), static_cast<float>(low));
  a.up = fdiv(static_cast<float>(low), static_cast<float>(size));
  if (align_corners)
    a.lin = size > 1 ? fdiv(static_cast<float>(low - 1), static_cast<float>(size - 1)) : 0.0f;
  else
    a.lin = a.up;
  return a;
}

// One axis of an output voxel: the two input indices (already through the nearest
// downsampling) and their weights.
struct LowresTap {
  int64_t i0, i1;
  float l0, l1;
};

// Output index o of an axis: upsampling low -> size (trilinear: ATen
// compute_source_index_and_lambda; nearest: nearest_idx), then each low-resolution index j ->
// its input index nearest_idx(j, size, low).
VOXAUG_HD VOXAUG_FORCEINLINE LowresTap lowres_tap(int64_t o, const LowresAxis& ax, bool nearest_up,
                                                  bool align_corners) {
  const int64_t size = ax.size, low = ax.low;
  int64_t j0, j1;
  float l1;
  if (nearest_up) {
    j0 = j1 = torch_nearest_index(o, low, size, ax.up);
    l1 = 0.0f;
  } else if (low == size) {
    j0 = j1 = o;
    l1 = 0.0f;
  } else {
    float real;
    if (align_corners) {
      real = fmul(ax.lin, static_cast<float>(o));
    } else {
      real = fsub(fmul(ax.lin, fadd(static_cast<float>(o), 0.5f)), 0.5f);
      real = real < 0.0f ? 0.0f : real;
    }
    const int64_t f = static_cast<int64_t>(lowres_floor(real));
    j0 = f < low - 1 ? f : low - 1;
    float lam = fsub(real, static_cast<float>(j0));
    lam = lam < 0.0f ? 0.0f : (lam > 1.0f ? 1.0f : lam);
    l1 = lam;
    j1 = j0 + (j0 < low - 1 ? 1 : 0);
  }
  LowresTap t;
  t.i0 = torch_nearest_index(j0, size, low, ax.down);
  t.i1 = torch_nearest_index(j1, size, low, ax.down);
  t.l1 = l1;
  t.l0 = fsub(1.0f, l1);
  return t;
}

// One linear step, l0 * a + l1 * b, never contracted: the unit both backends build the value from.
VOXAUG_HD VOXAUG_FORCEINLINE float lowres_lerp(float l0, float a, float l1, float b) {
  return fadd(fmul(l0, a), fmul(l1, b));
}

// The output value from the taps of the three axes (ATen's trilinear expression order:
// t0 * (h0 * (w0 * x000 + w1 * x001) + h1 * (..)) + t1 * (..)). `base` points at (n, c) of the
// input; strides in elements. The CPU twin evaluates the same lerps with the w step cached per
// input row.
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE float lowres_combine(const T* base, int64_t sd, int64_t sh, int64_t sw,
                                                  const LowresTap& td, const LowresTap& th,
                                                  const LowresTap& tw) {
  const int64_t w0 = tw.i0 * sw, w1 = tw.i1 * sw;
  auto row = [&](int64_t id, int64_t ih) {
    const T* p = base + id * sd + ih * sh;
    return lowres_lerp(tw.l0, load_as<float>(p[w0]), tw.l1, load_as<float>(p[w1]));
  };
  const float a = lowres_lerp(th.l0, row(td.i0, th.i0), th.l1, row(td.i0, th.i1));
  const float b = lowres_lerp(th.l0, row(td.i1, th.i0), th.l1, row(td.i1, th.i1));
  return lowres_lerp(td.l0, a, td.l1, b);
}

}  // namespace voxaug::detail
