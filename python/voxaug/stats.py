"""Statistics-driven intensity transforms (MONAI's and TorchIO's names and arguments), backed by
the stats family of ``torch.ops.voxaug``: per-sample (or per-channel) moments and exact
percentiles are computed on the data's device and applied there, with no host round trip. A
batch (N, C, D, H, W) is processed in one pass (one sort for percentiles); a (C, D, H, W) array
is one sample.

Semantics are MONAI's NormalizeIntensity and ScaleIntensityRangePercentiles; deliberate
differences: statistics are computed in float64 (MONAI: float32 torch.mean / torch.std, and
torch.quantile or numpy.percentile), and float64 images are normalised in float64 (MONAI
converts them to float32 first). Results agree with MONAI to float32 rounding.
Array-valued subtrahend / divisor without channel_wise are broadcast against each sample voxel
by voxel, as MONAI does (see NormalizeIntensity). TorchIO's ZNormalization and
RescaleIntensity follow TorchIO's float32 arithmetic (see their notes).
"""
from __future__ import annotations

import numbers
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .transforms import (DtypeLike, _as_batch, _Dict, _host_to, _present_keys, _Subject, _torch_dtype,
                         _torchio_range)

__all__ = [
    "NormalizeIntensity", "NormalizeIntensityd", "ScaleIntensityRangePercentiles",
    "ScaleIntensityRangePercentilesd", "ZNormalization", "RescaleIntensity", "ClipIntensityPercentiles",
    "ClipIntensityPercentilesd", "HistogramNormalize", "HistogramNormalized", "HistogramStandardization",
    "HistogramStandardizationd",
]


def _finish(out: torch.Tensor, in_dtype: torch.dtype, dtype: Optional[torch.dtype]) -> torch.Tensor:
    # dtype=None: MONAI returns the input's dtype (integer images: a cast of the float result).
    if dtype is None and not in_dtype.is_floating_point:
        return out.to(in_dtype)
    return out


def _values(v: Any, name: str, channels: int, channel_wise: bool) -> Optional[list[float]]:
    if v is None:
        return None
    if isinstance(v, numbers.Number):
        if channel_wise:
            raise ValueError(f"img has {channels} channels, but {name} has 1 components.")
        return [float(v)]
    t = torch.as_tensor(np.asarray(v) if not isinstance(v, torch.Tensor) else v, dtype=torch.float64)
    if not channel_wise:
        if t.numel() != 1:  # a list or tuple: arrays and tensors take the voxel-wise path
            raise NotImplementedError(f"{name} as a {type(v).__name__} of {t.numel()} values with channel_wise=False "
                                      "is not supported (MONAI's img - list fails too); give one number, or a "
                                      "numpy array / tensor to broadcast against the image voxel by voxel")
        return [float(t.item())]
    if t.dim() != 1:
        raise NotImplementedError(f"{name} must hold one number per channel, got shape {tuple(t.shape)}")
    if t.numel() != channels:
        raise ValueError(f"img has {channels} channels, but {name} has {t.numel()} components.")
    return [float(x) for x in t.tolist()]


