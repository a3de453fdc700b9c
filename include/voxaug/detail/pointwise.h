// voxaug: the per-element math of the fused pointwise chain (intensity + noise).
// Compiled by g++ for the OpenMP backend and by nvcc for the CUDA backend; both call
// exactly this code, so their results are bit-identical.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/detail/convert.h"
#include "voxaug/detail/fmath.h"
#include "voxaug/detail/indexer.h"
#include "voxaug/detail/philox.h"
#include "voxaug/intensity.h"

namespace voxaug::detail {

enum StepFlags : uint32_t {
  kHasB = 1u << 0,        // SIR: rescale to [b_min, b_max]
  kClipLo = 1u << 1,      // SIR: clamp below at clip_lo
  kClipHi = 1u << 2,      // SIR: clamp above at clip_hi
  kDegenerate = 1u << 3,  // SIR: a_min == a_max -> x - a_min (+ b_min), as MONAI
  kAddB = 1u << 4,        // SIR degenerate with b_min given
  kRandom = 1u << 5,      // Shift/Scale: value ~ U(lo, hi)
  kChannelWise = 1u << 6,
  kSampleStd = 1u << 7,  // Noise: std ~ U(0, std)
  kPerSample = 1u << 8,  // Shift/Scale: value from per_sample[n]
  // Rescale reuses kHasB (minv given) and kAddB (minv and maxv given), kChannelWise.
};

// A step as it travels to the kernel (by value, in the functor).
struct KStep {
  int32_t op;
  uint32_t flags;
  double p0, p1, p2, p3;  // SIR: a_min, a_max - a_min, b_max - b_min, b_min
                          // Shift: offset; Scale: factor; Noise: mean, std
  double lo, hi;          // SIR: clip bounds; random Shift/Scale: draw range
  double prob;
  uint64_t seed;
  const float* per_sample;
  const double* stats;  // Rescale: (min, max) pairs
};

struct ChainParams {
  int32_t num_steps;
  uint32_t first_sample;  // global index of local sample 0 in the random streams
  bool any_channel_wise;
  bool any_noise;
  int64_t channels;  // C: index of per-(sample, channel) statistics
  KStep steps[kMaxPointwiseSteps];
};

// A step's parameters resolved for one sample (and channel, for channel-wise draws).
template <class Acc>
struct Resolved {
  Acc p0, p1, p2, p3, lo, hi;
  bool active;
};

// n: local sample (indexes per_sample arrays); g: its global index in the random streams.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE Resolved<Acc> resolve_step(const KStep& s, uint32_t n, uint32_t g,
                                                        int64_t c, int64_t channels) {
  Resolved<Acc> r{};
  const U32x4 sample_draw = philox_block(s.seed, 0, g, PhiloxStream::Sample);
  r.active = s.prob >= 1.0 || static_cast<double>(uniform01(sample_draw.x)) < s.prob;
  r.lo = static_cast<Acc>(s.lo);
  r.hi = static_cast<Acc>(s.hi);
  switch (static_cast<PointwiseOp>(s.op)) {
    case PointwiseOp::ScaleIntensityRange:
      r.p0 = static_cast<Acc>(s.p0);
      r.p1 = static_cast<Acc>(s.p1);
      r.p2 = static_cast<Acc>(s.p2);
      r.p3 = static_cast<Acc>(s.p3);
      break;
    case PointwiseOp::ShiftIntensity:
    case PointwiseOp::ScaleIntensity: {
      Acc v;
      if (s.flags & kPerSample) {
        v = static_cast<Acc>(s.per_sample[n]);
      } else if (s.flags & kRandom) {
        const uint32_t bits =
            (s.flags & kChannelWise)
                ? philox_block(s.seed, static_cast<uint64_t>(c), g, PhiloxStream::Channel).x
                : sample_draw.y;
        v = static_cast<Acc>(
            uniform_range(bits, static_cast<float>(s.lo), static_cast<float>(s.hi)));
      } else {
        v = static_cast<Acc>(s.p0);
      }
      // Scale multiplies by (1 + factor); a fixed factor has it precomputed in double.
      if (static_cast<PointwiseOp>(s.op) == PointwiseOp::ScaleIntensity) {
        r.p0 = (s.flags & (kPerSample | kRandom)) ? fadd(static_cast<Acc>(1), v)
                                                  : static_cast<Acc>(1.0 + s.p0);
      } else {
        r.p0 = v;
      }
      break;
    }
    case PointwiseOp::RescaleIntensity: {
      const int64_t seg = (s.flags & kChannelWise) ? int64_t(n) * channels + c : int64_t(n);
      const double mn = s.stats[2 * seg], mx = s.stats[2 * seg + 1];
      // MONAI computes min / max in the data dtype: round them to it before use.
      r.p0 = static_cast<Acc>(mn);
      r.p1 = fsub(static_cast<Acc>(mx), static_cast<Acc>(mn));
      r.p2 = static_cast<Acc>(s.p1 - s.p0);  // maxv - minv
      r.p3 = static_cast<Acc>(s.p0);         // minv
      break;
    }
    case PointwiseOp::GaussianNoise: {
      r.p0 = static_cast<Acc>(s.p0);
      r.p1 = (s.flags & kSampleStd)
                 ? static_cast<Acc>(fmul(static_cast<float>(s.p1), uniform01(sample_draw.z)))
                 : static_cast<Acc>(s.p1);
      break;
    }
  }
  return r;
}

