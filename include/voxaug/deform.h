// voxaug: deformation fields evaluated inside the resample gather (elastic, grid distortion),
// so no full-resolution displacement field has to exist in memory.
//
// Contract: for output voxel x = (d, h, w) of sample n,
//     out(x) = in( M_n [x + u_n(x); 1] )
// where M_n is the sample's 3x4 matrix of include/voxaug/resample.h (output index -> input
// index) and u_n(x) the displacement in OUTPUT voxel units, added before the map. This is
// MONAI's Rand3DElastic order (offsets added to the grid, then the affine) and what TorchIO
// gives for RandomAffine followed by RandomElasticDeformation; a displacement given in input
// voxels is L^-1 times it (L the linear part of M).
//
// Field kinds (FieldKind), all per sample, components (d, h, w) along the output axes:
// - BSpline: cubic B-spline control grid `field` (N, 3, Kd, Kh, Kw), K >= 4 per axis (K is
//   the number of control points, the mesh has K - 3 cells). Output index o maps to the
//   continuous control index g = scale * o + offset per axis; the field is
//   sum_{a,b,c} B(g_d - i_a) B(g_h - j_b) B(g_w - k_c) coeff[i_a, j_b, k_c] over the 4 x 4 x 4
//   nearest control points (REFERENCES.md basis). As ITK's BSplineTransform: the field is
//   defined on g in [1, K - 2] per axis and is zero outside it (the last point g = K - 2
//   uses the last cell with t = 1).
// - Dense: `field` (N, 3, D', H', W') at the output voxels themselves (scale / offset unused):
//   MONAI's exact mode, user-supplied fields.
// - Separable: `field` (N, 3, L, 1, 1), L >= max(D', H', W'): u_a(x) = field[n, a, x_a], a
//   function of that axis alone (RandGridDistortion).
// The field is float32 or float64 and read through its strides. Displacements are evaluated
// in the gather's precision (float32, float64 for float64 data).
//
// A field never uses the exact (voxel copy) path of plain resampling: with a zero field the
// result equals resample() exactly for finite data (x + 0 == x).
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/resample.h"
#include "voxaug/types.h"

namespace voxaug {

enum class FieldKind : int32_t { None = 0, BSpline = 1, Dense = 2, Separable = 3 };

struct DeformField {
  FieldKind kind = FieldKind::None;
  VolumeView field;
  double scale[3] = {1.0, 1.0, 1.0};   // BSpline: output index -> control index
  double offset[3] = {0.0, 0.0, 0.0};  // BSpline
  // BSpline, optional: per-sample maps instead of scale / offset, N x 6 float64 (scale d, h,
  // w, offset d, h, w) on the data's device (e.g. a control spacing per sample).
  const double* sample_map = nullptr;
};

// resample() through a deformation: one launch for all targets, image and label together.
// Asynchronous on CUDA (no host sync); the field lives on the targets' device.
void resample_deformed(const ResampleTarget* targets, int num_targets, const double* matrices,
                       const DeformField& field, bool align_corners, cudaStream_t stream = nullptr);

// Writes u(x) for every output voxel into `out` ((N, 3, D', H', W'), float32 or float64,
// any strides): the dense displacement, for users who inspect or invert it.
void deform_field_dense(const DeformField& field, const VolumeView& out,
                        cudaStream_t stream = nullptr);

// Fills `out` (floating, any shape) with U(low, high) from Philox keyed by `seed`: element e
// of sample first_sample + n gets the same value on every device and for any batch split
// (the random offsets of MONAI's Rand3DElastic exact mode, control-point draws).
void uniform_fill(const VolumeView& out, double low, double high, uint64_t seed,
                  int64_t first_sample = 0, cudaStream_t stream = nullptr);

}  // namespace voxaug
