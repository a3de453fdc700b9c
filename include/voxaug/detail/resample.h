// voxaug: per-voxel math of the resample gather (coordinates, padding, interpolation),
// shared by the OpenMP and CUDA backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/resample.h"

namespace voxaug::detail {

// grid_sample's reflect_coordinates: reflect `x` about [twice_low/2, twice_high/2].
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc reflect_coordinate(Acc x, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return Acc(0);
  const Acc lo = static_cast<Acc>(twice_low) / Acc(2);
  const Acc span = static_cast<Acc>(twice_high - twice_low) / Acc(2);
  x = fabs(fsub(x, lo));
  const Acc extra = fmod(x, span);
  const int64_t flips = static_cast<int64_t>(floor(fdiv(x, span)));
  return (flips % 2 == 0) ? fadd(extra, lo) : fadd(fsub(span, extra), lo);
}

// The coordinate after Border / Reflection handling (Zeros / Constant leave it as is).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc pad_coordinate(Acc x, int64_t size, Padding padding,
                                                bool align_corners) {
  if (padding == Padding::Reflection) {
    x = align_corners ? reflect_coordinate(x, 0, 2 * (size - 1))
                      : reflect_coordinate(x, -1, 2 * size - 1);
  }
  if (padding == Padding::Border || padding == Padding::Reflection) {
    const Acc hi = static_cast<Acc>(size - 1);
    x = x < Acc(0) ? Acc(0) : (x > hi ? hi : x);  // NaN stays NaN, then reads as out of range
  }
  return x;
}

// Round half to even, like std::nearbyint in the default rounding mode (grid_sample's rule).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE int64_t round_half_even(Acc x) {
  const Acc f = floor(x);
  const Acc diff = fsub(x, f);
  int64_t i = static_cast<int64_t>(f);
  if (diff > Acc(0.5) || (diff == Acc(0.5) && (i & 1))) ++i;
  return i;
}

// Storage access by run-time dtype (targets of one launch may differ in dtype).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc load_dyn(const void* base, DType t, int64_t off) {
  switch (t) {
    case DType::Float64: return static_cast<Acc>(static_cast<const double*>(base)[off]);
    case DType::Float32: return static_cast<Acc>(static_cast<const float*>(base)[off]);
    case DType::Float16:
      return static_cast<Acc>(half_to_float(static_cast<const uint16_t*>(base)[off]));
    case DType::BFloat16:
      return static_cast<Acc>(bf16_to_float(static_cast<const uint16_t*>(base)[off]));
    case DType::UInt8: return static_cast<Acc>(static_cast<const uint8_t*>(base)[off]);
    case DType::Int16: return static_cast<Acc>(static_cast<const int16_t*>(base)[off]);
    case DType::Int32: return static_cast<Acc>(static_cast<const int32_t*>(base)[off]);
    case DType::Int64: return static_cast<Acc>(static_cast<const int64_t*>(base)[off]);
  }
  return Acc(0);
}
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void store_dyn(void* base, DType t, int64_t off, Acc v) {
  switch (t) {
    case DType::Float64: static_cast<double*>(base)[off] = static_cast<double>(v); return;
    case DType::Float32: static_cast<float*>(base)[off] = static_cast<float>(v); return;
    case DType::Float16:
      static_cast<uint16_t*>(base)[off] = float_to_half(static_cast<float>(v));
      return;
    case DType::BFloat16:
      static_cast<uint16_t*>(base)[off] = float_to_bf16(static_cast<float>(v));
      return;
    default: return;  // integer outputs only come from nearest copies (copy_dyn)
  }
}
// Bit-exact element copy (nearest mode), or the pad value converted to the dtype.
VOXAUG_HD VOXAUG_FORCEINLINE void copy_dyn(const void* src, int64_t soff, void* dst, int64_t doff,
                                           int64_t elem_size) {
  const char* s = static_cast<const char*>(src) + soff * elem_size;
  char* d = static_cast<char*>(dst) + doff * elem_size;
  for (int64_t b = 0; b < elem_size; ++b) d[b] = s[b];
}
VOXAUG_HD VOXAUG_FORCEINLINE void store_value_dyn(void* base, DType t, int64_t off, double v) {
  switch (t) {
    case DType::UInt8: static_cast<uint8_t*>(base)[off] = static_cast<uint8_t>(v); return;
    case DType::Int16: static_cast<int16_t*>(base)[off] = static_cast<int16_t>(v); return;
    case DType::Int32: static_cast<int32_t*>(base)[off] = static_cast<int32_t>(v); return;
    case DType::Int64: static_cast<int64_t*>(base)[off] = static_cast<int64_t>(v); return;
    default: store_dyn<double>(base, t, off, v); return;
  }
}

// One target as it travels to the kernel.
struct KTarget {
  const void* in;
  void* out;
  DType in_dtype, out_dtype;
  int32_t mode, padding;
  double pad_value;
  int64_t channels;
  int64_t in_size[3];    // D, H, W
  int64_t in_stride[5];  // N, C, D, H, W (elements)
  int64_t out_stride[5];
  int64_t elem_size;
};

