// voxaug torch_ext: the crop family's ops (include/voxaug/crop.h). CPU and CUDA share one
// entry; Meta computes the shape. The result stays on the image's device (no host sync).
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <climits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "autograd_guard.h"
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

CropLabelForm label_form(int64_t form) {
  TORCH_CHECK_VALUE(form >= 0 && form <= 2,
                    "label_form must be 0 (foreground), 1 (argmax) or 2 (one-hot), got ", form);
  return static_cast<CropLabelForm>(form);
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

// The scan chunks of a label (class_crop_counts' second dimension).
int64_t count_chunks(const at::Tensor& label) {
  return class_crop_chunks(label.size(2), label.size(3), label.size(4));
}

// Cached counts (class_crop_counts of this label): (N, chunks, K) int64 on the label's device.
void check_counts(const at::Tensor& label, const std::optional<at::Tensor>& counts, int64_t K) {
  if (!counts.has_value()) return;
  const int64_t chunks = count_chunks(label);
  TORCH_CHECK_VALUE(counts->dim() == 3 && counts->size(0) == label.size(0) &&
                        counts->size(1) == chunks && counts->size(2) == K,
                    "counts must be class_crop_counts of this label: (N, chunks, K) = (",
                    label.size(0), ", ", chunks, ", ", K, "), got ", counts->sizes());
  TORCH_CHECK_VALUE(counts->scalar_type() == at::kLong, "counts must be int64, got ",
                    counts->scalar_type());
  TORCH_CHECK_VALUE(counts->device() == label.device(), "counts must be on the label's device ",
                    label.device(), ", got ", counts->device());
}

at::Tensor pos_neg_crop_centers_impl(const at::Tensor& label,
                                     const std::optional<at::Tensor>& image, double image_threshold,
                                     double pos_ratio, int64_t num_samples,
                                     at::IntArrayRef spatial_size, int64_t seed,
                                     int64_t first_sample,
                                     const std::optional<at::Tensor>& counts) {
  check_5d(label, "label");
  check_image(label, image, false);
  check_counts(label, counts, 2);
  at::Tensor centers = centers_output(label, num_samples, spatial_size);
  VolumeView iv;
  if (image.has_value()) iv = to_view(*image, "image");
  const at::Tensor cc = counts.has_value() ? counts->contiguous() : at::Tensor();
  const c10::DeviceGuard guard(label.device());
  call_core([&] {
    pos_neg_crop_centers(to_view(label, "label"), image.has_value() ? &iv : nullptr,
                         image_threshold, pos_ratio, static_cast<int>(num_samples),
                         spatial_size.data(), static_cast<uint64_t>(seed), first_sample,
                         centers.data_ptr<int64_t>(), current_stream(label),
                         cc.defined() ? cc.data_ptr<int64_t>() : nullptr);
  });
  return centers;
}

at::Tensor pos_neg_crop_centers_meta(const at::Tensor& label,
                                     const std::optional<at::Tensor>& image, double, double,
                                     int64_t num_samples, at::IntArrayRef spatial_size, int64_t,
                                     int64_t, const std::optional<at::Tensor>& counts) {
  check_5d(label, "label", true);
  check_image(label, image, true);
  check_counts(label, counts, 2);
  return centers_output(label, num_samples, spatial_size);
}

// The counting pass alone (cached once per volume): (N, chunks, num_classes) int64.
at::Tensor class_crop_counts_impl(const at::Tensor& label, const std::optional<at::Tensor>& image,
                                  double image_threshold, int64_t form, int64_t num_classes) {
  check_5d(label, "label");
  check_image(label, image, false);
  const CropLabelForm f = label_form(form);
  TORCH_CHECK_VALUE(num_classes >= 1 && num_classes <= kMaxCropClasses,
                    "num_classes must be in [1, ", kMaxCropClasses, "], got ", num_classes);
  const int64_t chunks = count_chunks(label);
  at::Tensor counts =
      at::empty({label.size(0), chunks, num_classes}, label.options().dtype(at::kLong));
  VolumeView iv;
  if (image.has_value()) iv = to_view(*image, "image");
  const c10::DeviceGuard guard(label.device());
  call_core([&] {
    class_crop_counts(to_view(label, "label"), image.has_value() ? &iv : nullptr, image_threshold,
                      f, static_cast<int>(num_classes), counts.data_ptr<int64_t>(),
                      current_stream(label));
  });
  return counts;
}

at::Tensor class_crop_counts_meta(const at::Tensor& label, const std::optional<at::Tensor>& image,
                                  double, int64_t form, int64_t num_classes) {
  check_5d(label, "label", true);
  check_image(label, image, true);
  label_form(form);
  TORCH_CHECK_VALUE(num_classes >= 1 && num_classes <= kMaxCropClasses,
                    "num_classes must be in [1, ", kMaxCropClasses, "], got ", num_classes);
  const int64_t chunks = count_chunks(label);
  return at::empty({label.size(0), chunks, num_classes}, label.options().dtype(at::kLong));
}

// region: [] (the whole volume) or 6 ints (lo d, h, w, hi d, h, w; a hi of 0: the whole axis).
CropCenterOptions center_options(at::IntArrayRef region, int64_t num_samples, int64_t seed,
                                 int64_t first_sample, int64_t first_crop) {
  TORCH_CHECK_VALUE(num_samples >= 1 && num_samples <= INT32_MAX,
                    "num_samples must be a positive int, got ", num_samples);
  TORCH_CHECK_VALUE(region.empty() || region.size() == 6,
                    "region must be [] or [lo_d, lo_h, lo_w, hi_d, hi_h, hi_w], got ", region);
  CropCenterOptions opt;
  opt.num_samples = static_cast<int>(num_samples);
  for (int a = 0; a < 3 && !region.empty(); ++a) {
    opt.region_lo[a] = region[a];
    opt.region_hi[a] = region[a + 3];
  }
  opt.seed = static_cast<uint64_t>(seed);
  opt.first_sample = first_sample;
  opt.first_crop = first_crop;
  return opt;
}

std::tuple<at::Tensor, at::Tensor> class_crop_centers_impl(
    const at::Tensor& label, const std::optional<at::Tensor>& image, double image_threshold,
    int64_t form, at::ArrayRef<double> ratios, int64_t num_samples,
    at::OptionalIntArrayRef spatial_size, at::IntArrayRef region, int64_t seed,
    int64_t first_sample, int64_t first_crop, const std::optional<at::Tensor>& cached) {
  check_5d(label, "label");
  check_image(label, image, false);
  check_counts(label, cached, static_cast<int64_t>(ratios.size()));
  const CropLabelForm f = label_form(form);
  const CropCenterOptions opt = center_options(region, num_samples, seed, first_sample, first_crop);
  TORCH_CHECK_VALUE(!spatial_size.has_value() || spatial_size->size() == 3,
                    "spatial_size must be None or [D, H, W], got ", *spatial_size);
  at::Tensor centers = at::empty({label.size(0), num_samples, 3}, label.options().dtype(at::kLong));
  at::Tensor counts = at::zeros({label.size(0), static_cast<int64_t>(ratios.size())},
                                label.options().dtype(at::kLong));
  VolumeView iv;
  if (image.has_value()) iv = to_view(*image, "image");
  std::vector<double> r(ratios.begin(), ratios.end());
  const at::Tensor cc = cached.has_value() ? cached->contiguous() : at::Tensor();
  const c10::DeviceGuard guard(label.device());
  call_core([&] {
    class_crop_centers(to_view(label, "label"), image.has_value() ? &iv : nullptr, image_threshold,
                       f, static_cast<int>(r.size()), r.data(),
                       spatial_size.has_value() ? spatial_size->data() : nullptr, opt,
                       centers.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
                       current_stream(label), cc.defined() ? cc.data_ptr<int64_t>() : nullptr);
  });
  return {centers, counts};
}

std::tuple<at::Tensor, at::Tensor> class_crop_centers_meta(
    const at::Tensor& label, const std::optional<at::Tensor>& image, double, int64_t form,
    at::ArrayRef<double> ratios, int64_t num_samples, at::OptionalIntArrayRef,
    at::IntArrayRef region, int64_t, int64_t, int64_t, const std::optional<at::Tensor>& cached) {
  check_5d(label, "label", true);
  check_image(label, image, true);
  check_counts(label, cached, static_cast<int64_t>(ratios.size()));
  label_form(form);
  center_options(region, num_samples, 0, 0, 0);
  return {at::empty({label.size(0), num_samples, 3}, label.options().dtype(at::kLong)),
          at::empty({label.size(0), static_cast<int64_t>(ratios.size())},
                    label.options().dtype(at::kLong))};
}

std::tuple<at::Tensor, at::Tensor> weighted_crop_centers_impl(
    const at::Tensor& weights, bool shift_negative, int64_t num_samples, at::IntArrayRef region,
    int64_t seed, int64_t first_sample, int64_t first_crop) {
  check_5d(weights, "weights");
  const CropCenterOptions opt = center_options(region, num_samples, seed, first_sample, first_crop);
  at::Tensor centers =
      at::empty({weights.size(0), num_samples, 3}, weights.options().dtype(at::kLong));
  at::Tensor stats = at::empty({weights.size(0), 3}, weights.options().dtype(at::kDouble));
  const c10::DeviceGuard guard(weights.device());
  call_core([&] {
    weighted_crop_centers(to_view(weights, "weights"), shift_negative, opt,
                          centers.data_ptr<int64_t>(), stats.data_ptr<double>(),
                          current_stream(weights));
  });
  return {centers, stats};
}

std::tuple<at::Tensor, at::Tensor> weighted_crop_centers_meta(const at::Tensor& weights, bool,
                                                              int64_t num_samples,
                                                              at::IntArrayRef region, int64_t,
                                                              int64_t, int64_t) {
  check_5d(weights, "weights", true);
  center_options(region, num_samples, 0, 0, 0);
  return {at::empty({weights.size(0), num_samples, 3}, weights.options().dtype(at::kLong)),
          at::empty({weights.size(0), 3}, weights.options().dtype(at::kDouble))};
}

// Centres uniform in the region of `like`'s spatial grid, one row per sample of `like`.
at::Tensor uniform_crop_centers_impl(const at::Tensor& like, int64_t num_samples,
                                     at::IntArrayRef region, int64_t seed, int64_t first_sample,
                                     int64_t first_crop) {
  check_5d(like, "like");
  CropCenterOptions opt = center_options(region, num_samples, seed, first_sample, first_crop);
  for (int a = 0; a < 3; ++a) {
    if (opt.region_hi[a] == 0) opt.region_hi[a] = like.size(a + 2);
    TORCH_CHECK_VALUE(opt.region_hi[a] <= like.size(a + 2), "region exceeds like's spatial size ",
                      like.sizes());
  }
  at::Tensor centers = at::empty({like.size(0), num_samples, 3}, like.options().dtype(at::kLong));
  const c10::DeviceGuard guard(like.device());
  call_core([&] {
    uniform_crop_centers(like.size(0), opt, like.is_cuda() ? Device::CUDA : Device::CPU,
                         like.is_cuda() ? like.get_device() : 0, centers.data_ptr<int64_t>(),
                         current_stream(like));
  });
  return centers;
}

at::Tensor uniform_crop_centers_meta(const at::Tensor& like, int64_t num_samples,
                                     at::IntArrayRef region, int64_t, int64_t, int64_t) {
  check_5d(like, "like", true);
  center_options(region, num_samples, 0, 0, 0);
  return at::empty({like.size(0), num_samples, 3}, like.options().dtype(at::kLong));
}

at::Tensor patches_output(const at::Tensor& input, const at::Tensor& centers, at::IntArrayRef size,
                          bool meta) {
  const at::Tensor& starts = centers;
  check_5d(input, "input", meta);
  TORCH_CHECK_VALUE(starts.dim() == 3 && starts.size(2) == 3 && starts.size(0) == input.size(0),
                    "centers must be (N, K, 3) with the input's N = ", input.size(0), ", got ",
                    starts.sizes());
  TORCH_CHECK_VALUE(starts.scalar_type() == at::kLong, "centers must be int64, got ",
                    starts.scalar_type());
  TORCH_CHECK_VALUE(starts.device() == input.device(), "centers must be on the input's device ",
                    input.device(), ", got ", starts.device());
  TORCH_CHECK_VALUE(starts.size(1) >= 1, "centers must hold at least one patch per sample");
  TORCH_CHECK_VALUE(size.size() == 3 && size[0] >= 1 && size[1] >= 1 && size[2] >= 1,
                    "size must be 3 positive ints [D, H, W], got ", size);
  return at::empty({input.size(0) * starts.size(1), input.size(1), size[0], size[1], size[2]},
                   input.options().memory_format(at::MemoryFormat::Contiguous));
}

// Patches of `size` centred at `centers` (a patch starts at centre - size // 2, MONAI's crop).
at::Tensor extract_patches_impl(const at::Tensor& input, const at::Tensor& centers,
                                at::IntArrayRef size) {
  at::Tensor out = patches_output(input, centers, size, false);
  if (out.numel() == 0) return out;
  const at::Tensor s = centers.contiguous();
  const int64_t offset[3] = {size[0] / 2, size[1] / 2, size[2] / 2};
  const c10::DeviceGuard guard(input.device());
  call_core([&] {
    extract_patches(to_view(input, "input"), s.data_ptr<int64_t>(), offset, s.size(1), size.data(),
                    out.data_ptr(), current_stream(input));
  });
  return out;
}

at::Tensor extract_patches_meta(const at::Tensor& input, const at::Tensor& centers,
                                at::IntArrayRef size) {
  return patches_output(input, centers, size, true);
}

// gather_patches' checks (shared with Meta) and its output (K, C, *size) in the volumes' dtype.
at::Tensor gather_output(at::TensorList volumes, at::IntArrayRef sample_index,
                         const at::Tensor& starts, at::IntArrayRef size, bool meta) {
  TORCH_CHECK_VALUE(!volumes.empty(), "volumes must hold at least one tensor");
  const at::Tensor& v0 = volumes[0];
  int64_t samples = 0;
  for (size_t i = 0; i < volumes.size(); ++i) {
    const std::string name = "volumes[" + std::to_string(i) + "]";
    check_5d(volumes[i], name.c_str(), meta);
    TORCH_CHECK_VALUE(volumes[i].scalar_type() == v0.scalar_type(), name,
                      " must have volumes[0]'s dtype ", v0.scalar_type(), ", got ",
                      volumes[i].scalar_type());
    TORCH_CHECK_VALUE(volumes[i].size(1) == v0.size(1), name, " must have volumes[0]'s ",
                      v0.size(1), " channels, got ", volumes[i].size(1));
    TORCH_CHECK_VALUE(volumes[i].device() == v0.device(), name, " must be on volumes[0]'s device ",
                      v0.device(), ", got ", volumes[i].device());
    samples += volumes[i].size(0);
  }
  const int64_t K = static_cast<int64_t>(sample_index.size());
  TORCH_CHECK_VALUE(starts.dim() == 2 && starts.size(0) == K && starts.size(1) == 3,
                    "starts must be (K, 3) with K = len(sample_index) = ", K, ", got ",
                    starts.sizes());
  TORCH_CHECK_VALUE(starts.scalar_type() == at::kLong, "starts must be int64, got ",
                    starts.scalar_type());
  TORCH_CHECK_VALUE(starts.device() == v0.device(), "starts must be on the volumes' device ",
                    v0.device(), ", got ", starts.device());
  for (int64_t k = 0; k < K; ++k)
    TORCH_CHECK_VALUE(sample_index[k] >= 0 && sample_index[k] < samples, "sample_index[", k,
                      "] must be in [0, ", samples, ") (the volumes' samples), got ",
                      sample_index[k]);
  TORCH_CHECK_VALUE(size.size() == 3 && size[0] >= 1 && size[1] >= 1 && size[2] >= 1,
                    "size must be 3 positive ints [D, H, W], got ", size);
  return at::empty({K, v0.size(1), size[0], size[1], size[2]},
                   v0.options().memory_format(at::MemoryFormat::Contiguous));
}

// Patch k of sample sample_index[k] starting at starts[k]; bool volumes move as uint8 (a copy
// of bits).
at::Tensor gather_patches_impl(at::TensorList volumes, at::IntArrayRef sample_index,
                               const at::Tensor& starts, at::IntArrayRef size) {
  at::Tensor out = gather_output(volumes, sample_index, starts, size, false);
  if (out.numel() == 0) return out;
  const bool as_bytes = out.scalar_type() == at::kBool;
  std::vector<VolumeView> views;
  views.reserve(volumes.size());
  for (size_t i = 0; i < volumes.size(); ++i) {
    const std::string name = "volumes[" + std::to_string(i) + "]";
    views.push_back(to_view(as_bytes ? volumes[i].view(at::kByte) : volumes[i], name.c_str()));
  }
  const at::Tensor s = starts.contiguous();
  at::Tensor o = as_bytes ? out.view(at::kByte) : out;
  const c10::DeviceGuard guard(out.device());
  call_core([&] {
    gather_patches(views.data(), static_cast<int64_t>(views.size()), sample_index.data(),
                   s.data_ptr<int64_t>(), nullptr, static_cast<int64_t>(sample_index.size()),
                   size.data(), o.data_ptr(), current_stream(out));
  });
  return out;
}

at::Tensor gather_patches_meta(at::TensorList volumes, at::IntArrayRef sample_index,
                               const at::Tensor& starts, at::IntArrayRef size) {
  return gather_output(volumes, sample_index, starts, size, true);
}

// aggregate_patches_' checks (shared with Meta).
void check_aggregate(const at::Tensor& out, const std::optional<at::Tensor>& count,
                     const at::Tensor& patches, at::IntArrayRef starts,
                     at::OptionalIntArrayRef boxes, const std::optional<at::Tensor>& weight,
                     bool accumulate, bool meta) {
  check_5d(out, "out", meta);
  check_5d(patches, "patches", meta);
  const int64_t K = patches.size(0);
  TORCH_CHECK_VALUE(out.size(0) == 1, "out must be (1, C, D, H, W), got ", out.sizes());
  TORCH_CHECK_VALUE(patches.size(1) == out.size(1), "patches must have out's ", out.size(1),
                    " channels, got ", patches.sizes());
  TORCH_CHECK_VALUE(patches.device() == out.device(), "patches must be on out's device ",
                    out.device(), ", got ", patches.device());
  TORCH_CHECK_VALUE(static_cast<int64_t>(starts.size()) == 3 * K,
                    "starts must hold 3 ints per patch (", 3 * K, " for ", K, " patches), got ",
                    starts.size());
  if (boxes.has_value())
    TORCH_CHECK_VALUE(static_cast<int64_t>(boxes->size()) == 6 * K,
                      "boxes must hold 6 ints per patch (", 6 * K, " for ", K, " patches), got ",
                      boxes->size());
  if (accumulate) {
    TORCH_CHECK_VALUE(out.scalar_type() == at::kFloat || out.scalar_type() == at::kDouble,
                      "out must be float32 or float64 to accumulate, got ", out.scalar_type());
    if (count.has_value()) {
      TORCH_CHECK_VALUE(count->dim() == 5 && count->size(0) == 1 && count->size(1) == 1 &&
                            count->sizes().slice(2) == out.sizes().slice(2),
                        "count must be (1, 1, D, H, W) with out's spatial size, got ",
                        count->sizes());
      TORCH_CHECK_VALUE(count->scalar_type() == out.scalar_type(), "count must have out's dtype ",
                        out.scalar_type(), ", got ", count->scalar_type());
      TORCH_CHECK_VALUE(count->device() == out.device(), "count must be on out's device");
    }
    if (weight.has_value()) {
      TORCH_CHECK_VALUE(weight->sizes() == patches.sizes().slice(2),
                        "weight must be the patch's spatial size ", patches.sizes().slice(2),
                        ", got ", weight->sizes());
      TORCH_CHECK_VALUE(weight->scalar_type() == out.scalar_type(), "weight must have out's dtype ",
                        out.scalar_type(), ", got ", weight->scalar_type());
      TORCH_CHECK_VALUE(weight->device() == out.device(), "weight must be on out's device");
    }
  } else {
    TORCH_CHECK_VALUE(patches.scalar_type() == out.scalar_type(), "patches must have out's dtype ",
                      out.scalar_type(), " to be copied (accumulate=False), got ",
                      patches.scalar_type());
    TORCH_CHECK_VALUE(!count.has_value() && !weight.has_value(),
                      "count and weight are for accumulate=True only");
  }
}

void aggregate_patches_impl(const at::Tensor& out, const std::optional<at::Tensor>& count,
                            const at::Tensor& patches, at::IntArrayRef starts,
                            at::OptionalIntArrayRef boxes, const std::optional<at::Tensor>& weight,
                            bool accumulate) {
  check_aggregate(out, count, patches, starts, boxes, weight, accumulate, false);
  if (patches.numel() == 0 || out.numel() == 0) return;
  const bool as_bytes = out.scalar_type() == at::kBool;
  const at::Tensor w = weight.has_value() ? weight->contiguous() : at::Tensor();
  const VolumeView ov = to_view(as_bytes ? out.view(at::kByte) : out, "out");
  const VolumeView pv = to_view(as_bytes ? patches.view(at::kByte) : patches, "patches");
  VolumeView cv;
  if (count.has_value()) cv = to_view(*count, "count");
  const c10::DeviceGuard guard(out.device());
  call_core([&] {
    aggregate_patches(pv, starts.data(), boxes.has_value() ? boxes->data() : nullptr, accumulate,
                      w.defined() ? w.data_ptr() : nullptr, ov, count.has_value() ? &cv : nullptr,
                      current_stream(out));
  });
}

void aggregate_patches_meta(const at::Tensor& out, const std::optional<at::Tensor>& count,
                            const at::Tensor& patches, at::IntArrayRef starts,
                            at::OptionalIntArrayRef boxes, const std::optional<at::Tensor>& weight,
                            bool accumulate) {
  check_aggregate(out, count, patches, starts, boxes, weight, accumulate, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_impl);
  m.impl("extract_patches", &extract_patches_impl);
  m.impl("gather_patches", &gather_patches_impl);
  m.impl("aggregate_patches_", &aggregate_patches_impl);
  m.impl("uniform_crop_centers", &uniform_crop_centers_impl);
  m.impl("weighted_crop_centers", &weighted_crop_centers_impl);
  m.impl("class_crop_centers", &class_crop_centers_impl);
  m.impl("class_crop_counts", &class_crop_counts_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("foreground_bbox", &foreground_bbox_impl);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_impl);
  m.impl("extract_patches", &extract_patches_impl);
  m.impl("gather_patches", &gather_patches_impl);
  m.impl("aggregate_patches_", &aggregate_patches_impl);
  m.impl("uniform_crop_centers", &uniform_crop_centers_impl);
  m.impl("weighted_crop_centers", &weighted_crop_centers_impl);
  m.impl("class_crop_centers", &class_crop_centers_impl);
  m.impl("class_crop_counts", &class_crop_counts_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("foreground_bbox", &foreground_bbox_meta);
  m.impl("pos_neg_crop_centers", &pos_neg_crop_centers_meta);
  m.impl("extract_patches", &extract_patches_meta);
  m.impl("gather_patches", &gather_patches_meta);
  m.impl("aggregate_patches_", &aggregate_patches_meta);
  m.impl("uniform_crop_centers", &uniform_crop_centers_meta);
  m.impl("weighted_crop_centers", &weighted_crop_centers_meta);
  m.impl("class_crop_centers", &class_crop_centers_meta);
  m.impl("class_crop_counts", &class_crop_counts_meta);
}
TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  const char* const no_backward[] = {"extract_patches", "gather_patches", "aggregate_patches_"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
