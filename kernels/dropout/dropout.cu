// voxaug: CUDA backend of coarse dropout (the shared functor through the generic launcher) and
// coarse shuffle (shared key / move bodies, CUB radix sorts).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "dropout_kernels.h"
#include "voxaug/error.h"

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

// ---- coarse shuffle ----

namespace voxaug::detail {
namespace {

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

// Per (sample, box): keys + indices, a stable radix sort of each channel's pairs (CUB), the
// permuted values into a scratch buffer, then back into the box. One workspace for the call.
template <class T>
void coarse_shuffle_cuda_typed(const VolumeView& x, const CoarseShuffleParams& p,
                               cudaStream_t stream, uint32_t first_sample) {
  const int64_t N = x.shape[0], C = x.shape[1];
  int64_t max_volume = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < p.counts[n]; ++j) {
      max_volume =
          std::max(max_volume, shuffle_box(x, p.boxes + (n * p.max_boxes + j) * 6, n).volume);
    }
  if (max_volume < 2) return;
  const size_t items = static_cast<size_t>(max_volume * C);
  size_t sort_bytes = 0;
  VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<int64_t>(max_volume), 0, 32));
  const size_t word_bytes = align256(items * sizeof(uint32_t));
  const size_t tmp_bytes = align256(items * sizeof(T));
  const size_t total = 4 * word_bytes + tmp_bytes + align256(sort_bytes);
  char* ws = nullptr;
  VOXAUG_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&ws), total, stream));
  uint32_t* keys_in = reinterpret_cast<uint32_t*>(ws);
  uint32_t* keys_out = reinterpret_cast<uint32_t*>(ws + word_bytes);
  uint32_t* idx_in = reinterpret_cast<uint32_t*>(ws + 2 * word_bytes);
  uint32_t* idx_out = reinterpret_cast<uint32_t*>(ws + 3 * word_bytes);
  T* tmp = reinterpret_cast<T*>(ws + 4 * word_bytes);
  void* sort_tmp = ws + 4 * word_bytes + tmp_bytes;
  try {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < p.counts[n]; ++j) {
        const int64_t* r = p.boxes + (n * p.max_boxes + j) * 6;
        const ShuffleBox b = shuffle_box(x, r, n);
        if (b.volume < 2) continue;
        const uint32_t g = first_sample + static_cast<uint32_t>(n);
        CudaLauncher::launch(ShuffleKeysBody{b, p.seed, g, j, keys_in, idx_in}, 1, stream);
        for (int64_t c = 0; c < C; ++c) {
          size_t bytes = sort_bytes;
          const int64_t o = c * b.volume;
          VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(sort_tmp, bytes, keys_in + o,
                                                          keys_out + o, idx_in + o, idx_out + o,
                                                          b.volume, 0, 32, stream));
        }
        T* data = static_cast<T*>(x.data);
        CudaLauncher::launch(ShuffleMoveBody<T, false>{b, data, tmp, idx_out}, 1, stream);
        CudaLauncher::launch(ShuffleMoveBody<T, true>{b, data, tmp, idx_out}, 1, stream);
      }
  } catch (...) {
    cudaFreeAsync(ws, stream);
    throw;
  }
  VOXAUG_CUDA_TRY(cudaFreeAsync(ws, stream));
}

}  // namespace

void coarse_shuffle_cuda(const VolumeView& x, const CoarseShuffleParams& p, cudaStream_t stream,
                         uint32_t first_sample) {
  CudaDeviceGuard guard(x.device_index);
  switch (dtype_size(x.dtype)) {  // a permutation moves whole elements: by size
    case 1: return coarse_shuffle_cuda_typed<uint8_t>(x, p, stream, first_sample);
    case 2: return coarse_shuffle_cuda_typed<uint16_t>(x, p, stream, first_sample);
    case 4: return coarse_shuffle_cuda_typed<uint32_t>(x, p, stream, first_sample);
    default: return coarse_shuffle_cuda_typed<uint64_t>(x, p, stream, first_sample);
  }
}

// ---- patch swaps ----

