// separable_filter / Gaussian taps: the CPU path vs naive float64 references written here from
// MONAI's definition (erf taps, zero padding, D then H then W) and scipy.ndimage's (sampled
// taps, "reflect" borders), awkward shapes, strided views, dtypes, per-sample sigmas in one
// batch, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../kernels/filter/median_kernels.h"
#include "test_support.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/filter.h"
#include "voxaug/error.h"
#include "voxaug/filter.h"

using namespace voxaug;

namespace {

struct Shape {
  int64_t n, c, d, h, w;
  int64_t numel() const { return n * c * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(d) + "x" +
           std::to_string(h) + "x" + std::to_string(w);
  }
};

// MONAI's taps from the formula, in float64 (independent of the library's float32 emulation).
std::vector<double> reference_taps(double sigma, double truncated) {
  const int64_t R = static_cast<int64_t>(std::max(sigma * truncated, 0.5) + 0.5);
  std::vector<double> w(2 * R + 1);
  const double t = 0.70710678 / std::fabs(sigma);
  for (int64_t x = -R; x <= R; ++x)
    w[x + R] = std::max(0.0, 0.5 * (std::erf((x + 0.5) * t) - std::erf((x - 0.5) * t)));
  return w;
}

// Naive separable correlation in float64, zero padding, D then H then W.
std::vector<double> reference_filter(const std::vector<double>& x, const Shape& s,
                                     const std::vector<double>& sigma, double truncated) {
  std::vector<double> cur = x, next(x.size());
  const int64_t sizes[3] = {s.d, s.h, s.w};
  const int64_t strides[3] = {s.h * s.w, s.w, 1};
  for (int a = 0; a < 3; ++a) {
    for (int64_t n = 0; n < s.n; ++n) {
      const double sg = sigma[n * 3 + a];
      const std::vector<double> taps =
          sg == 0 ? std::vector<double>{1.0} : reference_taps(sg, truncated);
      const int64_t R = (static_cast<int64_t>(taps.size()) - 1) / 2;
      for (int64_t c = 0; c < s.c; ++c)
        for (int64_t d = 0; d < s.d; ++d)
          for (int64_t h = 0; h < s.h; ++h)
            for (int64_t w = 0; w < s.w; ++w) {
              const int64_t base = (((n * s.c + c) * s.d + d) * s.h + h) * s.w + w;
              const int64_t pos[3] = {d, h, w};
              double acc = 0;
              for (int64_t k = -R; k <= R; ++k) {
                const int64_t q = pos[a] + k;
                if (q < 0 || q >= sizes[a]) continue;
                acc += taps[k + R] * cur[base + k * strides[a]];
              }
              next[base] = acc;
            }
    }
    std::swap(cur, next);
  }
  return cur;
}

std::vector<double> random_values(int64_t count, uint32_t seed, double lo = -100, double hi = 300) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(count);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Taps {
  std::vector<double> table;
  int64_t width = 0;
  int axes = 0;
  FilterTaps view() const { return FilterTaps{table.data(), width, axes}; }
};

Taps make_taps(const std::vector<double>& sigma, double truncated) {
  Taps t;
  const int64_t n = static_cast<int64_t>(sigma.size() / 3);
  t.width = gaussian_table_width(sigma.data(), n, truncated);
  t.table.resize(n * 3 * t.width);
  t.axes = gaussian_table(sigma.data(), n, truncated, t.width, t.table.data());
  return t;
}

// Runs the filter on CPU views, allocating the workspace.
void run(const VolumeView& in, const VolumeView& out, const FilterTaps& taps) {
  const int64_t bytes = separable_filter_workspace_bytes(in, out, taps.axes);
  std::vector<unsigned char> ws(static_cast<size_t>(bytes));
  separable_filter(in, out, taps, ws.empty() ? nullptr : ws.data(), bytes);
}

VolumeView view(void* p, DType t, const Shape& s) {
  return contiguous_view(p, t, Device::CPU, s.n, s.c, s.d, s.h, s.w);
}

void expect_close(const std::vector<double>& ref, const std::vector<float>& got, double rel,
                  const std::string& what) {
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  ASSERT_EQ(ref.size(), got.size());
  bool nonzero = false;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " at " << i;
    nonzero = nonzero || got[i] != 0.0f;
    ASSERT_NEAR(got[i], ref[i], rel * scale + 1e-30) << what << " at " << i;
  }
  EXPECT_TRUE(nonzero || scale == 0) << what << ": all zeros";
}

