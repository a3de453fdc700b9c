// crop: foreground bounding box vs a naive scan (CPU) and CUDA vs the CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "test_support.h"
#include "voxaug/crop.h"
#include "voxaug/error.h"

using namespace voxaug;
using namespace voxaug_test;

namespace {

// Naive: every voxel, every selected channel, value > threshold.
std::vector<int64_t> naive_bbox(const std::vector<float>& v, const Vol& s, double thr,
                                const std::vector<int64_t>& ch) {
  std::vector<int64_t> out;
  for (int64_t n = 0; n < s.n; ++n) {
    int64_t lo[3] = {s.d, s.h, s.w}, hi[3] = {-1, -1, -1};
    for (int64_t d = 0; d < s.d; ++d)
      for (int64_t h = 0; h < s.h; ++h)
        for (int64_t w = 0; w < s.w; ++w)
          for (int64_t c : ch)
            if (v[(((n * s.c + c) * s.d + d) * s.h + h) * s.w + w] > thr) {
              const int64_t i[3] = {d, h, w};
              for (int a = 0; a < 3; ++a)
                lo[a] = std::min(lo[a], i[a]), hi[a] = std::max(hi[a], i[a]);
            }
    for (int a = 0; a < 3; ++a) out.push_back(hi[0] < 0 ? 0 : lo[a]);
    for (int a = 0; a < 3; ++a) out.push_back(hi[0] < 0 ? 0 : hi[a] + 1);
  }
  return out;
}

// Sparse blobs (and one empty sample) in a random volume.
std::vector<float> sparse(const Vol& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> v(s.numel());
  for (auto& x : v) x = u(rng) < 0.002f ? 1.0f + u(rng) : -u(rng);
  const int64_t sample = s.c * s.d * s.h * s.w;
  for (int64_t n = 0; n + 1 < s.n; ++n) v[n * sample + sample / 2] = 2.0f;  // at least one voxel
  std::fill(v.begin() + (s.n - 1) * sample, v.end(), -1.0f);  // last sample: no foreground
  return v;
}

}  // namespace

TEST(Crop, ForegroundBBoxMatchesNaiveScan) {
  for (const Vol& s : {Vol{3, 2, 17, 23, 19}, Vol{2, 1, 1, 40, 3}, Vol{4, 3, 9, 1, 31}}) {
    const auto v = sparse(s, 7);
    std::vector<int64_t> all(s.c);
    for (int64_t c = 0; c < s.c; ++c) all[c] = c;
    for (double thr : {0.0, 1.5}) {
      std::vector<int64_t> box(6 * s.n, -7);
      foreground_bbox(view(const_cast<float*>(v.data()), DType::Float32, s), thr, nullptr, 0,
                      box.data());
      EXPECT_EQ(box, naive_bbox(v, s, thr, all));
      const std::vector<int64_t> last{s.c - 1};
      foreground_bbox(view(const_cast<float*>(v.data()), DType::Float32, s), thr, last.data(), 1,
                      box.data());
      EXPECT_EQ(box, naive_bbox(v, s, thr, last));
    }
    std::vector<int64_t> box(6 * s.n);
    foreground_bbox(view(const_cast<float*>(v.data()), DType::Float32, s), 0.0, nullptr, 0,
                    box.data());
    int64_t nonempty = 0;
    for (int64_t n = 0; n < s.n; ++n) nonempty += box[6 * n + 3] > 0;
    EXPECT_EQ(nonempty, s.n - 1);  // the last sample is empty: zeros
  }
}

TEST(Crop, BadInputs) {
  const Vol s{1, 2, 4, 4, 4};
  std::vector<float> v(s.numel());
  std::vector<int64_t> box(6);
  const std::vector<int64_t> bad{2};
  EXPECT_THROW(foreground_bbox(view(v.data(), DType::Float32, s), 0.0, bad.data(), 1, box.data()),
               Error);
  EXPECT_THROW(foreground_bbox(view(v.data(), DType::Float32, s), 0.0, nullptr, 0, nullptr), Error);
}

#if VOXAUG_WITH_CUDA
TEST(CropCuda, ForegroundBBoxTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Vol& s : {Vol{3, 2, 17, 23, 19}, Vol{5, 1, 64, 64, 64}}) {
    const auto v = sparse(s, 11);
    std::vector<int64_t> cpu(6 * s.n);
    foreground_bbox(view(const_cast<float*>(v.data()), DType::Float32, s), 0.0, nullptr, 0,
                    cpu.data());
    DeviceBuffer dv(v), dbox(6 * s.n * sizeof(int64_t));
    foreground_bbox(view(dv.p, DType::Float32, s, Device::CUDA), 0.0, nullptr, 0,
                    dbox.as<int64_t>());
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(cpu, dbox.to_host<int64_t>(cpu.size()));
  }
}
#endif
