// crop: foreground bounding box vs a naive scan (CPU) and CUDA vs the CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "test_support.h"
#include "voxaug/crop.h"
#include "voxaug/detail/philox.h"
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

namespace {
// Naive centres: explicit foreground / background index lists (MONAI's map_binary_to_indices),
// the same Philox draws, list[rank], MONAI's correct_crop_centers written out.
std::vector<int64_t> naive_centers(const std::vector<uint8_t>& lab, const std::vector<float>* img,
                                   const Vol& s, double thr, double pos_ratio, int k_count,
                                   const int64_t crop[3], uint64_t seed) {
  std::vector<int64_t> out;
  const int64_t vox = s.d * s.h * s.w;
  for (int64_t n = 0; n < s.n; ++n) {
    std::vector<int64_t> fg, bg;
    for (int64_t v = 0; v < vox; ++v) {
      if (img && !((*img)[n * vox + v] > thr)) continue;
      (lab[n * vox + v] > 0 ? fg : bg).push_back(v);
    }
    for (int k = 0; k < k_count; ++k) {
      const auto r = voxaug::detail::philox_block(seed, k, static_cast<uint32_t>(n),
                                                  voxaug::detail::PhiloxStream::Sample);
      const double u_set = voxaug::detail::uniform01_f64(r.x, r.y);
      const double u_rank = voxaug::detail::uniform01_f64(r.z, r.w);
      int64_t idx[3] = {s.d / 2, s.h / 2, s.w / 2};
      if (!fg.empty() || !bg.empty()) {
        const bool use_fg = bg.empty() || (!fg.empty() && u_set < pos_ratio);
        const auto& list = use_fg ? fg : bg;
        const int64_t rank =
            std::min<int64_t>(static_cast<int64_t>(u_rank * list.size()), list.size() - 1);
        const int64_t v = list[rank];
        idx[0] = v / (s.h * s.w), idx[1] = (v / s.w) % s.h, idx[2] = v % s.w;
      }
      const int64_t size[3] = {s.d, s.h, s.w};
      for (int a = 0; a < 3; ++a) {
        const int64_t lo = crop[a] / 2;
        int64_t hi = static_cast<int64_t>(size[a] + 1 - crop[a] / 2.0);
        if (lo == hi) ++hi;
        out.push_back(std::min(std::max(idx[a], lo), hi - 1));
      }
    }
  }
  return out;
}
}  // namespace

TEST(Crop, PosNegCentersMatchNaiveIndexLists) {
  const Vol s{3, 1, 19, 21, 23};  // > one 4096-voxel chunk per sample
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<uint8_t> lab(s.numel());
  std::vector<float> img(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    lab[i] = u(rng) < 0.01f;
    img[i] = u(rng);
  }
  std::fill(lab.begin() + 2 * (s.numel() / 3), lab.end(), 0);  // sample 2: no foreground
  const int64_t crop[3] = {5, 8, 23};
  for (bool with_image : {false, true}) {
    std::vector<int64_t> got(3 * s.n * 9);
    const VolumeView iv = view(img.data(), DType::Float32, s);
    pos_neg_crop_centers(view(lab.data(), DType::UInt8, s), with_image ? &iv : nullptr, 0.3, 0.4, 9,
                         crop, 77, 0, got.data());
    EXPECT_EQ(got, naive_centers(lab, with_image ? &img : nullptr, s, 0.3, 0.4, 9, crop, 77));
  }
}

// A Fortran-ordered label (nibabel's layout) is scanned in its memory order: the naive lists
// follow that order (w slowest, d fastest).
TEST(Crop, PosNegCentersFollowTheLabelsMemoryOrder) {
  const int64_t D = 17, H = 19, W = 21, K = 7;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<uint8_t> lab(D * H * W);  // offset d + D * (h + H * w)
  for (auto& v : lab) v = u(rng) < 0.02f;
  VolumeView view_f;
  view_f.data = lab.data();
  view_f.dtype = DType::UInt8;
  const int64_t shape[5] = {1, 1, D, H, W}, strides[5] = {D * H * W, D * H * W, 1, D, D * H};
  for (int a = 0; a < 5; ++a) view_f.shape[a] = shape[a], view_f.strides[a] = strides[a];
  const int64_t crop[3] = {4, 6, 3};
  std::vector<int64_t> got(3 * K);
  pos_neg_crop_centers(view_f, nullptr, 0.0, 0.5, K, crop, 21, 0, got.data());
  std::vector<int64_t> fg, bg;  // memory offsets in memory order
  for (int64_t off = 0; off < D * H * W; ++off) (lab[off] ? fg : bg).push_back(off);
  for (int k = 0; k < K; ++k) {
    const auto r = voxaug::detail::philox_block(21, k, 0, voxaug::detail::PhiloxStream::Sample);
    const double u_set = voxaug::detail::uniform01_f64(r.x, r.y);
    const double u_rank = voxaug::detail::uniform01_f64(r.z, r.w);
    const auto& list = u_set < 0.5 ? fg : bg;
    const int64_t off =
        list[std::min<int64_t>(static_cast<int64_t>(u_rank * list.size()), list.size() - 1)];
    const int64_t idx[3] = {off % D, (off / D) % H, off / (D * H)};
    const int64_t size[3] = {D, H, W};
    for (int a = 0; a < 3; ++a) {
      const int64_t lo = crop[a] / 2;
      int64_t hi = static_cast<int64_t>(size[a] + 1 - crop[a] / 2.0);
      if (lo == hi) ++hi;
      EXPECT_EQ(got[3 * k + a], std::min(std::max(idx[a], lo), hi - 1)) << k << " " << a;
    }
  }
}

#if VOXAUG_WITH_CUDA
TEST(CropCuda, PosNegCentersTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol s{4, 1, 40, 33, 31};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<uint8_t> lab(s.numel());
  for (auto& v : lab) v = u(rng) < 0.02f;
  const int64_t crop[3] = {16, 16, 16};
  std::vector<int64_t> cpu(3 * s.n * 6);
  pos_neg_crop_centers(view(lab.data(), DType::UInt8, s), nullptr, 0.0, 0.5, 6, crop, 9, 0,
                       cpu.data());
  DeviceBuffer dl(lab), dc(cpu.size() * sizeof(int64_t));
  pos_neg_crop_centers(view(dl.p, DType::UInt8, s, Device::CUDA), nullptr, 0.0, 0.5, 6, crop, 9, 0,
                       dc.as<int64_t>());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(cpu, dc.to_host<int64_t>(cpu.size()));
}
#endif
