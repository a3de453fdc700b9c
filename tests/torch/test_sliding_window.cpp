// The LibTorch API voxaug::sliding_window_inference against an independent reference: MONAI's
// algorithm written out with ATen slicing in float64 (pad, per-window slice, multiply by the
// importance map, add into the output and the count map in window order, divide, crop). The
// reference builds its Gaussian map itself, in float64 from the formula (not with voxaug's
// window_importance_map), so a wrong map in voxaug cannot cancel out.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "voxaug/sliding_window.h"

namespace {

using Fn = std::function<torch::Tensor(const torch::Tensor&)>;
// MONAI's process_fn for the reference, on the (single) predictor output.
using RefProcess = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor& output, const torch::Tensor& windows, const torch::Tensor& map)>;

std::vector<int64_t> starts(int64_t padded, int64_t roi, double overlap) {
  int64_t interval = roi;
  if (roi != padded) interval = std::max<int64_t>(1, static_cast<int64_t>(roi * (1 - overlap)));
  std::vector<int64_t> s;
  for (int64_t k = 0;; ++k) {
    int64_t v = k * interval;
    v -= std::max<int64_t>(v + roi - padded, 0);
    s.push_back(v);
    if (k * interval + roi >= padded) break;
  }
  return s;
}

// MONAI's Gaussian importance map from its formula, naive float64: per axis
// exp(-x^2 / (2 sigma^2)) with x = i - (P - 1) / 2 and sigma = sigma_scale * P, the outer
// product, then clamped below at max(min, 1e-3).
torch::Tensor gaussian_map64(const std::vector<int64_t>& roi,
                             const std::vector<double>& sigma_scale) {
  torch::Tensor map = torch::ones({roi[0], roi[1], roi[2]}, torch::kDouble);
  auto a = map.accessor<double, 3>();
  std::vector<std::vector<double>> g(3);
  for (int ax = 0; ax < 3; ++ax) {
    const double ss = sigma_scale.size() == 1 ? sigma_scale[0] : sigma_scale[ax];
    const double sigma = ss * static_cast<double>(roi[ax]);
    for (int64_t i = 0; i < roi[ax]; ++i) {
      const double x = static_cast<double>(i) - (static_cast<double>(roi[ax]) - 1.0) / 2.0;
      g[ax].push_back(std::exp(-x * x / (2.0 * sigma * sigma)));
    }
  }
  double lo = INFINITY;
  for (int64_t i = 0; i < roi[0]; ++i)
    for (int64_t j = 0; j < roi[1]; ++j)
      for (int64_t k = 0; k < roi[2]; ++k) {
        a[i][j][k] = g[0][i] * g[1][j] * g[2][k];
        lo = std::min(lo, a[i][j][k]);
      }
  lo = std::max(lo, 1e-3);
  for (int64_t i = 0; i < roi[0]; ++i)
    for (int64_t j = 0; j < roi[1]; ++j)
      for (int64_t k = 0; k < roi[2]; ++k) a[i][j][k] = std::max(a[i][j][k], lo);
  return map;
}

struct RefOptions {
  std::vector<double> overlap = {0.25};  // one value or one per axis
  bool gaussian = false;
  std::vector<double> sigma_scale = {0.125};
  std::string pad_mode = "constant";
  double cval = 0.0;
  torch::Tensor roi_weight_map;  // replaces the map when defined
  std::optional<torch::ScalarType> window_dtype;
  // MONAI's process_fn rule: per batch, (outputs, weight) = process(outputs, windows, map); the
  // batch is multiplied by its own weight, and the count map is the first batch's weight summed
  // over every window (monai/inferers/utils.py: count_map is filled when the output is first
  // allocated).
  RefProcess process;
};

