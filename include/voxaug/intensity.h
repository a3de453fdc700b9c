// voxaug: pointwise intensity transforms and Gaussian noise, batched, with per-sample
// random parameters, fused into one pass over memory.
//
// Contract shared by every function here:
// - `in` and `out` are (N, C, D, H, W) views on the same device with the same shape.
//   `out` may be `in` itself (same data and strides: in place); otherwise they must not
//   overlap. Strides may be arbitrary; dense samples take a vectorised path.
// - Input dtypes: float64, float32, float16, bfloat16, uint8, int16, int32. Output dtypes:
//   float32, float16, bfloat16, or float64 when the input is float64. Math is float32
//   (float64 for float64 data); results are bit-identical between the CPU and CUDA paths.
// - CUDA views run on `stream` and never synchronise the host; CPU views run on the calling
//   thread with OpenMP and ignore `stream`.
// - Random draws come from Philox keyed by the step's seed and addressed by (sample,
//   element), so a sample's result does not depend on the batch it sits in, the launch
//   shape or the device. Per-sample parameters (the gate u < prob, offsets, factors,
//   sampled std) are drawn on the device from the same keyed stream: no host round trip.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

enum class PointwiseOp : int32_t {
  ScaleIntensityRange = 0,  // MONAI ScaleIntensityRange
  ShiftIntensity = 1,       // x + offset
  ScaleIntensity = 2,       // x * (1 + factor)
  GaussianNoise = 3,        // x + N(mean, std)
  RescaleIntensity = 4,     // MONAI ScaleIntensity(minv, maxv): min-max rescale per sample
  RicianNoise = 5,          // MONAI RandRicianNoise: sqrt((x + n1)^2 + n2^2), n1, n2 ~ N(mean, std)
  BiasField = 6,            // MONAI RandBiasField / TorchIO RandomBiasField: x * exp(poly)
  AdjustContrast = 7,       // MONAI AdjustContrast: ((x - min) / (range + 1e-7))^g * range + min
  Gamma = 8,                // TorchIO Gamma: sign(x) |x|^gamma
  HistogramShift = 9,       // MONAI RandHistogramShift: piecewise-linear intensity map
  StdShiftIntensity = 10,   // MONAI StdShiftIntensity: x + factor * std(x)
  ScaleIntensityFixedMean = 11,  // MONAI ScaleIntensityFixedMean: (x - mean) (1 + f) + mean
};

// Most control points of one histogram shift step (the per-voxel search is linear in them).
constexpr int kMaxHistogramPoints = 4096;

// Highest polynomial degree of a bias field step ((degree + 1)(degree + 2)(degree + 3) / 6
// coefficients per sample).
constexpr int kMaxBiasFieldDegree = 7;
constexpr int bias_field_coefficients(int degree) {
  return (degree + 1) * (degree + 2) * (degree + 3) / 6;
}

