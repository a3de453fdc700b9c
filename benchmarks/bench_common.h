// voxaug benchmarks: the pieces every benchmark binary shares -- CUDA error checks, RAII
// stream / event, and main() (register CPU cases, CUDA cases only when a device exists).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "voxaug/config.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>

#define BENCH_CUDA_TRY(call)                                                                     \
  do {                                                                                           \
    const cudaError_t bench_err_ = (call);                                                       \
    if (bench_err_ != cudaSuccess)                                                               \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorName(bench_err_) + " (" + \
                               cudaGetErrorString(bench_err_) + ")");                            \
  } while (0)

namespace voxaug_bench {

class CudaStream {
 public:
  CudaStream() { BENCH_CUDA_TRY(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(s_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// An owning device allocation (benchmark inputs and outputs; made outside the timed loop).
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { BENCH_CUDA_TRY(cudaMalloc(&p, bytes ? bytes : 1)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

class CudaEvent {
 public:
  CudaEvent() { BENCH_CUDA_TRY(cudaEventCreate(&e_)); }
  ~CudaEvent() { cudaEventDestroy(e_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

}  // namespace voxaug_bench
#endif  // VOXAUG_WITH_CUDA

namespace voxaug_bench {

// The benchmark binary's main: CPU cases always, CUDA cases only with a visible device.
inline int run_main(int argc, char** argv, const char* name, void (*register_cpu)(),
                    void (*register_cuda)(), void (*release_cuda)()) {
  register_cpu();
  const int devices = voxaug::cuda_device_count();
  if (devices > 0 && register_cuda) register_cuda();
  if (devices == 0)
    std::fprintf(stderr, "%s: %s: CUDA cases not registered\n", name,
                 voxaug::built_with_cuda() ? "no CUDA device visible" : "built without CUDA");
  benchmark::AddCustomContext("cuda_devices", std::to_string(devices));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (devices > 0 && release_cuda) release_cuda();
  return 0;
}

}  // namespace voxaug_bench
