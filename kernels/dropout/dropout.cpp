// voxaug: dropout family -- coarse dropout (validation, CPU backend, routing to CUDA).
#include "voxaug/dropout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/cpu_isa.h"
#include "../common/device.h"
#include "../common/philox_cpu.h"
#include "../common/stream_store.h"
#include "dropout_kernels.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/error.h"

namespace voxaug {
namespace detail {
#if VOXAUG_WITH_CUDA
#define VOXAUG_DROPOUT_CUDA_DECL(T)                                               \
  void coarse_dropout_cuda(const DropoutFunctor<T>& f, int64_t batch, int device, \
                           cudaStream_t stream);
VOXAUG_DROPOUT_CUDA_DECL(double)
VOXAUG_DROPOUT_CUDA_DECL(float)
VOXAUG_DROPOUT_CUDA_DECL(half_t)
VOXAUG_DROPOUT_CUDA_DECL(bfloat16_t)
VOXAUG_DROPOUT_CUDA_DECL(uint8_t)
VOXAUG_DROPOUT_CUDA_DECL(int16_t)
VOXAUG_DROPOUT_CUDA_DECL(int32_t)
VOXAUG_DROPOUT_CUDA_DECL(int64_t)
#undef VOXAUG_DROPOUT_CUDA_DECL
void coarse_shuffle_cuda(const VolumeView& x, const CoarseShuffleParams& p, cudaStream_t stream,
                         uint32_t first_sample);
void swap_patches_cuda(const VolumeView& x, const PatchSwapParams& p, cudaStream_t stream);
#endif
namespace {

// Uniform fill of `cnt` dense elements starting at element e of sample n: the Philox words of a
// tile are made by philox_words (16 blocks per AVX-512 iteration), then converted in a loop that
// vectorises (AVX-512 / AVX2 clones below). Same functions, same order as the functor's per-voxel
// fill_value: the same bits.
template <class T>
VOXAUG_FORCEINLINE void fill_uniform_dense(const DropoutFunctor<T>& f,
                                           const typename DropoutFunctor<T>::State& s, int64_t n,
                                           int64_t e, int64_t cnt, T* dst) {
  constexpr int kTile = 256;
  alignas(64) uint32_t words[kTile + 8];
  const uint32_t g = f.first_sample + static_cast<uint32_t>(n);
  const uint64_t seed = f.p.seed;
  const DropoutFill mode = f.p.fill;
  while (cnt > 0) {
    const int c = cnt < kTile ? static_cast<int>(cnt) : kTile;
    const int64_t first = e >> 2;
    const int64_t blocks = ((e + c + 3) >> 2) - first;  // <= kTile / 4 + 1
    philox_words(seed, static_cast<uint64_t>(first), blocks, g, PhiloxStream::Element, words);
    const uint32_t* wt = words + (e - 4 * first);
    for (int j = 0; j < c; ++j)
      dst[j] = dropout_to_storage<T>(dropout_fill_value(mode, 0.0, s.lo, s.hi, wt[j]));
    e += c;
    dst += c;
    cnt -= c;
  }
}

template <class T>
void fill_uniform_baseline(const DropoutFunctor<T>& f, const typename DropoutFunctor<T>::State& s,
                           int64_t n, int64_t e, int64_t cnt, T* dst) {
  fill_uniform_dense(f, s, n, e, cnt, dst);
}
#if VOXAUG_CPU_CLONES
template <class T>
VOXAUG_TARGET_AVX2 void fill_uniform_avx2(const DropoutFunctor<T>& f,
                                          const typename DropoutFunctor<T>::State& s, int64_t n,
                                          int64_t e, int64_t cnt, T* dst) {
  fill_uniform_dense(f, s, n, e, cnt, dst);
}
template <class T>
VOXAUG_TARGET_AVX512 void fill_uniform_avx512(const DropoutFunctor<T>& f,
                                              const typename DropoutFunctor<T>::State& s, int64_t n,
                                              int64_t e, int64_t cnt, T* dst) {
  fill_uniform_dense(f, s, n, e, cnt, dst);
}
#endif

template <class T>
void fill_uniform(const DropoutFunctor<T>& f, const typename DropoutFunctor<T>::State& s, int64_t n,
                  int64_t e, int64_t cnt, T* dst) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: fill_uniform_avx512(f, s, n, e, cnt, dst); return;
    case CpuIsa::Avx2: fill_uniform_avx2(f, s, n, e, cnt, dst); return;
    default: break;
  }
#endif
  fill_uniform_baseline(f, s, n, e, cnt, dst);
}

// Min / max accumulation type of a storage type: float for float, half, bfloat16, uint8, int16
// (exact), double otherwise.
template <class T>
struct MinMaxAcc {
  using type = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, int32_t> ||
                                      std::is_same_v<T, int64_t>,
                                  double, float>;
};
template <class Acc, class T>
VOXAUG_FORCEINLINE Acc storage_to(T v) {
  if constexpr (std::is_same_v<T, half_t> || std::is_same_v<T, bfloat16_t>)
    return load_as<float>(v);
  else
    return static_cast<Acc>(v);
}

// Min, max and "has NaN" of a dense span: lane-wise selections over kLanes lanes of one type (a
// loop-carried min does not vectorise without fast-math; these do), reduced at the end. 16 lanes
// fill the baseline's xmm registers; the AVX clones take 64 (several vectors per extreme: with
// one, the loop waits on the min / max latency).
template <class Acc, int kLanes, class T>
VOXAUG_FORCEINLINE void span_minmax(const T* __restrict src, int64_t count, Acc* lo, Acc* hi,
                                    bool* has_nan) {
  Acc am[kLanes], bm[kLanes], nn[kLanes];
  for (int j = 0; j < kLanes; ++j)
    am[j] = static_cast<Acc>(HUGE_VAL), bm[j] = static_cast<Acc>(-HUGE_VAL), nn[j] = Acc(0);
  int64_t w = 0;
  for (; w + kLanes <= count; w += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const Acc v = storage_to<Acc>(src[w + j]);
      am[j] = v < am[j] ? v : am[j];
      bm[j] = v > bm[j] ? v : bm[j];
      nn[j] = v != v ? Acc(1) : nn[j];
    }
  for (; w < count; ++w) {
    const Acc v = storage_to<Acc>(src[w]);
    am[0] = v < am[0] ? v : am[0];
    bm[0] = v > bm[0] ? v : bm[0];
    nn[0] = v != v ? Acc(1) : nn[0];
  }
  Acc a = am[0], b = bm[0], bad = nn[0];
  for (int j = 1; j < kLanes; ++j) {
    a = am[j] < a ? am[j] : a;
    b = bm[j] > b ? bm[j] : b;
    bad = nn[j] > bad ? nn[j] : bad;
  }
  *lo = a, *hi = b, *has_nan = bad > Acc(0);
}

template <class Acc, class T>
void span_minmax_baseline(const T* src, int64_t count, Acc* lo, Acc* hi, bool* has_nan) {
  span_minmax<Acc, 16>(src, count, lo, hi, has_nan);
}
#if VOXAUG_CPU_CLONES
template <class Acc, class T>
VOXAUG_TARGET_AVX2 void span_minmax_avx2(const T* src, int64_t count, Acc* lo, Acc* hi,
                                         bool* has_nan) {
  span_minmax<Acc, 64>(src, count, lo, hi, has_nan);
}
template <class Acc, class T>
VOXAUG_TARGET_AVX512 void span_minmax_avx512(const T* src, int64_t count, Acc* lo, Acc* hi,
                                             bool* has_nan) {
  span_minmax<Acc, 64>(src, count, lo, hi, has_nan);
}
#endif

// span_minmax in this CPU's widest clone (exact selections: the same results).
template <class Acc, class T>
void span_minmax_any(const T* src, int64_t count, Acc* lo, Acc* hi, bool* has_nan) {
#if VOXAUG_CPU_CLONES
  switch (cpu_isa()) {
    case CpuIsa::Avx512: span_minmax_avx512<Acc>(src, count, lo, hi, has_nan); return;
    case CpuIsa::Avx2: span_minmax_avx2<Acc>(src, count, lo, hi, has_nan); return;
    default: break;
  }
#endif
  span_minmax_baseline<Acc>(src, count, lo, hi, has_nan);
}

// CPU twin: one task per (sample, channel, d, h) row. A row is the union of the w-intervals of
// the boxes that contain (d, h); since a fill value depends only on (seed, sample, element),
// "copy the row, then fill the intervals" (or "fill the row, then copy the intervals back" for
// dropout_holes = false) gives exactly the per-voxel rule of the functor (which CUDA runs), with
// overlapping boxes writing the same values twice. One Philox block serves four elements.
template <class T>
void dropout_cpu(DropoutFunctor<T> f, int64_t batch) {
  const int64_t C = f.size[0], D = f.size[1], H = f.size[2], W = f.size[3];
  const int64_t rows_per_sample = C * D * H;
  const bool dense = f.in_ix.dense && f.out_ix.dense;
  // ImageRange without a minmax table: the per-sample min / max are reduced first, in the same
  // parallel region (one fork-join per call), NaN propagating as in numpy's min / max.
  const bool reduce = f.p.fill == DropoutFill::ImageRange && f.p.minmax == nullptr;
  // Out of place with a reduction: the reduction pass also copies the rows (one read of the input
  // instead of two), streaming them when the output is large (stream_store.h); the second pass
  // then only writes the holes.
  const bool copy_first = reduce && dense && f.in != f.out;
  const int64_t out_bytes = batch * rows_per_sample * W * static_cast<int64_t>(sizeof(T));
  const bool stream = copy_first && out_bytes >= kStreamOutputBytes;
  std::vector<double> mm(reduce ? static_cast<size_t>(2 * batch) : 0);
  std::vector<char> nan(reduce ? static_cast<size_t>(batch) : 0, 0);
  for (int64_t n = 0; reduce && n < batch; ++n) mm[2 * n] = HUGE_VAL, mm[2 * n + 1] = -HUGE_VAL;
  if (reduce) f.p.minmax = mm.data();
#pragma omp parallel
  {
    if (reduce) {
      std::vector<double> lo(batch, HUGE_VAL), hi(batch, -HUGE_VAL);
      std::vector<char> has_nan(batch, 0);
      using Acc = typename MinMaxAcc<T>::type;  // exact for T: min / max need no rounding
      // Contiguous spans of kSpan elements of one sample (a sample's elements are one dense
      // run when the input is dense; otherwise through the indexer).
      constexpr int64_t kSpan = int64_t(1) << 16;
      const int64_t per_sample = rows_per_sample * W;
      const int64_t spans_per_sample = (per_sample + kSpan - 1) / kSpan;
#pragma omp for schedule(static) nowait
      for (int64_t t = 0; t < batch * spans_per_sample; ++t) {
        const int64_t n = t / spans_per_sample, e0 = (t % spans_per_sample) * kSpan;
        const int64_t len = std::min(kSpan, per_sample - e0);
        Acc a, b;
        bool bad;
        if (f.in_ix.dense) {
          const T* src = f.in + f.in_ix.offset(n, e0);
          span_minmax_any<Acc>(src, len, &a, &b, &bad);
          if (copy_first) {  // out of place: the span's copy, while it is in L2
            T* dst = f.out + f.out_ix.offset(n, e0);
            if (stream)
              stream_copy(dst, src, len * static_cast<int64_t>(sizeof(T)));
            else
              std::memcpy(dst, src, static_cast<size_t>(len) * sizeof(T));
          }
        } else {
          a = static_cast<Acc>(HUGE_VAL), b = static_cast<Acc>(-HUGE_VAL), bad = false;
          for (int64_t e = e0; e < e0 + len; ++e) {
            const Acc v = storage_to<Acc>(f.in[f.in_ix.offset(n, e)]);
            a = v < a ? v : a;
            b = v > b ? v : b;
            bad = bad || v != v;
          }
        }
        lo[n] = a < lo[n] ? a : lo[n];
        hi[n] = b > hi[n] ? b : hi[n];
        has_nan[n] = has_nan[n] | static_cast<char>(bad);
      }
      // The streamed spans reach memory before the barrier below: another thread's holes may
      // lie in this thread's lines.
      if (stream) stream_fence();
#pragma omp critical(voxaug_dropout_minmax)
      for (int64_t n = 0; n < batch; ++n) {
        mm[2 * n] = lo[n] < mm[2 * n] ? lo[n] : mm[2 * n];
        mm[2 * n + 1] = hi[n] > mm[2 * n + 1] ? hi[n] : mm[2 * n + 1];
        nan[n] = nan[n] || has_nan[n];
      }
#pragma omp barrier
#pragma omp single
      for (int64_t n = 0; n < batch; ++n) {
        if (nan[n]) mm[2 * n] = mm[2 * n + 1] = std::nan("");
        mm[2 * n] += 0.0;  // a zero extreme is +0, whichever thread's zero came first (as minmax())
        mm[2 * n + 1] += 0.0;
      }
      // (the implicit barrier of `single` publishes the table to every thread)
    }
    std::vector<std::pair<int64_t, int64_t>> spans;  // w-intervals [a, e) of the row's boxes
#pragma omp for schedule(static)
    for (int64_t r = 0; r < batch * rows_per_sample; ++r) {
      const int64_t n = r / rows_per_sample, rr = r % rows_per_sample;
      const int64_t h = rr % H, d = (rr / H) % D;
      typename DropoutFunctor<T>::State s;
      f.begin_sample(n, s);
      const int64_t e0 = rr * W;
      const T* src = f.in + f.in_ix.offset(n, e0);
      T* dst = f.out + f.out_ix.offset(n, e0);
      auto copy = [&](int64_t a, int64_t b) {
        if (copy_first) return;  // copied by the reduction pass
        if (dense) {
          if (src != dst)
            for (int64_t w = a; w < b; ++w) dst[w] = src[w];
        } else {
          for (int64_t w = a; w < b; ++w)
            f.out[f.out_ix.offset(n, e0 + w)] = f.in[f.in_ix.offset(n, e0 + w)];
        }
      };
      auto fill = [&](int64_t a, int64_t b) {
        if (f.p.fill == DropoutFill::Constant) {
          const T v = f.fill_value(s, 0, U32x4{0, 0, 0, 0});
          for (int64_t w = a; w < b; ++w) (dense ? dst[w] : f.out[f.out_ix.offset(n, e0 + w)]) = v;
          return;
        }
        if (dense) {
          fill_uniform(f, s, n, e0 + a, b - a, dst + a);
          return;
        }
        U32x4 block = f.block(n, e0 + a);
        for (int64_t w = a; w < b; ++w) {
          const int64_t e = e0 + w;
          if ((e & 3) == 0 && w != a) block = f.block(n, e);
          (dense ? dst[w] : f.out[f.out_ix.offset(n, e)]) = f.fill_value(s, e, block);
        }
      };
      if (s.count == 0) {
        copy(0, W);
        continue;
      }
      spans.clear();
      for (int64_t k = 0; k < s.count; ++k) {
        const int64_t* b = s.boxes + 6 * k;
        if (!(d >= b[0] && d < b[3] && h >= b[1] && h < b[4])) continue;
        const int64_t a = b[2] < 0 ? 0 : b[2], e = b[5] > W ? W : b[5];
        if (a < e) spans.emplace_back(a, e);
      }
      if (f.p.dropout_holes) {
        copy(0, W);
        for (const auto& [a, e] : spans) fill(a, e);
      } else {
        // Fill the gaps between the kept intervals and copy the kept ones: never a kept voxel
        // overwritten first (in place must keep it).
        std::sort(spans.begin(), spans.end());
        int64_t w = 0;
        for (const auto& [a, e] : spans) {
          if (a > w) fill(w, a);
          if (e > w) {
            copy(a > w ? a : w, e);
            w = e;
          }
        }
        if (w < W) fill(w, W);
      }
    }
  }
}

template <class T>
void run(const VolumeView& in, const VolumeView& out, const CoarseDropoutParams& p,
         cudaStream_t stream, uint32_t first_sample) {
  DropoutFunctor<T> f;
  f.in = static_cast<const T*>(in.data);
  f.out = static_cast<T*>(out.data);
  f.in_ix = make_indexer(in);
  f.out_ix = make_indexer(out);
  for (int a = 0; a < 4; ++a) f.size[a] = in.shape[a + 1];
  f.p = p;
  f.first_sample = first_sample;
  if (in.device == Device::CPU) {
    dropout_cpu(f, in.shape[0]);
    return;
  }
#if VOXAUG_WITH_CUDA
  coarse_dropout_cuda(f, in.shape[0], in.device_index, stream);
#else
  (void)stream;
  VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
}

// ---- coarse shuffle (CPU) ----

// Stable ascending argsort of n keys (LSD radix: 11, 11 and 10 bits): perm[r] = the index of the
// r-th smallest key, ties in index order (as CUB's radix sort). keys and the scratch k2 / p2
// (n entries each) are clobbered.
void radix_argsort(uint32_t* keys, size_t n, uint32_t* perm, uint32_t* k2, uint32_t* p2) {
  for (size_t i = 0; i < n; ++i) p2[i] = static_cast<uint32_t>(i);
  // (keys, p2) -> (k2, perm) -> (keys, p2) -> (k2, perm): the third pass writes `perm`.
  uint32_t *ka = keys, *pa = p2, *kb = k2, *pb = perm;
  const int shifts[3] = {0, 11, 22};
  std::vector<size_t> start(2049);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = shifts[pass];
    std::fill(start.begin(), start.end(), size_t(0));
    for (size_t i = 0; i < n; ++i) ++start[((ka[i] >> shift) & 2047u) + 1];
    for (int b = 0; b < 2048; ++b) start[b + 1] += start[b];
    for (size_t i = 0; i < n; ++i) {
      const size_t d = start[(ka[i] >> shift) & 2047u]++;
      kb[d] = ka[i];
      pb[d] = pa[i];
    }
    std::swap(ka, kb);
    std::swap(pa, pb);
  }
}

