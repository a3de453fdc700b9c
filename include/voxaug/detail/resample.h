// voxaug: per-voxel math of the resample gather (coordinates, padding, interpolation),
// shared by the OpenMP and CUDA backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "voxaug/config.h"
#include "voxaug/detail/bspline.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/deform.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/pointwise.h"
#include "voxaug/resample.h"

namespace voxaug::detail {

// Source coordinates are clamped to +-2^30 voxels before padding: beyond any volume, and
// small enough for 32-bit indices on the host's row path.
constexpr double kCoordinateBound = 1073741824.0;

// grid_sample's reflection range for an axis of `size` voxels: [twice_low/2, twice_high/2] with
// twice_low, twice_high = 0, 2(size-1) (align_corners) or -1, 2 size - 1. One definition for the
// scalar rule below and the host's vector fold (kernels/resample/resample_cpu.h), so that the
// two decide "inside" by the same numbers.
template <class Acc>
struct ReflectRange {
  Acc lo;      // twice_low / 2
  Acc span;    // (twice_high - twice_low) / 2
  Acc hi;      // lo + span
  bool empty;  // twice_low == twice_high: every coordinate reflects to 0
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE ReflectRange<Acc> reflect_range(int64_t size, bool align_corners) {
  const int64_t twice_low = align_corners ? 0 : -1;
  const int64_t twice_high = align_corners ? 2 * (size - 1) : 2 * size - 1;
  ReflectRange<Acc> r;
  r.lo = static_cast<Acc>(twice_low) / Acc(2);
  r.span = static_cast<Acc>(twice_high - twice_low) / Acc(2);
  r.hi = fadd(r.lo, r.span);
  r.empty = twice_low == twice_high;
  return r;
}

// grid_sample's reflect_coordinates(_set_grad): reflect `x` about [r.lo, r.hi];
// *grad receives d(result)/dx (+1 or -1).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc reflect_coordinate(Acc x, const ReflectRange<Acc>& r, Acc* grad) {
  if (r.empty) {
    *grad = Acc(0);
    return Acc(0);
  }
  if (x >= r.lo && x <= r.hi) {  // already inside: the common case, kept exact
    *grad = Acc(1);
    return x;
  }
  x = fsub(x, r.lo);
  Acc mult = Acc(1);
  if (x < Acc(0)) {
    mult = Acc(-1);
    x = -x;
  }
  const Acc extra = fmod(x, r.span);
  const int64_t flips = static_cast<int64_t>(floor(fdiv(x, r.span)));
  if (flips % 2 == 0) {
    *grad = mult;
    return fadd(extra, r.lo);
  }
  *grad = -mult;
  return fadd(fsub(r.span, extra), r.lo);
}

// The coordinate after Border / Reflection handling (Zeros / Constant leave it as is), and
// its derivative w.r.t. the raw coordinate (grid_sample's clip / reflect _set_grad rules).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc pad_coordinate(Acc x, int64_t size, Padding padding,
                                                bool align_corners, Acc* grad) {
  *grad = Acc(1);
  if (padding == Padding::Reflection) {
    x = reflect_coordinate(x, reflect_range<Acc>(size, align_corners), grad);
  }
  if (padding == Padding::Border || padding == Padding::Reflection) {
    const Acc hi = static_cast<Acc>(size - 1);
    if (x <= Acc(0)) {
      *grad = Acc(0);
      x = Acc(0);
    } else if (x >= hi) {
      *grad = Acc(0);
      x = hi;
    }
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
  // B-spline modes (is_spline): prefiltered coefficients, padded by kBSplinePad per side.
  const void* coeff;
  DType coeff_dtype;
  int64_t coeff_stride[5];
  // Output samples per input sample: output sample n reads input sample n / in_group (K
  // patches cut from each of M volumes in one launch). 1 for a plain resample.
  int64_t in_group = 1;
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t in_sample(int64_t n) const {
    return in_group == 1 ? n : n / in_group;
  }
};

struct ResampleParams {
  int32_t num_targets;
  bool align_corners;
  int64_t out_size[3];
  const double* matrices;  // N x 12
  KTarget t[kMaxResampleTargets];
  KField field;  // kind None: plain resampling
  // ResampleTarget::post of target post_target (-1: none), packed as the chain packs them.
  int32_t post_target = -1;
  int32_t num_post = 0;
  uint32_t post_first_sample = 0;
  int64_t post_channels = 1;
  KStep post[kMaxResamplePostSteps];
};
// The block travels to the CUDA kernel by value (inside the functor): keep it within the
// classic 4 KiB kernel-parameter limit.
static_assert(sizeof(ResampleParams) < 3584, "ResampleParams must fit a kernel's parameters");

// Source coordinate of output voxel (od, oh, ow): m is the sample's row-major 3x4 matrix.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void source_coordinate(const Acc m[12], int64_t od, int64_t oh,
                                                    int64_t ow, Acc src[3]) {
  const Acc o[3] = {static_cast<Acc>(od), static_cast<Acc>(oh), static_cast<Acc>(ow)};
  for (int r = 0; r < 3; ++r) {
    const Acc* row = m + 4 * r;
    src[r] = fadd(fadd(fadd(fmul(row[0], o[0]), fmul(row[1], o[1])), fmul(row[2], o[2])), row[3]);
  }
}

