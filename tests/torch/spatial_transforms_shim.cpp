// torch.ops.voxaug_cxx_test_spatial: test-only ops that construct the C++ spatial transforms
// (torch_ext/include/voxaug/spatial_transforms.h; Compose: compose.h) and call them, so that
// tests/python/test_cxx_spatial.py can compare them with MONAI and with python/voxaug/spatial.py.
// Each op returns (outputs, affine, maps, meta); the random ones (rand_flip, rand_axis_flip,
// rand_rotate90, rand_rotate, rand_affine, rand_zoom) also return their draw (uniforms, gates,
// per-sample parameters); rand_affine_matrices returns a draw's centred matrices. Constructor
// arguments added later are keyword arguments at the end of each schema (earlier positional calls
// unchanged); Affine's own matrix is `affine_matrix` (`affine` is the inputs' affine), and the
// interpolate transforms' MONAI dtype is `dtype` (None: float32, MONAI's default) with
// `dtype_of_input` (MONAI's dtype=None: each input's own).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "voxaug/compose.h"

namespace {
namespace vt = voxaug::transforms;

using OptModes = std::optional<std::vector<std::string>>;  // str[]? (None: each transform's mode)
using Out = std::tuple<std::vector<at::Tensor>, at::Tensor, at::Tensor, at::Tensor>;
using RandOut = std::tuple<std::vector<at::Tensor>, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, std::vector<at::Tensor>>;

std::vector<int64_t> ints(c10::IntArrayRef v) {
  return {v.begin(), v.end()};
}
std::vector<double> floats(c10::ArrayRef<double> v) {
  return {v.begin(), v.end()};
}
std::optional<at::ScalarType> monai_dtype(std::optional<at::ScalarType> dtype, bool of_input) {
  if (of_input) return std::nullopt;
  return dtype.value_or(at::kFloat);
}
std::array<int64_t, 2> pair(c10::IntArrayRef v) {
  TORCH_CHECK_VALUE(v.size() == 2, "spatial_axes must be 2 axes, got ", v.size());
  return {v[0], v[1]};
}
Out pack(const vt::Result& r) {
  return {r.outputs, r.affine, r.maps, r.meta};
}
RandOut pack(const vt::Result& r, const vt::Draw& d) {
  at::Tensor gates = at::empty({static_cast<int64_t>(d.gates.size())}, at::kBool);
  for (size_t i = 0; i < d.gates.size(); ++i) gates[i] = static_cast<bool>(d.gates[i]);
  std::vector<at::Tensor> params;
  for (const auto& p : d.params) params.push_back(at::tensor(p, at::kDouble).reshape({-1}));
  return {r.outputs, r.affine, r.maps, r.meta, d.uniforms, gates, params};
}
// A range list: paired ? (lo, hi) pairs : one f per element (U(-f, f)).
std::vector<vt::Range> ranges(c10::ArrayRef<double> v, bool paired) {
  std::vector<vt::Range> out;
  if (paired) {
    TORCH_CHECK_VALUE(v.size() % 2 == 0, "paired ranges need an even count, got ", v.size());
    for (size_t i = 0; i < v.size(); i += 2) out.emplace_back(v[i], v[i + 1]);
  } else {
    for (double f : v) out.emplace_back(f);
  }
  return out;
}
vt::Range range(c10::ArrayRef<double> v) {
  TORCH_CHECK_VALUE(v.size() == 1 || v.size() == 2, "a range is 1 or 2 numbers, got ", v.size());
  return v.size() == 1 ? vt::Range(v[0]) : vt::Range(v[0], v[1]);
}
// The random call: operator() with the seed, and the same seed's draw() returned for reading.
template <class T>
RandOut call_random(T& t, at::TensorList inputs, int64_t seed, int64_t first_sample, bool share,
                    const OptModes& modes, const std::optional<at::Tensor>& affine) {
  t.share_batch_params(share);
  const vt::Result r = t(inputs, seed, first_sample, modes.value_or(vt::Modes{}), affine);
  const int64_t n = inputs.empty() ? 0 : (inputs[0].dim() == 5 ? inputs[0].size(0) : 1);
  return pack(r, t.draw(n, seed, first_sample));
}

Out flip(at::TensorList inputs, c10::IntArrayRef axis, const OptModes& modes,
         const std::optional<at::Tensor>& affine) {
  return pack(vt::Flip(ints(axis))(inputs, modes.value_or(vt::Modes{}), affine));
}
Out rotate90(at::TensorList inputs, int64_t k, c10::IntArrayRef axes, const OptModes& modes,
             const std::optional<at::Tensor>& affine) {
  return pack(vt::Rotate90(k, pair(axes))(inputs, modes.value_or(vt::Modes{}), affine));
}
Out affine_op(at::TensorList inputs, c10::ArrayRef<double> rotate, c10::ArrayRef<double> shear,
              c10::ArrayRef<double> translate, c10::ArrayRef<double> scale,
              c10::IntArrayRef spatial_size, c10::string_view mode, c10::string_view padding,
              bool align_corners, const OptModes& modes, const std::optional<at::Tensor>& affine,
              const std::optional<at::Tensor>& affine_matrix, bool normalized,
              c10::string_view rotate_order) {
  vt::Affine t(floats(rotate), floats(shear), floats(translate), floats(scale), ints(spatial_size),
               std::string(mode), std::string(padding), align_corners, affine_matrix, normalized,
               std::string(rotate_order));
  return pack(t(inputs, modes.value_or(vt::Modes{}), affine));
}
Out rotate(at::TensorList inputs, c10::ArrayRef<double> angle, bool keep_size,
           c10::string_view mode, c10::string_view padding, bool align_corners,
           const OptModes& modes, const std::optional<at::Tensor>& affine,
           c10::string_view rotate_order) {
  vt::Rotate t(floats(angle), keep_size, std::string(mode), std::string(padding), align_corners,
               std::string(rotate_order));
  return pack(t(inputs, modes.value_or(vt::Modes{}), affine));
}
Out resize(at::TensorList inputs, c10::IntArrayRef spatial_size, c10::string_view mode,
           const OptModes& modes, const std::optional<at::Tensor>& affine,
           c10::string_view size_mode, std::optional<bool> align_corners, bool anti_aliasing,
           c10::ArrayRef<double> anti_aliasing_sigma, std::optional<at::ScalarType> dtype,
           bool dtype_of_input) {
  vt::Resize t(ints(spatial_size), std::string(mode), std::string(size_mode), align_corners,
               anti_aliasing, floats(anti_aliasing_sigma), monai_dtype(dtype, dtype_of_input));
  return pack(t(inputs, modes.value_or(vt::Modes{}), affine));
}
Out zoom(at::TensorList inputs, c10::ArrayRef<double> factors, c10::string_view mode,
         bool keep_size, c10::string_view padding, const OptModes& modes,
         const std::optional<at::Tensor>& affine, std::optional<bool> align_corners,
         double pad_value, std::optional<at::ScalarType> dtype, bool dtype_of_input) {
  vt::Zoom t(floats(factors), std::string(mode), keep_size, std::string(padding), align_corners,
             pad_value, monai_dtype(dtype, dtype_of_input));
  return pack(t(inputs, modes.value_or(vt::Modes{}), affine));
}
Out spacing(at::TensorList inputs, c10::ArrayRef<double> pixdim, c10::string_view mode,
            c10::string_view padding, bool align_corners, bool diagonal, bool scale_extent,
            const OptModes& modes, const std::optional<at::Tensor>& affine, bool recompute_affine,
            c10::ArrayRef<double> min_pixdim, c10::ArrayRef<double> max_pixdim,
            c10::IntArrayRef output_spatial_shape) {
  vt::Spacing t(floats(pixdim), std::string(mode), std::string(padding), align_corners, diagonal,
                scale_extent, recompute_affine, floats(min_pixdim), floats(max_pixdim),
                ints(output_spatial_shape));
  return pack(t(inputs, modes.value_or(vt::Modes{}), affine));
}
// labels: flattened pairs (start, end, start, end, ...); None: nibabel's default labels.
Out orientation(at::TensorList inputs, c10::string_view axcodes, bool canonical,
                const OptModes& modes, const std::optional<at::Tensor>& affine,
                const std::optional<std::vector<std::string>>& flat_labels) {
  const std::vector<std::string> labels = flat_labels.value_or(std::vector<std::string>{});
  TORCH_CHECK_VALUE(labels.size() % 2 == 0, "labels must be flattened pairs, got ", labels.size());
  vt::Labels pairs;
  for (size_t i = 0; i < labels.size(); i += 2) pairs.push_back({labels[i], labels[i + 1]});
  return pack(vt::Orientation(std::string(axcodes), canonical, pairs)(
      inputs, modes.value_or(vt::Modes{}), affine));
}

RandOut rand_flip(at::TensorList inputs, double prob, c10::IntArrayRef axis, int64_t seed,
                  int64_t first_sample, bool share, const OptModes& modes,
                  const std::optional<at::Tensor>& affine) {
  vt::RandFlip t(prob, ints(axis));
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
RandOut rand_axis_flip(at::TensorList inputs, double prob, int64_t seed, int64_t first_sample,
                       bool share, const OptModes& modes, const std::optional<at::Tensor>& affine) {
  vt::RandAxisFlip t(prob);
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
RandOut rand_rotate90(at::TensorList inputs, double prob, int64_t max_k, c10::IntArrayRef axes,
                      int64_t seed, int64_t first_sample, bool share, const OptModes& modes,
                      const std::optional<at::Tensor>& affine) {
  vt::RandRotate90 t(prob, max_k, pair(axes));
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
RandOut rand_rotate(at::TensorList inputs, c10::ArrayRef<double> range_x,
                    c10::ArrayRef<double> range_y, c10::ArrayRef<double> range_z, double prob,
                    bool keep_size, c10::string_view mode, c10::string_view padding,
                    bool align_corners, int64_t seed, int64_t first_sample, bool share,
                    const OptModes& modes, const std::optional<at::Tensor>& affine) {
  vt::RandRotate t(range(range_x), range(range_y), range(range_z), prob, keep_size,
                   std::string(mode), std::string(padding), align_corners);
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
RandOut rand_affine(at::TensorList inputs, double prob, c10::ArrayRef<double> rotate_range,
                    c10::ArrayRef<double> shear_range, c10::ArrayRef<double> translate_range,
                    c10::ArrayRef<double> scale_range, c10::IntArrayRef paired,
                    c10::IntArrayRef spatial_size, c10::string_view mode, c10::string_view padding,
                    int64_t seed, int64_t first_sample, bool share, const OptModes& modes,
                    const std::optional<at::Tensor>& affine) {
  TORCH_CHECK_VALUE(paired.size() == 4, "paired must have 4 flags, got ", paired.size());
  vt::RandAffine t(prob, ranges(rotate_range, paired[0]), ranges(shear_range, paired[1]),
                   ranges(translate_range, paired[2]), ranges(scale_range, paired[3]),
                   ints(spatial_size), std::string(mode), std::string(padding));
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
RandOut rand_zoom(at::TensorList inputs, double prob, c10::ArrayRef<double> min_zoom,
                  c10::ArrayRef<double> max_zoom, c10::string_view mode, c10::string_view padding,
                  std::optional<bool> align_corners, bool keep_size, double pad_value, int64_t seed,
                  int64_t first_sample, bool share, const OptModes& modes,
                  const std::optional<at::Tensor>& affine, std::optional<at::ScalarType> dtype,
                  bool dtype_of_input) {
  vt::RandZoom t(prob, floats(min_zoom), floats(max_zoom), std::string(mode), std::string(padding),
                 align_corners, keep_size, pad_value, monai_dtype(dtype, dtype_of_input));
  return call_random(t, inputs, seed, first_sample, share, modes, affine);
}
at::Tensor rand_affine_matrices(int64_t batch, double prob, c10::ArrayRef<double> rotate_range,
                                c10::ArrayRef<double> shear_range,
                                c10::ArrayRef<double> translate_range,
                                c10::ArrayRef<double> scale_range, c10::IntArrayRef paired,
                                int64_t seed, int64_t first_sample) {
  TORCH_CHECK_VALUE(paired.size() == 4, "paired must have 4 flags, got ", paired.size());
  vt::RandAffine t(prob, ranges(rotate_range, paired[0]), ranges(shear_range, paired[1]),
                   ranges(translate_range, paired[2]), ranges(scale_range, paired[3]));
  return t.centred_matrices(t.draw(batch, seed, first_sample));
}

// A Compose step from its spec: "name[:opt[:opt]]" and its numbers (see test_cxx_compose.py).
std::vector<std::string> split(const std::string& spec) {
  std::vector<std::string> out;
  size_t s = 0;
  for (size_t e; (e = spec.find(':', s)) != std::string::npos; s = e + 1)
    out.push_back(spec.substr(s, e - s));
  out.push_back(spec.substr(s));
  return out;
}
std::vector<double> slice(const std::vector<double>& v, size_t b, size_t e) {
  return {v.begin() + static_cast<std::ptrdiff_t>(std::min(b, v.size())),
          v.begin() + static_cast<std::ptrdiff_t>(std::min(e, v.size()))};
}
std::vector<int64_t> as_ints(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}
std::vector<vt::Range> as_ranges(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}
vt::Step make_step(const std::string& spec, const std::vector<double>& a, bool share) {
  const std::vector<std::string> p = split(spec);
  const std::string& name = p[0];
  const auto opt = [&](size_t i, const char* fallback) {
    return i < p.size() ? p[i] : std::string(fallback);
  };
  const auto set_share = [share](auto t) {
    t.share_batch_params(share);
    return t;
  };
  if (name == "flip") return vt::Flip(as_ints(a));
  if (name == "rand_flip") return set_share(vt::RandFlip(a.at(0), as_ints(slice(a, 1, a.size()))));
  if (name == "rand_axis_flip") return set_share(vt::RandAxisFlip(a.at(0)));
  if (name == "rotate90")
    return vt::Rotate90(static_cast<int64_t>(a.at(0)),
                        {static_cast<int64_t>(a.at(1)), static_cast<int64_t>(a.at(2))});
  if (name == "rand_rotate90")
    return set_share(
        vt::RandRotate90(a.at(0), static_cast<int64_t>(a.at(1)),
                         {static_cast<int64_t>(a.at(2)), static_cast<int64_t>(a.at(3))}));
  if (name == "affine")  // rotate 3, shear 6, translate 3, scale 3, [spatial_size 3]
    return vt::Affine(slice(a, 0, 3), slice(a, 3, 9), slice(a, 9, 12), slice(a, 12, 15),
                      as_ints(slice(a, 15, 18)), opt(1, "bilinear"), opt(2, "reflection"),
                      opt(3, "") == "align");
  if (name == "rand_affine")  // prob, then the same ranges (f: U(-f, f)), [spatial_size 3]
    return set_share(vt::RandAffine(a.at(0), as_ranges(slice(a, 1, 4)), as_ranges(slice(a, 4, 10)),
                                    as_ranges(slice(a, 10, 13)), as_ranges(slice(a, 13, 16)),
                                    as_ints(slice(a, 16, 19)), opt(1, "bilinear"),
                                    opt(2, "reflection")));
  if (name == "rotate")  // 3 angles, keep_size
    return vt::Rotate(slice(a, 0, 3), a.at(3) != 0, opt(1, "bilinear"), opt(2, "border"),
                      opt(3, "") == "align");
  if (name == "rand_rotate")  // range_x, range_y, range_z, prob, keep_size
    return set_share(vt::RandRotate(a.at(0), a.at(1), a.at(2), a.at(3), a.at(4) != 0,
                                    opt(1, "bilinear"), opt(2, "border"), opt(3, "") == "align"));
  if (name == "resize") return vt::Resize(as_ints(a), opt(1, "area"));
  if (name == "zoom")  // 3 factors, keep_size
    return vt::Zoom(slice(a, 0, 3), opt(1, "area"), a.at(3) != 0, opt(2, "edge"));
  if (name == "rand_zoom")  // prob, min, max, keep_size
    return set_share(vt::RandZoom(a.at(0), {a.at(1)}, {a.at(2)}, opt(1, "area"), opt(2, "edge"),
                                  std::nullopt, a.at(3) != 0));
  if (name == "spacing")  // pixdim 3, [recompute_affine]
    return vt::Spacing(slice(a, 0, 3), opt(1, "bilinear"), opt(2, "border"), false, false, false,
                       a.size() > 3 && a[3] != 0);
  if (name == "orientation") return vt::Orientation(opt(1, "RAS"));
  if (name == "spatial_crop")
    return vt::SpatialCrop(as_ints(slice(a, 0, 3)), as_ints(slice(a, 3, 6)));
  if (name == "spatial_crop_centered")
    return vt::SpatialCrop::centered(as_ints(slice(a, 0, 3)), as_ints(slice(a, 3, 6)));
  if (name == "center_crop") return vt::CenterSpatialCrop(as_ints(a));
  // Deformations. rand_elastic3d:mode:padding:field: prob, sigma (lo, hi), magnitude (lo, hi),
  // [rotate 3, translate 3, scale 3 (f: U(-f, f)), [spatial_size 3]].
  if (name == "rand_elastic3d") {
    vt::Rand3DElasticOptions o;
    o.prob = a.at(0);
    o.rotate_range = as_ranges(slice(a, 5, 8));
    o.translate_range = as_ranges(slice(a, 8, 11));
    o.scale_range = as_ranges(slice(a, 11, 14));
    o.spatial_size = as_ints(slice(a, 14, 17));
    o.mode = opt(1, "bilinear");
    o.padding_mode = opt(2, "reflection");
    o.field = opt(3, "fast");
    return vt::Rand3DElastic({a.at(1), a.at(2)}, {a.at(3), a.at(4)}, o);
  }
  if (name == "grid_distortion") {  // num_cells, then 3 x (num_cells + 1) steps
    const auto cells = static_cast<int64_t>(a.at(0));
    std::vector<std::vector<double>> st;
    for (size_t ax = 0; ax < 3; ++ax)
      st.push_back(slice(a, 1 + ax * (cells + 1), 1 + (ax + 1) * (cells + 1)));
    return vt::GridDistortion({cells}, st, {opt(1, "bilinear"), opt(2, "border"), "nearest"});
  }
  if (name == "rand_grid_distortion") {  // num_cells, prob, distort_limit (lo, hi)
    vt::RandGridDistortionOptions o;
    o.num_cells = {static_cast<int64_t>(a.at(0))};
    o.prob = a.at(1);
    o.distort_limit = {a.at(2), a.at(3)};
    o.mode = opt(1, "bilinear");
    o.padding_mode = opt(2, "border");
    return vt::RandGridDistortion(o);
  }
  if (name == "rand_elastic") {  // TorchIO's: num_control_points, max_displacement, locked, p
    vt::RandomElasticDeformationOptions o;
    o.num_control_points = {static_cast<int64_t>(a.at(0))};
    o.max_displacement = {a.at(1)};
    o.locked_borders = static_cast<int64_t>(a.at(2));
    o.p = a.at(3);
    o.image_interpolation = opt(1, "linear");
    o.padding_mode = opt(2, "border");
    return vt::RandomElasticDeformation(o);
  }
  TORCH_CHECK_VALUE(false, "unknown step '", spec, "'");
}
// Compose: steps[j] with args[offsets[j]:offsets[j + 1]]. Returns (outputs, affine, maps, meta,
// groups (G, 2), per-step seeds (step_seed), single_map).
std::tuple<std::vector<at::Tensor>, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
           bool>
compose(at::TensorList inputs, const std::vector<std::string>& steps, c10::ArrayRef<double> args,
        c10::IntArrayRef offsets, int64_t seed, int64_t first_sample, bool lazy, bool share,
        const OptModes& modes, const std::optional<at::Tensor>& affine) {
  TORCH_CHECK_VALUE(offsets.size() == steps.size() + 1, "offsets must have steps + 1 entries");
  std::vector<vt::Step> list;
  for (size_t j = 0; j < steps.size(); ++j)
    list.push_back(
        make_step(steps[j], floats(args.slice(offsets[j], offsets[j + 1] - offsets[j])), share));
  const vt::Compose c(std::move(list), lazy);
  const vt::ComposeResult r = c(inputs, seed, first_sample, modes.value_or(vt::Modes{}), affine);
  at::Tensor groups = at::empty({static_cast<int64_t>(r.groups.size()), 2}, at::kLong);
  for (size_t g = 0; g < r.groups.size(); ++g)
    groups[g][0] = r.groups[g].first, groups[g][1] = r.groups[g].second;
  std::vector<int64_t> seeds;
  for (size_t j = 0; j < steps.size(); ++j) seeds.push_back(vt::Compose::step_seed(seed, j));
  return {r.outputs, r.affine, r.maps, r.meta, groups, at::tensor(seeds, at::kLong), r.single_map};
}
// A single transform's Result launch description (what Compose plans with).
std::tuple<bool, bool, int64_t, int64_t, bool> describe(at::TensorList inputs,
                                                        c10::string_view step,
                                                        c10::ArrayRef<double> args, int64_t seed,
                                                        const OptModes& modes,
                                                        const std::optional<at::Tensor>& affine) {
  const vt::Compose c({make_step(std::string(step), floats(args), false)});
  const int64_t n = inputs.at(0).dim() == 5 ? inputs[0].size(0) : 1;
  const vt::Draw d = c.draw(n, seed).at(0);
  const vt::Result r = std::visit(
      [&](const auto& t) -> vt::Result {
        using T = std::decay_t<decltype(t)>;
        if constexpr (std::is_same_v<T, vt::Rand3DElastic> ||
                      std::is_same_v<T, vt::GridDistortion> ||
                      std::is_same_v<T, vt::RandGridDistortion> ||
                      std::is_same_v<T, vt::RandomElasticDeformation>) {
          TORCH_CHECK_VALUE(false, "describe takes spatial steps, got '", step, "'");
          return {};
        } else if constexpr (std::is_base_of_v<vt::RandomTransform, T>) {
          return t.apply(inputs, d, modes.value_or(vt::Modes{}), affine);
        } else {
          return t(inputs, modes.value_or(vt::Modes{}), affine);
        }
      },
      c.steps()[0]);
  return {r.single_map, r.exact, r.kernel_mode, r.padding, r.align_corners};
}

}  // namespace

TORCH_LIBRARY(voxaug_cxx_test_spatial, m) {
  const std::string out = " -> (Tensor[], Tensor, Tensor, Tensor)";
  const std::string rand_out = " -> (Tensor[], Tensor, Tensor, Tensor, Tensor, Tensor, Tensor[])";
  const std::string tail = "str[]? modes=None, Tensor? affine=None)";
  auto def = [&m](const std::string& schema, auto fn) { m.def(schema.c_str(), fn); };
  // The arguments added after `affine` keep the earlier calls' positions.
  const std::string open_tail = "str[]? modes=None, Tensor? affine=None, ";
  const std::string dtype_args = "ScalarType? dtype=None, bool dtype_of_input=False";
  def("flip(Tensor[] inputs, int[] spatial_axis, " + tail + out, &flip);
  def("rotate90(Tensor[] inputs, int k, int[] spatial_axes, " + tail + out, &rotate90);
  def("affine(Tensor[] inputs, float[] rotate_params, float[] shear_params, "
      "float[] translate_params, float[] scale_params, int[] spatial_size, str mode, "
      "str padding_mode, bool align_corners, " +
          open_tail +
          "Tensor? affine_matrix=None, bool normalized=False, str rotate_order=\"XYZ\")" + out,
      &affine_op);
  def("rotate(Tensor[] inputs, float[] angle, bool keep_size, str mode, str padding_mode, "
      "bool align_corners, " +
          open_tail + "str rotate_order=\"XYZ\")" + out,
      &rotate);
  def("resize(Tensor[] inputs, int[] spatial_size, str mode, " + open_tail +
          "str size_mode=\"all\", bool? align_corners=None, bool anti_aliasing=False, "
          "float[] anti_aliasing_sigma=[], " +
          dtype_args + ")" + out,
      &resize);
  def("zoom(Tensor[] inputs, float[] zoom, str mode, bool keep_size, str padding_mode, " +
          open_tail + "bool? align_corners=None, float pad_value=0.0, " + dtype_args + ")" + out,
      &zoom);
  def("spacing(Tensor[] inputs, float[] pixdim, str mode, str padding_mode, bool align_corners, "
      "bool diagonal, bool scale_extent, " +
          open_tail +
          "bool recompute_affine=False, float[] min_pixdim=[], float[] max_pixdim=[], "
          "int[] output_spatial_shape=[])" +
          out,
      &spacing);
  def("orientation(Tensor[] inputs, str axcodes, bool as_closest_canonical, " + open_tail +
          "str[]? labels=None)" + out,
      &orientation);
  def("rand_flip(Tensor[] inputs, float prob, int[] spatial_axis, int seed, int first_sample, "
      "bool share, " +
          tail + rand_out,
      &rand_flip);
  def("rand_axis_flip(Tensor[] inputs, float prob, int seed, int first_sample, bool share, " +
          tail + rand_out,
      &rand_axis_flip);
  def("rand_rotate90(Tensor[] inputs, float prob, int max_k, int[] spatial_axes, int seed, "
      "int first_sample, bool share, " +
          tail + rand_out,
      &rand_rotate90);
  def("rand_rotate(Tensor[] inputs, float[] range_x, float[] range_y, float[] range_z, "
      "float prob, bool keep_size, str mode, str padding_mode, bool align_corners, int seed, "
      "int first_sample, bool share, " +
          tail + rand_out,
      &rand_rotate);
  def("rand_affine(Tensor[] inputs, float prob, float[] rotate_range, float[] shear_range, "
      "float[] translate_range, float[] scale_range, int[] paired, int[] spatial_size, "
      "str mode, str padding_mode, int seed, int first_sample, bool share, " +
          tail + rand_out,
      &rand_affine);
  def("rand_zoom(Tensor[] inputs, float prob, float[] min_zoom, float[] max_zoom, str mode, "
      "str padding_mode, bool? align_corners, bool keep_size, float pad_value, int seed, "
      "int first_sample, bool share, " +
          open_tail + dtype_args + ")" + rand_out,
      &rand_zoom);
  def("rand_affine_matrices(int batch, float prob, float[] rotate_range, float[] shear_range, "
      "float[] translate_range, float[] scale_range, int[] paired, int seed, int first_sample) "
      "-> Tensor",
      &rand_affine_matrices);
  def("compose(Tensor[] inputs, str[] steps, float[] args, int[] offsets, int seed, "
      "int first_sample, bool lazy, bool share, " +
          tail + " -> (Tensor[], Tensor, Tensor, Tensor, Tensor, Tensor, bool)",
      &compose);
  def("describe(Tensor[] inputs, str step, float[] args, int seed, " + tail +
          " -> (bool, bool, int, int, bool)",
      &describe);
}
