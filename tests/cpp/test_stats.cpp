// voxaug stats family, CPU path: moments and percentiles vs naive float64 references
// (two-pass mean / variance, full sort), NormalizeIntensity and ScaleIntensityRangePercentiles
// vs a per-voxel float64 evaluation of MONAI's formulas, over odd sizes, size-1 axes, strided
// views, all-zero and constant segments, channel-wise segments and several dtypes.
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "voxaug/detail/convert.h"
#include "voxaug/detail/stats.h"
#include "voxaug/error.h"
#include "voxaug/stats.h"

using namespace voxaug;
using namespace voxaug_test;

namespace {

// A batch with per-element values and a view (possibly strided: channel stride padded).
struct Batch {
  Vol v;
  int64_t pad_c = 0;           // extra channels in storage: a strided view
  std::vector<double> values;  // logical (n, c, d, h, w), C-order
  int64_t storage_numel() const { return v.n * (v.c + pad_c) * v.d * v.h * v.w; }
  int64_t storage_offset(int64_t i) const {  // logical linear index -> storage index
    const int64_t sp = v.d * v.h * v.w;
    const int64_t n = i / (v.c * sp), c = (i / sp) % v.c, e = i % sp;
    return (n * (v.c + pad_c) + c) * sp + e;
  }
  template <class T>
  std::vector<T> storage() const {
    std::vector<T> s(storage_numel(), T(0));
    for (int64_t i = 0; i < v.numel(); ++i) s[storage_offset(i)] = static_cast<T>(values[i]);
    return s;
  }
  VolumeView view(void* p, DType t, Device dev = Device::CPU) const {
    VolumeView x = contiguous_view(p, t, dev, v.n, v.c + pad_c, v.d, v.h, v.w);
    x.shape[1] = v.c;
    return x;
  }
  // Values of segment `seg` (whole samples or channels).
  std::vector<double> segment(int64_t seg, bool channel_wise) const {
    const int64_t len = channel_wise ? v.d * v.h * v.w : v.c * v.d * v.h * v.w;
    return std::vector<double>(values.begin() + seg * len, values.begin() + (seg + 1) * len);
  }
  int64_t segments(bool channel_wise) const { return v.n * (channel_wise ? v.c : 1); }
};

Batch make_batch(Vol v, int64_t pad_c, uint32_t seed, double zero_frac, double lo, double hi,
                 bool integers) {
  Batch b{v, pad_c, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi), z(0.0, 1.0);
  b.values.resize(v.numel());
  for (auto& x : b.values) {
    x = z(rng) < zero_frac ? 0.0 : u(rng);
    if (integers) x = std::round(x);
  }
  return b;
}

// Two-pass float64 reference in long double.
void ref_moments(const std::vector<double>& s, bool nonzero, double* out) {
  long double n = 0, sum = 0;
  for (double x : s)
    if (!nonzero || x != 0.0) {
      n += 1;
      sum += x;
    }
  if (n == 0) {
    out[0] = out[1] = out[2] = 0.0;
    return;
  }
  const long double mean = sum / n;
  long double ss = 0;
  for (double x : s)
    if (!nonzero || x != 0.0) ss += (x - mean) * (x - mean);
  out[0] = static_cast<double>(n);
  out[1] = static_cast<double>(mean);
  out[2] = static_cast<double>(std::sqrt(ss / n));
}

double ref_percentile(std::vector<double> s, double q) {
  std::sort(s.begin(), s.end());
  const double pos = q / 100.0 * static_cast<double>(s.size() - 1);
  const int64_t lo = static_cast<int64_t>(std::floor(pos));
  const int64_t hi = std::min<int64_t>(lo + 1, static_cast<int64_t>(s.size()) - 1);
  const double w = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * w;
}

const std::vector<Vol> kShapes = {
    {1, 1, 9, 10, 11}, {2, 3, 7, 5, 13}, {3, 2, 1, 1, 1}, {1, 2, 33, 1, 70}, {2, 1, 40, 50, 21}};

template <class T>
void check_moments(DType t, bool integers) {
  for (const Vol& v : kShapes)
    for (int64_t pad : {0, 1})
      for (bool cw : {false, true})
        for (bool nz : {false, true}) {
          const Batch b = make_batch(v, pad, 7 + uint32_t(v.numel()), 0.3, integers ? 0 : -40.0,
                                     integers ? 200.0 : 160.0, integers);
          std::vector<T> s = b.storage<T>();
          std::vector<double> out(3 * b.segments(cw), -1.0);
          moments(b.view(s.data(), t), out.data(), cw, nz, nullptr, 0);
          for (int64_t seg = 0; seg < b.segments(cw); ++seg) {
            double ref[3];
            std::vector<double> sv = b.segment(seg, cw);
            for (auto& e : sv) e = static_cast<double>(static_cast<T>(e));  // the stored values
            ref_moments(sv, nz, ref);
            const std::string where = "shape " + std::to_string(v.n) + "x" + std::to_string(v.c) +
                                      "x" + std::to_string(v.d) + "x" + std::to_string(v.h) + "x" +
                                      std::to_string(v.w) + " pad " + std::to_string(pad) + " cw " +
                                      std::to_string(cw) + " nz " + std::to_string(nz) + " seg " +
                                      std::to_string(seg);
            EXPECT_EQ(out[3 * seg], ref[0]) << where;
            EXPECT_NEAR(out[3 * seg + 1], ref[1], 1e-12 * (1 + std::fabs(ref[1]))) << where;
            EXPECT_NEAR(out[3 * seg + 2], ref[2], 1e-11 * (1 + std::fabs(ref[2]))) << where;
          }
        }
}

}  // namespace

