// voxaug: stats family -- validation, the CPU (OpenMP) backend, and routing to the CUDA
// backend (stats.cu). The reduction order is the one of detail/stats.h on both backends.
#include "voxaug/stats.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/cpu_isa.h"
#if VOXAUG_CPU_CLONES
#include <immintrin.h>
#endif
#include "../common/device.h"
#include "../common/launch_cpu.h"
#include "../common/prefetch.h"
#include "stats_kernels.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
namespace {

StatSegments make_stat_segments(const VolumeView& in, bool channel_wise) {
  StatSegments sg;
  sg.ix = make_indexer(in);
  sg.per_sample = channel_wise ? in.shape[1] : 1;
  sg.per_segment = channel_wise ? in.shape[2] * in.shape[3] * in.shape[4] : in.sample_numel();
  return sg;
}

// Eight lanes as one vector (GCC / Clang vector extensions; each target clone lowers them to its
// own registers). Element-wise the operations are those of lane_add, in the same order.
typedef double V8d __attribute__((vector_size(64)));
typedef int64_t V8l __attribute__((vector_size(64)));

// (By reference: a 64-byte vector return value would differ between the ISA clones' ABIs.)
// Element-wise on purpose: GCC 12 lowers __builtin_convertvector of 8 floats in this clone-
// agnostic body to 128-bit halves before inlining (two converts, an extract and an insert per
// vector); the element loop becomes one vcvtps2pd zmm in the AVX-512 clone (the float32
// moments pass 2x faster on one core).
template <class T>
VOXAUG_FORCEINLINE void load8_f64(const T* p, V8d& v) {
  for (int t = 0; t < 8; ++t) v[t] = value_f64(p[t]);
}

// One chunk (kMomentChunk elements from `begin`) of segment `seg`: lanes in structure-of-
// arrays form (vectorises), the same operations in the same order as lane_add / lane_merge.
template <bool kNonzero, class T>
VOXAUG_FORCEINLINE Moments chunk_body(const T* data, const StatSegments& sg, int64_t seg,
                                      int64_t begin) {
  constexpr bool nonzero = kNonzero;  // a constant: no data-dependent branch in the loops
  alignas(64) int64_t ln[kMomentLanes];
  alignas(64) double l1[kMomentLanes], l2[kMomentLanes];
  for (int t = 0; t < kMomentLanes; ++t) {
    ln[t] = 0;
    l1[t] = 0.0;
    l2[t] = 0.0;
  }
  const int64_t cnt = std::min(kMomentChunk, sg.per_segment - begin);
  const double shift = value_f64(data[sg.offset(seg, begin)]);
  const bool dense = sg.ix.dense;
  const T* base = data + (dense ? sg.offset(seg, begin) : 0);
  if (dense && cnt == kMomentChunk) {
    // A full dense chunk: kRegLanes lanes at a time, each lane's sums kept in registers through
    // all kMomentPerLane rows (the row-outer loop below loads and stores every lane's three sums
    // for each row, which bounded this pass). Per lane the same operations in the same order.
    constexpr int kRegLanes = 32, kVecs = kRegLanes / 8;
    static_assert(kMomentLanes % kRegLanes == 0, "lanes must split into register blocks");
    const V8d sh = V8d{} + shift;
    // The blocks read the chunk column-wise (a 1 KiB stride for float32), which the hardware
    // prefetchers do not run ahead of: each block prefetches its share of the next chunk's
    // lines (the next chunk in memory, dense), so a volume larger than the caches streams.
    constexpr int64_t kLinesPerBlock =
        kMomentChunk * int64_t(sizeof(T)) / 64 / (kMomentLanes / kRegLanes);
    const char* next = reinterpret_cast<const char*>(base + kMomentChunk);
    for (int tb = 0; tb < kMomentLanes; tb += kRegLanes) {
      const char* pre = next + int64_t(tb / kRegLanes) * kLinesPerBlock * 64;
      for (int64_t l = 0; l < kLinesPerBlock; ++l) prefetch_line_l2(pre + 64 * l);
      V8l bn[kVecs];
      V8d b1[kVecs], b2[kVecs];
      for (int q = 0; q < kVecs; ++q) {
        bn[q] = V8l{};
        b1[q] = V8d{};
        b2[q] = V8d{};
      }
      for (int j = 0; j < kMomentPerLane; ++j) {
        const T* p = base + int64_t(j) * kMomentLanes + tb;
        for (int q = 0; q < kVecs; ++q) {
          V8d x;
          load8_f64(p + 8 * q, x);
          V8d d = x - sh;
          if (nonzero) {
            const V8l counted = x != 0.0;  // -1 where counted (NaN too), else 0
            d = reinterpret_cast<V8d>(reinterpret_cast<V8l>(d) & counted);  // +0 where not
            bn[q] -= counted;
          }  // else every lane counts each of its kMomentPerLane rows (set below)
          b1[q] += d;
          b2[q] += d * d;
        }
      }
      for (int q = 0; q < kVecs; ++q)
        for (int t = 0; t < 8; ++t) {
          ln[tb + 8 * q + t] = nonzero ? bn[q][t] : int64_t(kMomentPerLane);
          l1[tb + 8 * q + t] = b1[q][t];
          l2[tb + 8 * q + t] = b2[q][t];
        }
    }
  } else {
    for (int j = 0; j < kMomentPerLane; ++j) {
      const int64_t row = int64_t(j) * kMomentLanes;
      if (row >= cnt) break;
      if (dense && row + kMomentLanes <= cnt) {
        const T* p = base + row;
        for (int t = 0; t < kMomentLanes; ++t) {
          const double x = value_f64(p[t]);
          const bool counted = !nonzero || x != 0.0;
          const double d = counted ? x - shift : 0.0;
          ln[t] += counted ? 1 : 0;
          l1[t] += d;
          l2[t] += d * d;
        }
      } else {
        for (int t = 0; t < kMomentLanes && row + t < cnt; ++t) {
          const double x = value_f64(data[sg.offset(seg, begin + row + t)]);
          const bool counted = !nonzero || x != 0.0;
          const double d = counted ? x - shift : 0.0;
          ln[t] += counted ? 1 : 0;
          l1[t] += d;
          l2[t] += d * d;
        }
      }
    }
  }
  for (int s = kMomentLanes / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; ++t) {
      ln[t] += ln[t + s];
      l1[t] += l1[t + s];
      l2[t] += l2[t + s];
    }
  return chunk_moments(LaneSums{ln[0], l1[0], l2[0]}, shift);
}

// chunk_body in instruction-set clones (cpu_isa.h): wider vectors, the same bits.
template <bool kNonzero, class T>
VOXAUG_TARGET_BASELINE Moments chunk_baseline(const T* data, const StatSegments& sg, int64_t seg,
                                              int64_t begin) {
  return chunk_body<kNonzero>(data, sg, seg, begin);
}
#if VOXAUG_CPU_CLONES
template <bool kNonzero, class T>
VOXAUG_TARGET_AVX2 Moments chunk_avx2(const T* data, const StatSegments& sg, int64_t seg,
                                      int64_t begin) {
  return chunk_body<kNonzero>(data, sg, seg, begin);
}
template <bool kNonzero, class T>
VOXAUG_TARGET_AVX512 Moments chunk_avx512(const T* data, const StatSegments& sg, int64_t seg,
                                          int64_t begin) {
  return chunk_body<kNonzero>(data, sg, seg, begin);
}
#endif

template <bool kNonzero, class T>
Moments chunk_cpu(const T* data, const StatSegments& sg, int64_t seg, int64_t begin) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return chunk_avx512<kNonzero>(data, sg, seg, begin);
    case CpuIsa::Avx2: return chunk_avx2<kNonzero>(data, sg, seg, begin);
    default: break;
  }
