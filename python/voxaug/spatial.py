"""MONAI-compatible spatial transforms backed by ``torch.ops.voxaug.resample``.

Every transform here is a per-sample 3x4 index map (output voxel index -> input voxel index,
voxel centres at integers) plus an output size. The maps are built in float64 on the CPU
(parameter plumbing only), copied to the data's device from pinned memory with
``non_blocking=True`` (:func:`voxaug.transforms._host_to`; so are padding index tables and the deformations'
per-sample factors), and one ``voxaug.ops.resample`` launch gathers the whole batch; in the
dictionary forms the keys that share a map (image and label of a RandAffined, say) share that
one launch, each with its own interpolation and padding mode. A Compose that fuses a crop
sampler with the steps after it computes the crop starts on the device from the sampler's
centres. The host synchronises only where the data decides something on the host, by design:

- CropForeground(d): the crop's size is the data's bounding box (``compute_bounding_box``
  reads it, one sync per call).
- TorchIO CropOrPad with ``mask_name``: the mask's bounding box decides the crop / pad split
  (read once per call, as TorchIO's numpy does). Its other modes, Pad's statistics
  ('mean', 'median', 'minimum', 'maximum') and 'linear_ramp' stay on the device.
- MetaTensor inputs of the random crop samplers (:mod:`voxaug.crop`): the crop affines need
  the crop centres on the host (``voxaug.crop._finish``). MetaTensors through the transforms
  here do not sync (MONAI keeps affines on the host; the records are host work).
- Parameters given as CUDA tensors (``rotate_params``, ``affine``, Spacing's ``affine=`` for
  a plain tensor, ...) are read on the host (``.cpu()``) where they are taken: pass numbers,
  sequences or CPU tensors to avoid it.

Inputs and outputs follow :mod:`voxaug.transforms`: a (C, D, H, W) sample or an
(N, C, D, H, W) batch (CPU or CUDA tensor, MONAI MetaTensor or numpy array).

What matches MONAI, and how (tests/python/test_spatial.py checks each on real volumes):

- SpatialCrop, CenterSpatialCrop: MONAI's compute_slices (center & size, start & end, or
  slices), as an integer translation: exact path, bit-identical to slicing (empty crops are
  refused).
- Flip, Rotate90 (and RandFlip, RandAxisFlip, RandRotate90): signed permutations, nearest, bit-identical to
  ``torch.flip`` / ``torch.rot90`` for every dtype.
- Affine, RandAffine: MONAI's matrix ``A = R @ Sh @ T @ Sc`` (AffineGrid; each factor only
  when its parameters are truthy) acts on centred output coordinates; MONAI's Resample
  maps the result to grid_sample's normalised grid with ``2 / max(2, size)`` and our map
  reproduces that, the ``max(2, size)`` of size-1 axes and the ``align_corners`` rescaling
  included. Rotate, RandRotate: MONAI's ``shift @ R @ shift_1`` index map, MONAI's output
  shape rule for ``keep_size=False``. Linear results agree with MONAI within float32
  interpolation rounding; nearest results are identical except at coordinates within float
  rounding of a half-voxel tie (MONAI builds its grid in float32).
- Resize, Zoom: MONAI calls ``torch.nn.functional.interpolate``; linear modes are the same
  separable map (``src = (o + 0.5) * in/out - 0.5`` clamped to the border, or
  ``o * (in-1)/(out-1)`` with ``align_corners=True``), within float32 rounding. Interpolate's
  ``nearest`` and ``nearest-exact`` floor rather than round, and compute ``o * scale`` in the
  data's precision (MONAI's ``dtype``, float32 by default): voxaug reads interpolate's own
  index table for the sizes and dtype at hand and fits the map that round-half-even turns
  into the same indices, so nearest results are bit-identical. For rare size pairs (about
  0.5%; e.g. 6 -> 246) float32 rounding gives a table that no affine map reproduces; those
  are gathered with the table itself (three index_selects), still bit-identical. Zoom's
  ``keep_size`` centre crop is part of the map; its padding (numpy.pad's ``edge``,
  ``constant``, ``reflect``, ``symmetric``, ``wrap``, or torch's names) is a gather after the
  resample, as MONAI pads after interpolating. Mode ``area`` (MONAI's default for both) is
  interpolate's adaptive average pooling, which voxaug calls itself (torch's
  ``adaptive_avg_pool3d``, batched, in MONAI's ``dtype``): bit-identical to MONAI; it is not an
  index map, so it is never fused into a lazy group. Resize's ``anti_aliasing`` smooths first
  with voxaug's Gaussian filter (MONAI's GaussianSmooth and sigma rule), within float32
  rounding of MONAI.
- RandZoom, RandZoomd: MONAI's factor rule (one number: isotropic; two: (first, first,
  second); three: per axis, each U(min, max)); each sample is exactly Zoom with its factors.
  keep_size with an interpolating mode: one launch for the batch with per-sample maps, then
  the per-sample padding as batched gathers; 'area' (and a nearest batch needing interpolate's
  index table) loops over the samples. Inverted per sample as MONAI's RandZoom; never fused.
- Spacing, Orientation (and Spacingd, Orientationd): affine-aware; MONAI's geometry step by step in
  float64 (min/max_pixdim, zoom_affine, compute_shape_offset, ``solve(src, dst)`` as the index map,
  the "affine unchanged" shortcut, ``affine @ xform``, recompute_affine, Spacingd's
  ensure_same_shape, nibabel's orientation helpers): same shapes and affines (tests/python/
  test_spacing.py). Spacing images within float32 rounding of MONAI's float64 resampling;
  Orientation is a signed permutation, bit-identical. Plain tensors take ``affine=`` and get
  ``(tensor, new_affine)`` back; a batch needs one shared affine.
- Dictionary forms: keys whose maps agree share one launch (Affined, RandAffined, Rotated,
  RandRotated, Flipd, ...: image bilinear + label nearest in one gather). In Resized / Zoomd
  a nearest key has its own (floor-rule) map, so image and label take two launches.

Differences from MONAI, by design:

- Nearest keeps the input dtype (int16 labels stay int16, bit-exact); MONAI returns float32.
  Linear modes return the input's floating dtype (integer input is computed in float32).
  Arithmetic is float32 (float64 input: float64), whatever MONAI's ``dtype`` argument says;
  ``dtype``, ``device`` and ``cache_grid`` are accepted for signature compatibility only.
- Random parameters come from Philox on the host (``ops.philox_uniform``), keyed by the call's
  seed (drawn from the transform's generator) and the sample's index (``draw_params(batch_size,
  first_sample, seed)``): a sample's result does not depend on the batch it is in. A batch gets
  a per-sample gate ``u < prob`` and per-sample parameters, not one draw per call.
- A MetaTensor keeps its metadata; its ``affine`` is composed with the transform's index map
  as MONAI does (``affine @ xform``, per sample for a batch with different maps), and its
  ``applied_operations`` gets one record per call (see "Invertibility" below). Per-transform
  ``lazy=True`` raises NotImplementedError. Lazy resampling is done by
  :class:`voxaug.transforms.Compose` instead: consecutive spatial transforms, a following
  SpatialCrop / CenterSpatialCrop included, are multiplied into one map and gathered once
  (see :func:`compose_spatial` and the "lazy composition" notes at the end of this module).
- MONAI's integer modes are spline orders (its scipy map_coordinates backend): 0 nearest,
  1 linear, 3 voxaug's cubic B-spline, and 2 / 4 / 5 the prefiltered B-splines of those orders
  (scipy's, ``ops.resample`` modes "quadratic" / "quartic" / "quintic"), for the grid transforms
  (Spacing, Affine, RandAffine, Rotate, RandRotate, and the deformations) on floating images.
  MONAI hands these to scipy with padding 'zeros' -> scipy's 'constant' (0 outside [0, S-1], no
  blending: voxaug's "cutoff" padding, also for orders 0 and 1), 'border' -> 'nearest',
  'reflection' -> 'reflect'; voxaug follows each (float64: within 1e-9 of scipy, and of the exact
  interpolant where scipy's 'reflect' truncates its boundary sums on short axes). MONAI reads
  'reflection' as scipy's 'reflect' whatever align_corners says; voxaug's reflection bounds follow
  align_corners ('mirror' when True) as for grid_sample.
- Not supported yet (NotImplementedError): interpolate's ``bicubic`` (Resize, Zoom),
  Affine ``normalized=True`` with an integer spline order (MONAI's scipy backend reads the matrix differently there; with 'nearest', 'bilinear'
  and 'bicubic' it follows MONAI's grid_sample reading). Size-1 axes with
  ``align_corners=True`` in Rotate: MONAI's normalisation degenerates there; voxaug keeps the
  plain index map.
- Shapes that would differ between the samples of a batch are refused (ValueError):
  RandRotate90 on a non-square plane, RandRotate with ``keep_size=False``. Transform such
  samples one at a time.
- Rotations by exact multiples of 90 degrees between axes whose sizes differ in parity put
  whole planes on half-voxel ties: nearest results then differ from MONAI's on those planes
  (both are valid roundings); Rotate90 is the exact tool there.

Invertibility (MONAI's InvertibleTransform; tests/python/test_inverse.py compares each inverse
with MONAI's on real volumes):

- On a MetaTensor, while ``monai.data.set_track_meta`` is on, every transform here (array and
  dictionary forms, random ones included) appends a record to ``applied_operations`` (of each
  key, for dictionaries), and ``t.inverse(x)`` / ``t.inverse(data)`` pops the last record,
  checks that it is ``t``'s (same ``id``; MONAI's ``"none"`` id skips the check) and undoes it.
  Errors name what was expected: no MetaTensor or an empty ``applied_operations``
  (ValueError), the record of another transform (RuntimeError; records are undone last-in,
  first-out). The input is never modified; the result is a new MetaTensor.
- Undoing a map: the per-sample index maps are inverted in float64 and the batch is resampled
  onto the original grid in one launch, with the forward's mode, padding and align_corners
  (MONAI's Affine / RandAffine / Rotate / RandRotate / Spacing inverses resample with the
  inverted matrix too). Signed permutations with integer offsets are inverted exactly, so
  Flip, Rotate90, Orientation, the random flips / quarter turns and integer crops come back
  bit-exactly (a crop: zeros outside the ROI, as MONAI's BorderPad). Zoom and Resize invert as
  MONAI does: undo keep_size's padding (a crop) or crop (zero padding), then resize back to
  the original size with the forward's mode (interpolate's nearest rule is not the inverse of
  a map; this keeps nearest labels bit-identical to MONAI's inverse).
- The affine: ``affine @ inv(map)`` per sample, as MONAI composes; when that equals the
  recorded input affine up to rounding (always, unless the affine was edited in between), the
  recorded affine itself is restored, so a batch whose samples got different affines returns
  to its shared (4, 4) affine exactly.
- :class:`voxaug.transforms.Compose` ``.inverse`` undoes its transforms in reverse order,
  skipping those without an inverse (intensity), as MONAI does. A lazily fused group writes one
  record of the Compose (its ``id``) with the product map and the list of its steps
  (``extra_info["transforms"]``, class and id each): the inverse undoes the whole group in one
  launch with the inverted product map (a group of one step records as that transform).

Record format (``RECORD_FORMAT``; MONAI's TraceKeys names)::

    {"class": "RandAffine", "id": id(transform), "orig_size": (D, H, W), "do_transforms": bool,
     "tracing": True, "lazy": False,
     "extra_info": {"format": "voxaug.batched/1", "kind": "map" | "resize", "batch_size": N,
                    "out_size": (D', H', W'),
                    "maps": (N, 4, 4) float64 CPU, output index -> input index (kernel map),
                    "meta": (N, 4, 4) float64 CPU, the affine update (affine @ meta),
                    "mode", "padding_mode", "align_corners",  # the kernel's
                    "affine": the input's affine (float64) or None, "affine_replaced": bool,
                    "do_transforms_per_sample": [bool] * N (random transforms) or None,
                    # kind "resize" (Zoom, Resize): "interp", "table_dtype", and per axis
                    # "zoomed", "first", "count", "pad" (keep_size's crop / padding)
                    # fused Compose groups: "transforms": [{"class", "id"}, ...]
                    }}

Where it differs from MONAI, and why:

- One record per call for the whole batch, with per-sample maps inside, rather than MONAI's
  one record per sample: voxaug transforms a batch in one launch and inverts it in one launch
  (MONAI's transforms take single samples; its collated batches hold per-sample lists).
  A random transform's ``do_transforms`` is True if any sample was transformed; the
  per-sample gates are in ``extra_info``. Decollating a batch does not split these records.
- ``extra_info`` holds the maps themselves instead of MONAI's per-transform parameters
  (``rot_mat``, ``k``, ``axes``, ``padded`` ...): every voxaug transform is a map, so one
  inverse serves them all, including fused groups that no single MONAI transform describes.
- A voxaug transform accepts only its own records (and raises on MONAI's); MONAI's
  transforms cannot read voxaug's. MONAI (1.6) looks back through the stack for the most
  recent record with its id; voxaug requires it on top.
- Size-1 axes: MONAI's Affine inverse rebuilds its grid with ``max(2, size)``; voxaug inverts
  the forward map (identical for sizes >= 2). Fused groups invert the product map: with
  nearest steps that is one lookup through the product, not MONAI's step-by-step lookups.
"""
from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import math
import numbers
import warnings
from dataclasses import dataclass
from enum import Enum
from numbers import Number
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

from . import ops
from .transforms import _TorchIOArgs, _as_batch, _check_prob, _host_to, _is_meta_tensor, _present_keys, _Randomizable

__all__ = [
    "Flip", "Flipd", "RandFlip", "RandFlipd", "RandAxisFlip", "RandAxisFlipd", "RandomFlip", "RandomAffine",
    "Rotate90", "Rotate90d", "RandRotate90", "RandRotate90d",
    "Affine", "Affined", "RandAffine", "RandAffined", "Rotate", "Rotated", "RandRotate", "RandRotated",
    "Zoom", "Zoomd", "RandZoom", "RandZoomd", "Resize", "Resized", "Spacing", "Spacingd", "Orientation", "Orientationd",
    "SpatialCrop", "SpatialCropd", "CenterSpatialCrop", "CenterSpatialCropd", "SpatialPad", "SpatialPadd",
    "BorderPad", "BorderPadd", "DivisiblePad", "DivisiblePadd", "ResizeWithPadOrCrop", "ResizeWithPadOrCropd", "CropOrPad", "Pad", "Crop", "CropForeground", "CropForegroundd",
    "CenterScaleCrop", "CenterScaleCropd", "Resample", "ToCanonical", "ToOrientation", "Transpose", "SpatialResample", "SpatialResampled",
    "ResampleToMatch", "ResampleToMatchd",
]

_MASK64 = (1 << 64) - 1
_MAX_TARGETS = 4  # kMaxResampleTargets (include/voxaug/resample.h)


# ---------------- small helpers ----------------
def _name(v: Any) -> Any:
    return v.value if isinstance(v, Enum) else v


def _not_lazy(lazy: Optional[bool]) -> None:
    if lazy:
        raise NotImplementedError("lazy=True: lazy resampling (fused spatial composition) comes later in voxaug")


def _is_number(v: Any) -> bool:
    return isinstance(v, Number) and not isinstance(v, bool)


def _as_list(v: Any) -> list:
    """MONAI's ensure_tuple: None -> [None], a scalar -> [scalar], a sequence -> list."""
    if isinstance(v, (np.ndarray, torch.Tensor)):
        return np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v).reshape(-1).tolist()
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


def _numbers(v: Any, name: str) -> list[float]:
    out = []
    for x in _as_list(v):
        if not _is_number(x) or not math.isfinite(float(x)):
            raise ValueError(f"{name} must be a finite number or a sequence of them, got {v!r}")
        out.append(float(x))
    return out


def _truthy(p: Any) -> bool:
    """MONAI's ``if self.rotate_params:`` on a scalar or a sequence."""
    if p is None:
        return False
    if isinstance(p, (np.ndarray, torch.Tensor)):
        return p.size > 0 if isinstance(p, np.ndarray) else p.numel() > 0
    if isinstance(p, (list, tuple)):
        return len(p) > 0
    return bool(p)


def _rep3(v: Any, name: str) -> list[float]:
    """MONAI's ensure_tuple_rep(v, 3) for numbers."""
    vals = _numbers(v, name)
    if len(vals) == 1 and not isinstance(v, (list, tuple, np.ndarray, torch.Tensor)):
        return vals * 3
    if len(vals) != 3:
        raise ValueError(f"{name} must be a number or 3 numbers (one per spatial axis), got {v!r}")
    return vals


def _fall_back_size(spatial_size: Any, img_size: Sequence[int], name: str = "spatial_size") -> tuple[int, ...]:
    """MONAI's fall_back_tuple: None -> the image size; non-positive entries -> the image's."""
    if spatial_size is None:
        return tuple(int(s) for s in img_size)
    vals = _as_list(spatial_size)
    if len(vals) == 1 and not isinstance(spatial_size, (list, tuple)):
        vals = vals * 3
    if len(vals) != 3 or any(v is not None and not _is_number(v) for v in vals):
        raise ValueError(f"{name} must be an int or 3 ints (D, H, W), got {spatial_size!r}")
    out = []
    for v, s in zip(vals, img_size):
        if v is not None and int(v) != v:
            raise ValueError(f"{name} must be integers, got {spatial_size!r}")
        out.append(int(s) if v is None or v <= 0 else int(v))
    return tuple(out)


def _spatial_axes(axes: Any, name: str) -> list[int]:
    """MONAI's map_spatial_axes for 3 spatial dims (negative axes count from the last)."""
    if axes is None:
        return [0, 1, 2]
    out = []
    for a in _as_list(axes):
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not -3 <= a <= 2:
            raise ValueError(f"{name} must be spatial axes in [-3, 2], got {axes!r}")
        out.append(int(a) % 3)
    return out


def _translate(shift: Sequence[float]) -> np.ndarray:
    m = np.eye(4)
    m[:3, 3] = shift
    return m


def _rotation(radians: Sequence[float], order: str = "XYZ") -> np.ndarray:
    """MONAI's create_rotate for 3 spatial dims (monai/transforms/utils.py, _create_rotate)."""
    if len(radians) < 1:
        raise ValueError("rotation angles must be non-empty")
    if (not isinstance(order, str) or not 1 <= len(order) <= 3 or not (order.islower() or order.isupper())
            or any(a not in "xyz" for a in order.lower())
            or any(order[i].lower() == order[i + 1].lower() for i in range(len(order) - 1))
            or len(order) < len(radians)):
        raise ValueError(f"rotate_order must be 1-3 axes from 'xyz' (lower: extrinsic, upper: intrinsic), no axis "
                         f"twice in a row, at least one per angle; got {order!r} for {len(radians)} angle(s)")
    affine = np.eye(4)
    for axis, rad in zip(order.lower(), radians):
        s, c = math.sin(rad), math.cos(rad)
        r = np.eye(4)
        if axis == "x":
            r[1, 1], r[1, 2], r[2, 1], r[2, 2] = c, -s, s, c
        elif axis == "y":
            r[0, 0], r[0, 2], r[2, 0], r[2, 2] = c, s, -s, c
        else:
            r[0, 0], r[0, 1], r[1, 0], r[1, 1] = c, -s, s, c
        affine = affine @ r if order.isupper() else r @ affine
    return affine


def _shear(coefs: Sequence[float]) -> np.ndarray:
    """MONAI's create_shear (3D): elementary shears composed in coefficient order."""
    c = (list(coefs) + [0.0] * 6)[:6]
    out = np.eye(4)
    for (i, j), v in zip([(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)], c):
        s = np.eye(4)
        s[i, j] = v
        out = s @ out
    return out


def _scale(factors: Sequence[float]) -> np.ndarray:
    """MONAI's create_scale (3D): missing factors are 1."""
    return np.diag((list(factors) + [1.0] * 3)[:3] + [1.0])


def _centred_affine(rotate, shear, translate, scale, order: str = "XYZ") -> np.ndarray:
    """MONAI AffineGrid: eye @ rotate @ shear @ translate @ scale, each only when truthy."""
    a = np.eye(4)
    if _truthy(rotate):
        a = a @ _rotation(_numbers(rotate, "rotate_params"), order)
    if _truthy(shear):
        a = a @ _shear(_numbers(shear, "shear_params"))
    if _truthy(translate):
        a = a @ _translate((_numbers(translate, "translate_params") + [0.0] * 3)[:3])
    if _truthy(scale):
        a = a @ _scale(_numbers(scale, "scale_params"))
    return a


def _grid_index_map(a: np.ndarray, in_size, out_size, align_corners: bool) -> tuple[np.ndarray, np.ndarray]:
    """MONAI Affine/RandAffine: centred map `a` -> (kernel index map, MetaTensor index map).

    MONAI applies `a` to the centred output grid (times max(2, s) / (max(2, s) - 1) per output
    axis with align_corners), multiplies by 2 / max(2, s_in) and calls grid_sample; in input
    voxel indices that is  i = c * s_in / max(2, s_in) + (s_in - 1) / 2  (align_corners=False)
    or  i = c * (s_in - 1) / max(2, s_in) + (s_in - 1) / 2  (align_corners=True).
    The metadata map is MONAI's compute_w_affine (no align_corners, no max(2, .)).
    """
    t_in = _translate([(s - 1) / 2 for s in in_size])
    t_out = _translate([-(s - 1) / 2 for s in out_size])
    if align_corners:
        f_in = np.diag([(s - 1) / max(2, s) for s in in_size] + [1.0])
        g_out = np.diag([max(2, s) / (max(2, s) - 1) for s in out_size] + [1.0])
    else:
        f_in = np.diag([s / max(2, s) for s in in_size] + [1.0])
        g_out = np.eye(4)
    return t_in @ f_in @ a @ g_out @ t_out, t_in @ a @ t_out


def _normalized_index_map(a: np.ndarray, in_size, out_size, align_corners: bool) -> np.ndarray:
    """MONAI Affine(normalized=True), i.e. Resample(norm_coords=False) on grid_sample: `a` maps
    the centred output grid (AffineGrid's, times max(2, s) / (max(2, s) - 1) per output axis with
    align_corners) straight to grid_sample's normalised input coordinates x in [-1, 1], without the
    2 / max(2, s_in) normalisation; input index i = (x + 1) * s_in / 2 - 1 / 2, or
    (x + 1) * (s_in - 1) / 2 with align_corners. MONAI's returned affine is still compute_w_affine
    of `a` (it reads `a` as a voxel map), so the metadata map of _grid_index_map is kept."""
    t_in = _translate([(s - 1) / 2 for s in in_size])
    t_out = _translate([-(s - 1) / 2 for s in out_size])
    f_in = np.diag([((s - 1) if align_corners else s) / 2 for s in in_size] + [1.0])
    g_out = np.diag([max(2, s) / (max(2, s) - 1) if align_corners else 1.0 for s in out_size] + [1.0])
    return t_in @ f_in @ a @ g_out @ t_out


# ---------------- modes ----------------
_GRID_MODES = {"bilinear": "linear", "nearest": "nearest"}
_GRID_PADDINGS = ("zeros", "border", "reflection")
_INTERP_MODES = {"nearest": "nearest", "nearest-exact": "nearest-exact", "linear": "linear", "bilinear": "linear",
                 "trilinear": "linear", "area": "area"}


def _grid_mode(mode: Any) -> str:
    m = _name(mode)
    if isinstance(m, (int, np.integer)) and not isinstance(m, bool):
        # MONAI's integer modes are spline orders (its scipy map_coordinates backend).
        if 0 <= int(m) <= 5:
            return ("nearest", "linear", "quadratic", "cubic", "quartic", "quintic")[int(m)]
        raise ValueError(f"mode={m}: spline orders are 0 to 5 (MONAI's SplineMode), got {m}")
    if m == "bicubic":
        # torch's grid_sample has no 3-D bicubic; voxaug's cubic is the interpolating B-spline
        # (scipy map_coordinates order 3, prefiltered).
        return "cubic"
    if m not in _GRID_MODES:
        raise ValueError(f"mode must be 'bilinear', 'nearest', 'bicubic' or a spline order 0 to 5, got {mode!r}")
    return _GRID_MODES[m]


def _grid_padding(padding_mode: Any) -> str:
    p = _name(padding_mode)
    if p not in _GRID_PADDINGS:
        raise ValueError(f"padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}")
    return p


def _interp_mode(mode: Any) -> str:
    m = _name(mode)
    if m == "bicubic":
        raise NotImplementedError(f"mode={m!r} (torch interpolate) is not supported by voxaug's resample yet; "
                                  "use mode='area', 'trilinear' or 'nearest'")
    if m not in _INTERP_MODES:
        raise ValueError(f"mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'trilinear', "
                         f"'area', got {mode!r}")
    return _INTERP_MODES[m]


_PAD_MODES = {"constant": "constant", "edge": "edge", "replicate": "edge", "reflect": "reflect",
              "symmetric": "symmetric", "wrap": "wrap", "circular": "wrap"}


def _pad_mode(padding_mode: Any) -> str:
    p = _name(padding_mode)
    if p not in _PAD_MODES:
        raise ValueError(f"padding_mode must be one of {sorted(_PAD_MODES)} (numpy.pad / torch pad names), "
                         f"got {padding_mode!r}")
    return _PAD_MODES[p]


@dataclass(frozen=True)
class _Opts:
    """Per-call (per-key) options: kernel mode, MONAI mode name, padding, align_corners."""

    mode: str  # "linear" | "nearest" (kernel)
    interp: str  # "linear" | "nearest" | "nearest-exact" (the index rule) | "area" (adaptive average pooling)
    padding: str  # kernel padding, or the pad mode of Zoom's keep_size padding
    align_corners: bool
    pad_value: float = 0.0
    table_dtype: Optional[torch.dtype] = torch.float32  # Resize / Zoom nearest: the dtype MONAI interpolates
    # in; None: the image's (MONAI's ``dtype=None``), resolved by :func:`_for_input`; also the dtype of
    # 'area' pooling and of Resize's anti-aliasing
    anti_aliasing: Optional[tuple] = None  # Resize: None off; () MONAI's default sigma; (sD, sH, sW) given


@dataclass
class _Geometry:
    mats: torch.Tensor  # (N, 3, 4) float64, CPU: output index -> input index (what the kernel gets)
    out_size: tuple[int, int, int]
    meta: torch.Tensor  # (N, 4, 4) float64: the map MONAI composes into a MetaTensor's affine
    kernel_padding: str
    pad: Optional[tuple] = None  # ((before, after) x 3, mode, value): padding after the resample
    tables: Optional[tuple] = None  # per-axis source indices: an exact gather instead of the kernel
    pool: Optional[tuple] = None  # interpolate's 'area': (zoomed size, first, count) per axis, see _area
    smooth: Optional[tuple] = None  # Resize's anti-aliasing: Gaussian sigma (D, H, W) in voxels, before all else

    def same_launch(self, other: "_Geometry") -> bool:
        return (self.out_size == other.out_size and self.pad == other.pad and self.tables == other.tables
                and self.pool == other.pool and self.smooth == other.smooth
                and (self.mats is other.mats or (self.mats.shape == other.mats.shape
                                                 and torch.equal(self.mats, other.mats))))


def _stack(maps: Sequence[np.ndarray], rows: int = 4) -> torch.Tensor:
    """(N, rows, 4) float64 CPU tensor of the first `rows` rows of each 4x4 map."""
    if len(maps) == 0:
        return torch.zeros(0, rows, 4, dtype=torch.float64)
    return torch.from_numpy(np.ascontiguousarray(np.stack([m[:rows] for m in maps]).astype(np.float64)))


def _map_geometry(maps: np.ndarray, n: int, out_size, padding: str) -> _Geometry:
    """The geometry of a step whose affine update is its index map (flips, quarter turns,
    crops): `maps` (4, 4) for every sample or (n, 4, 4) per sample; one float64 array serves
    as both (``mats`` is its first three rows)."""
    full = np.empty((n, 4, 4))
    full[...] = maps
    return _own_map_geometry(full, out_size, padding)


def _own_map_geometry(full: np.ndarray, out_size, padding: str) -> _Geometry:
    """_map_geometry of a fresh (n, 4, 4) float64 C-contiguous array, taken over (not copied).
    The rows are copied in numpy (a torch slice + contiguous costs several times more per call)."""
    return _Geometry(torch.from_numpy(full[:, :3].copy()), tuple(out_size), torch.from_numpy(full), padding)


# ---------------- interpolate's index rules (Resize, Zoom) ----------------
def _nearest_table(in_size: int, out_size: int, mode: str, dtype: torch.dtype) -> np.ndarray:
    """Source index of each output voxel under torch interpolate's `mode` on `dtype` data (its
    own floor rule; float32 data computes ``o * scale`` in float32, float64 data in float64)."""
    x = torch.arange(in_size, dtype=dtype).view(1, 1, in_size)
    return F.interpolate(x, size=out_size, mode=mode)[0, 0].double().numpy()


def _margin(t: np.ndarray, o: np.ndarray, m: float) -> tuple[float, float]:
    """Half the width of the offsets b with |m * o + b - t| < 1/2 for all o, and their centre."""
    hi, lo = np.min(t + 0.5 - m * o), np.max(t - 0.5 - m * o)
    return (hi - lo) / 2, (hi + lo) / 2


@functools.lru_cache(maxsize=512)
def _nearest_rule(in_size: int, zoomed: int, first: int, count: int, mode: str,
                  dtype: torch.dtype) -> tuple[float, float, Optional[tuple[int, ...]]]:
    """(m, b, None) with round_half_even(m * o + b) == interpolate's index of zoomed voxel
    first + o, for o < count; or (m, b, table) when no affine map gives that table.

    The margin of a slope (how far the best offset keeps every m * o + b from a rounding
    boundary) is concave in the slope, so a ternary search finds the widest. It is at least
    1 / (2 * zoomed) for the exact floor(o * in / out); torch's float32 rounding of
    o * scale moves a few indices off that line and, rarely (about 0.5% of size pairs),
    off every line: then the caller gathers with the table itself (still exact).
    """
    t = _nearest_table(in_size, zoomed, mode, dtype)[first:first + count]
    o = np.arange(count, dtype=np.float64)
    s = in_size / zoomed
    lo, hi = s - 2.0 / zoomed, s + 2.0 / zoomed
    for _ in range(100):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if _margin(t, o, a)[0] < _margin(t, o, b)[0]:
            lo = a
        else:
            hi = b
    m = (lo + hi) / 2
    width, b = _margin(t, o, m)
    # The kernel computes m * o + b in float32: keep well clear of its rounding.
    if width > 64 * float(np.finfo(np.float32).eps) * (in_size + abs(b) + 1):
        return m, b, None
    return m, b, tuple(int(v) for v in t)


def _table_dtype(dtype: Any, img_dtype: torch.dtype) -> torch.dtype:
    """The dtype MONAI interpolates in: ``dtype or img.dtype`` (float32 by default)."""
    if dtype is None:
        return torch.float64 if img_dtype == torch.float64 else torch.float32
    if isinstance(dtype, torch.dtype):
        return torch.float64 if dtype == torch.float64 else torch.float32
    try:
        return torch.float64 if np.dtype(dtype) == np.float64 else torch.float32
    except TypeError:
        raise ValueError(f"dtype must be a torch or numpy dtype, got {dtype!r}") from None


def _interp_axis(in_size: int, zoomed: int, first: int, count: int, opts: _Opts):
    """Per-axis (kernel m, kernel b, meta m, meta b, table or None) for interpolate from
    `in_size` to `zoomed` voxels, output voxel o standing for zoomed voxel first + o."""
    if opts.align_corners:
        s = 0.0 if zoomed == 1 else (in_size - 1) / (zoomed - 1)
        lm, lb = s, 0.0
    else:
        s = in_size / zoomed
        lm, lb = s, (s - 1) / 2  # (o + 0.5) * s - 0.5; interpolate clamps: border padding
    meta_m, meta_b = (1.0, 0.0) if in_size == zoomed else (lm, lb)
    meta_b += meta_m * first
    if opts.interp in ("linear", "area"):  # area: the map is the metadata's (see _area for the values)
        return lm, lb + lm * first, meta_m, meta_b, None
    m, b, table = _nearest_rule(in_size, zoomed, first, count, opts.interp, opts.table_dtype)
    return m, b, meta_m, meta_b, table


