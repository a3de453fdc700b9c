// Window family: the CUDA backend against its CPU twin (bit-exact: the same per-element math,
// the same order of additions). Compiled everywhere; skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "test_support.h"
#include "voxaug/error.h"
#include "voxaug/window.h"
#include "window_ring.h"

using namespace voxaug;
using voxaug_test::RingPass;
using voxaug_test::view;
using voxaug_test::Vol;

#if VOXAUG_WITH_CUDA
using voxaug_test::DeviceBuffer;
using voxaug_test::have_device;

namespace {
std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}
}  // namespace

TEST(WindowCuda, PipelineTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  struct Case {
    int64_t size[3], roi[3];
    double overlap[3];
    WindowPad pad;
  };
  const Case cases[] = {{{20, 17, 23}, {8, 8, 8}, {0.25, 0.25, 0.25}, WindowPad::Constant},
                        {{5, 17, 9}, {8, 8, 12}, {0.5, 0.25, 0.8}, WindowPad::Replicate},
                        {{6, 17, 9}, {8, 8, 12}, {0.5, 0.25, 0.8}, WindowPad::Reflect},
                        {{37, 41, 29}, {16, 16, 16}, {0.8, 0.8, 0.8}, WindowPad::Circular}};
  for (const Case& c : cases)
    for (bool gaussian : {false, true}) {
      const WindowLayout l = window_layout(c.size, c.roi, c.overlap);
      const int64_t N = 2, C = 2, K = 3, total = N * l.windows_per_image();
      const int64_t pv = l.padded[0] * l.padded[1] * l.padded[2];
      const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2];
      const Vol iv{N, C, c.size[0], c.size[1], c.size[2]};
      const auto img = randn(iv.numel(), 1);
      const auto w = randn(rv, 2);
      std::vector<float> wpos(rv);
      for (int64_t i = 0; i < rv; ++i) wpos[i] = 1e-3f + std::abs(w[i]);
      DeviceBuffer d_img(img), d_w(wpos);
      const float* hw = gaussian ? wpos.data() : nullptr;
      const float* dw = gaussian ? d_w.as<float>() : nullptr;
      const Vol av{N, K, l.padded[0], l.padded[1], l.padded[2]};
      std::vector<float> acc(av.numel(), 0.f);
      DeviceBuffer d_acc(acc);
      std::vector<std::vector<float>> preds;  // per batch, for the StitchFuse pass below
      const int64_t B = 70;                   // > 64: the stitch splits the batch into two launches
      for (int64_t first = 0; first < total; first += B) {
        const int64_t b = std::min(B, total - first);
        const Vol wv{b, C, l.roi[0], l.roi[1], l.roi[2]};
        std::vector<float> win(wv.numel());
        window_gather(view(const_cast<float*>(img.data()), DType::Float32, iv), l, first, c.pad,
                      0.25, view(win.data(), DType::Float32, wv));
        DeviceBuffer d_win(win.size() * sizeof(float));
        window_gather(view(d_img.p, DType::Float32, iv, Device::CUDA), l, first, c.pad, 0.25,
                      view(d_win.p, DType::Float32, wv, Device::CUDA));
        CUDA_OK(cudaDeviceSynchronize());
        ASSERT_EQ(0, std::memcmp(win.data(), d_win.to_host<float>(win.size()).data(),
                                 win.size() * sizeof(float)));
        // A "predictor": K channels from the window's channels.
        const Vol pvl{b, K, l.roi[0], l.roi[1], l.roi[2]};
        std::vector<float> pred(pvl.numel());
        for (int64_t j = 0; j < b; ++j)
          for (int64_t k = 0; k < K; ++k)
            for (int64_t v = 0; v < rv; ++v)
              pred[(j * K + k) * rv + v] = win[(j * C + k % C) * rv + v] * float(k + 1);
        DeviceBuffer d_pred(pred);
        preds.push_back(pred);
        window_stitch(view(acc.data(), DType::Float32, av), view(pred.data(), DType::Float32, pvl),
                      hw, l, first);
        window_stitch(view(d_acc.p, DType::Float32, av, Device::CUDA),
                      view(d_pred.p, DType::Float32, pvl, Device::CUDA), dw, l, first);
        CUDA_OK(cudaDeviceSynchronize());
      }
      ASSERT_EQ(0, std::memcmp(acc.data(), d_acc.to_host<float>(acc.size()).data(),
                               acc.size() * sizeof(float)));
      std::vector<float> count(pv);
      window_count(hw, DType::Float32, Device::CPU, 0, l, count.data());
      DeviceBuffer d_count(pv * sizeof(float));
      window_count(dw, DType::Float32, Device::CUDA, 0, l, d_count.p);
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(0,
                std::memcmp(count.data(), d_count.to_host<float>(pv).data(), pv * sizeof(float)));
      const Vol ov{N, K, c.size[0], c.size[1], c.size[2]};
      std::vector<uint16_t> out(ov.numel());
      window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                      view(out.data(), DType::Float16, ov), false);
      DeviceBuffer d_out(out.size() * sizeof(uint16_t));
      window_finalize(view(d_acc.p, DType::Float32, av, Device::CUDA), d_count.p, nullptr, l,
                      view(d_out.p, DType::Float16, ov, Device::CUDA), false);
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(0, std::memcmp(out.data(), d_out.to_host<uint16_t>(out.size()).data(),
                               out.size() * sizeof(uint16_t)));
      // On-the-fly count (no count map) on the device equals the CPU's.
      window_finalize(view(d_acc.p, DType::Float32, av, Device::CUDA), nullptr, dw, l,
                      view(d_out.p, DType::Float16, ov, Device::CUDA), false);
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(0, std::memcmp(out.data(), d_out.to_host<uint16_t>(out.size()).data(),
                               out.size() * sizeof(uint16_t)));
      const Vol lv{N, 1, c.size[0], c.size[1], c.size[2]};
      std::vector<int64_t> lab(lv.numel());
      window_finalize(view(acc.data(), DType::Float32, av), count.data(), nullptr, l,
                      view(lab.data(), DType::Int64, lv), true);
      DeviceBuffer d_lab(lab.size() * sizeof(int64_t));
      window_finalize(view(d_acc.p, DType::Float32, av, Device::CUDA), d_count.p, nullptr, l,
                      view(d_lab.p, DType::Int64, lv, Device::CUDA), true);
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(lab, d_lab.to_host<int64_t>(lab.size()));

      // StitchFuse: first_store into accumulators of NaNs, and last_divide (with the count map,
      // and computed per voxel) where nothing is cropped; the device equals the host bit for bit.
      bool cropped = false;
      for (int a = 0; a < 3; ++a) cropped |= l.padded[a] != l.size[a];
      for (int m = 0; m < (cropped ? 1 : 3); ++m) {
        const StitchFuse fuse{true, m > 0, m == 1 ? count.data() : nullptr};
        const StitchFuse dfuse{true, m > 0, m == 1 ? d_count.p : nullptr};
        std::vector<float> f_acc(av.numel(), std::nanf(""));
        DeviceBuffer d_f(f_acc);
        for (int64_t first = 0, bi = 0; first < total; first += B, ++bi) {
          const int64_t b = std::min(B, total - first);
          const Vol pvl{b, K, l.roi[0], l.roi[1], l.roi[2]};
          DeviceBuffer d_pred(preds[bi]);
          window_stitch(view(f_acc.data(), DType::Float32, av),
                        view(preds[bi].data(), DType::Float32, pvl), hw, l, first, fuse);
          window_stitch(view(d_f.p, DType::Float32, av, Device::CUDA),
                        view(d_pred.p, DType::Float32, pvl, Device::CUDA), dw, l, first, dfuse);
          CUDA_OK(cudaDeviceSynchronize());
        }
        ASSERT_EQ(0, std::memcmp(f_acc.data(), d_f.to_host<float>(f_acc.size()).data(),
                                 f_acc.size() * sizeof(float)))
            << "StitchFuse mode " << m;
      }
    }
}

