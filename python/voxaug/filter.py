"""Gaussian smoothing and sharpening (MONAI names and arguments) and TorchIO's Blur and RandomBlur,
backed by ``torch.ops.voxaug.gaussian_smooth``: a batch is filtered in one launch per axis,
each sample with its own sigmas; MONAI's MedianSmooth (``torch.ops.voxaug.median_filter``).

MONAI's transforms have MONAI's GaussianFilter semantics: erf taps, not renormalised, radius
int(max(sigma * truncated, 0.5) + 0.5), zero padding, applied along D, H, W; sigma == 0 on an
axis leaves it untouched. TorchIO's Blur and RandomBlur have scipy.ndimage.gaussian_filter's
(what TorchIO calls): sampled taps exp(-x^2 / 2 sigma^2) renormalised to sum 1, radius
int(4 sigma + 0.5), 'reflect' borders (d c b a | a b c d), axes with sigma <= 1e-15 skipped.
Sigmas are in voxels (Blur and RandomBlur convert from mm).

Random transforms draw per-sample parameters with Philox on the host
(``voxaug.ops.philox_uniform``) from a 64-bit seed per call (see :mod:`voxaug.transforms`), so
a sample's draw does not depend on its batch. The draws of the last call are kept on the
transform (``last_sigma``, ``last_applied``, ...; MONAI's ``x``, ``y``, ``z`` for sample 0).

Differences from MONAI, by design: a batch gets a per-sample gate ``u < prob`` instead of one
gate per call; in a batch where some samples are transformed, the untransformed ones come back
as float32 copies (one output tensor), while a call where no sample is transformed returns the
input itself, as MONAI does. Float64 inputs are filtered in float64 (MONAI converts to float32
first); the result is float32 like MONAI's.
"""
from __future__ import annotations

import math
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .transforms import _as_batch, _check_prob, _Dict, _host_to, _is_meta_tensor, _Randomizable, _Subject

__all__ = [
    "GaussianSmooth", "GaussianSmoothd", "RandGaussianSmooth", "RandGaussianSmoothd",
    "GaussianSharpen", "GaussianSharpend", "RandGaussianSharpen", "RandGaussianSharpend",
    "Blur", "RandomBlur", "MedianSmooth", "MedianSmoothd",
]

_MONAI_TRUNCATED = 4.0  # GaussianSmooth / GaussianSharpen build GaussianFilter(truncated=4.0)


def _check_approx(approx: str) -> str:
    if str(approx).lower() != "erf":
        raise NotImplementedError(f"approx={approx!r}: only MONAI's default 'erf' kernel is implemented")
    return "erf"


def _sigma3(sigma: Union[Sequence[float], float], name: str = "sigma") -> tuple[float, float, float]:
    if isinstance(sigma, (int, float)):
        return (float(sigma),) * 3
    values = [float(s) for s in sigma]
    if len(values) != 3:
        raise ValueError(f"{name} must be a number or one value per spatial axis (3), got {sigma}")
    return tuple(values)  # type: ignore[return-value]


def _pair(value: Union[Sequence[float], float], name: str) -> tuple[float, float]:
    if isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a (min, max) pair, got {value}")
    if len(value) != 2:
        raise ValueError(f"{name} must be a (min, max) pair, got {value}")
    return float(value[0]), float(value[1])


def _uniform(lo, hi, u: torch.Tensor) -> torch.Tensor:
    # numpy's Generator.uniform(low, high): low + (high - low) * u (also for low > high).
    return lo + (hi - lo) * u


def _smooth(x: torch.Tensor, sigma: torch.Tensor, truncated: float = _MONAI_TRUNCATED) -> torch.Tensor:
    return ops.gaussian_smooth(x, sigma, truncated, dtype=torch.float32)


_SCIPY_TRUNCATE = 4.0  # scipy.ndimage.gaussian_filter's default, which TorchIO's blur keeps


