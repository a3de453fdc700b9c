// voxaug torch_ext: the dropout family's op (include/voxaug/dropout.h). The hole tables are
// drawn on the host (CPU tensors) and travel to the device through pinned memory without a
// blocking copy; the ImageRange fill takes its per-sample min / max from ATen's amin / amax on
// CUDA and from the core's own reduction on the CPU. CPU and CUDA share one entry; Meta computes
// the shape. Autograd: the kept voxels pass the gradient through, the filled ones get none (the
// fill values are constants, also the ImageRange ones): the backward is the same dropout of the
// gradient with fill 0. The in-place op refuses tensors that require grad.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <cmath>

#include "autograd_guard.h"
#include "host_cache.h"
#include "tensor_view.h"
#include "transform_common.h"
#include "voxaug/dropout.h"

namespace voxaug::torch_ext {
namespace {

void check_args(const at::Tensor& image, const at::Tensor& boxes, const at::Tensor& counts,
                int64_t fill_mode, bool meta) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  const int64_t n = image.size(0);
  TORCH_CHECK_VALUE(boxes.defined() && boxes.dim() == 3 && boxes.size(0) == n && boxes.size(2) == 6,
                    "boxes must be (N, K, 6) with N = ", n,
                    " (rows d0, h0, w0, d1, h1, w1 per sample and hole), got shape ",
                    boxes.defined() ? boxes.sizes() : at::IntArrayRef{});
  TORCH_CHECK_VALUE(counts.defined() && counts.dim() == 1 && counts.size(0) == n,
                    "counts must be (N,) with N = ", n, " (holes used per sample), got shape ",
                    counts.defined() ? counts.sizes() : at::IntArrayRef{});
  TORCH_CHECK_VALUE(boxes.scalar_type() == at::kLong && counts.scalar_type() == at::kLong,
                    "boxes and counts must be int64, got ", boxes.scalar_type(), " and ",
                    counts.scalar_type());
  TORCH_CHECK_VALUE((boxes.device().is_cpu() && counts.device().is_cpu()) ||
                        (meta && boxes.is_meta() && counts.is_meta()),
                    "boxes and counts must be CPU tensors (drawn on the host; the op copies them "
                    "to the device without a sync), got ",
                    boxes.device(), " and ", counts.device());
  TORCH_CHECK_VALUE(fill_mode >= 0 && fill_mode <= 2,
                    "fill_mode must be 0 (constant), 1 (uniform in [fill_low, fill_high)) or 2 "
                    "(uniform in the sample's [min, max]), got ",
                    fill_mode);
}

// Runs the op into `out` (which may be `image` itself).
// A host table (int64, CPU) on `like`'s device: itself on the CPU, else through pinned memory with
// a non-blocking copy (no host synchronisation).
at::Tensor table_to(const at::Tensor& t, const at::Tensor& like) {
  if (!like.is_cuda()) return t.contiguous();
  return transforms::common::pinned_host_copy(t.contiguous())
      .to(like.device(), at::kLong, /*non_blocking=*/true);
}

void run_dropout(const at::Tensor& image, const at::Tensor& out, const at::Tensor& boxes,
                 const at::Tensor& counts, bool dropout_holes, int64_t fill_mode, double fill_value,
                 double fill_low, double fill_high, int64_t seed, int64_t first_sample) {
  check_args(image, boxes, counts, fill_mode, false);
  TORCH_CHECK_VALUE(first_sample >= 0 && first_sample + image.size(0) <= (int64_t(1) << 32),
                    "first_sample must be in [0, 2^32 - N], got ", first_sample);
  if (image.numel() == 0) return;
  const at::Tensor cnt = counts.contiguous();
  const int64_t k = boxes.size(1);
  const int64_t* c = cnt.data_ptr<int64_t>();
  for (int64_t n = 0; n < image.size(0); ++n)
    TORCH_CHECK_VALUE(c[n] >= 0 && c[n] <= k, "counts[", n, "] = ", c[n], " must be in [0, K = ", k,
                      "]");
  const bool cuda = image.is_cuda();
  const c10::DeviceGuard guard(image.device());
  const at::Tensor b = table_to(boxes, image), cd = table_to(cnt, image);
  CoarseDropoutParams p;
  p.boxes = b.data_ptr<int64_t>();
  p.counts = cd.data_ptr<int64_t>();
  p.max_boxes = k;
  p.dropout_holes = dropout_holes;
  p.fill = static_cast<DropoutFill>(fill_mode);
  p.fill_value = fill_value;
  p.fill_low = fill_low;
  p.fill_high = fill_high;
  p.seed = static_cast<uint64_t>(seed);
  at::Tensor mm;
  if (p.fill == DropoutFill::ImageRange && cuda) {  // before any write: in place reads the original
    // ATen's amin / amax (stream-ordered, no sync): NaN propagates as in MONAI's numpy min / max
    // (voxaug::minmax ignores NaN). On the CPU the core reduces them itself (minmax = null), in
    // the same parallel region as the fill.
    const at::Tensor flat = image.reshape({image.size(0), -1});
    mm = at::stack({flat.amin(1), flat.amax(1)}, 1).to(at::kDouble).contiguous();
    p.minmax = mm.data_ptr<double>();
  }
  call_core([&] {
    coarse_dropout(to_view(image, "image"), to_view(out, "out"), p, current_stream(image),
                   static_cast<uint32_t>(first_sample));
  });
}

at::Tensor coarse_dropout_impl(const at::Tensor& image, const at::Tensor& boxes,
                               const at::Tensor& counts, bool dropout_holes, int64_t fill_mode,
                               double fill_value, double fill_low, double fill_high, int64_t seed,
                               int64_t first_sample) {
  check_5d(image, "image");
  at::Tensor out = torch_ext::empty_output(image.sizes(), image.options());
  run_dropout(image, out, boxes, counts, dropout_holes, fill_mode, fill_value, fill_low, fill_high,
              seed, first_sample);
  return out;
}

// In place: on the CPU only the filled voxels are written (rows without holes are not touched).
void coarse_dropout_inplace_impl(const at::Tensor& image, const at::Tensor& boxes,
                                 const at::Tensor& counts, bool dropout_holes, int64_t fill_mode,
                                 double fill_value, double fill_low, double fill_high, int64_t seed,
                                 int64_t first_sample) {
  run_dropout(image, image, boxes, counts, dropout_holes, fill_mode, fill_value, fill_low,
              fill_high, seed, first_sample);
}

void coarse_dropout_inplace_meta(const at::Tensor& image, const at::Tensor& boxes,
                                 const at::Tensor& counts, bool, int64_t fill_mode, double, double,
                                 double, int64_t, int64_t) {
  check_args(image, boxes, counts, fill_mode, true);
}

at::Tensor coarse_dropout_meta(const at::Tensor& image, const at::Tensor& boxes,
                               const at::Tensor& counts, bool, int64_t fill_mode, double, double,
                               double, int64_t, int64_t) {
  check_args(image, boxes, counts, fill_mode, true);
  return at::empty_like(image, at::MemoryFormat::Contiguous);
}

at::Tensor coarse_dropout_call(const at::Tensor& image, const at::Tensor& boxes,
                               const at::Tensor& counts, bool dropout_holes, int64_t fill_mode,
                               double fill_value, double fill_low, double fill_high, int64_t seed,
                               int64_t first_sample) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("voxaug::coarse_dropout", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, int64_t,
                            double, double, double, int64_t, int64_t)>();
  return op.call(image, boxes, counts, dropout_holes, fill_mode, fill_value, fill_low, fill_high,
                 seed, first_sample);
}

