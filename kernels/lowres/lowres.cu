// voxaug: CUDA backend of the simulated low resolution: the shared functor through the
// generic launcher (one launch per batch, per-sample low-resolution grids).
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "lowres_dispatch.h"
#include "lowres_kernels.h"

namespace voxaug::detail {

void simulate_low_resolution_cuda(const LowresLaunch& l, int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  lowres_visit(l.in_dtype, l.out_dtype, [&](auto ti, auto to) {
    using T = decltype(ti);
    using O = decltype(to);
    CudaLauncher::launch(make_lowres_functor<T, O>(l), l.batch, stream);
  });
}

}  // namespace voxaug::detail