// Returns float64 (N, K, D, H, W); *scale (if given) gets the weighted mean of |prediction|
// over the covering windows (sum w |p| / sum w, the size of the summed terms, for relative
// tolerances), *cover the number of covering windows over sum w (what an absolute error per
// term becomes after the division) and *batches the number of predictor calls.
torch::Tensor reference(const torch::Tensor& x, std::vector<int64_t> roi, int64_t sw, const Fn& f,
                        const RefOptions& ro, torch::Tensor* scale = nullptr,
                        int64_t* batches = nullptr, torch::Tensor* cover = nullptr) {
  namespace F = torch::nn::functional;
  std::vector<int64_t> pad;  // F.pad order: last axis first
  for (int a = 2; a >= 0; --a) {
    const int64_t diff = std::max<int64_t>(roi[a] - x.size(2 + a), 0);
    pad.push_back(diff / 2);
    pad.push_back(diff - diff / 2);
  }
  torch::Tensor xp = x;
  if (std::any_of(pad.begin(), pad.end(), [](int64_t v) { return v > 0; })) {
    auto opts = F::PadFuncOptions(pad);
    if (ro.pad_mode == "replicate") opts.mode(torch::kReplicate);
    if (ro.pad_mode == "reflect") opts.mode(torch::kReflect);
    if (ro.pad_mode == "circular") opts.mode(torch::kCircular);
    if (ro.pad_mode == "constant") opts.value(ro.cval);  // MONAI: cval fills constant mode only
    xp = F::pad(x, opts);
  }
  std::vector<std::vector<int64_t>> s(3);
  for (int a = 0; a < 3; ++a)
    s[a] = starts(xp.size(2 + a), roi[a], ro.overlap.size() == 1 ? ro.overlap[0] : ro.overlap[a]);
  torch::Tensor w = ro.roi_weight_map.defined()
                        ? ro.roi_weight_map.to(torch::kDouble).reshape({roi[0], roi[1], roi[2]})
                    : ro.gaussian ? gaussian_map64(roi, ro.sigma_scale)
                                  : torch::ones({roi[0], roi[1], roi[2]}, torch::kDouble);
  std::vector<std::vector<int64_t>> wins;  // (n, d, h, w) in MONAI's order
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t d : s[0])
      for (int64_t h : s[1])
        for (int64_t ww : s[2]) wins.push_back({n, d, h, ww});
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  torch::Tensor out, mag, count = torch::zeros({xp.size(2), xp.size(3), xp.size(4)}, f64);
  torch::Tensor windows = torch::zeros_like(count);
  torch::Tensor count_w;  // with ro.process: the first batch's weight, else w
  int64_t calls = 0;
  for (size_t i = 0; i < wins.size(); i += sw) {
    std::vector<torch::Tensor> batch;
    for (size_t j = i; j < std::min(wins.size(), i + sw); ++j) {
      const auto& v = wins[j];
      batch.push_back(xp.slice(0, v[0], v[0] + 1)
                          .slice(2, v[1], v[1] + roi[0])
                          .slice(3, v[2], v[2] + roi[1])
                          .slice(4, v[3], v[3] + roi[2]));
    }
    torch::Tensor in = torch::cat(batch);
    if (ro.window_dtype) in = in.to(*ro.window_dtype);
    torch::Tensor p = f(in), wb = w;
    if (ro.process) {
      std::tie(p, wb) = ro.process(p, in, w);
      wb = wb.to(torch::kDouble).reshape({roi[0], roi[1], roi[2]});
      if (!count_w.defined()) count_w = wb;
    }
    p = p.to(torch::kDouble) * wb;
    const torch::Tensor pa = p.abs();
    ++calls;
    if (!out.defined()) {
      out = torch::zeros({x.size(0), p.size(1), xp.size(2), xp.size(3), xp.size(4)}, f64);
      mag = torch::zeros_like(out);
    }
    for (size_t j = i; j < std::min(wins.size(), i + sw); ++j) {
      const auto& v = wins[j];
      out.slice(0, v[0], v[0] + 1)
          .slice(2, v[1], v[1] + roi[0])
          .slice(3, v[2], v[2] + roi[1])
          .slice(4, v[3], v[3] + roi[2]) += p.slice(0, j - i, j - i + 1);
      mag.slice(0, v[0], v[0] + 1)
          .slice(2, v[1], v[1] + roi[0])
          .slice(3, v[2], v[2] + roi[1])
          .slice(4, v[3], v[3] + roi[2]) += pa.slice(0, j - i, j - i + 1);
    }
  }
  if (batches != nullptr) *batches = calls;
  if (!count_w.defined()) count_w = w;
  for (int64_t d : s[0])
    for (int64_t h : s[1])
      for (int64_t ww : s[2]) {
        count.slice(0, d, d + roi[0]).slice(1, h, h + roi[1]).slice(2, ww, ww + roi[2]) += count_w;
        windows.slice(0, d, d + roi[0]).slice(1, h, h + roi[1]).slice(2, ww, ww + roi[2]) += 1.0;
      }
  auto crop = [&](const torch::Tensor& t) {
    return t.slice(2, pad[4], pad[4] + x.size(2))
        .slice(3, pad[2], pad[2] + x.size(3))
        .slice(4, pad[0], pad[0] + x.size(4));
  };
  if (scale != nullptr) *scale = crop(mag / count);
  if (cover != nullptr) *cover = crop((windows / count).unsqueeze(0).unsqueeze(0));
  return crop(out / count);
}

// The earlier tests' form: one overlap, Gaussian sigma_scale 0.125, no cval.
torch::Tensor reference(const torch::Tensor& x, std::vector<int64_t> roi, int64_t sw, const Fn& f,
                        double overlap, bool gaussian, const std::string& pad_mode,
                        torch::Tensor* scale = nullptr) {
  RefOptions ro;
  ro.overlap = {overlap};
  ro.gaussian = gaussian;
  ro.pad_mode = pad_mode;
  return reference(x, std::move(roi), sw, f, ro, scale);
}

// max over voxels of |got - want| - (atol + rtol * scale): <= 0 within tolerance. voxaug sums
// in float32, the reference in float64: the difference is a few float32 roundings (2^-24 each)
// of the size of the summed terms, `scale` (reference's *scale), whatever their signs.
double excess(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& scale,
              double atol, double rtol) {
  return ((got.to(torch::kDouble) - want).abs() - (atol + rtol * scale)).max().item<double>();
}

struct Scale {  // a plain functor predictor
  torch::Tensor operator()(const torch::Tensor& t) const { return t * 3.0 - 1.0; }
};

}  // namespace

TEST(SlidingWindowTorch, LambdaModuleAndFunctorMatchReference) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(2, 3, 3).padding(1));
  const torch::Tensor x = torch::randn({2, 2, 11, 13, 9});
  for (bool gaussian : {false, true})
    for (double ov : {0.0, 0.25, 0.6}) {
      voxaug::SlidingWindowOptions o;
      o.overlap = {ov};
      o.mode = gaussian ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant;
      const double tol = gaussian ? 1e-5 : 1e-6;
      torch::Tensor size;  // |prediction| of the summed terms: float32 rounding relative to it
      // Module holder: module->forward(x).
      torch::Tensor got = voxaug::sliding_window_inference(x, {6, 7, 5}, 3, conv, o);
      torch::Tensor want = reference(
          x, {6, 7, 5}, 3, [&](const torch::Tensor& t) { return conv->forward(t); }, ov, gaussian,
          "constant", &size);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LE(excess(got, want, size, tol, 1e-6), 0.0);
      // std::function / lambda.
      got = voxaug::sliding_window_inference(
          x, {6, 7, 5}, 4, [](const torch::Tensor& t) { return t.sigmoid(); }, o);
      want = reference(
          x, {6, 7, 5}, 4, [](const torch::Tensor& t) { return t.sigmoid(); }, ov, gaussian,
          "constant", &size);
      EXPECT_LE(excess(got, want, size, tol, 1e-6), 0.0);
      // A functor object.
      Scale scale;
      got = voxaug::sliding_window_inference(x, {6, 7, 5}, 2, scale, o);
      want = reference(x, {6, 7, 5}, 2, Scale{}, ov, gaussian, "constant", &size);
      EXPECT_LE(excess(got, want, size, tol, 1e-6), 0.0);
      EXPECT_GT(got.abs().max().item<double>(), 0.1);
    }
}

TEST(SlidingWindowTorch, PaddingInfererCacheAndArgmax) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({1, 1, 5, 12, 7});
  voxaug::SlidingWindowOptions o;
  o.overlap = {0.5};
  o.mode = voxaug::BlendMode::Gaussian;
  o.padding_mode = voxaug::WindowPad::Replicate;
  auto f = [](const torch::Tensor& t) { return torch::cat({t, -t, t * t}, 1); };
  torch::Tensor size;
  const torch::Tensor want = reference(x, {8, 6, 10}, 3, f, 0.5, true, "replicate", &size);
  voxaug::SlidingWindowInferer inferer({8, 6, 10}, 3, o);
  const torch::Tensor a = inferer(x, f), b = inferer(x, f);
  ASSERT_EQ(a.sizes(), torch::IntArrayRef({1, 3, 5, 12, 7}));
  EXPECT_LE(excess(a, want, size, 1e-5, 1e-6), 0.0);
  EXPECT_TRUE(torch::equal(a, b));
  o.argmax = true;
  const torch::Tensor labels = voxaug::sliding_window_inference(x, {8, 6, 10}, 3, f, o);
  EXPECT_EQ(labels.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(labels, want.argmax(1, true)));
}

