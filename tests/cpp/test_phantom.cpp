// Phantom (include/voxaug/phantom.h): the CPU launcher (OpenMP, its own row walk with one
// Philox block per four voxels) against a naive host loop that calls the shared functions per
// voxel; geometric properties of the table checked in float64; argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernels/phantom/phantom_kernels.h"
#include "test_support.h"
#include "voxaug/detail/phantom.h"
#include "voxaug/error.h"
#include "voxaug/phantom.h"

using namespace voxaug;
using voxaug_test::Vol;

namespace {

struct Result {
  std::vector<float> table, image;
  std::vector<uint8_t> label;
};

Result run_cpu(const Vol& v, const PhantomOptions& o) {
  Result r;
  r.table.assign(static_cast<size_t>(v.n * phantom_param_count(o.num_classes)), -1.0f);
  r.image.assign(static_cast<size_t>(v.numel()), -7.0f);
  r.label.assign(static_cast<size_t>(v.numel()), 255);
  phantom(r.table.data(), voxaug_test::view(r.image.data(), DType::Float32, v),
          voxaug_test::view(r.label.data(), DType::UInt8, v), o);
  return r;
}

// Naive loop: every row item, then every voxel with its own normal4 call.
Result run_naive(const Vol& v, const PhantomOptions& o) {
  const int64_t P = phantom_param_count(o.num_classes);
  const int K = static_cast<int>(o.num_classes);
  Result r;
  r.table.assign(static_cast<size_t>(v.n * P), 0.0f);
  r.image.assign(static_cast<size_t>(v.numel()), 0.0f);
  r.label.assign(static_cast<size_t>(v.numel()), 0);
  const float scale[3] = {2.0f / static_cast<float>(v.d), 2.0f / static_cast<float>(v.h),
                          2.0f / static_cast<float>(v.w)};
  for (int64_t n = 0; n < v.n; ++n) {
    const uint32_t sample = o.first_sample + static_cast<uint32_t>(n);
    float* row = r.table.data() + n * P;
    for (int64_t i = 0; i <= K; ++i) detail::phantom_row_item(o.seed, sample, K, i, row);
    int64_t e = 0;
    for (int64_t d = 0; d < v.d; ++d)
      for (int64_t h = 0; h < v.h; ++h)
        for (int64_t w = 0; w < v.w; ++w, ++e) {
          float z[4], value;
          detail::normal4(o.seed, static_cast<uint64_t>(e >> 2), sample, z);
          const uint8_t l = detail::phantom_voxel(
              row, K, detail::phantom_coord(d, scale[0]), detail::phantom_coord(h, scale[1]),
              detail::phantom_coord(w, scale[2]), &value);
          const size_t at = static_cast<size_t>(n * v.d * v.h * v.w + e);
          r.image[at] = detail::fadd(value, detail::fmul(row[0], z[e & 3]));
          r.label[at] = l;
        }
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

PhantomOptions opts(int64_t k, uint64_t seed, uint32_t first = 0) {
  PhantomOptions o;
  o.num_classes = k;
  o.seed = seed;
  o.first_sample = first;
  return o;
}

}  // namespace

TEST(Phantom, CpuLauncherEqualsNaiveLoop) {
  struct Case {
    Vol v;
    int64_t k;
    uint64_t seed;
    uint32_t first;
  };
  // Odd sizes: chunks of 2048 voxels start inside rows; W = 9 puts blocks of four across rows.
  const Case cases[] = {{{2, 1, 24, 20, 28}, 5, 1, 0},
                        {{3, 1, 13, 11, 9}, 2, 0xFFFFFFFFFFFFFFFFull, 7},
                        {{1, 1, 33, 8, 31}, 16, 12345, 4000000000u},
                        {{2, 1, 8, 8, 8}, 14, 99, 3}};
  for (const Case& c : cases) {
    const PhantomOptions o = opts(c.k, c.seed, c.first);
    const Result a = run_cpu(c.v, o), b = run_naive(c.v, o);
    EXPECT_TRUE(same_bits(a.table, b.table)) << "K " << c.k;
    EXPECT_TRUE(same_bits(a.image, b.image)) << "K " << c.k;
    EXPECT_EQ(a.label, b.label) << "K " << c.k;
    for (float x : a.image) ASSERT_TRUE(std::isfinite(x));
    for (uint8_t l : a.label) ASSERT_LT(l, c.k);
  }
}

TEST(Phantom, SampleIsAddressedByGlobalIndex) {
  const Vol v{3, 1, 12, 10, 14};
  const PhantomOptions o = opts(6, 42, 5);
  const Result batch = run_cpu(v, o);
  const int64_t P = phantom_param_count(6), V = v.d * v.h * v.w;
  for (int64_t n = 0; n < v.n; ++n) {
    const Result one = run_cpu({1, 1, v.d, v.h, v.w}, opts(6, 42, 5 + static_cast<uint32_t>(n)));
    EXPECT_EQ(std::memcmp(one.table.data(), batch.table.data() + n * P, P * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.image.data(), batch.image.data() + n * V, V * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(one.label.data(), batch.label.data() + n * V, V), 0);
  }
  // Another seed: other subjects.
  const Result other = run_cpu(v, opts(6, 43, 5));
  EXPECT_FALSE(same_bits(other.image, batch.image));
}

TEST(Phantom, StridedOutputsMatchDense) {
  const Vol v{2, 1, 9, 10, 11};
  const PhantomOptions o = opts(4, 3);
  const Result dense = run_cpu(v, o);
  // Batch stride padded, and the label stored w-major (transposed h / w strides).
  const int64_t V = v.d * v.h * v.w, bs = V + 17;
  std::vector<float> img(static_cast<size_t>(v.n * bs), 0.0f);
  std::vector<uint8_t> lab(static_cast<size_t>(v.n * V), 0);
  VolumeView iv = voxaug_test::view(img.data(), DType::Float32, v);
  iv.strides[0] = bs;
  VolumeView lv = voxaug_test::view(lab.data(), DType::UInt8, v);
  lv.strides[3] = 1;
  lv.strides[4] = v.h;
  std::vector<float> table(static_cast<size_t>(v.n * phantom_param_count(4)));
  phantom(table.data(), iv, lv, o);
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t d = 0; d < v.d; ++d)
      for (int64_t h = 0; h < v.h; ++h)
        for (int64_t w = 0; w < v.w; ++w) {
          const int64_t e = (d * v.h + h) * v.w + w;
          ASSERT_EQ(img[n * bs + e], dense.image[n * V + e]);
          ASSERT_EQ(lab[n * V + d * v.h * v.w + w * v.h + h], dense.label[n * V + e]);
        }
}

// The documented geometry, checked in float64 from the table alone.
TEST(Phantom, TableGeometry) {
  const int64_t K = 16;
  const Result r = run_cpu({8, 1, 8, 8, 8}, opts(K, 2024));
  const int64_t P = phantom_param_count(K);
  for (int64_t n = 0; n < 8; ++n) {
    const float* row = r.table.data() + n * P;
    EXPECT_GE(row[0], 15.0f);
    EXPECT_LT(row[0], 25.0f);
    for (int i = 0; i < 9; ++i) EXPECT_LE(std::abs(row[1 + i]), 0.05f);
    for (int t = 0; t < 3; ++t) {
      const float* k = row + 10 + 5 * t;
      const double f = std::sqrt(double(k[0]) * k[0] + double(k[1]) * k[1] + double(k[2]) * k[2]);
      EXPECT_NEAR(f, 2.5, 1.5 + 1e-5);
      EXPECT_GE(k[4], 3.0f);
      EXPECT_LT(k[4], 5.0f);
    }
    const float* body = row + kPhantomHeader;
    for (int64_t o = 0; o < K; ++o) {
      const float* ob = body + kPhantomObject * o;
      const float* a = ob + 3;
      // Rows of A are orthogonal (A = diag(1/r) R^T), with det > 0 (a proper rotation).
      for (int i = 0; i < 3; ++i)
        for (int j = i + 1; j < 3; ++j) {
          const double dot = double(a[3 * i]) * a[3 * j] + double(a[3 * i + 1]) * a[3 * j + 1] +
                             double(a[3 * i + 2]) * a[3 * j + 2];
          EXPECT_NEAR(dot, 0.0, 1e-4) << "object " << o;
        }
      const double det = double(a[0]) * (double(a[4]) * a[8] - double(a[5]) * a[7]) -
                         double(a[1]) * (double(a[3]) * a[8] - double(a[5]) * a[6]) +
                         double(a[2]) * (double(a[3]) * a[7] - double(a[4]) * a[6]);
      EXPECT_GT(det, 0.0);
      const double s = o == 0 ? 0.0 : 0.25 - 0.17 * double(o - 1) / double(K - 2);
      for (int i = 0; i < 3; ++i) {
        const double radius = 1.0 / std::sqrt(double(a[3 * i]) * a[3 * i] +
                                              double(a[3 * i + 1]) * a[3 * i + 1] +
                                              double(a[3 * i + 2]) * a[3 * i + 2]);
        if (o == 0) {
          EXPECT_GE(radius, 0.7 - 1e-5);
          EXPECT_LE(radius, 0.9 + 1e-5);
          EXPECT_LE(std::abs(ob[i]), 0.05f);
        } else {
          EXPECT_GE(radius, 2 * s * 0.75 - 1e-5) << "object " << o;
          EXPECT_LE(radius, 2 * s * 1.25 + 1e-5) << "object " << o;
          // Centre inside the body (within 0.45 of its semi-axis).
          const double rb = 1.0 / std::abs(double(body[3 + 4 * i]));
          EXPECT_LE(std::abs(double(ob[i]) - body[i]), 0.45 * rb + 1e-5);
        }
      }
      // The box holds the outer shape {x : |A (x - c)| <= 1 + sum of the modulation
      // amplitudes}: its half extent along axis i is (1 + sum a) |row i of A^-1|.
      double amp = 0.0;
      for (int t = 0; t < 3; ++t) amp += ob[12 + 5 * t + 4];
      for (int i = 0; i < 3; ++i) {
        double row2 = 0.0;
        for (int j = 0; j < 3; ++j) {
          // (A^-1)_ij = cofactor_ji / det
          const int r0 = (j + 1) % 3, r1 = (j + 2) % 3, c0 = (i + 1) % 3, c1 = (i + 2) % 3;
          const double cof = double(a[3 * r0 + c0]) * a[3 * r1 + c1] -
                             double(a[3 * r0 + c1]) * a[3 * r1 + c0];
          row2 += (cof / det) * (cof / det);
        }
        const double ext = (1.0 + amp) * std::sqrt(row2);
        EXPECT_LT(ob[29 + i], ob[i] - ext) << "object " << o;
        EXPECT_GT(ob[32 + i], ob[i] + ext) << "object " << o;
        EXPECT_LT(ob[32 + i] - ob[29 + i], 2.0 * ext * 1.03 + 3e-3) << "object " << o;
      }
      EXPECT_LT(ob[27], 1.0f);
      EXPECT_GT(ob[28], 1.0f);
    }
    // Organ means: distinct, in [-110, 260], none in the soft-tissue band (0, 80) beyond jitter.
    for (int64_t c = 1; c < K; ++c) {
      const float m = body[kPhantomObject * c + 35];
      EXPECT_GE(m, -110.0f);
      EXPECT_LE(m, 260.0f);
      EXPECT_FALSE(m > 10.0f && m < 70.0f) << m;
      for (int64_t c2 = 1; c2 < c; ++c2) EXPECT_NE(m, body[kPhantomObject * c2 + 35]);
    }
    EXPECT_NEAR(body[35], 40.0f, 5.0f);
  }
}

TEST(Phantom, Sin2PiAccuracy) {
  double worst = 0.0;
  for (int i = -20000; i <= 20000; ++i) {
    const float t = static_cast<float>(i) * 0.000731f;
    worst = std::max(worst, std::abs(double(detail::sin2pi(t)) - std::sin(2.0 * M_PI * double(t))));
  }
  EXPECT_LT(worst, 2e-6);
}

TEST(Phantom, BadArgumentsNameTheArgument) {
  const Vol v{1, 1, 8, 8, 8};
  std::vector<float> table(static_cast<size_t>(phantom_param_count(16))), img(512);
  std::vector<uint8_t> lab(512);
  const VolumeView iv = voxaug_test::view(img.data(), DType::Float32, v);
  const VolumeView lv = voxaug_test::view(lab.data(), DType::UInt8, v);
  auto expect_error = [](auto&& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error([&] { phantom(table.data(), iv, lv, opts(1, 0)); }, "num_classes");
  expect_error([&] { phantom(table.data(), iv, lv, opts(17, 0)); }, "num_classes");
  expect_error([&] { phantom_params(table.data(), 2, opts(5, 0, 0xFFFFFFFFu), Device::CPU); },
               "first_sample");
  phantom_params(table.data(), 1, opts(5, 0, 0xFFFFFFFFu), Device::CPU);  // the last subject
  expect_error([&] { phantom(table.data(), iv, iv, opts(5, 0)); }, "label must be uint8");
  expect_error([&] { phantom(table.data(), lv, lv, opts(5, 0)); }, "image must be float32");
  const Vol small{1, 1, 8, 7, 8};
  expect_error(
      [&] {
        phantom(table.data(), voxaug_test::view(img.data(), DType::Float32, small),
                voxaug_test::view(lab.data(), DType::UInt8, small), opts(5, 0));
      },
      "size must be >= 8");
  const Vol other{1, 1, 8, 8, 9};
  expect_error(
      [&] { phantom(table.data(), iv, voxaug_test::view(lab.data(), DType::UInt8, other), opts(5, 0)); },
      "label must have the image's shape");
  const Vol empty{0, 1, 8, 8, 8};
  expect_error(
      [&] {
        phantom(table.data(), voxaug_test::view(img.data(), DType::Float32, empty),
                voxaug_test::view(lab.data(), DType::UInt8, empty), opts(5, 0));
      },
      "batch");
  expect_error([&] { phantom_params(nullptr, 1, opts(5, 0), Device::CPU); }, "table");
}
