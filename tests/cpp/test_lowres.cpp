// Simulated low resolution (include/voxaug/lowres.h) against a naive two-step float64
// reference (materialised nearest downsampling, then trilinear / nearest upsampling with
// torch's index rules), plus the CUDA twin (skips without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels/lowres/lowres_dispatch.h"
// launch_cpu.h after the kernels header, which declares cudaStream_t for it
#include "../../kernels/common/launch_cpu.h"
#include "test_support.h"
#include "voxaug/detail/convert.h"
#include "voxaug/error.h"
#include "voxaug/lowres.h"

using namespace voxaug;
using voxaug_test::Vol;

namespace {

// torch nearest_idx (size given): float scale in / out, floor(dst * scale) in float32.
int64_t nearest(int64_t dst, int64_t in, int64_t out) {
  if (in == out) return dst;
  if (out == 2 * in) return dst / 2;
  const float scale = float(in) / float(out);
  const float prod = float(dst) * scale;
  return std::min<int64_t>(int64_t(std::floor(prod)), in - 1);
}

// torch linear taps (source index in float32, as ATen), weights kept in float64.
void linear(int64_t o, int64_t in, int64_t out, bool align, int64_t* i0, int64_t* i1, double* l1) {
  if (in == out) {
    *i0 = *i1 = o;
    *l1 = 0;
    return;
  }
  float real;
  if (align) {
    const float scale = out > 1 ? float(in - 1) / float(out - 1) : 0.0f;
    real = scale * float(o);
  } else {
    const float scale = float(in) / float(out);
    const float t = float(o) + 0.5f;
    const float st = scale * t;
    real = st - 0.5f;
    if (real < 0) real = 0;
  }
  *i0 = std::min<int64_t>(int64_t(std::floor(real)), in - 1);
  *l1 = std::min(std::max(double(real) - double(*i0), 0.0), 1.0);
  *i1 = *i0 + (*i0 < in - 1 ? 1 : 0);
}

// Two steps, float64: low = nearest(x), out = up(low).
std::vector<double> reference(const Vol& v, const std::vector<double>& x,
                              const std::vector<int64_t>& low, bool nearest_up, bool align) {
  std::vector<double> out(v.numel());
  const int64_t S[3] = {v.d, v.h, v.w};
  for (int64_t n = 0; n < v.n; ++n) {
    const int64_t L[3] = {low[3 * n], low[3 * n + 1], low[3 * n + 2]};
    for (int64_t c = 0; c < v.c; ++c) {
      const double* xs = x.data() + (n * v.c + c) * v.d * v.h * v.w;
      std::vector<double> lo(L[0] * L[1] * L[2]);
      for (int64_t a = 0; a < L[0]; ++a)
        for (int64_t b = 0; b < L[1]; ++b)
          for (int64_t k = 0; k < L[2]; ++k)
            lo[(a * L[1] + b) * L[2] + k] =
                xs[(nearest(a, S[0], L[0]) * v.h + nearest(b, S[1], L[1])) * v.w +
                   nearest(k, S[2], L[2])];
      double* os = out.data() + (n * v.c + c) * v.d * v.h * v.w;
      for (int64_t d = 0; d < v.d; ++d)
        for (int64_t h = 0; h < v.h; ++h)
          for (int64_t w = 0; w < v.w; ++w) {
            const int64_t o[3] = {d, h, w};
            int64_t i0[3], i1[3];
            double l1[3];
            for (int a = 0; a < 3; ++a) {
              if (nearest_up) {
                i0[a] = i1[a] = nearest(o[a], L[a], S[a]);
                l1[a] = 0;
              } else {
                linear(o[a], L[a], S[a], align, &i0[a], &i1[a], &l1[a]);
              }
            }
            double acc = 0;
            for (int m = 0; m < 8; ++m) {
              const int64_t id = (m & 4) ? i1[0] : i0[0], ih = (m & 2) ? i1[1] : i0[1],
                            iw = (m & 1) ? i1[2] : i0[2];
              const double wt = ((m & 4) ? l1[0] : 1 - l1[0]) * ((m & 2) ? l1[1] : 1 - l1[1]) *
                                ((m & 1) ? l1[2] : 1 - l1[2]);
              acc += wt * lo[(id * L[1] + ih) * L[2] + iw];
            }
            os[(d * v.h + h) * v.w + w] = acc;
          }
    }
  }
  return out;
}

std::vector<float> random_volume(const Vol& v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 3.0f);
  std::vector<float> x(v.numel());
  for (auto& e : x) e = u(rng);
  return x;
}

