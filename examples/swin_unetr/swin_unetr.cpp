// MONAI SwinUNETR in LibTorch C++: see swin_unetr.h. Every forward mirrors the operation order of
// monai/networks/nets/swin_unetr.py (MONAI 1.6.1) so float32 results agree to rounding.
#include "swin_unetr.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>

namespace voxaug::models {
namespace swin_detail {
namespace {

namespace F = torch::nn::functional;
using torch::indexing::None;
using torch::indexing::Slice;

torch::Tensor instance_norm(const torch::Tensor& x) {
  // InstanceNorm3d(affine=False, track_running_stats=False), eps 1e-5.
  return torch::instance_norm(x, {}, {}, {}, {}, /*use_input_stats=*/true, /*momentum=*/0.1,
                              /*eps=*/1e-5, /*cudnn_enabled=*/false);
}

torch::Tensor lrelu(const torch::Tensor& x) {
  return torch::leaky_relu(x, 0.01);
}

// MONAI's get_window_size: a dimension no larger than the window uses its own size as the
// window and no shift.
void clamp_window(const std::array<int64_t, 3>& size, int64_t window, int64_t shift,
                  std::array<int64_t, 3>& ws, std::array<int64_t, 3>& ss) {
  for (int i = 0; i < 3; ++i) {
    ws[i] = size[i] <= window ? size[i] : window;
    ss[i] = size[i] <= window ? 0 : shift;
  }
}

torch::Tensor window_partition(const torch::Tensor& x, const std::array<int64_t, 3>& ws) {
  const int64_t b = x.size(0), d = x.size(1), h = x.size(2), w = x.size(3), c = x.size(4);
  return x.view({b, d / ws[0], ws[0], h / ws[1], ws[1], w / ws[2], ws[2], c})
      .permute({0, 1, 3, 5, 2, 4, 6, 7})
      .contiguous()
      .view({-1, ws[0] * ws[1] * ws[2], c});
}

torch::Tensor window_reverse(const torch::Tensor& windows, const std::array<int64_t, 3>& ws,
                             int64_t b, int64_t d, int64_t h, int64_t w) {
  return windows.view({b, d / ws[0], h / ws[1], w / ws[2], ws[0], ws[1], ws[2], -1})
      .permute({0, 1, 4, 2, 5, 3, 6, 7})
      .contiguous()
      .view({b, d, h, w, -1});
}

// Python slice bounds on a length-n axis: negative indices count from the end, then clamp.
int64_t py_index(int64_t i, int64_t n) {
  if (i < 0) i += n;
  return std::clamp<int64_t>(i, 0, n);
}

// The three slices of compute_mask along one axis, exactly as Python evaluates
// slice(-ws), slice(-ws, -s), slice(-s, None) (note -0 == 0 when s == 0).
std::array<std::pair<int64_t, int64_t>, 3> mask_slices(int64_t n, int64_t ws, int64_t s) {
  return {std::make_pair(int64_t{0}, py_index(-ws, n)),
          std::make_pair(py_index(-ws, n), py_index(-s, n)), std::make_pair(py_index(-s, n), n)};
}

// Layer norm over channels without affine parameters (SwinTransformer.proj_out).
torch::Tensor proj_out(const torch::Tensor& x, bool normalize) {
  if (!normalize) return x;
  const int64_t ch = x.size(1);
  auto y = x.permute({0, 2, 3, 4, 1});
  y = torch::layer_norm(y, {ch}, {}, {}, 1e-5);
  return y.permute({0, 4, 1, 2, 3});
}

// Gradient checkpointing (torch.utils.checkpoint, reentrant flavour): the forward runs without
// recording; the backward recomputes with recording and back-propagates through the recomputed
// graph, which accumulates the parameters' .grad and yields the input's gradient.
struct FnHolder : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               c10::intrusive_ptr<FnHolder> holder, const torch::Tensor& x) {
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->save_for_backward({x});
    torch::NoGradGuard no_grad;
    return holder->fn(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = holder->fn(x);
    }
    torch::autograd::backward({y}, {grads[0]});
    return {torch::Tensor(), x.grad()};
  }
};

torch::Tensor checkpointed(std::function<torch::Tensor(const torch::Tensor&)> fn,
                           const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled()) return fn(x);
  auto holder = c10::make_intrusive<FnHolder>();
  holder->fn = std::move(fn);
  return CheckpointFunction::apply(holder, x);
}

}  // namespace

