"""Post-processing of label maps on the data's device: MONAI KeepLargestConnectedComponent(d),
FillHoles(d), RemoveSmallObjects(d) on ``torch.ops.voxaug.connected_components``,
DistanceTransformEDT(d) on ``torch.ops.voxaug.distance_transform_edt`` (include/voxaug/label.h),
and MONAI's validation post-processing (Activations, AsDiscrete, LabelFilter, LabelToContour,
ConvertToMultiChannelBasedOnBratsClasses and their dict forms) in torch, batched, without a sync.

MONAI labels the components with skimage on the CPU (cuCIM on the GPU when installed), one
image at a time, and FillHoles runs scipy's iterated binary dilation per label. voxaug labels
every (sample, channel) volume of a batch in one call on the data's device (union-find; CUDA:
atomicMin unions), then ``torch.ops.voxaug.largest_components`` counts the components' sizes and
picks the largest (CPU: three passes in the core -- roots, sizes by runs of equal labels, the
mask; CUDA: a scatter-add and arg-maxima, a top-k beyond eight), all without reading anything
back to the host. Only ``applied_labels=None`` reads the label set back (MONAI's
get_unique_labels): pass the labels to stay asynchronous.

Components are canonical: label = 1 + the C-order index of the component's first voxel. Among
components of equal size the one that starts first is kept (MONAI's argsort leaves such ties to
numpy's sort).
"""
from __future__ import annotations

import warnings
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .transforms import _as_batch, _host_to, _is_meta_tensor, _present_keys

__all__ = ["connected_components", "largest_components_mask", "KeepLargestConnectedComponent",
           "KeepLargestConnectedComponentd", "FillHoles", "FillHolesd", "RemoveSmallObjects", "RemoveSmallObjectsd",
           "DistanceTransformEDT", "DistanceTransformEDTd", "Activations", "Activationsd", "AsDiscrete",
           "AsDiscreted", "LabelFilter", "LabelFilterd", "LabelToContour", "LabelToContourd",
           "ConvertToMultiChannelBasedOnBratsClasses", "ConvertToMultiChannelBasedOnBratsClassesd"]


def _connectivity(connectivity: Optional[int]) -> int:
    c = 3 if connectivity is None else int(connectivity)
    if c not in (1, 2, 3):
        raise ValueError(f"connectivity must be 1, 2, 3 (orthogonal hops) or None (3), got {connectivity!r}")
    return c


def connected_components(mask: torch.Tensor, connectivity: Optional[int] = None) -> torch.Tensor:
    """Canonical component labels (int32, the mask's shape) of a (N, C, D, H, W) or (C, D, H, W) mask."""
    x, restore = _as_batch(mask)
    return restore(ops.connected_components(x, _connectivity(connectivity)))


def largest_components_mask(mask: torch.Tensor, connectivity: Optional[int] = None,
                            num_components: int = 1) -> torch.Tensor:
    """Bool (N, C, D, H, W): the voxels of the `num_components` largest components of each (n, c)
    volume of `mask` (MONAI's get_largest_connected_component_mask, batched, on the device)."""
    if int(num_components) < 1:
        raise ValueError(f"num_components must be >= 1, got {num_components}")
    x, _ = _as_batch(mask)
    return ops.largest_components(ops.connected_components(x, _connectivity(connectivity)), int(num_components))


def _zero_where(x: torch.Tensor, drop: torch.Tensor) -> torch.Tensor:
    """A new tensor: x with zeros where the bool `drop` (broadcast) is set. Integer and bool
    data multiply by the kept mask (one vectorised pass; torch's CPU masked_fill of a bool mask
    took ~6x longer); floating data use masked_fill (a product would keep NaN and give -0.0)."""
    if x.is_floating_point() or x.is_complex():
        return x.masked_fill(drop, 0)
    return x * ~drop


def _applied_labels(x: torch.Tensor, applied_labels: Optional[Sequence[int]], is_onehot: bool) -> list[int]:
    """MONAI get_unique_labels without the background (0), for the whole batch: reads back."""
    if applied_labels is not None:
        return [int(v) for v in applied_labels]
    if is_onehot:
        present = (x != 0).flatten(2).any(-1).any(0)  # (C,)
        return [i for i in torch.nonzero(present).flatten().tolist() if i != 0]
    return [int(v) for v in torch.unique(x).tolist() if v != 0]


