// voxaug: separable filter -- Gaussian taps (host), validation, the CPU backend, routing to
// the CUDA backend (filter.cu).
#include "voxaug/filter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../common/cpu_isa.h"
#include "../common/device.h"
#include "../common/launch_cpu.h"
#include "median_kernels.h"
#include "voxaug/detail/filter.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
void filter_pass_cuda(const FilterPass& p, bool use_double, int device, cudaStream_t stream);
void median_filter_cuda(const MedianBody& f, int64_t batch, int device, cudaStream_t stream);
void filter_check_cuda_pointers(const FilterTaps& taps, const void* workspace, int64_t ws_bytes,
                                int device);
#endif

namespace {

// One element in the compute type, as load_dyn converts it.
template <class Acc, class T>
VOXAUG_FORCEINLINE Acc load_one(T v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>) {
    return static_cast<Acc>(load_as<float>(v));
  } else {
    return static_cast<Acc>(v);
  }
}

// Input row -> compute type: the dtype switch outside the element loop.
template <class Acc, class T>
void load_row_typed(const T* src, int64_t stride, int64_t cnt, Acc* out) {
  if (stride == 1) {
    for (int64_t j = 0; j < cnt; ++j) out[j] = load_one<Acc>(src[j]);
  } else {
    for (int64_t j = 0; j < cnt; ++j) out[j] = load_one<Acc>(src[j * stride]);
  }
}
template <class Acc>
void load_row(const void* base, DType t, int64_t off, int64_t stride, int64_t cnt, Acc* out) {
  switch (t) {
    case DType::Float64:
      load_row_typed(static_cast<const double*>(base) + off, stride, cnt, out);
      return;
    case DType::Float32:
      load_row_typed(static_cast<const float*>(base) + off, stride, cnt, out);
      return;
    case DType::Float16:
      load_row_typed(static_cast<const half_t*>(base) + off, stride, cnt, out);
      return;
    case DType::BFloat16:
      load_row_typed(static_cast<const bfloat16_t*>(base) + off, stride, cnt, out);
      return;
    case DType::UInt8:
      load_row_typed(static_cast<const uint8_t*>(base) + off, stride, cnt, out);
      return;
    case DType::Int16:
      load_row_typed(static_cast<const int16_t*>(base) + off, stride, cnt, out);
      return;
    case DType::Int32:
      load_row_typed(static_cast<const int32_t*>(base) + off, stride, cnt, out);
      return;
    case DType::Int64:
      load_row_typed(static_cast<const int64_t*>(base) + off, stride, cnt, out);
      return;
  }
}
template <class T, class Acc>
void store_row_typed(const Acc* v, int64_t cnt, T* dst, int64_t stride) {
  if (stride == 1) {
    for (int64_t j = 0; j < cnt; ++j) dst[j] = store_as<T>(v[j]);
  } else {
    for (int64_t j = 0; j < cnt; ++j) dst[j * stride] = store_as<T>(v[j]);
  }
}
template <class Acc>
void store_row(const Acc* v, int64_t cnt, void* base, DType t, int64_t off, int64_t stride) {
  switch (t) {
    case DType::Float64: store_row_typed(v, cnt, static_cast<double*>(base) + off, stride); return;
    case DType::Float32: store_row_typed(v, cnt, static_cast<float*>(base) + off, stride); return;
    case DType::Float16:
      for (int64_t j = 0; j < cnt; ++j)
        static_cast<half_t*>(base)[off + j * stride] = store_as<half_t>(static_cast<float>(v[j]));
      return;
    case DType::BFloat16:
      for (int64_t j = 0; j < cnt; ++j)
        static_cast<bfloat16_t*>(base)[off + j * stride] =
            store_as<bfloat16_t>(static_cast<float>(v[j]));
      return;
    default: return;
  }
}

}  // namespace

// Item i of a sample (C-order over C, D, H, W) as the start of a run along W: its channel and
// row, its w, and the run's length (within the row and [i, end), at most max_run).
struct RowRun {
  int64_t c, d, h, w0, cnt;
};
VOXAUG_FORCEINLINE RowRun row_run(int64_t i, int64_t end, int64_t D, int64_t H, int64_t W,
                                  int64_t max_run) {
  const int64_t w0 = i % W, r = i / W;
  return {r / H / D, (r / H) % D, r % H, w0, std::min({W - w0, end - i, max_run})};
}

