// voxaug: checking macros for CUDA runtime calls and kernel launches (library-internal).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "voxaug/error.h"

#define VOXAUG_CUDA_TRY(call)                                                                \
  do {                                                                                       \
    const cudaError_t voxaug_err_ = (call);                                                  \
    if (voxaug_err_ != cudaSuccess) {                                                        \
      (void)cudaGetLastError();                                                              \
      throw ::voxaug::CudaError(std::string("CUDA error ") + cudaGetErrorName(voxaug_err_) + \
                                    " (" + cudaGetErrorString(voxaug_err_) + ") in " #call,  \
                                static_cast<int>(voxaug_err_), __FILE__, __LINE__);          \
    }                                                                                        \
  } while (0)

// After every kernel launch: reports configuration errors without synchronising.
#define VOXAUG_CUDA_CHECK_LAUNCH() VOXAUG_CUDA_TRY(cudaGetLastError())

namespace voxaug::detail {
// Makes `device` current for the scope and restores the previous device after.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int device) {
    VOXAUG_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) VOXAUG_CUDA_TRY(cudaSetDevice(device));
  }
  ~CudaDeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};
}  // namespace voxaug::detail
