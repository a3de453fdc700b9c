// Test shim for the C++ deformation transforms (voxaug/deform_transforms.h): one op per class
// in torch.ops.voxaug_cxx_test_deform that builds the C++ object from its arguments and calls
// it, so tests/python/test_cxx_deform.py can compare the C++ API with the Python transforms and
// with MONAI / TorchIO / SimpleITK. Not part of the library.
//
// Random ranges travel as flat (lo, hi) pairs; distort_steps as a flat list with the number of
// values per axis. Each op returns (image, extras, [displacement] or [], params) where params
// is the transform's draw_params(N, first_sample, seed) (the random ones).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <vector>

#include "voxaug/deform_transforms.h"

namespace {

using voxaug::transforms::DeformResult;
using voxaug::transforms::Range;
using Out = std::tuple<at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor>;

std::vector<Range> pairs(const std::vector<double>& flat) {
  TORCH_CHECK_VALUE(flat.size() % 2 == 0, "ranges travel as (lo, hi) pairs, got ", flat.size(),
                    " values");
  std::vector<Range> out;
  for (size_t i = 0; i < flat.size(); i += 2) out.emplace_back(flat[i], flat[i + 1]);
  return out;
}

std::pair<double, double> pair_of(const std::vector<double>& v, const char* name) {
  TORCH_CHECK_VALUE(v.size() == 2, name, " must be (min, max), got ", v.size(), " values");
  return {v[0], v[1]};
}

std::vector<at::Tensor> field_list(const DeformResult& r) {
  return r.displacement.defined() ? std::vector<at::Tensor>{r.displacement}
                                  : std::vector<at::Tensor>{};
}

int64_t batch_of(const at::Tensor& image) {
  return image.dim() == 5 ? image.size(0) : 1;
}

Out rand3d_elastic(const at::Tensor& image, const std::vector<at::Tensor>& extras,
                   const std::vector<double>& sigma_range,
                   const std::vector<double>& magnitude_range, double prob,
                   const std::vector<double>& rotate_range, const std::vector<double>& shear_range,
                   const std::vector<double>& translate_range,
                   const std::vector<double>& scale_range, const std::vector<int64_t>& spatial_size,
                   const std::string& mode, const std::string& padding_mode,
                   const std::string& field, const std::string& label_mode, int64_t seed,
                   int64_t first_sample, bool return_displacement) {
  voxaug::transforms::Rand3DElasticOptions o;
  o.prob = prob;
  o.rotate_range = pairs(rotate_range);
  o.shear_range = pairs(shear_range);
  o.translate_range = pairs(translate_range);
  o.scale_range = pairs(scale_range);
  o.spatial_size = spatial_size;
  o.mode = mode;
  o.padding_mode = padding_mode;
  o.field = field;
  o.label_mode = label_mode;
  const voxaug::transforms::Rand3DElastic t(pair_of(sigma_range, "sigma_range"),
                                            pair_of(magnitude_range, "magnitude_range"), o);
  const DeformResult r = t(image, seed, first_sample, extras, return_displacement);
  return {r.image, r.extras, field_list(r), t.draw_params(batch_of(image), first_sample, seed)};
}

Out grid_distortion(const at::Tensor& image, const std::vector<at::Tensor>& extras,
                    const std::vector<int64_t>& num_cells, const std::vector<int64_t>& step_counts,
                    const std::vector<double>& steps_flat, const std::string& mode,
                    const std::string& padding_mode, const std::string& label_mode,
                    bool return_displacement) {
  std::vector<std::vector<double>> steps;
  size_t at = 0;
  for (int64_t c : step_counts) {
    TORCH_CHECK_VALUE(c >= 0 && at + static_cast<size_t>(c) <= steps_flat.size(),
                      "step_counts do not match the flat steps");
    steps.emplace_back(steps_flat.begin() + at, steps_flat.begin() + at + c);
    at += static_cast<size_t>(c);
  }
  voxaug::transforms::GridDistortionOptions o;
  o.mode = mode;
  o.padding_mode = padding_mode;
  o.label_mode = label_mode;
  const voxaug::transforms::GridDistortion t(num_cells, steps, o);
  const DeformResult r = t(image, extras, return_displacement);
  return {r.image, r.extras, field_list(r), at::empty({0}, at::kDouble)};
}

Out rand_grid_distortion(const at::Tensor& image, const std::vector<at::Tensor>& extras,
                         const std::vector<int64_t>& num_cells, double prob,
                         const std::vector<double>& distort_limit, const std::string& mode,
                         const std::string& padding_mode, const std::string& label_mode,
                         int64_t seed, int64_t first_sample, bool return_displacement) {
  voxaug::transforms::RandGridDistortionOptions o;
  o.num_cells = num_cells;
  o.prob = prob;
  o.distort_limit = distort_limit;
  o.mode = mode;
  o.padding_mode = padding_mode;
  o.label_mode = label_mode;
  const voxaug::transforms::RandGridDistortion t(o);
  const DeformResult r = t(image, seed, first_sample, extras, return_displacement);
  return {r.image, r.extras, field_list(r), t.draw_params(batch_of(image), first_sample, seed)};
}

Out random_elastic_deformation(const at::Tensor& image, const std::vector<at::Tensor>& extras,
                               const std::vector<int64_t>& num_control_points,
                               const std::vector<double>& max_displacement, int64_t locked_borders,
                               const std::string& image_interpolation,
                               const std::string& label_interpolation, double p,
                               const std::vector<double>& spacing, const std::string& padding_mode,
                               int64_t seed, int64_t first_sample, bool return_displacement) {
  voxaug::transforms::RandomElasticDeformationOptions o;
  o.num_control_points = num_control_points;
  o.max_displacement = max_displacement;
  o.locked_borders = locked_borders;
  o.image_interpolation = image_interpolation;
  o.label_interpolation = label_interpolation;
  o.p = p;
  o.spacing = spacing;
  o.padding_mode = padding_mode;
  const voxaug::transforms::RandomElasticDeformation t(o);
  const DeformResult r = t(image, seed, first_sample, extras, return_displacement);
  return {r.image, r.extras, field_list(r), t.draw_params(batch_of(image), first_sample, seed)};
}

// Replays given params (apply) instead of drawing them from a seed.
std::tuple<at::Tensor, std::vector<at::Tensor>> rand3d_elastic_apply(
    const at::Tensor& image, const at::Tensor& params, const std::vector<double>& sigma_range,
    const std::vector<double>& magnitude_range, double prob, const std::string& field) {
  voxaug::transforms::Rand3DElasticOptions o;
  o.prob = prob;
  o.field = field;
  const voxaug::transforms::Rand3DElastic t(pair_of(sigma_range, "sigma_range"),
                                            pair_of(magnitude_range, "magnitude_range"), o);
  const DeformResult r = t.apply(image, params, {}, true);
  return {r.image, field_list(r)};
}

}  // namespace

