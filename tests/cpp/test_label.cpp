// Connected components (include/voxaug/label.h): the CPU backend against a naive breadth-first
// flood fill (labels = 1 + the first voxel's index), every connectivity, awkward shapes, a
// strided mask, many threads' slabs; the CUDA backend against the CPU twin (bit-identical), which
// skips without a device. Bad arguments throw. largest_components against naive counting. The
// distance transform against brute force, its CUDA passes run on the host, and its CUDA twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "../../kernels/label/label_kernels.h"
#include "test_support.h"
#include "voxaug/error.h"
#include "voxaug/label.h"

using namespace voxaug;
using voxaug_test::Vol;

namespace {

// Breadth-first flood fill of one D x H x W volume: every component labelled 1 + its smallest
// C-order index (the first voxel met by the ascending scan starts the fill).
std::vector<int32_t> flood(const std::vector<uint8_t>& m, int64_t D, int64_t H, int64_t W,
                           int conn) {
  std::vector<int32_t> out(m.size(), 0);
  for (int64_t s = 0; s < D * H * W; ++s) {
    if (!m[s] || out[s]) continue;
    std::deque<int64_t> q{s};
    out[s] = static_cast<int32_t>(s + 1);
    while (!q.empty()) {
      const int64_t v = q.front();
      q.pop_front();
      const int64_t d = v / (H * W), h = (v / W) % H, w = v % W;
      for (int dd = -1; dd <= 1; ++dd)
        for (int dh = -1; dh <= 1; ++dh)
          for (int dw = -1; dw <= 1; ++dw) {
            const int hops = (dd != 0) + (dh != 0) + (dw != 0);
            if (hops == 0 || hops > conn) continue;
            const int64_t nd = d + dd, nh = h + dh, nw = w + dw;
            if (nd < 0 || nd >= D || nh < 0 || nh >= H || nw < 0 || nw >= W) continue;
            const int64_t u = (nd * H + nh) * W + nw;
            if (m[u] && !out[u]) {
              out[u] = static_cast<int32_t>(s + 1);
              q.push_back(u);
            }
          }
    }
  }
  return out;
}

std::vector<uint8_t> random_mask(const Vol& v, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution b(density);
  std::vector<uint8_t> m(static_cast<size_t>(v.numel()));
  for (auto& x : m) x = b(rng) ? 1 : 0;
  return m;
}

std::vector<int32_t> reference(const std::vector<uint8_t>& m, const Vol& v, int conn) {
  std::vector<int32_t> out;
  const int64_t V = v.d * v.h * v.w;
  for (int64_t k = 0; k < v.n * v.c; ++k) {
    std::vector<uint8_t> one(m.begin() + k * V, m.begin() + (k + 1) * V);
    auto f = flood(one, v.d, v.h, v.w, conn);
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

}  // namespace

TEST(Label, ConnectedComponentsMatchFloodFill) {
  const Vol shapes[] = {{2, 3, 9, 11, 7}, {1, 1, 70, 9, 8}, {3, 1, 1, 1, 13}, {1, 2, 40, 1, 33}};
  for (const Vol& v : shapes)
    for (int conn = 1; conn <= 3; ++conn)
      for (double density : {0.2, 0.45, 0.8}) {
        auto m = random_mask(v, density, static_cast<uint32_t>(conn * 1000 + v.d));
        std::vector<int32_t> got(m.size(), -7);
        connected_components(voxaug_test::view(m.data(), DType::UInt8, v),
                             voxaug_test::view(got.data(), DType::Int32, v), conn);
        ASSERT_EQ(got, reference(m, v, conn))
            << "shape " << v.n << "x" << v.c << "x" << v.d << "x" << v.h << "x" << v.w << " conn "
            << conn << " density " << density;
      }
}

TEST(Label, StridedFloatMaskAndEdgeCases) {
  // A float mask read through a transposed (W, H, D) view; NaN counts as foreground.
  const Vol v{1, 1, 12, 10, 9};
  auto m8 = random_mask(v, 0.5, 3);
  std::vector<float> t(m8.size());
  for (int64_t d = 0; d < v.d; ++d)
    for (int64_t h = 0; h < v.h; ++h)
      for (int64_t w = 0; w < v.w; ++w) {
        const uint8_t x = m8[(d * v.h + h) * v.w + w];
        t[(w * v.h + h) * v.d + d] = x ? ((d + h + w) % 5 == 0 ? NAN : -2.5f) : 0.0f;
      }
  VolumeView mv = voxaug_test::view(t.data(), DType::Float32, v);
  mv.strides[2] = 1, mv.strides[3] = v.d, mv.strides[4] = v.d * v.h;
  std::vector<int32_t> got(m8.size());
  connected_components(mv, voxaug_test::view(got.data(), DType::Int32, v), 3);
  EXPECT_EQ(got, reference(m8, v, 3));
  // All foreground: one component labelled 1; all background: zeros.
  std::vector<uint8_t> ones(m8.size(), 1), zeros(m8.size(), 0);
  connected_components(voxaug_test::view(ones.data(), DType::UInt8, v),
                       voxaug_test::view(got.data(), DType::Int32, v), 1);
  EXPECT_EQ(got, std::vector<int32_t>(got.size(), 1));
  connected_components(voxaug_test::view(zeros.data(), DType::UInt8, v),
                       voxaug_test::view(got.data(), DType::Int32, v), 2);
  EXPECT_EQ(got, std::vector<int32_t>(got.size(), 0));
}

TEST(Label, BadArguments) {
  const Vol v{1, 1, 4, 4, 4};
  std::vector<uint8_t> m(64, 1);
  std::vector<int32_t> l(64);
  std::vector<int64_t> l64(64);
  const auto mv = voxaug_test::view(m.data(), DType::UInt8, v);
  EXPECT_THROW(connected_components(mv, voxaug_test::view(l.data(), DType::Int32, v), 0), Error);
  EXPECT_THROW(connected_components(mv, voxaug_test::view(l.data(), DType::Int32, v), 4), Error);
  EXPECT_THROW(connected_components(mv, voxaug_test::view(l64.data(), DType::Int64, v), 3), Error);
  EXPECT_THROW(
      connected_components(mv, voxaug_test::view(l.data(), DType::Int32, {1, 1, 4, 4, 3}), 3),
      Error);
  VolumeView strided = voxaug_test::view(l.data(), DType::Int32, v);
  strided.strides[4] = 2;
  EXPECT_THROW(connected_components(mv, strided, 3), Error);
}

// The k largest components by naive counting: sizes in a map, sorted by (size descending, label
// ascending), then a membership test per voxel.
std::vector<uint8_t> naive_largest(const std::vector<int32_t>& labels, int64_t V, int64_t k) {
  std::vector<uint8_t> out(labels.size(), 0);
  for (size_t base = 0; base < labels.size(); base += static_cast<size_t>(V)) {
    std::map<int32_t, int64_t> sizes;
    for (size_t i = base; i < base + static_cast<size_t>(V); ++i)
      if (labels[i] != 0) ++sizes[labels[i]];
    std::vector<std::pair<int64_t, int32_t>> order;
    for (const auto& [l, n] : sizes) order.emplace_back(-n, l);
    std::sort(order.begin(), order.end());
    std::set<int32_t> kept;
    for (size_t j = 0; j < order.size() && static_cast<int64_t>(j) < k; ++j)
      kept.insert(order[j].second);
    for (size_t i = base; i < base + static_cast<size_t>(V); ++i)
      out[i] = kept.count(labels[i]) ? 1 : 0;
  }
  return out;
}

TEST(Label, LargestComponentsMatchNaiveCounting) {
  const Vol shapes[] = {{2, 3, 9, 11, 7}, {1, 1, 70, 33, 30}, {3, 1, 1, 1, 13}};
  for (const Vol& v : shapes)
    for (double density : {0.15, 0.3, 0.6})
      for (int64_t k : {1, 2, 4, 5, 40}) {
        auto m = random_mask(v, density, static_cast<uint32_t>(k * 31 + v.d));
        std::vector<int32_t> lab(m.size());
        connected_components(voxaug_test::view(m.data(), DType::UInt8, v),
                             voxaug_test::view(lab.data(), DType::Int32, v), 1);
        std::vector<uint8_t> keep(m.size(), 7);
        largest_components(voxaug_test::view(lab.data(), DType::Int32, v), k,
                           voxaug_test::view(keep.data(), DType::UInt8, v));
        ASSERT_EQ(keep, naive_largest(lab, v.d * v.h * v.w, k))
            << "shape " << v.n << "x" << v.c << "x" << v.d << "x" << v.h << "x" << v.w << " k " << k
            << " density " << density;
      }
}

TEST(Label, ComponentSizesMatchNaiveCounting) {
  const Vol v{2, 2, 17, 13, 11};
  for (double density : {0.2, 0.5}) {
    auto m = random_mask(v, density, static_cast<uint32_t>(density * 100));
    std::vector<int32_t> lab(m.size()), sizes(m.size(), -1);
    connected_components(voxaug_test::view(m.data(), DType::UInt8, v),
                         voxaug_test::view(lab.data(), DType::Int32, v), 2);
    component_sizes(voxaug_test::view(lab.data(), DType::Int32, v),
                    voxaug_test::view(sizes.data(), DType::Int32, v));
    const int64_t V = v.d * v.h * v.w;
    for (int64_t k = 0; k < v.n * v.c; ++k) {
      std::map<int32_t, int32_t> count;
      for (int64_t i = k * V; i < (k + 1) * V; ++i) ++count[lab[static_cast<size_t>(i)]];
      for (int64_t i = k * V; i < (k + 1) * V; ++i) {
        const int32_t l = lab[static_cast<size_t>(i)];
        ASSERT_EQ(sizes[static_cast<size_t>(i)], l == 0 ? 0 : count[l]) << "voxel " << i;
      }
    }
  }
  std::vector<int32_t> bad = {1, 0, 0, 2}, out(4);  // voxel 1 does not carry label 2
  EXPECT_THROW(component_sizes(voxaug_test::view(bad.data(), DType::Int32, {1, 1, 1, 1, 4}),
                               voxaug_test::view(out.data(), DType::Int32, {1, 1, 1, 1, 4})),
               Error);
}

TEST(Label, LargestComponentsBadArguments) {
  const Vol v{1, 1, 2, 2, 2};
  std::vector<int32_t> lab = {1, 1, 0, 0, 5, 5, 0, 0};
  std::vector<uint8_t> keep(8);
  std::vector<int32_t> keep32(8);
  const auto lv = voxaug_test::view(lab.data(), DType::Int32, v);
  const auto kv = voxaug_test::view(keep.data(), DType::UInt8, v);
  largest_components(lv, 1, kv);
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 0, 0}));  // a tie: the first label
  EXPECT_THROW(largest_components(lv, 0, kv), Error);
  EXPECT_THROW(largest_components(lv, 1, voxaug_test::view(keep32.data(), DType::Int32, v)), Error);
  EXPECT_THROW(
      largest_components(voxaug_test::view(lab.data(), DType::Int32, {1, 1, 2, 2, 1}), 1, kv),
      Error);
  std::vector<int32_t> bad = {1, 1, 0, 0, 4, 4, 0, 0};  // voxel 3 does not carry label 4
  EXPECT_THROW(largest_components(voxaug_test::view(bad.data(), DType::Int32, v), 1, kv), Error);
  bad = {1, 1, 0, 0, 9, 0, 0, 0};  // beyond the volume
  EXPECT_THROW(largest_components(voxaug_test::view(bad.data(), DType::Int32, v), 1, kv), Error);
}

