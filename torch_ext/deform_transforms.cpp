// voxaug::transforms -- the C++ deformation transforms (voxaug/deform_transforms.h): a port of
// the parameter plumbing of python/voxaug/deform.py (and of the affine part it shares with
// RandAffine, python/voxaug/spatial.py). The math on the data is the ops' (resample_deformed,
// deform_field_dense, uniform_fill_, gaussian_smooth), called through the dispatcher; this file
// only builds their arguments, in the Python package's order of operations so that the bytes
// agree: host parameters in double precision (Philox uniforms from philox_uniform), per-sample
// factors rounded to float32 as torch.tensor(..., dtype=float32) rounds them, the noise drawn on
// the data's device with Python's keys.
#include "voxaug/deform_transforms.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>

#include "transform_common.h"
#include "voxaug/torch_ops.h"

namespace voxaug::transforms {
namespace {

using namespace common;  // NOLINT(google-build-using-namespace): the shared map helpers

// Field kinds and kernel codes of the deform / resample ops (python/voxaug/ops.py).
constexpr int64_t kBSplineField = 1, kDenseField = 2, kSeparableField = 3;
constexpr int64_t kNearest = 0, kLinear = 1, kCubic = 2;
constexpr size_t kMaxTargets = 4;  // kMaxResampleTargets (include/voxaug/resample.h)
// Mean over positions of sum_k B3(t - k)^2: the order-7 B-spline at 0 (deform.py).
constexpr double kBSplineSqMean = 151.0 / 315.0;

template <class Sig>
c10::TypedOperatorHandle<Sig> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

void uniform_fill_(const at::Tensor& out, double low, double high, int64_t seed,
                   int64_t first_sample) {
  static auto op =
      handle<void(const at::Tensor&, double, double, int64_t, int64_t)>("voxaug::uniform_fill_");
  op.call(out, low, high, seed, first_sample);
}

std::vector<at::Tensor> resample_deformed(at::TensorList inputs, const at::Tensor& matrices,
                                          const at::Tensor& field, int64_t kind,
                                          at::ArrayRef<double> scale, at::ArrayRef<double> offset,
                                          at::IntArrayRef out_size, at::IntArrayRef modes,
                                          at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                          const std::optional<at::Tensor>& field_map) {
  static auto op = handle<std::vector<at::Tensor>(
      at::TensorList, const at::Tensor&, const at::Tensor&, int64_t, at::ArrayRef<double>,
      at::ArrayRef<double>, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>,
      bool, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)>(
      "voxaug::resample_deformed");
  return op.call(inputs, matrices, field, kind, scale, offset, out_size, modes, paddings,
                 pad_values, false, field_map, std::nullopt);
}

at::Tensor deform_field_dense(const at::Tensor& field, int64_t kind, at::ArrayRef<double> scale,
                              at::ArrayRef<double> offset, at::IntArrayRef out_size,
                              const std::optional<at::Tensor>& field_map) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, int64_t, at::ArrayRef<double>, at::ArrayRef<double>,
                        at::IntArrayRef, std::optional<c10::ScalarType>,
                        const std::optional<at::Tensor>&)>("voxaug::deform_field_dense");
  return op.call(field, kind, scale, offset, out_size, std::nullopt, field_map);
}

// ---------------- argument checks ----------------
int64_t torchio_mode(const std::string& mode, const char* name) {
  if (mode == "nearest") return kNearest;
  if (mode == "linear") return kLinear;
  if (mode == "bspline" || mode == "cubic") return kCubic;
  TORCH_CHECK_VALUE(false, name, " must be one of 'bspline', 'cubic', 'linear', 'nearest', got '",
                    mode, "'");
  return 0;
}

// ---------------- maps ----------------
// (N, 3, 4) float64 CPU: the first 3 rows of each map.
at::Tensor stack_maps(const std::vector<M4>& maps) {
  const int64_t n = static_cast<int64_t>(maps.size());
  at::Tensor out = at::empty({n, 3, 4}, at::TensorOptions().dtype(at::kDouble));
  double* p = out.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) std::copy(maps[i].begin(), maps[i].begin() + 12, p + 12 * i);
  return out;
}

// ---------------- the Python package's per-sample draws (deform.py _RandomDeform) ----------------
at::Tensor draw(int64_t batch, int64_t first_sample, int64_t seed, int64_t k) {
  TORCH_CHECK_VALUE(batch >= 0, "batch must be >= 0, got ", batch);
  TORCH_CHECK_VALUE(first_sample >= 0, "first_sample must be >= 0, got ", first_sample);
  const at::Tensor u = ops::philox_uniform(seed, first_sample, batch, k);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor ids =
      at::arange(static_cast<double>(first_sample), static_cast<double>(first_sample + batch), f64)
          .view({batch, 1});
  // The noise key: a 52-bit integer (exact in float64), Python's (seed >> 12) ^ 0x9E3779B97F4A7.
  const uint64_t key = (static_cast<uint64_t>(seed) >> 12) ^ 0x9E3779B97F4A7ULL;
  const at::Tensor keys = at::full({batch, 1}, static_cast<double>(key), f64);
  return at::cat({u, ids, keys}, 1).contiguous();
}