struct CoarseDropoutFunction : public torch::autograd::Function<CoarseDropoutFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& image,
                            const at::Tensor& boxes, const at::Tensor& counts, bool dropout_holes,
                            int64_t fill_mode, double fill_value, double fill_low, double fill_high,
                            int64_t seed, int64_t first_sample) {
    ctx->saved_data["boxes"] = boxes;
    ctx->saved_data["counts"] = counts;
    ctx->saved_data["dropout_holes"] = dropout_holes;
    at::AutoDispatchBelowADInplaceOrView below;
    return coarse_dropout_call(image, boxes, counts, dropout_holes, fill_mode, fill_value, fill_low,
                               fill_high, seed, first_sample);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor g = coarse_dropout_call(
        grads[0], ctx->saved_data["boxes"].toTensor(), ctx->saved_data["counts"].toTensor(),
        ctx->saved_data["dropout_holes"].toBool(), /*fill_mode=*/0, 0.0, 0.0, 0.0, 0, 0);
    return first_grad_only(g, 9);
  }
};

at::Tensor coarse_dropout_autograd(const at::Tensor& image, const at::Tensor& boxes,
                                   const at::Tensor& counts, bool dropout_holes, int64_t fill_mode,
                                   double fill_value, double fill_low, double fill_high,
                                   int64_t seed, int64_t first_sample) {
  return CoarseDropoutFunction::apply(image, boxes, counts, dropout_holes, fill_mode, fill_value,
                                      fill_low, fill_high, seed, first_sample);
}

}  // namespace

