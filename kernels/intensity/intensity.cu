// voxaug: CUDA backend of the pointwise chain. The math is detail/pointwise.h, shared
// with the CPU backend; this file only instantiates it with the CUDA launcher.
#include <string>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "chain_dispatch.h"

namespace voxaug::detail {

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

// ---- per-segment min / max ----
#include "voxaug/detail/minmax.h"

namespace voxaug::detail {
namespace {

__global__ void minmax_init(uint64_t* enc, int64_t segments) {
  for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < segments;
       s += int64_t(gridDim.x) * blockDim.x) {
    enc[2 * s] = ordered_bits(INFINITY);
    enc[2 * s + 1] = ordered_bits(-INFINITY);
  }
}

// blockIdx.y walks segments; each warp reduces its share and lane 0 commits with atomics
// on the order-preserving encoding (so the result does not depend on the order).
template <class T>
__global__ void __launch_bounds__(256)
    minmax_reduce(const T* data, Segments sg, int64_t segments, unsigned long long* enc) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t seg = blockIdx.y; seg < segments; seg += gridDim.y) {
    double a = INFINITY, b = -INFINITY;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < sg.per_segment;
         i += int64_t(gridDim.x) * blockDim.x) {
      const double v = load_as<Acc>(data[sg.offset(seg, i)]);
      a = v < a ? v : a;
      b = v > b ? v : b;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const double a2 = __shfl_xor_sync(0xffffffffu, a, off);
      const double b2 = __shfl_xor_sync(0xffffffffu, b, off);
      a = a2 < a ? a2 : a;
      b = b2 > b ? b2 : b;
    }
    if ((threadIdx.x & 31) == 0) {
      atomicMin(&enc[2 * seg], static_cast<unsigned long long>(ordered_bits(a)));
      atomicMax(&enc[2 * seg + 1], static_cast<unsigned long long>(ordered_bits(b)));
    }
  }
}

__global__ void minmax_decode(uint64_t* enc, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    // + 0.0: a zero extreme is +0 whichever zero a warp saw first (-0 and +0 compare equal,
    // and the encoding orders -0 below +0), as the CPU twin reports it
    const double v = from_ordered_bits(enc[i]) + 0.0;
    enc[i] = static_cast<uint64_t>(__double_as_longlong(v));
  }
}

}  // namespace

void minmax_cuda(const VolumeView& in, const Segments& sg, double* out, cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  const int64_t segments = in.shape[0] * sg.per_sample;
  auto* enc = reinterpret_cast<uint64_t*>(out);
  const int small_blocks = static_cast<int>(std::min<int64_t>((2 * segments + 255) / 256, 4096));
  minmax_init<<<small_blocks, 256, 0, stream>>>(enc, segments);
  VOXAUG_CUDA_CHECK_LAUNCH();
  int device = 0;
  VOXAUG_CUDA_TRY(cudaGetDevice(&device));
  const int64_t grid_y = std::min<int64_t>(segments, 65535);
  const int64_t target = int64_t(cuda_sm_count(device)) * 8;
  const int64_t grid_x = std::max<int64_t>(
      1, std::min<int64_t>((sg.per_segment + 255) / 256, (target + grid_y - 1) / grid_y));
  visit_image_dtype(in.dtype, "input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    minmax_reduce<T><<<dim3(unsigned(grid_x), unsigned(grid_y)), 256, 0, stream>>>(
        static_cast<const T*>(in.data), sg, segments, reinterpret_cast<unsigned long long*>(enc));
    VOXAUG_CUDA_CHECK_LAUNCH();
  });
  minmax_decode<<<small_blocks, 256, 0, stream>>>(enc, 2 * segments);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

}  // namespace voxaug::detail
