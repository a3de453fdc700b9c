"""Post-processing of label maps on the data's device: MONAI KeepLargestConnectedComponent(d) and
FillHoles(d), on ``torch.ops.voxaug.connected_components`` (include/voxaug/label.h).

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

from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import torch

from . import ops
from .transforms import _as_batch, _host_to, _present_keys

__all__ = ["connected_components", "largest_components_mask", "KeepLargestConnectedComponent",
           "KeepLargestConnectedComponentd", "FillHoles", "FillHolesd"]


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


class FillHolesd(_PostDict):
    def __init__(self, keys, applied_labels=None, connectivity: Optional[int] = None,
                 allow_missing_keys: bool = False):
        super().__init__(keys, FillHoles(applied_labels, connectivity), allow_missing_keys)
