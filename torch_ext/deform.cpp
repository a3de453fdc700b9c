// voxaug torch_ext: the deform family's ops (include/voxaug/deform.h). The gather itself is
// the resample op's (resample_common.h) with a field; CPU and CUDA share one entry, Meta
// computes shapes. Not differentiable (the fields come from random draws).
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "autograd_guard.h"
#include "resample_common.h"
#include "tensor_view.h"
#include "voxaug/deform.h"

namespace voxaug::torch_ext {
namespace {

// Checks the field arguments against a launch of `batch` samples on `device` with output
// size out_size; returns the core descriptor (its view is filled by the caller).
DeformField field_descriptor(const at::Tensor& field, int64_t kind, at::ArrayRef<double> scale,
                             at::ArrayRef<double> offset, at::IntArrayRef out_size, int64_t batch,
                             const at::Device& device, bool meta,
                             const std::optional<at::Tensor>& field_map) {
  TORCH_CHECK_VALUE(kind >= 1 && kind <= 3,
                    "field_kind must be 1 (B-spline control grid), 2 (dense) or 3 (separable), "
                    "got ",
                    kind);
  check_5d(field, "field", meta);
  TORCH_CHECK_VALUE(field.scalar_type() == at::kFloat || field.scalar_type() == at::kDouble,
                    "field must be float32 or float64, got ", field.scalar_type());
  TORCH_CHECK_VALUE(field.size(0) == batch && field.size(1) == 3,
                    "field must be (N, 3, ...) with N = ", batch,
                    " (one displacement component per spatial axis), got ", field.sizes());
  TORCH_CHECK_VALUE(field.device() == device, "field must be on the inputs' device ", device,
                    ", got ", field.device());
  TORCH_CHECK_VALUE(scale.size() == 3 && offset.size() == 3,
                    "field_scale and field_offset must have 3 entries (d, h, w), got ",
                    scale.size(), " and ", offset.size());
  TORCH_CHECK_VALUE(out_size.size() == 3, "out_size must be [D, H, W], got ", out_size);
  if (kind == 1) {
    for (int a = 0; a < 3; ++a)
      TORCH_CHECK_VALUE(field.size(a + 2) >= 4,
                        "a B-spline field needs at least 4 control points per axis, got ",
                        field.sizes());
  } else if (kind == 2) {
    for (int a = 0; a < 3; ++a)
      TORCH_CHECK_VALUE(field.size(a + 2) == out_size[a],
                        "a dense field must have the output's spatial size ", out_size, ", got ",
                        field.sizes());
  } else {
    TORCH_CHECK_VALUE(field.size(3) == 1 && field.size(4) == 1 &&
                          field.size(2) >= std::max({out_size[0], out_size[1], out_size[2]}),
                      "a separable field must be (N, 3, L, 1, 1) with L >= the largest output "
                      "side, got ",
                      field.sizes());
  }
  if (field_map.has_value()) {
    const at::Tensor& fm = *field_map;
    TORCH_CHECK_VALUE(kind == 1, "field_map applies to B-spline fields (field_kind 1) only");
    TORCH_CHECK_VALUE(fm.dim() == 2 && fm.size(0) == batch && fm.size(1) == 6,
                      "field_map must be (N, 6) (scale d, h, w, offset d, h, w) with N = ", batch,
                      ", got ", fm.sizes());
    TORCH_CHECK_VALUE(fm.scalar_type() == at::kDouble, "field_map must be float64, got ",
                      fm.scalar_type());
    TORCH_CHECK_VALUE(fm.device() == device, "field_map must be on the inputs' device ", device,
                      ", got ", fm.device());
    // The core checks a host map's values; a CUDA map is read only in the kernel (a non-finite
    // entry would silently mean "outside the field"), so the caller's host copy is checked
    // there (voxaug.deform checks its maps before the upload).
  }
  DeformField f;
  f.kind = static_cast<FieldKind>(kind);
  for (int a = 0; a < 3; ++a) {
    f.scale[a] = scale[a];
    f.offset[a] = offset[a];
  }
  return f;
}

// A checked field bound to its tensors for a real (non-Meta) launch; `map` keeps the
// contiguous per-sample maps alive while the core call reads them.
struct BoundField {
  DeformField f;
  at::Tensor map;
};

BoundField bind_field(const at::Tensor& field, int64_t kind, at::ArrayRef<double> scale,
                      at::ArrayRef<double> offset, at::IntArrayRef out_size, int64_t batch,
                      const at::Device& device, const std::optional<at::Tensor>& field_map) {
  BoundField b{
      field_descriptor(field, kind, scale, offset, out_size, batch, device, false, field_map), {}};
  b.f.field = to_view(field, "field");
  if (field_map.has_value()) {
    b.map = field_map->contiguous();
    b.f.sample_map = b.map.data_ptr<double>();
  }
  return b;
}

std::vector<at::Tensor> resample_deformed_impl(
    at::TensorList inputs, const at::Tensor& matrices, const at::Tensor& field, int64_t kind,
    at::ArrayRef<double> scale, at::ArrayRef<double> offset, at::IntArrayRef out_size,
    at::IntArrayRef modes, at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
    bool align_corners, const std::optional<at::Tensor>& field_map,
    const std::optional<at::Tensor>& starts) {
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs must hold at least one tensor");
  check_5d(inputs[0], "inputs[0]");
  const int64_t group = starts ? patch_group(*starts) : 1;
  const at::Tensor full = starts ? patch_matrices(inputs, matrices, *starts, false) : matrices;
  const BoundField b = bind_field(field, kind, scale, offset, out_size, inputs[0].size(0) * group,
                                  inputs[0].device(), field_map);
  const c10::DeviceGuard guard(inputs[0].device());
  return resample_forward(inputs, full, out_size, modes, paddings, pad_values, align_corners, &b.f,
                          group);
}

std::vector<at::Tensor> resample_deformed_meta(
    at::TensorList inputs, const at::Tensor& matrices, const at::Tensor& field, int64_t kind,
    at::ArrayRef<double> scale, at::ArrayRef<double> offset, at::IntArrayRef out_size,
    at::IntArrayRef modes, at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
    bool /*align_corners*/, const std::optional<at::Tensor>& field_map,
    const std::optional<at::Tensor>& starts) {
  TORCH_CHECK_VALUE(!inputs.empty(), "inputs must hold at least one tensor");
  check_5d(inputs[0], "inputs[0]", true);
  const int64_t group = starts ? patch_group(*starts) : 1;
  const at::Tensor full = starts ? patch_matrices(inputs, matrices, *starts, true) : matrices;
  field_descriptor(field, kind, scale, offset, out_size, inputs[0].size(0) * group,
                   inputs[0].device(), true, field_map);
  return resample_meta_grouped(inputs, full, out_size, modes, paddings, pad_values, group);
}

at::Tensor dense_output(const at::Tensor& field, at::IntArrayRef out_size,
                        std::optional<c10::ScalarType> dtype) {
  const c10::ScalarType t = dtype.value_or(field.scalar_type());
  TORCH_CHECK_VALUE(t == at::kFloat || t == at::kDouble, "dtype must be float32 or float64, got ",
                    t);
  TORCH_CHECK_VALUE(out_size.size() == 3, "out_size must be [D, H, W], got ", out_size);
  for (int64_t s : out_size) TORCH_CHECK_VALUE(s >= 0, "out_size must be >= 0, got ", out_size);
  return at::empty({field.size(0), 3, out_size[0], out_size[1], out_size[2]},
                   field.options().dtype(t));
}

at::Tensor deform_field_dense_impl(const at::Tensor& field, int64_t kind,
                                   at::ArrayRef<double> scale, at::ArrayRef<double> offset,
                                   at::IntArrayRef out_size, std::optional<c10::ScalarType> dtype,
                                   const std::optional<at::Tensor>& field_map) {
  check_5d(field, "field");
  const BoundField b =
      bind_field(field, kind, scale, offset, out_size, field.size(0), field.device(), field_map);
  at::Tensor out = dense_output(field, out_size, dtype);
  const c10::DeviceGuard guard(field.device());
  call_core([&] { deform_field_dense(b.f, to_view(out, "out"), current_stream(field)); });
  return out;
}

at::Tensor deform_field_dense_meta(const at::Tensor& field, int64_t kind,
                                   at::ArrayRef<double> scale, at::ArrayRef<double> offset,
                                   at::IntArrayRef out_size, std::optional<c10::ScalarType> dtype,
                                   const std::optional<at::Tensor>& field_map) {
  check_5d(field, "field", true);
  field_descriptor(field, kind, scale, offset, out_size, field.size(0), field.device(), true,
                   field_map);
  return dense_output(field, out_size, dtype);
}

void uniform_fill_impl(const at::Tensor& out, double low, double high, int64_t seed,
                       int64_t first_sample) {
  check_5d(out, "out");
  TORCH_CHECK_VALUE(at::isFloatingType(out.scalar_type()), "out must be floating, got ",
                    out.scalar_type());
  // Elements sharing memory (an expanded tensor) would get one value or another by timing on CUDA.
  TORCH_CHECK_VALUE(at::has_internal_overlap(out) != at::MemOverlap::Yes,
                    "out must not have elements sharing memory (an expanded tensor), got strides ",
                    out.strides());
  const c10::DeviceGuard guard(out.device());
  call_core([&] {
    uniform_fill(to_view(out, "out"), low, high, static_cast<uint64_t>(seed), first_sample,
                 current_stream(out));
  });
}

void uniform_fill_meta(const at::Tensor& out, double, double, int64_t, int64_t) {
  check_5d(out, "out", true);
}

void register_backend(torch::Library& m) {
  m.impl("resample_deformed", &resample_deformed_impl);
  m.impl("deform_field_dense", &deform_field_dense_impl);
  m.impl("uniform_fill_", &uniform_fill_impl);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  register_backend(m);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("resample_deformed", &resample_deformed_meta);
  m.impl("deform_field_dense", &deform_field_dense_meta);
  m.impl("uniform_fill_", &uniform_fill_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  const char* const no_backward[] = {"resample_deformed", "deform_field_dense", "uniform_fill_"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
