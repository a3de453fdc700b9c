// voxaug: window family (sliding-window inference) -- layout, validation, the CPU twin (row
// loops over the detail/window.h math, OpenMP), routing to the CUDA backend (window.cu).
#include "voxaug/window.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/device.h"
#include "voxaug/error.h"
#include "window_kernels.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void window_gather_cuda(const GatherParams& p, int device, cudaStream_t stream);
void window_stitch_cuda(const StitchParams& p, DType acc_t, DType pred_t, int device,
                        cudaStream_t stream);
void window_count_cuda(const WindowLayout& l, const void* weight, DType t, void* count, int device,
                       cudaStream_t stream);
void window_finalize_cuda(const FinalizeParams& p, DType acc_t, int64_t batch, int device,
                          cudaStream_t stream);
#endif
namespace {

std::string dims(const int64_t* v) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) +
         ")";
}

bool dense(const VolumeView& v) {
  int64_t s = 1;
  for (int a = 4; a >= 0; --a) {
    if (v.shape[a] != 1 && v.strides[a] != s) return false;
    s *= v.shape[a];
  }
  return true;
}

void check_same_device(const VolumeView& a, const VolumeView& b, const char* an, const char* bn) {
  VOXAUG_EXPECTS(
      a.device == b.device && (a.device == Device::CPU || a.device_index == b.device_index),
      std::string(bn) + " must be on the same device as " + an);
}

// ---- CPU twin ----

// Per-axis source index of every padded coordinate (-1: constant fill).
std::vector<int64_t> source_table(const WindowLayout& l, int axis, int pad) {
  std::vector<int64_t> t(static_cast<size_t>(l.padded[axis]));
  for (int64_t q = 0; q < l.padded[axis]; ++q)
    t[static_cast<size_t>(q)] = window_source(q, l.pad_before[axis], l.size[axis], pad);
  return t;
}

template <class T>
void gather_rows(const GatherParams& p) {
  const WindowLayout& l = p.l;
  const T* in = static_cast<const T*>(p.in);
  T* out = static_cast<T*>(p.out);
  const T fill =
      store_as<T>(static_cast<std::conditional_t<sizeof(T) == 8, double, float>>(p.fill));
  const std::vector<int64_t> src_d = source_table(l, 0, p.pad), src_h = source_table(l, 1, p.pad),
                             src_w = source_table(l, 2, p.pad);
  const int64_t Rh = l.roi[1], Rw = l.roi[2], sw = p.in_stride[4];
  const int64_t planes = p.batch * p.channels * l.roi[0];
  // One (window, channel, d) plane per task, the window's position resolved once per plane.
  // Tasks run d-major, so each thread's static share is a range of window planes d, the planes
  // the same thread adds in the stitch (its tasks are accumulator planes; a launch's windows
  // usually share their d start): the predictor's input for an identity or pointwise network,
  // and the rows of neighbouring windows it reads, stay with one core. With window-major shares
  // and the window-by-window stitch, the two alternating took 212-216 ms for the 880 windows of
  // overlap 0.8 on a 2-core AMD VM, 161-165 ms now (benchmarks/window_parts.py, session 15).
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < planes; ++t) {
    const int64_t per_z = p.batch * p.channels;
    const int64_t z = t / per_z, c = (t % per_z) % p.channels, j = (t % per_z) / p.channels;
    int64_t n, k[3];
    window_index(l, p.first + j, n, k);
    const int64_t s0 = l.start(0, k[0]), s1 = l.start(1, k[1]), s2 = l.start(2, k[2]);
    T* o = out + ((j * p.channels + c) * l.roi[0] + z) * Rh * Rw;
    const int64_t sd = src_d[static_cast<size_t>(s0 + z)];
    // Whether the window's w-run lies inside the image (then a row is one contiguous copy).
    const int64_t q0 = s2 - l.pad_before[2];
    const bool inside_w = q0 >= 0 && q0 + Rw <= l.size[2];
    const T* plane = in + n * p.in_stride[0] + c * p.in_stride[1] + sd * p.in_stride[2];
    for (int64_t y = 0; y < Rh; ++y, o += Rw) {
      const int64_t sh = src_h[static_cast<size_t>(s1 + y)];
      if (sd < 0 || sh < 0) {
        std::fill(o, o + Rw, fill);
        continue;
      }
      const T* src = plane + sh * p.in_stride[3];
      if (inside_w && sw == 1) {
        std::memcpy(o, src + q0, sizeof(T) * static_cast<size_t>(Rw));
      } else {
        for (int64_t x = 0; x < Rw; ++x) {
          const int64_t s = src_w[static_cast<size_t>(s2 + x)];
          o[x] = s < 0 ? fill : src[s * sw];
        }
      }
    }
  }
}

void gather_cpu(const GatherParams& p) {
  if (p.in_t == p.out_t) {
    switch (p.in_t) {
      case DType::Float64: return gather_rows<double>(p);
      case DType::Float32: return gather_rows<float>(p);
      case DType::Float16: return gather_rows<half_t>(p);
      case DType::BFloat16: return gather_rows<bfloat16_t>(p);
      default: break;
    }
  }
  // Converting gather (e.g. float32 image -> float16 windows): the device body, element-wise.
  const GatherBody body{p};
  const int64_t items = body.items();
  GatherBody::State st;
#pragma omp parallel for schedule(static) firstprivate(st)
  for (int64_t i = 0; i < items; ++i) body(st, 0, i);
}

