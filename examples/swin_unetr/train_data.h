// Data for the Swin UNETR training example (train.cpp): NIfTI reading (nifticlib), the three
// dataset sources (synthetic phantom, mricron ch2 + AAL, an MSD/BTCV-style directory) and the
// deterministic preprocessing of MONAI's BTCV pipeline, run once per volume on the device:
// voxaug::transforms::Orientation("RAS") and Spacing(pixdim) (MONAI's geometry, image bilinear +
// label nearest in one launch each), ScaleIntensityRange, CropForeground (image > 0) and a
// symmetric pad up to the roi.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace voxaug::train {

// A raw volume as read from disk: (X, Y, Z) in the file's voxel order (NIfTI i, j, k), float32 on
// the CPU, and the voxel -> world (mm, RAS+) affine as nibabel.load(path).affine gives it (so as
// MONAI's NibabelReader): the sform when sform_code > 0, else the qform when qform_code > 0, else
// diag(-dx, dy, dz) centred on the volume (nibabel's default for a file with neither).
struct RawVolume {
  at::Tensor data;
  std::array<std::array<double, 4>, 4> affine{};
};

// Reads a 3-D NIfTI-1/-2 file (.nii or .nii.gz; a 4-D file only with one volume). Applies
// scl_slope / scl_inter. Throws std::runtime_error naming the file on failure.
RawVolume read_nifti(const std::string& path);

// One preprocessed subject, cached on the training device: image (1, 1, D, H, W) float32 in
// [0, 1] and label (1, 1, D, H, W) uint8 in [0, K). Axes are RAS (MONAI's channel-first layout of
// the reoriented array), spacing `pixdim`.
struct Subject {
  std::string name;
  at::Tensor image;
  at::Tensor label;
  std::array<int64_t, 3> raw_shape{};                 // as read (file voxel order)
  std::array<std::array<double, 4>, 4> raw_affine{};  // as read (RawVolume::affine)
  std::array<int64_t, 3> shape{};                     // after preprocessing
  // Voxel -> world (mm, RAS+) of the preprocessed grid: MONAI's MetaTensor.affine after the
  // chain (Orientation, Spacing, then the crop's and the pad's shifts of the origin).
  std::array<std::array<double, 4>, 4> affine{};
  // Training subjects: voxaug::class_crop_counts(label, image > 0, foreground form), the scan
  // RandCropByPosNegLabel draws from, cached once (train.cpp) so a step reads one chunk per crop.
  std::optional<at::Tensor> crop_counts;
};

struct PreprocessOptions {
  std::array<double, 3> pixdim{1.5, 1.5, 2.0};
  double a_min = -175.0, a_max = 250.0;  // ScaleIntensityRange -> [0, 1], clip
  std::array<int64_t, 3> roi{96, 96, 96};
  bool crop_foreground = true;
};

// Orientation("RAS") + Spacing + ScaleIntensityRange + CropForeground + pad to roi, on `device`,
// as MONAI's Orientationd(axcodes "RAS") -> Spacingd(pixdim, mode (bilinear, nearest), its
// defaults otherwise) -> ScaleIntensityRanged(a_min, a_max, 0, 1, clip) -> CropForegroundd(source
// image, > 0, margin 0) -> SpatialPadd(roi) on the (1, X, Y, Z) arrays with `affine`.
// image: (X, Y, Z) float32 (any device), label: (X, Y, Z) uint8 (same device). The foreground box
// is read back to the host (one synchronisation per volume, preprocessing only).
Subject preprocess(const std::string& name, const at::Tensor& image, const at::Tensor& label,
                   const std::array<std::array<double, 4>, 4>& affine,
                   const PreprocessOptions& options, const c10::Device& device);

struct Dataset {
  std::vector<Subject> train, val;
  int64_t num_classes = 0;
  bool val_held_out = true;
  std::string description;
};

struct PhantomOptions {
  int64_t train = 8, val = 2;
  std::array<int64_t, 3> size{64, 64, 64};
  int64_t num_classes = 5;
  int64_t seed = 0;
};

// voxaug::phantom subjects 0 .. train-1 (training) and train .. train+val-1 (validation), voxels
// 1.5 x 1.5 x 2.0 mm (identity orientation).
Dataset load_phantom(const PhantomOptions& p, const PreprocessOptions& options,
                     const c10::Device& device);

// The AAL structures used by --dataset mricron: left and right merged.
struct AalClass {
  const char* name;
  int left, right;  // AAL indices
};
const std::vector<AalClass>& mricron_classes();

// ch2.nii.gz + aal.nii.gz from `dir` (default /usr/share/mricron/templates); one subject used for
// training and validation (not held out).
Dataset load_mricron(const std::string& dir, const PreprocessOptions& options,
                     const c10::Device& device);

// MSD / BTCV layout: <dir>/dataset.json with "training": [{"image", "label"}, ...] and an
// optional "validation" list (else the last 20% of "training", at least one, is held out).
// num_classes: > 0 to force, else len(json "labels") when present, else max label + 1.
// max_subjects > 0 keeps only the first subjects of each list.
Dataset load_msd(const std::string& dir, int64_t num_classes, int64_t max_subjects,
                 const PreprocessOptions& options, const c10::Device& device);

}  // namespace voxaug::train
