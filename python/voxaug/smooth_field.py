"""MONAI's smooth-field augmentations, batched on the data's device: RandSmoothFieldAdjustContrast(d),
RandSmoothFieldAdjustIntensity(d) and RandSmoothDeform(d).

MONAI draws one coarse random field per call with numpy on the host (``SmoothField``: U(low, high)
inside a border of ``pad`` voxels set to ``pad_val``), upsamples it with ``interpolate`` to the
image size and rescales the result to the coarse field's range; then raises the image (rescaled
to [0, 1]) to the field's power, multiplies by it, or adds it to an identity sampling grid. voxaug
draws every sample's coarse field on the device (Philox, ``ops.uniform_fill_``: no host values,
no sync), upsamples the whole batch at once with interpolate's weights and rescales per sample
with MONAI's operations, so a sample's result equals MONAI's for the same coarse field up to
float32 rounding (the tests give MONAI voxaug's field). The upsampling is three small matrix
products (every interpolate mode used is a tensor product of 1-D weights), not a 3-D
interpolation.
RandSmoothDeform gathers through the field in one voxaug resample launch (``resample_deformed``,
dense field) instead of ``grid_sample``.
The drawn coarse fields of the last call are kept (``last_coarse``, (N, C, *rand_size)).
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from . import ops
from .transforms import _as_batch, _check_prob, _host_to, _present_keys, _Randomizable

__all__ = ["SmoothField", "RandSmoothFieldAdjustContrast", "RandSmoothFieldAdjustContrastd",
           "RandSmoothFieldAdjustIntensity", "RandSmoothFieldAdjustIntensityd", "RandSmoothDeform",
           "RandSmoothDeformd"]

_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "area")


def _mode(mode: Any) -> str:
    m = str(getattr(mode, "value", mode)).lower()
    if m not in _MODES:
        raise ValueError(f"mode must be one of {_MODES} (torch's interpolate), got {mode!r}")
    return "trilinear" if m in ("linear", "bilinear") else m


def _weights(mode: str, n_in: int, zoom: float, align_corners: Optional[bool]) -> np.ndarray:
    """(n_out, n_in) float64 weights of torch's ``interpolate(scale_factor=zoom,
    recompute_scale_factor=False)`` along one axis (n_out = floor(n_in * zoom)): the source index
    rules of its CPU / CUDA kernels in float32 ('nearest', 'nearest-exact', 'trilinear' with
    either align_corners, 'area' = adaptive average pooling)."""
    n_out = int(np.floor(float(n_in) * zoom))
    if n_out < 1:
        raise ValueError(f"spatial_size: a field axis of {n_in} values would interpolate to {n_out}")
    out_i = np.arange(n_out)
    w = np.zeros((n_out, n_in))
    if mode == "area":
        start = (out_i * n_in) // n_out
        end = -((-(out_i + 1) * n_in) // n_out)
        for i in range(n_out):
            w[i, start[i]:end[i]] = 1.0 / (end[i] - start[i])
        return w
    inv = np.float32(1.0 / zoom)
    dst = out_i.astype(np.float32)
    if mode in ("nearest", "nearest-exact"):
        src = np.floor((dst + np.float32(0.5)) * inv) if mode == "nearest-exact" else np.floor(dst * inv)
        w[out_i, np.minimum(src.astype(np.int64), n_in - 1)] = 1.0
        return w
    if align_corners:
        scale = np.float32((n_in - 1) / (n_out - 1)) if n_out > 1 else np.float32(0.0)
        src = scale * dst
    else:
        src = np.maximum(inv * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0.0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    lam = (src - i0.astype(np.float32)).astype(np.float32)
    i1 = i0 + (i0 < n_in - 1)
    np.add.at(w, (out_i, i0), (np.float32(1.0) - lam).astype(np.float64))
    np.add.at(w, (out_i, i1), lam.astype(np.float64))
    return w


def _sample_minmax(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's min and max over all its values, (N, 1, 1, 1, 1) each: one aminmax pass on
    the device; two reductions on the CPU, where torch's aminmax(dim=1) is 6x slower than amin +
    amax (5.4 vs 0.9 ms for 2 x 128^3 float32, 2 threads)."""
    flat = t.reshape(t.shape[0], -1)
    lo, hi = torch.aminmax(flat, dim=1) if flat.is_cuda else (flat.amin(1), flat.amax(1))
    return lo.reshape(-1, 1, 1, 1, 1), hi.reshape(-1, 1, 1, 1, 1)


