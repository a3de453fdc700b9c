// voxaug: batched separable filtering with per-sample, per-axis kernels -- Gaussian smoothing
// with MONAI's GaussianFilter / GaussianSmooth semantics.
//
// Conventions:
// - Volumes are (N, C, D, H, W); spatial axis 0 is D, 1 is H, 2 is W. Sigma is in voxels.
// - The filter is a correlation along each spatial axis, applied along D, then H, then W
//   (MONAI's and scipy.ndimage's order), with one of two borders (FilterBorder): zero padding
//   (voxels outside the volume contribute nothing), as
//   monai.networks.layers.separable_filtering(mode="zeros"), or scipy.ndimage's "reflect"
//   (d c b a | a b c d | d c b a, repeated for kernels longer than the line). Every channel of
//   a sample uses the sample's kernels.
// - Per output voxel the taps are summed from the lowest index to the highest, one
//   multiply and one add per tap (no FMA), on the CPU and on the device alike: results are
//   bit-identical between the two paths. Math is float32, or float64 when `in` or `out` is
//   float64; intermediate results between axes are kept in that precision.
// - Kernels reach the launch as a tap table (see FilterTaps): float64, on the data's device.
//   The table is built on the host (gaussian_table) and copied by the caller, so a launch
//   never reads parameters back to the host.
// - CUDA views run on `stream` and never synchronise the host (one launch per filtered axis
//   for the whole batch); CPU views run on the calling thread with OpenMP and ignore `stream`.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// ---- MONAI's Gaussian kernel (monai.networks.layers.convutils.gaussian_1d, approx="erf",
// normalize=False), host functions ----
//
// sigma is rounded to float32 first (MONAI stores it as a float32 tensor). The radius is
// int(max(sigma * truncated, 0.5) + 0.5) (so at least 1), and tap x in [-R, R] is
// max(0, 0.5 * (erf((x + 0.5) t) - erf((x - 0.5) t))) with t = 0.70710678 / |sigma|, evaluated
// in float32 like MONAI (erf correctly rounded to float32), and returned as float64. The taps
// are not renormalised. As MONAI: sigma == 0 gives the taps (0, 1, 0) (identity); a negative
// sigma keeps radius 1 but uses |sigma| in t. Throws voxaug::Error for a non-finite sigma or
// a truncated that is not positive and finite.
int64_t gaussian_radius(double sigma, double truncated);
// Writes the 2R + 1 taps (x = -R .. R) to `taps`.
void gaussian_kernel_1d(double sigma, double truncated, double* taps);

// ---- scipy.ndimage's Gaussian kernel (gaussian_filter1d, order 0), host functions ----
//
// The radius is int(truncate * sigma + 0.5) and tap x in [-R, R] is exp(-0.5 x^2 / sigma^2)
// divided by the sum of all 2R + 1 of them, in float64 (scipy's _gaussian_kernel1d). scipy's
// gaussian_filter skips an axis whose sigma is <= 1e-15 (gaussian_table: the identity row).
// Throws voxaug::Error for a sigma that is negative or not finite, or a truncate that is not
// positive and finite.
int64_t sampled_gaussian_radius(double sigma, double truncate);
// Writes the 2R + 1 taps (x = -R .. R) to `taps`; sigma must be > 1e-15.
void sampled_gaussian_kernel_1d(double sigma, double truncate, double* taps);

// ---- tap tables ----
//
// A table holds one row of `width` float64 values per (sample n, spatial axis a), row
// (n * 3 + a): row[0] is the radius R (an integer value, 0 <= R, 2R + 2 <= width) and
// row[1 .. 2R + 1] the taps for offsets -R .. R. A row with R = 0 and tap 1 is the identity.
//
// The border: what a tap reads where its input position j lies outside the line [0, L).
enum class FilterBorder : int {
  Zeros = 0,    // nothing: the term is left out (MONAI)
  Reflect = 1,  // the input at the mirror position (scipy.ndimage mode="reflect"): j -> -1 - j
                // below 0, 2L - 1 - j above L - 1, repeated with period 2L
};

