// voxaug::transforms -- MONAI's spatial transforms for LibTorch programs (the C++ side of
// python/voxaug/spatial.py; same names, same constructor arguments, same maps).
//
// Every transform is a per-sample index map (output voxel index (d, h, w, 1) -> input voxel
// index, voxel centres at integers) plus an output size. The maps are built on the host in
// double precision exactly as python/voxaug/spatial.py builds them (MONAI's geometry: AffineGrid's
// centred matrix and its grid_sample normalisation, Rotate's shift @ R @ shift, Spacing's
// zoom_affine / compute_shape_offset / solve(src, dst), nibabel's orientation helpers,
// interpolate's index rules for Resize / Zoom), copied to the inputs' device through pinned memory
// without blocking, and one voxaug::ops::resample launch gathers the whole batch. Nothing syncs the
// host on CUDA inputs (the affine of Spacing / Orientation is host metadata: a CUDA affine is
// copied to the host).
//
// Call convention (every transform):
//   Result r = t({image, label}, {"", "nearest"}, affine);          // deterministic
//   Result r = rt({image, label}, seed, first_sample, {"", "nearest"}, affine);  // random
// - inputs: (N, C_i, D, H, W) or (C_i, D, H, W) tensors (CPU or CUDA, one device), all with the
//   same batch and spatial size; each output has its input's rank. Inputs that share a map share
//   one launch (up to 4 per launch), each with its own mode: image bilinear + label nearest.
// - modes: per input, "" (or missing) = the transform's mode, else a mode name valid for that
//   transform (below). Nearest keeps the input dtype (bit-exact copies); linear / cubic return
//   the input's floating dtype (integer input is computed in float32).
// - affine: optional (4, 4) or (N, 4, 4) float64 (MONAI MetaTensor.affine); the identity when
//   absent. Result::affine is `affine @ meta` (per sample when the samples' maps differ), as
//   MONAI updates a MetaTensor's affine and as Python's voxaug returns it.
//
// Modes (the constructor's checked at construction, per-input ones at the call; c10::ValueError
// names the argument):
// - grid transforms (Spacing, Affine, RandAffine, Rotate, RandRotate): mode "nearest" |
//   "bilinear" | "bicubic" (voxaug's cubic B-spline, scipy's spline order 3, as Python maps it)
//   | MONAI's integer modes as strings, the spline orders "0" .. "5" ("0" nearest, "1"
//   bilinear, "3" bicubic, "2" / "4" / "5" the prefiltered B-splines of those orders, scipy's
//   map_coordinates orders), padding_mode "zeros" | "border" | "reflection". As MONAI hands its
//   integer modes to scipy, an input given one of "0" .. "5" reads "zeros" as scipy's
//   'constant' (0 outside [0, S-1], no blending: the kernel's cutoff padding), per input (a
//   label given "nearest" beside it keeps grid_sample's zeros). A call whose inputs read
//   "zeros" differently runs alone in a Compose (Result::single_map is false); one reading for
//   every input (Compose plans each input alone) is a plain padding and joins its group, also
//   into a deformation's launch. The deformations (deform_transforms.h) read their mode and
//   label_mode the same way, per input, as Python's do.
// - Resize / Zoom / RandZoom (torch interpolate, as MONAI calls it): mode "area" (adaptive
//   average pooling, MONAI's default; computed in float32 as MONAI's default dtype) | "nearest" |
//   "nearest-exact" (interpolate's floor rules, bit-identical) | "linear" | "bilinear" |
//   "trilinear". align_corners (std::optional, MONAI's None = torch's default): only with a
//   linear constructor mode (c10::ValueError otherwise, as interpolate). Zoom's keep_size
//   padding: numpy.pad's "edge" | "constant" | "reflect" | "symmetric" | "wrap" (or torch's
//   "replicate" | "circular"), applied after the resample as MONAI pads.
//   dtype (MONAI's `dtype`, the precision MONAI interpolates in): at::kFloat (MONAI's default) |
//   at::kDouble | std::nullopt (MONAI's None: each input's own, float64 for a float64 input,
//   else float32); float16 / bfloat16 compute in float32 (as Python's voxaug), any other dtype
//   is a c10::ValueError. It decides interpolate's nearest index table (o * scale rounds in that
//   precision: 84 -> 100 voxels picks source 62 for output 75 in float32, 63 in float64), and the
//   precision of 'area' pooling and of anti-aliasing (and the interpolation after it); outputs
//   keep the dtype rules above. Linear interpolation without smoothing is float32 (float64
//   input: float64) whatever dtype says.
// - Flip, Rotate90, Orientation: exact signed permutations (nearest, any dtype); modes ignored.
// Constructor arguments are MONAI's; those added later (Resize's size_mode .., Zoom's
// align_corners / pad_value, Spacing's recompute_affine / min_pixdim / max_pixdim /
// output_spatial_shape, Orientation's labels, Resize / Zoom / RandZoom's dtype, Affine's affine /
// normalized / rotate_order, Rotate's rotate_order) come after the earlier ones, so earlier
// positional calls keep their meaning.
//
// rotate_order (Affine, Rotate; MONAI's create_rotate, scipy's Rotation.from_euler convention):
// 1 to 3 axes from "xyz", all lower case (extrinsic: each rotation about the fixed axes,
// left-multiplied) or all upper case (intrinsic: about the moving axes, right-multiplied), no
// axis twice in a row, at least one axis per angle (Rotate always has 3 angles); angle i turns
// about rotate_order[i]. Default "XYZ": intrinsic x, then y, then z (MONAI's legacy order).
//
// Random transforms draw per sample from Philox exactly as Python's `draw_params`:
// torch.ops.voxaug.philox_uniform(seed, first_sample, N, k) (row i: global sample
// first_sample + i; share_batch_params: every row is row 0). `draw(N, seed, first_sample)` returns
// the uniforms and what they decode to (gates u[:, 0] < prob, per-sample parameters; the maps
// come back in Result::maps);
// `apply(inputs, draw, ...)` replays a draw. The same seed gives the same draws as the Python
// transform called with `draw_params(N, first_sample, seed)`.
//
// Not in this API (the Python transforms have them): interpolate's "bicubic" for Resize / Zoom /
// RandZoom (c10::NotImplementedError, as in Python), MONAI's integer modes as integers (pass
// them as the strings "0" .. "5"), the invertibility records, per-call
// overrides of the constructor's options (MONAI's __call__ mode=, spatial_size=, ...; Spacing's
// output_spatial_shape is a constructor argument here). MONAI's `dtype` of the grid transforms
// (Affine, Rotate, Spacing, ..) and `device` / `cache_grid` are not taken: arithmetic follows
// the input, as in Python's voxaug, where they are accepted and ignored.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace voxaug::transforms {

