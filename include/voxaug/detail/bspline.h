// voxaug: cubic B-spline prefilter and evaluation, shared by the host and device backends.
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

// In-place recursive cubic B-spline prefilter of one line c[0], c[stride], ... (length n)
// with mirror boundaries (Unser's causal / anticausal pair; gain 6).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE void bspline_filter_line(T* c, int64_t n, int64_t stride) {
  if (n < 2) return;
  const T z = static_cast<T>(-0.267949192431122706472553658494127633);  // sqrt(3) - 2
  const T gain = T(6);
  for (int64_t k = 0; k < n; ++k) c[k * stride] = fmul(c[k * stride], gain);
  // Causal initialisation: sum of z^k c[k] for the mirror-extended signal, truncated where
  // |z|^k falls below the type's precision.
  const int64_t horizon = sizeof(T) == 4 ? 13 : 28;
  T sum = c[0];
  if (horizon < n) {
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
  // Anticausal initialisation (mirror): z / (z^2 - 1) * (c[n-1] + z c[n-2]).
  c[(n - 1) * stride] = fmul(fdiv(z, fsub(fmul(z, z), T(1))),
                             fadd(c[(n - 1) * stride], fmul(z, c[(n - 2) * stride])));
  for (int64_t k = n - 2; k >= 0; --k)
    c[k * stride] = fmul(z, fsub(c[(k + 1) * stride], c[k * stride]));
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

}  // namespace voxaug::detail
