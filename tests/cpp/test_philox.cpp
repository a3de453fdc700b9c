// Philox4x32-10: known answer, parity with cuRAND's host-API generator, and the
// uniform / normal conversions against float64 math on the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../../kernels/common/philox_cpu.h"
#include "voxaug/detail/philox.h"

#if VOXAUG_WITH_CUDA
#include <curand.h>
#endif

using namespace voxaug::detail;

TEST(Philox, KnownAnswerZeroCounterZeroKey) {
  // Random123 known-answer vector (REFERENCES.md section 3).
  const U32x4 r = philox4x32_10(U32x4{0, 0, 0, 0}, 0, 0);
  EXPECT_EQ(r.x, 0x6627e8d5u);
  EXPECT_EQ(r.y, 0xe169c58du);
  EXPECT_EQ(r.z, 0xbc57ac4cu);
  EXPECT_EQ(r.w, 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnesAndPi) {
  // Random123 kat_vectors: philox4x32 10 rounds.
  U32x4 r = philox4x32_10(U32x4{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu,
                          0xffffffffu);
  EXPECT_EQ(r.x, 0x408f276du);
  EXPECT_EQ(r.y, 0x41c83b0eu);
  EXPECT_EQ(r.z, 0xa20bc7c6u);
  EXPECT_EQ(r.w, 0x6d5451fdu);
  r = philox4x32_10(U32x4{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u,
                    0x299f31d0u);
  EXPECT_EQ(r.x, 0xd16cfe09u);
  EXPECT_EQ(r.y, 0x94fdccebu);
  EXPECT_EQ(r.z, 0x5001e420u);
  EXPECT_EQ(r.w, 0x24126ea1u);
}

#if VOXAUG_WITH_CUDA
// cuRAND's host generator (default ordering) emits block b of its raw stream from counter
// (b / 65536, 0, b % 65536, 0) with key = seed: 65536 interleaved subsequences. In voxaug's
// layout that is philox_block(seed, block = b / 65536, sample = b % 65536, Element stream).
TEST(Philox, MatchesCurandHostGeneratorRawStream) {
  for (const unsigned long long seed : {0ull, 1234ull, 0x0123456789abcdefull}) {
    curandGenerator_t gen;
    ASSERT_EQ(curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10),
              CURAND_STATUS_SUCCESS);
    ASSERT_EQ(curandSetPseudoRandomGeneratorSeed(gen, seed), CURAND_STATUS_SUCCESS);
    const size_t blocks = 3 * 65536 + 17;
    std::vector<unsigned> raw(blocks * 4);
    ASSERT_EQ(curandGenerate(gen, raw.data(), raw.size()), CURAND_STATUS_SUCCESS);
    curandDestroyGenerator(gen);
    size_t mismatches = 0;
    for (size_t b = 0; b < blocks; ++b) {
      const U32x4 r =
          philox_block(seed, b / 65536, static_cast<uint32_t>(b % 65536), PhiloxStream::Element);
      mismatches += (r.x != raw[4 * b]) + (r.y != raw[4 * b + 1]) + (r.z != raw[4 * b + 2]) +
                    (r.w != raw[4 * b + 3]);
    }
    EXPECT_EQ(mismatches, 0u) << "seed " << seed;
  }
}
#else
TEST(Philox, MatchesCurandHostGeneratorRawStream) {
  GTEST_SKIP() << "built without CUDA: cuRAND host generator unavailable";
}
#endif

TEST(Philox, UniformConversionsAreExactAndInRange) {
  for (uint32_t r : {0u, 1u, 255u, 256u, 0x80000000u, 0xfffffeffu, 0xffffff00u, 0xffffffffu}) {
    const double expect = static_cast<double>(r >> 8) / 16777216.0;
    EXPECT_EQ(static_cast<double>(uniform01(r)), expect);
    EXPECT_EQ(static_cast<double>(uniform01_open0(r)), expect + 1.0 / 16777216.0);
    EXPECT_GE(uniform01(r), 0.0f);
    EXPECT_LT(uniform01(r), 1.0f);
    EXPECT_GT(uniform01_open0(r), 0.0f);
    EXPECT_LE(uniform01_open0(r), 1.0f);
  }
}

TEST(Philox, LogAndSinCosMatchFloat64) {
  // Every 97th 24-bit uniform: our float log/sincos vs libm in double.
  double worst_log = 0, worst_trig = 0;
  for (uint32_t k = 1; k <= (1u << 24); k += 97) {
    const float u = static_cast<float>(k) / 16777216.0f;
    const double ref = std::log(static_cast<double>(u));
    const double got = log_unit(u);
    worst_log = std::max(worst_log, std::fabs(got - ref) / std::max(std::fabs(ref), 1e-30));
    if (ref == 0.0) {
      EXPECT_EQ(got, 0.0);
    }
    float s, c;
    const float t = 2.0f * (static_cast<float>(k - 1) / 16777216.0f);
    sincospi_0_2(t, &s, &c);
    const double a = M_PI * static_cast<double>(t);
    worst_trig = std::max({worst_trig, std::fabs(s - std::sin(a)), std::fabs(c - std::cos(a))});
  }
  EXPECT_LT(worst_log, 4e-7);   // a few float ulps relative
  EXPECT_LT(worst_trig, 3e-7);  // absolute, |value| <= 1
}

TEST(Philox, NormalsMatchFloat64BoxMullerOnSameBits) {
  double worst = 0;
  for (uint64_t block = 0; block < 20000; ++block) {
    float z[4];
    normal4(42, block, 3, z);
    const U32x4 r = philox_block(42, block, 3, PhiloxStream::Element);
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
    for (int p = 0; p < 2; ++p) {
      const double u1 = (static_cast<double>(w[2 * p] >> 8) + 1.0) / 16777216.0;
      const double u2 = static_cast<double>(w[2 * p + 1] >> 8) / 16777216.0;
      const double rad = std::sqrt(-2.0 * std::log(u1));
      worst = std::max(worst, std::fabs(z[2 * p] - rad * std::cos(2 * M_PI * u2)));
      worst = std::max(worst, std::fabs(z[2 * p + 1] - rad * std::sin(2 * M_PI * u2)));
    }
  }
  EXPECT_LT(worst, 5e-6);  // |z| <= 5.8
}

TEST(Philox, NormalMomentsAndTails) {
  // 4M draws: mean, variance, kurtosis and tail mass of a standard normal.
  const int blocks = 1 << 20;
  double s1 = 0, s2 = 0, s4 = 0;
  int64_t beyond2 = 0;
  for (int b = 0; b < blocks; ++b) {
    float z[4];
    normal4(7, b, 0, z);
    for (float v : z) {
      s1 += v;
      s2 += double(v) * v;
      s4 += double(v) * v * v * v;
      beyond2 += std::fabs(v) > 2.0f;
    }
  }
  const double n = 4.0 * blocks;
  EXPECT_NEAR(s1 / n, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(s2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(s4 / n, 3.0, 5 * std::sqrt(96.0 / n));
  const double p2 = 0.04550026389635842;  // P(|Z| > 2)
  EXPECT_NEAR(beyond2 / n, p2, 5 * std::sqrt(p2 * (1 - p2) / n));
}

// The host's block loops (kernels/common/philox_cpu.h): every word equals philox4x32_10 of the
// block's counter, for counts that are and are not multiples of the vector width, and first
// blocks whose low counter word wraps inside a vector (the carry into the high word).
TEST(Philox, HostBlockLoopsEqualPerBlockFunction) {
  const uint64_t seeds[] = {0, 42, 0xffffffffffffffffull, 0x0123456789abcdefull};
  const uint64_t firsts[] = {0, 1, 5, 0xfffffff8ull, 0xfffffffbull, 0x1fffffff0ull,
                             ~uint64_t(0) - 20};
  const int64_t counts[] = {0, 1, 15, 16, 17, 33, 64, 100};
  const PhiloxStream streams[] = {PhiloxStream::Element, PhiloxStream::ElementAux};
  int64_t checked = 0;
  for (uint64_t seed : seeds)
    for (uint64_t first : firsts)
      for (int64_t count : counts)
        for (PhiloxStream stream : streams)
          for (uint32_t sample : {0u, 7u, 0xffffffffu}) {
            std::vector<uint32_t> want(4 * count + 1, 0xdeadbeefu);
            for (int64_t b = 0; b < count; ++b) {
              // the reference: Random123's round function on the spelled-out counter
              const uint64_t blk = first + static_cast<uint64_t>(b);
              const U32x4 r = philox4x32_10(
                  U32x4{static_cast<uint32_t>(blk), static_cast<uint32_t>(blk >> 32), sample,
                        static_cast<uint32_t>(stream)},
                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
              want[4 * b] = r.x, want[4 * b + 1] = r.y;
              want[4 * b + 2] = r.z, want[4 * b + 3] = r.w;
            }
            std::vector<uint32_t> got(4 * count + 1, 0xdeadbeefu);  // the last word: no overrun
            philox_words(seed, first, count, sample, stream, got.data());
            ASSERT_EQ(got, want) << "seed " << seed << " first " << first << " count " << count;
            std::vector<uint32_t> scalar(4 * count + 1, 0xdeadbeefu);
            philox_words_scalar(seed, first, count, sample, stream, scalar.data());
            ASSERT_EQ(scalar, want);
#if VOXAUG_PHILOX_AVX512
            if (cpu_isa() == CpuIsa::Avx512) {
              std::vector<uint32_t> vec(4 * count + 1, 0xdeadbeefu);
              philox_words_avx512(seed, first, count, sample, stream, vec.data());
              ASSERT_EQ(vec, want);
              ++checked;
            }
#endif
          }
#if VOXAUG_PHILOX_AVX512
  if (cpu_isa() != CpuIsa::Avx512)
    GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar loop was checked";
  EXPECT_GT(checked, 0);
#endif
}
