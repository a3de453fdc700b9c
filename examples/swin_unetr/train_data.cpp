// Data sources and the once-per-volume preprocessing of the Swin UNETR training example.
#include "train_data.h"

#include <ATen/core/dispatch/Dispatcher.h>
#if VOXAUG_TRAIN_NIFTI
#include <nifti2_io.h>
#include <nlohmann/json.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <tuple>

#include "voxaug/spatial_transforms.h"
#include "voxaug/torch_ops.h"

namespace voxaug::train {
namespace fs = std::filesystem;

namespace {

template <class Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

#if VOXAUG_TRAIN_NIFTI
at::Tensor to_float(const void* data, int datatype, int64_t n, const std::string& path) {
  auto opts = at::TensorOptions().dtype(at::kFloat);
  auto make = [&](at::ScalarType t) {
    return at::from_blob(const_cast<void*>(data), {n}, at::TensorOptions().dtype(t))
        .to(at::kFloat);
  };
  switch (datatype) {
    case NIFTI_TYPE_UINT8: return make(at::kByte);
    case NIFTI_TYPE_INT8: return make(at::kChar);
    case NIFTI_TYPE_INT16: return make(at::kShort);
    case NIFTI_TYPE_UINT16: return make(at::kUInt16);
    case NIFTI_TYPE_INT32: return make(at::kInt);
    case NIFTI_TYPE_UINT32: return make(at::kUInt32);
    case NIFTI_TYPE_INT64: return make(at::kLong);
    case NIFTI_TYPE_FLOAT32: return make(at::kFloat);
    case NIFTI_TYPE_FLOAT64: return make(at::kDouble);
    default:
      (void)opts;
      throw std::runtime_error(path + ": unsupported NIfTI datatype " + std::to_string(datatype));
  }
}

#endif

std::string shape_str(const std::array<int64_t, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

}  // namespace

#if VOXAUG_TRAIN_NIFTI
RawVolume read_nifti(const std::string& path) {
  if (!fs::is_regular_file(path)) throw std::runtime_error("NIfTI file not found: " + path);
  nifti_image* nim = nifti_image_read(path.c_str(), 1);
  if (nim == nullptr || nim->data == nullptr) {
    if (nim) nifti_image_free(nim);
    throw std::runtime_error("cannot read NIfTI file " + path);
  }
  std::unique_ptr<nifti_image, void (*)(nifti_image*)> guard(nim, nifti_image_free);
  for (int d = 4; d <= 7; ++d) {
    if (nim->dim[0] >= d && nim->dim[d] > 1) {
      throw std::runtime_error(path + ": only 3-D volumes are supported (dim[" + std::to_string(d) +
                               "] = " + std::to_string(nim->dim[d]) + ")");
    }
  }
  const int64_t nx = nim->nx, ny = std::max<int64_t>(nim->ny, 1), nz = std::max<int64_t>(nim->nz, 1);
  at::Tensor flat = to_float(nim->data, nim->datatype, nx * ny * nz, path);
  if (nim->scl_slope != 0.0 && !(nim->scl_slope == 1.0 && nim->scl_inter == 0.0)) {
    flat = flat * static_cast<float>(nim->scl_slope) + static_cast<float>(nim->scl_inter);
  }
  RawVolume v;
  // The file stores i fastest: (k, j, i) in C order -> (i, j, k).
  v.data = flat.reshape({nz, ny, nx}).permute({2, 1, 0}).contiguous();
  // nibabel's choice (Nifti1Header.get_best_affine), so that MONAI's NibabelReader and this reader
  // agree: the sform when sform_code > 0, else the qform when qform_code > 0, else Analyze's
  // default (get_base_affine = shape_zoom_affine(shape, pixdim, x_flip=True)): diag(-dx, dy, dz)
  // with the volume's centre at the origin. nifticlib's qto_xyz for qform_code 0 is diag(dx, dy,
  // dz) at the origin instead: not what MONAI sees, so that case is built here. (A negative code
  // is invalid: nibabel still uses that transform, nifticlib drops it and so does this reader.
  // MONAI's LoadImage also swaps in the other transform when the chosen one's column norms
  // disagree with pixdim, rectify_header_sform_qform; that repair of broken headers is not done.)
  if (nim->sform_code > 0 || nim->qform_code > 0) {
    const nifti_dmat44& m = nim->sform_code > 0 ? nim->sto_xyz : nim->qto_xyz;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) v.affine[r][c] = m.m[r][c];
  } else {
    // nibabel: the first min(ndim, 3) of dim[1..] / pixdim[1..], 1 for the missing axes.
    const int64_t ndim = std::clamp<int64_t>(nim->dim[0], 0, 7);
    for (int a = 0; a < 3; ++a) {
      const double n = a < ndim ? static_cast<double>(nim->dim[a + 1]) : 1.0;
      const double zoom = (a < ndim ? nim->pixdim[a + 1] : 1.0) * (a == 0 ? -1.0 : 1.0);
      v.affine[a][a] = zoom;
      v.affine[a][3] = -(n - 1.0) / 2.0 * zoom;
    }
    v.affine[3][3] = 1.0;
  }
  return v;
}
#else
RawVolume read_nifti(const std::string& path) {
  throw std::runtime_error("cannot read " + path + ": voxaug_swin_train was built without nifticlib "
                           "(Debian libnifti2-dev); --dataset phantom needs no files");
}
#endif

Subject preprocess(const std::string& name, const at::Tensor& image, const at::Tensor& label,
                   const std::array<std::array<double, 4>, 4>& A, const PreprocessOptions& o,
                   const c10::Device& device) {
  TORCH_CHECK_VALUE(image.dim() == 3 && label.sizes() == image.sizes(), name,
                    ": image and label must be 3-D of the same size, got ", image.sizes(), " and ",
                    label.sizes());
  Subject s;
  s.name = name;
  std::array<int64_t, 3> n{image.size(0), image.size(1), image.size(2)};
  s.raw_shape = n;
  s.raw_affine = A;

  // Orientation("RAS") then Spacing(pixdim) with MONAI Spacingd's defaults (padding "border",
  // align_corners false, diagonal false, scale_extent false): voxaug::transforms, MONAI's
  // geometry (nibabel's io_orientation; zoom_affine keeps an oblique affine's rotation,
  // compute_shape_offset) on the host in float64. Image bilinear and label nearest share one
  // launch per transform; the orientation is an exact signed permutation, and Spacing copies
  // nothing when the reoriented affine already has the target spacing (the phantom).
  at::Tensor affine = at::empty({4, 4}, at::TensorOptions().dtype(at::kDouble));
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 4; ++c) affine[r][c] = A[r][c];
  const voxaug::transforms::Orientation orientation("RAS");
  const voxaug::transforms::Spacing spacing({o.pixdim[0], o.pixdim[1], o.pixdim[2]}, "bilinear",
                                            "border");
  at::Tensor img = image.to(device, at::kFloat).reshape({1, 1, n[0], n[1], n[2]});
  at::Tensor lbl = label.to(device, at::kByte).reshape({1, 1, n[0], n[1], n[2]});
  voxaug::transforms::Result res;
  try {
    voxaug::transforms::Result ras = orientation({img, lbl}, {}, affine);
    res = spacing(ras.outputs, {"", "nearest"}, ras.affine);
  } catch (const c10::Error& e) {  // e.g. a singular affine: say which volume
    throw std::runtime_error(name + ": " + e.what_without_backtrace());
  }
  // Voxel -> world of the resampled grid; the crop and the pad below shift its origin.
  at::Tensor grid_affine = res.affine.to(at::kCPU, at::kDouble).contiguous();
  std::array<double, 3> shift{0.0, 0.0, 0.0};  // preprocessed voxel 0 in resampled voxels
  img = voxaug::ops::scale_intensity_range(res.outputs[0], o.a_min, o.a_max, 0.0, 1.0, true);
  lbl = res.outputs[1];