#endif
  return chunk_baseline<kNonzero>(data, sg, seg, begin);
}

// The chunks' fixed pairwise merge tree (the CUDA finishing kernel runs the same rounds).
void merge_chunks(Moments* part, int64_t chunks, double* out) {
  for (int64_t s = 1; s < chunks; s *= 2)
    for (int64_t i = 0; i + s < chunks; i += 2 * s) part[i] = merge_moments(part[i], part[i + s]);
  finish_moments(part[0], out);
}

template <class T>
void moments_cpu(const VolumeView& in, const StatSegments& sg, bool nonzero, double* out) {
  const T* data = static_cast<const T*>(in.data);
  const int64_t segments = in.shape[0] * sg.per_sample;
  const int64_t chunks = (sg.per_segment + kMomentChunk - 1) / kMomentChunk;
  std::vector<Moments> part(static_cast<size_t>(segments * chunks));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < segments * chunks; ++t)
    part[t] = nonzero ? chunk_cpu<true>(data, sg, t / chunks, (t % chunks) * kMomentChunk)
                      : chunk_cpu<false>(data, sg, t / chunks, (t % chunks) * kMomentChunk);
#pragma omp parallel for schedule(static)
  for (int64_t seg = 0; seg < segments; ++seg)
    merge_chunks(part.data() + seg * chunks, chunks, out + 3 * seg);
}