// A dense copy of `image` for the ops that then move its elements in place: through the host
// cache (a fresh 32 MiB+ CPU tensor page-faults on every write, see host_cache.h).
at::Tensor copy_output(const at::Tensor& image) {
  at::Tensor out = empty_output(image.sizes(), image.options());
  out.copy_(image);
  return out;
}

// Coarse shuffle: the core permutes `x`'s boxes in place (host tables).
void run_shuffle(const at::Tensor& x, const at::Tensor& boxes, const at::Tensor& counts,
                 int64_t seed, int64_t first_sample) {
  check_args(x, boxes, counts, 0, false);
  TORCH_CHECK_VALUE(first_sample >= 0 && first_sample + x.size(0) <= (int64_t(1) << 32),
                    "first_sample must be in [0, 2^32 - N], got ", first_sample);
  if (x.numel() == 0) return;
  const at::Tensor b = boxes.contiguous(), c = counts.contiguous();
  CoarseShuffleParams p;
  p.boxes = b.data_ptr<int64_t>();
  p.counts = c.data_ptr<int64_t>();
  p.max_boxes = boxes.size(1);
  p.seed = static_cast<uint64_t>(seed);
  const c10::DeviceGuard guard(x.device());
  call_core([&] {
    coarse_shuffle_(to_view(x, "image"), p, current_stream(x), static_cast<uint32_t>(first_sample));
  });
}

at::Tensor coarse_shuffle_impl(const at::Tensor& image, const at::Tensor& boxes,
                               const at::Tensor& counts, int64_t seed, int64_t first_sample) {
  check_args(image, boxes, counts, 0, false);
  at::Tensor out = copy_output(image);
  run_shuffle(out, boxes, counts, seed, first_sample);
  return out;
}

void coarse_shuffle_inplace_impl(const at::Tensor& image, const at::Tensor& boxes,
                                 const at::Tensor& counts, int64_t seed, int64_t first_sample) {
  run_shuffle(image, boxes, counts, seed, first_sample);
}

void coarse_shuffle_inplace_meta(const at::Tensor& image, const at::Tensor& boxes,
                                 const at::Tensor& counts, int64_t, int64_t) {
  check_args(image, boxes, counts, 0, true);
}

// Patch swaps: a copy of the image (or the image itself), the core swapping in place.
void check_swap_args(const at::Tensor& image, const at::Tensor& locations, const at::Tensor& counts,
                     at::IntArrayRef patch_size, bool meta) {
  check_5d(image, "image", meta);
  (void)to_voxaug_dtype(image.scalar_type(), "image");
  const int64_t n = image.size(0);
  TORCH_CHECK_VALUE(locations.dim() == 3 && locations.size(0) == n && locations.size(2) == 6,
                    "locations must be (N, K, 6) with N = ", n,
                    " (first d, h, w, second d, h, w per swap), got shape ", locations.sizes());
  TORCH_CHECK_VALUE(counts.dim() == 1 && counts.size(0) == n, "counts must be (N,) with N = ", n,
                    ", got shape ", counts.sizes());
  TORCH_CHECK_VALUE(locations.scalar_type() == at::kLong && counts.scalar_type() == at::kLong,
                    "locations and counts must be int64");
  TORCH_CHECK_VALUE((locations.device().is_cpu() && counts.device().is_cpu()) ||
                        (meta && locations.is_meta() && counts.is_meta()),
                    "locations and counts must be CPU tensors (drawn on the host)");
  TORCH_CHECK_VALUE(patch_size.size() == 3, "patch_size must have 3 entries, got ",
                    patch_size.size());
}