// The per-op math on one value, written branch-free (selects) so the host's tiled loops
// vectorise. `d` carries d(value)/d(input) when Deriv is true.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_scale_intensity_range(uint32_t flags, const Resolved<Acc>& r,
                                                           Acc& x, Acc& d) {
  x = fsub(x, r.p0);
  if (flags & kDegenerate) {  // a_min == a_max: MONAI returns x - a_min (+ b_min)
    if (flags & kAddB) x = fadd(x, r.p3);
    return;
  }
  x = fdiv(x, r.p1);
  if (Deriv) d = fdiv(d, r.p1);
  if (flags & kHasB) {
    x = fadd(fmul(x, r.p2), r.p3);
    if (Deriv) d = fmul(d, r.p2);
  }
  // torch.clamp semantics: NaN stays NaN; the gradient passes where lo <= x <= hi.
  if (flags & kClipLo) {
    const bool below = x < r.lo;
    x = below ? r.lo : x;
    if (Deriv) d = below ? Acc(0) : d;
  }
  if (flags & kClipHi) {
    const bool above = x > r.hi;
    x = above ? r.hi : x;
    if (Deriv) d = above ? Acc(0) : d;
  }
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_shift_intensity(const Resolved<Acc>& r, Acc& x, Acc&) {
  x = fadd(x, r.p0);
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_scale_intensity(const Resolved<Acc>& r, Acc& x, Acc& d) {
  x = fmul(x, r.p0);
  if (Deriv) d = fmul(d, r.p0);
}

template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_rescale_intensity(uint32_t flags, const Resolved<Acc>& r,
                                                       Acc& x, Acc& d) {
  if (r.p1 == Acc(0)) {  // max == min: MONAI returns x * minv, or x without minv
    if (flags & kHasB) {
      x = fmul(x, r.p3);
      if (Deriv) d = fmul(d, r.p3);
    }
    return;
  }
  x = fdiv(fsub(x, r.p0), r.p1);
  if (Deriv) d = fdiv(d, r.p1);
  if (flags & kAddB) {  // both minv and maxv given
    x = fadd(fmul(x, r.p2), r.p3);
    if (Deriv) d = fmul(d, r.p2);
  }
}

// MONAI draws noise = mean + std * z and adds it.
template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void op_gaussian_noise(const Resolved<Acc>& r, Acc& x, float z) {
  x = fadd(x, fadd(r.p0, fmul(r.p1, static_cast<Acc>(z))));
}

// One step on one value. `z` is this element's standard normal (noise steps only).
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void apply_step(const KStep& s, const Resolved<Acc>& r, Acc& x, Acc& d,
                                             float z) {
  if (!r.active) return;
  switch (static_cast<PointwiseOp>(s.op)) {
    case PointwiseOp::ScaleIntensityRange:
      op_scale_intensity_range<Deriv>(s.flags, r, x, d);
      return;
    case PointwiseOp::ShiftIntensity: op_shift_intensity<Deriv>(r, x, d); return;
    case PointwiseOp::ScaleIntensity: op_scale_intensity<Deriv>(r, x, d); return;
    case PointwiseOp::RescaleIntensity: op_rescale_intensity<Deriv>(s.flags, r, x, d); return;
    case PointwiseOp::GaussianNoise: op_gaussian_noise(r, x, z); return;
  }
}

// Per-thread, per-sample state: resolved steps plus the channel they were resolved for.
template <class Acc>
struct ChainState {
  Resolved<Acc> r[kMaxPointwiseSteps];
  int64_t channel;
  bool vec_ok;
};

template <class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void chain_begin_sample(const ChainParams& p, uint32_t n,
                                                     ChainState<Acc>& st) {
  for (int k = 0; k < p.num_steps; ++k)
    st.r[k] = resolve_step<Acc>(p.steps[k], n, p.first_sample + n, 0, p.channels);
  st.channel = 0;
}

// Runs the chain over `cnt` (<= 4) consecutive elements e0.. of sample n. Element e uses
// normal number (e mod 4) of Philox block e / 4; e0 is a multiple of 4.
template <bool Deriv, class Acc>
VOXAUG_HD VOXAUG_FORCEINLINE void chain_apply4(const ChainParams& p, ChainState<Acc>& st,
                                               uint32_t n, int64_t e0, int64_t spatial, int cnt,
                                               Acc x[4], Acc d[4]) {
  float z[kMaxPointwiseSteps][4];
  if (p.any_noise) {
    for (int k = 0; k < p.num_steps; ++k) {
      if (static_cast<PointwiseOp>(p.steps[k].op) == PointwiseOp::GaussianNoise && st.r[k].active)
        normal4(p.steps[k].seed, static_cast<uint64_t>(e0 >> 2), p.first_sample + n, z[k]);
    }
  }
  for (int j = 0; j < cnt; ++j) {
    if (p.any_channel_wise) {
      const int64_t c = (e0 + j) / spatial;
      if (c != st.channel) {
        for (int k = 0; k < p.num_steps; ++k)
          if (p.steps[k].flags & kChannelWise)
            st.r[k] = resolve_step<Acc>(p.steps[k], n, p.first_sample + n, c, p.channels);
        st.channel = c;
      }
    }
    for (int k = 0; k < p.num_steps; ++k)
      apply_step<Deriv, Acc>(p.steps[k], st.r[k], x[j], d[j], z[k][j]);
  }
}

template <class T>
struct alignas(sizeof(T) * 4 <= 16 ? sizeof(T) * 4 : 16) Vec4 {
  T v[4];
};

template <class T>
VOXAUG_HD VOXAUG_FORCEINLINE bool aligned4(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) % alignof(Vec4<T>)) == 0;
}

