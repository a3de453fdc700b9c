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

at::Tensor centers_output(const at::Tensor& label, int64_t num_samples,
                          at::IntArrayRef spatial_size) {
  TORCH_CHECK_VALUE(num_samples >= 1, "num_samples must be >= 1, got ", num_samples);
  TORCH_CHECK_VALUE(spatial_size.size() == 3, "spatial_size must be [D, H, W], got ", spatial_size);
  return at::empty({label.size(0), num_samples, 3}, label.options().dtype(at::kLong));
}

void check_image(const at::Tensor& label, const std::optional<at::Tensor>& image, bool meta) {
  if (!image.has_value()) return;
  check_5d(*image, "image", meta);
  TORCH_CHECK_VALUE(image->size(0) == label.size(0) && image->size(2) == label.size(2) &&
                        image->size(3) == label.size(3) && image->size(4) == label.size(4),
                    "image must have the label's batch and spatial size, got ", image->sizes(),
                    " and ", label.sizes());
  TORCH_CHECK_VALUE(image->device() == label.device(), "image must be on the label's device ",
                    label.device(), ", got ", image->device());
}

at::Tensor pos_neg_crop_centers_impl(const at::Tensor& label,
                                     const std::optional<at::Tensor>& image, double image_threshold,
                                     double pos_ratio, int64_t num_samples,
                                     at::IntArrayRef spatial_size, int64_t seed,
                                     int64_t first_sample) {
  check_5d(label, "label");
  check_image(label, image, false);
  at::Tensor centers = centers_output(label, num_samples, spatial_size);
  VolumeView iv;
  if (image.has_value()) iv = to_view(*image, "image");
  const c10::DeviceGuard guard(label.device());
  call_core([&] {
    pos_neg_crop_centers(to_view(label, "label"), image.has_value() ? &iv : nullptr,
                         image_threshold, pos_ratio, static_cast<int>(num_samples),
                         spatial_size.data(), static_cast<uint64_t>(seed), first_sample,
                         centers.data_ptr<int64_t>(), current_stream(label));
  });
  return centers;
}

at::Tensor pos_neg_crop_centers_meta(const at::Tensor& label,
                                     const std::optional<at::Tensor>& image, double, double,
                                     int64_t num_samples, at::IntArrayRef spatial_size, int64_t,
                                     int64_t) {
  check_5d(label, "label", true);
  check_image(label, image, true);
  return centers_output(label, num_samples, spatial_size);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("foreground_bbox", &foreground_bbox_meta);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_meta);
}

}  // namespace voxaug::torch_ext
