// voxaug::transforms::common -- host helpers shared by the C++ transform classes
// (spatial_transforms.cpp, deform_transforms.cpp): MONAI's affine construction and
// python/voxaug/spatial.py's index maps in double precision, and the argument checks for mode
// and padding names. Internal to voxaug_torch (not installed). Each function names the Python
// function it ports; keep them in step (tests/python/test_cxx_spatial.py and test_cxx_deform.py
// compare the maps with Python's).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace voxaug::transforms::common {

using Size3 = std::array<int64_t, 3>;

// ---------------- 4x4 row-major double matrices ----------------
using M4 = std::array<double, 16>;

inline M4 eye4() {
  M4 m{};
  for (int i = 0; i < 4; ++i) m[i * 5] = 1.0;
  return m;
}
inline M4 mul(const M4& a, const M4& b) {
  M4 c{};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = 0.0;
      for (int k = 0; k < 4; ++k) s += a[i * 4 + k] * b[k * 4 + j];
      c[i * 4 + j] = s;
    }
  return c;
}
inline M4 translate(const std::array<double, 3>& t) {
  M4 m = eye4();
  for (int i = 0; i < 3; ++i) m[i * 4 + 3] = t[i];
  return m;
}
inline M4 diag4(const std::array<double, 3>& d) {
  M4 m = eye4();
  for (int i = 0; i < 3; ++i) m[i * 5] = d[i];
  return m;
}

// _rotation (MONAI create_rotate), order "XYZ": intrinsic, affine @ r per angle.
inline M4 rotation(const std::vector<double>& radians) {
  M4 a = eye4();
  for (size_t i = 0; i < radians.size() && i < 3; ++i) {
    const double s = std::sin(radians[i]), c = std::cos(radians[i]);
    M4 r = eye4();
    if (i == 0) {
      r[1 * 4 + 1] = c, r[1 * 4 + 2] = -s, r[2 * 4 + 1] = s, r[2 * 4 + 2] = c;
    } else if (i == 1) {
      r[0 * 4 + 0] = c, r[0 * 4 + 2] = s, r[2 * 4 + 0] = -s, r[2 * 4 + 2] = c;
    } else {
      r[0 * 4 + 0] = c, r[0 * 4 + 1] = -s, r[1 * 4 + 0] = s, r[1 * 4 + 1] = c;
    }
    a = mul(a, r);
  }
  return a;
}
// _shear (MONAI create_shear): elementary shears composed in coefficient order.
inline M4 shear(const std::vector<double>& coefs) {
  static const int ij[6][2] = {{0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 1}};
  M4 out = eye4();
  for (int k = 0; k < 6; ++k) {
    M4 s = eye4();
    s[ij[k][0] * 4 + ij[k][1]] = k < static_cast<int>(coefs.size()) ? coefs[k] : 0.0;
    out = mul(s, out);
  }
  return out;
}
// _centred_affine (MONAI AffineGrid): eye @ rotate @ shear @ translate @ scale, each when given;
// `rot` is the rotation matrix already built (nullptr: no rotation).
inline M4 centred_affine_with(const M4* rot, const std::vector<double>& sh,
                              const std::vector<double>& tr, const std::vector<double>& sc) {
  M4 a = eye4();
  if (rot != nullptr) a = mul(a, *rot);
  if (!sh.empty()) a = mul(a, shear(sh));
  if (!tr.empty()) {
    std::array<double, 3> t{0.0, 0.0, 0.0};
    for (size_t i = 0; i < std::min<size_t>(3, tr.size()); ++i) t[i] = tr[i];
    a = mul(a, translate(t));
  }
  if (!sc.empty()) {
    std::array<double, 3> s{1.0, 1.0, 1.0};
    for (size_t i = 0; i < std::min<size_t>(3, sc.size()); ++i) s[i] = sc[i];
    a = mul(a, diag4(s));
  }
  return a;
}
// The same with MONAI's default rotate_order "XYZ" (rotation()).
inline M4 centred_affine(const std::vector<double>& rot, const std::vector<double>& sh,
                         const std::vector<double>& tr, const std::vector<double>& sc) {
  if (rot.empty()) return centred_affine_with(nullptr, sh, tr, sc);
  const M4 r = rotation(rot);
  return centred_affine_with(&r, sh, tr, sc);
}
// _grid_index_map: MONAI's centred matrix -> (kernel index map: output index -> input index,
// metadata map: MONAI's affine update).
inline std::pair<M4, M4> grid_index_map(const M4& a, const Size3& in, const Size3& out,
                                        bool align_corners) {
  std::array<double, 3> ti, to, fi, go;
  for (int i = 0; i < 3; ++i) {
    const double si = static_cast<double>(in[i]), so = static_cast<double>(out[i]);
    ti[i] = (si - 1) / 2;
    to[i] = -(so - 1) / 2;
    const double mi = std::max(2.0, si), mo = std::max(2.0, so);
    fi[i] = align_corners ? (si - 1) / mi : si / mi;
    go[i] = align_corners ? mo / (mo - 1) : 1.0;
  }
  const M4 t_in = translate(ti), t_out = translate(to);
  const M4 k = mul(mul(mul(mul(t_in, diag4(fi)), a), diag4(go)), t_out);
  const M4 meta = mul(mul(t_in, a), t_out);
  return {k, meta};
}

