"""Elastic and grid deformations evaluated inside the resample gather.

MONAI's Rand3DElastic draws a full-resolution noise field with numpy and smooths it; TorchIO
goes through SimpleITK on the CPU. voxaug evaluates the displacement u(x) in the same kernel
that interpolates the image (include/voxaug/deform.h): out(x) = in(M (x + u(x))), M the
sample's affine index map, image and labels in one launch, parameters drawn per sample from
Philox, no host round trip of any field.

Transforms (MONAI / TorchIO names and arguments; (C, D, H, W) or batched (N, C, D, H, W)
tensors, MONAI MetaTensors keep their metadata):

- :class:`Rand3DElastic` / :class:`Rand3DElasticd` (MONAI): ``field="fast"`` (default) draws
  the noise on a coarse control grid and evaluates it as a cubic B-spline in the kernel;
  ``field="exact"`` builds MONAI's field (U(-1, 1) noise at every output voxel, smoothed by
  MONAI's erf Gaussian truncated at 3 sigma, times the magnitude) on the device and gathers
  through it. The fast field is a documented approximation of the exact one (see
  :func:`fast_field_layout`): same displacement variance and the same correlation length
  (control spacing sqrt(3) sigma); tests/python/test_deform.py measures both.
- :class:`GridDistortion`, :class:`RandGridDistortion` (+ ``d`` forms): MONAI's per-axis
  piecewise-linear maps as a separable field.
- :class:`RandomElasticDeformation` (TorchIO): control points in mm over SimpleITK's
  BSplineTransformInitializer domain, locked borders, folding warning.
- :class:`RandomAffineElasticDeformation` (TorchIO): its RandomAffine and
  RandomElasticDeformation in one gather, with ITK's outside rule and pad values.
- :func:`jacobian_determinant`, :func:`folding_fraction`: folding checks of dense fields
  (``deform_field_dense``).

Every transform above (array and dictionary forms) has ``displacement_field()``: the dense
displacement u of its last call, (N, 3, D, H, W) in output voxels along the array axes, MONAI's
``ddf`` convention (``monai.networks.blocks.Warp``), materialised on request by
``deform_field_dense``; the transforms themselves never build it.

In a :class:`voxaug.transforms.Compose`, Rand3DElastic, GridDistortion, RandGridDistortion
(and their dictionary forms) and RandomElasticDeformation close the group of spatial steps
before them: the group's product map M_before joins the gather, out(x) = in(M_before M (x +
u(x))), one launch for the group and the deformation, the same draws (see the end of this
module and ``voxaug.spatial._close_with_deformation``; tests/python/test_deform_fused.py).

Differences from MONAI / TorchIO are listed in each class.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Optional, Sequence

import numpy as np
import torch

from . import ops
from .spatial import (_MASK64, _MAX_TARGETS, _centred_affine, _fall_back_size, _grid_index_map, _grid_opts,
                      _grid_padding, _inner, _Opts, _per_key, _rand_ranges, _RandomSpatial, _stack,
                      RandomAffine, SpatialCrop, torchio_affine_index_map)
from .transforms import _TorchIOArgs, _as_batch, _check_prob, _host_to, _is_meta_tensor, _Randomizable

__all__ = ["Rand3DElastic", "Rand3DElasticd", "GridDistortion", "GridDistortiond", "RandGridDistortion",
           "RandGridDistortiond", "RandomElasticDeformation", "ElasticDeformation", "RandomAffineElasticDeformation", "gaussian_kernel_sum_sq", "fast_field_layout",
           "jacobian_determinant", "folding_fraction"]

# Mean over positions of sum_k B3(t - k)^2: the order-7 B-spline at 0 (151 / 315).
_BSPLINE_SQ_MEAN = 151.0 / 315.0


def gaussian_kernel_sum_sq(sigma: float, truncated: float = 3.0) -> float:
    """sum_i g_i^2 of MONAI's 1-D erf Gaussian kernel (gaussian_1d(sigma, truncated, "erf"))."""
    radius = int(max(sigma * truncated, 0.5) + 0.5)
    t = 0.70710678 / sigma
    g = [0.5 * (math.erf((x + 0.5) * t) - math.erf((x - 0.5) * t)) for x in range(-radius, radius + 1)]
    return float(sum(v * v for v in g))


def fast_field_layout(size: Sequence[int], sigma: float) -> tuple[tuple[int, int, int], list[float], list[float]]:
    """Control grid of the fast Rand3DElastic field for an output of `size` voxels: spacing
    h = sqrt(3) sigma voxels (the autocorrelation of a cubic B-spline field, the order-7
    B-spline, has variance 2/3 h^2 = 2 sigma^2, that of Gaussian-smoothed white noise), grid
    index g = x / h + 1. Returns (K per axis, scale, offset)."""
    h = math.sqrt(3.0) * float(sigma)
    ks = tuple(int(math.floor((s - 1) / h)) + 4 for s in size)
    return ks, [1.0 / h] * 3, [1.0] * 3


def _fast_amplitude(sigma: float) -> float:
    """Half-width a of the U(-a, a) control coefficients whose field has, averaged over
    positions, the variance of MONAI's field for magnitude 1: (1/3) s^3 with s = sum g^2;
    a B-spline field of coefficient variance v has v (151/315)^3, so a = (s / (151/315))^(3/2)."""
    return (gaussian_kernel_sum_sq(sigma) / _BSPLINE_SQ_MEAN) ** 1.5


def jacobian_determinant(field: torch.Tensor) -> torch.Tensor:
    """det(I + grad u) of dense displacements `field` (N, 3, D, H, W) in voxels, by central
    differences (one-sided at the borders): (N, D, H, W). Values <= 0 mark folding."""
    if field.dim() != 5 or field.shape[1] != 3:
        raise ValueError(f"field must be (N, 3, D, H, W), got {tuple(field.shape)}")
    f = field.double()
    grads = []
    for a in range(3):
        if f.shape[2 + a] < 2:
            grads.append(torch.zeros_like(f))
        else:
            grads.append(torch.gradient(f, dim=2 + a)[0])
    j = [[grads[k][:, r] + (1.0 if r == k else 0.0) for k in range(3)] for r in range(3)]
    return (j[0][0] * (j[1][1] * j[2][2] - j[1][2] * j[2][1]) - j[0][1] * (j[1][0] * j[2][2] - j[1][2] * j[2][0])
            + j[0][2] * (j[1][0] * j[2][1] - j[1][1] * j[2][0]))


def folding_fraction(field: torch.Tensor) -> torch.Tensor:
    """Per sample, the fraction of voxels whose Jacobian determinant is <= 0: (N,) float64."""
    det = jacobian_determinant(field)
    return (det <= 0).flatten(1).double().mean(1)


# ---------------- shared machinery ----------------
@dataclass
class _Plan:
    mats: torch.Tensor  # (N, 3, 4) float64 CPU
    out_size: tuple[int, int, int]
    field: torch.Tensor  # on the data's device
    kind: int
    scale: Sequence[float] = (1.0, 1.0, 1.0)
    offset: Sequence[float] = (0.0, 0.0, 0.0)
    field_map: Optional[torch.Tensor] = None  # (N, 6) float64 CPU: per-sample control maps


def _launch(xs: Sequence[torch.Tensor], plan: _Plan, modes: Sequence[str], paddings: Sequence[str],
            pad_values: Optional[Sequence[float]] = None, starts: Optional[torch.Tensor] = None,
            align_corners: bool = False) -> list[torch.Tensor]:
    """One gather per up to 4 inputs through the plan's field. `starts` ((M, K, 3) on the data's
    device): the plan is for the M * K patches of the (M, ...) inputs, cropped in the gather.
    `align_corners`: the 'reflection' padding's mirror (about the edge voxels when True)."""
    inputs = [x if m == "nearest" or x.is_floating_point() else x.float() for x, m in zip(xs, modes)]
    pad_values = [0.0] * len(inputs) if pad_values is None else list(pad_values)
    mats = _host_to(plan.mats, inputs[0].device)
    field = _host_to(plan.field, inputs[0].device)
    if plan.field_map is not None and not bool(torch.isfinite(plan.field_map).all()):  # host (N, 6) maps
        raise ValueError("the per-sample control maps (field_map) must be finite")
    fmap = None if plan.field_map is None else _host_to(plan.field_map, inputs[0].device)
    outs: list[torch.Tensor] = []
    for s in range(0, len(inputs), _MAX_TARGETS):
        sl = slice(s, s + _MAX_TARGETS)
        outs += ops.resample_deformed(inputs[sl], mats, field, plan.kind, plan.out_size, modes[sl], paddings[sl],
                                      pad_values[sl], align_corners, plan.scale, plan.offset, fmap, starts)
    return outs


