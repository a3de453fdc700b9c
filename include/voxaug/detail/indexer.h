// voxaug: element addressing of (N, C, D, H, W) views inside kernels.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug::detail {

// Maps (sample n, linear element e of the sample in C-order) to a storage offset.
struct Indexer {
  int64_t batch_stride = 0;
  int64_t sizes[4] = {1, 1, 1, 1};    // C, D, H, W
  int64_t strides[4] = {0, 0, 0, 0};  // in elements
  bool dense = true;                  // the sample is one C-order block

  VOXAUG_HD VOXAUG_FORCEINLINE int64_t offset(int64_t n, int64_t e) const {
    if (dense) return n * batch_stride + e;
    int64_t off = n * batch_stride;
    for (int k = 3; k >= 0; --k) {
      const int64_t q = e / sizes[k];
      off += (e - q * sizes[k]) * strides[k];
      e = q;
    }
    return off;
  }
};

inline Indexer make_indexer(const VolumeView& v) {
  Indexer ix;
  ix.batch_stride = v.strides[0];
  for (int k = 0; k < 4; ++k) {
    ix.sizes[k] = v.shape[k + 1];
    ix.strides[k] = v.strides[k + 1];
  }
  ix.dense = v.sample_contiguous();
  return ix;
}

}  // namespace voxaug::detail
