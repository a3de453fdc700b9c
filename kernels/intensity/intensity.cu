// voxaug: CUDA backend of the pointwise chain. The math is detail/pointwise.h, shared
// with the CPU backend; this file only instantiates it with the CUDA launcher.
#include <string>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "chain_dispatch.h"

namespace voxaug::detail {

void check_device_pointer(const void* ptr, int device, const std::string& what) {
  VOXAUG_EXPECTS(ptr != nullptr, what + " must not be null");
  cudaPointerAttributes attr{};
  VOXAUG_CUDA_TRY(cudaPointerGetAttributes(&attr, ptr));
  VOXAUG_EXPECTS((attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) &&
                     attr.device == device,
                 what + " must be device memory on cuda:" + std::to_string(device));
}

void chain_forward_cuda(const VolumeView& in, const VolumeView& out, const ChainParams& p,
                        cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  chain_forward<CudaLauncher>(in, out, p, stream);
}

void chain_backward_cuda(const VolumeView& grad_out, const VolumeView& in,
                         const VolumeView& grad_in, const ChainParams& p, cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  chain_backward<CudaLauncher>(grad_out, in, grad_in, p, stream);
}

}  // namespace voxaug::detail
