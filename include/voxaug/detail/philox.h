// voxaug: Philox4x32-10 counter-based random numbers (Salmon et al., SC'11), one
// implementation for the host and the device.
//
// Streams are keyed by a 64-bit seed and addressed by counter words, never by thread or
// grid shape, so a value depends only on (seed, sample, element): the same on the CPU and
// on CUDA, in a batch of 1 or of 8, whatever the launch configuration.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/fmath.h"

namespace voxaug::detail {

struct U32x4 {
  uint32_t x, y, z, w;
};

VOXAUG_HD VOXAUG_FORCEINLINE void mulhilo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
#if VOXAUG_DEVICE_PASS
  *hi = __umulhi(a, b);
  *lo = a * b;
#else
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
#endif
}

// Philox4x32 with 10 rounds on counter c and key (k0, k1).
VOXAUG_HD VOXAUG_FORCEINLINE U32x4 philox4x32_10(U32x4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if VOXAUG_DEVICE_PASS
#pragma unroll
#elif defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC unroll 10
#endif
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo32(kM0, c.x, &hi0, &lo0);
    mulhilo32(kM1, c.z, &hi1, &lo1);
    c = U32x4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Counter layout used across voxaug: (block lo, block hi, sample, stream).
// stream 0: per-element draws (block = element / 4); stream 1: per-sample parameters;
// stream 2: per-(sample, channel) parameters (block = channel); stream 3: host-side parameter
// draws of the spatial transforms (block = k / 2 for the k-th float64 uniform); stream 4: a
// second per-element stream for ops that need two numbers per element (Rician noise).
enum class PhiloxStream : uint32_t {
  Element = 0,
  Sample = 1,
  Channel = 2,
  Params = 3,
  ElementAux = 4,
  Shuffle = 5  // coarse shuffle's sort keys
};

VOXAUG_HD VOXAUG_FORCEINLINE U32x4 philox_block(uint64_t seed, uint64_t block, uint32_t sample,
                                                PhiloxStream stream) {
  return philox4x32_10(U32x4{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                             sample, static_cast<uint32_t>(stream)},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1): the top 24 bits, exactly representable.
VOXAUG_HD VOXAUG_FORCEINLINE float uniform01(uint32_t r) {
  return static_cast<float>(r >> 8) * (1.0f / 16777216.0f);
}
// Uniform in (0, 1]: never zero, so log() is finite.
VOXAUG_HD VOXAUG_FORCEINLINE float uniform01_open0(uint32_t r) {
  return static_cast<float>((r >> 8) + 1u) * (1.0f / 16777216.0f);
}
// Uniform in [lo, hi).
VOXAUG_HD VOXAUG_FORCEINLINE float uniform_range(uint32_t r, float lo, float hi) {
  return fadd(lo, fmul(fsub(hi, lo), uniform01(r)));
}

// Uniform float64 in [0, 1) with 53 random bits, from two uint32 draws.
VOXAUG_HD VOXAUG_FORCEINLINE double uniform01_f64(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (static_cast<uint64_t>(hi) << 21) ^ (static_cast<uint64_t>(lo) >> 11);
  return static_cast<double>(bits & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Box-Muller: two independent standard normals from two uint32 draws.
VOXAUG_HD VOXAUG_FORCEINLINE void box_muller(uint32_t a, uint32_t b, float* z0, float* z1) {
  const float radius = fsqrt(fmul(-2.0f, log_unit(uniform01_open0(a))));
  float s, c;
  sincospi_0_2(fmul(2.0f, uniform01(b)), &s, &c);
  *z0 = fmul(radius, c);
  *z1 = fmul(radius, s);
}

// Four standard normals for elements 4*block .. 4*block+3 of (seed, sample).
VOXAUG_HD VOXAUG_FORCEINLINE void normal4(uint64_t seed, uint64_t block, uint32_t sample,
                                          float z[4]) {
  const U32x4 r = philox_block(seed, block, sample, PhiloxStream::Element);
  box_muller(r.x, r.y, &z[0], &z[1]);
  box_muller(r.z, r.w, &z[2], &z[3]);
}

// normal4 on another per-element stream (same Box-Muller, same element -> number mapping).
VOXAUG_HD VOXAUG_FORCEINLINE void normal4_stream(uint64_t seed, uint64_t block, uint32_t sample,
                                                 PhiloxStream stream, float z[4]) {
  const U32x4 r = philox_block(seed, block, sample, stream);
  box_muller(r.x, r.y, &z[0], &z[1]);
  box_muller(r.z, r.w, &z[2], &z[3]);
}

}  // namespace voxaug::detail
