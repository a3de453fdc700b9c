// Window family (sliding-window inference): layout vs a direct transcription of MONAI's
// dense_patch_slices, gather vs a naive padded copy, stitch + count + finalize vs a naive
// window-by-window accumulation in MONAI's order (bit-exact), and the CPU row loops vs the
// per-element bodies the CUDA backend runs (executed here on the host).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels/window/window_kernels.h"
#include "test_support.h"
#include "voxaug/error.h"
#include "voxaug/window.h"
#include "window_ring.h"

using namespace voxaug;
using voxaug_test::RingPass;
using voxaug_test::view;
using voxaug_test::Vol;

namespace {

// MONAI: interval = roi if roi == padded else max(1, int(roi * (1 - overlap))); windows per axis
// = 1 + first d with d * interval + roi >= padded; start = k * interval - max(k * interval + roi -
// padded, 0).
std::vector<int64_t> monai_starts(int64_t size, int64_t roi, double overlap) {
  const int64_t padded = std::max(size, roi);
  int64_t interval = roi;
  if (roi != padded) {
    interval = static_cast<int64_t>(roi * (1 - overlap));
    if (interval <= 0) interval = 1;
  }
  int64_t num = 0;
  while (num * interval + roi < padded) ++num;
  std::vector<int64_t> s;
  for (int64_t k = 0; k <= num; ++k) {
    int64_t v = k * interval;
    v -= std::max<int64_t>(v + roi - padded, 0);
    s.push_back(v);
  }
  return s;
}

struct Case {
  int64_t size[3], roi[3];
  double overlap[3];
};

const Case kCases[] = {
    {{20, 17, 23}, {8, 8, 8}, {0.25, 0.25, 0.25}}, {{20, 17, 23}, {8, 6, 10}, {0.5, 0.0, 0.8}},
    {{5, 17, 9}, {8, 8, 12}, {0.25, 0.5, 0.7}},  // roi larger than the image on d and w
    {{1, 9, 13}, {1, 4, 5}, {0.9, 0.3, 0.6}},    // size-1 axis
    {{16, 16, 16}, {16, 16, 16}, {0.5, 0.5, 0.5}},
};

std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// Random predictions in float32, and the same values rounded to float16.
struct Preds {
  std::vector<float> f;
  std::vector<uint16_t> h;
  Preds(size_t count, unsigned seed) : f(randn(count, seed)), h(f.size()) {
    for (size_t i = 0; i < f.size(); ++i) h[i] = detail::float_to_half(f[i]);
  }
  void* data(DType t) {
    return t == DType::Float32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data());
  }
};

// float32 Gaussian-like map (any positive values serve the order test).
std::vector<float> weight_map(const int64_t roi[3], unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(1e-3f, 1.0f);
  std::vector<float> w(roi[0] * roi[1] * roi[2]);
  for (auto& x : w) x = u(rng);
  return w;
}

}  // namespace

TEST(WindowCpu, LayoutMatchesMonaiDensePatchSlices) {
  for (const Case& c : kCases) {
    const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
    for (int a = 0; a < 3; ++a) {
      const auto s = monai_starts(c.size[a], c.roi[a], c.overlap[a]);
      ASSERT_EQ(l.count[a], static_cast<int64_t>(s.size())) << "axis " << a;
      for (size_t k = 0; k < s.size(); ++k) EXPECT_EQ(l.start(a, k), s[k]);
      EXPECT_EQ(l.padded[a], std::max(c.size[a], c.roi[a]));
      EXPECT_EQ(l.pad_before[a], (l.padded[a] - c.size[a]) / 2);
    }
  }
  // The BTCV validation size at the overlaps: 4 x 3 x 4 and 10 x 8 x 11 windows.
  const int64_t btcv[3] = {255, 223, 276}, roi[3] = {96, 96, 96};
  const double o25[3] = {0.25, 0.25, 0.25}, o80[3] = {0.8, 0.8, 0.8};
  EXPECT_EQ(window_layout(btcv, roi, o25).windows_per_image(), 48);
  EXPECT_EQ(window_layout(btcv, roi, o80).windows_per_image(), 880);
  // Coverage ranges agree with the starts on every coordinate.
  for (const Case& c : kCases) {
    const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
    for (int a = 0; a < 3; ++a)
      for (int64_t q = 0; q < l.padded[a]; ++q) {
        int64_t lo, hi;
        detail::window_cover(l, a, q, lo, hi);
        for (int64_t k = 0; k < l.count[a]; ++k) {
          const bool in = q >= l.start(a, k) && q < l.start(a, k) + l.roi[a];
          EXPECT_EQ(in, k >= lo && k <= hi) << "axis " << a << " q " << q << " k " << k;
        }
      }
  }
}

