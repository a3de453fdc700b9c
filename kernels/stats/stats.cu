// voxaug: CUDA backend of the stats family.
// - moments: one block per (chunk, segment) reduces its chunk with the lane layout and the
//   halving tree of detail/stats.h; a second kernel merges each segment's chunks with the
//   same pairwise tree as the CPU twin. Fixed order: deterministic, equal to the CPU bits.
// - percentiles: one radix sort for the whole batch (cub::DeviceRadixSort) on composite keys
//   (segment id above the value's order-preserving bits), then one thread per (segment, q)
//   reads the two order statistics it needs. float64 and int32 data (not exact in float32) sort in
//   two stable passes (value, then segment id): 64 value bits leave no room for the segment.
// - apply: the generic launcher with the shared functor.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cstdint>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "stats_kernels.h"

namespace voxaug::detail {
namespace {

template <class T>
__global__ void __launch_bounds__(kMomentLanes)
    moments_chunk_kernel(const T* data, StatSegments sg, int64_t segments, int64_t chunks,
                         bool nonzero, Moments* part) {
  __shared__ int64_t sn[kMomentLanes];
  __shared__ double s1[kMomentLanes], s2[kMomentLanes];
  const int t = threadIdx.x;
  for (int64_t seg = blockIdx.y; seg < segments; seg += gridDim.y) {
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
      const int64_t begin = c * kMomentChunk;
      const int64_t cnt = min(kMomentChunk, sg.per_segment - begin);
      const double shift = value_f64(data[sg.offset(seg, begin)]);
      // Dense samples: the chunk is one run from its first element (no per-element indexing).
      const T* run = sg.ix.dense ? data + sg.offset(seg, begin) : nullptr;
      LaneSums acc{0, 0.0, 0.0};
      for (int j = 0; j < kMomentPerLane; ++j) {
        const int64_t i = int64_t(j) * kMomentLanes + t;
        if (i < cnt)
          lane_add(acc, value_f64(run ? run[i] : data[sg.offset(seg, begin + i)]), shift, nonzero);
      }
      sn[t] = acc.n;
      s1[t] = acc.s1;
      s2[t] = acc.s2;
      __syncthreads();
      for (int s = kMomentLanes / 2; s > 0; s >>= 1) {
        if (t < s) {
          LaneSums a{sn[t], s1[t], s2[t]};
          lane_merge(a, LaneSums{sn[t + s], s1[t + s], s2[t + s]});
          sn[t] = a.n;
          s1[t] = a.s1;
          s2[t] = a.s2;
        }
        __syncthreads();
      }
      if (t == 0) part[seg * chunks + c] = chunk_moments(LaneSums{sn[0], s1[0], s2[0]}, shift);
      __syncthreads();
    }
  }
}

__global__ void __launch_bounds__(256)
    moments_merge_kernel(Moments* part, int64_t segments, int64_t chunks, double* out) {
  for (int64_t seg = blockIdx.x; seg < segments; seg += gridDim.x) {
    Moments* p = part + seg * chunks;
    for (int64_t s = 1; s < chunks; s *= 2) {
      for (int64_t i = int64_t(threadIdx.x) * 2 * s; i + s < chunks;
           i += int64_t(blockDim.x) * 2 * s)
        p[i] = merge_moments(p[i], p[i + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) finish_moments(p[0], out + 3 * seg);
    __syncthreads();
  }
}

// ---- percentiles ----

int segment_bits(int64_t segments) {
  int b = 0;
  while ((int64_t(1) << b) < segments) ++b;
  return b;
}

// Composite keys (segment << 32 | value key) for data that float32 holds exactly.
template <class T>
__global__ void composite_keys_kernel(const T* data, StatSegments sg, int64_t total,
                                      uint64_t* keys) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t seg = idx / sg.per_segment, i = idx - seg * sg.per_segment;
    const float v = static_cast<float>(value_f64(data[sg.offset(seg, i)]));
    keys[idx] = (static_cast<uint64_t>(seg) << 32) | sort_key32(v);
  }
}

// float64 / int32 data: value keys and segment ids, sorted in two stable passes.
template <class T>
__global__ void double_keys_kernel(const T* data, StatSegments sg, int64_t total, uint64_t* keys,
                                   uint32_t* segs) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t seg = idx / sg.per_segment, i = idx - seg * sg.per_segment;
    keys[idx] = sort_key64(value_f64(data[sg.offset(seg, i)]));
    segs[idx] = static_cast<uint32_t>(seg);
  }
}

