// voxaug: crop family -- foreground bounding box (validation, CPU backend, routing to CUDA).
#include "voxaug/crop.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "../common/device.h"
#include "crop_kernels.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void foreground_bbox_cuda(const BBoxParams& p, int64_t batch, int64_t* box, int device,
                          cudaStream_t stream);
#endif
}  // namespace detail

void foreground_bbox(const VolumeView& in, double threshold, const int64_t* channels,
                     int num_channels, int64_t* box, cudaStream_t stream) {
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(in.shape[a] >= 0, "image sizes must be >= 0");
  VOXAUG_EXPECTS(!std::isnan(threshold), "threshold must not be NaN");
  detail::BBoxParams p{};
  p.data = in.data;
  p.dtype = in.dtype;
  for (int a = 0; a < 3; ++a) p.size[a] = in.shape[a + 2];
  for (int a = 0; a < 5; ++a) p.stride[a] = in.strides[a];
  p.threshold = threshold;
  if (channels == nullptr) {
    VOXAUG_EXPECTS(in.shape[1] <= detail::kMaxBBoxChannels,
                   "foreground_bbox: at most " + std::to_string(detail::kMaxBBoxChannels) +
                       " channels (select some with channel_indices), got " +
                       std::to_string(in.shape[1]));
    p.num_channels = static_cast<int>(in.shape[1]);
    for (int k = 0; k < p.num_channels; ++k) p.channels[k] = k;
  } else {
    VOXAUG_EXPECTS(num_channels >= 1 && num_channels <= detail::kMaxBBoxChannels,
                   "channel_indices must hold 1 to " + std::to_string(detail::kMaxBBoxChannels) +
                       " channels, got " + std::to_string(num_channels));
    p.num_channels = num_channels;
    for (int k = 0; k < num_channels; ++k) {
      VOXAUG_EXPECTS(channels[k] >= 0 && channels[k] < in.shape[1],
                     "channel_indices[" + std::to_string(k) + "] = " + std::to_string(channels[k]) +
                         " is not a channel of the image (C = " + std::to_string(in.shape[1]) +
                         ")");
      p.channels[k] = channels[k];
    }
  }
  const int64_t batch = in.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(box != nullptr, "box must not be null");
  if (in.device == Device::CPU) {
    const int64_t D = p.size[0], H = p.size[1], W = p.size[2];
    // Per (sample, slice): the slice's extent in h and w, then a fixed-order reduction.
    std::vector<int64_t> slice(static_cast<size_t>(batch * D * 4));
#pragma omp parallel for schedule(static)
    for (int64_t nd = 0; nd < batch * D; ++nd) {
      const int64_t n = nd / D, d = nd % D;
      int64_t h0 = INT64_MAX, h1 = -1, w0 = INT64_MAX, w1 = -1;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          if (detail::bbox_foreground(p, n, d, h, w)) {
            h0 = std::min(h0, h), h1 = std::max(h1, h);
            w0 = std::min(w0, w), w1 = std::max(w1, w);
          }
      int64_t* s = &slice[static_cast<size_t>(4 * nd)];
      s[0] = h0, s[1] = h1, s[2] = w0, s[3] = w1;
    }
    for (int64_t n = 0; n < batch; ++n) {
      int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, hi[3] = {-1, -1, -1};
      for (int64_t d = 0; d < D; ++d) {
        const int64_t* s = &slice[static_cast<size_t>(4 * (n * D + d))];
        if (s[1] < 0) continue;
        lo[0] = std::min(lo[0], d), hi[0] = std::max(hi[0], d);
        lo[1] = std::min(lo[1], s[0]), hi[1] = std::max(hi[1], s[1]);
        lo[2] = std::min(lo[2], s[2]), hi[2] = std::max(hi[2], s[3]);
      }
      int64_t* b = box + 6 * n;
      for (int a = 0; a < 3; ++a) {
        b[a] = hi[0] < 0 ? 0 : lo[a];
        b[a + 3] = hi[0] < 0 ? 0 : hi[a] + 1;
      }
    }
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(in.data, in.device_index, "image");
  detail::check_device_pointer(box, in.device_index, "box");
  detail::foreground_bbox_cuda(p, batch, box, in.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
