"""Data sets and the two augmentation pipelines of the Swin UNETR example (train.py).

Both pipelines run MONAI's BTCV chain on the same subjects with the same parameters:

  deterministic, once per volume, cached on the device:
      Orientation("RAS") -> Spacing((1.5, 1.5, 2.0), image bilinear, label nearest)
      -> ScaleIntensityRange(a_min, a_max, 0, 1, clip) -> CropForeground(source image, > 0)
      -> SpatialPad(roi) (a no-op unless a cropped volume is smaller than the patch)
  random, every step (one volume -> num_samples patches = one batch):
      RandCropByPosNegLabel(roi, pos 1, neg 1, num_samples 4, image_threshold 0)
      -> RandFlip(axis 0, 1, 2; p 0.1 each) -> RandRotate90(p 0.1, max_k 3)
      -> RandShiftIntensity(offsets 0.1, p 0.5)
  optional heavy chain (``AugConfig.heavy``), appended to the random part:
      RandAffine(p 0.2, rotate_range 0.26 rad, scale_range 0.1, zeros) -> Rand3DElastic(p 0.2,
      sigma 5-8, magnitude 50-100 voxels, zeros) -> RandGaussianNoise(p 0.1, std 0.1)

- ``VoxaugPipeline``: voxaug's transforms on the device; the patches are cut and transformed as
  one batch (``RandCropByPosNegLabeld(as_batch=True)``: crop, flips, rotation (and RandAffine) in
  one gather, the pointwise steps in place after it), no DataLoader, no worker; with
  ``fgbg_cache`` voxaug's FgBgToIndicesd caches the candidate counts per volume.
- ``MonaiPipeline``: MONAI's transforms as in its fast-training / BTCV tutorials: CacheDataset
  holding the deterministic part + EnsureTyped(device, track_meta=False) (and, by default, the
  fast tutorial's FgBgToIndicesd precompute), the random part per sample, ThreadDataLoader
  (num_workers=0), list_data_collate into a batch of num_samples.

Both give ``next_batch() -> (image (S, 1, *roi) float32, label (S, 1, *roi))`` and record the
time the augmentation of each batch took (``data_ms``), and both hold the validation volumes
(``val_items``: (image (1, 1, D, H, W), label (1, 1, D, H, W)) on the device) with the
sliding-window inferer of their library.
"""
from __future__ import annotations

import collections
import importlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

PIXDIM = (1.5, 1.5, 2.0)  # BTCV target spacing (mm); the phantom is generated on this grid
TEMPLATES = Path("/usr/share/mricron/templates")
# mricron data set: AAL regions merged left + right into 6 deep grey-matter structures (+ background),
# labels 1..6 in this order: the C++ trainer's choice (train_data.cpp, mricron_classes).
AAL_STRUCTURES = {"caudate": (71, 72), "putamen": (73, 74), "pallidum": (75, 76), "thalamus": (77, 78),
                  "hippocampus": (37, 38), "amygdala": (41, 42)}


@dataclass
class AugConfig:
    roi: tuple = (96, 96, 96)
    num_samples: int = 4
    a_min: float = -175.0
    a_max: float = 250.0
    pos: float = 1.0
    neg: float = 1.0
    image_threshold: float = 0.0
    flip_prob: float = 0.1
    rot90_prob: float = 0.1
    rot90_max_k: int = 3
    shift_offsets: float = 0.1
    shift_prob: float = 0.5
    # Candidates of RandCropByPosNegLabel cached once per volume in both pipelines: MONAI's
    # FgBgToIndicesd (its fast-training tutorial), voxaug's FgBgToIndicesd (chunk counts). False:
    # both scan the label every call (MONAI's BTCV tutorial).
    fgbg_cache: bool = True
    heavy: bool = False  # RandAffine + Rand3DElastic + RandGaussianNoise after the BTCV chain
    extra: dict = field(default_factory=dict)


# The heavy chain's parameters, shared by both pipelines (MONAI's argument names).
HEAVY_AFFINE = dict(prob=0.2, rotate_range=(0.26, 0.26, 0.26), scale_range=(0.1, 0.1, 0.1),
                    mode=("bilinear", "nearest"), padding_mode="zeros")
HEAVY_ELASTIC = dict(sigma_range=(5.0, 8.0), magnitude_range=(50.0, 100.0), prob=0.2,
                     mode=("bilinear", "nearest"), padding_mode="zeros")
HEAVY_NOISE = dict(prob=0.1, mean=0.0, std=0.1)


