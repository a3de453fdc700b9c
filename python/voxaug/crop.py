"""Patch sampling on the device: MONAI RandCropByPosNegLabel(d), RandCropByLabelClasses(d),
RandWeightedCrop(d), RandSpatialCrop(d), RandSpatialCropSamples(d), and TorchIO's
UniformSampler, WeightedSampler and LabelSampler.

MONAI lists the candidate indices of the label on the host (numpy), draws the centres with
numpy and crops each patch separately. voxaug counts the candidates (or sums the weights) per
chunk on the device, draws each centre from Philox (keyed by the call's seed, the sample index
and the crop index, so a sample's centres do not depend on the batch), finds the chosen voxel
by rank (or by running weight), applies MONAI's centre correction, and cuts all K patches of all
N volumes of an input in one launch (``torch.ops.voxaug.extract_patches``): no index list, no
host round trip (except to read the centres for a MetaTensor's affines, or where a TorchIO
error needs a number, see the samplers' `check`).

The MONAI transforms return what MONAI returns: a list of `num_samples` crops (dictionaries for
the d forms); for a batched (N, C, D, H, W) input each list entry is the (N, C, ...) batch of
that crop index, each sample with its own centres.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Hashable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from .spatial import _fall_back_size, _scaled_size
from .transforms import _as_batch, _host_to, _is_meta_tensor, _Randomizable

__all__ = [
    "RandCropByPosNegLabel", "RandCropByPosNegLabeld", "RandCropByLabelClasses", "RandCropByLabelClassesd",
    "RandWeightedCrop", "RandWeightedCropd", "RandSpatialCrop", "RandSpatialCropd", "RandScaleCrop", "RandScaleCropd",
    "RandSpatialCropSamples",
    "RandSpatialCropSamplesd", "UniformSampler", "WeightedSampler", "LabelSampler", "extract_patches",
    "gather_patches",
    "flush_checks", "PatchQueue", "CropCounts", "FgBgToIndicesd", "ClassesToIndicesd", "GridSampler", "GridAggregator",
]

FOREGROUND, ARGMAX, ONE_HOT = 0, 1, 2  # label forms of torch.ops.voxaug.class_crop_centers
_SAMPLER_BLOCK = 16  # centres drawn per device call by the TorchIO samplers when num_patches is None


def _key(seed: int) -> int:
    seed &= (1 << 64) - 1
    return seed - (1 << 64) if seed >= (1 << 63) else seed


def _crop_size(spatial_size: Any, label_size: Sequence[int], allow_smaller: bool) -> tuple[int, int, int]:
    if type(spatial_size) in (list, tuple) and all(type(v) is int for v in spatial_size):
        # the usual form (plain ints): validated once per (size, label size, allow_smaller)
        try:
            return _crop_size_of_ints(tuple(spatial_size), tuple(label_size), bool(allow_smaller))
        except ValueError:
            pass  # raised below with the argument as given (errors are not cached)
    return _crop_size_checked(spatial_size, label_size, allow_smaller)


@functools.lru_cache(maxsize=256)
def _crop_size_of_ints(spatial_size: tuple, label_size: tuple, allow_smaller: bool) -> tuple[int, int, int]:
    return _crop_size_checked(spatial_size, label_size, allow_smaller)


def _crop_size_checked(spatial_size: Any, label_size: Sequence[int], allow_smaller: bool) -> tuple[int, int, int]:
    size = _fall_back_size(spatial_size, label_size)
    if any(s > l for s, l in zip(size, label_size)):
        if not allow_smaller:
            raise ValueError("The size of the proposed random crop ROI is larger than the image size, "
                             f"got ROI size {tuple(size)} and label image size {tuple(label_size)} respectively.")
        size = tuple(min(s, l) for s, l in zip(size, label_size))
    return tuple(int(s) for s in size)


def _num_samples(num_samples: Any) -> int:
    if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
        raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
    return int(num_samples)


def extract_patches(x: torch.Tensor, centers: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """The (N * K, C, *size) patches of the (N, C, D, H, W) tensor `x` centred at `centers`
    ((N, K, 3) int64 on x's device; a patch starts at centre - size // 2, MONAI's crop; voxels
    outside the volume are 0): one launch, exact copies, no host sync."""
    size = [int(s) for s in size]
    if x.dtype == torch.bool:
        return torch.ops.voxaug.extract_patches(x.view(torch.uint8), centers, size).view(torch.bool)
    return torch.ops.voxaug.extract_patches(x, centers, size)


def gather_patches(volumes: Sequence[torch.Tensor], sample_index: Sequence[int], starts: torch.Tensor,
                   size: Sequence[int]) -> torch.Tensor:
    """K patches of `size` from several volumes at once: patch k is cut from sample
    sample_index[k] of the volumes' samples taken in order (volume 0's N_0, then volume 1's, ...;
    the volumes (N_i, C, D_i, H_i, W_i) share dtype, C and device, not their spatial size), its
    first voxel at starts[k] ((K, 3) int64 on the volumes' device; voxels outside are 0).
    Returns (K, C, *size): exact copies, one op (CUDA: one launch per 48 patches), no host sync."""
    return torch.ops.voxaug.gather_patches(list(volumes), [int(i) for i in sample_index], starts,
                                           [int(s) for s in size])


def _extract(xs: Sequence[torch.Tensor], centers: torch.Tensor, size: Sequence[int]) -> list[list[torch.Tensor]]:
    """Per input, the K crops (each (N, C, *size)) at centers (N, K, 3): one launch per input."""
    n, k = centers.shape[:2]
    out = []
    for x in xs:
        if tuple(x.shape[0:1]) != (n,):
            raise ValueError(f"every input must have the batch size of the centres ({n}), got {tuple(x.shape)}")
        y = extract_patches(x, centers, size).view(n, k, x.shape[1], *size)
        out.append([y[:, i] for i in range(k)])
    return out


def _with_crop_affine(out: Any, src: Any, start) -> Any:
    if not _is_meta_tensor(src):
        return out
    from monai.data import MetaTensor

    aff = src.affine.detach().clone().to(torch.float64)
    t = torch.eye(4, dtype=torch.float64)
    t[:3, 3] = torch.as_tensor(start, dtype=torch.float64)
    return MetaTensor(out, affine=(aff @ t).to(src.affine.dtype), meta=dict(src.meta))


def _finish(crops: list[torch.Tensor], restore, src: Any, centers: torch.Tensor, size) -> list:
    """MONAI's output form: each crop restored to the input's form (a MetaTensor gets its crop
    affine, which needs the centres on the host)."""
    starts = None
    if _is_meta_tensor(src):
        starts = centers.cpu() - torch.tensor([s // 2 for s in size])
    out = []
    for k, y in enumerate(crops):
        y = restore(y)
        if starts is not None:
            y = _with_crop_affine(y, src, starts[0, k].tolist())
        out.append(y)
    return out


def _dict_crops(d: dict, keys: Sequence, allow_missing_keys: bool, centers: torch.Tensor, size,
                num_samples: int, as_batch: bool = False) -> Union[list[dict], dict]:
    """The d forms: the same crops for every key, one extraction launch per key. as_batch: one
    dict whose keys hold the (N * num_samples, C, *size) patches as extracted (no per-patch
    split, no copy), ready for voxaug's batched transforms."""
    present = [k for k in keys if k in d]
    missing = [k for k in keys if k not in d]
    if missing and not allow_missing_keys:
        raise KeyError(f"key {missing[0]!r} is not in the data and allow_missing_keys is False")
    if as_batch:
        out = dict(d)
        for k in present:
            x = torch.as_tensor(d[k]) if not isinstance(d[k], torch.Tensor) else d[k]
            x = x.as_tensor() if _is_meta_tensor(x) else x
            x = x if x.dim() == 5 else x.unsqueeze(0)
            out[k] = extract_patches(x, centers, size)
        return out
    batches = [_as_batch(d[k]) for k in present]
    crops = _extract([b[0] for b in batches], centers, size) if present else []
    outs = [dict(d) for _ in range(num_samples)]
    for j, k in enumerate(present):
        for i, y in enumerate(_finish(crops[j], batches[j][1], d[k], centers, size)):
            outs[i][k] = y
    return outs


def _patch_placeholders(d: dict, keys: Sequence, allow_missing_keys: bool, centers: torch.Tensor,
                        size, keep_form: bool = False) -> tuple[dict, dict]:
    """The as_batch result with the cut deferred: each key of `d` a meta-device placeholder of the
    (N * K, C, *size) patch batch's shape, and id(placeholder) -> _PatchSource (the full volume
    and the centres) for voxaug.spatial.compose_spatial to gather from. bool tensors are cut now
    (no resample of bool). keep_form (RandSpatialCrop(d): one crop per sample): a key given as
    one (C, D, H, W) volume gets its (C, *size) form back at the end of compose_spatial."""
    from .spatial import _PatchSource

    missing = [k for k in keys if k not in d]
    if missing and not allow_missing_keys:
        raise KeyError(f"key {missing[0]!r} is not in the data and allow_missing_keys is False")
    size = tuple(int(s) for s in size)
    patches: dict = {}
    for k in (k for k in keys if k in d):
        x = torch.as_tensor(d[k]) if not isinstance(d[k], torch.Tensor) else d[k]
        x = x.as_tensor() if _is_meta_tensor(x) else x
        unbatched = keep_form and x.dim() == 4
        x = _as_batch(x)[0]  # (N, C, D, H, W); a clear error for other ranks
        if x.dtype == torch.bool:
            y = extract_patches(x, centers, size)
            d[k] = y.squeeze(0) if unbatched else y
            continue
        ph = torch.empty((x.shape[0] * centers.shape[1], x.shape[1], *size), dtype=x.dtype, device="meta")
        patches[id(ph)] = _PatchSource(x, centers, size, ph, unbatched)
        d[k] = ph
    return d, patches


class _CropSamplerd(_Randomizable):
    """The dictionary crop samplers' shared part: one draw of centres (`_draw`: (N, K, 3) int64 on
    the data's device and the crop size, or None when no key is present and allow_missing_keys),
    the same crops for every key. Without `as_batch` a list of K dictionaries (MONAI's form); with
    it (voxaug extension) one dictionary of (N * K, C, *size) batches, which Compose fuses with the
    spatial steps after it through `draw_patches`."""

    keys: list
    allow_missing_keys: bool
    as_batch: bool = False

    def _draw(self, d: dict) -> Optional[tuple[torch.Tensor, tuple[int, int, int]]]:
        raise NotImplementedError

    def __call__(self, data: Mapping[Hashable, Any]) -> Union[list[dict], dict]:
        d = dict(data)
        drawn = self._draw(d)
        if drawn is None:
            return d
        centers, size = drawn
        return _dict_crops(d, self.keys, self.allow_missing_keys, centers, size, centers.shape[1], self.as_batch)

    def draw_patches(self, data: Mapping[Hashable, Any]) -> tuple[dict, dict]:
        """The as_batch result with the cut deferred, for Compose to fuse the crop with the spatial
        transforms after it (one gather from the full volume, so a rotated patch has real data at
        its corners): the same draw as __call__, each key a meta-device placeholder of the patch
        batch's shape, and the placeholders' sources (see voxaug.spatial.compose_spatial)."""
        d = dict(data)
        drawn = self._draw(d)
        if drawn is None:
            return d, {}
        return _patch_placeholders(d, self.keys, self.allow_missing_keys, *drawn)


# ---------------- deferred checks (CUDA: no host sync) ----------------
_pending: list = []


class _PendingCheck:
    """Runs `fn` on a host copy of `t`: now on the CPU; on CUDA when the copy has landed (polled
    at the next voxaug crop call, or by flush_checks()), so the call itself never waits."""

    def __init__(self, t: torch.Tensor, fn):
        self.fn = fn
        if t.is_cuda:
            self.host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            # The copy runs on the current stream of t's device; the event must follow that
            # stream (not the current device's) or a tensor on another GPU is read too early.
            with torch.cuda.device(t.device):
                self.host.copy_(t, non_blocking=True)
                self.event = torch.cuda.Event()
                self.event.record(torch.cuda.current_stream(t.device))
            _pending.append(self)
        else:
            self.event = None
            fn(t)

    def run(self, wait: bool) -> bool:
        if not wait and not self.event.query():
            return False
        self.event.synchronize()
        self.fn(self.host)
        return True


def _poll(wait: bool = False) -> None:
    for c in list(_pending):
        if c.run(wait):
            _pending.remove(c)


def flush_checks() -> None:
    """Waits for the pending CUDA-side class checks and emits their warnings."""
    _poll(wait=True)


# ---------------- cached candidates (MONAI FgBgToIndices) ----------------
class CropCounts:
    """What voxaug caches where MONAI caches foreground / background index lists: the candidate
    counts of each chunk of 4096 voxels of the label (in its memory order), foreground and
    background, ``(N, chunks, 2)`` int64 on the label's device (``class_crop_counts``), with the
    image key and threshold that defined the candidates. Given to RandCropByPosNegLabel(d), the
    draw skips the scan of the whole volume and reads one chunk per crop; the centres are the
    ones the uncached draw gives. Valid while the label and image keep their values and memory
    layout (as MONAI's cached indices)."""

    def __init__(self, counts: torch.Tensor, image_key: Optional[Hashable], image_threshold: float,
                 form: int = FOREGROUND):
        self.counts, self.image_key, self.image_threshold = counts, image_key, float(image_threshold)
        self.form = int(form)  # FOREGROUND (pos / neg, 2 classes), ARGMAX or ONE_HOT

    @property
    def num_classes(self) -> int:
        return int(self.counts.shape[2])

    @staticmethod
    def of(label: Any, image: Any = None, image_threshold: float = 0.0, image_key: Optional[Hashable] = None,
           num_classes: Optional[int] = None, classes: bool = False):
        """Counts for RandCropByPosNegLabel (default: foreground / background) or, with
        ``classes=True``, for RandCropByLabelClasses (argmax label with ``num_classes``, or one-hot)."""
        lab = _as_batch(label)[0]
        img = None if image is None else _as_batch(image)[0]
        form, k = _class_form(lab, num_classes) if classes else (FOREGROUND, 2)
        counts = torch.ops.voxaug.class_crop_counts(lab, img, float(image_threshold), form, k)
        return CropCounts(counts, image_key, image_threshold, form)

    def __repr__(self) -> str:
        return (f"CropCounts(shape={tuple(self.counts.shape)}, form={self.form}, device={self.counts.device}, "
                f"image_key={self.image_key!r}, image_threshold={self.image_threshold})")


class _CountsToKeys:
    """The loop of FgBgToIndicesd / ClassesToIndicesd: for each label key, one CropCounts
    (counted with data[image_key] when given) stored under the names ``_names(key)``."""

    def __init__(self, keys, image_key: Optional[str], image_threshold: float, allow_missing_keys: bool):
        self.keys, self.image_key = _keys(keys), image_key
        self.image_threshold, self.allow_missing_keys = float(image_threshold), allow_missing_keys

    def _counts(self, label: Any, image: Any) -> CropCounts:
        raise NotImplementedError

    def _names(self, key: Hashable) -> list:
        raise NotImplementedError

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        image = d[self.image_key] if self.image_key is not None else None
        for key in self.keys:
            if key not in d:
                if self.allow_missing_keys:
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            cc = self._counts(d[key], image)
            for name in self._names(key):
                d[name] = cc
        return d


class FgBgToIndicesd(_CountsToKeys):
    """MONAI FgBgToIndicesd(keys, fg_postfix, bg_postfix, image_key, image_threshold): for each
    label key stores, under ``key + fg_postfix`` and ``key + bg_postfix``, one :class:`CropCounts`
    (not index arrays) that voxaug's RandCropByPosNegLabeld(fg_indices_key=..., bg_indices_key=...)
    reads, as MONAI's fast-training pipeline caches its indices. ``output_shape`` is accepted and
    ignored (MONAI uses it to unravel indices)."""

    def __init__(self, keys, fg_postfix: str = "_fg_indices", bg_postfix: str = "_bg_indices",
                 image_key: Optional[str] = None, image_threshold: float = 0.0, output_shape=None,
                 allow_missing_keys: bool = False):
        super().__init__(keys, image_key, image_threshold, allow_missing_keys)
        self.fg_postfix, self.bg_postfix = fg_postfix, bg_postfix

    def _counts(self, label, image):
        return CropCounts.of(label, image, self.image_threshold, self.image_key)

    def _names(self, key):
        return [f"{key}{self.fg_postfix}", f"{key}{self.bg_postfix}"]


class ClassesToIndicesd(_CountsToKeys):
    """MONAI ClassesToIndicesd(keys, indices_postfix, num_classes, image_key, image_threshold): for
    each label key stores under ``key + indices_postfix`` a :class:`CropCounts` of the classes
    (argmax label with `num_classes`, or one-hot) that voxaug's
    RandCropByLabelClassesd(indices_key=...) reads. ``output_shape`` is accepted and ignored;
    ``max_samples_per_class`` is refused (voxaug keeps no index lists to subsample)."""

    def __init__(self, keys, indices_postfix: str = "_cls_indices", num_classes: Optional[int] = None,
                 image_key: Optional[str] = None, image_threshold: float = 0.0, output_shape=None,
                 max_samples_per_class: Optional[int] = None, allow_missing_keys: bool = False):
        if max_samples_per_class is not None:
            raise NotImplementedError("max_samples_per_class: voxaug keeps no index lists to subsample")
        super().__init__(keys, image_key, image_threshold, allow_missing_keys)
        self.indices_postfix, self.num_classes = indices_postfix, num_classes

    def _counts(self, label, image):
        return CropCounts.of(label, image, self.image_threshold, self.image_key, self.num_classes, classes=True)

    def _names(self, key):
        return [f"{key}{self.indices_postfix}"]


class _IndexLists:
    """MONAI's index arrays (FgBgToIndices' foreground and background lists, ClassesToIndices'
    list per class): flat indices into one label's spatial volume (C order). The draw turns them
    into the candidate volumes they stand for -- a label with each list's value at its indices
    and a mask of all of them (the candidates: mask > 0) -- on the label's device, with no host
    sync, and draws from those as from a scanned label: each list's voxels uniformly, as MONAI's
    ``indices[randint(len(indices))]`` (lists are sets here: MONAI's are sorted and unique).
    Host lists are checked (integers within the volume); device lists are not read back (an
    index outside the volume is dropped)."""

    image_key = None  # the indices define the candidates: no image, no threshold
    image_threshold = 0.0

    def __init__(self, lists: Sequence[Any], values: Sequence[int], what: str):
        self.lists, self.values, self.what = [], list(values), what
        for i, v in enumerate(lists):
            t = v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
            if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
                raise TypeError(f"{what}: index arrays must hold integers, got {t.dtype} in list {i}")
            self.lists.append(t.reshape(-1))

    def candidates(self, lab: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(label, mask) volumes of the (1, C, *spatial) label batch's shape and device, standing
        for the lists (the draw's label and image, threshold 0)."""
        if lab.shape[0] != 1:
            raise ValueError(f"{self.what}: MONAI's index arrays describe one volume; the label is a batch of "
                             f"{lab.shape[0]} (use a batch of one, or the CropCounts of voxaug.crop.FgBgToIndicesd / "
                             "ClassesToIndicesd)")
        return self.volumes(lab.shape[2:], lab.device)

    def volumes(self, spatial: Sequence[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(label, mask): (1, 1, *spatial) volumes; the last list written wins where lists overlap."""
        v = int(np.prod(spatial))
        dtype = torch.uint8 if max(self.values, default=0) < 256 else torch.int32
        label = torch.zeros(v + 1, dtype=dtype, device=device)  # slot v: where device lists' strays go
        mask = torch.zeros(v + 1, dtype=torch.uint8, device=device)
        for i, (t, value) in enumerate(zip(self.lists, self.values)):
            if t.numel() == 0:
                continue
            if t.device.type == "cpu":
                lo, hi = int(t.min()), int(t.max())
                if lo < 0 or hi >= v:
                    raise ValueError(f"{self.what}: list {i} holds indices in [{lo}, {hi}], outside the label's "
                                     f"{v} voxels (spatial size {tuple(spatial)})")
                t = _host_to(t.to(torch.int64), device)
            else:
                t = t.to(device=device, dtype=torch.int64)
                t = torch.where((t >= 0) & (t < v), t, torch.full_like(t, v))
            mask[t] = 1
            label[t] = value
        return label[:v].view(1, 1, *spatial), mask[:v].view(1, 1, *spatial)


def _counts_arg(fg: Any, bg: Any, what: str) -> Union[CropCounts, _IndexLists, None]:
    """The CropCounts behind MONAI's fg / bg indices arguments (both, one, or neither given), or
    MONAI's index arrays themselves (both lists; one alone is ignored, as MONAI recomputes both)."""
    given = [v for v in (fg, bg) if v is not None]
    if not given:
        return None
    if not any(isinstance(v, CropCounts) for v in given):
        if len(given) == 1:
            return None
        return _IndexLists([bg, fg], [0, 1], what)  # the foreground written last wins an overlap
    if not all(isinstance(v, CropCounts) for v in given):
        raise TypeError(f"{what}: give both as the same CropCounts or both as MONAI's index arrays, got "
                        f"{type(given[0]).__name__} and {type(given[1]).__name__}")
    if len(given) == 2 and given[0] is not given[1]:
        raise ValueError(f"{what}: the foreground and background entries must be the same CropCounts")
    return given[0]


def _class_lists_arg(indices: Any, what: str) -> Union[CropCounts, _IndexLists, None]:
    """RandCropByLabelClasses' `indices`: a CropCounts, or MONAI's list of index arrays per class."""
    if indices is None or isinstance(indices, CropCounts):
        return indices
    if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence) or not len(indices):
        raise TypeError(f"{what}: a CropCounts or MONAI's list of index arrays (one per class), got "
                        f"{type(indices).__name__}")
    return _IndexLists(indices, range(len(indices)), what)


def _cached_in(d: Mapping[Hashable, Any], keys: Sequence[Optional[Hashable]], what: str, producer: str,
               image_key: Optional[Hashable]) -> tuple[Any, Optional[CropCounts]]:
    """The image and the CropCounts a dictionary crop draws with: d[image_key] and None without
    cached counts; with them (under `keys`), the counts and the image they were counted with
    (their image key and threshold define the candidates, as MONAI's indices do)."""
    for k in keys:
        if k is not None and k not in d:
            raise KeyError(f"{k!r} ({what}) is not in the data: run voxaug.crop.{producer} first")
    vals = [d[k] if k is not None else None for k in keys]
    counts = (_counts_arg(vals[0], vals[1], what) if len(vals) > 1 else _class_lists_arg(vals[0], what))
    key = image_key if counts is None else counts.image_key
    return (d[key] if key is not None else None), counts


def _check_counts_form(counts: CropCounts, form: int, k: int, what: str) -> None:
    if counts.form != form or counts.num_classes != k:
        raise ValueError(f"{what}: these CropCounts were made for label form {counts.form} with "
                         f"{counts.num_classes} classes, the crop needs form {form} with {k}")


# ---------------- RandCropByPosNegLabel ----------------
def _pos_neg_check(counts: torch.Tensor) -> None:
    """MONAI generate_pos_neg_label_crop_centers' checks on the (N, 2) candidate counts
    (foreground, background) of each sample: none at all raises its ValueError (on CUDA, where
    the counts arrive after the call, a RuntimeWarning: the crops were centred on the volume's
    centre); one side empty gives its warning (the other side is drawn)."""
    for fg, bg in counts.tolist():
        if fg == 0 and bg == 0:
            msg = "No sampling location available."
            if counts.device.type == "cpu" and not counts.is_pinned():
                raise ValueError(msg)
            warnings.warn(msg + " (voxaug on CUDA: the crops were centred on the volume's centre)", RuntimeWarning)
        elif fg == 0 or bg == 0:
            warnings.warn(f"Num foregrounds {fg}, Num backgrounds {bg}, unable to generate class balanced samples, "
                          f"setting `pos_ratio` to {0 if fg == 0 else 1}.")


class RandCropByPosNegLabel(_Randomizable):
    """MONAI RandCropByPosNegLabel(spatial_size, label, pos=1, neg=1, num_samples=1, image,
    image_threshold=0, allow_smaller=False): centres on foreground (label > 0; channels 1.. of a
    several-channel, one-hot label) with probability pos / (pos + neg), else on background,
    restricted to voxels where `image` > image_threshold when an image is given (the background
    only, as MONAI's map_binary_to_indices); MONAI's fallbacks (no foreground: background only,
    and vice versa) and centre correction. `fg_indices` / `bg_indices`: a :class:`CropCounts`
    (from ``CropCounts.of(label, image, image_threshold)`` or FgBgToIndicesd) of this label skips
    the scan of the volume (its image and threshold define the candidates, as MONAI's indices
    do), or MONAI's index arrays (FgBgToIndices' flat indices into a batch of one volume; both
    needed: one alone is ignored, as MONAI recomputes both) are drawn from uniformly, as MONAI."""

    def __init__(self, spatial_size, label: Optional[torch.Tensor] = None, pos: float = 1.0, neg: float = 1.0,
                 num_samples: int = 1, image: Optional[torch.Tensor] = None, image_threshold: float = 0.0,
                 fg_indices=None, bg_indices=None, allow_smaller: bool = False, lazy: bool = False,
                 seed: Optional[int] = None):
        super().__init__(seed)
        if pos < 0 or neg < 0 or pos + neg == 0:
            raise ValueError(f"pos and neg must be nonnegative and not both zero, got pos={pos} neg={neg}.")
        self.counts = _counts_arg(fg_indices, bg_indices, "fg_indices / bg_indices")
        if lazy:
            raise NotImplementedError("lazy=True is not supported; voxaug crops in one exact gather")
        self.spatial_size, self.label, self.image = spatial_size, label, image
        self.pos_ratio = float(pos) / (float(pos) + float(neg))
        self.num_samples, self.image_threshold = _num_samples(num_samples), float(image_threshold)
        self.allow_smaller = bool(allow_smaller)
        self.centers: Optional[torch.Tensor] = None  # (N, num_samples, 3) of the last call
        self.class_counts: Optional[torch.Tensor] = None  # (N, 2): foreground, background candidates

    def draw_centers(self, label: torch.Tensor, image: Optional[torch.Tensor] = None, seed: Optional[int] = None,
                     first_sample: int = 0, counts: Optional[CropCounts] = None,
                     ) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """(centres (N, num_samples, 3) int64 on the label's device, crop size); no host sync.
        With `counts`, `image` must be the image they were counted with (None if none) and
        their threshold applies."""
        lab = _as_batch(label)[0]
        img = None if image is None else _as_batch(image)[0]
        size = _crop_size(self.spatial_size, lab.shape[2:], self.allow_smaller)
        seed = self._next_seed() if seed is None else int(seed)
        thr = self.image_threshold if counts is None else counts.image_threshold
        if isinstance(counts, _IndexLists):  # MONAI's arrays: the candidates they list (mask > 0)
            lab, img = counts.candidates(lab)
            counts = None
        elif counts is not None:
            _check_counts_form(counts, FOREGROUND, 2, "fg_indices / bg_indices")
        # pos_neg_crop_centers is class_crop_centers on the Foreground form with ratios (pos, neg):
        # the same centres, plus the candidate counts for MONAI's warning and error.
        _poll()
        centers, found = torch.ops.voxaug.class_crop_centers(
            lab, img, thr, FOREGROUND, [self.pos_ratio, 1.0 - self.pos_ratio], self.num_samples, list(size), [],
            _key(seed), int(first_sample), 0, None if counts is None else counts.counts)
        self.class_counts = found
        _PendingCheck(found, _pos_neg_check)
        return centers, size

    def __call__(self, img: Any, label: Optional[torch.Tensor] = None, image: Optional[torch.Tensor] = None,
                 fg_indices=None, bg_indices=None, randomize: bool = True, lazy: Optional[bool] = None) -> list:
        counts = _counts_arg(fg_indices, bg_indices, "fg_indices / bg_indices") or self.counts
        label = self.label if label is None else label
        image = self.image if image is None else image
        if label is None:
            raise ValueError("label should be provided.")
        x, restore = _as_batch(img)
        if randomize or self.centers is None:
            self.centers, self._size = self.draw_centers(label, image, counts=counts)
        (crops,) = _extract([x], self.centers, self._size)
        return _finish(crops, restore, img, self.centers, self._size)


class RandCropByPosNegLabeld(_CropSamplerd):
    """MONAI RandCropByPosNegLabeld(keys, label_key, spatial_size, pos, neg, num_samples,
    image_key, image_threshold, allow_smaller): one draw of centres from data[label_key] (and
    data[image_key]), the same crops for every key (one launch per key); returns num_samples
    dictionaries (other entries shared). fg_indices_key / bg_indices_key name the
    :class:`CropCounts` that voxaug.crop.FgBgToIndicesd stored (MONAI's fast-training cache):
    the draw then skips the scan of the volume, with the same centres."""

    def __init__(self, keys, label_key: str, spatial_size, pos: float = 1.0, neg: float = 1.0, num_samples: int = 1,
                 image_key: Optional[str] = None, image_threshold: float = 0.0, fg_indices_key=None,
                 bg_indices_key=None, allow_smaller: bool = False, allow_missing_keys: bool = False,
                 lazy: bool = False, seed: Optional[int] = None, as_batch: bool = False):
        super().__init__(seed)
        self.fg_indices_key, self.bg_indices_key = fg_indices_key, bg_indices_key
        self.as_batch = bool(as_batch)  # voxaug extension: one dict of (num_samples, C, ...) batches
        self.keys = _keys(keys)
        self.label_key, self.image_key, self.allow_missing_keys = label_key, image_key, allow_missing_keys
        self.cropper = RandCropByPosNegLabel(spatial_size, None, pos, neg, num_samples, None, image_threshold,
                                             allow_smaller=allow_smaller, lazy=lazy)

    def _image_and_counts(self, d: Mapping[Hashable, Any]) -> tuple[Any, Optional[CropCounts]]:
        return _cached_in(d, [self.fg_indices_key, self.bg_indices_key], "fg_indices_key / bg_indices_key",
                          "FgBgToIndicesd", self.image_key)

    def _draw(self, d: dict) -> tuple[torch.Tensor, tuple[int, int, int]]:
        image, counts = self._image_and_counts(d)
        centers, size = self.cropper.draw_centers(d[self.label_key], image, seed=self._next_seed(), counts=counts)
        self.cropper.centers, self.cropper._size = centers, size
        return centers, size


def _keys(keys) -> list:
    return [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)


# ---------------- RandCropByLabelClasses ----------------
def _class_form(lab: torch.Tensor, num_classes: Optional[int]) -> tuple[int, int]:
    """MONAI map_classes_to_indices: one channel = an argmax label (num_classes required), more
    channels = one-hot (one class per channel)."""
    channels = lab.shape[1]
    if channels > 1:
        return ONE_HOT, channels
    if num_classes is None:
        raise ValueError("channels==1 indicates not using One-Hot format label, must provide ``num_classes``.")
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int, got {num_classes!r}")
    return ARGMAX, int(num_classes)


def _class_ratios(ratios: Any, k: int) -> list[float]:
    if ratios is None:
        r = [1.0] * k
    elif isinstance(ratios, (list, tuple, np.ndarray, torch.Tensor)):
        r = [float(v) for v in ratios]
    else:
        r = [float(ratios)]
    if len(r) != k:
        raise ValueError(f"random crop ratios must match the number of indices of classes, got {len(r)} and {k}.")
    if any(v < 0 for v in r) or not all(np.isfinite(r)):
        raise ValueError(f"ratios should not contain negative number, got {r}.")
    return r


class RandCropByLabelClasses(_Randomizable):
    """MONAI RandCropByLabelClasses(spatial_size, ratios, label, num_classes, num_samples, image,
    image_threshold, allow_smaller, warn): per crop a class drawn by `ratios` (None: equal),
    then a voxel of that class uniformly (restricted to `image` > image_threshold when given),
    MONAI's centre correction. Classes absent from the label get ratio 0 with MONAI's warning
    (`warn`). Argmax labels (one channel, `num_classes` required) and one-hot labels (a class per
    channel) as MONAI. When no class with a positive ratio is present MONAI raises; voxaug raises
    the same way on the CPU, and on CUDA (where that would need a host sync) warns once the
    counts have arrived and draws a present class uniformly. `indices`: a :class:`CropCounts`
    of this label (``CropCounts.of(label, image, thr, num_classes=K, classes=True)`` or
    ClassesToIndicesd) skips the scan of the volume (its image and threshold define the
    candidates); MONAI's list of index arrays (ClassesToIndices', one per class, flat indices
    into a batch of one volume) is drawn from as MONAI does; `max_samples_per_class` is refused."""

    def __init__(self, spatial_size, ratios: Optional[Sequence[float]] = None, label: Optional[torch.Tensor] = None,
                 num_classes: Optional[int] = None, num_samples: int = 1, image: Optional[torch.Tensor] = None,
                 image_threshold: float = 0.0, indices=None, allow_smaller: bool = False, warn: bool = True,
                 max_samples_per_class: Optional[int] = None, lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        self.counts = _class_lists_arg(indices, "indices")
        if max_samples_per_class is not None:
            raise NotImplementedError("max_samples_per_class: voxaug keeps no index lists to subsample")
        if lazy:
            raise NotImplementedError("lazy=True is not supported; voxaug crops in one exact gather")
        self.spatial_size, self.ratios, self.label, self.image = spatial_size, ratios, label, image
        self.num_classes, self.num_samples = num_classes, _num_samples(num_samples)
        self.image_threshold, self.allow_smaller, self.warn = float(image_threshold), bool(allow_smaller), bool(warn)
        if ratios is not None:
            _class_ratios(ratios, len(ratios) if isinstance(ratios, (list, tuple)) else 1)
        self.centers: Optional[torch.Tensor] = None
        self.class_counts: Optional[torch.Tensor] = None  # (N, num_classes) candidates per class

    def _check(self, ratios: list[float]):
        warn = self.warn

        def fn(counts: torch.Tensor) -> None:
            c = counts.tolist()
            for row in c:
                for i, (n, r) in enumerate(zip(row, ratios)):
                    if n == 0 and r != 0 and warn:
                        warnings.warn(f"no available indices of class {i} to crop, setting the crop ratio of this "
                                      "class to zero.")
                if not any(n > 0 and r > 0 for n, r in zip(row, ratios)):
                    msg = ("no class with a positive ratio has a candidate voxel in the label (MONAI raises: "
                           f"probabilities contain NaN); ratios {ratios}, counts {row}")
                    if counts.device.type == "cpu" and not counts.is_pinned():
                        raise ValueError(msg)
                    warnings.warn(msg + "; on CUDA voxaug drew a present class uniformly", RuntimeWarning)
        return fn

    def draw_centers(self, label: torch.Tensor, image: Optional[torch.Tensor] = None, seed: Optional[int] = None,
                     first_sample: int = 0, cached: Optional[CropCounts] = None,
                     ) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """(centres (N, num_samples, 3) int64 on the label's device, crop size); on the CPU also
        checks MONAI's warnings / error; on CUDA they are deferred (no host sync). With `cached`,
        `image` must be the image they were counted with and their threshold applies."""
        _poll()
        lab = _as_batch(label)[0]
        img = None if image is None else _as_batch(image)[0]
        thr = self.image_threshold
        if isinstance(cached, _IndexLists):  # MONAI's arrays: an argmax label of their classes
            form, k = ARGMAX, len(cached.lists)
            (lab, img), cached, thr = cached.candidates(lab), None, cached.image_threshold
        else:
            form, k = _class_form(lab, self.num_classes)
        ratios = _class_ratios(self.ratios, k)
        size = _crop_size(self.spatial_size, lab.shape[2:], self.allow_smaller)
        seed = self._next_seed() if seed is None else int(seed)
        if cached is not None:
            _check_counts_form(cached, form, k, "indices")
            thr = cached.image_threshold
        centers, counts = torch.ops.voxaug.class_crop_centers(lab, img, thr, form, ratios, self.num_samples,
                                                              list(size), [], _key(seed), int(first_sample), 0,
                                                              None if cached is None else cached.counts)
        self.class_counts = counts
        _PendingCheck(counts, self._check(ratios))
        return centers, size

    def __call__(self, img: Any, label: Optional[torch.Tensor] = None, image: Optional[torch.Tensor] = None,
                 indices=None, randomize: bool = True, lazy: Optional[bool] = None) -> list:
        cached = _class_lists_arg(indices, "indices") or self.counts
        label = self.label if label is None else label
        image = self.image if image is None else image
        if label is None:
            raise ValueError("label must not be None.")
        x, restore = _as_batch(img)
        if randomize or self.centers is None:
            self.centers, self._size = self.draw_centers(label, image, cached=cached)
        lab_shape = _as_batch(label)[0].shape[2:]
        if tuple(x.shape[2:]) != tuple(lab_shape):
            raise ValueError(f"img and label must have the same spatial size, got {tuple(x.shape[2:])} and "
                             f"{tuple(lab_shape)}")
        (crops,) = _extract([x], self.centers, self._size)
        return _finish(crops, restore, img, self.centers, self._size)


class RandCropByLabelClassesd(_CropSamplerd):
    """MONAI RandCropByLabelClassesd(keys, label_key, spatial_size, ratios, num_classes,
    num_samples, image_key, image_threshold, allow_smaller, warn): one draw of centres, the same
    crops for every key. ``indices_key`` names the :class:`CropCounts` that
    voxaug.crop.ClassesToIndicesd stored (skips the scan of the volume, the same centres).
    `as_batch` (voxaug extension): one dict of (N * num_samples, C, ...) batches, fused by Compose
    with the spatial steps after it."""

    def __init__(self, keys, label_key: str, spatial_size, ratios: Optional[Sequence[float]] = None,
                 num_classes: Optional[int] = None, num_samples: int = 1, image_key: Optional[str] = None,
                 image_threshold: float = 0.0, indices_key: Optional[str] = None, allow_smaller: bool = False,
                 allow_missing_keys: bool = False, warn: bool = True, max_samples_per_class: Optional[int] = None,
                 lazy: bool = False, seed: Optional[int] = None, as_batch: bool = False):
        super().__init__(seed)
        self.as_batch = bool(as_batch)
        self.keys, self.label_key, self.image_key = _keys(keys), label_key, image_key
        self.indices_key = indices_key
        self.allow_missing_keys = allow_missing_keys
        self.cropper = RandCropByLabelClasses(spatial_size, ratios, None, num_classes, num_samples, None,
                                              image_threshold, None, allow_smaller, warn, max_samples_per_class, lazy)

    def _draw(self, d: dict) -> tuple[torch.Tensor, tuple[int, int, int]]:
        image, cached = _cached_in(d, [self.indices_key], "indices_key", "ClassesToIndicesd", self.image_key)
        centers, size = self.cropper.draw_centers(d[self.label_key], image, seed=self._next_seed(), cached=cached)
        self.cropper.centers, self.cropper._size = centers, size
        return centers, size


# ---------------- RandWeightedCrop ----------------
def _weighted_region(win: Sequence[int], img: Sequence[int]) -> list[int]:
    """MONAI weighted_patch_samples' 'valid' centres: [w // 2, m - w + w // 2) where m > w, else
    the single centre m // 2."""
    lo, hi = [], []
    for w, m in zip(win, img):
        if m > w:
            lo.append(w // 2)
            hi.append(m - w + w // 2)
        else:
            lo.append(m // 2)
            hi.append(m // 2 + 1)
    return lo + hi


class RandWeightedCrop(_Randomizable):
    """MONAI RandWeightedCrop(spatial_size, num_samples, weight_map): centres drawn from the
    weight map's CDF (channel 0) over MONAI's valid region (weighted_patch_samples: centres in
    [w // 2, m - w + w // 2), or m // 2 where the patch does not fit); negative weights shift the
    map by its minimum; a zero or non-finite total draws uniformly. Where the patch is larger than
    the image the crop keeps the image's size (MONAI's SpatialCrop clipping). The weight map must
    have the image's spatial size (MONAI only warns)."""

    def __init__(self, spatial_size, num_samples: int = 1, weight_map: Optional[torch.Tensor] = None,
                 lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        if lazy:
            raise NotImplementedError("lazy=True is not supported; voxaug crops in one exact gather")
        self.spatial_size, self.num_samples, self.weight_map = spatial_size, _num_samples(num_samples), weight_map
        _fall_back_size(spatial_size, (1, 1, 1))  # validate now
        self.centers: Optional[torch.Tensor] = None
        self.stats: Optional[torch.Tensor] = None  # (N, 3): total, shift, minimum

    def draw_centers(self, weight_map: torch.Tensor, seed: Optional[int] = None,
                     first_sample: int = 0) -> tuple[torch.Tensor, tuple[int, int, int]]:
        w = _as_batch(weight_map)[0]
        img_size = tuple(w.shape[2:])
        win = _fall_back_size(self.spatial_size, img_size)
        size = tuple(min(a, m) for a, m in zip(win, img_size))
        seed = self._next_seed() if seed is None else int(seed)
        centers, self.stats = torch.ops.voxaug.weighted_crop_centers(w, True, self.num_samples,
                                                                     _weighted_region(win, img_size), _key(seed),
                                                                     int(first_sample), 0)
        return centers, size

    def __call__(self, img: Any, weight_map: Optional[torch.Tensor] = None, randomize: bool = True,
                 lazy: Optional[bool] = None) -> list:
        x, restore = _as_batch(img)
        if randomize or self.centers is None:
            weight_map = self.weight_map if weight_map is None else weight_map
            if weight_map is None:
                raise ValueError("weight map must be provided for weighted patch sampling.")
            w_shape = tuple(_as_batch(weight_map)[0].shape[2:])
            if w_shape != tuple(x.shape[2:]):
                raise ValueError(f"image and weight map spatial shape mismatch: {tuple(x.shape[2:])} vs {w_shape} "
                                 "(voxaug requires equal shapes; MONAI only warns)")
            self.centers, self._size = self.draw_centers(weight_map)
        (crops,) = _extract([x], self.centers, self._size)
        return _finish(crops, restore, img, self.centers, self._size)


class RandWeightedCropd(_CropSamplerd):
    """MONAI RandWeightedCropd(keys, w_key, spatial_size, num_samples): centres from data[w_key],
    the same crops for every key. `as_batch` (voxaug extension): one dict of (N * num_samples, C,
    ...) batches, fused by Compose with the spatial steps after it."""

    def __init__(self, keys, w_key: str, spatial_size, num_samples: int = 1, allow_missing_keys: bool = False,
                 lazy: bool = False, seed: Optional[int] = None, as_batch: bool = False):
        super().__init__(seed)
        self.as_batch = bool(as_batch)
        self.keys, self.w_key, self.allow_missing_keys = _keys(keys), w_key, allow_missing_keys
        self.cropper = RandWeightedCrop(spatial_size, num_samples, lazy=lazy)

    def _draw(self, d: dict) -> tuple[torch.Tensor, tuple[int, int, int]]:
        w = _as_batch(d[self.w_key])[0]
        for k in self.keys:
            if k in d and tuple(_as_batch(d[k])[0].shape[2:]) != tuple(w.shape[2:]):
                raise ValueError(f"key {k!r} and the weight map {self.w_key!r} must have the same spatial size")
        centers, size = self.cropper.draw_centers(d[self.w_key], seed=self._next_seed())
        self.cropper.centers, self.cropper._size = centers, size
        return centers, size


# ---------------- RandSpatialCrop / RandSpatialCropSamples ----------------
class RandSpatialCrop(_Randomizable):
    """MONAI RandSpatialCrop(roi_size, max_roi_size=None, random_center=True, random_size=False):
    the size is roi_size (non-positive entries: the image's), or with random_size drawn per axis
    from randint(roi_size, max_roi_size + 1) (host generator); an axis larger than the image is
    not cropped. random_center: the patch's corner uniform in [0, image - size] (MONAI's
    get_random_patch), drawn on the device per sample; else the centred crop
    (CenterSpatialCrop).

    In a Compose, the crop followed by spatial steps is one gather from the full volume
    (`draw_patches`, as the crop samplers with ``as_batch``): its result is already one batch
    (one crop per sample), so no flag is needed. random_size fuses too: the size is drawn once
    per call, shared by the samples of a batch (one output shape), as MONAI draws one per image.
    A MetaTensor is cut at once (its crop affine needs the centres on the host) and the steps
    after it fuse among themselves."""

    as_batch = True  # read by Compose: the result is one (N, C, *size) batch, fusable with what follows

    def __init__(self, roi_size, max_roi_size=None, random_center: bool = True, random_size: bool = False,
                 lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        if lazy:
            raise NotImplementedError("lazy=True is not supported; voxaug crops in one exact gather")
        self.roi_size, self.max_roi_size = roi_size, max_roi_size
        self.random_center, self.random_size = bool(random_center), bool(random_size)
        _fall_back_size(roi_size, (1, 1, 1), "roi_size")
        if max_roi_size is not None:
            _fall_back_size(max_roi_size, (1, 1, 1), "max_roi_size")
        self.centers: Optional[torch.Tensor] = None
        self._size: Optional[tuple[int, int, int]] = None

    def _draw_size(self, img_size: Sequence[int]) -> tuple[int, int, int]:
        size = _fall_back_size(self.roi_size, img_size, "roi_size")
        if self.random_size:
            max_size = tuple(img_size) if self.max_roi_size is None else \
                _fall_back_size(self.max_roi_size, img_size, "max_roi_size")
            if any(i > j for i, j in zip(size, max_size)):
                raise ValueError(f"min ROI size: {size} is larger than max ROI size: {max_size}.")
            size = tuple(int(torch.randint(lo, hi + 1, (1,), generator=self._generator).item())
                         for lo, hi in zip(size, max_size))
        return tuple(min(int(s), int(m)) for s, m in zip(size, img_size))  # get_valid_patch_size

    def _centers(self, x: torch.Tensor, size, count: int, seed: int, first_crop: int = 0) -> torch.Tensor:
        img_size = x.shape[2:]
        if not self.random_center:  # CenterSpatialCrop: the centre size // 2 (a one-voxel region)
            lo = [m // 2 for m in img_size]
            hi = [c + 1 for c in lo]
        else:
            lo = [s // 2 for s in size]
            hi = [l + m - s + 1 for l, m, s in zip(lo, img_size, size)]
        return torch.ops.voxaug.uniform_crop_centers(x, count, lo + hi, _key(seed), 0, first_crop)

    def randomize(self, img: torch.Tensor) -> None:
        x = _as_batch(img)[0]
        self._size = self._draw_size(x.shape[2:])
        self.centers = self._centers(x, self._size, 1, self._next_seed())

    def __call__(self, img: Any, randomize: bool = True, lazy: Optional[bool] = None) -> Any:
        x, restore = _as_batch(img)
        if randomize or self.centers is None:
            self.randomize(x)
        (crops,) = _extract([x], self.centers, self._size)
        return _finish(crops, restore, img, self.centers, self._size)[0]

    def draw_patches(self, img: Any) -> tuple[Any, dict]:
        """__call__ with the cut deferred, for Compose to gather the crop and the spatial steps
        after it from the full volume in one launch: the same draw (the same seeds, so the same
        boxes), a meta-device placeholder of the crop's shape and {id(placeholder): source} (see
        voxaug.spatial.compose_spatial). A MetaTensor is cut now: (the crop, {})."""
        x, restore = _as_batch(img)
        self.randomize(x)
        if _is_meta_tensor(img):
            (crops,) = _extract([x], self.centers, self._size)
            return _finish(crops, restore, img, self.centers, self._size)[0], {}
        d, patches = _patch_placeholders({None: img}, [None], False, self.centers, self._size, keep_form=True)
        return d[None], patches


class RandScaleCrop(RandSpatialCrop):
    """MONAI RandScaleCrop(roi_scale, max_roi_scale=None, random_center=True, random_size=False):
    RandSpatialCrop with roi_size = ceil(roi_scale * image size) and max_roi_size = ceil(max_roi_scale
    * image size) per axis, from each call's image (see RandSpatialCrop for the draws)."""

    def __init__(self, roi_scale, max_roi_scale=None, random_center: bool = True, random_size: bool = False,
                 lazy: bool = False, seed: Optional[int] = None):
        super().__init__(-1, None, random_center, random_size, lazy, seed)
        self.roi_scale, self.max_roi_scale = roi_scale, max_roi_scale
        _scaled_size(roi_scale, (1, 1, 1), "roi_scale")
        if max_roi_scale is not None:
            _scaled_size(max_roi_scale, (1, 1, 1), "max_roi_scale")

    def _draw_size(self, img_size: Sequence[int]) -> tuple[int, int, int]:
        self.roi_size = _scaled_size(self.roi_scale, img_size, "roi_scale")
        self.max_roi_size = None if self.max_roi_scale is None else \
            _scaled_size(self.max_roi_scale, img_size, "max_roi_scale")
        return super()._draw_size(img_size)


class RandSpatialCropd(_Randomizable):
    """MONAI RandSpatialCropd: one draw (from the first key's shape), the same crop for every key.
    In a Compose it fuses with the spatial steps after it as RandSpatialCrop does (`draw_patches`;
    keys holding MetaTensors are cut at once)."""

    as_batch = True  # read by Compose: the result is one dict of (N, C, *size) batches

    def __init__(self, keys, roi_size, max_roi_size=None, random_center: bool = True, random_size: bool = False,
                 allow_missing_keys: bool = False, lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        self.keys, self.allow_missing_keys = _keys(keys), allow_missing_keys
        self.cropper = RandSpatialCrop(roi_size, max_roi_size, random_center, random_size, lazy)

    def _draw(self, d: dict) -> Optional[tuple[torch.Tensor, tuple[int, int, int]]]:
        """The call's draw from the first present key ((N, 1, 3) centres and the size), or None
        when no key is present and allow_missing_keys."""
        first = next((k for k in self.keys if k in d), None)
        if first is None:
            if self.allow_missing_keys:
                return None
            raise KeyError(f"key {self.keys[0]!r} is not in the data and allow_missing_keys is False")
        self.cropper._generator = self._generator
        self.cropper.randomize(d[first])
        return self.cropper.centers, self.cropper._size

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        drawn = self._draw(d)
        if drawn is None:
            return d
        return _dict_crops(d, self.keys, self.allow_missing_keys, *drawn, 1)[0]

    def draw_patches(self, data: Mapping[Hashable, Any]) -> tuple[dict, dict]:
        """__call__ with the cut deferred (see RandSpatialCrop.draw_patches): the same draw, each
        key a placeholder of its crop's shape, and the placeholders' sources; with a MetaTensor
        among the keys every key is cut now (MONAI's crop affines) and the sources are {}."""
        d = dict(data)
        drawn = self._draw(d)
        if drawn is None:
            return d, {}
        if any(_is_meta_tensor(d[k]) for k in self.keys if k in d):
            return _dict_crops(d, self.keys, self.allow_missing_keys, *drawn, 1)[0], {}
        return _patch_placeholders(d, self.keys, self.allow_missing_keys, *drawn, keep_form=True)

class RandScaleCropd(RandSpatialCropd):
    """MONAI RandScaleCropd: one draw (from the first key's shape), the same crop for every key."""

    def __init__(self, keys, roi_scale, max_roi_scale=None, random_center: bool = True, random_size: bool = False,
                 allow_missing_keys: bool = False, lazy: bool = False, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.keys, self.allow_missing_keys = _keys(keys), allow_missing_keys
        self.cropper = RandScaleCrop(roi_scale, max_roi_scale, random_center, random_size, lazy)



class RandSpatialCropSamples(_Randomizable):
    """MONAI RandSpatialCropSamples(roi_size, num_samples, max_roi_size, random_center,
    random_size): `num_samples` RandSpatialCrop draws. With a fixed size all crops come from one
    device draw and one extraction launch; with random_size each crop has its own size."""

    def __init__(self, roi_size, num_samples: int, max_roi_size=None, random_center: bool = True,
                 random_size: bool = False, lazy: bool = False, seed: Optional[int] = None):
        super().__init__(seed)
        if isinstance(num_samples, bool) or int(num_samples) != num_samples or num_samples < 1:
            raise ValueError(f"num_samples must be positive, got {num_samples}.")
        self.num_samples = int(num_samples)
        self.cropper = RandSpatialCrop(roi_size, max_roi_size, random_center, random_size, lazy)
        self.plan: list = []  # [(centres (N, k, 3), size)] of the last call

    def draw(self, x: torch.Tensor) -> list:
        self.cropper._generator = self._generator
        seed = self._next_seed()
        if not self.cropper.random_size:
            size = self.cropper._draw_size(x.shape[2:])
            self.plan = [(self.cropper._centers(x, size, self.num_samples, seed), size)]
        else:
            self.plan = []
            for k in range(self.num_samples):
                size = self.cropper._draw_size(x.shape[2:])
                self.plan.append((self.cropper._centers(x, size, 1, seed, first_crop=k), size))
        return self.plan

    def __call__(self, img: Any, lazy: Optional[bool] = None) -> list:
        x, restore = _as_batch(img)
        out = []
        for centers, size in self.draw(x):
            (crops,) = _extract([x], centers, size)
            out.extend(_finish(crops, restore, img, centers, size))
        return out


class RandSpatialCropSamplesd(_CropSamplerd):
    """MONAI RandSpatialCropSamplesd: the same `num_samples` crops for every key (drawn from the
    first present key's shape). `as_batch` (voxaug extension, needs one size for all crops:
    random_size=False): one dict of (N * num_samples, C, ...) batches, fused by Compose with the
    spatial steps after it; with every key missing (allow_missing_keys) the data unchanged."""

    def __init__(self, keys, roi_size, num_samples: int, max_roi_size=None, random_center: bool = True,
                 random_size: bool = False, allow_missing_keys: bool = False, lazy: bool = False,
                 seed: Optional[int] = None, as_batch: bool = False):
        super().__init__(seed)
        if as_batch and random_size:
            raise ValueError("as_batch=True needs one patch size for all crops: random_size must be False")
        self.as_batch = bool(as_batch)
        self.keys, self.allow_missing_keys = _keys(keys), allow_missing_keys
        self.cropper = RandSpatialCropSamples(roi_size, num_samples, max_roi_size, random_center, random_size, lazy)

    def _draw(self, d: dict) -> Optional[tuple[torch.Tensor, tuple[int, int, int]]]:
        first = next((k for k in self.keys if k in d), None)
        if first is None:
            if self.allow_missing_keys:
                return None
            raise KeyError(f"key {self.keys[0]!r} is not in the data and allow_missing_keys is False")
        if self.cropper.cropper.random_size:
            raise ValueError("as_batch=True needs one patch size for all crops: random_size must be False")
        self.cropper._generator = self._generator
        (plan,) = self.cropper.draw(_as_batch(d[first])[0])  # a fixed size: one (centres, size)
        return plan

    def __call__(self, data: Mapping[Hashable, Any]) -> Union[list[dict], dict]:
        if self.as_batch:
            return super().__call__(data)
        d = dict(data)
        first = next((k for k in self.keys if k in d), None)
        if first is None:
            if self.allow_missing_keys:
                return [dict(d) for _ in range(self.cropper.num_samples)]
            raise KeyError(f"key {self.keys[0]!r} is not in the data and allow_missing_keys is False")
        self.cropper._generator = self._generator
        out = []
        for centers, size in self.cropper.draw(_as_batch(d[first])[0]):
            out.extend(_dict_crops(d, self.keys, self.allow_missing_keys, centers, size, centers.shape[1]))
        return out


# ---------------- TorchIO samplers ----------------
def _subject_tensors(subject: Mapping[str, Any]) -> tuple[dict, bool]:
    """A sampler's subject as a dict of 5-D tensors, and whether its images came as (C, D, H, W):
    a TorchIO Image (a tio.Subject's entry) is read as its tensor; when no entry is 5-D, the
    (C, D, H, W) tensors are the images (one sample each; their patches go back 4-D, as
    TorchIO's)."""
    if not isinstance(subject, Mapping):
        raise TypeError(f"subject must be a dict of tensors (or a tio.Subject), got {type(subject).__name__}")
    d = {}
    for k, v in subject.items():
        if not isinstance(v, torch.Tensor) and isinstance(getattr(v, "data", None), torch.Tensor):
            v = v.data
        d[k] = v
    if not any(isinstance(v, torch.Tensor) and v.dim() == 5 for v in d.values()):
        four = [k for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() == 4]
        for k in four:
            d[k] = d[k].unsqueeze(0)
        return d, bool(four)
    return d, False


def _patch_size(patch_size: Any) -> tuple[int, int, int]:
    """TorchIO's PatchSampler check: an int or 3 positive ints."""
    vals = list(patch_size) if isinstance(patch_size, (list, tuple, np.ndarray)) else [patch_size]
    vals = vals * 3 if len(vals) == 1 else vals
    if len(vals) != 3:
        raise ValueError(f"patch_size must be an int or 3 ints, got {patch_size!r}")
    for n in vals:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"Patch dimensions must be positive integers, not {np.array(vals)}")
    return tuple(int(v) for v in vals)


class _Sampler(_Randomizable):
    """TorchIO PatchSampler over a subject-like dict: every 5-D (N, C, D, H, W) tensor entry is
    cropped (all of one spatial shape), other entries are passed through; each yielded patch
    dict has "location" (N, 6) int64 = (i0, j0, k0, i1, j1, k1) as TorchIO's LOCATION, per
    sample. A subject without 5-D entries is TorchIO's: its (C, D, H, W) tensors (or a
    tio.Subject's Images) are the images, and its patches come back as TorchIO's, (C, *patch)
    with location (6,). Centres are drawn on the device, a block at a time; each block of
    patches is cut by one launch per tensor."""

    def __init__(self, patch_size, seed: Optional[int] = None):
        super().__init__(seed)
        self.patch_size = _patch_size(patch_size)

    def _region(self, shape) -> list[int]:
        lo = [p // 2 for p in self.patch_size]
        hi = [s - (p - 1) // 2 for s, p in zip(shape, self.patch_size)]
        return lo + hi

    def _draw(self, subject: dict, shape, count: int, seed: int, first_crop: int) -> torch.Tensor:
        raise NotImplementedError

    def _prepare(self, subject: dict, shape) -> None:
        pass

    def _checked(self, subject: Mapping[str, Any], num_patches: Optional[int]) -> tuple[dict, dict, tuple, bool]:
        d, four_d = _subject_tensors(subject)
        tensors = {k: v for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() == 5}
        if not tensors:
            raise ValueError("the subject holds no (C, D, H, W) or (N, C, D, H, W) tensor")
        shapes = {(tuple(v.shape[0:1]), tuple(v.shape[2:])) for v in tensors.values()}
        if len(shapes) != 1:
            raise ValueError(f"all 5-D tensors of the subject must share N and the spatial shape, got "
                             f"{ {k: tuple(v.shape) for k, v in tensors.items()} }")
        shape = next(iter(shapes))[1]
        if any(p > s for p, s in zip(self.patch_size, shape)):
            raise RuntimeError(f"Patch size {self.patch_size} cannot be larger than image size {shape}")
        if num_patches is not None and (isinstance(num_patches, bool) or int(num_patches) != num_patches
                                        or num_patches < 0):
            raise ValueError(f"num_patches must be None or an int >= 0, got {num_patches!r}")
        self._prepare(d, shape)
        return d, tensors, shape, four_d

    def __call__(self, subject: Mapping[str, Any], num_patches: Optional[int] = None) -> Iterator[dict]:
        d, tensors, shape, four_d = self._checked(subject, num_patches)
        patches = self._generate(d, tensors, shape, num_patches)
        if not four_d:
            return patches
        # TorchIO's form for a subject of (C, D, H, W) images: (C, *patch) patches, location (6,)
        return ({k: (v[0] if k in tensors or k == "location" else v) for k, v in p.items()} for p in patches)

    def _blocks(self, d: dict, shape, num_patches: Optional[int]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Blocks of centres (N, count, 3) and TorchIO locations (N, count, 6), drawn on the device
        (one seed per call: the same draws whether the patches are cut now or later)."""
        seed = self._next_seed()
        done = 0
        while num_patches is None or done < num_patches:
            count = _SAMPLER_BLOCK if num_patches is None else min(_SAMPLER_BLOCK, num_patches - done)
            centers = self._draw(d, shape, count, seed, done)
            # TorchIO's location (ini, ini + patch), ini = centre - patch // 2; scalar arithmetic only
            # (no host tensor copied to the device)
            ini = [centers[..., a] - p // 2 for a, p in enumerate(self.patch_size)]
            yield centers, torch.stack(ini + [i + p for i, p in zip(ini, self.patch_size)], dim=2)
            done += count

    def _generate(self, d, tensors, shape, num_patches) -> Iterator[dict]:
        for centers, loc in self._blocks(d, shape, num_patches):
            crops = dict(zip(tensors, _extract(list(tensors.values()), centers, self.patch_size)))
            for i in range(centers.shape[1]):
                patch = dict(d)
                for k in tensors:
                    patch[k] = crops[k][i]
                patch["location"] = loc[:, i]
                yield patch

    def locations(self, subject: Mapping[str, Any], num_patches: int) -> list[torch.Tensor]:
        """The locations ((N, 6) int64 each) of the next num_patches patches of `subject`, drawn
        exactly as ``self(subject, num_patches)`` draws them, without cutting the patches (a
        queue cuts them later, a batch at a time, with gather_patches)."""
        d, _, shape, _ = self._checked(subject, num_patches)
        return [loc[:, i] for _, loc in self._blocks(d, shape, num_patches) for i in range(loc.shape[1])]


class UniformSampler(_Sampler):
    """TorchIO UniformSampler(patch_size): the patch's first voxel uniform in [0, size - patch]
    per axis."""

    def _draw(self, subject, shape, count, seed, first_crop):
        like = next(v for v in subject.values() if isinstance(v, torch.Tensor) and v.dim() == 5)
        return torch.ops.voxaug.uniform_crop_centers(like, count, self._region(shape), _key(seed), 0, first_crop)


class WeightedSampler(_Sampler):
    """TorchIO WeightedSampler(patch_size, probability_map): the centre (patch start + patch // 2)
    drawn with probability proportional to channel 0 of subject[probability_map] inside TorchIO's
    valid region [patch // 2, size - (patch - 1) // 2) (the border cleared as
    clear_probability_borders). TorchIO's errors (negative values: ValueError; an empty map:
    RuntimeError) need the map's total and minimum on the host: `check=True` (default) reads
    those 3 numbers per sample once per subject (a host sync on CUDA); `check=False` skips it (no
    sync; an empty map then draws uniformly in the valid region)."""

    def __init__(self, patch_size, probability_map: Optional[str], check: bool = True, seed: Optional[int] = None):
        super().__init__(patch_size, seed)
        self.probability_map_name, self.check = probability_map, bool(check)

    def _map(self, subject) -> torch.Tensor:
        name = self.probability_map_name
        if name not in subject:
            raise KeyError(f'Image "{name}" not found in subject: {sorted(map(str, subject))}')
        return subject[name]

    def _draw(self, subject, shape, count, seed, first_crop):
        centers, stats = torch.ops.voxaug.weighted_crop_centers(self._map(subject), False, count, self._region(shape),
                                                                _key(seed), 0, first_crop)
        if self.check and first_crop == 0:
            st = stats.cpu()
            if bool((st[:, 2] < 0).any()):
                raise ValueError(f'Negative values found in probability map "{self.probability_map_name}"')
            if bool((st[:, 0] == 0).any()):
                raise RuntimeError("Empty probability map found: voxels with positive probability might be near the "
                                   "image border; try padding by half the patch size "
                                   f"{tuple(p // 2 for p in self.patch_size)}")
        return centers


class LabelSampler(_Sampler):
    """TorchIO LabelSampler(patch_size, label_name, label_probabilities): centres inside TorchIO's
    valid region on labelled voxels. label_probabilities None: channel 0 > 0, uniformly. A dict
    {label: probability}: a label drawn with probability proportional to its value among the
    labels present in the valid region, then a voxel of it uniformly (TorchIO's per-label
    probability / count map); for a multi-channel label the keys are channels (a channel's
    voxels: value != 0; TorchIO weights by the value, identical for binary channels).
    label_name None: the entry "label". `check=True` raises TorchIO's RuntimeError when no
    labelled voxel with a positive probability is in the valid region (reads the per-label
    counts once per subject: a host sync on CUDA); check=False draws a present label then."""

    def __init__(self, patch_size, label_name: Optional[str] = None,
                 label_probabilities: Optional[dict] = None, check: bool = True, seed: Optional[int] = None):
        super().__init__(patch_size, seed)
        self.label_name, self.check = label_name, bool(check)
        self.label_probabilities_dict = label_probabilities
        if label_probabilities is not None:
            if not isinstance(label_probabilities, Mapping) or not label_probabilities:
                raise ValueError(f"label_probabilities must be a non-empty dict {{label: probability}}, "
                                 f"got {label_probabilities!r}")
            for k, v in label_probabilities.items():
                if isinstance(k, bool) or int(k) != k or k < 0:
                    raise ValueError(f"label_probabilities keys must be labels >= 0, got {k!r}")
                if not float(v) >= 0:
                    raise ValueError(f"label_probabilities values must be >= 0, got {v!r}")
            if sum(float(v) for v in label_probabilities.values()) <= 0:
                raise ValueError("label_probabilities must not all be 0")

    def _label(self, subject) -> torch.Tensor:
        name = "label" if self.label_name is None else self.label_name
        if name not in subject:
            raise KeyError(f'Image "{name}" not found in subject: {sorted(map(str, subject))}')
        return subject[name]

    def _draw(self, subject, shape, count, seed, first_crop):
        lab = self._label(subject)
        probs = self.label_probabilities_dict
        if probs is None:
            form, ratios, lab = FOREGROUND, [1.0, 0.0], lab[:, :1]
        elif lab.shape[1] > 1:
            form, ratios = ONE_HOT, [0.0] * lab.shape[1]
            for k, v in probs.items():
                if int(k) >= lab.shape[1]:
                    raise ValueError(f"label_probabilities key {k} is not a channel of the "
                                     f"{lab.shape[1]}-channel label")
                ratios[int(k)] = float(v)
        else:
            form, ratios = ARGMAX, [0.0] * (max(int(k) for k in probs) + 1)
            for k, v in probs.items():
                ratios[int(k)] = float(v)
        centers, counts = torch.ops.voxaug.class_crop_centers(lab, None, 0.0, form, ratios, count, None,
                                                              self._region(shape), _key(seed), 0, first_crop)
        if self.check and first_crop == 0:
            c = counts.cpu()
            present = (c > 0) & (torch.tensor(ratios, dtype=torch.float64) > 0)
            if not bool(present.any(dim=1).all()):
                raise RuntimeError("Empty probability map found: no labelled voxel with a positive probability in "
                                   "the valid region; voxels might be near the image border")
        return centers


# ---------------- PatchQueue ----------------
class PatchQueue:
    """A patch queue on the device with TorchIO Queue's semantics and no worker processes.

    `subjects`: a sequence of subject dicts whose (C, D, H, W) or (1, C, D, H, W) tensors are
    cached once on `device` (other entries are passed through; an int entry "num_samples"
    overrides `samples_per_volume` for that subject, TorchIO's NUM_SAMPLES). The queue fills
    exactly as TorchIO's Queue._fill: subjects in order (a random permutation per pass with
    shuffle_subjects), min(num_samples, free slots) patches each, the rest of a subject that did
    not fit first at the next fill, until `max_length` patches are held or every subject of the
    pass was sampled; then the patches are shuffled (shuffle_patches). len(queue) is TorchIO's
    iterations_per_epoch (the sum of num_samples); queue[i] pops one patch (TorchIO's
    __getitem__). Iterating yields one epoch in batches of `batch_size` patches: tensors
    concatenated along dim 0 ((B, C, *patch)), "location" (B, 6), other entries as lists; the
    optional `transform` (a callable on the batch dict, e.g. voxaug d-form transforms) runs on
    each batch. A subject's patch locations are drawn by `sampler` on the device when the queue
    fills (TorchIO's order of draws); the queue holds only those locations, and each batch is
    cut from the cached volumes when it is taken, one gather_patches call per tensor name for
    the whole batch, whatever subjects it mixes (so a queue of max_length patches holds no patch
    tensors; a cached volume changed in place between fill and take shows in later batches).

    Host syncs: with `device` given, the subjects' tensors are copied there once, at
    construction, with a plain (blocking) ``.to(device)``: a one-time sync, like caching the
    dataset. Filling, shuffling (host permutations) and batching then run without one; the
    sampler's own documented syncs (WeightedSampler / LabelSampler ``check=True``) remain."""

    def __init__(self, subjects: Sequence[Mapping[str, Any]], max_length: int, samples_per_volume: int,
                 sampler: "_Sampler", batch_size: int = 1, shuffle_subjects: bool = True, shuffle_patches: bool = True,
                 transform=None, device=None, drop_last: bool = False, seed: Optional[int] = None):
        for name, v in (("max_length", max_length), ("samples_per_volume", samples_per_volume),
                        ("batch_size", batch_size)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(sampler, _Sampler):
            raise TypeError(f"sampler must be a voxaug UniformSampler, WeightedSampler or LabelSampler, got "
                            f"{type(sampler).__name__}")
        if transform is not None and not callable(transform):
            raise TypeError("transform must be callable on the batch dict")
        self.subjects = [self._cache(s, device, i) for i, s in enumerate(subjects)]
        if not self.subjects:
            raise ValueError("subjects must not be empty")
        self.max_length, self.samples_per_volume = int(max_length), int(samples_per_volume)
        self.sampler, self.batch_size, self.transform = sampler, int(batch_size), transform
        self.shuffle_subjects, self.shuffle_patches, self.drop_last = bool(shuffle_subjects), bool(shuffle_patches), \
            bool(drop_last)
        self._generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        self.patches_list: list[dict] = []
        self._incomplete: Optional[dict] = None
        self._num_incomplete = 0
        self._order: list[int] = []
        self._pos = 0
        self._num_sampled = 0
        self._new_pass()

    @staticmethod
    def _cache(subject: Mapping[str, Any], device, i: int) -> dict:
        if not isinstance(subject, Mapping):
            raise TypeError(f"subject {i} must be a dict, got {type(subject).__name__}")
        out = {}
        for k, v in subject.items():
            if not isinstance(v, torch.Tensor) and isinstance(getattr(v, "data", None), torch.Tensor):
                v = v.data  # a TorchIO Image of a tio.Subject: its tensor
            if isinstance(v, torch.Tensor) and v.dim() in (4, 5):
                if v.dim() == 5 and v.shape[0] != 1:
                    raise ValueError(f"subject {i}: {k!r} must be (C, D, H, W) or (1, C, D, H, W), "
                                     f"got {tuple(v.shape)}")
                v = v if v.dim() == 5 else v.unsqueeze(0)
                v = v.to(device) if device is not None else v
            out[k] = v
        n = out.get("num_samples", None)
        if n is not None and (isinstance(n, bool) or int(n) != n or n < 1):
            raise ValueError(f"subject {i}: num_samples must be a positive int, got {n!r}")
        return out

    def _num_samples(self, subject: dict) -> int:
        return int(subject.get("num_samples", self.samples_per_volume))

    def __len__(self) -> int:
        return sum(self._num_samples(s) for s in self.subjects)

    @property
    def num_patches(self) -> int:
        return len(self.patches_list)

    def __repr__(self) -> str:
        return (f"PatchQueue(max_length={self.max_length}, num_subjects={len(self.subjects)}, "
                f"num_patches={self.num_patches}, samples_per_volume={self.samples_per_volume}, "
                f"iterations_per_epoch={len(self)})")

    def _new_pass(self) -> None:
        n = len(self.subjects)
        self._order = torch.randperm(n, generator=self._generator).tolist() if self.shuffle_subjects else list(range(n))
        self._pos = 0
        self._num_sampled = 0

    def _next_subject(self) -> int:
        if self._pos >= len(self._order):
            self._new_pass()
        i = self._order[self._pos]
        self._pos += 1
        return i

    def _sample(self, index: int, n: int) -> list[tuple[int, torch.Tensor]]:
        if n <= 0:
            return []
        return [(index, loc) for loc in self.sampler.locations(self.subjects[index], n)]

    def _fill(self) -> None:
        if self._incomplete is not None:
            self.patches_list.extend(self._sample(self._incomplete, self._num_incomplete))
            self._incomplete = None
        while True:
            index = self._next_subject()
            n = self._num_samples(self.subjects[index])
            free = max(0, self.max_length - len(self.patches_list))
            if free < n:
                self._incomplete, self._num_incomplete = index, n - free
            self.patches_list.extend(self._sample(index, min(n, free)))
            self._num_sampled += 1
            if len(self.patches_list) >= self.max_length or self._num_sampled >= len(self.subjects):
                break
        if self.shuffle_patches:
            perm = torch.randperm(len(self.patches_list), generator=self._generator).tolist()
            self.patches_list = [self.patches_list[i] for i in perm]
        self.patches_list.reverse()  # pop() from the end gives the fill order

    def _pop(self) -> tuple[int, torch.Tensor]:
        if not self.patches_list:
            self._fill()
        return self.patches_list.pop()

    def _cut(self, entries: list[tuple[int, torch.Tensor]]) -> tuple[dict, list[int]]:
        """The patches of `entries` ((subject, location) pairs) as one batch: per 5-D tensor name
        one gather_patches call over the distinct subjects; other entries of the first subject's
        dict as lists. Returns the batch and the subject of each patch."""
        index = [i for i, _ in entries]
        used = list(dict.fromkeys(index))
        slot = {s: j for j, s in enumerate(used)}
        location = torch.cat([loc for _, loc in entries]) if len(entries) > 1 else entries[0][1]
        starts = location[:, :3]
        batch = {}
        for k, v in self.subjects[index[0]].items():
            if isinstance(v, torch.Tensor) and v.dim() == 5:
                batch[k] = gather_patches([self.subjects[s][k] for s in used], [slot[s] for s in index], starts,
                                          self.sampler.patch_size)
            else:
                batch[k] = [self.subjects[s][k] for s in index]
        batch["location"] = location
        return batch, index

    def __getitem__(self, index: int) -> dict:
        batch, _ = self._cut([self._pop()])
        return {k: v[0] if isinstance(v, list) else v for k, v in batch.items()}

    def _collate(self, entries: list[tuple[int, torch.Tensor]]) -> dict:
        batch, _ = self._cut(entries)
        return self.transform(batch) if self.transform is not None else batch

    def __iter__(self) -> Iterator[dict]:
        total, done = len(self), 0
        while done < total:
            b = min(self.batch_size, total - done)
            if self.drop_last and b < self.batch_size:
                break
            yield self._collate([self._pop() for _ in range(b)])
            done += b


# ---------------- TorchIO's patch-based inference: GridSampler, GridAggregator ----------------
_GRID_PAD_STATS = {"maximum": torch.amax, "minimum": torch.amin}


def _grid_overlap(patch_overlap: Any) -> tuple[int, int, int]:
    vals = list(patch_overlap) if isinstance(patch_overlap, (list, tuple, np.ndarray)) else [patch_overlap]
    vals = vals * 3 if len(vals) == 1 else vals
    if len(vals) != 3 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in vals):
        raise ValueError(f"patch_overlap must be an int or 3 ints >= 0, got {patch_overlap!r}")
    return tuple(int(v) for v in vals)


def _grid_starts(size: int, patch: int, overlap: int) -> list[int]:
    """TorchIO GridSampler._get_patches_locations along one axis: every patch - overlap voxels,
    and a last patch flush with the end."""
    starts = list(range(0, size + 1 - patch, patch - overlap))
    if starts[-1] != size - patch:
        starts.append(size - patch)
    return starts


class GridSampler:
    """TorchIO GridSampler(subject, patch_size, patch_overlap=(0, 0, 0), padding_mode=None) on the
    device: the grid of patches covering a volume, for dense inference with :class:`GridAggregator`.

    `subject`: a dict whose (C, D, H, W) or (1, C, D, H, W) tensors (all of one spatial shape, any
    device) are cut -- a tio.Subject too, its Images read as their tensors -- and other entries are
    passed through. Locations are TorchIO's: per axis a patch
    every patch - overlap voxels and one flush with the end, all combinations in sorted (raster)
    order, (i0, j0, k0, i1, j1, k1) each. patch_overlap must be even and smaller than the patch,
    the patch no larger than the volume (TorchIO's ValueErrors). padding_mode (TorchIO's Pad): None
    (no padding), a number (that constant), 'constant' (0), 'edge', 'reflect', 'symmetric',
    'wrap', 'minimum' / 'maximum' (the tensor's, read on the host: a sync on CUDA) pads overlap //
    2 on every side first (the aggregator crops it back).

    ``sampler[i]`` and ``sampler()`` give single patches as TorchIO's (tensors (1, C, *patch),
    "location" (6,) int64 on the host); ``sampler.batches(batch_size)`` yields batch dicts --
    tensors (B, C, *patch) cut by one :func:`gather_patches` per tensor, "location" (B, 6) int64
    on the host (what TorchIO's DataLoader collates), other entries as they are -- without a host
    synchronisation (the grid's starts are copied to the device once, at construction)."""

    def __init__(self, subject: Mapping[str, Any], patch_size, patch_overlap=(0, 0, 0),
                 padding_mode: Union[str, float, None] = None):
        if not isinstance(subject, Mapping):
            raise TypeError(f"subject must be a dict of tensors, got {type(subject).__name__}")
        self.patch_size = _patch_size(patch_size)
        self.patch_overlap = _grid_overlap(patch_overlap)
        self.padding_mode = padding_mode
        if padding_mode is not None and not isinstance(padding_mode, (int, float)) and padding_mode not in (
                "constant", "edge", "reflect", "symmetric", "wrap", "minimum", "maximum"):
            raise ValueError(f'Padding mode "{padding_mode}" not valid. Valid options are a number, "constant", '
                             '"edge", "reflect", "symmetric", "wrap", "minimum", "maximum" (TorchIO\'s others, '
                             '"empty", "linear_ramp", "mean", "median", are not supported)')
        d = {}
        for k, v in subject.items():
            if not isinstance(v, torch.Tensor) and isinstance(getattr(v, "data", None), torch.Tensor):
                v = v.data  # a TorchIO Image of a tio.Subject: its (C, W, H, D) tensor
            if isinstance(v, torch.Tensor) and v.dim() in (4, 5):
                if v.dim() == 5 and v.shape[0] != 1:
                    raise ValueError(f"{k!r} must be (C, D, H, W) or (1, C, D, H, W), got {tuple(v.shape)}")
                v = self._pad(v if v.dim() == 5 else v.unsqueeze(0))
            d[k] = v
        tensors = {k: v for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() == 5}
        if not tensors:
            raise ValueError("the subject holds no (C, D, H, W) tensor")
        shapes = {tuple(v.shape[2:]) for v in tensors.values()}
        if len(shapes) != 1:
            raise ValueError(f"all tensors of the subject must share the spatial shape, got "
                             f"{ {k: tuple(v.shape) for k, v in tensors.items()} }")
        self.subject, self._tensors = d, tensors
        self.spatial_shape = next(iter(shapes))
        size, patch, overlap = np.array(self.spatial_shape), np.array(self.patch_size), np.array(self.patch_overlap)
        if np.any(patch > size):
            raise ValueError(f"Patch size {tuple(patch)} cannot be larger than image size {tuple(size)}")
        if np.any(overlap >= patch):
            raise ValueError(f"Patch overlap {tuple(overlap)} must be smaller than patch size {tuple(patch)}")
        if np.any(overlap % 2):
            raise ValueError(f"Patch overlap must be a tuple of even integers, not {tuple(overlap)}")
        axes = [_grid_starts(s, p, o) for s, p, o in zip(self.spatial_shape, self.patch_size, self.patch_overlap)]
        ini = torch.cartesian_prod(*(torch.tensor(a, dtype=torch.int64) for a in axes)).reshape(-1, 3)
        self.locations = torch.cat([ini, ini + torch.tensor(self.patch_size)], 1)  # (L, 6), sorted
        device = next(iter(tensors.values())).device
        self._starts = ini.to(device)  # the one host-to-device copy

    def _pad(self, v: torch.Tensor) -> torch.Tensor:
        mode = self.padding_mode
        if mode is None or not any(self.patch_overlap):
            return v
        from .spatial import BorderPad

        border = [o // 2 for o in self.patch_overlap]
        value = 0.0
        if isinstance(mode, (int, float)) and not isinstance(mode, bool):
            mode, value = "constant", float(mode)
        elif mode in _GRID_PAD_STATS:
            mode, value = "constant", float(_GRID_PAD_STATS[self.padding_mode](v))
        kw = {"value": value} if mode == "constant" else {}
        return BorderPad(border, mode=mode, **kw)(v)

    def __len__(self) -> int:
        return self.locations.shape[0]

    def _cut(self, first: int, count: int) -> dict:
        out = dict(self.subject)
        starts = self._starts[first:first + count]
        for k, v in self._tensors.items():
            out[k] = gather_patches([v], [0] * count, starts, self.patch_size)
        return out

    def __getitem__(self, index: int) -> dict:
        i = range(len(self))[index]
        patch = self._cut(i, 1)
        patch["location"] = self.locations[i]
        return patch

    def __call__(self, subject=None, num_patches: Optional[int] = None) -> Iterator[dict]:
        if subject is not None:
            raise ValueError("voxaug's GridSampler samples the subject it was built with")
        if num_patches is not None:
            raise ValueError("GridSampler does not support limiting the number of patches")
        return (self[i] for i in range(len(self)))

    def batches(self, batch_size: int) -> Iterator[dict]:
        """The grid in batches of `batch_size` patches (the last one smaller)."""
        if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        for first in range(0, len(self), int(batch_size)):
            count = min(int(batch_size), len(self) - first)
            batch = self._cut(first, count)
            batch["location"] = self.locations[first:first + count]
            yield batch


class GridAggregator:
    """TorchIO GridAggregator(sampler, overlap_mode='crop', downsampling_factor=1) on the device:
    ``add_batch(batch_tensor, locations)`` places a batch of predictions (B, C, *patch) with one
    :func:`torch.ops.voxaug.aggregate_patches_` call on the batch's device (TorchIO moves every
    batch to the CPU and adds patch by patch in Python); ``get_output_tensor()`` returns the
    (C, D, H, W) result there.

    overlap_mode 'crop': each patch minus half the overlap on its sides inside the volume (all
    sides when the sampler padded) is copied, a later patch over an earlier one; dtype of the
    batch. 'average': the mean of the overlapping predictions; 'hann': weighted by TorchIO's Hann
    window (float32). Both add the patches in TorchIO's order with TorchIO's roundings, so a
    float32 result equals TorchIO's bit for bit. Choices where TorchIO differs: 'average' of
    float16 / bfloat16 / integer predictions accumulates in float32 (TorchIO: in the batch's
    dtype); with downsampling_factor > 1 the overlap, the padding border and the Hann window are
    taken in the downsampled grid (TorchIO crops the full-resolution half overlap, leaving
    holes, and its Hann window does not fit the patches).

    `locations` (B, 6) int64 as the sampler gives them (on the host); a CUDA tensor is read to
    the host (one sync per batch)."""

    def __init__(self, sampler: GridSampler, overlap_mode: str = "crop", downsampling_factor: int = 1):
        if not isinstance(sampler, GridSampler):
            raise TypeError(f"sampler must be a voxaug GridSampler, got {type(sampler).__name__}")
        if overlap_mode not in ("crop", "average", "hann"):
            raise ValueError(f'Overlap mode must be "crop", "average" or "hann" but  "{overlap_mode}" was passed')
        if isinstance(downsampling_factor, bool) or int(downsampling_factor) != downsampling_factor \
                or downsampling_factor < 1:
            raise ValueError(f"downsampling_factor must be a positive int, got {downsampling_factor!r}")
        self.overlap_mode, self._factor = overlap_mode, int(downsampling_factor)
        self.volume_padded = sampler.padding_mode is not None
        self.spatial_shape = tuple(s // self._factor for s in sampler.spatial_shape)
        self.patch_overlap = tuple(o // self._factor for o in sampler.patch_overlap)
        self._pad_border = [o // 2 // self._factor for o in sampler.patch_overlap] if self.volume_padded \
            else [0, 0, 0]
        self._out: Optional[torch.Tensor] = None
        self._count: Optional[torch.Tensor] = None
        self._window: Optional[torch.Tensor] = None

    @staticmethod
    def _hann(patch_size) -> torch.Tensor:
        """TorchIO's window: hann_window(size + 2, periodic=False)[1:-1] per axis, multiplied in
        float32 in TorchIO's order."""
        w = torch.as_tensor([1])
        for axis, size in enumerate(patch_size):
            shape = [1, 1, 1]
            shape[axis] = size
            w = w * torch.hann_window(size + 2, periodic=False)[1:-1].view(*shape)
        return w

    def add_batch(self, batch_tensor: torch.Tensor, locations) -> None:
        if not isinstance(batch_tensor, torch.Tensor) or batch_tensor.dim() != 5:
            raise ValueError(f"batch_tensor must be a (B, C, D, H, W) tensor, got "
                             f"{getattr(batch_tensor, 'shape', type(batch_tensor).__name__)}")
        loc = torch.as_tensor(locations).to("cpu", torch.int64) // self._factor
        if loc.dim() != 2 or loc.shape != (batch_tensor.shape[0], 6):
            raise ValueError(f"locations must be (B, 6) with B = {batch_tensor.shape[0]}, got {tuple(loc.shape)}")
        shapes = (loc[:, 3:] - loc[:, :3]).unique(dim=0)
        if shapes.shape[0] != 1:
            raise ValueError(f"the locations hold several patch sizes: {shapes.tolist()}")
        target = tuple(shapes[0].tolist())
        if tuple(batch_tensor.shape[-3:]) != target:
            raise RuntimeError(f"The shape of the input batch, {tuple(batch_tensor.shape[-3:])}, does not match the "
                               f"shape of the target location, which is {target}")
        x = batch_tensor.detach()
        if self._out is None:
            dtype = x.dtype
            if self.overlap_mode == "hann":
                dtype = torch.float32
            elif self.overlap_mode == "average" and dtype not in (torch.float32, torch.float64):
                dtype = torch.float32
            shape = (1, x.shape[1]) + self.spatial_shape
            self._out = torch.zeros(shape, dtype=dtype, device=x.device)
            if self.overlap_mode != "crop":
                self._count = torch.zeros((1, 1) + self.spatial_shape, dtype=dtype, device=x.device)
            if self.overlap_mode == "hann":
                self._window = self._hann(target).to(x.device)
        elif x.shape[1] != self._out.shape[1] or x.device != self._out.device:
            raise ValueError(f"batch_tensor must have the first batch's {self._out.shape[1]} channels on "
                             f"{self._out.device}, got {tuple(x.shape)} on {x.device}")
        starts = loc[:, :3].flatten().tolist()
        if self.overlap_mode == "crop":
            half = torch.tensor([o // 2 for o in self.patch_overlap], dtype=torch.int64)
            lo, hi = half.expand(loc.shape[0], 3).clone(), half.expand(loc.shape[0], 3).clone()
            if not self.volume_padded:
                lo *= loc[:, :3] > 0
                hi *= loc[:, 3:] != torch.tensor(self.spatial_shape)
            boxes = torch.cat([lo, torch.tensor(target) - hi], 1).flatten().tolist()
            out = self._out
            x = x if x.dtype == out.dtype else x.to(out.dtype)
            torch.ops.voxaug.aggregate_patches_(out, None, x, starts, boxes, None, False)
        else:
            torch.ops.voxaug.aggregate_patches_(self._out, self._count, x, starts, None, self._window, True)

    def get_output_tensor(self) -> torch.Tensor:
        if self._out is None:
            raise RuntimeError("no batch was added")
        out = self._out
        if out.dtype == torch.int64:
            warnings.warn("Medical image frameworks such as ITK do not support int64. Casting to int32...",
                          RuntimeWarning, stacklevel=2)
            out = out.to(torch.int32)
        if self.overlap_mode != "crop":
            out = out / self._count
        b = self._pad_border
        d, h, w = self.spatial_shape
        return out[0, :, b[0]:d - b[0], b[1]:h - b[1], b[2]:w - b[2]]
