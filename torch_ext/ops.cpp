// voxaug torch_ext: every schema of the torch.ops.voxaug namespace, in one place, and the
// C++ entry points (include/voxaug/torch_ops.h) that call them through the dispatcher.
//
// Chains are passed in a canonical, flat form shared by pointwise_chain and its backward:
//   ops[k]    PointwiseOp code (0 scale_intensity_range, 1 shift, 2 scale, 3 gaussian noise,
//             4 rescale: MONAI ScaleIntensity(minv, maxv), statistics from voxaug::minmax,
//             5 Rician noise, 6 bias field, 7 adjust contrast (MONAI, statistics from
//             voxaug::minmax), 8 gamma (TorchIO, sign(x) |x|^gamma), 9 histogram shift
//             (MONAI RandHistogramShift's piecewise-linear map), 10 std shift (MONAI
//             StdShiftIntensity), 11 scale with fixed mean (MONAI ScaleIntensityFixedMean))
//   flags[k]  bit 0 has_b_min, 1 has_b_max, 2 clip, 3 random, 4 channel_wise, 5 sample_std,
//             6 monomial basis (bias field: TorchIO's; else MONAI's Legendre),
//             7 invert_image (adjust contrast), 8 nonzero (std shift), 9 fixed_mean,
//             10 preserve_range (scale with fixed mean)
//   params[8k .. 8k+7]  p0..p6, prob. scale_intensity_range: a_min, a_max, b_min, b_max;
//             shift / scale: value, low, high; gaussian / Rician noise: mean, std (gaussian
//             also: mean low, mean high (mean ~ U(low, high) when random), std low (std ~
//             U(std low, std) with sample_std)); rescale:
//             minv, maxv (bit 0 / 1 of flags say whether minv / maxv are given); bias field:
//             degree; adjust contrast: gamma, low, high (gamma ~ U(low, high) when random);
//             gamma: gamma, log_low, log_high (gamma = exp(U(log_low, log_high)) per channel
//             when random); std shift / scale with fixed mean: factor, low, high (factor ~
//             U(low, high) per sample, per (sample, channel) for a channel-wise fixed-mean scale)
//   seeds[k]  Philox key of the step (int64 bit pattern of a uint64)
//   values[k] optional per-sample values (N,) for shift / scale; for rescale the float64
//             (N, 1 or C, 2) output of minmax (C when channel-wise); for adjust contrast the
//             (N, 1, 2) output of minmax; for a bias field the (N, (d+1)(d+2)(d+3)/6)
//             coefficients (float32 used); for Rician noise optional std multipliers (N,), or
//             (N, C) when channel-wise (relative=True), or a float64 (N, 1 or C, 2) table of
//             (mean, std) per segment replacing the step's mean / std (per-channel sequences);
//             for a histogram shift the float64
//             (N, 2 + K) table: min, max (voxaug::minmax), then the floating control points in
//             units of the range (NaN-padded; reference points linspace(0, 1, count)); for a
//             std shift the (N, 1 or C, 3) output of voxaug::moments; for a scale with fixed
//             mean (N, 1 or C, 3) float64 (mean, min, max); else None
// In-place ops (trailing _) mutate `image` and return nothing, so torch.compile can
// functionalise them.
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include "host_cache.h"
#include "voxaug/torch_ops.h"

namespace voxaug {  // torch_ext/window.cpp: kernels of the window schemas without tensor inputs
std::vector<int64_t> window_layout_entry(at::IntArrayRef image_size, at::IntArrayRef roi_size,
                                         at::ArrayRef<double> overlap);
at::Tensor window_accumulator_entry(at::IntArrayRef sizes, at::ScalarType dtype, at::Device device,
                                    bool zero);
at::Tensor window_importance_map_entry(at::IntArrayRef roi_size, c10::string_view mode,
                                       at::ArrayRef<double> sigma_scale, at::ScalarType dtype,
                                       at::Device device);
}  // namespace voxaug

