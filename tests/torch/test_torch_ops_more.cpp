// The typed LibTorch entry points of session 22's ops (voxaug/torch_ops.h) against naive loops
// and torch's own ops on small tensors: component sizes and the largest components (counting
// by std::map), the median filter (a sort per box), patch swaps (torch slicing with clones) and
// coarse shuffle (a permutation inside each box, nothing outside); the distance transform (brute
// force over the background voxels).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "voxaug/torch_ops.h"

namespace {

using torch::indexing::Slice;

std::vector<torch::Device> devices() {
  std::vector<torch::Device> out{torch::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(torch::kCUDA);
  return out;
}

TEST(TorchOpsMore, ComponentSizesAndLargest) {
  torch::manual_seed(3);
  const torch::Tensor mask = torch::rand({2, 1, 9, 10, 11}) < 0.35;
  for (const auto& dev : devices()) {
    const torch::Tensor labels = voxaug::ops::connected_components(mask.to(dev), 1);
    const torch::Tensor sizes = voxaug::ops::component_sizes(labels).cpu();
    const torch::Tensor keep = voxaug::ops::largest_components(labels, 2).cpu();
    const torch::Tensor lab = labels.cpu().contiguous();
    for (int64_t n = 0; n < 2; ++n) {
      const torch::Tensor l = lab[n].reshape({-1});
      const int32_t* p = l.data_ptr<int32_t>();
      std::map<int32_t, int64_t> count;
      for (int64_t i = 0; i < l.numel(); ++i)
        if (p[i]) ++count[p[i]];
      std::vector<std::pair<int64_t, int32_t>> order;
      for (const auto& [k, c] : count) order.emplace_back(-c, k);
      std::sort(order.begin(), order.end());
      const torch::Tensor s = sizes[n].reshape({-1}), kp = keep[n].reshape({-1});
      for (int64_t i = 0; i < l.numel(); ++i) {
        ASSERT_EQ(s[i].item<int32_t>(), p[i] ? count[p[i]] : 0);
        const bool want = p[i] && (p[i] == order[0].second || p[i] == order[1].second);
        ASSERT_EQ(kp[i].item<bool>(), want) << "voxel " << i;
      }
    }
  }
}

// distance_transform_edt: for every foreground voxel the least Euclidean distance (spacing 2, 1,
// 3: squared distances are exact integers) to a background voxel of its volume, by brute force
// with torch ops; float32 is the float64 result rounded.
TEST(TorchOpsMore, DistanceTransformMatchesBruteForce) {
  torch::manual_seed(4);
  const torch::Tensor mask = torch::rand({2, 2, 6, 7, 8}) < 0.8;
  const double sp[3] = {2.0, 1.0, 3.0};
  const torch::Tensor grid =
      torch::stack(torch::meshgrid({torch::arange(6), torch::arange(7), torch::arange(8)}, "ij"))
          .reshape({3, -1})
          .to(torch::kDouble);
  const torch::Tensor scale = torch::tensor({sp[0], sp[1], sp[2]}, torch::kDouble).reshape({3, 1});
  const torch::Tensor pts = grid * scale;  // (3, V) in mm
  for (const auto& dev : devices()) {
    const torch::Tensor got = voxaug::ops::distance_transform_edt(mask.to(dev), sp).cpu();
    const torch::Tensor got32 =
        voxaug::ops::distance_transform_edt(mask.to(dev), sp, torch::kFloat).cpu();
    ASSERT_EQ(got.scalar_type(), torch::kDouble);
    ASSERT_TRUE(torch::equal(got32, got.to(torch::kFloat)));
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 2; ++c) {
        const torch::Tensor m = mask[n][c].reshape({-1});
        const torch::Tensor bg = pts.index({Slice(), m.logical_not()});  // (3, B)
        ASSERT_GT(bg.size(1), 0);
        const torch::Tensor diff = pts.unsqueeze(2) - bg.unsqueeze(1);
        const torch::Tensor d2 = (diff * diff).sum(0);  // (V, B), exact integers
        // (std::sqrt: torch's vectorised CPU sqrt of float64 is not always correctly rounded.)
        torch::Tensor want = d2.amin(1).contiguous();
        double* wp = want.data_ptr<double>();
        for (int64_t i = 0; i < want.numel(); ++i) wp[i] = std::sqrt(wp[i]);
        want = want.reshape({6, 7, 8});
        ASSERT_TRUE(torch::equal(got[n][c], want)) << "volume " << n << " " << c;
      }
  }
}

TEST(TorchOpsMore, MedianFilterMatchesSortedBoxes) {
  torch::manual_seed(4);
  const torch::Tensor x = torch::randn({1, 2, 6, 7, 8});
  for (const auto& dev : devices()) {
    const torch::Tensor got = voxaug::ops::median_filter(x.to(dev), {1, 0, 2}).cpu();
    ASSERT_EQ(got.scalar_type(), torch::kFloat);
    // Replicate-pad, then every box's sorted middle value.
    const torch::Tensor p = torch::nn::functional::pad(
        x, torch::nn::functional::PadFuncOptions({2, 2, 0, 0, 1, 1}).mode(torch::kReplicate));
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t d = 0; d < 6; ++d)
        for (int64_t h = 0; h < 7; ++h)
          for (int64_t w = 0; w < 8; ++w) {
            const torch::Tensor box =
                p.index({0, c, Slice(d, d + 3), Slice(h, h + 1), Slice(w, w + 5)}).reshape({-1});
            const torch::Tensor srt = std::get<0>(box.sort());
            ASSERT_EQ(got.index({0, c, d, h, w}).item<float>(), srt[7].item<float>());
          }
  }
}

