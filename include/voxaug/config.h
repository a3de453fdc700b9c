// voxaug: compile-time configuration shared by the host and CUDA compilers.
#pragma once

#include <cstdint>

// Marks functions that are compiled for both the host (g++, OpenMP backend) and the
// device (nvcc). Per-element math lives once, in include/voxaug/detail/, behind this.
#if defined(__CUDACC__)
#define VOXAUG_HD __host__ __device__
#define VOXAUG_FORCEINLINE __forceinline__
#define VOXAUG_NOINLINE __noinline__
#else
#define VOXAUG_HD
#define VOXAUG_FORCEINLINE inline __attribute__((always_inline))
#define VOXAUG_NOINLINE __attribute__((noinline))
#endif

#if defined(__CUDA_ARCH__)
#define VOXAUG_DEVICE_PASS 1
#else
#define VOXAUG_DEVICE_PASS 0
#endif

// cudaStream_t without pulling the CUDA runtime headers into every consumer. This is the
// same declaration the CUDA runtime makes, so both may appear in one translation unit.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace voxaug {
// True when this build of voxaug::core contains the CUDA backend.
bool built_with_cuda() noexcept;
// Number of CUDA devices visible to this process (0 when built without CUDA or none exist).
// Does not throw: a missing driver reads as zero devices.
int cuda_device_count() noexcept;
}  // namespace voxaug
