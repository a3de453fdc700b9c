// CUDA path of the stats family vs its CPU twin: moments (fixed reduction order) and
// percentiles (exact order statistics) bit-identical, NormalizeIntensity and
// ScaleIntensityRangePercentiles outputs bit-identical, over shapes, dtypes and strided views.
// Compiled everywhere; skips (and says so) without a device.
#include <gtest/gtest.h>

#include "test_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "voxaug/config.h"
#include "voxaug/error.h"
#include "voxaug/stats.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace voxaug;
using namespace voxaug_test;

#if VOXAUG_WITH_CUDA
namespace {

const std::vector<Vol> kShapes = {{1, 1, 1, 1, 1},   {2, 3, 7, 5, 13},   {3, 2, 1, 1, 9},
                                  {1, 2, 33, 1, 70}, {2, 1, 40, 50, 21}, {1, 1, 64, 96, 80}};

// A (possibly channel-strided) view of `v` over storage with `pad` extra channels.
VolumeView padded(void* p, DType t, Device dev, const Vol& v, int64_t pad) {
  VolumeView x = contiguous_view(p, t, dev, v.n, v.c + pad, v.d, v.h, v.w);
  x.shape[1] = v.c;
  return x;
}

template <class T>
std::vector<T> random_storage(const Vol& v, int64_t pad, uint32_t seed, double zero_frac) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 200.0), z(0.0, 1.0);
  std::vector<T> s(v.n * (v.c + pad) * v.d * v.h * v.w);
  for (auto& x : s) x = static_cast<T>(z(rng) < zero_frac ? 0.0 : u(rng));
  return s;
}

