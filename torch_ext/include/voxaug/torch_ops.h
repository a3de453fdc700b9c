// voxaug::torch -- C++ entry points to the torch.ops.voxaug custom ops for LibTorch
// programs. Each call goes through the dispatcher, so CPU/CUDA/Meta and autograd all apply.
// Images are 5-D (N, C, D, H, W). CUDA tensors run on the current stream; nothing syncs.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/OptionalArrayRef.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace voxaug::ops {

at::Tensor scale_intensity_range(const at::Tensor& image, double a_min, double a_max,
                                 std::optional<double> b_min, std::optional<double> b_max,
                                 bool clip, std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor shift_intensity(const at::Tensor& image, const at::Tensor& offsets);
at::Tensor scale_intensity(const at::Tensor& image, const at::Tensor& factors,
                           std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor rand_shift_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise = false, int64_t first_sample = 0);
at::Tensor rand_scale_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise = false, int64_t first_sample = 0,
                                std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor rand_gaussian_noise(const at::Tensor& image, double mean, double std, bool sample_std,
                               double prob, int64_t seed, int64_t first_sample = 0,
                               std::optional<c10::ScalarType> dtype = std::nullopt);

// Separable Gaussian smoothing, MONAI's GaussianFilter (erf taps truncated at `truncated`
// sigma, zero padding): sigma (N, 3) floating CPU tensor, per sample and spatial axis (D, H, W),
// in voxels; output dtype `dtype`, else the image's (float32 for integer images).
// taps "erf" (MONAI's; truncated) or "sampled" (scipy.ndimage's; truncated is scipy's
// truncate); border "zeros" or "reflect" (scipy.ndimage's mode="reflect").
// Differentiable w.r.t. image.
at::Tensor gaussian_smooth(const at::Tensor& image, const at::Tensor& sigma, double truncated = 4.0,
                           std::optional<c10::ScalarType> dtype = std::nullopt,
                           c10::string_view taps = "erf", c10::string_view border = "zeros");

// (batch, count) float64 uniforms in [0, 1) on the CPU: Philox keyed by `seed`, row i is global
// sample first_sample + i. The host-side parameter draws of the spatial and deformation
// transforms (voxaug.ops.philox_uniform in Python; the same numbers).
at::Tensor philox_uniform(int64_t seed, int64_t first_sample, int64_t batch, int64_t count);

// The crop family (include/voxaug/crop.h). Every result stays on the input's device (no host
// sync); centres are voxel indices (d, h, w) and a patch of `size` centred at c starts at
// c - size // 2 (MONAI's convention). Random draws use Philox keyed by (seed, first_sample + n,
// first_crop + k): the same seed gives the same centres on the CPU and on CUDA.
//
// Per-sample foreground bounding box of the voxels > threshold (over `channel_indices`, all
// channels when none): (N, 6) int64 (d0, h0, w0, d1, h1, w1), half-open; zeros when a sample
// has no foreground. voxaug registers no separate pad or crop-foreground op: padding (MONAI
// SpatialPad / BorderPad) and cropping to the box are a translation through `resample` with the
// padding mode (as python/voxaug/spatial.py does), or tensor slicing / at::constant_pad_nd.
at::Tensor foreground_bbox(const at::Tensor& image, double threshold = 0.0,
                           at::OptionalIntArrayRef channel_indices = std::nullopt);
// MONAI RandCropByPosNegLabel's centres: (N, num_samples, 3) int64. Foreground: any label
// channel > 0; with `image`, only voxels where an image channel is > image_threshold are
// candidates. A centre is a foreground voxel with probability pos_ratio (else background),
// uniform among the candidates, then moved so the spatial_size patch fits (MONAI's
// correct_crop_centers). counts: class_crop_counts(label,
// image, image_threshold, 0, 2) cached for this label (skips the scan; the same centres).
at::Tensor pos_neg_crop_centers(const at::Tensor& label, const std::optional<at::Tensor>& image,
                                double image_threshold, double pos_ratio, int64_t num_samples,
                                at::IntArrayRef spatial_size, int64_t seed,
                                int64_t first_sample = 0,
                                const std::optional<at::Tensor>& counts = std::nullopt);
// The candidate voxels per (sample, chunk of 4096 voxels in memory order, class) that the class
// and pos-neg samplers scan for: (N, chunks, num_classes) int64, to cache per volume.
// label_form: 0 foreground / background (label > 0 and image > image_threshold), 1 argmax
// (class = label value), 2 one-hot (class = channel, value != 0).
at::Tensor class_crop_counts(const at::Tensor& label, const std::optional<at::Tensor>& image,
                             double image_threshold, int64_t label_form, int64_t num_classes);

// The label family (include/voxaug/label.h): connected components of every (n, c) volume of
// `mask` (nonzero voxels; bool masks too): int32 (N, C, D, H, W), 0 for background, else 1 + the
// C-order index of the component's first voxel (the same labels on the CPU and on CUDA).
// connectivity: 1 (6 neighbours), 2 (18), 3 (26). On the mask's device, no host sync.
at::Tensor connected_components(const at::Tensor& mask, int64_t connectivity = 3);
// Bool (N, C, D, H, W): the voxels of the num_components largest components of each (n, c)
// volume of connected_components labels (larger first, then the smaller label: MONAI's
// get_largest_connected_component_mask). CPU: three passes in the core; CUDA: device
// reductions, no host sync.
at::Tensor largest_components(const at::Tensor& labels, int64_t num_components = 1);
// int32 (N, C, D, H, W): the size of each voxel's component in connected_components labels (0
// for background). CPU: the core's passes; CUDA: a scatter-add and a gather, no host sync.
at::Tensor component_sizes(const at::Tensor& labels);
// Each voxel's Euclidean distance to the nearest zero voxel of its (n, c) volume, axes scaled by
// spacing (one value or d, h, w), scipy's distance_transform_edt; float64 unless dtype float32.
at::Tensor distance_transform_edt(const at::Tensor& mask, at::ArrayRef<double> spacing = {1.0},
                                  std::optional<at::ScalarType> dtype = std::nullopt);

// MONAI MedianSmooth: float32 box medians (radius (D, H, W), a box of at most 343 voxels), edges
// replicated (include/voxaug/filter.h).
at::Tensor median_filter(const at::Tensor& image, at::IntArrayRef radius);
// MONAI RandCoarseShuffle with host-drawn boxes (N, K, 6) int64 CPU and counts (N,) int64 CPU:
// a copy with each box's voxels permuted per channel (Philox-keyed, include/voxaug/dropout.h).
at::Tensor coarse_shuffle(const at::Tensor& image, const at::Tensor& boxes,
                          const at::Tensor& counts, int64_t seed, int64_t first_sample = 0);
// TorchIO Swap: a copy with counts[n] patch swaps per sample, locations (N, K, 6) int64 CPU
// (first d, h, w, second d, h, w), patch_size (D, H, W).
at::Tensor swap_patches(const at::Tensor& image, const at::Tensor& locations,
                        const at::Tensor& counts, at::IntArrayRef patch_size);
// MONAI RandCropByLabelClasses / TorchIO LabelSampler's centres: a class drawn with probability
// proportional to ratios[k] among the classes present in `region`, then one of its voxels
// uniformly. region: {} (the whole volume) or {lo_d, lo_h, lo_w, hi_d, hi_h, hi_w}, half-open
// (a hi of 0: the whole axis); spatial_size given: centres moved so that patch fits. Returns
// (centers (N, num_samples, 3) int64, class_counts (N, ratios.size()) int64: candidates per
// class in the region). counts: class_crop_counts of this label (same label_form, image,
// threshold and number of classes) cached; the region must then be the whole volume.
std::tuple<at::Tensor, at::Tensor> class_crop_centers(
    const at::Tensor& label, const std::optional<at::Tensor>& image, double image_threshold,
    int64_t label_form, at::ArrayRef<double> ratios, int64_t num_samples,
    at::OptionalIntArrayRef spatial_size, at::IntArrayRef region, int64_t seed,
    int64_t first_sample = 0, int64_t first_crop = 0,
    const std::optional<at::Tensor>& counts = std::nullopt);
// TorchIO WeightedSampler / MONAI RandWeightedCrop's centres: a voxel of `region` drawn with
// probability proportional to channel 0 of `weights` (shift_negative, MONAI: shifted by minus
// the region's minimum when negative; else, TorchIO, negative weights count as 0). Returns
// (centers (N, num_samples, 3) int64, stats (N, 3) float64: total weight, shift, minimum of
// channel 0); a total of zero draws uniformly in the region.
std::tuple<at::Tensor, at::Tensor> weighted_crop_centers(const at::Tensor& weights,
                                                         bool shift_negative, int64_t num_samples,
                                                         at::IntArrayRef region, int64_t seed,
                                                         int64_t first_sample = 0,
                                                         int64_t first_crop = 0);
// Centres uniform in `region` of like's spatial grid: (N, num_samples, 3) int64, N = like's.
at::Tensor uniform_crop_centers(const at::Tensor& like, int64_t num_samples, at::IntArrayRef region,
                                int64_t seed, int64_t first_sample = 0, int64_t first_crop = 0);
// input (N, C, D, H, W), centers (N, K, 3) int64 on input's device -> (N * K, C, *size) in
// input's dtype, patch n * K + k starting at centers[n, k] - size // 2; zeros outside.
at::Tensor extract_patches(const at::Tensor& input, const at::Tensor& centers,
                           at::IntArrayRef size);
// volumes (N_i, C, D_i, H_i, W_i), one dtype, C and device; sample_index (K) into the volumes'
// samples in order; starts (K, 3) int64 on their device -> (K, C, *size), patch k's first voxel
// at starts[k] of its sample; zeros outside. A batch from many volumes in one launch (CUDA: one
// per 48 patches).
at::Tensor gather_patches(at::TensorList volumes, at::IntArrayRef sample_index,
                          const at::Tensor& starts, at::IntArrayRef size);
// The inverse (TorchIO GridAggregator): patches (K, C, P0, P1, P2) into out (1, C, D, H, W),
// patch k's voxel (0, 0, 0) at starts[3k..3k+2], limited to boxes[6k..6k+5] (lo, hi in patch
// coordinates; none: whole patches). accumulate: out += patch * weight (none: 1), count +=
// weight, in patch order (float32 / float64 out); else out = patch, the last patch winning.
void aggregate_patches_(const at::Tensor& out, const std::optional<at::Tensor>& count,
                        const at::Tensor& patches, at::IntArrayRef starts,
                        at::OptionalIntArrayRef boxes = std::nullopt,
                        const std::optional<at::Tensor>& weight = std::nullopt,
                        bool accumulate = true);

// The spatial family (include/voxaug/resample.h): every input (N, C_i, D_i, H_i, W_i) through
// one coordinate map. matrices (N, 3, 4) floating: output voxel index (d, h, w, 1) -> input voxel
// index (align_corners=false reads voxel centres as grid_sample does). Per input: modes[i]
// 0 nearest, 1 linear, 2 cubic B-spline (1 and 2: floating inputs only); paddings[i] 0 zeros,
// 1 border, 2 reflection, 3 constant (pad_values[i]). Returns one (N, C_i, *out_size) tensor
// per input, in its dtype. Differentiable w.r.t. floating inputs and matrices.
std::vector<at::Tensor> resample(at::TensorList inputs, const at::Tensor& matrices,
                                 at::IntArrayRef out_size, at::IntArrayRef modes,
                                 at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                 bool align_corners = false);
// A crop and a spatial map as one gather: inputs (M, C_i, D, H, W), starts (M, K, 3) integer
// crop starts (centre - roi // 2) on the inputs' device, matrices (M * K, 3, 4) mapping output
// index -> index inside patch (m, k) (row m * K + k). Returns (M * K, C_i, *out_size) per input;
// patch (m, k) reads volume m at matrix + start, so voxels outside the crop window are real
// data, not padding. Forward only.
std::vector<at::Tensor> resample_patches(at::TensorList inputs, const at::Tensor& matrices,
                                         const at::Tensor& starts, at::IntArrayRef out_size,
                                         at::IntArrayRef modes, at::IntArrayRef paddings,
                                         at::ArrayRef<double> pad_values,
                                         bool align_corners = false);

// The phantom family (include/voxaug/phantom.h): image float32 (N, 1, D, H, W) in HU and label
// uint8 (N, 1, D, H, W) in [0, num_classes - 1] on `device` (cpu or cuda, the current stream,
// no host sync); sample n is subject first_sample + n.
std::tuple<at::Tensor, at::Tensor> phantom(int64_t batch, at::IntArrayRef size, int64_t num_classes,
                                           int64_t seed, int64_t first_sample, at::Device device);
// The (N, 25 + 36 num_classes) float32 parameter table phantom renders from.
at::Tensor phantom_params(int64_t batch, int64_t num_classes, int64_t seed, int64_t first_sample,
                          at::Device device);

}  // namespace voxaug::ops
