"""No host sync on CUDA for the spatial, crop, deformation and sliding-window families (issues 3, 4,
6 and 7; STYLE.md "a launcher never synchronises the host"). Each transform, array and dictionary
forms, the random ones at prob 1 and 0.5, runs on a CUDA batch of 2 (image float32, label uint8
where the transform takes labels) under ``torch.cuda.set_sync_debug_mode("error")``: torch then
raises on every synchronising call it makes (``.item()``, ``.tolist()``, ``.cpu()``, ``bool(t)``,
``nonzero``, ``torch.unique``, boolean indexing, blocking copies in either direction -- host to
device included, e.g. ``torch.tensor(values, device="cuda")`` -- and stream / device
synchronisation). The mode is restored afterwards, and only then is the result checked: against
the CPU twin (the same transform with the same seed on the same data on the CPU; the draws are
host Philox or device Philox keyed by sample, so both devices compute the same thing), which also
shows that nothing read a parameter before its non-blocking copy had landed.

What the mode does not flag: ``non_blocking=True`` copies from pageable host memory (the driver
stages them through a bounce buffer and may synchronise with the stream to do so), CUDA event
waits, and CUDA runtime calls inside the ops library (read instead: kernels/ and torch_ext/ of
these families have no cudaMemcpy, stream or device synchronisation, item() or cpu()). The first
is checked here with a torch function mode that records every host -> device copy from pageable
memory made from Python (PageableCopies): the crop and window families make none; the spatial and
deformation families copy their per-call maps, index tables and per-sample factors from pinned
memory (transforms._host_to), and so does sliding_window_inference a host
roi_weight_map or a host weight returned by process_fn.

Synchronisations that the transforms document, checked to happen exactly there (the test fails if
the sync moves elsewhere or disappears):

- CropForeground(d): the crop's size is the data's bounding box (compute_bounding_box).
- A MetaTensor's crop affine needs the crop centres on the host (voxaug.crop._finish).
- WeightedSampler / LabelSampler ``check=True``: TorchIO's errors need the map's statistics on the
  host (their ``_draw``); ``check=False`` does not sync.

Left out, by design: GridSampler's construction (one copy of the grid's starts to the device),
GridAggregator's first batch (the Hann window's copy), SlidingWindowInferer(cuda_graph=True)'s
first call (torch.cuda.graph synchronises the device before capturing; the replays are checked),
flush_checks() (it waits on purpose), PatchQueue(device=...)'s construction (one blocking copy of
the subjects, documented).

A crop sampler fused with the spatial steps after it in a Compose (voxaug.spatial._run's patch
path) computes the crop starts from the centres on the device (it once built the offsets with
``torch.as_tensor([...], device=centers.device)``, a blocking host-to-device copy): checked by
the fused Compose tests below.

Without a CUDA device every test here skips; the GPU check selects them with ``-k cuda``.
"""
import functools
import os
import traceback
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from voxaug import crop as vc
from voxaug import deform as vd
from voxaug import spatial as vs
from voxaug import transforms as vt
from voxaug.inferers import SlidingWindowInferer, sliding_window_inference

from conftest import sync_is_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (sync checks need one)")

SHAPE = (2, 2, 16, 16, 13)  # (N, C, D, H, W): two samples, two channels, D == H (quarter turns in (0, 1))
PATCH = (8, 8, 7)
KEYS = ["img", "seg"]
AFFINE = np.array([[1.0, 0.0, 0.0, -8.0], [0.0, 1.2, 0.0, 4.0], [0.0, 0.0, 0.9, 2.5], [0.0, 0.0, 0.0, 1.0]])

# ---------------- the check ----------------
def run_without_sync(fn):
    """fn() with synchronising calls turned into errors (the device idle before and after)."""
    torch.cuda.synchronize()
    with sync_is_error():
        out = fn()
    torch.cuda.synchronize()
    return out


def _last_frame(e: BaseException) -> traceback.FrameSummary:
    return traceback.extract_tb(e.__traceback__)[-1]


def syncs_at(fn, function: str, module: str):
    """fn() must raise torch's sync error, from the Python line of `function` in voxaug/`module`."""
    with pytest.raises(RuntimeError, match="synchroniz") as info:
        run_without_sync(fn)
    frame = _last_frame(info.value)
    assert frame.name == function and frame.filename.endswith(os.path.join("voxaug", module)), \
        f"the sync came from {frame.filename}:{frame.lineno} {frame.name} ({frame.line}), expected {module} {function}"


# ---------------- data and the CPU twin ----------------
def make_data(device) -> dict:
    """Image (float32, positive, a zero slab), a 3-class uint8 label (a ball with a core per sample),
    its one-hot form and a weight map; built on the CPU, moved before any check starts."""
    g = torch.Generator().manual_seed(0)
    n, _, *size = SHAPE
    zz, yy, xx = torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in size], indexing="ij")
    seg = torch.zeros((n, 1, *size), dtype=torch.uint8)
    for i in range(n):
        r2 = (zz - 5.0 - 3 * i) ** 2 + (yy - 7.0) ** 2 + (xx - 6.0 - i) ** 2
        seg[i, 0][r2 <= 16] = 1
        seg[i, 0][r2 <= 4] = 2
    img = torch.rand(SHAPE, generator=g) * 100 + 40 * (seg > 0)
    img[..., :2] = 0  # background the image threshold excludes
    w = torch.rand((n, 1, *size), generator=g) ** 4
    onehot = torch.cat([seg == k for k in range(3)], 1).to(torch.uint8)
    out = {"img": img, "seg": seg, "w": w, "onehot": onehot}
    return {k: v.to(device) for k, v in out.items()}


def tensors_of(out) -> list:
    """The tensors of a result (nested lists / tuples / dicts, CropCounts, MetaTensors with affines)."""
    if isinstance(out, vc.CropCounts):
        return [out.counts]
    if isinstance(out, torch.Tensor):
        if hasattr(out, "as_tensor"):  # MONAI MetaTensor
            return [out.as_tensor(), torch.as_tensor(out.affine)]
        return [out]
    if isinstance(out, np.ndarray):
        return [torch.from_numpy(out)]
    if isinstance(out, Mapping):
        return [t for k in sorted(out, key=str) for t in tensors_of(out[k])]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in tensors_of(o)]
    return []