TORCH_LIBRARY(voxaug, m) {
#define VOXAUG_CHAIN_ARGS "int[] ops, int[] flags, float[] params, int[] seeds, Tensor?[] values"
  m.def("pointwise_chain(Tensor image, " VOXAUG_CHAIN_ARGS
        ", int first_sample=0, ScalarType? dtype=None) -> Tensor");
  m.def("pointwise_chain_(Tensor(a!) image, " VOXAUG_CHAIN_ARGS ", int first_sample=0) -> ()");
  m.def("pointwise_chain_backward(Tensor grad, Tensor image, " VOXAUG_CHAIN_ARGS
        ", int first_sample=0) -> Tensor");
#undef VOXAUG_CHAIN_ARGS

  m.def("minmax(Tensor image, bool channel_wise=False) -> Tensor");
  // Host-side Philox parameter draws: (batch, count) float64 uniforms (computed on the CPU;
  // `device` only for factory-function tracing, e.g. fake tensors).
  m.def(
      "philox_uniform(int seed, int first_sample, int batch, int count, *, Device? device=None) "
      "-> Tensor");

  // Spatial family (include/voxaug/resample.h): every input through one coordinate map.
  // matrices: (N, 3, 4) output voxel index (d, h, w, 1) -> input voxel index; modes[k]:
  // 0 nearest, 1 linear, 2 cubic B-spline, 3 / 4 / 5 the B-splines of order 2 / 4 / 5 (scipy's
  // map_coordinates orders); paddings[k]: 0 zeros, 1 border, 2 reflection, 3 constant, 4 cutoff
  // (scipy's 'constant': pad_values[k] outside [0, S-1], no blending).
  m.def(
      "resample(Tensor[] inputs, Tensor matrices, int[] out_size, int[] modes, int[] paddings, "
      "float[] pad_values, bool align_corners=False) -> Tensor[]");
  // A crop followed by a spatial map as one gather (include/voxaug/resample.h, group): inputs
  // (M, C, D, H, W), starts (M, K, 3) integer crop starts (centre - roi // 2) on the inputs'
  // device, matrices (M * K, 3, 4) mapping output index -> index inside patch (m, k) (row
  // m * K + k); outputs (M * K, C, *out_size), patch (m, k) read from volume m at matrix +
  // start, so voxels outside the crop window are real data, not padding. Forward only.
  // resample_patches_post: the same, with a pointwise chain in the pointwise_chain op's list
  // form (stat-free steps only: ResampleTarget::post) applied to input post_input's patches
  // as they are stored.
  m.def(
      "resample_patches(Tensor[] inputs, Tensor matrices, Tensor starts, int[] out_size, "
      "int[] modes, int[] paddings, float[] pad_values, bool align_corners=False) -> Tensor[]");
  m.def(
      "resample_patches_post(Tensor[] inputs, Tensor matrices, Tensor starts, int[] out_size, "
      "int[] modes, int[] paddings, float[] pad_values, bool align_corners, int post_input, "
      "int[] post_ops, int[] post_flags, float[] post_params, int[] post_seeds, "
      "Tensor?[] post_values, int post_first_sample) -> Tensor[]");
  m.def(
      "resample_backward_input(Tensor grad_output, Tensor input, Tensor matrices, int mode, "
      "int padding, bool align_corners=False) -> Tensor");
  m.def(
      "resample_backward_matrix(Tensor[] grad_outputs, Tensor[] inputs, Tensor matrices, "
      "int[] modes, int[] paddings, float[] pad_values, bool align_corners=False) -> Tensor");
  // Deform family (include/voxaug/deform.h): resample through M (x + u(x)), u from `field`:
  // field_kind 1 B-spline control grid (N, 3, Kd, Kh, Kw) with control index
  // g = field_scale * x + field_offset per axis; 2 dense (N, 3, D', H', W'); 3 separable
  // (N, 3, L, 1, 1). Displacements in output voxels. field_map (optional, B-spline): per-sample
  // (N, 6) float64 (scale d, h, w, offset d, h, w) replacing field_scale / field_offset.
  // starts (optional): K patches per input volume as resample_patches (inputs (M, ...), starts
  // (M, K, 3), matrices, field and field_map for the M * K patches): a crop, a spatial map and
  // the deformation as one gather from the full volumes.
  m.def(
      "resample_deformed(Tensor[] inputs, Tensor matrices, Tensor field, int field_kind, "
      "float[] field_scale, float[] field_offset, int[] out_size, int[] modes, int[] paddings, "
      "float[] pad_values, bool align_corners=False, Tensor? field_map=None, "
      "Tensor? starts=None) -> Tensor[]");
  m.def(
      "deform_field_dense(Tensor field, int field_kind, float[] field_scale, float[] field_offset, "
      "int[] out_size, ScalarType? dtype=None, Tensor? field_map=None) -> Tensor");
  // Crop family (include/voxaug/crop.h): per-sample foreground bounding box, (N, 6) int64
  // (d0, h0, w0, d1, h1, w1; zeros without foreground) on the image's device.
  m.def(
      "foreground_bbox(Tensor image, float threshold=0.0, int[]? channel_indices=None) -> "
      "Tensor");
  // MONAI RandCropByPosNegLabel's centres drawn on the device: (N, num_samples, 3) int64.
  // counts: class_crop_counts(label, image, image_threshold, 0, 2) cached for this label (skips
  // the scan of the volume; the same centres).
  m.def(
      "pos_neg_crop_centers(Tensor label, Tensor? image, float image_threshold, float pos_ratio, "
      "int num_samples, int[] spatial_size, int seed, int first_sample=0, Tensor? counts=None) "
      "-> Tensor");
  // The candidate counts per (sample, chunk of 4096 voxels in memory order, class) that the
  // class / pos-neg samplers scan for: (N, chunks, num_classes) int64, to cache per volume.
  m.def(
      "class_crop_counts(Tensor label, Tensor? image, float image_threshold, int label_form, "
      "int num_classes) -> Tensor");
  // Label family (include/voxaug/label.h): connected components of each (n, c) volume of a
  // mask (nonzero = foreground; bool masks too), int32 (N, C, D, H, W): 0 background, else 1 +
  // the C-order index of the component's first voxel. connectivity 1 / 2 / 3 (6 / 18 / 26).
  m.def("connected_components(Tensor mask, int connectivity=3) -> Tensor");
  // Bool mask of the num_components largest components of each (n, c) volume of canonical
  // connected_components labels (larger first, then the smaller label).
  m.def("largest_components(Tensor labels, int num_components=1) -> Tensor");
  // int32: each voxel's component size (0 for background).
  m.def("component_sizes(Tensor labels) -> Tensor");
  // float64 (dtype None) or float32: each voxel's Euclidean distance to its volume's nearest
  // zero voxel, axes scaled by spacing (one value or d, h, w), scipy's distance_transform_edt.
  m.def(
      "distance_transform_edt(Tensor mask, float[] spacing=[1.0], ScalarType? dtype=None) -> "
      "Tensor");
  // Crop-centre samplers (include/voxaug/crop.h), all drawn on the device with Philox.
  // region: [] or [lo_d, lo_h, lo_w, hi_d, hi_h, hi_w] (a hi of 0: the whole axis).
  // label_form: 0 foreground / background, 1 argmax, 2 one-hot; num_classes = len(ratios).
  // Returns (centers (N, num_samples, 3) int64, class_counts (N, num_classes) int64).
  m.def(
      "class_crop_centers(Tensor label, Tensor? image, float image_threshold, int label_form, "
      "float[] ratios, int num_samples, int[]? spatial_size, int[] region, int seed, "
      "int first_sample=0, int first_crop=0, Tensor? counts=None) -> (Tensor, Tensor)");
  // Returns (centers, stats (N, 3) float64: total weight, shift, minimum of channel 0).
  m.def(
      "weighted_crop_centers(Tensor weights, bool shift_negative, int num_samples, int[] region, "
      "int seed, int first_sample=0, int first_crop=0) -> (Tensor, Tensor)");
  m.def(
      "uniform_crop_centers(Tensor like, int num_samples, int[] region, int seed, "
      "int first_sample=0, int first_crop=0) -> Tensor");
  // (N, C, D, H, W) input, centers (N, K, 3) int64 -> (N * K, C, *size), each patch starting
  // at centre - size // 2; zeros outside.
  m.def("extract_patches(Tensor input, Tensor centers, int[] size) -> Tensor");
  // volumes: (N_i, C, D_i, H_i, W_i) of one dtype, C and device; patch k cut from sample
  // sample_index[k] of the volumes' samples in order (volume 0's N_0, then volume 1's, ...),
  // starting at starts[k] ((K, 3) int64) -> (K, C, *size); zeros outside.
  m.def(
      "gather_patches(Tensor[] volumes, int[] sample_index, Tensor starts, int[] size) -> Tensor");
  // patches (K, C, P0, P1, P2) into out (1, C, D, H, W) at starts (K * 3 host ints, patch voxel
  // (0, 0, 0)'s place), each limited to boxes[k] (K * 6: lo0 lo1 lo2 hi0 hi1 hi2 in patch
  // coordinates; None: whole patches). accumulate: out += patch * weight (None: 1) and count +=
  // weight, patches in order; else out = patch (the last one wins).
  m.def(
      "aggregate_patches_(Tensor(a!) out, Tensor(b!)? count, Tensor patches, int[] starts, "
      "int[]? boxes=None, Tensor? weight=None, bool accumulate=True) -> ()");
  // U(low, high) from Philox keyed by (seed, first_sample + n, element), in place.
  m.def("uniform_fill_(Tensor(a!) out, float low, float high, int seed, int first_sample=0) -> ()");
  m.def(
      "scale_intensity_range(Tensor image, float a_min, float a_max, float? b_min=None, "
      "float? b_max=None, bool clip=False, ScalarType? dtype=None) -> Tensor");
  m.def(
      "scale_intensity_range_(Tensor(a!) image, float a_min, float a_max, float? b_min=None, "
      "float? b_max=None, bool clip=False) -> ()");
  m.def("shift_intensity(Tensor image, Tensor offsets) -> Tensor");
  m.def("shift_intensity_(Tensor(a!) image, Tensor offsets) -> ()");
  m.def("scale_intensity(Tensor image, Tensor factors, ScalarType? dtype=None) -> Tensor");
  m.def("scale_intensity_(Tensor(a!) image, Tensor factors) -> ()");
  m.def(
      "rand_shift_intensity(Tensor image, float low, float high, float prob, int seed, "
      "bool channel_wise=False, int first_sample=0) -> Tensor");
  m.def(
      "rand_shift_intensity_(Tensor(a!) image, float low, float high, float prob, int seed, "
      "bool channel_wise=False, int first_sample=0) -> ()");
  m.def(
      "rand_scale_intensity(Tensor image, float low, float high, float prob, int seed, "
      "bool channel_wise=False, int first_sample=0, ScalarType? dtype=None) -> Tensor");
  m.def(
      "rand_scale_intensity_(Tensor(a!) image, float low, float high, float prob, int seed, "
      "bool channel_wise=False, int first_sample=0) -> ()");
  m.def(
      "rand_gaussian_noise(Tensor image, float mean, float std, bool sample_std, float prob, "
      "int seed, int first_sample=0, ScalarType? dtype=None) -> Tensor");
  m.def(
      "rand_gaussian_noise_(Tensor(a!) image, float mean, float std, bool sample_std, "
      "float prob, int seed, int first_sample=0) -> ()");
  // Filter family (include/voxaug/filter.h): separable Gaussian smoothing, MONAI's
  // GaussianFilter (taps "erf", border "zeros") or scipy.ndimage.gaussian_filter's (taps
  // "sampled", border "reflect"; truncated is scipy's truncate). sigma: (N, 3) floating CPU
  // tensor, per sample and spatial axis (D, H, W), in voxels; output dtype: `dtype`, else the
  // image's (float32 for integer images). Differentiable w.r.t. image.
  m.def(
      "gaussian_smooth(Tensor image, Tensor sigma, float truncated=4.0, ScalarType? dtype=None, "
      "str taps=\"erf\", str border=\"zeros\") -> Tensor");
  // MONAI MedianSmooth / median_filter: float32, the median of the (2 r + 1)^3 box around each
  // voxel, edges replicated; radius (D, H, W), a box of at most 343 voxels.
  m.def("median_filter(Tensor image, int[] radius) -> Tensor");
  // Stats family (include/voxaug/stats.h): per-sample (or per (sample, channel) with
  // channel_wise) statistics as float64 on the image's device, never read back to the host.
  // moments: (N, 1 or C, 3) count, mean, population std (nonzero: only values != 0 count).
  // percentiles: (N, 1 or C, len(q)), q in percent, numpy.percentile's linear method, exact.
  m.def("moments(Tensor image, bool channel_wise=False, bool nonzero=False) -> Tensor");
  m.def("percentiles(Tensor image, float[] q, bool channel_wise=False) -> Tensor");
  // TorchIO HistogramStandardization's map: float32 image, per-sample table (N, 3 pieces - 1)
  // float64 (edges, slopes, intercepts) on the image's device; float32 result.
  m.def("piecewise_linear(Tensor image, Tensor table, int pieces) -> Tensor");
  // MONAI NormalizeIntensity / ScaleIntensityRangePercentiles with device statistics.
  // subtrahend / divisor: 1 value, or one per channel with channel_wise; None: mean / std.
  m.def(
      "normalize_intensity(Tensor image, float[]? subtrahend=None, float[]? divisor=None, "
      "bool nonzero=False, bool channel_wise=False, ScalarType? dtype=None) -> Tensor");
  m.def(
      "scale_intensity_range_percentiles(Tensor image, float lower, float upper, "
      "float? b_min=None, float? b_max=None, bool clip=False, bool relative=False, "
      "bool channel_wise=False, ScalarType? dtype=None) -> Tensor");
  // Dropout family (include/voxaug/dropout.h): MONAI RandCoarseDropout with host-drawn hole
  // tables: boxes (N, K, 6) int64 CPU (d0, h0, w0, d1, h1, w1, half-open), counts (N,) int64 CPU
  // (holes used; 0 = sample unchanged). fill_mode 0 fill_value, 1 U(fill_low, fill_high),
  // 2 U(min, max) of the sample; uniform fills from Philox (seed, first_sample + n, element).
  m.def(
      "coarse_dropout(Tensor image, Tensor boxes, Tensor counts, bool dropout_holes=True, "
      "int fill_mode=0, float fill_value=0.0, float fill_low=0.0, float fill_high=0.0, "
      "int seed=0, int first_sample=0) -> Tensor");
  m.def(
      "coarse_dropout_(Tensor(a!) image, Tensor boxes, Tensor counts, bool dropout_holes=True, "
      "int fill_mode=0, float fill_value=0.0, float fill_low=0.0, float fill_high=0.0, "
      "int seed=0, int first_sample=0) -> ()");
  // MONAI RandCoarseShuffle: a copy with the voxels of each box permuted per channel, box after
  // box (the same host tables as coarse_dropout); Philox-keyed, the same on CPU and CUDA.
  m.def(
      "coarse_shuffle(Tensor image, Tensor boxes, Tensor counts, int seed=0, int first_sample=0) "
      "-> Tensor");
  m.def(
      "coarse_shuffle_(Tensor(a!) image, Tensor boxes, Tensor counts, int seed=0, "
      "int first_sample=0) -> ()");
  // TorchIO Swap: per sample counts[n] patch swaps in order; locations (N, K, 6) int64 CPU rows
  // (first d, h, w, second d, h, w), patch_size (D, H, W); a true swap (both patches read first).
  m.def("swap_patches(Tensor image, Tensor locations, Tensor counts, int[] patch_size) -> Tensor");
  m.def("swap_patches_(Tensor(a!) image, Tensor locations, Tensor counts, int[] patch_size) -> ()");
  // Lowres family (include/voxaug/lowres.h): MONAI RandSimulateLowResolution as one gather:
  // interpolate(nearest, size=low_size[n]) then interpolate(upsample_mode: 0 trilinear,
  // 1 nearest, back to the image size). low_size: (N, 3) int64 CPU. Output float32 by default.
  m.def(
      "simulate_low_resolution(Tensor image, Tensor low_size, int upsample_mode=0, "
      "bool align_corners=False, ScalarType? dtype=None) -> Tensor");
  // Window family (include/voxaug/window.h): sliding-window inference with MONAI's numerics.
  // window_layout -> [count d, h, w, padded d, h, w, pad_before d, h, w, interval d, h, w].
  // overlap: 1 value or 1 per axis. padding_mode: 0 constant, 1 reflect, 2 replicate,
  // 3 circular. acc: (N, K, padded) float32 / float64; weight: the roi-sized importance map in
  // acc's dtype (None: constant weights); count: (padded) map of window_count.
  m.def("window_layout(int[] image_size, int[] roi_size, float[] overlap) -> int[]",
        &voxaug::window_layout_entry);
  // The host output cache (torch_ext/host_cache.h): bytes kept for reuse; release frees them.
  m.def("host_cache_bytes() -> int", [] { return voxaug::torch_ext::host_cache_bytes(); });
  m.def("release_host_cache() -> int", [] { return voxaug::torch_ext::release_host_cache(); });
  m.def(
      "window_importance_map(int[] roi_size, str mode, float[] sigma_scale, ScalarType dtype, "
      "Device device) -> Tensor",
      &voxaug::window_importance_map_entry);
  // A (zeroed) buffer for windows or the accumulator; on the host on transparent huge pages.
  m.def("window_accumulator(int[] size, ScalarType dtype, Device device, bool zero=True) -> Tensor",
        &voxaug::window_accumulator_entry);
  m.def(
      "window_gather(Tensor image, int[] roi_size, float[] overlap, int first_window, "
      "int num_windows, int padding_mode=0, float cval=0.0, ScalarType? dtype=None) -> Tensor");
  m.def(
      "window_gather_(Tensor image, Tensor(a!) out, int[] roi_size, float[] overlap, "
      "int first_window, int padding_mode=0, float cval=0.0) -> ()");
  m.def(
      "window_stitch_(Tensor(a!) acc, Tensor pred, Tensor? weight, int[] image_size, "
      "int[] roi_size, float[] overlap, int first_window, bool first_store=False, "
      "bool last_divide=False, Tensor? count=None, bool ring=False) -> ()");
  m.def(
      "window_count(Tensor acc, Tensor? weight, int[] image_size, int[] roi_size, "
      "float[] overlap) -> Tensor");
  // count None: computed on the fly from weight (no count buffer). window_finalize_ divides
  // acc in place (an image at least as large as the roi: nothing to crop).
  m.def(
      "window_finalize(Tensor acc, Tensor? count, Tensor? weight, int[] image_size, "
      "int[] roi_size, float[] overlap, ScalarType? dtype=None, bool argmax=False) -> Tensor");
  m.def(
      "window_finalize_(Tensor(a!) acc, Tensor? count, Tensor? weight, int[] image_size, "
      "int[] roi_size, float[] overlap) -> ()");
  // A ring accumulator (window_stitch_ ring=True: acc (N, K, depth, padded h, w), plane d at
  // d % depth) drained plane range by plane range: out (N, K or 1, image size) gets the padded
  // planes [d_begin, d_end) divided by their count (cast, or the channel argmax).
  m.def(
      "window_finalize_planes_(Tensor acc, Tensor? count, Tensor? weight, int[] image_size, "
      "int[] roi_size, float[] overlap, Tensor(a!) out, int d_begin, int d_end, "
      "bool argmax=False) -> ()");
  // Phantom family (include/voxaug/phantom.h): a synthetic CT-like abdominal phantom, image
  // float32 (N, 1, D, H, W) in HU and label uint8 (N, 1, D, H, W) in [0, num_classes - 1];
  // sample n is subject first_sample + n. phantom_params: the (N, 25 + 36 num_classes) float32
  // parameter table the voxel pass reads. device: cpu or cuda (current stream); meta with the
  // Python package loaded. No tensor inputs: a BackendSelect kernel (torch_ext/phantom.cpp)
  // routes by `device` to the CPU and CUDA kernels, so the op stays opaque under torch.compile;
  // the fake / Meta kernel is registered by python/voxaug/phantom.py.
  m.def(
      "phantom(int batch, int[] size, int num_classes, int seed, int first_sample=0, *, "
      "Device device) -> (Tensor, Tensor)");
  m.def(
      "phantom_params(int batch, int num_classes, int seed, int first_sample=0, *, "
      "Device device) -> Tensor");
}