// Distance transform vs brute force: for every foreground voxel the least squared distance to
// any background voxel of its volume, in float64 with scipy's per-axis terms ((s * delta)^2,
// summed d, h, w), then the square root. Unit and integer spacings give exact integers, so the
// results must be equal; other spacings within a few float64 ulps. A volume without background:
// scipy's virtual voxel (-1, 0, 0). Sparse and dense masks, a strided float mask, float32 output
// (the float64 result rounded).
std::vector<double> naive_edt(const std::vector<uint8_t>& m, const Vol& v, const double s[3]) {
  const int64_t V = v.d * v.h * v.w;
  std::vector<double> out(m.size());
  for (int64_t vol = 0; vol < v.n * v.c; ++vol) {
    const uint8_t* mv = m.data() + vol * V;
    std::vector<int64_t> bg;
    for (int64_t i = 0; i < V; ++i)
      if (!mv[i]) bg.push_back(i);
    for (int64_t i = 0; i < V; ++i) {
      const int64_t d = i / (v.h * v.w), h = (i / v.w) % v.h, x = i % v.w;
      if (!mv[i]) {
        out[vol * V + i] = 0.0;
        continue;
      }
      auto sq = [&](double dd, double dh, double dw) {
        return (s[0] * dd) * (s[0] * dd) + (s[1] * dh) * (s[1] * dh) + (s[2] * dw) * (s[2] * dw);
      };
      double best = bg.empty() ? sq(double(d + 1), double(h), double(x)) : INFINITY;
      for (int64_t b : bg) {
        const int64_t bd = b / (v.h * v.w), bh = (b / v.w) % v.h, bw = b % v.w;
        best = std::min(best, sq(double(d - bd), double(h - bh), double(x - bw)));
      }
      out[vol * V + i] = std::sqrt(best);
    }
  }
  return out;
}

