// The typed LibTorch entry points of the crop and spatial families (voxaug/torch_ops.h) against
// independent references: naive loops over small tensors (bounding boxes, candidate counts,
// patch copies, MONAI's correct_crop_centers), torch's own slicing / constant_pad_nd, and
// torch::nn::functional::grid_sample for resample. The samplers' draws are random: they are
// checked for what must hold of every draw (on a candidate voxel, inside the region, the class
// counts) and for the frequencies a weight map implies, with fixed seeds.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "voxaug/torch_ops.h"

namespace {

namespace F = torch::nn::functional;
using torch::indexing::Slice;

// Every device the ops run on here: the CPU, and CUDA where a device is present.
std::vector<torch::Device> devices() {
  std::vector<torch::Device> out{torch::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(torch::kCUDA);
  return out;
}

// (N, 6) tight half-open box of the voxels where any of `channels` is > threshold; zeros
// without foreground (MONAI's generate_spatial_bounding_box), by loops over a float64 copy.
torch::Tensor naive_bbox(const torch::Tensor& x, double threshold,
                         const std::vector<int64_t>& channels) {
  const torch::Tensor v = x.to(torch::kDouble).cpu().contiguous();
  auto a = v.accessor<double, 5>();
  torch::Tensor box = torch::zeros({x.size(0), 6}, torch::kLong);
  for (int64_t n = 0; n < x.size(0); ++n) {
    std::array<int64_t, 3> lo{INT64_MAX, INT64_MAX, INT64_MAX}, hi{-1, -1, -1};
    for (int64_t c : channels)
      for (int64_t d = 0; d < x.size(2); ++d)
        for (int64_t h = 0; h < x.size(3); ++h)
          for (int64_t w = 0; w < x.size(4); ++w) {
            if (!(a[n][c][d][h][w] > threshold)) continue;
            const std::array<int64_t, 3> p{d, h, w};
            for (int k = 0; k < 3; ++k) {
              lo[k] = std::min(lo[k], p[k]);
              hi[k] = std::max(hi[k], p[k] + 1);
            }
          }
    if (hi[0] < 0) continue;
    for (int k = 0; k < 3; ++k) {
      box[n][k] = lo[k];
      box[n][k + 3] = hi[k];
    }
  }
  return box;
}

// Patch n * K + k of `size` starting at start[n][k] (zeros outside), by loops.
torch::Tensor naive_patches(const torch::Tensor& x, const torch::Tensor& starts,
                            const std::vector<int64_t>& size) {
  const torch::Tensor v = x.to(torch::kDouble).cpu().contiguous();
  const torch::Tensor s = starts.cpu();
  auto a = v.accessor<double, 5>();
  auto sa = s.accessor<int64_t, 3>();
  const int64_t N = x.size(0), K = starts.size(1), C = x.size(1);
  torch::Tensor out = torch::zeros({N * K, C, size[0], size[1], size[2]}, torch::kDouble);
  auto o = out.accessor<double, 5>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < size[0]; ++d)
          for (int64_t h = 0; h < size[1]; ++h)
            for (int64_t w = 0; w < size[2]; ++w) {
              const int64_t i = sa[n][k][0] + d, j = sa[n][k][1] + h, l = sa[n][k][2] + w;
              if (i < 0 || j < 0 || l < 0 || i >= x.size(2) || j >= x.size(3) || l >= x.size(4))
                continue;
              o[n * K + k][c][d][h][w] = a[n][c][i][j][l];
            }
  return out;
}

// MONAI correct_crop_centers for one axis: the centre clamped to [size // 2, end - 1] with
// end = int(L + 1 - size / 2) (bumped by one where it equals the start).
int64_t monai_correct_center(int64_t c, int64_t size, int64_t L) {
  const int64_t start = size / 2;
  int64_t end = static_cast<int64_t>(static_cast<double>(L) + 1.0 - size / 2.0);
  if (end == start) ++end;
  return std::min(std::max(c, start), end - 1);
}

torch::Tensor test_label(torch::Device device) {
  // (2, 1, 7, 9, 6) int16 classes 0..3, class 3 only in sample 1
  torch::manual_seed(11);
  torch::Tensor lab = torch::randint(0, 3, {2, 1, 7, 9, 6}, torch::kShort);
  lab.index_put_({1, 0, Slice(1, 3), Slice(2, 4), Slice(0, 2)}, 3);
  return lab.to(device);
}

TEST(TorchOpsCrop, ForegroundBboxMatchesNaiveLoops) {
  for (const auto& device : devices()) {
    torch::manual_seed(1);
    torch::Tensor x = torch::rand({3, 2, 6, 7, 5});
    x = torch::where(x > 0.93, x, torch::zeros_like(x));
    x[1].zero_();            // no foreground: zeros
    x[2][1][4][0][3] = 5.0;  // a single voxel in channel 1 only
    x[2][0].zero_();
    const torch::Tensor xd = x.to(device);
    for (double thr : {0.0, 0.95}) {
      EXPECT_TRUE(
          torch::equal(voxaug::ops::foreground_bbox(xd, thr).cpu(), naive_bbox(x, thr, {0, 1})))
          << "threshold " << thr << " on " << device;
      const std::vector<int64_t> ch0{0};
      EXPECT_TRUE(
          torch::equal(voxaug::ops::foreground_bbox(xd, thr, ch0).cpu(), naive_bbox(x, thr, ch0)));
    }
    EXPECT_GT(voxaug::ops::foreground_bbox(xd).sum().item<int64_t>(), 0);  // not all zeros
    // a non-contiguous view (channels-last strides) gives the same boxes
    const torch::Tensor cl = xd.permute({0, 2, 3, 4, 1}).contiguous().permute({0, 4, 1, 2, 3});
    EXPECT_TRUE(torch::equal(voxaug::ops::foreground_bbox(cl).cpu(), naive_bbox(x, 0.0, {0, 1})));
    EXPECT_THROW(voxaug::ops::foreground_bbox(xd[0]), c10::Error);  // 4-D: rejected
  }
}

TEST(TorchOpsCrop, ExtractPatchesMatchesLoopsAndPaddedSlicing) {
  for (const auto& device : devices()) {
    torch::manual_seed(2);
    const torch::Tensor x = torch::randn({2, 3, 7, 6, 5});
    const std::vector<int64_t> size{4, 3, 5};
    // centres inside, on the border and outside: patches start at centre - size // 2
    const torch::Tensor centers =
        torch::tensor({2, 1, 2, 6, 5, 4, 0, 0, 0, 3, 3, 2, -1, 7, 2, 5, 2, 9}, torch::kLong)
            .reshape({2, 3, 3});
    const torch::Tensor starts = centers - torch::tensor({2, 1, 2}, torch::kLong);
    for (auto dtype : {torch::kFloat, torch::kDouble, torch::kShort}) {
      const torch::Tensor xt = (dtype == torch::kShort ? x * 100 : x).to(dtype);
      const torch::Tensor got =
          voxaug::ops::extract_patches(xt.to(device), centers.to(device), size).cpu();
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{6, 3, 4, 3, 5}));
      EXPECT_EQ(got.scalar_type(), dtype);
      EXPECT_TRUE(torch::equal(got.to(torch::kDouble), naive_patches(xt, starts, size)));
      EXPECT_GT(got.abs().sum().item<double>(), 0.0);
    }
    // torch's own slicing of the zero-padded volume (pad 10 on every side)
    const torch::Tensor padded = at::constant_pad_nd(x, {10, 10, 10, 10, 10, 10}, 0.0);
    const torch::Tensor got = voxaug::ops::extract_patches(x.to(device), centers.to(device), size);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 3; ++k) {
        const auto s = starts[n][k];
        const int64_t d = s[0].item<int64_t>() + 10, h = s[1].item<int64_t>() + 10,
                      w = s[2].item<int64_t>() + 10;
        const torch::Tensor ref = padded[n].index(
            {Slice(), Slice(d, d + size[0]), Slice(h, h + size[1]), Slice(w, w + size[2])});
        EXPECT_TRUE(torch::equal(got[n * 3 + k].cpu(), ref)) << "patch " << n << ", " << k;
      }
    EXPECT_THROW(
        voxaug::ops::extract_patches(x.to(device), centers.to(torch::kInt).to(device), size),
        c10::Error);  // int32 centres: rejected
  }
}

