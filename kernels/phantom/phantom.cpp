// voxaug: phantom family -- validation, CPU backend, routing to CUDA (include/voxaug/phantom.h).
#include "voxaug/phantom.h"

#include <string>

#include "../common/cpu_isa.h"
#include "../common/device.h"
#include "../common/philox_cpu.h"
#include "phantom_kernels.h"
// launch_cpu.h after the kernels header, which declares cudaStream_t for it
#include "../common/launch_cpu.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void phantom_params_cuda(const PhantomParamsFunctor& f, int64_t batch, int device,
                         cudaStream_t stream);
void phantom_render_cuda(const PhantomRenderFunctor& f, int64_t batch, int device,
                         cudaStream_t stream);
#endif

namespace {

// The standard normals of Philox blocks [first, first + count) of the sample, four per block
// (philox_normals, in the AVX2 / AVX-512 clones below, chosen once at run time; the same
// functions, so the same bits as the functor's per-voxel normal4).
constexpr int64_t kNormalBlocks = 256;
void normals_baseline(uint64_t seed, uint32_t sample, int64_t first, int64_t count, float* z) {
  alignas(64) uint32_t w[4 * kNormalBlocks];
  philox_normals(seed, static_cast<uint64_t>(first), count, sample, PhiloxStream::Element, w, z);
}
#if VOXAUG_CPU_CLONES
VOXAUG_TARGET_AVX2 void normals_avx2(uint64_t seed, uint32_t sample, int64_t first, int64_t count,
                                     float* z) {
  alignas(64) uint32_t w[4 * kNormalBlocks];
  philox_normals(seed, static_cast<uint64_t>(first), count, sample, PhiloxStream::Element, w, z);
}
VOXAUG_TARGET_AVX512 void normals_avx512(uint64_t seed, uint32_t sample, int64_t first,
                                         int64_t count, float* z) {
  alignas(64) uint32_t w[4 * kNormalBlocks];
  philox_normals(seed, static_cast<uint64_t>(first), count, sample, PhiloxStream::Element, w, z);
}
#endif

void normals(uint64_t seed, uint32_t sample, int64_t first, int64_t count, float* z) {
  for (int64_t b = 0; b < count; b += kNormalBlocks) {
    const int64_t c = count - b < kNormalBlocks ? count - b : kNormalBlocks;
#if VOXAUG_CPU_CLONES
    switch (cpu_isa()) {
      case CpuIsa::Avx512: normals_avx512(seed, sample, first + b, c, z + 4 * b); continue;
      case CpuIsa::Avx2: normals_avx2(seed, sample, first + b, c, z + 4 * b); continue;
      default: break;
    }
#endif
    normals_baseline(seed, sample, first + b, c, z + 4 * b);
  }
}

// Object prefixes of the current row, looked up.
struct PrefixTable {
  const PhantomPrefix* p;
  VOXAUG_FORCEINLINE const PhantomPrefix& operator()(int o) const { return p[o]; }
};

}  // namespace

// CPU twin of the render pass: tiles of voxels, their normals made first (one Philox block per
// four voxels, vectorised), then row by row: the (x0, x1) parts of every object test and of the
// intensity terms once per row (phantom_prefix, phantom_row_terms), the rest per voxel. The same
// functions, the same operations in the same order as PhantomRenderFunctor::operator(): the same
// bits (tests/cpp/test_phantom.cpp compares them).
void cpu_items(const PhantomRenderFunctor& f, PhantomRenderFunctor::State& s, int64_t n,
               int64_t begin, int64_t end) {
  constexpr int64_t kTile = 1024;
  alignas(64) float z[kTile + 8];
  const uint32_t sample = f.first_sample + static_cast<uint32_t>(n);
  const int K = f.num_classes;
  const float* objects = s.row + kPhantomHeader;
  const float sigma = s.row[phantom_layout::kNoiseStd];
  const int64_t W = f.size[2], H = f.size[1];
  PhantomPrefix pre[kPhantomMaxClasses];
  for (int64_t t0 = begin; t0 < end; t0 += kTile) {
    const int64_t t1 = t0 + kTile < end ? t0 + kTile : end;
    const int64_t b0 = t0 >> 2;
    normals(f.seed, sample, b0, ((t1 + 3) >> 2) - b0, z);
    for (int64_t e = t0; e < t1;) {
      const int64_t w0 = e % W, r = e / W;
      const int64_t len = W - w0 < t1 - e ? W - w0 : t1 - e;
      const float x0 = phantom_coord(r / H, f.scale[0]), x1 = phantom_coord(r % H, f.scale[1]);
      for (int o = 0; o < K; ++o) pre[o] = phantom_prefix(objects + kPhantomObject * o, x0, x1);
      const PhantomRowTerms rt = phantom_row_terms(s.row, x0, x1);
      for (int64_t w = w0; w < w0 + len; ++w, ++e) {
        float v;
        const uint8_t l =
            phantom_voxel(s.row, K, rt, phantom_coord(w, f.scale[2]), PrefixTable{pre}, &v);
        f.image[f.image_ix.offset(n, e)] = fadd(v, fmul(sigma, z[e - 4 * b0]));
        f.label[f.label_ix.offset(n, e)] = l;
      }
    }
  }
}

