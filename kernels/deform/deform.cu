// voxaug: CUDA backend of the deform family (the math is detail/deform.h, shared with the CPU).
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "deform_kernels.h"

namespace voxaug::detail {

KField bspline_rows_cuda(const KField& f, int64_t batch, int64_t rows_d, int64_t rows_h,
                         bool use_double, cudaStream_t stream, void** workspace) {
  const size_t count = static_cast<size_t>(batch * 3 * rows_d * rows_h * f.size[2]);
  VOXAUG_CUDA_TRY(cudaMallocAsync(workspace, count * (use_double ? 8 : 4) + 1, stream));
  try {
    if (use_double)
      CudaLauncher::launch(
          BSplineRowsForward<double>{f, static_cast<double*>(*workspace), rows_d, rows_h}, batch,
          stream);
    else
      CudaLauncher::launch(
          BSplineRowsForward<float>{f, static_cast<float*>(*workspace), rows_d, rows_h}, batch,
          stream);
  } catch (...) {
    cudaFreeAsync(*workspace, stream);
    *workspace = nullptr;
    throw;
  }
  return bspline_rows_field(f, *workspace, use_double, rows_d, rows_h);
}

void deform_field_dense_cuda(const KField& k, const VolumeView& out, bool use_double,
                             cudaStream_t stream) {
  CudaDeviceGuard guard(out.device_index);
  check_device_pointer(out.data, out.device_index, "out");
  void* workspace = nullptr;
  const KField field = k.kind == static_cast<int32_t>(FieldKind::BSpline)
                           ? bspline_rows_cuda(k, out.shape[0], out.shape[2], out.shape[3],
                                               use_double, stream, &workspace)
                           : k;
  auto run = [&](auto acc) {
    using Acc = decltype(acc);
    // B-spline fields arrive as pre-contracted rows: the variant without the 64-tap case.
    FieldDenseForward<Acc, false> f{field, out.data, out.dtype, {}, {}};
    for (int a = 0; a < 3; ++a) f.out_size[a] = out.shape[a + 2];
    for (int a = 0; a < 5; ++a) f.out_stride[a] = out.strides[a];
    CudaLauncher::launch(f, out.shape[0], stream);
  };
  try {
    if (use_double)
      run(double{});
    else
      run(float{});
  } catch (...) {
    if (workspace) cudaFreeAsync(workspace, stream);
    throw;
  }
  if (workspace) VOXAUG_CUDA_TRY(cudaFreeAsync(workspace, stream));
}

void uniform_fill_cuda(const UniformFillForward& f, int64_t batch, int device,
                       cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(f.out, device, "out");
  CudaLauncher::launch(f, batch, stream);
}

}  // namespace voxaug::detail
