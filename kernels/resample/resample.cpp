// voxaug: resample -- validation, parameter packing, CPU backend, routing to CUDA.
#include "voxaug/resample.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/device.h"
#include "../common/launch_cpu.h"
#include "../deform/deform_kernels.h"
#include "resample_cpu.h"
#include "resample_dispatch.h"
#include "voxaug/detail/pointwise.h"
#include "voxaug/error.h"
#include "voxaug/intensity.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void resample_cuda(const ResampleParams& p, int64_t batch, bool use_double, int device,
                   cudaStream_t stream);
void resample_backward_input_cuda(const ResampleParams& p, int64_t batch, bool use_double,
                                  int64_t grad_numel, void* grad_in, int device,
                                  cudaStream_t stream);
void resample_backward_matrix_cuda(const ResampleParams& p, int64_t batch, bool use_double,
                                   double* grad, int device, cudaStream_t stream);
void bspline_prefilter_cuda(const VolumeView& in, const VolumeView& coeff, Padding padding,
                            double pad_value, bool align_corners, int order, cudaStream_t stream);
#endif
}  // namespace detail

namespace {

struct Packed {
  detail::ResampleParams p{};
  bool use_double = false;
  int64_t work = 0;  // output elements
  int64_t batch = 0;
  Device device = Device::CPU;
  int device_index = 0;
};

// Validates the targets (`in` -> `out`; for backward, `out` is the gradient of the output)
// and packs them into the kernel's parameter block.
Packed pack_targets(const ResampleTarget* targets, int num_targets, const double* matrices,
                    bool align_corners) {
  VOXAUG_EXPECTS(num_targets >= 1 && num_targets <= kMaxResampleTargets,
                 "num_targets must be in [1, " + std::to_string(kMaxResampleTargets) + "], got " +
                     std::to_string(num_targets));
  VOXAUG_EXPECTS(targets != nullptr, "targets must not be null");
  const VolumeView& first = targets[0].out;
  Packed pk;
  detail::ResampleParams& p = pk.p;
  p.num_targets = num_targets;
  p.align_corners = align_corners;
  p.matrices = matrices;
  for (int k = 0; k < num_targets; ++k) {
    const ResampleTarget& t = targets[k];
    const std::string name = "target " + std::to_string(k);
    for (int a = 0; a < 5; ++a) {
      VOXAUG_EXPECTS(t.in.shape[a] >= 0 && t.out.shape[a] >= 0, name + ": sizes must be >= 0");
    }
    VOXAUG_EXPECTS(t.group >= 1, name + ": group must be >= 1, got " + std::to_string(t.group));
    VOXAUG_EXPECTS(t.in.shape[0] * t.group == first.shape[0] && t.out.shape[0] == first.shape[0],
                   name + ": every output must have the batch size " +
                       std::to_string(first.shape[0]) + " and every input that divided by its " +
                       "group (" + std::to_string(t.group) + "), got " + t.in.describe() +
                       " -> " + t.out.describe());
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
    VOXAUG_EXPECTS(
        t.mode == Interp::Nearest || t.mode == Interp::Linear || is_spline(t.mode),
        name + ": mode must be nearest, linear, cubic, quadratic, quartic or quintic, got " +
            std::to_string(static_cast<int>(t.mode)));
    VOXAUG_EXPECTS(static_cast<int>(t.padding) >= 0 && static_cast<int>(t.padding) <= 4,
                   name + ": unknown padding mode " + std::to_string(static_cast<int>(t.padding)));
    VOXAUG_EXPECTS(std::isfinite(t.pad_value), name + ": pad_value must be finite");
    if (pads_with_value(t.padding) && !is_floating(t.out.dtype)) {
      // The value an integer output can hold (torch's fill refuses the others); converting one
      // out of range is undefined, and the host and the device would store different values.
      const double lo = t.out.dtype == DType::UInt8   ? 0.0
                        : t.out.dtype == DType::Int16 ? -32768.0
                        : t.out.dtype == DType::Int32 ? -2147483648.0
                                                      : -9223372036854775808.0;
      const double hi = t.out.dtype == DType::UInt8   ? 256.0
                        : t.out.dtype == DType::Int16 ? 32768.0
                        : t.out.dtype == DType::Int32 ? 2147483648.0
                                                      : 9223372036854775808.0;
      VOXAUG_EXPECTS(t.pad_value > lo - 1.0 && t.pad_value < hi,
                     name + ": pad_value " + std::to_string(t.pad_value) + " does not fit the " +
                         "output dtype " + dtype_name(t.out.dtype));
    }
    if (t.mode != Interp::Nearest) {
      VOXAUG_EXPECTS(is_floating(t.in.dtype) && is_floating(t.out.dtype),
                     name + ": " + (t.mode == Interp::Linear ? "linear" : "B-spline") +
                         " interpolation needs floating tensors (labels use nearest), got " +
                         dtype_name(t.in.dtype) + " -> " + dtype_name(t.out.dtype));
      pk.use_double =
          pk.use_double || t.in.dtype == DType::Float64 || t.out.dtype == DType::Float64;
    }
    if (is_spline(t.mode)) {
      VOXAUG_EXPECTS(t.coeff.data != nullptr || t.in.numel() == 0,
                     name + ": B-spline interpolation (order " +
                         std::to_string(spline_order(t.mode)) +
                         ") needs the coefficients from bspline_prefilter (coeff)");
      VOXAUG_EXPECTS(t.coeff.dtype == DType::Float32 || t.coeff.dtype == DType::Float64,
                     name + ": coeff must be float32 or float64");
      for (int a = 0; a < 5; ++a)
        VOXAUG_EXPECTS(t.coeff.shape[a] == t.in.shape[a] + (a >= 2 ? 2 * kBSplinePad : 0),
                       name + ": coeff must be the input's shape padded by " +
                           std::to_string(kBSplinePad) + " per side, got " + t.coeff.describe());
      VOXAUG_EXPECTS(t.coeff.device == t.in.device, name + ": coeff must be on the input's device");
      pk.use_double = pk.use_double || t.coeff.dtype == DType::Float64;
    }
    VOXAUG_EXPECTS(t.in.numel() > 0 || t.out.numel() == 0,
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
      q.coeff_stride[a] = t.coeff.strides[a];
    }
    q.coeff = t.coeff.data;
    q.coeff_dtype = t.coeff.dtype;
    q.in_group = t.group;
    pk.work += t.out.numel();
  }
  for (int a = 0; a < 3; ++a) p.out_size[a] = first.shape[a + 2];
  pk.batch = first.shape[0];
  pk.device = first.device;
  pk.device_index = first.device_index;
  if (pk.work > 0) {
    VOXAUG_EXPECTS(matrices != nullptr, "matrices must not be null");
    if (pk.device == Device::CPU) {
      for (int64_t i = 0; i < 12 * pk.batch; ++i)
        VOXAUG_EXPECTS(std::isfinite(matrices[i]), "matrices must be finite; entry " +
                                                       std::to_string(i) + " is " +
                                                       std::to_string(matrices[i]));
    }
#if VOXAUG_WITH_CUDA
    if (pk.device == Device::CUDA)
      detail::check_device_pointer(matrices, pk.device_index, "matrices");
#endif
  }
  return pk;
}

#if !VOXAUG_WITH_CUDA
[[noreturn]] void no_cuda() {
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
}
#endif

template <class Acc>
void backward_input_cpu(const detail::KTarget& t, const detail::ResampleParams& p, int64_t batch,
                        Acc* grad_in) {
  const int64_t vol = t.in_size[0] * t.in_size[1] * t.in_size[2];
  std::fill(grad_in, grad_in + batch * t.channels * vol, Acc(0));
  // One task per (sample, channel): no two tasks touch the same voxel, so the sums are
  // deterministic without atomics.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t nc = 0; nc < batch * t.channels; ++nc) {
    const int64_t n = nc / t.channels, c = nc % t.channels;
    Acc m[12];
    for (int k = 0; k < 12; ++k) m[k] = static_cast<Acc>(p.matrices[12 * n + k]);
    for (int64_t od = 0; od < p.out_size[0]; ++od)
      for (int64_t oh = 0; oh < p.out_size[1]; ++oh)
        for (int64_t ow = 0; ow < p.out_size[2]; ++ow) {
          Acc src[3];
          detail::source_coordinate(m, od, oh, ow, src);
          detail::scatter_input_grad(t, p.align_corners, src, n, c, od, oh, ow, grad_in,
                                     [](Acc* q, Acc v) { *q += v; });
        }
  }
}

