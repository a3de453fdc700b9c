#!/usr/bin/env python3
"""voxaug vs MONAI: the same transforms on the same input, in one process.

Cases
  (a) the bar: ScaleIntensityRange(-175, 250, 0, 1, clip) -> RandShiftIntensity(0.1) ->
      RandGaussianNoise(std 0.1), prob 1, on a 1x1x224x224x160 float32 volume:
      monai.transforms.Compose vs voxaug.transforms.Compose (one fused pass)
  (b) each single transform on the same volume (ScaleIntensity in its min-max form and
      RandAdjustContrast, which need a per-sample reduction before the pass; RandRicianNoise,
      RandBiasField with MONAI's defaults but prob 1 and Rician std 0.1)
  (c) the chain on a batch of 8 x 1 x 128^3: voxaug in one call, MONAI looping over samples
  (d) --device cuda only: effective bandwidth of the fused chain at 8x1x256^3 (one float32
      read + one write) against a device-to-device copy (dst.copy_(src)) of the same size
  (e) spatial: RandAffine (bilinear, reflection; rotation, scale, translation, prob 1) on
      1x1x224x224x160 vs MONAI's RandAffine, and voxaug's RandomAffine vs TorchIO's (degrees
      10, scales 0.1, linear, pad 0); RandAffined image (bilinear) + label (nearest) on 4 x 96^3,
      voxaug batched in one launch, MONAI looping over the samples; Spacingd on the real
      ch2 + aal (1 mm -> 1.5 x 1.5 x 2 mm, image bilinear + label nearest, one launch) and
      ch2better (0.5 mm 301x370x316 -> 1 mm), MetaTensors with the files' affines, checked
      against MONAI's output; Spacingd on ch2 with MONAI's integer modes 3 and 5 (scipy's
      spline orders: its numpy backend) against voxaug's B-splines of those orders; exact
      copies: ResizeWithPadOrCrop (224x224x160 -> 192x256x160, edge), TorchIO's CropOrPad
      (the same, vs TorchIO) and RandAxisFlip on 4 x 1 x 128^3
  (f) elastic, on the real ch2.nii.gz (181x217x181) image (bilinear) + aal.nii.gz label
      (nearest): voxaug Rand3DElasticd (fast field, in-kernel B-spline) vs MONAI
      Rand3DElasticd (sigma 5-8, magnitude 100-200, prob 1, the same affine ranges), and
      voxaug RandomElasticDeformation vs TorchIO's (its defaults: 7 control points, 7.5 mm,
      2 locked borders) and RandomAffineElasticDeformation vs TorchIO's (the defaults of both
      parts); at most 3 timed calls each (MONAI and TorchIO take seconds)
      Also RandCropByPosNegLabeld (4 x 96^3 patches) then Rand3DElasticd: voxaug's Compose
      gathers each deformed patch straight from the full volume (one launch); and
      Rand3DElasticd then RandFlipd x 3 (nnU-Net's order): voxaug folds the flips into the gather
  (g) filter: GaussianSmooth (sigma 1 and 3) and MedianSmooth (radius 1, checked equal) on
      1x1x128^3 and 1x1x224x224x160 vs MONAI's
  (i) RandStdShiftIntensity(0.5), RandScaleIntensityFixedMean(0.5), RandHistogramShift(10), prob 1, on
      1x1x224x224x160 and on 2x1x128^3 (voxaug in one call, MONAI looping over the samples); bar
      (issue 5): >= 3x MONAI on CPU. `--only intensity-new` runs only these.
  (h) crop: RandCropByPosNegLabeld (96^3 patches, num_samples 4, image + label) on ch2 + aal vs
      MONAI's, without and with precomputed candidates (FgBgToIndicesd; voxaug's keeps chunk
      counts; both outside the
      timing), and vs TorchIO's LabelSampler (4 patches from a Subject); RandCropByLabelClassesd
      (all 117 AAL classes) and RandWeightedCropd (ch2 as the weight map) vs MONAI's; voxaug's
      LabelSampler / WeightedSampler vs TorchIO's (the "vs TorchIO" rows: "monai ms" is TorchIO), and
      one epoch of voxaug's PatchQueue vs TorchIO's Queue (2 volumes x 4 patches, batches of 4)

  (j) degrade (--only degrade): RandCoarseDropout (holes 4-8, sizes 16-48, fill U(min, max)),
      RandCoarseShuffle (holes 10 of 8^3, the Swin UNETR pretraining tutorial's; and holes 4-8 of
      16-48), TorchIO RandomSwap (100 swaps of 15^3; "monai ms" is TorchIO) and
      RandSimulateLowResolution, prob 1, on 2x1x128^3 and 1x1x224x224x160; bar 3x on CPU
  (l) the other issue-5 transforms (--only intensity-more): NormalizeIntensity (also nonzero +
      channel_wise on a zero background), ScaleIntensityRangePercentiles(5, 95, clip),
      RandRicianNoise, RandBiasField, RandAdjustContrast, RandGaussianSmooth, RandGaussianSharpen
      (MONAI's defaults, prob 1) vs MONAI, and RandomGamma, RandomBlur, RandomBiasField,
      RandomNoise (TorchIO's defaults), ZNormalization, RescaleIntensity((-1, 1), percentiles
      (0.5, 99.5)), HistogramStandardization (fixed landmarks) vs TorchIO, on 1x1x224x224x160 and
      2x1x128^3; bar (issue 5): >= 3x on CPU
  (m) lazy spatial composition (--only lazy): RandAffined (rotation, scale; bilinear / nearest,
      zeros) -> RandFlipd -> Rotate90d -> CenterSpatialCropd(128^3) on the real ch2 + aal
      (181x217x181 float32 image + int16 label, prob 1): voxaug's Compose (one gather of the
      product map for image and label) vs MONAI's Compose step by step and with lazy=True
      (MONAI resamples once per key; its lazy mode needs `overrides` to keep the label nearest,
      else it interpolates the label bilinearly). Checked: shapes, image means, label values
  (n) k-space and resolution artefacts (--only kspace): voxaug's RandomGhosting, RandomSpike,
      RandomMotion and RandomAnisotropy vs TorchIO's (their defaults, p 1; "monai ms" is TorchIO) and
      RandKSpaceSpikeNoise (prob 1, MONAI's default intensity range, and intensity_range (13, 15))
      vs MONAI's, on 2x1x128^3 (voxaug in one call, the peer looping over the samples) and
      1x1x224x224x160. Checked: finite, changed, and the image mean kept (the k-space artefacts
      leave the DC term alone unless a spike lands on it; anisotropy within 1% of the range)
  (o) TorchIO preprocessing (--only torchio-pre): Resample to (1.5, 1.5, 2) mm of ch2 (image,
      linear) + aal (label map, nearest) in one Subject, and of ch2better (0.5 -> 1 mm), and
      ToCanonical of ch2 under a permuted, flipped affine, vs TorchIO's ("monai ms" is TorchIO);
      checked against TorchIO's output (values within 1e-5 of the range; labels equal off
      nearest-neighbour ties; ToCanonical bytes equal); RandomLabelsToImage of the AAL atlas at
      half resolution (117 labels, TorchIO's default ranges), checked by each output's per-label
      means and stds lying in those ranges; a TorchIO augmentation pipeline on the ch2 + aal
      Subject (RandomAffine, RandomElasticDeformation, ZNormalization in the brain, RandomBlur,
      RandomBiasField, RandomNoise) against voxaug.torchio's on the dictionary
  (p) smooth fields (--only smooth): RandSmoothFieldAdjustContrast, RandSmoothFieldAdjustIntensity and
      RandSmoothDeform (rand_size 8^3, bilinear grid, def_range 0.1), prob 1, vs MONAI on 2x1x128^3
      (voxaug in one call, MONAI per sample) and 1x1x224x224x160. Checked: range and change
  (q) post-processing (--only post): KeepLargestConnectedComponent of a ch2 brain mask (> 40, with
      islands; applied_labels [1]) and of five AAL regions, FillHoles of those regions, and
      RemoveSmallObjects (min_size 64) of the mask and of the AAL map (by value), and
      DistanceTransformEDT of the mask and its complement (two channels; unit and (1.5, 1, 2)
      sampling), vs MONAI's (skimage labelling, scipy dilation, scipy's EDT) on the
      full-resolution ch2 / aal (181x217x181); checked: equal to MONAI's output (the EDT with
      anisotropic sampling within 4e-15 relative: scipy sums the axes' terms in its own order)
  (k) nnU-Net chain (--only nnunet): noise, blur, brightness, contrast, low resolution, inverted
      gamma, gamma as one Compose, prob 1 (the bar, 5x on CPU) and nnU-Net's probabilities

MONAI gets the (C, D, H, W) torch tensor on the device, as a MONAI pipeline would; voxaug gets
the (N, C, D, H, W) view of the same memory. Times are the median of --repeats calls after
--warmup calls (torch.cuda.synchronize around each on CUDA), torch's thread count left as is.
Each case also checks the outputs, so a broken op cannot pass as a fast one: deterministic ops
must match MONAI; random ones must show the documented distribution (offset in the range,
noise std <= std, ...), for both libraries. A failed check exits 1; the speed bar does not.

    python3 benchmarks/compare.py [--device cpu|cuda] [--repeats 10] [--json results.json]
                                  [--only intensity,spatial,deform,filter,crop]

The bars: case (a) on CPU must be >= 5x faster than MONAI; the spatial issue asks the same of
(e) against MONAI's RandAffine and TorchIO's RandomAffine; the deform issue asks (f) for >= 20x
MONAI's Rand3DElasticd and >= 10x TorchIO's RandomElasticDeformation on CPU. The output says
PASS or FAIL.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

try:
    import voxaug
except ImportError:  # running from a checkout without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import voxaug
import voxaug.transforms as vt

import monai
import monai.transforms as mt

try:
    import torchio as tio
except ImportError:  # TorchIO is an optional peer
    tio = None

BAR_SPEEDUP = 5.0
ELASTIC_BARS = {"MONAI": 20.0, "TorchIO": 10.0}
GPU_SPATIAL_BAR = 20.0
NEW_INTENSITY_BAR = 3.0
SEED = 0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def plain(x) -> torch.Tensor:
    """A plain torch.Tensor (MONAI returns MetaTensors), float64 on the CPU for the checks."""
    x = x.as_tensor() if hasattr(x, "as_tensor") else torch.as_tensor(x)
    return x.detach().to("cpu", torch.float64)


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    except OSError:
        return platform.processor() or "unknown CPU"


# ---------------------------------------------------------------- the transforms, both libraries
def sir_args():
    return dict(a_min=-175.0, a_max=250.0, b_min=0.0, b_max=1.0, clip=True)


def monai_chain():
    return mt.Compose([mt.ScaleIntensityRange(**sir_args()),
                       mt.RandShiftIntensity(offsets=0.1, prob=1.0),
                       mt.RandGaussianNoise(prob=1.0, std=0.1)]).set_random_state(seed=SEED)


def voxaug_chain():
    return vt.Compose([vt.ScaleIntensityRange(**sir_args()),
                       vt.RandShiftIntensity(offsets=0.1, prob=1.0),
                       vt.RandGaussianNoise(prob=1.0, std=0.1)]).set_random_state(SEED)


def single_pairs():
    """(name, MONAI transform, voxaug transform, check) for case (b)."""
    return [
        ("ScaleIntensityRange", mt.ScaleIntensityRange(**sir_args()), vt.ScaleIntensityRange(**sir_args()),
         check_equal),
        ("ScaleIntensity min-max", mt.ScaleIntensity(minv=0.0, maxv=1.0), vt.ScaleIntensity(minv=0.0, maxv=1.0),
         check_equal),
        ("RandShiftIntensity", mt.RandShiftIntensity(offsets=0.1, prob=1.0).set_random_state(SEED),
         vt.RandShiftIntensity(offsets=0.1, prob=1.0, seed=SEED), check_shift),
        ("RandScaleIntensity", mt.RandScaleIntensity(factors=0.1, prob=1.0).set_random_state(SEED),
         vt.RandScaleIntensity(factors=0.1, prob=1.0, seed=SEED), check_scale),
        ("RandGaussianNoise", mt.RandGaussianNoise(prob=1.0, std=0.1).set_random_state(SEED),
         vt.RandGaussianNoise(prob=1.0, std=0.1, seed=SEED), check_noise),
        ("RandRicianNoise", mt.RandRicianNoise(prob=1.0, std=0.1).set_random_state(SEED),
         vt.RandRicianNoise(prob=1.0, std=0.1, seed=SEED), check_rician),
        ("RandBiasField", mt.RandBiasField(prob=1.0).set_random_state(SEED),
         vt.RandBiasField(prob=1.0, seed=SEED), check_bias_field()),
        ("RandAdjustContrast", mt.RandAdjustContrast(prob=1.0).set_random_state(SEED),
         vt.RandAdjustContrast(prob=1.0, seed=SEED), check_contrast),
    ]


# ---------------------------------------------------------------- output checks
# Each takes the input and both outputs as float64 (N, C, ...) tensors and returns
# (ok, short text). Tolerances are for float32 arithmetic on O(1) values.
def check_equal(x, m, v):
    d = (m - v).abs().max().item()
    return d <= 1e-5, f"max|d| {d:.1g}"


def _per_sample(t):
    return t.reshape(t.shape[0], -1)


def check_shift(x, m, v):
    offs = []
    for out in (m, v):
        r = _per_sample(out - x)
        off = r.mean(1)
        if (r - off[:, None]).abs().max().item() > 1e-3 or off.abs().max().item() > 0.1 + 1e-4:
            return False, "offset not constant / not in +-0.1"
        offs.append(off[0].item())
    return True, f"offset {offs[0]:+.3f}/{offs[1]:+.3f}"


def check_scale(x, m, v):
    fs = []
    xs = _per_sample(x)
    for out in (m, v):
        f = (_per_sample(out) * xs).sum(1) / (xs * xs).sum(1) - 1.0  # least-squares factor
        if (_per_sample(out) - xs * (1 + f[:, None])).abs().max().item() > 1e-2 or f.abs().max().item() > 0.1 + 1e-4:
            return False, "not img*(1+f), |f|<=0.1"
        fs.append(f[0].item())
    return True, f"factor {fs[0]:+.3f}/{fs[1]:+.3f}"


def check_noise(x, m, v, std=0.1):
    sds = []
    for out in (m, v):
        r = _per_sample(out - x)
        sd, mean = r.std(1), r.mean(1)
        # sample_std: the std of each sample is drawn from U(0, std); 1% slack for estimation.
        if sd.max().item() > std * 1.01 or (mean.abs() > 0.01 + 3 * sd / r.shape[1] ** 0.5).any():
            return False, "noise std > std or mean != 0"
        sds.append(sd[0].item())
    return True, f"noise sd {sds[0]:.3f}/{sds[1]:.3f}"


def check_rician(x, m, v, std=0.1):
    """sqrt((x + n1)^2 + n2^2) >= 0; where |x| >> std it is |x| + N(0, s), s <= std."""
    sds = []
    far = _per_sample(x).abs() > 1.0
    for out in (m, v):
        r = _per_sample(out - x.abs())[far]
        if out.min().item() < 0 or r.std().item() > std * 1.01 or abs(r.mean().item()) > 0.01:
            return False, "negative, or noise std > std"
        sds.append(r.std().item())
    return True, f"noise sd {sds[0]:.3f}/{sds[1]:.3f}"


def check_noise(std_hi):
    """x + N(mean, std): each sample's noise has |mean| small and std <= std_hi (TorchIO
    RandomNoise's defaults: mean 0, std ~ U(0, 0.25))."""
    def check(x, m, v):
        sds = []
        for out in (m, v):
            r = _per_sample(out - x).flatten(1).double()
            sd = r.std(1)
            if sd.max().item() > std_hi * 1.01 or r.mean(1).abs().max().item() > 0.01:
                return False, "noise std above its range, or a mean off 0"
            sds.append(sd.mean().item())
        return True, f"noise sd {sds[0]:.3f}/{sds[1]:.3f}"
    return check


