// Shared helpers of the C++ tests: volume shapes and views, and (CUDA builds) device buffers
// and the "is there a device" check the CUDA twin tests skip on.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "voxaug/config.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace voxaug_test {

struct Vol {
  int64_t n, c, d, h, w;
  int64_t numel() const { return n * c * d * h * w; }
};

inline voxaug::VolumeView view(void* p, voxaug::DType t, const Vol& v,
                               voxaug::Device dev = voxaug::Device::CPU) {
  return voxaug::contiguous_view(p, t, dev, v.n, v.c, v.d, v.h, v.w);
}

#if VOXAUG_WITH_CUDA
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

inline bool have_device() {
  return voxaug::cuda_device_count() > 0;
}

// Owns a device allocation (at least one byte).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { (void)cudaMalloc(&p, bytes ? bytes : 1); }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> to_host(size_t count) const {
    std::vector<T> v(count);
    EXPECT_EQ(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};
#endif

}  // namespace voxaug_test