// Forward: out = chain(in). One item = four consecutive elements of one sample. The item
// body below is what the CUDA launcher runs; the host runs the same math in the tiled,
// vectorised loops of kernels/intensity/chain_cpu.h.
template <class TIn, class TOut, class Acc>
struct ChainForward {
  const TIn* in;
  TOut* out;
  Indexer in_ix, out_ix;
  int64_t sample_numel, spatial;
  ChainParams params;

  using State = ChainState<Acc>;
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const { return (sample_numel + 3) / 4; }

  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    chain_begin_sample(params, static_cast<uint32_t>(n), st);
    st.vec_ok = in_ix.dense && out_ix.dense && (sample_numel % 4 == 0) &&
                aligned4(in + n * in_ix.batch_stride) && aligned4(out + n * out_ix.batch_stride);
  }

  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    const int64_t e0 = item * 4;
    const int cnt = static_cast<int>(sample_numel - e0 < 4 ? sample_numel - e0 : 4);
    Acc x[4], d[4] = {Acc(1), Acc(1), Acc(1), Acc(1)};
#if VOXAUG_DEVICE_PASS
    if (st.vec_ok) {  // dense, aligned sample: one vector load per item
      const Vec4<TIn> v = *reinterpret_cast<const Vec4<TIn>*>(in + n * in_ix.batch_stride + e0);
      for (int j = 0; j < 4; ++j) x[j] = load_as<Acc>(v.v[j]);
    } else
#endif
    {
      for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(in[in_ix.offset(n, e0 + j)]);
    }
    chain_apply4<false, Acc>(params, st, static_cast<uint32_t>(n), e0, spatial, cnt, x, d);
#if VOXAUG_DEVICE_PASS
    if (st.vec_ok) {
      Vec4<TOut> v;
      for (int j = 0; j < 4; ++j) v.v[j] = store_as<TOut>(x[j]);
      *reinterpret_cast<Vec4<TOut>*>(out + n * out_ix.batch_stride + e0) = v;
    } else
#endif
    {
      for (int j = 0; j < cnt; ++j) out[out_ix.offset(n, e0 + j)] = store_as<TOut>(x[j]);
    }
  }
};

// Backward: grad_in = grad_out * d chain / d in.
template <class T, class Acc>
struct ChainBackward {
  const T* grad_out;
  const T* in;
  T* grad_in;
  Indexer go_ix, in_ix, gi_ix;
  int64_t sample_numel, spatial;
  ChainParams params;

  using State = ChainState<Acc>;
  VOXAUG_HD VOXAUG_FORCEINLINE int64_t items() const { return (sample_numel + 3) / 4; }
  VOXAUG_HD VOXAUG_FORCEINLINE void begin_sample(int64_t n, State& st) const {
    chain_begin_sample(params, static_cast<uint32_t>(n), st);
    st.vec_ok = false;
  }
  VOXAUG_HD VOXAUG_FORCEINLINE void operator()(State& st, int64_t n, int64_t item) const {
    const int64_t e0 = item * 4;
    const int cnt = static_cast<int>(sample_numel - e0 < 4 ? sample_numel - e0 : 4);
    Acc x[4], d[4] = {Acc(1), Acc(1), Acc(1), Acc(1)};
    for (int j = 0; j < cnt; ++j) x[j] = load_as<Acc>(in[in_ix.offset(n, e0 + j)]);
    chain_apply4<true, Acc>(params, st, static_cast<uint32_t>(n), e0, spatial, cnt, x, d);
    for (int j = 0; j < cnt; ++j) {
      const Acc g = load_as<Acc>(grad_out[go_ix.offset(n, e0 + j)]);
      grad_in[gi_ix.offset(n, e0 + j)] = store_as<T>(fmul(g, d[j]));
    }
  }
};

}  // namespace voxaug::detail
