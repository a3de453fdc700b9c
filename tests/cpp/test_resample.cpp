// resample: CPU path vs a float64 naive reference (trilinear written from the definition,
// grid_sample's padding rules), exact cases, and the CUDA path vs its CPU twin.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"
#include "voxaug/deform.h"
#include "voxaug/error.h"
#include "voxaug/resample.h"
#include "voxaug/intensity.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace voxaug;
using namespace voxaug_test;

namespace {

std::vector<double> random_matrices(int64_t n, const Vol& in, const Vol& out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> m(12 * n);
  const double cin[3] = {(in.d - 1) / 2.0, (in.h - 1) / 2.0, (in.w - 1) / 2.0};
  const double cout[3] = {(out.d - 1) / 2.0, (out.h - 1) / 2.0, (out.w - 1) / 2.0};
  for (int64_t s = 0; s < n; ++s) {
    double a[3][3];
    for (int r = 0; r < 3; ++r)
      for (int k = 0; k < 3; ++k) a[r][k] = (r == k ? 1.0 : 0.0) + 0.35 * u(rng);
    for (int r = 0; r < 3; ++r) {
      double b = cin[r] + 2.5 * u(rng);
      for (int k = 0; k < 3; ++k) {
        m[12 * s + 4 * r + k] = a[r][k];
        b -= a[r][k] * cout[k];
      }
      m[12 * s + 4 * r + 3] = b;
    }
  }
  return m;
}

// grid_sample's padding of one coordinate, in float64.
double padded(double x, int64_t size, Padding pad, bool align_corners) {
  if (pad == Padding::Reflection) {
    const double lo = align_corners ? 0.0 : -0.5, hi = align_corners ? size - 1.0 : size - 0.5;
    const double span = hi - lo;
    if (span <= 0) {
      x = 0;
    } else {
      double t = std::fabs(x - lo);
      const double flips = std::floor(t / span);
      const double extra = std::fmod(t, span);
      x = (static_cast<int64_t>(flips) % 2 == 0) ? lo + extra : hi - extra;
    }
  }
  if (pad == Padding::Border || pad == Padding::Reflection)
    x = std::min(std::max(x, 0.0), size - 1.0);
  return x;
}

double reference_linear(const std::vector<double>& in, const Vol& iv, int64_t n, int64_t c,
                        const double p[3], Padding pad, double fill, bool ac) {
  const int64_t sz[3] = {iv.d, iv.h, iv.w};
  double x[3];
  for (int a = 0; a < 3; ++a) x[a] = padded(p[a], sz[a], pad, ac);
  double acc = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double w = 1;
    int64_t idx[3];
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      const int bit = (corner >> (2 - a)) & 1;
      const double f = std::floor(x[a]);
      idx[a] = static_cast<int64_t>(f) + bit;
      w *= bit ? (x[a] - f) : (1 - (x[a] - f));
      inside = inside && idx[a] >= 0 && idx[a] < sz[a];
    }
    const double v =
        inside ? in[(((n * iv.c + c) * iv.d + idx[0]) * iv.h + idx[1]) * iv.w + idx[2]] : fill;
    acc += w * v;
  }
  return acc;
}

}  // namespace

TEST(ResampleCpu, LinearMatchesFloat64ReferenceForEveryPadding) {
  const Vol iv{3, 2, 7, 9, 8}, ov{3, 2, 10, 6, 9};
  std::mt19937 rng(3);
  std::normal_distribution<double> nd;
  std::vector<double> in(iv.numel());
  for (auto& v : in) v = nd(rng);
  const auto m = random_matrices(iv.n, iv, ov, 5);
  for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant}) {
    for (bool ac : {false, true}) {
      std::vector<double> out(ov.numel());
      ResampleTarget t{view(in.data(), DType::Float64, iv),
                       view(out.data(), DType::Float64, ov),
                       Interp::Linear,
                       pad,
                       2.25,
                       {}};
      resample(&t, 1, m.data(), ac);
      double worst = 0;
      for (int64_t n = 0; n < ov.n; ++n)
        for (int64_t c = 0; c < ov.c; ++c)
          for (int64_t d = 0; d < ov.d; ++d)
            for (int64_t h = 0; h < ov.h; ++h)
              for (int64_t w = 0; w < ov.w; ++w) {
                double p[3];
                for (int r = 0; r < 3; ++r) {
                  const double* row = &m[12 * n + 4 * r];
                  p[r] = row[0] * d + row[1] * h + row[2] * w + row[3];
                }
                const double ref = reference_linear(in, iv, n, c, p, pad,
                                                    pad == Padding::Constant ? 2.25 : 0.0, ac);
                const double got = out[(((n * ov.c + c) * ov.d + d) * ov.h + h) * ov.w + w];
                worst = std::max(worst, std::fabs(got - ref));
              }
      EXPECT_LT(worst, 1e-12) << "padding " << static_cast<int>(pad) << " align_corners " << ac;
    }
  }
}

TEST(ResampleCpu, NearestCopiesLabelsExactly) {
  const Vol iv{2, 1, 6, 7, 5}, ov{2, 1, 8, 8, 8};
  std::vector<int64_t> lab(iv.numel());
  for (int64_t i = 0; i < iv.numel(); ++i) lab[i] = (i * 7919) % 116 + 1;
  std::vector<int64_t> out(ov.numel(), -1);
  const auto m = random_matrices(iv.n, iv, ov, 9);
  ResampleTarget t{view(lab.data(), DType::Int64, iv),
                   view(out.data(), DType::Int64, ov),
                   Interp::Nearest,
                   Padding::Constant,
                   255,
                   {}};
  resample(&t, 1, m.data(), false);
  int64_t filled = 0;
  for (int64_t v : out) {
    EXPECT_TRUE(v == 255 || (v >= 1 && v <= 116)) << v;
    filled += v == 255;
  }
  EXPECT_GT(filled, 0);
  EXPECT_LT(filled, ov.numel());
}

// group: K outputs per input (patches cut and transformed in one gather). Output n reads input
// n / K: the float64 reference is the plain definition evaluated on that input; labels by
// nearest with the same map must be exact copies of some input voxel or the pad value.
TEST(ResampleCpu, GroupedReadsInputNOverGroup) {
  const int64_t K = 3;
  const Vol iv{2, 2, 11, 9, 13}, ov{2 * K, 2, 6, 7, 5}, lv{2, 1, 11, 9, 13}, lo{2 * K, 1, 6, 7, 5};
  std::mt19937 rng(21);
  std::normal_distribution<double> nd;
  std::vector<double> in(iv.numel());
  for (auto& v : in) v = nd(rng);
  std::vector<int32_t> lab(lv.numel());
  for (int64_t i = 0; i < lv.numel(); ++i) lab[i] = static_cast<int32_t>(i);  // voxel ids
  auto m = random_matrices(ov.n, iv, ov, 22);
  for (int64_t n = 0; n < ov.n; ++n)  // crop starts spread over the volume
    for (int r = 0; r < 3; ++r) m[12 * n + 4 * r + 3] += static_cast<double>((n * 5 + r * 3) % 4) - 1.5;
  for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection}) {
    std::vector<double> out(ov.numel());
    std::vector<int32_t> lout(lo.numel());
    ResampleTarget t[2] = {{view(in.data(), DType::Float64, iv), view(out.data(), DType::Float64, ov),
                            Interp::Linear, pad, 0.0, {}, K},
                           {view(lab.data(), DType::Int32, lv), view(lout.data(), DType::Int32, lo),
                            Interp::Nearest, Padding::Zeros, 0.0, {}, K}};
    resample(t, 2, m.data(), false);
    double worst = 0;
    for (int64_t n = 0; n < ov.n; ++n)
      for (int64_t c = 0; c < ov.c; ++c)
        for (int64_t d = 0; d < ov.d; ++d)
          for (int64_t h = 0; h < ov.h; ++h)
            for (int64_t w = 0; w < ov.w; ++w) {
              double p[3];
              for (int r = 0; r < 3; ++r) {
                const double* row = &m[12 * n + 4 * r];
                p[r] = row[0] * d + row[1] * h + row[2] * w + row[3];
              }
              const double ref = reference_linear(in, iv, n / K, c, p, pad, 0.0, false);
              const double got = out[(((n * ov.c + c) * ov.d + d) * ov.h + h) * ov.w + w];
              worst = std::max(worst, std::fabs(got - ref));
              if (c == 0) {  // the label: the nearest voxel of input n / K (ids say which)
                const int32_t id = lout[((n * lo.d + d) * lo.h + h) * lo.w + w];
                int64_t q[3];
                bool inside = true;
                for (int r = 0; r < 3; ++r) {
                  q[r] = static_cast<int64_t>(std::nearbyint(p[r]));
                  inside = inside && q[r] >= 0 && q[r] < (r == 0 ? lv.d : r == 1 ? lv.h : lv.w);
                }
                const int64_t want = inside ? ((n / K * lv.d + q[0]) * lv.h + q[1]) * lv.w + q[2] : 0;
                EXPECT_EQ(id, want) << "patch " << n << " at " << d << "," << h << "," << w;
              }
            }
    EXPECT_LT(worst, 1e-12) << "padding " << static_cast<int>(pad);
  }
}

