// MONAI's SwinUNETR (monai.networks.nets.SwinUNETR, MONAI 1.6.1 defaults) in LibTorch C++.
//
// 3-D only, patch size 2, four Swin stages with shifted-window attention, PatchMerging in MONAI's
// v0.9 "merging" layout, the UNETR convolutional decoder. Module and parameter names reproduce
// MONAI's state-dict keys exactly (swinViT.layers1.0.blocks.0.attn.qkv.weight, encoder1.layer.
// conv1.conv.weight, decoder5.transp_conv.conv.weight, out.conv.conv.weight, ...), including the
// persistent buffer attn.relative_position_index, so a MONAI state dict loads one to one and a
// state dict saved from here loads into MONAI.
//
// Not supported (rejected at construction): spatial_dims=2, use_v2, downsample="mergingv2", the
// Hyena and flash-attention variants, non-zero dropout / drop-path rates, patch_norm.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace voxaug::models {

struct SwinUNETROptions {
  int64_t in_channels = 1;
  int64_t out_channels = 14;
  int64_t feature_size = 24;  // must be divisible by 12 (as MONAI)
  std::array<int64_t, 4> depths{2, 2, 2, 2};
  std::array<int64_t, 4> num_heads{3, 6, 12, 24};
  int64_t window_size = 7;
  double mlp_ratio = 4.0;
  bool qkv_bias = true;
  bool normalize = true;  // layer-normalise (no affine) the hidden states passed to the decoder
  // Gradient checkpointing of each Swin block's two halves (as MONAI's use_checkpoint). Implemented
  // like torch.utils.checkpoint with use_reentrant=True: parameter gradients are accumulated
  // into .grad during the recomputation, so train with loss.backward() (torch::autograd::grad
  // with respect to parameters does not see them).
  bool use_checkpoint = false;
};

namespace swin_detail {

// MONAI's Convolution wrapper: a Sequential whose only child is "conv".
struct ConvWrapImpl : torch::nn::Module {
  ConvWrapImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool bias, bool transposed);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Conv3d conv{nullptr};
  torch::nn::ConvTranspose3d tconv{nullptr};
};
TORCH_MODULE(ConvWrap);

// UnetResBlock (kernel 3, stride 1, instance norm without affine, LeakyReLU 0.01).
struct UnetResBlockImpl : torch::nn::Module {
  UnetResBlockImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  ConvWrap conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
};
TORCH_MODULE(UnetResBlock);

// UnetrBasicBlock(res_block=True): the residual block under the name "layer".
struct UnetrBasicBlockImpl : torch::nn::Module {
  UnetrBasicBlockImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  UnetResBlock layer{nullptr};
};
TORCH_MODULE(UnetrBasicBlock);

// UnetrUpBlock(res_block=True): transposed conv (k=2, s=2, no bias), concat skip, residual block.
struct UnetrUpBlockImpl : torch::nn::Module {
  UnetrUpBlockImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& skip);
  ConvWrap transp_conv{nullptr};
  UnetResBlock conv_block{nullptr};
};
TORCH_MODULE(UnetrUpBlock);

struct PatchEmbedImpl : torch::nn::Module {
  PatchEmbedImpl(int64_t in, int64_t embed, int64_t patch);
  torch::Tensor forward(torch::Tensor x);  // (B, C, D, H, W) -> (B, E, D/2, H/2, W/2)
  int64_t patch;
  torch::nn::Conv3d proj{nullptr};
};
TORCH_MODULE(PatchEmbed);

struct WindowAttentionImpl : torch::nn::Module {
  WindowAttentionImpl(int64_t dim, int64_t heads, int64_t window, bool qkv_bias);
  // x: (B*nW, N, C); mask: (nW, N, N) or undefined.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  int64_t dim, heads;
  double scale;
  torch::Tensor relative_position_bias_table, relative_position_index;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
};
TORCH_MODULE(WindowAttention);

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear linear1{nullptr}, linear2{nullptr};
};
TORCH_MODULE(Mlp);

