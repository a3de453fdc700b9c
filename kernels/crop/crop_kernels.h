// voxaug: per-voxel rule of the foreground bounding box, shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>
#include <string>

#include "voxaug/crop.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/philox.h"
#include "voxaug/error.h"
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

// ---- crop-centre samplers (classes, weights, uniform) ----
// Every sampler scans the voxels in chunks of kCenterChunk in the data's memory order (axes by
// decreasing stride; any fixed order draws correctly, CPU and CUDA share this one), so a
// Fortran-ordered volume is read contiguously too.
constexpr int64_t kCenterChunk = 4096;
constexpr int kWeightLanes = 256;  // the fixed summation order of a chunk's weights (see below)

enum class CenterRule : int { Classes = 0, Weights = 1, Uniform = 2 };

struct CenterParams {
  CenterRule rule;
  CropLabelForm form;
  const void* label;  // the label (Classes) or the weight map (Weights)
  DType label_dtype;
  int64_t label_channels;
  int64_t label_stride[5];
  const void* image;  // null: no image mask
  DType image_dtype;
  int64_t image_channels;
  int64_t image_stride[5];
  double image_threshold;
  int num_classes;
  const double* ratios;  // num_classes, in the data's memory space
  int64_t size[3];       // D, H, W
  int64_t lo[3], hi[3];  // the candidate region
  bool correct;          // MONAI correct_crop_centers for a crop of `crop`
  int64_t crop[3];
  bool shift_negative;
  int num_samples;
  uint64_t seed;
  uint32_t first_sample;
  uint64_t first_crop;
  int64_t chunks;  // ceil(D * H * W / kCenterChunk)
  int perm[3];     // scan order: perm[0] slowest
};

// Spatial index (d, h, w) of the v-th voxel in the params' voxel order.
VOXAUG_HD VOXAUG_FORCEINLINE void center_voxel(const CenterParams& p, int64_t v, int64_t idx[3]) {
  const int64_t s2 = p.size[p.perm[2]], s1 = p.size[p.perm[1]];
  idx[p.perm[2]] = v % s2;
  idx[p.perm[1]] = (v / s2) % s1;
  idx[p.perm[0]] = v / (s2 * s1);
}

VOXAUG_HD VOXAUG_FORCEINLINE int64_t center_voxels(const CenterParams& p) {
  return p.size[0] * p.size[1] * p.size[2];
}

VOXAUG_HD VOXAUG_FORCEINLINE bool center_in_region(const CenterParams& p, const int64_t idx[3]) {
  return idx[0] >= p.lo[0] && idx[0] < p.hi[0] && idx[1] >= p.lo[1] && idx[1] < p.hi[1] &&
         idx[2] >= p.lo[2] && idx[2] < p.hi[2];
}

VOXAUG_HD VOXAUG_FORCEINLINE int64_t center_label_offset(const CenterParams& p, int64_t n,
                                                         const int64_t idx[3]) {
  return n * p.label_stride[0] + idx[0] * p.label_stride[2] + idx[1] * p.label_stride[3] +
         idx[2] * p.label_stride[4];
}

// Foreground / Argmax: the voxel's class, or -1 (no class).
VOXAUG_HD VOXAUG_FORCEINLINE int center_class(const CenterParams& p, int64_t n,
                                              const int64_t idx[3]) {
  const int64_t base = center_label_offset(p, n, idx);
  if (p.form == CropLabelForm::Foreground) {
    // Several channels: one-hot, channel 0 the background (MONAI drops it).
    bool fg = false;
    for (int64_t c = p.label_channels > 1 ? 1 : 0; c < p.label_channels; ++c)
      fg = fg || load_dyn<double>(p.label, p.label_dtype, base + c * p.label_stride[1]) > 0.0;
    return fg ? 0 : 1;
  }
  const double x = load_dyn<double>(p.label, p.label_dtype, base);
  if (!(x >= 0.0 && x < static_cast<double>(p.num_classes))) return -1;
  const int c = static_cast<int>(x);
  return static_cast<double>(c) == x ? c : -1;
}

// Whether the voxel passes the image (none, or any image channel > image_threshold: a float64
// compare).
VOXAUG_HD VOXAUG_FORCEINLINE bool center_image_passes(const CenterParams& p, int64_t n,
                                                      const int64_t idx[3]) {
  if (p.image == nullptr) return true;
  const int64_t base = n * p.image_stride[0] + idx[0] * p.image_stride[2] +
                       idx[1] * p.image_stride[3] + idx[2] * p.image_stride[4];
  bool any = false;
  for (int64_t c = 0; c < p.image_channels; ++c)
    any = any || load_dyn<double>(p.image, p.image_dtype, base + c * p.image_stride[1]) >
                     p.image_threshold;
  return any;
}