template <class T>
void twin(const Vol& v, DType t, int64_t pad, bool cw, bool nz) {
  const std::string where =
      std::to_string(v.n) + "x" + std::to_string(v.c) + "x" + std::to_string(v.d) + "x" +
      std::to_string(v.h) + "x" + std::to_string(v.w) + " " + dtype_name(t) + " pad " +
      std::to_string(pad) + " cw " + std::to_string(cw) + " nz " + std::to_string(nz);
  const std::vector<T> host = random_storage<T>(v, pad, uint32_t(v.numel() + pad), 0.25);
  const int64_t segs = v.n * (cw ? v.c : 1);
  const VolumeView cin = padded(const_cast<T*>(host.data()), t, Device::CPU, v, pad);
  DeviceBuffer din(host);
  const VolumeView gin = padded(din.p, t, Device::CUDA, v, pad);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));

  // moments
  std::vector<double> cm(3 * segs);
  moments(cin, cm.data(), cw, nz, nullptr, 0);
  const int64_t mws = moments_workspace_bytes(gin, cw);
  DeviceBuffer dm(cm.size() * sizeof(double)), dmws(static_cast<size_t>(mws));
  moments(gin, dm.as<double>(), cw, nz, dmws.p, mws, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(
      0, std::memcmp(cm.data(), dm.to_host<double>(cm.size()).data(), cm.size() * sizeof(double)))
      << "moments " << where;

  // percentiles
  const std::vector<double> q = {0.0, 0.5, 2.0, 25.0, 50.0, 97.5, 99.9, 100.0};
  std::vector<double> cp(q.size() * segs);
  percentiles(cin, q.data(), int64_t(q.size()), cp.data(), cw, nullptr, 0);
  const int64_t pws = percentiles_workspace_bytes(gin, cw);
  DeviceBuffer dp(cp.size() * sizeof(double)), dpws(static_cast<size_t>(pws));
  percentiles(gin, q.data(), int64_t(q.size()), dp.as<double>(), cw, dpws.p, pws, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(
      0, std::memcmp(cp.data(), dp.to_host<double>(cp.size()).data(), cp.size() * sizeof(double)))
      << "percentiles " << where;

  // apply: normalize (statistics from each side) and range percentiles (q = 2, 97.5)
  const int64_t numel = v.numel();
  std::vector<float> co(numel), go(numel);
  DeviceBuffer dout(numel * sizeof(float));
  NormalizeIntensityArgs na;
  na.moments = cm.data();
  na.nonzero = nz;
  na.channel_wise = cw;
  normalize_intensity(
      cin, contiguous_view(co.data(), DType::Float32, Device::CPU, v.n, v.c, v.d, v.h, v.w), na);
  na.moments = dm.as<double>();
  const VolumeView gout =
      contiguous_view(dout.p, DType::Float32, Device::CUDA, v.n, v.c, v.d, v.h, v.w);
  normalize_intensity(gin, gout, na, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  go = dout.to_host<float>(numel);
  EXPECT_EQ(0, std::memcmp(co.data(), go.data(), numel * sizeof(float))) << "normalize " << where;

  std::vector<double> cp2(2 * segs);
  const double q2[2] = {2.0, 97.5};
  percentiles(cin, q2, 2, cp2.data(), cw, nullptr, 0);
  DeviceBuffer dp2(cp2.size() * sizeof(double));
  CUDA_OK(cudaMemcpy(dp2.p, cp2.data(), cp2.size() * sizeof(double), cudaMemcpyHostToDevice));
  const double bmin = -1.0, bmax = 1.0;
  ScaleIntensityRangePercentilesArgs ra;
  ra.percentiles = cp2.data();
  ra.lower = 2.0;
  ra.upper = 97.5;
  ra.b_min = &bmin;
  ra.b_max = &bmax;
  ra.clip = true;
  ra.channel_wise = cw;
  scale_intensity_range_percentiles(
      cin, contiguous_view(co.data(), DType::Float32, Device::CPU, v.n, v.c, v.d, v.h, v.w), ra);
  ra.percentiles = dp2.as<double>();
  scale_intensity_range_percentiles(gin, gout, ra, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  go = dout.to_host<float>(numel);
  EXPECT_EQ(0, std::memcmp(co.data(), go.data(), numel * sizeof(float)))
      << "range percentiles " << where;
  CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace

TEST(StatsCuda, Float32TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Vol& v : kShapes)
    for (int64_t pad : {0, 1})
      for (bool cw : {false, true})
        for (bool nz : {false, true}) twin<float>(v, DType::Float32, pad, cw, nz);
}

TEST(StatsCuda, OtherDtypesTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  for (const Vol& v : kShapes)
    for (bool cw : {false, true}) {
      twin<double>(v, DType::Float64, 1, cw, false);
      twin<uint8_t>(v, DType::UInt8, 0, cw, true);
      twin<int16_t>(v, DType::Int16, 1, cw, false);
      twin<int32_t>(v, DType::Int32, 0, cw, true);
    }
}

TEST(StatsCuda, RejectsHostStatistics) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA argument checks skipped";
  DeviceBuffer din(64 * sizeof(float)), dout(64 * sizeof(float));
  std::vector<double> host_moments(3, 1.0);
  NormalizeIntensityArgs a;
  a.moments = host_moments.data();
  EXPECT_THROW(
      normalize_intensity(contiguous_view(din.p, DType::Float32, Device::CUDA, 1, 1, 4, 4, 4),
                          contiguous_view(dout.p, DType::Float32, Device::CUDA, 1, 1, 4, 4, 4), a),
      Error);
}

// Views that are not one dense block per sample (every other W element; then D and H swapped
// as well), so both backends take their indexed paths, and 40 percentiles (more than one
// gather launch takes): moments, percentiles and the normalize output bit-identical.
TEST(StatsCuda, StridedViewsAndManyPercentilesTwin) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  const Vol v{2, 2, 9, 11, 13};
  const std::vector<float> host =
      random_storage<float>(Vol{v.n, v.c, v.d, v.h, 2 * v.w}, 0, 7u, 0.25);
  DeviceBuffer din(host);
  std::vector<double> q(40);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 100.0 * double(i) / 39.0;
  q[7] = 12.5;
  for (bool swap : {false, true}) {
    auto strided = [&](void* p, Device dev) {
      VolumeView x = contiguous_view(p, DType::Float32, dev, v.n, v.c, v.d, v.h, 2 * v.w);
      x.shape[4] = v.w;
      x.strides[4] = 2;
      if (swap) {
        std::swap(x.shape[2], x.shape[3]);
        std::swap(x.strides[2], x.strides[3]);
      }
      return x;
    };
    const VolumeView cin = strided(const_cast<float*>(host.data()), Device::CPU);
    const VolumeView gin = strided(din.p, Device::CUDA);
    ASSERT_FALSE(cin.sample_contiguous());
    const Vol o{v.n, v.c, cin.shape[2], cin.shape[3], v.w};
    for (bool cw : {false, true})
      for (bool nz : {false, true}) {
        const std::string where = std::string(swap ? "swapped " : "") + "cw " + std::to_string(cw) +
                                  " nz " + std::to_string(nz);
        const int64_t segs = v.n * (cw ? v.c : 1);
        std::vector<double> cm(3 * segs);
        moments(cin, cm.data(), cw, nz, nullptr, 0);
        const int64_t mws = moments_workspace_bytes(gin, cw);
        DeviceBuffer dm(cm.size() * sizeof(double)), dmws(static_cast<size_t>(mws));
        moments(gin, dm.as<double>(), cw, nz, dmws.p, mws);
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(0, std::memcmp(cm.data(), dm.to_host<double>(cm.size()).data(),
                                 cm.size() * sizeof(double)))
            << "moments " << where;

        std::vector<double> cp(q.size() * segs);
        percentiles(cin, q.data(), int64_t(q.size()), cp.data(), cw, nullptr, 0);
        const int64_t pws = percentiles_workspace_bytes(gin, cw);
        DeviceBuffer dp(cp.size() * sizeof(double)), dpws(static_cast<size_t>(pws));
        percentiles(gin, q.data(), int64_t(q.size()), dp.as<double>(), cw, dpws.p, pws);
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(0, std::memcmp(cp.data(), dp.to_host<double>(cp.size()).data(),
                                 cp.size() * sizeof(double)))
            << "percentiles " << where;

        std::vector<float> co(o.numel());
        DeviceBuffer dout(o.numel() * sizeof(float));
        NormalizeIntensityArgs na;
        na.moments = cm.data();
        na.nonzero = nz;
        na.channel_wise = cw;
        normalize_intensity(cin, view(co.data(), DType::Float32, o), na);
        na.moments = dm.as<double>();
        normalize_intensity(gin, view(dout.p, DType::Float32, o, Device::CUDA), na);
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_EQ(0, std::memcmp(co.data(), dout.to_host<float>(o.numel()).data(),
                                 o.numel() * sizeof(float)))
            << "normalize " << where;
      }
  }
}

TEST(StatsCuda, RejectsHostDataPointers) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA argument checks skipped";
  std::vector<float> host(64, 1.0f);
  DeviceBuffer dout(3 * sizeof(double)), dws(1 << 16);
  // A CUDA view of host memory: refused before any launch (the kernel would fault).
  const VolumeView bad = contiguous_view(host.data(), DType::Float32, Device::CUDA, 1, 1, 4, 4, 4);
  EXPECT_THROW(moments(bad, dout.as<double>(), false, false, dws.p, 1 << 16), Error);
}

