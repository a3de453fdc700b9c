// Google Benchmark: the batched resample gather (voxaug::resample) and its gradients
// (voxaug::resample_backward_input, voxaug::resample_backward_matrix).
//
// Cases are named <backend>/<op>/<N>x<C>x<D>x<H>x<W> (output = input size, C = 1), with op
//   linear              float32 image, trilinear, zeros padding
//   nearest             float32 image, nearest, zeros padding
//   linear_reflection   float32 image, trilinear, reflection padding (align_corners false)
//   image_label         float32 image (trilinear, zeros) + uint8 label (nearest, constant 0)
//                       as two targets of one launch: RandAffine on an image and its label
//   cubic               float32 image, cubic B-spline, zeros padding: bspline_prefilter into
//                       the padded coefficient buffer ((N, 1, S + 2P, S + 2P, S + 2P), P =
//                       kBSplinePad = 12) followed by the cubic gather, timed together: a
//                       user pays both per call, since the coefficients belong to the volume
//                       being augmented (no cache of them between calls)
//   cubic_image_label   cubic's prefilter, then float32 image (cubic, zeros) + uint8 label
//                       (nearest, constant 0) as two targets of one launch
//   quintic             cubic with the B-spline of order 5 (two poles in the prefilter, 6^3
//                       taps per voxel instead of 4^3), zeros padding; 1 x 64^3 and 4 x 96^3
//   image_label_elastic image_label through the same affine plus a B-spline displacement
//                       (voxaug::resample_deformed; 14^3 control points per sample, U(-3, 3)
//                       voxels): the deform issue's bar is its time <= 1.5x image_label's
//   exact_crop, exact_flip_w, exact_rot90_hw, exact_rot90_dw
//                       image_label's targets through signed-permutation maps (the exact path:
//                       bit copies, rows streamed): 96^3 patches cut from 4 x 1 x 160 x 160 x
//                       128 volumes at per-sample offsets, as a crop sampler's batch, then
//                       no further map (crop), a flip of w (flip_w: rows read backwards), a
//                       quarter turn in (h, w) (rows step one input row per voxel) or in
//                       (d, w) (one input plane per voxel); on 4 x 96^3 only. The crop's
//                       time is the bar for the others
//   backward_input      d loss / d image of `linear` (grad_out float32 -> grad_in float32)
//   backward_matrix     d loss / d matrices of `linear` (N x 12 float64)
//   copy_image (CUDA)        one cudaMemcpyAsync of a float32 volume of the shape (4 B/voxel)
//   copy_image_label (CUDA)  one cudaMemcpyAsync of the image+label bytes (4 + 1 B/voxel)
// on sizes 64^3, 128^3, 256^3 at batch 1, 4 and 16 (the CPU skips 16 x 256^3: too slow), plus
// the bar, batched RandAffine of 4 x 96^3 image+label, as image_label/4x1x96x96x96
// against copy_image_label/4x1x96x96x96 (registered first), and the backward ops at
// 1 x 64^3 and 4 x 96^3.
//
// Every sample has its own rotation (up to 0.3 rad about each axis) + scale (0.9..1.1 per
// axis) + translation (up to 5% of the size per axis) about the volume centre, mapping the
// output voxel index to the input voxel index. Candidates are drawn until one sends 12-18% of
// the output voxels outside the input (outside [-0.5, S - 0.5] on an axis), so padding does
// real work; the `outside` counter reports the case's fraction (about 0.16).
//
// items_per_second counts output voxels. bytes_per_second counts, per output voxel and
// target, one element written and one input element read (image 4 + 4 B, image+label
// 4 + 4 + 1 + 1 B) -- the traffic of a copy of the same tensors -- so a gather's bytes/s over
// the copy of the same shape and bytes (copy_image, copy_image_label) is the fraction of the
// copy bandwidth it reaches. The trilinear gather reads 8 corners per voxel; neighbouring
// voxels share them through the caches, which this count deliberately ignores. The cubic
// cases are counted the same way (the image's 4 + 4 B, plus 1 + 1 B for the label), so
// their bytes/s compare with linear's and the copy's; the prefilter's passes over the padded
// coefficient buffer and the gather's 64 coefficient reads per voxel are not counted.
// Backward cases count 8 B per output voxel: grad_out read + grad_in written
// (backward_input), grad_out read + input read (backward_matrix).
//
// CPU cases (OpenMP) are always registered and timed by wall clock; on a small machine run
// them with --benchmark_filter=^cpu/ --benchmark_min_time=0.05 (Google Benchmark 1.7; "0.05s"
// from 1.8 on): each large case then runs once, 40-70 s in all on 2 (shared) cores.
// CUDA cases are registered only when a device is visible; each runs on its own stream and
// is timed with CUDA events recorded around kLaunchesPerIteration back-to-back calls (manual
// time, divided by the count): at 4 x 96^3 a call's host side (validation, launch) is not far
// from its kernel time, and back to back it overlaps the previous kernel as in a training
// loop, so the figure is the stream's throughput rather than one call's latency. The copy
// baselines are timed the same way. Caches stay warm between calls for gather and copy alike
// (4 x 96^3 image+label reads 18 MB and writes 18 MB: within an H200's 50 MB L2). Inputs
// are generated and uploaded once per process and shared by every case, the matrices once
// per case; nothing is allocated or copied inside a timed loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "voxaug/deform.h"
#include "voxaug/resample.h"
#include "voxaug/types.h"

