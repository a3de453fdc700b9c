// Google Benchmark: the stats family -- moments, exact percentiles, and the two transforms
// that use them (NormalizeIntensity = moments + apply pass; ScaleIntensityRangePercentiles =
// percentiles (0.5, 99.5) + apply pass), float32 in and out.
//
// Cases are named <backend>/<op>/<N>x<C>x<D>x<H>x<W> on 1x1x224x224x160 (the size MONAI's
// transforms are compared at) and 4x1x96x96x96 (a batch of crops). items_per_second counts
// input voxels.
//
// CPU cases (OpenMP) are always registered and timed by wall clock (on a small machine use
// --benchmark_filter=^cpu/ --benchmark_min_time=0.05). CUDA cases are registered only when a
// device is visible; each runs on its own stream and is timed with CUDA events around
// kLaunchesPerIteration back-to-back calls (manual time, divided by the count). Inputs,
// statistics buffers and workspaces are made once per case, outside the timed loop.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "voxaug/stats.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using voxaug::Device;
using voxaug::DType;

struct Shape {
  int64_t n, d, h, w;  // N x 1 x D x H x W
  int64_t numel() const { return n * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x1x" + std::to_string(d) + "x" + std::to_string(h) + "x" +
           std::to_string(w);
  }
};

const Shape kShapes[] = {{1, 224, 224, 160}, {4, 96, 96, 96}};
enum class Op { Moments, Percentiles, Normalize, RangePercentiles };
const Op kOps[] = {Op::Moments, Op::Percentiles, Op::Normalize, Op::RangePercentiles};
const char* op_name(Op op) {
  switch (op) {
    case Op::Moments: return "moments";
    case Op::Percentiles: return "percentiles";
    case Op::Normalize: return "normalize_intensity";
    case Op::RangePercentiles: return "scale_intensity_range_percentiles";
  }
  return "?";
}
const double kQ[2] = {0.5, 99.5};

std::vector<float> random_volume(int64_t numel) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(0.0f, 1000.0f);
  std::vector<float> v(numel);
  for (auto& x : v) x = u(rng);
  return v;
}

// One call of the op: statistics into `stats`, the transform into `out`.
void run(Op op, const voxaug::VolumeView& in, const voxaug::VolumeView& out, double* stats,
         void* ws, int64_t ws_bytes, cudaStream_t stream) {
  switch (op) {
    case Op::Moments: voxaug::moments(in, stats, false, false, ws, ws_bytes, stream); return;
    case Op::Percentiles:
      voxaug::percentiles(in, kQ, 2, stats, false, ws, ws_bytes, stream);
      return;
    case Op::Normalize: {
      voxaug::moments(in, stats, false, false, ws, ws_bytes, stream);
      voxaug::NormalizeIntensityArgs a;
      a.moments = stats;
      voxaug::normalize_intensity(in, out, a, stream);
      return;
    }
    case Op::RangePercentiles: {
      voxaug::percentiles(in, kQ, 2, stats, false, ws, ws_bytes, stream);
      const double b_min = 0.0, b_max = 1.0;
      voxaug::ScaleIntensityRangePercentilesArgs a;
      a.percentiles = stats;
      a.lower = kQ[0];
      a.upper = kQ[1];
      a.b_min = &b_min;
      a.b_max = &b_max;
      a.clip = true;
      voxaug::scale_intensity_range_percentiles(in, out, a, stream);
      return;
    }
  }
}

int64_t workspace_bytes(Op op, const voxaug::VolumeView& in) {
  return op == Op::Moments || op == Op::Normalize ? voxaug::moments_workspace_bytes(in, false)
                                                  : voxaug::percentiles_workspace_bytes(in, false);
}

std::string case_name(const char* backend, Op op, const Shape& s) {
  return std::string(backend) + "/" + op_name(op) + "/" + s.str();
}

void bench_cpu(benchmark::State& state, Shape s, Op op) {
  std::vector<float> in = random_volume(s.numel()), out(s.numel());
  std::vector<double> stats(3 * s.n);
  const auto vin =
      voxaug::contiguous_view(in.data(), DType::Float32, Device::CPU, s.n, 1, s.d, s.h, s.w);
  const auto vout =
      voxaug::contiguous_view(out.data(), DType::Float32, Device::CPU, s.n, 1, s.d, s.h, s.w);
  for (auto _ : state) {
    run(op, vin, vout, stats.data(), nullptr, 0, nullptr);
    benchmark::DoNotOptimize(out.data());
    benchmark::DoNotOptimize(stats.data());
  }
  state.SetItemsProcessed(state.iterations() * s.numel());
}

void register_cpu_cases() {
  for (const Shape& s : kShapes)
    for (Op op : kOps)
      benchmark::RegisterBenchmark(case_name("cpu", op, s).c_str(), bench_cpu, s, op)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();  // OpenMP: the main thread's CPU time says nothing
}

#if VOXAUG_WITH_CUDA
constexpr int kLaunchesPerIteration = 10;

using voxaug_bench::DeviceBuffer;

void bench_cuda(benchmark::State& state, Shape s, Op op) {
  try {
    const std::vector<float> host = random_volume(s.numel());
    DeviceBuffer in(host.size() * sizeof(float)), out(host.size() * sizeof(float)),
        stats(3 * s.n * sizeof(double));
    BENCH_CUDA_TRY(
        cudaMemcpy(in.p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    const auto vin =
        voxaug::contiguous_view(in.p, DType::Float32, Device::CUDA, s.n, 1, s.d, s.h, s.w);
    const auto vout =
        voxaug::contiguous_view(out.p, DType::Float32, Device::CUDA, s.n, 1, s.d, s.h, s.w);
    const int64_t bytes = workspace_bytes(op, vin);
    DeviceBuffer ws(static_cast<size_t>(bytes));
    auto* st = static_cast<double*>(stats.p);
    voxaug_bench::CudaStream stream;
    voxaug_bench::CudaEvent start, stop;
    run(op, vin, vout, st, ws.p, bytes, stream.get());  // warm-up
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    for (auto _ : state) {
      BENCH_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      for (int k = 0; k < kLaunchesPerIteration; ++k)
        run(op, vin, vout, st, ws.p, bytes, stream.get());
      BENCH_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      BENCH_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3 / kLaunchesPerIteration);
    }
    state.SetItemsProcessed(state.iterations() * s.numel());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cuda_cases() {
  for (const Shape& s : kShapes)
    for (Op op : kOps)
      benchmark::RegisterBenchmark(case_name("cuda", op, s).c_str(), bench_cuda, s, op)
          ->Unit(benchmark::kMicrosecond)
          ->UseManualTime();
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if VOXAUG_WITH_CUDA
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_stats", register_cpu_cases,
                                register_cuda_cases, nullptr);
#else
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_stats", register_cpu_cases, nullptr,
                                nullptr);
#endif
}
