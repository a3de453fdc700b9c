// Uses voxaug::torch from an installed package: an op against torch's own arithmetic, and the C++
// transform classes (voxaug/spatial_transforms.h, voxaug/deform_transforms.h, voxaug/compose.h)
// against torch::flip and the identity.
#include <torch/torch.h>

#include <cstdio>

#include <voxaug/compose.h>
#include <voxaug/deform_transforms.h>
#include <voxaug/spatial_transforms.h>
#include <voxaug/torch_ops.h>

namespace {
bool check(bool ok, const char* what) {
  if (!ok) std::printf("consumer_torch: mismatch: %s\n", what);
  return ok;
}
}  // namespace

int main() {
  const torch::Tensor x = torch::linspace(-300, 400, 2 * 3 * 4 * 5).reshape({1, 2, 3, 4, 5});
  const torch::Tensor got = voxaug::ops::scale_intensity_range(x, -175, 250, 0.0, 1.0, true);
  const torch::Tensor want = ((x + 175) / 425).clamp(0, 1);
  bool ok = check(torch::allclose(got, want, 1e-6, 1e-6), "scale_intensity_range");

  namespace vt = voxaug::transforms;
  const torch::Tensor label = (x > 0).to(torch::kUInt8);
  // Flip of spatial axis 2 (W) is torch::flip of dim 4, bit for bit, image and label in one call.
  const vt::Result flipped = vt::Flip({2})({x, label});
  ok &= check(torch::equal(flipped.outputs[0], torch::flip(x, {4})) &&
                  torch::equal(flipped.outputs[1], torch::flip(label, {4})),
              "Flip");
  // Spacing to the spacing the (identity) affine already has: no resampling, the same affine.
  const vt::Result same = vt::Spacing({1.0, 1.0, 1.0})({x, label}, {"", "nearest"},
                                                       torch::eye(4, torch::kDouble));
  ok &= check(torch::equal(same.outputs[0], x) && torch::equal(same.outputs[1], label) &&
                  torch::equal(same.affine, torch::eye(4, torch::kDouble)),
              "Spacing");
  // A random affine whose gate is closed and an elastic field of magnitude 0: the identity.
  const vt::Result kept = vt::RandAffine(0.0, {0.3, 0.3, 0.3})({x, label}, 7, 0, {"", "nearest"});
  ok &= check(torch::equal(kept.outputs[0], x) && torch::equal(kept.outputs[1], label),
              "RandAffine prob 0");
  vt::Rand3DElasticOptions eo;
  eo.prob = 1.0;
  const vt::DeformResult d = vt::Rand3DElastic({2, 3}, {0, 0}, eo)(x, 8, 0, {label});
  ok &= check(torch::equal(d.image, x) && torch::equal(d.extras[0], label),
              "Rand3DElastic magnitude 0");
  // Compose: a W flip, the zero elastic field and a W flip folded after it, all in one gather
  // (group [0, 3)): the identity.
  const vt::ComposeResult c =
      vt::Compose({vt::Flip({2}), vt::Rand3DElastic({2, 3}, {0, 0}, eo), vt::Flip({2})})(
          {x, label}, 9, 0, {"", "nearest"});
  ok &= check(c.groups.size() == 1 && c.groups[0].first == 0 && c.groups[0].second == 3 &&
                  torch::equal(c.outputs[0], x) && torch::equal(c.outputs[1], label),
              "Compose flip + elastic + flip");
  if (!ok) return 1;
  std::printf("consumer_torch: voxaug::torch results ok\n");
  return 0;
}
