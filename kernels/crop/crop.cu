// voxaug: CUDA backend of the crop family. Foreground bounding box: per-sample block
// reductions of the voxel indices (warp shuffles), then 64-bit atomicMin / atomicMax into the
// box; min / max are order-independent, so the result equals the CPU's exactly.
#include <math_constants.h>

#include <climits>
#include <string>

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

// ---- class-balanced centres ----
// One block per (chunk, sample): the chunk's class counts. Few classes: per-thread registers
// and a block reduction; many: a shared-memory histogram. Every exit is block-uniform.
constexpr int kRegisterClasses = 4;

__device__ void class_count_one(const CenterParams& p, int64_t n, int64_t chunk, int64_t* counts,
                                unsigned int* hist) {
  const int K = p.num_classes;
  const int64_t begin = chunk * kCenterChunk, end = chunk_end(p, chunk);
  int64_t* out = counts + (n * p.chunks + chunk) * K;
  if (K <= kRegisterClasses) {
    int64_t h[kRegisterClasses] = {0, 0, 0, 0};
    for (int64_t v = begin + threadIdx.x; v < end; v += blockDim.x) center_count_voxel(p, n, v, h);
    __shared__ unsigned long long part[8][kRegisterClasses];
    __syncthreads();  // the previous sample's reads of `part` are done
    for (int c = 0; c < kRegisterClasses; ++c) {
      unsigned long long x = static_cast<unsigned long long>(h[c]);
      for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
      if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32][c] = x;
    }
    __syncthreads();
    if (threadIdx.x < K) {
      unsigned long long t = 0;
      for (int w = 0; w < int(blockDim.x / 32); ++w) t += part[w][threadIdx.x];
      out[threadIdx.x] = static_cast<int64_t>(t);
    }
    return;
  }
  __syncthreads();  // the previous sample's reads of `hist` are done
  for (int c = threadIdx.x; c < K; c += blockDim.x) hist[c] = 0;
  __syncthreads();
  for (int64_t v = begin + threadIdx.x; v < end; v += blockDim.x)
    center_voxel_classes(p, n, v, [&](int c) { atomicAdd(&hist[c], 1u); });
  __syncthreads();
  for (int c = threadIdx.x; c < K; c += blockDim.x) out[c] = hist[c];
}

// Blocks (chunk, sample), the samples strided by the grid's y size (at most 65535).
__global__ void __launch_bounds__(256)
    class_count(const CenterParams p, int64_t batch, int64_t* counts) {
  extern __shared__ unsigned int hist[];
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y)
    class_count_one(p, n, blockIdx.x, counts, hist);
}

// One thread per (sample, class): the class total over the chunks (fixed order).
__global__ void class_totals(const CenterParams p, int64_t batch, const int64_t* counts,
                             int64_t* totals) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int K = p.num_classes;
  if (t >= batch * K) return;
  const int64_t n = t / K, c = t % K;
  int64_t s = 0;
  for (int64_t ch = 0; ch < p.chunks; ++ch) s += counts[(n * p.chunks + ch) * K + c];
  totals[t] = s;
}

// One thread per (sample, crop): the selection is the CPU's function.
__global__ void class_pick(const CenterParams p, int64_t batch, const int64_t* counts,
                           const int64_t* totals, int64_t* centers) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= batch * p.num_samples) return;
  class_select(p, counts, totals, t / p.num_samples, static_cast<int>(t % p.num_samples),
               centers + 3 * t);
}