// params as a (n, k + 2) float64 CPU tensor, checked.
at::Tensor checked_params(const at::Tensor& params, int64_t n, int64_t k) {
  TORCH_CHECK_VALUE(
      params.defined() && params.dim() == 2 && params.size(0) == n && params.size(1) == k + 2,
      "params must be a (", n, ", ", k + 2, ") tensor from draw_params, got ",
      params.defined() ? params.sizes() : at::IntArrayRef{});
  TORCH_CHECK_VALUE(params.scalar_type() == at::kDouble && params.device().is_cpu(),
                    "params must be a float64 CPU tensor from draw_params, got ",
                    params.scalar_type(), " on ", params.device());
  return params.contiguous();
}

std::vector<bool> gates(const at::Tensor& params, double prob) {
  const auto p = params.accessor<double, 2>();
  std::vector<bool> out(static_cast<size_t>(params.size(0)));
  for (int64_t i = 0; i < params.size(0); ++i) out[i] = p[i][0] < prob;
  return out;
}

// U(-1, 1) float32 of `shape` (N, ...) on `device`, sample i keyed by (params key, params index):
// deform.py _RandomDeform._noise.
at::Tensor noise(const at::Tensor& params, std::vector<int64_t> shape, const at::Device& device) {
  const int64_t n = params.size(0);
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  if (n == 0) return at::empty(shape, opts);
  const auto p = params.accessor<double, 2>();
  const int64_t cols = params.size(1);
  const int64_t key = static_cast<int64_t>(p[0][cols - 1]);
  const double first = p[0][cols - 2];
  bool shared = n > 1, consecutive = true;
  for (int64_t i = 0; i < n; ++i) {
    shared = shared && p[i][cols - 2] == first;
    consecutive = consecutive && p[i][cols - 2] == first + static_cast<double>(i);
  }
  if (shared) {  // one draw for the batch
    std::vector<int64_t> one = shape;
    one[0] = 1;
    at::Tensor o = at::empty(one, opts);
    uniform_fill_(o, -1.0, 1.0, key, static_cast<int64_t>(first));
    return o.expand(shape).contiguous();
  }
  TORCH_CHECK_VALUE(consecutive, "params rows must be consecutive samples of one draw_params call");
  at::Tensor out = at::empty(shape, opts);
  uniform_fill_(out, -1.0, 1.0, key, static_cast<int64_t>(first));
  return out;
}

// (n, 1, 1, 1, 1) float32 per-sample factors on `device` (torch.tensor(values, float32)).
at::Tensor per_sample(const std::vector<double>& values, const at::Device& device) {
  const int64_t n = static_cast<int64_t>(values.size());
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(values[i]);
  return host_to(t.view({n, 1, 1, 1, 1}), device);
}

// ---------------- one gather through a planned field (deform.py _Plan / _launch) ----------------
// The image and extras as 5-D tensors, checked.
struct Batch {
  at::Tensor x;
  std::vector<at::Tensor> extras;
  bool batched;
  int64_t n;
  std::array<int64_t, 3> size;
};

Batch as_batch(const at::Tensor& image, at::TensorList extras) {
  TORCH_CHECK_VALUE(image.defined(), "image must be a defined tensor");
  TORCH_CHECK_VALUE(image.dim() == 4 || image.dim() == 5,
                    "image must be (C, D, H, W) or (N, C, D, H, W), got ", image.dim(),
                    "-D with shape ", image.sizes());
  Batch b;
  b.batched = image.dim() == 5;
  b.x = b.batched ? image : image.unsqueeze(0);
  b.n = b.x.size(0);
  for (int a = 0; a < 3; ++a) b.size[a] = b.x.size(a + 2);
  for (size_t i = 0; i < extras.size(); ++i) {
    const at::Tensor& e = extras[i];
    TORCH_CHECK_VALUE(e.defined() && e.dim() == image.dim(), "extras[", i,
                      "] must have the image's rank ", image.dim(), ", got ",
                      e.defined() ? e.dim() : 0, "-D");
    const at::Tensor e5 = b.batched ? e : e.unsqueeze(0);
    TORCH_CHECK_VALUE(e5.size(0) == b.n && e5.size(2) == b.size[0] && e5.size(3) == b.size[1] &&
                          e5.size(4) == b.size[2],
                      "extras[", i, "] must have the image's batch and spatial size (N = ", b.n,
                      ", D, H, W = ", at::IntArrayRef(b.size.data(), 3), "), got shape ",
                      e.sizes());
    TORCH_CHECK_VALUE(e.device() == image.device(), "extras[", i,
                      "] must be on the image's device ", image.device(), ", got ", e.device());
    b.extras.push_back(e5);
  }
  return b;
}