// Labels from a ring accumulator (several window rows along d, a batch crossing rows and
// images: batches of 5, rows of 7 windows) equal the argmax of the float64 reference.
TEST(SlidingWindowTorch, RingArgmaxMatchesReference) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 1, 23, 12, 7});
  auto f = [](const torch::Tensor& t) { return torch::cat({t, -t, t * t - 0.5}, 1); };
  for (bool gaussian : {false, true}) {
    voxaug::SlidingWindowOptions o;
    o.overlap = {0.7};
    o.mode = gaussian ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant;
    o.argmax = true;
    o.output_dtype = torch::kByte;
    const torch::Tensor want = reference(x, {5, 6, 10}, 5, f, 0.7, gaussian, "constant", nullptr);
    const torch::Tensor labels = voxaug::sliding_window_inference(x, {5, 6, 10}, 5, f, o);
    ASSERT_EQ(labels.sizes(), torch::IntArrayRef({2, 1, 23, 12, 7}));
    EXPECT_EQ(labels.scalar_type(), torch::kByte);
    EXPECT_TRUE(torch::equal(labels.to(torch::kLong), want.argmax(1, true)))
        << "gaussian " << gaussian;
  }
}

TEST(SlidingWindowTorch, BadArgumentsNameTheArgument) {
  const torch::Tensor x = torch::randn({1, 1, 8, 8, 8});
  auto id = [](const torch::Tensor& t) { return t; };
  voxaug::SlidingWindowOptions o;
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              voxaug::sliding_window_inference(x, {4, 4}, 1, id, o);
            }).find("roi_size must have one value per spatial axis"),
            std::string::npos);
  EXPECT_NE(message([&] {
              voxaug::sliding_window_inference(x, {4, 4, 4}, 0, id, o);
            }).find("sw_batch_size must be >= 1"),
            std::string::npos);
  EXPECT_NE(message([&] {
              voxaug::sliding_window_inference(x.slice(0, 0, 0), {4, 4, 4}, 1, id, o);
            }).find("inputs must hold at least one image, got batch size 0"),
            std::string::npos);
  o.overlap = {1.0};
  EXPECT_NE(message([&] {
              voxaug::sliding_window_inference(x, {4, 4, 4}, 1, id, o);
            }).find("overlap must be in [0, 1)"),
            std::string::npos);
  o.overlap = {0.25};
  auto shrink = [](const torch::Tensor& t) { return t.slice(2, 0, 2); };
  EXPECT_NE(message([&] {
              voxaug::sliding_window_inference(x, {4, 4, 4}, 2, shrink, o);
            }).find("the predictor changed the window shape"),
            std::string::npos);
}

TEST(SlidingWindowTorch, CudaGraphNeedsCudaInputs) {
  voxaug::SlidingWindowOptions o;
  o.cuda_graph = true;
  voxaug::SlidingWindowInferer inferer({4, 4, 4}, 2, o);
  auto id = [](const torch::Tensor& t) { return t * 2; };
  try {
    inferer(torch::randn({1, 1, 8, 8, 8}), id);
    ADD_FAILURE() << "no error for CPU inputs";
  } catch (const c10::Error& e) {
    const std::string m = e.what_without_backtrace();
    EXPECT_TRUE(m.find("cuda_graph needs CUDA inputs") != std::string::npos ||
                m.find("built without CUDA") != std::string::npos)
        << m;
  }
}

// The captured pass replayed on new inputs equals the eager pass bit for bit (same kernels,
// same order) and the MONAI-algorithm reference.
TEST(SlidingWindowTorch, CudaGraphReplayEqualsEager) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA-graph capture not tested";
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  torch::nn::Conv3d conv(torch::nn::Conv3dOptions(2, 3, 3).padding(1));
  conv->to(torch::kCUDA);
  voxaug::SlidingWindowOptions o;
  o.overlap = {0.5};
  o.mode = voxaug::BlendMode::Gaussian;
  voxaug::SlidingWindowInferer eager({6, 7, 5}, 3, o);
  o.cuda_graph = true;
  voxaug::SlidingWindowInferer graphed({6, 7, 5}, 3, o);
  for (int k = 0; k < 3; ++k) {
    const torch::Tensor x = torch::randn({2, 2, 11, 13, 9}).to(torch::kCUDA);
    const torch::Tensor got = graphed(x, conv), want = eager(x, conv);
    EXPECT_TRUE(torch::equal(got, want)) << k;
    torch::Tensor size;
    const torch::Tensor ref = reference(
        x.cpu(), {6, 7, 5}, 3,
        [&](const torch::Tensor& t) { return conv->forward(t.cuda()).cpu(); }, 0.5, true,
        "constant", &size);
    EXPECT_LE(excess(got.cpu(), ref, size, 1e-5, 1e-6), 0.0) << k;
  }
  EXPECT_EQ(graphed.graph_count(), 1u);
}

// device / sw_device given as "cuda" without an index: the current device, as an indexed one
// (the count map's core call needs a real index; the graphed path compares devices).
TEST(SlidingWindowTorch, CudaDeviceWithoutIndexEqualsIndexed) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: device options not tested";
  torch::NoGradGuard no_grad;
  auto id = [](const torch::Tensor& t) { return t * 2; };
  const torch::Tensor x = torch::randn({1, 1, 20, 18, 22}).to(torch::kCUDA);
  voxaug::SlidingWindowOptions o;
  o.mode = voxaug::BlendMode::Gaussian;
  o.device = torch::Device(torch::kCUDA, 0);
  o.sw_device = torch::Device(torch::kCUDA, 0);
  const torch::Tensor want = voxaug::SlidingWindowInferer({8, 8, 8}, 2, o)(x, id);
  o.device = torch::Device(torch::kCUDA);
  o.sw_device = torch::Device(torch::kCUDA);
  EXPECT_TRUE(torch::equal(voxaug::SlidingWindowInferer({8, 8, 8}, 2, o)(x, id), want));
  EXPECT_TRUE(torch::equal(voxaug::sliding_window_inference(x, {8, 8, 8}, 2, id, o), want));
  o.cuda_graph = true;
  EXPECT_TRUE(torch::equal(voxaug::SlidingWindowInferer({8, 8, 8}, 2, o)(x, id), want));
}

