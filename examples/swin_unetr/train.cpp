// voxaug_swin_train: MONAI's Swin UNETR BTCV training pipeline in LibTorch C++, with every
// per-step augmentation on the training device through voxaug's ops (REFERENCES.md section 1).
//
//   data (once):  voxaug::transforms::Orientation("RAS") + Spacing (MONAI's, tested) ->
//                 ScaleIntensityRange -> CropForeground -> pad to roi, cached on the device
//   data (step):  RandCropByPosNegLabel x num_samples (pos_neg_crop_centers + extract_patches)
//                 -> RandFlip x3 + RandRotate90 as ONE resample of image + label with per-sample
//                 matrices drawn on the host -> RandShiftIntensity
//   model:        voxaug::models::SwinUNETR (MONAI key names), DiceCE loss in float32, AdamW,
//                 autocast bf16 / fp16 (+ gradient scaler) / off
//   validation:   voxaug::sliding_window_inference (roi, sw_batch_size 4, overlap 0.25), argmax,
//                 Dice per foreground class on the device (MONAI DiceMetric)
//   outputs:      train.csv, training_curve.png, validation.png, checkpoint.pt (last) and
//                 checkpoint_best.pt (torch.load-able dicts of MONAI-named tensors)
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#if VOXAUG_TRAIN_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include "state_dict_io.h"
#include "swin_unetr.h"
#include "train_data.h"
#include "train_png.h"
#include "voxaug/sliding_window.h"

namespace fs = std::filesystem;
using voxaug::train::Dataset;
using voxaug::train::Subject;

namespace {

// ---------------------------------------------------------------- command line

struct Args {
  std::string dataset = "phantom";
  std::string data_dir;
  std::string device;  // "" -> cuda when available, else cpu
  std::string out = "swin_train_out";
  std::string init;  // a state-dict checkpoint to start from (MONAI's or this program's)
  std::string resume;  // an output directory of an earlier run to continue
  std::string dump_dir;  // --dump-preprocessed: write the preprocessed subjects here, then exit
  std::optional<int64_t> steps, val_every, log_every, feature_size, num_classes;
  std::optional<std::array<int64_t, 3>> roi, phantom_size;
  std::optional<int64_t> phantom_train, phantom_val;
  std::optional<int64_t> num_samples;
  int64_t batch_volumes = 1, sw_batch_size = 4, max_subjects = 0, threads = 0;
  double pos = 1.0, neg = 1.0, overlap = 0.25;
  double flip_prob = 0.1, rot90_prob = 0.1, shift_offset = 0.1, shift_prob = 0.5;
  // The optional heavy chain (--heavy sets the probabilities that were not given).
  std::optional<double> affine_prob, elastic_prob, noise_prob;
  double rotate_range = 0.26, scale_range = 0.1, elastic_max = 4.0, noise_std = 0.1;
  bool heavy = false;
  double lr = 1e-4, weight_decay = 1e-5, clip = 0.0;
  std::optional<double> a_min, a_max;
  std::array<double, 3> pixdim{1.5, 1.5, 2.0};
  std::string amp;  // "" -> bf16 on cuda, off on cpu
  int64_t seed = 0;
  bool use_checkpoint = false, profile_data = false, check_forward = false, save_ckpt = true;
};

void print_help(const char* argv0) {
  std::string cls;
  for (const auto& c : voxaug::train::mricron_classes()) {
    if (!cls.empty()) cls += ", ";
    cls += std::to_string(&c - voxaug::train::mricron_classes().data() + 1) + " " + c.name +
           " (AAL " + std::to_string(c.left) + "+" + std::to_string(c.right) + ")";
  }
  std::printf(
      "usage: %s [options]\n"
      "MONAI's Swin UNETR BTCV training pipeline in LibTorch C++, augmentation on the device\n"
      "with voxaug. CPU defaults are a tiny configuration (a few minutes on 2 cores).\n\n"
      "data\n"
      "  --dataset NAME        phantom (default) | mricron | msd\n"
      "                        phantom: voxaug::phantom subjects (CT-like HU images), training\n"
      "                          subjects 0..T-1, held-out validation subjects T..T+V-1, voxels\n"
      "                          taken as 1.5 x 1.5 x 2.0 mm\n"
      "                        mricron: ch2.nii.gz + aal.nii.gz (Colin27, 1 mm); classes 0\n"
      "                          background, %s; ONE subject: validation runs on the training\n"
      "                          subject (not held out)\n"
      "                        msd: an MSD/BTCV directory (--data-dir) with dataset.json\n"
      "                          (\"training\" list of {image, label}, optional \"validation\",\n"
      "                          else the last 20%% of \"training\" is held out)\n"
      "  --data-dir DIR        msd: the dataset directory; mricron: the templates directory\n"
      "                        (default /usr/share/mricron/templates)\n"
      "  --max-subjects N      msd: keep the first N subjects of each list (0: all)\n"
      "  --num-classes K       classes including background (phantom: cpu 5, cuda 14;\n"
      "                        msd: len(labels) of dataset.json, else max label + 1)\n"
      "  --phantom-train T     phantom training subjects (cpu 6, cuda 24)\n"
      "  --phantom-val V       phantom validation subjects (cpu 2, cuda 6)\n"
      "  --phantom-size D,H,W  phantom volume size (cpu 48, cuda 160,160,128)\n"
      "preprocessing (once per volume, on the device)\n"
      "  --pixdim X,Y,Z        Spacing target in mm (default 1.5,1.5,2.0)\n"
      "  --a-min A --a-max B   ScaleIntensityRange -> [0, 1] with clip (default -175, 250;\n"
      "                        mricron 0, 255)\n"
      "  --dump-preprocessed DIR  write each subject's preprocessed volumes to DIR/<name>.pt\n"
      "                        (torch.load-able dict: image (1, 1, D, H, W) float32, label\n"
      "                        (1, 1, D, H, W) uint8, affine (4, 4) float64 voxel -> world\n"
      "                        mm RAS, raw_shape (3,) int64, raw_affine (4, 4) float64: the\n"
      "                        file's affine as nibabel reads it) and exit without training\n"
      "augmentation (every step, on the device)\n"
      "  --roi N or D,H,W      patch / window size, multiples of 32 (cpu 32, cuda 96); at 32 the\n"
      "                        deepest hidden state is 1 voxel and its instance norm outputs 0\n"
      "                        (MONAI refuses that size): a smoke-test size, use >= 64 to learn\n"
      "  --num-samples N       RandCropByPosNegLabel crops per volume (cuda 4, cpu 1)\n"
      "  --pos P --neg N       crop ratio (default 1, 1)\n"
      "  --batch-volumes B     volumes per step (default 1, as the BTCV tutorial)\n"
      "  --flip-prob P         RandFlip per axis (default 0.1)\n"
      "  --rot90-prob P        RandRotate90 in the plane of axes 0, 1, max_k 3 (default 0.1)\n"
      "  --shift-offset O      RandShiftIntensity offsets (default 0.1)\n"
      "  --shift-prob P        RandShiftIntensity probability (default 0.5)\n"
      "  --heavy               add the heavy chain after the BTCV steps, fused into the same\n"
      "                        gather: RandAffine (p 0.2), elastic (p 0.2), RandGaussianNoise\n"
      "                        (p 0.1); the flags below set a step alone\n"
      "  --affine-prob P       RandAffine per patch: rotation U(-R, R) rad about each axis,\n"
      "                        scale 1 + U(-S, S) per axis, about the patch centre\n"
      "  --rotate-range R      (default 0.26) --scale-range S (default 0.1)\n"
      "  --elastic-prob P      B-spline elastic per patch: 7 control points per axis (TorchIO's\n"
      "                        grid layout, 2 locked border layers), displacements\n"
      "                        U(-E, E) voxels, out(x) = in(M (x + u(x)))\n"
      "  --elastic-max E       (default 4)\n"
      "  --noise-prob P        RandGaussianNoise(mean 0, std --noise-std (default 0.1))\n"
      "model and optimisation\n"
      "  --feature-size F      SwinUNETR feature size (cpu 12, cuda 48)\n"
      "  --init PATH           start from the weights of a state-dict checkpoint (torch.save's\n"
      "                        zip format): this program's checkpoint.pt, or a MONAI\n"
      "                        SwinUNETR's torch.save(net.state_dict(), PATH), also under\n"
      "                        a \"state_dict\", \"model\", \"network\" or \"net\" key next\n"
      "                        to other entries (epoch, optimizer state); float32 / float64 /\n"
      "                        float16 / bfloat16 tensors; strict: every key and shape must\n"
      "                        match --feature-size and the classes; a DataParallel / DDP\n"
      "                        checkpoint (every key \"module.<name>\") loads without the prefix\n"
      "  --resume DIR          continue an earlier run from DIR/checkpoint.pt and\n"
      "                        DIR/train_state.pt (written at every validation and at the end:\n"
      "                        AdamW moments and steps, the gradient scaler, the step, the\n"
      "                        epoch order, the best Dice) up to --steps; the data draws are\n"
      "                        keyed by the step, so on the CPU the run continues exactly as an\n"
      "                        uninterrupted one. Same data and model options as the first run;\n"
      "                        with --out DIR, train.csv is continued\n"
      "  --use-checkpoint      gradient checkpointing of the Swin blocks\n"
      "  --amp MODE            bf16 | fp16 | off (default: bf16 on cuda, off on cpu); fp16 uses\n"
      "                        a gradient scaler (init 65536, growth 2, backoff 0.5, interval\n"
      "                        2000) that reads found_inf back once per step, as GradScaler\n"
      "  --lr LR               AdamW learning rate (default 1e-4)\n"
      "  --weight-decay W      AdamW weight decay (default 1e-5)\n"
      "  --clip C              clip the gradient norm to C after unscaling (default 0: off, as\n"
      "                        the MONAI tutorial); computed on the device without a sync\n"
      "  --steps N             training steps (cpu 40, cuda 5000)\n"
      "  --seed S              seed of the model initialisation and all draws (default 0);\n"
      "                        CPU runs are deterministic for a fixed seed and thread count\n"
      "  --threads N           CPU threads for LibTorch (default: LibTorch's choice)\n"
      "validation and outputs\n"
      "  --val-every N         validate every N steps and after the last (cpu 20, cuda 500)\n"
      "  --sw-batch-size N     sliding-window batch (default 4)\n"
      "  --overlap O           sliding-window overlap (default 0.25)\n"
      "  --log-every N         progress line and CSV flush every N steps (cpu 5, cuda 50)\n"
      "  --out DIR             output directory (default swin_train_out): train.csv,\n"
      "                        training_curve.png, validation.png, checkpoint.pt (last),\n"
      "                        checkpoint_best.pt (best validation Dice)\n"
      "  --no-checkpoint-files do not write the .pt files\n"
      "  --check-forward       after training, write forward_check.pt {input, output}: the\n"
      "                        final model's float32 forward on a fixed 64^3 input (the\n"
      "                        smallest size MONAI's SwinUNETR accepts); and this run's first\n"
      "                        step: first_logits (as the model gave them), first_label,\n"
      "                        first_loss (the DiceCE value trained on), first_step\n"
      "  --device cpu|cuda     default cuda when available\n"
      "  --profile-data        cuda: synchronise around the augmentation so data_ms is its\n"
      "                        device time (off: data_ms is the host enqueue time)\n"
      "timing: steps/s = steps between two progress lines / wall time between them minus\n"
      "validation time; each progress line reads the losses back (the only per-interval sync).\n",
      argv0, cls.c_str());
}

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo) {
  try {
    size_t pos = 0;
    const long long x = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument("trailing");
    if (x < lo) fail(flag + " must be >= " + std::to_string(lo) + ", got " + v);
    return x;
  } catch (const std::logic_error&) {
    fail(flag + " expects an integer, got '" + v + "'");
  }
}