// The streamed pass (a ring accumulator drained row by row) on the device equals the host's:
// float16 quotients and int32 labels, float16 predictions, with and without a count map.
TEST(WindowCuda, RingTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const int64_t size[3] = {37, 21, 29}, roi[3] = {12, 16, 16};
  const double ov[3] = {0.6, 0.25, 0.5};
  const WindowLayout l = window_layout(size, roi, ov);
  const int64_t N = 2, K = 3, total = N * l.windows_per_image();
  const int64_t rv = l.roi[0] * l.roi[1] * l.roi[2], pv = l.padded[0] * l.padded[1] * l.padded[2];
  const auto pf = randn(static_cast<size_t>(total * K * rv), 4);
  std::vector<uint16_t> ph(pf.size());
  for (size_t i = 0; i < pf.size(); ++i) ph[i] = detail::float_to_half(pf[i]);
  std::vector<float> w(rv);
  for (int64_t i = 0; i < rv; ++i) w[i] = 1e-3f + std::abs(pf[i]);
  std::vector<float> count(pv);
  window_count(w.data(), DType::Float32, Device::CPU, 0, l, count.data());
  DeviceBuffer d_ph(ph), d_w(w), d_count(count);
  const int64_t depth = l.roi[0], ring_n = N * K * depth * l.padded[1] * l.padded[2];
  const int64_t ov_n = N * K * l.size[0] * l.size[1] * l.size[2];
  for (bool argmax : {false, true})
    for (bool map : {false, true}) {
      const DType ot = argmax ? DType::Int32 : DType::Float16;
      const int64_t outn = argmax ? ov_n / K : ov_n;
      std::vector<float> ring(ring_n, std::nanf(""));
      std::vector<uint32_t> out(outn, 0xffffffffu);  // 4 bytes per element: room for either
      RingPass{l,
               N,
               K,
               ph.data(),
               DType::Float16,
               5,
               w.data(),
               map ? count.data() : nullptr,
               ring.data(),
               depth,
               out.data(),
               ot,
               argmax}
          .run();
      DeviceBuffer d_ring(ring), d_out(out);
      RingPass{l,
               N,
               K,
               d_ph.p,
               DType::Float16,
               5,
               d_w.as<float>(),
               map ? d_count.as<float>() : nullptr,
               d_ring.as<float>(),
               depth,
               d_out.p,
               ot,
               argmax,
               Device::CUDA}
          .run();
      CUDA_OK(cudaDeviceSynchronize());
      ASSERT_EQ(out, d_out.to_host<uint32_t>(out.size())) << "argmax " << argmax << " map " << map;
    }
}

TEST(WindowCuda, RejectsHostPointers) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA argument checks skipped";
  const int64_t size[3] = {8, 8, 8}, roi[3] = {4, 4, 4};
  const double ov[3] = {0.5, 0.5, 0.5};
  const WindowLayout l = window_layout(size, roi, ov);
  std::vector<float> img(512), buf(64);
  EXPECT_THROW(window_gather(view(img.data(), DType::Float32, {1, 1, 8, 8, 8}, Device::CUDA), l, 0,
                             WindowPad::Constant, 0.0,
                             view(buf.data(), DType::Float32, {1, 1, 4, 4, 4}, Device::CUDA)),
               Error);
}
#else
TEST(WindowCuda, PipelineTwinBitIdentical) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
