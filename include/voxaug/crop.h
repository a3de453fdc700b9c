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

}  // namespace voxaug
