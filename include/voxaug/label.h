// voxaug: the label family -- connected components of binary masks (what MONAI's
// KeepLargestConnectedComponent and FillHoles get from skimage / cuCIM) and their Euclidean
// distance transform (MONAI's DistanceTransformEDT: scipy / cuCIM), batched: every (sample,
// channel) volume of a batch is processed on its own, in one call, on the data's device.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

// Labels the connected components of `mask` (nonzero voxels; NaN counts as nonzero) in each
// (n, c) volume: labels[n, c, v] = 0 for background, else 1 + the C-order index v0 (within the
// D x H x W volume) of the component's first voxel. This canonical labelling is the same on the
// CPU and on CUDA, for any launch shape or thread count; two voxels share a label iff they are
// connected. connectivity: 1 (6 face neighbours), 2 (18: faces and edges), 3 (26: and corners),
// skimage's "orthogonal hops".
//
// mask: (N, C, D, H, W), any dtype and strides. labels: int32 (N, C, D, H, W), dense C-order (it
// is the union-find forest while the call runs), not overlapping mask, on mask's device. A
// volume must hold fewer than 2^31 - 1 voxels. CUDA: four launches on `stream` (init, union
// with atomicMin, path compression, final), no host synchronisation. Throws voxaug::Error on
// bad arguments.
void connected_components(const VolumeView& mask, const VolumeView& labels, int connectivity,
                          cudaStream_t stream = nullptr);

// The `num_components` largest components of each (n, c) volume of `labels`, the canonical
// output of connected_components: keep[n, c, v] = 1 where labels[n, c, v] belongs to one of them,
// else 0. Larger first; among equal sizes the smaller label (the component whose first voxel
// comes first in C-order), as MONAI's get_largest_connected_component_mask (the argmax of a
// bincount over skimage's raster-order labels). Fewer components than num_components: all.
//
// labels: int32 (N, C, D, H, W), dense C-order; every nonzero label l must be canonical (the
// voxel l - 1 exists and carries l), which is checked. keep: uint8 (a bool tensor's bytes), the
// same shape, dense, not overlapping labels. CPU only: the torch op `largest_components` runs
// CUDA tensors through device reductions (torch_ext/label.cpp). Per volume: one pass collects the roots, one
// counts the sizes (runs of equal labels, one atomic add per run), one writes the mask. Throws
// voxaug::Error on bad arguments or non-canonical labels.
void largest_components(const VolumeView& labels, int64_t num_components, const VolumeView& keep);

// The size (voxel count) of each voxel's component: sizes[n, c, v] = the number of voxels of
// volume (n, c) that carry labels[n, c, v], 0 for background. labels as for largest_components;
// sizes: int32, the same shape, dense, not overlapping labels. CPU only, like largest_components
// (the torch op `component_sizes` covers CUDA). Thresholds on it give MONAI's RemoveSmallObjects.
void component_sizes(const VolumeView& labels, const VolumeView& sizes);

// Euclidean distance transform of each (n, c) volume of `mask` (MONAI DistanceTransformEDT:
// scipy.ndimage.distance_transform_edt channel by channel): out[n, c, v] = the distance from
// voxel v to the nearest background (zero) voxel of its volume, axis a scaled by spacing[a]
// (d, h, w); 0 on background. A volume without background gets scipy's answer there, the
// distance to the virtual voxel (-1, 0, 0). Squared distances are exact minima in float64 (three
// passes of the 1-D lower envelope of parabolas, Felzenszwalb & Huttenlocher), then the square
// root, rounded to out's dtype; CPU and CUDA give the same bits.
//
// mask: (N, C, D, H, W), any dtype and strides (nonzero, NaN too, is foreground). out: float32 or
// float64, the same shape, dense C-order, not overlapping mask, on mask's device. spacing: three
// positive finite values. workspace: distance_transform_workspace_bytes(mask, out.dtype) bytes on
// mask's device -- CUDA: the squared distances and the lines' scratch (required); CPU: the
// squared distances of a float32 result (null: allocated per call; a float64 result holds them
// itself). CUDA: four launches on `stream`, no host synchronisation. Throws voxaug::Error on bad
// arguments.
int64_t distance_transform_workspace_bytes(const VolumeView& mask, DType out_dtype);
void distance_transform_edt(const VolumeView& mask, const double spacing[3], const VolumeView& out,
                            void* workspace, int64_t workspace_bytes,
                            cudaStream_t stream = nullptr);

}  // namespace voxaug
