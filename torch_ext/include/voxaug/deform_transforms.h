// voxaug::transforms -- the deformation transforms of python/voxaug/deform.py for LibTorch
// programs: MONAI's Rand3DElastic, GridDistortion and RandGridDistortion, TorchIO's
// RandomElasticDeformation. Same arguments, same math, same random draws as the Python classes:
// a C++ transform called with a seed gives the bytes of the Python transform replaying
// draw_params(batch, first_sample, seed) (tests/python/test_cxx_deform.py checks this, and
// checks both against MONAI / TorchIO / SimpleITK).
//
// Call conventions (every transform):
// - image: (N, C, D, H, W), or (C, D, H, W) for one sample; results have the input's rank.
//   Integer images are converted to float32 unless their mode is nearest.
// - extras: more tensors of the image's rank, batch size, spatial size and device (e.g. a label
//   map) deformed through the same field in the same gather (one resample_deformed launch per
//   4 tensors), with the transform's label mode ("nearest" by default: labels keep their dtype
//   and values) and padding.
// - Random transforms draw per sample from Philox keyed by `seed`, sample n being global sample
//   first_sample + n: a sample's result does not depend on the batch it is in. Host-side
//   parameters (gates, affine, sigma, steps) are computed in double precision; the noise (control
//   points or the dense MONAI field) is drawn on the data's device (voxaug::uniform_fill_).
// - return_displacement: also return the dense displacement u the call applied, (N, 3, D', H', W')
//   on the data's device, in output voxels along the array axes (d, h, w): out(x) = in(M (x +
//   u(x))) with M the sample's affine index map (the identity except for Rand3DElastic's random
//   affine / spatial_size). MONAI's ddf convention (monai.networks.blocks.Warp); times the
//   spacing for mm (TorchIO). Samples the probability gate skipped have u = 0. float32, float64
//   for the grid distortions (Python's displacement_field()).
// - CUDA data runs on the current stream; nothing synchronises the host (host matrices and
//   per-sample factors go through pinned memory, non-blocking).
// - Bad arguments throw c10::ValueError (Python: ValueError) naming the argument.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "voxaug/spatial_transforms.h"