ConvWrapImpl::ConvWrapImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride, bool bias,
                           bool transposed) {
  // MONAI's get_padding / get_output_padding: padding (k - s + 1) / 2, output padding
  // 2p + s - k (both 0 for the k=2, s=2 upsampling used here).
  const int64_t pad = (kernel - stride + 1) / 2;
  if (transposed) {
    tconv = register_module(
        "conv", torch::nn::ConvTranspose3d(torch::nn::ConvTranspose3dOptions(in, out, kernel)
                                               .stride(stride)
                                               .padding(pad)
                                               .output_padding(2 * pad + stride - kernel)
                                               .bias(bias)));
  } else {
    conv = register_module(
        "conv",
        torch::nn::Conv3d(
            torch::nn::Conv3dOptions(in, out, kernel).stride(stride).padding(pad).bias(bias)));
  }
}

torch::Tensor ConvWrapImpl::forward(const torch::Tensor& x) {
  return tconv ? tconv->forward(x) : conv->forward(x);
}

UnetResBlockImpl::UnetResBlockImpl(int64_t in, int64_t out) {
  conv1 = register_module("conv1", ConvWrap(in, out, 3, 1, false, false));
  conv2 = register_module("conv2", ConvWrap(out, out, 3, 1, false, false));
  if (in != out) conv3 = register_module("conv3", ConvWrap(in, out, 1, 1, false, false));
}

torch::Tensor UnetResBlockImpl::forward(const torch::Tensor& x) {
  auto out = lrelu(instance_norm(conv1->forward(x)));
  out = instance_norm(conv2->forward(out));
  auto residual = conv3 ? instance_norm(conv3->forward(x)) : x;
  return lrelu(out + residual);
}

UnetrBasicBlockImpl::UnetrBasicBlockImpl(int64_t in, int64_t out) {
  layer = register_module("layer", UnetResBlock(in, out));
}

torch::Tensor UnetrBasicBlockImpl::forward(const torch::Tensor& x) {
  return layer->forward(x);
}

UnetrUpBlockImpl::UnetrUpBlockImpl(int64_t in, int64_t out) {
  transp_conv = register_module("transp_conv", ConvWrap(in, out, 2, 2, false, true));
  conv_block = register_module("conv_block", UnetResBlock(2 * out, out));
}

torch::Tensor UnetrUpBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& skip) {
  auto up = transp_conv->forward(x);
  return conv_block->forward(torch::cat({up, skip}, 1));
}

PatchEmbedImpl::PatchEmbedImpl(int64_t in, int64_t embed, int64_t patch_) : patch(patch_) {
  proj = register_module(
      "proj", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, embed, patch).stride(patch)));
}

torch::Tensor PatchEmbedImpl::forward(torch::Tensor x) {
  const int64_t d = x.size(2), h = x.size(3), w = x.size(4);
  if (w % patch != 0) x = torch::constant_pad_nd(x, {0, patch - w % patch});
  if (h % patch != 0) x = torch::constant_pad_nd(x, {0, 0, 0, patch - h % patch});
  if (d % patch != 0) x = torch::constant_pad_nd(x, {0, 0, 0, 0, 0, patch - d % patch});
  return proj->forward(x);
}