// Exact order statistics by selection: keys (the value in the sort domain of detail/stats.h:
// -0 -> +0, NaN detected), nth_element for floor(pos), the minimum above it for the next.
template <class T, class K>
void percentiles_segment(const T* data, const StatSegments& sg, int64_t seg, const double* q,
                         int64_t num_q, double* out) {
  const int64_t n = sg.per_segment;
  std::vector<K> keys(static_cast<size_t>(n));
  bool has_nan = false;
  for (int64_t i = 0; i < n; ++i) {
    K v = static_cast<K>(value_f64(data[sg.offset(seg, i)]));
    if (v != v) has_nan = true;
    keys[i] = v == K(0) ? K(0) : v;
  }
  for (int64_t k = 0; k < num_q; ++k) {
    if (has_nan) {
      out[seg * num_q + k] = NAN;
      continue;
    }
    int64_t lo = 0;
    double w = 0.0;
    percentile_rank(q[k], n, &lo, &w);
    std::nth_element(keys.begin(), keys.begin() + lo, keys.end());
    const double a = static_cast<double>(keys[lo]);
    const double b =
        lo + 1 < n ? static_cast<double>(*std::min_element(keys.begin() + lo + 1, keys.end())) : a;
    out[seg * num_q + k] = percentile_lerp(a, b, w);
  }
}

// Exact order statistics of one segment by a two-level radix select on the float32 sort keys
// (sort_key32): a histogram of the keys' upper 16 bits finds the bin of every needed rank, a
// histogram of the lower 16 bits inside those bins finds the key. Two parallel passes over the
// data, no copy. Returns false (nothing written) when the ranks fall into more than kMaxBins
// distinct bins; the caller then selects with nth_element (one selection per percentile: 13
// percentiles of a 224 x 224 x 160 volume took 400 ms that way with kMaxBins 8, against 20 ms
// here; the per-thread lower histograms are then 16 MiB).
constexpr int kHistBins = 1 << 16;
constexpr int kMaxBins = 32;

template <class T>
bool percentiles_radix_segment(const T* data, const StatSegments& sg, int64_t seg, const double* q,
                               int64_t num_q, double* out) {
  const int64_t n = sg.per_segment;
  const bool dense = sg.ix.dense;
  const T* base = data + (dense ? sg.offset(seg, 0) : 0);
  auto key_at = [&](int64_t i) {
    const T v = dense ? base[i] : data[sg.offset(seg, i)];
    return sort_key32(static_cast<float>(value_f64(v)));
  };
  std::vector<int64_t> hist(kHistBins, 0);
#pragma omp parallel
  {
    std::vector<int64_t> h(kHistBins, 0);
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; ++i) ++h[key_at(i) >> 16];
#pragma omp critical
    for (int b = 0; b < kHistBins; ++b) hist[b] += h[b];
  }
  if (hist[sort_key32(NAN) >> 16] > 0) {  // that bin holds NaN keys only
    for (int64_t k = 0; k < num_q; ++k) out[seg * num_q + k] = NAN;
    return true;
  }
  // Needed ranks (floor(pos) and the next one per q) -> (bin, rank inside the bin).
  std::vector<int64_t> lo(num_q), ranks;
  std::vector<double> w(num_q);
  for (int64_t k = 0; k < num_q; ++k) {
    percentile_rank(q[k], n, &lo[k], &w[k]);
    ranks.push_back(lo[k]);
    ranks.push_back(std::min(lo[k] + 1, n - 1));
  }
  std::vector<int64_t> start(kHistBins + 1, 0);
  for (int b = 0; b < kHistBins; ++b) start[b + 1] = start[b] + hist[b];
  std::vector<int> slot_of(kHistBins, -1), bins;
  std::vector<int> rank_bin(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int b =
        static_cast<int>(std::upper_bound(start.begin(), start.end(), ranks[r]) - start.begin()) -
        1;
    rank_bin[r] = b;
    if (slot_of[b] < 0) {
      if (static_cast<int>(bins.size()) == kMaxBins) return false;
      slot_of[b] = static_cast<int>(bins.size());
      bins.push_back(b);
    }
  }
  const int slots = static_cast<int>(bins.size());
  std::vector<int64_t> low(static_cast<size_t>(slots) * kHistBins, 0);