double parse_double(const std::string& flag, const std::string& v) {
  try {
    size_t pos = 0;
    const double x = std::stod(v, &pos);
    if (pos != v.size() || !std::isfinite(x)) throw std::invalid_argument("bad");
    return x;
  } catch (const std::logic_error&) {
    fail(flag + " expects a number, got '" + v + "'");
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

std::array<int64_t, 3> parse_int3(const std::string& flag, const std::string& v, int64_t lo) {
  auto parts = split(v);
  if (parts.size() == 1) parts = {parts[0], parts[0], parts[0]};
  if (parts.size() != 3) fail(flag + " expects N or D,H,W, got '" + v + "'");
  return {parse_int(flag, parts[0], lo), parse_int(flag, parts[1], lo),
          parse_int(flag, parts[2], lo)};
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) fail(f + " needs a value");
      return argv[++i];
    };
    auto prob = [&]() {
      const double p = parse_double(f, val());
      if (p < 0 || p > 1) fail(f + " must be in [0, 1]");
      return p;
    };
    if (f == "--help" || f == "-h") {
      print_help(argv[0]);
      std::exit(0);
    } else if (f == "--dataset") {
      a.dataset = val();
      if (a.dataset != "phantom" && a.dataset != "mricron" && a.dataset != "msd")
        fail("--dataset must be phantom, mricron or msd, got '" + a.dataset + "'");
    } else if (f == "--data-dir") {
      a.data_dir = val();
    } else if (f == "--dump-preprocessed") {
      a.dump_dir = val();
      if (a.dump_dir.empty()) fail("--dump-preprocessed expects a directory, got ''");
      if (fs::exists(a.dump_dir) && !fs::is_directory(a.dump_dir))
        fail("--dump-preprocessed expects a directory, got the file " + a.dump_dir);
    } else if (f == "--device") {
      a.device = val();
      if (a.device != "cpu" && a.device != "cuda")
        fail("--device must be cpu or cuda, got '" + a.device + "'");
    } else if (f == "--out") {
      a.out = val();
    } else if (f == "--steps") {
      a.steps = parse_int(f, val(), 1);
    } else if (f == "--val-every") {
      a.val_every = parse_int(f, val(), 1);
    } else if (f == "--log-every") {
      a.log_every = parse_int(f, val(), 1);
    } else if (f == "--feature-size") {
      a.feature_size = parse_int(f, val(), 12);
      if (*a.feature_size % 12 != 0) fail("--feature-size must be divisible by 12");
    } else if (f == "--num-classes") {
      a.num_classes = parse_int(f, val(), 2);
      if (*a.num_classes > 255) fail("--num-classes must be <= 255 (uint8 labels)");
    } else if (f == "--roi") {
      a.roi = parse_int3(f, val(), 32);
      for (int64_t r : *a.roi)
        if (r % 32 != 0) fail("--roi sizes must be multiples of 32 (SwinUNETR), got " + std::to_string(r));
    } else if (f == "--phantom-size") {
      a.phantom_size = parse_int3(f, val(), 8);
    } else if (f == "--phantom-train") {
      a.phantom_train = parse_int(f, val(), 1);
    } else if (f == "--phantom-val") {
      a.phantom_val = parse_int(f, val(), 1);
    } else if (f == "--num-samples") {
      a.num_samples = parse_int(f, val(), 1);
    } else if (f == "--batch-volumes") {
      a.batch_volumes = parse_int(f, val(), 1);
    } else if (f == "--sw-batch-size") {
      a.sw_batch_size = parse_int(f, val(), 1);
    } else if (f == "--max-subjects") {
      a.max_subjects = parse_int(f, val(), 0);
    } else if (f == "--threads") {
      a.threads = parse_int(f, val(), 1);
    } else if (f == "--pos") {
      a.pos = parse_double(f, val());
      if (a.pos < 0) fail("--pos must be >= 0");
    } else if (f == "--neg") {
      a.neg = parse_double(f, val());
      if (a.neg < 0) fail("--neg must be >= 0");
    } else if (f == "--overlap") {
      a.overlap = parse_double(f, val());
      if (a.overlap < 0 || a.overlap >= 1) fail("--overlap must be in [0, 1)");
    } else if (f == "--flip-prob") {
      a.flip_prob = prob();
    } else if (f == "--rot90-prob") {
      a.rot90_prob = prob();
    } else if (f == "--shift-prob") {
      a.shift_prob = prob();
    } else if (f == "--shift-offset") {
      a.shift_offset = parse_double(f, val());
      if (a.shift_offset < 0) fail("--shift-offset must be >= 0");
    } else if (f == "--lr") {
      a.lr = parse_double(f, val());
      if (a.lr <= 0) fail("--lr must be > 0");
    } else if (f == "--weight-decay") {
      a.weight_decay = parse_double(f, val());
      if (a.weight_decay < 0) fail("--weight-decay must be >= 0");
    } else if (f == "--clip") {
      a.clip = parse_double(f, val());
      if (a.clip < 0) fail("--clip must be >= 0");
    } else if (f == "--a-min") {
      a.a_min = parse_double(f, val());
    } else if (f == "--a-max") {
      a.a_max = parse_double(f, val());
    } else if (f == "--pixdim") {
      auto p = split(val());
      if (p.size() == 1) p = {p[0], p[0], p[0]};
      if (p.size() != 3) fail("--pixdim expects X or X,Y,Z");
      for (int k = 0; k < 3; ++k) {
        a.pixdim[k] = parse_double(f, p[k]);
        if (a.pixdim[k] <= 0) fail("--pixdim entries must be > 0");
      }
    } else if (f == "--amp") {
      a.amp = val();
      if (a.amp != "bf16" && a.amp != "fp16" && a.amp != "off")
        fail("--amp must be bf16, fp16 or off, got '" + a.amp + "'");
    } else if (f == "--init") {
      a.init = val();
      if (!fs::is_regular_file(a.init)) fail("--init: no file " + a.init);
    } else if (f == "--resume") {
      a.resume = val();
      for (const char* file : {"checkpoint.pt", "train_state.pt"})
        if (!fs::is_regular_file(fs::path(a.resume) / file))
          fail("--resume: no " + (fs::path(a.resume) / file).string() +
               " (a run writes them at each validation and at the end)");
    } else if (f == "--heavy") {
      a.heavy = true;
    } else if (f == "--affine-prob") {
      a.affine_prob = prob();
    } else if (f == "--elastic-prob") {
      a.elastic_prob = prob();
    } else if (f == "--noise-prob") {
      a.noise_prob = prob();
    } else if (f == "--rotate-range") {
      a.rotate_range = parse_double(f, val());
      if (a.rotate_range < 0) fail("--rotate-range must be >= 0");
    } else if (f == "--scale-range") {
      a.scale_range = parse_double(f, val());
      if (a.scale_range < 0 || a.scale_range >= 1) fail("--scale-range must be in [0, 1)");
    } else if (f == "--elastic-max") {
      a.elastic_max = parse_double(f, val());
      if (a.elastic_max < 0) fail("--elastic-max must be >= 0");
    } else if (f == "--noise-std") {
      a.noise_std = parse_double(f, val());
      if (a.noise_std < 0) fail("--noise-std must be >= 0");
    } else if (f == "--seed") {
      a.seed = parse_int(f, val(), 0);
    } else if (f == "--use-checkpoint") {
      a.use_checkpoint = true;
    } else if (f == "--profile-data") {
      a.profile_data = true;
    } else if (f == "--check-forward") {
      a.check_forward = true;
    } else if (f == "--no-checkpoint-files") {
      a.save_ckpt = false;
    } else {
      fail("unknown argument '" + f + "'");
    }
  }
  if (a.heavy) {  // nnU-Net-like probabilities for the steps not set explicitly
    if (!a.affine_prob) a.affine_prob = 0.2;
    if (!a.elastic_prob) a.elastic_prob = 0.2;
    if (!a.noise_prob) a.noise_prob = 0.1;
  }
  if (a.dataset == "msd" && a.data_dir.empty()) fail("--dataset msd needs --data-dir DIR");
  if (!a.init.empty() && !a.resume.empty()) fail("--init and --resume exclude each other");
  if (!a.resume.empty() && !a.save_ckpt) fail("--resume needs the checkpoint files (drop --no-checkpoint-files)");
  if (a.pos + a.neg <= 0) fail("--pos + --neg must be > 0");
  if (a.a_min && a.a_max && *a.a_min == *a.a_max) fail("--a-min and --a-max must differ");
  return a;
}