// What a call returns.
struct Result {
  std::vector<at::Tensor> outputs;  // one per input, in its rank, on its device
  at::Tensor affine;                // float64 (4, 4) or (N, 4, 4): input affine @ meta
  at::Tensor maps;                  // (N, 4, 4) float64 CPU: output index -> input index (kernel)
  at::Tensor meta;                  // (N, 4, 4) float64 CPU: MONAI's affine update (affine @ meta)
  std::array<int64_t, 3> out_size{};
  // How the call resampled inputs[0] (what Compose's lazy planning reads). single_map: one
  // resample launch of `maps` and nothing else (no interpolate index table, 'area' pooling,
  // anti-aliasing or keep_size padding; `affine` is the input affine @ meta). exact: a signed
  // permutation / integer shift (Flip, Rotate90, Orientation, crops: nearest, zero padding).
  // kernel_mode: 0 nearest, 1 linear, 2 cubic; padding: 0 zeros, 1 border, 2 reflection.
  bool single_map = false;
  bool exact = false;
  int64_t kernel_mode = 0;
  int64_t padding = 0;
  bool align_corners = false;
};

// A random transform's draw for a batch (host, float64).
struct Draw {
  at::Tensor uniforms;                      // (N, k) float64 CPU: philox_uniform's rows
  std::vector<bool> gates;                  // u[:, 0] < prob
  std::vector<std::vector<double>> params;  // per sample: see each class
};