// ---- weighted centres ----
// One block of kWeightLanes threads per (chunk, sample): thread l is lane l of
// weight_lane_sum, then the butterfly and the ordered warp sum (the CPU's weight_combine_lanes).
// With `stats` (pass 2) the block recomputes its sum with the sample's shift, or exits when the
// shift is 0 (pass 1's sums stand).
__device__ void weight_pass_one(const CenterParams& p, int64_t n, int64_t chunk,
                                const double* stats, double* sums, double* min_region,
                                double* min_all) {
  const int64_t t = n * p.chunks + chunk;
  double shift = 0.0;
  if (stats != nullptr) {
    shift = stats[3 * n + 1];
    if (shift == 0.0) return;
  }
  double mr = CUDART_INF, ma = CUDART_INF;
  double x = weight_lane_sum(p, n, chunk, threadIdx.x, shift, &mr, &ma);
  for (int off = 16; off > 0; off >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, off);
    mr = fmin(mr, __shfl_xor_sync(0xffffffffu, mr, off));
    ma = fmin(ma, __shfl_xor_sync(0xffffffffu, ma, off));
  }
  __shared__ double ws[kWeightLanes / 32], wr[kWeightLanes / 32], wa[kWeightLanes / 32];
  __syncthreads();  // thread 0 is done with the previous sample's ws / wr / wa
  if ((threadIdx.x & 31) == 0)
    ws[threadIdx.x / 32] = x, wr[threadIdx.x / 32] = mr, wa[threadIdx.x / 32] = ma;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double s = ws[0], r = wr[0], a = wa[0];
  for (int w = 1; w < kWeightLanes / 32; ++w) s += ws[w], r = fmin(r, wr[w]), a = fmin(a, wa[w]);
  sums[t] = s;
  if (stats == nullptr) min_region[t] = r, min_all[t] = a;
}

// Blocks (chunk, sample), the samples strided by the grid's y size (at most 65535).
__global__ void __launch_bounds__(kWeightLanes)
    weight_pass(const CenterParams p, int64_t batch, const double* stats, double* sums,
                double* min_region, double* min_all) {
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y)
    weight_pass_one(p, n, blockIdx.x, stats, sums, min_region, min_all);
}

// One thread per sample: the minima and the shift (after pass 1), or the total (after pass 2).
__global__ void weight_reduce(const CenterParams p, int64_t batch, const double* sums,
                              const double* min_region, const double* min_all, double* stats,
                              bool totals) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= batch) return;
  if (totals) {
    double s = 0.0;
    for (int64_t c = 0; c < p.chunks; ++c) s += sums[n * p.chunks + c];
    stats[3 * n] = s;
    return;
  }
  double r = CUDART_INF, a = CUDART_INF;
  for (int64_t c = 0; c < p.chunks; ++c) {
    r = fmin(r, min_region[n * p.chunks + c]);
    a = fmin(a, min_all[n * p.chunks + c]);
  }
  stats[3 * n + 1] = (p.shift_negative && r < 0.0) ? r : 0.0;
  stats[3 * n + 2] = a;
}

__global__ void weight_pick(const CenterParams p, int64_t batch, const double* sums,
                            const double* stats, int64_t* centers) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= batch * p.num_samples) return;
  weighted_select(p, sums, stats, t / p.num_samples, static_cast<int>(t % p.num_samples),
                  centers + 3 * t);
}

__global__ void uniform_pick(const CenterParams p, int64_t batch, int64_t* centers) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= batch * p.num_samples) return;
  uniform_select(p, t / p.num_samples, static_cast<int>(t % p.num_samples), centers + 3 * t);
}

// ---- patch extraction: grid-stride over the output elements, copies of `T` (the element size).
template <class T>
__global__ void patch_copy(const PatchParams p, int64_t total) {
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = e % p.size[2], y = (e / p.size[2]) % p.size[1];
    const int64_t z = (e / (p.size[2] * p.size[1])) % p.size[0];
    const int64_t pc = e / (p.size[2] * p.size[1] * p.size[0]);
    const int64_t src = patch_source(p, pc / p.channels, pc % p.channels, z, y, x);
    out[e] = src < 0 ? T{} : in[src];
  }
}

