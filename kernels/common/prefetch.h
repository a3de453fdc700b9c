// voxaug: one software prefetch for the host kernels.
#pragma once

#include "voxaug/config.h"

namespace voxaug::detail {

// One software prefetch (prefetcht0) of the line holding *p. Not _mm_prefetch: GCC 12 dropped
// those (__builtin_prefetch) from the resample row gather's loop entirely. Prefetches do not
// fault, so p may lie outside the data.
VOXAUG_FORCEINLINE void prefetch_line(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

// The same into the L2 (prefetcht1): for data read a little later, without evicting the L1's.
VOXAUG_FORCEINLINE void prefetch_line_l2(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

}  // namespace voxaug::detail
