// voxaug: arithmetic that rounds the same way on the host and on the device.
//
// nvcc contracts a*b+c into one FMA by default while the host build does not
// (-ffp-contract=off), so any expression evaluated on both sides would differ in the
// last bit. Everything in detail/ that must be bit-identical between the CPU twin and
// the CUDA path goes through these helpers: on the device they are the _rn intrinsics
// (never contracted), on the host plain IEEE operations. Where a fused multiply-add is
// wanted it is explicit (ffma: one rounding on both sides). log and sin/cos are our own
// polynomial evaluations for the same reason (libm and CUDA's libdevice differ).
#pragma once

#include <cstdint>
#include <cstring>

#include "voxaug/config.h"

namespace voxaug::detail {

VOXAUG_HD VOXAUG_FORCEINLINE float fadd(float a, float b) {
#if VOXAUG_DEVICE_PASS
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE float fsub(float a, float b) {
#if VOXAUG_DEVICE_PASS
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE float fmul(float a, float b) {
#if VOXAUG_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE float fdiv(float a, float b) {
#if VOXAUG_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
// a * b + c with one rounding (IEEE fusedMultiplyAdd) on both sides: __fmaf_rn on the device;
// on the host the FMA instruction where the code is compiled for it (the AVX2 / AVX-512 clones,
// kernels/common/cpu_isa.h; any aarch64), else libm's fmaf, which is exact too.
VOXAUG_HD VOXAUG_FORCEINLINE float ffma(float a, float b, float c) {
#if VOXAUG_DEVICE_PASS
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE float fsqrt(float a) {
#if VOXAUG_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double fsqrt(double a) {
#if VOXAUG_DEVICE_PASS
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double fadd(double a, double b) {
#if VOXAUG_DEVICE_PASS
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double fsub(double a, double b) {
#if VOXAUG_DEVICE_PASS
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double fmul(double a, double b) {
#if VOXAUG_DEVICE_PASS
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double fdiv(double a, double b) {
#if VOXAUG_DEVICE_PASS
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

VOXAUG_HD VOXAUG_FORCEINLINE uint32_t float_bits(float x) {
#if VOXAUG_DEVICE_PASS
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE float bits_float(uint32_t u) {
#if VOXAUG_DEVICE_PASS
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Natural log for x in (0, 1] -- the only range the samplers need (Box-Muller).
// x = 2^e * m with m in [sqrt(1/2), sqrt(2)); log(m) = 2 atanh(s), s = (m-1)/(m+1),
// |s| < 0.1716, series to s^11 (truncation < 2e-9 relative). Max error ~2 ulp.
VOXAUG_HD VOXAUG_FORCEINLINE float log_unit(float x) {
  uint32_t u = float_bits(x);
  int e = static_cast<int>((u >> 23) & 0xffu) - 127;
  u = (u & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  float m = bits_float(u);
  const bool big = m > 1.41421356f;  // select, not branch: the host loops vectorise
  m = big ? fmul(m, 0.5f) : m;
  e += big ? 1 : 0;
  const float f = fsub(m, 1.0f);
  const float s = fdiv(f, fadd(m, 1.0f));
  const float s2 = fmul(s, s);
  // 2 (s + s^3/3 + s^5/5 + s^7/7 + s^9/9 + s^11/11)
  float p = 2.0f / 11.0f;
  p = fadd(fmul(p, s2), 2.0f / 9.0f);
  p = fadd(fmul(p, s2), 2.0f / 7.0f);
  p = fadd(fmul(p, s2), 2.0f / 5.0f);
  p = fadd(fmul(p, s2), 2.0f / 3.0f);
  const float logm = fadd(fmul(fmul(p, s2), s), fmul(2.0f, s));
  const float fe = static_cast<float>(e);
  // ln2 split so that fe * ln2_hi is exact for |e| < 2^8.
  const float ln2_hi = 0.693145751953125f;
  const float ln2_lo = 1.42860682030941723212e-6f;
  return fadd(fmul(fe, ln2_hi), fadd(fmul(fe, ln2_lo), logm));
}

// sin(pi t), cos(pi t) for t in [0, 2). Reduced to r in [-1/4, 1/4] (exact in float),
// Taylor series of sin and cos of y = pi r (|y| <= pi/4, truncation < 2e-9).
VOXAUG_HD VOXAUG_FORCEINLINE void sincospi_0_2(float t, float* s_out, float* c_out) {
  const float q = static_cast<float>(static_cast<int>(fadd(fmul(t, 2.0f), 0.5f)));  // 0..4
  const int qi = static_cast<int>(q) & 3;
  const float r = fsub(t, fmul(q, 0.5f));
  const float y = fmul(r, 3.14159265358979323846f);
  const float y2 = fmul(y, y);
  float sp = 1.0f / 362880.0f;  // y^9/9!
  sp = fadd(fmul(sp, y2), -1.0f / 5040.0f);
  sp = fadd(fmul(sp, y2), 1.0f / 120.0f);
  sp = fadd(fmul(sp, y2), -1.0f / 6.0f);
  const float sn = fadd(fmul(fmul(sp, y2), y), y);
  float cp = -1.0f / 3628800.0f;  // -y^10/10!
  cp = fadd(fmul(cp, y2), 1.0f / 40320.0f);
  cp = fadd(fmul(cp, y2), -1.0f / 720.0f);
  cp = fadd(fmul(cp, y2), 1.0f / 24.0f);
  cp = fadd(fmul(cp, y2), -0.5f);
  const float cs = fadd(fmul(cp, y2), 1.0f);
  // Quadrant by selects (branch-free): q=0 (s, c), 1 (c, -s), 2 (-s, -c), 3 (-c, s).
  const bool odd = qi & 1;
  const float s0 = odd ? cs : sn, c0 = odd ? sn : cs;
  *s_out = (qi == 2 || qi == 3) ? -s0 : s0;
  *c_out = (qi == 1 || qi == 2) ? -c0 : c0;
}

VOXAUG_HD VOXAUG_FORCEINLINE uint64_t double_bits(double x) {
#if VOXAUG_DEVICE_PASS
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
VOXAUG_HD VOXAUG_FORCEINLINE double bits_double(uint64_t u) {
#if VOXAUG_DEVICE_PASS
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// c ? a : b as a bit blend: GCC (with its default -ftrapping-math) will not if-convert a
// float select whose arms it cannot speculate, which keeps whole loops scalar; the blend
// always vectorises and gives the same bits.
VOXAUG_HD VOXAUG_FORCEINLINE float fsel(bool c, float a, float b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return bits_float((float_bits(a) & m) | (float_bits(b) & ~m));
}
VOXAUG_HD VOXAUG_FORCEINLINE double fsel(bool c, double a, double b) {
  const uint64_t m = uint64_t(0) - static_cast<uint64_t>(c);
  return bits_double((double_bits(a) & m) | (double_bits(b) & ~m));
}

// exp(x), float32: x = k ln2 + r with |r| <= ln2/2 (k ln2 split so that k * ln2_hi is exact),
// Taylor series of exp(r) to r^8 (truncation < 3e-10 relative), then * 2^k in two exact
// power-of-two steps (so results in the subnormal range round once and k = 128 overflows to
// inf cleanly). Written with the rounding helpers only: the same bits on the host and the
// device. Max error ~1 ulp (tests/cpp/test_intensity.cpp checks <= 2 ulp vs std::exp).
VOXAUG_HD VOXAUG_FORCEINLINE float fexp(float x) {
  const bool nan = x != x;
  const bool over = x > 88.72283935546875f;            // exp overflows float32 above ln(FLT_MAX)
  const bool under = x < -103.97208404541015625f;      // below half the smallest subnormal
  const float xc = fsel(nan | over | under, 0.0f, x);  // keep the int conversion defined
  // Round to nearest with the 1.5 * 2^23 shifter (exact for |t| < 2^22), no branches: the
  // host loops vectorise.
  const float fk = fsub(fadd(fmul(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
  const int k = static_cast<int>(fk);
  const float r =
      fsub(fsub(xc, fmul(fk, 0.693145751953125f)), fmul(fk, 1.42860682030941723212e-6f));
  float p = 1.0f / 40320.0f;
  p = fadd(fmul(p, r), 1.0f / 5040.0f);
  p = fadd(fmul(p, r), 1.0f / 720.0f);
  p = fadd(fmul(p, r), 1.0f / 120.0f);
  p = fadd(fmul(p, r), 1.0f / 24.0f);
  p = fadd(fmul(p, r), 1.0f / 6.0f);
  p = fadd(fmul(p, r), 0.5f);
  p = fadd(fmul(p, r), 1.0f);
  p = fadd(fmul(p, r), 1.0f);
  const int k1 = k / 2, k2 = k - k1;  // |k1|, |k2| <= 75: both 2^k are normal floats
  const float s1 = bits_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = bits_float(static_cast<uint32_t>(k2 + 127) << 23);
  float y = fmul(fmul(p, s1), s2);
  y = fsel(under, 0.0f, y);
  y = fsel(over, __builtin_inff(), y);
  return fsel(nan, x, y);
}

// exp(x), float64: the same scheme, ln2 split fdlibm-style, series to r^13 (truncation
// < 5e-18 relative).
VOXAUG_HD VOXAUG_FORCEINLINE double fexp(double x) {
  const bool nan = x != x;
  const bool over = x > 709.782712893383973096;
  const bool under = x < -745.1332191019412;
  const double xc = fsel(nan | over | under, 0.0, x);
  const double fk =
      fsub(fadd(fmul(xc, 1.44269504088896338700e+00), 6755399441055744.0), 6755399441055744.0);
  const int k = static_cast<int>(fk);
  const double r =
      fsub(fsub(xc, fmul(fk, 6.93147180369123816490e-01)), fmul(fk, 1.90821492927058770002e-10));
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = fadd(fmul(p, r), 1.0 / 479001600.0);
  p = fadd(fmul(p, r), 1.0 / 39916800.0);
  p = fadd(fmul(p, r), 1.0 / 3628800.0);
  p = fadd(fmul(p, r), 1.0 / 362880.0);
  p = fadd(fmul(p, r), 1.0 / 40320.0);
  p = fadd(fmul(p, r), 1.0 / 5040.0);
  p = fadd(fmul(p, r), 1.0 / 720.0);
  p = fadd(fmul(p, r), 1.0 / 120.0);
  p = fadd(fmul(p, r), 1.0 / 24.0);
  p = fadd(fmul(p, r), 1.0 / 6.0);
  p = fadd(fmul(p, r), 0.5);
  p = fadd(fmul(p, r), 1.0);
  p = fadd(fmul(p, r), 1.0);
  const int k1 = k / 2, k2 = k - k1;  // |k1|, |k2| <= 538: both 2^k are normal doubles
  const double s1 = bits_double(static_cast<uint64_t>(k1 + 1023) << 52);
  const double s2 = bits_double(static_cast<uint64_t>(k2 + 1023) << 52);
  double y = fmul(fmul(p, s1), s2);
  y = fsel(under, 0.0, y);
  y = fsel(over, __builtin_inf(), y);
  return fsel(nan, x, y);
}

// Natural log of any float32: log_unit's reduction and series, plus subnormals (scaled by
// 2^24), 0 -> -inf, negative -> NaN, inf -> inf, NaN -> NaN.
VOXAUG_HD VOXAUG_FORCEINLINE float flog(float x) {
  const bool sub = (x > 0.0f) & (x < 1.17549435e-38f);
  const float xs = fsel(sub, fmul(x, 16777216.0f), x);
  uint32_t u = float_bits(xs);
  int e = static_cast<int>((u >> 23) & 0xffu) - 127 - (sub ? 24 : 0);
  u = (u & 0x007fffffu) | 0x3f800000u;
  float m = bits_float(u);
  const bool big = m > 1.41421356f;
  m = fsel(big, fmul(m, 0.5f), m);
  e += big ? 1 : 0;
  const float f = fsub(m, 1.0f);
  const float s = fdiv(f, fadd(m, 1.0f));
  const float s2 = fmul(s, s);
  float p = 2.0f / 11.0f;
  p = fadd(fmul(p, s2), 2.0f / 9.0f);
  p = fadd(fmul(p, s2), 2.0f / 7.0f);
  p = fadd(fmul(p, s2), 2.0f / 5.0f);
  p = fadd(fmul(p, s2), 2.0f / 3.0f);
  const float logm = fadd(fmul(fmul(p, s2), s), fmul(2.0f, s));
  const float fe = static_cast<float>(e);
  float y = fadd(fmul(fe, 0.693145751953125f), fadd(fmul(fe, 1.42860682030941723212e-6f), logm));
  y = fsel(x == __builtin_inff(), x, y);
  y = fsel(x == 0.0f, -__builtin_inff(), y);
  y = fsel(x < 0.0f, __builtin_nanf(""), y);
  return fsel(x != x, x, y);
}

// Natural log of any float64: the same reduction, series to s^21 (|s| < 0.1716, truncation
// < 1e-17 relative).
VOXAUG_HD VOXAUG_FORCEINLINE double flog(double x) {
  const bool sub = (x > 0.0) & (x < 2.2250738585072014e-308);
  const double xs = fsel(sub, fmul(x, 18014398509481984.0), x);  // 2^54
  uint64_t u = double_bits(xs);
  int e = static_cast<int>((u >> 52) & 0x7ffu) - 1023 - (sub ? 54 : 0);
  u = (u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m = bits_double(u);
  const bool big = m > 1.4142135623730951;
  m = fsel(big, fmul(m, 0.5), m);
  e += big ? 1 : 0;
  const double f = fsub(m, 1.0);
  const double s = fdiv(f, fadd(m, 1.0));
  const double s2 = fmul(s, s);
  double p = 2.0 / 21.0;
  p = fadd(fmul(p, s2), 2.0 / 19.0);
  p = fadd(fmul(p, s2), 2.0 / 17.0);
  p = fadd(fmul(p, s2), 2.0 / 15.0);
  p = fadd(fmul(p, s2), 2.0 / 13.0);
  p = fadd(fmul(p, s2), 2.0 / 11.0);
  p = fadd(fmul(p, s2), 2.0 / 9.0);
  p = fadd(fmul(p, s2), 2.0 / 7.0);
  p = fadd(fmul(p, s2), 2.0 / 5.0);
  p = fadd(fmul(p, s2), 2.0 / 3.0);
  const double logm = fadd(fmul(fmul(p, s2), s), fmul(2.0, s));
  const double fe = static_cast<double>(e);
  double y =
      fadd(fmul(fe, 6.93147180369123816490e-01), fadd(fmul(fe, 1.90821492927058770002e-10), logm));
  y = fsel(x == __builtin_inf(), x, y);
  y = fsel(x == 0.0, -__builtin_inf(), y);
  y = fsel(x < 0.0, __builtin_nan(""), y);
  return fsel(x != x, x, y);
}

// b^y for b >= 0 as exp(y log b), with pow's special cases at b = 0 (0 for y > 0, 1 for
// y == 0, inf for y < 0) and b = 1 (exactly 1). Negative b gives NaN (as torch.pow with a
// fractional exponent). float64; float32 has its own below.
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE T fpow_nonneg(T b, T y) {
  const T v = fexp(fmul(y, flog(b)));
  const T at0 = fsel(y > T(0), T(0), fsel(y == T(0), T(1), T(__builtin_inf())));
  return fsel(b == T(0), at0, fsel(b == T(1), T(1), v));
}

// b^y for float32 b >= 0 (the contrast and gamma transforms' power), as 2^(y log2 b) with the
// exponent split so that its large part is exact: b = 2^e m, m in (sqrt(1/2), sqrt(2)];
// l = log2(m) by a polynomial in f = m - 1 (least-squares fit for relative error, 2.6e-8
// on that interval); t = y e + y l (one rounding, ffma); k = round(t) and the remainder
// r = (y e - k) + y l, where y e - k is again one ffma, so r carries no error from the size of
// y e; 2^r by its Taylor series to r^7 (|r| <= 1/2, truncation 5e-9); * 2^k in two exact
// power-of-two steps (subnormal results round once). Within 5 ulp of the exact power for any
// b and |y| <= 5 (tests/cpp/test_intensity.cpp), where exp(y log b) in float32 lost up to
// ~150 ulp for tiny b; beyond, y log2(m) and the log polynomial's error grow with |y| (about
// 15 ulp at |y| = 20, 60 at 100). No division; fewer operations than fexp(fmul(y, flog(b))).
// Special cases: b = 0 -> 0 / 1 / inf for y > / == / < 0, b = inf -> inf / 1 / 0, b = 1 -> 1
// (any y), negative b, NaN b or NaN y -> NaN. y = +-inf is not supported (NaN for b in
// (0, 1) u (1, inf)): the ops refuse non-finite exponents.
// The power's arithmetic, shared by fpow_nonneg(float) (Full: every case) and the host tiles'
// common case (Full = false: b = 0 and b positive, normal, finite with y log2 b in [-125, 127],
// scaled by 2^k in one step; `special` gets 1 where another case applies and the lane must be
// recomputed with Full). The operations on a common-case lane are the same in both up to the
// scaling, which is exact in both, so the bits are too.
template <bool Full>
VOXAUG_HD VOXAUG_FORCEINLINE float pow_nonneg_f32(float b, float y, int32_t& special) {
  const bool sub = Full && b < 1.17549435e-38f;  // subnormal (0, negative b: replaced at the end)
  const float bs = Full ? fsel(sub, fmul(b, 16777216.0f), b) : b;  // * 2^24: a normal float
  // b = 2^e m with m in (sqrt(1/2), sqrt(2)]: the bits offset by those of the float after
  // sqrt(1/2) (0x3f3504f4), so that the arithmetic shift gives e and the low bits plus the offset
  // give m (m = 1.M for a mantissa M <= that of sqrt(2)'s float, else 1.M / 2 with e + 1).
  const uint32_t ix = float_bits(bs) - 0x3f3504f4u;
  const int e = (static_cast<int>(ix) >> 23) - (sub ? 24 : 0);
  const float m = bits_float((ix & 0x007fffffu) + 0x3f3504f4u);
  const float f = fsub(m, 1.0f);
  float p = 0.12583549320697784f;
  p = ffma(p, f, -0.20726914703845978f);
  p = ffma(p, f, 0.21571588516235352f);
  p = ffma(p, f, -0.23894493281841278f);
  p = ffma(p, f, 0.28791624307632446f);
  p = ffma(p, f, -0.3607036769390106f);
  p = ffma(p, f, 0.48091062903404236f);
  p = ffma(p, f, -0.7213473320007324f);
  p = ffma(p, f, 1.4426950216293335f);  // log2(e)
  const float fe = static_cast<float>(e);
  const float a = fmul(y, fmul(p, f));  // y log2(m)
  const float t = ffma(y, fe, a);
  // Past 129 / below -151 the result is inf / 0 whatever r is; inside, the final scaling
  // overflows or underflows with one rounding (t is rounded: a cut at 128 would send finite
  // powers just below FLT_MAX to inf). NaN t (a NaN y) takes the NaN path, no undefined cast.
  // The common case (!Full) keeps t in [-125, 127]: one exact scaling by 2^k, the same value as
  // the two steps (both products are normal floats there).
  const bool over = t >= 129.0f, under = t < -151.0f, bad = t != t;
  const bool in_common = (t >= -125.0f) & (t <= 127.0f);
  // Round to nearest with the 1.5 * 2^23 shifter (|t| < 2^22 here), as fexp.
  const float tt = Full ? fsel(over | under | bad, 0.0f, t) : fsel(in_common, t, 0.0f);
  const float fk = fsub(fadd(tt, 12582912.0f), 12582912.0f);
  const int k = static_cast<int>(fk);
  const float r = fadd(ffma(y, fe, -fk), a);
  float q = 1.5252733804059841e-05f;  // ln2^7 / 7!
  q = ffma(q, r, 1.5403530393381606e-04f);
  q = ffma(q, r, 1.3333558146428441e-03f);
  q = ffma(q, r, 9.6181291076284772e-03f);
  q = ffma(q, r, 5.5504108664821580e-02f);
  q = ffma(q, r, 2.4022650695910071e-01f);
  q = ffma(q, r, 6.9314718055994531e-01f);
  q = ffma(q, r, 1.0f);
  const float at0 = fsel(y > 0.0f, 0.0f, fsel(y == 0.0f, 1.0f, __builtin_inff()));
  if (!Full) {
    const float v = fmul(q, bits_float(static_cast<uint32_t>(k + 127) << 23));
    const bool zero = b == 0.0f;
    const bool common = (b >= 1.17549435e-38f) & (b < __builtin_inff()) & in_common;
    special |= static_cast<int32_t>(!(zero | common));
    return fsel(zero, at0, v);
  }
  const int k1 = k / 2, k2 = k - k1;  // k in [-151, 129]: both 2^k are normal floats
  const float s1 = bits_float(static_cast<uint32_t>(k1 + 127) << 23);
  const float s2 = bits_float(static_cast<uint32_t>(k2 + 127) << 23);
  float v = fmul(fmul(q, s1), s2);
  v = fsel(under, 0.0f, v);
  v = fsel(over, __builtin_inff(), v);
  const float atinf = fsel(y > 0.0f, __builtin_inff(), fsel(y == 0.0f, 1.0f, 0.0f));
  v = fsel(b == 0.0f, at0, v);
  v = fsel(b == __builtin_inff(), atinf, v);
  v = fsel((b < 0.0f) | (b != b) | bad, __builtin_nanf(""), v);
  return fsel(b == 1.0f, 1.0f, v);  // pow(1, y) = 1 for every y, NaN included (C, torch)
}

VOXAUG_HD VOXAUG_FORCEINLINE float fpow_nonneg(float b, float y) {
  int32_t unused = 0;
  return pow_nonneg_f32<true>(b, y, unused);
}
}  // namespace voxaug::detail