#pragma omp parallel
  {
    std::vector<int64_t> h(static_cast<size_t>(slots) * kHistBins, 0);
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t key = key_at(i);
      const int s = slot_of[key >> 16];
      if (s >= 0) ++h[static_cast<size_t>(s) * kHistBins + (key & 0xffffu)];
    }
#pragma omp critical
    for (size_t j = 0; j < h.size(); ++j) low[j] += h[j];
  }
  std::vector<double> value(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int b = rank_bin[r];
    const int64_t* h = low.data() + static_cast<size_t>(slot_of[b]) * kHistBins;
    int64_t left = ranks[r] - start[b];
    int j = 0;
    while (left >= h[j]) left -= h[j++];
    value[r] = static_cast<double>(key32_value((static_cast<uint32_t>(b) << 16) | uint32_t(j)));
  }
  for (int64_t k = 0; k < num_q; ++k)
    out[seg * num_q + k] = percentile_lerp(value[2 * k], value[2 * k + 1], w[k]);
  return true;
}

template <class T>
void percentiles_cpu(const VolumeView& in, const StatSegments& sg, const double* q, int64_t num_q,
                     double* out) {
  const T* data = static_cast<const T*>(in.data);
  const int64_t segments = in.shape[0] * sg.per_sample;
  // float32 holds every value of the other dtypes exactly.
  using K =
      std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int32_t>, double, float>;
  // Large segments: radix select (parallel inside the segment); small ones, or values of
  // float64 / int32 data: selection, parallel over segments.
  constexpr int64_t kRadixMin = int64_t(1) << 16;
  std::vector<char> done(static_cast<size_t>(segments), 0);
  if constexpr (std::is_same_v<K, float>) {
    if (sg.per_segment >= kRadixMin)
      for (int64_t seg = 0; seg < segments; ++seg)
        done[seg] = percentiles_radix_segment(data, sg, seg, q, num_q, out) ? 1 : 0;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t seg = 0; seg < segments; ++seg)
    if (!done[seg]) percentiles_segment<T, K>(data, sg, seg, q, num_q, out);
}

}  // namespace

namespace {

// A dense stretch of one segment, per element stat_apply_value. (Plain stores: streaming the
// output through an L1 tile measured slower here, 2x128^3 and 224x224x160 float32, session 20.)
template <class TIn, class TOut, class Acc>
VOXAUG_FORCEINLINE void apply_dense_body(const StatCoef<Acc>& c, const TIn* src, TOut* dst,
                                         int64_t cnt) {
  for (int64_t j = 0; j < cnt; ++j)
    dst[j] = stat_store<TOut>(stat_apply_value(c, stat_load<Acc>(src[j])));
}

// apply_dense_body in instruction-set clones (cpu_isa.h): wider vectors (the division above
// all), the same bits.
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_BASELINE void apply_dense_baseline(const StatCoef<Acc>& c, const TIn* src, TOut* dst,
                                                 int64_t cnt) {
  apply_dense_body(c, src, dst, cnt);
}
#if VOXAUG_CPU_CLONES
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_AVX2 void apply_dense_avx2(const StatCoef<Acc>& c, const TIn* src, TOut* dst,
                                         int64_t cnt) {
  apply_dense_body(c, src, dst, cnt);
}
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_AVX512 void apply_dense_avx512(const StatCoef<Acc>& c, const TIn* src, TOut* dst,
                                             int64_t cnt) {
  apply_dense_body(c, src, dst, cnt);
}
#endif

template <class TIn, class TOut, class Acc>
void apply_dense(const StatCoef<Acc>& c, const TIn* src, TOut* dst, int64_t cnt) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return apply_dense_avx512(c, src, dst, cnt);
    case CpuIsa::Avx2: return apply_dense_avx2(c, src, dst, cnt);
    default: break;
  }
#endif
  apply_dense_baseline(c, src, dst, cnt);
}

}  // namespace