// The float32 rows of the stitch (acc += pred, or acc += pred * w: a multiply then an add, never
// fused) for AVX-512 and AVX2 machines (the baseline build only has SSE2, and a compiler loop
// over a run-time row length spends much of a 96-voxel row in its prologue and epilogue). Same
// IEEE operations per element, so the results are the same bits (tested).
__attribute__((target("avx512f"))) void add_row_avx512(float* acc, const float* pred, int64_t n) {
  int64_t x = 0;
  for (; x + 16 <= n; x += 16)
    _mm512_storeu_ps(acc + x, _mm512_add_ps(_mm512_loadu_ps(acc + x), _mm512_loadu_ps(pred + x)));
  if (x < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - x)) - 1u);
    _mm512_mask_storeu_ps(
        acc + x, m,
        _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + x), _mm512_maskz_loadu_ps(m, pred + x)));
  }
}
__attribute__((target("avx512f"))) void mul_add_row_avx512(float* acc, const float* pred,
                                                           const float* w, int64_t n) {
  int64_t x = 0;
  for (; x + 16 <= n; x += 16)
    _mm512_storeu_ps(
        acc + x, _mm512_add_ps(_mm512_loadu_ps(acc + x),
                               _mm512_mul_ps(_mm512_loadu_ps(pred + x), _mm512_loadu_ps(w + x))));
  if (x < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - x)) - 1u);
    _mm512_mask_storeu_ps(acc + x, m,
                          _mm512_add_ps(_mm512_maskz_loadu_ps(m, acc + x),
                                        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, pred + x),
                                                      _mm512_maskz_loadu_ps(m, w + x))));
  }
}
// StitchFuse's rows: acc = 0 + pred (* w), a voxel's first contribution; acc = acc / count, its
// division after its last. The same IEEE operations per element as the plain loops (tested).
__attribute__((target("avx512f"))) void store_row_avx512(float* acc, const float* pred,
                                                         const float* w, int64_t n) {
  const __m512 zero = _mm512_setzero_ps();
  int64_t x = 0;
  for (; x + 16 <= n; x += 16) {
    const __m512 p = _mm512_loadu_ps(pred + x);
    _mm512_storeu_ps(acc + x,
                     _mm512_add_ps(zero, w ? _mm512_mul_ps(p, _mm512_loadu_ps(w + x)) : p));
  }
  if (x < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - x)) - 1u);
    const __m512 p = _mm512_maskz_loadu_ps(m, pred + x);
    _mm512_mask_storeu_ps(
        acc + x, m, _mm512_add_ps(zero, w ? _mm512_mul_ps(p, _mm512_maskz_loadu_ps(m, w + x)) : p));
  }
}
__attribute__((target("avx512f"))) void div_row_avx512(float* acc, const float* cnt, int64_t n) {
  int64_t x = 0;
  for (; x + 16 <= n; x += 16)
    _mm512_storeu_ps(acc + x, _mm512_div_ps(_mm512_loadu_ps(acc + x), _mm512_loadu_ps(cnt + x)));
  if (x < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - x)) - 1u);
    // Masked-off lanes divide 0 by 1 (no spurious exception), and are not stored.
    _mm512_mask_storeu_ps(acc + x, m,
                          _mm512_div_ps(_mm512_maskz_loadu_ps(m, acc + x),
                                        _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, cnt + x)));
  }
}
__attribute__((target("avx2"))) void add_row_avx2(float* acc, const float* pred, int64_t n) {
  int64_t x = 0;
  for (; x + 8 <= n; x += 8)
    _mm256_storeu_ps(acc + x, _mm256_add_ps(_mm256_loadu_ps(acc + x), _mm256_loadu_ps(pred + x)));
  for (; x < n; ++x) acc[x] = acc[x] + pred[x];
}
__attribute__((target("avx2"))) void mul_add_row_avx2(float* acc, const float* pred, const float* w,
                                                      int64_t n) {
  int64_t x = 0;
  for (; x + 8 <= n; x += 8)
    _mm256_storeu_ps(
        acc + x, _mm256_add_ps(_mm256_loadu_ps(acc + x),
                               _mm256_mul_ps(_mm256_loadu_ps(pred + x), _mm256_loadu_ps(w + x))));
  for (; x < n; ++x) acc[x] = acc[x] + pred[x] * w[x];
}

int window_cpu_isa() {  // 2 AVX-512, 1 AVX2, 0 baseline
  static const int isa = __builtin_cpu_supports("avx512f") ? 2
                         : __builtin_cpu_supports("avx2")  ? 1
                                                           : 0;
  return isa;
}

// acc[x] = stitch_add(acc[x], pred[x], w, x) over one row; the common cases as plain loops the
// compiler vectorises (the same operations: a float add, or a float multiply then add).
template <class A, class P>
VOXAUG_FORCEINLINE void stitch_row(A* acc, const P* pred, int64_t sp, const A* wrow, int64_t n) {
  if constexpr (std::is_same_v<A, float> && std::is_same_v<P, float>) {
    // pred and acc never overlap (a prediction is not the accumulator).
    if (sp == 1 && window_cpu_isa() == 2) {
      wrow ? mul_add_row_avx512(acc, pred, wrow, n) : add_row_avx512(acc, pred, n);
      return;
    }
    if (sp == 1 && window_cpu_isa() == 1) {
      wrow ? mul_add_row_avx2(acc, pred, wrow, n) : add_row_avx2(acc, pred, n);
      return;
    }
  }
  if constexpr (std::is_same_v<A, P>) {
    if (sp == 1) {
      if (wrow == nullptr) {
        for (int64_t x = 0; x < n; ++x) acc[x] = acc[x] + pred[x];
      } else {
        for (int64_t x = 0; x < n; ++x) acc[x] = acc[x] + pred[x] * wrow[x];
      }
      return;
    }
  }
  for (int64_t x = 0; x < n; ++x) acc[x] = stitch_add<A, P>(acc[x], pred[x * sp], wrow, x);
}

