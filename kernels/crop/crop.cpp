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
void pos_neg_crop_centers_cuda(const PosNegParams& p, int64_t batch, int64_t* centers, int device,
                               cudaStream_t stream);
#endif
namespace {

// Host fast path of the counting pass: one dense channel of native dtype for the label (and
// the image), the dtype switch outside the voxel loop. Same comparisons as posneg_class
// (values compared in float64).
template <class L, class I>
void count_chunks_dense(const PosNegParams& p, int64_t batch, int64_t* counts) {
  const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < batch * p.chunks; ++t) {
    const int64_t n = t / p.chunks, chunk = t % p.chunks;
    const int64_t begin = chunk * kPosNegChunk, end = std::min(voxels, begin + kPosNegChunk);
    const L* lab = static_cast<const L*>(p.label) + n * p.label_stride[0];
    const I* img = p.image ? static_cast<const I*>(p.image) + n * p.image_stride[0] : nullptr;
    // Native comparisons (x > 0 on L equals (double)x > 0; the image threshold stays a float64
    // comparison) and 32-bit sums within a chunk, so the loops vectorise.
    int32_t fg = 0, bg = 0;
    const int32_t len = static_cast<int32_t>(end - begin);
    const L* lp = lab + begin;
    if (img == nullptr) {
      for (int32_t v = 0; v < len; ++v) fg += static_cast<int32_t>(lp[v] > L(0));
      bg = len - fg;
    } else {
      const I* ip = img + begin;
      for (int32_t v = 0; v < len; ++v) {
        const int32_t cand = static_cast<double>(ip[v]) > p.image_threshold;
        const int32_t f = lp[v] > L(0);
        fg += cand & f;
        bg += cand & (f ^ 1);
      }
    }
    counts[2 * t] = fg;
    counts[2 * t + 1] = bg;
  }
}

// One channel whose voxels are dense in the params' order: voxel v sits at offset v.
bool dense_one_channel(const PosNegParams& p, int64_t channels, const int64_t* stride) {
  const int* q = p.perm;
  return channels == 1 && stride[2 + q[2]] == 1 && stride[2 + q[1]] == p.size[q[2]] &&
         stride[2 + q[0]] == p.size[q[1]] * p.size[q[2]];
}

// Calls fn(T{}) for the native dtypes; false for float16 / bfloat16.
template <class Fn>
bool visit_native(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float64: fn(double{}); return true;
    case DType::Float32: fn(float{}); return true;
    case DType::UInt8: fn(uint8_t{}); return true;
    case DType::Int16: fn(int16_t{}); return true;
    case DType::Int32: fn(int32_t{}); return true;
    case DType::Int64: fn(int64_t{}); return true;
    default: return false;
  }
}

// Counts of every (sample, chunk): the typed dense loop where it applies, else per voxel.
void count_chunks_cpu(const PosNegParams& p, int64_t batch, int64_t* counts) {
  bool done = false;
  if (dense_one_channel(p, p.label_channels, p.label_stride) &&
      (p.image == nullptr || dense_one_channel(p, p.image_channels, p.image_stride))) {
    visit_native(p.label_dtype, [&](auto l) {
      using L = decltype(l);
      if (p.image == nullptr) {
        count_chunks_dense<L, float>(p, batch, counts);  // I unused without an image
        done = true;
        return;
      }
      done = visit_native(p.image_dtype,
                          [&](auto i) { count_chunks_dense<L, decltype(i)>(p, batch, counts); });
    });
  }
  if (done) return;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < batch * p.chunks; ++t)
    posneg_count_chunk(p, t / p.chunks, t % p.chunks, counts + 2 * t);
}

}  // namespace
}  // namespace detail

void pos_neg_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                          double pos_ratio, int num_samples, const int64_t spatial_size[3],
                          uint64_t seed, int64_t first_sample, int64_t* centers,
                          cudaStream_t stream) {
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(label.shape[a] >= 0, "label sizes must be >= 0");
  VOXAUG_EXPECTS(label.shape[1] >= 1, "label must have at least one channel");
  VOXAUG_EXPECTS(num_samples >= 1, "num_samples must be >= 1, got " + std::to_string(num_samples));
  VOXAUG_EXPECTS(
      pos_ratio >= 0.0 && pos_ratio <= 1.0,
      "pos_ratio = pos / (pos + neg) must be in [0, 1], got " + std::to_string(pos_ratio));
  VOXAUG_EXPECTS(first_sample >= 0 && first_sample + label.shape[0] <= (int64_t(1) << 32),
                 "first_sample + batch must be in [0, 2^32]");
  detail::PosNegParams p{};
  p.label = label.data;
  p.label_dtype = label.dtype;
  p.label_channels = label.shape[1];
  for (int a = 0; a < 5; ++a) p.label_stride[a] = label.strides[a];
  for (int a = 0; a < 3; ++a) {
    p.size[a] = label.shape[a + 2];
    VOXAUG_EXPECTS(spatial_size[a] >= 1 && spatial_size[a] <= p.size[a],
                   "spatial_size must be in [1, the label's size] per axis (allow_smaller is the "
                   "caller's), got " +
                       std::to_string(spatial_size[a]) + " for size " + std::to_string(p.size[a]));
    p.crop[a] = spatial_size[a];
  }
  if (image != nullptr) {
    VOXAUG_EXPECTS(image->shape[0] == label.shape[0] && image->shape[2] == label.shape[2] &&
                       image->shape[3] == label.shape[3] && image->shape[4] == label.shape[4],
                   "image must have the label's batch and spatial size: " + image->describe() +
                       " vs " + label.describe());
    VOXAUG_EXPECTS(image->device == label.device && image->device_index == label.device_index,
                   "image must be on the label's device");
    VOXAUG_EXPECTS(!std::isnan(image_threshold), "image_threshold must not be NaN");
    p.image = image->data;
    p.image_dtype = image->dtype;
    p.image_channels = image->shape[1];
    for (int a = 0; a < 5; ++a) p.image_stride[a] = image->strides[a];
  }
  p.image_threshold = image_threshold;
  p.pos_ratio = pos_ratio;
  p.num_samples = num_samples;
  p.seed = seed;
  p.first_sample = static_cast<uint32_t>(first_sample);
  const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
  p.chunks = (voxels + detail::kPosNegChunk - 1) / detail::kPosNegChunk;
  // Scan order: the label's axes by decreasing |stride| (stable: raster order on ties).
  for (int a = 0; a < 3; ++a) p.perm[a] = a;
  std::stable_sort(p.perm, p.perm + 3, [&](int a, int b) {
    return std::abs(label.strides[a + 2]) > std::abs(label.strides[b + 2]);
  });
  const int64_t batch = label.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(centers != nullptr, "centers must not be null");
  if (label.device == Device::CPU) {
    std::vector<int64_t> counts(static_cast<size_t>(batch * p.chunks * 2));
    detail::count_chunks_cpu(p, batch, counts.data());
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < batch * num_samples; ++t)
      detail::posneg_select(p, counts.data(), t / num_samples, static_cast<int>(t % num_samples),
                            centers + 3 * t);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(label.data, label.device_index, "label");
  detail::check_device_pointer(centers, label.device_index, "centers");
  detail::pos_neg_crop_centers_cuda(p, batch, centers, label.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

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