DeformResult launch(const Batch& b, const DeformPlan& plan, bool return_displacement) {
  DeformResult res;
  const at::Device device = b.x.device();
  if (plan.identity) {
    res.image = b.batched ? b.x : b.x.squeeze(0);
    for (const at::Tensor& e : b.extras) res.extras.push_back(b.batched ? e : e.squeeze(0));
    if (return_displacement)
      res.displacement =
          at::zeros({b.n, 3, b.size[0], b.size[1], b.size[2]},
                    at::TensorOptions().dtype(at::kFloat).device(device));
    return res;
  }
  std::vector<at::Tensor> inputs{b.x};
  std::vector<int64_t> modes{plan.image_mode}, pads{plan.image_padding};
  for (const at::Tensor& e : b.extras) {
    inputs.push_back(e);
    modes.push_back(plan.label_mode);
    pads.push_back(plan.label_padding);
  }
  const std::vector<at::Tensor> outs = deform_gather(plan, inputs, modes, std::nullopt, pads);
  auto restore = [&](const at::Tensor& t) { return b.batched ? t : t.squeeze(0); };
  res.image = restore(outs[0]);
  for (size_t i = 1; i < outs.size(); ++i) res.extras.push_back(restore(outs[i]));
  if (return_displacement) {
    std::optional<at::Tensor> fmap;
    if (plan.field_map) fmap = host_to(*plan.field_map, device);
    res.displacement = deform_field_dense(host_to(plan.field, device), plan.kind, plan.scale,
                                          plan.offset, plan.out_size, fmap);
  }
  return res;
}

// ---------------- MONAI GridDistortion's separable field ----------------
// deform.py _distortion_ranges: the source index of each voxel along one axis (float32 pieces).
at::Tensor distortion_ranges(int64_t size, int64_t cells, const std::vector<double>& steps) {
  at::Tensor ranges = at::zeros({size}, at::TensorOptions().dtype(at::kFloat));
  const int64_t cell = size / cells;
  double prev = 0.0;
  for (int64_t idx = 0; idx <= cells; ++idx) {
    const int64_t start = idx * cell;
    int64_t end = start + cell;
    double cur;
    if (end > size) {
      end = size;
      cur = static_cast<double>(size);
    } else {
      cur = prev + static_cast<double>(cell) * steps[idx];
    }
    ranges.slice(0, start, end).copy_(at::linspace(prev, cur, end - start, at::kFloat));
    prev = cur;
  }
  return ranges;
}

// A MONAI-style deformation's plan gets its options' (mode, label_mode, padding_mode).
template <class Options>
DeformPlan with_grid_modes(DeformPlan plan, const Options& o) {
  plan.image_mode = grid_mode(o.mode, "mode");
  plan.label_mode = grid_mode(o.label_mode, "label_mode");
  plan.padding = grid_padding(o.padding_mode, "padding_mode");
  plan.image_padding = scipy_padding(o.mode, plan.padding);
  plan.label_padding = scipy_padding(o.label_mode, plan.padding);
  return plan;
}

// Steps per sample (empty: not selected, zero field) -> the separable plan on `device`.
DeformPlan separable_plan(const std::array<int64_t, 3>& in_size,
                    const std::vector<std::vector<std::vector<double>>>& steps,
                    const std::vector<int64_t>& cells, const at::Device& device) {
  const int64_t n = static_cast<int64_t>(steps.size());
  const int64_t length = *std::max_element(in_size.begin(), in_size.end());
  at::Tensor table = at::zeros({n, 3, length, 1, 1}, at::TensorOptions().dtype(at::kDouble));
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    if (steps[i].empty()) continue;
    for (int a = 0; a < 3; ++a) {
      const at::Tensor r = distortion_ranges(in_size[a], cells[a], steps[i][a]).to(at::kDouble);
      table.select(0, i)
          .select(0, a)
          .slice(0, 0, in_size[a])
          .select(-1, 0)
          .select(-1, 0)
          .copy_(r - at::arange(in_size[a], f64));
    }
  }
  DeformPlan plan;
  plan.mats = stack_maps(std::vector<M4>(n, grid_index_map(eye4(), in_size, in_size, false).first));
  plan.out_size = in_size;
  plan.field = host_to(table, device);
  plan.kind = kSeparableField;
  return plan;
}