// A uniform range: Range(f) is MONAI's "f" (U(-f, f)); Range(lo, hi) is "(min, max)".
struct Range {
  Range(double f) : lo(-f), hi(f), single(true) {}  // NOLINT: implicit, as MONAI takes a float
  Range(double lo_, double hi_) : lo(lo_), hi(hi_), single(false) {}
  double lo, hi;
  bool single;
};

using Inputs = at::TensorList;
using Modes = std::vector<std::string>;
using Affine4 = std::optional<at::Tensor>;

// Base of the random transforms: Philox draws, optional shared draw.
class RandomTransform {
 public:
  // Every sample of a batch gets sample first_sample's draw (Python's share_batch_params).
  void share_batch_params(bool share = true) { share_ = share; }
  double prob() const { return prob_; }
  int64_t num_uniforms() const { return k_; }

 protected:
  RandomTransform(double prob, int64_t k);
  Draw uniforms(int64_t batch, int64_t seed, int64_t first_sample) const;
  double prob_;
  int64_t k_;
  bool share_ = false;
};

// MONAI Flip: reverses spatial axes (empty: all three; negative axes count from the last).
class Flip {
 public:
  explicit Flip(std::vector<int64_t> spatial_axis = {});
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::vector<int64_t> axes_;
};

// MONAI RandFlip: Flip(spatial_axis) with probability prob per sample. Draw: 1 uniform;
// params[i] = {} (gates say whether flipped).
class RandFlip : public RandomTransform {
 public:
  explicit RandFlip(double prob = 0.1, std::vector<int64_t> spatial_axis = {});
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;

 private:
  std::vector<int64_t> axes_;
};

// MONAI RandAxisFlip: with probability prob, flips one spatial axis drawn uniformly from the
// three, per sample. Draw: 2 uniforms; params[i] = {axis} (0, 1, 2 = min(floor(3 u[i][1]), 2);
// -1 where the gate is closed), Python's RandAxisFlip._axes.
class RandAxisFlip : public RandomTransform {
 public:
  explicit RandAxisFlip(double prob = 0.1);
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;
};

// MONAI Rotate90: k quarter turns in the plane of spatial_axes (bit-identical to torch.rot90).
class Rotate90 {
 public:
  explicit Rotate90(int64_t k = 1, std::array<int64_t, 2> spatial_axes = {0, 1});
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  int64_t k_;
  std::array<int64_t, 2> axes_;
};

// MONAI RandRotate90: with probability prob, k ~ U{1..max_k} quarter turns per sample. Draw: 2
// uniforms; params[i] = {k}. A batch needs equal sizes along spatial_axes.
class RandRotate90 : public RandomTransform {
 public:
  explicit RandRotate90(double prob = 0.1, int64_t max_k = 3,
                        std::array<int64_t, 2> spatial_axes = {0, 1});
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;

 private:
  int64_t max_k_;
  std::array<int64_t, 2> axes_;
};

// MONAI Affine: A = R @ Sh @ T @ Sc about the image centre (each factor only when its
// parameters are non-empty; radians, MONAI's create_rotate (in rotate_order) / create_shear /
// create_scale), output spatial_size (empty or non-positive entries: the input's). Result::meta
// is MONAI's returned voxel-index map (compute_w_affine). rotate_params are per axis as MONAI's
// sequences: {a} rotates about the first axis only (unlike Rotate, whose single angle means all
// three axes, MONAI's ensure_tuple_rep for a number).
// - affine (MONAI's `affine`; not the call's input affine): a finite (4, 4) matrix used as A
//   itself, the parameters ignored (as MONAI); read to the host once, at construction.
// - normalized (MONAI's `normalized`, Resample(norm_coords=false)): A maps the centred output
//   voxel coordinates (times max(2, s) / (max(2, s) - 1) per output axis with align_corners, as
//   MONAI's AffineGrid) straight to grid_sample's normalised input coordinates in [-1, 1]
//   (input index = (x + 1) * S / 2 - 1 / 2, or (x + 1) * (S - 1) / 2 with align_corners),
//   without MONAI's 2 / max(2, S) normalisation; for every mode (MONAI's spline-order backend
//   reads normalized coordinates differently; not followed). Result::meta stays MONAI's
//   compute_w_affine of A, which treats A as a voxel map even then: the returned affine is
//   MONAI's, not the geometry of the resampling (Python's voxaug.Affine: the same maps).
class Affine {
 public:
  Affine(std::vector<double> rotate_params = {}, std::vector<double> shear_params = {},
         std::vector<double> translate_params = {}, std::vector<double> scale_params = {},
         std::vector<int64_t> spatial_size = {}, std::string mode = "bilinear",
         std::string padding_mode = "reflection", bool align_corners = false,
         const Affine4& affine = std::nullopt, bool normalized = false,
         std::string rotate_order = "XYZ");
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;
  // The centred 4x4 MONAI matrix (float64 CPU).
  at::Tensor centred_matrix() const;

