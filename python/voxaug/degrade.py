"""Image degradations with MONAI's names and arguments: RandCoarseDropout(d), RandCoarseShuffle(d)
and RandSimulateLowResolution(d), backed by ``torch.ops.voxaug.coarse_dropout``,
``torch.ops.voxaug.coarse_shuffle`` and ``torch.ops.voxaug.simulate_low_resolution`` (and TorchIO's
RandomAnisotropy and Swap / RandomSwap, ``torch.ops.voxaug.swap_patches``): a batch is transformed in one launch, each sample
with its own random parameters; GibbsNoise(d) / RandGibbsNoise(d) through torch's FFTs (one
forward and one inverse transform per batch).

Random parameters (the gate ``u < prob``, hole counts, sizes and corners, the zoom factor) are
drawn per sample on the host with Philox (``voxaug.ops.philox_uniform``) from a 64-bit seed per
call (see :mod:`voxaug.transforms`): only the image's shape is needed, never its values, so
nothing syncs with the device. Random fill values are drawn in the kernel from Philox keyed by
(seed, sample, element); the image's min / max (``fill_value=None``) are computed on the
device. The draws of the last call are kept on the transform (``last_boxes``, ``last_counts``,
``last_applied``; ``last_low_size``, ``last_zoom``) and MONAI's ``hole_coords`` /
``zoom_factor`` for sample 0.

Differences from MONAI, by design: a batch gets a per-sample gate instead of one gate per call;
random draws come from Philox, not numpy. RandCoarseDropout never modifies its input (MONAI
writes the holes into a CPU tensor's memory). RandSimulateLowResolution returns float32 like
MONAI; in a batch where some samples are transformed the others come back as float32 copies,
while a call where no sample is transformed returns the input itself, as MONAI does.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .spatial import _one_affine, _spacing_of
from .transforms import _TorchIOArgs, _as_batch, _check_prob, _Dict, _host_to, _Randomizable, _Subject, _torchio_range

__all__ = [
    "RandCoarseDropout", "RandCoarseDropoutd", "RandCoarseShuffle", "RandCoarseShuffled",
    "RandSimulateLowResolution", "RandSimulateLowResolutiond",
    "RandomAnisotropy", "Swap", "RandomSwap",
    "GibbsNoise", "GibbsNoised", "RandGibbsNoise", "RandGibbsNoised",
]

FILL_CONSTANT, FILL_UNIFORM, FILL_IMAGE_RANGE = 0, 1, 2
UPSAMPLE_TRILINEAR, UPSAMPLE_NEAREST = 0, 1


def _signed64(seed: int) -> int:
    seed &= (1 << 64) - 1
    return seed - (1 << 64) if seed >= (1 << 63) else seed


def _fall_back(value: Union[Sequence[int], int, None], img_size: Sequence[int], name: str) -> tuple[int, ...]:
    """MONAI fall_back_tuple: a number repeats; a non-positive (or None) entry takes the image's size."""
    ndim = len(img_size)
    if value is None:
        return tuple(int(s) for s in img_size)
    vals = [value] * ndim if isinstance(value, (int, np.integer)) else list(value)
    if len(vals) != ndim:
        raise ValueError(f"{name} must be a number or {ndim} numbers (one per spatial axis), got {value}")
    return tuple(int(v) if v is not None and v > 0 else int(s) for v, s in zip(vals, img_size))


def _randint(lo, hi_inclusive, u: np.ndarray) -> np.ndarray:
    """Integer uniform on [lo, hi_inclusive] from float64 uniforms u in [0, 1) (numpy arrays)."""
    k = np.floor(u * (hi_inclusive - lo + 1).astype(np.float64)).astype(np.int64)
    return lo + np.minimum(k, np.maximum(hi_inclusive - lo, 0))


class _Degrade:
    """Array transform: ``_plan(x)`` draws the parameters, ``apply(img, params)`` runs them, so
    the dictionary forms share one draw across keys."""

    _last_params: Any = None

    def __call__(self, img: Any, randomize: bool = True) -> Any:
        """randomize=False reuses the previous call's draw, as MONAI's."""
        if randomize or self._last_params is None:
            return self.apply(img)
        return self.apply(img, self._last_params)

    def apply(self, img: Any, params: Any = None) -> Any:
        x, restore = _as_batch(img)
        if params is None:
            params = self._plan(x)
        elif params["applied"].shape[0] != x.shape[0]:
            raise ValueError(f"the reused draw was made for a batch of {params['applied'].shape[0]}, "
                             f"but img has a batch of {x.shape[0]}")
        self._last_params = params
        self._record(x, params)
        if not bool(params["applied"].any()):  # host tensor: no device sync
            return torch.as_tensor(img) if isinstance(img, np.ndarray) else img
        return restore(self._run(x, params))