// Per-w window counts (constant weights: count = product of the per-axis counts).
std::vector<int64_t> counts_along_w(const WindowLayout& l) {
  std::vector<int64_t> per_w(static_cast<size_t>(l.padded[2]));
  for (int64_t x = 0; x < l.padded[2]; ++x) {
    int64_t lo, hi;
    window_cover(l, 2, x, lo, hi);
    per_w[static_cast<size_t>(x)] = hi - lo + 1;
  }
  return per_w;
}

// The weighted count of padded row (d, h) in blocks of up to 64 columns, float32 on AVX-512: the
// block's four 16-column vectors stay in registers through every covering (i, j, k) (masked adds
// of the map's row), so per voxel the same additions in the same order (i, j outer, k ascending)
// as the row loops below, which add window run after window run into the row in memory (a load,
// add and store per vector per run, each run re-reading most of the previous one's stores).
// A block's runs -- per vector q the windows k along w meeting it, as an offset into a map row
// and the lanes they cover, in k order -- depend on the columns only: whole rows share one plan.
constexpr int kCountMaxRuns = 64;  // windows along w meeting one 16-column vector (else row loops)
struct CountBlock {
  int64_t b0 = 0, b1 = 0;
  int runs[4] = {0, 0, 0, 0};
  int64_t off[4][kCountMaxRuns];
  uint16_t mask[4][kCountMaxRuns];
};
bool count_blocks_fit(const WindowLayout& l) {
  return 16 + l.roi[2] <= (kCountMaxRuns - 1) * l.interval[2];
}
void plan_count_block(const WindowLayout& l, int64_t b0, int64_t b1, CountBlock& blk) {
  const int64_t R = l.roi[2];
  blk.b0 = b0;
  blk.b1 = b1;
  for (int q = 0; q < 4; ++q) blk.runs[q] = 0;
  int64_t klo, khi, unused;
  window_cover(l, 2, b0, klo, unused);
  window_cover(l, 2, b1 - 1, unused, khi);
  for (int64_t k = klo; k <= khi; ++k) {
    const int64_t s = l.start(2, k);
    for (int q = 0; q < 4; ++q) {
      const int64_t c = b0 + 16 * q;
      const int64_t a = std::max(s, c) - c, e = std::min({s + R, c + 16, b1}) - c;
      if (e <= a) continue;
      blk.off[q][blk.runs[q]] = c - s;
      blk.mask[q][blk.runs[q]++] = static_cast<uint16_t>(((1u << e) - 1u) & ~((1u << a) - 1u));
    }
  }
}
std::vector<CountBlock> plan_count_row(const WindowLayout& l) {
  std::vector<CountBlock> plan;
  if (window_cpu_isa() != 2 || !count_blocks_fit(l)) return plan;
  for (int64_t b0 = 0; b0 < l.padded[2]; b0 += 64) {
    plan.emplace_back();
    plan_count_block(l, b0, std::min(b0 + 64, l.padded[2]), plan.back());
  }
  return plan;
}
__attribute__((target("avx512f"))) void sum_count_block(const WindowLayout& l, const float* weight,
                                                        const int64_t lo[2], const int64_t hi[2],
                                                        int64_t d, int64_t h, const CountBlock& blk,
                                                        float* row) {
  const int64_t R = l.roi[2];
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  for (int64_t i = lo[0]; i <= hi[0]; ++i)
    for (int64_t j = lo[1]; j <= hi[1]; ++j) {
      const float* wrow = weight + ((d - l.start(0, i)) * l.roi[1] + h - l.start(1, j)) * R;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < blk.runs[q]; ++r) {
          const __mmask16 m = blk.mask[q][r];
          acc[q] =
              _mm512_mask_add_ps(acc[q], m, acc[q], _mm512_maskz_loadu_ps(m, wrow + blk.off[q][r]));
        }
    }
  for (int q = 0; q < 4 && blk.b0 + 16 * q < blk.b1; ++q) {
    const int64_t n = std::min<int64_t>(16, blk.b1 - blk.b0 - 16 * q);
    _mm512_mask_storeu_ps(row + blk.b0 + 16 * q, static_cast<__mmask16>((1u << n) - 1u), acc[q]);
  }
}

// What every row of a count shares: the per-w window counts (also as A, each < 2^24 where used,
// so exact) and, for weights on AVX-512, the whole row's block plan.
template <class A>
struct CountsAlongW {
  std::vector<int64_t> n;
  std::vector<A> a;
  std::vector<CountBlock> plan;
  explicit CountsAlongW(const WindowLayout& l) : n(counts_along_w(l)), a(n.begin(), n.end()) {
    if constexpr (std::is_same_v<A, float>) plan = plan_count_row(l);
  }
};

// Constant weights: the count at column x of a row covered by dh (d, h) window pairs, as
// window_count_at's static_cast<A>(product). dh and the per-w counts below 2^24 are exact in
// float and double, so their product rounds once, as the integer product's conversion does: the
// same count without an int64 conversion per voxel (that was ~10% of a CPU sliding-window call).
template <class A>
VOXAUG_FORCEINLINE void constant_count_row(const WindowLayout& l, const CountsAlongW<A>& per_w,
                                           int64_t dh, A* row, int64_t x0, int64_t x1) {
  if (dh < (int64_t(1) << 24) && l.count[2] < (int64_t(1) << 24)) {
    const A a = static_cast<A>(dh);
    for (int64_t x = x0; x < x1; ++x) row[x] = a * per_w.a[static_cast<size_t>(x)];
    return;
  }
  for (int64_t x = x0; x < x1; ++x) row[x] = static_cast<A>(dh * per_w.n[static_cast<size_t>(x)]);
}

