// voxaug: host loops of the resample gather. Same per-voxel math as the device
// (ResampleForward::voxel and detail/resample.h), organised for the CPU:
// - rows of output voxels are processed step-major (coordinates for the whole row, then
//   weights, then each corner's contribution), so the compiler vectorises every step;
// - chunks walk (d, h, w) incrementally instead of dividing every item index.
// Each voxel still sees exactly the device's sequence of IEEE operations, so the results are
// bit-identical to the CUDA path.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "../common/cpu_isa.h"
#include "../common/prefetch.h"
#include "../common/stream_store.h"
#include "voxaug/detail/bspline.h"
#include "voxaug/detail/deform.h"
#include "voxaug/detail/resample.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace voxaug::detail {

inline bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

// The reversed-row copies' levels: AVX-512 with byte / word permutes, and AVX2 (cpu_isa()'s,
// which also ask for DQ / VL / FMA: the clones' one choice per process).
inline bool cpu_has_avx512bw() {
  return cpu_isa() == CpuIsa::Avx512;
}
inline bool cpu_has_avx2() {
  return cpu_isa() != CpuIsa::Baseline;
}

constexpr int64_t kResampleRow = 256;
// Input volumes (one channel) from this size on get software prefetches in the float32 linear
// row path (prefetch_row_lines). Measured on the AMD EPYC VM with and without them, rotated
// maps, 2 threads: 1x64^3 (1 MiB, L2-resident between benchmark calls) 0.36-0.40 -> 0.60-0.63
// ms, 96^3 even, 112^3 (5.6 MiB) 4.6-6.0 -> 3.0-4.2 ms, 128^3 7.9-9.6 -> 4.1-4.2 ms (output
// allocated per call). A 128^3 input read again and again from L3 (bench_resample's
// cpu/linear/1x1x128x128x128) loses: 3.1-3.5 -> 4.0-4.2 ms; 4 x 128^3 gains 33-34 -> 18-19 ms.
constexpr int64_t kPrefetchInputBytes = int64_t(4) << 20;

// Per-axis row tables of the linear row path: for corner bit b of axis a, the voxel offset
// (times the stride), the weight, and whether the voxel is inside.
template <class Acc>
struct RowTables {
  alignas(64) int32_t off[3][2][kResampleRow];
  alignas(64) Acc wt[3][2][kResampleRow];
  alignas(64) int32_t ok[3][2][kResampleRow];
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// Software prefetch of the input lines that voxels [j, j + 16) of a float32 row will gather
// in the linear row path: for each (d, h) corner pair, one prefetch per lane whose line differs
// from the previous lane's. A rotated row walks across the input's lines, which the hardware
// prefetchers do not follow, and each masked gather then waits on its own misses; issued for
// the whole row before its gathers, the misses overlap. Values are untouched. Lanes outside
// the volume may prefetch addresses outside it (prefetches do not fault).
// On the AMD EPYC VM (2 threads), 1x1x224x224x160 rotated 0.17 rad about each axis: 35 -> 16-17
// ms; inputs that stay in L2 pay for the extra instructions, hence kPrefetchInputBytes.
__attribute__((target("avx512f"))) inline void prefetch_row_lines(const RowTables<float>& tb,
                                                                  const float* src, int j,
                                                                  int cnt) {
  const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
  // Offsets are in floats: element k lies on line (k + (src mod 64 bytes) / 4) / 16.
  const __m512i first =
      _mm512_set1_epi32(static_cast<int32_t>((reinterpret_cast<uintptr_t>(src) >> 2) & 15));
  const __m512i none = _mm512_set1_epi32(INT32_MIN);
  const __m512i offw = _mm512_load_si512(&tb.off[2][0][j]);
  for (int dh = 0; dh < 4; ++dh) {
    const __m512i idx = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(&tb.off[0][dh >> 1][j]),
                                                          _mm512_load_si512(&tb.off[1][dh & 1][j])),
                                         offw);
    // Zero-masked forms with an all-ones mask: GCC 12 warns about the unmasked forms'
    // undefined pass-through operand.
    const __m512i line = _mm512_maskz_srai_epi32(0xffff, _mm512_add_epi32(idx, first), 4);
    const __mmask16 starts =
        _mm512_cmpneq_epi32_mask(line, _mm512_maskz_alignr_epi32(0xffff, line, none, 15)) & lanes;
    // Compressed in a register, then stored: the memory form of vpcompressd is microcoded.
    alignas(64) int32_t o[16];
    _mm512_store_si512(o, _mm512_maskz_compress_epi32(starts, idx));
    for (int q = 0, nq = __builtin_popcount(starts); q < nq; ++q) prefetch_line(src + o[q]);
  }
}

// pad_coordinate (Border / Reflection) over a row of float32 coordinates with AVX-512, 16 at a
// time. Lanes inside the reflection range keep their value (reflect_coordinate's common case,
// decided by the same comparisons), every lane inside or under Border then takes the border
// clamp as vector compares and blends; other lanes (outside the reflection range, NaN) take
// the scalar rule. The same values as the scalar loop, without its branches per coordinate.
__attribute__((target("avx512f"))) inline void pad_row_f32_avx512(float* x, int cnt, int64_t size,
                                                                  Padding pad, bool align_corners) {
  const __m512 zero = _mm512_setzero_ps(), hi = _mm512_set1_ps(static_cast<float>(size - 1));
  const bool reflect = pad == Padding::Reflection;
  const ReflectRange<float> r = reflect_range<float>(size, align_corners);
  const __m512 lov = _mm512_set1_ps(r.lo), upv = _mm512_set1_ps(r.hi);
  for (int j = 0; j < cnt; j += 16) {
    const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
    __m512 v = _mm512_maskz_loadu_ps(lanes, x + j);
    __mmask16 kept = lanes;
    if (reflect)
      kept = r.empty ? __mmask16(0)
                     : _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(v, lov, _CMP_GE_OQ), v, upv,
                                               _CMP_LE_OQ) &
                           lanes;
    const __mmask16 low = _mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ);
    const __mmask16 high = _mm512_cmp_ps_mask(v, hi, _CMP_GE_OQ) & ~low;
    v = _mm512_mask_mov_ps(_mm512_mask_mov_ps(v, low, zero), high, hi);
    _mm512_mask_storeu_ps(x + j, kept, v);
    for (__mmask16 rest = lanes & ~kept; rest; rest &= rest - 1) {
      const int k = j + __builtin_ctz(rest);
      float unused;
      x[k] = pad_coordinate(x[k], size, pad, align_corners, &unused);
    }
  }
}
#endif

// pad_coordinate over a row of coordinates (Border / Reflection), in place.
template <class Acc>
VOXAUG_FORCEINLINE void pad_row(Acc* x, int cnt, int64_t size, Padding pad, bool align_corners) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if constexpr (std::is_same_v<Acc, float>) {
    if (cpu_has_avx512()) return pad_row_f32_avx512(x, cnt, size, pad, align_corners);
  }
#endif
  Acc unused;
  for (int j = 0; j < cnt; ++j) x[j] = pad_coordinate(x[j], size, pad, align_corners, &unused);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The 8-corner accumulation of a float32 row with AVX-512 masked gathers, 16 voxels at a
