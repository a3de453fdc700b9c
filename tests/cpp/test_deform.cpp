// deform: B-spline / dense / separable displacement fields inside the resample gather.
// References: the cubic B-spline field and the displaced trilinear gather written from their
// definitions in float64; plain resample for zero fields; materialised field == fused
// gather; CUDA vs the CPU twin (skips without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels/resample/resample_dispatch.h"
#include "test_support.h"
#include "voxaug/deform.h"
#include "voxaug/detail/resample.h"
#include "voxaug/error.h"
#include "voxaug/resample.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace voxaug;
using namespace voxaug_test;

namespace {

template <class T>
std::vector<T> random_vec(int64_t count, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(count);
  for (auto& x : v) x = static_cast<T>(u(rng));
  return v;
}

// A rotation-ish map about the centres plus a shift, per sample.
std::vector<double> matrices_for(int64_t n, const Vol& in, const Vol& out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> m(12 * n);
  const double cin[3] = {(in.d - 1) / 2.0, (in.h - 1) / 2.0, (in.w - 1) / 2.0};
  const double cout[3] = {(out.d - 1) / 2.0, (out.h - 1) / 2.0, (out.w - 1) / 2.0};
  for (int64_t s = 0; s < n; ++s)
    for (int r = 0; r < 3; ++r) {
      double b = cin[r] + 1.5 * u(rng);
      for (int k = 0; k < 3; ++k) {
        const double a = (r == k ? 1.0 : 0.0) + 0.2 * u(rng);
        m[12 * s + 4 * r + k] = a;
        b -= a * cout[k];
      }
      m[12 * s + 4 * r + 3] = b;
    }
  return m;
}

// The cubic B-spline basis of REFERENCES.md, written out.
double basis(int k, double t) {
  switch (k) {
    case 0: return (1 - t) * (1 - t) * (1 - t) / 6;
    case 1: return (3 * t * t * t - 6 * t * t + 4) / 6;
    case 2: return (-3 * t * t * t + 3 * t * t + 3 * t + 1) / 6;
    default: return t * t * t / 6;
  }
}

// Naive float64 B-spline displacement (ITK domain rule: zero outside [1, K - 2]).
void naive_bspline(const std::vector<double>& coeff, const int64_t K[3], const double scale[3],
                   const double offset[3], int64_t n, const int64_t o[3], double u[3]) {
  int64_t first[3];
  double w[3][4];
  u[0] = u[1] = u[2] = 0;
  for (int a = 0; a < 3; ++a) {
    const double g = scale[a] * o[a] + offset[a];
    if (g < 1 || g > K[a] - 2) return;
    int64_t i = static_cast<int64_t>(std::floor(g));
    if (i > K[a] - 3) i = K[a] - 3;
    for (int k = 0; k < 4; ++k) w[a][k] = basis(k, g - i);
    first[a] = i - 1;
  }
  for (int c = 0; c < 3; ++c) {
    double v = 0;
    for (int a = 0; a < 4; ++a)
      for (int b = 0; b < 4; ++b)
        for (int k = 0; k < 4; ++k) {
          const int64_t idx =
              (((n * 3 + c) * K[0] + first[0] + a) * K[1] + first[1] + b) * K[2] + first[2] + k;
          v += w[0][a] * w[1][b] * w[2][k] * coeff[idx];
        }
    u[c] = v;
  }
}

// Trilinear with zero padding at a continuous input index, float64.
double naive_linear(const std::vector<double>& in, const Vol& iv, int64_t n, int64_t c,
                    const double p[3]) {
  const int64_t sz[3] = {iv.d, iv.h, iv.w};
  double acc = 0;
  for (int corner = 0; corner < 8; ++corner) {
    double w = 1;
    int64_t idx[3];
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      const int bit = (corner >> (2 - a)) & 1;
      const double f = std::floor(p[a]);
      idx[a] = static_cast<int64_t>(f) + bit;
      w *= bit ? p[a] - f : 1 - (p[a] - f);
      inside = inside && idx[a] >= 0 && idx[a] < sz[a];
    }
    if (inside) acc += w * in[(((n * iv.c + c) * iv.d + idx[0]) * iv.h + idx[1]) * iv.w + idx[2]];
  }
  return acc;
}