TEST(ResampleCpu, BadArgumentsGiveNamedErrors) {
  const Vol v{1, 1, 2, 2, 2};
  std::vector<float> a(8), b(8);
  std::vector<int32_t> l(8);
  const double eye[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  auto msg = [&](ResampleTarget t, const double* m) -> std::string {
    try {
      resample(&t, 1, m, false);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg({view(l.data(), DType::Int32, v),
                 view(b.data(), DType::Float32, v),
                 Interp::Linear,
                 Padding::Zeros,
                 0,
                 {}},
                eye)
                .find("linear interpolation needs floating tensors"),
            std::string::npos);
  EXPECT_NE(msg({view(a.data(), DType::Float32, v),
                 view(l.data(), DType::Int32, v),
                 Interp::Nearest,
                 Padding::Zeros,
                 0,
                 {}},
                eye)
                .find("output dtype must equal input dtype"),
            std::string::npos);
  const double bad[12] = {1, 0, 0, 0, 0, NAN, 0, 0, 0, 0, 1, 0};
  EXPECT_NE(msg({view(a.data(), DType::Float32, v),
                 view(b.data(), DType::Float32, v),
                 Interp::Linear,
                 Padding::Zeros,
                 0,
                 {}},
                bad)
                .find("matrices must be finite"),
            std::string::npos);
  const Vol two{2, 1, 2, 2, 2};
  std::vector<float> c(16);
  EXPECT_NE(msg({view(a.data(), DType::Float32, v), view(c.data(), DType::Float32, two),
                 Interp::Linear, Padding::Zeros, 0, {}, 0},
                eye)
                .find("group must be >= 1"),
            std::string::npos);
  EXPECT_NE(msg({view(a.data(), DType::Float32, v), view(c.data(), DType::Float32, two),
                 Interp::Linear, Padding::Zeros, 0, {}, 3},
                eye)
                .find("divided by its group"),
            std::string::npos);
}

#if VOXAUG_WITH_CUDA
TEST(ResampleCuda, TwinBitIdenticalImageAndLabels) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol iv{4, 2, 19, 23, 17}, ov{4, 2, 21, 16, 25}, lv{4, 1, 19, 23, 17}, lo{4, 1, 21, 16, 25};
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  std::vector<uint8_t> lab(lv.numel());
  for (auto& v : lab) v = static_cast<uint8_t>(rng() % 117);
  const auto m = random_matrices(iv.n, iv, ov, 12);
  void *dimg, *dlab, *dm, *dout, *dlout;
  ASSERT_EQ(cudaMalloc(&dimg, img.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dlab, lab.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dm, m.size() * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, ov.numel() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dlout, lo.numel()), cudaSuccess);
  cudaMemcpy(dimg, img.data(), img.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dlab, lab.data(), lab.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dm, m.data(), m.size() * 8, cudaMemcpyHostToDevice);
  for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant}) {
    for (bool ac : {false, true}) {
      std::vector<float> cpu(ov.numel()), gpu(ov.numel());
      std::vector<uint8_t> lcpu(lo.numel()), lgpu(lo.numel());
      ResampleTarget h[2] = {{view(img.data(), DType::Float32, iv),
                              view(cpu.data(), DType::Float32, ov),
                              Interp::Linear,
                              pad,
                              1.5,
                              {}},
                             {view(lab.data(), DType::UInt8, lv),
                              view(lcpu.data(), DType::UInt8, lo),
                              Interp::Nearest,
                              pad,
                              200,
                              {}}};
      ResampleTarget g[2] = {{view(dimg, DType::Float32, iv, Device::CUDA),
                              view(dout, DType::Float32, ov, Device::CUDA),
                              Interp::Linear,
                              pad,
                              1.5,
                              {}},
                             {view(dlab, DType::UInt8, lv, Device::CUDA),
                              view(dlout, DType::UInt8, lo, Device::CUDA),
                              Interp::Nearest,
                              pad,
                              200,
                              {}}};
      resample(h, 2, m.data(), ac);
      resample(g, 2, static_cast<const double*>(dm), ac);
      ASSERT_EQ(cudaMemcpy(gpu.data(), dout, gpu.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(lgpu.data(), dlout, lgpu.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * 4))
          << static_cast<int>(pad) << ac;
      EXPECT_EQ(lcpu, lgpu) << static_cast<int>(pad) << ac;
    }
  }
  cudaFree(dimg);
  cudaFree(dlab);
  cudaFree(dm);
  cudaFree(dout);
  cudaFree(dlout);
}
#endif

#if VOXAUG_WITH_CUDA
TEST(ResampleCuda, GroupedTwinBitIdentical) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const int64_t K = 4;
  const Vol iv{2, 1, 30, 26, 28}, ov{2 * K, 1, 16, 16, 16};
  std::mt19937 rng(31);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  std::vector<uint8_t> lab(iv.numel());
  for (auto& v : lab) v = static_cast<uint8_t>(rng() % 14);
  auto m = random_matrices(ov.n, iv, ov, 32);
  for (int64_t n = 0; n < ov.n; n += 2) {  // every other patch: flip + integer start (exact path)
    const double e[12] = {-1, 0, 0, 15.0 + n, 0, 0, 1, 3, 0, 1, 0, 7};
    std::copy(e, e + 12, m.begin() + 12 * n);
  }
  void *dimg, *dlab, *dm, *dout, *dlout;
  CUDA_OK(cudaMalloc(&dimg, img.size() * 4));
  CUDA_OK(cudaMalloc(&dlab, lab.size()));
  CUDA_OK(cudaMalloc(&dm, m.size() * 8));
  CUDA_OK(cudaMalloc(&dout, ov.numel() * 4));
  CUDA_OK(cudaMalloc(&dlout, ov.numel()));
  CUDA_OK(cudaMemcpy(dimg, img.data(), img.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dlab, lab.data(), lab.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dm, m.data(), m.size() * 8, cudaMemcpyHostToDevice));
  std::vector<float> cpu(ov.numel()), gpu(ov.numel());
  std::vector<uint8_t> lcpu(ov.numel()), lgpu(ov.numel());
  ResampleTarget h[2] = {{view(img.data(), DType::Float32, iv), view(cpu.data(), DType::Float32, ov),
                          Interp::Linear, Padding::Zeros, 0.0, {}, K},
                         {view(lab.data(), DType::UInt8, iv), view(lcpu.data(), DType::UInt8, ov),
                          Interp::Nearest, Padding::Zeros, 0.0, {}, K}};
  ResampleTarget g[2] = {{view(dimg, DType::Float32, iv, Device::CUDA),
                          view(dout, DType::Float32, ov, Device::CUDA), Interp::Linear,
                          Padding::Zeros, 0.0, {}, K},
                         {view(dlab, DType::UInt8, iv, Device::CUDA),
                          view(dlout, DType::UInt8, ov, Device::CUDA), Interp::Nearest,
                          Padding::Zeros, 0.0, {}, K}};
  resample(h, 2, m.data(), false);
  resample(g, 2, static_cast<const double*>(dm), false);
  CUDA_OK(cudaMemcpy(gpu.data(), dout, gpu.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(lgpu.data(), dlout, lgpu.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * 4));
  EXPECT_EQ(lcpu, lgpu);
  cudaFree(dimg);
  cudaFree(dlab);
  cudaFree(dm);
  cudaFree(dout);
  cudaFree(dlout);
}
#endif

