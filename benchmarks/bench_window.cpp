// Google Benchmark: the window family's passes -- one whole sliding-window inference without a
// network (the identity predictor: each gathered batch is stitched back as the prediction).
//
// Cases are named <backend>/sliding_window_<mode>_ov<overlap%>/1x1x255x223x276: roi 96^3,
// sw_batch_size 4 (MONAI's BTCV validation settings), per batch one window_gather and one
// window_stitch, then window_finalize with the count computed on the fly (no count map) and
// the output written in place over the accumulator. The accumulator is zeroed inside the
// timed loop (as a caller must). The _fused cases run the inferers' path instead: the stitch
// stores on each voxel's first window and divides on its last (StitchFuse), so there is no zero
// fill and no final pass; Gaussian weights read a count map made once before the timed loop (the
// inferer caches it). items_per_second counts window voxels (every voxel of every window,
// gathered once and stitched once).
//
// CPU cases (OpenMP) are always registered and timed by wall clock. CUDA cases are registered
// only when a device is visible; each runs on its own stream and is timed with CUDA events.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "voxaug/types.h"
#include "voxaug/window.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using voxaug::DType;
using voxaug::WindowLayout;

const int64_t kSize[3] = {255, 223, 276}, kRoi[3] = {96, 96, 96};
constexpr int64_t kSw = 4;
const double kOverlaps[] = {0.25, 0.8};

std::vector<float> random_volume(int64_t numel) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd;
  std::vector<float> v(numel);
  for (auto& x : v) x = nd(rng);
  return v;
}

// MONAI's Gaussian importance map (float32), sigma = 0.125 * roi, clamped below at 1e-3 of the
// corner (the exact values do not matter for speed).
std::vector<float> gaussian_map() {
  std::vector<float> w(kRoi[0] * kRoi[1] * kRoi[2]);
  size_t i = 0;
  for (int64_t z = 0; z < kRoi[0]; ++z)
    for (int64_t y = 0; y < kRoi[1]; ++y)
      for (int64_t x = 0; x < kRoi[2]; ++x) {
        auto g = [](int64_t v, int64_t p) {
          const double t = (v - (p - 1) / 2.0) / (0.125 * p);
          return std::exp(-0.5 * t * t);
        };
        w[i++] = std::max(1e-3f, static_cast<float>(g(z, kRoi[0]) * g(y, kRoi[1]) * g(x, kRoi[2])));
      }
  return w;
}

std::string case_name(const char* backend, bool gaussian, double ov, bool fused) {
  return std::string(backend) + "/sliding_window_" + (gaussian ? "gaussian" : "constant") + "_ov" +
         std::to_string(static_cast<int>(ov * 100 + 0.5)) + (fused ? "_fused" : "") +
         "/1x1x255x223x276";
}

void set_counters(benchmark::State& state, const WindowLayout& l) {
  state.SetItemsProcessed(state.iterations() * l.windows_per_image() * kRoi[0] * kRoi[1] * kRoi[2]);
  state.counters["windows"] = static_cast<double>(l.windows_per_image());
}

void bench_cpu(benchmark::State& state, bool gaussian, double ov, bool fused) {
  const double o[3] = {ov, ov, ov};
  const WindowLayout l = voxaug::window_layout(kSize, kRoi, o);
  const auto in = random_volume(kSize[0] * kSize[1] * kSize[2]);
  const auto w = gaussian_map();
  const float* wp = gaussian ? w.data() : nullptr;
  std::vector<float> buf(kSw * kRoi[0] * kRoi[1] * kRoi[2]);
  std::vector<float> acc(l.padded[0] * l.padded[1] * l.padded[2]);
  const auto vin = voxaug::contiguous_view(const_cast<float*>(in.data()), DType::Float32,
                                           voxaug::Device::CPU, 1, 1, kSize[0], kSize[1], kSize[2]);
  const auto vacc = voxaug::contiguous_view(acc.data(), DType::Float32, voxaug::Device::CPU, 1, 1,
                                            l.padded[0], l.padded[1], l.padded[2]);
  const int64_t total = l.windows_per_image();
  std::vector<float> count(gaussian && fused ? acc.size() : 0);
  if (!count.empty())
    voxaug::window_count(wp, DType::Float32, voxaug::Device::CPU, 0, l, count.data());
  const voxaug::StitchFuse fuse{fused, fused, count.empty() ? nullptr : count.data()};
  for (auto _ : state) {
    if (!fused) std::memset(acc.data(), 0, acc.size() * sizeof(float));
    for (int64_t first = 0; first < total; first += kSw) {
      const int64_t b = std::min(kSw, total - first);
      const auto vbuf = voxaug::contiguous_view(buf.data(), DType::Float32, voxaug::Device::CPU, b,
                                                1, kRoi[0], kRoi[1], kRoi[2]);
      voxaug::window_gather(vin, l, first, voxaug::WindowPad::Constant, 0.0, vbuf);
      voxaug::window_stitch(vacc, vbuf, wp, l, first, fuse);
    }
    if (!fused) voxaug::window_finalize(vacc, nullptr, wp, l, vacc, false);
    benchmark::DoNotOptimize(acc.data());
  }
  set_counters(state, l);
}