TEST(TorchOpsCrop, ClassCropCountsMatchNaiveChunkCounts) {
  for (const auto& device : devices()) {
    // 3 chunks of 4096 voxels: 20 x 20 x 21 = 8400
    torch::manual_seed(3);
    const torch::Tensor lab = torch::randint(0, 4, {2, 1, 20, 20, 21}, torch::kLong);
    const torch::Tensor img = torch::randn({2, 2, 20, 20, 21});
    const double thr = 0.5;
    const torch::Tensor cand = (img > thr).any(1).reshape({2, -1});  // any image channel
    const torch::Tensor flat = lab.reshape({2, -1});
    const int64_t chunks = 3, K = 4, V = flat.size(1);
    for (bool with_image : {false, true}) {
      const torch::Tensor got =
          voxaug::ops::class_crop_counts(
              lab.to(device),
              with_image ? std::optional<torch::Tensor>(img.to(device)) : std::nullopt, thr,
              /*label_form=*/1, K)
              .cpu();
      ASSERT_EQ(got.sizes(), (std::vector<int64_t>{2, chunks, K}));
      torch::Tensor ref = torch::zeros({2, chunks, K}, torch::kLong);
      auto fa = flat.accessor<int64_t, 2>();
      auto ca = cand.accessor<bool, 2>();
      auto ra = ref.accessor<int64_t, 3>();
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t i = 0; i < V; ++i)
          if (!with_image || ca[n][i]) ++ra[n][i / 4096][fa[n][i]];
      EXPECT_TRUE(torch::equal(got, ref)) << "with image " << with_image << " on " << device;
    }
    // foreground form: class 0 = label > 0, class 1 = the rest
    const torch::Tensor fg =
        voxaug::ops::class_crop_counts(lab.to(device), std::nullopt, 0.0, 0, 2).cpu().sum(1);
    EXPECT_EQ(fg[0][0].item<int64_t>(), (flat[0] > 0).sum().item<int64_t>());
    EXPECT_EQ(fg[0][1].item<int64_t>(), (flat[0] == 0).sum().item<int64_t>());
    EXPECT_THROW(voxaug::ops::class_crop_counts(lab.to(device), std::nullopt, 0.0, 3, 2),
                 c10::Error);  // label_form 3: rejected
  }
}