// ---------------------------------------------------------------- helpers

struct Range {  // NVTX range (no-op without CUDA)
  explicit Range(const char* name) {
#if VOXAUG_TRAIN_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~Range() {
#if VOXAUG_TRAIN_NVTX
    nvtxRangePop();
#endif
  }
};

// torch.autocast as a scope: enabled state, dtype and nesting of one device type.
class Autocast {
 public:
  Autocast(bool enabled, at::DeviceType type, at::ScalarType dtype) : on_(enabled), type_(type) {
    if (!on_) return;
    prev_enabled_ = at::autocast::is_autocast_enabled(type_);
    prev_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, dtype);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(type_, prev_enabled_);
    at::autocast::set_autocast_dtype(type_, prev_dtype_);
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_, prev_enabled_ = false;
  at::DeviceType type_;
  at::ScalarType prev_dtype_ = at::kFloat;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <class Sig>
c10::TypedOperatorHandle<Sig> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// ---------------------------------------------------------------- augmentation

struct Augmenter {
  const Args& args;
  std::array<int64_t, 3> roi;
  int64_t num_samples;
  c10::Device device;

  // MONAI RandFlip (x3), RandRotate90 (axes 0, 1) and, in the heavy chain, RandAffine as one
  // output-index -> patch-index map (without RandAffine a signed permutation: resample copies
  // it exactly). Returns false for the identity.
  bool draw_matrix(std::mt19937_64& rng, double* m) const {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double M[4][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
    auto mul = [&](const double B[4][4]) {
      double C[4][4];
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) {
          C[r][c] = 0;
          for (int k = 0; k < 4; ++k) C[r][c] += M[r][k] * B[k][c];
        }
      std::memcpy(M, C, sizeof M);
    };
    bool any = false;
    for (int a = 0; a < 3; ++a) {  // out[.., i_a, ..] = in[.., S_a - 1 - i_a, ..]
      if (u(rng) < args.flip_prob) {
        double F[4][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
        F[a][a] = -1;
        F[a][3] = static_cast<double>(roi[a] - 1);
        mul(F);
        any = true;
      }
    }
    if (u(rng) < args.rot90_prob) {
      const int k = 1 + static_cast<int>(u(rng) * 3.0);  // MONAI: randint(max_k) + 1
      const double n = static_cast<double>(roi[0] - 1);  // roi[0] == roi[1] (checked)
      double R[4][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
      if (k == 1) {  // np.rot90 k=1: out[p, q] = in[q, n - p]
        R[0][1] = 1;
        R[1][0] = -1, R[1][3] = n;
      } else if (k == 2) {  // out[p, q] = in[n - p, n - q]
        R[0][0] = -1, R[0][3] = n;
        R[1][1] = -1, R[1][3] = n;
      } else {  // k=3: out[p, q] = in[n - q, p]
        R[0][1] = -1, R[0][3] = n;
        R[1][0] = 1;
      }
      mul(R);
      any = true;
    }
    if (args.affine_prob.value_or(0.0) > 0.0 && u(rng) < *args.affine_prob) {
      // MONAI RandAffine about the patch centre c: p = A (o - c) + c with A = R0 R1 R2 S,
      // R_a a rotation by U(-R, R) in the plane of the other two axes, S = diag(1 + U(-S, S)).
      double A[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
      for (int a = 0; a < 3; ++a) {
        const double t = (2.0 * u(rng) - 1.0) * args.rotate_range, c = std::cos(t), sn = std::sin(t);
        const int i = (a + 1) % 3, j = (a + 2) % 3;
        double Ra[3][3] = {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, C[3][3];
        Ra[i][i] = c, Ra[i][j] = -sn, Ra[j][i] = sn, Ra[j][j] = c;
        for (int r = 0; r < 3; ++r)
          for (int q = 0; q < 3; ++q) C[r][q] = A[r][0] * Ra[0][q] + A[r][1] * Ra[1][q] + A[r][2] * Ra[2][q];
        std::memcpy(A, C, sizeof A);
      }
      for (int a = 0; a < 3; ++a) {
        const double f = 1.0 + (2.0 * u(rng) - 1.0) * args.scale_range;
        for (int r = 0; r < 3; ++r) A[r][a] *= f;
      }
      double T[4][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}};
      for (int r = 0; r < 3; ++r) {
        double t = 0.5 * static_cast<double>(roi[r] - 1);
        for (int q = 0; q < 3; ++q) {
          T[r][q] = A[r][q];
          t -= A[r][q] * 0.5 * static_cast<double>(roi[q] - 1);
        }
        T[r][3] = t;
      }
      mul(T);
      any = true;
    }
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) m[4 * r + c] = M[r][c];
    return any;
  }

  // One training batch: (V * num_samples, 1, roi) float32 image and uint8 label, on the device.
  // The crop and the flips / rotation are one gather (resample_patches: each patch's signed
  // permutation map plus its crop start; exact copies). No host synchronisation (matrices
  // travel through pinned memory, non_blocking).
  std::pair<at::Tensor, at::Tensor> operator()(const std::vector<const Subject*>& vols,
                                               int64_t step) const {
    static auto centers_op =
        op_handle<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double, double,
                             int64_t, at::IntArrayRef, int64_t, int64_t,
                             const std::optional<at::Tensor>&)>("voxaug::pos_neg_crop_centers");
    static auto patches_op =
        op_handle<std::vector<at::Tensor>(at::TensorList, const at::Tensor&, const at::Tensor&,
                                          at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
                                          at::ArrayRef<double>, bool)>("voxaug::resample_patches");
    static auto patches_post_op = op_handle<std::vector<at::Tensor>(
        at::TensorList, const at::Tensor&, const at::Tensor&, at::IntArrayRef, at::IntArrayRef,
        at::IntArrayRef, at::ArrayRef<double>, bool, int64_t, at::IntArrayRef, at::IntArrayRef,
        at::ArrayRef<double>, at::IntArrayRef, const c10::List<std::optional<at::Tensor>>&,
        int64_t)>("voxaug::resample_patches_post");
    const uint64_t key = splitmix64(static_cast<uint64_t>(args.seed) * 0x100000001B3ull +
                                    static_cast<uint64_t>(step));
    const at::IntArrayRef size(roi.data(), 3);
    const int64_t V = static_cast<int64_t>(vols.size());
    std::mt19937_64 rng(splitmix64(key));
    at::Tensor mats = at::empty(
        {V * num_samples, 3, 4},
        at::TensorOptions().dtype(at::kDouble).pinned_memory(device.is_cuda()));
    const int64_t B = V * num_samples;
    for (int64_t b = 0; b < B; ++b) draw_matrix(rng, mats.data_ptr<double>() + 12 * b);
    const at::Tensor mats_dev = mats.to(device, /*non_blocking=*/true);
    if (!half_.defined()) {  // once: a copy from pageable memory would sync the host
      half_ = at::tensor({roi[0] / 2, roi[1] / 2, roi[2] / 2}, at::TensorOptions().dtype(at::kLong))
                  .to(device);
    }
    const at::Tensor& half = half_;
    // Heavy chain: which patches get an elastic field (the others get a zero field).
    at::Tensor field;
    if (args.elastic_prob.value_or(0.0) > 0.0 && args.elastic_max > 0.0) {
      std::uniform_real_distribution<double> u(0.0, 1.0);
      at::Tensor on = at::empty({B, 1, 1, 1, 1},
                                at::TensorOptions().dtype(at::kFloat).pinned_memory(device.is_cuda()));
      bool any = false;
      for (int64_t b = 0; b < B; ++b) {
        const bool e = u(rng) < *args.elastic_prob;
        on.data_ptr<float>()[b] = e ? 1.0f : 0.0f;
        any |= e;
      }
      if (any) field = elastic_field(on.to(device, /*non_blocking=*/true), key);
    }
    // RandShiftIntensity (the pointwise_chain list form: op 1 shift, flag 8 random; params
    // value, low, high, ..., prob): inside the plain gather it runs on the patches as they are
    // stored (no second pass); after the deformed gather, in place. Either way the same bits:
    // batch sample v * num_samples + k is sample k of volume v's launch at first_sample
    // v * num_samples.
    const bool shift = args.shift_prob > 0 && args.shift_offset > 0;
    const int64_t shift_seed = static_cast<int64_t>(splitmix64(key ^ 0x5bd1e995) >> 1);
    const std::vector<double> post_params = {
        0.0, -args.shift_offset, args.shift_offset, 0.0, 0.0, 0.0, 0.0, args.shift_prob};
    const c10::List<std::optional<at::Tensor>> no_values({std::optional<at::Tensor>()});
    bool shifted = false;
    std::vector<at::Tensor> imgs, lbls;
    for (int64_t v = 0; v < V; ++v) {
      // RandCropByPosNegLabel(pos, neg, num_samples, image_threshold 0): Philox keyed by the
      // step, sample slot v. A patch starts at centre - roi // 2 (MONAI's crop).
      const at::Tensor c = centers_op.call(vols[v]->label, vols[v]->image, 0.0,
                                           args.pos / (args.pos + args.neg), num_samples, size,
                                           static_cast<int64_t>(key >> 1), v,
                                           vols[v]->crop_counts);
      const at::Tensor m = mats_dev.narrow(0, v * num_samples, num_samples);
      std::vector<at::Tensor> out;
      if (!field.defined()) {
        if (shift)
          out = patches_post_op.call({vols[v]->image, vols[v]->label}, m, c - half, size, {1, 0},
                                     {0, 0}, {0.0, 0.0}, false, 0, {1}, {8}, post_params,
                                     {shift_seed}, no_values, v * num_samples);
        else
          out = patches_op.call({vols[v]->image, vols[v]->label}, m, c - half, size, {1, 0},
                                {0, 0}, {0.0, 0.0}, false);
        shifted = shift;
      } else {
        // Crop, flips, rotation, affine and elastic in one gather: the volume read once per
        // patch (a stride-0 batch), the crop start added to the matrices on the device.
        static auto deformed_op = op_handle<std::vector<at::Tensor>(
            at::TensorList, const at::Tensor&, const at::Tensor&, int64_t, at::ArrayRef<double>,
            at::ArrayRef<double>, at::IntArrayRef, at::IntArrayRef, at::IntArrayRef,
            at::ArrayRef<double>, bool, const std::optional<at::Tensor>&,
            const std::optional<at::Tensor>&)>("voxaug::resample_deformed");
        at::Tensor mv = m.clone();
        mv.select(2, 3).add_((c - half).reshape({-1, 3}).to(at::kDouble));
        const std::vector<at::Tensor> in = {
            vols[v]->image.expand({num_samples, -1, -1, -1, -1}),
            vols[v]->label.expand({num_samples, -1, -1, -1, -1})};
        std::array<double, 3> scale{}, offset{};
        for (int a = 0; a < 3; ++a) {  // SimpleITK's control grid over the patch (TorchIO)
          const double spacing = (static_cast<double>(roi[a]) + 0.25) / (kControlPoints - 3);
          scale[a] = 1.0 / spacing;
          offset[a] = 0.625 / spacing + 1.0;
        }
        out = deformed_op.call(in, mv, field.narrow(0, v * num_samples, num_samples), 1, scale,
                               offset, size, {1, 0}, {0, 0}, {0.0, 0.0}, false, std::nullopt,
                               std::nullopt);
      }
      imgs.push_back(out[0]);
      lbls.push_back(out[1]);
    }
    at::Tensor img = imgs.size() == 1 ? imgs[0] : at::cat(imgs);
    at::Tensor lbl = lbls.size() == 1 ? lbls[0] : at::cat(lbls);
    // The intensity steps update the batch in place: it is this step's own buffer.
    static auto shift_op =
        op_handle<void(at::Tensor&, double, double, double, int64_t, bool, int64_t)>(
            "voxaug::rand_shift_intensity_");
    static auto noise_op =
        op_handle<void(at::Tensor&, double, double, bool, double, int64_t, int64_t)>(
            "voxaug::rand_gaussian_noise_");
    if (shift && !shifted)
      shift_op.call(img, -args.shift_offset, args.shift_offset, args.shift_prob, shift_seed, false,
                    0);
    if (args.noise_prob.value_or(0.0) > 0.0 && args.noise_std > 0.0) {
      noise_op.call(img, 0.0, args.noise_std, false, *args.noise_prob,
                    static_cast<int64_t>(splitmix64(key ^ 0x27d4eb2f) >> 1), 0);
    }
    return {img, lbl};
  }

  static constexpr int64_t kControlPoints = 7;
  mutable at::Tensor half_;  // roi // 2 on the device (crop start = centre - roi // 2)

  // (B, 3, 7, 7, 7) B-spline control displacements U(-E, E) voxels (Philox, keyed by the step),
  // the two outer layers zeroed (TorchIO's locked_borders = 2), times `on` (B, 1, 1, 1, 1).
  at::Tensor elastic_field(const at::Tensor& on, uint64_t key) const {
    static auto fill_op = op_handle<void(const at::Tensor&, double, double, int64_t, int64_t)>(
        "voxaug::uniform_fill_");
    const int64_t B = on.size(0), k = kControlPoints;
    at::Tensor f = at::empty({B, 3, k, k, k}, at::TensorOptions().dtype(at::kFloat).device(device));
    fill_op.call(f, -args.elastic_max, args.elastic_max,
                 static_cast<int64_t>(splitmix64(key ^ 0x165667b1) >> 1), 0);
    for (int64_t a = 2; a < 5; ++a) {
      f.narrow(a, 0, 2).zero_();
      f.narrow(a, k - 2, 2).zero_();
    }
    return f.mul_(on);
  }
};

// ---------------------------------------------------------------- loss, metric

// MONAI DiceCELoss(to_onehot_y=True, softmax=True): Dice over the spatial dims per (batch,
// class), smooth 1e-5, background included, mean; plus CrossEntropy (mean); weights 1, 1.
at::Tensor dice_ce_loss(const at::Tensor& logits_any, const at::Tensor& label, int64_t K) {
  const at::Tensor logits = logits_any.to(at::kFloat);
  const at::Tensor target = label.squeeze(1).to(at::kLong);
  const at::Tensor ce = at::cross_entropy_loss(logits, target);
  const at::Tensor p = at::softmax(logits, 1);
  const at::Tensor y = at::one_hot(target, K).permute({0, 4, 1, 2, 3}).to(at::kFloat);
  const std::vector<int64_t> sp{2, 3, 4};
  const at::Tensor inter = (p * y).sum(sp);
  const at::Tensor denom = y.sum(sp) + p.sum(sp);
  const at::Tensor dice = (1.0 - (2.0 * inter + 1e-5) / (denom + 1e-5)).mean();
  return dice + ce;
}

// MONAI DiceMetric(include_background=False) for one volume, on the device: (K-1,) float64,
// 2|A n B| / (|A| + |B|) per foreground class, NaN where the ground truth lacks the class
// (MONAI's ignore_empty=True). A confusion matrix by scatter_add (no host sync, no one-hot).
at::Tensor dice_per_class(const at::Tensor& pred, const at::Tensor& label, int64_t K) {
  const at::Tensor idx = (label.reshape({-1}).to(at::kLong) * K + pred.reshape({-1}).to(at::kLong));
  at::Tensor conf = at::zeros({K * K}, idx.options());
  conf.scatter_add_(0, idx, at::ones({1}, idx.options()).expand_as(idx));
  conf = conf.view({K, K}).to(at::kDouble);  // [true][pred]
  const at::Tensor inter = conf.diagonal();
  const at::Tensor a = conf.sum(0), b = conf.sum(1);
  at::Tensor d = 2.0 * inter / (a + b);
  d = at::where(b > 0, d, at::full_like(d, std::numeric_limits<double>::quiet_NaN()));
  return d.slice(0, 1);
}

// ---------------------------------------------------------------- checkpoints

// A state dict saved by torch.save (zip format): {name: tensor} as a plain dict or the
// OrderedDict that state_dict() returns, or such a dict under "state_dict" / "model" / "network" /
// "net" (state_dict_io.h). Throws naming the flag and the file.
std::map<std::string, at::Tensor> load_tensor_dict(const std::string& path,
                                                   const std::string& flag = "--init") {
  try {
    return voxaug::train::read_state_dict(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(flag + ": " + e.what());
  }
}

// A torch.load-able (weights_only=True) plain dict of CPU tensors.
void save_tensor_dict(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  voxaug::train::write_state_dict(path, tensors);
}

std::string hms(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(std::llround(s));
  char b[32];
  std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  return b;
}

std::string shape_str(const std::array<int64_t, 3>& s) {
  return std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
}

int run(const Args& args) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };

