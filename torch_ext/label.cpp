// voxaug torch_ext: the label family's op (include/voxaug/label.h). CPU and CUDA share one
// entry; Meta computes the shape. Bool masks are read as uint8 (the same bytes).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "autograd_guard.h"
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

at::Tensor connected_components_meta(const at::Tensor& mask, int64_t connectivity) {
  check_5d(mask, "mask", true);
  check_connectivity(connectivity);
  return at::empty(mask.sizes(), mask.options().dtype(at::kInt));
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("connected_components", &connected_components_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("connected_components", &connected_components_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("connected_components", &connected_components_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  const char* const no_backward[] = {"connected_components"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
