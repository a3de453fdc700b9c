// Coarse dropout (include/voxaug/dropout.h) against a naive float64 reference that tests
// every voxel against every box, plus the CUDA twin (skips without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "../../kernels/dropout/dropout_kernels.h"
// launch_cpu.h after the kernels header, which declares cudaStream_t for it
#include "../../kernels/common/launch_cpu.h"
#include "test_support.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/philox.h"
#include "voxaug/dropout.h"
#include "voxaug/error.h"

using namespace voxaug;
using voxaug_test::Vol;

namespace {

struct Case {
  Vol v;
  std::vector<int64_t> boxes;  // N * K * 6
  std::vector<int64_t> counts;
  int64_t k;
};

Case make_case(Vol v, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  Case c{v, {}, {}, k};
  for (int64_t n = 0; n < v.n; ++n) {
    c.counts.push_back(n == 1 ? 0 : 1 + static_cast<int64_t>(rng() % k));  // sample 1: untouched
    const int64_t sz[3] = {v.d, v.h, v.w};
    for (int64_t j = 0; j < k; ++j)
      for (int a = 0; a < 3; ++a) {
        const int64_t len = 1 + static_cast<int64_t>(rng() % sz[a]);
        const int64_t lo = static_cast<int64_t>(rng() % (sz[a] - len + 1));
        c.boxes.push_back(lo);
        (void)0;
        c.boxes.push_back(lo + len);  // re-ordered below
      }
  }
  // (lo0, hi0, lo1, hi1, lo2, hi2) -> (d0, h0, w0, d1, h1, w1)
  for (size_t r = 0; r < c.boxes.size(); r += 6) {
    const int64_t b[6] = {c.boxes[r],     c.boxes[r + 2], c.boxes[r + 4],
                          c.boxes[r + 1], c.boxes[r + 3], c.boxes[r + 5]};
    for (int i = 0; i < 6; ++i) c.boxes[r + i] = b[i];
  }
  return c;
}

std::vector<float> random_volume(const Vol& v, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 5.0f);
  std::vector<float> x(v.numel());
  for (auto& e : x) e = u(rng);
  return x;
}

// Naive float64 reference (fill per voxel recomputed from the keyed Philox stream).
std::vector<double> reference(const Case& c, const std::vector<double>& x, bool dropout_holes,
                              DropoutFill fill, double value, double lo, double hi, uint64_t seed,
                              const std::vector<double>& mm) {
  const Vol& v = c.v;
  std::vector<double> out(x);
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t ch = 0; ch < v.c; ++ch)
      for (int64_t d = 0; d < v.d; ++d)
        for (int64_t h = 0; h < v.h; ++h)
          for (int64_t w = 0; w < v.w; ++w) {
            if (c.counts[n] == 0) continue;
            bool inside = false;
            for (int64_t j = 0; j < c.counts[n]; ++j) {
              const int64_t* b = &c.boxes[(n * c.k + j) * 6];
              inside = inside ||
                       (b[0] <= d && d < b[3] && b[1] <= h && h < b[4] && b[2] <= w && w < b[5]);
            }
            if (inside != dropout_holes) continue;
            const int64_t e = ((ch * v.d + d) * v.h + h) * v.w + w;
            double f = value;
            if (fill != DropoutFill::Constant) {
              const auto r = detail::philox_block(seed, uint64_t(e) / 4, uint32_t(n),
                                                  detail::PhiloxStream::Element);
              const uint32_t words[4] = {r.x, r.y, r.z, r.w};
              const double u = detail::uniform01(words[e % 4]);
              const double a = fill == DropoutFill::Uniform ? lo : mm[2 * n];
              const double b = fill == DropoutFill::Uniform ? hi : mm[2 * n + 1];
              f = a + (b - a) * u;
            }
            out[n * v.c * v.d * v.h * v.w + e] = f;
          }
  return out;
}

