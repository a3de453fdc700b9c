// voxaug::transforms (torch_ext/include/voxaug/spatial_transforms.h): the index-map geometry of
// python/voxaug/spatial.py, ported to the host in double precision, and one resample launch per
// group of inputs that share a map. Each helper names the Python function it ports; keep the two
// in step (tests/python/test_cxx_spatial.py compares the maps and draws with Python's and the
// outputs with MONAI's).
#include "voxaug/spatial_transforms.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "transform_common.h"
#include "voxaug/torch_ops.h"

namespace voxaug::transforms {
namespace {

using namespace common;  // NOLINT(google-build-using-namespace): the shared map helpers

constexpr int64_t kMaxTargets = 4;           // kMaxResampleTargets (include/voxaug/resample.h)
constexpr double kAffineTol = 1e-3;          // monai.data.utils.AFFINE_TOL
constexpr double kAntiAliasTruncated = 4.0;  // MONAI GaussianSmooth's default truncation

// Resize's anti-aliasing (Python's spatial._anti_alias): voxaug::gaussian_smooth with one sigma
// for the batch, output in the image's floating dtype.
at::Tensor gaussian_smooth(const at::Tensor& image, const std::array<double, 3>& sigma) {
  const at::Tensor s = at::tensor(at::ArrayRef<double>(sigma.data(), 3), at::kDouble)
                           .expand({image.size(0), 3})
                           .contiguous();
  return ops::gaussian_smooth(image, s, kAntiAliasTruncated);
}

// ---------------- M4 <-> tensors, messages ----------------
at::Tensor to_tensor(const M4& m) {
  return at::tensor(at::ArrayRef<double>(m.data(), 16), at::kDouble).view({4, 4});
}
M4 from_tensor(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  M4 m;
  std::copy(c.data_ptr<double>(), c.data_ptr<double>() + 16, m.begin());
  return m;
}
at::Tensor stack(const std::vector<M4>& maps) {
  at::Tensor out = at::empty({static_cast<int64_t>(maps.size()), 4, 4}, at::kDouble);
  for (size_t i = 0; i < maps.size(); ++i)
    std::copy(maps[i].begin(), maps[i].end(), out.data_ptr<double>() + 16 * i);
  return out;
}
std::string join(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}
std::string join(const std::vector<int64_t>& v) {
  std::vector<double> d(v.begin(), v.end());
  return join(d);
}

// ---------------- argument checks ----------------
// _interp_mode: the index rule ("nearest", "nearest-exact", "linear", "area").
std::string interp_mode(const std::string& m, const std::string& arg) {
  TORCH_CHECK_NOT_IMPLEMENTED(m != "bicubic", arg, "='bicubic' (torch interpolate) is not ",
                              "supported by voxaug's resample yet; use 'area', 'trilinear' or ",
                              "'nearest'");
  if (m == "nearest" || m == "nearest-exact" || m == "linear" || m == "area") return m;
  if (m == "bilinear" || m == "trilinear") return "linear";
  TORCH_CHECK_VALUE(false, arg, " must be one of 'nearest', 'nearest-exact', 'linear', ",
                    "'bilinear', 'trilinear', 'area', got '", m, "'");
  return {};
}
// _interp_opts: interpolate takes align_corners with the linear modes only (MONAI passes it on).
bool interp_align(const std::optional<bool>& align_corners, const std::string& mode) {
  TORCH_CHECK_VALUE(!align_corners || interp_mode(mode, "mode") == "linear",
                    "align_corners can only be set with the interpolating modes 'linear', ",
                    "'bilinear', 'trilinear' (torch interpolate raises otherwise), got mode='",
                    mode, "' with align_corners=", *align_corners ? "true" : "false");
  return align_corners.value_or(false);
}
std::string pad_mode(const std::string& p) {
  static const std::map<std::string, std::string> modes = {
      {"constant", "constant"},   {"edge", "edge"}, {"replicate", "edge"}, {"reflect", "reflect"},
      {"symmetric", "symmetric"}, {"wrap", "wrap"}, {"circular", "wrap"}};
  auto it = modes.find(p);
  TORCH_CHECK_VALUE(it != modes.end(), "padding_mode must be one of 'circular', 'constant', ",
                    "'edge', 'reflect', 'replicate', 'symmetric', 'wrap' (numpy.pad / torch pad ",
                    "names), got '", p, "'");
  return it->second;
}
void check_finite(const std::vector<double>& v, const char* name) {
  for (double x : v)
    TORCH_CHECK_VALUE(std::isfinite(x), name, " must be finite numbers, got ", join(v));
}
// _spatial_axes: MONAI's map_spatial_axes for 3 spatial dims.
std::vector<int64_t> spatial_axes(const std::vector<int64_t>& axes, const char* name) {
  if (axes.empty()) return {0, 1, 2};
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    TORCH_CHECK_VALUE(a >= -3 && a <= 2, name, " must be spatial axes in [-3, 2], got ",
                      join(axes));
    out.push_back((a + 3) % 3);
  }
  return out;
}
std::array<int64_t, 2> rot90_axes(const std::array<int64_t, 2>& axes) {
  auto a = spatial_axes({axes[0], axes[1]}, "spatial_axes");
  TORCH_CHECK_VALUE(a[0] != a[1], "spatial_axes must be 2 different spatial axes defining the ",
                    "plane to rotate, got (", axes[0], ", ", axes[1], ")");
  return {a[0], a[1]};
}
void check_size_arg(const std::vector<int64_t>& s, const char* name) {
  TORCH_CHECK_VALUE(s.empty() || s.size() == 1 || s.size() == 3, name,
                    " must be empty (the input size), 1 or 3 ints (D, H, W), got ", join(s));
}
// MONAI's _validate_euler_order (create_rotate's rotate_order): 1-3 axes from "xyz", one case
// (lower: extrinsic, upper: intrinsic), no axis twice in a row; n_angles > 0: at least one axis
// per angle.
void check_rotate_order(const std::string& order, size_t n_angles) {
  const bool lower = std::all_of(order.begin(), order.end(),
                                 [](char c) { return c == 'x' || c == 'y' || c == 'z'; });
  const bool upper = std::all_of(order.begin(), order.end(),
                                 [](char c) { return c == 'X' || c == 'Y' || c == 'Z'; });
  TORCH_CHECK_VALUE(!order.empty() && order.size() <= 3 && (lower || upper), "rotate_order must ",
                    "be 1 to 3 axes from 'xyz', all lower case (extrinsic) or all upper case ",
                    "(intrinsic), got '", order, "'");
  for (size_t i = 0; i + 1 < order.size(); ++i)
    TORCH_CHECK_VALUE(order[i] != order[i + 1], "rotate_order must not name the same axis twice ",
                      "in a row, got '", order, "'");
  TORCH_CHECK_VALUE(order.size() >= n_angles, "rotate_order '", order, "' is too short for ",
                    n_angles, " rotation angle(s) (one axis per angle)");
}
// _rotation (MONAI create_rotate) in rotate_order: angle i about axis order[i]; intrinsic
// (upper case) right-multiplies, extrinsic (lower case) left-multiplies. "XYZ" is
// common::rotation, operation for operation.
M4 ordered_rotation(const std::vector<double>& radians, const std::string& order) {
  check_rotate_order(order, radians.size());
  const bool intrinsic = std::isupper(static_cast<unsigned char>(order[0])) != 0;
  M4 a = eye4();
  for (size_t i = 0; i < radians.size(); ++i) {
    const double s = std::sin(radians[i]), c = std::cos(radians[i]);
    M4 r = eye4();
    const char axis = static_cast<char>(std::tolower(static_cast<unsigned char>(order[i])));
    if (axis == 'x') {
      r[1 * 4 + 1] = c, r[1 * 4 + 2] = -s, r[2 * 4 + 1] = s, r[2 * 4 + 2] = c;
    } else if (axis == 'y') {
      r[0 * 4 + 0] = c, r[0 * 4 + 2] = s, r[2 * 4 + 0] = -s, r[2 * 4 + 2] = c;
    } else {
      r[0 * 4 + 0] = c, r[0 * 4 + 1] = -s, r[1 * 4 + 0] = s, r[1 * 4 + 1] = c;
    }
    a = intrinsic ? mul(a, r) : mul(r, a);
  }
  return a;
}
// _centred_affine with rotate_order (MONAI AffineGrid; "XYZ": common::centred_affine).
M4 ordered_centred_affine(const std::vector<double>& rot, const std::vector<double>& sh,
                          const std::vector<double>& tr, const std::vector<double>& sc,
                          const std::string& order) {
  if (rot.empty()) return centred_affine_with(nullptr, sh, tr, sc);
  const M4 r = ordered_rotation(rot, order);
  return centred_affine_with(&r, sh, tr, sc);
}
// _table_dtype: the precision MONAI interpolates in (Resize / Zoom / RandZoom `dtype`): float64
// for float64, float32 for the other floating dtypes; nullopt: the input's (float64 input:
// float64, else float32).
std::optional<at::ScalarType> check_dtype(std::optional<at::ScalarType> dtype) {
  if (!dtype) return dtype;
  TORCH_CHECK_VALUE(at::isFloatingType(*dtype), "dtype must be a floating dtype (float32: MONAI's ",
                    "default, float64) or nullopt (MONAI's None: the input's), got ", *dtype);
  return *dtype == at::kDouble ? at::kDouble : at::kFloat;
}
at::ScalarType table_dtype(const std::optional<at::ScalarType>& dtype, const at::Tensor& x) {
  if (dtype) return *dtype;
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}
std::array<double, 3> rep3(const std::vector<double>& v, const char* name) {
  TORCH_CHECK_VALUE(v.size() == 1 || v.size() == 3, name,
                    " must be 1 value (all three axes) or 3 (one per spatial axis), got ", join(v));
  check_finite(v, name);
  return v.size() == 1 ? std::array<double, 3>{v[0], v[0], v[0]}
                       : std::array<double, 3>{v[0], v[1], v[2]};
}

// ---------------- inputs ----------------
struct Batch {
  std::vector<at::Tensor> xs;  // 5-D
  std::vector<bool> squeeze;   // was 4-D
  int64_t n = 0;
  Size3 size{};
};

Batch as_batch(Inputs inputs) {
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs must hold at least one tensor");
  Batch b;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    TORCH_CHECK_VALUE(x.defined() && (x.dim() == 4 || x.dim() == 5), "inputs[", i,
                      "] must be 5-D (N, C, D, H, W) or 4-D (C, D, H, W), got ",
                      x.defined() ? std::to_string(x.dim()) + "-D" : std::string("undefined"));
    at::Tensor y = x.dim() == 4 ? x.unsqueeze(0) : x;
    const Size3 size{y.size(2), y.size(3), y.size(4)};
    if (i == 0) {
      b.n = y.size(0), b.size = size;
    } else {
      TORCH_CHECK_VALUE(y.size(0) == b.n && size == b.size, "inputs[", i, "] must have the batch ",
                        "size and spatial size of inputs[0] (", b.n, ", (", b.size[0], ", ",
                        b.size[1], ", ", b.size[2], ")), got ", y.sizes());
      TORCH_CHECK_VALUE(y.device() == b.xs[0].device(), "inputs[", i, "] must be on inputs[0]'s ",
                        "device ", b.xs[0].device(), ", got ", y.device());
    }
    b.xs.push_back(y);
    b.squeeze.push_back(x.dim() == 4);
  }
  return b;
}
std::string mode_of(const Modes& modes, size_t i, const std::string& fallback, size_t n) {
  TORCH_CHECK_VALUE(modes.size() <= n, "modes must have at most one entry per input (", n,
                    "), got ", modes.size());
  return i < modes.size() && !modes[i].empty() ? modes[i] : fallback;
}