def check_bias_field(bound=2.0):
    """img * exp(field), |field| <= sum |c| |P| (MONAI: 20 coefficients of degree 3 in [0, 0.1],
    bound 2; TorchIO: in [-0.5, 0.5], bound 10)."""
    def check(x, m, v):
        keep = x.abs() > 1.0
        texts = []
        for out in (m, v):
            f = (out[keep] / x[keep]).log()
            if f.abs().max().item() > bound + 1e-4 or f.max().item() - f.min().item() == 0.0:
                return False, f"not img * exp(field) with |field| <= {bound:g}"
            texts.append(f"{f.min().item():+.2f}..{f.max().item():+.2f}")
        return True, "log field " + "/".join(texts)
    return check


def per_sample(check):
    """Runs a one-sample check on each sample of the batch (its own statistics / parameter)."""
    def run(x, m, v):
        texts = []
        for i in range(x.shape[0]):
            ok, text = check(x[i:i + 1], m[i:i + 1], v[i:i + 1])
            if not ok:
                return False, f"sample {i}: {text}"
            texts.append(text)
        return True, texts[0] + ("" if len(texts) == 1 else f" (+{len(texts) - 1})")
    return run


def _check_contrast_one(x, m, v):
    mn, mx = x.min(), x.max()
    b = (x - mn) / (mx - mn)
    keep = (b > 0.05) & (b < 0.95)
    gs = []
    for out in (m, v):
        g = ((out[keep] - mn) / (mx - mn)).log() / b[keep].log()
        if not 0.5 <= g.median().item() <= 4.5 or (g - g.median()).abs().max().item() > 1e-3 * g.median().item():
            return False, "not a single gamma in [0.5, 4.5]"
        gs.append(g.median().item())
    return True, f"gamma {gs[0]:.2f}/{gs[1]:.2f}"


# ((x - mn) / range)^g * range + mn: one g in [0.5, 4.5] for every voxel of each sample.
check_contrast = per_sample(_check_contrast_one)


def check_chain(x, m, v):
    """Chain = SIR (deterministic) + per-sample offset + noise: the residual after SIR has a
    mean in [-0.1, 0.1] and a std <= 0.1."""
    base = ((x + 175.0) / 425.0).clamp(0.0, 1.0)
    texts = []
    for out in (m, v):
        r = _per_sample(out - base)
        off, sd = r.mean(1), r.std(1)
        if off.abs().max().item() > 0.1 + 1e-3 or sd.max().item() > 0.1 * 1.01 or sd.min().item() == 0.0:
            return False, "residual after SIR: offset or noise out of range"
        texts.append(f"{off[0].item():+.2f},{sd[0].item():.2f}")
    return True, "off,sd " + "/".join(texts)


def check_std_shift(x, m, v, factor=0.5):
    """img + f * std(img): one offset per sample with |offset| <= factor * std (population std)."""
    texts = []
    for out in (m, v):
        r = _per_sample(out - x)
        off, sd = r.mean(1), _per_sample(x).std(1, unbiased=False)
        if (r - off[:, None]).abs().max().item() > 1e-2 or (off.abs() > factor * sd * (1 + 1e-5)).any():
            return False, "offset not constant / not within factor * std"
        texts.append(f"{(off / sd)[0].item():+.3f}")
    return True, "f " + "/".join(texts)


def check_fixed_mean(x, m, v, factor=0.5):
    """(img - mean) (1 + f) + mean: the mean kept, one f in [-factor, factor] per sample."""
    xs = _per_sample(x)
    xc = xs - xs.mean(1, keepdim=True)
    texts = []
    for out in (m, v):
        o = _per_sample(out)
        f = (((o - xs.mean(1, keepdim=True)) * xc).sum(1) / (xc * xc).sum(1)) - 1.0
        fit = xc * (1 + f[:, None]) + xs.mean(1, keepdim=True)
        if ((o - fit).abs().max().item() > 1e-2 or f.abs().max().item() > factor + 1e-4
                or (o.mean(1) - xs.mean(1)).abs().max().item() > 1e-2):
            return False, "not (x - mean)(1 + f) + mean with |f| <= factor"
        texts.append(f"{f[0].item():+.3f}")
    return True, "f " + "/".join(texts)


def check_histogram_shift(x, m, v):
    """A monotone map of [min, max] onto itself with the ends fixed, per sample."""
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            xs, o = x[n].flatten(), out[n].flatten()
            idx = torch.argsort(xs[:200000])
            ys = o[:200000][idx]
            lo, hi = xs.min().item(), xs.max().item()
            tol = 1e-4 * (hi - lo)
            if ((ys[1:] - ys[:-1]).min().item() < -tol or o.min().item() < lo - tol or o.max().item() > hi + tol
                    or abs(o.min().item() - lo) > tol or abs(o.max().item() - hi) > tol):
                return False, "not a monotone map of [min, max] onto itself"
        texts.append(f"mean {out.mean().item():.0f}")
    return True, "/".join(texts) + f" (in {x.mean().item():.0f})"


class _CheckedCallCopies:
    """MONAI's StdShiftIntensity writes into its float32 input (img[...] = img[...] + offset): the
    first call (the one whose output is checked) gets a copy, so the check sees the shift; the
    timed calls run exactly as MONAI does."""

    def __init__(self, t):
        self.t, self.first = t, True

    def __call__(self, img):
        if self.first:
            self.first = False
            return self.t(img.clone())
        return self.t(img)


def new_intensity_pairs():
    """(name, MONAI transform, voxaug transform, check) for case (i), issue 5's new transforms."""
    return [
        ("RandStdShiftIntensity",
         _CheckedCallCopies(mt.RandStdShiftIntensity(factors=0.5, prob=1.0).set_random_state(SEED)),
         vt.RandStdShiftIntensity(factors=0.5, prob=1.0, seed=SEED), check_std_shift),
        ("RandScaleIntensityFixedMean",
         mt.RandScaleIntensityFixedMean(prob=1.0, factors=0.5).set_random_state(SEED),
         vt.RandScaleIntensityFixedMean(prob=1.0, factors=0.5, seed=SEED), check_fixed_mean),
        ("RandHistogramShift", mt.RandHistogramShift(num_control_points=10, prob=1.0).set_random_state(SEED),
         vt.RandHistogramShift(num_control_points=10, prob=1.0, seed=SEED), check_histogram_shift),
    ]


def new_intensity_rows(device, args):
    """(i) the new transforms, prob 1, on 1x1x224x224x160 and on a batch of 2x1x128^3 (voxaug in one
    call, MONAI looping over the samples)."""
    rows = []
    for shape in ((1, 1, 224, 224, 160), (2, 1, 128, 128, 128)):
        for name, m_t, v_t, check in new_intensity_pairs():
            x = make_input(shape, device)  # fresh: MONAI's std shift moves its input
            rows.append(run_case(f"(i) {name}", x, m_t, v_t, check, device, args, per_sample_monai=shape[0] > 1))
            del x
    return rows