template <class Acc>
void backward_matrix_cpu(const detail::ResampleParams& p, int64_t batch, double* grad) {
  const int64_t voxels = p.out_size[0] * p.out_size[1] * p.out_size[2];
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (voxels + kChunk - 1) / kChunk;
  // Fixed chunks, summed in a fixed order afterwards: deterministic for any thread count.
  std::vector<double> partial(batch * chunks * 12, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < batch * chunks; ++task) {
    const int64_t n = task / chunks, begin = (task % chunks) * kChunk;
    const int64_t end = std::min(voxels, begin + kChunk);
    Acc m[12];
    for (int k = 0; k < 12; ++k) m[k] = static_cast<Acc>(p.matrices[12 * n + k]);
    double acc[12] = {0};
    for (int64_t v = begin; v < end; ++v) {
      const int64_t ow = v % p.out_size[2], oh = (v / p.out_size[2]) % p.out_size[1],
                    od = v / (p.out_size[2] * p.out_size[1]);
      Acc src[3];
      detail::source_coordinate(m, od, oh, ow, src);
      Acc g[3] = {Acc(0), Acc(0), Acc(0)};
      detail::source_grad(p, src, n, od, oh, ow, g);
      const double o[4] = {double(od), double(oh), double(ow), 1.0};
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 4; ++k) acc[4 * r + k] += double(g[r]) * o[k];
    }
    for (int k = 0; k < 12; ++k) partial[task * 12 + k] = acc[k];
  }
  for (int64_t n = 0; n < batch; ++n)
    for (int k = 0; k < 12; ++k) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += partial[(n * chunks + c) * 12 + k];
      grad[12 * n + k] = s;
    }
}

}  // namespace

