// voxaug: per-sample / per-channel statistics on the device (moments, exact percentiles) and
// the MONAI transforms that need them (NormalizeIntensity, ScaleIntensityRangePercentiles).
//
// Contract shared by every function here:
// - `in` is an (N, C, D, H, W) view with any strides; dtypes float64, float32, float16,
//   bfloat16, uint8, int16, int32. A segment is one sample (C * D * H * W elements) or, with
//   `channel_wise`, one (sample, channel) pair (D * H * W elements); segments are numbered
//   n-major: seg = n * C + c.
// - Statistics are float64 in memory of `in`'s device (host memory for CPU views). They stay
//   there: nothing is read back to the host.
// - CUDA views run on `stream` and never synchronise the host; CPU views run on the calling
//   thread with OpenMP and ignore `stream`. Workspaces are device memory of `in`'s device
//   (the *_workspace_bytes functions say how much; 0 for CPU views).
// - Results are deterministic and bit-identical between the CPU and CUDA paths: moments use a
//   fixed reduction order (detail/stats.h), percentiles are exact order statistics.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// ---- moments ----
// out[3 * seg + 0, 1, 2] = count, mean, population standard deviation (ddof = 0, as MONAI's
// torch.std(unbiased=False)) of the segment's values, computed in float64. With `nonzero`
// only values != 0 count (MONAI NormalizeIntensity(nonzero=True)); a segment without counted
// values gets (0, 0, 0). NaNs propagate into mean and std.
int64_t moments_workspace_bytes(const VolumeView& in, bool channel_wise);
void moments(const VolumeView& in, double* out, bool channel_wise, bool nonzero, void* workspace,
             int64_t workspace_bytes, cudaStream_t stream = nullptr);

// ---- percentiles ----
// out[seg * num_q + k] = the q_percent[k]-th percentile of the segment's values, exactly as
// numpy.percentile / torch.quantile with linear interpolation: sorted values v, pos =
// q / 100 * (n - 1), v[floor(pos)] interpolated towards v[floor(pos) + 1], in float64.
// q_percent (host memory, num_q values in [0, 100]). A segment containing a NaN gets NaN.
int64_t percentiles_workspace_bytes(const VolumeView& in, bool channel_wise);
void percentiles(const VolumeView& in, const double* q_percent, int64_t num_q, double* out,
                 bool channel_wise, void* workspace, int64_t workspace_bytes,
                 cudaStream_t stream = nullptr);

// ---- the transforms (one pointwise pass that reads the statistics on the device) ----
// `in` and `out`: same shape and device, any strides, must not overlap unless identical (in
// place). Output dtypes: float32, float16, bfloat16, float64. Math is float32, or float64
// when `in` or `out` is float64.

// MONAI NormalizeIntensity: out = (x - sub) / div per segment; sub = subtrahend[seg] when
// given, else the mean; div = divisor[seg] when given, else the std; div == 0 -> 1 (after
// rounding to the compute type). With `nonzero`, zeros are left as they are (so a segment of
// zeros is unchanged). `moments` comes from moments() with the same channel_wise / nonzero;
// it may be null when both subtrahend and divisor are given. All three: per-segment float64
// arrays on the data's device.
struct NormalizeIntensityArgs {
  const double* moments = nullptr;
  const double* subtrahend = nullptr;
  const double* divisor = nullptr;
  bool nonzero = false;
  bool channel_wise = false;
};
void normalize_intensity(const VolumeView& in, const VolumeView& out,
                         const NormalizeIntensityArgs& args, cudaStream_t stream = nullptr);

// MONAI ScaleIntensityRangePercentiles: per segment a_min, a_max = the (lower, upper)
// percentiles (`percentiles`: 2 float64 per segment from percentiles() with q = {lower,
// upper}, on the data's device), then MONAI ScaleIntensityRange(a_min, a_max, b_min, b_max,
// clip). With `relative`, b_min / b_max become b_min + (b_max - b_min) * lower / 100 and
// b_min + (b_max - b_min) * upper / 100 (both must be given). a_min == a_max gives
// x - a_min (+ b_min), unclipped, as MONAI.
struct ScaleIntensityRangePercentilesArgs {
  const double* percentiles = nullptr;
  double lower = 0.0, upper = 100.0;  // percent, in [0, 100]
  const double* b_min = nullptr;      // host scalars; null: not given
  const double* b_max = nullptr;
  bool clip = false;
  bool relative = false;
  bool channel_wise = false;
};
void scale_intensity_range_percentiles(const VolumeView& in, const VolumeView& out,
                                       const ScaleIntensityRangePercentilesArgs& args,
                                       cudaStream_t stream = nullptr);

// TorchIO HistogramStandardization's map (numpy's arithmetic): per sample n, with the row
// table[n * (3 * pieces - 1) ...] = pieces - 1 edges (non-decreasing), pieces slopes, pieces
// intercepts (float64, on the data's device), out = float32(slope[k] * x + intercept[k])
// computed in float64, k = the number of edges <= x (numpy.digitize(x, edges, right=False)).
// `in` and `out`: float32, same shape and device, any strides (out may be in itself).
// pieces in [1, kMaxPiecewisePieces].
constexpr int kMaxPiecewisePieces = 16;
void piecewise_linear(const VolumeView& in, const VolumeView& out, const double* table, int pieces,
                      cudaStream_t stream = nullptr);

}  // namespace voxaug