// ---------------- one launch ----------------
struct Pad {
  std::array<std::pair<int64_t, int64_t>, 3> widths;
  std::string mode;
  double value = 0.0;  // "constant"
};
struct Launch {
  std::vector<M4> maps;  // per sample: kernel map
  std::vector<M4> meta;  // per sample: MONAI's affine update
  Size3 out_size{};
  int64_t padding = 0;
  std::vector<int64_t> paddings;  // per input (empty: `padding` for every input)
  bool align_corners = false;
  std::optional<std::array<std::vector<int64_t>, 3>> tables;  // interpolate's nearest table
  std::optional<std::array<Size3, 3>> pool;                   // area: (zoomed, first, count)
  std::optional<Pad> pad;                                     // Zoom's keep_size padding
  std::optional<std::array<double, 3>> smooth;  // Resize's anti-aliasing sigma, before all else
  at::ScalarType compute = at::kFloat;          // MONAI's dtype: smoothing and pooling run in it
};

int64_t pymod(int64_t a, int64_t m) {
  return ((a % m) + m) % m;
}

// _pad_index: numpy.pad's source index of each padded position (constant: -1 outside).
std::vector<int64_t> pad_index(int64_t size, int64_t before, int64_t after,
                               const std::string& mode) {
  std::vector<int64_t> out;
  for (int64_t j = -before; j < size + after; ++j) {
    if (mode == "constant") {
      out.push_back(j >= 0 && j < size ? j : -1);
    } else if (mode == "edge" || size == 1) {
      out.push_back(std::clamp<int64_t>(j, 0, size - 1));
    } else if (mode == "reflect") {
      const int64_t p = 2 * (size - 1), k = pymod(j, p);
      out.push_back(k >= size ? p - k : k);
    } else if (mode == "symmetric") {
      const int64_t k = pymod(j, 2 * size);
      out.push_back(k >= size ? 2 * size - 1 - k : k);
    } else {
      out.push_back(pymod(j, size));
    }
  }
  return out;
}
at::Tensor index_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  return host_to(at::tensor(v, at::kLong), device);
}
// A constant pad value must be exact in an integer / bool output (nearest keeps the input's
// dtype; MONAI's float32 output has no such limit): refuse what would be truncated or wrap.
void check_pad_value(double value, const at::Tensor& out) {
  if (out.is_floating_point() || out.is_complex()) return;
  const double back = at::scalar_tensor(value, at::kDouble).to(out.scalar_type()).item<double>();
  TORCH_CHECK_VALUE(back == value, "pad_value ", value, " is not representable in the output's ",
                    out.scalar_type(), " (mode nearest keeps the input dtype)");
}
// _apply_pad
at::Tensor apply_pad(at::Tensor x, const Pad& pad) {
  if (pad.mode == "constant") {
    check_pad_value(pad.value, x);
    std::vector<int64_t> shape{x.size(0), x.size(1)};
    for (int a = 0; a < 3; ++a)
      shape.push_back(x.size(2 + a) + pad.widths[a].first + pad.widths[a].second);
    at::Tensor out = at::full(shape, pad.value, x.options());
    out.narrow(2, pad.widths[0].first, x.size(2))
        .narrow(3, pad.widths[1].first, x.size(3))
        .narrow(4, pad.widths[2].first, x.size(4))
        .copy_(x);
    return out;
  }
  for (int a = 0; a < 3; ++a) {
    const auto [b, e] = pad.widths[a];
    if (b || e)
      x = x.index_select(2 + a, index_tensor(pad_index(x.size(2 + a), b, e, pad.mode), x.device()));
  }
  return x;
}

// _run: kernel_modes per input (0 nearest, 1 linear, 2 cubic).
std::vector<at::Tensor> run(std::vector<at::Tensor> xs, const Launch& g,
                            const std::vector<int64_t>& kernel_modes) {
  std::vector<at::Tensor> outs;
  std::vector<at::ScalarType> out_dtypes;
  if (g.smooth || g.pool) {
    // MONAI converts to its dtype (float32 by default) first: the smoothing, the pooling and the
    // interpolation after smoothing run in it (a float16 image rounds once, at the end).
    for (at::Tensor& x : xs) {
      out_dtypes.push_back(x.is_floating_point() ? x.scalar_type() : at::kFloat);
      x = x.to(g.compute);
      if (g.smooth) x = gaussian_smooth(x, *g.smooth);
    }
  }
  if (g.pool) {  // interpolate's 'area' in MONAI's dtype, see Python's _area
    const auto& [zoomed, first, count] = *g.pool;
    for (size_t i = 0; i < xs.size(); ++i) {
      at::Tensor y = at::adaptive_avg_pool3d(xs[i].contiguous(), {zoomed[0], zoomed[1], zoomed[2]});
      if (first != Size3{0, 0, 0} || count != zoomed)
        y = y.narrow(2, first[0], count[0])
                .narrow(3, first[1], count[1])
                .narrow(4, first[2], count[2]);
      outs.push_back(y.to(out_dtypes[i]));
    }
  } else if (g.tables) {  // interpolate's nearest where no affine map reproduces it
    const auto device = xs[0].device();
    const at::Tensor i0 = index_tensor((*g.tables)[0], device);
    const at::Tensor i1 = index_tensor((*g.tables)[1], device);
    const at::Tensor i2 = index_tensor((*g.tables)[2], device);
    for (size_t i = 0; i < xs.size(); ++i) {
      at::Tensor y = xs[i].index_select(2, i0).index_select(3, i1).index_select(4, i2);
      outs.push_back(out_dtypes.empty() ? y : y.to(out_dtypes[i]));
    }
  } else {
    std::vector<at::Tensor> inputs;
    // bool / int8 have no resample kernel: nearest copies (and zero padding) are byte moves, so
    // they go through as uint8 and come back in their dtype (MONAI's flip / rot90 / permute
    // take any dtype).
    std::vector<std::optional<at::ScalarType>> as_bytes(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      const auto dt = xs[i].scalar_type();
      if (kernel_modes[i] == 0 && (dt == at::kBool || dt == at::kChar)) {
        as_bytes[i] = dt;
        inputs.push_back(xs[i].view(at::kByte));
      } else {
        inputs.push_back(kernel_modes[i] == 0 || xs[i].is_floating_point() ? xs[i]
                                                                           : xs[i].to(at::kFloat));
      }
    }
    at::Tensor mats = stack(g.maps).narrow(1, 0, 3).contiguous();
    if (!inputs.empty() && !inputs[0].is_cpu()) mats = host_to(mats, inputs[0].device());
    for (size_t s = 0; s < inputs.size(); s += kMaxTargets) {
      const size_t e = std::min(inputs.size(), s + kMaxTargets);
      std::vector<at::Tensor> part(inputs.begin() + s, inputs.begin() + e);
      std::vector<int64_t> modes(kernel_modes.begin() + s, kernel_modes.begin() + e);
      std::vector<int64_t> paddings =
          g.paddings.empty() ? std::vector<int64_t>(part.size(), g.padding)
                             : std::vector<int64_t>(g.paddings.begin() + s, g.paddings.begin() + e);
      std::vector<double> values(part.size(), 0.0);
      auto o = voxaug::ops::resample(part, mats, {g.out_size[0], g.out_size[1], g.out_size[2]},
                                     modes, paddings, values, g.align_corners);
      outs.insert(outs.end(), o.begin(), o.end());
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (as_bytes[i]) outs[i] = outs[i].view(*as_bytes[i]);
      if (!out_dtypes.empty()) outs[i] = outs[i].to(out_dtypes[i]);
    }
  }
  if (g.pad)
    for (auto& o : outs) o = apply_pad(o, *g.pad);
  return outs;
}

// The affine update (Python's _with_affine / _finish_affine): affine @ meta, per sample when the
// samples' maps differ. No affine: the identity's.
at::Tensor update_affine(const Affine4& affine, const at::Tensor& meta) {
  at::Tensor base = affine && affine->defined()
                        ? affine->to(at::kDouble)
                        : at::eye(4, at::TensorOptions().dtype(at::kDouble));
  const int64_t n = meta.size(0);
  TORCH_CHECK_VALUE(
      base.dim() == 2
          ? base.sizes() == at::IntArrayRef({4, 4})
          : base.dim() == 3 && base.size(0) == n && base.size(1) == 4 && base.size(2) == 4,
      "affine must be (4, 4) or (N, 4, 4) with N = the batch size ", n, ", got ", base.sizes());
  if (n == 0) return base.clone();
  const bool same = meta.eq(meta.narrow(0, 0, 1)).all().item<bool>();  // host tensor: no sync
  at::Tensor m = same ? meta[0] : meta;
  if (!base.is_cpu()) m = host_to(m, base.device());
  return at::matmul(base, m);
}

// Result's description of the launch (see spatial_transforms.h).
void describe_launch(Result& r, const Launch& g, int64_t kernel_mode) {
  r.single_map = !g.tables && !g.pool && !g.pad && !g.smooth;
  r.kernel_mode = kernel_mode;
  r.padding = g.padding;
  r.align_corners = g.align_corners;
}

std::vector<at::Tensor> restore(const Batch& b, std::vector<at::Tensor> outs) {
  for (size_t i = 0; i < outs.size(); ++i)
    if (b.squeeze[i]) outs[i] = outs[i].squeeze(0);
  return outs;
}

// One launch for every input (grid transforms and exact permutations).
Result finish_one(const Batch& b, const Launch& g, const std::vector<int64_t>& kernel_modes,
                  const Affine4& affine) {
  Result r;
  r.outputs = restore(b, run(b.xs, g, kernel_modes));
  r.maps = stack(g.maps);
  r.meta = stack(g.meta);
  r.out_size = g.out_size;
  r.affine = update_affine(affine, r.meta);
  describe_launch(r, g, kernel_modes.empty() ? 0 : kernel_modes[0]);
  return r;
}
Launch uniform_launch(const M4& k, const M4& meta, int64_t n, const Size3& out, int64_t padding,
                      bool align) {
  Launch g;
  g.maps.assign(n, k);
  g.meta.assign(n, meta);
  g.out_size = out;
  g.padding = padding;
  g.align_corners = align;
  return g;
}
Result exact(const std::vector<M4>& maps, const Size3& out, const Affine4& affine, const Batch& b) {
  Launch g;
  g.maps = maps;
  g.meta = maps;
  g.out_size = out;
  Result r = finish_one(b, g, std::vector<int64_t>(b.xs.size(), 0), affine);
  r.exact = true;
  return r;
}
// Kernel modes of a grid transform's inputs.
std::vector<int64_t> grid_modes(const Batch& b, const Modes& modes, const std::string& mode) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < b.xs.size(); ++i)
    out.push_back(
        grid_mode(mode_of(modes, i, mode, b.xs.size()), i < modes.size() && !modes[i].empty()
                                                            ? "modes[" + std::to_string(i) + "]"
                                                            : std::string("mode")));
  return out;
}