// Padded row (d, h) of the count map over the columns [x0, x1), into row[x0, x1)
// (window_count_at for each, as row loops).
template <class A>
void count_row(const WindowLayout& l, const A* weight, const CountsAlongW<A>& per_w, int64_t d,
               int64_t h, A* row, int64_t x0, int64_t x1) {
  int64_t lo[3], hi[3];
  window_cover(l, 0, d, lo[0], hi[0]);
  window_cover(l, 1, h, lo[1], hi[1]);
  if (weight == nullptr)
    return constant_count_row(l, per_w, (hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1), row, x0, x1);
  if (x1 <= x0) return;
  if constexpr (std::is_same_v<A, float>) {
    if (x0 == 0 && x1 == l.padded[2] && !per_w.plan.empty()) {  // a whole row: the shared plan
      for (const CountBlock& blk : per_w.plan) sum_count_block(l, weight, lo, hi, d, h, blk, row);
      return;
    }
    if (window_cpu_isa() == 2 && count_blocks_fit(l)) {  // a segment: planned block by block
      CountBlock blk;
      for (int64_t b0 = x0; b0 < x1; b0 += 64) {
        plan_count_block(l, b0, std::min(b0 + 64, x1), blk);
        sum_count_block(l, weight, lo, hi, d, h, blk, row);
      }
      return;
    }
  }
  std::fill(row + x0, row + x1, A(0));
  int64_t unused;
  window_cover(l, 2, x0, lo[2], unused);  // the windows along w meeting [x0, x1)
  window_cover(l, 2, x1 - 1, unused, hi[2]);
  // Per voxel the additions run over (i, j, k) in lexicographic order: window order.
  for (int64_t i = lo[0]; i <= hi[0]; ++i)
    for (int64_t j = lo[1]; j <= hi[1]; ++j) {
      const A* wrow = weight + ((d - l.start(0, i)) * l.roi[1] + h - l.start(1, j)) * l.roi[2];
      for (int64_t k = lo[2]; k <= hi[2]; ++k) {
        const int64_t o = l.start(2, k);
        const int64_t b = std::max(x0, o), e = std::min(x1, o + l.roi[2]);
        stitch_row<A, A>(row + b, wrow + (b - o), 1, nullptr, e - b);  // row += wrow (vectorised)
      }
    }
}

// acc[x] /= cnt[x]: a voxel's division after its last contribution (StitchFuse::last_divide).
template <class A>
VOXAUG_FORCEINLINE void div_row(A* acc, const A* cnt, int64_t n) {
  if constexpr (std::is_same_v<A, float>) {
    if (window_cpu_isa() == 2) return div_row_avx512(acc, cnt, n);
  }
  for (int64_t x = 0; x < n; ++x) acc[x] = fdiv(acc[x], cnt[x]);
}

// acc[x] = 0 + round_P(pred[x] * w[x]): a voxel's first contribution (StitchFuse::first_store),
// the bits of stitch_add onto a zeroed accumulator.
template <class A, class P>
VOXAUG_FORCEINLINE void store_row(A* acc, const P* pred, int64_t sp, const A* wrow, int64_t n) {
  if constexpr (std::is_same_v<A, float> && std::is_same_v<P, float>) {
    if (sp == 1 && window_cpu_isa() == 2) return store_row_avx512(acc, pred, wrow, n);
  }
  if constexpr (std::is_same_v<A, P>) {
    if (sp == 1) {
      if (wrow == nullptr) {
        for (int64_t x = 0; x < n; ++x) acc[x] = A(0) + pred[x];
      } else {
        for (int64_t x = 0; x < n; ++x) acc[x] = A(0) + pred[x] * wrow[x];
      }
      return;
    }
  }
  for (int64_t x = 0; x < n; ++x) acc[x] = stitch_add<A, P>(A(0), pred[x * sp], wrow, x);
}

