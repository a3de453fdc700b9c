// voxaug: the crop family's device reductions, crop-centre samplers and batched patch extraction.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// The foreground bounding box of every sample of `in` ((N, C, D, H, W), any dtype, any
// strides): a voxel is foreground when the value of any selected channel is > threshold
// (compared in float64; MONAI's is_positive is threshold 0). `channels`: host array of
// num_channels channel indices, or null for all channels. Writes `box` (N x 6 int64 on the
// data's device, row n = d0, h0, w0, d1, h1, w1 with [d0, d1) etc. the tight half-open box; all
// zero for a sample without foreground, as MONAI's generate_spatial_bounding_box). CUDA: three
// small launches on `stream`, no host synchronisation.
void foreground_bbox(const VolumeView& in, double threshold, const int64_t* channels,
                     int num_channels, int64_t* box, cudaStream_t stream = nullptr);

// MONAI RandCropByPosNegLabel's crop centres, drawn on the device: for each of the N samples
// and each of num_samples crops, a foreground voxel with probability pos_ratio (else a
// background voxel) chosen uniformly from the sample's voxels, then moved so that a crop of
// spatial_size fits (MONAI's correct_crop_centers). Foreground: any channel of `label` > 0
// (channels 1.. of a several-channel, one-hot label: channel 0 is its background); with `image`
// (may be null; same N and spatial size), only voxels where any image channel is >
// image_threshold are background candidates (every foreground voxel is one), as MONAI's
// map_binary_to_indices.
// A sample without foreground draws background and vice versa (MONAI's fallback); a sample with
// no candidate at all gets its centre voxel (MONAI raises; a device op cannot without a sync).
// spatial_size must not exceed the label's size (the caller applies allow_smaller).
// Random draws: Philox keyed by `seed`, sample first_sample + n, block k: independent of the
// batch split and the device. Writes `centers` (N x num_samples x 3 int64, on the data's
// device, the crop centre as MONAI's). CUDA: stream-ordered, no host synchronisation.
// `cached_counts` (may be null): class_crop_counts of this label (Foreground form, 2 classes)
// and image, which skips the scan of the volume (see class_crop_counts).
void pos_neg_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                          double pos_ratio, int num_samples, const int64_t spatial_size[3],
                          uint64_t seed, int64_t first_sample, int64_t* centers,
                          cudaStream_t stream = nullptr, const int64_t* cached_counts = nullptr);

// How a label's voxels map to classes for class_crop_centers.
//  Foreground: two classes, 0 = any channel > 0 (foreground; channels 1.. of a one-hot label),
//              1 = the rest (MONAI pos / neg); an image restricts class 1 only.
//  Argmax: one channel; class c where the value == c (c in [0, num_classes); other values belong
//          to no class), MONAI map_classes_to_indices on an argmax label.
//  OneHot: class c where channel c != 0 (num_classes = channels; a voxel may be in several).
enum class CropLabelForm : int { Foreground = 0, Argmax = 1, OneHot = 2 };

// Most classes class_crop_centers handles (one shared-memory histogram per block on CUDA).
constexpr int kMaxCropClasses = 4096;

// The drawing options shared by the centre samplers. `region`: candidate centres are the voxels
// with lo[a] <= index[a] < hi[a] (half-open box; MONAI's crops use the whole volume, TorchIO's
// samplers [patch // 2, size - (patch - 1) // 2)). Random draws: Philox keyed by `seed`, sample
// first_sample + n, block first_crop + k (the k-th crop): independent of the batch split, of
// how many crops one call draws, and of the device.
struct CropCenterOptions {
  int num_samples = 1;  // crops per sample
  int64_t region_lo[3] = {0, 0, 0};
  int64_t region_hi[3] = {0, 0, 0};  // 0 entries: the whole axis
  uint64_t seed = 0;
  int64_t first_sample = 0;
  int64_t first_crop = 0;
};

