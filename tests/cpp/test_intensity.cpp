// CPU path of the pointwise chain vs the float64 naive reference, plus layout, dtype,
// determinism and argument-checking behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "voxaug/detail/fmath.h"
#include "voxaug/detail/pointwise.h"

#include "intensity_cases.h"
#include "voxaug/detail/convert.h"
#include "voxaug/error.h"
#include "voxaug/intensity.h"

using namespace voxaug;
using namespace voxaug_test;

namespace {

VolumeView host_view(void* p, DType t, const Shape& s) {
  return contiguous_view(p, t, Device::CPU, s.n, s.c, s.d, s.h, s.w);
}

// Runs `chain` on float32 data of shape s; checks every element against float64.
void check_chain_float32(const NamedChain& chain, const Shape& s, uint32_t first_sample) {
  const auto src = random_values(s.numel(), 99, -200.0, 300.0);
  std::vector<float> in(src.begin(), src.end()), out(in.size(), -7.0f);
  pointwise_chain(host_view(in.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  chain.steps.data(), static_cast<int>(chain.steps.size()), nullptr, first_sample);
  double worst = 0;
  int64_t idx = 0;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t e = 0; e < s.sample(); ++e, ++idx) {
      const double ref = reference_element(
          chain.steps, in[idx], first_sample + static_cast<uint32_t>(n), e / (s.d * s.h * s.w), e);
      ASSERT_FALSE(std::isnan(out[idx])) << chain.name << " " << s.str() << " idx " << idx;
      worst = std::max(worst, std::fabs(out[idx] - ref) / std::max(1.0, std::fabs(ref)));
    }
  EXPECT_LT(worst, 2e-5) << chain.name << " " << s.str();
}

}  // namespace

TEST(IntensityCpu, EveryChainEveryShapeMatchesFloat64Reference) {
  for (const auto& chain : reference_chains())
    for (const auto& s : awkward_shapes()) check_chain_float32(chain, s, 0);
}

TEST(IntensityCpu, FirstSampleOffsetsTheRandomStreams) {
  for (const auto& chain : reference_chains()) check_chain_float32(chain, {3, 2, 3, 4, 5}, 1000);
}

TEST(IntensityCpu, OutputIsNotTriviallyConstant) {
  const Shape s{4, 1, 8, 8, 8};
  const auto src = random_values(s.numel(), 5, 0, 100);
  std::vector<float> in(src.begin(), src.end()), out(in.size());
  const auto chain = reference_chains()[15].steps;  // long_chain
  pointwise_chain(host_view(in.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  chain.data(), static_cast<int>(chain.size()));
  double lo = 1e30, hi = -1e30;
  for (float v : out) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
  EXPECT_GT(hi - lo, 0.1);
}

TEST(IntensityCpu, SplitBatchEqualsWholeBatchBitwise) {
  const Shape whole{8, 2, 5, 6, 7};
  const Shape piece{3, 2, 5, 6, 7};
  const auto src = random_values(whole.numel(), 1, -100, 100);
  std::vector<float> in(src.begin(), src.end()), out(in.size()), part(piece.numel());
  const auto chain = reference_chains()[14].steps;  // btcv_chain
  pointwise_chain(host_view(in.data(), DType::Float32, whole),
                  host_view(out.data(), DType::Float32, whole), chain.data(), 3);
  pointwise_chain(host_view(in.data() + 4 * whole.sample(), DType::Float32, piece),
                  host_view(part.data(), DType::Float32, piece), chain.data(), 3, nullptr, 4);
  EXPECT_EQ(0,
            std::memcmp(part.data(), out.data() + 4 * whole.sample(), part.size() * sizeof(float)));
}

TEST(IntensityCpu, FusedChainEqualsStepByStepBitwise) {
  const Shape s{3, 2, 7, 5, 9};
  const auto src = random_values(s.numel(), 3, -300, 300);
  std::vector<float> in(src.begin(), src.end()), fused(in.size()), stepwise(in);
  const auto chain = reference_chains()[15].steps;  // long_chain
  pointwise_chain(host_view(in.data(), DType::Float32, s),
                  host_view(fused.data(), DType::Float32, s), chain.data(),
                  static_cast<int>(chain.size()));
  for (const auto& step : chain) {
    const VolumeView v = host_view(stepwise.data(), DType::Float32, s);
    pointwise_chain(v, v, &step, 1);
  }
  EXPECT_EQ(0, std::memcmp(fused.data(), stepwise.data(), fused.size() * sizeof(float)));
}

TEST(IntensityCpu, InPlaceEqualsOutOfPlace) {
  const Shape s{2, 3, 4, 5, 6};
  const auto src = random_values(s.numel(), 4, -10, 10);
  std::vector<float> a(src.begin(), src.end()), b(a), out(a.size());
  const auto chain = reference_chains()[15].steps;
  pointwise_chain(host_view(a.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  chain.data(), static_cast<int>(chain.size()));
  const VolumeView vb = host_view(b.data(), DType::Float32, s);
  pointwise_chain(vb, vb, chain.data(), static_cast<int>(chain.size()));
  EXPECT_EQ(0, std::memcmp(out.data(), b.data(), b.size() * sizeof(float)));
}

TEST(IntensityCpu, NonContiguousInputMatchesContiguous) {
  // A (N, C, W, H, D) buffer viewed as (N, C, D, H, W) by swapping strides.
  const Shape s{2, 2, 5, 4, 3};
  const auto src = random_values(s.numel(), 8, -50, 50);
  std::vector<float> storage(src.begin(), src.end()), dense(s.numel()), out_a(s.numel()),
      out_b(s.numel());
  VolumeView strided = host_view(storage.data(), DType::Float32, s);
  strided.strides[4] = s.d * s.h;  // W
  strided.strides[3] = s.d;        // H
  strided.strides[2] = 1;          // D
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t d = 0; d < s.d; ++d)
        for (int64_t h = 0; h < s.h; ++h)
          for (int64_t w = 0; w < s.w; ++w)
            dense[(((n * s.c + c) * s.d + d) * s.h + h) * s.w + w] =
                storage[n * strided.strides[0] + c * strided.strides[1] + d + h * s.d +
                        w * s.d * s.h];
  const auto chain = reference_chains()[15].steps;
  pointwise_chain(strided, host_view(out_a.data(), DType::Float32, s), chain.data(),
                  static_cast<int>(chain.size()));
  pointwise_chain(host_view(dense.data(), DType::Float32, s),
                  host_view(out_b.data(), DType::Float32, s), chain.data(),
                  static_cast<int>(chain.size()));
  EXPECT_EQ(0, std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)));
}

TEST(IntensityCpu, IntegerAndHalfInputsAndOutputs) {
  const Shape s{2, 1, 5, 6, 7};
  const auto src = random_values(s.numel(), 9, 0, 255);
  std::vector<uint8_t> u8(s.numel());
  std::vector<int16_t> i16(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    u8[i] = static_cast<uint8_t>(src[i]);
    i16[i] = static_cast<int16_t>(src[i] * 10 - 1000);
  }
  const auto chain = reference_chains()[14].steps;
  const int k = static_cast<int>(chain.size());
  {  // uint8 -> float32, uint8 -> float16, int16 -> bfloat16
    std::vector<float> f32(s.numel());
    std::vector<detail::half_t> f16(s.numel());
    std::vector<detail::bfloat16_t> b16(s.numel());
    pointwise_chain(host_view(u8.data(), DType::UInt8, s), host_view(f32.data(), DType::Float32, s),
                    chain.data(), k);
    pointwise_chain(host_view(u8.data(), DType::UInt8, s), host_view(f16.data(), DType::Float16, s),
                    chain.data(), k);
    pointwise_chain(host_view(i16.data(), DType::Int16, s),
                    host_view(b16.data(), DType::BFloat16, s), chain.data(), k);
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t n = i / s.sample(), e = i % s.sample();
      const double r8 = reference_element(chain, u8[i], static_cast<uint32_t>(n), 0, e);
      const double r16 = reference_element(chain, i16[i], static_cast<uint32_t>(n), 0, e);
      EXPECT_NEAR(f32[i], r8, 2e-6 * std::max(1.0, std::fabs(r8)));
      EXPECT_NEAR(detail::half_to_float(f16[i].bits), r8, 1e-3 * std::max(1.0, std::fabs(r8)));
      EXPECT_NEAR(detail::bf16_to_float(b16[i].bits), r16, 8e-3 * std::max(1.0, std::fabs(r16)));
    }
  }
  {  // float64 end to end (computed in double)
    std::vector<double> in(src), out(s.numel());
    pointwise_chain(host_view(in.data(), DType::Float64, s),
                    host_view(out.data(), DType::Float64, s), chain.data(), k);
    for (int64_t i = 0; i < s.numel(); ++i) {
      const double ref =
          reference_element(chain, in[i], static_cast<uint32_t>(i / s.sample()), 0, i % s.sample());
      EXPECT_NEAR(out[i], ref, 1e-6 * std::max(1.0, std::fabs(ref)));  // z is drawn in float32
    }
  }
}