#if VOXAUG_WITH_CUDA
// Backward on CUDA vs the CPU twin: the scatter and the block sums add in a different order
// (atomics), so equal within float rounding rather than bitwise.
TEST(ResampleCuda, BackwardTwinWithinRounding) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol iv{3, 2, 11, 9, 10}, ov{3, 2, 8, 12, 9};
  std::mt19937 rng(21);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel()), go(ov.numel());
  for (auto& v : img) v = nd(rng);
  for (auto& v : go) v = nd(rng);
  const auto m = random_matrices(iv.n, iv, ov, 22);
  void *dimg, *dgo, *dm, *dgi, *dgm;
  ASSERT_EQ(cudaMalloc(&dimg, img.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dgo, go.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dm, m.size() * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dgi, img.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dgm, m.size() * 8), cudaSuccess);
  cudaMemcpy(dimg, img.data(), img.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dgo, go.data(), go.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dm, m.data(), m.size() * 8, cudaMemcpyHostToDevice);
  for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant}) {
    ResampleTarget h{view(img.data(), DType::Float32, iv),
                     view(go.data(), DType::Float32, ov),
                     Interp::Linear,
                     pad,
                     0.5,
                     {}};
    ResampleTarget g{view(dimg, DType::Float32, iv, Device::CUDA),
                     view(dgo, DType::Float32, ov, Device::CUDA),
                     Interp::Linear,
                     pad,
                     0.5,
                     {}};
    std::vector<float> gi_cpu(img.size()), gi_gpu(img.size());
    std::vector<double> gm_cpu(m.size()), gm_gpu(m.size());
    resample_backward_input(h, m.data(), false, gi_cpu.data());
    resample_backward_input(g, static_cast<const double*>(dm), false, dgi);
    resample_backward_matrix(&h, 1, m.data(), false, gm_cpu.data());
    resample_backward_matrix(&g, 1, static_cast<const double*>(dm), false,
                             static_cast<double*>(dgm));
    ASSERT_EQ(cudaMemcpy(gi_gpu.data(), dgi, gi_gpu.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(gm_gpu.data(), dgm, gm_gpu.size() * 8, cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (size_t i = 0; i < gi_cpu.size(); ++i) ASSERT_NEAR(gi_cpu[i], gi_gpu[i], 1e-4) << i;
    for (size_t i = 0; i < gm_cpu.size(); ++i)
      ASSERT_NEAR(gm_cpu[i], gm_gpu[i], 1e-6 * std::max(1.0, std::fabs(gm_cpu[i]))) << i;
  }
  cudaFree(dimg);
  cudaFree(dgo);
  cudaFree(dm);
  cudaFree(dgi);
  cudaFree(dgm);
}
#endif

TEST(ResampleCpu, BackwardInputIsTheAdjointOfForward) {
  // <resample(x), y> == <x, backward_input(y)> for the linear map x -> resample(x).
  const Vol iv{2, 2, 6, 7, 5}, ov{2, 2, 7, 5, 6};
  std::mt19937 rng(31);
  std::normal_distribution<double> nd;
  std::vector<double> x(iv.numel()), y(ov.numel()), fx(ov.numel()), by(iv.numel());
  for (auto& v : x) v = nd(rng);
  for (auto& v : y) v = nd(rng);
  const auto m = random_matrices(iv.n, iv, ov, 32);
  for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection}) {
    for (Interp mode : {Interp::Linear, Interp::Nearest}) {
      ResampleTarget f{view(x.data(), DType::Float64, iv),
                       view(fx.data(), DType::Float64, ov),
                       mode,
                       pad,
                       0,
                       {}};
      resample(&f, 1, m.data(), true);
      ResampleTarget b{
          view(x.data(), DType::Float64, iv), view(y.data(), DType::Float64, ov), mode, pad, 0, {}};
      resample_backward_input(b, m.data(), true, by.data());
      double lhs = 0, rhs = 0;
      for (size_t i = 0; i < fx.size(); ++i) lhs += fx[i] * y[i];
      for (size_t i = 0; i < x.size(); ++i) rhs += x[i] * by[i];
      EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, std::fabs(lhs)))
          << "padding " << static_cast<int>(pad) << " mode " << static_cast<int>(mode);
    }
  }
}