class KeepLargestConnectedComponent:
    """MONAI KeepLargestConnectedComponent(applied_labels=None, is_onehot=None, independent=True,
    connectivity=None, num_components=1): voxels of the applied labels outside their largest
    `num_components` components become 0 -- each label on its own (independent) or their union.
    is_onehot None: more than one channel means one-hot (channel i is label i). Every sample of a
    batch on its own; one connected-components call for all the labels (their masks as channels).
    The input's dtype is kept."""

    def __init__(self, applied_labels: Union[Sequence[int], int, None] = None, is_onehot: Optional[bool] = None,
                 independent: bool = True, connectivity: Optional[int] = None, num_components: int = 1):
        if applied_labels is not None and not isinstance(applied_labels, (list, tuple)):
            applied_labels = (applied_labels,)
        self.applied_labels = None if applied_labels is None else tuple(int(v) for v in applied_labels)
        self.is_onehot, self.independent = is_onehot, bool(independent)
        self.connectivity = _connectivity(connectivity)
        if int(num_components) < 1:
            raise ValueError(f"num_components must be >= 1, got {num_components}")
        self.num_components = int(num_components)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        onehot = x.shape[1] > 1 if self.is_onehot is None else bool(self.is_onehot)
        if not onehot and x.shape[1] != 1:
            raise ValueError(f"If input not one-hotted, should only be 1 channel, got {x.shape[1]}.")
        labels = _applied_labels(x, self.applied_labels, onehot)
        if onehot:
            for i in labels:
                if not 0 <= i < x.shape[1]:
                    raise ValueError(f"applied_labels: {i} is not a channel of the one-hot image ({x.shape[1]})")
        if not labels:
            return restore(x.clone())
        # One-hot channels by an index tensor sent without a blocking copy (no host sync).
        idx = _host_to(torch.tensor(labels, dtype=torch.int64), x.device) if onehot else None
        if self.independent:
            # Every label's mask as one channel: one labelling call for all of them.
            if onehot:
                fg = x.index_select(1, idx) > 0
            elif len(labels) == 1:
                fg = x == labels[0]
            else:
                fg = torch.cat([x == i for i in labels], 1)
            drop = fg & ~largest_components_mask(fg, self.connectivity, self.num_components)
            if onehot:
                out = x.clone()
                out.index_copy_(1, idx, out.index_select(1, idx).masked_fill_(drop, 0))
                return restore(out)
            return restore(_zero_where(x, drop if len(labels) == 1 else drop.any(1, keepdim=True)))
        if onehot:
            fg = (x.index_select(1, idx) == 1).any(1, keepdim=True)
        else:
            fg = x == labels[0]
            for i in labels[1:]:
                fg |= x == i
        drop = fg & ~largest_components_mask(fg, self.connectivity, self.num_components)
        if not onehot:
            return restore(_zero_where(x, drop))
        out = x.clone()
        for i in labels:
            out[:, i:i + 1].masked_fill_(drop, 0)
        return restore(out)


def _border_connected(region: torch.Tensor, connectivity: int) -> torch.Tensor:
    """Bool: the voxels of `region` (N, 1, D, H, W) whose component touches the volume's border."""
    n = region.shape[0]
    v = region.shape[2] * region.shape[3] * region.shape[4]
    labels = ops.connected_components(region, connectivity).reshape(n, 1, *region.shape[2:]).long()
    faces = [labels[:, 0, 0], labels[:, 0, -1], labels[:, 0, :, 0], labels[:, 0, :, -1], labels[:, 0, :, :, 0],
             labels[:, 0, :, :, -1]]
    border = torch.cat([f.reshape(n, -1) for f in faces], 1)
    open_ = torch.zeros(n, v + 1, dtype=torch.bool, device=region.device)
    open_.scatter_(1, border, True)
    open_[:, 0] = False
    return open_.gather(1, labels.reshape(n, v)).reshape(region.shape)