void run_swap(const at::Tensor& x, const at::Tensor& locations, const at::Tensor& counts,
              at::IntArrayRef patch_size) {
  check_swap_args(x, locations, counts, patch_size, false);
  if (x.numel() == 0) return;
  const at::Tensor l = locations.contiguous(), c = counts.contiguous();
  PatchSwapParams p;
  p.locations = l.data_ptr<int64_t>();
  p.counts = c.data_ptr<int64_t>();
  p.max_swaps = locations.size(1);
  for (int a = 0; a < 3; ++a) p.patch[a] = patch_size[a];
  // The core checks host tables itself; device tables only get clamped, so check the host copies.
  if (x.is_cuda()) call_core([&] { check_swap_tables(to_view(x, "image"), p); });
  const c10::DeviceGuard guard(x.device());
  const at::Tensor ld = table_to(l, x), cd = table_to(c, x);
  p.locations = ld.data_ptr<int64_t>();
  p.counts = cd.data_ptr<int64_t>();
  call_core([&] { swap_patches_(to_view(x, "image"), p, current_stream(x)); });
}

at::Tensor swap_patches_impl(const at::Tensor& image, const at::Tensor& locations,
                             const at::Tensor& counts, at::IntArrayRef patch_size) {
  check_swap_args(image, locations, counts, patch_size, false);
  at::Tensor out = copy_output(image);
  run_swap(out, locations, counts, patch_size);
  return out;
}

void swap_patches_inplace_impl(const at::Tensor& image, const at::Tensor& locations,
                               const at::Tensor& counts, at::IntArrayRef patch_size) {
  run_swap(image, locations, counts, patch_size);
}

at::Tensor swap_patches_meta(const at::Tensor& image, const at::Tensor& locations,
                             const at::Tensor& counts, at::IntArrayRef patch_size) {
  check_swap_args(image, locations, counts, patch_size, true);
  return at::empty_like(image, at::MemoryFormat::Contiguous);
}

void swap_patches_inplace_meta(const at::Tensor& image, const at::Tensor& locations,
                               const at::Tensor& counts, at::IntArrayRef patch_size) {
  check_swap_args(image, locations, counts, patch_size, true);
}

at::Tensor coarse_shuffle_meta(const at::Tensor& image, const at::Tensor& boxes,
                               const at::Tensor& counts, int64_t, int64_t) {
  check_args(image, boxes, counts, 0, true);
  return at::empty_like(image, at::MemoryFormat::Contiguous);
}

TORCH_LIBRARY_IMPL(voxaug, CPU, m) {
  m.impl("swap_patches", &swap_patches_impl);
  m.impl("swap_patches_", &swap_patches_inplace_impl);
  m.impl("coarse_shuffle", &coarse_shuffle_impl);
  m.impl("coarse_shuffle_", &coarse_shuffle_inplace_impl);
  m.impl("coarse_dropout", &coarse_dropout_impl);
  m.impl("coarse_dropout_", &coarse_dropout_inplace_impl);
}
TORCH_LIBRARY_IMPL(voxaug, CUDA, m) {
  m.impl("swap_patches", &swap_patches_impl);
  m.impl("swap_patches_", &swap_patches_inplace_impl);
  m.impl("coarse_shuffle", &coarse_shuffle_impl);
  m.impl("coarse_shuffle_", &coarse_shuffle_inplace_impl);
  m.impl("coarse_dropout", &coarse_dropout_impl);
  m.impl("coarse_dropout_", &coarse_dropout_inplace_impl);
}
TORCH_LIBRARY_IMPL(voxaug, Meta, m) {
  m.impl("swap_patches", &swap_patches_meta);
  m.impl("swap_patches_", &swap_patches_inplace_meta);
  m.impl("coarse_shuffle", &coarse_shuffle_meta);
  m.impl("coarse_shuffle_", &coarse_shuffle_inplace_meta);
  m.impl("coarse_dropout", &coarse_dropout_meta);
  m.impl("coarse_dropout_", &coarse_dropout_inplace_meta);
}

TORCH_LIBRARY_IMPL(voxaug, Autograd, m) {
  m.impl("coarse_dropout", &coarse_dropout_autograd);
  const char* const no_backward[] = {"coarse_dropout_", "coarse_shuffle", "coarse_shuffle_",
                                     "swap_patches", "swap_patches_"};
  register_no_backward(m, no_backward);
}

}  // namespace voxaug::torch_ext
