// voxaug: batched resampling through a per-sample affine map, for several tensors that share
// one coordinate computation (e.g. an image interpolated linearly and its label map by
// nearest neighbour) in one launch.
//
// Conventions:
// - Volumes are (N, C, D, H, W); voxel centres sit at integer indices.
// - matrices: N row-major 3x4 float64 matrices (on the data's device) mapping an output voxel
//   index (d, h, w, 1) to a continuous input voxel index (d', h', w'). On the CPU a non-finite
//   entry throws; on CUDA the matrices are never read on the host (no synchronisation), so a
//   non-finite entry gives NaN / inf coordinates: NaN samples as outside the volume (the
//   padding), inf as far outside (the border with Border / Reflection padding); no error and no
//   read out of range. The transforms build their matrices on the host and check them there.
// - Padding, per tensor, with torch.nn.functional.grid_sample's semantics for the equivalent
//   normalised map: Zeros (out-of-range corners contribute 0), Border (clamp the coordinate to
//   [0, S-1]), Reflection (reflect about [0, S-1] when align_corners, else about
//   [-0.5, S-0.5], then clamp), Constant (out-of-range corners contribute `pad_value`) and
//   Cutoff (scipy's 'constant', below: `pad_value` for coordinates outside [0, S-1]).
// - Cubic (and the other B-spline orders: Quadratic 2, Quartic 4, Quintic 5): see
//   bspline_prefilter below; the target carries the prefiltered coefficients.
// - Nearest rounds half to even (as grid_sample) and copies the element bit-exactly, so it is
//   the mode for labels of any dtype (uint8, int16, int32, int64) as well as images. Linear
//   (trilinear) needs floating tensors (float64/32/16, bfloat16) and computes in float32
//   (float64 for float64 data).
// - Exact path: a sample whose matrix is a signed permutation with an integer offset (flip,
//   rot90, orientation change, integer crop / pad) is copied voxel by voxel in every mode, so
//   the result is bit-exact (linear interpolation at voxel centres would equal it for finite
//   data; the copy also keeps inf / NaN neighbours from leaking in).
// - CUDA views run on `stream` without synchronising the host; CPU views use OpenMP.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

struct PointwiseStep;  // voxaug/intensity.h

// Most pointwise steps fused into one resample target (ResampleTarget::post).
constexpr int kMaxResamplePostSteps = 4;

// Cubic is the B-spline of order 3; Quadratic, Quartic and Quintic those of orders 2, 4 and 5
// (scipy's spline orders; MONAI's integer modes). Linear is order 1, Nearest order 0.
enum class Interp : int32_t {
  Nearest = 0,
  Linear = 1,
  Cubic = 2,
  Quadratic = 3,
  Quartic = 4,
  Quintic = 5
};

// Whether `mode` is a prefiltered B-spline (needs ResampleTarget::coeff), and its order.
VOXAUG_HD constexpr bool is_spline(Interp mode) {
  return mode == Interp::Cubic || mode == Interp::Quadratic || mode == Interp::Quartic ||
         mode == Interp::Quintic;
}
VOXAUG_HD constexpr int spline_order(Interp mode) {
  switch (mode) {
    case Interp::Nearest: return 0;
    case Interp::Linear: return 1;
    case Interp::Quadratic: return 2;
    case Interp::Cubic: return 3;
    case Interp::Quartic: return 4;
    case Interp::Quintic: return 5;
  }
  return -1;
}

// Cutoff is scipy's 'constant' (what MONAI's 'zeros' means with its integer spline modes):
// pad_value wherever the coordinate lies outside [0, S-1] on any axis, with no blending into
// the pad; inside, the taps that reach beyond an edge read the whole-sample mirror (scipy's
// 'mirror'), so every spline order matches map_coordinates(mode='constant'). Forward only.
enum class Padding : int32_t { Zeros = 0, Border = 1, Reflection = 2, Constant = 3, Cutoff = 4 };

// Whether the padding writes pad_value (Constant, Cutoff) rather than 0 / the data.
VOXAUG_HD constexpr bool pads_with_value(Padding padding) {
  return padding == Padding::Constant || padding == Padding::Cutoff;
}

