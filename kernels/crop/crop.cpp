// voxaug: crop family -- foreground bounding box (validation, CPU backend, routing to CUDA).
#include "voxaug/crop.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/cpu_isa.h"
#include "../common/device.h"
#include "crop_kernels.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void foreground_bbox_cuda(const BBoxParams& p, int64_t batch, int64_t* box, int device,
                          cudaStream_t stream);
void class_centers_cuda(const CenterParams& p, int64_t batch, int64_t* centers,
                        int64_t* class_counts, const int64_t* cached_counts, int device,
                        cudaStream_t stream);
void class_counts_cuda(const CenterParams& p, int64_t batch, int64_t* counts, int device,
                       cudaStream_t stream);
void weighted_centers_cuda(const CenterParams& p, int64_t batch, int64_t* centers, double* stats,
                           int device, cudaStream_t stream);
void uniform_centers_cuda(const CenterParams& p, int64_t batch, int64_t* centers, int device,
                          cudaStream_t stream);
void extract_patches_cuda(const PatchParams& p, int64_t patches, int64_t elem_size, int device,
                          cudaStream_t stream);
void gather_patches_cuda(const GatherParams& p, int64_t patches, int64_t elem_size, int device,
                         cudaStream_t stream);
void aggregate_patches_cuda(const AggregateParams& p, bool accumulate, DType out_dtype, int device,
                            cudaStream_t stream);
#endif
namespace {

// Calls fn(a, b) for every run [a, b) of voxels of [begin, end) (the params' order) inside the
// region: one division per row, each run contiguous.
template <class Fn>
void for_region_runs(const CenterParams& p, int64_t begin, int64_t end, Fn&& fn) {
  const int q0 = p.perm[0], q1 = p.perm[1], q2 = p.perm[2];
  const int64_t s2 = p.size[q2], s1 = p.size[q1];
  for (int64_t v = begin; v < end;) {
    const int64_t i = v % s2, m = (v / s2) % s1, o = v / (s2 * s1);
    const int64_t row = v - i, run_end = std::min(end, row + s2);
    if (m >= p.lo[q1] && m < p.hi[q1] && o >= p.lo[q0] && o < p.hi[q0]) {
      const int64_t a = std::max(v, row + p.lo[q2]), b = std::min(run_end, row + p.hi[q2]);
      if (a < b) fn(a, b);
    }
    v = run_end;
  }
}

// Calls fn(x) for every voxel x of [begin, end) inside the region.
template <class Fn>
void for_region_voxels(const CenterParams& p, int64_t begin, int64_t end, Fn&& fn) {
  for_region_runs(p, begin, end, [&](int64_t a, int64_t b) {
    for (int64_t x = a; x < b; ++x) fn(x);
  });
}

template <class L>
VOXAUG_FORCEINLINE int argmax_class(L val, int K) {
  if constexpr (std::is_integral_v<L>) {
    const int64_t x = static_cast<int64_t>(val);
    return (x >= 0 && x < K) ? static_cast<int>(x) : -1;
  } else {
    const double x = static_cast<double>(val);
    if (!(x >= 0.0 && x < static_cast<double>(K))) return -1;
    const int c = static_cast<int>(x);
    return static_cast<double>(c) == x ? c : -1;
  }
}

// The image threshold as the image's comparison type: float images compare in float against the
// largest float <= t, which gives the float64 comparison's answer for every float x (x > t
// implies x > that float; x above it is at least the next float, which exceeds t); NaN stays NaN.
template <class I>
struct ThresholdOf {
  using type = double;
  static double of(double t) { return t; }
};
template <>
struct ThresholdOf<float> {
  using type = float;
  static float of(double t) {
    float f = static_cast<float>(t);
    if (static_cast<double>(f) > t) f = std::nextafter(f, -INFINITY);
    return f;
  }
};

// Foreground / background candidates of the run [a, b) (Foreground form), added to fg and bg:
// 32-bit sums and branch-free compares, written once and compiled for each instruction set.
template <class L, class I>
VOXAUG_FORCEINLINE void fg_run_body(const L* lp, const I* ip, typename ThresholdOf<I>::type t,
                                    int64_t a, int64_t b, int32_t& fg, int32_t& bg) {
  int32_t f_sum = 0, b_sum = 0;
  if (ip == nullptr) {
    for (int64_t x = a; x < b; ++x) f_sum += lp[x] > L(0);
    fg += f_sum;
    bg += static_cast<int32_t>(b - a) - f_sum;
    return;
  }
  for (int64_t x = a; x < b; ++x) {  // the image restricts the background only (MONAI)
    const int32_t cand = static_cast<typename ThresholdOf<I>::type>(ip[x]) > t;
    const int32_t f = lp[x] > L(0);
    f_sum += f;
    b_sum += cand & (f ^ 1);
  }
  fg += f_sum;
  bg += b_sum;
}
template <class L, class I>
VOXAUG_TARGET_BASELINE void fg_run_baseline(const L* lp, const I* ip,
                                            typename ThresholdOf<I>::type t, int64_t a, int64_t b,
                                            int32_t& fg, int32_t& bg) {
  fg_run_body(lp, ip, t, a, b, fg, bg);
}
#if VOXAUG_CPU_CLONES
template <class L, class I>
VOXAUG_TARGET_AVX2 void fg_run_avx2(const L* lp, const I* ip, typename ThresholdOf<I>::type t,
                                    int64_t a, int64_t b, int32_t& fg, int32_t& bg) {
  fg_run_body(lp, ip, t, a, b, fg, bg);
}
template <class L, class I>
VOXAUG_TARGET_AVX512 void fg_run_avx512(const L* lp, const I* ip, typename ThresholdOf<I>::type t,
                                        int64_t a, int64_t b, int32_t& fg, int32_t& bg) {
  fg_run_body(lp, ip, t, a, b, fg, bg);
}
#endif
template <class L, class I>
void fg_run(CpuIsa isa, const L* lp, const I* ip, typename ThresholdOf<I>::type t, int64_t a,
            int64_t b, int32_t& fg, int32_t& bg) {
#if VOXAUG_CPU_CLONES
  if (isa == CpuIsa::Avx512) return fg_run_avx512(lp, ip, t, a, b, fg, bg);
  if (isa == CpuIsa::Avx2) return fg_run_avx2(lp, ip, t, a, b, fg, bg);
#else
  (void)isa;
#endif
  fg_run_baseline(lp, ip, t, a, b, fg, bg);
}

// Host fast path of the class counts: one dense channel of native dtype for the label (and the
// image), Foreground or Argmax, the dtype switch outside the voxel loop. Same comparisons as
// center_count_voxel (the image threshold a float64 comparison).
template <class L, class I>
void count_classes_dense(const CenterParams& p, int64_t batch, int64_t* counts) {
  const int K = p.num_classes;
  const int64_t voxels = center_voxels(p);
  const CpuIsa isa = cpu_isa();
  const auto thr = ThresholdOf<I>::of(p.image_threshold);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < batch * p.chunks; ++t) {
    const int64_t n = t / p.chunks, chunk = t % p.chunks;
    const int64_t begin = chunk * kCenterChunk, end = std::min(voxels, begin + kCenterChunk);
    const L* lp = static_cast<const L*>(p.label) + n * p.label_stride[0];
    const I* ip = p.image ? static_cast<const I*>(p.image) + n * p.image_stride[0] : nullptr;
    int64_t* h = counts + t * K;
    if (p.form == CropLabelForm::Foreground) {
      int32_t fg = 0, bg = 0;
      for_region_runs(p, begin, end,
                      [&](int64_t a, int64_t b) { fg_run(isa, lp, ip, thr, a, b, fg, bg); });
      h[0] = fg;
      h[1] = bg;
      continue;
    }
    for_region_voxels(p, begin, end, [&](int64_t x) {
      if (ip != nullptr && !(static_cast<double>(ip[x]) > p.image_threshold)) return;
      const int c = argmax_class(lp[x], K);
      if (c >= 0) h[c] += 1;
    });
  }
}