struct SwinBlockImpl : torch::nn::Module {
  SwinBlockImpl(int64_t dim, int64_t heads, int64_t window, int64_t shift, double mlp_ratio,
                bool qkv_bias, bool use_checkpoint);
  // x: (B, D, H, W, C) channels-last.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  torch::Tensor part1(const torch::Tensor& x, const torch::Tensor& mask);
  torch::Tensor part2(const torch::Tensor& x);
  int64_t window, shift;
  bool use_checkpoint;
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  WindowAttention attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(SwinBlock);

// MONAI's PatchMerging (v0.9 layout, the default "merging").
struct PatchMergingImpl : torch::nn::Module {
  explicit PatchMergingImpl(int64_t dim);
  torch::Tensor forward(torch::Tensor x);  // (B, D, H, W, C) -> (B, ceil(D/2), .., 2C)
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear reduction{nullptr};
};
TORCH_MODULE(PatchMerging);

struct BasicLayerImpl : torch::nn::Module {
  BasicLayerImpl(int64_t dim, int64_t depth, int64_t heads, int64_t window, double mlp_ratio,
                 bool qkv_bias, bool use_checkpoint);
  torch::Tensor forward(const torch::Tensor& x);  // (B, C, D, H, W) -> (B, 2C, ceil(D/2), ...)
  int64_t window;
  torch::nn::ModuleList blocks{nullptr};
  PatchMerging downsample{nullptr};
};
TORCH_MODULE(BasicLayer);

struct SwinTransformerImpl : torch::nn::Module {
  explicit SwinTransformerImpl(const SwinUNETROptions& o);
  // The five hidden states [x0_out .. x4_out] of MONAI's SwinTransformer.forward.
  std::vector<torch::Tensor> forward(const torch::Tensor& x, bool normalize);
  PatchEmbed patch_embed{nullptr};
  torch::nn::ModuleList layers1{nullptr}, layers2{nullptr}, layers3{nullptr}, layers4{nullptr};
};
TORCH_MODULE(SwinTransformer);

// MONAI's compute_mask for a padded feature map of size dims (attention mask of the shifted
// windows: 0 within a region, -100 across regions), shape (nW, N, N).
torch::Tensor compute_mask(std::array<int64_t, 3> dims, std::array<int64_t, 3> window,
                           std::array<int64_t, 3> shift, const torch::Device& device);

}  // namespace swin_detail

struct SwinUNETRImpl : torch::nn::Module {
  explicit SwinUNETRImpl(const SwinUNETROptions& options);
  // x: (B, in_channels, D, H, W), every spatial size divisible by 32 (as MONAI checks).
  torch::Tensor forward(const torch::Tensor& x);

  SwinUNETROptions options;
  swin_detail::SwinTransformer swinViT{nullptr};
  swin_detail::UnetrBasicBlock encoder1{nullptr}, encoder2{nullptr}, encoder3{nullptr},
      encoder4{nullptr}, encoder10{nullptr};
  swin_detail::UnetrUpBlock decoder5{nullptr}, decoder4{nullptr}, decoder3{nullptr},
      decoder2{nullptr}, decoder1{nullptr};
  swin_detail::ConvWrap out{nullptr};  // UnetOutBlock: 1x1x1 conv with bias, named out.conv.conv
};
TORCH_MODULE(SwinUNETR);

// The module's state dict (parameters and persistent buffers) under MONAI's key names.
std::map<std::string, torch::Tensor> state_dict(const torch::nn::Module& module);

// Copies `tensors` into the module's parameters and buffers. Throws (listing the keys) when a key
// of the module is missing from `tensors`, when `tensors` holds a key the module does not have, or
// when a shape differs. Returns the number of tensors loaded.
size_t load_state_dict(torch::nn::Module& module,
                       const std::map<std::string, torch::Tensor>& tensors);

// A plain tensor-archive format shared with Python (tests/python/test_swin_unetr.py writes and
// reads it with numpy): `<dir>/index.txt` has one line per tensor, "name dtype offset ndim
// d0 d1 ...", dtype one of float32 / int64, offset in bytes into `<dir>/data.bin` (little-endian,
// C order). Loading returns CPU tensors.
std::map<std::string, torch::Tensor> read_tensor_dir(const std::string& dir);
void write_tensor_dir(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors);

}  // namespace voxaug::models