def _sizes(v: Sequence[int], name: str) -> tuple[int, ...]:
    try:
        out = tuple(int(s) for s in v)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 3 or min(out) < 1:
        raise ValueError(f"{name} must be 3 positive integers (a 3-D field), got {v!r}")
    return out


class SmoothField:
    """MONAI SmoothField for a batch: coarse fields (N, C, *rand_size) ~ U(low, high) (Philox on the
    device), padded by `pad` voxels of `pad_val`, upsampled as ``interpolate(scale_factor=
    spatial_size / padded size, mode, align_corners, recompute_scale_factor=False)`` does (its
    weights, see :meth:`fields`) and rescaled per sample to the padded coarse field's [min, max].
    spatial_size None: the padded coarse field itself."""

    def __init__(self, rand_size: Sequence[int], pad: int = 0, pad_val: float = 0.0, low: float = -1.0,
                 high: float = 1.0, channels: int = 1, spatial_size: Optional[Sequence[int]] = None,
                 mode: str = "area", align_corners: Optional[bool] = None):
        self.rand_size = _sizes(rand_size, "rand_size")
        if int(pad) < 0:
            raise ValueError(f"pad must be >= 0, got {pad}")
        if not low < high:
            raise ValueError("Value for `low` must be less than `high` otherwise field will be zeros")
        self.pad, self.pad_val, self.low, self.high = int(pad), float(pad_val), float(low), float(high)
        self.channels = int(channels)
        self.mode, self.align_corners = _mode(mode), align_corners
        self.total_rand_size = tuple(r + 2 * self.pad for r in self.rand_size)
        self.spatial_size = None if spatial_size is None else _sizes(spatial_size, "spatial_size")

    def set_mode(self, mode: str) -> None:
        self.mode = _mode(mode)

    def draw(self, n: int, seed: int, device: Any) -> torch.Tensor:
        """(N, C, *rand_size) float32 coarse values U(low, high) on `device`."""
        out = torch.empty((n, self.channels) + self.rand_size, dtype=torch.float32, device=device)
        return ops.uniform_fill_(out, self.low, self.high, seed)

    def fields(self, coarse: torch.Tensor) -> torch.Tensor:
        """The upsampled, rescaled fields (N, C, *out) of coarse values (N, C, *rand_size): out is
        interpolate's size, floor(padded size * zoom) per axis (the spatial size, up to
        rounding). Every mode of ``interpolate`` used here is a tensor product of 1-D weights, so
        the upsampling is three small matrix products (the last writes the field once) instead of
        a 3-D interpolation; the weights follow torch's index rules (float32 source coordinates),
        the sums run in another order (within ~1e-7 of the field's range of MONAI's)."""
        field = coarse if self.pad == 0 else F.pad(coarse, (self.pad,) * 6, value=self.pad_val)
        if self.spatial_size is None:
            return field.clone()
        zoom = tuple(s / f for s, f in zip(self.spatial_size, self.total_rand_size))
        n, c = field.shape[:2]
        w = [_weights(self.mode, int(i), z, self.align_corners) for i, z in zip(field.shape[2:], zoom)]
        w = [_host_to(torch.from_numpy(m).to(field.dtype), field.device) for m in w]
        d, h, ww = (m.shape[0] for m in w)
        y = torch.matmul(field, w[2].t())  # (N, C, rd, rh, W)
        y = torch.matmul(w[1], y)  # (N, C, rd, H, W)
        resized = torch.matmul(w[0], y.reshape(n, c, y.shape[2], h * ww)).reshape(n, c, d, h, ww)
        mina, maxa = _sample_minmax(resized)
        minv, maxv = _sample_minmax(field)
        scale = (maxv - minv) / (maxa - mina)
        return resized.sub_(mina).mul_(scale).add_(minv)