// Class-balanced crop centres (MONAI RandCropByLabelClasses, RandCropByPosNegLabel, TorchIO
// LabelSampler): per crop, a class c drawn with probability ratios[c] / sum over the classes
// present (classes without candidates get ratio 0, MONAI's rule), then a voxel of that class
// uniformly among the candidates (voxels of the region where any channel of `image` (may be null;
// same N and spatial size) > image_threshold; in the Foreground form every foreground voxel of
// the region). When no class with a positive ratio is present,
// a present class is drawn uniformly (MONAI pos / neg fallback; MONAI's RandCropByLabelClasses
// raises there, which a device op cannot without a sync: `class_counts` lets the caller check).
// No candidate at all: the region's centre. `correct_size` (may be null): MONAI's
// correct_crop_centers for a crop of that size (must not exceed the label's size).
// `ratios`: host array of num_classes non-negative values (copied to the device,
// stream-ordered). Writes `centers` (N x num_samples x 3 int64, the data's device) and, when not
// null, `class_counts` (N x num_classes int64: candidates per class). CUDA: stream-ordered, no
// host synchronisation.
// `cached_counts` (may be null): class_crop_counts of the same label, image, threshold, form and
// num_classes; the draw then skips the scan of the volume and reads one chunk per crop (the
// region must be the whole volume).
void class_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                        CropLabelForm form, int num_classes, const double* ratios,
                        const int64_t* correct_size, const CropCenterOptions& opt, int64_t* centers,
                        int64_t* class_counts, cudaStream_t stream = nullptr,
                        const int64_t* cached_counts = nullptr);

// The scan chunks of a label of d x h x w voxels: candidates are counted per chunk of this many
// voxels in the label's memory order (the layout of class_crop_counts; every sampler scans so).
constexpr int64_t kCropCountChunk = 4096;
inline int64_t class_crop_chunks(int64_t d, int64_t h, int64_t w) {
  return (d * h * w + kCropCountChunk - 1) / kCropCountChunk;
}

// The counting pass of class_crop_centers alone, to cache once per volume (what MONAI's
// FgBgToIndices / ClassesToIndices precompute; voxaug keeps counts, not index lists): writes
// `counts` (N x class_crop_chunks(D, H, W) x num_classes int64, on the label's device): the
// candidates of each class in each chunk, over the whole volume. They stay valid while the label
// and image keep their values and memory layout. CUDA: stream-ordered, no host synchronisation.
void class_crop_counts(const VolumeView& label, const VolumeView* image, double image_threshold,
                       CropLabelForm form, int num_classes, int64_t* counts,
                       cudaStream_t stream = nullptr);

// Weighted crop centres (MONAI RandWeightedCrop / weighted_patch_samples, TorchIO
// WeightedSampler): channel 0 of `weights` gives each voxel of the region a weight; a centre is
// drawn with probability weight / total (inverse CDF in the weights' memory order).
// shift_negative (MONAI): when the region holds a negative weight, every weight is shifted by
// minus the region's minimum; else (TorchIO) negative weights count as 0. A total that is zero or
// not finite draws the centre uniformly in the region (MONAI; TorchIO raises, see `stats`).
// Writes `centers` (N x num_samples x 3 int64) and, when not null, `stats` (N x 3 float64: the
// total weight after the shift, the shift, the minimum of channel 0 over the whole volume).
// Weights are summed in float64 in a fixed order, so CPU and CUDA draw identical centres.
void weighted_crop_centers(const VolumeView& weights, bool shift_negative,
                           const CropCenterOptions& opt, int64_t* centers, double* stats,
                           cudaStream_t stream = nullptr);

// Uniform crop centres in the region (MONAI RandSpatialCrop's get_random_patch, TorchIO
// UniformSampler): each axis independently uniform in [lo, hi). `batch` samples; writes
// `centers` (batch x num_samples x 3 int64) on `device` (device_index for CUDA).
void uniform_crop_centers(int64_t batch, const CropCenterOptions& opt, Device device,
                          int device_index, int64_t* centers, cudaStream_t stream = nullptr);