#if VOXAUG_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {
#if VOXAUG_WITH_CUDA
using voxaug_bench::CudaEvent;
using voxaug_bench::CudaStream;
#endif

using voxaug::DType;
using voxaug::Interp;
using voxaug::Padding;
using voxaug::ResampleTarget;

struct Shape {
  int64_t n, size;  // N x 1 x size^3
  int64_t numel() const { return n * size * size * size; }
  std::string str() const {
    const std::string s = std::to_string(size);
    return std::to_string(n) + "x1x" + s + "x" + s + "x" + s;
  }
};

enum class Op {
  Linear,
  Nearest,
  LinearReflection,
  ImageLabel,
  Cubic,
  CubicImageLabel,
  Quintic,
  ImageLabelElastic,
  ExactCrop,
  ExactFlipW,
  ExactRot90HW,
  ExactRot90DW,
  BackwardInput,
  BackwardMatrix,
  CopyImage,
  CopyImageLabel
};

const char* op_name(Op op) {
  switch (op) {
    case Op::Linear: return "linear";
    case Op::Nearest: return "nearest";
    case Op::LinearReflection: return "linear_reflection";
    case Op::ImageLabel: return "image_label";
    case Op::Cubic: return "cubic";
    case Op::CubicImageLabel: return "cubic_image_label";
    case Op::Quintic: return "quintic";
    case Op::ImageLabelElastic: return "image_label_elastic";
    case Op::ExactCrop: return "exact_crop";
    case Op::ExactFlipW: return "exact_flip_w";
    case Op::ExactRot90HW: return "exact_rot90_hw";
    case Op::ExactRot90DW: return "exact_rot90_dw";
    case Op::BackwardInput: return "backward_input";
    case Op::BackwardMatrix: return "backward_matrix";
    case Op::CopyImage: return "copy_image";
    case Op::CopyImageLabel: return "copy_image_label";
  }
  return "?";
}

// Bytes per output voxel by the count above.
int64_t bytes_per_voxel(Op op) {
  return op == Op::ImageLabel || op == Op::CubicImageLabel || op == Op::ImageLabelElastic ||
                 op == Op::CopyImageLabel || op == Op::ExactCrop || op == Op::ExactFlipW ||
                 op == Op::ExactRot90HW || op == Op::ExactRot90DW
             ? 2 * (4 + 1)
             : 2 * 4;
}

const std::vector<Shape>& grid_shapes() {
  static const std::vector<Shape> all = {{1, 64},   {4, 64},  {16, 64}, {1, 128}, {4, 128},
                                         {16, 128}, {1, 256}, {4, 256}, {16, 256}};
  return all;
}
const Shape kBarShape{4, 96};  // the bar: 4 x 96^3 image+label
const std::vector<Shape>& backward_shapes() {
  static const std::vector<Shape> all = {{1, 64}, kBarShape};
  return all;
}
const std::vector<Op>& forward_ops() {
  static const std::vector<Op> all = {Op::Linear,     Op::Nearest, Op::LinearReflection,
                                      Op::ImageLabel, Op::Cubic,   Op::CubicImageLabel};
  return all;
}
constexpr int64_t kMaxBatch = 16;