namespace {

void check_options(const PhantomOptions& o, int64_t batch) {
  VOXAUG_EXPECTS(o.num_classes >= kPhantomMinClasses && o.num_classes <= kPhantomMaxClasses,
                 "num_classes must be in [2, 16], got " + std::to_string(o.num_classes));
  VOXAUG_EXPECTS(batch >= 1, "batch must be >= 1, got " + std::to_string(batch));
  VOXAUG_EXPECTS(o.first_sample + static_cast<uint64_t>(batch) <= (uint64_t(1) << 32),
                 "first_sample + batch must be <= 2^32, got first_sample " +
                     std::to_string(o.first_sample) + " and batch " + std::to_string(batch));
}

PhantomParamsFunctor params_functor(float* table, const PhantomOptions& o) {
  return PhantomParamsFunctor{table, phantom_param_count(o.num_classes),
                              static_cast<int>(o.num_classes), o.seed, o.first_sample};
}

}  // namespace
}  // namespace detail

void phantom_params(float* table, int64_t batch, const PhantomOptions& o, Device device,
                    int device_index, cudaStream_t stream) {
  detail::check_options(o, batch);
  VOXAUG_EXPECTS(table != nullptr, "table must not be null");
  const detail::PhantomParamsFunctor f = detail::params_functor(table, o);
  if (device == Device::CPU) {
    detail::CpuLauncher::launch(f, batch, stream);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::phantom_params_cuda(f, batch, device_index, stream);
#else
  (void)device_index;
  VOXAUG_FAIL("the table is on CUDA but this voxaug was built without CUDA");
#endif
}

void phantom_render(const float* table, const VolumeView& image, const VolumeView& label,
                    const PhantomOptions& o, cudaStream_t stream) {
  const int64_t batch = image.shape[0];
  detail::check_options(o, batch);
  VOXAUG_EXPECTS(image.dtype == DType::Float32,
                 std::string("image must be float32, got ") + dtype_name(image.dtype));
  VOXAUG_EXPECTS(label.dtype == DType::UInt8,
                 std::string("label must be uint8, got ") + dtype_name(label.dtype));
  VOXAUG_EXPECTS(image.shape[1] == 1, "image must have 1 channel: " + image.describe());
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(label.shape[a] == image.shape[a],
                   "label must have the image's shape: " + label.describe() + " vs " +
                       image.describe());
  for (int a = 2; a < 5; ++a)
    VOXAUG_EXPECTS(image.shape[a] >= kPhantomMinSize,
                   "size must be >= 8 voxels per axis, got " + image.describe());
  VOXAUG_EXPECTS(label.device == image.device && label.device_index == image.device_index,
                 "label must be on the image's device");
  VOXAUG_EXPECTS(table != nullptr && image.data != nullptr && label.data != nullptr,
                 "table, image and label must not be null");
  detail::PhantomRenderFunctor f;
  f.table = table;
  f.row_size = phantom_param_count(o.num_classes);
  f.num_classes = static_cast<int>(o.num_classes);
  f.image = static_cast<float*>(image.data);
  f.label = static_cast<uint8_t*>(label.data);
  f.image_ix = detail::make_indexer(image);
  f.label_ix = detail::make_indexer(label);
  for (int a = 0; a < 3; ++a) {
    f.size[a] = image.shape[a + 2];
    f.scale[a] = 2.0f / static_cast<float>(f.size[a]);
  }
  f.seed = o.seed;
  f.first_sample = o.first_sample;
  if (image.device == Device::CPU) {
    detail::CpuLauncher::launch(f, batch, stream);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(table, image.device_index, "table");
  detail::check_device_pointer(image.data, image.device_index, "image");
  detail::check_device_pointer(label.data, image.device_index, "label");
  detail::phantom_render_cuda(f, batch, image.device_index, stream);
#else
  VOXAUG_FAIL("image is on CUDA but this voxaug was built without CUDA");
#endif
}

void phantom(float* table, const VolumeView& image, const VolumeView& label,
             const PhantomOptions& o, cudaStream_t stream) {
  phantom_params(table, image.shape[0], o, image.device, image.device_index, stream);
  phantom_render(table, image, label, o, stream);
}

}  // namespace voxaug