// One channel whose voxels are dense in the params' order: voxel v sits at offset v.
bool dense_one_channel(const CenterParams& p, int64_t channels, const int64_t* stride) {
  const int* q = p.perm;
  return channels == 1 && stride[2 + q[2]] == 1 && stride[2 + q[1]] == p.size[q[2]] &&
         stride[2 + q[0]] == p.size[q[1]] * p.size[q[2]];
}

// Calls fn(T{}) for the native dtypes; false for float16 / bfloat16.
template <class Fn>
bool visit_native(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float64: fn(double{}); return true;
    case DType::Float32: fn(float{}); return true;
    case DType::UInt8: fn(uint8_t{}); return true;
    case DType::Int16: fn(int16_t{}); return true;
    case DType::Int32: fn(int32_t{}); return true;
    case DType::Int64: fn(int64_t{}); return true;
    default: return false;
  }
}

// Counts of every (sample, chunk, class): the typed dense loop where it applies, else per voxel.
void count_classes_cpu(const CenterParams& p, int64_t batch, int64_t* counts) {
  std::fill(counts, counts + batch * p.chunks * p.num_classes, int64_t(0));
  bool done = false;
  if (p.form != CropLabelForm::OneHot && dense_one_channel(p, p.label_channels, p.label_stride) &&
      (p.image == nullptr || dense_one_channel(p, p.image_channels, p.image_stride))) {
    visit_native(p.label_dtype, [&](auto l) {
      using L = decltype(l);
      if (p.image == nullptr) {
        count_classes_dense<L, float>(p, batch, counts);  // I unused without an image
        done = true;
        return;
      }
      done = visit_native(p.image_dtype,
                          [&](auto i) { count_classes_dense<L, decltype(i)>(p, batch, counts); });
    });
  }
  if (done) return;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < batch * p.chunks; ++t) {
    const int64_t n = t / p.chunks, chunk = t % p.chunks;
    const int64_t end = chunk_end(p, chunk);
    for (int64_t v = chunk * kCenterChunk; v < end; ++v)
      center_count_voxel(p, n, v, counts + t * p.num_classes);
  }
}

// Weight sums (the lane order of weight_lane_sum) and minima of chunk t = n * chunks + chunk.
template <class T>
void weight_chunk_dense(const CenterParams& p, int64_t n, int64_t chunk, double shift, double* sum,
                        double* min_region, double* min_all) {
  const T* lp = static_cast<const T*>(p.label) + n * p.label_stride[0];
  const int64_t begin = chunk * kCenterChunk, end = chunk_end(p, chunk);
  // Minima per lane too (elementwise selects vectorise; a scalar min reduction would not
  // without fast-math); min is order-independent, so the result is the same.
  double lanes[kWeightLanes] = {}, lane_mr[kWeightLanes], lane_ma[kWeightLanes];
  for (int l = 0; l < kWeightLanes; ++l) lane_mr[l] = lane_ma[l] = INFINITY;
  for (int64_t a = begin; a < end;) {
    const int64_t l0 = (a - begin) & (kWeightLanes - 1), len = std::min(end - a, kWeightLanes - l0);
    for (int64_t i = 0; i < len; ++i) {
      const double raw = static_cast<double>(lp[a + i]);
      lane_ma[l0 + i] = raw < lane_ma[l0 + i] ? raw : lane_ma[l0 + i];
    }
    a += len;
  }
  const bool clamp = !p.shift_negative;
  for_region_runs(p, begin, end, [&](int64_t a, int64_t b) {
    while (a < b) {  // pieces that do not wrap around the lanes: contiguous, so they vectorise
      const int64_t l0 = (a - begin) & (kWeightLanes - 1), len = std::min(b - a, kWeightLanes - l0);
      const T* src = lp + a;
      double *dst = lanes + l0, *m = lane_mr + l0;
      for (int64_t i = 0; i < len; ++i) {
        const double raw = static_cast<double>(src[i]);
        m[i] = raw < m[i] ? raw : m[i];
        const double w = raw - shift;
        dst[i] += (clamp && w < 0.0) ? 0.0 : w;
      }
      a += len;
    }
  });
  double ma = INFINITY, mr = INFINITY;
  for (int l = 0; l < kWeightLanes; ++l) {
    ma = lane_ma[l] < ma ? lane_ma[l] : ma;
    mr = lane_mr[l] < mr ? lane_mr[l] : mr;
  }
  *sum = weight_combine_lanes(lanes);
  *min_region = mr;
  *min_all = ma;
}

void weight_chunk_cpu(const CenterParams& p, int64_t n, int64_t chunk, double shift, double* sum,
                      double* min_region, double* min_all) {
  if (dense_one_channel(p, 1, p.label_stride) && visit_native(p.label_dtype, [&](auto t) {
        weight_chunk_dense<decltype(t)>(p, n, chunk, shift, sum, min_region, min_all);
      }))
    return;
  double lanes[kWeightLanes];
  double mr = INFINITY, ma = INFINITY;
  for (int l = 0; l < kWeightLanes; ++l)
    lanes[l] = weight_lane_sum(p, n, chunk, l, shift, &mr, &ma);
  *sum = weight_combine_lanes(lanes);
  *min_region = mr;
  *min_all = ma;
}

// Region defaults, validation, scan order: the parts every sampler shares.
void fill_center_params(CenterParams& p, const int64_t size[3], const CropCenterOptions& opt) {
  VOXAUG_EXPECTS(opt.num_samples >= 1,
                 "num_samples must be >= 1, got " + std::to_string(opt.num_samples));
  VOXAUG_EXPECTS(opt.first_crop >= 0, "first_crop must be >= 0");
  for (int a = 0; a < 3; ++a) {
    p.size[a] = size[a];
    p.lo[a] = opt.region_lo[a];
    p.hi[a] = opt.region_hi[a] == 0 ? size[a] : opt.region_hi[a];
    VOXAUG_EXPECTS(p.lo[a] >= 0 && p.lo[a] < p.hi[a] && p.hi[a] <= size[a],
                   "the centre region must be a non-empty box inside the volume, got [" +
                       std::to_string(p.lo[a]) + ", " + std::to_string(p.hi[a]) + ") on axis " +
                       std::to_string(a) + " of size " + std::to_string(size[a]));
    VOXAUG_EXPECTS(p.hi[a] - p.lo[a] <= (int64_t(1) << 32), "the centre region is too large");
  }
  p.num_samples = opt.num_samples;
  p.seed = opt.seed;
  p.first_sample = static_cast<uint32_t>(opt.first_sample);
  p.first_crop = static_cast<uint64_t>(opt.first_crop);
  p.chunks = class_crop_chunks(size[0], size[1], size[2]);
  for (int a = 0; a < 3; ++a) p.perm[a] = a;
}

