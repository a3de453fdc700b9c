// Uses voxaug::torch from an installed package: the op against torch's own arithmetic.
#include <torch/torch.h>

#include <cstdio>

#include <voxaug/torch_ops.h>

int main() {
  const torch::Tensor x = torch::linspace(-300, 400, 2 * 3 * 4 * 5).reshape({1, 2, 3, 4, 5});
  const torch::Tensor got = voxaug::ops::scale_intensity_range(x, -175, 250, 0.0, 1.0, true);
  const torch::Tensor want = ((x + 175) / 425).clamp(0, 1);
  if (!torch::allclose(got, want, 1e-6, 1e-6)) {
    std::printf("consumer_torch: mismatch\n");
    return 1;
  }
  std::printf("consumer_torch: voxaug::torch result ok\n");
  return 0;
}