// The permutations do not depend on the data: every (sample, channel, box) one is computed in
// parallel first (keys, radix argsort); then each (sample, channel) applies its boxes in order.
template <class T>
void coarse_shuffle_cpu(const VolumeView& x, const CoarseShuffleParams& p, uint32_t first_sample) {
  const int64_t N = x.shape[0], C = x.shape[1];
  struct Task {
    int64_t n, c, j;
    size_t offset;
    ShuffleBox box;
  };
  std::vector<Task> tasks;
  std::vector<size_t> first_task(static_cast<size_t>(N * C + 1), 0);
  size_t total = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      first_task[static_cast<size_t>(n * C + c)] = tasks.size();
      for (int64_t j = 0; j < p.counts[n]; ++j) {
        const ShuffleBox b = shuffle_box(x, p.boxes + (n * p.max_boxes + j) * 6, n);
        if (b.volume < 2) continue;
        tasks.push_back({n, c, j, total, b});
        total += static_cast<size_t>(b.volume);
      }
    }
  first_task[static_cast<size_t>(N * C)] = tasks.size();
  std::vector<uint32_t> perms(total);
  const int64_t num_tasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel
  {
    std::vector<uint32_t> keys, k2, p2;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < num_tasks; ++t) {
      const Task& tk = tasks[static_cast<size_t>(t)];
      const int64_t V = tk.box.volume;
      k2.resize(static_cast<size_t>(V));
      p2.resize(static_cast<size_t>(V));
      const uint32_t g = first_sample + static_cast<uint32_t>(tk.n);
      const uint64_t seg = static_cast<uint64_t>(tk.j * C + tk.c);
      // shuffle_key's words, block by block: words 4b .. 4b + 3 of block (seg << 40) | b.
      keys.resize(static_cast<size_t>((V + 3) / 4 * 4 + 64));
      philox_words(p.seed, seg << 40, (V + 3) / 4, g, PhiloxStream::Shuffle, keys.data());
      radix_argsort(keys.data(), static_cast<size_t>(V), perms.data() + tk.offset, k2.data(),
                    p2.data());
    }
  }
  T* data = static_cast<T*>(x.data);