// The TorchScript branch of the predictor adapter (module.forward({x}).toTensor()): a small conv
// net built as a torch::jit::Module in the test, run through the free function and the inferer.
// The reference calls the same conv net written with ATen ops directly (torch::conv3d, relu),
// not through TorchScript, so the adapter's call and the stitching are both checked.
TEST(SlidingWindowTorch, TorchScriptModuleMatchesReference) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  const torch::Tensor w1 = torch::randn({4, 2, 3, 3, 3}) * 0.2, b1 = torch::randn({4}) * 0.1;
  const torch::Tensor w2 = torch::randn({3, 4, 1, 1, 1}) * 0.5, b2 = torch::randn({3}) * 0.1;
  torch::jit::Module net("SmallConvNet");
  net.register_parameter("w1", w1, false);
  net.register_parameter("b1", b1, false);
  net.register_parameter("w2", w2, false);
  net.register_parameter("b2", b2, false);
  net.define(R"JIT(
def forward(self, x):
    y = torch.relu(torch.conv3d(x, self.w1, self.b1, [1, 1, 1], [1, 1, 1]))
    return torch.conv3d(y, self.w2, self.b2)
)JIT");
  net.eval();
  const Fn direct = [&](const torch::Tensor& t) {
    return torch::conv3d(torch::relu(torch::conv3d(t, w1, b1, 1, 1)), w2, b2);
  };
  const torch::Tensor x = torch::randn({2, 2, 11, 13, 9});
  // The script computes the reference's net (checked on one window batch), so a mismatch
  // below is the adapter's or the sliding window's.
  const torch::Tensor probe = x.slice(2, 0, 6).slice(3, 0, 7).slice(4, 0, 5);
  ASSERT_TRUE(torch::allclose(net.forward({probe}).toTensor(), direct(probe), 1e-6, 1e-6));
  for (bool gaussian : {false, true}) {
    voxaug::SlidingWindowOptions o;
    o.overlap = {0.5};
    o.mode = gaussian ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant;
    torch::Tensor size;
    const torch::Tensor want = reference(x, {6, 7, 5}, 3, direct, 0.5, gaussian, "constant", &size);
    const torch::Tensor got = voxaug::sliding_window_inference(x, {6, 7, 5}, 3, net, o);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    // float32 convolutions and accumulation against a float64 sum of the same float32 outputs.
    EXPECT_LE(excess(got, want, size, 1e-5, 1e-6), 0.0) << gaussian;
    EXPECT_GT(got.abs().max().item<double>(), 0.1);
    EXPECT_FALSE(got.isnan().any().item<bool>());
    voxaug::SlidingWindowInferer inferer({6, 7, 5}, 3, o);
    const torch::Tensor a = inferer(x, net), b = inferer(x, net);
    EXPECT_LE(excess(a, want, size, 1e-5, 1e-6), 0.0) << gaussian;
    EXPECT_TRUE(torch::equal(a, b));
  }
}

// The options that mirror MONAI's arguments, one case each, against the float64 reference
// above (its own Gaussian map, F.pad for every padding mode, windows cast to window_dtype before
// the predictor). The predictor is position-sensitive within the window (a 3x3x3 convolution
// with zero padding at the window's border plus a ramp over window coordinates), so windows
// gathered or stitched at the wrong place, or weighted with the wrong map, change the result.
namespace {

struct OptionCase {  // the defaults: SlidingWindowOptions' own, on an odd-sized batch of 2
  std::string name;
  std::vector<int64_t> shape = {2, 2, 13, 11, 14};  // (N, C, D, H, W)
  std::vector<int64_t> roi = {6, 5, 7};
  int64_t sw = 3;
  std::vector<double> overlap = {0.25};
  voxaug::BlendMode mode = voxaug::BlendMode::Constant;
  std::vector<double> sigma_scale = {0.125};
  voxaug::WindowPad pad = voxaug::WindowPad::Constant;
  double cval = 0.0;
  bool weight_map = false;
  std::optional<torch::ScalarType> window_dtype, output_dtype;
  torch::ScalarType pred_dtype = torch::kFloat;
  bool progress = false;
};

std::ostream& operator<<(std::ostream& os, const OptionCase& c) {
  return os << c.name;
}

class SlidingWindowOptionsTest : public ::testing::TestWithParam<OptionCase> {};

TEST_P(SlidingWindowOptionsTest, MatchesFloat64Reference) {
  const OptionCase& c = GetParam();
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn(c.shape);
  const torch::Tensor k = torch::randn({2, c.shape[1], 3, 3, 3}) * 0.3;
  const torch::Tensor ramp = torch::linspace(-1.0, 1.0, c.roi[0] * c.roi[1] * c.roi[2])
                                 .reshape({1, 1, c.roi[0], c.roi[1], c.roi[2]});
  const torch::ScalarType pred_t = c.pred_dtype;
  const Fn f = [&, pred_t](const torch::Tensor& t) {
    const torch::Tensor y = torch::conv3d(t.to(torch::kFloat), k, {}, 1, 1);
    return torch::cat({y + ramp, y.sigmoid() - ramp}, 1).to(pred_t);
  };

  voxaug::SlidingWindowOptions o;
  o.overlap = c.overlap;
  o.mode = c.mode;
  o.sigma_scale = c.sigma_scale;
  o.padding_mode = c.pad;
  o.cval = c.cval;
  o.window_dtype = c.window_dtype;
  o.output_dtype = c.output_dtype;
  o.progress = c.progress;
  RefOptions ro;
  ro.overlap = c.overlap;
  ro.gaussian = c.mode == voxaug::BlendMode::Gaussian;
  ro.sigma_scale = c.sigma_scale;
  ro.pad_mode = c.pad == voxaug::WindowPad::Constant    ? "constant"
                : c.pad == voxaug::WindowPad::Reflect   ? "reflect"
                : c.pad == voxaug::WindowPad::Replicate ? "replicate"
                                                        : "circular";
  ro.cval = c.cval;
  ro.window_dtype = c.window_dtype;
  if (c.weight_map) {
    o.roi_weight_map = torch::rand({c.roi[0], c.roi[1], c.roi[2]}) + 0.05;
    ro.roi_weight_map = *o.roi_weight_map;
  }
  std::vector<torch::ScalarType> seen;
  const Fn recorded = [&](const torch::Tensor& t) {
    seen.push_back(t.scalar_type());
    return f(t);
  };

  if (c.progress) testing::internal::CaptureStderr();
  const torch::Tensor got = voxaug::sliding_window_inference(x, c.roi, c.sw, recorded, o);
  const std::string err = c.progress ? testing::internal::GetCapturedStderr() : std::string();
  int64_t batches = 0;
  torch::Tensor size, cover;
  const torch::Tensor want = reference(x, c.roi, c.sw, f, ro, &size, &batches, &cover);

  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.scalar_type(), c.output_dtype.value_or(torch::kFloat));
  ASSERT_EQ(static_cast<int64_t>(seen.size()), batches);
  for (torch::ScalarType t : seen) EXPECT_EQ(t, c.window_dtype.value_or(torch::kFloat));
  const torch::Tensor g = got.to(torch::kDouble);
  EXPECT_FALSE(g.isnan().any().item<bool>());
  EXPECT_GT(g.abs().max().item<double>(), 0.1);
  // Tolerance: float32 accumulation against float64 (1e-5 absolute, 1e-6 of the summed terms'
  // size); a float16/bfloat16 predictor output multiplied by the map in its own dtype (MONAI's
  // in-place `patch *= w`: each product rounded, at most 2^-11 / 2^-8 of itself, so of `size`,
  // and for float16 products below its normal range (small Gaussian weights) at most 2^-25
  // absolute each, so of `cover`); and the rounding of the output dtype (half an ulp: 2^-11 /
  // 2^-8 of the value; 2x margin).
  auto unit = [](std::optional<torch::ScalarType> t) {
    return t == torch::kHalf       ? std::ldexp(1.0, -11)
           : t == torch::kBFloat16 ? std::ldexp(1.0, -8)
                                   : 0.0;
  };
  const double subnormal = c.pred_dtype == torch::kHalf ? std::ldexp(1.0, -25) : 0.0;
  const torch::Tensor bound = 1e-5 + (1e-6 + unit(c.pred_dtype)) * size + subnormal * cover +
                              2.0 * unit(c.output_dtype) * want.abs();
  EXPECT_LE(((g - want).abs() - bound).max().item<double>(), 0.0)
      << "max |got - want| = " << (g - want).abs().max().item<double>();