CoarseDropoutParams params(const Case& c, bool holes, DropoutFill fill, double value, double lo,
                           double hi, uint64_t seed, const double* mm) {
  CoarseDropoutParams p;
  p.boxes = c.boxes.data();
  p.counts = c.counts.data();
  p.max_boxes = c.k;
  p.dropout_holes = holes;
  p.fill = fill;
  p.fill_value = value;
  p.fill_low = lo;
  p.fill_high = hi;
  p.minmax = mm;
  p.seed = seed;
  return p;
}

std::vector<double> minmax_of(const Vol& v, const std::vector<float>& x) {
  std::vector<double> mm;
  const int64_t s = v.c * v.d * v.h * v.w;
  for (int64_t n = 0; n < v.n; ++n) {
    double a = x[n * s], b = x[n * s];
    for (int64_t i = 0; i < s; ++i)
      a = std::min<double>(a, x[n * s + i]), b = std::max<double>(b, x[n * s + i]);
    mm.push_back(a);
    mm.push_back(b);
  }
  return mm;
}

}  // namespace

TEST(CoarseDropout, Float32AllFillsBothPolaritiesMatchNaiveReference) {
  for (Vol v : {Vol{3, 2, 7, 5, 9}, Vol{2, 1, 1, 6, 4}, Vol{3, 1, 8, 1, 1}}) {
    const Case c = make_case(v, 4, 11);
    const std::vector<float> x = random_volume(v, 3);
    const std::vector<double> xd(x.begin(), x.end());
    const std::vector<double> mm = minmax_of(v, x);
    for (bool holes : {true, false})
      for (DropoutFill fill :
           {DropoutFill::Constant, DropoutFill::Uniform, DropoutFill::ImageRange}) {
        std::vector<float> out(x.size(), -99.0f);
        const auto p = params(c, holes, fill, 1.25, -2.0, 7.5, 0x1234567890ull, mm.data());
        coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                       voxaug_test::view(out.data(), DType::Float32, v), p);
        const auto ref = reference(c, xd, holes, fill, 1.25, -2.0, 7.5, 0x1234567890ull, mm);
        int64_t filled = 0;  // not every tiny case fills something; the first one does
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_EQ(out[i], static_cast<float>(ref[i]))
              << "voxel " << i << " holes " << holes << " fill " << int(fill);
          filled += out[i] != x[i];
        }
        if (v.d == 7) {
          EXPECT_GT(filled, 0);
        }
      }
  }
}

TEST(CoarseDropout, UntouchedSampleAndInPlaceAndStrided) {
  const Vol v{3, 2, 6, 7, 5};
  const Case c = make_case(v, 3, 5);
  std::vector<float> x = random_volume(v, 9);
  const std::vector<double> xd(x.begin(), x.end());
  const auto p = params(c, true, DropoutFill::Constant, 0.0, 0, 0, 1, nullptr);
  const auto ref = reference(c, xd, true, DropoutFill::Constant, 0.0, 0, 0, 1, {});
  // Strided input: every other w of a buffer twice as wide.
  std::vector<float> wide(x.size() * 2, 1e9f);
  for (size_t i = 0; i < x.size(); ++i) wide[2 * i] = x[i];
  VolumeView sv = voxaug_test::view(wide.data(), DType::Float32, v);
  for (int a = 0; a < 5; ++a) sv.strides[a] *= 2;
  std::vector<float> out(x.size());
  coarse_dropout(sv, voxaug_test::view(out.data(), DType::Float32, v), p);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], float(ref[i])) << i;
  // Sample 1 has count 0: unchanged.
  const int64_t s = v.c * v.d * v.h * v.w;
  for (int64_t i = 0; i < s; ++i) ASSERT_EQ(out[s + i], x[s + i]);
  // In place.
  const VolumeView iv = voxaug_test::view(x.data(), DType::Float32, v);
  coarse_dropout(iv, iv, p);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], float(ref[i])) << i;
}

