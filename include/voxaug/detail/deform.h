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
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void field_displacement(const KField& f, int64_t n, int64_t od,
                                                     int64_t oh, int64_t ow, Acc u[3]) {
  u[0] = u[1] = u[2] = Acc(0);
  switch (static_cast<FieldKind>(f.kind)) {
    case FieldKind::BSpline: {
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
    case FieldKind::Dense: {
      const int64_t off = n * f.stride[0] + od * f.stride[2] + oh * f.stride[3] + ow * f.stride[4];
      for (int c = 0; c < 3; ++c) u[c] = field_load<Acc>(f, off + c * f.stride[1]);
      return;
    }
    case FieldKind::Separable: {
      const int64_t o[3] = {od, oh, ow};
      for (int c = 0; c < 3; ++c)
        u[c] = field_load<Acc>(f, n * f.stride[0] + c * f.stride[1] + o[c] * f.stride[2]);
      return;
    }
    default: return;
  }
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