namespace voxaug::ops {
namespace {
template <class Sig>
c10::TypedOperatorHandle<Sig> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}
}  // namespace

at::Tensor scale_intensity_range(const at::Tensor& image, double a_min, double a_max,
                                 std::optional<double> b_min, std::optional<double> b_max,
                                 bool clip, std::optional<c10::ScalarType> dtype) {
  static auto op = handle<at::Tensor(const at::Tensor&, double, double, std::optional<double>,
                                     std::optional<double>, bool, std::optional<c10::ScalarType>)>(
      "voxaug::scale_intensity_range");
  return op.call(image, a_min, a_max, b_min, b_max, clip, dtype);
}
at::Tensor shift_intensity(const at::Tensor& image, const at::Tensor& offsets) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&)>("voxaug::shift_intensity");
  return op.call(image, offsets);
}
at::Tensor scale_intensity(const at::Tensor& image, const at::Tensor& factors,
                           std::optional<c10::ScalarType> dtype) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, std::optional<c10::ScalarType>)>(
          "voxaug::scale_intensity");
  return op.call(image, factors, dtype);
}
at::Tensor gaussian_smooth(const at::Tensor& image, const at::Tensor& sigma, double truncated,
                           std::optional<c10::ScalarType> dtype, c10::string_view taps,
                           c10::string_view border) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, double,
                        std::optional<c10::ScalarType>, c10::string_view, c10::string_view)>(
          "voxaug::gaussian_smooth");
  return op.call(image, sigma, truncated, dtype, taps, border);
}
at::Tensor rand_shift_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise, int64_t first_sample) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, double, double, double, int64_t, bool, int64_t)>(
          "voxaug::rand_shift_intensity");
  return op.call(image, low, high, prob, seed, channel_wise, first_sample);
}
at::Tensor rand_scale_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise, int64_t first_sample,
                                std::optional<c10::ScalarType> dtype) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, double, double, double, int64_t, bool, int64_t,
                        std::optional<c10::ScalarType>)>("voxaug::rand_scale_intensity");
  return op.call(image, low, high, prob, seed, channel_wise, first_sample, dtype);
}
at::Tensor rand_gaussian_noise(const at::Tensor& image, double mean, double std, bool sample_std,
                               double prob, int64_t seed, int64_t first_sample,
                               std::optional<c10::ScalarType> dtype) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, double, double, bool, double, int64_t, int64_t,
                        std::optional<c10::ScalarType>)>("voxaug::rand_gaussian_noise");
  return op.call(image, mean, std, sample_std, prob, seed, first_sample, dtype);
}

