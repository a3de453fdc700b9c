// voxaug torch_ext: the resample forward shared by the spatial (resample) and deform ops.
#pragma once

#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "voxaug/deform.h"
#include "voxaug/intensity.h"

namespace voxaug::torch_ext {

// A chain's list form (the pointwise_chain op's ops / flags / params / seeds / values) ->
// core steps for the batch `image` (torch_ext/intensity.cpp); `keep` holds converted
// per-sample tensors alive for the launch.
std::vector<PointwiseStep> decode_chain(const at::Tensor& image, at::IntArrayRef ops,
                                        at::IntArrayRef flags, at::ArrayRef<double> params,
                                        at::IntArrayRef seeds,
                                        const c10::List<std::optional<at::Tensor>>& values,
                                        std::vector<at::Tensor>& keep);

// ResampleTarget::post for one input of a launch.
struct PostSteps {
  int64_t input = -1;
  std::vector<PointwiseStep> steps;
  uint32_t first_sample = 0;
};

// Checks the arguments, prefilters B-spline inputs, allocates the outputs and runs one gather
// for all inputs (through `field` when it is not null). CPU and CUDA.
std::vector<at::Tensor> resample_forward(at::TensorList inputs, const at::Tensor& matrices,
                                         at::IntArrayRef out_size, at::IntArrayRef modes,
                                         at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                         bool align_corners, const DeformField* field,
                                         int64_t group = 1, const PostSteps* post = nullptr);

// The Meta form: checks and allocates.
std::vector<at::Tensor> resample_meta(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool align_corners);
// The same for `group` output samples per input sample (include/voxaug/resample.h).
std::vector<at::Tensor> resample_meta_grouped(at::TensorList inputs, const at::Tensor& matrices,
                                              at::IntArrayRef out_size, at::IntArrayRef modes,
                                              at::IntArrayRef paddings,
                                              at::ArrayRef<double> pad_values, int64_t group);

// K patches per input volume (resample_patches, resample_deformed with starts): starts (M, K,
// 3) integer crop starts on the inputs' device, matrices (M * K, 3, 4) in patch coordinates;
// returns the float64 matrices with each patch's start added to the offsets, on the device (no
// host sync; `meta`: checks only). patch_group: K.
at::Tensor patch_matrices(at::TensorList inputs, const at::Tensor& matrices,
                          const at::Tensor& starts, bool meta);
int64_t patch_group(const at::Tensor& starts);

}  // namespace voxaug::torch_ext
