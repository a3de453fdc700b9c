// CUDA path of the pointwise chain vs its CPU twin: bit-identical output for every chain,
// shape and dtype pair. Compiled everywhere; skips (and says so) without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "intensity_cases.h"
#include "test_support.h"
#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/intensity.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace voxaug;
using namespace voxaug_test;

#if VOXAUG_WITH_CUDA
namespace {

template <class TIn, class TOut>
void compare_twin(const NamedChain& chain, const Shape& s, DType tin, DType tout,
                  const std::vector<TIn>& in, bool in_place) {
  std::vector<TOut> cpu(s.numel()), gpu(s.numel());
  const int k = static_cast<int>(chain.steps.size());
  pointwise_chain(
      contiguous_view(const_cast<TIn*>(in.data()), tin, Device::CPU, s.n, s.c, s.d, s.h, s.w),
      contiguous_view(cpu.data(), tout, Device::CPU, s.n, s.c, s.d, s.h, s.w), chain.steps.data(),
      k);
  DeviceBuffer din(in.size() * sizeof(TIn)), dout(cpu.size() * sizeof(TOut));
  CUDA_OK(cudaMemcpy(din.p, in.data(), in.size() * sizeof(TIn), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  const VolumeView vin = contiguous_view(din.p, tin, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
  const VolumeView vout =
      in_place ? vin : contiguous_view(dout.p, tout, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
  pointwise_chain(vin, vout, chain.steps.data(), k, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(gpu.data(), vout.data, gpu.size() * sizeof(TOut), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(TOut)))
      << chain.name << " " << s.str() << " " << dtype_name(tin) << "->" << dtype_name(tout);
}

}  // namespace

TEST(IntensityCuda, Float32TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const auto& chain : reference_chains())
    for (const auto& s : awkward_shapes()) {
      const auto src = random_values(s.numel(), 31, -200, 300);
      compare_twin<float, float>(chain, s, DType::Float32, DType::Float32,
                                 std::vector<float>(src.begin(), src.end()), false);
      compare_twin<float, float>(chain, s, DType::Float32, DType::Float32,
                                 std::vector<float>(src.begin(), src.end()), true);
    }
}

TEST(IntensityCuda, MixedDtypesTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Shape s{3, 2, 9, 10, 11};
  const auto src = random_values(s.numel(), 32, 0, 250);
  std::vector<uint8_t> u8(src.begin(), src.end());
  std::vector<int16_t> i16(src.begin(), src.end());
  std::vector<detail::half_t> f16(s.numel());
  std::vector<detail::bfloat16_t> b16(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    f16[i].bits = detail::float_to_half(static_cast<float>(src[i]));
    b16[i].bits = detail::float_to_bf16(static_cast<float>(src[i]));
  }
  for (const auto& chain : reference_chains()) {
    compare_twin<uint8_t, float>(chain, s, DType::UInt8, DType::Float32, u8, false);
    compare_twin<int16_t, detail::half_t>(chain, s, DType::Int16, DType::Float16, i16, false);
    compare_twin<detail::half_t, detail::half_t>(chain, s, DType::Float16, DType::Float16, f16,
                                                 false);
    compare_twin<detail::bfloat16_t, detail::bfloat16_t>(chain, s, DType::BFloat16, DType::BFloat16,
                                                         b16, true);
    compare_twin<double, double>(chain, s, DType::Float64, DType::Float64, src, false);
  }
}

TEST(IntensityCuda, LargeBatchTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Shape s{8, 1, 64, 64, 63};
  const auto src = random_values(s.numel(), 33, -500, 500);
  for (const auto& chain : reference_chains())
    compare_twin<float, float>(chain, s, DType::Float32, DType::Float32,
                               std::vector<float>(src.begin(), src.end()), false);
}

TEST(IntensityCuda, MinMaxAndRescaleTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Shape s{3, 2, 33, 17, 65};
  const auto src = random_values(s.numel(), 36, -1000, 1000);
  std::vector<float> in(src.begin(), src.end());
  DeviceBuffer din(in.size() * sizeof(float)), dstats(2 * s.n * s.c * sizeof(double)),
      dout(in.size() * sizeof(float));
  CUDA_OK(cudaMemcpy(din.p, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
  const double minv = 0.0, maxv = 1.0;
  for (bool channel_wise : {false, true}) {
    const size_t pairs = s.n * (channel_wise ? s.c : 1);
    std::vector<double> cpu(2 * pairs), gpu(2 * pairs);
    const VolumeView hin =
        contiguous_view(in.data(), DType::Float32, Device::CPU, s.n, s.c, s.d, s.h, s.w);
    const VolumeView vin =
        contiguous_view(din.p, DType::Float32, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
    minmax(hin, cpu.data(), channel_wise);
    minmax(vin, static_cast<double*>(dstats.p), channel_wise);
    CUDA_OK(cudaMemcpy(gpu.data(), dstats.p, gpu.size() * sizeof(double), cudaMemcpyDeviceToHost));
    EXPECT_EQ(cpu, gpu);
    std::vector<float> out_cpu(in.size()), out_gpu(in.size());
    const PointwiseStep hs =
        PointwiseStep::rescale_intensity(cpu.data(), channel_wise, &minv, &maxv);
    const PointwiseStep ds = PointwiseStep::rescale_intensity(static_cast<double*>(dstats.p),
                                                              channel_wise, &minv, &maxv);
    pointwise_chain(
        hin, contiguous_view(out_cpu.data(), DType::Float32, Device::CPU, s.n, s.c, s.d, s.h, s.w),
        &hs, 1);
    pointwise_chain(vin,
                    contiguous_view(dout.p, DType::Float32, Device::CUDA, s.n, s.c, s.d, s.h, s.w),
                    &ds, 1);
    CUDA_OK(cudaMemcpy(out_gpu.data(), dout.p, in.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(out_cpu.data(), out_gpu.data(), in.size() * sizeof(float)));
  }
}

TEST(IntensityCuda, BackwardTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Shape s{2, 2, 7, 6, 5};
  const auto src = random_values(s.numel(), 34, -200, 300);
  const auto g = random_values(s.numel(), 35, -1, 1);
  std::vector<float> in(src.begin(), src.end()), go(g.begin(), g.end()), cpu(s.numel()),
      gpu(s.numel());
  const size_t bytes = in.size() * sizeof(float);
  DeviceBuffer din(bytes), dgo(bytes), dgi(bytes);
  CUDA_OK(cudaMemcpy(din.p, in.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dgo.p, go.data(), bytes, cudaMemcpyHostToDevice));
  for (const auto& chain : reference_chains()) {
    if (!is_differentiable(chain.steps)) continue;  // Rician noise has no backward
    const int k = static_cast<int>(chain.steps.size());
    auto hv = [&](void* p) {
      return contiguous_view(p, DType::Float32, Device::CPU, s.n, s.c, s.d, s.h, s.w);
    };
    auto dv = [&](void* p) {
      return contiguous_view(p, DType::Float32, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
    };
    pointwise_chain_backward(hv(go.data()), hv(in.data()), hv(cpu.data()), chain.steps.data(), k);
    pointwise_chain_backward(dv(dgo.p), dv(din.p), dv(dgi.p), chain.steps.data(), k);
    CUDA_OK(cudaMemcpy(gpu.data(), dgi.p, bytes, cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), bytes)) << chain.name;
  }
}
TEST(IntensityCuda, BiasFieldContrastGammaTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  // Forward (float32 and float64) and backward of a chain with device-side coefficients and
  // statistics: exp / log / pow and the field evaluation must give the same bits.
  for (const Shape& s : {Shape{3, 2, 9, 10, 11}, Shape{2, 1, 1, 7, 5}, Shape{1, 3, 33, 17, 64}}) {
    const auto src = random_values(s.numel(), 37, 0.5, 400);
    for (bool mono : {false, true}) {
      const int degree = mono ? 2 : 3, nc = bias_field_coefficients(degree);
      const auto cv = random_values(s.n * nc, 38, -0.2, 0.2);
      const std::vector<float> coeffs(cv.begin(), cv.end());
      DeviceBuffer dcoef(coeffs.size() * sizeof(float)), dstats(2 * s.n * sizeof(double));
      CUDA_OK(cudaMemcpy(dcoef.p, coeffs.data(), coeffs.size() * sizeof(float),
                         cudaMemcpyHostToDevice));
      auto run = [&](auto zero, DType t) {
        using T = decltype(zero);
        const std::vector<T> in(src.begin(), src.end());
        std::vector<T> cpu(in.size()), gpu(in.size()), gcpu(in.size()), ggpu(in.size());
        const std::vector<T> go(in.size(), T(1));
        const size_t bytes = in.size() * sizeof(T);
        DeviceBuffer din(bytes), dout(bytes), dgo(bytes), dgi(bytes);
        CUDA_OK(cudaMemcpy(din.p, in.data(), bytes, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dgo.p, go.data(), bytes, cudaMemcpyHostToDevice));
        auto hv = [&](const void* p) {
          return contiguous_view(const_cast<void*>(p), t, Device::CPU, s.n, s.c, s.d, s.h, s.w);
        };
        auto dv = [&](void* p) {
          return contiguous_view(p, t, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
        };
        std::vector<double> hstats(2 * s.n);
        minmax(hv(in.data()), hstats.data(), false);
        minmax(dv(din.p), static_cast<double*>(dstats.p), false);
        auto chain = [&](const float* c, const double* st) {
          return std::vector<PointwiseStep>{
              PointwiseStep::rand_adjust_contrast(st, 0.5, 4.5, 0.9, 39, !mono),
              PointwiseStep::bias_field(c, degree, mono, 0.9, 40),
              PointwiseStep::rand_gamma(-0.3, 0.3, 1.0, 41),
              PointwiseStep::rician_noise(0.0, 3.0, true, mono, 1.0, 42)};
        };
        const auto hc = chain(coeffs.data(), hstats.data());
        const auto dc = chain(static_cast<float*>(dcoef.p), static_cast<double*>(dstats.p));
        pointwise_chain(hv(in.data()), hv(cpu.data()), hc.data(), 4);
        pointwise_chain(dv(din.p), dv(dout.p), dc.data(), 4);
        pointwise_chain_backward(hv(go.data()), hv(in.data()), hv(gcpu.data()), hc.data(), 3);
        pointwise_chain_backward(dv(dgo.p), dv(din.p), dv(dgi.p), dc.data(), 3);
        CUDA_OK(cudaMemcpy(gpu.data(), dout.p, bytes, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(ggpu.data(), dgi.p, bytes, cudaMemcpyDeviceToHost));
        EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), bytes)) << s.str() << " " << dtype_name(t);
        EXPECT_EQ(0, std::memcmp(gcpu.data(), ggpu.data(), bytes))
            << "backward " << s.str() << " " << dtype_name(t);
      };
      run(0.0f, DType::Float32);
      run(0.0, DType::Float64);
    }
  }
}
TEST(IntensityCuda, HistogramStdShiftFixedMeanTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  // Forward (float32, float64, bfloat16 output) and float64 backward of chains of the three
  // statistics-driven steps: statistics and control points from the host, copied as they are.
  for (const Shape& s : {Shape{5, 2, 9, 10, 11}, Shape{2, 1, 1, 7, 5}, Shape{1, 3, 33, 17, 64}}) {
    auto src = random_values(s.numel(), 111, -50, 400);
    for (size_t i = 0; i < src.size(); i += 5) src[i] = 0.0;
    const int64_t segs = s.n * s.c, len = s.numel() / segs;
    std::vector<double> mom, mmm, mm;
    for (int64_t g = 0; g < segs; ++g) {  // per-channel statistics (any values would do)
      double sum = 0, lo = INFINITY, hi = -INFINITY;
      for (int64_t i = g * len; i < (g + 1) * len; ++i)
        sum += src[i], lo = std::min(lo, src[i]), hi = std::max(hi, src[i]);
      mom.insert(mom.end(), {double(len), sum / len, (hi - lo) / 4});
      mmm.insert(mmm.end(), {sum / len, lo + 10, hi - 10});
    }
    for (int64_t n = 0; n < s.n; ++n) mm.insert(mm.end(), {-50.0 + n, 400.0 - n});
    std::vector<float> rows(s.n * 7, NAN);
    for (int64_t n = 0; n < s.n; ++n) {
      const int K = 3 + static_cast<int>(n % 5);
      for (int k = 0; k < K; ++k)
        rows[n * 7 + k] = k == K - 1 ? 1.0f : std::pow(float(k) / (K - 1), 1.5f);
    }
    DeviceBuffer dmom(mom.size() * 8), dmmm(mmm.size() * 8), dmm(mm.size() * 8),
        drows(rows.size() * 4);
    CUDA_OK(cudaMemcpy(dmom.p, mom.data(), mom.size() * 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dmmm.p, mmm.data(), mmm.size() * 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dmm.p, mm.data(), mm.size() * 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(drows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    auto chain = [&](const double* mo, const double* fm, const double* mi, const float* r) {
      return std::vector<PointwiseStep>{
          PointwiseStep::histogram_shift(mi, r, 7),
          PointwiseStep::rand_std_shift_intensity(mo, -1.0, 2.0, 0.8, 112, true, true),
          PointwiseStep::rand_scale_intensity_fixed_mean(fm, -0.5, 0.5, 0.9, 113, true, true, true),
          PointwiseStep::gaussian_noise(0.0, 1.0, false, 1.0, 114),
          PointwiseStep::random_noise(-1.0, 2.0, 0.5, 1.5, 0.7, 115)};
    };
    const auto hc = chain(mom.data(), mmm.data(), mm.data(), rows.data());
    const auto dc = chain(static_cast<double*>(dmom.p), static_cast<double*>(dmmm.p),
                          static_cast<double*>(dmm.p), static_cast<float*>(drows.p));
    auto run = [&](auto zero, DType t) {
      using T = decltype(zero);
      const std::vector<T> in(src.begin(), src.end());
      std::vector<T> cpu(in.size()), gpu(in.size()), gcpu(in.size()), ggpu(in.size());
      const std::vector<T> go(in.size(), T(1));
      const size_t bytes = in.size() * sizeof(T);
      DeviceBuffer din(bytes), dout(bytes), dgo(bytes), dgi(bytes);
      CUDA_OK(cudaMemcpy(din.p, in.data(), bytes, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dgo.p, go.data(), bytes, cudaMemcpyHostToDevice));
      auto hv = [&](const void* p) {
        return contiguous_view(const_cast<void*>(p), t, Device::CPU, s.n, s.c, s.d, s.h, s.w);
      };
      auto dv = [&](void* p) {
        return contiguous_view(p, t, Device::CUDA, s.n, s.c, s.d, s.h, s.w);
      };
      pointwise_chain(hv(in.data()), hv(cpu.data()), hc.data(), 5);
      pointwise_chain(dv(din.p), dv(dout.p), dc.data(), 5);
      pointwise_chain_backward(hv(go.data()), hv(in.data()), hv(gcpu.data()), hc.data(), 3);
      pointwise_chain_backward(dv(dgo.p), dv(din.p), dv(dgi.p), dc.data(), 3);
      CUDA_OK(cudaMemcpy(gpu.data(), dout.p, bytes, cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(ggpu.data(), dgi.p, bytes, cudaMemcpyDeviceToHost));
      EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), bytes)) << s.str() << " " << dtype_name(t);
      EXPECT_EQ(0, std::memcmp(gcpu.data(), ggpu.data(), bytes))
          << "backward " << s.str() << " " << dtype_name(t);
    };
    run(0.0f, DType::Float32);
    run(0.0, DType::Float64);
    // float32 in, bfloat16 out (the vectorised store path)
    const std::vector<float> in(src.begin(), src.end());
    std::vector<uint16_t> cpu(in.size()), gpu(in.size());
    DeviceBuffer din(in.size() * 4), dout(in.size() * 2);
    CUDA_OK(cudaMemcpy(din.p, in.data(), in.size() * 4, cudaMemcpyHostToDevice));
    pointwise_chain(
        contiguous_view(const_cast<float*>(in.data()), DType::Float32, Device::CPU, s.n, s.c, s.d,
                        s.h, s.w),
        contiguous_view(cpu.data(), DType::BFloat16, Device::CPU, s.n, s.c, s.d, s.h, s.w),
        hc.data(), 4);
    pointwise_chain(contiguous_view(din.p, DType::Float32, Device::CUDA, s.n, s.c, s.d, s.h, s.w),
                    contiguous_view(dout.p, DType::BFloat16, Device::CUDA, s.n, s.c, s.d, s.h, s.w),
                    dc.data(), 4);
    CUDA_OK(cudaMemcpy(gpu.data(), dout.p, in.size() * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), in.size() * 2)) << "bf16 " << s.str();
  }
}
// The launcher's limits: more samples than a grid's y dimension (65535; samples loop), and a
// sample of more than 2^31 elements (64-bit item counters). The noise chain's values depend on
// each element's index (Philox), so a wrong index shows. The large case needs ~6.5 GB on the
// device and ~11 GB on the host; it skips where the device has less than 12 GB.
TEST(IntensityCuda, GridLimitsAnd64BitIndexingTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const std::vector<NamedChain> chains = reference_chains();  // alive while `noise` points in
  const NamedChain* noise = nullptr;
  for (const auto& chain : chains)
    if (chain.name == "noise_sample_std") noise = &chain;
  ASSERT_NE(noise, nullptr);
  const Shape many{70000, 1, 2, 2, 3};
  const auto src = random_values(many.numel(), 41, -200, 300);
  compare_twin<float, float>(*noise, many, DType::Float32, DType::Float32,
                             std::vector<float>(src.begin(), src.end()), false);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_OK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (free_bytes < (size_t(12) << 30)) GTEST_SKIP() << "the > 2^31-element case needs 12 GB";
  const Shape huge{1, 1, 1291, 1291, 1291};  // 2,151,685,171 elements > 2^31
  std::vector<uint8_t> u8(static_cast<size_t>(huge.numel()));
  for (size_t i = 0; i < u8.size(); ++i) u8[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  compare_twin<uint8_t, detail::half_t>(*noise, huge, DType::UInt8, DType::Float16, u8, false);
}

#else
TEST(IntensityCuda, Float32TwinBitIdentical) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