struct BSplineCase {
  Vol out;
  int64_t K[3];
  double scale[3], offset[3];
};

// Control grids as TorchIO / SimpleITK lay them over the image (g = 1 at the first voxel,
// K - 2 at the last), and off-grid / partly outside mappings.
std::vector<BSplineCase> bspline_cases() {
  std::vector<BSplineCase> cases;
  auto fit = [](int64_t size, int64_t k) { return size > 1 ? double(k - 3) / (size - 1) : 0.0; };
  const Vol a{2, 1, 13, 9, 17}, b{1, 1, 1, 6, 5}, c{3, 1, 20, 7, 300};
  cases.push_back({a, {7, 5, 9}, {fit(13, 7), fit(9, 5), fit(17, 9)}, {1, 1, 1}});
  cases.push_back({b, {4, 4, 4}, {0, fit(6, 4), fit(5, 4)}, {1.5, 1, 1}});
  cases.push_back({c, {6, 4, 40}, {fit(20, 6), fit(7, 4), fit(300, 40)}, {1, 1, 1}});
  cases.push_back({a, {6, 6, 6}, {0.45, 0.6, 0.35}, {-0.5, 0.2, 0.7}});  // partly outside
  return cases;
}

DeformField bspline_field(void* data, DType t, const BSplineCase& bc) {
  DeformField f;
  f.kind = FieldKind::BSpline;
  f.field = contiguous_view(data, t, Device::CPU, bc.out.n, 3, bc.K[0], bc.K[1], bc.K[2]);
  for (int a = 0; a < 3; ++a) {
    f.scale[a] = bc.scale[a];
    f.offset[a] = bc.offset[a];
  }
  return f;
}

}  // namespace

TEST(Deform, BSplineFieldMatchesNaiveFloat64) {
  for (const auto& bc : bspline_cases()) {
    const int64_t nc = bc.out.n * 3 * bc.K[0] * bc.K[1] * bc.K[2];
    const auto coeff = random_vec<double>(nc, 7, -3, 3);
    const std::vector<float> coeff32(coeff.begin(), coeff.end());
    const Vol fo{bc.out.n, 3, bc.out.d, bc.out.h, bc.out.w};
    std::vector<double> out64(fo.numel());
    std::vector<float> out32(fo.numel());
    deform_field_dense(bspline_field(const_cast<double*>(coeff.data()), DType::Float64, bc),
                       view(out64.data(), DType::Float64, fo));
    deform_field_dense(bspline_field(const_cast<float*>(coeff32.data()), DType::Float32, bc),
                       view(out32.data(), DType::Float32, fo));
    int64_t nonzero = 0;
    for (int64_t n = 0; n < fo.n; ++n)
      for (int64_t d = 0; d < fo.d; ++d)
        for (int64_t h = 0; h < fo.h; ++h)
          for (int64_t w = 0; w < fo.w; ++w) {
            const int64_t o[3] = {d, h, w};
            double u[3];
            naive_bspline(coeff, bc.K, bc.scale, bc.offset, n, o, u);
            for (int c = 0; c < 3; ++c) {
              const int64_t i = (((n * 3 + c) * fo.d + d) * fo.h + h) * fo.w + w;
              ASSERT_NEAR(out64[i], u[c], 1e-12)
                  << n << " " << c << " " << d << " " << h << " " << w;
              ASSERT_NEAR(out32[i], u[c], 2e-6 * 3);
              nonzero += u[c] != 0;
            }
          }
    EXPECT_GT(nonzero, 0);
  }
}