// time. Same operations per voxel as the scalar loop: w = (wd * wh) * ww, then
// acc = acc + w * v corner by corner (no FMA), so the results are identical.
__attribute__((target("avx512f"))) inline void corners_f32_avx512(const RowTables<float>& tb,
                                                                  const float* src, int cnt,
                                                                  float fill, float* dst,
                                                                  int64_t dst_stride,
                                                                  bool prefetch) {
  const __m512 fillv = _mm512_set1_ps(fill);
  if (prefetch)
    for (int j = 0; j < cnt; j += 16) prefetch_row_lines(tb, src, j, cnt);
  for (int j = 0; j < cnt; j += 16) {
    const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
    __m512 acc = _mm512_setzero_ps();
    for (int corner = 0; corner < 8; ++corner) {
      const int bd = (corner >> 2) & 1, bh = (corner >> 1) & 1, bw = corner & 1;
      const __m512 w = _mm512_mul_ps(
          _mm512_mul_ps(_mm512_load_ps(&tb.wt[0][bd][j]), _mm512_load_ps(&tb.wt[1][bh][j])),
          _mm512_load_ps(&tb.wt[2][bw][j]));
      const __m512i inside = _mm512_and_si512(_mm512_and_si512(_mm512_load_si512(&tb.ok[0][bd][j]),
                                                               _mm512_load_si512(&tb.ok[1][bh][j])),
                                              _mm512_load_si512(&tb.ok[2][bw][j]));
      const __mmask16 m = _mm512_test_epi32_mask(inside, inside) & lanes;
      const __m512i idx = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(&tb.off[0][bd][j]),
                                                            _mm512_load_si512(&tb.off[1][bh][j])),
                                           _mm512_load_si512(&tb.off[2][bw][j]));
      const __m512 v = _mm512_mask_i32gather_ps(fillv, m, idx, src, 4);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(w, v));
    }
    if (dst_stride == 1) {
      _mm512_mask_storeu_ps(dst + j, lanes, acc);
    } else {
      alignas(64) float tmp[16];
      _mm512_store_ps(tmp, acc);
      for (int k = 0; k < 16 && j + k < cnt; ++k) dst[(j + k) * dst_stride] = tmp[k];
    }
  }
}
// The same accumulation for inputs whose w stride is 1: the two w corners of a cell are
// adjacent floats, so lanes whose whole w pair is inside load both with one 64-bit gather
// element (half the gathered elements); edge lanes fall back to the single gathers. Values and
// the order of operations per voxel are those of corners_f32_avx512.
__attribute__((target("avx512f"))) inline void corners_f32_avx512_pairs(const RowTables<float>& tb,
                                                                        const float* src, int cnt,
                                                                        float fill, float* dst,
                                                                        int64_t dst_stride,
                                                                        bool prefetch) {
  const __m512 fillv = _mm512_set1_ps(fill);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i zero = _mm512_setzero_si512();
  if (prefetch)
    for (int j = 0; j < cnt; j += 16) prefetch_row_lines(tb, src, j, cnt);
  for (int j = 0; j < cnt; j += 16) {
    const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
    const __m512i okw0 = _mm512_load_si512(&tb.ok[2][0][j]);
    const __m512i okw1 = _mm512_load_si512(&tb.ok[2][1][j]);
    const __m512i offw0 = _mm512_load_si512(&tb.off[2][0][j]);
    const __m512i offw1 = _mm512_load_si512(&tb.off[2][1][j]);
    const __m512 ww0 = _mm512_load_ps(&tb.wt[2][0][j]), ww1 = _mm512_load_ps(&tb.wt[2][1][j]);
    __m512 acc = _mm512_setzero_ps();
    for (int dh = 0; dh < 4; ++dh) {
      const int bd = dh >> 1, bh = dh & 1;
      const __m512 wdh =
          _mm512_mul_ps(_mm512_load_ps(&tb.wt[0][bd][j]), _mm512_load_ps(&tb.wt[1][bh][j]));
      const __m512i okdh = _mm512_and_si512(_mm512_load_si512(&tb.ok[0][bd][j]),
                                            _mm512_load_si512(&tb.ok[1][bh][j]));
      const __m512i base = _mm512_add_epi32(_mm512_load_si512(&tb.off[0][bd][j]),
                                            _mm512_load_si512(&tb.off[1][bh][j]));
      const __m512i in0 = _mm512_and_si512(okdh, okw0), in1 = _mm512_and_si512(okdh, okw1);
      const __mmask16 m0 = _mm512_test_epi32_mask(in0, in0) & lanes;
      const __mmask16 m1 = _mm512_test_epi32_mask(in1, in1) & lanes;
      const __mmask16 pair = m0 & m1;
      const __m512i idx0 = _mm512_add_epi32(base, offw0);
      __m512 v0 = fillv, v1 = fillv;
      if (pair) {
        const __m512i lo = _mm512_mask_i32gather_epi64(
            zero, __mmask8(pair & 0xff), _mm512_maskz_extracti64x4_epi64(__mmask8(0xff), idx0, 0),
            src, 4);
        const __m512i hi = _mm512_mask_i32gather_epi64(
            zero, __mmask8(pair >> 8), _mm512_maskz_extracti64x4_epi64(__mmask8(0xff), idx0, 1),
            src, 4);
        const __m512 flo = _mm512_castsi512_ps(lo), fhi = _mm512_castsi512_ps(hi);
        v0 = _mm512_mask_mov_ps(v0, pair, _mm512_permutex2var_ps(flo, even, fhi));
        v1 = _mm512_mask_mov_ps(v1, pair, _mm512_permutex2var_ps(flo, odd, fhi));
      }
      const __mmask16 rest0 = m0 & ~pair, rest1 = m1 & ~pair;
      if (rest0) v0 = _mm512_mask_i32gather_ps(v0, rest0, idx0, src, 4);
      if (rest1) v1 = _mm512_mask_i32gather_ps(v1, rest1, _mm512_add_epi32(base, offw1), src, 4);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(wdh, ww0), v0));
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(wdh, ww1), v1));
    }
    if (dst_stride == 1) {
      _mm512_mask_storeu_ps(dst + j, lanes, acc);
    } else {
      alignas(64) float tmp[16];
      _mm512_store_ps(tmp, acc);
      for (int k = 0; k < 16 && j + k < cnt; ++k) dst[(j + k) * dst_stride] = tmp[k];
    }
  }
}

// One axis of nearest's indices with AVX-512 for float32 coordinates and 32-bit offsets: the
// scalar rule of nearest_row lane by lane (NaN -> outside, floor, round half to even, bounds).
__attribute__((target("avx512f"))) inline void nearest_axis_f32_avx512(const float* x, int cnt,
                                                                       int32_t size, int32_t stride,
                                                                       int32_t* off,
                                                                       int32_t* valid) {
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i zero = _mm512_setzero_si512(), onei = _mm512_set1_epi32(1);
  const __m512i sizev = _mm512_set1_epi32(size), stridev = _mm512_set1_epi32(stride);
  for (int j = 0; j < cnt; j += 16) {
    const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + j);
    const __mmask16 ordered = _mm512_cmp_ps_mask(xv, xv, _CMP_ORD_Q);
    const __m512 xs = _mm512_maskz_mov_ps(ordered, xv);
    const __m512 f = _mm512_maskz_roundscale_ps(__mmask16(0xffff), xs,
                                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512 diff = _mm512_sub_ps(xs, f);
    __m512i i = _mm512_maskz_cvttps_epi32(__mmask16(0xffff), f);
    const __mmask16 up =
        _mm512_cmp_ps_mask(diff, half, _CMP_GT_OQ) |
        (_mm512_cmp_ps_mask(diff, half, _CMP_EQ_OQ) & _mm512_test_epi32_mask(i, onei));
    i = _mm512_mask_add_epi32(i, up, i, onei);
    const __mmask16 ok =
        ordered & _mm512_cmpge_epi32_mask(i, zero) & _mm512_cmplt_epi32_mask(i, sizev);
    _mm512_store_si512(valid + j, _mm512_maskz_mov_epi32(ok, _mm512_load_si512(valid + j)));
    _mm512_store_si512(
        off + j, _mm512_add_epi32(_mm512_load_si512(off + j), _mm512_mullo_epi32(i, stridev)));
  }
}

// One axis of the float32 row tables with AVX-512, 16 voxels at a time: the scalar loop's
// operations (NaN -> -2, floor, truncation, w1 = x - floor, 1 - w1, bounds, offsets) lane by
// lane, so the tables are identical.
__attribute__((target("avx512f"))) inline void axis_tables_f32_avx512(
    const float* x, int cnt, int32_t size, int32_t stride, float* wt0, float* wt1, int32_t* ok0,
    int32_t* ok1, int32_t* off0, int32_t* off1) {
  const __m512 minus2 = _mm512_set1_ps(-2.0f), one = _mm512_set1_ps(1.0f);
  const __m512i zero = _mm512_setzero_si512(), sizev = _mm512_set1_epi32(size);
  const __m512i stridev = _mm512_set1_epi32(stride), onei = _mm512_set1_epi32(1);
  for (int j = 0; j < cnt; j += 16) {
    const __mmask16 lanes = cnt - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cnt - j)) - 1u);
    const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + j);
    const __mmask16 ordered = _mm512_cmp_ps_mask(xv, xv, _CMP_ORD_Q);
    const __m512 xs = _mm512_mask_mov_ps(minus2, ordered, xv);
    const __m512 f = _mm512_maskz_roundscale_ps(__mmask16(0xffff), xs,
                                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __m512i i0 = _mm512_maskz_cvttps_epi32(__mmask16(0xffff), f);
    const __m512i i1 = _mm512_add_epi32(i0, onei);
    const __m512 w1 = _mm512_sub_ps(xv, f);
    _mm512_store_ps(wt0 + j, _mm512_sub_ps(one, w1));
    _mm512_store_ps(wt1 + j, w1);
    const __mmask16 in0 = _mm512_cmpge_epi32_mask(i0, zero) & _mm512_cmplt_epi32_mask(i0, sizev);
    const __mmask16 in1 = _mm512_cmpge_epi32_mask(i1, zero) & _mm512_cmplt_epi32_mask(i1, sizev);
    _mm512_store_si512(ok0 + j, _mm512_maskz_mov_epi32(in0, onei));
    _mm512_store_si512(ok1 + j, _mm512_maskz_mov_epi32(in1, onei));
    _mm512_store_si512(off0 + j, _mm512_mullo_epi32(i0, stridev));
    _mm512_store_si512(off1 + j, _mm512_mullo_epi32(i1, stridev));
  }
}
#endif

// Linear gather of target t for output voxels (n, od, oh, ow0 .. ow0 + cnt): the row path.
// Offsets are 32-bit (the dispatcher checks that the volume fits).
// Source coordinates of a row, per axis (raw: before bounding and padding).
template <class Acc>
struct RowCoords {
  alignas(64) Acc x[3][kResampleRow];
};

// Plain map: the sequence of source_coordinate, ((m0 d + m1 h) + m2 w) + m3, per voxel.
template <class Acc>
VOXAUG_FORCEINLINE void row_coords(const Acc m[12], int64_t od, int64_t oh, int64_t ow0, int cnt,
                                   RowCoords<Acc>& rc) {
  for (int a = 0; a < 3; ++a) {
    const Acc* row = m + 4 * a;
    const Acc base = fadd(fmul(row[0], static_cast<Acc>(od)), fmul(row[1], static_cast<Acc>(oh)));
    for (int j = 0; j < cnt; ++j)
      rc.x[a][j] = fadd(fadd(base, fmul(row[2], static_cast<Acc>(ow0 + j))), row[3]);
  }
}