class FillHoles:
    """MONAI FillHoles(applied_labels=None, connectivity=None): per label, every voxel not connected
    to the volume's border through voxels of other labels (MONAI: scipy's binary dilation from
    the border within the non-label voxels) takes the label; one-hot images (more than one
    channel) fill channel i. Enclosed voxels of other labels are overwritten too, as MONAI's.
    Each label in turn, as MONAI; every sample of a batch on its own; on the device."""

    def __init__(self, applied_labels: Union[Sequence[int], int, None] = None, connectivity: Optional[int] = None):
        if applied_labels is not None and not isinstance(applied_labels, (list, tuple)):
            applied_labels = (applied_labels,)
        self.applied_labels = None if applied_labels is None else tuple(int(v) for v in applied_labels)
        self.connectivity = _connectivity(connectivity)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        onehot = x.shape[1] > 1
        labels = [i for i in _applied_labels(x, self.applied_labels, onehot) if i != 0]
        out = x.clone()
        for i in labels:
            region = (out[:, i:i + 1] == 0) if onehot else (out[:, :1] != i)
            reach = _border_connected(region, self.connectivity)
            if onehot:
                out[:, i:i + 1] = (~reach).to(out.dtype)
            else:
                out[:, :1].masked_fill_(~reach, i)
        return restore(out)


class RemoveSmallObjects:
    """MONAI RemoveSmallObjects(min_size=64, connectivity=1, independent_channels=True,
    by_measure=False, pixdim=None): objects with fewer than `min_size` voxels (by_measure: a
    volume in the units of pixdim -- a MetaTensor's own, else `pixdim`, else 1 with MONAI's
    warning -- turned into ceil(min_size / voxel volume) voxels) are removed. MONAI's rules, per
    sample of a batch:

    - a sample holding a single value is returned unchanged;
    - independent_channels=False: the components of ``img > 0``; out = img * kept;
    - independent_channels=True and the sample's maximum <= 1: the components of ``img != 0``
      (bool); out = kept (0 / 1 in the input's dtype);
    - independent_channels=True otherwise: the values (truncated to int32) are the objects, as
      skimage reads an int array: a value is removed (set to 0) when it occurs fewer than
      min_size times in the sample, connected or not; negative values raise on the CPU (on CUDA
      they count as objects: the check would read back).

    Components are per channel with the given connectivity (1-3). MONAI hands skimage the whole
    (C, D, H, W) array, so its components also join across neighbouring channels where both are
    foreground at the same voxel (or diagonally at connectivity >= 2); voxaug keeps channels
    independent, as MONAI documents: equal for one channel, and for one-hot data at
    connectivity 1. No host sync on CUDA (both rules are computed and selected per sample)."""

    def __init__(self, min_size: int = 64, connectivity: Optional[int] = 1, independent_channels: bool = True,
                 by_measure: bool = False, pixdim: Union[Sequence[float], float, None] = None):
        self.min_size = min_size
        self.connectivity = _connectivity(connectivity)
        self.independent_channels = bool(independent_channels)
        self.by_measure = bool(by_measure)
        self.pixdim = pixdim

    def _threshold(self, img: Any) -> float:
        if not self.by_measure:
            if self.pixdim is not None:
                warnings.warn("`pixdim` is specified but not in use when computing the volume.")
            return float(self.min_size)
        if _is_meta_tensor(img):
            from .spatial import _spacing_of
            pix = _spacing_of(np.asarray(torch.as_tensor(img.affine, dtype=torch.float64).cpu()))
        elif self.pixdim is not None:
            pix = [float(self.pixdim)] * 3 if isinstance(self.pixdim, (int, float)) else [float(p) for p in self.pixdim]
            if len(pix) != 3:
                raise ValueError(f"pixdim must be a number or 3 numbers, got {self.pixdim!r}")
        else:
            warnings.warn("`img` is not of type MetaTensor and `pixdim` is None, assuming affine to be identity.")
            pix = [1.0, 1.0, 1.0]
        vol = float(np.prod(np.asarray(pix, dtype=np.float64)))
        if vol == 0:
            warnings.warn("Invalid `pixdim` value detected, set it to 1. Please verify the pixdim settings.")
            vol = 1.0
        return float(np.ceil(self.min_size / vol))

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        threshold = self._threshold(img)
        if x.numel() == 0:
            return restore(x.clone())
        flat = x.flatten(1)
        lo, hi = flat.amin(1), flat.amax(1)  # aminmax(dim=1) is 6-40x slower than these on the CPU
        shape = (-1,) + (1,) * (x.dim() - 1)
        single = (lo == hi).view(shape)  # MONAI: one unique value, the image as it is
        on_cpu = x.device.type == "cpu"

        def finish(out: torch.Tensor) -> Any:
            if on_cpu and not bool(single.any()):  # host checks are free on the CPU
                return restore(out)
            return restore(torch.where(single, x, out))

        def kept(mask: torch.Tensor) -> torch.Tensor:
            labels = ops.connected_components(mask, self.connectivity)
            return ops.component_sizes(labels) >= max(threshold, 1.0)  # background stays out

        if not self.independent_channels:
            return finish(x * kept(x > 0).to(x.dtype))
        binary = (hi <= 1).view(shape)
        flags = binary.flatten().tolist() if on_cpu else None  # run only the rules needed
        results = []
        if not on_cpu or any(flags):
            results.append(kept(x != 0).to(x.dtype))
        if not on_cpu or not all(flags):
            results.append(self._by_value(x, threshold).to(x.dtype))
        return finish(results[0] if len(results) == 1 else torch.where(binary, results[0], results[1]))

    @staticmethod
    def _by_value(x: torch.Tensor, threshold: float) -> torch.Tensor:
        """skimage's rule for an int array: each value is one object; values rarer than the
        threshold become 0 (per sample, over all channels). int32 out."""
        n = x.shape[0]
        vals = x.to(torch.int32).contiguous()  # truncation, as numpy's astype
        if x.device.type != "cpu":  # counts by sorting: no read-back of the largest value
            flat = vals.reshape(n, -1)
            srt = flat.sort(1).values
            counts = torch.searchsorted(srt, flat, right=True) - torch.searchsorted(srt, flat)
            return flat.masked_fill(counts < threshold, 0).reshape(x.shape)
        for i in range(n):
            v = vals[i].view(-1)
            if int(v.min()) < 0:
                raise ValueError("Negative value labels are not supported. Try relabeling the input with "
                                 "`scipy.ndimage.label` or `skimage.morphology.label`.")
            counts = torch.bincount(v)
            rare = torch.nonzero((counts < threshold) & (counts > 0)).flatten().tolist()
            if not rare or rare == [0]:
                continue
            if len(rare) <= 8:  # comparisons beat torch's gather through a table on the CPU
                drop = v == rare[0]
                for r in rare[1:]:
                    drop |= v == r
            else:
                drop = (counts < threshold)[v.long()]
            v.masked_fill_(drop, 0)
        return vals