// A grid transform's launch: each input's kernel mode, and MONAI's integer modes ("0" .. "5",
// its scipy backend) with padding 'zeros' get scipy's 'constant' (the kernel's cutoff, 4), as
// Python's _grid_opts. Such a call is not a single plain map for Compose (it runs alone).
Result finish_grid(const Batch& b, Launch g, const Modes& modes, const std::string& mode,
                   const Affine4& affine) {
  bool cutoff = false;
  if (g.padding == kPaddingZeros) {
    g.paddings.assign(b.xs.size(), kPaddingZeros);
    for (size_t i = 0; i < b.xs.size(); ++i) {
      g.paddings[i] = scipy_padding(mode_of(modes, i, mode, b.xs.size()), g.padding);
      cutoff = cutoff || g.paddings[i] == kPaddingCutoff;
    }
    // One reading for every input (Compose plans each input alone): a plain padding, so the
    // step stays a single map and joins its group (cutoff in the group's key).
    const bool uniform = std::all_of(g.paddings.begin(), g.paddings.end(),
                                     [&](int64_t v) { return v == g.paddings[0]; });
    if (cutoff && uniform) g.padding = g.paddings[0], cutoff = false;
    if (!cutoff) g.paddings.clear();
  }
  Result r = finish_one(b, g, grid_modes(b, modes, mode), affine);
  if (cutoff) r.single_map = false;
  return r;
}

// ---------------- Flip / Rotate90 ----------------
M4 flip_map(const Size3& in, const std::vector<int64_t>& axes) {
  M4 m = eye4();
  for (int64_t a : axes) m[a * 5] = -1.0, m[a * 4 + 3] = static_cast<double>(in[a] - 1);
  return m;
}
// _rot90_map: index map and output size of torch.rot90(x, k, axes).
std::pair<M4, Size3> rot90_map(const Size3& in, int64_t k, const std::array<int64_t, 2>& axes) {
  const int64_t a = axes[0], b = axes[1];
  M4 m = eye4();
  Size3 size = in;
  for (int64_t t = 0; t < pymod(k, 4); ++t) {
    M4 q{};
    q[15] = 1.0;
    for (int c = 0; c < 3; ++c)
      if (c != a && c != b) q[c * 5] = 1.0;
    q[a * 4 + b] = 1.0;
    q[b * 4 + a] = -1.0, q[b * 4 + 3] = static_cast<double>(size[b] - 1);
    m = mul(m, q);
    std::swap(size[a], size[b]);
  }
  return {m, size};
}

// ---------------- Rotate ----------------
// _rotate_geometry for one sample: shift(in) @ R @ shift(-(out - 1) / 2), MONAI's corner rule.
std::pair<M4, Size3> rotate_map(const Size3& in, const std::array<double, 3>& angles,
                                bool keep_size, const std::string& order = "XYZ") {
  const M4 r = ordered_rotation({angles[0], angles[1], angles[2]}, order);
  Size3 out = in;
  if (!keep_size) {
    for (int i = 0; i < 3; ++i) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (int c = 0; c < 8; ++c) {
        const double p[3] = {(c & 4) ? static_cast<double>(in[0]) : 0.0,
                             (c & 2) ? static_cast<double>(in[1]) : 0.0,
                             (c & 1) ? static_cast<double>(in[2]) : 0.0};
        const double v = r[i * 4 + 0] * p[0] + r[i * 4 + 1] * p[1] + r[i * 4 + 2] * p[2];
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      out[i] = static_cast<int64_t>(hi - lo + 0.5);
    }
  }
  std::array<double, 3> ti, to;
  for (int i = 0; i < 3; ++i)
    ti[i] = (static_cast<double>(in[i]) - 1) / 2, to[i] = -(static_cast<double>(out[i]) - 1) / 2;
  return {mul(mul(translate(ti), r), translate(to)), out};
}

// ---------------- Resize / Zoom: interpolate's index rules ----------------
struct Axis {
  double m, b, meta_m, meta_b;
  std::optional<std::vector<int64_t>> table;
};
// _nearest_table: interpolate's source index per output voxel on `dtype` data (o * scale rounds
// in that precision).
std::vector<double> nearest_table(int64_t in, int64_t out, bool exact, at::ScalarType dtype) {
  at::Tensor x = at::arange(in, at::TensorOptions().dtype(dtype)).view({1, 1, in});
  at::Tensor y = exact ? at::_upsample_nearest_exact1d(x, {out}) : at::upsample_nearest1d(x, {out});
  y = y.reshape({-1}).to(at::kDouble).contiguous();
  return std::vector<double>(y.data_ptr<double>(), y.data_ptr<double>() + out);
}
std::pair<double, double> margin(const std::vector<double>& t, double m) {
  double hi = std::numeric_limits<double>::infinity(), lo = -hi;
  for (size_t o = 0; o < t.size(); ++o) {
    const double mo = m * static_cast<double>(o);
    hi = std::min(hi, (t[o] + 0.5) - mo);
    lo = std::max(lo, (t[o] - 0.5) - mo);
  }
  return {(hi - lo) / 2, (hi + lo) / 2};
}
// _nearest_rule: the widest (m, b) with round_half_even(m * o + b) == interpolate's index, or
// the table itself when no line reproduces it.
Axis nearest_rule(int64_t in, int64_t zoomed, int64_t first, int64_t count, bool exact,
                  at::ScalarType dtype) {
  const std::vector<double> full = nearest_table(in, zoomed, exact, dtype);
  const std::vector<double> t(full.begin() + first, full.begin() + first + count);
  const double s = static_cast<double>(in) / static_cast<double>(zoomed);
  double lo = s - 2.0 / static_cast<double>(zoomed), hi = s + 2.0 / static_cast<double>(zoomed);
  for (int it = 0; it < 100; ++it) {
    const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
    if (margin(t, a).first < margin(t, b).first)
      lo = a;
    else
      hi = b;
  }
  const double m = (lo + hi) / 2;
  const auto [width, b] = margin(t, m);
  Axis ax{m, b, 0.0, 0.0, std::nullopt};
  if (!(width >
        64 * static_cast<double>(FLT_EPSILON) * (static_cast<double>(in) + std::abs(b) + 1)))
    ax.table = std::vector<int64_t>(t.begin(), t.end());
  return ax;
}
// _interp_axis: output voxel o stands for zoomed voxel first + o; align only with "linear".
Axis interp_axis(int64_t in, int64_t zoomed, int64_t first, int64_t count,
                 const std::string& interp, bool align, at::ScalarType dtype) {
  double lm, lb;
  if (align) {
    lm = zoomed == 1 ? 0.0 : static_cast<double>(in - 1) / static_cast<double>(zoomed - 1);
    lb = 0.0;
  } else {
    lm = static_cast<double>(in) / static_cast<double>(zoomed);
    lb = (lm - 1) / 2;  // (o + 0.5) * s - 0.5; interpolate clamps: border padding
  }
  double meta_m = 1.0, meta_b = 0.0;
  if (in != zoomed) meta_m = lm, meta_b = lb;
  meta_b += meta_m * static_cast<double>(first);
  if (interp == "linear" || interp == "area")
    return {lm, lb + lm * static_cast<double>(first), meta_m, meta_b, std::nullopt};
  Axis ax = nearest_rule(in, zoomed, first, count, interp == "nearest-exact", dtype);
  ax.meta_m = meta_m, ax.meta_b = meta_b;
  return ax;
}
// _diag_maps: kernel map, metadata map, and the three tables when some axis needs one.
void diag_launch(Launch& g, const std::array<Axis, 3>& axes, int64_t n) {
  M4 k = eye4(), meta = eye4();
  for (int a = 0; a < 3; ++a)
    k[a * 5] = axes[a].m, k[a * 4 + 3] = axes[a].b, meta[a * 5] = axes[a].meta_m,
          meta[a * 4 + 3] = axes[a].meta_b;
  g.maps.assign(n, k);
  g.meta.assign(n, meta);
  if (axes[0].table || axes[1].table || axes[2].table) {
    std::array<std::vector<int64_t>, 3> tables;
    for (int a = 0; a < 3; ++a) {
      if (axes[a].table) {
        tables[a] = *axes[a].table;
      } else {
        for (int64_t o = 0; o < g.out_size[a]; ++o)
          tables[a].push_back(
              static_cast<int64_t>(std::nearbyint(axes[a].m * static_cast<double>(o) + axes[a].b)));
      }
    }
    g.tables = tables;
  }
}
// Each input's interpolate rule (its mode, else the transform's).
std::vector<std::string> input_rules(const Batch& b, const Modes& modes, const std::string& mode) {
  std::vector<std::string> rules;
  for (size_t i = 0; i < b.xs.size(); ++i)
    rules.push_back(
        interp_mode(mode_of(modes, i, mode, b.xs.size()), i < modes.size() && !modes[i].empty()
                                                              ? "modes[" + std::to_string(i) + "]"
                                                              : std::string("mode")));
  return rules;
}
// Inputs grouped by their interpolate rule and MONAI dtype (`dtype`'s table_dtype per input):
// one launch per group (Resize / Zoom).
template <class Plan>
Result finish_interp(const Batch& b, const Modes& modes, const std::string& mode,
                     const std::optional<at::ScalarType>& dtype, Plan plan, const Affine4& affine) {
  const std::vector<std::string> rules = input_rules(b, modes, mode);
  std::vector<at::ScalarType> dtypes;
  for (const at::Tensor& x : b.xs) dtypes.push_back(table_dtype(dtype, x));
  std::vector<at::Tensor> outs(b.xs.size());
  Result r;
  std::vector<bool> done(b.xs.size(), false);
  for (size_t i = 0; i < b.xs.size(); ++i) {
    if (done[i]) continue;
    const Launch g = plan(rules[i], dtypes[i]);
    std::vector<size_t> members;
    for (size_t j = i; j < b.xs.size(); ++j)
      if (!done[j] && rules[j] == rules[i] && dtypes[j] == dtypes[i])
        members.push_back(j), done[j] = true;
    std::vector<at::Tensor> xs;
    for (size_t j : members) xs.push_back(b.xs[j]);
    const int64_t kmode = rules[i].rfind("nearest", 0) == 0 ? 0 : 1;
    auto o = run(xs, g, std::vector<int64_t>(xs.size(), kmode));
    for (size_t k = 0; k < members.size(); ++k) outs[members[k]] = o[k];
    if (i == 0) {
      r.maps = stack(g.maps);
      r.meta = stack(g.meta);
      r.out_size = g.out_size;
      describe_launch(r, g, kmode);
      if (g.pad)
        for (int a = 0; a < 3; ++a)
          r.out_size[a] += g.pad->widths[a].first + g.pad->widths[a].second;
    }
  }
  r.outputs = restore(b, outs);
  r.affine = update_affine(affine, r.meta);
  return r;
}

// ---------------- Spacing / Orientation helpers (host, float64) ----------------
at::Tensor t33(const M4& m) {
  return to_tensor(m).narrow(0, 0, 3).narrow(1, 0, 3).clone();
}

