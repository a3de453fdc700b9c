"""TorchIO's transform names in one namespace: ``import voxaug.torchio as vtio`` and write
``vtio.RandomAffine(...)``, ``vtio.Affine(...)``, ``vtio.Blur(...)`` as with TorchIO. The
classes are voxaug's (batched, on the device, per-sample draws from Philox) and live in their
families' modules; this module gathers them and adds the TorchIO transforms whose names MONAI's
already take in those modules (:mod:`voxaug.spatial`'s ``Affine``, ``Flip`` and ``Resize`` are
MONAI's): :class:`Affine`, :class:`Flip`, :class:`Resize`, and :class:`AffineElasticDeformation`.

voxaug's transforms take a tensor ((C, X, Y, Z) or a (N, C, X, Y, Z) batch; a MONAI MetaTensor
carries the affine), not TorchIO's Subject / Image objects. The spatial ones also take a
dictionary of tensors for a Subject (the entries under ``label_keys`` are its LabelMaps); the
intensity ones take the image tensor itself (TorchIO applies them to a Subject's ScalarImages).
TorchIO itself is not needed (or imported) here.
"""
from __future__ import annotations

import collections.abc
import warnings
from typing import Any, Sequence, Union

import numpy as np
import torch

from . import deform as _deform
from . import spatial as _spatial
from .deform import (ElasticDeformation, RandomAffineElasticDeformation, RandomElasticDeformation,  # noqa: F401
                     _itk_gather, _Plan, _sitk_grid_to_index, _tensor_batches, _TORCHIO_INTERP, _warn_folding,
                     sitk_control_map)
from .degrade import RandomAnisotropy, RandomSwap, Swap  # noqa: F401
from .filter import Blur, RandomBlur  # noqa: F401
from .kspace import Ghosting, Motion, RandomGhosting, RandomMotion, RandomSpike, Spike  # noqa: F401
from .labels import (Contour, EnsureShapeMultiple, KeepLargestComponent, Mask, OneHot,  # noqa: F401
                     RandomLabelsToImage, RemapLabels, RemoveLabels, SequentialLabels)
from .spatial import (Crop, CropOrPad, Pad, RandomAffine, RandomFlip, Resample, ToCanonical,  # noqa: F401
                      ToOrientation, Transpose, torchio_affine_index_map)
from .stats import HistogramStandardization, RescaleIntensity, ZNormalization  # noqa: F401
from .transforms import (BiasField, Clamp, Compose, Gamma, Noise, OneOf, RandomBiasField,  # noqa: F401
                         RandomGamma, RandomNoise)
from .transforms import _host_to

__all__ = [
    # spatial
    "Affine", "RandomAffine", "Flip", "RandomFlip", "Resize", "Resample", "ToCanonical", "ToOrientation", "Transpose",
    "Pad", "Crop", "CropOrPad", "EnsureShapeMultiple",
    "ElasticDeformation", "RandomElasticDeformation", "AffineElasticDeformation", "RandomAffineElasticDeformation",
    # intensity
    "Noise", "RandomNoise", "BiasField", "RandomBiasField", "Gamma", "RandomGamma", "Blur", "RandomBlur", "Clamp",
    "ZNormalization", "RescaleIntensity", "HistogramStandardization",
    "Ghosting", "RandomGhosting", "Spike", "RandomSpike", "Motion", "RandomMotion", "Swap", "RandomSwap",
    "RandomAnisotropy", "RandomLabelsToImage",
    # labels
    "OneHot", "RemapLabels", "RemoveLabels", "SequentialLabels", "Mask", "KeepLargestComponent", "Contour",
    # composition
    "Compose", "OneOf",
]


def _triplet(value: Any, name: str) -> tuple[float, float, float]:
    v = [float(value)] * 3 if isinstance(value, (int, float, np.number)) and not isinstance(value, bool) \
        else [float(x) for x in value]
    if len(v) != 3 or not all(np.isfinite(v)):
        raise ValueError(f"{name} must be a number or 3 finite numbers, got {value!r}")
    return tuple(v)  # type: ignore[return-value]