// A voxel of class `cls` (center_class's, or -1 where that is not known) is a candidate: in the
// region and passing the image; in the Foreground form the image restricts the background only
// (MONAI's map_binary_to_indices: every foreground voxel is a positive candidate).
VOXAUG_HD VOXAUG_FORCEINLINE bool center_candidate(const CenterParams& p, int64_t n,
                                                   const int64_t idx[3], int cls = -1) {
  if (!center_in_region(p, idx)) return false;
  if (p.image == nullptr) return true;
  if (p.form == CropLabelForm::Foreground && (cls < 0 ? center_class(p, n, idx) : cls) == 0)
    return true;
  return center_image_passes(p, n, idx);
}

// Is the (candidate) voxel in class c?
VOXAUG_HD VOXAUG_FORCEINLINE bool center_in_class(const CenterParams& p, int64_t n,
                                                  const int64_t idx[3], int c) {
  if (p.form == CropLabelForm::OneHot)
    return load_dyn<double>(p.label, p.label_dtype,
                            center_label_offset(p, n, idx) + c * p.label_stride[1]) != 0.0;
  return center_class(p, n, idx) == c;
}

// Weight of a region voxel: channel 0, shifted; negatives count 0 unless shift_negative.
VOXAUG_HD VOXAUG_FORCEINLINE double center_weight(const CenterParams& p, int64_t n,
                                                  const int64_t idx[3], double shift) {
  const double w = load_dyn<double>(p.label, p.label_dtype, center_label_offset(p, n, idx)) - shift;
  return (!p.shift_negative && w < 0.0) ? 0.0 : w;
}

VOXAUG_HD VOXAUG_FORCEINLINE int64_t chunk_end(const CenterParams& p, int64_t chunk) {
  const int64_t e = (chunk + 1) * kCenterChunk, v = center_voxels(p);
  return e < v ? e : v;
}

// The classes voxel v is a candidate of: add(c) for each (one-hot: every channel != 0; the
// other forms: its class, the label read once).
template <class Add>
VOXAUG_HD VOXAUG_FORCEINLINE void center_voxel_classes(const CenterParams& p, int64_t n, int64_t v,
                                                       Add&& add) {
  int64_t idx[3];
  center_voxel(p, v, idx);
  if (p.form == CropLabelForm::OneHot) {
    if (!center_candidate(p, n, idx)) return;
    const int64_t base = center_label_offset(p, n, idx);
    for (int c = 0; c < p.num_classes; ++c)
      if (load_dyn<double>(p.label, p.label_dtype, base + c * p.label_stride[1]) != 0.0) add(c);
    return;
  }
  if (!center_in_region(p, idx)) return;
  const int c = center_class(p, n, idx);
  if (c >= 0 && center_candidate(p, n, idx, c)) add(c);
}

// Class counts of one chunk (generic path): hist[c] += candidates of class c.
VOXAUG_HD inline void center_count_voxel(const CenterParams& p, int64_t n, int64_t v,
                                         int64_t* hist) {
  center_voxel_classes(p, n, v, [&](int c) { hist[c] += 1; });
}

// The weights of a chunk are summed in a fixed order that a CUDA block reproduces: lane l
// (of kWeightLanes) sums voxels begin + l, begin + l + 256, ... in sequence; each warp of 32
// lanes combines by the xor butterfly (offsets 16, 8, 4, 2, 1); the 8 warp sums are added in
// order. Sums are in float64.
VOXAUG_HD inline double weight_lane_sum(const CenterParams& p, int64_t n, int64_t chunk, int lane,
                                        double shift, double* min_region, double* min_all) {
  double acc = 0.0, mr = *min_region, ma = *min_all;
  const int64_t end = chunk_end(p, chunk);
  for (int64_t v = chunk * kCenterChunk + lane; v < end; v += kWeightLanes) {
    int64_t idx[3];
    center_voxel(p, v, idx);
    const double raw = load_dyn<double>(p.label, p.label_dtype, center_label_offset(p, n, idx));
    ma = raw < ma ? raw : ma;
    if (!center_in_region(p, idx)) continue;
    mr = raw < mr ? raw : mr;
    acc += center_weight(p, n, idx, shift);
  }
  *min_region = mr;
  *min_all = ma;
  return acc;
}