void set_throughput(benchmark::State& state, const Shape& s, Op op) {
  const int64_t voxels = state.iterations() * s.numel();
  state.SetItemsProcessed(voxels);
  state.SetBytesProcessed(voxels * bytes_per_voxel(op));
}

// ---- the per-sample affine maps ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double uniform(uint64_t& state, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
}

// Fraction of the output voxels whose source point lies outside [-0.5, size - 0.5] on some
// axis, estimated on points (i + 1/2) size / g, i < g, along each axis (all voxels when
// g == size).
double sample_outside_fraction(const double* m, int64_t size, int64_t g) {
  int64_t outside = 0;
  const double lo = -0.5, hi = static_cast<double>(size) - 0.5;
  auto at = [&](int64_t i) { return static_cast<double>((2 * i + 1) * size / (2 * g)); };
  for (int64_t i = 0; i < g; ++i)
    for (int64_t j = 0; j < g; ++j)
      for (int64_t k = 0; k < g; ++k) {
        const double d = at(i), h = at(j), w = at(k);
        bool out = false;
        for (int r = 0; r < 3; ++r) {
          const double x = m[4 * r] * d + m[4 * r + 1] * h + m[4 * r + 2] * w + m[4 * r + 3];
          out = out || x < lo || x > hi;
        }
        outside += out;
      }
  return static_cast<double>(outside) / static_cast<double>(g * g * g);
}

// Sample k's row-major 3x4 map for a size^3 volume: x_in = A (x_out - c) + c + t, with
// A = Rz Ry Rx diag(scale), c the centre. Candidates come from a fixed sequence per sample
// (independent of size and batch) until one sends 12-18% of the voxels outside.
void sample_matrix(int64_t k, int64_t size, double m[12]) {
  uint64_t state = 0x5EEDull + static_cast<uint64_t>(k) * 0x100000001B3ull;
  const double c = (static_cast<double>(size) - 1.0) / 2.0;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    double a[3], s[3], t[3];
    for (double& v : a) v = uniform(state, -0.3, 0.3);
    for (double& v : s) v = uniform(state, 0.9, 1.1);
    for (double& v : t) v = uniform(state, -0.05, 0.05) * static_cast<double>(size);
    const double cx = std::cos(a[0]), sx = std::sin(a[0]), cy = std::cos(a[1]), sy = std::sin(a[1]),
                 cz = std::cos(a[2]), sz = std::sin(a[2]);
    const double rx[3][3] = {{1, 0, 0}, {0, cx, -sx}, {0, sx, cx}};
    const double ry[3][3] = {{cy, 0, sy}, {0, 1, 0}, {-sy, 0, cy}};
    const double rz[3][3] = {{cz, -sz, 0}, {sz, cz, 0}, {0, 0, 1}};
    double ryx[3][3], r[3][3];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        ryx[i][j] = 0;
        for (int l = 0; l < 3; ++l) ryx[i][j] += ry[i][l] * rx[l][j];
      }
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        r[i][j] = 0;
        for (int l = 0; l < 3; ++l) r[i][j] += rz[i][l] * ryx[l][j];
      }
    for (int i = 0; i < 3; ++i) {
      double off = c + t[i];
      for (int j = 0; j < 3; ++j) {
        m[4 * i + j] = r[i][j] * s[j];
        off -= m[4 * i + j] * c;
      }
      m[4 * i + 3] = off;
    }
    const double f = sample_outside_fraction(m, size, std::min<int64_t>(size, 16));
    if (f >= 0.12 && f <= 0.18) return;
  }
  throw std::runtime_error("no affine map with 12-18% of the voxels outside");
}

std::vector<double> affine_matrices(const Shape& s) {
  std::vector<double> m(static_cast<size_t>(12 * s.n));
  for (int64_t k = 0; k < s.n; ++k) sample_matrix(k, s.size, m.data() + 12 * k);
  return m;
}

