// voxaug: per-voxel rule of the foreground bounding box, shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/types.h"

namespace voxaug::detail {

constexpr int kMaxBBoxChannels = 16;

struct BBoxParams {
  const void* data;
  DType dtype;
  int64_t size[3];    // D, H, W
  int64_t stride[5];  // N, C, D, H, W
  double threshold;
  int num_channels;
  int64_t channels[kMaxBBoxChannels];
};

VOXAUG_HD VOXAUG_FORCEINLINE bool bbox_foreground(const BBoxParams& p, int64_t n, int64_t d,
                                                  int64_t h, int64_t w) {
  const int64_t base = n * p.stride[0] + d * p.stride[2] + h * p.stride[3] + w * p.stride[4];
  bool fg = false;
  for (int k = 0; k < p.num_channels; ++k)
    fg = fg || load_dyn<double>(p.data, p.dtype, base + p.channels[k] * p.stride[1]) > p.threshold;
  return fg;
}

}  // namespace voxaug::detail