// Sigma sets per sample (D, H, W): varied, a zero axis, a radius wider than the axis.
std::vector<double> sigmas_for(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.3, 2.5);
  std::vector<double> s(n * 3);
  for (auto& v : s) v = u(rng);
  if (n > 1) s[3 + 1] = 0.0;  // sample 1: H not filtered
  if (n > 2) s[6 + 0] = 7.0;  // sample 2: radius 28 along D
  return s;
}

}  // namespace

TEST(GaussianTaps, RadiusMatchesMonai) {
  EXPECT_EQ(gaussian_radius(1.0, 4.0), 4);
  EXPECT_EQ(gaussian_radius(1.5, 3.0), 5);  // int(4.5 + 0.5)
  EXPECT_EQ(gaussian_radius(0.1, 4.0), 1);  // max(0.4, 0.5) -> 1
  EXPECT_EQ(gaussian_radius(0.0, 4.0), 1);
  EXPECT_EQ(gaussian_radius(-2.0, 4.0), 1);  // MONAI: signed sigma in the radius
  EXPECT_EQ(gaussian_radius(3.0, 4.0), 12);
}

TEST(GaussianTaps, MatchFormula) {
  for (double sigma : {0.25, 0.5, 1.0, 1.3, 2.0, 3.0, 7.5}) {
    for (double tr : {3.0, 4.0}) {
      const auto ref = reference_taps(static_cast<float>(sigma), tr);
      std::vector<double> got(ref.size());
      ASSERT_EQ(gaussian_radius(sigma, tr) * 2 + 1, static_cast<int64_t>(ref.size()));
      gaussian_kernel_1d(sigma, tr, got.data());
      double sum = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_NEAR(got[i], ref[i], 1e-6) << sigma << " " << i;
        EXPECT_EQ(got[i], got[ref.size() - 1 - i]) << "taps must be symmetric";
        EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(got[i])));  // float32 values
        sum += got[i];
      }
      EXPECT_NEAR(sum, 1.0, 5e-3);  // not renormalised: the tails beyond R are missing
    }
  }
}

TEST(GaussianTaps, ZeroAndNegativeSigma) {
  double t3[3];
  gaussian_kernel_1d(0.0, 4.0, t3);
  EXPECT_EQ(t3[0], 0.0);
  EXPECT_EQ(t3[1], 1.0);
  EXPECT_EQ(t3[2], 0.0);
  double n3[3], p3[3];
  gaussian_kernel_1d(-0.8, 4.0, n3);  // radius 1, |sigma| in the erf
  const auto ref = reference_taps(0.8f, 4.0);
  const int64_t R = (static_cast<int64_t>(ref.size()) - 1) / 2;
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(n3[k], ref[R - 1 + k], 1e-6);
  gaussian_kernel_1d(0.8, 0.1, p3);  // radius 1 as well
  for (int k = 0; k < 3; ++k) EXPECT_EQ(n3[k], p3[k]);
}

TEST(GaussianTaps, TableLayout) {
  const std::vector<double> sigma = {1.0, 0.0, 2.0, 0.5, 0.0, 0.0};
  const Taps t = make_taps(sigma, 4.0);
  EXPECT_EQ(t.width, 2 * 8 + 2);
  EXPECT_EQ(t.axes, 1 | 4);
  EXPECT_EQ(t.table[0], 4.0);
  EXPECT_EQ(t.table[1 * t.width], 0.0);  // identity row
  EXPECT_EQ(t.table[1 * t.width + 1], 1.0);
  EXPECT_EQ(t.table[2 * t.width], 8.0);
  EXPECT_EQ(t.table[3 * t.width], 2.0);
  std::vector<double> k(9);
  gaussian_kernel_1d(1.0, 4.0, k.data());
  for (int i = 0; i < 9; ++i) EXPECT_EQ(t.table[1 + i], k[i]);
}