constexpr int kMaxQ = 32;  // q values per gather launch (passed by value)
struct QList {
  double q[kMaxQ];
  int count;
  int64_t first;  // index of q[0] among all q
};

template <bool kComposite>
__global__ void percentile_gather_kernel(const uint64_t* sorted, int64_t segments, int64_t n,
                                         QList ql, int64_t num_q, double* out) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < segments * ql.count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t seg = idx / ql.count;
    const int k = static_cast<int>(idx - seg * ql.count);
    const uint64_t* s = sorted + seg * n;
    auto value = [&](int64_t r) -> double {
      return kComposite ? static_cast<double>(key32_value(static_cast<uint32_t>(s[r])))
                        : key64_value(s[r]);
    };
    double result;
    const double last = value(n - 1);
    if (last != last) {
      result = last;  // a NaN sorts last: the segment has one
    } else {
      int64_t lo = 0;
      double w = 0.0;
      percentile_rank(ql.q[k], n, &lo, &w);
      const double a = value(lo);
      const double b = lo + 1 < n ? value(lo + 1) : a;
      result = percentile_lerp(a, b, w);
    }
    out[seg * num_q + ql.first + k] = result;
  }
}

struct PctLayout {
  int64_t total = 0;
  size_t keys_bytes = 0, segs_bytes = 0, temp_bytes = 0;
  bool composite = true;
  int seg_bits = 0;
  size_t bytes() const { return 2 * keys_bytes + 2 * segs_bytes + temp_bytes + 256; }
};

size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

PctLayout pct_layout(const VolumeView& in, const StatSegments& sg) {
  PctLayout l;
  const int64_t segments = in.shape[0] * sg.per_sample;
  l.total = segments * sg.per_segment;
  l.composite = in.dtype != DType::Float64 && in.dtype != DType::Int32;
  l.seg_bits = segment_bits(segments);
  VOXAUG_EXPECTS(l.seg_bits <= 32, "percentiles: too many segments");
  l.keys_bytes = align256(static_cast<size_t>(l.total) * sizeof(uint64_t));
  if (l.composite) {
    VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortKeys(
        nullptr, l.temp_bytes, static_cast<const uint64_t*>(nullptr),
        static_cast<uint64_t*>(nullptr), l.total, 0, 32 + l.seg_bits));
  } else {
    l.segs_bytes = align256(static_cast<size_t>(l.total) * sizeof(uint32_t));
    size_t a = 0, b = 0;
    VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        nullptr, a, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
        static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), l.total, 0, 64));
    VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        nullptr, b, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
        static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr), l.total, 0,
        std::max(1, l.seg_bits)));
    l.temp_bytes = std::max(a, b);
  }
  l.temp_bytes = align256(l.temp_bytes);
  return l;
}

int grid_for(int64_t items) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((items + 255) / 256, 65535)));
}

}  // namespace

void moments_cuda(const VolumeView& in, const StatSegments& sg, bool nonzero, double* out,
                  void* workspace, cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  const int64_t segments = in.shape[0] * sg.per_sample;
  const int64_t chunks = (sg.per_segment + kMomentChunk - 1) / kMomentChunk;
  auto* part = static_cast<Moments*>(workspace);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(chunks, 1 << 30)),
                  static_cast<unsigned>(std::min<int64_t>(segments, 65535)));
  visit_stat_input(in.dtype, "input", [&](auto tag) {
    using T = typename decltype(tag)::type;
    moments_chunk_kernel<T><<<grid, kMomentLanes, 0, stream>>>(static_cast<const T*>(in.data), sg,
                                                               segments, chunks, nonzero, part);
    VOXAUG_CUDA_CHECK_LAUNCH();
  });
  moments_merge_kernel<<<static_cast<unsigned>(std::min<int64_t>(segments, 65535)), 256, 0,
                         stream>>>(part, segments, chunks, out);
  VOXAUG_CUDA_CHECK_LAUNCH();
}

int64_t percentiles_cuda_workspace_bytes(const VolumeView& in, const StatSegments& sg) {
  CudaDeviceGuard guard(in.device_index);
  return static_cast<int64_t>(pct_layout(in, sg).bytes());
}