// The shared (4, 4) input affine of a batch (_one_affine for 4x4 affines).
M4 one_affine(const Affine4& affine, int64_t n) {
  if (!affine || !affine->defined()) return eye4();
  at::Tensor a = affine->to(at::kCPU, at::kDouble);
  TORCH_CHECK_VALUE(
      a.dim() == 2 ? a.sizes() == at::IntArrayRef({4, 4})
                   : a.dim() == 3 && a.size(0) == n && a.size(1) == 4 && a.size(2) == 4,
      "affine must be (4, 4) or (N, 4, 4) with N = the batch size ", n, ", got ", a.sizes());
  if (a.dim() == 3) {
    TORCH_CHECK_VALUE(n > 0 && a.eq(a.narrow(0, 0, 1)).all().item<bool>(),
                      "affine: the samples of a batch have different affines (", n, " of them); ",
                      "Spacing / Orientation need one geometry per batch: transform the samples ",
                      "one at a time");
    a = a[0];
  }
  TORCH_CHECK_VALUE(a.isfinite().all().item<bool>(), "affine must be finite (it has NaN or inf ",
                    "entries)");
  return from_tensor(a);
}
// _spacing_of: column norms of the 3x3 block (zeros -> 1).
std::array<double, 3> spacing_of(const M4& a) {
  std::array<double, 3> s;
  for (int j = 0; j < 3; ++j) {
    double v = 0.0;
    for (int i = 0; i < 3; ++i) v += a[i * 4 + j] * a[i * 4 + j];
    s[j] = std::sqrt(v);
    if (s[j] == 0.0) s[j] = 1.0;
  }
  return s;
}
// _zoom_affine
M4 zoom_affine(const M4& affine, const std::array<double, 3>& scale, bool diagonal) {
  const auto norm = spacing_of(affine);
  std::array<double, 3> s;
  for (int i = 0; i < 3; ++i) {
    s[i] = scale[i] > 0 ? scale[i] : norm[i];
    if (s[i] == 0.0) s[i] = 1.0;
  }
  if (diagonal) return diag4(s);
  const at::Tensor rzs = t33(affine);
  const at::Tensor zs = at::linalg_cholesky(rzs.t().matmul(rzs)).t();
  const at::Tensor rot = rzs.matmul(at::linalg_inv(zs));
  const at::Tensor d = at::diag(at::sign(at::diag(zs)) *
                                at::tensor(at::ArrayRef<double>(s.data(), 3), at::kDouble).abs());
  const at::Tensor r = rot.matmul(d).contiguous();
  M4 out = eye4();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) out[i * 4 + j] = r[i][j].item<double>();
  return out;
}
bool allclose(const M4& a, const M4& b, double atol) {  // numpy's allclose (rtol 1e-5)
  for (int i = 0; i < 16; ++i)
    if (!(std::abs(a[i] - b[i]) <= atol + 1e-5 * std::abs(b[i]))) return false;
  return true;
}
M4 solve(const M4& a, const M4& b, const char* what) {
  const at::Tensor ta = to_tensor(a);
  TORCH_CHECK_VALUE(at::linalg_matrix_rank(ta).item<int64_t>() == 4, what, " is not invertible");
  return from_tensor(at::linalg_solve(ta, to_tensor(b)));
}
// _compute_shape_offset
std::pair<Size3, std::array<double, 3>> compute_shape_offset(const Size3& shape_in,
                                                             const M4& in_affine,
                                                             const M4& out_affine,
                                                             bool scale_extent) {
  const std::array<double, 3> shape{static_cast<double>(shape_in[0]),
                                    static_cast<double>(shape_in[1]),
                                    static_cast<double>(shape_in[2])};
  at::Tensor corners = at::ones({4, 8}, at::kDouble);
  for (int c = 0; c < 8; ++c)  // meshgrid(ij) order: the last axis varies fastest
    for (int i = 0; i < 3; ++i) {
      const bool hi = (c >> (2 - i)) & 1;
      corners[i][c] = scale_extent ? (hi ? shape[i] - 0.5 : -0.5) : (hi ? shape[i] - 1.0 : 0.0);
    }
  const M4 rel = solve(out_affine, in_affine, "affine: the output affine");
  at::Tensor corners_out = to_tensor(rel).matmul(corners);
  at::Tensor world = to_tensor(in_affine).matmul(corners);
  at::Tensor all_dist = corners_out.narrow(0, 0, 3).clone();
  corners_out = corners_out.narrow(0, 0, 3) / corners_out.narrow(0, 3, 1);
  at::Tensor ptp = std::get<0>(corners_out.max(1)) - std::get<0>(corners_out.min(1));
  at::Tensor out_shape = scale_extent ? at::round(ptp) : at::round(ptp + 1.0);  // half-even
  std::optional<std::array<double, 3>> offset;
  for (int c = 0; c < 8 && !offset; ++c) {
    at::Tensor mn = std::get<0>((all_dist - all_dist.narrow(1, c, 1)).min(1));
    if (mn.abs().le(1e-8).all().item<bool>())  // np.allclose(min_corner, 0, rtol=1e-3)
      offset = std::array<double, 3>{world[0][c].item<double>(), world[1][c].item<double>(),
                                     world[2][c].item<double>()};
  }
  std::array<double, 3> os{out_shape[0].item<double>(), out_shape[1].item<double>(),
                           out_shape[2].item<double>()};
  if (!offset) {
    std::array<double, 3> o{};
    for (int i = 0; i < 3; ++i) {
      double v = 0.0;
      for (int j = 0; j < 3; ++j) v += in_affine[i * 4 + j] * (shape[j] / 2.0);
      double w = 0.0;
      for (int j = 0; j < 3; ++j) w += out_affine[i * 4 + j] * (os[j] / 2.0);
      o[i] = v + in_affine[i * 4 + 3] - w;
    }
    offset = o;
  }
  if (scale_extent) {
    std::array<double, 4> in_off{};
    for (int i = 0; i < 3; ++i) in_off[i] = 0.5 * (shape[i] / os[i] - 1.0);
    in_off[3] = 1.0;
    for (int i = 0; i < 3; ++i) {
      double v = 0.0;
      for (int j = 0; j < 4; ++j) v += in_affine[i * 4 + j] * in_off[j];
      const double sg = (*offset)[i] > 0 ? 1.0 : (*offset)[i] < 0 ? -1.0 : 0.0;
      (*offset)[i] = std::abs(v / in_off[3]) * sg;
    }
  }
  return {
      Size3{static_cast<int64_t>(os[0]), static_cast<int64_t>(os[1]), static_cast<int64_t>(os[2])},
      *offset};
}

// nibabel's orientation helpers: ornt rows (output axis, flip), NaN-free here (checked).
using Ornt = std::array<std::array<double, 2>, 3>;
// nibabel io_orientation
std::optional<Ornt> io_orientation(const M4& affine) {
  at::Tensor rzs = t33(affine);
  at::Tensor zooms = rzs.mul(rzs).sum(0).sqrt();
  zooms = at::where(zooms.eq(0), at::ones_like(zooms), zooms);
  at::Tensor rs = rzs / zooms;
  auto [p, s, qs] = at::linalg_svd(rs, /*full_matrices=*/false);
  const double tol = s.max().item<double>() * 3 * std::numeric_limits<double>::epsilon();
  at::Tensor keep = s.gt(tol);
  at::Tensor r = p.index({at::indexing::Slice(), keep}).matmul(qs.index({keep})).contiguous();
  Ornt ornt;
  for (int in_ax = 0; in_ax < 3; ++in_ax) {
    at::Tensor col = r.select(1, in_ax);
    if (col.abs().le(1e-8).all().item<bool>()) return std::nullopt;  // np.allclose(col, 0)
    const int64_t out_ax = col.abs().argmax().item<int64_t>();
    ornt[in_ax] = {static_cast<double>(out_ax), col[out_ax].item<double>() < 0 ? -1.0 : 1.0};
    r.select(0, out_ax).zero_();
  }
  return ornt;
}
// Orientation's labels as characters: nibabel's (L, R), (P, A), (I, S) when none are given.
using LabelChars = std::array<std::array<char, 2>, 3>;
LabelChars label_chars(const Labels& labels) {
  if (labels.empty()) return {{{'L', 'R'}, {'P', 'A'}, {'I', 'S'}}};
  TORCH_CHECK_VALUE(labels.size() == 3, "labels must be 3 pairs of one-character axis codes such ",
                    "as ((\"L\", \"R\"), (\"P\", \"A\"), (\"I\", \"S\")), got ", labels.size(),
                    " pairs");
  LabelChars out;
  std::string seen;
  for (int l = 0; l < 3; ++l)
    for (int e = 0; e < 2; ++e) {
      const std::string& c = labels[l][e];
      TORCH_CHECK_VALUE(c.size() == 1, "labels must be one-character axis codes (the characters ",
                        "of axcodes), got '", c, "' in pair ", l);
      TORCH_CHECK_VALUE(seen.find(c[0]) == std::string::npos, "labels must not repeat a code ",
                        "(nibabel: duplicate labels), got '", c, "' twice");
      seen += c[0];
      out[l][e] = c[0];
    }
  return out;
}
std::string describe(const LabelChars& labels) {
  std::ostringstream s;
  s << "(";
  for (int l = 0; l < 3; ++l)
    s << (l ? ", " : "") << "('" << labels[l][0] << "', '" << labels[l][1] << "')";
  s << ")";
  return s.str();
}
// nibabel axcodes2ornt: the label pair's index and -1 for its start code, +1 for its end code.
Ornt axcodes2ornt(const std::string& axcodes, const LabelChars& labels) {
  TORCH_CHECK_VALUE(axcodes.size() >= 3, "axcodes must name the 3 spatial axes, got '", axcodes,
                    "'");
  Ornt ornt;
  bool used[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    int found = -1;
    for (int l = 0; l < 3; ++l)
      if (axcodes[i] == labels[l][0] || axcodes[i] == labels[l][1]) found = l;
    TORCH_CHECK_VALUE(found >= 0, "axcodes '", axcodes, "' is not valid for labels ",
                      describe(labels), ": '", axcodes[i], "' is not a label");
    TORCH_CHECK_VALUE(!used[found], "axcodes '", axcodes, "' must name each of the 3 axes once");
    used[found] = true;
    ornt[i] = {static_cast<double>(found), axcodes[i] == labels[found][0] ? -1.0 : 1.0};
  }
  return ornt;
}
// nibabel ornt_transform
Ornt ornt_transform(const Ornt& start, const Ornt& end) {
  Ornt result;
  for (int e = 0; e < 3; ++e) {
    bool found = false;
    for (int s = 0; s < 3 && !found; ++s)
      if (end[e][0] == start[s][0]) {
        result[s] = {static_cast<double>(e), start[s][1] == end[e][1] ? 1.0 : -1.0};
        found = true;
      }
    TORCH_CHECK_VALUE(found, "affine: unable to find the output axis ", end[e][0],
                      " in the input orientation");
  }
  return result;
}
// nibabel inv_ornt_aff
M4 inv_ornt_aff(const Ornt& ornt, const Size3& shape) {
  M4 undo_reorder{};
  for (int i = 0; i < 3; ++i) undo_reorder[i * 4 + static_cast<int>(ornt[i][0])] = 1.0;
  undo_reorder[15] = 1.0;
  M4 undo_flip = diag4({ornt[0][1], ornt[1][1], ornt[2][1]});
  for (int i = 0; i < 3; ++i) {
    const double center = -(static_cast<double>(shape[i]) - 1) / 2.0;
    undo_flip[i * 4 + 3] = ornt[i][1] * center - center;
  }
  return mul(undo_flip, undo_reorder);
}

}  // namespace

// ---------------- RandomTransform ----------------
RandomTransform::RandomTransform(double prob, int64_t k) : prob_(check_prob(prob)), k_(k) {}

Draw RandomTransform::uniforms(int64_t batch, int64_t seed, int64_t first_sample) const {
  TORCH_CHECK_VALUE(batch >= 0, "batch must be >= 0, got ", batch);
  Draw d;
  d.uniforms = share_ ? ops::philox_uniform(seed, first_sample, 1, k_).expand({batch, k_}).clone()
                      : ops::philox_uniform(seed, first_sample, batch, k_);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i) d.gates.push_back(u[i * k_] < prob_);
  d.params.resize(batch);
  return d;
}

namespace {
void check_draw(const Draw& d, int64_t n, int64_t k) {
  TORCH_CHECK_VALUE(d.uniforms.defined() && d.uniforms.dim() == 2 && d.uniforms.size(0) == n &&
                        d.uniforms.size(1) == k && static_cast<int64_t>(d.gates.size()) == n &&
                        static_cast<int64_t>(d.params.size()) == n,
                    "draw must be a draw(", n, ", ...) of this transform (uniforms (", n, ", ", k,
                    ")), got uniforms ",
                    d.uniforms.defined() ? c10::str(d.uniforms.sizes()) : std::string("undefined"));
}
}  // namespace