at::Tensor philox_uniform(int64_t seed, int64_t first_sample, int64_t batch, int64_t count) {
  static auto op =
      handle<at::Tensor(int64_t, int64_t, int64_t, int64_t, std::optional<c10::Device>)>(
          "voxaug::philox_uniform");
  return op.call(seed, first_sample, batch, count, std::nullopt);
}

at::Tensor foreground_bbox(const at::Tensor& image, double threshold,
                           at::OptionalIntArrayRef channel_indices) {
  static auto op = handle<at::Tensor(const at::Tensor&, double, at::OptionalIntArrayRef)>(
      "voxaug::foreground_bbox");
  return op.call(image, threshold, channel_indices);
}
at::Tensor pos_neg_crop_centers(const at::Tensor& label, const std::optional<at::Tensor>& image,
                                double image_threshold, double pos_ratio, int64_t num_samples,
                                at::IntArrayRef spatial_size, int64_t seed, int64_t first_sample,
                                const std::optional<at::Tensor>& counts) {
  static auto op = handle<at::Tensor(
      const at::Tensor&, const std::optional<at::Tensor>&, double, double, int64_t, at::IntArrayRef,
      int64_t, int64_t, const std::optional<at::Tensor>&)>("voxaug::pos_neg_crop_centers");
  return op.call(label, image, image_threshold, pos_ratio, num_samples, spatial_size, seed,
                 first_sample, counts);
}
at::Tensor connected_components(const at::Tensor& mask, int64_t connectivity) {
  static auto op = handle<at::Tensor(const at::Tensor&, int64_t)>("voxaug::connected_components");
  return op.call(mask, connectivity);
}
at::Tensor largest_components(const at::Tensor& labels, int64_t num_components) {
  static auto op = handle<at::Tensor(const at::Tensor&, int64_t)>("voxaug::largest_components");
  return op.call(labels, num_components);
}
at::Tensor component_sizes(const at::Tensor& labels) {
  static auto op = handle<at::Tensor(const at::Tensor&)>("voxaug::component_sizes");
  return op.call(labels);
}
at::Tensor distance_transform_edt(const at::Tensor& mask, at::ArrayRef<double> spacing,
                                  std::optional<at::ScalarType> dtype) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, at::ArrayRef<double>, std::optional<at::ScalarType>)>(
          "voxaug::distance_transform_edt");
  return op.call(mask, spacing, dtype);
}
at::Tensor median_filter(const at::Tensor& image, at::IntArrayRef radius) {
  static auto op = handle<at::Tensor(const at::Tensor&, at::IntArrayRef)>("voxaug::median_filter");
  return op.call(image, radius);
}
at::Tensor coarse_shuffle(const at::Tensor& image, const at::Tensor& boxes,
                          const at::Tensor& counts, int64_t seed, int64_t first_sample) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t)>(
          "voxaug::coarse_shuffle");
  return op.call(image, boxes, counts, seed, first_sample);
}
at::Tensor swap_patches(const at::Tensor& image, const at::Tensor& locations,
                        const at::Tensor& counts, at::IntArrayRef patch_size) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::IntArrayRef)>(
          "voxaug::swap_patches");
  return op.call(image, locations, counts, patch_size);
}
at::Tensor class_crop_counts(const at::Tensor& label, const std::optional<at::Tensor>& image,
                             double image_threshold, int64_t label_form, int64_t num_classes) {
  static auto op = handle<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double,
                                     int64_t, int64_t)>("voxaug::class_crop_counts");
  return op.call(label, image, image_threshold, label_form, num_classes);
}
std::tuple<at::Tensor, at::Tensor> class_crop_centers(
    const at::Tensor& label, const std::optional<at::Tensor>& image, double image_threshold,
    int64_t label_form, at::ArrayRef<double> ratios, int64_t num_samples,
    at::OptionalIntArrayRef spatial_size, at::IntArrayRef region, int64_t seed,
    int64_t first_sample, int64_t first_crop, const std::optional<at::Tensor>& counts) {
  static auto op = handle<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, const std::optional<at::Tensor>&, double, int64_t, at::ArrayRef<double>,
      int64_t, at::OptionalIntArrayRef, at::IntArrayRef, int64_t, int64_t, int64_t,
      const std::optional<at::Tensor>&)>("voxaug::class_crop_centers");
  return op.call(label, image, image_threshold, label_form, ratios, num_samples, spatial_size,
                 region, seed, first_sample, first_crop, counts);
}
std::tuple<at::Tensor, at::Tensor> weighted_crop_centers(const at::Tensor& weights,
                                                         bool shift_negative, int64_t num_samples,
                                                         at::IntArrayRef region, int64_t seed,
                                                         int64_t first_sample, int64_t first_crop) {
  static auto op = handle<std::tuple<at::Tensor, at::Tensor>(
      const at::Tensor&, bool, int64_t, at::IntArrayRef, int64_t, int64_t, int64_t)>(
      "voxaug::weighted_crop_centers");
  return op.call(weights, shift_negative, num_samples, region, seed, first_sample, first_crop);
}
at::Tensor uniform_crop_centers(const at::Tensor& like, int64_t num_samples, at::IntArrayRef region,
                                int64_t seed, int64_t first_sample, int64_t first_crop) {
  static auto op =
      handle<at::Tensor(const at::Tensor&, int64_t, at::IntArrayRef, int64_t, int64_t, int64_t)>(
          "voxaug::uniform_crop_centers");
  return op.call(like, num_samples, region, seed, first_sample, first_crop);
}
at::Tensor extract_patches(const at::Tensor& input, const at::Tensor& centers,
                           at::IntArrayRef size) {
  static auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&, at::IntArrayRef)>(
      "voxaug::extract_patches");
  return op.call(input, centers, size);
}
at::Tensor gather_patches(at::TensorList volumes, at::IntArrayRef sample_index,
                          const at::Tensor& starts, at::IntArrayRef size) {
  static auto op =
      handle<at::Tensor(at::TensorList, at::IntArrayRef, const at::Tensor&, at::IntArrayRef)>(
          "voxaug::gather_patches");
  return op.call(volumes, sample_index, starts, size);
}
void aggregate_patches_(const at::Tensor& out, const std::optional<at::Tensor>& count,
                        const at::Tensor& patches, at::IntArrayRef starts,
                        at::OptionalIntArrayRef boxes, const std::optional<at::Tensor>& weight,
                        bool accumulate) {
  static auto op =
      handle<void(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                  at::IntArrayRef, at::OptionalIntArrayRef, const std::optional<at::Tensor>&,
                  bool)>("voxaug::aggregate_patches_");
  op.call(out, count, patches, starts, boxes, weight, accumulate);
}