struct FilterTaps {
  const double* table = nullptr;  // N * 3 * width float64 on the data's device
  int64_t width = 0;
  // Bit a set: filter along spatial axis a. Axes whose bit is clear are not filtered,
  // whatever their rows hold (mask 0 converts `in` into `out` unchanged).
  int axes = 7;
  FilterBorder border = FilterBorder::Zeros;
};

// Which Gaussian kernel a table holds.
enum class GaussianTaps : int {
  Erf = 0,      // MONAI's (gaussian_kernel_1d; `truncated`), sigma == 0 -> identity
  Sampled = 1,  // scipy.ndimage's (sampled_gaussian_kernel_1d; `truncate`), sigma <= 1e-15 ->
                // identity, negative sigma rejected
};

// Row width that fits the Gaussian kernels of every sample: 2 * max R + 2, where identity
// rows count as R = 0. `sigma` is N x 3 float64 in host memory (per sample: D, H, W).
int64_t gaussian_table_width(const double* sigma, int64_t batch, double truncated,
                             GaussianTaps kind = GaussianTaps::Erf);

// Fills `table` (host memory, N * 3 * width float64) with the Gaussian kernels of `sigma`
// (N x 3, host): the kernel of `kind`, or the identity row where that kind has none (Erf:
// sigma == 0, what MONAI's (0, 1, 0) kernel computes; Sampled: sigma <= 1e-15, the axis scipy
// skips). Returns the axis mask for FilterTaps::axes: bit a is set when some sample has a
// kernel on axis a, so identity-only axes cost nothing.
int gaussian_table(const double* sigma, int64_t batch, double truncated, int64_t width,
                   double* table, GaussianTaps kind = GaussianTaps::Erf);

// ---- the filter ----
//
// Workspace that separable_filter needs for intermediate results between axes, in bytes,
// on the data's device: 0, 1 or 2 dense float32 (float64 when in or out is float64) copies
// of the volume, depending on how many axes `axes` filters and whether `out` itself can hold
// an intermediate (float32 / float64 matching the compute precision).
int64_t separable_filter_workspace_bytes(const VolumeView& in, const VolumeView& out, int axes);

// out = filter(in). `in` and `out` are (N, C, D, H, W) views of one shape on one device, with
// any strides; they must not overlap. Input dtypes: float64, float32, float16, bfloat16, uint8,
// int16, int32, int64; output dtypes: float64, float32, float16, bfloat16. `taps.table` must
// hold N * 3 rows of taps.width values on the data's device (host memory for CPU views).
// `workspace` (at least separable_filter_workspace_bytes, same device; may be null when that
// is 0) is overwritten. Asynchronous on CUDA. Throws voxaug::Error naming the bad argument.
void separable_filter(const VolumeView& in, const VolumeView& out, const FilterTaps& taps,
                      void* workspace, int64_t workspace_bytes, cudaStream_t stream = nullptr);

// ---- the median filter (MONAI MedianSmooth / median_filter) ----
//
// out = the median of the (2 r_d + 1) x (2 r_h + 1) x (2 r_w + 1) box around each voxel, edges
// replicated (MONAI pads with "replicate"), every channel on its own; values are taken as
// float32 (MONAI's cast) and a box holding NaN gives NaN (torch.median). `in`: (N, C, D, H, W),
// any dtype and strides; `out`: float32, dense, the same shape and device, not overlapping `in`.
// radius: three values >= 0 whose box holds at most 343 voxels. CUDA: one launch on `stream`, no
// host synchronisation. Throws voxaug::Error naming the bad argument.
void median_filter(const VolumeView& in, const VolumeView& out, const int64_t radius[3],
                   cudaStream_t stream = nullptr);

}  // namespace voxaug
