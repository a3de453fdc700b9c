// voxaug: the phantom's math (include/voxaug/phantom.h), shared by the CPU and CUDA backends:
// the parameter rows from Philox draws and the per-voxel value and label from a row.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/philox.h"
#include "voxaug/phantom.h"

namespace voxaug::detail {

// Offsets in a parameter row (phantom.h documents them).
namespace phantom_layout {
constexpr int kNoiseStd = 0;
constexpr int kBias = 1;  // 9 coefficients
constexpr int kTexture = 10;
constexpr int kTerms = 3;  // texture and modulation terms
constexpr int kTerm = 5;   // k (3), phase, amplitude
static_assert(kTexture + kTerms * kTerm == kPhantomHeader, "header layout");
// Within an object.
constexpr int kCentre = 0;
constexpr int kMatrix = 3;
constexpr int kModulation = 12;
constexpr int kRho2In = 27;
constexpr int kRho2Out = 28;
constexpr int kBoxLo = 29;
constexpr int kBoxHi = 32;
constexpr int kMean = 35;
static_assert(kMean + 1 == kPhantomObject, "object layout");
// Draw indices: the header's draws are 0 .. 24, object o's are kDrawObject0 + kDrawObject * o + j.
constexpr int kDrawObject0 = 32;
constexpr int kDrawObject = 32;
constexpr int kDrawRadius = 3, kDrawRotation = 6, kDrawModulation = 9, kDrawMean = 24;
}  // namespace phantom_layout

VOXAUG_HD VOXAUG_FORCEINLINE float ffloor(float x) {
#if VOXAUG_DEVICE_PASS
  return floorf(x);
#else
  return __builtin_floorf(x);
#endif
}

// sin(2 pi t) for any finite t: the fraction r = t - floor(t) is exact, then sincospi_0_2 on
// 2 r (in [0, 2], where 2 is handled as 0 by its quadrant reduction).
VOXAUG_HD VOXAUG_FORCEINLINE float sin2pi(float t) {
  const float r = fsub(t, ffloor(t));
  float s, c;
  sincospi_0_2(fmul(2.0f, r), &s, &c);
  return s;
}

// The k-th parameter draw of (seed, sample): uniform01 of word k & 3 of Philox block k >> 2 on
// the per-sample stream.
VOXAUG_HD VOXAUG_FORCEINLINE float phantom_draw(uint64_t seed, uint32_t sample, int k) {
  const U32x4 r = philox_block(seed, static_cast<uint64_t>(k >> 2), sample, PhiloxStream::Sample);
  const int w = k & 3;
  return uniform01(w == 0 ? r.x : (w == 1 ? r.y : (w == 2 ? r.z : r.w)));
}

// lo + (hi - lo) u
VOXAUG_HD VOXAUG_FORCEINLINE float phantom_lerp(float lo, float hi, float u) {
  return fadd(lo, fmul(fsub(hi, lo), u));
}

// A unit direction from two uniforms: (s cos 2 pi v, s sin 2 pi v, z), z = 2u - 1.
VOXAUG_HD VOXAUG_FORCEINLINE void phantom_direction(float u, float v, float out[3]) {
  const float z = fsub(fmul(2.0f, u), 1.0f);
  const float t = fsub(1.0f, fmul(z, z));
  const float s = fsqrt(t > 0.0f ? t : 0.0f);
  float sn, cs;
  sincospi_0_2(fmul(2.0f, v), &sn, &cs);
  out[0] = fmul(s, cs);
  out[1] = fmul(s, sn);
  out[2] = z;
}

// One sinusoid term (k (3), phase, amplitude) from its five draws starting at index k0:
// direction (k0, k0 + 1), |k| = lerp(f_lo, f_hi, u(k0 + 2)), phase u(k0 + 3), amplitude
// lerp(a_lo, a_hi, u(k0 + 4)).
VOXAUG_HD VOXAUG_FORCEINLINE void phantom_term(uint64_t seed, uint32_t sample, int k0, float f_lo,
                                               float f_hi, float a_lo, float a_hi, float* out) {
  float dir[3];
  phantom_direction(phantom_draw(seed, sample, k0), phantom_draw(seed, sample, k0 + 1), dir);
  const float f = phantom_lerp(f_lo, f_hi, phantom_draw(seed, sample, k0 + 2));
  out[0] = fmul(f, dir[0]);
  out[1] = fmul(f, dir[1]);
  out[2] = fmul(f, dir[2]);
  out[3] = phantom_draw(seed, sample, k0 + 3);
  out[4] = phantom_lerp(a_lo, a_hi, phantom_draw(seed, sample, k0 + 4));
}

// sum_t a_t sin(2 pi (k_t . p + phase_t)) over the three terms at `terms`.
VOXAUG_HD VOXAUG_FORCEINLINE float phantom_waves(const float* terms, float p0, float p1, float p2) {
  float sum = 0.0f;
  for (int t = 0; t < phantom_layout::kTerms; ++t) {
    const float* k = terms + phantom_layout::kTerm * t;
    const float arg = fadd(fadd(fadd(fmul(k[0], p0), fmul(k[1], p1)), fmul(k[2], p2)), k[3]);
    sum = fadd(sum, fmul(k[4], sin2pi(arg)));
  }
  return sum;
}

// The header of a row: noise std, bias coefficients, texture terms.
VOXAUG_HD inline void phantom_header(uint64_t seed, uint32_t sample, float* row) {
  using namespace phantom_layout;
  row[kNoiseStd] = phantom_lerp(15.0f, 25.0f, phantom_draw(seed, sample, 0));
  for (int i = 0; i < 9; ++i) {
    const float range = i < 3 ? 0.05f : (i < 6 ? 0.03f : 0.02f);
    const float u = phantom_draw(seed, sample, 1 + i);
    row[kBias + i] = fmul(range, fsub(fmul(2.0f, u), 1.0f));
  }
  for (int t = 0; t < kTerms; ++t)
    phantom_term(seed, sample, kTexture + kTerm * t, 1.0f, 4.0f, 3.0f, 5.0f,
                 row + kTexture + kTerm * t);
}

// The body's centre and semi-axes (object 0's first six draws).
VOXAUG_HD VOXAUG_FORCEINLINE void phantom_body(uint64_t seed, uint32_t sample, float c[3],
                                               float r[3]) {
  const int k0 = phantom_layout::kDrawObject0;
  for (int a = 0; a < 3; ++a) {
    c[a] = phantom_lerp(-0.05f, 0.05f, phantom_draw(seed, sample, k0 + a));
    r[a] = phantom_lerp(0.70f, 0.90f, phantom_draw(seed, sample, k0 + phantom_layout::kDrawRadius + a));
  }
}

// The mean HU of organ class c (1 .. K-1) before the per-subject jitter, and the jitter's range.
VOXAUG_HD VOXAUG_FORCEINLINE void phantom_organ_mean(int c, int num_classes, float* mean,
                                                     float* jitter) {
  const int m = num_classes - 2;
  const int rank = (c & 1) ? (c - 1) / 2 : m - (c - 2) / 2;
  const float mm = static_cast<float>(m > 1 ? m : 1);
  const float t = fdiv(static_cast<float>(rank), mm);
  float h = fadd(-100.0f, fmul(270.0f, t));
  h = h > 0.0f ? fadd(h, 80.0f) : h;
  *mean = h;
  const float j = fdiv(67.5f, mm);
  *jitter = j < 10.0f ? j : 10.0f;
}

// Object o (0: body, 1 .. K-1: organ class o) of a row, written at `obj`.
VOXAUG_HD inline void phantom_object(uint64_t seed, uint32_t sample, int o, int num_classes,
                                     float* obj) {
  using namespace phantom_layout;
  const int k0 = kDrawObject0 + kDrawObject * o;
  float c[3], r[3];
  float rot[9] = {1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 1.0f};  // R, row-major
  if (o == 0) {
    phantom_body(seed, sample, c, r);
  } else {
    float cb[3], rb[3];
    phantom_body(seed, sample, cb, rb);
    const int m = num_classes - 2;
    const float s = fsub(0.25f, fmul(0.17f, fdiv(static_cast<float>(o - 1),
                                                 static_cast<float>(m > 1 ? m : 1))));
    const float r0 = fmul(2.0f, s);
    for (int a = 0; a < 3; ++a) {
      const float u = phantom_draw(seed, sample, k0 + a);
      c[a] = fadd(cb[a], fmul(rb[a], phantom_lerp(-0.45f, 0.45f, u)));
      r[a] = fmul(r0, phantom_lerp(0.75f, 1.25f, phantom_draw(seed, sample, k0 + kDrawRadius + a)));
    }
    // Shoemake's uniform random rotation.
    const float u1 = phantom_draw(seed, sample, k0 + kDrawRotation);
    const float u2 = phantom_draw(seed, sample, k0 + kDrawRotation + 1);
    const float u3 = phantom_draw(seed, sample, k0 + kDrawRotation + 2);
    const float a = fsqrt(fsub(1.0f, u1)), b = fsqrt(u1);
    float s2, c2, s3, c3;
    sincospi_0_2(fmul(2.0f, u2), &s2, &c2);
    sincospi_0_2(fmul(2.0f, u3), &s3, &c3);
    const float qx = fmul(a, s2), qy = fmul(a, c2), qz = fmul(b, s3), qw = fmul(b, c3);
    const float xx = fmul(qx, qx), yy = fmul(qy, qy), zz = fmul(qz, qz);
    const float xy = fmul(qx, qy), xz = fmul(qx, qz), yz = fmul(qy, qz);
    const float wx = fmul(qw, qx), wy = fmul(qw, qy), wz = fmul(qw, qz);
    rot[0] = fsub(1.0f, fmul(2.0f, fadd(yy, zz)));
    rot[1] = fmul(2.0f, fsub(xy, wz));
    rot[2] = fmul(2.0f, fadd(xz, wy));
    rot[3] = fmul(2.0f, fadd(xy, wz));
    rot[4] = fsub(1.0f, fmul(2.0f, fadd(xx, zz)));
    rot[5] = fmul(2.0f, fsub(yz, wx));
    rot[6] = fmul(2.0f, fsub(xz, wy));
    rot[7] = fmul(2.0f, fadd(yz, wx));
    rot[8] = fsub(1.0f, fmul(2.0f, fadd(xx, yy)));
  }
  for (int a = 0; a < 3; ++a) obj[kCentre + a] = c[a];
  // A = diag(1 / r) R^T: A_ij = R_ji / r_i.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) obj[kMatrix + 3 * i + j] = fdiv(rot[3 * j + i], r[i]);
  const bool body = o == 0;
  float amp = 0.0f;
  for (int t = 0; t < kTerms; ++t) {
    float* term = obj + kModulation + kTerm * t;
    phantom_term(seed, sample, k0 + kDrawModulation + kTerm * t, 0.5f, body ? 1.0f : 1.5f,
                 body ? 0.01f : 0.03f, body ? 0.03f : 0.08f, term);
    amp = fadd(amp, term[4]);
  }
  const float lo = fsub(1.0f, amp), hi = fadd(1.0f, amp);
  obj[kRho2In] = fmul(fmul(lo, lo), 0.99f);
  obj[kRho2Out] = fmul(fmul(hi, hi), 1.01f);
  // Half extent along axis i of {x : |q| <= rho}: rho sqrt(sum_j (R_ij r_j)^2), widened.
  const float rho = fsqrt(obj[kRho2Out]);
  for (int i = 0; i < 3; ++i) {
    float e2 = 0.0f;
    for (int j = 0; j < 3; ++j) {
      const float v = fmul(rot[3 * i + j], r[j]);
      e2 = fadd(e2, fmul(v, v));
    }
    const float ext = fadd(fmul(fmul(rho, fsqrt(e2)), 1.01f), 1e-3f);
    obj[kBoxLo + i] = fsub(c[i], ext);
    obj[kBoxHi + i] = fadd(c[i], ext);
  }
  const float u = phantom_draw(seed, sample, k0 + kDrawMean);
  if (body) {
    obj[kMean] = fadd(40.0f, phantom_lerp(-5.0f, 5.0f, u));
  } else {
    float mean, jitter;
    phantom_organ_mean(o, num_classes, &mean, &jitter);
    obj[kMean] = fadd(mean, fmul(jitter, fsub(fmul(2.0f, u), 1.0f)));
  }
}

// Item i of a row: 0 the header, 1 + o object o.
VOXAUG_HD VOXAUG_FORCEINLINE void phantom_row_item(uint64_t seed, uint32_t sample, int num_classes,
                                                   int64_t i, float* row) {
  if (i == 0)
    phantom_header(seed, sample, row);
  else
    phantom_object(seed, sample, static_cast<int>(i - 1), num_classes,
                   row + kPhantomHeader + kPhantomObject * (i - 1));
}

// The voxel test and value are split into a part that depends on (x0, x1) only -- computed once
// per row by the CPU twin, per voxel by the CUDA functor -- and the rest; the operations and
// their order are the same either way, so are the bits.

// Object test, the (x0, x1) part: inside the box's first two axes, and the partial sums
// A_i0 (x0 - c0) + A_i1 (x1 - c1).
struct PhantomPrefix {
  bool in01;
  float q[3];
};

VOXAUG_HD VOXAUG_FORCEINLINE PhantomPrefix phantom_prefix(const float* obj, float x0, float x1) {
  using namespace phantom_layout;
  PhantomPrefix p;
  p.in01 = !(x0 < obj[kBoxLo] || x0 > obj[kBoxHi] || x1 < obj[kBoxLo + 1] || x1 > obj[kBoxHi + 1]);
  const float d0 = fsub(x0, obj[kCentre]), d1 = fsub(x1, obj[kCentre + 1]);
  const float* a = obj + kMatrix;
  for (int i = 0; i < 3; ++i) p.q[i] = fadd(fmul(a[3 * i], d0), fmul(a[3 * i + 1], d1));
  return p;
}

// Whether the object at `obj` contains (x0, x1, x2), given its prefix. The box and the two
// radii are exact shortcuts of the full test (box and outer radius widened by 1 %, inner radius
// narrowed).
VOXAUG_HD VOXAUG_FORCEINLINE bool phantom_inside(const float* obj, const PhantomPrefix& p,
                                                 float x2) {
  using namespace phantom_layout;
  if (!p.in01 || x2 < obj[kBoxLo + 2] || x2 > obj[kBoxHi + 2]) return false;
  const float d2 = fsub(x2, obj[kCentre + 2]);
  const float* a = obj + kMatrix;
  const float q0 = fadd(p.q[0], fmul(a[2], d2));
  const float q1 = fadd(p.q[1], fmul(a[5], d2));
  const float q2 = fadd(p.q[2], fmul(a[8], d2));
  const float r2 = fadd(fadd(fmul(q0, q0), fmul(q1, q1)), fmul(q2, q2));
  if (r2 <= obj[kRho2In]) return true;
  if (r2 > obj[kRho2Out]) return false;
  const float s = fadd(1.0f, phantom_waves(obj + kModulation, q0, q1, q2));
  return r2 <= fmul(s, s);
}

// Intensity terms, the (x0, x1) part: each texture term's f0 x0 + f1 x1, and the bias
// polynomial's terms in x0, x1 alone (b0 x0 + b1 x1 + b3 x0^2 + b4 x1^2 + b6 x0 x1, in this
// order; phantom.h lists the coefficients).
struct PhantomRowTerms {
  float x0, x1;
  float tex[phantom_layout::kTerms];
  float bias;
};

VOXAUG_HD VOXAUG_FORCEINLINE PhantomRowTerms phantom_row_terms(const float* row, float x0,
                                                               float x1) {
  using namespace phantom_layout;
  PhantomRowTerms t;
  t.x0 = x0;
  t.x1 = x1;
  for (int i = 0; i < kTerms; ++i) {
    const float* k = row + kTexture + kTerm * i;
    t.tex[i] = fadd(fmul(k[0], x0), fmul(k[1], x1));
  }
  const float* b = row + kBias;
  float p = fmul(b[0], x0);
  p = fadd(p, fmul(b[1], x1));
  p = fadd(p, fmul(b[3], fmul(x0, x0)));
  p = fadd(p, fmul(b[4], fmul(x1, x1)));
  t.bias = fadd(p, fmul(b[6], fmul(x0, x1)));
  return t;
}

// Label and noiseless intensity (HU) at (x0, x1, x2); the caller adds sigma z. `prefix(o)` gives
// object o's PhantomPrefix at (x0, x1).
template <class Prefix>
VOXAUG_HD VOXAUG_FORCEINLINE uint8_t phantom_voxel(const float* row, int num_classes,
                                                   const PhantomRowTerms& rt, float x2,
                                                   const Prefix& prefix, float* value) {
  using namespace phantom_layout;
  const float* obj = row + kPhantomHeader;
  if (!phantom_inside(obj, prefix(0), x2)) {
    *value = -1000.0f;
    return 0;
  }
  int label = 0;
  for (int c = num_classes - 1; c >= 1; --c)
    if (phantom_inside(obj + kPhantomObject * c, prefix(c), x2)) {
      label = c;
      break;
    }
  const float mean = obj[kPhantomObject * label + kMean];
  float tex = 0.0f;
  for (int i = 0; i < kTerms; ++i) {
    const float* k = row + kTexture + kTerm * i;
    const float arg = fadd(fadd(rt.tex[i], fmul(k[2], x2)), k[3]);
    tex = fadd(tex, fmul(k[4], sin2pi(arg)));
  }
  const float* b = row + kBias;
  float p = fadd(rt.bias, fmul(b[2], x2));
  p = fadd(p, fmul(b[5], fmul(x2, x2)));
  p = fadd(p, fmul(b[7], fmul(rt.x1, x2)));
  p = fadd(p, fmul(b[8], fmul(rt.x0, x2)));
  *value = fmul(fadd(mean, tex), fexp(p));
  return static_cast<uint8_t>(label);
}

// Object prefixes computed on the spot.
struct PhantomPrefixAt {
  const float* objects;
  float x0, x1;
  VOXAUG_HD VOXAUG_FORCEINLINE PhantomPrefix operator()(int o) const {
    return phantom_prefix(objects + kPhantomObject * o, x0, x1);
  }
};

// The same at a single voxel, every prefix computed on the spot (the CUDA functor's form).
VOXAUG_HD VOXAUG_FORCEINLINE uint8_t phantom_voxel(const float* row, int num_classes, float x0,
                                                   float x1, float x2, float* value) {
  return phantom_voxel(row, num_classes, phantom_row_terms(row, x0, x1), x2,
                       PhantomPrefixAt{row + kPhantomHeader, x0, x1}, value);
}

// Normalised coordinate of voxel index i on an axis with scale 2 / S: (i + 0.5) scale - 1.
VOXAUG_HD VOXAUG_FORCEINLINE float phantom_coord(int64_t i, float scale) {
  return fsub(fmul(fadd(static_cast<float>(i), 0.5f), scale), 1.0f);
}

}  // namespace voxaug::detail