TEST(Stats, MomentsFloat32VsFloat64Reference) {
  check_moments<float>(DType::Float32, false);
}
TEST(Stats, MomentsFloat64VsFloat64Reference) {
  check_moments<double>(DType::Float64, false);
}
TEST(Stats, MomentsIntegerInputs) {
  check_moments<uint8_t>(DType::UInt8, true);
  check_moments<int16_t>(DType::Int16, true);
}

TEST(Stats, MomentsAllZeroAndConstantSegments) {
  const Vol v{3, 2, 5, 6, 7};
  std::vector<float> x(v.numel(), 0.0f);
  const int64_t sp = v.d * v.h * v.w;
  for (int64_t i = 0; i < 2 * sp; ++i) x[2 * v.c * sp + i] = 1e4f + 0.25f;  // sample 2: constant
  for (int64_t i = 0; i < sp; ++i) x[v.c * sp + sp + i] = -3.0f;            // sample 1, channel 1
  std::vector<double> out(3 * 6);
  moments(view(x.data(), DType::Float32, v), out.data(), true, true, nullptr, 0);
  const double expect[6][3] = {{0, 0, 0},
                               {0, 0, 0},
                               {0, 0, 0},
                               {double(sp), -3.0, 0.0},
                               {double(sp), 10000.25, 0},
                               {double(sp), 10000.25, 0}};
  for (int s = 0; s < 6; ++s)
    for (int k = 0; k < 3; ++k) EXPECT_EQ(out[3 * s + k], expect[s][k]) << s << " " << k;
  moments(view(x.data(), DType::Float32, v), out.data(), false, false, nullptr, 0);
  EXPECT_EQ(out[0], double(2 * sp));
  EXPECT_EQ(out[1], 0.0);
  EXPECT_EQ(out[2], 0.0);
  EXPECT_EQ(out[7], 10000.25);
  EXPECT_EQ(out[8], 0.0);  // std of a constant sample is exactly 0
}

TEST(Stats, MomentsHalfInput) {
  const Batch b = make_batch({2, 3, 9, 8, 7}, 0, 3, 0.2, -10.0, 10.0, false);
  std::vector<detail::half_t> s(b.storage_numel());
  std::vector<double> rounded(b.values.size());
  for (int64_t i = 0; i < b.v.numel(); ++i) {
    s[i] = detail::half_t{detail::float_to_half(static_cast<float>(b.values[i]))};
    rounded[i] = detail::half_to_float(s[i].bits);
  }
  std::vector<double> out(3 * 6);
  moments(b.view(s.data(), DType::Float16), out.data(), true, false, nullptr, 0);
  const int64_t sp = 9 * 8 * 7;
  for (int64_t seg = 0; seg < 6; ++seg) {
    double ref[3];
    ref_moments(std::vector<double>(rounded.begin() + seg * sp, rounded.begin() + (seg + 1) * sp),
                false, ref);
    EXPECT_NEAR(out[3 * seg + 1], ref[1], 1e-12);
    EXPECT_NEAR(out[3 * seg + 2], ref[2], 1e-12);
  }
}

