// voxaug from a LibTorch C++ program: the intensity ops through the dispatcher
// (include/voxaug/torch_ops.h), on CUDA tensors when a GPU is present, else on the CPU.
#include <torch/torch.h>

#include <cstdio>

#include <voxaug/sliding_window.h>
#include <voxaug/compose.h>
#include <voxaug/torch_ops.h>

int main() {
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  torch::manual_seed(0);
  const torch::Tensor batch = torch::rand({4, 1, 64, 64, 64}, device) * 425 - 175;  // HU-like

  torch::Tensor x = voxaug::ops::scale_intensity_range(batch, -175, 250, 0.0, 1.0, /*clip=*/true);
  x = voxaug::ops::rand_shift_intensity(x, -0.1, 0.1, /*prob=*/0.5, /*seed=*/11);
  x = voxaug::ops::rand_gaussian_noise(x, 0.0, 0.1, /*sample_std=*/true, /*prob=*/1.0, /*seed=*/12);

  // Differentiable: gradients flow back to the input through the ops' autograd kernels.
  const torch::Tensor leaf = batch.clone().requires_grad_(true);
  voxaug::ops::scale_intensity_range(leaf, -175, 250, 0.0, 1.0, true).sum().backward();

  std::printf("device %s, output %s mean %.4f, grad mean %.6f (expected %.6f inside the window)\n",
              device.is_cuda() ? "cuda" : "cpu", c10::toString(x.scalar_type()),
              x.mean().item<double>(), leaf.grad().mean().item<double>(), 1.0 / 425.0);

  // Spatial augmentation of image + label: RandAffine, RandFlip and a centre crop multiply into
  // one per-sample map, and the elastic deformation gathers through it: one launch for the four
  // steps (image bilinear, label nearest).
  namespace vt = voxaug::transforms;
  const torch::Tensor label = (batch > 100).to(torch::kUInt8);
  vt::Rand3DElasticOptions elastic;
  elastic.prob = 1.0;
  const vt::Compose aug({vt::RandAffine(/*prob=*/1.0, /*rotate_range=*/{0.3, 0.3, 0.3}),
                         vt::RandFlip(/*prob=*/0.5, /*spatial_axis=*/{0}),
                         vt::CenterSpatialCrop({48, 48, 48}),
                         vt::Rand3DElastic(/*sigma_range=*/{5, 7}, /*magnitude_range=*/{50, 100},
                                           elastic)});
  const vt::ComposeResult c = aug({x, label}, /*seed=*/13, /*first_sample=*/0, {"", "nearest"});
  std::printf("spatial compose: %zu launch(es) for %zu steps, image (%lld, %lld, %lld), label %s\n",
              c.groups.size(), aug.steps().size(), static_cast<long long>(c.out_size[0]),
              static_cast<long long>(c.out_size[1]), static_cast<long long>(c.out_size[2]),
              c10::toString(c.outputs[1].scalar_type()));
  // Sliding-window inference of a (random) conv net over a whole volume, MONAI's numerics.
  torch::nn::Conv3d net(torch::nn::Conv3dOptions(1, 3, 3).padding(1));
  net->to(device);
  voxaug::SlidingWindowOptions o;
  o.overlap = {0.25};
  o.mode = voxaug::BlendMode::Gaussian;
  torch::NoGradGuard no_grad;
  const torch::Tensor volume = torch::rand({1, 1, 90, 100, 80}, device);
  const torch::Tensor seg = voxaug::sliding_window_inference(volume, {64, 64, 64}, 4, net, o);
  std::printf("sliding window: output (%lld, %lld, %lld, %lld, %lld)\n",
              static_cast<long long>(seg.size(0)), static_cast<long long>(seg.size(1)),
              static_cast<long long>(seg.size(2)), static_cast<long long>(seg.size(3)),
              static_cast<long long>(seg.size(4)));
  return 0;
}
