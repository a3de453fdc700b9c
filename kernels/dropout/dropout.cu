// voxaug: CUDA backend of coarse dropout: the shared functor through the generic launcher.
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "dropout_kernels.h"

namespace voxaug::detail {

#define VOXAUG_DROPOUT_CUDA(T)                                                    \
  void coarse_dropout_cuda(const DropoutFunctor<T>& f, int64_t batch, int device, \
                           cudaStream_t stream) {                                 \
    CudaDeviceGuard guard(device);                                                \
    CudaLauncher::launch(f, batch, stream);                                       \
  }
VOXAUG_DROPOUT_CUDA(double)
VOXAUG_DROPOUT_CUDA(float)
VOXAUG_DROPOUT_CUDA(half_t)
VOXAUG_DROPOUT_CUDA(bfloat16_t)
VOXAUG_DROPOUT_CUDA(uint8_t)
VOXAUG_DROPOUT_CUDA(int16_t)
VOXAUG_DROPOUT_CUDA(int32_t)
VOXAUG_DROPOUT_CUDA(int64_t)
#undef VOXAUG_DROPOUT_CUDA

}  // namespace voxaug::detail