class _CoarseHoles(_Degrade, _Randomizable):
    """MONAI RandCoarseTransform's holes, batched: per sample, with probability `prob`, the number
    of holes is `holes`, or uniform in [holes, max_holes]; each hole's size is `spatial_size` or,
    with `max_spatial_size`, uniform per axis in [previous hole's size, max_spatial_size] (MONAI's
    loop reuses the last size as the next minimum; the first hole starts from `spatial_size`),
    clipped to the image; its corner is uniform over the positions where it fits. Non-positive
    sizes mean the image's size. The holes cover all channels. Drawn on the host from Philox."""

    def _init_holes(self, holes: int, spatial_size, max_holes: Optional[int], max_spatial_size, prob: float,
                    seed: Optional[int]) -> None:
        _Randomizable.__init__(self, seed)
        if int(holes) < 1:
            raise ValueError(f"number of holes must be greater than 0, got holes={holes}")
        if max_holes is not None and int(max_holes) < int(holes):
            raise ValueError(f"max_holes must be >= holes, got max_holes={max_holes} and holes={holes}")
        self.holes = int(holes)
        self.max_holes = None if max_holes is None else int(max_holes)
        self.spatial_size = spatial_size
        self.max_spatial_size = max_spatial_size
        self.prob = _check_prob(prob)
        self.hole_coords: list = []
        self.last_boxes: Optional[torch.Tensor] = None
        self.last_counts: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x: torch.Tensor, seed: Optional[int] = None) -> dict:
        # Small host arrays: numpy (microseconds per operation), vectorised over the batch.
        n, img = x.shape[0], np.array([int(s) for s in x.shape[2:]], dtype=np.int64)
        size0 = np.array(_fall_back(self.spatial_size, img.tolist(), "spatial_size"), dtype=np.int64)
        k = self.max_holes if self.max_holes is not None else self.holes
        if self.max_spatial_size is not None:
            max_size = np.array(_fall_back(self.max_spatial_size, img.tolist(), "max_spatial_size"), dtype=np.int64)
            if (max_size < size0).any():
                raise ValueError(f"max_spatial_size {tuple(max_size.tolist())} must be >= spatial_size "
                                 f"{tuple(size0.tolist())} on every axis (after replacing non-positive entries "
                                 f"by the image size {tuple(img.tolist())})")
        seed = self._next_seed() if seed is None else seed
        u = ops.philox_uniform(seed, 0, n, 2 + 6 * k).numpy()
        applied = u[:, 0] < self.prob
        if self.max_holes is None:
            num = np.full(n, self.holes, dtype=np.int64)
        else:
            num = _randint(np.int64(self.holes), np.int64(self.max_holes), u[:, 1])
        boxes = np.zeros((n, k, 6), dtype=np.int64)
        size = np.broadcast_to(size0, (n, 3))
        for j in range(k):
            uj = u[:, 2 + 6 * j: 8 + 6 * j]
            if self.max_spatial_size is not None:
                size = _randint(size, max_size, uj[:, :3])
            valid = np.minimum(size, img)
            start = np.where(img > valid, _randint(np.int64(0), img - valid, uj[:, 3:]), 0)
            boxes[:, j, :3], boxes[:, j, 3:] = start, start + valid
        counts = np.where(applied, num, 0)
        return {"boxes": torch.from_numpy(boxes), "counts": torch.from_numpy(counts),
                "applied": torch.from_numpy(applied), "seed": seed}

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_boxes, self.last_counts, self.last_applied = params["boxes"], params["counts"], params["applied"]
        self.hole_coords = []
        if bool(params["applied"][0]):
            for b in params["boxes"][0, : int(params["counts"][0])].tolist():
                self.hole_coords.append((slice(None),) + tuple(slice(b[a], b[a + 3]) for a in range(3)))