TEST(Label, DistanceTransformMatchesBruteForce) {
  const Vol shapes[] = {{2, 2, 9, 11, 7}, {1, 1, 17, 5, 23}, {1, 1, 1, 1, 12}, {1, 3, 6, 1, 6}};
  const double spacings[][3] = {{1, 1, 1}, {2, 1, 3}, {0.7, 1.3, 2.45}, {1.5, 0.25, 1}};
  for (const Vol& v : shapes)
    for (double density : {0.05, 0.6, 0.97})
      for (const auto& s : spacings) {
        auto m = random_mask(v, density, static_cast<uint32_t>(v.d * 31 + v.w));
        if (v.c >= 2)  // one volume without background, one without foreground
          std::fill(m.begin(), m.begin() + v.d * v.h * v.w, uint8_t(1));
        if (v.c >= 3)
          std::fill(m.begin() + 2 * v.d * v.h * v.w, m.begin() + 3 * v.d * v.h * v.w, uint8_t(0));
        const auto want = naive_edt(m, v, s);
        std::vector<double> got(m.size(), -1.0);
        std::vector<float> got32(m.size(), -1.0f);
        distance_transform_edt(voxaug_test::view(m.data(), DType::UInt8, v), s,
                               voxaug_test::view(got.data(), DType::Float64, v), nullptr, 0);
        distance_transform_edt(voxaug_test::view(m.data(), DType::UInt8, v), s,
                               voxaug_test::view(got32.data(), DType::Float32, v), nullptr, 0);
        const bool integral =
            s[0] == std::floor(s[0]) && s[1] == std::floor(s[1]) && s[2] == std::floor(s[2]);
        for (size_t i = 0; i < m.size(); ++i) {
          if (integral)
            ASSERT_EQ(got[i], want[i]) << i << " spacing " << s[0] << " " << s[1] << " " << s[2];
          else
            ASSERT_NEAR(got[i], want[i], 4e-15 * want[i]) << i;
          ASSERT_EQ(got32[i], static_cast<float>(got[i])) << i;
        }
      }
  // A strided float mask (every other w of a wider buffer; NaN counts as foreground).
  const Vol v{1, 1, 8, 9, 10}, wide{1, 1, 8, 9, 20};
  auto m = random_mask(v, 0.7, 5);
  std::vector<float> fm(wide.n * wide.c * wide.d * wide.h * wide.w, -3.0f);
  for (size_t i = 0; i < m.size(); ++i) fm[2 * i] = m[i] ? (i % 7 == 0 ? NAN : 0.5f) : 0.0f;
  VolumeView sv = voxaug_test::view(fm.data(), DType::Float32, v);
  const int64_t st[5] = {8 * 9 * 20, 8 * 9 * 20, 9 * 20, 20, 2};
  for (int a = 0; a < 5; ++a) sv.strides[a] = st[a];
  const double unit[3] = {1, 1, 1};
  std::vector<double> got(m.size());
  distance_transform_edt(sv, unit, voxaug_test::view(got.data(), DType::Float64, v), nullptr, 0);
  EXPECT_EQ(got, naive_edt(m, v, unit));
}

