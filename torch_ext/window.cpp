// voxaug torch_ext: the window family's ops (include/voxaug/window.h) and the LibTorch
// sliding-window inference API (include/voxaug/sliding_window.h). CPU and CUDA share one entry;
// Meta computes shapes. Nothing here synchronises the host.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#if VOXAUG_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nvtx3/nvToolsExt.h>
#endif

#include "host_cache.h"
#include "tensor_view.h"
#include "transform_common.h"
#include "voxaug/sliding_window.h"
#include "voxaug/window.h"

namespace voxaug {
namespace torch_ext {

// A device with its index: "cuda" without one is the current CUDA device (as at::empty reads
// it), so the core gets a real index and devices compare equal to tensors' devices. (No
// allocation: the graphed path calls this inside a capture.)
c10::Device indexed(c10::Device d) {
#if VOXAUG_WITH_CUDA
  if (d.is_cuda() && !d.has_index()) return c10::Device(c10::kCUDA, c10::cuda::current_device());
#endif
  return d;
}

namespace {

// NVTX range for profilers (a no-op without CUDA or without a profiler attached).
struct Range {
  explicit Range(const char* name) {
#if VOXAUG_WITH_CUDA
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~Range() {
#if VOXAUG_WITH_CUDA
    nvtxRangePop();
#endif
  }
};

std::vector<double> per_axis(at::ArrayRef<double> v, const char* arg) {
  TORCH_CHECK_VALUE(v.size() == 1 || v.size() == 3, arg,
                    " must have 1 value or 1 per spatial axis (3), got ", v.size());
  return v.size() == 1 ? std::vector<double>(3, v[0]) : v.vec();
}

WindowLayout layout_of(at::IntArrayRef image_size, at::IntArrayRef roi_size,
                       at::ArrayRef<double> overlap) {
  TORCH_CHECK_VALUE(image_size.size() == 3, "image_size must be [D, H, W], got ", image_size);
  TORCH_CHECK_VALUE(roi_size.size() == 3,
                    "roi_size must have one value per spatial axis of the 5-D input (3), got ",
                    roi_size.size(), " values ", roi_size);
  const std::vector<double> ov = per_axis(overlap, "overlap");
  WindowLayout l;
  call_core([&] { l = window_layout(image_size.data(), roi_size.data(), ov.data()); });
  return l;
}

// A host tensor from the ops' host cache (host_cache.h): the window buffer and the accumulator
// are large (tens of MB); a fresh buffer is on transparent huge pages (on 4 KiB pages its first
// touch cost a page fault per 4 KiB: 61 ms for torch.zeros of 1x1x255x223x276 float32 on the
// development VM, 9 ms on huge pages), and one freed by an earlier call of the same size is
// reused without faulting at all. Zeroing runs on every thread.
at::Tensor host_tensor(at::IntArrayRef sizes, at::ScalarType dtype, bool zero) {
  int64_t numel = 1;
  for (int64_t v : sizes) numel *= v;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes < kHuge) {
    return zero ? at::zeros(sizes, at::TensorOptions().dtype(dtype))
                : at::empty(sizes, at::TensorOptions().dtype(dtype));
  }
  at::Tensor t = torch_ext::empty_cached(sizes, at::TensorOptions().dtype(dtype));
  if (zero) {
    char* c = static_cast<char*>(t.data_ptr());
    const int64_t chunks = static_cast<int64_t>((bytes + kHuge - 1) / kHuge);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k)
      std::memset(c + k * kHuge, 0, std::min(kHuge, bytes - static_cast<size_t>(k) * kHuge));
  }
  return t;
}

// Zeroed accumulator / uninitialised buffer on `device` (huge pages on the host).
at::Tensor device_tensor(at::IntArrayRef sizes, at::ScalarType dtype, c10::Device device,
                         bool zero) {
  if (device.is_cpu()) return host_tensor(sizes, dtype, zero);
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  return zero ? at::zeros(sizes, opts) : at::empty(sizes, opts);
}

std::vector<int64_t> window_layout_op(at::IntArrayRef image_size, at::IntArrayRef roi_size,
                                      at::ArrayRef<double> overlap) {
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  std::vector<int64_t> r;
  for (const int64_t* v : {l.count, l.padded, l.pad_before, l.interval})
    r.insert(r.end(), v, v + 3);
  return r;
}

std::vector<int64_t> spatial(const at::Tensor& t) {
  return {t.size(2), t.size(3), t.size(4)};
}

WindowPad pad_mode(int64_t m) {
  TORCH_CHECK_VALUE(m >= 0 && m <= 3,
                    "padding_mode must be 0 constant, 1 reflect, 2 replicate or 3 circular, got ",
                    m);
  return static_cast<WindowPad>(m);
}

void check_float(const at::Tensor& t, const char* arg) {
  TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()), arg, " must be a float tensor, got ",
                    t.scalar_type());
}

