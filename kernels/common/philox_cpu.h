// voxaug: many consecutive Philox4x32-10 blocks on the host, 16 at a time with AVX-512.
//
// The host loops that draw one block per four elements (dropout's uniform fill, the chain's
// Gaussian and Rician noise) ran GCC's vectorisation of detail::philox4x32_10, which widens every
// 32 x 32 -> 64-bit product to a 64 x 64 multiply (vpmovzxdq + vpmullq) and shuffles each round.
// Here the products are vpmuludq on the even and odd 32-bit lanes, merged with masked blends, and
// the 16 results are transposed to element order at the end. Integer arithmetic only: the words
// are exactly detail::philox_block's (tests/cpp/test_philox.cpp checks every lane, the carry of the
// 64-bit block counter across lanes included).
#pragma once

#include <cstdint>

#include "cpu_isa.h"
#include "voxaug/detail/philox.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#include <immintrin.h>
#define VOXAUG_PHILOX_AVX512 1
#else
#define VOXAUG_PHILOX_AVX512 0
#endif

namespace voxaug::detail {

// words[4 b + j] = component j (x, y, z, w) of philox_block(seed, first_block + b, sample, stream)
// for b in [0, nblocks): the scalar reference (and the fallback without AVX-512).
inline void philox_words_scalar(uint64_t seed, uint64_t first_block, int64_t nblocks,
                                uint32_t sample, PhiloxStream stream, uint32_t* words) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const U32x4 r = philox_block(seed, first_block + static_cast<uint64_t>(b), sample, stream);
    words[4 * b] = r.x;
    words[4 * b + 1] = r.y;
    words[4 * b + 2] = r.z;
    words[4 * b + 3] = r.w;
  }
}

#if VOXAUG_PHILOX_AVX512
// hi / lo halves of m * v for 16 lanes: even lanes from vpmuludq of v, odd lanes from vpmuludq of
// v >> 32 (each 64-bit product's high word already sits in the odd lane).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline void
philox_mulhilo_avx512(__m512i v, __m512i m, __m512i* hi, __m512i* lo) {
  // (zero-masked forms with a full mask: the plain instructions, but GCC 12 warns, falsely, that
  // the unmasked intrinsics' undefined pass-through operand may be used uninitialised)
  constexpr __mmask8 all = 0xFF;
  const __m512i ev = _mm512_maskz_mul_epu32(all, v, m);
  const __m512i od = _mm512_maskz_mul_epu32(all, _mm512_maskz_srli_epi64(all, v, 32), m);
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_maskz_srli_epi64(all, ev, 32), od);
  *lo = _mm512_mask_blend_epi32(0xAAAA, ev, _mm512_maskz_slli_epi64(all, od, 32));
}

// The same words, 16 blocks per iteration. Call only where cpu_isa() is Avx512.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) inline void philox_words_avx512(
    uint64_t seed, uint64_t first_block, int64_t nblocks, uint32_t sample, PhiloxStream stream,
    uint32_t* words) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i zv = _mm512_set1_epi32(static_cast<int>(sample));
  const __m512i wv = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(stream)));
  const __m512i key0 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(seed)));
  const __m512i key1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(seed >> 32)));
  const __m512i w0 = _mm512_set1_epi32(static_cast<int>(kW0));
  const __m512i w1 = _mm512_set1_epi32(static_cast<int>(kW1));
  // A last partial vector is computed whole and stored under a mask (the callers' rows are
  // often shorter than 16 blocks).
  for (int64_t b = 0; b < nblocks; b += 16) {
    const uint64_t base = first_block + static_cast<uint64_t>(b);
    const __m512i base_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base)));
    __m512i x = _mm512_add_epi32(base_lo, iota);  // low word of base + lane
    // high word: base's, plus one in the lanes where the low word wrapped
    const __mmask16 carry = _mm512_cmplt_epu32_mask(x, base_lo);
    const __m512i base_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
    __m512i y = _mm512_mask_add_epi32(base_hi, carry, base_hi, _mm512_set1_epi32(1));
    __m512i z = zv, w = wv, k0 = key0, k1 = key1;
