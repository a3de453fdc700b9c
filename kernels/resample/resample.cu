// voxaug: CUDA backend of resample (the math is detail/resample.h, shared with the CPU).
#include <algorithm>

#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "../deform/deform_kernels.h"
#include "resample_dispatch.h"

namespace voxaug::detail {

void resample_cuda(const ResampleParams& p, int64_t batch, bool use_double, int device,
                   cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  if (p.field.kind != static_cast<int32_t>(FieldKind::BSpline)) {
    resample_run<CudaLauncher>(p, batch, use_double, stream);
    return;
  }
  // A B-spline field: contract its d / h taps per output row first (one small launch), so
  // each voxel reads 4 values per component instead of 64; the same operations per voxel.
  ResampleParams q = p;
  void* workspace = nullptr;
  q.field = bspline_rows_cuda(p.field, batch, p.out_size[0], p.out_size[1], use_double, stream,
                              &workspace);
  try {
    resample_run<CudaLauncher>(q, batch, use_double, stream);
  } catch (...) {
    cudaFreeAsync(workspace, stream);
    throw;
  }
  VOXAUG_CUDA_TRY(cudaFreeAsync(workspace, stream));
}

}  // namespace voxaug::detail

// ---- backward ----
namespace voxaug::detail {
namespace {

template <class Acc>
__global__ void __launch_bounds__(256)
    backward_input_kernel(const ResampleParams p, int64_t batch, Acc* grad_in) {
  const KTarget& t = p.t[0];
  const int64_t voxels = p.out_size[0] * p.out_size[1] * p.out_size[2];
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    Acc m[12];
    for (int k = 0; k < 12; ++k) m[k] = static_cast<Acc>(p.matrices[12 * n + k]);
    for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < voxels;
         v += int64_t(gridDim.x) * blockDim.x) {
      const int64_t ow = v % p.out_size[2], oh = (v / p.out_size[2]) % p.out_size[1],
                    od = v / (p.out_size[2] * p.out_size[1]);
      Acc src[3];
      source_coordinate(m, od, oh, ow, src);
      for (int64_t c = 0; c < t.channels; ++c)
        scatter_input_grad(t, p.align_corners, src, n, c, od, oh, ow, grad_in,
                           [](Acc* q, Acc val) { atomicAdd(q, val); });
    }
  }
}

// Each thread sums its voxels' contributions, the warp reduces by shuffles and its lane 0
// adds the 12 sums to the sample's gradient.
template <class Acc>
__global__ void __launch_bounds__(256)
    backward_matrix_kernel(const ResampleParams p, int64_t batch, double* grad) {
  const int64_t voxels = p.out_size[0] * p.out_size[1] * p.out_size[2];
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    Acc m[12];
    for (int k = 0; k < 12; ++k) m[k] = static_cast<Acc>(p.matrices[12 * n + k]);
    double acc[12] = {0};
    for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < voxels;
         v += int64_t(gridDim.x) * blockDim.x) {
      const int64_t ow = v % p.out_size[2], oh = (v / p.out_size[2]) % p.out_size[1],
                    od = v / (p.out_size[2] * p.out_size[1]);
      Acc src[3];
      source_coordinate(m, od, oh, ow, src);
      Acc g[3] = {Acc(0), Acc(0), Acc(0)};
      source_grad(p, src, n, od, oh, ow, g);
      const double o[4] = {double(od), double(oh), double(ow), 1.0};
      for (int r = 0; r < 3; ++r)
        for (int k = 0; k < 4; ++k) acc[4 * r + k] += double(g[r]) * o[k];
    }
    for (int k = 0; k < 12; ++k) {
      double s = acc[k];
      for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
      if ((threadIdx.x & 31) == 0) atomicAdd(&grad[12 * n + k], s);
    }
  }
}

dim3 backward_grid(const ResampleParams& p, int64_t batch, int device) {
  const int64_t voxels = p.out_size[0] * p.out_size[1] * p.out_size[2];
  const int64_t grid_y = std::min<int64_t>(batch, 65535);
  const int64_t target = int64_t(cuda_sm_count(device)) * 8;
  const int64_t grid_x =
      std::max<int64_t>(1, std::min<int64_t>((voxels + 255) / 256, (target + grid_y - 1) / grid_y));
  return dim3(unsigned(grid_x), unsigned(grid_y));
}

}  // namespace

void resample_backward_input_cuda(const ResampleParams& p, int64_t batch, bool use_double,
                                  int64_t grad_numel, void* grad_in, int device,
                                  cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(grad_in, device, "grad_in");
  VOXAUG_CUDA_TRY(cudaMemsetAsync(grad_in, 0, grad_numel * (use_double ? 8 : 4), stream));
  const dim3 grid = backward_grid(p, batch, device);
  if (use_double) {
    backward_input_kernel<double>
        <<<grid, 256, 0, stream>>>(p, batch, static_cast<double*>(grad_in));
  } else {
    backward_input_kernel<float><<<grid, 256, 0, stream>>>(p, batch, static_cast<float*>(grad_in));
  }
  VOXAUG_CUDA_CHECK_LAUNCH();
}

