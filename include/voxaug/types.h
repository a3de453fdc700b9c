// voxaug: plain views over batched volumes. No ownership, no LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "voxaug/config.h"

namespace voxaug {

enum class DType : int8_t { Float64, Float32, Float16, BFloat16, UInt8, Int16, Int32, Int64 };
enum class Device : int8_t { CPU, CUDA };

const char* dtype_name(DType t) noexcept;
int64_t dtype_size(DType t) noexcept;
inline bool is_floating(DType t) noexcept {
  return t == DType::Float64 || t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16;
}

// A batch of volumes laid out as (N, C, D, H, W). Strides are in elements and may be
// anything (non-contiguous views, broadcast batch); `data` points at element (0,0,0,0,0)
// on `device`. A view never owns memory.
struct VolumeView {
  void* data = nullptr;
  DType dtype = DType::Float32;
  Device device = Device::CPU;
  int device_index = 0;
  int64_t shape[5] = {0, 0, 0, 0, 0};
  int64_t strides[5] = {0, 0, 0, 0, 0};

  int64_t batch() const noexcept { return shape[0]; }
  // Elements in one sample: C * D * H * W.
  int64_t sample_numel() const noexcept { return shape[1] * shape[2] * shape[3] * shape[4]; }
  int64_t numel() const noexcept { return shape[0] * sample_numel(); }
  // True when each sample is one dense C-order block (the batch stride may be anything).
  bool sample_contiguous() const noexcept;
  std::string describe() const;
};

// A dense C-order view of an (N, C, D, H, W) buffer.
VolumeView contiguous_view(void* data, DType dtype, Device device, int64_t n, int64_t c, int64_t d,
                           int64_t h, int64_t w, int device_index = 0);

}  // namespace voxaug