class Affine(RandomAffine):
    """TorchIO Affine(scales, degrees, translation, center='image', default_pad_value='minimum',
    default_pad_label=0, image_interpolation='linear', label_interpolation='nearest'): the given
    scales, angles (degrees, RAS) and translation (mm, RAS) applied as TorchIO applies them with
    SimpleITK (:func:`voxaug.spatial.torchio_affine_index_map`), every sample of a batch alike, in
    one resample launch; pad values, ITK's edge rules, interpolators ('linear', 'nearest',
    'bspline') and label maps (``label_keys``) as :class:`RandomAffine`."""

    def __init__(self, scales: Any, degrees: Any, translation: Any, center: str = "image",
                 default_pad_value: Union[str, float] = "minimum", default_pad_label: float = 0,
                 image_interpolation: str = "linear", label_interpolation: str = "nearest", check_shape: bool = True,
                 label_keys: Sequence[str] = (), affine: Any = None):
        super().__init__(center=center, default_pad_value=default_pad_value, default_pad_label=default_pad_label,
                         image_interpolation=image_interpolation, label_interpolation=label_interpolation,
                         label_keys=label_keys, affine=affine)
        self.fixed_scales = _triplet(scales, "scales")
        if not all(s > 0 for s in self.fixed_scales):
            raise ValueError(f"scales must be positive, got {scales!r}")
        self.fixed_degrees = _triplet(degrees, "degrees")
        self.fixed_translation = _triplet(translation, "translation")
        self.check_shape = bool(check_shape)  # voxaug always needs one spatial shape per call

    def _draw(self, n: int):
        rows = lambda v: np.tile(np.asarray(v, dtype=np.float64), (n, 1))  # noqa: E731
        return np.ones(n, dtype=bool), rows(self.fixed_scales), rows(self.fixed_degrees), rows(self.fixed_translation)


class Flip(RandomFlip):
    """TorchIO Flip(axes=0): reverses the given spatial axes (indices, or anatomical names such as
    'LR' / 'Left' resolved through a MetaTensor's affine, as TorchIO), a bit-exact copy;
    :class:`RandomFlip` with ``flip_probability=1``."""

    def __init__(self, axes: Union[int, str, Sequence[Union[int, str]]] = 0):
        super().__init__(axes=axes, flip_probability=1.0, p=1.0)


class Resize:
    """TorchIO Resize(target_shape, image_interpolation='linear', label_interpolation='nearest'):
    :class:`Resample` to the spacing that fits the field of view into ``target_shape`` (-1 keeps
    an axis: spacing_out = shape_in / shape_out * spacing_in, the spacing of a MetaTensor's affine,
    of ``affine=``, else 1 mm), then -- when TorchIO's grid (floor(n s / s')) comes out a voxel
    off, with TorchIO's warning -- :class:`CropOrPad` to the target."""

    def __init__(self, target_shape: Union[int, Sequence[int]], image_interpolation: str = "linear",
                 label_interpolation: str = "nearest", label_keys: Sequence[str] = (), affine: Any = None):
        shape = [target_shape] * 3 if isinstance(target_shape, (int, np.integer)) else list(target_shape)
        if len(shape) != 3 or not all(isinstance(v, (int, np.integer)) and (v > 0 or v == -1) for v in shape):
            raise ValueError(f"target_shape must be an int or 3 ints, each > 0 or -1, got {target_shape!r}")
        self.target_shape = tuple(int(v) for v in shape)
        self.image_interpolation, self.label_interpolation = image_interpolation, label_interpolation
        self.label_keys, self.affine = tuple(label_keys), affine
        Resample(1.0, image_interpolation, label_interpolation)  # validates the interpolation names

    def __call__(self, data: Any) -> Any:
        first = next((v for v in data.values() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)), None) \
            if isinstance(data, collections.abc.Mapping) else data
        if first is None:
            return dict(data)
        shape_in = np.array(first.shape[-3:], dtype=np.float64)
        shape_out = np.array([s if t == -1 else t for s, t in zip(first.shape[-3:], self.target_shape)],
                             dtype=np.float64)
        resample = Resample(1.0, self.image_interpolation, self.label_interpolation, label_keys=self.label_keys,
                            affine=self.affine)
        spacing_in = np.linalg.norm(resample._affine_of(first)[:3, :3], axis=0)
        resample.spacing = tuple(float(v) for v in shape_in / shape_out * spacing_in)
        out = resample(data)
        got = next((v for v in out.values() if isinstance(v, torch.Tensor) and v.dim() in (4, 5))) \
            if isinstance(out, collections.abc.Mapping) else out
        target = tuple(int(v) for v in shape_out)
        if tuple(got.shape[-3:]) != target:
            warnings.warn(f"Output shape {tuple(got.shape[-3:])} != target shape {target}. Fixing with CropOrPad",
                          RuntimeWarning, stacklevel=2)
            out = CropOrPad(target)(out)
        return out