// A source point after padding, with d(padded)/d(raw) per axis, and its trilinear cell.
template <class Acc>
struct SourcePoint {
  Acc x[3], grad[3];
  int64_t i0[3];  // floor
  Acc w1[3];      // fractional part: weight of the upper corner
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE SourcePoint<Acc> source_point(const KTarget& t, const Acc src[3],
                                                           bool align_corners) {
  SourcePoint<Acc> sp;
  const Padding pad = static_cast<Padding>(t.padding);
  for (int a = 0; a < 3; ++a) {
    // Far-away coordinates are outside whatever their value: bound them so the integer
    // conversions stay defined.
    const Acc bound = static_cast<Acc>(kCoordinateBound);
    const Acc v = src[a] < -bound ? -bound : (src[a] > bound ? bound : src[a]);
    sp.x[a] = pad_coordinate(v, t.in_size[a], pad, align_corners, &sp.grad[a]);
    const Acc f = floor(sp.x[a]);
    sp.i0[a] = sp.x[a] == sp.x[a] ? static_cast<int64_t>(f) : int64_t(-2);  // NaN: outside
    sp.w1[a] = fsub(sp.x[a], f);
  }
  return sp;
}

// Corner `corner` (bits: d, h, w) of the cell: its index, whether it is inside, its weight
// and the weight's derivative along each axis.
template <class Acc>
struct Corner {
  int64_t off;  // offset within one (n, c) volume, valid when inside
  bool inside;
  Acc w, dw[3];
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Corner<Acc> corner_of(const KTarget& t, const SourcePoint<Acc>& sp,
                                                   int corner) {
  Corner<Acc> k;
  int64_t idx[3];
  Acc wa[3], sign[3];
  k.inside = true;
  for (int a = 0; a < 3; ++a) {
    const int bit = (corner >> (2 - a)) & 1;
    idx[a] = sp.i0[a] + bit;
    wa[a] = bit ? sp.w1[a] : fsub(Acc(1), sp.w1[a]);
    sign[a] = bit ? Acc(1) : Acc(-1);
    k.inside = k.inside && idx[a] >= 0 && idx[a] < t.in_size[a];
  }
  k.w = fmul(fmul(wa[0], wa[1]), wa[2]);
  k.dw[0] = fmul(fmul(sign[0], wa[1]), wa[2]);
  k.dw[1] = fmul(fmul(wa[0], sign[1]), wa[2]);
  k.dw[2] = fmul(fmul(wa[0], wa[1]), sign[2]);
  k.off = idx[0] * t.in_stride[2] + idx[1] * t.in_stride[3] + idx[2] * t.in_stride[4];
  return k;
}

// The nearest voxel's offset within one (n, c) volume, or -1 when outside.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE int64_t nearest_offset(const KTarget& t, const SourcePoint<Acc>& sp) {
  int64_t off = 0;
  for (int a = 0; a < 3; ++a) {
    if (sp.x[a] != sp.x[a]) return -1;
    const int64_t i = round_half_even(sp.x[a]);
    if (i < 0 || i >= t.in_size[a]) return -1;
    off += i * t.in_stride[a + 2];
  }
  return off;
}

// True when the 3x4 map sends voxel centres to voxel centres one-to-one: each row of the
// linear part holds a single +-1, each column is used once, the offsets are integers.
VOXAUG_HD VOXAUG_FORCEINLINE bool is_signed_permutation(const double* m) {
  int used = 0;
  for (int r = 0; r < 3; ++r) {
    int col = -1;
    for (int k = 0; k < 3; ++k) {
      const double v = m[4 * r + k];
      if (v == 0.0) continue;
      if ((v != 1.0 && v != -1.0) || col >= 0) return false;
      col = k;
    }
    if (col < 0 || (used & (1 << col))) return false;
    used |= 1 << col;
    const double t = m[4 * r + 3];
    if (!(floor(t) == t) || t > 1e15 || t < -1e15) return false;
  }
  return true;
}

// What a launch of the forward functor may meet beyond nearest / linear gathers of a plain
// map: a displacement field, B-spline interpolation (orders 2-5), post steps. The CUDA backend
// instantiates lean variants for the common launches (every path inlined, one kernel serving
// all, took 236-255 registers per thread), chosen on the host by resample_features(); a
// variant without a feature must never be given a launch that needs it.
enum ResampleFeature : unsigned {
  kResampleField = 1u,       // a displacement field: dense, separable or B-spline rows
  kResampleSpline = 2u,      // B-spline interpolation of a target
  kResamplePost = 4u,        // post steps
  kResampleRawBSpline = 8u,  // a B-spline field evaluated with all 64 taps per voxel
  kResampleAllFeatures = 15u,
};

// The features launch `p` needs.
inline unsigned resample_features(const ResampleParams& p) {
  unsigned f = 0;
  if (static_cast<FieldKind>(p.field.kind) != FieldKind::None) f |= kResampleField;
  if (static_cast<FieldKind>(p.field.kind) == FieldKind::BSpline) f |= kResampleRawBSpline;
  if (p.post_target >= 0 && p.num_post > 0) f |= kResamplePost;
  for (int k = 0; k < p.num_targets; ++k) {
    if (is_spline(static_cast<Interp>(p.t[k].mode))) f |= kResampleSpline;
  }
  return f;
}

// Resample functor: one item = one output voxel of one sample, all targets and channels.
// Features: the ResampleFeature bits this instantiation handles (the default: all of them).
template <class Acc, unsigned Features = kResampleAllFeatures>
struct ResampleForward {
  static constexpr bool kField = (Features & kResampleField) != 0;
  static constexpr bool kSpline = (Features & kResampleSpline) != 0;
  static constexpr bool kPost = (Features & kResamplePost) != 0;
  static constexpr bool kRawBSpline = (Features & kResampleRawBSpline) != 0;
  ResampleParams p;
  struct State {
    Acc m[12];
    // The sample's map is a signed permutation with an integer offset (flip, rot90,
    // orientation change, integer crop / pad): every target copies voxels, bit-exactly.
    bool exact;
    Resolved<Acc>
        post[kPost ? kMaxResamplePostSteps : 1];  // the post steps resolved for this sample
  };
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const {
    return p.out_size[0] * p.out_size[1] * p.out_size[2];
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    const double* m = p.matrices + 12 * n;
    for (int k = 0; k < 12; ++k) st.m[k] = static_cast<Acc>(m[k]);
    st.exact = static_cast<FieldKind>(p.field.kind) == FieldKind::None && is_signed_permutation(m);
    if constexpr (kPost) {
      for (int k = 0; k < p.num_post; ++k)
        st.post[k] =
            resolve_step<Acc>(p.post[k], static_cast<uint32_t>(n),
                              p.post_first_sample + static_cast<uint32_t>(n), 0, p.post_channels);
    }
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    int64_t od, oh, ow;
    if (item < (int64_t(1) << 32)) {  // 32-bit division is several times cheaper
      const uint32_t i = static_cast<uint32_t>(item), w = static_cast<uint32_t>(p.out_size[2]);
      const uint32_t h = static_cast<uint32_t>(p.out_size[1]);
      const uint32_t rest = i / w;
      ow = i - rest * w;
      od = rest / h;
      oh = rest - static_cast<uint32_t>(od) * h;
    } else {
      ow = item % p.out_size[2];
      const int64_t rest = item / p.out_size[2];
      oh = rest % p.out_size[1];
      od = rest / p.out_size[1];
    }
    voxel(st, n, od, oh, ow);
  }