void check_first_sample(int64_t first_sample, int64_t batch) {
  VOXAUG_EXPECTS(first_sample >= 0 && first_sample + batch <= (int64_t(1) << 32),
                 "first_sample + batch must be in [0, 2^32]");
}

// Scan order: the data's axes by decreasing |stride| (stable: raster order on ties).
void scan_order(CenterParams& p, const int64_t* strides) {
  std::stable_sort(p.perm, p.perm + 3, [&](int a, int b) {
    return std::abs(strides[a + 2]) > std::abs(strides[b + 2]);
  });
}

// Patch extraction on the host: rows along the input's fastest spatial axis (a nibabel volume
// is Fortran-ordered), so reads are sequential; the writes of a row are strided but stay within
// a few cache lines per output row. Copies of T (the element size): exact for every dtype.
template <class T>
void extract_cpu(const PatchParams& p, int64_t patches) {
  int q[3] = {0, 1, 2};
  std::stable_sort(q, q + 3, [&](int a, int b) {
    return std::abs(p.stride[a + 2]) > std::abs(p.stride[b + 2]);
  });
  const int64_t ostr[3] = {p.size[1] * p.size[2], p.size[2], 1};
  const int64_t n0 = p.size[q[0]], n1 = p.size[q[1]], n2 = p.size[q[2]];
  const int64_t rows = patches * p.channels * n0 * n1;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const int64_t block = p.size[0] * p.size[1] * p.size[2];
  if (ostr[q[2]] != 1 && ostr[q[0]] == 1) {
    // The input's fastest axis is the output's slowest (a Fortran-ordered volume): tiles of 8
    // rows, so each step writes 8 adjacent output elements instead of 8 far-apart ones.
    constexpr int kTile = 8;
    const int64_t tiles = (n0 + kTile - 1) / kTile;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < patches * p.channels * tiles * n1; ++r) {
      const int64_t j1 = r % n1, tj = (r / n1) % tiles, pc = r / (tiles * n1);
      const int64_t patch = pc / p.channels, c = pc % p.channels;
      const int64_t st[3] = {p.starts[3 * patch] - p.offset[0],
                             p.starts[3 * patch + 1] - p.offset[1],
                             p.starts[3 * patch + 2] - p.offset[2]};
      const int64_t count = std::min<int64_t>(kTile, n0 - tj * kTile);
      const int64_t is = p.stride[2 + q[2]], os = ostr[q[2]];
      int64_t src[kTile];  // offset of input voxel st along the fast axis (may be < 0)
      int64_t lo[kTile], hi[kTile];
      const int64_t i1 = st[q[1]] + j1;
      for (int64_t t = 0; t < count; ++t) {
        const int64_t i0 = st[q[0]] + tj * kTile + t;
        lo[t] = std::max<int64_t>(0, -st[q[2]]);
        hi[t] = std::min<int64_t>(n2, p.in_size[q[2]] - st[q[2]]);
        src[t] = 0;  // never read when the row is outside
        if (i0 < 0 || i0 >= p.in_size[q[0]] || i1 < 0 || i1 >= p.in_size[q[1]] || lo[t] >= hi[t]) {
          hi[t] = lo[t] = 0;
          continue;
        }
        src[t] = (patch / p.per_volume) * p.stride[0] + c * p.stride[1] + i0 * p.stride[2 + q[0]] +
                 i1 * p.stride[2 + q[1]] + st[q[2]] * is;
      }
      T* o = out + pc * block + tj * kTile + j1 * ostr[q[1]];
      for (int64_t x = 0; x < n2; ++x)
        for (int64_t t = 0; t < count; ++t)
          o[x * os + t] = (x >= lo[t] && x < hi[t]) ? in[src[t] + x * is] : T{};
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t j1 = r % n1, j0 = (r / n1) % n0, pc = r / (n0 * n1);
    const int64_t patch = pc / p.channels, c = pc % p.channels;
    const int64_t st[3] = {p.starts[3 * patch] - p.offset[0], p.starts[3 * patch + 1] - p.offset[1],
                           p.starts[3 * patch + 2] - p.offset[2]};
    T* o = out + pc * block + j0 * ostr[q[0]] + j1 * ostr[q[1]];
    const int64_t os = ostr[q[2]];
    const int64_t i0 = st[q[0]] + j0, i1 = st[q[1]] + j1;
    int64_t x0 = std::max<int64_t>(0, -st[q[2]]);
    const int64_t x1 = std::min<int64_t>(n2, p.in_size[q[2]] - st[q[2]]);
    if (i0 < 0 || i0 >= p.in_size[q[0]] || i1 < 0 || i1 >= p.in_size[q[1]] || x0 >= x1) x0 = n2;
    for (int64_t x = 0; x < std::min(x0, n2); ++x) o[x * os] = T{};
    if (x0 >= n2) continue;
    const int64_t is = p.stride[2 + q[2]];
    const T* src = in + (patch / p.per_volume) * p.stride[0] + c * p.stride[1] +
                   i0 * p.stride[2 + q[0]] + i1 * p.stride[2 + q[1]] + (st[q[2]] + x0) * is;
    if (os == 1 && is == 1) {
      std::memcpy(o + x0, src, static_cast<size_t>(x1 - x0) * sizeof(T));
    } else {
      for (int64_t x = x0; x < x1; ++x) o[x * os] = src[(x - x0) * is];
    }
    for (int64_t x = x1; x < n2; ++x) o[x * os] = T{};
  }
}

// Storage value -> Acc (float16 / bfloat16 through float, as load_dyn).
template <class Acc, class T>
inline Acc load_patch(T v) {
  if constexpr (std::is_same<T, half_t>::value || std::is_same<T, bfloat16_t>::value)
    return static_cast<Acc>(load_as<float>(v));
  else
    return static_cast<Acc>(v);
}

// One run x in [x0, x1) of a patch row into an out row (and a count row), all unit-stride.
template <class Acc, class T>
void aggregate_run_dense(Acc* __restrict o, Acc* __restrict n, const T* __restrict src,
                         const Acc* __restrict w, int64_t x0, int64_t x1) {
  if (w != nullptr) {
    for (int64_t x = x0; x < x1; ++x) o[x] = fadd(o[x], fmul(load_patch<Acc>(src[x]), w[x]));
    if (n != nullptr)
      for (int64_t x = x0; x < x1; ++x) n[x] = fadd(n[x], w[x]);
  } else {
    for (int64_t x = x0; x < x1; ++x) o[x] = fadd(o[x], load_patch<Acc>(src[x]));
    if (n != nullptr)
      for (int64_t x = x0; x < x1; ++x) n[x] = fadd(n[x], Acc(1));
  }
}