// gather_patches: as patch_copy, each patch reading its own source from the parameters
// (__grid_constant__: indexed in place, not copied to each thread's stack).
template <class T>
__global__ void gather_copy(const __grid_constant__ GatherParams p, int64_t total) {
  T* out = static_cast<T*>(p.out);
  const int64_t block = p.size[0] * p.size[1] * p.size[2];
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = e % p.size[2], y = (e / p.size[2]) % p.size[1];
    const int64_t z = (e / (p.size[2] * p.size[1])) % p.size[0];
    const int64_t pc = e / block, k = pc / p.channels;
    const GatherSource& s = p.src[k];
    const int64_t* st = p.starts + 3 * k;
    const int64_t src = box_source(s.in_size, s.stride, pc % p.channels, st[0] - p.offset[0] + z,
                                   st[1] - p.offset[1] + y, st[2] - p.offset[2] + x);
    out[e] = src < 0 ? T{} : static_cast<const T*>(s.data)[src];
  }
}

// aggregate_patches: a thread per voxel (c, d, h, w) of the union box. Accumulating, it walks
// its patches in order k = 0, 1, ... (the host's order: the same bits); copying, the last patch
// covering the voxel wins, so the walk goes backwards and stops at the first.
template <class Acc>
__global__ void aggregate_add_kernel(const __grid_constant__ AggregateParams p, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t c, d, h, w;
    aggregate_voxel(p, e, c, d, h, w);
    Acc* o = static_cast<Acc*>(p.out) + c * p.ostride[1] + d * p.ostride[2] + h * p.ostride[3] +
             w * p.ostride[4];
    Acc* n = p.count != nullptr && c == 0 ? static_cast<Acc*>(p.count) + d * p.cstride[2] +
                                                h * p.cstride[3] + w * p.cstride[4]
                                          : nullptr;
    Acc acc = *o, cnt = n != nullptr ? *n : Acc(0);
    bool any = false;
    for (int t = 0; t < p.num_patches; ++t) any |= aggregate_add(p, t, c, d, h, w, acc, cnt);
    if (!any) continue;
    *o = acc;
    if (n != nullptr) *n = cnt;
  }
}

template <class T>
__global__ void aggregate_assign_kernel(const __grid_constant__ AggregateParams p, int64_t total) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t c, d, h, w;
    aggregate_voxel(p, e, c, d, h, w);
    for (int t = int(p.num_patches) - 1; t >= 0; --t) {
      const AggregatePatch& q = p.patch[t];
      const int64_t z = d - q.start[0], y = h - q.start[1], x = w - q.start[2];
      if (z < q.lo[0] || z >= q.hi[0] || y < q.lo[1] || y >= q.hi[1] || x < q.lo[2] || x >= q.hi[2])
        continue;
      static_cast<T*>(
          p.out)[c * p.ostride[1] + d * p.ostride[2] + h * p.ostride[3] + w * p.ostride[4]] =
          static_cast<const T*>(p.patches)[q.index * p.pstride[0] + c * p.pstride[1] +
                                           z * p.pstride[2] + y * p.pstride[3] + x * p.pstride[4]];
      break;
    }
  }
}

// Blocks for a grid-stride copy of `total` elements: enough to fill the device, the rest strided.
unsigned copy_blocks(int64_t total, int device) {
  const int64_t blocks = (total + 255) / 256, cap = int64_t(cuda_sm_count(device)) * 32;
  return unsigned(blocks < cap ? blocks : cap);
}

unsigned blocks_for(int64_t n, int threads) {
  return unsigned((n + threads - 1) / threads);
}

// The class ratios reach the device through kernel parameters, kRatioChunk at a time: a
// cudaMemcpyAsync from pageable host memory would first synchronise the host with the stream
// (CUDA's documented behaviour for pageable H2D copies), and pinned memory would need an
// allocation (cudaMallocHost synchronises the device).
constexpr int kRatioChunk = 256;
struct RatioChunk {
  double v[kRatioChunk];
};

__global__ void ratio_store(double* dst, const RatioChunk chunk, int n) {
  if (static_cast<int>(threadIdx.x) < n) dst[threadIdx.x] = chunk.v[threadIdx.x];
}

