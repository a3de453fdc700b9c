// voxaug: the crop family's device reductions (the crops themselves are resample's exact path).
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
// spatial_size fits (MONAI's correct_crop_centers). Foreground: any channel of `label` > 0;
// with `image` (may be null; same N and spatial size), only voxels where any image channel is
// > image_threshold are candidates (foreground or background), as MONAI's map_binary_to_indices.
// A sample without foreground draws background and vice versa (MONAI's fallback); a sample with
// no candidate at all gets its centre voxel (MONAI raises; a device op cannot without a sync).
// spatial_size must not exceed the label's size (the caller applies allow_smaller).
// Random draws: Philox keyed by `seed`, sample first_sample + n, block k: independent of the
// batch split and the device. Writes `centers` (N x num_samples x 3 int64, on the data's
// device, the crop centre as MONAI's). CUDA: stream-ordered, no host synchronisation.
void pos_neg_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                          double pos_ratio, int num_samples, const int64_t spatial_size[3],
                          uint64_t seed, int64_t first_sample, int64_t* centers,
                          cudaStream_t stream = nullptr);

}  // namespace voxaug