std::vector<int64_t> num_cells_of(const std::vector<int64_t>& v) {
  TORCH_CHECK_VALUE((v.size() == 1 || v.size() == 3) &&
                        std::all_of(v.begin(), v.end(), [](int64_t c) { return c >= 1; }),
                    "num_cells must be a positive int or 3 positive ints, got ",
                    at::IntArrayRef(v));
  return v.size() == 1 ? std::vector<int64_t>(3, v[0]) : v;
}

void check_steps(const std::vector<std::vector<double>>& steps, const std::vector<int64_t>& cells) {
  TORCH_CHECK_VALUE(steps.size() == 3, "distort_steps needs one list per spatial axis (3), got ",
                    steps.size());
  for (int a = 0; a < 3; ++a) {
    TORCH_CHECK_VALUE(static_cast<int64_t>(steps[a].size()) == cells[a] + 1, "distort_steps[", a,
                      "] needs num_cells + 1 = ", cells[a] + 1, " values, got ", steps[a].size());
    for (double v : steps[a])
      TORCH_CHECK_VALUE(std::isfinite(v), "distort_steps[", a, "] must be finite, got ", v);
  }
}

// ---------------- Rand3DElastic's fast field (deform.py) ----------------
// sum_i g_i^2 of MONAI's 1-D erf Gaussian kernel (gaussian_1d(sigma, 3, "erf")).
double gaussian_kernel_sum_sq(double sigma, double truncated = 3.0) {
  const int64_t radius = static_cast<int64_t>(std::max(sigma * truncated, 0.5) + 0.5);
  const double t = 0.70710678 / sigma;
  double sum = 0.0;
  for (int64_t x = -radius; x <= radius; ++x) {
    const double xd = static_cast<double>(x);
    const double g = 0.5 * (std::erf((xd + 0.5) * t) - std::erf((xd - 0.5) * t));
    sum += g * g;
  }
  return sum;
}

double fast_amplitude(double sigma) {
  return std::pow(gaussian_kernel_sum_sq(sigma) / kBSplineSqMean, 1.5);
}

int64_t num_ranges(const Rand3DElasticOptions& o) {
  return static_cast<int64_t>(o.rotate_range.size() + o.shear_range.size() +
                              o.translate_range.size() + o.scale_range.size());
}

std::vector<double> triple(const std::vector<double>& v) {
  return v.size() == 1 ? std::vector<double>(3, v[0]) : v;
}

}  // namespace

std::vector<at::Tensor> deform_gather(const DeformPlan& plan, at::TensorList inputs,
                                      at::IntArrayRef modes, const std::optional<at::Tensor>& mats,
                                      at::IntArrayRef paddings) {
  TORCH_CHECK_VALUE(!inputs.empty() && modes.size() == inputs.size(),
                    "deform_gather needs one mode per input, got ", modes.size(), " modes for ",
                    inputs.size(), " inputs");
  TORCH_CHECK_VALUE(paddings.empty() || paddings.size() == inputs.size(),
                    "deform_gather needs no paddings or one per input, got ", paddings.size(),
                    " paddings for ", inputs.size(), " inputs");
  const at::Device device = inputs[0].device();
  std::vector<at::Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i)
    xs.push_back(modes[i] == kNearest || inputs[i].is_floating_point() ? inputs[i]
                                                                       : inputs[i].to(at::kFloat));
  const at::Tensor m = host_to(mats ? *mats : plan.mats, device);
  const at::Tensor field = host_to(plan.field, device);
  std::optional<at::Tensor> fmap;
  if (plan.field_map) fmap = host_to(*plan.field_map, device);
  std::vector<at::Tensor> outs;
  for (size_t s = 0; s < xs.size(); s += kMaxTargets) {
    const size_t e = std::min(xs.size(), s + kMaxTargets);
    const std::vector<at::Tensor> part(xs.begin() + s, xs.begin() + e);
    const std::vector<int64_t> pads = paddings.empty()
                                          ? std::vector<int64_t>(e - s, plan.padding)
                                          : paddings.slice(s, e - s).vec();
    const std::vector<double> values(e - s, 0.0);
    auto r = resample_deformed(part, m, field, plan.kind, plan.scale, plan.offset, plan.out_size,
                               modes.slice(s, e - s), pads, values, fmap);
    outs.insert(outs.end(), r.begin(), r.end());
  }
  return outs;
}