class DistanceTransformEDT:
    """MONAI DistanceTransformEDT(sampling=None): per channel, each voxel's Euclidean distance to the
    nearest zero voxel of its channel (0 on zeros), axes scaled by `sampling` (a number or one
    value per spatial axis) -- scipy.ndimage.distance_transform_edt channel by channel, as MONAI
    runs it on the CPU (cuCIM on the GPU), for every sample of a batch in one call on the data's
    device. Exact (float64 squared distances); float64 results for CPU data (MONAI / scipy),
    float32 for CUDA data (MONAI / cuCIM's default) unless `dtype` says otherwise. A channel with
    no zero voxel gets scipy's answer (the distance to the virtual voxel (-1, 0, 0), or (-1, 0) in
    2-D). 3-D images (C, D, H, W) or batches (N, C, D, H, W), and 2-D images (C, H, W) as MONAI
    takes them (computed as (C, H, W, 1) volumes: the same distances, scipy's virtual voxel
    included); a 2-D image needs a number or two values for `sampling`."""

    def __init__(self, sampling: Union[float, Sequence[float], None] = None, dtype: Optional[torch.dtype] = None):
        if sampling is None:
            sp = [1.0]
        elif isinstance(sampling, (int, float)):
            sp = [float(sampling)]
        else:
            sp = [float(v) for v in sampling]
            if len(sp) not in (2, 3):
                raise ValueError("sampling must be a number or one value per spatial axis (2 or 3), "
                                 f"got {sampling!r}")
        if any(not (np.isfinite(v) and v > 0) for v in sp):
            raise ValueError(f"sampling must be positive and finite, got {sampling!r}")
        if dtype not in (None, torch.float32, torch.float64):
            raise ValueError(f"dtype must be None, torch.float32 or torch.float64, got {dtype}")
        self.sampling, self.dtype = sp, dtype

    def __call__(self, img: Any) -> Any:
        src = torch.as_tensor(img) if isinstance(img, np.ndarray) else img
        if isinstance(src, torch.Tensor) and src.dim() == 3:  # a 2-D image (C, H, W)
            if len(self.sampling) == 3:
                raise ValueError("sampling must be a number or two values for a 2-D image (C, H, W), "
                                 f"got {self.sampling}")
            x = src.as_tensor() if _is_meta_tensor(src) else src
            sp = self.sampling if len(self.sampling) == 1 else [*self.sampling, 1.0]
            dtype = self.dtype or (torch.float32 if x.is_cuda else torch.float64)
            out = ops.distance_transform_edt(x[None, ..., None], sp, dtype)[0, ..., 0]
            if _is_meta_tensor(src):
                from monai.data import MetaTensor  # only when the caller passed one

                return MetaTensor(out, meta=dict(src.meta), applied_operations=list(src.applied_operations))
            return out
        if len(self.sampling) == 2:
            raise ValueError("sampling must be a number or three values for a 3-D image (C, D, H, W) or a "
                             f"batch (N, C, D, H, W), got {self.sampling}")
        x, restore = _as_batch(img)
        dtype = self.dtype or (torch.float32 if x.is_cuda else torch.float64)
        return restore(ops.distance_transform_edt(x, self.sampling, dtype))


