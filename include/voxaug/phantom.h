// voxaug: the phantom family -- a synthetic, CT-like abdominal phantom generator: a training
// data set with as many subjects as wanted, generated on the device in one pass per batch.
//
// Subject i of (seed, num_classes) is the sample made with first_sample = i: sample n of a call
// with first_sample f is identical to sample 0 of a call with first_sample f + n, on the CPU and
// on CUDA, whatever the batch split (every random number is Philox keyed by (seed, global
// sample, index), include/voxaug/detail/philox.h).
//
// Geometry. The phantom lives in the normalised cube [-1, 1]^3 (axis order d, h, w) sampled at
// voxel centres: x_a = (i_a + 0.5) * (2 / S_a) - 1 for voxel index i_a of an axis of size S_a
// (a non-cubic volume stretches the phantom). There are K = num_classes objects:
//   object 0, the body: an axis-aligned ellipsoid, centre U(-0.05, 0.05) per axis, semi-axes
//     U(0.70, 0.90) (70-90 % of the volume per axis), mildly perturbed boundary;
//   objects c = 1 .. K-1, the organs: rotated ellipsoids, centre = body centre + body semi-axis *
//     U(-0.45, 0.45) per axis, semi-axes 2 s_c U(0.75, 1.25) with the class's size s_c =
//     0.25 - 0.17 (c - 1) / max(K - 2, 1) (of the volume side: class 1 the largest, 25 %, class
//     K-1 the smallest, 8 %), random 3-D rotation (uniform quaternion), perturbed boundary.
// Object o contains x when, with q = A_o (x - c_o) (A_o = diag(1 / r) R^T, the ellipsoid mapped
// to the unit ball),
//   |q|^2 <= (1 + delta_o(q))^2,   delta_o(q) = sum_{t<3} a_t sin(2 pi (k_t . q + phi_t)),
// a low-frequency radial modulation (body: |k_t| in [0.5, 1], a_t in [0.01, 0.03]; organs:
// |k_t| in [0.5, 1.5], a_t in [0.03, 0.08]). Label: 0 outside the body (air) and in the body's
// soft tissue; else the largest c whose organ contains x (later classes overwrite earlier ones:
// the small organs lie on top), organs clipped to the body. Labels follow this geometry exactly
// and carry no noise.
//
// Intensities, in Hounsfield units (so MONAI's BTCV preprocessing ScaleIntensityRange(a_min =
// -175, a_max = 250, b_min = 0, b_max = 1, clip = True) applies unchanged):
//   air (outside the body):  v = -1000 + sigma z
//   tissue (inside the body): v = (mu_label + tex(x)) * bias(x) + sigma z
// with mu_0 = 40 + U(-5, 5) (soft tissue); mu_c (organs) distinct per class over [-100, 250]
// minus the band (0, 80) around soft tissue: with M = K - 2 and the class's rank
// rank_c = (c - 1) / 2 for odd c, M - (c - 2) / 2 for even c (alternating dark and bright, so
// size and brightness do not go together), t = rank_c / max(M, 1), h = -100 + 270 t, h += 80 if
// h > 0; mu_c = h + J U(-1, 1), J = min(10, 67.5 / max(M, 1)) (per subject, never crossing a
// neighbour); tex(x) = sum_{t<3} b_t sin(2 pi (f_t . x + psi_t)), |f_t| in [1, 4] cycles per
// unit, b_t in [3, 5] HU; bias(x) = exp(beta . (x0, x1, x2, x0^2, x1^2, x2^2, x0 x1, x1 x2,
// x0 x2)), beta U(+-0.05) linear, U(+-0.03) square, U(+-0.02) cross terms (a smooth
// multiplicative field, a few % in the body); sigma = U(15, 25) HU per subject; z the standard
// normal of voxel e (C-order index d H W + h W + w) of the global sample: Philox (seed, sample,
// e) through Box-Muller, exactly rand_gaussian_noise's numbers (detail::normal4).
//
// Parameter table. Per sample, one float32 row of phantom_param_count(K) = 25 + 36 K values,
// computed on the device from Philox draws u_k = uniform01 of word k & 3 of block k >> 2 of
// (seed, global sample, PhiloxStream::Sample); the render pass reads only this table. Layout
// (kPhantom* constants below; the draw indices k in brackets):
//   [0]        sigma = 15 + 10 u                                    [k = 0]
//   [1 .. 9]   beta: lin 0.05 (2u - 1), sq 0.03 (2u - 1), cross 0.02 (2u - 1)   [k = 1 .. 9]
//   [10 .. 24] texture term t: f_t (3), psi_t, b_t                  [k = 10 + 5t .. 14 + 5t]
//   [25 + 36 o ..] object o:
//     +0  centre (3)                                                [k = 32 + 32 o + 0 .. 2]
//     +3  A (3 x 3, row-major): q_i = sum_j A_ij (x_j - c_j)        radii [+3 .. 5],
//                                                                    rotation [+6 .. 8]
//     +12 modulation term t: k_t (3), phi_t, a_t                    [+9 + 5t .. +13 + 5t]
//     +27 |q|^2 below which x is inside for any modulation: (1 - sum a)^2 * 0.99
//     +28 |q|^2 above which x is outside: (1 + sum a)^2 * 1.01
//     +29 axis-aligned bounding box lo (3), +32 hi (3) (conservative, acceleration only)
//     +35 mean HU mu_o                                              [+24]
// A direction from (u, v): (s cos 2 pi v, s sin 2 pi v, 2u - 1), s = sqrt(1 - (2u - 1)^2), and
// the five draws of a term are (u, v, |frequency|, phase, amplitude). The rotation is
// Shoemake's uniform quaternion (x, y, z, w) = (sqrt(1 - u1) sin 2 pi u2, sqrt(1 - u1) cos 2 pi
// u2, sqrt(u1) sin 2 pi u3, sqrt(u1) cos 2 pi u3). The organ rows recompute the body's centre
// and semi-axes from the body's draws. All of it is float32 with the shared rounding helpers
// (detail/fmath.h) and voxaug's own sin / exp / log: CPU and CUDA give the same bits.
#pragma once

