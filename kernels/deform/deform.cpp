// voxaug: deform family -- field validation, dense field output, Philox uniform fill (CPU
// backend and routing to CUDA). resample_deformed itself lives with resample (same gather).
#include "voxaug/deform.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "../common/device.h"
#include "../common/launch_cpu.h"
#include "../resample/resample_cpu.h"
#include "deform_kernels.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {

#if VOXAUG_WITH_CUDA
void deform_field_dense_cuda(const KField& f, const VolumeView& out, bool use_double,
                             cudaStream_t stream);
void uniform_fill_cuda(const UniformFillForward& f, int64_t batch, int device, cudaStream_t stream);
#endif

KField pack_field(const DeformField& field, int64_t batch, const int64_t out_size[3], Device device,
                  int device_index) {
  KField k{};
  k.kind = static_cast<int32_t>(field.kind);
  if (field.kind == FieldKind::None) return k;
  VOXAUG_EXPECTS(field.kind == FieldKind::BSpline || field.kind == FieldKind::Dense ||
                     field.kind == FieldKind::Separable,
                 "field.kind must be BSpline, Dense or Separable, got " +
                     std::to_string(static_cast<int>(field.kind)));
  const VolumeView& v = field.field;
  VOXAUG_EXPECTS(v.dtype == DType::Float32 || v.dtype == DType::Float64,
                 std::string("field must be float32 or float64, got ") + dtype_name(v.dtype));
  VOXAUG_EXPECTS(v.shape[0] == batch && v.shape[1] == 3,
                 "field must be (N, 3, ...) with N = " + std::to_string(batch) +
                     " (one displacement component per spatial axis), got " + v.describe());
  VOXAUG_EXPECTS(v.device == device && (device == Device::CPU || v.device_index == device_index),
                 "field must be on the data's device");
  VOXAUG_EXPECTS(v.data != nullptr || v.numel() == 0, "field data must not be null");
  switch (field.kind) {
    case FieldKind::BSpline:
      for (int a = 0; a < 3; ++a) {
        VOXAUG_EXPECTS(
            v.shape[a + 2] >= 4,
            "a B-spline field needs at least 4 control points per axis, got " + v.describe());
        VOXAUG_EXPECTS(std::isfinite(field.scale[a]) && std::isfinite(field.offset[a]),
                       "field scale and offset must be finite");
      }
      break;
    case FieldKind::Dense:
      for (int a = 0; a < 3; ++a)
        VOXAUG_EXPECTS(v.shape[a + 2] == out_size[a],
                       "a dense field must have the output's spatial size (" +
                           std::to_string(out_size[0]) + ", " + std::to_string(out_size[1]) + ", " +
                           std::to_string(out_size[2]) + "), got " + v.describe());
      break;
    default:  // Separable
      VOXAUG_EXPECTS(v.shape[3] == 1 && v.shape[4] == 1 &&
                         v.shape[2] >= std::max({out_size[0], out_size[1], out_size[2]}),
                     "a separable field must be (N, 3, L, 1, 1) with L >= the largest output "
                     "side, got " +
                         v.describe());
      break;
  }
#if VOXAUG_WITH_CUDA
  if (device == Device::CUDA && v.numel() > 0) check_device_pointer(v.data, device_index, "field");
#endif
  if (field.sample_map != nullptr && field.kind == FieldKind::BSpline && batch > 0) {
    if (device == Device::CPU) {
      for (int64_t i = 0; i < 6 * batch; ++i)
        VOXAUG_EXPECTS(std::isfinite(field.sample_map[i]), "field sample_map must be finite");
    }
#if VOXAUG_WITH_CUDA
    if (device == Device::CUDA) check_device_pointer(field.sample_map, device_index, "sample_map");
#endif
    k.sample_map = field.sample_map;
  }
  k.dtype = v.dtype;
  k.data = v.data;
  for (int a = 0; a < 3; ++a) {
    k.size[a] = v.shape[a + 2];
    k.scale[a] = field.scale[a];
    k.offset[a] = field.offset[a];
  }
  for (int a = 0; a < 5; ++a) k.stride[a] = v.strides[a];
  return k;
}