// Host emulation of the CUDA block combination of the 256 lane sums.
inline double weight_combine_lanes(const double* lanes) {
  double warp_sum[kWeightLanes / 32];
  for (int w = 0; w < kWeightLanes / 32; ++w) {
    double a[32], b[32];
    for (int l = 0; l < 32; ++l) a[l] = lanes[32 * w + l];
    for (int off = 16; off > 0; off >>= 1) {
      for (int l = 0; l < 32; ++l) b[l] = a[l] + a[l ^ off];
      for (int l = 0; l < 32; ++l) a[l] = b[l];
    }
    warp_sum[w] = a[0];
  }
  double s = warp_sum[0];
  for (int w = 1; w < kWeightLanes / 32; ++w) s += warp_sum[w];
  return s;
}

// MONAI correct_crop_centers: valid centres in [crop // 2, size + 1 - crop / 2) (the end
// truncated to an integer; one wider when the range is empty).
VOXAUG_HD VOXAUG_FORCEINLINE void center_correct(const CenterParams& p, const int64_t idx[3],
                                                 int64_t* center) {
  for (int a = 0; a < 3; ++a) {
    if (!p.correct) {
      center[a] = idx[a];
      continue;
    }
    const int64_t lo = p.crop[a] / 2;
    int64_t hi = static_cast<int64_t>(static_cast<double>(p.size[a] + 1) -
                                      static_cast<double>(p.crop[a]) / 2.0);
    if (lo == hi) hi += 1;
    int64_t c = idx[a] < lo ? lo : idx[a];
    c = c < hi - 1 ? c : hi - 1;
    center[a] = c;
  }
}

VOXAUG_HD VOXAUG_FORCEINLINE U32x4 center_draw(const CenterParams& p, int64_t n, int k) {
  return philox_block(p.seed, p.first_crop + static_cast<uint64_t>(k),
                      p.first_sample + static_cast<uint32_t>(n), PhiloxStream::Sample);
}

// Uniform integer in [0, range) from 32 random bits (range < 2^32).
VOXAUG_HD VOXAUG_FORCEINLINE int64_t center_randint(uint32_t r, int64_t range) {
  return static_cast<int64_t>((static_cast<uint64_t>(r) * static_cast<uint64_t>(range)) >> 32);
}

// Uniform rule: each axis uniform in [lo, hi).
VOXAUG_HD VOXAUG_FORCEINLINE void uniform_select(const CenterParams& p, int64_t n, int k,
                                                 int64_t* center) {
  const U32x4 r = center_draw(p, n, k);
  const uint32_t rs[3] = {r.x, r.y, r.z};
  for (int a = 0; a < 3; ++a) center[a] = p.lo[a] + center_randint(rs[a], p.hi[a] - p.lo[a]);
}

// Classes rule, crop k of sample n, from the chunk counts (counts[(n * chunks + chunk) * K + c])
// and the per-class totals (totals[n * K + c]): Philox draws (class, rank), the rank-th candidate
// of the class in the params' order, then the optional correction.
VOXAUG_HD inline void class_select(const CenterParams& p, const int64_t* counts,
                                   const int64_t* totals, int64_t n, int k, int64_t* center) {
  const int K = p.num_classes;
  const int64_t* tn = totals + n * K;
  const U32x4 r = center_draw(p, n, k);
  const double u_cls = uniform01_f64(r.x, r.y), u_rank = uniform01_f64(r.z, r.w);
  double sum = 0.0;
  int present = 0;
  for (int c = 0; c < K; ++c) {
    if (tn[c] > 0) {
      sum += p.ratios[c];
      ++present;
    }
  }
  int64_t idx[3];
  for (int a = 0; a < 3; ++a) idx[a] = p.lo[a] + (p.hi[a] - p.lo[a]) / 2;  // no candidate at all
  if (present > 0) {
    int cls = -1;
    if (sum > 0.0) {
      const double target = fmul(u_cls, sum);  // fmul / fsub: never contracted (CPU == CUDA)
      double cum = 0.0;
      for (int c = 0; c < K; ++c) {
        if (tn[c] <= 0 || !(p.ratios[c] > 0.0)) continue;
        cum += p.ratios[c];
        cls = c;  // the last positive class if rounding leaves target >= cum
        if (target < cum) break;
      }
    } else {  // no class with a positive ratio is present: a present class, uniformly
      int j = static_cast<int>(fmul(u_cls, static_cast<double>(present)));
      j = j < present ? j : present - 1;
      for (int c = 0; c < K; ++c)
        if (tn[c] > 0 && j-- == 0) {
          cls = c;
          break;
        }
    }
    int64_t rank = static_cast<int64_t>(fmul(u_rank, static_cast<double>(tn[cls])));
    if (rank >= tn[cls]) rank = tn[cls] - 1;
    const int64_t* cn = counts + n * p.chunks * K;
    int64_t chunk = 0;
    while (chunk + 1 < p.chunks && rank >= cn[chunk * K + cls])
      rank -= cn[chunk * K + cls], ++chunk;
    const int64_t end = chunk_end(p, chunk);
    for (int64_t v = chunk * kCenterChunk; v < end; ++v) {
      int64_t vi[3];
      center_voxel(p, v, vi);
      if (!center_candidate(p, n, vi) || !center_in_class(p, n, vi, cls)) continue;
      idx[0] = vi[0], idx[1] = vi[1], idx[2] = vi[2];
      if (rank-- == 0) break;
    }
  }
  center_correct(p, idx, center);
}