// The CUDA backend's passes run on the host: rows from the mask, then every thread of the h and d
// passes (edt_pass_thread: lines t, t + threads, ..., scratch interleaved after the squared
// distances in one workspace of EdtLayout's size), then edt_distance; equal to the CPU backend.
TEST(Label, DistanceTransformDevicePassesOnTheHost) {
  const Vol v{2, 3, 13, 9, 21};
  auto m = random_mask(v, 0.8, 12);
  std::fill(m.begin(), m.begin() + 13 * 9 * 21, uint8_t(1));  // a volume without background
  const double s[3] = {0.7, 1.3, 2.45}, w2[3] = {s[0] * s[0], s[1] * s[1], s[2] * s[2]};
  std::vector<double> want(m.size());
  distance_transform_edt(voxaug_test::view(m.data(), DType::UInt8, v), s,
                         voxaug_test::view(want.data(), DType::Float64, v), nullptr, 0);
  detail::LabelParams p{};
  p.mask = m.data();
  p.dtype = DType::UInt8;
  const int64_t st[5] = {3 * 13 * 9 * 21, 13 * 9 * 21, 9 * 21, 21, 1};
  for (int a = 0; a < 5; ++a) p.mask_stride[a] = st[a];
  p.channels = 3;
  p.size[0] = 13;
  p.size[1] = 9;
  p.size[2] = 21;
  p.volume = 13 * 9 * 21;
  const int64_t volumes = 6;
  for (int64_t threads : {int64_t(0), int64_t(7)}) {  // 0: EdtLayout's own count
    detail::EdtLayout e = detail::edt_layout(volumes, p.size);
    if (threads > 0) e.threads = threads;  // fewer threads than lines: each walks several
    std::vector<double> ws(static_cast<size_t>((e.bytes() + 7) / 8), -1.0);
    double* sq = ws.data();
    for (int64_t r = 0; r < volumes * 13 * 9; ++r)
      detail::edt_row_from_mask(p, r / (13 * 9), (r / 9) % 13, r % 9, w2[2],
                                sq + (r / (13 * 9)) * p.volume + (r % (13 * 9)) * 21);
    for (int axis : {1, 0})
      for (int64_t t = 0; t < e.threads; ++t)
        detail::edt_pass_thread(p.size, volumes, axis, w2[axis], e, sq, t);
    for (int64_t i = 0; i < volumes * p.volume; ++i) {
      const int64_t x = i % 21, h = (i / 21) % 9, d = (i / (21 * 9)) % 13;
      ASSERT_EQ(detail::edt_distance(sq[i], w2, d, h, x), want[i]) << i << " threads " << e.threads;
    }
  }
}