TEST(WindowCpu, LayoutRejectsBadArguments) {
  const int64_t size[3] = {8, 8, 8}, roi[3] = {4, 4, 4}, bad_roi[3] = {4, 0, 4};
  const double ok[3] = {0.25, 0.25, 0.25}, one[3] = {0.25, 1.0, 0.25}, neg[3] = {-0.1, 0, 0};
  EXPECT_THROW(window_layout(size, bad_roi, ok), Error);
  EXPECT_THROW(window_layout(size, roi, one), Error);
  EXPECT_THROW(window_layout(size, roi, neg), Error);
  try {
    window_layout(size, roi, one);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlap must be in [0, 1)"), std::string::npos);
  }
}

TEST(WindowCpu, GatherEqualsNaivePaddedCopy) {
  for (const Case& c : kCases)
    for (int mode = 0; mode < 4; ++mode) {
      const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
      bool reflect_ok = true;
      for (int a = 0; a < 3; ++a)
        reflect_ok &=
            std::max(l.pad_before[a], l.padded[a] - l.size[a] - l.pad_before[a]) < l.size[a];
      if (mode == 1 && !reflect_ok) continue;
      const Vol iv{2, 2, c.size[0], c.size[1], c.size[2]};
      const auto img = randn(iv.numel(), 3);
      const int64_t total = 2 * l.windows_per_image();
      const int64_t first = total > 3 ? 1 : 0, B = std::min<int64_t>(total - first, 5);
      const Vol ov{B, 2, l.roi[0], l.roi[1], l.roi[2]};
      std::vector<float> out(ov.numel(), -7.f);
      window_gather(view(const_cast<float*>(img.data()), DType::Float32, iv), l, first,
                    static_cast<WindowPad>(mode), 0.5, view(out.data(), DType::Float32, ov));
      // Naive: pad each axis as torch.nn.functional.pad, then slice.
      auto src = [&](int64_t q, int a) -> int64_t {
        int64_t i = q - l.pad_before[a];
        const int64_t S = l.size[a];
        if (i >= 0 && i < S) return i;
        if (mode == 0) return -1;
        if (mode == 1) return i < 0 ? -i : 2 * (S - 1) - i;
        if (mode == 2) return i < 0 ? 0 : S - 1;
        return ((i % S) + S) % S;
      };
      for (int64_t j = 0; j < B; ++j) {
        const int64_t w = first + j, n = w / l.windows_per_image(), r = w % l.windows_per_image();
        const int64_t k[3] = {r / (l.count[1] * l.count[2]), (r / l.count[2]) % l.count[1],
                              r % l.count[2]};
        for (int64_t ch = 0; ch < 2; ++ch)
          for (int64_t z = 0; z < l.roi[0]; ++z)
            for (int64_t y = 0; y < l.roi[1]; ++y)
              for (int64_t x = 0; x < l.roi[2]; ++x) {
                const int64_t sd = src(l.start(0, k[0]) + z, 0), sh = src(l.start(1, k[1]) + y, 1),
                              sw = src(l.start(2, k[2]) + x, 2);
                const float want = (sd < 0 || sh < 0 || sw < 0)
                                       ? 0.5f
                                       : img[(((n * 2 + ch) * iv.d + sd) * iv.h + sh) * iv.w + sw];
                ASSERT_EQ(out[(((j * 2 + ch) * l.roi[0] + z) * l.roi[1] + y) * l.roi[2] + x], want)
                    << "mode " << mode << " window " << w;
              }
      }
      // The converting path (float32 -> float16 windows) is the device body: check it agrees.
      std::vector<uint16_t> half(ov.numel());
      window_gather(view(const_cast<float*>(img.data()), DType::Float32, iv), l, first,
                    static_cast<WindowPad>(mode), 0.5, view(half.data(), DType::Float16, ov));
      for (size_t i = 0; i < half.size(); ++i)
        ASSERT_EQ(half[i], detail::float_to_half(out[i])) << i;
    }
}

