// voxaug: B-spline (orders 2..5) prefilter and evaluation, shared by the host and device backends.
#pragma once

#include <cmath>
#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/resample.h"

namespace voxaug::detail {

// Source index of padded index j (in [-P, S + P)) under the padding's extension rule, or -1
// for "the constant".
VOXAUG_HD VOXAUG_FORCEINLINE int64_t extend_index(int64_t j, int64_t size, Padding padding,
                                                  bool align_corners) {
  if (j >= 0 && j < size) return j;
  switch (padding) {
    case Padding::Border: return j < 0 ? 0 : size - 1;
    case Padding::Reflection: {
      if (size == 1) return 0;
      if (align_corners) {  // whole-sample symmetric (scipy 'mirror'): d c b | a b c d
        const int64_t period = 2 * (size - 1);
        int64_t k = j % period;
        if (k < 0) k += period;
        return k < size ? k : period - k;
      }
      const int64_t period = 2 * size;  // half-sample symmetric (scipy 'reflect'): b a | a b
      int64_t k = j % period;
      if (k < 0) k += period;
      return k < size ? k : period - 1 - k;
    }
    default: return -1;  // Zeros / Constant
  }
}

// The recursive prefilter of the B-spline of order 2..5 (Unser 1993; scipy's poles): the
// overall gain prod (1 - z)(1 - 1/z) (exactly 8, 6, 384, 120) and one causal / anticausal pass
// per pole. `horizon`: the causal initialisation's truncation, ceil(log(eps) / log|z|) for the
// float32 and float64 epsilons (2^-24, 2^-53).
struct BSplinePole {
  double z;
  int64_t horizon_f, horizon_d;
};
struct BSplineFilter {
  int num_poles;
  double gain;
  BSplinePole pole[2];
};
VOXAUG_HD VOXAUG_FORCEINLINE BSplineFilter bspline_filter_of(int order) {
  switch (order) {
    case 2: return {1, 8.0, {{-0.171572875253809902396622551580603843, 10, 21}, {0.0, 0, 0}}};
    case 4:
      return {2,
              384.0,
              {{-0.361341225900220177092212841325675255, 17, 37},
               {-0.0137254292973391213603312269391282041, 4, 9}}};
    case 5:
      return {2,
              120.0,
              {{-0.43057534709997379185143478349352011, 20, 44},
               {-0.0430962882032646538227123768225501825, 6, 12}}};
    default: return {1, 6.0, {{-0.267949192431122706472553658494127633, 13, 28}, {0.0, 0, 0}}};
  }
}

// How a padded line (kBSplinePad voxels per side) continues beyond its ends, as scipy's
// map_coordinates filters it. Each pass of a pole starts from the exact sums over the
// continuation (truncated at |z|^horizon, below the type's precision), which the signal keeps
// through every pass:
// - Reflect (Reflection padding): the padding's own reflection rule about the volume's edges
//   (scipy's 'reflect' / 'mirror', filtered on the unpadded volume with exact boundaries);
// - PaddedReflect (Border): the half-sample reflection of the padded line about its own ends
//   (scipy pads 12 edge voxels for 'nearest' and filters them with its 'reflect' boundary);
// - Mirror (Zeros / Constant): the whole-sample mirror of the padded line (scipy pads 12 cval
//   voxels for 'grid-constant' and filters them with its 'mirror' boundary).
enum class BSplineEnds : int32_t { Mirror = 0, Reflect = 1, PaddedReflect = 2 };
struct BSplineLineEnds {
  BSplineEnds kind = BSplineEnds::Mirror;
  bool align_corners = false;
};
VOXAUG_HD VOXAUG_FORCEINLINE BSplineLineEnds bspline_line_ends(Padding padding,
                                                               bool align_corners) {
  BSplineLineEnds e;
  e.kind = padding == Padding::Reflection ? BSplineEnds::Reflect
           : padding == Padding::Border   ? BSplineEnds::PaddedReflect
                                          : BSplineEnds::Mirror;
  e.align_corners = align_corners;
  return e;
}

// Index inside the padded line (length n) of padded position q (any integer) under Reflect /
// PaddedReflect.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t bspline_end_index(int64_t q, int64_t n,
                                                       const BSplineLineEnds& ends) {
  if (q >= 0 && q < n) return q;
  if (ends.kind == BSplineEnds::PaddedReflect)
    return extend_index(q, n, Padding::Reflection, false);
  return kBSplinePad + extend_index(q - kBSplinePad, n - 2 * kBSplinePad, Padding::Reflection,
                                    ends.align_corners);
}