TEST(Filter, Float32MatchesReferenceOnAwkwardShapes) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1},   {1, 1, 1, 1, 9},   {2, 1, 5, 1, 7},
                                     {3, 2, 9, 10, 11}, {1, 1, 4, 17, 6},  {4, 1, 3, 3, 3},
                                     {2, 3, 1, 33, 1},  {3, 1, 70, 5, 130}};
  for (const Shape& s : shapes) {
    for (double tr : {3.0, 4.0}) {
      const auto sigma = sigmas_for(s.n, static_cast<uint32_t>(s.numel()));
      const auto x = random_values(s.numel(), 7);
      const auto ref = reference_filter(x, s, sigma, tr);
      std::vector<float> in(x.begin(), x.end()), out(s.numel(), -1.0f);
      const Taps t = make_taps(sigma, tr);
      run(view(in.data(), DType::Float32, s), view(out.data(), DType::Float32, s), t.view());
      expect_close(ref, out, 2e-6, s.str() + " truncated " + std::to_string(tr));
    }
  }
}

TEST(Filter, Float64UsesFloat64) {
  const Shape s{3, 2, 8, 9, 10};
  const auto sigma = sigmas_for(s.n, 5);
  const auto x = random_values(s.numel(), 8);
  // Reference with the library's own (float32-valued) taps: only the summation differs.
  const Taps t = make_taps(sigma, 4.0);
  std::vector<double> out(s.numel());
  run(view(const_cast<double*>(x.data()), DType::Float64, s), view(out.data(), DType::Float64, s),
      t.view());
  const auto ref = reference_filter(x, s, sigma, 4.0);
  double scale = 0, err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    err = std::max(err, std::fabs(ref[i] - out[i]));
  }
  // The taps are MONAI's float32 values (within ~1e-7 of the float64 formula).
  EXPECT_LT(err, 2e-6 * scale);
  EXPECT_GT(err, 0.0);
}

TEST(Filter, StridedInputAndOutput) {
  // A (N, C, D, H, W) view of a buffer laid out (D, N, W, C, H) with gaps, and an output
  // with a channel gap.
  const Shape s{2, 3, 5, 6, 7};
  const auto sigma = sigmas_for(s.n, 9);
  const auto x = random_values(s.numel(), 10);
  const int64_t gap = 2;
  const int64_t sh = gap, sc = s.h * gap, sw = s.c * sc, sn = s.w * sw, sd = s.n * sn;
  std::vector<float> big(sd * s.d, std::nanf(""));
  VolumeView in;
  in.data = big.data();
  in.dtype = DType::Float32;
  const int64_t shape[5] = {s.n, s.c, s.d, s.h, s.w}, strides[5] = {sn, sc, sd, sh, sw};
  for (int k = 0; k < 5; ++k) {
    in.shape[k] = shape[k];
    in.strides[k] = strides[k];
  }
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t d = 0; d < s.d; ++d)
        for (int64_t h = 0; h < s.h; ++h)
          for (int64_t w = 0; w < s.w; ++w)
            big[n * sn + c * sc + d * sd + h * sh + w * sw] =
                static_cast<float>(x[(((n * s.c + c) * s.d + d) * s.h + h) * s.w + w]);
  std::vector<float> outbuf(s.n * (s.c + 1) * s.d * s.h * s.w, -7.0f);
  VolumeView out =
      contiguous_view(outbuf.data(), DType::Float32, Device::CPU, s.n, s.c + 1, s.d, s.h, s.w);
  out.shape[1] = s.c;
  const Taps t = make_taps(sigma, 4.0);
  run(in, out, t.view());
  std::vector<float> got(s.numel());
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t e = 0; e < s.d * s.h * s.w; ++e)
        got[(n * s.c + c) * s.d * s.h * s.w + e] =
            outbuf[n * out.strides[0] + c * out.strides[1] + e];
  std::vector<double> xs(x.begin(), x.end());
  for (auto& v : xs) v = static_cast<float>(v);
  expect_close(reference_filter(xs, s, sigma, 4.0), got, 2e-6, "strided");
  // The gap channel is untouched.
  for (int64_t n = 0; n < s.n; ++n)
    EXPECT_EQ(outbuf[n * out.strides[0] + s.c * out.strides[1]], -7.0f);
}