TEST(Deform, ZeroFieldEqualsPlainResample) {
  const Vol in{2, 2, 11, 8, 13}, out{2, 2, 9, 10, 7};
  const auto src = random_vec<float>(in.numel(), 3, -5, 9);
  const auto m = matrices_for(in.n, in, out, 11);
  std::vector<double> flip(12 * in.n, 0.0);  // a signed permutation: the plain exact path
  for (int64_t s = 0; s < in.n; ++s) {
    flip[12 * s + 0] = -1;
    flip[12 * s + 3] = in.d - 1;
    flip[12 * s + 6] = 1;
    flip[12 * s + 10] = 1;
  }
  std::vector<float> zeros(in.n * 3 * 4 * 5 * 6, 0.0f);
  DeformField f;
  f.kind = FieldKind::BSpline;
  f.field = contiguous_view(zeros.data(), DType::Float32, Device::CPU, in.n, 3, 4, 5, 6);
  f.scale[0] = f.scale[1] = f.scale[2] = 0.2;
  f.offset[0] = f.offset[1] = f.offset[2] = 1.2;
  const std::vector<double>* const all_maps[] = {&m, &flip};
  for (const auto* mats : all_maps)
    for (Interp mode : {Interp::Linear, Interp::Nearest})
      for (Padding pad : {Padding::Zeros, Padding::Border, Padding::Reflection}) {
        const Vol o = mats == &flip ? Vol{in.n, in.c, in.d, in.h, in.w} : out;
        std::vector<float> a(o.numel()), b(o.numel());
        ResampleTarget t;
        t.in = view(const_cast<float*>(src.data()), DType::Float32, in);
        t.mode = mode;
        t.padding = pad;
        t.out = view(a.data(), DType::Float32, o);
        resample(&t, 1, mats->data(), false);
        t.out = view(b.data(), DType::Float32, o);
        resample_deformed(&t, 1, mats->data(), f, false);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << int(mode) << " " << int(pad);
      }
}

TEST(Deform, FusedGatherMatchesNaiveFloat64AndMaterialisedField) {
  const Vol in{2, 2, 15, 12, 14}, out{2, 2, 13, 11, 17};
  const auto src = random_vec<double>(in.numel(), 5, -4, 6);
  const std::vector<float> src32(src.begin(), src.end());
  const auto m = matrices_for(in.n, in, out, 21);
  BSplineCase bc{out, {6, 5, 7}, {3.0 / 12, 2.0 / 10, 4.0 / 16}, {1, 1, 1}};
  const auto coeff = random_vec<double>(out.n * 3 * 6 * 5 * 7, 9, -2.5, 2.5);
  const std::vector<float> coeff32(coeff.begin(), coeff.end());
  // float32 fused vs naive float64.
  std::vector<float> fused(out.numel()), label(out.numel());
  std::vector<int16_t> lab_in(in.numel());
  for (int64_t i = 0; i < in.numel(); ++i) lab_in[i] = static_cast<int16_t>(i % 7);
  ResampleTarget t[2];
  t[0].in = view(const_cast<float*>(src32.data()), DType::Float32, in);
  t[0].out = view(fused.data(), DType::Float32, out);
  t[1].in = view(lab_in.data(), DType::Int16, in);
  std::vector<int16_t> lab_out(out.numel());
  t[1].out = view(lab_out.data(), DType::Int16, out);
  t[1].mode = Interp::Nearest;
  const DeformField f = bspline_field(const_cast<float*>(coeff32.data()), DType::Float32, bc);
  resample_deformed(t, 2, m.data(), f, false);
  double max_err = 0;
  int64_t nonzero = 0;
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t d = 0; d < out.d; ++d)
      for (int64_t h = 0; h < out.h; ++h)
        for (int64_t w = 0; w < out.w; ++w) {
          const int64_t o[3] = {d, h, w};
          double u[3], p[3];
          naive_bspline(coeff, bc.K, bc.scale, bc.offset, n, o, u);
          for (int r = 0; r < 3; ++r) {
            const double* row = &m[12 * n + 4 * r];
            p[r] = row[0] * (d + u[0]) + row[1] * (h + u[1]) + row[2] * (w + u[2]) + row[3];
          }
          for (int64_t c = 0; c < out.c; ++c) {
            const double ref = naive_linear(src, in, n, c, p);
            const int64_t i = (((n * out.c + c) * out.d + d) * out.h + h) * out.w + w;
            max_err = std::max(max_err, std::fabs(fused[i] - ref));
            nonzero += fused[i] != 0;
          }
        }
  EXPECT_LT(max_err, 1e-4);
  EXPECT_GT(nonzero, out.numel() / 2);
  // Labels stay labels: every output value is one of the input's.
  for (int16_t v : lab_out) EXPECT_TRUE(v >= 0 && v < 7);

  // Materialised (dense) field through the Dense kind: bit-identical to the fused gather.
  const Vol fo{out.n, 3, out.d, out.h, out.w};
  std::vector<float> dense(fo.numel());
  deform_field_dense(f, view(dense.data(), DType::Float32, fo));
  DeformField g;
  g.kind = FieldKind::Dense;
  g.field = view(dense.data(), DType::Float32, fo);
  std::vector<float> via_dense(out.numel());
  std::vector<int16_t> lab_dense(out.numel());
  t[0].out = view(via_dense.data(), DType::Float32, out);
  t[1].out = view(lab_dense.data(), DType::Int16, out);
  resample_deformed(t, 2, m.data(), g, false);
  EXPECT_EQ(0, std::memcmp(fused.data(), via_dense.data(), fused.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(lab_out.data(), lab_dense.data(), lab_out.size() * sizeof(int16_t)));
}