// One step of a pointwise chain. Build with the factory functions; the fields are the
// plain parameter block that travels to the kernel by value.
struct PointwiseStep {
  PointwiseOp op = PointwiseOp::ShiftIntensity;
  // ScaleIntensityRange: a_min, a_max, b_min, b_max (b_min/b_max used when has_b_min/max).
  // Shift/Scale fixed value: value. Random: [low, high). Noise: mean, std; random: mean ~
  // U(low, high) per sample; sample_std: std ~ U(std_low, std) per sample (TorchIO RandomNoise).
  double a_min = 0, a_max = 1, b_min = 0, b_max = 1;
  bool has_b_min = false, has_b_max = false, clip = false;
  double value = 0, low = 0, high = 0, mean = 0, std = 0;
  bool random = false;        // Shift/Scale: draw the value per sample (or per channel)
  bool channel_wise = false;  // Shift/Scale random: one draw per (sample, channel)
  bool sample_std = false;    // Noise: std ~ U(std_low, std) per sample (MONAI's sample_std)
  double std_low = 0;         // Noise with sample_std: the lower end of the std range
  double prob = 1.0;          // per-sample gate: the step applies when u < prob
  uint64_t seed = 0;          // key of this step's Philox streams
  // Shift/Scale: optional per-sample values (length N, float32, on the data's device);
  // overrides `value`.
  const float* per_sample = nullptr;
  // Rescale: (min, max) pairs from minmax() on this step's input, float64, on the data's
  // device: N pairs, or N * C pairs (n-major) when channel_wise. Target range minv / maxv
  // when has_b_min / has_b_max (fields b_min / b_max).
  const double* stats = nullptr;
  // Rician: channel_wise (one sampled std per (sample, channel)), sample_std, mean, std;
  // optional `per_sample` std multipliers (MONAI's relative=True: the image's std), N values,
  // or N * C (n-major) when channel_wise; or, instead of mean / std, optional `stats`: a
  // float64 (mean, std) pair per segment (N, or N * C n-major when channel_wise) on the data's
  // device (MONAI's per-channel mean / std sequences, std already times the image's std when
  // relative).
  // BiasField: `coefficients` (N, bias_field_coefficients(degree)) float32 on the data's
  // device, n-major, in MONAI's order (for i, for j <= degree - i, for k <= degree - i - j:
  // c_ijk of P_i(z_d) P_j(z_h) P_k(z_w)); legendre basis on MONAI's grid
  // (float32 linspace(-1, 1, size) per axis, -1 for a size-1 axis), or with monomial_basis
  // TorchIO's z_d^i z_h^j z_w^k on its grid ((i - (size-1)/2) / ((size-1)/2), 0 for size 1).
  const float* coefficients = nullptr;
  int degree = 3;
  bool monomial_basis = false;
  // AdjustContrast: gamma (`value`, or U(low, high) per sample when random), (min, max) pairs
  // from minmax() on this step's input (N pairs, `stats`), invert_image (nnU-Net's inverted
  // gamma: -f(-x)). Gamma: gamma (`value`) or exp(U(low, high)) per (sample, channel).
  bool invert = false;
  // StdShiftIntensity: `stats` = moments() triples (count, mean, population std) of this
  // step's input, N or N * C (channel_wise) of them, with moments' `nonzero` equal to this
  // step's; offset = factor * std (float32 product of the float32-rounded values), factor =
  // `value`, or U(low, high) per sample when random (one draw per sample, also with
  // channel_wise, as MONAI). `nonzero`: zeros stay zero.
  bool nonzero = false;
  // ScaleIntensityFixedMean: `stats` = (mean, min, max) triples per segment (N, or N * C
  // with channel_wise), float64 on the data's device; x -> (x - mean) * (1 + factor) + mean
  // (without fixed_mean: x * (1 + factor)), then clamped to [min, max] with preserve_range.
  // factor = `value`, or U(low, high) per sample (per (sample, channel) with channel_wise).
  bool fixed_mean = true, preserve_range = false;
  // HistogramShift: `stats` = minmax() pairs (N) of this step's input; `coefficients` =
  // (N, num_points) float32 rows: sample n's floating control points y_0..y_{K-1} (MONAI's
  // floating_control_points, in units of the sample's range) for the reference points
  // x_k = linspace(0, 1, K), then NaN padding (K = index of the first NaN). Each sample maps
  // through np.interp(x, min + x_k (max - min), min + y_k (max - min)) evaluated as MONAI's
  // torch path (float32 slopes and intercepts). K < 2 or max == min: unchanged.
  int num_points = 0;

  static PointwiseStep scale_intensity_range(double a_min, double a_max, const double* b_min,
                                             const double* b_max, bool clip);
  static PointwiseStep shift_intensity(double offset);
  static PointwiseStep shift_intensity(const float* per_sample_offsets);
  static PointwiseStep rand_shift_intensity(double low, double high, double prob, uint64_t seed,
                                            bool channel_wise = false);
  static PointwiseStep scale_intensity(double factor);
  static PointwiseStep scale_intensity(const float* per_sample_factors);
  static PointwiseStep rand_scale_intensity(double low, double high, double prob, uint64_t seed,
                                            bool channel_wise = false);
  static PointwiseStep gaussian_noise(double mean, double std, bool sample_std, double prob,
                                      uint64_t seed);
  // TorchIO RandomNoise: x + N(mean, std), mean ~ U(mean_low, mean_high) and std ~
  // U(std_low, std_high) per sample.
  static PointwiseStep random_noise(double mean_low, double mean_high, double std_low,
                                    double std_high, double prob, uint64_t seed);
  // MONAI rescale_array: (x - min) / (max - min) * (maxv - minv) + minv; only the
  // normalisation when minv or maxv is null; x * minv (or x) when max == min.
  static PointwiseStep rescale_intensity(const double* minmax_stats, bool channel_wise,
                                         const double* minv, const double* maxv);
  // MONAI RandRicianNoise (relative=False; relative=True with std_scale = the image's std).
  static PointwiseStep rician_noise(double mean, double std, bool sample_std, bool channel_wise,
                                    double prob, uint64_t seed, const float* std_scale = nullptr);
  // x * exp(field), the field from per-sample coefficients (see `coefficients`).
  static PointwiseStep bias_field(const float* coefficients, int degree, bool monomial_basis,
                                  double prob, uint64_t seed);
  // MONAI AdjustContrast(gamma, invert_image); stats from minmax(in, ..., channel_wise=false).
  static PointwiseStep adjust_contrast(const double* minmax_stats, double gamma, bool invert);
  // MONAI RandAdjustContrast: gamma ~ U(low, high) per sample.
  static PointwiseStep rand_adjust_contrast(const double* minmax_stats, double low, double high,
                                            double prob, uint64_t seed, bool invert);
  // TorchIO Gamma: sign(x) |x|^gamma.
  static PointwiseStep gamma(double gamma);
  // TorchIO RandomGamma: gamma = exp(beta), beta ~ U(log_low, log_high) per (sample, channel).
  static PointwiseStep rand_gamma(double log_low, double log_high, double prob, uint64_t seed);
  // MONAI StdShiftIntensity(factor, nonzero, channel_wise) / RandStdShiftIntensity.
  static PointwiseStep std_shift_intensity(const double* moments_stats, double factor, bool nonzero,
                                           bool channel_wise);
  static PointwiseStep rand_std_shift_intensity(const double* moments_stats, double low,
                                                double high, double prob, uint64_t seed,
                                                bool nonzero, bool channel_wise);
  // MONAI ScaleIntensityFixedMean / RandScaleIntensityFixedMean.
  static PointwiseStep scale_intensity_fixed_mean(const double* mean_min_max, double factor,
                                                  bool fixed_mean, bool preserve_range,
                                                  bool channel_wise);
  static PointwiseStep rand_scale_intensity_fixed_mean(const double* mean_min_max, double low,
                                                       double high, double prob, uint64_t seed,
                                                       bool fixed_mean, bool preserve_range,
                                                       bool channel_wise);
  // MONAI RandHistogramShift with the control points given (see `num_points`).
  static PointwiseStep histogram_shift(const double* minmax_stats, const float* points,
                                       int num_points);
};