TEST(CoarseDropout, IntegerAndHalfStorage) {
  const Vol v{2, 1, 5, 6, 7};
  const Case c = make_case(v, 2, 17);
  std::vector<uint8_t> x(v.numel());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>((i * 37) % 251);
  const std::vector<double> xd(x.begin(), x.end());
  std::vector<double> mm;
  for (int64_t n = 0; n < v.n; ++n) {
    const int64_t s = v.numel() / v.n;
    mm.push_back(*std::min_element(xd.begin() + n * s, xd.begin() + (n + 1) * s));
    mm.push_back(*std::max_element(xd.begin() + n * s, xd.begin() + (n + 1) * s));
  }
  std::vector<uint8_t> out(x.size());
  auto p = params(c, false, DropoutFill::ImageRange, 0, 0, 0, 77, mm.data());
  coarse_dropout(voxaug_test::view(x.data(), DType::UInt8, v),
                 voxaug_test::view(out.data(), DType::UInt8, v), p);
  auto ref = reference(c, xd, false, DropoutFill::ImageRange, 0, 0, 0, 77, mm);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], static_cast<uint8_t>(std::trunc(ref[i]))) << i;  // numpy's truncation
  // Constant fill saturates to the type's range.
  p = params(c, true, DropoutFill::Constant, 300.0, 0, 0, 0, nullptr);
  coarse_dropout(voxaug_test::view(x.data(), DType::UInt8, v),
                 voxaug_test::view(out.data(), DType::UInt8, v), p);
  ref = reference(c, xd, true, DropoutFill::Constant, 255.0, 0, 0, 0, {});
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<uint8_t>(ref[i])) << i;
  // float16: the float64 fill rounded through float32.
  std::vector<uint16_t> xh(x.size()), oh(x.size());
  for (size_t i = 0; i < x.size(); ++i) xh[i] = detail::float_to_half(float(x[i]) / 7.0f);
  std::vector<double> xhd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xhd[i] = detail::half_to_float(xh[i]);
  p = params(c, true, DropoutFill::Uniform, 0, -1.0, 3.0, 5, nullptr);
  coarse_dropout(voxaug_test::view(xh.data(), DType::Float16, v),
                 voxaug_test::view(oh.data(), DType::Float16, v), p);
  ref = reference(c, xhd, true, DropoutFill::Uniform, 0, -1.0, 3.0, 5, {});
  for (size_t i = 0; i < oh.size(); ++i)
    ASSERT_EQ(oh[i], detail::float_to_half(static_cast<float>(ref[i]))) << i;
}

TEST(CoarseDropout, CpuReducesTheImageRangeItselfWithNaNPropagating) {
  const Vol v{3, 2, 6, 7, 9};
  const Case c = make_case(v, 4, 8);
  std::vector<float> x = random_volume(v, 6);
  x[x.size() - 5] = std::nanf("");  // sample 2 holds a NaN: its fill is NaN (numpy's min / max)
  std::vector<double> mm = minmax_of(v, x);
  mm[4] = mm[5] = std::nan("");
  for (bool holes : {true, false}) {
    std::vector<float> given(x.size()), reduced(x.size());
    auto p = params(c, holes, DropoutFill::ImageRange, 0, 0, 0, 3, mm.data());
    const VolumeView in = voxaug_test::view(x.data(), DType::Float32, v);
    coarse_dropout(in, voxaug_test::view(given.data(), DType::Float32, v), p);
    p.minmax = nullptr;
    coarse_dropout(in, voxaug_test::view(reduced.data(), DType::Float32, v), p);
    EXPECT_EQ(0, std::memcmp(given.data(), reduced.data(), x.size() * sizeof(float)));
    const int64_t s = v.numel() / v.n;
    bool nan_fill = false;
    for (int64_t i = 2 * s; i < 3 * s; ++i) nan_fill = nan_fill || std::isnan(reduced[i]);
    EXPECT_TRUE(nan_fill);
  }
}