// MONAI pads an image smaller than the roi with torch.nn.functional.pad(mode, value=cval),
// which refuses a non-zero value for the reflect / replicate / circular modes: so does voxaug,
// rather than ignore the value.
void check_cval(const WindowLayout& l, WindowPad pad, double cval) {
  const bool pads =
      l.padded[0] != l.size[0] || l.padded[1] != l.size[1] || l.padded[2] != l.size[2];
  TORCH_CHECK_VALUE(
      !pads || pad == WindowPad::Constant || cval == 0.0,
      "cval: the image is smaller than the roi and padding_mode ",
      pad == WindowPad::Reflect     ? "reflect"
      : pad == WindowPad::Replicate ? "replicate"
                                    : "circular",
      " takes no fill value (MONAI / torch.nn.functional.pad refuse one), got cval = ", cval,
      "; use padding_mode constant or cval 0");
}

void gather_into(const at::Tensor& image, const at::Tensor& out, const WindowLayout& l,
                 int64_t first_window, int64_t padding_mode, double cval) {
  check_5d(image, "image");
  check_5d(out, "out");
  check_float(image, "image");
  const WindowPad pad = pad_mode(padding_mode);
  check_cval(l, pad, cval);
  const c10::DeviceGuard guard(image.device());
  call_core([&] {
    window_gather(to_view(image, "image"), l, first_window, pad, cval, to_view(out, "out"),
                  current_stream(image));
  });
}

at::Tensor window_gather_impl(const at::Tensor& image, at::IntArrayRef roi_size,
                              at::ArrayRef<double> overlap, int64_t first_window,
                              int64_t num_windows, int64_t padding_mode, double cval,
                              std::optional<at::ScalarType> dtype) {
  check_5d(image, "image");
  check_float(image, "image");
  TORCH_CHECK_VALUE(num_windows >= 0, "num_windows must be >= 0, got ", num_windows);
  const WindowLayout l = layout_of(spatial(image), roi_size, overlap);
  at::Tensor out =
      torch_ext::empty_output({num_windows, image.size(1), l.roi[0], l.roi[1], l.roi[2]},
                              image.options().dtype(dtype.value_or(image.scalar_type())));
  gather_into(image, out, l, first_window, padding_mode, cval);
  return out;
}

at::Tensor window_gather_meta(const at::Tensor& image, at::IntArrayRef roi_size,
                              at::ArrayRef<double> overlap, int64_t, int64_t num_windows, int64_t,
                              double, std::optional<at::ScalarType> dtype) {
  check_5d(image, "image", true);
  const WindowLayout l = layout_of(spatial(image), roi_size, overlap);
  return at::empty({num_windows, image.size(1), l.roi[0], l.roi[1], l.roi[2]},
                   image.options().dtype(dtype.value_or(image.scalar_type())));
}

void window_gather__impl(const at::Tensor& image, const at::Tensor& out, at::IntArrayRef roi_size,
                         at::ArrayRef<double> overlap, int64_t first_window, int64_t padding_mode,
                         double cval) {
  check_5d(image, "image");
  gather_into(image, out, layout_of(spatial(image), roi_size, overlap), first_window, padding_mode,
              cval);
}

void window_gather__meta(const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                         at::ArrayRef<double>, int64_t, int64_t, double) {}

const void* weight_ptr(const std::optional<at::Tensor>& weight, const at::Tensor& acc,
                       const WindowLayout& l) {
  if (!weight.has_value() || !weight->defined()) return nullptr;
  TORCH_CHECK_VALUE(weight->numel() == l.roi[0] * l.roi[1] * l.roi[2] && weight->is_contiguous(),
                    "weight must be a contiguous roi-sized map (", l.roi[0], ", ", l.roi[1], ", ",
                    l.roi[2], "), got shape ", weight->sizes());
  TORCH_CHECK_VALUE(weight->scalar_type() == acc.scalar_type() && weight->device() == acc.device(),
                    "weight must have acc's dtype ", acc.scalar_type(), " and device ",
                    acc.device(), ", got ", weight->scalar_type(), " on ", weight->device());
  return weight->data_ptr();
}

// A count map (window_count's) as the core takes it, checked against acc; null when absent.
const void* count_ptr(const std::optional<at::Tensor>& count, const at::Tensor& acc,
                      const WindowLayout& l) {
  if (!count.has_value() || !count->defined()) return nullptr;
  TORCH_CHECK_VALUE(count->scalar_type() == acc.scalar_type() && count->device() == acc.device() &&
                        count->is_contiguous() &&
                        count->numel() == l.padded[0] * l.padded[1] * l.padded[2],
                    "count must be acc's dtype and device, contiguous, of the padded size (",
                    l.padded[0], ", ", l.padded[1], ", ", l.padded[2], "), got ", count->sizes(),
                    " ", count->scalar_type(), " on ", count->device());
  return count->data_ptr();
}