// Longest chain fused into one pass.
constexpr int kMaxPointwiseSteps = 8;

// Throws voxaug::Error naming the offending parameter (non-finite values, prob outside
// [0, 1], negative std, low > high, too many steps, gamma <= 0, degree outside
// [0, kMaxBiasFieldDegree], missing pointers).
void validate_pointwise_steps(const PointwiseStep* steps, int num_steps);

// out = steps[num_steps-1](... steps[0](in)): one read of `in`, one write of `out`.
// `first_sample` is the global index of sample 0 of this batch in the random streams:
// splitting a batch into pieces with matching first_sample gives identical bytes.
void pointwise_chain(const VolumeView& in, const VolumeView& out, const PointwiseStep* steps,
                     int num_steps, cudaStream_t stream = nullptr, uint32_t first_sample = 0);

// grad_in = grad_out * d out / d in for the same chain (recomputes the forward values, noise
// included, to know where clipping was active). All three views: same shape, device and a
// floating dtype; grad_out and grad_in share a dtype. Statistics (min / max) and drawn
// parameters are constants. Rician noise steps are not differentiable: a chain with one
// throws.
void pointwise_chain_backward(const VolumeView& grad_out, const VolumeView& in,
                              const VolumeView& grad_in, const PointwiseStep* steps, int num_steps,
                              cudaStream_t stream = nullptr, uint32_t first_sample = 0);

// Per-sample (or per-(sample, channel)) minimum and maximum of `in`, NaNs ignored, written
// as float64 (min, max) pairs to `out_minmax` (device memory of `in`'s device): N pairs, or
// N * C pairs in (n, c) order. A segment with only NaNs gets (+inf, -inf); a zero extreme is
// +0 (-0 and +0 tie; both backends report it so).
// Asynchronous on CUDA like every other call here.
void minmax(const VolumeView& in, double* out_minmax, bool channel_wise,
            cudaStream_t stream = nullptr);

// Host-side parameter draws for transforms whose parameters are built on the host (the
// spatial family's matrices): out[i * count + k] is the k-th float64 uniform in [0, 1) of
// global sample first_sample + i under `seed` (Philox, stream Params), so a sample's draws do
// not depend on the batch it is in.
void philox_uniforms(uint64_t seed, uint32_t first_sample, int64_t batch, int64_t count,
                     double* out);

// Single-step conveniences (each one is a chain of one step).
void scale_intensity_range(const VolumeView& in, const VolumeView& out, double a_min, double a_max,
                           const double* b_min, const double* b_max, bool clip,
                           cudaStream_t stream = nullptr);
void shift_intensity(const VolumeView& in, const VolumeView& out, const float* per_sample_offsets,
                     cudaStream_t stream = nullptr);
void rand_shift_intensity(const VolumeView& in, const VolumeView& out, double low, double high,
                          double prob, uint64_t seed, cudaStream_t stream = nullptr);
void scale_intensity(const VolumeView& in, const VolumeView& out, const float* per_sample_factors,
                     cudaStream_t stream = nullptr);
void rand_scale_intensity(const VolumeView& in, const VolumeView& out, double low, double high,
                          double prob, uint64_t seed, cudaStream_t stream = nullptr);
void gaussian_noise(const VolumeView& in, const VolumeView& out, double mean, double std,
                    bool sample_std, double prob, uint64_t seed, cudaStream_t stream = nullptr);

}  // namespace voxaug
