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
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // Masks instead of branches or selects, so that host loops of it vectorise. Subnormal or
  // zero: value = mant * 2^-24, exact. Exponent 31 (inf / nan, payload kept) rebiases to 255.
  const uint32_t special = 0u - static_cast<uint32_t>(exp == 0x1fu);
  const uint32_t subnormal = 0u - static_cast<uint32_t>(exp == 0u);
  const uint32_t sub = float_bits(fmul(static_cast<float>(static_cast<int32_t>(mant)),
                                       5.9604644775390625e-8f));
  const uint32_t normal = ((exp + 112u + (special & 112u)) << 23) | (mant << 13);
  return bits_float(sign | (normal & ~subnormal) | (sub & subnormal));
}

// Branch-free (selects only), so that loops of it vectorise on the host: the normal and the
// subnormal roundings are both computed in integers and the range picks one.
VOXAUG_HD VOXAUG_FORCEINLINE uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal half range: rebias the exponent (127 -> 15), round the 13 dropped bits to nearest
  // even (a carry into the exponent is correct); anything from 65520 up rounds to inf (0x7c00).
  const uint32_t r = a - 0x38000000u;
  const uint32_t normal = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
  // Below 2^-14: value = m * 2^(e - 150) with the implicit bit, i.e. m >> (126 - e) half
  // subnormal steps of 2^-24, rounded to nearest even; shifts past 25 give 0 (m < 2^24).
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t ec = e < 101u ? 101u : (e > 112u ? 112u : e);  // clamped: no shift past 25
  const uint32_t shift = 126u - ec;
  const uint32_t sub = (m + ((1u << (shift - 1u)) - 1u) + ((m >> shift) & 1u)) >> shift;
  uint32_t h = a < 0x38800000u ? sub : (a < 0x477ff000u ? normal : 0x7c00u);
  h = a > 0x7f800000u ? 0x7e00u : h;  // nan: quiet, non-zero payload
  return static_cast<uint16_t>(sign | h);
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