// ---------------- Flip / RandFlip / RandAxisFlip ----------------
Flip::Flip(std::vector<int64_t> spatial_axis) : axes_(spatial_axes(spatial_axis, "spatial_axis")) {}

Result Flip::operator()(Inputs inputs, const Modes&, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  return exact(std::vector<M4>(b.n, flip_map(b.size, axes_)), b.size, affine, b);
}

RandFlip::RandFlip(double prob, std::vector<int64_t> spatial_axis)
    : RandomTransform(prob, 1), axes_(spatial_axes(spatial_axis, "spatial_axis")) {}

Draw RandFlip::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  return uniforms(batch, seed, first_sample);
}
Result RandFlip::apply(Inputs inputs, const Draw& d, const Modes&, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  std::vector<M4> maps;
  for (int64_t i = 0; i < b.n; ++i) maps.push_back(d.gates[i] ? flip_map(b.size, axes_) : eye4());
  return exact(maps, b.size, affine, b);
}
Result RandFlip::operator()(Inputs inputs, int64_t seed, int64_t first_sample, const Modes& modes,
                            const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

RandAxisFlip::RandAxisFlip(double prob) : RandomTransform(prob, 2) {}

Draw RandAxisFlip::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  Draw d = uniforms(batch, seed, first_sample);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i) {  // RandAxisFlip._axes
    const int64_t axis = std::min<int64_t>(static_cast<int64_t>(u[i * k_ + 1] * 3.0), 2);
    d.params[i] = {d.gates[i] ? static_cast<double>(axis) : -1.0};
  }
  return d;
}
Result RandAxisFlip::apply(Inputs inputs, const Draw& d, const Modes&,
                           const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  std::vector<M4> maps;
  for (int64_t i = 0; i < b.n; ++i) {
    const double a = d.params[i].at(0);
    TORCH_CHECK_VALUE(a == -1.0 || a == 0.0 || a == 1.0 || a == 2.0, "draw: RandAxisFlip's params[",
                      i, "] must be {0}, {1}, {2} (the axis) or {-1} (not flipped), got {", a, "}");
    maps.push_back(a < 0.0 ? eye4() : flip_map(b.size, {static_cast<int64_t>(a)}));
  }
  return exact(maps, b.size, affine, b);
}
Result RandAxisFlip::operator()(Inputs inputs, int64_t seed, int64_t first_sample,
                                const Modes& modes, const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

// ---------------- Rotate90 / RandRotate90 ----------------
Rotate90::Rotate90(int64_t k, std::array<int64_t, 2> spatial_axes)
    : k_(pymod(k, 4)), axes_(rot90_axes(spatial_axes)) {}

Result Rotate90::operator()(Inputs inputs, const Modes&, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const auto [m, out] = rot90_map(b.size, k_, axes_);
  return exact(std::vector<M4>(b.n, m), out, affine, b);
}

RandRotate90::RandRotate90(double prob, int64_t max_k, std::array<int64_t, 2> spatial_axes)
    : RandomTransform(prob, 2), max_k_(max_k), axes_(rot90_axes(spatial_axes)) {
  TORCH_CHECK_VALUE(max_k >= 1, "max_k must be an int >= 1, got ", max_k);
}
Draw RandRotate90::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  Draw d = uniforms(batch, seed, first_sample);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i) {  // RandRotate90._ks
    const int64_t k =
        std::min(static_cast<int64_t>(u[i * k_ + 1] * static_cast<double>(max_k_)), max_k_ - 1) + 1;
    d.params[i] = {d.gates[i] ? static_cast<double>(k) : 0.0};
  }
  return d;
}
Result RandRotate90::apply(Inputs inputs, const Draw& d, const Modes&,
                           const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  TORCH_CHECK_VALUE(
      b.n <= 1 || b.size[axes_[0]] == b.size[axes_[1]], "inputs: RandRotate90 on a ",
      "batch needs equal sizes along spatial_axes (", axes_[0], ", ", axes_[1], "), got ",
      b.size[axes_[0]], " and ", b.size[axes_[1]],
      " (a quarter turn changes a sample's shape); transform the samples one at a time");
  std::vector<M4> maps;
  Size3 out = b.size;
  for (int64_t i = 0; i < b.n; ++i) {
    const auto [m, s] = rot90_map(b.size, static_cast<int64_t>(d.params[i].at(0)), axes_);
    maps.push_back(m);
    out = s;
  }
  return exact(maps, out, affine, b);
}
Result RandRotate90::operator()(Inputs inputs, int64_t seed, int64_t first_sample,
                                const Modes& modes, const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

// ---------------- Affine / RandAffine ----------------
Affine::Affine(std::vector<double> rotate_params, std::vector<double> shear_params,
               std::vector<double> translate_params, std::vector<double> scale_params,
               std::vector<int64_t> spatial_size, std::string mode, std::string padding_mode,
               bool align_corners, const Affine4& affine, bool normalized, std::string rotate_order)
    : spatial_size_(std::move(spatial_size)),
      mode_(std::move(mode)),
      padding_mode_(std::move(padding_mode)),
      align_corners_(align_corners),
      normalized_(normalized) {
  check_finite(rotate_params, "rotate_params");
  check_finite(shear_params, "shear_params");
  check_finite(translate_params, "translate_params");
  check_finite(scale_params, "scale_params");
  TORCH_CHECK_VALUE(rotate_params.size() <= 3, "rotate_params must have at most 3 angles ",
                    "(radians about the 3 spatial axes), got ", join(rotate_params));
  check_size_arg(spatial_size_, "spatial_size");
  grid_mode(mode_, "mode");
  // As Python's Affine: MONAI's scipy backend (integer modes) reads a normalized matrix's
  // result as voxel indices, not grid_sample's [-1, 1]; only the grid_sample reading is here.
  TORCH_CHECK_NOT_IMPLEMENTED(!normalized || mode_.size() != 1 || mode_[0] < '0' || mode_[0] > '5',
                              "Affine: normalized=true with the spline order mode='", mode_,
                              "': MONAI's scipy backend reads a normalized matrix's result as ",
                              "voxel indices; voxaug follows only the grid_sample reading (modes ",
                              "'nearest', 'bilinear', 'bicubic')");
  grid_padding(padding_mode_, "padding_mode");
  check_rotate_order(rotate_order, 0);
  if (affine && affine->defined()) {  // MONAI: the given matrix, the parameters ignored
    TORCH_CHECK_VALUE(affine->dim() == 2 && affine->size(0) == 4 && affine->size(1) == 4,
                      "affine must be a (4, 4) matrix (MONAI's 3-D affine; the centred map from ",
                      "output to input coordinates), got ", affine->sizes());
    TORCH_CHECK_VALUE(!affine->is_complex() && affine->scalar_type() != at::kBool,
                      "affine must be a real (4, 4) matrix, got dtype ", affine->scalar_type());
    const at::Tensor a = affine->to(at::kCPU, at::kDouble);
    TORCH_CHECK_VALUE(a.isfinite().all().item<bool>(), "affine must be finite (it has NaN or inf ",
                      "entries)");
    a_ = from_tensor(a);
  } else {
    a_ = ordered_centred_affine(rotate_params, shear_params, translate_params, scale_params,
                                rotate_order);
  }
}
at::Tensor Affine::centred_matrix() const {
  return to_tensor(a_);
}

Result Affine::operator()(Inputs inputs, const Modes& modes, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const Size3 out = fall_back_size(spatial_size_, b.size);
  auto [k, meta] = grid_index_map(a_, b.size, out, align_corners_);
  if (normalized_) {
    // MONAI's Resample(norm_coords=False): A's result goes to grid_sample as is (no
    // 2 / max(2, S)): index = t_in @ diag(S / 2, or (S - 1) / 2 with align_corners) @ A @
    // (AffineGrid's align_corners scale) @ t_out. meta stays MONAI's compute_w_affine.
    std::array<double, 3> ti, to, fi, go;
    for (int i = 0; i < 3; ++i) {
      const double si = static_cast<double>(b.size[i]), so = static_cast<double>(out[i]);
      const double mo = std::max(2.0, so);
      ti[i] = (si - 1) / 2, to[i] = -(so - 1) / 2;
      fi[i] = align_corners_ ? (si - 1) / 2 : si / 2;
      go[i] = align_corners_ ? mo / (mo - 1) : 1.0;
    }
    k = mul(mul(mul(mul(translate(ti), diag4(fi)), a_), diag4(go)), translate(to));
  }
  return finish_grid(b,
                     uniform_launch(k, meta, b.n, out, grid_padding(padding_mode_, "padding_mode"),
                                    align_corners_),
                     modes, mode_, affine);
}

RandAffine::RandAffine(double prob, std::vector<Range> rotate_range, std::vector<Range> shear_range,
                       std::vector<Range> translate_range, std::vector<Range> scale_range,
                       std::vector<int64_t> spatial_size, std::string mode,
                       std::string padding_mode)
    : RandomTransform(prob, 1 + static_cast<int64_t>(rotate_range.size() + shear_range.size() +
                                                     translate_range.size() + scale_range.size())),
      ranges_{std::move(rotate_range), std::move(shear_range), std::move(translate_range),
              std::move(scale_range)},
      spatial_size_(std::move(spatial_size)),
      mode_(std::move(mode)),
      padding_mode_(std::move(padding_mode)) {
  static const char* names[4] = {"rotate_range", "shear_range", "translate_range", "scale_range"};
  for (int g = 0; g < 4; ++g)
    for (const Range& r : ranges_[g])
      TORCH_CHECK_VALUE(std::isfinite(r.lo) && std::isfinite(r.hi), names[g],
                        " must be finite, got (", r.lo, ", ", r.hi, ")");
  TORCH_CHECK_VALUE(ranges_[0].size() <= 3, "rotate_range must have at most 3 elements (one per ",
                    "spatial axis), got ", ranges_[0].size());
  check_size_arg(spatial_size_, "spatial_size");
  grid_mode(mode_, "mode");
  grid_padding(padding_mode_, "padding_mode");
}
Draw RandAffine::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  Draw d = uniforms(batch, seed, first_sample);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i) {  // RandAffine.parameters
    if (!d.gates[i]) continue;
    int64_t j = 1;
    for (int g = 0; g < 4; ++g) {
      const double add = g == 3 ? 1.0 : 0.0;
      for (const Range& r : ranges_[g])
        d.params[i].push_back(r.lo + (r.hi - r.lo) * u[i * k_ + j++] + add);
    }
  }
  return d;
}
at::Tensor RandAffine::centred_matrices(const Draw& d) const {
  check_draw(d, static_cast<int64_t>(d.params.size()), k_);
  std::vector<M4> out;
  for (size_t i = 0; i < d.params.size(); ++i) {
    if (!d.gates[i]) {
      out.push_back(eye4());
      continue;
    }
    std::array<std::vector<double>, 4> p;
    size_t j = 0;
    for (int g = 0; g < 4; ++g)
      for (size_t e = 0; e < ranges_[g].size(); ++e) p[g].push_back(d.params[i].at(j++));
    out.push_back(centred_affine(p[0], p[1], p[2], p[3]));
  }
  return stack(out);
}
Result RandAffine::apply(Inputs inputs, const Draw& d, const Modes& modes,
                         const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  const Size3 out = fall_back_size(spatial_size_, b.size);
  const at::Tensor a = centred_matrices(d);
  Launch g;
  g.out_size = out;
  g.padding = grid_padding(padding_mode_, "padding_mode");
  for (int64_t i = 0; i < b.n; ++i) {
    const auto [k, meta] = grid_index_map(from_tensor(a[i]), b.size, out, false);
    g.maps.push_back(k);
    g.meta.push_back(meta);
  }
  return finish_grid(b, g, modes, mode_, affine);
}
Result RandAffine::operator()(Inputs inputs, int64_t seed, int64_t first_sample, const Modes& modes,
                              const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

// ---------------- Rotate / RandRotate ----------------
Rotate::Rotate(std::vector<double> angle, bool keep_size, std::string mode,
               std::string padding_mode, bool align_corners, std::string rotate_order)
    : angle_(rep3(angle, "angle")),
      keep_size_(keep_size),
      mode_(std::move(mode)),
      padding_mode_(std::move(padding_mode)),
      align_corners_(align_corners),
      rotate_order_(std::move(rotate_order)) {
  grid_mode(mode_, "mode");
  grid_padding(padding_mode_, "padding_mode");
  check_rotate_order(rotate_order_, 3);  // MONAI's ensure_tuple_rep(angle, 3): three angles
}
Result Rotate::operator()(Inputs inputs, const Modes& modes, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const auto [k, out] = rotate_map(b.size, angle_, keep_size_, rotate_order_);
  return finish_grid(
      b,
      uniform_launch(k, k, b.n, out, grid_padding(padding_mode_, "padding_mode"), align_corners_),
      modes, mode_, affine);
}

namespace {
Range sorted_range(Range r, const char* name) {  // _angle_range: one number r -> sorted (-r, r)
  TORCH_CHECK_VALUE(std::isfinite(r.lo) && std::isfinite(r.hi), name, " must be finite, got (",
                    r.lo, ", ", r.hi, ")");
  if (r.single && r.lo > r.hi) std::swap(r.lo, r.hi);
  return r;
}
}  // namespace

RandRotate::RandRotate(Range range_x, Range range_y, Range range_z, double prob, bool keep_size,
                       std::string mode, std::string padding_mode, bool align_corners)
    : RandomTransform(prob, 4),
      ranges_{sorted_range(range_x, "range_x"), sorted_range(range_y, "range_y"),
              sorted_range(range_z, "range_z")},
      keep_size_(keep_size),
      mode_(std::move(mode)),
      padding_mode_(std::move(padding_mode)),
      align_corners_(align_corners) {
  grid_mode(mode_, "mode");
  grid_padding(padding_mode_, "padding_mode");
}
Draw RandRotate::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  Draw d = uniforms(batch, seed, first_sample);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i)  // RandRotate.angles
    for (int a = 0; a < 3; ++a)
      d.params[i].push_back(
          d.gates[i] ? ranges_[a].lo + (ranges_[a].hi - ranges_[a].lo) * u[i * k_ + 1 + a] : 0.0);
  return d;
}
Result RandRotate::apply(Inputs inputs, const Draw& d, const Modes& modes,
                         const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  Launch g;
  g.out_size = b.size;
  g.padding = grid_padding(padding_mode_, "padding_mode");
  g.align_corners = align_corners_;
  for (int64_t i = 0; i < b.n; ++i) {
    const auto [k, out] =
        rotate_map(b.size, {d.params[i].at(0), d.params[i].at(1), d.params[i].at(2)}, keep_size_);
    TORCH_CHECK_VALUE(i == 0 || out == g.out_size, "inputs: keep_size=false gives the samples of ",
                      "this batch different shapes; transform them one at a time or use ",
                      "keep_size=true");
    g.out_size = out;
    g.maps.push_back(k);
    g.meta.push_back(k);
  }
  return finish_grid(b, g, modes, mode_, affine);
}
Result RandRotate::operator()(Inputs inputs, int64_t seed, int64_t first_sample, const Modes& modes,
                              const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

// ---------------- Resize / Zoom / RandZoom ----------------
namespace {
// Zoom._plan_axes: per axis (zoomed size, first zoomed voxel kept, voxels kept, keep_size
// padding (before, after)).
struct ZoomPlan {
  Size3 zoomed{}, first{}, count{};
  std::array<std::pair<int64_t, int64_t>, 3> widths{};
  Size3 out_size() const {
    Size3 o;
    for (int a = 0; a < 3; ++a) o[a] = count[a] + widths[a].first + widths[a].second;
    return o;
  }
  bool padded() const {
    for (const auto& w : widths)
      if (w.first || w.second) return true;
    return false;
  }
};
ZoomPlan plan_zoom(const Size3& size, const std::array<double, 3>& zoom, bool keep_size) {
  ZoomPlan p;
  for (int a = 0; a < 3; ++a) {
    const int64_t s = size[a];
    const double zd = std::floor(static_cast<double>(s) * zoom[a]);
    TORCH_CHECK_VALUE(zd < 2147483648.0, "zoom (", zoom[0], ", ", zoom[1], ", ", zoom[2],
                      ") of inputs with spatial size (", size[0], ", ", size[1], ", ", size[2],
                      ") gives an output axis of ", zd, " voxels (at most 2^31 - 1)");
    const int64_t z = static_cast<int64_t>(zd);
    TORCH_CHECK_VALUE(z >= 1, "zoom (", zoom[0], ", ", zoom[1], ", ", zoom[2], ") of inputs ",
                      "with spatial size (", size[0], ", ", size[1], ", ", size[2],
                      ") gives an empty output");
    p.zoomed[a] = z, p.first[a] = 0, p.count[a] = z, p.widths[a] = {0, 0};
    if (keep_size && z > s) {  // CenterSpatialCrop: start = z // 2 - s // 2
      p.first[a] = z / 2 - s / 2, p.count[a] = s;
    } else if (keep_size && z < s) {  // SpatialPad, symmetric
      p.widths[a] = {(s - z) / 2, s - z - (s - z) / 2};
    }
  }
  return p;
}
// Zoom._geometry for one interpolate rule and MONAI dtype: the map onto the kept voxels, the
// keep_size padding, the 'area' pooling.
Launch zoom_launch(const Size3& in, const ZoomPlan& p, const std::string& rule, bool align,
                   int64_t n, const std::string& pad_mode, double pad_value, at::ScalarType dtype) {
  Launch g;
  g.out_size = p.count;
  g.padding = 1;  // interpolate clamps: border
  g.align_corners = align;
  g.compute = dtype;
  std::array<Axis, 3> axes;
  for (int a = 0; a < 3; ++a)
    axes[a] = interp_axis(in[a], p.zoomed[a], p.first[a], p.count[a], rule, align, dtype);
  diag_launch(g, axes, n);
  // Padding shifts the output: the metadata map sees padded voxel o as zoomed voxel o - before.
  const M4 shift =
      translate({-static_cast<double>(p.widths[0].first), -static_cast<double>(p.widths[1].first),
                 -static_cast<double>(p.widths[2].first)});
  for (auto& m : g.meta) m = mul(m, shift);
  if (p.padded()) g.pad = Pad{p.widths, pad_mode, pad_value};
  if (rule == "area") g.pool = std::array<Size3, 3>{p.zoomed, p.first, p.count};
  return g;
}
// _sample_pad: keep_size padding with per-sample widths. `out` holds sample i's zoomed voxels at
// 0 .. count - 1 of each axis (the rest of the launch's output is discarded); numpy.pad's source
// index per padded position is one batched gather per padded axis (the values apply_pad gives
// that sample alone).
at::Tensor sample_pad(at::Tensor out, const std::vector<ZoomPlan>& plans, const std::string& mode,
                      double value) {
  if (std::none_of(plans.begin(), plans.end(), [](const ZoomPlan& p) { return p.padded(); }))
    return out;
  const int64_t n = out.size(0);
  std::optional<at::Tensor> inside;
  for (int a = 0; a < 3; ++a) {
    const int64_t size = out.size(2 + a);
    std::vector<int64_t> rows;
    bool identity = true;
    for (const ZoomPlan& p : plans) {
      const auto [before, after] = p.widths[a];
      std::vector<int64_t> row;
      if (before || after) {
        row = pad_index(size - before - after, before, after, mode);
      } else {
        for (int64_t j = 0; j < size; ++j) row.push_back(j);
      }
      for (int64_t j = 0; j < size; ++j) identity = identity && row[j] == j;
      rows.insert(rows.end(), row.begin(), row.end());
    }
    if (identity) continue;
    std::vector<int64_t> shape{n, 1, 1, 1, 1};
    shape[2 + a] = size;
    at::Tensor idx = index_tensor(rows, out.device()).view(shape);
    if (mode == "constant") {  // -1: outside the zoomed voxels
      const at::Tensor in = idx.ge(0);
      inside = inside ? at::logical_and(*inside, in) : in;
      idx = idx.clamp_min(0);
    }
    out = at::gather(out, 2 + a, idx.expand(out.sizes()));
  }
  if (!inside) return out;
  check_pad_value(value, out);
  return out.masked_fill(inside->logical_not(), value);
}
// _anti_alias_sigma: MONAI's rule: only when some axis shrinks; no sigma given: skimage's
// max(0, (in / out - 1) / 2) per axis (MONAI computes in / out in float32); a given sigma on the
// shrinking axes only.
std::optional<std::array<double, 3>> anti_alias_sigma(const Size3& in, const Size3& out,
                                                      const std::vector<double>& sigma) {
  bool shrinks = false;
  for (int a = 0; a < 3; ++a) shrinks = shrinks || out[a] < in[a];
  if (!shrinks) return std::nullopt;
  std::array<double, 3> s;
  for (int a = 0; a < 3; ++a) {
    const float f = static_cast<float>(in[a]) / static_cast<float>(out[a]);
    s[a] = sigma.empty() ? static_cast<double>(std::max(0.0f, (f - 1.0f) / 2.0f))
                         : sigma[sigma.size() == 1 ? 0 : a] * (f > 1.0f ? 1.0 : 0.0);
  }
  return s;
}
}  // namespace

Resize::Resize(std::vector<int64_t> spatial_size, std::string mode, std::string size_mode,
               std::optional<bool> align_corners, bool anti_aliasing,
               std::vector<double> anti_aliasing_sigma, std::optional<at::ScalarType> dtype)
    : spatial_size_(std::move(spatial_size)),
      mode_(std::move(mode)),
      longest_(size_mode == "longest"),
      align_corners_(align_corners),
      anti_aliasing_(anti_aliasing),
      sigma_(std::move(anti_aliasing_sigma)),
      dtype_(check_dtype(dtype)) {
  TORCH_CHECK_VALUE(size_mode == "all" || size_mode == "longest",
                    "size_mode must be 'all' or 'longest', got '", size_mode, "'");
  if (longest_) {
    TORCH_CHECK_VALUE(spatial_size_.size() == 1 && spatial_size_[0] >= 1, "spatial_size must be ",
                      "one int >= 1 (the longest side) with size_mode='longest', got ",
                      join(spatial_size_));
  } else {
    TORCH_CHECK_VALUE(spatial_size_.size() == 3, "spatial_size must be 3 ints (D, H, W) (MONAI ",
                      "needs one per spatial dim; non-positive: keep that axis), got ",
                      join(spatial_size_));
  }
  interp_mode(mode_, "mode");
  interp_align(align_corners_, mode_);
  TORCH_CHECK_VALUE(sigma_.empty() || sigma_.size() == 1 || sigma_.size() == 3,
                    "anti_aliasing_sigma must be empty (MONAI's rule), 1 value (all axes) or 3 ",
                    "(D, H, W), got ", join(sigma_));
  for (double s : sigma_)
    TORCH_CHECK_VALUE(std::isfinite(s) && s >= 0, "anti_aliasing_sigma must be finite and >= 0 ",
                      "(voxels), got ", join(sigma_));
}
Result Resize::operator()(Inputs inputs, const Modes& modes, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  Size3 out;
  if (longest_) {  // MONAI: int(round(s * spatial_size / max(size))), round half to even
    const double scale = static_cast<double>(spatial_size_[0]) /
                         static_cast<double>(*std::max_element(b.size.begin(), b.size.end()));
    for (int a = 0; a < 3; ++a) {
      const double o = std::nearbyint(static_cast<double>(b.size[a]) * scale);
      TORCH_CHECK_VALUE(o < 2147483648.0, "spatial_size ", join(spatial_size_),
                        " (size_mode 'longest') gives an output axis of ", o,
                        " voxels (at most 2^31 - 1)");
      out[a] = static_cast<int64_t>(o);
    }
  } else {
    out = fall_back_size(spatial_size_, b.size);
    for (int a = 0; a < 3; ++a)
      TORCH_CHECK_VALUE(out[a] < 2147483648LL, "spatial_size ", join(spatial_size_),
                        " gives an output axis of ", out[a], " voxels (at most 2^31 - 1)");
  }
  TORCH_CHECK_VALUE(out[0] >= 1 && out[1] >= 1 && out[2] >= 1, "spatial_size ", join(spatial_size_),
                    " gives an empty output (", out[0], ", ", out[1], ", ", out[2],
                    ") for inputs with spatial size (", b.size[0], ", ", b.size[1], ", ", b.size[2],
                    ")");
  auto plan = [&](const std::string& rule, at::ScalarType dtype) {
    const bool align = rule == "linear" && align_corners_.value_or(false);
    Launch g;
    g.out_size = out;
    g.padding = 1;  // interpolate clamps: border
    g.align_corners = align;
    g.compute = dtype;
    std::array<Axis, 3> axes;
    if (out == b.size) {  // MONAI returns the input as is: the identity map, no smoothing
      for (auto& a : axes) a = Axis{1.0, 0.0, 1.0, 0.0, std::nullopt};
      diag_launch(g, axes, b.n);
      return g;
    }
    for (int a = 0; a < 3; ++a)
      axes[a] = interp_axis(b.size[a], out[a], 0, out[a], rule, align, dtype);
    diag_launch(g, axes, b.n);
    if (rule == "area") g.pool = std::array<Size3, 3>{out, Size3{0, 0, 0}, out};
    if (anti_aliasing_) g.smooth = anti_alias_sigma(b.size, out, sigma_);
    return g;
  };
  return finish_interp(b, modes, mode_, dtype_, plan, affine);
}

Zoom::Zoom(std::vector<double> zoom, std::string mode, bool keep_size, std::string padding_mode,
           std::optional<bool> align_corners, double pad_value, std::optional<at::ScalarType> dtype)
    : zoom_(rep3(zoom, "zoom")),
      mode_(std::move(mode)),
      keep_size_(keep_size),
      padding_mode_(pad_mode(padding_mode)),
      align_corners_(align_corners),
      pad_value_(pad_value),
      dtype_(check_dtype(dtype)) {
  for (double z : zoom_) TORCH_CHECK_VALUE(z > 0, "zoom must be > 0, got ", join(zoom));
  interp_mode(mode_, "mode");
  interp_align(align_corners_, mode_);
  TORCH_CHECK_VALUE(std::isfinite(pad_value_), "pad_value must be finite, got ", pad_value_);
}
Result Zoom::operator()(Inputs inputs, const Modes& modes, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const ZoomPlan p = plan_zoom(b.size, zoom_, keep_size_);
  auto plan = [&](const std::string& rule, at::ScalarType dtype) {
    return zoom_launch(b.size, p, rule, rule == "linear" && align_corners_.value_or(false), b.n,
                       padding_mode_, pad_value_, dtype);
  };
  return finish_interp(b, modes, mode_, dtype_, plan, affine);
}

namespace {
// _zoom_range: MONAI RandZoom's ensure_tuple(min_zoom) / ensure_tuple(max_zoom), paired.
std::vector<std::pair<double, double>> zoom_ranges(const std::vector<double>& lo,
                                                   const std::vector<double>& hi) {
  TORCH_CHECK_VALUE(lo.size() == hi.size(), "min_zoom and max_zoom must have the same length, ",
                    "got ", join(lo), " and ", join(hi));
  TORCH_CHECK_VALUE(!lo.empty() && lo.size() <= 3, "min_zoom / max_zoom must be 1 number ",
                    "(isotropic), 2 (first for the first two spatial axes, second for the last) ",
                    "or 3 (one per spatial axis), got ", join(lo));
  check_finite(lo, "min_zoom");
  check_finite(hi, "max_zoom");
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < lo.size(); ++i) {
    TORCH_CHECK_VALUE(lo[i] > 0 && hi[i] > 0, "min_zoom and max_zoom must be > 0, got ", join(lo),
                      " and ", join(hi));
    out.emplace_back(lo[i], hi[i]);
  }
  return out;
}
}  // namespace