class NormalizeIntensity:
    """MONAI NormalizeIntensity: ``(img - subtrahend) / divisor`` per sample (per channel with
    ``channel_wise``); the mean / population std of the sample (channel) when not given; a zero
    divisor counts as 1. ``nonzero``: only values != 0 enter the statistics and change (a sample of
    zeros is returned unchanged). Output dtype ``dtype`` (None: the input's).

    A numpy array or tensor ``subtrahend`` / ``divisor`` with ``channel_wise=False`` is MONAI's
    voxel-wise form: it is broadcast against each sample's (C, D, H, W) image (so a batch
    (N, C, ...) gives per sample what MONAI gives for one image), converted to the computing
    dtype first (float32; float64 for float64 images) with zeros of an array divisor read as 1;
    with ``nonzero`` it must have the sample's exact shape (MONAI indexes it with the image's
    nonzero mask) and only voxels != 0 change. Computed with torch elementwise ops on the data's
    device: an array on another device is copied there (from the CPU pinned and non-blocking),
    statistics come from ``ops.moments``, no host sync. Shapes MONAI refuses raise ValueError
    (MONAI: IndexError / RuntimeError from indexing or broadcasting); so does an array with more
    than 4 dimensions, which MONAI would broadcast into a new leading image axis. A
    per-channel CUDA tensor with ``channel_wise`` takes the same device path (no host read).

    Gradients flow through the statistics (the mean and std of the sample or channel, as torch's
    layer_norm / instance_norm); MONAI takes them as Python numbers, so its gradient treats them
    as constants."""

    def __init__(self, subtrahend: Union[Sequence[float], float, None] = None,
                 divisor: Union[Sequence[float], float, None] = None, nonzero: bool = False,
                 channel_wise: bool = False, dtype: DtypeLike = np.float32):
        self.subtrahend, self.divisor = subtrahend, divisor
        self.nonzero, self.channel_wise = bool(nonzero), bool(channel_wise)
        self.dtype = _torch_dtype(dtype)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        c = x.shape[1]
        if self._on_device_path(self.subtrahend) or self._on_device_path(self.divisor):
            return restore(_finish(self._normalize_on_device(x), x.dtype, self.dtype))
        sub = _values(self.subtrahend, "subtrahend", c, self.channel_wise)
        div = _values(self.divisor, "divisor", c, self.channel_wise)
        out = ops.normalize_intensity(x, sub, div, self.nonzero, self.channel_wise, self.dtype)
        return restore(_finish(out, x.dtype, self.dtype))

    def _on_device_path(self, v: Any) -> bool:
        """An array / tensor without channel_wise (voxel-wise), or a per-channel CUDA tensor
        (reading it on the host would sync)."""
        if self.channel_wise:
            return isinstance(v, torch.Tensor) and v.device.type != "cpu"
        return isinstance(v, (np.ndarray, torch.Tensor))

    def _operand(self, v: Any, name: str, x: torch.Tensor, ct: torch.dtype,
                 stats: Optional[torch.Tensor]) -> Union[float, torch.Tensor]:
        """`subtrahend` or `divisor` as a number or a tensor that broadcasts against (N, C, D, H, W)
        in the computing dtype `ct` on x's device; a divisor's zeros read as 1 (MONAI)."""
        is_div = name == "divisor"
        n, c = x.shape[:2]
        if v is None:  # the sample's (channel's) mean / population std, float64 from ops.moments
            val = stats[:, :, 2 if is_div else 1]
            if is_div:
                val = torch.where(val == 0, torch.ones((), dtype=val.dtype, device=val.device), val)
            return val.to(ct).reshape(n, -1, 1, 1, 1)
        if not isinstance(v, (np.ndarray, torch.Tensor)):  # a number (or one per channel) beside an array
            vals = _values(v, name, c, self.channel_wise)
            if is_div:
                vals = [1.0 if f == 0.0 else f for f in vals]
            if len(vals) == 1:
                return vals[0]
            return _host_to(torch.tensor(vals, dtype=ct).reshape(c, 1, 1, 1), x.device)
        if isinstance(v, np.ndarray):
            if v.dtype.kind not in "biuf":
                raise ValueError(f"{name} must hold real numbers, got a numpy array of dtype {v.dtype}")
            t = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float64 if ct == torch.float64 else np.float32))
        else:
            if v.dtype.is_complex:
                raise ValueError(f"{name} must hold real numbers, got a tensor of dtype {v.dtype}")
            t = v.detach()
        sample = tuple(x.shape[1:])
        if self.channel_wise:  # a per-channel CUDA tensor
            if t.dim() != 1:
                raise NotImplementedError(f"{name} must hold one number per channel, got shape {tuple(t.shape)}")
            if t.shape[0] != c:
                raise ValueError(f"img has {c} channels, but {name} has {t.shape[0]} components.")
            t = t.reshape(c, 1, 1, 1)
        elif t.dim() > 4:
            raise ValueError(f"{name} must broadcast against one sample's (C, D, H, W) = {sample} without adding "
                             f"dimensions, got {t.dim()}-D shape {tuple(t.shape)}")
        elif self.nonzero and tuple(t.shape) != sample:
            raise ValueError(f"{name} with nonzero=True must have one sample's shape (C, D, H, W) = {sample} (MONAI "
                             f"indexes it with the image's nonzero mask), got {tuple(t.shape)}")
        else:
            try:
                torch.broadcast_shapes(tuple(t.shape), sample)
            except RuntimeError:
                raise ValueError(f"{name} of shape {tuple(t.shape)} does not broadcast against one sample's "
                                 f"(C, D, H, W) = {sample}") from None
        if t.device != x.device:
            t = _host_to(t.to(ct).contiguous(), x.device)
        t = t.to(ct)
        if is_div:
            t = torch.where(t == 0, torch.ones((), dtype=ct, device=t.device), t)
        return t

    def _normalize_on_device(self, x: torch.Tensor) -> torch.Tensor:
        """MONAI's _normalize with tensor operands, for every sample at once: (x - sub) / div,
        only where x != 0 with nonzero. Torch elementwise ops on x's device, no host sync."""
        ct = torch.float64 if x.dtype == torch.float64 else torch.float32
        stats = None
        if self.subtrahend is None or self.divisor is None:
            stats = ops.moments(x, self.channel_wise, self.nonzero)
        sub = self._operand(self.subtrahend, "subtrahend", x, ct, stats)
        div = self._operand(self.divisor, "divisor", x, ct, stats)
        xf = x.to(ct)
        out = (xf - sub) / div
        if self.nonzero:
            out = torch.where(xf != 0, out, xf)
        return out.to(self.dtype or (x.dtype if x.is_floating_point() else torch.float32))