void register_cpu_cases() {
  for (bool fused : {false, true})
    for (bool g : {false, true})
      for (double ov : kOverlaps)
        benchmark::RegisterBenchmark(case_name("cpu", g, ov, fused).c_str(), bench_cpu, g, ov,
                                     fused)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
}

#if VOXAUG_WITH_CUDA
using voxaug_bench::DeviceBuffer;

void bench_cuda(benchmark::State& state, bool gaussian, double ov, bool fused) {
  try {
    const double o[3] = {ov, ov, ov};
    const WindowLayout l = voxaug::window_layout(kSize, kRoi, o);
    const auto host = random_volume(kSize[0] * kSize[1] * kSize[2]);
    const auto w = gaussian_map();
    DeviceBuffer in(host.size() * sizeof(float)), wd(w.size() * sizeof(float)),
        buf(kSw * kRoi[0] * kRoi[1] * kRoi[2] * sizeof(float)),
        acc(l.padded[0] * l.padded[1] * l.padded[2] * sizeof(float));
    BENCH_CUDA_TRY(
        cudaMemcpy(in.p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    BENCH_CUDA_TRY(cudaMemcpy(wd.p, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
    const float* wp = gaussian ? static_cast<const float*>(wd.p) : nullptr;
    const auto vin = voxaug::contiguous_view(in.p, DType::Float32, voxaug::Device::CUDA, 1, 1,
                                             kSize[0], kSize[1], kSize[2]);
    const auto vacc = voxaug::contiguous_view(acc.p, DType::Float32, voxaug::Device::CUDA, 1, 1,
                                              l.padded[0], l.padded[1], l.padded[2]);
    voxaug_bench::CudaStream stream;
    voxaug_bench::CudaEvent start, stop;
    const int64_t total = l.windows_per_image();
    DeviceBuffer count(gaussian && fused ? l.padded[0] * l.padded[1] * l.padded[2] * 4 : 4);
    if (gaussian && fused)
      voxaug::window_count(wp, DType::Float32, voxaug::Device::CUDA, 0, l, count.p, stream.get());
    const voxaug::StitchFuse fuse{fused, fused, gaussian && fused ? count.p : nullptr};
    auto pass = [&] {
      if (!fused)
        BENCH_CUDA_TRY(
            cudaMemsetAsync(acc.p, 0, l.padded[0] * l.padded[1] * l.padded[2] * 4, stream.get()));
      for (int64_t first = 0; first < total; first += kSw) {
        const int64_t b = std::min(kSw, total - first);
        const auto vbuf = voxaug::contiguous_view(buf.p, DType::Float32, voxaug::Device::CUDA, b, 1,
                                                  kRoi[0], kRoi[1], kRoi[2]);
        voxaug::window_gather(vin, l, first, voxaug::WindowPad::Constant, 0.0, vbuf, stream.get());
        voxaug::window_stitch(vacc, vbuf, wp, l, first, fuse, stream.get());
      }
      if (!fused) voxaug::window_finalize(vacc, nullptr, wp, l, vacc, false, stream.get());
    };
    pass();  // warm-up
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    for (auto _ : state) {
      BENCH_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      pass();
      BENCH_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      BENCH_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3);
    }
    set_counters(state, l);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cuda_cases() {
  for (bool fused : {false, true})
    for (bool g : {false, true})
      for (double ov : kOverlaps)
        benchmark::RegisterBenchmark(case_name("cuda", g, ov, fused).c_str(), bench_cuda, g, ov,
                                     fused)
            ->Unit(benchmark::kMillisecond)
            ->UseManualTime();
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if VOXAUG_WITH_CUDA
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_window", register_cpu_cases,
                                register_cuda_cases, nullptr);
#else
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_window", register_cpu_cases, nullptr,
                                nullptr);
#endif
}