#pragma omp parallel
  {
    std::vector<T> dense, tmp;
#pragma omp for schedule(dynamic, 1)
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (size_t t = first_task[static_cast<size_t>(nc)];
           t < first_task[static_cast<size_t>(nc) + 1]; ++t) {
        const Task& tk = tasks[t];
        const ShuffleBox& b = tk.box;
        const uint32_t* perm = perms.data() + tk.offset;
        const int64_t V = b.volume, rows = b.size[0] * b.size[1], W = b.size[2];
        dense.resize(static_cast<size_t>(V));
        tmp.resize(static_cast<size_t>(V));
        // Box rows to a dense buffer, permuted there (within the cache), rows back: no
        // per-voxel index arithmetic (ShuffleBox::offset's divisions are the device's way).
        const T* src = data + b.base + tk.c * b.stride[0];
        for (int64_t r = 0; r < rows; ++r) {
          const T* row = src + (r / b.size[1]) * b.stride[1] + (r % b.size[1]) * b.stride[2];
          T* d = dense.data() + r * W;
          for (int64_t w = 0; w < W; ++w) d[w] = row[w * b.stride[3]];
        }
        for (int64_t i = 0; i < V; ++i) tmp[static_cast<size_t>(i)] = dense[perm[i]];
        T* dst = data + b.base + tk.c * b.stride[0];
        for (int64_t r = 0; r < rows; ++r) {
          T* row = dst + (r / b.size[1]) * b.stride[1] + (r % b.size[1]) * b.stride[2];
          const T* s = tmp.data() + r * W;
          for (int64_t w = 0; w < W; ++w) row[w * b.stride[3]] = s[w];
        }
      }
  }
}