// The host launcher's hook (launch_cpu.h), found by argument-dependent lookup: items run in
// stretches inside one segment, so the coefficients are computed once per stretch and dense
// views take a vectorised loop (apply_dense). Per element the math is stat_apply_value.
template <class TIn, class TOut, class Acc>
void cpu_items(const StatApplyForward<TIn, TOut, Acc>& f,
               typename StatApplyForward<TIn, TOut, Acc>::State&, int64_t n, int64_t begin,
               int64_t end) {
  int64_t i = begin;
  while (i < end) {
    const int64_t seg = f.segment(n, i);
    const int64_t seg_end =
        f.p.per_sample > 1 ? std::min(end, (i / f.p.per_segment + 1) * f.p.per_segment) : end;
    const StatCoef<Acc> c = stat_coef<Acc>(f.p, seg);
    if (f.ix_in.dense && f.ix_out.dense) {
      apply_dense(c, f.in + f.ix_in.offset(n, i), f.out + f.ix_out.offset(n, i), seg_end - i);
    } else {
      for (int64_t j = i; j < seg_end; ++j)
        f.out[f.ix_out.offset(n, j)] =
            stat_store<TOut>(stat_apply_value(c, stat_load<Acc>(f.in[f.ix_in.offset(n, j)])));
    }
    i = seg_end;
  }
}

namespace {

// A dense stretch of one sample through piecewise_value with a fixed trip count: the edges
// padded to kMaxPiecewisePieces - 1 with NaN (never <= x), so the count of edges <= x is the
// same and the loop vectorises (compares, then gathers of slope and intercept).
VOXAUG_FORCEINLINE void piecewise_dense_body(const double* row, int pieces, const float* src,
                                             float* dst, int64_t cnt) {
  constexpr int kEdges = kMaxPiecewisePieces - 1;
  double edge[kEdges], slope[kMaxPiecewisePieces], icpt[kMaxPiecewisePieces];
  for (int i = 0; i < kEdges; ++i) edge[i] = i < pieces - 1 ? row[i] : NAN;
  for (int i = 0; i < kMaxPiecewisePieces; ++i) {
    slope[i] = i < pieces ? row[pieces - 1 + i] : 0.0;
    icpt[i] = i < pieces ? row[2 * pieces - 1 + i] : 0.0;
  }
  for (int64_t j = 0; j < cnt; ++j) {
    const double v = static_cast<double>(src[j]);
    int k = 0;
    for (int i = 0; i < kEdges; ++i) k += v >= edge[i] ? 1 : 0;
    dst[j] = static_cast<float>(fadd(fmul(slope[k], v), icpt[k]));
  }
}
VOXAUG_TARGET_BASELINE void piecewise_dense_baseline(const double* row, int pieces,
                                                     const float* src, float* dst, int64_t cnt) {
  piecewise_dense_body(row, pieces, src, dst, cnt);
}
#if VOXAUG_CPU_CLONES
VOXAUG_TARGET_AVX2 void piecewise_dense_avx2(const double* row, int pieces, const float* src,
                                             float* dst, int64_t cnt) {
  piecewise_dense_body(row, pieces, src, dst, cnt);
}
// AVX-512: eight values at a time, the count of edges <= x by masked compares (ordered: NaN
// counts none), slope and intercept by a two-register permute of the 16-entry tables; the
// same IEEE operations as piecewise_value (a multiply, then an add, then the float32 rounding).
// (Masked conversions with an all-ones mask: GCC 12 warns about the unmasked forms' undefined
// source operand.)
VOXAUG_TARGET_AVX512 void piecewise_dense_avx512(const double* row, int pieces, const float* src,
                                                 float* dst, int64_t cnt) {
  static_assert(kMaxPiecewisePieces == 16, "two zmm registers of slopes / intercepts");
  alignas(64) double slope[16] = {}, icpt[16] = {};
  for (int i = 0; i < pieces; ++i) {
    slope[i] = row[pieces - 1 + i];
    icpt[i] = row[2 * pieces - 1 + i];
  }
  const __m512d s_lo = _mm512_load_pd(slope), s_hi = _mm512_load_pd(slope + 8);
  const __m512d c_lo = _mm512_load_pd(icpt), c_hi = _mm512_load_pd(icpt + 8);
  __m512d edge[kMaxPiecewisePieces - 1];
  for (int i = 0; i < pieces - 1; ++i) edge[i] = _mm512_set1_pd(row[i]);
  const __m512i one = _mm512_set1_epi64(1);
  const __mmask8 all = 0xff;
  int64_t j = 0;
  for (; j + 8 <= cnt; j += 8) {
    const __m512d v = _mm512_maskz_cvtps_pd(all, _mm256_loadu_ps(src + j));
    __m512i k = _mm512_setzero_si512();
    for (int i = 0; i < pieces - 1; ++i)
      k = _mm512_mask_add_epi64(k, _mm512_cmp_pd_mask(v, edge[i], _CMP_GE_OQ), k, one);
    const __m512d sl = _mm512_permutex2var_pd(s_lo, k, s_hi);
    const __m512d ic = _mm512_permutex2var_pd(c_lo, k, c_hi);
    _mm256_storeu_ps(dst + j, _mm512_maskz_cvtpd_ps(all, _mm512_add_pd(_mm512_mul_pd(sl, v), ic)));
  }
  if (j < cnt) piecewise_dense_body(row, pieces, src + j, dst + j, cnt - j);
}
#endif

}  // namespace