namespace {

// The documented reduction order of detail/stats.h, written out in scalar float64 with the
// header's own steps: chunks of kMomentChunk; lane t of a chunk adds elements t, t + kMomentLanes,
// ... shifted by the chunk's first value; lanes summed by the halving tree; chunks merged by the
// pairwise tree. moments() must give exactly these bits (the CUDA path runs the same order, so
// this pins the CPU path's vectorised and register-blocked loops to the bits CUDA gives).
void fixed_order_moments(const std::vector<double>& x, bool nonzero, double* out) {
  using namespace voxaug::detail;
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<Moments> part;
  for (int64_t begin = 0; begin < n; begin += kMomentChunk) {
    const int64_t cnt = std::min<int64_t>(kMomentChunk, n - begin);
    const double shift = x[begin];
    std::vector<LaneSums> lane(kMomentLanes, LaneSums{0, 0.0, 0.0});
    for (int64_t i = 0; i < cnt; ++i)
      lane_add(lane[i % kMomentLanes], x[begin + i], shift, nonzero);
    for (int s = kMomentLanes / 2; s > 0; s >>= 1)
      for (int t = 0; t < s; ++t) lane_merge(lane[t], lane[t + s]);
    part.push_back(chunk_moments(lane[0], shift));
  }
  const int64_t chunks = static_cast<int64_t>(part.size());
  for (int64_t s = 1; s < chunks; s *= 2)
    for (int64_t i = 0; i + s < chunks; i += 2 * s) part[i] = merge_moments(part[i], part[i + s]);
  finish_moments(part[0], out);
}

template <class T, class Conv>
void check_moments_bitwise(DType t, Conv conv, bool integers) {
  // 5 x 58 x 89 = 25810 voxels per channel: three full chunks and a partial one per channel,
  // six and a partial per two-channel sample; the padded view takes the strided path.
  const Vol v{2, 2, 5, 58, 89};
  for (int64_t pad : {0, 1}) {
    const Batch b = make_batch(v, pad, 11 + uint32_t(pad), 0.3, integers ? 0.0 : -300.0,
                               integers ? 255.0 : 900.0, integers);
    std::vector<T> s(b.storage_numel(), conv(0.0));
    for (int64_t i = 0; i < v.numel(); ++i) s[b.storage_offset(i)] = conv(b.values[i]);
    for (bool cw : {false, true})
      for (bool nz : {false, true}) {
        std::vector<double> out(3 * b.segments(cw), -1.0);
        moments(b.view(s.data(), t), out.data(), cw, nz, nullptr, 0);
        const int64_t len = (cw ? 1 : v.c) * v.d * v.h * v.w;
        for (int64_t seg = 0; seg < b.segments(cw); ++seg) {
          std::vector<double> x(len);
          for (int64_t i = 0; i < len; ++i)
            x[i] = detail::value_f64(s[b.storage_offset(seg * len + i)]);
          double ref[3];
          fixed_order_moments(x, nz, ref);
          for (int k = 0; k < 3; ++k)
            EXPECT_EQ(std::memcmp(&out[3 * seg + k], &ref[k], sizeof(double)), 0)
                << "pad " << pad << " cw " << cw << " nz " << nz << " seg " << seg << " k " << k
                << ": " << out[3 * seg + k] << " vs " << ref[k];
        }
      }
  }
}

}  // namespace

TEST(Stats, MomentsFollowTheDocumentedOrderBitwise) {
  check_moments_bitwise<float>(
      DType::Float32, [](double x) { return static_cast<float>(x); }, false);
  check_moments_bitwise<double>(
      DType::Float64, [](double x) { return x; }, false);
  check_moments_bitwise<uint8_t>(
      DType::UInt8, [](double x) { return static_cast<uint8_t>(x); }, true);
  check_moments_bitwise<detail::half_t>(
      DType::Float16,
      [](double x) { return detail::half_t{detail::float_to_half(static_cast<float>(x))}; }, false);
}