# ---------------------------------------------------------------- cases
def make_input(shape, device, seed=SEED) -> torch.Tensor:
    """CT-like intensities in HU, so that SIR's window and clip both matter."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.empty(shape, dtype=torch.float32).uniform_(-1024.0, 1500.0, generator=g).to(device)


def run_case(name, x5, monai_fn, voxaug_fn, check, device, args, per_sample_monai=False):
    """Times MONAI and voxaug on the same data and checks both outputs."""
    if per_sample_monai:
        def monai_call():
            return [monai_fn(x5[i]) for i in range(x5.shape[0])]
    else:
        def monai_call():
            return monai_fn(x5[0])

    m_out = monai_call()
    v_out = voxaug_fn(x5)
    m = torch.stack([plain(o) for o in m_out]) if per_sample_monai else plain(m_out)[None]
    v = plain(v_out)
    if m.shape != v.shape:
        raise RuntimeError(f"{name}: MONAI shape {tuple(m.shape)} != voxaug shape {tuple(v.shape)}")
    for label, t in (("MONAI", m), ("voxaug", v)):
        if not torch.isfinite(t).all() or t.abs().max().item() == 0.0:
            raise RuntimeError(f"{name}: {label} output is all zeros or not finite")
    ok, text = check(plain(x5), m, v)
    del m_out, v_out, m, v

    monai_ms = median_ms(monai_call, device, args.repeats, args.warmup)
    voxaug_ms = median_ms(lambda: voxaug_fn(x5), device, args.repeats, args.warmup)
    return {"case": name, "shape": "x".join(map(str, x5.shape)), "device": device.type,
            "monai_ms": monai_ms, "voxaug_ms": voxaug_ms, "speedup": monai_ms / voxaug_ms,
            "check": text, "check_ok": ok}


def check_resampled(x, m, v):
    """Random affine draws differ between libraries: compare what they must share."""
    ok = m.shape == v.shape and torch.isfinite(v).all().item()
    rel = abs(v.double().mean().item() - m.double().mean().item()) / max(1e-6, abs(m.double().mean().item()))
    ok = ok and rel < 0.1  # a mild rotation / scale with reflection keeps the intensity mean
    return ok, f"mean {m.double().mean().item():.1f}/{v.double().mean().item():.1f}"


def check_resampled_centre(x, m, v):
    """Zero padding: how much of the field of view is padded depends on each library's own
    random scale, so compare the central half-size box (inside the input for every draw)."""
    box = tuple(slice(s // 4, s - s // 4) for s in m.shape[2:])
    return check_resampled(x, m[(slice(None), slice(None), *box)], v[(slice(None), slice(None), *box)])


def spatial_rows(device, args):
    rows = []
    ranges = dict(rotate_range=(0.3, 0.3, 0.3), scale_range=(0.1, 0.1, 0.1), translate_range=(5, 5, 5))
    x = make_input((1, 1, 224, 224, 160), device)
    m_aff = mt.RandAffine(prob=1.0, mode="bilinear", padding_mode="reflection", **ranges)
    m_aff.set_random_state(SEED)
    v_aff = vt.RandAffine(prob=1.0, mode="bilinear", padding_mode="reflection", seed=SEED, **ranges)
    rows.append(run_case("(e) RandAffine vs MONAI", x, m_aff, v_aff, check_resampled, device, args))
    if tio is not None:
        t_aff = tio.RandomAffine(degrees=10, scales=0.1, image_interpolation="linear", default_pad_value=0)
        # voxaug's TorchIO RandomAffine: the same parameterisation, SimpleITK's geometry and pad
        v_tio = vt.RandomAffine(degrees=10, scales=0.1, image_interpolation="linear", default_pad_value=0,
                                seed=SEED)

        def torchio_call(img):  # TorchIO works on CPU tensors (SimpleITK)
            return t_aff(img.cpu())

        rows.append(run_case("(e) RandomAffine vs TorchIO", x, torchio_call, v_tio, check_resampled_centre, device,
                             args))
    del x
    img = make_input((4, 1, 96, 96, 96), device)
    lab = (img > 200).to(torch.uint8)
    m_d = mt.RandAffined(keys=["image", "label"], prob=1.0, mode=("bilinear", "nearest"),
                         padding_mode="reflection", **ranges)
    m_d.set_random_state(SEED)
    v_d = vt.RandAffined(keys=["image", "label"], prob=1.0, mode=("bilinear", "nearest"),
                         padding_mode="reflection", seed=SEED, **ranges)

    labels = {img[i].data_ptr(): lab[i] for i in range(img.shape[0])}  # each sample's own label

    def monai_pairs(x1):
        return m_d({"image": x1, "label": labels[x1.data_ptr()]})["image"]

    rows.append(run_case("(e) RandAffined img+label", img, monai_pairs,
                         lambda xb: v_d({"image": xb, "label": lab})["image"], check_resampled, device, args,
                         per_sample_monai=True))
    del img, lab
    rows.extend(exact_rows(device, args))
    rows.extend(spacing_rows(device, args))
    return rows


def check_equal(x, m, v):
    """Deterministic exact transforms: the same bytes."""
    d = (m.double() - v.double()).abs().max().item() if m.shape == v.shape else float("inf")
    return d == 0.0, f"max|d| {d:g}"


def check_flipped(x, m, v):
    """Random axis flips (each library draws its own axes): every output sample is its input
    flipped along one axis or not at all."""
    for i in range(v.shape[0]):
        if not any(torch.equal(v[i], x[i] if a is None else torch.flip(x[i], [a + 1])) for a in (None, 0, 1, 2)):
            return False, f"sample {i} is no flip of its input"
    return True, "flips of the input"


def exact_rows(device, args):
    """(e) exact copies: ResizeWithPadOrCrop and TorchIO's CropOrPad (1x1x224x224x160 ->
    192x256x160: crop, pad, keep) and RandAxisFlip on 4 x 1 x 128^3 (voxaug in one call, MONAI looping over the samples)."""
    rows = []
    x = make_input((1, 1, 224, 224, 160), device)
    size = (192, 256, 160)
    rows.append(run_case("(e) ResizeWithPadOrCrop", x, mt.ResizeWithPadOrCrop(size, mode="edge"),
                         vt.ResizeWithPadOrCrop(size, mode="edge"), check_equal, device, args))
    if tio is not None:  # TorchIO's CropOrPad (its ceil-first centring) on the same volume
        t_cop = tio.CropOrPad(size, padding_mode="edge")
        rows.append(run_case("(e) CropOrPad vs TorchIO", x, lambda img: t_cop(img.cpu()),
                             vt.CropOrPad(size, padding_mode="edge"), check_equal, device, args))
    del x
    x = make_input((4, 1, 128, 128, 128), device)
    m_flip = mt.RandAxisFlip(prob=1.0)
    m_flip.set_random_state(SEED)
    rows.append(run_case("(e) RandAxisFlip", x, m_flip, vt.RandAxisFlip(prob=1.0, seed=SEED), check_flipped, device,
                         args, per_sample_monai=True))
    return rows


def load_meta(name, device, dtype):
    """A mricron-data volume as a (1, D, H, W) MetaTensor carrying the file's affine."""
    import nibabel as nib
    import numpy as np
    from monai.data import MetaTensor

    nii = nib.load(Path("/usr/share/mricron/templates") / name)
    data = torch.from_numpy(np.asarray(nii.dataobj).astype(dtype))[None].to(device)
    return MetaTensor(data, affine=torch.as_tensor(nii.affine, dtype=torch.float64))


