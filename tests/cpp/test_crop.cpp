// crop: foreground bounding box vs a naive scan (CPU) and CUDA vs the CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
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
// Naive centres: explicit foreground / background index lists (MONAI's map_binary_to_indices:
// the image restricts the background only), the same Philox draws, list[rank], MONAI's
// correct_crop_centers written out.
std::vector<int64_t> naive_centers(const std::vector<uint8_t>& lab, const std::vector<float>* img,
                                   const Vol& s, double thr, double pos_ratio, int k_count,
                                   const int64_t crop[3], uint64_t seed) {
  std::vector<int64_t> out;
  const int64_t vox = s.d * s.h * s.w;
  for (int64_t n = 0; n < s.n; ++n) {
    std::vector<int64_t> fg, bg;
    for (int64_t v = 0; v < vox; ++v) {
      if (lab[n * vox + v] > 0)
        fg.push_back(v);
      else if (!img || (*img)[n * vox + v] > thr)
        bg.push_back(v);
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
  std::fill(lab.begin() + s.numel() / 3, lab.begin() + 2 * (s.numel() / 3), 1);  // 1: no background
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

// Cached counts (class_crop_counts) give the naive index lists' centres too, for a C-ordered
// and a Fortran-ordered label, with and without the image mask; the counts equal the naive
// per-chunk counts.
TEST(Crop, CachedCountsGiveTheSameCenters) {
  const Vol s{3, 1, 19, 21, 23};
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<uint8_t> lab(s.numel());
  std::vector<float> img(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    lab[i] = u(rng) < 0.02f;
    img[i] = u(rng);
  }
  const int64_t crop[3] = {5, 8, 23};
  const int64_t chunks = (19 * 21 * 23 + kCropCountChunk - 1) / kCropCountChunk;
  const VolumeView lv = view(lab.data(), DType::UInt8, s), iv = view(img.data(), DType::Float32, s);
  EXPECT_EQ(class_crop_chunks(19, 21, 23), chunks);
  for (bool with_image : {false, true}) {
    std::vector<int64_t> counts(s.n * chunks * 2, -1);
    class_crop_counts(lv, with_image ? &iv : nullptr, 0.3, CropLabelForm::Foreground, 2,
                      counts.data());
    const int64_t per = 19 * 21 * 23;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t c = 0; c < chunks; ++c) {
        int64_t fg = 0, bg = 0;
        for (int64_t v = c * kCropCountChunk; v < std::min(per, (c + 1) * kCropCountChunk); ++v) {
          if (lab[n * per + v])
            fg += 1;
          else if (!with_image || img[n * per + v] > 0.3f)
            bg += 1;
        }
        EXPECT_EQ(counts[(n * chunks + c) * 2], fg) << n << " " << c;
        EXPECT_EQ(counts[(n * chunks + c) * 2 + 1], bg) << n << " " << c;
      }
    std::vector<int64_t> got(3 * s.n * 9);
    pos_neg_crop_centers(lv, with_image ? &iv : nullptr, 0.3, 0.4, 9, crop, 77, 0, got.data(),
                         nullptr, counts.data());
    EXPECT_EQ(got, naive_centers(lab, with_image ? &img : nullptr, s, 0.3, 0.4, 9, crop, 77));
  }
  // Fortran order: counts and draws follow the memory order, the same centres as uncached.
  VolumeView f = lv;
  const int64_t fs[5] = {19 * 21 * 23, 19 * 21 * 23, 1, 19, 19 * 21};
  for (int a = 0; a < 5; ++a) f.strides[a] = fs[a];
  std::vector<int64_t> counts(s.n * chunks * 2), a(3 * s.n * 5), b(3 * s.n * 5);
  class_crop_counts(f, nullptr, 0.0, CropLabelForm::Foreground, 2, counts.data());
  pos_neg_crop_centers(f, nullptr, 0.0, 0.5, 5, crop, 3, 0, a.data());
  pos_neg_crop_centers(f, nullptr, 0.0, 0.5, 5, crop, 3, 0, b.data(), nullptr, counts.data());
  EXPECT_EQ(a, b);
  // A region with cached counts is refused (the counts cover the whole volume).
  CropCenterOptions o;
  o.region_lo[0] = 2;
  const double ratios[2] = {0.5, 0.5};
  EXPECT_THROW(class_crop_centers(lv, nullptr, 0.0, CropLabelForm::Foreground, 2, ratios, nullptr,
                                  o, a.data(), nullptr, nullptr, counts.data()),
               voxaug::Error);
}

// The float32 image fast path compares in float against the threshold rounded down, which must
// give the float64 comparison's answer (x > t as real numbers) for every float: thresholds that
// round up, round down, are exact, or lie beyond the float range, with image values at and next
// to their float neighbours (uint8 and float labels, the dense path; a strided image takes the
// per-voxel path for reference).
TEST(Crop, FloatImageThresholdIsTheFloat64Comparison) {
  const Vol s{1, 1, 6, 7, 24};
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> coin(0, 1);
  for (double t : {0.1, 0.3, -0.7, 16777217.0, 1.0, 1e300, -1e300, 0.0}) {
    const float f = static_cast<float>(t);
    const float near[] = {f,
                          std::nextafter(f, -INFINITY),
                          std::nextafter(f, INFINITY),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::infinity(),
                          0.0f,
                          -0.0f};
    std::vector<float> img(s.numel());
    std::vector<uint8_t> lab(s.numel());
    for (int64_t i = 0; i < s.numel(); ++i) {
      img[i] = near[i % 7];
      lab[i] = static_cast<uint8_t>(coin(rng));
    }
    int64_t want[2] = {0, 0};  // every foreground voxel; the background where image > t
    for (int64_t i = 0; i < s.numel(); ++i)
      if (lab[i])
        want[0] += 1;
      else if (static_cast<double>(img[i]) > t)
        want[1] += 1;
    const VolumeView lv = view(lab.data(), DType::UInt8, s);
    const VolumeView iv = view(img.data(), DType::Float32, s);
    std::vector<int64_t> counts(2 * class_crop_chunks(s.d, s.h, s.w));
    class_crop_counts(lv, &iv, t, CropLabelForm::Foreground, 2, counts.data());
    int64_t got[2] = {0, 0};
    for (size_t c = 0; c < counts.size(); ++c) got[c % 2] += counts[c];
    EXPECT_EQ(got[0], want[0]) << "threshold " << t;
    EXPECT_EQ(got[1], want[1]) << "threshold " << t;
    EXPECT_GT(want[1], 0) << "threshold " << t;
  }
}

#if VOXAUG_WITH_CUDA
TEST(CropCuda, CachedCountsTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol s{2, 1, 40, 33, 31};
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<uint8_t> lab(s.numel());
  for (auto& v : lab) v = u(rng) < 0.02f;
  const int64_t crop[3] = {16, 16, 16};
  const int64_t chunks = (40 * 33 * 31 + kCropCountChunk - 1) / kCropCountChunk;
  std::vector<int64_t> counts(s.n * chunks * 2), cpu(3 * s.n * 6);
  class_crop_counts(view(lab.data(), DType::UInt8, s), nullptr, 0.0, CropLabelForm::Foreground, 2,
                    counts.data());
  pos_neg_crop_centers(view(lab.data(), DType::UInt8, s), nullptr, 0.0, 0.5, 6, crop, 9, 0,
                       cpu.data());
  DeviceBuffer dl(lab), dn(counts.size() * sizeof(int64_t)), dc(cpu.size() * sizeof(int64_t));
  class_crop_counts(view(dl.p, DType::UInt8, s, Device::CUDA), nullptr, 0.0,
                    CropLabelForm::Foreground, 2, dn.as<int64_t>());
  pos_neg_crop_centers(view(dl.p, DType::UInt8, s, Device::CUDA), nullptr, 0.0, 0.5, 6, crop, 9, 0,
                       dc.as<int64_t>(), nullptr, dn.as<int64_t>());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(counts, dn.to_host<int64_t>(counts.size()));
  EXPECT_EQ(cpu, dc.to_host<int64_t>(cpu.size()));
}

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

// ---- generic centre samplers (class_crop_centers, weighted_crop_centers, uniform_crop_centers)
// and extract_patches vs naive references: explicit candidate lists in raster order (the
// volumes are C-ordered), the same Philox draws, float64 running sums.
namespace {
using voxaug::detail::philox_block;
using voxaug::detail::PhiloxStream;
using voxaug::detail::uniform01_f64;

struct Box {
  int64_t lo[3], hi[3];
  bool in(int64_t d, int64_t h, int64_t w) const {
    return d >= lo[0] && d < hi[0] && h >= lo[1] && h < hi[1] && w >= lo[2] && w < hi[2];
  }
};

CropCenterOptions options(const Box& b, int k, uint64_t seed, int64_t first_crop = 0) {
  CropCenterOptions o;
  o.num_samples = k;
  for (int a = 0; a < 3; ++a) o.region_lo[a] = b.lo[a], o.region_hi[a] = b.hi[a];
  o.seed = seed;
  o.first_crop = first_crop;
  return o;
}

// MONAI map_classes_to_indices + generate_label_classes_crop_centers with voxaug's draws.
std::vector<int64_t> naive_class_centers(const std::vector<float>& lab,
                                         const std::vector<float>* img, const Vol& s,
                                         CropLabelForm form, int K,
                                         const std::vector<double>& ratios, const Box& box,
                                         int k_count, uint64_t seed, int64_t first_crop) {
  std::vector<int64_t> out;
  const int64_t vox = s.d * s.h * s.w;
  for (int64_t n = 0; n < s.n; ++n) {
    std::vector<std::vector<int64_t>> lists(K);
    for (int64_t v = 0; v < vox; ++v) {
      const int64_t d = v / (s.h * s.w), h = (v / s.w) % s.h, w = v % s.w;
      if (!box.in(d, h, w)) continue;
      if (img && !((*img)[n * vox + v] > 0.25)) continue;
      for (int c = 0; c < K; ++c) {
        bool member;
        if (form == CropLabelForm::OneHot) {
          member = lab[(n * s.c + c) * vox + v] != 0.0f;
        } else {
          member = lab[n * s.c * vox + v] == static_cast<float>(c);
        }
        if (member) lists[c].push_back(v);
      }
    }
    for (int k = 0; k < k_count; ++k) {
      const auto r =
          philox_block(seed, first_crop + k, static_cast<uint32_t>(n), PhiloxStream::Sample);
      const double u_cls = uniform01_f64(r.x, r.y), u_rank = uniform01_f64(r.z, r.w);
      std::vector<double> adj(K);
      double sum = 0;
      std::vector<int> present;
      for (int c = 0; c < K; ++c) {
        adj[c] = lists[c].empty() ? 0.0 : ratios[c];
        sum += adj[c];
        if (!lists[c].empty()) present.push_back(c);
      }
      int64_t idx[3] = {box.lo[0] + (box.hi[0] - box.lo[0]) / 2,
                        box.lo[1] + (box.hi[1] - box.lo[1]) / 2,
                        box.lo[2] + (box.hi[2] - box.lo[2]) / 2};
      if (!present.empty()) {
        int cls = -1;
        if (sum > 0) {
          double cum = 0;
          for (int c = 0; c < K; ++c) {
            if (adj[c] <= 0) continue;
            cum += adj[c];
            cls = c;
            if (u_cls * sum < cum) break;
          }
        } else {
          cls = present[std::min<size_t>(static_cast<size_t>(u_cls * present.size()),
                                         present.size() - 1)];
        }
        const auto& list = lists[cls];
        const int64_t v =
            list[std::min<int64_t>(static_cast<int64_t>(u_rank * list.size()), list.size() - 1)];
        idx[0] = v / (s.h * s.w), idx[1] = (v / s.w) % s.h, idx[2] = v % s.w;
      }
      for (int a = 0; a < 3; ++a) out.push_back(idx[a]);
    }
  }
  return out;
}

}  // namespace

TEST(Crop, ClassCentersMatchNaiveIndexLists) {
  const Vol s{2, 1, 19, 21, 23};  // several chunks
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> lab(s.numel()), img(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    const float x = u(rng);
    lab[i] = x < 0.01f ? 1.0f : x < 0.03f ? 2.0f : x < 0.031f ? 5.0f : x < 0.04f ? 2.5f : 0.0f;
    img[i] = u(rng);
  }
  const int K = 7;  // > 4: the shared-histogram path on CUDA; class 3, 4, 6 absent
  const std::vector<double> ratios{1, 2, 3, 4, 0, 0.5, 2};
  for (const Box& box : {Box{{0, 0, 0}, {19, 21, 23}}, Box{{2, 3, 1}, {17, 20, 22}}}) {
    for (bool with_image : {false, true}) {
      const VolumeView iv = view(img.data(), DType::Float32, s);
      std::vector<int64_t> got(3 * s.n * 11), counts(s.n * K);
      class_crop_centers(view(lab.data(), DType::Float32, s), with_image ? &iv : nullptr, 0.25,
                         CropLabelForm::Argmax, K, ratios.data(), nullptr, options(box, 11, 5, 3),
                         got.data(), counts.data());
      EXPECT_EQ(got, naive_class_centers(lab, with_image ? &img : nullptr, s, CropLabelForm::Argmax,
                                         K, ratios, box, 11, 5, 3));
      EXPECT_EQ(counts[3], 0);
      EXPECT_GT(counts[1], 0);
    }
  }
}

TEST(Crop, OneHotCentersAndFallbacks) {
  const Vol s{2, 3, 9, 30, 17};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> lab(s.numel());
  for (auto& x : lab) x = u(rng) < 0.05f ? 1.0f : 0.0f;  // overlapping channels
  const int64_t vox = s.d * s.h * s.w;
  std::fill(lab.begin() + (s.c + 1) * vox, lab.begin() + (s.c + 2) * vox,
            0.0f);  // sample 1: no class 1
  const Box box{{0, 0, 0}, {9, 30, 17}};
  // Ratios (0, 1, 0): sample 1 has no class 1, so no positive-ratio class is present: the
  // fallback draws a present class uniformly.
  const std::vector<double> ratios{0, 1, 0};
  std::vector<int64_t> got(3 * s.n * 9), counts(s.n * 3);
  class_crop_centers(view(lab.data(), DType::Float32, s), nullptr, 0.0, CropLabelForm::OneHot, 3,
                     ratios.data(), nullptr, options(box, 9, 6), got.data(), counts.data());
  EXPECT_EQ(got,
            naive_class_centers(lab, nullptr, s, CropLabelForm::OneHot, 3, ratios, box, 9, 6, 0));
  EXPECT_EQ(counts[3 + 1], 0);
  // An empty label: every centre is the region's centre.
  std::vector<float> empty(s.numel(), 0.0f);
  class_crop_centers(view(empty.data(), DType::Float32, s), nullptr, 0.0, CropLabelForm::OneHot, 3,
                     ratios.data(), nullptr, options(box, 9, 6), got.data(), counts.data());
  for (int64_t i = 0; i < s.n * 9; ++i)
    EXPECT_EQ((std::vector<int64_t>(got.begin() + 3 * i, got.begin() + 3 * i + 3)),
              (std::vector<int64_t>{4, 15, 8}));
}

TEST(Crop, WeightedCentersMatchNaiveCdf) {
  const Vol s{2, 1, 18, 25, 21};
  std::mt19937 rng(10);
  std::uniform_int_distribution<int> u(0, 9);
  std::vector<float> w(s.numel());
  for (auto& x : w) x = static_cast<float>(u(rng) < 7 ? 0 : u(rng));  // integers: exact sums
  w[s.numel() / 2 + 5] = -3.0f;  // sample 1: a negative weight in the region (MONAI shifts)
  const Box box{{2, 3, 4}, {15, 23, 18}};
  const int K = 13;
  for (bool shift : {true, false}) {
    std::vector<int64_t> got(3 * s.n * K);
    std::vector<double> stats(3 * s.n);
    weighted_crop_centers(view(w.data(), DType::Float32, s), shift, options(box, K, 12), got.data(),
                          stats.data());
    const int64_t vox = s.d * s.h * s.w;
    for (int64_t n = 0; n < s.n; ++n) {
      std::vector<int64_t> vs;
      std::vector<double> ws;
      double mn = INFINITY, mn_all = INFINITY;
      for (int64_t v = 0; v < vox; ++v) {
        const int64_t d = v / (s.h * s.w), h = (v / s.w) % s.h, ww = v % s.w;
        mn_all = std::min(mn_all, double(w[n * vox + v]));
        if (box.in(d, h, ww)) mn = std::min(mn, double(w[n * vox + v]));
      }
      const double sh = shift && mn < 0 ? mn : 0.0;
      double total = 0;
      for (int64_t v = 0; v < vox; ++v) {
        const int64_t d = v / (s.h * s.w), h = (v / s.w) % s.h, ww = v % s.w;
        if (!box.in(d, h, ww)) continue;
        double x = w[n * vox + v] - sh;
        if (!shift && x < 0) x = 0;
        vs.push_back(v);
        ws.push_back(x);
        total += x;
      }
      EXPECT_EQ(stats[3 * n], total);
      EXPECT_EQ(stats[3 * n + 1], sh);
      EXPECT_EQ(stats[3 * n + 2], mn_all);
      for (int k = 0; k < K; ++k) {
        const auto r = philox_block(12, k, static_cast<uint32_t>(n), PhiloxStream::Sample);
        const double target = uniform01_f64(r.x, r.y) * total;
        double acc = 0;
        size_t i = 0;
        for (; i < vs.size(); ++i) {  // numpy searchsorted(cdf, target, side="right")
          acc += ws[i];
          if (acc > target) break;
        }
        const int64_t v = vs[i];
        const int64_t want[3] = {v / (s.h * s.w), (v / s.w) % s.h, v % s.w};
        for (int a = 0; a < 3; ++a) EXPECT_EQ(got[3 * (n * K + k) + a], want[a]) << n << " " << k;
        EXPECT_GT(ws[i], 0.0);
      }
    }
  }
  // Zero and non-finite totals: uniform in the region.
  std::vector<float> zero(s.numel(), 0.0f), nan(s.numel(), 1.0f);
  const int64_t inside = (5 * s.h + 5) * s.w + 5;  // in the region, in both samples
  nan[inside] = NAN;
  nan[s.numel() / 2 + inside] = INFINITY;
  for (auto* m : {&zero, &nan}) {
    std::vector<int64_t> got(3 * s.n * K), uni(3 * s.n * K);
    weighted_crop_centers(view(m->data(), DType::Float32, s), true, options(box, K, 12), got.data(),
                          nullptr);
    uniform_crop_centers(s.n, options(box, K, 12), Device::CPU, 0, uni.data());
    EXPECT_EQ(got, uni);
  }
}

TEST(Crop, UniformCentersCoverTheRegion) {
  const Box box{{3, 0, 5}, {7, 1, 12}};
  const int K = 4000;
  std::vector<int64_t> got(3 * 2 * K);
  uniform_crop_centers(2, options(box, K, 3), Device::CPU, 0, got.data());
  std::vector<int> hist(7, 0);
  for (int64_t t = 0; t < 2 * K; ++t) {
    for (int a = 0; a < 3; ++a) {
      ASSERT_GE(got[3 * t + a], box.lo[a]);
      ASSERT_LT(got[3 * t + a], box.hi[a]);
    }
    hist[got[3 * t + 2] - 5]++;
  }
  for (int c : hist) EXPECT_GT(c, 2 * K / 7 - 200);  // every value drawn about equally
  // Independent of the crop split: crops [10, 20) drawn alone equal those of the full draw.
  std::vector<int64_t> part(3 * 2 * 10);
  uniform_crop_centers(2, options(box, 10, 3, 10), Device::CPU, 0, part.data());
  for (int n = 0; n < 2; ++n)
    for (int k = 0; k < 10; ++k)
      for (int a = 0; a < 3; ++a)
        EXPECT_EQ(part[3 * (n * 10 + k) + a], got[3 * (n * K + 10 + k) + a]);
}

TEST(Crop, ExtractPatchesMatchesNaiveGather) {
  const Vol s{2, 3, 7, 9, 11};
  std::vector<int16_t> in(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) in[i] = static_cast<int16_t>(i % 3001 - 1500);
  const int64_t K = 3, size[3] = {4, 5, 6};
  const std::vector<int64_t> starts{0, 0, 0, -2, 6, 8, 3, 4, 5, 5, -1, 0, 6, 8, 10, 1, 2, 3};
  std::vector<int16_t> out(s.n * K * s.c * 4 * 5 * 6, 99);
  const int64_t shift[3] = {1, -2, 3};  // a box starts at corner - offset
  for (int layout = 0; layout < 4; ++layout) {
    const bool transposed = layout & 1, shifted = layout & 2;
    VolumeView v = view(in.data(), DType::Int16, s);
    if (transposed) {  // the same buffer read as (N, C, W', H', D') would not match: use strides
      std::swap(v.strides[3], v.strides[4]);  // a transposed view of an 11 x 9 plane
      std::swap(v.shape[3], v.shape[4]);
    }
    extract_patches(v, starts.data(), shifted ? shift : nullptr, K, size, out.data());
    const int64_t o[3] = {shifted ? shift[0] : 0, shifted ? shift[1] : 0, shifted ? shift[2] : 0};
    int64_t e = 0;
    for (int64_t p = 0; p < s.n * K; ++p)
      for (int64_t c = 0; c < s.c; ++c)
        for (int64_t z = 0; z < 4; ++z)
          for (int64_t y = 0; y < 5; ++y)
            for (int64_t x = 0; x < 6; ++x, ++e) {
              const int64_t d = starts[3 * p] - o[0] + z, h = starts[3 * p + 1] - o[1] + y,
                            w = starts[3 * p + 2] - o[2] + x;
              const bool inside =
                  d >= 0 && d < v.shape[2] && h >= 0 && h < v.shape[3] && w >= 0 && w < v.shape[4];
              const int16_t want = inside
                                       ? in[(p / K) * v.strides[0] + c * v.strides[1] +
                                            d * v.strides[2] + h * v.strides[3] + w * v.strides[4]]
                                       : int16_t(0);
              ASSERT_EQ(out[e], want) << p << " " << c << " " << z << " " << y << " " << x;
            }
  }
}

// gather_patches' test volumes: three volumes of one channel count and different sizes and
// layouts (C order with two samples, a Fortran-ordered one, one with H and W strides swapped),
// filled with distinct values of T; views on `data` (host or device copies of `host`).
template <class T>
struct GatherCase {
  static constexpr int64_t kC = 2;
  std::vector<std::vector<T>> host;
  std::vector<VolumeView> views;
  GatherCase() {
    const Vol shapes[3] = {{2, kC, 7, 9, 11}, {1, kC, 5, 6, 4}, {1, kC, 12, 3, 8}};
    int64_t value = 0;
    for (int i = 0; i < 3; ++i) {
      const Vol& s = shapes[i];
      host.emplace_back(s.numel());
      for (T& x : host.back()) x = static_cast<T>(value++ % 97 + 1);
      VolumeView v = view(host.back().data(), dtype(), s);
      if (i == 1) {  // Fortran order: d fastest
        v.strides[2] = 1, v.strides[3] = s.d, v.strides[4] = s.d * s.h;
      } else if (i == 2) {  // the H and W strides swapped: a transposed view of a 12 x 8 x 3 block
        v.strides[3] = 1, v.strides[4] = s.h;
      }
      views.push_back(v);
    }
  }
  static DType dtype() {
    if (std::is_same<T, uint8_t>::value) return DType::UInt8;
    if (std::is_same<T, int16_t>::value) return DType::Int16;
    if (std::is_same<T, float>::value) return DType::Float32;
    return DType::Float64;
  }
  // K patches: random samples (4 in all), starts partly outside their sample.
  static void draw(int64_t K, std::vector<int64_t>& index, std::vector<int64_t>& starts) {
    std::mt19937 rng(31);
    index.resize(K);
    starts.resize(3 * K);
    for (int64_t k = 0; k < K; ++k) {
      index[k] = static_cast<int64_t>(rng() % 4);
      for (int a = 0; a < 3; ++a) starts[3 * k + a] = static_cast<int64_t>(rng() % 8) - 2;
    }
  }
  // The naive copy: patch k's voxel (c, z, y, x), 0 outside its sample.
  T want(int64_t sample, const int64_t* start, const int64_t* offset, int64_t c, int64_t z,
         int64_t y, int64_t x) const {
    const int64_t vol = sample < 2 ? 0 : sample - 1, n = sample < 2 ? sample : 0;
    const VolumeView& v = views[vol];
    const int64_t d = start[0] - offset[0] + z, h = start[1] - offset[1] + y,
                  w = start[2] - offset[2] + x;
    if (d < 0 || d >= v.shape[2] || h < 0 || h >= v.shape[3] || w < 0 || w >= v.shape[4])
      return T{};
    return host[vol][n * v.strides[0] + c * v.strides[1] + d * v.strides[2] + h * v.strides[3] +
                     w * v.strides[4]];
  }
};

template <class T>
void check_gather_patches() {
  GatherCase<T> g;
  const int64_t K = 60, size[3] = {4, 5, 3};
  std::vector<int64_t> index, starts;
  GatherCase<T>::draw(K, index, starts);
  const int64_t shift[3] = {1, -2, 3}, zero[3] = {0, 0, 0};
  for (const int64_t* offset : {static_cast<const int64_t*>(nullptr), shift}) {
    const int64_t* o = offset ? offset : zero;
    std::vector<T> out(K * GatherCase<T>::kC * 4 * 5 * 3, T(99));
    gather_patches(g.views.data(), 3, index.data(), starts.data(), offset, K, size, out.data());
    int64_t e = 0, inside = 0;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < GatherCase<T>::kC; ++c)
        for (int64_t z = 0; z < 4; ++z)
          for (int64_t y = 0; y < 5; ++y)
            for (int64_t x = 0; x < 3; ++x, ++e) {
              const T want = g.want(index[k], &starts[3 * k], o, c, z, y, x);
              inside += want != T{};
              ASSERT_EQ(out[e], want) << k << " " << c << " " << z << " " << y << " " << x;
            }
    EXPECT_GT(inside, e / 8);  // many voxels come from inside a volume
    EXPECT_LT(inside, e);      // and some patches reach outside
  }
}

TEST(Crop, GatherPatchesMatchesNaiveCopies) {
  check_gather_patches<uint8_t>();
  check_gather_patches<int16_t>();
  check_gather_patches<float>();
  check_gather_patches<double>();
}

TEST(Crop, GatherPatchesBadInputs) {
  GatherCase<float> g;
  const int64_t size[3] = {2, 2, 2}, bad_size[3] = {2, 0, 2};
  std::vector<int64_t> index{0, 3}, starts(6, 0);
  std::vector<float> out(2 * 2 * 8);
  auto call = [&](const std::vector<VolumeView>& v, const std::vector<int64_t>& i,
                  const int64_t* sz, int64_t k) {
    gather_patches(v.data(), static_cast<int64_t>(v.size()), i.data(), starts.data(), nullptr, k,
                   sz, out.data());
  };
  EXPECT_NO_THROW(call(g.views, index, size, 2));
  EXPECT_THROW(call(g.views, {0, 4}, size, 2), Error);   // 4 samples in all
  EXPECT_THROW(call(g.views, {-1, 0}, size, 2), Error);  // negative index
  EXPECT_THROW(call(g.views, index, bad_size, 2), Error);
  EXPECT_THROW(call(g.views, index, size, 0), Error);
  EXPECT_THROW(call({}, index, size, 2), Error);
  std::vector<VolumeView> other = g.views;
  other[1].dtype = DType::Int32;
  EXPECT_THROW(call(other, index, size, 2), Error);
  other = g.views;
  other[2].shape[1] = 1;
  EXPECT_THROW(call(other, index, size, 2), Error);
  other = g.views;
  other[1].device = Device::CUDA;
  EXPECT_THROW(call(other, index, size, 2), Error);
  try {
    call(g.views, {0, 4}, size, 2);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample_index[1]"), std::string::npos) << e.what();
  }
}

// aggregate_patches' case: K patches (K, C, 4, 5, 3) at random starts (some partly outside the
// 9 x 10 x 11 volume), each limited to a random box; a weight map.
struct AggregateCase {
  static constexpr int64_t K = 90, C = 2, P[3] = {4, 5, 3}, S[3] = {9, 10, 11};  // 3 CUDA passes
  std::vector<int64_t> starts, boxes;
  std::vector<float> patches, weight;
  AggregateCase() {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t k = 0; k < K; ++k) {
      for (int a = 0; a < 3; ++a) starts.push_back(static_cast<int64_t>(rng() % 13) - 2);
      int64_t lo[3], hi[3];
      for (int a = 0; a < 3; ++a) {
        lo[a] = static_cast<int64_t>(rng() % 2);
        hi[a] = P[a] - static_cast<int64_t>(rng() % 2);
      }
      boxes.insert(boxes.end(), {lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]});
    }
    patches.resize(K * C * P[0] * P[1] * P[2]);
    for (float& v : patches) v = u(rng);
    weight.resize(P[0] * P[1] * P[2]);
    for (float& v : weight) v = 0.5f + 0.5f * u(rng);
  }
  // Patch k's voxel landing at (d, h, w), or false.
  bool at(int64_t k, int64_t d, int64_t h, int64_t w, bool boxed, int64_t* zyx) const {
    const int64_t o[3] = {d, h, w};
    for (int a = 0; a < 3; ++a) {
      zyx[a] = o[a] - starts[3 * k + a];
      const int64_t lo = boxed ? boxes[6 * k + a] : 0, hi = boxed ? boxes[6 * k + 3 + a] : P[a];
      if (zyx[a] < lo || zyx[a] >= hi) return false;
    }
    return true;
  }
  int64_t patch_off(int64_t k, int64_t c, const int64_t* zyx) const {
    return (((k * C + c) * P[0] + zyx[0]) * P[1] + zyx[1]) * P[2] + zyx[2];
  }
};