#if VOXAUG_WITH_CUDA
// Every B-spline order and padding: the device prefilter and gather equal the host's.
TEST(ResampleCuda, CubicTwinBitIdentical) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol iv{2, 2, 13, 9, 11}, ov{2, 2, 10, 12, 9};
  const int64_t P = kBSplinePad;
  const Vol cv{2, 2, 13 + 2 * P, 9 + 2 * P, 11 + 2 * P};
  std::mt19937 rng(41);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  const auto m = random_matrices(iv.n, iv, ov, 42);
  void *dimg, *dm, *dcoeff, *dout;
  ASSERT_EQ(cudaMalloc(&dimg, img.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dm, m.size() * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dcoeff, cv.numel() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, ov.numel() * 4), cudaSuccess);
  cudaMemcpy(dimg, img.data(), img.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dm, m.data(), m.size() * 8, cudaMemcpyHostToDevice);
  for (Interp mode : {Interp::Cubic, Interp::Quadratic, Interp::Quartic, Interp::Quintic})
    for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant,
                        Padding::Cutoff}) {
      for (bool ac : {false, true}) {
        std::vector<float> coeff(cv.numel()), out(ov.numel()), gcoeff(cv.numel()), gout(ov.numel());
        ResampleTarget h{view(img.data(), DType::Float32, iv),
                         view(out.data(), DType::Float32, ov),
                         mode,
                         pad,
                         0.25,
                         view(coeff.data(), DType::Float32, cv)};
        ResampleTarget g{view(dimg, DType::Float32, iv, Device::CUDA),
                         view(dout, DType::Float32, ov, Device::CUDA),
                         mode,
                         pad,
                         0.25,
                         view(dcoeff, DType::Float32, cv, Device::CUDA)};
        bspline_prefilter(h.in, h.coeff, pad, 0.25, ac, spline_order(mode));
        bspline_prefilter(g.in, g.coeff, pad, 0.25, ac, spline_order(mode));
        resample(&h, 1, m.data(), ac);
        resample(&g, 1, static_cast<const double*>(dm), ac);
        ASSERT_EQ(cudaMemcpy(gcoeff.data(), dcoeff, gcoeff.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_EQ(cudaMemcpy(gout.data(), dout, gout.size() * 4, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        EXPECT_EQ(0, std::memcmp(coeff.data(), gcoeff.data(), coeff.size() * 4));
        EXPECT_EQ(0, std::memcmp(out.data(), gout.data(), out.size() * 4));
      }
    }
  cudaFree(dimg);
  cudaFree(dm);
  cudaFree(dcoeff);
  cudaFree(dout);
}
#endif

#include "../../kernels/resample/resample_dispatch.h"
#include "voxaug/detail/resample.h"

namespace {
// ResampleForward::voxel over every output voxel of `batch` samples, with Features fixed.
template <unsigned Features>
bool run_body_variant(const detail::ResampleForward<float, Features>& f, int64_t batch) {
  bool all_exact = true;
  for (int64_t n = 0; n < batch; ++n) {
    typename detail::ResampleForward<float, Features>::State st;
    f.begin_sample(n, st);
    all_exact = all_exact && st.exact;
    for (int64_t d = 0; d < f.p.out_size[0]; ++d)
      for (int64_t h = 0; h < f.p.out_size[1]; ++h)
        for (int64_t w = 0; w < f.p.out_size[2]; ++w) f.voxel(st, n, d, h, w);
  }
  return all_exact;
}

// The per-voxel body the CUDA kernel runs (ResampleForward::voxel of the variant the launcher
// picks, with_resample_forward), evaluated on the host over every output voxel of `batch`
// samples: the reference of the host's row paths. Returns whether every sample took the exact
// (signed-permutation) path.
bool run_device_body(const detail::ResampleParams& p, int64_t batch) {
  bool all_exact = true;
  detail::with_resample_forward<float>(p, [&](const auto& f) { all_exact = run_body_variant(f, batch); });
  return all_exact;
}

std::vector<float> device_body_float32(std::vector<float>& img, const Vol& iv, const Vol& ov,
                                       const std::vector<double>& m, Interp mode, Padding pad,
                                       double pad_value, bool ac, bool* all_exact,
                                       const detail::KField* field = nullptr) {
  std::vector<float> voxel(ov.numel());
  detail::ResampleParams p{};
  if (field != nullptr) p.field = *field;
  p.num_targets = 1;
  p.align_corners = ac;
  p.matrices = m.data();
  p.out_size[0] = ov.d, p.out_size[1] = ov.h, p.out_size[2] = ov.w;
  detail::KTarget& k = p.t[0];
  k.in = img.data();
  k.out = voxel.data();
  k.in_dtype = k.out_dtype = DType::Float32;
  k.mode = static_cast<int32_t>(mode);
  k.padding = static_cast<int32_t>(pad);
  k.pad_value = pad_value;
  k.channels = iv.c;
  k.elem_size = 4;
  const VolumeView vi = view(img.data(), DType::Float32, iv),
                   vo = view(voxel.data(), DType::Float32, ov);
  for (int a = 0; a < 3; ++a) k.in_size[a] = vi.shape[a + 2];
  for (int a = 0; a < 5; ++a) k.in_stride[a] = vi.strides[a], k.out_stride[a] = vo.strides[a];
  *all_exact = run_device_body(p, ov.n);
  return voxel;
}
}  // namespace

// The host's row path (kernels/resample/resample_cpu.h) must equal the per-voxel body the
// CUDA kernel runs (ResampleForward::voxel), bit for bit.
// Linear and nearest, random maps and maps full of half-voxel ties (nearest's rounding rule),
// plain and through a B-spline displacement field (the row path's per-row tap contraction).
TEST(ResampleCpu, RowPathEqualsPerVoxelDeviceBody) {
  const Vol iv{2, 2, 9, 11, 10}, ov{2, 2, 12, 7, 13};
  std::mt19937 rng(51);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  const auto random_m = random_matrices(iv.n, iv, ov, 52);
  std::vector<double> ties(12 * iv.n, 0.0);  // x / 2 - 1.5 per axis: every other point a tie
  for (int64_t n = 0; n < iv.n; ++n)
    for (int r = 0; r < 3; ++r) ties[12 * n + 5 * r] = 0.5, ties[12 * n + 4 * r + 3] = -1.5 + r;
  std::vector<float> coeff(iv.n * 3 * 5 * 4 * 6);
  for (auto& v : coeff) v = 1.5f * nd(rng);
  detail::KField field{};
  field.kind = static_cast<int32_t>(FieldKind::BSpline);
  field.dtype = DType::Float32;
  field.data = coeff.data();
  const int64_t ksize[3] = {5, 4, 6}, osz[3] = {ov.d, ov.h, ov.w};
  for (int a = 0; a < 3; ++a) {
    field.size[a] = ksize[a];
    field.scale[a] = double(ksize[a] - 3) / (osz[a] - 1);
    field.offset[a] = 1.0;
  }
  const int64_t fstride[5] = {3 * 5 * 4 * 6, 5 * 4 * 6, 4 * 6, 6, 1};
  for (int a = 0; a < 5; ++a) field.stride[a] = fstride[a];
  DeformField df;
  df.kind = FieldKind::BSpline;
  df.field = contiguous_view(coeff.data(), DType::Float32, Device::CPU, iv.n, 3, 5, 4, 6);
  for (int a = 0; a < 3; ++a) df.scale[a] = field.scale[a], df.offset[a] = field.offset[a];
  const std::vector<double>* const maps[] = {&random_m, &ties};
  for (const auto* m : maps)
    for (bool deformed : {false, true})
      for (Interp mode : {Interp::Linear, Interp::Nearest})
        for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant,
                            Padding::Cutoff}) {
          for (bool ac : {false, true}) {
            std::vector<float> row(ov.numel());
            ResampleTarget t{view(img.data(), DType::Float32, iv),
                             view(row.data(), DType::Float32, ov),
                             mode,
                             pad,
                             0.75,
                             {}};
            if (deformed)
              resample_deformed(&t, 1, m->data(), df, ac);
            else
              resample(&t, 1, m->data(), ac);
            bool exact = false;
            const std::vector<float> voxel = device_body_float32(
                img, iv, ov, *m, mode, pad, 0.75, ac, &exact, deformed ? &field : nullptr);
            EXPECT_EQ(0, std::memcmp(row.data(), voxel.data(), row.size() * 4))
                << "padding " << static_cast<int>(pad) << " align_corners " << ac << " mode "
                << static_cast<int>(mode) << " deformed " << deformed << " ties " << (m == &ties);
          }
        }
}

// The lean forward variants the CUDA launcher picks (with_resample_forward: plain maps, post
// steps, dense / separable fields; the pre-contracted rows in test_deform.cpp) give the full
// body's bits, and the dispatch picks the leanest one that covers the launch (a B-spline target
// or a raw B-spline field: all). The post variant runs in ResampleCpu.PostSteps* below.
TEST(ResampleForwardVariants, LeanVariantsEqualTheFullBodyAndDispatch) {
  const Vol iv{2, 2, 9, 8, 10}, ov{2, 2, 7, 9, 6};
  std::mt19937 rng(91);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  std::vector<uint8_t> lab(iv.numel());
  for (auto& v : lab) v = static_cast<uint8_t>(rng() % 7);
  const auto m = random_matrices(iv.n, iv, ov, 92);
  const Vol fo{ov.n, 3, ov.d, ov.h, ov.w};
  std::vector<float> dense(fo.numel()), sep(ov.n * 3 * 9);
  for (auto& v : dense) v = 1.5f * nd(rng);
  for (auto& v : sep) v = 1.5f * nd(rng);
  enum class Field { None, Dense, Separable, Raw };
  for (Field fk : {Field::None, Field::Dense, Field::Separable, Field::Raw})
    for (Interp mode : {Interp::Linear, Interp::Nearest}) {
      std::vector<float> out_full(ov.numel()), out_var(ov.numel());
      std::vector<uint8_t> lab_full(ov.numel()), lab_var(ov.numel());
      detail::ResampleParams p{};
      p.num_targets = 2;
      p.matrices = m.data();
      p.out_size[0] = ov.d, p.out_size[1] = ov.h, p.out_size[2] = ov.w;
      const VolumeView vi = view(img.data(), DType::Float32, iv);
      const VolumeView vo = view(out_full.data(), DType::Float32, ov);
      for (int k = 0; k < 2; ++k) {
        detail::KTarget& t = p.t[k];
        t.in = k == 0 ? static_cast<const void*>(img.data()) : static_cast<const void*>(lab.data());
        t.in_dtype = t.out_dtype = k == 0 ? DType::Float32 : DType::UInt8;
        t.mode = static_cast<int32_t>(k == 0 ? mode : Interp::Nearest);
        t.padding = static_cast<int32_t>(k == 0 ? Padding::Reflection : Padding::Zeros);
        t.channels = iv.c;
        t.elem_size = k == 0 ? 4 : 1;
        for (int a = 0; a < 3; ++a) t.in_size[a] = vi.shape[a + 2];
        for (int a = 0; a < 5; ++a) t.in_stride[a] = vi.strides[a], t.out_stride[a] = vo.strides[a];
      }
      if (fk == Field::Dense || fk == Field::Raw) {
        p.field.kind = static_cast<int32_t>(fk == Field::Dense ? FieldKind::Dense : FieldKind::BSpline);
        p.field.dtype = DType::Float32;
        p.field.data = dense.data();
        const int64_t sz[3] = {ov.d, ov.h, ov.w};
        for (int a = 0; a < 3; ++a) {
          p.field.size[a] = sz[a];
          p.field.scale[a] = fk == Field::Raw ? double(sz[a] - 3) / (sz[a] - 1) : 1.0;
          p.field.offset[a] = fk == Field::Raw ? 1.0 : 0.0;
        }
        const int64_t st[5] = {3 * ov.d * ov.h * ov.w, ov.d * ov.h * ov.w, ov.h * ov.w, ov.w, 1};
        for (int a = 0; a < 5; ++a) p.field.stride[a] = st[a];
      } else if (fk == Field::Separable) {
        p.field.kind = static_cast<int32_t>(FieldKind::Separable);
        p.field.dtype = DType::Float32;
        p.field.data = sep.data();
        p.field.size[0] = 9, p.field.size[1] = p.field.size[2] = 1;
        const int64_t st[5] = {27, 9, 1, 0, 0};
        for (int a = 0; a < 5; ++a) p.field.stride[a] = st[a];
      }
      const unsigned want = (fk == Field::None ? 0u : detail::kResampleField) |
                            (fk == Field::Raw ? detail::kResampleRawBSpline : 0u);
      EXPECT_EQ(want, detail::resample_features(p));
      for (Interp spline : {Interp::Quadratic, Interp::Cubic, Interp::Quartic, Interp::Quintic}) {
        detail::ResampleParams q = p;  // a B-spline target needs the full variant
        q.t[1].mode = static_cast<int32_t>(spline);
        EXPECT_EQ(want | detail::kResampleSpline, detail::resample_features(q));
      }
      detail::ResampleParams q = p;  // post steps on a plain map: the post variant
      q.post_target = 0, q.num_post = 1;
      EXPECT_EQ(want | detail::kResamplePost, detail::resample_features(q));
      p.t[0].out = out_full.data(), p.t[1].out = lab_full.data();
      run_body_variant(detail::ResampleForward<float, detail::kResampleAllFeatures>{p}, iv.n);
      p.t[0].out = out_var.data(), p.t[1].out = lab_var.data();
      unsigned picked = 99;
      detail::with_resample_forward<float>(p, [&](const auto& f) {
        picked = std::decay_t<decltype(f)>::kField * detail::kResampleField +
                 std::decay_t<decltype(f)>::kSpline * detail::kResampleSpline +
                 std::decay_t<decltype(f)>::kPost * detail::kResamplePost +
                 std::decay_t<decltype(f)>::kRawBSpline * detail::kResampleRawBSpline;
        run_body_variant(f, iv.n);
      });
      const unsigned lean = want == 0u || want == detail::kResampleField ? want : detail::kResampleAllFeatures;
      EXPECT_EQ(lean, picked) << "field " << static_cast<int>(fk) << " mode " << static_cast<int>(mode);
      EXPECT_EQ(0, std::memcmp(out_full.data(), out_var.data(), out_full.size() * 4))
          << "field " << static_cast<int>(fk) << " mode " << static_cast<int>(mode);
      EXPECT_EQ(lab_full, lab_var) << "field " << static_cast<int>(fk) << " mode " << static_cast<int>(mode);
    }
}

// The row path's vector fold (pad_row: Border / Reflection) against the device body: rows of
// 37 voxels (two whole vectors and a tail), maps that stretch 4x about the centre so that
// coordinates lie several reflection spans outside, and a one-voxel axis (align_corners
// reflection: an empty span, every lane through the scalar rule).
TEST(ResampleCpu, RowPathFoldsEqualPerVoxelDeviceBody) {
  for (const Vol& iv : {Vol{2, 1, 7, 6, 9}, Vol{1, 2, 1, 5, 8}}) {
    const Vol ov{iv.n, iv.c, 5, 4, 37};
    std::mt19937 rng(77);
    std::normal_distribution<float> nd;
    std::vector<float> img(iv.numel());
    for (auto& v : img) v = nd(rng);
    std::vector<double> m = random_matrices(iv.n, iv, ov, 78);
    for (int64_t n = 0; n < iv.n; ++n)
      for (int r = 0; r < 3; ++r) {
        const double centre = ((r == 0 ? iv.d : r == 1 ? iv.h : iv.w) - 1) / 2.0;
        for (int k = 0; k < 3; ++k) m[12 * n + 4 * r + k] *= 4.0;
        double b = centre;  // keep the output centre on the input centre
        const double oc[3] = {(ov.d - 1) / 2.0, (ov.h - 1) / 2.0, (ov.w - 1) / 2.0};
        for (int k = 0; k < 3; ++k) b -= m[12 * n + 4 * r + k] * oc[k];
        m[12 * n + 4 * r + 3] = b + 0.3 * (r + 1);
      }
    for (Interp mode : {Interp::Linear, Interp::Nearest})
      for (Padding pad : {Padding::Border, Padding::Reflection})
        for (bool ac : {false, true}) {
          std::vector<float> row(ov.numel());
          ResampleTarget t{view(img.data(), DType::Float32, iv), view(row.data(), DType::Float32, ov),
                           mode, pad, 0.0, {}};
          resample(&t, 1, m.data(), ac);
          bool exact = false;
          const std::vector<float> voxel =
              device_body_float32(img, iv, ov, m, mode, pad, 0.0, ac, &exact);
          EXPECT_EQ(0, std::memcmp(row.data(), voxel.data(), row.size() * 4))
              << "input d " << iv.d << " padding " << static_cast<int>(pad) << " align_corners "
              << ac << " mode " << static_cast<int>(mode);
        }
  }
}

// Exact (signed-permutation) maps: the host's integer row copy equals the device body.
TEST(ResampleCpu, ExactRowPathEqualsPerVoxelDeviceBody) {
  const Vol iv{2, 2, 7, 9, 8}, ov{2, 2, 9, 8, 7};
  std::vector<float> img(iv.numel());
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>((i * 7919) % 1000) * 0.01f;
  // Sample 0: flip d, permute (h, w) -> (w, h) with shifts that leave the volume; sample 1:
  // identity with a translation.
  const std::vector<double> m = {-1, 0, 0, 8,  0, 0, 1, -2, 0, 1, 0, 3,
                                 1,  0, 0, -1, 0, 1, 0, 2,  0, 0, 1, -4};
  for (Padding pad :
       {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant, Padding::Cutoff}) {
    for (bool ac : {false, true}) {
      for (Interp mode : {Interp::Linear, Interp::Nearest}) {
        std::vector<float> row(ov.numel());
        ResampleTarget t{view(img.data(), DType::Float32, iv),
                         view(row.data(), DType::Float32, ov),
                         mode,
                         pad,
                         0.5,
                         {}};
        resample(&t, 1, m.data(), ac);
        bool exact = false;
        const std::vector<float> voxel =
            device_body_float32(img, iv, ov, m, mode, pad, 0.5, ac, &exact);
        ASSERT_TRUE(exact);
        EXPECT_EQ(0, std::memcmp(row.data(), voxel.data(), row.size() * 4))
            << "padding " << static_cast<int>(pad) << " align_corners " << ac << " mode "
            << static_cast<int>(mode);
      }
    }
  }
}

// Exact maps over outputs larger than one host task (2048 voxels, so tasks begin inside a
// row), and maps whose coordinates reach 2^22 somewhere in the output box (the host then
// decides row by row, and per voxel where a row's float coordinates might not be exact: with
// reflection, x + 0.5 is inexact in float32 from 2^22 on).
TEST(ResampleCpu, ExactPathAcrossTasksAndHugeOffsets) {
  const Vol iv{2, 1, 6, 40, 31}, ov{2, 1, 5, 33, 29};
  std::vector<float> img(iv.numel());
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<float>((i * 104729) % 997) - 400.f;
  const std::vector<std::vector<double>> maps = {
      // flip w, identity h, shift d; rot90 in (h, w) with a flip
      {1, 0, 0, 1, 0, 1, 0, 3, 0, 0, -1, 30, 1, 0, 0, 0, 0, 0, -1, 35, 0, 1, 0, 1},
      // one axis far outside (rows from 4194290: the box and its last rows reach 2^22; at
      // 8388600 even x + 0.5 is inexact), the other sample inside
      {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 4194290, 1, 0, 0, 0, 0, 1, 0, 4, 0, 0, 1, 1},
      {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 8388600, 1, 0, 0, 0, 0, 1, 0, 4, 0, 0, 1, 1}};
  for (const auto& m : maps)
    for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection}) {
      std::vector<float> row(ov.numel());
      ResampleTarget t{view(img.data(), DType::Float32, iv), view(row.data(), DType::Float32, ov),
                       Interp::Linear, pad, 0.0, {}};
      resample(&t, 1, m.data(), false);
      bool exact = false;
      const std::vector<float> voxel =
          device_body_float32(img, iv, ov, m, Interp::Linear, pad, 0.0, false, &exact);
      ASSERT_TRUE(exact);
      EXPECT_EQ(0, std::memcmp(row.data(), voxel.data(), row.size() * 4))
          << "padding " << static_cast<int>(pad) << " map " << (&m - maps.data());
    }
}