TEST(WindowCpu, StitchCountFinalizeEqualMonaiOrderBitExact) {
  for (const Case& c : kCases)
    for (bool gaussian : {false, true}) {
      const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
      const int64_t N = 2, K = 3, total = N * l.windows_per_image();
      const int64_t pv = l.padded[0] * l.padded[1] * l.padded[2];
      const auto w = weight_map(l.roi, 5);
      const float* wp = gaussian ? w.data() : nullptr;
      const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
      const auto preds = randn(static_cast<size_t>(total * K * rv), 11);
      // voxaug, in batches of 3 windows (the last one partial).
      std::vector<float> acc(N * K * pv, 0.f);
      const Vol av{N, K, l.padded[0], l.padded[1], l.padded[2]};
      for (int64_t first = 0; first < total; first += 3) {
        const int64_t B = std::min<int64_t>(3, total - first);
        const Vol pvol{B, K, l.roi[0], l.roi[1], l.roi[2]};
        window_stitch(view(acc.data(), DType::Float32, av),
                      view(const_cast<float*>(preds.data()) + first * K * rv, DType::Float32, pvol),
                      wp, l, first);
      }
      std::vector<float> count(pv);
      window_count(wp, DType::Float32, Device::CPU, 0, l, count.data());
      const Vol ov{N, K, l.size[0], l.size[1], l.size[2]};
      std::vector<float> out(ov.numel());
      window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                      view(out.data(), DType::Float32, ov), false);

      // Naive MONAI: for each window in order, out[slice] += pred * w; count[slice] += w.
      std::vector<float> ref(N * K * pv, 0.f), rcount(pv, 0.f);
      for (int64_t win = 0; win < total; ++win) {
        const int64_t n = win / l.windows_per_image(), r = win % l.windows_per_image();
        const int64_t k[3] = {r / (l.count[1] * l.count[2]), (r / l.count[2]) % l.count[1],
                              r % l.count[2]};
        const int64_t s[3] = {l.start(0, k[0]), l.start(1, k[1]), l.start(2, k[2])};
        for (int64_t ch = 0; ch < K; ++ch)
          for (int64_t v = 0; v < rv; ++v) {
            const int64_t x = v % l.roi[2], y = (v / l.roi[2]) % l.roi[1],
                          z = v / (l.roi[2] * l.roi[1]);
            const float p = preds[(win * K + ch) * rv + v] * (gaussian ? w[v] : 1.0f);
            ref[(n * K + ch) * pv + ((s[0] + z) * l.padded[1] + s[1] + y) * l.padded[2] + s[2] +
                x] += p;
          }
        if (n == 0)
          for (int64_t v = 0; v < rv; ++v) {
            const int64_t x = v % l.roi[2], y = (v / l.roi[2]) % l.roi[1],
                          z = v / (l.roi[2] * l.roi[1]);
            rcount[((s[0] + z) * l.padded[1] + s[1] + y) * l.padded[2] + s[2] + x] +=
                gaussian ? w[v] : 1.0f;
          }
      }
      ASSERT_EQ(0, std::memcmp(acc.data(), ref.data(), acc.size() * sizeof(float)));
      ASSERT_EQ(0, std::memcmp(count.data(), rcount.data(), count.size() * sizeof(float)));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t ch = 0; ch < K; ++ch)
          for (int64_t z = 0; z < l.size[0]; ++z)
            for (int64_t y = 0; y < l.size[1]; ++y)
              for (int64_t x = 0; x < l.size[2]; ++x) {
                const int64_t q =
                    ((z + l.pad_before[0]) * l.padded[1] + y + l.pad_before[1]) * l.padded[2] + x +
                    l.pad_before[2];
                const float want = ref[(n * K + ch) * pv + q] / rcount[q];
                ASSERT_EQ(out[(((n * K + ch) * l.size[0] + z) * l.size[1] + y) * l.size[2] + x],
                          want);
              }
      // Without a count map: the count computed on the fly, the same bits.
      std::vector<float> fly(ov.numel());
      window_finalize(view(acc.data(), DType::Float32, av), nullptr, wp, l,
                      view(fly.data(), DType::Float32, ov), false);
      ASSERT_EQ(0, std::memcmp(out.data(), fly.data(), out.size() * sizeof(float)));
      // In place (acc aliased by out) when nothing is cropped.
      bool cropped = false;
      for (int a = 0; a < 3; ++a) cropped |= l.padded[a] != l.size[a];
      if (!cropped) {
        std::vector<float> inplace = acc;
        window_finalize(view(inplace.data(), DType::Float32, av), nullptr, wp, l,
                        view(inplace.data(), DType::Float32, ov), false);
        ASSERT_EQ(0, std::memcmp(out.data(), inplace.data(), out.size() * sizeof(float)));
      }
      // Sanity: the result is not all zeros.
      float mx = 0;
      for (float v : out) mx = std::max(mx, std::fabs(v));
      EXPECT_GT(mx, 0.1f);
    }
}