def half_voxel_ties(src_affine, dst_affine, shape):
    """Output voxels whose source coordinate (inv(src) @ dst, float64) lies within 1e-4 of a
    half-integer on some axis: there nearest-neighbour rounding is decided by float error
    (MONAI: float64 through grid_sample's normalised grid; voxaug: float32, half to even)."""
    import numpy as np

    m = np.linalg.solve(np.asarray(src_affine, dtype=np.float64), np.asarray(dst_affine, dtype=np.float64))
    idx = np.stack(np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij"), axis=-1)
    src = idx @ m[:3, :3].T + m[:3, 3]
    return torch.from_numpy((np.abs(src - np.floor(src) - 0.5) < 1e-4).any(axis=-1))


def check_spacing(ties=None):
    """Spacing is deterministic: channel 0 is the image (MONAI interpolates in float64, voxaug in
    float32: within 1e-4 of the data range), channel 1 (when present) the nearest-neighbour
    label: identical on every voxel that is not a half-voxel tie (``ties``, a boolean mask)."""
    def check(x, m, v):
        if m.shape != v.shape:
            return False, f"shape {tuple(m.shape)}/{tuple(v.shape)}"
        rng = float(m[:, 0].max() - m[:, 0].min()) or 1.0
        d = float((m[:, 0] - v[:, 0]).abs().max()) / rng
        ok, text = d <= 1e-4, f"max|d| {d:.1e} of range"
        if m.shape[1] > 1:
            differ = (m[0, 1] != v[0, 1])
            ok = ok and not bool((differ & ~ties).any())
            text += f", labels differ only on ties ({int(differ.sum())} of {int(ties.sum())})"
        return ok, text
    return check


def spacing_rows(device, args):
    """(e) Spacingd on real volumes with their affines: ch2 (image, bilinear) + aal (label,
    nearest) at 181x217x181 1 mm -> (1.5, 1.5, 2.0) mm, and ch2better (0.5 mm, 301x370x316)
    -> 1 mm, image only. MONAI's Spacingd (float64 interpolation, its default) on each
    MetaTensor; voxaug's Spacingd does image and label in one launch. Deterministic: checked
    against MONAI's output (``check_spacing``)."""
    import voxaug.spatial as vs

    rows = []
    ch2 = load_meta("ch2.nii.gz", device, "float32")
    aal = load_meta("aal.nii.gz", device, "int16")
    kw = dict(keys=["image", "label"], pixdim=(1.5, 1.5, 2.0), mode=("bilinear", "nearest"))
    m_s, v_s = mt.Spacingd(**kw), vs.Spacingd(**kw)

    def both(out):
        return torch.cat([plain(out["image"]), plain(out["label"])])

    ref = m_s({"image": ch2, "label": aal})["label"]
    ties = half_voxel_ties(ch2.affine, ref.affine, ref.shape[1:])
    rows.append(run_case("(e) Spacingd img+label", ch2.as_tensor()[None],
                         lambda _x: both(m_s({"image": ch2, "label": aal})),
                         lambda _x: both(v_s({"image": ch2, "label": aal}))[None], check_spacing(ties), device, args))
    del ch2, aal
    big = load_meta("ch2better.nii.gz", device, "float32")
    kw = dict(keys=["image"], pixdim=(1.0, 1.0, 1.0), mode="bilinear")
    m_b, v_b = mt.Spacingd(**kw), vs.Spacingd(**kw)
    rows.append(run_case("(e) Spacingd 0.5->1 mm", big.as_tensor()[None], lambda _x: m_b({"image": big})["image"],
                         lambda _x: v_b({"image": big})["image"][None], check_spacing(), device, args))
    del big
    # MONAI's integer modes: spline orders through scipy's map_coordinates (its numpy backend,
    # one CPU thread whatever the device); voxaug's prefiltered B-splines of the same orders.
    ch2 = load_meta("ch2.nii.gz", device, "float32")
    for order in (3, 5):
        kw = dict(keys=["image"], pixdim=(1.5, 1.5, 2.0), mode=order)
        m_k, v_k = mt.Spacingd(**kw), vs.Spacingd(**kw)
        rows.append(run_case(f"(e) Spacingd mode={order}", ch2.as_tensor()[None],
                             lambda _x, m_k=m_k: m_k({"image": ch2})["image"],
                             lambda _x, v_k=v_k: v_k({"image": ch2})["image"][None], check_range(1e-4), device,
                             args))
    return rows


def check_range(tol):
    """voxaug within tol of the data range of MONAI's output (deterministic transforms)."""
    def check(x, m, v):
        rng = float(m.max() - m.min()) or 1.0
        err = float((m.double() - v.double()).abs().max()) / rng
        return err <= tol, f"max |diff| {err:.1e} of the range (<= {tol:g})"
    return check


def load_ch2_aal(device):
    """ch2.nii.gz (float32) and aal.nii.gz (int16 labels) from mricron-data, as (1, 1, ...)."""
    import nibabel as nib
    import numpy as np

    root = Path("/usr/share/mricron/templates")
    img = torch.from_numpy(np.asarray(nib.load(root / "ch2.nii.gz").dataobj).astype("float32"))
    lab = torch.from_numpy(np.asarray(nib.load(root / "aal.nii.gz").dataobj).astype("int16"))
    return img[None, None].to(device), lab[None, None].to(device)


def check_elastic(label_values, tol=0.1):
    """Independent draws of the two libraries: shapes, finite, deformed, and means within `tol`
    of each other (with random scaling, e.g. TorchIO's RandomAffine +-10 % per axis, the brain's
    share of the volume moves by up to ~1.1^3: such rows pass a larger tol)."""
    def check(x, m, v):
        rel = abs(v.mean().item() - m.mean().item()) / max(1e-6, abs(m.mean().item()))
        ok = m.shape == v.shape and bool(torch.isfinite(v).all()) and rel < tol
        ok = ok and (v - x).abs().mean().item() > 0.1  # it deformed
        return ok, f"mean {m.mean().item():.1f}/{v.mean().item():.1f}"
    return check


def deform_rows(device, args):
    """(f): elastic deformation of image + label on ch2 + aal."""
    import voxaug.deform as vd
    import voxaug.spatial as vs

    img, lab = load_ch2_aal(device)
    values = set(torch.unique(lab).tolist())
    sub = argparse.Namespace(repeats=min(args.repeats, 3), warmup=min(args.warmup, 1))
    rows = []
    ranges = dict(rotate_range=(0.1, 0.1, 0.1), scale_range=(0.05, 0.05, 0.05))
    m_el = mt.Rand3DElasticd(keys=["image", "label"], sigma_range=(5, 8), magnitude_range=(100, 200), prob=1.0,
                             mode=("bilinear", "nearest"), padding_mode="zeros", **ranges)
    m_el.set_random_state(SEED)
    v_el = vd.Rand3DElasticd(["image", "label"], (5, 8), (100, 200), prob=1.0, mode=("bilinear", "nearest"),
                             padding_mode="zeros", seed=SEED, **ranges)
    # Labels stay labels (checked once, outside the timed calls).
    labels_ok = {"voxaug": set(torch.unique(v_el({"image": img, "label": lab})["label"]).tolist()) <= values}

    def voxaug_el(xb):
        return v_el({"image": xb, "label": lab})["image"]

    rows.append(run_case("(f) Rand3DElasticd vs MONAI", img,
                         lambda x1: m_el({"image": x1, "label": lab[0]})["image"], voxaug_el,
                         check_elastic(values), device, sub))
    if tio is not None:
        subject_lab = lab[0].cpu()

        def torchio_call(t):  # TorchIO works on CPU tensors (SimpleITK), image + label as a Subject
            return lambda x1: t(tio.Subject(image=tio.ScalarImage(tensor=x1.cpu()),
                                            label=tio.LabelMap(tensor=subject_lab)))["image"].data

        # RandomAffineElasticDeformation: one SimpleITK resampling through [affine, B-spline]
        # (TorchIO's defaults of both parts). ElasticDeformation: TorchIO's deterministic one with
        # control points as its RandomElasticDeformation draws them (7 per axis, 7.5 mm, 2 locked).
        cp = np.random.default_rng(SEED).uniform(-7.5, 7.5, (7, 7, 7, 3))
        cp[:2], cp[-2:], cp[:, :2], cp[:, -2:], cp[:, :, :2], cp[:, :, -2:] = 0, 0, 0, 0, 0, 0
        for name, t_tio, t_vx, tol in (
                ("(f) RandomElastic vs TorchIO", tio.RandomElasticDeformation(),
                 vd.RandomElasticDeformation(seed=SEED, label_keys=("label",)), 0.1),
                ("(f) ElasticDeformation vs TorchIO", tio.ElasticDeformation(control_points=cp,
                                                                             max_displacement=(7.5, 7.5, 7.5)),
                 vd.ElasticDeformation(cp, 7.5, label_keys=("label",)), 0.1),
                ("(f) RandomAffineElastic vs TorchIO", tio.RandomAffineElasticDeformation(),
                 vd.RandomAffineElasticDeformation(label_keys=("label",), seed=SEED), 0.35)):
            rows.append(run_case(name, img, torchio_call(t_tio),
                                 lambda xb, t_vx=t_vx: t_vx({"image": xb, "label": lab})["image"],
                                 check_elastic(values, tol), device, sub))
    for r in rows:
        r["check_ok"] = r["check_ok"] and labels_ok.get("voxaug", True)
    rows.append(patch_elastic_row(img, lab, values, ranges, device, sub))
    # nnU-Net's order: the deformation, then mirroring: voxaug folds the flips into the gather
    flips = [lambda lib, a=a: lib.RandFlipd(["image", "label"], prob=0.5, spatial_axis=a) for a in range(3)]
    m_f = mt.Compose([mt.Rand3DElasticd(["image", "label"], sigma_range=(5, 8), magnitude_range=(100, 200),
                                        prob=1.0, mode=("bilinear", "nearest"), padding_mode="zeros", **ranges)]
                     + [f(mt) for f in flips])
    m_f.set_random_state(SEED)
    v_f = vt.Compose([vd.Rand3DElasticd(["image", "label"], (5, 8), (100, 200), prob=1.0,
                                        mode=("bilinear", "nearest"), padding_mode="zeros", seed=SEED, **ranges)]
                     + [f(vs) for f in flips])
    rows.append(run_case("(f) Rand3DElasticd + flips", img, lambda x1: m_f({"image": x1, "label": lab[0]})["image"],
                         lambda xb: v_f({"image": xb, "label": lab})["image"], check_elastic(values), device, sub))
    return rows


def patch_elastic_row(img, lab, values, ranges, device, sub):
    """(f) RandCropByPosNegLabeld (4 x 96^3, image + label) then Rand3DElasticd: voxaug's Compose
    gathers each deformed patch from the full volume in one launch (crop, field and affine);
    MONAI crops, then deforms each patch. The centres differ between the libraries (their own
    draws): checked are shapes, finite images that were deformed, label values."""
    import voxaug.crop as vc
    import voxaug.deform as vd

    keys = ["image", "label"]
    el = dict(sigma_range=(5, 8), magnitude_range=(100, 200), prob=1.0, mode=("bilinear", "nearest"),
              padding_mode="zeros", **ranges)
    crop = dict(label_key="label", spatial_size=(96, 96, 96), pos=1.0, neg=1.0, num_samples=4)
    m_c = mt.Compose([mt.RandCropByPosNegLabeld(keys, **crop), mt.Rand3DElasticd(keys, **el)])
    m_c.set_random_state(SEED)
    v_c = vt.Compose([vc.RandCropByPosNegLabeld(keys, **crop, as_batch=True, seed=SEED),
                      vd.Rand3DElasticd(keys, **el, seed=SEED)])
    seen = {}

    def monai_call(x1):
        outs = m_c({"image": x1, "label": lab[0]})
        seen.setdefault("monai", torch.stack([plain(o["label"]) for o in outs]))
        return torch.stack([plain(o["image"]) for o in outs])

    def voxaug_call(xb):
        out = v_c({"image": xb, "label": lab})
        seen.setdefault("voxaug", out["label"])
        return out["image"][None]

    def check(x, m, v):
        ok = m.shape == v.shape == (1, 4, 1, 96, 96, 96) and bool(torch.isfinite(v).all())
        ok = ok and all(set(torch.unique(t).tolist()) <= values for t in seen.values())
        return ok, f"patch std {m.std().item():.1f}/{v.std().item():.1f}, labels ok"

    return run_case("(f) 4 crops + Rand3DElasticd", img, monai_call, voxaug_call, check, device, sub)


def check_close(tol):
    def check(x, m, v):
        err = (m - v).abs().max().item() / max(1e-6, m.abs().max().item())
        return err <= tol, f"max rel err {err:.1e}"
    return check


def filter_rows(device, args):
    """(g): GaussianSmooth vs MONAI's (the same erf kernel, zero padding); MedianSmooth (radius 1)."""
    import voxaug.filter as vf

    rows = []
    for shape in ((1, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = make_input(shape, device)
        for sigma in (1.0, 3.0):
            rows.append(run_case(f"(g) GaussianSmooth s={sigma:g}", x, mt.GaussianSmooth(sigma),
                                 vf.GaussianSmooth(sigma), check_close(1e-5), device, args))
        rows.append(run_case("(g) MedianSmooth r=1", x, mt.MedianSmooth(1), vf.MedianSmooth(1), check_close(0.0),
                             device, args))
        del x
    return rows


def check_smoothed(x, m, v):
    """Random Gaussian smoothing: both outputs keep the mean (zero padding moves it a little at
    the borders) and lower the standard deviation."""
    texts = []
    for out in (m, v):
        if not out.std().item() < x.std().item() or abs(out.mean().item() - x.mean().item()) > 0.05 * x.std().item():
            return False, "not smoother, or mean moved"
        texts.append(f"{out.std().item() / x.std().item():.2f}")
    return True, "std ratio " + "/".join(texts)


def check_correlated(x, m, v):
    """Random sharpening: both outputs follow the input (correlation > 0.3) and are finite."""
    cs = []
    for out in (m, v):
        c = torch.corrcoef(torch.stack([x.flatten(), out.flatten()]))[0, 1].item()
        if not c > 0.3:
            return False, f"correlation {c:.2f}"
        cs.append(c)
    return True, f"corr {cs[0]:.2f}/{cs[1]:.2f}"


def _check_signed_gamma_one(x, m, v):
    keep = x.abs() > 2.0
    gs = []
    for out in (m, v):
        g = out[keep].abs().log() / x[keep].abs().log()
        if (g.max() - g.min()).item() > 1e-3 or not 0.74 - 1e-3 <= g.median().item() <= 1.35 + 1e-3:
            return False, "not one gamma in [exp(-0.3), exp(0.3)]"
        if (torch.sign(out[keep]) != torch.sign(x[keep])).any():
            return False, "sign changed"
        gs.append(g.median().item())
    return True, f"gamma {gs[0]:.2f}/{gs[1]:.2f}"


# TorchIO gamma: sign(x) |x|^g with one g per sample, exp(-0.3) <= g <= exp(0.3).
check_signed_gamma = per_sample(_check_signed_gamma_one)


def more_intensity_pairs():
    """(name, peer transform, voxaug transform, check) for case (l): the issue-5 transforms
    without a row elsewhere. The "vs TorchIO" rows time TorchIO in the "monai ms" column."""
    import voxaug.filter as vf
    import voxaug.stats as vst

    pairs = [
        ("NormalizeIntensity", mt.NormalizeIntensity(), vst.NormalizeIntensity(), check_close(1e-5)),
        ("NormalizeIntensity nonzero", mt.NormalizeIntensity(nonzero=True, channel_wise=True),
         vst.NormalizeIntensity(nonzero=True, channel_wise=True), check_close(1e-5)),
        ("ScaleIntensityRangePctl", mt.ScaleIntensityRangePercentiles(5, 95, 0.0, 1.0, clip=True),
         vst.ScaleIntensityRangePercentiles(5, 95, 0.0, 1.0, clip=True), check_close(1e-5)),
        ("RandRicianNoise", mt.RandRicianNoise(prob=1.0, std=0.1).set_random_state(SEED),
         vt.RandRicianNoise(prob=1.0, std=0.1, seed=SEED), check_rician),
        ("RandBiasField", mt.RandBiasField(prob=1.0).set_random_state(SEED), vt.RandBiasField(prob=1.0, seed=SEED),
         check_bias_field()),
        ("RandAdjustContrast", mt.RandAdjustContrast(prob=1.0).set_random_state(SEED),
         vt.RandAdjustContrast(prob=1.0, seed=SEED), check_contrast),
        ("RandGaussianSmooth", mt.RandGaussianSmooth(prob=1.0).set_random_state(SEED),
         vf.RandGaussianSmooth(prob=1.0, seed=SEED), check_smoothed),
        ("RandGaussianSharpen", mt.RandGaussianSharpen(prob=1.0).set_random_state(SEED),
         vf.RandGaussianSharpen(prob=1.0, seed=SEED), check_correlated),
    ]
    if tio is not None:
        pairs += [
            ("RandomGamma vs TorchIO", tio.RandomGamma(), vt.RandomGamma(seed=SEED), check_signed_gamma),
            ("RandomBlur vs TorchIO", tio.RandomBlur(), vf.RandomBlur(seed=SEED), check_smoothed),
            ("RandomBiasField vs TorchIO", tio.RandomBiasField(), vt.RandomBiasField(seed=SEED),
             check_bias_field(10.0)),
            ("RandomNoise vs TorchIO", tio.RandomNoise(), vt.RandomNoise(seed=SEED), check_noise(0.25)),
            ("ZNormalization vs TorchIO", tio.ZNormalization(), vst.ZNormalization(), check_close(1e-5)),
            ("RescaleIntensity vs TorchIO", tio.RescaleIntensity(out_min_max=(-1, 1), percentiles=(0.5, 99.5)),
             vst.RescaleIntensity(out_min_max=(-1, 1), percentiles=(0.5, 99.5)), check_close(1e-5)),
            ("HistogramStandardization vs TorchIO",
             tio.HistogramStandardization({"default_image_name": HS_LANDMARKS}),
             vst.HistogramStandardization(HS_LANDMARKS), check_close(1e-5)),
        ]
    return pairs


# Landmarks of a made-up training set (TorchIO's 13 values on its [0, 100] scale, unevenly spaced).
HS_LANDMARKS = np.array([0.0, 8.0, 17.0, 22.0, 27.0, 36.0, 45.0, 55.0, 64.0, 70.0, 76.0, 88.0, 100.0])


def more_intensity_rows(device, args):
    """(l): each transform on 1x1x224x224x160 and on 2x1x128^3 (voxaug one call, the peer looping
    over the samples); at most 5 timed calls (MONAI's sharpening takes seconds)."""
    sub = argparse.Namespace(repeats=min(args.repeats, 5), warmup=min(args.warmup, 1))
    rows = []
    for shape in ((1, 1, 224, 224, 160), (2, 1, 128, 128, 128)):
        for name, p_t, v_t, check in more_intensity_pairs():
            x = make_input(shape, device)
            if "nonzero" in name:  # an MRI-like zero background (about a fifth of the voxels)
                x = torch.where(x < -500.0, torch.zeros_like(x), x)
            if "TorchIO" in name:
                def peer(x1, t=p_t):  # TorchIO works on CPU tensors
                    return t(x1.cpu())
            else:
                peer = p_t
            rows.append(run_case(f"(l) {name}", x, peer, v_t, check, device, sub, per_sample_monai=shape[0] > 1))
            del x
    return rows


def check_patches(x, m, v):
    ok = m.shape == v.shape and bool(torch.isfinite(v).all())
    return ok, f"shape {tuple(v.shape)}"


def crop_rows(device, args):
    """(h): RandCropByPosNegLabeld on ch2 + aal, 4 x 96^3 patches of image + label."""
    import voxaug.crop as vc

    img, lab = load_ch2_aal(device)
    keys = ["image", "label"]
    sub = argparse.Namespace(repeats=args.repeats, warmup=args.warmup)
    m_t = mt.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4)
    m_t.set_random_state(SEED)
    v_t = vc.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4, seed=SEED)

    def stack(outs):
        return torch.stack([plain(o["image"]) for o in outs])

    def monai_call(x1):
        return stack(m_t({"image": x1, "label": lab[0]}))

    def voxaug_call(xb):
        return torch.cat([o["image"] for o in v_t({"image": xb, "label": lab})])[None]

    rows = [run_case("(h) RandCropByPosNegLabeld", img, monai_call, voxaug_call, check_patches, device, sub)]
    idx = mt.FgBgToIndicesd("label")({"label": lab[0]})
    m_i = mt.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4,
                                    fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices")
    m_i.set_random_state(SEED)

    def monai_indexed(x1):
        return stack(m_i({"image": x1, "label": lab[0], **idx}))

    rows.append(run_case("(h) ...d, MONAI precomputed", img, monai_indexed, voxaug_call, check_patches, device,
                         sub))
    # Both caching: voxaug's FgBgToIndicesd keeps chunk counts (no scan of the volume per draw).
    v_idx = vc.FgBgToIndicesd("label")({"label": lab})
    v_i = vc.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4, seed=SEED,
                                    fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices")

    def voxaug_indexed(xb):
        return torch.cat([o["image"] for o in v_i({"image": xb, "label": lab, **v_idx})])[None]

    rows.append(run_case("(h) ...d, both precomputed", img, monai_indexed, voxaug_indexed, check_patches, device,
                         sub))
    if tio is not None:
        sampler = tio.LabelSampler(patch_size=96, label_name="label", label_probabilities={0: 1, 1: 1})
        subject = tio.Subject(image=tio.ScalarImage(tensor=img[0].cpu()), label=tio.LabelMap(tensor=lab[0].cpu()))

        def torchio_call(x1):
            it = sampler(subject, num_patches=4)
            return torch.stack([next(it)["image"].data for _ in range(4)])

        rows.append(run_case("(h) vs TorchIO LabelSampler", img, torchio_call, voxaug_call, check_patches, device,
                             sub))
    # The crop followed by a spatial transform: MONAI crops 4 patches then runs RandAffined on
    # each; voxaug's Compose gathers the rotated patches straight from the volume (one launch
    # for image + label, real data at the corners).
    import voxaug.spatial as vs
    from voxaug import transforms as vt

    aff = dict(keys=keys, prob=1.0, rotate_range=(0.3, 0.3, 0.3), scale_range=(0.1, 0.1, 0.1),
               mode=("bilinear", "nearest"), padding_mode="zeros")
    m_ca = mt.Compose([mt.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4),
                       mt.RandAffined(**aff)])
    m_ca.set_random_state(SEED)
    v_ca = vt.Compose([vc.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), pos=1, neg=1, num_samples=4,
                                                 as_batch=True), vs.RandAffined(**aff)]).set_random_state(SEED)

    def monai_crop_affine(x1):
        return stack(m_ca({"image": x1, "label": lab[0]}))

    def voxaug_crop_affine(xb):
        return v_ca({"image": xb, "label": lab})["image"][None]

    rows.append(run_case("(h) crop + RandAffined, fused", img, monai_crop_affine, voxaug_crop_affine,
                         check_patches, device, sub))
    rows.extend(crop_sampler_rows(device, sub, img, lab))
    return rows


