// voxaug: arithmetic that rounds the same way on the host and on the device.
//
// nvcc contracts a*b+c into one FMA by default while the host build does not
// (-ffp-contract=off), so any expression evaluated on both sides would differ in the
// last bit. Everything in detail/ that must be bit-identical between the CPU twin and
// the CUDA path goes through these helpers: on the device they are the _rn intrinsics
// (never contracted), on the host plain IEEE operations. log and sin/cos are our own
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
VOXAUG_HD VOXAUG_FORCEINLINE float fsqrt(float a) {
#if VOXAUG_DEVICE_PASS
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
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

}  // namespace voxaug::detail