def _diag_maps(axes: Sequence[tuple], out_size: Sequence[int], n: int):
    """Kernel maps, metadata maps and (when some nearest axis has no exact line) index tables."""
    k, meta = np.eye(4), np.eye(4)
    for a, (m, b, mm, mb, _) in enumerate(axes):
        k[a, a], k[a, 3], meta[a, a], meta[a, 3] = m, b, mm, mb
    tables = None
    if any(ax[4] is not None for ax in axes):  # some axis has no exact line: gather all three
        tables = tuple(ax[4] if ax[4] is not None else tuple(int(v) for v in np.round(ax[0] * np.arange(c) + ax[1]))
                       for ax, c in zip(axes, out_size))
    return _stack([k] * n, 3), _stack([meta] * n), tables


def _pad_index(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """numpy.pad's source index of each padded position (constant: -1 outside)."""
    j = np.arange(-before, size + after)
    if mode == "constant":
        return np.where((j >= 0) & (j < size), j, -1)
    if mode == "edge" or size == 1:
        return np.clip(j, 0, size - 1)
    if mode == "reflect":
        p = 2 * (size - 1)
        j = np.mod(j, p)
        return np.where(j >= size, p - j, j)
    if mode == "symmetric":
        j = np.mod(j, 2 * size)
        return np.where(j >= size, 2 * size - 1 - j, j)
    return np.mod(j, size)  # wrap


def _gather_tables(x: torch.Tensor, tables: tuple) -> torch.Tensor:
    """out[..., i, j, k] = x[..., t0[i], t1[j], t2[k]] as a new tensor: axes whose table is a run
    of consecutive indices (a crop, the identity) are narrowed views, the others index_select
    (the axis with the fewest output voxels per input voxel first), one copy at least."""
    out, picks = x, []
    for ax, t in enumerate(tables):
        if len(t) and t == tuple(range(t[0], t[0] + len(t))):
            out = out.narrow(ax + 2, t[0], len(t))
        else:
            picks.append((len(t) / max(int(x.shape[ax + 2]), 1), ax, t))
    for _, ax, t in sorted(picks):
        out = out.index_select(ax + 2, _host_to(torch.tensor(t, dtype=torch.int64), x.device))
    return out.contiguous() if picks else out.clone(memory_format=torch.contiguous_format)


def _apply_pad(x: torch.Tensor, pad: tuple) -> torch.Tensor:
    widths, mode, value = pad
    if mode == "constant":
        out = torch.full((*x.shape[:2], *[s + b + a for s, (b, a) in zip(x.shape[2:], widths)]), value,
                         dtype=x.dtype, device=x.device)
        out[:, :, widths[0][0]:widths[0][0] + x.shape[2], widths[1][0]:widths[1][0] + x.shape[3],
            widths[2][0]:widths[2][0] + x.shape[4]] = x
        return out
    for a, (b, e) in enumerate(widths):
        if b or e:
            idx = _host_to(torch.from_numpy(_pad_index(x.shape[2 + a], b, e, mode)), x.device)
            x = x.index_select(2 + a, idx)
    return x


# ---------------- interpolate's 'area' and Resize's anti-aliasing ----------------
def _area(x: torch.Tensor, pool: tuple) -> torch.Tensor:
    """interpolate(mode='area') to the zoomed size, then voxels first .. first + count per axis.

    torch's interpolate runs 'area' as adaptive_avg_pool3d (output voxel o averages input voxels
    floor(o * in / out) .. ceil((o + 1) * in / out) - 1), and that is what MONAI calls; voxaug
    calls the same op rather than re-deriving it on the resample kernel: bit-identical to MONAI
    on the CPU and on CUDA, batched over N in one launch, no host sync. The windows overlap and
    vary in length, so the result is no index map (the kernel's contract) anyway.
    """
    zoomed, first, count = pool
    y = F.adaptive_avg_pool3d(x.contiguous(), tuple(zoomed))
    if tuple(first) != (0, 0, 0) or tuple(count) != tuple(zoomed):  # Zoom's keep_size centre crop
        y = y[:, :, first[0]:first[0] + count[0], first[1]:first[1] + count[1], first[2]:first[2] + count[2]]
    return y


def _anti_alias(x: torch.Tensor, sigma: tuple) -> torch.Tensor:
    """MONAI Resize's anti-aliasing: GaussianSmooth(sigma) (erf taps, truncated at 4 sigma, zero
    padding; sigma 0 leaves an axis untouched), here voxaug's gaussian_smooth op, the one behind
    :class:`voxaug.filter.GaussianSmooth`: one launch per axis for the batch, in `x`'s dtype."""
    return ops.gaussian_smooth(x, [float(s) for s in sigma], 4.0)


def _anti_alias_sigma(in_size: Sequence[int], out_size: Sequence[int], sigma: Any) -> Optional[tuple]:
    """MONAI's rule: only when some axis shrinks; sigma None: skimage's max(0, (in / out - 1) / 2)
    per axis (MONAI computes in / out in float32); a given sigma applies on shrinking axes only."""
    if not any(o < i for i, o in zip(in_size, out_size)):
        return None
    factors = (torch.tensor([float(v) for v in in_size], dtype=torch.float32)
               / torch.tensor([float(v) for v in out_size], dtype=torch.float32))
    if sigma is None:
        return tuple(float(v) for v in torch.clamp((factors - 1) / 2, min=0).tolist())
    return tuple(float(s) * int(f > 1) for s, f in zip(_rep3(sigma, "anti_aliasing_sigma"), factors.tolist()))


# ---------------- execution ----------------
def _for_input(opts: _Opts, x: torch.Tensor) -> _Opts:
    if opts.table_dtype is None:
        return dataclasses.replace(opts, table_dtype=_table_dtype(None, x.dtype))
    return opts


@dataclass
class _PatchSource:
    """Patches not yet cut: `volume` (M, C, D, H, W) and the (M, K, 3) crop centres on its device.
    Inside compose_spatial a meta-device tensor of the patch batch's shape stands for them, so
    the following spatial steps plan on it and the gather reads the full volume (one launch)."""
    volume: torch.Tensor
    centers: torch.Tensor
    size: tuple
    placeholder: Optional[torch.Tensor] = None  # kept alive so that its id() stays unique
    unbatched: bool = False  # given as one (C, D, H, W) volume: the result drops the batch axis again

    def extract(self) -> torch.Tensor:
        from .crop import extract_patches

        return extract_patches(self.volume, self.centers, self.size)


def _patch_volumes(srcs: Sequence[_PatchSource], opts: Sequence[_Opts]) -> list[torch.Tensor]:
    """The full volumes the patches are gathered from (integer data interpolated as float32)."""
    return [s.volume if o.mode == "nearest" or s.volume.is_floating_point() else s.volume.float()
            for s, o in zip(srcs, opts)]


@functools.lru_cache(maxsize=64)
def _halves_tensor(halves: tuple, dtype: torch.dtype) -> torch.Tensor:
    """torch.tensor(halves, dtype=dtype) on the CPU, made once per (halves, dtype): only read (an operand)."""
    return torch.tensor(halves, dtype=dtype)


def _patch_starts(src: _PatchSource) -> torch.Tensor:
    """(M, K, 3) crop starts (centre - size // 2) on the centres' device."""
    centers, halves = src.centers, [z // 2 for z in src.size]
    if centers.device.type == "cpu":
        return centers - _halves_tensor(tuple(halves), centers.dtype)
    # per-axis scalar offsets: no host-to-device copy (a tensor of the halves would be one)
    return torch.stack([centers[..., a] - h for a, h in enumerate(halves)], -1)


def _run(xs: Sequence[torch.Tensor], geom: _Geometry, opts: Sequence[_Opts],
         patches: Optional[dict] = None, post: Optional[dict] = None) -> list[torch.Tensor]:
    """One resample launch (per 4 inputs) for inputs that share `geom`. Inputs that stand for
    patches (`patches`: id(placeholder) -> _PatchSource, all with the same centres) are
    gathered from their full volumes. `post` ({"id": id(placeholder), "steps": [...], "done":
    False}): pointwise steps for that input's patches, run inside the gather when it is a plain
    patch gather (then "done" becomes True; otherwise the caller runs them after)."""
    align = opts[0].align_corners
    if any(o.align_corners != align for o in opts):
        raise ValueError("inputs of one resample launch must share align_corners")
    if patches and any(id(x) in patches for x in xs):
        srcs = [patches[id(x)] for x in xs]
        if geom.tables is not None or geom.pool is not None or geom.smooth is not None:
            # an index gather, pooling or smoothing: cut the patches, then as usual
            return _run([s.extract() for s in srcs], geom, opts)
        vols = _patch_volumes(srcs, opts)
        starts = _patch_starts(srcs[0])
        mats = _host_to(geom.mats, vols[0].device)
        outs = []
        for s in range(0, len(vols), _MAX_TARGETS):
            part, popts = vols[s:s + _MAX_TARGETS], opts[s:s + _MAX_TARGETS]
            at = next((i for i, x in enumerate(xs[s:s + _MAX_TARGETS]) if post and id(x) == post["id"]), None)
            fuse = at is not None and geom.pad is None and part[at].dtype == xs[s + at].dtype
            outs += ops.resample_patches(part, mats, starts, geom.out_size, [o.mode for o in popts],
                                         [geom.kernel_padding] * len(part), [o.pad_value for o in popts],
                                         align_corners=align, post_input=at if fuse else None,
                                         post_steps=post["steps"] if fuse else ())
            if fuse:
                post["done"] = True
        return [_apply_pad(o, geom.pad) for o in outs] if geom.pad is not None else outs
    out_dtypes: Optional[list] = None  # set when the data run in MONAI's dtype: cast once at the end
    if geom.smooth is not None or geom.pool is not None:
        # MONAI converts to its `dtype` first: the smoothing, the pooling and the interpolation
        # after smoothing run in that dtype (a float16 image rounds once, at the end).
        out_dtypes = [x.dtype if x.is_floating_point() else torch.float32 for x in xs]
        xs = [x.to(o.table_dtype) for x, o in zip(xs, opts)]
        if geom.smooth is not None:
            xs = [_anti_alias(x, geom.smooth) for x in xs]
        if geom.pool is not None:
            outs = [_area(x, geom.pool).to(d) for x, d in zip(xs, out_dtypes)]
            return [_apply_pad(o, geom.pad) for o in outs] if geom.pad is not None else outs
    inputs = [x if o.mode == "nearest" or x.is_floating_point() else x.float() for x, o in zip(xs, opts)]
    outs: list[torch.Tensor] = []
    if geom.tables is not None:  # interpolate's nearest where no affine map reproduces it
        outs = [_gather_tables(x, geom.tables) for x in inputs]
        if out_dtypes is not None:
            outs = [o.to(d) for o, d in zip(outs, out_dtypes)]
        return [_apply_pad(o, geom.pad) for o in outs] if geom.pad is not None else outs
    mats = _host_to(geom.mats, inputs[0].device)
    for s in range(0, len(inputs), _MAX_TARGETS):
        part, popts = inputs[s:s + _MAX_TARGETS], opts[s:s + _MAX_TARGETS]
        outs += ops.resample(part, mats, geom.out_size, [o.mode for o in popts], [geom.kernel_padding] * len(part),
                             [o.pad_value for o in popts],
                             align_corners=align)
    if out_dtypes is not None:
        outs = [o.to(d) for o, d in zip(outs, out_dtypes)]
    if geom.pad is not None:
        outs = [_apply_pad(o, geom.pad) for o in outs]
    return outs


def _with_affine(out: Any, meta: torch.Tensor) -> Any:
    """A MetaTensor result gets ``affine @ meta`` (MONAI's update), per sample when they differ."""
    if not _is_meta_tensor(out):
        return out
    aff = out.affine
    m = meta.to(aff.device, aff.dtype)
    if m.shape[0] == 1 or bool((m == m[:1]).all()):
        out.affine = aff @ m[0]
    else:
        out.affine = aff @ m
    return out


# ---------------- invertibility: MONAI-style records in applied_operations ----------------
# MONAI's TraceKeys (monai.utils.enums), spelled out so that voxaug needs MONAI only when the
# caller passes MetaTensors (the only inputs that get records).
_CLASS, _ID, _ORIG_SIZE, _EXTRA, _DO = "class", "id", "orig_size", "extra_info", "do_transforms"
_TRACING, _LAZY_KEY, _NONE = "tracing", "lazy", "none"
RECORD_FORMAT = "voxaug.batched/1"  # extra_info["format"] of every record voxaug writes


def _tracking(img: Any) -> bool:
    """Records are kept for MetaTensors while MONAI's track_meta is on (as MONAI does)."""
    if not _is_meta_tensor(img):
        return False
    from monai.data.meta_obj import get_track_meta

    return bool(get_track_meta())


def _affine_copy(img: Any) -> Optional[torch.Tensor]:
    return img.affine.detach().cpu().to(torch.float64).clone() if _is_meta_tensor(img) else None


def _make_record(owner: Any, in_size: Sequence[int], geom: _Geometry, opts: _Opts, src_affine: Optional[torch.Tensor],
                 affine_map: Optional[torch.Tensor] = None, replaced: bool = False, gates: Any = None,
                 kind: str = "map", extra: Optional[dict] = None) -> dict:
    """One record for the whole batch (see the module docstring, "Invertibility")."""
    n = geom.mats.shape[0]
    meta = geom.meta if affine_map is None else affine_map
    out_size = [int(s) for s in geom.out_size]
    if geom.pad is not None:  # Zoom's keep_size padding after the resample
        out_size = [s + b + a for s, (b, a) in zip(out_size, geom.pad[0])]
    info = {
        "format": RECORD_FORMAT, "kind": kind, "batch_size": int(n), "out_size": tuple(out_size),
        "maps": _square(geom.mats), "meta": meta.to(torch.float64).expand(n, 4, 4).clone(),
        "mode": opts.mode, "padding_mode": geom.kernel_padding, "align_corners": bool(opts.align_corners),
        "affine": src_affine, "affine_replaced": bool(replaced),
        "do_transforms_per_sample": None if gates is None else [bool(g) for g in gates],
    }
    info.update(extra or {})
    return {_CLASS: type(owner).__name__, _ID: id(owner), _ORIG_SIZE: tuple(int(s) for s in in_size), _EXTRA: info,
            _DO: True if gates is None else bool(np.any(gates)), _TRACING: True, _LAZY_KEY: False}


def _push(out: Any, record: Optional[dict]) -> Any:
    if record is not None and _is_meta_tensor(out):
        out.applied_operations.append(record)
    return out


def _describe(rec: Any) -> str:
    if not isinstance(rec, Mapping):
        return f"a {type(rec).__name__}"
    fused = rec.get(_EXTRA, {}).get("transforms") if isinstance(rec.get(_EXTRA), Mapping) else None
    what = f"{rec.get(_CLASS, '?')} (id {rec.get(_ID, '?')})"
    if fused:
        what += " fusing [" + ", ".join(str(m[_CLASS]) for m in fused) + "]"
    return what


def _last_record(img: Any, owner: Any, where: str) -> dict:
    """The last record of `img`, checked to be `owner`'s (MONAI's pop_transform check, strict:
    records are undone last-in first-out)."""
    name = type(owner).__name__
    expected = f"a record of {name} (id {id(owner)})"
    if not _is_meta_tensor(img):
        raise ValueError(f"{name}.inverse: {where} is a {type(img).__name__}, not a MetaTensor, so it carries no "
                         f"applied_operations; expected {expected} (voxaug records transforms on MetaTensors while "
                         "monai's track_meta is on)")
    ops_ = img.applied_operations
    if not ops_:
        raise ValueError(f"{name}.inverse: {where} has empty applied_operations: nothing to invert; "
                         f"expected {expected}")
    rec = ops_[-1]
    if not isinstance(rec, Mapping) or (rec.get(_ID) != id(owner) and rec.get(_ID) != _NONE) \
            or (rec.get(_ID) == _NONE and rec.get(_CLASS) != name):
        raise RuntimeError(f"{name}.inverse: the last applied operation of {where} is {_describe(rec)}, but expected "
                           f"{expected}; invert transforms in the reverse order of application")
    info = rec.get(_EXTRA)
    if not isinstance(info, Mapping) or info.get("format") != RECORD_FORMAT:
        raise ValueError(f"{name}.inverse: the last applied operation of {where} is not a voxaug record "
                         f"(extra_info['format'] != {RECORD_FORMAT!r}); expected {expected}")
    return rec


def _invert_maps(maps: torch.Tensor, name: str = "inverse") -> torch.Tensor:
    """(N, 4, 4) float64 inverses; a signed permutation with an integer offset is inverted exactly
    (R^T, -R^T t), so the inverse of an exact map stays on the kernel's exact path."""
    maps = maps.to(torch.float64)
    out = maps.clone()
    if maps.shape[0]:
        out, info = torch.linalg.inv_ex(maps)
        if bool((info != 0).any()):
            raise ValueError(f"{name}: the index map of sample(s) {torch.nonzero(info).flatten().tolist()} is "
                             "singular (the forward collapsed an axis: a zero scale or a singular affine), so it "
                             "has no inverse")
    r, t = maps[:, :3, :3], maps[:, :3, 3]
    perm = ((r == 0) | (r.abs() == 1)).all(dim=(1, 2)) & ((r != 0).sum(dim=2) == 1).all(dim=1) \
        & ((r != 0).sum(dim=1) == 1).all(dim=1) & (t == t.round()).all(dim=1)
    for i in torch.nonzero(perm).flatten().tolist():
        out[i] = torch.eye(4, dtype=torch.float64)
        out[i, :3, :3] = r[i].T
        out[i, :3, 3] = -(r[i].T @ t[i])
    return out


def _inverse_affine(current: torch.Tensor, info: Mapping) -> torch.Tensor:
    """``affine @ inv(map)`` (MONAI composes the inverse map); when that is the recorded input
    affine up to rounding (or the forward replaced the affine outright, Spacing's
    recompute_affine), the recorded affine itself, shape included."""
    cur = current.detach().cpu().to(torch.float64)
    inv = _invert_maps(info["meta"], "inverse (the affine)")
    if inv.shape[0] and (inv.shape[0] == 1 or bool((inv == inv[:1]).all())) and cur.dim() == 2:
        composed = cur @ inv[0]
    else:
        composed = cur @ inv
    orig = info.get("affine")
    if orig is not None:
        orig = torch.as_tensor(orig, dtype=torch.float64)
        scale = max(1.0, float(orig.abs().max()))
        if info.get("affine_replaced") or (composed.shape[-2:] == orig.shape[-2:] and torch.allclose(
                composed, orig.expand_as(composed) if composed.dim() >= orig.dim() else orig, rtol=0,
                atol=1e-6 * scale)):
            return orig.clone()
    return composed


def _inverse_job(key: Any, img: Any, rec: Mapping, where: str):
    """A job for :func:`_run_grouped` that undoes `rec` on `img` (one launch per group)."""
    info = rec[_EXTRA]
    x, restore = _as_batch(img)
    n, out_size, orig = x.shape[0], tuple(info["out_size"]), tuple(int(s) for s in rec[_ORIG_SIZE])
    if n != info["batch_size"] or tuple(x.shape[2:]) != out_size:
        raise ValueError(f"{where}: the record of {rec[_CLASS]} was made for a batch of {info['batch_size']} with "
                         f"spatial size {out_size} after the transform, got {n} samples of {tuple(x.shape[2:])}")
    if info["kind"] == "resize":
        # MONAI's Zoom / Resize inverse: undo the keep_size padding (crop) or crop (zero padding),
        # then interpolate back to the original size with the same mode (Resize's index rule).
        sl = [slice(b, b + c) for (b, _), c in zip(info["pad"], info["count"])]
        x = x[:, :, sl[0], sl[1], sl[2]]
        widths = tuple((f, z - f - c) for f, z, c in zip(info["first"], info["zoomed"], info["count"]))
        if any(b or a for b, a in widths):
            x = _apply_pad(x, (widths, "constant", 0.0))
        opts = _Opts(info["mode"], info["interp"], "border", info["align_corners"],
                     table_dtype=torch.float64 if info["table_dtype"] == "float64" else torch.float32)
        axes = [(1.0, 0.0, 1.0, 0.0, None) if z == s else _interp_axis(z, s, 0, s, opts)
                for z, s in zip(info["zoomed"], orig)]
        mats, meta, tables = _diag_maps(axes, orig, n)
        pool = (orig, (0, 0, 0), orig) if info["interp"] == "area" and tuple(info["zoomed"]) != orig else None
        geom = _Geometry(mats, orig, meta, "border", tables=tables, pool=pool)
    else:
        inv = _invert_maps(info["maps"], f"{rec[_CLASS]}.inverse")
        opts = _Opts(info["mode"], info["mode"], info["padding_mode"], info["align_corners"])
        geom = _Geometry(inv[:, :3].contiguous(), orig, inv, info["padding_mode"])

    def finish(out):
        if _is_meta_tensor(out):
            if out.applied_operations and out.applied_operations[-1] is rec:
                out.applied_operations.pop()
            out.affine = _inverse_affine(out.affine, info)
        return out

    return key, x, restore, geom, opts, finish


def _inverse_array(owner: Any, data: Any) -> Any:
    rec = _last_record(data, owner, "img")
    if rec[_EXTRA].get("kind") == "zoom_per_sample":  # RandZoom: per-sample sizes, see _zoom_inverse
        return _zoom_inverse(owner, data, rec, "img")
    d: dict = {}
    _run_grouped(d, [_inverse_job(None, data, rec, "img")])
    return d[None]


def _inverse_dict(owner: Any, data: Mapping, keys: Sequence, allow_missing_keys: bool) -> dict:
    d = dict(data)
    jobs = []
    for key in keys:
        if key not in d:
            if allow_missing_keys:
                continue
            raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
        where = f"data[{key!r}]"
        rec = _last_record(d[key], owner, where)
        if rec[_EXTRA].get("kind") == "zoom_per_sample":  # RandZoomd: per-sample sizes, see _zoom_inverse
            d[key] = _zoom_inverse(owner, d[key], rec, where)
            continue
        jobs.append(_inverse_job(key, d[key], rec, where))
    _run_grouped(d, jobs)
    return d


class _Spatial:
    """A spatial transform: options per call, an optional per-sample draw, a geometry."""

    _n_uniforms = 0  # random transforms: uniforms drawn per sample

    def _options(self, **overrides) -> _Opts:
        raise NotImplementedError

    def _geometry(self, in_size: tuple, n: int, params: Optional[torch.Tensor], opts: _Opts) -> _Geometry:
        raise NotImplementedError

    def _params_for(self, n: int, randomize: bool) -> Optional[torch.Tensor]:
        return None

    def _record_kind(self, in_size: tuple, geom: _Geometry, opts: _Opts) -> tuple[str, dict]:
        return "map", {}

    def _record_for(self, img: Any, in_size: tuple, geom: _Geometry, opts: _Opts, params: Optional[torch.Tensor],
                    owner: Any = None, src_affine: Any = "img") -> Optional[dict]:
        """The applied_operations record of this call (None unless `img` is a tracked MetaTensor)."""
        if not _tracking(img):
            return None
        kind, extra = self._record_kind(in_size, geom, opts)
        gates = self._gates(params) if isinstance(self, _RandomSpatial) and params is not None else None
        return _make_record(self if owner is None else owner, in_size, geom, opts,
                            _affine_copy(img) if isinstance(src_affine, str) else src_affine, gates=gates, kind=kind,
                            extra=extra)

    def inverse(self, data: Any) -> Any:
        """Undoes this transform's last call on `data` (a MetaTensor it returned, or one whose last
        applied operation is that call's record): one resample launch onto the original grid with
        the inverted per-sample maps (Zoom / Resize: MONAI's resize back). Returns a MetaTensor
        with that record popped and the original affine."""
        return _inverse_array(self, data)

    def apply(self, img: Any, params: Optional[torch.Tensor] = None, **overrides) -> Any:
        """Transforms `img`; `params` (random transforms) replays a draw of :meth:`draw_params`."""
        x, restore = _as_batch(img)
        opts = _for_input(self._options(**overrides), x)
        if params is None:
            params = self._params_for(x.shape[0], True)
        elif self._n_uniforms and (not isinstance(params, torch.Tensor)
                                   or tuple(params.shape) != (x.shape[0], self._n_uniforms)):
            raise ValueError(f"params must be a ({x.shape[0]}, {self._n_uniforms}) tensor from draw_params, got "
                             f"{tuple(params.shape) if isinstance(params, torch.Tensor) else type(params).__name__}")
        geom = self._geometry(tuple(x.shape[2:]), x.shape[0], params, opts)
        (out,) = _run([x], geom, [opts])
        out = _with_affine(restore(out), geom.meta)
        return _push(out, self._record_for(img, tuple(x.shape[2:]), geom, opts, params))


class _RandomSpatial(_Spatial, _Randomizable):
    def __init__(self, prob: float, seed: Optional[int]):
        _Randomizable.__init__(self, seed)
        self.prob = _check_prob(prob)
        self._last: Optional[torch.Tensor] = None

    def draw_params(self, batch_size: int = 1, first_sample: int = 0, seed: Optional[int] = None) -> torch.Tensor:
        """Per-sample uniforms in [0, 1), shape (batch_size, k), float64 on the CPU: Philox keyed
        by `seed`, addressed by the global sample index first_sample + i (voxaug.ops.philox_uniform),
        so a sample's parameters do not depend on the batch. `seed` defaults to the transform's
        next seed."""
        seed = self._next_seed() if seed is None else int(seed) & _MASK64
        if getattr(self, "_share_batch", False):  # one draw for the whole batch
            row = ops.philox_uniform(seed, int(first_sample), 1, self._n_uniforms)
            return row.expand(int(batch_size), self._n_uniforms).clone()
        return ops.philox_uniform(seed, int(first_sample), int(batch_size), self._n_uniforms)

    def share_batch_params(self, share: bool = True):
        """share=True: every sample of a batch gets the same draw (sample `first_sample`'s), as
        when one MONAI transform is applied to a stacked batch; default False: independent
        draws per sample."""
        self._share_batch = bool(share)
        return self

    @contextlib.contextmanager
    def _replaying(self, params: torch.Tensor):
        """Inside the block every call uses the draw `params` (compose_spatial: a step that drew
        for a fused group but must run as itself keeps that draw)."""
        self._replay = params
        try:
            yield self
        finally:
            self._replay = None

    def _params_for(self, n: int, randomize: bool) -> torch.Tensor:
        replay = getattr(self, "_replay", None)
        if replay is not None and replay.shape[0] == n:
            self._last = replay
            return replay
        if randomize or self._last is None:
            self._last = self.draw_params(n)
        elif self._last.shape[0] != n:
            raise ValueError(f"randomize=False reuses the last draw, made for a batch of {self._last.shape[0]}, "
                             f"but img has a batch of {n}")
        return self._last

    def _gates(self, params: torch.Tensor) -> np.ndarray:
        return params.numpy()[:, 0] < self.prob  # numpy's column view: no torch slice per call


# ---------------- Flip / RandFlip ----------------
_EYE4 = np.eye(4)
_EYE4.flags.writeable = False  # shared: read only


def _flip_map(in_size, axes) -> np.ndarray:
    m = np.eye(4)
    for a in axes:
        m[a, a], m[a, 3] = -1.0, in_size[a] - 1
    return m


@functools.lru_cache(maxsize=256)
def _flip_map_shared(in_size: tuple, axes: tuple) -> np.ndarray:
    """_flip_map, built once per (size, axes) and shared read-only (the per-call geometry copies it)."""
    m = _flip_map(in_size, axes)
    m.flags.writeable = False
    return m


def _exact_opts() -> _Opts:
    return _EXACT_OPTS


_EXACT_OPTS = _Opts("nearest", "nearest", "zeros", False)  # frozen: one instance serves every call


class Flip(_Spatial):
    """MONAI Flip: reverses the given spatial axes (None: all). Bit-identical to torch.flip."""

    def __init__(self, spatial_axis: Union[Sequence[int], int, None] = None, lazy: bool = False):
        _not_lazy(lazy)
        self.spatial_axis = spatial_axis
        self._axes = _spatial_axes(spatial_axis, "spatial_axis")

    def _options(self, **overrides):
        return _exact_opts()

    def _geometry(self, in_size, n, params, opts):
        return _map_geometry(_flip_map(in_size, self._axes), n, in_size, "zeros")

    def __call__(self, img, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img)


class RandFlip(_RandomSpatial):
    """MONAI RandFlip: flips the given axes with probability `prob`, per sample."""

    _n_uniforms = 1

    def __init__(self, prob: float = 0.1, spatial_axis: Union[Sequence[int], int, None] = None, lazy: bool = False,
                 seed: Optional[int] = None):
        _not_lazy(lazy)
        super().__init__(prob, seed)
        self.spatial_axis = spatial_axis
        self._axes = _spatial_axes(spatial_axis, "spatial_axis")

    def _options(self, **overrides):
        return _exact_opts()

    def _geometry(self, in_size, n, params, opts):
        gates = self._gates(params)
        if len(gates) != n:  # as before: broadcast (a single draw) or raise
            return _map_geometry(np.where(gates[:, None, None], _flip_map(in_size, self._axes), _EYE4), n, in_size,
                                 "zeros")
        full = np.empty((n, 4, 4))
        full[...] = _EYE4
        full[gates] = _flip_map_shared(tuple(in_size), tuple(self._axes))  # the flipped samples
        return _own_map_geometry(full, in_size, "zeros")

    def __call__(self, img, randomize: bool = True, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, _ = _as_batch(img)
        return self.apply(img, self._params_for(x.shape[0], randomize))


def _flips_geometry(flips: Sequence[tuple], in_size, n: int) -> _Geometry:
    """Per-sample flip maps: sample i reverses the spatial axes flips[i] (none: the identity)."""
    size = tuple(in_size)
    full = np.empty((len(flips), 4, 4))
    for i, f in enumerate(flips):
        full[i] = _flip_map_shared(size, tuple(f)) if f else _EYE4
    if len(flips) != n:  # as _map_geometry's broadcast (raises for a draw of another batch size)
        return _map_geometry(full, n, in_size, "zeros")
    return _own_map_geometry(full, in_size, "zeros")


def _inverse_each(owner: Any, data: Any) -> Any:
    """A TorchIO-style transform's inverse: its last record undone on a MetaTensor, or on each
    MetaTensor of a dictionary (a Subject)."""
    if isinstance(data, Mapping):
        return {k: (_inverse_array(owner, v) if _is_meta_tensor(v) else v) for k, v in data.items()}
    return _inverse_array(owner, data)


class RandAxisFlip(_RandomSpatial):
    """MONAI RandAxisFlip: with probability `prob`, flips one spatial axis drawn uniformly from the
    three, per sample (MONAI draws one axis per call). Draw: 2 uniforms per sample, the gate and
    the axis ``min(floor(3 u), 2)``. Bit-identical to ``torch.flip`` of the drawn axis."""

    _n_uniforms = 2

    def __init__(self, prob: float = 0.1, lazy: bool = False, seed: Optional[int] = None):
        _not_lazy(lazy)
        super().__init__(prob, seed)

    def _options(self, **overrides):
        return _exact_opts()

    def _axes(self, params: torch.Tensor) -> list[Optional[int]]:
        """The spatial axis each sample flips (0, 1, 2), None where the gate is closed."""
        u = params.numpy()[:, 1].tolist()
        return [min(int(v * 3), 2) if g else None for v, g in zip(u, self._gates(params).tolist())]

    def _geometry(self, in_size, n, params, opts):
        return _flips_geometry([() if a is None else (a,) for a in self._axes(params)], in_size, n)

    def __call__(self, img, randomize: bool = True, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, _ = _as_batch(img)
        return self.apply(img, self._params_for(x.shape[0], randomize))


# TorchIO's anatomical axis names: the first letter and its opposite.
_ANATOMICAL_OPPOSITE = {"L": "R", "R": "L", "A": "P", "P": "A", "I": "S", "S": "I"}


def _anatomical_indices(img: Any, names: Sequence[str]) -> list[int]:
    """The spatial axis of each anatomical name (TorchIO's axis_name_to_index: the axis whose
    orientation code is the letter or its opposite), from a MetaTensor's affine (RAS, as MONAI's
    and TorchIO's; meta["space"] == "LPS" converted); one affine for the whole batch."""
    if not _is_meta_tensor(img):
        raise ValueError(f"axes: anatomical names {list(names)} need the image's orientation: pass a MetaTensor "
                         f"(its affine), or give axis indices 0, 1, 2; got a {type(img).__name__}")
    import nibabel as nib

    aff = img.affine.detach().cpu().to(torch.float64)
    if aff.dim() == 3:
        if not bool((aff == aff[:1]).all()):
            raise ValueError("axes: anatomical names need one affine for the batch; the samples' affines differ")
        aff = aff[0]
    a = aff.numpy().copy()
    if str(getattr(img, "meta", {}).get("space", "RAS")).upper() == "LPS":
        a = np.diag([-1.0, -1.0, 1.0, 1.0]) @ a
    codes = nib.aff2axcodes(a)
    return [codes.index(c) if c in codes else codes.index(_ANATOMICAL_OPPOSITE[c]) for c in names]


def _torchio_axes(axes: Any) -> tuple:
    """TorchIO's spatial axes argument: indices 0, 1, 2 and anatomical names (kept as their first
    letter, resolved later by :func:`_anatomical_indices`), one or a sequence."""
    if axes is None:
        raise ValueError("Axes cannot be None")
    parsed: list = []
    for a in (list(axes) if isinstance(axes, (list, tuple)) else [axes]):
        if isinstance(a, str):
            if not a or a[0].upper() not in _ANATOMICAL_OPPOSITE:
                raise ValueError(f"axes: {a!r} is not an anatomical axis name (Left / Right, Anterior / "
                                 "Posterior, Inferior / Superior; TorchIO's 2-D names Height / Width / Top / "
                                 "Bottom have no 3-D meaning)")
            parsed.append(a[0].upper())
        elif isinstance(a, (int, np.integer)) and not isinstance(a, bool) and int(a) in (0, 1, 2):
            parsed.append(int(a))
        else:
            raise ValueError(f"axes must be 0, 1, 2 or anatomical names, got {a!r}")
    if not parsed:
        raise ValueError("axes must name at least one axis")
    return tuple(parsed)


# ---------------- TorchIO RandomAffine ----------------
def _torchio_sextet(value: Any, around: Optional[float], name: str, min_constraint: Optional[float] = None
                    ) -> tuple[float, ...]:
    """TorchIO's parse_params: d -> (around - d, around + d) per axis ((0, d) without `around`);
    (a, b) -> the same range on each axis; (d1, d2, d3) -> one range per axis; six values as
    they are. Every range needs min <= max, finite ends, min >= min_constraint."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        v = [float(p) for p in np.ravel(np.asarray(value.detach().cpu() if isinstance(value, torch.Tensor) else value))]
    elif isinstance(value, collections.abc.Sequence) and not isinstance(value, str):
        v = [float(p) for p in value]
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = [float(value)]
    else:
        raise ValueError(f"{name} must be a number or a sequence of 2, 3 or 6 numbers, got {value!r}")
    if len(v) in (1, 2):
        v = v * 3
    if len(v) == 3:
        v = [e for d in v for e in ((0.0, d) if around is None else (around - d, around + d))]
    if len(v) != 6:
        raise ValueError(f'If "{name}" is a sequence, it must have length 2, 3 or 6, not {len(v)}')
    for lo, hi in zip(v[::2], v[1::2]):
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"{name} must be finite, got {value!r}")
        if lo > hi:
            raise ValueError(f"If {name} is a sequence, the second value must be >= the first, got {value!r}")
        if min_constraint is not None and lo < min_constraint:
            raise ValueError(f"{name} must be >= {min_constraint}, got {value!r}")
    return tuple(v)


def _euler_zxy(radians) -> np.ndarray:
    """ITK's Euler3DTransform matrix (ComputeZYX off): Rz(c) Rx(a) Ry(b) for angles (a, b, c)."""
    a, b, c = radians
    rx = np.array([[1, 0, 0], [0, math.cos(a), -math.sin(a)], [0, math.sin(a), math.cos(a)]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rz = np.array([[math.cos(c), -math.sin(c), 0], [math.sin(c), math.cos(c), 0], [0, 0, 1]])
    return rz @ rx @ ry


def torchio_affine_index_map(scales, degrees, translation, affine, size, center: str = "image") -> np.ndarray:
    """The 4x4 map from output voxel index to input voxel index that TorchIO's Affine resamples
    through: SimpleITK's composite [ScaleTransform(scales), Euler3DTransform(degrees, translation)]
    about the image centre (or the origin) in LPS physical space (angles and translation given in
    RAS, converted as TorchIO does), inverted (ResampleImageFilter maps output to input points),
    between voxel indices through the image's RAS `affine`."""
    lps = np.diag([-1.0, -1.0, 1.0, 1.0])
    p = lps @ np.asarray(affine, dtype=np.float64)  # voxel index -> LPS point
    c = (p @ np.array([(s - 1) / 2 for s in size] + [1.0]))[:3] if center == "image" else np.zeros(3)
    flip = np.array([-1.0, -1.0, 1.0])
    r = _euler_zxy(flip * np.radians(np.asarray(degrees, dtype=np.float64)))
    t = flip * np.asarray(translation, dtype=np.float64)
    s_inv = np.eye(4)
    s_inv[:3, :3] = np.diag(1.0 / np.asarray(scales, dtype=np.float64))
    s_inv[:3, 3] = c - s_inv[:3, :3] @ c  # S^-1(q) = c + (q - c) / s
    e_inv = np.eye(4)
    e_inv[:3, :3] = r.T
    e_inv[:3, 3] = c - r.T @ (c + t)  # E^-1(q) = R^T (q - c - t) + c
    return np.linalg.inv(p) @ e_inv @ s_inv @ p  # composite T = S o E; the resampler uses T^-1


def _itk_outside(m: np.ndarray, size, device, in_size=None) -> torch.Tensor:
    """(D, H, W) bool over the output grid `size`: output voxels whose input index lies outside
    [-0.5, S - 0.5) on some axis, S from `in_size` (default: `size`) (ITK's IsInsideBuffer: inside,
    its linear and nearest interpolators clamp to the edge; outside, the resampler writes the
    default value). Per (d, h) row the inside w form one interval (each axis a linear inequality
    in w), so the full-size work is two comparisons and an or."""
    d, h, w = size
    i = torch.arange(d, dtype=torch.float64, device=device)[:, None]
    j = torch.arange(h, dtype=torch.float64, device=device)[None, :]
    lo = torch.full((d, h), -math.inf, dtype=torch.float64, device=device)
    hi = torch.full((d, h), math.inf, dtype=torch.float64, device=device)
    for a, s in enumerate(size if in_size is None else in_size):
        base = float(m[a, 0]) * i + float(m[a, 1]) * j + float(m[a, 3])  # host floats: no tensor of m on `device`
        slope = float(m[a, 2])
        if slope == 0.0:  # the whole row is in or out on this axis
            out = (base < -0.5) | (base >= s - 0.5)
            lo = torch.where(out, torch.full_like(lo, math.inf), lo)
            continue
        k0, k1 = (-0.5 - base) / slope, (s - 0.5 - base) / slope  # -0.5 <= base + slope k < s - 0.5
        if slope > 0:  # k >= k0, k < k1
            lo, hi = torch.maximum(lo, torch.ceil(k0)), torch.minimum(hi, torch.ceil(k1) - 1)
        else:  # k <= k0, k > k1
            lo, hi = torch.maximum(lo, torch.floor(k1) + 1), torch.minimum(hi, torch.floor(k0))
    k = torch.arange(w, dtype=torch.float64, device=device)
    return (k < lo[..., None]) | (k > hi[..., None])


# ---------------- TorchIO Resample / ToCanonical ----------------
_LPS = np.diag([-1.0, -1.0, 1.0, 1.0])


def torchio_reference_grid(size: Sequence[int], affine: np.ndarray, spacing: Sequence[float]) -> tuple:
    """TorchIO Resample's grid for a target spacing (its get_reference_image, SimpleITK's
    geometry): size floor(n * s / s_new) (1 where n is 1), the same direction, centred on the
    image's centre. Returns (size, RAS affine) of the new grid."""
    a = np.asarray(affine, dtype=np.float64)
    p = _LPS @ a  # voxel index -> LPS point
    old_s = _spacing_of(a)
    direction = p[:3, :3] / old_s
    n = np.asarray(size, dtype=np.int64)
    new_s = np.asarray(spacing, dtype=np.float64)
    new_n = np.floor(n * old_s / new_s)
    new_n[n == 1] = 1
    origin = p[:3, 3]
    last = origin + p[:3, :3] @ (n - 1).astype(np.float64)
    centre = (last + origin) / 2
    new_origin = centre - direction @ ((new_n - 1) / 2 * new_s)
    q = np.eye(4)
    q[:3, :3] = direction * new_s
    q[:3, 3] = new_origin
    return tuple(int(v) for v in new_n), _LPS @ q


class Resample(_TorchIOArgs):
    """TorchIO Resample(target=1, image_interpolation='linear', label_interpolation='nearest',
    scalars_only=False): resamples onto TorchIO's grid for a target spacing (a number or three,
    mm: :func:`torchio_reference_grid`), or onto a given grid (a (shape, affine) pair, or a
    reference MetaTensor), with SimpleITK's rules: identity transform in physical space, the edge
    voxel within half a voxel, 0 beyond; nearest rounds half up. One voxaug resample launch per
    batch and key (the batch shares its affine). Images' physical space: `affine=`, a MetaTensor's
    affine, else the identity (TorchIO's for a bare tensor). A MetaTensor result carries the new
    affine (a plain tensor: read ``last_affine``). A dictionary (TorchIO's Subject): every 4-D /
    5-D tensor; those under `label_keys` are label maps (nearest, their dtype kept; skipped with
    scalars_only=True). Intensity images keep their dtype (integers truncate, as ITK's cast: where
    ITK's double interpolation lands a hair below an integer that float32 rounds to, e.g.
    120.99999999999987, the two differ by one). 'bspline' is SimpleITK's cubic B-spline
    (prefiltered, mirrored about the edge voxels).

    Differences: float32 coordinates and linear interpolation (ITK: double), so values agree to
    about 1e-6 of the range. Nearest neighbours: on an axis-aligned map (a spacing target) voxels
    are picked from float64 coordinates rounded half up (exact copies); on a rotated map a voxel
    within 1e-4 of a tie rounds up. Where the exact coordinate is a tie (e.g. 1.5 -> 0.5 mm
    spacings), ITK rounds the result of its own floating-point arithmetic, which can fall either
    side (1.5 vs 1.4999999999999998): such voxels may pick the other neighbour. TorchIO's
    antialias, pre_affine_name and file-path targets are refused."""

    def __init__(self, target: Any = 1, image_interpolation: str = "linear", label_interpolation: str = "nearest",
                 scalars_only: bool = False, antialias: bool = False, label_keys: Sequence[str] = (),
                 affine: Any = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if antialias:
            raise NotImplementedError("antialias=True: SimpleITK's recursive Gaussian is not offered; smooth first "
                                      "(voxaug.filter.GaussianSmooth) if you need it")
        self.spacing: Optional[tuple] = None
        self.grid: Optional[tuple] = None
        self.reference: Any = None
        if isinstance(target, numbers.Real) and not isinstance(target, bool):
            self.spacing = (float(target),) * 3
        elif isinstance(target, tuple) and len(target) == 2 and not isinstance(target[0], numbers.Real):
            shape, aff = target
            if len(shape) != 3:
                raise ValueError(f"Target shape must be a sequence of three integers, but {shape!r} was passed")
            a = np.asarray(aff, dtype=np.float64)
            if a.shape != (4, 4):
                raise ValueError(f"Target affine must have shape (4, 4), got {a.shape}")
            self.grid = (tuple(int(v) for v in shape), a)
        elif isinstance(target, torch.Tensor):
            if not _is_meta_tensor(target):
                raise ValueError("target: a reference image must be a MetaTensor (its affine gives the grid)")
            self.reference = target
        elif isinstance(target, (str, bytes)) or hasattr(target, "__fspath__"):
            raise NotImplementedError("target: file paths and subject image names are not supported; pass the "
                                      "reference as a MetaTensor or a (shape, affine) pair")
        else:
            try:
                vals = tuple(float(v) for v in target)
            except (TypeError, ValueError):
                vals = ()
            if len(vals) != 3:
                raise ValueError(f'Target not understood: "{target!r}"')
            self.spacing = vals
        if self.spacing is not None and not all(math.isfinite(v) and v > 0 for v in self.spacing):
            raise ValueError(f"target spacing must be positive, got {self.spacing}")
        for name, v in (("image_interpolation", image_interpolation), ("label_interpolation", label_interpolation)):
            if not isinstance(v, str) or v.lower() not in _ITK_MODES:
                raise NotImplementedError(f"{name}={v!r}: 'linear', 'nearest' and 'bspline' are implemented "
                                          "(voxaug's kernels)")
        self.image_interpolation = image_interpolation.lower()
        self.label_interpolation = label_interpolation.lower()
        self.scalars_only = bool(scalars_only)
        self.label_keys = tuple(label_keys)
        self.affine = affine
        self.last_affine: Optional[np.ndarray] = None
        self._filter_args(include, exclude, keep)

    def _affine_of(self, img: Any) -> np.ndarray:
        if self.affine is not None:
            return _one_affine(self.affine, "affine")
        if _is_meta_tensor(img):
            return _one_affine(img.affine, "img.affine")
        return np.eye(4)

    def _target(self, size: Sequence[int], affine: np.ndarray) -> tuple:
        if self.spacing is not None:
            return torchio_reference_grid(size, affine, self.spacing)
        if self.grid is not None:
            return self.grid
        ref = self.reference
        return tuple(int(v) for v in ref.shape[-3:]), _one_affine(ref.affine, "target.affine")

    def _resample(self, img: Any, interp: str, is_label: bool) -> Any:
        x, restore = _as_batch(img)
        size = tuple(x.shape[2:])
        affine = self._affine_of(img)
        out_size, out_affine = self._target(size, affine)
        if min(out_size) < 1:
            raise ValueError(f"the target grid {out_size} is empty (target spacing {self.spacing} for an image of "
                             f"{size} voxels)")
        m = np.linalg.inv(_LPS @ affine) @ (_LPS @ out_affine)  # output index -> input index
        aligned = np.count_nonzero(m[:3, :3] - np.diag(np.diag(m[:3, :3]))) == 0
        integer = not x.dtype.is_floating_point
        src = x.float() if (integer and (not is_label or interp != "nearest")) or x.dtype == torch.float64 else x
        if aligned and interp == "nearest":
            # Per-axis index tables from the float64 coordinates, rounded half up as ITK: exact
            # copies of the picked voxels (the outside is zeroed below).
            tables = tuple(tuple(np.clip(np.floor(m[a, a] * np.arange(out_size[a]) + m[a, 3] + 0.5), 0,
                                         size[a] - 1).astype(np.int64).tolist()) for a in range(3))
            out = _gather_tables(src, tables)
        else:
            mm = m.copy()
            if interp == "nearest":
                mm[:3, 3] += 1e-4  # ITK rounds half up; the kernel's nearest rounds half to even
            m34 = torch.as_tensor(np.broadcast_to(mm[:3], (x.shape[0], 3, 4)).copy(), dtype=torch.float64)
            out = _itk_resample(src, _host_to(m34, x.device), out_size, interp)
        if aligned:
            # An axis-aligned map: the outside is slabs of each axis (cheap slicing).
            for a in range(3):
                j = np.arange(out_size[a])
                c = m[a, a] * j + m[a, 3]
                inside = np.flatnonzero((c >= -0.5) & (c < size[a] - 0.5))
                sl = [slice(None)] * 5
                if len(inside) == 0:
                    out.zero_()
                    continue
                sl[2 + a] = slice(0, int(inside[0]))
                out[tuple(sl)] = 0
                sl[2 + a] = slice(int(inside[-1]) + 1, None)
                out[tuple(sl)] = 0
        else:
            out.masked_fill_(_itk_outside(m, out_size, x.device, in_size=size), 0)
        if src is not x:
            if integer:  # ITK's cast: clamp, then truncate
                info = torch.iinfo(x.dtype)
                out = out.clamp_(info.min, info.max).trunc_().to(x.dtype)
            else:
                out = out.to(x.dtype)
        self.last_affine = out_affine
        res = restore(out)
        if _is_meta_tensor(res):
            res.affine = torch.as_tensor(out_affine, dtype=res.affine.dtype)
        return res

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            return self._resample(data, self.image_interpolation, False)
        out = dict(data)
        for k, v in data.items():
            if not (isinstance(v, torch.Tensor) and v.dim() in (4, 5)):
                continue
            if k in self.label_keys:
                if not self.scalars_only:
                    out[k] = self._resample(v, self.label_interpolation, True)
            else:
                out[k] = self._resample(v, self.image_interpolation, False)
        return out


def _each_image(data: Any, fn: Callable[[Any], Any]) -> Any:
    """fn on `data`, or on every 4-D / 5-D tensor of a dictionary (TorchIO's Subject; other entries kept)."""
    if isinstance(data, collections.abc.Mapping):
        return {k: (fn(v) if isinstance(v, torch.Tensor) and v.dim() in (4, 5) else v) for k, v in data.items()}
    return fn(data)


def _in_orientation(v: Any, code: str) -> bool:
    """Whether MetaTensor `v` (one affine) is in orientation `code` already: TorchIO's
    ToCanonical / ToOrientation then skip the image (no copy)."""
    aff = v.affine
    if aff.dim() != 2:  # a batch of affines: reoriented as usual
        return False
    return "".join(_nib_axcodes(np.asarray(aff.detach().cpu(), dtype=np.float64))) == code


class ToCanonical(_TorchIOArgs):
    """TorchIO ToCanonical: reorients to RAS+ (nibabel's as_closest_canonical), a signed
    permutation of the voxels (:class:`Orientation`'s exact copy); a MetaTensor (or a dictionary
    of them) gets the new affine. An image in RAS already is returned as it is (TorchIO skips
    it), and so is a plain tensor (TorchIO's identity affine for a bare tensor: RAS)."""

    def __init__(self, *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None) -> None:
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        return _each_image(data, lambda v: Orientation(axcodes="RAS")(v)
                           if _is_meta_tensor(v) and not _in_orientation(v, "RAS") else v)


class ToOrientation(_TorchIOArgs):
    """TorchIO ToOrientation(orientation='RAS'): reorients to a three-letter code of R / L, A / P,
    S / I (nibabel's conventions; any order), a signed permutation of the voxels (:class:`Orientation`'s
    exact copy, bit-identical); a MetaTensor gets the new affine. A plain tensor has TorchIO's
    identity affine (RAS): it is reoriented from RAS, and the new affine is kept in
    ``last_affine``. An image in the target orientation already is returned as it is (TorchIO
    skips it). A dictionary (TorchIO's Subject) has every 4-D / 5-D tensor reoriented."""

    def __init__(self, orientation: str = "RAS",
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(orientation, str) or len(orientation) != 3:
            raise ValueError(f'Orientation must be a 3-letter string, got "{orientation}"')
        code = orientation.upper()
        if any(c not in "RLAPIS" for c in code) or not all(any(c in code for c in pair)
                                                          for pair in ("RL", "AP", "IS")):
            raise ValueError("Orientation code must include one character for each axis direction: R or L, A or P, "
                             f'and S or I, but got "{orientation}"')
        self.orientation = code
        self.last_affine: Optional[np.ndarray] = None
        self._filter_args(include, exclude, keep)

    def _one(self, img: Any) -> Any:
        if _is_meta_tensor(img) and _in_orientation(img, self.orientation):  # TorchIO skips it
            self.last_affine = _one_affine(img.affine, "affine")
            return img
        if not _is_meta_tensor(img) and self.orientation == "RAS":  # a bare tensor is RAS
            self.last_affine = np.eye(4)
            return img
        if _is_meta_tensor(img):
            out = Orientation(axcodes=self.orientation)(img)
            self.last_affine = _one_affine(out.affine, "affine")
            return out
        out, new = Orientation(axcodes=self.orientation)(img, affine=np.eye(4))
        self.last_affine = np.asarray(new, dtype=np.float64)
        return out

    def __call__(self, data: Any) -> Any:
        return _each_image(data, self._one)


class Transpose(_TorchIOArgs):
    """TorchIO Transpose: swaps the first and last spatial axes by reorienting to the reversed
    orientation code (:class:`ToOrientation`; a plain tensor is RAS, so it becomes SAR). Its own
    inverse. The new affine of the last tensor is kept in ``last_affine``."""

    last_affine: Optional[np.ndarray] = None

    def __init__(self, *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None) -> None:
        self._filter_args(include, exclude, keep)

    def _one(self, img: Any) -> Any:
        aff = _one_affine(img.affine, "img.affine") if _is_meta_tensor(img) else np.eye(4)
        if _is_meta_tensor(img) and str(_name(img.meta.get("space", ""))).upper() == "LPS":
            aff = _LPS @ aff  # the codes of the RAS affine (as ToOrientation reads them)
        code = "".join(_nib_axcodes(aff))
        t = ToOrientation(code[::-1])
        out = t._one(img)
        self.last_affine = t.last_affine
        return out

    def __call__(self, data: Any) -> Any:
        return _each_image(data, self._one)

    def inverse(self, data: Any) -> Any:
        return self(data)


def _nib_axcodes(affine: np.ndarray) -> tuple:
    import nibabel as nib

    return nib.orientations.aff2axcodes(affine)


# TorchIO's interpolation names -> (voxaug mode, padding, align_corners) with SimpleITK's rules
# inside the buffer: linear / nearest clamp to the edge voxels; its cubic B-spline
# (BSplineInterpolateImageFunction) mirrors about them, coefficients and taps alike -- scipy's
# 'mirror', voxaug's 'reflection' with align_corners. The pad value beyond the buffer is set
# by the caller.
_ITK_MODES = {"linear": ("linear", "border", False), "nearest": ("nearest", "border", False),
              "bspline": ("cubic", "reflection", True)}


def _itk_resample(x: torch.Tensor, m34: torch.Tensor, size: Sequence[int], interpolation: str) -> torch.Tensor:
    mode, padding, align = _ITK_MODES[interpolation]
    (out,) = ops.resample([x], m34, tuple(size), [mode], [padding], [0.0], align)
    return out


class RandomAffine(_TorchIOArgs, _Randomizable):
    """TorchIO RandomAffine(scales=0.1, degrees=10, translation=0, isotropic=False,
    center='image', default_pad_value='minimum', default_pad_label=0, image_interpolation='linear',
    label_interpolation='nearest', p=1): per sample (with probability `p`), scales, angles (degrees)
    and translation (mm) drawn from TorchIO's ranges, applied as TorchIO's Affine does with
    SimpleITK (:func:`torchio_affine_index_map`: physical space through the image's affine, a
    MetaTensor's or `affine=`, else the identity as TorchIO gives a bare tensor), in one voxaug
    resample launch with ITK's border rules (edge values within half a voxel, the pad value
    beyond). Intensity images: float32 result (TorchIO resamples to float32); pad 'minimum' (each
    channel's minimum, on the device), 'mean' (the mean of the channel's six faces) or a number;
    TorchIO's 'otsu' is refused. A dictionary (TorchIO's Subject) shares each sample's draw across
    its 4-D / 5-D tensors; those under `label_keys` are label maps (TorchIO's LabelMap: nearest,
    `default_pad_label`, their dtype kept), the others intensity images. Parameters of the last
    call: ``last_scales``, ``last_degrees``, ``last_translation`` ((N, 3) float64) and
    ``last_applied``.

    Differences: voxaug's Philox draws, not torch's generator; float32 coordinates and
    interpolation for float32 data (ITK: double, then float32), so values agree to about 1e-5 of
    the image's range (more where the image is steep); nearest rounds half to even (ITK: half up).
    ``'bspline'`` is SimpleITK's cubic B-spline (prefiltered, mirrored at the edges)."""

    def __init__(self, scales: Any = 0.1, degrees: Any = 10, translation: Any = 0, isotropic: bool = False,
                 center: str = "image", default_pad_value: Union[str, float] = "minimum",
                 default_pad_label: float = 0, image_interpolation: str = "linear",
                 label_interpolation: str = "nearest", p: float = 1.0, label_keys: Sequence[str] = (),
                 affine: Any = None, seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        if isotropic and isinstance(scales, collections.abc.Sequence) and len(scales) in (3, 6):
            raise ValueError('If "isotropic" is True, the value for "scales" must have length 1 or 2, '
                             f'but "{scales}" was passed.')
        self.scales = _torchio_sextet(scales, 1.0, "scales", min_constraint=0.0)
        self.degrees = _torchio_sextet(degrees, 0.0, "degrees")
        self.translation = _torchio_sextet(translation, 0.0, "translation")
        self.isotropic = bool(isotropic)
        if center not in ("image", "origin"):
            raise ValueError(f'Center argument must be "image" or "origin", not "{center}"')
        self.center = center
        if isinstance(default_pad_value, str):
            if default_pad_value == "otsu":
                raise ValueError("default_pad_value='otsu' (SimpleITK's Otsu threshold of the border values) is not "
                                 "supported; use 'minimum', 'mean' or a number")
            if default_pad_value not in ("minimum", "mean"):
                raise ValueError('Value for default_pad_value must be "minimum", "otsu", "mean" or a number')
        elif not isinstance(default_pad_value, numbers.Real) or not math.isfinite(default_pad_value):
            raise ValueError('Value for default_pad_value must be "minimum", "otsu", "mean" or a number')
        if not isinstance(default_pad_label, numbers.Real):
            raise ValueError(f'default_pad_label must be a number, but it is "{default_pad_label}"')
        self.default_pad_value, self.default_pad_label = default_pad_value, float(default_pad_label)
        self.image_interpolation = self._interp(image_interpolation, "image_interpolation")
        self.label_interpolation = self._interp(label_interpolation, "label_interpolation")
        self.p = _check_prob(p)
        self.label_keys = tuple(label_keys)
        self.affine = None if affine is None else self._affine4(affine, "affine")
        self.last_scales = self.last_degrees = self.last_translation = self.last_applied = None
        self._filter_args(include, exclude, keep)

    @staticmethod
    def _interp(name: str, arg: str) -> str:
        if name not in _ITK_MODES:
            raise ValueError(f"{arg} must be 'linear', 'nearest' or 'bspline' (voxaug's kernels; TorchIO's "
                             f"windowed-sinc / Gaussian SimpleITK interpolators are not offered), got {name!r}")
        return name

    def _draw(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        u = ops.philox_uniform(self._next_seed(), 0, n, 10).numpy()
        rng = lambda r, uu: np.asarray(r[::2]) + (np.asarray(r[1::2]) - np.asarray(r[::2])) * uu  # noqa: E731
        applied = u[:, 0] < self.p
        scales = rng(self.scales, u[:, 1:4])
        if self.isotropic:
            scales[:] = scales[:, :1]
        degrees, translation = rng(self.degrees, u[:, 4:7]), rng(self.translation, u[:, 7:10])
        scales[~applied], degrees[~applied], translation[~applied] = 1.0, 0.0, 0.0
        return applied, scales, degrees, translation

    @staticmethod
    def _affine4(affine: Any, name: str) -> np.ndarray:
        a = _one_affine(affine, name)
        if a.shape != (4, 4):
            raise ValueError(f"{name} must be a 4x4 matrix (voxel index -> RAS mm), got shape {a.shape}")
        return a

    def _affine_of(self, img: Any) -> np.ndarray:
        if self.affine is not None:
            return self.affine
        if _is_meta_tensor(img):
            return self._affine4(img.affine, "img.affine")
        return np.eye(4)

    def _pad_values(self, x: torch.Tensor) -> torch.Tensor:
        """(N, C, 1, 1, 1) float32 per-channel pad values of an intensity batch."""
        n, c = x.shape[:2]
        if self.default_pad_value == "minimum":
            v = ops.minmax(x, True)[..., 0]
        elif self.default_pad_value == "mean":  # the six faces, as TorchIO's get_borders_mean
            faces = [x[:, :, 0], x[:, :, -1], x[:, :, :, 0], x[:, :, :, -1], x[:, :, :, :, 0], x[:, :, :, :, -1]]
            v = torch.cat([f.reshape(n, c, -1).double() for f in faces], -1).mean(-1)
        else:
            v = torch.full((n, c), float(self.default_pad_value), dtype=torch.float64, device=x.device)
        return v.float().reshape(n, c, 1, 1, 1)

    def _apply(self, x: torch.Tensor, mats: np.ndarray, outside: list, is_label: bool) -> torch.Tensor:
        size = tuple(x.shape[2:])
        m34 = torch.as_tensor(mats[:, :3, :], dtype=torch.float64)
        if is_label:
            xl = x if self.label_interpolation == "nearest" else x.float()
            out = _itk_resample(xl, _host_to(m34, x.device), size, self.label_interpolation)
            pad = torch.full((), self.default_pad_label, dtype=torch.float64, device=x.device).to(out.dtype)
            pad = pad.expand(x.shape[0], x.shape[1], 1, 1, 1)
        else:
            xf = x.float()
            out = _itk_resample(xf, _host_to(m34, x.device), size, self.image_interpolation)
            pad = self._pad_values(xf)
        for n, out_n in enumerate(outside):
            if out_n is None:
                continue
            if out.requires_grad:  # masked_fill_ with a CUDA tensor value calls item(): where
                out[n] = torch.where(out_n, pad[n], out[n])
            else:  # into the gather's own buffer
                torch.where(out_n, pad[n], out[n], out=out[n])
        return out

    def __call__(self, data: Any) -> Any:
        is_dict = isinstance(data, collections.abc.Mapping)
        items = [(k, v) for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)] if is_dict \
            else [(None, data)]
        if not items:
            return data
        batches = [(k, v, *_as_batch(v)) for k, v in items]
        n, size = batches[0][2].shape[0], tuple(batches[0][2].shape[2:])
        for k, _, x, _ in batches:
            if x.shape[0] != n or tuple(x.shape[2:]) != size:
                raise ValueError(f"RandomAffine: every tensor needs the same batch and spatial shape, "
                                 f"{tuple(x.shape)} for key {k!r}")
        applied, scales, degrees, translation = self._draw(n)
        self.last_applied = torch.as_tensor(applied)
        self.last_scales, self.last_degrees = torch.as_tensor(scales), torch.as_tensor(degrees)
        self.last_translation = torch.as_tensor(translation)
        affine = self._affine_of(batches[0][1])
        mats = np.stack([torchio_affine_index_map(scales[i], degrees[i], translation[i], affine, size, self.center)
                         if applied[i] else np.eye(4) for i in range(n)])
        device = batches[0][2].device
        outside = [_itk_outside(mats[i], size, device) if applied[i] else None for i in range(n)]
        out = dict(data) if is_dict else None
        for k, v, x, restore in batches:
            is_label = k in self.label_keys
            y = restore(self._apply(x, mats, outside, is_label))
            if not is_dict:
                return y
            out[k] = y
        return out


class RandomFlip(_TorchIOArgs, _RandomSpatial):
    """TorchIO RandomFlip(axes=0, flip_probability=0.5, p=1): each of `axes` flipped with
    probability flip_probability, independently, per sample; the whole transform applied with
    probability `p`. Draw: 4 uniforms per sample, the gate ``u0 < p``, then spatial axis a flips
    where ``u[a + 1] < flip_probability`` (TorchIO: ``flip_probability > torch.rand(3)``).
    Bit-identical to TorchIO's Flip of the drawn axes (``torch.flip``).

    axes: indices 0, 1, 2 of the spatial axes (D, H, W of voxaug's (N, C, D, H, W); TorchIO's
    (C, W, H, D) order is the same three axes), or TorchIO's anatomical names ('LR', 'Left',
    'AP', 'IS', ...: the first letter), which need a MetaTensor input (its affine names the
    axes; nibabel reads it) and make the call run as itself inside a Compose. TorchIO's 2-D names
    (Height, Width, Top, Bottom) are refused. A dictionary (TorchIO's Subject) has every 4-D /
    5-D tensor flipped with the same draw. Exact: any dtype; fuses with the exact and grid steps
    in a Compose (integer axes)."""

    _n_uniforms = 4

    def __init__(self, axes: Union[int, str, Sequence[Union[int, str]]] = 0, flip_probability: float = 0.5,
                 p: float = 1.0, seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(p, seed)
        parsed = _torchio_axes(axes)
        fp = float(flip_probability)
        if not 0.0 <= fp <= 1.0:
            raise ValueError(f"flip_probability must be in [0, 1], got {flip_probability!r}")
        self.axes, self.flip_probability = tuple(parsed), fp
        self._needs_image = any(isinstance(a, str) for a in parsed)
        self._call_axes: Optional[list] = None  # anatomical names resolved for the running call
        self._filter_args(include, exclude, keep)

    def _options(self, **overrides):
        return _exact_opts()

    def _flipped_axes(self, params: torch.Tensor) -> list[tuple]:
        """The spatial axes each sample flips (empty where the gate is closed or nothing drew)."""
        if self._call_axes is not None:
            axes = self._call_axes
        elif self._needs_image:
            raise ValueError(f"axes: anatomical names {list(self.axes)} need the image's orientation: call the "
                             "transform on a MetaTensor (not inside a fused group)")
        else:
            axes = sorted(set(self.axes))
        u = params.numpy()
        return [tuple(a for a in axes if u[i, 1 + a] < self.flip_probability) if g else ()
                for i, g in enumerate(self._gates(params).tolist())]

    def _geometry(self, in_size, n, params, opts):
        return _flips_geometry(self._flipped_axes(params), in_size, n)

    def _apply_one(self, img, params):
        if not self._needs_image:
            return self.apply(img, params)
        named = [a for a in self.axes if isinstance(a, str)]
        self._call_axes = sorted(set([a for a in self.axes if not isinstance(a, str)]
                                     + _anatomical_indices(img, named)))
        try:
            return self.apply(img, params)
        finally:
            self._call_axes = None

    def __call__(self, data, randomize: bool = True):
        if isinstance(data, Mapping):
            d = dict(data)
            keys = [k for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)]
            sizes = {_as_batch(d[k])[0].shape[0] for k in keys}
            if len(sizes) > 1:
                raise ValueError(f"all images must have the same batch size, got {sorted(sizes)}")
            if keys:
                params = self._params_for(sizes.pop(), randomize)
                for k in keys:
                    d[k] = self._apply_one(d[k], params)
            return d
        x, _ = _as_batch(data)
        return self._apply_one(data, self._params_for(x.shape[0], randomize))

    def inverse(self, data: Any) -> Any:
        """Undoes the last call (its records): on a MetaTensor, or on each MetaTensor of a dictionary."""
        return _inverse_each(self, data)


# ---------------- Rotate90 / RandRotate90 ----------------
def _rot90_map(in_size, k: int, axes) -> tuple[np.ndarray, tuple]:
    """Index map and output size of torch.rot90(x, k, axes): one quarter turn is
    out[.., i, .., j, ..] = in[.., j, .., S_b - 1 - i, ..] (flip axis b, then swap a and b)."""
    a, b = axes
    m, size = np.eye(4), list(in_size)
    for _ in range(k % 4):
        q = np.zeros((4, 4))
        q[3, 3] = 1.0
        for c in range(3):
            if c not in (a, b):
                q[c, c] = 1.0
        q[a, b] = 1.0  # in_a = out_b
        q[b, a], q[b, 3] = -1.0, size[b] - 1  # in_b = S_b - 1 - out_a
        m = m @ q
        size[a], size[b] = size[b], size[a]
    return m, tuple(size)


@functools.lru_cache(maxsize=256)
def _rot90_map_shared(in_size: tuple, k: int, axes: tuple) -> tuple[np.ndarray, tuple]:
    """_rot90_map, built once per (size, k, axes) and shared read-only (the per-call geometry copies it)."""
    m, size = _rot90_map(in_size, k, axes)
    m.flags.writeable = False
    return m, size


def _rot90_axes(spatial_axes: Any) -> tuple[int, int]:
    axes = _spatial_axes(spatial_axes, "spatial_axes")
    if len(axes) != 2 or axes[0] == axes[1]:
        raise ValueError(f"spatial_axes must be 2 different spatial axes defining the plane to rotate, "
                         f"got {spatial_axes!r}")
    return axes[0], axes[1]


class Rotate90(_Spatial):
    """MONAI Rotate90: k quarter turns in the plane of `spatial_axes`. Bit-identical to torch.rot90."""

    def __init__(self, k: int = 1, spatial_axes: tuple[int, int] = (0, 1), lazy: bool = False):
        _not_lazy(lazy)
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            raise ValueError(f"k must be an int, got {k!r}")
        self.k = (4 + (int(k) % 4)) % 4
        self.spatial_axes = _rot90_axes(spatial_axes)

    def _options(self, **overrides):
        return _exact_opts()

    def _geometry(self, in_size, n, params, opts):
        m, out_size = _rot90_map(in_size, self.k, self.spatial_axes)
        return _map_geometry(m, n, out_size, "zeros")

    def __call__(self, img, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img)


class RandRotate90(_RandomSpatial):
    """MONAI RandRotate90: with probability `prob`, k ~ U{1, ..., max_k} quarter turns, per sample.

    A batch needs equal sizes along `spatial_axes` (a quarter turn would change one sample's
    shape); transform samples of other shapes one at a time.
    """

    _n_uniforms = 2

    def __init__(self, prob: float = 0.1, max_k: int = 3, spatial_axes: tuple[int, int] = (0, 1),
                 lazy: bool = False, seed: Optional[int] = None):
        _not_lazy(lazy)
        super().__init__(prob, seed)
        if not isinstance(max_k, (int, np.integer)) or isinstance(max_k, bool) or max_k < 1:
            raise ValueError(f"max_k must be an int >= 1, got {max_k!r}")
        self.max_k = int(max_k)
        self.spatial_axes = _rot90_axes(spatial_axes)

    def _options(self, **overrides):
        return _exact_opts()

    def _ks(self, params: torch.Tensor) -> list[int]:
        u = params.numpy()[:, 1].tolist()  # Python floats: the same doubles, cheaper arithmetic
        m = self.max_k
        return [min(int(v * m), m - 1) + 1 if g else 0 for v, g in zip(u, self._gates(params).tolist())]

    def _geometry(self, in_size, n, params, opts):
        a, b = self.spatial_axes
        if n > 1 and in_size[a] != in_size[b]:
            raise ValueError(f"img: RandRotate90 on a batch needs equal sizes along spatial_axes {self.spatial_axes}, "
                             f"got {in_size[a]} and {in_size[b]} (a quarter turn changes a sample's shape); "
                             "transform the samples one at a time")
        ks = self._ks(params)
        if not ks:
            return _map_geometry(_EYE4, n, in_size, "zeros")
        size, axes = tuple(in_size), tuple(self.spatial_axes)
        turns = {k: _rot90_map_shared(size, k, axes) for k in set(ks)}  # at most 4 distinct maps
        full = np.empty((len(ks), 4, 4))
        for i, k in enumerate(ks):
            full[i] = turns[k][0]
        if len(ks) != n:  # as _map_geometry's broadcast (raises for a draw of another batch size)
            return _map_geometry(full, n, turns[ks[0]][1], "zeros")
        return _own_map_geometry(full, turns[ks[0]][1], "zeros")

    def __call__(self, img, randomize: bool = True, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, _ = _as_batch(img)
        return self.apply(img, self._params_for(x.shape[0], randomize))


# ---------------- Affine / RandAffine ----------------
def _grid_opts(mode, padding_mode, align_corners) -> _Opts:
    kmode, padding = _grid_mode(mode), _grid_padding(padding_mode)
    m = _name(mode)
    if padding == "zeros" and isinstance(m, (int, np.integer)) and not isinstance(m, bool):
        # MONAI's integer modes run scipy's map_coordinates, where 'zeros' is its 'constant':
        # 0 outside [0, S-1], no blending, the mirror inside (ops.resample's "cutoff").
        padding = "cutoff"
    return _Opts(kmode, kmode, padding, bool(align_corners))


class Affine(_Spatial):
    """MONAI Affine: rotate, shear, translate, scale about the image centre (MONAI's order and
    conventions: the matrix maps output to input coordinates), or a given 4x4 `affine`.

    Returns ``(img, affine)`` unless ``image_only=True``, as MONAI does; the second item is
    MONAI's voxel-index map (compute_w_affine), a float64 (4, 4) tensor.
    """

    def __init__(self, rotate_params=None, shear_params=None, translate_params=None, scale_params=None,
                 affine=None, spatial_size=None, mode="bilinear", padding_mode="reflection", normalized: bool = False,
                 device=None, dtype=np.float32, align_corners: bool = False, image_only: bool = False,
                 lazy: bool = False, rotate_order: str = "XYZ"):
        _not_lazy(lazy)
        self.normalized = bool(normalized)
        if affine is not None:
            a = np.asarray(affine.detach().cpu() if isinstance(affine, torch.Tensor) else affine, dtype=np.float64)
            if a.shape != (4, 4) or not np.all(np.isfinite(a)):
                raise ValueError(f"affine must be a finite 4x4 matrix, got shape {a.shape}")
            self._a = a
        else:
            self._a = _centred_affine(rotate_params, shear_params, translate_params, scale_params, rotate_order)
        self.rotate_params, self.shear_params = rotate_params, shear_params
        self.translate_params, self.scale_params = translate_params, scale_params
        self.spatial_size, self.mode, self.padding_mode = spatial_size, mode, padding_mode
        self.align_corners, self.image_only = bool(align_corners), image_only
        self._options(mode)  # validate now
        _fall_back_size(spatial_size, (1, 1, 1))

    def _options(self, mode=None, padding_mode=None, align_corners=None, spatial_size=None):
        mode = self.mode if mode is None else mode
        if self.normalized and isinstance(_name(mode), (int, np.integer)) and not isinstance(_name(mode), bool):
            raise NotImplementedError(
                f"normalized=True with the spline order mode={_name(mode)}: MONAI's scipy backend reads a "
                "normalized matrix's result as voxel indices, not grid_sample's [-1, 1]; voxaug follows only the "
                "grid_sample reading (modes 'nearest', 'bilinear', 'bicubic')")
        return _grid_opts(mode, self.padding_mode if padding_mode is None else padding_mode,
                          self.align_corners if align_corners is None else align_corners)

    def _geometry(self, in_size, n, params, opts, spatial_size=None):
        out_size = _fall_back_size(self.spatial_size if spatial_size is None else spatial_size, in_size)
        k, meta = _grid_index_map(self._a, in_size, out_size, opts.align_corners)
        if self.normalized:
            k = _normalized_index_map(self._a, in_size, out_size, opts.align_corners)
        return _Geometry(_stack([k] * n, 3), out_size, _stack([meta] * n), opts.padding)

    def __call__(self, img, spatial_size=None, mode=None, padding_mode=None, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, restore = _as_batch(img)
        opts = self._options(mode, padding_mode)
        geom = self._geometry(tuple(x.shape[2:]), x.shape[0], None, opts, spatial_size)
        (out,) = _run([x], geom, [opts])
        out = _with_affine(restore(out), geom.meta)
        out = _push(out, self._record_for(img, tuple(x.shape[2:]), geom, opts, None))
        meta = geom.meta[0] if geom.meta.shape[0] else torch.eye(4, dtype=torch.float64)
        return out if self.image_only else (out, meta)


def _rand_ranges(rng: Any, name: str) -> list[tuple[float, float]]:
    """MONAI RandAffineGrid._get_rand_param: per element, (lo, hi) or U(-f, f); None skipped."""
    out = []
    for f in _as_list(rng):
        if f is None:
            continue
        if isinstance(f, (list, tuple, np.ndarray, torch.Tensor)):
            v = _numbers(f, name)
            if len(v) != 2:
                raise ValueError(f"{name}: a range given as [min, max] needs 2 elements per dim, got {f!r}")
            out.append((v[0], v[1]))
        else:
            (v,) = _numbers(f, name)
            out.append((-v, v))
    return out


class RandAffine(_RandomSpatial):
    """MONAI RandAffine: with probability `prob` per sample, a random affine with rotation,
    shear, translation and scale drawn per sample from MONAI's ranges (each element of a range:
    ``(min, max)`` or ``f`` for ``U(-f, f)``; scale adds 1), built in MONAI's order. A sample
    that is not selected is resampled with the identity (exact) onto `spatial_size`."""

    def __init__(self, prob: float = 0.1, rotate_range=None, shear_range=None, translate_range=None,
                 scale_range=None, spatial_size=None, mode="bilinear", padding_mode="reflection",
                 cache_grid: bool = False, device=None, lazy: bool = False, seed: Optional[int] = None):
        _not_lazy(lazy)
        super().__init__(prob, seed)
        self.rotate_range, self.shear_range = rotate_range, shear_range
        self.translate_range, self.scale_range = translate_range, scale_range
        self._ranges = [_rand_ranges(rotate_range, "rotate_range"), _rand_ranges(shear_range, "shear_range"),
                        _rand_ranges(translate_range, "translate_range"), _rand_ranges(scale_range, "scale_range")]
        self._n_uniforms = 1 + sum(len(r) for r in self._ranges)
        self.spatial_size, self.mode, self.padding_mode = spatial_size, mode, padding_mode
        _grid_opts(mode, padding_mode, False)
        _fall_back_size(spatial_size, (1, 1, 1))

    def _options(self, mode=None, padding_mode=None, align_corners=None):
        return _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode, False)

    def parameters(self, params: torch.Tensor) -> list[Optional[dict[str, list[float]]]]:
        """Per sample: MONAI's rotate/shear/translate/scale params drawn from `params` (as
        RandAffineGrid.randomize would set them), or None where the sample is not selected."""
        out = []
        for row, gate in zip(params.numpy(), self._gates(params)):
            if not gate:
                out.append(None)
                continue
            vals, j = {}, 1
            for name, rng, add in zip(("rotate_params", "shear_params", "translate_params", "scale_params"),
                                      self._ranges, (0.0, 0.0, 0.0, 1.0)):
                vals[name] = [lo + (hi - lo) * float(row[j + i]) + add for i, (lo, hi) in enumerate(rng)]
                j += len(rng)
            out.append(vals)
        return out

    def centred_matrices(self, params: torch.Tensor) -> np.ndarray:
        """(N, 4, 4) float64: the centred MONAI matrix of each sample (identity where not selected)."""
        out = [np.eye(4) if p is None else _centred_affine(p["rotate_params"], p["shear_params"],
                                                            p["translate_params"], p["scale_params"])
               for p in self.parameters(params)]
        return np.stack(out) if out else np.zeros((0, 4, 4))

    def _geometry(self, in_size, n, params, opts, spatial_size=None):
        out_size = _fall_back_size(self.spatial_size if spatial_size is None else spatial_size, in_size)
        ks, metas = [], []
        for a in self.centred_matrices(params):
            k, meta = _grid_index_map(a, in_size, out_size, False)
            ks.append(k)
            metas.append(meta)
        return _Geometry(_stack(ks, 3), out_size, _stack(metas), opts.padding)

    def __call__(self, img, spatial_size=None, mode=None, padding_mode=None, randomize: bool = True, grid=None,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        if grid is not None:
            raise NotImplementedError("grid=: voxaug builds its index map itself; a precomputed grid is not supported")
        x, restore = _as_batch(img)
        opts = self._options(mode, padding_mode)
        params = self._params_for(x.shape[0], randomize)
        geom = self._geometry(tuple(x.shape[2:]), x.shape[0], params, opts, spatial_size)
        (out,) = _run([x], geom, [opts])
        out = _with_affine(restore(out), geom.meta)
        return _push(out, self._record_for(img, tuple(x.shape[2:]), geom, opts, params))


# ---------------- Rotate / RandRotate ----------------
def _rotate_geometry(in_size, angles_per_sample, keep_size: bool, opts: _Opts, order: str = "XYZ") -> _Geometry:
    """MONAI functional.rotate: transform = shift(in) @ R @ shift(-(out - 1) / 2), a voxel-index
    map (AffineTransform with normalized=False); output shape MONAI's corner rule."""
    ks, sizes = [], set()
    for angles in angles_per_sample:
        r = _rotation(angles, order)
        if keep_size:
            out_size = tuple(in_size)
        else:
            corners = np.asarray(np.meshgrid(*[(0, d) for d in in_size], indexing="ij")).reshape(3, -1)
            corners = r[:3, :3] @ corners
            out_size = tuple(int(v) for v in np.asarray(np.ptp(corners, axis=1) + 0.5, dtype=int))
        sizes.add(out_size)
        ks.append(_translate([(d - 1) / 2 for d in in_size]) @ r @ _translate([-(d - 1) / 2 for d in out_size]))
    if len(sizes) > 1:
        raise ValueError(f"img: keep_size=False gives the samples of this batch different shapes {sorted(sizes)}; "
                         "transform them one at a time or use keep_size=True")
    out_size = sizes.pop() if sizes else tuple(in_size)
    return _Geometry(_stack(ks, 3), out_size, _stack(ks), opts.padding)


class Rotate(_Spatial):
    """MONAI Rotate: rotation by `angle` (radians; a scalar is used for all three axes, as
    MONAI's ensure_tuple_rep does) about the image centre; ``keep_size=False`` enlarges the
    output to hold the whole rotated input (MONAI's rule)."""

    def __init__(self, angle, keep_size: bool = True, mode="bilinear", padding_mode="border",
                 align_corners: bool = False, dtype=np.float32, lazy: bool = False, rotate_order: str = "XYZ"):
        _not_lazy(lazy)
        self.angle = _rep3(angle, "angle")
        self.keep_size, self.mode, self.padding_mode = bool(keep_size), mode, padding_mode
        self.align_corners, self.rotate_order = bool(align_corners), rotate_order
        _grid_opts(mode, padding_mode, align_corners)
        _rotation(self.angle, rotate_order)

    def _options(self, mode=None, padding_mode=None, align_corners=None, dtype=None):
        return _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode,
                          self.align_corners if align_corners is None else align_corners)

    def _geometry(self, in_size, n, params, opts):
        g = _rotate_geometry(in_size, [self.angle], self.keep_size, opts, self.rotate_order)
        return _Geometry(g.mats.expand(n, 3, 4).contiguous(), g.out_size, g.meta.expand(n, 4, 4).contiguous(),
                         g.kernel_padding)

    def __call__(self, img, mode=None, padding_mode=None, align_corners=None, dtype=None,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img, mode=mode, padding_mode=padding_mode, align_corners=align_corners)


def _angle_range(v: Any, name: str) -> tuple[float, float]:
    vals = _numbers(v, name)
    if len(vals) == 1:
        return tuple(sorted((-vals[0], vals[0])))
    if len(vals) != 2:
        raise ValueError(f"{name} must be a number or (min, max), got {v!r}")
    return vals[0], vals[1]


class RandRotate(_RandomSpatial):
    """MONAI RandRotate: with probability `prob` per sample, angles x ~ U(range_x), y ~ U(range_y),
    z ~ U(range_z) (a number r means (-r, r)), applied as MONAI's create_rotate (x about the
    first spatial axis, then y, then z). With ``keep_size=False`` a batch must be one sample."""

    _n_uniforms = 4

    def __init__(self, range_x=0.0, range_y=0.0, range_z=0.0, prob: float = 0.1, keep_size: bool = True,
                 mode="bilinear", padding_mode="border", align_corners: bool = False, dtype=np.float32,
                 lazy: bool = False, seed: Optional[int] = None):
        _not_lazy(lazy)
        super().__init__(prob, seed)
        self.range_x = _angle_range(range_x, "range_x")
        self.range_y = _angle_range(range_y, "range_y")
        self.range_z = _angle_range(range_z, "range_z")
        self.keep_size, self.mode, self.padding_mode = bool(keep_size), mode, padding_mode
        self.align_corners = bool(align_corners)
        _grid_opts(mode, padding_mode, align_corners)

    def _options(self, mode=None, padding_mode=None, align_corners=None, dtype=None):
        return _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode,
                          self.align_corners if align_corners is None else align_corners)

    def angles(self, params: torch.Tensor) -> list[list[float]]:
        out = []
        for row, gate in zip(params.numpy(), self._gates(params)):
            rngs = (self.range_x, self.range_y, self.range_z)
            out.append([lo + (hi - lo) * u for (lo, hi), u in zip(rngs, row[1:4])] if gate else [0.0, 0.0, 0.0])
        return out

    def _geometry(self, in_size, n, params, opts):
        return _rotate_geometry(in_size, self.angles(params), self.keep_size, opts)

    def __call__(self, img, mode=None, padding_mode=None, align_corners=None, dtype=None, randomize: bool = True,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, _ = _as_batch(img)
        return self.apply(img, self._params_for(x.shape[0], randomize), mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners)


# ---------------- Zoom / Resize ----------------
def _interp_opts(mode, align_corners, dtype) -> _Opts:
    interp = _interp_mode(mode)
    if align_corners is not None and interp != "linear":
        # torch.nn.functional.interpolate (what MONAI's Zoom / Resize call) raises here.
        raise ValueError(f"align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         f"trilinear; got mode={mode!r} with align_corners={align_corners!r}")
    kmode = "nearest" if interp.startswith("nearest") else "linear"
    return _Opts(kmode, interp, "border", bool(align_corners) if interp == "linear" else False,
                 table_dtype=None if dtype is None else _table_dtype(dtype, torch.float32))


def _resize_record(opts: _Opts, zoomed, first, count, pad) -> dict:
    return {"interp": opts.interp, "table_dtype": "float64" if opts.table_dtype == torch.float64 else "float32",
            "zoomed": [int(v) for v in zoomed], "first": [int(v) for v in first], "count": [int(v) for v in count],
            "pad": [tuple(int(v) for v in p) for p in pad]}


class Zoom(_Spatial):
    """MONAI Zoom: interpolate by factor `zoom` (output size floor(size * zoom), interpolate's
    recomputed scale size / output); with ``keep_size`` the result is centre-cropped or padded
    (`padding_mode`, numpy.pad names) back to the input size, as MONAI's ResizeWithPadOrCrop.
    Mode 'area' (MONAI's default) is interpolate's own adaptive average pooling (see
    :func:`_area`), bit-identical to MONAI; then the crop or padding as for the other modes."""

    def __init__(self, zoom, mode="area", padding_mode="edge", align_corners: Optional[bool] = None,
                 dtype=torch.float32, keep_size: bool = True, lazy: bool = False, **kwargs):
        _not_lazy(lazy)
        self.zoom = _rep3(zoom, "zoom")
        if any(z <= 0 for z in self.zoom):
            raise ValueError(f"zoom must be > 0, got {zoom!r}")
        self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners
        self.keep_size = bool(keep_size)
        unknown = set(kwargs) - {"value", "constant_values"}
        if unknown:
            raise ValueError(f"unsupported padding arguments {sorted(unknown)}; only value / constant_values")
        self.pad_value = float(kwargs.get("value", kwargs.get("constant_values", 0.0)))
        self.dtype = dtype
        _interp_mode(mode)
        _pad_mode(padding_mode)
        _table_dtype(dtype, torch.float32)

    def _options(self, mode=None, padding_mode=None, align_corners=None, dtype=None):
        o = _interp_opts(self.mode if mode is None else mode, self.align_corners if align_corners is None
                         else align_corners, self.dtype if dtype is None else dtype)
        pad = _pad_mode(self.padding_mode if padding_mode is None else padding_mode)
        return _Opts(o.mode, o.interp, pad, o.align_corners, self.pad_value, o.table_dtype)

    def _plan_axes(self, in_size) -> list[tuple[int, int, int, tuple[int, int]]]:
        """Per axis (zoomed size, first zoomed voxel kept, voxels kept, keep_size padding)."""
        zoomed = [int(math.floor(float(s) * z)) for s, z in zip(in_size, self.zoom)]
        if any(z < 1 for z in zoomed):
            raise ValueError(f"zoom {self.zoom} of img with spatial size {tuple(in_size)} gives an empty output "
                             f"{tuple(zoomed)}")
        out = []
        for s, z in zip(in_size, zoomed):
            if not self.keep_size or z == s:
                out.append((z, 0, z, (0, 0)))
            elif z > s:  # CenterSpatialCrop: start = z // 2 - s // 2
                out.append((z, z // 2 - s // 2, s, (0, 0)))
            else:  # SpatialPad, symmetric
                out.append((z, 0, z, ((s - z) // 2, s - z - (s - z) // 2)))
        return out

    def _record_kind(self, in_size, geom, opts):
        plan = self._plan_axes(in_size)
        return "resize", _resize_record(opts, [p[0] for p in plan], [p[1] for p in plan], [p[2] for p in plan],
                                        [p[3] for p in plan])

    def _geometry(self, in_size, n, params, opts):
        axes, out_size, widths = [], [], []
        for s, (z, first, count, pad) in zip(in_size, self._plan_axes(in_size)):
            axes.append(_interp_axis(s, z, first, count, opts))
            out_size.append(count)
            widths.append(pad)
        mats, meta, tables = _diag_maps(axes, out_size, n)
        # Padding shifts the output: the metadata map sees padded voxel o as zoomed voxel o - before.
        shift = _translate([-b for b, _ in widths])
        meta = meta @ torch.from_numpy(shift)
        pad = (tuple(widths), opts.padding, opts.pad_value) if any(b or a for b, a in widths) else None
        plan = self._plan_axes(in_size)
        pool = (tuple(p[0] for p in plan), tuple(p[1] for p in plan), tuple(p[2] for p in plan)) \
            if opts.interp == "area" else None
        return _Geometry(mats, tuple(out_size), meta, "border", pad, tables, pool)

    def __call__(self, img, mode=None, padding_mode=None, align_corners=None, dtype=None,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img, mode=mode, padding_mode=padding_mode, align_corners=align_corners, dtype=dtype)


def _zoom_range(min_zoom: Any, max_zoom: Any) -> list[tuple[float, float]]:
    """MONAI RandZoom's ensure_tuple(min_zoom) / ensure_tuple(max_zoom), paired per draw."""
    lo, hi = _numbers(min_zoom, "min_zoom"), _numbers(max_zoom, "max_zoom")
    if len(lo) != len(hi):
        raise ValueError(f"min_zoom and max_zoom must have the same length, got {min_zoom!r} and {max_zoom!r}")
    if len(lo) not in (1, 2, 3):
        raise ValueError(f"min_zoom / max_zoom must be a number (isotropic), 2 numbers (first for the first two "
                         f"spatial axes, second for the last) or 3 numbers (one per spatial axis), got {min_zoom!r}")
    if any(v <= 0 for v in lo + hi):
        raise ValueError(f"min_zoom and max_zoom must be > 0, got {min_zoom!r} and {max_zoom!r}")
    return list(zip(lo, hi))


def _sample_pad(out: torch.Tensor, geoms: Sequence[_Geometry]) -> torch.Tensor:
    """keep_size padding with per-sample widths: `out` holds sample i's zoomed voxels at
    0 .. count - 1 of each axis (the rest of the launch's output is discarded); numpy.pad's
    source index per padded position is one batched gather per padded axis (same values as
    Zoom's :func:`_apply_pad` on that sample alone)."""
    pads = [g.pad for g in geoms]
    if all(p is None for p in pads):
        return out
    _, mode, value = next(p for p in pads if p is not None)
    n, size = out.shape[0], out.shape[2:]
    inside = None
    for a in range(3):
        rows = []
        for p in pads:
            b, e = p[0][a] if p is not None else (0, 0)
            rows.append(_pad_index(size[a] - b - e, b, e, mode) if (b or e) else np.arange(size[a]))
        if all(np.array_equal(r, np.arange(size[a])) for r in rows):
            continue
        idx = _host_to(torch.from_numpy(np.stack(rows).astype(np.int64)), out.device)
        shape = [n, 1, 1, 1, 1]
        shape[2 + a] = size[a]
        idx = idx.view(shape)
        if mode == "constant":  # -1: outside the zoomed voxels
            inside = idx >= 0 if inside is None else inside & (idx >= 0)
            idx = idx.clamp(min=0)
        out = torch.gather(out, 2 + a, idx.expand(out.shape))
    return out if inside is None else out.masked_fill(~inside, value)


class RandZoom(_RandomSpatial):
    """MONAI RandZoom: with probability `prob` per sample, Zoom by factors drawn from
    U(min_zoom, max_zoom) (MONAI's rule: one number: one factor for all three axes; two: the
    first for the first two spatial axes, the second for the last; three: one per axis).
    ``zooms(params)`` reads back the factors of a draw (1.0 where the gate is off).

    Each sample is exactly voxaug's :class:`Zoom` with its factors (same maps, same nearest
    rule, same keep_size crop and padding, same affine update). Batching: with ``keep_size``
    and an interpolating mode (nearest, nearest-exact, linear / bilinear / trilinear) the
    whole batch is one resample launch with per-sample maps, followed by the per-sample
    keep_size padding as one batched gather per padded axis. Mode 'area' (MONAI's default)
    pools each sample to its own zoomed size (torch's adaptive_avg_pool3d), so that path loops
    over the samples, one Zoom 'area' call each; so does a nearest batch where some sample's
    size pair has no exact affine rule (interpolate's table fallback, see _nearest_rule).
    With ``keep_size=False`` the samples of a batch must zoom to the same shape (ValueError
    otherwise). ``bicubic`` is not supported (as Zoom).

    In a Compose (lazy composition, see compose_spatial) a call with an interpolating mode
    joins the fused group of its neighbours with each sample's map (the same draw as when called
    alone); keep_size padding joins it only with padding_mode 'edge' (read as the kernel's border
    clamp, see _plan_rand_zoom). A call that is no index map (mode 'area', the nearest table
    fallback, padding with another padding_mode) runs as itself with the draw it made."""

    _n_uniforms = 4  # gate, then up to three factors

    def __init__(self, prob: float = 0.1, min_zoom=0.9, max_zoom=1.1, mode="area", padding_mode="edge",
                 align_corners: Optional[bool] = None, dtype=torch.float32, keep_size: bool = True,
                 lazy: bool = False, seed: Optional[int] = None, **kwargs):
        _not_lazy(lazy)
        super().__init__(prob, seed)
        self.min_zoom, self.max_zoom = min_zoom, max_zoom
        self._ranges = _zoom_range(min_zoom, max_zoom)
        self.keep_size = bool(keep_size)
        # Zoom validates mode, padding_mode, dtype and the padding keyword arguments.
        self._zoom_args = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners, dtype=dtype,
                               keep_size=self.keep_size, **kwargs)
        self._template = Zoom(1.0, **self._zoom_args)
        self.mode, self.padding_mode, self.align_corners, self.dtype = mode, padding_mode, align_corners, dtype

    def _options(self, mode=None, padding_mode=None, align_corners=None, dtype=None):
        return self._template._options(mode, padding_mode, align_corners, dtype)

    def zooms(self, params: torch.Tensor) -> list[list[float]]:
        """Per-sample (D, H, W) zoom factors of a draw (``draw_params``); 1.0 where gated off."""
        out = []
        for row, gate in zip(params.numpy(), self._gates(params)):
            if not gate:
                out.append([1.0, 1.0, 1.0])
                continue
            z = [lo + (hi - lo) * float(u) for (lo, hi), u in zip(self._ranges, row[1:])]
            out.append(z * 3 if len(z) == 1 else [z[0], z[0], z[1]] if len(z) == 2 else z)
        return out

    def _per_sample(self, in_size: tuple, params: torch.Tensor, opts: _Opts) -> tuple[list, list, tuple]:
        """Each sample's Zoom, its (one-sample) geometry, and the common output size."""
        zs = [Zoom(f, **self._zoom_args) for f in self.zooms(params)]
        geoms = [z._geometry(in_size, 1, None, opts) for z in zs]
        sizes = {tuple(s + b + a for s, (b, a) in zip(g.out_size, g.pad[0] if g.pad is not None else [(0, 0)] * 3))
                 for g in geoms}
        if len(sizes) > 1:
            raise ValueError(f"img: keep_size=False gives the samples of this batch different shapes {sorted(sizes)}; "
                             "transform them one at a time or use keep_size=True")
        return zs, geoms, sizes.pop() if sizes else tuple(in_size)

    def _zoom(self, xs: Sequence[torch.Tensor], opts: _Opts, params: torch.Tensor):
        """Zooms inputs of one shape that share `opts`: (outputs, per-sample Zooms and geometries, meta)."""
        in_size = tuple(xs[0].shape[2:])
        zs, geoms, out_size = self._per_sample(in_size, params, opts)
        meta = torch.cat([g.meta for g in geoms]) if geoms else torch.zeros(0, 4, 4, dtype=torch.float64)
        if not geoms:  # empty batch
            return [x.new_empty((0, x.shape[1], *out_size)) for x in xs], zs, geoms, meta
        if opts.interp == "area" or any(g.tables is not None for g in geoms):
            per = [_run([x[i:i + 1] for x in xs], g, [opts] * len(xs)) for i, g in enumerate(geoms)]
            return [torch.cat([p[k] for p in per]) for k in range(len(xs))], zs, geoms, meta
        # One launch: each sample's Zoom map, on the common output size.
        geom = _Geometry(torch.cat([g.mats for g in geoms]), out_size, meta, "border")
        outs = _run(list(xs), geom, [opts] * len(xs))
        return [_sample_pad(o, geoms) for o in outs], zs, geoms, meta

    def _zoom_record(self, img: Any, in_size: tuple, zs, geoms, meta, opts: _Opts, params: torch.Tensor,
                     owner: Any = None, src_affine: Any = "img") -> Optional[dict]:
        """The call's record (None unless `img` is a tracked MetaTensor); `src_affine`: the affine
        before the call when it is not img's own (a step of a lazy chain)."""
        if not _tracking(img) or not geoms:
            return None
        samples = [z._record_kind(in_size, g, opts)[1] for z, g in zip(zs, geoms)]
        out_size = tuple(s + b + a for s, (b, a) in zip(geoms[0].out_size, samples[0]["pad"]))
        geom = _Geometry(torch.cat([g.mats for g in geoms]), out_size, meta, "border")
        return _make_record(self if owner is None else owner, in_size, geom, opts,
                            _affine_copy(img) if isinstance(src_affine, str) else src_affine,
                            gates=self._gates(params), kind="zoom_per_sample",
                            extra={"interp": opts.interp, "samples": samples,
                                   "table_dtype": samples[0]["table_dtype"]})

    def apply(self, img: Any, params: Optional[torch.Tensor] = None, **overrides) -> Any:
        """Transforms `img`; `params` replays a draw of :meth:`draw_params`."""
        x, restore = _as_batch(img)
        opts = _for_input(self._options(**overrides), x)
        if params is None:
            params = self._params_for(x.shape[0], True)
        elif not isinstance(params, torch.Tensor) or tuple(params.shape) != (x.shape[0], self._n_uniforms):
            raise ValueError(f"params must be a ({x.shape[0]}, {self._n_uniforms}) tensor from draw_params, got "
                             f"{tuple(params.shape) if isinstance(params, torch.Tensor) else type(params).__name__}")
        (out,), zs, geoms, meta = self._zoom([x], opts, params)
        out = _with_affine(restore(out), meta)
        return _push(out, self._zoom_record(img, tuple(x.shape[2:]), zs, geoms, meta, opts, params))

    def __call__(self, img, mode=None, padding_mode=None, align_corners=None, dtype=None, randomize: bool = True,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        x, _ = _as_batch(img)
        return self.apply(img, self._params_for(x.shape[0], randomize), mode=mode, padding_mode=padding_mode,
                          align_corners=align_corners, dtype=dtype)

    def inverse(self, data: Any) -> Any:
        """MONAI's RandZoom inverse per sample: Zoom's inverse (undo the keep_size padding or
        crop, resize back with the forward's mode) with that sample's factors, one sample at a
        time (each has its own sizes); gated-off samples are copied. Returns a MetaTensor with
        the record popped and the original affine."""
        return _inverse_array(self, data)


def _zoom_inverse(owner: Any, img: Any, rec: Mapping, where: str) -> Any:
    info = rec[_EXTRA]
    if info.get("kind") != "zoom_per_sample":
        raise ValueError(f"{type(owner).__name__}.inverse: the last applied operation of {where} is a "
                         f"{info.get('kind')!r} record, expected a RandZoom record ('zoom_per_sample')")
    x, restore = _as_batch(img)
    if x.shape[0] != info["batch_size"] or tuple(x.shape[2:]) != tuple(info["out_size"]):
        raise ValueError(f"{where}: the record of {rec[_CLASS]} was made for a batch of {info['batch_size']} with "
                         f"spatial size {tuple(info['out_size'])} after the transform, got {x.shape[0]} samples of "
                         f"{tuple(x.shape[2:])}")
    outs = []
    for i, sample in enumerate(info["samples"]):
        one = {**rec, _EXTRA: {**info, "kind": "resize", "batch_size": 1, **sample}}
        _, xi, _, geom, opts, _ = _inverse_job(None, x[i:i + 1], one, where)
        outs.append(_run([xi], geom, [opts])[0])
    out = restore(torch.cat(outs) if outs else x)
    if _is_meta_tensor(out):
        if out.applied_operations and out.applied_operations[-1] is rec:
            out.applied_operations.pop()
        out.affine = _inverse_affine(out.affine, info)
    return out


class Resize(_Spatial):
    """MONAI Resize: interpolate to `spatial_size` (non-positive entries keep the input size;
    ``size_mode="longest"``: an int for the longest side, aspect ratio kept). Mode 'area'
    (MONAI's default) is interpolate's own adaptive average pooling (see :func:`_area`),
    bit-identical to MONAI. ``anti_aliasing``: as MONAI, when some axis shrinks, a Gaussian
    filter (MONAI's GaussianSmooth, voxaug's gaussian_smooth op) with sigma
    ``max(0, (in / out - 1) / 2)`` per axis, or ``anti_aliasing_sigma`` on the shrinking axes
    only, runs before the interpolation (any mode), in MONAI's ``dtype`` (float32 by default);
    the result is within float32 rounding of MONAI's (the two filters sum the taps in different
    orders), and floating also for mode 'nearest' (smoothed values). Returning the input size
    leaves the image as it is (MONAI: no smoothing either)."""

    def __init__(self, spatial_size, size_mode: str = "all", mode="area", align_corners: Optional[bool] = None,
                 anti_aliasing: bool = False, anti_aliasing_sigma=None, dtype=torch.float32, lazy: bool = False):
        _not_lazy(lazy)
        if size_mode not in ("all", "longest"):
            raise ValueError(f"size_mode must be 'all' or 'longest', got {size_mode!r}")
        if size_mode == "longest":
            if not isinstance(spatial_size, (int, np.integer)) or isinstance(spatial_size, bool) or spatial_size < 1:
                raise ValueError(f"spatial_size must be an int >= 1 if size_mode is 'longest', got {spatial_size!r}")
        elif not isinstance(spatial_size, (list, tuple)) or len(spatial_size) != 3:
            raise ValueError(f"spatial_size must be 3 ints (D, H, W) with size_mode='all' (MONAI needs one per "
                             f"spatial dim), got {spatial_size!r}")
        else:
            _fall_back_size(spatial_size, (1, 1, 1))
        self.spatial_size, self.size_mode, self.mode, self.align_corners = spatial_size, size_mode, mode, align_corners
        self.anti_aliasing, self.anti_aliasing_sigma, self.dtype = anti_aliasing, anti_aliasing_sigma, dtype
        self._anti_aliasing_spec(anti_aliasing, anti_aliasing_sigma)
        _interp_mode(mode)
        _table_dtype(dtype, torch.float32)

    @staticmethod
    def _anti_aliasing_spec(anti_aliasing: Any, sigma: Any) -> Optional[tuple]:
        """_Opts.anti_aliasing: None (off), () (MONAI's default sigma) or the given (sD, sH, sW)."""
        if not isinstance(anti_aliasing, (bool, np.bool_)):
            raise ValueError(f"anti_aliasing must be a bool, got {anti_aliasing!r}")
        if not anti_aliasing:
            return None
        if sigma is None:
            return ()
        vals = _rep3(sigma, "anti_aliasing_sigma")
        if any(not math.isfinite(v) or v < 0 for v in vals):
            raise ValueError(f"anti_aliasing_sigma must be finite and >= 0 (voxels), got {sigma!r}")
        return tuple(vals)

    def _options(self, mode=None, align_corners=None, anti_aliasing=None, anti_aliasing_sigma=None, dtype=None):
        spec = self._anti_aliasing_spec(self.anti_aliasing if anti_aliasing is None else anti_aliasing,
                                        self.anti_aliasing_sigma if anti_aliasing_sigma is None
                                        else anti_aliasing_sigma)
        o = _interp_opts(self.mode if mode is None else mode,
                         self.align_corners if align_corners is None else align_corners,
                         self.dtype if dtype is None else dtype)
        return dataclasses.replace(o, anti_aliasing=spec)

    def _out_size(self, in_size) -> tuple[int, int, int]:
        if self.size_mode == "longest":
            scale = self.spatial_size / max(in_size)
            return tuple(int(round(s * scale)) for s in in_size)
        return _fall_back_size(self.spatial_size, in_size)

    def _record_kind(self, in_size, geom, opts):
        out = list(geom.out_size)
        return "resize", _resize_record(opts, out, [0, 0, 0], out, [(0, 0)] * 3)

    def _geometry(self, in_size, n, params, opts):
        out_size = self._out_size(in_size)
        if any(s < 1 for s in out_size):
            raise ValueError(f"spatial_size {self.spatial_size!r} gives an empty output {out_size} for img with "
                             f"spatial size {tuple(in_size)}")
        if tuple(out_size) == tuple(in_size):  # MONAI returns the input as is: the identity map
            axes = [(1.0, 0.0, 1.0, 0.0, None)] * 3
        else:
            axes = [_interp_axis(s, z, 0, z, opts) for s, z in zip(in_size, out_size)]
        mats, meta, tables = _diag_maps(axes, out_size, n)
        if tuple(out_size) == tuple(in_size):
            return _Geometry(mats, tuple(out_size), meta, "border", tables=tables)
        pool = (tuple(out_size), (0, 0, 0), tuple(out_size)) if opts.interp == "area" else None
        smooth = None
        if opts.anti_aliasing is not None:
            smooth = _anti_alias_sigma(in_size, out_size, opts.anti_aliasing or None)
        return _Geometry(mats, tuple(out_size), meta, "border", tables=tables, pool=pool, smooth=smooth)

    def __call__(self, img, mode=None, align_corners=None, anti_aliasing=None, anti_aliasing_sigma=None, dtype=None,
                 lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img, mode=mode, align_corners=align_corners, anti_aliasing=anti_aliasing,
                          anti_aliasing_sigma=anti_aliasing_sigma, dtype=dtype)


# ---------------- SpatialCrop / CenterSpatialCrop ----------------
def _int_list(v: Any, name: str) -> list[int]:
    """MONAI's _to_int_list: a scalar, a sequence, a tensor or an array -> Python ints."""
    if isinstance(v, (str, bytes)):
        raise TypeError(f"{name}: ROI specs must be integers or sequences of integers, not strings")
    return [int(i) for i in _as_list(v)]


def _int_pair(a: Any, b: Any, na: str, nb: str) -> tuple[list[int], list[int]]:
    """MONAI's _broadcast_int_pair."""
    la, lb = _int_list(a, na), _int_list(b, nb)
    n = max(len(la), len(lb))
    if len(la) not in (1, n) or len(lb) not in (1, n):
        raise ValueError(f"ROI specs must have matching lengths or be scalar, got {len(la)} and {len(lb)}.")
    return (la * n if len(la) == 1 else la), (lb * n if len(lb) == 1 else lb)


def _crop_slices(roi_center=None, roi_size=None, roi_start=None, roi_end=None, roi_slices=None) -> tuple:
    """MONAI Crop.compute_slices: slices from center & size, start & end, or given slices."""
    if roi_slices:
        if not all(isinstance(s, slice) and (s.step is None or s.step == 1) for s in roi_slices):
            raise ValueError(f"only slices with step 1 / None are supported, got {roi_slices}.")
        return tuple(roi_slices)
    if roi_center is not None and roi_size is not None:
        centers, sizes = _int_pair(roi_center, roi_size, "roi_center", "roi_size")
        starts = [max(c - s // 2, 0) for c, s in zip(centers, sizes)]
        ends = [st + s for st, s in zip(starts, sizes)]
    else:
        if roi_start is None or roi_end is None:
            raise ValueError("please specify either roi_center, roi_size or roi_start, roi_end.")
        starts, ends = _int_pair(roi_start, roi_end, "roi_start", "roi_end")
        starts = [max(s, 0) for s in starts]
    return tuple(slice(s, max(e, s)) for s, e in zip(starts, ends))


def _crop_geometry(slices: Sequence[slice], in_size, n: int) -> _Geometry:
    """Python slicing of the spatial axes (missing trailing slices: the whole axis) as an integer
    translation: in = out + start, the map MONAI composes into the affine."""
    if len(slices) > 3:
        raise ValueError(f"a crop has at most 3 spatial slices, got {len(slices)}")
    starts, out_size = [], []
    for s, size in zip(list(slices) + [slice(None)] * (3 - len(slices)), in_size):
        a, b, _ = s.indices(int(size))
        starts.append(a)
        out_size.append(max(b - a, 0))
    if min(out_size) < 1:
        raise ValueError(f"the crop {tuple(slices)} of img with spatial size {tuple(in_size)} is empty "
                         f"({tuple(out_size)}); voxaug refuses empty outputs")
    return _map_geometry(_translate(starts), n, out_size, "zeros")


class SpatialCrop(_Spatial):
    """MONAI SpatialCrop: crops to `roi_slices`, or ``[roi_start, roi_end)``, or `roi_size` about
    `roi_center` (MONAI's compute_slices: starts clamped at 0, ends at the image size). An integer
    translation: the exact path, bit-identical to slicing for every dtype; inside a
    :class:`~voxaug.transforms.Compose` it folds into the neighbouring spatial maps."""

    def __init__(self, roi_center=None, roi_size=None, roi_start=None, roi_end=None, roi_slices=None,
                 lazy: bool = False):
        _not_lazy(lazy)
        self.slices = _crop_slices(roi_center, roi_size, roi_start, roi_end, roi_slices)

    def _options(self, **overrides):
        return _exact_opts()

    def _slices(self, in_size) -> tuple:
        return self.slices

    def _geometry(self, in_size, n, params, opts):
        return _crop_geometry(self._slices(in_size), in_size, n)

    def __call__(self, img, lazy: Optional[bool] = None):
        _not_lazy(lazy)
        return self.apply(img)


class CenterSpatialCrop(SpatialCrop):
    """MONAI CenterSpatialCrop: a `roi_size` crop about the centre ``size // 2`` (non-positive or
    missing entries of `roi_size` keep the image's size)."""

    def __init__(self, roi_size, lazy: bool = False):
        _not_lazy(lazy)
        self.roi_size = roi_size
        _fall_back_size(roi_size, (1, 1, 1), "roi_size")  # validate now

    def _slices(self, in_size) -> tuple:
        size = _fall_back_size(self.roi_size, in_size, "roi_size")
        return _crop_slices(roi_center=[s // 2 for s in in_size], roi_size=list(size))


def _scaled_size(scale: Any, img_size: Sequence[int], name: str) -> list[int]:
    """MONAI's ROI size from a scale: ceil(scale * size) per axis (a number for every axis); a
    non-positive result keeps the image's size downstream (fall_back_tuple)."""
    vals = _rep3(scale, name)
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{name} must be finite, got {scale!r}")
    return [int(math.ceil(v * s)) for v, s in zip(vals, img_size)]


class CenterScaleCrop(CenterSpatialCrop):
    """MONAI CenterScaleCrop: CenterSpatialCrop with roi_size = ceil(roi_scale * image size) per axis
    (non-positive scales keep the image's size)."""

    def __init__(self, roi_scale, lazy: bool = False):
        _not_lazy(lazy)
        self.roi_scale = roi_scale
        _scaled_size(roi_scale, (1, 1, 1), "roi_scale")  # validate now

    def _slices(self, in_size) -> tuple:
        self.roi_size = _scaled_size(self.roi_scale, in_size, "roi_scale")
        return super()._slices(in_size)



# ---------------- dictionary forms ----------------
# ---------------- SpatialPad / BorderPad / DivisiblePad ----------------
# MONAI / numpy pad mode -> (kernel padding, align_corners of its reflection): the kernel's
# exact path copies voxels and pads with the padding rule (constant value, edge, whole-sample
# reflection = numpy 'reflect', half-sample = numpy 'symmetric'); 'wrap' / 'circular' gather
# through index tables.
_PAD_KERNEL_MODES = {"constant": ("constant", False), "edge": ("border", False), "replicate": ("border", False),
                     "reflect": ("reflection", True), "symmetric": ("reflection", False)}
_PAD_TABLE_MODES = ("wrap", "circular")


def _pad_opts(mode: Any, value: float) -> _Opts:
    m = _name(mode)
    if m in _PAD_TABLE_MODES:
        return _Opts("nearest", "nearest", "wrap", False, float(value))
    if m not in _PAD_KERNEL_MODES:
        raise ValueError(f"mode must be one of {sorted(list(_PAD_KERNEL_MODES) + list(_PAD_TABLE_MODES))}, got "
                         f"{mode!r}")
    padding, align = _PAD_KERNEL_MODES[m]
    return _Opts("nearest", "nearest", padding, align, float(value))


def _pad_geometry(widths: Sequence[tuple[int, int]], in_size, n: int, opts: _Opts) -> _Geometry:
    """Padding by (before, after) voxels per axis as an integer translation (in = out - before,
    the map MONAI composes into the affine): the exact path, bit-identical to numpy.pad."""
    out_size = tuple(int(s + b + a) for s, (b, a) in zip(in_size, widths))
    m = _translate([-float(b) for b, _ in widths])
    tables = None
    if opts.padding == "wrap":
        tables = tuple(tuple(int(v) for v in _pad_index(int(sz), int(b), int(a), "wrap"))
                       for sz, (b, a) in zip(in_size, widths))
    return _Geometry(_stack([m] * n, 3), out_size, _stack([m] * n), "zeros" if tables else opts.padding,
                     tables=tables)


def _pad_value(kwargs: dict) -> float:
    value = kwargs.pop("value", kwargs.pop("constant_values", 0.0))
    if kwargs:
        raise TypeError(f"unsupported pad arguments {sorted(kwargs)} (voxaug takes value / constant_values)")
    (v,) = _numbers(value, "value")
    return v


class _Pad(_Spatial):
    def __init__(self, mode, lazy: bool, kwargs: dict):
        _not_lazy(lazy)
        self.mode, self.value = mode, _pad_value(dict(kwargs))
        _pad_opts(mode, self.value)

    def _widths(self, in_size) -> list[tuple[int, int]]:
        raise NotImplementedError

    def _options(self, mode=None, **_):
        return _pad_opts(self.mode if mode is None else mode, self.value)

    def _geometry(self, in_size, n, params, opts):
        return _pad_geometry(self._widths(in_size), in_size, n, opts)

    def __call__(self, img, mode=None, lazy: Optional[bool] = None, **kwargs):
        _not_lazy(lazy)
        if kwargs:
            raise TypeError(f"unsupported arguments {sorted(kwargs)}")
        return self.apply(img, mode=mode)


def _symmetric_widths(sizes, in_size, method: str) -> list[tuple[int, int]]:
    out = []
    for want, have in zip(sizes, in_size):
        width = max(int(want) - int(have), 0)
        out.append((width // 2, width - width // 2) if method == "symmetric" else (0, width))
    return out


def _check_method(method: Any) -> str:
    m = _name(method)
    if m not in ("symmetric", "end"):
        raise ValueError(f"method must be 'symmetric' or 'end', got {method!r}")
    return m


class SpatialPad(_Pad):
    """MONAI SpatialPad(spatial_size, method='symmetric', mode='constant', value=...): pads each
    spatial axis to at least `spatial_size` (non-positive entries keep the size). Modes:
    constant (``value``), edge / replicate, reflect, symmetric, wrap / circular; every dtype,
    bit-identical to numpy.pad; MetaTensor affines updated as MONAI does."""

    def __init__(self, spatial_size, method: str = "symmetric", mode: str = "constant", lazy: bool = False,
                 **kwargs):
        super().__init__(mode, lazy, kwargs)
        self.spatial_size, self.method = spatial_size, _check_method(method)
        _fall_back_size(spatial_size, (1, 1, 1))

    def _widths(self, in_size):
        return _symmetric_widths(_fall_back_size(self.spatial_size, in_size), in_size, self.method)


class BorderPad(_Pad):
    """MONAI BorderPad(spatial_border, mode='constant'): one int (every side), 3 (both sides of
    each axis) or 6 ((before, after) per axis) border widths."""

    def __init__(self, spatial_border, mode: str = "constant", lazy: bool = False, **kwargs):
        super().__init__(mode, lazy, kwargs)
        b = [int(spatial_border)] if isinstance(spatial_border, (int, np.integer)) else list(spatial_border)
        if not all(isinstance(v, (int, np.integer)) for v in b):
            raise ValueError(f"spatial_border must contain only ints, got {spatial_border!r}")
        b = [max(0, int(v)) for v in b]
        if len(b) == 1:
            self._w = [(b[0], b[0])] * 3
        elif len(b) == 3:
            self._w = [(v, v) for v in b]
        elif len(b) == 6:
            self._w = [(b[2 * i], b[2 * i + 1]) for i in range(3)]
        else:
            raise ValueError(f"Unsupported spatial_border length: {len(b)}, available options are [1, 3, 6].")
        self.spatial_border = spatial_border

    def _widths(self, in_size):
        return self._w


class ResizeWithPadOrCrop(_Pad):
    """MONAI ResizeWithPadOrCrop(spatial_size, method='symmetric', mode='constant', **pad_kwargs):
    each spatial axis larger than `spatial_size` is cropped to CenterSpatialCrop's window, each
    smaller one padded as SpatialPad pads it (method, mode, value; non-positive entries keep the
    size). An axis is either cropped or padded, so the whole call is one integer translation:
    one exact launch (MONAI: a crop, then a pad), bit-identical to MONAI's. The inverse is
    MONAI's: the padded axes cropped back, the cropped ones padded with zeros."""

    def __init__(self, spatial_size, method: str = "symmetric", mode: str = "constant", lazy: bool = False,
                 **pad_kwargs):
        super().__init__(mode, lazy, pad_kwargs)
        self.spatial_size, self.method = spatial_size, _check_method(method)
        _fall_back_size(spatial_size, (1, 1, 1))

    def _widths(self, in_size):
        want = _fall_back_size(self.spatial_size, in_size)
        pads = _symmetric_widths(want, in_size, self.method)
        crop = _crop_slices(roi_center=[int(s) // 2 for s in in_size], roi_size=[int(w) for w in want])
        out = []
        for a, (have, w) in enumerate(zip(in_size, want)):  # (before, after) < 0: crop that many voxels
            out.append((-crop[a].start, crop[a].stop - int(have)) if int(w) < int(have) else pads[a])
        return out

    def _record_for(self, img, in_size, geom, opts, params, owner=None, src_affine="img"):
        # the inverse pads the cropped axes with zeros, as MONAI's (CenterSpatialCrop's inverse)
        geom = dataclasses.replace(geom, kernel_padding="zeros", tables=None)
        return super()._record_for(img, in_size, geom, opts, params, owner, src_affine)


# ---------------- TorchIO Pad / Crop / CropOrPad ----------------
# TorchIO's spatial axes (W, H, D) of its (C, W, H, D) tensors are the same three tensor axes as
# voxaug's (D, H, W): its six bounds (w_ini, w_fin, h_ini, h_fin, d_ini, d_fin) are (before,
# after) of spatial axes 0, 1, 2.
_TIO_KERNEL_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")
_TIO_STAT_MODES = ("mean", "median", "minimum", "maximum")
_TIO_PAD_MODES = _TIO_KERNEL_MODES + _TIO_STAT_MODES + ("linear_ramp", "empty")


def _tio_bounds(bounds: Any, name: str) -> np.ndarray:
    """TorchIO's parse_bounds: an int or 1, 3 or 6 ints >= 0 -> (3, 2) (before, after) per axis."""
    vals = [bounds] if isinstance(bounds, (int, np.integer)) else None
    if vals is None:
        try:
            vals = list(bounds)
        except TypeError:
            raise ValueError(f"{name} must be an int or a tuple of 3 or 6 ints >= 0, got {bounds!r}") from None
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in vals) \
            or isinstance(bounds, bool) or len(vals) not in (1, 3, 6):
        raise ValueError(f"{name} must be an int or a tuple of 3 or 6 ints >= 0, got {bounds!r}")
    v = [int(b) for b in vals]
    if len(v) == 1:
        v = v * 6
    elif len(v) == 3:
        v = [v[0], v[0], v[1], v[1], v[2], v[2]]
    return np.asarray(v, dtype=np.int64).reshape(3, 2)


def _tio_padding_mode(padding_mode: Any) -> tuple[str, float, Optional[str]]:
    """TorchIO's padding_mode -> (kernel pad mode, constant, the fill after the gather: a
    statistic mode, 'linear_ramp' or None). A number pads with that constant; 'empty' (numpy
    leaves the values undefined) pads with zeros."""
    if isinstance(padding_mode, numbers.Real) and not isinstance(padding_mode, bool):
        return "constant", float(padding_mode), None
    if isinstance(padding_mode, str) and padding_mode in _TIO_PAD_MODES:
        if padding_mode in _TIO_KERNEL_MODES:
            return padding_mode, 0.0, None
        return "constant", 0.0, (None if padding_mode == "empty" else padding_mode)
    if callable(padding_mode):
        raise ValueError("padding_mode: a callable (numpy.pad's per-vector function) is not supported by voxaug; "
                         f"use a number or one of {list(_TIO_PAD_MODES)}")
    raise ValueError(f"padding_mode must be a number or one of {list(_TIO_PAD_MODES)}, got {padding_mode!r}")


def _tio_pad_stat(x: torch.Tensor, mode: str) -> torch.Tensor:
    """TorchIO Pad's constant for a statistic mode, per sample of the batch `x` ((N,), x's dtype,
    on x's device, no sync): the mean of the float32 data (torch's, sample by sample as TorchIO
    computes it), the median (torch.quantile(data.float(), 0.5): the exact order statistic, or
    the float32-rounded midpoint of the two middle ones, from ``ops.percentiles``; also beyond
    torch.quantile's 2^24-element limit), the minimum or the maximum of the whole sample, all
    channels. The cast to x's dtype is numpy's (integers: truncated)."""
    if mode == "mean":
        v = torch.stack([s.float().mean() for s in x])
    elif mode == "median":
        v = ops.percentiles(x if x.dtype == torch.float32 else x.float(), [50.0])[:, 0, 0].float()
    elif mode == "minimum":
        v = x.flatten(1).amin(1)
    else:
        v = x.flatten(1).amax(1)
    if not x.dtype.is_floating_point:
        v = v.trunc()
    return v.to(x.dtype)


def _axis_slab(a: int, sl: slice, base: Optional[list] = None) -> tuple:
    idx = list(base) if base is not None else [slice(None)] * 5
    idx[2 + a] = sl
    return tuple(idx)


def _same_rows(w: np.ndarray) -> bool:
    return bool((w == w[:1]).all())


def _fill_frame_(y: torch.Tensor, pads: np.ndarray, v: torch.Tensor) -> None:
    """Sets the padded frame of each sample of `y` ((N, C, D, H, W); `pads` (N, 3, 2) widths
    >= 0) to that sample's value v[n]."""
    groups = [(slice(None), pads[0])] if _same_rows(pads) else [(slice(n, n + 1), pads[n]) for n in range(len(pads))]
    for rows, p in groups:
        yy, vv = y[rows], v[rows].view(-1, 1, 1, 1, 1)
        for a in range(3):
            size = yy.shape[2 + a]
            for lo, hi in ((0, int(p[a][0])), (size - int(p[a][1]), size)):
                if hi > lo:
                    dst = yy[_axis_slab(a, slice(lo, hi))]
                    dst.copy_(vv.expand_as(dst))


def _linear_ramp_(y: torch.Tensor, pads: np.ndarray) -> None:
    """numpy.pad's 'linear_ramp' (end values 0) on the padded frame of each sample of `y`, in
    place, as numpy computes it: axis by axis (a later axis ramps the earlier axes' ramps), each
    side a linspace from 0 towards the edge voxel (endpoint excluded) in float64 (numpy's end
    value is an int64 scalar, so every dtype ramps in float64; integers floored), with numpy's
    branch for a zero step anywhere on the face ((i / width) * edge instead of i * (edge /
    width)), decided per sample on the device, then cast to the data's dtype."""
    ints = not y.dtype.is_floating_point
    dt = torch.float64
    groups = [(slice(None), pads[0])] if _same_rows(pads) else [(slice(n, n + 1), pads[n]) for n in range(len(pads))]
    for rows, p in groups:
        yy = y[rows]
        size = yy.shape[2:]
        for a in range(3):
            roi = [slice(None)] * 5
            for b in range(a + 1, 3):  # later axes: their original extent only (numpy's _view_roi)
                roi[2 + b] = slice(int(p[b][0]), int(size[b]) - int(p[b][1]))
            for side, width in ((0, int(p[a][0])), (1, int(p[a][1]))):
                if width == 0:
                    continue
                edge = int(p[a][0]) if side == 0 else int(size[a]) - int(p[a][1]) - 1
                e = yy[_axis_slab(a, slice(edge, edge + 1), roi)].to(dt)
                shape = [1] * 5
                shape[2 + a] = width
                i = torch.arange(width, dtype=dt, device=y.device).view(shape)
                step = e / width
                zero = (step == 0).flatten(1).any(1).view(-1, 1, 1, 1, 1)
                ramp = torch.where(zero, (i / width) * e, i * step) + 0  # numpy's `y += start` (start 0)
                if ints:
                    ramp = ramp.floor()
                if side == 1:
                    ramp = ramp.flip(2 + a)
                lo = 0 if side == 0 else int(size[a]) - width
                yy[_axis_slab(a, slice(lo, lo + width), roi)] = ramp.to(y.dtype)


class _TioBounds(_TorchIOArgs, _Pad):
    """A TorchIO bounds transform: per-sample signed (before, after) widths per axis (negative:
    crop), one exact gather (``_geometry`` takes the (N, 3, 2) widths as its params), then the
    frame fill of the statistic and linear-ramp modes."""

    def __init__(self, padding_mode: Any):
        mode, value, self._post = _tio_padding_mode(padding_mode)
        super().__init__(mode, False, {"value": value})
        self.padding_mode = padding_mode

    def _geometry(self, in_size, n, params, opts):
        w = params
        if _same_rows(w):
            return _pad_geometry([(int(b), int(e)) for b, e in w[0]], in_size, n, opts)
        out_size = tuple(int(s + b + e) for s, (b, e) in zip(in_size, w[0]))
        maps = [_translate([-float(b) for b in w[k][:, 0]]) for k in range(n)]
        return _Geometry(_stack(maps, 3), out_size, _stack(maps), opts.padding)

    def _record_for(self, img, in_size, geom, opts, params, owner=None, src_affine="img"):
        # the inverse crops the padded axes back and pads the cropped ones with zeros
        geom = dataclasses.replace(geom, kernel_padding="zeros", tables=None)
        return super()._record_for(img, in_size, geom, opts, params, owner, src_affine)

    def _bounded(self, img: Any, widths: np.ndarray) -> Any:
        """`img` cropped / padded by `widths` ((N, 3, 2) signed, or (3, 2) for every sample)."""
        x, restore = _as_batch(img)
        n, in_size = x.shape[0], tuple(int(s) for s in x.shape[2:])
        w = np.broadcast_to(np.asarray(widths, dtype=np.int64), (n, 3, 2)).copy()
        sizes = [in_size[a] + w[:, a].sum(-1) for a in range(3)]
        if any((s != s[0]).any() or s[0] < 1 for s in sizes):
            raise ValueError(f"the crop / pad leaves no voxels (or differs per sample) on some axis: input "
                             f"{in_size}, (before, after) per axis {w.tolist()}")
        opts = _for_input(self._options(), x)
        geom = self._geometry(in_size, n, w, opts)
        if opts.padding in _PAD_TABLE_MODES and not _same_rows(w):  # index tables: sample by sample
            out = torch.cat([_run([x[k:k + 1]], self._geometry(in_size, 1, w[k:k + 1], opts), [opts])[0]
                             for k in range(n)])
        else:
            (out,) = _run([x], geom, [opts])
        if self._post is not None and (w > 0).any():
            pads = np.maximum(w, 0)
            if self._post in _TIO_STAT_MODES:
                _fill_frame_(out, pads, _tio_pad_stat(x, self._post))
            elif not (w < 0).any():
                _linear_ramp_(out, pads)
            else:  # numpy ramps the padded (uncropped) volume: pad, ramp, then crop as TorchIO does
                for k in range(n):
                    p = self._padded_only(x[k:k + 1], pads[k])
                    _linear_ramp_(p, pads[k][None])
                    crop = tuple(slice(int(-min(b, 0)), int(p.shape[2 + a]) + int(min(e, 0)))
                                 for a, (b, e) in enumerate(w[k]))
                    out[k].copy_(p[(0, slice(None)) + crop])
        res = _with_affine(restore(out), geom.meta)
        return _push(res, self._record_for(img, in_size, geom, opts, w))

    def _padded_only(self, x1: torch.Tensor, pads: np.ndarray) -> torch.Tensor:
        opts = _for_input(self._options(), x1)
        geom = _pad_geometry([(int(b), int(e)) for b, e in pads], tuple(x1.shape[2:]), 1, opts)
        return _run([x1], geom, [opts])[0]

    def inverse(self, data: Any) -> Any:
        """Undoes the last call (its record): on a MetaTensor, or on each MetaTensor of a dictionary.
        (TorchIO's ``inverse()`` returns the opposite transform; voxaug's undoes a call's record.)"""
        return _inverse_each(self, data)


class Pad(_TioBounds):
    """TorchIO Pad(padding, padding_mode=0): pads (w_ini, w_fin, h_ini, h_fin, d_ini, d_fin) voxels
    (or 3 values, each for both ends of an axis, or one for all six) on spatial axes 0, 1, 2, as
    one exact gather; MetaTensor affines get TorchIO's new origin. padding_mode: a number (a
    constant), or numpy's 'constant' (0), 'edge', 'reflect', 'symmetric', 'wrap', 'linear_ramp'
    (end values 0), 'empty' (zeros here; numpy leaves them undefined), or TorchIO's statistics of
    the whole sample, all channels: 'mean', 'median', 'minimum', 'maximum' (computed on the device
    per sample, no host sync; TorchIO reads them with ``.item()``). Bit-identical to TorchIO's
    np.pad for every mode and dtype numpy has. A dictionary (TorchIO's Subject) has every 4-D /
    5-D tensor padded (label maps too, with the same mode, as TorchIO). A callable padding_mode is
    refused."""

    def __init__(self, padding, padding_mode: Union[str, float] = 0,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(padding_mode)
        self.padding = padding
        self._w = _tio_bounds(padding, "padding")
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        return _each_image(data, lambda v: self._bounded(v, self._w))


class Crop(_TioBounds):
    """TorchIO Crop(cropping): removes (w_ini, w_fin, h_ini, h_fin, d_ini, d_fin) voxels (or 3
    values, each for both ends of an axis, or one for all six) from spatial axes 0, 1, 2, as one
    exact gather, bit-identical to TorchIO's slicing; MetaTensor affines get TorchIO's new origin.
    A dictionary (TorchIO's Subject) has every 4-D / 5-D tensor cropped. A crop that leaves no
    voxel on an axis is refused."""

    def __init__(self, cropping,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(0)
        self.cropping = cropping
        self._w = -_tio_bounds(cropping, "cropping")
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        return _each_image(data, lambda v: self._bounded(v, self._w))


def _tio_target(target_shape: Any, units: str) -> tuple:
    """TorchIO CropOrPad's _parse_target_shape: 3 values, None keeps an axis; positive ints in voxels,
    positive numbers in 'mm' / 'cm'."""
    if isinstance(target_shape, (str, bool)):
        raise ValueError(f"target_shape must be an int, float, or a sequence of 3 int/float/None values, got "
                         f"{target_shape!r}")
    if isinstance(target_shape, numbers.Real):
        vals = [target_shape] * 3
    else:
        try:
            vals = list(target_shape)
        except TypeError:
            raise ValueError(f"target_shape must be an int, float, or a sequence of 3 int/float/None values, got "
                             f"{target_shape!r}") from None
        if len(vals) != 3:
            raise ValueError(f"target_shape must have 3 elements, got {len(vals)}: {target_shape!r}")
    out = []
    for v in vals:
        if v is None:
            out.append(None)
            continue
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)) or v <= 0:
            raise ValueError(f"target_shape values must be positive numbers or None, got {v!r}")
        if units == "voxels":
            if float(v) != int(v):
                raise ValueError(f"target_shape must contain integers when units='voxels', got {v!r}")
            out.append(int(v))
        else:
            out.append(float(v))
    return tuple(out)


class CropOrPad(_TioBounds, _Randomizable):
    """TorchIO CropOrPad(target_shape=None, padding_mode=0, mask_name=None, labels=None,
    only_crop=False, only_pad=False, location='center', units='voxels'): each spatial axis cropped
    or padded to the target, as one exact launch. The split is TorchIO's (of n voxels to remove or
    add, ceil(n / 2) at the start, floor(n / 2) at the end; MONAI's ResizeWithPadOrCrop puts the
    odd voxel at the other end); padding_mode as :class:`Pad` (numbers, numpy's modes, the
    statistics of the uncropped sample).

    - target_shape: an int or 3 values; None keeps an axis. units 'mm' / 'cm': physical extents
      turned into voxels with the MetaTensor's spacing (1 for a plain tensor, TorchIO's identity
      affine), ``int(round(value * factor / spacing))`` as TorchIO (Python's round: halves to even).
    - location='random': each cropped axis starts at a uniform integer in [0, n] per sample (Philox,
      voxaug's seed; TorchIO draws with torch.randint), padding stays centred.
    - mask_name (dictionary inputs, TorchIO's Subject): the output is centred on the bounding box of
      that tensor's first channel (nonzero, or equal to one of `labels`), with TorchIO's half-voxel
      rule; target_shape None takes the box's size. The box is read on the host (one sync per call,
      as TorchIO's numpy); a missing key or an empty mask falls back to the centre with TorchIO's
      warning. Every sample of a batch gets its own box (a target_shape of None needs boxes of one
      size across the batch).

    A dictionary has every 4-D / 5-D tensor cropped or padded alike (one draw / box for all). The
    inverse (MetaTensors) crops back the padded axes and pads the cropped ones with zeros."""

    def __init__(self, target_shape=None, padding_mode: Union[str, float] = 0, mask_name: Optional[str] = None,
                 labels=None, only_crop: bool = False, only_pad: bool = False, location: str = "center",
                 units: str = "voxels", seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if target_shape is None and mask_name is None:
            raise ValueError("If mask_name is None, a target shape must be passed (target_shape must be given)")
        if units not in ("voxels", "mm", "cm"):
            raise ValueError(f"units must be 'voxels', 'mm', or 'cm', got {units!r}")
        if location not in ("center", "random"):
            raise ValueError(f"location must be 'center' or 'random', got {location!r}")
        if location == "random" and mask_name is not None:
            raise ValueError("location='random' cannot be combined with mask_name")
        if mask_name is not None and not isinstance(mask_name, str):
            raise ValueError(f"If mask_name is not None, it must be a string, not {type(mask_name)}")
        if mask_name is None and labels is not None:
            raise ValueError(f"If mask_name is None, labels should be None, but {labels!r} was passed")
        if only_crop and only_pad:
            raise ValueError("only_crop and only_pad cannot both be True")
        _TioBounds.__init__(self, padding_mode)
        _Randomizable.__init__(self, seed)
        self.units, self.location, self.mask_name = units, location, mask_name
        self.labels = None if labels is None else [int(v) for v in labels]
        self.target_shape = None if target_shape is None else _tio_target(target_shape, units)
        self.only_crop, self.only_pad = bool(only_crop), bool(only_pad)
        self._filter_args(include, exclude, keep)

    def _resolve(self, in_size: tuple, img: Any) -> Optional[list[int]]:
        if self.target_shape is None:
            return None
        spacing = _spacing_of(_one_affine(img.affine, "img.affine")) if _is_meta_tensor(img) else np.ones(3)
        out = []
        for v, sp, src in zip(self.target_shape, spacing, in_size):
            if v is None:
                out.append(int(src))
            elif self.units == "voxels":
                out.append(int(v))
            else:
                out.append(int(round(float(v) * (10.0 if self.units == "cm" else 1.0) / float(sp))))
        if min(out) < 1:
            raise ValueError(f"Resolved target shape must be positive in all axes, got {tuple(out)} from "
                             f"target_shape={self.target_shape!r} with units={self.units!r} and spacing "
                             f"{tuple(float(s) for s in spacing)}")
        return out

    def _center_widths(self, in_size, target, n: int) -> np.ndarray:
        w = np.zeros((n, 3, 2), dtype=np.int64)
        u = ops.philox_uniform(self._next_seed(), 0, n, 3).numpy() if self.location == "random" else None
        for a, (have, want) in enumerate(zip(in_size, target)):
            d = int(want) - int(have)
            if d > 0:
                w[:, a] = ((d + 1) // 2, d // 2)
            elif d < 0:
                c = -d
                if u is None:
                    w[:, a] = (-((c + 1) // 2), -(c // 2))
                else:  # a uniform start in [0, c]
                    ini = np.minimum(np.floor(u[:, a] * (c + 1)).astype(np.int64), c)
                    w[:, a, 0], w[:, a, 1] = -ini, -(c - ini)
        return w

    def _mask_widths(self, mask: torch.Tensor, in_size, target) -> np.ndarray:
        """TorchIO's _compute_mask_center_crop_or_pad per sample of the (N, C, D, H, W) mask."""
        m = mask[:, 0]
        if self.labels is not None:  # TorchIO's `mask == label` for each label (Python numbers: no overflow)
            hits = [m == v for v in self.labels]
            m = functools.reduce(torch.logical_or, hits) if hits else torch.zeros_like(m, dtype=torch.bool)
        else:
            m = m != 0
        # the box by the device reduction CropForeground uses; the host reads it (one sync)
        boxes = ops.foreground_bbox(m.to(torch.uint8)[:, None], 0.0).cpu().numpy()
        out = []
        for k in range(m.shape[0]):
            if boxes[k, 3] <= boxes[k, 0]:  # no voxel in the mask
                warnings.warn(f'All values found in the mask "{self.mask_name}" are zero. Using volume center '
                              "instead", RuntimeWarning, stacklevel=3)
                out.append(self._center_widths(in_size, target if target is not None else in_size, 1)[0])
                continue
            bb_min, bb_max = boxes[k, :3], boxes[k, 3:]
            center = np.mean((bb_min, bb_max), axis=0)
            want = bb_max - bb_min if target is None else target
            w = np.zeros((3, 2), dtype=np.int64)
            for a in range(3):
                t, c, s = want[a], center[a], in_size[a]
                if (not (t % 2)) ^ (not (c % 1)):
                    c -= 0.5
                begin, end = c - t / 2, c + t / 2
                crop_ini, pad_ini = (begin, 0) if begin >= 0 else (0, -begin)
                crop_fin, pad_fin = (s - end, 0) if end <= s else (0, end - s)
                pads = np.asarray([pad_ini, pad_fin], dtype=float).astype(int)  # TorchIO's int conversion
                crops = np.asarray([crop_ini, crop_fin], dtype=float).astype(int)
                w[a] = pads - crops
            out.append(w)
        return np.stack(out)

    def _widths_for(self, img: Any, mask: Optional[torch.Tensor]) -> np.ndarray:
        x, _ = _as_batch(img)
        in_size = tuple(int(s) for s in x.shape[2:])
        target = self._resolve(in_size, img)
        if mask is not None:
            w = self._mask_widths(mask, in_size, target)
        else:  # without a mask (or its fallback without a target) the centre
            w = self._center_widths(in_size, list(in_size) if target is None else target, x.shape[0])
        if self.only_crop:
            w = np.minimum(w, 0)
        if self.only_pad:
            w = np.maximum(w, 0)
        return w

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            if self.mask_name is not None:
                raise ValueError("mask_name names a tensor of a dictionary (TorchIO's Subject); this input is a "
                                 f"{type(data).__name__}")
            return self._bounded(data, self._widths_for(data, None))
        d = dict(data)
        keys = [k for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)]
        if not keys:
            return d
        shapes = {(tuple(_as_batch(d[k])[0].shape[:1]), tuple(d[k].shape[-3:])) for k in keys}
        if len(shapes) != 1:
            raise ValueError(f"the tensors of a subject must share the batch size and spatial shape, got "
                             f"{sorted(shapes)}")
        mask = None
        if self.mask_name is not None:
            if self.mask_name in d and isinstance(d[self.mask_name], (torch.Tensor, np.ndarray)):
                mask = _as_batch(d[self.mask_name])[0]
            else:
                warnings.warn(f'Mask name "{self.mask_name}" not found in subject keys "{tuple(d.keys())}". Using '
                              "volume center instead", RuntimeWarning, stacklevel=2)
        w = self._widths_for(d[keys[0]], mask)
        for k in keys:
            d[k] = self._bounded(d[k], w)
        return d


class DivisiblePad(_Pad):
    """MONAI DivisiblePad(k, mode='constant', method='symmetric'): pads each spatial axis up to
    a multiple of k (an int or one per axis; k <= 0 leaves the axis)."""

    def __init__(self, k, mode: str = "constant", method: str = "symmetric", lazy: bool = False, **kwargs):
        super().__init__(mode, lazy, kwargs)
        self.k = [int(k)] * 3 if isinstance(k, (int, np.integer)) else [int(v) for v in k]
        if len(self.k) != 3:
            raise ValueError(f"k must be an int or 3 ints, got {k!r}")
        self.method = _check_method(method)

    def _widths(self, in_size):
        want = [int(math.ceil(s / kk) * kk) if kk > 0 else int(s) for s, kk in zip(in_size, self.k)]
        return _symmetric_widths(want, in_size, self.method)


# ---------------- CropForeground ----------------
def is_positive(img: Any) -> Any:
    """MONAI's default select_fn: img > 0 (voxaug computes it in the bounding-box reduction)."""
    return img > 0


def _margin3(margin: Any) -> list[int]:
    m = [int(margin)] * 3 if isinstance(margin, (int, np.integer)) else [int(v) for v in margin]
    if len(m) != 3 or any(v < 0 for v in m):
        raise ValueError(f"margin must be an int or 3 ints, each >= 0, got {margin!r}")
    return m


class CropForeground(_Spatial):
    """MONAI CropForeground(select_fn=is_positive, channel_indices, margin, allow_smaller=False,
    return_coords, k_divisible, mode, **pad_kwargs): crops to the foreground's bounding box
    (with MONAI's margin, allow_smaller and k_divisible rules) and pads where the box leaves the
    image, as one exact gather (integer translation + the pad mode; equal to MONAI's crop then
    pad whenever the pad width is below the cropped extent, i.e. always for 'constant' / 'edge').

    The box comes from a device reduction (``voxaug.ops.foreground_bbox``); the crop's size
    depends on the data, so this transform synchronises once to read the box (as MONAI does).
    The default select_fn (``is_positive``, MONAI's or voxaug's) runs inside the reduction;
    another callable is evaluated with torch first. One volume per call ((C, D, H, W) or a
    batch of 1): different volumes have different boxes."""

    def __init__(self, select_fn: Callable = is_positive, channel_indices=None, margin=0, allow_smaller: bool = False,
                 return_coords: bool = False, k_divisible=1, mode="constant", lazy: bool = False, **pad_kwargs):
        _not_lazy(lazy)
        self.select_fn, self.allow_smaller, self.return_coords = select_fn, bool(allow_smaller), return_coords
        self.channel_indices = None if channel_indices is None else [int(c) for c in _as_list(channel_indices)]
        self.margin = _margin3(margin)
        k = [int(k_divisible)] * 3 if isinstance(k_divisible, (int, np.integer)) else [int(v) for v in k_divisible]
        if len(k) != 3:
            raise ValueError(f"k_divisible must be an int or 3 ints, got {k_divisible!r}")
        self.k_divisible = [v if v > 0 else 1 for v in k]  # MONAI's fall_back_tuple
        self.mode, self.value = mode, _pad_value(dict(pad_kwargs))
        _pad_opts(mode, self.value)
        self._box: Optional[tuple] = None

    def compute_bounding_box(self, img: Any) -> tuple[np.ndarray, np.ndarray]:
        """(box_start, box_end) as MONAI's compute_bounding_box (synchronises once)."""
        x, _ = _as_batch(img)
        if x.shape[0] != 1:
            raise ValueError(f"CropForeground crops one volume at a time (its box depends on the data); got a batch "
                             f"of {x.shape[0]}: call it per sample")
        if self.select_fn is is_positive or getattr(self.select_fn, "__name__", "") == "is_positive":
            box = ops.foreground_bbox(x, 0.0, self.channel_indices)
        else:
            sel = x if self.channel_indices is None else x[:, self.channel_indices]
            mask = torch.as_tensor(self.select_fn(sel)).to(torch.bool).any(1, keepdim=True)
            box = ops.foreground_bbox(mask.to(torch.uint8), 0.0)
        b = box[0].cpu().numpy().astype(np.int64)  # the one host sync: the crop size is data
        start, end = b[:3].copy(), b[3:].copy()
        size = np.asarray(x.shape[2:], dtype=np.int64)
        if end[0] > start[0]:  # foreground: MONAI's margin and allow_smaller
            start, end = start - self.margin, end + self.margin
            if self.allow_smaller:
                start, end = np.maximum(start, 0), np.minimum(end, size)
        orig = end - start
        want = np.asarray([int(math.ceil(o / k) * k) for o, k in zip(orig, self.k_divisible)], dtype=np.int64)
        start = start - (want - orig) // 2
        return start, start + want

    def _options(self, mode=None, **_):
        return _pad_opts(self.mode if mode is None else mode, self.value)

    def _geometry(self, in_size, n, params, opts):
        if self._box is None:
            raise RuntimeError("CropForeground: the bounding box is computed per call")
        start, end = self._box
        out_size = tuple(int(e - b) for b, e in zip(start, end))
        m = _translate([float(v) for v in start])
        return _Geometry(_stack([m] * n, 3), out_size, _stack([m] * n), opts.padding)

    def __call__(self, img, mode=None, lazy: Optional[bool] = None, **pad_kwargs):
        _not_lazy(lazy)
        if pad_kwargs:
            raise TypeError(f"unsupported arguments {sorted(pad_kwargs)}")
        start, end = self.compute_bounding_box(img)
        if np.any(end - start <= 0):  # no foreground: MONAI returns the empty crop
            out = img[(slice(None),) * (img.dim() - 3) + (slice(0, 0),) * 3]
        else:
            self._box = (start, end)
            try:
                out = self.apply(img, mode=mode)
            finally:
                self._box = None
        return (out, start, end) if self.return_coords else out


def _per_key(value: Any, n: int, name: str) -> list:
    """MONAI's ensure_tuple_rep for per-key settings."""
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} must be one value or one per key ({n}), got {value!r}")
        return list(value)
    return [value] * n


class _SpatialDict:
    """Applies a spatial transform to `keys` with per-key options. Random draws are shared by
    every key; keys whose index maps agree share one resample launch (e.g. image bilinear +
    label nearest of an Affined / RandAffined)."""

    def __init__(self, keys, transform: _Spatial, options: dict[str, Any], allow_missing_keys: bool):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform = transform
        self.options = {k: _per_key(v, len(self.keys), k) for k, v in options.items()}
        self.allow_missing_keys = allow_missing_keys
        for i in range(len(self.keys)):  # validate the per-key options now
            transform._options(**{k: v[i] for k, v in self.options.items()})

    def _items(self, d: dict) -> list:
        """(key, batch, restore, options) of every present key, in order; a missing key raises
        unless allow_missing_keys."""
        items = []
        for i, key in enumerate(self.keys):
            if key not in d:
                if self.allow_missing_keys:
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            x, restore = _as_batch(d[key])
            opts = self.transform._options(**{k: v[i] for k, v in self.options.items()})
            items.append((key, x, restore, _for_input(opts, x)))
        return items

    def _shared_draw(self, items: list):
        """One random draw for every key: they must share the batch size."""
        sizes = {x.shape[0] for _, x, _, _ in items}
        if len(sizes) != 1:
            raise ValueError(f"all keys must have the same batch size to share a random draw, got {sorted(sizes)}")
        return self.transform._params_for(sizes.pop(), True)

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        if isinstance(self.transform, _Randomizable):
            self.transform.set_random_state(seed, generator)
        return self

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        items = self._items(d)
        if not items:
            return d
        params = self._shared_draw(items) if isinstance(self.transform, _RandomSpatial) else None
        groups: list[tuple[_Geometry, bool, torch.device, list[int]]] = []
        geoms = []
        for j, (_, x, _, opts) in enumerate(items):
            g = self.transform._geometry(tuple(x.shape[2:]), x.shape[0], params, opts)
            geoms.append(g)
            for geom, align, dev, members in groups:
                if align == opts.align_corners and dev == x.device and geom.kernel_padding == g.kernel_padding \
                        and geom.same_launch(g):
                    members.append(j)
                    break
            else:
                groups.append((g, opts.align_corners, x.device, [j]))
        for geom, _, _, members in groups:
            outs = _run([items[j][1] for j in members], geom, [items[j][3] for j in members])
            for j, out in zip(members, outs):
                key, x, restore, opts = items[j]
                out = _with_affine(restore(out), geoms[j].meta)
                d[key] = _push(out, self.transform._record_for(data[key], tuple(x.shape[2:]), geoms[j], opts, params,
                                                               owner=self))
        return d

    def inverse(self, data: Mapping[Hashable, Any]) -> dict:
        """Undoes this transform's last call on every key (MONAI's dictionary inverse); keys whose
        inverse maps agree share one resample launch."""
        return _inverse_dict(self, data, self.keys, self.allow_missing_keys)


class Flipd(_SpatialDict):
    def __init__(self, keys, spatial_axis=None, allow_missing_keys: bool = False, lazy: bool = False):
        super().__init__(keys, Flip(spatial_axis, lazy), {}, allow_missing_keys)


class RandFlipd(_SpatialDict):
    def __init__(self, keys, prob: float = 0.1, spatial_axis=None, allow_missing_keys: bool = False,
                 lazy: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandFlip(prob, spatial_axis, lazy, seed), {}, allow_missing_keys)


class RandAxisFlipd(_SpatialDict):
    """MONAI RandAxisFlipd: every key flips the same drawn axis of a sample."""

    def __init__(self, keys, prob: float = 0.1, allow_missing_keys: bool = False, lazy: bool = False,
                 seed: Optional[int] = None):
        super().__init__(keys, RandAxisFlip(prob, lazy, seed), {}, allow_missing_keys)


class Rotate90d(_SpatialDict):
    def __init__(self, keys, k: int = 1, spatial_axes: tuple[int, int] = (0, 1), allow_missing_keys: bool = False,
                 lazy: bool = False):
        super().__init__(keys, Rotate90(k, spatial_axes, lazy), {}, allow_missing_keys)


class RandRotate90d(_SpatialDict):
    def __init__(self, keys, prob: float = 0.1, max_k: int = 3, spatial_axes: tuple[int, int] = (0, 1),
                 allow_missing_keys: bool = False, lazy: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandRotate90(prob, max_k, spatial_axes, lazy, seed), {}, allow_missing_keys)


class Affined(_SpatialDict):
    def __init__(self, keys, rotate_params=None, shear_params=None, translate_params=None, scale_params=None,
                 affine=None, spatial_size=None, mode="bilinear", padding_mode="reflection", device=None,
                 dtype=np.float32, align_corners: bool = False, allow_missing_keys: bool = False, lazy: bool = False,
                 rotate_order: str = "XYZ"):
        t = Affine(rotate_params, shear_params, translate_params, scale_params, affine, spatial_size,
                   align_corners=align_corners, image_only=True, lazy=lazy, rotate_order=rotate_order)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode}, allow_missing_keys)


class RandAffined(_SpatialDict):
    def __init__(self, keys, spatial_size=None, prob: float = 0.1, rotate_range=None, shear_range=None,
                 translate_range=None, scale_range=None, mode="bilinear", padding_mode="reflection",
                 cache_grid: bool = False, device=None, allow_missing_keys: bool = False, lazy: bool = False,
                 seed: Optional[int] = None):
        t = RandAffine(prob, rotate_range, shear_range, translate_range, scale_range, spatial_size, lazy=lazy,
                       seed=seed)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode}, allow_missing_keys)


class Rotated(_SpatialDict):
    def __init__(self, keys, angle, keep_size: bool = True, mode="bilinear", padding_mode="border",
                 align_corners=False, dtype=np.float32, allow_missing_keys: bool = False, lazy: bool = False,
                 rotate_order: str = "XYZ"):
        t = Rotate(angle, keep_size, lazy=lazy, rotate_order=rotate_order)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners},
                         allow_missing_keys)


class RandRotated(_SpatialDict):
    def __init__(self, keys, range_x=0.0, range_y=0.0, range_z=0.0, prob: float = 0.1, keep_size: bool = True,
                 mode="bilinear", padding_mode="border", align_corners=False, dtype=np.float32,
                 allow_missing_keys: bool = False, lazy: bool = False, seed: Optional[int] = None):
        t = RandRotate(range_x, range_y, range_z, prob, keep_size, lazy=lazy, seed=seed)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners},
                         allow_missing_keys)


class Zoomd(_SpatialDict):
    """Keys with different modes get different maps (interpolate's nearest floors), so an image
    and its label take two launches here."""

    def __init__(self, keys, zoom, mode="area", padding_mode="edge", align_corners=None, dtype=np.float32,
                 keep_size: bool = True, allow_missing_keys: bool = False, lazy: bool = False, **kwargs):
        t = Zoom(zoom, "trilinear", "edge", None, keep_size=keep_size, lazy=lazy, **kwargs)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners,
                                   "dtype": dtype}, allow_missing_keys)


class RandZoomd(_SpatialDict):
    """MONAI RandZoomd: one draw per sample shared by every key (see :class:`RandZoom`); keys
    with the same options share each launch, an image and its nearest label take two (their
    maps differ, as in Zoomd)."""

    def __init__(self, keys, prob: float = 0.1, min_zoom=0.9, max_zoom=1.1, mode="area", padding_mode="edge",
                 align_corners=None, dtype=np.float32, keep_size: bool = True, allow_missing_keys: bool = False,
                 lazy: bool = False, seed: Optional[int] = None, **kwargs):
        t = RandZoom(prob, min_zoom, max_zoom, "trilinear", "edge", None, keep_size=keep_size, lazy=lazy,
                     seed=seed, **kwargs)
        super().__init__(keys, t, {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners,
                                   "dtype": dtype}, allow_missing_keys)

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        items = self._items(d)
        if not items:
            return d
        params = self._shared_draw(items)
        groups: dict = {}  # keys of one shape, device and options share the launches
        for j, (_, x, _, opts) in enumerate(items):
            groups.setdefault((tuple(x.shape[2:]), x.device, opts), []).append(j)
        for (in_size, _, opts), members in groups.items():
            outs, zs, geoms, meta = self.transform._zoom([items[j][1] for j in members], opts, params)
            for j, out in zip(members, outs):
                key, _, restore, _ = items[j]
                out = _with_affine(restore(out), meta)
                d[key] = _push(out, self.transform._zoom_record(data[key], in_size, zs, geoms, meta, opts, params,
                                                                owner=self))
        return d


class Resized(_SpatialDict):
    """Keys with different modes get different maps (interpolate's nearest floors), so an image
    and its label take two launches here."""

    def __init__(self, keys, spatial_size, size_mode: str = "all", mode="area", align_corners=None,
                 anti_aliasing=False, anti_aliasing_sigma=None, dtype=np.float32, allow_missing_keys: bool = False,
                 lazy: bool = False):
        t = Resize(spatial_size, size_mode, "trilinear", None, lazy=lazy)
        super().__init__(keys, t, {"mode": mode, "align_corners": align_corners, "anti_aliasing": anti_aliasing,
                                   "anti_aliasing_sigma": anti_aliasing_sigma, "dtype": dtype},
                         allow_missing_keys)


class SpatialCropd(_SpatialDict):
    def __init__(self, keys, roi_center=None, roi_size=None, roi_start=None, roi_end=None, roi_slices=None,
                 allow_missing_keys: bool = False, lazy: bool = False):
        super().__init__(keys, SpatialCrop(roi_center, roi_size, roi_start, roi_end, roi_slices, lazy), {},
                         allow_missing_keys)


class CenterSpatialCropd(_SpatialDict):
    def __init__(self, keys, roi_size, allow_missing_keys: bool = False, lazy: bool = False):
        super().__init__(keys, CenterSpatialCrop(roi_size, lazy), {}, allow_missing_keys)


class CenterScaleCropd(_SpatialDict):
    def __init__(self, keys, roi_scale, allow_missing_keys: bool = False, lazy: bool = False):
        super().__init__(keys, CenterScaleCrop(roi_scale, lazy), {}, allow_missing_keys)


class SpatialPadd(_SpatialDict):
    def __init__(self, keys, spatial_size, method: str = "symmetric", mode="constant", allow_missing_keys: bool = False,
                 lazy: bool = False, **kwargs):
        super().__init__(keys, SpatialPad(spatial_size, method, "constant", lazy, **kwargs), {"mode": mode},
                         allow_missing_keys)


class BorderPadd(_SpatialDict):
    def __init__(self, keys, spatial_border, mode="constant", allow_missing_keys: bool = False, lazy: bool = False,
                 **kwargs):
        super().__init__(keys, BorderPad(spatial_border, "constant", lazy, **kwargs), {"mode": mode},
                         allow_missing_keys)


class ResizeWithPadOrCropd(_SpatialDict):
    def __init__(self, keys, spatial_size, mode="constant", allow_missing_keys: bool = False, method: str = "symmetric",
                 lazy: bool = False, **pad_kwargs):
        super().__init__(keys, ResizeWithPadOrCrop(spatial_size, method, "constant", lazy, **pad_kwargs),
                         {"mode": mode}, allow_missing_keys)


class DivisiblePadd(_SpatialDict):
    def __init__(self, keys, k, mode="constant", method: str = "symmetric", allow_missing_keys: bool = False,
                 lazy: bool = False, **kwargs):
        super().__init__(keys, DivisiblePad(k, "constant", method, lazy, **kwargs), {"mode": mode},
                         allow_missing_keys)


class CropForegroundd(_SpatialDict):
    """MONAI CropForegroundd: the box of `source_key`'s image (one sync), the same crop for every
    key (per-key `mode`), one launch per group of keys sharing the map; the box is stored under
    start_coord_key / end_coord_key."""

    def __init__(self, keys, source_key: str, select_fn: Callable = is_positive, channel_indices=None, margin=0,
                 allow_smaller: bool = False, k_divisible=1, mode="constant",
                 start_coord_key: Optional[str] = "foreground_start_coord",
                 end_coord_key: Optional[str] = "foreground_end_coord", allow_missing_keys: bool = False,
                 lazy: bool = False, **pad_kwargs):
        t = CropForeground(select_fn, channel_indices, margin, allow_smaller, False, k_divisible, "constant", lazy,
                           **pad_kwargs)
        super().__init__(keys, t, {"mode": mode}, allow_missing_keys)
        self.source_key, self.start_coord_key, self.end_coord_key = source_key, start_coord_key, end_coord_key

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        start, end = self.transform.compute_bounding_box(data[self.source_key])
        if np.any(end - start <= 0):
            raise ValueError(f"CropForegroundd: no foreground in data[{self.source_key!r}] (an empty crop)")
        self.transform._box = (start, end)
        try:
            d = super().__call__(data)
        finally:
            self.transform._box = None
        if self.start_coord_key is not None:
            d[self.start_coord_key] = start
        if self.end_coord_key is not None:
            d[self.end_coord_key] = end
        return d


# ---------------- Spacing / Orientation (affine-aware) ----------------
_AFFINE_TOL = 1e-3  # monai.data.utils.AFFINE_TOL
_LPS_LABELS = (("R", "L"), ("A", "P"), ("I", "S"))  # Orientation's labels for a MetaTensor whose meta["space"] is LPS


def _to_affine_3d(a: np.ndarray) -> np.ndarray:
    """monai.data.utils.to_affine_nd(3, a): the top-left block and the translation column."""
    new = np.eye(4)
    d = max(min(3, len(a) - 1), 1)
    new[:d, :d] = a[:d, :d]
    if d > 1:
        new[:d, -1] = a[:d, -1]
    return new


def _one_affine(affine: Any, name: str = "affine") -> np.ndarray:
    """A square float64 affine, or one shared (N, k, k) stack; (N, k, k) stacks that differ are refused."""
    a = np.asarray(affine.detach().cpu() if isinstance(affine, torch.Tensor) else affine, dtype=np.float64)
    if a.ndim == 3:
        if a.shape[0] == 0 or not np.all(a == a[:1]):
            raise ValueError(f"{name}: the samples of a batch have different affines ({a.shape[0]} of them); "
                             "voxaug's Spacing / Orientation need one geometry per batch: transform the samples "
                             "one at a time")
        a = a[0]
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < 2:
        raise ValueError(f"{name} must be a finite square (k, k) matrix (4x4 for 3-D) or a shared (N, k, k) "
                         f"stack, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {a.tolist()} (it has NaN or inf entries)")
    return _to_affine_3d(a)


def _check_invertible(src: np.ndarray, name: str) -> None:
    """Spacing needs the input affine's inverse (voxel spacing, shape and ``solve(src, dst)``):
    a singular one gets a clear error instead of numpy's LinAlgError from deep inside. Rank by
    SVD with numpy's default tolerance (largest singular value x 3 x eps), so affines that are
    singular up to float rounding are refused too."""
    if np.linalg.matrix_rank(src[:3, :3]) < 3:
        raise ValueError(f"{name} is singular (not invertible), got {src.tolist()}: Spacing maps the output grid "
                         "through the inverse of the input affine; its 3x3 part needs full rank (non-zero voxel "
                         "spacing on every axis, axes not parallel)")


def _source_affine(img: Any, affine: Any) -> tuple[np.ndarray, Optional[torch.Tensor]]:
    """(4x4 float64 numpy affine, the MetaTensor's own affine tensor or None)."""
    if affine is not None:
        return _one_affine(affine, "affine"), None
    if _is_meta_tensor(img):
        return _one_affine(img.affine, "img.affine"), img.affine
    warnings.warn("img is neither a MetaTensor nor given an affine=: assuming the identity affine (as MONAI does)")
    return np.eye(4), None


def _spacing_of(a: np.ndarray) -> np.ndarray:
    """monai.data.utils.affine_to_spacing(a, 3) with suppress_zeros."""
    s = np.sqrt(np.sum(a[:3, :3] * a[:3, :3], axis=0))
    s[s == 0] = 1.0
    return s


def _zoom_affine(affine: np.ndarray, scale: np.ndarray, diagonal: bool) -> np.ndarray:
    """monai.data.utils.zoom_affine for a 4x4 affine and 3 scales."""
    norm = _spacing_of(affine)
    s = np.array([v if v and v > 0 else n for v, n in zip(scale, norm)], dtype=float)  # fall_back_tuple
    s[s == 0] = 1.0
    if diagonal:
        return np.diag(np.append(s, [1.0]))
    rzs = affine[:-1, :-1]
    zs = np.linalg.cholesky(rzs.T @ rzs).T
    rotation = rzs @ np.linalg.inv(zs)
    new = np.eye(4)
    new[:-1, :-1] = rotation @ np.diag(np.sign(np.diag(zs)) * np.abs(s))
    return new


def _compute_shape_offset(shape_in: Sequence[int], in_affine: np.ndarray, out_affine: np.ndarray,
                          scale_extent: bool) -> tuple[np.ndarray, np.ndarray]:
    """monai.data.utils.compute_shape_offset."""
    shape = np.array(tuple(shape_in), dtype=float)
    in_coords = [(-0.5, dim - 0.5) if scale_extent else (0.0, dim - 1.0) for dim in shape]
    corners = np.asarray(np.meshgrid(*in_coords, indexing="ij")).reshape((len(shape), -1))
    corners = np.concatenate((corners, np.ones_like(corners[:1])))
    try:
        corners_out = np.linalg.solve(out_affine, in_affine) @ corners
    except np.linalg.LinAlgError as e:
        raise ValueError(f"affine: the output affine {out_affine.tolist()} is not invertible") from e
    corners = in_affine @ corners
    all_dist = corners_out[:-1].copy()
    corners_out = corners_out[:-1] / corners_out[-1]
    ptp = np.ptp(corners_out, axis=1)
    out_shape = np.round(ptp) if scale_extent else np.round(ptp + 1.0)
    offset = None
    for i in range(corners.shape[1]):
        min_corner = np.min(all_dist - all_dist[:, i:i + 1], 1)
        if np.allclose(min_corner, 0.0, rtol=_AFFINE_TOL):
            offset = corners[:-1, i]
            break
    if offset is None:
        offset = in_affine[:-1, :-1] @ (shape / 2.0) + in_affine[:-1, -1] - out_affine[:-1, :-1] @ (out_shape / 2.0)
    if scale_extent:
        in_offset = np.append(0.5 * (shape / out_shape - 1.0), 1.0)
        offset = np.abs((in_affine @ in_offset / in_offset[-1])[:-1]) * np.sign(offset)
    return out_shape.astype(int), offset


def _scale_affine(size: Sequence[int], new_size: Sequence[int], align_corners: bool) -> np.ndarray:
    """monai.transforms.utils.scale_affine(size, new_size, centered=True, align_corners)."""
    if align_corners:
        s = [0.0 if float(n) == 1 else (float(o) - 1) / (float(n) - 1) for o, n in zip(size, new_size)]
    else:
        s = [float(o) / float(max(n, 1)) for o, n in zip(size, new_size)]
    m = np.diag(s + [1.0])
    if not align_corners:
        m[:3, -1] = (np.diag(m)[:3] - 1) / 2.0
    return m


def _optional_pixdim(v: Any, name: str) -> np.ndarray:
    if v is None:
        return np.array([np.nan])
    return np.array(_numbers(v, name), dtype=np.float64)


def _finish_affine(out: Any, src_meta_affine: Optional[torch.Tensor], src_affine: np.ndarray, xform: np.ndarray,
                   replace: Optional[np.ndarray] = None) -> tuple[Any, torch.Tensor]:
    """MONAI's track_transform_meta update: ``affine @ xform`` in float64 (or `replace` outright)."""
    if replace is not None:
        new = torch.as_tensor(replace, dtype=torch.float64)
        if src_meta_affine is not None and src_meta_affine.dim() == 3:
            new = new.expand(src_meta_affine.shape[0], 4, 4).clone()
    else:
        base = (src_meta_affine.detach().cpu().to(torch.float64) if src_meta_affine is not None
                else torch.as_tensor(src_affine, dtype=torch.float64))
        if base.shape[-1] != 4:
            base = torch.as_tensor(src_affine, dtype=torch.float64)
        new = base @ torch.as_tensor(xform, dtype=torch.float64)
    if _is_meta_tensor(out):
        out.affine = new
    return out, new


def _check_img_affine(img: Any, affine: Any) -> None:
    if affine is not None and _is_meta_tensor(img):
        raise ValueError("affine: pass affine= only with a plain tensor; a MetaTensor carries its own affine")


def _requested_size(req: Any, in_size: Sequence[int], name: str) -> tuple[int, int, int]:
    """A requested output shape: a number or 3 (a single one repeats); negative entries take the
    input's size (MONAI's fall_back_tuple)."""
    vals = [req] if _is_number(req) else _as_list(req)
    if len(vals) == 1:
        vals = vals * 3
    if len(vals) < 3 or not all(_is_number(v) for v in vals[:3]):
        raise ValueError(f"{name} must be 3 integers (negative: the input's size), got {req!r}")
    return tuple(int(v) if v >= 0 else int(s) for v, s in zip(vals[:3], in_size))


def _xform_to(src: np.ndarray, dst: np.ndarray, in_size: Sequence[int], out_size: Sequence[int], name: str
              ) -> tuple[np.ndarray, bool]:
    """MONAI's output-index -> input-index map solve(src, dst) and its "affine unchanged" test."""
    if min(out_size) < 1:
        raise ValueError(f"{name}: the output shape {tuple(out_size)} is empty")
    try:
        xform = np.linalg.solve(src, dst)
    except np.linalg.LinAlgError as e:
        raise ValueError(f"affine: the source affine {src.tolist()} is not invertible") from e
    unchanged = tuple(out_size) == tuple(in_size) and (np.allclose(src, dst, atol=_AFFINE_TOL)
                                                       or np.allclose(xform, np.eye(4), atol=_AFFINE_TOL))
    return xform, unchanged


class Spacing:
    """MONAI Spacing: resamples to voxel spacing `pixdim`, keeping the affine's orientation (or a
    diagonal affine with ``diagonal=True``). MONAI's geometry exactly: min/max_pixdim, zoom_affine,
    compute_shape_offset (output shape and offset), ``xform = solve(src_affine, dst_affine)`` as the
    output-index -> input-index map (MONAI's AffineTransform(normalized=False) reproduces it exactly
    in grid_sample's normalised grid for either ``align_corners``), ``affine @ xform`` as the new
    affine, MONAI's "affine unchanged" shortcut (no resampling), ``recompute_affine``.

    Input: a MetaTensor (its ``affine``) or a plain tensor / array with ``affine=`` (a 4x4, or a
    shared (N, 4, 4)); returns a MetaTensor with the new affine, or ``(tensor, new_affine)`` for a
    plain input. One geometry per batch. Modes: ``bilinear`` / ``nearest`` / ``bicubic`` (voxaug's
    cubic B-spline) or MONAI's spline orders 0 / 1 / 3; paddings ``zeros`` / ``border`` (MONAI's
    default) / ``reflection``. Output dtype follows voxaug (nearest keeps the dtype, linear the
    floating dtype, integer input -> float32) and arithmetic is float32, not MONAI's float64:
    ``dtype`` is accepted for signature compatibility only.
    """

    def __init__(self, pixdim, diagonal: bool = False, mode="bilinear", padding_mode="border",
                 align_corners: bool = False, dtype=np.float64, scale_extent: bool = False,
                 recompute_affine: bool = False, min_pixdim=None, max_pixdim=None, lazy: bool = False):
        _not_lazy(lazy)
        pd = _numbers(pixdim, "pixdim")
        if not pd:
            raise ValueError(f"pixdim must be a number or a non-empty sequence of numbers, got {pixdim!r}")
        self.pixdim = np.array(pd, dtype=np.float64)
        self.min_pixdim = _optional_pixdim(min_pixdim, "min_pixdim")
        self.max_pixdim = _optional_pixdim(max_pixdim, "max_pixdim")
        for mn, mx in zip(self.min_pixdim, self.max_pixdim):
            if not np.isnan(mn) and not np.isnan(mx) and (mx < mn or mn < 0):
                raise ValueError(f"min_pixdim {self.min_pixdim} must be positive, smaller than max_pixdim "
                                 f"{self.max_pixdim}")
        self.diagonal, self.scale_extent, self.recompute_affine = bool(diagonal), bool(scale_extent), \
            bool(recompute_affine)
        self.mode, self.padding_mode, self.align_corners, self.dtype = mode, padding_mode, bool(align_corners), dtype
        _grid_opts(mode, padding_mode, align_corners)  # validate now

    def _options(self, mode=None, padding_mode=None, align_corners=None) -> _Opts:
        return _grid_opts(self.mode if mode is None else mode,
                          self.padding_mode if padding_mode is None else padding_mode,
                          self.align_corners if align_corners is None else align_corners)

    def _plan(self, src: np.ndarray, in_size: tuple, scale_extent=None, output_spatial_shape=None,
              align_corners: bool = False):
        """(xform 4x4 out index -> in index, out_size, unchanged, replaced affine or None)."""
        _check_invertible(src, "Spacing: the input affine (img.affine, or affine=)")
        out_d = self.pixdim[:3].copy()
        if out_d.size < 3:
            out_d = np.append(out_d, [out_d[-1]] * (3 - out_d.size))
        orig_d = _spacing_of(src)
        mins = list(self.min_pixdim[:3]) + [np.nan] * (3 - len(self.min_pixdim[:3]))
        maxs = list(self.max_pixdim[:3]) + [np.nan] * (3 - len(self.max_pixdim[:3]))
        for i, (d0, mn, mx) in enumerate(zip(orig_d, mins, maxs)):
            target = out_d[i]
            mn = target if np.isnan(mn) else min(mn, target)
            mx = target if np.isnan(mx) else max(mx, target)
            if mn > mx:
                raise ValueError(f"min_pixdim is larger than max_pixdim at dim {i}: min {mn} max {mx} out {target}")
            out_d[i] = d0 if (mn - _AFFINE_TOL) <= d0 <= (mx + _AFFINE_TOL) else target
        new_affine = _zoom_affine(src, out_d, self.diagonal)
        se = self.scale_extent if scale_extent is None else bool(scale_extent)
        shape, offset = _compute_shape_offset(in_size, src, new_affine, se)
        new_affine[:3, -1] = offset[:3]
        out_size = tuple(int(v) for v in shape) if output_spatial_shape is None else \
            _requested_size(output_spatial_shape, in_size, "output_spatial_shape")
        xform, unchanged = _xform_to(src, new_affine, in_size, out_size, "pixdim")
        replace = _scale_affine(in_size, out_size, align_corners) if self.recompute_affine else None
        return xform, out_size, unchanged, replace

    def _geometry(self, src: np.ndarray, in_size: tuple, n: int, opts: _Opts, scale_extent=None,
                  output_spatial_shape=None):
        xform, out_size, unchanged, replace = self._plan(src, in_size, scale_extent, output_spatial_shape,
                                                         opts.align_corners)
        k = np.eye(4) if unchanged else xform
        return _Geometry(_stack([k] * n, 3), out_size, _stack([k] * n), opts.padding), \
            (np.eye(4) if unchanged else xform), replace

    def __call__(self, data_array, mode=None, padding_mode=None, align_corners=None, dtype=None,
                 scale_extent=None, output_spatial_shape=None, lazy: Optional[bool] = None, affine=None):
        _not_lazy(lazy)
        _check_img_affine(data_array, affine)
        x, restore = _as_batch(data_array)
        src, meta_aff = _source_affine(data_array, affine)
        opts = self._options(mode, padding_mode, align_corners)
        geom, xform, replace = self._geometry(src, tuple(x.shape[2:]), x.shape[0], opts, scale_extent,
                                              output_spatial_shape)
        (out,) = _run([x], geom, [opts])
        out, new = _finish_affine(restore(out), meta_aff, src, xform, replace)
        if _tracking(data_array):
            _push(out, _make_record(self, x.shape[2:], geom, opts, _affine_copy(data_array),
                                    torch.from_numpy(np.asarray(xform, dtype=np.float64)), replace is not None))
        return out if _is_meta_tensor(out) else (out, new)

    def inverse(self, data: Any) -> Any:
        """Undoes the last call on `data`: the inverted index map onto the original grid (MONAI's
        SpatialResample inverse), the original affine back."""
        return _inverse_array(self, data)


class SpatialResample(Spacing):
    """MONAI SpatialResample(mode, padding_mode, align_corners, dtype): resamples onto `dst_affine`
    (default: the image's own) and `spatial_size` (None: MONAI's compute_shape_offset of the field
    of view; -1 entries: the input's), as MONAI's spatial_resample: ``xform = solve(src_affine,
    dst_affine)`` the output-index -> input-index map, MONAI's "affine unchanged" shortcut (a
    float32 copy, no resampling), ``affine @ xform`` the new affine. Modes, paddings, dtypes and
    the return form as :class:`Spacing` (float32 arithmetic; nearest keeps the dtype, which MONAI
    casts to float32)."""

    def __init__(self, mode="bilinear", padding_mode="border", align_corners: bool = False, dtype=np.float64,
                 lazy: bool = False):
        _not_lazy(lazy)
        self.mode, self.padding_mode, self.align_corners, self.dtype = mode, padding_mode, bool(align_corners), dtype
        self.recompute_affine = False
        _grid_opts(mode, padding_mode, align_corners)

    def _plan_to(self, src: np.ndarray, in_size: tuple, dst_affine: Any, spatial_size: Any):
        _check_invertible(src, "SpatialResample: the input affine (img.affine, or affine=)")
        dst = src.copy() if dst_affine is None else _one_affine(dst_affine, "dst_affine")
        if spatial_size is None:
            out_size = tuple(int(v) for v in _compute_shape_offset(in_size, src, dst, False)[0])
        else:
            out_size = _requested_size(spatial_size, in_size, "spatial_size")
        xform, unchanged = _xform_to(src, dst, in_size, out_size, "spatial_size")
        return xform, out_size, unchanged

    def __call__(self, img, dst_affine=None, spatial_size=None, mode=None, padding_mode=None, align_corners=None,
                 dtype=None, lazy: Optional[bool] = None, affine=None):
        _not_lazy(lazy)
        _check_img_affine(img, affine)
        x, restore = _as_batch(img)
        src, meta_aff = _source_affine(img, affine)
        opts = self._options(mode, padding_mode, align_corners)
        xform, out_size, unchanged = self._plan_to(src, tuple(x.shape[2:]), dst_affine, spatial_size)
        if unchanged:  # MONAI: the input as float32, affine and size as they are
            out = restore(x.to(torch.float32, copy=True))
            out, new = _finish_affine(out, meta_aff, src, np.eye(4))
            return out if _is_meta_tensor(out) else (out, new)
        n = x.shape[0]
        geom = _Geometry(_stack([xform] * n, 3), out_size, _stack([xform] * n), opts.padding)
        (out,) = _run([x], geom, [opts])
        out, new = _finish_affine(restore(out), meta_aff, src, xform)
        if _tracking(img):
            _push(out, _make_record(self, x.shape[2:], geom, opts, _affine_copy(img),
                                    torch.from_numpy(np.asarray(xform, dtype=np.float64)), False))
        return out if _is_meta_tensor(out) else (out, new)


class ResampleToMatch(SpatialResample):
    """MONAI ResampleToMatch: :class:`SpatialResample` onto `img_dst`'s affine (a MetaTensor's; a
    plain tensor's is the identity) and spatial shape; the result's affine is `img_dst`'s, and its
    meta dictionary `img_dst`'s except the file name (MONAI's)."""

    def __call__(self, img, img_dst, mode=None, padding_mode=None, align_corners=None, dtype=None,
                 lazy: Optional[bool] = None, affine=None):
        if img_dst is None:
            raise RuntimeError("`img_dst` is missing.")
        dst_affine = img_dst.affine if _is_meta_tensor(img_dst) else torch.eye(4, dtype=torch.float64)
        size = tuple(int(v) for v in img_dst.shape[-3:])
        out = super().__call__(img, dst_affine, size, mode, padding_mode, align_corners, dtype, lazy, affine)
        if _is_meta_tensor(out):
            import copy

            out.affine = torch.as_tensor(_one_affine(dst_affine), dtype=torch.float64)
            if _is_meta_tensor(img_dst):
                name = out.meta.get("filename_or_obj", "resample_to_match_source")
                keep_affine = out.meta.get("affine")
                out.meta = copy.deepcopy(dict(img_dst.meta))
                out.meta["filename_or_obj"] = name
                if keep_affine is not None:
                    out.meta["affine"] = keep_affine
        return out


class SpatialResampled:
    """MONAI SpatialResampled: each key resampled onto the affine stored under `dst_keys` (per key)."""

    def __init__(self, keys, mode="bilinear", padding_mode="border", align_corners=False, dtype=np.float64,
                 dst_keys="dst_affine", allow_missing_keys: bool = False, lazy: bool = False):
        _not_lazy(lazy)
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        n = len(self.keys)
        self.mode, self.padding_mode = _per_key(mode, n, "mode"), _per_key(padding_mode, n, "padding_mode")
        self.align_corners, self.dtype = _per_key(align_corners, n, "align_corners"), _per_key(dtype, n, "dtype")
        self.dst_keys = _per_key(dst_keys, n, "dst_keys")
        self.allow_missing_keys = allow_missing_keys
        self.sp_transform = SpatialResample()
        for i in range(n):
            self.sp_transform._options(self.mode[i], self.padding_mode[i], self.align_corners[i])

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        for i, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.sp_transform(d[key], d[self.dst_keys[i]], None, self.mode[i], self.padding_mode[i],
                                       self.align_corners[i], self.dtype[i])
        return d


class ResampleToMatchd:
    """MONAI ResampleToMatchd(keys, key_dst, ...): each key resampled onto `d[key_dst]`'s grid."""

    def __init__(self, keys, key_dst, mode="bilinear", padding_mode="border", align_corners=False,
                 dtype=np.float64, allow_missing_keys: bool = False, lazy: bool = False):
        _not_lazy(lazy)
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        n = len(self.keys)
        self.key_dst = key_dst
        self.mode, self.padding_mode = _per_key(mode, n, "mode"), _per_key(padding_mode, n, "padding_mode")
        self.align_corners, self.dtype = _per_key(align_corners, n, "align_corners"), _per_key(dtype, n, "dtype")
        self.allow_missing_keys = allow_missing_keys
        self.resampler = ResampleToMatch()
        for i in range(n):
            self.resampler._options(self.mode[i], self.padding_mode[i], self.align_corners[i])

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        for i, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.resampler(d[key], d[self.key_dst], self.mode[i], self.padding_mode[i],
                                    self.align_corners[i], self.dtype[i])
        return d


def _orientation_xform(src: np.ndarray, in_size: tuple, axcodes, as_closest_canonical: bool, labels):
    """MONAI Orientation's ornt (nibabel io_orientation / axcodes2ornt / ornt_transform) as
    (inv_ornt_aff: output index -> input index, output size)."""
    import nibabel as nib

    if as_closest_canonical:
        ornt = nib.io_orientation(src)
    else:
        if len(axcodes) > 3:
            warnings.warn(f"axcodes ('{axcodes}') is longer than the 3 spatial dimensions; using '{axcodes[:3]}'")
        try:
            dst = nib.orientations.axcodes2ornt(axcodes[:3], labels=labels)
        except Exception as e:  # nibabel raises ValueError / KeyError on unknown codes
            raise ValueError(f"axcodes {axcodes!r} is not valid for labels {labels}: {e}") from e
        if len(dst) < 3:
            raise ValueError(f"axcodes must match the 3 spatial dimensions, got axcodes={axcodes!r}")
        if np.isnan(dst).any() or len(set(dst[:, 0].astype(int).tolist())) != 3:
            raise ValueError(f"axcodes {axcodes!r} must name each of the 3 axes once (labels {labels})")
        ornt = nib.orientations.ornt_transform(nib.io_orientation(src), dst)
    xform = np.asarray(nib.orientations.inv_ornt_aff(ornt, in_size), dtype=np.float64)
    perm = np.argsort(ornt[:, 0])
    out_size = tuple(int(in_size[i]) for i in perm)
    return xform, out_size


class Orientation:
    """MONAI Orientation: reorders and flips the axes so that the affine's axis codes become
    `axcodes` (nibabel's conventions, MONAI's LPS labels for a MetaTensor with meta["space"] ==
    "LPS", ``as_closest_canonical``). A signed permutation: voxels are copied, bit-identical to
    MONAI's torch.flip + permute for every dtype; the affine becomes ``affine @ inv_ornt_aff``.

    Input: a MetaTensor or a plain tensor / array with ``affine=``; returns a MetaTensor, or
    ``(tensor, new_affine)`` for a plain input.
    """

    def __init__(self, axcodes: Optional[str] = None, as_closest_canonical: bool = False, labels=None,
                 lazy: bool = False):
        _not_lazy(lazy)
        if axcodes is None and not as_closest_canonical:
            raise ValueError("Incompatible values: axcodes=None and as_closest_canonical=False; give axcodes "
                             "(e.g. 'RAS') or as_closest_canonical=True")
        if axcodes is not None and not isinstance(axcodes, str):
            raise ValueError(f"axcodes must be a string such as 'RAS', got {axcodes!r}")
        if axcodes is not None and as_closest_canonical:
            warnings.warn("using as_closest_canonical=True, axcodes ignored.")
        if labels is not None:
            try:
                ok = len(labels) >= 3 and all(len(p) == 2 and all(isinstance(c, str) for c in p) for p in labels)
            except TypeError:
                ok = False
            if not ok:
                raise ValueError(f"labels must be 3 pairs of axis codes such as (('L', 'R'), ('P', 'A'), ('I', 'S')), "
                                 f"got {labels!r}")
        self.axcodes, self.as_closest_canonical, self.labels = axcodes, bool(as_closest_canonical), labels
        if axcodes is not None and not as_closest_canonical:  # validate now
            _orientation_xform(np.eye(4), (1, 1, 1), axcodes, False, labels or (("L", "R"), ("P", "A"), ("I", "S")))

    def _labels_for(self, img: Any):
        if self.labels is None and _is_meta_tensor(img) and str(_name(img.meta.get("space", ""))).upper() == "LPS":
            return _LPS_LABELS
        return self.labels if self.labels is not None else (("L", "R"), ("P", "A"), ("I", "S"))

    def _geometry(self, img: Any, src: np.ndarray, in_size: tuple, n: int):
        xform, out_size = _orientation_xform(src, in_size, self.axcodes, self.as_closest_canonical,
                                             self._labels_for(img))
        return _Geometry(_stack([xform] * n, 3), out_size, _stack([xform] * n), "zeros"), xform

    def __call__(self, data_array, lazy: Optional[bool] = None, affine=None):
        _not_lazy(lazy)
        _check_img_affine(data_array, affine)
        x, restore = _as_batch(data_array)
        src, meta_aff = _source_affine(data_array, affine)
        geom, xform = self._geometry(data_array, src, tuple(x.shape[2:]), x.shape[0])
        (out,) = _run([x], geom, [_exact_opts()])
        out, new = _finish_affine(restore(out), meta_aff, src, xform)
        if _tracking(data_array):
            _push(out, _make_record(self, x.shape[2:], geom, _exact_opts(), _affine_copy(data_array)))
        return out if _is_meta_tensor(out) else (out, new)

    def inverse(self, data: Any) -> Any:
        """Undoes the last call on `data`: the inverse signed permutation (bit-exact)."""
        return _inverse_array(self, data)


def _run_grouped(d: dict, jobs: list, patches: Optional[dict] = None, post: Optional[dict] = None) -> None:
    """jobs: (key, x, restore, geom, opts, finish) -> one resample launch per group of keys that
    share the geometry, padding, align_corners and device (and are all patches or all not)."""
    patches = patches or {}
    groups: list[tuple[_Geometry, _Opts, Any, list[int]]] = []
    for j, (_, x, _, g, o, _) in enumerate(jobs):
        where = patches[id(x)].volume.device if id(x) in patches else x.device
        for geom, go, dev, members in groups:
            if go.align_corners == o.align_corners and dev == where and geom.kernel_padding == g.kernel_padding \
                    and geom.same_launch(g) and (id(jobs[members[0]][1]) in patches) == (id(x) in patches):
                members.append(j)
                break
        else:
            groups.append((g, o, where, [j]))
    for geom, _, _, members in groups:
        outs = _run([jobs[j][1] for j in members], geom, [jobs[j][4] for j in members], patches, post)
        for j, out in zip(members, outs):
            key, _, restore, _, _, finish = jobs[j]
            d[key] = finish(restore(out))


class Spacingd:
    """MONAI Spacingd: per-key mode / padding_mode / align_corners / dtype / scale_extent, and
    MONAI's ``ensure_same_shape`` (MetaTensors with the first key's shape and pixdim within 1e-3
    get the first key's output shape). Keys with the same geometry share one launch (image
    bilinear + label nearest). Plain tensors are taken to have the identity affine, as in MONAI."""

    def __init__(self, keys, pixdim, diagonal: bool = False, mode="bilinear", padding_mode="border",
                 align_corners=False, dtype=np.float64, scale_extent=False, recompute_affine: bool = False,
                 min_pixdim=None, max_pixdim=None, ensure_same_shape: bool = True, allow_missing_keys: bool = False,
                 lazy: bool = False):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.spacing_transform = Spacing(pixdim, diagonal=diagonal, recompute_affine=recompute_affine,
                                         min_pixdim=min_pixdim, max_pixdim=max_pixdim, lazy=lazy)
        n = len(self.keys)
        self.mode, self.padding_mode = _per_key(mode, n, "mode"), _per_key(padding_mode, n, "padding_mode")
        self.align_corners, self.dtype = _per_key(align_corners, n, "align_corners"), _per_key(dtype, n, "dtype")
        self.scale_extent = _per_key(scale_extent, n, "scale_extent")
        self.ensure_same_shape, self.allow_missing_keys = bool(ensure_same_shape), allow_missing_keys
        for i in range(n):
            self.spacing_transform._options(self.mode[i], self.padding_mode[i], self.align_corners[i])

    def __call__(self, data: Mapping[Hashable, Any], lazy: Optional[bool] = None) -> dict:
        _not_lazy(lazy)
        d = dict(data)
        sp = self.spacing_transform
        init_shape, init_pixdim, out_shape_k, should_match = None, None, None, False
        jobs = []
        for i, key in enumerate(self.keys):
            if key not in d:
                if self.allow_missing_keys:
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            img = d[key]
            x, restore = _as_batch(img)
            src, meta_aff = _source_affine(img, None)
            in_size = tuple(x.shape[2:])
            if self.ensure_same_shape and _is_meta_tensor(img):
                if init_shape is None:
                    init_shape, init_pixdim = in_size, _spacing_of(src)
                else:
                    should_match = np.allclose(init_shape, in_size) and np.allclose(init_pixdim, _spacing_of(src),
                                                                                    atol=1e-3)
            opts = sp._options(self.mode[i], self.padding_mode[i], self.align_corners[i])
            geom, xform, replace = sp._geometry(src, in_size, x.shape[0], opts, self.scale_extent[i],
                                                out_shape_k if should_match else None)
            rec = _make_record(self, in_size, geom, opts, _affine_copy(img),
                               torch.from_numpy(np.asarray(xform, dtype=np.float64)), replace is not None) \
                if _tracking(img) else None
            finish = functools.partial(
                lambda out, m, s, xf, r, rec: _push(_finish_affine(out, m, s, xf, r)[0], rec), m=meta_aff, s=src,
                xf=xform, r=replace, rec=rec)
            jobs.append((key, x, restore, geom, opts, finish))
            if out_shape_k is None:
                out_shape_k = geom.out_size
        _run_grouped(d, jobs)
        return d

    def inverse(self, data: Mapping[Hashable, Any]) -> dict:
        """Undoes the last call on every key; keys whose inverse maps agree share one launch."""
        return _inverse_dict(self, data, self.keys, self.allow_missing_keys)


class Orientationd:
    """MONAI Orientationd: the same axcodes for every key; keys with the same geometry share one
    (exact) launch."""

    def __init__(self, keys, axcodes: Optional[str] = None, as_closest_canonical: bool = False, labels=None,
                 allow_missing_keys: bool = False, lazy: bool = False):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.ornt_transform = Orientation(axcodes, as_closest_canonical, labels, lazy)
        self.allow_missing_keys = allow_missing_keys

    def __call__(self, data: Mapping[Hashable, Any], lazy: Optional[bool] = None) -> dict:
        _not_lazy(lazy)
        d = dict(data)
        jobs = []
        for key in self.keys:
            if key not in d:
                if self.allow_missing_keys:
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            img = d[key]
            x, restore = _as_batch(img)
            src, meta_aff = _source_affine(img, None)
            geom, xform = self.ornt_transform._geometry(img, src, tuple(x.shape[2:]), x.shape[0])
            rec = _make_record(self, x.shape[2:], geom, _exact_opts(), _affine_copy(img)) if _tracking(img) else None
            finish = functools.partial(lambda out, m, s, xf, rec: _push(_finish_affine(out, m, s, xf)[0], rec),
                                       m=meta_aff, s=src, xf=xform, rec=rec)
            jobs.append((key, x, restore, geom, _exact_opts(), finish))
        _run_grouped(d, jobs)
        return d

    def inverse(self, data: Mapping[Hashable, Any]) -> dict:
        """Undoes the last call on every key; keys whose inverse maps agree share one launch."""
        return _inverse_dict(self, data, self.keys, self.allow_missing_keys)


# ---------------- lazy composition (used by voxaug.transforms.Compose) ----------------
# Consecutive spatial transforms are index maps out -> in, so a run of them is one map:
# in = K_1 @ K_2 @ ... @ K_last @ out (float64, per sample), on the last output grid, gathered
# by one resample launch. A MetaTensor's affine is updated step by step exactly as each
# transform would (``affine @ map``), so the affines equal the step-by-step ones.
#
# Interpolation: the "exact" steps (Flip, RandFlip, RandAxisFlip, Rotate90, RandRotate90, Orientation,
# SpatialCrop, CenterSpatialCrop: signed permutations / integer shifts inside the image) adopt
# the group's mode; the other steps (Affine, RandAffine, Rotate, RandRotate, Resize, Zoom,
# RandZoom, Spacing) must agree on (kernel mode, kernel padding, align_corners). A step that
# disagrees ends the group and starts the next one (one launch each). A group of exact steps alone runs
# on the kernel's exact path and is bit-identical to the step-by-step result.
#
# Not fused (run as the transform itself, ending the group): Resize / Zoom whose map is not
# affine (interpolate's nearest table fallback) or that pad after the resample (Zoom keep_size
# with zoom < 1), a RandZoom draw that is no index map (see _plan_rand_zoom; it keeps its
# draw), Affine with image_only=False (it returns a tuple), Spacing with recompute_affine,
# Spacing / Orientation on a plain tensor (they return a tuple), Spacingd / Orientationd
# (dictionary forms with their own per-key geometry rules), anything else.
#
# Deformations (Rand3DElastic, GridDistortion, RandGridDistortion and their dictionary forms,
# RandomElasticDeformation; voxaug.deform) close the group before them: one resample_deformed
# launch with the group's map times the deformation's (see _close_with_deformation). Spatial
# steps after a deformation start the next group.
_EXACT_TYPES: tuple = ()  # set below, after the classes exist
_FUSABLE_TYPES: tuple = ()


@dataclass
class _LazyStep:
    mats: torch.Tensor  # (N, 4, 4) float64 kernel map of this step
    out_size: tuple
    opts: _Opts
    padding: str  # kernel padding
    exact: bool
    meta: Optional[torch.Tensor] = None  # (N, 4, 4) float64: the step's affine update (affine @ meta)
    owner: Any = None  # the transform as listed in the Compose (a dictionary form for dictionaries)
    record: Optional[dict] = None  # the record the step writes when it is a group of its own
    alone: Optional[Callable] = None  # (N, C, ...) -> output: the step's own call, where its fused map differs


class _LazyChain:
    """Lazy state of one tensor (an array input, or one key of a dictionary)."""

    def __init__(self, img: Any):
        x, _ = _as_batch(img)
        self.img, self.n, self.size, self.dtype = img, x.shape[0], tuple(x.shape[2:]), x.dtype
        self.affine = img.affine if _is_meta_tensor(img) else None
        self.steps: list[_LazyStep] = []
        self.mode_key: Optional[tuple] = None
        self.track, self.orig_size, self.orig_affine = _tracking(img), self.size, _affine_copy(img)
        self.owner: Any = None  # the Compose whose fused records these are

    def affine_copy(self) -> Optional[torch.Tensor]:
        return None if self.affine is None else self.affine.detach().cpu().to(torch.float64).clone()

    def compatible(self, step: _LazyStep) -> bool:
        return step.exact or self.mode_key is None or self.mode_key == _mode_key(step)

    def push(self, step: _LazyStep, new_affine: Any) -> None:
        self.steps.append(step)
        if not step.exact and self.mode_key is None:
            self.mode_key = _mode_key(step)
        self.size, self.affine = tuple(step.out_size), new_affine
        if step.opts.mode != "nearest" and not self.dtype.is_floating_point:
            self.dtype = torch.float32

    def job(self, key: Any, img: Any, products: Optional[dict] = None):
        """`products` (one dict per flush): chains whose steps are the same objects (keys that
        shared their plans) share the product map."""
        x, restore = _as_batch(img)
        ids = tuple(id(s) for s in self.steps)
        pair = None if products is None else products.get(ids)
        if pair is None:
            if len(self.steps) > 1 and all(s.exact for s in self.steps):
                # Exact steps (signed permutations, integer shifts) have small integer entries:
                # their float64 product is exact in any evaluation order, so numpy's matmul (a
                # fraction of torch's per-call cost on 4x4 maps) gives the same bits.
                acc = self.steps[0].mats.numpy()
                for s in self.steps[1:]:
                    acc = acc @ s.mats.numpy()  # out -> in maps compose first-to-last
                pair = torch.from_numpy(acc), torch.from_numpy(acc[:, :3].copy())
            else:
                total = self.steps[0].mats
                for s in self.steps[1:]:
                    total = total @ s.mats  # out -> in maps compose first-to-last
                pair = total, total[:, :3].contiguous()
            if products is not None:
                products[ids] = pair
        total = pair[0]
        lead = next((s for s in self.steps if not s.exact), None)
        opts = lead.opts if lead is not None else _exact_opts()
        geom = _Geometry(pair[1], self.size, total, lead.padding if lead is not None else "zeros")
        affine = self.affine
        record = self.record(geom, opts) if self.track else None

        def finish(out):
            if _is_meta_tensor(out) and affine is not None:
                out.affine = affine
            return _push(out, record)

        return key, x, restore, geom, opts, finish

    def run_alone(self, img: Any) -> Any:
        """A group of one step whose map differs from its own call (RandZoom's 'edge' padding):
        that call's result, affine and record."""
        x, restore = _as_batch(img)
        out = restore(self.steps[0].alone(x))
        if _is_meta_tensor(out) and self.affine is not None:
            out.affine = self.affine
        return _push(out, self.steps[0].record)

    def record(self, geom: _Geometry, opts: _Opts) -> Optional[dict]:
        """A group of one step records as that transform does; a fused group writes one record of
        the Compose with the product map (inverted as one) and the list of its steps."""
        if len(self.steps) == 1:
            return self.steps[0].record
        meta = self.steps[0].meta
        for s in self.steps[1:]:
            meta = meta @ s.meta
        members = [{_CLASS: type(s.owner).__name__, _ID: id(s.owner)} for s in self.steps]
        owner = self.owner if self.owner is not None else self
        rec = _make_record(owner, self.orig_size, geom, opts, self.orig_affine, affine_map=meta,
                           extra={"transforms": members})
        if self.owner is None:
            rec[_CLASS], rec[_ID] = "Compose", _NONE
        return rec


def _mode_key(step: _LazyStep) -> tuple:
    return step.opts.mode, step.padding, step.opts.align_corners


def _square(m: torch.Tensor) -> torch.Tensor:
    """(N, 4, 4) float64 CPU maps from (N, 3 or 4, 4) ones (numpy: a few microseconds)."""
    out = np.zeros((m.shape[0], 4, 4))
    out[:, :3] = m[:, :3].detach().cpu().to(torch.float64).numpy()
    out[:, 3, 3] = 1.0
    return torch.from_numpy(out)


def _plan_lazy(t: Any, ch: _LazyChain, over: dict, params: Optional[torch.Tensor], owner: Any = None,
               memo: Optional[dict] = None):
    """(step, new affine) of spatial transform `t` on the chain's current (virtual) tensor, or None
    when `t` cannot join a fused group there. `memo` (one dict per transform call): keys whose
    chains are untracked plain tensors of one size, batch and options share one plan."""
    if isinstance(t, (Spacing, Orientation)):
        if ch.affine is None or (isinstance(t, Spacing) and t.recompute_affine):
            return None
        src = _one_affine(ch.affine, "img.affine")
        if isinstance(t, Spacing):
            over = dict(over)
            scale_extent, out_shape = over.pop("scale_extent", None), over.pop("output_spatial_shape", None)
            opts = t._options(**over)
            geom, xform, _ = t._geometry(src, ch.size, ch.n, opts, scale_extent, out_shape)
        else:
            opts = _exact_opts()
            geom, xform = t._geometry(ch.img, src, ch.size, ch.n)
        base = ch.affine.detach().cpu().to(torch.float64)
        if base.shape[-1] != 4:
            base = torch.as_tensor(src, dtype=torch.float64)
        new_affine = base @ torch.as_tensor(xform, dtype=torch.float64)  # as _finish_affine
        meta = torch.as_tensor(np.asarray(xform, dtype=np.float64)).expand(ch.n, 4, 4).clone()
        record = _make_record(owner if owner is not None else t, ch.size, geom, opts, ch.affine_copy(), meta) \
            if ch.track else None
        return _LazyStep(_square(geom.mats), geom.out_size, opts, geom.kernel_padding,
                         isinstance(t, Orientation), meta, owner if owner is not None else t, record), new_affine
    if not isinstance(t, _Spatial):
        return None
    opts = t._options(**over)
    if opts.table_dtype is None:
        opts = dataclasses.replace(opts, table_dtype=_table_dtype(None, ch.dtype))
    if isinstance(t, RandZoom):
        return _plan_rand_zoom(t, ch, opts, params, owner)
    shared = memo is not None and not ch.track and ch.affine is None
    if shared:
        memo_key = (tuple(ch.size), ch.n, opts)
        if memo_key in memo:
            return memo[memo_key]
    geom = t._geometry(ch.size, ch.n, params, opts)
    if geom.tables is not None or geom.pad is not None or geom.pool is not None or geom.smooth is not None:
        return None
    record = t._record_for(ch.img, ch.size, geom, opts, params, owner=owner, src_affine=ch.affine_copy()) \
        if ch.track else None
    new_affine = ch.affine
    if new_affine is not None:  # as _with_affine
        m = geom.meta.to(new_affine.device, new_affine.dtype)
        new_affine = new_affine @ m[0] if m.shape[0] == 1 or bool((m == m[:1]).all()) else new_affine @ m
    exact = isinstance(t, _EXACT_TYPES)
    if exact and geom.meta.dtype == torch.float64 and geom.meta.shape == (ch.n, 4, 4):
        kmap = meta = geom.meta  # _map_geometry: the index map is the affine update (a fresh tensor)
    else:
        kmap, meta = _square(geom.mats), geom.meta.to(torch.float64).expand(ch.n, 4, 4).clone()
    planned = (_LazyStep(kmap, geom.out_size, opts, geom.kernel_padding, exact, meta,
                         owner if owner is not None else t, record), new_affine)
    if shared:
        memo[memo_key] = planned
    return planned


def _plan_rand_zoom(t: "RandZoom", ch: _LazyChain, opts: _Opts, params: torch.Tensor, owner: Any):
    """RandZoom's step for the draw `params`: each sample's Zoom map (the maps RandZoom's own
    launch uses; keep_size's centre crop is part of the map), or None when the draw is no index
    map: mode 'area' (per-sample pooling), a nearest size pair with no exact affine rule (the
    table fallback), keep_size padding with a padding_mode other than 'edge'. keep_size=False
    with per-sample sizes raises RandZoom's own ValueError.

    keep_size padding (zoom < 1) with 'edge' (RandZoom's default): the sample's map continues
    past its zoomed voxels and the kernel clamps to the border, as MONAI's lazy resampling reads
    an 'edge' pad. In the padded band this differs from zoom-then-pad: linear reads the input's
    edge voxel instead of the zoomed edge (an interpolation-sized difference); nearest reads the
    last input voxel where interpolate's floor rule had kept an earlier one (at most one voxel
    index, at the high end). After a crop sampler the band reads the real volume instead. A
    padding draw with no other step to fuse with runs as RandZoom itself (step.alone)."""
    if opts.interp == "area" or ch.n == 0:
        return None
    zs, geoms, out_size = t._per_sample(ch.size, params, opts)
    if any(g.tables is not None for g in geoms):
        return None
    if any(g.pad is not None for g in geoms) and opts.padding != "edge":
        return None
    mats = []
    for g in geoms:
        k = _square(g.mats)[0]
        if g.pad is not None:  # padded voxel o is zoomed voxel o - before
            k = k @ torch.from_numpy(_translate([-b for b, _ in g.pad[0]]))
        mats.append(k)
    meta = torch.cat([g.meta for g in geoms]).to(torch.float64)
    record = t._zoom_record(ch.img, ch.size, zs, geoms, meta, opts, params, owner=owner,
                            src_affine=ch.affine_copy()) if ch.track else None
    new_affine = ch.affine
    if new_affine is not None:  # as _with_affine
        m = meta.to(new_affine.device, new_affine.dtype)
        new_affine = new_affine @ m[0] if m.shape[0] == 1 or bool((m == m[:1]).all()) else new_affine @ m
    alone = functools.partial(_rand_zoom_alone, t, opts, params) if any(g.pad is not None for g in geoms) else None
    return _LazyStep(torch.stack(mats), tuple(out_size), opts, "border", False, meta,
                     owner if owner is not None else t, record, alone), new_affine


def _rand_zoom_alone(t: "RandZoom", opts: _Opts, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return t._zoom([x], opts, params)[0][0]


def _is_dict_transform(t: Any) -> bool:
    return isinstance(t, (_SpatialDict, Spacingd, Orientationd))


def _inner(t: Any) -> Any:
    """The array transform of a dictionary transform (or `t` itself)."""
    if isinstance(t, _SpatialDict):
        return t.transform
    if isinstance(t, Spacingd):
        return t.spacing_transform
    if isinstance(t, Orientationd):
        return t.ornt_transform
    return t


def _key_options(t: Any, i: int) -> dict:
    """Per-key overrides of dictionary transform `t` for its i-th key, as _plan_lazy takes them."""
    if isinstance(t, _SpatialDict):
        return {k: v[i] for k, v in t.options.items()}
    if isinstance(t, Spacingd):
        return {"mode": t.mode[i], "padding_mode": t.padding_mode[i], "align_corners": t.align_corners[i],
                "scale_extent": t.scale_extent[i]}
    return {}


_deform_module: Any = None  # voxaug.deform, imported on first use (it imports this module)


def _is_deformation(t: Any) -> bool:
    global _deform_module
    if _deform_module is None:  # an import statement per call costs microseconds even when cached
        from . import deform

        _deform_module = deform
    return _deform_module._is_fusable_deformation(t)


def _lazy_candidate(t: Any) -> bool:
    """Whether `t` may join a run of compose_spatial: a fusable spatial step, or a deformation
    that closes the group before it (see _close_with_deformation). A TorchIO transform with
    include / exclude / keep, or a gate p < 1, runs as itself (its call applies them)."""
    if isinstance(_inner(t), _TorchIOArgs) and _inner(t)._runs_as_itself():
        return False
    return (isinstance(_inner(t), _FUSABLE_TYPES) and not getattr(_inner(t), "_needs_image", False)) \
        or _is_deformation(t)


def _close_with_deformation(t: Any, d: dict, is_dict: bool, chains: dict, chain: Callable,
                            patches: dict, following: Sequence[Any] = ()) -> Union[bool, int]:
    """Applies deformation `t` fused with the pending spatial group of each key it deforms: one
    resample_deformed launch per set of keys sharing the map and the field, out(x) =
    in(M_before A (x + u(x))) (M_before: the group's product map; A, u: the deformation's map and
    field on its output grid, planned on the group's virtual output). Returns False, having
    done nothing, when `t` must run as itself: no key has a pending group (nothing to fuse), a
    key stands for patches not yet cut, a pending group's (mode, padding, align_corners)
    differs from the deformation's for that key, or the call would raise (missing key, batch
    sizes that differ, the cases voxaug.deform._fusion_keys lists for RandomElasticDeformation).
    Keys the deformation does not touch keep their pending groups.

    Keys that stand for patches not yet cut (a crop sampler with ``as_batch`` before: `patches`)
    are gathered from the full volumes: crop, pending steps and deformation as one launch
    (resample_deformed with the crops' starts), the field planned on the patch grid as the
    call on the cut patches would; except for TorchIO's RandomElasticDeformation, which runs
    on the cut patches (its call pads beyond the window, see voxaug.deform).

    Flips and crops right after a B-spline deformation (`following`: Flip(d), RandFlip(d), RandAxisFlip(d),
    SpatialCrop(d), CenterSpatialCrop(d) on exactly the deformed keys, plain tensors) fold into
    the same launch (_fold_after): out(y) = D(F y) = in(M F (y + S u(F y))), F the steps' map
    (signs S, integer offset c), i.e. the map times F, the control index scale * S y +
    (scale * c + offset) per sample, and the flipped components of the control points negated.
    Returns the number of folded steps (0 or more), or False, having done nothing, as above.

    Equal to the steps run one by one up to interpolation (one gather instead of two; after
    exact steps with nearest sampling, equal but where a sample point lies within float32
    rounding of a voxel boundary), except where the step-by-step result reads padding: outside
    a SpatialCrop's window or a patch the fused gather reads the real voxels (as the other
    fused crops do). Draws: the deformation draws once, as
    its call, after the steps before it drew theirs. A tracked MetaTensor gets the record the
    group writes without the deformation (the deformations write none: they are not
    invertible) and the group's affine."""
    from . import deform

    keys = deform._fusion_keys(t, d, is_dict, chains)

    def source(k):  # the _PatchSource a placeholder stands for, or None
        return patches.get(id(d[k])) if isinstance(d[k], torch.Tensor) else None

    if not keys:
        return False
    if not any((k in chains and chains[k].steps) or source(k) is not None for k, _ in keys) and \
            not _folds_first(following, t, keys, d, is_dict):
        return False  # nothing before it and nothing after it to fuse: the call itself
    for k, opts in keys:
        if source(k) is not None and isinstance(t, deform.RandomElasticDeformation):
            return False
        ch = chains.get(k)
        if ch is not None and ch.steps and ch.mode_key not in (None, (opts.mode, opts.padding, False)):
            return False
    entries = []
    for k, _ in keys:
        ch = chain(k)
        src = source(k)
        where = src.volume.device if src is not None else \
            d[k].device if isinstance(d[k], torch.Tensor) else torch.device("cpu")
        entries.append((k, ch.n, ch.size, where, ch.affine))  # the affine: RandomElasticDeformation's spacing
    if len({e[1] for e in entries}) != 1:
        return False  # the transform raises its own error
    plans = deform._fused_plans(t, entries)
    # (plan, maps, centres of the patches or None, [(key, x, restore, finish, opts, patch source)])
    launches: list[tuple[Any, torch.Tensor, Any, list]] = []
    for k, opts in keys:
        src = source(k)
        ch = chains.pop(k)
        if ch.steps:
            _, x, restore, geom, _, finish = ch.job(k, d[k])
            before = _square(geom.mats)
        else:
            x, restore = _as_batch(d[k])
            before, finish = None, (lambda out: out)
        plan = plans[k]
        maps = plan.mats if before is None else (before @ _square(plan.mats))[:, :3].contiguous()
        centers = None if src is None else src.centers
        member = (k, x, restore, finish, opts, src)
        for p, m, c, members in launches:
            if p is plan and c is centers and torch.equal(m, maps):
                members.append(member)
                break
        else:
            launches.append((plan, maps, centers, [member]))
    folded = 0
    if following and len({id(plan) for plan, _, _, _ in launches}) == 1:
        fold = _fold_after(following, [k for k, _ in keys], d, is_dict, launches[0][0])
        if fold is not None:
            folded, plan, flip_map = fold
            launches = [(plan, (_square(maps) @ flip_map)[:, :3].contiguous(), centers, members)
                        for _, maps, centers, members in launches]
    for plan, maps, centers, members in launches:
        opts = [m[4] for m in members]
        if centers is None:
            outs = deform._fused_launch([m[1] for m in members], maps, plan, opts)
        else:  # the patches' crops, the steps and the deformation: one gather from the full volumes
            srcs = [m[5] for m in members]
            outs = deform._fused_launch(_patch_volumes(srcs, opts), maps, plan, opts, _patch_starts(srcs[0]))
        for (k, _, restore, finish, _, _), out in zip(members, outs):
            d[k] = finish(restore(out))
    return folded


_FOLDABLE_AFTER_DEFORMATION: tuple = ()  # set below: Flip, RandFlip, RandAxisFlip, SpatialCrop (CenterSpatialCrop)


def _folds_first(following: Sequence[Any], t: Any, keys: list, d: dict, is_dict: bool) -> bool:
    """Whether _fold_after will fold the first of `following` after deformation `t` (checked
    before `t` draws): a B-spline deformation (Rand3DElastic(d) field 'fast', TorchIO's), plain
    tensors, a flip / crop on exactly the deformed keys next."""
    from . import deform

    inner = t.transform if isinstance(t, deform._DeformDict) else t
    bspline = isinstance(inner, deform.RandomElasticDeformation) or \
        (isinstance(inner, deform.Rand3DElastic) and inner.field == "fast")
    if not following or not bspline:
        return False
    names = [k for k, _ in keys]
    return _plain_tensors(d, names) and _folds(following[0], names, d, is_dict)


def _plain_tensors(d: dict, keys: list) -> bool:
    return all(isinstance(d[k], torch.Tensor) and not _is_meta_tensor(d[k]) for k in keys)


def _folds(t: Any, keys: list, d: dict, is_dict: bool) -> bool:
    """Whether step `t` may fold into the launch of a deformation of exactly `keys`."""
    return (_is_dict_transform(t) == is_dict and isinstance(_inner(t), _FOLDABLE_AFTER_DEFORMATION)
            and not getattr(_inner(t), "_needs_image", False)
            and (not is_dict or (list(t.keys) == keys and all(k in d for k in t.keys))))


def _fold_after(following: Sequence[Any], keys: list, d: dict, is_dict: bool, plan: Any) -> Optional[tuple]:
    """(number of steps, plan of the folded launch, (N, 4, 4) map F of those steps) for the flips
    and crops at the start of `following` that act on exactly the deformed `keys` (plain
    tensors), planned on the deformation's output grid (their draws made as their calls make
    them); None when none folds. B-spline fields only (a dense or separable field would have to
    be rewritten)."""
    if plan.kind != ops.BSPLINE_FIELD or not _plain_tensors(d, keys):
        return None
    n = int(plan.mats.shape[0])
    size = tuple(plan.out_size)
    total, count = None, 0
    for t in following:
        if not _folds(t, keys, d, is_dict):
            break
        tr = _inner(t)
        # the step on a stand-in of the deformation's output (shape only)
        ch = _LazyChain(torch.empty((n, 1) + size, device="meta"))
        params = tr._params_for(n, True) if isinstance(tr, _RandomSpatial) else None
        planned = _plan_lazy(tr, ch, {}, params)
        if planned is None:
            break
        step = planned[0]
        m = step.mats
        lin = m[:, :3, :3]
        if not bool((lin == torch.diag_embed(torch.diagonal(lin, dim1=1, dim2=2))).all()):
            break  # not a sign flip (defensive: the foldable types are)
        total = m if total is None else total @ m
        size = tuple(step.out_size)
        count += 1
    if not count:
        return None
    signs = torch.diagonal(total[:, :3, :3], dim1=1, dim2=2)  # (N, 3) +-1
    shift = total[:, :3, 3]
    if plan.field_map is not None:
        fm = plan.field_map.to(torch.float64).cpu()
        scale, offset = fm[:, :3], fm[:, 3:]
    else:
        scale = torch.tensor(plan.scale, dtype=torch.float64).expand(n, 3)
        offset = torch.tensor(plan.offset, dtype=torch.float64).expand(n, 3)
    field_map = torch.cat([scale * signs, scale * shift + offset], 1).contiguous()
    neg = signs.to(plan.field.dtype).reshape(n, 3, 1, 1, 1)
    field = plan.field * _host_to(neg, plan.field.device) if bool((signs < 0).any()) else plan.field
    folded = dataclasses.replace(plan, field=field, field_map=field_map, out_size=size)
    return count, folded, total


def compose_spatial(transforms: Sequence[Any], data: Any, owner: Any = None,
                    patches: Optional[dict] = None, post: Optional[dict] = None) -> Any:
    """Applies a run of spatial transforms with consecutive fusable ones as one resample launch
    per group (per group of keys sharing the map, for dictionaries). Random transforms draw
    exactly as when called one by one. On tracked MetaTensors a group of one step records as
    that transform; a fused group writes one record of `owner` (the Compose; its inverse undoes
    the group in one launch), listing the steps in extra_info["transforms"].

    `patches` (id(placeholder) -> _PatchSource): entries of `data` that are meta-device
    placeholders for patches not yet cut (a crop sampler's as_batch output); the first group of
    steps on them gathers from the full volumes, and what no step touched is cut at the end.
    `post` (see _run): pointwise steps after the run for one placeholder's key, fused into the
    last gather when that gather reads the placeholder's volume; post["done"] says whether."""
    is_dict = isinstance(data, collections.abc.Mapping)  # typing.Mapping's check costs more per call
    d = dict(data) if is_dict else {None: data}
    chains: dict[Any, _LazyChain] = {}
    patches = patches or {}
    # keys whose patches stand for one (C, D, H, W) volume's crop (RandSpatialCrop(d)): 4-D again at the end
    unbatched = [k for k, v in d.items() if isinstance(v, torch.Tensor) and id(v) in patches
                 and patches[id(v)].unbatched]

    def materialize():
        for key, v in d.items():
            if isinstance(v, torch.Tensor) and id(v) in patches:
                d[key] = patches[id(v)].extract()

    def flush(last: bool = False):
        jobs, products = [], {}
        for key, ch in chains.items():
            if len(ch.steps) == 1 and ch.steps[0].alone is not None and id(d[key]) not in patches:
                d[key] = ch.run_alone(d[key])  # nothing to fuse with: exactly the step's own call
            elif ch.steps:
                jobs.append(ch.job(key, d[key], products))
        chains.clear()
        _run_grouped(d, jobs, patches, post if last else None)

    def chain(key):
        if key not in chains:
            chains[key] = _LazyChain(d[key])
            chains[key].owner = owner
        return chains[key]

    def direct(t):
        flush()
        materialize()
        out = t(d if is_dict else d[None])
        if is_dict:
            d.clear()
            d.update(out)
        else:
            d[None] = out

    transforms = list(transforms)
    at = -1
    while at + 1 < len(transforms):
        at += 1
        t = transforms[at]
        if _is_deformation(t):
            folded = _close_with_deformation(t, d, is_dict, chains, chain, patches, transforms[at + 1:])
            if folded is False:
                direct(t)
            else:
                at += folded  # flips / crops after the deformation, folded into its launch
            continue
        if is_dict != _is_dict_transform(t) or not _lazy_candidate(t):
            direct(t)
            continue
        if is_dict:
            tr = _inner(t)
            keys = []
            for i, key in enumerate(t.keys):
                if key not in d:
                    if not t.allow_missing_keys:
                        keys = None  # let the transform raise its KeyError
                        break
                    continue
                keys.append((key, _key_options(t, i)))
        else:
            tr, keys = t, [(None, {})]
        if keys is None or (not is_dict and isinstance(tr, Affine) and not tr.image_only):
            direct(t)
            continue
        if not keys:
            continue
        params = None
        if isinstance(tr, _RandomSpatial):
            sizes = {chain(k).n for k, _ in keys}
            if len(sizes) != 1:
                direct(t)  # raises the transform's own error
                continue
            params = tr._params_for(sizes.pop(), True)
        if isinstance(t, Spacingd) and t.ensure_same_shape:
            planned = _plan_spacingd(t, keys, chain)
        else:
            memo: dict = {}
            planned = [(k, _plan_lazy(tr, chain(k), over, params, t, memo)) for k, over in keys]
        if any(p is None for _, p in planned):
            if params is None:
                direct(t)
            else:  # e.g. RandZoom 'area': runs as itself with the draw just made (the same draws)
                with tr._replaying(params):
                    direct(t)
            continue
        if any(not chain(k).compatible(step) for k, (step, _) in planned):
            flush()  # the plans stay valid: the flushed tensors are what they were planned on
        for k, (step, new_affine) in planned:
            chain(k).push(step, new_affine)
    flush(last=True)
    materialize()
    for k in unbatched:
        if isinstance(d.get(k), torch.Tensor) and d[k].dim() == 5 and d[k].shape[0] == 1:
            d[k] = d[k].squeeze(0)
    return d if is_dict else d[None]


def _plan_spacingd(t: Any, keys: list, chain: Callable) -> list:
    """Spacingd's ensure_same_shape on the chains' virtual tensors: a key with the first key's
    shape and pixdim (within 1e-3) gets the first key's output shape, as Spacingd.__call__."""
    planned, first = [], None
    for k, over in keys:
        ch = chain(k)
        if first is not None and ch.affine is not None and first[0] is not None:
            src = _one_affine(ch.affine, "img.affine")
            if np.allclose(first[1], ch.size) and np.allclose(first[2], _spacing_of(src), atol=1e-3):
                over = dict(over, output_spatial_shape=first[0])
        plan = _plan_lazy(t.spacing_transform, ch, over, None, t)
        planned.append((k, plan))
        if first is None and ch.affine is not None and plan is not None:
            first = (plan[0].out_size, ch.size, _spacing_of(_one_affine(ch.affine, "img.affine")))
    return planned


def _fused_record(img: Any, compose: Any, t: Any) -> Optional[dict]:
    """The last record of `img` when it is a fused group of `compose` ending with `t`."""
    if not _is_meta_tensor(img) or not img.applied_operations:
        return None
    rec = img.applied_operations[-1]
    if not isinstance(rec, Mapping) or rec.get(_ID) != id(compose) or not isinstance(rec.get(_EXTRA), Mapping):
        return None
    members = rec[_EXTRA].get("transforms")
    return rec if members and members[-1][_ID] == id(t) else None


def inverse_compose(compose: Any, data: Any) -> Any:
    """:meth:`voxaug.transforms.Compose.inverse`: undoes `compose.transforms` in reverse order.
    Transforms without an ``inverse`` (intensity) are skipped, as MONAI skips non-invertible
    ones. A fused group (one record of the Compose listing its steps) is undone in one
    launch with the inverted product map; its steps are then skipped."""
    is_dict = isinstance(data, Mapping)
    d = dict(data) if is_dict else {None: data}
    pending: dict = {}  # key -> ids of the steps of an undone fused group still to skip
    for t in reversed(list(compose.transforms)):
        if not callable(getattr(t, "inverse", None)):
            continue
        if is_dict and not isinstance(getattr(t, "keys", None), list):  # e.g. a nested Compose
            d = dict(t.inverse(d))
            continue
        keys, own, jobs = (t.keys if is_dict else [None]), [], []
        for key in keys:
            if key not in d:
                if getattr(t, "allow_missing_keys", False):
                    continue
                raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")
            skip = pending.get(key)
            if skip:
                if skip[-1] != id(t):
                    raise RuntimeError(f"Compose.inverse: the fused record of {'img' if key is None else key!r} "
                                       f"lists a step (id {skip[-1]}) where the Compose has {type(t).__name__} "
                                       f"(id {id(t)}); was the data made by this Compose?")
                skip.pop()
                continue
            rec = _fused_record(d[key], compose, t)
            if rec is None:
                own.append(key)
                continue
            where = "img" if key is None else f"data[{key!r}]"
            jobs.append(_inverse_job(key, d[key], rec, where))
            pending[key] = [m[_ID] for m in rec[_EXTRA]["transforms"][:-1]]
        _run_grouped(d, jobs)
        if not own:
            continue
        if not is_dict:
            d[None] = t.inverse(d[None])
        elif isinstance(t, (_SpatialDict, Spacingd, Orientationd)):
            d = _inverse_dict(t, d, own, False)
        else:
            d = dict(t.inverse(d))
    left = {k: v for k, v in pending.items() if v}
    if left:
        raise RuntimeError(f"Compose.inverse: fused records still list steps not in this Compose: {left}")
    return d if is_dict else d[None]


_EXACT_TYPES = (Flip, RandFlip, RandAxisFlip, RandomFlip, Rotate90, RandRotate90, SpatialCrop)
_FOLDABLE_AFTER_DEFORMATION = (Flip, RandFlip, RandAxisFlip, RandomFlip, SpatialCrop)
_FUSABLE_TYPES = (Flip, RandFlip, RandAxisFlip, RandomFlip, Rotate90, RandRotate90, SpatialCrop, Affine, RandAffine, Rotate, RandRotate,
                  Zoom, RandZoom, Resize, Spacing, Orientation)