  // ---- configuration
  std::string dev = args.device;
  if (dev.empty()) dev = torch::cuda::is_available() ? "cuda" : "cpu";
  if (dev == "cuda" && !torch::cuda::is_available()) {
    fail("--device cuda: no CUDA device is available to LibTorch");
  }
  const bool cuda = dev == "cuda";
  const c10::Device device(cuda ? c10::kCUDA : c10::kCPU);
  if (args.threads > 0) torch::set_num_threads(static_cast<int>(args.threads));
  const int64_t steps = args.steps.value_or(cuda ? 5000 : 40);
  const int64_t val_every = args.val_every.value_or(cuda ? 500 : 20);
  const int64_t log_every = args.log_every.value_or(cuda ? 50 : 5);
  const int64_t feature = args.feature_size.value_or(cuda ? 48 : 12);
  const int64_t num_samples = args.num_samples.value_or(cuda ? 4 : 1);
  const std::array<int64_t, 3> roi =
      args.roi.value_or(cuda ? std::array<int64_t, 3>{96, 96, 96} : std::array<int64_t, 3>{32, 32, 32});
  if (args.rot90_prob > 0 && roi[0] != roi[1]) {
    fail("--rot90-prob > 0 rotates axes 0 and 1, so --roi needs equal first two sizes (or use "
         "--rot90-prob 0)");
  }
  std::string amp = args.amp.empty() ? (cuda ? "bf16" : "off") : args.amp;
  const bool use_amp = amp != "off";
  const at::ScalarType amp_dtype = amp == "fp16" ? at::kHalf : at::kBFloat16;
  const bool scaler_on = amp == "fp16";