// ---------------- Rand3DElastic ----------------
Rand3DElastic::Rand3DElastic(std::pair<double, double> sigma_range,
                             std::pair<double, double> magnitude_range,
                             Rand3DElasticOptions options)
    : sigma_range_(sigma_range), magnitude_range_(magnitude_range), options_(std::move(options)) {
  TORCH_CHECK_VALUE(sigma_range_.first > 0 && sigma_range_.first <= sigma_range_.second,
                    "sigma_range must be (min, max) with 0 < min <= max, got (", sigma_range_.first,
                    ", ", sigma_range_.second, ")");
  TORCH_CHECK_VALUE(magnitude_range_.first <= magnitude_range_.second &&
                        std::isfinite(magnitude_range_.first) &&
                        std::isfinite(magnitude_range_.second),
                    "magnitude_range must be finite (min, max) with min <= max, got (",
                    magnitude_range_.first, ", ", magnitude_range_.second, ")");
  // The Gaussian kernel (3 sigma radius) and the fast field's control grid ((size - 1) /
  // (sqrt(3) sigma) points per axis) must stay countable: sigma within [1e-3, 1e6] voxels.
  TORCH_CHECK_VALUE(sigma_range_.first >= 1e-3 && sigma_range_.second <= 1e6,
                    "sigma_range must lie within [0.001, 1e6] voxels, got (", sigma_range_.first,
                    ", ", sigma_range_.second, ")");
  check_prob(options_.prob, "prob");
  TORCH_CHECK_VALUE(options_.field == "fast" || options_.field == "exact",
                    "field must be 'fast' or 'exact', got '", options_.field, "'");
  TORCH_CHECK_VALUE(options_.rotate_range.size() <= 3,
                    "rotate_range has at most 3 elements (one angle per spatial axis), got ",
                    options_.rotate_range.size());
  const auto& ss = options_.spatial_size;
  TORCH_CHECK_VALUE(ss.empty() || ss.size() == 1 || ss.size() == 3,
                    "spatial_size must be empty, an int or 3 ints (D, H, W), got ",
                    at::IntArrayRef(ss));
  for (const auto* r : {&options_.rotate_range, &options_.shear_range, &options_.translate_range,
                        &options_.scale_range})
    for (const Range& e : *r)
      TORCH_CHECK_VALUE(std::isfinite(e.lo) && std::isfinite(e.hi),
                        "rotate/shear/translate/scale_range must be finite, got (", e.lo, ", ",
                        e.hi, ")");
  grid_mode(options_.mode, "mode");
  grid_padding(options_.padding_mode, "padding_mode");
  grid_mode(options_.label_mode, "label_mode");
  n_uniforms_ = 3 + num_ranges(options_);
}

at::Tensor Rand3DElastic::draw_params(int64_t batch, int64_t first_sample, int64_t seed) const {
  return draw(batch, first_sample, seed, n_uniforms_);
}

DeformResult Rand3DElastic::operator()(const at::Tensor& image, int64_t seed, int64_t first_sample,
                                       at::TensorList extras, bool return_displacement) const {
  const int64_t n = image.defined() && image.dim() == 5 ? image.size(0) : 1;
  return apply(image, draw_params(n, first_sample, seed), extras, return_displacement);
}

DeformResult Rand3DElastic::apply(const at::Tensor& image, const at::Tensor& params,
                                  at::TensorList extras, bool return_displacement) const {
  const Batch b = as_batch(image, extras);
  return launch(b, plan(b.n, b.size, params, b.x.device()), return_displacement);
}

int64_t Rand3DElastic::mode_code(const std::string& name, const char* arg) {
  return grid_mode(name, arg);
}

