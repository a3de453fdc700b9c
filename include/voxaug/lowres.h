// voxaug: the lowres family -- MONAI RandSimulateLowResolution (nnU-Net's
// SimulateLowResolutionTransform), batched, as one fused gather.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

enum class LowresUpsample : int32_t { Trilinear = 0, Nearest = 1 };

struct LowResolutionParams {
  // (N, 3) int64 on the data's device: the low-resolution grid (D', H', W') of each sample
  // (each >= 1). A sample whose low size equals its size comes back unchanged (converted).
  const int64_t* low_size = nullptr;
  LowresUpsample upsample = LowresUpsample::Trilinear;
  bool align_corners = false;  // of the trilinear upsampling (torch's meaning)
};

// out = interpolate(interpolate(in, size=low, mode="nearest"), size=in's size, mode=upsample,
// align_corners) per sample, exactly torch.nn.functional.interpolate's index rules (nearest:
// floor(dst * float(in / out)) with its special cases; linear: area_pixel_compute_source_index
// in float32), but in one pass: each output voxel takes its 8 (or 1) low-resolution taps and
// reads each tap's nearest input voxel. No low-resolution intermediate.
// `in`: any dtype; `out`: float32, float16, bfloat16 or float64, same N, C, D, H, W and device,
// must not overlap `in`. Math in float32 (MONAI casts to float32 first). CUDA: one launch on
// `stream`, no host synchronisation.
void simulate_low_resolution(const VolumeView& in, const VolumeView& out,
                             const LowResolutionParams& params, cudaStream_t stream = nullptr);

}  // namespace voxaug