// Weights rule, crop k of sample n, from the chunk sums (sums[n * chunks + chunk]) and
// stats[n * 3 + {0: total, 1: shift}]: the first voxel whose running weight exceeds
// u * total (MONAI's searchsorted(cdf, u * total, right=True)).
VOXAUG_HD inline void weighted_select(const CenterParams& p, const double* sums,
                                      const double* stats, int64_t n, int k, int64_t* center) {
  const double total = stats[3 * n], shift = stats[3 * n + 1];
  const U32x4 r = center_draw(p, n, k);
  const double target = fmul(uniform01_f64(r.x, r.y), total);
  const double* sn = sums + n * p.chunks;
  double cum = 0.0, before = 0.0;
  int64_t chunk = -1;
  if (total > 0.0 && total - total == 0.0) {
    for (int64_t c = 0; c < p.chunks; ++c) {
      if (!(sn[c] > 0.0)) continue;
      chunk = c;
      before = cum;
      if (target < cum + sn[c]) break;
      cum += sn[c];
    }
  }
  if (chunk < 0) {  // total zero, negative, NaN or inf: uniform in the region (MONAI)
    uniform_select(p, n, k, center);
    return;
  }
  const double local = fsub(target, before);
  const int64_t end = chunk_end(p, chunk);
  double acc = 0.0;
  int64_t idx[3] = {p.lo[0], p.lo[1], p.lo[2]};
  for (int64_t v = chunk * kCenterChunk; v < end; ++v) {
    int64_t vi[3];
    center_voxel(p, v, vi);
    if (!center_in_region(p, vi)) continue;
    const double w = center_weight(p, n, vi, shift);
    if (!(w > 0.0)) continue;
    idx[0] = vi[0], idx[1] = vi[1], idx[2] = vi[2];  // the last positive one if rounding
    acc += w;
    if (acc > local) break;
  }
  center[0] = idx[0], center[1] = idx[1], center[2] = idx[2];
}

// ---- batched patch extraction ----
// Calls fn(T{}) with T the unsigned integer of `elem_size` bytes: the copies move bits, so one
// instance per element size serves every dtype.
template <class Fn>
void by_element_size(int64_t elem_size, const char* what, Fn&& fn) {
  switch (elem_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default:
      VOXAUG_FAIL(std::string(what) + ": unsupported element size " + std::to_string(elem_size));
  }
}

struct PatchParams {
  const void* in;
  int64_t channels;
  int64_t stride[5];
  int64_t in_size[3];
  int64_t size[3];
  int64_t per_volume;     // patches per sample
  const int64_t* starts;  // (M * per_volume) x 3 corners; a box starts at corner - offset
  int64_t offset[3];
  void* out;  // dense (M * per_volume, C, size)
};

// Offset of voxel (c, d, h, w) in a box of a volume (stride: C, D, H, W in elements), or -1
// when (d, h, w) lies outside its in_size.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t box_source(const int64_t in_size[3], const int64_t stride[4],
                                                int64_t c, int64_t d, int64_t h, int64_t w) {
  if (d < 0 || d >= in_size[0] || h < 0 || h >= in_size[1] || w < 0 || w >= in_size[2]) return -1;
  return c * stride[0] + d * stride[1] + h * stride[2] + w * stride[3];
}