struct ResampleParams {
  int32_t num_targets;
  bool align_corners;
  int64_t out_size[3];
  const double* matrices;  // N x 12
  KTarget t[kMaxResampleTargets];
};

// Resample functor: one item = one output voxel of one sample, all targets and channels.
template <class Acc>
struct ResampleForward {
  ResampleParams p;
  struct State {
    Acc m[12];
  };
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const {
    return p.out_size[0] * p.out_size[1] * p.out_size[2];
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    for (int k = 0; k < 12; ++k) st.m[k] = static_cast<Acc>(p.matrices[12 * n + k]);
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    const int64_t ow = item % p.out_size[2];
    const int64_t rest = item / p.out_size[2];
    const int64_t oh = rest % p.out_size[1];
    const int64_t od = rest / p.out_size[1];
    const Acc o[3] = {static_cast<Acc>(od), static_cast<Acc>(oh), static_cast<Acc>(ow)};
    Acc src[3];
    for (int r = 0; r < 3; ++r) {
      const Acc* m = st.m + 4 * r;
      src[r] = fadd(fadd(fadd(fmul(m[0], o[0]), fmul(m[1], o[1])), fmul(m[2], o[2])), m[3]);
    }
    for (int k = 0; k < p.num_targets; ++k) gather(p.t[k], n, od, oh, ow, src);
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void gather(const KTarget& t, int64_t n, int64_t od, int64_t oh,
                                           int64_t ow, const Acc src[3]) const {
    const Padding pad = static_cast<Padding>(t.padding);
    Acc x[3];
    for (int a = 0; a < 3; ++a) {
      // Far-away coordinates are outside whatever their value: bound them so the integer
      // conversions below stay defined (2^40 voxels is beyond any volume).
      const Acc bound = static_cast<Acc>(1099511627776.0);
      const Acc v = src[a] < -bound ? -bound : (src[a] > bound ? bound : src[a]);
      x[a] = pad_coordinate(v, t.in_size[a], pad, p.align_corners);
    }
    const int64_t out_base =
        n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
    const int64_t in_base = n * t.in_stride[0];
    const bool fill_const = pad == Padding::Constant;
    if (static_cast<Interp>(t.mode) == Interp::Nearest) {
      int64_t i[3];
      bool inside = true;
      for (int a = 0; a < 3; ++a) {
        inside = inside && !(x[a] != x[a]);  // NaN coordinate: outside
        i[a] = inside ? round_half_even(x[a]) : 0;
        inside = inside && i[a] >= 0 && i[a] < t.in_size[a];
      }
      const int64_t in_off =
          in_base + i[0] * t.in_stride[2] + i[1] * t.in_stride[3] + i[2] * t.in_stride[4];
      for (int64_t c = 0; c < t.channels; ++c) {
        const int64_t o = out_base + c * t.out_stride[1];
        if (inside) {
          copy_dyn(t.in, in_off + c * t.in_stride[1], t.out, o, t.elem_size);
        } else {
          store_value_dyn(t.out, t.out_dtype, o, fill_const ? t.pad_value : 0.0);
        }
      }
      return;
    }
    // Trilinear: 8 corners, weights as grid_sample (w = distance to the opposite corner).
    int64_t i0[3];
    Acc w1[3];
    for (int a = 0; a < 3; ++a) {
      const Acc f = floor(x[a]);
      i0[a] = static_cast<int64_t>(f);
      w1[a] = fsub(x[a], f);
    }
    const bool nan_coord = (x[0] != x[0]) || (x[1] != x[1]) || (x[2] != x[2]);
    const Acc fill = fill_const ? static_cast<Acc>(t.pad_value) : Acc(0);
    for (int64_t c = 0; c < t.channels; ++c) {
      Acc acc = Acc(0);
      for (int corner = 0; corner < 8; ++corner) {
        const int64_t id = i0[0] + ((corner >> 2) & 1), ih = i0[1] + ((corner >> 1) & 1),
                      iw = i0[2] + (corner & 1);
        const Acc wd = (corner >> 2) & 1 ? w1[0] : fsub(Acc(1), w1[0]);
        const Acc wh = (corner >> 1) & 1 ? w1[1] : fsub(Acc(1), w1[1]);
        const Acc ww = corner & 1 ? w1[2] : fsub(Acc(1), w1[2]);
        const Acc w = fmul(fmul(wd, wh), ww);
        const bool inside = !nan_coord && id >= 0 && id < t.in_size[0] && ih >= 0 &&
                            ih < t.in_size[1] && iw >= 0 && iw < t.in_size[2];
        const Acc v = inside ? load_dyn<Acc>(t.in, t.in_dtype,
                                             in_base + c * t.in_stride[1] + id * t.in_stride[2] +
                                                 ih * t.in_stride[3] + iw * t.in_stride[4])
                             : fill;
        acc = fadd(acc, fmul(w, v));
      }
      store_dyn<Acc>(t.out, t.out_dtype, out_base + c * t.out_stride[1],
                     nan_coord ? static_cast<Acc>(NAN) : acc);
    }
  }
};

}  // namespace voxaug::detail