def assert_matches_cpu_twin(got, want):
    """The CUDA result against the CPU twin's: same structure, shapes and dtypes; device tensors
    within float32 rounding (mean absolute difference <= 1e-4 of the value range: CPU and CUDA
    interpolate in float32 with different operation order) or, for integers, the same values but
    for at most 1% of the voxels (nearest sampling points within rounding of a voxel boundary);
    host tensors (affines, box coordinates) equal."""
    g, w = tensors_of(got), tensors_of(want)
    assert len(g) == len(w) and g, (len(g), len(w))
    assert any(t.is_cuda for t in g), "no result on the device"
    for a, b in zip(g, w):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if not a.is_cuda:
            assert torch.equal(a, b)
            continue
        a = a.cpu()
        if a.numel() == 0:
            continue
        if a.is_floating_point():
            assert torch.isfinite(a).all()
            scale = max(1.0, float(b.abs().max()))
            assert float((a.double() - b.double()).abs().mean()) <= 1e-4 * scale
        else:
            assert float((a != b).double().mean()) <= 0.01


def check_case(case, *args):
    """case(*args, data) -> a zero-argument call: built on CUDA data outside the check, run inside
    it, compared with the same case on the CPU."""
    go = case(*args, make_data("cuda"))
    got = run_without_sync(go)
    want = case(*args, make_data("cpu"))()
    assert_matches_cpu_twin(got, want)
    return got


def _call(t, *args, **kwargs):
    return functools.partial(t, *args, **kwargs)


# ---------------- array transforms ----------------
DETERMINISTIC = {
    "Flip": lambda d: _call(vs.Flip(0), d["img"]),
    "Flip[all,label]": lambda d: _call(vs.Flip(), d["seg"]),
    "Rotate90": lambda d: _call(vs.Rotate90(1), d["img"]),
    "Rotate90[label,plane12]": lambda d: _call(vs.Rotate90(3, (1, 2)), d["seg"]),
    "Affine": lambda d: _call(vs.Affine(rotate_params=(0.1, 0.2, 0.3), shear_params=(0.05, 0, 0, 0, 0, 0),
                                        translate_params=(1.0, -2.0, 0.5), scale_params=(1.1, 0.9, 1.0),
                                        padding_mode="zeros", image_only=True), d["img"]),
    "Affine[cubic]": lambda d: _call(vs.Affine(rotate_params=(0.2, 0.0, 0.0), mode="bicubic", padding_mode="border",
                                               image_only=True), d["img"]),
    "Affine[nearest,label,size,tuple]": lambda d: _call(vs.Affine(rotate_params=(0.2, 0.0, 0.0), mode="nearest",
                                                                  padding_mode="zeros", spatial_size=(12, 14, 13)),
                                                        d["seg"]),
    "Rotate": lambda d: _call(vs.Rotate(0.3), d["img"]),
    "Rotate[keep_size=False]": lambda d: _call(vs.Rotate((0.3, 0.0, 0.0), keep_size=False), d["img"]),
    "Zoom[area]": lambda d: _call(vs.Zoom(0.8), d["img"]),
    "Zoom[trilinear]": lambda d: _call(vs.Zoom(1.3, mode="trilinear"), d["img"]),
    "Zoom[nearest,label,constant]": lambda d: _call(vs.Zoom(0.7, mode="nearest", padding_mode="constant"), d["seg"]),
    "Resize[area]": lambda d: _call(vs.Resize((10, 11, 9)), d["img"]),
    "Resize[trilinear,anti_aliasing]": lambda d: _call(vs.Resize((10, 12, 20), mode="trilinear", anti_aliasing=True),
                                                       d["img"]),
    "Resize[nearest,label]": lambda d: _call(vs.Resize((20, 11, 9), mode="nearest"), d["seg"]),
    "SpatialCrop": lambda d: _call(vs.SpatialCrop(roi_start=(2, 3, 1), roi_end=(12, 14, 10)), d["img"]),
    "CenterSpatialCrop[label]": lambda d: _call(vs.CenterSpatialCrop((8, 8, 8)), d["seg"]),
    "SpatialPad[constant]": lambda d: _call(vs.SpatialPad((20, 18, 17), value=1.5), d["img"]),
    "SpatialPad[wrap,label]": lambda d: _call(vs.SpatialPad((20, 18, 17), mode="wrap"), d["seg"]),
    "BorderPad[reflect]": lambda d: _call(vs.BorderPad(2, mode="reflect"), d["img"]),
    "DivisiblePad[edge,label]": lambda d: _call(vs.DivisiblePad(8, mode="edge"), d["seg"]),
    "Spacing": lambda d: _call(vs.Spacing((1.5, 1.5, 2.0)), d["img"], affine=AFFINE),
    "Spacing[nearest,label]": lambda d: _call(vs.Spacing((0.8, 1.2, 1.0), mode="nearest"), d["seg"], affine=AFFINE),
    "Orientation": lambda d: _call(vs.Orientation("LPS"), d["img"], affine=AFFINE),
    "GridDistortion": lambda d: _call(vd.GridDistortion(3, [(1.0, 1.1, 0.9, 1.0)] * 3), d["img"]),
    "Pad[TorchIO,mean]": lambda d: _call(vs.Pad((1, 2, 0, 3, 2, 1), "mean"), d["img"]),
    "Pad[TorchIO,median,label]": lambda d: _call(vs.Pad(2, "median"), d["seg"]),
    "Pad[TorchIO,maximum]": lambda d: _call(vs.Pad((2, 0, 1), "maximum"), d["img"]),
    "Pad[TorchIO,linear_ramp]": lambda d: _call(vs.Pad((1, 2, 0, 3, 2, 1), "linear_ramp"), d["img"]),
    "Crop[TorchIO]": lambda d: _call(vs.Crop((1, 2, 0, 3, 2, 1)), d["img"]),
    "CropOrPad[random,minimum]": lambda d: _call(vs.CropOrPad((12, 20, 9), "minimum", location="random", seed=3),
                                                 d["img"]),
    "CropOrPad[random,wrap,label]": lambda d: _call(vs.CropOrPad((12, 20, 9), "wrap", location="random", seed=4),
                                                    d["seg"]),
    "CropOrPad[linear_ramp]": lambda d: _call(vs.CropOrPad((12, 20, 9), "linear_ramp"), d["img"]),
    "ToOrientation": lambda d: _call(vs.ToOrientation("PLI"), d["img"]),
    "Transpose[label]": lambda d: _call(vs.Transpose(), d["seg"]),
    "ElasticDeformation[TorchIO]": lambda d: _call(vd.ElasticDeformation(
        np.random.default_rng(5).uniform(-1.5, 1.5, (6, 7, 5, 3)), 1.5, image_interpolation="bspline"), d["img"]),
    "ElasticDeformation[TorchIO,label]": lambda d: _call(vd.ElasticDeformation(
        np.random.default_rng(6).uniform(-1.5, 1.5, (5, 5, 6, 3)), 1.5, label_keys=["seg"]), {"seg": d["seg"]}),
}