void resample_backward_matrix_cuda(const ResampleParams& p, int64_t batch, bool use_double,
                                   double* grad, int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(grad, device, "grad_matrices");
  VOXAUG_CUDA_TRY(cudaMemsetAsync(grad, 0, batch * 12 * sizeof(double), stream));
  const dim3 grid = backward_grid(p, batch, device);
  if (use_double) {
    backward_matrix_kernel<double><<<grid, 256, 0, stream>>>(p, batch, grad);
  } else {
    backward_matrix_kernel<float><<<grid, 256, 0, stream>>>(p, batch, grad);
  }
  VOXAUG_CUDA_CHECK_LAUNCH();
}

}  // namespace voxaug::detail

// ---- B-spline prefilter (orders 2..5) ----
namespace voxaug::detail {
namespace {

template <class T>
__global__ void __launch_bounds__(256)
    bspline_pad_kernel(const VolumeView in, const VolumeView coeff, int64_t total, Padding padding,
                       double pad_value, bool align_corners) {
  const int64_t P = kBSplinePad;
  T* out = static_cast<T*>(coeff.data);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i;
    const int64_t w = r % coeff.shape[4];
    r /= coeff.shape[4];
    const int64_t h = r % coeff.shape[3];
    r /= coeff.shape[3];
    const int64_t d = r % coeff.shape[2];
    r /= coeff.shape[2];
    const int64_t c = r % coeff.shape[1], n = r / coeff.shape[1];
    const int64_t sd = extend_index(d - P, in.shape[2], padding, align_corners);
    const int64_t sh = extend_index(h - P, in.shape[3], padding, align_corners);
    const int64_t sw = extend_index(w - P, in.shape[4], padding, align_corners);
    out[i] = (sd < 0 || sh < 0 || sw < 0)
                 ? static_cast<T>(pad_value)
                 : load_dyn<T>(in.data, in.dtype,
                               n * in.strides[0] + c * in.strides[1] + sd * in.strides[2] +
                                   sh * in.strides[3] + sw * in.strides[4]);
  }
}

// One thread per line along `axis` of the dense coefficient volume.
template <class T>
__global__ void __launch_bounds__(128)
    bspline_line_kernel(T* data, int64_t lines, int64_t len, int64_t stride, int64_t inner,
                        int64_t inner_stride, int64_t outer_stride, int order,
                        BSplineLineEnds ends) {
  for (int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; l < lines;
       l += int64_t(gridDim.x) * blockDim.x) {
    // Lines are indexed (outer, inner); consecutive threads take consecutive inner indices.
    const int64_t o = l / inner, i = l % inner;
    bspline_filter_line(data + o * outer_stride + i * inner_stride, len, stride, order, ends);
  }
}

}  // namespace

void bspline_prefilter_cuda(const VolumeView& in, const VolumeView& coeff, Padding padding,
                            double pad_value, bool align_corners, int order, cudaStream_t stream) {
  CudaDeviceGuard guard(in.device_index);
  const int64_t total = coeff.numel();
  const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 65535));
  const int64_t Q[3] = {coeff.shape[2], coeff.shape[3], coeff.shape[4]};
  const int64_t NC = coeff.shape[0] * coeff.shape[1];
  const BSplineLineEnds ends = bspline_line_ends(padding, align_corners);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* data = static_cast<T*>(coeff.data);
    bspline_pad_kernel<T>
        <<<blocks, 256, 0, stream>>>(in, coeff, total, padding, pad_value, align_corners);
    VOXAUG_CUDA_CHECK_LAUNCH();
    // Dense layout strides: W 1, H Q2, D Q1*Q2, (n,c) Q0*Q1*Q2.
    const int64_t sw = 1, sh = Q[2], sd = Q[1] * Q[2], snc = Q[0] * Q[1] * Q[2];
    struct Pass {
      int64_t len, stride, inner, inner_stride, outer, outer_stride;
    };
    // W lines: inner = H rows of one (n, c, d) plane; H lines: inner = W; D lines: inner = H*W.
    const Pass passes[3] = {{Q[2], sw, Q[1], sh, NC * Q[0], sd},
                            {Q[1], sh, Q[2], sw, NC * Q[0], sd},
                            {Q[0], sd, Q[1] * Q[2], 1, NC, snc}};
    for (const Pass& ps : passes) {
      const int64_t lines = ps.inner * ps.outer;
      const int lb = static_cast<int>(std::min<int64_t>((lines + 127) / 128, 65535));
      bspline_line_kernel<T><<<lb, 128, 0, stream>>>(data, lines, ps.len, ps.stride, ps.inner,
                                                     ps.inner_stride, ps.outer_stride, order, ends);
      VOXAUG_CUDA_CHECK_LAUNCH();
    }
  };
  if (coeff.dtype == DType::Float64)
    run(double{});
  else
    run(float{});
}

}  // namespace voxaug::detail