// The host launcher's hook (launch_cpu.h), found by argument-dependent lookup: items are
// processed in runs along W. Along D and H every tap adds a whole input row to the run
// (vectorised); along W the run's input span is gathered once and each tap adds a shifted
// slice. For every output voxel the terms are the ones filter_point takes, in its order.
template <class Acc>
VOXAUG_FORCEINLINE void cpu_items_body(const FilterForward<Acc>& f,
                                       typename FilterForward<Acc>::State& st, int64_t n,
                                       int64_t begin, int64_t end) {
  const FilterPass& p = f.p;
  const int64_t D = p.shape[2], H = p.shape[3], W = p.shape[4];
  const int64_t* ss = p.src_strides;
  const int64_t* ds = p.dst_strides;
  const int R = st.radius;
  constexpr int64_t kRun = 256;
  constexpr DType native = std::is_same_v<Acc, double> ? DType::Float64 : DType::Float32;
  alignas(64) Acc acc[kRun];
  thread_local std::vector<Acc> buf;
  // Zero padding reads at most the row; reflection reads the run's whole span.
  const int64_t span_max = p.reflect ? kRun + 2 * int64_t(R) : std::min(W, kRun + 2 * int64_t(R));
  if (static_cast<int64_t>(buf.size()) < std::max<int64_t>(kRun, span_max))
    buf.resize(std::max<int64_t>(kRun, span_max));
  Acc* b = buf.data();
  int64_t i = begin;
  while (i < end) {
    const auto [c, d, h, w0, cnt] = row_run(i, end, D, H, W, kRun);
    for (int64_t j = 0; j < cnt; ++j) acc[j] = Acc(0);
    const int64_t src_nc = n * ss[0] + c * ss[1];
    if (p.axis == 2 && p.reflect) {
      // The span w0 - R .. w0 + cnt + R - 1, reflected: the part inside the row in one
      // load, the mirrored ends one element each; tap k adds b[j + k] to output j.
      const int64_t s0 = w0 - R, span = cnt + 2 * int64_t(R);
      const int64_t in0 = std::max<int64_t>(0, s0), in1 = std::min<int64_t>(W, s0 + span);
      const int64_t row_off = src_nc + d * ss[2] + h * ss[3];
      if (in0 < in1)
        load_row(p.src, p.src_dtype, row_off + in0 * ss[4], ss[4], in1 - in0, b + (in0 - s0));
      for (int64_t t = 0; t < span; ++t) {
        const int64_t w = s0 + t;
        if (w >= in0 && w < in1) continue;
        load_row(p.src, p.src_dtype, row_off + reflect_index(w, W) * ss[4], ss[4], 1, b + t);
      }
      for (int k = 0; k <= 2 * R; ++k) {
        const Acc tap = filter_tap<Acc>(p, st.row, k);
        const Acc* x = b + k;
        for (int64_t j = 0; j < cnt; ++j) acc[j] = fadd(acc[j], fmul(tap, x[j]));
      }
    } else if (p.axis == 2) {
      const int64_t lo = std::max<int64_t>(0, w0 - R), hi = std::min<int64_t>(W, w0 + cnt + R);
      load_row(p.src, p.src_dtype, src_nc + d * ss[2] + h * ss[3] + lo * ss[4], ss[4], hi - lo, b);
      for (int k = 0; k <= 2 * R; ++k) {
        const int64_t off = int64_t(k) - R;  // input position = w0 + j + off
        const int64_t j0 = std::max<int64_t>(0, -(w0 + off));
        const int64_t j1 = std::min<int64_t>(cnt, W - w0 - off);
        if (j0 >= j1) continue;
        const Acc tap = filter_tap<Acc>(p, st.row, k);
        const Acc* x = b + (w0 + off - lo);
        for (int64_t j = j0; j < j1; ++j) acc[j] = fadd(acc[j], fmul(tap, x[j]));
      }
    } else {
      const int64_t ia = p.axis == 0 ? d : h, L = p.axis == 0 ? D : H;
      const int64_t k0 = ia < R && !p.reflect ? R - ia : 0;
      const int64_t k1 = ia + R >= L && !p.reflect ? R + (L - 1 - ia) : 2 * int64_t(R);
      // Rows already in the compute type and contiguous are read in place (no copy).
      const bool direct = p.src_dtype == native && ss[4] == 1;
      for (int64_t k = k0; k <= k1; ++k) {
        const int64_t pos = reflect_index(ia - R + k, L);
        const int64_t off =
            src_nc + (p.axis == 0 ? pos * ss[2] + h * ss[3] : d * ss[2] + pos * ss[3]) + w0 * ss[4];
        const Acc* x = b;
        if (direct) {
          x = static_cast<const Acc*>(p.src) + off;
        } else {
          load_row(p.src, p.src_dtype, off, ss[4], cnt, b);
        }
        const Acc tap = filter_tap<Acc>(p, st.row, static_cast<int>(k));
        for (int64_t j = 0; j < cnt; ++j) acc[j] = fadd(acc[j], fmul(tap, x[j]));
      }
    }
    const int64_t dst_off = n * ds[0] + c * ds[1] + d * ds[2] + h * ds[3] + w0 * ds[4];
    if (p.dst_dtype == native && ds[4] == 1) {  // the passes' own buffers, float outputs
      Acc* y = static_cast<Acc*>(p.dst) + dst_off;
      for (int64_t j = 0; j < cnt; ++j) y[j] = acc[j];
    } else {
      store_row(acc, cnt, p.dst, p.dst_dtype, dst_off, ds[4]);
    }
    i += cnt;
  }
}