TEST(CoarseDropout, BatchSplitGivesTheSameBytes) {
  const Vol v{3, 1, 6, 5, 4};
  const Case c = make_case(v, 3, 23);
  const std::vector<float> x = random_volume(v, 1);
  std::vector<float> full(x.size()), part(x.size() / 3);
  auto p = params(c, true, DropoutFill::Uniform, 0, 0.0, 1.0, 99, nullptr);
  coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                 voxaug_test::view(full.data(), DType::Float32, v), p);
  const int64_t s = x.size() / 3;
  const Vol one{1, v.c, v.d, v.h, v.w};
  CoarseDropoutParams q = p;
  q.boxes = c.boxes.data() + 2 * c.k * 6;
  q.counts = c.counts.data() + 2;
  coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()) + 2 * s, DType::Float32, one),
                 voxaug_test::view(part.data(), DType::Float32, one), q, nullptr, 2);
  EXPECT_EQ(0, std::memcmp(part.data(), full.data() + 2 * s, s * sizeof(float)));
}

TEST(CoarseDropout, BadArgumentsThrowNamingTheArgument) {
  const Vol v{2, 1, 4, 4, 4};
  Case c = make_case(v, 2, 1);
  std::vector<float> x(v.numel()), out(v.numel());
  auto p = params(c, true, DropoutFill::Constant, 0, 0, 0, 0, nullptr);
  c.counts[0] = 3;  // > max_boxes
  p.counts = c.counts.data();
  try {
    coarse_dropout(voxaug_test::view(x.data(), DType::Float32, v),
                   voxaug_test::view(out.data(), DType::Float32, v), p);
    FAIL() << "expected voxaug::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("counts[0]"), std::string::npos) << e.what();
  }
  c.counts[0] = 1;
  p.fill = static_cast<DropoutFill>(7);
  EXPECT_THROW(coarse_dropout(voxaug_test::view(x.data(), DType::Float32, v),
                              voxaug_test::view(out.data(), DType::Float32, v), p),
               Error);
  p.fill = DropoutFill::Constant;
  EXPECT_THROW(coarse_dropout(voxaug_test::view(x.data(), DType::Float32, v),
                              voxaug_test::view(out.data(), DType::Float16, v), p),
               Error);
}

#if VOXAUG_WITH_CUDA
TEST(CoarseDropoutCuda, MatchesCpuTwinBitForBit) {
  if (!voxaug_test::have_device()) GTEST_SKIP() << "no CUDA device: CUDA twin not run";
  const Vol v{3, 2, 17, 9, 33};
  const Case c = make_case(v, 5, 31);
  const std::vector<float> x = random_volume(v, 4);
  const std::vector<double> mm = minmax_of(v, x);
  voxaug_test::DeviceBuffer dx(x), db(c.boxes), dc(c.counts), dm(mm), dout(x.size() * 4);
  for (bool holes : {true, false})
    for (DropoutFill fill :
         {DropoutFill::Constant, DropoutFill::Uniform, DropoutFill::ImageRange}) {
      std::vector<float> cpu(x.size());
      auto p = params(c, holes, fill, 2.5, -1.0, 4.0, 0xfeedull, mm.data());
      coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                     voxaug_test::view(cpu.data(), DType::Float32, v), p);
      p.boxes = db.as<int64_t>();
      p.counts = dc.as<int64_t>();
      p.minmax = dm.as<double>();
      coarse_dropout(voxaug_test::view(dx.p, DType::Float32, v, Device::CUDA),
                     voxaug_test::view(dout.p, DType::Float32, v, Device::CUDA), p);
      CUDA_OK(cudaDeviceSynchronize());
      const auto gpu = dout.to_host<float>(x.size());
      EXPECT_EQ(0, std::memcmp(gpu.data(), cpu.data(), x.size() * sizeof(float)));
    }
}
#endif