// Displaced map: M (o + u(o)) per voxel, u from the field. A B-spline field contracts its
// d and h taps once per row (bspline_line for each w control index the row touches), then
// each voxel sums its 4 w taps: the same operations per voxel as field_displacement.
// The w-axis taps of a B-spline field for a run of a row: the same for every row of a sample,
// so the row path keeps them while (n, ow0, cnt) stays the same.
template <class Acc>
struct BSplineRowTaps {
  int64_t n = -1, ow0 = -1;
  int cnt = -1;
  int64_t lo = 0, hi = -1;
  int64_t first[kResampleRow];
  Acc ww[kResampleRow][4];
  bool inside[kResampleRow];
  void update(const KField& f, int64_t n_, int64_t ow0_, int cnt_) {
    if (n_ == n && ow0_ == ow0 && cnt_ == cnt) return;
    n = n_;
    ow0 = ow0_;
    cnt = cnt_;
    lo = INT64_MAX;
    hi = INT64_MIN;
    for (int j = 0; j < cnt; ++j) {
      inside[j] = bspline_axis(f, n, 2, ow0 + j, &first[j], ww[j]);
      if (inside[j]) {
        lo = std::min(lo, first[j]);
        hi = std::max(hi, first[j] + 3);
      }
    }
  }
};

template <class Acc>
VOXAUG_FORCEINLINE void row_displacement(const KField& f, int64_t n, int64_t od, int64_t oh,
                                         int64_t ow0, int cnt, Acc (&u)[3][kResampleRow],
                                         BSplineRowTaps<Acc>& taps) {
  bool done = false;
  if (static_cast<FieldKind>(f.kind) == FieldKind::BSpline) {
    Acc wd[4], wh[4];
    int64_t fd, fh;
    if (!bspline_axis(f, n, 0, od, &fd, wd) || !bspline_axis(f, n, 1, oh, &fh, wh)) {
      for (int c = 0; c < 3; ++c)
        for (int j = 0; j < cnt; ++j) u[c][j] = Acc(0);
      done = true;
    } else {
      taps.update(f, n, ow0, cnt);
      const int64_t* first = taps.first;
      const auto& ww = taps.ww;
      const bool* inside = taps.inside;
      const int64_t lo = taps.lo, hi = taps.hi;
      constexpr int64_t kMaxLine = kResampleRow + 4;
      if (lo > hi || hi - lo + 1 <= kMaxLine) {
        Acc line[3][kMaxLine];
        for (int c = 0; c < 3; ++c)
          for (int64_t k = lo; k <= hi; ++k)
            line[c][k - lo] = bspline_line(f, n, c, fd, fh, k, wd, wh);
        for (int j = 0; j < cnt; ++j)
          for (int c = 0; c < 3; ++c) {
            Acc v = Acc(0);
            if (inside[j])
              for (int k = 0; k < 4; ++k) v = fadd(v, fmul(ww[j][k], line[c][first[j] + k - lo]));
            u[c][j] = v;
          }
        done = true;
      }
    }
  }
  if (!done) {
    for (int j = 0; j < cnt; ++j) {
      Acc uj[3];
      field_displacement(f, n, od, oh, ow0 + j, uj);
      for (int c = 0; c < 3; ++c) u[c][j] = uj[c];
    }
  }
}

template <class Acc>
VOXAUG_FORCEINLINE void row_coords_deformed(const KField& f, const Acc m[12], int64_t n, int64_t od,
                                            int64_t oh, int64_t ow0, int cnt, RowCoords<Acc>& rc,
                                            BSplineRowTaps<Acc>& taps) {
  alignas(64) Acc u[3][kResampleRow];
  row_displacement(f, n, od, oh, ow0, cnt, u, taps);
  const Acc o0 = static_cast<Acc>(od), o1 = static_cast<Acc>(oh);
  for (int j = 0; j < cnt; ++j) {
    const Acc q[3] = {fadd(o0, u[0][j]), fadd(o1, u[1][j]),
                      fadd(static_cast<Acc>(ow0 + j), u[2][j])};
    Acc src[3];
    displaced_source(m, q, src);
    for (int a = 0; a < 3; ++a) rc.x[a][j] = src[a];
  }
}

template <class Acc, class T>
VOXAUG_FORCEINLINE void linear_row(const ResampleParams& p, const KTarget& t,
                                   const RowCoords<Acc>& rc, int64_t n, int64_t od, int64_t oh,
                                   int64_t ow0, int cnt) {
  alignas(64) Acc x[kResampleRow];
  RowTables<Acc> tb;
  auto& off = tb.off;
  auto& wt = tb.wt;
  auto& ok = tb.ok;
  const Padding pad = static_cast<Padding>(t.padding);
  for (int a = 0; a < 3; ++a) {
    const Acc bound = static_cast<Acc>(kCoordinateBound);
    for (int j = 0; j < cnt; ++j) {
      const Acc src = rc.x[a][j];
      x[j] = src < -bound ? -bound : (src > bound ? bound : src);
    }
    if (pad != Padding::Zeros && pad != Padding::Constant)
      pad_row(x, cnt, t.in_size[a], pad, p.align_corners);
    const int32_t size = static_cast<int32_t>(t.in_size[a]);
    const int32_t stride = static_cast<int32_t>(t.in_stride[a + 2]);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if constexpr (std::is_same_v<Acc, float>) {
      if (cpu_has_avx512()) {
        axis_tables_f32_avx512(x, cnt, size, stride, wt[a][0], wt[a][1], ok[a][0], ok[a][1],
                               off[a][0], off[a][1]);
        continue;
      }
    }
#endif
    for (int j = 0; j < cnt; ++j) {
      const Acc xj = x[j] != x[j] ? Acc(-2) : x[j];  // NaN: outside, as on the device
      const Acc f = std::floor(xj);                  // the float overload on the host: vectorises
      const int32_t i = static_cast<int32_t>(f);
      const Acc w1 = fsub(x[j], f);
      wt[a][0][j] = fsub(Acc(1), w1);
      wt[a][1][j] = w1;
      ok[a][0][j] = (i >= 0) & (i < size);
      ok[a][1][j] = (i + 1 >= 0) & (i + 1 < size);
      off[a][0][j] = i * stride;
      off[a][1][j] = (i + 1) * stride;
    }
  }
  const T* in = static_cast<const T*>(t.in);
  T* out = static_cast<T*>(t.out);
  const Acc fill = pads_with_value(pad) ? static_cast<Acc>(t.pad_value) : Acc(0);
  [[maybe_unused]] const bool prefetch =
      t.in_size[0] * t.in_size[1] * t.in_size[2] * int64_t(sizeof(T)) >= kPrefetchInputBytes;
  const int64_t out_base = n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3];
  for (int64_t c = 0; c < t.channels; ++c) {
    const T* src = in + t.in_sample(n) * t.in_stride[0] + c * t.in_stride[1];
    T* dst = out + out_base + c * t.out_stride[1];
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
      if (cpu_has_avx512()) {
        if (t.in_stride[4] == 1)
          corners_f32_avx512_pairs(tb, src, cnt, fill, dst + ow0 * t.out_stride[4], t.out_stride[4],
                                   prefetch);
        else
          corners_f32_avx512(tb, src, cnt, fill, dst + ow0 * t.out_stride[4], t.out_stride[4],
                             prefetch);
        continue;
      }
    }
#endif
    for (int j = 0; j < cnt; ++j) {
      Acc acc = Acc(0);
      // The 8 corners in the device's order (bits d, h, w); each always loads (voxel 0 when
      // outside) and selects, so the loop has no branches and vectorises with gathers.
#define VOXAUG_CORNER(BD, BH, BW)                                                 \
  {                                                                               \
    const Acc w = fmul(fmul(wt[0][BD][j], wt[1][BH][j]), wt[2][BW][j]);           \
    const int32_t inside = ok[0][BD][j] & ok[1][BH][j] & ok[2][BW][j];            \
    const int32_t o = inside ? off[0][BD][j] + off[1][BH][j] + off[2][BW][j] : 0; \
    const Acc loaded = load_as<Acc>(src[o]);                                      \
    acc = fadd(acc, fmul(w, inside ? loaded : fill));                             \
  }
      VOXAUG_CORNER(0, 0, 0)
      VOXAUG_CORNER(0, 0, 1)
      VOXAUG_CORNER(0, 1, 0)
      VOXAUG_CORNER(0, 1, 1)
      VOXAUG_CORNER(1, 0, 0)
      VOXAUG_CORNER(1, 0, 1)
      VOXAUG_CORNER(1, 1, 0)
      VOXAUG_CORNER(1, 1, 1)
#undef VOXAUG_CORNER
      dst[(ow0 + j) * t.out_stride[4]] = store_as<T>(acc);
    }
  }
}

