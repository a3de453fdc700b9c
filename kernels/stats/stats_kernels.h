// voxaug: pieces of the stats family shared by the OpenMP (stats.cpp) and CUDA (stats.cu)
// backends: dtype dispatch, the apply functor, and the backend entry points.
#pragma once

#include <string>
#include <type_traits>

#include "voxaug/detail/stats.h"
#include "voxaug/error.h"
#include "voxaug/types.h"

namespace voxaug::detail {

template <class T>
struct StatTag {
  using type = T;
};

// Calls fn(StatTag<T>) for an input dtype of the stats family.
template <class Fn>
void visit_stat_input(DType t, const char* arg, Fn&& fn) {
  switch (t) {
    case DType::Float64: return fn(StatTag<double>{});
    case DType::Float32: return fn(StatTag<float>{});
    case DType::Float16: return fn(StatTag<half_t>{});
    case DType::BFloat16: return fn(StatTag<bfloat16_t>{});
    case DType::UInt8: return fn(StatTag<uint8_t>{});
    case DType::Int16: return fn(StatTag<int16_t>{});
    case DType::Int32: return fn(StatTag<int32_t>{});
    default:
      VOXAUG_FAIL(std::string(arg) +
                  " must be float64, float32, float16, bfloat16, uint8, int16 or int32, got " +
                  dtype_name(t));
  }
}
// Calls fn(StatTag<T>) for an output dtype (floating).
template <class Fn>
void visit_stat_output(DType t, const char* arg, Fn&& fn) {
  switch (t) {
    case DType::Float64: return fn(StatTag<double>{});
    case DType::Float32: return fn(StatTag<float>{});
    case DType::Float16: return fn(StatTag<half_t>{});
    case DType::BFloat16: return fn(StatTag<bfloat16_t>{});
    default:
      VOXAUG_FAIL(std::string(arg) + " must be float64, float32, float16 or bfloat16, got " +
                  dtype_name(t));
  }
}

// Storage -> compute type.
template <class Acc, class T>
VOXAUG_HD VOXAUG_FORCEINLINE Acc stat_load(T v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) {
    return static_cast<Acc>(load_as<float>(v));
  } else {
    return static_cast<Acc>(v);
  }
}
template <class T, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE T stat_store(Acc v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) {
    return store_as<T>(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The apply pass, one item per element of a sample (launcher contract, launch_cpu.h).
template <class TIn, class TOut, class Acc>
struct StatApplyForward {
  StatApply p;
  const TIn* in;
  TOut* out;
  Indexer ix_in, ix_out;
  int64_t sample_numel;

  struct State {};
  int64_t items() const { return sample_numel; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t segment(int64_t n, int64_t i) const {
    return n * p.per_sample + (p.per_sample > 1 ? i / p.per_segment : 0);
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t i) const {
    const StatCoef<Acc> c = stat_coef<Acc>(p, segment(n, i));
    const Acc x = stat_load<Acc>(in[ix_in.offset(n, i)]);
    out[ix_out.offset(n, i)] = stat_store<TOut>(stat_apply_value(c, x));
  }
};

// The piecewise linear map, one item per element of a sample (piecewise_value).
struct PiecewiseForward {
  const float* in;
  float* out;
  Indexer ix_in, ix_out;
  const double* table;
  int pieces;
  int64_t sample_numel;

  struct State {};
  int64_t items() const { return sample_numel; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t i) const {
    out[ix_out.offset(n, i)] =
        piecewise_value(table + n * (3 * pieces - 1), pieces, in[ix_in.offset(n, i)]);
  }
};

#if VOXAUG_WITH_CUDA
void piecewise_linear_cuda(const PiecewiseForward& f, int64_t batch, int device,
                           cudaStream_t stream);
void moments_cuda(const VolumeView& in, const StatSegments& sg, bool nonzero, double* out,
                  void* workspace, cudaStream_t stream);
int64_t percentiles_cuda_workspace_bytes(const VolumeView& in, const StatSegments& sg);
void percentiles_cuda(const VolumeView& in, const StatSegments& sg, const double* q, int64_t num_q,
                      double* out, void* workspace, int64_t workspace_bytes, cudaStream_t stream);
void stat_apply_cuda(const VolumeView& in, const VolumeView& out, const StatApply& p,
                     cudaStream_t stream);
#endif

}  // namespace voxaug::detail