void percentiles_cuda(const VolumeView& in, const StatSegments& sg, const double* q, int64_t num_q,
                      double* out, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  const PctLayout l = pct_layout(in, sg);
  VOXAUG_EXPECTS(static_cast<size_t>(workspace_bytes) >= l.bytes(),
                 "percentiles: workspace too small");
  const int64_t segments = in.shape[0] * sg.per_sample;
  // 256-byte aligned pieces of the workspace.
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(workspace) + 255) / 256 * 256);
  auto* keys_a = reinterpret_cast<uint64_t*>(base);
  auto* keys_b = reinterpret_cast<uint64_t*>(base + l.keys_bytes);
  auto* segs_a = reinterpret_cast<uint32_t*>(base + 2 * l.keys_bytes);
  auto* segs_b = reinterpret_cast<uint32_t*>(base + 2 * l.keys_bytes + l.segs_bytes);
  void* temp = base + 2 * l.keys_bytes + 2 * l.segs_bytes;
  size_t temp_bytes = l.temp_bytes;
  const uint64_t* sorted = nullptr;
  if (l.composite) {
    visit_stat_input(in.dtype, "input", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, double> && !std::is_same_v<T, int32_t>) {
        composite_keys_kernel<T><<<grid_for(l.total), 256, 0, stream>>>(
            static_cast<const T*>(in.data), sg, l.total, keys_a);
        VOXAUG_CUDA_CHECK_LAUNCH();
      }
    });
    VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys_a, keys_b, l.total, 0,
                                                   32 + l.seg_bits, stream));
    sorted = keys_b;
  } else {
    visit_stat_input(in.dtype, "input", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, double> || std::is_same_v<T, int32_t>) {
        double_keys_kernel<T><<<grid_for(l.total), 256, 0, stream>>>(static_cast<const T*>(in.data),
                                                                     sg, l.total, keys_a, segs_a);
        VOXAUG_CUDA_CHECK_LAUNCH();
      }
    });
    VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_a, keys_b, segs_a,
                                                    segs_b, l.total, 0, 64, stream));
    if (l.seg_bits > 0) {
      temp_bytes = l.temp_bytes;
      VOXAUG_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, segs_b, segs_a, keys_b,
                                                      keys_a, l.total, 0, l.seg_bits, stream));
      sorted = keys_a;
    } else {
      sorted = keys_b;
    }
  }
  for (int64_t first = 0; first < num_q; first += kMaxQ) {
    QList ql{};
    ql.count = static_cast<int>(std::min<int64_t>(kMaxQ, num_q - first));
    ql.first = first;
    for (int k = 0; k < ql.count; ++k) ql.q[k] = q[first + k];
    const int64_t items = segments * ql.count;
    if (l.composite) {
      percentile_gather_kernel<true>
          <<<grid_for(items), 256, 0, stream>>>(sorted, segments, sg.per_segment, ql, num_q, out);
    } else {
      percentile_gather_kernel<false>
          <<<grid_for(items), 256, 0, stream>>>(sorted, segments, sg.per_segment, ql, num_q, out);
    }
    VOXAUG_CUDA_CHECK_LAUNCH();
  }
}

void piecewise_linear_cuda(const PiecewiseForward& f, int64_t batch, int device,
                           cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  CudaLauncher::launch(f, batch, stream);
}

void stat_apply_cuda(const VolumeView& in, const VolumeView& out, const StatApply& p,
                     cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  visit_stat_input(in.dtype, "input", [&](auto tin) {
    using TIn = typename decltype(tin)::type;
    visit_stat_output(out.dtype, "output", [&](auto tout) {
      using TOut = typename decltype(tout)::type;
      using Acc = std::conditional_t<std::is_same_v<TIn, double> || std::is_same_v<TOut, double>,
                                     double, float>;
      const StatApplyForward<TIn, TOut, Acc> f{p,
                                               static_cast<const TIn*>(in.data),
                                               static_cast<TOut*>(out.data),
                                               make_indexer(in),
                                               make_indexer(out),
                                               in.sample_numel()};
      CudaLauncher::launch(f, in.shape[0], stream);
    });
  });
}

}  // namespace voxaug::detail