TEST(TorchOpsCrop, ClassCropCentersLieOnDrawnClassesInsideTheRegion) {
  for (const auto& device : devices()) {
    const torch::Tensor lab = test_label(device);
    const torch::Tensor labc = lab.cpu();
    const std::vector<double> ratios{0.0, 1.0, 0.0, 2.0};  // classes 1 and 3
    const std::vector<int64_t> region{1, 2, 1, 6, 8, 5};
    torch::Tensor centers, counts;
    std::tie(centers, counts) = voxaug::ops::class_crop_centers(lab, std::nullopt, 0.0, 1, ratios,
                                                                200, std::nullopt, region, 7);
    ASSERT_EQ(centers.sizes(), (std::vector<int64_t>{2, 200, 3}));
    // counts: candidates per class inside the region, by slicing
    const torch::Tensor inside =
        labc.index({Slice(), 0, Slice(1, 6), Slice(2, 8), Slice(1, 5)}).reshape({2, -1});
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(counts[n][k].item<int64_t>(), (inside[n] == k).sum().item<int64_t>());
    const torch::Tensor c = centers.cpu();
    auto ca = c.accessor<int64_t, 3>();
    auto la = labc.accessor<int16_t, 5>();
    int64_t drawn3 = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 200; ++k) {
        for (int a = 0; a < 3; ++a) {
          EXPECT_GE(ca[n][k][a], region[a]);
          EXPECT_LT(ca[n][k][a], region[a + 3]);
        }
        const int v = la[n][0][ca[n][k][0]][ca[n][k][1]][ca[n][k][2]];
        EXPECT_TRUE(v == 1 || v == 3) << "centre on class " << v;
        if (n == 1 && v == 3) ++drawn3;
      }
    // sample 1: class 3 present, ratio 2 of 3; 200 draws, 5 sigma = 33
    EXPECT_NEAR(drawn3, 200.0 * 2 / 3, 34.0);
    // the counts cached: the same centres (whole-volume region)
    const torch::Tensor cached = voxaug::ops::class_crop_counts(lab, std::nullopt, 0.0, 1, 4);
    const torch::Tensor a = std::get<0>(voxaug::ops::class_crop_centers(
        lab, std::nullopt, 0.0, 1, ratios, 50, std::nullopt, {}, 8));
    const torch::Tensor b = std::get<0>(voxaug::ops::class_crop_centers(
        lab, std::nullopt, 0.0, 1, ratios, 50, std::nullopt, {}, 8, 0, 0, cached));
    EXPECT_TRUE(torch::equal(a.cpu(), b.cpu()));
    // spatial_size: MONAI's correct_crop_centers applied to the same draw
    const std::vector<int64_t> size{4, 5, 3};
    const torch::Tensor raw = std::get<0>(voxaug::ops::class_crop_centers(
        lab, std::nullopt, 0.0, 1, ratios, 50, std::nullopt, {}, 9));
    const torch::Tensor fit = std::get<0>(
        voxaug::ops::class_crop_centers(lab, std::nullopt, 0.0, 1, ratios, 50, size, {}, 9));
    const torch::Tensor r = raw.cpu(), f = fit.cpu();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 50; ++k)
        for (int64_t ax = 0; ax < 3; ++ax)
          EXPECT_EQ(f[n][k][ax].item<int64_t>(),
                    monai_correct_center(r[n][k][ax].item<int64_t>(), size[ax], lab.size(2 + ax)));
  }
}