RandZoom::RandZoom(double prob, std::vector<double> min_zoom, std::vector<double> max_zoom,
                   std::string mode, std::string padding_mode, std::optional<bool> align_corners,
                   bool keep_size, double pad_value, std::optional<at::ScalarType> dtype)
    : RandomTransform(prob, 4),
      ranges_(zoom_ranges(min_zoom, max_zoom)),
      mode_(std::move(mode)),
      padding_mode_(pad_mode(padding_mode)),
      align_corners_(align_corners),
      keep_size_(keep_size),
      pad_value_(pad_value),
      dtype_(check_dtype(dtype)) {
  interp_mode(mode_, "mode");
  interp_align(align_corners_, mode_);
  TORCH_CHECK_VALUE(std::isfinite(pad_value_), "pad_value must be finite, got ", pad_value_);
}
Draw RandZoom::draw(int64_t batch, int64_t seed, int64_t first_sample) const {
  Draw d = uniforms(batch, seed, first_sample);
  const double* u = d.uniforms.data_ptr<double>();
  for (int64_t i = 0; i < batch; ++i) {  // RandZoom.zooms
    if (!d.gates[i]) {
      d.params[i] = {1.0, 1.0, 1.0};
      continue;
    }
    std::vector<double> z;
    for (size_t j = 0; j < ranges_.size(); ++j)
      z.push_back(ranges_[j].first + (ranges_[j].second - ranges_[j].first) * u[i * k_ + 1 + j]);
    d.params[i] = z.size() == 1   ? std::vector<double>{z[0], z[0], z[0]}
                  : z.size() == 2 ? std::vector<double>{z[0], z[0], z[1]}
                                  : z;
  }
  return d;
}
Result RandZoom::apply(Inputs inputs, const Draw& d, const Modes& modes,
                       const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  check_draw(d, b.n, k_);
  std::vector<ZoomPlan> plans;
  for (int64_t i = 0; i < b.n; ++i) {
    const std::vector<double>& z = d.params[i];
    TORCH_CHECK_VALUE(z.size() == 3, "draw: params[", i, "] must hold 3 zoom factors, got ",
                      z.size());
    plans.push_back(plan_zoom(b.size, {z[0], z[1], z[2]}, keep_size_));
    TORCH_CHECK_VALUE(plans[i].out_size() == plans[0].out_size(), "inputs: keep_size=false ",
                      "gives the samples of this batch different shapes; transform them one at a ",
                      "time or use keep_size=true");
  }
  const Size3 out = b.n ? plans[0].out_size() : b.size;
  Result r;
  const std::vector<std::string> rules = input_rules(b, modes, mode_);
  std::vector<at::ScalarType> dtypes;
  for (const at::Tensor& x : b.xs) dtypes.push_back(table_dtype(dtype_, x));
  std::vector<at::Tensor> outs(b.xs.size());
  std::vector<M4> maps, meta;
  std::vector<bool> done(b.xs.size(), false);
  for (size_t i = 0; i < b.xs.size(); ++i) {
    if (done[i]) continue;
    const std::string& rule = rules[i];
    const bool align = rule == "linear" && align_corners_.value_or(false);
    std::vector<size_t> members;
    for (size_t j = i; j < b.xs.size(); ++j)
      if (!done[j] && rules[j] == rule && dtypes[j] == dtypes[i])
        members.push_back(j), done[j] = true;
    // Each sample's Zoom (one-sample launch: its map, table, padding, pooling).
    std::vector<Launch> per;
    for (const ZoomPlan& p : plans)
      per.push_back(zoom_launch(b.size, p, rule, align, 1, padding_mode_, pad_value_, dtypes[i]));
    if (i == 0)
      for (const Launch& g : per) maps.push_back(g.maps[0]), meta.push_back(g.meta[0]);
    const std::vector<int64_t> kmodes(members.size(), rule.rfind("nearest", 0) == 0 ? 0 : 1);
    if (b.n == 0) {
      for (size_t j : members) {
        const at::Tensor& x = b.xs[j];
        outs[j] = x.new_empty({0, x.size(1), out[0], out[1], out[2]});
      }
      continue;
    }
    const bool per_sample =
        rule == "area" ||
        std::any_of(per.begin(), per.end(), [](const Launch& g) { return g.tables.has_value(); });
    if (i == 0) {
      r.single_map = !per_sample && std::none_of(plans.begin(), plans.end(),
                                                 [](const ZoomPlan& p) { return p.padded(); });
      r.kernel_mode = kmodes[0];
      r.padding = 1;
      r.align_corners = align;
    }
    if (per_sample) {  // each sample pools to its own size / gathers with its own table
      std::vector<std::vector<at::Tensor>> parts(members.size());
      for (int64_t s = 0; s < b.n; ++s) {
        std::vector<at::Tensor> xs;
        for (size_t j : members) xs.push_back(b.xs[j].narrow(0, s, 1));
        auto o = run(xs, per[s], kmodes);
        for (size_t k = 0; k < members.size(); ++k) parts[k].push_back(o[k]);
      }
      for (size_t k = 0; k < members.size(); ++k) outs[members[k]] = at::cat(parts[k]);
      continue;
    }
    // One launch: each sample's map on the common output size, then its keep_size padding.
    Launch g;
    for (const Launch& p : per) g.maps.push_back(p.maps[0]), g.meta.push_back(p.meta[0]);
    g.out_size = out;
    g.compute = dtypes[i];
    g.padding = 1;
    g.align_corners = align;
    std::vector<at::Tensor> xs;
    for (size_t j : members) xs.push_back(b.xs[j]);
    auto o = run(xs, g, kmodes);
    for (size_t k = 0; k < members.size(); ++k)
      outs[members[k]] = sample_pad(o[k], plans, padding_mode_, pad_value_);
  }
  r.outputs = restore(b, outs);
  r.maps = maps.empty() ? at::empty({0, 4, 4}, at::kDouble) : stack(maps);
  r.meta = meta.empty() ? at::empty({0, 4, 4}, at::kDouble) : stack(meta);
  r.out_size = out;
  r.affine = update_affine(affine, r.meta);
  return r;
}
Result RandZoom::operator()(Inputs inputs, int64_t seed, int64_t first_sample, const Modes& modes,
                            const Affine4& affine) const {
  return apply(inputs, draw(as_batch(inputs).n, seed, first_sample), modes, affine);
}

