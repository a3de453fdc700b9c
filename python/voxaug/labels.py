"""TorchIO's label-map and shape utilities, batched on the data's device: OneHot, RemapLabels,
RemoveLabels, SequentialLabels, Mask, EnsureShapeMultiple, KeepLargestComponent and Contour; and
RandomLabelsToImage (images generated from segmentations).

Inputs are (C, D, H, W) tensors or (N, C, D, H, W) batches; a dictionary (TorchIO's Subject) is
transformed key by key: the label transforms touch the keys under `label_keys` (TorchIO's
LabelMaps), Mask the others (its ScalarImages), EnsureShapeMultiple every 4-D / 5-D tensor.
A masking_method is None, a callable (given each sample's (C, D, H, W) data), a mask tensor, or,
in a dictionary, the key of a label map (optionally restricted to `labels`, as TorchIO's).
"""
from __future__ import annotations

import collections.abc
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from .spatial import CropOrPad, _rep3
from .stats import _torchio_mask
from . import ops
from .transforms import _TorchIOArgs, _as_batch, _Dict, _host_to, _Randomizable

__all__ = ["OneHot", "RemapLabels", "RemoveLabels", "SequentialLabels", "Mask", "EnsureShapeMultiple",
           "LabelsToImage", "RandomLabelsToImage", "KeepLargestComponent", "Contour",
           "MapLabelValue", "MapLabelValued", "LabelToMask", "LabelToMaskd"]


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
        lab = _host_to(lab, x.device)
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