  if (o.crop_foreground) {
    static auto bbox_op =
        op_handle<at::Tensor(const at::Tensor&, double, at::OptionalIntArrayRef)>(
            "voxaug::foreground_bbox");
    // Host read-back of the box: one synchronisation per volume, in preprocessing only.
    at::Tensor box = bbox_op.call(img, 0.0, std::nullopt).cpu();
    auto b = box.accessor<int64_t, 2>();
    if (b[0][3] > b[0][0] && b[0][4] > b[0][1] && b[0][5] > b[0][2]) {
      auto crop = [&](const at::Tensor& t) {
        return t.slice(2, b[0][0], b[0][3]).slice(3, b[0][1], b[0][4]).slice(4, b[0][2], b[0][5])
            .contiguous();
      };
      img = crop(img);
      lbl = crop(lbl);
      for (int a = 0; a < 3; ++a) shift[a] = static_cast<double>(b[0][a]);
    }
  }
  // SpatialPad to the roi where the volume is smaller (MONAI: diff // 2 before).
  std::vector<int64_t> pad(6, 0);
  bool any = false;
  for (int a = 0; a < 3; ++a) {
    const int64_t diff = o.roi[a] - img.size(2 + a);
    if (diff > 0) {
      pad[2 * (2 - a)] = diff / 2;
      pad[2 * (2 - a) + 1] = diff - diff / 2;
      shift[a] -= static_cast<double>(diff / 2);
      any = true;
    }
  }
  if (any) {
    img = at::constant_pad_nd(img, pad, 0.0);
    lbl = at::constant_pad_nd(lbl, pad, 0.0);
  }
  s.image = img.contiguous();
  s.label = lbl.contiguous();
  s.shape = {img.size(2), img.size(3), img.size(4)};
  // MONAI's affine updates for a crop / pad: affine @ translate(first kept voxel).
  auto g = grid_affine.accessor<double, 2>();
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) s.affine[r][c] = g[r][c];
    for (int c = 0; c < 3; ++c) s.affine[r][3] += g[r][c] * shift[c];
  }
  return s;
}