class RandCoarseDropout(_CoarseHoles):
    """MONAI RandCoarseDropout, batched, with the holes of :class:`_CoarseHoles` (MONAI's draw
    rules).

    dropout_holes=True fills the holes, False keeps them and fills everything else. fill_value:
    a number (constant), a (low, high) pair (uniform per voxel), or None (uniform per voxel in
    [min, max] of the sample's image, computed on the device). Integer images get the fill
    truncated towards zero, as numpy's assignment does.

    in_place (voxaug's addition, keyword only): write into the input instead of a new tensor, as
    MONAI does for CPU tensors (on the CPU only the filled voxels are then written).
    """

    def __init__(self, holes: int, spatial_size: Union[Sequence[int], int], dropout_holes: bool = True,
                 fill_value: Union[tuple[float, float], float, None] = None, max_holes: Optional[int] = None,
                 max_spatial_size: Union[Sequence[int], int, None] = None, prob: float = 0.1,
                 seed: Optional[int] = None, *, in_place: bool = False):
        self._init_holes(holes, spatial_size, max_holes, max_spatial_size, prob, seed)
        self.in_place = bool(in_place)
        self.dropout_holes = bool(dropout_holes)
        if isinstance(fill_value, (tuple, list)):
            if len(fill_value) != 2:
                raise ValueError("fill value should contain 2 numbers if providing the `min` and `max`, "
                                 f"got {fill_value}")
            fill_value = (float(fill_value[0]), float(fill_value[1]))
            if not all(np.isfinite(fill_value)):
                raise ValueError(f"fill_value range must be finite, got {fill_value}")
        elif fill_value is not None:
            fill_value = float(fill_value)
            if np.isnan(fill_value):
                raise ValueError("fill_value must not be NaN")
        self.fill_value = fill_value

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        fv = self.fill_value
        if fv is None:
            mode, value, lo, hi = FILL_IMAGE_RANGE, 0.0, 0.0, 0.0
        elif isinstance(fv, tuple):
            mode, value, lo, hi = FILL_UNIFORM, 0.0, fv[0], fv[1]
        else:
            mode, value, lo, hi = FILL_CONSTANT, fv, 0.0, 0.0
        args = (params["boxes"], params["counts"], self.dropout_holes, mode, value, lo, hi,
                _signed64(params["seed"]), 0)
        if self.in_place:
            torch.ops.voxaug.coarse_dropout_(x, *args)
            return x
        return torch.ops.voxaug.coarse_dropout(x, *args)


class RandCoarseShuffle(_CoarseHoles):
    """MONAI RandCoarseShuffle(holes, spatial_size, max_holes=None, max_spatial_size=None,
    prob=0.1), batched: the holes of :class:`_CoarseHoles` (MONAI's draw rules), and the voxels
    of each hole randomly permuted, every channel on its own, hole after hole (an overlapping
    hole permutes the earlier one's result, as MONAI's loop). Permutations are Philox-keyed
    (include/voxaug/dropout.h): the same on the CPU and on CUDA, not numpy's shuffle. A new
    tensor of the input's dtype; no host sync (the hole tables are drawn on the host).

    in_place (voxaug's addition, keyword only): permute the input itself, as MONAI does for CPU
    tensors (only the holes are touched: no copy of the volume)."""

    def __init__(self, holes: int, spatial_size: Union[Sequence[int], int], max_holes: Optional[int] = None,
                 max_spatial_size: Union[Sequence[int], int, None] = None, prob: float = 0.1,
                 seed: Optional[int] = None, *, in_place: bool = False):
        self._init_holes(holes, spatial_size, max_holes, max_spatial_size, prob, seed)
        self.in_place = bool(in_place)

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        args = (params["boxes"], params["counts"], _signed64(params["seed"]), 0)
        if self.in_place:
            torch.ops.voxaug.coarse_shuffle_(x, *args)
            return x
        return torch.ops.voxaug.coarse_shuffle(x, *args)


def _patch_size3(patch_size: Any) -> tuple[int, int, int]:
    vals = list(patch_size) if isinstance(patch_size, (list, tuple, np.ndarray)) else [patch_size]
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) != 3 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
                                 for v in vals):
        raise ValueError(f"patch_size must be a positive int or 3 positive ints, got {patch_size!r}")
    return int(vals[0]), int(vals[1]), int(vals[2])