TEST(TorchOpsCrop, PosNegCropCentersDrawForegroundAndBackground) {
  for (const auto& device : devices()) {
    const torch::Tensor lab = test_label(device);
    torch::manual_seed(4);
    const torch::Tensor img = torch::randn({2, 1, 7, 9, 6}).to(device);
    // MONAI's map_binary_to_indices: every foreground voxel, the background where image > 0.2
    const torch::Tensor fg = (lab > 0).cpu();
    const torch::Tensor bg = ((lab == 0) & (img > 0.2)).cpu();
    const std::vector<int64_t> one{1, 1, 1};  // a 1-voxel crop: centres are not moved
    for (double pos : {1.0, 0.0}) {
      const torch::Tensor c =
          voxaug::ops::pos_neg_crop_centers(lab, img, 0.2, pos, 64, one, 5).cpu();
      ASSERT_EQ(c.sizes(), (std::vector<int64_t>{2, 64, 3}));
      auto want = (pos > 0 ? fg : bg).accessor<bool, 5>();
      auto ca = c.accessor<int64_t, 3>();
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t k = 0; k < 64; ++k)
          EXPECT_TRUE(want[n][0][ca[n][k][0]][ca[n][k][1]][ca[n][k][2]])
              << "pos_ratio " << pos << " sample " << n << " crop " << k;
    }
    // cached counts: the same centres; a 4 x 5 x 3 crop: MONAI's correct_crop_centers
    const torch::Tensor counts = voxaug::ops::class_crop_counts(lab, img, 0.2, 0, 2);
    const std::vector<int64_t> size{4, 5, 3};
    const torch::Tensor raw = voxaug::ops::pos_neg_crop_centers(lab, img, 0.2, 0.5, 40, one, 6);
    const torch::Tensor fit = voxaug::ops::pos_neg_crop_centers(lab, img, 0.2, 0.5, 40, size, 6);
    const torch::Tensor fit_cached =
        voxaug::ops::pos_neg_crop_centers(lab, img, 0.2, 0.5, 40, size, 6, 0, counts);
    EXPECT_TRUE(torch::equal(fit.cpu(), fit_cached.cpu()));
    const torch::Tensor r = raw.cpu(), f = fit.cpu();
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t k = 0; k < 40; ++k)
        for (int64_t ax = 0; ax < 3; ++ax)
          EXPECT_EQ(f[n][k][ax].item<int64_t>(),
                    monai_correct_center(r[n][k][ax].item<int64_t>(), size[ax], lab.size(2 + ax)));
    // first_sample: sample n of a batch is sample first_sample + n of another
    const torch::Tensor tail = voxaug::ops::pos_neg_crop_centers(lab.slice(0, 1), img.slice(0, 1),
                                                                 0.2, 0.5, 40, size, 6, 1);
    EXPECT_TRUE(torch::equal(tail.cpu()[0], f[1]));
  }
}