TEST(IntensityCpu, BackwardMatchesFloat64Derivative) {
  for (const auto& chain : reference_chains()) {
    if (!is_differentiable(chain.steps)) continue;  // Rician: BackwardRejectsRicianNoise
    const Shape s{3, 2, 3, 4, 5};
    const auto src = random_values(s.numel(), 21, -200, 300);
    const auto g = random_values(s.numel(), 22, -1, 1);
    std::vector<double> in(src), grad_out(g), grad_in(s.numel());
    pointwise_chain_backward(host_view(grad_out.data(), DType::Float64, s),
                             host_view(in.data(), DType::Float64, s),
                             host_view(grad_in.data(), DType::Float64, s), chain.steps.data(),
                             static_cast<int>(chain.steps.size()));
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t e = i % s.sample();
      double d = 0;
      reference_element(chain.steps, in[i], static_cast<uint32_t>(i / s.sample()),
                        e / (s.d * s.h * s.w), e, &d);
      EXPECT_NEAR(grad_in[i], grad_out[i] * d, 1e-9) << chain.name << " element " << i;
    }
  }
}

TEST(IntensityCpu, MinMaxMatchesNaiveAndIgnoresNaN) {
  const Shape s{3, 4, 5, 6, 7};
  const auto src = random_values(s.numel(), 41, -1000, 1000);
  std::vector<float> in(src.begin(), src.end());
  in[17] = std::nanf("");
  for (bool channel_wise : {false, true}) {
    const int64_t segs = s.n * (channel_wise ? s.c : 1);
    const int64_t per = s.numel() / segs;
    std::vector<double> got(2 * segs);
    minmax(host_view(in.data(), DType::Float32, s), got.data(), channel_wise);
    for (int64_t g = 0; g < segs; ++g) {
      double lo = INFINITY, hi = -INFINITY;
      for (int64_t i = g * per; i < (g + 1) * per; ++i)
        if (!std::isnan(in[i])) lo = std::min<double>(lo, in[i]), hi = std::max<double>(hi, in[i]);
      EXPECT_EQ(got[2 * g], lo);
      EXPECT_EQ(got[2 * g + 1], hi);
    }
  }
}

// The reduction's lanes (64 per extreme in the AVX clones, 16 in the baseline) and its scalar
// tail: for run lengths around the lane and chunk sizes, the extremes placed first, last and in
// the tail give exactly the naive min / max, for float32, float64 and int16 storage.
TEST(IntensityCpu, MinMaxExtremesAnywhereInTheRun) {
  for (int64_t w : {1, 63, 64, 65, 1000, 65536 + 77}) {
    const Shape s{1, 1, 1, 1, w};
    for (int64_t at : {int64_t(0), w / 2, w - 1}) {
      std::vector<float> f32(static_cast<size_t>(w));
      for (int64_t i = 0; i < w; ++i) f32[i] = static_cast<float>((i * 37) % 101) - 50.0f;
      f32[at] = -1e6f;
      f32[w - 1 - at] = 1e6f;
      if (w == 1) f32[0] = 3.0f;
      const double want_lo = *std::min_element(f32.begin(), f32.end());
      const double want_hi = *std::max_element(f32.begin(), f32.end());
      std::vector<double> f64(f32.begin(), f32.end());
      std::vector<int16_t> i16(static_cast<size_t>(w));
      for (int64_t i = 0; i < w; ++i)
        i16[i] = static_cast<int16_t>(std::clamp(f32[i], -30000.0f, 30000.0f));
      double got[2];
      minmax(host_view(f32.data(), DType::Float32, s), got, false);
      EXPECT_EQ(got[0], want_lo) << w << " " << at;
      EXPECT_EQ(got[1], want_hi) << w << " " << at;
      minmax(host_view(f64.data(), DType::Float64, s), got, false);
      EXPECT_EQ(got[0], want_lo) << w << " " << at;
      EXPECT_EQ(got[1], want_hi) << w << " " << at;
      minmax(host_view(i16.data(), DType::Int16, s), got, false);
      EXPECT_EQ(got[0], *std::min_element(i16.begin(), i16.end())) << w << " " << at;
      EXPECT_EQ(got[1], *std::max_element(i16.begin(), i16.end())) << w << " " << at;
    }
  }
}

TEST(IntensityCpu, RescaleMatchesFloat64Reference) {
  for (const Shape& s : awkward_shapes()) {
    const auto src = random_values(s.numel(), 42, -300, 500);
    std::vector<float> in(src.begin(), src.end()), out(in.size());
    if (s.sample() > 1)
      std::fill(in.begin(), in.begin() + s.sample(), 3.0f);  // degenerate sample 0
    const double minv = -1.0, maxv = 2.0;
    for (bool channel_wise : {false, true}) {
      std::vector<double> stats(2 * s.n * s.c);
      minmax(host_view(in.data(), DType::Float32, s), stats.data(), channel_wise);
      for (int variant = 0; variant < 3; ++variant) {
        const PointwiseStep step = PointwiseStep::rescale_intensity(stats.data(), channel_wise,
                                                                    variant < 2 ? &minv : nullptr,
                                                                    variant == 0 ? &maxv : nullptr);
        pointwise_chain(host_view(in.data(), DType::Float32, s),
                        host_view(out.data(), DType::Float32, s), &step, 1);
        for (int64_t i = 0; i < s.numel(); ++i) {
          const int64_t n = i / s.sample(), e = i % s.sample();
          const double ref = reference_element({step}, in[i], static_cast<uint32_t>(n),
                                               e / (s.d * s.h * s.w), e, nullptr, s.c);
          ASSERT_NEAR(out[i], ref, 2e-6 * std::max(1.0, std::fabs(ref)))
              << s.str() << " channel_wise " << channel_wise << " variant " << variant;
        }
      }
    }
  }
}

