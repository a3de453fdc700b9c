// voxaug torch_ext: at::Tensor -> voxaug::VolumeView, dtype mapping, argument checks, the
// current stream, and the mapping of voxaug errors to torch errors (shared by every op file).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <string>

#include "voxaug/error.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace voxaug::torch_ext {

inline DType to_voxaug_dtype(c10::ScalarType t, const char* arg) {
  switch (t) {
    case c10::kDouble: return DType::Float64;
    case c10::kFloat: return DType::Float32;
    case c10::kHalf: return DType::Float16;
    case c10::kBFloat16: return DType::BFloat16;
    case c10::kByte: return DType::UInt8;
    case c10::kShort: return DType::Int16;
    case c10::kInt: return DType::Int32;
    case c10::kLong: return DType::Int64;
    default:
      TORCH_CHECK_VALUE(
          false, arg, " has unsupported dtype ", t,
          "; expected float64, float32, float16, bfloat16, uint8, int16, int32 or int64");
  }
}

// `t` must be 5-D (N, C, D, H, W) on the CPU or CUDA (or meta, for shape functions).
inline void check_5d(const at::Tensor& t, const char* arg, bool allow_meta = false) {
  TORCH_CHECK_VALUE(t.defined(), arg, " must be a defined tensor");
  TORCH_CHECK_VALUE(t.dim() == 5, arg, " must be 5-D (N, C, D, H, W), got ", t.dim(),
                    "-D with shape ", t.sizes());
  TORCH_CHECK_VALUE(t.device().is_cpu() || t.device().is_cuda() || (allow_meta && t.is_meta()), arg,
                    " must be a CPU or CUDA tensor, got ", t.device());
}

inline VolumeView to_view(const at::Tensor& t, const char* arg) {
  check_5d(t, arg);
  VolumeView v;
  v.data = t.numel() ? const_cast<void*>(t.data_ptr()) : nullptr;
  v.dtype = to_voxaug_dtype(t.scalar_type(), arg);
  v.device = t.is_cuda() ? Device::CUDA : Device::CPU;
  v.device_index = t.is_cuda() ? t.get_device() : 0;
  for (int k = 0; k < 5; ++k) {
    v.shape[k] = t.size(k);
    v.strides[k] = t.stride(k);
  }
  return v;
}

// The stream the op runs on: torch's current stream of the tensor's device (null on the CPU).
inline cudaStream_t current_stream(const at::Tensor& t) {
#if VOXAUG_WITH_CUDA
  if (t.is_cuda()) return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
#endif
  TORCH_CHECK(!t.is_cuda(), "this voxaug build has no CUDA backend");
  return nullptr;
}

// Runs a core call; voxaug::Error (bad arguments) becomes ValueError, CudaError RuntimeError.
template <class F>
void call_core(F&& f) {
  try {
    f();
  } catch (const voxaug::CudaError& e) {
    TORCH_CHECK(false, e.what());
  } catch (const voxaug::Error& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

}  // namespace voxaug::torch_ext