TEST(TorchOpsCrop, WeightedCropCentersFollowTheWeights) {
  for (const auto& device : devices()) {
    torch::Tensor w = torch::zeros({1, 1, 6, 7, 5}, torch::kDouble);
    w[0][0][2][3][1] = 1.0;
    w[0][0][4][1][3] = 3.0;
    w[0][0][0][0][0] = 50.0;  // outside the region: never drawn
    const std::vector<int64_t> region{1, 1, 1, 6, 7, 5};
    torch::Tensor centers, stats;
    std::tie(centers, stats) =
        voxaug::ops::weighted_crop_centers(w.to(device), false, 4000, region, 3);
    const torch::Tensor c = centers.cpu();
    const torch::Tensor on_a =
        (c[0].select(1, 0) == 2) & (c[0].select(1, 1) == 3) & (c[0].select(1, 2) == 1);
    const torch::Tensor on_b =
        (c[0].select(1, 0) == 4) & (c[0].select(1, 1) == 1) & (c[0].select(1, 2) == 3);
    EXPECT_TRUE((on_a | on_b).all().item<bool>());
    // P(b) = 3 / 4; 4000 draws: sigma 0.0068, 5 sigma 0.035
    EXPECT_NEAR(on_b.to(torch::kDouble).mean().item<double>(), 0.75, 0.035);
    // stats: the region's total weight, no shift, the volume's minimum
    const torch::Tensor s = stats.cpu();
    EXPECT_DOUBLE_EQ(s[0][0].item<double>(),
                     w.index({0, 0, Slice(1, 6), Slice(1, 7), Slice(1, 5)}).sum().item<double>());
    EXPECT_DOUBLE_EQ(s[0][1].item<double>(), 0.0);
    EXPECT_DOUBLE_EQ(s[0][2].item<double>(), w.min().item<double>());
    // the draws of crops 10.. are those of a call starting at first_crop 10
    const torch::Tensor part =
        std::get<0>(voxaug::ops::weighted_crop_centers(w.to(device), false, 20, region, 3, 0, 10));
    EXPECT_TRUE(torch::equal(part.cpu()[0], c[0].slice(0, 10, 30)));
  }
}