TEST(IntensityCpu, EmptyInputIsANoOp) {
  const Shape s{0, 1, 4, 4, 4};
  const auto chain = reference_chains()[14].steps;
  EXPECT_NO_THROW(pointwise_chain(host_view(nullptr, DType::Float32, s),
                                  host_view(nullptr, DType::Float32, s), chain.data(), 3));
}

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const voxaug::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(IntensityCpu, BadArgumentsGiveNamedErrors) {
  const Shape s{1, 1, 2, 2, 2};
  std::vector<float> a(8), b(8);
  std::vector<int64_t> wide(8);
  const VolumeView va = host_view(a.data(), DType::Float32, s),
                   vb = host_view(b.data(), DType::Float32, s);
  auto run = [&](PointwiseStep st) { pointwise_chain(va, vb, &st, 1); };
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_shift_intensity(0, 1, 1.5, 0));
            }).find("prob must be in [0, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_shift_intensity(2, 1, 1, 0));
            }).find("low must be <= high"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::gaussian_noise(0, -1, false, 1, 0));
            }).find("std must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::gaussian_noise(std::nan(""), 1, false, 1, 0));
            }).find("mean must be finite"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::random_noise(0, 1, 0.6, 0.5, 1, 0));
            }).find("std_low must be in [0, std]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::random_noise(0, 1, -0.1, 0.5, 1, 0));
            }).find("std_low must be in [0, std]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::random_noise(1, 0, 0, 0.5, 1, 0));
            }).find("the mean range needs low <= high"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::random_noise(0, std::nan(""), 0, 0.5, 1, 0));
            }).find("mean high must be finite"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::scale_intensity_range(0, std::numeric_limits<double>::infinity(),
                                                       nullptr, nullptr, false));
            }).find("a_max must be finite"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::shift_intensity(std::nan("")));
            }).find("offset must be finite"),
            std::string::npos);
  PointwiseStep many[kMaxPointwiseSteps + 1];
  EXPECT_NE(
      error_of([&] { pointwise_chain(va, vb, many, kMaxPointwiseSteps + 1); }).find("num_steps"),
      std::string::npos);
  const Shape other{1, 1, 2, 2, 1};
  const PointwiseStep st = PointwiseStep::shift_intensity(1.0);
  EXPECT_NE(error_of([&] {
              pointwise_chain(va, host_view(b.data(), DType::Float32, other), &st, 1);
            }).find("output must have the shape of input"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              pointwise_chain(va, host_view(b.data(), DType::Int32, s), &st, 1);
            }).find("output must be float64, float32, float16 or bfloat16"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              pointwise_chain(host_view(wide.data(), DType::Int64, s), vb, &st, 1);
            }).find("input must be"),
            std::string::npos);
  VolumeView shifted = host_view(a.data() + 1, DType::Float32, {1, 1, 1, 1, 4});
  EXPECT_NE(
      error_of([&] {
        pointwise_chain(host_view(a.data(), DType::Float32, {1, 1, 1, 1, 4}), shifted, &st, 1);
      }).find("overlaps"),
      std::string::npos);
  VolumeView cuda_view = vb;
  cuda_view.device = Device::CUDA;
  EXPECT_NE(error_of([&] {
              pointwise_chain(va, cuda_view, &st, 1);
            }).find("must be on the device of input"),
            std::string::npos);
}

// ---------------- exp / log / pow of detail/fmath.h (identical on host and device)
// ----------------
namespace {
double ulp_distance(float a, double ref) {
  const float r = std::fabs(static_cast<float>(ref));
  return std::fabs(a - ref) / (std::nextafter(r, INFINITY) - r);
}
double ulp_distance(double a, long double ref) {
  const double r = static_cast<double>(ref);
  if (a == r) return 0.0;
  const double ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
  return static_cast<double>(std::fabs(static_cast<long double>(a) - ref) / ulp);
}
}  // namespace

TEST(IntensityMath, ExpFloatWithin2UlpOfStdExp) {
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.0f; x <= 88.7f; x += 0.000731f) {
    const double d = ulp_distance(detail::fexp(x), std::exp(static_cast<double>(x)));
    if (d > worst) worst = d, worst_x = x;
  }
  for (float x = -1e-3f; x <= 1e-3f; x += 1.37e-7f)
    worst = std::max(worst, ulp_distance(detail::fexp(x), std::exp(static_cast<double>(x))));
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
  // Subnormal results round once: within one subnormal step of the true value.
  for (float x = -103.9f; x < -87.4f; x += 0.01f)
    EXPECT_LE(std::fabs(detail::fexp(x) - std::exp(static_cast<double>(x))), 1.5e-45) << x;
  EXPECT_EQ(detail::fexp(0.0f), 1.0f);
  EXPECT_EQ(detail::fexp(-200.0f), 0.0f);
  EXPECT_EQ(detail::fexp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::fexp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(detail::fexp(std::nanf(""))));
}

TEST(IntensityMath, ExpDoubleWithin2UlpOfLongDoubleExp) {
  double worst = 0;
  for (double x = -708.0; x <= 709.7; x += 0.0137)
    worst = std::max(worst, ulp_distance(detail::fexp(x), std::exp(static_cast<long double>(x))));
  for (double x = -1e-6; x <= 1e-6; x += 1.3e-9)
    worst = std::max(worst, ulp_distance(detail::fexp(x), std::exp(static_cast<long double>(x))));
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(detail::fexp(0.0), 1.0);
  EXPECT_EQ(detail::fexp(710.0), INFINITY);
  EXPECT_EQ(detail::fexp(-746.0), 0.0);
  EXPECT_TRUE(std::isnan(detail::fexp(std::nan(""))));
}

// The float32 power of the contrast / gamma transforms vs the exact power (long double):
// bases from subnormal to huge, exponents of either sign up to |y| = 5 (RandAdjustContrast's
// gamma range is (0.5, 4.5); the derivative uses gamma - 1), results in the normal range.
TEST(IntensityMath, PowFloatWithin5UlpOfExactPow) {
  const float ys[] = {0.5f, 0.7f, 0.9f,  1.0f,  1.3f,  2.0f,  3.14159f,
                      4.5f, 5.0f, -0.3f, -0.5f, -1.5f, 1e-3f, -1e-3f};
  double worst = 0;
  float worst_b = 0, worst_y = 0;
  for (float y : ys) {
    for (uint32_t u = 1; u < 0x7f800000u; u += 16411) {
      float b;
      std::memcpy(&b, &u, sizeof b);
      const long double ref = std::pow(static_cast<long double>(b), static_cast<long double>(y));
      if (!(ref < 3.0e38L) || !(ref > 1.2e-38L)) continue;  // normal results
      const double d = ulp_distance(detail::fpow_nonneg(b, y), static_cast<double>(ref));
      if (d > worst) worst = d, worst_b = b, worst_y = y;
    }
  }
  EXPECT_LE(worst, 5.0) << "at b = " << worst_b << ", y = " << worst_y;
  // Subnormal results round once from 2^r * 2^k: within one subnormal step.
  for (float b = 0.5f; b > 1e-30f; b *= 0.731f) {
    const float y = 140.0f / -std::log2(b);  // b^y = 2^-140
    const double ref = std::pow(static_cast<double>(b), static_cast<double>(y));
    EXPECT_LE(std::fabs(detail::fpow_nonneg(b, y) - ref), 1.5e-45) << b;
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float y : ys) EXPECT_EQ(detail::fpow_nonneg(1.0f, y), 1.0f) << y;
  EXPECT_EQ(detail::fpow_nonneg(0.0f, 2.0f), 0.0f);
  EXPECT_EQ(detail::fpow_nonneg(0.0f, 0.0f), 1.0f);
  EXPECT_EQ(detail::fpow_nonneg(0.0f, -1.0f), inf);
  EXPECT_EQ(detail::fpow_nonneg(inf, 2.0f), inf);
  EXPECT_EQ(detail::fpow_nonneg(inf, 0.0f), 1.0f);
  EXPECT_EQ(detail::fpow_nonneg(inf, -1.0f), 0.0f);
  EXPECT_EQ(detail::fpow_nonneg(3.0f, 0.0f), 1.0f);
  EXPECT_EQ(detail::fpow_nonneg(2.0f, 3.0f), 8.0f);
  EXPECT_EQ(detail::fpow_nonneg(1e20f, 4.5f), inf);    // overflow
  EXPECT_EQ(detail::fpow_nonneg(1e-20f, 8.0f), 0.0f);  // underflow
  EXPECT_LE(
      ulp_distance(detail::fpow_nonneg(1.0e-40f, 0.5f), std::sqrt(static_cast<double>(1.0e-40f))),
      5.0);  // subnormal base
  EXPECT_TRUE(std::isnan(detail::fpow_nonneg(-2.0f, 0.5f)));
  EXPECT_TRUE(std::isnan(detail::fpow_nonneg(std::nanf(""), 2.0f)));
  EXPECT_TRUE(std::isnan(detail::fpow_nonneg(0.5f, std::nanf(""))));
  EXPECT_EQ(detail::fpow_nonneg(1.0f, std::nanf("")), 1.0f);
  // y log2(b) rounds to >= 128 while the exact power is finite (just below FLT_MAX): the
  // overflow cut must not catch it (the session-8 review's case).
  const float big_b = std::ldexp(0x1.906586p0f, 126), big_y = 0x1.02bd08p0f;
  const long double big =
      std::pow(static_cast<long double>(big_b), static_cast<long double>(big_y));
  ASSERT_LT(big, static_cast<long double>(std::numeric_limits<float>::max()));
  EXPECT_LE(ulp_distance(detail::fpow_nonneg(big_b, big_y), static_cast<double>(big)), 5.0);
  // and the same near the top for a range of exponents: finite where the exact value is
  for (float yy = 1.0f; yy <= 5.0f; yy += 0.0371f) {
    const float bb = static_cast<float>(std::pow(3.0e38, 1.0 / yy));
    const long double ref = std::pow(static_cast<long double>(bb), static_cast<long double>(yy));
    if (ref < static_cast<long double>(std::numeric_limits<float>::max())) {
      EXPECT_LE(ulp_distance(detail::fpow_nonneg(bb, yy), static_cast<double>(ref)), 5.0) << yy;
    }
  }
}

