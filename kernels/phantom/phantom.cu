// voxaug: CUDA backend of the phantom: the shared functors through the generic launcher.
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "phantom_kernels.h"

namespace voxaug::detail {

void phantom_params_cuda(const PhantomParamsFunctor& f, int64_t batch, int device,
                         cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(f.table, device, "table");
  CudaLauncher::launch(f, batch, stream);
}

void phantom_render_cuda(const PhantomRenderFunctor& f, int64_t batch, int device,
                         cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  CudaLauncher::launch(f, batch, stream);
}

}  // namespace voxaug::detail