// Host rows of the dense output: the row path of the gather (same operations per voxel).
template <class Acc>
void cpu_items(const FieldDenseForward<Acc>& f, typename FieldDenseForward<Acc>::State&, int64_t n,
               int64_t begin, int64_t end) {
  const int64_t W = f.out_size[2], H = f.out_size[1];
  alignas(64) Acc u[3][kResampleRow];
  BSplineRowTaps<Acc> taps;
  for (int64_t i = begin; i < end;) {
    const int64_t ow = i % W, oh = (i / W) % H, od = i / (W * H);
    const int cnt = static_cast<int>(std::min({W - ow, end - i, kResampleRow}));
    row_displacement(f.f, n, od, oh, ow, cnt, u, taps);
    for (int j = 0; j < cnt; ++j) {
      const Acc uj[3] = {u[0][j], u[1][j], u[2][j]};
      f.store(n, od, oh, ow + j, uj);
    }
    i += cnt;
  }
}

}  // namespace detail

void deform_field_dense(const DeformField& field, const VolumeView& out, cudaStream_t stream) {
  VOXAUG_EXPECTS(field.kind != FieldKind::None, "deform_field_dense needs a field (kind != None)");
  VOXAUG_EXPECTS(out.shape[1] == 3, "out must be (N, 3, D, H, W), got " + out.describe());
  VOXAUG_EXPECTS(out.dtype == DType::Float32 || out.dtype == DType::Float64,
                 std::string("out must be float32 or float64, got ") + dtype_name(out.dtype));
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(out.shape[a] >= 0, "out sizes must be >= 0");
  const int64_t out_size[3] = {out.shape[2], out.shape[3], out.shape[4]};
  const detail::KField k =
      detail::pack_field(field, out.shape[0], out_size, out.device, out.device_index);
  if (out.numel() == 0) return;
  const bool use_double = out.dtype == DType::Float64 || k.dtype == DType::Float64;
  if (out.device == Device::CPU) {
    auto run = [&](auto acc) {
      using Acc = decltype(acc);
      detail::FieldDenseForward<Acc> f{k, out.data, out.dtype, {}, {}};
      for (int a = 0; a < 3; ++a) f.out_size[a] = out_size[a];
      for (int a = 0; a < 5; ++a) f.out_stride[a] = out.strides[a];
      detail::CpuLauncher::launch(f, out.shape[0], stream);
    };
    if (use_double)
      run(double{});
    else
      run(float{});
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::deform_field_dense_cuda(k, out, use_double, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

void uniform_fill(const VolumeView& out, double low, double high, uint64_t seed,
                  int64_t first_sample, cudaStream_t stream) {
  VOXAUG_EXPECTS(is_floating(out.dtype),
                 std::string("out must be floating, got ") + dtype_name(out.dtype));
  VOXAUG_EXPECTS(std::isfinite(low) && std::isfinite(high) && low <= high,
                 "low and high must be finite with low <= high, got " + std::to_string(low) + ", " +
                     std::to_string(high));
  VOXAUG_EXPECTS(first_sample >= 0 && first_sample + out.shape[0] <= (int64_t(1) << 32),
                 "first_sample + batch must be in [0, 2^32]");
  for (int a = 0; a < 5; ++a) VOXAUG_EXPECTS(out.shape[a] >= 0, "out sizes must be >= 0");
  if (out.numel() == 0) return;
  detail::UniformFillForward f{};
  f.out = out.data;
  f.dtype = out.dtype;
  for (int a = 0; a < 4; ++a) f.shape[a] = out.shape[a + 1];
  for (int a = 0; a < 5; ++a) f.stride[a] = out.strides[a];
  f.low = low;
  f.high = high;
  f.seed = seed;
  f.first_sample = static_cast<uint32_t>(first_sample);
  if (out.device == Device::CPU) {
    detail::CpuLauncher::launch(f, out.shape[0], stream);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::uniform_fill_cuda(f, out.shape[0], out.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