# ---------------------------------------------------------------- data sets
def _meta(array: torch.Tensor, affine: np.ndarray, name: str):
    from monai.data import MetaTensor

    return MetaTensor(array, affine=torch.as_tensor(affine, dtype=torch.float64), meta={"filename_or_obj": name})


def phantom_subjects(indices: Sequence[int], size: Sequence[int], num_classes: int, data_seed: int,
                     device: torch.device) -> list[dict]:
    """Subject i = voxaug.phantom.phantom(1, size, num_classes, data_seed, first_sample=i) on a
    1.5 x 1.5 x 2.0 mm RAS grid (so Orientation and Spacing are identities): (1, D, H, W)
    MetaTensors, image float32 CT-like HU, label uint8, on `device`."""
    try:
        phantom = importlib.import_module("voxaug.phantom")
    except ImportError as e:
        raise RuntimeError("the phantom data set needs voxaug.phantom (torch.ops.voxaug.phantom); "
                           f"this voxaug build does not have it ({e})") from e
    affine = np.diag([*PIXDIM, 1.0])
    out = []
    for i in indices:
        img, lab = phantom.phantom(1, list(size), num_classes=num_classes, seed=data_seed, first_sample=int(i),
                                   device=device)
        out.append({"image": _meta(img[0], affine, f"phantom_{i}"), "label": _meta(lab[0], affine, f"phantom_{i}"),
                    "name": f"phantom_{i}"})
    return out


def mricron_subject(device: torch.device) -> dict:
    """Colin27 T1 (ch2.nii.gz) with 6 merged AAL structures (AAL_STRUCTURES, left + right) as
    labels 1..6, on its 1 mm RAS grid."""
    import nibabel as nib

    paths = [TEMPLATES / "ch2.nii.gz", TEMPLATES / "aal.nii.gz"]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"{p} not found: install Debian's mricron-data (apt-get install mricron-data)")
    img, aal = (nib.load(str(p)) for p in paths)
    image = torch.from_numpy(np.asarray(img.dataobj, dtype=np.float32))[None]
    atlas = np.asarray(aal.dataobj)
    label = np.zeros(atlas.shape, np.uint8)
    for k, regions in enumerate(AAL_STRUCTURES.values(), start=1):
        label[np.isin(atlas, regions)] = k
    label = torch.from_numpy(label)[None]
    return {"image": _meta(image.to(device), img.affine, "ch2"), "label": _meta(label.to(device), aal.affine, "aal"),
            "name": "ch2"}