TEST(Crop, AggregatePatchesMatchesSequentialSums) {
  const AggregateCase g;
  const Vol pv{AggregateCase::K, AggregateCase::C, 4, 5, 3}, ov{1, AggregateCase::C, 9, 10, 11},
      cv{1, 1, 9, 10, 11};
  for (int variant = 0; variant < 8; ++variant) {
    const bool weighted = variant & 1, boxed = variant & 2, fortran = variant & 4;
    std::vector<float> out(ov.numel(), 0.25f), count(cv.numel(), 0.0f);
    const VolumeView cview = view(count.data(), DType::Float32, cv);
    std::vector<float> patches = g.patches;
    VolumeView oview = view(out.data(), DType::Float32, ov);
    if (fortran) oview.strides[2] = 1, oview.strides[3] = 9, oview.strides[4] = 90;  // d fastest
    aggregate_patches(view(patches.data(), DType::Float32, pv), g.starts.data(),
                      boxed ? g.boxes.data() : nullptr, true, weighted ? g.weight.data() : nullptr,
                      oview, &cview);
    int64_t covered = 0;
    for (int64_t c = 0; c < AggregateCase::C; ++c)
      for (int64_t d = 0; d < 9; ++d)
        for (int64_t h = 0; h < 10; ++h)
          for (int64_t w = 0; w < 11; ++w) {
            float acc = 0.25f, cnt = 0.0f;  // torch's out[box] += patch * window, patch by patch
            for (int64_t k = 0; k < AggregateCase::K; ++k) {
              int64_t zyx[3];
              if (!g.at(k, d, h, w, boxed, zyx)) continue;
              const float wv = weighted ? g.weight[(zyx[0] * 5 + zyx[1]) * 3 + zyx[2]] : 1.0f;
              const float prod = g.patches[g.patch_off(k, c, zyx)] * wv;
              acc = acc + prod;
              cnt = cnt + wv;
            }
            const int64_t v = (d * 10 + h) * 11 + w;
            ASSERT_EQ(
                out[c * 990 + d * oview.strides[2] + h * oview.strides[3] + w * oview.strides[4]],
                acc)
                << variant << " " << c << " " << d << " " << h << " " << w;
            if (c == 0) {
              ASSERT_EQ(count[v], cnt) << variant;
            }
            covered += cnt > 0;
          }
    EXPECT_GT(covered, 900);  // the patches reach nearly every voxel
  }
}

