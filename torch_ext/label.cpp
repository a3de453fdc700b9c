// voxaug torch_ext: the label family's ops (include/voxaug/label.h). connected_components and
// distance_transform_edt: CPU and CUDA share one entry; largest_components and component_sizes:
// the core on the CPU, device reductions on CUDA; Meta computes the shapes. Bool masks are read
// as uint8 (the same bytes).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "voxaug/label.h"

namespace voxaug::torch_ext {
namespace {

void check_connectivity(int64_t connectivity) {
  TORCH_CHECK_VALUE(connectivity >= 1 && connectivity <= 3,
                    "connectivity must be 1 (6 neighbours), 2 (18) or 3 (26), got ", connectivity);
}

at::Tensor connected_components_impl(const at::Tensor& mask, int64_t connectivity) {
  check_5d(mask, "mask");
  check_connectivity(connectivity);
  const at::Tensor m = mask.scalar_type() == at::kBool ? mask.view(at::kByte) : mask;
  at::Tensor labels = at::empty(mask.sizes(), mask.options().dtype(at::kInt));
  if (mask.numel() == 0) return labels;
  const c10::DeviceGuard guard(mask.device());
  call_core([&] {
    connected_components(to_view(m, "mask"), to_view(labels, "labels"),
                         static_cast<int>(connectivity), current_stream(mask));
  });
  return labels;
}

void check_labels(const at::Tensor& labels) {
  TORCH_CHECK_VALUE(labels.dim() == 5, "labels must be 5-D (N, C, D, H, W), got ", labels.dim(),
                    "-D");
  TORCH_CHECK_VALUE(labels.scalar_type() == at::kInt,
                    "labels must be int32 (connected_components output), got ",
                    labels.scalar_type());
}

void check_largest(const at::Tensor& labels, int64_t num_components) {
  check_labels(labels);
  TORCH_CHECK_VALUE(num_components >= 1, "num_components must be >= 1, got ", num_components);
}

// CPU: the core's three passes (include/voxaug/label.h).
at::Tensor largest_components_cpu(const at::Tensor& labels, int64_t num_components) {
  check_largest(labels, num_components);
  const at::Tensor l = labels.contiguous();
  at::Tensor keep = at::empty(labels.sizes(), labels.options().dtype(at::kBool));
  if (labels.numel() == 0) return keep;
  at::Tensor k8 = keep.view(at::kByte);
  call_core([&] { largest_components(to_view(l, "labels"), num_components, to_view(k8, "keep")); });
  return keep;
}

// CUDA: sizes by a scatter-add, the k largest by repeated argmax (top-k with the label in its
// key for k > 8), the mask by comparisons: device reductions, no host synchronisation. Labels
// are not checked for being canonical here (that would read back); out-of-range values are
// clamped into the counting table, so they cannot write outside it.
at::Tensor largest_components_device(const at::Tensor& labels, int64_t num_components) {
  check_largest(labels, num_components);
  const int64_t nc = labels.size(0) * labels.size(1);
  if (labels.numel() == 0) return at::empty(labels.sizes(), labels.options().dtype(at::kBool));
  const int64_t v = labels.numel() / nc;
  const at::Tensor lab = labels.reshape({nc, v}).to(at::kLong).clamp(0, v);
  at::Tensor counts = at::zeros({nc, v + 1}, lab.options());
  counts.scatter_add_(1, lab,
                      at::ones({1, 1}, lab.options()).expand({nc, v}));  // no 8 B / voxel of ones
  counts.select(1, 0).zero_();                                           // background
  const int64_t k = std::min(num_components, v + 1);
  at::Tensor top;
  if (k <= 8) {  // argmax returns the first maximum: the smaller label among equal sizes
    at::Tensor sizes = counts.clone();
    std::vector<at::Tensor> picks;
    for (int64_t j = 0; j < k; ++j) {
      at::Tensor i = sizes.argmax(1, true);
      picks.push_back(i);
      sizes.scatter_(1, i, -1);
    }
    top = at::cat(picks, 1);
  } else {
    top = std::get<1>((counts * (v + 2) - at::arange(v + 1, counts.options())).topk(k, 1));
  }
  top = at::where(counts.gather(1, top) > 0, top, -1);  // fewer components than k
  at::Tensor keep;
  if (k <= 8) {
    keep = lab == top.narrow(1, 0, 1);
    for (int64_t j = 1; j < k; ++j) keep.logical_or_(lab == top.narrow(1, j, 1));
  } else {
    at::Tensor table = at::zeros({nc, v + 2}, labels.options().dtype(at::kBool));
    table.scatter_(1, top + 1, true);  // shifted by one: -1 lands in the unused slot 0
    table.select(1, 0).fill_(false);
    keep = table.gather(1, lab + 1);
  }
  return keep.reshape(labels.sizes());
}

// CPU: the core's passes (roots, sizes, the per-voxel size).
at::Tensor component_sizes_cpu(const at::Tensor& labels) {
  check_labels(labels);
  const at::Tensor l = labels.contiguous();
  at::Tensor sizes = at::empty(labels.sizes(), labels.options());
  if (labels.numel() == 0) return sizes;
  call_core([&] { component_sizes(to_view(l, "labels"), to_view(sizes, "sizes")); });
  return sizes;
}

// CUDA: a scatter-add of the sizes, then a gather per voxel (labels clamped into the table, as
// in largest_components_device).
at::Tensor component_sizes_device(const at::Tensor& labels) {
  check_labels(labels);
  const int64_t nc = labels.size(0) * labels.size(1);
  if (labels.numel() == 0) return at::empty(labels.sizes(), labels.options());
  const int64_t v = labels.numel() / nc;
  const at::Tensor lab = labels.reshape({nc, v}).to(at::kLong).clamp(0, v);
  at::Tensor counts = at::zeros({nc, v + 1}, lab.options());
  counts.scatter_add_(1, lab,
                      at::ones({1, 1}, lab.options()).expand({nc, v}));  // no 8 B / voxel of ones
  counts.select(1, 0).zero_();                                           // background
  return counts.gather(1, lab).to(at::kInt).reshape(labels.sizes());
}

at::ScalarType edt_dtype(std::optional<at::ScalarType> dtype) {
  const at::ScalarType t = dtype.value_or(at::kDouble);
  TORCH_CHECK_VALUE(t == at::kFloat || t == at::kDouble,
                    "dtype must be torch.float32 or torch.float64, got ", t);
  return t;
}

std::array<double, 3> edt_spacing(at::ArrayRef<double> spacing) {
  TORCH_CHECK_VALUE(spacing.size() == 1 || spacing.size() == 3,
                    "spacing must have one value or three (d, h, w), got ", spacing.size());
  std::array<double, 3> s{};
  for (int a = 0; a < 3; ++a) {
    s[a] = spacing[spacing.size() == 1 ? 0 : a];
    TORCH_CHECK_VALUE(std::isfinite(s[a]) && s[a] > 0.0,
                      "spacing must be positive and finite, got ", s[a]);
  }
  return s;
}

// The distance transform: CPU and CUDA share the core (CUDA with a workspace from the caching
// allocator, stream-ordered).
at::Tensor distance_transform_impl(const at::Tensor& mask, at::ArrayRef<double> spacing,
                                   std::optional<at::ScalarType> dtype) {
  check_5d(mask, "mask");
  const auto s = edt_spacing(spacing);
  const at::Tensor m = mask.scalar_type() == at::kBool ? mask.view(at::kByte) : mask;
  // (Large CPU outputs from the host cache: fresh 4 KiB pages would fault once each.)
  at::Tensor out = empty_output(mask.sizes(), mask.options().dtype(edt_dtype(dtype)));
  if (mask.numel() == 0) return out;
  const VolumeView mv = to_view(m, "mask");
  const int64_t wb = distance_transform_workspace_bytes(
      mv, out.scalar_type() == at::kFloat ? DType::Float32 : DType::Float64);
  at::Tensor ws = empty_output({std::max<int64_t>(wb, 1)}, mask.options().dtype(at::kByte));
  const c10::DeviceGuard guard(mask.device());
  call_core([&] {
    distance_transform_edt(mv, s.data(), to_view(out, "out"), ws.data_ptr(), wb,
                           current_stream(mask));
  });
  return out;
}

at::Tensor distance_transform_meta(const at::Tensor& mask, at::ArrayRef<double> spacing,
                                   std::optional<at::ScalarType> dtype) {
  check_5d(mask, "mask", true);
  edt_spacing(spacing);
  return at::empty(mask.sizes(), mask.options().dtype(edt_dtype(dtype)));
}

at::Tensor component_sizes_meta(const at::Tensor& labels) {
  check_labels(labels);
  return at::empty(labels.sizes(), labels.options());
}

at::Tensor largest_components_meta(const at::Tensor& labels, int64_t num_components) {
  check_largest(labels, num_components);
  return at::empty(labels.sizes(), labels.options().dtype(at::kBool));
}

at::Tensor connected_components_meta(const at::Tensor& mask, int64_t connectivity) {
  check_5d(mask, "mask", true);
  check_connectivity(connectivity);
  return at::empty(mask.sizes(), mask.options().dtype(at::kInt));
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("connected_components", &connected_components_impl);
  m.impl("largest_components", &largest_components_cpu);
  m.impl("component_sizes", &component_sizes_cpu);
  m.impl("distance_transform_edt", &distance_transform_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("connected_components", &connected_components_impl);
  m.impl("largest_components", &largest_components_device);
  m.impl("component_sizes", &component_sizes_device);
  m.impl("distance_transform_edt", &distance_transform_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("connected_components", &connected_components_meta);
  m.impl("largest_components", &largest_components_meta);
  m.impl("component_sizes", &component_sizes_meta);
  m.impl("distance_transform_edt", &distance_transform_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  const char* const no_backward[] = {"connected_components", "largest_components",
                                     "component_sizes", "distance_transform_edt"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