// The host tiles' common-case power (pow_nonneg_f32<false>: one scaling by 2^k, flags the lanes
// it does not cover) against the full function the device runs, bit for bit wherever it claims
// the lane, including results near the edges of its range (y log2 b around -125 and 127) and
// beyond; every flagged lane is a subnormal base or one with y log2 b outside [-125, 127].
TEST(IntensityMath, PowCommonCaseEqualsFullPowWhereItClaimsTheLane) {
  const float ys[] = {0.5f, 1.0f, 2.0f, 4.5f, -1.5f, 1e-3f, 16.0f, -16.0f, 127.0f / 126.0f,
                      3.9f, 1.0f / 3.0f};
  int64_t claimed = 0, flagged = 0;
  for (float y : ys) {
    for (uint32_t u = 0; u < 0x7f800000u; u += 7919) {  // 0, subnormal and normal bases
      float b;
      std::memcpy(&b, &u, sizeof b);
      int32_t special = 0;
      const float fast = detail::pow_nonneg_f32<false>(b, y, special);
      const float full = detail::fpow_nonneg(b, y);
      if (special == 0) {
        ++claimed;
        ASSERT_EQ(0, std::memcmp(&fast, &full, sizeof fast)) << "b = " << b << ", y = " << y;
      } else {
        ++flagged;
        const double t = static_cast<double>(y) * std::log2(static_cast<double>(b));
        ASSERT_TRUE(b < 1.17549435e-38f || !(t > -124.99 && t < 126.99))
            << "flagged b = " << b << ", y = " << y;
      }
    }
    int32_t special = 0;  // inf and NaN bases are never claimed
    detail::pow_nonneg_f32<false>(std::numeric_limits<float>::infinity(), y, special);
    EXPECT_EQ(special, 1);
    special = 0;
    detail::pow_nonneg_f32<false>(std::nanf(""), y, special);
    EXPECT_EQ(special, 1);
  }
  EXPECT_GT(claimed, 0);
  EXPECT_GT(flagged, 0);
}

