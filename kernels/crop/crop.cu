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

}  // namespace

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