// The CUDA backend's per-voxel functor, run on the host by the generic launcher (dense float32).
void functor_on_host(const std::vector<float>& x, std::vector<float>& out, const Vol& v,
                     const CoarseDropoutParams& p, uint32_t first_sample) {
  detail::DropoutFunctor<float> f;
  f.in = x.data();
  f.out = out.data();
  f.in_ix =
      detail::make_indexer(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v));
  f.out_ix = f.in_ix;
  f.size[0] = v.c, f.size[1] = v.d, f.size[2] = v.h, f.size[3] = v.w;
  f.p = p;
  f.first_sample = first_sample;
  detail::CpuLauncher::launch(f, v.n, nullptr);
}

// The CUDA backend's per-voxel functor, run on the host by the generic launcher, against the CPU
// twin's row/span path: the logic CUDA runs is checked even without a device.
TEST(CoarseDropout, PerVoxelFunctorOnHostEqualsCpuTwin) {
  const Vol v{3, 2, 9, 11, 21};
  const Case c = make_case(v, 6, 41);
  const std::vector<float> x = random_volume(v, 12);
  const std::vector<double> mm = minmax_of(v, x);
  for (bool holes : {true, false})
    for (DropoutFill fill :
         {DropoutFill::Constant, DropoutFill::Uniform, DropoutFill::ImageRange}) {
      const auto p = params(c, holes, fill, 0.5, -3.0, 1.0, 0xabcdefull, mm.data());
      std::vector<float> twin(x.size()), functor(x.size());
      coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                     voxaug_test::view(twin.data(), DType::Float32, v), p, nullptr, 5);
      functor_on_host(x, functor, v, p, 5);
      EXPECT_EQ(0, std::memcmp(twin.data(), functor.data(), x.size() * sizeof(float)))
          << "holes " << holes << " fill " << int(fill);
    }
}

// An output of >= 2 MiB with the image range reduced by the call: the reduction pass copies the
// rows with streaming stores (odd row lengths: unaligned heads and tails) and the second pass
// writes only the holes. Against the per-voxel functor with a precomputed min / max table, and
// in place against out of place.
TEST(CoarseDropout, LargeOutOfPlaceReductionCopiesRowsInTheReductionPass) {
  const Vol v{2, 2, 23, 64, 131};  // 2 x 2 x 23 x 64 x 131 float32: 3.1 MB
  const Case c = make_case(v, 8, 77);
  const std::vector<float> x = random_volume(v, 21);
  const std::vector<double> mm = minmax_of(v, x);
  for (bool holes : {true, false}) {
    auto p = params(c, holes, DropoutFill::ImageRange, 0, 0, 0, 0x5eedull, nullptr);
    std::vector<float> out(x.size(), -7.0f);
    coarse_dropout(voxaug_test::view(const_cast<float*>(x.data()), DType::Float32, v),
                   voxaug_test::view(out.data(), DType::Float32, v), p, nullptr, 3);
    std::vector<float> inplace = x;
    const VolumeView iv = voxaug_test::view(inplace.data(), DType::Float32, v);
    coarse_dropout(iv, iv, p, nullptr, 3);
    p.minmax = mm.data();
    std::vector<float> functor(x.size(), -7.0f);
    functor_on_host(x, functor, v, p, 3);
    EXPECT_EQ(0, std::memcmp(out.data(), functor.data(), x.size() * sizeof(float)))
        << "holes " << holes;
    EXPECT_EQ(0, std::memcmp(inplace.data(), functor.data(), x.size() * sizeof(float)))
        << "holes " << holes;
    int64_t changed = 0;
    for (size_t i = 0; i < x.size(); ++i) changed += out[i] != x[i];
    EXPECT_GT(changed, 0);
    EXPECT_LT(changed, static_cast<int64_t>(x.size()));
  }
}

// ---- coarse shuffle ----