// Accumulator plane by accumulator plane: a task is one (image, channel, padded d) plane of the
// accumulator, and adds the matching plane of every window of the launch that covers it, in
// window order (MONAI's order of additions for every element, with no barrier between
// windows). The windows of a launch overlap (consecutive windows along w share about `overlap`
// of their voxels), so the plane's rows stay in L1 / L2 from one window's addition to the
// next, where window-by-window sweeps re-read the whole overlapping region from L3 or memory.
// StitchFuse: in a row where the window is the voxels' first along d and h, the columns where it
// is first along w too store instead of adding; where it is their last along d and h, the
// columns where it is last along w are divided by their count right after the addition.
template <class A, class P>
void stitch_rows(const StitchParams& p) {
  const WindowLayout& l = p.l;
  const int64_t pv = p.depth * l.padded[1] * l.padded[2];
  const A* weight = static_cast<const A*>(p.weight);
  const A* count = static_cast<const A*>(p.count);
  A* acc_base = static_cast<A*>(p.acc);
  const P* pred_base = static_cast<const P*>(p.pred);
  const int64_t Rd = l.roi[0], Rh = l.roi[1], Rw = l.roi[2], sp = p.pred_stride[4];
  // The images of the launch (consecutive windows: usually one, two where it crosses images),
  // each with the padded d range its windows cover; tasks are numbered image by image.
  struct Span {
    int64_t n, d0, d1, first_task;
  };
  Span spans[kStitchWindows];
  int num_spans = 0;
  int64_t tasks = 0;
  for (int64_t j = 0; j < p.batch; ++j) {
    const int64_t n = p.win[j][0], d0 = p.win[j][1];
    int s = 0;
    while (s < num_spans && spans[s].n != n) ++s;
    if (s == num_spans) spans[num_spans++] = {n, d0, d0 + Rd, 0};
    spans[s].d0 = std::min(spans[s].d0, d0);
    spans[s].d1 = std::max(spans[s].d1, d0 + Rd);
  }
  for (int s = 0; s < num_spans; ++s) {
    spans[s].first_task = tasks;
    tasks += p.channels * (spans[s].d1 - spans[s].d0);
  }
  // The division's count without a map: constant weights from the per-axis window counts
  // (window_cover once per coordinate, not per row), weights summed per row segment.
  const bool on_fly = p.last_divide && count == nullptr;
  std::vector<int64_t> cover[2];
  std::unique_ptr<CountsAlongW<A>> per_w;
  if (on_fly) {
    per_w = std::make_unique<CountsAlongW<A>>(l);
    for (int a = 0; a < 2 && weight == nullptr; ++a) {
      cover[a].resize(static_cast<size_t>(l.padded[a]));
      for (int64_t q = 0; q < l.padded[a]; ++q) {
        int64_t lo, hi;
        window_cover(l, a, q, lo, hi);
        cover[a][static_cast<size_t>(q)] = hi - lo + 1;
      }
    }
  }
#pragma omp parallel
  {
    std::vector<A> crow(on_fly ? static_cast<size_t>(l.padded[2]) : 0);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      int s = num_spans - 1;
      while (spans[s].first_task > t) --s;
      const int64_t depth = spans[s].d1 - spans[s].d0, local = t - spans[s].first_task;
      const int64_t n = spans[s].n, c = local / depth, d = spans[s].d0 + local % depth;
      A* plane =
          acc_base + (n * p.channels + c) * pv + ring_plane(d, p.depth) * l.padded[1] * l.padded[2];
      for (int64_t j = 0; j < p.batch; ++j) {
        const int64_t z = d - p.win[j][1];
        if (p.win[j][0] != n || z < 0 || z >= Rd) continue;
        const int64_t h0 = p.win[j][2], w0 = p.win[j][3];
        A* acc = plane + h0 * l.padded[2] + w0;
        const P* pred =
            pred_base + j * p.pred_stride[0] + c * p.pred_stride[1] + z * p.pred_stride[2];
        const A* wplane = weight ? weight + z * Rh * Rw : nullptr;
        const bool d_first = p.first_store && d >= p.first_from[j][0];
        const bool d_last = p.last_divide && d < p.last_until[j][0];
        // The window's columns that are first along w, [xf, Rw), and last, [0, xl).
        const int64_t xf = std::clamp<int64_t>(p.first_from[j][2] - w0, 0, Rw);
        const int64_t xl = std::clamp<int64_t>(p.last_until[j][2] - w0, 0, Rw);
        for (int64_t y = 0; y < Rh; ++y) {
          A* arow = acc + y * l.padded[2];
          const P* prow = pred + y * p.pred_stride[3];
          const A* wrow = wplane ? wplane + y * Rw : nullptr;
          const int64_t h = h0 + y;
          const bool first = d_first && h >= p.first_from[j][1];
          const bool last = d_last && h < p.last_until[j][1] && xl > 0;
          if (!first) {
            stitch_row<A, P>(arow, prow, sp, wrow, Rw);
          } else {
            stitch_row<A, P>(arow, prow, sp, wrow, xf);
            store_row<A, P>(arow + xf, prow + xf * sp, sp, wrow ? wrow + xf : nullptr, Rw - xf);
          }
          if (!last) continue;
          const A* cnt;
          if (count != nullptr) {
            cnt = count + (d * l.padded[1] + h) * l.padded[2] + w0;
          } else {
            if (weight == nullptr)
              constant_count_row(
                  l, *per_w, cover[0][static_cast<size_t>(d)] * cover[1][static_cast<size_t>(h)],
                  crow.data(), w0, w0 + xl);
            else
              count_row(l, weight, *per_w, d, h, crow.data(), w0, w0 + xl);
            cnt = crow.data() + w0;
          }
          div_row(arow, cnt, xl);
        }
      }
    }
  }
}

template <class A>
void stitch_cpu_acc(const StitchParams& p, DType pred_t) {
  switch (pred_t) {
    case DType::Float64: return stitch_rows<A, double>(p);
    case DType::Float32: return stitch_rows<A, float>(p);
    case DType::Float16: return stitch_rows<A, half_t>(p);
    case DType::BFloat16: return stitch_rows<A, bfloat16_t>(p);
    default: VOXAUG_FAIL("window_stitch: pred must be a float tensor");
  }
}

template <class A>
void count_cpu(const WindowLayout& l, const A* weight, A* count) {
  const int64_t rows = l.padded[0] * l.padded[1], W = l.padded[2];
  const CountsAlongW<A> per_w(l);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t)
    count_row(l, weight, per_w, t / l.padded[1], t % l.padded[1], count + t * W, 0, W);
}

template <class T>
VOXAUG_FORCEINLINE void store_label(void* out, int64_t off, int64_t v) {
  if constexpr (std::is_integral_v<T>) static_cast<T*>(out)[off] = static_cast<T>(v);
}