def crop_sampler_rows(device, sub, img, lab):
    """(h) continued: RandCropByLabelClassesd (all AAL classes, equal ratios) and
    RandWeightedCropd (the ch2 intensities as weights) vs MONAI, and voxaug's TorchIO-style
    LabelSampler / WeightedSampler vs TorchIO's; 4 x 96^3 patches of image + label each."""
    import voxaug.crop as vc

    keys, size, k = ["image", "label"], (96, 96, 96), int(lab.max().item()) + 1

    def stack(outs):
        return torch.stack([plain(o["image"]) for o in outs])

    def cat(outs):
        return torch.cat([o["image"] for o in outs])[None]

    m_c = mt.RandCropByLabelClassesd(keys, "label", size, num_classes=k, num_samples=4, image_key="image", warn=False)
    m_c.set_random_state(SEED)
    v_c = vc.RandCropByLabelClassesd(keys, "label", size, num_classes=k, num_samples=4, image_key="image", warn=False,
                                     seed=SEED)
    rows = [run_case("(h) RandCropByLabelClassesd", img, lambda x1: stack(m_c({"image": x1, "label": lab[0]})),
                     lambda xb: cat(v_c({"image": xb, "label": lab})), check_patches, device, sub)]
    m_w = mt.RandWeightedCropd(keys, "w", size, num_samples=4)
    m_w.set_random_state(SEED)
    v_w = vc.RandWeightedCropd(keys, "w", size, num_samples=4, seed=SEED)
    rows.append(run_case("(h) RandWeightedCropd", img,
                         lambda x1: stack(m_w({"image": x1, "label": lab[0], "w": x1})),
                         lambda xb: cat(v_w({"image": xb, "label": lab, "w": xb})), check_patches, device, sub))
    if tio is None:
        return rows
    subject = tio.Subject(image=tio.ScalarImage(tensor=img[0].cpu()), label=tio.LabelMap(tensor=lab[0].cpu()),
                          w=tio.Image(tensor=img[0].cpu(), type=tio.SAMPLING_MAP))
    t_l = tio.LabelSampler(patch_size=96, label_name="label", label_probabilities={0: 1, 1: 1})
    v_l = vc.LabelSampler(96, "label", {0: 1, 1: 1}, seed=SEED)
    t_w = tio.WeightedSampler(patch_size=96, probability_map="w")
    v_ws = vc.WeightedSampler(96, "w", seed=SEED)

    def torchio(sampler):
        def call(x1):
            it = sampler(subject, num_patches=4)
            return torch.stack([next(it)["image"].data for _ in range(4)])
        return call

    def voxaug(sampler, extra):
        def call(xb):
            return torch.cat([p["image"] for p in sampler({"image": xb, "label": lab, **extra(xb)}, num_patches=4)])[None]
        return call

    rows.append(run_case("(h) LabelSampler vs TorchIO", img, torchio(t_l), voxaug(v_l, lambda xb: {}), check_patches,
                         device, sub))
    rows.append(run_case("(h) WeightedSampler vs TorchIO", img, torchio(t_w), voxaug(v_ws, lambda xb: {"w": xb}),
                         check_patches, device, sub))
    # One queue epoch: 2 cached volumes x 4 patches (LabelSampler), max_length 8, batches of 4,
    # TorchIO's Queue (num_workers 0) through a DataLoader vs voxaug's PatchQueue.
    from torch.utils.data import DataLoader

    t_queue = tio.Queue(tio.SubjectsDataset([subject, subject]), max_length=8, samples_per_volume=4, sampler=t_l,
                        num_workers=0)
    v_queue = vc.PatchQueue([{"image": img[0], "label": lab[0]}] * 2, max_length=8, samples_per_volume=4,
                            sampler=v_l, batch_size=4, seed=SEED)

    def torchio_epoch(x1):
        return torch.cat([b["image"][tio.DATA] for b in DataLoader(t_queue, batch_size=4)])

    def voxaug_epoch(xb):
        return torch.cat([b["image"] for b in v_queue])[None]

    rows.append(run_case("(h) PatchQueue vs TorchIO", img, torchio_epoch, voxaug_epoch, check_patches, device, sub))
    return rows


# ---------------------------------------------------------------- (j) degrade, (k) nnU-Net chain
DEGRADE_BAR = 3.0  # issue 5: RandCoarseDropout / RandSimulateLowResolution on 2 CPU cores
NNUNET_BAR = 5.0  # issue 5: the nnU-Net-like intensity chain


def dropout_args():
    return dict(holes=4, spatial_size=16, max_holes=8, max_spatial_size=48, prob=1.0)  # fill_value=None


def check_dropout(x, m, v):
    """Changed voxels lie in holes filled from U(min, max) of the sample; the rest is the input."""
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            changed = out[n] != x[n]
            frac = changed.double().mean().item()
            vals = out[n][changed]
            if not 0.0 < frac < 1.0 or vals.min() < x[n].min() or vals.max() > x[n].max():
                return False, "holes missing or fill outside [min, max]"
        texts.append(f"{frac * 100:.0f}%")
    return True, "filled " + "/".join(texts)


def check_shuffle(x, m, v):
    """A permutation within holes: each sample keeps its values (sorted equal), some voxels moved."""
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            moved = (out[n] != x[n]).double().mean().item()
            if not 0.0 < moved < 1.0 or not torch.equal(out[n].flatten().sort().values,
                                                         x[n].flatten().sort().values):
                return False, "not a permutation within holes"
        texts.append(f"{moved * 100:.1f}%")
    return True, "moved " + "/".join(texts)