TORCH_LIBRARY(voxaug_cxx_test_deform, m) {
  m.def(
      "rand3d_elastic(Tensor image, Tensor[] extras, float[] sigma_range, float[] magnitude_range, "
      "float prob, float[] rotate_range, float[] shear_range, float[] translate_range, "
      "float[] scale_range, int[] spatial_size, str mode, str padding_mode, str field, "
      "str label_mode, int seed, int first_sample, bool return_displacement) "
      "-> (Tensor, Tensor[], Tensor[], Tensor)",
      &rand3d_elastic);
  m.def(
      "rand3d_elastic_apply(Tensor image, Tensor params, float[] sigma_range, "
      "float[] magnitude_range, float prob, str field) -> (Tensor, Tensor[])",
      &rand3d_elastic_apply);
  m.def(
      "grid_distortion(Tensor image, Tensor[] extras, int[] num_cells, int[] step_counts, "
      "float[] steps, str mode, str padding_mode, str label_mode, bool return_displacement) "
      "-> (Tensor, Tensor[], Tensor[], Tensor)",
      &grid_distortion);
  m.def(
      "rand_grid_distortion(Tensor image, Tensor[] extras, int[] num_cells, float prob, "
      "float[] distort_limit, str mode, str padding_mode, str label_mode, int seed, "
      "int first_sample, bool return_displacement) -> (Tensor, Tensor[], Tensor[], Tensor)",
      &rand_grid_distortion);
  m.def(
      "random_elastic_deformation(Tensor image, Tensor[] extras, int[] num_control_points, "
      "float[] max_displacement, int locked_borders, str image_interpolation, "
      "str label_interpolation, float p, float[] spacing, str padding_mode, int seed, "
      "int first_sample, bool return_displacement) -> (Tensor, Tensor[], Tensor[], Tensor)",
      &random_elastic_deformation);
}