TEST(Label, DistanceTransformBadArguments) {
  const Vol v{1, 1, 4, 4, 4};
  std::vector<uint8_t> m(64, 1);
  std::vector<double> out(64);
  std::vector<int32_t> iout(64);
  const double ok[3] = {1, 1, 1}, zero[3] = {1, 0, 1}, nan[3] = {1, 1, NAN};
  const VolumeView mv = voxaug_test::view(m.data(), DType::UInt8, v);
  EXPECT_THROW(distance_transform_edt(mv, zero, voxaug_test::view(out.data(), DType::Float64, v),
                                      nullptr, 0),
               Error);
  EXPECT_THROW(
      distance_transform_edt(mv, nan, voxaug_test::view(out.data(), DType::Float64, v), nullptr, 0),
      Error);
  EXPECT_THROW(
      distance_transform_edt(mv, ok, voxaug_test::view(iout.data(), DType::Int32, v), nullptr, 0),
      Error);
  EXPECT_THROW(
      distance_transform_edt(mv, ok, voxaug_test::view(out.data(), DType::Float64, {1, 1, 4, 4, 2}),
                             nullptr, 0),
      Error);
}

#if VOXAUG_WITH_CUDA
using voxaug_test::DeviceBuffer;
using voxaug_test::have_device;