namespace voxaug::transforms {

// Random ranges (rotate / shear / translate / scale_range) are lists of voxaug::transforms::Range
// (spatial_transforms.h): a number f means U(-f, f), a pair (lo, hi) means U(lo, hi), one per
// parameter: {0.2, 0.1} -> two parameters, U(-0.2, 0.2) and U(-0.1, 0.1); {{0.1, 0.3}} -> one
// parameter, U(0.1, 0.3). scale_range's draws add 1 (MONAI).

struct DeformResult {
  at::Tensor image;                // the input's rank; float32 for integer images (not nearest)
  std::vector<at::Tensor> extras;  // one per extra tensor, each in its dtype (nearest)
  at::Tensor displacement;         // (N, 3, D', H', W') with return_displacement, else undefined
};

// How a deformation call gathers, planned for a batch (each class's plan(); what
// voxaug::transforms::Compose fuses with the spatial steps before it): output voxel x of sample
// i reads the input at mats_i (x + u_i(x)), u_i the field evaluated at x (the
// voxaug::resample_deformed op's arguments). A call is plan() then deform_gather().
struct DeformPlan {
  at::Tensor mats;  // (N, 3, 4) float64 CPU: output voxel index -> input voxel index
  std::array<int64_t, 3> out_size{};
  at::Tensor field;  // on the data's device: control points (kind 1), dense (2), per-axis (3)
  int64_t kind = 1;
  // B-spline control index of output voxel x: scale * x + offset (field_map: per sample).
  std::array<double, 3> scale{1.0, 1.0, 1.0}, offset{0.0, 0.0, 0.0};
  std::optional<at::Tensor> field_map;  // (N, 6) float64 CPU
  int64_t image_mode = 1, label_mode = 0;  // the options' modes: 0 nearest, 1 linear, 2 cubic
  int64_t padding = 0;                     // padding_mode: 0 zeros, 1 border, 2 reflection
  // The image / label padding: padding, except that MONAI's integer (scipy) modes read 'zeros'
  // as scipy's 'constant' (kernel padding 4, cutoff), as Python's deformations do.
  int64_t image_padding = 0, label_padding = 0;
  bool identity = false;  // nothing to do: the call returns its inputs as they are
};

// Gathers `inputs` (5-D, the batch and spatial size the plan was made for, one device) through
// `plan` in one resample_deformed launch per 4 tensors, input i with kernel mode modes[i]
// (integer inputs not nearest computed in float32) and kernel padding paddings[i] (empty:
// plan.padding for every input). `mats` ((N, 3, 4) float64 CPU) replaces plan.mats: a map
// applied before the deformation's (Compose: the steps before it, times plan.mats), its input
// of any spatial size.
std::vector<at::Tensor> deform_gather(const DeformPlan& plan, at::TensorList inputs,
                                      at::IntArrayRef modes,
                                      const std::optional<at::Tensor>& mats = std::nullopt,
                                      at::IntArrayRef paddings = {});

// MONAI Rand3DElastic: with probability `prob` per sample, a smooth random displacement (sigma
// ~ U(sigma_range), magnitude ~ U(magnitude_range), in output voxels) and a random affine
// (rotate / shear / translate / scale ranges, MONAI's construction, centred), out(x) = in(A (x +
// u(x))); unselected samples are resampled with the identity onto spatial_size.
// field "fast": u is a cubic B-spline with control spacing sqrt(3) sigma and coefficients scaled
// to MONAI's variance (voxaug.deform.fast_field_layout); "exact": MONAI's algorithm (U(-1, 1)
// noise at every output voxel, erf Gaussian truncated at 3 sigma, times the magnitude).
struct Rand3DElasticOptions {
  double prob = 0.1;
  // Rotation in radians (at most 3 angles, MONAI's "XYZ" order), shear coefficients (at most 6
  // used), translation in voxels (3 used), scale factors (3 used; the draw adds 1).
  std::vector<Range> rotate_range, shear_range, translate_range, scale_range;
  // Output size (D, H, W): empty for the input's, one value for every axis; entries <= 0 take
  // the input's (MONAI's fall_back_tuple).
  std::vector<int64_t> spatial_size;
  // "bilinear", "nearest", "bicubic" (cubic B-spline) or MONAI's integer modes "0" .. "5"
  // (spline orders; with padding_mode "zeros" they read scipy's 'constant', per input).
  std::string mode = "bilinear";
  std::string padding_mode = "reflection";  // "zeros", "border", "reflection"
  std::string field = "fast";               // "fast", "exact"
  std::string label_mode = "nearest";       // extras' mode (the image's names)
};

class Rand3DElastic {
 public:
  Rand3DElastic(std::pair<double, double> sigma_range, std::pair<double, double> magnitude_range,
                Rand3DElasticOptions options = {});
  // (batch, 3 + #range elements + 2) float64 CPU: per sample the gate uniform, magnitude and
  // sigma uniforms, the range uniforms, then the global sample index and the noise key
  // (Python's draw_params(batch, first_sample, seed)).
  at::Tensor draw_params(int64_t batch, int64_t first_sample, int64_t seed) const;
  DeformResult operator()(const at::Tensor& image, int64_t seed, int64_t first_sample = 0,
                          at::TensorList extras = {}, bool return_displacement = false) const;
  // Replays `params` from draw_params (rows for the image's batch: consecutive samples, or one
  // sample's row repeated, which gives every sample that sample's deformation).
  DeformResult apply(const at::Tensor& image, const at::Tensor& params, at::TensorList extras = {},
                     bool return_displacement = false) const;
  // The gather apply() runs for a batch of `batch` inputs of spatial size `size` on `device`.
  DeformPlan plan(int64_t batch, const std::array<int64_t, 3>& size, const at::Tensor& params,
                  const c10::Device& device) const;
  // A mode name of this transform's (mode / label_mode: "nearest", "bilinear", "bicubic") as
  // a kernel mode; `arg` names the argument in the error.
  static int64_t mode_code(const std::string& name, const char* arg = "mode");
  int64_t num_uniforms() const { return n_uniforms_; }

 private:
  std::pair<double, double> sigma_range_, magnitude_range_;
  Rand3DElasticOptions options_;
  int64_t n_uniforms_;
};

// MONAI GridDistortion: each axis split into num_cells cells stretched by distort_steps (num_cells
// + 1 values per axis), evaluated in the gather as a separable field. No randomness.
struct GridDistortionOptions {
  std::string mode = "bilinear";
  std::string padding_mode = "border";
  std::string label_mode = "nearest";
};

class GridDistortion {
 public:
  // num_cells: 1 value (every axis) or 3, each >= 1; distort_steps: 3 lists (d, h, w).
  GridDistortion(std::vector<int64_t> num_cells, std::vector<std::vector<double>> distort_steps,
                 GridDistortionOptions options = {});
  DeformResult operator()(const at::Tensor& image, at::TensorList extras = {},
                          bool return_displacement = false) const;
  DeformPlan plan(int64_t batch, const std::array<int64_t, 3>& size,
                  const c10::Device& device) const;
  static int64_t mode_code(const std::string& name, const char* arg = "mode");