RANDOM = {
    "RandFlip": lambda p, d: _call(vs.RandFlip(p, spatial_axis=(0, 2), seed=1), d["img"]),
    "RandRotate90[label]": lambda p, d: _call(vs.RandRotate90(p, max_k=3, seed=2), d["seg"]),
    "RandAffine": lambda p, d: _call(vs.RandAffine(p, rotate_range=(0.3, 0.2, 0.1), shear_range=0.1,
                                                   translate_range=(2, 2, 1), scale_range=(0.1, 0.1, 0.1),
                                                   padding_mode="zeros", seed=3), d["img"]),
    "RandAffine[nearest,label,size]": lambda p, d: _call(vs.RandAffine(p, rotate_range=0.4, mode="nearest",
                                                                       padding_mode="border",
                                                                       spatial_size=(12, 12, 12), seed=4), d["seg"]),
    "RandRotate": lambda p, d: _call(vs.RandRotate(0.4, 0.2, 0.1, prob=p, seed=5), d["img"]),
    "RandZoom[area]": lambda p, d: _call(vs.RandZoom(p, 0.7, 1.3, seed=6), d["img"]),
    "RandZoom[trilinear]": lambda p, d: _call(vs.RandZoom(p, 0.7, 1.3, mode="trilinear", seed=7), d["img"]),
    "RandZoom[nearest,label,constant]": lambda p, d: _call(vs.RandZoom(p, (0.7, 0.8), (1.2, 1.3), mode="nearest",
                                                                       padding_mode="constant", seed=8), d["seg"]),
    "Rand3DElastic[fast]": lambda p, d: _call(vd.Rand3DElastic((2.0, 3.0), (1.0, 3.0), prob=p, rotate_range=0.1,
                                                               padding_mode="zeros", seed=9), d["img"]),
    "Rand3DElastic[exact,label,size]": lambda p, d: _call(vd.Rand3DElastic((2.0, 3.0), (1.0, 3.0), prob=p,
                                                                           mode="nearest", field="exact",
                                                                           spatial_size=(12, 14, 13), seed=10),
                                                          d["seg"]),
    "RandGridDistortion": lambda p, d: _call(vd.RandGridDistortion(3, p, 0.1, seed=11), d["img"]),
    "RandomElasticDeformation": lambda p, d: _call(vd.RandomElasticDeformation(6, 2.0, p=p, seed=12), d["img"]),
}


def _pos_neg_cached(d):
    t = vc.RandCropByPosNegLabel(PATCH, label=d["seg"], num_samples=3, image=d["img"], seed=18)

    def go():
        counts = vc.CropCounts.of(d["seg"], d["img"], 0.0)
        return t(d["img"], fg_indices=counts, bg_indices=counts)
    return go


def _label_classes_cached(d):
    t = vc.RandCropByLabelClasses(PATCH, ratios=[1, 2, 3], label=d["seg"], num_classes=3, num_samples=2, seed=19)
    return lambda: t(d["img"], indices=vc.CropCounts.of(d["seg"], num_classes=3, classes=True))


CROPS = {  # no probability: every call crops
    "RandSpatialCrop": lambda d: _call(vc.RandSpatialCrop(PATCH, seed=13), d["img"]),
    "RandSpatialCrop[random_size]": lambda d: _call(vc.RandSpatialCrop((6, 6, 5), (10, 10, 9), random_size=True,
                                                                       seed=14), d["img"]),
    "RandSpatialCrop[center,label]": lambda d: _call(vc.RandSpatialCrop(PATCH, random_center=False, seed=15),
                                                     d["seg"]),
    "RandSpatialCropSamples": lambda d: _call(vc.RandSpatialCropSamples(PATCH, 3, seed=16), d["img"]),
    "RandSpatialCropSamples[random_size]": lambda d: _call(vc.RandSpatialCropSamples((6, 6, 5), 2, (10, 10, 9),
                                                                                     random_size=True, seed=17),
                                                           d["img"]),
    "RandCropByPosNegLabel": lambda d: _call(vc.RandCropByPosNegLabel(PATCH, label=d["seg"], num_samples=3,
                                                                      image=d["img"], seed=18), d["img"]),
    "RandCropByPosNegLabel[label,pos3]": lambda d: _call(vc.RandCropByPosNegLabel(PATCH, label=d["seg"], pos=3.0,
                                                                                  num_samples=2, seed=18), d["seg"]),
    "RandCropByPosNegLabel[CropCounts]": _pos_neg_cached,
    "RandCropByLabelClasses": lambda d: _call(vc.RandCropByLabelClasses(PATCH, ratios=[1, 2, 3], label=d["seg"],
                                                                        num_classes=3, num_samples=2, seed=19),
                                              d["img"]),
    "RandCropByLabelClasses[onehot,image]": lambda d: _call(vc.RandCropByLabelClasses(PATCH, label=d["onehot"],
                                                                                      num_samples=2, image=d["img"],
                                                                                      seed=20), d["img"]),
    "RandCropByLabelClasses[CropCounts]": _label_classes_cached,
    "RandWeightedCrop": lambda d: _call(vc.RandWeightedCrop(PATCH, 3, weight_map=d["w"], seed=21), d["img"]),
}


@pytest.mark.parametrize("name", list(DETERMINISTIC))
def test_deterministic_array_transform_cuda_does_not_sync(name):
    check_case(DETERMINISTIC[name])


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", list(RANDOM))
def test_random_array_transform_cuda_does_not_sync(name, prob):
    check_case(RANDOM[name], prob)


@pytest.mark.parametrize("name", list(CROPS))
def test_crop_sampler_array_cuda_does_not_sync(name):
    check_case(CROPS[name])


def test_unbatched_sample_cuda_does_not_sync():
    """A (C, D, H, W) sample through the batch machinery (one sample, the batch axis dropped again)."""
    def case(d):
        x, lab = d["img"][0], d["seg"][0]
        ts = [vs.RandAffine(1.0, rotate_range=0.3, padding_mode="zeros", seed=1), vs.RandFlip(1.0, seed=2),
              vs.Zoom(0.8, mode="trilinear"), vd.Rand3DElastic((2.0, 3.0), (1.0, 2.0), prob=1.0, seed=3),
              vc.RandSpatialCrop(PATCH, seed=4)]
        pos_neg = vc.RandCropByPosNegLabel(PATCH, label=lab, num_samples=2, seed=5)
        return lambda: [t(x) for t in ts] + [pos_neg(x)]
    out = check_case(case)
    assert out[0].shape == SHAPE[1:]