void upload_ratios(double* dst, const double* host, int count, cudaStream_t stream) {
  for (int k0 = 0; k0 < count; k0 += kRatioChunk) {
    const int n = count - k0 < kRatioChunk ? count - k0 : kRatioChunk;
    RatioChunk chunk{};
    for (int i = 0; i < n; ++i) chunk.v[i] = host[k0 + i];
    ratio_store<<<1, kRatioChunk, 0, stream>>>(dst + k0, chunk, n);
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
}

// Grid y size for `batch` samples: the kernels stride over the rest.
unsigned grid_samples(int64_t batch) {
  return unsigned(batch < 65535 ? batch : 65535);
}

// The counting pass: one block per (chunk, sample).
void launch_class_count(const CenterParams& p, int64_t batch, int64_t* counts,
                        cudaStream_t stream) {
  const size_t smem =
      p.num_classes > kRegisterClasses ? size_t(p.num_classes) * sizeof(unsigned int) : 0;
  class_count<<<dim3(unsigned(p.chunks), grid_samples(batch)), 256, smem, stream>>>(p, batch,
                                                                                    counts);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

}  // namespace

void class_centers_cuda(const CenterParams& p_in, int64_t batch, int64_t* centers,
                        int64_t* class_counts, const int64_t* cached_counts, int device,
                        cudaStream_t stream) {
  VOXAUG_EXPECTS(p_in.chunks <= 0x7fffffff, "class_crop_centers on CUDA: volume too large");
  CudaDeviceGuard guard(device);
  CenterParams p = p_in;
  const int K = p.num_classes;
  // With cached counts the scan of the volume is skipped: totals and picks read them.
  const size_t counts_bytes = cached_counts ? 0 : size_t(batch * p.chunks * K) * sizeof(int64_t);
  const size_t totals_bytes = class_counts ? 0 : size_t(batch * K) * sizeof(int64_t);
  const size_t ratio_bytes = size_t(K) * sizeof(double);
  char* buf = nullptr;
  VOXAUG_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&buf),
                                  ratio_bytes + counts_bytes + totals_bytes + 8, stream));
  upload_ratios(reinterpret_cast<double*>(buf), p_in.ratios, K, stream);
  p.ratios = reinterpret_cast<const double*>(buf);
  int64_t* own_counts = reinterpret_cast<int64_t*>(buf + ratio_bytes);
  const int64_t* counts = cached_counts ? cached_counts : own_counts;
  int64_t* totals =
      class_counts ? class_counts : reinterpret_cast<int64_t*>(buf + ratio_bytes + counts_bytes);
  if (cached_counts == nullptr) launch_class_count(p, batch, own_counts, stream);
  class_totals<<<blocks_for(batch * K, 128), 128, 0, stream>>>(p, batch, counts, totals);
  VOXAUG_CUDA_CHECK_LAUNCH();
  class_pick<<<blocks_for(batch * p.num_samples, 128), 128, 0, stream>>>(p, batch, counts, totals,
                                                                         centers);
  VOXAUG_CUDA_CHECK_LAUNCH();
  VOXAUG_CUDA_TRY(cudaFreeAsync(buf, stream));
}

void class_counts_cuda(const CenterParams& p, int64_t batch, int64_t* counts, int device,
                       cudaStream_t stream) {
  VOXAUG_EXPECTS(p.chunks <= 0x7fffffff, "class_crop_counts on CUDA: volume too large");
  CudaDeviceGuard guard(device);
  launch_class_count(p, batch, counts, stream);
}