TEST(Stats, PercentilesVsSortReference) {
  const std::vector<double> q = {0.0, 0.5, 1.0, 10.0, 33.3, 50.0, 90.0, 99.5, 100.0};
  for (const Vol& v : kShapes)
    for (int64_t pad : {0, 1})
      for (bool cw : {false, true}) {
        const Batch b = make_batch(v, pad, 11 + uint32_t(v.numel()), 0.1, -40.0, 160.0, false);
        std::vector<double> sd = b.storage<double>();
        std::vector<float> sf = b.storage<float>();
        std::vector<double> out_d(q.size() * b.segments(cw)), out_f(out_d.size());
        percentiles(b.view(sd.data(), DType::Float64), q.data(), int64_t(q.size()), out_d.data(),
                    cw, nullptr, 0);
        percentiles(b.view(sf.data(), DType::Float32), q.data(), int64_t(q.size()), out_f.data(),
                    cw, nullptr, 0);
        for (int64_t seg = 0; seg < b.segments(cw); ++seg) {
          std::vector<double> sv = b.segment(seg, cw), svf(sv.size());
          for (size_t i = 0; i < sv.size(); ++i) svf[i] = static_cast<float>(sv[i]);
          for (size_t k = 0; k < q.size(); ++k) {
            EXPECT_NEAR(out_d[seg * q.size() + k], ref_percentile(sv, q[k]), 1e-12)
                << "seg " << seg << " q " << q[k];
            EXPECT_NEAR(out_f[seg * q.size() + k], ref_percentile(svf, q[k]), 1e-12)
                << "seg " << seg << " q " << q[k];
          }
        }
      }
}

TEST(Stats, PercentilesNaNAndIntegers) {
  const Vol v{2, 1, 3, 4, 5};
  std::vector<float> x(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) x[i] = static_cast<float>((i * 37) % 23);
  x[v.numel() - 3] = NAN;
  const double q[2] = {0.0, 50.0};
  double out[4];
  percentiles(view(x.data(), DType::Float32, v), q, 2, out, false, nullptr, 0);
  EXPECT_FALSE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[3]));
  std::vector<int16_t> xi(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) xi[i] = static_cast<int16_t>(-500 + (i * 97) % 1000);
  percentiles(view(xi.data(), DType::Int16, v), q, 2, out, false, nullptr, 0);
  std::vector<double> s0(xi.begin(), xi.begin() + 60);
  EXPECT_EQ(out[0], ref_percentile(s0, 0.0));
  EXPECT_EQ(out[1], ref_percentile(s0, 50.0));
}

TEST(Stats, NormalizeIntensityVsReference) {
  for (const Vol& v : kShapes)
    for (bool cw : {false, true})
      for (bool nz : {false, true})
        for (int given : {0, 1, 2}) {  // 0: mean/std, 1: subtrahend only, 2: both (one is 0)
          const Batch b = make_batch(v, 1, 5 + uint32_t(v.numel()), 0.3, -40.0, 160.0, false);
          std::vector<float> s = b.storage<float>();
          const int64_t segs = b.segments(cw);
          std::vector<double> mom(3 * segs), sub(segs), div(segs);
          moments(b.view(s.data(), DType::Float32), mom.data(), cw, nz, nullptr, 0);
          for (int64_t k = 0; k < segs; ++k) {
            sub[k] = 1.5 + double(k);
            div[k] = k % 2 ? 0.0 : 2.0 + double(k);
          }
          NormalizeIntensityArgs a;
          a.moments = given == 2 ? nullptr : mom.data();
          a.subtrahend = given >= 1 ? sub.data() : nullptr;
          a.divisor = given == 2 ? div.data() : nullptr;
          a.nonzero = nz;
          a.channel_wise = cw;
          std::vector<float> out(b.storage_numel(), -7.0f);
          normalize_intensity(b.view(s.data(), DType::Float32), b.view(out.data(), DType::Float32),
                              a);
          const int64_t len = cw ? v.d * v.h * v.w : v.c * v.d * v.h * v.w;
          for (int64_t i = 0; i < v.numel(); ++i) {
            const int64_t seg = i / len;
            const double x = static_cast<float>(b.values[i]);
            double sb = a.subtrahend ? sub[seg] : mom[3 * seg + 1];
            double dv = a.divisor ? div[seg] : mom[3 * seg + 2];
            if (static_cast<float>(dv) == 0.0f) dv = 1.0;
            const double ref = (nz && x == 0.0) ? 0.0 : (x - sb) / dv;
            ASSERT_NEAR(out[b.storage_offset(i)], ref, 2e-6 * (1 + std::fabs(ref)))
                << "cw " << cw << " nz " << nz << " given " << given << " i " << i;
          }
          for (int64_t i = 0; i < b.storage_numel(); ++i) ASSERT_FALSE(std::isnan(out[i]));
        }
}