// ---- patch swaps (CPU) ----

// One (sample, channel) task: its swaps in order, each patch's rows through a buffer.
template <class T>
void swap_patches_cpu(const VolumeView& x, const PatchSwapParams& p) {
  const int64_t N = x.shape[0], C = x.shape[1];
  const int64_t P0 = p.patch[0], P1 = p.patch[1], P2 = p.patch[2], rows = P0 * P1;
  T* data = static_cast<T*>(x.data);
  const int64_t* st = x.strides;
#pragma omp parallel
  {
    std::vector<T> a(static_cast<size_t>(rows * P2)), b(static_cast<size_t>(rows * P2));
    auto move = [&](T* base, T* buf, bool to_buf) {
      for (int64_t r = 0; r < rows; ++r) {
        T* row = base + (r / P1) * st[2] + (r % P1) * st[3];
        T* d = buf + r * P2;
        for (int64_t w = 0; w < P2; ++w) {
          if (to_buf)
            d[w] = row[w * st[4]];
          else
            row[w * st[4]] = d[w];
        }
      }
    };
#pragma omp for schedule(dynamic, 1)
    for (int64_t nc = 0; nc < N * C; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      for (int64_t k = 0; k < p.counts[n]; ++k) {
        const int64_t* l = p.locations + (n * p.max_swaps + k) * 6;
        T* first = data + n * st[0] + c * st[1] + l[0] * st[2] + l[1] * st[3] + l[2] * st[4];
        T* second = data + n * st[0] + c * st[1] + l[3] * st[2] + l[4] * st[3] + l[5] * st[4];
        move(first, a.data(), true);
        move(second, b.data(), true);
        move(second, a.data(), false);
        move(first, b.data(), false);
      }
    }
  }
}

}  // namespace
}  // namespace detail