// cpu_items_body in instruction-set clones (cpu_isa.h): wider vectors, the same bits.
template <class Acc>
VOXAUG_TARGET_BASELINE void cpu_items_baseline(const FilterForward<Acc>& f,
                                               typename FilterForward<Acc>::State& st, int64_t n,
                                               int64_t begin, int64_t end) {
  cpu_items_body(f, st, n, begin, end);
}
#if VOXAUG_CPU_CLONES
template <class Acc>
VOXAUG_TARGET_AVX2 void cpu_items_avx2(const FilterForward<Acc>& f,
                                       typename FilterForward<Acc>::State& st, int64_t n,
                                       int64_t begin, int64_t end) {
  cpu_items_body(f, st, n, begin, end);
}
template <class Acc>
VOXAUG_TARGET_AVX512 void cpu_items_avx512(const FilterForward<Acc>& f,
                                           typename FilterForward<Acc>::State& st, int64_t n,
                                           int64_t begin, int64_t end) {
  cpu_items_body(f, st, n, begin, end);
}
#endif

template <class Acc>
void cpu_items(const FilterForward<Acc>& f, typename FilterForward<Acc>::State& st, int64_t n,
               int64_t begin, int64_t end) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: cpu_items_avx512(f, st, n, begin, end); return;
    case CpuIsa::Avx2: cpu_items_avx2(f, st, n, begin, end); return;
    default: break;
  }
#endif
  cpu_items_baseline(f, st, n, begin, end);
}