def msd_subjects(root: Path, device: torch.device, limit_train: int, limit_val: int) -> tuple[list, list]:
    """MSD / BTCV layout: root/dataset.json with "training" (and optionally "validation") lists
    of {"image", "label"} paths relative to root; without a validation list the last 20% of the
    training list (at least one case) is held out."""
    from monai.data import load_decathlon_datalist
    from monai.transforms import LoadImaged

    js = root / "dataset.json"
    if not js.is_file():
        raise FileNotFoundError(f"--data-dir: {js} not found (an MSD / BTCV dataset.json is expected)")
    train = load_decathlon_datalist(str(js), True, "training", base_dir=str(root))
    has_val = "validation" in json.loads(js.read_text())
    if has_val:
        val = load_decathlon_datalist(str(js), True, "validation", base_dir=str(root))
    else:
        n_val = max(1, len(train) // 5)
        train, val = train[:-n_val], train[-n_val:]
    if limit_train > 0:
        train = train[:limit_train]
    if limit_val > 0:
        val = val[:limit_val]
    loader = LoadImaged(keys=["image", "label"], ensure_channel_first=True, image_only=True)

    def load(items):
        out = []
        for it in items:
            d = loader(it)
            out.append({"image": d["image"].float().to(device), "label": d["label"].to(torch.uint8).to(device),
                        "name": Path(str(it["image"])).name})
        return out

    return load(train), load(val)


# ---------------------------------------------------------------- subject order
class SubjectOrder:
    """Per-rank epochs: a fresh permutation of this rank's training subjects per epoch, from its
    own generator, so both pipelines visit the same subjects in the same order."""

    def __init__(self, count: int, seed: int):
        self.count, self.g = count, torch.Generator().manual_seed(int(seed))
        self._epoch: list[int] = []

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if not self._epoch:
            self._epoch = torch.randperm(self.count, generator=self.g).tolist()
        return self._epoch.pop(0)

    def take(self, n: int) -> list[int]:
        return [next(self) for _ in range(n)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---------------------------------------------------------------- voxaug
class VoxaugPipeline:
    name = "voxaug"

    def __init__(self, train: list[dict], val: list[dict], cfg: AugConfig, device: torch.device, seed: int,
                 order_seed: int, profile_data: bool = False):
        from voxaug import spatial as S
        from voxaug import transforms as T
        from voxaug.inferers import sliding_window_inference

        self.device, self.cfg, self.profile_data = device, cfg, profile_data
        self.inferer: Callable = sliding_window_inference
        keys = ["image", "label"]
        self.deterministic = T.Compose([
            S.Orientationd(keys, axcodes="RAS"),
            S.Spacingd(keys, pixdim=PIXDIM, mode=("bilinear", "nearest")),
            T.ScaleIntensityRanged("image", a_min=cfg.a_min, a_max=cfg.a_max, b_min=0.0, b_max=1.0, clip=True),
            S.CropForegroundd(keys, source_key="image", allow_smaller=True),
            S.SpatialPadd(keys, spatial_size=list(cfg.roi)),
        ])
        self.random = self.random_chain(cfg).set_random_state(seed)
        t0 = time.perf_counter()
        self.cache = [self.preprocess(s) for s in train]
        self.val_items = [self.preprocess(s, counts=False) for s in val]
        _sync(device)
        self.preprocess_s = time.perf_counter() - t0
        self.order = SubjectOrder(len(self.cache), order_seed)
        self.data_ms: list[float] = []

    @staticmethod
    def random_chain(cfg: AugConfig):
        from voxaug import crop as C
        from voxaug import spatial as S
        from voxaug import transforms as T

        keys = ["image", "label"]
        steps = [
            C.RandCropByPosNegLabeld(keys, label_key="label", spatial_size=list(cfg.roi), pos=cfg.pos, neg=cfg.neg,
                                     num_samples=cfg.num_samples, image_key="image",
                                     image_threshold=cfg.image_threshold, as_batch=True,
                                     fg_indices_key="label_fg_indices" if cfg.fgbg_cache else None),
            S.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=0),
            S.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=1),
            S.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=2),
            S.RandRotate90d(keys, prob=cfg.rot90_prob, max_k=cfg.rot90_max_k),
        ]
        if cfg.heavy:  # RandAffined fuses into the crop's gather with the flips and the rotation
            from voxaug import deform as D

            steps.append(S.RandAffined(keys, **HEAVY_AFFINE))
            steps.append(D.Rand3DElasticd(keys, **HEAVY_ELASTIC))
        steps.append(T.RandShiftIntensityd("image", offsets=cfg.shift_offsets, prob=cfg.shift_prob))
        if cfg.heavy:
            steps.append(T.RandGaussianNoised("image", **HEAVY_NOISE))
        return T.Compose(steps)

    def preprocess(self, subject: dict, counts: bool = True) -> tuple:
        """(image, label) on the device, plus their CropCounts when cfg.fgbg_cache and `counts`."""
        d = {k: subject[k].to(self.device) for k in ("image", "label")}
        d = self.deterministic(d)
        img = d["image"].as_tensor() if hasattr(d["image"], "as_tensor") else d["image"]
        lab = d["label"].as_tensor() if hasattr(d["label"], "as_tensor") else d["label"]
        img, lab = img.float().unsqueeze(0).contiguous(), lab.to(torch.uint8).unsqueeze(0).contiguous()
        if not (self.cfg.fgbg_cache and counts):
            return img, lab
        from voxaug import crop as C

        counts = C.CropCounts.of(lab, img, self.cfg.image_threshold, image_key="image")
        return img, lab, counts

    def augment(self, index: int) -> dict:
        img, lab, *counts = self.cache[index]
        d = {"image": img, "label": lab}
        if counts:
            d["label_fg_indices"] = counts[0]
        return self.random(d)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        t0 = time.perf_counter()
        d = self.augment(next(self.order))
        if self.profile_data:
            _sync(self.device)
        self.data_ms.append((time.perf_counter() - t0) * 1e3)
        return d["image"], d["label"]