void window_stitch__impl(const at::Tensor& acc, const at::Tensor& pred,
                         const std::optional<at::Tensor>& weight, at::IntArrayRef image_size,
                         at::IntArrayRef roi_size, at::ArrayRef<double> overlap,
                         int64_t first_window, bool first_store, bool last_divide,
                         const std::optional<at::Tensor>& count, bool ring) {
  check_5d(acc, "acc");
  check_5d(pred, "pred");
  check_float(pred, "pred");
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  const void* w = weight_ptr(weight, acc, l);
  const StitchFuse fuse{first_store, last_divide, count_ptr(count, acc, l), ring};
  TORCH_CHECK_VALUE(fuse.count == nullptr || last_divide,
                    "count is read only with last_divide=True");
  const c10::DeviceGuard guard(acc.device());
  call_core([&] {
    window_stitch(to_view(acc, "acc"), to_view(pred, "pred"), w, l, first_window, fuse,
                  current_stream(acc));
  });
}

void window_stitch__meta(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                         at::IntArrayRef, at::IntArrayRef, at::ArrayRef<double>, int64_t, bool,
                         bool, const std::optional<at::Tensor>&, bool) {}

at::Tensor count_output(const at::Tensor& acc, const WindowLayout& l) {
  return torch_ext::empty_output({l.padded[0], l.padded[1], l.padded[2]}, acc.options());
}

at::Tensor window_count_impl(const at::Tensor& acc, const std::optional<at::Tensor>& weight,
                             at::IntArrayRef image_size, at::IntArrayRef roi_size,
                             at::ArrayRef<double> overlap) {
  check_5d(acc, "acc");
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  at::Tensor count = count_output(acc, l);
  const void* w = weight_ptr(weight, acc, l);
  const c10::DeviceGuard guard(acc.device());
  call_core([&] {
    window_count(w, to_voxaug_dtype(acc.scalar_type(), "acc"),
                 acc.is_cuda() ? Device::CUDA : Device::CPU, acc.is_cuda() ? acc.get_device() : 0,
                 l, count.data_ptr(), current_stream(acc));
  });
  return count;
}

at::Tensor window_count_meta(const at::Tensor& acc, const std::optional<at::Tensor>&,
                             at::IntArrayRef image_size, at::IntArrayRef roi_size,
                             at::ArrayRef<double> overlap) {
  return count_output(acc, layout_of(image_size, roi_size, overlap));
}

at::Tensor finalize_output(const at::Tensor& acc, const WindowLayout& l,
                           std::optional<at::ScalarType> dtype, bool argmax) {
  if (argmax)
    return at::empty({acc.size(0), 1, l.size[0], l.size[1], l.size[2]},
                     acc.options().dtype(dtype.value_or(at::kLong)));
  return at::empty({acc.size(0), acc.size(1), l.size[0], l.size[1], l.size[2]},
                   acc.options().dtype(dtype.value_or(acc.scalar_type())));
}

// Planes [d_begin, d_end) of the padded d range (default: all of them).
void finalize_into(const at::Tensor& acc, const std::optional<at::Tensor>& count,
                   const std::optional<at::Tensor>& weight, const WindowLayout& l,
                   const at::Tensor& out, bool argmax, int64_t d_begin = 0, int64_t d_end = -1) {
  const void* cp = count_ptr(count, acc, l);
  const void* wp = weight_ptr(weight, acc, l);
  const c10::DeviceGuard guard(acc.device());
  call_core([&] {
    window_finalize(to_view(acc, "acc"), cp, wp, l, to_view(out, "out"), argmax, d_begin,
                    d_end < 0 ? l.padded[0] : d_end, current_stream(acc));
  });
}

at::Tensor window_finalize_impl(const at::Tensor& acc, const std::optional<at::Tensor>& count,
                                const std::optional<at::Tensor>& weight, at::IntArrayRef image_size,
                                at::IntArrayRef roi_size, at::ArrayRef<double> overlap,
                                std::optional<at::ScalarType> dtype, bool argmax) {
  check_5d(acc, "acc");
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  at::Tensor out = finalize_output(acc, l, dtype, argmax);
  finalize_into(acc, count, weight, l, out, argmax);
  return out;
}

at::Tensor window_finalize_meta(const at::Tensor& acc, const std::optional<at::Tensor>&,
                                const std::optional<at::Tensor>&, at::IntArrayRef image_size,
                                at::IntArrayRef roi_size, at::ArrayRef<double> overlap,
                                std::optional<at::ScalarType> dtype, bool argmax) {
  check_5d(acc, "acc", true);
  return finalize_output(acc, layout_of(image_size, roi_size, overlap), dtype, argmax);
}

bool crops(const WindowLayout& l) {
  return l.padded[0] != l.size[0] || l.padded[1] != l.size[1] || l.padded[2] != l.size[2];
}

