"""TorchIO's label-map and shape utilities, batched on the data's device: OneHot, RemapLabels,
RemoveLabels, SequentialLabels, Mask and EnsureShapeMultiple.

Inputs are (C, D, H, W) tensors or (N, C, D, H, W) batches; a dictionary (TorchIO's Subject) is
transformed key by key: the label transforms touch the keys under `label_keys` (TorchIO's
LabelMaps), Mask the others (its ScalarImages), EnsureShapeMultiple every 4-D / 5-D tensor.
A masking_method is None, a callable (given each sample's (C, D, H, W) data), a mask tensor, or,
in a dictionary, the key of a label map (optionally restricted to `labels`, as TorchIO's).
"""
from __future__ import annotations

import collections.abc
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from .spatial import CropOrPad, _rep3
from .stats import _torchio_mask
from .transforms import _as_batch, _host_to

__all__ = ["OneHot", "RemapLabels", "RemoveLabels", "SequentialLabels", "Mask", "EnsureShapeMultiple"]


def _mask_for(x: torch.Tensor, masking_method: Any, data: Optional[Mapping], labels: Optional[Sequence[int]]
              ) -> Optional[torch.Tensor]:
    """(N, C, D, H, W) bool (None: everywhere) from a masking_method; a string names a label map of
    `data` (nonzero inside, or one of `labels`)."""
    if isinstance(masking_method, str) or (labels is not None and isinstance(masking_method, (torch.Tensor,
                                                                                              np.ndarray))):
        if isinstance(masking_method, str):
            if data is None or masking_method not in data:
                raise ValueError(f"masking_method {masking_method!r} names no label map of the data: pass a "
                                 "dictionary holding it, the mask itself, or a callable")
            lab, _ = _as_batch(data[masking_method])
        else:
            lab = torch.as_tensor(masking_method)
            lab = lab[None] if lab.dim() == 4 else lab
        lab = lab.to(x.device)
        if labels is None:
            m = lab != 0
        else:
            m = torch.zeros(lab.shape, dtype=torch.bool, device=x.device)
            for v in labels:
                m |= lab == v
        try:
            return m.expand(x.shape)
        except RuntimeError:
            raise ValueError(f"masking_method {masking_method!r}: the label map {tuple(lab.shape)} does not "
                             f"broadcast against {tuple(x.shape)}") from None
    return _torchio_mask(x, masking_method)


class _PerKey:
    """Applies ``_apply(x5, data)`` to a tensor, or to the dictionary keys chosen by ``_keys``."""

    label_keys: tuple = ()
    _on_labels = True

    def _keys(self, data: Mapping) -> list:
        return [k for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)
                and (k in self.label_keys) == self._on_labels]

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            x, restore = _as_batch(data)
            return restore(self._apply(x, None))
        out = dict(data)
        for k in self._keys(data):
            x, restore = _as_batch(data[k])
            out[k] = restore(self._apply(x, data))
        return out


class OneHot(_PerKey):
    """TorchIO OneHot(num_classes=-1): a one-channel label map -> num_classes channels (F.one_hot of
    the values as integers), the input's dtype kept. num_classes=-1 takes max + 1 of the batch,
    which reads the maximum back to the host (TorchIO's one_hot does the same); give num_classes
    to stay on the device without a sync."""

    def __init__(self, num_classes: int = -1, label_keys: Sequence[str] = ()):
        if not isinstance(num_classes, (int, np.integer)) or (num_classes < 1 and num_classes != -1):
            raise ValueError(f"num_classes must be a positive int or -1, got {num_classes!r}")
        self.num_classes, self.label_keys = int(num_classes), tuple(label_keys)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        if x.shape[1] != 1:
            raise RuntimeError(f"The number of input channels must be 1, but it is {x.shape[1]}")
        one_hot = F.one_hot(x[:, 0].long(), num_classes=self.num_classes)
        return one_hot.permute(0, 4, 1, 2, 3).to(x.dtype)