// The median filter on the host: items in runs along W. Each column of the run's boxes
// ((2 r_d + 1) x (2 r_h + 1) values at one w, edges replicated) is gathered and sorted once (a
// sorting network for 9 values, else insertion sort), followed by a +inf sentinel; a voxel's median
// is then the
// ((m - 1) / 2)-th value of the merge of its 2 r_w + 1 sorted columns: MedianBody's value (the
// box's lower median; NaN for a box holding a NaN).
template <class T>
void median_rows(const MedianBody& f, int64_t n, int64_t begin, int64_t end) {
  const int64_t D = f.size[1], H = f.size[2], W = f.size[3];
  const int64_t rd = f.radius[0], rh = f.radius[1], rw = f.radius[2];
  const int64_t K = (2 * rd + 1) * (2 * rh + 1), S = K + 1, cols_per_box = 2 * rw + 1;
  const int64_t kth = (K * cols_per_box - 1) / 2;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr int64_t kRun = 256;
  thread_local std::vector<float> colv;      // (run + 2 rw) columns of K sorted values + sentinel
  thread_local std::vector<uint8_t> colnan;  // whether each column holds a NaN
  colv.resize(static_cast<size_t>((kRun + 2 * rw) * S));
  colnan.resize(static_cast<size_t>(kRun + 2 * rw));
  const T* in = static_cast<const T*>(f.in);
  const int64_t* st = f.in_stride;
  int64_t i = begin;
  while (i < end) {
    const auto [c, d, h, w0, cnt] = row_run(i, end, D, H, W, kRun);
    const T* base = in + n * st[0] + c * st[1];
    const int64_t ncols = cnt + 2 * rw;
    for (int64_t j = 0; j < ncols; ++j) {
      const int64_t w = std::min<int64_t>(std::max<int64_t>(w0 - rw + j, 0), W - 1);
      float* col = colv.data() + j * S;
      bool nan = false;
      int64_t k = 0;
      for (int64_t a = d - rd; a <= d + rd; ++a) {
        const T* pa = base + std::min<int64_t>(std::max<int64_t>(a, 0), D - 1) * st[2] + w * st[4];
        for (int64_t b = h - rh; b <= h + rh; ++b) {
          const float v =
              load_as<float>(pa[std::min<int64_t>(std::max<int64_t>(b, 0), H - 1) * st[3]]);
          nan |= v != v;
          col[k++] = v;
        }
      }
      if (K == 9) {  // radius 1 in D and H: a 25-comparator sorting network, branch-free
        static constexpr uint8_t kNet[25][2] = {
            {0, 3}, {1, 7}, {2, 5}, {4, 8}, {0, 7}, {2, 4}, {3, 8}, {5, 6}, {0, 2},
            {1, 3}, {4, 5}, {7, 8}, {1, 4}, {3, 6}, {5, 7}, {0, 1}, {2, 4}, {3, 5},
            {6, 8}, {2, 3}, {4, 5}, {6, 7}, {1, 2}, {3, 4}, {5, 6}};
        for (const auto& e : kNet) {
          const float x = col[e[0]], y = col[e[1]];
          col[e[0]] = std::min(x, y);
          col[e[1]] = std::max(x, y);
        }
      } else {
        for (int64_t q = 1; q < K; ++q) {  // insertion sort: a few dozen values
          const float v = col[q];
          int64_t p = q;
          while (p > 0 && v < col[p - 1]) {
            col[p] = col[p - 1];
            --p;
          }
          col[p] = v;
        }
      }
      col[K] = kInf;
      colnan[static_cast<size_t>(j)] = nan;
    }
    float* out = f.out + n * f.items() + i;
    int64_t head[2 * 171 + 1];
    for (int64_t j = 0; j < cnt; ++j) {
      bool nan = false;
      for (int64_t q = 0; q < cols_per_box; ++q) nan |= colnan[static_cast<size_t>(j + q)] != 0;
      if (nan) {
        out[j] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      const float* cols = colv.data() + j * S;
      float v = 0.0f;
      if (cols_per_box == 3) {  // radius 0 or 1 along W: three heads in registers
        const float *A = cols, *B = cols + S, *C = cols + 2 * S;
        int64_t ia = 0, ib = 0, ic = 0;
        for (int64_t step = 0; step <= kth; ++step) {
          const float a = A[ia], b = B[ib], cc = C[ic];
          const bool ab = a <= b;
          const float mab = ab ? a : b;
          const bool pc = cc < mab;
          v = pc ? cc : mab;
          if (v == kInf) break;  // every remaining value is +inf
          ia += !pc & ab;
          ib += !pc & !ab;
          ic += pc;
        }
      } else {
        for (int64_t q = 0; q < cols_per_box; ++q) head[q] = 0;
        for (int64_t step = 0; step <= kth; ++step) {
          int64_t best = 0;
          v = cols[head[0]];
          for (int64_t q = 1; q < cols_per_box; ++q) {
            const float x = cols[q * S + head[q]];
            if (x < v) {
              v = x;
              best = q;
            }
          }
          if (v == kInf) break;
          ++head[best];
        }
      }
      out[j] = v + 0.0f;  // a zero median as +0 (ties of -0 and +0 order either way), as the device
    }
    i += cnt;
  }
}

void cpu_items(const MedianBody& f, MedianBody::State&, int64_t n, int64_t begin, int64_t end) {
  switch (f.in_t) {
    case DType::Float64: return median_rows<double>(f, n, begin, end);
    case DType::Float32: return median_rows<float>(f, n, begin, end);
    case DType::Float16: return median_rows<half_t>(f, n, begin, end);
    case DType::BFloat16: return median_rows<bfloat16_t>(f, n, begin, end);
    case DType::UInt8: return median_rows<uint8_t>(f, n, begin, end);
    case DType::Int16: return median_rows<int16_t>(f, n, begin, end);
    case DType::Int32: return median_rows<int32_t>(f, n, begin, end);
    case DType::Int64: return median_rows<int64_t>(f, n, begin, end);
  }
}

}  // namespace detail

