// voxaug: the window family -- sliding-window inference on the device (MONAI's
// sliding_window_inference, monai/inferers/utils.py, with its numerics).
//
// The image (N, C, D, H, W) is conceptually padded to max(size, roi) per axis (diff // 2
// before, the rest after) and covered by a grid of roi-sized windows, MONAI's
// dense_patch_slices: per axis interval = roi if roi == padded size else max(1, int(roi * (1 -
// overlap))); window k starts at k * interval, the last one moved back to end at the border.
// Windows are numbered image-major, then d, h, w (last axis fastest) -- MONAI's order. A caller
// runs, for each batch of consecutive windows:
//   window_gather  -> one (B, C, roi) tensor of window data, padding applied, in one launch;
//   predictor      -> (B, K, roi) outputs (any float dtype);
//   window_stitch  -> adds output * importance map into the (N, K, padded) accumulator, in one
//                     launch, each voxel's contributions in window order (no atomics), so the
//                     float32 result equals MONAI's bit for bit;
// then window_count (the sum of the importance map over all windows; depends only on the
// layout, so callers cache it) and window_finalize (accumulator / count, crop of the padding,
// cast or channel argmax) once -- or, with StitchFuse, neither the zero fill nor the final pass.
// Nothing here synchronises the host or allocates.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// Padding of the image where it is smaller than the window (torch.nn.functional.pad modes).
enum class WindowPad : int { Constant = 0, Reflect = 1, Replicate = 2, Circular = 3 };

// The window grid over one image. All sizes in voxels, axis order d, h, w.
struct WindowLayout {
  int64_t size[3] = {0, 0, 0};        // image size
  int64_t padded[3] = {0, 0, 0};      // max(size, roi)
  int64_t pad_before[3] = {0, 0, 0};  // (padded - size) // 2
  int64_t roi[3] = {0, 0, 0};
  int64_t interval[3] = {0, 0, 0};
  int64_t count[3] = {0, 0, 0};  // windows per axis

  VOXAUG_HD int64_t windows_per_image() const { return count[0] * count[1] * count[2]; }
  // Start of window k along `axis`, in padded coordinates.
  VOXAUG_HD int64_t start(int axis, int64_t k) const {
    const int64_t s = k * interval[axis];
    const int64_t over = s + roi[axis] - padded[axis];
    return over > 0 ? s - over : s;
  }
};

// The layout of MONAI's sliding_window_inference for an image of `size` (d, h, w) and windows of
// `roi` (each >= 1) with per-axis `overlap` in [0, 1). Throws voxaug::Error naming the argument
// on bad values.
WindowLayout window_layout(const int64_t size[3], const int64_t roi[3], const double overlap[3]);

// Copies windows [first_window, first_window + B) of `image` ((N, C, size), any strides, any
// float dtype) into `out` ((B, C, roi), dense, float dtype; converted as torch's .to()), padding
// applied as `pad` with value `cval` where a window reaches outside the image. B = out.shape[0]
// must not run past N * windows_per_image.
void window_gather(const VolumeView& image, const WindowLayout& layout, int64_t first_window,
                   WindowPad pad, double cval, const VolumeView& out,
                   cudaStream_t stream = nullptr);

// acc[n, k, window voxel] += round_P(pred * weight) for windows [first_window, first_window + B),
// each voxel's contributions added in window order (MONAI's `patch *= w; out[slice] += patch`:
// the product rounded to the predictor's dtype P, the sum computed in the wider of P and the
// accumulator's dtype and rounded to the accumulator's). `acc`: (N, K, padded), dense, float32
// or float64. `pred`: (B, K, roi), any strides, any float dtype. `weight`: the importance map,
// roi voxels, dense, acc's dtype, on acc's device; null for constant weights (the product is
// then the prediction itself, as MONAI's multiplication by 1).
void window_stitch(const VolumeView& acc, const VolumeView& pred, const void* weight,
                   const WindowLayout& layout, int64_t first_window, cudaStream_t stream = nullptr);

// A pass that stitches every window of the batch exactly once, in window order, can fold the
// accumulator's zero fill and the final division into the stitch:
// - first_store: where a window is a voxel's first (the lowest-numbered window covering it), the
//   stitch stores 0 + round_P(pred * weight) instead of adding to acc, so acc needs no zero fill
//   (its earlier contents are never read);
// - last_divide: where a window is a voxel's last, the sum is divided by the voxel's count right
//   after its addition (`count`: window_count's map on acc's device, or null to compute it from
//   `weight` as window_finalize does), so acc ends the pass holding window_finalize's in-place
//   result, the same bits, with no final pass. Needs nothing to crop (image size == padded size).
// - ring: acc holds only `depth` = acc.shape[2] padded d planes (roi_d <= depth <= padded_d),
//   plane d at d % depth: a ring the caller drains with the plane-range window_finalize below
//   before a window row's planes reuse those of a finished one. Needs first_store (a reused plane
//   holds the last plane's sums, never read: each voxel's first window stores) and no
//   last_divide. Windows of consecutive rows k, k + 1 along d cover planes [start(k), start(k +
//   1) + roi_d); so with depth = roi_d the caller stitches the batch row by row and finalizes
//   planes [start(k), start(k + 1)) of the image before the first window of row k + 1 (and the
//   rest of the image after its last window): the accumulator of one window row instead of the
//   padded volume, with the same sums (MONAI's order of additions is per voxel).
struct StitchFuse {
  bool first_store = false;
  bool last_divide = false;
  const void* count = nullptr;  // acc's dtype, the padded size, dense
  bool ring = false;
};
void window_stitch(const VolumeView& acc, const VolumeView& pred, const void* weight,
                   const WindowLayout& layout, int64_t first_window, const StitchFuse& fuse,
                   cudaStream_t stream = nullptr);

// count[voxel] = sum of weight over the windows covering it, added in window order (MONAI's
// count map), at the padded size, dense, dtype `dtype` (float32 or float64) on `device`.
// weight null: constant weights, count = product of the per-axis window counts (exact).
void window_count(const void* weight, DType dtype, Device device, int device_index,
                  const WindowLayout& layout, void* count, cudaStream_t stream = nullptr);

// out[n, k, x] = acc[n, k, x + pad_before] / count[x + pad_before] (MONAI's `output /= count`
// then the crop of the padding), stored in out's float dtype. `count`: window_count's map, or
// null to compute it on the fly from `weight` (null: constant weights) -- no count buffer at all.
// With `argmax`, out is (N, 1, size) of an integer dtype (uint8, int16, int32, int64) holding the
// channel index of the largest quotient (the first on ties, NaN largest: torch.argmax), the
// probabilities never written. out may alias acc when nothing is cropped and the dtypes match
// (in place).
void window_finalize(const VolumeView& acc, const void* count, const void* weight,
                     const WindowLayout& layout, const VolumeView& out, bool argmax,
                     cudaStream_t stream = nullptr);

// The same for the padded d planes [d_begin, d_end) only (those in the image: output planes
// [d_begin - pad_before, d_end - pad_before) clipped to [0, size_d)), reading a ring accumulator
// (StitchFuse::ring): acc (N, K, depth, padded h, padded w) with plane d at d % depth, d_end -
// d_begin <= depth. `out` is the whole (N, K or 1, size) output; planes outside the range are
// not touched. With depth == padded_d and the whole range this is the call above.
void window_finalize(const VolumeView& acc, const void* count, const void* weight,
                     const WindowLayout& layout, const VolumeView& out, bool argmax,
                     int64_t d_begin, int64_t d_end, cudaStream_t stream = nullptr);

}  // namespace voxaug