// aggregate_patches on the host: calls fn(c, d, h, q, z, y) for every row (c, d, h) of the union
// box (rows in parallel) and, in it, every patch q in order whose box holds the row (z, y: the
// row in q). Each patch then covers its run of x, so every voxel gets the patches in the order
// k = 0, 1, ... (the CUDA body walks a voxel's patches in the same order, with the same
// fmath.h's fmul / fadd, never contracted into an FMA: the same bits).
template <class Fn>
void for_aggregate_rows(const AggregateParams& p, Fn&& fn) {
  const int64_t n0 = p.box_hi[0] - p.box_lo[0], n1 = p.box_hi[1] - p.box_lo[1];
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < p.channels * n0 * n1; ++r) {
    const int64_t h = p.box_lo[1] + r % n1, d = p.box_lo[0] + (r / n1) % n0, c = r / (n0 * n1);
    for (int t = 0; t < p.num_patches; ++t) {
      const AggregatePatch& q = p.patch[t];
      const int64_t z = d - q.start[0], y = h - q.start[1];
      if (z >= q.lo[0] && z < q.hi[0] && y >= q.lo[1] && y < q.hi[1]) fn(c, d, h, q, z, y);
    }
  }
}

// The accumulating form; T: the patches' storage type.
template <class Acc, class T>
void aggregate_add_cpu(const AggregateParams& p) {
  const int64_t os = p.ostride[4], cs = p.cstride[4], ps = p.pstride[4];
  for_aggregate_rows(p, [&](int64_t c, int64_t d, int64_t h, const AggregatePatch& q, int64_t z,
                            int64_t y) {
    const T* src = static_cast<const T*>(p.patches) + q.index * p.pstride[0] + c * p.pstride[1] +
                   z * p.pstride[2] + y * p.pstride[3];
    Acc* o = static_cast<Acc*>(p.out) + c * p.ostride[1] + d * p.ostride[2] + h * p.ostride[3] +
             q.start[2] * os;
    Acc* n = p.count != nullptr && c == 0 ? static_cast<Acc*>(p.count) + d * p.cstride[2] +
                                                h * p.cstride[3] + q.start[2] * cs
                                          : nullptr;
    const Acc* wr = p.weight != nullptr
                        ? static_cast<const Acc*>(p.weight) + (z * p.psize[1] + y) * p.psize[2]
                        : nullptr;
    if (os == 1 && ps == 1 && (n == nullptr || cs == 1)) {  // unit strides: loops that vectorise
      aggregate_run_dense(o, n, src, wr, q.lo[2], q.hi[2]);
    } else if (wr != nullptr) {
      for (int64_t x = q.lo[2]; x < q.hi[2]; ++x)
        o[x * os] = fadd(o[x * os], fmul(load_patch<Acc>(src[x * ps]), wr[x]));
      if (n != nullptr)
        for (int64_t x = q.lo[2]; x < q.hi[2]; ++x) n[x * cs] = fadd(n[x * cs], wr[x]);
    } else {
      for (int64_t x = q.lo[2]; x < q.hi[2]; ++x)
        o[x * os] = fadd(o[x * os], load_patch<Acc>(src[x * ps]));
      if (n != nullptr)
        for (int64_t x = q.lo[2]; x < q.hi[2]; ++x) n[x * cs] = fadd(n[x * cs], Acc(1));
    }
  });
}

template <class Acc>
void aggregate_add_cpu(const AggregateParams& p) {
  switch (p.patch_dtype) {
    case DType::Float64: aggregate_add_cpu<Acc, double>(p); break;
    case DType::Float32: aggregate_add_cpu<Acc, float>(p); break;
    case DType::Float16: aggregate_add_cpu<Acc, half_t>(p); break;
    case DType::BFloat16: aggregate_add_cpu<Acc, bfloat16_t>(p); break;
    case DType::UInt8: aggregate_add_cpu<Acc, uint8_t>(p); break;
    case DType::Int16: aggregate_add_cpu<Acc, int16_t>(p); break;
    case DType::Int32: aggregate_add_cpu<Acc, int32_t>(p); break;
    case DType::Int64: aggregate_add_cpu<Acc, int64_t>(p); break;
  }
}

// The 'crop' form: each patch's run copied over the row in order (the last patch wins).
template <class T>
void aggregate_assign_cpu(const AggregateParams& p) {
  for_aggregate_rows(
      p, [&](int64_t c, int64_t d, int64_t h, const AggregatePatch& q, int64_t z, int64_t y) {
        const T* src = static_cast<const T*>(p.patches) + q.index * p.pstride[0] +
                       c * p.pstride[1] + z * p.pstride[2] + y * p.pstride[3];
        T* o = static_cast<T*>(p.out) + c * p.ostride[1] + d * p.ostride[2] + h * p.ostride[3] +
               q.start[2] * p.ostride[4];
        for (int64_t x = q.lo[2]; x < q.hi[2]; ++x) o[x * p.ostride[4]] = src[x * p.pstride[4]];
      });
}
}  // namespace
}  // namespace detail

