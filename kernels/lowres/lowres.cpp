// voxaug: lowres family -- simulated low resolution (validation, CPU backend, routing to CUDA).
#include "voxaug/lowres.h"

#include <algorithm>
#include <string>
#include <vector>

#include "../common/device.h"
#include "lowres_dispatch.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void simulate_low_resolution_cuda(const LowresLaunch& l, int device, cudaStream_t stream);
#endif
namespace {

// CPU twin: the taps of every axis of every sample are tabulated once (lowres_tap, the same
// function the CUDA functor calls per voxel). The w step of lowres_combine is cached per input
// row (two input depth slices per thread): output rows and planes that share low-resolution
// taps reuse it, and the h / d steps run as vectorisable loops over w. Every value is computed with
// the same operations in the same order as lowres_combine: bit-identical to the CUDA path.
template <class T, class O>
void lowres_cpu(const LowresLaunch& l) {
  const int64_t N = l.batch, C = l.size[0], D = l.size[1], H = l.size[2], W = l.size[3];
  const int64_t axes = D + H + W;
  std::vector<LowresTap> taps(static_cast<size_t>(N * axes));
  // A few hundred taps per sample: serial (a parallel region would cost more than it saves).
  for (int64_t n = 0; n < N; ++n) {
    LowresTap* t = taps.data() + n * axes;
    const int64_t* low = l.low_size + 3 * n;
    const LowresAxis ad = lowres_axis(D, low[0], l.align_corners);
    const LowresAxis ah = lowres_axis(H, low[1], l.align_corners);
    const LowresAxis aw = lowres_axis(W, low[2], l.align_corners);
    for (int64_t i = 0; i < D; ++i) t[i] = lowres_tap(i, ad, l.nearest_up, l.align_corners);
    for (int64_t i = 0; i < H; ++i) t[D + i] = lowres_tap(i, ah, l.nearest_up, l.align_corners);
    for (int64_t i = 0; i < W; ++i) t[D + H + i] = lowres_tap(i, aw, l.nearest_up, l.align_corners);
  }
  const T* in = static_cast<const T*>(l.in);
  O* out = static_cast<O*>(l.out);
  const int64_t sd = l.in_stride[2], sh = l.in_stride[3], sw = l.in_stride[4];
#pragma omp parallel
  {
    // w taps of the current sample as arrays, and two cached input slices: the w-interpolated
    // rows of input depth index `id` (one per input h index, made when first needed). Planes of
    // one thread are consecutive, so a slice serves every output plane that reads it.
    std::vector<int64_t> o0(W), o1(W);
    std::vector<float> w0(W), w1(W);
    std::vector<float> rows[2] = {std::vector<float>(H * W), std::vector<float>(H * W)};
    std::vector<char> made[2] = {std::vector<char>(H), std::vector<char>(H)};
    int64_t slice_id[2] = {-1, -1};  // (n * C + c) * D + input d index
    int64_t tap_sample = -1;
#pragma omp for schedule(static)
    for (int64_t plane = 0; plane < N * C * D; ++plane) {
      const int64_t n = plane / (C * D), c = (plane / D) % C, d = plane % D;
      const LowresTap* t = taps.data() + n * axes;
      if (tap_sample != n) {
        for (int64_t w = 0; w < W; ++w) {
          const LowresTap& tw = t[D + H + w];
          o0[w] = tw.i0 * sw, o1[w] = tw.i1 * sw, w0[w] = tw.l0, w1[w] = tw.l1;
        }
        tap_sample = n;
      }
      const LowresTap td = t[d];
      const T* base = in + n * l.in_stride[0] + c * l.in_stride[1];
      const int64_t key0 = (n * C + c) * D + td.i0, key1 = (n * C + c) * D + td.i1;
      int slot[2];
      for (int q = 0; q < 2; ++q) {
        const int64_t key = q == 0 ? key0 : key1;
        int k = slice_id[0] == key ? 0 : (slice_id[1] == key ? 1 : -1);
        if (k < 0) {  // evict the slot the other tap does not use
          const int64_t other = q == 0 ? key1 : key0;
          k = slice_id[0] == other ? 1 : 0;
          slice_id[k] = key;
          std::fill(made[k].begin(), made[k].end(), 0);
        }
        slot[q] = k;
      }
      auto row = [&](int q, int64_t ih) -> const float* {
        const int k = slot[q];
        float* r = rows[k].data() + ih * W;
        if (!made[k][ih]) {
          const T* p = base + (q == 0 ? td.i0 : td.i1) * sd + ih * sh;
          for (int64_t w = 0; w < W; ++w)
            r[w] = lowres_lerp(w0[w], load_as<float>(p[o0[w]]), w1[w], load_as<float>(p[o1[w]]));
          made[k][ih] = 1;
        }
        return r;
      };
      for (int64_t h = 0; h < H; ++h) {
        const LowresTap th = t[D + h];
        const float *r00 = row(0, th.i0), *r01 = row(0, th.i1);
        const float *r10 = row(1, th.i0), *r11 = row(1, th.i1);
        const int64_t e0 = ((c * D + d) * H + h) * W;
        if (l.out_ix.dense) {
          O* dst = out + l.out_ix.offset(n, e0);
          for (int64_t w = 0; w < W; ++w) {
            const float a = lowres_lerp(th.l0, r00[w], th.l1, r01[w]);
            const float b = lowres_lerp(th.l0, r10[w], th.l1, r11[w]);
            dst[w] = store_as<O, float>(lowres_lerp(td.l0, a, td.l1, b));
          }
        } else {
          for (int64_t w = 0; w < W; ++w) {
            const float a = lowres_lerp(th.l0, r00[w], th.l1, r01[w]);
            const float b = lowres_lerp(th.l0, r10[w], th.l1, r11[w]);
            out[l.out_ix.offset(n, e0 + w)] = store_as<O, float>(lowres_lerp(td.l0, a, td.l1, b));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace detail

void simulate_low_resolution(const VolumeView& in, const VolumeView& out,
                             const LowResolutionParams& p, cudaStream_t stream) {
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(in.shape[a] >= 0, "image sizes must be >= 0, got " + in.describe());
    VOXAUG_EXPECTS(out.shape[a] == in.shape[a],
                   "out must have the image's shape: " + out.describe() + " vs " + in.describe());
  }
  VOXAUG_EXPECTS(out.dtype == DType::Float32 || out.dtype == DType::Float16 ||
                     out.dtype == DType::BFloat16 || out.dtype == DType::Float64,
                 std::string("out dtype must be float32, float16, bfloat16 or float64, got ") +
                     dtype_name(out.dtype));
  VOXAUG_EXPECTS(out.device == in.device && out.device_index == in.device_index,
                 "out must be on the image's device");
  const int up = static_cast<int>(p.upsample);
  VOXAUG_EXPECTS(up == 0 || up == 1,
                 "upsample must be Trilinear (0) or Nearest (1), got " + std::to_string(up));
  if (in.numel() == 0) return;
  VOXAUG_EXPECTS(in.data != nullptr && out.data != nullptr, "image and out must not be null");
  VOXAUG_EXPECTS(in.data != out.data, "out must not be the image (the op is a gather)");
  VOXAUG_EXPECTS(p.low_size != nullptr, "low_size must not be null");
  if (in.device == Device::CPU) {
    for (int64_t n = 0; n < in.shape[0]; ++n)
      for (int a = 0; a < 3; ++a)
        VOXAUG_EXPECTS(p.low_size[3 * n + a] >= 1, "low_size[" + std::to_string(n) + "][" +
                                                       std::to_string(a) + "] must be >= 1, got " +
                                                       std::to_string(p.low_size[3 * n + a]));
  }
  detail::LowresLaunch l;
  l.in = in.data;
  l.out = out.data;
  l.in_dtype = in.dtype;
  l.out_dtype = out.dtype;
  for (int a = 0; a < 5; ++a) l.in_stride[a] = in.strides[a];
  l.out_ix = detail::make_indexer(out);
  l.batch = in.shape[0];
  for (int a = 0; a < 4; ++a) l.size[a] = in.shape[a + 1];
  l.low_size = p.low_size;
  l.nearest_up = p.upsample == LowresUpsample::Nearest;
  l.align_corners = p.align_corners;
  if (in.device == Device::CPU) {
    detail::lowres_visit(in.dtype, out.dtype, [&](auto ti, auto to) {
      detail::lowres_cpu<decltype(ti), decltype(to)>(l);
    });
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(in.data, in.device_index, "image");
  detail::check_device_pointer(out.data, in.device_index, "out");
  detail::check_device_pointer(p.low_size, in.device_index, "low_size");
  detail::simulate_low_resolution_cuda(l, in.device_index, stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