// TorchIO HistogramStandardization's map: the CUDA kernel vs the host's vectorised loop, with
// values on the edges, NaN and infinities, 10 pieces (TorchIO's) and 16.
TEST(StatsCuda, PiecewiseLinearTwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  std::mt19937 rng(4);
  std::uniform_real_distribution<double> u(-50.0, 150.0);
  const Vol v{3, 2, 9, 10, 11};
  for (int pieces : {10, 16}) {
    const int row_len = 3 * pieces - 1;
    std::vector<double> table(v.n * row_len);
    for (int64_t n = 0; n < v.n; ++n) {
      std::vector<double> e(pieces - 1);
      for (auto& x : e) x = std::round(u(rng) * 4.0) / 4.0;
      std::sort(e.begin(), e.end());
      for (int i = 0; i < pieces - 1; ++i) table[n * row_len + i] = e[i];
      for (int i = 0; i < 2 * pieces; ++i) table[n * row_len + pieces - 1 + i] = u(rng) / 7.0;
    }
    std::vector<float> x(v.numel());
    for (auto& e : x) e = static_cast<float>(std::round(u(rng) * 4.0) / 4.0);
    x[1] = NAN;
    x[2] = INFINITY;
    std::vector<float> cpu(x.size());
    piecewise_linear(
        contiguous_view(x.data(), DType::Float32, Device::CPU, v.n, v.c, v.d, v.h, v.w),
        contiguous_view(cpu.data(), DType::Float32, Device::CPU, v.n, v.c, v.d, v.h, v.w),
        table.data(), pieces);
    DeviceBuffer dx(x), dt(table), dout(x.size() * sizeof(float));
    piecewise_linear(contiguous_view(dx.p, DType::Float32, Device::CUDA, v.n, v.c, v.d, v.h, v.w),
                     contiguous_view(dout.p, DType::Float32, Device::CUDA, v.n, v.c, v.d, v.h, v.w),
                     dt.as<double>(), pieces);
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(0, std::memcmp(cpu.data(), dout.to_host<float>(x.size()).data(), 4 * x.size()))
        << "pieces " << pieces;
  }
}

#else
TEST(StatsCuda, Float32TwinBitIdentical) {
  GTEST_SKIP() << "built without CUDA: CUDA-vs-CPU twin comparison skipped";
}
#endif
