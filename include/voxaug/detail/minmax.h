// voxaug: per-segment minimum / maximum (segments: samples, or (sample, channel) pairs).
// Shared by the OpenMP and CUDA reductions.
#pragma once

#include <cstdint>
#include <cstring>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/indexer.h"

namespace voxaug::detail {

// Order-preserving map double -> uint64 (for atomicMin / atomicMax on the device).
VOXAUG_HD VOXAUG_FORCEINLINE uint64_t ordered_bits(double v) {
  uint64_t u;
#if VOXAUG_DEVICE_PASS
  u = static_cast<uint64_t>(__double_as_longlong(v));
#else
  std::memcpy(&u, &v, sizeof u);
#endif
  return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}
VOXAUG_HD VOXAUG_FORCEINLINE double from_ordered_bits(uint64_t u) {
  u = (u >> 63) ? (u & 0x7fffffffffffffffull) : ~u;
#if VOXAUG_DEVICE_PASS
  return __longlong_as_double(static_cast<long long>(u));
#else
  double v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// Where segment `seg` lives: sample n and the range of its elements.
struct Segments {
  Indexer ix;
  int64_t per_segment;  // elements in a segment
  int64_t per_sample;   // segments in a sample (1, or C when channel-wise)
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t offset(int64_t seg, int64_t i) const {
    const int64_t n = seg / per_sample;
    const int64_t e = (seg - n * per_sample) * per_segment + i;
    return ix.offset(n, e);
  }
};

}  // namespace voxaug::detail