// Large batches through the host's vectorised (instruction-set clone) path: an output view
// starting one element into its buffer (unaligned), segments of odd length, float32 and float16
// outputs. Values vs float64 (independent), and bit for bit vs the per-voxel function of
// detail/stats.h that the CUDA kernel runs.
TEST(Stats, NormalizeIntensityLargeOutputsMatchTheDeviceFunction) {
  const Vol v{2, 2, 23, 97, 121};  // 269,951 voxels a channel
  const Batch b = make_batch(v, 0, 21, 0.25, -300.0, 900.0, false);
  std::vector<float> s = b.storage<float>();
  for (bool cw : {false, true})
    for (bool nz : {false, true}) {
      const int64_t segs = b.segments(cw);
      std::vector<double> mom(3 * segs);
      moments(b.view(s.data(), DType::Float32), mom.data(), cw, nz, nullptr, 0);
      NormalizeIntensityArgs a;
      a.moments = mom.data();
      a.nonzero = nz;
      a.channel_wise = cw;
      detail::StatApply p;
      p.stats = mom.data();
      p.nonzero = nz;
      const int64_t len = cw ? v.d * v.h * v.w : v.c * v.d * v.h * v.w;
      std::vector<float> out32(v.numel() + 1, -7.0f);
      normalize_intensity(b.view(s.data(), DType::Float32),
                          b.view(out32.data() + 1, DType::Float32), a);
      std::vector<detail::half_t> out16(v.numel() + 1);
      normalize_intensity(b.view(s.data(), DType::Float32),
                          b.view(out16.data() + 1, DType::Float16), a);
      EXPECT_EQ(out32[0], -7.0f);
      for (int64_t i = 0; i < v.numel(); ++i) {
        const int64_t seg = i / len;
        const double x = s[i];
        const double ref = (nz && x == 0.0) ? 0.0 : (x - mom[3 * seg + 1]) / mom[3 * seg + 2];
        ASSERT_NEAR(out32[i + 1], ref, 2e-6 * (1 + std::fabs(ref)))
            << "cw " << cw << " nz " << nz << " i " << i;
        const float dev = detail::stat_apply_value(detail::stat_coef<float>(p, seg), s[i]);
        ASSERT_EQ(std::memcmp(&out32[i + 1], &dev, sizeof(float)), 0) << "i " << i;
        ASSERT_EQ(out16[i + 1].bits, detail::float_to_half(dev)) << "i " << i;
      }
    }
}