#include <cstdint>

#include "voxaug/config.h"
#include "voxaug/types.h"

namespace voxaug {

constexpr int64_t kPhantomMinClasses = 2;
constexpr int64_t kPhantomMaxClasses = 16;
constexpr int64_t kPhantomMinSize = 8;  // voxels per axis
constexpr int64_t kPhantomHeader = 25;  // floats before the first object of a row
constexpr int64_t kPhantomObject = 36;  // floats per object

// Floats per sample in the parameter table.
constexpr int64_t phantom_param_count(int64_t num_classes) {
  return kPhantomHeader + kPhantomObject * num_classes;
}

struct PhantomOptions {
  int64_t num_classes = 5;    // K: labels 0 .. K-1, 2 <= K <= 16
  uint64_t seed = 0;          // Philox key of the whole data set
  uint32_t first_sample = 0;  // global index (subject) of sample 0 of the call
};

// Fills `table` ((batch, phantom_param_count(K)) float32, dense) on `device` (device_index for
// CUDA) with the per-sample parameters. CUDA: one launch on `stream`, no host synchronisation.
// Throws voxaug::Error naming the argument on bad values.
void phantom_params(float* table, int64_t batch, const PhantomOptions& options, Device device,
                    int device_index = 0, cudaStream_t stream = nullptr);

// Renders image (float32 (N, 1, D, H, W)) and label (uint8 (N, 1, D, H, W)), any strides, same
// device, from a table made by phantom_params with the same options (N rows). One launch.
void phantom_render(const float* table, const VolumeView& image, const VolumeView& label,
                    const PhantomOptions& options, cudaStream_t stream = nullptr);

// phantom_params into `table` (scratch of N * phantom_param_count(K) floats on the image's
// device), then phantom_render: two launches on `stream`, no host synchronisation.
void phantom(float* table, const VolumeView& image, const VolumeView& label,
             const PhantomOptions& options, cudaStream_t stream = nullptr);

}  // namespace voxaug