class _SmoothBase(_Randomizable):
    """Per-sample gate and coarse field; ``apply(img, params)`` runs a drawn plan (the dictionary
    forms share one plan across keys)."""

    sfield: SmoothField
    prob: float

    def _plan(self, n: int, device: Any) -> dict:
        gate = ops.philox_uniform(self._next_seed(), 0, n, 1)[:, 0] < self.prob
        coarse = self.sfield.draw(n, self._next_seed(), device)
        self.last_coarse, self.last_applied = coarse, gate
        return {"applied": gate, "coarse": coarse}

    def _check_size(self, x: torch.Tensor) -> None:
        if tuple(x.shape[2:]) != tuple(self.sfield.spatial_size):
            raise ValueError(f"img has spatial size {tuple(x.shape[2:])}, but the transform was built for "
                             f"spatial_size={self.sfield.spatial_size}")

    def __call__(self, img: Any, randomize: bool = True) -> Any:
        x, _ = _as_batch(img)
        if randomize or getattr(self, "_params", None) is None or self._params["applied"].shape[0] != x.shape[0]:
            self._params = self._plan(x.shape[0], x.device)
        return self.apply(img, self._params)

    def apply(self, img: Any, params: dict) -> Any:
        x, restore = _as_batch(img)
        self._check_size(x)
        applied = params["applied"]
        if not bool(applied.any()):
            return img
        idx = torch.nonzero(applied).flatten()
        all_on = len(idx) == x.shape[0]
        dev_idx = None if all_on else _host_to(idx, x.device)
        part_in = x if all_on else x.index_select(0, dev_idx)
        coarse = params["coarse"] if all_on else params["coarse"].index_select(0, dev_idx)
        part = self._transform(part_in, coarse)
        if all_on:
            return restore(part)
        out = x.to(part.dtype, copy=True)
        out.index_copy_(0, dev_idx, part)
        return restore(out)


class _FieldIntensity(_SmoothBase):
    """Shared by the contrast and intensity forms: a one-channel field in `gamma` (a number g
    means (0.5, g), MONAI's), 1 in the padded border."""

    def __init__(self, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int, mode: str,
                 align_corners: Optional[bool], prob: float, gamma: Union[Sequence[float], float], device: Any,
                 seed: Optional[int]):
        _Randomizable.__init__(self, seed)
        self.prob = _check_prob(prob)
        if isinstance(gamma, (int, float)):
            self.gamma = (0.5, float(gamma))
        else:
            if len(gamma) != 2:
                raise ValueError("Argument `gamma` should be a number or pair of numbers.")
            self.gamma = (float(min(gamma)), float(max(gamma)))
        self.sfield = SmoothField(rand_size, pad, 1.0, self.gamma[0], self.gamma[1], 1, spatial_size, mode,
                                  align_corners)
        self.device = device

    def set_mode(self, mode: str) -> None:
        self.sfield.set_mode(mode)