TEST(Deform, SeparableFieldIsPerAxisTable) {
  const Vol in{2, 1, 9, 10, 11}, out{2, 1, 9, 10, 11};
  const auto src = random_vec<float>(in.numel(), 8, 0, 1);
  const int64_t L = 12;
  const auto table = random_vec<float>(in.n * 3 * L, 4, -1.5, 1.5);
  DeformField s;
  s.kind = FieldKind::Separable;
  s.field = contiguous_view(const_cast<float*>(table.data()), DType::Float32, Device::CPU, in.n, 3,
                            L, 1, 1);
  // The same field written densely.
  const Vol fo{out.n, 3, out.d, out.h, out.w};
  std::vector<float> dense(fo.numel());
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t d = 0; d < out.d; ++d)
      for (int64_t h = 0; h < out.h; ++h)
        for (int64_t w = 0; w < out.w; ++w) {
          const int64_t o[3] = {d, h, w};
          for (int c = 0; c < 3; ++c)
            dense[(((n * 3 + c) * out.d + d) * out.h + h) * out.w + w] =
                table[(n * 3 + c) * L + o[c]];
        }
  std::vector<float> got(fo.numel());
  deform_field_dense(s, view(got.data(), DType::Float32, fo));
  EXPECT_EQ(0, std::memcmp(got.data(), dense.data(), got.size() * sizeof(float)));
  DeformField g;
  g.kind = FieldKind::Dense;
  g.field = view(dense.data(), DType::Float32, fo);
  std::vector<double> m(12 * in.n, 0.0);
  for (int64_t n = 0; n < in.n; ++n) m[12 * n] = m[12 * n + 5] = m[12 * n + 10] = 1;
  std::vector<float> a(out.numel()), b(out.numel());
  ResampleTarget t;
  t.in = view(const_cast<float*>(src.data()), DType::Float32, in);
  t.padding = Padding::Border;
  t.out = view(a.data(), DType::Float32, out);
  resample_deformed(&t, 1, m.data(), s, false);
  t.out = view(b.data(), DType::Float32, out);
  resample_deformed(&t, 1, m.data(), g, false);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(Deform, UniformFillRangeMomentsAndBatchSplit) {
  const Vol v{3, 3, 20, 21, 22};
  std::vector<float> all(v.numel());
  uniform_fill(view(all.data(), DType::Float32, v), -1.0, 1.0, 1234, 0);
  double sum = 0, sq = 0;
  for (float x : all) {
    ASSERT_GE(x, -1.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / all.size(), var = sq / all.size() - mean * mean;
  // U(-1, 1): mean 0, variance 1/3; 5-sigma bounds for 83k draws.
  EXPECT_LT(std::fabs(mean), 5 * std::sqrt(1.0 / 3 / all.size()));
  EXPECT_NEAR(var, 1.0 / 3, 5 * std::sqrt(4.0 / 45 / all.size()));
  // Sample 2 filled alone (first_sample = 2) equals sample 2 of the batch.
  const Vol one{1, 3, 20, 21, 22};
  std::vector<float> alone(one.numel());
  uniform_fill(view(alone.data(), DType::Float32, one), -1.0, 1.0, 1234, 2);
  EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + 2 * one.numel(), alone.size() * 4));
}