struct ResampleTarget {
  VolumeView in;   // (N, C, D, H, W)
  VolumeView out;  // (N, C, D', H', W'): its spatial size is the output grid of the launch
  Interp mode = Interp::Linear;
  Padding padding = Padding::Zeros;
  double pad_value = 0.0;  // Padding::Constant / Padding::Cutoff
  // B-spline modes only (is_spline): the coefficients of `in` from bspline_prefilter (same
  // order, padding, pad_value and align_corners), (N, C, D + 2P, H + 2P, W + 2P),
  // P = kBSplinePad. The order is not recorded in the view: coefficients of another order
  // interpolate something else.
  VolumeView coeff;
  // Output samples per input sample: `in` holds M samples, `out` M * group, and output sample
  // n is read from input sample n / group through matrix n. This is a crop followed by a
  // spatial transform as one gather: `group` patches per volume, each matrix the patch's map
  // with the crop's start added to its offset, so a rotated patch reads real voxels at its
  // corners. Forward only (the backward functions need group 1).
  int64_t group = 1;
  // Pointwise steps applied to this target's values as they are stored: the same bits as
  // resampling, then pointwise_chain(out, out, post, num_post, post_first_sample), without
  // the second pass over memory (a crop + flips followed by RandShiftIntensity, say). At most
  // kMaxResamplePostSteps steps, on one target per launch, whose output is floating and
  // computes in its own precision (float64 output: float64; otherwise float32, so no float64
  // target may share the launch). Steps that need neither statistics of their input nor
  // per-voxel random numbers: scale_intensity_range, shift_intensity and scale_intensity
  // (fixed, per-sample or random; not channel-wise) and a fixed gamma.
  const PointwiseStep* post = nullptr;
  int num_post = 0;
  uint32_t post_first_sample = 0;
};

// B-spline interpolation (Interp::Cubic, order 3, and Quadratic / Quartic / Quintic, orders
// 2 / 4 / 5) interpolates the data, as scipy.ndimage.map_coordinates(order=k, prefilter=True):
// the volume is first turned into B-spline coefficients by the exact recursive prefilter
// (Unser 1993; scipy's poles: sqrt(3) - 2 for order 3) on a copy extended by kBSplinePad
// voxels per side with the padding rule. Padding maps to scipy's modes, with scipy's
// boundary rules (detail/bspline.h, BSplineEnds): Zeros / Constant -> 'grid-constant' (cval;
// scipy's 12 padded voxels, mirror boundary), Border -> 'nearest' (12 edge voxels, their
// half-sample reflection), Reflection -> 'reflect' (align_corners false) or 'mirror' (true),
// both from exact sums over the infinite reflection, Cutoff -> 'constant'. Taps beyond the
// padded coefficients read the fill (Zeros / Constant) or the edge coefficient (Border), as
// scipy reads them. float64 results equal scipy's within 1e-9 of the data range, except where
// scipy's own 'reflect' boundary sums are truncated (short axes, orders 4 and 5: up to 7e-5;
// voxaug equals the exact interpolant there). tests/python/test_resample.py. Floating data
// only.
constexpr int64_t kBSplinePad = 12;

// Writes the B-spline coefficients of order `order` (2..5) of `in` into `coeff` ((N, C, D+2P,
// H+2P, W+2P), float32 or float64, dense; computed in its dtype). Asynchronous on CUDA.
void bspline_prefilter(const VolumeView& in, const VolumeView& coeff, Padding padding,
                       double pad_value, bool align_corners, int order,
                       cudaStream_t stream = nullptr);
// Order 3 (Interp::Cubic).
inline void bspline_prefilter(const VolumeView& in, const VolumeView& coeff, Padding padding,
                              double pad_value, bool align_corners, cudaStream_t stream = nullptr) {
  bspline_prefilter(in, coeff, padding, pad_value, align_corners, 3, stream);
}

// Most tensors resampled together in one launch.
constexpr int kMaxResampleTargets = 4;

// Resamples every target through the same per-sample matrices. All targets share N and the
// output spatial size; each has its own channels, input size, dtype, mode and padding.
// `align_corners` selects the reflection bounds (see above).
void resample(const ResampleTarget* targets, int num_targets, const double* matrices,
              bool align_corners, cudaStream_t stream = nullptr);

// Gradient w.r.t. the input of one target: grad_in = (d out / d in)^T grad_out, where
// `target.in` describes the input (shape only is read), `target.out` is grad_out, and
// `grad_in` is a dense (N, C, D, H, W) buffer of float32 (float64 for float64 tensors)
// that this call zeroes and fills. Border / reflection send gradient to the voxels they read;
// zeros / constant padding send none. The CPU path is deterministic (one thread per
// (sample, channel)); the CUDA path scatters with atomicAdd, so its float sums may differ
// in the last bits from run to run.
void resample_backward_input(const ResampleTarget& target, const double* matrices,
                             bool align_corners, void* grad_in, cudaStream_t stream = nullptr);

// Gradient w.r.t. the matrices: grad_matrices (N x 12 float64, zeroed and filled here) =
// sum over output voxels, linear targets and channels of grad_out * d out / d matrix. Each
// target's `out` is its grad_out. Nearest targets contribute nothing (as in grid_sample).
// The CPU path sums in a fixed order (deterministic); the CUDA path reduces per block and
// adds blocks atomically.
void resample_backward_matrix(const ResampleTarget* targets, int num_targets,
                              const double* matrices, bool align_corners, double* grad_matrices,
                              cudaStream_t stream = nullptr);

}  // namespace voxaug