// ---- post steps (ResampleTarget::post): a resample and a pointwise chain in one pass ----
namespace {

struct PostCase {
  std::vector<PointwiseStep> steps;
  std::vector<float> per_sample;  // backs a per-sample step
};

PostCase post_steps(int64_t batch) {
  PostCase pc;
  pc.per_sample.resize(batch);
  for (int64_t n = 0; n < batch; ++n) pc.per_sample[n] = 0.25f * static_cast<float>(n) - 0.4f;
  const double b_min = -1.0, b_max = 1.0;
  pc.steps = {PointwiseStep::scale_intensity_range(-1.5, 2.0, &b_min, &b_max, true),
              PointwiseStep::rand_shift_intensity(-0.3, 0.3, 0.5, 77),
              PointwiseStep::scale_intensity(pc.per_sample.data()),
              PointwiseStep::rand_scale_intensity(-0.2, 0.4, 0.7, 78)};
  return pc;
}

}  // namespace

// CPU: resample with post steps equals resample, then pointwise_chain on its output, bit for
// bit; interpolated, exact (flip + crop) and nearest samples; one patch group; float32 and
// float16 outputs; and the per-voxel device body (what CUDA runs) gives the same bits.
TEST(ResampleCpu, PostStepsEqualResampleThenChain) {
  const int64_t K = 3;
  const Vol iv{2, 2, 14, 12, 13}, ov{2 * K, 2, 9, 10, 11};
  std::mt19937 rng(61);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  auto m = random_matrices(ov.n, iv, ov, 62);
  const double flip[12] = {1, 0, 0, 2, 0, -1, 0, 10, 0, 0, 1, 1};  // exact: flip h + crop
  std::copy(flip, flip + 12, m.begin() + 12);
  std::copy(flip, flip + 12, m.begin() + 12 * 4);
  PostCase pc = post_steps(ov.n);
  for (Interp mode : {Interp::Linear, Interp::Nearest})
    for (uint32_t first : {0u, 5u}) {
      std::vector<float> fused(ov.numel()), plain(ov.numel());
      ResampleTarget t{view(img.data(), DType::Float32, iv), view(fused.data(), DType::Float32, ov),
                       mode, Padding::Border, 0.0, {}, K};
      t.post = pc.steps.data();
      t.num_post = static_cast<int>(pc.steps.size());
      t.post_first_sample = first;
      resample(&t, 1, m.data(), false);
      ResampleTarget u{view(img.data(), DType::Float32, iv), view(plain.data(), DType::Float32, ov),
                       mode, Padding::Border, 0.0, {}, K};
      resample(&u, 1, m.data(), false);
      const VolumeView pv = view(plain.data(), DType::Float32, ov);
      pointwise_chain(pv, pv, pc.steps.data(), static_cast<int>(pc.steps.size()), nullptr, first);
      EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * 4))
          << "mode " << static_cast<int>(mode) << " first_sample " << first;

      // The device body: ResampleForward::voxel over every voxel, post steps included.
      detail::ResampleParams p{};
      p.num_targets = 1;
      p.matrices = m.data();
      p.out_size[0] = ov.d, p.out_size[1] = ov.h, p.out_size[2] = ov.w;
      detail::KTarget& k = p.t[0];
      std::vector<float> body(ov.numel());
      const VolumeView vi = view(img.data(), DType::Float32, iv),
                       vo = view(body.data(), DType::Float32, ov);
      k.in = img.data();
      k.out = body.data();
      k.in_dtype = k.out_dtype = DType::Float32;
      k.mode = static_cast<int32_t>(mode);
      k.padding = static_cast<int32_t>(Padding::Border);
      k.channels = iv.c;
      k.elem_size = 4;
      k.in_group = K;
      for (int a = 0; a < 3; ++a) k.in_size[a] = vi.shape[a + 2];
      for (int a = 0; a < 5; ++a) k.in_stride[a] = vi.strides[a], k.out_stride[a] = vo.strides[a];
      const detail::ChainParams cp =
          detail::pack_chain(pc.steps.data(), static_cast<int>(pc.steps.size()));
      p.post_target = 0;
      p.num_post = static_cast<int32_t>(pc.steps.size());
      p.post_first_sample = first;
      p.post_channels = ov.c;
      for (int s = 0; s < p.num_post; ++s) p.post[s] = cp.steps[s];
      run_device_body(p, ov.n);
      EXPECT_EQ(0, std::memcmp(fused.data(), body.data(), fused.size() * 4))
          << "device body, mode " << static_cast<int>(mode) << " first_sample " << first;
    }
  // float16 output: the value is rounded to float16 before the steps, as a chain pass reads it.
  std::vector<uint16_t> h_fused(ov.numel()), h_plain(ov.numel());
  ResampleTarget t{view(img.data(), DType::Float32, iv), view(h_fused.data(), DType::Float16, ov),
                   Interp::Linear, Padding::Zeros, 0.0, {}, K};
  t.post = pc.steps.data();
  t.num_post = 2;
  resample(&t, 1, m.data(), false);
  ResampleTarget u{view(img.data(), DType::Float32, iv), view(h_plain.data(), DType::Float16, ov),
                   Interp::Linear, Padding::Zeros, 0.0, {}, K};
  resample(&u, 1, m.data(), false);
  const VolumeView hv = view(h_plain.data(), DType::Float16, ov);
  pointwise_chain(hv, hv, pc.steps.data(), 2);
  EXPECT_EQ(h_fused, h_plain);
}

