// Phantom: the CUDA backend against its CPU twin (bit-exact: the same float32 functions, the
// same Philox numbers; no transcendental from libm or libdevice). Compiled everywhere; skips
// without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_support.h"
#include "voxaug/error.h"
#include "voxaug/phantom.h"

using namespace voxaug;
using voxaug_test::Vol;

#if VOXAUG_WITH_CUDA
using voxaug_test::DeviceBuffer;
using voxaug_test::have_device;

TEST(PhantomCuda, TwinBitIdentical) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  struct Case {
    Vol v;
    int64_t k;
    uint64_t seed;
    uint32_t first;
  };
  const Case cases[] = {{{2, 1, 24, 20, 28}, 5, 1, 0},
                        {{3, 1, 13, 11, 9}, 2, 0xFFFFFFFFFFFFFFFFull, 7},
                        {{1, 1, 33, 8, 31}, 16, 12345, 4000000000u},
                        {{4, 1, 64, 64, 64}, 14, 7, 100}};
  for (const Case& c : cases) {
    PhantomOptions o;
    o.num_classes = c.k;
    o.seed = c.seed;
    o.first_sample = c.first;
    const size_t P = static_cast<size_t>(c.v.n * phantom_param_count(c.k));
    const size_t V = static_cast<size_t>(c.v.numel());
    std::vector<float> table(P), img(V);
    std::vector<uint8_t> lab(V);
    phantom(table.data(), voxaug_test::view(img.data(), DType::Float32, c.v),
            voxaug_test::view(lab.data(), DType::UInt8, c.v), o);
    DeviceBuffer d_table(P * sizeof(float)), d_img(V * sizeof(float)), d_lab(V);
    phantom(d_table.as<float>(), voxaug_test::view(d_img.p, DType::Float32, c.v, Device::CUDA),
            voxaug_test::view(d_lab.p, DType::UInt8, c.v, Device::CUDA), o);
    CUDA_OK(cudaDeviceSynchronize());
    const auto g_table = d_table.to_host<float>(P);
    const auto g_img = d_img.to_host<float>(V);
    const auto g_lab = d_lab.to_host<uint8_t>(V);
    EXPECT_EQ(std::memcmp(g_table.data(), table.data(), P * sizeof(float)), 0) << "K " << c.k;
    EXPECT_EQ(std::memcmp(g_img.data(), img.data(), V * sizeof(float)), 0) << "K " << c.k;
    EXPECT_EQ(g_lab, lab) << "K " << c.k;
  }
}

TEST(PhantomCuda, ParamsAloneMatchCpu) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device: CUDA-vs-CPU twin comparison skipped";
  PhantomOptions o;
  o.num_classes = 16;
  o.seed = 5;
  o.first_sample = 123;
  const int64_t N = 300;  // many samples: the launch's grid_y walks them
  const size_t P = static_cast<size_t>(N * phantom_param_count(16));
  std::vector<float> table(P);
  phantom_params(table.data(), N, o, Device::CPU);
  DeviceBuffer d_table(P * sizeof(float));
  phantom_params(d_table.as<float>(), N, o, Device::CUDA, 0, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const auto g = d_table.to_host<float>(P);
  EXPECT_EQ(std::memcmp(g.data(), table.data(), P * sizeof(float)), 0);
}

TEST(PhantomCuda, HostPointerRejected) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  const Vol v{1, 1, 8, 8, 8};
  std::vector<float> img(512), table(static_cast<size_t>(phantom_param_count(5)));
  std::vector<uint8_t> lab(512);
  PhantomOptions o;
  EXPECT_THROW(phantom(table.data(), voxaug_test::view(img.data(), DType::Float32, v, Device::CUDA),
                       voxaug_test::view(lab.data(), DType::UInt8, v, Device::CUDA), o),
               Error);
}
#else
TEST(PhantomCuda, NotBuilt) { GTEST_SKIP() << "voxaug built without CUDA"; }
#endif