  if (c.progress) {
    // One line per window batch, numbered 1..batches of batches.
    std::istringstream lines(err);
    std::string line;
    int64_t n = 0;
    while (std::getline(lines, line)) {
      ++n;
      EXPECT_NE(line.find("batch " + std::to_string(n) + "/" + std::to_string(batches)),
                std::string::npos)
          << line;
    }
    EXPECT_EQ(n, batches) << err;
  }
}

OptionCase base_case(std::string name) {
  OptionCase c;
  c.name = std::move(name);
  return c;
}

std::vector<OptionCase> option_cases() {
  std::vector<OptionCase> v;
  OptionCase c = base_case("PerAxisOverlapConstant");
  c.overlap = {0.5, 0.0, 0.75};
  v.push_back(c);
  c = base_case("PerAxisOverlapGaussian");
  c.overlap = {0.25, 0.6, 0.4};
  c.mode = voxaug::BlendMode::Gaussian;
  v.push_back(c);
  c = base_case("SigmaScaleOne");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.sigma_scale = {0.3};
  v.push_back(c);
  c = base_case("SigmaScalePerAxis");  // 0.05 on d: the 1e-3 floor of the map matters
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.sigma_scale = {0.05, 0.2, 0.5};
  v.push_back(c);
  // roi larger than the image on d (odd difference) and w (even), smaller on h.
  // cval fills constant padding only (MONAI: F.pad refuses a value for the other modes; so does
  // voxaug: SlidingWindowCvalOnlyWithConstantPadding).
  for (auto [pad, name] : {std::pair{voxaug::WindowPad::Constant, "ConstantCval"},
                           std::pair{voxaug::WindowPad::Reflect, "Reflect"},
                           std::pair{voxaug::WindowPad::Replicate, "Replicate"},
                           std::pair{voxaug::WindowPad::Circular, "Circular"}}) {
    for (bool gaussian : {false, true}) {
      c = base_case(std::string(name) + (gaussian ? "Gaussian" : "Constant"));
      c.shape = {2, 2, 7, 15, 8};
      c.roi = {10, 6, 12};
      c.pad = pad;
      c.cval = pad == voxaug::WindowPad::Constant ? 0.75 : 0.0;
      c.mode = gaussian ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant;
      v.push_back(c);
    }
  }
  c = base_case("RoiWeightMap");
  c.overlap = {0.5};
  c.weight_map = true;
  v.push_back(c);
  c = base_case("RoiWeightMapOverridesGaussian");
  c.overlap = {0.5, 0.25, 0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.weight_map = true;
  v.push_back(c);
  c = base_case("WindowDtypeHalf");
  c.overlap = {0.5};
  c.window_dtype = torch::kHalf;
  v.push_back(c);
  c = base_case("WindowDtypeBFloat16Gaussian");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.window_dtype = torch::kBFloat16;
  v.push_back(c);
  c = base_case("OutputDtypeHalf");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.output_dtype = torch::kHalf;
  v.push_back(c);
  c = base_case("OutputDtypeBFloat16Cropped");  // cropped: not the in-place finalize
  c.shape = {1, 2, 5, 11, 9};
  c.roi = {8, 5, 7};
  c.output_dtype = torch::kBFloat16;
  v.push_back(c);
  c = base_case("RingCroppedManyRowsGaussian");  // a ring of roi d planes, drained row by row
  c.shape = {2, 2, 29, 4, 9};
  c.overlap = {0.6, 0.25, 0.5};
  c.sw = 5;
  c.mode = voxaug::BlendMode::Gaussian;
  v.push_back(c);
  c = base_case("OutputDtypeFloat64");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.output_dtype = torch::kDouble;
  v.push_back(c);
  c = base_case("PredictorHalf");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.pred_dtype = torch::kHalf;
  v.push_back(c);
  c = base_case("PredictorBFloat16");
  c.overlap = {0.25, 0.5, 0.0};
  c.pred_dtype = torch::kBFloat16;
  v.push_back(c);
  c = base_case("PredictorHalfWindowHalfOutputHalf");
  c.overlap = {0.5};
  c.mode = voxaug::BlendMode::Gaussian;
  c.window_dtype = torch::kHalf;
  c.pred_dtype = torch::kHalf;
  c.output_dtype = torch::kHalf;
  v.push_back(c);
  c = base_case("Progress");
  c.sw = 4;
  c.progress = true;
  v.push_back(c);
  c = base_case("ProgressOneWindowPerBatch");
  c.shape = {1, 1, 9, 8, 10};
  c.sw = 1;
  c.progress = true;
  v.push_back(c);
  return v;
}

// A non-zero cval with a padding mode that takes none: refused when the image needs padding
// (MONAI's torch.nn.functional.pad raises there), accepted when it does not (MONAI never pads).
TEST(SlidingWindowTorch, SlidingWindowCvalOnlyWithConstantPadding) {
  torch::NoGradGuard no_grad;
  const Fn f = [](const torch::Tensor& t) { return t * 2.0; };
  for (auto pad :
       {voxaug::WindowPad::Reflect, voxaug::WindowPad::Replicate, voxaug::WindowPad::Circular}) {
    voxaug::SlidingWindowOptions o;
    o.padding_mode = pad;
    o.cval = 0.75;
    const torch::Tensor small = torch::rand({1, 1, 7, 15, 8});
    EXPECT_THROW(voxaug::sliding_window_inference(small, {10, 6, 12}, 2, f, o), c10::ValueError);
    const torch::Tensor big = torch::rand({1, 1, 12, 15, 13});
    const torch::Tensor y = voxaug::sliding_window_inference(big, {10, 6, 12}, 2, f, o);
    EXPECT_TRUE(torch::allclose(y, big * 2.0, 1e-6, 1e-6));
    o.cval = 0.0;
    EXPECT_EQ(voxaug::sliding_window_inference(small, {10, 6, 12}, 2, f, o).sizes(), small.sizes());
  }
}

INSTANTIATE_TEST_SUITE_P(SlidingWindowTorch, SlidingWindowOptionsTest,
                         ::testing::ValuesIn(option_cases()),
                         [](const ::testing::TestParamInfo<OptionCase>& i) {
                           return i.param.name;
                         });

}  // namespace