TEST(ResampleCpu, PostStepsBadArgumentsGiveNamedErrors) {
  const Vol iv{1, 1, 4, 4, 4};
  std::vector<float> img(iv.numel()), out(iv.numel());
  std::vector<double> dimg(iv.numel()), dout(iv.numel());
  std::vector<uint8_t> lab(iv.numel()), lout(iv.numel());
  const std::vector<double> m = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  auto expect_error = [&](std::vector<ResampleTarget> ts, const std::string& needle) {
    try {
      resample(ts.data(), static_cast<int>(ts.size()), m.data(), false);
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto target = [](VolumeView in, VolumeView out, Interp mode) {
    ResampleTarget t;
    t.in = in;
    t.out = out;
    t.mode = mode;
    return t;
  };
  const ResampleTarget img_t = target(view(img.data(), DType::Float32, iv),
                                      view(out.data(), DType::Float32, iv), Interp::Linear);
  const PointwiseStep noise = PointwiseStep::gaussian_noise(0.0, 0.1, false, 1.0, 3);
  const PointwiseStep cw = PointwiseStep::rand_shift_intensity(-1, 1, 1.0, 4, true);
  const PointwiseStep shift = PointwiseStep::shift_intensity(0.5);
  ResampleTarget a = img_t;
  a.post = &noise;
  a.num_post = 1;
  expect_error({a}, "post step 0 must be scale_intensity_range");
  a.post = &cw;
  expect_error({a}, "not channel-wise");
  a.post = &shift;
  a.num_post = 0;
  expect_error({a}, "num_post must be in [1, 4]");
  a.num_post = 1;
  ResampleTarget l = target(view(lab.data(), DType::UInt8, iv),
                            view(lout.data(), DType::UInt8, iv), Interp::Nearest);
  l.post = &shift;
  l.num_post = 1;
  expect_error({l}, "post steps need a floating output");
  expect_error({a, a}, "one target per launch may have them");
  const ResampleTarget d = target(view(dimg.data(), DType::Float64, iv),
                                  view(dout.data(), DType::Float64, iv), Interp::Linear);
  expect_error({a, d}, "resample the targets in separate launches");
}

#if VOXAUG_WITH_CUDA
TEST(ResampleCuda, PostStepsTwinBitIdentical) {
  if (cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const int64_t K = 2;
  const Vol iv{2, 1, 30, 26, 28}, ov{2 * K, 1, 16, 16, 16};
  std::mt19937 rng(71);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel());
  for (auto& v : img) v = nd(rng);
  auto m = random_matrices(ov.n, iv, ov, 72);
  const double flip[12] = {-1, 0, 0, 20, 0, 0, 1, 3, 0, 1, 0, 7};
  std::copy(flip, flip + 12, m.begin());
  PostCase pc = post_steps(ov.n);
  void *dimg, *dm, *dout, *dps;
  CUDA_OK(cudaMalloc(&dimg, img.size() * 4));
  CUDA_OK(cudaMalloc(&dm, m.size() * 8));
  CUDA_OK(cudaMalloc(&dout, ov.numel() * 4));
  CUDA_OK(cudaMalloc(&dps, pc.per_sample.size() * 4));
  CUDA_OK(cudaMemcpy(dimg, img.data(), img.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dm, m.data(), m.size() * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dps, pc.per_sample.data(), pc.per_sample.size() * 4, cudaMemcpyHostToDevice));
  std::vector<PointwiseStep> dsteps = pc.steps;
  dsteps[2] = PointwiseStep::scale_intensity(static_cast<const float*>(dps));
  std::vector<float> cpu(ov.numel()), gpu(ov.numel());
  ResampleTarget h{view(img.data(), DType::Float32, iv), view(cpu.data(), DType::Float32, ov),
                   Interp::Linear, Padding::Reflection, 0.0, {}, K};
  h.post = pc.steps.data();
  h.num_post = 4;
  h.post_first_sample = 3;
  ResampleTarget g{view(dimg, DType::Float32, iv, Device::CUDA),
                   view(dout, DType::Float32, ov, Device::CUDA), Interp::Linear,
                   Padding::Reflection, 0.0, {}, K};
  g.post = dsteps.data();
  g.num_post = 4;
  g.post_first_sample = 3;
  resample(&h, 1, m.data(), false);
  resample(&g, 1, static_cast<const double*>(dm), false);
  CUDA_OK(cudaMemcpy(gpu.data(), dout, gpu.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * 4));
  cudaFree(dimg);
  cudaFree(dm);
  cudaFree(dout);
  cudaFree(dps);
}
#endif

// Exact maps with output samples of >= 2 MiB: inside rows are written with non-temporal
// stores, the post steps applied in an L1 buffer on the way; rows that reach the padding and
// flipped rows take the other paths. Image (with post steps) and label equal the device body.
TEST(ResampleCpu, StreamedExactRowsEqualDeviceBody) {
  const int64_t K = 2;
  const Vol iv{1, 1, 44, 90, 170}, ov{K, 1, 40, 80, 160};  // 2.5 MB per output sample
  std::vector<float> img(iv.numel());
  std::vector<uint8_t> lab(iv.numel());
  for (size_t i = 0; i < img.size(); ++i) {
    img[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.01f;
    lab[i] = static_cast<uint8_t>(i % 7);
  }
  // Patch 0: crop, inside except the last rows along h (padding); patch 1: flip w + flip d.
  const std::vector<double> m = {1, 0, 0, 2, 0, 1, 0, 15, 0, 0, 1, 6,
                                 -1, 0, 0, 42, 0, 1, 0, 3, 0, 0, -1, 165};
  PostCase pc = post_steps(ov.n);
  std::vector<float> out(ov.numel());
  std::vector<uint8_t> lout(ov.numel());
  ResampleTarget t[2] = {{view(img.data(), DType::Float32, iv), view(out.data(), DType::Float32, ov),
                          Interp::Linear, Padding::Zeros, 0.0, {}, K},
                         {view(lab.data(), DType::UInt8, iv), view(lout.data(), DType::UInt8, ov),
                          Interp::Nearest, Padding::Zeros, 0.0, {}, K}};
  t[0].post = pc.steps.data();
  t[0].num_post = static_cast<int>(pc.steps.size());
  resample(t, 2, m.data(), false);

  detail::ResampleParams p{};
  p.num_targets = 2;
  p.matrices = m.data();
  p.out_size[0] = ov.d, p.out_size[1] = ov.h, p.out_size[2] = ov.w;
  std::vector<float> body(ov.numel());
  std::vector<uint8_t> lbody(ov.numel());
  void* outs[2] = {body.data(), lbody.data()};
  const void* ins[2] = {img.data(), lab.data()};
  const DType dts[2] = {DType::Float32, DType::UInt8};
  for (int k = 0; k < 2; ++k) {
    detail::KTarget& q = p.t[k];
    const VolumeView vi = view(const_cast<void*>(ins[k]), dts[k], iv), vo = view(outs[k], dts[k], ov);
    q.in = ins[k];
    q.out = outs[k];
    q.in_dtype = q.out_dtype = dts[k];
    q.mode = static_cast<int32_t>(k == 0 ? Interp::Linear : Interp::Nearest);
    q.padding = static_cast<int32_t>(Padding::Zeros);
    q.channels = 1;
    q.elem_size = k == 0 ? 4 : 1;
    q.in_group = K;
    for (int a = 0; a < 3; ++a) q.in_size[a] = vi.shape[a + 2];
    for (int a = 0; a < 5; ++a) q.in_stride[a] = vi.strides[a], q.out_stride[a] = vo.strides[a];
  }
  const detail::ChainParams cp = detail::pack_chain(pc.steps.data(), static_cast<int>(pc.steps.size()));
  p.post_target = 0;
  p.num_post = static_cast<int32_t>(pc.steps.size());
  p.post_channels = 1;
  for (int s = 0; s < p.num_post; ++s) p.post[s] = cp.steps[s];
  ASSERT_TRUE(run_device_body(p, ov.n));
  EXPECT_EQ(0, std::memcmp(out.data(), body.data(), out.size() * 4));
  EXPECT_EQ(lout, lbody);
}

// Cubic gathers at NaN source coordinates (a NaN in a deformation field): Border and Reflection
// keep the coordinate NaN, and converting it to a tap index is undefined (x86: INT64_MIN; CUDA:
// 0), which read before the coefficients. Here they start right after 1 MiB of inaccessible
// pages, so such a read faults. Values: NaN where the field is NaN (Border, Reflection), the
// fill there for Zeros / Constant (outside), the NaN-free result everywhere else, bit for bit.
#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>

namespace {
// `bytes` of read-write memory between two 1 MiB runs of inaccessible pages.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    guard_ = ((size_t(1) << 20) + page - 1) / page * page;
    body_ = (bytes + page - 1) / page * page;
    total_ = 2 * guard_ + body_;
    void* m = mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base_ = static_cast<char*>(m);
    if (mprotect(base_ + guard_, body_, PROT_READ | PROT_WRITE) != 0) {
      munmap(base_, total_);
      base_ = nullptr;
    }
  }
  ~GuardedBuffer() {
    if (base_ != nullptr) munmap(base_, total_);
  }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  void* data() const { return base_ == nullptr ? nullptr : base_ + guard_; }

 private:
  char* base_ = nullptr;
  size_t guard_ = 0, body_ = 0, total_ = 0;
};
}  // namespace

// The host prefilter (lanes of 16 W lines through a transposed tile, lanes of H / D lines)
// equals detail::bspline_filter_line, the per-line filter the device runs, along W, then H, then
// D, bit for bit: every order and padding, float32 and float64, an axis short enough for the
// exact short-line start (3 + 24 voxels) and a tile of fewer than 16 lines at the end.
template <class T>
void expect_prefilter_equals_line_filter(DType dt) {
  const Vol iv{1, 2, 3, 5, 9};
  const int64_t P = kBSplinePad;
  const Vol cv{1, 2, 3 + 2 * P, 5 + 2 * P, 9 + 2 * P};
  const int64_t Q[3] = {cv.d, cv.h, cv.w};
  std::mt19937 rng(71);
  std::normal_distribution<double> nd;
  std::vector<T> x(iv.numel());
  for (auto& v : x) v = static_cast<T>(nd(rng));
  for (int order = 2; order <= 5; ++order)
    for (Padding pad :
         {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant, Padding::Cutoff})
      for (bool ac : {false, true}) {
        std::vector<T> coeff(cv.numel()), ref(cv.numel());
        bspline_prefilter(view(x.data(), dt, iv), view(coeff.data(), dt, cv), pad, 0.5, ac, order);
        const Padding ext = pad == Padding::Cutoff ? Padding::Reflection : pad;
        const bool ext_ac = pad == Padding::Cutoff ? true : ac;
        for (int64_t c = 0; c < iv.c; ++c)
          for (int64_t d = 0; d < Q[0]; ++d)
            for (int64_t h = 0; h < Q[1]; ++h)
              for (int64_t w = 0; w < Q[2]; ++w) {
                const int64_t sd = detail::extend_index(d - P, iv.d, ext, ext_ac);
                const int64_t sh = detail::extend_index(h - P, iv.h, ext, ext_ac);
                const int64_t sw = detail::extend_index(w - P, iv.w, ext, ext_ac);
                ref[((c * Q[0] + d) * Q[1] + h) * Q[2] + w] =
                    (sd < 0 || sh < 0 || sw < 0)
                        ? static_cast<T>(pad == Padding::Constant ? 0.5 : 0.0)
                        : x[((c * iv.d + sd) * iv.h + sh) * iv.w + sw];
              }
        const detail::BSplineLineEnds ends = detail::bspline_line_ends(ext, ext_ac);
        const int64_t plane = Q[1] * Q[2];
        for (int64_t c = 0; c < iv.c; ++c) {
          T* vol = ref.data() + c * Q[0] * plane;
          for (int64_t d = 0; d < Q[0]; ++d)
            for (int64_t h = 0; h < Q[1]; ++h)
              detail::bspline_filter_line(vol + d * plane + h * Q[2], Q[2], 1, order, ends);
          for (int64_t d = 0; d < Q[0]; ++d)
            for (int64_t w = 0; w < Q[2]; ++w)
              detail::bspline_filter_line(vol + d * plane + w, Q[1], Q[2], order, ends);
          for (int64_t h = 0; h < Q[1]; ++h)
            for (int64_t w = 0; w < Q[2]; ++w)
              detail::bspline_filter_line(vol + h * Q[2] + w, Q[0], plane, order, ends);
        }
        EXPECT_EQ(0, std::memcmp(coeff.data(), ref.data(), coeff.size() * sizeof(T)))
            << "order " << order << " padding " << static_cast<int>(pad) << " align_corners " << ac
            << " dtype " << dtype_name(dt);
      }
}

TEST(ResampleCpu, HostPrefilterEqualsThePerLineFilterBitwise) {
  expect_prefilter_equals_line_filter<float>(DType::Float32);
  expect_prefilter_equals_line_filter<double>(DType::Float64);
}

// bspline_prefilter of every order (2..5) and padding, float64: the coefficients convolved with
// the B-spline sampled at the integers (the closed-form kernels (1, 6, 1) / 8, (1, 4, 1) / 6,
// (1, 76, 230, 76, 1) / 384, (1, 26, 66, 26, 1) / 120) give the padded input back along every
// axis, away from the padded ends (there, each pass's boundary rule decides). The volume is
// anisotropic so that the W lines (one line at a time) and the H / D lines (lanes) all run.
TEST(ResampleCpu, BSplinePrefilterInvertsTheSampledBSpline) {
  const Vol iv{1, 1, 9, 7, 11};
  const int64_t P = kBSplinePad;
  const Vol cv{1, 1, 9 + 2 * P, 7 + 2 * P, 11 + 2 * P};
  std::mt19937 rng(61);
  std::normal_distribution<double> nd;
  std::vector<double> x(iv.numel());
  for (auto& v : x) v = nd(rng);
  const std::vector<std::vector<double>> kernels = {
      {1.0 / 8, 6.0 / 8, 1.0 / 8},
      {1.0 / 6, 4.0 / 6, 1.0 / 6},
      {1.0 / 384, 76.0 / 384, 230.0 / 384, 76.0 / 384, 1.0 / 384},
      {1.0 / 120, 26.0 / 120, 66.0 / 120, 26.0 / 120, 1.0 / 120}};
  const int64_t Q[3] = {cv.d, cv.h, cv.w};
  for (int order = 2; order <= 5; ++order) {
    const std::vector<double>& ker = kernels[order - 2];
    const int64_t half = static_cast<int64_t>(ker.size()) / 2;
    for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection, Padding::Constant,
                        Padding::Cutoff}) {
      for (bool ac : {false, true}) {
        std::vector<double> coeff(cv.numel());
        bspline_prefilter(view(x.data(), DType::Float64, iv),
                          view(coeff.data(), DType::Float64, cv), pad, 0.5, ac, order);
        // Convolve along each axis in turn; what comes back is the padded copy of x.
        std::vector<double> cur = coeff;
        const int64_t stride[3] = {Q[1] * Q[2], Q[2], 1};
        for (int a = 0; a < 3; ++a) {
          std::vector<double> next(cur.size(), 0.0);
          for (int64_t d = 0; d < Q[0]; ++d)
            for (int64_t h = 0; h < Q[1]; ++h)
              for (int64_t w = 0; w < Q[2]; ++w) {
                const int64_t pos[3] = {d, h, w};
                if (pos[a] < half || pos[a] >= Q[a] - half) continue;
                const int64_t o = d * stride[0] + h * stride[1] + w;
                double acc = 0.0;
                for (int64_t j = -half; j <= half; ++j)
                  acc += ker[j + half] * cur[o + j * stride[a]];
                next[o] = acc;
              }
          cur.swap(next);
        }
        // Compare the input's own voxels and 3 pad voxels around them (Cutoff: the coefficients
        // of the whole-sample mirror).
        const Padding ext = pad == Padding::Cutoff ? Padding::Reflection : pad;
        const bool ext_ac = pad == Padding::Cutoff ? true : ac;
        double worst = 0.0;
        for (int64_t d = P - 3; d < P + iv.d + 3; ++d)
          for (int64_t h = P - 3; h < P + iv.h + 3; ++h)
            for (int64_t w = P - 3; w < P + iv.w + 3; ++w) {
              const int64_t sd = detail::extend_index(d - P, iv.d, ext, ext_ac);
              const int64_t sh = detail::extend_index(h - P, iv.h, ext, ext_ac);
              const int64_t sw = detail::extend_index(w - P, iv.w, ext, ext_ac);
              const double want = (sd < 0 || sh < 0 || sw < 0)
                                      ? (pad == Padding::Constant ? 0.5 : 0.0)
                                      : x[(sd * iv.h + sh) * iv.w + sw];
              worst = std::max(worst, std::fabs(cur[(d * Q[1] + h) * Q[2] + w] - want));
            }
        EXPECT_LT(worst, 1e-11) << "order " << order << " padding " << static_cast<int>(pad)
                                << " align_corners " << ac;
      }
    }
  }
}