double outside_fraction(const std::vector<double>& m, const Shape& s) {
  double sum = 0;
  for (int64_t k = 0; k < s.n; ++k)
    sum += sample_outside_fraction(m.data() + 12 * k, s.size, std::min<int64_t>(s.size, 64));
  return sum / static_cast<double>(s.n);
}

// ---- shared host data ----

// Image values in [0, 1) from a hash of the index; labels 0..4.
float image_value(int64_t i) {
  const uint64_t u = (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) >> 40;  // 24 bits
  return static_cast<float>(u) / 16777216.0f;
}
uint8_t label_value(int64_t i) {
  return static_cast<uint8_t>(((static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull) >> 40) % 5);
}

// A host buffer that grows on demand, filled with `value` (every case sees the same data).
template <class T, T (*value)(int64_t)>
T* host_buffer(std::vector<T>& buf, int64_t numel) {
  const int64_t old = static_cast<int64_t>(buf.size());
  if (numel > old) {
    buf.resize(static_cast<size_t>(numel));
    for (int64_t i = old; i < numel; ++i) buf[static_cast<size_t>(i)] = value(i);
  }
  return buf.data();
}
float* host_image_in(int64_t numel) {
  static std::vector<float> buf;
  return host_buffer<float, image_value>(buf, numel);
}
// Outputs start with the input's values: backward_matrix reads the image output as grad_out.
float* host_image_out(int64_t numel) {
  static std::vector<float> buf;
  return host_buffer<float, image_value>(buf, numel);
}
uint8_t* host_label_in(int64_t numel) {
  static std::vector<uint8_t> buf;
  return host_buffer<uint8_t, label_value>(buf, numel);
}
uint8_t* host_label_out(int64_t numel) {
  static std::vector<uint8_t> buf;
  return host_buffer<uint8_t, label_value>(buf, numel);
}
// The cubic cases' B-spline coefficients (overwritten by bspline_prefilter on every call).
float zero_value(int64_t) {
  return 0.0f;
}
float* host_coeff(int64_t numel) {
  static std::vector<float> buf;
  return host_buffer<float, zero_value>(buf, numel);
}

// B-spline cases (a prefilter into the coefficient buffer, then the gather).
bool is_cubic(Op op) {
  return op == Op::Cubic || op == Op::CubicImageLabel || op == Op::Quintic;
}

// Elements of a case's coefficient buffer: (N, 1, S + 2P, S + 2P, S + 2P).
int64_t coeff_numel(const Shape& s) {
  const int64_t e = s.size + 2 * voxaug::kBSplinePad;
  return s.n * e * e * e;
}

// ---- one case: its targets over given buffers ----

struct Buffers {
  void* image_in;
  void* image_out;
  void* label_in;
  void* label_out;
  void* coeff;  // cubic cases: coeff_numel(shape) float32 elements
  voxaug::Device device;
};

voxaug::VolumeView view(void* data, DType dtype, const Buffers& b, const Shape& s) {
  return voxaug::contiguous_view(data, dtype, b.device, s.n, 1, s.size, s.size, s.size);
}

// The targets of a forward op's launch. Backward ops use target 0 (the linear image, whose
// `out` backward_matrix reads as grad_out).
int make_targets(Op op, const Shape& s, const Buffers& b, ResampleTarget t[2]) {
  t[0] = ResampleTarget{};
  t[0].in = view(b.image_in, DType::Float32, b, s);
  t[0].out = view(b.image_out, DType::Float32, b, s);
  t[0].mode = op == Op::Nearest   ? Interp::Nearest
              : op == Op::Quintic ? Interp::Quintic
              : is_cubic(op)      ? Interp::Cubic
                                  : Interp::Linear;
  t[0].padding = op == Op::LinearReflection ? Padding::Reflection : Padding::Zeros;
  if (is_cubic(op)) {
    const int64_t e = s.size + 2 * voxaug::kBSplinePad;
    t[0].coeff = voxaug::contiguous_view(b.coeff, DType::Float32, b.device, s.n, 1, e, e, e);
  }
  if (op != Op::ImageLabel && op != Op::CubicImageLabel && op != Op::ImageLabelElastic) return 1;
  t[1] = ResampleTarget{};
  t[1].in = view(b.label_in, DType::UInt8, b, s);
  t[1].out = view(b.label_out, DType::UInt8, b, s);
  t[1].mode = Interp::Nearest;
  t[1].padding = Padding::Constant;
  t[1].pad_value = 0.0;
  return 2;
}