TEST(LabelCuda, TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol shapes[] = {{2, 3, 9, 11, 7}, {1, 1, 64, 40, 36}, {4, 2, 33, 17, 29}, {1, 1, 1, 1, 1}};
  for (const Vol& v : shapes)
    for (int conn = 1; conn <= 3; ++conn)
      for (double density : {0.3, 0.5, 0.9}) {
        auto m = random_mask(v, density, static_cast<uint32_t>(conn + 17 * v.d));
        std::vector<int32_t> cpu(m.size());
        connected_components(voxaug_test::view(m.data(), DType::UInt8, v),
                             voxaug_test::view(cpu.data(), DType::Int32, v), conn);
        DeviceBuffer dm(m), dl(m.size() * sizeof(int32_t));
        connected_components(voxaug_test::view(dm.p, DType::UInt8, v, Device::CUDA),
                             voxaug_test::view(dl.p, DType::Int32, v, Device::CUDA), conn);
        CUDA_OK(cudaDeviceSynchronize());
        ASSERT_EQ(dl.to_host<int32_t>(m.size()), cpu) << "conn " << conn << " density " << density;
      }
}

TEST(LabelCuda, DistanceTransformTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol shapes[] = {{2, 3, 9, 11, 7}, {1, 1, 64, 40, 36}, {1, 2, 33, 17, 29}, {1, 1, 1, 1, 1}};
  const double spacing[3] = {0.7, 1.3, 2.45};
  for (const Vol& v : shapes)
    for (double density : {0.05, 0.5, 0.97}) {
      auto m = random_mask(v, density, static_cast<uint32_t>(3 + v.d));
      std::fill(m.begin(), m.begin() + v.d * v.h * v.w, uint8_t(1));  // a volume without background
      for (DType t : {DType::Float64, DType::Float32}) {
        const size_t es = t == DType::Float64 ? 8 : 4;
        std::vector<uint8_t> cpu(m.size() * es);
        distance_transform_edt(voxaug_test::view(m.data(), DType::UInt8, v), spacing,
                               voxaug_test::view(cpu.data(), t, v), nullptr, 0);
        DeviceBuffer dm(m), dout(m.size() * es);
        const VolumeView mv = voxaug_test::view(dm.p, DType::UInt8, v, Device::CUDA);
        const int64_t wb = distance_transform_workspace_bytes(mv, t);
        DeviceBuffer ws(static_cast<size_t>(wb));
        distance_transform_edt(mv, spacing, voxaug_test::view(dout.p, t, v, Device::CUDA), ws.p,
                               wb);
        CUDA_OK(cudaDeviceSynchronize());
        ASSERT_EQ(dout.to_host<uint8_t>(cpu.size()), cpu) << "density " << density;
      }
      // Too small a workspace is refused.
      DeviceBuffer dm(m), dout(m.size() * 8), ws(8);
      EXPECT_THROW(distance_transform_edt(
                       voxaug_test::view(dm.p, DType::UInt8, v, Device::CUDA), spacing,
                       voxaug_test::view(dout.p, DType::Float64, v, Device::CUDA), ws.p, 8),
                   Error);
    }
}
#endif