  torch::manual_seed(static_cast<uint64_t>(args.seed));

  voxaug::train::PreprocessOptions pre;
  pre.pixdim = args.pixdim;
  pre.roi = roi;
  const bool mricron = args.dataset == "mricron";
  pre.a_min = args.a_min.value_or(mricron ? 0.0 : -175.0);
  pre.a_max = args.a_max.value_or(mricron ? 255.0 : 250.0);

  std::printf(
      "voxaug_swin_train: device %s, amp %s, roi %s, %lld crops x %lld volumes per step, "
      "feature_size %lld, steps %lld\n",
      dev.c_str(), amp.c_str(), shape_str(roi).c_str(), static_cast<long long>(num_samples),
      static_cast<long long>(args.batch_volumes), static_cast<long long>(feature),
      static_cast<long long>(steps));
  std::printf("augmentation: RandCropByPosNegLabel(pos %g, neg %g) x %lld, RandFlip x3 (p %g), "
              "RandRotate90 (p %g), RandShiftIntensity (%g, p %g)",
              args.pos, args.neg, static_cast<long long>(num_samples), args.flip_prob,
              args.rot90_prob, args.shift_offset, args.shift_prob);
  if (args.affine_prob.value_or(0.0) > 0.0)
    std::printf(", RandAffine (p %g, rotate %g rad, scale %g)", *args.affine_prob,
                args.rotate_range, args.scale_range);
  if (args.elastic_prob.value_or(0.0) > 0.0)
    std::printf(", elastic (p %g, %g voxels)", *args.elastic_prob, args.elastic_max);
  if (args.noise_prob.value_or(0.0) > 0.0)
    std::printf(", RandGaussianNoise (p %g, std %g)", *args.noise_prob, args.noise_std);
  std::printf("\n");
  const auto t_data0 = clock::now();
  Dataset ds;
  if (args.dataset == "phantom") {
    voxaug::train::PhantomOptions p;
    p.train = args.phantom_train.value_or(cuda ? 24 : 6);
    p.val = args.phantom_val.value_or(cuda ? 6 : 2);
    p.size = args.phantom_size.value_or(cuda ? std::array<int64_t, 3>{160, 160, 128}
                                             : std::array<int64_t, 3>{48, 48, 48});
    p.num_classes = args.num_classes.value_or(cuda ? 14 : 5);
    p.seed = args.seed;
    ds = voxaug::train::load_phantom(p, pre, device);
  } else if (mricron) {
    ds = voxaug::train::load_mricron(
        args.data_dir.empty() ? "/usr/share/mricron/templates" : args.data_dir, pre, device);
  } else {
    ds = voxaug::train::load_msd(args.data_dir, args.num_classes.value_or(0), args.max_subjects,
                                 pre, device);
  }
  {
    // RandCropByPosNegLabel's candidate counts (label > 0 vs not, where image > 0), once per
    // training volume: each step's draw then reads one chunk per crop instead of the volume.
    static auto counts_op =
        op_handle<at::Tensor(const at::Tensor&, const std::optional<at::Tensor>&, double, int64_t,
                             int64_t)>("voxaug::class_crop_counts");
    for (Subject& s : ds.train) s.crop_counts = counts_op.call(s.label, s.image, 0.0, 0, 2);
  }
  if (cuda) torch::cuda::synchronize();
  const double data_load_s = seconds(t_data0, clock::now());
  const int64_t K = ds.num_classes;
  std::printf("data: %s; preprocessed in %.2f s (pixdim %.3g,%.3g,%.3g, intensity [%g, %g] -> "
              "[0, 1])\n",
              ds.description.c_str(), data_load_s, pre.pixdim[0], pre.pixdim[1], pre.pixdim[2],
              pre.a_min, pre.a_max);
  for (const auto* list : {&ds.train, &ds.val}) {
    const char* role = list == &ds.train ? "train" : "val";
    if (list == &ds.val && !ds.val_held_out) {
      std::printf("  %s: the training subject (not held out)\n", role);
      continue;
    }
    for (const auto& s : *list)
      std::printf("  %s %s: raw %s -> preprocessed %s\n", role, s.name.c_str(),
                  shape_str(s.raw_shape).c_str(), shape_str(s.shape).c_str());
  }
  if (!args.dump_dir.empty()) {
    // --dump-preprocessed: the cached volumes as training would see them, one file per subject
    // (a subject both trained and validated on is written once), then exit.
    std::error_code ec;
    fs::create_directories(args.dump_dir, ec);
    if (ec || !fs::is_directory(args.dump_dir))
      fail("--dump-preprocessed: cannot create the directory " + args.dump_dir);
    std::map<std::string, const Subject*> written;
    for (const auto* list : {&ds.train, &ds.val})
      for (const auto& s : *list) {
        auto [it, fresh] = written.emplace(s.name, &s);
        if (!fresh) {
          if (it->second->image.is_same(s.image)) continue;  // the same cached subject
          fail("--dump-preprocessed: two subjects are named " + s.name +
               " (file names must differ)");
        }
        auto matrix = [](const std::array<std::array<double, 4>, 4>& m) {
          at::Tensor t = at::empty({4, 4}, at::TensorOptions().dtype(at::kDouble));
          for (int r = 0; r < 4; ++r)
            for (int c = 0; c < 4; ++c) t[r][c] = m[r][c];
          return t;
        };
        const fs::path path = fs::path(args.dump_dir) / (s.name + ".pt");
        save_tensor_dict(path.string(),
                         {{"image", s.image},
                          {"label", s.label},
                          {"affine", matrix(s.affine)},
                          {"raw_affine", matrix(s.raw_affine)},
                          {"raw_shape", at::tensor(at::ArrayRef<int64_t>(s.raw_shape.data(), 3))}});
        std::printf("dump: %s\n", path.string().c_str());
      }
    std::printf("dump: %zu preprocessed subjects written to %s; not training\n", written.size(),
                args.dump_dir.c_str());
    return 0;
  }
  if (ds.train.empty() || ds.val.empty()) fail("the dataset needs training and validation subjects");