 private:
  std::array<double, 16> a_;
  std::vector<int64_t> spatial_size_;
  std::string mode_, padding_mode_;
  bool align_corners_;
  bool normalized_;
};

// MONAI RandAffine: per sample with probability prob, each range element drawn uniformly
// (Range(f): U(-f, f); scale adds 1). Draw: 1 + (total range elements) uniforms; params[i] =
// rotate, shear, translate, scale values concatenated (empty where gated off);
// centred_matrices(draw) gives the (N, 4, 4) MONAI matrices (identity where gated off).
class RandAffine : public RandomTransform {
 public:
  RandAffine(double prob = 0.1, std::vector<Range> rotate_range = {},
             std::vector<Range> shear_range = {}, std::vector<Range> translate_range = {},
             std::vector<Range> scale_range = {}, std::vector<int64_t> spatial_size = {},
             std::string mode = "bilinear", std::string padding_mode = "reflection");
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  at::Tensor centred_matrices(const Draw& draw) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;

 private:
  std::array<std::vector<Range>, 4> ranges_;
  std::vector<int64_t> spatial_size_;
  std::string mode_, padding_mode_;
};

// MONAI Rotate: angle (radians; one value: all three axes, as MONAI's ensure_tuple_rep) about
// the image centre, angle i about rotate_order[i] (3 axes); keep_size=false enlarges the output
// to hold the rotated input (MONAI's rule).
class Rotate {
 public:
  explicit Rotate(std::vector<double> angle, bool keep_size = true, std::string mode = "bilinear",
                  std::string padding_mode = "border", bool align_corners = false,
                  std::string rotate_order = "XYZ");
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::array<double, 3> angle_;
  bool keep_size_;
  std::string mode_, padding_mode_;
  bool align_corners_;
  std::string rotate_order_;
};

// MONAI RandRotate: with probability prob, angles x ~ U(range_x), y ~ U(range_y), z ~ U(range_z)
// (Range(r): sorted (-r, r)). Draw: 4 uniforms; params[i] = {x, y, z} (zeros where gated off).
// keep_size=false needs a batch of one (the shapes would differ).
class RandRotate : public RandomTransform {
 public:
  RandRotate(Range range_x = 0.0, Range range_y = 0.0, Range range_z = 0.0, double prob = 0.1,
             bool keep_size = true, std::string mode = "bilinear",
             std::string padding_mode = "border", bool align_corners = false);
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;

 private:
  std::array<Range, 3> ranges_;
  bool keep_size_;
  std::string mode_, padding_mode_;
  bool align_corners_;
};