@pytest.mark.parametrize("name", ["Rand3DElastic[fast]", "Rand3DElastic[exact]", "RandGridDistortion",
                                  "RandomElasticDeformation", "GridDistortion"])
def test_displacement_field_cuda_does_not_sync(name):
    """A deformation's call and its dense field (deform_field_dense; the exact field rebuilt from its draw)."""
    make = {"Rand3DElastic[fast]": lambda: vd.Rand3DElastic((2.0, 3.0), (1.0, 3.0), prob=1.0, seed=1),
            "Rand3DElastic[exact]": lambda: vd.Rand3DElastic((2.0, 3.0), (1.0, 3.0), prob=1.0, field="exact", seed=2),
            "RandGridDistortion": lambda: vd.RandGridDistortion(3, 1.0, 0.1, seed=3),
            "RandomElasticDeformation": lambda: vd.RandomElasticDeformation(6, 2.0, p=1.0, seed=4),
            "GridDistortion": lambda: vd.GridDistortion(3, [(1.0, 1.1, 0.9, 1.0)] * 3)}[name]

    def case(d):
        t = make()
        return lambda: (t(d["img"]), t.displacement_field())
    out = check_case(case)
    assert out[1].shape == (SHAPE[0], 3, *SHAPE[2:]) and out[1].abs().max() > 0


# ---------------- dictionary forms ----------------
DICT_DETERMINISTIC = {
    "Flipd": lambda: vs.Flipd(KEYS, 1),
    "Rotate90d": lambda: vs.Rotate90d(KEYS, 2),
    "Affined": lambda: vs.Affined(KEYS, rotate_params=(0.2, 0.0, 0.0), mode=["bilinear", "nearest"],
                                  padding_mode="zeros"),
    "Rotated": lambda: vs.Rotated(KEYS, 0.3, mode=["bilinear", "nearest"]),
    "Zoomd": lambda: vs.Zoomd(KEYS, 0.8, mode=["trilinear", "nearest"]),
    "Resized": lambda: vs.Resized(KEYS, (10, 12, 9), mode=["area", "nearest"]),
    "SpatialCropd": lambda: vs.SpatialCropd(KEYS, roi_center=(8, 8, 6), roi_size=(8, 8, 8)),
    "CenterSpatialCropd": lambda: vs.CenterSpatialCropd(KEYS, (10, 10, 10)),
    "SpatialPadd": lambda: vs.SpatialPadd(KEYS, (20, 20, 20), mode=["reflect", "constant"]),
    "BorderPadd": lambda: vs.BorderPadd(KEYS, (1, 2, 3), mode=["edge", "constant"]),
    "DivisiblePadd": lambda: vs.DivisiblePadd(KEYS, 8, mode=["symmetric", "wrap"]),
    "Spacingd": lambda: vs.Spacingd(KEYS, (1.5, 1.5, 2.0), mode=["bilinear", "nearest"]),
    "Orientationd": lambda: vs.Orientationd(KEYS, "LPS"),
    "GridDistortiond": lambda: vd.GridDistortiond(KEYS, 3, [(1.0, 1.1, 0.9, 1.0)] * 3, mode=["bilinear", "nearest"]),
    "FgBgToIndicesd": lambda: vc.FgBgToIndicesd("seg", image_key="img"),
    "ClassesToIndicesd": lambda: vc.ClassesToIndicesd("seg", num_classes=3),
}

DICT_RANDOM = {
    "RandFlipd": lambda p: vs.RandFlipd(KEYS, p, spatial_axis=0, seed=1),
    "RandRotate90d": lambda p: vs.RandRotate90d(KEYS, p, 3, seed=2),
    "RandAffined": lambda p: vs.RandAffined(KEYS, prob=p, rotate_range=0.3, scale_range=0.1,
                                            mode=["bilinear", "nearest"], padding_mode="zeros", seed=3),
    "RandRotated": lambda p: vs.RandRotated(KEYS, 0.3, 0.2, 0.1, prob=p, mode=["bilinear", "nearest"], seed=4),
    "RandZoomd[area]": lambda p: vs.RandZoomd(KEYS, p, 0.7, 1.3, mode=["area", "nearest"], seed=5),
    "RandZoomd[trilinear]": lambda p: vs.RandZoomd(KEYS, p, 0.7, 1.3, mode=["trilinear", "nearest"], seed=6),
    "Rand3DElasticd": lambda p: vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 3.0), prob=p, mode=["bilinear", "nearest"],
                                                  seed=7),
    "Rand3DElasticd[exact]": lambda p: vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 3.0), prob=p,
                                                         mode=["bilinear", "nearest"], field="exact", seed=8),
    "RandGridDistortiond": lambda p: vd.RandGridDistortiond(KEYS, 3, p, 0.1, mode=["bilinear", "nearest"], seed=9),
    "RandomElasticDeformation[dict]": lambda p: vd.RandomElasticDeformation(6, 2.0, p=p, label_keys=("seg",),
                                                                            seed=10),
}

DICT_CROPS = {
    "RandSpatialCropd": lambda: vc.RandSpatialCropd(KEYS, PATCH, seed=1),
    "RandSpatialCropSamplesd": lambda: vc.RandSpatialCropSamplesd(KEYS, PATCH, 3, seed=2),
    "RandSpatialCropSamplesd[as_batch]": lambda: vc.RandSpatialCropSamplesd(KEYS, PATCH, 3, seed=2, as_batch=True),
    "RandCropByPosNegLabeld": lambda: vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2, image_key="img",
                                                                seed=3),
    "RandCropByPosNegLabeld[as_batch]": lambda: vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2,
                                                                          image_key="img", seed=3, as_batch=True),
    "RandCropByPosNegLabeld[FgBgToIndicesd]": lambda: vt.Compose([
        vc.FgBgToIndicesd("seg", image_key="img"),
        vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2, image_key="img", fg_indices_key="seg_fg_indices",
                                  bg_indices_key="seg_bg_indices", seed=3)]),
    "RandCropByLabelClassesd": lambda: vc.RandCropByLabelClassesd(KEYS, "seg", PATCH, ratios=[1, 1, 2],
                                                                  num_classes=3, num_samples=2, seed=4),
    "RandCropByLabelClassesd[as_batch]": lambda: vc.RandCropByLabelClassesd(KEYS, "seg", PATCH, num_classes=3,
                                                                            num_samples=2, seed=4, as_batch=True),
    "RandCropByLabelClassesd[ClassesToIndicesd]": lambda: vt.Compose([
        vc.ClassesToIndicesd("seg", num_classes=3),
        vc.RandCropByLabelClassesd(KEYS, "seg", PATCH, num_classes=3, num_samples=2, indices_key="seg_cls_indices",
                                   seed=4)]),
    "RandWeightedCropd": lambda: vc.RandWeightedCropd(KEYS, "w", PATCH, 2, seed=5),
    "RandWeightedCropd[as_batch]": lambda: vc.RandWeightedCropd(KEYS, "w", PATCH, 2, seed=5, as_batch=True),
}