def check_swap(x, m, v):
    """Patches moved: every output value is one of the input's (overlapping patches overwrite each
    other, so not a permutation), some voxels changed."""
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            moved = (out[n] != x[n]).double().mean().item()
            if not 0.0 < moved < 1.0 or not bool(torch.isin(out[n], x[n]).all()):
                return False, "values not from the input, or nothing moved"
        texts.append(f"{moved * 100:.0f}%")
    return True, "moved " + "/".join(texts)


def check_lowres(x, m, v):
    """Nearest-then-linear resampling: a convex combination of input voxels, not the input."""
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            lo, hi = x[n].min().item(), x[n].max().item()
            tol = 1e-5 * max(abs(lo), abs(hi))
            if out[n].min() < lo - tol or out[n].max() > hi + tol or torch.equal(out[n], x[n]):
                return False, "outside the input's range, or unchanged"
        texts.append(f"{(out - x).abs().mean().item():.0f}")
    return True, "mean|d| " + "/".join(texts)


def degrade_rows(device, args):
    """(j) RandCoarseDropout (MONAI's in place on a private copy; voxaug's default out of place and
    in_place=True), RandCoarseShuffle and RandSimulateLowResolution, prob 1, on 2x1x128^3 (voxaug in one call, MONAI
    looping over the samples) and 1x1x224x224x160."""
    import voxaug.degrade as vd

    rows = []
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = make_input(shape, device)
        per = shape[0] > 1
        m_priv = x.clone()  # MONAI writes the holes into its input's memory
        by_ptr = {x[i].data_ptr(): m_priv[i] for i in range(shape[0])}
        m_t = mt.RandCoarseDropout(**dropout_args())
        m_t.set_random_state(SEED)

        def monai_dropout(x1):
            return m_t(by_ptr[x1.data_ptr()])

        rows.append(run_case("(j) RandCoarseDropout", x, monai_dropout,
                             vd.RandCoarseDropout(**dropout_args(), seed=SEED), check_dropout, device, args,
                             per_sample_monai=per))
        m_priv.copy_(x)
        v_priv = x.clone()
        v_ip = vd.RandCoarseDropout(**dropout_args(), seed=SEED, in_place=True)
        rows.append(run_case("(j) ...Dropout in_place", x, monai_dropout, lambda xb: v_ip(v_priv), check_dropout, device, args, per_sample_monai=per))
        # RandCoarseShuffle as the Swin UNETR self-supervised pretraining tutorial uses it
        # (holes 10, size 8) and with larger holes (4-8 of 16-48 voxels).
        for label, kw in (("10x8^3", dict(holes=10, spatial_size=8)),
                          ("4-8 x 16-48", dict(holes=4, spatial_size=16, max_holes=8, max_spatial_size=48))):
            m_s = mt.RandCoarseShuffle(prob=1.0, **kw)  # permutes its CPU input in place: a private copy
            m_s.set_random_state(SEED)
            m_priv.copy_(x)
            rows.append(run_case(f"(j) RandCoarseShuffle {label}", x, lambda x1, t=m_s: t(by_ptr[x1.data_ptr()]),
                                 vd.RandCoarseShuffle(prob=1.0, seed=SEED, **kw), check_shuffle, device, args,
                                 per_sample_monai=per))
            v_priv = x.clone()
            v_s = vd.RandCoarseShuffle(prob=1.0, seed=SEED, in_place=True, **kw)
            m_priv.copy_(x)
            rows.append(run_case(f"(j) ...Shuffle {label} in_place", x, lambda x1, t=m_s: t(by_ptr[x1.data_ptr()]),
                                 lambda xb, t=v_s, vp=v_priv: t(vp), check_shuffle, device, args,
                                 per_sample_monai=per))
        if tio is not None:  # TorchIO RandomSwap (its defaults: 100 swaps of 15^3 patches)
            t_sw = tio.RandomSwap()
            subjects = [tio.Subject(img=tio.ScalarImage(tensor=x[i].cpu())) for i in range(shape[0])]
            by_ptr_s = {x[i].data_ptr(): subjects[i] for i in range(shape[0])}
            rows.append(run_case("(j) RandomSwap vs TorchIO", x,
                                 lambda x1: t_sw(by_ptr_s[x1.data_ptr()])["img"].data.to(device),
                                 vd.RandomSwap(seed=SEED), check_swap, device, args, per_sample_monai=per))
        m_l = mt.RandSimulateLowResolution(prob=1.0)
        m_l.set_random_state(SEED)
        rows.append(run_case("(j) RandSimulateLowRes", x, m_l, vd.RandSimulateLowResolution(prob=1.0, seed=SEED),
                             check_lowres, device, args, per_sample_monai=per))
        del x, m_priv, v_priv
    return rows


def check_kspace(x, m, v):
    """Random draws differ between the libraries: both outputs finite, changed, and with the
    input's mean (the DC term is kept) within 1% of the input's range."""
    span = float(x.max() - x.min())
    texts = []
    for out in (m, v):
        for n in range(x.shape[0]):
            d = abs(out[n].double().mean().item() - x[n].double().mean().item())
            if not torch.isfinite(out[n]).all() or torch.equal(out[n].to(x.dtype), x[n]) or d > 0.01 * span:
                return False, "not finite, unchanged, or the mean moved"
        texts.append(f"{(out.double() - x.double()).abs().mean().item():.1f}")
    return True, "mean|d| " + "/".join(texts)


def kspace_rows(device, args):
    """(n) TorchIO RandomGhosting / RandomSpike / RandomMotion / RandomAnisotropy and MONAI
    RandKSpaceSpikeNoise, prob 1."""
    import voxaug.degrade as vd
    import voxaug.kspace as vk

    rows = []
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = make_input(shape, device)
        per = shape[0] > 1
        if tio is not None:
            t_g, t_s = tio.RandomGhosting(), tio.RandomSpike()
            rows.append(run_case("(n) RandomGhosting vs TorchIO", x, lambda img: t_g(img.cpu()),
                                 vk.RandomGhosting(seed=SEED), check_kspace, device, args, per_sample_monai=per))
            rows.append(run_case("(n) RandomSpike vs TorchIO", x, lambda img: t_s(img.cpu()),
                                 vk.RandomSpike(seed=SEED), check_kspace, device, args, per_sample_monai=per))
            t_m = tio.RandomMotion()
            rows.append(run_case("(n) RandomMotion vs TorchIO", x, lambda img: t_m(img.cpu()),
                                 vk.RandomMotion(seed=SEED), check_kspace, device, args, per_sample_monai=per))
            t_a = tio.RandomAnisotropy()
            rows.append(run_case("(n) RandomAnisotropy vs TorchIO", x, lambda img: t_a(img.cpu()),
                                 vd.RandomAnisotropy(seed=SEED), check_kspace, device, args, per_sample_monai=per))
        for label, rng in (("default range", None), ("range (13, 15)", (13.0, 15.0))):
            m_k = mt.RandKSpaceSpikeNoise(prob=1.0, intensity_range=rng)
            m_k.set_random_state(SEED)
            rows.append(run_case(f"(n) RandKSpaceSpike {label}", x, m_k,
                                 vk.RandKSpaceSpikeNoise(prob=1.0, intensity_range=rng, seed=SEED), check_kspace,
                                 device, args, per_sample_monai=per))
        del x
    return rows


def torchio_pre_rows(device, args):
    """(o) TorchIO Resample / ToCanonical on ch2 + aal and ch2better; RandomLabelsToImage on aal."""
    import numpy as np
    import voxaug.spatial as vs

    rows = []
    if tio is None:
        return rows
    ch2 = load_meta("ch2.nii.gz", device, "float32")
    aal = load_meta("aal.nii.gz", device, "int16")
    aff = ch2.affine.numpy()
    subject = tio.Subject(image=tio.ScalarImage(tensor=ch2.as_tensor().cpu(), affine=aff),
                          label=tio.LabelMap(tensor=aal.as_tensor().cpu(), affine=aff))
    t_r, v_r = tio.Resample((1.5, 1.5, 2.0)), vs.Resample((1.5, 1.5, 2.0), label_keys=("label",))

    def t_pair(_x):
        out = t_r(subject)
        return torch.cat([out["image"].data, out["label"].data.float()]).to(device)

    def v_pair(_x):
        out = v_r({"image": ch2, "label": aal})
        return torch.cat([plain(out["image"]), plain(out["label"]).float()])[None]

    size, out_aff = vs.torchio_reference_grid(ch2.shape[1:], aff, (1.5, 1.5, 2.0))
    ties = half_voxel_ties(aff, torch.as_tensor(out_aff), size)

    def check_pair(x, m, v):
        rng = float(m[0, 0].max() - m[0, 0].min()) or 1.0
        err = float((m[0, 0].double() - v[0, 0].double()).abs().max()) / rng
        differ = (m[0, 1] != v[0, 1]) & ~ties.to(m.device)
        ok = err <= 1e-5 and not bool(differ.any())
        return ok, f"image max |diff| {err:.1e} of the range, labels equal off ties"

    rows.append(run_case("(o) Resample img+label vs TorchIO", ch2.as_tensor()[None], t_pair, v_pair, check_pair,
                         device, args))
    del ch2, aal, subject
    big = load_meta("ch2better.nii.gz", device, "float32")
    big_subject = tio.Subject(image=tio.ScalarImage(tensor=big.as_tensor().cpu(), affine=big.affine.numpy()))
    t_b, v_b = tio.Resample(1.0), vs.Resample(1.0)
    rows.append(run_case("(o) Resample 0.5->1 mm vs TorchIO", big.as_tensor()[None],
                         lambda _x: t_b(big_subject)["image"].data.to(device),
                         lambda _x: plain(v_b(big))[None], check_range(1e-5), device, args))
    del big, big_subject
    ch2 = load_meta("ch2.nii.gz", device, "float32")
    perm = np.array([[0, -1.0, 0, 0], [0, 0, -1.0, 0], [1.0, 0, 0, 0], [0, 0, 0, 1.0]])
    lip = perm @ ch2.affine.numpy()
    from monai.data import MetaTensor

    img = MetaTensor(ch2.as_tensor(), affine=torch.as_tensor(lip))
    c_subject = tio.Subject(image=tio.ScalarImage(tensor=ch2.as_tensor().cpu(), affine=lip))
    t_c, v_c = tio.ToCanonical(), vs.ToCanonical()
    rows.append(run_case("(o) ToCanonical vs TorchIO", ch2.as_tensor()[None],
                         lambda _x: t_c(c_subject)["image"].data.to(device),
                         lambda _x: plain(v_c(img))[None], check_range(0.0), device, args))
    # RandomLabelsToImage on the AAL atlas at half resolution (91x109x91, 117 labels): TorchIO
    # draws a noise volume per label. The draws differ, so the check is the distribution: each
    # output's voxels of a label have one mean and std (std within TorchIO's default range).
    import voxaug.labels as vl

    aal_half = torch.from_numpy(np.ascontiguousarray(
        load_meta("aal.nii.gz", torch.device("cpu"), "int16").as_tensor()[:, ::2, ::2, ::2].numpy()))
    l_subject = tio.Subject(label=tio.LabelMap(tensor=aal_half))
    t_l, v_l = tio.RandomLabelsToImage(label_key="label"), vl.RandomLabelsToImage(seed=0)
    aal2 = aal_half.to(device)
    ids = aal_half.reshape(-1).long()

    def check_tissues(x, m, v):
        texts, ok = [], True
        for out in (m, v):
            flat = out.reshape(-1).double().cpu()
            n = torch.bincount(ids).double()
            mean = torch.bincount(ids, flat) / n.clamp(min=1)
            var = torch.bincount(ids, flat * flat) / n.clamp(min=1) - mean * mean
            std = var.clamp(min=0).sqrt()[n > 100]
            good = bool(((std > 0.005) & (std < 0.11)).all()) and bool(((mean[n > 100] > 0.05) &
                                                                          (mean[n > 100] < 0.95)).all())
            ok &= good
            texts.append(f"label std {float(std.min()):.3f}-{float(std.max()):.3f}")
        return ok, " / ".join(texts)

    rows.append(run_case("(o) RandomLabelsToImage AAL/2 vs TorchIO", aal2[None],
                         lambda _x: t_l(l_subject)["image_from_labels"].data.to(device),
                         lambda _x: plain(v_l(aal2))[None], check_tissues, device, args))
    rows.append(torchio_subject_pipeline_row(device, args))
    return rows