// MONAI Resize: interpolate to spatial_size. size_mode "all": 3 entries (non-positive: the
// input's); "longest": 1 entry L >= 1, the longest side becomes L and every axis
// round_half_even(size * L / max(size)) (MONAI's int(round(...))). align_corners: interpolate's,
// for a linear mode only (std::nullopt: torch's default, false); a per-input nearest / area mode
// ignores it (as MONAI's dict form with align_corners=None for that key). anti_aliasing: as
// MONAI, when some axis shrinks, a Gaussian (MONAI's GaussianSmooth: erf taps truncated at 4
// sigma, zero padding; voxaug's gaussian_smooth op, as Python's Resize) with sigma
// max(0, (in / out - 1) / 2) per axis (in / out in float32) or, given anti_aliasing_sigma (1 or
// 3 values >= 0, voxels), that sigma on the shrinking axes only, runs before the interpolation
// (any mode) in float32 (MONAI's default dtype); a smoothed input comes back floating, also for
// mode "nearest". Returning the input size leaves the inputs as they are (MONAI's shortcut: no
// smoothing either).
class Resize {
 public:
  explicit Resize(std::vector<int64_t> spatial_size, std::string mode = "area",
                  std::string size_mode = "all", std::optional<bool> align_corners = std::nullopt,
                  bool anti_aliasing = false, std::vector<double> anti_aliasing_sigma = {},
                  std::optional<at::ScalarType> dtype = at::kFloat);
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::vector<int64_t> spatial_size_;
  std::string mode_;
  bool longest_;
  std::optional<bool> align_corners_;
  bool anti_aliasing_;
  std::vector<double> sigma_;
  std::optional<at::ScalarType> dtype_;
};

// MONAI Zoom: interpolate by zoom (one value: all axes; size floor(size * zoom)); keep_size
// centre-crops or pads (padding_mode, numpy.pad names; "constant" pads with pad_value, MONAI's
// `value`) back to the input size. align_corners and dtype as Resize's.
class Zoom {
 public:
  explicit Zoom(std::vector<double> zoom, std::string mode = "area", bool keep_size = true,
                std::string padding_mode = "edge", std::optional<bool> align_corners = std::nullopt,
                double pad_value = 0.0, std::optional<at::ScalarType> dtype = at::kFloat);
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::array<double, 3> zoom_;
  std::string mode_;
  bool keep_size_;
  std::string padding_mode_;
  std::optional<bool> align_corners_;
  double pad_value_;
  std::optional<at::ScalarType> dtype_;
};

// MONAI RandZoom: with probability prob per sample, Zoom by factors drawn from
// U(min_zoom, max_zoom) (MONAI's rule: 1 value: one factor for all three axes; 2: the first for
// the first two spatial axes, the second for the last; 3: one per axis; min_zoom and max_zoom of
// one length, > 0). Draw: 4 uniforms (gate, up to three factors, Python's RandZoom); params[i] =
// the (D, H, W) factors (1.0 where gated off). Each sample is exactly Zoom with its factors (same
// maps, crop / padding, affine update). Interpolating modes: one launch for the batch with
// per-sample maps, then the per-sample keep_size padding as one gather per padded axis; "area"
// (each sample pools to its own size) and nearest size pairs that need interpolate's index table
// run per sample, as in Python. keep_size=false needs every sample of the batch to zoom to the
// same shape (c10::ValueError otherwise). dtype as Resize's.
class RandZoom : public RandomTransform {
 public:
  explicit RandZoom(double prob = 0.1, std::vector<double> min_zoom = {0.9},
                    std::vector<double> max_zoom = {1.1}, std::string mode = "area",
                    std::string padding_mode = "edge",
                    std::optional<bool> align_corners = std::nullopt, bool keep_size = true,
                    double pad_value = 0.0, std::optional<at::ScalarType> dtype = at::kFloat);
  Draw draw(int64_t batch, int64_t seed, int64_t first_sample = 0) const;
  Result apply(Inputs inputs, const Draw& draw, const Modes& modes = {},
               const Affine4& affine = {}) const;
  Result operator()(Inputs inputs, int64_t seed, int64_t first_sample = 0, const Modes& modes = {},
                    const Affine4& affine = {}) const;

 private:
  std::vector<std::pair<double, double>> ranges_;
  std::string mode_;
  std::string padding_mode_;
  std::optional<bool> align_corners_;
  bool keep_size_;
  double pad_value_;
  std::optional<at::ScalarType> dtype_;
};