// Output rows (z, y) of the planes [z0, z1) in parallel; per row the count (read, or computed once
// for all samples and channels), then acc / count for every sample and channel (or their argmax).
template <class A, class T>
void finalize_rows_typed(const FinalizeParams& p, int64_t batch) {
  const WindowLayout& l = p.l;
  const int64_t rows = (p.z1 - p.z0) * l.size[1], W = l.size[2];
  const int64_t pv = p.depth * l.padded[1] * l.padded[2];
  const int64_t sv = l.size[0] * l.size[1] * l.size[2];
  const CountsAlongW<A> per_w(l);
  const A* weight = static_cast<const A*>(p.weight);
#pragma omp parallel
  {
    std::vector<A> crow(static_cast<size_t>(l.padded[2]));
    std::vector<A> best_v(p.argmax ? static_cast<size_t>(W) : 0);
    std::vector<int64_t> best_i(p.argmax ? static_cast<size_t>(W) : 0);
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t r = t + p.z0 * l.size[1];  // output row within the sample
      const int64_t z = r / l.size[1], y = r % l.size[1];
      const int64_t pd = z + l.pad_before[0], ph = y + l.pad_before[1];
      const int64_t q =
          (ring_plane(pd, p.depth) * l.padded[1] + ph) * l.padded[2] + l.pad_before[2];
      const A* cnt;
      if (p.count != nullptr) {
        cnt = static_cast<const A*>(p.count) + (pd * l.padded[1] + ph) * l.padded[2] +
              l.pad_before[2];
      } else {
        count_row(l, weight, per_w, pd, ph, crow.data(), 0, l.padded[2]);
        cnt = crow.data() + l.pad_before[2];
      }
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t c = 0; c < p.channels; ++c) {
          const A* acc = static_cast<const A*>(p.acc) + (n * p.channels + c) * pv + q;
          if (!p.argmax) {
            T* out = static_cast<T*>(p.out) + (n * p.channels + c) * sv + r * W;
            for (int64_t x = 0; x < W; ++x) out[x] = store_as<T>(fdiv(acc[x], cnt[x]));
            continue;
          }
          for (int64_t x = 0; x < W; ++x) {  // torch.argmax: first maximum, NaN the largest
            const A v = fdiv(acc[x], cnt[x]);
            A& bv = best_v[static_cast<size_t>(x)];
            if (c == 0 || (!(bv != bv) && (v > bv || v != v))) {
              bv = v;
              best_i[static_cast<size_t>(x)] = c;
            }
          }
        }
        if (p.argmax)
          for (int64_t x = 0; x < W; ++x)
            store_label<T>(p.out, n * sv + r * W + x, best_i[static_cast<size_t>(x)]);
      }
    }
  }
}

template <class A>
void finalize_cpu(const FinalizeParams& p, int64_t batch) {
  switch (p.out_t) {
    case DType::Float64: return finalize_rows_typed<A, double>(p, batch);
    case DType::Float32: return finalize_rows_typed<A, float>(p, batch);
    case DType::Float16:
      if constexpr (sizeof(A) == 4) return finalize_rows_typed<A, half_t>(p, batch);
      break;
    case DType::BFloat16:
      if constexpr (sizeof(A) == 4) return finalize_rows_typed<A, bfloat16_t>(p, batch);
      break;
    case DType::UInt8: return finalize_rows_typed<A, uint8_t>(p, batch);
    case DType::Int16: return finalize_rows_typed<A, int16_t>(p, batch);
    case DType::Int32: return finalize_rows_typed<A, int32_t>(p, batch);
    case DType::Int64: return finalize_rows_typed<A, int64_t>(p, batch);
  }
  // float64 accumulator -> float16 / bfloat16 (one rounding, through float as torch's casts):
  // the device body on the host.
  const FinalizeBody<A> body{p};
  const int64_t items = body.items();
  typename FinalizeBody<A>::State st;
#pragma omp parallel for schedule(static) firstprivate(st)
  for (int64_t t = 0; t < batch * items; ++t) body(st, t / items, t % items);  // items: [z0, z1)
}

}  // namespace
}  // namespace detail

WindowLayout window_layout(const int64_t size[3], const int64_t roi[3], const double overlap[3]) {
  WindowLayout l;
  for (int a = 0; a < 3; ++a) {
    VOXAUG_EXPECTS(size[a] >= 1, "window_layout: image size must be >= 1 on every axis, got " +
                                     detail::dims(size));
    VOXAUG_EXPECTS(roi[a] >= 1,
                   "window_layout: roi_size must be >= 1 on every axis, got " + detail::dims(roi));
    VOXAUG_EXPECTS(overlap[a] >= 0.0 && overlap[a] < 1.0,
                   "window_layout: overlap must be in [0, 1), got " + std::to_string(overlap[a]) +
                       " on axis " + std::to_string(a));
    l.size[a] = size[a];
    l.roi[a] = roi[a];
    l.padded[a] = std::max(size[a], roi[a]);
    l.pad_before[a] = (l.padded[a] - size[a]) / 2;
    // MONAI's _get_scan_interval: int(roi * (1 - overlap)) in float64, at least 1.
    const int64_t iv = static_cast<int64_t>(static_cast<double>(roi[a]) * (1.0 - overlap[a]));
    l.interval[a] = roi[a] == l.padded[a] ? roi[a] : std::max<int64_t>(iv, 1);
    // dense_patch_slices: 1 + the first d with d * interval + roi >= padded.
    const int64_t rest = l.padded[a] - roi[a];
    l.count[a] = 1 + (rest + l.interval[a] - 1) / l.interval[a];
  }
  return l;
}