void window_finalize__impl(const at::Tensor& acc, const std::optional<at::Tensor>& count,
                           const std::optional<at::Tensor>& weight, at::IntArrayRef image_size,
                           at::IntArrayRef roi_size, at::ArrayRef<double> overlap) {
  check_5d(acc, "acc");
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  TORCH_CHECK_VALUE(!crops(l),
                    "window_finalize_ (in place) needs an image at least as large as "
                    "the roi on every axis (nothing to crop); use window_finalize");
  finalize_into(acc, count, weight, l, acc, false);
}

void window_finalize__meta(const at::Tensor&, const std::optional<at::Tensor>&,
                           const std::optional<at::Tensor>&, at::IntArrayRef, at::IntArrayRef,
                           at::ArrayRef<double>) {}

void window_finalize_planes__impl(const at::Tensor& acc, const std::optional<at::Tensor>& count,
                                  const std::optional<at::Tensor>& weight,
                                  at::IntArrayRef image_size, at::IntArrayRef roi_size,
                                  at::ArrayRef<double> overlap, const at::Tensor& out,
                                  int64_t d_begin, int64_t d_end, bool argmax) {
  check_5d(acc, "acc");
  check_5d(out, "out");
  const WindowLayout l = layout_of(image_size, roi_size, overlap);
  TORCH_CHECK_VALUE(d_begin >= 0 && d_end >= 0, "d_begin and d_end must be >= 0, got ", d_begin,
                    ", ", d_end);  // (-1 means all planes in finalize_into)
  finalize_into(acc, count, weight, l, out, argmax, d_begin, d_end);
}

void window_finalize_planes__meta(const at::Tensor&, const std::optional<at::Tensor>&,
                                  const std::optional<at::Tensor>&, at::IntArrayRef,
                                  at::IntArrayRef, at::ArrayRef<double>, const at::Tensor&, int64_t,
                                  int64_t, bool) {}

at::Tensor importance_map_op(at::IntArrayRef roi_size, c10::string_view mode,
                             at::ArrayRef<double> sigma_scale, at::ScalarType dtype,
                             at::Device device) {
  TORCH_CHECK_VALUE(mode == "constant" || mode == "gaussian",
                    "mode must be 'constant' or 'gaussian', got '", std::string(mode), "'");
  return window_importance_map(roi_size.vec(),
                               mode == "gaussian" ? BlendMode::Gaussian : BlendMode::Constant,
                               sigma_scale.vec(), dtype, device);
}

// ---- sliding_window_inference ----

struct Prepared {
  WindowLayout layout;
  std::vector<int64_t> roi;
};

Prepared prepare(const at::Tensor& inputs, std::vector<int64_t> roi, int64_t sw_batch_size,
                 const SlidingWindowOptions& o) {
  check_5d(inputs, "inputs");
  check_float(inputs, "inputs");
  // (No window, no predictor output: its channel count, hence the result's shape, is unknown.)
  TORCH_CHECK_VALUE(inputs.size(0) >= 1, "inputs must hold at least one image, got batch size ",
                    inputs.size(0));
  TORCH_CHECK_VALUE(sw_batch_size >= 1, "sw_batch_size must be >= 1, got ", sw_batch_size);
  TORCH_CHECK_VALUE(roi.size() == 1 || roi.size() == 3,
                    "roi_size must have one value per spatial axis of the 5-D input (3), got ",
                    roi.size());
  if (roi.size() == 1) roi.assign(3, roi[0]);
  for (int a = 0; a < 3; ++a)
    if (roi[a] <= 0) roi[a] = inputs.size(2 + a);  // MONAI's fall_back_tuple
  const std::vector<int64_t> size = spatial(inputs);
  return {layout_of(size, roi, o.overlap), roi};
}

// One window batch through process_fn: its single output, and its weight map as the stitch
// takes it (roi voxels, dense, in the accumulator's dtype on `device`), after MONAI's cast of
// the map to the input's (compute) dtype.
std::pair<at::Tensor, at::Tensor> process_batch(const ProcessFn& process_fn, const at::Tensor& pred,
                                                const at::Tensor& windows,
                                                const at::Tensor& base_map, const WindowLayout& l,
                                                at::ScalarType compute_t, c10::Device device,
                                                at::ScalarType acc_t) {
  auto [outs, w] = process_fn(std::vector<at::Tensor>{pred}, windows, base_map);
  TORCH_CHECK_VALUE(outs.size() == 1,
                    "process_fn must return exactly 1 output (the C++ predictor returns one), "
                    "got ",
                    outs.size());
  const int64_t roi_voxels = l.roi[0] * l.roi[1] * l.roi[2];
  const bool roi_sized = w.defined() && w.dim() >= 3 && w.numel() == roi_voxels &&
                         w.size(-3) == l.roi[0] && w.size(-2) == l.roi[1] && w.size(-1) == l.roi[2];
  TORCH_CHECK_VALUE(roi_sized, "process_fn must return a roi-sized weight map, shape (", l.roi[0],
                    ", ", l.roi[1], ", ", l.roi[2], ") or (1, 1, ", l.roi[0], ", ", l.roi[1], ", ",
                    l.roi[2], ") (one map for the whole batch), got ",
                    w.defined() ? c10::str(w.sizes()) : std::string("an undefined tensor"));
  // MONAI: w.to(compute_dtype) multiplies the outputs; the stitch takes it in acc's dtype.
  w = w.to(compute_t).to(device, acc_t).reshape({l.roi[0], l.roi[1], l.roi[2]}).contiguous();
  return {std::move(outs[0]), std::move(w)};
}