Dataset load_phantom(const PhantomOptions& p, const PreprocessOptions& o,
                     const c10::Device& device) {
  using PhantomSig = std::tuple<at::Tensor, at::Tensor>(int64_t, at::IntArrayRef, int64_t, int64_t,
                                                        int64_t, c10::Device);
  if (!c10::Dispatcher::singleton().findSchema({"voxaug::phantom", ""}).has_value()) {
    throw std::runtime_error(
        "--dataset phantom needs the voxaug::phantom op, which this libvoxaug_torch does not "
        "register; rebuild voxaug_torch or use --dataset mricron / msd");
  }
  auto phantom = op_handle<PhantomSig>("voxaug::phantom");
  Dataset ds;
  ds.num_classes = p.num_classes;
  const std::array<std::array<double, 4>, 4> affine{
      {{1.5, 0, 0, 0}, {0, 1.5, 0, 0}, {0, 0, 2.0, 0}, {0, 0, 0, 1}}};
  for (int64_t i = 0; i < p.train + p.val; ++i) {
    auto [img, lbl] = phantom.call(1, {p.size[0], p.size[1], p.size[2]}, p.num_classes, p.seed,
                                   i, device);
    Subject s = preprocess("phantom_" + std::to_string(i), img[0][0], lbl[0][0], affine, o, device);
    (i < p.train ? ds.train : ds.val).push_back(std::move(s));
  }
  ds.description = "synthetic phantom, " + std::to_string(p.train) + " training + " +
                   std::to_string(p.val) + " held-out validation subjects of " +
                   shape_str(p.size) + " voxels (1.5 x 1.5 x 2.0 mm), " +
                   std::to_string(p.num_classes) + " classes";
  return ds;
}

const std::vector<AalClass>& mricron_classes() {
  static const std::vector<AalClass> classes{
      {"caudate", 71, 72},     {"putamen", 73, 74},     {"pallidum", 75, 76},
      {"thalamus", 77, 78},    {"hippocampus", 37, 38}, {"amygdala", 41, 42}};
  return classes;
}

Dataset load_mricron(const std::string& dir, const PreprocessOptions& o,
                     const c10::Device& device) {
  RawVolume img = read_nifti((fs::path(dir) / "ch2.nii.gz").string());
  RawVolume aal = read_nifti((fs::path(dir) / "aal.nii.gz").string());
  TORCH_CHECK_VALUE(img.data.sizes() == aal.data.sizes(), "ch2 and aal grids differ");
  at::Tensor lut = at::zeros({256}, at::TensorOptions().dtype(at::kByte));
  const auto& cls = mricron_classes();
  for (size_t c = 0; c < cls.size(); ++c) {
    lut[cls[c].left] = static_cast<int64_t>(c + 1);
    lut[cls[c].right] = static_cast<int64_t>(c + 1);
  }
  at::Tensor label = lut.index({aal.data.round().clamp(0, 255).to(at::kLong)});
  Dataset ds;
  ds.num_classes = static_cast<int64_t>(cls.size()) + 1;
  ds.val_held_out = false;
  ds.train.push_back(preprocess("ch2", img.data, label, img.affine, o, device));
  ds.val.push_back(ds.train.back());
  ds.description = "mricron ch2 + AAL (one subject; validation on the training subject, NOT held "
                   "out), " + std::to_string(ds.num_classes) + " classes";
  return ds;
}