// One pole's causal and anticausal passes over c[0], c[stride], ... (length n >= 2).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE void bspline_pole_pass(T* c, int64_t n, int64_t stride,
                                                    const BSplinePole& pole,
                                                    const BSplineLineEnds& ends) {
  const T z = static_cast<T>(pole.z);
  const int64_t horizon = sizeof(T) == 4 ? pole.horizon_f : pole.horizon_d;
  T sum = c[0];
  const bool extend = ends.kind != BSplineEnds::Mirror;
  // Reflect / PaddedReflect: tail = sum over i >= 1 of z^i c[n - 1 + i], read before the passes.
  T tail = T(0);
  if (extend) {
    // c+[0] = sum_k z^k c[-k] and the anticausal start z / (z^2 - 1) (c+[n-1] + tail), both
    // over the line's continuation.
    T zk = z;
    for (int64_t k = 1; k < horizon; ++k) {
      sum = fadd(sum, fmul(zk, c[bspline_end_index(-k, n, ends) * stride]));
      tail = fadd(tail, fmul(zk, c[bspline_end_index(n - 1 + k, n, ends) * stride]));
      zk = fmul(zk, z);
    }
  } else if (horizon < n) {
    // Causal initialisation: sum of z^k c[k] for the mirror-extended signal, truncated where
    // |z|^k falls below the type's precision.
    T zk = z;
    for (int64_t k = 1; k < horizon; ++k) {
      sum = fadd(sum, fmul(zk, c[k * stride]));
      zk = fmul(zk, z);
    }
  } else {  // exact mirror-symmetric initialisation for short lines
    T zk = z;
    // z^(n - 1) by repeated products in double: the same bits on the host and the device
    // (pow's last bit is the library's: glibc and CUDA's differ).
    double zd = 1.0;
    for (int64_t k = 1; k < n; ++k) zd = fmul(zd, static_cast<double>(z));
    const T zn = static_cast<T>(zd);
    T z2n = fmul(zn, zn);
    z2n = fdiv(z2n, z);
    sum = fadd(c[0], fmul(zn, c[(n - 1) * stride]));
    for (int64_t k = 1; k < n - 1; ++k) {
      sum = fadd(sum, fmul(fadd(zk, z2n), c[k * stride]));
      zk = fmul(zk, z);
      z2n = fdiv(z2n, z);
    }
    sum = fdiv(sum, fsub(T(1), fmul(zn, zn)));
  }
  c[0] = sum;
  for (int64_t k = 1; k < n; ++k) c[k * stride] = fadd(c[k * stride], fmul(z, c[(k - 1) * stride]));
  // Anticausal initialisation: z / (z^2 - 1) * (c[n-1] + tail); for the mirror, tail is
  // z c[n-2].
  const T t = extend ? tail : fmul(z, c[(n - 2) * stride]);
  c[(n - 1) * stride] = fmul(fdiv(z, fsub(fmul(z, z), T(1))), fadd(c[(n - 1) * stride], t));
  for (int64_t k = n - 2; k >= 0; --k)
    c[k * stride] = fmul(z, fsub(c[(k + 1) * stride], c[k * stride]));
}

// In-place recursive B-spline prefilter (order 2..5; 3 by default) of one padded line c[0],
// c[stride], ... (length n): the gain, then each pole's pass.
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE void bspline_filter_line(T* c, int64_t n, int64_t stride,
                                                      int order = 3,
                                                      const BSplineLineEnds& ends = {}) {
  if (n < 2) return;
  const BSplineFilter flt = bspline_filter_of(order);
  const T gain = static_cast<T>(flt.gain);
  for (int64_t k = 0; k < n; ++k) c[k * stride] = fmul(c[k * stride], gain);
  for (int q = 0; q < flt.num_poles; ++q) bspline_pole_pass(c, n, stride, flt.pole[q], ends);
}