// The host launcher's hook for the piecewise map: dense views through the vectorised loop.
void cpu_items(const PiecewiseForward& f, PiecewiseForward::State& st, int64_t n, int64_t begin,
               int64_t end) {
  const double* row = f.table + n * (3 * f.pieces - 1);
  if (!(f.ix_in.dense && f.ix_out.dense)) {
    for (int64_t i = begin; i < end; ++i) f(st, n, i);
    return;
  }
  const float* src = f.in + f.ix_in.offset(n, begin);
  float* dst = f.out + f.ix_out.offset(n, begin);
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return piecewise_dense_avx512(row, f.pieces, src, dst, end - begin);
    case CpuIsa::Avx2: return piecewise_dense_avx2(row, f.pieces, src, dst, end - begin);
    default: break;
  }
#endif
  piecewise_dense_baseline(row, f.pieces, src, dst, end - begin);
}

namespace {

void stat_apply(const VolumeView& in, const VolumeView& out, StatApply p, bool channel_wise,
                cudaStream_t stream) {
  p.per_sample = channel_wise ? in.shape[1] : 1;
  p.per_segment = channel_wise ? in.shape[2] * in.shape[3] * in.shape[4] : in.sample_numel();
  if (in.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    stat_apply_cuda(in, out, p, stream);
#endif
    return;
  }
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
      CpuLauncher::launch(f, in.shape[0], stream);
    });
  });
}

}  // namespace
}  // namespace detail

namespace {

void check_input(const VolumeView& in) {
  for (int k = 0; k < 5; ++k)
    VOXAUG_EXPECTS(in.shape[k] >= 0, "input: sizes must be >= 0, got " + in.describe());
  detail::visit_stat_input(in.dtype, "input", [](auto) {});
  VOXAUG_EXPECTS(in.numel() == 0 || in.data != nullptr, "input must not be null");
#if VOXAUG_WITH_CUDA
  if (in.device == Device::CUDA && in.numel() > 0)  // a host pointer would fault in the kernel
    detail::check_device_pointer(in.data, in.device_index, "input");
#else
  VOXAUG_EXPECTS(in.device == Device::CPU,
                 "input is a CUDA view but this voxaug was built without CUDA");
#endif
}

int64_t segment_count(const VolumeView& in, bool channel_wise) {
  return in.shape[0] * (channel_wise ? in.shape[1] : 1);
}

void check_pair(const VolumeView& in, const VolumeView& out) {
  check_input(in);
  for (int k = 0; k < 5; ++k)
    VOXAUG_EXPECTS(out.shape[k] == in.shape[k], "output must have the input's shape: " +
                                                    in.describe() + " -> " + out.describe());
  VOXAUG_EXPECTS(
      in.device == out.device && (in.device == Device::CPU || in.device_index == out.device_index),
      "input and output must be on one device: " + in.describe() + " -> " + out.describe());
  detail::visit_stat_output(out.dtype, "output", [](auto) {});
  VOXAUG_EXPECTS(in.numel() == 0 || out.data != nullptr, "output must not be null");
#if VOXAUG_WITH_CUDA
  if (out.device == Device::CUDA && in.numel() > 0)
    detail::check_device_pointer(out.data, out.device_index, "output");
#endif
  if (in.data == out.data && in.numel() > 0) {
    bool same = in.dtype == out.dtype;
    for (int k = 0; k < 5; ++k) same = same && in.strides[k] == out.strides[k];
    VOXAUG_EXPECTS(same, "in place, output must be the input view itself (same dtype and strides)");
  }
}

void check_stats_pointer(const VolumeView& in, const double* p, const char* what) {
#if VOXAUG_WITH_CUDA
  if (in.device == Device::CUDA && p != nullptr)
    detail::check_device_pointer(p, in.device_index, what);
#else
  (void)in;
  (void)p;
  (void)what;
#endif
}

}  // namespace

