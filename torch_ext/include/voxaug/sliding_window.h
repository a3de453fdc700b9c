// voxaug::torch -- sliding-window inference for LibTorch programs, with MONAI's
// sliding_window_inference numerics (monai/inferers/utils.py): the same windows, in the same
// order, the same importance map, the same additions -- float32 results equal MONAI's to rounding
// (bit for bit on the same device when the predictor is deterministic).
//
// Per batch of windows: one gather launch into a buffer allocated once, the predictor, one
// stitch launch that multiplies by the importance map and adds in window order. Nothing in the
// loop synchronises the host or allocates (except the predictor's own output, and a copy when
// `device` differs from the predictor's device; with a process_fn, also its returns and their
// weight map cast and copied to `device`). NVTX ranges "voxaug.window.gather",
// "voxaug.window.predict", "voxaug.window.stitch" and "voxaug.window.finalize" mark the passes.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "voxaug/window.h"

namespace c10 {
struct IValue;
}

namespace voxaug {

enum class BlendMode { Constant, Gaussian };

// MONAI's process_fn (monai.inferers.sliding_window_inference, MONAI 1.3+): called once per
// window batch, after the predictor, with
//   outputs        the predictor's outputs for the batch (one (B, K, roi) tensor: the C++
//                  predictor has one output),
//   windows        the (B, C, roi) window batch handed to the predictor, on sw_device (the
//                  reused window buffer: clone it to keep it),
//   importance_map the roi-sized map (roi_weight_map if given, else `mode`'s map: ones for
//                  constant) on sw_device in the input's dtype, shape as given / (D, H, W);
// and returns {outputs to stitch (exactly one, of the predictor's shape rules), weight map}.
// The weight map, roi-sized (shape roi, or any leading 1s: (1, 1, D, H, W)), is cast to the
// input's dtype (as MONAI does) and replaces the importance map for that batch's stitch; as in
// MONAI, the count map that divides the sum is the first batch's weight map summed over every
// window. The weight is copied to `device` per batch (a host sync when that copy leaves the GPU).
// An empty process_fn (the default) leaves the default path unchanged.
using ProcessFn = std::function<std::pair<std::vector<at::Tensor>, at::Tensor>(
    const std::vector<at::Tensor>& outputs, const at::Tensor& windows,
    const at::Tensor& importance_map)>;

struct SlidingWindowOptions {
  std::vector<double> overlap = {0.25};  // one value, or one per spatial axis; each in [0, 1)
  BlendMode mode = BlendMode::Constant;
  std::vector<double> sigma_scale = {0.125};     // Gaussian mode: sigma = sigma_scale * roi
  WindowPad padding_mode = WindowPad::Constant;  // where the image is smaller than the roi
  double cval = 0.0;
  std::optional<c10::Device> sw_device;      // windows and predictor (default: the input's device)
  std::optional<c10::Device> device;         // stitching and output (default: the input's device)
  std::optional<at::Tensor> roi_weight_map;  // replaces the importance map (roi-sized)
  std::optional<c10::ScalarType> window_dtype;  // dtype handed to the predictor (default: input's)
  std::optional<c10::ScalarType> output_dtype;  // default: the input's dtype
  bool argmax = false;  // return (N, 1, D, H, W) int64 channel indices instead of probabilities
  // With argmax, an output_dtype other than the accumulator's, or an image smaller than the roi
  // on some axis (a result of its own), and several window rows along d, the accumulator holds
  // one window row's roi-d planes (a ring drained row by row into the result) instead of the
  // padded d: (N, K, roi d, padded h, padded w) floats, the same results.
  bool progress = false;  // print the window count per batch to stderr
  ProcessFn process_fn;   // MONAI's per-batch hook on outputs and weight map (see ProcessFn)
  // SlidingWindowInferer only, CUDA inputs only: capture the whole pass (every window batch's
  // gather, predictor and stitch, then the finalize) once per input shape into a CUDA graph and
  // replay it on later calls (input copied into the graph's static buffer, result cloned out).
  // The first call warms up eagerly on a side stream, then captures. The predictor must be
  // capturable (static shapes, no host sync); the predictor of the first call for a shape is
  // the one replayed (reset_graphs() drops the graphs). Results equal the eager pass bit for bit.
  // Not combinable with process_fn (the inferer's constructor refuses the pair): a captured
  // process_fn would replay the first call's host-side decisions and weights unseen.
  bool cuda_graph = false;
};

using Predictor = std::function<at::Tensor(const at::Tensor&)>;

// Runs `predictor` over the windows of `inputs` (N, C, D, H, W) and stitches its (B, K, roi)
// outputs into (N, K, D, H, W). roi entries <= 0 take the image size (MONAI's fall_back_tuple).
// Errors (std::invalid_argument-like c10::ValueError) name the argument: roi of the wrong
// length, overlap outside [0, 1), sw_batch_size < 1, a predictor output of the wrong shape,
// a process_fn return of the wrong count, shape or weight size.
at::Tensor sliding_window_inference(const at::Tensor& inputs, std::vector<int64_t> roi_size,
                                    int64_t sw_batch_size, const Predictor& predictor,
                                    const SlidingWindowOptions& options = {});

// Any other callable: a torch::nn::Module holder (module->forward(x)), a TorchScript module
// (module.forward({x}).toTensor()), or an object with operator()(Tensor) -> Tensor.
template <class P, class = std::enable_if_t<!std::is_convertible_v<P&, const Predictor&>>>
at::Tensor sliding_window_inference(const at::Tensor& inputs, std::vector<int64_t> roi_size,
                                    int64_t sw_batch_size, P& predictor,
                                    const SlidingWindowOptions& options = {});

// The MONAI SlidingWindowInferer: the options once, the importance map and the count map
// cached per (image size, device, dtype) across calls (not with a process_fn, whose weights
// are per batch). options.cuda_graph with options.process_fn: c10::ValueError.
class SlidingWindowInferer {
 public:
  SlidingWindowInferer(std::vector<int64_t> roi_size, int64_t sw_batch_size,
                       SlidingWindowOptions options = {});
  at::Tensor operator()(const at::Tensor& inputs, const Predictor& predictor);
  template <class P, class = std::enable_if_t<!std::is_convertible_v<P&, const Predictor&>>>
  at::Tensor operator()(const at::Tensor& inputs, P& predictor);