class RemapLabels(_PerKey):
    """TorchIO RemapLabels(remapping, masking_method=None): every voxel (inside the mask) holding a key
    of `remapping` takes its value, all from the original values at once. Integer maps with integer
    keys go through one lookup table (one pass for any number of labels); otherwise one masked
    replacement per entry. On the device, no sync."""

    def __init__(self, remapping: dict, masking_method: Any = None, label_keys: Sequence[str] = ()):
        if not isinstance(remapping, dict):
            raise ValueError(f"remapping must be a dictionary {{old: new}}, got {type(remapping).__name__}")
        self.remapping, self.masking_method, self.label_keys = dict(remapping), masking_method, tuple(label_keys)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        mask = _mask_for(x, self.masking_method, data, None)
        if not self.remapping:
            return x.clone()
        keys = list(self.remapping)
        ints = all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in keys)
        if ints and not x.dtype.is_floating_point and max(keys) - min(keys) < (1 << 20):
            lo = int(min(keys))
            size = int(max(keys)) - lo + 1
            table = torch.zeros(size, dtype=x.dtype)
            hit = torch.zeros(size, dtype=torch.bool)
            for k, v in self.remapping.items():
                table[int(k) - lo] = v
                hit[int(k) - lo] = True
            table, hit = _host_to(table, x.device), _host_to(hit, x.device)
            idx = x.to(torch.int64) - lo
            inside = (idx >= 0) & (idx < size)
            idx = idx.clamp_(0, size - 1)
            take = inside & hit[idx]
            if mask is not None:
                take &= mask
            return torch.where(take, table[idx], x)
        out = x.clone()
        for k, v in self.remapping.items():
            hit = x == k
            if mask is not None:
                hit &= mask
            out.masked_fill_(hit, v)
        return out


class RemoveLabels(RemapLabels):
    """TorchIO RemoveLabels(labels, background_label=0, masking_method=None): the given labels become
    the background label."""

    def __init__(self, labels: Sequence[int], background_label: int = 0, masking_method: Any = None,
                 label_keys: Sequence[str] = ()):
        super().__init__({label: background_label for label in labels}, masking_method, label_keys)
        self.labels, self.background_label = list(labels), background_label


class SequentialLabels(_PerKey):
    """TorchIO SequentialLabels(masking_method=None): each sample's label values, sorted, become
    0, 1, 2, ... (inside the mask). The label set decides the mapping, so this reads it back to the
    host (torch.unique per sample), as TorchIO does."""

    def __init__(self, masking_method: Any = None, label_keys: Sequence[str] = ()):
        self.masking_method, self.label_keys = masking_method, tuple(label_keys)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        outs = []
        for n in range(x.shape[0]):
            values = torch.unique(x[n]).tolist()
            t = RemapLabels({v: i for i, v in enumerate(values)}, self.masking_method)
            sub = data if data is None else {k: (v[n] if isinstance(v, torch.Tensor) and v.dim() == 5 else v)
                                             for k, v in data.items()}
            outs.append(t._apply(x[n:n + 1], sub))
        return torch.cat(outs)


class Mask(_PerKey):
    """TorchIO Mask(masking_method, outside_value=0, labels=None): intensity images (keys not under
    `label_keys`) set to `outside_value` outside the mask (a label map's nonzero voxels, or those
    holding one of `labels`)."""

    _on_labels = False

    def __init__(self, masking_method: Any, outside_value: float = 0, labels: Optional[Sequence[int]] = None,
                 label_keys: Sequence[str] = ()):
        if masking_method is None:
            raise ValueError("masking_method must be given (a label-map key, a mask tensor or a callable)")
        self.masking_method, self.outside_value = masking_method, outside_value
        self.labels, self.label_keys = labels, tuple(label_keys)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        mask = _mask_for(x, self.masking_method, data, self.labels)
        return x.masked_fill(~mask, self.outside_value) if mask is not None else x.clone()


class EnsureShapeMultiple:
    """TorchIO EnsureShapeMultiple(target_multiple, method='pad'): each spatial size cropped
    (floor) or padded (ceil) to a multiple of target_multiple (an int or one per axis; at least 1),
    through :class:`voxaug.spatial.CropOrPad` (TorchIO's centring, zero padding). A dictionary:
    every 4-D / 5-D tensor, by the first one's shape."""

    def __init__(self, target_multiple: Union[int, Sequence[int]], method: str = "pad"):
        mult = _rep3(target_multiple, "target_multiple")
        if not all(float(m).is_integer() and m >= 1 for m in mult):
            raise ValueError(f"target_multiple must be positive integers, got {target_multiple!r}")
        if method not in ("crop", "pad"):
            raise ValueError('Method must be "crop" or "pad"')
        self.target_multiple = np.array([int(m) for m in mult])
        self.method = method

    def target_shape(self, spatial_shape: Sequence[int]) -> tuple[int, int, int]:
        source = np.array(spatial_shape, np.uint16) if max(spatial_shape) < (1 << 16) else np.array(spatial_shape)
        ratio = np.floor(source / self.target_multiple) if self.method == "crop" else \
            np.ceil(source / self.target_multiple)
        return tuple(int(v) for v in np.maximum(ratio * self.target_multiple, 1).astype(int).tolist())

    def __call__(self, data: Any) -> Any:
        if isinstance(data, collections.abc.Mapping):
            first = next((v for v in data.values() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)), None)
            if first is None:
                return dict(data)
            shape = first.shape[-3:]
        else:
            shape = torch.as_tensor(data).shape[-3:] if not isinstance(data, torch.Tensor) else data.shape[-3:]
        return CropOrPad(self.target_shape(tuple(int(s) for s in shape)))(data)