# ---------------------------------------------------------------- MONAI
class _TimedDataset(torch.utils.data.Dataset):
    """Wraps the CacheDataset to time each item's random transforms (they run in
    ThreadDataLoader's thread, ahead of the step that uses them): FIFO of ms per batch."""

    def __init__(self, ds, device: torch.device, profile_data: bool):
        self.ds, self.device, self.profile_data = ds, device, profile_data
        self.times: collections.deque = collections.deque()

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i):
        t0 = time.perf_counter()
        out = self.ds[i]
        if self.profile_data:
            _sync(self.device)
        self.times.append((time.perf_counter() - t0) * 1e3)
        return out


class MonaiPipeline:
    name = "monai"

    def __init__(self, train: list[dict], val: list[dict], cfg: AugConfig, device: torch.device, seed: int,
                 order_seed: int, steps: int, profile_data: bool = False):
        from monai.data import CacheDataset, ThreadDataLoader
        from monai.inferers import sliding_window_inference
        from monai import transforms as M

        self.device, self.cfg, self.profile_data = device, cfg, profile_data
        self.inferer: Callable = sliding_window_inference
        keys = ["image", "label"]
        det = [
            M.Orientationd(keys, axcodes="RAS"),
            M.Spacingd(keys, pixdim=PIXDIM, mode=("bilinear", "nearest")),
            M.ScaleIntensityRanged("image", a_min=cfg.a_min, a_max=cfg.a_max, b_min=0.0, b_max=1.0, clip=True),
            M.CropForegroundd(keys, source_key="image", allow_smaller=True),
            M.SpatialPadd(keys, spatial_size=list(cfg.roi)),
        ]
        crop_kw = {}
        if cfg.fgbg_cache:
            det.append(M.FgBgToIndicesd("label", image_key="image", image_threshold=cfg.image_threshold))
            crop_kw = {"fg_indices_key": "label_fg_indices", "bg_indices_key": "label_bg_indices"}
        det.append(M.EnsureTyped(keys, device=device, track_meta=False))
        rand = [
            M.RandCropByPosNegLabeld(keys, label_key="label", spatial_size=list(cfg.roi), pos=cfg.pos, neg=cfg.neg,
                                     num_samples=cfg.num_samples, image_key="image",
                                     image_threshold=cfg.image_threshold, **crop_kw),
            M.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=0),
            M.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=1),
            M.RandFlipd(keys, prob=cfg.flip_prob, spatial_axis=2),
            M.RandRotate90d(keys, prob=cfg.rot90_prob, max_k=cfg.rot90_max_k),
        ]
        if cfg.heavy:
            rand += [M.RandAffined(keys, **HEAVY_AFFINE), M.Rand3DElasticd(keys, **HEAVY_ELASTIC)]
        rand.append(M.RandShiftIntensityd("image", offsets=cfg.shift_offsets, prob=cfg.shift_prob))
        if cfg.heavy:
            rand.append(M.RandGaussianNoised("image", **HEAVY_NOISE))
        self.transform = M.Compose(det + rand)
        self.transform.set_random_state(seed=seed)
        # MONAI's CacheDataset: the subjects as loaded (on the host, as LoadImaged gives them).
        t0 = time.perf_counter()
        data = [{"image": s["image"].cpu(), "label": s["label"].cpu().float()} for s in train]
        self.train_ds = CacheDataset(data, self.transform, cache_rate=1.0, num_workers=0, progress=False)
        val_tf = M.Compose(det[:5] + [M.EnsureTyped(keys, device=device, track_meta=False)])
        vdata = [{"image": s["image"].cpu(), "label": s["label"].cpu().float()} for s in val]
        val_ds = CacheDataset(vdata, val_tf, cache_rate=1.0, num_workers=0, progress=False)
        self.val_items = [(val_ds[i]["image"].unsqueeze(0), val_ds[i]["label"].unsqueeze(0)) for i in range(len(val_ds))]
        _sync(device)
        self.preprocess_s = time.perf_counter() - t0
        self.timed = _TimedDataset(self.train_ds, device, profile_data)
        sampler = SubjectOrder(len(data), order_seed).take(steps)
        torch.manual_seed(seed)  # MONAI's DataLoader seeds the transforms from torch's generator (num_workers=0)
        self.loader = ThreadDataLoader(self.timed, batch_size=1, sampler=sampler, num_workers=0)
        self._it = iter(self.loader)
        self.data_ms: list[float] = []

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = next(self._it)
        self.data_ms.append(self.timed.times.popleft())
        img, lab = (batch[k].as_tensor() if hasattr(batch[k], "as_tensor") else batch[k] for k in ("image", "label"))
        return img.to(self.device), lab.to(self.device)  # plain tensors: no MetaTensor overhead in the model