TEST(IntensityMath, LogWithin2UlpOfStdLog) {
  double worst_f = 0, worst_d = 0;
  for (double lx = -45.0; lx <= 38.0; lx += 0.00173) {  // subnormal to large floats
    const float x = static_cast<float>(std::pow(10.0, lx));
    if (x == 0.0f || std::isinf(x)) continue;
    const double ref = std::log(static_cast<double>(x));
    if (std::fabs(ref) > 1e-3) worst_f = std::max(worst_f, ulp_distance(detail::flog(x), ref));
    const double xd = std::pow(10.0, lx * 8.0);
    if (xd > 0 && std::isfinite(xd))
      worst_d =
          std::max(worst_d, ulp_distance(detail::flog(xd), std::log(static_cast<long double>(xd))));
  }
  EXPECT_LE(worst_f, 2.0);
  EXPECT_LE(worst_d, 2.0);
  EXPECT_EQ(detail::flog(1.0f), 0.0f);
  EXPECT_EQ(detail::flog(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(detail::flog(-1.0f)));
  EXPECT_EQ(detail::flog(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::flog(0.0), -INFINITY);
  // The shared series agrees with log_unit (Box-Muller's) on (0, 1].
  for (float x = 1e-6f; x <= 1.0f; x *= 1.01f) EXPECT_EQ(detail::flog(x), detail::log_unit(x));
}

TEST(IntensityMath, PowSpecialCasesAndAccuracy) {
  EXPECT_EQ(detail::fpow_nonneg(0.0f, 2.0f), 0.0f);
  EXPECT_EQ(detail::fpow_nonneg(0.0f, 0.0f), 1.0f);
  EXPECT_EQ(detail::fpow_nonneg(0.0f, -0.5f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(detail::fpow_nonneg(1.0f, 3.7f), 1.0f);
  EXPECT_TRUE(std::isnan(detail::fpow_nonneg(-1.0f, 0.5f)));
  for (float b = 1e-4f; b < 1e4f; b *= 1.07f)
    for (float g : {0.5f, 0.74f, 1.0f, 1.35f, 4.5f}) {
      const double ref = std::pow(static_cast<double>(b), static_cast<double>(g));
      if (ref < 1e-30 || ref > 1e30) continue;
      // exp(y log b): the rounding of y log b scales the error by |y log b|.
      const double amp = 1.0 + std::fabs(g * std::log(static_cast<double>(b)));
      EXPECT_NEAR(detail::fpow_nonneg(b, g), ref, 2.4e-7 * amp * ref) << b << "^" << g;
      EXPECT_NEAR(detail::fpow_nonneg(double(b), double(g)), ref, 1e-13 * ref);
    }
}

// ---------------- Rician noise, bias field, contrast, gamma ----------------
TEST(IntensityCpu, RicianMomentsMatchTheory) {
  // x = nu, noise N(0, sigma) in both channels: E[R^2] = nu^2 + 2 sigma^2; nu = 0: Rayleigh,
  // E[R] = sigma sqrt(pi / 2).
  const Shape s{2, 1, 64, 64, 64};
  const double sigma = 3.0;
  std::vector<float> in(s.numel(), 0.0f), out(s.numel());
  std::fill(in.begin() + s.sample(), in.end(), 5.0f);
  const PointwiseStep st = PointwiseStep::rician_noise(0.0, sigma, false, false, 1.0, 77);
  pointwise_chain(host_view(in.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  &st, 1);
  for (int64_t n = 0; n < 2; ++n) {
    const double nu = n == 0 ? 0.0 : 5.0;
    double m1 = 0, m2 = 0;
    for (int64_t i = n * s.sample(); i < (n + 1) * s.sample(); ++i)
      m1 += out[i], m2 += out[i] * double(out[i]);
    m1 /= s.sample();
    m2 /= s.sample();
    EXPECT_NEAR(m2, nu * nu + 2 * sigma * sigma, 0.02 * (nu * nu + 2 * sigma * sigma)) << n;
    if (n == 0) {
      EXPECT_NEAR(m1, sigma * std::sqrt(M_PI / 2), 0.01 * sigma);
    }
  }
  for (float v : out) ASSERT_GE(v, 0.0f);
}

TEST(IntensityCpu, RandomNoiseDrawsMeanAndStdPerSampleInTheirRanges) {
  // TorchIO RandomNoise: each sample's noise has its own mean ~ U(-1, 2) and std ~ U(0.5, 1.5).
  // The sample moments (float64, k = 24^3 normals) lie in the ranges within 5 standard errors,
  // the draws spread over the ranges, and the degenerate ranges give MONAI's fixed-parameter
  // noise bit for bit (the same normals).
  const Shape s{64, 1, 24, 24, 24};
  std::vector<float> zeros(s.numel(), 0.0f), out(s.numel()), fixed(s.numel());
  const VolumeView vz = host_view(zeros.data(), DType::Float32, s);
  const PointwiseStep st = PointwiseStep::random_noise(-1.0, 2.0, 0.5, 1.5, 1.0, 91);
  pointwise_chain(vz, host_view(out.data(), DType::Float32, s), &st, 1);
  const double k = static_cast<double>(s.sample());
  double lo_mean = 1e9, hi_mean = -1e9, lo_std = 1e9, hi_std = -1e9;
  for (int64_t n = 0; n < s.n; ++n) {
    double m1 = 0, m2 = 0;
    for (int64_t i = n * s.sample(); i < (n + 1) * s.sample(); ++i) m1 += out[i];
    m1 /= k;
    for (int64_t i = n * s.sample(); i < (n + 1) * s.sample(); ++i)
      m2 += (out[i] - m1) * (out[i] - m1);
    const double sd = std::sqrt(m2 / k);
    EXPECT_GE(m1, -1.0 - 5 * 1.5 / std::sqrt(k)) << n;
    EXPECT_LE(m1, 2.0 + 5 * 1.5 / std::sqrt(k)) << n;
    EXPECT_GE(sd, 0.5 * (1 - 5 / std::sqrt(2 * k))) << n;
    EXPECT_LE(sd, 1.5 * (1 + 5 / std::sqrt(2 * k))) << n;
    lo_mean = std::min(lo_mean, m1), hi_mean = std::max(hi_mean, m1);
    lo_std = std::min(lo_std, sd), hi_std = std::max(hi_std, sd);
  }
  EXPECT_LT(lo_mean, -0.4);  // 64 uniform draws: each end's fifth is hit (miss: 0.8^64)
  EXPECT_GT(hi_mean, 1.4);
  EXPECT_LT(lo_std, 0.7);
  EXPECT_GT(hi_std, 1.3);
  const PointwiseStep a = PointwiseStep::random_noise(0.25, 0.25, 0.75, 0.75, 1.0, 92);
  const PointwiseStep b = PointwiseStep::gaussian_noise(0.25, 0.75, false, 1.0, 92);
  pointwise_chain(vz, host_view(out.data(), DType::Float32, s), &a, 1);
  pointwise_chain(vz, host_view(fixed.data(), DType::Float32, s), &b, 1);
  EXPECT_EQ(std::memcmp(out.data(), fixed.data(), out.size() * sizeof(float)), 0);
}

TEST(IntensityCpu, RicianRelativeScalesStdPerSampleOrChannel) {
  const Shape s{2, 3, 3, 4, 5};
  const auto src = random_values(s.numel(), 61, -50, 80);
  std::vector<float> in(src.begin(), src.end()), out(in.size());
  const std::vector<float> scale = {0.5f, 2.0f, 1.0f, 3.0f, 0.25f, 4.0f};
  for (bool cw : {false, true}) {
    const PointwiseStep st = PointwiseStep::rician_noise(0.2, 1.5, true, cw, 1.0, 62, scale.data());
    pointwise_chain(host_view(in.data(), DType::Float32, s),
                    host_view(out.data(), DType::Float32, s), &st, 1);
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t n = i / s.sample(), e = i % s.sample();
      const double ref = reference_element({st}, in[i], static_cast<uint32_t>(n),
                                           e / (s.d * s.h * s.w), e, nullptr, s.c);
      ASSERT_NEAR(out[i], ref, 2e-5 * std::max(1.0, std::fabs(ref))) << cw << " " << i;
    }
  }
}

TEST(IntensityCpu, BackwardRejectsRicianNoise) {
  const Shape s{1, 1, 2, 2, 2};
  std::vector<float> a(8, 1.0f), g(8, 1.0f), gi(8);
  const PointwiseStep st = PointwiseStep::rician_noise(0, 1, false, false, 1.0, 1);
  try {
    pointwise_chain_backward(host_view(g.data(), DType::Float32, s),
                             host_view(a.data(), DType::Float32, s),
                             host_view(gi.data(), DType::Float32, s), &st, 1);
    FAIL() << "expected an error";
  } catch (const voxaug::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rician_noise) is not differentiable"), std::string::npos)
        << e.what();
  }
}

TEST(IntensityCpu, BiasFieldMatchesFloat64Reference) {
  std::vector<Shape> shapes = awkward_shapes();
  shapes.push_back({2, 2, 9, 1, 6});
  for (const Shape& s : shapes)
    for (bool mono : {false, true})
      for (int degree : {0, 1, 3, 5}) {
        if (!mono && degree == 0) continue;
        const int nc = bias_field_coefficients(degree);
        const auto cv = random_values(s.n * nc, 70 + degree, -0.15, 0.15);
        const std::vector<float> coeffs(cv.begin(), cv.end());
        const PointwiseStep st = PointwiseStep::bias_field(coeffs.data(), degree, mono, 0.7, 71);
        const auto src = random_values(s.numel(), 72, -100, 200);
        const int64_t dims[3] = {s.d, s.h, s.w};
        std::vector<float> in(src.begin(), src.end()), out(in.size());
        pointwise_chain(host_view(in.data(), DType::Float32, s),
                        host_view(out.data(), DType::Float32, s), &st, 1);
        std::vector<double> in64(src), out64(in.size()), gin(in.size()), gout(in.size(), 1.0);
        pointwise_chain(host_view(in64.data(), DType::Float64, s),
                        host_view(out64.data(), DType::Float64, s), &st, 1);
        pointwise_chain_backward(host_view(gout.data(), DType::Float64, s),
                                 host_view(in64.data(), DType::Float64, s),
                                 host_view(gin.data(), DType::Float64, s), &st, 1);
        for (int64_t i = 0; i < s.numel(); ++i) {
          const int64_t n = i / s.sample(), e = i % s.sample();
          double d = 0;
          const double ref = reference_element({st}, in[i], static_cast<uint32_t>(n),
                                               e / (s.d * s.h * s.w), e, &d, s.c, dims);
          ASSERT_NEAR(out[i], ref, 2e-6 * std::max(1.0, std::fabs(ref)))
              << s.str() << " mono " << mono << " degree " << degree << " i " << i;
          const double ref64 = reference_element({st}, in64[i], static_cast<uint32_t>(n),
                                                 e / (s.d * s.h * s.w), e, &d, s.c, dims);
          ASSERT_NEAR(out64[i], ref64, 1e-12 * std::max(1.0, std::fabs(ref64)));
          ASSERT_NEAR(gin[i], d, 1e-12 * std::max(1.0, std::fabs(d)));
        }
      }
}

TEST(IntensityCpu, AdjustContrastMatchesFloat64Reference) {
  for (const Shape& s : awkward_shapes()) {
    const auto src = random_values(s.numel(), 81, -300, 500);
    std::vector<float> in(src.begin(), src.end()), out(in.size());
    if (s.sample() > 1) std::fill(in.begin(), in.begin() + s.sample(), 3.0f);  // constant sample
    std::vector<double> in64(in.begin(), in.end()), out64(in.size()), gin(in.size()),
        gout(in.size(), 1.0);
    std::vector<double> stats(2 * s.n), stats64(2 * s.n);
    minmax(host_view(in.data(), DType::Float32, s), stats.data(), false);
    minmax(host_view(in64.data(), DType::Float64, s), stats64.data(), false);
    for (bool invert : {false, true})
      for (int variant = 0; variant < 3; ++variant) {
        const double gamma = variant == 0 ? 0.6 : 2.7;
        auto make = [&](const double* st) {
          return variant == 2 ? PointwiseStep::rand_adjust_contrast(st, 0.5, 4.5, 0.8, 83, invert)
                              : PointwiseStep::adjust_contrast(st, gamma, invert);
        };
        const PointwiseStep step = make(stats.data()), step64 = make(stats64.data());
        pointwise_chain(host_view(in.data(), DType::Float32, s),
                        host_view(out.data(), DType::Float32, s), &step, 1);
        pointwise_chain(host_view(in64.data(), DType::Float64, s),
                        host_view(out64.data(), DType::Float64, s), &step64, 1);
        pointwise_chain_backward(host_view(gout.data(), DType::Float64, s),
                                 host_view(in64.data(), DType::Float64, s),
                                 host_view(gin.data(), DType::Float64, s), &step64, 1);
        for (int64_t i = 0; i < s.numel(); ++i) {
          const int64_t n = i / s.sample(), e = i % s.sample();
          double d = 0;
          const double ref = reference_element({step}, in[i], static_cast<uint32_t>(n), 0, e, &d);
          ASSERT_FALSE(std::isnan(out[i]));
          // float32 pow then * range + min: absolute error ~ 1e-6 of the intensity scale
          ASSERT_NEAR(out[i], ref, 1e-5 * (std::fabs(ref) + 800.0))
              << s.str() << " invert " << invert << " variant " << variant << " i " << i;
          const double ref64 =
              reference_element({step64}, in64[i], static_cast<uint32_t>(n), 0, e, &d);
          ASSERT_NEAR(out64[i], ref64, 1e-11 * (std::fabs(ref64) + 800.0));
          if (std::isfinite(d) && std::fabs(d) < 1e6) {
            ASSERT_NEAR(gin[i], d, 1e-8 * std::max(1.0, std::fabs(d))) << i;
          }
        }
      }
  }
}

TEST(IntensityCpu, NewStepsFuseBitwiseAndSplitBatches) {
  const Shape whole{6, 2, 5, 6, 7}, piece{2, 2, 5, 6, 7};
  const auto src = random_values(whole.numel(), 91, 1, 300);
  std::vector<float> in(src.begin(), src.end()), fused(in.size()), stepwise(in),
      part(piece.numel());
  std::vector<double> stats(2 * whole.n);
  minmax(host_view(in.data(), DType::Float32, whole), stats.data(), false);
  const auto cv = random_values(whole.n * 20, 92, -0.1, 0.1);
  const std::vector<float> coeffs(cv.begin(), cv.end());
  const std::vector<PointwiseStep> chain = {
      PointwiseStep::rand_adjust_contrast(stats.data(), 0.5, 4.5, 0.9, 93, false),
      PointwiseStep::bias_field(coeffs.data(), 3, false, 0.8, 94),
      PointwiseStep::rician_noise(0.0, 2.0, true, true, 0.9, 95),
      PointwiseStep::rand_gamma(-0.3, 0.3, 1.0, 96)};
  const int k = static_cast<int>(chain.size());
  pointwise_chain(host_view(in.data(), DType::Float32, whole),
                  host_view(fused.data(), DType::Float32, whole), chain.data(), k);
  for (const auto& step : chain) {
    const VolumeView v = host_view(stepwise.data(), DType::Float32, whole);
    pointwise_chain(v, v, &step, 1);
  }
  EXPECT_EQ(0, std::memcmp(fused.data(), stepwise.data(), fused.size() * sizeof(float)));
  // Samples 3..4 alone (their stats and coefficients rows, first_sample 3) give the same bytes.
  std::vector<PointwiseStep> sub = chain;
  sub[0].stats = stats.data() + 2 * 3;
  sub[1].coefficients = coeffs.data() + 3 * 20;
  pointwise_chain(host_view(in.data() + 3 * whole.sample(), DType::Float32, piece),
                  host_view(part.data(), DType::Float32, piece), sub.data(), k, nullptr, 3);
  EXPECT_EQ(
      0, std::memcmp(part.data(), fused.data() + 3 * whole.sample(), part.size() * sizeof(float)));
  double lo = 1e30, hi = -1e30;
  for (float v : fused) lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
  EXPECT_GT(hi - lo, 1.0);
}

TEST(IntensityCpu, NewStepsBadArgumentsGiveNamedErrors) {
  const Shape s{1, 1, 2, 2, 2};
  std::vector<float> a(8), b(8), coeffs(20);
  std::vector<double> stats = {0.0, 1.0};
  const VolumeView va = host_view(a.data(), DType::Float32, s),
                   vb = host_view(b.data(), DType::Float32, s);
  auto run = [&](PointwiseStep st) { pointwise_chain(va, vb, &st, 1); };
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rician_noise(0, -1, false, false, 1, 0));
            }).find("rician_noise): std must be >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::bias_field(coeffs.data(), 9, false, 1, 0));
            }).find("degree must be in [0, 7]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::bias_field(nullptr, 3, false, 1, 0));
            }).find("coefficients must not be null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::adjust_contrast(nullptr, 1.0, false));
            }).find("stats (from minmax) must not be null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::adjust_contrast(stats.data(), -1.0, false));
            }).find("gamma must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_adjust_contrast(stats.data(), 0.0, 2.0, 1, 0, false));
            }).find("gamma must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_gamma(0.3, -0.3, 1, 0));
            }).find("low must be <= high"),
            std::string::npos);
  EXPECT_NE(error_of([&] { run(PointwiseStep::gamma(std::nan(""))); }).find("gamma must be finite"),
            std::string::npos);
}