// StitchFuse: a pass that stores on each voxel's first window into an accumulator of NaNs and
// divides on its last equals zero fill + stitch + window_finalize in place, bit for bit; with
// first_store alone, the finalized output equals the plain pass's. The per-element body the CUDA
// backend launches (run here on the host) gives the same bits. float16 predictions exercise the
// rounded products; a batch of every window crosses images and kStitchWindows launches.
TEST(WindowCpu, StitchFuseEqualsZeroFillStitchFinalize) {
  const float nan = std::nanf("");
  for (const Case& c : kCases)
    for (bool gaussian : {false, true})
      for (DType pt : {DType::Float32, DType::Float16})
        for (int64_t B : {int64_t(3), int64_t(1000)}) {
          const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
          bool cropped = false;
          for (int a = 0; a < 3; ++a) cropped |= l.padded[a] != l.size[a];
          const int64_t N = 2, K = 2, total = N * l.windows_per_image();
          const int64_t pv = l.padded[0] * l.padded[1] * l.padded[2];
          const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
          const auto w = weight_map(l.roi, 21);
          const float* wp = gaussian ? w.data() : nullptr;
          Preds pr(static_cast<size_t>(total * K * rv), 23);
          void* preds = pr.data(pt);
          const int64_t esize = pt == DType::Float32 ? 4 : 2;
          const Vol av{N, K, l.padded[0], l.padded[1], l.padded[2]};
          std::vector<float> count(pv);
          window_count(wp, DType::Float32, Device::CPU, 0, l, count.data());
          auto pass = [&](std::vector<float>& acc, const StitchFuse& fuse) {
            for (int64_t first = 0; first < total; first += B) {
              const int64_t b = std::min(B, total - first);
              window_stitch(view(acc.data(), DType::Float32, av),
                            view(static_cast<char*>(preds) + first * K * rv * esize, pt,
                                 {b, K, l.roi[0], l.roi[1], l.roi[2]}),
                            wp, l, first, fuse);
            }
          };
          std::vector<float> ref(N * K * pv, 0.f);
          pass(ref, StitchFuse{});
          const Vol ov{N, K, l.size[0], l.size[1], l.size[2]};
          std::vector<float> want(ov.numel());
          window_finalize(view(ref.data(), DType::Float32, av), count.data(), nullptr, l,
                          view(want.data(), DType::Float32, ov), false);

          // first_store alone: no zero fill, then the usual final pass.
          std::vector<float> acc(N * K * pv, nan), got(ov.numel());
          pass(acc, StitchFuse{true, false, nullptr});
          ASSERT_EQ(0, std::memcmp(acc.data(), ref.data(), acc.size() * sizeof(float)));
          window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                          view(got.data(), DType::Float32, ov), false);
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          if (cropped) {  // last_divide would leave the padding in acc
            EXPECT_THROW(pass(acc, StitchFuse{true, true, nullptr}), Error);
            continue;
          }
          // first_store + last_divide, with the count map and with the count on the fly.
          for (const float* cnt :
               {static_cast<const float*>(count.data()), static_cast<const float*>(nullptr)}) {
            std::vector<float> fused(N * K * pv, nan);
            pass(fused, StitchFuse{true, true, cnt});
            ASSERT_EQ(0, std::memcmp(fused.data(), want.data(), want.size() * sizeof(float)))
                << "gaussian " << gaussian << " count map " << (cnt != nullptr);
            // The device body on the host.
            std::vector<float> body(N * K * pv, nan);
            for (int64_t first = 0; first < total; first += B)
              voxaug_test::stitch_bodies_host(
                  body.data(), K, l.padded[0], static_cast<char*>(preds) + first * K * rv * esize,
                  pt, wp, l, first, std::min(B, total - first), true, true, cnt);
            ASSERT_EQ(0, std::memcmp(body.data(), want.data(), want.size() * sizeof(float)));
          }
        }
}