void window_gather(const VolumeView& image, const WindowLayout& l, int64_t first_window,
                   WindowPad pad, double cval, const VolumeView& out, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;  // the CPU-only build has no stream
#endif
  VOXAUG_EXPECTS(is_floating(image.dtype), "window_gather: image must be a float tensor, got " +
                                               std::string(dtype_name(image.dtype)));
  VOXAUG_EXPECTS(is_floating(out.dtype), "window_gather: out must be a float tensor, got " +
                                             std::string(dtype_name(out.dtype)));
  detail::check_same_device(image, out, "image", "out");
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(image.shape[2 + a] == l.size[a] && out.shape[2 + a] == l.roi[a],
                   "window_gather: image spatial size " + detail::dims(image.shape + 2) +
                       " and out spatial size " + detail::dims(out.shape + 2) +
                       " must match the layout's size " + detail::dims(l.size) + " and roi " +
                       detail::dims(l.roi));
  VOXAUG_EXPECTS(out.shape[1] == image.shape[1], "window_gather: out must have the image's " +
                                                     std::to_string(image.shape[1]) + " channels");
  VOXAUG_EXPECTS(detail::dense(out), "window_gather: out must be contiguous");
  const int64_t total = image.shape[0] * l.windows_per_image();
  VOXAUG_EXPECTS(first_window >= 0 && first_window + out.shape[0] <= total,
                 "window_gather: windows [" + std::to_string(first_window) + ", " +
                     std::to_string(first_window + out.shape[0]) + ") run past the " +
                     std::to_string(total) + " windows of the batch");
  const int mode = static_cast<int>(pad);
  VOXAUG_EXPECTS(mode >= 0 && mode <= 3, "window_gather: unknown padding mode");
  for (int a = 0; a < 3; ++a) {
    const int64_t after = l.padded[a] - l.size[a] - l.pad_before[a];
    if (pad == WindowPad::Reflect)
      VOXAUG_EXPECTS(std::max(l.pad_before[a], after) < l.size[a],
                     "window_gather: reflect padding needs the padding (" +
                         std::to_string(std::max(l.pad_before[a], after)) +
                         ") smaller than the image size " + std::to_string(l.size[a]) +
                         " on axis " + std::to_string(a) + " (as torch.nn.functional.pad)");
    if (pad == WindowPad::Circular)
      VOXAUG_EXPECTS(std::max(l.pad_before[a], after) <= l.size[a],
                     "window_gather: circular padding needs the padding no larger than the "
                     "image size on axis " +
                         std::to_string(a));
  }
  if (out.shape[0] == 0 || out.sample_numel() == 0) return;
  detail::GatherParams p;
  p.in = image.data;
  p.in_t = image.dtype;
  std::copy(image.strides, image.strides + 5, p.in_stride);
  p.channels = image.shape[1];
  p.out = out.data;
  p.out_t = out.dtype;
  p.batch = out.shape[0];
  p.l = l;
  p.first = first_window;
  p.pad = mode;
  // cval as F.pad stores it: rounded to the image's dtype.
  double fill = cval;
  switch (image.dtype) {
    case DType::Float32: fill = static_cast<float>(cval); break;
    case DType::Float16:
      fill = detail::half_to_float(detail::float_to_half(static_cast<float>(cval)));
      break;
    case DType::BFloat16:
      fill = detail::bf16_to_float(detail::float_to_bf16(static_cast<float>(cval)));
      break;
    default: break;
  }
  p.fill = fill;
  if (image.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::window_gather_cuda(p, image.device_index, stream);
    return;
#else
    VOXAUG_FAIL("window_gather: this build of voxaug has no CUDA backend");
#endif
  }
  detail::gather_cpu(p);
}

void window_stitch(const VolumeView& acc, const VolumeView& pred, const void* weight,
                   const WindowLayout& l, int64_t first_window, cudaStream_t stream) {
  window_stitch(acc, pred, weight, l, first_window, StitchFuse{}, stream);
}

void window_stitch(const VolumeView& acc, const VolumeView& pred, const void* weight,
                   const WindowLayout& l, int64_t first_window, const StitchFuse& fuse,
                   cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;  // the CPU-only build has no stream
#endif
  VOXAUG_EXPECTS(
      acc.dtype == DType::Float32 || acc.dtype == DType::Float64,
      "window_stitch: acc must be float32 or float64, got " + std::string(dtype_name(acc.dtype)));
  VOXAUG_EXPECTS(is_floating(pred.dtype), "window_stitch: pred must be a float tensor, got " +
                                              std::string(dtype_name(pred.dtype)));
  detail::check_same_device(acc, pred, "acc", "pred");
  VOXAUG_EXPECTS(detail::dense(acc), "window_stitch: acc must be contiguous");
  if (fuse.ring) {
    VOXAUG_EXPECTS(fuse.first_store && !fuse.last_divide,
                   "window_stitch: a ring accumulator needs first_store and no last_divide (its "
                   "planes are reused; window_finalize divides them)");
    VOXAUG_EXPECTS(acc.shape[2] >= l.roi[0] && acc.shape[2] <= l.padded[0],
                   "window_stitch: a ring accumulator holds between roi d (" +
                       std::to_string(l.roi[0]) + ") and padded d (" + std::to_string(l.padded[0]) +
                       ") planes, got " + std::to_string(acc.shape[2]));
  }
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(
        (acc.shape[2 + a] == l.padded[a] || (a == 0 && fuse.ring)) && pred.shape[2 + a] == l.roi[a],
        "window_stitch: acc spatial size " + detail::dims(acc.shape + 2) +
            " and pred spatial size " + detail::dims(pred.shape + 2) +
            " must match the padded image size " + detail::dims(l.padded) + " and roi " +
            detail::dims(l.roi));
  VOXAUG_EXPECTS(pred.shape[1] == acc.shape[1],
                 "window_stitch: pred has " + std::to_string(pred.shape[1]) +
                     " channels, the accumulator " + std::to_string(acc.shape[1]));
  const int64_t total = acc.shape[0] * l.windows_per_image();
  VOXAUG_EXPECTS(first_window >= 0 && first_window + pred.shape[0] <= total,
                 "window_stitch: windows [" + std::to_string(first_window) + ", " +
                     std::to_string(first_window + pred.shape[0]) + ") run past the " +
                     std::to_string(total) + " windows of the batch");
  if (fuse.last_divide)
    for (int a = 0; a < 3; ++a)
      VOXAUG_EXPECTS(l.padded[a] == l.size[a],
                     "window_stitch: last_divide leaves the result in acc, so it needs an image "
                     "at least as large as the roi on every axis (nothing to crop), got size " +
                         detail::dims(l.size) + " and roi " + detail::dims(l.roi));
  if (pred.shape[0] == 0 || acc.numel() == 0) return;
  detail::StitchParams p;
  p.first_store = fuse.first_store;
  p.last_divide = fuse.last_divide;
  p.count = fuse.last_divide ? fuse.count : nullptr;
  p.acc = acc.data;
  p.channels = acc.shape[1];
  p.depth = acc.shape[2];
  p.pred = pred.data;
  std::copy(pred.strides, pred.strides + 5, p.pred_stride);
  p.weight = weight;
  p.l = l;
#if !VOXAUG_WITH_CUDA
  VOXAUG_EXPECTS(acc.device == Device::CPU,
                 "window_stitch: this build of voxaug has no CUDA backend");
#endif
  // Consecutive launches of at most kStitchWindows windows: the same order of additions.
  const int64_t esize = dtype_size(pred.dtype);
  for (int64_t j0 = 0; j0 < pred.shape[0]; j0 += detail::kStitchWindows) {
    detail::stitch_launch_windows(p, first_window + j0,
                                  std::min(detail::kStitchWindows, pred.shape[0] - j0));
    p.pred = static_cast<const char*>(pred.data) + j0 * pred.strides[0] * esize;
#if VOXAUG_WITH_CUDA
    if (acc.device == Device::CUDA) {
      detail::window_stitch_cuda(p, acc.dtype, pred.dtype, acc.device_index, stream);
      continue;
    }
#endif
    if (acc.dtype == DType::Float32)
      detail::stitch_cpu_acc<float>(p, pred.dtype);
    else
      detail::stitch_cpu_acc<double>(p, pred.dtype);
  }
}