  struct Cache {
    at::Tensor weight;  // undefined for constant weights
    at::Tensor count;   // undefined for constant weights (computed on the fly, exactly)
    bool valid = false;
  };
  // Drops the captured CUDA graphs (options.cuda_graph): the next call captures again.
  void reset_graphs() { graphs_.clear(); }
  size_t graph_count() const { return graphs_.size(); }

 private:
  struct Graph;  // a captured pass (torch_ext/window.cpp)
  at::Tensor eager(const at::Tensor& inputs, const Predictor& predictor);
  at::Tensor graphed(const at::Tensor& inputs, const Predictor& predictor);
  std::vector<int64_t> roi_size_;
  int64_t sw_batch_size_;
  SlidingWindowOptions options_;
  std::map<std::vector<int64_t>, Cache> cache_;
  std::map<std::vector<int64_t>, std::shared_ptr<Graph>> graphs_;
};

// MONAI's compute_importance_map (float32 arithmetic of torch's own ops, on `device`),
// returned in `dtype`: constant -> ones; gaussian -> outer product of exp(-x^2 / (2 sigma^2)),
// sigma = sigma_scale * roi, clamped below at max(min, 1e-3). No host synchronisation.
at::Tensor window_importance_map(const std::vector<int64_t>& roi_size, BlendMode mode,
                                 const std::vector<double>& sigma_scale, c10::ScalarType dtype,
                                 c10::Device device);

namespace detail {
template <class P, class = void>
struct HasArrowForward : std::false_type {};
template <class P>
struct HasArrowForward<
    P, std::void_t<decltype(std::declval<P&>()->forward(std::declval<const at::Tensor&>()))>>
    : std::true_type {};
template <class P, class T>
struct Dependent {
  using type = T;
};

template <class P>
Predictor as_predictor(P& p) {
  if constexpr (std::is_invocable_r_v<at::Tensor, P&, const at::Tensor&>) {
    return [&p](const at::Tensor& x) { return p(x); };
  } else if constexpr (HasArrowForward<P>::value) {
    return [&p](const at::Tensor& x) { return at::Tensor(p->forward(x)); };
  } else {  // TorchScript: forward takes a stack of IValues
    using IValue = typename Dependent<P, c10::IValue>::type;
    return
        [&p](const at::Tensor& x) { return p.forward(std::vector<IValue>{IValue(x)}).toTensor(); };
  }
}
}  // namespace detail

template <class P, class>
at::Tensor sliding_window_inference(const at::Tensor& inputs, std::vector<int64_t> roi_size,
                                    int64_t sw_batch_size, P& predictor,
                                    const SlidingWindowOptions& options) {
  return sliding_window_inference(inputs, std::move(roi_size), sw_batch_size,
                                  detail::as_predictor(predictor), options);
}

template <class P, class>
at::Tensor SlidingWindowInferer::operator()(const at::Tensor& inputs, P& predictor) {
  return (*this)(inputs, detail::as_predictor(predictor));
}

}  // namespace voxaug