// MONAI Spacing: resample to voxel spacing pixdim (fewer than 3 values: the last repeats;
// non-positive: keep that axis's spacing), keeping the affine's orientation (diagonal=true: a
// diagonal affine). An axis keeps its spacing when it lies within 1e-3 of
// [min(min_pixdim, pixdim), max(max_pixdim, pixdim)] (MONAI 1.5: min_pixdim / max_pixdim per
// axis from the first, missing or NaN entries: pixdim; empty: none; so the target alone when
// neither is given). MONAI's geometry in float64; no resampling when the affine is unchanged
// (MONAI's shortcut). Result::affine is the new affine, or with recompute_affine MONAI's
// scale_affine(input size, output size, align_corners) outright (MONAI replaces the affine by
// that scaling); the batch shares one affine (an (N, 4, 4) affine must hold N equal matrices).
// output_spatial_shape (MONAI's __call__ argument, a constructor argument here): empty: the
// computed shape; 3 values (D, H, W) or 1 for all axes (as Python's voxaug; MONAI reads one
// int as a 1-D shape), negative entries: the input's size on that axis (MONAI's
// fall_back_tuple), 0: c10::ValueError; the new affine (its offset included) is the one computed
// for pixdim either way, only the output grid's extent changes (recompute_affine then scales to the
// given shape).
class Spacing {
 public:
  explicit Spacing(std::vector<double> pixdim, std::string mode = "bilinear",
                   std::string padding_mode = "border", bool align_corners = false,
                   bool diagonal = false, bool scale_extent = false, bool recompute_affine = false,
                   std::vector<double> min_pixdim = {}, std::vector<double> max_pixdim = {},
                   std::vector<int64_t> output_spatial_shape = {});
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::vector<double> pixdim_, min_pixdim_, max_pixdim_;
  std::vector<int64_t> output_spatial_shape_;
  std::string mode_, padding_mode_;
  bool align_corners_, diagonal_, scale_extent_, recompute_affine_;
};

// Orientation's axis labels: 3 pairs of one-character (start, end) codes per output axis
// (MONAI / nibabel `labels`); empty: nibabel's (("L", "R"), ("P", "A"), ("I", "S")). MONAI
// uses LPS-style (("R", "L"), ("A", "P"), ("I", "S")) for a MetaTensor whose space is LPS: pass
// those here (a C++ tensor carries no space).
using Labels = std::vector<std::array<std::string, 2>>;

// MONAI Orientation: reorders / flips the axes so that the affine's axis codes become axcodes
// (under `labels`; as_closest_canonical: nibabel's io_orientation, labels unused). A signed
// permutation (bit-identical copies, any dtype); Result::affine = affine @ inv_ornt_aff.
class Orientation {
 public:
  explicit Orientation(std::string axcodes, bool as_closest_canonical = false, Labels labels = {});
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::string axcodes_;
  bool canonical_;
  Labels labels_;
};

// MONAI SpatialCrop: the box [roi_start, roi_end) per spatial axis (MONAI's compute_slices:
// starts clamped at 0, an end below its start gives an empty axis, ends clamped at the image
// size), or `roi_size` about `roi_center` (start max(center - floor(size / 2), 0), end start +
// size). 1 value (every axis) or 3 (D, H, W) each; the two of a pair broadcast as MONAI's
// _broadcast_int_pair. An integer translation: the exact path, bit-identical to slicing, any
// dtype. An empty crop is a c10::ValueError (voxaug refuses empty outputs, as in Python).
class SpatialCrop {
 public:
  SpatialCrop(std::vector<int64_t> roi_start, std::vector<int64_t> roi_end);
  // MONAI's roi_center / roi_size form.
  static SpatialCrop centered(std::vector<int64_t> roi_center, std::vector<int64_t> roi_size);
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::array<int64_t, 3> start_{}, end_{};
};

// MONAI CenterSpatialCrop: a roi_size crop about the centre size // 2 (1 or 3 values;
// non-positive entries keep the image's size), i.e. SpatialCrop::centered(size // 2, roi_size).
class CenterSpatialCrop {
 public:
  explicit CenterSpatialCrop(std::vector<int64_t> roi_size);
  Result operator()(Inputs inputs, const Modes& modes = {}, const Affine4& affine = {}) const;

 private:
  std::vector<int64_t> roi_size_;
};

// Compose (lazy composition of these transforms and the deformations): voxaug/compose.h.

}  // namespace voxaug::transforms