namespace {

// The per-sample counts of a host table: each in [0, max_rows].
void check_host_counts(const char* fn, const int64_t* counts, int64_t n, int64_t max_rows,
                       const char* max_name) {
  VOXAUG_EXPECTS(counts[n] >= 0 && counts[n] <= max_rows,
                 std::string(fn) + ": counts[" + std::to_string(n) +
                     "] = " + std::to_string(counts[n]) + " must be in [0, " + max_name + " = " +
                     std::to_string(max_rows) + "]");
}

// f(T{}) with T the unsigned integer of the dtype's size: ops that only move whole elements.
template <class F>
void by_element_size(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    default: return f(uint64_t{});
  }
}

}  // namespace

void coarse_shuffle_(const VolumeView& x, const CoarseShuffleParams& p, cudaStream_t stream,
                     uint32_t first_sample) {
#if !VOXAUG_WITH_CUDA
  (void)stream;
#endif
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(x.shape[a] >= 0,
                   "coarse_shuffle: image sizes must be >= 0, got " + x.describe());
  VOXAUG_EXPECTS(p.max_boxes >= 0,
                 "coarse_shuffle: max_boxes must be >= 0, got " + std::to_string(p.max_boxes));
  VOXAUG_EXPECTS(first_sample + static_cast<uint64_t>(x.shape[0]) <= (uint64_t(1) << 32),
                 "coarse_shuffle: first_sample + batch must be <= 2^32");
  if (x.numel() == 0) return;
  VOXAUG_EXPECTS(x.data != nullptr, "coarse_shuffle: image must not be null");
  VOXAUG_EXPECTS(p.counts != nullptr && (p.boxes != nullptr || p.max_boxes == 0),
                 "coarse_shuffle: boxes and counts (host tables) must not be null");
  VOXAUG_EXPECTS(x.shape[1] < (int64_t(1) << 20), "coarse_shuffle: at most 2^20 channels");
  for (int64_t n = 0; n < x.shape[0]; ++n) {
    check_host_counts("coarse_shuffle", p.counts, n, p.max_boxes, "max_boxes");
    for (int64_t j = 0; j < p.counts[n]; ++j) {
      const int64_t* row = p.boxes + (n * p.max_boxes + j) * 6;
      int64_t volume = 1;
      for (int a = 0; a < 3; ++a) {
        VOXAUG_EXPECTS(row[a] >= 0 && row[a] <= row[a + 3] && row[a + 3] <= x.shape[a + 2],
                       "coarse_shuffle: box " + std::to_string(j) + " of sample " +
                           std::to_string(n) + " must lie inside the volume " + x.describe());
        volume *= row[a + 3] - row[a];
      }
      VOXAUG_EXPECTS(volume < (int64_t(1) << 32),
                     "coarse_shuffle: a box must hold fewer than 2^32 voxels");
    }
  }
  if (x.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::check_device_pointer(x.data, x.device_index, "image");
    detail::coarse_shuffle_cuda(x, p, stream, first_sample);
    return;
#else
    VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
  }
  by_element_size(x.dtype,
                  [&](auto t) { detail::coarse_shuffle_cpu<decltype(t)>(x, p, first_sample); });
}

