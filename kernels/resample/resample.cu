// voxaug: CUDA backend of resample (the math is detail/resample.h, shared with the CPU).
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "resample_dispatch.h"

namespace voxaug::detail {

void resample_cuda(const ResampleParams& p, int64_t batch, bool use_double, int device,
                   cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  resample_run<CudaLauncher>(p, batch, use_double, stream);
}

}  // namespace voxaug::detail