TEST(Stats, ScaleIntensityRangePercentilesVsReference) {
  struct Case {
    double lower, upper;
    bool has_bmin, has_bmax;
    double bmin, bmax;
    bool clip, relative;
  };
  const Case cases[] = {
      {10, 90, true, true, 0, 1, false, false}, {10, 90, true, true, 0, 1, true, false},
      {5, 95, true, true, -1, 2, true, true},   {1, 99, false, false, 0, 0, false, false},
      {2, 98, true, false, 0, 0, true, false},  {50, 50, true, true, 0, 1, true, false}};
  for (const Vol& v : kShapes)
    for (bool cw : {false, true})
      for (const Case& k : cases) {
        const Batch b = make_batch(v, 0, 9 + uint32_t(v.numel()), 0.0, -40.0, 160.0, false);
        std::vector<float> s = b.storage<float>();
        const int64_t segs = b.segments(cw);
        std::vector<double> pct(2 * segs);
        const double q[2] = {k.lower, k.upper};
        percentiles(b.view(s.data(), DType::Float32), q, 2, pct.data(), cw, nullptr, 0);
        ScaleIntensityRangePercentilesArgs a;
        a.percentiles = pct.data();
        a.lower = k.lower;
        a.upper = k.upper;
        a.b_min = k.has_bmin ? &k.bmin : nullptr;
        a.b_max = k.has_bmax ? &k.bmax : nullptr;
        a.clip = k.clip;
        a.relative = k.relative;
        a.channel_wise = cw;
        std::vector<float> out(b.storage_numel());
        scale_intensity_range_percentiles(b.view(s.data(), DType::Float32),
                                          b.view(out.data(), DType::Float32), a);
        double bmin = k.bmin, bmax = k.bmax;
        if (k.relative) {
          bmin = (k.bmax - k.bmin) * (k.lower / 100.0) + k.bmin;
          bmax = (k.bmax - k.bmin) * (k.upper / 100.0) + k.bmin;
        }
        const int64_t len = cw ? v.d * v.h * v.w : v.c * v.d * v.h * v.w;
        std::vector<double> amins(segs), amaxs(segs);
        for (int64_t seg = 0; seg < segs; ++seg) {
          std::vector<double> sv = b.segment(seg, cw);
          for (auto& e : sv) e = static_cast<float>(e);
          amins[seg] = static_cast<float>(ref_percentile(sv, k.lower));
          amaxs[seg] = static_cast<float>(ref_percentile(sv, k.upper));
        }
        for (int64_t i = 0; i < v.numel(); ++i) {
          const int64_t seg = i / len;
          const double amin = amins[seg], amax = amaxs[seg];
          const double x = static_cast<float>(b.values[i]);
          double ref;
          if (amax - amin == 0.0) {
            ref = x - amin + (k.has_bmin ? bmin : 0.0);
          } else {
            ref = (x - amin) / (amax - amin);
            if (k.has_bmin && k.has_bmax) ref = ref * (bmax - bmin) + bmin;
            if (k.clip && k.has_bmin) ref = std::max(ref, bmin);
            if (k.clip && k.has_bmax) ref = std::min(ref, bmax);
          }
          ASSERT_NEAR(out[i], ref, 1e-5 * (1 + std::fabs(ref)))
              << "cw " << cw << " case " << k.lower << "/" << k.upper << " i " << i;
        }
      }
}

TEST(Stats, InPlaceNormalize) {
  const Batch b = make_batch({2, 2, 4, 5, 6}, 0, 1, 0.0, 0.0, 10.0, false);
  std::vector<float> s = b.storage<float>(), copy = s, out(s.size());
  std::vector<double> mom(3 * 2);
  moments(b.view(s.data(), DType::Float32), mom.data(), false, false, nullptr, 0);
  NormalizeIntensityArgs a;
  a.moments = mom.data();
  normalize_intensity(b.view(copy.data(), DType::Float32), b.view(out.data(), DType::Float32), a);
  normalize_intensity(b.view(s.data(), DType::Float32), b.view(s.data(), DType::Float32), a);
  EXPECT_EQ(s, out);
}

TEST(Stats, RejectsBadArguments) {
  std::vector<float> x(2 * 3 * 4 * 5, 1.0f);
  const Vol v{1, 2, 3, 4, 5};
  double out[8];
  const double bad_q[2] = {50.0, 100.5};
  EXPECT_THROW(percentiles(view(x.data(), DType::Float32, v), bad_q, 2, out, false, nullptr, 0),
               Error);
  std::vector<int64_t> xl(120);
  EXPECT_THROW(moments(view(xl.data(), DType::Int64, v), out, false, false, nullptr, 0), Error);
  EXPECT_THROW(
      moments(view(x.data(), DType::Float32, {1, 1, 0, 4, 5}), out, false, false, nullptr, 0),
      Error);
  std::vector<float> o(120);
  NormalizeIntensityArgs a;  // no moments and no subtrahend / divisor
  EXPECT_THROW(
      normalize_intensity(view(x.data(), DType::Float32, v), view(o.data(), DType::Float32, v), a),
      Error);
  ScaleIntensityRangePercentilesArgs r;
  r.percentiles = out;
  r.relative = true;  // without b_min / b_max
  EXPECT_THROW(scale_intensity_range_percentiles(view(x.data(), DType::Float32, v),
                                                 view(o.data(), DType::Float32, v), r),
               Error);
  std::vector<uint8_t> ou(120);
  a.moments = out;
  EXPECT_THROW(
      normalize_intensity(view(x.data(), DType::Float32, v), view(ou.data(), DType::UInt8, v), a),
      Error);
}