constexpr bool kAlignCorners = false;

// The elastic case's control grid: 14^3 points per sample over the output, U(-3, 3) voxels.
constexpr int64_t kControl = 14;
std::vector<float> elastic_coefficients(const Shape& s) {
  std::vector<float> c(static_cast<size_t>(s.n * 3 * kControl * kControl * kControl));
  uint32_t state = 12345u;
  for (auto& v : c) {
    state = state * 1664525u + 1013904223u;
    v = -3.0f + 6.0f * static_cast<float>(state >> 8) / 16777216.0f;
  }
  return c;
}
voxaug::DeformField elastic_field(void* coeff, voxaug::Device device, const Shape& s) {
  voxaug::DeformField f;
  f.kind = voxaug::FieldKind::BSpline;
  f.field =
      voxaug::contiguous_view(coeff, DType::Float32, device, s.n, 3, kControl, kControl, kControl);
  for (int a = 0; a < 3; ++a) {
    f.scale[a] = static_cast<double>(kControl - 3) / static_cast<double>(s.size - 1);
    f.offset[a] = 1.0;
  }
  return f;
}

void bm_cpu(benchmark::State& state, const Shape& s, Op op) {
  try {
    const int64_t numel = s.numel();
    const Buffers b{host_image_in(numel),
                    host_image_out(numel),
                    host_label_in(numel),
                    host_label_out(numel),
                    is_cubic(op) ? host_coeff(coeff_numel(s)) : nullptr,
                    voxaug::Device::CPU};
    const std::vector<double> m = affine_matrices(s);
    ResampleTarget t[2];
    const int k = make_targets(op, s, b, t);
    // backward_input: grad_out is the image input, grad_in the image output.
    ResampleTarget bwd = t[0];
    bwd.out = t[0].in;
    std::vector<double> grad_m(static_cast<size_t>(12 * s.n));
    std::vector<float> coeff = elastic_coefficients(s);
    const voxaug::DeformField field = elastic_field(coeff.data(), voxaug::Device::CPU, s);
    for (auto _ : state) {
      if (is_cubic(op))  // the coefficients are part of the cost (see the top of the file)
        voxaug::bspline_prefilter(t[0].in, t[0].coeff, t[0].padding, t[0].pad_value, kAlignCorners,
                                  voxaug::spline_order(t[0].mode));
      if (op == Op::ImageLabelElastic)
        voxaug::resample_deformed(t, k, m.data(), field, kAlignCorners);
      else if (op == Op::BackwardInput)
        voxaug::resample_backward_input(bwd, m.data(), kAlignCorners, b.image_out);
      else if (op == Op::BackwardMatrix)
        voxaug::resample_backward_matrix(t, 1, m.data(), kAlignCorners, grad_m.data());
      else
        voxaug::resample(t, k, m.data(), kAlignCorners);
      benchmark::ClobberMemory();
    }
    set_throughput(state, s, op);
    state.counters["outside"] = outside_fraction(m, s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The exact cases (see the top of the file): sample k's patch starts at (10 + 7k, 20 + 5k,
// 5 + 3k) of a 160 x 160 x 128 volume; out -> patch is a signed permutation.
constexpr int64_t kExactIn[3] = {160, 160, 128};
std::vector<double> exact_matrices(Op op, const Shape& s) {
  std::vector<double> m(static_cast<size_t>(12 * s.n), 0.0);
  const double last = static_cast<double>(s.size - 1);
  for (int64_t k = 0; k < s.n; ++k) {
    double* r = m.data() + 12 * k;  // row a: input axis a = sum_c r[4a + c] out_c + r[4a + 3]
    const double start[3] = {10.0 + 7 * k, 20.0 + 5 * k, 5.0 + 3 * k};
    int src_of[3] = {0, 1, 2};  // input axis read along output axis c
    bool flip[3] = {false, false, false};
    if (op == Op::ExactFlipW) flip[2] = true;
    if (op == Op::ExactRot90HW) src_of[1] = 2, src_of[2] = 1, flip[2] = true;
    if (op == Op::ExactRot90DW) src_of[0] = 2, src_of[2] = 0, flip[0] = true;
    for (int c = 0; c < 3; ++c) {
      const int a = src_of[c];
      r[4 * a + c] = flip[c] ? -1.0 : 1.0;
      r[4 * a + 3] = start[a] + (flip[c] ? last : 0.0);
    }
  }
  return m;
}

void bm_cpu_exact(benchmark::State& state, const Shape& s, Op op) {
  try {
    const int64_t in_numel = s.n * kExactIn[0] * kExactIn[1] * kExactIn[2];
    const voxaug::Device cpu = voxaug::Device::CPU;
    ResampleTarget t[2];
    t[0].in = voxaug::contiguous_view(host_image_in(in_numel), DType::Float32, cpu, s.n, 1,
                                      kExactIn[0], kExactIn[1], kExactIn[2]);
    t[0].out = voxaug::contiguous_view(host_image_out(s.numel()), DType::Float32, cpu, s.n, 1,
                                       s.size, s.size, s.size);
    t[0].mode = Interp::Linear;
    t[0].padding = Padding::Zeros;
    t[1].in = voxaug::contiguous_view(host_label_in(in_numel), DType::UInt8, cpu, s.n, 1,
                                      kExactIn[0], kExactIn[1], kExactIn[2]);
    t[1].out = voxaug::contiguous_view(host_label_out(s.numel()), DType::UInt8, cpu, s.n, 1, s.size,
                                       s.size, s.size);
    t[1].mode = Interp::Nearest;
    t[1].padding = Padding::Constant;
    const std::vector<double> m = exact_matrices(op, s);
    for (auto _ : state) {
      voxaug::resample(t, 2, m.data(), kAlignCorners);
      benchmark::ClobberMemory();
    }
    set_throughput(state, s, op);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cpu_cases() {
  auto add = [](Op op, const Shape& s) {
    benchmark::RegisterBenchmark((std::string("cpu/") + op_name(op) + "/" + s.str()).c_str(),
                                 bm_cpu, s, op)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();  // OpenMP: the main thread's CPU time says nothing
  };
  add(Op::ImageLabel, kBarShape);
  add(Op::ImageLabelElastic, kBarShape);
  for (Op op : {Op::ExactCrop, Op::ExactFlipW, Op::ExactRot90HW, Op::ExactRot90DW})
    benchmark::RegisterBenchmark(
        (std::string("cpu/") + op_name(op) + "/" + kBarShape.str()).c_str(), bm_cpu_exact,
        kBarShape, op)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  for (Op op : forward_ops())
    for (const Shape& s : grid_shapes())
      if (!(s.size == 256 && s.n == 16)) add(op, s);
  for (Op op : {Op::BackwardInput, Op::BackwardMatrix})
    for (const Shape& s : backward_shapes()) add(op, s);
  for (const Shape& s : backward_shapes()) add(Op::Quintic, s);  // 1 x 64^3, 4 x 96^3
}

#if VOXAUG_WITH_CUDA

// Device input and output, shared by every CUDA case and grown on demand; released at the
// end of main, before the runtime shuts down. Each of `in` and `out` holds a float32 image
// of `numel` voxels followed (256-byte aligned) by a uint8 label of `numel` voxels: one
// allocation of at least 5 B per voxel, so copy_image_label moves a case's image+label
// bytes with one cudaMemcpyAsync, as image_label resamples both in one launch. `out` starts
// as a copy of `in` (backward_matrix reads it as grad_out). Matrices and their gradient
// hold kMaxBatch samples. `coeff` holds the cubic cases' B-spline coefficients (float32,
// `coeff_numel` elements), allocated by the first cubic case and grown on demand.
struct DeviceBuffers {
  void* in = nullptr;
  void* out = nullptr;
  int64_t numel = 0;
  size_t label_offset = 0;
  void* coeff = nullptr;
  int64_t coeff_numel = 0;
  double* matrices = nullptr;
  double* grad_matrices = nullptr;
};

DeviceBuffers& device_buffers() {
  static DeviceBuffers b;
  return b;
}

void release_device_buffers() {
  DeviceBuffers& b = device_buffers();
  cudaFree(b.in);
  cudaFree(b.out);
  cudaFree(b.coeff);
  cudaFree(b.matrices);
  cudaFree(b.grad_matrices);
  b = DeviceBuffers{};
}

const DeviceBuffers& device_buffers_for(int64_t numel) {
  DeviceBuffers& b = device_buffers();
  if (b.matrices == nullptr) {
    void* m = nullptr;
    void* g = nullptr;
    BENCH_CUDA_TRY(cudaMalloc(&m, 12 * kMaxBatch * sizeof(double)));
    b.matrices = static_cast<double*>(m);
    BENCH_CUDA_TRY(cudaMalloc(&g, 12 * kMaxBatch * sizeof(double)));
    b.grad_matrices = static_cast<double*>(g);
  }
  if (b.numel < numel) {
    cudaFree(b.in);
    cudaFree(b.out);
    b.in = b.out = nullptr;
    b.numel = 0;
    const size_t image_bytes = static_cast<size_t>(numel) * sizeof(float);
    const size_t label_offset = (image_bytes + 255) / 256 * 256;
    const size_t bytes = label_offset + static_cast<size_t>(numel);
    BENCH_CUDA_TRY(cudaMalloc(&b.in, bytes));
    BENCH_CUDA_TRY(cudaMalloc(&b.out, bytes));
    char* in = static_cast<char*>(b.in);
    BENCH_CUDA_TRY(cudaMemcpy(in, host_image_in(numel), image_bytes, cudaMemcpyHostToDevice));
    BENCH_CUDA_TRY(cudaMemcpy(in + label_offset, host_label_in(numel), static_cast<size_t>(numel),
                              cudaMemcpyHostToDevice));
    BENCH_CUDA_TRY(cudaMemcpy(b.out, b.in, bytes, cudaMemcpyDeviceToDevice));
    b.numel = numel;
    b.label_offset = label_offset;
  }
  return b;
}

void* device_coeff_for(int64_t numel) {
  DeviceBuffers& b = device_buffers();
  if (b.coeff_numel < numel) {
    cudaFree(b.coeff);
    b.coeff = nullptr;
    b.coeff_numel = 0;
    BENCH_CUDA_TRY(cudaMalloc(&b.coeff, static_cast<size_t>(numel) * sizeof(float)));
    b.coeff_numel = numel;
  }
  return b.coeff;
}

// Calls per timed interval (see the top of the file).
constexpr int kLaunchesPerIteration = 8;

void bm_cuda(benchmark::State& state, const Shape& s, Op op) {
  try {
    const int64_t numel = s.numel();
    const DeviceBuffers& buf = device_buffers_for(numel);
    CudaStream stream;
    CudaEvent start, stop;
    const Buffers b{buf.in,
                    buf.out,
                    static_cast<char*>(buf.in) + buf.label_offset,
                    static_cast<char*>(buf.out) + buf.label_offset,
                    is_cubic(op) ? device_coeff_for(coeff_numel(s)) : nullptr,
                    voxaug::Device::CUDA};
    const bool copy = op == Op::CopyImage || op == Op::CopyImageLabel;
    std::vector<double> m;
    if (!copy) {
      m = affine_matrices(s);
      BENCH_CUDA_TRY(cudaMemcpyAsync(buf.matrices, m.data(), m.size() * sizeof(double),
                                     cudaMemcpyHostToDevice, stream.get()));
    }
    ResampleTarget t[2];
    const int k = make_targets(op, s, b, t);
    // The elastic case's control grid: uploaded once, outside the timed loop.
    const std::vector<float> coeff = elastic_coefficients(s);
    void* dcoeff = nullptr;
    if (op == Op::ImageLabelElastic) {
      BENCH_CUDA_TRY(cudaMalloc(&dcoeff, coeff.size() * sizeof(float)));
      BENCH_CUDA_TRY(cudaMemcpyAsync(dcoeff, coeff.data(), coeff.size() * sizeof(float),
                                     cudaMemcpyHostToDevice, stream.get()));
    }
    struct Free {
      void* p;
      ~Free() { cudaFree(p); }
    } free_coeff{dcoeff};
    const voxaug::DeformField field = elastic_field(dcoeff, voxaug::Device::CUDA, s);
    ResampleTarget bwd = t[0];  // backward_input: grad_out = image input, grad_in = image output
    bwd.out = t[0].in;
    // The copy moves as many bytes as the gather reads (and writes): 4 B per voxel for the
    // image, 4 + 1 for image+label, as one contiguous block from the start of the buffers.
    const size_t copy_bytes = static_cast<size_t>(numel * bytes_per_voxel(op) / 2);
    auto launch = [&] {
      switch (op) {
        case Op::CopyImage:
        case Op::CopyImageLabel:
          BENCH_CUDA_TRY(
              cudaMemcpyAsync(buf.out, buf.in, copy_bytes, cudaMemcpyDeviceToDevice, stream.get()));
          break;
        case Op::ImageLabelElastic:
          voxaug::resample_deformed(t, k, buf.matrices, field, kAlignCorners, stream.get());
          break;
        case Op::Cubic:
        case Op::CubicImageLabel:
        case Op::Quintic:  // prefilter + gather: see the top of the file
          voxaug::bspline_prefilter(t[0].in, t[0].coeff, t[0].padding, t[0].pad_value,
                                    kAlignCorners, voxaug::spline_order(t[0].mode), stream.get());
          voxaug::resample(t, k, buf.matrices, kAlignCorners, stream.get());
          break;
        case Op::BackwardInput:
          voxaug::resample_backward_input(bwd, buf.matrices, kAlignCorners, buf.out, stream.get());
          break;
        case Op::BackwardMatrix:
          voxaug::resample_backward_matrix(t, 1, buf.matrices, kAlignCorners, buf.grad_matrices,
                                           stream.get());
          break;
        default: voxaug::resample(t, k, buf.matrices, kAlignCorners, stream.get());
      }
    };
    launch();  // warm-up: module load and first touch stay out of the measurement
    BENCH_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    for (auto _ : state) {
      BENCH_CUDA_TRY(cudaEventRecord(start.get(), stream.get()));
      for (int i = 0; i < kLaunchesPerIteration; ++i) launch();
      BENCH_CUDA_TRY(cudaEventRecord(stop.get(), stream.get()));
      BENCH_CUDA_TRY(cudaEventSynchronize(stop.get()));
      float ms = 0.0f;
      BENCH_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3 / kLaunchesPerIteration);
    }
    set_throughput(state, s, op);
    if (!copy) state.counters["outside"] = outside_fraction(m, s);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_cuda_cases() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    benchmark::AddCustomContext("cuda_device_0", prop.name);
  auto add = [](Op op, const Shape& s) {
    benchmark::RegisterBenchmark((std::string("cuda/") + op_name(op) + "/" + s.str()).c_str(),
                                 bm_cuda, s, op)
        ->Unit(benchmark::kMicrosecond)
        ->UseManualTime();
  };
  add(Op::CopyImageLabel, kBarShape);
  add(Op::ImageLabel, kBarShape);
  add(Op::ImageLabelElastic, kBarShape);
  for (const Shape& s : grid_shapes()) {
    add(Op::CopyImage, s);
    add(Op::CopyImageLabel, s);
    for (Op op : forward_ops()) add(op, s);
  }
  for (Op op : {Op::BackwardInput, Op::BackwardMatrix})
    for (const Shape& s : backward_shapes()) add(op, s);
  for (const Shape& s : backward_shapes()) add(Op::Quintic, s);  // 1 x 64^3, 4 x 96^3
}

#endif  // VOXAUG_WITH_CUDA

}  // namespace

int main(int argc, char** argv) {
#if VOXAUG_WITH_CUDA
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_resample", register_cpu_cases,
                                register_cuda_cases, release_device_buffers);
#else
  return voxaug_bench::run_main(argc, argv, "voxaug_bench_resample", register_cpu_cases, nullptr,
                                nullptr);
#endif
}