TEST(Crop, AggregatePatchesCopiesTheLastPatch) {
  const AggregateCase g;
  const Vol pv{AggregateCase::K, AggregateCase::C, 4, 5, 3}, ov{1, AggregateCase::C, 9, 10, 11};
  std::vector<int16_t> patches(g.patches.size());
  for (size_t i = 0; i < patches.size(); ++i) patches[i] = static_cast<int16_t>(i % 30000);
  std::vector<int16_t> out(ov.numel(), -7);
  aggregate_patches(view(patches.data(), DType::Int16, pv), g.starts.data(), g.boxes.data(), false,
                    nullptr, view(out.data(), DType::Int16, ov), nullptr);
  for (int64_t c = 0; c < AggregateCase::C; ++c)
    for (int64_t d = 0; d < 9; ++d)
      for (int64_t h = 0; h < 10; ++h)
        for (int64_t w = 0; w < 11; ++w) {
          int16_t want = -7;
          for (int64_t k = 0; k < AggregateCase::K; ++k) {
            int64_t zyx[3];
            if (g.at(k, d, h, w, true, zyx)) want = patches[g.patch_off(k, c, zyx)];
          }
          ASSERT_EQ(out[c * 990 + (d * 10 + h) * 11 + w], want) << c << " " << d << " " << h;
        }
}

