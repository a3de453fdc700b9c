// voxaug: functors of the deform family (dense field output, Philox uniform fill) and the
// field validation shared with resample_deformed. Used by both backends.
#pragma once

#include <cstdint>

#include "voxaug/deform.h"
#include "voxaug/detail/deform.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/philox.h"
#include "voxaug/detail/resample.h"

namespace voxaug::detail {

// Validates `field` for a launch of `batch` samples with output size out_size on `device`,
// and packs it. Kind None packs an empty field.
KField pack_field(const DeformField& field, int64_t batch, const int64_t out_size[3], Device device,
                  int device_index);

#if VOXAUG_WITH_CUDA
// CUDA: builds the per-row table of B-spline field `f` for an output of rows_d x rows_h rows
// (BSplineRowsForward) in a stream-ordered allocation and returns its kBSplineRowsKind view;
// the caller frees *workspace with cudaFreeAsync on `stream` after the launch that reads it.
KField bspline_rows_cuda(const KField& f, int64_t batch, int64_t rows_d, int64_t rows_h,
                         bool use_double, cudaStream_t stream, void** workspace);
#endif

// One item = one output voxel: writes u(x) to out (N, 3, D', H', W'). RawBSpline false: the
// CUDA launch's variant, whose B-spline fields arrive as pre-contracted rows.
template <class Acc, bool RawBSpline = true>
struct FieldDenseForward {
  KField f;
  void* out;
  DType out_dtype;
  int64_t out_size[3];
  int64_t out_stride[5];
  struct State {};
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const {
    return out_size[0] * out_size[1] * out_size[2];
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void store(int64_t n, int64_t od, int64_t oh, int64_t ow,
                                          const Acc u[3]) const {
    const int64_t o =
        n * out_stride[0] + od * out_stride[2] + oh * out_stride[3] + ow * out_stride[4];
    for (int c = 0; c < 3; ++c) store_dyn<Acc>(out, out_dtype, o + c * out_stride[1], u[c]);
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t item) const {
    const int64_t ow = item % out_size[2], rest = item / out_size[2];
    const int64_t oh = rest % out_size[1], od = rest / out_size[1];
    Acc u[3];
    field_displacement<Acc, RawBSpline>(f, n, od, oh, ow, u);
    store(n, od, oh, ow, u);
  }
};

// One item = 4 consecutive elements of one sample (one Philox block).
struct UniformFillForward {
  void* out;
  DType dtype;
  int64_t shape[4];   // C, D, H, W of one sample
  int64_t stride[5];  // N, C, D, H, W
  double low, high;
  uint64_t seed;
  uint32_t first_sample;
  struct State {};
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const {
    return (shape[0] * shape[1] * shape[2] * shape[3] + 3) / 4;
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t, State&) const {}
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State&, int64_t n, int64_t block) const {
    const U32x4 r = philox_block(seed, static_cast<uint64_t>(block),
                                 first_sample + static_cast<uint32_t>(n), PhiloxStream::Element);
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
    const int64_t total = shape[0] * shape[1] * shape[2] * shape[3];
    for (int k = 0; k < 4; ++k) {
      const int64_t e = 4 * block + k;
      if (e >= total) return;
      int64_t rest = e;
      const int64_t w = rest % shape[3];
      rest /= shape[3];
      const int64_t h = rest % shape[2];
      rest /= shape[2];
      const int64_t d = rest % shape[1];
      const int64_t c = rest / shape[1];
      const int64_t off =
          n * stride[0] + c * stride[1] + d * stride[2] + h * stride[3] + w * stride[4];
      // low + (high - low) * u in float64, u the exact 24-bit uniform.
      const double v = fadd(low, fmul(fsub(high, low), static_cast<double>(uniform01(words[k]))));
      store_dyn<double>(out, dtype, off, v);
    }
  }
};

}  // namespace voxaug::detail