  // ---- model and optimiser
  voxaug::models::SwinUNETROptions mo;
  mo.in_channels = 1;
  mo.out_channels = K;
  mo.feature_size = feature;
  mo.use_checkpoint = args.use_checkpoint;
  voxaug::models::SwinUNETR model(mo);
  if (!args.init.empty()) {
    torch::NoGradGuard ng;
    const auto t_read = clock::now();
    std::map<std::string, at::Tensor> init = load_tensor_dict(args.init);
    const double read_s = seconds(t_read, clock::now());
    // A checkpoint of the model wrapped in DataParallel / DDP: "module.<name>" keys.
    if (const size_t renamed =
            voxaug::train::strip_data_parallel_prefix(init, voxaug::models::state_dict(*model)))
      std::printf("init: removed the DataParallel / DDP prefix 'module.' from %zu keys\n", renamed);
    const size_t n = voxaug::models::load_state_dict(*model, init);
    std::printf("init: %zu tensors from %s (read in %.3f s)\n", n, args.init.c_str(), read_s);
  }
  std::map<std::string, at::Tensor> resumed;  // train_state.pt of --resume
  if (!args.resume.empty()) {
    torch::NoGradGuard ng;
    voxaug::models::load_state_dict(
        *model, load_tensor_dict((fs::path(args.resume) / "checkpoint.pt").string(), "--resume"));
    resumed = load_tensor_dict((fs::path(args.resume) / "train_state.pt").string(), "--resume");
    for (const char* key : {"config", "progress", "best_dice", "order", "scale", "growth_tracker"})
      if (!resumed.count(key))
        fail("--resume: " + (fs::path(args.resume) / "train_state.pt").string() + " has no '" +
             key + "'");
  }
  model->to(device);
  int64_t nparam = 0;
  for (const auto& p : model->parameters()) nparam += p.numel();
  std::printf("model: SwinUNETR(in 1, out %lld, feature_size %lld%s), %lld parameters\n",
              static_cast<long long>(K), static_cast<long long>(feature),
              args.use_checkpoint ? ", use_checkpoint" : "", static_cast<long long>(nparam));
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(args.lr).weight_decay(args.weight_decay));
  std::vector<at::Tensor> params = model->parameters();

  // GradScaler state (fp16 only), on the device.
  at::Tensor scale = at::full({1}, 65536.0, at::TensorOptions().dtype(at::kFloat).device(device));
  at::Tensor growth_tracker = at::zeros({1}, at::TensorOptions().dtype(at::kInt).device(device));

  fs::create_directories(args.out);
  // The configuration a resumed run must share (the draws and shapes depend on it).
  const std::vector<int64_t> config = {args.seed, roi[0], roi[1], roi[2], num_samples, K, feature,
                                       args.batch_volumes, static_cast<int64_t>(ds.train.size())};
  int64_t first_step = 1;
  std::vector<std::string> csv_rows;  // a resumed run's earlier rows (up to its saved step)
  if (!resumed.empty()) {
    const at::Tensor c = resumed.at("config").to(at::kLong);
    if (c.numel() != static_cast<int64_t>(config.size()) ||
        !at::equal(c, at::tensor(config, at::TensorOptions().dtype(at::kLong))))
      fail("--resume: the run in " + args.resume + " had another configuration (seed, roi, "
           "num-samples, classes, feature size, batch volumes or training subjects)");
    first_step = resumed.at("progress")[0].item<int64_t>() + 1;
    if (first_step > steps)
      fail("--resume: the run in " + args.resume + " reached step " +
           std::to_string(first_step - 1) + "; --steps must be larger, got " +
           std::to_string(steps));
    std::ifstream old(fs::path(args.resume) / "train.csv");
    std::string line;
    for (bool header = true; std::getline(old, line); header = false)
      if (!header && !line.empty() && std::stoll(line) < first_step) csv_rows.push_back(line);
  }
  std::ofstream csv(fs::path(args.out) / "train.csv");
  if (!csv) fail("--out: cannot write " + (fs::path(args.out) / "train.csv").string());
  csv << "step,loss,lr,scale,data_ms,step_ms,elapsed_s,val_dice\n";
  for (const auto& row : csv_rows) csv << row << "\n";