  // All targets at output voxel (od, oh, ow) of sample n.
  VOXAUG_HD VOXAUG_FORCEINLINE void voxel(const State& st, int64_t n, int64_t od, int64_t oh,
                                          int64_t ow) const {
    Acc src[3];
    source(st, n, od, oh, ow, src);
    for (int k = 0; k < p.num_targets; ++k) gather(p.t[k], n, od, oh, ow, src, st.exact);
    if constexpr (kPost) {
      if (p.post_target >= 0) post_voxel(st, n, od, oh, ow);
    }
  }

  // The post steps on one stored value (as the chain's per-element body applies them).
  VOXAUG_HD VOXAUG_FORCEINLINE Acc post_value(const State& st, int k, Acc x) const {
    Acc unused = Acc(1);
    apply_step<false, Acc>(p.post[k], st.post[k], x, unused, 0.0f, 0.0f);
    return x;
  }

  // Target post_target's channels at one output voxel, after the gather stored them: read
  // back in the output dtype (what a separate chain pass would read), stepped, stored.
  VOXAUG_HD VOXAUG_FORCEINLINE void post_voxel(const State& st, int64_t n, int64_t od, int64_t oh,
                                               int64_t ow) const {
    const KTarget& t = p.t[p.post_target];
    const int64_t base =
        n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
    for (int64_t c = 0; c < t.channels; ++c) {
      const int64_t o = base + c * t.out_stride[1];
      Acc x = load_dyn<Acc>(t.out, t.out_dtype, o);
      for (int k = 0; k < p.num_post; ++k) x = post_value(st, k, x);
      store_dyn<Acc>(t.out, t.out_dtype, o, x);
    }
  }