class AffineElasticDeformation:
    """TorchIO AffineElasticDeformation(affine_first, affine_params, elastic_params): an
    :class:`Affine` (``affine_params``: its arguments) and an :class:`ElasticDeformation`
    (``elastic_params``: control_points, max_displacement; its interpolation arguments play no
    part, as in TorchIO) in one resampling: out(x) = in(M (x + u(x))), M the affine's index map, u
    the B-spline displacement on the image's grid (TorchIO's order for ``affine_first=True``), the
    whole batch and every tensor of a dictionary in one gather. As TorchIO: intensity images use
    the affine's image_interpolation and default_pad_value (float32 out), label maps
    (``label_keys``) its label_interpolation and 0 beyond ITK's buffer; TorchIO's folding warning.
    ``affine_first=False`` is refused (see :class:`RandomAffineElasticDeformation`)."""

    def __init__(self, affine_first: bool, affine_params: dict, elastic_params: dict,
                 label_keys: Sequence[str] = (), affine: Any = None):
        if not affine_first:
            raise ValueError("affine_first=False (the elastic field evaluated at the affine-mapped point) is not "
                             "supported: voxaug's gather evaluates the field on the output grid")
        self.affine_first = True
        self.affine_params, self.elastic_params = dict(affine_params), dict(elastic_params)
        self.label_keys = set(label_keys)
        self._affine = Affine(**self.affine_params, label_keys=label_keys, affine=affine)
        ep = {k: v for k, v in self.elastic_params.items() if k in ("control_points", "max_displacement")}
        unknown = set(self.elastic_params) - {"control_points", "max_displacement", "image_interpolation",
                                              "label_interpolation"}
        if unknown:
            raise ValueError(f"elastic_params: unknown arguments {sorted(unknown)}")
        self._elastic = ElasticDeformation(**ep, affine=affine)

    def __call__(self, data: Any) -> Any:
        batches = _tensor_batches(data, "AffineElasticDeformation")
        if not batches:
            return dict(data) if isinstance(data, collections.abc.Mapping) else data
        n, size, device = batches[0][2].shape[0], tuple(batches[0][2].shape[2:]), batches[0][2].device
        ra, el = self._affine, self._elastic
        affine = ra._affine_of(batches[0][1])
        spacing = tuple(float(v) for v in np.linalg.norm(affine[:3, :3], axis=0))
        _warn_folding(el.max_displacement, size, spacing, el.num_control_points)
        cp = el.control_points.copy()
        if size[2] == 1:
            cp[..., 2] = 0
        field, k = _sitk_grid_to_index(cp, affine)
        field = _host_to(torch.from_numpy(field.astype(np.float32))[None].expand(n, *field.shape).contiguous(),
                         device)
        sc, off = sitk_control_map(size, k)
        m = torchio_affine_index_map(ra.fixed_scales, ra.fixed_degrees, ra.fixed_translation, affine, size, ra.center)
        plan = _Plan(_spatial._stack([m] * n, 3), size, field, _deform.ops.BSPLINE_FIELD, sc, off)
        return _itk_gather(data, batches, plan, self.label_keys, _TORCHIO_INTERP[ra.image_interpolation],
                           _TORCHIO_INTERP[ra.label_interpolation],
                           lambda xin, label: torch.zeros((), dtype=xin.dtype, device=xin.device) if label
                           else ra._pad_values(xin))

