// voxaug: per-voxel math of deformation fields (include/voxaug/deform.h), shared by the
// OpenMP and CUDA backends. The CPU row path (kernels/resample/resample_cpu.h) reorganises the
// B-spline sum per row but performs, for every voxel, exactly the operations listed here, in
// this order, so both backends give bit-identical displacements.
#pragma once

#include <cmath>
#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/deform.h"
#include "voxaug/detail/bspline.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"

namespace voxaug::detail {

// Internal field kind (not a FieldKind a caller passes): a B-spline field whose d and h taps
// were contracted beforehand into per-row lines, table[n][c][od][oh][kw] = bspline_line(...)
// (0 for rows outside the d / h domain); size / scale / offset / sample_map stay those of the
// control grid (the w taps are evaluated per voxel). The CUDA path builds the table once per
// launch so each voxel reads 4 values per component instead of 64 (BSplineRowsForward).
constexpr int32_t kBSplineRowsKind = 100;

// A field as it travels to the kernel.
struct KField {
  int32_t kind;  // FieldKind
  DType dtype;
  const void* data;
  int64_t size[3];    // Kd, Kh, Kw (BSpline) / D', H', W' (Dense) / L, 1, 1 (Separable)
  int64_t stride[5];  // N, component, then the three grid axes (elements)
  double scale[3], offset[3];
  const double* sample_map;  // optional N x 6 (scale d, h, w, offset d, h, w) per sample
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc field_load(const KField& f, int64_t off) {
  return f.dtype == DType::Float64 ? static_cast<Acc>(static_cast<const double*>(f.data)[off])
                                   : static_cast<Acc>(static_cast<const float*>(f.data)[off]);
}

// One axis of a B-spline field at output index o: the first control index of the 4 taps and
// their weights; false where o lies outside the field's domain [1, K - 2].
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE bool bspline_axis(const KField& f, int64_t n, int a, int64_t o,
                                               int64_t* first, Acc w[4]) {
  const double sc = f.sample_map ? f.sample_map[6 * n + a] : f.scale[a];
  const double off = f.sample_map ? f.sample_map[6 * n + 3 + a] : f.offset[a];
  const Acc g = fadd(fmul(static_cast<Acc>(sc), static_cast<Acc>(o)), static_cast<Acc>(off));
  const int64_t k = f.size[a];
  if (!(g >= Acc(1) && g <= static_cast<Acc>(k - 2))) return false;  // NaN: outside too
  int64_t i = static_cast<int64_t>(floor(g));
  if (i > k - 3) i = k - 3;  // g == K - 2: the last cell at t = 1
  bspline_weights(fsub(g, static_cast<Acc>(i)), w);
  *first = i - 1;
  return true;
}

// Component c of a B-spline field from the taps of the three axes. Order (shared with the
// row path): for each w tap k, line_k = sum_a wd[a] * (sum_b wh[b] * coeff[a][b][k]);
// value = sum_k ww[k] * line_k.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Acc bspline_line(const KField& f, int64_t n, int c, int64_t fd,
                                              int64_t fh, int64_t kw, const Acc wd[4],
                                              const Acc wh[4]) {
  const int64_t base =
      n * f.stride[0] + c * f.stride[1] + fd * f.stride[2] + fh * f.stride[3] + kw * f.stride[4];
  Acc line = Acc(0);
  for (int a = 0; a < 4; ++a) {
    Acc plane = Acc(0);
    for (int b = 0; b < 4; ++b)
      plane =
          fadd(plane, fmul(wh[b], field_load<Acc>(f, base + a * f.stride[2] + b * f.stride[3])));
    line = fadd(line, fmul(wd[a], plane));
  }
  return line;
}

// The displacement u(x) (output voxel units) at output voxel (od, oh, ow) of sample n.
// RawBSpline false: without the 64-tap B-spline case (the CUDA launches contract it to rows
// first, kBSplineRowsKind; a raw B-spline field then gives no displacement -- the callers'
// dispatch never lets one through).
template <class Acc, bool RawBSpline = true>
VOXAUG_HD VOXAUG_FORCEINLINE void field_displacement(const KField& f, int64_t n, int64_t od,
                                                     int64_t oh, int64_t ow, Acc u[3]) {
  u[0] = u[1] = u[2] = Acc(0);
  switch (f.kind) {  // an int: kBSplineRowsKind is not a FieldKind
    case static_cast<int32_t>(FieldKind::BSpline): {
      if constexpr (!RawBSpline) return;
      Acc wd[4], wh[4], ww[4];
      int64_t fd, fh, fw;
      if (!bspline_axis(f, n, 0, od, &fd, wd) || !bspline_axis(f, n, 1, oh, &fh, wh) ||
          !bspline_axis(f, n, 2, ow, &fw, ww))
        return;
      for (int c = 0; c < 3; ++c) {
        Acc v = Acc(0);
        for (int k = 0; k < 4; ++k)
          v = fadd(v, fmul(ww[k], bspline_line(f, n, c, fd, fh, fw + k, wd, wh)));
        u[c] = v;
      }
      return;
    }
    case kBSplineRowsKind: {
      Acc ww[4];
      int64_t fw;
      if (!bspline_axis(f, n, 2, ow, &fw, ww)) return;
      const int64_t base = n * f.stride[0] + od * f.stride[2] + oh * f.stride[3];
      for (int c = 0; c < 3; ++c) {
        Acc v = Acc(0);
        for (int k = 0; k < 4; ++k)
          v = fadd(
              v, fmul(ww[k], field_load<Acc>(f, base + c * f.stride[1] + (fw + k) * f.stride[4])));
        u[c] = v;
      }
      return;
    }
    case static_cast<int32_t>(FieldKind::Dense): {
      const int64_t off = n * f.stride[0] + od * f.stride[2] + oh * f.stride[3] + ow * f.stride[4];
      for (int c = 0; c < 3; ++c) u[c] = field_load<Acc>(f, off + c * f.stride[1]);
      return;
    }
    case static_cast<int32_t>(FieldKind::Separable): {
      const int64_t o[3] = {od, oh, ow};
      for (int c = 0; c < 3; ++c)
        u[c] = field_load<Acc>(f, n * f.stride[0] + c * f.stride[1] + o[c] * f.stride[2]);
      return;
    }
    default: return;
  }
}

// One item = one (od, oh, kw) of sample n: the three components' lines of a B-spline field
// for output row (od, oh), written to `table` (Acc, dense (N, 3, D', H', Kw)).
template <class Acc>
struct BSplineRowsForward {
  KField f;  // the control grid (kind BSpline)
  Acc* table;
  int64_t rows_d, rows_h;  // D', H'
  struct State {};
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const { return rows_d * rows_h * f.size[2]; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t item) const {
    const int64_t kw = item % f.size[2], row = item / f.size[2];
    const int64_t oh = row % rows_h, od = row / rows_h;
    Acc wd[4], wh[4];
    int64_t fd, fh;
    const bool inside = bspline_axis(f, n, 0, od, &fd, wd) && bspline_axis(f, n, 1, oh, &fh, wh);
    const int64_t plane = rows_d * rows_h * f.size[2];
    for (int c = 0; c < 3; ++c)
      table[(n * 3 + c) * plane + item] =
          inside ? bspline_line(f, n, c, fd, fh, kw, wd, wh) : Acc(0);
  }
};

// The kind-kBSplineRows view of `table` for control grid f (see BSplineRowsForward).
inline KField bspline_rows_field(const KField& f, const void* table, bool use_double,
                                 int64_t rows_d, int64_t rows_h) {
  KField r = f;
  r.kind = kBSplineRowsKind;
  r.dtype = use_double ? DType::Float64 : DType::Float32;
  r.data = table;
  r.stride[4] = 1;
  r.stride[3] = f.size[2];
  r.stride[2] = rows_h * f.size[2];
  r.stride[1] = rows_d * rows_h * f.size[2];
  r.stride[0] = 3 * r.stride[1];
  return r;
}

// Source coordinate of the displaced point p = o + u: src = M [p; 1] in the order of
// source_coordinate (detail/resample.h), so u == 0 reproduces it bit for bit.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void displaced_source(const Acc m[12], const Acc p[3], Acc src[3]) {
  for (int r = 0; r < 3; ++r) {
    const Acc* row = m + 4 * r;
    src[r] = fadd(fadd(fadd(fmul(row[0], p[0]), fmul(row[1], p[1])), fmul(row[2], p[2])), row[3]);
  }
}

}  // namespace voxaug::detail