void window_count(const void* weight, DType dtype, Device device, int device_index,
                  const WindowLayout& l, void* count, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;  // the CPU-only build has no stream
#endif
  VOXAUG_EXPECTS(dtype == DType::Float32 || dtype == DType::Float64,
                 "window_count: dtype must be float32 or float64");
  if (device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::window_count_cuda(l, weight, dtype, count, device_index, stream);
    return;
#else
    (void)device_index;
    VOXAUG_FAIL("window_count: this build of voxaug has no CUDA backend");
#endif
  }
  if (dtype == DType::Float32)
    detail::count_cpu(l, static_cast<const float*>(weight), static_cast<float*>(count));
  else
    detail::count_cpu(l, static_cast<const double*>(weight), static_cast<double*>(count));
}

void window_finalize(const VolumeView& acc, const void* count, const void* weight,
                     const WindowLayout& l, const VolumeView& out, bool argmax,
                     cudaStream_t stream) {
  window_finalize(acc, count, weight, l, out, argmax, 0, l.padded[0], stream);
}

void window_finalize(const VolumeView& acc, const void* count, const void* weight,
                     const WindowLayout& l, const VolumeView& out, bool argmax, int64_t d_begin,
                     int64_t d_end, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;  // the CPU-only build has no stream
#endif
  VOXAUG_EXPECTS(acc.dtype == DType::Float32 || acc.dtype == DType::Float64,
                 "window_finalize: acc must be float32 or float64");
  detail::check_same_device(acc, out, "acc", "out");
  VOXAUG_EXPECTS(detail::dense(acc) && detail::dense(out),
                 "window_finalize: acc and out must be contiguous");
  VOXAUG_EXPECTS(0 <= d_begin && d_begin <= d_end && d_end <= l.padded[0],
                 "window_finalize: the planes [" + std::to_string(d_begin) + ", " +
                     std::to_string(d_end) + ") must lie in the padded d range [0, " +
                     std::to_string(l.padded[0]) + ")");
  VOXAUG_EXPECTS(
      acc.shape[2] >= 1 && acc.shape[2] <= l.padded[0] && d_end - d_begin <= acc.shape[2],
      "window_finalize: acc holds " + std::to_string(acc.shape[2]) +
          " d planes; it needs between the planes' count (" + std::to_string(d_end - d_begin) +
          ") and the padded d (" + std::to_string(l.padded[0]) + ")");
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS((acc.shape[2 + a] == l.padded[a] || a == 0) && out.shape[2 + a] == l.size[a],
                   "window_finalize: acc spatial size " + detail::dims(acc.shape + 2) +
                       " and out spatial size " + detail::dims(out.shape + 2) +
                       " must match the padded size " + detail::dims(l.padded) +
                       " and the image size " + detail::dims(l.size));
  VOXAUG_EXPECTS(out.shape[0] == acc.shape[0], "window_finalize: out must have acc's batch size");
  if (argmax) {
    VOXAUG_EXPECTS(!is_floating(out.dtype) && out.shape[1] == 1,
                   "window_finalize: with argmax, out must be (N, 1, D, H, W) of an integer dtype");
  } else {
    VOXAUG_EXPECTS(is_floating(out.dtype) && out.shape[1] == acc.shape[1],
                   "window_finalize: out must be a float tensor with acc's channels");
  }
  const int64_t z0 = std::clamp<int64_t>(d_begin - l.pad_before[0], 0, l.size[0]);
  const int64_t z1 = std::clamp<int64_t>(d_end - l.pad_before[0], 0, l.size[0]);
  if (acc.numel() == 0 || out.numel() == 0 || z1 <= z0) return;
  detail::FinalizeParams p;
  p.acc = acc.data;
  p.depth = acc.shape[2];
  p.z0 = z0;
  p.z1 = z1;
  p.count = count;
  p.weight = weight;
  p.channels = acc.shape[1];
  p.out = out.data;
  p.out_t = out.dtype;
  p.argmax = argmax;
  p.l = l;
  if (acc.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::window_finalize_cuda(p, acc.dtype, acc.shape[0], acc.device_index, stream);
    return;
#else
    VOXAUG_FAIL("window_finalize: this build of voxaug has no CUDA backend");
#endif
  }
  if (acc.dtype == DType::Float32)
    detail::finalize_cpu<float>(p, acc.shape[0]);
  else
    detail::finalize_cpu<double>(p, acc.shape[0]);
}

}  // namespace voxaug