@dataclass
class _FieldSource:
    """What a call remembers of its field (plain data: a called transform still pickles for
    DataLoader workers): the plan when it is compact (control points, per-axis tables); for a
    volume-sized dense field, the arguments of the owner's ``_plan`` that rebuild it
    bit-identically from the stored Philox draw (not kept alive between calls); for a call
    that displaced nothing, (n, size, device) of its zero field."""
    plan: Optional[_Plan] = None
    rebuild: Optional[tuple] = None
    zeros: Optional[tuple] = None


def _source_of(plan: _Plan, rebuild: tuple) -> _FieldSource:
    return _FieldSource(rebuild=rebuild) if plan.kind == ops.DENSE_FIELD else _FieldSource(plan=plan)


class _FieldOutput:
    """``displacement_field()``: the dense displacement of the last call."""

    _fields: Optional[dict] = None  # key (None for a tensor call) -> _FieldSource (shared by a size group)

    def _field_plan(self, source: _FieldSource) -> _Plan:
        if source.plan is not None:
            return source.plan
        if source.zeros is not None:
            n, size, device = source.zeros
            return _Plan(_stack([np.eye(4)] * n, 3), tuple(size), torch.zeros((n, 3, *size), device=device),
                         ops.DENSE_FIELD)
        owner = self.transform if isinstance(self, _DeformDict) else self
        return owner._plan(*source.rebuild)

    def displacement_field(self, key: Optional[Hashable] = None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """The dense displacement field u the last call applied: (N, 3, D, H, W) on the data's
        device, in output voxels along the array axes (d, h, w), for every output voxel x: the
        call computed out(x) = in(M (x + u(x))) with M the sample's affine index map (the
        identity for GridDistortion, RandGridDistortion and RandomElasticDeformation; for
        Rand3DElastic the random affine centred as MONAI's, the identity without one when the
        output size is the input's). This is MONAI's ``ddf`` convention
        (``monai.networks.blocks.Warp(img, ddf)`` resamples with it); multiply by the voxel
        spacing for mm (TorchIO). Unselected samples (probability gate) have u = 0.

        `key`: for a dictionary call whose keys had different spatial sizes (one field per
        size), the key whose field to return; otherwise optional. `dtype`: the field's type
        (default: that of the stored field, float32, or float64 for the grid distortions).
        Computed by ``deform_field_dense`` from the stored field (cheap: the transforms store
        control points or per-axis tables; an exact Rand3DElastic field is rebuilt from its draw).
        """
        if not self._fields:
            raise RuntimeError(f"{type(self).__name__}.displacement_field: no field, the transform has not been "
                               f"called or its last call deformed no tensor")
        if key is None:
            sources = list({id(f): f for f in self._fields.values()}.values())
            if len(sources) != 1:
                raise ValueError(f"key must name one of {list(self._fields)}: the last call's keys had different "
                                 f"spatial sizes, each with its own field")
            source = sources[0]
        elif key not in self._fields:
            raise KeyError(f"key {key!r} was not deformed by the last call; deformed keys: {list(self._fields)}")
        else:
            source = self._fields[key]
        plan = self._field_plan(source)
        fmap = None if plan.field_map is None else _host_to(plan.field_map, plan.field.device)
        return ops.deform_field_dense(plan.field, plan.kind, plan.out_size, plan.scale, plan.offset, dtype, fmap)


class _RandomDeform(_FieldOutput, _RandomSpatial):
    """The spatial transforms' per-sample Philox draws (gate + k uniforms, sharing, replay),
    plus two columns: the sample's global index and the call's noise key. The device noise of
    sample i is Philox (key, index), so a sample's field does not depend on its batch."""

    # Not invertible (no record is written): Compose.inverse skips the deformations, as MONAI
    # skips its non-invertible Rand3DElastic; the spatial steps' inherited inverse would look
    # for a record the call never wrote.
    inverse = None

    def draw_params(self, batch_size: int = 1, first_sample: int = 0, seed: Optional[int] = None) -> torch.Tensor:
        """(batch_size, k + 2) float64 CPU tensor: the k uniforms of
        :meth:`voxaug.spatial._RandomSpatial.draw_params`, the global sample index
        first_sample + i (first_sample for every row of a shared draw), and the noise key (a
        52-bit integer derived from `seed`)."""
        seed = self._next_seed() if seed is None else int(seed) & _MASK64
        n = int(batch_size)
        u = super().draw_params(n, first_sample, seed)
        if getattr(self, "_share_batch", False):
            ids = torch.full((n, 1), float(first_sample), dtype=torch.float64)
        else:
            ids = torch.arange(first_sample, first_sample + n, dtype=torch.float64).view(n, 1)
        key = torch.full((n, 1), float((seed >> 12) ^ 0x9E3779B97F4A7), dtype=torch.float64)
        return torch.cat([u, ids, key], 1).contiguous()

    @staticmethod
    def _noise(params: torch.Tensor, shape: Sequence[int], device, dtype=torch.float32) -> torch.Tensor:
        """U(-1, 1) of `shape` (N, ...) on `device`: sample i keyed by (params key, params index)."""
        n = params.shape[0]
        ids = params[:, -2].numpy()
        key = int(params[0, -1].item())
        if n and np.all(ids == ids[0]) and n > 1:  # shared draw: one noise for the batch
            one = ops.uniform_fill_(torch.empty((1, *shape[1:]), dtype=dtype, device=device), -1.0, 1.0, key,
                                    int(ids[0]))
            return one.expand(n, *shape[1:]).contiguous()
        first = int(ids[0]) if n else 0
        if n and not np.array_equal(ids, np.arange(first, first + n)):
            raise ValueError("params rows must be consecutive samples of one draw_params call")
        return ops.uniform_fill_(torch.empty(tuple(shape), dtype=dtype, device=device), -1.0, 1.0, key, first)

    def _per_sample(self, values: Sequence[float], device) -> torch.Tensor:
        return _host_to(torch.tensor(values, dtype=torch.float32).view(-1, 1, 1, 1, 1), device)


def _keys(keys) -> list:
    return [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)


class _DeformDict(_FieldOutput):
    """Applies a deformation to `keys` with per-key mode / padding: one draw, one field, one
    gather for all keys of the same spatial size (:meth:`displacement_field` per key)."""

    def __init__(self, keys, transform, mode, padding_mode, allow_missing_keys: bool):
        self.keys = _keys(keys)
        self.transform = transform
        self.mode = _per_key(mode, len(self.keys), "mode")
        self.padding_mode = _per_key(padding_mode, len(self.keys), "padding_mode")
        self.allow_missing_keys = allow_missing_keys
        for m, p in zip(self.mode, self.padding_mode):
            _grid_opts(m, p, False)

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        if hasattr(self.transform, "set_random_state"):  # GridDistortion draws nothing
            self.transform.set_random_state(seed, generator)
        return self

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        self._fields = None
        items = []
        for i, key in enumerate(self.keys):
            if key not in d:
                if self.allow_missing_keys:
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            x, restore = _as_batch(d[key])
            opts = _grid_opts(self.mode[i], self.padding_mode[i], False)
            items.append((key, x, restore, opts))
        if not items:
            return d
        sizes = {x.shape[0] for _, x, _, _ in items}
        if len(sizes) != 1:
            raise ValueError(f"all keys must have the same batch size to share a random draw, got {sorted(sizes)}")
        n = sizes.pop()
        params = self.transform._params_for(n, True) if isinstance(self.transform, _RandomDeform) else None
        by_size: dict = {}
        for j, (_, x, _, _) in enumerate(items):
            by_size.setdefault((tuple(x.shape[2:]), x.device), []).append(j)
        fields = {}
        for (in_size, device), members in by_size.items():
            plan = self.transform._plan(in_size, n, params, device)
            outs = _launch([items[j][1] for j in members], plan, [items[j][3].mode for j in members],
                           [items[j][3].padding for j in members])
            source = _source_of(plan, (in_size, n, params, device))
            for j, out in zip(members, outs):
                d[items[j][0]] = items[j][2](out)
                fields[items[j][0]] = source
        self._fields = fields
        return d


# ---------------- MONAI Rand3DElastic ----------------
class Rand3DElastic(_RandomDeform):
    """MONAI Rand3DElastic: with probability `prob` per sample, a random smooth displacement
    (sigma ~ U(sigma_range), magnitude ~ U(magnitude_range), in output voxels) plus a random
    affine (MONAI's rotate / shear / translate / scale ranges and construction), as MONAI:
    grid = A (x + u(x)), centred. Unselected samples are resampled with the identity onto
    `spatial_size`.

    ``field="fast"`` (default): u is a cubic B-spline with control spacing sqrt(3) sigma and
    U(-a, a) coefficients scaled to MONAI's variance (:func:`fast_field_layout`), evaluated
    in the gather; ``field="exact"``: MONAI's algorithm (U(-1, 1) noise at every output voxel,
    erf Gaussian truncated at 3 sigma, zero padded, times the magnitude) on the device, then
    the gather reads the dense field. The random numbers are voxaug's (Philox), not numpy's.
    """

    def __init__(self, sigma_range, magnitude_range, prob: float = 0.1, rotate_range=None, shear_range=None,
                 translate_range=None, scale_range=None, spatial_size=None, mode="bilinear",
                 padding_mode="reflection", device=None, field: str = "fast", seed: Optional[int] = None):
        super().__init__(prob, seed)
        self.sigma_range = tuple(float(v) for v in sigma_range)
        self.magnitude_range = tuple(float(v) for v in magnitude_range)
        if len(self.sigma_range) != 2 or not 0 < self.sigma_range[0] <= self.sigma_range[1]:
            raise ValueError(f"sigma_range must be (min, max) with 0 < min <= max, got {sigma_range!r}")
        if len(self.magnitude_range) != 2 or self.magnitude_range[0] > self.magnitude_range[1]:
            raise ValueError(f"magnitude_range must be (min, max) with min <= max, got {magnitude_range!r}")
        if field not in ("fast", "exact"):
            raise ValueError(f"field must be 'fast' or 'exact', got {field!r}")
        self.field = field
        self._ranges = [_rand_ranges(rotate_range, "rotate_range"), _rand_ranges(shear_range, "shear_range"),
                        _rand_ranges(translate_range, "translate_range"), _rand_ranges(scale_range, "scale_range")]
        self._n_uniforms = 3 + sum(len(r) for r in self._ranges)
        self.spatial_size, self.mode, self.padding_mode = spatial_size, mode, padding_mode
        _grid_opts(mode, padding_mode, False)
        _fall_back_size(spatial_size, (1, 1, 1))

    def parameters(self, params: torch.Tensor) -> list[Optional[dict]]:
        """Per sample: sigma, magnitude and MONAI's affine params, or None (not selected)."""
        out = []
        for row, gate in zip(params.numpy(), self._gates(params)):
            if not gate:
                out.append(None)
                continue
            lo, hi = self.magnitude_range
            vals = {"magnitude": lo + (hi - lo) * float(row[1])}
            lo, hi = self.sigma_range
            vals["sigma"] = lo + (hi - lo) * float(row[2])
            j = 3
            for name, rng, add in zip(("rotate_params", "shear_params", "translate_params", "scale_params"),
                                      self._ranges, (0.0, 0.0, 0.0, 1.0)):
                vals[name] = [a + (b - a) * float(row[j + i]) + add for i, (a, b) in enumerate(rng)]
                j += len(rng)
            out.append(vals)
        return out

    def _plan(self, in_size, n: int, params: torch.Tensor, device, spatial_size=None) -> _Plan:
        out_size = _fall_back_size(self.spatial_size if spatial_size is None else spatial_size, in_size)
        per = self.parameters(params)
        mats = []
        for p in per:
            a = np.eye(4) if p is None else _centred_affine(p["rotate_params"], p["shear_params"],
                                                             p["translate_params"], p["scale_params"])
            mats.append(_grid_index_map(a, in_size, out_size, False)[0])
        mats_t = _stack(mats, 3)
        mags = [0.0 if p is None else p["magnitude"] for p in per]
        if self.field == "exact":
            noise = self._noise(params, (n, 3, *out_size), device)
            sig = torch.tensor([[0.0] * 3 if p is None else [p["sigma"]] * 3 for p in per], dtype=torch.float64)
            smooth = torch.ops.voxaug.gaussian_smooth(noise, sig, 3.0)
            field = smooth.mul_(self._per_sample(mags, device))  # in place: no second full-size field
            return _Plan(mats_t, out_size, field, ops.DENSE_FIELD)
        # fast: one control grid per call, a control spacing per sample. The grid is the one of
        # the smallest sigma the range allows (the most control points any sample can use), not
        # the batch's largest: then a sample's coefficients (Philox-keyed by their place in the
        # grid) do not depend on the other samples' sigmas.
        sigmas = [self.sigma_range[0] if p is None else p["sigma"] for p in per]
        layouts = [fast_field_layout(out_size, s) for s in sigmas]
        kmax = fast_field_layout(out_size, self.sigma_range[0])[0]
        noise = self._noise(params, (n, 3, *kmax), device)
        amps = [m * _fast_amplitude(s) for m, s in zip(mags, sigmas)]
        coeff = noise.mul_(self._per_sample(amps, device))
        fmap = torch.tensor([lay[1] + lay[2] for lay in layouts], dtype=torch.float64).view(n, 6)
        return _Plan(mats_t, out_size, coeff, ops.BSPLINE_FIELD, field_map=fmap)

    def __call__(self, img, spatial_size=None, mode=None, padding_mode=None, randomize: bool = True):
        x, restore = _as_batch(img)
        opts = _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode, False)
        params = self._params_for(x.shape[0], randomize)
        in_size, n, device = tuple(x.shape[2:]), x.shape[0], x.device
        plan = self._plan(in_size, n, params, device, spatial_size)
        (out,) = _launch([x], plan, [opts.mode], [opts.padding])
        self._fields = {None: _source_of(plan, (in_size, n, params, device, spatial_size))}
        return restore(out)