// ---------------- Spacing / Orientation ----------------
Spacing::Spacing(std::vector<double> pixdim, std::string mode, std::string padding_mode,
                 bool align_corners, bool diagonal, bool scale_extent, bool recompute_affine,
                 std::vector<double> min_pixdim, std::vector<double> max_pixdim,
                 std::vector<int64_t> output_spatial_shape)
    : pixdim_(std::move(pixdim)),
      min_pixdim_(std::move(min_pixdim)),
      max_pixdim_(std::move(max_pixdim)),
      output_spatial_shape_(std::move(output_spatial_shape)),
      mode_(std::move(mode)),
      padding_mode_(std::move(padding_mode)),
      align_corners_(align_corners),
      diagonal_(diagonal),
      scale_extent_(scale_extent),
      recompute_affine_(recompute_affine) {
  TORCH_CHECK_VALUE(!pixdim_.empty(), "pixdim must be a non-empty sequence of numbers");
  check_finite(pixdim_, "pixdim");
  for (double v : min_pixdim_)
    TORCH_CHECK_VALUE(!std::isinf(v), "min_pixdim must be numbers (NaN: no bound on that axis), ",
                      "got ", join(min_pixdim_));
  for (double v : max_pixdim_)
    TORCH_CHECK_VALUE(v != -INFINITY, "max_pixdim must be numbers (NaN or inf: no bound on that ",
                      "axis), got ", join(max_pixdim_));
  // MONAI's check (zip of the two: only axes where both are given)
  for (size_t i = 0; i < std::min(min_pixdim_.size(), max_pixdim_.size()); ++i) {
    const double mn = min_pixdim_[i], mx = max_pixdim_[i];
    TORCH_CHECK_VALUE(std::isnan(mn) || std::isnan(mx) || (mx >= mn && mn >= 0), "min_pixdim ",
                      join(min_pixdim_), " must be positive, smaller than max_pixdim ",
                      join(max_pixdim_));
  }
  grid_mode(mode_, "mode");
  grid_padding(padding_mode_, "padding_mode");
  check_size_arg(output_spatial_shape_, "output_spatial_shape");
  for (int64_t v : output_spatial_shape_)
    TORCH_CHECK_VALUE(v != 0 && v < 2147483648LL, "output_spatial_shape must be sizes >= 1 (at ",
                      "most 2^31 - 1) or negative (the input's size on that axis), got ",
                      join(output_spatial_shape_));
}
Result Spacing::operator()(Inputs inputs, const Modes& modes, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const M4 src = one_affine(affine, b.n);
  {
    const at::Tensor s = at::linalg_svdvals(t33(src));  // np.linalg.matrix_rank's tolerance
    const double tol = s.max().item<double>() * 3 * std::numeric_limits<double>::epsilon();
    TORCH_CHECK_VALUE(s.gt(tol).sum().item<int64_t>() == 3, "affine is singular (not invertible): ",
                      "Spacing maps the output grid through the inverse of the input affine; its ",
                      "3x3 part needs full rank (non-zero voxel spacing on every axis, axes not ",
                      "parallel)");
  }
  // Spacing._plan
  std::array<double, 3> out_d;
  for (int i = 0; i < 3; ++i) out_d[i] = pixdim_[std::min<size_t>(i, pixdim_.size() - 1)];
  const auto orig_d = spacing_of(src);
  for (int i = 0; i < 3; ++i) {  // MONAI 1.5: keep an axis whose spacing is within the bounds
    const double t = out_d[i];
    const bool has_mn = i < static_cast<int>(min_pixdim_.size()) && !std::isnan(min_pixdim_[i]);
    const bool has_mx = i < static_cast<int>(max_pixdim_.size()) && !std::isnan(max_pixdim_[i]);
    const double mn = has_mn ? std::min(min_pixdim_[i], t) : t;
    const double mx = has_mx ? std::max(max_pixdim_[i], t) : t;
    out_d[i] = (mn - kAffineTol) <= orig_d[i] && orig_d[i] <= (mx + kAffineTol) ? orig_d[i] : t;
  }
  M4 dst = zoom_affine(src, out_d, diagonal_);
  const auto [computed, offset] = compute_shape_offset(b.size, src, dst, scale_extent_);
  for (int i = 0; i < 3; ++i) dst[i * 4 + 3] = offset[i];
  Size3 shape = computed;
  if (!output_spatial_shape_.empty()) {  // MONAI's fall_back_tuple(.., lambda x: x >= 0)
    for (int i = 0; i < 3; ++i) {
      const int64_t v = output_spatial_shape_[output_spatial_shape_.size() == 1 ? 0 : i];
      shape[i] = v >= 0 ? v : b.size[i];
    }
  }
  TORCH_CHECK_VALUE(shape[0] >= 1 && shape[1] >= 1 && shape[2] >= 1, "pixdim: the output shape (",
                    shape[0], ", ", shape[1], ", ", shape[2], ") is empty");
  const M4 xform = solve(src, dst, "affine: the source affine");
  const bool unchanged =
      shape == b.size && (allclose(src, dst, kAffineTol) || allclose(xform, eye4(), kAffineTol));
  const M4 k = unchanged ? eye4() : xform;
  Result r = finish_grid(
      b,
      uniform_launch(k, k, b.n, shape, grid_padding(padding_mode_, "padding_mode"), align_corners_),
      modes, mode_, std::nullopt);
  // affine @ xform (the given affine's shape kept; the identity when none was given)
  at::Tensor base = affine && affine->defined()
                        ? affine->to(at::kDouble)
                        : at::eye(4, at::TensorOptions().dtype(at::kDouble));
  if (recompute_affine_) {
    r.single_map = false;  // the affine is replaced, not updated by the map
    // MONAI replaces the affine by scale_affine(input size, output size, align_corners) (its
    // equal-size shortcut never fires there: it compares a tuple with a list).
    M4 a = eye4();
    for (int i = 0; i < 3; ++i) {
      const double o = static_cast<double>(b.size[i]), n = static_cast<double>(shape[i]);
      a[i * 5] = align_corners_ ? (n == 1 ? 0.0 : (o - 1) / (n - 1)) : o / std::max(n, 1.0);
      if (!align_corners_) a[i * 4 + 3] = (a[i * 5] - 1) / 2.0;
    }
    at::Tensor m = to_tensor(a);
    if (!base.is_cpu()) m = host_to(m, base.device());
    r.affine = base.dim() == 3 ? m.expand({base.size(0), 4, 4}).clone() : m;
    return r;
  }
  at::Tensor m = to_tensor(k);
  if (!base.is_cpu()) m = host_to(m, base.device());
  r.affine = at::matmul(base, m);
  return r;
}

