// voxaug: CUDA backend of the window family. Every pass is one launch of a per-element body of
// window_kernels.h (the same code the CPU twin's tests run on the host). The stitch gives each
// accumulator element one writer -- the first window of the launch covering it, which adds all
// covering windows in window order -- so there are no atomics and the result is MONAI's, bit
// for bit, and deterministic.
#include "../common/cuda_check.cuh"
#include "../common/launch_cuda.cuh"
#include "window_kernels.h"

namespace voxaug::detail {

void window_gather_cuda(const GatherParams& p, int device, cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(p.in, device, "image");
  check_device_pointer(p.out, device, "out");
  CudaLauncher::launch(GatherBody{p}, 1, stream);
}

namespace {
template <class A>
void stitch_acc(const StitchParams& p, DType pred_t, cudaStream_t stream) {
  switch (pred_t) {
    case DType::Float64: return CudaLauncher::launch(StitchBody<A, double>{p}, 1, stream);
    case DType::Float32: return CudaLauncher::launch(StitchBody<A, float>{p}, 1, stream);
    case DType::Float16: return CudaLauncher::launch(StitchBody<A, half_t>{p}, 1, stream);
    case DType::BFloat16: return CudaLauncher::launch(StitchBody<A, bfloat16_t>{p}, 1, stream);
    default: VOXAUG_FAIL("window_stitch: pred must be a float tensor");
  }
}
}  // namespace

void window_stitch_cuda(const StitchParams& p, DType acc_t, DType pred_t, int device,
                        cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(p.acc, device, "acc");
  check_device_pointer(p.pred, device, "pred");
  if (p.weight != nullptr) check_device_pointer(p.weight, device, "weight");
  if (p.count != nullptr) check_device_pointer(p.count, device, "count");
  if (acc_t == DType::Float32)
    stitch_acc<float>(p, pred_t, stream);
  else
    stitch_acc<double>(p, pred_t, stream);
}

void window_count_cuda(const WindowLayout& l, const void* weight, DType t, void* count, int device,
                       cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(count, device, "count");
  if (weight != nullptr) check_device_pointer(weight, device, "weight");
  if (t == DType::Float32)
    CudaLauncher::launch(
        CountBody<float>{l, static_cast<const float*>(weight), static_cast<float*>(count)}, 1,
        stream);
  else
    CudaLauncher::launch(
        CountBody<double>{l, static_cast<const double*>(weight), static_cast<double*>(count)}, 1,
        stream);
}

void window_finalize_cuda(const FinalizeParams& p, DType acc_t, int64_t batch, int device,
                          cudaStream_t stream) {
  CudaDeviceGuard guard(device);
  check_device_pointer(p.acc, device, "acc");
  if (p.count != nullptr) check_device_pointer(p.count, device, "count");
  if (p.weight != nullptr) check_device_pointer(p.weight, device, "weight");
  check_device_pointer(p.out, device, "out");
  if (acc_t == DType::Float32)
    CudaLauncher::launch(FinalizeBody<float>{p}, batch, stream);
  else
    CudaLauncher::launch(FinalizeBody<double>{p}, batch, stream);
}

}  // namespace voxaug::detail