def _dict_case(make, *args):
    def case(d):
        t = make(*args)
        return _call(t, dict(d, name="kept"))
    return case


@pytest.mark.filterwarnings("ignore:img is neither a MetaTensor")  # Spacingd / Orientationd: identity affine
@pytest.mark.parametrize("name", list(DICT_DETERMINISTIC))
def test_deterministic_dictionary_transform_cuda_does_not_sync(name):
    out = check_case(_dict_case(DICT_DETERMINISTIC[name]))
    assert out["name"] == "kept"


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", list(DICT_RANDOM))
def test_random_dictionary_transform_cuda_does_not_sync(name, prob):
    out = check_case(_dict_case(DICT_RANDOM[name], prob))
    assert out["name"] == "kept"


@pytest.mark.parametrize("name", list(DICT_CROPS))
def test_crop_sampler_dictionary_cuda_does_not_sync(name):
    out = check_case(_dict_case(DICT_CROPS[name]))
    for item in (out if isinstance(out, list) else [out]):
        assert item["name"] == "kept" and item["img"].is_cuda and item["seg"].dtype == torch.uint8


# ---------------- Compose ----------------
def _fused_crop_composes(p):
    """Crop samplers followed by spatial steps: Compose fuses them into one gather from the full volume."""
    steps = [vs.RandAffined(KEYS, prob=p, rotate_range=0.3, scale_range=0.1, mode=["bilinear", "nearest"],
                            padding_mode="zeros", seed=11),
             vs.RandFlipd(KEYS, p, spatial_axis=0, seed=12), vs.RandRotate90d(KEYS, p, 3, seed=13)]
    return {
        "RandSpatialCropd": [vc.RandSpatialCropd(KEYS, PATCH, seed=1)] + steps,
        "RandCropByPosNegLabeld[as_batch]": [vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2,
                                                                       image_key="img", seed=2, as_batch=True)] + steps,
        "RandCropByPosNegLabeld[as_batch,post_shift]": [
            vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2, seed=3, as_batch=True)] + steps + [
            vt.RandShiftIntensityd("img", 0.1, prob=p, seed=14)],
        "RandWeightedCropd[as_batch,elastic]": [
            vc.RandWeightedCropd(KEYS, "w", PATCH, 2, seed=4, as_batch=True), vs.RandFlipd(KEYS, p, seed=15),
            vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 2.0), prob=p, mode=["bilinear", "nearest"], seed=16)],
    }


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", ["RandSpatialCropd", "RandCropByPosNegLabeld[as_batch]",
                                  "RandCropByPosNegLabeld[as_batch,post_shift]", "RandWeightedCropd[as_batch,elastic]"])
def test_compose_fused_crop_gather_cuda_does_not_sync(name, prob):
    """One fused gather: the crop sampler's centres, then RandAffined + RandFlipd + RandRotate90d (or a
    deformation) as one map from the full volume (optionally a pointwise step inside the gather)."""
    gpu, cpu = make_data("cuda"), make_data("cpu")
    t = vt.Compose(_fused_crop_composes(prob)[name])
    got = run_without_sync(lambda: t(dict(gpu)))
    assert_matches_cpu_twin(got, vt.Compose(_fused_crop_composes(prob)[name])(dict(cpu)))


@pytest.mark.parametrize("prob", [1.0, 0.5])
def test_compose_fused_array_crop_cuda_does_not_sync(prob):
    def make():
        return vt.Compose([vc.RandSpatialCrop(PATCH, seed=1),
                           vs.RandAffine(prob, rotate_range=0.3, padding_mode="zeros", seed=2),
                           vs.RandFlip(prob, seed=3), vs.RandRotate90(prob, seed=4)])
    gpu, cpu = make_data("cuda"), make_data("cpu")
    t = make()
    got = run_without_sync(lambda: t(gpu["img"]))
    assert_matches_cpu_twin(got, make()(cpu["img"]))


def _composes(p):
    return {
        # a fused spatial group closed by the deformation (one resample_deformed launch), then an
        # intensity step updating the fresh buffer in place
        "group+Rand3DElasticd+shift": [
            vs.RandFlipd(KEYS, p, seed=1),
            vs.RandAffined(KEYS, prob=p, rotate_range=0.3, mode=["bilinear", "nearest"], padding_mode="zeros",
                           seed=2),
            vs.RandRotate90d(KEYS, p, seed=3),
            vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 2.0), prob=p, mode=["bilinear", "nearest"],
                              padding_mode="zeros", seed=4),
            vt.RandShiftIntensityd("img", 0.1, prob=p, seed=5)],
        # a sampler without as_batch: each crop dictionary through the rest (fused per item)
        "RandCropByPosNegLabeld+group": [
            vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2, image_key="img", seed=6),
            vs.RandFlipd(KEYS, p, seed=7), vs.RandAffined(KEYS, prob=p, rotate_range=0.3,
                                                          mode=["bilinear", "nearest"], seed=8)],
        # RandZoomd 'area' runs as itself with its draw; pads and crops fuse around it
        "RandZoomd[area]+RandRotated+pad+crop": [
            vs.RandZoomd(KEYS, p, 0.7, 1.3, mode=["area", "nearest"], seed=9),
            vs.RandRotated(KEYS, 0.3, prob=p, mode=["bilinear", "nearest"], seed=10),
            vs.SpatialPadd(KEYS, (18, 18, 18)), vs.CenterSpatialCropd(KEYS, (12, 12, 12))],
        "RandGridDistortiond+Zoomd": [
            vs.Zoomd(KEYS, 1.2, mode=["trilinear", "nearest"]),
            vd.RandGridDistortiond(KEYS, 3, p, 0.1, mode=["bilinear", "nearest"], seed=11)],
        # a crop sampler's patches, the deformation and the flips after it: one launch from the
        # full volume (resample_deformed with the crops' starts, the flips folded into the field)
        "RandCropByPosNegLabeld[as_batch]+Rand3DElasticd+flips": [
            vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2, image_key="img", as_batch=True, seed=15),
            vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 2.0), prob=p, mode=["bilinear", "nearest"],
                              padding_mode="zeros", seed=16),
            vs.RandFlipd(KEYS, p, spatial_axis=0, seed=17), vs.RandFlipd(KEYS, p, spatial_axis=2, seed=18)],
        # the deformation first, then a flip and a crop folded into its launch
        "Rand3DElasticd+flip+crop": [
            vd.Rand3DElasticd(KEYS, (2.0, 3.0), (1.0, 2.0), prob=p, mode=["bilinear", "nearest"],
                              padding_mode="border", seed=19),
            vs.RandFlipd(KEYS, p, spatial_axis=1, seed=20), vs.CenterSpatialCropd(KEYS, (10, 10, 10))],
        # TorchIO's deformation closing a group of exact steps (one resample_deformed launch)
        "group+RandomElasticDeformation": [
            vs.RandFlipd(KEYS, p, seed=12), vs.RandRotate90d(KEYS, p, seed=13),
            vd.RandomElasticDeformation(num_control_points=5, max_displacement=2.0, p=p, label_keys=["seg"],
                                        seed=14)],
    }


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", ["group+Rand3DElasticd+shift", "RandCropByPosNegLabeld+group",
                                  "RandZoomd[area]+RandRotated+pad+crop", "RandGridDistortiond+Zoomd",
                                  "RandCropByPosNegLabeld[as_batch]+Rand3DElasticd+flips",
                                  "Rand3DElasticd+flip+crop", "group+RandomElasticDeformation"])