DeformPlan Rand3DElastic::plan(int64_t n, const std::array<int64_t, 3>& size,
                               const at::Tensor& params_in, const c10::Device& device) const {
  const at::Tensor params = checked_params(params_in, n, n_uniforms_);
  const std::vector<bool> on = gates(params, options_.prob);
  const auto p = params.accessor<double, 2>();
  const std::array<int64_t, 3> out_size = fall_back_size(options_.spatial_size, size);

  // Per sample (deform.py Rand3DElastic.parameters): magnitude, sigma, MONAI's affine params.
  std::vector<double> mags(n, 0.0), sigmas(n, sigma_range_.first);
  std::vector<M4> mats;
  for (int64_t i = 0; i < n; ++i) {
    if (!on[i]) {
      mats.push_back(grid_index_map(eye4(), size, out_size, false).first);
      continue;
    }
    double lo = magnitude_range_.first, hi = magnitude_range_.second;
    mags[i] = lo + (hi - lo) * p[i][1];
    lo = sigma_range_.first, hi = sigma_range_.second;
    sigmas[i] = lo + (hi - lo) * p[i][2];
    int64_t j = 3;
    std::vector<double> vals[4];
    const std::vector<Range>* ranges[4] = {&options_.rotate_range, &options_.shear_range,
                                           &options_.translate_range, &options_.scale_range};
    for (int r = 0; r < 4; ++r) {
      const double add = r == 3 ? 1.0 : 0.0;
      for (const Range& e : *ranges[r]) vals[r].push_back(e.lo + (e.hi - e.lo) * p[i][j++] + add);
    }
    mats.push_back(
        grid_index_map(centred_affine(vals[0], vals[1], vals[2], vals[3]), size, out_size, false)
            .first);
  }
  DeformPlan out;
  out.mats = stack_maps(mats);
  out.out_size = out_size;
  if (options_.field == "exact") {
    at::Tensor sig = at::zeros({n, 3}, at::TensorOptions().dtype(at::kDouble));
    for (int64_t i = 0; i < n; ++i)
      if (on[i]) sig[i].fill_(sigmas[i]);
    const at::Tensor nz = noise(params, {n, 3, out_size[0], out_size[1], out_size[2]}, device);
    out.field = ops::gaussian_smooth(nz, sig, 3.0).mul_(per_sample(mags, device));
    out.kind = kDenseField;
  } else {
    // One control grid per call, a control spacing per sample (deform.py fast_field_layout:
    // spacing h = sqrt(3) sigma, index g = x / h + 1). The grid is that of sigma_range's minimum
    // (the most points any sample can use), so a sample's coefficients do not depend on the
    // other samples' sigmas.
    std::array<int64_t, 3> kmax{};
    for (int a = 0; a < 3; ++a)
      kmax[a] = static_cast<int64_t>(std::floor(static_cast<double>(out_size[a] - 1) /
                                                (std::sqrt(3.0) * sigma_range_.first))) +
                4;
    at::Tensor fmap = at::empty({n, 6}, at::TensorOptions().dtype(at::kDouble));
    double* fm = fmap.data_ptr<double>();
    std::vector<double> amps(n);
    for (int64_t i = 0; i < n; ++i) {
      const double h = std::sqrt(3.0) * sigmas[i];
      for (int a = 0; a < 3; ++a) {
        fm[6 * i + a] = 1.0 / h;
        fm[6 * i + 3 + a] = 1.0;
      }
      amps[i] = mags[i] * fast_amplitude(sigmas[i]);
    }
    out.field =
        noise(params, {n, 3, kmax[0], kmax[1], kmax[2]}, device).mul_(per_sample(amps, device));
    out.kind = kBSplineField;
    out.field_map = fmap;
  }
  return with_grid_modes(std::move(out), options_);
}

// ---------------- GridDistortion ----------------
GridDistortion::GridDistortion(std::vector<int64_t> num_cells,
                               std::vector<std::vector<double>> distort_steps,
                               GridDistortionOptions options)
    : num_cells_(num_cells_of(num_cells)),
      distort_steps_(std::move(distort_steps)),
      options_(std::move(options)) {
  check_steps(distort_steps_, num_cells_);
  grid_mode(options_.mode, "mode");
  grid_padding(options_.padding_mode, "padding_mode");
  grid_mode(options_.label_mode, "label_mode");
}

DeformResult GridDistortion::operator()(const at::Tensor& image, at::TensorList extras,
                                        bool return_displacement) const {
  const Batch b = as_batch(image, extras);
  return launch(b, plan(b.n, b.size, b.x.device()), return_displacement);
}

DeformPlan GridDistortion::plan(int64_t n, const std::array<int64_t, 3>& size,
                                const c10::Device& device) const {
  TORCH_CHECK_VALUE(n >= 0, "batch must be >= 0, got ", n);
  DeformPlan out = separable_plan(
      size, std::vector<std::vector<std::vector<double>>>(n, distort_steps_), num_cells_, device);
  return with_grid_modes(std::move(out), options_);
}

int64_t GridDistortion::mode_code(const std::string& name, const char* arg) {
  return grid_mode(name, arg);
}

// ---------------- RandGridDistortion ----------------
RandGridDistortion::RandGridDistortion(RandGridDistortionOptions options)
    : options_(std::move(options)) {
  num_cells_ = num_cells_of(options_.num_cells);
  check_prob(options_.prob, "prob");
  const auto& d = options_.distort_limit;
  TORCH_CHECK_VALUE((d.size() == 1 || d.size() == 2) &&
                        std::all_of(d.begin(), d.end(), [](double v) { return std::isfinite(v); }),
                    "distort_limit must be a finite number or (min, max), got ", d.size(),
                    " values");
  if (d.size() == 1) {
    lo_ = std::min(-d[0], d[0]);
    hi_ = std::max(-d[0], d[0]);
  } else {
    lo_ = d[0];
    hi_ = d[1];
  }
  grid_mode(options_.mode, "mode");
  grid_padding(options_.padding_mode, "padding_mode");
  grid_mode(options_.label_mode, "label_mode");
  n_uniforms_ = 1;
  for (int64_t c : num_cells_) n_uniforms_ += c + 1;
}