class RandSmoothFieldAdjustContrast(_FieldIntensity):
    """MONAI RandSmoothFieldAdjustContrast(spatial_size, rand_size, pad=0, mode='area',
    align_corners=None, prob=0.1, gamma=(0.5, 4.5)): per sample, with probability `prob`, the image
    rescaled to [0, 1] by its own min and max (all channels), raised to the power of a smooth field
    (values in gamma, 1 in the padded border), rescaled back. Every channel sees the same field."""

    def __init__(self, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0, mode: str = "area",
                 align_corners: Optional[bool] = None, prob: float = 0.1,
                 gamma: Union[Sequence[float], float] = (0.5, 4.5), device: Any = None, seed: Optional[int] = None):
        super().__init__(spatial_size, rand_size, pad, mode, align_corners, prob, gamma, device, seed)

    def _transform(self, x: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        field = self.sfield.fields(coarse).to(x.dtype)
        img_min, img_max = _sample_minmax(x)
        img_rng = img_max - img_min
        img = (x - img_min) / (img_rng + 1e-10)
        img = img ** field
        return (img * img_rng) + img_min


class RandSmoothFieldAdjustIntensity(_FieldIntensity):
    """MONAI RandSmoothFieldAdjustIntensity(spatial_size, rand_size, pad=0, mode='area',
    align_corners=None, prob=0.1, gamma=(0.1, 1.0)): per sample, with probability `prob`, the image
    times a smooth field (values in gamma, 1 in the padded border)."""

    def __init__(self, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0, mode: str = "area",
                 align_corners: Optional[bool] = None, prob: float = 0.1,
                 gamma: Union[Sequence[float], float] = (0.1, 1.0), device: Any = None, seed: Optional[int] = None):
        super().__init__(spatial_size, rand_size, pad, mode, align_corners, prob, gamma, device, seed)

    def _transform(self, x: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        return x * self.sfield.fields(coarse).to(x.dtype)


class RandSmoothDeform(_SmoothBase):
    """MONAI RandSmoothDeform(spatial_size, rand_size, pad=0, field_mode='area', align_corners=None,
    prob=0.1, def_range=1.0, grid_dtype=float32, grid_mode='nearest', grid_padding_mode='border',
    grid_align_corners=False): per sample, with probability `prob`, a smooth 3-channel field (in
    grid_sample's normalised units, values in def_range, 0 in the padded border) added to MONAI's
    sampling grid (linspace(-1, 1, size) per axis) and the image sampled through it. Here one
    voxaug resample launch per batch: the grid as an index map M and the field as a dense
    displacement, out(x) = in(M (x + u(x))) with M and u chosen so that M (x + u) is exactly
    grid_sample's source coordinate (float32 arithmetic in another order: bilinear within ~1e-6
    of the range; a nearest-neighbour tie can round the other way). Output spatial size
    `spatial_size`, float32 arithmetic, the input's dtype (MONAI's convert_to_dst_type)."""

    def __init__(self, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0,
                 field_mode: str = "area", align_corners: Optional[bool] = None, prob: float = 0.1,
                 def_range: Union[Sequence[float], float] = 1.0, grid_dtype=torch.float32, grid_mode: str = "nearest",
                 grid_padding_mode: str = "border", grid_align_corners: Optional[bool] = False, device: Any = None,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.prob = _check_prob(prob)
        if isinstance(def_range, (int, float)):
            self.def_range = (-float(def_range), float(def_range))
        else:
            if len(def_range) != 2:
                raise ValueError("Argument `def_range` should be a number or pair of numbers.")
            self.def_range = (float(min(def_range)), float(max(def_range)))
        self.sfield = SmoothField(rand_size, pad, 0.0, self.def_range[0], self.def_range[1], 3, spatial_size,
                                  field_mode, align_corners)
        if grid_dtype not in (torch.float32, None):
            raise NotImplementedError(f"grid_dtype={grid_dtype}: the sampling arithmetic is float32")
        self.grid_mode = self._grid_mode(grid_mode)
        pm = str(getattr(grid_padding_mode, "value", grid_padding_mode)).lower()
        if pm not in ("zeros", "border", "reflection"):
            raise ValueError(f"grid_padding_mode must be 'zeros', 'border' or 'reflection', got {grid_padding_mode!r}")
        self.grid_padding_mode = pm
        self.grid_align_corners = bool(grid_align_corners)
        self.device = device

    @staticmethod
    def _grid_mode(mode: Any) -> str:
        m = str(getattr(mode, "value", mode)).lower()
        if m not in ("nearest", "bilinear"):
            raise ValueError(f"grid_mode must be 'nearest' or 'bilinear', got {mode!r}")
        return m

    def set_field_mode(self, mode: str) -> None:
        self.sfield.set_mode(mode)

    def set_grid_mode(self, mode: str) -> None:
        self.grid_mode = self._grid_mode(mode)

    def _check_size(self, x: torch.Tensor) -> None:
        pass  # the output has spatial_size; the input may differ (grid_sample normalises it)

    def _transform(self, x: torch.Tensor, coarse: torch.Tensor) -> torch.Tensor:
        field = self.sfield.fields(coarse)  # (M, 3, *spatial_size), normalised units
        out_size = self.sfield.spatial_size
        m = np.zeros((3, 4))
        scale = []
        for a, (d, s) in enumerate(zip(out_size, x.shape[2:])):
            span = float(s - 1) if self.grid_align_corners else float(s)
            # grid_sample's source coordinate of output index i: (g + 1) span / 2 - (0 or 1/2), with
            # g = -1 + 2 i / (d - 1) + f: scale span / (d - 1), field u = f (d - 1) / 2 in output voxels.
            k = span / (d - 1) if d > 1 else 1.0
            m[a, a] = k
            m[a, 3] = 0.0 if self.grid_align_corners else -0.5
            scale.append(span / 2.0 / k)
        u = field * _host_to(torch.tensor(scale, dtype=field.dtype).reshape(1, 3, 1, 1, 1), x.device)
        mats = _host_to(torch.as_tensor(np.broadcast_to(m, (x.shape[0], 3, 4)).copy(), dtype=torch.float64), x.device)
        exact_labels = self.grid_mode == "nearest" and not x.dtype.is_floating_point  # gathered as they are
        src = x if exact_labels or x.dtype in (torch.float32, torch.float16, torch.bfloat16) else x.float()
        mode = "linear" if self.grid_mode == "bilinear" else "nearest"
        (out,) = ops.resample_deformed([src], mats, u.contiguous(), ops.DENSE_FIELD, out_size, [mode],
                                       [self.grid_padding_mode], [0.0], self.grid_align_corners)
        return out.to(x.dtype)  # MONAI's convert_to_dst_type: integers truncate


class _SmoothDict:
    """One draw per call (from the first present key's batch size) applied to every key, the
    interpolation mode per key (MONAI's dictionary forms)."""

    def __init__(self, keys, transform: _SmoothBase, modes: Sequence, setter: str, allow_missing_keys: bool):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform, self.modes, self.setter = transform, list(modes), setter
        self.allow_missing_keys = allow_missing_keys

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        self.transform.set_random_state(seed, generator)
        return self

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        params = None
        for idx, key in _present_keys(d, self.keys, self.allow_missing_keys):
            if params is None:
                x, _ = _as_batch(d[key])
                params = self.transform._plan(x.shape[0], x.device)
            for setter, modes in zip(self.setter.split(","), self.modes):
                getattr(self.transform, setter)(modes[idx % len(modes)])
            d[key] = self.transform.apply(d[key], params)
        return d


def _seq(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


class RandSmoothFieldAdjustContrastd(_SmoothDict):
    def __init__(self, keys, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0,
                 mode: Union[str, Sequence[str]] = "area", align_corners: Optional[bool] = None, prob: float = 0.1,
                 gamma: Union[Sequence[float], float] = (0.5, 4.5), device: Any = None,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        modes = _seq(mode)
        t = RandSmoothFieldAdjustContrast(spatial_size, rand_size, pad, modes[0], align_corners, prob, gamma, device,
                                          seed)
        super().__init__(keys, t, [modes], "set_mode", allow_missing_keys)


class RandSmoothFieldAdjustIntensityd(_SmoothDict):
    def __init__(self, keys, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0,
                 mode: Union[str, Sequence[str]] = "area", align_corners: Optional[bool] = None, prob: float = 0.1,
                 gamma: Union[Sequence[float], float] = (0.1, 1.0), device: Any = None,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        modes = _seq(mode)
        t = RandSmoothFieldAdjustIntensity(spatial_size, rand_size, pad, modes[0], align_corners, prob, gamma, device,
                                           seed)
        super().__init__(keys, t, [modes], "set_mode", allow_missing_keys)


class RandSmoothDeformd(_SmoothDict):
    def __init__(self, keys, spatial_size: Sequence[int], rand_size: Sequence[int], pad: int = 0,
                 field_mode: Union[str, Sequence[str]] = "area", align_corners: Optional[bool] = None,
                 prob: float = 0.1, def_range: Union[Sequence[float], float] = 1.0, grid_dtype=torch.float32,
                 grid_mode: Union[str, Sequence[str]] = "nearest", grid_padding_mode: str = "border",
                 grid_align_corners: Optional[bool] = False, device: Any = None, allow_missing_keys: bool = False,
                 seed: Optional[int] = None):
        fm, gm = _seq(field_mode), _seq(grid_mode)
        t = RandSmoothDeform(spatial_size, rand_size, pad, fm[0], align_corners, prob, def_range, grid_dtype, gm[0],
                             grid_padding_mode, grid_align_corners, device, seed)
        super().__init__(keys, t, [fm, gm], "set_field_mode,set_grid_mode", allow_missing_keys)