namespace {

// Per-segment float64 statistics computed naively: (count, mean, population std) of the
// (non-zero) values, (mean, min, max), and (min, max).
struct NaiveStats {
  std::vector<double> moments, mean_min_max, minmax;
};
template <class T>
NaiveStats naive_stats(const std::vector<T>& v, const Shape& s, bool channel_wise, bool nonzero) {
  const int64_t segs = channel_wise ? s.n * s.c : s.n, len = v.size() / segs;
  NaiveStats r;
  for (int64_t g = 0; g < segs; ++g) {
    double cnt = 0, sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY, all = 0;
    for (int64_t i = g * len; i < (g + 1) * len; ++i) {
      const double x = static_cast<double>(v[i]);
      all += x;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      if (nonzero && x == 0) continue;
      cnt += 1;
      sum += x;
    }
    const double mean = cnt > 0 ? sum / cnt : 0.0;
    for (int64_t i = g * len; i < (g + 1) * len; ++i) {
      const double x = static_cast<double>(v[i]);
      if (!(nonzero && x == 0)) sq += (x - mean) * (x - mean);
    }
    r.moments.insert(r.moments.end(), {cnt, mean, cnt > 0 ? std::sqrt(sq / cnt) : 0.0});
    r.mean_min_max.insert(r.mean_min_max.end(), {all / len, lo, hi});
    r.minmax.insert(r.minmax.end(), {lo, hi});
  }
  return r;
}

// Histogram shift rows: K = 3 + n % 6 sorted points from 0 to 1, NaN-padded to 8; every
// fifth row all NaN (not applied).
std::vector<float> histogram_rows(int64_t n, uint32_t seed) {
  std::vector<float> rows(n * 8, NAN);
  const auto u = random_values(n * 8, seed, 0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) {
    if (i % 5 == 4) continue;
    const int K = 3 + static_cast<int>(i % 6);
    std::vector<double> y(u.begin() + i * 8, u.begin() + i * 8 + K);
    std::sort(y.begin(), y.end());
    y.front() = 0.0;
    y.back() = 1.0;
    for (int k = 0; k < K; ++k) rows[i * 8 + k] = static_cast<float>(y[k]);
  }
  return rows;
}

}  // namespace

