// The window tests' streamed pass (a ring accumulator, window.h StitchFuse::ring), as
// torch_ext's run() and voxaug.inferers drive it: each batch stitched window row by window row
// into `depth` d planes, each finished row's planes finalized into the output before the next
// row's first window. On the host it can run the per-element bodies the CUDA backend launches
// instead of the CPU twin's row loops.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../../kernels/window/window_kernels.h"
#include "test_support.h"
#include "voxaug/window.h"

namespace voxaug_test {

// The CUDA stitch bodies run on the host over windows [first, first + b): `pred` dense (b, K, roi)
// float32 or float16, launches of at most kStitchWindows windows as window_stitch makes them;
// `acc` holds `depth` d planes (padded d, or a ring's).
inline void stitch_bodies_host(float* acc, int64_t K, int64_t depth, const void* pred,
                               voxaug::DType pt, const float* weight, const voxaug::WindowLayout& l,
                               int64_t first, int64_t b, bool first_store = false,
                               bool last_divide = false, const float* count = nullptr) {
  using namespace voxaug;
  const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
  for (int64_t j0 = 0; j0 < b; j0 += detail::kStitchWindows) {
    detail::StitchParams sp;
    sp.acc = acc;
    sp.channels = K;
    sp.depth = depth;
    sp.pred = static_cast<const char*>(pred) + j0 * K * rv * dtype_size(pt);
    const int64_t st[5] = {K * rv, rv, l.roi[1] * l.roi[2], l.roi[2], 1};
    std::copy(st, st + 5, sp.pred_stride);
    sp.weight = weight;
    sp.l = l;
    sp.first_store = first_store;
    sp.last_divide = last_divide;
    sp.count = count;
    detail::stitch_launch_windows(sp, first + j0, std::min(detail::kStitchWindows, b - j0));
    auto run_body = [&](auto body) {
      typename decltype(body)::State s;
      for (int64_t i = 0; i < body.items(); ++i) body(s, 0, i);
    };
    if (pt == DType::Float32)
      run_body(detail::StitchBody<float, float>{sp});
    else
      run_body(detail::StitchBody<float, detail::half_t>{sp});
  }
}

struct RingPass {
  const voxaug::WindowLayout& l;
  int64_t N, K;
  const void* preds;  // (N * windows per image, K, roi), dense, dtype pt
  voxaug::DType pt;
  int64_t B;            // windows per batch (the predictor's sw_batch_size)
  const float* weight;  // importance map (null: constant weights)
  const float* count;   // count map (null: computed on the fly)
  float* ring;          // (N, K, depth, padded h, padded w) float32
  int64_t depth;
  void* out;  // (N, K or 1, size)
  voxaug::DType out_t;
  bool argmax;
  voxaug::Device dev = voxaug::Device::CPU;
  bool bodies = false;  // host only: the device bodies instead of the row loops

  void run() const {
    using namespace voxaug;
    const int64_t total = N * l.windows_per_image(), row_windows = l.count[1] * l.count[2];
    const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
    for (int64_t first = 0; first < total; first += B) {
      const int64_t b = std::min(B, total - first);
      for (int64_t j0 = 0, j1; j0 < b; j0 = j1) {
        const int64_t w0 = first + j0;
        j1 = std::min(b, (w0 / row_windows + 1) * row_windows - first);
        if (w0 > 0 && w0 % row_windows == 0) drain(w0 / row_windows - 1);
        const void* p = static_cast<const char*>(preds) + w0 * K * rv * dtype_size(pt);
        if (bodies)
          stitch_bodies_host(ring, K, depth, p, pt, weight, l, w0, j1 - j0, true);
        else
          window_stitch(
              view(ring, DType::Float32, {N, K, depth, l.padded[1], l.padded[2]}, dev),
              view(const_cast<void*>(p), pt, {j1 - j0, K, l.roi[0], l.roi[1], l.roi[2]}, dev),
              weight, l, w0, StitchFuse{true, false, nullptr, true});
      }
    }
    drain(total / row_windows - 1);
  }

  void drain(int64_t row) const {
    using namespace voxaug;
    const int64_t n = row / l.count[0], k = row % l.count[0];
    const int64_t d0 = k == 0 ? 0 : l.start(0, k);
    const int64_t d1 = k == l.count[0] - 1 ? l.padded[0] : l.start(0, k + 1);
    const int64_t oc = argmax ? 1 : K, ov = oc * l.size[0] * l.size[1] * l.size[2];
    float* acc = ring + n * K * depth * l.padded[1] * l.padded[2];
    char* o = static_cast<char*>(out) + n * ov * dtype_size(out_t);
    if (!bodies) {
      window_finalize(
          view(acc, DType::Float32, {1, K, depth, l.padded[1], l.padded[2]}, dev), count, weight, l,
          view(o, out_t, {1, oc, l.size[0], l.size[1], l.size[2]}, dev), argmax, d0, d1);
      return;
    }
    detail::FinalizeParams fp;
    fp.acc = acc;
    fp.depth = depth;
    fp.z0 = std::clamp<int64_t>(d0 - l.pad_before[0], 0, l.size[0]);
    fp.z1 = std::clamp<int64_t>(d1 - l.pad_before[0], 0, l.size[0]);
    fp.count = count;
    fp.weight = weight;
    fp.channels = K;
    fp.out = o;
    fp.out_t = out_t;
    fp.argmax = argmax;
    fp.l = l;
    const detail::FinalizeBody<float> body{fp};
    typename detail::FinalizeBody<float>::State s;
    for (int64_t i = 0; i < body.items(); ++i) body(s, 0, i);
  }
};

}  // namespace voxaug_test