namespace {

// The view and the patch size (what the CUDA kernel's clamps rely on).
void check_swap_shape(const VolumeView& x, const PatchSwapParams& p) {
  for (int a = 0; a < 5; ++a)
    VOXAUG_EXPECTS(x.shape[a] >= 0, "swap_patches: image sizes must be >= 0, got " + x.describe());
  VOXAUG_EXPECTS(p.max_swaps >= 0,
                 "swap_patches: max_swaps must be >= 0, got " + std::to_string(p.max_swaps));
  for (int a = 0; a < 3; ++a)
    VOXAUG_EXPECTS(
        p.patch[a] >= 1 && p.patch[a] <= std::max<int64_t>(x.shape[a + 2], 1),
        "swap_patches: the patch size must be in [1, the image size] on every axis, got (" +
            std::to_string(p.patch[0]) + ", " + std::to_string(p.patch[1]) + ", " +
            std::to_string(p.patch[2]) + ") for " + x.describe());
  VOXAUG_EXPECTS(p.counts != nullptr && (p.locations != nullptr || p.max_swaps == 0),
                 "swap_patches: locations and counts must not be null");
}

// The entries of host tables: counts in range, every patch inside the volume.
void check_swap_entries(const VolumeView& x, const PatchSwapParams& p) {
  for (int64_t n = 0; n < x.shape[0]; ++n) {
    check_host_counts("swap_patches", p.counts, n, p.max_swaps, "max_swaps");
    for (int64_t k = 0; k < p.counts[n]; ++k) {
      const int64_t* l = p.locations + (n * p.max_swaps + k) * 6;
      for (int a = 0; a < 6; ++a)
        VOXAUG_EXPECTS(l[a] >= 0 && l[a] + p.patch[a % 3] <= x.shape[a % 3 + 2],
                       "swap_patches: swap " + std::to_string(k) + " of sample " +
                           std::to_string(n) + " puts a patch outside the volume " + x.describe());
    }
  }
}

}  // namespace