TEST(Deform, BadInputs) {
  const Vol in{2, 1, 5, 5, 5};
  std::vector<float> src(in.numel()), dst(in.numel()), coeff(2 * 3 * 4 * 4 * 4);
  std::vector<double> m(24, 0.0);
  ResampleTarget t;
  t.in = view(src.data(), DType::Float32, in);
  t.out = view(dst.data(), DType::Float32, in);
  DeformField f;
  f.kind = FieldKind::BSpline;
  f.field = contiguous_view(coeff.data(), DType::Float32, Device::CPU, 2, 3, 4, 4, 3);
  EXPECT_THROW(resample_deformed(&t, 1, m.data(), f, false), Error);  // K < 4
  f.field = contiguous_view(coeff.data(), DType::Float32, Device::CPU, 1, 3, 4, 4, 4);
  EXPECT_THROW(resample_deformed(&t, 1, m.data(), f, false), Error);  // batch
  f.field = contiguous_view(coeff.data(), DType::Int32, Device::CPU, 2, 3, 4, 4, 4);
  EXPECT_THROW(resample_deformed(&t, 1, m.data(), f, false), Error);  // dtype
  f.kind = FieldKind::Dense;
  f.field = contiguous_view(coeff.data(), DType::Float32, Device::CPU, 2, 3, 4, 4, 4);
  EXPECT_THROW(resample_deformed(&t, 1, m.data(), f, false), Error);  // size
  f.kind = static_cast<FieldKind>(9);
  EXPECT_THROW(resample_deformed(&t, 1, m.data(), f, false), Error);
  try {
    f.kind = FieldKind::BSpline;
    f.field = contiguous_view(coeff.data(), DType::Float32, Device::CPU, 2, 2, 4, 4, 4);
    resample_deformed(&t, 1, m.data(), f, false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(N, 3, ...)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(uniform_fill(view(src.data(), DType::Float32, in), 1.0, 0.0, 1), Error);
  EXPECT_THROW(uniform_fill(view(src.data(), DType::Int32, in), 0.0, 1.0, 1), Error);
}

#if VOXAUG_WITH_CUDA
TEST(DeformCuda, TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol in{3, 2, 17, 12, 19}, out{3, 2, 15, 13, 300};
  const auto src = random_vec<float>(in.numel(), 5, -4, 6);
  const auto m = matrices_for(in.n, in, out, 21);
  BSplineCase bc{out, {6, 5, 30}, {3.0 / 14, 2.0 / 12, 27.0 / 299}, {1, 1, 1}};
  const auto coeff = random_vec<float>(out.n * 3 * 6 * 5 * 30, 9, -2.5, 2.5);
  std::vector<float> cpu(out.numel());
  ResampleTarget t;
  t.in = view(const_cast<float*>(src.data()), DType::Float32, in);
  t.out = view(cpu.data(), DType::Float32, out);
  t.padding = Padding::Reflection;
  DeformField f = bspline_field(const_cast<float*>(coeff.data()), DType::Float32, bc);
  resample_deformed(&t, 1, m.data(), f, false);
  DeviceBuffer dsrc(src), dcoeff(coeff), dm(m), dout(out.numel() * sizeof(float));
  t.in = view(dsrc.p, DType::Float32, in, Device::CUDA);
  t.out = view(dout.p, DType::Float32, out, Device::CUDA);
  f.field.data = dcoeff.p;
  f.field.device = Device::CUDA;
  resample_deformed(&t, 1, dm.as<double>(), f, false);
  CUDA_OK(cudaDeviceSynchronize());
  const auto gpu = dout.to_host<float>(cpu.size());
  EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(float)));
  // Dense field output and the uniform fill.
  const Vol fo{out.n, 3, out.d, out.h, out.w};
  std::vector<float> dense_cpu(fo.numel()), fill_cpu(fo.numel());
  f.field.data = const_cast<float*>(coeff.data());
  f.field.device = Device::CPU;
  deform_field_dense(f, view(dense_cpu.data(), DType::Float32, fo));
  uniform_fill(view(fill_cpu.data(), DType::Float32, fo), -1, 1, 77, 5);
  DeviceBuffer ddense(fo.numel() * sizeof(float));
  f.field.data = dcoeff.p;
  f.field.device = Device::CUDA;
  deform_field_dense(f, view(ddense.p, DType::Float32, fo, Device::CUDA));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(0, std::memcmp(dense_cpu.data(), ddense.to_host<float>(fo.numel()).data(),
                           dense_cpu.size() * sizeof(float)));
  uniform_fill(view(ddense.p, DType::Float32, fo, Device::CUDA), -1, 1, 77, 5);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(0, std::memcmp(fill_cpu.data(), ddense.to_host<float>(fo.numel()).data(),
                           fill_cpu.size() * sizeof(float)));
}

