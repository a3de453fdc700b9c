// voxaug: per-voxel rule of the foreground bounding box, shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/detail/philox.h"
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

// ---- pos / neg crop centres ----
constexpr int64_t kPosNegChunk = 4096;  // voxels per counting chunk

struct PosNegParams {
  const void* label;
  DType label_dtype;
  int64_t label_channels;
  int64_t label_stride[5];
  const void* image;  // null: every voxel is a candidate
  DType image_dtype;
  int64_t image_channels;
  int64_t image_stride[5];
  double image_threshold;
  int64_t size[3];  // D, H, W
  int64_t crop[3];  // spatial_size
  double pos_ratio;
  int num_samples;
  uint64_t seed;
  uint32_t first_sample;
  int64_t chunks;  // ceil(D * H * W / kPosNegChunk)
  // The voxel order of the counts and ranks: the label's memory order (axes by decreasing
  // stride), so a Fortran-ordered volume is scanned contiguously too. Any fixed order draws
  // uniformly; CPU and CUDA share this one.
  int perm[3];
};

// Spatial index (d, h, w) of the v-th voxel in the params' voxel order.
VOXAUG_HD VOXAUG_FORCEINLINE void posneg_voxel(const PosNegParams& p, int64_t v, int64_t idx[3]) {
  const int64_t s2 = p.size[p.perm[2]], s1 = p.size[p.perm[1]];
  idx[p.perm[2]] = v % s2;
  idx[p.perm[1]] = (v / s2) % s1;
  idx[p.perm[0]] = v / (s2 * s1);
}

// 0: not a candidate, 1: foreground, 2: background, for voxel v (the params' order) of sample n.
VOXAUG_HD VOXAUG_FORCEINLINE int posneg_class(const PosNegParams& p, int64_t n, int64_t v) {
  int64_t idx[3];
  posneg_voxel(p, v, idx);
  const int64_t d = idx[0], h = idx[1], w = idx[2];
  if (p.image != nullptr) {
    const int64_t base = n * p.image_stride[0] + d * p.image_stride[2] + h * p.image_stride[3] +
                         w * p.image_stride[4];
    bool any = false;
    for (int64_t c = 0; c < p.image_channels; ++c)
      any = any || load_dyn<double>(p.image, p.image_dtype, base + c * p.image_stride[1]) >
                       p.image_threshold;
    if (!any) return 0;
  }
  const int64_t base =
      n * p.label_stride[0] + d * p.label_stride[2] + h * p.label_stride[3] + w * p.label_stride[4];
  bool fg = false;
  for (int64_t c = 0; c < p.label_channels; ++c)
    fg = fg || load_dyn<double>(p.label, p.label_dtype, base + c * p.label_stride[1]) > 0.0;
  return fg ? 1 : 2;
}

// Counts of chunk `chunk` of sample n: (foreground, background).
VOXAUG_HD VOXAUG_FORCEINLINE void posneg_count_chunk(const PosNegParams& p, int64_t n,
                                                     int64_t chunk, int64_t out[2]) {
  const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
  const int64_t end = (chunk + 1) * kPosNegChunk < voxels ? (chunk + 1) * kPosNegChunk : voxels;
  int64_t fg = 0, bg = 0;
  for (int64_t v = chunk * kPosNegChunk; v < end; ++v) {
    const int cls = posneg_class(p, n, v);
    fg += cls == 1;
    bg += cls == 2;
  }
  out[0] = fg;
  out[1] = bg;
}

// Crop k of sample n from the chunk counts (counts[(n * chunks + chunk) * 2 + {0, 1}]):
// Philox draws (set, rank), the rank-th voxel of the set in the params' order, MONAI's
// correct_crop_centers. Writes 3 int64 to center.
VOXAUG_HD inline void posneg_select(const PosNegParams& p, const int64_t* counts, int64_t n, int k,
                                    int64_t* center) {
  const int64_t* cn = counts + n * p.chunks * 2;
  int64_t total[2] = {0, 0};
  for (int64_t c = 0; c < p.chunks; ++c) {
    total[0] += cn[2 * c];
    total[1] += cn[2 * c + 1];
  }
  const U32x4 r = philox_block(p.seed, static_cast<uint64_t>(k),
                               p.first_sample + static_cast<uint32_t>(n), PhiloxStream::Sample);
  const double u_set = uniform01_f64(r.x, r.y), u_rank = uniform01_f64(r.z, r.w);
  int64_t idx[3] = {p.size[0] / 2, p.size[1] / 2, p.size[2] / 2};  // no candidate at all
  if (total[0] + total[1] > 0) {
    int set = u_set < p.pos_ratio ? 0 : 1;
    if (total[0] == 0) set = 1;
    if (total[1] == 0) set = 0;
    int64_t rank = static_cast<int64_t>(u_rank * static_cast<double>(total[set]));
    if (rank >= total[set]) rank = total[set] - 1;
    int64_t chunk = 0;
    while (rank >= cn[2 * chunk + set]) rank -= cn[2 * chunk + set], ++chunk;
    const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
    int64_t v = chunk * kPosNegChunk;
    for (;; ++v) {
      if (v >= voxels) break;  // unreachable: the counts cover the chunk
      if (posneg_class(p, n, v) == set + 1) {
        if (rank == 0) break;
        --rank;
      }
    }
    posneg_voxel(p, v, idx);
  }
  // MONAI correct_crop_centers: valid centres in [crop // 2, size + 1 - crop / 2) (the end
  // truncated to an integer; one wider when the range is empty).
  for (int a = 0; a < 3; ++a) {
    const int64_t lo = p.crop[a] / 2;
    int64_t hi = static_cast<int64_t>(static_cast<double>(p.size[a] + 1) -
                                      static_cast<double>(p.crop[a]) / 2.0);
    if (lo == hi) hi += 1;
    int64_t c = idx[a] < lo ? lo : idx[a];
    c = c < hi - 1 ? c : hi - 1;
    center[a] = c;
  }
}

}  // namespace voxaug::detail