void check_swap_tables(const VolumeView& x, const PatchSwapParams& p) {
  check_swap_shape(x, p);
  check_swap_entries(x, p);
}

void swap_patches_(const VolumeView& x, const PatchSwapParams& p, cudaStream_t stream) {
#if !VOXAUG_WITH_CUDA
  (void)stream;
#endif
  check_swap_shape(x, p);
  if (x.numel() == 0) return;
  VOXAUG_EXPECTS(x.data != nullptr, "swap_patches: image must not be null");
  if (x.device == Device::CUDA) {
#if VOXAUG_WITH_CUDA
    detail::check_device_pointer(x.data, x.device_index, "image");
    detail::check_device_pointer(p.counts, x.device_index, "counts");
    if (p.max_swaps > 0) detail::check_device_pointer(p.locations, x.device_index, "locations");
    detail::swap_patches_cuda(x, p, stream);
    return;
#else
    VOXAUG_FAIL("tensors are on CUDA but this voxaug was built without CUDA");
#endif
  }
  check_swap_entries(x, p);  // host tables: checked here
  by_element_size(x.dtype, [&](auto t) { detail::swap_patches_cpu<decltype(t)>(x, p); });
}

void coarse_dropout(const VolumeView& in, const VolumeView& out, const CoarseDropoutParams& p,
                    cudaStream_t stream, uint32_t first_sample) {
  for (int a = 0; a < 5; ++a) {
    VOXAUG_EXPECTS(in.shape[a] >= 0, "image sizes must be >= 0, got " + in.describe());
    VOXAUG_EXPECTS(out.shape[a] == in.shape[a],
                   "out must have the image's shape: " + out.describe() + " vs " + in.describe());
  }
  VOXAUG_EXPECTS(out.dtype == in.dtype, std::string("out must have the image's dtype ") +
                                            dtype_name(in.dtype) + ", got " +
                                            dtype_name(out.dtype));
  VOXAUG_EXPECTS(out.device == in.device && out.device_index == in.device_index,
                 "out must be on the image's device");
  VOXAUG_EXPECTS(p.max_boxes >= 0, "max_boxes must be >= 0, got " + std::to_string(p.max_boxes));
  const int fill = static_cast<int>(p.fill);
  VOXAUG_EXPECTS(
      fill >= 0 && fill <= 2,
      "fill must be Constant (0), Uniform (1) or ImageRange (2), got " + std::to_string(fill));
  if (p.fill == DropoutFill::Constant)
    VOXAUG_EXPECTS(!std::isnan(p.fill_value), "fill_value must not be NaN");
  if (p.fill == DropoutFill::Uniform)
    VOXAUG_EXPECTS(std::isfinite(p.fill_low) && std::isfinite(p.fill_high),
                   "the fill range (low, high) must be finite, got (" + std::to_string(p.fill_low) +
                       ", " + std::to_string(p.fill_high) + ")");
  VOXAUG_EXPECTS(first_sample + static_cast<uint64_t>(in.shape[0]) <= (uint64_t(1) << 32),
                 "first_sample + batch must be <= 2^32");
  if (in.numel() == 0) return;
  VOXAUG_EXPECTS(in.data != nullptr && out.data != nullptr, "image and out must not be null");
  VOXAUG_EXPECTS(p.boxes != nullptr || p.max_boxes == 0, "boxes must not be null");
  VOXAUG_EXPECTS(p.counts != nullptr, "counts must not be null");
  VOXAUG_EXPECTS(
      p.fill != DropoutFill::ImageRange || p.minmax != nullptr || in.device == Device::CPU,
      "fill ImageRange on CUDA needs the per-sample minmax table");
  if (in.device == Device::CPU) {
    for (int64_t n = 0; n < in.shape[0]; ++n)
      VOXAUG_EXPECTS(p.counts[n] >= 0 && p.counts[n] <= p.max_boxes,
                     "counts[" + std::to_string(n) + "] = " + std::to_string(p.counts[n]) +
                         " must be in [0, max_boxes = " + std::to_string(p.max_boxes) + "]");
  }
#if VOXAUG_WITH_CUDA
  if (in.device == Device::CUDA) {
    detail::check_device_pointer(in.data, in.device_index, "image");
    detail::check_device_pointer(out.data, in.device_index, "out");
    detail::check_device_pointer(p.counts, in.device_index, "counts");
    if (p.max_boxes > 0) detail::check_device_pointer(p.boxes, in.device_index, "boxes");
    if (p.fill == DropoutFill::ImageRange)
      detail::check_device_pointer(p.minmax, in.device_index, "minmax");
  }
#endif
  switch (in.dtype) {
    case DType::Float64: detail::run<double>(in, out, p, stream, first_sample); break;
    case DType::Float32: detail::run<float>(in, out, p, stream, first_sample); break;
    case DType::Float16: detail::run<detail::half_t>(in, out, p, stream, first_sample); break;
    case DType::BFloat16: detail::run<detail::bfloat16_t>(in, out, p, stream, first_sample); break;
    case DType::UInt8: detail::run<uint8_t>(in, out, p, stream, first_sample); break;
    case DType::Int16: detail::run<int16_t>(in, out, p, stream, first_sample); break;
    case DType::Int32: detail::run<int32_t>(in, out, p, stream, first_sample); break;
    case DType::Int64: detail::run<int64_t>(in, out, p, stream, first_sample); break;
  }
}

}  // namespace voxaug
