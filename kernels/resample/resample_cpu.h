// voxaug: host loops of the resample gather. Same per-voxel math as the device
// (ResampleForward::voxel and detail/resample.h), organised for the CPU:
// - rows of output voxels are processed step-major (coordinates for the whole row, then
//   weights, then each corner's contribution), so the compiler vectorises every step;
// - chunks walk (d, h, w) incrementally instead of dividing every item index.
// Each voxel still sees exactly the device's sequence of IEEE operations, so the results are
// bit-identical to the CUDA path.
#pragma once

#include <algorithm>
#include <cstdint>

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

constexpr int64_t kResampleRow = 256;

// Per-axis row tables of the linear row path: for corner bit b of axis a, the voxel offset
// (times the stride), the weight, and whether the voxel is inside.
template <class Acc>
struct RowTables {
  alignas(64) int32_t off[3][2][kResampleRow];
  alignas(64) Acc wt[3][2][kResampleRow];
  alignas(64) int32_t ok[3][2][kResampleRow];
};

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The 8-corner accumulation of a float32 row with AVX-512 masked gathers, 16 voxels at a
// time. Same operations per voxel as the scalar loop: w = (wd * wh) * ww, then
// acc = acc + w * v corner by corner (no FMA), so the results are identical.
__attribute__((target("avx512f"))) inline void corners_f32_avx512(const RowTables<float>& tb,
                                                                  const float* src, int cnt,
                                                                  float fill, float* dst,
                                                                  int64_t dst_stride) {
  const __m512 fillv = _mm512_set1_ps(fill);
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
#endif

// Linear gather of target t for output voxels (n, od, oh, ow0 .. ow0 + cnt): the row path.
// Offsets are 32-bit (the dispatcher checks that the volume fits).
template <class Acc, class T>
VOXAUG_FORCEINLINE void linear_row(const ResampleParams& p, const KTarget& t, const Acc m[12],
                                   int64_t n, int64_t od, int64_t oh, int64_t ow0, int cnt) {
  alignas(64) Acc x[kResampleRow];
  RowTables<Acc> tb;
  auto& off = tb.off;
  auto& wt = tb.wt;
  auto& ok = tb.ok;
  const Padding pad = static_cast<Padding>(t.padding);
  for (int a = 0; a < 3; ++a) {
    const Acc* row = m + 4 * a;
    const Acc base = fadd(fmul(row[0], static_cast<Acc>(od)), fmul(row[1], static_cast<Acc>(oh)));
    const Acc bound = static_cast<Acc>(kCoordinateBound);
    for (int j = 0; j < cnt; ++j) {
      // Same sequence as source_coordinate: ((m0 d + m1 h) + m2 w) + m3.
      const Acc src = fadd(fadd(base, fmul(row[2], static_cast<Acc>(ow0 + j))), row[3]);
      x[j] = src < -bound ? -bound : (src > bound ? bound : src);
    }
    if (pad != Padding::Zeros && pad != Padding::Constant) {
      Acc unused;
      for (int j = 0; j < cnt; ++j)
        x[j] = pad_coordinate(x[j], t.in_size[a], pad, p.align_corners, &unused);
    }
    const int32_t size = static_cast<int32_t>(t.in_size[a]);
    const int32_t stride = static_cast<int32_t>(t.in_stride[a + 2]);
    for (int j = 0; j < cnt; ++j) {
      const Acc xj = x[j] != x[j] ? Acc(-2) : x[j];  // NaN: outside, as on the device
      const Acc f = floor(xj);
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
  const Acc fill = pad == Padding::Constant ? static_cast<Acc>(t.pad_value) : Acc(0);
  const int64_t out_base = n * t.out_stride[0] + od * t.out_stride[2] + oh * t.out_stride[3];
  for (int64_t c = 0; c < t.channels; ++c) {
    const T* src = in + n * t.in_stride[0] + c * t.in_stride[1];
    T* dst = out + out_base + c * t.out_stride[1];
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
      if (cpu_has_avx512()) {
        corners_f32_avx512(tb, src, cnt, fill, dst + ow0 * t.out_stride[4], t.out_stride[4]);
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
                                            const Acc m[12], int64_t n, int64_t od, int64_t oh,
                                            int64_t ow0, int cnt) {
  if (static_cast<Interp>(t.mode) != Interp::Linear || t.in_dtype != t.out_dtype) return false;
  // 32-bit offsets within one (n, c) volume.
  int64_t span = 1;
  for (int a = 0; a < 3; ++a)
    span +=
        (t.in_size[a] + 1) * (t.in_stride[a + 2] < 0 ? -t.in_stride[a + 2] : t.in_stride[a + 2]);
  if (span >= (int64_t(1) << 31)) return false;
  switch (t.in_dtype) {
    case DType::Float32:
      if (!std::is_same_v<Acc, float>) return false;
      linear_row<Acc, float>(p, t, m, n, od, oh, ow0, cnt);
      return true;
    case DType::Float64:
      if (!std::is_same_v<Acc, double>) return false;
      linear_row<Acc, double>(p, t, m, n, od, oh, ow0, cnt);
      return true;
    default: return false;
  }
}

template <class Acc>
VOXAUG_FORCEINLINE void resample_items(const ResampleForward<Acc>& f,
                                       typename ResampleForward<Acc>::State& st, int64_t n,
                                       int64_t begin, int64_t end) {
  const int64_t W = f.p.out_size[2], H = f.p.out_size[1];
  int64_t i = begin;
  while (i < end) {
    const int64_t ow = i % W, oh = (i / W) % H, od = i / (W * H);
    const int cnt = static_cast<int>(std::min({W - ow, end - i, kResampleRow}));
    for (int k = 0; k < f.p.num_targets; ++k) {
      const KTarget& t = f.p.t[k];
      if (st.exact || !linear_row_dispatch(f.p, t, st.m, n, od, oh, ow, cnt)) {
        for (int j = 0; j < cnt; ++j) {  // per-voxel path: nearest, cubic, exact copies, casts
          Acc src[3];
          source_coordinate(st.m, od, oh, ow + j, src);
          f.gather(t, n, od, oh, ow + j, src, st.exact);
        }
      }
    }
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
