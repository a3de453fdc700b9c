"""Patch sampling on the device: MONAI RandCropByPosNegLabel(d).

MONAI lists the foreground / background indices of the label on the host (numpy), draws the
centres with numpy and crops each patch separately. voxaug counts the candidates per chunk on
the device, draws each centre from Philox (keyed by the call's seed and the sample index, so a
sample's centres do not depend on the batch), finds the chosen voxel by rank, applies MONAI's
centre correction, and cuts all patches of a volume (image and label together) in one exact
gather: no index list, no host round trip (except to read the centres for a MetaTensor's
affines).

Returns what MONAI returns: a list of `num_samples` crops (dictionaries for the d form); for a
batched (N, C, D, H, W) input each list entry is the (N, C, ...) batch of that crop index.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Optional, Sequence

import torch

from . import ops
from .spatial import _fall_back_size
from .transforms import _as_batch, _is_meta_tensor, _Randomizable

__all__ = ["RandCropByPosNegLabel", "RandCropByPosNegLabeld"]


def _crop_size(spatial_size: Any, label_size: Sequence[int], allow_smaller: bool) -> tuple[int, int, int]:
    size = _fall_back_size(spatial_size, label_size)
    if any(s > l for s, l in zip(size, label_size)):
        if not allow_smaller:
            raise ValueError("The size of the proposed random crop ROI is larger than the image size, "
                             f"got ROI size {tuple(size)} and label image size {tuple(label_size)} respectively.")
        size = tuple(min(s, l) for s, l in zip(size, label_size))
    return tuple(int(s) for s in size)


def _patches(xs: Sequence[torch.Tensor], modes: Sequence[str], centers: torch.Tensor,
             size: tuple[int, int, int]) -> list[list[torch.Tensor]]:
    """Cuts the crops (N, S) of every input: exact gathers, several inputs per launch.
    Returns per input the S crops, each (N, C, *size)."""
    n, s = centers.shape[:2]
    half = torch.tensor([v // 2 for v in size], dtype=torch.int64, device=centers.device)
    mats = torch.zeros(n, s, 3, 4, dtype=torch.float64, device=centers.device)
    mats[..., 0, 0] = mats[..., 1, 1] = mats[..., 2, 2] = 1.0
    mats[..., :, 3] = (centers - half).to(torch.float64)  # in = out + start: MONAI's roi_start
    out: list[list[torch.Tensor]] = [[] for _ in xs]
    if n == 1:  # one volume: all crops in one launch, the input broadcast over the crops
        views = [x.expand(s, *x.shape[1:]) for x in xs]
        for first in range(0, len(xs), 4):
            part = ops.resample(views[first:first + 4], mats[0], size, modes[first:first + 4],
                                ["zeros"] * len(views[first:first + 4]))
            for j, y in enumerate(part):
                out[first + j] = [y[k:k + 1] for k in range(s)]
        return out
    for k in range(s):  # a batch: one launch per crop index, every volume in it
        for first in range(0, len(xs), 4):
            part = ops.resample(xs[first:first + 4], mats[:, k].contiguous(), size, modes[first:first + 4],
                                ["zeros"] * len(xs[first:first + 4]))
            for j, y in enumerate(part):
                out[first + j].append(y)
    return out


def _with_crop_affine(out: Any, src: Any, start) -> Any:
    if not _is_meta_tensor(src):
        return out
    from monai.data import MetaTensor

    aff = src.affine.detach().clone().to(torch.float64)
    t = torch.eye(4, dtype=torch.float64)
    t[:3, 3] = torch.as_tensor(start, dtype=torch.float64)
    return MetaTensor(out, affine=(aff @ t).to(src.affine.dtype), meta=dict(src.meta))


class RandCropByPosNegLabel(_Randomizable):
    """MONAI RandCropByPosNegLabel(spatial_size, label, pos=1, neg=1, num_samples=1, image,
    image_threshold=0, allow_smaller=False): centres on foreground (label > 0) with probability
    pos / (pos + neg), else on background, restricted to voxels where `image` > image_threshold
    when an image is given; MONAI's fallbacks (no foreground: background only, and vice versa)
    and centre correction. `fg_indices` / `bg_indices` are not needed (the device counts) and
    are refused rather than silently ignored."""

    def __init__(self, spatial_size, label: Optional[torch.Tensor] = None, pos: float = 1.0, neg: float = 1.0,
                 num_samples: int = 1, image: Optional[torch.Tensor] = None, image_threshold: float = 0.0,
                 fg_indices=None, bg_indices=None, allow_smaller: bool = False, lazy: bool = False,
                 seed: Optional[int] = None):
        super().__init__(seed)
        if pos < 0 or neg < 0 or pos + neg == 0:
            raise ValueError(f"pos and neg must be nonnegative and not both zero, got pos={pos} neg={neg}.")
        if int(num_samples) != num_samples or num_samples < 1:
            raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
        if fg_indices is not None or bg_indices is not None:
            raise NotImplementedError("fg_indices / bg_indices: voxaug counts the candidates on the device and "
                                      "needs no precomputed index lists")
        if lazy:
            raise NotImplementedError("lazy=True is not supported; voxaug crops in one exact gather")
        self.spatial_size, self.label, self.image = spatial_size, label, image
        self.pos_ratio = float(pos) / (float(pos) + float(neg))
        self.num_samples, self.image_threshold = int(num_samples), float(image_threshold)
        self.allow_smaller = bool(allow_smaller)
        self.centers: Optional[torch.Tensor] = None  # (N, num_samples, 3) of the last call

    def draw_centers(self, label: torch.Tensor, image: Optional[torch.Tensor] = None, seed: Optional[int] = None,
                     first_sample: int = 0) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """(centres (N, num_samples, 3) int64 on the label's device, crop size); no host sync."""
        lab = _as_batch(label)[0]
        img = None if image is None else _as_batch(image)[0]
        size = _crop_size(self.spatial_size, lab.shape[2:], self.allow_smaller)
        seed = self._next_seed() if seed is None else int(seed) & ((1 << 64) - 1)
        key = seed - (1 << 64) if seed >= (1 << 63) else seed
        centers = torch.ops.voxaug.pos_neg_crop_centers(lab, img, self.image_threshold, self.pos_ratio,
                                                        self.num_samples, list(size), key, int(first_sample))
        return centers, size

    def __call__(self, img: Any, label: Optional[torch.Tensor] = None, image: Optional[torch.Tensor] = None,
                 fg_indices=None, bg_indices=None, randomize: bool = True, lazy: Optional[bool] = None) -> list:
        if fg_indices is not None or bg_indices is not None:
            raise NotImplementedError("fg_indices / bg_indices are not needed by voxaug")
        label = self.label if label is None else label
        image = self.image if image is None else image
        if label is None:
            raise ValueError("label should be provided.")
        x, restore = _as_batch(img)
        if randomize or self.centers is None:
            self.centers, self._size = self.draw_centers(label, image)
        (crops,) = _patches([x], ["nearest"], self.centers, self._size)
        starts = None
        if _is_meta_tensor(img):  # the affines need the centres on the host
            starts = (self.centers - torch.tensor([s // 2 for s in self._size], device=self.centers.device)).cpu()
        out = []
        for k, y in enumerate(crops):
            y = restore(y)
            if starts is not None:
                y = _with_crop_affine(y, img, starts[0, k].tolist())
            out.append(y)
        return out


class RandCropByPosNegLabeld(_Randomizable):
    """MONAI RandCropByPosNegLabeld(keys, label_key, spatial_size, pos, neg, num_samples,
    image_key, image_threshold, allow_smaller): one draw of centres from data[label_key] (and
    data[image_key]), the same crops for every key, all keys in one gather per 4 keys; returns
    num_samples dictionaries (other entries shared)."""

    def __init__(self, keys, label_key: str, spatial_size, pos: float = 1.0, neg: float = 1.0, num_samples: int = 1,
                 image_key: Optional[str] = None, image_threshold: float = 0.0, fg_indices_key=None,
                 bg_indices_key=None, allow_smaller: bool = False, allow_missing_keys: bool = False,
                 lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        if fg_indices_key is not None or bg_indices_key is not None:
            raise NotImplementedError("fg_indices_key / bg_indices_key: voxaug counts the candidates on the device")
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.label_key, self.image_key, self.allow_missing_keys = label_key, image_key, allow_missing_keys
        self.cropper = RandCropByPosNegLabel(spatial_size, None, pos, neg, num_samples, None, image_threshold,
                                             allow_smaller=allow_smaller, lazy=lazy)
        self.cropper._generator = None

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        super().set_random_state(seed, generator)
        return self

    def __call__(self, data: Mapping[Hashable, Any]) -> list[dict]:
        d = dict(data)
        present = [k for k in self.keys if k in d]
        missing = [k for k in self.keys if k not in d]
        if missing and not self.allow_missing_keys:
            raise KeyError(f"key {missing[0]!r} is not in the data and allow_missing_keys is False")
        image = d[self.image_key] if self.image_key is not None else None
        centers, size = self.cropper.draw_centers(d[self.label_key], image, seed=self._next_seed())
        self.cropper.centers, self.cropper._size = centers, size
        xs, restores, modes = [], [], []
        for k in present:
            x, restore = _as_batch(d[k])
            xs.append(x)
            restores.append(restore)
            modes.append("nearest")
        crops = _patches(xs, modes, centers, size) if xs else []
        starts = None
        if any(_is_meta_tensor(d[k]) for k in present):
            starts = (centers - torch.tensor([s // 2 for s in size], device=centers.device)).cpu()
        out = []
        for i in range(self.cropper.num_samples):
            di = dict(d)
            for j, k in enumerate(present):
                y = restores[j](crops[j][i])
                if starts is not None:
                    y = _with_crop_affine(y, d[k], starts[0, i].tolist())
                di[k] = y
            out.append(di)
        return out