class Rand3DElasticd(_DeformDict):
    """Dictionary form of :class:`Rand3DElastic`: one draw and one gather for all keys (e.g.
    image bilinear + label nearest); `mode` / `padding_mode` per key."""

    def __init__(self, keys, sigma_range, magnitude_range, spatial_size=None, prob: float = 0.1,
                 rotate_range=None, shear_range=None, translate_range=None, scale_range=None, mode="bilinear",
                 padding_mode="reflection", device=None, allow_missing_keys: bool = False, field: str = "fast",
                 seed: Optional[int] = None):
        t = Rand3DElastic(sigma_range, magnitude_range, prob, rotate_range, shear_range, translate_range,
                          scale_range, spatial_size, "bilinear", "reflection", device, field, seed)
        super().__init__(keys, t, mode, padding_mode, allow_missing_keys)


# ---------------- MONAI GridDistortion / RandGridDistortion ----------------
def _num_cells(num_cells) -> tuple[int, int, int]:
    v = [num_cells] * 3 if isinstance(num_cells, (int, np.integer)) else list(num_cells)
    if len(v) != 3 or any(int(c) != c or c < 1 for c in v):
        raise ValueError(f"num_cells must be a positive int or 3 positive ints, got {num_cells!r}")
    return tuple(int(c) for c in v)