namespace {
// ResampleTarget::post of the targets, validated and packed into p (at most one target).
void pack_post(const ResampleTarget* targets, int num_targets, Packed& pk) {
  for (int k = 0; k < num_targets; ++k) {
    const ResampleTarget& t = targets[k];
    if (t.post == nullptr && t.num_post == 0) continue;
    const std::string name = "target " + std::to_string(k);
    VOXAUG_EXPECTS(pk.p.post_target < 0,
                   name + ": post steps on target " + std::to_string(pk.p.post_target) + " and " +
                       std::to_string(k) + "; one target per launch may have them");
    VOXAUG_EXPECTS(t.post != nullptr && t.num_post >= 1 && t.num_post <= kMaxResamplePostSteps,
                   name + ": num_post must be in [1, " + std::to_string(kMaxResamplePostSteps) +
                       "] with post not null, got " + std::to_string(t.num_post));
    VOXAUG_EXPECTS(is_floating(t.out.dtype), name + ": post steps need a floating output, got " +
                                                 dtype_name(t.out.dtype));
    VOXAUG_EXPECTS((t.out.dtype == DType::Float64) == pk.use_double,
                   name + ": post steps compute in the output's precision, but the launch computes "
                          "in " + (pk.use_double ? "float64 (a float64 target shares it)" : "float32") +
                       " and this output is " + dtype_name(t.out.dtype) +
                       "; resample the targets in separate launches");
    const detail::ChainParams cp =
        detail::pack_chain_for(t.out, t.post, t.num_post, t.post_first_sample);
    for (int s = 0; s < t.num_post; ++s) {
      const PointwiseOp op = t.post[s].op;
      const bool stat_free = op == PointwiseOp::ScaleIntensityRange ||
                             op == PointwiseOp::ShiftIntensity ||
                             op == PointwiseOp::ScaleIntensity || op == PointwiseOp::Gamma;
      VOXAUG_EXPECTS(stat_free && !(cp.steps[s].flags & detail::kChannelWise),
                     name + ": post step " + std::to_string(s) +
                         " must be scale_intensity_range, shift_intensity, scale_intensity or a "
                         "fixed gamma, not channel-wise (other steps need statistics of their "
                         "input or per-voxel random numbers: run pointwise_chain after)");
      pk.p.post[s] = cp.steps[s];
    }
    pk.p.post_target = k;
    pk.p.num_post = t.num_post;
    pk.p.post_first_sample = t.post_first_sample;
    pk.p.post_channels = t.out.shape[1];
  }
}

void run_forward(const ResampleTarget* targets, int num_targets, const double* matrices,
                 const DeformField* field, bool align_corners, cudaStream_t stream) {
  Packed pk = pack_targets(targets, num_targets, matrices, align_corners);
  for (int k = 0; k < num_targets; ++k)
    VOXAUG_EXPECTS(targets[k].mode == Interp::Linear || targets[k].in.dtype == targets[k].out.dtype,
                   "target " + std::to_string(k) +
                       ": nearest copies elements, so output dtype must equal input dtype, got " +
                       dtype_name(targets[k].in.dtype) + " -> " + dtype_name(targets[k].out.dtype));
  pack_post(targets, num_targets, pk);
  if (field != nullptr)
    pk.p.field = detail::pack_field(*field, targets[0].out.shape[0], pk.p.out_size, pk.device,
                                    pk.device_index);
  if (pk.work == 0 || pk.batch == 0) return;
  if (pk.device == Device::CPU) {
    if (pk.use_double) {
      detail::resample_forward_cpu<double>(pk.p, pk.batch);
    } else {
      detail::resample_forward_cpu<float>(pk.p, pk.batch);
    }
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::resample_cuda(pk.p, pk.batch, pk.use_double, pk.device_index, stream);
#else
  no_cuda();
#endif
}
}  // namespace

void resample(const ResampleTarget* targets, int num_targets, const double* matrices,
              bool align_corners, cudaStream_t stream) {
  run_forward(targets, num_targets, matrices, nullptr, align_corners, stream);
}

void resample_deformed(const ResampleTarget* targets, int num_targets, const double* matrices,
                       const DeformField& field, bool align_corners, cudaStream_t stream) {
  run_forward(targets, num_targets, matrices, &field, align_corners, stream);
}

void resample_backward_input(const ResampleTarget& target, const double* matrices,
                             bool align_corners, void* grad_in, cudaStream_t stream) {
  VOXAUG_EXPECTS(!is_spline(target.mode),
                 "resample_backward_input: cubic interpolation has no gradient (use linear; "
                 "no B-spline order has one)");
  VOXAUG_EXPECTS(target.padding != Padding::Cutoff,
                 "resample_backward_input: Cutoff padding (scipy's 'constant') has no gradient");
  VOXAUG_EXPECTS(target.group == 1, "resample_backward_input: group must be 1");
  VOXAUG_EXPECTS(target.post == nullptr && target.num_post == 0,
                 "resample_backward_input: post steps are forward only");
  const Packed pk = pack_targets(&target, 1, matrices, align_corners);
  VOXAUG_EXPECTS(is_floating(target.out.dtype),
                 std::string("grad_output must be floating, got ") + dtype_name(target.out.dtype));
  const bool dbl = target.in.dtype == DType::Float64 || target.out.dtype == DType::Float64;
  if (target.in.numel() == 0) return;
  VOXAUG_EXPECTS(grad_in != nullptr, "grad_in must not be null");
  if (pk.device == Device::CPU) {
    if (dbl)
      backward_input_cpu(pk.p.t[0], pk.p, pk.batch, static_cast<double*>(grad_in));
    else
      backward_input_cpu(pk.p.t[0], pk.p, pk.batch, static_cast<float*>(grad_in));
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::resample_backward_input_cuda(pk.p, pk.batch, dbl, target.in.numel(), grad_in,
                                       pk.device_index, stream);
#else
  (void)stream;
  no_cuda();
#endif
}

void resample_backward_matrix(const ResampleTarget* targets, int num_targets,
                              const double* matrices, bool align_corners, double* grad_matrices,
                              cudaStream_t stream) {
  for (int k = 0; k < num_targets; ++k)
    VOXAUG_EXPECTS(!is_spline(targets[k].mode),
                   "resample_backward_matrix: cubic interpolation has no gradient (use linear; "
                   "no B-spline order has one)");
  for (int k = 0; k < num_targets; ++k)
    VOXAUG_EXPECTS(targets[k].padding != Padding::Cutoff,
                   "resample_backward_matrix: Cutoff padding (scipy's 'constant') has no gradient");
  for (int k = 0; k < num_targets; ++k)
    VOXAUG_EXPECTS(targets[k].group == 1, "resample_backward_matrix: group must be 1");
  for (int k = 0; k < num_targets && targets != nullptr; ++k)
    VOXAUG_EXPECTS(targets[k].post == nullptr && targets[k].num_post == 0,
                   "resample_backward_matrix: post steps are forward only");
  const Packed pk = pack_targets(targets, num_targets, matrices, align_corners);
  for (int k = 0; k < num_targets; ++k)
    VOXAUG_EXPECTS(targets[k].mode == Interp::Nearest || is_floating(targets[k].out.dtype),
                   "target " + std::to_string(k) + ": grad_output must be floating");
  if (pk.batch == 0) return;
  VOXAUG_EXPECTS(grad_matrices != nullptr, "grad_matrices must not be null");
  if (pk.device == Device::CPU) {
    if (pk.use_double)
      backward_matrix_cpu<double>(pk.p, pk.batch, grad_matrices);
    else
      backward_matrix_cpu<float>(pk.p, pk.batch, grad_matrices);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::resample_backward_matrix_cuda(pk.p, pk.batch, pk.use_double, grad_matrices,
                                        pk.device_index, stream);
#else
  (void)stream;
  no_cuda();
#endif
}

namespace {
// One pole of detail::bspline_filter_line (bspline_pole_pass) on `count` lines at once: line j
// starts at c + j (the lanes are contiguous), its elements `stride` apart. Every line sees
// exactly bspline_pole_pass's operations in its order (the same bits as the device's per-line
// filter), but the lanes vectorise and each row of lanes is one cache-friendly stretch, where
// filtering the D and H lines one by one touched one cache line per element.
template <class T>
void bspline_pole_lanes(T* c, int64_t n, int64_t stride, int64_t count, T* sum, T* tail,
                        const detail::BSplinePole& pole, const detail::BSplineLineEnds& ends) {
  using detail::fadd;
  using detail::fdiv;
  using detail::fmul;
  using detail::fsub;
  const T z = static_cast<T>(pole.z);
  const int64_t horizon = sizeof(T) == 4 ? pole.horizon_f : pole.horizon_d;
  for (int64_t j = 0; j < count; ++j) sum[j] = c[j];
  const bool extend = ends.kind != detail::BSplineEnds::Mirror;
  if (extend) {
    for (int64_t j = 0; j < count; ++j) tail[j] = T(0);
    T zk = z;
    for (int64_t k = 1; k < horizon; ++k) {
      const T* r = c + detail::bspline_end_index(-k, n, ends) * stride;
      const T* q = c + detail::bspline_end_index(n - 1 + k, n, ends) * stride;
      for (int64_t j = 0; j < count; ++j) {
        sum[j] = fadd(sum[j], fmul(zk, r[j]));
        tail[j] = fadd(tail[j], fmul(zk, q[j]));
      }
      zk = fmul(zk, z);
    }
  } else if (horizon < n) {
    T zk = z;
    for (int64_t k = 1; k < horizon; ++k) {
      const T* r = c + k * stride;
      for (int64_t j = 0; j < count; ++j) sum[j] = fadd(sum[j], fmul(zk, r[j]));
      zk = fmul(zk, z);
    }
  } else {
    T zk = z;
    // z^(n - 1) by repeated products in double, as bspline_pole_pass (the device's and the W
    // axis's): pow's last bit is the library's.
    double zd = 1.0;
    for (int64_t k = 1; k < n; ++k) zd = fmul(zd, static_cast<double>(z));
    const T zn = static_cast<T>(zd);
    T z2n = fmul(zn, zn);
    z2n = fdiv(z2n, z);
    const T* last = c + (n - 1) * stride;
    for (int64_t j = 0; j < count; ++j) sum[j] = fadd(c[j], fmul(zn, last[j]));
    for (int64_t k = 1; k < n - 1; ++k) {
      const T f = fadd(zk, z2n);
      const T* r = c + k * stride;
      for (int64_t j = 0; j < count; ++j) sum[j] = fadd(sum[j], fmul(f, r[j]));
      zk = fmul(zk, z);
      z2n = fdiv(z2n, z);
    }
    const T den = fsub(T(1), fmul(zn, zn));
    for (int64_t j = 0; j < count; ++j) sum[j] = fdiv(sum[j], den);
  }
  for (int64_t j = 0; j < count; ++j) c[j] = sum[j];
  for (int64_t k = 1; k < n; ++k) {
    T* r = c + k * stride;
    const T* p = r - stride;
    for (int64_t j = 0; j < count; ++j) r[j] = fadd(r[j], fmul(z, p[j]));
  }
  const T a = fdiv(z, fsub(fmul(z, z), T(1)));
  {
    T* r = c + (n - 1) * stride;
    const T* p = r - stride;
    if (extend) {
      for (int64_t j = 0; j < count; ++j) r[j] = fmul(a, fadd(r[j], tail[j]));
    } else {
      for (int64_t j = 0; j < count; ++j) r[j] = fmul(a, fadd(r[j], fmul(z, p[j])));
    }
  }
  for (int64_t k = n - 2; k >= 0; --k) {
    T* r = c + k * stride;
    const T* q = r + stride;
    for (int64_t j = 0; j < count; ++j) r[j] = fmul(z, fsub(q[j], r[j]));
  }
}

// detail::bspline_filter_line (order 2..5) on `count` lines at once, as above; `sum` and
// `tail` hold `count` elements each.
template <class T>
void bspline_filter_lanes(T* c, int64_t n, int64_t stride, int64_t count, T* sum, T* tail,
                          int order, const detail::BSplineLineEnds& ends) {
  if (n < 2) return;
  const detail::BSplineFilter flt = detail::bspline_filter_of(order);
  const T gain = static_cast<T>(flt.gain);
  for (int64_t k = 0; k < n; ++k) {
    T* r = c + k * stride;
    for (int64_t j = 0; j < count; ++j) r[j] = detail::fmul(r[j], gain);
  }
  for (int q = 0; q < flt.num_poles; ++q)
    bspline_pole_lanes(c, n, stride, count, sum, tail, flt.pole[q], ends);
}

// dst[j] = element src + j * stride of `data` (dtype dt) as T, j < count.
template <class T>
void copy_row_as(T* dst, const void* data, DType dt, int64_t src, int64_t stride, int64_t count) {
  if (dt == DType::Float32 && stride == 1) {
    const float* p = static_cast<const float*>(data) + src;
    for (int64_t j = 0; j < count; ++j) dst[j] = static_cast<T>(p[j]);
  } else if (dt == DType::Float64 && stride == 1) {
    const double* p = static_cast<const double*>(data) + src;
    for (int64_t j = 0; j < count; ++j) dst[j] = static_cast<T>(p[j]);
  } else {
    for (int64_t j = 0; j < count; ++j) dst[j] = detail::load_dyn<T>(data, dt, src + j * stride);
  }
}

template <class T>
void prefilter_cpu(const VolumeView& in, const VolumeView& coeff, Padding padding, double pad_value,
                   bool align_corners, int order) {
  T* out = static_cast<T*>(coeff.data);
  const int64_t P = kBSplinePad;
  const int64_t N = in.shape[0], C = in.shape[1];
  const int64_t S[3] = {in.shape[2], in.shape[3], in.shape[4]};
  const int64_t Q[3] = {S[0] + 2 * P, S[1] + 2 * P, S[2] + 2 * P};
  const detail::BSplineLineEnds ends = detail::bspline_line_ends(padding, align_corners);
  // 1. The padded copy, by the padding's extension rule.
#pragma omp parallel for schedule(static)
  for (int64_t ncd = 0; ncd < N * C * Q[0]; ++ncd) {
    const int64_t n = ncd / (C * Q[0]), c = (ncd / Q[0]) % C, d = ncd % Q[0];
    const int64_t sd = detail::extend_index(d - P, S[0], padding, align_corners);
    for (int64_t h = 0; h < Q[1]; ++h) {
      const int64_t sh = detail::extend_index(h - P, S[1], padding, align_corners);
      T* row = out + n * coeff.strides[0] + c * coeff.strides[1] + d * coeff.strides[2] +
               h * coeff.strides[3];  // dense: W contiguous
      const int64_t src = n * in.strides[0] + c * in.strides[1] + sd * in.strides[2] +
                          sh * in.strides[3];
      for (int64_t w = 0; w < Q[2]; ++w) {
        if (w == P && sd >= 0 && sh >= 0) {  // the row's own voxels: one dtype switch
          copy_row_as(row + P, in.data, in.dtype, src, in.strides[4], S[2]);
          w = P + S[2] - 1;
          continue;
        }
        const int64_t sw = detail::extend_index(w - P, S[2], padding, align_corners);
        row[w] = (sd < 0 || sh < 0 || sw < 0)
                     ? static_cast<T>(pad_value)
                     : detail::load_dyn<T>(in.data, in.dtype, src + sw * in.strides[4]);
      }
    }
  }
  // 2. The recursive filter along W, then H and D (one task per plane of lines: the W lanes
  // filtered together). coeff is dense: W is its contiguous axis. The W lines go kWLanes at a
  // time through a transposed tile (lanes contiguous, in L1) and bspline_filter_lanes: one
  // line's recursion is a chain of dependent adds, 16 lines side by side fill the vector
  // lanes. Every line still sees bspline_filter_line's operations in its order.
  {
    constexpr int64_t kWLanes = 16;
    const int64_t lines = N * C * Q[0] * Q[1], tiles = (lines + kWLanes - 1) / kWLanes;
#pragma omp parallel
    {
      std::vector<T> tile(static_cast<size_t>(kWLanes * Q[2])), sum(2 * kWLanes);
#pragma omp for schedule(static)
      for (int64_t b = 0; b < tiles; ++b) {
        const int64_t first = b * kWLanes, cnt = std::min(kWLanes, lines - first);
        T* rows = out + first * Q[2];
        for (int64_t j = 0; j < cnt; ++j)
          for (int64_t k = 0; k < Q[2]; ++k) tile[k * cnt + j] = rows[j * Q[2] + k];
        bspline_filter_lanes(tile.data(), Q[2], cnt, cnt, sum.data(), sum.data() + cnt, order,
                             ends);
        for (int64_t j = 0; j < cnt; ++j)
          for (int64_t k = 0; k < Q[2]; ++k) rows[j * Q[2] + k] = tile[k * cnt + j];
      }
    }
  }
  for (int axis = 1; axis >= 0; --axis) {
    const int other = axis == 1 ? 0 : 1;  // the axis the tasks run over
    const int64_t tasks = N * C * Q[other];
#pragma omp parallel
    {
      std::vector<T> sum(static_cast<size_t>(2 * Q[2]));
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t nc = t / Q[other], i = t % Q[other];
        T* base = out + (nc / C) * coeff.strides[0] + (nc % C) * coeff.strides[1] +
                  i * coeff.strides[other + 2];
        bspline_filter_lanes(base, Q[axis], coeff.strides[axis + 2], Q[2], sum.data(),
                             sum.data() + Q[2], order, ends);
      }
    }
  }
}
}  // namespace

void bspline_prefilter(const VolumeView& in, const VolumeView& coeff, Padding padding,
                       double pad_value, bool align_corners, int order, cudaStream_t stream) {
  VOXAUG_EXPECTS(order >= 2 && order <= 5,
                 "bspline_prefilter: order must be 2, 3, 4 or 5, got " + std::to_string(order));
  VOXAUG_EXPECTS(
      static_cast<int>(padding) >= 0 && static_cast<int>(padding) <= 4,
      "bspline_prefilter: unknown padding mode " + std::to_string(static_cast<int>(padding)));
  if (padding == Padding::Cutoff) {  // scipy's 'constant': the coefficients of the mirror
    padding = Padding::Reflection;
    align_corners = true;
  }
  VOXAUG_EXPECTS(
      is_floating(in.dtype),
      std::string("bspline_prefilter: input must be floating, got ") + dtype_name(in.dtype));
  VOXAUG_EXPECTS(coeff.dtype == DType::Float32 || coeff.dtype == DType::Float64,
                 "bspline_prefilter: coeff must be float32 or float64");
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(coeff.shape[a] == in.shape[a] + (a >= 2 ? 2 * kBSplinePad : 0),
                   "bspline_prefilter: coeff must be the input's shape padded by " +
                       std::to_string(kBSplinePad) + " per side, got " + coeff.describe() +
                       " for " + in.describe());
  VOXAUG_EXPECTS(
      coeff.sample_contiguous() &&
          coeff.strides[0] == coeff.shape[1] * coeff.shape[2] * coeff.shape[3] * coeff.shape[4],
      "bspline_prefilter: coeff must be dense");
  VOXAUG_EXPECTS(in.device == coeff.device,
                 "bspline_prefilter: coeff must be on the input's device");
  VOXAUG_EXPECTS(std::isfinite(pad_value), "bspline_prefilter: pad_value must be finite");
  if (coeff.numel() == 0) return;
  VOXAUG_EXPECTS(in.numel() > 0, "bspline_prefilter: the input volume is empty: " + in.describe());
  const double pad = padding == Padding::Constant ? pad_value : 0.0;
  if (in.device == Device::CPU) {
    if (coeff.dtype == DType::Float64)
      prefilter_cpu<double>(in, coeff, padding, pad, align_corners, order);
    else
      prefilter_cpu<float>(in, coeff, padding, pad, align_corners, order);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::bspline_prefilter_cuda(in, coeff, padding, pad, align_corners, order, stream);
#else
  (void)stream;
  no_cuda();
#endif
}

}  // namespace voxaug