class Swap(_Subject):
    """TorchIO Swap(patch_size, locations): the patches at each pair of corners ((d, h, w), (d, h,
    w)) swapped in order, in every channel and sample. A true swap: both patches are read before
    either is written (TorchIO copies its first patch through a view, so partially overlapping
    patches come out differently there; equal without overlap). in_place (keyword only): swap in
    the input itself."""

    def __init__(self, patch_size: Any, locations: Sequence, *, in_place: bool = False,
                 label_keys: Sequence[Any] = (),
                 include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        self.patch_size = _patch_size3(patch_size)
        loc = np.asarray(locations, dtype=np.int64).reshape(-1, 6)
        self.locations = loc
        self.in_place = bool(in_place)
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        n, k = x.shape[0], self.locations.shape[0]
        table = torch.from_numpy(np.broadcast_to(self.locations, (n, k, 6)).copy())
        counts = torch.full((n,), k, dtype=torch.int64)
        return restore(_swap_patches(x, table, counts, self.patch_size, self.in_place))


def _swap_patches(x: torch.Tensor, locations: torch.Tensor, counts: torch.Tensor, patch: Sequence[int],
                  in_place: bool) -> torch.Tensor:
    if in_place:
        torch.ops.voxaug.swap_patches_(x, locations, counts, list(patch))
        return x
    return torch.ops.voxaug.swap_patches(x, locations, counts, list(patch))


class RandomSwap(_Subject, _Randomizable):
    """TorchIO RandomSwap(patch_size=15, num_iterations=100, p=1): per sample (with probability
    `p`) `num_iterations` swaps of two patches at random corners, in order (the context-restoration
    pretext task of self-supervised learning). TorchIO's draws: each corner coordinate uniform in
    [0, size - patch) (TorchIO's randint excludes the last position; an axis with patch == size
    gives 0), the second corner redrawn while it equals the first. Philox draws on the host, one
    launch for the batch; a true swap (see :class:`Swap`). A dictionary (TorchIO's Subject):
    every 4-D / 5-D tensor not under `label_keys` gets its own draws (TorchIO draws per image), the
    label maps are left alone. in_place (keyword only): swap in the inputs themselves. Draws of
    the last tensor: ``last_locations`` ((N, num_iterations, 6) int64), ``last_applied``."""

    _CANDIDATES = 8  # second corners drawn per swap before a redraw round

    def __init__(self, patch_size: Any = 15, num_iterations: int = 100, p: float = 1.0,
                 label_keys: Sequence[str] = (), seed: Optional[int] = None, *, in_place: bool = False,
                 include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.patch_size = _patch_size3(patch_size)
        if not isinstance(num_iterations, (int, np.integer)) or isinstance(num_iterations, bool):
            raise TypeError(f"num_iterations must be an int,not {num_iterations}")
        if num_iterations < 0:
            raise ValueError(f"num_iterations must be positive,not {num_iterations}")
        self.num_iterations = int(num_iterations)
        self.p = _check_prob(p)
        self._subject_keys(label_keys, include, exclude, keep)
        self.in_place = bool(in_place)
        self.last_locations: Optional[np.ndarray] = None
        self.last_applied: Optional[np.ndarray] = None

    def _draw(self, n: int, spatial: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        size, patch = np.array(spatial, dtype=np.int64), np.array(self.patch_size, dtype=np.int64)
        if (size < patch).any():
            raise ValueError(f"Patch size {list(self.patch_size)} cannot be larger than image spatial shape "
                             f"{tuple(int(s) for s in spatial)}")
        positions = np.maximum(size - patch, 1)  # randint(size - patch), or 0 when that is 0
        it, r = self.num_iterations, self._CANDIDATES
        if it > 0 and (positions == 1).all():
            raise ValueError(f"a {list(self.patch_size)} patch has a single position in {tuple(spatial)}: no "
                             "second patch can differ from the first (TorchIO would loop forever)")
        u = ops.philox_uniform(self._next_seed(), 0, n, 1 + it * 3 * (1 + r)).numpy()
        applied = u[:, 0] < self.p

        def corner(v: np.ndarray) -> np.ndarray:
            return np.minimum(np.floor(v * positions).astype(np.int64), positions - 1)

        first = corner(u[:, 1:1 + 3 * it].reshape(n, it, 3))
        cand = corner(u[:, 1 + 3 * it:].reshape(n, it, r, 3))
        differ = (cand != first[:, :, None, :]).any(-1)  # (n, it, r)
        second = np.take_along_axis(cand, differ.argmax(-1)[:, :, None, None], 2)[:, :, 0]
        todo = ~differ.any(-1)
        while todo.any():  # every candidate equal to the first corner: another round for those
            more = ops.philox_uniform(self._next_seed(), 0, n, it * 3).numpy().reshape(n, it, 3)
            c2 = corner(more)
            ok = todo & (c2 != first).any(-1)
            second[ok] = c2[ok]
            todo &= ~ok
        loc = np.concatenate([first, second], -1)
        return loc, np.where(applied, it, 0).astype(np.int64)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        loc, counts = self._draw(x.shape[0], x.shape[2:])
        self.last_locations, self.last_applied = loc, counts > 0
        if not counts.any():
            return img
        return restore(_swap_patches(x, torch.from_numpy(loc), torch.from_numpy(counts), self.patch_size,
                                     self.in_place))


class RandSimulateLowResolution(_Degrade, _Randomizable):
    """MONAI RandSimulateLowResolution (nnU-Net's SimulateLowResolutionTransform), batched. Per
    sample, with probability `prob`: zoom ~ U(zoom_range); low size per axis
    max(1, round_half_even(size * zoom)); then torch interpolate(nearest, size=low) and
    interpolate(upsample_mode, size=original, align_corners) -- here one fused gather with
    exactly torch's index rules, no low-resolution tensor. Output float32 (MONAI's cast).
    downsample_mode: 'nearest' (MONAI's default; the only one implemented); upsample_mode:
    'trilinear' (default) or 'nearest'. `device` is accepted for MONAI's signature: the result is
    on the input's device."""

    def __init__(self, prob: float = 0.1, downsample_mode: str = "nearest", upsample_mode: str = "trilinear",
                 zoom_range: Sequence[float] = (0.5, 1.0), align_corners: bool = False,
                 device: Optional[torch.device] = None, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.prob = _check_prob(prob)
        down = str(getattr(downsample_mode, "value", downsample_mode)).lower()
        up = str(getattr(upsample_mode, "value", upsample_mode)).lower()
        if down != "nearest":
            raise NotImplementedError(f"downsample_mode={downsample_mode!r}: only 'nearest' (MONAI's default) "
                                      "is implemented")
        if up not in ("trilinear", "nearest"):
            raise NotImplementedError(f"upsample_mode={upsample_mode!r}: only 'trilinear' (MONAI's default) and "
                                      "'nearest' are implemented")
        if len(zoom_range) != 2:
            raise ValueError(f"zoom_range must be a (min, max) pair, got {zoom_range}")
        lo, hi = float(zoom_range[0]), float(zoom_range[1])
        if not (np.isfinite(lo) and np.isfinite(hi) and lo > 0 and hi > 0):
            raise ValueError(f"zoom_range must hold positive finite zoom factors, got {zoom_range}")
        self.downsample_mode, self.upsample_mode = down, up
        self.zoom_range = (lo, hi)
        self.align_corners = bool(align_corners)
        self.device = device
        self.zoom_factor = 1.0
        self.last_zoom: Optional[torch.Tensor] = None
        self.last_low_size: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x: torch.Tensor, seed: Optional[int] = None) -> dict:
        n = x.shape[0]
        u = ops.philox_uniform(self._next_seed() if seed is None else seed, 0, n, 2)
        applied = u[:, 0] < self.prob
        lo, hi = self.zoom_range
        zoom = lo + (hi - lo) * u[:, 1]  # numpy's uniform(low, high)
        return {"zoom": zoom, "applied": applied}

    @staticmethod
    def _low_size(x: torch.Tensor, zoom: torch.Tensor, applied: torch.Tensor) -> torch.Tensor:
        """(N, 3) int64: max(1, np.round(size * zoom)) (half to even, float64), the size itself
        where the gate is closed. From each image's own shape (dictionary keys may differ)."""
        size = torch.tensor([int(s) for s in x.shape[2:]], dtype=torch.float64)
        low = torch.round(size[None, :] * zoom[:, None]).clamp(min=1).to(torch.int64)
        return torch.where(applied[:, None], low, size.to(torch.int64)[None, :]).contiguous()

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_low_size = self._low_size(x, params["zoom"], params["applied"])
        self.last_zoom, self.last_applied = params["zoom"], params["applied"]
        self.zoom_factor = float(params["zoom"][0])

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        mode = UPSAMPLE_TRILINEAR if self.upsample_mode == "trilinear" else UPSAMPLE_NEAREST
        low = self._low_size(x, params["zoom"], params["applied"])
        return torch.ops.voxaug.simulate_low_resolution(x, low, mode, self.align_corners, torch.float32)


# ---------------- TorchIO RandomAnisotropy ----------------
def _check_interp(image_interpolation: Any, bspline: bool = False) -> str:
    """TorchIO's image_interpolation, of those voxaug's kernels offer here (linear, nearest; with
    `bspline`, SimpleITK's cubic B-spline too)."""
    if not isinstance(image_interpolation, str):
        raise TypeError(f"Interpolation must be a string, not {type(image_interpolation)}")
    name = image_interpolation.lower()
    offered = ("linear", "nearest", "bspline") if bspline else ("linear", "nearest")
    if name not in offered:
        raise NotImplementedError(f"image_interpolation={image_interpolation!r}: "
                                  f"{', '.join(repr(v) for v in offered)} are implemented")
    return name


def _anisotropy_axis(n: int, spacing: float, new_spacing: float, linear: bool) -> tuple:
    """One axis of TorchIO's RandomAnisotropy: SimpleITK resamples to `new_spacing` with nearest
    neighbours on TorchIO's grid (size floor(n * spacing / new_spacing), centred on the image),
    then back to the n original voxels (identity transform, so each axis maps on its own).
    Returns (lo, hi, weight, inside) per output voxel: the two input indices (the low-resolution
    voxels' sources) and the linear weight between them, and whether the continuous index lies in
    ITK's buffer [-0.5, m - 0.5) (outside, the resampler writes 0; inside, it clamps to the edge).
    None where the axis maps onto itself."""
    m = int(np.floor(n * spacing / new_spacing)) if n > 1 else 1
    if m == n and new_spacing == spacing:
        return None
    if m < 1:
        raise ValueError(f"downsampling: a factor of {new_spacing / spacing:g} leaves no voxel on an axis of "
                         f"{n} voxels")
    f = new_spacing / spacing
    i0 = (n - 1) / 2.0 - (m - 1) / 2.0 * f  # TorchIO: the new grid shares the image's centre
    down = np.floor(i0 + np.arange(m) * f + 0.5).astype(np.int64)  # ITK nearest: round half up
    down = np.clip(down, 0, n - 1)
    u = (np.arange(n) - i0) / f
    inside = (u >= -0.5) & (u < m - 0.5)
    if linear:
        k = np.floor(u).astype(np.int64)
        w = u - k
        lo, hi = down[np.clip(k, 0, m - 1)], down[np.clip(k + 1, 0, m - 1)]
    else:
        k = np.clip(np.floor(u + 0.5).astype(np.int64), 0, m - 1)
        lo = hi = down[k]
        w = np.zeros(n)
    return lo, hi, w, inside


def _resample_axis(x: torch.Tensor, dim: int, table: tuple) -> torch.Tensor:
    """x (C, D, H, W) float along `dim`: lo + (hi - lo) * w, zero outside (one _anisotropy_axis table)."""
    lo, hi, w, inside = table
    dev = x.device
    shape = [1] * x.dim()
    shape[dim] = -1
    a = x.index_select(dim, _host_to(torch.from_numpy(lo), dev))
    if not np.array_equal(lo, hi):
        b = x.index_select(dim, _host_to(torch.from_numpy(hi), dev))
        a = a.add_((b - a).mul_(_host_to(torch.from_numpy(w).to(x.dtype).reshape(shape), dev)))
    if not inside.all():
        a = a.mul_(_host_to(torch.from_numpy(inside).to(x.dtype).reshape(shape), dev))
    return a


class RandomAnisotropy(_TorchIOArgs, _Randomizable):
    """TorchIO RandomAnisotropy(axes=(0, 1, 2), downsampling=(1.5, 5), image_interpolation='linear',
    scalars_only=True, p=1): per sample (with probability `p`), an axis from `axes` and a factor
    f ~ U(downsampling) (a number d means (1, d)); the spacing of that axis times f, resampled
    with nearest neighbours onto TorchIO's coarser grid (centred, floor(size / f) voxels) and
    back to the original grid with `image_interpolation` ('linear' or 'nearest'), as TorchIO's two
    SimpleITK Resample calls: ITK's rules (nearest rounds half up; the edge voxel within half a
    low-resolution voxel, 0 beyond). Computed per axis as two gathers and a blend, no
    low-resolution image. Spacing from a MetaTensor's affine (only TorchIO's floor of
    size * spacing / new spacing uses it), else 1 mm. A dictionary (TorchIO's Subject) shares each
    sample's draw across its 4-D / 5-D tensors; those under `label_keys` are label maps, left
    alone with scalars_only=True, else resampled with nearest neighbours. Float results keep
    the dtype (float16 / bfloat16 computed in float32); integer images truncate, as ITK's cast.
    Draws of the last call: ``last_axis``, ``last_downsampling``, ``last_applied``.

    Differences: Philox draws, one per sample; float32 blend for float32 images (ITK: double, then
    float32), so values agree to about 1e-6 of the range; with 'nearest', a voxel exactly halfway
    between two coarse voxels (the centre of an odd axis over an even coarse grid) rounds half up
    here, while ITK rounds its physical-coordinate arithmetic's result, which may fall either side."""

    def __init__(self, axes: Union[int, Sequence[int]] = (0, 1, 2), downsampling: Any = (1.5, 5),
                 image_interpolation: str = "linear", scalars_only: bool = True, p: float = 1.0,
                 label_keys: Sequence[str] = (), seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        axes_t = tuple(axes) if isinstance(axes, (list, tuple)) else (axes,)
        for a in axes_t:
            if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or int(a) not in (0, 1, 2):
                raise ValueError("All axes must be 0, 1 or 2")
        if not axes_t:
            raise ValueError("axes must name at least one axis")
        self.axes = tuple(int(a) for a in axes_t)
        self.downsampling_range = _torchio_range(downsampling, "downsampling", min_constraint=1.0)
        self.image_interpolation = _check_interp(image_interpolation)
        self.scalars_only = bool(scalars_only)
        self.p = _check_prob(p)
        self.label_keys = tuple(label_keys)
        self.last_axis: Optional[np.ndarray] = None
        self.last_downsampling: Optional[np.ndarray] = None
        self.last_applied: Optional[np.ndarray] = None
        self._filter_args(include, exclude, keep)

    @staticmethod
    def _spacing(img: Any) -> np.ndarray:
        aff = getattr(img, "affine", None)
        return _spacing_of(_one_affine(aff, "img.affine")) if isinstance(aff, torch.Tensor) else np.ones(3)

    def _draw(self, n: int) -> None:
        u = ops.philox_uniform(self._next_seed(), 0, n, 3).numpy()
        axes = np.array(self.axes)
        self.last_axis = axes[np.minimum(np.floor(u[:, 1] * len(axes)).astype(np.int64), len(axes) - 1)]
        lo, hi = self.downsampling_range
        self.last_downsampling = lo + (hi - lo) * u[:, 2]
        self.last_applied = u[:, 0] < self.p

    def _apply(self, img: Any, linear: bool) -> Any:
        x, restore = _as_batch(img)
        if x.shape[0] != len(self.last_axis):
            raise ValueError(f"the dictionary's tensors must share the batch size ({len(self.last_axis)}), "
                             f"got {x.shape[0]}")
        if not self.last_applied.any():
            return img
        spacing = self._spacing(img)
        work = x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)
        outs = []
        for i in range(x.shape[0]):
            y = work[i]
            if self.last_applied[i]:
                a = int(self.last_axis[i])
                new_spacing = spacing.copy()
                new_spacing[a] = spacing[a] * self.last_downsampling[i]
                for b in range(3):
                    table = _anisotropy_axis(x.shape[2 + b], float(spacing[b]), float(new_spacing[b]), linear)
                    if table is not None:
                        y = _resample_axis(y, 1 + b, table)
            outs.append(y)
        out = torch.stack(outs)
        if x.dtype.is_floating_point:
            out = out.to(x.dtype)
        else:
            info = torch.iinfo(x.dtype)
            out = out.clamp(info.min, info.max).trunc_().to(x.dtype)
        return restore(out)

    def __call__(self, data: Any) -> Any:
        import collections.abc

        if not isinstance(data, collections.abc.Mapping):
            self._draw(_as_batch(data)[0].shape[0])
            return self._apply(data, self.image_interpolation == "linear")
        items = [(k, v) for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)]
        if not items:
            return dict(data)
        self._draw(_as_batch(items[0][1])[0].shape[0])
        out = dict(data)
        for k, v in items:
            if k in self.label_keys:
                if not self.scalars_only:
                    out[k] = self._apply(v, False)
            else:
                out[k] = self._apply(v, self.image_interpolation == "linear")
        return out


# ---------------- Gibbs ringing (k-space truncation) ----------------
def _gibbs_distance(shape, device) -> torch.Tensor:
    """MONAI GibbsNoise's distance of each k-space voxel from the spectrum's centre (float64,
    numpy's ogrid arithmetic), on `device`."""
    center = (np.array(shape) - 1) / 2
    coords = np.ogrid[tuple(slice(0, i) for i in shape)]
    return _host_to(torch.from_numpy(np.sqrt(sum((c - m) ** 2 for c, m in zip(coords, center)))), device)


def _gibbs(x: torch.Tensor, alpha: np.ndarray) -> torch.Tensor:
    """MONAI GibbsNoise on every sample of x, sample n with alpha[n]: the centred spectrum (torch
    fftn over the spatial axes) kept within the sphere of radius (1 - alpha) max(shape) sqrt(2) / 2,
    then the real part of the inverse transform. One forward and one inverse FFT for the batch."""
    dims = (-3, -2, -1)
    shape = tuple(x.shape[2:])
    k = torch.fft.fftshift(torch.fft.fftn(x, dim=dims), dim=dims)
    r = torch.from_numpy(np.array([(1 - a) * np.max(shape) * np.sqrt(2) / 2.0 for a in alpha], dtype=np.float64))
    inside = _gibbs_distance(shape, x.device)[None] <= _host_to(r, x.device).reshape(-1, 1, 1, 1)
    k = k * inside[:, None]
    return torch.fft.ifftn(torch.fft.ifftshift(k, dim=dims), dim=dims, norm="backward").real


class GibbsNoise:
    """MONAI GibbsNoise(alpha): Gibbs ringing by truncating k-space (see :func:`_gibbs`), every
    sample of a batch in one FFT pair on the data's device (cuFFT on CUDA). The result is the real
    part of the inverse transform (float32; float64 for float64 images), as MONAI's."""

    def __init__(self, alpha: float = 0.1):
        if alpha > 1 or alpha < 0:
            raise ValueError("alpha must take values in the interval [0, 1].")
        self.alpha = float(alpha)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        return restore(_gibbs(x, np.full(x.shape[0], self.alpha)))


class RandGibbsNoise(_Degrade, _Randomizable):
    """MONAI RandGibbsNoise(prob, alpha): per sample, with probability `prob`, GibbsNoise with
    alpha ~ U(alpha) (a number a means (0, a)), drawn with Philox on the host (``last_alpha``,
    ``last_applied``; MONAI's ``sampled_alpha`` for sample 0). The applied samples go through one
    FFT pair; in a batch where only some are applied, the others come back as float copies of
    themselves (MONAI returns an unapplied image as it is; a call where none applies does too)."""

    def __init__(self, prob: float = 0.1, alpha: Union[float, Sequence[float]] = (0.0, 1.0),
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        if isinstance(alpha, float):
            alpha = (0, alpha)
        alpha = tuple(alpha) if isinstance(alpha, (list, tuple)) else (alpha,)
        if len(alpha) != 2:
            raise ValueError("alpha length must be 2.")
        if alpha[1] > 1 or alpha[0] < 0:
            raise ValueError("alpha must take values in the interval [0, 1]")
        if alpha[0] > alpha[1]:
            raise ValueError("When alpha = [a,b] we need a < b.")
        self.prob = _check_prob(prob)
        self.alpha = (float(alpha[0]), float(alpha[1]))
        self.sampled_alpha = -1.0
        self.last_alpha: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x: torch.Tensor, seed: Optional[int] = None) -> dict:
        u = ops.philox_uniform(self._next_seed() if seed is None else seed, 0, x.shape[0], 2)
        lo, hi = self.alpha
        return {"alpha": lo + (hi - lo) * u[:, 1], "applied": u[:, 0] < self.prob}

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_alpha, self.last_applied = params["alpha"], params["applied"]
        if bool(params["applied"][0]):
            self.sampled_alpha = float(params["alpha"][0])

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        applied = params["applied"]
        alpha = params["alpha"].numpy()
        if bool(applied.all()):
            return _gibbs(x, alpha)
        rows = torch.nonzero(applied).flatten()
        rows_dev = _host_to(rows, x.device)
        part = _gibbs(x.index_select(0, rows_dev), alpha[rows.numpy()])
        out = x.to(part.dtype, copy=True)
        out.index_copy_(0, rows_dev, part)
        return out


# ---------------- dictionary forms ----------------
class RandCoarseDropoutd(_Dict):
    """MONAI RandCoarseDropoutd: one draw of holes per call (from the first key's shape), used for
    every key; random fills are the same where the keys' shapes agree."""

    def __init__(self, keys, holes: int, spatial_size: Union[Sequence[int], int], dropout_holes: bool = True,
                 fill_value: Union[tuple[float, float], float, None] = None, max_holes: Optional[int] = None,
                 max_spatial_size: Union[Sequence[int], int, None] = None, prob: float = 0.1,
                 allow_missing_keys: bool = False, seed: Optional[int] = None, *, in_place: bool = False):
        super().__init__(keys, RandCoarseDropout(holes, spatial_size, dropout_holes, fill_value, max_holes,
                                                 max_spatial_size, prob, seed, in_place=in_place),
                         allow_missing_keys)


class RandCoarseShuffled(_Dict):
    """MONAI RandCoarseShuffled: one draw of holes per call (from the first key's shape), used for
    every key; keys of the same channel count get the same permutations."""

    def __init__(self, keys, holes: int, spatial_size: Union[Sequence[int], int], max_holes: Optional[int] = None,
                 max_spatial_size: Union[Sequence[int], int, None] = None, prob: float = 0.1,
                 allow_missing_keys: bool = False, seed: Optional[int] = None, *, in_place: bool = False):
        super().__init__(keys, RandCoarseShuffle(holes, spatial_size, max_holes, max_spatial_size, prob, seed,
                                                 in_place=in_place), allow_missing_keys)


class RandSimulateLowResolutiond(_Dict):
    """MONAI RandSimulateLowResolutiond: one zoom per call for every key."""

    def __init__(self, keys, prob: float = 0.1, downsample_mode: str = "nearest", upsample_mode: str = "trilinear",
                 zoom_range: Sequence[float] = (0.5, 1.0), align_corners: bool = False,
                 allow_missing_keys: bool = False, device: Optional[torch.device] = None,
                 seed: Optional[int] = None):
        super().__init__(keys, RandSimulateLowResolution(prob, downsample_mode, upsample_mode, zoom_range,
                                                         align_corners, device, seed), allow_missing_keys)


class GibbsNoised(_Dict):
    def __init__(self, keys, alpha: float = 0.5, allow_missing_keys: bool = False):
        super().__init__(keys, GibbsNoise(alpha), allow_missing_keys)


class RandGibbsNoised(_Dict):
    """MONAI RandGibbsNoised: one draw per call (from the first key's batch size) for every key."""

    def __init__(self, keys, prob: float = 0.1, alpha: Union[float, Sequence[float]] = (0.0, 1.0),
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandGibbsNoise(prob, alpha, seed), allow_missing_keys)