// The per-element bodies the CUDA backend launches, run on the host, equal the CPU twin.
TEST(WindowCpu, RowLoopsEqualDeviceBodies) {
  for (const Case& c : kCases) {
    const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
    const int64_t N = 2, K = 2, total = N * l.windows_per_image();
    const int64_t pv = l.padded[0] * l.padded[1] * l.padded[2];
    const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
    const auto w = weight_map(l.roi, 7);
    // Predictions in float16 exercise the product rounding.
    const auto pf = randn(static_cast<size_t>(total * K * rv), 13);
    std::vector<detail::half_t> preds(pf.size());
    for (size_t i = 0; i < pf.size(); ++i) preds[i] = detail::half_t{detail::float_to_half(pf[i])};
    const Vol av{N, K, l.padded[0], l.padded[1], l.padded[2]};
    std::vector<float> acc(N * K * pv, 0.f), body_acc(N * K * pv, 0.f);
    const int64_t B = 4;
    for (int64_t first = 0; first < total; first += B) {
      const int64_t b = std::min(B, total - first);
      const Vol pvol{b, K, l.roi[0], l.roi[1], l.roi[2]};
      window_stitch(view(acc.data(), DType::Float32, av),
                    view(preds.data() + first * K * rv, DType::Float16, pvol), w.data(), l, first);
      voxaug_test::stitch_bodies_host(body_acc.data(), K, l.padded[0],
                                      preds.data() + first * K * rv, DType::Float16, w.data(), l,
                                      first, b);
    }
    ASSERT_EQ(0, std::memcmp(acc.data(), body_acc.data(), acc.size() * sizeof(float)));

    for (const float* wp : {static_cast<const float*>(nullptr), w.data()}) {
      std::vector<float> count(pv), body_count(pv);
      window_count(wp, DType::Float32, Device::CPU, 0, l, count.data());
      const detail::CountBody<float> cb{l, wp, body_count.data()};
      detail::CountBody<float>::State s;
      for (int64_t i = 0; i < cb.items(); ++i) cb(s, 0, i);
      ASSERT_EQ(0, std::memcmp(count.data(), body_count.data(), pv * sizeof(float)));
    }

    std::vector<float> count(pv);
    window_count(w.data(), DType::Float32, Device::CPU, 0, l, count.data());
    const Vol ov{N, K, l.size[0], l.size[1], l.size[2]};
    std::vector<float> out(ov.numel()), body_out(ov.numel());
    window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                    view(out.data(), DType::Float32, ov), false);
    detail::FinalizeParams fp;
    fp.acc = acc.data();
    fp.depth = l.padded[0];
    fp.z1 = l.size[0];
    fp.count = count.data();
    fp.channels = K;
    fp.out = body_out.data();
    fp.out_t = DType::Float32;
    fp.l = l;
    const detail::FinalizeBody<float> fb{fp};
    detail::FinalizeBody<float>::State s;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < fb.items(); ++i) fb(s, n, i);
    ASSERT_EQ(0, std::memcmp(out.data(), body_out.data(), out.size() * sizeof(float)));

    // argmax over the quotients (first index on ties).
    const Vol lv{N, 1, l.size[0], l.size[1], l.size[2]};
    std::vector<int64_t> labels(lv.numel());
    window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                    view(labels.data(), DType::Int64, lv), true);
    const int64_t sv = l.size[0] * l.size[1] * l.size[2];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < sv; ++i) {
        int64_t best = 0;
        for (int64_t ch = 1; ch < K; ++ch)
          if (out[(n * K + ch) * sv + i] > out[(n * K + best) * sv + i]) best = ch;
        ASSERT_EQ(labels[n * sv + i], best);
      }
  }
}