def _distortion_ranges(size: int, cells: int, steps: Sequence[float]) -> torch.Tensor:
    """MONAI GridDistortion's source index of each voxel along one axis (its float32 linspace
    pieces; MONAI then centres the values and its resampler un-centres them)."""
    ranges = torch.zeros(size, dtype=torch.float32)
    cell = size // cells
    prev = 0.0
    for idx in range(cells + 1):
        start = int(idx * cell)
        end = start + cell
        if end > size:
            end, cur = size, float(size)
        else:
            cur = prev + cell * float(steps[idx])
        ranges[start:end] = torch.linspace(prev, cur, end - start)
        prev = cur
    return ranges


def _separable_plan(in_size, steps_per_sample: Sequence[Optional[Sequence[Sequence[float]]]],
                    cells: tuple[int, int, int], device) -> _Plan:
    n = len(steps_per_sample)
    length = max(in_size)
    table = torch.zeros(n, 3, length, 1, 1, dtype=torch.float64)
    for i, steps in enumerate(steps_per_sample):
        if steps is None:
            continue
        for a in range(3):
            if len(steps[a]) != cells[a] + 1:
                raise ValueError(f"distort_steps[{a}] needs num_cells + 1 = {cells[a] + 1} values, got {len(steps[a])}")
            r = _distortion_ranges(in_size[a], cells[a], steps[a]).double()
            table[i, a, :in_size[a], 0, 0] = r - torch.arange(in_size[a], dtype=torch.float64)
    mats = _stack([_grid_index_map(np.eye(4), in_size, in_size, False)[0]] * n, 3)
    return _Plan(mats, tuple(in_size), _host_to(table, device), ops.SEPARABLE_FIELD)


class GridDistortion(_FieldOutput):
    """MONAI GridDistortion(num_cells, distort_steps, mode, padding_mode): each axis is split in
    `num_cells` cells stretched by `distort_steps` (num_cells + 1 values per axis), evaluated
    in the gather as a separable field. The same steps for every sample of a batch."""

    def __init__(self, num_cells, distort_steps, mode="bilinear", padding_mode="border", device=None):
        self.num_cells = _num_cells(num_cells)
        if len(distort_steps) != 3:
            raise ValueError(f"distort_steps needs one tuple per spatial axis (3), got {len(distort_steps)}")
        self.distort_steps = [tuple(float(v) for v in s) for s in distort_steps]
        for a in range(3):
            if len(self.distort_steps[a]) != self.num_cells[a] + 1:
                raise ValueError(f"distort_steps[{a}] needs num_cells + 1 = {self.num_cells[a] + 1} values")
        self.mode, self.padding_mode = mode, padding_mode
        _grid_opts(mode, padding_mode, False)

    def _plan(self, in_size, n: int, params, device) -> _Plan:
        return _separable_plan(in_size, [self.distort_steps] * n, self.num_cells, device)

    def __call__(self, img, distort_steps=None, mode=None, padding_mode=None):
        x, restore = _as_batch(img)
        opts = _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode, False)
        steps = self.distort_steps if distort_steps is None else distort_steps
        plan = _separable_plan(tuple(x.shape[2:]), [steps] * x.shape[0], self.num_cells, x.device)
        (out,) = _launch([x], plan, [opts.mode], [opts.padding])
        self._fields = {None: _FieldSource(plan=plan)}
        return restore(out)


class GridDistortiond(_DeformDict):
    def __init__(self, keys, num_cells, distort_steps, mode="bilinear", padding_mode="border", device=None,
                 allow_missing_keys: bool = False):
        super().__init__(keys, GridDistortion(num_cells, distort_steps, "bilinear", "border"), mode, padding_mode,
                         allow_missing_keys)


class RandGridDistortion(_RandomDeform):
    """MONAI RandGridDistortion(num_cells=5, prob=0.1, distort_limit=(-0.03, 0.03)): with
    probability `prob` per sample, distort steps 1 + U(distort_limit) per cell boundary and
    axis (:meth:`parameters` returns them), evaluated as a separable field."""

    def __init__(self, num_cells=5, prob: float = 0.1, distort_limit=(-0.03, 0.03), mode="bilinear",
                 padding_mode="border", device=None, seed: Optional[int] = None):
        super().__init__(prob, seed)
        self.num_cells = _num_cells(num_cells)
        if isinstance(distort_limit, (int, float)):
            distort_limit = (min(-distort_limit, distort_limit), max(-distort_limit, distort_limit))
        self.distort_limit = (float(distort_limit[0]), float(distort_limit[1]))
        self._n_uniforms = 1 + sum(c + 1 for c in self.num_cells)
        self.mode, self.padding_mode = mode, padding_mode
        _grid_opts(mode, padding_mode, False)

    def parameters(self, params: torch.Tensor) -> list[Optional[list[list[float]]]]:
        out = []
        lo, hi = self.distort_limit
        for row, gate in zip(params.numpy(), self._gates(params)):
            if not gate:
                out.append(None)
                continue
            steps, j = [], 1
            for c in self.num_cells:
                steps.append([1.0 + lo + (hi - lo) * float(v) for v in row[j:j + c + 1]])
                j += c + 1
            out.append(steps)
        return out

    def _plan(self, in_size, n: int, params, device) -> _Plan:
        return _separable_plan(in_size, self.parameters(params), self.num_cells, device)

    def __call__(self, img, mode=None, padding_mode=None, randomize: bool = True):
        x, restore = _as_batch(img)
        opts = _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode, False)
        params = self._params_for(x.shape[0], randomize)
        plan = self._plan(tuple(x.shape[2:]), x.shape[0], params, x.device)
        (out,) = _launch([x], plan, [opts.mode], [opts.padding])
        self._fields = {None: _FieldSource(plan=plan)}
        return restore(out)


class RandGridDistortiond(_DeformDict):
    def __init__(self, keys, num_cells=5, prob: float = 0.1, distort_limit=(-0.03, 0.03), mode="bilinear",
                 padding_mode="border", device=None, allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandGridDistortion(num_cells, prob, distort_limit, "bilinear", "border", None, seed),
                         mode, padding_mode, allow_missing_keys)


# ---------------- TorchIO RandomElasticDeformation ----------------
_TORCHIO_INTERP = {"nearest": "nearest", "linear": "linear", "bspline": "cubic", "cubic": "cubic"}


def sitk_control_map(size: Sequence[int], num_control_points: Sequence[int]) -> tuple[list[float], list[float]]:
    """SimpleITK's BSplineTransformInitializer(image, mesh = K - 3) in voxel indices: its domain
    is [-0.625, S - 0.375] (the voxel extent widened by 1/8 voxel per side), control spacing
    (S + 0.25) / mesh, control index g = (i + 0.625) / spacing + 1. Returns (scale, offset)."""
    scale, offset = [], []
    for s, k in zip(size, num_control_points):
        step = (s + 0.25) / (k - 3)
        scale.append(1.0 / step)
        offset.append(0.625 / step + 1.0)
    return scale, offset


def _warn_folding(max_displacement, size, spacing, num_control_points, stacklevel: int = 3) -> None:
    """TorchIO's folding warning: a max_displacement above half the control spacing (that of
    SimpleITK's grid, (S + 0.25) * spacing / (K - 3)) on some axis."""
    grid = [(s + 0.25) * sp / (k - 3) for s, sp, k in zip(size, spacing, num_control_points)]
    conflicts = [a for a in range(3) if max_displacement[a] > grid[a] / 2]
    if conflicts:
        warnings.warn(f"The maximum displacement is larger than the coarse grid spacing for dimensions: "
                      f"{conflicts}, so folding may occur. Choose fewer control points or a smaller maximum "
                      f"displacement", RuntimeWarning, stacklevel=stacklevel)