// Segments of >= 2^16 values take the radix-select path (two histogram passes); ties, signed
// zeros, NaN, constant segments and half / uint8 storage.
TEST(Stats, PercentilesLargeSegmentsRadixSelect) {
  const std::vector<double> q = {0.0, 0.01, 0.5, 10.0, 50.0, 66.6, 99.5, 99.99, 100.0};
  for (bool cw : {false, true})
    for (int64_t pad : {0, 1}) {
      const Vol v{2, 2, 40, 50, 37};
      Batch b = make_batch(v, pad, 17, 0.05, -300.0, 300.0, false);
      for (size_t i = 0; i < b.values.size(); ++i) {
        b.values[i] = std::round(b.values[i] * 2.0) / 2.0;  // many ties
        if (i % 97 == 0) b.values[i] = -0.0;
      }
      std::vector<float> sf = b.storage<float>();
      std::vector<double> out(q.size() * b.segments(cw));
      percentiles(b.view(sf.data(), DType::Float32), q.data(), int64_t(q.size()), out.data(), cw,
                  nullptr, 0);
      for (int64_t seg = 0; seg < b.segments(cw); ++seg) {
        const std::vector<double> sv = b.segment(seg, cw);
        for (size_t k = 0; k < q.size(); ++k)
          EXPECT_NEAR(out[seg * q.size() + k], ref_percentile(sv, q[k]), 1e-12)
              << "cw " << cw << " pad " << pad << " seg " << seg << " q " << q[k];
      }
      // One q per call: the radix select (nine q need more bins than it takes: selection).
      for (size_t k = 0; k < q.size(); ++k) {
        std::vector<double> one(b.segments(cw));
        percentiles(b.view(sf.data(), DType::Float32), &q[k], 1, one.data(), cw, nullptr, 0);
        for (int64_t seg = 0; seg < b.segments(cw); ++seg)
          EXPECT_EQ(one[seg], out[seg * q.size() + k]) << "radix vs selection, q " << q[k];
      }
      sf[5] = NAN;  // sample 0 (channel 0)
      percentiles(b.view(sf.data(), DType::Float32), q.data(), int64_t(q.size()), out.data(), cw,
                  nullptr, 0);
      EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[q.size() - 1]));
      EXPECT_FALSE(std::isnan(out[out.size() - 1]));
    }
  const Vol v{1, 1, 50, 50, 40};
  std::vector<uint8_t> c(v.numel(), 7);
  c[123] = 200;
  const double qq[3] = {0.0, 50.0, 100.0};
  double o[3];
  percentiles(view(c.data(), DType::UInt8, v), qq, 3, o, false, nullptr, 0);
  EXPECT_EQ(o[0], 7.0);
  EXPECT_EQ(o[1], 7.0);
  EXPECT_EQ(o[2], 200.0);
  std::vector<detail::half_t> h(v.numel());
  std::vector<double> hv(v.numel());
  for (int64_t i = 0; i < v.numel(); ++i) {
    h[i] = detail::half_t{detail::float_to_half(static_cast<float>((i * 7919) % 10007) * 0.01f)};
    hv[i] = detail::half_to_float(h[i].bits);
  }
  const double qh[4] = {1.0, 25.0, 75.0, 99.0};
  double oh[4];
  percentiles(view(h.data(), DType::Float16, v), qh, 4, oh, false, nullptr, 0);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(oh[k], ref_percentile(hv, qh[k]), 1e-12) << qh[k];
}

// ---- piecewise_linear (TorchIO HistogramStandardization's map) ----

namespace {
// numpy's arithmetic written out: digitize by a binary search over the edges (upper_bound: the
// first edge > x), then slope * x + intercept in float64, rounded to float32.
float naive_piecewise(const std::vector<double>& row, int pieces, float x) {
  const double v = x;
  const auto first = row.begin(), last = row.begin() + (pieces - 1);
  const int k = v != v ? 0 : static_cast<int>(std::upper_bound(first, last, v) - first);
  const double y = row[pieces - 1 + k] * v;
  return static_cast<float>(y + row[2 * pieces - 1 + k]);
}
}  // namespace