// The separable field (RandGridDistortion's per-axis tables): gather and dense field.
TEST(DeformCuda, SeparableFieldTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol in{2, 2, 17, 12, 19}, out{2, 2, 15, 13, 21};
  const auto src = random_vec<float>(in.numel(), 6, -4, 6);
  const auto m = matrices_for(in.n, in, out, 23);
  const int64_t L = 21;  // >= max(D', H', W')
  const auto table = random_vec<float>(out.n * 3 * L, 10, -1.5, 1.5);
  DeformField f;
  f.kind = FieldKind::Separable;
  f.field = contiguous_view(const_cast<float*>(table.data()), DType::Float32, Device::CPU, out.n,
                            3, L, 1, 1);
  std::vector<float> cpu(out.numel());
  ResampleTarget t;
  t.in = view(const_cast<float*>(src.data()), DType::Float32, in);
  t.out = view(cpu.data(), DType::Float32, out);
  t.padding = Padding::Border;
  resample_deformed(&t, 1, m.data(), f, false);
  const Vol fo{out.n, 3, out.d, out.h, out.w};
  std::vector<float> dense_cpu(fo.numel());
  deform_field_dense(f, view(dense_cpu.data(), DType::Float32, fo));
  DeviceBuffer dsrc(src), dtable(table), dm(m), dout(out.numel() * sizeof(float)),
      ddense(fo.numel() * sizeof(float));
  t.in = view(dsrc.p, DType::Float32, in, Device::CUDA);
  t.out = view(dout.p, DType::Float32, out, Device::CUDA);
  f.field = contiguous_view(dtable.p, DType::Float32, Device::CUDA, out.n, 3, L, 1, 1);
  resample_deformed(&t, 1, dm.as<double>(), f, false);
  deform_field_dense(f, view(ddense.p, DType::Float32, fo, Device::CUDA));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(0, std::memcmp(cpu.data(), dout.to_host<float>(cpu.size()).data(),
                           cpu.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dense_cpu.data(), ddense.to_host<float>(fo.numel()).data(),
                           dense_cpu.size() * sizeof(float)));
}
#endif