TEST(Filter, HalfAndIntegerInputs) {
  const Shape s{2, 1, 6, 7, 8};
  const auto sigma = sigmas_for(s.n, 11);
  const auto x = random_values(s.numel(), 12, 0, 250);
  const Taps t = make_taps(sigma, 4.0);
  std::vector<detail::half_t> f16(s.numel());
  std::vector<detail::bfloat16_t> b16(s.numel());
  std::vector<uint8_t> u8(s.numel());
  std::vector<double> x16(s.numel()), xb(s.numel()), xu(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    f16[i] = detail::store_as<detail::half_t>(static_cast<float>(x[i]));
    b16[i] = detail::store_as<detail::bfloat16_t>(static_cast<float>(x[i]));
    u8[i] = static_cast<uint8_t>(x[i]);
    x16[i] = detail::load_as<float>(f16[i]);
    xb[i] = detail::load_as<float>(b16[i]);
    xu[i] = u8[i];
  }
  std::vector<float> out(s.numel());
  run(view(f16.data(), DType::Float16, s), view(out.data(), DType::Float32, s), t.view());
  expect_close(reference_filter(x16, s, sigma, 4.0), out, 2e-6, "float16 -> float32");
  run(view(b16.data(), DType::BFloat16, s), view(out.data(), DType::Float32, s), t.view());
  expect_close(reference_filter(xb, s, sigma, 4.0), out, 2e-6, "bfloat16 -> float32");
  run(view(u8.data(), DType::UInt8, s), view(out.data(), DType::Float32, s), t.view());
  expect_close(reference_filter(xu, s, sigma, 4.0), out, 2e-6, "uint8 -> float32");
  // float32 -> float16 output: the float32 result rounded once.
  std::vector<float> in32(x.begin(), x.end()), ref32(s.numel());
  run(view(in32.data(), DType::Float32, s), view(ref32.data(), DType::Float32, s), t.view());
  std::vector<detail::half_t> o16(s.numel());
  run(view(in32.data(), DType::Float32, s), view(o16.data(), DType::Float16, s), t.view());
  for (int64_t i = 0; i < s.numel(); ++i)
    ASSERT_EQ(o16[i].bits, detail::float_to_half(ref32[i])) << i;
}

TEST(Filter, ZeroSigmaIsIdentity) {
  const Shape s{2, 2, 5, 4, 3};
  const auto x = random_values(s.numel(), 13);
  std::vector<float> in(x.begin(), x.end()), out(s.numel());
  const std::vector<double> sigma(s.n * 3, 0.0);
  const Taps t = make_taps(sigma, 4.0);
  EXPECT_EQ(t.axes, 0);
  EXPECT_EQ(separable_filter_workspace_bytes(view(in.data(), DType::Float32, s),
                                             view(out.data(), DType::Float32, s), t.axes),
            0);
  run(view(in.data(), DType::Float32, s), view(out.data(), DType::Float32, s), t.view());
  EXPECT_EQ(0, std::memcmp(in.data(), out.data(), in.size() * sizeof(float)));
  // One axis only: the other two untouched (compare with a 1-axis reference).
  std::vector<double> sg = {0.0, 0.0, 1.2, 0.0, 0.0, 0.7};
  const Taps t1 = make_taps(sg, 4.0);
  EXPECT_EQ(t1.axes, 4);
  run(view(in.data(), DType::Float32, s), view(out.data(), DType::Float32, s), t1.view());
  std::vector<double> xs(in.begin(), in.end());
  expect_close(reference_filter(xs, s, sg, 4.0), out, 2e-6, "W only");
}

TEST(Filter, RowPathEqualsDefinition) {
  // The CPU backend's row loops vs the per-voxel functor (filter_point) it must equal.
  const Shape s{2, 2, 13, 11, 300};
  const auto x = random_values(s.numel(), 14);
  std::vector<float> in(x.begin(), x.end());
  const std::vector<double> sigma = {1.7, 0.6, 2.9, 0.4, 3.3, 60.0};
  const Taps t = make_taps(sigma, 4.0);
  for (int a = 0; a < 3; ++a) {
    std::vector<float> fast(s.numel()), slow(s.numel());
    FilterTaps ft = t.view();
    ft.axes = 1 << a;
    run(view(in.data(), DType::Float32, s), view(fast.data(), DType::Float32, s), ft);
    detail::FilterPass p;
    p.src = in.data();
    p.dst = slow.data();
    const VolumeView v = view(in.data(), DType::Float32, s);
    for (int k = 0; k < 5; ++k) {
      p.shape[k] = v.shape[k];
      p.src_strides[k] = p.dst_strides[k] = v.strides[k];
    }
    p.axis = a;
    p.table = t.table.data();
    p.width = t.width;
    const detail::FilterForward<float> f{p};
    for (int64_t n = 0; n < s.n; ++n) {
      detail::FilterForward<float>::State st;
      f.begin_sample(n, st);
      for (int64_t i = 0; i < f.items(); ++i) f(st, n, i);
    }
    EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(float)))
        << "axis " << a;
  }
}

