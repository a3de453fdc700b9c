// Runs the LibTorch SwinUNETR on a state dict and an input exported from Python (the tensor-dir
// format of swin_unetr.h) and writes the result, so tests/python/test_swin_unetr.py can compare
// it with MONAI's forward. Float32 on the CPU.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "swin_unetr.h"

namespace {

void usage(const char* argv0) {
  std::printf(
      "usage: %s --weights <dir> --input <dir> --output <dir> [--feature-size N]\n"
      "          [--hidden-states] [--list-keys] [--backward [--checkpoint]]\n"
      "  --weights DIR      MONAI SwinUNETR state dict as a tensor dir (index.txt + data.bin)\n"
      "  --input DIR        tensor dir with a tensor named 'input' (N, C, D, H, W) float32\n"
      "  --output DIR       existing directory; receives 'output' (or hs0..hs4)\n"
      "  --feature-size N   expected feature_size (default: read from the weights)\n"
      "  --hidden-states    run only swinViT (normalize=True) and write its five outputs;\n"
      "                     any spatial size is accepted there, as in MONAI's SwinTransformer\n"
      "  --list-keys        print the model's state-dict keys and shapes (needs --weights);\n"
      "                     with --output, also write its buffers as constructed there\n"
      "  --backward         also back-propagate the input dir's 'grad_output' and write\n"
      "                     'grad_input' and 'grad.<parameter name>' for every parameter\n"
      "  --checkpoint       build the model with use_checkpoint=true (gradient checkpointing)\n"
      "Prints 'parameters <count>' and 'loaded <keys>'.\n",
      argv0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string weights, input, output;
  int64_t feature_size = 0;
  bool hidden = false, list_keys = false, backward = false, checkpoint = false;
  for (int i = 1; i < argc; ++i) {
    auto need = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--weights")) {
      weights = need("--weights");
    } else if (!std::strcmp(argv[i], "--input")) {
      input = need("--input");
    } else if (!std::strcmp(argv[i], "--output")) {
      output = need("--output");
    } else if (!std::strcmp(argv[i], "--feature-size")) {
      feature_size = std::stoll(need("--feature-size"));
    } else if (!std::strcmp(argv[i], "--hidden-states")) {
      hidden = true;
    } else if (!std::strcmp(argv[i], "--backward")) {
      backward = true;
    } else if (!std::strcmp(argv[i], "--checkpoint")) {
      checkpoint = true;
    } else if (!std::strcmp(argv[i], "--list-keys")) {
      list_keys = true;
    } else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "error: unknown argument %s\n", argv[i]);
      usage(argv[0]);
      return 2;
    }
  }
  if (weights.empty() || (!list_keys && (input.empty() || output.empty()))) {
    usage(argv[0]);
    return 2;
  }
  try {
    auto sd = voxaug::models::read_tensor_dir(weights);
    auto need_key = [&](const std::string& k) -> const torch::Tensor& {
      auto it = sd.find(k);
      if (it == sd.end()) throw std::runtime_error("weights lack " + k);
      return it->second;
    };
    voxaug::models::SwinUNETROptions opt;
    const auto& pe = need_key("swinViT.patch_embed.proj.weight");
    opt.feature_size = pe.size(0);
    opt.in_channels = pe.size(1);
    opt.out_channels = need_key("out.conv.conv.weight").size(0);
    if (feature_size != 0 && feature_size != opt.feature_size) {
      throw std::runtime_error("--feature-size " + std::to_string(feature_size) +
                               " but the weights have feature_size " +
                               std::to_string(opt.feature_size));
    }
    opt.use_checkpoint = checkpoint;
    voxaug::models::SwinUNETR net(opt);
    net->eval();
    if (list_keys) {
      if (!output.empty()) {  // the buffers as constructed here, before any loading
        std::map<std::string, torch::Tensor> buffers;
        for (const auto& b : net->named_buffers(true)) buffers[b.key()] = b.value().clone();
        voxaug::models::write_tensor_dir(output, buffers);
      }
      for (const auto& [k, v] : voxaug::models::state_dict(*net)) {
        std::cout << "key " << k;
        for (auto s : v.sizes()) std::cout << ' ' << s;
        std::cout << '\n';
      }
    }
    int64_t nparams = 0;
    for (const auto& p : net->parameters()) nparams += p.numel();
    std::cout << "parameters " << nparams << '\n';
    std::cout << "loaded " << voxaug::models::load_state_dict(*net, sd) << '\n';
    if (list_keys && input.empty()) return 0;

    auto in = voxaug::models::read_tensor_dir(input);
    if (!in.count("input")) throw std::runtime_error("--input dir has no tensor named 'input'");
    auto x = in.at("input");
    if (backward && !in.count("grad_output")) {
      throw std::runtime_error("--backward needs a tensor named 'grad_output' in --input");
    }
    if (backward) x.requires_grad_(true);
    torch::AutoGradMode grad_mode(backward);
    const auto t0 = std::chrono::steady_clock::now();
    std::map<std::string, torch::Tensor> result;
    if (backward) {
      auto y = net->forward(x);
      y.backward(in.at("grad_output"));
      result["output"] = y.detach();
      result["grad_input"] = x.grad();
      for (const auto& p : net->named_parameters(true))
        result["grad." + p.key()] = p.value().grad();
    } else if (hidden) {
      auto hs = net->swinViT->forward(x, opt.normalize);
      for (size_t i = 0; i < hs.size(); ++i) result["hs" + std::to_string(i)] = hs[i];
    } else {
      result["output"] = net->forward(x);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "forward_seconds " << secs << '\n';
    voxaug::models::write_tensor_dir(output, result);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