template <class Acc>
VOXAUG_FORCEINLINE bool linear_row_dispatch(const ResampleParams& p, const KTarget& t,
                                            const RowCoords<Acc>& rc, int64_t n, int64_t od,
                                            int64_t oh, int64_t ow0, int cnt) {
  // Cutoff (scipy's 'constant') takes the per-voxel path.
  if (static_cast<Interp>(t.mode) != Interp::Linear || t.in_dtype != t.out_dtype ||
      static_cast<Padding>(t.padding) == Padding::Cutoff)
    return false;
  // 32-bit offsets within one (n, c) volume.
  int64_t span = 1;
  for (int a = 0; a < 3; ++a)
    span +=
        (t.in_size[a] + 1) * (t.in_stride[a + 2] < 0 ? -t.in_stride[a + 2] : t.in_stride[a + 2]);
  if (span >= (int64_t(1) << 31)) return false;
  switch (t.in_dtype) {
    case DType::Float32:
      if (!std::is_same_v<Acc, float>) return false;
      linear_row<Acc, float>(p, t, rc, n, od, oh, ow0, cnt);
      return true;
    case DType::Float64:
      if (!std::is_same_v<Acc, double>) return false;
      linear_row<Acc, double>(p, t, rc, n, od, oh, ow0, cnt);
      return true;
    default: return false;
  }
}

template <class U>
VOXAUG_FORCEINLINE void nearest_copy(const void* in, int64_t src0, const int64_t* off, void* out,
                                     int64_t dst0, int64_t dst_step, int cnt, U fill) {
  const U* s = static_cast<const U*>(in) + src0;
  U* d = static_cast<U*>(out) + dst0;
  for (int j = 0; j < cnt; ++j) d[j * dst_step] = off[j] >= 0 ? s[off[j]] : fill;
}

// Nearest gather of target t for a row (coordinates rc): the per-voxel rule of
// ResampleForward::gather (pad the coordinate, round half to even, copy the element or fill),
// organised per step so the index arithmetic vectorises.
template <class Acc>
VOXAUG_FORCEINLINE void nearest_row(const ResampleParams& p, const KTarget& t,
                                    const RowCoords<Acc>& rc, int64_t n, int64_t od, int64_t oh,
                                    int64_t ow0, int cnt) {
  int64_t off[kResampleRow];
  alignas(64) int32_t valid[kResampleRow];
  const Padding pad = static_cast<Padding>(t.padding);
  const bool folds = pad == Padding::Border || pad == Padding::Reflection;
  for (int j = 0; j < cnt; ++j) {
    off[j] = 0;
    valid[j] = 1;
  }
  alignas(64) Acc x[kResampleRow];
  // float32 coordinates and a volume within 32-bit offsets: the AVX-512 index path.
  alignas(64) int32_t off32[kResampleRow];
  bool use32 = false;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if constexpr (std::is_same_v<Acc, float>) {
    int64_t span = 1;
    for (int a = 0; a < 3; ++a)
      span +=
          (t.in_size[a] + 1) * (t.in_stride[a + 2] < 0 ? -t.in_stride[a + 2] : t.in_stride[a + 2]);
    use32 = cpu_has_avx512() && span < (int64_t(1) << 31);
    for (int j = 0; j < cnt; ++j) off32[j] = 0;
  }
#endif
  for (int a = 0; a < 3; ++a) {
    const Acc bound = static_cast<Acc>(kCoordinateBound);
    for (int j = 0; j < cnt; ++j)
      x[j] = rc.x[a][j] < -bound ? -bound : (rc.x[a][j] > bound ? bound : rc.x[a][j]);
    if (folds) pad_row(x, cnt, t.in_size[a], pad, p.align_corners);
    // round_half_even without branches (NaN: outside; it converts 0 instead, never NaN).
    const int64_t size = t.in_size[a], stride = t.in_stride[a + 2];
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (use32) {
      nearest_axis_f32_avx512(reinterpret_cast<const float*>(x), cnt, static_cast<int32_t>(size),
                              static_cast<int32_t>(stride), off32, valid);
      continue;
    }
#endif
    for (int j = 0; j < cnt; ++j) {
      const bool nan = x[j] != x[j];
      const Acc xs = nan ? Acc(0) : x[j];
      const Acc f = std::floor(xs);
      const Acc diff = fsub(xs, f);
      int64_t i = static_cast<int64_t>(f);
      i += static_cast<int64_t>((diff > Acc(0.5)) | ((diff == Acc(0.5)) & ((i & 1) != 0)));
      valid[j] &= static_cast<int32_t>(!nan & (i >= 0) & (i < size));
      off[j] += i * stride;
    }
  }
  if (use32)
    for (int j = 0; j < cnt; ++j) off[j] = valid[j] ? int64_t(off32[j]) : int64_t(-1);
  else
    for (int j = 0; j < cnt; ++j) off[j] = valid[j] ? off[j] : int64_t(-1);
  const double fill = pads_with_value(pad) ? t.pad_value : 0.0;
  const int64_t out_base = n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3];
  for (int64_t c = 0; c < t.channels; ++c) {
    const int64_t src0 = t.in_sample(n) * t.in_stride[0] + c * t.in_stride[1];
    const int64_t dst0 = out_base + c * t.out_stride[1] + ow0 * t.out_stride[4];
    const int64_t ds = t.out_stride[4];
    switch (t.in_dtype) {  // the fill converted as store_value_dyn converts it
      case DType::Float64: nearest_copy<double>(t.in, src0, off, t.out, dst0, ds, cnt, fill); break;
      case DType::Float32:
        nearest_copy<float>(t.in, src0, off, t.out, dst0, ds, cnt, static_cast<float>(fill));
        break;
      case DType::UInt8:
        nearest_copy<uint8_t>(t.in, src0, off, t.out, dst0, ds, cnt, static_cast<uint8_t>(fill));
        break;
      case DType::Int16:
        nearest_copy<int16_t>(t.in, src0, off, t.out, dst0, ds, cnt, static_cast<int16_t>(fill));
        break;
      case DType::Int32:
        nearest_copy<int32_t>(t.in, src0, off, t.out, dst0, ds, cnt, static_cast<int32_t>(fill));
        break;
      case DType::Int64:
        nearest_copy<int64_t>(t.in, src0, off, t.out, dst0, ds, cnt, static_cast<int64_t>(fill));
        break;
      default:  // float16 / bfloat16: through the per-element helpers
        for (int j = 0; j < cnt; ++j) {
          const int64_t o = dst0 + j * ds;
          if (off[j] < 0)
            store_value_dyn(t.out, t.out_dtype, o, fill);
          else
            copy_dyn(t.in, src0 + off[j], t.out, o, t.elem_size);
        }
    }
  }
}

// Integer padding of an exact map's source index, equal to what the device's float path does
// for integer coordinates (clip; half- or whole-sample reflection then clip). -1: outside.
VOXAUG_FORCEINLINE int64_t exact_index(int64_t i, int64_t size, Padding pad, bool align_corners) {
  const int64_t bound = static_cast<int64_t>(kCoordinateBound);
  i = i < -bound ? -bound : (i > bound ? bound : i);
  if (i >= 0 && i < size) return i;
  switch (pad) {
    case Padding::Border: return i < 0 ? 0 : size - 1;
    case Padding::Reflection: return extend_index(i, size, pad, align_corners);
    default: return -1;
  }
}

// Reversed rows (a flip along the row's axis): dst[j] = src[-j] for j in [0, n), bit for bit.
// Whole vectors are loaded forwards and their elements permuted into reverse order.
template <class U>
VOXAUG_FORCEINLINE void reverse_copy_scalar(U* dst, const U* src, int64_t n) {
  const U* base = src - (n - 1);  // ascending loads (see reverse_copy_avx512)
  for (int64_t i = 0; i < n; ++i) dst[n - 1 - i] = base[i];
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The elements of v in reverse order. The AVX-512 permutes and extracts here take an all-ones
// zero mask: GCC 12 warns about the unmasked forms' undefined pass-through operand.
template <class U>
__attribute__((target("avx512f,avx512bw"))) inline __m512i reverse_lanes_avx512(__m512i v) {
  if constexpr (sizeof(U) == 8) {
    return _mm512_maskz_permutexvar_epi64(__mmask8(0xff), _mm512_setr_epi64(7, 6, 5, 4, 3, 2, 1, 0),
                                          v);
  } else if constexpr (sizeof(U) == 4) {
    return _mm512_maskz_permutexvar_epi32(
        __mmask16(0xffff), _mm512_setr_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        v);
  } else if constexpr (sizeof(U) == 2) {
    return _mm512_maskz_permutexvar_epi16(
        ~__mmask32(0),
        _mm512_set_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                         21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31),
        v);
  } else {  // bytes reversed within each 128-bit lane, then the lanes (no VBMI needed)
    const __m512i bytes = _mm512_maskz_broadcast_i32x4(
        __mmask16(0xffff), _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    const __m512i within = _mm512_maskz_shuffle_epi8(~__mmask64(0), v, bytes);
    return _mm512_maskz_shuffle_i64x2(__mmask8(0xff), within, within, 0x1B);
  }
}

template <class U>
__attribute__((target("avx2"))) inline __m256i reverse_lanes_avx2(__m256i v) {
  if constexpr (sizeof(U) == 8) {
    return _mm256_permute4x64_epi64(v, 0x1B);
  } else if constexpr (sizeof(U) == 4) {
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0));
  } else {  // reversed within each 128-bit lane, then the two lanes swapped
    const __m256i within =
        sizeof(U) == 2 ? _mm256_setr_epi8(14, 15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1, 14,
                                          15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1)
                       : _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15,
                                          14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, within), 0x4E);
  }
}

