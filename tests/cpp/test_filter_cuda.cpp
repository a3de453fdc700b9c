// CUDA path of separable_filter vs its CPU twin: bit-identical output for shapes, dtypes,
// strided views, per-sample sigmas and kernels too wide for the shared-memory tiles.
// Compiled everywhere; skips (and says so) without a device.
#include <gtest/gtest.h>

#include "test_support.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "voxaug/config.h"
#include "voxaug/error.h"
#include "voxaug/filter.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace voxaug;
using namespace voxaug_test;

#if VOXAUG_WITH_CUDA
namespace {

struct Case {
  int64_t n, c, d, h, w;
  std::vector<double> sigma;  // n x 3
  double truncated;
  int64_t numel() const { return n * c * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(d) + "x" +
           std::to_string(h) + "x" + std::to_string(w);
  }
};

std::vector<Case> cases() {
  return {
      {1, 1, 1, 1, 1, {1.0, 1.0, 1.0}, 4.0},
      {2, 1, 5, 1, 7, {0.7, 2.0, 1.1, 3.0, 0.0, 0.4}, 4.0},
      {3, 2, 9, 10, 11, {0.5, 1.0, 1.5, 2.0, 0.0, 2.5, 7.0, 0.3, 1.2}, 3.0},
      {1, 1, 70, 65, 130, {3.0, 3.0, 3.0}, 4.0},
      {2, 1, 33, 40, 150, {1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, 4.0},
      {1, 1, 20, 21, 300, {50.0, 45.0, 60.0}, 4.0},  // radius 200+: generic (untiled) path
  };
}

// scipy: scipy.ndimage's sampled taps and "reflect" border instead of MONAI's erf / zeros.
template <class TIn, class TOut>
void compare_twin(const Case& k, DType tin, DType tout, bool strided_out, bool scipy = false) {
  const GaussianTaps kind = scipy ? GaussianTaps::Sampled : GaussianTaps::Erf;
  const FilterBorder border = scipy ? FilterBorder::Reflect : FilterBorder::Zeros;
  const int64_t N = k.numel();
  std::mt19937 rng(static_cast<uint32_t>(N));
  std::uniform_real_distribution<float> u(0.0f, 200.0f);
  std::vector<TIn> in(N);
  for (auto& v : in) v = static_cast<TIn>(u(rng));
  const int64_t extra_c = strided_out ? 1 : 0;
  const int64_t out_numel = k.n * (k.c + extra_c) * k.d * k.h * k.w;
  std::vector<TOut> cpu(out_numel, TOut(0)), gpu(out_numel, TOut(0));

  std::vector<double> table;
  const int64_t width = gaussian_table_width(k.sigma.data(), k.n, k.truncated, kind);
  table.resize(k.n * 3 * width);
  const int axes = gaussian_table(k.sigma.data(), k.n, k.truncated, width, table.data(), kind);

  auto out_view = [&](void* p, Device dev) {
    VolumeView v = contiguous_view(p, tout, dev, k.n, k.c + extra_c, k.d, k.h, k.w);
    v.shape[1] = k.c;
    return v;
  };
  const VolumeView cin = contiguous_view(in.data(), tin, Device::CPU, k.n, k.c, k.d, k.h, k.w);
  const VolumeView cout = out_view(cpu.data(), Device::CPU);
  const int64_t ws_bytes = separable_filter_workspace_bytes(cin, cout, axes);
  std::vector<unsigned char> ws(static_cast<size_t>(ws_bytes) + 1);
  separable_filter(cin, cout, FilterTaps{table.data(), width, axes, border}, ws.data(), ws_bytes);

  DeviceBuffer din(N * sizeof(TIn)), dout(out_numel * sizeof(TOut)),
      dtab(table.size() * sizeof(double)), dws(static_cast<size_t>(ws_bytes));
  CUDA_OK(cudaMemcpy(din.p, in.data(), N * sizeof(TIn), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dout.p, 0, out_numel * sizeof(TOut)));
  CUDA_OK(cudaMemcpy(dtab.p, table.data(), table.size() * sizeof(double), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  separable_filter(contiguous_view(din.p, tin, Device::CUDA, k.n, k.c, k.d, k.h, k.w),
                   out_view(dout.p, Device::CUDA),
                   FilterTaps{static_cast<const double*>(dtab.p), width, axes, border}, dws.p,
                   ws_bytes, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(gpu.data(), dout.p, out_numel * sizeof(TOut), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_EQ(0, std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(TOut)))
      << k.str() << " " << dtype_name(tin) << "->" << dtype_name(tout)
      << (scipy ? " scipy reflect" : "");
}

}  // namespace

TEST(FilterCuda, Float32TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Case& k : cases()) {
    compare_twin<float, float>(k, DType::Float32, DType::Float32, false);
    compare_twin<float, float>(k, DType::Float32, DType::Float32, true);
  }
}

TEST(FilterCuda, Float64AndMixedTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Case& k : cases()) {
    compare_twin<double, double>(k, DType::Float64, DType::Float64, false);
    compare_twin<uint8_t, float>(k, DType::UInt8, DType::Float32, false);
    compare_twin<int16_t, double>(k, DType::Int16, DType::Float64, true);
  }
}

TEST(FilterCuda, ScipyReflectTwinBitIdentical) {
  // The tiles' mirrored halo (radii beyond the axis included) and the generic path.
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Case& k : cases()) {
    compare_twin<float, float>(k, DType::Float32, DType::Float32, false, true);
    compare_twin<uint8_t, float>(k, DType::UInt8, DType::Float32, true, true);
    compare_twin<double, double>(k, DType::Float64, DType::Float64, false, true);
  }
}

TEST(FilterCuda, RejectsHostTable) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA argument checks skipped";
  DeviceBuffer din(64 * sizeof(float)), dout(64 * sizeof(float)), dws(2 * 64 * sizeof(float));
  const double sigma[3] = {1.0, 1.0, 1.0};
  std::vector<double> table(3 * 10);
  const int axes = gaussian_table(sigma, 1, 4.0, 10, table.data());
  EXPECT_THROW(
      separable_filter(contiguous_view(din.p, DType::Float32, Device::CUDA, 1, 1, 4, 4, 4),
                       contiguous_view(dout.p, DType::Float32, Device::CUDA, 1, 1, 4, 4, 4),
                       FilterTaps{table.data(), 10, axes}, dws.p, 2 * 64 * sizeof(float)),
      Error);
}

#else
TEST(FilterCuda, Float32TwinBitIdentical) {
  GTEST_SKIP() << "built without CUDA: CUDA-vs-CPU twin comparison skipped";
}
#endif

#if VOXAUG_WITH_CUDA
TEST(MedianFilterCuda, TwinBitIdentical) {
  if (!voxaug::cuda_device_count()) GTEST_SKIP() << "no CUDA device: CUDA twin not run";
  const Vol v{2, 3, 9, 10, 11};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(v.numel()));
  for (auto& e : x) e = u(rng);
  const int64_t radii[][3] = {{1, 1, 1}, {0, 2, 1}, {3, 3, 3}};
  for (const auto& r : radii) {
    std::vector<float> cpu(x.size());
    median_filter(view(x.data(), DType::Float32, v), view(cpu.data(), DType::Float32, v), r);
    DeviceBuffer dx(x), dout(x.size() * sizeof(float));
    median_filter(view(dx.p, DType::Float32, v, Device::CUDA),
                  view(dout.p, DType::Float32, v, Device::CUDA), r);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dout.to_host<float>(x.size()), cpu)
        << "radius " << r[0] << " " << r[1] << " " << r[2];
  }
}
#endif