// ---- scipy.ndimage.gaussian_filter: sampled, renormalised taps and "reflect" borders ----

// scipy's kernel from its formula (float64; a plain sum, so within a few ulps of scipy's
// pairwise one).
std::vector<double> reference_sampled_taps(double sigma, double truncate) {
  const int64_t R = static_cast<int64_t>(truncate * sigma + 0.5);
  std::vector<double> w(2 * R + 1);
  double sum = 0;
  for (int64_t x = -R; x <= R; ++x) sum += (w[x + R] = std::exp(-0.5 * x * x / (sigma * sigma)));
  for (auto& v : w) v /= sum;
  return w;
}

// scipy's "reflect" mode written out as repeated mirroring: (d c b a | a b c d | d c b a).
int64_t reference_reflect(int64_t q, int64_t len) {
  while (q < 0 || q >= len) q = q < 0 ? -1 - q : 2 * len - 1 - q;
  return q;
}

// Naive gaussian_filter in float64: D then H then W, axes with sigma <= 1e-15 skipped.
std::vector<double> reference_scipy_filter(const std::vector<double>& x, const Shape& s,
                                           const std::vector<double>& sigma) {
  std::vector<double> cur = x, next(x.size());
  const int64_t sizes[3] = {s.d, s.h, s.w};
  const int64_t strides[3] = {s.h * s.w, s.w, 1};
  for (int a = 0; a < 3; ++a) {
    next = cur;
    for (int64_t n = 0; n < s.n; ++n) {
      const double sg = sigma[n * 3 + a];
      if (sg <= 1e-15) continue;
      const std::vector<double> taps = reference_sampled_taps(sg, 4.0);
      const int64_t R = (static_cast<int64_t>(taps.size()) - 1) / 2;
      for (int64_t c = 0; c < s.c; ++c)
        for (int64_t d = 0; d < s.d; ++d)
          for (int64_t h = 0; h < s.h; ++h)
            for (int64_t w = 0; w < s.w; ++w) {
              const int64_t line = (((n * s.c + c) * s.d + d) * s.h + h) * s.w + w;
              const int64_t pos[3] = {d, h, w};
              const int64_t base = line - pos[a] * strides[a];
              double acc = 0;
              for (int64_t k = -R; k <= R; ++k)
                acc +=
                    taps[k + R] * cur[base + reference_reflect(pos[a] + k, sizes[a]) * strides[a]];
              next[line] = acc;
            }
    }
    std::swap(cur, next);
  }
  return cur;
}

Taps make_sampled_taps(const std::vector<double>& sigma) {
  Taps t;
  const int64_t n = static_cast<int64_t>(sigma.size() / 3);
  t.width = gaussian_table_width(sigma.data(), n, 4.0, GaussianTaps::Sampled);
  t.table.resize(n * 3 * t.width);
  t.axes = gaussian_table(sigma.data(), n, 4.0, t.width, t.table.data(), GaussianTaps::Sampled);
  return t;
}