template <class U>
__attribute__((target("avx2"))) inline __m128i reverse_lanes_128(__m128i v) {
  if constexpr (sizeof(U) == 8) {
    return _mm_shuffle_epi32(v, 0x4E);
  } else if constexpr (sizeof(U) == 4) {
    return _mm_shuffle_epi32(v, 0x1B);
  } else if constexpr (sizeof(U) == 2) {
    return _mm_shuffle_epi8(v, _mm_setr_epi8(14, 15, 12, 13, 10, 11, 8, 9, 6, 7, 4, 5, 2, 3, 0, 1));
  } else {
    return _mm_shuffle_epi8(v, _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
  }
}

// The source is read in ascending address order (vector i of the row's memory becomes the
// i-th vector from the end of dst): the hardware prefetchers follow an ascending walk better
// than a descending one. What is left after the whole vectors takes one 16-byte step and
// scalar elements (Zen 4: masked AVX-512 loads / stores for that tail made a 96-byte row
// 2.5x slower than its forward copy).
template <class U>
__attribute__((target("avx2"), noinline)) inline void reverse_copy_avx2(U* dst, const U* src,
                                                                        int64_t n) {
  constexpr int64_t V = 32 / sizeof(U), V16 = 16 / sizeof(U);
  const U* base = src - (n - 1);  // the row's lowest address: base[i] -> dst[n - 1 - i]
  int64_t i = 0;
  for (; i + V <= n; i += V) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (n - i - V)), reverse_lanes_avx2<U>(v));
  }
  if (i + V16 <= n) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (n - i - V16)), reverse_lanes_128<U>(v));
    i += V16;
  }
  for (; i < n; ++i) dst[n - 1 - i] = base[i];
}

template <class U>
__attribute__((target("avx512f,avx512bw"), noinline)) inline void reverse_copy_avx512(U* dst,
                                                                                      const U* src,
                                                                                      int64_t n) {
  constexpr int64_t V = 64 / sizeof(U), V32 = 32 / sizeof(U);
  const U* base = src - (n - 1);
  int64_t i = 0;
  for (; i + V <= n; i += V) {
    const __m512i v = _mm512_loadu_si512(base + i);
    _mm512_storeu_si512(dst + (n - i - V), reverse_lanes_avx512<U>(v));
  }
  if (i + V32 <= n) {  // then at most 31 bytes: reverse_copy_avx2's tail
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (n - i - V32)), reverse_lanes_avx2<U>(v));
    i += V32;
  }
  reverse_copy_avx2(dst, base + (n - 1), n - i);
}

// reverse_copy with non-temporal stores (the streamed rows of exact_items), straight from the
// vector registers. dst's 16-byte-aligned middle is written from its end down (the source read
// upwards): 64-byte vectors, each one 64-byte streaming store where aligned, else four 16-byte
// ones, then 16-byte vectors; the unaligned edges (< 16 bytes each) take plain stores, as in
// stream_copy. The caller fences.
template <class U>
__attribute__((target("avx512f,avx512bw"), noinline)) inline void reverse_stream_avx512(
    U* dst, const U* src, int64_t n) {
  constexpr int64_t V = 64 / sizeof(U), V16 = 16 / sizeof(U);
  const int64_t a0 = std::min<int64_t>(
      n, static_cast<int64_t>((16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15) /
             static_cast<int64_t>(sizeof(U)));
  const int64_t a1 = a0 + (n - a0) / V16 * V16;  // [a0, a1): whole 16-byte chunks of dst
  const U* base = src - (n - 1);                 // base[i] -> dst[n - 1 - i]
  int64_t a = a1;
  for (; a - a0 >= V; a -= V) {  // dst[a - V, a) = base[n - a, n - a + V) reversed
    const __m512i v = reverse_lanes_avx512<U>(_mm512_loadu_si512(base + (n - a)));
    U* to = dst + (a - V);
    if ((reinterpret_cast<uintptr_t>(to) & 63) == 0) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(to), v);
    } else {
      __m128i* q = reinterpret_cast<__m128i*>(to);
      _mm_stream_si128(q, _mm512_maskz_extracti32x4_epi32(__mmask8(0xf), v, 0));
      _mm_stream_si128(q + 1, _mm512_maskz_extracti32x4_epi32(__mmask8(0xf), v, 1));
      _mm_stream_si128(q + 2, _mm512_maskz_extracti32x4_epi32(__mmask8(0xf), v, 2));
      _mm_stream_si128(q + 3, _mm512_maskz_extracti32x4_epi32(__mmask8(0xf), v, 3));
    }
  }
  for (; a > a0; a -= V16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + (n - a)));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + (a - V16)), reverse_lanes_128<U>(v));
  }
  reverse_copy_scalar(dst, src, a0);
  reverse_copy_scalar(dst + a1, src - a1, n - a1);
}
#endif

template <class U>
VOXAUG_FORCEINLINE void reverse_copy(U* dst, const U* src, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (cpu_has_avx512bw()) return reverse_copy_avx512(dst, src, n);
  if (cpu_has_avx2()) return reverse_copy_avx2(dst, src, n);
#endif
  reverse_copy_scalar(dst, src, n);
}

// reverse_copy of elements of `elem_size` bytes (1, 2, 4 or 8).
VOXAUG_FORCEINLINE void reverse_copy_bytes(void* dst, const void* src, int64_t n, int elem_size) {
  switch (elem_size) {
    case 1: reverse_copy(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n); break;
    case 2: reverse_copy(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n); break;
    case 4: reverse_copy(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), n); break;
    default: reverse_copy(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), n); break;
  }
}

// reverse_copy with streaming stores (elements of `elem_size` bytes) without AVX-512:
// reversed into an L1 buffer, then stream_copy'd out.
VOXAUG_FORCEINLINE void reverse_stream_buffered(void* dst, const void* src, int64_t n,
                                                int elem_size) {
  alignas(64) char buf[2048];
  const int64_t per = 2048 / elem_size;
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  for (int64_t j0 = 0; j0 < n; j0 += per) {
    const int64_t m = std::min<int64_t>(per, n - j0);
    reverse_copy_bytes(buf, in - j0 * elem_size, m, elem_size);
    stream_copy(out + j0 * elem_size, buf, m * elem_size);
  }
}

// reverse_copy with streaming stores (elements of `elem_size` bytes): straight from the vector
// registers with AVX-512, else through an L1 buffer.
__attribute__((noinline)) inline void reverse_stream_bytes(void* dst, const void* src, int64_t n,
                                                           int elem_size) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (cpu_has_avx512bw()) {
    switch (elem_size) {
      case 1:
        reverse_stream_avx512(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
        break;
      case 2:
        reverse_stream_avx512(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n);
        break;
      case 4:
        reverse_stream_avx512(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), n);
        break;
      default:
        reverse_stream_avx512(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), n);
        break;
    }
    return;
  }
#endif
  reverse_stream_buffered(dst, src, n, elem_size);
}

// stream_copy out of line for exact_items' forward rows: its loop keeps its registers there.
__attribute__((noinline)) inline void stream_copy_row(void* dst, const void* src, int64_t bytes) {
  stream_copy(dst, src, bytes);
}

// Software prefetch of the lines of [p, p + bytes) (the exact rows' stride prefetch below).
VOXAUG_FORCEINLINE void prefetch_bytes(const char* p, int64_t bytes) {
  for (int64_t b = 0; b < bytes; b += 64) prefetch_line(p + b);
}

// Rows ahead that the exact path prefetches when consecutive source rows do not follow each
// other upwards in memory (a flip of the h or d axis walks them downwards, which the hardware
// prefetchers of the AMD EPYC VM did not follow: a 4 x 1 x 128^3 flip along h took 7.4 ms,
// along d 1.6 ms).
constexpr int64_t kRowPrefetchAhead = 4;

// The post target's steps when each active one is a shift or a scale (post_span's two written-
// out cases), as (multiply?, value) pairs in order: the BTCV chain's RandShiftIntensityd after
// its crop and flips.
struct AffinePost {
  int n = 0;
  bool mul[kMaxResamplePostSteps];
  float v[kMaxResamplePostSteps];
};

// One contiguous float32 row of the post target: loaded, stepped in registers and streamed,
// one pass with no read for ownership and no L1 buffer. The same IEEE operation per element
// and step as post_span (an add or a multiply, never fused), so the same bits.
__attribute__((noinline)) inline void stream_post_row_f32(float* dst, const float* src, int64_t cnt,
                                                          const AffinePost& a) {
  const auto step = [&a](float x) {
    for (int q = 0; q < a.n; ++q) x = a.mul[q] ? fmul(x, a.v[q]) : fadd(x, a.v[q]);
    return x;
  };
  int64_t j = 0;
#if VOXAUG_STREAM_STORES
  for (; j < cnt && (reinterpret_cast<uintptr_t>(dst + j) & 15) != 0; ++j) dst[j] = step(src[j]);
  for (; j + 4 <= cnt; j += 4) {
    __m128 x = _mm_loadu_ps(src + j);
    for (int q = 0; q < a.n; ++q) {
      const __m128 v = _mm_set1_ps(a.v[q]);
      x = a.mul[q] ? _mm_mul_ps(x, v) : _mm_add_ps(x, v);
    }
    _mm_stream_ps(dst + j, x);
  }
#endif
  for (; j < cnt; ++j) dst[j] = step(src[j]);
}