void expect_close(const std::vector<float>& out, const std::vector<double>& ref, double tol) {
  ASSERT_EQ(out.size(), ref.size());
  bool nonzero = false;
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FALSE(std::isnan(out[i])) << i;
    ASSERT_NEAR(out[i], ref[i], tol * (1 + std::abs(ref[i]))) << "voxel " << i;
    nonzero = nonzero || out[i] != 0;
  }
  EXPECT_TRUE(nonzero);
}

}  // namespace

TEST(SimulateLowResolution, MatchesTwoStepReferenceAcrossShapesAndModes) {
  struct C {
    Vol v;
    std::vector<int64_t> low;
  };
  const std::vector<C> cases = {
      {{2, 1, 16, 12, 10}, {8, 6, 5, 11, 7, 9}},
      {{1, 2, 17, 9, 13}, {9, 5, 7}},
      {{2, 1, 5, 1, 7}, {5, 1, 7, 1, 1, 1}},  // identity sample, all-ones grid
      {{1, 1, 20, 21, 22}, {13, 10, 17}},     // odd ratios
      {{1, 1, 6, 8, 4}, {12, 16, 8}},         // zoom > 1: nearest's 2x special case
  };
  for (const auto& cs : cases)
    for (bool nearest_up : {false, true})
      for (bool align : {false, true}) {
        const std::vector<float> x = random_volume(cs.v, 7);
        std::vector<float> out(x.size());
        LowResolutionParams p;
        p.low_size = cs.low.data();
        p.upsample = nearest_up ? LowresUpsample::Nearest : LowresUpsample::Trilinear;
        p.align_corners = align;
        simulate_low_resolution(
            voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, cs.v),
            voxaug_test::view(out.data(), DType::Float32, cs.v), p);
        const std::vector<double> xd(x.begin(), x.end());
        expect_close(out, reference(cs.v, xd, cs.low, nearest_up, align), 1e-6);
      }
}

TEST(SimulateLowResolution, IdentityGridCopiesAndStridedAndTypedInputs) {
  const Vol v{2, 2, 9, 10, 11};
  const std::vector<int64_t> low = {9, 10, 11, 4, 7, 6};
  std::vector<float> x = random_volume(v, 3);
  std::vector<float> out(x.size());
  LowResolutionParams p;
  p.low_size = low.data();
  simulate_low_resolution(voxaug_test::view(x.data(), DType::Float32, v),
                          voxaug_test::view(out.data(), DType::Float32, v), p);
  const int64_t s = v.numel() / 2;
  EXPECT_EQ(0, std::memcmp(out.data(), x.data(), s * sizeof(float)));  // sample 0 unchanged
  // Strided input (every other element of a wider buffer) gives the same result.
  std::vector<float> wide(2 * x.size());
  for (size_t i = 0; i < x.size(); ++i) wide[2 * i] = x[i];
  VolumeView sv = voxaug_test::view(wide.data(), DType::Float32, v);
  for (int a = 0; a < 5; ++a) sv.strides[a] *= 2;
  std::vector<float> out2(x.size());
  simulate_low_resolution(sv, voxaug_test::view(out2.data(), DType::Float32, v), p);
  EXPECT_EQ(0, std::memcmp(out.data(), out2.data(), x.size() * sizeof(float)));
  // uint8 in, bfloat16 out.
  std::vector<uint8_t> xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = uint8_t((i * 13) % 256);
  std::vector<uint16_t> ob(x.size());
  simulate_low_resolution(voxaug_test::view(xb.data(), DType::UInt8, v),
                          voxaug_test::view(ob.data(), DType::BFloat16, v), p);
  const std::vector<double> xbd(xb.begin(), xb.end());
  const auto ref = reference(v, xbd, low, false, false);
  for (size_t i = 0; i < ob.size(); ++i)
    ASSERT_NEAR(detail::bf16_to_float(ob[i]), ref[i], 1e-2 * (1 + std::abs(ref[i]))) << i;
}

