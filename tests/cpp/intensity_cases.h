// Shared test material for the pointwise chain: awkward shapes, chains, host buffers,
// and the float64 naive reference (written independently of detail/pointwise.h: it
// re-derives the random draws from raw Philox bits with double-precision math).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "voxaug/detail/philox.h"
#include "voxaug/intensity.h"
#include "voxaug/types.h"

namespace voxaug_test {

struct Shape {
  int64_t n, c, d, h, w;
  int64_t numel() const { return n * c * d * h * w; }
  int64_t sample() const { return c * d * h * w; }
  std::string str() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(d) + "x" +
           std::to_string(h) + "x" + std::to_string(w);
  }
};

inline std::vector<Shape> awkward_shapes() {
  return {{1, 1, 1, 1, 1}, {1, 1, 1, 1, 3}, {3, 2, 5, 7, 3}, {2, 1, 17, 1, 9},
          {1, 3, 4, 4, 4}, {8, 1, 6, 5, 4}, {2, 4, 1, 1, 2}, {5, 1, 3, 11, 13}};
}

inline std::vector<double> random_values(int64_t count, uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

using voxaug::PointwiseOp;
using voxaug::PointwiseStep;

// Named chains covering every op, gate and flag.
struct NamedChain {
  std::string name;
  std::vector<PointwiseStep> steps;
};

inline std::vector<NamedChain> reference_chains() {
  const double bmin = 0.0, bmax = 1.0, neg = -2.0;
  std::vector<NamedChain> c;
  c.push_back({"sir_clip", {PointwiseStep::scale_intensity_range(-50, 120, &bmin, &bmax, true)}});
  c.push_back({"sir_noclip", {PointwiseStep::scale_intensity_range(-50, 120, &neg, &bmax, false)}});
  c.push_back({"sir_no_b", {PointwiseStep::scale_intensity_range(10, 30, nullptr, nullptr, true)}});
  c.push_back(
      {"sir_clip_lo_only", {PointwiseStep::scale_intensity_range(-50, 120, &bmin, nullptr, true)}});
  c.push_back({"sir_degenerate", {PointwiseStep::scale_intensity_range(5, 5, &bmin, &bmax, true)}});
  c.push_back({"shift_fixed", {PointwiseStep::shift_intensity(3.25)}});
  c.push_back({"scale_fixed", {PointwiseStep::scale_intensity(-0.3)}});
  c.push_back({"rand_shift", {PointwiseStep::rand_shift_intensity(-10, 10, 1.0, 11)}});
  c.push_back({"rand_shift_gated", {PointwiseStep::rand_shift_intensity(-10, 10, 0.5, 12)}});
  c.push_back(
      {"rand_shift_channel", {PointwiseStep::rand_shift_intensity(-10, 10, 0.7, 13, true)}});
  c.push_back({"rand_scale", {PointwiseStep::rand_scale_intensity(-0.5, 0.5, 0.8, 14)}});
  c.push_back(
      {"rand_scale_channel", {PointwiseStep::rand_scale_intensity(-0.5, 0.5, 1.0, 15, true)}});
  c.push_back({"noise", {PointwiseStep::gaussian_noise(0.0, 2.0, false, 1.0, 16)}});
  c.push_back({"noise_sample_std", {PointwiseStep::gaussian_noise(0.5, 3.0, true, 0.6, 17)}});
  c.push_back({"btcv_chain",
               {PointwiseStep::scale_intensity_range(-175, 250, &bmin, &bmax, true),
                PointwiseStep::rand_shift_intensity(-0.1, 0.1, 0.5, 18),
                PointwiseStep::gaussian_noise(0.0, 0.1, true, 0.9, 19)}});
  c.push_back({"long_chain",
               {PointwiseStep::rand_scale_intensity(-0.2, 0.2, 1.0, 20),
                PointwiseStep::gaussian_noise(0.0, 5.0, false, 1.0, 21),
                PointwiseStep::scale_intensity_range(-60, 160, &bmin, &bmax, true),
                PointwiseStep::rand_shift_intensity(-0.3, 0.3, 1.0, 22, true),
                PointwiseStep::scale_intensity(0.5), PointwiseStep::shift_intensity(-1.0),
                PointwiseStep::gaussian_noise(0.1, 0.2, true, 1.0, 23)}});
  c.push_back({"rician", {PointwiseStep::rician_noise(0.0, 4.0, false, false, 1.0, 24)}});
  c.push_back(
      {"rician_sample_std_gated", {PointwiseStep::rician_noise(1.5, 6.0, true, false, 0.6, 25)}});
  c.push_back(
      {"rician_channel_wise", {PointwiseStep::rician_noise(-0.5, 3.0, true, true, 1.0, 26)}});
  c.push_back({"gamma_fixed", {PointwiseStep::gamma(1.3)}});
  c.push_back({"rand_gamma", {PointwiseStep::rand_gamma(-0.3, 0.3, 0.8, 27)}});
  c.push_back({"gamma_chain",
               {PointwiseStep::scale_intensity_range(-200, 300, &bmin, &bmax, true),
                PointwiseStep::rand_gamma(-0.5, 0.5, 1.0, 28),
                PointwiseStep::rician_noise(0.0, 0.05, true, false, 1.0, 29)}});
  return c;
}

inline bool is_differentiable(const std::vector<PointwiseStep>& steps) {
  for (const auto& s : steps)
    if (s.op == PointwiseOp::RicianNoise) return false;
  return true;
}

inline double u01(uint32_t r) {
  return static_cast<double>(r >> 8) / 16777216.0;
}

// The standard normal that element e of global sample g gets from a noise step's seed.
inline double reference_normal(uint64_t seed, int64_t e, uint32_t g) {
  using namespace voxaug::detail;
  const U32x4 r = philox_block(seed, static_cast<uint64_t>(e / 4), g, PhiloxStream::Element);
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
  const int pair = static_cast<int>(e % 4) / 2;
  const double u1 = (static_cast<double>(w[2 * pair] >> 8) + 1.0) / 16777216.0;
  const double u2 = u01(w[2 * pair + 1]);
  const double rad = std::sqrt(-2.0 * std::log(u1));
  return (e % 2 == 0) ? rad * std::cos(2 * M_PI * u2) : rad * std::sin(2 * M_PI * u2);
}

// A drawn parameter is a float32 U(lo, hi): lo + (hi - lo) u rounded at each float32 step.
inline double draw_range_f32(double lo, double hi, uint32_t bits) {
  const float l = static_cast<float>(lo), h = static_cast<float>(hi);
  const float span = h - l;
  const float prod = span * static_cast<float>(u01(bits));
  return static_cast<float>(l + prod);
}

// The same for the second per-element stream (Rician noise's n2).
inline double reference_normal_aux(uint64_t seed, int64_t e, uint32_t g) {
  using namespace voxaug::detail;
  const U32x4 r = philox_block(seed, static_cast<uint64_t>(e / 4), g, PhiloxStream::ElementAux);
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
  const int pair = static_cast<int>(e % 4) / 2;
  const double u1 = (static_cast<double>(w[2 * pair] >> 8) + 1.0) / 16777216.0;
  const double u2 = u01(w[2 * pair + 1]);
  const double rad = std::sqrt(-2.0 * std::log(u1));
  return (e % 2 == 0) ? rad * std::cos(2 * M_PI * u2) : rad * std::sin(2 * M_PI * u2);
}

// Bias field coordinate: MONAI's float32 np.linspace(-1, 1, n); TorchIO's centred grid.
inline double reference_bias_coordinate(int64_t i, int64_t n, bool monomial) {
  if (monomial) return n == 1 ? 0.0 : (i - (n - 1) / 2.0) / ((n - 1) / 2.0);
  if (n == 1) return -1.0;
  if (i == n - 1) return 1.0;
  return static_cast<float>(i * (2.0 / (n - 1)) - 1.0);
}

inline double reference_basis(int order, double t, bool monomial) {
  return monomial ? std::pow(t, order) : std::legendre(static_cast<unsigned>(order), t);
}

// exp(field) of a bias field step at element e (dims D, H, W) of local sample n.
inline double reference_bias_field(const PointwiseStep& s, const int64_t dims[3], int64_t n,
                                   int64_t e) {
  const int64_t r = e % (dims[0] * dims[1] * dims[2]);
  const int64_t i = r / (dims[1] * dims[2]), j = (r / dims[2]) % dims[1], k = r % dims[2];
  const double zd = reference_bias_coordinate(i, dims[0], s.monomial_basis);
  const double zh = reference_bias_coordinate(j, dims[1], s.monomial_basis);
  const double zw = reference_bias_coordinate(k, dims[2], s.monomial_basis);
  const float* c = s.coefficients + n * voxaug::bias_field_coefficients(s.degree);
  double sum = 0;
  int idx = 0;
  for (int a = 0; a <= s.degree; ++a)
    for (int b = 0; b <= s.degree - a; ++b)
      for (int q = 0; q <= s.degree - a - b; ++q)
        sum += c[idx++] * reference_basis(a, zd, s.monomial_basis) *
               reference_basis(b, zh, s.monomial_basis) * reference_basis(q, zw, s.monomial_basis);
  return std::exp(sum);
}

// Float64 reference of one chain on one element (value x, global sample g, local n,
// channel c, element e of the sample).
// `deriv`, when given, receives d out / d in (clip kills it outside [lo, hi]).
// `channels` indexes per-(sample, channel) statistics of rescale steps (g doubles as the
// local sample there: those tests use first_sample 0).
// `dims` (D, H, W) is needed by bias field steps.
inline double reference_element(const std::vector<PointwiseStep>& steps, double x, uint32_t g,
                                int64_t c, int64_t e, double* deriv = nullptr, int64_t channels = 1,
                                const int64_t* dims = nullptr) {
  double d = 1.0;
  using namespace voxaug::detail;
  for (const PointwiseStep& s : steps) {
    const U32x4 draw = philox_block(s.seed, 0, g, PhiloxStream::Sample);
    if (!(u01(draw.x) < s.prob)) continue;
    switch (s.op) {
      case PointwiseOp::ScaleIntensityRange: {
        if (s.a_max == s.a_min) {
          x = x - s.a_min + (s.has_b_min ? s.b_min : 0.0);
          break;
        }
        x = (x - s.a_min) / (s.a_max - s.a_min);
        d = d / (s.a_max - s.a_min);
        if (s.has_b_min && s.has_b_max) {
          x = x * (s.b_max - s.b_min) + s.b_min;
          d = d * (s.b_max - s.b_min);
        }
        if (s.clip && s.has_b_min && x < s.b_min) {
          x = s.b_min;
          d = 0;
        }
        if (s.clip && s.has_b_max && x > s.b_max) {
          x = s.b_max;
          d = 0;
        }
        break;
      }
      case PointwiseOp::ShiftIntensity:
      case PointwiseOp::ScaleIntensity: {
        double v = s.value;
        if (s.random) {
          const uint32_t bits =
              s.channel_wise ? philox_block(s.seed, c, g, PhiloxStream::Channel).x : draw.y;
          v = s.low + (s.high - s.low) * u01(bits);
        }
        if (s.op == PointwiseOp::ShiftIntensity) {
          x = x + v;
        } else {
          x = x * (1.0 + v);
          d = d * (1.0 + v);
        }
        break;
      }
      case PointwiseOp::RescaleIntensity: {
        // Reference statistics are the float64 (min, max) pairs the test put in host memory.
        const int64_t seg = s.channel_wise ? int64_t(g) * channels + c : int64_t(g);
        const double mn = static_cast<float>(s.stats[2 * seg]);
        const double mx = static_cast<float>(s.stats[2 * seg + 1]);
        if (mx == mn) {
          if (s.has_b_min) {
            x *= s.b_min;
            d *= s.b_min;
          }
          break;
        }
        x = (x - mn) / (mx - mn);
        d = d / (mx - mn);
        if (s.has_b_min && s.has_b_max) {
          x = x * (s.b_max - s.b_min) + s.b_min;
          d = d * (s.b_max - s.b_min);
        }
        break;
      }
      case PointwiseOp::GaussianNoise: {
        const double sd = s.sample_std ? s.std * u01(draw.z) : s.std;
        x = x + s.mean + sd * reference_normal(s.seed, e, g);
        break;
      }
      case PointwiseOp::RicianNoise: {
        const uint32_t bits =
            s.channel_wise ? philox_block(s.seed, c, g, PhiloxStream::Channel).x : draw.z;
        double sd = s.sample_std ? s.std * u01(bits) : s.std;
        if (s.per_sample) sd *= s.per_sample[s.channel_wise ? int64_t(g) * channels + c : g];
        const double a = x + s.mean + sd * reference_normal(s.seed, e, g);
        const double b = s.mean + sd * reference_normal_aux(s.seed, e, g);
        x = std::sqrt(a * a + b * b);
        d = std::nan("");
        break;
      }
      case PointwiseOp::BiasField: {
        const double f = reference_bias_field(s, dims, g, e);
        x *= f;
        d *= f;
        break;
      }
      case PointwiseOp::AdjustContrast: {
        const double mn = static_cast<float>(s.stats[2 * g]);
        const double mx = static_cast<float>(s.stats[2 * g + 1]);
        const double gam = s.random ? draw_range_f32(s.low, s.high, draw.y) : s.value;
        const double lo = s.invert ? -mx : mn, range = mx - mn, den = range + 1e-7;
        const double xi = s.invert ? -x : x;
        const double b = (xi - lo) / den;
        const double y = std::pow(b, gam) * range + lo;
        d *= gam * std::pow(b, gam - 1) * range / den;
        x = s.invert ? -y : y;
        break;
      }
      case PointwiseOp::Gamma: {
        const double gam =
            s.random ? std::exp(draw_range_f32(s.low, s.high,
                                               philox_block(s.seed, c, g, PhiloxStream::Channel).x))
                     : s.value;
        const double ax = std::fabs(x);
        d *= gam * std::pow(ax, gam - 1);
        x = (x < 0 ? -1.0 : 1.0) * std::pow(ax, gam);
        break;
      }
      case PointwiseOp::HistogramShift: {
        // np.interp in float64 on the float32 statistics: points min + k / (K - 1) * range,
        // values min + y_k * range; the end values outside.
        const double mn = static_cast<float>(s.stats[2 * g]);
        const double mx = static_cast<float>(s.stats[2 * g + 1]);
        const float* y = s.coefficients + int64_t(g) * s.num_points;
        int K = 0;
        while (K < s.num_points && !std::isnan(y[K])) ++K;
        if (K < 2 || mx == mn) break;
        auto px = [&](int k) { return mn + (k == K - 1 ? 1.0 : double(k) / (K - 1)) * (mx - mn); };
        auto py = [&](int k) { return mn + double(y[k]) * (mx - mn); };
        if (x < px(0)) {
          x = py(0);
          d = 0;
        } else if (x > px(K - 1)) {
          x = py(K - 1);
          d = 0;
        } else {
          int k = 0;
          while (k < K - 2 && px(k + 1) < x) ++k;
          const double m = (py(k + 1) - py(k)) / (px(k + 1) - px(k));
          x = py(k) + m * (x - px(k));
          d *= m;
        }
        break;
      }
      case PointwiseOp::StdShiftIntensity: {
        const int64_t seg = s.channel_wise ? int64_t(g) * channels + c : int64_t(g);
        const double f = s.random ? draw_range_f32(s.low, s.high, draw.y) : s.value;
        if (!(s.nonzero && x == 0)) x += f * s.stats[3 * seg + 2];
        break;
      }
      case PointwiseOp::ScaleIntensityFixedMean: {
        const int64_t seg = s.channel_wise ? int64_t(g) * channels + c : int64_t(g);
        const uint32_t bits =
            s.channel_wise ? philox_block(s.seed, c, g, PhiloxStream::Channel).x : draw.y;
        const double f = s.random ? draw_range_f32(s.low, s.high, bits) : s.value;
        const double mean = s.fixed_mean ? s.stats[3 * seg] : 0.0;
        x = (x - mean) * (1.0 + f) + mean;
        d *= 1.0 + f;
        if (s.preserve_range && x < s.stats[3 * seg + 1]) {
          x = s.stats[3 * seg + 1];
          d = 0;
        }
        if (s.preserve_range && x > s.stats[3 * seg + 2]) {
          x = s.stats[3 * seg + 2];
          d = 0;
        }
        break;
      }
    }
  }
  if (deriv) *deriv = d;
  return x;
}

}  // namespace voxaug_test
