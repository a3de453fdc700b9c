// voxaug: CUDA backend of the crop family's foreground bounding box: per-sample block
// reductions of the voxel indices (warp shuffles), then 64-bit atomicMin / atomicMax into the
// box; min / max are order-independent, so the result equals the CPU's exactly.
#include <climits>

#include "../common/cuda_check.cuh"
#include "../common/device.h"
#include "crop_kernels.h"

namespace voxaug::detail {
namespace {

__global__ void bbox_init(int64_t* box, int64_t batch) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < 6 * batch) box[i] = (i % 6) < 3 ? LLONG_MAX : -1;
}

__global__ void __launch_bounds__(256)
    bbox_reduce(const BBoxParams p, int64_t batch, int64_t* box) {
  const int64_t D = p.size[0], H = p.size[1], W = p.size[2], voxels = D * H * W;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    long long lo[3] = {LLONG_MAX, LLONG_MAX, LLONG_MAX}, hi[3] = {-1, -1, -1};
    for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < voxels;
         v += int64_t(gridDim.x) * blockDim.x) {
      const int64_t w = v % W, h = (v / W) % H, d = v / (W * H);
      if (!bbox_foreground(p, n, d, h, w)) continue;
      const long long idx[3] = {d, h, w};
      for (int a = 0; a < 3; ++a) {
        lo[a] = idx[a] < lo[a] ? idx[a] : lo[a];
        hi[a] = idx[a] > hi[a] ? idx[a] : hi[a];
      }
    }
    for (int a = 0; a < 3; ++a)
      for (int off = 16; off > 0; off >>= 1) {
        const long long ol = __shfl_xor_sync(0xffffffffu, lo[a], off);
        const long long oh = __shfl_xor_sync(0xffffffffu, hi[a], off);
        lo[a] = ol < lo[a] ? ol : lo[a];
        hi[a] = oh > hi[a] ? oh : hi[a];
      }
    if ((threadIdx.x & 31) == 0 && hi[0] >= 0) {
      auto* b = reinterpret_cast<long long*>(box + 6 * n);
      for (int a = 0; a < 3; ++a) {
        atomicMin(b + a, lo[a]);
        atomicMax(b + 3 + a, hi[a]);
      }
    }
  }
}

__global__ void bbox_finish(int64_t* box, int64_t batch) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= batch) return;
  int64_t* b = box + 6 * n;
  const bool empty = b[3] < 0;
  for (int a = 0; a < 3; ++a) {
    b[a] = empty ? 0 : b[a];
    b[a + 3] = empty ? 0 : b[a + 3] + 1;
  }
}

// One block per (chunk, sample): the chunk's foreground / background counts.
__global__ void __launch_bounds__(256) posneg_count(const PosNegParams p, int64_t* counts) {
  const int64_t n = blockIdx.y, chunk = blockIdx.x;
  const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
  const int64_t begin = chunk * kPosNegChunk;
  const int64_t end = begin + kPosNegChunk < voxels ? begin + kPosNegChunk : voxels;
  unsigned long long fg = 0, bg = 0;
  for (int64_t v = begin + threadIdx.x; v < end; v += blockDim.x) {
    const int cls = posneg_class(p, n, v);
    fg += cls == 1;
    bg += cls == 2;
  }
  for (int off = 16; off > 0; off >>= 1) {
    fg += __shfl_xor_sync(0xffffffffu, fg, off);
    bg += __shfl_xor_sync(0xffffffffu, bg, off);
  }
  __shared__ unsigned long long warp_fg[8], warp_bg[8];
  if ((threadIdx.x & 31) == 0) warp_fg[threadIdx.x / 32] = fg, warp_bg[threadIdx.x / 32] = bg;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long f = 0, b = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) f += warp_fg[w], b += warp_bg[w];
    counts[(n * p.chunks + chunk) * 2] = static_cast<int64_t>(f);
    counts[(n * p.chunks + chunk) * 2 + 1] = static_cast<int64_t>(b);
  }
}

// One thread per (sample, crop): the selection is the CPU's function.
__global__ void posneg_pick(const PosNegParams p, int64_t batch, const int64_t* counts,
                            int64_t* centers) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= batch * p.num_samples) return;
  posneg_select(p, counts, t / p.num_samples, static_cast<int>(t % p.num_samples), centers + 3 * t);
}

}  // namespace

void pos_neg_crop_centers_cuda(const PosNegParams& p, int64_t batch, int64_t* centers, int device,
                               cudaStream_t stream) {
  VOXAUG_EXPECTS(batch <= 65535, "pos_neg_crop_centers on CUDA: at most 65535 samples per call");
  CudaDeviceGuard guard(device);
  void* counts = nullptr;
  VOXAUG_CUDA_TRY(cudaMallocAsync(&counts, batch * p.chunks * 2 * sizeof(int64_t) + 8, stream));
  if (p.chunks > 0) {
    posneg_count<<<dim3(unsigned(p.chunks), unsigned(batch)), 256, 0, stream>>>(
        p, static_cast<int64_t*>(counts));
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
  const int64_t picks = batch * p.num_samples;
  posneg_pick<<<unsigned((picks + 127) / 128), 128, 0, stream>>>(
      p, batch, static_cast<const int64_t*>(counts), centers);
  VOXAUG_CUDA_CHECK_LAUNCH();
  VOXAUG_CUDA_TRY(cudaFreeAsync(counts, stream));
}

void foreground_bbox_cuda(const BBoxParams& p, int64_t batch, int64_t* box, int device,
                          cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t entries = 6 * batch;
  bbox_init<<<unsigned((entries + 255) / 256), 256, 0, stream>>>(box, batch);
  VOXAUG_CUDA_CHECK_LAUNCH();
  const int64_t voxels = p.size[0] * p.size[1] * p.size[2];
  const int64_t grid_y = batch < 65535 ? batch : 65535;
  int64_t grid_x = (voxels + 255) / 256;
  const int64_t target = int64_t(cuda_sm_count(device)) * 8;
  grid_x = grid_x < (target + grid_y - 1) / grid_y ? grid_x : (target + grid_y - 1) / grid_y;
  if (grid_x < 1) grid_x = 1;
  if (voxels > 0) {
    bbox_reduce<<<dim3(unsigned(grid_x), unsigned(grid_y)), 256, 0, stream>>>(p, batch, box);
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
  bbox_finish<<<unsigned((batch + 255) / 256), 256, 0, stream>>>(box, batch);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

}  // namespace voxaug::detail