TEST(IntensityCpu, HistogramStdShiftFixedMeanMatchFloat64Reference) {
  for (const Shape& s : awkward_shapes()) {
    auto src = random_values(s.numel(), 101, -300, 500);
    for (size_t i = 0; i < src.size(); i += 7) src[i] = 0.0;  // zeros for nonzero=True
    const std::vector<float> in(src.begin(), src.end());
    const std::vector<double> in64(in.begin(), in.end());
    const std::vector<float> rows = histogram_rows(s.n, 102);
    for (bool cw : {false, true})
      for (int variant = 0; variant < 4; ++variant) {
        const bool nonzero = variant & 1, flag = variant & 2;
        const NaiveStats st = naive_stats(in, s, cw, nonzero);
        const NaiveStats whole = naive_stats(in, s, false, false);
        std::vector<std::vector<PointwiseStep>> chains = {
            {PointwiseStep::histogram_shift(whole.minmax.data(), rows.data(), 8)},
            {PointwiseStep::rand_std_shift_intensity(st.moments.data(), -2.0, 1.5, 0.8, 103,
                                                     nonzero, cw)},
            {PointwiseStep::std_shift_intensity(st.moments.data(), 0.75, nonzero, cw)},
            {PointwiseStep::rand_scale_intensity_fixed_mean(st.mean_min_max.data(), -0.6, 0.9, 0.9,
                                                            104, !nonzero, flag, cw)},
            {PointwiseStep::scale_intensity_fixed_mean(st.mean_min_max.data(), 1.5, nonzero, !flag,
                                                       cw)},
            {PointwiseStep::histogram_shift(whole.minmax.data(), rows.data(), 8),
             PointwiseStep::rand_std_shift_intensity(st.moments.data(), -1, 1, 1.0, 105, nonzero,
                                                     cw)}};
        for (size_t ci = 0; ci < chains.size(); ++ci) {
          const auto& chain = chains[ci];
          const int k = static_cast<int>(chain.size());
          std::vector<float> out(in.size());
          std::vector<double> out64(in.size()), gin(in.size()), gout(in.size(), 1.0);
          pointwise_chain(host_view(const_cast<float*>(in.data()), DType::Float32, s),
                          host_view(out.data(), DType::Float32, s), chain.data(), k);
          pointwise_chain(host_view(const_cast<double*>(in64.data()), DType::Float64, s),
                          host_view(out64.data(), DType::Float64, s), chain.data(), k);
          pointwise_chain_backward(host_view(gout.data(), DType::Float64, s),
                                   host_view(const_cast<double*>(in64.data()), DType::Float64, s),
                                   host_view(gin.data(), DType::Float64, s), chain.data(), k);
          bool changed = false;
          for (int64_t i = 0; i < s.numel(); ++i) {
            const int64_t n = i / s.sample(), e = i % s.sample(), c = e / (s.d * s.h * s.w);
            double d = 0;
            const double ref =
                reference_element(chain, in[i], static_cast<uint32_t>(n), c, e, &d, s.c);
            ASSERT_FALSE(std::isnan(out[i]));
            // float32 arithmetic on values of scale ~800
            ASSERT_NEAR(out[i], ref, 2e-6 * (std::fabs(ref) + 800.0))
                << s.str() << " chain " << ci << " cw " << cw << " variant " << variant << " i "
                << i;
            ASSERT_NEAR(out64[i], ref, 1e-6 * (std::fabs(ref) + 800.0));  // float32 points
            changed |= out[i] != in[i];
            ASSERT_NEAR(gin[i], d, 1e-9 * std::max(1.0, std::fabs(d)))
                << s.str() << " chain " << ci << " i " << i;
          }
          if (s.d * s.h * s.w > 2) {  // (two values per channel may clip back onto themselves)
            EXPECT_TRUE(changed) << s.str() << " chain " << ci;
          }
        }
      }
  }
}

TEST(IntensityCpu, HistogramShiftExactEndsAndIdentityRows) {
  // Identity points (y = x) map every value onto itself except where MONAI's float32
  // m x + (f0 - m x0) rounds; a NaN row and a constant sample leave the data bit for bit.
  const Shape s{3, 1, 4, 5, 6};
  const auto src = random_values(s.numel(), 106, -1, 1);
  std::vector<float> in(src.begin(), src.end()), out(in.size());
  std::fill(in.begin() + 2 * s.sample(), in.end(), 2.5f);  // sample 2 constant
  const NaiveStats st = naive_stats(in, s, false, false);
  std::vector<float> rows = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, NAN,  NAN,  NAN, NAN, NAN,
                             0.0f, 0.1f,  0.2f, 1.0f,  NAN,  0.0f, 1.0f, NAN, NAN, NAN};
  const PointwiseStep step = PointwiseStep::histogram_shift(st.minmax.data(), rows.data(), 5);
  pointwise_chain(host_view(in.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  &step, 1);
  for (int64_t i = 0; i < s.sample(); ++i) EXPECT_NEAR(out[i], in[i], 1e-6);
  EXPECT_EQ(0, std::memcmp(out.data() + s.sample(), in.data() + s.sample(),
                           2 * s.sample() * sizeof(float)));
  // Row 1 has 4 points (the NaN at index 4 ends it); the value at max maps to max.
  PointwiseStep s2 = step;
  rows[1 * 5 + 4] = NAN;
  s2.coefficients = rows.data();
  pointwise_chain(host_view(in.data(), DType::Float32, s), host_view(out.data(), DType::Float32, s),
                  &s2, 1);
  for (int64_t i = s.sample(); i < 2 * s.sample(); ++i) {
    double d = 0;
    const double ref = reference_element({s2}, in[i], 1, 0, i - s.sample(), &d);
    EXPECT_NEAR(out[i], ref, 1e-6);
  }
}

TEST(IntensityCpu, HistogramStdShiftFixedMeanBadArgumentsGiveNamedErrors) {
  const Shape s{1, 1, 2, 2, 2};
  std::vector<float> a(8), b(8), pts(4);
  std::vector<double> stats = {0.0, 1.0, 2.0};
  const VolumeView va = host_view(a.data(), DType::Float32, s),
                   vb = host_view(b.data(), DType::Float32, s);
  auto run = [&](PointwiseStep st) { pointwise_chain(va, vb, &st, 1); };
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::histogram_shift(nullptr, pts.data(), 4));
            }).find("histogram_shift): stats (from minmax) must not be null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::histogram_shift(stats.data(), nullptr, 4));
            }).find("control points must not be null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::histogram_shift(stats.data(), pts.data(), 0));
            }).find("num_points must be in [1, 4096], got 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::std_shift_intensity(nullptr, 1.0, false, false));
            }).find("std_shift_intensity): stats (from moments) must not be null"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_std_shift_intensity(stats.data(), 2, 1, 1, 0, false, false));
            }).find("low must be <= high"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::scale_intensity_fixed_mean(stats.data(), NAN, true, false, false));
            }).find("scale_intensity_fixed_mean): factor must be finite"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              run(PointwiseStep::rand_scale_intensity_fixed_mean(nullptr, 0, 1, 1, 0, true, false,
                                                                 false));
            }).find("(mean, min, max) per segment) must not be null"),
            std::string::npos);
}