TEST(ResampleCpu, CubicAtNanCoordinatesReadsInsideTheCoefficients) {
  const int64_t P = kBSplinePad;
  const Vol iv{1, 2, 8, 9, 10}, ov{1, 2, 6, 7, 5}, fv{1, 3, 6, 7, 5};
  const Vol cv{1, 2, iv.d + 2 * P, iv.h + 2 * P, iv.w + 2 * P};
  std::mt19937 rng(61);
  std::normal_distribution<float> nd;
  std::vector<float> img(iv.numel()), clean(fv.numel());
  for (auto& v : img) v = nd(rng);
  for (auto& v : clean) v = 0.4f * nd(rng);
  // Voxel (2, 3, 1): all three components NaN; voxel (4, 0, 3): the h component only.
  const int64_t vox = fv.d * fv.h * fv.w, a = (2 * fv.h + 3) * fv.w + 1, b = (4 * fv.h + 0) * fv.w + 3;
  std::vector<float> dirty = clean;
  for (int c = 0; c < 3; ++c) dirty[c * vox + a] = NAN;
  dirty[1 * vox + b] = NAN;
  const std::vector<double> m = {1, 0, 0, 0.25, 0, 1, 0, -0.5, 0, 0, 1, 0.75};
  GuardedBuffer coeff_mem(static_cast<size_t>(cv.numel()) * sizeof(float));
  ASSERT_NE(coeff_mem.data(), nullptr) << "mmap / mprotect failed";
  const VolumeView coeff = view(coeff_mem.data(), DType::Float32, cv);
  for (Padding pad : {Padding::Border, Padding::Reflection, Padding::Zeros, Padding::Constant}) {
    const double pad_value = 1.5;
    bspline_prefilter(view(img.data(), DType::Float32, iv), coeff, pad, pad_value, false);
    std::vector<float> ref(ov.numel()), out(ov.numel());
    ResampleTarget t{view(img.data(), DType::Float32, iv), view(ref.data(), DType::Float32, ov),
                     Interp::Cubic, pad, pad_value, coeff};
    DeformField f;
    f.kind = FieldKind::Dense;
    f.field = view(clean.data(), DType::Float32, fv);
    resample_deformed(&t, 1, m.data(), f, false);
    t.out = view(out.data(), DType::Float32, ov);
    f.field = view(dirty.data(), DType::Float32, fv);
    resample_deformed(&t, 1, m.data(), f, false);
    const bool keeps_nan = pad == Padding::Border || pad == Padding::Reflection;
    const float fill = pad == Padding::Constant ? 1.5f : 0.0f;
    double ref_abs = 0.0;
    for (int64_t c = 0; c < ov.c; ++c)
      for (int64_t v = 0; v < vox; ++v) {
        const float r = ref[c * vox + v], o = out[c * vox + v];
        ASSERT_TRUE(std::isfinite(r)) << static_cast<int>(pad) << " " << c << " " << v;
        ref_abs += std::fabs(r);
        if (v == a || v == b) {
          if (keeps_nan)
            EXPECT_TRUE(std::isnan(o)) << static_cast<int>(pad) << " " << c << " " << v;
          else
            EXPECT_EQ(o, fill) << static_cast<int>(pad) << " " << c << " " << v;
        } else {
          EXPECT_EQ(0, std::memcmp(&r, &o, sizeof r)) << static_cast<int>(pad) << " " << c << " " << v;
        }
      }
    EXPECT_GT(ref_abs, 1.0) << static_cast<int>(pad);
  }
}
#endif