// The CUDA path's pre-contracted rows (kBSplineRowsKind, built by BSplineRowsForward) give the
// B-spline field's displacements and gather bit for bit; run here with the functors on the host.
TEST(Deform, PrecontractedRowsEqualTheBSplineField) {
  const Vol in{2, 2, 13, 11, 12}, out{2, 2, 12, 10, 150};
  const auto src = random_vec<float>(in.numel(), 5, -4, 6);
  const auto m = matrices_for(in.n, in, out, 21);
  const auto coeff = random_vec<float>(out.n * 3 * 6 * 5 * 25, 9, -2.5, 2.5);
  const std::vector<double> maps = {
      5.0 / 11, 0.45, 22.0 / 149, 1,   1,    1,     // sample 0: fits
      0.3,      0.5,  0.1,        0.2, -0.3, 1.5};  // sample 1: partly out
  DeformField f;
  f.kind = FieldKind::BSpline;
  f.field = contiguous_view(const_cast<float*>(coeff.data()), DType::Float32, Device::CPU, out.n, 3,
                            6, 5, 25);
  f.sample_map = maps.data();
  // Reference: the row path of resample_deformed and deform_field_dense.
  std::vector<float> ref(out.numel());
  ResampleTarget t;
  t.in = view(const_cast<float*>(src.data()), DType::Float32, in);
  t.out = view(ref.data(), DType::Float32, out);
  t.padding = Padding::Border;
  resample_deformed(&t, 1, m.data(), f, false);
  const Vol fo{out.n, 3, out.d, out.h, out.w};
  std::vector<float> ref_u(fo.numel());
  deform_field_dense(f, view(ref_u.data(), DType::Float32, fo));
  // The table, then the per-voxel bodies through it.
  detail::KField k{};
  k.kind = static_cast<int32_t>(FieldKind::BSpline);
  k.dtype = DType::Float32;
  k.data = coeff.data();
  const int64_t ksz[3] = {6, 5, 25};
  for (int a = 0; a < 3; ++a) k.size[a] = ksz[a];
  const VolumeView& cv = f.field;
  for (int a = 0; a < 5; ++a) k.stride[a] = cv.strides[a];
  k.sample_map = maps.data();
  std::vector<float> table(out.n * 3 * out.d * out.h * 25);
  const detail::BSplineRowsForward<float> rows{k, table.data(), out.d, out.h};
  detail::BSplineRowsForward<float>::State rs;
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t i = 0; i < rows.items(); ++i) rows(rs, n, i);
  const detail::KField rk = detail::bspline_rows_field(k, table.data(), false, out.d, out.h);
  std::vector<float> got_u(fo.numel()), got(out.numel());
  for (int64_t n = 0; n < out.n; ++n)
    for (int64_t d = 0; d < out.d; ++d)
      for (int64_t h = 0; h < out.h; ++h)
        for (int64_t w = 0; w < out.w; ++w) {
          float u[3];
          detail::field_displacement<float, false>(rk, n, d, h, w, u);  // the CUDA variant
          for (int c = 0; c < 3; ++c)
            got_u[(((n * 3 + c) * out.d + d) * out.h + h) * out.w + w] = u[c];
        }
  EXPECT_EQ(0, std::memcmp(got_u.data(), ref_u.data(), got_u.size() * sizeof(float)));
  detail::ResampleParams p{};
  p.num_targets = 1;
  p.matrices = m.data();
  p.out_size[0] = out.d, p.out_size[1] = out.h, p.out_size[2] = out.w;
  p.field = rk;
  detail::KTarget& kt = p.t[0];
  kt.in = src.data();
  kt.out = got.data();
  kt.in_dtype = kt.out_dtype = DType::Float32;
  kt.mode = static_cast<int32_t>(Interp::Linear);
  kt.padding = static_cast<int32_t>(Padding::Border);
  kt.channels = in.c;
  kt.elem_size = 4;
  const VolumeView vi = view(const_cast<float*>(src.data()), DType::Float32, in);
  const VolumeView vo = view(got.data(), DType::Float32, out);
  for (int a = 0; a < 3; ++a) kt.in_size[a] = vi.shape[a + 2];
  for (int a = 0; a < 5; ++a) kt.in_stride[a] = vi.strides[a], kt.out_stride[a] = vo.strides[a];
  // The variant the CUDA launcher runs on the rows (with_resample_forward: the field variant).
  EXPECT_EQ(unsigned(detail::kResampleField), detail::resample_features(p));
  detail::with_resample_forward<float>(p, [&](const auto& fwd) {
    using F = std::decay_t<decltype(fwd)>;
    if (!F::kField || F::kRawBSpline) ADD_FAILURE() << "the rows must take the lean field variant";
    for (int64_t n = 0; n < out.n; ++n) {
      typename F::State st;
      fwd.begin_sample(n, st);
      for (int64_t d = 0; d < out.d; ++d)
        for (int64_t h = 0; h < out.h; ++h)
          for (int64_t w = 0; w < out.w; ++w) fwd.voxel(st, n, d, h, w);
    }
  });
  EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)));
  int64_t moved = 0;
  for (float v : got_u) moved += v != 0;
  EXPECT_GT(moved, fo.numel() / 4);  // sample 1 is partly outside its domain
}