void weighted_centers_cuda(const CenterParams& p, int64_t batch, int64_t* centers, double* stats,
                           int device, cudaStream_t stream) {
  VOXAUG_EXPECTS(p.chunks <= 0x7fffffff, "weighted_crop_centers on CUDA: volume too large");
  CudaDeviceGuard guard(device);
  const size_t per = size_t(batch * p.chunks) * sizeof(double);
  const size_t stat_bytes = stats ? 0 : size_t(batch * 3) * sizeof(double);
  char* buf = nullptr;
  VOXAUG_CUDA_TRY(
      cudaMallocAsync(reinterpret_cast<void**>(&buf), 3 * per + stat_bytes + 8, stream));
  auto* sums = reinterpret_cast<double*>(buf);
  auto* mr = reinterpret_cast<double*>(buf + per);
  auto* ma = reinterpret_cast<double*>(buf + 2 * per);
  double* st = stats ? stats : reinterpret_cast<double*>(buf + 3 * per);
  const dim3 grid(unsigned(p.chunks), grid_samples(batch));
  weight_pass<<<grid, kWeightLanes, 0, stream>>>(p, batch, nullptr, sums, mr, ma);
  VOXAUG_CUDA_CHECK_LAUNCH();
  weight_reduce<<<blocks_for(batch, 128), 128, 0, stream>>>(p, batch, sums, mr, ma, st, false);
  VOXAUG_CUDA_CHECK_LAUNCH();
  if (p.shift_negative) {
    weight_pass<<<grid, kWeightLanes, 0, stream>>>(p, batch, st, sums, mr, ma);
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
  weight_reduce<<<blocks_for(batch, 128), 128, 0, stream>>>(p, batch, sums, mr, ma, st, true);
  VOXAUG_CUDA_CHECK_LAUNCH();
  weight_pick<<<blocks_for(batch * p.num_samples, 128), 128, 0, stream>>>(p, batch, sums, st,
                                                                          centers);
  VOXAUG_CUDA_CHECK_LAUNCH();
  VOXAUG_CUDA_TRY(cudaFreeAsync(buf, stream));
}

void uniform_centers_cuda(const CenterParams& p, int64_t batch, int64_t* centers, int device,
                          cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  uniform_pick<<<blocks_for(batch * p.num_samples, 128), 128, 0, stream>>>(p, batch, centers);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

void extract_patches_cuda(const PatchParams& p, int64_t patches, int64_t elem_size, int device,
                          cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t total = patches * p.channels * p.size[0] * p.size[1] * p.size[2];
  by_element_size(elem_size, "extract_patches", [&](auto tag) {
    patch_copy<decltype(tag)><<<copy_blocks(total, device), 256, 0, stream>>>(p, total);
    VOXAUG_CUDA_CHECK_LAUNCH();
  });
}

void gather_patches_cuda(const GatherParams& p, int64_t patches, int64_t elem_size, int device,
                         cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t total = patches * p.channels * p.size[0] * p.size[1] * p.size[2];
  by_element_size(elem_size, "gather_patches", [&](auto tag) {
    gather_copy<decltype(tag)><<<copy_blocks(total, device), 256, 0, stream>>>(p, total);
    VOXAUG_CUDA_CHECK_LAUNCH();
  });
}

void aggregate_patches_cuda(const AggregateParams& p, bool accumulate, DType out_dtype, int device,
                            cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  const int64_t total = p.channels * (p.box_hi[0] - p.box_lo[0]) * (p.box_hi[1] - p.box_lo[1]) *
                        (p.box_hi[2] - p.box_lo[2]);
  const unsigned blocks = copy_blocks(total, device);
  if (accumulate) {
    if (out_dtype == DType::Float32)
      aggregate_add_kernel<float><<<blocks, 256, 0, stream>>>(p, total);
    else
      aggregate_add_kernel<double><<<blocks, 256, 0, stream>>>(p, total);
    VOXAUG_CUDA_CHECK_LAUNCH();
    return;
  }
  by_element_size(dtype_size(out_dtype), "aggregate_patches", [&](auto tag) {
    aggregate_assign_kernel<decltype(tag)><<<blocks, 256, 0, stream>>>(p, total);
    VOXAUG_CUDA_CHECK_LAUNCH();
  });
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
