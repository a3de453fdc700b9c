// voxaug: dtype helpers, view helpers and CUDA runtime queries.
#include <mutex>
#include <sstream>
#include <vector>

#include "device.h"
#include "voxaug/config.h"
#include "voxaug/error.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include "cuda_check.cuh"
#endif

namespace voxaug {

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::Float64: return "float64";
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::UInt8: return "uint8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
  }
  return "unknown";
}

int64_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int16: return 2;
    case DType::UInt8: return 1;
  }
  return 0;
}

bool VolumeView::sample_contiguous() const noexcept {
  int64_t expected = 1;
  for (int k = 4; k >= 1; --k) {
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}

std::string VolumeView::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << (device == Device::CUDA ? " cuda:" : " cpu");
  if (device == Device::CUDA) os << device_index;
  os << " shape (" << shape[0] << ", " << shape[1] << ", " << shape[2] << ", " << shape[3] << ", "
     << shape[4] << ")";
  return os.str();
}

VolumeView contiguous_view(void* data, DType dtype, Device device, int64_t n, int64_t c, int64_t d,
                           int64_t h, int64_t w, int device_index) {
  VolumeView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.device_index = device_index;
  const int64_t sizes[5] = {n, c, d, h, w};
  int64_t stride = 1;
  for (int k = 4; k >= 0; --k) {
    VOXAUG_EXPECTS(sizes[k] >= 0, "contiguous_view: sizes must be non-negative");
    v.shape[k] = sizes[k];
    v.strides[k] = stride;
    stride *= sizes[k] > 0 ? sizes[k] : 1;
  }
  return v;
}

bool built_with_cuda() noexcept {
  return VOXAUG_WITH_CUDA != 0;
}

int cuda_device_count() noexcept {
#if VOXAUG_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

#if VOXAUG_WITH_CUDA
namespace detail {
void check_device_pointer(const void* ptr, int device, const std::string& what) {
  VOXAUG_EXPECTS(ptr != nullptr, what + " must not be null");
  cudaPointerAttributes attr{};
  VOXAUG_CUDA_TRY(cudaPointerGetAttributes(&attr, ptr));
  VOXAUG_EXPECTS((attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) &&
                     attr.device == device,
                 what + " must be device memory on cuda:" + std::to_string(device));
}

int cuda_sm_count(int device) {
  static std::mutex mu;
  static std::vector<int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(cache.size())) cache.resize(device + 1, 0);
  if (cache[device] == 0)
    VOXAUG_CUDA_TRY(cudaDeviceGetAttribute(&cache[device], cudaDevAttrMultiProcessorCount, device));
  return cache[device];
}
}  // namespace detail
#endif

}  // namespace voxaug