TEST(SampledTaps, MatchScipyFormulaAndRadius) {
  for (double sg : {1e-3, 0.3, 0.5, 0.999, 1.0, 1.7, 2.62, 7.0, 31.3}) {
    const auto ref = reference_sampled_taps(sg, 4.0);
    ASSERT_EQ(sampled_gaussian_radius(sg, 4.0), static_cast<int64_t>(4.0 * sg + 0.5));
    std::vector<double> got(ref.size());
    sampled_gaussian_kernel_1d(sg, 4.0, got.data());
    double sum = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(got[i], ref[i], 4e-16 * std::max(1.0, ref[i] * 8)) << sg << " tap " << i;
      EXPECT_EQ(got[i], got[ref.size() - 1 - i]) << "symmetric";
      sum += got[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
  EXPECT_EQ(sampled_gaussian_radius(2.0, 2.5), 5);
  // scipy's identity axes and the sampled kind's argument checks.
  const std::vector<double> sigma = {0.0, 1e-15, 2e-15};
  const Taps t = make_sampled_taps(sigma);
  EXPECT_EQ(t.axes, 4);
  EXPECT_EQ(t.table[0], 0.0);
  EXPECT_EQ(t.table[1], 1.0);
  EXPECT_THROW(sampled_gaussian_radius(-0.5, 4.0), Error);
  EXPECT_THROW(sampled_gaussian_radius(1.0, 0.0), Error);
  const std::vector<double> negative = {1.0, -1.0, 1.0};
  try {
    (void)gaussian_table_width(negative.data(), 1, 4.0, GaussianTaps::Sampled);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sigma[0][1]"), std::string::npos) << e.what();
  }
}

TEST(ReflectIndex, IsScipysMirror) {
  for (int64_t len : {1, 2, 3, 7}) {
    for (int64_t q = -5 * len - 3; q < 6 * len + 3; ++q)
      ASSERT_EQ(detail::reflect_index(q, len), reference_reflect(q, len)) << q << " of " << len;
  }
}

TEST(Filter, ScipyReflectMatchesReference) {
  // Radii beyond the axis length (sigma 5 on 3 voxels) reflect more than once, as scipy does.
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1},   {1, 1, 1, 1, 9},  {2, 1, 5, 1, 7},
                                     {3, 2, 9, 10, 11}, {1, 1, 3, 17, 6}, {2, 3, 1, 33, 1},
                                     {3, 1, 70, 5, 300}};
  for (const Shape& s : shapes) {
    std::vector<double> sigma = sigmas_for(s.n, static_cast<uint32_t>(s.numel()) + 5);
    sigma[0] = 5.0;
    const auto x = random_values(s.numel(), 9);
    const auto ref = reference_scipy_filter(x, s, sigma);
    const Taps t = make_sampled_taps(sigma);
    FilterTaps ft = t.view();
    ft.border = FilterBorder::Reflect;
    std::vector<float> in(x.begin(), x.end()), out(s.numel(), -1.0f);
    run(view(in.data(), DType::Float32, s), view(out.data(), DType::Float32, s), ft);
    expect_close(ref, out, 2e-6, s.str() + " float32");
    std::vector<double> out64(s.numel(), -1.0);
    run(view(const_cast<double*>(x.data()), DType::Float64, s),
        view(out64.data(), DType::Float64, s), ft);
    double scale = 0, err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      scale = std::max(scale, std::fabs(ref[i]));
      err = std::max(err, std::fabs(out64[i] - ref[i]));
    }
    EXPECT_LE(err, 1e-13 * scale) << s.str() << " float64";
  }
}

TEST(Filter, ReflectRowPathEqualsDefinition) {
  // The CPU row loops with reflection vs the per-voxel functor, bit for bit, on every axis;
  // sigma 5 on H (11 voxels, radius 20) reflects twice, W runs span several 256-voxel runs.
  const Shape s{2, 2, 13, 11, 300};
  const auto x = random_values(s.numel(), 15);
  for (DType src : {DType::Float32, DType::Float64}) {
    std::vector<float> in32(x.begin(), x.end());
    const void* src_data = src == DType::Float32 ? static_cast<const void*>(in32.data())
                                                 : static_cast<const void*>(x.data());
    const std::vector<double> sigma = {1.7, 5.0, 2.9, 0.4, 3.3, 60.0};
    const Taps t = make_sampled_taps(sigma);
    for (int a = 0; a < 3; ++a) {
      std::vector<float> fast(s.numel()), slow(s.numel());
      FilterTaps ft = t.view();
      ft.axes = 1 << a;
      ft.border = FilterBorder::Reflect;
      const VolumeView v = view(const_cast<void*>(src_data), src, s);
      run(v, view(fast.data(), DType::Float32, s), ft);
      detail::FilterPass p;
      p.src = src_data;
      p.src_dtype = src;
      p.dst = slow.data();
      const VolumeView vo = view(slow.data(), DType::Float32, s);
      for (int k = 0; k < 5; ++k) {
        p.shape[k] = v.shape[k];
        p.src_strides[k] = v.strides[k];
        p.dst_strides[k] = vo.strides[k];
      }
      p.axis = a;
      p.table = t.table.data();
      p.width = t.width;
      p.reflect = true;
      auto body = [&](auto acc_tag) {
        using Acc = decltype(acc_tag);
        const detail::FilterForward<Acc> f{p};
        for (int64_t n = 0; n < s.n; ++n) {
          typename detail::FilterForward<Acc>::State st;
          f.begin_sample(n, st);
          for (int64_t i = 0; i < f.items(); ++i) f(st, n, i);
        }
      };
      if (src == DType::Float64) {
        body(double{});
      } else {
        body(float{});
      }
      EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(float)))
          << "axis " << a << " " << dtype_name(src);
    }
  }
}

