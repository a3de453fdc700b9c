// float16 / bfloat16 conversions vs independent oracles: GCC's _Float16 (soft-float,
// round-to-nearest-even) and a float64 rounding of the bfloat16 grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "voxaug/detail/convert.h"

using namespace voxaug::detail;

namespace {
uint16_t oracle_half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float oracle_half_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
// bfloat16 keeps 8 significant bits: round |f| to a multiple of 2^(exponent - 7), ties even.
float oracle_bf16(float f) {
  if (std::isnan(f) || std::isinf(f) || f == 0.0f) return f;
  int e;
  std::frexp(static_cast<double>(f), &e);                           // f = m * 2^e, m in [0.5, 1)
  const double q = std::ldexp(1.0, std::max(e - 8, -133));          // bf16 subnormal spacing 2^-133
  const double r = std::nearbyint(static_cast<double>(f) / q) * q;  // default mode: ties even
  return static_cast<float>(r);  // exact unless it overflows to inf, which is correct
}
std::vector<float> probe_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e-8f,
                          5.960464477539063e-08f,
                          2.9802322387695312e-08f,
                          2.98023259e-08f,
                          6.103515625e-05f,
                          6.1035e-05f,
                          3.0e38f,
                          -3.0e38f,
                          INFINITY,
                          -INFINITY,
                          1.00048828125f,
                          1.00146484375f,
                          0.333333343f};
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  for (int i = 0; i < 200000; ++i)
    v.push_back(std::ldexp(static_cast<float>(rng()) / 4294967296.0f, (int)(rng() % 40) - 30));
  return v;
}
}  // namespace

TEST(Convert, HalfToFloatExhaustive) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = half_to_float(static_cast<uint16_t>(b));
    const float want = oracle_half_to_float(static_cast<uint16_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(got, want) << b;
      EXPECT_EQ(std::signbit(got), std::signbit(want)) << b;
    }
  }
}

TEST(Convert, FloatToHalfRoundsToNearestEven) {
  int64_t bad = 0;
  for (float f : probe_floats()) bad += float_to_half(f) != oracle_half(f);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(float_to_half(NAN) & 0x7c00u, 0x7c00u);
  EXPECT_NE(float_to_half(NAN) & 0x3ffu, 0u);
}

TEST(Convert, BFloat16RoundTripAndRounding) {
  int64_t bad = 0;
  for (float f : probe_floats()) {
    const float got = bf16_to_float(float_to_bf16(f));
    bad += !(got == oracle_bf16(f));
  }
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}
