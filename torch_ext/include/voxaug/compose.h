// voxaug::transforms::Compose -- lazy composition of the C++ spatial transforms
// (voxaug/spatial_transforms.h) and deformations (voxaug/deform_transforms.h): consecutive index
// maps multiply into one per-sample map and one resample launch, and a deformation takes the
// maps before it into its own gather.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "voxaug/deform_transforms.h"
#include "voxaug/spatial_transforms.h"

namespace voxaug::transforms {

// One step of a Compose: any spatial transform (spatial_transforms.h) or deformation
// (deform_transforms.h).
using Step = std::variant<Flip, RandFlip, RandAxisFlip, Rotate90, RandRotate90, Affine, RandAffine,
                          Rotate, RandRotate, Resize, Zoom, RandZoom, Spacing, Orientation,
                          SpatialCrop, CenterSpatialCrop, Rand3DElastic, GridDistortion,
                          RandGridDistortion, RandomElasticDeformation>;

// What a Compose call returns: Result (outputs, the final affine, out_size) plus how it ran.
// maps / meta: the product of every step's maps / affine updates for inputs[0] (first @ ... @
// last, (N, 4, 4) float64 CPU; per-input modes can give Resize / Zoom steps other maps for the
// other inputs; a deformation adds its affine map, not its field, to maps and nothing to meta).
// groups: for inputs[0], each resampling in order as [first step, end step): one resample launch
// of the group's product map, a deformation's launch with the group before it (and the steps
// folded after it), or a single step that ran as itself.
struct ComposeResult : Result {
  std::vector<std::pair<int64_t, int64_t>> groups;
};

// MONAI Compose(lazy=True) for the spatial transforms above, going further: consecutive steps
// that are index maps (Result::single_map: every transform here except Resize / Zoom /
// RandZoom calls that pool ('area'), use interpolate's nearest index table, anti-alias or pad
// after the resample (Zoom keep_size with a zoom < 1, a RandZoom draw that pads), and Spacing
// with recompute_affine) are multiplied into one per-sample map, in = M_1 @ M_2 @ ... @ M_k @
// out (float64), and gathered in one resample launch from the group's input, crops included, so
// rotate + zoom + crop of a batch is one gather and the crop's neighbourhood is read from the
// real input rather than from an earlier step's padding. Per input (inputs[i] with modes[i]):
// the exact steps (Flip, RandFlip, RandAxisFlip, Rotate90, RandRotate90, Orientation, SpatialCrop,
// CenterSpatialCrop) adopt the group's interpolation; the others must agree on (kernel mode,
// padding, align_corners), and a step that does not, for any input, starts the next group of
// every input (as Python's voxaug.transforms.Compose). A group of exact steps only is bit-identical
// to the step-by-step result; with interpolating steps the result is one interpolation instead of
// several (equal to the step-by-step one where no step reads padding, to interpolation accuracy). A
// step that is no index map flushes every input's group and runs as itself. Inputs whose groups
// have equal maps and options share one launch (image + label: one gather, each with its own mode).
//
// Deformations (Rand3DElastic, GridDistortion, RandGridDistortion, RandomElasticDeformation)
// close the pending group: when every input's group is exact steps only or agrees with the
// deformation on (kernel mode, padding) without align_corners, the group's product map P joins
// the deformation's gather, out(x) = in(P M (x + u(x))) (M, u: the deformation's map and field,
// planned on the group's virtual output: the size its call would see), one resample_deformed
// launch per set of inputs, as Python's Compose fuses them; otherwise the groups are resampled
// first. inputs[0] takes the deformation's mode, the other inputs its label mode (mode /
// label_mode, image_ / label_interpolation), modes[i] one of the deformation's mode names. A
// fused crop reads the real voxels beyond its window where the step-by-step result would read
// padding; except RandomElasticDeformation after a crop, whose control grid, locked borders
// and padding belong to the cropped window: the group is resampled first (as Python's).
// Deformations do not change the affine (as MONAI's and Python's), and
// RandomElasticDeformation's spacing is its option (not the affine's). Flips and crops
// (Flip, RandFlip, RandAxisFlip, SpatialCrop, CenterSpatialCrop) right after a B-spline deformation
// (Rand3DElastic field "fast", RandomElasticDeformation) fold into its launch, as Python's
// Compose folds them: the map times theirs, the field's control index through them, flipped
// displacement components negated (equal to running them after it, up to float32 coordinates).
// Other steps, and any after a dense or separable field, start a new group.
//
// Planning runs each step on meta tensors of the inputs' shapes and dtypes (the transforms' own
// host code, checks and errors; no data touched, nothing synced). The affine follows every step
// as when they run one by one (affine @ meta each time).
//
// Random steps: draw(batch, seed, first_sample) draws step j with seed step_seed(seed, j) (the
// steps' own draw(); a deformation's Draw::uniforms holds its draw_params(batch, first_sample,
// seed); deterministic steps get an empty Draw), so a Compose call equals calling the
// random steps with those seeds; apply(inputs, draws) replays a draw. lazy=false runs every step
// as itself (MONAI's default; the reference the fused result is compared with).
class Compose {
 public:
  explicit Compose(std::vector<Step> steps, bool lazy = true);
  static int64_t step_seed(int64_t seed, size_t step);  // splitmix64 of (seed, step)
  std::vector<Draw> draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  ComposeResult apply(Inputs inputs, const std::vector<Draw>& draws, const Modes& modes = {},
                      const Affine4& affine = {}) const;
  ComposeResult operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0,
                           const Modes& modes = {}, const Affine4& affine = {}) const;
  const std::vector<Step>& steps() const { return steps_; }

 private:
  std::vector<Step> steps_;
  bool lazy_;
};

}  // namespace voxaug::transforms