TEST(Filter, BadBorderIsRejected) {
  const Shape s{1, 1, 4, 4, 4};
  std::vector<float> in(s.numel(), 1.0f), out(s.numel());
  const Taps t = make_sampled_taps({1.0, 1.0, 1.0});
  FilterTaps ft = t.view();
  ft.border = static_cast<FilterBorder>(7);
  try {
    run(view(in.data(), DType::Float32, s), view(out.data(), DType::Float32, s), ft);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("taps.border"), std::string::npos) << e.what();
  }
}

TEST(Filter, EmptyVolume) {
  const Shape s{0, 1, 4, 4, 4};
  const Taps t = make_taps({}, 4.0);
  EXPECT_NO_THROW(run(view(nullptr, DType::Float32, s), view(nullptr, DType::Float32, s),
                      FilterTaps{nullptr, 2, 7}));
  (void)t;
}

TEST(Filter, BadArgumentsNameTheArgument) {
  const Shape s{1, 1, 4, 4, 4};
  std::vector<float> in(s.numel(), 1.0f), out(s.numel());
  std::vector<int32_t> iout(s.numel());
  const Taps t = make_taps({1.0, 1.0, 1.0}, 4.0);
  const VolumeView vin = view(in.data(), DType::Float32, s);
  const VolumeView vout = view(out.data(), DType::Float32, s);
  auto expect_error = [](auto&& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::vector<unsigned char> ws(1 << 20);
  expect_error(
      [&] {
        separable_filter(vin, view(iout.data(), DType::Int32, s), t.view(), ws.data(), ws.size());
      },
      "out must be");
  expect_error(
      [&] {
        separable_filter(vin, view(out.data(), DType::Float32, {1, 1, 4, 4, 5}), t.view(),
                         ws.data(), ws.size());
      },
      "shape");
  expect_error(
      [&] {
        separable_filter(vin, vout, FilterTaps{nullptr, 10, 7}, ws.data(), ws.size());
      },
      "taps.table");
  expect_error([&] { separable_filter(vin, vout, t.view(), ws.data(), 4); }, "workspace_bytes");
  expect_error(
      [&] {
        separable_filter(vin, vout, FilterTaps{t.table.data(), t.width, 9}, ws.data(), ws.size());
      },
      "taps.axes");
  expect_error([&] { separable_filter(vin, vin, t.view(), ws.data(), ws.size()); }, "overlap");
  std::vector<double> bad = t.table;
  bad[0] = 100;  // radius wider than the row
  expect_error(
      [&] {
        separable_filter(vin, vout, FilterTaps{bad.data(), t.width, 7}, ws.data(), ws.size());
      },
      "radius");
  expect_error([] { gaussian_radius(1.0, 0.0); }, "truncated");
  expect_error([] { gaussian_radius(std::nan(""), 4.0); }, "sigma");
  const double nan_sigma[3] = {1.0, std::nan(""), 1.0};
  expect_error([&] { gaussian_table_width(nan_sigma, 1, 4.0); }, "sigma[0][1]");
  const double s3[3] = {1.0, 1.0, 1.0};
  std::vector<double> small(3 * 4);
  expect_error([&] { gaussian_table(s3, 1, 4.0, 4, small.data()); }, "width");
  expect_error([] { gaussian_radius(1e9, 4.0); }, "too large");
}

// ---- the median filter ----

namespace {

// The median of each replicate-padded box by a full sort (float64-free: the values are floats).
std::vector<float> naive_median(const std::vector<float>& x, const voxaug_test::Vol& v,
                                const int64_t r[3]) {
  std::vector<float> out(x.size());
  for (int64_t nc = 0; nc < v.n * v.c; ++nc)
    for (int64_t d = 0; d < v.d; ++d)
      for (int64_t h = 0; h < v.h; ++h)
        for (int64_t w = 0; w < v.w; ++w) {
          std::vector<float> box;
          for (int64_t a = d - r[0]; a <= d + r[0]; ++a)
            for (int64_t b = h - r[1]; b <= h + r[1]; ++b)
              for (int64_t c = w - r[2]; c <= w + r[2]; ++c) {
                const int64_t ca = std::clamp<int64_t>(a, 0, v.d - 1);
                const int64_t cb = std::clamp<int64_t>(b, 0, v.h - 1);
                const int64_t cc = std::clamp<int64_t>(c, 0, v.w - 1);
                box.push_back(x[static_cast<size_t>(((nc * v.d + ca) * v.h + cb) * v.w + cc)]);
              }
          std::sort(box.begin(), box.end());
          out[static_cast<size_t>(((nc * v.d + d) * v.h + h) * v.w + w)] =
              box[(box.size() - 1) / 2];
        }
  return out;
}

// The per-voxel body the CUDA backend runs (quickselect), item by item on the host.
std::vector<float> median_body_on_host(std::vector<float>& x, const voxaug_test::Vol& v,
                                       const int64_t r[3]) {
  detail::MedianBody f{};
  f.in = x.data();
  f.in_t = DType::Float32;
  const VolumeView xv = voxaug_test::view(x.data(), DType::Float32, v);
  for (int a = 0; a < 5; ++a) f.in_stride[a] = xv.strides[a];
  std::vector<float> body(x.size());
  f.out = body.data();
  f.size[0] = v.c, f.size[1] = v.d, f.size[2] = v.h, f.size[3] = v.w;
  for (int a = 0; a < 3; ++a) f.radius[a] = r[a];
  detail::MedianBody::State st;
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t e = 0; e < f.items(); ++e) f(st, n, e);
  return body;
}

}  // namespace