  // The input coordinate of output voxel (od, oh, ow): M o, or M (o + u(o)) with a field.
  VOXAUG_HD VOXAUG_FORCEINLINE void source(const State& st, int64_t n, int64_t od, int64_t oh,
                                           int64_t ow, Acc src[3]) const {
    if (!kField || static_cast<FieldKind>(p.field.kind) == FieldKind::None) {
      source_coordinate(st.m, od, oh, ow, src);
      return;
    }
    if constexpr (kField) {
      Acc u[3];
      field_displacement<Acc, kRawBSpline>(p.field, n, od, oh, ow, u);
      const Acc q[3] = {fadd(static_cast<Acc>(od), u[0]), fadd(static_cast<Acc>(oh), u[1]),
                        fadd(static_cast<Acc>(ow), u[2])};
      displaced_source(st.m, q, src);
    }
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void gather(const KTarget& t, int64_t n, int64_t od, int64_t oh,
                                           int64_t ow, const Acc src[3], bool exact) const {
    if (static_cast<Padding>(t.padding) == Padding::Cutoff && !exact &&
        cutoff_fill(t, n, od, oh, ow, src))
      return;
    if constexpr (kSpline) {
      if (!exact) {
        switch (static_cast<Interp>(t.mode)) {
          case Interp::Cubic: spline_gather<3>(t, n, od, oh, ow, src); return;
          case Interp::Quadratic: spline_gather_outlined<2>(t, n, od, oh, ow, src); return;
          case Interp::Quartic: spline_gather_outlined<4>(t, n, od, oh, ow, src); return;
          case Interp::Quintic: spline_gather_outlined<5>(t, n, od, oh, ow, src); return;
          default: break;
        }
      }
    }
    const SourcePoint<Acc> sp = source_point(t, src, p.align_corners);
    const int64_t out_base =
        n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
    const int64_t in_base = t.in_sample(n) * t.in_stride[0];
    const bool fill_const = pads_with_value(static_cast<Padding>(t.padding));
    const bool nearest = static_cast<Interp>(t.mode) == Interp::Nearest;
    if (nearest || exact) {  // one source voxel: copy it (linear at integer points equals it)
      const int64_t off = nearest_offset(t, sp);
      for (int64_t c = 0; c < t.channels; ++c) {
        const int64_t o = out_base + c * t.out_stride[1];
        if (off < 0) {
          store_value_dyn(t.out, t.out_dtype, o, fill_const ? t.pad_value : 0.0);
        } else if (nearest) {
          copy_dyn(t.in, in_base + c * t.in_stride[1] + off, t.out, o, t.elem_size);
        } else {
          store_dyn<Acc>(t.out, t.out_dtype, o,
                         load_dyn<Acc>(t.in, t.in_dtype, in_base + c * t.in_stride[1] + off));
        }
      }
      return;
    }
    // Trilinear: 8 corners, weights as grid_sample (w = distance to the opposite corner).
    const Acc fill = fill_const ? static_cast<Acc>(t.pad_value) : Acc(0);
    for (int64_t c = 0; c < t.channels; ++c) {
      const int64_t base = in_base + c * t.in_stride[1];
      Acc acc = Acc(0);
      for (int corner = 0; corner < 8; ++corner) {
        const Corner<Acc> k = corner_of(t, sp, corner);
        const Acc v = k.inside ? load_dyn<Acc>(t.in, t.in_dtype, base + k.off) : fill;
        acc = fadd(acc, fmul(k.w, v));
      }
      store_dyn<Acc>(t.out, t.out_dtype, out_base + c * t.out_stride[1], acc);
    }
  }

  // Padding::Cutoff (scipy's 'constant'): pad_value outside [0, S-1] on any axis (NaN too),
  // stored here (true); inside, nearest and linear read like Constant (a corner beyond an edge
  // has weight 0 there) and the B-splines like Reflection with align_corners.
  VOXAUG_HD VOXAUG_NOINLINE static bool cutoff_fill(const KTarget& t, int64_t n, int64_t od,
                                                    int64_t oh, int64_t ow, const Acc src[3]) {
    bool inside = true;
    for (int a = 0; a < 3; ++a)
      inside = inside && src[a] >= Acc(0) && src[a] <= static_cast<Acc>(t.in_size[a] - 1);
    if (inside) return false;
    const int64_t out_base =
        n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
    for (int64_t c = 0; c < t.channels; ++c)
      store_value_dyn(t.out, t.out_dtype, out_base + c * t.out_stride[1], t.pad_value);
    return true;
  }

  // The rarer orders out of line: inlined beside cubic, linear and nearest they made every
  // mode's per-voxel loop slower (cubic's gather by 17% on the host).
  template <int Order>
  VOXAUG_HD VOXAUG_NOINLINE void spline_gather_outlined(const KTarget& t, int64_t n, int64_t od,
                                                        int64_t oh, int64_t ow,
                                                        const Acc src[3]) const {
    spline_gather<Order>(t, n, od, oh, ow, src);
  }

  // B-spline of order 2..5 on the padded coefficients: (Order + 1)^3 taps, as scipy
  // evaluates its padded coefficients: Reflection folds the coordinate into the volume first;
  // otherwise a tap beyond the padded coefficients reads the pad value (Zeros / Constant,
  // scipy's 'grid-constant') or the edge coefficient (Border, scipy's 'nearest'), so the value
  // fades to the fill smoothly instead of stopping at a band.
  template <int Order>
  VOXAUG_HD VOXAUG_FORCEINLINE void spline_gather(const KTarget& t, int64_t n, int64_t od,
                                                  int64_t oh, int64_t ow, const Acc src[3]) const {
    constexpr int K = Order + 1;
    const Padding pad = static_cast<Padding>(t.padding);
    const bool fill_taps = pad == Padding::Zeros || pad == Padding::Constant;
    const Acc fill = pads_with_value(pad) ? static_cast<Acc>(t.pad_value) : Acc(0);
    const int64_t out_base =
        n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
    int64_t i0[3];  // first tap per axis, in padded coefficient indices
    Acc w[3][K];
    bool outside = false, edge = false;  // edge: a tap beyond the coefficients
    for (int a = 0; a < 3; ++a) {
      const int64_t size = t.in_size[a], q = size + 2 * kBSplinePad;
      const Acc bound = static_cast<Acc>(kCoordinateBound);
      Acc v = src[a] < -bound ? -bound : (src[a] > bound ? bound : src[a]);
      if (pad == Padding::Reflection) {
        Acc unused;
        v = reflect_coordinate(v, reflect_range<Acc>(size, p.align_corners), &unused);
      }
      // Cutoff: gather() has sent coordinates outside [0, S-1] to the fill; the mirrored
      // coefficients serve the taps beyond the edges.
      const Acc x = fadd(v, static_cast<Acc>(kBSplinePad));
      if (!(x == x)) {  // NaN: outside with a fill; else taps from 0 with NaN weights
        outside = outside || fill_taps;
        i0[a] = 0;
        for (int k = 0; k < K; ++k) w[a][k] = x;
        continue;
      }
      i0[a] = bspline_taps(Order, x, w[a]);
      // Every tap beyond the coefficients: the fill alone (a far-away point).
      outside = outside || (fill_taps && (i0[a] + Order < 0 || i0[a] >= q));
      edge = edge || i0[a] < 0 || i0[a] + Order >= q;
    }
    if (outside) {
      for (int64_t c = 0; c < t.channels; ++c)
        store_dyn<Acc>(t.out, t.out_dtype, out_base + c * t.out_stride[1], fill);
      return;
    }
    for (int64_t c = 0; c < t.channels; ++c) {
      const int64_t base = t.in_sample(n) * t.coeff_stride[0] + c * t.coeff_stride[1];
      Acc acc;
      if (!edge) {
        const int64_t first = base + i0[0] * t.coeff_stride[2] + i0[1] * t.coeff_stride[3] +
                              i0[2] * t.coeff_stride[4];
        acc = t.coeff_dtype == DType::Float64
                  ? spline_sum<K>(static_cast<const double*>(t.coeff), first, t.coeff_stride, w)
                  : spline_sum<K>(static_cast<const float*>(t.coeff), first, t.coeff_stride, w);
      } else {
        acc = t.coeff_dtype == DType::Float64
                  ? spline_sum_edges<K>(static_cast<const double*>(t.coeff), base, t, i0, fill_taps,
                                        fill, w)
                  : spline_sum_edges<K>(static_cast<const float*>(t.coeff), base, t, i0, fill_taps,
                                        fill, w);
      }
      store_dyn<Acc>(t.out, t.out_dtype, out_base + c * t.out_stride[1], acc);
    }
  }

  // The K x K x K weighted taps from `first` (every tap inside the coefficients): rows along
  // w, then planes along h, then d.
  template <int K, class TC>
  VOXAUG_HD VOXAUG_FORCEINLINE static Acc spline_sum(const TC* coeff, int64_t first,
                                                     const int64_t* stride, const Acc (&w)[3][K]) {
    Acc acc = Acc(0);
    for (int a = 0; a < K; ++a) {
      Acc plane = Acc(0);
      for (int b = 0; b < K; ++b) {
        Acc row = Acc(0);
        const TC* r = coeff + first + a * stride[2] + b * stride[3];
        for (int k = 0; k < K; ++k)
          row = fadd(row, fmul(w[2][k], static_cast<Acc>(r[k * stride[4]])));
        plane = fadd(plane, fmul(w[1][b], row));
      }
      acc = fadd(acc, fmul(w[0][a], plane));
    }
    return acc;
  }

  // spline_sum where some tap lies beyond the coefficients (the same sums in the same order):
  // it reads `fill` (fill_taps) or the edge coefficient. Rare (points near the padded
  // coefficients' ends): kept out of line so that it does not weigh on the common path.
  template <int K, class TC>
  VOXAUG_HD VOXAUG_NOINLINE static Acc spline_sum_edges(const TC* coeff, int64_t base,
                                                        const KTarget& t, const int64_t i0[3],
                                                        bool fill_taps, Acc fill,
                                                        const Acc (&w)[3][K]) {
    int64_t q[3];
    for (int a = 0; a < 3; ++a) q[a] = t.in_size[a] + 2 * kBSplinePad;
    const auto clamp = [](int64_t j, int64_t n) {
      return j < 0 ? int64_t(0) : (j >= n ? n - 1 : j);
    };
    Acc acc = Acc(0);
    for (int a = 0; a < K; ++a) {
      const int64_t jd = i0[0] + a;
      const bool in_d = jd >= 0 && jd < q[0];
      Acc plane = Acc(0);
      for (int b = 0; b < K; ++b) {
        const int64_t jh = i0[1] + b;
        const bool in_dh = in_d && jh >= 0 && jh < q[1];
        const TC* r = coeff + base + clamp(jd, q[0]) * t.coeff_stride[2] +
                      clamp(jh, q[1]) * t.coeff_stride[3];
        Acc row = Acc(0);
        for (int k = 0; k < K; ++k) {
          const int64_t jw = i0[2] + k;
          const bool in = in_dh && jw >= 0 && jw < q[2];
          const Acc v =
              (in || !fill_taps) ? static_cast<Acc>(r[clamp(jw, q[2]) * t.coeff_stride[4]]) : fill;
          row = fadd(row, fmul(w[2][k], v));
        }
        plane = fadd(plane, fmul(w[1][b], row));
      }
      acc = fadd(acc, fmul(w[0][a], plane));
    }
    return acc;
  }
};

// ---- backward ----
// grad_in (Acc, dense (N, C, D, H, W)) += d out / d in * grad_out, for output voxel
// (n, od, oh, ow) of target t (whose `out` is grad_out). `add` accumulates (atomically on
// the device).
template <class Acc, class Add>
VOXAUG_HD VOXAUG_FORCEINLINE void scatter_input_grad(const KTarget& t, bool align_corners,
                                                     const Acc src[3], int64_t n, int64_t c,
                                                     int64_t od, int64_t oh, int64_t ow,
                                                     Acc* grad_in, Add&& add) {
  const SourcePoint<Acc> sp = source_point(t, src, align_corners);
  const Acc g = load_dyn<Acc>(t.out, t.out_dtype,
                              n * t.out_stride[0] + c * t.out_stride[1] + od * t.out_stride[2] +
                                  oh * t.out_stride[3] + ow * t.out_stride[4]);
  // grad_in is dense: the input's logical strides.
  const int64_t vol = t.in_size[0] * t.in_size[1] * t.in_size[2];
  Acc* base = grad_in + (n * t.channels + c) * vol;
  if (static_cast<Interp>(t.mode) == Interp::Nearest) {
    int64_t off = 0;
    for (int a = 0; a < 3; ++a) {
      const int64_t i = sp.x[a] == sp.x[a] ? round_half_even(sp.x[a]) : -1;
      if (i < 0 || i >= t.in_size[a]) return;
      off = off * t.in_size[a] + i;
    }
    add(base + off, g);
    return;
  }
  for (int corner = 0; corner < 8; ++corner) {
    int64_t idx[3];
    Acc w = Acc(1);
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      const int bit = (corner >> (2 - a)) & 1;
      idx[a] = sp.i0[a] + bit;
      w = fmul(w, bit ? sp.w1[a] : fsub(Acc(1), sp.w1[a]));
      inside = inside && idx[a] >= 0 && idx[a] < t.in_size[a];
    }
    if (inside) add(base + (idx[0] * t.in_size[1] + idx[1]) * t.in_size[2] + idx[2], fmul(w, g));
  }
}

// d loss / d source coordinate at output voxel (n, od, oh, ow), summed over the linear
// targets and their channels (nearest contributes nothing, as in grid_sample).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void source_grad(const ResampleParams& p, const Acc src[3], int64_t n,
                                              int64_t od, int64_t oh, int64_t ow, Acc gsrc[3]) {
  for (int k = 0; k < p.num_targets; ++k) {
    const KTarget& t = p.t[k];
    if (static_cast<Interp>(t.mode) != Interp::Linear) continue;
    const SourcePoint<Acc> sp = source_point(t, src, p.align_corners);
    const Acc fill = static_cast<Padding>(t.padding) == Padding::Constant
                         ? static_cast<Acc>(t.pad_value)
                         : Acc(0);
    for (int64_t c = 0; c < t.channels; ++c) {
      const Acc g = load_dyn<Acc>(t.out, t.out_dtype,
                                  n * t.out_stride[0] + c * t.out_stride[1] + od * t.out_stride[2] +
                                      oh * t.out_stride[3] + ow * t.out_stride[4]);
      const int64_t base = n * t.in_stride[0] + c * t.in_stride[1];
      Acc dx[3] = {Acc(0), Acc(0), Acc(0)};
      for (int corner = 0; corner < 8; ++corner) {
        const Corner<Acc> q = corner_of(t, sp, corner);
        const Acc v = q.inside ? load_dyn<Acc>(t.in, t.in_dtype, base + q.off) : fill;
        for (int a = 0; a < 3; ++a) dx[a] = fadd(dx[a], fmul(q.dw[a], v));
      }
      for (int a = 0; a < 3; ++a) gsrc[a] = fadd(gsrc[a], fmul(fmul(g, dx[a]), sp.grad[a]));
    }
  }
}

}  // namespace voxaug::detail