class ScaleIntensityRangePercentiles:
    """MONAI ScaleIntensityRangePercentiles: per sample (per channel with ``channel_wise``)
    ScaleIntensityRange(a_min = lower-th percentile, a_max = upper-th percentile, b_min, b_max,
    clip); ``relative`` maps to the same percentiles of [b_min, b_max]. Percentiles are exact
    (numpy.percentile's linear method). Output dtype ``dtype`` (None: the input's). Gradients
    flow through the percentiles and the clamp, as MONAI's (torch.quantile)."""

    def __init__(self, lower: float, upper: float, b_min: Optional[float], b_max: Optional[float],
                 clip: bool = False, relative: bool = False, channel_wise: bool = False,
                 dtype: DtypeLike = np.float32):
        if lower < 0.0 or lower > 100.0:
            raise ValueError("Percentiles must be in the range [0, 100]")
        if upper < 0.0 or upper > 100.0:
            raise ValueError("Percentiles must be in the range [0, 100]")
        self.lower, self.upper, self.b_min, self.b_max = float(lower), float(upper), b_min, b_max
        self.clip, self.relative, self.channel_wise = bool(clip), bool(relative), bool(channel_wise)
        self.dtype = _torch_dtype(dtype)

    def __call__(self, img: Any) -> Any:
        if self.relative and (self.b_min is None or self.b_max is None):
            raise ValueError("If it is relative, b_min and b_max should not be None.")
        if self.clip and self.b_min is None and self.b_max is None:
            raise ValueError("clip=True needs b_min or b_max (MONAI's torch.clamp fails without both)")
        x, restore = _as_batch(img)
        out = ops.scale_intensity_range_percentiles(x, self.lower, self.upper, self.b_min, self.b_max, self.clip,
                                                    self.relative, self.channel_wise, self.dtype)
        return restore(_finish(out, x.dtype, self.dtype))


class ClipIntensityPercentiles:
    """MONAI ClipIntensityPercentiles: clip each sample (each channel with ``channel_wise``) to
    its ``lower`` / ``upper`` percentiles (None: 0 / 100 for the hard clip, that side untouched
    for the soft one); with ``sharpness_factor`` MONAI's soft clip ``x + softplus(-c (x - lo)) / c
    - softplus(c (x - hi)) / c`` in ``dtype``. The result has the image's dtype (MONAI converts
    back); the percentiles are converted to it before use, as MONAI's are. Percentiles exact on
    the data's device (``ops.percentiles``; MONAI: torch.quantile or numpy.percentile), no host
    sync unless ``return_clipping_values``, which reads them to put a list of (lower, upper) per
    channel (per sample for a batch: a list of those lists) in a MetaTensor's
    ``meta["clipping_values"]``, as MONAI does."""

    def __init__(self, lower: Optional[float], upper: Optional[float], sharpness_factor: Optional[float] = None,
                 channel_wise: bool = False, return_clipping_values: bool = False, dtype: DtypeLike = np.float32):
        if lower is None and upper is None:
            raise ValueError("lower or upper percentiles must be provided")
        for v in (lower, upper):
            if v is not None and not 0.0 <= v <= 100.0:
                raise ValueError("Percentiles must be in the range [0, 100]")
        if upper is not None and lower is not None and upper < lower:
            raise ValueError("upper must be greater than or equal to lower")
        if sharpness_factor is not None and not sharpness_factor > 0:
            raise ValueError("sharpness_factor must be greater than 0")
        self.lower, self.upper, self.sharpness_factor = lower, upper, sharpness_factor
        self.channel_wise, self.return_clipping_values = bool(channel_wise), bool(return_clipping_values)
        self.dtype = _torch_dtype(dtype)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        soft = self.sharpness_factor is not None
        q = [0.0 if self.lower is None else float(self.lower), 100.0 if self.upper is None else float(self.upper)]
        pct = ops.percentiles(x, q, self.channel_wise).to(x.dtype)  # (N, 1 or C, 2), MONAI's dtype
        shape = (x.shape[0], pct.shape[1], 1, 1, 1)
        lo, hi = pct[..., 0].reshape(shape), pct[..., 1].reshape(shape)
        if not soft:
            out = torch.clamp(x, lo, hi)
        else:
            c = float(self.sharpness_factor)
            ct = self.dtype if self.dtype is not None else x.dtype
            a = x.to(ct)
            out = a
            if self.lower is not None:
                out = out + torch.nn.functional.softplus(-c * (a - lo.to(ct))) / c
            if self.upper is not None:
                out = out - torch.nn.functional.softplus(c * (a - hi.to(ct))) / c
            out = out.to(x.dtype)
        result = restore(out)
        if self.return_clipping_values and hasattr(result, "meta"):
            rows = pct.double().cpu().tolist()  # the one host read, asked for
            values = [[(None if soft and self.lower is None else r[0], None if soft and self.upper is None else r[1])
                       for r in sample] for sample in rows]
            result.meta["clipping_values"] = values[0] if img.dim() == 4 else values
        return result


class ClipIntensityPercentilesd(_Dict):
    def __init__(self, keys, lower: Optional[float], upper: Optional[float], sharpness_factor: Optional[float] = None,
                 channel_wise: bool = False, dtype: DtypeLike = np.float32, allow_missing_keys: bool = False):
        super().__init__(keys, ClipIntensityPercentiles(lower, upper, sharpness_factor, channel_wise, False, dtype),
                         allow_missing_keys)