 private:
  std::vector<int64_t> num_cells_;
  std::vector<std::vector<double>> distort_steps_;
  GridDistortionOptions options_;
};

// MONAI RandGridDistortion: with probability `prob` per sample, distort steps 1 + U(distort_limit)
// per cell boundary and axis.
struct RandGridDistortionOptions {
  std::vector<int64_t> num_cells = {5};  // 1 value or 3
  double prob = 0.1;
  std::vector<double> distort_limit = {-0.03, 0.03};  // (lo, hi), or one value d: (-|d|, |d|)
  std::string mode = "bilinear";
  std::string padding_mode = "border";
  std::string label_mode = "nearest";
};

class RandGridDistortion {
 public:
  explicit RandGridDistortion(RandGridDistortionOptions options = {});
  // (batch, 1 + sum(num_cells + 1) + 2) float64 CPU (Python's draw_params).
  at::Tensor draw_params(int64_t batch, int64_t first_sample, int64_t seed) const;
  DeformResult operator()(const at::Tensor& image, int64_t seed, int64_t first_sample = 0,
                          at::TensorList extras = {}, bool return_displacement = false) const;
  DeformResult apply(const at::Tensor& image, const at::Tensor& params, at::TensorList extras = {},
                     bool return_displacement = false) const;
  // The steps of each sample of `params` (3 lists of num_cells + 1), empty where not selected.
  std::vector<std::vector<std::vector<double>>> steps(const at::Tensor& params) const;
  DeformPlan plan(int64_t batch, const std::array<int64_t, 3>& size, const at::Tensor& params,
                  const c10::Device& device) const;
  static int64_t mode_code(const std::string& name, const char* arg = "mode");
  int64_t num_uniforms() const { return n_uniforms_; }

 private:
  RandGridDistortionOptions options_;
  std::vector<int64_t> num_cells_;
  double lo_, hi_;
  int64_t n_uniforms_;
};

// TorchIO RandomElasticDeformation: per sample (probability p) control-point displacements
// U(-max_displacement, max_displacement) mm per component on a (Kd, Kh, Kw) grid laid over the
// image as SimpleITK's BSplineTransformInitializer lays it (voxaug.deform.sitk_control_map), the
// outer locked_borders layers zeroed, evaluated as a cubic B-spline in the gather (mm -> voxels
// with `spacing`). Warns (TORCH_WARN, TorchIO's text) when max_displacement exceeds half the
// control spacing (possible folding). A max_displacement of all zeros returns the inputs as they
// are. The image uses image_interpolation, extras label_interpolation.
// Differences from TorchIO (as the Python class): displacement components along the array axes,
// padding with padding_mode ("border") instead of each channel's minimum.
struct RandomElasticDeformationOptions {
  std::vector<int64_t> num_control_points = {7};  // 1 value or 3, each >= 4
  std::vector<double> max_displacement = {7.5};   // mm, 1 value or 3, each >= 0
  int64_t locked_borders = 2;                     // 0, 1 or 2
  std::string image_interpolation = "linear";     // "nearest", "linear", "bspline" / "cubic"
  std::string label_interpolation = "nearest";
  double p = 1.0;
  std::vector<double> spacing = {1.0};  // mm per voxel (d, h, w): 1 value or 3, each > 0
  std::string padding_mode = "border";  // "zeros", "border", "reflection"
};

class RandomElasticDeformation {
 public:
  explicit RandomElasticDeformation(RandomElasticDeformationOptions options = {});
  // (batch, 3) float64 CPU: gate uniform, global sample index, noise key.
  at::Tensor draw_params(int64_t batch, int64_t first_sample, int64_t seed) const;
  DeformResult operator()(const at::Tensor& image, int64_t seed, int64_t first_sample = 0,
                          at::TensorList extras = {}, bool return_displacement = false) const;
  DeformResult apply(const at::Tensor& image, const at::Tensor& params, at::TensorList extras = {},
                     bool return_displacement = false) const;
  // Warns as apply() does (TorchIO's folding check for `size`).
  DeformPlan plan(int64_t batch, const std::array<int64_t, 3>& size, const at::Tensor& params,
                  const c10::Device& device) const;
  // TorchIO's interpolation names ("nearest", "linear", "bspline" / "cubic") as a kernel mode.
  static int64_t mode_code(const std::string& name, const char* arg = "image_interpolation");

 private:
  RandomElasticDeformationOptions options_;
  int64_t k_[3];
  double max_disp_[3], spacing_[3];
};

}  // namespace voxaug::transforms
