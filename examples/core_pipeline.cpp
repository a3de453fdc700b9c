// voxaug as a plain C++/CUDA library: the BTCV intensity chain on a batch of raw buffers.
//   ScaleIntensityRange(-175, 250 -> 0, 1, clip) -> RandShiftIntensity(0.1, p 0.5)
//   -> RandGaussianNoise(std 0.1, sample_std, p 1), fused into one pass.
// Runs on the GPU when one is present (cudaMalloc'd buffers + a stream), else on the CPU.
#include <cstdio>
#include <vector>

#include <voxaug/intensity.h>

#if VOXAUG_EXAMPLE_CUDA
#include <cuda_runtime_api.h>
#endif

int main() {
  const int64_t n = 4, c = 1, d = 32, h = 48, w = 40;
  const size_t count = n * c * d * h * w;
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(int(i % 600) - 250);

  const double b_min = 0.0, b_max = 1.0;
  const voxaug::PointwiseStep chain[] = {
      voxaug::PointwiseStep::scale_intensity_range(-175, 250, &b_min, &b_max, /*clip=*/true),
      voxaug::PointwiseStep::rand_shift_intensity(-0.1, 0.1, /*prob=*/0.5, /*seed=*/1),
      voxaug::PointwiseStep::gaussian_noise(0.0, 0.1, /*sample_std=*/true, /*prob=*/1.0,
                                            /*seed=*/2)};

  voxaug::Device device =
      voxaug::cuda_device_count() > 0 ? voxaug::Device::CUDA : voxaug::Device::CPU;
  std::vector<float> result(count);
  if (device == voxaug::Device::CPU) {
    const auto in =
        voxaug::contiguous_view(host.data(), voxaug::DType::Float32, device, n, c, d, h, w);
    const auto out =
        voxaug::contiguous_view(result.data(), voxaug::DType::Float32, device, n, c, d, h, w);
    voxaug::pointwise_chain(in, out, chain, 3);
  } else {
#if VOXAUG_EXAMPLE_CUDA
    float* buf = nullptr;
    cudaStream_t stream;
    cudaStreamCreate(&stream);
    cudaMalloc(reinterpret_cast<void**>(&buf), count * sizeof(float));
    cudaMemcpyAsync(buf, host.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream);
    const auto view = voxaug::contiguous_view(buf, voxaug::DType::Float32, device, n, c, d, h, w);
    voxaug::pointwise_chain(view, view, chain, 3, stream);  // in place, asynchronous
    cudaMemcpyAsync(result.data(), buf, count * sizeof(float), cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);  // the example's own sync, to print the result
    cudaFree(buf);
    cudaStreamDestroy(stream);
#endif
  }
  for (int64_t s = 0; s < n; ++s) {
    double sum = 0;
    for (int64_t i = 0; i < c * d * h * w; ++i) sum += result[s * c * d * h * w + i];
    std::printf("sample %lld on %s: mean %.4f\n", static_cast<long long>(s),
                device == voxaug::Device::CUDA ? "cuda" : "cpu", sum / (c * d * h * w));
  }
  return 0;
}