namespace {

// Validation and parameters shared by class_crop_centers and class_crop_counts.
detail::CenterParams class_params(const VolumeView& label, const VolumeView* image,
                                  double image_threshold, CropLabelForm form, int num_classes,
                                  const int64_t* correct_size, const CropCenterOptions& opt) {
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(label.shape[a] >= 0, "label sizes must be >= 0");
  VOXAUG_EXPECTS(label.shape[1] >= 1, "label must have at least one channel");
  for (int a = 2; a < 5; ++a) VOXAUG_EXPECTS(label.shape[a] >= 1, "label must not be empty");
  detail::check_first_sample(opt.first_sample, label.shape[0]);
  detail::CenterParams p{};
  p.rule = detail::CenterRule::Classes;
  p.form = form;
  const int64_t size[3] = {label.shape[2], label.shape[3], label.shape[4]};
  detail::fill_center_params(p, size, opt);
  if (form == CropLabelForm::Foreground) {
    VOXAUG_EXPECTS(num_classes == 2,
                   "the Foreground form has 2 classes (fg, bg), got num_classes " +
                       std::to_string(num_classes));
  } else if (form == CropLabelForm::Argmax) {
    VOXAUG_EXPECTS(label.shape[1] == 1,
                   "an argmax label must have one channel, got " + std::to_string(label.shape[1]));
  } else {
    VOXAUG_EXPECTS(form == CropLabelForm::OneHot, "unknown label form");
    VOXAUG_EXPECTS(num_classes == label.shape[1],
                   "a one-hot label has one class per channel: num_classes must be " +
                       std::to_string(label.shape[1]) + ", got " + std::to_string(num_classes));
  }
  VOXAUG_EXPECTS(num_classes >= 1 && num_classes <= kMaxCropClasses,
                 "num_classes must be in [1, " + std::to_string(kMaxCropClasses) + "], got " +
                     std::to_string(num_classes));
  p.label = label.data;
  p.label_dtype = label.dtype;
  p.label_channels = label.shape[1];
  for (int a = 0; a < 5; ++a) p.label_stride[a] = label.strides[a];
  p.num_classes = num_classes;
  if (correct_size != nullptr) {
    p.correct = true;
    for (int a = 0; a < 3; ++a) {
      VOXAUG_EXPECTS(correct_size[a] >= 1 && correct_size[a] <= size[a],
                     "spatial_size must be in [1, the label's size] per axis (allow_smaller is "
                     "the caller's), got " +
                         std::to_string(correct_size[a]) + " for size " + std::to_string(size[a]));
      p.crop[a] = correct_size[a];
    }
  }
  if (image != nullptr) {
    VOXAUG_EXPECTS(image->shape[0] == label.shape[0] && image->shape[2] == label.shape[2] &&
                       image->shape[3] == label.shape[3] && image->shape[4] == label.shape[4],
                   "image must have the label's batch and spatial size: " + image->describe() +
                       " vs " + label.describe());
    VOXAUG_EXPECTS(image->device == label.device && image->device_index == label.device_index,
                   "image must be on the label's device");
    VOXAUG_EXPECTS(!std::isnan(image_threshold), "image_threshold must not be NaN");
    p.image = image->data;
    p.image_dtype = image->dtype;
    p.image_channels = image->shape[1];
    for (int a = 0; a < 5; ++a) p.image_stride[a] = image->strides[a];
  }
  p.image_threshold = image_threshold;
  detail::scan_order(p, label.strides);
  return p;
}

}  // namespace

static_assert(kCropCountChunk == detail::kCenterChunk, "the public chunk size is the scan's");