// _fall_back_size (MONAI fall_back_tuple): empty -> the input size; one value for every axis;
// non-positive entries -> the input's. The callers check the length (empty, 1 or 3).
inline Size3 fall_back_size(const std::vector<int64_t>& s, const Size3& in) {
  if (s.empty()) return in;
  Size3 out;
  for (int i = 0; i < 3; ++i) {
    const int64_t v = s.size() == 1 ? s[0] : s[i];
    out[i] = v <= 0 ? in[i] : v;
  }
  return out;
}

// ---------------- argument checks ----------------
// _grid_mode: grid_sample's names -> resample's codes (0 nearest, 1 linear, 2 cubic B-spline),
// and MONAI's integer modes, the spline orders "0" .. "5" (2 / 4 / 5: resample's codes 3 / 4 /
// 5, the prefiltered B-splines of those orders).
inline int64_t grid_mode(const std::string& m, const std::string& arg) {
  if (m == "nearest" || m == "0") return 0;
  if (m == "bilinear" || m == "1") return 1;
  if (m == "bicubic" || m == "3") return 2;  // voxaug's cubic B-spline (as Python's _grid_mode)
  if (m == "2") return 3;
  if (m == "4") return 4;
  if (m == "5") return 5;
  TORCH_CHECK_VALUE(false, arg,
                    " must be 'nearest', 'bilinear', 'bicubic' or a spline order '0' to '5', got '",
                    m, "'");
  return -1;
}
// MONAI's integer modes ("0" .. "5") run scipy's map_coordinates, where padding 'zeros' is
// scipy's 'constant': 0 outside [0, S - 1], no blending, the mirror inside (resample's padding
// code 4, cutoff; Python's _grid_opts).
inline bool is_scipy_mode(const std::string& m) { return m.size() == 1 && m[0] >= '0' && m[0] <= '5'; }
constexpr int64_t kPaddingZeros = 0, kPaddingCutoff = 4;
// The kernel padding of an input with grid mode `m` under grid padding code `padding`.
inline int64_t scipy_padding(const std::string& m, int64_t padding) {
  return padding == kPaddingZeros && is_scipy_mode(m) ? kPaddingCutoff : padding;
}
// _grid_padding: grid_sample's padding names -> resample's codes.
inline int64_t grid_padding(const std::string& p, const std::string& arg) {
  if (p == "zeros") return 0;
  if (p == "border") return 1;
  if (p == "reflection") return 2;
  TORCH_CHECK_VALUE(false, arg, " must be 'zeros', 'border' or 'reflection', got '", p, "'");
  return -1;
}
// A host-built parameter tensor (maps, tables, per-sample factors) onto `device` without blocking
// the host: to a CUDA device through pinned memory (a non-blocking copy from pageable memory may
// be staged synchronously by the driver); the caching host allocator keeps the pinned buffer
// until the copy has run. Python's transforms._host_to. Tensors already off the host, or bound
// for the CPU or the meta device (Compose's planning): a plain .to, non-blocking except from a
// GPU to the host (a non-blocking one lands in pinned memory that the host may read before the
// copy has run).
// A pinned copy of host tensor `t` that no caller holds: pin_memory() returns an already pinned
// tensor itself (e.g. a DataLoader's pinned batch), which its owner may change once the op has
// returned while the non-blocking copy from it has not run yet.
inline at::Tensor pinned_host_copy(const at::Tensor& t) {
  if (t.is_pinned()) return t.new_empty(t.sizes(), t.options().pinned_memory(true)).copy_(t);
  return t.pin_memory();
}
inline at::Tensor host_to(const at::Tensor& t, const c10::Device& device) {
  if (!device.is_cuda() || !t.is_cpu())
    return t.to(device, /*non_blocking=*/!(t.is_cuda() && device.is_cpu()));
  return pinned_host_copy(t).to(device, /*non_blocking=*/true);
}

inline double check_prob(double prob, const char* name = "prob") {
  TORCH_CHECK_VALUE(prob >= 0.0 && prob <= 1.0, name, " must be in [0, 1], got ", prob);
  return prob;
}

}  // namespace voxaug::transforms::common
