// voxaug: the host execution of the pointwise chain. Same math as the device (the op_*
// functions of detail/pointwise.h, Philox, Box-Muller), but run step-major over small tiles
// so that each step is one tight loop the compiler vectorises, in AVX-512 / AVX2 / baseline
// clones picked at run time. Every element still sees the same sequence of IEEE operations
// as on the device, so the results are bit-identical (no FMA contraction: -ffp-contract=off).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../common/cpu_isa.h"
#include "../common/philox_cpu.h"
#include "../common/stream_store.h"
#include "voxaug/detail/pointwise.h"

namespace voxaug::detail {

constexpr int kCpuTile = 256;  // elements; a multiple of 4 (one Philox block = 4 elements)
constexpr int64_t kMaxBiasTableW = 4096;  // longer rows: the per-element evaluation

// Per-call host scratch: the w-axis basis table of each bias field step; the scaled control
// points of each histogram shift step (for the sample they were built for).
template <class Acc>
struct CpuScratch {
  std::vector<Acc> bias_w[kMaxPointwiseSteps];
  std::vector<Acc> hist[kMaxPointwiseSteps];
  int64_t hist_sample[kMaxPointwiseSteps];
  CpuScratch() {
    for (auto& h : hist_sample) h = -1;
  }
};

// A histogram shift step over one tile: op_histogram_shift run point-major (each point one
// vectorised pass over the tile). The points, and each segment's slope and intercept, are
// computed once per sample by the same helpers (so the same bits as the device's per-voxel
// evaluation); the tile then only selects (m, b) by segment.
template <bool Deriv, class Acc>
VOXAUG_FORCEINLINE void cpu_histogram_shift(const Resolved<Acc>& r, std::vector<Acc>& pts,
                                            int64_t& built_for, uint32_t n, int cnt, Acc* x,
                                            Acc* d) {
  const int32_t K = r.count;
  if (K < 2 || r.p1 == Acc(0)) return;
  if (built_for != int64_t(n)) {  // xs[0..K), fs[0..K), ms[0..K-1), bs[0..K-1)
    pts.resize(4 * static_cast<size_t>(K));
    Acc* xs = pts.data();
    Acc* fs = xs + K;
    for (int32_t k = 0; k < K; ++k) {
      xs[k] = hist_reference_point(k, K, r.step, r.p0, r.p1);
      fs[k] = hist_floating_point(r.table[k], r.p0, r.p1);
    }
    for (int32_t k = 0; k + 1 < K; ++k)
      hist_slope_intercept(xs[k], fs[k], xs[k + 1], fs[k + 1], xs[2 * K + k], xs[3 * K + k]);
    built_for = n;
  }
  const Acc* xs = pts.data();
  const Acc* fs = xs + K;
  const Acc* ms = fs + K;
  const Acc* bs = ms + K;
  alignas(64) Acc m[kCpuTile], b[kCpuTile];
  for (int j = 0; j < cnt; ++j) {
    m[j] = ms[0];
    b[j] = bs[0];
  }
  for (int32_t k = 1; k < K - 1; ++k) {
    const Acc xk = xs[k], mk = ms[k], bk = bs[k];
    int32_t any = 0;  // an int reduction: GCC does not vectorise a bool one
    for (int j = 0; j < cnt; ++j) {
      const bool in = xk < x[j];
      any += static_cast<int32_t>(in);
      m[j] = fsel(in, mk, m[j]);
      b[j] = fsel(in, bk, b[j]);
    }
    if (any == 0) break;  // sorted points: no element is above a later one either
  }
  for (int j = 0; j < cnt; ++j)
    hist_segment_value<Deriv>(x[j], d[j], m[j], b[j], xs[0], fs[0], xs[K - 1], fs[K - 1]);
}

// b^y over one tile into out: fpow_nonneg for every element. float32 runs the common-case form
// (pow_nonneg_f32<false>: no special-case selects, about 1.5x faster) and recomputes the tile
// with the full function when any element needs a special case (subnormal, inf, NaN or
// negative b, results beyond float32): the same operations per common element, so the same
// bits as the device's per-element fpow_nonneg (tests/cpp/test_intensity.cpp checks).
template <class Acc>
VOXAUG_FORCEINLINE void cpu_pow_tile(int cnt, const Acc* b, Acc y, Acc* out) {
  if constexpr (std::is_same_v<Acc, float>) {
    int32_t special = 0;  // an int reduction: GCC does not vectorise a bool one
    for (int j = 0; j < cnt; ++j) out[j] = pow_nonneg_f32<false>(b[j], y, special);
    if (special == 0) return;
  }
  for (int j = 0; j < cnt; ++j) out[j] = fpow_nonneg(b[j], y);
}

// An adjust-contrast step over one tile, forward: op_adjust_contrast split into one loop per
// stage (base, power, scale back). Every element sees exactly the operations of the fused
// per-element function (the device's), but each loop is short, so the out-of-order core
// overlaps many iterations of the long power dependency chain instead of one or two (about 2x
// faster on Zen 4 when the power was exp(y log b) in two stages).
// tests/cpp/test_intensity.cpp (DeviceItemBodyOnHostEqualsTiledCpuPath) checks the bits.
template <bool Deriv, class Acc>
VOXAUG_FORCEINLINE void cpu_adjust_contrast(uint32_t flags, const Resolved<Acc>& r, int cnt, Acc* x,
                                            Acc* d) {
  if (Deriv) {
    for (int j = 0; j < cnt; ++j) op_adjust_contrast<Deriv>(flags, r, x[j], d[j]);
    return;
  }
  const bool inv = flags & kInvert;
  alignas(64) Acc b[kCpuTile], t[kCpuTile];
  for (int j = 0; j < cnt; ++j) b[j] = fdiv(fsub(fsel(inv, -x[j], x[j]), r.p0), r.p2);
  cpu_pow_tile(cnt, b, r.p3, t);
  for (int j = 0; j < cnt; ++j) {
    const Acc y = fadd(fmul(t[j], r.p1), r.p0);
    x[j] = fsel(inv, -y, y);
  }
}

// A gamma step (TorchIO's sign(x) |x|^gamma) over one tile, forward: op_gamma in stages.
template <bool Deriv, class Acc>
VOXAUG_FORCEINLINE void cpu_gamma(const Resolved<Acc>& r, int cnt, Acc* x, Acc* d) {
  if (Deriv) {
    for (int j = 0; j < cnt; ++j) op_gamma<Deriv>(r, x[j], d[j]);
    return;
  }
  alignas(64) Acc ax[kCpuTile], p[kCpuTile];
  for (int j = 0; j < cnt; ++j) ax[j] = fsel(x[j] < Acc(0), -x[j], x[j]);
  cpu_pow_tile(cnt, ax, r.p0, p);
  for (int j = 0; j < cnt; ++j) x[j] = fsel(x[j] < Acc(0), -p[j], p[j]);
}

// A bias field step over one tile, vectorised across the tile: the basis values are
// bias_basis(bias_coordinate(...)) exactly as in bias_field_value (w from a per-call table,
// h and d once per row), and the sums run in the same order, so every element gets the same
// bits as on the device.
template <bool Deriv, class Acc>
VOXAUG_FORCEINLINE void cpu_bias_field(const ChainParams& p, const KStep& s, std::vector<Acc>& wt,
                                       uint32_t n, int64_t t0, int cnt, Acc* x, Acc* d) {
  const int64_t D = p.dims[0], H = p.dims[1], W = p.dims[2];
  const int nb = s.degree + 1;
  const bool mono = s.flags & kMonomial;
  if (W > kMaxBiasTableW) {
    for (int j = 0; j < cnt; ++j) {
      const Acc f = bias_field_value<Acc>(s, p.dims, n, t0 + j);
      x[j] = fmul(x[j], f);
      if (Deriv) d[j] = fmul(d[j], f);
    }
    return;
  }
  Acc b[kMaxBiasFieldDegree + 1];
  if (wt.empty()) {
    wt.resize(static_cast<size_t>(nb * W));
    for (int64_t k = 0; k < W; ++k) {
      bias_basis(bias_coordinate<Acc>(k, W, mono), s.degree, mono, b);
      for (int q = 0; q < nb; ++q) wt[q * W + k] = b[q];
    }
  }
  alignas(64) Acc pw[kMaxBiasFieldDegree + 1][kCpuTile];
  alignas(64) Acc ph[kMaxBiasFieldDegree + 1][kCpuTile];
  alignas(64) Acc pd[kMaxBiasFieldDegree + 1][kCpuTile];
  const int64_t hw = H * W, r = t0 % (D * hw);
  int64_t i = r / hw, jh = (r - i * hw) / W, k = r - i * hw - jh * W;
  for (int j = 0; j < cnt;) {
    Acc bh[kMaxBiasFieldDegree + 1];
    bias_basis(bias_coordinate<Acc>(i, D, mono), s.degree, mono, b);
    bias_basis(bias_coordinate<Acc>(jh, H, mono), s.degree, mono, bh);
    const int len = static_cast<int>(std::min<int64_t>(cnt - j, W - k));
    for (int q = 0; q < nb; ++q)
      for (int t = 0; t < len; ++t) {
        pw[q][j + t] = wt[q * W + k + t];
        ph[q][j + t] = bh[q];
        pd[q][j + t] = b[q];
      }
    j += len;
    k = 0;
    if (++jh == H) {
      jh = 0;
      if (++i == D) i = 0;
    }
  }
  const float* c = s.coeffs + int64_t(n) * s.ncoeff;
  alignas(64) Acc sum[kCpuTile], sa[kCpuTile], sb[kCpuTile];
  for (int t = 0; t < cnt; ++t) sum[t] = Acc(0);
  int idx = 0;
  for (int a = 0; a <= s.degree; ++a) {
    for (int t = 0; t < cnt; ++t) sa[t] = Acc(0);
    for (int bb = 0; bb <= s.degree - a; ++bb) {
      for (int t = 0; t < cnt; ++t) sb[t] = Acc(0);
      for (int q = 0; q <= s.degree - a - bb; ++q) {
        const Acc cv = static_cast<Acc>(c[idx++]);
        for (int t = 0; t < cnt; ++t) sb[t] = fadd(sb[t], fmul(cv, pw[q][t]));
      }
      for (int t = 0; t < cnt; ++t) sa[t] = fadd(sa[t], fmul(sb[t], ph[bb][t]));
    }
    for (int t = 0; t < cnt; ++t) sum[t] = fadd(sum[t], fmul(sa[t], pd[a][t]));
  }
  for (int t = 0; t < cnt; ++t) {
    const Acc f = fexp(sum[t]);
    x[t] = fmul(x[t], f);
    if (Deriv) d[t] = fmul(d[t], f);
  }
}

template <bool Deriv, class Acc>
VOXAUG_FORCEINLINE void cpu_apply_steps(const ChainParams& p, ChainState<Acc>& st, uint32_t n,
                                        int64_t t0, int cnt, Acc* x, Acc* d,
                                        CpuScratch<Acc>& scratch) {
  for (int k = 0; k < p.num_steps; ++k) {
    const KStep& s = p.steps[k];
    const Resolved<Acc> r = st.r[k];
    if (!r.active) continue;
    switch (static_cast<PointwiseOp>(s.op)) {
      case PointwiseOp::ScaleIntensityRange:
        for (int j = 0; j < cnt; ++j) op_scale_intensity_range<Deriv>(s.flags, r, x[j], d[j]);
        break;
      case PointwiseOp::ShiftIntensity:
        for (int j = 0; j < cnt; ++j) op_shift_intensity<Deriv>(r, x[j], d[j]);
        break;
      case PointwiseOp::ScaleIntensity:
        for (int j = 0; j < cnt; ++j) op_scale_intensity<Deriv>(r, x[j], d[j]);
        break;
      case PointwiseOp::RescaleIntensity:
        for (int j = 0; j < cnt; ++j) op_rescale_intensity<Deriv>(s.flags, r, x[j], d[j]);
        break;
      case PointwiseOp::GaussianNoise: {
        // Normals of the Philox blocks that cover [t0, t0 + cnt) (philox_cpu.h).
        alignas(64) uint32_t w[kCpuTile + 8];
        alignas(64) float z[kCpuTile + 8];
        const int64_t first_block = t0 >> 2;
        const int blocks = static_cast<int>(((t0 + cnt + 3) >> 2) - first_block);
        const uint32_t g = p.first_sample + n;
        philox_normals(s.seed, static_cast<uint64_t>(first_block), blocks, g,
                       PhiloxStream::Element, w, z);
        const float* zt = z + (t0 - 4 * first_block);
        for (int j = 0; j < cnt; ++j) op_gaussian_noise(r, x[j], zt[j]);
        break;
      }
      case PointwiseOp::RicianNoise: {
        alignas(64) uint32_t w[kCpuTile + 8];
        alignas(64) float z1[kCpuTile + 8];
        alignas(64) float z2[kCpuTile + 8];
        const int64_t first_block = t0 >> 2;
        const int blocks = static_cast<int>(((t0 + cnt + 3) >> 2) - first_block);
        const uint32_t g = p.first_sample + n;
        philox_normals(s.seed, static_cast<uint64_t>(first_block), blocks, g,
                       PhiloxStream::Element, w, z1);
        philox_normals(s.seed, static_cast<uint64_t>(first_block), blocks, g,
                       PhiloxStream::ElementAux, w, z2);
        const int64_t off = t0 - 4 * first_block;
        for (int j = 0; j < cnt; ++j) op_rician_noise(r, x[j], z1[off + j], z2[off + j]);
        break;
      }
      case PointwiseOp::BiasField:
        cpu_bias_field<Deriv, Acc>(p, s, scratch.bias_w[k], n, t0, cnt, x, d);
        break;
      case PointwiseOp::AdjustContrast:
        cpu_adjust_contrast<Deriv, Acc>(s.flags, r, cnt, x, d);
        break;
      case PointwiseOp::Gamma: cpu_gamma<Deriv, Acc>(r, cnt, x, d); break;
      case PointwiseOp::HistogramShift:
        cpu_histogram_shift<Deriv, Acc>(r, scratch.hist[k], scratch.hist_sample[k], n, cnt, x, d);
        break;
      case PointwiseOp::StdShiftIntensity:
        for (int j = 0; j < cnt; ++j) op_std_shift<Deriv>(s.flags, r, x[j], d[j]);
        break;
      case PointwiseOp::ScaleIntensityFixedMean:
        for (int j = 0; j < cnt; ++j) op_scale_fixed_mean<Deriv>(s.flags, r, x[j], d[j]);
        break;
    }
  }
}

// Elements [e_begin, e_end) of sample n, tile by tile.
template <bool Deriv, class Acc, class Load, class Finish>
VOXAUG_FORCEINLINE void cpu_chain_range(const ChainParams& p, ChainState<Acc>& st, int64_t n,
                                        int64_t e_begin, int64_t e_end, int64_t spatial,
                                        Load&& load, Finish&& finish) {
  alignas(64) Acc x[kCpuTile];
  alignas(64) Acc d[kCpuTile];
  CpuScratch<Acc> scratch;
  for (int64_t t0 = e_begin; t0 < e_end;) {
    int64_t t1 = std::min<int64_t>(t0 + kCpuTile, e_end);
    if (p.any_channel_wise) {  // a tile stays inside one channel
      const int64_t c = t0 / spatial;
      t1 = std::min<int64_t>(t1, (c + 1) * spatial);
      if (c != st.channel) {
        for (int k = 0; k < p.num_steps; ++k)
          if (p.steps[k].flags & kChannelWise)
            st.r[k] = resolve_step<Acc>(p.steps[k], static_cast<uint32_t>(n),
                                        p.first_sample + static_cast<uint32_t>(n), c, p.channels);
        st.channel = c;
      }
    }
    const int cnt = static_cast<int>(t1 - t0);
    load(t0, cnt, x);
    if (Deriv)
      for (int j = 0; j < cnt; ++j) d[j] = Acc(1);
    cpu_apply_steps<Deriv, Acc>(p, st, static_cast<uint32_t>(n), t0, cnt, x, d, scratch);
    finish(t0, cnt, x, d);
    t0 = t1;
  }
}

template <class TIn, class TOut, class Acc>
VOXAUG_FORCEINLINE void cpu_forward_items(const ChainForward<TIn, TOut, Acc>& f,
                                          ChainState<Acc>& st, int64_t n, int64_t item_begin,
                                          int64_t item_end) {
  const int64_t e_begin = item_begin * 4, e_end = std::min(item_end * 4, f.sample_numel);
  const bool dense = f.in_ix.dense && f.out_ix.dense;
  const TIn* in = f.in + n * f.in_ix.batch_stride;
  TOut* out = f.out + n * f.out_ix.batch_stride;
  cpu_chain_range<false, Acc>(
      f.params, st, n, e_begin, e_end, f.spatial,
      [&](int64_t t0, int cnt, Acc* x) {
        if (dense) {
          for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(in[t0 + j]);
        } else {
          for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(f.in[f.in_ix.offset(n, t0 + j)]);
        }
      },
      [&](int64_t t0, int cnt, const Acc* x, const Acc*) {
        if (dense && f.stream) {  // converted in L1, then streamed (no read for ownership)
          alignas(64) TOut o[kCpuTile];
          for (int j = 0; j < cnt; ++j) o[j] = store_as<TOut>(x[j]);
          stream_copy(out + t0, o, int64_t(cnt) * int64_t(sizeof(TOut)));
        } else if (dense) {
          for (int j = 0; j < cnt; ++j) out[t0 + j] = store_as<TOut>(x[j]);
        } else {
          for (int j = 0; j < cnt; ++j) f.out[f.out_ix.offset(n, t0 + j)] = store_as<TOut>(x[j]);
        }
      });
  if (f.stream) stream_fence();
}

template <class T, class Acc>
VOXAUG_FORCEINLINE void cpu_backward_items(const ChainBackward<T, Acc>& f, ChainState<Acc>& st,
                                           int64_t n, int64_t item_begin, int64_t item_end) {
  const int64_t e_begin = item_begin * 4, e_end = std::min(item_end * 4, f.sample_numel);
  cpu_chain_range<true, Acc>(
      f.params, st, n, e_begin, e_end, f.spatial,
      [&](int64_t t0, int cnt, Acc* x) {
        for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(f.in[f.in_ix.offset(n, t0 + j)]);
      },
      [&](int64_t t0, int cnt, const Acc*, const Acc* d) {
        for (int j = 0; j < cnt; ++j) {
          const Acc g = load_as<Acc>(f.grad_out[f.go_ix.offset(n, t0 + j)]);
          f.grad_in[f.gi_ix.offset(n, t0 + j)] = store_as<T>(fmul(g, d[j]));
        }
      });
}

// Each clone inlines the whole tile loop, so the loops are compiled for its instruction set.
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_BASELINE void forward_items_baseline(const ChainForward<TIn, TOut, Acc>& f,
                                                   ChainState<Acc>& st, int64_t n, int64_t b,
                                                   int64_t e) {
  cpu_forward_items(f, st, n, b, e);
}
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_AVX2 void forward_items_avx2(const ChainForward<TIn, TOut, Acc>& f,
                                           ChainState<Acc>& st, int64_t n, int64_t b, int64_t e) {
  cpu_forward_items(f, st, n, b, e);
}
template <class TIn, class TOut, class Acc>
VOXAUG_TARGET_AVX512 void forward_items_avx512(const ChainForward<TIn, TOut, Acc>& f,
                                               ChainState<Acc>& st, int64_t n, int64_t b,
                                               int64_t e) {
  cpu_forward_items(f, st, n, b, e);
}
template <class T, class Acc>
VOXAUG_TARGET_BASELINE void backward_items_baseline(const ChainBackward<T, Acc>& f,
                                                    ChainState<Acc>& st, int64_t n, int64_t b,
                                                    int64_t e) {
  cpu_backward_items(f, st, n, b, e);
}
template <class T, class Acc>
VOXAUG_TARGET_AVX2 void backward_items_avx2(const ChainBackward<T, Acc>& f, ChainState<Acc>& st,
                                            int64_t n, int64_t b, int64_t e) {
  cpu_backward_items(f, st, n, b, e);
}
template <class T, class Acc>
VOXAUG_TARGET_AVX512 void backward_items_avx512(const ChainBackward<T, Acc>& f, ChainState<Acc>& st,
                                                int64_t n, int64_t b, int64_t e) {
  cpu_backward_items(f, st, n, b, e);
}

// The host launcher's hook for a range of items (launch_cpu.h): found by argument-dependent
// lookup for the chain functors.
template <class TIn, class TOut, class Acc>
void cpu_items(const ChainForward<TIn, TOut, Acc>& f, ChainState<Acc>& st, int64_t n, int64_t b,
               int64_t e) {
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return forward_items_avx512(f, st, n, b, e);
    case CpuIsa::Avx2: return forward_items_avx2(f, st, n, b, e);
    case CpuIsa::Baseline: return forward_items_baseline(f, st, n, b, e);
  }
}
template <class T, class Acc>
void cpu_items(const ChainBackward<T, Acc>& f, ChainState<Acc>& st, int64_t n, int64_t b,
               int64_t e) {
  switch (cpu_isa()) {
    case CpuIsa::Avx512: return backward_items_avx512(f, st, n, b, e);
    case CpuIsa::Avx2: return backward_items_avx2(f, st, n, b, e);
    case CpuIsa::Baseline: return backward_items_baseline(f, st, n, b, e);
  }
}

}  // namespace voxaug::detail