WindowAttentionImpl::WindowAttentionImpl(int64_t dim_, int64_t heads_, int64_t window,
                                         bool qkv_bias)
    : dim(dim_), heads(heads_), scale(std::pow(static_cast<double>(dim_ / heads_), -0.5)) {
  const int64_t m = 2 * window - 1;
  relative_position_bias_table =
      register_parameter("relative_position_bias_table", torch::zeros({m * m * m, heads}));
  {
    torch::NoGradGuard g;
    relative_position_bias_table.normal_(0.0, 0.02).clamp_(-2.0, 2.0);  // trunc_normal_(std=.02)
  }
  auto ar = torch::arange(window, torch::kLong);
  auto grids = torch::meshgrid({ar, ar, ar}, "ij");
  auto coords = torch::stack(grids).flatten(1);  // (3, N)
  auto rel = (coords.unsqueeze(2) - coords.unsqueeze(1)).permute({1, 2, 0}).contiguous();
  rel.select(2, 0).add_(window - 1).mul_(m * m);
  rel.select(2, 1).add_(window - 1).mul_(m);
  rel.select(2, 2).add_(window - 1);
  relative_position_index = register_buffer("relative_position_index", rel.sum(-1));
  qkv = register_module("qkv",
                        torch::nn::Linear(torch::nn::LinearOptions(dim, 3 * dim).bias(qkv_bias)));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor WindowAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const int64_t b = x.size(0), n = x.size(1), c = x.size(2);
  auto qkv_ = qkv->forward(x).reshape({b, n, 3, heads, c / heads}).permute({2, 0, 3, 1, 4});
  auto q = qkv_[0], k = qkv_[1], v = qkv_[2];
  // MONAI indexes the full-window table with index[:n, :n] even when the window was clamped.
  auto idx = relative_position_index.index({Slice(None, n), Slice(None, n)}).reshape(-1);
  auto bias = relative_position_bias_table.index_select(0, idx).reshape({n, n, -1});
  bias = bias.permute({2, 0, 1}).contiguous();
  q = q * scale;
  auto attn = torch::matmul(q, k.transpose(-2, -1));
  attn = attn + bias.unsqueeze(0);
  if (mask.defined()) {
    const int64_t nw = mask.size(0);
    attn = attn.view({b / nw, nw, heads, n, n}) + mask.unsqueeze(1).unsqueeze(0);
    attn = attn.view({-1, heads, n, n});
  }
  attn = torch::softmax(attn, -1).to(v.scalar_type());
  auto y = torch::matmul(attn, v).transpose(1, 2).reshape({b, n, c});
  return proj->forward(y);
}

MlpImpl::MlpImpl(int64_t dim, int64_t hidden) {
  linear1 = register_module("linear1", torch::nn::Linear(dim, hidden));
  linear2 = register_module("linear2", torch::nn::Linear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return linear2->forward(torch::gelu(linear1->forward(x)));
}

SwinBlockImpl::SwinBlockImpl(int64_t dim, int64_t heads, int64_t window_, int64_t shift_,
                             double mlp_ratio, bool qkv_bias, bool use_checkpoint_)
    : window(window_), shift(shift_), use_checkpoint(use_checkpoint_) {
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  attn = register_module("attn", WindowAttention(dim, heads, window, qkv_bias));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  mlp = register_module("mlp", Mlp(dim, static_cast<int64_t>(dim * mlp_ratio)));
}

torch::Tensor SwinBlockImpl::part1(const torch::Tensor& x_in, const torch::Tensor& mask) {
  auto x = norm1->forward(x_in);
  const int64_t b = x.size(0), d = x.size(1), h = x.size(2), w = x.size(3), c = x.size(4);
  std::array<int64_t, 3> ws{}, ss{};
  clamp_window({d, h, w}, window, shift, ws, ss);
  const int64_t pad_d1 = (ws[0] - d % ws[0]) % ws[0];
  const int64_t pad_b = (ws[1] - h % ws[1]) % ws[1];
  const int64_t pad_r = (ws[2] - w % ws[2]) % ws[2];
  x = torch::constant_pad_nd(x, {0, 0, 0, pad_r, 0, pad_b, 0, pad_d1});
  const int64_t dp = x.size(1), hp = x.size(2), wp = x.size(3);
  const bool shifted = ss[0] > 0 || ss[1] > 0 || ss[2] > 0;
  torch::Tensor shifted_x = shifted ? torch::roll(x, {-ss[0], -ss[1], -ss[2]}, {1, 2, 3}) : x;
  auto windows = window_partition(shifted_x, ws);
  auto attn_windows = attn->forward(windows, shifted ? mask : torch::Tensor());
  attn_windows = attn_windows.view({-1, ws[0], ws[1], ws[2], c});
  shifted_x = window_reverse(attn_windows, ws, b, dp, hp, wp);
  x = shifted ? torch::roll(shifted_x, {ss[0], ss[1], ss[2]}, {1, 2, 3}) : shifted_x;
  if (pad_d1 > 0 || pad_r > 0 || pad_b > 0) {
    x = x.index({Slice(), Slice(None, d), Slice(None, h), Slice(None, w), Slice()}).contiguous();
  }
  return x;
}

torch::Tensor SwinBlockImpl::part2(const torch::Tensor& x) {
  return mlp->forward(norm2->forward(x));
}

torch::Tensor SwinBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  if (use_checkpoint) {
    auto y = x + checkpointed([this, mask](const torch::Tensor& t) { return part1(t, mask); }, x);
    return y + checkpointed([this](const torch::Tensor& t) { return part2(t); }, y);
  }
  auto y = x + part1(x, mask);
  return y + part2(y);
}

