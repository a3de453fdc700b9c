// Google Benchmark: the fused pointwise intensity chain (voxaug::pointwise_chain) on float32.
//
// Cases are named <backend>/<op>/<N>x<C>x<D>x<H>x<W>, with op one of
//   chain                  ScaleIntensityRange(-175, 250 -> 0, 1, clip) -> RandShiftIntensity
//                          (-0.1, 0.1, prob 1) -> RandGaussianNoise(0, 0.1, sample_std, prob 1)
//   scale_intensity_range, rand_shift_intensity, gaussian_noise: each step of the chain alone
//   histogram_shift, rand_std_shift_intensity, rand_scale_intensity_fixed_mean (CPU): the
//                          statistics-driven steps (MONAI RandHistogramShift with 10 control
//                          points, RandStdShiftIntensity(0.5), RandScaleIntensityFixedMean(0.5,
//                          preserve_range)) given fixed statistics: the pass only, not the
//                          reductions that feed it; rand_adjust_contrast (MONAI's
//                          RandAdjustContrast, gamma in (0.5, 4.5)) likewise
//   philox_words (CPU)     the host's Philox4x32-10 block loop alone (kernels/common/philox_cpu.h:
//                          the noise and dropout fills' random words), scalar and AVX-512,
//                          65536 blocks per iteration, one thread; items_per_second counts words
//   chain_inplace (CUDA)   the chain with out == in
//   copy (CUDA)            device-to-device cudaMemcpyAsync of the same volume
// items_per_second counts voxels. bytes_per_second counts one read plus one write of the
// volume -- the traffic of a fused pass and of a copy alike -- so chain bytes/s over copy
// bytes/s is the fraction of the copy bandwidth the chain reaches.
//
// CPU cases (OpenMP) are always registered and timed by wall clock. CUDA cases are
// registered only when a device is visible; each runs on its own stream and is timed with
// CUDA events recorded around the call (manual time). Input values are CT-like (-300..400
// HU, so clipping is active at both ends), generated and uploaded once per process and
// shared by every case; nothing is allocated or copied inside a timed loop.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../kernels/common/philox_cpu.h"
#include "bench_common.h"
#include "voxaug/intensity.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {
#if VOXAUG_WITH_CUDA
using voxaug_bench::CudaEvent;
using voxaug_bench::CudaStream;
#endif

using voxaug::PointwiseStep;

struct Shape {
  int64_t n, c, d, h, w;
  int64_t numel() const { return n * c * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(d) + "x" +
           std::to_string(h) + "x" + std::to_string(w);
  }
};

// Cubic volumes at batch 1 and 8, plus one CT-like volume (MONAI's 224x224x160 as N,C,D,H,W).
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {1, 1, 64, 64, 64},    {8, 1, 64, 64, 64},    {1, 1, 128, 128, 128}, {8, 1, 128, 128, 128},
      {1, 1, 256, 256, 256}, {8, 1, 256, 256, 256}, {1, 1, 160, 224, 224}};
  return all;
}

struct NamedSteps {
  std::string name;
  std::vector<PointwiseStep> steps;
};

std::vector<NamedSteps> cases() {
  const double b_min = 0.0, b_max = 1.0;
  const PointwiseStep range =
      PointwiseStep::scale_intensity_range(-175.0, 250.0, &b_min, &b_max, /*clip=*/true);
  const PointwiseStep shift = PointwiseStep::rand_shift_intensity(-0.1, 0.1, 1.0, /*seed=*/1234);
  const PointwiseStep noise =
      PointwiseStep::gaussian_noise(0.0, 0.1, /*sample_std=*/true, 1.0, /*seed=*/5678);
  return {{"chain", {range, shift, noise}},
          {"scale_intensity_range", {range}},
          {"rand_shift_intensity", {shift}},
          {"gaussian_noise", {noise}}};
}