TEST(TorchOpsCrop, UniformCropCentersCoverTheRegion) {
  for (const auto& device : devices()) {
    const torch::Tensor like = torch::empty({3, 1, 9, 4, 11}, torch::TensorOptions(device));
    const std::vector<int64_t> region{2, 0, 3, 7, 0, 5};  // hi 0: the whole axis
    const torch::Tensor c = voxaug::ops::uniform_crop_centers(like, 2000, region, 4).cpu();
    ASSERT_EQ(c.sizes(), (std::vector<int64_t>{3, 2000, 3}));
    const std::array<int64_t, 3> lo{2, 0, 3}, hi{7, 4, 5};
    for (int64_t a = 0; a < 3; ++a) {
      const torch::Tensor v = c.select(2, a).flatten();
      EXPECT_EQ(v.min().item<int64_t>(), lo[a]);
      EXPECT_EQ(v.max().item<int64_t>(), hi[a] - 1);
      // every value of [lo, hi) about equally often: 6000 draws, at most 5 values per axis
      const torch::Tensor counts = torch::bincount(v - lo[a], {}, hi[a] - lo[a]);
      const double expect = 6000.0 / static_cast<double>(hi[a] - lo[a]);
      EXPECT_LT((counts.to(torch::kDouble) - expect).abs().max().item<double>(),
                5 * std::sqrt(expect));
    }
    const torch::Tensor again = voxaug::ops::uniform_crop_centers(like, 5, region, 4, 1, 7).cpu();
    EXPECT_TRUE(torch::equal(again[0], c[1].slice(0, 7, 12)));  // keyed by (sample, crop)
  }
}

// Normalised grid_sample coordinates (x = w, y = h, z = d; align_corners false) of the input
// voxel indices matrices[n] * (d, h, w, 1) for every output voxel.
torch::Tensor grid_of(const torch::Tensor& matrices, const std::vector<int64_t>& out,
                      const std::vector<int64_t>& in) {
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto mesh = torch::meshgrid(
      {torch::arange(out[0], opts), torch::arange(out[1], opts), torch::arange(out[2], opts)},
      "ij");
  const torch::Tensor hom =
      torch::stack({mesh[0], mesh[1], mesh[2], torch::ones_like(mesh[0])}, -1);  // (D, H, W, 4)
  torch::Tensor idx = torch::einsum("nij,dhwj->ndhwi", {matrices.to(torch::kDouble), hom});
  std::vector<torch::Tensor> g;
  for (int a = 2; a >= 0; --a) g.push_back((2 * idx.select(-1, a) + 1) / in[a] - 1);
  return torch::stack(g, -1);
}

torch::Tensor test_matrices(int64_t n) {
  torch::manual_seed(5);
  torch::Tensor m = torch::zeros({n, 3, 4}, torch::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor r = std::get<0>(torch::linalg_qr(torch::randn({3, 3}, torch::kDouble)));
    m[i].slice(1, 0, 3).copy_(r * 0.9);
    m[i].select(1, 3).copy_(torch::rand({3}, torch::kDouble) * 3 + 0.37);
  }
  return m;
}

