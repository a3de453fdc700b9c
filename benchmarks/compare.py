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
      1x1x224x224x160 vs MONAI's RandAffine and vs TorchIO's RandomAffine (degrees 10,
      scales 0.1, its defaults); RandAffined image (bilinear) + label (nearest) on 4 x 96^3,
      voxaug batched in one launch, MONAI looping over the samples
  (f) elastic, on the real ch2.nii.gz (181x217x181) image (bilinear) + aal.nii.gz label
      (nearest): voxaug Rand3DElasticd (fast field, in-kernel B-spline) vs MONAI
      Rand3DElasticd (sigma 5-8, magnitude 100-200, prob 1, the same affine ranges), and
      voxaug RandomElasticDeformation vs TorchIO's (its defaults: 7 control points, 7.5 mm,
      2 locked borders); at most 3 timed calls each (MONAI and TorchIO take seconds)
  (g) filter: GaussianSmooth (sigma 1 and 3) on 1x1x128^3 and 1x1x224x224x160 vs MONAI's
  (h) crop: RandCropByPosNegLabeld (96^3 patches, num_samples 4, image + label) on ch2 + aal vs
      MONAI's, without and with MONAI's precomputed indices (FgBgToIndicesd, outside the
      timing), and vs TorchIO's LabelSampler (4 patches from a Subject)

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
         vt.RandBiasField(prob=1.0, seed=SEED), check_bias_field),
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


def check_bias_field(x, m, v):
    """img * exp(field): |field| <= sum |c| |P| <= 20 * 0.1 for degree 3, coefficients in [0, 0.1]."""
    keep = x.abs() > 1.0
    texts = []
    for out in (m, v):
        f = (out[keep] / x[keep]).log()
        if f.abs().max().item() > 2.0 + 1e-4 or f.max().item() - f.min().item() == 0.0:
            return False, "not img * exp(field) with |field| <= 2"
        texts.append(f"{f.min().item():+.2f}..{f.max().item():+.2f}")
    return True, "log field " + "/".join(texts)


def check_contrast(x, m, v):
    """((x - mn) / range)^g * range + mn: one g in [0.5, 4.5] for every voxel of the sample."""
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
        deg = 10 * 3.141592653589793 / 180
        v_tio = vt.RandAffine(prob=1.0, rotate_range=(deg, deg, deg), scale_range=(0.1, 0.1, 0.1),
                              mode="bilinear", padding_mode="zeros", seed=SEED)

        def torchio_call(img):  # TorchIO works on CPU tensors (SimpleITK)
            return t_aff(img.cpu())

        rows.append(run_case("(e) RandAffine vs TorchIO", x, torchio_call, v_tio, check_resampled_centre, device,
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
    return rows


def load_ch2_aal(device):
    """ch2.nii.gz (float32) and aal.nii.gz (int16 labels) from mricron-data, as (1, 1, ...)."""
    import nibabel as nib
    import numpy as np

    root = Path("/usr/share/mricron/templates")
    img = torch.from_numpy(np.asarray(nib.load(root / "ch2.nii.gz").dataobj).astype("float32"))
    lab = torch.from_numpy(np.asarray(nib.load(root / "aal.nii.gz").dataobj).astype("int16"))
    return img[None, None].to(device), lab[None, None].to(device)


def check_elastic(label_values):
    def check(x, m, v):
        rel = abs(v.mean().item() - m.mean().item()) / max(1e-6, abs(m.mean().item()))
        ok = m.shape == v.shape and bool(torch.isfinite(v).all()) and rel < 0.1
        ok = ok and (v - x).abs().mean().item() > 0.1  # it deformed
        return ok, f"mean {m.mean().item():.1f}/{v.mean().item():.1f}"
    return check


def deform_rows(device, args):
    """(f): elastic deformation of image + label on ch2 + aal."""
    import voxaug.deform as vd

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
        t_el = tio.RandomElasticDeformation()
        v_tio = vd.RandomElasticDeformation(seed=SEED, label_keys=("label",))
        subject_lab = lab[0].cpu()

        def torchio_call(x1):
            s = tio.Subject(image=tio.ScalarImage(tensor=x1.cpu()), label=tio.LabelMap(tensor=subject_lab))
            return t_el(s)["image"].data

        rows.append(run_case("(f) RandomElastic vs TorchIO", img, torchio_call,
                             lambda xb: v_tio({"image": xb, "label": lab})["image"], check_elastic(values),
                             device, sub))
    for r in rows:
        r["check_ok"] = r["check_ok"] and labels_ok.get("voxaug", True)
    return rows


def check_close(tol):
    def check(x, m, v):
        err = (m - v).abs().max().item() / max(1e-6, m.abs().max().item())
        return err <= tol, f"max rel err {err:.1e}"
    return check


def filter_rows(device, args):
    """(g): GaussianSmooth vs MONAI's (the same erf kernel, zero padding)."""
    import voxaug.filter as vf

    rows = []
    for shape in ((1, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = make_input(shape, device)
        for sigma in (1.0, 3.0):
            rows.append(run_case(f"(g) GaussianSmooth s={sigma:g}", x, mt.GaussianSmooth(sigma),
                                 vf.GaussianSmooth(sigma), check_close(1e-5), device, args))
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
    if tio is not None:
        sampler = tio.LabelSampler(patch_size=96, label_name="label", label_probabilities={0: 1, 1: 1})
        subject = tio.Subject(image=tio.ScalarImage(tensor=img[0].cpu()), label=tio.LabelMap(tensor=lab[0].cpu()))

        def torchio_call(x1):
            it = sampler(subject, num_patches=4)
            return torch.stack([next(it)["image"].data for _ in range(4)])

        rows.append(run_case("(h) vs TorchIO LabelSampler", img, torchio_call, voxaug_call, check_patches, device,
                             sub))
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--repeats", type=int, default=10, help="timed calls per measurement (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    ap.add_argument("--only", default="intensity,spatial,deform,filter,crop",
                    help="comma-separated case groups: intensity (a-c), spatial (e), deform (f), filter (g), "
                         "crop (h)")
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
    known = {"intensity", "spatial", "deform", "filter", "crop"}
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
    verdict = "n/a"
    if device.type == "cpu":
        if "intensity" in groups:
            verdict = "PASS" if bar_speedup >= BAR_SPEEDUP else "FAIL"
            print(f"\nBAR {verdict}: (a) chain on CPU is {bar_speedup:.2f}x MONAI (bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_spatial:first_deform][:2]:
            v = "PASS" if r["speedup"] >= BAR_SPEEDUP else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x (spatial bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_crop:first_crop + 1]:
            v = "PASS" if r["speedup"] >= BAR_SPEEDUP else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x MONAI without precomputed indices "
                  f"(crop bar: >= {BAR_SPEEDUP:g}x)")
        for r in rows[first_deform:end_deform]:
            bar = ELASTIC_BARS["TorchIO" if "TorchIO" in r["case"] else "MONAI"]
            v = "PASS" if r["speedup"] >= bar else "FAIL"
            print(f"BAR {v}: {r['case']} on CPU is {r['speedup']:.2f}x (deform bar: >= {bar:g}x)")
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