// A ring accumulator of one window row's planes (or a few more), drained row by row, gives the
// whole accumulator's results bit for bit: quotients in float32 and float16, and labels; the
// CPU twin's row loops and the device bodies (run on the host) alike.
TEST(WindowCpu, RingAccumulatorEqualsWholeAccumulator) {
  const Case cases[] = {kCases[0],
                        kCases[1],
                        {{30, 5, 19}, {8, 8, 6}, {0.5, 0.25, 0.4}},  // h padded (cropped)
                        {{23, 11, 7}, {5, 4, 9}, {0.8, 0.5, 0.0}}};  // w padded, interval 1
  const float nan = std::nanf("");
  for (const Case& c : cases)
    for (bool gaussian : {false, true})
      for (DType pt : {DType::Float32, DType::Float16}) {
        const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
        ASSERT_GT(l.count[0], 1);
        const int64_t N = 2, K = 3, total = N * l.windows_per_image();
        const int64_t pv = l.padded[0] * l.padded[1] * l.padded[2];
        const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
        const auto w = weight_map(l.roi, 5);
        const float* wp = gaussian ? w.data() : nullptr;
        Preds pr(static_cast<size_t>(total * K * rv), 9);
        const void* preds = pr.data(pt);
        // The whole accumulator, then one final pass.
        const Vol av{N, K, l.padded[0], l.padded[1], l.padded[2]};
        std::vector<float> acc(av.numel(), nan), count(pv);
        window_stitch(view(acc.data(), DType::Float32, av),
                      view(const_cast<void*>(preds), pt, {total, K, l.roi[0], l.roi[1], l.roi[2]}),
                      wp, l, 0, StitchFuse{true, false, nullptr});
        window_count(wp, DType::Float32, Device::CPU, 0, l, count.data());
        const Vol ov{N, K, l.size[0], l.size[1], l.size[2]},
            lv{N, 1, l.size[0], l.size[1], l.size[2]};
        std::vector<float> want(ov.numel());
        std::vector<uint16_t> want_h(ov.numel());
        std::vector<int64_t> want_l(lv.numel());
        window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                        view(want.data(), DType::Float32, ov), false);
        window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                        view(want_h.data(), DType::Float16, ov), false);
        window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                        view(want_l.data(), DType::Int64, lv), true);
        for (int64_t depth : {l.roi[0], std::min(l.roi[0] + 3, l.padded[0])})
          for (int64_t B : {int64_t(1), int64_t(5), int64_t(1000)})
            for (bool bodies : {false, true})
              for (const float* cnt :
                   {static_cast<const float*>(count.data()), static_cast<const float*>(nullptr)}) {
                std::vector<float> ring(N * K * depth * l.padded[1] * l.padded[2], nan);
                std::vector<float> got(ov.numel(), nan);
                std::vector<uint16_t> got_h(ov.numel(), 0x7e00);
                std::vector<int64_t> got_l(lv.numel(), -1);
                const std::string what = "depth " + std::to_string(depth) + " B " +
                                         std::to_string(B) + " bodies " + std::to_string(bodies) +
                                         " gaussian " + std::to_string(gaussian) + " map " +
                                         std::to_string(cnt != nullptr);
                RingPass{l,     N,           K,           preds, pt,         B,
                         wp,    cnt,         ring.data(), depth, got.data(), DType::Float32,
                         false, Device::CPU, bodies}
                    .run();
                ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                    << what;
                RingPass{l,     N,           K,           preds, pt,           B,
                         wp,    cnt,         ring.data(), depth, got_h.data(), DType::Float16,
                         false, Device::CPU, bodies}
                    .run();
                ASSERT_EQ(got_h, want_h) << what;
                RingPass{l,    N,           K,           preds, pt,           B,
                         wp,   cnt,         ring.data(), depth, got_l.data(), DType::Int64,
                         true, Device::CPU, bodies}
                    .run();
                ASSERT_EQ(got_l, want_l) << what;
              }
      }
}