TEST(Crop, AggregatePatchesBadInputs) {
  const Vol pv{2, 1, 2, 2, 2}, ov{1, 1, 4, 4, 4};
  std::vector<float> p(pv.numel()), o(ov.numel());
  std::vector<int16_t> oi(ov.numel());
  const std::vector<int64_t> starts(6, 0), bad_box{0, 0, 0, 3, 2, 2, 0, 0, 0, 2, 2, 2};
  const VolumeView P = view(p.data(), DType::Float32, pv), O = view(o.data(), DType::Float32, ov);
  EXPECT_NO_THROW(aggregate_patches(P, starts.data(), nullptr, true, nullptr, O, nullptr));
  EXPECT_THROW(aggregate_patches(P, starts.data(), bad_box.data(), true, nullptr, O, nullptr),
               Error);  // hi beyond the patch
  EXPECT_THROW(aggregate_patches(P, starts.data(), nullptr, true, nullptr,
                                 view(oi.data(), DType::Int16, ov), nullptr),
               Error);  // accumulate into int16
  EXPECT_THROW(aggregate_patches(P, starts.data(), nullptr, false, nullptr,
                                 view(oi.data(), DType::Int16, ov), nullptr),
               Error);  // copy across dtypes
  EXPECT_THROW(aggregate_patches(P, starts.data(), nullptr, false, p.data(), O, nullptr),
               Error);  // a weight when copying
  EXPECT_THROW(aggregate_patches(view(p.data(), DType::Float32, Vol{1, 2, 2, 2, 2}), starts.data(),
                                 nullptr, true, nullptr, O, nullptr),
               Error);  // channels differ
  EXPECT_THROW(aggregate_patches(P, starts.data(), nullptr, true, nullptr,
                                 view(o.data(), DType::Float32, Vol{2, 1, 4, 4, 2}), nullptr),
               Error);  // out with N = 2
}

