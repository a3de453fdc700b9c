// voxaug torch_ext: the phantom family's ops (include/voxaug/phantom.h). Neither op takes a
// tensor, so the dispatcher cannot pick a backend from its arguments: a BackendSelect kernel
// computes the dispatch key from `device` (as ATen's factory functions do, the thread's
// included / excluded keys applied) and redispatches to the CPU or CUDA kernel. CUDA runs on the
// current stream without host synchronisation. The fake (and Meta) kernel is registered from
// Python (python/voxaug/phantom.py, torch.library.register_fake): FakeTensorMode cannot place the
// outputs of a C++ Meta kernel of an op without tensor inputs and two outputs on a device.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "tensor_view.h"
#include "voxaug/phantom.h"

namespace voxaug::torch_ext {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using PhantomSig = Pair(int64_t, at::IntArrayRef, int64_t, int64_t, int64_t, at::Device);
using ParamsSig = at::Tensor(int64_t, int64_t, int64_t, int64_t, at::Device);

PhantomOptions options_of(int64_t batch, int64_t num_classes, int64_t seed, int64_t first_sample,
                          const at::Device& device) {
  TORCH_CHECK_VALUE(batch >= 1, "batch must be >= 1, got ", batch);
  TORCH_CHECK_VALUE(num_classes >= kPhantomMinClasses && num_classes <= kPhantomMaxClasses,
                    "num_classes must be in [2, 16], got ", num_classes);
  TORCH_CHECK_VALUE(first_sample >= 0 && first_sample + batch <= (int64_t(1) << 32),
                    "first_sample must be in [0, 2^32 - batch], got ", first_sample,
                    " with batch ", batch);
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda() || device.is_meta(),
                    "device must be cpu, cuda or meta, got ", device);
  PhantomOptions o;
  o.num_classes = num_classes;
  o.seed = static_cast<uint64_t>(seed);  // the int64 bit pattern of a uint64 seed
  o.first_sample = static_cast<uint32_t>(first_sample);
  return o;
}

std::vector<int64_t> volume_shape(int64_t batch, at::IntArrayRef size) {
  TORCH_CHECK_VALUE(size.size() == 3, "size must be [D, H, W] (3 values), got ", size.size(),
                    " values ", size);
  for (int64_t s : size)
    TORCH_CHECK_VALUE(s >= kPhantomMinSize, "size must be >= 8 per axis, got ", size);
  return {batch, 1, size[0], size[1], size[2]};
}

at::Tensor empty_table(int64_t batch, const PhantomOptions& o, const at::Device& device) {
  return at::empty({batch, phantom_param_count(o.num_classes)},
                   at::TensorOptions().dtype(at::kFloat).device(device));
}

void fill_table(const at::Tensor& table, const PhantomOptions& o) {
  const c10::DeviceGuard guard(table.device());
  call_core([&] {
    phantom_params(table.data_ptr<float>(), table.size(0), o,
                   table.is_cuda() ? Device::CUDA : Device::CPU,
                   table.is_cuda() ? table.get_device() : 0, current_stream(table));
  });
}

// ---- CPU and CUDA
at::Tensor phantom_params_impl(int64_t batch, int64_t num_classes, int64_t seed,
                               int64_t first_sample, at::Device device) {
  const PhantomOptions o = options_of(batch, num_classes, seed, first_sample, device);
  at::Tensor table = empty_table(batch, o, device);
  fill_table(table, o);
  return table;
}

Pair phantom_impl(int64_t batch, at::IntArrayRef size, int64_t num_classes, int64_t seed,
                  int64_t first_sample, at::Device device) {
  const PhantomOptions o = options_of(batch, num_classes, seed, first_sample, device);
  const std::vector<int64_t> shape = volume_shape(batch, size);
  const at::TensorOptions opts = at::TensorOptions().device(device);
  at::Tensor image = at::empty(shape, opts.dtype(at::kFloat));
  at::Tensor label = at::empty(shape, opts.dtype(at::kByte));
  // The table is scratch: freed at return, its block reused only by later work on this stream.
  const at::Tensor table = empty_table(batch, o, image.device());
  fill_table(table, o);
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    phantom_render(table.data_ptr<float>(), to_view(image, "image"), to_view(label, "label"), o,
                   current_stream(image));
  });
  return {image, label};
}

// ---- BackendSelect: the key of `device`, with the thread's included / excluded keys applied.
c10::DispatchKeySet keys_for(const at::Device& device) {
  TORCH_CHECK_VALUE(device.is_cpu() || device.is_cuda() || device.is_meta(),
                    "device must be cpu, cuda or meta, got ", device);
  const c10::DispatchKeySet ks(c10::computeDispatchKey(at::kFloat, at::kStrided, device));
  const c10::DispatchKeySet mask(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect);
  return c10::impl::computeDispatchKeySet(ks, mask);
}

Pair phantom_select(int64_t batch, at::IntArrayRef size, int64_t num_classes, int64_t seed,
                    int64_t first_sample, at::Device device) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("voxaug::phantom", "")
                             .typed<PhantomSig>();
  return op.redispatch(keys_for(device), batch, size, num_classes, seed, first_sample, device);
}

at::Tensor phantom_params_select(int64_t batch, int64_t num_classes, int64_t seed,
                                 int64_t first_sample, at::Device device) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("voxaug::phantom_params", "")
                             .typed<ParamsSig>();
  return op.redispatch(keys_for(device), batch, num_classes, seed, first_sample, device);
}

}  // namespace

TORCH_LIBRARY_IMPL(voxaug, BackendSelect, m) {
  m.impl("phantom", &phantom_select);
  m.impl("phantom_params", &phantom_params_select);
}
TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("phantom", &phantom_impl);
  m.impl("phantom_params", &phantom_params_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("phantom", &phantom_impl);
  m.impl("phantom_params", &phantom_params_impl);
}

}  // namespace voxaug::torch_ext