#if VOXAUG_TRAIN_NIFTI
Dataset load_msd(const std::string& dir, int64_t num_classes, int64_t max_subjects,
                 const PreprocessOptions& o, const c10::Device& device) {
  const fs::path root(dir);
  const fs::path json_path = root / "dataset.json";
  std::ifstream f(json_path);
  if (!f) throw std::runtime_error("--data-dir: cannot open " + json_path.string());
  nlohmann::json j;
  try {
    f >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error(json_path.string() + ": invalid JSON: " + e.what());
  }
  if (!j.contains("training") || !j["training"].is_array() || j["training"].empty()) {
    throw std::runtime_error(json_path.string() + ": needs a non-empty \"training\" list");
  }
  using Pair = std::pair<std::string, std::string>;
  auto read_list = [&](const nlohmann::json& list) {
    std::vector<Pair> out;
    for (const auto& e : list) {
      if (!e.contains("image") || !e.contains("label")) {
        throw std::runtime_error(json_path.string() + ": every entry needs \"image\" and \"label\"");
      }
      out.emplace_back((root / e["image"].get<std::string>()).lexically_normal().string(),
                       (root / e["label"].get<std::string>()).lexically_normal().string());
    }
    return out;
  };
  std::vector<Pair> train = read_list(j["training"]), val;
  Dataset ds;
  if (j.contains("validation") && j["validation"].is_array() && !j["validation"].empty()) {
    val = read_list(j["validation"]);
  } else {
    TORCH_CHECK_VALUE(train.size() >= 2, json_path.string(),
                      ": needs at least 2 training entries to hold out a validation subject");
    const size_t nval = std::max<size_t>(1, train.size() / 5);
    val.assign(train.end() - static_cast<std::ptrdiff_t>(nval), train.end());
    train.resize(train.size() - nval);
  }
  if (max_subjects > 0) {
    if (train.size() > static_cast<size_t>(max_subjects)) train.resize(max_subjects);
    if (val.size() > static_cast<size_t>(max_subjects)) val.resize(max_subjects);
  }
  int64_t K = num_classes;
  if (K <= 0 && j.contains("labels") && j["labels"].is_object()) K = j["labels"].size();
  int64_t max_label = 0;
  auto load = [&](const std::vector<Pair>& list, std::vector<Subject>& outv) {
    for (const auto& [ip, lp] : list) {
      RawVolume img = read_nifti(ip);
      RawVolume lbl = read_nifti(lp);
      TORCH_CHECK_VALUE(img.data.sizes() == lbl.data.sizes(), ip, " and ", lp,
                        " have different sizes ", img.data.sizes(), " vs ", lbl.data.sizes());
      at::Tensor l = lbl.data.round();
      const double lo = l.min().item<double>(), hi = l.max().item<double>();
      TORCH_CHECK_VALUE(lo >= 0 && hi <= 255, lp, ": labels must be in [0, 255], got [", lo, ", ",
                        hi, "]");
      max_label = std::max<int64_t>(max_label, static_cast<int64_t>(hi));
      outv.push_back(preprocess(fs::path(ip).filename().string(), img.data, l.to(at::kByte),
                                img.affine, o, device));
    }
  };
  load(train, ds.train);
  load(val, ds.val);
  if (K <= 0) K = max_label + 1;
  TORCH_CHECK_VALUE(max_label < K, "--data-dir: label value ", max_label,
                    " does not fit num_classes = ", K);
  TORCH_CHECK_VALUE(K >= 2, "--data-dir: need at least 2 classes, got ", K);
  ds.num_classes = K;
  ds.description = "MSD directory " + dir + ": " + std::to_string(ds.train.size()) +
                   " training + " + std::to_string(ds.val.size()) + " validation subjects, " +
                   std::to_string(K) + " classes";
  return ds;
}
#else
Dataset load_msd(const std::string& dir, int64_t, int64_t, const PreprocessOptions&,
                 const c10::Device&) {
  throw std::runtime_error("--dataset msd (" + dir + "): voxaug_swin_train was built without "
                           "nifticlib and nlohmann-json (Debian libnifti2-dev, nlohmann-json3-dev)");
}
#endif

}  // namespace voxaug::train
