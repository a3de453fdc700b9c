// voxaug torch_ext: the Autograd kernel of ops that have no backward. Without one, PyTorch's
// autograd fallback lets a tensor that requires grad through and only warns when backward
// reaches the op, so the input's gradient goes missing silently. These ops refuse instead,
// naming the argument, and otherwise run below autograd (in-place ops also bump the version
// of what they mutate, as ADInplaceOrView does for built-in ops).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <vector>

namespace voxaug::torch_ext {

// A backward's result when only its first input is differentiable: `grad`, then `rest`
// undefined gradients (the other inputs: tables, seeds, options).
inline torch::autograd::variable_list first_grad_only(at::Tensor grad, size_t rest) {
  torch::autograd::variable_list out(rest + 1);
  out[0] = std::move(grad);
  return out;
}

// Whether `v` (a Tensor, Tensor[] or Tensor?[] argument) holds a tensor that requires grad.
inline bool requires_grad_arg(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() && v.toTensor().requires_grad();
  if (v.isList())
    for (const c10::IValue& e : v.toListRef())
      if (requires_grad_arg(e)) return true;
  return false;
}

inline void no_backward_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                               torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t n = args.size(), first = stack->size() - n;
  std::vector<at::Tensor> mutated;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = (*stack)[first + i];
    TORCH_CHECK(!(at::GradMode::is_enabled() && requires_grad_arg(v)), op.schema().name(),
                ": argument '", args[i].name(),
                "' requires grad, but this op is not differentiable (it has no backward: voxaug's "
                "augmentation ops are for no-grad data pipelines); detach it or run the op under "
                "torch.no_grad()");
    if (args[i].alias_info() && args[i].alias_info()->isWrite() && v.isTensor())
      mutated.push_back(v.toTensor());
  }
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.redispatchBoxed(ks & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : mutated) torch::autograd::impl::bump_version(t);
}

// Registers no_backward_kernel as the Autograd kernel of each named op.
template <size_t K>
void register_no_backward(torch::Library& m, const char* const (&names)[K]) {
  for (const char* name : names)
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&no_backward_kernel>());
}

}  // namespace voxaug::torch_ext