TEST(TorchOpsMore, SwapPatchesAndCoarseShuffle) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, 2, 8, 9, 10});
  const torch::Tensor loc =
      torch::tensor({0, 0, 0, 4, 5, 6, 1, 2, 3, 4, 0, 5}, torch::kLong).reshape({2, 1, 6});
  const torch::Tensor counts = torch::tensor({1, 1}, torch::kLong);
  torch::Tensor ref = x.clone();
  for (int64_t n = 0; n < 2; ++n) {
    const auto* l = loc[n][0].data_ptr<int64_t>();
    const auto a =
        ref.index({n, Slice(), Slice(l[0], l[0] + 3), Slice(l[1], l[1] + 4), Slice(l[2], l[2] + 4)})
            .clone();
    const auto b =
        ref.index({n, Slice(), Slice(l[3], l[3] + 3), Slice(l[4], l[4] + 4), Slice(l[5], l[5] + 4)})
            .clone();
    ref.index_put_(
        {n, Slice(), Slice(l[3], l[3] + 3), Slice(l[4], l[4] + 4), Slice(l[5], l[5] + 4)}, a);
    ref.index_put_(
        {n, Slice(), Slice(l[0], l[0] + 3), Slice(l[1], l[1] + 4), Slice(l[2], l[2] + 4)}, b);
  }
  const torch::Tensor boxes =
      torch::tensor({1, 2, 3, 5, 7, 9, 0, 0, 0, 8, 9, 10}, torch::kLong).reshape({2, 1, 6});
  for (const auto& dev : devices()) {
    EXPECT_TRUE(
        torch::equal(voxaug::ops::swap_patches(x.to(dev), loc, counts, {3, 4, 4}).cpu(), ref));
    const torch::Tensor s = voxaug::ops::coarse_shuffle(x.to(dev), boxes, counts, 11).cpu();
    // Sample 0: inside the box a permutation per channel, outside unchanged.
    const auto in0 = x.index({0, Slice(), Slice(1, 5), Slice(2, 7), Slice(3, 9)}).reshape({2, -1});
    const auto out0 = s.index({0, Slice(), Slice(1, 5), Slice(2, 7), Slice(3, 9)}).reshape({2, -1});
    EXPECT_FALSE(torch::equal(in0, out0));
    EXPECT_TRUE(torch::equal(std::get<0>(in0.sort(1)), std::get<0>(out0.sort(1))));
    torch::Tensor outside = torch::ones({8, 9, 10}, torch::kBool);
    outside.index_put_({Slice(1, 5), Slice(2, 7), Slice(3, 9)}, false);
    EXPECT_TRUE(torch::equal(s[0].index({Slice(), outside}), x[0].index({Slice(), outside})));
    // Sample 1: the whole volume, each channel a permutation of itself.
    EXPECT_TRUE(torch::equal(std::get<0>(s[1].reshape({2, -1}).sort(1)),
                             std::get<0>(x[1].reshape({2, -1}).sort(1))));
  }
}

}  // namespace