PatchMergingImpl::PatchMergingImpl(int64_t dim) {
  // Registration order as MONAI's PatchMergingV2.__init__: reduction, then norm.
  reduction = register_module(
      "reduction", torch::nn::Linear(torch::nn::LinearOptions(8 * dim, 2 * dim).bias(false)));
  norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({8 * dim})));
}

torch::Tensor PatchMergingImpl::forward(torch::Tensor x) {
  const int64_t d = x.size(1), h = x.size(2), w = x.size(3);
  if (d % 2 == 1 || h % 2 == 1 || w % 2 == 1) {
    x = torch::constant_pad_nd(x, {0, 0, 0, w % 2, 0, h % 2, 0, d % 2});
  }
  auto s = [&](int64_t i, int64_t j, int64_t k) {
    return x.index({Slice(), Slice(i, None, 2), Slice(j, None, 2), Slice(k, None, 2), Slice()});
  };
  // MONAI's v0.9 order (differs from PatchMergingV2's itertools.product order).
  x = torch::cat({s(0, 0, 0), s(1, 0, 0), s(0, 1, 0), s(0, 0, 1), s(1, 1, 0), s(1, 0, 1),
                  s(0, 1, 1), s(1, 1, 1)},
                 -1);
  return reduction->forward(norm->forward(x));
}

BasicLayerImpl::BasicLayerImpl(int64_t dim, int64_t depth, int64_t heads, int64_t window_,
                               double mlp_ratio, bool qkv_bias, bool use_checkpoint)
    : window(window_) {
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < depth; ++i) {
    blocks->push_back(SwinBlock(dim, heads, window, i % 2 == 0 ? 0 : window / 2, mlp_ratio,
                                qkv_bias, use_checkpoint));
  }
  downsample = register_module("downsample", PatchMerging(dim));
}

torch::Tensor BasicLayerImpl::forward(const torch::Tensor& x_in) {
  const int64_t b = x_in.size(0), d = x_in.size(2), h = x_in.size(3), w = x_in.size(4);
  std::array<int64_t, 3> ws{}, ss{};
  clamp_window({d, h, w}, window, window / 2, ws, ss);
  auto x = x_in.permute({0, 2, 3, 4, 1});
  const std::array<int64_t, 3> padded{(d + ws[0] - 1) / ws[0] * ws[0],
                                      (h + ws[1] - 1) / ws[1] * ws[1],
                                      (w + ws[2] - 1) / ws[2] * ws[2]};
  auto mask = compute_mask(padded, ws, ss, x.device());
  for (const auto& blk : *blocks) x = blk->as<SwinBlock>()->forward(x, mask);
  x = x.reshape({b, d, h, w, -1});
  x = downsample->forward(x);
  return x.permute({0, 4, 1, 2, 3});
}

SwinTransformerImpl::SwinTransformerImpl(const SwinUNETROptions& o) {
  patch_embed = register_module("patch_embed", PatchEmbed(o.in_channels, o.feature_size, 2));
  torch::nn::ModuleList* lists[4] = {&layers1, &layers2, &layers3, &layers4};
  for (int i = 0; i < 4; ++i) {
    *lists[i] = register_module("layers" + std::to_string(i + 1), torch::nn::ModuleList());
    (*lists[i])->push_back(BasicLayer(o.feature_size << i, o.depths[i], o.num_heads[i],
                                      o.window_size, o.mlp_ratio, o.qkv_bias, o.use_checkpoint));
  }
}

std::vector<torch::Tensor> SwinTransformerImpl::forward(const torch::Tensor& x, bool normalize) {
  std::vector<torch::Tensor> outs;
  auto h = patch_embed->forward(x);
  outs.push_back(proj_out(h, normalize));
  for (auto* list : {&layers1, &layers2, &layers3, &layers4}) {
    h = (**list)[0]->as<BasicLayer>()->forward(h.contiguous());
    outs.push_back(proj_out(h, normalize));
  }
  return outs;
}