class _PostDict:
    def __init__(self, keys, transform, allow_missing_keys: bool):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform, self.allow_missing_keys = transform, allow_missing_keys

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transform(d[key])
        return d


class KeepLargestConnectedComponentd(_PostDict):
    def __init__(self, keys, applied_labels=None, is_onehot: Optional[bool] = None, independent: bool = True,
                 connectivity: Optional[int] = None, num_components: int = 1, allow_missing_keys: bool = False):
        super().__init__(keys, KeepLargestConnectedComponent(applied_labels, is_onehot, independent, connectivity,
                                                             num_components), allow_missing_keys)


class RemoveSmallObjectsd(_PostDict):
    def __init__(self, keys, min_size: int = 64, connectivity: Optional[int] = 1, independent_channels: bool = True,
                 by_measure: bool = False, pixdim=None, allow_missing_keys: bool = False):
        super().__init__(keys, RemoveSmallObjects(min_size, connectivity, independent_channels, by_measure, pixdim),
                         allow_missing_keys)


class FillHolesd(_PostDict):
    def __init__(self, keys, applied_labels=None, connectivity: Optional[int] = None,
                 allow_missing_keys: bool = False):
        super().__init__(keys, FillHoles(applied_labels, connectivity), allow_missing_keys)


class DistanceTransformEDTd(_PostDict):
    def __init__(self, keys, allow_missing_keys: bool = False, sampling: Union[float, Sequence[float], None] = None,
                 dtype: Optional[torch.dtype] = None):
        super().__init__(keys, DistanceTransformEDT(sampling, dtype), allow_missing_keys)


# ---------------- MONAI's validation post-processing (Activations, AsDiscrete, ...) ----------------
# Plain torch on the data's device, no host sync, for an image (C, D, H, W) as MONAI takes it or a
# batch (N, C, D, H, W) at once. MONAI's `dim` keyword counts in the image (0: the channel), also
# for a batch (the same axis of each sample).


def _image_dim(dim: int) -> int:
    """MONAI's `dim` (in the image) in the 5-D batch the transforms work on."""
    return dim + 1 if dim >= 0 else dim


class Activations:
    """MONAI Activations(sigmoid=False, softmax=False, other=None, dim=0): in float32, sigmoid, then
    softmax along `dim`, then `other`; the result in the input's dtype. The call's arguments act as
    MONAI's (``sigmoid or self.sigmoid``)."""

    def __init__(self, sigmoid: bool = False, softmax: bool = False, other: Optional[Any] = None, **kwargs):
        if other is not None and not callable(other):
            raise TypeError(f"other must be None or callable but is {type(other).__name__}.")
        self.sigmoid, self.softmax, self.other, self.kwargs = bool(sigmoid), bool(softmax), other, kwargs

    def __call__(self, img: Any, sigmoid: Optional[bool] = None, softmax: Optional[bool] = None,
                 other: Optional[Any] = None) -> Any:
        if sigmoid and softmax:
            raise ValueError("Incompatible values: sigmoid=True and softmax=True.")
        if other is not None and not callable(other):
            raise TypeError(f"other must be None or callable but is {type(other).__name__}.")
        x, restore = _as_batch(img)
        t = x.float()
        if sigmoid or self.sigmoid:
            t = torch.sigmoid(t)
        if softmax or self.softmax:
            t = torch.softmax(t, dim=_image_dim(self.kwargs.get("dim", 0)))
        act = self.other if other is None else other
        if act is not None:
            t = act(t)
        return restore(t.to(x.dtype))


