// voxaug torch_ext: the crop family's ops (include/voxaug/crop.h). CPU and CUDA share one
// entry; Meta computes the shape. The result stays on the image's device (no host sync).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <vector>

#include "tensor_view.h"
#include "voxaug/crop.h"

namespace voxaug::torch_ext {
namespace {

at::Tensor bbox_output(const at::Tensor& image) {
  return at::empty({image.size(0), 6}, image.options().dtype(at::kLong));
}

at::Tensor foreground_bbox_impl(const at::Tensor& image, double threshold,
                                at::OptionalIntArrayRef channel_indices) {
  check_5d(image, "image");
  at::Tensor box = bbox_output(image);
  std::vector<int64_t> ch;
  if (channel_indices.has_value()) ch = channel_indices->vec();
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    foreground_bbox(to_view(image, "image"), threshold, ch.empty() ? nullptr : ch.data(),
                    static_cast<int>(ch.size()), box.data_ptr<int64_t>(), current_stream(image));
  });
  return box;
}

at::Tensor foreground_bbox_meta(const at::Tensor& image, double, at::OptionalIntArrayRef) {
  check_5d(image, "image", true);
  return bbox_output(image);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("foreground_bbox", &foreground_bbox_meta);
}

}  // namespace voxaug::torch_ext
