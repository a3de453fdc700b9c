// voxaug: storage <-> compute conversions, identical on host and device.
// float16 and bfloat16 are converted by bit manipulation with round-to-nearest-even
// (the same results as __float2half_rn / __float2bfloat16_rn and torch's casts).
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/types.h"

namespace voxaug::detail {

struct half_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

VOXAUG_HD VOXAUG_FORCEINLINE float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24, exact in float.
    const float v = fmul(static_cast<float>(mant), 5.9604644775390625e-8f);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

VOXAUG_HD VOXAUG_FORCEINLINE uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or nan (keep nan quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  }
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {               // below the smallest normal half (2^-14): subnormal or zero
    if (a < 0x33000000u) return sign;  // < 2^-25 rounds to zero (ties to even: 0)
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24 for e in [102, 112]
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = a - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carry into exponent is correct
  return static_cast<uint16_t>(sign | r);
}

VOXAUG_HD VOXAUG_FORCEINLINE float bf16_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

VOXAUG_HD VOXAUG_FORCEINLINE uint16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // nan
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Storage type -> compute type (float, or double for float64 data).
template <class Acc, class T>
VOXAUG_HD VOXAUG_FORCEINLINE Acc load_as(T v) {
  return static_cast<Acc>(v);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE float load_as<float, half_t>(half_t v) {
  return half_to_float(v.bits);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE float load_as<float, bfloat16_t>(bfloat16_t v) {
  return bf16_to_float(v.bits);
}

template <class T, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE T store_as(Acc v) {
  return static_cast<T>(v);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE half_t store_as<half_t, float>(float v) {
  return half_t{float_to_half(v)};
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE bfloat16_t store_as<bfloat16_t, float>(float v) {
  return bfloat16_t{float_to_bf16(v)};
}

// Storage access by run-time dtype (tensors of one launch may differ in dtype), computing in Acc.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc load_dyn(const void* base, DType t, int64_t off) {
  switch (t) {
    case DType::Float64: return static_cast<Acc>(static_cast<const double*>(base)[off]);
    case DType::Float32: return static_cast<Acc>(static_cast<const float*>(base)[off]);
    case DType::Float16:
      return static_cast<Acc>(half_to_float(static_cast<const uint16_t*>(base)[off]));
    case DType::BFloat16:
      return static_cast<Acc>(bf16_to_float(static_cast<const uint16_t*>(base)[off]));
    case DType::UInt8: return static_cast<Acc>(static_cast<const uint8_t*>(base)[off]);
    case DType::Int16: return static_cast<Acc>(static_cast<const int16_t*>(base)[off]);
    case DType::Int32: return static_cast<Acc>(static_cast<const int32_t*>(base)[off]);
    case DType::Int64: return static_cast<Acc>(static_cast<const int64_t*>(base)[off]);
  }
  return Acc(0);
}
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void store_dyn(void* base, DType t, int64_t off, Acc v) {
  switch (t) {
    case DType::Float64: static_cast<double*>(base)[off] = static_cast<double>(v); return;
    case DType::Float32: static_cast<float*>(base)[off] = static_cast<float>(v); return;
    case DType::Float16:
      static_cast<uint16_t*>(base)[off] = float_to_half(static_cast<float>(v));
      return;
    case DType::BFloat16:
      static_cast<uint16_t*>(base)[off] = float_to_bf16(static_cast<float>(v));
      return;
    default: return;  // integer outputs: callers copy (resample nearest) or never write them
  }
}
}  // namespace voxaug::detail