// Rows whose source walks across lines (quarter turns: the step is a whole input row or plane)
// with streaming stores: gathered into an L1 buffer, then stream_copy'd out.
template <class U>
VOXAUG_FORCEINLINE void gather_stream(U* dst, const U* src, int64_t step, int64_t n) {
  constexpr int64_t per = 2048 / sizeof(U);
  alignas(64) U buf[per];
  for (int64_t j0 = 0; j0 < n; j0 += per) {
    const int64_t m = std::min<int64_t>(per, n - j0);
    const U* s = src + j0 * step;
    for (int64_t j = 0; j < m; ++j) buf[j] = s[j * step];
    stream_copy(dst + j0, buf, m * static_cast<int64_t>(sizeof(U)));
  }
}

__attribute__((noinline)) inline void gather_stream_bytes(void* dst, const void* src, int64_t step,
                                                          int64_t n, int elem_size) {
  switch (elem_size) {
    case 1:
      gather_stream(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), step, n);
      break;
    case 2:
      gather_stream(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), step, n);
      break;
    case 4:
      gather_stream(static_cast<uint32_t*>(dst), static_cast<const uint32_t*>(src), step, n);
      break;
    default:
      gather_stream(static_cast<uint64_t*>(dst), static_cast<const uint64_t*>(src), step, n);
      break;
  }
}

template <class U>
VOXAUG_FORCEINLINE void strided_copy(const void* in, int64_t src0, int64_t src_step, void* out,
                                     int64_t dst0, int64_t dst_step, int64_t lo, int64_t hi) {
  const U* s = static_cast<const U*>(in);
  U* d = static_cast<U*>(out);
  if (dst_step == 1 && src_step == 1) {  // identity rows and rows along an unflipped axis
    if (hi > lo)
      std::memcpy(d + dst0 + lo, s + src0 + lo, static_cast<size_t>(hi - lo) * sizeof(U));
    return;
  }
  if (dst_step == 1 && src_step == -1) {  // flipped rows
    if (hi > lo) reverse_copy(d + dst0 + lo, s + src0 - lo, hi - lo);
    return;
  }
  for (int64_t j = lo; j < hi; ++j) d[dst0 + j * dst_step] = s[src0 + j * src_step];
}

// An exact row's source: the offset of its element 0 in `t.in` (sample n, channel 0) and the
// offset step per output element, from the integer source index `first` and `step` per axis.
VOXAUG_FORCEINLINE void row_source(const KTarget& t, int64_t n, const int64_t first[3],
                                   const int64_t step[3], int64_t* off0, int64_t* doff) {
  *off0 = t.in_sample(n) * t.in_stride[0];
  *doff = 0;
  for (int a = 0; a < 3; ++a) {
    *off0 += first[a] * t.in_stride[a + 2];
    *doff += step[a] * t.in_stride[a + 2];
  }
}

// Elements [lo, hi) of one channel's row, copied bit for bit (one dtype).
VOXAUG_FORCEINLINE void copy_elements(const KTarget& t, int64_t src0, int64_t doff, int64_t dst0,
                                      int64_t lo, int64_t hi) {
  const int64_t ds = t.out_stride[4];
  switch (t.elem_size) {
    case 1: strided_copy<uint8_t>(t.in, src0, doff, t.out, dst0, ds, lo, hi); break;
    case 2: strided_copy<uint16_t>(t.in, src0, doff, t.out, dst0, ds, lo, hi); break;
    case 4: strided_copy<uint32_t>(t.in, src0, doff, t.out, dst0, ds, lo, hi); break;
    default: strided_copy<uint64_t>(t.in, src0, doff, t.out, dst0, ds, lo, hi); break;
  }
}

// The host dtype of Acc (float32 / float64): outputs of it are stepped in place.
template <class Acc>
constexpr DType native_dtype() {
  return std::is_same_v<Acc, double> ? DType::Float64 : DType::Float32;
}

// Rows of a signed-permutation map with integer offset: integer source indices walk with a
// constant step, each voxel is copied (nearest: bytes; linear: converted) or filled. Returns
// false where the float path's coordinates might not stay exact (|values| >= 2^22),
// leaving those rare maps to the per-voxel path so both sides stay identical.
// The row's integer source index at j = 0 (`first`) and its step per j, per input axis.
VOXAUG_FORCEINLINE void exact_row_int(const ResampleParams& p, const KTarget& t,
                                      const int64_t first[3], const int64_t step[3], int64_t n,
                                      int64_t od, int64_t oh, int64_t ow0, int64_t cnt);

// 2^22: below it the device's float32 coordinate math is exact, including the half-voxel
// bounds of reflection without align_corners (x + 0.5) and its fmod / floor(x / span) pair.
constexpr double kExactBound = 4194304.0;

VOXAUG_FORCEINLINE bool exact_row(const ResampleParams& p, const KTarget& t, const double* m,
                                  int64_t n, int64_t od, int64_t oh, int64_t ow0, int cnt) {
  int64_t first[3], step[3];
  for (int a = 0; a < 3; ++a) {
    const double* r = m + 4 * a;
    const double v0 = r[0] * od + r[1] * oh + r[2] * ow0 + r[3];
    if (!(v0 < kExactBound && v0 > -kExactBound) || ow0 + cnt >= kExactBound ||
        t.in_size[a] >= kExactBound)
      return false;
    first[a] = static_cast<int64_t>(v0);
    step[a] = static_cast<int64_t>(r[2]);
  }
  exact_row_int(p, t, first, step, n, od, oh, ow0, cnt);
  return true;
}

VOXAUG_FORCEINLINE void exact_row_int(const ResampleParams& p, const KTarget& t,
                                      const int64_t first[3], const int64_t step[3], int64_t n,
                                      int64_t od, int64_t oh, int64_t ow0, int64_t cnt) {
  const Padding pad = static_cast<Padding>(t.padding);
  const bool nearest = static_cast<Interp>(t.mode) == Interp::Nearest;
  const double fill = pads_with_value(pad) ? t.pad_value : 0.0;
  const int64_t out_base = n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3];
  // An axis the row does not move along (step 0) has one index for the whole row: fold it
  // through the padding rule once (a padded row of an edge / reflect pad or crop is then an
  // inside row), or, where it reads the fill, write the fill and be done.
  int64_t folded[3] = {first[0], first[1], first[2]};
  for (int a = 0; a < 3; ++a) {
    if (step[a] != 0 || (folded[a] >= 0 && folded[a] < t.in_size[a])) continue;
    folded[a] = exact_index(folded[a], t.in_size[a], pad, p.align_corners);
    if (folded[a] < 0) {
      for (int64_t c = 0; c < t.channels; ++c)
        for (int64_t j = 0; j < cnt; ++j)
          store_value_dyn(t.out, t.out_dtype,
                          out_base + c * t.out_stride[1] + (ow0 + j) * t.out_stride[4], fill);
      return;
    }
  }
  first = folded;
  // The j range where every raw index is inside (no padding rule applies): each index moves
  // by step in {-1, 0, 1} per j, so the range is an interval.
  int64_t lo = 0, hi = cnt;
  for (int a = 0; a < 3; ++a) {
    const int64_t f0 = first[a], st = step[a], size = t.in_size[a];
    if (st == 0) {
      if (f0 < 0 || f0 >= size) hi = lo;
    } else if (st > 0) {
      lo = std::max<int64_t>(lo, -f0);        // f0 + j >= 0
      hi = std::min<int64_t>(hi, size - f0);  // f0 + j < size
    } else {
      lo = std::max<int64_t>(lo, f0 - (size - 1));  // f0 - j < size
      hi = std::min<int64_t>(hi, f0 + 1);           // f0 - j >= 0
    }
  }
  if (hi < lo) hi = lo;
  const bool same_type = nearest || t.in_dtype == t.out_dtype;
  auto general = [&](int64_t j) {
    int64_t off = 0;
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      const int64_t i = exact_index(first[a] + j * step[a], t.in_size[a], pad, p.align_corners);
      inside = inside && i >= 0;
      off += i * t.in_stride[a + 2];
    }
    for (int64_t c = 0; c < t.channels; ++c) {
      const int64_t o = out_base + c * t.out_stride[1] + (ow0 + j) * t.out_stride[4];
      const int64_t src = t.in_sample(n) * t.in_stride[0] + c * t.in_stride[1] + off;
      if (!inside) {
        store_value_dyn(t.out, t.out_dtype, o, fill);
      } else if (nearest) {
        copy_dyn(t.in, src, t.out, o, t.elem_size);
      } else if (t.in_dtype == DType::Float64 || t.out_dtype == DType::Float64) {
        store_dyn<double>(t.out, t.out_dtype, o, load_dyn<double>(t.in, t.in_dtype, src));
      } else {
        store_dyn<float>(t.out, t.out_dtype, o, load_dyn<float>(t.in, t.in_dtype, src));
      }
    }
  };
  for (int64_t j = 0; j < lo; ++j) general(j);
  if (same_type && lo < hi) {
    // Inside the volume with one dtype: a strided element copy (bit-exact either way).
    int64_t off0, doff;
    row_source(t, n, first, step, &off0, &doff);
    for (int64_t c = 0; c < t.channels; ++c)
      copy_elements(t, off0 + c * t.in_stride[1], doff,
                    out_base + c * t.out_stride[1] + ow0 * t.out_stride[4], lo, hi);
  } else {
    for (int64_t j = lo; j < hi; ++j) general(j);
  }
  for (int64_t j = hi; j < cnt; ++j) general(j);
}