def test_compose_dictionary_cuda_does_not_sync(name, prob):
    check_case(lambda d: _call(vt.Compose(_composes(prob)[name]), dict(d)))


@pytest.mark.parametrize("prob", [1.0, 0.5])
def test_compose_array_with_elastic_cuda_does_not_sync(prob):
    """Array Compose: Flip + RandAffine (one group), Zoom (another padding: a second group), then
    Rand3DElastic closing the last group."""
    def case(d):
        t = vt.Compose([vs.Flip(0), vs.RandAffine(prob, rotate_range=0.2, padding_mode="zeros", seed=1),
                        vs.Zoom(1.2, mode="trilinear"),
                        vd.Rand3DElastic((2.0, 3.0), (1.0, 2.0), prob=prob, padding_mode="border", seed=2)])
        return _call(t, d["img"])
    check_case(case)


# ---------------- TorchIO samplers and the patch queue ----------------
SAMPLERS = {
    "UniformSampler": lambda: vc.UniformSampler(PATCH, seed=1),
    "WeightedSampler[check=False]": lambda: vc.WeightedSampler(PATCH, "w", check=False, seed=2),
    "LabelSampler[check=False]": lambda: vc.LabelSampler(PATCH, "seg", check=False, seed=3),
    "LabelSampler[probabilities,check=False]": lambda: vc.LabelSampler(PATCH, "seg", {0: 0.2, 1: 1.0, 2: 2.0},
                                                                       check=False, seed=4),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_sampler_cuda_does_not_sync(name):
    def case(d):
        s = SAMPLERS[name]()
        return lambda: list(s(dict(d), num_patches=5))
    out = check_case(case)
    assert len(out) == 5 and out[0]["location"].shape == (SHAPE[0], 6)


@pytest.mark.parametrize("sampler", ["UniformSampler", "LabelSampler[check=False]"])
def test_patch_queue_cuda_does_not_sync(sampler):
    """One epoch of a PatchQueue on the device (fills, shuffles, batches, a transform per batch)."""
    def case(d):
        subjects = [{"img": d["img"][i], "seg": d["seg"][i], "w": d["w"][i], "id": i} for i in range(SHAPE[0])]
        q = vc.PatchQueue(subjects, max_length=4, samples_per_volume=3, sampler=SAMPLERS[sampler](), batch_size=2,
                          transform=vs.RandFlipd(KEYS, 0.5, spatial_axis=1, seed=7), seed=5)
        return lambda: list(q)
    out = check_case(case)
    assert len(out) == 3 and out[0]["img"].shape == (2, SHAPE[1], *PATCH)


@pytest.mark.parametrize("mode", ["crop", "average", "hann"])
def test_grid_sampler_and_aggregator_cuda_do_not_sync(mode):
    """TorchIO-style patch inference: GridSampler batches through a network into a GridAggregator
    (built outside the check: the grid's starts are copied to the device once; the first batch
    copies the Hann window, also outside)."""
    def case(d):
        sampler = vc.GridSampler({"img": d["img"][0]}, PATCH, (2, 2, 2))
        agg = vc.GridAggregator(sampler, overlap_mode=mode)
        batches = list(sampler.batches(3))
        agg.add_batch(batches[0]["img"] * 2, batches[0]["location"])

        def go():
            for b in sampler.batches(3):
                agg.add_batch(b["img"] * 2, b["location"])
            return agg.get_output_tensor()
        return go
    out = check_case(case)
    assert out.shape == SHAPE[1:]


# ---------------- documented synchronisations ----------------
def test_crop_foreground_cuda_syncs_by_design():
    """CropForeground(d) reads the bounding box on the host (the crop's size is data), and nowhere else."""
    d = make_data("cuda")
    syncs_at(lambda: vs.CropForeground(margin=1)(d["img"][:1]), "compute_bounding_box", "spatial.py")
    syncs_at(lambda: vs.CropForegroundd(KEYS, "seg")({k: v[:1] for k, v in d.items()}), "compute_bounding_box",
             "spatial.py")


@pytest.mark.parametrize("name", ["WeightedSampler", "LabelSampler"])
def test_checking_samplers_cuda_sync_by_design(name):
    """check=True (the default) reads the map's statistics for TorchIO's errors: one sync, in _draw."""
    d = make_data("cuda")
    s = vc.WeightedSampler(PATCH, "w", seed=1) if name == "WeightedSampler" else vc.LabelSampler(PATCH, "seg", seed=1)
    syncs_at(lambda: list(s(dict(d), num_patches=2)), "_draw", "crop.py")


def test_metatensor_crops_cuda_sync_by_design():
    """A MetaTensor's crop affine needs the crop centres on the host (crop._finish)."""
    meta = pytest.importorskip("monai.data")
    d = make_data("cuda")
    img = meta.MetaTensor(d["img"], affine=torch.as_tensor(AFFINE))
    syncs_at(lambda: vc.RandSpatialCrop(PATCH, seed=1)(img), "_finish", "crop.py")
    syncs_at(lambda: vc.RandCropByPosNegLabel(PATCH, label=d["seg"], num_samples=2, seed=2)(img), "_finish",
             "crop.py")


def test_metatensor_spatial_cuda_does_not_sync():
    """MetaTensors (affine on the host, as MONAI keeps it) through map transforms, Spacing /
    Orientation, a dictionary pair and a fused Compose group: affines and records are host work,
    the voxels one launch; no sync."""
    meta = pytest.importorskip("monai.data")

    def case(d):
        def mt(x):
            return meta.MetaTensor(x, affine=torch.as_tensor(AFFINE))
        img, seg = mt(d["img"]), mt(d["seg"])
        ts = [vs.Flip(0), vs.RandAffine(1.0, rotate_range=0.3, padding_mode="zeros", seed=1), vs.Orientation("LPS"),
              vs.Spacing((1.5, 1.5, 2.0)), vd.Rand3DElastic((2.0, 3.0), (1.0, 2.0), prob=1.0, seed=2)]
        pair = vs.RandAffined(KEYS, prob=1.0, rotate_range=0.3, mode=["bilinear", "nearest"], seed=3)
        fused = vt.Compose([vs.Orientationd(KEYS, "LPS"), vs.Spacingd(KEYS, (1.5, 1.5, 2.0),
                                                                     mode=["bilinear", "nearest"]),
                            vs.RandFlipd(KEYS, 1.0, seed=4)])
        return lambda: [t(img) for t in ts] + [pair({"img": img, "seg": seg}), fused({"img": img, "seg": seg})]
    check_case(case)


# ---------------- sliding-window inference ----------------
def _net(cin=SHAPE[1], cout=3, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv3d(cin, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv3d(4, cout, 1))
    return net.eval().cuda()


def _close_to_monai(got, want):
    """Within the accumulation rounding of MONAI's on the same windows (tests/python/test_window.py
    holds both to 1e-6 / 1e-5 on the CPU; cuDNN's convolutions add float32 rounding here)."""
    got, want = tensors_of(got), tensors_of(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.is_cuda and torch.isfinite(a).all()
        assert float((a.double() - b.double()).abs().max()) <= 1e-4 * max(1.0, float(b.abs().max()))


@pytest.mark.parametrize("roi", [(8, 8, 8), (8, 8, 16)])  # the second pads the last axis (13 < 16)
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("cached", [False, True])
def test_sliding_window_inference_cuda_does_not_sync(mode, cached, roi):
    """sliding_window_inference, and SlidingWindowInferer with its cached maps (built inside the
    check on the first call, read on the second), vs MONAI's on the same CUDA input."""
    monai_inferers = pytest.importorskip("monai.inferers")
    x = make_data("cuda")["img"]
    net = _net()
    with torch.no_grad():
        net(x)  # cuDNN initialised outside the check
        want = monai_inferers.sliding_window_inference(x, roi, 3, net, overlap=0.25, mode=mode)
        if cached:
            inferer = SlidingWindowInferer(roi, 3, overlap=0.25, mode=mode)
            first = run_without_sync(lambda: inferer(x, net))
            assert inferer._caches and all("weight" in c for c in inferer._caches.values())
            got = run_without_sync(lambda: inferer(x, net))
            assert torch.equal(got, first)
        else:
            got = run_without_sync(lambda: sliding_window_inference(x, roi, 3, net, overlap=0.25, mode=mode))
    _close_to_monai(got, want)


def test_sliding_window_options_cuda_do_not_sync():
    """A device and a host roi_weight_map, replicate padding, a dict of outputs, MONAI's process_fn
    (its weight on the device and on the host), and the argmax / output_dtype extensions (against
    MONAI's result, argmaxed / cast)."""
    monai_inferers = pytest.importorskip("monai.inferers")
    x = make_data("cuda")["img"]
    net, net2 = _net(), _net(cout=2, seed=1)
    host_weight = torch.rand((8, 8, 8), generator=torch.Generator().manual_seed(3)).add_(0.1)
    weight = host_weight.cuda()

    def two(t):
        return {"seg": net(t), "aux": net2(t)}

    def halve(outs, windows, imap):
        return tuple(o * 0.5 for o in outs), imap

    def host_map(outs, windows, imap):
        return tuple(outs), host_weight

    cases = [((8, 8, 8), dict(roi_weight_map=weight)), ((8, 8, 8), dict(roi_weight_map=host_weight)),
             ((8, 8, 16), dict(padding_mode="replicate", mode="gaussian")), ((8, 8, 8), dict(process_fn=halve)),
             ((8, 8, 8), dict(process_fn=host_map))]
    with torch.no_grad():
        net(x), net2(x)
        for roi, kw in cases:
            want = monai_inferers.sliding_window_inference(x, roi, 3, net, overlap=0.5, **kw)
            got = run_without_sync(lambda: sliding_window_inference(x, roi, 3, net, overlap=0.5, **kw))
            _close_to_monai(got, want)
        want = monai_inferers.sliding_window_inference(x, (8, 8, 8), 2, two, overlap=0.5)
        _close_to_monai(run_without_sync(lambda: sliding_window_inference(x, (8, 8, 8), 2, two, overlap=0.5)), want)
        want = monai_inferers.sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian")
        labels = run_without_sync(lambda: sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian",
                                                                   argmax=True))
        assert labels.dtype == torch.int64 and labels.shape == (SHAPE[0], 1, *SHAPE[2:])
        assert float((labels != want.argmax(1, keepdim=True)).double().mean()) <= 0.01  # ties within rounding
        half = run_without_sync(lambda: sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian",
                                                                 output_dtype=torch.float16))
        assert half.dtype == torch.float16
        assert float((half.double() - want.double()).abs().max()) <= 1e-2 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_sliding_window_cuda_graph_replay_does_not_sync(mode):
    """SlidingWindowInferer(cuda_graph=True): the first call captures (torch.cuda.graph synchronises
    the device before capturing, by design, so it runs before the check); replays do not sync and
    equal the eager pass."""
    x = make_data("cuda")["img"]
    y = (x.flip(2) * 0.5).contiguous()
    net = _net()
    graphed = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode=mode, cuda_graph=True)
    eager = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode=mode)
    with torch.no_grad():
        graphed(x, net)  # capture
        got = run_without_sync(lambda: graphed(y, net))
        assert torch.equal(got, eager(y, net))
    assert len(graphed._graphs) == 1