def _affine4(affine: Any) -> np.ndarray:
    a = np.asarray(affine.detach().cpu() if isinstance(affine, torch.Tensor) else affine, dtype=np.float64)
    a = a[0] if a.ndim == 3 else a
    if a.shape != (4, 4) or not np.isfinite(a).all() or abs(np.linalg.det(a[:3, :3])) < 1e-12:
        raise ValueError(f"affine must be a finite, invertible 4 x 4 matrix, got shape {a.shape}")
    return a


def _spacing_of(img: Any, spacing) -> tuple[float, float, float]:
    if spacing is not None:
        v = [float(spacing)] * 3 if isinstance(spacing, (int, float)) else [float(s) for s in spacing]
        if len(v) != 3 or any(s <= 0 for s in v):
            raise ValueError(f"spacing must be a positive number or 3 positive numbers, got {spacing!r}")
        return tuple(v)
    return _affine_spacing(img.affine) if _is_meta_tensor(img) else (1.0, 1.0, 1.0)


def _affine_spacing(aff: torch.Tensor) -> tuple[float, float, float]:
    """Voxel sizes of a MetaTensor affine (4, 4) or batched (N, 4, 4) (its first): the column
    norms (nibabel's voxel_sizes)."""
    aff = torch.as_tensor(aff)
    aff = aff[0] if aff.dim() == 3 else aff
    return tuple(float(v) for v in torch.linalg.norm(aff[:3, :3].double(), dim=0))


