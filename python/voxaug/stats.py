"""Statistics-driven intensity transforms (MONAI names and arguments), backed by the stats
family of ``torch.ops.voxaug``: per-sample (or per-channel) moments and exact percentiles are
computed on the data's device and applied there, with no host round trip. A batch
(N, C, D, H, W) is processed in one pass (one sort for percentiles); a (C, D, H, W) array is
one sample.

Semantics are MONAI's NormalizeIntensity and ScaleIntensityRangePercentiles; deliberate
differences: statistics are computed in float64 (MONAI: float32 torch.mean / torch.std, and
torch.quantile or numpy.percentile), and float64 images are normalised in float64 (MONAI
converts them to float32 first). Results agree with MONAI to float32 rounding.
Not supported: array-valued (per-voxel) subtrahend / divisor (MONAI broadcasts them).
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .transforms import DtypeLike, _as_batch, _Dict, _torch_dtype

__all__ = [
    "NormalizeIntensity", "NormalizeIntensityd", "ScaleIntensityRangePercentiles",
    "ScaleIntensityRangePercentilesd",
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
        if t.numel() != 1:
            raise NotImplementedError(f"{name} with {t.numel()} values and channel_wise=False (MONAI broadcasts "
                                      "it against the image voxel by voxel) is not supported; give one value")
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
    zeros is returned unchanged). Output dtype ``dtype`` (None: the input's)."""

    def __init__(self, subtrahend: Union[Sequence[float], float, None] = None,
                 divisor: Union[Sequence[float], float, None] = None, nonzero: bool = False,
                 channel_wise: bool = False, dtype: DtypeLike = np.float32):
        self.subtrahend, self.divisor = subtrahend, divisor
        self.nonzero, self.channel_wise = bool(nonzero), bool(channel_wise)
        self.dtype = _torch_dtype(dtype)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        c = x.shape[1]
        sub = _values(self.subtrahend, "subtrahend", c, self.channel_wise)
        div = _values(self.divisor, "divisor", c, self.channel_wise)
        out = ops.normalize_intensity(x, sub, div, self.nonzero, self.channel_wise, self.dtype)
        return restore(_finish(out, x.dtype, self.dtype))


class ScaleIntensityRangePercentiles:
    """MONAI ScaleIntensityRangePercentiles: per sample (per channel with ``channel_wise``)
    ScaleIntensityRange(a_min = lower-th percentile, a_max = upper-th percentile, b_min, b_max,
    clip); ``relative`` maps to the same percentiles of [b_min, b_max]. Percentiles are exact
    (numpy.percentile's linear method). Output dtype ``dtype`` (None: the input's)."""

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