// Cubic B-spline basis at fractional position t in [0, 1): weights of taps i-1 .. i+2.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void bspline_weights(Acc t, Acc w[4]) {
  const Acc one_t = fsub(Acc(1), t);
  const Acc t2 = fmul(t, t), t3 = fmul(t2, t);
  w[0] = fdiv(fmul(fmul(one_t, one_t), one_t), Acc(6));
  w[1] = fdiv(fadd(fsub(fmul(Acc(3), t3), fmul(Acc(6), t2)), Acc(4)), Acc(6));
  w[2] =
      fdiv(fadd(fadd(fadd(fmul(Acc(-3), t3), fmul(Acc(3), t2)), fmul(Acc(3), t)), Acc(1)), Acc(6));
  w[3] = fdiv(t3, Acc(6));
}

// The centred B-spline of order 2, 4 or 5 at t (scipy's spline orders; order 3:
// bspline_weights). Taps i0 .. i0 + order around a continuous position x: odd orders start at
// floor(x) - (order - 1) / 2, even ones at floor(x + 1/2) - order / 2 (scipy's rule).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc bspline_basis(int order, Acc t) {
  t = t < Acc(0) ? -t : t;
  if (order == 2) {
    if (t < Acc(0.5)) return fsub(Acc(0.75), fmul(t, t));
    if (t < Acc(1.5)) {
      const Acc u = fsub(Acc(1.5), t);
      return fmul(Acc(0.5), fmul(u, u));
    }
    return Acc(0);
  }
  const Acc t2 = fmul(t, t);
  if (order == 4) {
    if (t <= Acc(0.5))  // 115/192 - 5/8 t^2 + 1/4 t^4
      return fadd(Acc(115.0 / 192.0), fmul(t2, fsub(fmul(Acc(0.25), t2), Acc(0.625))));
    if (t <= Acc(1.5))  // 55/96 + 5/24 t - 5/4 t^2 + 5/6 t^3 - 1/6 t^4
      return fadd(Acc(55.0 / 96.0),
                  fmul(t, fadd(Acc(5.0 / 24.0),
                               fmul(t, fadd(Acc(-1.25), fmul(t, fsub(Acc(5.0 / 6.0),
                                                                     fmul(t, Acc(1.0 / 6.0)))))))));
    if (t < Acc(2.5)) {
      const Acc u = fsub(Acc(2.5), t), u2 = fmul(u, u);
      return fdiv(fmul(u2, u2), Acc(24));
    }
    return Acc(0);
  }
  // order 5
  if (t <= Acc(1))  // 11/20 - 1/2 t^2 + 1/4 t^4 - 1/12 t^5
    return fadd(Acc(0.55),
                fmul(t2, fadd(Acc(-0.5), fmul(t2, fsub(Acc(0.25), fmul(t, Acc(1.0 / 12.0)))))));
  if (t <= Acc(2))  // 17/40 + 5/8 t - 7/4 t^2 + 5/4 t^3 - 3/8 t^4 + 1/24 t^5
    return fadd(
        Acc(0.425),
        fmul(t, fadd(Acc(0.625),
                     fmul(t, fadd(Acc(-1.75),
                                  fmul(t, fadd(Acc(1.25),
                                               fmul(t, fadd(Acc(-0.375),
                                                            fmul(t, Acc(1.0 / 24.0)))))))))));
  if (t < Acc(3)) {
    const Acc u = fsub(Acc(3), t), u2 = fmul(u, u);
    return fdiv(fmul(fmul(u2, u2), u), Acc(120));
  }
  return Acc(0);
}

// Taps of the B-spline of order 2..5 at x: the first index and the order + 1 weights (order 3:
// bspline_weights).
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE int64_t bspline_taps(int order, Acc x, Acc* w) {
  if (order == 3) {
    const Acc f = floor(x);
    bspline_weights(fsub(x, f), w);
    return static_cast<int64_t>(f) - 1;
  }
  const Acc f = (order & 1) ? floor(x) : floor(fadd(x, Acc(0.5)));
  const int64_t i0 = static_cast<int64_t>(f) - order / 2;
  for (int k = 0; k <= order; ++k) w[k] = bspline_basis(order, fsub(x, static_cast<Acc>(i0 + k)));
  return i0;
}

}  // namespace voxaug::detail