at::Tensor run(const at::Tensor& inputs, const std::vector<int64_t>& roi_size,
               int64_t sw_batch_size, const Predictor& predictor, const SlidingWindowOptions& o,
               SlidingWindowInferer::Cache* cache) {
  const Prepared pr = prepare(inputs, roi_size, sw_batch_size, o);
  const bool process = static_cast<bool>(o.process_fn);
  if (process) cache = nullptr;  // process_fn's weights are per batch: nothing to cache
  const WindowLayout& l = pr.layout;
  const c10::Device sw_device = indexed(o.sw_device.value_or(inputs.device()));
  const c10::Device device = indexed(o.device.value_or(inputs.device()));
  const at::ScalarType acc_t = inputs.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t N = inputs.size(0);
  const int64_t total = N * l.windows_per_image();

  // The stitch stores on each voxel's first window (no zero fill) and, where the result is the
  // accumulator itself (nothing cropped, no cast, no argmax) and the count map is fixed (no
  // process_fn), divides on its last (no final pass).
  const bool cropped =
      l.padded[0] != l.size[0] || l.padded[1] != l.size[1] || l.padded[2] != l.size[2];
  const at::ScalarType out_t = o.output_dtype.value_or(o.argmax ? at::kLong : inputs.scalar_type());
  const bool in_place = !o.argmax && !cropped && out_t == acc_t;
  const bool last_divide = in_place && !process;
  // Where the result is a buffer of its own (argmax, a cast, a crop) and the windows come in
  // several rows along d, the accumulator is a ring of one window row's planes (roi d, not the
  // padded d): each row's finished planes go to the output before the next row reuses them
  // (window.h, StitchFuse::ring) -- the same sums and quotients in a fraction of the memory.
  // Not with process_fn (its count map comes from the first batch's weights).
  const bool ring = !in_place && !process && l.count[0] > 1;
  const int64_t row_windows = l.count[1] * l.count[2];
  // Importance map, per call or cached by the inferer. Constant weights: the count is computed
  // where a voxel is divided (its last window, or the final pass).
  at::Tensor weight, count, base_map;
  const int64_t roi_voxels = l.roi[0] * l.roi[1] * l.roi[2];
  if (process) {
    // MONAI hands process_fn the map itself (constant mode: ones) on sw_device in the input's
    // dtype; the weights that multiply each batch and the count map come from its returns.
    if (o.roi_weight_map.has_value() && o.roi_weight_map->defined()) {
      TORCH_CHECK_VALUE(o.roi_weight_map->numel() == roi_voxels,
                        "roi_weight_map must have the roi's ", roi_voxels, " voxels, got shape ",
                        o.roi_weight_map->sizes());
      // (A host map bound for a GPU through a fresh pinned buffer: no blocking copy.)
      base_map = transforms::common::host_to(o.roi_weight_map->to(inputs.scalar_type()), sw_device);
    } else {
      base_map =
          window_importance_map(pr.roi, o.mode, o.sigma_scale, inputs.scalar_type(), sw_device);
    }
  } else if (cache != nullptr && cache->valid) {
    weight = cache->weight;
    count = cache->count;
  } else {
    if (o.roi_weight_map.has_value() && o.roi_weight_map->defined()) {
      TORCH_CHECK_VALUE(o.roi_weight_map->numel() == l.roi[0] * l.roi[1] * l.roi[2],
                        "roi_weight_map must have the roi's ", l.roi[0] * l.roi[1] * l.roi[2],
                        " voxels, got shape ", o.roi_weight_map->sizes());
      weight = transforms::common::host_to(o.roi_weight_map->to(acc_t).contiguous(), device);
    } else if (o.mode == BlendMode::Gaussian) {
      weight = window_importance_map(pr.roi, o.mode, o.sigma_scale, inputs.scalar_type(), sw_device)
                   .to(device, acc_t)
                   .contiguous();
    }
    // Non-constant weights: the last-window division reads a count map (computing the count
    // per divided row segment would re-walk the covering windows for each); the inferer keeps it.
    if ((cache != nullptr || last_divide) && weight.defined()) {
      Range r("voxaug.window.count");
      at::Tensor like = at::empty({0}, at::TensorOptions().dtype(acc_t).device(device));
      count = count_output(like, l);
      const c10::DeviceGuard guard(device);
      call_core([&] {
        window_count(weight.data_ptr(), to_voxaug_dtype(acc_t, "acc"),
                     device.is_cuda() ? Device::CUDA : Device::CPU,
                     device.is_cuda() ? device.index() : 0, l, count.data_ptr(),
                     current_stream(like));
      });
    }
    if (cache != nullptr) *cache = {weight, count, true};
  }

  // One window buffer for the whole loop.
  const at::ScalarType win_t = o.window_dtype.value_or(inputs.scalar_type());
  at::Tensor buffer =
      device_tensor({std::min(sw_batch_size, total), inputs.size(1), l.roi[0], l.roi[1], l.roi[2]},
                    win_t, inputs.device(), false);
  const VolumeView in_view = to_view(inputs, "inputs");
  check_cval(l, o.padding_mode, o.cval);
  at::Tensor acc, out, first_weight;
  // After window row `row` (image row / count d, row % count d along d): its finished planes,
  // [start(k), start(k + 1)) ([0, ...) for the first row, [..., padded d) for the last).
  auto drain = [&](int64_t row) {
    const int64_t n = row / l.count[0], k = row % l.count[0];
    const int64_t d0 = k == 0 ? 0 : l.start(0, k);
    const int64_t d1 = k == l.count[0] - 1 ? l.padded[0] : l.start(0, k + 1);
    finalize_into(acc.narrow(0, n, 1), count, weight, l, out.narrow(0, n, 1), o.argmax, d0, d1);
  };
  // Messages name what returned the stitched output: the predictor, or process_fn after it.
  const char* source = process ? "process_fn" : "the predictor";
  const char* source_output = process ? "process_fn's output" : "the predictor's output";
  const int64_t batches = (total + sw_batch_size - 1) / sw_batch_size;
  for (int64_t b = 0, first = 0; first < total; ++b, first += sw_batch_size) {
    const int64_t count_b = std::min(sw_batch_size, total - first);
    at::Tensor win = count_b == buffer.size(0) ? buffer : buffer.narrow(0, 0, count_b);
    {
      Range r("voxaug.window.gather");
      const c10::DeviceGuard guard(inputs.device());
      call_core([&] {
        window_gather(in_view, l, first, o.padding_mode, o.cval, to_view(win, "windows"),
                      current_stream(inputs));
      });
    }
    const at::Tensor x = win.device() == sw_device ? win : win.to(sw_device);
    at::Tensor pred;
    {
      Range r("voxaug.window.predict");
      pred = predictor(x);
    }
    if (process) {
      Range r("voxaug.window.process");
      std::tie(pred, weight) =
          process_batch(o.process_fn, pred, x, base_map, l, inputs.scalar_type(), device, acc_t);
      // A copy: process_fn may return one buffer it changes per batch (MONAI keeps batch 0's).
      if (b == 0) first_weight = weight.clone();
    }
    TORCH_CHECK_VALUE(pred.defined() && pred.dim() == 5, source,
                      " must return a 5-D (B, K, D, H, W) tensor, got ",
                      pred.defined() ? pred.sizes() : at::IntArrayRef{});
    TORCH_CHECK_VALUE(pred.size(0) == count_b && pred.size(2) == l.roi[0] &&
                          pred.size(3) == l.roi[1] && pred.size(4) == l.roi[2],
                      source, " changed the window shape: given (", count_b, ", C, ", l.roi[0],
                      ", ", l.roi[1], ", ", l.roi[2], "), returned ", pred.sizes(),
                      "; voxaug stitches outputs of the window's batch and spatial size only");
    check_float(pred, source_output);
    if (pred.device() != device) pred = pred.to(device);
    if (!acc.defined()) {
      acc =
          device_tensor({N, pred.size(1), ring ? l.roi[0] : l.padded[0], l.padded[1], l.padded[2]},
                        acc_t, device, false);
      if (ring) out = finalize_output(acc, l, out_t, o.argmax);
    }
    TORCH_CHECK_VALUE(pred.size(1) == acc.size(1), source, " returned ", pred.size(1),
                      " channels after ", acc.size(1), " in earlier windows");
    // A ring stitches the batch window row by window row, draining each finished row first.
    for (int64_t j0 = 0, j1; j0 < count_b; j0 = j1) {
      const int64_t w0 = first + j0;
      j1 = ring ? std::min(count_b, (w0 / row_windows + 1) * row_windows - first) : count_b;
      if (ring && w0 > 0 && w0 % row_windows == 0) {
        Range r("voxaug.window.finalize");
        drain(w0 / row_windows - 1);
      }
      Range r("voxaug.window.stitch");
      const c10::DeviceGuard guard(device);
      const at::Tensor part = j0 == 0 && j1 == count_b ? pred : pred.narrow(0, j0, j1 - j0);
      call_core([&] {
        const StitchFuse fuse{true, last_divide, count.defined() ? count.data_ptr() : nullptr,
                              ring};
        window_stitch(to_view(acc, "acc"), to_view(part, "pred"),
                      weight.defined() ? weight.data_ptr() : nullptr, l, w0, fuse,
                      current_stream(acc));
      });
    }
    if (o.progress)
      std::fprintf(stderr, "voxaug sliding window: batch %lld/%lld\n",
                   static_cast<long long>(b + 1), static_cast<long long>(batches));
  }

  if (last_divide) return acc;  // divided voxel by voxel in the stitch
  Range r("voxaug.window.finalize");
  if (ring) {
    drain(total / row_windows - 1);
    return out;
  }
  if (process) weight = first_weight;  // MONAI builds the count map from the first batch's weight
  // In place where possible: no second full-size buffer.
  out = in_place ? acc : finalize_output(acc, l, out_t, o.argmax);
  finalize_into(acc, count, weight, l, out, o.argmax);
  return out;
}

}  // namespace
}  // namespace torch_ext