// ---------------- Gaussian taps ----------------
namespace {

void check_gaussian_args(double sigma, double truncated) {
  VOXAUG_EXPECTS(std::isfinite(sigma), "sigma must be finite, got " + std::to_string(sigma));
  VOXAUG_EXPECTS(std::isfinite(truncated) && truncated > 0.0,
                 "truncated must be positive and finite, got " + std::to_string(truncated));
}

constexpr int64_t kMaxRadius = int64_t(1) << 20;
constexpr double kSampledIdentitySigma = 1e-15;  // scipy's gaussian_filter skips sigma <= this

// int(tail), the radius, once tail is known to stay within kMaxRadius.
int64_t bounded_radius(double tail, double sigma, double truncated, const char* name) {
  VOXAUG_EXPECTS(tail <= static_cast<double>(kMaxRadius),
                 std::string("sigma * ") + name + " is too large: the kernel radius would exceed " +
                     std::to_string(kMaxRadius) + " (sigma " + std::to_string(sigma) + ", " + name +
                     " " + std::to_string(truncated) + ")");
  return static_cast<int64_t>(tail);
}

// numpy's pairwise summation (np.add.reduce on a contiguous float64 array): blocks of up to
// 128 values summed with 8 partial accumulators, larger arrays split in halves (at a multiple
// of 8), so the sum matches numpy's to the bit.
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double r = 0.0;  // numpy starts from -0.0 for the reduction identity; 0.0 + x == x here
    for (int64_t i = 0; i < n; ++i) r += a[i];
    return n == 0 ? 0.0 : r;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

}  // namespace

int64_t gaussian_radius(double sigma, double truncated) {
  check_gaussian_args(sigma, truncated);
  const double s = static_cast<double>(static_cast<float>(sigma));  // MONAI's float32 sigma
  return bounded_radius(std::max(s * truncated, 0.5) + 0.5, sigma, truncated, "truncated");
}

void gaussian_kernel_1d(double sigma, double truncated, double* taps) {
  const int64_t R = gaussian_radius(sigma, truncated);
  VOXAUG_EXPECTS(taps != nullptr, "taps must not be null");
  // float32 throughout, as torch evaluates MONAI's expression on a float32 sigma; erf is
  // evaluated in float64 and rounded (torch's float32 erf is within an ulp of it).
  const float s = std::fabs(static_cast<float>(sigma));
  const float t = 0.70710678f / s;  // +inf for sigma == 0: taps (0, 1, 0)
  for (int64_t x = -R; x <= R; ++x) {
    const float xf = static_cast<float>(x);
    const float hi = static_cast<float>(std::erf(static_cast<double>(t * (xf + 0.5f))));
    const float lo = static_cast<float>(std::erf(static_cast<double>(t * (xf - 0.5f))));
    const float w = 0.5f * (hi - lo);
    taps[x + R] = static_cast<double>(w > 0.0f ? w : 0.0f);
  }
}

int64_t sampled_gaussian_radius(double sigma, double truncate) {
  VOXAUG_EXPECTS(std::isfinite(sigma) && sigma >= 0.0,
                 "sigma must be >= 0 and finite, got " + std::to_string(sigma));
  VOXAUG_EXPECTS(std::isfinite(truncate) && truncate > 0.0,
                 "truncate must be positive and finite, got " + std::to_string(truncate));
  return bounded_radius(truncate * sigma + 0.5, sigma, truncate, "truncate");
}

void sampled_gaussian_kernel_1d(double sigma, double truncate, double* taps) {
  const int64_t R = sampled_gaussian_radius(sigma, truncate);
  VOXAUG_EXPECTS(sigma > kSampledIdentitySigma,
                 "sigma must be > 1e-15 (scipy skips the axis), got " + std::to_string(sigma));
  VOXAUG_EXPECTS(taps != nullptr, "taps must not be null");
  // scipy's _gaussian_kernel1d: exp(-0.5 / sigma^2 * x^2), then divided by the sum (numpy's
  // pairwise sum of the 2R + 1 values; a plain left-to-right sum differs in the last bits).
  const double c = -0.5 / (sigma * sigma);
  for (int64_t x = -R; x <= R; ++x) taps[x + R] = std::exp(c * static_cast<double>(x * x));
  const double sum = pairwise_sum(taps, 2 * R + 1);
  for (int64_t k = 0; k <= 2 * R; ++k) taps[k] /= sum;
}

