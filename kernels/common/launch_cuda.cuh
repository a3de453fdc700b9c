// voxaug: the CUDA launcher. Same functor contract as CpuLauncher (launch_cpu.h).
// One launch per batch: blockIdx.y walks samples (each thread sets up a sample once),
// a grid-stride loop in x walks the sample's items. Never synchronises the host.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "cuda_check.cuh"
#include "device.h"

namespace voxaug::detail {

// The functor is a __grid_constant__ parameter: its member functions may take references into
// it (a target of a ResampleParams block, say) without the compiler copying the whole block to
// each thread's stack first (the resample forward's 2 KiB frame came from that copy).
//
// A functor may declare `static constexpr bool kBlockState = true` and `bool
// block_state() const`: when block_state() holds, its per-sample State is the same for every
// thread and read-only in operator(), so one thread of the block sets it up in shared memory
// and all read it there (the pointwise chain's resolved steps: ~400 B a thread on the stack
// otherwise). The sample loop's trip count is uniform over a block, so the barriers are safe.
template <class F, class = void>
struct HasBlockState : std::false_type {};
template <class F>
struct HasBlockState<F, std::void_t<decltype(F::kBlockState)>>
    : std::bool_constant<F::kBlockState> {};

template <class F, class Index>
__global__ void __launch_bounds__(256)
    items_kernel(const __grid_constant__ F f, int64_t num_samples, Index items) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  if constexpr (HasBlockState<F>::value) {
    if (f.block_state()) {
      __shared__ typename F::State shared_state;
      for (int64_t n = blockIdx.y; n < num_samples; n += gridDim.y) {
        __syncthreads();  // every thread is done with the previous sample's state
        if (threadIdx.x == 0) f.begin_sample(n, shared_state);
        __syncthreads();
        for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
             i += stride)
          f(shared_state, n, i);
      }
      return;
    }
  }
  for (int64_t n = blockIdx.y; n < num_samples; n += gridDim.y) {
    typename F::State st;
    f.begin_sample(n, st);
    for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
         i += stride)
      f(st, n, i);
  }
}

struct CudaLauncher {
  template <class F>
  static void launch(const F& f, int64_t num_samples, cudaStream_t stream) {
    const int64_t items = f.items();
    if (num_samples <= 0 || items <= 0) return;
    int device = 0;
    VOXAUG_CUDA_TRY(cudaGetDevice(&device));
    constexpr int kThreads = 256;
    // Enough blocks to fill the device a few times over; the rest is grid-stride.
    const int64_t target_blocks = static_cast<int64_t>(cuda_sm_count(device)) * 8;
    const int64_t grid_y = std::min<int64_t>(num_samples, 65535);
    const int64_t needed_x = (items + kThreads - 1) / kThreads;
    const int64_t grid_x =
        std::max<int64_t>(1, std::min<int64_t>(needed_x, (target_blocks + grid_y - 1) / grid_y));
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
    // 32-bit item counters when the loop cannot overflow them.
    if (items + grid_x * kThreads < std::numeric_limits<int32_t>::max()) {
      items_kernel<F, int32_t>
          <<<grid, kThreads, 0, stream>>>(f, num_samples, static_cast<int32_t>(items));
    } else {
      items_kernel<F, int64_t><<<grid, kThreads, 0, stream>>>(f, num_samples, items);
    }
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
};

}  // namespace voxaug::detail