// ---- process_fn (MONAI's per-batch hook on the outputs and the importance map) ----
// voxaug's process_fn against the float64 reference with MONAI's rule (RefOptions::process):
// each batch multiplied by the weight its process_fn call returned, the count map from the
// first batch's weight. The Python API is compared with MONAI itself on the same rule
// (tests/python/test_window.py, test_process_fn_*).
namespace {

// One process_fn body for both sides: (output, windows, map, call number) -> (output, weight).
using ProcessBody = std::function<std::pair<torch::Tensor, torch::Tensor>(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, int)>;

voxaug::ProcessFn voxaug_process(ProcessBody body, int* calls) {
  return [body, calls](const std::vector<torch::Tensor>& outs, const torch::Tensor& windows,
                       const torch::Tensor& map) {
    EXPECT_EQ(outs.size(), 1u);
    auto [out, w] = body(outs.at(0), windows, map, (*calls)++);
    return std::pair<std::vector<torch::Tensor>, torch::Tensor>{{out}, w};
  };
}

RefProcess ref_process(ProcessBody body, int* calls) {
  return [body, calls](const torch::Tensor& out, const torch::Tensor& windows,
                       const torch::Tensor& map) { return body(out, windows, map, (*calls)++); };
}

struct ProcessCase {
  std::string name;
  ProcessBody body;
};

std::vector<ProcessCase> process_cases(const std::vector<int64_t>& roi) {
  const torch::Tensor ramp =
      torch::linspace(0.5, 1.5, roi[0] * roi[1] * roi[2]).reshape({1, 1, roi[0], roi[1], roi[2]});
  return {
      // Outputs scaled, the map made affine (roi-shaped, as handed over).
      {"ScaleAndAffineWeight",
       [](const torch::Tensor& o, const torch::Tensor&, const torch::Tensor& m, int) {
         return std::pair{o * 1.5 - 0.25, m * 2.0 + 0.5};
       }},
      // A per-voxel ramp on the map, returned as (1, 1, roi); outputs that read the windows.
      {"RampWeightUsesWindows",
       [ramp](const torch::Tensor& o, const torch::Tensor& x, const torch::Tensor& m, int) {
         return std::pair{o.sigmoid() + x.to(o.scalar_type()).mean(1, true),
                          m.unsqueeze(0).unsqueeze(0) * ramp.to(m.scalar_type())};
       }},
      // Weights that change from batch to batch: each batch takes its own, the count map the
      // first batch's only (a count map from any other batch's weight changes the result). The
      // window term is kept positive: a weight near 0 (the Gaussian tails are 1e-3) would make
      // the count map near 0 and the quotient ill-conditioned.
      {"PerBatchWeight",
       [](const torch::Tensor& o, const torch::Tensor& x, const torch::Tensor& m, int call) {
         return std::pair{o * 2.0 - 0.5,
                          m * (1.0 + 0.25 * call) + 0.01 * x.to(m.scalar_type()).mean().abs()};
       }},
  };
}

std::string value_error(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::ValueError& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return std::string("not a c10::ValueError: ") + e.what();
  }
  return "no error";
}

}  // namespace

