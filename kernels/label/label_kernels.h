// voxaug: the connected-components rules shared by the CPU and CUDA backends: what a foreground
// voxel is, which neighbours precede a voxel in C-order for a connectivity, and the union-find
// invariant (a parent index is never larger than its child's, so every root is its component's
// smallest index).
#pragma once

#include <cstdint>
#include <limits>

#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/types.h"

namespace voxaug::detail {

struct LabelParams {
  const void* mask;
  DType dtype;
  int64_t mask_stride[5];  // N, C, D, H, W (elements)
  int64_t channels;
  int64_t size[3];  // D, H, W
  int64_t volume;   // D * H * W
  int connectivity;
  // The neighbours that precede a voxel in C-order: offsets (dd, dh, dw), at most 13.
  int num_offsets;
  int8_t offsets[13][3];
};

// Fills the backward neighbour offsets of `connectivity` (1, 2 or 3 orthogonal hops).
inline void label_offsets(LabelParams& p) {
  p.num_offsets = 0;
  for (int dd = -1; dd <= 0; ++dd)
    for (int dh = -1; dh <= 1; ++dh)
      for (int dw = -1; dw <= 1; ++dw) {
        const bool before = dd < 0 || (dd == 0 && (dh < 0 || (dh == 0 && dw < 0)));
        const int hops = (dd != 0) + (dh != 0) + (dw != 0);
        if (!before || hops > p.connectivity) continue;
        p.offsets[p.num_offsets][0] = static_cast<int8_t>(dd);
        p.offsets[p.num_offsets][1] = static_cast<int8_t>(dh);
        p.offsets[p.num_offsets][2] = static_cast<int8_t>(dw);
        ++p.num_offsets;
      }
}

// The foreground rule: nonzero, NaN too. Compared as float (a nonzero integer or half value stays
// nonzero there); float64 as itself (a tiny float64 would round to a float zero).
template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE bool label_nonzero(T v) {
  return !(load_as<float>(v) == 0.0f);
}
template <>
VOXAUG_HD VOXAUG_FORCEINLINE bool label_nonzero<double>(double v) {
  return !(v == 0.0);
}

// fn(typed pointer) to element `off` of the mask, in the mask's dtype.
template <class F>
VOXAUG_HD VOXAUG_FORCEINLINE auto with_mask(const LabelParams& p, int64_t off, F&& fn) {
  switch (p.dtype) {
    case DType::Float64: return fn(static_cast<const double*>(p.mask) + off);
    case DType::Float32: return fn(static_cast<const float*>(p.mask) + off);
    case DType::Float16: return fn(static_cast<const half_t*>(p.mask) + off);
    case DType::BFloat16: return fn(static_cast<const bfloat16_t*>(p.mask) + off);
    case DType::UInt8: return fn(static_cast<const uint8_t*>(p.mask) + off);
    case DType::Int16: return fn(static_cast<const int16_t*>(p.mask) + off);
    case DType::Int32: return fn(static_cast<const int32_t*>(p.mask) + off);
    default: return fn(static_cast<const int64_t*>(p.mask) + off);
  }
}

// Whether voxel (d, h, w) of volume `vol` (= n * C + c) is foreground (label_nonzero of the
// mask's dtype).
VOXAUG_HD VOXAUG_FORCEINLINE bool label_foreground(const LabelParams& p, int64_t vol, int64_t d,
                                                   int64_t h, int64_t w) {
  const int64_t n = vol / p.channels, c = vol % p.channels;
  const int64_t off = n * p.mask_stride[0] + c * p.mask_stride[1] + d * p.mask_stride[2] +
                      h * p.mask_stride[3] + w * p.mask_stride[4];
  return with_mask(p, off, [](const auto* m) { return label_nonzero(*m); });
}

// ---- Euclidean distance transform (scipy.ndimage.distance_transform_edt) ----
// Squared distances in float64, one axis after the other (w, then h, then d), each pass the 1-D
// lower envelope of parabolas of Felzenszwalb & Huttenlocher over one line: out[y] = min over q
// of f[q] + w * (y - q)^2, w the axis's squared spacing. The first pass starts from f = 0 on
// background and +inf on foreground (edt_row_from_mask: two scans give its result directly). CPU
// and CUDA run this same line function (the CUDA backend one thread per line, its scratch
// interleaved in a workspace), so the two agree bit for bit.

constexpr double kEdtInf = std::numeric_limits<double>::infinity();

// One candidate: f + w * k^2 (k^2 exact as an integer, then the float64 rounding of each step).
VOXAUG_HD VOXAUG_FORCEINLINE double edt_candidate(double f, double w, int64_t k) {
  return fadd(f, fmul(w, static_cast<double>(k * k)));
}

// The squared-distance transform of one line of n values (element i at f[i * fs]) into out (may
// be f itself: every value is read before any is written). Scratch: v (n), z (n + 1), fv (n),
// element i at [i * ss]. Values of +inf carry no parabola; a line of only +inf stays +inf. After
// the envelope's walk each output is the least of the chosen parabola and its two neighbours in
// the envelope, so an intersection that rounded past an integer still gives the line's minimum.
VOXAUG_HD inline void edt_line(const double* f, int64_t fs, int64_t n, double w, double* out,
                               int64_t os, int32_t* v, double* z, double* fv, int64_t ss) {
  // A line of zeros (all background) is its own transform: common, and cheap to see.
  int64_t nz = 0;
  while (nz < n && f[nz * fs] == 0.0) ++nz;
  if (nz == n) {
    if (out != f)
      for (int64_t y = 0; y < n; ++y) out[y * os] = 0.0;
    return;
  }
  int64_t k = -1;
  for (int64_t q = 0; q < n; ++q) {
    const double fq = f[q * fs];
    if (!(fq < kEdtInf)) continue;
    // Inside a run of zeros only the run's ends can be a minimum outside it (they are closer),
    // and inside it the minimum is 0 (written directly below): no parabola for the interior.
    if (fq == 0.0 && q > 0 && q + 1 < n && f[(q - 1) * fs] == 0.0 && f[(q + 1) * fs] == 0.0)
      continue;
    const double hq = edt_candidate(fq, w, q);
    double s = -kEdtInf;
    while (k >= 0) {
      const int64_t vk = v[k * ss];
      // Where the parabolas of v[k] and q meet: ((fq + w q^2) - (f_vk + w vk^2)) / (2 w (q - vk)).
      s = fdiv(fsub(hq, edt_candidate(fv[k * ss], w, vk)),
               fmul(fadd(w, w), static_cast<double>(q - vk)));
      if (s <= z[k * ss]) {
        --k;
        s = -kEdtInf;
      } else {
        break;
      }
    }
    ++k;
    v[k * ss] = static_cast<int32_t>(q);
    fv[k * ss] = fq;
    z[k * ss] = s;
  }
  if (k < 0) {
    for (int64_t y = 0; y < n; ++y) out[y * os] = kEdtInf;
    return;
  }
  z[(k + 1) * ss] = kEdtInf;
  int64_t j = 0;
  for (int64_t y = 0; y < n; ++y) {
    const double fy = f[y * fs];  // (read before out[y] is written: out may be f)
    while (z[(j + 1) * ss] < static_cast<double>(y)) ++j;
    if (fy == 0.0) {
      out[y * os] = 0.0;
      continue;
    }
    double best = edt_candidate(fv[j * ss], w, y - v[j * ss]);
    if (j > 0) {
      const double c = edt_candidate(fv[(j - 1) * ss], w, y - v[(j - 1) * ss]);
      best = c < best ? c : best;
    }
    if (j < k) {
      const double c = edt_candidate(fv[(j + 1) * ss], w, y - v[(j + 1) * ss]);
      best = c < best ? c : best;
    }
    out[y * os] = best;
  }
}

// The first pass, along w, straight from the mask: row (vol, d, h) gets w * k^2, k the distance
// to the row's nearest background voxel (+inf without one) -- edt_line's result for a row of
// 0 (background) and +inf, whose least candidate is 0 + w k^2, from two scans and no parabolas.
template <class T>
VOXAUG_HD inline void edt_row_typed(const T* row, int64_t stride, int64_t n, double w,
                                    double* out) {
  int64_t last = -1;
  for (int64_t x = 0; x < n; ++x) {
    if (!label_nonzero(row[x * stride])) {
      last = x;
      out[x] = 0.0;
    } else {
      out[x] = last < 0 ? kEdtInf : edt_candidate(0.0, w, x - last);
    }
  }
  int64_t next = -1;
  for (int64_t x = n - 1; x >= 0; --x) {
    if (out[x] == 0.0) {  // background (a foreground value is at least w > 0)
      next = x;
    } else if (next >= 0) {
      const double c = edt_candidate(0.0, w, next - x);
      out[x] = c < out[x] ? c : out[x];
    }
  }
}
VOXAUG_HD inline void edt_row_from_mask(const LabelParams& p, int64_t vol, int64_t d, int64_t h,
                                        double w, double* out) {
  const int64_t n = p.size[2], nn = vol / p.channels, c = vol % p.channels;
  const int64_t off =
      nn * p.mask_stride[0] + c * p.mask_stride[1] + d * p.mask_stride[2] + h * p.mask_stride[3];
  const int64_t sw = p.mask_stride[4];
  with_mask(p, off, [&](const auto* row) { edt_row_typed(row, sw, n, w, out); });
}

// Line r (of the volume's D * H * W / size[axis] lines along `axis`, w fastest in the others)
// of a D x H x W volume: the offset of its first voxel and its stride.
VOXAUG_HD VOXAUG_FORCEINLINE void edt_line_at(const int64_t size[3], int axis, int64_t r,
                                              int64_t& base, int64_t& stride) {
  const int64_t H = size[1], W = size[2];
  if (axis == 2) {  // r = d * H + h
    base = r * W;
    stride = 1;
  } else if (axis == 1) {  // r = d * W + x
    base = (r / W) * H * W + r % W;
    stride = W;
  } else {  // r = h * W + x
    base = r;
    stride = H * W;
  }
}

// The distance of voxel (d, h, w) from its squared distance sq; +inf means the volume has no
// background voxel, where scipy measures from the virtual voxel (-1, 0, 0) (its feature
// transform's answer there), which the same expression gives.
VOXAUG_HD VOXAUG_FORCEINLINE double edt_distance(double sq, const double w2[3], int64_t d,
                                                 int64_t h, int64_t x) {
  if (!(sq < kEdtInf))
    sq = edt_candidate(edt_candidate(fmul(w2[0], static_cast<double>((d + 1) * (d + 1))), w2[1], h),
                       w2[2], x);
  return fsqrt(sq);
}

// Threads of the CUDA line passes (each walks lines t, t + threads, ...) and the workspace they
// share with the squared distances: sq (volumes * volume doubles), then per thread z (nmax + 1),
// fv (nmax) doubles and v (nmax) int32, interleaved (element i of thread t at i * threads + t).
constexpr int64_t kEdtMaxThreads = 16384;
struct EdtLayout {
  int64_t threads, nmax, sq_elems;
  VOXAUG_HD int64_t bytes() const {
    return sq_elems * 8 + threads * ((2 * nmax + 1) * 8 + nmax * 4);
  }
};
// Thread t of a CUDA line pass along `axis` (0 d, 1 h): lines t, t + threads, ... of every
// volume, in place in sq, its scratch interleaved after sq in the same workspace.
VOXAUG_HD inline void edt_pass_thread(const int64_t size[3], int64_t volumes, int axis, double w,
                                      const EdtLayout& e, double* sq, int64_t t) {
  const int64_t T = e.threads;
  double* z = sq + e.sq_elems + t;
  double* fv = z + (e.nmax + 1) * T;
  int32_t* v = reinterpret_cast<int32_t*>(sq + e.sq_elems + (2 * e.nmax + 1) * T) + t;
  const int64_t volume = size[0] * size[1] * size[2];
  const int64_t n = size[axis], per_vol = volume / n;  // lines per volume
  for (int64_t l = t; l < volumes * per_vol; l += T) {
    int64_t base, stride;
    edt_line_at(size, axis, l % per_vol, base, stride);
    double* line = sq + (l / per_vol) * volume + base;
    edt_line(line, stride, n, w, line, stride, v, z, fv, T);
  }
}

inline EdtLayout edt_layout(int64_t volumes, const int64_t size[3]) {
  EdtLayout e;
  e.nmax = size[0] > size[1] ? (size[0] > size[2] ? size[0] : size[2])
                             : (size[1] > size[2] ? size[1] : size[2]);
  const int64_t lines =
      volumes *
      (size[0] * size[1] > size[0] * size[2]
           ? (size[0] * size[1] > size[1] * size[2] ? size[0] * size[1] : size[1] * size[2])
           : (size[0] * size[2] > size[1] * size[2] ? size[0] * size[2] : size[1] * size[2]));
  e.threads = lines < kEdtMaxThreads ? lines : kEdtMaxThreads;
  e.sq_elems = volumes * size[0] * size[1] * size[2];
  return e;
}

}  // namespace voxaug::detail