TEST(Crop, SamplerBadInputs) {
  const Vol s{1, 1, 4, 4, 4};
  std::vector<float> v(s.numel());
  std::vector<int64_t> c(3);
  const double r2[2] = {1, -1};
  const Box full{{0, 0, 0}, {4, 4, 4}};
  EXPECT_THROW(
      class_crop_centers(view(v.data(), DType::Float32, s), nullptr, 0, CropLabelForm::Argmax, 2,
                         r2, nullptr, options(full, 1, 0), c.data(), nullptr),
      Error);  // negative ratio
  const double r1[3] = {1, 1, 1};
  EXPECT_THROW(
      class_crop_centers(view(v.data(), DType::Float32, s), nullptr, 0, CropLabelForm::OneHot, 3,
                         r1, nullptr, options(full, 1, 0), c.data(), nullptr),
      Error);  // one-hot needs one class per channel
  const Box bad{{0, 0, 3}, {4, 4, 3}};
  EXPECT_THROW(weighted_crop_centers(view(v.data(), DType::Float32, s), true, options(bad, 1, 0),
                                     c.data(), nullptr),
               Error);  // empty region
  const int64_t size[3] = {0, 1, 1};
  EXPECT_THROW(
      extract_patches(view(v.data(), DType::Float32, s), c.data(), nullptr, 1, size, v.data()),
      Error);
}