def torchio_subject_pipeline_row(device, args):
    """(o) A TorchIO augmentation pipeline on a Subject (ch2 image + AAL label map): RandomAffine,
    RandomElasticDeformation, ZNormalization inside the label's brain, RandomBlur, RandomBiasField,
    RandomNoise -- TorchIO's Compose on its Subject vs voxaug.torchio's Compose of the same names on
    the dictionary. Independent draws: checked are the shapes, a normalised finite image and labels
    that stay AAL labels."""
    import voxaug.torchio as vtio

    img, lab = load_ch2_aal(device)
    values = set(torch.unique(lab).tolist())
    subject = tio.Subject(image=tio.ScalarImage(tensor=img[0].cpu()), label=tio.LabelMap(tensor=lab[0].cpu()))
    t_pipe = tio.Compose([tio.RandomAffine(scales=0.1, degrees=10), tio.RandomElasticDeformation(),
                          tio.ZNormalization(masking_method="label"), tio.RandomBlur(std=(0, 1)),
                          tio.RandomBiasField(), tio.RandomNoise(std=(0, 0.1))])
    keys = dict(label_keys=["label"])
    v_pipe = vtio.Compose([vtio.RandomAffine(scales=0.1, degrees=10, seed=SEED, **keys),
                           vtio.RandomElasticDeformation(seed=SEED, **keys),
                           vtio.ZNormalization(masking_method="label", **keys),
                           vtio.RandomBlur(std=(0, 1), seed=SEED, **keys), vtio.RandomBiasField(seed=SEED, **keys),
                           vtio.RandomNoise(std=(0, 0.1), seed=SEED, **keys)])
    seen = {}

    def torchio_call(_x):
        out = t_pipe(subject)
        seen["torchio"] = out["label"].data
        return out["image"].data.to(device)

    def voxaug_call(xb):
        out = v_pipe({"image": xb, "label": lab})
        seen["voxaug"] = out["label"]
        return out["image"]

    def check(x, m, v):
        ok = m.shape == v.shape and bool(torch.isfinite(v).all())
        ok = ok and set(torch.unique(seen["voxaug"]).tolist()) <= values
        # z-normalised in the brain (the background lands well below 0): moments close to TorchIO's
        ok = ok and abs(float(v.mean()) - float(m.mean())) < 0.5 and 0.5 < float(v.std()) / float(m.std()) < 2.0
        return ok, f"mean {float(m.mean()):.2f}/{float(v.mean()):.2f}, std {float(m.std()):.2f}/{float(v.std()):.2f}"

    sub = argparse.Namespace(repeats=min(args.repeats, 3), warmup=min(args.warmup, 1))
    return run_case("(o) TorchIO Subject pipeline", img, torchio_call, voxaug_call, check, device, sub)


def check_smooth(x, m, v):
    """Random fields differ: both outputs finite, changed, within the input's range scaled by the
    field's largest factor (contrast and deformation keep it; intensity scales by <= 1)."""
    lo, hi = float(x.min()), float(x.max())
    span = hi - lo
    texts = []
    for out in (m, v):
        if not torch.isfinite(out).all() or torch.equal(out, x):
            return False, "not finite or unchanged"
        if float(out.min()) < min(lo, 0.0) - 1e-3 * span or float(out.max()) > max(hi, 0.0) + 1e-3 * span:
            return False, "outside the input's range"
        texts.append(f"{(out.double() - x.double()).abs().mean().item():.1f}")
    return True, "mean|d| " + "/".join(texts)


def smooth_rows(device, args):
    """(p) MONAI's smooth-field augmentations, prob 1."""
    import voxaug.smooth_field as vsf

    rows = []
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = make_input(shape, device)
        per = shape[0] > 1
        size = shape[2:]
        for name, m_cls, v_cls, kw in (
                ("RandSmoothFieldAdjustContrast", mt.RandSmoothFieldAdjustContrast,
                 vsf.RandSmoothFieldAdjustContrast, {}),
                ("RandSmoothFieldAdjustIntensity", mt.RandSmoothFieldAdjustIntensity,
                 vsf.RandSmoothFieldAdjustIntensity, {}),
                ("RandSmoothDeform", mt.RandSmoothDeform, vsf.RandSmoothDeform,
                 dict(def_range=0.1, grid_mode="bilinear"))):
            m_t = m_cls(size, (8, 8, 8), prob=1.0, device=device, **kw)
            m_t.set_random_state(SEED)
            rows.append(run_case(f"(p) {name}", x, m_t, v_cls(size, (8, 8, 8), prob=1.0, seed=SEED, **kw),
                                 check_smooth, device, args, per_sample_monai=per))
        del x
    return rows


def post_rows(device, args):
    """(q) KeepLargestConnectedComponent, FillHoles, RemoveSmallObjects and DistanceTransformEDT on
    ch2 / aal."""
    import voxaug.post as vp

    rows = []
    try:
        import skimage  # noqa: F401  (MONAI's labelling)
    except ImportError:
        return rows
    img, lab = load_ch2_aal(device)
    brain = (img > 40).to(torch.uint8)
    regions = [int(v) for v in torch.unique(lab).tolist()[1:6]]

    def equal(x, m, v):
        ok = torch.equal(m.to(v.dtype), v)
        return ok, "equal" if ok else f"{int((m.to(v.dtype) != v).sum())} voxels differ"

    for name, x, kw in (("(q) KeepLargestCC brain mask", brain, dict(applied_labels=[1])),
                        ("(q) KeepLargestCC 5 AAL regions", lab, dict(applied_labels=regions))):
        m_t, v_t = mt.KeepLargestConnectedComponent(**kw), vp.KeepLargestConnectedComponent(**kw)
        rows.append(run_case(name, x, m_t, v_t, equal, device, args))
    m_f, v_f = mt.FillHoles(applied_labels=regions), vp.FillHoles(applied_labels=regions)
    rows.append(run_case("(q) FillHoles 5 AAL regions", lab, m_f, v_f, equal, device, args))
    # RemoveSmallObjects: skimage >= 0.26 removes sizes <= the min_size MONAI passes (MONAI
    # documents <): voxaug gets the same integer threshold as min_size + 1 there.
    import warnings

    import numpy as np
    from skimage.morphology import remove_small_objects
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shift = 0 if remove_small_objects(np.ones((1, 3), bool), 3).any() else 1
        warnings.filterwarnings("ignore", category=FutureWarning)
        m_r, v_r = mt.RemoveSmallObjects(min_size=64), vp.RemoveSmallObjects(min_size=64 + shift)
        rows.append(run_case("(q) RemoveSmallObjects brain mask", brain, m_r, v_r, equal, device, args))
        rows.append(run_case("(q) RemoveSmallObjects 5 AAL regions", lab, m_r, v_r, equal, device, args))

    # DistanceTransformEDT of the brain mask and its complement (a signed distance map's halves),
    # at 1 mm (exact integers: equal) and at ch2's grid with anisotropic sampling.
    def close(x, m, v):
        m = m.to(v.dtype)
        err = float(((m - v).abs() / m.abs().clamp_min(1e-300)).max())
        return err <= 4e-15, "equal" if err == 0 else f"max rel diff {err:.1e}"

    two = torch.cat([brain, 1 - brain], 1)
    for name, sampling in (("(q) DistanceTransformEDT brain + outside", None),
                           ("(q) DistanceTransformEDT sampling (1.5, 1, 2)", [1.5, 1.0, 2.0])):
        rows.append(run_case(name, two, mt.DistanceTransformEDT(sampling=sampling),
                             vp.DistanceTransformEDT(sampling=sampling), close, device, args))
    return rows


def nnunet_pair(prob_one: bool):
    """nnU-Net's default intensity augmentation (REFERENCES.md) as a MONAI and a voxaug Compose:
    Gaussian noise (variance U(0, 0.1): MONAI's sample_std draws std U(0, sqrt(0.1)) instead),
    Gaussian blur sigma U(0.5, 1), brightness x U(0.75, 1.25), contrast U(0.75, 1.25) around the
    mean with the range preserved, low resolution zoom U(0.5, 1), inverted gamma and gamma
    U(0.7, 1.5) with stats retained; prob 1 or nnU-Net's probabilities."""
    import voxaug.degrade as vd
    import voxaug.filter as vf

    p = (lambda q: 1.0) if prob_one else (lambda q: q)
    sig = (0.5, 1.0)
    contrast_v = getattr(vt, "RandScaleIntensityFixedMean", None)
    m = mt.Compose([
        mt.RandGaussianNoise(prob=p(0.1), std=0.1 ** 0.5, sample_std=True),
        mt.RandGaussianSmooth(sigma_x=sig, sigma_y=sig, sigma_z=sig, prob=p(0.2)),
        mt.RandScaleIntensity(factors=(-0.25, 0.25), prob=p(0.15)),
        mt.RandScaleIntensityFixedMean(factors=0.25, preserve_range=True, prob=p(0.15)),
        mt.RandSimulateLowResolution(prob=p(0.25), zoom_range=(0.5, 1.0)),
        mt.RandAdjustContrast(gamma=(0.7, 1.5), invert_image=True, retain_stats=True, prob=p(0.1)),
        mt.RandAdjustContrast(gamma=(0.7, 1.5), retain_stats=True, prob=p(0.3)),
    ]).set_random_state(seed=SEED)
    contrast = (contrast_v(factors=0.25, preserve_range=True, prob=p(0.15)) if contrast_v is not None
                else vt.RandScaleIntensity(factors=0.25, prob=p(0.15)))
    v = vt.Compose([
        vt.RandGaussianNoise(prob=p(0.1), std=0.1 ** 0.5, sample_std=True),
        vf.RandGaussianSmooth(sigma_x=sig, sigma_y=sig, sigma_z=sig, prob=p(0.2)),
        vt.RandScaleIntensity(factors=(-0.25, 0.25), prob=p(0.15)),
        contrast,
        vd.RandSimulateLowResolution(prob=p(0.25), zoom_range=(0.5, 1.0)),
        vt.RandAdjustContrast(gamma=(0.7, 1.5), invert_image=True, retain_stats=True, prob=p(0.1)),
        vt.RandAdjustContrast(gamma=(0.7, 1.5), retain_stats=True, prob=p(0.3)),
    ]).set_random_state(SEED)
    return m, v, type(contrast).__name__


def check_nnunet(x, m, v):
    texts = []
    for out in (m, v):
        ratio = (out.std() / x.std()).item()
        if not 0.1 < ratio < 10.0:
            return False, "std changed by more than 10x"
        texts.append(f"{ratio:.2f}")
    return True, "std/std_in " + "/".join(texts)


def nnunet_rows(device, args):
    """(k) the nnU-Net-like intensity chain (z-scored input), prob 1 and nnU-Net's probabilities."""
    rows = []
    sub = argparse.Namespace(repeats=min(args.repeats, 5), warmup=min(args.warmup, 1))
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        g = torch.Generator(device="cpu").manual_seed(SEED)
        x = torch.randn(shape, generator=g).to(device)
        for prob_one in (True, False):
            m, v, contrast = nnunet_pair(prob_one)
            label = "prob 1" if prob_one else "nnU-Net p"
            rows.append(run_case(f"(k) nnU-Net chain, {label}", x, m, v, check_nnunet, device, sub,
                                 per_sample_monai=shape[0] > 1))
            rows[-1]["contrast"] = contrast
        del x
    print(f"(k) contrast step: voxaug {rows[0]['contrast']}" if rows else "", file=sys.stderr)
    return rows


