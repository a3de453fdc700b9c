// voxaug: per-voxel rule of coarse dropout (include/voxaug/dropout.h), shared by the CPU and
// CUDA backends.
#pragma once

#include <cstdint>
#include <type_traits>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/philox.h"
#include "voxaug/dropout.h"

namespace voxaug::detail {

// True when (d, h, w) lies in one of the `count` boxes (rows of 6: d0, h0, w0, d1, h1, w1).
VOXAUG_HD VOXAUG_FORCEINLINE bool dropout_in_box(const int64_t* boxes, int64_t count, int64_t d,
                                                 int64_t h, int64_t w) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t* b = boxes + 6 * k;
    if (d >= b[0] && d < b[3] && h >= b[1] && h < b[4] && w >= b[2] && w < b[5]) return true;
  }
  return false;
}

// The random word of element e of global sample `sample` (one Philox block per 4 elements).
VOXAUG_HD VOXAUG_FORCEINLINE uint32_t dropout_word(const U32x4& r, int64_t e) {
  switch (e & 3) {
    case 0: return r.x;
    case 1: return r.y;
    case 2: return r.z;
    default: return r.w;
  }
}

// The fill value: constant, or lo + (hi - lo) * u in float64 with u the element's uniform.
VOXAUG_HD VOXAUG_FORCEINLINE double dropout_fill_value(DropoutFill mode, double value, double lo,
                                                       double hi, uint32_t word) {
  if (mode == DropoutFill::Constant) return value;
  return fadd(lo, fmul(fsub(hi, lo), static_cast<double>(uniform01(word))));
}

// float64 -> storage type T: floats round to nearest (half / bfloat16 through float32);
// integers clamp to the type's range and truncate towards zero (NaN -> 0).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE T dropout_to_storage(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) {
    return store_as<T, float>(static_cast<float>(v));
  } else {
    if (!(v == v)) return T(0);
    // The type's range without std::numeric_limits (not callable in device code): all ones
    // shifted for the maximum, two's complement for the minimum.
    constexpr bool is_signed = T(-1) < T(0);
    constexpr T max = is_signed ? T((uint64_t(1) << (8 * sizeof(T) - 1)) - 1) : T(~T(0));
    constexpr T min = is_signed ? T(-max - 1) : T(0);
    if (v <= static_cast<double>(min)) return min;
    // int64's maximum is not a double: >= 2^63 saturates.
    if (v >= static_cast<double>(max)) return max;
    return static_cast<T>(v);
  }
}

}  // namespace voxaug::detail
