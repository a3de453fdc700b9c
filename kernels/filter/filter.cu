// voxaug: CUDA backend of the separable filter. One launch per pass (spatial axis) for the
// whole batch: a block loads a tile of lines plus the sample's radius on either side into
// shared memory (converted to the compute type, with the sample's taps; positions outside
// the line hold their mirror with FilterBorder::Reflect), then each thread
// sums its outputs with filter_point (detail/filter.h), the CPU twin's definition. Kernels
// too wide for the tiles run through the generic launcher with the same functor.
#include <algorithm>
#include <limits>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "median_kernels.h"
#include "voxaug/detail/filter.h"
#include "voxaug/filter.h"

namespace voxaug::detail {
namespace {

// Tiles of TA positions along the axis x TC lines, 256 threads (32 x 8).
// Along W (kAlongX): threadIdx.x walks the axis (coalesced), threadIdx.y the rows (H).
// Along D or H: threadIdx.x walks W (coalesced), threadIdx.y the axis.
template <bool kAlongX>
struct TileShape {
  static constexpr int TA = kAlongX ? 128 : 64;
  static constexpr int TC = kAlongX ? 8 : 32;
  static constexpr int kPerThread = kAlongX ? TA / 32 : TA / 8;
};

constexpr int kMaxTileSmem = 48 * 1024;  // no opt-in needed below this

template <class Acc, bool kAlongX>
int64_t tile_smem_bytes(int rmax) {
  using TS = TileShape<kAlongX>;
  return (int64_t(2) * rmax + 1 + (int64_t(TS::TA) + 2 * int64_t(rmax)) * TS::TC) *
         int64_t(sizeof(Acc));
}

template <class Acc, bool kAlongX>
__global__ void __launch_bounds__(256)
    filter_tile_kernel(const FilterPass p, int64_t outer, int64_t tiles_a, int rmax) {
  using TS = TileShape<kAlongX>;
  extern __shared__ __align__(16) unsigned char filter_smem[];
  Acc* taps = reinterpret_cast<Acc*>(filter_smem);
  Acc* tile = taps + (2 * rmax + 1);
  const int da = p.axis + 2;
  const int dc = p.axis == 2 ? 3 : 4;  // the lines' cross dimension
  const int dm = p.axis == 0 ? 3 : 2;  // the remaining spatial dimension
  const int64_t L = p.shape[da], X = p.shape[dc], M = p.shape[dm], C = p.shape[1];
  const int64_t a0 = (blockIdx.x % tiles_a) * TS::TA;
  const int64_t c0 = (blockIdx.x / tiles_a) * TS::TC;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  const int lc = kAlongX ? threadIdx.y : threadIdx.x;  // this thread's line in the tile
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const int64_t m = o % M, nc = o / M;
    const int64_t c = nc % C, n = nc / C;
    const double* row = p.identity ? nullptr : filter_row(p, n);
    const int R = filter_radius(p, row);
    for (int k = tid; k <= 2 * R; k += nthreads) taps[k] = filter_tap<Acc>(p, row, k);
    const int span = TS::TA + 2 * R;
    const int64_t sbase = n * p.src_strides[0] + c * p.src_strides[1] + m * p.src_strides[dm];
    const int64_t sa = p.src_strides[da], sc = p.src_strides[dc];
    for (int idx = tid; idx < span * TS::TC; idx += nthreads) {
      const int la = kAlongX ? idx % span : idx / TS::TC;
      const int lt = kAlongX ? idx / span : idx % TS::TC;
      const int64_t ga = a0 - R + la, gc = c0 + lt;
      // Outside the line: the mirrored input (reflect), or never read (zero padding:
      // filter_point skips those positions).
      const int64_t gr = p.reflect ? reflect_index(ga, L) : ga;
      Acc v = Acc(0);
      if (gr >= 0 && gr < L && gc < X)
        v = load_dyn<Acc>(p.src, p.src_dtype, sbase + gr * sa + gc * sc);
      tile[kAlongX ? lt * span + la : la * TS::TC + lt] = v;
    }
    __syncthreads();
    const int64_t gc = c0 + lc;
    if (gc < X) {
      const int64_t dbase = n * p.dst_strides[0] + c * p.dst_strides[1] + m * p.dst_strides[dm] +
                            gc * p.dst_strides[dc];
      for (int q = 0; q < TS::kPerThread; ++q) {
        const int la = kAlongX ? threadIdx.x + 32 * q : threadIdx.y + 8 * q;
        const int64_t ga = a0 + la;
        if (ga >= L) break;
        const Acc v = filter_point<Acc>([&](int k) { return taps[k]; }, R, ga, L,
                                        [&](int64_t j) {
                                          const int lj = static_cast<int>(j - (a0 - R));
                                          return tile[kAlongX ? lc * span + lj : lj * TS::TC + lc];
                                        },
                                        p.reflect);
        store_dyn<Acc>(p.dst, p.dst_dtype, dbase + ga * p.dst_strides[da], v);
      }
    }
    __syncthreads();
  }
}

template <class Acc, bool kAlongX>
bool launch_tiles(const FilterPass& p, int rmax, cudaStream_t stream) {
  using TS = TileShape<kAlongX>;
  const int64_t smem = tile_smem_bytes<Acc, kAlongX>(rmax);
  if (smem > kMaxTileSmem) return false;
  const int da = p.axis + 2;
  const int dc = p.axis == 2 ? 3 : 4;
  const int dm = p.axis == 0 ? 3 : 2;
  const int64_t tiles_a = (p.shape[da] + TS::TA - 1) / TS::TA;
  const int64_t tiles_c = (p.shape[dc] + TS::TC - 1) / TS::TC;
  if (tiles_a * tiles_c > std::numeric_limits<int32_t>::max()) return false;
  const int64_t outer = p.shape[0] * p.shape[1] * p.shape[dm];
  const dim3 grid(static_cast<unsigned>(tiles_a * tiles_c),
                  static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
  filter_tile_kernel<Acc, kAlongX>
      <<<grid, dim3(32, 8), static_cast<size_t>(smem), stream>>>(p, outer, tiles_a, rmax);
  VOXAUG_CUDA_CHECK_LAUNCH();
  return true;
}

template <class Acc>
void run_pass(const FilterPass& p, cudaStream_t stream) {
  const int64_t rmax64 = p.identity ? 0 : std::max<int64_t>(0, (p.width - 2) / 2);
  const int rmax = static_cast<int>(std::min<int64_t>(rmax64, std::numeric_limits<int>::max() / 4));
  const bool tiled = rmax64 == rmax && (p.axis == 2 ? launch_tiles<Acc, true>(p, rmax, stream)
                                                    : launch_tiles<Acc, false>(p, rmax, stream));
  if (!tiled) CudaLauncher::launch(FilterForward<Acc>{p}, p.shape[0], stream);
}

}  // namespace

void filter_pass_cuda(const FilterPass& p, bool use_double, int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  if (use_double) {
    run_pass<double>(p, stream);
  } else {
    run_pass<float>(p, stream);
  }
}

void filter_check_cuda_pointers(const FilterTaps& taps, const void* workspace, int64_t ws_bytes,
                                int device) {
  CudaDeviceGuard guard(device);
  if (taps.table != nullptr) check_device_pointer(taps.table, device, "taps.table");
  if (ws_bytes > 0) check_device_pointer(workspace, device, "workspace");
}

void median_filter_cuda(const MedianBody& f, int64_t batch, int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  CudaLauncher::launch(f, batch, stream);
}

}  // namespace voxaug::detail