int64_t gaussian_table_width(const double* sigma, int64_t batch, double truncated,
                             GaussianTaps kind) {
  VOXAUG_EXPECTS(batch >= 0, "batch must be >= 0, got " + std::to_string(batch));
  VOXAUG_EXPECTS(sigma != nullptr || batch == 0, "sigma must not be null");
  VOXAUG_EXPECTS(kind == GaussianTaps::Erf || kind == GaussianTaps::Sampled,
                 "kind must be GaussianTaps::Erf or GaussianTaps::Sampled");
  check_gaussian_args(0.0, truncated);
  int64_t rmax = 0;
  for (int64_t i = 0; i < batch * 3; ++i) {
    VOXAUG_EXPECTS(std::isfinite(sigma[i]), "sigma[" + std::to_string(i / 3) + "][" +
                                                std::to_string(i % 3) + "] must be finite, got " +
                                                std::to_string(sigma[i]));
    if (kind == GaussianTaps::Sampled) {
      VOXAUG_EXPECTS(sigma[i] >= 0.0, "sigma[" + std::to_string(i / 3) + "][" +
                                          std::to_string(i % 3) +
                                          "] must be >= 0 for scipy's sampled kernel, got " +
                                          std::to_string(sigma[i]));
      if (sigma[i] > kSampledIdentitySigma)
        rmax = std::max(rmax, sampled_gaussian_radius(sigma[i], truncated));
    } else if (sigma[i] != 0.0) {
      rmax = std::max(rmax, gaussian_radius(sigma[i], truncated));
    }
  }
  return 2 * rmax + 2;
}

int gaussian_table(const double* sigma, int64_t batch, double truncated, int64_t width,
                   double* table, GaussianTaps kind) {
  const int64_t needed = gaussian_table_width(sigma, batch, truncated, kind);
  VOXAUG_EXPECTS(width >= needed, "width must be at least " + std::to_string(needed) +
                                      " for these sigmas, got " + std::to_string(width));
  VOXAUG_EXPECTS(table != nullptr || batch == 0, "table must not be null");
  int axes = 0;
  for (int64_t n = 0; n < batch; ++n) {
    for (int a = 0; a < 3; ++a) {
      double* row = table + (n * 3 + a) * width;
      std::fill(row, row + width, 0.0);
      const double s = sigma[n * 3 + a];
      const bool sampled = kind == GaussianTaps::Sampled;
      if (sampled ? s <= kSampledIdentitySigma : s == 0.0) {
        // MONAI's (0, 1, 0), or the axis scipy skips: the identity
        row[0] = 0.0;
        row[1] = 1.0;
        continue;
      }
      if (sampled) {
        row[0] = static_cast<double>(sampled_gaussian_radius(s, truncated));
        sampled_gaussian_kernel_1d(s, truncated, row + 1);
      } else {
        row[0] = static_cast<double>(gaussian_radius(s, truncated));
        gaussian_kernel_1d(s, truncated, row + 1);
      }
      axes |= 1 << a;
    }
  }
  return axes;
}