#if VOXAUG_WITH_CUDA
TEST(CropCuda, SamplersTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol s{3, 2, 41, 37, 29};
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> lab(s.numel()), w(s.numel()), img(s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) {
    const float x = u(rng);
    lab[i] = x < 0.02f ? 1.0f : x < 0.05f ? 3.0f : 0.0f;
    w[i] = u(rng) < 0.1f ? u(rng) * 3 - 0.5f : 0.0f;  // negatives: MONAI's shift
    img[i] = u(rng);
  }
  DeviceBuffer dl(lab), dw(w), di(img);
  const Box box{{1, 2, 3}, {40, 30, 27}};
  const int K = 9;
  const std::vector<double> ratios6{1, 2, 0, 3, 1, 1}, ratios2{1, 1};
  const Vol s1{s.n, 1, s.d, s.h, s.w};
  VolumeView l1 = view(lab.data(), DType::Float32, s1),
             dl1 = view(dl.p, DType::Float32, s1, Device::CUDA);
  l1.strides[0] = dl1.strides[0] = s.c * s.d * s.h * s.w;  // channel 0 of the 2-channel buffer
  const VolumeView iv = view(img.data(), DType::Float32, s),
                   div = view(di.p, DType::Float32, s, Device::CUDA);
  struct Case {
    CropLabelForm form;
    int k;
    const std::vector<double>* r;
    bool image;
  };
  for (const Case& cs : {Case{CropLabelForm::Argmax, 6, &ratios6, true},
                         Case{CropLabelForm::Foreground, 2, &ratios2, false},
                         Case{CropLabelForm::OneHot, 2, &ratios2, true}}) {
    const bool one_hot = cs.form == CropLabelForm::OneHot;
    const VolumeView hl = one_hot ? view(lab.data(), DType::Float32, s) : l1;
    const VolumeView gl = one_hot ? view(dl.p, DType::Float32, s, Device::CUDA) : dl1;
    std::vector<int64_t> cpu(3 * s.n * K), cpu_counts(s.n * cs.k);
    const int64_t crop[3] = {8, 8, 8};
    class_crop_centers(hl, cs.image ? &iv : nullptr, 0.3, cs.form, cs.k, cs.r->data(), crop,
                       options(box, K, 4), cpu.data(), cpu_counts.data());
    DeviceBuffer dc(cpu.size() * sizeof(int64_t)), dn(cpu_counts.size() * sizeof(int64_t));
    class_crop_centers(gl, cs.image ? &div : nullptr, 0.3, cs.form, cs.k, cs.r->data(), crop,
                       options(box, K, 4), dc.as<int64_t>(), dn.as<int64_t>());
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(cpu, dc.to_host<int64_t>(cpu.size())) << int(cs.form);
    EXPECT_EQ(cpu_counts, dn.to_host<int64_t>(cpu_counts.size())) << int(cs.form);
  }
  for (bool shift : {true, false}) {
    std::vector<int64_t> cpu(3 * s.n * K);
    std::vector<double> cpu_stats(3 * s.n);
    VolumeView hw = view(w.data(), DType::Float32, s),
               gw = view(dw.p, DType::Float32, s, Device::CUDA);
    weighted_crop_centers(hw, shift, options(box, K, 8), cpu.data(), cpu_stats.data());
    DeviceBuffer dc(cpu.size() * sizeof(int64_t)), ds(cpu_stats.size() * sizeof(double));
    weighted_crop_centers(gw, shift, options(box, K, 8), dc.as<int64_t>(), ds.as<double>());
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(cpu, dc.to_host<int64_t>(cpu.size()));
    EXPECT_EQ(cpu_stats, ds.to_host<double>(cpu_stats.size()));  // bit-identical sums
  }
  {
    std::vector<int64_t> cpu(3 * s.n * K);
    uniform_crop_centers(s.n, options(box, K, 2), Device::CPU, 0, cpu.data());
    DeviceBuffer dc(cpu.size() * sizeof(int64_t));
    uniform_crop_centers(s.n, options(box, K, 2), Device::CUDA, 0, dc.as<int64_t>());
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(cpu, dc.to_host<int64_t>(cpu.size()));
  }
  {
    const std::vector<int64_t> starts{0,  0,  0, -3, 30, 25, 10, 10, 10,
                                      35, -2, 1, 4,  4,  4,  40, 36, 28};
    const int64_t size[3] = {9, 10, 11};
    const int64_t offset[3] = {4, 5, 5};
    std::vector<float> cpu(s.n * 2 * s.c * 9 * 10 * 11);
    extract_patches(iv, starts.data(), offset, 2, size, cpu.data());
    DeviceBuffer ds(starts), dout(cpu.size() * sizeof(float));
    extract_patches(div, ds.as<int64_t>(), offset, 2, size, dout.p);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(cpu, dout.to_host<float>(cpu.size()));
  }
}

