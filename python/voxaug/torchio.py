"""TorchIO's transform names in one namespace: ``import voxaug.torchio as vtio`` and write
``vtio.RandomAffine(...)``, ``vtio.Affine(...)``, ``vtio.Blur(...)`` as with TorchIO. The
classes are voxaug's (batched, on the device, per-sample draws from Philox) and live in their
families' modules; this module gathers them and adds the TorchIO transforms whose names MONAI's
already take in those modules (:mod:`voxaug.spatial`'s ``Affine``, ``Flip`` and ``Resize`` are
MONAI's): :class:`Affine`, :class:`Flip`, :class:`Resize`, :class:`AffineElasticDeformation`,
and TorchIO's plumbing :class:`CopyAffine`, :class:`ToReferenceSpace`, :class:`Lambda`,
:class:`To`; and TorchIO's patch samplers and GridAggregator (:mod:`voxaug.crop`).

Inputs are tensors, not TorchIO's Subject / Image objects: an image is a (C, X, Y, Z) tensor or
a (N, C, X, Y, Z) batch (a MONAI MetaTensor carries the affine), and a Subject is a dictionary
of them. In a dictionary the entries under ``label_keys`` are the LabelMaps: spatial transforms
resample them with the label interpolation, intensity transforms leave them alone and transform
each other image with its own draws (as TorchIO draws per image); a ``masking_method`` string
names an entry. Every transform here takes TorchIO's ``include`` / ``exclude`` / ``keep``
(``transforms._TorchIOArgs``), and the intensity transforms meet ``p`` once per subject
(``transforms._Subject``). TorchIO itself is not needed (or imported) here.
"""
from __future__ import annotations

import collections.abc
import warnings
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from .crop import GridAggregator, GridSampler, LabelSampler, UniformSampler, WeightedSampler  # noqa: F401
from .deform import (ElasticDeformation, RandomAffineElasticDeformation, RandomElasticDeformation,  # noqa: F401
                     _itk_gather, _tensor_batches, _TORCHIO_INTERP)
from .degrade import RandomAnisotropy, RandomSwap, Swap  # noqa: F401
from .filter import Blur, RandomBlur  # noqa: F401
from .kspace import Ghosting, Motion, RandomGhosting, RandomMotion, RandomSpike, Spike  # noqa: F401
from .labels import (Contour, EnsureShapeMultiple, KeepLargestComponent, LabelsToImage, Mask,  # noqa: F401
                     OneHot, RandomLabelsToImage, RemapLabels, RemoveLabels, SequentialLabels)
from .spatial import (Crop, CropOrPad, Pad, RandomAffine, RandomFlip, Resample, ToCanonical,  # noqa: F401
                      ToOrientation, Transpose, torchio_affine_index_map, torchio_reference_grid)
from .stats import HistogramStandardization, RescaleIntensity, ZNormalization  # noqa: F401
from .transforms import (_TorchIOArgs, BiasField, Clamp, Compose, Gamma, Noise, OneOf, RandomBiasField,  # noqa: F401
                         RandomGamma, RandomNoise)
from .transforms import _is_meta_tensor