// ---------------- the filter ----------------
namespace {

struct Plan {
  bool use_double = false;
  int axes_list[3] = {0, 0, 0};
  int passes = 0;
  bool identity = false;       // no axis filtered: one converting pass
  bool out_is_buffer = false;  // out holds an intermediate (3 passes)
  int ws_buffers = 0;
  int64_t buffer_bytes = 0;  // one dense intermediate
};

Plan make_plan(const VolumeView& in, const VolumeView& out, int axes) {
  VOXAUG_EXPECTS(axes >= 0 && axes <= 7,
                 "taps.axes must be a mask of spatial axes in [0, 7], got " + std::to_string(axes));
  Plan pl;
  pl.use_double = in.dtype == DType::Float64 || out.dtype == DType::Float64;
  for (int a = 0; a < 3; ++a)
    if (axes & (1 << a)) pl.axes_list[pl.passes++] = a;
  if (pl.passes == 0) {
    pl.identity = true;
    pl.passes = 1;
    pl.axes_list[0] = 2;
  }
  const DType acc = pl.use_double ? DType::Float64 : DType::Float32;
  pl.out_is_buffer = pl.passes == 3 && out.dtype == acc;
  pl.ws_buffers = pl.passes <= 1 ? 0 : (pl.passes == 2 || pl.out_is_buffer ? 1 : 2);
  pl.buffer_bytes = in.numel() * dtype_size(acc);
  return pl;
}

void validate(const VolumeView& in, const VolumeView& out) {
  for (int k = 0; k < 5; ++k) {
    VOXAUG_EXPECTS(in.shape[k] >= 0, "in: sizes must be >= 0, got " + in.describe());
    VOXAUG_EXPECTS(out.shape[k] == in.shape[k],
                   "out must have the shape of in: " + in.describe() + " -> " + out.describe());
  }
  VOXAUG_EXPECTS(
      in.device == out.device && (in.device == Device::CPU || in.device_index == out.device_index),
      "in and out must be on one device: " + in.describe() + " -> " + out.describe());
  const int di = static_cast<int>(in.dtype), dout = static_cast<int>(out.dtype);
  VOXAUG_EXPECTS(di >= 0 && di <= static_cast<int>(DType::Int64), "in has an unknown dtype");
  VOXAUG_EXPECTS(dout >= 0 && is_floating(out.dtype),
                 std::string("out must be float64, float32, float16 or bfloat16, got ") +
                     dtype_name(out.dtype));
  VOXAUG_EXPECTS(in.numel() == 0 || (in.data != nullptr && out.data != nullptr),
                 "in and out must not be null");
  VOXAUG_EXPECTS(in.numel() == 0 || in.data != out.data,
                 "out must not overlap in (the filter does not run in place)");
}

}  // namespace

int64_t separable_filter_workspace_bytes(const VolumeView& in, const VolumeView& out, int axes) {
  validate(in, out);
  const Plan pl = make_plan(in, out, axes);
  return pl.ws_buffers * pl.buffer_bytes;
}

void separable_filter(const VolumeView& in, const VolumeView& out, const FilterTaps& taps,
                      void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
  validate(in, out);
  const Plan pl = make_plan(in, out, taps.axes);
  const int64_t need = pl.ws_buffers * pl.buffer_bytes;
  VOXAUG_EXPECTS(workspace_bytes >= need,
                 "workspace_bytes must be at least " + std::to_string(need) +
                     " (separable_filter_workspace_bytes), got " + std::to_string(workspace_bytes));
  VOXAUG_EXPECTS(workspace != nullptr || need == 0, "workspace must not be null");
  VOXAUG_EXPECTS(taps.border == FilterBorder::Zeros || taps.border == FilterBorder::Reflect,
                 "taps.border must be FilterBorder::Zeros or FilterBorder::Reflect, got " +
                     std::to_string(static_cast<int>(taps.border)));
  if (!pl.identity) {
    VOXAUG_EXPECTS(taps.table != nullptr || in.numel() == 0, "taps.table must not be null");
    VOXAUG_EXPECTS(taps.width >= 2, "taps.width must be >= 2, got " + std::to_string(taps.width));
  }
  if (in.numel() == 0) return;

  if (in.device == Device::CPU && !pl.identity) {
    // Host tables can be checked here; device rows are clamped by filter_radius instead.
    const int64_t rmax = (taps.width - 2) / 2;
    for (int64_t n = 0; n < in.shape[0]; ++n)
      for (int a = 0; a < 3; ++a) {
        const double r = taps.table[(n * 3 + a) * taps.width];
        VOXAUG_EXPECTS(r >= 0 && r <= static_cast<double>(rmax) && r == std::floor(r),
                       "taps.table row (" + std::to_string(n) + ", " + std::to_string(a) +
                           ") has radius " + std::to_string(r) + "; expected an integer in [0, " +
                           std::to_string(rmax) + "] for width " + std::to_string(taps.width));
      }
  }
#if VOXAUG_WITH_CUDA
  if (in.device == Device::CUDA)
    detail::filter_check_cuda_pointers(pl.identity ? FilterTaps{} : taps, workspace, need,
                                       in.device_index);
#else
  VOXAUG_EXPECTS(in.device == Device::CPU, "this voxaug build has no CUDA backend");
#endif

  // The buffers between passes: the last pass writes `out`.
  const DType acc = pl.use_double ? DType::Float64 : DType::Float32;
  char* ws = static_cast<char*>(workspace);
  auto dense = [&](char* p) {
    return contiguous_view(p, acc, in.device, in.shape[0], in.shape[1], in.shape[2], in.shape[3],
                           in.shape[4], in.device_index);
  };
  VolumeView bufs[2];
  if (pl.passes == 2) {
    bufs[0] = dense(ws);
  } else if (pl.passes == 3) {
    bufs[0] = pl.out_is_buffer ? out : dense(ws);
    bufs[1] = pl.out_is_buffer ? dense(ws) : dense(ws + pl.buffer_bytes);
  }
  for (int j = 0; j < pl.passes; ++j) {
    const VolumeView& src = j == 0 ? in : bufs[j - 1];
    const VolumeView& dst = j == pl.passes - 1 ? out : bufs[j];
    detail::FilterPass p;
    p.src = src.data;
    p.dst = dst.data;
    p.src_dtype = src.dtype;
    p.dst_dtype = dst.dtype;
    for (int k = 0; k < 5; ++k) {
      p.shape[k] = in.shape[k];
      p.src_strides[k] = src.strides[k];
      p.dst_strides[k] = dst.strides[k];
    }
    p.axis = pl.axes_list[j];
    p.table = taps.table;
    p.width = taps.width;
    p.identity = pl.identity;
    p.reflect = taps.border == FilterBorder::Reflect;
    if (in.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
      detail::filter_pass_cuda(p, pl.use_double, in.device_index, stream);
#endif
    } else if (pl.use_double) {
      detail::CpuLauncher::launch(detail::FilterForward<double>{p}, in.shape[0], stream);
    } else {
      detail::CpuLauncher::launch(detail::FilterForward<float>{p}, in.shape[0], stream);
    }
  }
}