std::vector<at::Tensor> resample(at::TensorList inputs, const at::Tensor& matrices,
                                 at::IntArrayRef out_size, at::IntArrayRef modes,
                                 at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                 bool align_corners) {
  static auto op =
      handle<std::vector<at::Tensor>(at::TensorList, const at::Tensor&, at::IntArrayRef,
                                     at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>, bool)>(
          "voxaug::resample");
  return op.call(inputs, matrices, out_size, modes, paddings, pad_values, align_corners);
}
std::vector<at::Tensor> resample_patches(at::TensorList inputs, const at::Tensor& matrices,
                                         const at::Tensor& starts, at::IntArrayRef out_size,
                                         at::IntArrayRef modes, at::IntArrayRef paddings,
                                         at::ArrayRef<double> pad_values, bool align_corners) {
  static auto op = handle<std::vector<at::Tensor>(
      at::TensorList, const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
      at::IntArrayRef, at::ArrayRef<double>, bool)>("voxaug::resample_patches");
  return op.call(inputs, matrices, starts, out_size, modes, paddings, pad_values, align_corners);
}

std::tuple<at::Tensor, at::Tensor> phantom(int64_t batch, at::IntArrayRef size, int64_t num_classes,
                                           int64_t seed, int64_t first_sample, at::Device device) {
  static auto op = handle<std::tuple<at::Tensor, at::Tensor>(
      int64_t, at::IntArrayRef, int64_t, int64_t, int64_t, at::Device)>("voxaug::phantom");
  return op.call(batch, size, num_classes, seed, first_sample, device);
}
at::Tensor phantom_params(int64_t batch, int64_t num_classes, int64_t seed, int64_t first_sample,
                          at::Device device) {
  static auto op =
      handle<at::Tensor(int64_t, int64_t, int64_t, int64_t, at::Device)>("voxaug::phantom_params");
  return op.call(batch, num_classes, seed, first_sample, device);
}

}  // namespace voxaug::ops
