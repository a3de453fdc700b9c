// voxaug: the label family -- connected components of binary masks (what MONAI's
// KeepLargestConnectedComponent and FillHoles get from skimage / cuCIM), batched: every (sample,
// channel) volume of a batch is labelled on its own, in one call, on the data's device.
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

}  // namespace voxaug