at::Tensor window_importance_map(const std::vector<int64_t>& roi_size, BlendMode mode,
                                 const std::vector<double>& sigma_scale, c10::ScalarType dtype,
                                 c10::Device device) {
  TORCH_CHECK_VALUE(roi_size.size() == 3, "roi_size must have 3 values, got ", roi_size.size());
  for (int64_t r : roi_size) TORCH_CHECK_VALUE(r >= 1, "roi_size must be >= 1, got ", r);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor map;
  if (mode == BlendMode::Constant) {
    map = at::ones({roi_size[0], roi_size[1], roi_size[2]}, f32);
  } else {
    const std::vector<double> ss = torch_ext::per_axis(sigma_scale, "sigma_scale");
    for (int i = 0; i < 3; ++i) {
      const double p = static_cast<double>(roi_size[i]);
      const double sigma = p * ss[i];
      TORCH_CHECK_VALUE(sigma > 0.0, "sigma_scale must be > 0, got ", ss[i]);
      // MONAI: x = arange(-(P-1)/2, (P-1)/2 + 1) in float32; exp(x**2 / (-2 * sigma**2)).
      at::Tensor x = at::arange(-(p - 1.0) / 2.0, (p - 1.0) / 2.0 + 1.0, f32);
      x = at::exp(at::div(at::pow(x, 2), -2.0 * (sigma * sigma)));
      if (i == 0) {
        map = x;
      } else {
        std::vector<int64_t> shape(static_cast<size_t>(i), 1);
        shape.push_back(roi_size[i]);
        map = map.unsqueeze(-1) * x.view(shape);
      }
    }
  }
  // max(min(map), 1e-3) as a device scalar: no .item().
  const at::Tensor floor = at::clamp_min(map.min(), 1e-3);
  return at::clamp_min(map, floor).to(dtype);
}