torch::Tensor compute_mask(std::array<int64_t, 3> dims, std::array<int64_t, 3> window,
                           std::array<int64_t, 3> shift, const torch::Device& device) {
  auto img_mask = torch::zeros({1, dims[0], dims[1], dims[2], 1});
  float cnt = 0;
  for (auto [d0, d1] : mask_slices(dims[0], window[0], shift[0])) {
    for (auto [h0, h1] : mask_slices(dims[1], window[1], shift[1])) {
      for (auto [w0, w1] : mask_slices(dims[2], window[2], shift[2])) {
        if (d1 > d0 && h1 > h0 && w1 > w0) {
          img_mask.index_put_({Slice(), Slice(d0, d1), Slice(h0, h1), Slice(w0, w1), Slice()}, cnt);
        }
        cnt += 1;
      }
    }
  }
  auto mw = window_partition(img_mask, window).squeeze(-1);
  auto attn_mask = mw.unsqueeze(1) - mw.unsqueeze(2);
  attn_mask = attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0);
  return attn_mask.to(device);
}

}  // namespace swin_detail

SwinUNETRImpl::SwinUNETRImpl(const SwinUNETROptions& o) : options(o) {
  using namespace swin_detail;
  TORCH_CHECK(o.feature_size > 0 && o.feature_size % 12 == 0,
              "SwinUNETR: feature_size must be a positive multiple of 12, got ", o.feature_size);
  TORCH_CHECK(o.in_channels > 0 && o.out_channels > 0,
              "SwinUNETR: in_channels and out_channels must be positive, got ", o.in_channels,
              " and ", o.out_channels);
  TORCH_CHECK(o.window_size > 0, "SwinUNETR: window_size must be positive, got ", o.window_size);
  for (int i = 0; i < 4; ++i) {
    TORCH_CHECK(o.depths[i] > 0 && o.num_heads[i] > 0,
                "SwinUNETR: depths and num_heads must be positive (stage ", i, ")");
    TORCH_CHECK((o.feature_size << i) % o.num_heads[i] == 0, "SwinUNETR: stage ", i, " dimension ",
                o.feature_size << i, " is not divisible by num_heads ", o.num_heads[i]);
  }
  const int64_t f = o.feature_size;
  swinViT = register_module("swinViT", SwinTransformer(o));
  encoder1 = register_module("encoder1", UnetrBasicBlock(o.in_channels, f));
  encoder2 = register_module("encoder2", UnetrBasicBlock(f, f));
  encoder3 = register_module("encoder3", UnetrBasicBlock(2 * f, 2 * f));
  encoder4 = register_module("encoder4", UnetrBasicBlock(4 * f, 4 * f));
  encoder10 = register_module("encoder10", UnetrBasicBlock(16 * f, 16 * f));
  decoder5 = register_module("decoder5", UnetrUpBlock(16 * f, 8 * f));
  decoder4 = register_module("decoder4", UnetrUpBlock(8 * f, 4 * f));
  decoder3 = register_module("decoder3", UnetrUpBlock(4 * f, 2 * f));
  decoder2 = register_module("decoder2", UnetrUpBlock(2 * f, f));
  decoder1 = register_module("decoder1", UnetrUpBlock(f, f));
  // UnetOutBlock: Convolution(conv_only=False, act=None, norm=None) -> "conv.conv".
  auto out_block = std::make_shared<torch::nn::Module>();
  out = ConvWrap(f, o.out_channels, 1, 1, true, false);
  out_block->register_module("conv", out);
  register_module("out", out_block);
}