class RandomElasticDeformation(_TorchIOArgs, _RandomDeform):
    """TorchIO RandomElasticDeformation(num_control_points=7, max_displacement=7.5 mm,
    locked_borders=2, image_interpolation='linear', label_interpolation='nearest', p=1).

    Per sample (probability `p`): control-point displacements U(-max, max) mm per component on
    a (Kd, Kh, Kw) grid laid over the image as SimpleITK's BSplineTransformInitializer lays it
    (:func:`sitk_control_map`), the outer `locked_borders` layers zeroed, evaluated as a cubic
    B-spline in the gather (mm -> voxels with the spacing of the MetaTensor's affine, or
    `spacing`). Warns as TorchIO when max_displacement exceeds half the control spacing
    (possible folding). Called on a tensor or on a dict of tensors (``label_keys`` and
    integer tensors use label_interpolation); all in one gather per spatial size.

    Differences from TorchIO: displacement components are along the array axes (TorchIO's are
    along ITK's LPS axes: the sign of the first two differs for RAS images; the distribution is
    symmetric); outside the image voxaug pads with `padding_mode` ('border' by default; TorchIO
    fills with each channel's minimum, which a border voxel of a background-padded scan equals).

    In a :class:`voxaug.transforms.Compose` it closes the group of spatial steps before it: one
    gather for the steps and the deformation, with the draw, the control grid (over the steps'
    output size), the mm -> voxel spacing (that of the steps' output affine: after Spacing its
    pixdim), the interpolation per key (the dtype the steps leave) and the folding warning of
    the call on the steps' output. It runs as that call instead (the steps gathered first)
    after a crop (SpatialCrop, CenterSpatialCrop, crop samplers: the call's grid, locked
    borders and padding belong to the cropped window, which the fused gather would read past),
    with max_displacement 0 (nothing drawn, the input returned), or when a key's interpolation
    differs from its steps'.
    """

    def __init__(self, num_control_points=7, max_displacement=7.5, locked_borders: int = 2,
                 image_interpolation: str = "linear", label_interpolation: str = "nearest", p: float = 1.0,
                 spacing=None, padding_mode: str = "border", label_keys: Sequence[Hashable] = (),
                 seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(p, seed)
        k = [num_control_points] * 3 if isinstance(num_control_points, int) else list(num_control_points)
        if len(k) != 3 or any(not isinstance(v, (int, np.integer)) or v < 4 for v in k):
            raise ValueError(f"num_control_points must be an int or 3 ints, each >= 4, got {num_control_points!r}")
        self.num_control_points = tuple(int(v) for v in k)
        d = [max_displacement] * 3 if isinstance(max_displacement, (int, float)) else list(max_displacement)
        if len(d) != 3 or any(float(v) < 0 for v in d):
            raise ValueError(f"max_displacement must be a number or 3 numbers >= 0, got {max_displacement!r}")
        self.max_displacement = tuple(float(v) for v in d)
        if locked_borders not in (0, 1, 2):
            raise ValueError("locked_borders must be 0, 1, or 2")
        if locked_borders == 2 and 4 in self.num_control_points:
            raise ValueError("Setting locked_borders to 2 and using less than 5 control points results in an "
                             "identity transform. Lock fewer borders or use more control points.")
        self.locked_borders = locked_borders
        for name, v in (("image_interpolation", image_interpolation), ("label_interpolation", label_interpolation)):
            if v not in _TORCHIO_INTERP:
                raise ValueError(f"{name} must be one of {sorted(_TORCHIO_INTERP)}, got {v!r}")
        self.image_interpolation, self.label_interpolation = image_interpolation, label_interpolation
        self.spacing = spacing
        _grid_opts("bilinear", padding_mode, False)
        self.padding_mode = padding_mode
        self.label_keys = set(label_keys)
        self._n_uniforms = 1
        self._filter_args(include, exclude, keep)

    def _check_folding(self, size, spacing) -> None:
        _warn_folding(self.max_displacement, size, spacing, self.num_control_points, stacklevel=4)

    def _plan(self, in_size, n: int, params, device, spacing=(1.0, 1.0, 1.0)) -> _Plan:
        self._check_folding(in_size, spacing)
        coeff = self._noise(params, (n, 3, *self.num_control_points), device)
        gate = torch.from_numpy(self._gates(params).astype(np.float32))
        scale = torch.tensor([m / s for m, s in zip(self.max_displacement, spacing)], dtype=torch.float32)
        coeff.mul_(_host_to(gate.view(n, 1, 1, 1, 1) * scale.view(1, 3, 1, 1, 1), device))
        for i in range(self.locked_borders):
            coeff[:, :, i] = 0
            coeff[:, :, -1 - i] = 0
            coeff[:, :, :, i] = 0
            coeff[:, :, :, -1 - i] = 0
            coeff[:, :, :, :, i] = 0
            coeff[:, :, :, :, -1 - i] = 0
        sc, off = sitk_control_map(in_size, self.num_control_points)
        mats = _stack([np.eye(4)] * n, 3)
        return _Plan(mats, tuple(in_size), coeff, ops.BSPLINE_FIELD, sc, off)

    def __call__(self, data, randomize: bool = True):
        self._fields = None
        if isinstance(data, Mapping):
            d = dict(data)
            items = []
            for key, v in d.items():
                if not isinstance(v, torch.Tensor) or v.dim() not in (4, 5):
                    continue
                x, restore = _as_batch(v)
                label = key in self.label_keys or not x.is_floating_point()
                items.append((key, x, restore, self.label_interpolation if label else self.image_interpolation))
            if not items:
                return d
            first = d[items[0][0]]
        else:
            x, restore = _as_batch(data)
            items, first = [(None, x, restore, self.image_interpolation)], data
        sizes = {x.shape[0] for _, x, _, _ in items}
        if len(sizes) != 1:
            raise ValueError(f"all images must have the same batch size, got {sorted(sizes)}")
        n = sizes.pop()
        by_size: dict = {}
        for j, (_, x, _, _) in enumerate(items):
            by_size.setdefault((tuple(x.shape[2:]), x.device), []).append(j)
        if all(v == 0 for v in self.max_displacement):  # TorchIO: no displacement, nothing to do
            self._fields = {}
            for (in_size, device), members in by_size.items():
                source = _FieldSource(zeros=(n, in_size, device))
                self._fields.update({items[j][0]: source for j in members})
            # A new dictionary, as every other call returns (Compose refills its dict in place
            # from the result: returning the caller's own dict would empty it).
            return d if isinstance(data, Mapping) else data
        params = self._params_for(n, randomize)
        spacing = _spacing_of(first, self.spacing)
        results, fields = {}, {}
        for (in_size, device), members in by_size.items():
            plan = self._plan(in_size, n, params, device, spacing)
            outs = _launch([items[j][1] for j in members], plan, [_TORCHIO_INTERP[items[j][3]] for j in members],
                           [self.padding_mode] * len(members))
            source = _FieldSource(plan=plan)
            for j, out in zip(members, outs):
                results[j] = items[j][2](out)
                fields[items[j][0]] = source
        self._fields = fields
        if not isinstance(data, Mapping):
            return results[0]
        for j, (key, _, _, _) in enumerate(items):
            d[key] = results[j]
        return d


class RandomAffineElasticDeformation(_TorchIOArgs, _Randomizable):
    """TorchIO RandomAffineElasticDeformation(affine_first=True, affine_kwargs=None,
    elastic_kwargs=None, p=1): a RandomAffine and a RandomElasticDeformation in one resampling
    (TorchIO: one SimpleITK CompositeTransform). Per sample (probability `p`), the affine's
    scales / degrees / translation and the elastic control points are drawn as voxaug's
    :class:`voxaug.spatial.RandomAffine` and :class:`RandomElasticDeformation` draw them
    (``affine_kwargs`` / ``elastic_kwargs`` are their arguments; a ``p`` there is ignored, as
    TorchIO ignores it), and the sample is gathered once: out(x) = in(M (x + u(x))), M the
    affine's index map (:func:`voxaug.spatial.torchio_affine_index_map`), u the B-spline
    displacement over the image's grid (TorchIO's order for ``affine_first=True``: the elastic
    map, then the affine, applied to the output point), image and label maps in one launch.

    As TorchIO's AffineElasticDeformation: intensity images are interpolated with the affine's
    ``image_interpolation`` into float32 and padded with its ``default_pad_value`` ('minimum',
    'mean' or a number, per channel); tensors under ``label_keys`` (TorchIO's LabelMap) with its
    ``label_interpolation`` and padded with 0 (their dtype kept with 'nearest'); a voxel is
    padded where its deformed point leaves ITK's buffer ([-0.5, S - 0.5) per axis: found in the
    same gather, from a stride-0 volume of ones read by nearest neighbour with zero padding, so
    ties at exactly S - 0.5 may round inside). The mm -> voxel scale of the displacement is the
    spacing of the MetaTensor's affine, of ``affine=``, or ``elastic_kwargs['spacing']``.

    Differences: ``affine_first=False`` (the elastic field evaluated at the affine-mapped point)
    is refused: the gather evaluates the field on the output grid; the displacement components
    are along the array axes (see :class:`RandomElasticDeformation`); voxaug's Philox draws.
    Parameters of the last call: ``last_applied``, ``last_scales``, ``last_degrees``,
    ``last_translation`` ((N, 3) float64) and ``last_control_points`` ((N, 3, Kd, Kh, Kw) float32
    displacements in voxels along the array axes, 0 for samples not applied)."""

    def __init__(self, affine_first: bool = True, affine_kwargs: Optional[Mapping[str, Any]] = None,
                 elastic_kwargs: Optional[Mapping[str, Any]] = None, p: float = 1.0,
                 label_keys: Sequence[Hashable] = (), affine: Any = None, seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not affine_first:
            raise ValueError("affine_first=False (the elastic field evaluated at the affine-mapped point) is not "
                             "supported: voxaug's gather evaluates the field on the output grid; use "
                             "affine_first=True (TorchIO's default) or RandomElasticDeformation then RandomAffine")
        parts = []
        for kw, name, banned in ((affine_kwargs, "affine_kwargs", ("seed", "label_keys", "affine")),
                                 (elastic_kwargs, "elastic_kwargs", ("seed", "label_keys", "padding_mode",
                                                                     "image_interpolation", "label_interpolation"))):
            kw = dict(kw or {})
            kw.pop("p", None)  # TorchIO draws the parts' parameters directly: their own p plays no part
            bad = [k for k in banned if k in kw]
            if bad:
                raise ValueError(f"{name} must not set {bad}: the combined transform sets them (seed, label_keys, "
                                 "affine on the transform itself; interpolation and padding from the affine's "
                                 "arguments, as TorchIO)")
            parts.append(kw)
        self.affine_first = True
        self.affine_kwargs, self.elastic_kwargs = parts
        self.random_affine = RandomAffine(**self.affine_kwargs, affine=affine)
        self.random_elastic = RandomElasticDeformation(**self.elastic_kwargs)
        self.p = _check_prob(p)
        self.label_keys = set(label_keys)
        self.last_applied = self.last_scales = self.last_degrees = self.last_translation = None
        self.last_control_points: Optional[torch.Tensor] = None
        _Randomizable.__init__(self, seed)
        self._filter_args(include, exclude, keep)

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        """One generator for the gate and both parts' draws (a seed makes every call reproducible)."""
        _Randomizable.set_random_state(self, seed, generator)
        for part in (getattr(self, "random_affine", None), getattr(self, "random_elastic", None)):
            if part is not None:
                part._generator = self._generator
        return self

    def __call__(self, data: Any) -> Any:
        batches = _tensor_batches(data, "RandomAffineElasticDeformation")
        if not batches:
            return dict(data) if isinstance(data, Mapping) else data
        n, size = batches[0][2].shape[0], tuple(batches[0][2].shape[2:])
        device = batches[0][2].device
        ra, re = self.random_affine, self.random_elastic
        applied = ops.philox_uniform(self._next_seed(), 0, n, 1).numpy()[:, 0] < self.p
        _, scales, degrees, translation = ra._draw(n)  # the affine's own gate is open (its p was dropped)
        scales[~applied], degrees[~applied], translation[~applied] = 1.0, 0.0, 0.0
        affine = ra._affine_of(batches[0][1])
        spacing = _spacing_of(None, re.spacing) if re.spacing is not None else _affine_spacing(torch.from_numpy(affine))
        plan = re._plan(size, n, re.draw_params(n), device, spacing)
        if not applied.all():
            plan.field.mul_(_host_to(torch.from_numpy(applied.astype(np.float32)).view(n, 1, 1, 1, 1), device))
        mats = [torchio_affine_index_map(scales[i], degrees[i], translation[i], affine, size, ra.center)
                if applied[i] else np.eye(4) for i in range(n)]
        plan = dataclasses.replace(plan, mats=_stack(mats, 3))
        self.last_applied = torch.as_tensor(applied)
        self.last_scales, self.last_degrees = torch.as_tensor(scales), torch.as_tensor(degrees)
        self.last_translation, self.last_control_points = torch.as_tensor(translation), plan.field
        # Labels pad with 0 (TorchIO's default_pad_label), images with the affine's value.
        return _itk_gather(data, batches, plan, self.label_keys, _TORCHIO_INTERP[ra.image_interpolation],
                           _TORCHIO_INTERP[ra.label_interpolation],
                           lambda xin, label: torch.zeros((), dtype=xin.dtype, device=xin.device) if label
                           else ra._pad_values(xin))


def _itk_gather(data: Any, batches: list, plan: "_Plan", label_keys: set, image_mode: str, label_mode: str,
                pad_value: Any) -> Any:
    """Gathers every (key, value, batch, restore) of `batches` through `plan` as SimpleITK's
    ResampleImageFilter does for TorchIO: intensity images interpolated with `image_mode` into
    float32, tensors under `label_keys` with `label_mode` (their dtype kept with 'nearest'), each
    read inside ITK's buffer ([-0.5, S - 0.5) per axis) with ITK's edge rule -- linear and
    nearest clamp to the edge voxels ('border'); ITK's cubic B-spline (TorchIO's 'bspline')
    mirrors about them (its coefficients and taps: voxaug's 'reflection' with align_corners,
    scipy's 'mirror', in a launch of its own) -- and set to ``pad_value(input, is_label)`` (a
    scalar or (N, C, 1, 1, 1) tensor) where the deformed point leaves it: found in the first
    launch, from a stride-0 volume of ones read by nearest neighbour with zero padding (0
    exactly there; ties at S - 0.5 may round inside). Returns the tensor (array call) or a new
    dictionary."""
    n, size, device = batches[0][2].shape[0], tuple(batches[0][2].shape[2:]), batches[0][2].device
    inputs, modes = [], []
    for k, _, x, _ in batches:
        label = k in label_keys
        mode = label_mode if label else image_mode
        inputs.append(x if label and mode == "nearest" else x.float())
        modes.append(mode)
    ones = torch.ones((1, 1, 1, 1, 1), dtype=torch.uint8, device=device).expand(n, 1, *size)
    plain = [j for j, m in enumerate(modes) if m != "cubic"]
    spline = [j for j, m in enumerate(modes) if m == "cubic"]
    first = _launch([inputs[j] for j in plain] + [ones], plan, [modes[j] for j in plain] + ["nearest"],
                    ["border"] * len(plain) + ["zeros"])
    outside = first[-1] == 0
    outs: list = [None] * len(inputs)
    for j, out in zip(plain, first):
        outs[j] = out
    if spline:
        for j, out in zip(spline, _launch([inputs[j] for j in spline], plan, ["cubic"] * len(spline),
                                          ["reflection"] * len(spline), align_corners=True)):
            outs[j] = out
    is_dict = isinstance(data, Mapping)
    result = dict(data) if is_dict else None
    for (k, _, _, restore), xin, out in zip(batches, inputs, outs):
        pad = torch.as_tensor(pad_value(xin, k in label_keys), device=out.device).to(out.dtype)
        if out.requires_grad:
            out = torch.where(outside, pad, out)
        else:  # the gather's own buffer: in place (half the time of a new tensor)
            torch.where(outside, pad, out, out=out)
        y = restore(out)
        if not is_dict:
            return y
        result[k] = y
    return result


def _tensor_batches(data: Any, name: str) -> list:
    """[(key, value, batch, restore)] of the 4-D / 5-D tensors of a dictionary (key None for a
    tensor), all of one batch size, spatial shape and device."""
    is_dict = isinstance(data, Mapping)
    items = [(k, v) for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)] if is_dict \
        else [(None, data)]
    batches = [(k, v, *_as_batch(v)) for k, v in items]
    if batches:
        n, size, device = batches[0][2].shape[0], tuple(batches[0][2].shape[2:]), batches[0][2].device
        for k, _, x, _ in batches:
            if x.shape[0] != n or tuple(x.shape[2:]) != size or x.device != device:
                raise ValueError(f"{name}: every tensor needs the same batch and spatial shape and device, got "
                                 f"{tuple(x.shape)} on {x.device} for key {k!r}")
    return batches


def _sitk_grid_to_index(cp: np.ndarray, affine: np.ndarray) -> tuple[np.ndarray, tuple]:
    """TorchIO's control points ((K0, K1, K2, 3): LPS millimetres on SimpleITK's control grid)
    as voxaug's B-spline coefficients ((3, Ka0, Ka1, Ka2): voxels along the array axes) for an
    image with RAS `affine`, and the control counts along the array axes. SimpleITK's
    BSplineTransformInitializer lays its grid along the physical (LPS) axes, so array axis a
    takes grid axis p(a) (the LPS axis its direction runs along), mirrored where that direction
    is negative (both grids span the voxel range [-0.625, S - 0.375], symmetric about the
    centre), and its component is the LPS one over the signed spacing. An oblique affine has no
    such correspondence: refused."""
    lps = np.diag([-1.0, -1.0, 1.0]) @ affine[:3, :3]
    perm, sign, spacing = [], [], []
    for a in range(3):
        col = lps[:, a]
        j = int(np.argmax(np.abs(col)))
        if np.abs(np.delete(col, j)).max() > 1e-6 * abs(col[j]):
            raise ValueError("ElasticDeformation: the image's affine is oblique; SimpleITK lays TorchIO's control "
                             "grid along the physical axes, which an oblique voxel grid does not follow (resample "
                             "to an axis-aligned orientation first)")
        perm.append(j)
        sign.append(1.0 if col[j] > 0 else -1.0)
        spacing.append(abs(col[j]))
    if sorted(perm) != [0, 1, 2]:
        raise ValueError(f"affine: two array axes run along one physical axis, got {affine[:3, :3].tolist()}")
    grid = np.transpose(cp, (*perm, 3))
    for a in range(3):
        if sign[a] < 0:
            grid = np.flip(grid, a)
    field = np.stack([grid[..., perm[a]] * sign[a] / spacing[a] for a in range(3)])
    return np.ascontiguousarray(field), grid.shape[:3]


class ElasticDeformation(_TorchIOArgs):
    """TorchIO ElasticDeformation(control_points, max_displacement, image_interpolation='linear',
    label_interpolation='nearest'): the B-spline displacement given by ``control_points`` --
    TorchIO's (Kx, Ky, Kz, 3) array of displacements in mm along ITK's LPS axes, as its
    RandomElasticDeformation draws them (``get_params``) -- on the grid SimpleITK's
    BSplineTransformInitializer lays over the image (:func:`sitk_control_map`), evaluated in
    one gather for the whole batch and every tensor of a dictionary. The mm / LPS vectors
    become array-index displacements through the image's affine (a MetaTensor's, ``affine=``,
    else the identity, as TorchIO's for a plain tensor; axis-aligned, see
    :func:`_sitk_grid_to_index`).
    As TorchIO's SimpleITK resampling: every channel is padded with its own minimum where the
    deformed point leaves ITK's buffer; intensity images come back float32; a volume with one
    slice along the last axis gets no displacement along it; all-zero ``max_displacement``
    returns the input; the folding warning for ``max_displacement`` above half the control
    spacing. Tensors under ``label_keys`` (TorchIO's LabelMap) use ``label_interpolation`` and
    keep their dtype with 'nearest' (TorchIO returns float32 for them)."""

    def __init__(self, control_points: Any, max_displacement: Any, image_interpolation: str = "linear",
                 label_interpolation: str = "nearest", label_keys: Sequence[Hashable] = (), affine: Any = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        cp = np.asarray(control_points.detach().cpu() if isinstance(control_points, torch.Tensor)
                        else control_points, dtype=np.float64)
        if cp.ndim != 4 or cp.shape[-1] != 3 or any(k < 4 for k in cp.shape[:3]):
            raise ValueError(f"control_points must be a (Kx, Ky, Kz, 3) array with every K >= 4, got shape "
                             f"{cp.shape}")
        if not np.isfinite(cp).all():
            raise ValueError("control_points must be finite")
        d = [max_displacement] * 3 if isinstance(max_displacement, (int, float)) else list(max_displacement)
        if len(d) != 3 or any(not float(v) >= 0 for v in d):
            raise ValueError(f"max_displacement must be a number or 3 numbers >= 0, got {max_displacement!r}")
        for name, v in (("image_interpolation", image_interpolation), ("label_interpolation", label_interpolation)):
            if v not in _TORCHIO_INTERP:
                raise ValueError(f"{name} must be one of {sorted(_TORCHIO_INTERP)}, got {v!r}")
        self.control_points, self.max_displacement = cp, tuple(float(v) for v in d)
        self.num_control_points = cp.shape[:3]
        self.image_interpolation, self.label_interpolation = image_interpolation, label_interpolation
        self.label_keys = set(label_keys)
        self.affine = None if affine is None else _affine4(affine)
        self._filter_args(include, exclude, keep)

    def _affine_of(self, img: Any) -> np.ndarray:
        if self.affine is not None:
            return self.affine
        return _affine4(img.affine) if _is_meta_tensor(img) else np.eye(4)

    def _plan(self, size: tuple, n: int, device: Any, affine: np.ndarray,
              index_map: Optional[np.ndarray] = None) -> "_Plan":
        """The gather's plan for n samples of spatial `size` with RAS `affine`: the control points
        as array-index B-spline coefficients on SimpleITK's grid, after `index_map` (output index
        -> input index, 4 x 4; default the identity: TorchIO's AffineElasticDeformation passes
        its affine's); TorchIO's folding warning and 2-D rule."""
        spacing = tuple(float(v) for v in np.linalg.norm(affine[:3, :3], axis=0))
        _warn_folding(self.max_displacement, size, spacing, self.num_control_points, stacklevel=4)
        cp = self.control_points.copy()
        if size[2] == 1:  # TorchIO's 2-D case: no displacement along the last (IS) axis
            cp[..., 2] = 0
        field, k = _sitk_grid_to_index(cp, affine)
        field = _host_to(torch.from_numpy(field.astype(np.float32))[None].expand(n, *field.shape).contiguous(),
                         device)
        sc, off = sitk_control_map(size, k)
        m = np.eye(4) if index_map is None else index_map
        return _Plan(_stack([m] * n, 3), size, field, ops.BSPLINE_FIELD, sc, off)

    def __call__(self, data: Any) -> Any:
        is_dict = isinstance(data, Mapping)
        batches = _tensor_batches(data, "ElasticDeformation")
        if not batches or not any(self.max_displacement):  # TorchIO: no displacement, nothing to do
            return dict(data) if is_dict else data
        x = batches[0][2]
        plan = self._plan(tuple(x.shape[2:]), x.shape[0], x.device, self._affine_of(batches[0][1]))
        return _itk_gather(data, batches, plan, self.label_keys, _TORCHIO_INTERP[self.image_interpolation],
                           _TORCHIO_INTERP[self.label_interpolation],
                           lambda xin, label: ops.minmax(xin, True)[..., 0].to(xin.dtype).reshape(
                               *xin.shape[:2], 1, 1, 1))


# ---------------- fusion with the spatial steps before (voxaug.spatial.compose_spatial) ----------------
# A deformation closes a lazy spatial group of voxaug.transforms.Compose: with M_before the
# group's product map (output index -> index of the group's input) and the deformation's own
# plan (map A, field u on the deformation's output grid), out(x) = in(M_before A (x + u(x))):
# one resample_deformed launch instead of one resample and one resample_deformed. Patches of a
# crop sampler (as_batch) before: the crop joins the launch too (resample_deformed's starts).
# After a B-spline deformation, flips and crops fold in as well (spatial._fold_after: the field
# read through their map, flipped components negated); other steps after a deformation start
# the next group (a quarter turn would need the field's axes permuted in the kernel).
#
# RandomElasticDeformation (TorchIO) fuses as it calls: every 4-D / 5-D tensor of a dictionary,
# label_interpolation for label_keys and integer tensors (the dtype the preceding steps leave:
# an integer label a linear step made float is an image then, as in the unfused call), its
# mm -> voxel scale from the spacing its input would have (the group's affine of the first
# tensor, see _fused_plans), its control grid laid over the group's output grid, the folding
# warning for that grid. It runs as itself (no fusion, the group flushed first) when
#  - max_displacement is 0 (the call returns its input and draws nothing);
#  - a deformed key's pending group crops (SpatialCrop, CenterSpatialCrop): the call lays its
#    control grid and locked borders over the cropped window and pads ('border' by default)
#    beyond it, where the fused gather would read the real voxels outside the window; after
#    exact steps the two must be equal, so the crop is gathered first.
_FUSABLE_DEFORMS = (Rand3DElastic, GridDistortion, RandGridDistortion, RandomElasticDeformation)


def _is_fusable_deformation(t: Any) -> bool:
    """Whether compose_spatial may fuse `t` (an array or dictionary deformation) with the spatial
    steps before it."""
    return isinstance(t, _FUSABLE_DEFORMS) or (isinstance(t, _DeformDict)
                                               and isinstance(t.transform, _FUSABLE_DEFORMS))


def _fusion_keys(t: Any, data: Mapping, is_dict: bool, chains: Optional[Mapping] = None) -> Optional[list]:
    """[(key, _Opts)] of the tensors deformation `t` deforms in `data` (key None: an array call),
    or None when `t` must run as itself here (form mismatch, a missing key it raises for, the
    RandomElasticDeformation cases listed above). `chains`: compose_spatial's lazy chains (key ->
    ``_LazyChain``), the pending steps of each key and the dtype they leave."""
    chains = chains or {}
    if isinstance(t, RandomElasticDeformation):
        return _torchio_fusion_keys(t, data, is_dict, chains)
    if isinstance(t, _DeformDict):
        if not is_dict:
            return None
        keys = []
        for i, key in enumerate(t.keys):
            if key not in data:
                if t.allow_missing_keys:
                    continue
                return None  # the transform raises its KeyError
            keys.append((key, _grid_opts(t.mode[i], t.padding_mode[i], False)))
        return keys
    if is_dict:
        return None
    return [(None, _grid_opts(t.mode, t.padding_mode, False))]


def _torchio_fusion_keys(t: "RandomElasticDeformation", data: Mapping, is_dict: bool,
                         chains: Mapping) -> Optional[list]:
    """_fusion_keys of RandomElasticDeformation: the tensors its call deforms, each with the
    interpolation the call picks for the tensor the pending steps would hand it."""
    if all(v == 0 for v in t.max_displacement):
        return None
    padding = _grid_padding(t.padding_mode)
    if is_dict:
        keys = []
        for key, v in data.items():
            if not isinstance(v, torch.Tensor) or v.dim() not in (4, 5):
                continue
            ch = chains.get(key)
            dtype = ch.dtype if ch is not None and ch.steps else v.dtype
            keys.append((key, t.label_interpolation if key in t.label_keys or not dtype.is_floating_point
                         else t.image_interpolation))
    else:
        keys = [(None, t.image_interpolation)]
    for key, _ in keys:
        ch = chains.get(key)
        if ch is not None and any(isinstance(_inner(s.owner), SpatialCrop) for s in ch.steps):
            return None
    return [(key, _Opts(_TORCHIO_INTERP[m], _TORCHIO_INTERP[m], padding, False)) for key, m in keys]


def _fused_plans(t: Any, entries: Sequence[tuple]) -> dict:
    """Draws deformation `t`'s parameters as its call does (once, for batch n) and plans its field
    per (virtual input size, device) of `entries` [(key, n, size, device, affine)] (affine: the
    MetaTensor affine the key's tensor would have, None for a plain tensor); records the fields
    for ``displacement_field()`` as the call would. Returns {key: plan}.

    RandomElasticDeformation: mm -> voxels with its `spacing`, else that of the first entry's
    affine (the call's first tensor, after the pending steps: Spacing's output spacing), else 1."""
    owner = t.transform if isinstance(t, _DeformDict) else t
    n = entries[0][1]
    params = owner._params_for(n, True) if isinstance(owner, _RandomDeform) else None
    extra: tuple = ()
    if isinstance(owner, RandomElasticDeformation):
        first = entries[0][4]
        extra = (_spacing_of(None, owner.spacing) if owner.spacing is not None or first is None
                 else _affine_spacing(first),)
    by_size: dict = {}
    for key, _, size, device, _ in entries:
        by_size.setdefault((tuple(size), device), []).append(key)
    plans, fields = {}, {}
    for (size, device), keys in by_size.items():
        plan = owner._plan(size, n, params, device, *extra)
        if isinstance(owner, RandomElasticDeformation):
            rebuild = (size, n, params, device) + extra
        else:
            rebuild = (size, n, params, device) if isinstance(t, _DeformDict) else (size, n, params, device, None)
        source = _source_of(plan, rebuild)
        for key in keys:
            plans[key], fields[key] = plan, source
    t._fields = fields
    return plans


def _fused_launch(xs: Sequence[torch.Tensor], mats: torch.Tensor, plan: _Plan, opts: Sequence[Any],
                  starts: Optional[torch.Tensor] = None) -> list:
    """The deformation's gather for inputs `xs` through (N, 3, 4) maps `mats` (the spatial group's
    map times the plan's): one launch per up to 4 inputs. `starts`: patches of `xs` (see _launch)."""
    return _launch(xs, dataclasses.replace(plan, mats=mats), [o.mode for o in opts], [o.padding for o in opts],
                   starts=starts)
