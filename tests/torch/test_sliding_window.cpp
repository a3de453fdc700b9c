// The LibTorch API voxaug::sliding_window_inference against an independent reference: MONAI's
// algorithm written out with ATen slicing (pad, per-window slice, multiply by the importance
// map, add into the output and the count map in window order, divide, crop).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "voxaug/sliding_window.h"

namespace {

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

torch::Tensor reference(const torch::Tensor& x, std::vector<int64_t> roi, int64_t sw,
                        const std::function<torch::Tensor(const torch::Tensor&)>& f, double overlap,
                        bool gaussian, const std::string& pad_mode) {
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
    if (pad_mode == "replicate") opts.mode(torch::kReplicate);
    xp = F::pad(x, opts);
  }
  std::vector<std::vector<int64_t>> s(3);
  for (int a = 0; a < 3; ++a) s[a] = starts(xp.size(2 + a), roi[a], overlap);
  torch::Tensor w = voxaug::window_importance_map(
      roi, gaussian ? voxaug::BlendMode::Gaussian : voxaug::BlendMode::Constant, {0.125},
      torch::kFloat, x.device());
  std::vector<std::vector<int64_t>> wins;  // (n, d, h, w) in MONAI's order
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t d : s[0])
      for (int64_t h : s[1])
        for (int64_t ww : s[2]) wins.push_back({n, d, h, ww});
  torch::Tensor out, count = torch::zeros({xp.size(2), xp.size(3), xp.size(4)});
  for (size_t i = 0; i < wins.size(); i += sw) {
    std::vector<torch::Tensor> batch;
    for (size_t j = i; j < std::min(wins.size(), i + sw); ++j) {
      const auto& v = wins[j];
      batch.push_back(xp.slice(0, v[0], v[0] + 1)
                          .slice(2, v[1], v[1] + roi[0])
                          .slice(3, v[2], v[2] + roi[1])
                          .slice(4, v[3], v[3] + roi[2]));
    }
    torch::Tensor p = f(torch::cat(batch)) * w;
    if (!out.defined())
      out = torch::zeros({x.size(0), p.size(1), xp.size(2), xp.size(3), xp.size(4)});
    for (size_t j = i; j < std::min(wins.size(), i + sw); ++j) {
      const auto& v = wins[j];
      out.slice(0, v[0], v[0] + 1)
          .slice(2, v[1], v[1] + roi[0])
          .slice(3, v[2], v[2] + roi[1])
          .slice(4, v[3], v[3] + roi[2]) += p.slice(0, j - i, j - i + 1);
    }
  }
  for (int64_t d : s[0])
    for (int64_t h : s[1])
      for (int64_t ww : s[2])
        count.slice(0, d, d + roi[0]).slice(1, h, h + roi[1]).slice(2, ww, ww + roi[2]) += w;
  out = out / count;
  return out.slice(2, pad[4], pad[4] + x.size(2))
      .slice(3, pad[2], pad[2] + x.size(3))
      .slice(4, pad[0], pad[0] + x.size(4));
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
      // Module holder: module->forward(x).
      torch::Tensor got = voxaug::sliding_window_inference(x, {6, 7, 5}, 3, conv, o);
      torch::Tensor want = reference(
          x, {6, 7, 5}, 3, [&](const torch::Tensor& t) { return conv->forward(t); }, ov, gaussian,
          "constant");
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LE((got - want).abs().max().item<double>(), tol);
      // std::function / lambda.
      got = voxaug::sliding_window_inference(
          x, {6, 7, 5}, 4, [](const torch::Tensor& t) { return t.sigmoid(); }, o);
      want = reference(
          x, {6, 7, 5}, 4, [](const torch::Tensor& t) { return t.sigmoid(); }, ov, gaussian,
          "constant");
      EXPECT_LE((got - want).abs().max().item<double>(), tol);
      // A functor object.
      Scale scale;
      got = voxaug::sliding_window_inference(x, {6, 7, 5}, 2, scale, o);
      want = reference(x, {6, 7, 5}, 2, Scale{}, ov, gaussian, "constant");
      EXPECT_LE((got - want).abs().max().item<double>(), tol);
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
  const torch::Tensor want = reference(x, {8, 6, 10}, 3, f, 0.5, true, "replicate");
  voxaug::SlidingWindowInferer inferer({8, 6, 10}, 3, o);
  const torch::Tensor a = inferer(x, f), b = inferer(x, f);
  ASSERT_EQ(a.sizes(), torch::IntArrayRef({1, 3, 5, 12, 7}));
  EXPECT_LE((a - want).abs().max().item<double>(), 1e-5);
  EXPECT_TRUE(torch::equal(a, b));
  o.argmax = true;
  const torch::Tensor labels = voxaug::sliding_window_inference(x, {8, 6, 10}, 3, f, o);
  EXPECT_EQ(labels.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(labels, want.argmax(1, true)));
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
    const torch::Tensor ref = reference(
        x.cpu(), {6, 7, 5}, 3, [&](const torch::Tensor& t) { return conv->forward(t.cuda()).cpu(); },
        0.5, true, "constant");
    EXPECT_LE((got.cpu() - ref).abs().max().item<double>(), 1e-5) << k;
  }
  EXPECT_EQ(graphed.graph_count(), 1u);
}
