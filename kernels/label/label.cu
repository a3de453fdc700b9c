// voxaug: CUDA backend of the label family. Union-find over the whole batch (Playne and
// Hawick's scheme): every voxel starts as its own root, joins its foreground backward
// neighbours with an atomicMin union that always links the larger root below the smaller, the
// paths are compressed, and the roots become labels. Roots are the components' smallest
// indices whatever the order of the unions, so the labels equal the CPU's exactly.
#include <algorithm>
#include <climits>

#include "../common/cuda_check.cuh"
#include "../common/device.h"
#include "label_kernels.h"

namespace voxaug::detail {
namespace {

__device__ __forceinline__ int32_t cc_find(const int32_t* L, int32_t x) {
  const volatile int32_t* l = L;  // other threads lower parents while this one walks
  for (;;) {
    const int32_t y = l[x];
    if (y == x) return x;
    x = y;
  }
}

__device__ __forceinline__ void cc_unite(int32_t* L, int32_t a, int32_t b) {
  for (;;) {
    a = cc_find(L, a);
    b = cc_find(L, b);
    if (a == b) return;
    if (a < b) {
      const int32_t old = atomicMin(&L[b], a);
      if (old == b) return;
      b = old;  // another union moved b: retry from where it went
    } else {
      const int32_t old = atomicMin(&L[a], b);
      if (old == a) return;
      a = old;
    }
  }
}

__global__ void cc_init(const LabelParams p, int64_t total, int32_t* L) {
  const int64_t H = p.size[1], W = p.size[2];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t vol = i / p.volume, v = i % p.volume;
    const int64_t w = v % W, h = (v / W) % H, d = v / (W * H);
    L[i] = label_foreground(p, vol, d, h, w) ? static_cast<int32_t>(v) : -1;
  }
}

__global__ void cc_merge(const LabelParams p, int64_t total, int32_t* L) {
  const int64_t D = p.size[0], H = p.size[1], W = p.size[2];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (L[i] < 0) continue;
    const int64_t vol = i / p.volume, v = i % p.volume;
    const int64_t w = v % W, h = (v / W) % H, d = v / (W * H);
    int32_t* Lv = L + vol * p.volume;
    for (int k = 0; k < p.num_offsets; ++k) {
      const int64_t nd = d + p.offsets[k][0], nh = h + p.offsets[k][1], nw = w + p.offsets[k][2];
      if (nd < 0 || nd >= D || nh < 0 || nh >= H || nw < 0 || nw >= W) continue;
      const int64_t u = (nd * H + nh) * W + nw;
      if (Lv[u] >= 0) cc_unite(Lv, static_cast<int32_t>(v), static_cast<int32_t>(u));
    }
  }
}

__global__ void cc_compress(int64_t total, int64_t volume, int32_t* L) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (L[i] < 0) continue;
    int32_t* Lv = L + (i / volume) * volume;
    const int32_t v = static_cast<int32_t>(i % volume);
    const int32_t r = cc_find(Lv, v);
    if (r != v) Lv[v] = r;  // only ever lowered to an ancestor: other walks stay valid
  }
}

__global__ void cc_final(int64_t total, int32_t* L) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    L[i] = L[i] < 0 ? 0 : L[i] + 1;
}

// ---- distance transform: the CPU twin's passes, one thread per line (edt_line) ----
// The w pass from the mask, one thread per row (volume, d, h).
__global__ void edt_rows(const LabelParams p, int64_t rows, double w, double* sq) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t DH = p.size[0] * p.size[1];
    const int64_t vol = r / DH, d = (r / p.size[1]) % p.size[0], h = r % p.size[1];
    edt_row_from_mask(p, vol, d, h, w, sq + vol * p.volume + (d * p.size[1] + h) * p.size[2]);
  }
}

// Lines along `axis` (0 d, 1 h) of every volume, in place: edt_pass_thread per thread.
__global__ void edt_pass(const LabelParams p, int64_t volumes, int axis, double w, EdtLayout e,
                         double* sq) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t < e.threads) edt_pass_thread(p.size, volumes, axis, w, e, sq, t);
}

template <class O>
__global__ void edt_final(const LabelParams p, int64_t total, const double w2x, const double w2y,
                          const double w2z, const double* sq, O* out) {
  const double w2[3] = {w2x, w2y, w2z};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % p.size[2], h = (i / p.size[2]) % p.size[1];
    const int64_t d = (i / (p.size[2] * p.size[1])) % p.size[0];
    out[i] = static_cast<O>(edt_distance(sq[i], w2, d, h, x));
  }
}

// Blocks of 256 threads for a grid-stride loop over `total` items (at most 16 per SM).
unsigned voxel_blocks(int64_t total, int device) {
  int64_t blocks = (total + 255) / 256;
  const int64_t cap = int64_t(cuda_sm_count(device)) * 16;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

}  // namespace

void distance_transform_cuda(const LabelParams& p, int64_t volumes, const double w2[3],
                             const EdtLayout& e, void* workspace, void* out, bool out_f64,
                             int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t total = volumes * p.volume;
  const unsigned blocks = voxel_blocks(total, device);
  double* sq = static_cast<double*>(workspace);
  const int64_t rows = volumes * p.size[0] * p.size[1];
  edt_rows<<<static_cast<unsigned>(std::min<int64_t>((rows + 127) / 128, 65535)), 128, 0, stream>>>(
      p, rows, w2[2], sq);
  VOXAUG_CUDA_CHECK_LAUNCH();
  const unsigned line_blocks = static_cast<unsigned>((e.threads + 127) / 128);
  for (int axis : {1, 0}) {
    edt_pass<<<line_blocks, 128, 0, stream>>>(p, volumes, axis, w2[axis], e, sq);
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
  if (out_f64)
    edt_final<double>
        <<<blocks, 256, 0, stream>>>(p, total, w2[0], w2[1], w2[2], sq, static_cast<double*>(out));
  else
    edt_final<float>
        <<<blocks, 256, 0, stream>>>(p, total, w2[0], w2[1], w2[2], sq, static_cast<float*>(out));
  VOXAUG_CUDA_CHECK_LAUNCH();
}

void connected_components_cuda(const LabelParams& p, int64_t volumes, int32_t* labels, int device,
                               cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t total = volumes * p.volume;
  const unsigned grid = voxel_blocks(total, device);
  cc_init<<<grid, 256, 0, stream>>>(p, total, labels);
  VOXAUG_CUDA_CHECK_LAUNCH();
  cc_merge<<<grid, 256, 0, stream>>>(p, total, labels);
  VOXAUG_CUDA_CHECK_LAUNCH();
  cc_compress<<<grid, 256, 0, stream>>>(total, p.volume, labels);
  VOXAUG_CUDA_CHECK_LAUNCH();
  cc_final<<<grid, 256, 0, stream>>>(total, labels);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

}  // namespace voxaug::detail