TEST(Stats, PiecewiseLinearVsNaiveEveryPieceCount) {
  std::mt19937 rng(21);
  std::uniform_real_distribution<double> u(-50.0, 150.0);
  const Vol v{3, 2, 5, 6, 7};  // 420 per sample: not a multiple of the 8-lane vectors
  for (int pieces = 1; pieces <= kMaxPiecewisePieces; ++pieces) {
    const int row_len = 3 * pieces - 1;
    std::vector<double> table(v.n * row_len);
    for (int64_t n = 0; n < v.n; ++n) {
      std::vector<double> e(pieces - 1);
      for (auto& x : e) x = std::round(u(rng) * 4.0) / 4.0;  // quarter steps: exact ties with x
      std::sort(e.begin(), e.end());
      if (pieces > 3) e[2] = e[1];  // equal edges (TorchIO's flat pieces)
      for (int i = 0; i < pieces - 1; ++i) table[n * row_len + i] = e[i];
      for (int i = 0; i < 2 * pieces; ++i) table[n * row_len + pieces - 1 + i] = u(rng) / 7.0;
    }
    std::vector<float> x(v.numel());
    for (auto& e : x) e = static_cast<float>(std::round(u(rng) * 4.0) / 4.0);
    x[3] = NAN;
    x[5] = INFINITY;
    x[8] = -INFINITY;
    std::vector<float> got(x.size(), -99.0f);
    piecewise_linear(view(x.data(), DType::Float32, v), view(got.data(), DType::Float32, v),
                     table.data(), pieces);
    const int64_t per = v.c * v.d * v.h * v.w;
    int mismatches = 0;
    for (int64_t i = 0; i < v.numel(); ++i) {
      const int64_t n = i / per;
      const std::vector<double> row(table.begin() + n * row_len, table.begin() + (n + 1) * row_len);
      const float want = naive_piecewise(row, pieces, x[i]);
      const float body = detail::piecewise_value(row.data(), pieces, x[i]);
      const bool same = std::memcmp(&want, &got[i], 4) == 0 && std::memcmp(&want, &body, 4) == 0;
      mismatches += same ? 0 : 1;
      if (!same && mismatches < 4)
        ADD_FAILURE() << "pieces " << pieces << " i " << i << " x " << x[i] << ": " << got[i]
                      << " / body " << body << " vs " << want;
    }
    EXPECT_EQ(mismatches, 0) << "pieces " << pieces;
    // In place, and a strided (every other channel) view: the per-item path.
    std::vector<float> inplace = x;
    piecewise_linear(view(inplace.data(), DType::Float32, v),
                     view(inplace.data(), DType::Float32, v), table.data(), pieces);
    EXPECT_EQ(std::memcmp(inplace.data(), got.data(), 4 * got.size()), 0);
    const Vol half{v.n, 1, v.d, v.h, v.w};
    VolumeView sv = view(x.data(), DType::Float32, half);
    sv.strides[0] = per;  // sample stride of the full batch: channel 0 of each sample
    std::vector<float> sgot(half.numel());
    piecewise_linear(sv, view(sgot.data(), DType::Float32, half), table.data(), pieces);
    for (int64_t n = 0; n < v.n; ++n)
      EXPECT_EQ(std::memcmp(sgot.data() + n * (per / 2), got.data() + n * per, 4 * (per / 2)), 0)
          << "strided, pieces " << pieces << " sample " << n;
  }
  std::vector<float> a(10), b(10);
  const double row[2] = {1.0, 0.0};
  EXPECT_THROW(piecewise_linear(view(a.data(), DType::Float32, Vol{1, 1, 1, 1, 10}),
                                view(b.data(), DType::Float32, Vol{1, 1, 1, 1, 10}), row, 0),
               Error);
  EXPECT_THROW(piecewise_linear(view(a.data(), DType::Float32, Vol{1, 1, 1, 1, 10}),
                                view(b.data(), DType::Float32, Vol{1, 1, 1, 1, 10}), nullptr, 1),
               Error);
  std::vector<double> d(10);
  EXPECT_THROW(piecewise_linear(view(d.data(), DType::Float64, Vol{1, 1, 1, 1, 10}),
                                view(b.data(), DType::Float32, Vol{1, 1, 1, 1, 10}), row, 1),
               Error);
}