at::Tensor sliding_window_inference(const at::Tensor& inputs, std::vector<int64_t> roi_size,
                                    int64_t sw_batch_size, const Predictor& predictor,
                                    const SlidingWindowOptions& options) {
  TORCH_CHECK_VALUE(static_cast<bool>(predictor), "predictor must be callable");
  return torch_ext::run(inputs, roi_size, sw_batch_size, predictor, options, nullptr);
}

SlidingWindowInferer::SlidingWindowInferer(std::vector<int64_t> roi_size, int64_t sw_batch_size,
                                           SlidingWindowOptions options)
    : roi_size_(std::move(roi_size)), sw_batch_size_(sw_batch_size), options_(std::move(options)) {
  TORCH_CHECK_VALUE(sw_batch_size_ >= 1, "sw_batch_size must be >= 1, got ", sw_batch_size_);
  torch_ext::per_axis(options_.overlap, "overlap");
  // A captured process_fn would be replayed with the first call's host-side decisions and
  // weights, silently: refuse the pair rather than return stale results.
  TORCH_CHECK_VALUE(!(options_.cuda_graph && options_.process_fn),
                    "process_fn cannot be combined with cuda_graph (a CUDA graph would replay the "
                    "first call's process_fn unseen); set cuda_graph = false or drop process_fn");
}

at::Tensor SlidingWindowInferer::operator()(const at::Tensor& inputs, const Predictor& predictor) {
  TORCH_CHECK_VALUE(static_cast<bool>(predictor), "predictor must be callable");
  return options_.cuda_graph ? graphed(inputs, predictor) : eager(inputs, predictor);
}

struct SlidingWindowInferer::Graph {
#if VOXAUG_WITH_CUDA
  at::cuda::CUDAGraph graph;
#endif
  at::Tensor input, output;
};