namespace {

// Boxes (host tables) for a {3, C, 8, 9, 10} volume: overlapping, one-row, empty, one-voxel and
// whole-volume boxes.
struct ShuffleCase {
  std::vector<int64_t> boxes = std::vector<int64_t>(3 * 3 * 6, 0);
  std::vector<int64_t> counts = {2, 3, 1};
  ShuffleCase() {
    set(0, 0, {0, 0, 0, 4, 5, 6});
    set(0, 1, {2, 3, 4, 7, 9, 8});
    set(1, 0, {1, 1, 1, 2, 2, 9});
    set(1, 1, {3, 3, 3, 3, 5, 5});
    set(1, 2, {5, 0, 2, 6, 1, 3});
    set(2, 0, {0, 0, 0, 8, 9, 10});
  }
  void set(int n, int j, std::initializer_list<int64_t> r) {
    std::copy(r.begin(), r.end(), boxes.begin() + (n * 3 + j) * 6);
  }
  CoarseShuffleParams params(uint64_t seed) const {
    CoarseShuffleParams p;
    p.boxes = boxes.data();
    p.counts = counts.data();
    p.max_boxes = 3;
    p.seed = seed;
    return p;
  }
};

}  // namespace

// The CPU radix argsort path against the CUDA backend's bodies run on the host (keys and indices
// by ShuffleKeysBody, std::stable_sort per channel, the two ShuffleMoveBody passes): the logic CUDA
// runs, checked without a device; and every voxel of a box keeps its value multiset.
TEST(CoarseShuffle, CpuEqualsDeviceBodiesOnHost) {
  const Vol v{3, 2, 8, 9, 10};
  const ShuffleCase sc;
  const std::vector<float> x = random_volume(v, 21);
  std::vector<float> cpu = x;
  const auto p = sc.params(0x1234abcdull);
  coarse_shuffle_(voxaug_test::view(cpu.data(), DType::Float32, v), p, nullptr, 5);
  EXPECT_NE(cpu, x);
  std::vector<float> emu = x;
  const VolumeView ev = voxaug_test::view(emu.data(), DType::Float32, v);
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t j = 0; j < sc.counts[n]; ++j) {
      const int64_t* r = sc.boxes.data() + (n * 3 + j) * 6;
      const detail::ShuffleBox b = detail::shuffle_box(ev, r, n);
      if (b.volume < 2) continue;
      const size_t items = static_cast<size_t>(b.volume * v.c);
      std::vector<uint32_t> keys(items), idx(items);
      std::vector<float> tmp(items);
      detail::CpuLauncher::launch(detail::ShuffleKeysBody{b, p.seed, 5 + static_cast<uint32_t>(n),
                                                          j, keys.data(), idx.data()},
                                  1, nullptr);
      for (int64_t c = 0; c < v.c; ++c) {
        const size_t o = static_cast<size_t>(c * b.volume);
        std::vector<std::pair<uint32_t, uint32_t>> kv;
        for (size_t i = 0; i < static_cast<size_t>(b.volume); ++i)
          kv.emplace_back(keys[o + i], idx[o + i]);
        std::stable_sort(kv.begin(), kv.end(),
                         [](const auto& a, const auto& b2) { return a.first < b2.first; });
        for (size_t i = 0; i < kv.size(); ++i) idx[o + i] = kv[i].second;
      }
      detail::CpuLauncher::launch(
          detail::ShuffleMoveBody<float, false>{b, emu.data(), tmp.data(), idx.data()}, 1, nullptr);
      detail::CpuLauncher::launch(
          detail::ShuffleMoveBody<float, true>{b, emu.data(), tmp.data(), idx.data()}, 1, nullptr);
    }
  EXPECT_EQ(emu, cpu);
  // Sample 2's box is the whole volume: each channel is a permutation of the input's.
  const int64_t vol = v.d * v.h * v.w;
  for (int64_t c = 0; c < v.c; ++c) {
    std::vector<float> a(x.begin() + (2 * v.c + c) * vol, x.begin() + (2 * v.c + c + 1) * vol);
    std::vector<float> b(cpu.begin() + (2 * v.c + c) * vol, cpu.begin() + (2 * v.c + c + 1) * vol);
    EXPECT_NE(a, b);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);
  }
  // Bad tables throw.
  ShuffleCase bad;
  bad.set(0, 0, {0, 0, 0, 9, 1, 1});  // beyond D = 8
  EXPECT_THROW(coarse_shuffle_(voxaug_test::view(cpu.data(), DType::Float32, v), bad.params(1)),
               Error);
  bad = ShuffleCase();
  bad.counts[1] = 4;
  EXPECT_THROW(coarse_shuffle_(voxaug_test::view(cpu.data(), DType::Float32, v), bad.params(1)),
               Error);
}