  Augmenter augment{args, roi, num_samples, device, at::Tensor()};
  voxaug::SlidingWindowOptions swo;
  swo.overlap = {args.overlap};
  swo.argmax = true;

  // ---- validation
  std::vector<int64_t> val_steps;
  std::vector<double> val_dice;
  double best_dice = -1.0;
  int64_t best_step = 0;
  auto validate = [&](int64_t step) -> double {
    Range r("validation");
    model->eval();
    torch::NoGradGuard ng;
    auto predictor = [&](const at::Tensor& x) {
      Autocast ac(use_amp, device.type(), amp_dtype);
      return model->forward(x).to(at::kFloat);
    };
    std::vector<at::Tensor> per_volume;
    at::Tensor pred0;
    for (size_t v = 0; v < ds.val.size(); ++v) {
      at::Tensor pred =
          voxaug::sliding_window_inference(ds.val[v].image, {roi[0], roi[1], roi[2]},
                                           args.sw_batch_size, voxaug::Predictor(predictor), swo);
      per_volume.push_back(dice_per_class(pred, ds.val[v].label, K));
      if (v == 0) pred0 = pred;
    }
    // One read-back per validation: the (volumes, K-1) Dice table.
    const at::Tensor table = at::stack(per_volume).cpu();
    model->train();
    // MONAI DiceMetric(reduction="mean"): mean over the non-NaN classes of each volume, then
    // over the volumes that have one.
    double sum = 0;
    int64_t n = 0;
    std::vector<double> cls_sum(K - 1, 0.0);
    std::vector<int64_t> cls_n(K - 1, 0);
    auto acc = table.accessor<double, 2>();
    for (int64_t v = 0; v < table.size(0); ++v) {
      double s = 0;
      int64_t c = 0;
      for (int64_t k = 0; k < K - 1; ++k) {
        if (std::isnan(acc[v][k])) continue;
        s += acc[v][k];
        ++c;
        cls_sum[k] += acc[v][k];
        ++cls_n[k];
      }
      if (c > 0) sum += s / c, ++n;
    }
    const double dice = n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
    std::printf("validation step %lld: mean Dice %.4f (per class:", static_cast<long long>(step),
                dice);
    for (int64_t k = 0; k < K - 1; ++k) {
      if (cls_n[k])
        std::printf(" %.3f", cls_sum[k] / cls_n[k]);
      else
        std::printf(" -");
    }
    std::printf(")\n");
    const Subject& s0 = ds.val[0];
    voxaug::train::plot_validation_slices(
        (fs::path(args.out) / "validation.png").string(), s0.image[0][0].cpu(),
        s0.label[0][0].cpu(), pred0[0][0].cpu(), pre.pixdim,
        "STEP " + std::to_string(step) + " DICE " + (std::isfinite(dice) ? std::to_string(dice).substr(0, 5) : "NAN"));
    return dice;
  };

  // ---- training loop
  std::vector<int64_t> order(ds.train.size());
  size_t cursor = order.size();
  int64_t epoch = 0;
  struct Pending {
    int64_t step;
    at::Tensor loss, scale;
    double data_ms, step_ms, elapsed_s;
  };
  std::vector<Pending> pending;
  // --check-forward: the first step's loss and the tensors it was computed from (CPU copies).
  std::map<std::string, at::Tensor> first_step_check;
  std::map<int64_t, double> dice_at;
  std::vector<int64_t> curve_steps;
  std::vector<double> curve_loss;
  double train_s = 0, data_ms_total = 0, val_s_total = 0;
  auto t_last = clock::now();
  double val_since_last = 0;
  int64_t steps_since_last = 0;
  const auto t_train0 = clock::now();

  auto flush = [&](int64_t step) {
    if (pending.empty()) return;
    std::vector<at::Tensor> ls, ss;
    for (auto& p : pending) ls.push_back(p.loss), ss.push_back(p.scale);
    const at::Tensor lh = at::stack(ls).to(at::kCPU, at::kDouble);  // the interval's sync
    const at::Tensor sh = at::stack(ss).to(at::kCPU, at::kDouble);
    const auto now = clock::now();
    const double interval = seconds(t_last, now) - val_since_last;
    const double sps = interval > 0 ? steps_since_last / interval : 0.0;
    double dsum = 0;
    for (size_t i = 0; i < pending.size(); ++i) {
      const auto& p = pending[i];
      const double l = lh[i].item<double>();
      curve_steps.push_back(p.step);
      curve_loss.push_back(l);
      dsum += p.data_ms;
      char row[256];
      std::snprintf(row, sizeof row, "%lld,%.6f,%g,%g,%.3f,%.3f,%.3f,",
                    static_cast<long long>(p.step), l, args.lr, sh[i].item<double>(), p.data_ms,
                    p.step_ms, p.elapsed_s);
      csv << row;
      auto it = dice_at.find(p.step);
      if (it != dice_at.end()) csv << it->second;
      csv << "\n";
    }
    csv.flush();
    const double eta = sps > 0 ? (steps - step) / sps : NAN;
    std::printf("step %lld/%lld  loss %.4f  %.2f steps/s  data %.1f ms  ETA %s\n",
                static_cast<long long>(step), static_cast<long long>(steps),
                lh[static_cast<int64_t>(pending.size()) - 1].item<double>(), sps,
                dsum / pending.size(), hms(eta).c_str());
    std::fflush(stdout);
    pending.clear();
    t_last = clock::now();
    val_since_last = 0;
    steps_since_last = 0;
  };

  // ---- resumable state: checkpoint.pt (weights) + train_state.pt (everything else)
  auto save_training = [&](int64_t step) {
    if (!args.save_ckpt) return;
    save_tensor_dict((fs::path(args.out) / "checkpoint.pt").string(),
                     voxaug::models::state_dict(*model));
    std::map<std::string, at::Tensor> st;
    st["config"] = at::tensor(config, at::TensorOptions().dtype(at::kLong));
    st["progress"] = at::tensor(std::vector<int64_t>{step, epoch, static_cast<int64_t>(cursor),
                                                     best_step},
                                at::TensorOptions().dtype(at::kLong));
    st["best_dice"] = at::tensor(std::vector<double>{best_dice}, at::TensorOptions().dtype(at::kDouble));
    st["order"] = at::tensor(order, at::TensorOptions().dtype(at::kLong));
    st["scale"] = scale;
    st["growth_tracker"] = growth_tracker;
    for (const auto& kv : model->named_parameters()) {
      auto it = opt.state().find(kv.value().unsafeGetTensorImpl());
      if (it == opt.state().end()) continue;  // no step taken for it yet
      const auto& a = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      st["adamw." + kv.key() + ".exp_avg"] = a.exp_avg();
      st["adamw." + kv.key() + ".exp_avg_sq"] = a.exp_avg_sq();
      st["adamw." + kv.key() + ".step"] =
          at::tensor(std::vector<int64_t>{a.step()}, at::TensorOptions().dtype(at::kLong));
    }
    save_tensor_dict((fs::path(args.out) / "train_state.pt").string(), st);
  };
  if (!resumed.empty()) {
    const at::Tensor pr = resumed.at("progress").to(at::kLong);
    epoch = pr[1].item<int64_t>();
    cursor = static_cast<size_t>(pr[2].item<int64_t>());
    best_step = pr[3].item<int64_t>();
    best_dice = resumed.at("best_dice").item<double>();
    const at::Tensor ord = resumed.at("order").to(at::kLong).contiguous();
    order.assign(ord.data_ptr<int64_t>(), ord.data_ptr<int64_t>() + ord.numel());
    scale.copy_(resumed.at("scale"));
    growth_tracker.copy_(resumed.at("growth_tracker"));
    int64_t restored = 0;
    for (const auto& kv : model->named_parameters()) {
      const std::string k = "adamw." + kv.key();
      if (!resumed.count(k + ".exp_avg")) continue;
      auto a = std::make_unique<torch::optim::AdamWParamState>();
      a->exp_avg(resumed.at(k + ".exp_avg").to(kv.value().options()));
      a->exp_avg_sq(resumed.at(k + ".exp_avg_sq").to(kv.value().options()));
      a->step(resumed.at(k + ".step").item<int64_t>());
      opt.state()[kv.value().unsafeGetTensorImpl()] = std::move(a);
      ++restored;
    }
    for (const auto& row : csv_rows) {  // the curve and the validations so far
      std::vector<std::string> f;
      std::stringstream ss(row);
      for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
      if (f.size() < 2) continue;
      curve_steps.push_back(std::stoll(f[0]));
      curve_loss.push_back(std::stod(f[1]));
      if (f.size() >= 8 && !f[7].empty()) {
        val_steps.push_back(std::stoll(f[0]));
        val_dice.push_back(std::stod(f[7]));
      }
    }
    std::printf("resume: step %lld of %s (AdamW state of %lld tensors, best Dice %.4f at step %lld)\n",
                static_cast<long long>(first_step - 1), args.resume.c_str(),
                static_cast<long long>(restored), best_dice, static_cast<long long>(best_step));
  }