// Batched patch extraction: from each of the M samples of `in` (any dtype, any strides), the
// num_patches boxes of `size` voxels at `corners` (int64, on the data's device,
// corners[(m * num_patches + k) * 3 + a]): a box starts at corner - offset[a] (offset: host
// array or null for 0; centre-based crops pass size // 2). Voxels outside the volume are zero.
// `out`: dense (M * num_patches, C, size[0], size[1], size[2]) buffer of in's dtype. One launch
// on CUDA, no host synchronisation; exact copies (bit-identical to slicing).
void extract_patches(const VolumeView& in, const int64_t* corners, const int64_t* offset,
                     int64_t num_patches, const int64_t size[3], void* out,
                     cudaStream_t stream = nullptr);

// Most patches one gather_patches launch cuts on CUDA (their sources travel in the kernel's
// parameters: no allocation, no upload); a larger batch takes one launch per this many.
constexpr int64_t kGatherPatchesPerLaunch = 48;

// Batched patch extraction from several volumes of different spatial sizes (a patch queue's batch
// drawn from many subjects): patch k is the box of `size` voxels starting at starts[k] - offset
// of sample sample_index[k], where the samples are the volumes' samples in order (volume 0's N_0
// samples, then volume 1's, ...). `volumes`: host array of num_volumes views (N_i, C, D_i, H_i,
// W_i), any strides, all of one dtype, one channel count C and one device. `sample_index`: host
// array of num_patches indices in [0, sum N_i) (checked). `starts`: num_patches x 3 int64 on the
// volumes' device; `offset`: host array or null for 0. Voxels outside the sample are zero.
// `out`: dense (num_patches, C, size[0], size[1], size[2]) buffer of the volumes' dtype. CUDA:
// ceil(num_patches / kGatherPatchesPerLaunch) launches on `stream`, no allocation, no host
// synchronisation; exact copies (bit-identical to slicing), as extract_patches.
void gather_patches(const VolumeView* volumes, int64_t num_volumes, const int64_t* sample_index,
                    const int64_t* starts, const int64_t* offset, int64_t num_patches,
                    const int64_t size[3], void* out, cudaStream_t stream = nullptr);

// Most patches one aggregate_patches launch adds on CUDA (their placement travels in the kernel's
// parameters).
constexpr int64_t kAggregatePatchesPerLaunch = 40;

// Patch aggregation, the inverse of gather_patches (TorchIO GridAggregator): patch k of `patches`
// (K, C, P0, P1, P2) lands with its voxel (0, 0, 0) at starts[k] (host array K x 3) of `out` (1,
// C, D, H, W); voxels outside `out` are dropped. `boxes` (host array K x 6, lo0 lo1 lo2 hi0 hi1
// hi2 in patch coordinates, 0 <= lo <= hi <= P; null: the whole patch) limits each patch to the
// box [lo, hi).
//  accumulate = false: out = patch over the box, any dtype (patches' dtype = out's; exact
//    copies); a voxel covered by several patches keeps the last one's value (TorchIO's 'crop').
//    weight and count must be null.
//  accumulate = true: out += patch * weight and, when count is not null, count += weight, with
//    out float32 or float64, patches of any floating dtype (converted to out's), weight (null: 1)
//    a dense P0 x P1 x P2 array of out's dtype on the patches' device and count (1, 1, D, H, W)
//    of out's dtype. Each product is rounded, then added (no FMA), and every voxel receives the
//    patches in the order k = 0, 1, ...: the bits of TorchIO's sequential `out[box] += patch *
//    window` ('average', 'hann').
// CUDA: one launch per kAggregatePatchesPerLaunch patches over the union of their boxes (each
// voxel walks its patches in order: no atomics), no allocation, no host synchronisation.
void aggregate_patches(const VolumeView& patches, const int64_t* starts, const int64_t* boxes,
                       bool accumulate, const void* weight, const VolumeView& out,
                       const VolumeView* count, cudaStream_t stream = nullptr);

}  // namespace voxaug
