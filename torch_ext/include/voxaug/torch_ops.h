// voxaug::torch -- C++ entry points to the torch.ops.voxaug custom ops for LibTorch
// programs. Each call goes through the dispatcher, so CPU/CUDA/Meta and autograd all apply.
// Images are 5-D (N, C, D, H, W). CUDA tensors run on the current stream; nothing syncs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace voxaug::ops {

at::Tensor scale_intensity_range(const at::Tensor& image, double a_min, double a_max,
                                 std::optional<double> b_min, std::optional<double> b_max,
                                 bool clip, std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor shift_intensity(const at::Tensor& image, const at::Tensor& offsets);
at::Tensor scale_intensity(const at::Tensor& image, const at::Tensor& factors,
                           std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor rand_shift_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise = false, int64_t first_sample = 0);
at::Tensor rand_scale_intensity(const at::Tensor& image, double low, double high, double prob,
                                int64_t seed, bool channel_wise = false, int64_t first_sample = 0,
                                std::optional<c10::ScalarType> dtype = std::nullopt);
at::Tensor rand_gaussian_noise(const at::Tensor& image, double mean, double std, bool sample_std,
                               double prob, int64_t seed, int64_t first_sample = 0,
                               std::optional<c10::ScalarType> dtype = std::nullopt);

// The phantom family (include/voxaug/phantom.h): image float32 (N, 1, D, H, W) in HU and label
// uint8 (N, 1, D, H, W) in [0, num_classes - 1] on `device` (cpu or cuda, the current stream,
// no host sync); sample n is subject first_sample + n.
std::tuple<at::Tensor, at::Tensor> phantom(int64_t batch, at::IntArrayRef size,
                                           int64_t num_classes, int64_t seed,
                                           int64_t first_sample, at::Device device);
// The (N, 25 + 36 num_classes) float32 parameter table phantom renders from.
at::Tensor phantom_params(int64_t batch, int64_t num_classes, int64_t seed, int64_t first_sample,
                          at::Device device);

}  // namespace voxaug::ops