// The post steps (ResampleTarget::post) over `cnt` stored values of their target at `o`
// (the output dtype is Acc's, contiguous), step by step while they are in L1: each step the
// chain's per-element function, one loop per op so that each vectorises.
template <class Acc>
VOXAUG_FORCEINLINE void post_span(const ResampleForward<Acc>& f,
                                  const typename ResampleForward<Acc>::State& st, Acc* o,
                                  int64_t cnt) {
  for (int k = 0; k < f.p.num_post; ++k) {
    const KStep& s = f.p.post[k];
    const Resolved<Acc> r = st.post[k];
    if (!r.active) continue;
    Acc unused = Acc(1);
    switch (static_cast<PointwiseOp>(s.op)) {
      case PointwiseOp::ScaleIntensityRange:
        for (int64_t j = 0; j < cnt; ++j) op_scale_intensity_range<false>(s.flags, r, o[j], unused);
        break;
      case PointwiseOp::ShiftIntensity: {  // op_shift_intensity, written out so it vectorises
        const Acc v = r.p0;
        for (int64_t j = 0; j < cnt; ++j) o[j] = fadd(o[j], v);
        break;
      }
      case PointwiseOp::ScaleIntensity: {  // op_scale_intensity
        const Acc v = r.p0;
        for (int64_t j = 0; j < cnt; ++j) o[j] = fmul(o[j], v);
        break;
      }
      default:
        for (int64_t j = 0; j < cnt; ++j) o[j] = f.post_value(st, k, o[j]);
        break;
    }
  }
}

// The post steps over one finished output row (channel c) of their target: each value read
// back in the output dtype, as a separate chain pass would read it.
template <class Acc>
VOXAUG_FORCEINLINE void post_row_channel(const ResampleForward<Acc>& f,
                                         const typename ResampleForward<Acc>::State& st, int64_t n,
                                         int64_t c, int64_t od, int64_t oh, int64_t ow0,
                                         int64_t cnt) {
  const KTarget& t = f.p.t[f.p.post_target];
  const DType native = native_dtype<Acc>();
  const int64_t base = n * t.out_stride[0] + c * t.out_stride[1] + od * t.out_stride[2] +
                       oh * t.out_stride[3] + ow0 * t.out_stride[4];
  if (t.out_dtype == native && t.out_stride[4] == 1) {
    post_span(f, st, static_cast<Acc*>(t.out) + base, cnt);
    return;
  }
  for (int64_t j = 0; j < cnt; ++j) {
    const int64_t o = base + j * t.out_stride[4];
    Acc x = load_dyn<Acc>(t.out, t.out_dtype, o);
    for (int k = 0; k < f.p.num_post; ++k) x = f.post_value(st, k, x);
    store_dyn<Acc>(t.out, t.out_dtype, o, x);
  }
}

template <class Acc>
VOXAUG_FORCEINLINE void post_row(const ResampleForward<Acc>& f,
                                 const typename ResampleForward<Acc>::State& st, int64_t n,
                                 int64_t od, int64_t oh, int64_t ow0, int64_t cnt) {
  for (int64_t c = 0; c < f.p.t[f.p.post_target].channels; ++c)
    post_row_channel(f, st, n, c, od, oh, ow0, cnt);
}

// The post steps over items [begin, end) of sample n in plain (d, h, w) order, once they are
// all stored: one span per channel when the target's output is dense in (D, H, W) with Acc's
// dtype (a host task's 2048 values stay in L1), else row by row.
template <class Acc>
VOXAUG_FORCEINLINE void post_items(const ResampleForward<Acc>& f,
                                   const typename ResampleForward<Acc>::State& st, int64_t n,
                                   int64_t begin, int64_t end) {
  const KTarget& t = f.p.t[f.p.post_target];
  const int64_t H = f.p.out_size[1], W = f.p.out_size[2];
  const DType native = native_dtype<Acc>();
  if (t.out_dtype == native && t.out_stride[4] == 1 && t.out_stride[3] == W &&
      t.out_stride[2] == H * W) {
    for (int64_t c = 0; c < t.channels; ++c)
      post_span(f, st, static_cast<Acc*>(t.out) + n * t.out_stride[0] + c * t.out_stride[1] + begin,
                end - begin);
    return;
  }
  for (int64_t i = begin; i < end;) {
    const int64_t od = i / (H * W), oh = (i / W) % H, ow = i % W;
    const int64_t cnt = std::min(W - ow, end - i);
    post_row(f, st, n, od, oh, ow, cnt);
    i += cnt;
  }
}