void class_crop_counts(const VolumeView& label, const VolumeView* image, double image_threshold,
                       CropLabelForm form, int num_classes, int64_t* counts, cudaStream_t stream) {
  const detail::CenterParams p =
      class_params(label, image, image_threshold, form, num_classes, nullptr, CropCenterOptions{});
  const int64_t batch = label.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(counts != nullptr, "counts must not be null");
  if (label.device == Device::CPU) {
    detail::count_classes_cpu(p, batch, counts);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(label.data, label.device_index, "label");
  detail::check_device_pointer(counts, label.device_index, "counts");
  detail::class_counts_cuda(p, batch, counts, label.device_index, stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void class_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                        CropLabelForm form, int num_classes, const double* ratios,
                        const int64_t* correct_size, const CropCenterOptions& opt, int64_t* centers,
                        int64_t* class_counts, cudaStream_t stream, const int64_t* cached_counts) {
  detail::CenterParams p =
      class_params(label, image, image_threshold, form, num_classes, correct_size, opt);
  VOXAUG_EXPECTS(ratios != nullptr, "ratios must not be null");
  for (int c = 0; c < num_classes; ++c)
    VOXAUG_EXPECTS(ratios[c] >= 0.0 && std::isfinite(ratios[c]),
                   "ratios must be finite and >= 0, got ratios[" + std::to_string(c) +
                       "] = " + std::to_string(ratios[c]));
  if (cached_counts != nullptr) {
    for (int a = 0; a < 3; ++a)
      VOXAUG_EXPECTS(p.lo[a] == 0 && p.hi[a] == p.size[a],
                     "cached counts cover the whole volume: the centre region must be the whole "
                     "volume");
  }
  const int64_t batch = label.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(centers != nullptr, "centers must not be null");
  if (label.device == Device::CPU) {
    p.ratios = ratios;
    const int K = num_classes;
    std::vector<int64_t> own_counts;
    const int64_t* counts = cached_counts;
    if (counts == nullptr) {
      own_counts.resize(static_cast<size_t>(batch * p.chunks * K));
      detail::count_classes_cpu(p, batch, own_counts.data());
      counts = own_counts.data();
    }
    std::vector<int64_t> own;
    int64_t* totals = class_counts;
    if (totals == nullptr) {
      own.resize(static_cast<size_t>(batch * K));
      totals = own.data();
    }
    for (int64_t n = 0; n < batch; ++n)
      for (int c = 0; c < K; ++c) {
        int64_t t = 0;
        for (int64_t ch = 0; ch < p.chunks; ++ch) t += counts[(n * p.chunks + ch) * K + c];
        totals[n * K + c] = t;
      }
      // A parallel region only pays off for many crops (each walks at most one chunk).
#pragma omp parallel for schedule(static) if (batch * p.num_samples >= 64)
    for (int64_t t = 0; t < batch * p.num_samples; ++t)
      detail::class_select(p, counts, totals, t / p.num_samples,
                           static_cast<int>(t % p.num_samples), centers + 3 * t);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(label.data, label.device_index, "label");
  detail::check_device_pointer(centers, label.device_index, "centers");
  if (class_counts != nullptr)
    detail::check_device_pointer(class_counts, label.device_index, "class_counts");
  if (cached_counts != nullptr)
    detail::check_device_pointer(cached_counts, label.device_index, "cached_counts");
  p.ratios = ratios;  // host; the CUDA backend copies it
  detail::class_centers_cuda(p, batch, centers, class_counts, cached_counts, label.device_index,
                             stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void pos_neg_crop_centers(const VolumeView& label, const VolumeView* image, double image_threshold,
                          double pos_ratio, int num_samples, const int64_t spatial_size[3],
                          uint64_t seed, int64_t first_sample, int64_t* centers,
                          cudaStream_t stream, const int64_t* cached_counts) {
  VOXAUG_EXPECTS(num_samples >= 1, "num_samples must be >= 1, got " + std::to_string(num_samples));
  VOXAUG_EXPECTS(
      pos_ratio >= 0.0 && pos_ratio <= 1.0,
      "pos_ratio = pos / (pos + neg) must be in [0, 1], got " + std::to_string(pos_ratio));
  const double ratios[2] = {pos_ratio, 1.0 - pos_ratio};
  CropCenterOptions opt;
  opt.num_samples = num_samples;
  opt.seed = seed;
  opt.first_sample = first_sample;
  class_crop_centers(label, image, image_threshold, CropLabelForm::Foreground, 2, ratios,
                     spatial_size, opt, centers, nullptr, stream, cached_counts);
}

void weighted_crop_centers(const VolumeView& weights, bool shift_negative,
                           const CropCenterOptions& opt, int64_t* centers, double* stats,
                           cudaStream_t stream) {
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(weights.shape[a] >= 0, "weight map sizes must be >= 0");
  VOXAUG_EXPECTS(weights.shape[1] >= 1, "weight map must have at least one channel");
  for (int a = 2; a < 5; ++a) VOXAUG_EXPECTS(weights.shape[a] >= 1, "weight map must not be empty");
  detail::check_first_sample(opt.first_sample, weights.shape[0]);
  detail::CenterParams p{};
  p.rule = detail::CenterRule::Weights;
  const int64_t size[3] = {weights.shape[2], weights.shape[3], weights.shape[4]};
  detail::fill_center_params(p, size, opt);
  p.label = weights.data;
  p.label_dtype = weights.dtype;
  p.label_channels = 1;  // channel 0, as MONAI and TorchIO
  for (int a = 0; a < 5; ++a) p.label_stride[a] = weights.strides[a];
  p.shift_negative = shift_negative;
  detail::scan_order(p, weights.strides);
  const int64_t batch = weights.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(centers != nullptr, "centers must not be null");
  if (weights.device == Device::CPU) {
    std::vector<double> sums(static_cast<size_t>(batch * p.chunks));
    std::vector<double> mr(sums.size()), ma(sums.size());
    std::vector<double> own;
    double* st = stats;
    if (st == nullptr) {
      own.resize(static_cast<size_t>(batch * 3));
      st = own.data();
    }
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < batch * p.chunks; ++t)
      detail::weight_chunk_cpu(p, t / p.chunks, t % p.chunks, 0.0, &sums[t], &mr[t], &ma[t]);
    for (int64_t n = 0; n < batch; ++n) {
      double min_region = INFINITY, min_all = INFINITY;
      for (int64_t c = 0; c < p.chunks; ++c) {
        min_region = std::min(min_region, mr[n * p.chunks + c]);
        min_all = std::min(min_all, ma[n * p.chunks + c]);
      }
      const double shift = (shift_negative && min_region < 0.0) ? min_region : 0.0;
      if (shift != 0.0) {
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < p.chunks; ++c) {
          double a, b;
          detail::weight_chunk_cpu(p, n, c, shift, &sums[n * p.chunks + c], &a, &b);
        }
      }
      double total = 0.0;
      for (int64_t c = 0; c < p.chunks; ++c) total += sums[n * p.chunks + c];
      st[3 * n] = total;
      st[3 * n + 1] = shift;
      st[3 * n + 2] = min_all;
    }
#pragma omp parallel for schedule(static) if (batch * p.num_samples >= 64)
    for (int64_t t = 0; t < batch * p.num_samples; ++t)
      detail::weighted_select(p, sums.data(), st, t / p.num_samples,
                              static_cast<int>(t % p.num_samples), centers + 3 * t);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(weights.data, weights.device_index, "weight map");
  detail::check_device_pointer(centers, weights.device_index, "centers");
  if (stats != nullptr) detail::check_device_pointer(stats, weights.device_index, "stats");
  detail::weighted_centers_cuda(p, batch, centers, stats, weights.device_index, stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void uniform_crop_centers(int64_t batch, const CropCenterOptions& opt, Device device,
                          int device_index, int64_t* centers, cudaStream_t stream) {
  VOXAUG_EXPECTS(batch >= 0, "batch must be >= 0");
  detail::check_first_sample(opt.first_sample, batch);
  detail::CenterParams p{};
  p.rule = detail::CenterRule::Uniform;
  int64_t size[3];
  for (int a = 0; a < 3; ++a) {
    VOXAUG_EXPECTS(opt.region_hi[a] >= 1,
                   "uniform_crop_centers needs an explicit region (region_hi >= 1 per axis)");
    size[a] = opt.region_hi[a];
  }
  detail::fill_center_params(p, size, opt);
  if (batch == 0) return;
  VOXAUG_EXPECTS(centers != nullptr, "centers must not be null");
  if (device == Device::CPU) {
#pragma omp parallel for schedule(static) if (batch * p.num_samples >= 64)
    for (int64_t t = 0; t < batch * p.num_samples; ++t)
      detail::uniform_select(p, t / p.num_samples, static_cast<int>(t % p.num_samples),
                             centers + 3 * t);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(centers, device_index, "centers");
  detail::uniform_centers_cuda(p, batch, centers, device_index, stream);
#else
  (void)device_index;
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void extract_patches(const VolumeView& in, const int64_t* starts, const int64_t* offset,
                     int64_t num_patches, const int64_t size[3], void* out, cudaStream_t stream) {
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(in.shape[a] >= 0, "input sizes must be >= 0");
  VOXAUG_EXPECTS(num_patches >= 1, "num_patches must be >= 1, got " + std::to_string(num_patches));
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(size[a] >= 1, "patch size must be >= 1 per axis, got " +
                                     std::to_string(size[a]) + " on axis " + std::to_string(a));
  detail::PatchParams p{};
  p.in = in.data;
  p.channels = in.shape[1];
  for (int a = 0; a < 5; ++a) p.stride[a] = in.strides[a];
  for (int a = 0; a < 3; ++a) {
    p.in_size[a] = in.shape[a + 2], p.size[a] = size[a];
    p.offset[a] = offset != nullptr ? offset[a] : 0;
  }
  p.per_volume = num_patches;
  p.starts = starts;
  p.out = out;
  const int64_t patches = in.shape[0] * num_patches;
  if (patches == 0 || in.shape[1] == 0) return;
  VOXAUG_EXPECTS(starts != nullptr && out != nullptr, "starts and out must not be null");
  const int64_t es = dtype_size(in.dtype);
  if (in.device == Device::CPU) {
    detail::by_element_size(es, "extract_patches",
                            [&](auto tag) { detail::extract_cpu<decltype(tag)>(p, patches); });
    return;
  }
#if VOXAUG_WITH_CUDA
  // An empty volume has no data pointer: every patch voxel is outside it (the fill), as on the
  // host.
  if (in.numel() > 0) detail::check_device_pointer(in.data, in.device_index, "input");
  detail::check_device_pointer(out, in.device_index, "out");
  detail::check_device_pointer(starts, in.device_index, "starts");
  detail::extract_patches_cuda(p, patches, es, in.device_index, stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void gather_patches(const VolumeView* volumes, int64_t num_volumes, const int64_t* sample_index,
                    const int64_t* starts, const int64_t* offset, int64_t num_patches,
                    const int64_t size[3], void* out, cudaStream_t stream) {
  VOXAUG_EXPECTS(volumes != nullptr && num_volumes >= 1,
                 "volumes must hold at least one volume, got " + std::to_string(num_volumes));
  VOXAUG_EXPECTS(num_patches >= 1, "num_patches must be >= 1, got " + std::to_string(num_patches));
  VOXAUG_EXPECTS(sample_index != nullptr, "sample_index must not be null");
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(size[a] >= 1, "patch size must be >= 1 per axis, got " +
                                     std::to_string(size[a]) + " on axis " + std::to_string(a));
  const VolumeView& v0 = volumes[0];
  std::vector<int64_t> first(num_volumes + 1, 0);  // first[i]: volume i's first sample
  for (int64_t i = 0; i < num_volumes; ++i) {
    const VolumeView& v = volumes[i];
    const std::string name = "volumes[" + std::to_string(i) + "]";
    for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(v.shape[a] >= 0, name + " sizes must be >= 0");
    VOXAUG_EXPECTS(v.dtype == v0.dtype, name + " must have volumes[0]'s dtype " +
                                            dtype_name(v0.dtype) + ", got " + dtype_name(v.dtype));
    VOXAUG_EXPECTS(v.shape[1] == v0.shape[1], name + " must have volumes[0]'s " +
                                                  std::to_string(v0.shape[1]) + " channels, got " +
                                                  std::to_string(v.shape[1]));
    VOXAUG_EXPECTS(v.device == v0.device && v.device_index == v0.device_index,
                   name + " must be on volumes[0]'s device");
    first[i + 1] = first[i] + v.shape[0];
  }
  // Each patch's sample: (volume, sample within it), found once on the host.
  std::vector<std::pair<int64_t, int64_t>> which(num_patches);
  for (int64_t k = 0; k < num_patches; ++k) {
    const int64_t j = sample_index[k];
    VOXAUG_EXPECTS(j >= 0 && j < first[num_volumes],
                   "sample_index[" + std::to_string(k) + "] must be in [0, " +
                       std::to_string(first[num_volumes]) + ") (the volumes' samples), got " +
                       std::to_string(j));
    const int64_t i = std::upper_bound(first.begin(), first.end(), j) - first.begin() - 1;
    which[k] = {i, j - first[i]};
  }
  if (v0.shape[1] == 0) return;
  VOXAUG_EXPECTS(starts != nullptr && out != nullptr, "starts and out must not be null");
  const int64_t es = dtype_size(v0.dtype);
  const int64_t patch_bytes = v0.shape[1] * size[0] * size[1] * size[2] * es;
  // The address of a patch's sample: an empty sample is never read (every voxel is outside it).
  auto sample_data = [&](int64_t k) -> const char* {
    const VolumeView& v = volumes[which[k].first];
    return v.data == nullptr
               ? nullptr
               : static_cast<const char*>(v.data) + which[k].second * v.strides[0] * es;
  };
  if (v0.device == Device::CPU) {
    // One patch at a time through extract_patches' host loops (each parallel over its rows).
    detail::by_element_size(es, "gather_patches", [&](auto tag) {
      for (int64_t k = 0; k < num_patches; ++k) {
        const VolumeView& v = volumes[which[k].first];
        detail::PatchParams p{};
        p.in = sample_data(k);
        p.channels = v.shape[1];
        for (int a = 1; a < 5; ++a) p.stride[a] = v.strides[a];
        for (int a = 0; a < 3; ++a) {
          p.in_size[a] = v.shape[a + 2], p.size[a] = size[a];
          p.offset[a] = offset != nullptr ? offset[a] : 0;
        }
        p.per_volume = 1;
        p.starts = starts + 3 * k;
        p.out = static_cast<char*>(out) + k * patch_bytes;
        detail::extract_cpu<decltype(tag)>(p, 1);
      }
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  for (int64_t i = 0; i < num_volumes; ++i)
    if (volumes[i].numel() > 0)
      detail::check_device_pointer(volumes[i].data, v0.device_index,
                                   "volumes[" + std::to_string(i) + "]");
  detail::check_device_pointer(out, v0.device_index, "out");
  detail::check_device_pointer(starts, v0.device_index, "starts");
  for (int64_t k0 = 0; k0 < num_patches; k0 += kGatherPatchesPerLaunch) {
    const int64_t count = std::min(kGatherPatchesPerLaunch, num_patches - k0);
    detail::GatherParams p{};
    for (int64_t k = 0; k < count; ++k) {
      const VolumeView& v = volumes[which[k0 + k].first];
      detail::GatherSource& s = p.src[k];
      s.data = sample_data(k0 + k);
      for (int a = 0; a < 3; ++a) s.in_size[a] = v.shape[a + 2];
      for (int a = 0; a < 4; ++a) s.stride[a] = v.strides[a + 1];
    }
    p.starts = starts + 3 * k0;
    for (int a = 0; a < 3; ++a)
      p.offset[a] = offset != nullptr ? offset[a] : 0, p.size[a] = size[a];
    p.channels = v0.shape[1];
    p.out = static_cast<char*>(out) + k0 * patch_bytes;
    detail::gather_patches_cuda(p, count, es, v0.device_index, stream);
  }
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void aggregate_patches(const VolumeView& patches, const int64_t* starts, const int64_t* boxes,
                       bool accumulate, const void* weight, const VolumeView& out,
                       const VolumeView* count, cudaStream_t stream) {
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(patches.shape[a] >= 0, "patches sizes must be >= 0");
    VOXAUG_EXPECTS(out.shape[a] >= 0, "out sizes must be >= 0");
  }
  VOXAUG_EXPECTS(out.shape[0] == 1,
                 "out must be (1, C, D, H, W), got N = " + std::to_string(out.shape[0]));
  VOXAUG_EXPECTS(patches.shape[1] == out.shape[1],
                 "patches must have out's " + std::to_string(out.shape[1]) + " channels, got " +
                     std::to_string(patches.shape[1]));
  VOXAUG_EXPECTS(patches.device == out.device && patches.device_index == out.device_index,
                 "patches and out must be on one device");
  const bool fp_out = out.dtype == DType::Float32 || out.dtype == DType::Float64;
  if (accumulate) {
    VOXAUG_EXPECTS(fp_out, std::string("out must be float32 or float64 to accumulate, got ") +
                               dtype_name(out.dtype));
    if (count != nullptr) {
      VOXAUG_EXPECTS(count->dtype == out.dtype, std::string("count must have out's dtype ") +
                                                    dtype_name(out.dtype) + ", got " +
                                                    dtype_name(count->dtype));
      VOXAUG_EXPECTS(count->shape[0] == 1 && count->shape[1] == 1 &&
                         count->shape[2] == out.shape[2] && count->shape[3] == out.shape[3] &&
                         count->shape[4] == out.shape[4],
                     "count must be (1, 1, D, H, W) with out's spatial size");
      VOXAUG_EXPECTS(count->device == out.device && count->device_index == out.device_index,
                     "count must be on out's device");
    }
  } else {
    VOXAUG_EXPECTS(patches.dtype == out.dtype, std::string("patches must have out's dtype ") +
                                                   dtype_name(out.dtype) + " to be copied, got " +
                                                   dtype_name(patches.dtype));
    VOXAUG_EXPECTS(weight == nullptr && count == nullptr,
                   "weight and count are for accumulate = true only");
  }
  const int64_t K = patches.shape[0];
  if (K == 0 || out.numel() == 0) return;
  VOXAUG_EXPECTS(starts != nullptr, "starts must not be null");
  detail::AggregateParams p{};
  p.patches = patches.data;
  p.patch_dtype = patches.dtype;
  for (int a = 0; a < 5; ++a) {
    p.pstride[a] = patches.strides[a], p.ostride[a] = out.strides[a];
    p.cstride[a] = count != nullptr ? count->strides[a] : 0;
  }
  for (int a = 0; a < 3; ++a) p.psize[a] = patches.shape[a + 2];
  p.weight = weight;
  p.out = out.data;
  p.channels = out.shape[1];
  p.count = count != nullptr ? count->data : nullptr;
  for (int64_t k0 = 0; k0 < K; k0 += kAggregatePatchesPerLaunch) {
    const int64_t chunk = std::min(kAggregatePatchesPerLaunch, K - k0);
    p.num_patches = 0;
    for (int a = 0; a < 3; ++a) p.box_lo[a] = out.shape[a + 2], p.box_hi[a] = 0;
    for (int64_t k = k0; k < k0 + chunk; ++k) {
      detail::AggregatePatch q{};
      q.index = k;
      bool empty = false;
      for (int a = 0; a < 3; ++a) {
        const int64_t P = patches.shape[a + 2];
        const int64_t lo = boxes != nullptr ? boxes[6 * k + a] : 0;
        const int64_t hi = boxes != nullptr ? boxes[6 * k + 3 + a] : P;
        VOXAUG_EXPECTS(0 <= lo && lo <= hi && hi <= P,
                       "boxes[" + std::to_string(k) +
                           "] must satisfy 0 <= lo <= hi <= patch size on axis " +
                           std::to_string(a) + ", got [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + ")");
        q.start[a] = starts[3 * k + a];
        // Clip to out: start + [lo, hi) inside [0, size).
        q.lo[a] = std::max(lo, -q.start[a]);
        q.hi[a] = std::min(hi, out.shape[a + 2] - q.start[a]);
        if (q.lo[a] >= q.hi[a]) empty = true;
      }
      if (empty) continue;
      for (int a = 0; a < 3; ++a) {
        p.box_lo[a] = std::min(p.box_lo[a], q.start[a] + q.lo[a]);
        p.box_hi[a] = std::max(p.box_hi[a], q.start[a] + q.hi[a]);
      }
      p.patch[p.num_patches++] = q;
    }
    if (p.num_patches == 0 || p.channels == 0) continue;
    if (out.device == Device::CPU) {
      if (accumulate) {
        if (out.dtype == DType::Float32)
          detail::aggregate_add_cpu<float>(p);
        else
          detail::aggregate_add_cpu<double>(p);
      } else {
        detail::by_element_size(dtype_size(out.dtype), "aggregate_patches",
                                [&](auto tag) { detail::aggregate_assign_cpu<decltype(tag)>(p); });
      }
      continue;
    }
#if VOXAUG_WITH_CUDA
    if (k0 == 0) {
      detail::check_device_pointer(patches.data, out.device_index, "patches");
      detail::check_device_pointer(out.data, out.device_index, "out");
      if (weight != nullptr) detail::check_device_pointer(weight, out.device_index, "weight");
      if (p.count != nullptr) detail::check_device_pointer(p.count, out.device_index, "count");
    }
    detail::aggregate_patches_cuda(p, accumulate, out.dtype, out.device_index, stream);
#else
    (void)stream;
    VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
  }
}

void foreground_bbox(const VolumeView& in, double threshold, const int64_t* channels,
                     int num_channels, int64_t* box, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;  // the CPU-only build has no stream
#endif
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(in.shape[a] >= 0, "image sizes must be >= 0");
  VOXAUG_EXPECTS(!std::isnan(threshold), "threshold must not be NaN");
  detail::BBoxParams p{};
  p.data = in.data;
  p.dtype = in.dtype;
  for (int a = 0; a < 3; ++a) p.size[a] = in.shape[a + 2];
  for (int a = 0; a < 5; ++a) p.stride[a] = in.strides[a];
  p.threshold = threshold;
  if (channels == nullptr) {
    VOXAUG_EXPECTS(in.shape[1] <= detail::kMaxBBoxChannels,
                   "foreground_bbox: at most " + std::to_string(detail::kMaxBBoxChannels) +
                       " channels (select some with channel_indices), got " +
                       std::to_string(in.shape[1]));
    p.num_channels = static_cast<int>(in.shape[1]);
    for (int k = 0; k < p.num_channels; ++k) p.channels[k] = k;
  } else {
    VOXAUG_EXPECTS(num_channels >= 1 && num_channels <= detail::kMaxBBoxChannels,
                   "channel_indices must hold 1 to " + std::to_string(detail::kMaxBBoxChannels) +
                       " channels, got " + std::to_string(num_channels));
    p.num_channels = num_channels;
    for (int k = 0; k < num_channels; ++k) {
      VOXAUG_EXPECTS(channels[k] >= 0 && channels[k] < in.shape[1],
                     "channel_indices[" + std::to_string(k) + "] = " + std::to_string(channels[k]) +
                         " is not a channel of the image (C = " + std::to_string(in.shape[1]) +
                         ")");
      p.channels[k] = channels[k];
    }
  }
  const int64_t batch = in.shape[0];
  if (batch == 0) return;
  VOXAUG_EXPECTS(box != nullptr, "box must not be null");
  if (in.device == Device::CPU) {
    const int64_t D = p.size[0], H = p.size[1], W = p.size[2];
    // Per (sample, slice): the slice's extent in h and w, then a fixed-order reduction.
    std::vector<int64_t> slice(static_cast<size_t>(batch * D * 4));
#pragma omp parallel for schedule(static)
    for (int64_t nd = 0; nd < batch * D; ++nd) {
      const int64_t n = nd / D, d = nd % D;
      int64_t h0 = INT64_MAX, h1 = -1, w0 = INT64_MAX, w1 = -1;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          if (detail::bbox_foreground(p, n, d, h, w)) {
            h0 = std::min(h0, h), h1 = std::max(h1, h);
            w0 = std::min(w0, w), w1 = std::max(w1, w);
          }
      int64_t* s = &slice[static_cast<size_t>(4 * nd)];
      s[0] = h0, s[1] = h1, s[2] = w0, s[3] = w1;
    }
    for (int64_t n = 0; n < batch; ++n) {
      int64_t lo[3] = {INT64_MAX, INT64_MAX, INT64_MAX}, hi[3] = {-1, -1, -1};
      for (int64_t d = 0; d < D; ++d) {
        const int64_t* s = &slice[static_cast<size_t>(4 * (n * D + d))];
        if (s[1] < 0) continue;
        lo[0] = std::min(lo[0], d), hi[0] = std::max(hi[0], d);
        lo[1] = std::min(lo[1], s[0]), hi[1] = std::max(hi[1], s[1]);
        lo[2] = std::min(lo[2], s[2]), hi[2] = std::max(hi[2], s[3]);
      }
      int64_t* b = box + 6 * n;
      for (int a = 0; a < 3; ++a) {
        b[a] = hi[0] < 0 ? 0 : lo[a];
        b[a + 3] = hi[0] < 0 ? 0 : hi[a] + 1;
      }
    }
    return;
  }
#if VOXAUG_WITH_CUDA
  // An empty volume has no data pointer: zero boxes, as on the host.
  if (in.numel() > 0) detail::check_device_pointer(in.data, in.device_index, "image");
  detail::check_device_pointer(box, in.device_index, "box");
  detail::foreground_bbox_cuda(p, batch, box, in.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