def bandwidth(device, args):
    """(d): fused chain vs dst.copy_(src) at 8x1x256^3 float32, one read + one write each."""
    x = make_input((8, 1, 256, 256, 256), device)
    nbytes = 2 * x.numel() * x.element_size()
    chain = voxaug_chain()
    dst = torch.empty_like(x)
    chain_ms = median_ms(lambda: chain(x), device, args.repeats, args.warmup)
    copy_ms = median_ms(lambda: dst.copy_(x), device, args.repeats, args.warmup)
    chain_gbs, copy_gbs = nbytes / (chain_ms * 1e6), nbytes / (copy_ms * 1e6)
    return {"shape": "x".join(map(str, x.shape)), "bytes": nbytes, "chain_ms": chain_ms, "copy_ms": copy_ms,
            "chain_GBps": chain_gbs, "copy_GBps": copy_gbs, "ratio_to_copy": chain_gbs / copy_gbs}


def check_lazy(label_values):
    def check(x, m, v):
        ok = m.shape == v.shape and bool(torch.isfinite(v).all())
        rel = abs(v.mean().item() - m.mean().item()) / max(1e-6, abs(m.mean().item()))
        ok = ok and rel < 0.1  # a mild random rotation / scale keeps the mean of the centre crop
        labels = [set(torch.unique(plain(t)).tolist()) for t in label_outputs]
        ok = ok and all(u <= label_values for u in labels)
        return ok, f"mean {m.mean().item():.1f}/{v.mean().item():.1f}, labels " + \
            ("ok" if all(u <= label_values for u in labels) else "NOT labels")
    label_outputs: list = []
    check.label_outputs = label_outputs
    return check


def lazy_rows(device, args):
    """(m): a spatial chain on ch2 + aal, voxaug's fused Compose vs MONAI's, eager and lazy."""
    img, lab = load_ch2_aal(device)
    keys = ["image", "label"]
    ranges = dict(rotate_range=(0.3, 0.3, 0.3), scale_range=(0.1, 0.1, 0.1))

    def chain(lib, **kw):
        return [lib.RandAffined(keys, prob=1.0, mode=("bilinear", "nearest"), padding_mode="zeros", **ranges, **kw),
                lib.RandFlipd(keys, prob=1.0, spatial_axis=0, **kw), lib.Rotate90d(keys, k=1, spatial_axes=(0, 1)),
                lib.CenterSpatialCropd(keys, (128, 128, 128))]
    values = set(torch.unique(lab).tolist())
    rows = []
    v_c = vt.Compose(chain(vt, seed=SEED))
    overrides = {k: {"mode": m, "padding_mode": "zeros"} for k, m in zip(keys, ("bilinear", "nearest"))}
    for name, lazy in (("(m) lazy chain vs MONAI", False), ("(m) lazy chain vs MONAI lazy", True)):
        m_c = mt.Compose(chain(mt), lazy=lazy, overrides=overrides if lazy else None)
        m_c.set_random_state(SEED)
        check = check_lazy(values)

        def monai_call(x1, m_c=m_c, check=check):
            out = m_c({"image": x1, "label": lab[0]})
            if not check.label_outputs:
                check.label_outputs.append(out["label"])  # the first (checked) call's label
            return out["image"]

        def voxaug_call(xb, check=check):
            out = v_c({"image": xb, "label": lab})
            if len(check.label_outputs) < 2:
                check.label_outputs.append(out["label"])
            return out["image"]
        rows.append(run_case(name, img, monai_call, voxaug_call, check, device, args))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--repeats", type=int, default=10, help="timed calls per measurement (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    ap.add_argument("--only", default="intensity,spatial,deform,filter,crop",
                    help="comma-separated case groups: intensity (a-c, i), spatial (e), deform (f), filter (g), "
                         "crop (h); intensity-new: only (i); intensity-more: (l); degrade (j), nnunet (k), "
                         "lazy (m), kspace (n), torchio-pre (o), smooth (p), post (q)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        ap.error("--repeats must be >= 1 and --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("compare: --device cuda, but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    device = torch.device(args.device)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "device": args.device, "machine": machine(device), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "monai": monai.__version__, "voxaug": voxaug.__version__,
        "python": platform.python_version(), "repeats": args.repeats, "warmup": args.warmup,
        "statistic": "median ms per call",
    }
    print(f"date     {meta['date']}")
    print(f"command  {meta['command']}")
    print(f"machine  {meta['machine']} ({args.device}), torch.get_num_threads() = {meta['torch_threads']}")
    print(f"versions torch {meta['torch']}, monai {meta['monai']}, voxaug {meta['voxaug']}, "
          f"python {meta['python']}")
    print(f"timing   median of {args.repeats} calls after {args.warmup} warm-up calls\n")

    groups = set(args.only.split(","))
    known = {"intensity", "intensity-new", "intensity-more", "spatial", "deform", "filter", "crop", "degrade",
             "nnunet", "lazy", "kspace", "torchio-pre", "smooth", "post"}
    if not groups <= known:
        ap.error(f"--only: unknown group(s) {sorted(groups - known)}")
    rows = []
    if "intensity" in groups:
        x = make_input((1, 1, 224, 224, 160), device)
        rows.append(run_case("(a) chain SIR>shift>noise", x, monai_chain(), voxaug_chain(), check_chain, device,
                             args))
        for name, m_t, v_t, check in single_pairs():
            rows.append(run_case(f"(b) {name}", x, m_t, v_t, check, device, args))
        del x
        xb = make_input((8, 1, 128, 128, 128), device)
        rows.append(run_case("(c) chain, batch of 8", xb, monai_chain(), voxaug_chain(), check_chain, device, args,
                             per_sample_monai=True))
        del xb
    first_new_intensity = len(rows)
    if "intensity" in groups or "intensity-new" in groups:
        rows.extend(new_intensity_rows(device, args))
    if "intensity-more" in groups:
        rows.extend(more_intensity_rows(device, args))
    end_new_intensity = len(rows)
    first_spatial = len(rows)
    if "spatial" in groups:
        rows.extend(spatial_rows(device, args))
    first_deform = len(rows)
    if "deform" in groups:
        rows.extend(deform_rows(device, args))
    end_deform = len(rows)
    if "filter" in groups:
        rows.extend(filter_rows(device, args))
    first_crop = len(rows)
    if "crop" in groups:
        rows.extend(crop_rows(device, args))
    first_degrade = len(rows)
    if "degrade" in groups:
        rows.extend(degrade_rows(device, args))
    first_nnunet = len(rows)
    if "nnunet" in groups:
        rows.extend(nnunet_rows(device, args))
    end_nnunet = len(rows)
    if "lazy" in groups:
        rows.extend(lazy_rows(device, args))
    if "kspace" in groups:
        rows.extend(kspace_rows(device, args))
    if "torchio-pre" in groups:
        rows.extend(torchio_pre_rows(device, args))
    if "smooth" in groups:
        rows.extend(smooth_rows(device, args))
    if "post" in groups:
        rows.extend(post_rows(device, args))

    head = (f"{'case':<27} {'shape':<15} {'device':<6} {'monai ms':>9} {'voxaug ms':>9} {'speedup':>8}"
            "  check (monai/voxaug)")
    print(head)
    print("-" * len(head))
    for r in rows:
        flag = "" if r["check_ok"] else "  <-- CHECK FAILED"
        print(f"{r['case']:<27} {r['shape']:<15} {r['device']:<6} {r['monai_ms']:>9.2f} {r['voxaug_ms']:>9.2f} "
              f"{r['speedup']:>7.2f}x  {r['check']}{flag}")

    bw = None
    if device.type == "cuda":
        bw = bandwidth(device, args)
        print(f"\n(d) bandwidth at {bw['shape']} float32, {bw['bytes'] / 1e9:.2f} GB moved (1 read + 1 write):")
        print(f"    voxaug fused chain {bw['chain_ms']:8.3f} ms  {bw['chain_GBps']:7.1f} GB/s")
        print(f"    dst.copy_(src)     {bw['copy_ms']:8.3f} ms  {bw['copy_GBps']:7.1f} GB/s")
        print(f"    chain / copy       {bw['ratio_to_copy'] * 100:7.1f} %")

    bar_speedup = rows[0]["speedup"] if "intensity" in groups else float("nan")
    if device.type == "cpu":
        for r in rows[first_new_intensity:end_new_intensity]:
            v = "PASS" if r["speedup"] >= NEW_INTENSITY_BAR else "FAIL"
            print(f"BAR {v}: {r['case']} {r['shape']} on CPU is {r['speedup']:.2f}x MONAI "
                  f"(issue 5 bar: >= {NEW_INTENSITY_BAR:g}x)")
    verdict = "n/a"
    if device.type == "cpu":
        if "intensity" in groups:
            verdict = "PASS" if bar_speedup >= BAR_SPEEDUP else "FAIL"
            print(f"\nBAR {verdict}: (a) chain on CPU is {bar_speedup:.2f}x MONAI (bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_spatial:first_deform][:2]:
            v = "PASS" if r["speedup"] >= BAR_SPEEDUP else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x (spatial bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_crop:first_degrade][:1]:  # (h) rows only
            v = "PASS" if r["speedup"] >= BAR_SPEEDUP else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x MONAI without precomputed indices "
                  f"(crop bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_deform:end_deform]:
            bar = ELASTIC_BARS["TorchIO" if "TorchIO" in r["case"] else "MONAI"]
            v = "PASS" if r["speedup"] >= bar else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x (deform bar: >= {bar:g}x)")
        for r in rows[first_degrade:first_nnunet]:
            if "Shuffle" in r["case"] or "Swap" in r["case"]:  # not issue 5's transforms: timed, no bar
                continue
            v = "PASS" if r["speedup"] >= DEGRADE_BAR else "FAIL"
            print(f"BAR {v}: {r['case']} {r['shape']} on CPU is {r['speedup']:.2f}x MONAI "
                  f"(degrade bar: >= {DEGRADE_BAR:g}x)")
        for r in rows[first_nnunet:end_nnunet]:
            if "prob 1" in r["case"]:
                v = "PASS" if r["speedup"] >= NNUNET_BAR else "FAIL"
                print(f"BAR {v}: {r['case']} {r['shape']} on CPU is {r['speedup']:.2f}x MONAI "
                      f"(nnU-Net chain bar: >= {NNUNET_BAR:g}x; contrast: voxaug {r['contrast']})")
    else:
        verdict = "n/a"
        print(f"\nBAR n/a: the bar is measured on CPU (run with --device cpu); on {args.device} (a) is "
              f"{bar_speedup:.2f}x MONAI")
        # Spatial issue, GPU bar: batched RandAffined of 4 x 96^3 image+label >= 20x MONAI's
        # per-sample GPU RandAffined.
        for r in rows[first_spatial:]:
            if r["case"].startswith("(e) RandAffined img+label"):
                v = "PASS" if r["speedup"] >= GPU_SPATIAL_BAR else "FAIL"
                print(f"BAR {v}: {r['case']} on {args.device} is {r['speedup']:.2f}x MONAI's per-sample "
                      f"loop (spatial GPU bar: >= {GPU_SPATIAL_BAR:g}x)")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"meta": meta, "rows": rows, "bandwidth": bw,
                                         "bar": {"case": rows[0]["case"] if rows else None, "device": args.device,
                                                 "required_speedup": BAR_SPEEDUP, "speedup": bar_speedup,
                                                 "verdict": verdict}}, indent=2) + "\n")
        print(f"wrote {args.json}")

    failed = [r["case"] for r in rows if not r["check_ok"]]
    if failed:
        print(f"compare: output checks failed for {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