// ---- reversed rows (kernels/resample/resample_cpu.h reverse_copy) ----
#if defined(__unix__)
#include <sys/mman.h>
#include <unistd.h>

#include "../../kernels/resample/resample_cpu.h"

namespace {
// Read-write pages after one inaccessible page: an access just before data() faults.
struct AfterGuardPage {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), total = 0;
  void* map = MAP_FAILED;
  explicit AfterGuardPage(size_t bytes) {
    total = page + (bytes + page - 1) / page * page;
    map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map != MAP_FAILED && mprotect(map, page, PROT_NONE) != 0) {
      munmap(map, total);
      map = MAP_FAILED;
    }
  }
  ~AfterGuardPage() {
    if (map != MAP_FAILED) munmap(map, total);
  }
  void* data() const { return map == MAP_FAILED ? nullptr : static_cast<char*>(map) + page; }
};

// dst[j] = src[-j], j < n, through `copy` for every n up to 300 (not multiples of any vector
// width, tails of every length) and dst at several alignments: the row's first element in
// memory (src[-(n-1)]) and the output buffer each start a page whose predecessor is
// inaccessible, so a vector load or store that reached before the row or before dst at
// offset 0 would fault; every element of the buffer outside dst[0, n) keeps its sentinel.
template <class U, class Copy>
void check_reverse(Copy copy, const char* path) {
  constexpr int64_t kMax = 300, kSlack = 80;
  AfterGuardPage in(kMax * sizeof(U)), out((kMax + kSlack) * sizeof(U));
  ASSERT_NE(in.data(), nullptr);
  ASSERT_NE(out.data(), nullptr);
  U* row = static_cast<U*>(in.data());
  U* dst = static_cast<U*>(out.data());
  for (int64_t i = 0; i < kMax; ++i) row[i] = static_cast<U>(0x9E3779B97F4A7C15ull * (i + 1) >> 7);
  const U sentinel = static_cast<U>(0xA5A5A5A5A5A5A5A5ull);
  for (int64_t at : {0, 1, 3, 8, 37, 64}) {  // dst's alignment (the streamed copy's cases)
    for (int64_t n = 0; n <= kMax; ++n) {
      std::fill(dst, dst + kMax + kSlack, sentinel);
      copy(dst + at, row + (n - 1), n);
      for (int64_t j = 0; j < kMax + kSlack; ++j) {
        const bool in_row = j >= at && j < at + n;
        ASSERT_EQ(dst[j], in_row ? row[n - 1 - (j - at)] : sentinel)
            << path << " elem " << sizeof(U) << " at " << at << " n " << n << " j " << j;
      }
    }
  }
}

template <class U>
void check_reverse_paths() {
  check_reverse<U>([](U* d, const U* s, int64_t n) { detail::reverse_copy_scalar(d, s, n); },
                   "scalar");
  check_reverse<U>([](U* d, const U* s, int64_t n) { detail::reverse_copy(d, s, n); },
                   "dispatched");
  check_reverse<U>(
      [](U* d, const U* s, int64_t n) {
        detail::reverse_stream_bytes(d, s, n, sizeof(U));
        detail::stream_fence();
      },
      "dispatched streamed");
  check_reverse<U>(
      [](U* d, const U* s, int64_t n) {
        detail::reverse_stream_buffered(d, s, n, sizeof(U));
        detail::stream_fence();
      },
      "buffered streamed");
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (detail::cpu_has_avx2())
    check_reverse<U>([](U* d, const U* s, int64_t n) { detail::reverse_copy_avx2(d, s, n); },
                     "avx2");
  if (detail::cpu_has_avx512bw()) {
    check_reverse<U>([](U* d, const U* s, int64_t n) { detail::reverse_copy_avx512(d, s, n); },
                     "avx512");
    check_reverse<U>(
        [](U* d, const U* s, int64_t n) {
          detail::reverse_stream_avx512(d, s, n);
          detail::stream_fence();
        },
        "avx512 streamed");
  }
#endif
}
}  // namespace

TEST(ResampleCpu, ReverseCopyEveryPathElementSizeAndLength) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (!detail::cpu_has_avx512bw())
    std::printf("no AVX-512BW on this CPU: its reversed-row path is not checked here\n");
  if (!detail::cpu_has_avx2())
    std::printf("no AVX2 on this CPU: its reversed-row path is not checked here\n");
#endif
  check_reverse_paths<uint8_t>();
  check_reverse_paths<uint16_t>();
  check_reverse_paths<uint32_t>();
  check_reverse_paths<uint64_t>();
  check_reverse_paths<float>();
  check_reverse_paths<double>();
}
#endif  // __unix__
