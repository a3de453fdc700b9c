// voxaug: the connected-components rules shared by the CPU and CUDA backends: what a foreground
// voxel is, which neighbours precede a voxel in C-order for a connectivity, and the union-find
// invariant (a parent index is never larger than its child's, so every root is its component's
// smallest index).
#pragma once

#include <cstdint>

#include "voxaug/detail/convert.h"
#include "voxaug/types.h"

namespace voxaug::detail {

struct LabelParams {
  const void* mask;
  DType dtype;
  int64_t mask_stride[5];  // N, C, D, H, W (elements)
  int64_t channels;
  int64_t size[3];  // D, H, W
  int64_t volume;   // D * H * W
  int connectivity;
  // The neighbours that precede a voxel in C-order: offsets (dd, dh, dw), at most 13.
  int num_offsets;
  int8_t offsets[13][3];
};

// Fills the backward neighbour offsets of `connectivity` (1, 2 or 3 orthogonal hops).
inline void label_offsets(LabelParams& p) {
  p.num_offsets = 0;
  for (int dd = -1; dd <= 0; ++dd)
    for (int dh = -1; dh <= 1; ++dh)
      for (int dw = -1; dw <= 1; ++dw) {
        const bool before = dd < 0 || (dd == 0 && (dh < 0 || (dh == 0 && dw < 0)));
        const int hops = (dd != 0) + (dh != 0) + (dw != 0);
        if (!before || hops > p.connectivity) continue;
        p.offsets[p.num_offsets][0] = static_cast<int8_t>(dd);
        p.offsets[p.num_offsets][1] = static_cast<int8_t>(dh);
        p.offsets[p.num_offsets][2] = static_cast<int8_t>(dw);
        ++p.num_offsets;
      }
}

// The foreground rule: nonzero, NaN too. Compared as float (a nonzero integer or half value stays
// nonzero there); float64 as itself (a tiny float64 would round to a float zero).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE bool label_nonzero(T v) {
  return !(load_as<float>(v) == 0.0f);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE bool label_nonzero<double>(double v) {
  return !(v == 0.0);
}

// Whether voxel (d, h, w) of volume `vol` (= n * C + c) is foreground (label_nonzero of the
// mask's dtype).
VOXAUG_HD VOXAUG_FORCEINLINE bool label_foreground(const LabelParams& p, int64_t vol, int64_t d,
                                                   int64_t h, int64_t w) {
  const int64_t n = vol / p.channels, c = vol % p.channels;
  const int64_t off = n * p.mask_stride[0] + c * p.mask_stride[1] + d * p.mask_stride[2] +
                      h * p.mask_stride[3] + w * p.mask_stride[4];
  switch (p.dtype) {
    case DType::Float64: return label_nonzero(static_cast<const double*>(p.mask)[off]);
    case DType::Float32: return label_nonzero(static_cast<const float*>(p.mask)[off]);
    case DType::Float16: return label_nonzero(static_cast<const half_t*>(p.mask)[off]);
    case DType::BFloat16: return label_nonzero(static_cast<const bfloat16_t*>(p.mask)[off]);
    case DType::UInt8: return label_nonzero(static_cast<const uint8_t*>(p.mask)[off]);
    case DType::Int16: return label_nonzero(static_cast<const int16_t*>(p.mask)[off]);
    case DType::Int32: return label_nonzero(static_cast<const int32_t*>(p.mask)[off]);
    case DType::Int64: return label_nonzero(static_cast<const int64_t*>(p.mask)[off]);
  }
  return false;
}

}  // namespace voxaug::detail