// Items [begin, end) of an exact sample, rows in (d, h) order (or (h, d): see below) with no
// per-row division or float math: the map's integer coefficients give each row's first source
// index and step.
// Returns false (nothing written) when some coordinate of the output box would reach 2^22,
// where the per-row path decides row by row. The rows are those exact_row copies.
template <class Acc>
VOXAUG_FORCEINLINE bool exact_items(const ResampleForward<Acc>& f,
                                    const typename ResampleForward<Acc>::State& st, int64_t n,
                                    int64_t begin, int64_t end) {
  const ResampleParams& p = f.p;
  const int64_t H = p.out_size[1], W = p.out_size[2];
  const double* m = p.matrices + 12 * n;
  if (static_cast<double>(W) >= kExactBound) return false;
  int64_t coef[3][4];
  for (int a = 0; a < 3; ++a) {
    // The largest |coordinate| over the box is at a corner (the map is affine).
    double most = std::fabs(m[4 * a + 3]);
    for (int c = 0; c < 3; ++c) {
      const double size = static_cast<double>(p.out_size[c] - 1);
      most += std::fabs(m[4 * a + c]) * size;
      coef[a][c] = static_cast<int64_t>(m[4 * a + c]);
    }
    if (!(most < kExactBound)) return false;
    coef[a][3] = static_cast<int64_t>(m[4 * a + 3]);
  }
  // Per target: whether an inside row is a plain element copy (nearest, or one dtype); the
  // smallest input size per axis over the targets (a row inside it is inside every target).
  bool plain_copy[kMaxResampleTargets];
  int64_t in_size_min[3] = {INT64_MAX, INT64_MAX, INT64_MAX};
  for (int k = 0; k < p.num_targets; ++k) {
    const KTarget& t = p.t[k];
    plain_copy[k] = static_cast<Interp>(t.mode) == Interp::Nearest || t.in_dtype == t.out_dtype;
    for (int a = 0; a < 3; ++a) {
      if (static_cast<double>(t.in_size[a]) >= kExactBound) return false;
      in_size_min[a] = std::min(in_size_min[a], t.in_size[a]);
    }
  }
  // Streaming pays off for whole cache lines only: output rows whose bytes are not a multiple
  // of 64 (181 float32 voxels: 724 B) share their end lines with the next row, which streamed
  // and ordinary stores then write in turn. An identity copy of a 181x217x181 float32 volume
  // took 11-13 ms streamed against 1.7-3.3 ms through the cache on the Intel VM (torch's clone
  // 1.8 ms); rows of 96 float32 (384 B) stream whole lines and gain (session 15).
  int64_t sample_bytes = 0;
  bool whole_lines = true;
  for (int k = 0; k < p.num_targets; ++k) {
    const KTarget& t = p.t[k];
    const int64_t es = dtype_size(t.out_dtype);
    sample_bytes += t.channels * p.out_size[0] * H * W * es;
    whole_lines = whole_lines && (W * es) % 64 == 0 && (t.out_stride[3] * es) % 64 == 0 &&
                  reinterpret_cast<uintptr_t>(t.out) % 64 == 0;
  }
  const bool stream = sample_bytes >= kStreamOutputBytes && whole_lines;
  const int post = p.post_target;
  // A float32 post target whose steps are shifts and scales streams its contiguous rows
  // through stream_post_row_f32 (stepped in registers); others copy with plain stores and step
  // in L1 (below).
  AffinePost apost;
  bool affine_post = false;
  if constexpr (std::is_same_v<Acc, float>) {
    affine_post = stream && post >= 0 && p.t[post].in_dtype == DType::Float32 &&
                  p.t[post].out_dtype == DType::Float32;
    for (int k = 0; k < p.num_post && affine_post; ++k) {
      if (!st.post[k].active) continue;
      const auto op = static_cast<PointwiseOp>(p.post[k].op);
      affine_post = op == PointwiseOp::ShiftIntensity || op == PointwiseOp::ScaleIntensity;
      apost.mul[apost.n] = op == PointwiseOp::ScaleIntensity;
      apost.v[apost.n++] = st.post[k].p0;
    }
  }
  // Row order. Plain (d, h) order unless the output's d axis walks the input's w axis (a
  // quarter turn in the (d, w) plane): then consecutive planes read neighbouring elements of
  // the same input lines, a plane's rows touch one line per voxel (far more than L2 holds),
  // and items run h-major ((h, d) order: item (oh D + od) W + ow), so the rows that share
  // those lines follow each other. Each output row is still written whole and once.
  int64_t last_src[kMaxResampleTargets];  // the previous row's first source element, per target
  std::fill(last_src, last_src + kMaxResampleTargets, std::numeric_limits<int64_t>::min());
  const int64_t D = p.out_size[0];
  // The same holds for an input whose memory runs along the axis the output's d walks (a
  // Fortran-ordered volume, nibabel's layout, under an identity or a flip): by memory step, rows
  // go h-major when their elements are gathered and a step of d moves less than a step of h
  // (the ch2 volume's identity copy: 20 -> 3.7 ms on the Intel VM).
  const KTarget& t0 = p.t[0];
  const auto mem_step = [&](int c) {
    int64_t s = 0;
    for (int a = 0; a < 3; ++a) s += coef[a][c] * t0.in_stride[a + 2];
    return s < 0 ? -s : s;
  };
  const bool h_major = mem_step(2) != 1 && mem_step(0) < mem_step(1);
  const int64_t inner_rows = h_major ? D : H;  // rows per step of the outer axis
  int64_t outer = begin / (inner_rows * W);
  int64_t inner = (begin - outer * inner_rows * W) / W;
  int64_t ow = begin - (outer * inner_rows + inner) * W;
  for (int64_t i = begin; i < end;) {
    const int64_t od = h_major ? inner : outer, oh = h_major ? outer : inner;
    const int64_t cnt = std::min(W - ow, end - i);
    int64_t first[3], step[3];
    for (int a = 0; a < 3; ++a) {
      first[a] = coef[a][0] * od + coef[a][1] * oh + coef[a][2] * ow + coef[a][3];
      step[a] = coef[a][2];
    }
    // Rows inside the volume with one dtype per target (the common case: a crop with flips):
    // a copy straight from the computed offsets; others take exact_row_int's general path.
    bool inside = true;
    for (int a = 0; a < 3 && inside; ++a) {
      const int64_t last = first[a] + (cnt - 1) * step[a];
      inside = first[a] >= 0 && last >= 0 && first[a] < in_size_min[a] && last < in_size_min[a];
    }
    for (int k = 0; k < p.num_targets; ++k) {
      const KTarget& t = p.t[k];
      if (!inside || !plain_copy[k]) {
        exact_row_int(p, t, first, step, n, od, oh, ow, cnt);
        continue;
      }
      int64_t off0, doff;
      row_source(t, n, first, step, &off0, &doff);
      const int64_t dst0 =
          n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3] + ow * t.out_stride[4];
      // Rows into a contiguous output row are streamed: along the source (contiguous), against
      // it (reversed: a flip of that axis) or across its lines (a quarter turn: gathered).
      // The post target's contiguous float32 rows under shifts and scales stream too, stepped
      // in registers (stream_post_row_f32: 4 x 96^3 float32 + uint8 crops with a shift, 1.9 ->
      // 1.1 ms on the AMD EPYC VM, session 15). Its other rows are copied with plain stores and
      // stepped in place while in L1: stepping them in an L1 buffer and streaming that out was
      // slower (session 14: 2.8-3.0 -> 1.7-1.9 ms for the BTCV batch; 2 x 200x200x150 31-33 ->
      // 22-23 ms; quarter turns 3.8 -> 2.2 ms; flips unchanged).
      const bool dense = t.out_stride[4] == 1;
      const bool contiguous = doff == 1 && dense;
      const bool reversed = doff == -1 && dense;
      if (stream && (contiguous || reversed)) {
        // Stride prefetch: the source rows kRowPrefetchAhead rows on, predicted from this
        // row's step from the last, where rows walk downwards in memory (upward steps of up to
        // a few rows the hardware follows).
        const int64_t delta = off0 - last_src[k];
        const bool known = last_src[k] != std::numeric_limits<int64_t>::min();
        last_src[k] = off0;
        if (known && (delta < 0 || delta > 4 * cnt)) {
          const int64_t lo_elem = doff == 1 ? off0 : off0 - (cnt - 1);
          const int64_t ahead = lo_elem + kRowPrefetchAhead * delta;
          for (int64_t c = 0; c < t.channels; ++c)
            prefetch_bytes(
                static_cast<const char*>(t.in) + (ahead + c * t.in_stride[1]) * t.elem_size,
                cnt * t.elem_size);
        }
      }
      for (int64_t c = 0; c < t.channels; ++c) {
        const int64_t src = off0 + c * t.in_stride[1], dst = dst0 + c * t.out_stride[1];
        if (stream && contiguous && k != post) {
          stream_copy_row(static_cast<char*>(t.out) + dst * t.elem_size,
                          static_cast<const char*>(t.in) + src * t.elem_size, cnt * t.elem_size);
          continue;
        }
        if (contiguous && k == post && affine_post) {
          stream_post_row_f32(static_cast<float*>(t.out) + dst,
                              static_cast<const float*>(t.in) + src, cnt, apost);
          continue;
        }
        if (stream && reversed && k != post) {
          reverse_stream_bytes(static_cast<char*>(t.out) + dst * t.elem_size,
                               static_cast<const char*>(t.in) + src * t.elem_size, cnt,
                               t.elem_size);
          continue;
        }
        if (stream && dense && k != post) {
          gather_stream_bytes(static_cast<char*>(t.out) + dst * t.elem_size,
                              static_cast<const char*>(t.in) + src * t.elem_size, doff, cnt,
                              t.elem_size);
          continue;
        }
        copy_elements(t, src, doff, dst, 0, cnt);
        if (stream && k == post) post_row_channel(f, st, n, c, od, oh, ow, cnt);
      }
    }
    // Streaming: rows the fast copy did not take get their post steps here, row by row; in
    // h-major order every row does (post_items walks plain order).
    if (post >= 0 && (stream ? !(inside && plain_copy[post]) : h_major))
      post_row(f, st, n, od, oh, ow, cnt);
    i += cnt;
    ow += cnt;
    if (ow == W) {
      ow = 0;
      if (++inner == inner_rows) {
        inner = 0;
        ++outer;
      }
    }
  }
  if (stream) {
    stream_fence();
  } else if (post >= 0 && !h_major) {
    post_items(f, st, n, begin, end);
  }
  return true;
}

template <class Acc>
VOXAUG_FORCEINLINE void resample_items(const ResampleForward<Acc>& f,
                                       typename ResampleForward<Acc>::State& st, int64_t n,
                                       int64_t begin, int64_t end) {
  if (st.exact && exact_items(f, st, n, begin, end)) return;
  const int64_t W = f.p.out_size[2], H = f.p.out_size[1], D = f.p.out_size[0];
  RowCoords<Acc> rc;
  BSplineRowTaps<Acc> taps;
  // Items run in blocks of row_block output rows along h, every d inside a block (item i ->
  // block b, then d, then the row within the block): rows neighbouring in d are computed a
  // few rows apart instead of a whole plane apart, so a rotated map reuses its input lines
  // from cache. Every voxel is still computed once, by the same arithmetic.
  // Exact maps (signed permutations: whole input lines copied) keep the plain (d, h) order,
  // so the output is written sequentially.
  const int64_t row_block = st.exact ? std::max<int64_t>(H, 1) : 16;
  const int64_t block_items = row_block * D * W;
  int64_t i = begin;
  while (i < end) {
    const int64_t b = i / block_items, within = i - b * block_items;
    const int64_t rows = std::min(row_block, H - b * row_block);
    const int64_t r = within / W, ow = within - r * W;
    const int64_t od = r / rows, oh = b * row_block + (r - od * rows);
    const int cnt = static_cast<int>(std::min({W - ow, end - i, kResampleRow}));
    bool have_coords = false;
    for (int k = 0; k < f.p.num_targets; ++k) {
      const KTarget& t = f.p.t[k];
      if (st.exact && exact_row(f.p, t, f.p.matrices + 12 * n, n, od, oh, ow, cnt)) continue;
      if (!have_coords) {  // once per row, shared by the targets
        if (static_cast<FieldKind>(f.p.field.kind) == FieldKind::None)
          row_coords(st.m, od, oh, ow, cnt, rc);
        else
          row_coords_deformed(f.p.field, st.m, n, od, oh, ow, cnt, rc, taps);
        have_coords = true;
      }
      if (!st.exact && static_cast<Interp>(t.mode) == Interp::Nearest &&
          static_cast<Padding>(t.padding) != Padding::Cutoff) {
        nearest_row(f.p, t, rc, n, od, oh, ow, cnt);
        continue;
      }
      if (st.exact || !linear_row_dispatch(f.p, t, rc, n, od, oh, ow, cnt)) {
        for (int j = 0; j < cnt; ++j) {  // per-voxel path: nearest, cubic, exact copies, casts
          const Acc src[3] = {rc.x[0][j], rc.x[1][j], rc.x[2][j]};
          f.gather(t, n, od, oh, ow + j, src, st.exact);
        }
      }
    }
    if (f.p.post_target >= 0) post_row(f, st, n, od, oh, ow, cnt);
    i += cnt;
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
template <class Acc>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void resample_items_avx512(
    const ResampleForward<Acc>& f, typename ResampleForward<Acc>::State& st, int64_t n, int64_t b,
    int64_t e) {
  resample_items(f, st, n, b, e);
}
template <class Acc>
__attribute__((target("avx2"))) void resample_items_avx2(const ResampleForward<Acc>& f,
                                                         typename ResampleForward<Acc>::State& st,
                                                         int64_t n, int64_t b, int64_t e) {
  resample_items(f, st, n, b, e);
}
#endif

// The host launcher's hook (launch_cpu.h), found by argument-dependent lookup.
template <class Acc>
void cpu_items(const ResampleForward<Acc>& f, typename ResampleForward<Acc>::State& st, int64_t n,
               int64_t begin, int64_t end) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return resample_items_avx512(f, st, n, begin, end);
  if (avx2) return resample_items_avx2(f, st, n, begin, end);
#endif
  resample_items(f, st, n, begin, end);
}

}  // namespace voxaug::detail