#pragma GCC unroll 10
    for (int r = 0; r < 10; ++r) {
      __m512i hi0, lo0, hi1, lo1;
      philox_mulhilo_avx512(x, m0, &hi0, &lo0);
      philox_mulhilo_avx512(z, m1, &hi1, &lo1);
      x = _mm512_ternarylogic_epi32(hi1, y, k0, 0x96);  // hi1 ^ y ^ k0
      z = _mm512_ternarylogic_epi32(hi0, w, k1, 0x96);  // hi0 ^ w ^ k1
      y = lo1;
      w = lo0;
      k0 = _mm512_add_epi32(k0, w0);
      k1 = _mm512_add_epi32(k1, w1);
    }
    // 4 x 16 -> 16 x 4: words of block i at 4 i .. 4 i + 3 (zero-masked forms with full masks,
    // as above).
    constexpr __mmask16 a16 = 0xFFFF;
    constexpr __mmask8 a8 = 0xFF;
    const __m512i t0 = _mm512_maskz_unpacklo_epi32(a16, x, y);
    const __m512i t1 = _mm512_maskz_unpackhi_epi32(a16, x, y);
    const __m512i t2 = _mm512_maskz_unpacklo_epi32(a16, z, w);
    const __m512i t3 = _mm512_maskz_unpackhi_epi32(a16, z, w);
    const __m512i u0 = _mm512_maskz_unpacklo_epi64(a8, t0, t2);  // blocks 0, 4, 8, 12
    const __m512i u1 = _mm512_maskz_unpackhi_epi64(a8, t0, t2);  // 1, 5, 9, 13
    const __m512i u2 = _mm512_maskz_unpacklo_epi64(a8, t1, t3);  // 2, 6, 10, 14
    const __m512i u3 = _mm512_maskz_unpackhi_epi64(a8, t1, t3);  // 3, 7, 11, 15
    const __m512i v0 = _mm512_maskz_shuffle_i32x4(a16, u0, u1, 0x44);  // 0, 4, 1, 5
    const __m512i v1 = _mm512_maskz_shuffle_i32x4(a16, u2, u3, 0x44);  // 2, 6, 3, 7
    const __m512i v2 = _mm512_maskz_shuffle_i32x4(a16, u0, u1, 0xEE);  // 8, 12, 9, 13
    const __m512i v3 = _mm512_maskz_shuffle_i32x4(a16, u2, u3, 0xEE);  // 10, 14, 11, 15
    const __m512i o0 = _mm512_maskz_shuffle_i32x4(a16, v0, v1, 0x88);  // 0 .. 3
    const __m512i o1 = _mm512_maskz_shuffle_i32x4(a16, v0, v1, 0xDD);  // 4 .. 7
    const __m512i o2 = _mm512_maskz_shuffle_i32x4(a16, v2, v3, 0x88);  // 8 .. 11
    const __m512i o3 = _mm512_maskz_shuffle_i32x4(a16, v2, v3, 0xDD);  // 12 .. 15
    uint32_t* o = words + 4 * b;
    if (nblocks - b >= 16) {
      _mm512_storeu_si512(o, o0);
      _mm512_storeu_si512(o + 16, o1);
      _mm512_storeu_si512(o + 32, o2);
      _mm512_storeu_si512(o + 48, o3);
    } else {
      const int n = static_cast<int>(4 * (nblocks - b));  // words to store, < 64
      auto mask = [n](int k) {
        const int m = n - 16 * k;
        return static_cast<__mmask16>(m <= 0 ? 0u : m >= 16 ? 0xFFFFu : (1u << m) - 1u);
      };
      _mm512_mask_storeu_epi32(o, mask(0), o0);
      _mm512_mask_storeu_epi32(o + 16, mask(1), o1);
      _mm512_mask_storeu_epi32(o + 32, mask(2), o2);
      _mm512_mask_storeu_epi32(o + 48, mask(3), o3);
    }
  }
}
#endif

// The fastest of the two for this CPU.
inline void philox_words(uint64_t seed, uint64_t first_block, int64_t nblocks, uint32_t sample,
                         PhiloxStream stream, uint32_t* words) {
#if VOXAUG_PHILOX_AVX512
  if (cpu_isa() == CpuIsa::Avx512) {
    philox_words_avx512(seed, first_block, nblocks, sample, stream, words);
    return;
  }
#endif
  philox_words_scalar(seed, first_block, nblocks, sample, stream, words);
}

// Standard normals of blocks [first_block, first_block + nblocks): the blocks' words by
// philox_words into `words`, then Box-Muller on each pair in a loop that vectorises in the
// instruction-set clone it is inlined into: z[4 b + j] is normal4_stream's j-th normal of block
// first_block + b (the same functions, the same bits). `words` and `z` hold 4 nblocks values.
VOXAUG_FORCEINLINE void philox_normals(uint64_t seed, uint64_t first_block, int64_t nblocks,
                                       uint32_t sample, PhiloxStream stream, uint32_t* words,
                                       float* z) {
  philox_words(seed, first_block, nblocks, sample, stream, words);
  for (int64_t q = 0; q < 2 * nblocks; ++q)
    box_muller(words[2 * q], words[2 * q + 1], &z[2 * q], &z[2 * q + 1]);
}

}  // namespace voxaug::detail