template <class T>
void check_gather_patches_twin() {
  GatherCase<T> g;
  const int64_t K = 60, size[3] = {4, 5, 3}, offset[3] = {1, -2, 3};  // two launches of 48 + 12
  std::vector<int64_t> index, starts;
  GatherCase<T>::draw(K, index, starts);
  std::vector<T> cpu(K * GatherCase<T>::kC * 4 * 5 * 3);
  gather_patches(g.views.data(), 3, index.data(), starts.data(), offset, K, size, cpu.data());
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<VolumeView> dev = g.views;
  for (int i = 0; i < 3; ++i) {
    bufs.push_back(std::make_unique<DeviceBuffer>(g.host[i]));
    dev[i].data = bufs.back()->p;
    dev[i].device = Device::CUDA;
  }
  DeviceBuffer ds(starts), dout(cpu.size() * sizeof(T));
  gather_patches(dev.data(), 3, index.data(), ds.as<int64_t>(), offset, K, size, dout.p);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(cpu, dout.to_host<T>(cpu.size()));
}

TEST(CropCuda, AggregatePatchesTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const AggregateCase g;
  const Vol pv{AggregateCase::K, AggregateCase::C, 4, 5, 3}, ov{1, AggregateCase::C, 9, 10, 11},
      cv{1, 1, 9, 10, 11};
  std::vector<float> out(ov.numel(), 0.25f), count(cv.numel(), 0.0f);
  std::vector<float> patches = g.patches;
  DeviceBuffer dp(patches), dw(g.weight), dout(out), dcount(count);
  const VolumeView hc = view(count.data(), DType::Float32, cv),
                   dc = view(dcount.p, DType::Float32, cv, Device::CUDA);
  aggregate_patches(view(patches.data(), DType::Float32, pv), g.starts.data(), g.boxes.data(), true,
                    g.weight.data(), view(out.data(), DType::Float32, ov), &hc);
  aggregate_patches(view(dp.p, DType::Float32, pv, Device::CUDA), g.starts.data(), g.boxes.data(),
                    true, dw.p, view(dout.p, DType::Float32, ov, Device::CUDA), &dc);
  std::vector<int16_t> ip(patches.size()), iout(ov.numel(), -7);
  for (size_t i = 0; i < ip.size(); ++i) ip[i] = static_cast<int16_t>(i % 30000);
  DeviceBuffer dip(ip), diout(iout);
  aggregate_patches(view(ip.data(), DType::Int16, pv), g.starts.data(), g.boxes.data(), false,
                    nullptr, view(iout.data(), DType::Int16, ov), nullptr);
  aggregate_patches(view(dip.p, DType::Int16, pv, Device::CUDA), g.starts.data(), g.boxes.data(),
                    false, nullptr, view(diout.p, DType::Int16, ov, Device::CUDA), nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(out, dout.to_host<float>(out.size()));  // the same additions in the same order
  EXPECT_EQ(count, dcount.to_host<float>(count.size()));
  EXPECT_EQ(iout, diout.to_host<int16_t>(iout.size()));
}

TEST(CropCuda, GatherPatchesTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  check_gather_patches_twin<uint8_t>();
  check_gather_patches_twin<float>();
  check_gather_patches_twin<double>();
}
#endif