#if VOXAUG_WITH_CUDA
TEST(CoarseShuffleCuda, MatchesCpuTwinBitForBit) {
  if (!voxaug_test::have_device()) GTEST_SKIP() << "no CUDA device: CUDA twin not run";
  const Vol v{3, 2, 8, 9, 10};
  const ShuffleCase sc;
  const std::vector<float> x = random_volume(v, 22);
  std::vector<float> cpu = x;
  const auto p = sc.params(0x77ull);
  coarse_shuffle_(voxaug_test::view(cpu.data(), DType::Float32, v), p, nullptr, 3);
  voxaug_test::DeviceBuffer dx(x);
  coarse_shuffle_(voxaug_test::view(dx.p, DType::Float32, v, Device::CUDA), p, nullptr, 3);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dx.to_host<float>(x.size()), cpu);
}
#endif

// ---- patch swaps ----

namespace {

// A true swap by copies (both patches read, then written), dense float volumes.
void naive_swaps(std::vector<float>& x, const Vol& v, const std::vector<int64_t>& loc,
                 const std::vector<int64_t>& counts, int64_t max_swaps, const int64_t P[3]) {
  const int64_t V = v.d * v.h * v.w;
  for (int64_t n = 0; n < v.n; ++n)
    for (int64_t c = 0; c < v.c; ++c) {
      float* vol = x.data() + (n * v.c + c) * V;
      for (int64_t k = 0; k < counts[static_cast<size_t>(n)]; ++k) {
        const int64_t* l = loc.data() + (n * max_swaps + k) * 6;
        std::vector<float> a, b;
        for (int64_t d = 0; d < P[0]; ++d)
          for (int64_t h = 0; h < P[1]; ++h)
            for (int64_t w = 0; w < P[2]; ++w) {
              a.push_back(vol[((l[0] + d) * v.h + l[1] + h) * v.w + l[2] + w]);
              b.push_back(vol[((l[3] + d) * v.h + l[4] + h) * v.w + l[5] + w]);
            }
        // The whole second patch, then the whole first (TorchIO's _swap: where the patches
        // overlap, the first patch's new values -- the second's old ones -- are the result).
        for (int pass = 0; pass < 2; ++pass) {
          size_t i = 0;
          for (int64_t d = 0; d < P[0]; ++d)
            for (int64_t h = 0; h < P[1]; ++h)
              for (int64_t w = 0; w < P[2]; ++w, ++i) {
                if (pass == 0)
                  vol[((l[3] + d) * v.h + l[4] + h) * v.w + l[5] + w] = a[i];
                else
                  vol[((l[0] + d) * v.h + l[1] + h) * v.w + l[2] + w] = b[i];
              }
        }
      }
    }
}

PatchSwapParams swap_params(const std::vector<int64_t>& loc, const std::vector<int64_t>& counts,
                            int64_t max_swaps, const int64_t P[3]) {
  PatchSwapParams p;
  p.locations = loc.data();
  p.counts = counts.data();
  p.max_swaps = max_swaps;
  for (int a = 0; a < 3; ++a) p.patch[a] = P[a];
  return p;
}

}  // namespace