// Steps that read per-sample statistics / control points: fixed host tables for up to 8
// samples, matching the CT-like input (-300..400).
std::vector<NamedSteps> host_statistics_cases() {
  static std::vector<double> minmax, moments, mean_min_max;
  static std::vector<float> points;
  if (minmax.empty()) {
    for (int n = 0; n < 8; ++n) {
      minmax.insert(minmax.end(), {-300.0, 400.0});
      moments.insert(moments.end(), {1.0, 50.0, 202.0});
      mean_min_max.insert(mean_min_max.end(), {50.0, -300.0, 400.0});
      const float y[10] = {0.0f, 0.05f, 0.2f, 0.25f, 0.5f, 0.52f, 0.6f, 0.8f, 0.95f, 1.0f};
      points.insert(points.end(), y, y + 10);
    }
  }
  return {
      {"histogram_shift", {PointwiseStep::histogram_shift(minmax.data(), points.data(), 10)}},
      {"rand_std_shift_intensity",
       {PointwiseStep::rand_std_shift_intensity(moments.data(), -0.5, 0.5, 1.0, 91, false, false)}},
      {"rand_adjust_contrast",
       {PointwiseStep::rand_adjust_contrast(minmax.data(), 0.5, 4.5, 1.0, 93, false)}},
      {"rand_scale_intensity_fixed_mean",
       {PointwiseStep::rand_scale_intensity_fixed_mean(mean_min_max.data(), -0.5, 0.5, 1.0, 92,
                                                       true, true, false)}}};
}

void set_throughput(benchmark::State& state, const Shape& s) {
  const int64_t voxels = state.iterations() * s.numel();
  state.SetItemsProcessed(voxels);
  state.SetBytesProcessed(voxels * 2 * static_cast<int64_t>(sizeof(float)));
}

// The shared input on the host: grows on demand, every case sees the same values.
const float* host_input(int64_t numel) {
  static std::vector<float> buf;
  const int64_t old = static_cast<int64_t>(buf.size());
  if (numel > old) {
    buf.resize(static_cast<size_t>(numel));
    for (int64_t i = old; i < numel; ++i) {
      const uint64_t u = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 40;  // 24 bits
      buf[static_cast<size_t>(i)] = -300.0f + 700.0f * static_cast<float>(u) / 16777216.0f;
    }
  }
  return buf.data();
}

float* host_output(int64_t numel) {
  static std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < numel) buf.resize(static_cast<size_t>(numel));
  return buf.data();
}

voxaug::VolumeView view(const void* data, voxaug::Device device, const Shape& s) {
  return voxaug::contiguous_view(const_cast<void*>(data), voxaug::DType::Float32, device, s.n, s.c,
                                 s.d, s.h, s.w);
}

