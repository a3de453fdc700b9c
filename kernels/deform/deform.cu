// voxaug: CUDA backend of the deform family (the math is detail/deform.h, shared with the CPU).
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "deform_kernels.h"

namespace voxaug::detail {

void deform_field_dense_cuda(const KField& k, const VolumeView& out, bool use_double,
                             cudaStream_t stream) {
  CudaDeviceGuard guard(out.device_index);
  check_device_pointer(out.data, out.device_index, "out");
  auto run = [&](auto acc) {
    using Acc = decltype(acc);
    FieldDenseForward<Acc> f{k, out.data, out.dtype, {}, {}};
    for (int a = 0; a < 3; ++a) f.out_size[a] = out.shape[a + 2];
    for (int a = 0; a < 5; ++a) f.out_stride[a] = out.strides[a];
    CudaLauncher::launch(f, out.shape[0], stream);
  };
  if (use_double)
    run(double{});
  else
    run(float{});
}

void uniform_fill_cuda(const UniformFillForward& f, int64_t batch, int device,
                       cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(f.out, device, "out");
  CudaLauncher::launch(f, batch, stream);
}

}  // namespace voxaug::detail
