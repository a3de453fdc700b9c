// voxaug: the one dtype dispatch of the pointwise chain, shared by the CPU and CUDA
// backends (each instantiates it with its own launcher).
#pragma once

#include <string>
#include <type_traits>

#include "../common/stream_store.h"
#include "voxaug/detail/pointwise.h"
#include "voxaug/error.h"
#include "voxaug/types.h"

namespace voxaug::detail {

template <class T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<T>) for a floating storage dtype.
template <class Fn>
void visit_float_dtype(DType t, const char* arg, Fn&& fn) {
  switch (t) {
    case DType::Float64: return fn(Tag<double>{});
    case DType::Float32: return fn(Tag<float>{});
    case DType::Float16: return fn(Tag<half_t>{});
    case DType::BFloat16: return fn(Tag<bfloat16_t>{});
    default:
      VOXAUG_FAIL(std::string(arg) + " must be float64, float32, float16 or bfloat16, got " +
                  dtype_name(t));
  }
}

// Calls fn(Tag<T>) for an image input dtype.
template <class Fn>
void visit_image_dtype(DType t, const char* arg, Fn&& fn) {
  switch (t) {
    case DType::UInt8: return fn(Tag<uint8_t>{});
    case DType::Int16: return fn(Tag<int16_t>{});
    case DType::Int32: return fn(Tag<int32_t>{});
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16: return visit_float_dtype(t, arg, fn);
    default:
      VOXAUG_FAIL(std::string(arg) +
                  " must be float64, float32, float16, bfloat16, uint8, int16 "
                  "or int32, got " +
                  dtype_name(t));
  }
}

// CPU chains stream their output (stream_store.h) when it is a separate, dense buffer of at
// least kStreamOutputBytes; in place, the lines are in the cache already.
inline bool stream_output(const VolumeView& in, const VolumeView& out, size_t elem_size) {
  return out.device == Device::CPU && out.data != in.data && make_indexer(out).dense &&
         out.numel() * int64_t(elem_size) >= kStreamOutputBytes;
}

// The chain for one input storage type TIn (its output dtype checked and dispatched here).
template <class Launcher, class TIn>
void chain_forward_in(const VolumeView& in, const VolumeView& out, const ChainParams& p,
                      cudaStream_t stream) {
  const int64_t spatial = in.shape[2] * in.shape[3] * in.shape[4];
  if constexpr (std::is_same_v<TIn, double>) {
    VOXAUG_EXPECTS(out.dtype == DType::Float64,
                   std::string("output dtype must be float64 for a float64 input, got ") +
                       dtype_name(out.dtype));
    ChainForward<double, double, double> f{static_cast<const double*>(in.data),
                                           static_cast<double*>(out.data),
                                           make_indexer(in),
                                           make_indexer(out),
                                           in.sample_numel(),
                                           spatial,
                                           p};
    f.stream = stream_output(in, out, sizeof(double));
    Launcher::launch(f, in.batch(), stream);
  } else {
    VOXAUG_EXPECTS(
        out.dtype != DType::Float64,
        std::string("output dtype float64 needs a float64 input, got ") + dtype_name(in.dtype));
    visit_float_dtype(out.dtype, "output", [&](auto out_tag) {
      using TOut = typename decltype(out_tag)::type;
      if constexpr (!std::is_same_v<TOut, double>) {
        ChainForward<TIn, TOut, float> f{static_cast<const TIn*>(in.data),
                                         static_cast<TOut*>(out.data),
                                         make_indexer(in),
                                         make_indexer(out),
                                         in.sample_numel(),
                                         spatial,
                                         p};
        f.stream = stream_output(in, out, sizeof(TOut));
        Launcher::launch(f, in.batch(), stream);
      }
    });
  }
}

template <class Launcher>
void chain_forward(const VolumeView& in, const VolumeView& out, const ChainParams& p,
                   cudaStream_t stream) {
  visit_image_dtype(in.dtype, "input", [&](auto in_tag) {
    chain_forward_in<Launcher, typename decltype(in_tag)::type>(in, out, p, stream);
  });
}

template <class Launcher, class T>
void chain_backward_in(const VolumeView& grad_out, const VolumeView& in, const VolumeView& grad_in,
                       const ChainParams& p, cudaStream_t stream) {
  const int64_t spatial = in.shape[2] * in.shape[3] * in.shape[4];
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  ChainBackward<T, Acc> f{static_cast<const T*>(grad_out.data),
                          static_cast<const T*>(in.data),
                          static_cast<T*>(grad_in.data),
                          make_indexer(grad_out),
                          make_indexer(in),
                          make_indexer(grad_in),
                          in.sample_numel(),
                          spatial,
                          p};
  Launcher::launch(f, in.batch(), stream);
}

template <class Launcher>
void chain_backward(const VolumeView& grad_out, const VolumeView& in, const VolumeView& grad_in,
                    const ChainParams& p, cudaStream_t stream) {
  visit_float_dtype(in.dtype, "input", [&](auto tag) {
    chain_backward_in<Launcher, typename decltype(tag)::type>(grad_out, in, grad_in, p, stream);
  });
}

// The CPU chain per input storage type, each explicitly instantiated in its own translation unit
// (kernels/intensity/cpu/chain_*.cpp, through chain_cpu_entry.h) so that the ISA clones of the
// (input, output) pairs compile in parallel; the CPU entry points call these.
template <class TIn>
void chain_forward_cpu(const VolumeView& in, const VolumeView& out, const ChainParams& p);
template <class T>
void chain_backward_cpu(const VolumeView& grad_out, const VolumeView& in,
                        const VolumeView& grad_in, const ChainParams& p);

}  // namespace voxaug::detail
