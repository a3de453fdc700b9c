// voxaug: library-internal CUDA runtime helpers callable from host-compiled code
// (defined in kernels/common/runtime.cpp; only in builds with CUDA).
#pragma once

#include <string>

namespace voxaug::detail {
#if VOXAUG_WITH_CUDA
// Throws voxaug::Error unless `ptr` is device (or managed) memory of `device`.
void check_device_pointer(const void* ptr, int device, const std::string& what);
// Multiprocessor count of `device`, cached.
int cuda_sm_count(int device);
#endif
}  // namespace voxaug::detail
