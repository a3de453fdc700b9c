// voxaug: the dropout family -- MONAI RandCoarseDropout, batched: per sample a small table of
// boxes (holes), one pass over the volume.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// What fills the dropped voxels.
enum class DropoutFill : int32_t {
  Constant = 0,    // fill_value
  Uniform = 1,     // U(fill_low, fill_high) per voxel
  ImageRange = 2,  // U(min, max) per voxel, min / max of the sample (all channels), from minmax
};

// Per-sample descriptors of one coarse-dropout call. The tables live on the data's device.
struct CoarseDropoutParams {
  // (N, max_boxes, 6) int64, row (d0, h0, w0, d1, h1, w1): the half-open box [d0, d1) x
  // [h0, h1) x [w0, w1) in voxels, all channels. Only the first counts[n] rows of sample n are
  // used (empty boxes are allowed and contain nothing).
  const int64_t* boxes = nullptr;
  // (N,) int64: boxes used per sample. 0 means the sample is not transformed (copied as is),
  // also with dropout_holes = false.
  const int64_t* counts = nullptr;
  int64_t max_boxes = 0;
  // true: fill the voxels inside any box; false: keep them and fill every other voxel.
  bool dropout_holes = true;
  DropoutFill fill = DropoutFill::Constant;
  double fill_value = 0.0;                 // Constant
  double fill_low = 0.0, fill_high = 0.0;  // Uniform
  // ImageRange: (N, 2) float64 (min, max) per sample on the data's device, e.g. from
  // minmax(in, .., channel_wise=false). On the CPU it may be null: the min / max are then reduced
  // in the same parallel region before the fill, NaN propagating (numpy's min / max).
  const double* minmax = nullptr;
  // Uniform fills: voxel e (C-order index within its sample) of global sample first_sample + n
  // gets lo + (hi - lo) * u, u the e-th float uniform in [0, 1) of Philox (seed, sample,
  // element): independent of batch split, launch shape and device.
  uint64_t seed = 0;
};

// out = in with the boxes (or their complement) filled. `in` and `out`: (N, C, D, H, W) views of
// the same shape, dtype (float64, float32, float16, bfloat16, uint8, int16, int32, int64) and
// device; out may be in itself (in place), otherwise they must not overlap. Fill values are
// computed in float64 and converted to the dtype (integers: truncated towards zero after
// clamping to the type's range, numpy's float -> int assignment for in-range values). CUDA:
// one launch on `stream`, no host synchronisation. Throws voxaug::Error on bad arguments.
void coarse_dropout(const VolumeView& in, const VolumeView& out, const CoarseDropoutParams& params,
                    cudaStream_t stream = nullptr, uint32_t first_sample = 0);

// MONAI RandCoarseShuffle, batched: the voxels of each box, channel by channel, randomly
// permuted in place, box after box (a box overlapping an earlier one permutes that one's result,
// as MONAI's loop). The permutation of box j, channel c of global sample g is the stable
// ascending argsort of 32-bit Philox keys (seed, sample g, stream Shuffle, counter (j * C + c) <<
// 40 | i >> 2, word i & 3) of the box's voxels i in C-order: new[i] = old[perm[i]] -- the same
// permutation on the CPU (LSD radix sort) and on CUDA (CUB radix sort), for any thread count.
struct CoarseShuffleParams {
  // HOST tables: (N, max_boxes, 6) int64 rows (d0, h0, w0, d1, h1, w1), half-open boxes inside
  // the volume, and (N,) int64 boxes used per sample (0: the sample is unchanged).
  const int64_t* boxes = nullptr;
  const int64_t* counts = nullptr;
  int64_t max_boxes = 0;
  uint64_t seed = 0;
};

// x: (N, C, D, H, W), any dtype and strides (elements must not alias each other), shuffled in
// place. A box must lie inside the volume and hold fewer than 2^32 voxels. CUDA: per box and
// sample a key launch, a radix sort per channel, a gather and a store on `stream` (workspace
// from cudaMallocAsync, freed on the stream), no host synchronisation. Throws voxaug::Error on bad
// arguments.
void coarse_shuffle_(const VolumeView& x, const CoarseShuffleParams& params,
                     cudaStream_t stream = nullptr, uint32_t first_sample = 0);

// TorchIO Swap / RandomSwap, batched: per sample, `counts[n]` swaps in order; swap k exchanges
// the patch of size `patch` at `first` with the one at `second` in every channel, both read
// before either is written (a true swap, also for overlapping patches: TorchIO copies its first
// patch through a view, which overlapping patches alias).
struct PatchSwapParams {
  // Tables on the data's device (host memory for CPU views), like CoarseDropoutParams': (N,
  // max_swaps, 6) int64 rows (first d, h, w, second d, h, w), the patches' corners, each patch
  // inside the volume; (N,) int64 swaps per sample (0: unchanged).
  const int64_t* locations = nullptr;
  const int64_t* counts = nullptr;
  int64_t max_swaps = 0;
  int64_t patch[3] = {0, 0, 0};  // D, H, W extent, >= 1 each
};

// Validates swap tables held in host memory against `x`'s shape (counts in [0, max_swaps], every
// patch inside the volume, the patch size in [1, the image size]): what swap_patches_ checks
// itself for CPU views, for callers to run before sending host tables to the device.
void check_swap_tables(const VolumeView& x, const PatchSwapParams& host_params);

// x: (N, C, D, H, W), any dtype and strides (elements must not alias), swapped in place. CUDA:
// one launch (a block per (sample, channel) runs its swaps in order; device tables are clamped
// into range, not checked: check_swap_tables checks host copies), scratch from cudaMallocAsync
// freed on the stream, no host synchronisation. Throws voxaug::Error on bad arguments.
void swap_patches_(const VolumeView& x, const PatchSwapParams& params,
                   cudaStream_t stream = nullptr);

}  // namespace voxaug