at::Tensor SlidingWindowInferer::graphed(const at::Tensor& inputs, const Predictor& predictor) {
  torch_ext::check_5d(inputs, "inputs");
#if !VOXAUG_WITH_CUDA
  (void)predictor;
  TORCH_CHECK_VALUE(false, "cuda_graph: this voxaug was built without CUDA");
#else
  TORCH_CHECK_VALUE(inputs.is_cuda(), "cuda_graph needs CUDA inputs, got ", inputs.device());
  TORCH_CHECK_VALUE(!options_.device || torch_ext::indexed(*options_.device) == inputs.device(),
                    "cuda_graph needs device on the inputs' device ", inputs.device());
  TORCH_CHECK_VALUE(
      !options_.sw_device || torch_ext::indexed(*options_.sw_device) == inputs.device(),
      "cuda_graph needs sw_device on the inputs' device ", inputs.device());
  const std::vector<int64_t> key = {
      inputs.size(0),         inputs.size(1), inputs.size(2),
      inputs.size(3),         inputs.size(4), static_cast<int64_t>(inputs.scalar_type()),
      inputs.device().index()};
  const c10::cuda::CUDAGuard guard(inputs.device());
  auto found = graphs_.find(key);
  if (found == graphs_.end()) {
    auto entry = std::make_shared<Graph>();
    entry->input = inputs.clone();
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    at::cuda::CUDAEvent ready, done;
    ready.record(current);
    ready.block(side);
    {
      // Warm-up (lazy initialisation, autotuning, the cached maps), then the capture, both on
      // a side stream: capture cannot run on the legacy default stream.
      const c10::cuda::CUDAStreamGuard on_side(side);
      eager(entry->input, predictor);
      try {
        entry->graph.capture_begin();
        entry->output = eager(entry->input, predictor);
        entry->graph.capture_end();
      } catch (const std::exception& e) {
        // End the capture (as torch.cuda.graph's __exit__ does) so that the stream and the
        // caching allocator leave capture mode; its own error, if any, is secondary.
        try {
          entry->graph.capture_end();
        } catch (const std::exception&) {
        }
        TORCH_CHECK(false,
                    "SlidingWindowInferer(cuda_graph): capturing the pass failed (the "
                    "predictor must be CUDA-graph capturable: static shapes, no host sync), or "
                    "set cuda_graph = false: ",
                    e.what());
      }
      done.record(side);
    }
    done.block(current);
    found = graphs_.emplace(key, entry).first;  // only a completed capture is kept
  }
  Graph& g = *found->second;
  g.input.copy_(inputs);
  g.graph.replay();
  return g.output.clone();
#endif
}

at::Tensor SlidingWindowInferer::eager(const at::Tensor& inputs, const Predictor& predictor) {
  torch_ext::check_5d(inputs, "inputs");
  const c10::Device device = torch_ext::indexed(options_.device.value_or(inputs.device()));
  std::vector<int64_t> key = {inputs.size(2), inputs.size(3),
                              inputs.size(4), static_cast<int64_t>(device.type()),
                              device.index(), inputs.scalar_type() == at::kDouble ? 1 : 0};
  return torch_ext::run(inputs, roi_size_, sw_batch_size_, predictor, options_, &cache_[key]);
}

namespace torch_ext {
namespace {
TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("window_gather", &window_gather_impl);
  m.impl("window_gather_", &window_gather__impl);
  m.impl("window_stitch_", &window_stitch__impl);
  m.impl("window_count", &window_count_impl);
  m.impl("window_finalize", &window_finalize_impl);
  m.impl("window_finalize_", &window_finalize__impl);
  m.impl("window_finalize_planes_", &window_finalize_planes__impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("window_gather", &window_gather_impl);
  m.impl("window_gather_", &window_gather__impl);
  m.impl("window_stitch_", &window_stitch__impl);
  m.impl("window_count", &window_count_impl);
  m.impl("window_finalize", &window_finalize_impl);
  m.impl("window_finalize_", &window_finalize__impl);
  m.impl("window_finalize_planes_", &window_finalize_planes__impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("window_gather", &window_gather_meta);
  m.impl("window_gather_", &window_gather__meta);
  m.impl("window_stitch_", &window_stitch__meta);
  m.impl("window_count", &window_count_meta);
  m.impl("window_finalize", &window_finalize_meta);
  m.impl("window_finalize_", &window_finalize__meta);
  m.impl("window_finalize_planes_", &window_finalize_planes__meta);
}
}  // namespace
}  // namespace torch_ext

// Schemas with no tensor arguments get their (catch-all) kernels in ops.cpp's TORCH_LIBRARY
// block through these.
std::vector<int64_t> window_layout_entry(at::IntArrayRef image_size, at::IntArrayRef roi_size,
                                         at::ArrayRef<double> overlap) {
  return torch_ext::window_layout_op(image_size, roi_size, overlap);
}
at::Tensor window_accumulator_entry(at::IntArrayRef sizes, at::ScalarType dtype, at::Device device,
                                    bool zero) {
  return torch_ext::device_tensor(sizes, dtype, device, zero);
}
at::Tensor window_importance_map_entry(at::IntArrayRef roi_size, c10::string_view mode,
                                       at::ArrayRef<double> sigma_scale, at::ScalarType dtype,
                                       at::Device device) {
  return torch_ext::importance_map_op(roi_size, mode, sigma_scale, dtype, device);
}

}  // namespace voxaug
