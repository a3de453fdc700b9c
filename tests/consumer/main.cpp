// Uses voxaug::core from an installed package: ScaleIntensityRange on a tiny volume.
#include <cmath>
#include <cstdio>
#include <vector>

#include <voxaug/intensity.h>

int main() {
  std::vector<float> in = {-175.f, 37.5f, 250.f, 400.f}, out(4);
  const double b_min = 0, b_max = 1;
  voxaug::scale_intensity_range(voxaug::contiguous_view(in.data(), voxaug::DType::Float32,
                                                        voxaug::Device::CPU, 1, 1, 1, 1, 4),
                                voxaug::contiguous_view(out.data(), voxaug::DType::Float32,
                                                        voxaug::Device::CPU, 1, 1, 1, 1, 4),
                                -175, 250, &b_min, &b_max, true);
  const float want[4] = {0.f, 0.5f, 1.f, 1.f};
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(out[i] - want[i]) > 1e-6f) {
      std::printf("consumer: element %d is %g, expected %g\n", i, out[i], want[i]);
      return 1;
    }
  }
  std::printf("consumer: voxaug %s CUDA, result ok\n",
              voxaug::built_with_cuda() ? "with" : "without");
  return 0;
}