// process_fn bodies x constant / Gaussian / a roi_weight_map / an image smaller than the roi
// (padded, cropped) / float64 inputs, the free function and the inferer, against the float64
// reference. Tolerance as the option tests': float32 accumulation and a float32 map and weight
// (voxaug) against float64 ones (reference): 1e-5 absolute and 1e-6 of the summed terms' size.
TEST(SlidingWindowTorch, ProcessFnMatchesReference) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  struct Setup {
    std::string name;
    std::vector<int64_t> shape, roi;
    voxaug::BlendMode mode;
    bool weight_map;
    voxaug::WindowPad pad;
    torch::ScalarType dtype;
  };
  const std::vector<Setup> setups = {
      {"Constant",
       {2, 2, 13, 11, 14},
       {6, 5, 7},
       voxaug::BlendMode::Constant,
       false,
       voxaug::WindowPad::Constant,
       torch::kFloat},
      {"Gaussian",
       {2, 2, 13, 11, 14},
       {6, 5, 7},
       voxaug::BlendMode::Gaussian,
       false,
       voxaug::WindowPad::Constant,
       torch::kFloat},
      {"RoiWeightMap",
       {1, 2, 13, 11, 14},
       {6, 5, 7},
       voxaug::BlendMode::Gaussian,
       true,
       voxaug::WindowPad::Constant,
       torch::kFloat},
      {"PaddedReplicateGaussian",
       {2, 1, 7, 15, 8},
       {10, 6, 12},
       voxaug::BlendMode::Gaussian,
       false,
       voxaug::WindowPad::Replicate,
       torch::kFloat},
      {"Float64Gaussian",
       {1, 2, 11, 13, 9},
       {6, 7, 5},
       voxaug::BlendMode::Gaussian,
       false,
       voxaug::WindowPad::Constant,
       torch::kDouble},
  };
  for (const Setup& su : setups) {
    const torch::Tensor x = torch::randn(su.shape, torch::TensorOptions().dtype(su.dtype));
    const torch::Tensor k = torch::randn({2, su.shape[1], 3, 3, 3}, su.dtype) * 0.3;
    const Fn f = [&](const torch::Tensor& t) { return torch::conv3d(t, k, {}, 1, 1); };
    voxaug::SlidingWindowOptions o;
    o.overlap = {0.5};
    o.mode = su.mode;
    o.padding_mode = su.pad;
    RefOptions ro;
    ro.overlap = {0.5};
    ro.gaussian = su.mode == voxaug::BlendMode::Gaussian;
    ro.pad_mode = su.pad == voxaug::WindowPad::Replicate ? "replicate" : "constant";
    if (su.weight_map) {
      o.roi_weight_map = torch::rand({su.roi[0], su.roi[1], su.roi[2]}) + 0.05;
      ro.roi_weight_map = *o.roi_weight_map;
    }
    for (const ProcessCase& pc : process_cases(su.roi)) {
      SCOPED_TRACE(su.name + "/" + pc.name);
      int got_calls = 0, ref_calls = 0;
      o.process_fn = voxaug_process(pc.body, &got_calls);
      ro.process = ref_process(pc.body, &ref_calls);
      const torch::Tensor got = voxaug::sliding_window_inference(x, su.roi, 3, f, o);
      int64_t batches = 0;
      torch::Tensor size;
      const torch::Tensor want = reference(x, su.roi, 3, f, ro, &size, &batches);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_EQ(got.scalar_type(), su.dtype);
      EXPECT_EQ(got_calls, batches);
      EXPECT_FALSE(got.isnan().any().item<bool>());
      EXPECT_GT(got.abs().max().item<double>(), 0.1);
      EXPECT_LE(excess(got, want, size, 1e-5, 1e-6), 0.0)
          << "max |got - want| = " << (got.to(torch::kDouble) - want).abs().max().item<double>();
      // The inferer: the same per-batch rule on every call (nothing cached from a call's weights).
      voxaug::SlidingWindowInferer inferer(su.roi, 3, o);
      for (int call = 0; call < 2; ++call) {
        got_calls = 0;
        EXPECT_LE(excess(inferer(x, f), want, size, 1e-5, 1e-6), 0.0) << call;
      }
    }
  }
}

// A process_fn that hands back one buffer of its own, rewritten every batch, gives the result of
// one returning a fresh tensor with the same values: the count map is MONAI's (batch 0's
// values), not the buffer's last contents.
TEST(SlidingWindowTorch, ProcessFnReusedWeightBufferKeepsTheFirstBatchCountMap) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(23);
  const std::vector<int64_t> roi = {6, 5, 7};
  const torch::Tensor x = torch::randn({2, 1, 13, 11, 14});
  const Fn f = [](const torch::Tensor& t) { return t.sigmoid(); };
  for (auto mode : {voxaug::BlendMode::Constant, voxaug::BlendMode::Gaussian}) {
    voxaug::SlidingWindowOptions o;
    o.overlap = {0.5};
    o.mode = mode;
    int fresh_calls = 0, reused_calls = 0;
    torch::Tensor buffer;
    o.process_fn = [&](const std::vector<at::Tensor>& outs, const at::Tensor&,
                       const at::Tensor& map) {
      ++fresh_calls;
      return std::make_pair(outs, map * (1.0 + 0.25 * fresh_calls));
    };
    const torch::Tensor fresh = voxaug::sliding_window_inference(x, roi, 3, f, o);
    o.process_fn = [&](const std::vector<at::Tensor>& outs, const at::Tensor&,
                       const at::Tensor& map) {
      ++reused_calls;
      if (!buffer.defined()) buffer = torch::empty_like(map);
      buffer.copy_(map * (1.0 + 0.25 * reused_calls));
      return std::make_pair(outs, buffer);
    };
    const torch::Tensor reused = voxaug::sliding_window_inference(x, roi, 3, f, o);
    ASSERT_GT(fresh_calls, 2);
    ASSERT_EQ(reused_calls, fresh_calls);
    EXPECT_TRUE(torch::equal(fresh, reused))
        << "max |diff| = " << (fresh - reused).abs().max().item<double>();
  }
}