TEST(WindowCpu, RingArgumentsChecked) {
  const int64_t size[3] = {20, 8, 8}, roi[3] = {6, 4, 4};
  const double ov[3] = {0.5, 0.5, 0.5};
  const WindowLayout l = window_layout(size, roi, ov);
  std::vector<float> ring(1 * 1 * 6 * 8 * 8), pred(6 * 4 * 4), out(20 * 8 * 8);
  const Vol rv{1, 1, 6, 8, 8}, pv{1, 1, 6, 4, 4}, o{1, 1, 20, 8, 8};
  // A ring without first_store (its planes hold an earlier row's sums) or with last_divide.
  EXPECT_THROW(
      window_stitch(view(ring.data(), DType::Float32, rv), view(pred.data(), DType::Float32, pv),
                    nullptr, l, 0, StitchFuse{false, false, nullptr, true}),
      Error);
  EXPECT_THROW(
      window_stitch(view(ring.data(), DType::Float32, rv), view(pred.data(), DType::Float32, pv),
                    nullptr, l, 0, StitchFuse{true, true, nullptr, true}),
      Error);
  // Fewer planes than the roi's d; a short accumulator without ring=true.
  std::vector<float> small(5 * 8 * 8);
  EXPECT_THROW(window_stitch(view(small.data(), DType::Float32, {1, 1, 5, 8, 8}),
                             view(pred.data(), DType::Float32, pv), nullptr, l, 0,
                             StitchFuse{true, false, nullptr, true}),
               Error);
  EXPECT_THROW(
      window_stitch(view(ring.data(), DType::Float32, rv), view(pred.data(), DType::Float32, pv),
                    nullptr, l, 0, StitchFuse{true, false, nullptr, false}),
      Error);
  window_stitch(view(ring.data(), DType::Float32, rv), view(pred.data(), DType::Float32, pv),
                nullptr, l, 0, StitchFuse{true, false, nullptr, true});
  // Plane ranges: inverted, past the padded d, more planes than the ring holds.
  for (const auto& r : {std::pair<int64_t, int64_t>{4, 2}, {18, 21}, {0, 7}, {-1, 3}})
    EXPECT_THROW(window_finalize(view(ring.data(), DType::Float32, rv), nullptr, nullptr, l,
                                 view(out.data(), DType::Float32, o), false, r.first, r.second),
                 Error)
        << r.first << ", " << r.second;
  window_finalize(view(ring.data(), DType::Float32, rv), nullptr, nullptr, l,
                  view(out.data(), DType::Float32, o), false, 0, 6);
}

TEST(WindowCpu, BadArgumentsThrow) {
  const int64_t size[3] = {8, 8, 8}, roi[3] = {4, 4, 4};
  const double ov[3] = {0.5, 0.5, 0.5};
  const WindowLayout l = window_layout(size, roi, ov);
  std::vector<float> img(8 * 8 * 8), buf(2 * 4 * 4 * 4);
  const Vol iv{1, 1, 8, 8, 8};
  // Past the last window.
  EXPECT_THROW(
      window_gather(view(img.data(), DType::Float32, iv), l, l.windows_per_image() - 1,
                    WindowPad::Constant, 0.0, view(buf.data(), DType::Float32, {2, 1, 4, 4, 4})),
      Error);
  // Wrong roi on the output.
  EXPECT_THROW(window_gather(view(img.data(), DType::Float32, iv), l, 0, WindowPad::Constant, 0.0,
                             view(buf.data(), DType::Float32, {1, 1, 4, 4, 8})),
               Error);
  // Integer accumulator.
  std::vector<int32_t> iacc(8 * 8 * 8);
  EXPECT_THROW(window_stitch(view(iacc.data(), DType::Int32, iv),
                             view(buf.data(), DType::Float32, {1, 1, 4, 4, 4}), nullptr, l, 0),
               Error);
  // Reflect padding wider than the image (torch refuses it too).
  const int64_t small[3] = {2, 8, 8}, big_roi[3] = {8, 4, 4};
  const WindowLayout ls = window_layout(small, big_roi, ov);
  std::vector<float> sm(2 * 8 * 8), sb(8 * 4 * 4);
  EXPECT_THROW(
      window_gather(view(sm.data(), DType::Float32, {1, 1, 2, 8, 8}), ls, 0, WindowPad::Reflect,
                    0.0, view(sb.data(), DType::Float32, {1, 1, 8, 4, 4})),
      Error);
}