TEST(SimulateLowResolution, BadArgumentsThrow) {
  const Vol v{1, 1, 4, 4, 4};
  std::vector<float> x(v.numel(), 1.0f), out(v.numel());
  std::vector<int64_t> low = {2, 0, 2};
  LowResolutionParams p;
  p.low_size = low.data();
  try {
    simulate_low_resolution(voxaug_test::view(x.data(), DType::Float32, v),
                            voxaug_test::view(out.data(), DType::Float32, v), p);
    FAIL() << "expected voxaug::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("low_size[0][1]"), std::string::npos) << e.what();
  }
  low[1] = 2;
  EXPECT_THROW(simulate_low_resolution(voxaug_test::view(x.data(), DType::Float32, v),
                                       voxaug_test::view(x.data(), DType::Float32, v), p),
               Error);
  std::vector<int32_t> oi(v.numel());
  EXPECT_THROW(simulate_low_resolution(voxaug_test::view(x.data(), DType::Float32, v),
                                       voxaug_test::view(oi.data(), DType::Int32, v), p),
               Error);
}

#if VOXAUG_WITH_CUDA
TEST(SimulateLowResolutionCuda, MatchesCpuTwinBitForBit) {
  if (!voxaug_test::have_device()) GTEST_SKIP() << "no CUDA device: CUDA twin not run";
  const Vol v{3, 2, 19, 24, 17};
  const std::vector<int64_t> low = {10, 12, 9, 19, 24, 17, 13, 7, 16};
  const std::vector<float> x = random_volume(v, 8);
  voxaug_test::DeviceBuffer dx(x), dl(low), dout(x.size() * 4);
  for (bool nearest_up : {false, true})
    for (bool align : {false, true}) {
      std::vector<float> cpu(x.size());
      LowResolutionParams p;
      p.low_size = low.data();
      p.upsample = nearest_up ? LowresUpsample::Nearest : LowresUpsample::Trilinear;
      p.align_corners = align;
      simulate_low_resolution(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                              voxaug_test::view(cpu.data(), DType::Float32, v), p);
      p.low_size = dl.as<int64_t>();
      simulate_low_resolution(voxaug_test::view(dx.p, DType::Float32, v, Device::CUDA),
                              voxaug_test::view(dout.p, DType::Float32, v, Device::CUDA), p);
      CUDA_OK(cudaDeviceSynchronize());
      const auto gpu = dout.to_host<float>(x.size());
      EXPECT_EQ(0, std::memcmp(gpu.data(), cpu.data(), x.size() * sizeof(float)));
    }
}
#endif

// The CUDA backend's per-voxel functor, run on the host by the generic launcher, against the CPU
// twin's cached-row path: the logic CUDA runs is checked even without a device.
TEST(SimulateLowResolution, PerVoxelFunctorOnHostEqualsCpuTwin) {
  const Vol v{3, 2, 13, 17, 11};
  const std::vector<int64_t> low = {7, 9, 6, 13, 17, 11, 26, 5, 22};
  const std::vector<float> x = random_volume(v, 21);
  for (bool nearest_up : {false, true})
    for (bool align : {false, true}) {
      std::vector<float> twin(x.size()), functor(x.size());
      LowResolutionParams p;
      p.low_size = low.data();
      p.upsample = nearest_up ? LowresUpsample::Nearest : LowresUpsample::Trilinear;
      p.align_corners = align;
      const VolumeView in = voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v);
      simulate_low_resolution(in, voxaug_test::view(twin.data(), DType::Float32, v), p);
      detail::LowresLaunch l;
      l.in = x.data();
      l.out = functor.data();
      l.in_dtype = l.out_dtype = DType::Float32;
      for (int a = 0; a < 5; ++a) l.in_stride[a] = in.strides[a];
      l.out_ix = detail::make_indexer(voxaug_test::view(functor.data(), DType::Float32, v));
      l.batch = v.n;
      l.size[0] = v.c, l.size[1] = v.d, l.size[2] = v.h, l.size[3] = v.w;
      l.low_size = low.data();
      l.nearest_up = nearest_up;
      l.align_corners = align;
      detail::CpuLauncher::launch(detail::make_lowres_functor<float, float>(l), v.n, nullptr);
      EXPECT_EQ(0, std::memcmp(twin.data(), functor.data(), x.size() * sizeof(float)))
          << "nearest " << nearest_up << " align " << align;
    }
}