TEST(TorchOpsResample, MatchesGridSample) {
  for (const auto& device : devices()) {
    torch::manual_seed(6);
    const torch::Tensor x = torch::randn({2, 2, 7, 8, 6}, torch::kDouble);
    const torch::Tensor lab = torch::randint(0, 5, {2, 1, 7, 8, 6}, torch::kLong);
    const std::vector<int64_t> out{5, 6, 9};
    const torch::Tensor m = test_matrices(2);
    const torch::Tensor grid = grid_of(m, out, {7, 8, 6});
    // image linear + zeros, label nearest + border, one call (one coordinate map)
    const auto res = voxaug::ops::resample({x.to(device), lab.to(device)}, m.to(device), out,
                                           {1, 0}, {0, 1}, {0.0, 0.0});
    ASSERT_EQ(res.size(), 2u);
    const torch::Tensor ref_img = F::grid_sample(x, grid,
                                                 F::GridSampleFuncOptions()
                                                     .mode(torch::kBilinear)
                                                     .padding_mode(torch::kZeros)
                                                     .align_corners(false));
    const torch::Tensor ref_lab = F::grid_sample(lab.to(torch::kDouble), grid,
                                                 F::GridSampleFuncOptions()
                                                     .mode(torch::kNearest)
                                                     .padding_mode(torch::kBorder)
                                                     .align_corners(false));
    EXPECT_EQ(res[0].scalar_type(), torch::kDouble);
    EXPECT_EQ(res[1].scalar_type(), torch::kLong);
    EXPECT_TRUE(torch::allclose(res[0].cpu(), ref_img, 1e-9, 1e-12));  // float64 both
    EXPECT_TRUE(torch::equal(res[1].cpu().to(torch::kDouble), ref_lab));
    EXPECT_GT(res[0].abs().sum().item<double>(), 0.0);
    EXPECT_FALSE(res[0].isnan().any().item<bool>());
    // float32 in, float32 out: grid_sample's float64 result within float32 rounding
    const torch::Tensor r32 =
        voxaug::ops::resample({x.to(torch::kFloat).to(device)}, m.to(torch::kFloat).to(device), out,
                              {1}, {1}, {0.0})[0]
            .cpu();
    const torch::Tensor ref_border = F::grid_sample(x, grid,
                                                    F::GridSampleFuncOptions()
                                                        .mode(torch::kBilinear)
                                                        .padding_mode(torch::kBorder)
                                                        .align_corners(false));
    EXPECT_LT((r32.to(torch::kDouble) - ref_border).abs().max().item<double>(), 1e-4);
    EXPECT_THROW(
        voxaug::ops::resample({x.to(device)}, m.slice(0, 0, 1).to(device), out, {1}, {0}, {0.0}),
        c10::Error);  // one matrix for two samples: rejected
  }
}

TEST(TorchOpsResample, PatchesReadTheVolumeAtMatrixPlusStart) {
  for (const auto& device : devices()) {
    torch::manual_seed(7);
    const torch::Tensor x = torch::randn({2, 1, 9, 8, 10}, torch::kDouble);
    const torch::Tensor starts =
        torch::tensor({0, 0, 0, 3, 2, 4, -2, 5, 1, 4, 4, 4}, torch::kLong).reshape({2, 2, 3});
    const std::vector<int64_t> out{4, 5, 3};
    // identity matrices: each patch is the volume sliced at its start (zeros outside)
    const torch::Tensor eye = torch::eye(3, 4, torch::kDouble).unsqueeze(0).repeat({4, 1, 1});
    const auto id = voxaug::ops::resample_patches({x.to(device)}, eye.to(device), starts.to(device),
                                                  out, {1}, {0}, {0.0});
    ASSERT_EQ(id[0].sizes(), (std::vector<int64_t>{4, 1, 4, 5, 3}));
    EXPECT_TRUE(torch::allclose(id[0].cpu(), naive_patches(x, starts, out), 0.0, 1e-12));
    // general matrices: grid_sample of volume m with the start added to the offsets
    const torch::Tensor m = test_matrices(4);
    const auto got = voxaug::ops::resample_patches({x.to(device)}, m.to(device), starts.to(device),
                                                   out, {1}, {2}, {0.0});
    for (int64_t p = 0; p < 4; ++p) {
      torch::Tensor mp = m.slice(0, p, p + 1).clone();
      mp.select(2, 3).add_(starts.reshape({-1, 3})[p].to(torch::kDouble));
      const torch::Tensor ref =
          F::grid_sample(x.slice(0, p / 2, p / 2 + 1), grid_of(mp, out, {9, 8, 10}),
                         F::GridSampleFuncOptions()
                             .mode(torch::kBilinear)
                             .padding_mode(torch::kReflection)
                             .align_corners(false));
      EXPECT_TRUE(torch::allclose(got[0].cpu().slice(0, p, p + 1), ref, 1e-9, 1e-12))
          << "patch " << p << " on " << device;
    }
    EXPECT_THROW(
        voxaug::ops::resample_patches({x.to(device)}, m.to(device),
                                      starts.to(torch::kDouble).to(device), out, {1}, {0}, {0.0}),
        c10::Error);  // floating starts: rejected
  }
}

}  // namespace