// Source offset of output element (patch, c, z, y, x), or -1 outside the volume.
VOXAUG_HD VOXAUG_FORCEINLINE int64_t patch_source(const PatchParams& p, int64_t patch, int64_t c,
                                                  int64_t z, int64_t y, int64_t x) {
  const int64_t* s = p.starts + 3 * patch;
  const int64_t o = box_source(p.in_size, p.stride + 1, c, s[0] - p.offset[0] + z,
                               s[1] - p.offset[1] + y, s[2] - p.offset[2] + x);
  return o < 0 ? -1 : (patch / p.per_volume) * p.stride[0] + o;
}

// One patch of gather_patches: its sample (data at element (c, d, h, w) = (0, 0, 0, 0)), the
// sample's spatial size and strides, and the patch's first voxel (start - offset) in it.
struct GatherSource {
  const void* data;
  int64_t in_size[3];
  int64_t stride[4];  // C, D, H, W, in elements
};

// One CUDA launch of gather_patches: up to kGatherPatchesPerLaunch patches, their sources in the
// kernel parameters (3 KiB; the classic 4 KiB parameter limit holds).
struct GatherParams {
  GatherSource src[kGatherPatchesPerLaunch];
  const int64_t* starts;  // this launch's first patch's start (3 int64 per patch)
  int64_t offset[3];
  int64_t channels;
  int64_t size[3];
  void* out;  // this launch's first patch's output
};

// ---- patch aggregation (aggregate_patches) ----
// One patch of an aggregation: where its voxel (0, 0, 0) lands in `out` and the box [lo, hi) of
// the patch that is written, clipped on the host so that start + [lo, hi) lies inside out.
struct AggregatePatch {
  int64_t index;  // the patch's index in `patches`
  int64_t start[3];
  int64_t lo[3], hi[3];
};

// One pass of aggregate_patches over up to kAggregatePatchesPerLaunch patches; [box_lo, box_hi)
// in out's voxels covers all their boxes.
struct AggregateParams {
  AggregatePatch patch[kAggregatePatchesPerLaunch];
  int64_t num_patches;
  const void* patches;
  DType patch_dtype;
  int64_t pstride[5];
  int64_t psize[3];
  const void* weight;  // dense psize[0] x psize[1] x psize[2] of out's dtype, or null (1)
  void* out;
  int64_t ostride[5];
  int64_t channels;
  void* count;  // (1, 1, D, H, W) of out's dtype, or null
  int64_t cstride[5];
  int64_t box_lo[3], box_hi[3];
};

// Kernel parameters within the classic 4 KiB limit (no reliance on CUDA 12.1's larger one).
static_assert(sizeof(GatherParams) <= 4096 && sizeof(AggregateParams) <= 4096,
              "patch tables must fit the kernel parameter space");

// The out voxel (c, d, h, w) of element e of the union box (c slowest, w fastest).
VOXAUG_HD VOXAUG_FORCEINLINE void aggregate_voxel(const AggregateParams& p, int64_t e, int64_t& c,
                                                  int64_t& d, int64_t& h, int64_t& w) {
  const int64_t n0 = p.box_hi[0] - p.box_lo[0], n1 = p.box_hi[1] - p.box_lo[1],
                n2 = p.box_hi[2] - p.box_lo[2];
  w = p.box_lo[2] + e % n2, h = p.box_lo[1] + (e / n2) % n1;
  d = p.box_lo[0] + (e / (n2 * n1)) % n0, c = e / (n2 * n1 * n0);
}

// Patch t's contribution to out voxel (c, d, h, w) when the voxel lies in its box: acc (and
// cnt) updated, true returned.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE bool aggregate_add(const AggregateParams& p, int t, int64_t c,
                                                int64_t d, int64_t h, int64_t w, Acc& acc,
                                                Acc& cnt) {
  const AggregatePatch& q = p.patch[t];
  const int64_t z = d - q.start[0], y = h - q.start[1], x = w - q.start[2];
  if (z < q.lo[0] || z >= q.hi[0] || y < q.lo[1] || y >= q.hi[1] || x < q.lo[2] || x >= q.hi[2])
    return false;
  const Acc v = load_dyn<Acc>(p.patches, p.patch_dtype,
                              q.index * p.pstride[0] + c * p.pstride[1] + z * p.pstride[2] +
                                  y * p.pstride[3] + x * p.pstride[4]);
  if (p.weight != nullptr) {
    const Acc wv = static_cast<const Acc*>(p.weight)[(z * p.psize[1] + y) * p.psize[2] + x];
    acc = fadd(acc, fmul(v, wv));
    cnt = fadd(cnt, wv);
  } else {
    acc = fadd(acc, v);
    cnt = fadd(cnt, Acc(1));
  }
  return true;
}

}  // namespace voxaug::detail
