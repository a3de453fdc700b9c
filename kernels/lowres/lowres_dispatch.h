// voxaug: the lowres family's launch description and its (input, output) dtype dispatch,
// shared by lowres.cpp and lowres.cu.
#pragma once

#include <cstdint>

#include "lowres_kernels.h"
#include "voxaug/error.h"
#include "voxaug/types.h"

namespace voxaug::detail {

struct LowresLaunch {
  const void* in;
  void* out;
  DType in_dtype, out_dtype;
  int64_t in_stride[5];
  Indexer out_ix;
  int64_t batch;
  int64_t size[4];
  const int64_t* low_size;
  bool nearest_up, align_corners;
};

template <class T, class O>
LowresFunctor<T, O> make_lowres_functor(const LowresLaunch& l) {
  LowresFunctor<T, O> f;
  f.in = static_cast<const T*>(l.in);
  f.out = static_cast<O*>(l.out);
  for (int a = 0; a < 5; ++a) f.in_stride[a] = l.in_stride[a];
  f.out_ix = l.out_ix;
  for (int a = 0; a < 4; ++a) f.size[a] = l.size[a];
  f.low_size = l.low_size;
  f.nearest_up = l.nearest_up;
  f.align_corners = l.align_corners;
  return f;
}

// Calls fn(T{}, O{}) with the storage types of the input and output dtypes.
template <class Fn>
void lowres_visit(DType in, DType out, Fn&& fn) {
  auto with_out = [&](auto ti) {
    switch (out) {
      case DType::Float32: fn(ti, float{}); return;
      case DType::Float16: fn(ti, half_t{}); return;
      case DType::BFloat16: fn(ti, bfloat16_t{}); return;
      case DType::Float64: fn(ti, double{}); return;
      default:
        VOXAUG_FAIL(std::string("out dtype must be float32, float16, bfloat16 or float64, got ") +
                    dtype_name(out));
    }
  };
  switch (in) {
    case DType::Float64: with_out(double{}); return;
    case DType::Float32: with_out(float{}); return;
    case DType::Float16: with_out(half_t{}); return;
    case DType::BFloat16: with_out(bfloat16_t{}); return;
    case DType::UInt8: with_out(uint8_t{}); return;
    case DType::Int16: with_out(int16_t{}); return;
    case DType::Int32: with_out(int32_t{}); return;
    case DType::Int64: with_out(int64_t{}); return;
  }
}

}  // namespace voxaug::detail