TEST(PatchSwap, MatchesNaiveCopiesWithOverlaps) {
  const Vol v{2, 3, 9, 10, 11};
  const int64_t P[3] = {4, 3, 5};
  // Sample 0: overlapping and disjoint swaps; sample 1: none.
  const std::vector<int64_t> loc = {0, 0, 0, 1, 2, 3, 5, 7, 6, 0, 0, 0, 2, 2, 2, 3, 3, 3,
                                    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const std::vector<int64_t> counts = {3, 0};
  const std::vector<float> x = random_volume(v, 31);
  std::vector<float> got = x, ref = x;
  swap_patches_(voxaug_test::view(got.data(), DType::Float32, v), swap_params(loc, counts, 3, P));
  naive_swaps(ref, v, loc, counts, 3, P);
  EXPECT_EQ(got, ref);
  EXPECT_NE(got, x);
  {  // Overlaps with the second corner before the first (C-order), and patches of 512 voxels.
    const Vol v2{1, 2, 12, 12, 12};
    const int64_t P2[3] = {8, 8, 8};
    const std::vector<int64_t> l2 = {3, 0, 0, 0, 0, 0, 1, 2, 3, 0, 1, 1};
    const std::vector<float> y = random_volume(v2, 33);
    std::vector<float> g2 = y, r2 = y;
    swap_patches_(voxaug_test::view(g2.data(), DType::Float32, v2), swap_params(l2, {2}, 2, P2));
    naive_swaps(r2, v2, l2, {2}, 2, P2);
    EXPECT_EQ(g2, r2);
  }
  std::vector<int64_t> bad = loc;
  bad[3] = 6;  // the second patch of swap 0 would end at d = 10 > 9
  EXPECT_THROW(swap_patches_(voxaug_test::view(got.data(), DType::Float32, v),
                             swap_params(bad, counts, 3, P)),
               Error);
  // The host-table check that callers run before sending tables to the device.
  EXPECT_THROW(check_swap_tables(voxaug_test::view(got.data(), DType::Float32, v),
                                 swap_params(bad, counts, 3, P)),
               Error);
  check_swap_tables(voxaug_test::view(got.data(), DType::Float32, v),
                    swap_params(loc, counts, 3, P));
  const int64_t big[3] = {10, 3, 5};
  EXPECT_THROW(swap_patches_(voxaug_test::view(got.data(), DType::Float32, v),
                             swap_params(loc, counts, 3, big)),
               Error);
}

#if VOXAUG_WITH_CUDA
namespace {
// The swaps on the device (tables there too) against the host's, float32, bit for bit.
void swap_twin(const Vol& v, const int64_t P[3], const std::vector<int64_t>& loc,
               const std::vector<int64_t>& counts, int64_t max_swaps, uint32_t seed) {
  const std::vector<float> x = random_volume(v, seed);
  std::vector<float> cpu = x;
  swap_patches_(voxaug_test::view(cpu.data(), DType::Float32, v),
                swap_params(loc, counts, max_swaps, P));
  voxaug_test::DeviceBuffer dx(x), dl(loc), dc(counts);
  PatchSwapParams dp = swap_params(loc, counts, max_swaps, P);
  dp.locations = dl.as<int64_t>();
  dp.counts = dc.as<int64_t>();
  swap_patches_(voxaug_test::view(dx.p, DType::Float32, v, Device::CUDA), dp);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(dx.to_host<float>(x.size()), cpu) << "seed " << seed;
}
}  // namespace

TEST(PatchSwapCuda, MatchesCpuTwinBitForBit) {
  if (!voxaug_test::have_device()) GTEST_SKIP() << "no CUDA device: CUDA twin not run";
  const int64_t P[3] = {4, 3, 5};
  swap_twin(Vol{2, 3, 9, 10, 11}, P, {0, 0, 0, 1, 2, 3, 5, 7, 6, 0, 0, 0, 2, 2, 2, 3, 3, 3,
                                      1, 1, 1, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
            {3, 1}, 3, 32);
  // The second corner before the first, 512 voxels > 256 threads: several grid-stride passes.
  const int64_t P2[3] = {8, 8, 8};
  swap_twin(Vol{1, 2, 12, 12, 12}, P2, {3, 0, 0, 0, 0, 0, 1, 2, 3, 0, 1, 1}, {2}, 2, 33);
}
#endif