# ---------------- TorchIO ZNormalization / RescaleIntensity ----------------
def _torchio_mask(x: torch.Tensor, masking_method: Any) -> Optional[torch.Tensor]:
    """TorchIO's masking_method as an (N, C, D, H, W) bool mask on x's device (None: every voxel).
    A callable gets each sample's (C, D, H, W) tensor, as TorchIO gives it the image's data; a
    tensor or array (a label map: nonzero is inside, as TorchIO reads one) broadcasts against the
    batch. A label map's name resolves when the transform is called on a dictionary holding it
    (TorchIO's Subject); anatomical sides are refused."""
    if masking_method is None:
        return None
    if isinstance(masking_method, str):
        raise ValueError(f"masking_method {masking_method!r}: a name is looked up in the dictionary the transform is "
                         "called on (TorchIO's Subject), and this call has none holding it; anatomical sides are "
                         "not supported: pass the label map (a tensor or array) or a callable")
    if callable(masking_method):
        masks = []
        for n in range(x.shape[0]):
            m = torch.as_tensor(masking_method(x[n]))
            if tuple(m.shape) != tuple(x.shape[1:]):
                raise ValueError(f"masking_method must return a mask of the image's shape {tuple(x.shape[1:])}, "
                                 f"got {tuple(m.shape)}")
            masks.append(_host_to(m, x.device) != 0)
        return torch.stack(masks)
    if isinstance(masking_method, (torch.Tensor, np.ndarray)):
        m = _host_to(torch.as_tensor(masking_method), x.device)
        m = m[None] if m.dim() == 4 else m
        try:
            return (m != 0).expand(x.shape)
        except RuntimeError:
            raise ValueError(f"masking_method: a mask of shape {tuple(torch.as_tensor(masking_method).shape)} does "
                             f"not broadcast against the image batch {tuple(x.shape)}") from None
    raise ValueError(f"masking_method must be None, a callable, or a mask tensor / array, got "
                     f"{type(masking_method).__name__}")