// The identity process_fn (outputs and map handed back) gives the default path's result bit for
// bit: the same products, the same sums, the same count map. It also checks what process_fn is
// handed: the predictor's own output and windows, and MONAI's map (ones / the Gaussian formula /
// the roi_weight_map) on sw_device in the input's dtype.
TEST(SlidingWindowTorch, IdentityProcessFnEqualsNoProcessFn) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(22);
  for (int mode = 0; mode < 3; ++mode)  // constant, Gaussian, roi_weight_map
    for (auto dtype : {torch::kFloat, torch::kDouble})
      for (auto shape : {std::vector<int64_t>{2, 2, 13, 11, 14}, {1, 2, 5, 12, 9}}) {
        SCOPED_TRACE(std::to_string(mode) + " " + c10::toString(dtype) + " " +
                     std::to_string(shape[2]));
        const std::vector<int64_t> roi = {6, 5, 7};
        const torch::Tensor x = torch::randn(shape, torch::TensorOptions().dtype(dtype));
        torch::Tensor last_in, last_out;
        const Fn f = [&](const torch::Tensor& t) {
          last_in = t;
          last_out = torch::cat({t.sigmoid(), t * t - 1.0}, 1);
          return last_out;
        };
        voxaug::SlidingWindowOptions o;
        o.overlap = {0.5};
        o.mode = mode == 1 ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant;
        torch::Tensor want_map = mode == 1 ? gaussian_map64(roi, {0.125})
                                           : torch::ones({roi[0], roi[1], roi[2]}, torch::kDouble);
        if (mode == 2) {
          o.roi_weight_map = torch::rand({1, 1, roi[0], roi[1], roi[2]}) + 0.05;
          want_map = o.roi_weight_map->to(dtype).to(torch::kDouble);
        }
        const torch::Tensor plain = voxaug::sliding_window_inference(x, roi, 3, f, o);
        voxaug::SlidingWindowInferer plain_inferer(roi, 3, o);
        const torch::Tensor plain_inferred = plain_inferer(x, f);
        int calls = 0;
        o.process_fn = [&](const std::vector<torch::Tensor>& outs, const torch::Tensor& windows,
                           const torch::Tensor& map) {
          ++calls;
          EXPECT_EQ(outs.size(), 1u);
          EXPECT_TRUE(outs.at(0).is_same(last_out));
          EXPECT_TRUE(windows.is_same(last_in));
          EXPECT_EQ(map.scalar_type(), dtype);
          EXPECT_EQ(map.device(), x.device());
          EXPECT_EQ(map.numel(), roi[0] * roi[1] * roi[2]);
          EXPECT_EQ(map.size(-1), roi[2]);
          // The Gaussian map: voxaug's float32 formula against the float64 one.
          EXPECT_TRUE(
              torch::allclose(map.to(torch::kDouble).reshape_as(want_map), want_map, 1e-6, 1e-7));
          return std::pair<std::vector<torch::Tensor>, torch::Tensor>{outs, map};
        };
        const torch::Tensor got = voxaug::sliding_window_inference(x, roi, 3, f, o);
        EXPECT_GT(calls, 1);
        EXPECT_TRUE(torch::equal(got, plain));
        EXPECT_GT(got.abs().max().item<double>(), 0.1);
        voxaug::SlidingWindowInferer inferer(roi, 3, o);
        EXPECT_TRUE(torch::equal(inferer(x, f), plain_inferred));
        // The map returned as (1, 1, roi) instead of roi: the same weights.
        const voxaug::ProcessFn identity = o.process_fn;
        o.process_fn = [&](const std::vector<torch::Tensor>& outs, const torch::Tensor& windows,
                           const torch::Tensor& map) {
          auto r = identity(outs, windows, map);
          r.second = r.second.reshape({1, 1, roi[0], roi[1], roi[2]});
          return r;
        };
        EXPECT_TRUE(torch::equal(voxaug::sliding_window_inference(x, roi, 3, f, o), plain));
      }
}

// Bad process_fn returns are c10::ValueErrors naming process_fn and what was expected.
TEST(SlidingWindowTorch, ProcessFnBadReturnsNameProcessFn) {
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::randn({1, 1, 9, 8, 10});
  const std::vector<int64_t> roi = {4, 3, 5};
  const Fn f = [](const torch::Tensor& t) { return t * 2.0; };
  using Ret = std::pair<std::vector<torch::Tensor>, torch::Tensor>;
  auto run = [&](voxaug::ProcessFn fn) {
    voxaug::SlidingWindowOptions o;
    o.process_fn = std::move(fn);
    return value_error([&] { voxaug::sliding_window_inference(x, roi, 2, f, o); });
  };
  const std::string weight_msg = "process_fn must return a roi-sized weight map";
  // Right voxel count, wrong shape.
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{outs, m.reshape({5, 3, 4})};
            }).find(weight_msg),
            std::string::npos);
  // Too few voxels.
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{outs, m.slice(0, 0, 2)};
            }).find(weight_msg),
            std::string::npos);
  // One map per window (MONAI's count map takes one map for the whole batch).
  EXPECT_NE(run([](auto& outs, auto& w, auto& m) {
              return Ret{outs, m.expand({w.size(0), 1, 4, 3, 5})};
            }).find(weight_msg),
            std::string::npos);
  // No map.
  EXPECT_NE(run([](auto& outs, auto&, auto&) {
              return Ret{outs, torch::Tensor()};
            }).find("got an undefined tensor"),
            std::string::npos);
  // Wrong number of outputs: none, two.
  EXPECT_NE(run([](auto&, auto&, auto& m) {
              return Ret{{}, m};
            }).find("process_fn must return exactly 1 output"),
            std::string::npos);
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{{outs[0], outs[0]}, m};
            }).find("process_fn must return exactly 1 output"),
            std::string::npos);
  // An output of the wrong shape, rank or dtype.
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{{outs[0].slice(2, 0, 2)}, m};
            }).find("process_fn changed the window shape"),
            std::string::npos);
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{{outs[0][0]}, m};
            }).find("process_fn must return a 5-D"),
            std::string::npos);
  EXPECT_NE(run([](auto& outs, auto&, auto& m) {
              return Ret{{outs[0].to(torch::kLong)}, m};
            }).find("process_fn's output must be a float tensor"),
            std::string::npos);
  // A good return passes (the checks above are not refusing everything).
  EXPECT_EQ(run([](auto& outs, auto&, auto& m) { return Ret{outs, m}; }), "no error");
}

// cuda_graph would replay the first call's process_fn: the inferer refuses the pair up front.
TEST(SlidingWindowTorch, ProcessFnRefusesCudaGraph) {
  voxaug::SlidingWindowOptions o;
  o.cuda_graph = true;
  o.process_fn = [](const std::vector<torch::Tensor>& outs, const torch::Tensor&,
                    const torch::Tensor& m) {
    return std::pair<std::vector<torch::Tensor>, torch::Tensor>{outs, m};
  };
  EXPECT_NE(value_error([&] {
              voxaug::SlidingWindowInferer inferer({4, 4, 4}, 2, o);
            }).find("process_fn cannot be combined with cuda_graph"),
            std::string::npos);
  o.cuda_graph = false;
  EXPECT_EQ(value_error([&] {
              voxaug::SlidingWindowInferer inferer({4, 4, 4}, 2, o);
            }),
            "no error");
}