// The CPU path (sorted columns, merge-select) against a full sort per box, and the per-voxel
// body the CUDA backend runs (quickselect), run here on the host.
TEST(MedianFilter, MatchesNaiveAndTheDeviceBody) {
  const voxaug_test::Vol v{2, 2, 7, 9, 11};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(v.numel()));
  for (auto& e : x) e = std::round(u(rng) * 4.0f) / 4.0f;  // ties on purpose
  const int64_t radii[][3] = {{1, 1, 1}, {0, 2, 1}, {2, 1, 0}, {3, 3, 3}, {0, 0, 0}, {1, 0, 3}};
  for (const auto& r : radii) {
    std::vector<float> got(x.size(), -99.0f);
    median_filter(voxaug_test::view(x.data(), DType::Float32, v),
                  voxaug_test::view(got.data(), DType::Float32, v), r);
    const std::vector<float> ref = naive_median(x, v, r);
    EXPECT_EQ(got, ref) << "radius " << r[0] << " " << r[1] << " " << r[2];
    const std::vector<float> body = median_body_on_host(x, v, r);
    EXPECT_EQ(body, ref) << "device body, radius " << r[0] << " " << r[1] << " " << r[2];
  }
  {  // NaN with a sign and a payload, signed zeros: the same bits from the host and the device body
    std::vector<float> xn = x;
    uint32_t neg_nan = 0xffc00123u;
    std::memcpy(&xn[17], &neg_nan, sizeof neg_nan);
    std::memcpy(&xn[600], &neg_nan, sizeof neg_nan);
    const int64_t r[3] = {1, 1, 1};
    std::vector<float> got(x.size());
    median_filter(voxaug_test::view(xn.data(), DType::Float32, v),
                  voxaug_test::view(got.data(), DType::Float32, v), r);
    const std::vector<float> body = median_body_on_host(xn, v, r);
    int nans = 0;
    for (float g : got) nans += g != g;
    EXPECT_GE(nans, 27);  // every window around each NaN
    // Bit for bit (the data has -0 and +0 ties too: a zero median is +0 on both).
    EXPECT_EQ(std::memcmp(got.data(), body.data(), got.size() * sizeof(float)), 0);
  }
  std::vector<float> out(x.size());
  const int64_t big[3] = {4, 3, 3};  // 9 x 7 x 7 = 441 voxels > 343
  EXPECT_THROW(median_filter(voxaug_test::view(x.data(), DType::Float32, v),
                             voxaug_test::view(out.data(), DType::Float32, v), big),
               Error);
  const int64_t neg[3] = {1, -1, 1};
  EXPECT_THROW(median_filter(voxaug_test::view(x.data(), DType::Float32, v),
                             voxaug_test::view(out.data(), DType::Float32, v), neg),
               Error);
  std::vector<double> out64(x.size());
  const int64_t one[3] = {1, 1, 1};
  EXPECT_THROW(median_filter(voxaug_test::view(x.data(), DType::Float32, v),
                             voxaug_test::view(out64.data(), DType::Float64, v), one),
               Error);
}