void bm_cpu(benchmark::State& state, const Shape& s, const std::vector<PointwiseStep>& steps) {
  try {
    const voxaug::VolumeView in = view(host_input(s.numel()), voxaug::Device::CPU, s);
    const voxaug::VolumeView out = view(host_output(s.numel()), voxaug::Device::CPU, s);
    const int k = static_cast<int>(steps.size());
    for (auto _ : state) {
      voxaug::pointwise_chain(in, out, steps.data(), k);
      benchmark::ClobberMemory();
    }
    set_throughput(state, s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The host Philox block loop on its own (one thread), words into an L1/L2-sized buffer.
void bm_philox_words(benchmark::State& state, bool vector) {
  constexpr int64_t kBlocks = 65536;
  std::vector<uint32_t> words(4 * kBlocks);
  uint64_t first = 0;
  for (auto _ : state) {
    if (vector) {
#if VOXAUG_PHILOX_AVX512
      voxaug::detail::philox_words_avx512(42, first, kBlocks, 3,
                                          voxaug::detail::PhiloxStream::Element, words.data());
#endif
    } else {
      voxaug::detail::philox_words_scalar(42, first, kBlocks, 3,
                                          voxaug::detail::PhiloxStream::Element, words.data());
    }
    benchmark::DoNotOptimize(words.data());
    benchmark::ClobberMemory();
    first += kBlocks;
  }
  state.SetItemsProcessed(state.iterations() * 4 * kBlocks);
}

void register_cpu_cases() {
  benchmark::RegisterBenchmark("cpu/philox_words/scalar/65536", bm_philox_words, false)
      ->Unit(benchmark::kMicrosecond);
#if VOXAUG_PHILOX_AVX512
  if (voxaug::detail::cpu_isa() == voxaug::detail::CpuIsa::Avx512)
    benchmark::RegisterBenchmark("cpu/philox_words/avx512/65536", bm_philox_words, true)
        ->Unit(benchmark::kMicrosecond);
#endif
  std::vector<NamedSteps> all = cases();
  for (NamedSteps& c : host_statistics_cases()) all.push_back(std::move(c));
  for (const NamedSteps& c : all)
    for (const Shape& s : shapes())
      benchmark::RegisterBenchmark(("cpu/" + c.name + "/" + s.str()).c_str(), bm_cpu, s, c.steps)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();  // OpenMP: the main thread's CPU time says nothing
}

#if VOXAUG_WITH_CUDA

// Device input (uploaded from host_input) and output, shared by every CUDA case and grown
// on demand; released at the end of main, before the runtime shuts down.
struct DeviceBuffers {
  void* in = nullptr;
  void* out = nullptr;
  int64_t numel = 0;
};

DeviceBuffers& device_buffers() {
  static DeviceBuffers b;
  return b;
}

void release_device_buffers() {
  DeviceBuffers& b = device_buffers();
  cudaFree(b.in);
  cudaFree(b.out);
  b = DeviceBuffers{};
}

const DeviceBuffers& device_buffers_for(int64_t numel) {
  DeviceBuffers& b = device_buffers();
  if (b.numel < numel) {
    release_device_buffers();
    const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
    BENCH_CUDA_TRY(cudaMalloc(&b.in, bytes));
    BENCH_CUDA_TRY(cudaMalloc(&b.out, bytes));
    BENCH_CUDA_TRY(cudaMemcpy(b.in, host_input(numel), bytes, cudaMemcpyHostToDevice));
    b.numel = numel;
  }
  return b;
}

enum class CudaMode { OutOfPlace, InPlace, Copy };

void bm_cuda(benchmark::State& state, const Shape& s, const std::vector<PointwiseStep>& steps,
             CudaMode mode) {
  try {
    const int64_t numel = s.numel();
    const size_t bytes = static_cast<size_t>(numel) * sizeof(float);
    const DeviceBuffers& buf = device_buffers_for(numel);
    CudaStream stream;
    CudaEvent start, stop;
    // In place works on a copy of the input so the shared input stays untouched.
    if (mode == CudaMode::InPlace)
      BENCH_CUDA_TRY(
          cudaMemcpyAsync(buf.out, buf.in, bytes, cudaMemcpyDeviceToDevice, stream.get()));
    const voxaug::VolumeView in =
        view(mode == CudaMode::InPlace ? buf.out : buf.in, voxaug::Device::CUDA, s);
    const voxaug::VolumeView out =
        mode == CudaMode::InPlace ? in : view(buf.out, voxaug::Device::CUDA, s);
    const int k = static_cast<int>(steps.size());
    auto launch = [&] {
      if (mode == CudaMode::Copy)
        BENCH_CUDA_TRY(
            cudaMemcpyAsync(buf.out, buf.in, bytes, cudaMemcpyDeviceToDevice, stream.get()));
      else
        voxaug::pointwise_chain(in, out, steps.data(), k, stream.get());
    };
    launch();  // warm-up: module load and first touch stay out of the measurement
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    for (auto _ : state) {
      BENCH_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      launch();
      BENCH_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      BENCH_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0.0f;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3);
    }
    set_throughput(state, s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cuda_cases() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    benchmark::AddCustomContext("cuda_device_0", prop.name);
  auto add = [](const std::string& name, const Shape& s, std::vector<PointwiseStep> steps,
                CudaMode mode) {
    benchmark::RegisterBenchmark(("cuda/" + name + "/" + s.str()).c_str(), bm_cuda, s,
                                 std::move(steps), mode)
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
  };
  const std::vector<NamedSteps> all = cases();
  for (const Shape& s : shapes()) {
    add("copy", s, {}, CudaMode::Copy);
    for (const NamedSteps& c : all) add(c.name, s, c.steps, CudaMode::OutOfPlace);
    add("chain_inplace", s, all.front().steps, CudaMode::InPlace);
  }
}

#endif  // VOXAUG_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
#if VOXAUG_WITH_CUDA
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_intensity", register_cpu_cases,
                                register_cuda_cases, release_device_buffers);
#else
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_intensity", register_cpu_cases, nullptr,
                                nullptr);
#endif
}