__all__ = [
    # spatial
    "Affine", "RandomAffine", "Flip", "RandomFlip", "Resize", "Resample", "ToCanonical", "ToOrientation", "Transpose",
    "Pad", "Crop", "CropOrPad", "EnsureShapeMultiple", "CopyAffine", "ToReferenceSpace",
    "ElasticDeformation", "RandomElasticDeformation", "AffineElasticDeformation", "RandomAffineElasticDeformation",
    # intensity
    "Noise", "RandomNoise", "BiasField", "RandomBiasField", "Gamma", "RandomGamma", "Blur", "RandomBlur", "Clamp",
    "ZNormalization", "RescaleIntensity", "HistogramStandardization",
    "Ghosting", "RandomGhosting", "Spike", "RandomSpike", "Motion", "RandomMotion", "Swap", "RandomSwap",
    "RandomAnisotropy", "LabelsToImage", "RandomLabelsToImage",
    # labels
    "OneHot", "RemapLabels", "RemoveLabels", "SequentialLabels", "Mask", "KeepLargestComponent", "Contour",
    # composition and plumbing
    "Compose", "OneOf", "Lambda", "To",
    # patch-based training and inference (voxaug.crop; the queue is voxaug.crop.PatchQueue)
    "UniformSampler", "WeightedSampler", "LabelSampler", "GridSampler", "GridAggregator",
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
                 label_keys: Sequence[str] = (), affine: Any = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(center=center, default_pad_value=default_pad_value, default_pad_label=default_pad_label,
                         image_interpolation=image_interpolation, label_interpolation=label_interpolation,
                         label_keys=label_keys, affine=affine)
        self.fixed_scales = _triplet(scales, "scales")
        if not all(s > 0 for s in self.fixed_scales):
            raise ValueError(f"scales must be positive, got {scales!r}")
        self.fixed_degrees = _triplet(degrees, "degrees")
        self.fixed_translation = _triplet(translation, "translation")
        self.check_shape = bool(check_shape)  # voxaug always needs one spatial shape per call
        self._filter_args(include, exclude, keep)
        self.set_random_state(0)  # nothing is drawn: torch's generator stays TorchIO's (its p gate)

    def _draw(self, n: int):
        rows = lambda v: np.tile(np.asarray(v, dtype=np.float64), (n, 1))  # noqa: E731
        return np.ones(n, dtype=bool), rows(self.fixed_scales), rows(self.fixed_degrees), rows(self.fixed_translation)


class Flip(RandomFlip):
    """TorchIO Flip(axes=0): reverses the given spatial axes (indices, or anatomical names such as
    'LR' / 'Left' resolved through a MetaTensor's affine, as TorchIO), a bit-exact copy;
    :class:`RandomFlip` with ``flip_probability=1``."""

    def __init__(self, axes: Union[int, str, Sequence[Union[int, str]]] = 0,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        super().__init__(axes=axes, flip_probability=1.0, p=1.0)
        self._filter_args(include, exclude, keep)
        self.set_random_state(0)  # nothing is drawn: torch's generator stays TorchIO's (its p gate)


class Resize(_TorchIOArgs):
    """TorchIO Resize(target_shape, image_interpolation='linear', label_interpolation='nearest'):
    :class:`Resample` to the spacing that fits the field of view into ``target_shape`` (-1 keeps
    an axis: spacing_out = shape_in / shape_out * spacing_in, the spacing of a MetaTensor's affine,
    of ``affine=``, else 1 mm), then -- when TorchIO's grid (floor(n s / s')) comes out a voxel
    off, with TorchIO's warning -- :class:`CropOrPad` to the target."""

    def __init__(self, target_shape: Union[int, Sequence[int]], image_interpolation: str = "linear",
                 label_interpolation: str = "nearest", label_keys: Sequence[str] = (), affine: Any = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        shape = [target_shape] * 3 if isinstance(target_shape, (int, np.integer)) else list(target_shape)
        if len(shape) != 3 or not all(isinstance(v, (int, np.integer)) and (v > 0 or v == -1) for v in shape):
            raise ValueError(f"target_shape must be an int or 3 ints, each > 0 or -1, got {target_shape!r}")
        self.target_shape = tuple(int(v) for v in shape)
        self.image_interpolation, self.label_interpolation = image_interpolation, label_interpolation
        self.label_keys, self.affine = tuple(label_keys), affine
        Resample(1.0, image_interpolation, label_interpolation)  # validates the interpolation names
        self._filter_args(include, exclude, keep)

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


class AffineElasticDeformation(_TorchIOArgs):
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
                 label_keys: Sequence[str] = (), affine: Any = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
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
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        batches = _tensor_batches(data, "AffineElasticDeformation")
        if not batches:
            return dict(data) if isinstance(data, collections.abc.Mapping) else data
        x, ra = batches[0][2], self._affine
        size = tuple(x.shape[2:])
        affine = ra._affine_of(batches[0][1])
        m = torchio_affine_index_map(ra.fixed_scales, ra.fixed_degrees, ra.fixed_translation, affine, size, ra.center)
        plan = self._elastic._plan(size, x.shape[0], x.device, affine, m)
        return _itk_gather(data, batches, plan, self.label_keys, _TORCHIO_INTERP[ra.image_interpolation],
                           _TORCHIO_INTERP[ra.label_interpolation],
                           lambda xin, label: torch.zeros((), dtype=xin.dtype, device=xin.device) if label
                           else ra._pad_values(xin))



def _images(data: Any) -> list:
    """[(key, tensor)] of the 4-D / 5-D tensors of a dictionary, or [(None, data)]."""
    if isinstance(data, collections.abc.Mapping):
        return [(k, v) for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)]
    return [(None, data)]


def _with_new_affine(v: torch.Tensor, affine: Any) -> torch.Tensor:
    """A MetaTensor sharing `v`'s data with `affine` (the caller's tensor keeps its own)."""
    w = v.view_as(v)
    w.affine = torch.as_tensor(np.asarray(affine), dtype=torch.float64)
    return w


class CopyAffine(_TorchIOArgs):
    """TorchIO CopyAffine(target): every other MetaTensor of the dictionary (TorchIO's Subject)
    gets the affine of ``data[target]`` (their data are shared, not copied); plain tensors have no
    affine to set and are kept. A missing target raises, as TorchIO."""

    def __init__(self, target: str,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(target, str):
            raise ValueError(f"Input target must be a string, but it has type {type(target)}")
        self.target = target
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            raise ValueError("CopyAffine needs a dictionary (TorchIO's Subject) holding the target image")
        if self.target not in data:
            raise RuntimeError(f'Target image "{self.target}" not found in subject')
        ref = data[self.target]
        if not _is_meta_tensor(ref):
            raise ValueError(f'the target image "{self.target}" must be a MetaTensor (it has no affine to copy)')
        affine = ref.affine.detach().cpu().numpy()
        out = dict(data)
        for k, v in _images(data):
            if k != self.target and _is_meta_tensor(v):
                out[k] = _with_new_affine(v, affine)
        return out


class ToReferenceSpace(_TorchIOArgs):
    """TorchIO ToReferenceSpace(reference): each image (an embedding, a feature map, a
    downsampled prediction) keeps its data and gets the affine that spans the reference's field
    of view on its own grid: TorchIO Resample's grid of the reference for the spacing
    ``spacing_ref * shape_ref / shape`` (:func:`voxaug.spatial.torchio_reference_grid`).
    ``reference``: a MetaTensor, or a (shape, affine) pair. A MetaTensor result carries the
    affine; for a plain tensor it is kept in ``last_affine``."""

    def __init__(self, reference: Any,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if _is_meta_tensor(reference):
            self.ref_shape = tuple(int(v) for v in reference.shape[-3:])
            self.ref_affine = np.asarray(reference.affine.detach().cpu(), dtype=np.float64)
        elif isinstance(reference, tuple) and len(reference) == 2:
            self.ref_shape = tuple(int(v) for v in reference[0])
            self.ref_affine = np.asarray(reference[1], dtype=np.float64)
        else:
            raise ValueError("reference must be a MetaTensor or a (shape, affine) pair")
        if len(self.ref_shape) != 3 or self.ref_affine.shape != (4, 4):
            raise ValueError(f"reference: a 3-D shape and a 4 x 4 affine, got {self.ref_shape} and "
                             f"{self.ref_affine.shape}")
        self.last_affine: Any = None
        self._filter_args(include, exclude, keep)

    def _affine_for(self, shape: Sequence[int]) -> np.ndarray:
        spacing = np.linalg.norm(self.ref_affine[:3, :3], axis=0)
        out_spacing = spacing * np.asarray(self.ref_shape, dtype=np.float64) / np.asarray(shape, dtype=np.float64)
        return torchio_reference_grid(self.ref_shape, self.ref_affine, out_spacing)[1]

    def __call__(self, data: Any) -> Any:
        out = dict(data) if isinstance(data, collections.abc.Mapping) else None
        for k, v in _images(data):
            affine = self._affine_for(v.shape[-3:])
            self.last_affine = affine
            w = _with_new_affine(v, affine) if _is_meta_tensor(v) else v
            if out is None:
                return w
            out[k] = w
        return out if out is not None else data


class Lambda(_TorchIOArgs):
    """TorchIO Lambda(function, types_to_apply=None): ``function(tensor)`` on each image -- a
    tensor, or the 4-D / 5-D tensors of a dictionary, filtered by ``types_to_apply``
    ('intensity' and / or 'label'; the entries under ``label_keys`` are labels). The result must
    be a tensor with the input's number of dimensions, as TorchIO checks."""

    def __init__(self, function: Any, types_to_apply: Any = None, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not callable(function):
            raise ValueError(f"The function must be callable, got {function!r}")
        if types_to_apply is not None and not set(types_to_apply) <= {"intensity", "label"}:
            raise ValueError(f'types_to_apply must hold "intensity" and / or "label", got {types_to_apply!r}')
        self.function, self.types_to_apply, self.label_keys = function, types_to_apply, set(label_keys)
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        out = dict(data) if isinstance(data, collections.abc.Mapping) else None
        for k, v in _images(data):
            kind = "label" if k in self.label_keys else "intensity"
            if self.types_to_apply is not None and kind not in self.types_to_apply:
                continue
            result = self.function(v)
            if not isinstance(result, torch.Tensor):
                raise ValueError(f"The returned value from the callable argument must be of type {torch.Tensor}, "
                                 f"not {type(result)}")
            if result.ndim != v.ndim:
                raise ValueError(f"The number of dimensions of the returned value must be {v.ndim}, not "
                                 f"{result.ndim}")
            if out is None:
                return result
            out[k] = result
        return out if out is not None else data


class To(_TorchIOArgs):
    """TorchIO To(target, to_kwargs=None), an intensity transform: ``tensor.to(target,
    **to_kwargs)`` (a dtype, a device or a device name) for a tensor, or for each intensity image
    of a dictionary (the entries under ``label_keys`` -- TorchIO's LabelMaps -- are kept)."""

    def __init__(self, target: Any, to_kwargs: Any = None, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(target, (str, torch.dtype, torch.device)):
            raise ValueError(f"target must be a str, torch.dtype or torch.device, got {target!r}")
        self.target, self.to_kwargs, self.label_keys = target, dict(to_kwargs or {}), set(label_keys)
        self._filter_args(include, exclude, keep)

    def __call__(self, data: Any) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            return data.to(self.target, **self.to_kwargs)
        out = dict(data)
        for k, v in _images(data):
            if k not in self.label_keys:
                out[k] = v.to(self.target, **self.to_kwargs)
        return out
