// voxaug: non-temporal ("streaming") stores for the CPU backend's large outputs.
//
// A kernel whose output is much larger than the caches writes every line once and never reads
// it back before the call ends: an ordinary store first reads the line into the cache (read for
// ownership), a streaming store does not, so the pass moves two thirds of the bytes. Results are
// bit-identical (it is only the way the same values reach memory). Streaming stores are weakly
// ordered: each thread calls stream_fence() after its last one, before the launcher's join
// publishes the output.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "voxaug/config.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#include <immintrin.h>
#define VOXAUG_STREAM_STORES 1
#else
#define VOXAUG_STREAM_STORES 0
#endif

namespace voxaug::detail {

// Outputs (all samples of a launch together) of at least this many bytes are streamed: a batch
// that large would not stay in the caches for the next op anyway.
constexpr int64_t kStreamOutputBytes = int64_t(2) << 20;

// Contiguous copy of `bytes` bytes with non-temporal stores where x86-64 has them (a plain
// memcpy elsewhere); the unaligned head and the tail go through memcpy.
VOXAUG_FORCEINLINE void stream_copy(void* dst, const void* src, int64_t bytes) {
#if VOXAUG_STREAM_STORES
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const int64_t head = std::min<int64_t>(bytes, (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15);
  if (head > 0) std::memcpy(d, s, static_cast<size_t>(head));
  int64_t j = head;
  for (; j + 16 <= bytes; j += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + j),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j)));
  if (j < bytes) std::memcpy(d + j, s + j, static_cast<size_t>(bytes - j));
#else
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
#endif
}

// Orders this thread's streaming stores before its later stores (and the launcher's join).
VOXAUG_FORCEINLINE void stream_fence() {
#if VOXAUG_STREAM_STORES
  _mm_sfence();
#endif
}

}  // namespace voxaug::detail