def _one_hot(labels: torch.Tensor, num_classes: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """MONAI's one_hot along `dim` (size 1 there) by comparisons with 0 .. K-1: no scatter, so no
    device assert and no sync; a label outside [0, K) gives a zero vector (MONAI's scatter fails)."""
    if labels.shape[dim] != 1:
        raise ValueError(f"to_onehot needs a channel of length one to expand (MONAI's one_hot), got shape "
                         f"{tuple(labels.shape)}")
    shape = [1] * labels.dim()
    shape[dim] = num_classes
    classes = torch.arange(num_classes, device=labels.device).reshape(shape)
    return (labels.long() == classes).to(dtype)


class AsDiscrete:
    """MONAI AsDiscrete(argmax=False, to_onehot=None, threshold=None, rounding=None, dim=0,
    keepdim=True, dtype=torch.float): argmax along `dim`, one-hot with `to_onehot` classes,
    ``>= threshold``, torch rounding, in that order; the result in `dtype` (default float32)."""

    def __init__(self, argmax: bool = False, to_onehot: Optional[int] = None, threshold: Optional[float] = None,
                 rounding: Optional[str] = None, **kwargs):
        if isinstance(to_onehot, bool):
            raise ValueError("`to_onehot=True/False` is deprecated, please use `to_onehot=num_classes` instead.")
        self.argmax, self.to_onehot, self.threshold, self.rounding = argmax, to_onehot, threshold, rounding
        self.kwargs = kwargs

    def __call__(self, img: Any, argmax: Optional[bool] = None, to_onehot: Optional[int] = None,
                 threshold: Optional[float] = None, rounding: Optional[str] = None) -> Any:
        if isinstance(to_onehot, bool):
            raise ValueError("`to_onehot=True/False` is deprecated, please use `to_onehot=num_classes` instead.")
        x, restore = _as_batch(img)
        dim = _image_dim(self.kwargs.get("dim", 0))
        dtype = self.kwargs.get("dtype", torch.float)
        t = x
        if self.argmax if argmax is None else argmax:
            t = torch.argmax(t, dim=dim, keepdim=self.kwargs.get("keepdim", True))
        to_onehot = self.to_onehot if to_onehot is None else to_onehot
        if to_onehot is not None:
            if not isinstance(to_onehot, int):
                raise ValueError(f"the number of classes for One-Hot must be an integer, got {type(to_onehot)}.")
            t = _one_hot(t, to_onehot, dim, dtype)
        threshold = self.threshold if threshold is None else threshold
        if threshold is not None:
            t = t >= threshold
        rounding = self.rounding if rounding is None else rounding
        if rounding is not None:
            if rounding != "torchrounding":
                raise ValueError(f"rounding must be 'torchrounding', got {rounding!r}")
            t = torch.round(t)
        return restore(t.to(dtype))


class LabelFilter:
    """MONAI LabelFilter(applied_labels): values in `applied_labels` kept, every other value 0 (any
    shape, the input's dtype); the label list reaches the device through pinned memory (MONAI's
    torch.as_tensor(labels, device=cuda) is a blocking copy)."""

    def __init__(self, applied_labels: Union[Sequence[int], int]):
        labels = [applied_labels] if isinstance(applied_labels, (int, float)) else list(applied_labels)
        if not labels:
            raise ValueError("applied_labels must name at least one label")
        self.applied_labels = labels

    def __call__(self, img: Any) -> Any:
        if not isinstance(img, (np.ndarray, torch.Tensor)):
            raise NotImplementedError(f"{self.__class__} can not handle data of type {type(img)}.")
        src = img
        x = torch.as_tensor(img.as_tensor() if _is_meta_tensor(img) else img)
        labels = _host_to(torch.tensor(self.applied_labels), x.device)
        out = torch.where(torch.isin(x, labels), x, torch.zeros((), dtype=x.dtype, device=x.device))
        if _is_meta_tensor(src):
            from monai.data import MetaTensor  # only when the caller passed one

            return MetaTensor(out, meta=dict(src.meta), applied_operations=list(src.applied_operations))
        return out


class LabelToContour:
    """MONAI LabelToContour(kernel_type="Laplace"): the 3-D Laplace edge of each channel, 26 x - (the
    sum of the 26 neighbours, zero outside the image), clamped to [0, 1], as one grouped
    convolution for a whole batch; computed in the input's float dtype (float32 for others),
    returned in the input's dtype."""

    def __init__(self, kernel_type: str = "Laplace"):
        if kernel_type != "Laplace":
            raise NotImplementedError('Currently only kernel_type="Laplace" is supported.')
        self.kernel_type = kernel_type

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        f = x if x.is_floating_point() else x.float()
        n, c = f.shape[:2]
        kernel = torch.full((1, 1, 3, 3, 3), -1.0, dtype=f.dtype)
        kernel[0, 0, 1, 1, 1] = 26.0
        kernel = _host_to(kernel, f.device)  # pinned, non-blocking
        out = torch.nn.functional.conv3d(f.reshape(n * c, 1, *f.shape[2:]), kernel, padding=1)
        return restore(out.clamp_(0.0, 1.0).reshape(f.shape).to(x.dtype))


class ConvertToMultiChannelBasedOnBratsClasses:
    """MONAI ConvertToMultiChannelBasedOnBratsClasses(et_label=4): a BraTS label map (D, H, W),
    (1, D, H, W) or a batch (N, 1, D, H, W) to bool channels TC (1 or ET), WT (1, 2 or ET), ET
    (``et_label``: 4 for BraTS 2018-2022, 3 for 2023)."""

    def __init__(self, et_label: int = 4):
        if et_label in (1, 2):
            raise ValueError(f"et_label cannot be 1 or 2, as these are reserved. Got {et_label}.")
        self.et_label = et_label

    def __call__(self, img: Any) -> Any:
        src = img
        x = torch.as_tensor(img.as_tensor() if _is_meta_tensor(img) else img)
        batched = x.dim() == 5
        if batched:
            if x.shape[1] != 1:
                raise ValueError(f"a batch of BraTS label maps must be (N, 1, D, H, W), got {tuple(x.shape)}")
            x = x[:, 0]
        elif x.dim() == 4 and x.shape[0] == 1:
            x = x[0]
        et = x == self.et_label
        tc = (x == 1) | et
        out = torch.stack([tc, tc | (x == 2), et], dim=1 if batched else 0)
        if _is_meta_tensor(src):
            from monai.data import MetaTensor  # only when the caller passed one

            return MetaTensor(out, meta=dict(src.meta), applied_operations=list(src.applied_operations))
        return out


def _per_key(value: Any, n: int) -> list:
    """MONAI's ensure_tuple_rep: one value for every key, or a sequence of one per key."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"a sequence of per-key values must have one per key ({n}), got {len(value)}")
        return list(value)
    return [value] * n


class _PerKeyDict:
    """A dictionary transform whose options may be given per key (MONAI's Activationsd, AsDiscreted)."""

    def __init__(self, keys, allow_missing_keys: bool, make, **options):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.allow_missing_keys = allow_missing_keys
        per = {k: _per_key(v, len(self.keys)) for k, v in options.items()}
        self.transforms = [make(**{k: v[i] for k, v in per.items()}) for i in range(len(self.keys))]

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        for i, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transforms[i](d[key])
        return d


class Activationsd(_PerKeyDict):
    def __init__(self, keys, sigmoid=False, softmax=False, other=None, allow_missing_keys: bool = False,
                 **kwargs):
        super().__init__(keys, allow_missing_keys, lambda **o: Activations(**o, **kwargs), sigmoid=sigmoid,
                         softmax=softmax, other=other)


class AsDiscreted(_PerKeyDict):
    def __init__(self, keys, argmax=False, to_onehot=None, threshold=None, rounding=None,
                 allow_missing_keys: bool = False, **kwargs):
        super().__init__(keys, allow_missing_keys, lambda **o: AsDiscrete(**o, **kwargs), argmax=argmax,
                         to_onehot=to_onehot, threshold=threshold, rounding=rounding)


class LabelFilterd(_PostDict):
    def __init__(self, keys, applied_labels: Union[Sequence[int], int], allow_missing_keys: bool = False):
        super().__init__(keys, LabelFilter(applied_labels), allow_missing_keys)


class LabelToContourd(_PostDict):
    def __init__(self, keys, kernel_type: str = "Laplace", allow_missing_keys: bool = False):
        super().__init__(keys, LabelToContour(kernel_type), allow_missing_keys)


class ConvertToMultiChannelBasedOnBratsClassesd(_PostDict):
    def __init__(self, keys, allow_missing_keys: bool = False, et_label: int = 4):
        super().__init__(keys, ConvertToMultiChannelBasedOnBratsClasses(et_label), allow_missing_keys)