namespace {

// A block per (sample, channel): its swaps in order, each through the block's two scratch
// patches (both read before either is written), the threads striding over the patch voxels.
// Overlapping patches: all of the second patch is written before any of the first (a barrier
// between), so the first patch's values land last in the overlap, as on the host.
template <class T>
__global__ void __launch_bounds__(256)
    swap_patches_kernel(T* x, int64_t s0, int64_t s1, int64_t s2, int64_t s3, int64_t s4,
                        int64_t channels, const int64_t* locations, const int64_t* counts,
                        int64_t max_swaps, int64_t p0, int64_t p1, int64_t p2, int64_t lim0,
                        int64_t lim1, int64_t lim2, T* scratch) {
  const int64_t nc = blockIdx.x, n = nc / channels, c = nc % channels;
  const int64_t V = p0 * p1 * p2;
  T* a = scratch + nc * 2 * V;
  T* b = a + V;
  T* base = x + n * s0 + c * s1;
  // The device tables are clamped (the host checked them where it read them): a bad table
  // cannot move memory outside the volume.
  const int64_t count = counts[n] < 0 ? 0 : (counts[n] > max_swaps ? max_swaps : counts[n]);
  auto corner = [](int64_t v, int64_t lim) { return v < 0 ? 0 : (v > lim ? lim : v); };
  for (int64_t k = 0; k < count; ++k) {
    const int64_t* l = locations + (n * max_swaps + k) * 6;
    T* first = base + corner(l[0], lim0) * s2 + corner(l[1], lim1) * s3 + corner(l[2], lim2) * s4;
    T* second = base + corner(l[3], lim0) * s2 + corner(l[4], lim1) * s3 + corner(l[5], lim2) * s4;
    // Patch voxel e (C-order) -> its element offset from the patch's corner.
    auto off = [=](int64_t e) { return (e / p2 / p1) * s2 + (e / p2 % p1) * s3 + (e % p2) * s4; };
    for (int64_t e = threadIdx.x; e < V; e += blockDim.x) {
      a[e] = first[off(e)];
      b[e] = second[off(e)];
    }
    __syncthreads();
    for (int64_t e = threadIdx.x; e < V; e += blockDim.x) second[off(e)] = a[e];
    __syncthreads();
    for (int64_t e = threadIdx.x; e < V; e += blockDim.x) first[off(e)] = b[e];
    __syncthreads();
  }
}

template <class T>
void swap_patches_cuda_typed(const VolumeView& x, const PatchSwapParams& p, cudaStream_t stream) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const int64_t V = p.patch[0] * p.patch[1] * p.patch[2];
  if (p.max_swaps == 0) return;
  VOXAUG_EXPECTS(N * C <= INT32_MAX, "swap_patches: too many (sample, channel) volumes for CUDA");
  T* scratch = nullptr;
  VOXAUG_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&scratch),
                                  static_cast<size_t>(N * C * 2 * V) * sizeof(T), stream));
  swap_patches_kernel<T><<<static_cast<unsigned>(N * C), 256, 0, stream>>>(
      static_cast<T*>(x.data), x.strides[0], x.strides[1], x.strides[2], x.strides[3], x.strides[4],
      C, p.locations, p.counts, p.max_swaps, p.patch[0], p.patch[1], p.patch[2],
      x.shape[2] - p.patch[0], x.shape[3] - p.patch[1], x.shape[4] - p.patch[2], scratch);
  const cudaError_t launch = cudaGetLastError();
  cudaFreeAsync(scratch, stream);
  VOXAUG_CUDA_TRY(launch);
}

}  // namespace

void swap_patches_cuda(const VolumeView& x, const PatchSwapParams& p, cudaStream_t stream) {
  CudaDeviceGuard guard(x.device_index);
  switch (dtype_size(x.dtype)) {  // whole elements move: by size
    case 1: return swap_patches_cuda_typed<uint8_t>(x, p, stream);
    case 2: return swap_patches_cuda_typed<uint16_t>(x, p, stream);
    case 4: return swap_patches_cuda_typed<uint32_t>(x, p, stream);
    default: return swap_patches_cuda_typed<uint64_t>(x, p, stream);
  }
}

}  // namespace voxaug::detail