torch::Tensor SwinUNETRImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 5, "SwinUNETR: x must be 5-D (N, C, D, H, W), got ", x.dim(), "-D");
  TORCH_CHECK(x.size(1) == options.in_channels, "SwinUNETR: x must have ", options.in_channels,
              " channels, got ", x.size(1));
  for (int i = 2; i < 5; ++i) {
    TORCH_CHECK(x.size(i) % 32 == 0, "SwinUNETR: spatial dimension ", i, " of x (size ", x.size(i),
                ") must be divisible by 2**5 = 32 (as MONAI's SwinUNETR)");
  }
  auto hs = swinViT->forward(x, options.normalize);
  auto enc0 = encoder1->forward(x);
  auto enc1 = encoder2->forward(hs[0]);
  auto enc2 = encoder3->forward(hs[1]);
  auto enc3 = encoder4->forward(hs[2]);
  auto dec4 = encoder10->forward(hs[4]);
  auto dec3 = decoder5->forward(dec4, hs[3]);
  auto dec2 = decoder4->forward(dec3, enc3);
  auto dec1 = decoder3->forward(dec2, enc2);
  auto dec0 = decoder2->forward(dec1, enc1);
  auto y = decoder1->forward(dec0, enc0);
  return out->forward(y);
}

std::map<std::string, torch::Tensor> state_dict(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> sd;
  for (const auto& p : module.named_parameters(true)) sd[p.key()] = p.value();
  for (const auto& b : module.named_buffers(true)) sd[b.key()] = b.value();
  return sd;
}

size_t load_state_dict(torch::nn::Module& module,
                       const std::map<std::string, torch::Tensor>& tensors) {
  auto own = state_dict(module);
  std::ostringstream err;
  for (const auto& [k, v] : own) {
    auto it = tensors.find(k);
    if (it == tensors.end()) {
      err << "  missing key: " << k << "\n";
    } else if (it->second.sizes() != v.sizes()) {
      err << "  shape mismatch for " << k << ": expected " << v.sizes() << ", got "
          << it->second.sizes() << "\n";
    }
  }
  for (const auto& kv : tensors) {
    if (!own.count(kv.first)) err << "  unexpected key: " << kv.first << "\n";
  }
  if (!err.str().empty()) throw std::runtime_error("load_state_dict failed:\n" + err.str());
  torch::NoGradGuard g;
  for (auto& [k, v] : own) v.copy_(tensors.at(k));
  return own.size();
}

std::map<std::string, torch::Tensor> read_tensor_dir(const std::string& dir) {
  std::ifstream index(dir + "/index.txt");
  if (!index) throw std::runtime_error("read_tensor_dir: cannot open " + dir + "/index.txt");
  std::ifstream data(dir + "/data.bin", std::ios::binary);
  if (!data) throw std::runtime_error("read_tensor_dir: cannot open " + dir + "/data.bin");
  std::map<std::string, torch::Tensor> out;
  std::string line;
  while (std::getline(index, line)) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    std::string name, dtype;
    int64_t offset = 0, ndim = 0;
    ls >> name >> dtype >> offset >> ndim;
    std::vector<int64_t> shape(static_cast<size_t>(std::max<int64_t>(ndim, 0)));
    for (auto& s : shape) ls >> s;
    if (!ls || ndim < 0) throw std::runtime_error("read_tensor_dir: malformed line: " + line);
    torch::ScalarType st;
    if (dtype == "float32") {
      st = torch::kFloat;
    } else if (dtype == "int64") {
      st = torch::kLong;
    } else {
      throw std::runtime_error("read_tensor_dir: dtype must be float32 or int64, got " + dtype);
    }
    auto t = torch::empty(shape, torch::TensorOptions().dtype(st));
    data.seekg(offset);
    data.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!data) throw std::runtime_error("read_tensor_dir: data.bin too short for " + name);
    out[name] = t;
  }
  return out;
}

void write_tensor_dir(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors) {
  std::ofstream index(dir + "/index.txt");
  std::ofstream data(dir + "/data.bin", std::ios::binary);
  if (!index || !data) throw std::runtime_error("write_tensor_dir: cannot write into " + dir);
  int64_t offset = 0;
  for (const auto& [name, t0] : tensors) {
    auto t = t0.detach().to(torch::kCPU).contiguous();
    std::string dtype;
    if (t.scalar_type() == torch::kLong) {
      dtype = "int64";
    } else {
      t = t.to(torch::kFloat);
      dtype = "float32";
    }
    index << name << ' ' << dtype << ' ' << offset << ' ' << t.dim();
    for (auto s : t.sizes()) index << ' ' << s;
    index << '\n';
    data.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    offset += static_cast<int64_t>(t.nbytes());
  }
  if (!index || !data) throw std::runtime_error("write_tensor_dir: write failed in " + dir);
}

}  // namespace voxaug::models