def _scipy_smooth(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """scipy.ndimage.gaussian_filter(x, sigma) per (sample, channel) volume, float32 out."""
    return ops.gaussian_smooth(x, sigma, _SCIPY_TRUNCATE, dtype=torch.float32, taps="sampled", border="reflect")


class _Filter:
    """Array transform: ``_plan(x)`` makes the parameters (random ones drawn here), ``apply``
    runs them, so dictionary forms can share one draw across keys."""

    def _plan(self, x: torch.Tensor) -> Any:
        return None

    def _run(self, x: torch.Tensor, params: Any) -> Optional[torch.Tensor]:
        raise NotImplementedError

    _last_params: Any = None

    def __call__(self, img: Any, randomize: bool = True) -> Any:
        """randomize=False (random transforms) reuses the previous call's draw, as MONAI's."""
        if randomize or self._last_params is None:
            return self.apply(img)
        return self.apply(img, self._last_params)

    def apply(self, img: Any, params: Any = None) -> Any:
        x, restore = _as_batch(img)
        if params is None:
            params = self._plan(x)
        elif isinstance(params, dict) and params["applied"].shape[0] != x.shape[0]:
            raise ValueError(f"the reused draw was made for a batch of {params['applied'].shape[0]}, "
                             f"but img has a batch of {x.shape[0]}")
        self._last_params = params
        out = self._run(x, params)
        if out is None:  # no sample transformed: MONAI returns the input as it is
            return torch.as_tensor(img) if isinstance(img, np.ndarray) else img
        return restore(out)


class GaussianSmooth(_Filter):
    """MONAI GaussianSmooth: Gaussian filter with `sigma` (voxels; a number or one per spatial
    axis), truncated at 4 sigma; float32 output."""

    def __init__(self, sigma: Union[Sequence[float], float] = 1.0, approx: str = "erf"):
        self.sigma = sigma
        self.approx = _check_approx(approx)
        self._sigma = _sigma3(sigma)

    def _run(self, x, params):
        return _smooth(x, torch.tensor(self._sigma, dtype=torch.float64))


class RandGaussianSmooth(_Filter, _Randomizable):
    """MONAI RandGaussianSmooth: per sample, with probability `prob`, sigma_x ~ U(sigma_x),
    sigma_y ~ U(sigma_y), sigma_z ~ U(sigma_z) (spatial axes 0, 1, 2)."""

    def __init__(self, sigma_x: tuple[float, float] = (0.25, 1.5), sigma_y: tuple[float, float] = (0.25, 1.5),
                 sigma_z: tuple[float, float] = (0.25, 1.5), prob: float = 0.1, approx: str = "erf",
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.sigma_x, self.sigma_y, self.sigma_z = (_pair(sigma_x, "sigma_x"), _pair(sigma_y, "sigma_y"),
                                                    _pair(sigma_z, "sigma_z"))
        self.prob = _check_prob(prob)
        self.approx = _check_approx(approx)
        self.x, self.y, self.z = self.sigma_x[0], self.sigma_y[0], self.sigma_z[0]
        self.last_sigma: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x):
        u = ops.philox_uniform(self._next_seed(), 0, x.shape[0], 4)
        applied = u[:, 0] < self.prob
        lo = torch.tensor([self.sigma_x[0], self.sigma_y[0], self.sigma_z[0]], dtype=torch.float64)
        hi = torch.tensor([self.sigma_x[1], self.sigma_y[1], self.sigma_z[1]], dtype=torch.float64)
        sigma = torch.where(applied[:, None], _uniform(lo, hi, u[:, 1:]), torch.zeros(()))
        return {"sigma": sigma, "applied": applied}

    def _run(self, x, params):
        self.last_sigma, self.last_applied = params["sigma"], params["applied"]
        if not bool(params["applied"].any()):
            return None
        if bool(params["applied"][0]):
            self.x, self.y, self.z = (float(v) for v in params["sigma"][0])
        return _smooth(x, params["sigma"])


def _sharpen(x: torch.Tensor, sigma1: torch.Tensor, sigma2: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    blurred = _smooth(x, sigma1)
    filter_blurred = _smooth(blurred, sigma2)
    a = _host_to(alpha.to(torch.float32), x.device).view(-1, 1, 1, 1, 1)  # pinned: no sync
    return blurred + a * (blurred - filter_blurred)  # MONAI's expression, alpha per sample


class GaussianSharpen(_Filter):
    """MONAI GaussianSharpen: blurred = G(sigma1) img; out = blurred + alpha * (blurred -
    G(sigma2) blurred); float32 output."""

    def __init__(self, sigma1: Union[Sequence[float], float] = 3.0, sigma2: Union[Sequence[float], float] = 1.0,
                 alpha: float = 30.0, approx: str = "erf"):
        self.sigma1, self.sigma2, self.alpha = sigma1, sigma2, float(alpha)
        self.approx = _check_approx(approx)
        self._s1, self._s2 = _sigma3(sigma1, "sigma1"), _sigma3(sigma2, "sigma2")

    def _run(self, x, params):
        n = x.shape[0]
        s1 = torch.tensor(self._s1, dtype=torch.float64).expand(n, 3)
        s2 = torch.tensor(self._s2, dtype=torch.float64).expand(n, 3)
        return _sharpen(x, s1, s2, torch.full((n,), self.alpha, dtype=torch.float64))


class RandGaussianSharpen(_Filter, _Randomizable):
    """MONAI RandGaussianSharpen: per sample, with probability `prob`: sigma1 per axis ~
    U(sigma1_*); sigma2 per axis ~ U(sigma2_*), or U(sigma2_*, sigma1 of that axis) when
    sigma2_* is a number; alpha ~ U(alpha); then GaussianSharpen(sigma1, sigma2, alpha)."""

    def __init__(self, sigma1_x: tuple[float, float] = (0.5, 1.0), sigma1_y: tuple[float, float] = (0.5, 1.0),
                 sigma1_z: tuple[float, float] = (0.5, 1.0), sigma2_x: Union[tuple[float, float], float] = 0.5,
                 sigma2_y: Union[tuple[float, float], float] = 0.5, sigma2_z: Union[tuple[float, float], float] = 0.5,
                 alpha: tuple[float, float] = (10.0, 30.0), approx: str = "erf", prob: float = 0.1,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.sigma1 = [_pair(s, n) for s, n in ((sigma1_x, "sigma1_x"), (sigma1_y, "sigma1_y"), (sigma1_z, "sigma1_z"))]
        self.sigma2 = [float(s) if isinstance(s, (int, float)) else _pair(s, n)
                       for s, n in ((sigma2_x, "sigma2_x"), (sigma2_y, "sigma2_y"), (sigma2_z, "sigma2_z"))]
        self.alpha = _pair(alpha, "alpha")
        self.approx = _check_approx(approx)
        self.prob = _check_prob(prob)
        self.x1 = self.y1 = self.z1 = self.x2 = self.y2 = self.z2 = self.a = None
        self.last_sigma1: Optional[torch.Tensor] = None
        self.last_sigma2: Optional[torch.Tensor] = None
        self.last_alpha: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x):
        u = ops.philox_uniform(self._next_seed(), 0, x.shape[0], 8)
        applied = u[:, 0] < self.prob
        zero = torch.zeros(())
        s1 = torch.stack([_uniform(lo, hi, u[:, 1 + a]) for a, (lo, hi) in enumerate(self.sigma1)], 1)
        s2 = []
        for a, spec in enumerate(self.sigma2):
            lo, hi = (spec, s1[:, a]) if isinstance(spec, float) else spec
            s2.append(_uniform(lo, hi, u[:, 4 + a]))
        s2 = torch.stack(s2, 1)
        alpha = _uniform(self.alpha[0], self.alpha[1], u[:, 7])
        return {"sigma1": torch.where(applied[:, None], s1, zero), "sigma2": torch.where(applied[:, None], s2, zero),
                "alpha": torch.where(applied, alpha, zero), "applied": applied}

    def _run(self, x, params):
        self.last_sigma1, self.last_sigma2 = params["sigma1"], params["sigma2"]
        self.last_alpha, self.last_applied = params["alpha"], params["applied"]
        if not bool(params["applied"].any()):
            return None
        if bool(params["applied"][0]):
            self.x1, self.y1, self.z1 = (float(v) for v in params["sigma1"][0])
            self.x2, self.y2, self.z2 = (float(v) for v in params["sigma2"][0])
            self.a = float(params["alpha"][0])
        return _sharpen(x, params["sigma1"], params["sigma2"], params["alpha"])


# ---------------- TorchIO ----------------
def _torchio_std_ranges(std) -> list[tuple[float, float]]:
    if isinstance(std, (int, float)):
        if std < 0:
            raise ValueError(f"std must be >= 0, got {std}")
        return [(0.0, float(std))] * 3
    v = [float(s) for s in std]
    if len(v) == 2:
        pairs = [(v[0], v[1])] * 3
    elif len(v) == 3:
        pairs = [(0.0, s) for s in v]
    elif len(v) == 6:
        pairs = [(v[0], v[1]), (v[2], v[3]), (v[4], v[5])]
    else:
        raise ValueError(f"std must be a number or 2, 3 or 6 numbers, got {std}")
    for lo, hi in pairs:
        if lo < 0 or hi < lo:
            raise ValueError(f"std ranges must satisfy 0 <= min <= max, got {std}")
    return pairs


def _spacing_of(img: Any, spacing: Optional[Sequence[float]]) -> tuple[float, float, float]:
    if spacing is not None:
        sp = _sigma3(spacing, "spacing")
    elif _is_meta_tensor(img):
        affine = torch.as_tensor(img.affine, dtype=torch.float64).cpu()
        affine = affine[0] if affine.dim() == 3 else affine  # a batch's (N, 4, 4): its first
        sp = tuple(float(v) for v in torch.linalg.norm(affine[:3, :3], dim=0))
    else:
        sp = (1.0, 1.0, 1.0)
    if not all(s > 0 for s in sp):
        raise ValueError(f"spacing must be positive, got {sp}")
    return sp


class Blur(_Subject):
    """TorchIO Blur(std): scipy.ndimage.gaussian_filter with std_i mm per spatial axis (a number:
    the same on each) divided by the voxel spacing (`spacing=` here or in the call, else a
    MetaTensor's affine, else 1 mm), every channel on its own; float32 out. One launch per
    axis for the batch. Differentiable w.r.t. the image."""

    def __init__(self, std: Union[float, Sequence[float]], spacing: Optional[Sequence[float]] = None,
                 label_keys: Sequence[Any] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if isinstance(std, dict):
            raise ValueError("std: a dict per image name is TorchIO's Subject form; voxaug's Blur takes one "
                             "std (a number or 3 values in mm) for the tensor it is called on")
        self.std = _sigma3(std, "std")
        if not all(math.isfinite(s) and s >= 0 for s in self.std):
            raise ValueError(f"std must be >= 0 and finite, got {std!r}")
        self.spacing = spacing
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any, spacing: Optional[Sequence[float]] = None) -> Any:
        x, restore = _as_batch(img)
        sp = torch.tensor(_spacing_of(img, spacing if spacing is not None else self.spacing), dtype=torch.float64)
        sigma = (torch.tensor(self.std, dtype=torch.float64) / sp).expand(x.shape[0], 3)
        return restore(_scipy_smooth(x, sigma))


class RandomBlur(_Subject, _Filter, _Randomizable):
    """TorchIO RandomBlur: per sample (with probability `p`) std_i ~ U(a_i, b_i) in mm per
    spatial axis (`std`: x -> U(0, x); (a, b); (x1, x2, x3) -> U(0, x_i); or six values), divided
    by the voxel spacing (`spacing=` here or in the call, else a MetaTensor's affine, else 1 mm),
    then :class:`Blur` (scipy.ndimage.gaussian_filter, as TorchIO) with each sample's own sigmas,
    one launch per axis for the batch. A call where no sample is blurred returns the input."""

    def __init__(self, std: Union[float, Sequence[float]] = (0, 2), p: float = 1.0,
                 spacing: Optional[Sequence[float]] = None, seed: Optional[int] = None,
                 label_keys: Sequence[Any] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.std_ranges = _torchio_std_ranges(std)
        self.p = _check_prob(p)
        self.spacing = spacing
        self.last_std: Optional[torch.Tensor] = None
        self.last_sigma: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any, spacing: Optional[Sequence[float]] = None) -> Any:
        x, restore = _as_batch(img)
        sp = torch.tensor(_spacing_of(img, spacing if spacing is not None else self.spacing), dtype=torch.float64)
        u = ops.philox_uniform(self._next_seed(), 0, x.shape[0], 4)
        applied = u[:, 0] < self.p
        lo = torch.tensor([r[0] for r in self.std_ranges], dtype=torch.float64)
        hi = torch.tensor([r[1] for r in self.std_ranges], dtype=torch.float64)
        std = torch.where(applied[:, None], _uniform(lo, hi, u[:, 1:]), torch.zeros(()))
        self.last_std, self.last_applied, self.last_sigma = std, applied, std / sp
        if not bool(applied.any()):
            return torch.as_tensor(img) if isinstance(img, np.ndarray) else img
        return restore(_scipy_smooth(x, self.last_sigma))


# ---------------- dictionary forms ----------------
class MedianSmooth(_Filter):
    """MONAI MedianSmooth(radius=1): the median of the (2 r + 1)-voxel box around each voxel
    (radius a number or one per spatial axis), edges replicated, every channel on its own, float32
    out (MONAI's cast); a box holding NaN gives NaN (torch.median). One launch for the batch
    (include/voxaug/filter.h; on the CPU each box column is sorted once and shared along W). The
    box may hold at most 343 voxels (radius 3 on every axis); MONAI's unfold-based filter builds
    a (2 r + 1)^3-channel copy of the volume instead."""

    def __init__(self, radius: Union[Sequence[int], int] = 1):
        vals = list(radius) if isinstance(radius, (list, tuple)) else [radius] * 3
        if len(vals) != 3 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
                                     for v in vals):
            raise ValueError(f"radius must be a non-negative int or 3 of them, got {radius!r}")
        self.radius = tuple(int(v) for v in vals)

    def _run(self, x, params):
        return torch.ops.voxaug.median_filter(x, list(self.radius))


class MedianSmoothd(_Dict):
    def __init__(self, keys, radius: Union[Sequence[int], int] = 1, allow_missing_keys: bool = False):
        super().__init__(keys, MedianSmooth(radius), allow_missing_keys)


class GaussianSmoothd(_Dict):
    def __init__(self, keys, sigma: Union[Sequence[float], float] = 1.0, approx: str = "erf",
                 allow_missing_keys: bool = False):
        super().__init__(keys, GaussianSmooth(sigma, approx), allow_missing_keys)


class RandGaussianSmoothd(_Dict):
    def __init__(self, keys, sigma_x=(0.25, 1.5), sigma_y=(0.25, 1.5), sigma_z=(0.25, 1.5), approx: str = "erf",
                 prob: float = 0.1, allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandGaussianSmooth(sigma_x, sigma_y, sigma_z, prob, approx, seed), allow_missing_keys)


class GaussianSharpend(_Dict):
    def __init__(self, keys, sigma1=3.0, sigma2=1.0, alpha: float = 30.0, approx: str = "erf",
                 allow_missing_keys: bool = False):
        super().__init__(keys, GaussianSharpen(sigma1, sigma2, alpha, approx), allow_missing_keys)


class RandGaussianSharpend(_Dict):
    def __init__(self, keys, sigma1_x=(0.5, 1.0), sigma1_y=(0.5, 1.0), sigma1_z=(0.5, 1.0), sigma2_x=0.5,
                 sigma2_y=0.5, sigma2_z=0.5, alpha=(10.0, 30.0), approx: str = "erf", prob: float = 0.1,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandGaussianSharpen(sigma1_x, sigma1_y, sigma1_z, sigma2_x, sigma2_y, sigma2_z, alpha,
                                                   approx, prob, seed), allow_missing_keys)