Orientation::Orientation(std::string axcodes, bool as_closest_canonical, Labels labels)
    : axcodes_(std::move(axcodes)), canonical_(as_closest_canonical), labels_(std::move(labels)) {
  const LabelChars chars = label_chars(labels_);  // validate now
  if (!canonical_) {
    TORCH_CHECK_VALUE(axcodes_.size() == 3, "axcodes must be 3 axis codes such as 'RAS' (one per ",
                      "spatial axis), got '", axcodes_, "'");
    axcodes2ornt(axcodes_, chars);
  }
}
Result Orientation::operator()(Inputs inputs, const Modes&, const Affine4& affine) const {
  const Batch b = as_batch(inputs);
  const M4 src = one_affine(affine, b.n);
  const auto start = io_orientation(src);
  TORCH_CHECK_VALUE(start.has_value(), "affine: its 3x3 part is rank deficient; no orientation ",
                    "can be read from it");
  const Ornt ornt =
      canonical_ ? *start : ornt_transform(*start, axcodes2ornt(axcodes_, label_chars(labels_)));
  const M4 xform = inv_ornt_aff(ornt, b.size);
  Size3 out;
  for (int i = 0; i < 3; ++i) out[static_cast<int>(ornt[i][0])] = b.size[i];  // size[argsort]
  Result r = exact(std::vector<M4>(b.n, xform), out, std::nullopt, b);
  at::Tensor base = affine && affine->defined()
                        ? affine->to(at::kDouble)
                        : at::eye(4, at::TensorOptions().dtype(at::kDouble));
  at::Tensor m = to_tensor(xform);
  if (!base.is_cpu()) m = host_to(m, base.device());
  r.affine = at::matmul(base, m);
  return r;
}

// ---------------- SpatialCrop / CenterSpatialCrop ----------------
namespace {
// MONAI's _broadcast_int_pair: 1 or 3 values each, a single value repeated.
std::pair<std::array<int64_t, 3>, std::array<int64_t, 3>> int_pair(const std::vector<int64_t>& a,
                                                                   const std::vector<int64_t>& b,
                                                                   const char* na, const char* nb) {
  TORCH_CHECK_VALUE((a.size() == 1 || a.size() == 3) && (b.size() == 1 || b.size() == 3), na,
                    " and ", nb,
                    " must have 1 value (every spatial axis) or 3 (D, H, W) each, got ", a.size(),
                    " and ", b.size());
  std::array<int64_t, 3> x{}, y{};
  for (int i = 0; i < 3; ++i) x[i] = a[a.size() == 1 ? 0 : i], y[i] = b[b.size() == 1 ? 0 : i];
  return {x, y};
}
int64_t floordiv2(int64_t v) {
  return v >= 0 ? v / 2 : -((-v + 1) / 2);
}
// Python's slice(start, end).indices(size) for 0 <= start <= end: an integer translation.
Result crop(Inputs inputs, const std::array<int64_t, 3>& start, const std::array<int64_t, 3>& end,
            const Affine4& affine) {
  const Batch b = as_batch(inputs);
  Size3 first, out;
  for (int a = 0; a < 3; ++a) {
    first[a] = std::min(start[a], b.size[a]);
    out[a] = std::min(end[a], b.size[a]) - first[a];
  }
  TORCH_CHECK_VALUE(out[0] >= 1 && out[1] >= 1 && out[2] >= 1, "the crop [", start[0], ", ", end[0],
                    ") x [", start[1], ", ", end[1], ") x [", start[2], ", ", end[2],
                    ") of inputs with spatial size (", b.size[0], ", ", b.size[1], ", ", b.size[2],
                    ") is empty (", out[0], ", ", out[1], ", ", out[2],
                    "); voxaug refuses empty outputs");
  const M4 m = translate({static_cast<double>(first[0]), static_cast<double>(first[1]),
                          static_cast<double>(first[2])});
  return exact(std::vector<M4>(b.n, m), out, affine, b);
}
}  // namespace

SpatialCrop::SpatialCrop(std::vector<int64_t> roi_start, std::vector<int64_t> roi_end) {
  const auto [s, e] = int_pair(roi_start, roi_end, "roi_start", "roi_end");
  for (int a = 0; a < 3; ++a)
    start_[a] = std::max<int64_t>(s[a], 0), end_[a] = std::max(e[a], start_[a]);
}
SpatialCrop SpatialCrop::centered(std::vector<int64_t> roi_center, std::vector<int64_t> roi_size) {
  const auto [c, z] = int_pair(roi_center, roi_size, "roi_center", "roi_size");
  std::vector<int64_t> s(3), e(3);
  for (int a = 0; a < 3; ++a)
    s[a] = std::max<int64_t>(c[a] - floordiv2(z[a]), 0), e[a] = s[a] + z[a];
  return SpatialCrop(s, e);
}
Result SpatialCrop::operator()(Inputs inputs, const Modes&, const Affine4& affine) const {
  return crop(inputs, start_, end_, affine);
}

CenterSpatialCrop::CenterSpatialCrop(std::vector<int64_t> roi_size)
    : roi_size_(std::move(roi_size)) {
  TORCH_CHECK_VALUE(roi_size_.size() == 1 || roi_size_.size() == 3, "roi_size must be 1 value ",
                    "(every spatial axis) or 3 (D, H, W), got ", join(roi_size_));
}
Result CenterSpatialCrop::operator()(Inputs inputs, const Modes& modes,
                                     const Affine4& affine) const {
  const Size3 in = as_batch(inputs).size;
  const Size3 size = fall_back_size(roi_size_, in);
  return SpatialCrop::centered({in[0] / 2, in[1] / 2, in[2] / 2}, {size[0], size[1], size[2]})(
      inputs, modes, affine);
}

}  // namespace voxaug::transforms