// The host tiles run the power's common-case form and recompute a tile with the full function
// when any element needs a special case (kernels/intensity/chain_cpu.h cpu_pow_tile): the
// results must be the per-element fpow_nonneg's (the device's) bit for bit, for tiles with no
// special element, with a few, and with many (zeros, subnormals, inf, NaN, negatives, results
// past float32), for the fixed gamma step and the contrast step.
TEST(IntensityCpu, PowerTilesEqualPerElementPower) {
  using namespace voxaug::detail;
  const Shape s{2, 1, 9, 16, 40};  // several 256-element tiles per sample
  auto src = random_values(s.numel(), 131, -50, 400);
  std::vector<float> in(src.begin(), src.end());
  const float specials[] = {
      0.0f,          -0.0f, 1e-41f, -3e-39f, 1e30f, -2e35f, std::numeric_limits<float>::infinity(),
      std::nanf(""), 1.0f,  -1.0f};
  for (size_t i = 0; i < 10; ++i) in[300 + 97 * i] = specials[i];  // a few, in the first sample
  for (size_t i = 5760; i < 5760 + 256; i += 2) in[i] = specials[(i / 2) % 10];  // many: one tile
  for (double g : {0.37, 1.0, 2.6, 4.5}) {
    std::vector<float> out(in.size());
    const PointwiseStep step = PointwiseStep::gamma(g);
    pointwise_chain(host_view(in.data(), DType::Float32, s),
                    host_view(out.data(), DType::Float32, s), &step, 1);
    for (size_t i = 0; i < in.size(); ++i) {
      const float ax = in[i] < 0.0f ? -in[i] : in[i];
      const float pw = fpow_nonneg(ax, static_cast<float>(g));
      const float want = in[i] < 0.0f ? -pw : pw;
      ASSERT_EQ(float_bits(out[i]), float_bits(want))
          << "gamma " << g << " at " << i << ": x = " << in[i];
    }
  }
  // Contrast: b = (x - min) / (range + 1e-7) in [0, 1]; sample 0 has minimum 0 (b = 0 there)
  // and values of 1e-30 and 1e-42 (b below 2^-151 / gamma, a subnormal b: special lanes).
  std::vector<float> in2(src.begin(), src.end());
  for (int64_t i = 0; i < s.numel() / s.n; ++i) in2[i] = std::fabs(in2[i]);
  in2[700] = 0.0f, in2[701] = 1e-30f, in2[702] = 1e-42f;
  const NaiveStats whole = naive_stats(in2, s, false, false);
  for (double g : {0.5, 4.5}) {
    std::vector<float> out(in2.size());
    const PointwiseStep step = PointwiseStep::adjust_contrast(whole.minmax.data(), g, false);
    pointwise_chain(host_view(in2.data(), DType::Float32, s),
                    host_view(out.data(), DType::Float32, s), &step, 1);
    for (int64_t n = 0; n < s.n; ++n) {
      const float mn = static_cast<float>(whole.minmax[2 * n]);
      const float mx = static_cast<float>(whole.minmax[2 * n + 1]);
      const float range = mx - mn, den = range + 1e-7f;
      const int64_t per = s.numel() / s.n;
      for (int64_t i = n * per; i < (n + 1) * per; ++i) {
        const float b = (in2[i] - mn) / den;
        const float want = fpow_nonneg(b, static_cast<float>(g)) * range + mn;
        ASSERT_EQ(float_bits(out[i]), float_bits(want)) << "gamma " << g << " at " << i;
      }
    }
  }
}

// ChainForward::operator() (what the CUDA launcher runs per item) over every item of float32
// `in` with parameter block `p`, on the host: must give `tiled` (the host's path) bit for bit.
void expect_device_body_equals(const std::vector<float>& in, const std::vector<float>& tiled,
                               const Shape& s, const detail::ChainParams& p) {
  std::vector<float> items(in.size());
  const VolumeView vin = host_view(const_cast<float*>(in.data()), DType::Float32, s);
  const VolumeView vout = host_view(items.data(), DType::Float32, s);
  const detail::ChainForward<float, float, float> f{
      in.data(), items.data(), detail::make_indexer(vin), detail::make_indexer(vout), s.sample(), s.d * s.h * s.w,
      p};
  for (int64_t n = 0; n < s.n; ++n) {
    detail::ChainState<float> state;
    f.begin_sample(n, state);
    for (int64_t it = 0; it < f.items(); ++it) f(state, n, it);
  }
  EXPECT_EQ(0, std::memcmp(tiled.data(), items.data(), in.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(tiled.data(), in.data(), in.size() * sizeof(float)));
}

// The device item body with the per-element random steps: Gaussian noise, channel-wise Rician
// noise (resolved per channel inside an item when the channel changes: the spatial size is odd,
// so items straddle channels), a bias field and a channel-wise scale, against the host's tiled
// path, bit for bit.
TEST(IntensityCpu, DeviceItemBodyWithNoiseAndFieldsEqualsTiledCpuPath) {
  const Shape s{3, 3, 5, 7, 9};
  const auto src = random_values(s.numel(), 131, -50, 250);
  const std::vector<float> in(src.begin(), src.end());
  std::vector<float> tiled(in.size());
  const int degree = 2;
  std::vector<float> coeff(static_cast<size_t>(s.n * bias_field_coefficients(degree)));
  std::mt19937 rng(132);
  std::uniform_real_distribution<float> ud(-0.3f, 0.3f);
  for (auto& c : coeff) c = ud(rng);
  const std::vector<PointwiseStep> chain = {
      PointwiseStep::gaussian_noise(0.5, 3.0, true, 0.8, 133),
      PointwiseStep::rician_noise(0.0, 2.0, true, true, 0.9, 134),
      PointwiseStep::bias_field(coeff.data(), degree, false, 0.7, 135),
      PointwiseStep::rand_scale_intensity(-0.2, 0.4, 0.85, 136, true)};
  const VolumeView vin = host_view(const_cast<float*>(in.data()), DType::Float32, s);
  pointwise_chain(vin, host_view(tiled.data(), DType::Float32, s), chain.data(), 4);
  expect_device_body_equals(in, tiled, s, detail::pack_chain_for(vin, chain.data(), 4, 0));
}

TEST(IntensityCpu, DeviceItemBodyOnHostEqualsTiledCpuPath) {
  // The CUDA launcher runs ChainForward::operator() per item (op_adjust_contrast's fused
  // power, op_histogram_shift's per-voxel scan and slope, the per-element std shift /
  // fixed-mean scale); the host runs the tiled, staged / point-major loops of chain_cpu.h.
  // Evaluated here on the host, both must give the same bits: the twin property, checked without a
  // GPU (the device only swaps in the _rn intrinsics, which round the same).
  using namespace voxaug::detail;
  const Shape s{5, 2, 7, 9, 11};
  auto src = random_values(s.numel(), 121, -80, 300);
  for (size_t i = 0; i < src.size(); i += 9) src[i] = 0.0;
  const std::vector<float> in(src.begin(), src.end());
  std::vector<float> tiled(in.size());
  const NaiveStats st = naive_stats(in, s, true, true), whole = naive_stats(in, s, false, false);
  const std::vector<float> rows = histogram_rows(s.n, 122);
  const std::vector<PointwiseStep> chain = {
      PointwiseStep::rand_adjust_contrast(whole.minmax.data(), 0.5, 4.5, 0.9, 125, true),
      PointwiseStep::histogram_shift(whole.minmax.data(), rows.data(), 8),
      PointwiseStep::rand_std_shift_intensity(st.moments.data(), -1.0, 2.0, 0.8, 123, true, true),
      PointwiseStep::rand_scale_intensity_fixed_mean(st.mean_min_max.data(), -0.5, 0.5, 0.9, 124,
                                                     true, true, true)};
  pointwise_chain(host_view(const_cast<float*>(in.data()), DType::Float32, s),
                  host_view(tiled.data(), DType::Float32, s), chain.data(), 4);
  // The kernel parameter block, as intensity.cpp packs it for these steps.
  ChainParams p{};
  p.num_steps = 4;
  p.any_channel_wise = true;
  p.channels = s.c;
  p.dims[0] = s.d, p.dims[1] = s.h, p.dims[2] = s.w;
  KStep& a = p.steps[0];
  a.op = static_cast<int32_t>(PointwiseOp::AdjustContrast);
  a.prob = chain[0].prob;
  a.seed = chain[0].seed;
  a.lo = chain[0].low;
  a.hi = chain[0].high;
  a.p0 = chain[0].value;
  a.stats = whole.minmax.data();
  a.flags = kRandom | kInvert;
  KStep& h = p.steps[1];
  h.op = static_cast<int32_t>(PointwiseOp::HistogramShift);
  h.prob = 1.0;
  h.stats = whole.minmax.data();
  h.coeffs = rows.data();
  h.ncoeff = 8;
  for (int k = 2; k < 4; ++k) {
    KStep& q = p.steps[k];
    q.op = static_cast<int32_t>(chain[k].op);
    q.prob = chain[k].prob;
    q.seed = chain[k].seed;
    q.lo = chain[k].low;
    q.hi = chain[k].high;
    q.stats = chain[k].stats;
    q.flags = kRandom | kChannelWise | (k == 2 ? kNonzero : (kFixedMean | kPreserveRange));
  }
  expect_device_body_equals(in, tiled, s, p);
}
