// voxaug: resample -- validation, parameter packing, CPU backend, routing to CUDA.
#include "voxaug/resample.h"

#include <cmath>
#include <string>

#include "../common/launch_cpu.h"
#include "resample_dispatch.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void resample_cuda(const ResampleParams& p, int64_t batch, bool use_double, int device,
                   cudaStream_t stream);
void check_device_pointer(const void* ptr, int device, const std::string& what);
#endif
}  // namespace detail

void resample(const ResampleTarget* targets, int num_targets, const double* matrices,
              bool align_corners, cudaStream_t stream) {
  VOXAUG_EXPECTS(num_targets >= 1 && num_targets <= kMaxResampleTargets,
                 "num_targets must be in [1, " + std::to_string(kMaxResampleTargets) + "], got " +
                     std::to_string(num_targets));
  VOXAUG_EXPECTS(targets != nullptr, "targets must not be null");
  const VolumeView& first = targets[0].out;
  detail::ResampleParams p{};
  p.num_targets = num_targets;
  p.align_corners = align_corners;
  p.matrices = matrices;
  bool use_double = false;
  int64_t work = 0;
  for (int k = 0; k < num_targets; ++k) {
    const ResampleTarget& t = targets[k];
    const std::string name = "target " + std::to_string(k);
    for (int a = 0; a < 5; ++a) {
      VOXAUG_EXPECTS(t.in.shape[a] >= 0 && t.out.shape[a] >= 0, name + ": sizes must be >= 0");
    }
    VOXAUG_EXPECTS(t.in.shape[0] == first.shape[0] && t.out.shape[0] == first.shape[0],
                   name + ": every input and output must have the batch size " +
                       std::to_string(first.shape[0]) + ", got " + t.in.describe() + " -> " +
                       t.out.describe());
    VOXAUG_EXPECTS(t.in.shape[1] == t.out.shape[1],
                   name + ": output channels must equal input channels: " + t.in.describe() +
                       " -> " + t.out.describe());
    for (int a = 2; a < 5; ++a)
      VOXAUG_EXPECTS(t.out.shape[a] == first.shape[a],
                     name + ": every output must have the spatial size of target 0's output");
    VOXAUG_EXPECTS(t.in.device == first.device && t.out.device == first.device &&
                       (first.device == Device::CPU || (t.in.device_index == first.device_index &&
                                                        t.out.device_index == first.device_index)),
                   name + ": every tensor must be on one device");
    VOXAUG_EXPECTS(t.mode == Interp::Nearest || t.mode == Interp::Linear,
                   name + ": mode must be nearest or linear");
    VOXAUG_EXPECTS(static_cast<int>(t.padding) >= 0 && static_cast<int>(t.padding) <= 3,
                   name + ": unknown padding mode");
    VOXAUG_EXPECTS(std::isfinite(t.pad_value), name + ": pad_value must be finite");
    if (t.mode == Interp::Linear) {
      VOXAUG_EXPECTS(
          is_floating(t.in.dtype) && is_floating(t.out.dtype),
          name + ": linear interpolation needs floating tensors (labels use nearest), got " +
              dtype_name(t.in.dtype) + " -> " + dtype_name(t.out.dtype));
      use_double = use_double || t.in.dtype == DType::Float64 || t.out.dtype == DType::Float64;
    } else {
      VOXAUG_EXPECTS(t.in.dtype == t.out.dtype, name +
                                                    ": nearest copies elements, so output "
                                                    "dtype must equal input dtype, got " +
                                                    dtype_name(t.in.dtype) + " -> " +
                                                    dtype_name(t.out.dtype));
    }
    const bool empty_in = t.in.numel() == 0;
    VOXAUG_EXPECTS(!empty_in || t.out.numel() == 0 || t.in.shape[1] == 0,
                   name + ": cannot sample an empty input volume into a non-empty output");
    detail::KTarget& q = p.t[k];
    q.in = t.in.data;
    q.out = t.out.data;
    q.in_dtype = t.in.dtype;
    q.out_dtype = t.out.dtype;
    q.mode = static_cast<int32_t>(t.mode);
    q.padding = static_cast<int32_t>(t.padding);
    q.pad_value = t.pad_value;
    q.channels = t.in.shape[1];
    q.elem_size = dtype_size(t.in.dtype);
    for (int a = 0; a < 3; ++a) q.in_size[a] = t.in.shape[a + 2];
    for (int a = 0; a < 5; ++a) {
      q.in_stride[a] = t.in.strides[a];
      q.out_stride[a] = t.out.strides[a];
    }
    work += t.out.numel();
  }
  for (int a = 0; a < 3; ++a) p.out_size[a] = first.shape[a + 2];
  if (work == 0 || first.shape[0] == 0) return;
  VOXAUG_EXPECTS(matrices != nullptr, "matrices must not be null");
  if (first.device == Device::CPU) {
    for (int64_t i = 0; i < 12 * first.shape[0]; ++i)
      VOXAUG_EXPECTS(std::isfinite(matrices[i]), "matrices must be finite; entry " +
                                                     std::to_string(i) + " is " +
                                                     std::to_string(matrices[i]));
    detail::resample_run<detail::CpuLauncher>(p, first.shape[0], use_double, stream);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(matrices, first.device_index, "matrices");
  detail::resample_cuda(p, first.shape[0], use_double, first.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