class _PerKey(_TorchIOArgs):
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

    def __init__(self, num_classes: int = -1, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(num_classes, (int, np.integer)) or (num_classes < 1 and num_classes != -1):
            raise ValueError(f"num_classes must be a positive int or -1, got {num_classes!r}")
        self.num_classes, self.label_keys = int(num_classes), tuple(label_keys)
        self._filter_args(include, exclude, keep)

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

    def __init__(self, remapping: dict, masking_method: Any = None, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(remapping, dict):
            raise ValueError(f"remapping must be a dictionary {{old: new}}, got {type(remapping).__name__}")
        self.remapping, self.masking_method, self.label_keys = dict(remapping), masking_method, tuple(label_keys)
        self._filter_args(include, exclude, keep)

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
                 label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__({label: background_label for label in labels}, masking_method, label_keys)
        self.labels, self.background_label = list(labels), background_label
        self._filter_args(include, exclude, keep)


class SequentialLabels(_PerKey):
    """TorchIO SequentialLabels(masking_method=None): each sample's label values, sorted, become
    0, 1, 2, ... (inside the mask). The label set decides the mapping, so this reads it back to the
    host (torch.unique per sample), as TorchIO does."""

    def __init__(self, masking_method: Any = None, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.masking_method, self.label_keys = masking_method, tuple(label_keys)
        self._filter_args(include, exclude, keep)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        outs = []
        for n in range(x.shape[0]):
            values = torch.unique(x[n]).tolist()
            t = RemapLabels({v: i for i, v in enumerate(values)}, self.masking_method)
            sub = data if data is None else {k: (v[n] if isinstance(v, torch.Tensor) and v.dim() == 5 else v)
                                             for k, v in data.items()}
            outs.append(t._apply(x[n:n + 1], sub))
        return torch.cat(outs)


def _one_channel(x: torch.Tensor) -> None:
    if x.shape[1] != 1:
        raise RuntimeError(f"The number of input channels must be 1, but it is {x.shape[1]}")


class KeepLargestComponent(_PerKey):
    """TorchIO KeepLargestComponent: each sample's largest face-connected component of its nonzero
    voxels (SimpleITK's ConnectedComponent and RelabelComponent), as a uint8 0 / 1 map; among
    components of equal size the first in SimpleITK's raster order (the last axis slowest) wins.
    On the data's device (``ops.connected_components`` + ``ops.largest_components`` on the
    volume's axes reversed), no host sync. One channel, as TorchIO."""

    def __init__(self, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.label_keys = tuple(label_keys)
        self._filter_args(include, exclude, keep)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        _one_channel(x)
        rev = (x != 0).permute(0, 1, 4, 3, 2).contiguous()  # C-order of this = SimpleITK's raster order
        keep = ops.largest_components(ops.connected_components(rev, 1), 1)
        return keep.permute(0, 1, 4, 3, 2).to(torch.uint8)


class Contour(_PerKey):
    """TorchIO Contour (SimpleITK's BinaryContour, foreground 1, face connectivity): voxels of value
    1 all of whose face neighbours inside the volume are 1 become 0; every other voxel keeps its
    value (the contour of the 1s, other labels untouched); the input's dtype. On the data's device,
    no host sync. One channel, as TorchIO."""

    def __init__(self, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.label_keys = tuple(label_keys)
        self._filter_args(include, exclude, keep)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        _one_channel(x)
        fg = x == 1
        # Outside the volume counts as foreground (SimpleITK's filter ignores it): pad with True.
        p = F.pad(fg, (1, 1, 1, 1, 1, 1), value=True)
        interior = fg.clone()
        d, h, w = x.shape[2:]
        for a, b, c in ((0, 1, 1), (2, 1, 1), (1, 0, 1), (1, 2, 1), (1, 1, 0), (1, 1, 2)):
            interior &= p[:, :, a:a + d, b:b + h, c:c + w]
        return torch.where(interior, torch.zeros((), dtype=x.dtype, device=x.device), x)


class Mask(_PerKey):
    """TorchIO Mask(masking_method, outside_value=0, labels=None): intensity images (keys not under
    `label_keys`) set to `outside_value` outside the mask (a label map's nonzero voxels, or those
    holding one of `labels`)."""

    _on_labels = False

    def __init__(self, masking_method: Any, outside_value: float = 0, labels: Optional[Sequence[int]] = None,
                 label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if masking_method is None:
            raise ValueError("masking_method must be given (a label-map key, a mask tensor or a callable)")
        self.masking_method, self.outside_value = masking_method, outside_value
        self.labels, self.label_keys = labels, tuple(label_keys)
        self._filter_args(include, exclude, keep)

    def _apply(self, x: torch.Tensor, data: Optional[Mapping]) -> torch.Tensor:
        mask = _mask_for(x, self.masking_method, data, self.labels)
        return x.masked_fill(~mask, self.outside_value) if mask is not None else x.clone()


class EnsureShapeMultiple(_TorchIOArgs):
    """TorchIO EnsureShapeMultiple(target_multiple, method='pad'): each spatial size cropped
    (floor) or padded (ceil) to a multiple of target_multiple (an int or one per axis; at least 1),
    through :class:`voxaug.spatial.CropOrPad` (TorchIO's centring, zero padding). A dictionary:
    every 4-D / 5-D tensor, by the first one's shape."""

    def __init__(self, target_multiple: Union[int, Sequence[int]], method: str = "pad",
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        mult = _rep3(target_multiple, "target_multiple")
        if not all(float(m).is_integer() and m >= 1 for m in mult):
            raise ValueError(f"target_multiple must be positive integers, got {target_multiple!r}")
        if method not in ("crop", "pad"):
            raise ValueError('Method must be "crop" or "pad"')
        self.target_multiple = np.array([int(m) for m in mult])
        self.method = method
        self._filter_args(include, exclude, keep)

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


def _gaussian_parameter(value: Any, name: str) -> tuple[float, float]:
    """TorchIO's parse_gaussian_parameter: a number v means (v, v); else (min, max), min <= max."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value), float(value)
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"If {name} is a sequence, it must be of len 2, not {value!r}") from None
    if lo > hi:
        raise ValueError(f"If {name} is a sequence, the second value must be equal or greater than the first, "
                         f"not {value!r}")
    return lo, hi


class RandomLabelsToImage(_TorchIOArgs, _Randomizable):
    """TorchIO RandomLabelsToImage(label_key=None, used_labels=None, image_key='image_from_labels',
    mean=None, std=None, default_mean=(0.1, 0.9), default_std=(0.01, 0.1), discretize=False,
    ignore_background=False): an image generated from a segmentation (Billot et al.'s SynthSeg
    scheme): each label k gets a tissue ``N(mean_k, std_k)`` with mean_k ~ U(mean[k]) and
    std_k ~ U(std[k]) (``default_mean`` / ``default_std`` when not given; a number v means
    (v, v)), drawn per sample from Philox, and the tissues fill their labels' voxels. Float32.

    - A label map (one channel, integral values): each voxel is ``mean_k + std_k * z`` of its
      label k, z ~ N(0, 1) per voxel (TorchIO draws a noise volume per label and keeps each one's
      voxels: the same distribution).
    - A partial-volume map (several channels: one-hot or probabilities): ``sum_k p_k (mean_k +
      std_k z_k)``, z_k independent per channel, summed in channel order in float32 as TorchIO's;
      ``discretize=True`` takes each voxel's arg-max channel instead (voxels whose channels are all
      0: background).
    - ``used_labels``: other labels are background: the original image (``image_key`` already in
      the dictionary, or ``image=``) shows through there, else 0. ``ignore_background``: label 0
      gets no tissue (0, never the original image). Partial volumes: background where the used
      channels sum below 0.5.

    Call it on a dictionary (TorchIO's Subject; ``label_key`` names the label map, and the
    result is stored under ``image_key``) or on the label map itself (``t(label_map, image=None)``
    returns the image). (C, D, H, W) or (N, C, D, H, W); (1, D, H, W) / (N, 1, D, H, W) out.

    The table of label parameters has K rows: len(mean) / len(std) when given (indexed by label
    value, as TorchIO's get_params; a larger label raises), else ``num_labels`` (a voxaug
    extension), else the channel count of a discretized partial volume, else 1 + the largest
    label (which reads the maximum back on CUDA). A label's draws do not depend on K. Label
    checks (integral, non-negative, < K) are made on the CPU; on CUDA they would read back, so
    out-of-range labels are clamped there. Not TorchIO's: one draw stream for every label value
    (TorchIO draws only for the labels present, and its mean list must then cover exactly those);
    no ``p`` (a batch needs an image for every sample). Draws of the last call: ``last_mean``,
    ``last_std`` ((N, K) numpy arrays)."""

    def __init__(self, label_key: Optional[str] = None, used_labels: Optional[Sequence[int]] = None,
                 image_key: str = "image_from_labels", mean: Optional[Sequence[Any]] = None,
                 std: Optional[Sequence[Any]] = None, default_mean: Any = (0.1, 0.9), default_std: Any = (0.01, 0.1),
                 discretize: bool = False, ignore_background: bool = False, num_labels: Optional[int] = None,
                 seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        if used_labels is not None:
            if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in used_labels):
                raise ValueError(f'Items in "used_labels" must be integers, but some are not: {used_labels}')
            used_labels = [int(v) for v in used_labels]
        self.label_key, self.used_labels, self.image_key = label_key, used_labels, image_key
        parse = lambda seq, name: None if seq is None else [  # noqa: E731
            _gaussian_parameter(v, f"{name}[{i}]") for i, v in enumerate(seq)]
        self.mean_ranges, self.std_ranges = parse(mean, "mean"), parse(std, "std")
        for ranges, name in ((self.mean_ranges, "mean"), (self.std_ranges, "std")):
            if ranges is not None and used_labels is not None and len(ranges) != len(used_labels):
                raise ValueError(f'If both "{name}" and "used_labels" are defined, they must have the same length')
        if self.mean_ranges is not None and self.std_ranges is not None and \
                len(self.mean_ranges) != len(self.std_ranges):
            raise ValueError('If both "mean" and "std" are defined they must have the same length')
        self.default_mean = _gaussian_parameter(default_mean, "default_mean")
        self.default_std = _gaussian_parameter(default_std, "default_std")
        self.discretize, self.ignore_background = bool(discretize), bool(ignore_background)
        if num_labels is not None and int(num_labels) < 1:
            raise ValueError(f"num_labels must be >= 1, got {num_labels}")
        self.num_labels = None if num_labels is None else int(num_labels)
        self.last_mean: Optional[np.ndarray] = None
        self.last_std: Optional[np.ndarray] = None
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any, image: Any = None) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            return self._generate(data, image)
        if self.label_key is None:
            raise ValueError("label_key must name the label map of the dictionary")
        if self.label_key not in data:
            raise KeyError(f"label_key {self.label_key!r} is not in the data")
        out = dict(data)
        out[self.image_key] = self._generate(data[self.label_key], data.get(self.image_key))
        return out

    def _table_size(self, lab: torch.Tensor, channels: int, label_map: bool, discretized: bool) -> int:
        given = self.mean_ranges if self.mean_ranges is not None else self.std_ranges
        if not label_map:
            k = channels
        elif given is not None:
            k = len(given)
        elif self.num_labels is not None:
            k = self.num_labels
        elif discretized:  # arg-max channels: below the channel count, known without a read-back
            k = channels
        else:
            k = int(lab.max()) + 1 if lab.numel() else 1  # reads back on CUDA (see the class notes)
        if given is not None and len(given) < k:
            raise RuntimeError(f'"mean" / "std" must define a value for each label: {len(given)} given for '
                               f"{k} labels")
        return max(k, 1)

    def _draw(self, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        u = ops.philox_uniform(self._next_seed(), 0, n, 2 * k).numpy().reshape(n, k, 2)
        def ranges(given, default):  # noqa: E306
            r = np.array(given[:k] if given is not None else [default] * k, dtype=np.float64).reshape(k, 2)
            return r[:, 0], r[:, 1]
        m_lo, m_hi = ranges(self.mean_ranges, self.default_mean)
        s_lo, s_hi = ranges(self.std_ranges, self.default_std)
        self.last_mean = m_lo + (m_hi - m_lo) * u[..., 0]
        self.last_std = s_lo + (s_hi - s_lo) * u[..., 1]
        return self.last_mean, self.last_std

    def _normals(self, shape, device) -> torch.Tensor:
        z = torch.zeros(shape, dtype=torch.float32, device=device)
        return ops.pointwise_chain_(z, [ops.Step(ops.GAUSSIAN_NOISE, 0, (0.0, 1.0), 1.0, self._next_seed())])

    def _generate(self, labels: Any, image: Any) -> Any:
        lab, restore = _as_batch(labels)
        n, c = lab.shape[:2]
        on_cpu = lab.device.type == "cpu"
        label_map = c == 1
        if label_map and lab.dtype.is_floating_point and on_cpu and not bool((lab == lab.round()).all()):
            label_map = False  # TorchIO: a one-channel map with fractional values is a partial volume
        orig = None
        if image is not None:
            orig, _ = _as_batch(image)
            if orig.shape[0] != n or orig.shape[2:] != lab.shape[2:]:
                raise ValueError(f"the image {tuple(orig.shape)} must match the label map {tuple(lab.shape)} in batch "
                                 "and spatial size")
            orig = orig[:, :1].to(device=lab.device, dtype=torch.float32)
        used = None if self.used_labels is None else set(self.used_labels)
        discretized = not label_map and self.discretize
        if discretized:
            best, arg = lab.max(dim=1, keepdim=True)
            lab = arg.masked_fill(best == 0, -1)
            label_map = True
        k = self._table_size(lab, c, label_map, discretized)
        mean, std = self._draw(n, k)
        shape = (n, 1, *lab.shape[2:])
        if label_map:
            idx = lab.to(torch.int64)
            bg: Any = True  # whether labels < 0 (background) may occur
            if on_cpu:
                lo, hi = (int(idx.min()), int(idx.max())) if idx.numel() else (0, 0)
                if lo < -1 or (lo == -1 and not self.discretize):
                    raise ValueError(f"label values must be >= 0, got {lo}")
                if hi >= k:
                    raise RuntimeError(f'"mean" / "std" must define a value for each label: label {hi} found, '
                                       f"{k} values given")
                bg = lo < 0
            if bg is not False:
                bg = idx < 0
                idx = idx.clamp(0, k - 1)
            gen = np.ones((n, k), dtype=bool)
            if used is not None:
                gen[:, [j for j in range(k) if j not in used]] = False
            if self.ignore_background:
                gen[:, 0] = False
            table = np.stack([mean, std, gen], -1).astype(np.float32)  # (n, k, 3)
            tab = _host_to(torch.from_numpy(table), lab.device)
            flat = idx.reshape(n, -1)
            pick = lambda j: tab[:, :, j].gather(1, flat).view(shape)  # noqa: E731
            out = torch.addcmul(pick(0), self._normals(shape, lab.device), pick(1))
            if not gen.all():
                out *= pick(2)
            if orig is not None:
                back = bg
                if used is not None:  # unused labels are background (label 0 not with ignore_background)
                    unused = torch.zeros(k, dtype=torch.bool)
                    unused[[j for j in range(k) if j not in used and not (j == 0 and self.ignore_background)]] = True
                    back = back | _host_to(unused, lab.device)[idx]
                if back is not False:
                    out = torch.where(back, orig, out)
            return restore(out)
        # Partial volume: channel by channel, in TorchIO's order of additions.
        p = lab.to(torch.float32)
        z = self._normals((n, k, *lab.shape[2:]), lab.device)
        m_t = _host_to(torch.from_numpy(mean.astype(np.float32)), lab.device).view(n, k, 1, 1, 1)
        s_t = _host_to(torch.from_numpy(std.astype(np.float32)), lab.device).view(n, k, 1, 1, 1)
        out = torch.zeros(shape, dtype=torch.float32, device=lab.device)
        weight = torch.zeros(shape, dtype=torch.float32, device=lab.device) if orig is not None else None
        for j in range(k):
            if j == 0 and self.ignore_background:
                if weight is not None:
                    weight += p[:, :1]
                continue
            if used is not None and j not in used:
                continue
            out += (z[:, j:j + 1] * s_t[:, j:j + 1] + m_t[:, j:j + 1]) * p[:, j:j + 1]
            if weight is not None:
                weight += p[:, j:j + 1]
        if orig is not None:
            out = torch.where(weight < 0.5, orig, out)
        return restore(out)


class LabelsToImage(RandomLabelsToImage):
    """TorchIO LabelsToImage(label_key, mean, std, image_key='image_from_labels',
    used_labels=None, ignore_background=False, discretize=False): :class:`RandomLabelsToImage`
    with each tissue's mean and std given, in TorchIO's order: the i-th label present in the map
    (its sorted values; after ``discretize``, the arg-max channels present; for a partial
    volume, channel i) gets ``N(mean[i], std[i])``, and as TorchIO ``mean`` / ``std`` must hold
    exactly one value per label present. Finding the labels present reads them back from the
    device (one sync per sample on CUDA: a batch is generated sample by sample, each with its
    own labels). The normals are voxaug's Philox stream (``seed``), not torch.randn's:
    TorchIO's distribution, other values. Draws of the last call: ``last_mean`` /
    ``last_std`` (value-indexed, (1, K) per sample's call)."""

    def __init__(self, label_key: Optional[str] = None, mean: Optional[Sequence[float]] = None,
                 std: Optional[Sequence[float]] = None, image_key: str = "image_from_labels",
                 used_labels: Optional[Sequence[int]] = None, ignore_background: bool = False,
                 discretize: bool = False, seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if mean is None or std is None:
            raise ValueError("LabelsToImage needs mean and std, one value per label present (TorchIO's "
                             "LabelsToImage); RandomLabelsToImage draws them")
        values = []
        for name, seq in (("mean", mean), ("std", std)):
            try:
                v = [float(x) for x in seq]
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a sequence of numbers, got {seq!r}") from None
            if not all(np.isfinite(v)) or (name == "std" and any(x < 0 for x in v)):
                raise ValueError(f"{name} must hold finite numbers{' >= 0' if name == 'std' else ''}, got {seq!r}")
            values.append(v)
        super().__init__(label_key=label_key, used_labels=used_labels, image_key=image_key, discretize=discretize,
                         ignore_background=ignore_background, seed=seed)
        self.means, self.stds = values
        self._fixed: Optional[tuple] = None
        self._filter_args(include, exclude, keep)

    def _table_size(self, lab: torch.Tensor, channels: int, label_map: bool, discretized: bool) -> int:
        if label_map:
            present = [int(v) for v in torch.unique(lab).tolist()]
            if discretized:
                present = [v for v in present if v != -1]
            if present and present[0] < 0:
                raise ValueError(f"label values must be >= 0, got {present[0]}")
        else:
            present = list(range(channels))
        for name, given in (("mean", self.means), ("std", self.stds)):
            if len(given) != len(present):
                raise RuntimeError(f'"{name}" must define a value for each label but length of "{name}" is '
                                   f"{len(given)} while {len(present)} labels were found")
        k = max(present) + 1 if present else 1
        mean_by, std_by = np.zeros(k), np.zeros(k)
        for i, v in enumerate(present):
            mean_by[v], std_by[v] = self.means[i], self.stds[i]
        self._fixed = (mean_by, std_by)
        return k

    def _draw(self, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        mean_by, std_by = self._fixed
        self.last_mean, self.last_std = np.tile(mean_by, (n, 1)), np.tile(std_by, (n, 1))
        return self.last_mean, self.last_std

    def _generate(self, labels: Any, image: Any) -> Any:
        lab, restore = _as_batch(labels)
        if lab.shape[0] <= 1:
            return super()._generate(labels, image)
        orig = None if image is None else _as_batch(image)[0]
        if orig is not None and orig.shape[0] != lab.shape[0]:
            raise ValueError(f"the image {tuple(orig.shape)} must match the label map {tuple(lab.shape)} in batch")
        outs = [super(LabelsToImage, self)._generate(lab[i:i + 1], None if orig is None else orig[i:i + 1])
                for i in range(lab.shape[0])]
        return restore(torch.cat(outs))


# ---------------- MONAI ----------------
def _torch_dtype_of(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
    except TypeError:
        raise ValueError(f"dtype {dtype!r} has no torch equivalent") from None


class MapLabelValue:
    """MONAI MapLabelValue(orig_labels, target_labels, dtype=np.float32): every voxel holding
    orig_labels[i] takes target_labels[i] (judged on the input's values, the last pair winning
    for a repeated label), the others keep their value; the result in ``dtype`` (numpy or torch),
    the input's kind kept (a tensor / MetaTensor, or a numpy array back from numpy). Integer
    label maps with integer labels go through one lookup table on the data's device (one pass
    for any number of labels, MONAI makes one per pair); other inputs one masked fill per pair,
    as MONAI. No host sync."""

    def __init__(self, orig_labels: Sequence, target_labels: Sequence, dtype: Any = np.float32):
        if len(orig_labels) != len(target_labels):
            raise ValueError("orig_labels and target_labels must have the same length.")
        self.orig_labels, self.target_labels = list(orig_labels), list(target_labels)
        self.pair = tuple((o, t) for o, t in zip(self.orig_labels, self.target_labels) if o != t)
        self.dtype = _torch_dtype_of(dtype)

    def __call__(self, img: Any) -> Any:
        as_numpy = isinstance(img, np.ndarray)
        x = torch.from_numpy(img) if as_numpy else img
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"img must be a torch.Tensor, MetaTensor or numpy array, got {type(img).__name__}")
        ints = all(isinstance(o, (int, np.integer)) and not isinstance(o, bool) for o, _ in self.pair)
        if self.pair and ints and not x.dtype.is_floating_point and x.dtype != torch.bool:
            lo = min(int(o) for o, _ in self.pair)
            size = max(int(o) for o, _ in self.pair) - lo + 1
        if self.pair and ints and not x.dtype.is_floating_point and x.dtype != torch.bool and size <= (1 << 20):
            table = torch.arange(lo, lo + size, dtype=torch.int64).to(self.dtype)  # the identity, cast
            for o, t in self.pair:
                table[int(o) - lo] = t
            idx = x.to(torch.int64) - lo
            inside = (idx >= 0) & (idx < size)
            mapped = _host_to(table, x.device)[idx.clamp_(0, size - 1)]
            out = torch.where(inside, mapped, x.to(self.dtype))
        else:
            out = x.to(self.dtype, copy=True)
            for o, t in self.pair:
                out.masked_fill_(x == o, t)
        return out.numpy() if as_numpy else out


class MapLabelValued(_Dict):
    def __init__(self, keys, orig_labels: Sequence, target_labels: Sequence, dtype: Any = np.float32,
                 allow_missing_keys: bool = False):
        super().__init__(keys, MapLabelValue(orig_labels, target_labels, dtype), allow_missing_keys)


class LabelToMask:
    """MONAI LabelToMask(select_labels, merge_channels=False): a one-channel label map becomes the
    bool mask of the voxels holding one of ``select_labels``; a one-hot map (several channels)
    keeps the channels ``select_labels`` (their dtype); ``merge_channels`` ORs the channels into
    one bool channel. (C, D, H, W) or a (N, C, D, H, W) batch; on the data's device."""

    def __init__(self, select_labels: Union[Sequence[int], int], merge_channels: bool = False):
        self.select_labels = tuple(select_labels) if isinstance(select_labels, (list, tuple)) else (select_labels,)
        self.merge_channels = bool(merge_channels)

    def __call__(self, img: Any, select_labels: Any = None, merge_channels: bool = False) -> Any:
        labels = self.select_labels if select_labels is None else (
            tuple(select_labels) if isinstance(select_labels, (list, tuple)) else (select_labels,))
        x, restore = _as_batch(img)
        if x.shape[1] > 1:
            data = x[:, list(labels)]
        else:
            data = torch.isin(x, _host_to(torch.tensor(labels, dtype=x.dtype), x.device))
        if merge_channels or self.merge_channels:
            data = data.any(1, keepdim=True)
        return restore(data)


class LabelToMaskd(_Dict):
    def __init__(self, keys, select_labels: Union[Sequence[int], int], merge_channels: bool = False,
                 allow_missing_keys: bool = False):
        super().__init__(keys, LabelToMask(select_labels, merge_channels), allow_missing_keys)
