// voxaug torch_ext: the resample forward shared by the spatial (resample) and deform ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "voxaug/deform.h"

namespace voxaug::torch_ext {

// Checks the arguments, prefilters cubic inputs, allocates the outputs and runs one gather
// for all inputs (through `field` when it is not null). CPU and CUDA.
std::vector<at::Tensor> resample_forward(at::TensorList inputs, const at::Tensor& matrices,
                                         at::IntArrayRef out_size, at::IntArrayRef modes,
                                         at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                         bool align_corners, const DeformField* field,
                                         int64_t group = 1);

// The Meta form: checks and allocates.
std::vector<at::Tensor> resample_meta(at::TensorList inputs, const at::Tensor& matrices,
                                      at::IntArrayRef out_size, at::IntArrayRef modes,
                                      at::IntArrayRef paddings, at::ArrayRef<double> pad_values,
                                      bool align_corners);

}  // namespace voxaug::torch_ext