# ---------------- copies from pageable host memory (what the sync mode cannot see) ----------------
class PageableCopies(TorchFunctionMode):
    """Records host -> device copies whose source is pageable (not pinned) host memory, as
    "file:line function" of the innermost voxaug frame. torch's sync mode flags none of them
    when non_blocking=True, but the CUDA driver stages pageable memory through a bounce buffer and
    may synchronise with the stream to do so (CUDA runtime API, "API synchronization behavior":
    asynchronous copies between device and pageable host memory "might be synchronous with respect
    to host"); voxaug's own rule (transforms._host_to, kernels/crop/crop.cu) is pinned memory.
    Copies from pinned memory are recorded the same way in `pinned`."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []
        self.pinned: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        src = dst = None
        if func in (torch.Tensor.to, torch.Tensor.cuda) and args and isinstance(args[0], torch.Tensor):
            src = args[0]
            dst = torch.device("cuda") if func is torch.Tensor.cuda else torch._C._nn._parse_to(*args[1:], **kwargs)[0]
        elif func is torch.Tensor.copy_ and len(args) >= 2 and isinstance(args[0], torch.Tensor):
            dst, src = args[0].device, args[1]
        if (isinstance(src, torch.Tensor) and dst is not None and src.device.type == "cpu"
                and torch.device(dst).type != "cpu"):
            where = [f for f in traceback.extract_stack()[:-1] if os.sep + "voxaug" + os.sep in f.filename]
            f = where[-1] if where else None
            (self.pinned if src.is_pinned() else self.seen).append(
                f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" if f else func.__name__)
        return func(*args, **kwargs)


def pageable_copies(go) -> list:
    return host_copies(go)[0]


def host_copies(go) -> tuple[list, list]:
    """go() under the sync check: (its host -> device copies from pageable memory, those from pinned memory)."""
    with PageableCopies() as rec:
        run_without_sync(go)
    return rec.seen, rec.pinned


PINNED = {  # name -> case(d): calls that copy host-built parameters to the device, all from pinned memory
    "RandAffine": lambda d: _call(vs.RandAffine(1.0, rotate_range=0.3, seed=1), d["img"]),
    "Zoom[edge_pad]": lambda d: _call(vs.Zoom(0.8, mode="trilinear"), d["img"]),
    "RandZoom[trilinear]": lambda d: _call(vs.RandZoom(1.0, 0.7, 0.9, mode="trilinear", seed=2), d["img"]),
    "Rand3DElastic": lambda d: _call(vd.Rand3DElastic((2.0, 3.0), (1.0, 2.0), prob=1.0, seed=3), d["img"]),
    "Rand3DElastic[exact]": lambda d: _call(vd.Rand3DElastic((2.0, 3.0), (1.0, 2.0), prob=1.0, field="exact",
                                                             seed=3), d["img"]),
    "RandGridDistortion": lambda d: _call(vd.RandGridDistortion(3, 1.0, 0.1, seed=4), d["img"]),
    "RandomElasticDeformation": lambda d: _call(vd.RandomElasticDeformation(6, 2.0, p=1.0, seed=5), d["img"]),
    "Compose[fused crop]": lambda d: _call(vt.Compose(_fused_crop_composes(1.0)["RandSpatialCropd"]), dict(d)),
    "sliding_window_inference[host roi_weight_map]": lambda d: _window_case(d, roi_weight_map=_host_weight()),
    "sliding_window_inference[process_fn host weight]": lambda d: _window_case(
        d, process_fn=lambda outs, windows, imap: (tuple(outs), _host_weight())),
}
NO_HOST_COPIES = {  # the crop and window families copy nothing from the host per call
    "RandCropByPosNegLabeld": lambda d: _call(vc.RandCropByPosNegLabeld(KEYS, "seg", PATCH, num_samples=2,
                                                                        image_key="img", seed=1), dict(d)),
    "RandCropByLabelClasses": CROPS["RandCropByLabelClasses"],
    "RandWeightedCrop": CROPS["RandWeightedCrop"],
    "RandSpatialCropSamplesd[as_batch]": lambda d: _call(DICT_CROPS["RandSpatialCropSamplesd[as_batch]"](), dict(d)),
    "UniformSampler": lambda d: (lambda: list(vc.UniformSampler(PATCH, seed=2)(dict(d), num_patches=3))),
    "sliding_window_inference[gaussian]": lambda d: _window_case(d),
}


def _window_case(d, **kwargs):
    net = _net()
    with torch.no_grad():
        net(d["img"])  # cuDNN initialised before the check
    return _call(sliding_window_inference, d["img"], (8, 8, 8), 3, net, 0.25, "gaussian", **kwargs)


def _host_weight():
    """A pageable (8, 8, 8) float32 weight map on the host, > 0."""
    return torch.rand((8, 8, 8), generator=torch.Generator().manual_seed(3)).add_(0.1)


@pytest.mark.parametrize("name", list(PINNED))
def test_parameter_tables_cuda_come_from_pinned_memory(name):
    """Every host -> device copy these calls make comes from pinned memory, and they make some (the
    parameters do travel from the host: the check would pass vacuously otherwise)."""
    go = PINNED[name](make_data("cuda"))
    with torch.no_grad():
        pageable, pinned = host_copies(go)
    assert not pageable, f"host -> device copies from pageable memory at {pageable}"
    assert pinned, "no host -> device copy recorded"


@pytest.mark.parametrize("name", list(NO_HOST_COPIES))
def test_crop_and_window_cuda_copy_nothing_from_pageable_memory(name):
    go = NO_HOST_COPIES[name](make_data("cuda"))
    with torch.no_grad():
        seen = pageable_copies(go)
    assert not seen, f"host -> device copies from pageable memory at {seen}"


def test_pageable_copy_detector_cuda():
    """The detector itself: a pageable non-blocking copy is recorded (and not flagged by the sync
    mode), a pinned one is not."""
    x = torch.arange(6.0)
    assert len(pageable_copies(lambda: x.to("cuda", non_blocking=True))) == 1
    assert pageable_copies(lambda: x.pin_memory().to("cuda", non_blocking=True)) == []


def test_sync_check_restores_mode_and_catches_syncs_cuda():
    """The check itself: under the mode a sync (item, a blocking host-to-device tensor, boolean
    indexing) raises, and the previous mode is back afterwards; a non-blocking copy does not raise."""
    x = make_data("cuda")["img"]
    old = torch.cuda.get_sync_debug_mode()
    for fn in (lambda: x.sum().item(), lambda: torch.as_tensor([1, 2, 3], device=x.device), lambda: x[x > 50]):
        with pytest.raises(RuntimeError, match="synchroniz"):
            run_without_sync(fn)
        assert torch.cuda.get_sync_debug_mode() == old
    run_without_sync(lambda: torch.tensor([1.0, 2.0]).to(x.device, non_blocking=True))