void median_filter(const VolumeView& in, const VolumeView& out, const int64_t radius[3],
                   cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;
#endif
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(in.shape[a] >= 0,
                   "median_filter: image sizes must be >= 0, got " + in.describe());
    VOXAUG_EXPECTS(out.shape[a] == in.shape[a], "median_filter: out must have the image's shape " +
                                                    in.describe() + ", got " + out.describe());
  }
  VOXAUG_EXPECTS(out.dtype == DType::Float32,
                 std::string("median_filter: out must be float32, got ") + dtype_name(out.dtype));
  VOXAUG_EXPECTS(out.device == in.device && out.device_index == in.device_index,
                 "median_filter: out must be on the image's device");
  int64_t window = 1;
  for (int a = 0; a < 3; ++a) {
    VOXAUG_EXPECTS(radius[a] >= 0 && radius[a] <= 171,
                   "median_filter: radius must be in [0, 171] on every axis, got " +
                       std::to_string(radius[a]) + " on axis " + std::to_string(a));
    window *= 2 * radius[a] + 1;
  }
  VOXAUG_EXPECTS(window <= detail::kMaxMedianWindow,
                 "median_filter: the box (2 r + 1 per axis) may hold at most " +
                     std::to_string(detail::kMaxMedianWindow) + " voxels, got " +
                     std::to_string(window));
  if (in.numel() == 0) return;
  VOXAUG_EXPECTS(in.data != nullptr && out.data != nullptr,
                 "median_filter: image and out must not be null");
  const int64_t dense[5] = {out.shape[1] * out.shape[2] * out.shape[3] * out.shape[4],
                            out.shape[2] * out.shape[3] * out.shape[4], out.shape[3] * out.shape[4],
                            out.shape[4], 1};
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(out.strides[a] == dense[a] || out.shape[a] == 1,
                   "median_filter: out must be dense C-order, got " + out.describe());
  detail::MedianBody f{};
  f.in = in.data;
  f.in_t = in.dtype;
  for (int a = 0; a < 5; ++a) f.in_stride[a] = in.strides[a];
  f.out = static_cast<float*>(out.data);
  for (int a = 0; a < 4; ++a) f.size[a] = in.shape[a + 1];
  for (int a = 0; a < 3; ++a) f.radius[a] = radius[a];
  if (in.device == Device::CPU) {
    detail::CpuLauncher::launch(f, in.shape[0], nullptr);
    return;
  }
#if VOXAUG_WITH_CUDA
  detail::check_device_pointer(in.data, in.device_index, "image");
  detail::check_device_pointer(out.data, out.device_index, "out");
  detail::median_filter_cuda(f, in.shape[0], in.device_index, stream);
#else
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

}  // namespace voxaug