  model->train();
  for (int64_t step = first_step; step <= steps; ++step) {
    const auto t0 = clock::now();
    std::vector<const Subject*> vols;
    for (int64_t b = 0; b < args.batch_volumes; ++b) {
      if (cursor >= order.size()) {  // a new epoch: shuffle the training subjects
        std::iota(order.begin(), order.end(), 0);
        std::mt19937_64 rng(splitmix64(static_cast<uint64_t>(args.seed) ^ (0xE90C0000ull + epoch++)));
        std::shuffle(order.begin(), order.end(), rng);
        cursor = 0;
      }
      vols.push_back(&ds.train[order[cursor++]]);
    }
    at::Tensor image, label;
    double data_ms;
    {
      Range r("data");
      if (cuda && args.profile_data) torch::cuda::synchronize();
      const auto d0 = clock::now();
      std::tie(image, label) = augment(vols, step);
      if (cuda && args.profile_data) torch::cuda::synchronize();
      data_ms = 1e3 * seconds(d0, clock::now());
    }
    opt.zero_grad(true);
    at::Tensor logits;
    {
      Range r("forward");
      Autocast ac(use_amp, device.type(), amp_dtype);
      logits = model->forward(image);
    }
    const at::Tensor loss = dice_ce_loss(logits, label, K);
    if (args.check_forward && step == first_step) {
      // A debug output: one read-back, on this run's first step only.
      first_step_check = {{"first_logits", logits.detach().to(at::kCPU)},
                          {"first_label", label.to(at::kCPU)},
                          {"first_loss", loss.detach().to(at::kCPU)},
                          {"first_step", at::tensor(std::vector<int64_t>{step},
                                                    at::TensorOptions().dtype(at::kLong))}};
    }
    {
      Range r("backward");
      // With gradient checkpointing the Swin blocks are recomputed inside backward; keep autocast
      // on there so the recomputation matches the forward's dtypes (torch.utils.checkpoint
      // restores the autocast state for the same reason).
      Autocast ac(use_amp && args.use_checkpoint, device.type(), amp_dtype);
      (scaler_on ? loss * scale : loss).backward();
    }
    {
      Range r("step");
      std::vector<at::Tensor> grads;
      for (const auto& p : params)
        if (p.grad().defined()) grads.push_back(p.grad());
      at::Tensor found_inf;
      if (scaler_on) {  // GradScaler.unscale_
        found_inf = at::zeros({1}, scale.options());
        at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale.reciprocal());
      }
      if (args.clip > 0) {  // clip_grad_norm_ without reading the norm back
        const at::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
        const at::Tensor coef = at::clamp_max(args.clip / (total + 1e-6), 1.0);
        at::_foreach_mul_(grads, coef);
      }
      if (scaler_on) {
        // GradScaler.step reads found_inf on the host to skip the step: the one sync per step.
        if (found_inf.item<float>() == 0.0f) opt.step();
        at::_amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 2000);
      } else {
        opt.step();
      }
    }
    const auto t1 = clock::now();
    const double step_ms = 1e3 * seconds(t0, t1);
    data_ms_total += data_ms;
    train_s += seconds(t0, t1);
    ++steps_since_last;
    pending.push_back({step, loss.detach(), scaler_on ? scale.clone() : at::ones({1}, scale.options()),
                       data_ms, step_ms, seconds(t_start, t1)});
    const bool do_val = step % val_every == 0 || step == steps;
    if (do_val) {
      const auto v0 = clock::now();
      const double d = validate(step);
      const double vs = seconds(v0, clock::now());
      val_s_total += vs;
      val_since_last += vs;
      dice_at[step] = d;
      val_steps.push_back(step);
      val_dice.push_back(d);
      if (std::isfinite(d) && d > best_dice) {
        best_dice = d;
        best_step = step;
        if (args.save_ckpt)
          save_tensor_dict((fs::path(args.out) / "checkpoint_best.pt").string(),
                           voxaug::models::state_dict(*model));
      }
      if (step < steps) save_training(step);  // a point to --resume from
    }
    if (step % log_every == 0 || step == steps || do_val) flush(step);
  }
  if (cuda) torch::cuda::synchronize();
  const double train_wall = seconds(t_train0, clock::now()) - val_s_total;
  const int64_t run_steps = steps - first_step + 1;  // this run's (a resumed run's are fewer)
  save_training(steps);
  voxaug::train::plot_training_curve((fs::path(args.out) / "training_curve.png").string(),
                                     curve_steps, curve_loss, val_steps, val_dice,
                                     "SWIN UNETR: LOSS AND VALIDATION DICE");
  if (args.check_forward) {
    // A fixed, smooth input; the float32 forward of the final weights (no autocast).
    model->eval();
    torch::NoGradGuard ng;
    const at::Tensor g = at::arange(64 * 64 * 64, at::TensorOptions().dtype(at::kDouble));
    const at::Tensor x = (at::sin(g * 0.001) * 0.5 + 0.5).to(at::kFloat).reshape({1, 1, 64, 64, 64});
    const at::Tensor y = model->forward(x.to(device)).to(at::kCPU);
    std::map<std::string, at::Tensor> check = first_step_check;
    check["input"] = x;
    check["output"] = y;
    save_tensor_dict((fs::path(args.out) / "forward_check.pt").string(), check);
  }
  const double wall = seconds(t_start, clock::now());
  std::printf(
      "summary: %lld steps, %.3f steps/s (training time %.1f s without validation), mean data "
      "time %.2f ms/step%s, best validation Dice %.4f at step %lld, validation %.1f s, wall "
      "time %.1f s\n",
      static_cast<long long>(run_steps), train_wall > 0 ? run_steps / train_wall : 0.0,
      train_wall, data_ms_total / run_steps,
      (cuda && !args.profile_data) ? " (host enqueue time)" : "",
      best_dice, static_cast<long long>(best_step), val_s_total, wall);
  std::printf("outputs: %s/{train.csv,training_curve.png,validation.png%s}\n", args.out.c_str(),
              args.save_ckpt ? ",checkpoint.pt,checkpoint_best.pt" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach a log file as they happen
  const Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    // c10 errors append a C++ backtrace; the first line says what went wrong.
    const auto nl = msg.find("\nException raised from");
    if (nl != std::string::npos) msg = msg.substr(0, nl);
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
  }
}