def _masked_moments(x: torch.Tensor, mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(count, mean, population std) per sample in float64, (N,) each, without a host sync."""
    if mask is None:
        mom = ops.moments(x, False, False)[:, 0]
        return mom[:, 0], mom[:, 1], mom[:, 2]
    m = mask.reshape(x.shape[0], -1).to(torch.float64)
    v = x.reshape(x.shape[0], -1).to(torch.float64)
    n = m.sum(1)
    mean = (v * m).sum(1) / n
    var = (((v - mean[:, None]) * m) ** 2).sum(1) / n
    return n, mean, var.sqrt()


class ZNormalization(_Subject):
    """TorchIO ZNormalization: ``(img - mean) / std`` per sample, mean and std (unbiased, as
    torch.std) of the voxels in the mask (``masking_method``: None for all, a callable of each
    sample's (C, D, H, W) tensor, or a mask / label tensor), over all channels together. Float32
    result, as TorchIO's. Statistics in float64 on the data's device (``ops.moments`` without a
    mask), no host sync. Deliberate difference: a zero std divides by 1 (MONAI's convention)
    where TorchIO raises, since raising would need a host read of the statistics."""

    def __init__(self, masking_method: Any = None, label_keys: Sequence[Any] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.masking_method = masking_method
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        xs = x.float() if x.dtype == torch.float64 else x  # the values TorchIO's .float() sees
        n, mean, pstd = _masked_moments(xs, _torchio_mask(x, self.masking_method))
        std = (pstd * torch.sqrt(n / (n - 1))).float()
        std = torch.where(std == 0, torch.ones((), dtype=std.dtype, device=std.device), std)
        shape = (-1, 1, 1, 1, 1)
        # One float32 buffer (a copy even of float32 data, as TorchIO's clone), then in place.
        out = xs.to(torch.float32, copy=True)
        return restore(out.sub_(mean.float().reshape(shape)).div_(std.reshape(shape)))


class RescaleIntensity(_Subject):
    """TorchIO RescaleIntensity: per sample, clip to the ``percentiles`` of the masked voxels
    (numpy's linear method), then map [in_min, in_max] (the clipped image's range, or
    ``in_min_max``) linearly onto ``out_min_max``, in float32 in TorchIO's order of operations.
    Percentiles without a mask by ``ops.percentiles`` (exact, on the device, no host sync); with a
    mask by torch.quantile per sample (a host sync on CUDA). Samples TorchIO returns unchanged (an
    empty mask, or in_min == in_max) come back as their float32 copy, without TorchIO's warning."""

    def __init__(self, out_min_max: Union[float, Sequence[float]] = (0, 1),
                 percentiles: Union[float, Sequence[float]] = (0, 100), masking_method: Any = None,
                 in_min_max: Optional[Sequence[float]] = None, label_keys: Sequence[Any] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.out_min, self.out_max = _torchio_range(out_min_max, "out_min_max")
        self.percentiles = _torchio_range(percentiles, "percentiles", 0.0, 100.0)
        self.in_min_max = None if in_min_max is None else _torchio_range(in_min_max, "in_min_max")
        self.masking_method = masking_method
        self._subject_keys(label_keys, include, exclude, keep)

    def _cutoffs(self, xf: torch.Tensor, mask: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, 2) float64 percentiles and (N,) 'rescale this sample'."""
        if mask is None:
            cut = ops.percentiles(xf, list(self.percentiles), False)[:, 0]
            return cut, torch.ones(xf.shape[0], dtype=torch.bool, device=xf.device)
        q = torch.tensor(self.percentiles, dtype=torch.float64, device=xf.device) / 100.0
        rows, ok = [], []
        for n in range(xf.shape[0]):
            v = xf[n][mask[n]].double()
            ok.append(v.numel() > 0)
            rows.append(torch.quantile(v, q) if v.numel() else torch.zeros(2, dtype=torch.float64, device=xf.device))
        return torch.stack(rows), torch.tensor(ok, device=xf.device)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        xf = x.float()
        cut, ok = self._cutoffs(xf, _torchio_mask(xf, self.masking_method))
        shape = (-1, 1, 1, 1, 1)
        lo, hi = cut[:, 0].float().reshape(shape), cut[:, 1].float().reshape(shape)
        if self.in_min_max is None:
            in_min, in_range = lo, hi - lo  # the clipped image's min and max (float32)
        else:
            in_min = self.in_min_max[0]
            in_range = torch.full_like(lo, self.in_min_max[1] - self.in_min_max[0])
        keep = ~ok.reshape(shape) | (in_range == 0)
        # Samples TorchIO leaves unchanged get neutral values (clip to (-inf, inf), - 0, / 1,
        # * 1, + -0.0: every value and its sign kept), so no per-sample branch or host read.
        f32 = dict(dtype=torch.float32, device=xf.device)
        one, inf = torch.ones((), **f32), torch.full((), float("inf"), **f32)
        lo, hi = torch.where(keep, -inf, lo), torch.where(keep, inf, hi)
        in_min = torch.where(keep, torch.zeros((), **f32),
                             in_min if isinstance(in_min, torch.Tensor) else torch.full((), float(in_min), **f32))
        in_range = torch.where(keep, one, in_range)
        out_range = torch.where(keep, one, torch.full((), float(self.out_max - self.out_min), **f32))
        out_min = torch.where(keep, torch.full((), -0.0, **f32), torch.full((), float(self.out_min), **f32))
        # One new buffer, then in-place passes (each intermediate would be a fresh large
        # allocation); the numbers are float32, as numpy's scalars act on TorchIO's array.
        out = torch.maximum(xf, lo)
        torch.minimum(out, hi, out=out)
        return restore(out.sub_(in_min).div_(in_range).mul_(out_range).add_(out_min))


class NormalizeIntensityd(_Dict):
    def __init__(self, keys, subtrahend=None, divisor=None, nonzero: bool = False, channel_wise: bool = False,
                 dtype: DtypeLike = np.float32, allow_missing_keys: bool = False):
        super().__init__(keys, NormalizeIntensity(subtrahend, divisor, nonzero, channel_wise, dtype),
                         allow_missing_keys)


class ScaleIntensityRangePercentilesd(_Dict):
    def __init__(self, keys, lower: float, upper: float, b_min: Optional[float], b_max: Optional[float],
                 clip: bool = False, relative: bool = False, channel_wise: bool = False,
                 dtype: DtypeLike = np.float32, allow_missing_keys: bool = False):
        super().__init__(keys, ScaleIntensityRangePercentiles(lower, upper, b_min, b_max, clip, relative,
                                                              channel_wise, dtype), allow_missing_keys)


class HistogramNormalize:
    """MONAI HistogramNormalize(num_bins=256, min=0, max=255, mask=None, dtype=float32): histogram
    equalisation of each sample (all channels together), as MONAI's equalize_hist with
    scikit-image: a histogram of `num_bins` equal bins between the sample's min and max (numpy's
    float32 edges, [e_i, e_i+1), the last bin closed; a constant sample widens to +-0.5), its
    cumulative counts rescaled to [min, max] in float32 (MONAI's rescale_array), then every voxel
    mapped through np.interp on the bin centres (float64; below / above the centres: the first /
    last value). `mask` (or the call's `mask`): only those voxels make the histogram (every voxel
    is mapped). CPU: numpy's histogram and interp per sample (MONAI's computation, its speed);
    CUDA: the same rules in torch (searchsorted, scatter-adds), batched, no host sync.
    Floating images only (scikit-image histograms integer images per integer value instead:
    convert those to float first); a NaN or infinite sample makes its histogram undefined
    (numpy raises; here its output is NaN)."""

    def __init__(self, num_bins: int = 256, min: int = 0, max: int = 255, mask: Any = None,  # noqa: A002
                 dtype: DtypeLike = np.float32):
        if not isinstance(num_bins, (int, np.integer)) or num_bins < 1:
            raise ValueError(f"num_bins must be a positive int, got {num_bins!r}")
        self.num_bins, self.min, self.max = int(num_bins), min, max
        self.mask = mask
        self.dtype = _torch_dtype(dtype) if dtype is not None else None

    def __call__(self, img: Any, mask: Any = None) -> Any:
        x, restore = _as_batch(img)
        if not x.is_floating_point():
            raise TypeError(f"HistogramNormalize needs a floating image, got {x.dtype} (scikit-image histograms "
                            "integer images per value: convert to float first)")
        n = x.shape[0]
        t = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        flat = x.reshape(n, -1).to(t)
        m = mask if mask is not None else self.mask
        keep = None
        if m is not None:
            mk = _host_to(torch.as_tensor(m).to(torch.bool), x.device)  # a host mask: no blocking copy
            keep = (mk if mk.dim() == x.dim() else mk[None]).expand(x.shape).reshape(n, -1)
        equalize = _equalize_numpy if x.device.type == "cpu" else _equalize_device
        out = equalize(flat, keep, self.num_bins, self.min, self.max).reshape(x.shape)
        return restore(out.to(self.dtype if self.dtype is not None else x.dtype))


def _rescale_cum(cum: torch.Tensor, minv, maxv) -> torch.Tensor:
    """MONAI's rescale_array(cum, minv, maxv) in float32, per row."""
    cum = cum.to(torch.float32)
    mina, maxa = cum.amin(1, keepdim=True), cum.amax(1, keepdim=True)
    return torch.where(mina == maxa, cum * minv, (cum - mina) / (maxa - mina) * (maxv - minv) + minv)


def _equalize_numpy(flat: torch.Tensor, keep: Optional[torch.Tensor], k: int, minv, maxv) -> torch.Tensor:
    """The CPU path: numpy's histogram and interp per sample, exactly MONAI's computation
    (float64 out). Faster on the CPU than the device path's searchsorted / gathers in torch."""
    out = np.empty(tuple(flat.shape), dtype=np.float64)
    a = flat.numpy()
    for i in range(a.shape[0]):
        hv = a[i] if keep is None else a[i][keep[i].numpy()]
        hist, edges = np.histogram(hv, bins=k)
        centers = (edges[:-1] + edges[1:]) / 2.0
        cum = _rescale_cum(torch.from_numpy(hist.cumsum())[None], minv, maxv)[0].numpy()
        out[i] = np.interp(a[i], centers, cum)
    return torch.from_numpy(out)


def _equalize_device(flat: torch.Tensor, keep: Optional[torch.Tensor], k: int, minv, maxv) -> torch.Tensor:
    """The device path (any device; tested on the CPU against MONAI): numpy's rules in torch, no
    host sync. Edges as numpy's float linspace ((hi - lo) / k steps, the last edge hi), bins
    [e_i, e_i+1) with the last closed (searchsorted), counts by scatter-add; np.interp on the
    centres in float64 (below / above them: the first / last value; numpy's retry from the right
    point when a slope overflows)."""
    n, t, dev = flat.shape[0], flat.dtype, flat.device
    inf = torch.full((), float("inf"), dtype=t, device=dev)  # torch.tensor(x, device=cuda) copies with a sync
    lo = (flat if keep is None else torch.where(keep, flat, inf)).amin(1)
    hi = (flat if keep is None else torch.where(keep, flat, -inf)).amax(1)
    same = lo == hi  # numpy widens a degenerate range by 0.5 each side
    lo, hi = torch.where(same, lo - 0.5, lo), torch.where(same, hi + 0.5, hi)
    step = (hi - lo) / k
    edges = torch.arange(k + 1, dtype=t, device=dev)[None] * step[:, None] + lo[:, None]
    edges[:, -1] = hi
    idx = (torch.searchsorted(edges.contiguous(), flat.contiguous(), right=True) - 1).clamp_(0, k - 1)
    weight = torch.ones_like(idx) if keep is None else keep.to(idx.dtype)
    hist = torch.zeros(n, k, dtype=idx.dtype, device=dev).scatter_add_(1, idx, weight)
    fp = _rescale_cum(hist.cumsum(1), minv, maxv).to(torch.float64)
    centers = ((edges[:, :-1] + edges[:, 1:]) / 2.0).to(torch.float64)
    xv = flat.to(torch.float64)
    if k == 1:
        return fp[:, :1].expand_as(xv).clone()
    j = (torch.searchsorted(centers.contiguous(), xv.contiguous(), right=True) - 1).clamp_(0, k - 2)
    slopes = (fp[:, 1:] - fp[:, :-1]) / (centers[:, 1:] - centers[:, :-1])
    s = slopes.gather(1, j)
    x0, y0 = centers.gather(1, j), fp.gather(1, j)
    x1, y1 = centers.gather(1, j + 1), fp.gather(1, j + 1)
    res = s * (xv - x0) + y0
    res = torch.where(torch.isnan(res), s * (xv - x1) + y1, res)
    res = torch.where(torch.isnan(res) & (y0 == y1), y0, res)
    res = torch.where(xv < centers[:, :1], fp[:, :1], res)
    return torch.where(xv >= centers[:, -1:], fp[:, -1:], res)


class HistogramNormalized(_Dict):
    """MONAI HistogramNormalized(keys, num_bins, min, max, mask=None, mask_key=None, dtype)."""

    def __init__(self, keys, num_bins: int = 256, min: int = 0, max: int = 255, mask: Any = None,  # noqa: A002
                 mask_key: Optional[str] = None, dtype: DtypeLike = np.float32, allow_missing_keys: bool = False):
        super().__init__(keys, HistogramNormalize(num_bins, min, max, mask, dtype), allow_missing_keys)
        self.mask_key = mask_key

    def __call__(self, data):
        if self.mask_key is None:
            return super().__call__(data)
        out = dict(data)
        for _, key in _present_keys(data, self.keys, self.allow_missing_keys):
            out[key] = self.transform(data[key], mask=data[self.mask_key])
        return out


# ---------------- TorchIO HistogramStandardization (Nyul & Udupa) ----------------
_HS_CUTOFF = (0.01, 0.99)  # TorchIO's DEFAULT_CUTOFF
_HS_RANGE = (0.0, 100.0)  # its STANDARD_RANGE
_HS_USED = [0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12]  # its range_to_use: the landmarks without the quartiles 25 / 75


def _hs_percentiles(cutoff_percent: Sequence[float]) -> list[float]:
    """TorchIO's _get_percentiles: the two cutoffs, the quartiles and the deciles, sorted, unique."""
    return sorted(set([float(v) for v in cutoff_percent] + [25.0, 50.0, 75.0] + [10.0 * k for k in range(1, 10)]))


def _masked_percentiles(x: torch.Tensor, mask: Optional[torch.Tensor], q: Sequence[float],
                        by_sort: Optional[bool] = None) -> torch.Tensor:
    """(N, len(q)) float64: numpy.percentile (linear) of each sample's voxels in `mask` (every channel
    together), on the data's device without a host sync. Without a mask ops.percentiles; with one,
    on the CPU ops.percentiles of each sample's masked voxels, on a GPU a sort of each sample
    (voxels outside the mask as +inf, after the n inside) and numpy's virtual index
    q / 100 * (n - 1) and lerp (include/voxaug/detail/stats.h). A NaN inside gives NaN (as numpy);
    an empty mask gives NaN. `by_sort` picks the way (tests run the GPU's on the CPU)."""
    if mask is None:
        return ops.percentiles(x.reshape(x.shape[0], 1, 1, 1, -1), list(q), False)[:, 0]
    if not (x.device.type != "cpu" if by_sort is None else by_sort):  # the CPU: no sync to avoid
        rows = []
        for n in range(x.shape[0]):
            v = x[n].reshape(-1)[mask[n].reshape(-1)]
            rows.append(ops.percentiles(v.reshape(1, 1, 1, 1, -1), list(q), False)[0, 0] if v.numel() else
                        torch.full((len(q),), float("nan"), dtype=torch.float64))
        return torch.stack(rows)
    n_s = x.shape[0]
    flat = x.reshape(n_s, -1).double()
    inside = mask.reshape(n_s, -1)
    inf = torch.full((), float("inf"), dtype=torch.float64, device=x.device)
    srt = torch.sort(torch.where(inside, flat, inf), dim=1).values
    n = inside.sum(1, dtype=torch.int64)
    qs = _host_to(torch.tensor([float(v) for v in q], dtype=torch.float64), x.device)
    pos = (qs[None] / 100.0) * (n - 1).double()[:, None]
    lo = torch.minimum(pos.clamp(min=0).floor().long(), (n - 1).clamp(min=0)[:, None])
    w = pos - lo.double()
    hi = torch.minimum(lo + 1, (n - 1).clamp(min=0)[:, None])
    a, b = srt.gather(1, lo), srt.gather(1, hi)
    d = b - a
    val = torch.where(w < 0.5, a + d * w, b - d * (1.0 - w))
    bad = (n == 0) | (torch.isnan(flat) & inside).any(1)
    return torch.where(bad[:, None], torch.full((), float("nan"), dtype=torch.float64, device=x.device), val)


def _landmarks_array(v: Any) -> np.ndarray:
    """A landmarks vector: an array, a tensor, or a path to a .npy file (TorchIO's forms)."""
    if isinstance(v, (str, bytes)) or hasattr(v, "__fspath__"):
        v = np.load(v)
    a = np.asarray(torch.as_tensor(v).cpu() if isinstance(v, torch.Tensor) else v, dtype=np.float64).reshape(-1)
    if a.shape[0] != 13 or not np.all(np.isfinite(a)):
        raise ValueError(f"landmarks must be 13 finite values (HistogramStandardization.train's output), got "
                         f"{a.shape[0]} values" + ("" if a.shape[0] != 13 else " with NaN / inf"))
    return a


class HistogramStandardization(_Subject):
    """TorchIO HistogramStandardization (Nyul & Udupa): each sample's intensity landmarks (the
    1st / 99th percentiles and the deciles of its masked voxels, all channels together) mapped
    piecewise linearly onto trained ``landmarks`` (13 values from :meth:`train`, a tensor / array or
    a .npy path), the first and last pieces extended beyond; TorchIO's arithmetic (float64 slopes
    and intercepts, pieces by numpy.digitize's rule, a piece whose landmarks are closer than 1e-5
    flat), float32 result. On the data's device for a whole batch, no host sync (masked
    percentiles by a sort of each sample). ``masking_method``: None (every voxel), a callable of
    each sample's (C, D, H, W) tensor, or a mask / label tensor. Deliberate difference: an empty mask
    gives NaN where TorchIO's numpy.percentile raises."""

    def __init__(self, landmarks: Any, masking_method: Any = None, label_keys: Sequence[Any] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.landmarks = _landmarks_array(landmarks)
        self.masking_method = masking_method
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        xf = x.float()  # TorchIO: astype(np.float32)
        q = _hs_percentiles(100.0 * np.array([min(max(0.0, _HS_CUTOFF[0]), 0.09), max(min(1.0, _HS_CUTOFF[1]), 0.91)]))
        perc = _masked_percentiles(xf, _torchio_mask(x, self.masking_method), q)  # (N, 13)
        used = _host_to(torch.tensor(_HS_USED), x.device)
        rp = perc.index_select(1, used)  # (N, 11)
        rm = _host_to(torch.from_numpy(self.landmarks[_HS_USED]), x.device)  # (11,)
        diff_perc = rp[:, 1:] - rp[:, :-1]
        inf = torch.full((), float("inf"), dtype=torch.float64, device=x.device)
        diff_perc = torch.where(diff_perc < 1e-5, inf, diff_perc)
        slope = (rm[1:] - rm[:-1])[None] / diff_perc  # (N, 10)
        intercept = rm[:-1][None] - slope * rp[:, :-1]
        # Per voxel (ops.piecewise_linear): the piece by numpy.digitize(x, edges, right=False), then
        # slope * x + intercept in float64, rounded to float32.
        table = torch.cat([rp[:, 1:-1], slope, intercept], 1)
        return restore(ops.piecewise_linear(xf, table, len(_HS_USED) - 1))

    @staticmethod
    def train(images: Sequence[Any], cutoff: Optional[Sequence[float]] = None, mask_path: Any = None,
              masking_function: Optional[Any] = None, output_path: Any = None) -> np.ndarray:
        """TorchIO's HistogramStandardization.train: the average landmarks (13 float64 values) of
        `images` (tensors / arrays of one image each, or NIfTI paths read with nibabel), each image's
        percentiles of its voxels in the mask (``masking_function(image)``, else `mask_path`: one
        mask for all or one per image, a path or a tensor; else every voxel), mapped onto [0, 100]
        by its cutoff percentiles and averaged. The percentiles run on each image's device;
        `output_path` (.npy or .txt, TorchIO's formats) saves the result."""
        cut = _HS_CUTOFF if cutoff is None else tuple(float(v) for v in cutoff)
        q = _hs_percentiles(100.0 * np.array(cut))
        masks = None
        if mask_path is not None and isinstance(mask_path, Sequence) and not isinstance(mask_path, (str, bytes)):
            masks = list(mask_path)
            if len(masks) != len(images):
                raise ValueError(f"Different number of images ({len(images)}) and mask ({len(masks)}) paths found")
        rows = []
        for i, image in enumerate(images):
            t = _read_volume(image)
            if masking_function is not None:
                m = torch.as_tensor(masking_function(t)).to(t.device) != 0
            elif mask_path is None:
                m = None
            else:
                m = _read_volume(masks[i] if masks is not None else mask_path).to(t.device) > 0
            rows.append(_masked_percentiles(t[None], None if m is None else m.reshape(1, -1), q)[0].cpu().numpy())
        db = np.vstack(rows)
        pc1, pc2 = db[:, 0], db[:, -1]
        s1, s2 = _HS_RANGE
        with np.errstate(divide="ignore", invalid="ignore"):
            slopes = np.nan_to_num((s2 - s1) / (pc2 - pc1))
        intercepts = np.mean(s1 - slopes * pc1)
        mapping = slopes.dot(db) / len(db) + intercepts
        if output_path is not None:
            import pathlib

            path = pathlib.Path(output_path).expanduser()
            if path.suffix == ".txt":
                path.write_text(f'image {" ".join(map(str, mapping))}')
            elif path.suffix == ".npy":
                np.save(path, mapping)
        return mapping


def _read_volume(v: Any) -> torch.Tensor:
    """An image as a tensor (C?, ...): a tensor as is, an array, or a NIfTI path (nibabel)."""
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, np.ndarray):
        return torch.from_numpy(v)
    import nibabel as nib

    return torch.from_numpy(np.asarray(nib.load(str(v)).dataobj))[None]  # (1, ...) as TorchIO reads it


class HistogramStandardizationd:
    """TorchIO's form: ``landmarks`` a dict of key -> landmarks (arrays, tensors or .npy paths) or a
    path to a .pt / .pth file holding one; each key of the dict present in the data is standardised
    with its landmarks (``keys`` limits them)."""

    def __init__(self, landmarks: Any, masking_method: Any = None, keys: Optional[Sequence[str]] = None,
                 allow_missing_keys: bool = True):
        if isinstance(landmarks, (str, bytes)) or hasattr(landmarks, "__fspath__"):
            import pathlib

            suffix = pathlib.Path(landmarks).suffix
            if suffix not in (".pt", ".pth"):
                raise ValueError(f'The landmarks file must have extension .pt or .pth, not "{suffix}"')
            landmarks = torch.load(landmarks, weights_only=False)
        if not isinstance(landmarks, dict):
            raise ValueError("landmarks must be a dict of key -> landmarks or a .pt / .pth path, got "
                             f"{type(landmarks).__name__}")
        self.transforms = {k: HistogramStandardization(v, masking_method) for k, v in landmarks.items()}
        self.keys = list(self.transforms) if keys is None else list(keys)
        for k in self.keys:
            if k not in self.transforms:
                raise KeyError(f'Image name "{k}" should be a key in the landmarks dictionary, whose keys are '
                               f"{tuple(self.transforms)}")
        self.allow_missing_keys = allow_missing_keys

    def __call__(self, data):
        d = dict(data)
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transforms[key](d[key])
        return d