at::Tensor RandGridDistortion::draw_params(int64_t batch, int64_t first_sample,
                                           int64_t seed) const {
  return draw(batch, first_sample, seed, n_uniforms_);
}

std::vector<std::vector<std::vector<double>>> RandGridDistortion::steps(
    const at::Tensor& params_in) const {
  TORCH_CHECK_VALUE(params_in.defined() && params_in.dim() == 2,
                    "params must be a 2-D tensor from draw_params");
  const at::Tensor params = checked_params(params_in, params_in.size(0), n_uniforms_);
  const std::vector<bool> on = gates(params, options_.prob);
  const auto p = params.accessor<double, 2>();
  std::vector<std::vector<std::vector<double>>> out(on.size());
  for (size_t i = 0; i < on.size(); ++i) {
    if (!on[i]) continue;
    int64_t j = 1;
    for (int64_t c : num_cells_) {
      std::vector<double> s;
      for (int64_t k = 0; k <= c; ++k) s.push_back(1.0 + lo_ + (hi_ - lo_) * p[i][j++]);
      out[i].push_back(std::move(s));
    }
  }
  return out;
}

DeformResult RandGridDistortion::operator()(const at::Tensor& image, int64_t seed,
                                            int64_t first_sample, at::TensorList extras,
                                            bool return_displacement) const {
  const int64_t n = image.defined() && image.dim() == 5 ? image.size(0) : 1;
  return apply(image, draw_params(n, first_sample, seed), extras, return_displacement);
}

DeformResult RandGridDistortion::apply(const at::Tensor& image, const at::Tensor& params,
                                       at::TensorList extras, bool return_displacement) const {
  const Batch b = as_batch(image, extras);
  return launch(b, plan(b.n, b.size, params, b.x.device()), return_displacement);
}

DeformPlan RandGridDistortion::plan(int64_t n, const std::array<int64_t, 3>& size,
                                    const at::Tensor& params_in, const c10::Device& device) const {
  const at::Tensor params = checked_params(params_in, n, n_uniforms_);
  DeformPlan out = separable_plan(size, steps(params), num_cells_, device);
  return with_grid_modes(std::move(out), options_);
}

int64_t RandGridDistortion::mode_code(const std::string& name, const char* arg) {
  return grid_mode(name, arg);
}

// ---------------- RandomElasticDeformation ----------------
RandomElasticDeformation::RandomElasticDeformation(RandomElasticDeformationOptions options)
    : options_(std::move(options)) {
  const auto& k = options_.num_control_points;
  TORCH_CHECK_VALUE((k.size() == 1 || k.size() == 3) &&
                        std::all_of(k.begin(), k.end(), [](int64_t v) { return v >= 4; }),
                    "num_control_points must be an int or 3 ints, each >= 4, got ",
                    at::IntArrayRef(k));
  const auto& d = options_.max_displacement;
  TORCH_CHECK_VALUE(
      (d.size() == 1 || d.size() == 3) &&
          std::all_of(d.begin(), d.end(), [](double v) { return std::isfinite(v) && v >= 0; }),
      "max_displacement must be a number or 3 numbers >= 0, got ", d.size(), " values");
  const auto& s = options_.spacing;
  TORCH_CHECK_VALUE(
      (s.size() == 1 || s.size() == 3) &&
          std::all_of(s.begin(), s.end(), [](double v) { return std::isfinite(v) && v > 0; }),
      "spacing must be a positive number or 3 positive numbers, got ", s.size(), " values");
  const std::vector<double> d3 = triple(d), s3 = triple(s);
  for (int a = 0; a < 3; ++a) {
    k_[a] = k.size() == 1 ? k[0] : k[a];
    max_disp_[a] = d3[a];
    spacing_[a] = s3[a];
  }
  TORCH_CHECK_VALUE(options_.locked_borders >= 0 && options_.locked_borders <= 2,
                    "locked_borders must be 0, 1, or 2, got ", options_.locked_borders);
  TORCH_CHECK_VALUE(!(options_.locked_borders == 2 && (k_[0] == 4 || k_[1] == 4 || k_[2] == 4)),
                    "locked_borders = 2 with 4 control points along an axis results in an "
                    "identity transform. Lock fewer borders or use more control points "
                    "(num_control_points)");
  check_prob(options_.p, "p");
  torchio_mode(options_.image_interpolation, "image_interpolation");
  torchio_mode(options_.label_interpolation, "label_interpolation");
  grid_padding(options_.padding_mode, "padding_mode");
}

at::Tensor RandomElasticDeformation::draw_params(int64_t batch, int64_t first_sample,
                                                 int64_t seed) const {
  return draw(batch, first_sample, seed, 1);
}