int64_t moments_workspace_bytes(const VolumeView& in, bool channel_wise) {
  check_input(in);
  if (in.device == Device::CPU || in.numel() == 0) return 0;
  const int64_t per_segment =
      channel_wise ? in.shape[2] * in.shape[3] * in.shape[4] : in.sample_numel();
  const int64_t chunks = (per_segment + detail::kMomentChunk - 1) / detail::kMomentChunk;
  return segment_count(in, channel_wise) * chunks * int64_t(sizeof(detail::Moments));
}

void moments(const VolumeView& in, double* out, bool channel_wise, bool nonzero, void* workspace,
             int64_t workspace_bytes, cudaStream_t stream) {
  check_input(in);
  const int64_t segments = segment_count(in, channel_wise);
  if (segments == 0) return;
  VOXAUG_EXPECTS(out != nullptr, "out (moments) must not be null");
  VOXAUG_EXPECTS(in.numel() > 0,
                 "input: moments of an empty volume are undefined (shape " + in.describe() + ")");
  const detail::StatSegments sg = detail::make_stat_segments(in, channel_wise);
  if (in.device == Device::CPU) {
    detail::visit_stat_input(in.dtype, "input", [&](auto tag) {
      detail::moments_cpu<typename decltype(tag)::type>(in, sg, nonzero, out);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  const int64_t need = moments_workspace_bytes(in, channel_wise);
  VOXAUG_EXPECTS(workspace_bytes >= need,
                 "workspace_bytes must be at least " + std::to_string(need) +
                     " (moments_workspace_bytes), got " + std::to_string(workspace_bytes));
  detail::check_device_pointer(out, in.device_index, "out (moments)");
  detail::check_device_pointer(workspace, in.device_index, "workspace");
  detail::moments_cuda(in, sg, nonzero, out, workspace, stream);
#else
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
#endif
}

int64_t percentiles_workspace_bytes(const VolumeView& in, bool channel_wise) {
  check_input(in);
  if (in.device == Device::CPU || in.numel() == 0) return 0;
#if VOXAUG_WITH_CUDA
  return detail::percentiles_cuda_workspace_bytes(in, detail::make_stat_segments(in, channel_wise));
#else
  (void)channel_wise;
  return 0;
#endif
}

void percentiles(const VolumeView& in, const double* q_percent, int64_t num_q, double* out,
                 bool channel_wise, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  check_input(in);
  VOXAUG_EXPECTS(num_q >= 0, "num_q must be >= 0, got " + std::to_string(num_q));
  VOXAUG_EXPECTS(q_percent != nullptr || num_q == 0, "q_percent must not be null");
  for (int64_t k = 0; k < num_q; ++k)
    VOXAUG_EXPECTS(q_percent[k] >= 0.0 && q_percent[k] <= 100.0,
                   "q[" + std::to_string(k) + "] must be a percentile in [0, 100], got " +
                       std::to_string(q_percent[k]));
  const int64_t segments = segment_count(in, channel_wise);
  if (segments == 0 || num_q == 0) return;
  VOXAUG_EXPECTS(out != nullptr, "out (percentiles) must not be null");
  VOXAUG_EXPECTS(in.numel() > 0, "input: percentiles of an empty volume are undefined (shape " +
                                     in.describe() + ")");
  const detail::StatSegments sg = detail::make_stat_segments(in, channel_wise);
  if (in.device == Device::CPU) {
    detail::visit_stat_input(in.dtype, "input", [&](auto tag) {
      detail::percentiles_cpu<typename decltype(tag)::type>(in, sg, q_percent, num_q, out);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  const int64_t need = detail::percentiles_cuda_workspace_bytes(in, sg);
  VOXAUG_EXPECTS(workspace_bytes >= need,
                 "workspace_bytes must be at least " + std::to_string(need) +
                     " (percentiles_workspace_bytes), got " + std::to_string(workspace_bytes));
  detail::check_device_pointer(out, in.device_index, "out (percentiles)");
  detail::check_device_pointer(workspace, in.device_index, "workspace");
  detail::percentiles_cuda(in, sg, q_percent, num_q, out, workspace, workspace_bytes, stream);
#else
  (void)workspace;
  (void)workspace_bytes;
  (void)stream;
#endif
}

void normalize_intensity(const VolumeView& in, const VolumeView& out,
                         const NormalizeIntensityArgs& args, cudaStream_t stream) {
  check_pair(in, out);
  VOXAUG_EXPECTS(args.moments != nullptr || (args.subtrahend != nullptr && args.divisor != nullptr),
                 "moments must not be null unless both subtrahend and divisor are given");
  if (in.numel() == 0) return;
  check_stats_pointer(in, args.moments, "moments");
  check_stats_pointer(in, args.subtrahend, "subtrahend");
  check_stats_pointer(in, args.divisor, "divisor");
  detail::StatApply p;
  p.mode = detail::kApplyNormalize;
  p.stats = args.moments;
  p.subtrahend = args.subtrahend;
  p.divisor = args.divisor;
  p.nonzero = args.nonzero;
  detail::stat_apply(in, out, p, args.channel_wise, stream);
}

void scale_intensity_range_percentiles(const VolumeView& in, const VolumeView& out,
                                       const ScaleIntensityRangePercentilesArgs& args,
                                       cudaStream_t stream) {
  check_pair(in, out);
  VOXAUG_EXPECTS(args.lower >= 0.0 && args.lower <= 100.0,
                 "lower must be a percentile in [0, 100], got " + std::to_string(args.lower));
  VOXAUG_EXPECTS(args.upper >= 0.0 && args.upper <= 100.0,
                 "upper must be a percentile in [0, 100], got " + std::to_string(args.upper));
  if (args.b_min) VOXAUG_EXPECTS(std::isfinite(*args.b_min), "b_min must be finite");
  if (args.b_max) VOXAUG_EXPECTS(std::isfinite(*args.b_max), "b_max must be finite");
  VOXAUG_EXPECTS(!args.relative || (args.b_min && args.b_max),
                 "relative=True needs both b_min and b_max");
  VOXAUG_EXPECTS(args.percentiles != nullptr || in.numel() == 0, "percentiles must not be null");
  if (in.numel() == 0) return;
  check_stats_pointer(in, args.percentiles, "percentiles");
  detail::StatApply p;
  p.mode = detail::kApplyRangePercentiles;
  p.stats = args.percentiles;
  p.has_b_min = args.b_min != nullptr;
  p.has_b_max = args.b_max != nullptr;
  p.b_min = args.b_min ? *args.b_min : 0.0;
  p.b_max = args.b_max ? *args.b_max : 0.0;
  if (args.relative) {  // MONAI: the same percentiles of the output range
    const double lo = p.b_min, hi = p.b_max;
    p.b_min = (hi - lo) * (args.lower / 100.0) + lo;
    p.b_max = (hi - lo) * (args.upper / 100.0) + lo;
  }
  p.clip = args.clip;
  detail::stat_apply(in, out, p, args.channel_wise, stream);
}

void piecewise_linear(const VolumeView& in, const VolumeView& out, const double* table, int pieces,
                      cudaStream_t stream) {
  check_pair(in, out);
  VOXAUG_EXPECTS(in.dtype == DType::Float32 && out.dtype == DType::Float32,
                 std::string("piecewise_linear: input and output must be float32, got ") +
                     dtype_name(in.dtype) + " -> " + dtype_name(out.dtype));
  VOXAUG_EXPECTS(pieces >= 1 && pieces <= kMaxPiecewisePieces,
                 "pieces must be in [1, " + std::to_string(kMaxPiecewisePieces) + "], got " +
                     std::to_string(pieces));
  if (in.numel() == 0) return;
  VOXAUG_EXPECTS(table != nullptr, "table must not be null");
  check_stats_pointer(in, table, "table");
  const detail::PiecewiseForward f{static_cast<const float*>(in.data),
                                   static_cast<float*>(out.data),
                                   detail::make_indexer(in),
                                   detail::make_indexer(out),
                                   table,
                                   pieces,
                                   in.sample_numel()};
  if (in.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::piecewise_linear_cuda(f, in.shape[0], in.device_index, stream);
#endif
    return;
  }
  detail::CpuLauncher::launch(f, in.shape[0], stream);
}

}  // namespace voxaug
