// Google Benchmark: separable Gaussian smoothing (voxaug::separable_filter with the taps of
// voxaug::gaussian_table, truncated 4 as MONAI's GaussianSmooth).
//
// Cases are named <backend>/gaussian_sigma<S>/<N>x<C>x<D>x<H>x<W>: float32 in and out, the
// same sigma on every axis of every sample, on 1x1x128^3 and 2x1x224x224x160 with sigma 1
// (radius 4) and 3 (radius 12). items_per_second counts output voxels; bytes_per_second counts
// one float32 read and one written per voxel and filtered axis (each axis is one pass over
// memory; the intermediates live in the workspace), i.e. 3 x 8 B per voxel.
//
// CPU cases (OpenMP) are always registered and timed by wall clock (on a small machine use
// --benchmark_filter=^cpu/ --benchmark_min_time=0.05). CUDA cases are registered only when a
// device is visible; each runs on its own stream and is timed with CUDA events around
// kLaunchesPerIteration back-to-back calls (manual time, divided by the count). Inputs, tap
// tables and workspaces are made once per case, outside the timed loop.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "voxaug/filter.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using voxaug::DType;

struct Shape {
  int64_t n, d, h, w;  // N x 1 x D x H x W
  int64_t numel() const { return n * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x1x" + std::to_string(d) + "x" + std::to_string(h) + "x" +
           std::to_string(w);
  }
};

const Shape kShapes[] = {{1, 128, 128, 128}, {2, 224, 224, 160}};
const double kSigmas[] = {1.0, 3.0};

std::vector<float> random_volume(int64_t numel) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(0.0f, 1000.0f);
  std::vector<float> v(numel);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Table {
  std::vector<double> data;
  int64_t width = 0;
  int axes = 0;
};

Table make_table(int64_t n, double sigma) {
  Table t;
  const std::vector<double> s(n * 3, sigma);
  t.width = voxaug::gaussian_table_width(s.data(), n, 4.0);
  t.data.resize(n * 3 * t.width);
  t.axes = voxaug::gaussian_table(s.data(), n, 4.0, t.width, t.data.data());
  return t;
}

std::string case_name(const char* backend, double sigma, const Shape& s) {
  return std::string(backend) + "/gaussian_sigma" + std::to_string(static_cast<int>(sigma)) + "/" +
         s.str();
}

void set_counters(benchmark::State& state, const Shape& s) {
  state.SetItemsProcessed(state.iterations() * s.numel());
  state.SetBytesProcessed(state.iterations() * s.numel() * 3 * 8);
}

void bench_cpu(benchmark::State& state, Shape s, double sigma) {
  std::vector<float> in = random_volume(s.numel()), out(s.numel());
  const Table t = make_table(s.n, sigma);
  const auto vin = voxaug::contiguous_view(in.data(), DType::Float32, voxaug::Device::CPU, s.n, 1,
                                           s.d, s.h, s.w);
  const auto vout = voxaug::contiguous_view(out.data(), DType::Float32, voxaug::Device::CPU, s.n, 1,
                                            s.d, s.h, s.w);
  const int64_t bytes = voxaug::separable_filter_workspace_bytes(vin, vout, t.axes);
  std::vector<unsigned char> ws(static_cast<size_t>(bytes));
  for (auto _ : state) {
    voxaug::separable_filter(vin, vout, voxaug::FilterTaps{t.data.data(), t.width, t.axes},
                             ws.data(), bytes);
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, s);
}

void register_cpu_cases() {
  for (const Shape& s : kShapes)
    for (double sigma : kSigmas)
      benchmark::RegisterBenchmark(case_name("cpu", sigma, s).c_str(), bench_cpu, s, sigma)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();  // OpenMP: the main thread's CPU time says nothing
}

#if VOXAUG_WITH_CUDA
constexpr int kLaunchesPerIteration = 10;

using voxaug_bench::DeviceBuffer;

void bench_cuda(benchmark::State& state, Shape s, double sigma) {
  try {
    const std::vector<float> host = random_volume(s.numel());
    const Table t = make_table(s.n, sigma);
    DeviceBuffer in(host.size() * sizeof(float)), out(host.size() * sizeof(float)),
        table(t.data.size() * sizeof(double));
    BENCH_CUDA_TRY(
        cudaMemcpy(in.p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    BENCH_CUDA_TRY(
        cudaMemcpy(table.p, t.data.data(), t.data.size() * sizeof(double), cudaMemcpyHostToDevice));
    const auto vin =
        voxaug::contiguous_view(in.p, DType::Float32, voxaug::Device::CUDA, s.n, 1, s.d, s.h, s.w);
    const auto vout =
        voxaug::contiguous_view(out.p, DType::Float32, voxaug::Device::CUDA, s.n, 1, s.d, s.h, s.w);
    const int64_t bytes = voxaug::separable_filter_workspace_bytes(vin, vout, t.axes);
    DeviceBuffer ws(static_cast<size_t>(bytes));
    const voxaug::FilterTaps taps{static_cast<const double*>(table.p), t.width, t.axes};
    voxaug_bench::CudaStream stream;
    voxaug_bench::CudaEvent start, stop;
    voxaug::separable_filter(vin, vout, taps, ws.p, bytes, stream.get());  // warm-up
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    for (auto _ : state) {
      BENCH_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      for (int k = 0; k < kLaunchesPerIteration; ++k)
        voxaug::separable_filter(vin, vout, taps, ws.p, bytes, stream.get());
      BENCH_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      BENCH_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3 / kLaunchesPerIteration);
    }
    set_counters(state, s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cuda_cases() {
  for (const Shape& s : kShapes)
    for (double sigma : kSigmas)
      benchmark::RegisterBenchmark(case_name("cuda", sigma, s).c_str(), bench_cuda, s, sigma)
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if VOXAUG_WITH_CUDA
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_filter", register_cpu_cases,
                                register_cuda_cases, nullptr);
#else
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_filter", register_cpu_cases, nullptr,
                                nullptr);
#endif
}