DeformResult RandomElasticDeformation::operator()(const at::Tensor& image, int64_t seed,
                                                  int64_t first_sample, at::TensorList extras,
                                                  bool return_displacement) const {
  const int64_t n = image.defined() && image.dim() == 5 ? image.size(0) : 1;
  return apply(image, draw_params(n, first_sample, seed), extras, return_displacement);
}

DeformResult RandomElasticDeformation::apply(const at::Tensor& image, const at::Tensor& params,
                                             at::TensorList extras,
                                             bool return_displacement) const {
  const Batch b = as_batch(image, extras);
  return launch(b, plan(b.n, b.size, params, b.x.device()), return_displacement);
}

int64_t RandomElasticDeformation::mode_code(const std::string& name, const char* arg) {
  return torchio_mode(name, arg);
}

DeformPlan RandomElasticDeformation::plan(int64_t n, const std::array<int64_t, 3>& size,
                                          const at::Tensor& params_in,
                                          const c10::Device& device) const {
  const at::Tensor params = checked_params(params_in, n, 1);
  DeformPlan out;
  out.image_mode = torchio_mode(options_.image_interpolation, "image_interpolation");
  out.label_mode = torchio_mode(options_.label_interpolation, "label_interpolation");
  out.padding = grid_padding(options_.padding_mode, "padding_mode");
  out.image_padding = out.label_padding = out.padding;
  if (max_disp_[0] == 0 && max_disp_[1] == 0 && max_disp_[2] == 0) {
    out.identity = true;  // TorchIO: no displacement, nothing to do
    return out;
  }
  // TorchIO's folding check: the displacement exceeds half the control spacing.
  std::vector<int64_t> conflicts;
  unsigned axes = 0;  // bit a: axis a conflicts
  for (int a = 0; a < 3; ++a) {
    const double grid =
        (static_cast<double>(size[a]) + 0.25) * spacing_[a] / static_cast<double>(k_[a] - 3);
    if (max_disp_[a] > grid / 2) {
      conflicts.push_back(a);
      axes |= 1u << a;
    }
  }
  // Shown once per process for each message (the axes it names: 7 possible), as Python's default
  // filter shows TorchIO's warnings.warn once per text and location; c10's handler would print it
  // on every call of a training loop. Not per instance: apply() is const and the class holds no
  // state for it (deform_transforms.h).
  // torch.set_warn_always(True) (c10::WarningUtils::set_warnAlways) shows every one, as for
  // TORCH_WARN_ONCE.
  static std::atomic<unsigned> warned{0};
  const unsigned bit = 1u << axes;
  if (!conflicts.empty() && ((warned.fetch_or(bit, std::memory_order_relaxed) & bit) == 0 ||
                             c10::WarningUtils::get_warnAlways())) {
    std::ostringstream dims;
    for (size_t i = 0; i < conflicts.size(); ++i) dims << (i ? ", " : "[") << conflicts[i];
    dims << "]";
    TORCH_WARN("The maximum displacement is larger than the coarse grid spacing for dimensions: ",
               dims.str(),
               ", so folding may occur. Choose fewer control points or a smaller maximum "
               "displacement");
  }
  at::Tensor coeff = noise(params, {n, 3, k_[0], k_[1], k_[2]}, device);
  const std::vector<bool> on = gates(params, options_.p);
  at::Tensor gate = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t i = 0; i < n; ++i) gate.data_ptr<float>()[i] = on[i] ? 1.0f : 0.0f;
  at::Tensor scale = at::empty({3}, at::TensorOptions().dtype(at::kFloat));
  for (int a = 0; a < 3; ++a)
    scale.data_ptr<float>()[a] = static_cast<float>(max_disp_[a] / spacing_[a]);
  coeff.mul_(host_to(gate.view({n, 1, 1, 1, 1}) * scale.view({1, 3, 1, 1, 1}), device));
  for (int64_t i = 0; i < options_.locked_borders; ++i)
    for (int a = 0; a < 3; ++a) {
      coeff.narrow(2 + a, i, 1).zero_();
      coeff.narrow(2 + a, k_[a] - 1 - i, 1).zero_();
    }
  // SimpleITK's BSplineTransformInitializer(image, mesh = K - 3) in voxel indices
  // (deform.py sitk_control_map): control spacing (S + 0.25) / mesh, g = (i + 0.625) / step + 1.
  for (int a = 0; a < 3; ++a) {
    const double step = (static_cast<double>(size[a]) + 0.25) / static_cast<double>(k_[a] - 3);
    out.scale[a] = 1.0 / step;
    out.offset[a] = 0.625 / step + 1.0;
  }
  out.mats = stack_maps(std::vector<M4>(n, eye4()));
  out.out_size = size;
  out.field = coeff;
  out.kind = kBSplineField;
  return out;
}

}  // namespace voxaug::transforms
