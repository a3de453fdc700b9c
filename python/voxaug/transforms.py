"""MONAI-style transforms backed by ``torch.ops.voxaug`` (array and dictionary forms).

Inputs: a (C, D, H, W) sample or an (N, C, D, H, W) batch, as a CPU or CUDA tensor, a MONAI
MetaTensor (metadata is carried over to the result) or a numpy array (returned as a tensor).
A batch is transformed in one launch with independent random parameters per sample.

Randomness: each random transform draws a 64-bit seed per call from its own generator
(``seed=`` / :meth:`set_random_state`) or, by default, from torch's global CPU generator, so
``torch.manual_seed`` makes a pipeline reproducible. All random numbers are then made on the
data's device by Philox keyed by (seed, sample, element): a sample's result does not depend
on the batch it is in or on the device. Nothing syncs the host.

Differences from MONAI, by design: the arithmetic is float32 for every input dtype (MONAI
computes float16 inputs in float16); random draws come from Philox, not numpy; a batch gets a
per-sample gate ``u < prob`` instead of one gate per call. Results are new tensors: MONAI's
StdShiftIntensity writes into its (float32) input, voxaug never mutates the input.
"""
from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import copy
import dataclasses
import functools
import inspect
import math
import numbers
import warnings
from typing import Any, Callable, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .ops import Step

__all__ = [
    "Compose", "OneOf", "SomeOf", "RandomOrder", "ScaleIntensityRange", "ScaleIntensityRanged",
    "ShiftIntensity", "ShiftIntensityd",
    "RandShiftIntensity", "RandShiftIntensityd", "ScaleIntensity", "ScaleIntensityd",
    "RandScaleIntensity", "RandScaleIntensityd", "RandGaussianNoise", "RandGaussianNoised",
    "RandRicianNoise", "RandRicianNoised", "RandBiasField", "RandBiasFieldd", "BiasField", "RandomBiasField",
    "AdjustContrast", "AdjustContrastd", "RandAdjustContrast", "RandAdjustContrastd", "Gamma", "RandomGamma",
    "Noise", "RandomNoise", "StdShiftIntensity", "StdShiftIntensityd", "RandStdShiftIntensity", "RandStdShiftIntensityd",
    "ScaleIntensityFixedMean", "ScaleIntensityFixedMeand", "RandScaleIntensityFixedMean",
    "RandScaleIntensityFixedMeand", "RandHistogramShift", "RandHistogramShiftd", "ThresholdIntensity",
    "ThresholdIntensityd", "MaskIntensity", "MaskIntensityd", "Clamp", "AddCoordinateChannels",
    "AddCoordinateChannelsd",
]

DtypeLike = Union[torch.dtype, np.dtype, type, str, None]


def _torch_dtype(dtype: DtypeLike) -> Optional[torch.dtype]:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    mapping = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
               np.dtype(np.float16): torch.float16}
    try:
        return mapping[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise ValueError(f"dtype must be float32, float16, bfloat16 or float64, got {dtype!r}") from None


def _is_meta_tensor(x: Any) -> bool:
    return type(x).__name__ == "MetaTensor" and type(x).__module__.startswith("monai")


def _as_batch(img: Any) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
    """Plain 5-D tensor view of `img` and a function that gives the result `img`'s form."""
    src = img
    if isinstance(img, np.ndarray):
        img = torch.as_tensor(img)
    if not isinstance(img, torch.Tensor):
        raise TypeError(f"img must be a torch.Tensor, MetaTensor or numpy array, got {type(src).__name__}")
    x = img.as_tensor() if _is_meta_tensor(img) else img
    if x.dim() not in (4, 5):
        raise ValueError(f"img must be (C, D, H, W) or (N, C, D, H, W), got {x.dim()}-D with shape {tuple(x.shape)}")
    batched = x.dim() == 5
    x5 = x if batched else x.unsqueeze(0)

    def restore(out: torch.Tensor) -> Any:
        out = out if batched else out.squeeze(0)
        if _is_meta_tensor(src):
            from monai.data import MetaTensor  # only when the caller passed one

            return MetaTensor(out, meta=dict(src.meta), applied_operations=list(src.applied_operations))
        return out

    return x5, restore


class _Randomizable:
    """Per-transform seed source: its own torch.Generator, or torch's global CPU generator."""

    def __init__(self, seed: Optional[int] = None):
        self._generator: Optional[torch.Generator] = None
        if seed is not None:
            self.set_random_state(seed)

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        if generator is not None:
            self._generator = generator
        elif seed is not None:
            self._generator = torch.Generator(device="cpu")
            self._generator.manual_seed(int(seed) & ((1 << 64) - 1))
        else:
            self._generator = None
        return self

    def _next_seed(self) -> int:
        replay = getattr(self, "_replay_seed", None)
        if replay is not None:
            return replay
        # Two 32-bit draws from a CPU generator: no device involved, no sync.
        hi, lo = torch.randint(0, 1 << 32, (2,), dtype=torch.int64, generator=self._generator).tolist()
        self._last_seed = (hi << 32) | lo
        return self._last_seed

    @contextlib.contextmanager
    def _reusing_seed(self, randomize: bool):
        """MONAI's ``randomize=False`` for a transform that draws one seed per call: the call
        replays the last call's draw (its seed: the same gates and values per sample)."""
        if randomize:
            yield
            return
        if getattr(self, "_last_seed", None) is None:
            raise ValueError("randomize=False replays the last random draw, but this transform has not drawn yet")
        self._replay_seed = self._last_seed
        try:
            yield
        finally:
            self._replay_seed = None


def _present_keys(d: Mapping, keys: Sequence, allow_missing_keys: bool):
    """(index, key) of each of `keys` present in `d`, in order; a missing key raises KeyError
    unless allow_missing_keys (MONAI's key_iterator)."""
    for i, key in enumerate(keys):
        if key in d:
            yield i, key
        elif not allow_missing_keys:
            raise KeyError(f"key {key!r} is not in the data and allow_missing_keys is False")


def _check_prob(prob: float) -> float:
    prob = float(prob)
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must be in [0, 1], got {prob}")
    return prob


def _range(value: Union[float, Sequence[float]], name: str) -> tuple[float, float]:
    """(low, high) of a range argument: a pair in either order, or a number v meaning (-v, v).

    Both ends must be finite: min / max alone would let a NaN through (min(0, nan) is 0, so
    (0, nan) became (0, 0)), and an infinite end makes every draw inf or NaN."""
    if isinstance(value, numbers.Real):
        pair: Sequence[Any] = (-value, value)
    else:
        try:
            pair = tuple(value)
        except TypeError:
            pair = ()
        if len(pair) != 2:
            raise ValueError(f"{name} should be a number or pair of numbers, got {value!r}.")
    try:
        lo, hi = float(pair[0]), float(pair[1])
    except (TypeError, ValueError):
        raise ValueError(f"{name} should be a number or pair of numbers, got {value!r}.") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} must be a finite number or a pair of finite numbers, got {value!r}")
    return (min(lo, hi), max(lo, hi))


class _Pointwise:
    """A transform made of pointwise steps; consecutive ones fuse inside :class:`Compose`."""

    dtype: Optional[torch.dtype] = None
    _single_pass = True  # False: the transform needs more than its steps (never fused)
    # On floating input whose dtype the steps keep, the result is the chain's output as is
    # (_finish returns it): Compose may then run the steps in place on a buffer it owns. A
    # subclass whose _finish does more on such input sets this False.
    _float_finish_is_identity = True

    def _plan(self, x: torch.Tensor) -> list[Step]:
        raise NotImplementedError

    def _finish(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out

    def __call__(self, img: Any) -> Any:
        return self.apply(img)

    def apply(self, img: Any, steps: Optional[list[Step]] = None) -> Any:
        """Transforms `img`; `steps` replays an earlier plan (the same random draw)."""
        x, restore = _as_batch(img)
        out = ops.pointwise_chain(x, steps if steps is not None else self._plan(x), dtype=self._out_dtype(x))
        return restore(self._finish(x, out))

    def _out_dtype(self, x: torch.Tensor) -> Optional[torch.dtype]:
        if self.dtype is not None:
            return self.dtype
        return None if x.is_floating_point() else torch.float32


class ScaleIntensityRange(_Pointwise):
    """MONAI ScaleIntensityRange: [a_min, a_max] -> [b_min, b_max], optional clip.

    a_min == a_max gives ``img - a_min (+ b_min)`` without clipping, as MONAI does (with a warning).
    """

    def __init__(self, a_min: float, a_max: float, b_min: Optional[float] = None,
                 b_max: Optional[float] = None, clip: bool = False, dtype: DtypeLike = torch.float32):
        self.a_min, self.a_max, self.b_min, self.b_max, self.clip = a_min, a_max, b_min, b_max, clip
        self.dtype = _torch_dtype(dtype)

    def _plan(self, x):
        if self.a_max - self.a_min == 0.0:
            warnings.warn("Divide by zero (a_min == a_max)", Warning)
        flags = (ops.HAS_B_MIN if self.b_min is not None else 0) | (ops.HAS_B_MAX if self.b_max is not None else 0)
        flags |= ops.CLIP if self.clip else 0
        params = (self.a_min, self.a_max, self.b_min or 0.0, self.b_max or 0.0)
        return [Step(ops.SCALE_INTENSITY_RANGE, flags, params)]


class ShiftIntensity(_Pointwise):
    """MONAI ShiftIntensity: ``img + offset``; the result keeps the input dtype (``safe`` clamps
    integer results to the dtype's range instead of wrapping)."""

    def __init__(self, offset: float, safe: bool = False):
        self.offset, self.safe = offset, safe
        self._call_offset: Optional[float] = None

    def __call__(self, img: Any, offset: Optional[float] = None) -> Any:
        """MONAI's call: `offset` (not None) replaces the transform's offset for this call."""
        self._call_offset = offset
        try:
            return self.apply(img)
        finally:
            self._call_offset = None

    def _plan(self, x):
        return [Step(ops.SHIFT_INTENSITY, 0, (self.offset if self._call_offset is None else self._call_offset,))]

    def _out_dtype(self, x):
        return None if x.is_floating_point() else torch.float32

    def _finish(self, x, out):
        return _back_to_dtype(out, x.dtype, self.safe)


def _back_to_dtype(out: torch.Tensor, dtype: torch.dtype, safe: bool) -> torch.Tensor:
    if out.dtype == dtype:
        return out
    if safe and not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        out = out.clamp(info.min, info.max)
    if not dtype.is_floating_point:
        out = out.trunc()
        # Wrap like numpy / torch integer casts do (MONAI's unsafe conversion).
        return out.to(torch.int64).to(dtype)
    return out.to(dtype)


class RandShiftIntensity(_Pointwise, _Randomizable):
    """MONAI RandShiftIntensity: offset ~ U(offsets) per sample (or per channel), applied with
    probability ``prob`` per sample."""

    def __init__(self, offsets: Union[tuple[float, float], float], safe: bool = False, prob: float = 0.1,
                 channel_wise: bool = False, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.offsets = _range(offsets, "offsets")
        self.safe, self.prob, self.channel_wise = safe, _check_prob(prob), channel_wise
        self._call_factor: Optional[float] = None

    def __call__(self, img: Any, factor: Optional[float] = None, randomize: bool = True) -> Any:
        """MONAI's call: `factor` (not None) multiplies the drawn offsets (drawn from the offsets
        range times factor); randomize=False replays the last call's draw."""
        self._call_factor = factor
        try:
            with self._reusing_seed(randomize):
                return self.apply(img)
        finally:
            self._call_factor = None

    def _plan(self, x):
        flags = ops.RANDOM | (ops.CHANNEL_WISE if self.channel_wise else 0)
        f = self._call_factor
        lo, hi = self.offsets if f is None else (self.offsets[0] * f, self.offsets[1] * f)
        return [Step(ops.SHIFT_INTENSITY, flags, (0.0, lo, hi), self.prob, self._next_seed())]

    def _out_dtype(self, x):
        return None if x.is_floating_point() else torch.float32

    def _finish(self, x, out):
        return _back_to_dtype(out, x.dtype, self.safe)


class ScaleIntensity(_Pointwise):
    """MONAI ScaleIntensity.

    With ``minv`` or ``maxv`` given: min-max rescaling of each sample (each channel with
    ``channel_wise``) to [minv, maxv]; only the normalisation to [0, 1] when one of them is None;
    ``img * minv`` (or ``img``) for a constant sample, as MONAI's rescale_array. The per-sample
    minimum and maximum come from a device reduction (``voxaug.ops.minmax``) on the transform's
    input, so in a :class:`Compose` this transform starts a new fused pass; gradients treat
    the statistics as constants.
    With ``minv = maxv = None``: ``img * (1 + factor)``.
    """

    def __init__(self, minv: Optional[float] = 0.0, maxv: Optional[float] = 1.0, factor: Optional[float] = None,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32):
        self.minv, self.maxv, self.factor, self.channel_wise = minv, maxv, factor, channel_wise
        self.dtype = _torch_dtype(dtype)
        self._needs_input_stats = minv is not None or maxv is not None

    def _plan(self, x):
        if not self._needs_input_stats:
            return [Step(ops.SCALE_INTENSITY, 0, (self.factor or 0.0,))]
        flags = (ops.HAS_MINV if self.minv is not None else 0) | (ops.HAS_MAXV if self.maxv is not None else 0)
        flags |= ops.CHANNEL_WISE if self.channel_wise else 0
        stats = ops.minmax(x, self.channel_wise)
        return [Step(ops.RESCALE_INTENSITY, flags, (self.minv or 0.0, self.maxv or 0.0), values=stats)]


class RandScaleIntensity(_Pointwise, _Randomizable):
    """MONAI RandScaleIntensity: ``img * (1 + factor)``, factor ~ U(factors) per sample (or channel)."""

    def __init__(self, factors: Union[tuple[float, float], float], prob: float = 0.1,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.factors = _range(factors, "factors")
        self.prob, self.channel_wise = _check_prob(prob), channel_wise
        self.dtype = _torch_dtype(dtype)

    def __call__(self, img: Any, randomize: bool = True) -> Any:
        """MONAI's call: randomize=False replays the last call's draw."""
        with self._reusing_seed(randomize):
            return self.apply(img)

    def _plan(self, x):
        flags = ops.RANDOM | (ops.CHANNEL_WISE if self.channel_wise else 0)
        return [Step(ops.SCALE_INTENSITY, flags, (0.0, *self.factors), self.prob, self._next_seed())]


class RandGaussianNoise(_Pointwise, _Randomizable):
    """MONAI RandGaussianNoise: ``img + N(mean, std)``; with ``sample_std`` the std of each
    sample is drawn from U(0, std)."""

    def __init__(self, prob: float = 0.1, mean: float = 0.0, std: float = 0.1, dtype: DtypeLike = torch.float32,
                 sample_std: bool = True, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        if not 0 <= std < math.inf:
            raise ValueError(f"std must be >= 0 and finite, got {std}")
        self.prob, self.mean, self.std, self.sample_std = _check_prob(prob), mean, std, sample_std
        self.dtype = _torch_dtype(dtype)
        self._call_mean: Optional[float] = None

    def __call__(self, img: Any, mean: Optional[float] = None, randomize: bool = True) -> Any:
        """MONAI's call: `mean` (not None) replaces the noise mean for this call; randomize=False
        replays the last call's draw (the same noise)."""
        self._call_mean = mean
        try:
            with self._reusing_seed(randomize):
                return self.apply(img)
        finally:
            self._call_mean = None

    def _plan(self, x):
        flags = ops.SAMPLE_STD if self.sample_std else 0
        mean = self.mean if self._call_mean is None else self._call_mean
        return [Step(ops.GAUSSIAN_NOISE, flags, (mean, self.std), self.prob, self._next_seed())]


def _rician_arg(value: Any, name: str) -> Union[float, tuple[float, ...]]:
    """RandRicianNoise's `mean` / `std`: a number, or one number per channel (a sequence, numpy
    array or tensor, read once here as MONAI's ensure_tuple_rep reads it on every call)."""
    v = value
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu().numpy()
    if isinstance(v, np.ndarray):
        v = v.tolist()  # a 0-d array gives a number
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or not all(
            isinstance(e, numbers.Real) for e in v):
        raise ValueError(f"{name} must be a number or a sequence of numbers (one per channel), got {value!r}")
    return tuple(float(e) for e in v)


class RandRicianNoise(_Pointwise, _Randomizable):
    """MONAI RandRicianNoise: ``sqrt((img + n1)^2 + n2^2)``, n1, n2 ~ N(mean, s) per voxel, drawn
    in the kernel (Philox + Box-Muller). ``s = std``, or ~ U(0, std) with ``sample_std``, one per
    sample (per channel with ``channel_wise``). ``relative``: ``s`` is also multiplied by the
    image's (channel's) standard deviation (unbiased, as MONAI's torch.std; a device reduction)
    on this transform's input, so in a :class:`Compose` it starts a new fused pass. Not
    differentiable.

    With ``channel_wise``, ``mean`` and ``std`` may also be sequences (numpy arrays, tensors) of
    one value per channel, as MONAI's ``ensure_tuple_rep``: channel c uses ``mean[c]`` and
    ``std[c]`` (times the channel's std when relative). They travel to the kernel as a float64
    (N, C, 2) table of (mean, std) on the data's device (uploaded once per device, pinned and
    non-blocking; with ``relative`` the products with the channel stds are made on the device),
    so the transform stays one batched launch with no host sync and fuses in a
    :class:`Compose` like the scalar form. As MONAI: a sequence whose length is not the
    image's channel count raises ValueError, and a sequence without ``channel_wise`` raises
    RuntimeError, on the call. Difference: MONAI raises them only when its gate applies the
    noise; voxaug raises on every call (its gate is drawn on the device, per sample), and
    also accepts numpy scalars for ``mean`` / ``std`` without ``channel_wise``."""

    def __init__(self, prob: float = 0.1, mean: Union[Sequence[float], float] = 0.0,
                 std: Union[Sequence[float], float] = 1.0, channel_wise: bool = False,
                 relative: bool = False, sample_std: bool = True, dtype: DtypeLike = torch.float32,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.mean, self.std = _rician_arg(mean, "mean"), _rician_arg(std, "std")
        self._arg_types = (type(mean), type(std))  # for MONAI's error message
        for name, vals in (("mean", self.mean), ("std", self.std)):
            for i, v in enumerate(vals if isinstance(vals, tuple) else (vals,)):
                where = f"{name}[{i}]" if isinstance(vals, tuple) else name
                if name == "std" and not (v >= 0 and math.isfinite(v)):
                    raise ValueError(f"{where} must be >= 0 and finite, got {v}")
                if not math.isfinite(v):
                    raise ValueError(f"{where} must be finite, got {v}")
        self.prob = _check_prob(prob)
        self.channel_wise, self.relative, self.sample_std = channel_wise, relative, sample_std
        self.dtype = _torch_dtype(dtype)
        self._needs_input_stats = relative
        self._tables: dict = {}  # C -> (C, 2) float64 (mean, std) on the host

    def _channel_table(self, c: int, device: torch.device) -> Optional[torch.Tensor]:
        """(C, 2) float64 (mean, std) per channel on `device`, or None for scalar mean and std.
        Raises MONAI's errors for sequences it refuses."""
        per_channel = [isinstance(v, tuple) for v in (self.mean, self.std)]
        if not any(per_channel):
            return None
        if not self.channel_wise:
            name, k = ("mean", 0) if per_channel[0] else ("std", 1)
            raise RuntimeError(f"If channel_wise is False, {name} must be a float or int, got {self._arg_types[k]}.")
        cols = []
        for name, v in (("mean", self.mean), ("std", self.std)):
            if isinstance(v, tuple) and len(v) != c:
                raise ValueError(f"Sequence must have length {c}, got {len(v)}. ({name}: one value per channel "
                                 f"of the image)")
            cols.append(v if isinstance(v, tuple) else (v,) * c)
        if c not in self._tables:  # the host table; uploaded per call (a few bytes, pinned, non-blocking) so
            # that no cached device copy is read from another stream before its upload ran
            self._tables[c] = torch.tensor(cols, dtype=torch.float64).T.contiguous()
        return _host_to(self._tables[c], device)

    def _plan(self, x, seed: Optional[int] = None):
        flags = (ops.SAMPLE_STD if self.sample_std else 0) | (ops.CHANNEL_WISE if self.channel_wise else 0)
        table = self._channel_table(x.shape[1], x.device)
        scale = None
        if self.relative:  # device reduction, no host round trip
            scale = _unbiased_std_mean(x, self.channel_wise)[0].to(torch.float32)
        seed = self._next_seed() if seed is None else seed
        if table is None:
            return [Step(ops.RICIAN_NOISE, flags, (self.mean, self.std), self.prob, seed, values=scale)]
        n, c = x.shape[:2]
        if scale is None:
            values = table.expand(n, c, 2)
        else:  # MONAI: std[c] * d.std(), a float32 product
            values = torch.stack([table[:, 0].expand(n, c), (table[:, 1].float() * scale).double()], -1)
        # The table's (mean, std) replace the step's own (unused: 0, 0).
        return [Step(ops.RICIAN_NOISE, flags, (0.0, 0.0), self.prob, seed, values=values)]


def _host_to(t: torch.Tensor, device: Any) -> torch.Tensor:
    """A small host-made parameter tensor onto the data's device without a blocking copy: to a
    CUDA device from the host through pinned memory (a non-blocking copy from pageable memory
    may be staged synchronously by the driver); anything else a plain ``.to`` (the tensor itself
    when it is already there), non-blocking except from a GPU to the host (a non-blocking one
    lands in pinned memory that the host may read before the copy has run). The pinned buffer is
    always a fresh one: pin_memory() returns an already pinned tensor itself, which its owner may
    change once the call has returned, before the copy has run."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device, non_blocking=not (t.device.type == "cuda" and device.type == "cpu"))
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t) if t.is_pinned() else t.pin_memory()
    return host.to(device, non_blocking=True)


class _TorchIOArgs:
    """TorchIO's Transform arguments ``include`` / ``exclude`` / ``keep`` (keyword only) on
    Subject dictionaries: ``include`` / ``exclude`` (not both) name the only images transformed /
    the images left alone (names not in the dictionary are ignored, as TorchIO's get_images);
    ``keep`` = {name: new_name} adds each named entry as it was before the call under its new
    name. The images (4-D / 5-D tensors) left out come back as they were; an entry the transform
    refers to by name (a string argument equal to a key: ``mask_name``, ``masking_method``, a
    target) is still handed to it, then restored when it is left out (TorchIO reads such an image
    without transforming it). A transform with any of these set runs as itself, not fused in a
    :class:`Compose`. Without them (or on a tensor) the call is the transform's own.

    ``p`` (keyword) on the transforms whose own arguments have no probability (the deterministic
    ones: ZNormalization, Resize, Crop, Lambda, ...): TorchIO's Transform gate, one
    ``torch.rand(1).item() > p`` draw from torch's generator per call (skipped when p is 1), the
    data returned as it came when it is closed -- so a ``torch.manual_seed`` gives TorchIO's own
    decisions. The random transforms keep their ``p`` (per subject and sample, from Philox)."""

    include: Optional[tuple] = None
    exclude: tuple = ()
    keep: dict = {}

    def _filter_args(self, include: Optional[Sequence[Hashable]], exclude: Optional[Sequence[Hashable]],
                     keep: Optional[Mapping[Hashable, Hashable]]) -> None:
        """Sets include, exclude and keep, checked as TorchIO checks them."""
        if include is not None and exclude is not None:
            raise ValueError("include and exclude cannot both be specified")
        for name, keys in (("include", include), ("exclude", exclude)):
            if isinstance(keys, (str, bytes)):
                raise ValueError(f"{name} must be a sequence of keys, not the string {keys!r}")
            if keys is not None and not isinstance(keys, collections.abc.Iterable):
                raise ValueError(f"{name} must be a sequence of keys, got {type(keys).__name__}")
        self.include = None if include is None else tuple(include)
        self.exclude = () if exclude is None else tuple(exclude)
        if keep is not None and not isinstance(keep, collections.abc.Mapping):
            raise ValueError(f"keep must be a dictionary {{name: new_name}}, got {type(keep).__name__}")
        self.keep = dict(keep or {})

    def _filtering(self) -> bool:
        return self.include is not None or bool(self.exclude) or bool(self.keep)

    def _runs_as_itself(self) -> bool:
        """Whether a Compose must call it rather than fuse it: filtered, or behind a gate p < 1."""
        return self._filtering() or self._torchio_p < 1.0

    def _chosen(self, key: Hashable) -> bool:
        return (self.include is None or key in self.include) and key not in self.exclude

    def _check_keep(self, data: Mapping) -> None:
        missing = [k for k in self.keep if k not in data]
        if missing:
            raise KeyError(f"keep names {missing}, not in the dictionary (keys {list(data)})")

    _torchio_p: float = 1.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A subclass's own __call__ is wrapped so that the filtering runs around it (a call a
        # class defines itself comes before this mixin's in the MRO); its own __init__, where it
        # takes no probability, gains TorchIO's p.
        super().__init_subclass__(**kwargs)
        call = cls.__dict__.get("__call__")
        if call is not None and not getattr(call, "_filters_keys", False):
            cls.__call__ = _filtering_call(call)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_takes_p", False) and not (
                {"p", "prob"} & set(inspect.signature(init).parameters)):
            cls.__init__ = _init_with_p(init)

    def __call__(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        return _filtered(self, super().__call__, data, args, kwargs)  # type: ignore[misc]


_FILTERING: "contextvars.ContextVar[frozenset]" = contextvars.ContextVar("voxaug_torchio_filtering",
                                                                       default=frozenset())


def _init_with_p(init: Callable) -> Callable:
    """`init` with TorchIO's keyword ``p`` (checked, kept as ``_torchio_p``) added."""

    @functools.wraps(init)
    def __init__(self, *args: Any, p: float = 1.0, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._torchio_p = _check_prob(p)

    sig = inspect.signature(init)
    params = list(sig.parameters.values())
    at = next((i for i, q in enumerate(params) if q.kind == q.VAR_KEYWORD), len(params))
    params.insert(at, inspect.Parameter("p", inspect.Parameter.KEYWORD_ONLY, default=1.0, annotation=float))
    __init__.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    __init__._takes_p = True  # type: ignore[attr-defined]
    return __init__


def _filtered(t: "_TorchIOArgs", call: Callable, data: Any, args: tuple, kwargs: dict) -> Any:
    """`call(data)` behind t's TorchIO gate ``p``, with t's include / exclude / keep applied around
    it (once: a subclass call that reaches its parent's wrapped call is neither gated nor filtered
    again)."""
    if not isinstance(data, collections.abc.Mapping) or not t._filtering() or id(t) in _FILTERING.get():
        return _gated(t, call, data, args, kwargs)
    return _gated(t, lambda d, *a, **k: _filter_keys(t, call, d, a, k), data, args, kwargs)


def _filter_keys(t: "_TorchIOArgs", call: Callable, data: Mapping, args: tuple, kwargs: dict) -> Any:
    """`call` on the images t chooses (and the entries it names), the others and the kept
    originals put back."""
    t._check_keep(data)
    images = {k for k, v in data.items() if isinstance(v, torch.Tensor) and v.dim() in (4, 5)}
    refs = {v for v in vars(t).values() if isinstance(v, str) and v in data}
    left = {k for k in images if not t._chosen(k)}
    token = _FILTERING.set(_FILTERING.get() | {id(t)})
    try:
        out = call({k: v for k, v in data.items() if k not in left or k in refs}, *args, **kwargs)
    finally:
        _FILTERING.reset(token)
    result = {k: (data[k] if k in left else out[k]) for k in data if k in left or k in out}
    result.update({k: v for k, v in out.items() if k not in result})
    for name, new_name in t.keep.items():
        result[new_name] = data[name]
    return result


def _gated(t: "_TorchIOArgs", call: Callable, data: Any, args: tuple, kwargs: dict) -> Any:
    """`call(data)` behind t's TorchIO gate ``p`` (once: not again inside a call that passed it)."""
    if t._torchio_p >= 1.0 or id(t) in _FILTERING.get():
        return call(data, *args, **kwargs)
    if torch.rand(1).item() > t._torchio_p:  # TorchIO's Transform.__call__
        return data
    token = _FILTERING.set(_FILTERING.get() | {id(t)})
    try:
        return call(data, *args, **kwargs)
    finally:
        _FILTERING.reset(token)


def _filtering_call(call: Callable) -> Callable:
    @functools.wraps(call)
    def __call__(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        return _filtered(self, lambda d, *a, **k: call(self, d, *a, **k), data, args, kwargs)

    __call__._filters_keys = True  # type: ignore[attr-defined]
    return __call__


class _Subject(_TorchIOArgs):
    """TorchIO's intensity transforms on a Subject: called on a dictionary, each 4-D / 5-D tensor
    not under ``label_keys`` (TorchIO's LabelMaps) is transformed by its own call -- its own draws,
    as TorchIO draws per image -- and the other entries are kept. A ``masking_method`` string naming
    an entry of the dictionary masks with that entry (TorchIO: a label map of the Subject). On a
    tensor, the transform's own call.

    TorchIO's Transform arguments (keyword only): ``include`` / ``exclude`` (not both) name the
    only images transformed / the images left alone (names not in the dictionary are ignored, as
    TorchIO's get_images); ``keep`` = {name: new_name} adds each named entry as it was before the
    call under its new name (TorchIO keeps them only when the transform runs: a call whose gate is
    closed for every sample returns the dictionary as it came).

    The probability ``p`` of the random transforms is met once per Subject, as TorchIO's: on a
    dictionary, sample n of every transformed image is one subject, so one gate per sample (drawn
    from the transform's Philox stream, kept in ``last_subject_applied``) opens or closes it for
    all of them; each open image then draws its own parameters. The images must agree on the batch
    size (a 4-D image is one sample). ``last_*`` attributes describe the last image's call (its
    ``last_applied``, where it has one, is the subject gate)."""

    label_keys: tuple = ()

    def _subject_keys(self, label_keys: Sequence[Hashable], include: Optional[Sequence[Hashable]],
                      exclude: Optional[Sequence[Hashable]], keep: Optional[Mapping[Hashable, Hashable]]) -> None:
        """Sets label_keys, and include, exclude and keep (_TorchIOArgs)."""
        self.label_keys = _label_keys(label_keys)
        self._filter_args(include, exclude, keep)

    def _tensor_call(self, x: Any, *args: Any, **kwargs: Any) -> Any:
        """The transform of one tensor: the next class's call (a class with a call of its own
        defines ``_tensor_call`` instead)."""
        return super().__call__(x, *args, **kwargs)  # type: ignore[misc]

    def _subject_targets(self, data: Mapping) -> list:
        """The keys of `data` this call transforms: 4-D / 5-D tensors, not label maps, included."""
        return [k for k, v in data.items()
                if isinstance(v, torch.Tensor) and v.dim() in (4, 5) and k not in self.label_keys and self._chosen(k)]

    def _subject_gate(self, data: Mapping, keys: list) -> tuple[Any, Optional[torch.Tensor]]:
        """(the transform to call per image, the per-sample gate or None when every sample runs):
        a random transform's probability met once per sample for all of the images."""
        attr = "p" if "p" in vars(self) else "prob" if "prob" in vars(self) else None
        if attr is None or not isinstance(self, _Randomizable) or not keys or getattr(self, attr) >= 1.0:
            return self, None
        sizes = {k: data[k].shape[0] if data[k].dim() == 5 else 1 for k in keys}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"the images of a Subject dictionary must agree on the batch size (one gate per "
                             f"subject and sample), got {sizes}")
        n = next(iter(sizes.values()))
        gate = ops.philox_uniform(self._next_seed(), 0, n, 1)[:, 0] < getattr(self, attr)
        self.last_subject_applied = gate
        t = copy.copy(self)
        setattr(t, attr, 1.0)
        return t, gate

    def __call__(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        return _gated(self, self._subject_call, data, args, kwargs)

    def _subject_call(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(data, collections.abc.Mapping):
            return self._tensor_call(data, *args, **kwargs)
        keys = self._subject_targets(data)
        t, gate = self._subject_gate(data, keys)
        if gate is not None and not bool(gate.any()):
            return dict(data)  # TorchIO: the whole Subject untouched (nothing kept)
        self._check_keep(data)
        mm = getattr(self, "masking_method", None)
        if isinstance(mm, str) and mm in data:
            t = copy.copy(t) if t is self else t
            t.masking_method = data[mm]
        out = dict(data)
        mixed = gate is not None and not bool(gate.all())
        for k in keys:
            x = data[k]
            if mixed and getattr(t, "in_place", False):  # only the open samples may change
                opened = torch.nonzero(gate).flatten().to(x.device)
                x[opened] = t._tensor_call(x[opened], *args, **kwargs)
                out[k] = x
                continue
            y = t._tensor_call(x, *args, **kwargs)
            if mixed:  # the closed samples as they came (cast as the transform casts)
                closed = torch.nonzero(~gate).flatten().to(y.device)
                y[closed] = x[closed].to(device=y.device, dtype=y.dtype)
            out[k] = y
        for name, new_name in self.keep.items():
            out[new_name] = data[name]
        if t is not self:  # the draws of the last image, on the transform itself
            for a, v in vars(t).items():
                if a.startswith("last_"):
                    setattr(self, a, v)
            if gate is not None and getattr(self, "last_applied", None) is not None:
                la = self.last_applied  # the copy ran with probability 1: the gate decided
                self.last_applied = gate.numpy().copy() if isinstance(la, np.ndarray) else gate.to(la.device)
        return out

    __call__._filters_keys = True  # type: ignore[attr-defined]  # filters itself (per image)


def _label_keys(label_keys: Sequence[Hashable]) -> tuple:
    if isinstance(label_keys, (str, bytes)):
        raise ValueError(f"label_keys must be a sequence of keys, got the string {label_keys!r}")
    return tuple(label_keys)


class _BiasField(_Pointwise, _Randomizable):
    """Shared by MONAI's RandBiasField and TorchIO's RandomBiasField: the gate and the
    coefficients are drawn on the host from Philox (``ops.philox_uniform``, one row per sample)
    and kept in ``last_applied`` / ``last_coefficients`` (float64 values of the float32 ones the
    kernel uses; zero rows where the gate is closed: exp(0) = 1 leaves those samples unchanged).
    The field is evaluated per voxel in the kernel: no dense field in memory."""

    _monomial = False

    def _init(self, degree: int, coeff_range: tuple[float, float], prob: float, seed: Optional[int]):
        _Randomizable.__init__(self, seed)
        if not 0 <= degree <= ops.MAX_BIAS_FIELD_DEGREE:
            raise ValueError(f"degree must be in [0, {ops.MAX_BIAS_FIELD_DEGREE}], got {degree}")
        self.degree, self.coeff_range, self.prob = int(degree), coeff_range, _check_prob(prob)
        self.last_coefficients: Optional[torch.Tensor] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x, seed: Optional[int] = None):
        n, nc = x.shape[0], ops.bias_field_coefficients(self.degree)
        u = ops.philox_uniform(self._next_seed() if seed is None else seed, 0, n, nc + 1)
        applied = u[:, 0] < self.prob
        lo, hi = self.coeff_range
        coeff = (lo + (hi - lo) * u[:, 1:]).to(torch.float32)
        coeff = torch.where(applied[:, None], coeff, torch.zeros(()))
        self.last_applied, self.last_coefficients = applied, coeff.double()
        flags = ops.MONOMIAL_BASIS if self._monomial else 0
        return [Step(ops.BIAS_FIELD, flags, (self.degree,), 1.0, 0, values=_host_to(coeff, x.device))]


class RandBiasField(_BiasField):
    """MONAI RandBiasField: ``img * exp(sum c_ijk P_i(z) P_j(y) P_k(x))``, Legendre polynomials of
    total degree <= ``degree`` on MONAI's grid (float32 linspace(-1, 1) per axis), coefficients
    ~ U(coeff_range) per sample, in MONAI's order. The same field for every channel."""

    def __init__(self, degree: int = 3, coeff_range: tuple[float, float] = (0.0, 0.1),
                 dtype: DtypeLike = torch.float32, prob: float = 0.1, seed: Optional[int] = None):
        if degree < 1:
            raise ValueError(f"degree should be no less than 1, got {degree}.")
        if isinstance(coeff_range, numbers.Real):  # MONAI takes a pair only
            raise ValueError(f"coeff_range should be a pair of numbers (low, high), got {coeff_range!r}.")
        self._init(degree, _range(coeff_range, "coeff_range"), prob, seed)
        self.dtype = _torch_dtype(dtype)


class RandomBiasField(_Subject, _BiasField):
    """TorchIO RandomBiasField: ``img * exp(sum c_ijk x^i y^j z^k)`` with monomials of total
    order <= ``order`` on TorchIO's centred grid, every coefficient ~ U(-c, c) (or U(a, b) for
    ``coefficients=(a, b)``), applied with probability ``p`` per sample. Float32 result."""

    _monomial = True

    def __init__(self, coefficients: Union[float, tuple[float, float]] = 0.5, order: int = 3, p: float = 1.0,
                 seed: Optional[int] = None, label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(order, int) or order < 0:
            raise ValueError(f"order must be a non-negative int, got {order!r}")
        self._init(order, _range(coefficients, "coefficients"), p, seed)
        self.dtype = torch.float32
        self._subject_keys(label_keys, include, exclude, keep)


class BiasField(_Subject, _Pointwise):
    """TorchIO BiasField(coefficients, order): ``img * exp(sum c_ijk x^i y^j z^k)`` with the given
    coefficients of the monomials of total order <= ``order`` in TorchIO's order (x outermost,
    z innermost) on TorchIO's centred grid; the field is evaluated per voxel in the pointwise
    kernel (fuses in :class:`Compose`). Float32 result. ``coefficients`` may also be an (N, K)
    tensor: one row per sample of the batch (RandomBiasField's ``last_coefficients``)."""

    dtype = torch.float32

    def __init__(self, coefficients: Union[Sequence[float], torch.Tensor], order: int,
                 label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not (
                0 <= order <= ops.MAX_BIAS_FIELD_DEGREE):
            raise ValueError(f"order must be an int in [0, {ops.MAX_BIAS_FIELD_DEGREE}], got {order!r}")
        self.order = int(order)
        if isinstance(coefficients, dict):
            raise ValueError("coefficients: a dict per image name is TorchIO's Subject form; voxaug's BiasField "
                             "takes one list (or an (N, K) tensor, a row per sample)")
        c = torch.as_tensor(coefficients, dtype=torch.float64)
        k = ops.bias_field_coefficients(self.order)
        if c.dim() not in (1, 2) or c.shape[-1] != k:
            raise ValueError(f"coefficients must hold {k} values for order {self.order} (the monomials of total "
                             f"order <= {self.order}), or be (N, {k}); got shape {tuple(c.shape)}")
        if not bool(torch.isfinite(c).all()):
            raise ValueError("coefficients must be finite")
        self.coefficients = c.to(torch.float32)
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x):
        n = x.shape[0]
        c = self.coefficients
        if c.dim() == 2 and c.shape[0] != n:
            raise ValueError(f"coefficients has {c.shape[0]} rows but the batch has {n} samples")
        values = c.expand(n, c.shape[-1]).contiguous() if c.dim() == 1 else c
        return [Step(ops.BIAS_FIELD, ops.MONOMIAL_BASIS, (self.order,), 1.0, 0, values=_host_to(values, x.device))]


class _Contrast(_Pointwise):
    """MONAI's contrast transforms: one pass, plus with ``retain_stats`` a second one."""

    _needs_input_stats = True
    retain_stats = False

    @property
    def _single_pass(self) -> bool:  # type: ignore[override]
        return not self.retain_stats

    def apply(self, img: Any, steps: Optional[list[Step]] = None) -> Any:
        if not self.retain_stats:
            return super().apply(img, steps)
        x, restore = _as_batch(img)
        steps = steps if steps is not None else self._plan(x)
        out = ops.pointwise_chain(x, steps, dtype=self._out_dtype(x))
        return restore(_retain_stats(x, out, steps[0]))


_MOMENT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                  torch.int32)


def _unbiased_std_mean(x: torch.Tensor, channel_wise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Unbiased std (torch's / MONAI's img.std()) and mean of each sample ((N,)) or, with
    ``channel_wise``, each channel ((N, C)) of a (N, C, D, H, W) batch, float64, from one device
    reduction (``ops.moments``: deterministic, the same on the CPU and CUDA, no host sync; on the
    CPU several times faster than torch's std). One voxel gives a NaN std, as torch's."""
    m = ops.moments(x if x.dtype in _MOMENT_DTYPES else x.to(torch.float32), channel_wise)
    m = m if channel_wise else m[:, 0]  # (..., 3): count, mean, population std
    n = m[..., 0]
    return m[..., 2] * torch.sqrt(n / (n - 1.0)), m[..., 1]


def _retain_stats(x: torch.Tensor, out: torch.Tensor, step: Step) -> torch.Tensor:
    """MONAI's retain_stats: the result's mean / std moved back to the input's (per sample, torch's
    unbiased std; device reductions, no host sync). (-out) has mean -mean(out) and the same std,
    so with invert_image too the result is (out - mean(out)) * std(x) / (std(out) + 1e-8) + mean(x).
    The steps carry the contrast step's gate (same seed and prob): closed samples stay as they are.
    The statistics are constants for autograd, like min / max; without autograd the second pass
    runs in place on ``out`` (a tensor this call made)."""
    with torch.no_grad():
        xs, xm, os_, om = (t.to(out.dtype) for t in (*_unbiased_std_mean(x), *_unbiased_std_mean(out)))
        factor = xs / (os_ + 1e-8)
    gate = dict(prob=step.prob, seed=step.seed)
    steps = [Step(ops.SHIFT_INTENSITY, values=-om, **gate), Step(ops.SCALE_INTENSITY, values=factor - 1.0, **gate),
             Step(ops.SHIFT_INTENSITY, values=xm, **gate)]
    if out.requires_grad and torch.is_grad_enabled():
        return ops.pointwise_chain(out, steps)
    return ops.pointwise_chain_(out, steps)


class AdjustContrast(_Contrast):
    """MONAI AdjustContrast: ``((img - min) / (max - min + 1e-7))^gamma * (max - min) + min`` with
    each sample's min / max from a device reduction (``ops.minmax``), so in a :class:`Compose` it
    starts a new fused pass. ``invert_image``: applied to ``-img`` and negated back (nnU-Net).
    ``retain_stats``: a second pass restores each sample's mean and std (never fused). Gradients
    treat min / max (and the retained statistics) as constants."""

    def __init__(self, gamma: float, invert_image: bool = False, retain_stats: bool = False):
        if not isinstance(gamma, (int, float)):
            raise ValueError(f"gamma must be a float or int number, got {type(gamma)} {gamma}.")
        if not 0 < gamma < math.inf:
            raise ValueError(f"gamma must be > 0 and finite, got {gamma}")
        self.gamma, self.invert_image, self.retain_stats = float(gamma), invert_image, retain_stats

    def _plan(self, x):
        flags = ops.INVERT_IMAGE if self.invert_image else 0
        return [Step(ops.ADJUST_CONTRAST, flags, (self.gamma,), values=ops.minmax(x, False))]


class RandAdjustContrast(_Contrast, _Randomizable):
    """MONAI RandAdjustContrast: :class:`AdjustContrast` with gamma ~ U(gamma) per sample (a number
    g means (0.5, g)), drawn in the kernel, applied with probability ``prob`` per sample."""

    def __init__(self, prob: float = 0.1, gamma: Union[Sequence[float], float] = (0.5, 4.5),
                 invert_image: bool = False, retain_stats: bool = False, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        if isinstance(gamma, numbers.Real):
            if not gamma > 0.5:  # NaN included
                raise ValueError(
                    f"if gamma is a number, must greater than 0.5 and value is picked from (0.5, gamma), got {gamma}")
            gamma = (0.5, gamma)
        self.gamma = _range(gamma, "gamma")
        if not self.gamma[0] > 0:
            raise ValueError(f"gamma must be > 0, got the range {self.gamma}")
        self.prob, self.invert_image, self.retain_stats = _check_prob(prob), invert_image, retain_stats

    def _plan(self, x, seed: Optional[int] = None):
        flags = ops.RANDOM | (ops.INVERT_IMAGE if self.invert_image else 0)
        return [Step(ops.ADJUST_CONTRAST, flags, (1.0, *self.gamma), self.prob,
                     self._next_seed() if seed is None else seed, values=ops.minmax(x, False))]


class Gamma(_Subject, _Pointwise):
    """TorchIO Gamma: ``sign(img) |img|^gamma`` (``img^gamma`` on non-negative images). Float32 result."""

    dtype = torch.float32

    def __init__(self, gamma: float, label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(gamma, numbers.Real) or not 0 < gamma < math.inf:
            raise ValueError(f"gamma must be a number > 0 and finite, got {gamma!r}")
        self.gamma = float(gamma)
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x):
        return [Step(ops.GAMMA, 0, (self.gamma,))]


class RandomGamma(_Subject, _Pointwise, _Randomizable):
    """TorchIO RandomGamma: ``sign(img) |img|^gamma``, gamma = exp(beta), beta ~ U(log_gamma) (a number
    d means (-d, d)) per sample and channel, drawn in the kernel; applied with probability ``p``
    per sample. Float32 result."""

    dtype = torch.float32

    def __init__(self, log_gamma: Union[float, tuple[float, float]] = (-0.3, 0.3), p: float = 1.0,
                 seed: Optional[int] = None, label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.log_gamma = _range(log_gamma, "log_gamma")
        if not -88.0 <= self.log_gamma[0] <= self.log_gamma[1] <= 88.0:
            # gamma = exp(beta) must be a finite float32 (the kernels' power takes finite exponents)
            raise ValueError(f"log_gamma must lie in [-88, 88], got {log_gamma!r}")
        self.p = _check_prob(p)
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x):
        return [Step(ops.GAMMA, ops.RANDOM, (1.0, *self.log_gamma), self.p, self._next_seed())]


def _torchio_range(value: Any, name: str, min_constraint: Optional[float] = None,
                   max_constraint: Optional[float] = None) -> tuple[float, float]:
    """TorchIO's range argument: a number d >= 0 means (-d, d), or (min_constraint, d) when there
    is one; a pair (a, b) needs a <= b; both ends finite and within the constraints."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        d = float(value)
        if not d >= 0:
            raise ValueError(f"If {name} is a single number, it must be >= 0, got {value!r}")
        if min_constraint is not None and d < min_constraint:
            raise ValueError(f"If {name} is a single number, it must be >= {min_constraint}, got {value!r}")
        pair = (-d if min_constraint is None else float(min_constraint), d)
    else:
        try:
            pair = tuple(float(v) for v in value)
        except (TypeError, ValueError):
            pair = ()
        if len(pair) != 2:
            raise ValueError(f"{name} must be a number or a sequence of two numbers, got {value!r}")
        if not pair[0] <= pair[1]:
            raise ValueError(f"If {name} is a sequence, the second value must be >= the first, got {value!r}")
    if not (math.isfinite(pair[0]) and math.isfinite(pair[1])):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if (min_constraint is not None and pair[0] < min_constraint) or (
            max_constraint is not None and pair[1] > max_constraint):
        raise ValueError(f"{name} must lie in [{min_constraint}, {max_constraint}], got {value!r}")
    return pair


class RandomNoise(_Subject, _Pointwise, _Randomizable):
    """TorchIO RandomNoise: ``img + N(mean, std)`` with mean ~ U(mean) (a number d means (-d, d))
    and std ~ U(std) (a number d means (0, d)) drawn per sample in the kernel (TorchIO draws one
    pair per image of a subject), applied with probability ``p`` per sample. Float32 result, as TorchIO's sum
    with its float32 noise. The normals are voxaug's Philox stream, not torch.randn's."""

    dtype = torch.float32

    def __init__(self, mean: Union[float, tuple[float, float]] = 0.0,
                 std: Union[float, tuple[float, float]] = (0.0, 0.25), p: float = 1.0, seed: Optional[int] = None,
                 label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.mean_range = _torchio_range(mean, "mean")
        self.std_range = _torchio_range(std, "std", min_constraint=0.0)
        self.p = _check_prob(p)
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x):
        (m_lo, m_hi), (s_lo, s_hi) = self.mean_range, self.std_range
        return [Step(ops.GAUSSIAN_NOISE, ops.RANDOM | ops.SAMPLE_STD, (m_lo, s_hi, m_lo, m_hi, s_lo), self.p,
                     self._next_seed())]


class Noise(_Subject, _Pointwise):
    """TorchIO Noise(mean, std, seed): ``img + N(mean, std)``, float32 result. The normals are
    voxaug's Philox stream keyed by ``seed`` (the same seed gives the same noise, in any batch,
    on the CPU and on CUDA), not torch.randn's under torch.manual_seed(seed) as TorchIO's, so
    the values differ from TorchIO's while the distribution is the same. Each sample of a batch
    gets its own noise: the stream is keyed by the seed and the sample's index in the batch."""

    dtype = torch.float32

    def __init__(self, mean: float, std: float, seed: int, label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        for name, v in (("mean", mean), ("std", std)):
            if isinstance(v, dict):
                raise ValueError(f"{name}: a dict per image name is TorchIO's Subject form; voxaug's Noise takes "
                                 "one number")
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
                raise ValueError(f"{name} must be a finite number, got {v!r}")
        if std < 0:
            raise ValueError(f"std must be >= 0, got {std!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.mean, self.std, self.seed = float(mean), float(std), int(seed)
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x):
        return [Step(ops.GAUSSIAN_NOISE, 0, (self.mean, self.std), 1.0, self.seed)]


class _StdShift(_Pointwise):
    """Shared by MONAI's StdShiftIntensity and RandStdShiftIntensity: ``img + factor * std(img)``,
    the population std (MONAI: torch.std(unbiased=False)) of each sample (each channel with
    ``channel_wise``) from a device reduction (``ops.moments``, float64, rounded to float32 before
    the product), so in a :class:`Compose` it starts a new fused pass. ``nonzero``: the std of the
    values != 0, and only those shift. Gradients treat the std as a constant."""

    _needs_input_stats = True

    def _init(self, nonzero: bool, channel_wise: bool, dtype: DtypeLike):
        self.nonzero, self.channel_wise = bool(nonzero), bool(channel_wise)
        self.dtype = _torch_dtype(dtype)

    def _flags(self) -> int:
        return (ops.NONZERO if self.nonzero else 0) | (ops.CHANNEL_WISE if self.channel_wise else 0)

    def _stats(self, x: torch.Tensor) -> torch.Tensor:
        return ops.moments(x, self.channel_wise, self.nonzero)


class StdShiftIntensity(_StdShift):
    """MONAI StdShiftIntensity: ``img + factor * std(img)`` (see the notes of RandStdShiftIntensity)."""

    def __init__(self, factor: float, nonzero: bool = False, channel_wise: bool = False,
                 dtype: DtypeLike = torch.float32):
        self.factor = float(factor)
        self._init(nonzero, channel_wise, dtype)

    def _plan(self, x):
        return [Step(ops.STD_SHIFT_INTENSITY, self._flags(), (self.factor,), values=self._stats(x))]


class RandStdShiftIntensity(_StdShift, _Randomizable):
    """MONAI RandStdShiftIntensity: ``img + factor * std(img)``, factor ~ U(factors) (a number f
    means (-f, f)) per sample, drawn in the kernel (one factor per sample, also with
    ``channel_wise``, as MONAI draws one per call); applied with probability ``prob`` per sample."""

    def __init__(self, factors: Union[tuple[float, float], float], prob: float = 0.1, nonzero: bool = False,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32, seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.factors = _range(factors, "factors")
        self.prob = _check_prob(prob)
        self._init(nonzero, channel_wise, dtype)

    def _plan(self, x, seed: Optional[int] = None):
        return [Step(ops.STD_SHIFT_INTENSITY, self._flags() | ops.RANDOM, (0.0, *self.factors), self.prob,
                     self._next_seed() if seed is None else seed, values=self._stats(x))]


class _FixedMean(_Pointwise):
    """Shared by MONAI's ScaleIntensityFixedMean and RandScaleIntensityFixedMean:
    ``(img - mean) * (1 + factor) + mean`` (``img * (1 + factor)`` without ``fixed_mean``), clipped to
    the input's [min, max] with ``preserve_range``; mean, min and max per sample (per channel with
    ``channel_wise``) from device reductions (torch's mean in float32 as MONAI's, ``ops.minmax``), so in a
    :class:`Compose` it starts a new fused pass. Gradients treat the statistics as constants."""

    _needs_input_stats = True

    def _init(self, fixed_mean: bool, preserve_range: bool, channel_wise: bool, dtype: DtypeLike):
        self.fixed_mean, self.preserve_range = bool(fixed_mean), bool(preserve_range)
        self.channel_wise = bool(channel_wise)
        self.dtype = _torch_dtype(dtype)

    def _flags(self) -> int:
        return ((ops.FIXED_MEAN if self.fixed_mean else 0) | (ops.PRESERVE_RANGE if self.preserve_range else 0)
                | (ops.CHANNEL_WISE if self.channel_wise else 0))

    def _stats(self, x: torch.Tensor) -> torch.Tensor:
        segs = x.shape[1] if self.channel_wise else 1
        zeros = lambda k: torch.zeros(x.shape[0], segs, k, dtype=torch.float64, device=x.device)  # noqa: E731
        if self.fixed_mean:  # torch's float32 mean, as MONAI's (half / integer data: accumulated in float32)
            dims = tuple(range(2, x.dim())) if self.channel_wise else tuple(range(1, x.dim()))
            mean = x.mean(dim=dims, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
            mean = mean.reshape(x.shape[0], segs, 1).double()
        else:
            mean = zeros(1)
        mm = ops.minmax(x, self.channel_wise) if self.preserve_range else zeros(2)
        return torch.cat([mean, mm], -1)


class ScaleIntensityFixedMean(_FixedMean):
    """MONAI ScaleIntensityFixedMean (see the notes of RandScaleIntensityFixedMean)."""

    def __init__(self, factor: float = 0, preserve_range: bool = False, fixed_mean: bool = True,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32):
        self.factor = float(factor)
        self._init(fixed_mean, preserve_range, channel_wise, dtype)

    def _plan(self, x):
        return [Step(ops.SCALE_INTENSITY_FIXED_MEAN, self._flags(), (self.factor,), values=self._stats(x))]


class RandScaleIntensityFixedMean(_FixedMean, _Randomizable):
    """MONAI RandScaleIntensityFixedMean: :class:`ScaleIntensityFixedMean` with factor ~ U(factors) (a
    number f means (-f, f)) per sample, or per sample and channel with ``channel_wise`` (statistics
    then per channel too), drawn in the kernel; applied with probability ``prob`` per sample."""

    def __init__(self, prob: float = 0.1, factors: Union[Sequence[float], float] = 0, fixed_mean: bool = True,
                 preserve_range: bool = False, dtype: DtypeLike = torch.float32, channel_wise: bool = False,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.factors = _range(factors, "factors")
        self.prob = _check_prob(prob)
        self._init(fixed_mean, preserve_range, channel_wise, dtype)

    def _plan(self, x, seed: Optional[int] = None):
        return [Step(ops.SCALE_INTENSITY_FIXED_MEAN, self._flags() | ops.RANDOM, (0.0, *self.factors), self.prob,
                     self._next_seed() if seed is None else seed, values=self._stats(x))]


class RandHistogramShift(_Pointwise, _Randomizable):
    """MONAI RandHistogramShift: a random monotone piecewise-linear map of each sample's intensity
    range. Per sample: K ~ randint(num_control_points) (a number: exactly K), reference points
    linspace(0, 1, K), floating points y_0 = 0, y_{K-1} = 1 and y_i ~ U(y_{i-1}, x_{i+1}) in order
    (MONAI's draws), all scaled to [min, max] of the sample (``ops.minmax``, a device reduction: in
    a :class:`Compose` it starts a new fused pass); then MONAI's interpolation (float32 slopes and
    intercepts, np.interp's ends), evaluated per voxel in the kernel. The gate, K and the points
    are drawn on the host from Philox (``ops.philox_uniform``, one row per sample) and kept in
    ``last_applied`` / ``last_num_points`` / ``last_control_points`` (float64, NaN-padded). A
    constant sample is returned unchanged (MONAI warns). Integer images give float32 results."""

    _needs_input_stats = True

    def __init__(self, num_control_points: Union[tuple[int, int], int] = 10, prob: float = 0.1,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        def whole(v) -> bool:  # an integer count (bools are not)
            return isinstance(v, numbers.Integral) and not isinstance(v, bool)

        if isinstance(num_control_points, numbers.Real):
            if not whole(num_control_points):
                raise ValueError(f"num_control_points must be an integer or a pair of integers, got "
                                 f"{num_control_points!r}")
            if num_control_points <= 2:
                raise ValueError("num_control_points should be greater than or equal to 3")
            self.num_control_points = (int(num_control_points), int(num_control_points))
        else:
            if len(num_control_points) != 2:
                raise ValueError("num_control points should be a number or a pair of numbers")
            if not all(whole(v) for v in num_control_points):
                raise ValueError(f"num_control_points must be an integer or a pair of integers, got "
                                 f"{num_control_points!r}")
            if min(num_control_points) <= 2:
                raise ValueError("num_control_points should be greater than or equal to 3")
            self.num_control_points = (int(min(num_control_points)), int(max(num_control_points)))
        if self.num_control_points[1] > ops.MAX_HISTOGRAM_POINTS:
            raise ValueError(f"num_control_points must be <= {ops.MAX_HISTOGRAM_POINTS}, "
                             f"got {self.num_control_points[1]}")
        self.prob = _check_prob(prob)
        self.last_applied: Optional[torch.Tensor] = None
        self.last_num_points: Optional[torch.Tensor] = None
        self.last_control_points: Optional[torch.Tensor] = None

    def _points(self, n: int, seed: int) -> torch.Tensor:
        """(n, K_max) float64 floating control points, NaN after each sample's K (all NaN: not applied)."""
        lo, hi = self.num_control_points
        u = ops.philox_uniform(seed, 0, n, hi)  # gate, K, then the K - 2 interior draws
        applied = u[:, 0] < self.prob
        k = torch.clamp(lo + torch.floor(u[:, 1] * (hi - lo + 1)).to(torch.int64), max=hi)
        idx = torch.arange(hi, dtype=torch.int64)
        # np.linspace(0, 1, K): i * (1 / (K - 1)), the last exactly 1
        ref = idx[None].double() * (1.0 / (k - 1).double())[:, None]
        ref = torch.where(idx[None] == (k - 1)[:, None], torch.ones(()), ref)
        ref = torch.where(idx[None] < k[:, None], ref, torch.full((), float("nan"), dtype=torch.float64))
        pts = ref.clone()
        for i in range(1, hi - 1):  # MONAI: y_i = uniform(y_{i-1}, x_{i+1}), in order
            a, b = pts[:, i - 1], ref[:, i + 1]
            pts[:, i] = torch.where(i < k - 1, a + (b - a) * u[:, 1 + i], pts[:, i])
        pts = torch.where(applied[:, None], pts, torch.full((), float("nan"), dtype=torch.float64))
        self.last_applied, self.last_num_points, self.last_control_points = applied, k, pts
        return pts

    def _plan(self, x, seed: Optional[int] = None):
        n = x.shape[0]
        pts = self._points(n, self._next_seed() if seed is None else seed)
        table = torch.cat([ops.minmax(x).view(n, 2), _host_to(pts, x.device)], 1)
        return [Step(ops.HISTOGRAM_SHIFT, 0, (), 1.0, 0, values=table)]


class ThresholdIntensity:
    """MONAI ThresholdIntensity: keep the values above ``threshold`` (below it with
    ``above=False``), set the others to ``cval``; the image's dtype (cval converted to it, as
    MONAI's final conversion does). One torch pass on the data's device."""

    def __init__(self, threshold: float, above: bool = True, cval: float = 0.0):
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
            raise ValueError(f"threshold must be a float or int number, got {type(threshold)} {threshold}.")
        self.threshold, self.above, self.cval = threshold, bool(above), cval

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        keep = x > self.threshold if self.above else x < self.threshold
        fill = torch.full((), self.cval, dtype=torch.float64, device=x.device).to(x.dtype)
        return restore(torch.where(keep, x, fill))


class MaskIntensity:
    """MONAI MaskIntensity: ``img * select_fn(mask)`` (default ``mask > 0``), a one-channel mask
    applied to every channel or one mask channel per image channel; the image's dtype. A batch
    takes a (C', D, H, W) mask for every sample or an (N, C', D, H, W) one per sample. The mask
    goes to the image's device (non-blocking from pinned memory when it is on the host)."""

    def __init__(self, mask_data: Any = None, select_fn: Callable = lambda m: m > 0):
        self.mask_data, self.select_fn = mask_data, select_fn

    def __call__(self, img: Any, mask_data: Any = None) -> Any:
        x, restore = _as_batch(img)
        mask = self.mask_data if mask_data is None else mask_data
        if mask is None:
            raise ValueError("must provide the mask_data when initializing the transform or at runtime.")
        m = torch.as_tensor(np.asarray(mask) if not isinstance(mask, torch.Tensor) else mask)
        m = _host_to(m.detach(), x.device).to(x.dtype)
        m = self.select_fn(m)
        m5 = m[None] if m.dim() == 4 else m
        if m5.dim() != 5 or m5.shape[0] not in (1, x.shape[0]) or tuple(m5.shape[2:]) != tuple(x.shape[2:]):
            raise ValueError(f"mask_data must be (C', D, H, W) or (N, C', D, H, W) with the image's spatial shape "
                             f"{tuple(x.shape[2:])}, got {tuple(m.shape)}")
        if m5.shape[1] != 1 and m5.shape[1] != x.shape[1]:
            raise ValueError("When mask_data is not single channel, mask_data channels must match img, "
                             f"got img channels={x.shape[1]} mask_data channels={m5.shape[1]}.")
        return restore((x * m5).to(x.dtype))


class Clamp(_Subject):
    """TorchIO Clamp: ``clamp(img, out_min, out_max)`` (either bound None: that side open); the
    image's dtype (TorchIO's torch.clamp). One torch pass on the data's device."""

    def __init__(self, out_min: Optional[float] = None, out_max: Optional[float] = None,
                 label_keys: Sequence[Hashable] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        for name, v in (("out_min", out_min), ("out_max", out_max)):
            if v is not None and (not isinstance(v, numbers.Real) or not math.isfinite(v)):
                raise ValueError(f"{name} must be a finite number or None, got {v!r}")
        if out_min is not None and out_max is not None and out_min > out_max:
            raise ValueError(f"out_min must be <= out_max, got {out_min} > {out_max}")
        self.out_min, self.out_max = out_min, out_max
        self._subject_keys(label_keys, include, exclude, keep)

    def _tensor_call(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        return restore(torch.clamp(x, self.out_min, self.out_max))


class AddCoordinateChannels:
    """MONAI AddCoordinateChannels(spatial_dims): appends one channel per listed spatial dimension
    (0-based) holding that axis's coordinate, numpy's linspace(-0.5, 0.5, size) (float64, then
    the image's dtype, as MONAI's convert_to_dst_type), made on the data's device. (C, D, H, W)
    or a (N, C, D, H, W) batch."""

    def __init__(self, spatial_dims: Sequence[int]):
        dims = [spatial_dims] if isinstance(spatial_dims, (int, np.integer)) else list(spatial_dims)
        if not dims or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
            raise ValueError(f"spatial_dims must be a sequence of ints, got {spatial_dims!r}")
        self.spatial_dims = tuple(int(d) for d in dims)

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        sp = x.dim() - 2
        if max(self.spatial_dims) > sp - 1 or min(self.spatial_dims) < 0:
            raise ValueError(f"`spatial_dims` values must be within [0, {sp - 1}]")
        size = x.shape[2:]
        chans = []
        for d in self.spatial_dims:
            line = torch.from_numpy(np.linspace(-0.5, 0.5, size[d])).to(x.device).to(x.dtype)
            shape = [1] * sp
            shape[d] = size[d]
            chans.append(line.view(shape).expand(size))
        coords = torch.stack(chans)[None].expand(x.shape[0], len(chans), *size)
        return restore(torch.cat([x, coords], 1))


class Compose:
    """Applies transforms in order; consecutive pointwise transforms run as one fused pass
    (one read and one write of the volume). The result equals applying them one by one.

    Lazy spatial composition (``fuse_spatial=True``, the default): consecutive spatial
    transforms that are index maps (Flip, RandFlip, RandAxisFlip, Rotate90, RandRotate90, Orientation,
    SpatialCrop, CenterSpatialCrop, Affine, RandAffine, Rotate, RandRotate, Spacing, and Resize /
    Zoom / RandZoom where their map is affine (RandZoom: see its docstring); their dictionary
    forms likewise, Spacingd / Orientationd included, with Spacingd's ensure_same_shape) are multiplied into one per-sample map (``M = M_first @ ... @ M_last``, output
    index -> input index, float64) and gathered by one resample launch, a following crop
    included. Random transforms draw exactly the parameters they draw when called one by one.
    The result is the step-by-step result with one interpolation instead of several: groups
    of exact steps only (flips, quarter turns, orientation, crops) are bit-identical; with
    interpolating steps the results agree away from the borders (near them, the fused gather
    reads real input voxels where the step-by-step one read an earlier step's padding).
    Interpolating steps of a group must agree on mode, padding and align_corners; a step that
    does not starts a new group. See ``voxaug.spatial.compose_spatial``.

    A crop sampler with ``as_batch=True`` (RandCropByPosNegLabeld, RandCropByLabelClassesd, RandWeightedCropd,
    RandSpatialCropSamplesd; RandSpatialCrop(d) always, one crop per sample) followed by such steps is
    fused with them: the sampler draws its centres, and the group's map, offset by each crop's
    start, gathers every patch straight from the full volume (``voxaug.ops.resample_patches``),
    so a rotated or zoomed-out patch has real data at its corners instead of padding, and the
    patches are never written and read twice. Exact steps (flips, quarter turns) give the same
    bytes as cropping first. Interpolating steps differ from crop-then-transform exactly where
    the latter reads the crop's zero border.

    A deformation (Rand3DElastic(d), GridDistortion(d), RandGridDistortion(d), TorchIO's
    RandomElasticDeformation) closes the spatial group before it: the group's map and the
    deformation's field are one ``resample_deformed`` launch (out(x) = in(M (x + u(x))), the same
    draws; RandomElasticDeformation's mm -> voxel scale from the spacing the group's output would
    have, and it runs unfused after a crop: see its docstring). Flips and crops right after a
    B-spline deformation (Rand3DElastic(d) with field 'fast', RandomElasticDeformation; plain
    tensors) fold into its launch too (the field is read through their map); other steps after a
    deformation start a new group. A crop sampler with ``as_batch=True`` before the deformation (directly or through
    such steps) joins that launch too: each patch is gathered from the full volume through its
    crop, the steps' map and the field planned on the patch grid (resample_deformed with the
    crops' starts), so the deformed patch reads real data beyond its window, not padding.

    A step that returns a list (a crop sampler without ``as_batch``: one dictionary per crop)
    hands each item to the remaining transforms, as MONAI's Compose (``map_items``) does; the
    result is the list.

    ``p`` (keyword, TorchIO's Compose(transforms, p=...)): the whole chain runs with probability
    p per sample, through a :class:`OneOf` of the chain alone with that p (seeded by
    set_random_state after the transforms); samples whose gate is closed stay as they are.
    """

    def __init__(self, transforms: Sequence[Callable], fuse_spatial: bool = True, *, p: float = 1.0):
        self.transforms = list(transforms)
        self.fuse_spatial = bool(fuse_spatial)
        # TorchIO's p (keyword): the whole chain runs with probability p, per sample, through a
        # OneOf of this chain alone with that p (its gate, its record on MetaTensors, its inverse).
        self.p = _check_prob(p)
        self._gate = OneOf([_Ungated(self)], p=self.p) if self.p < 1.0 else None

    def set_random_state(self, seed: Optional[int] = None):
        for i, t in enumerate(self.transforms):
            if hasattr(t, "set_random_state"):
                t.set_random_state(None if seed is None else seed * 1_000_003 + i)
        if self._gate is not None:  # the gate only (its transform is this chain)
            gate_seed = None if seed is None else seed * 1_000_003 + len(self.transforms)
            _Randomizable.set_random_state(self._gate, gate_seed)
        return self

    def inverse(self, data: Any) -> Any:
        """Undoes the transforms in reverse order (MONAI's Compose.inverse): each spatial
        transform pops its record from the MetaTensor(s); a group that was fused into one map is
        undone as one (one resample launch with the inverted product map). Intensity transforms
        are not invertible and are skipped, as MONAI skips them."""
        if self._gate is not None:
            return self._gate.inverse(data)
        from . import spatial

        return spatial.inverse_compose(self, data)

    @staticmethod
    def _fusable(t: Any, input_is_float: bool) -> bool:
        # Shift transforms give integer images back their dtype (_finish); on floating input,
        # which includes the output of any earlier fused step, they fuse like the rest.
        if not isinstance(t, _Pointwise) or not t._single_pass or getattr(t, "_torchio_p", 1.0) < 1.0:
            return False  # (a TorchIO gate p < 1 is drawn by the transform's own call)
        return type(t)._finish is _Pointwise._finish or input_is_float

    @staticmethod
    def _post_plan(t: Any, placeholders: Any, patches: dict) -> Optional[dict]:
        """The dictionary pointwise step `t` right after a fused crop gather, planned (its random
        draw made) for running inside that gather (ops.resample_patches post steps) when it can:
        one key, a floating patch batch whose dtype it keeps, steps whose plan needs nothing of
        the data (shift, scale, ScaleIntensityRange: no statistics). None: `t` runs as usual."""
        if not (isinstance(t, _Dict) and type(t).__call__ is _Dict.__call__ and len(t.keys) == 1
                and not any(f is not None for f in getattr(t, "factor_key", ()))
                and isinstance(placeholders, collections.abc.Mapping)):
            return None
        tr, ph = t.transform, placeholders.get(t.keys[0])
        if not (isinstance(ph, torch.Tensor) and id(ph) in patches and ph.is_floating_point()
                and type(tr) in (RandShiftIntensity, RandScaleIntensity, ShiftIntensity, ScaleIntensity,
                                 ScaleIntensityRange)
                and not getattr(tr, "_needs_input_stats", False) and not getattr(tr, "channel_wise", False)
                and tr._float_finish_is_identity and tr._out_dtype(ph) in (None, ph.dtype)):
            return None
        steps = tr._plan(ph)
        fusable = ops.post_fusable(steps) and all(s.values is None for s in steps)
        return {"id": id(ph) if fusable else None, "steps": steps, "done": False}

    @staticmethod
    def _new_tensors(before: Any, after: Any) -> set:
        """ids of the plain tensors in `after` (a Mapping) whose storage no tensor of `before`
        shares: buffers this call allocated, which later pointwise steps may update in place."""
        if not isinstance(before, collections.abc.Mapping) or not isinstance(after, collections.abc.Mapping):
            return set()
        old = {v.untyped_storage().data_ptr() for v in before.values() if isinstance(v, torch.Tensor)}
        return {id(v) for v in after.values()
                if type(v) is torch.Tensor and v.untyped_storage().data_ptr() not in old}

    def __call__(self, data: Any) -> Any:
        if self._gate is not None:
            return self._gate(data)
        return self._run(data)

    def _run(self, data: Any) -> Any:
        from . import spatial

        # Tensors this call allocated (a fused gather's outputs, or outputs of the pointwise
        # steps after it): a pointwise dictionary step updates them in place instead of
        # allocating and writing another buffer (same steps, same draws, same values).
        fresh: set = set()
        i = 0
        while i < len(self.transforms):
            t = self.transforms[i]
            if isinstance(data, (list, tuple)):
                # MONAI's map_items: a crop sampler returned one dictionary per crop; the remaining
                # transforms run on each in turn (as one Compose each, fused groups included).
                rest = Compose(self.transforms[i:], self.fuse_spatial)
                return [rest(item) for item in data]
            if (self.fuse_spatial and getattr(t, "as_batch", False) and hasattr(t, "draw_patches")
                    and isinstance(data, collections.abc.Mapping) == hasattr(t, "keys")
                    and i + 1 < len(self.transforms)
                    and spatial._lazy_candidate(self.transforms[i + 1])):
                # A crop sampler's batch followed by spatial steps: one gather from the full volumes.
                j = i + 1
                while j < len(self.transforms) and spatial._lazy_candidate(self.transforms[j]):
                    j += 1
                placeholders, patches = t.draw_patches(data)
                post = self._post_plan(self.transforms[j] if j < len(self.transforms) else None, placeholders,
                                       patches)
                out = spatial.compose_spatial(self.transforms[i + 1:j], placeholders, owner=self, patches=patches,
                                              post=post)
                fresh, data, i = self._new_tensors(data, out), out, j
                if post is not None:  # the pointwise step after the gather, drawn already
                    if not post["done"]:
                        data = self.transforms[j](data, _in_place=fresh, _steps=post["steps"])
                    i = j + 1
                continue
            if self.fuse_spatial and spatial._lazy_candidate(t):
                j = i + 1
                while j < len(self.transforms) and spatial._lazy_candidate(self.transforms[j]):
                    j += 1
                out = spatial.compose_spatial(self.transforms[i:j], data, owner=self)
                fresh, data, i = self._new_tensors(data, out), out, j
                continue
            if fresh and type(t).__call__ is _Dict.__call__ and isinstance(data, collections.abc.Mapping):
                out = t(data, _in_place=fresh)
                fresh = (fresh & {id(v) for v in out.values()}) | self._new_tensors(data, out)
                data = out
                i += 1
                continue
            fresh = set()
            if isinstance(data, collections.abc.Mapping) and isinstance(t, _Pointwise):
                data = t(data)  # a TorchIO intensity transform on a Subject dictionary: entry by entry
                i += 1
                continue
            x_float = _as_batch(data)[0].is_floating_point() if isinstance(t, _Pointwise) else False
            if not self._fusable(t, x_float):
                data = t(data)
                i += 1
                continue
            group = [t]
            while i + len(group) < len(self.transforms):
                nxt = self.transforms[i + len(group)]
                # A step that needs statistics of its own input starts a new pass.
                if not self._fusable(nxt, True) or getattr(nxt, "_needs_input_stats", False):
                    break
                group.append(nxt)
            i += len(group)
            if len(group) == 1:
                data = t(data)
                continue
            for start in range(0, len(group), 8):  # at most 8 steps fuse into one pass
                part = group[start:start + 8]
                x, restore = _as_batch(data)
                steps = [s for g in part for s in g._plan(x)]
                dtype = next((g.dtype for g in reversed(part) if g.dtype is not None), None)
                if dtype is None and not x.is_floating_point():
                    dtype = torch.float32
                data = restore(ops.pointwise_chain(x, steps, dtype=dtype))
        return data


class OneOf(_Randomizable):
    """MONAI OneOf(transforms, weights) / TorchIO OneOf({transform: weight}): applies one of
    `transforms`, transform j with probability weights[j] / sum(weights) (equal weights when
    None; MONAI's checks: as many weights as transforms, none negative, not all zero). An
    empty list returns the data as is; a list of items (a crop sampler's output) is mapped.

    Batches: each sample of an (N, C, D, H, W) batch (of a dictionary's 5-D tensors, which
    must agree on N) draws its own choice from Philox (keyed by the call's seed and the sample
    index, as the random transforms' parameters; `draw_choices`). When every sample chose the
    same transform, it runs on the data as is; otherwise the samples that chose transform j
    run through it as one sub-batch (in sample order) and the results are put back in sample
    order, so the choices must give equal shapes, dtypes and devices (ValueError naming the
    two transforms otherwise). A chosen random transform draws for its sub-batch. Other values
    of a dictionary (4-D tensors, metadata) go to every sub-batch as they are.

    MetaTensors (one applied_operations list for the whole batch), and dictionaries holding
    any, take one choice per call (sample 0's), as MONAI's OneOf does per call: the chosen
    transform runs, then OneOf appends its own record (``extra_info["index"]``) to each
    MetaTensor while MONAI's track_meta is on, so :meth:`inverse` (and Compose.inverse) pops it
    and undoes the chosen transform, as MONAI's. Inside a Compose, OneOf runs as itself
    (nothing fuses across it).

    ``p`` (keyword, TorchIO's): the OneOf applies with probability p, per sample (a second
    uniform of the sample's Philox row; p = 1 draws exactly as without it). A closed gate is the
    choice len(transforms): the sample stays as it is (MetaTensors: recorded, undone as nothing).
    """

    def __init__(self, transforms: Union[Sequence[Callable], Mapping[Callable, float], None] = None,
                 weights: Union[Sequence[float], float, None] = None, seed: Optional[int] = None, *,
                 p: float = 1.0):
        _Randomizable.__init__(self, None)
        self.p = _check_prob(p)
        if seed is not None:  # the choice only (set_random_state seeds the transforms too)
            _Randomizable.set_random_state(self, seed)
        if isinstance(transforms, collections.abc.Mapping):  # TorchIO: {transform: weight}
            if weights is not None:
                raise ValueError("weights must be None when transforms is a mapping {transform: weight}")
            transforms, weights = list(transforms.keys()), [float(w) for w in transforms.values()]
        self.transforms = [] if transforms is None else (
            [transforms] if callable(transforms) else list(transforms))
        for j, t in enumerate(self.transforms):
            if not callable(t):
                raise ValueError(f"transforms[{j}] must be callable, got {type(t).__name__}")
        n = len(self.transforms)
        if n == 0:
            w = np.zeros(0)
        elif weights is None or isinstance(weights, numbers.Real):
            w = np.full(n, 1.0 / n)
        else:
            w = np.asarray([float(v) for v in weights], dtype=np.float64)
            if w.shape != (n,):
                raise ValueError(f"weights must have one entry per transform ({n}), got {len(w)}")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError(f"weights must be finite and >= 0, got {w.tolist()}")
            if not np.any(w > 0):
                raise ValueError(f"at least one weight must be > 0, got {w.tolist()}")
            w = w / w.sum()
        self.weights = tuple(float(v) for v in w)
        self._cum = np.cumsum(w)

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        """Seeds the choice and, as Compose does, each transform (seed * 1_000_003 + j + 1)."""
        _Randomizable.set_random_state(self, seed, generator)
        for j, t in enumerate(self.transforms):
            if hasattr(t, "set_random_state"):
                t.set_random_state(None if seed is None else seed * 1_000_003 + j + 1)
        return self

    def draw_choices(self, batch_size: int = 1, first_sample: int = 0, seed: Optional[int] = None) -> list[int]:
        """The transform index of each sample: u ~ Philox(seed, first_sample + i), the first j with
        u < cumsum(weights)[j] (a zero weight is never chosen). With ``p`` < 1 a second uniform of
        the same row gates the sample: not below p, its choice is len(transforms), no transform."""
        if not self.transforms:
            raise ValueError("OneOf.draw_choices: there are no transforms to choose from")
        seed = self._next_seed() if seed is None else int(seed) & ((1 << 64) - 1)
        gated = self.p < 1.0
        u = ops.philox_uniform(seed, int(first_sample), int(batch_size), 2 if gated else 1).numpy()
        idx = np.searchsorted(self._cum, u[:, 0], side="right")
        # u < 1 <= cum[-1] up to rounding of the normalised sum: the last non-zero weight then
        last = int(np.flatnonzero(np.asarray(self.weights) > 0)[-1])
        skip = len(self.transforms)
        return [skip if gated and not u[i, 1] < self.p else min(int(j), last) for i, j in enumerate(idx)]

    @staticmethod
    def _batch_size(data: Any) -> tuple[int, bool]:
        """(N, has a MetaTensor) of the data's 5-D tensors (N = 1 without any)."""
        values = list(data.values()) if isinstance(data, collections.abc.Mapping) else [data]
        sizes = {int(v.shape[0]) for v in values if isinstance(v, torch.Tensor) and v.dim() == 5}
        if len(sizes) > 1:
            raise ValueError(f"data: the 5-D tensors must agree on the batch size, got {sorted(sizes)}")
        return (sizes.pop() if sizes else 1), any(_is_meta_tensor(v) for v in values)

    def __call__(self, data: Any) -> Any:
        if not self.transforms:
            return data
        if isinstance(data, (list, tuple)):  # MONAI's map_items
            return [self(item) for item in data]
        n, has_meta = self._batch_size(data)
        choices = self.draw_choices(1 if has_meta else n)
        if has_meta or len(set(choices)) == 1:
            out = self._apply_choice(choices[0], data)
            return self._push_record(out, choices[0]) if has_meta else out
        return self._mixed(data, n, choices)

    # The choice hooks (SomeOf's choices are ordered tuples of transform indices; OneOf's
    # len(transforms) is "none": the gate of p < 1 closed).
    def _apply_choice(self, choice: Any, data: Any) -> Any:
        return data if choice == len(self.transforms) else self.transforms[choice](data)

    def _choice_name(self, choice: Any) -> str:
        return f"no transform (p={self.p})" if choice == len(self.transforms) else f"transforms[{choice}]"

    def _record_info(self, choice: Any) -> dict:
        return {"index": int(choice)}

    def _mixed(self, data: Any, n: int, choices: list) -> Any:
        is_dict = isinstance(data, collections.abc.Mapping)
        d = dict(data) if is_dict else {None: data}
        split = [k for k, v in d.items() if isinstance(v, torch.Tensor) and v.dim() == 5]
        name = type(self).__name__
        result: dict = {}
        first: Any = None
        for j in sorted(set(choices)):
            rows = np.asarray([i for i, c in enumerate(choices) if c == j], dtype=np.int64)
            sub = dict(d)
            for k in split:
                sub[k] = d[k].index_select(0, _host_to(torch.from_numpy(rows), d[k].device))
            out = self._apply_choice(j, sub if is_dict else sub[None])
            if is_dict and not isinstance(out, collections.abc.Mapping):
                raise ValueError(f"{name}: {self._choice_name(j)} must return a dictionary for a dictionary, got "
                                 f"{type(out).__name__}")
            o = dict(out) if is_dict else {None: out}
            for k in split:
                v = o.get(k)
                if not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[0] != len(rows):
                    got = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
                    raise ValueError(f"{name}: {self._choice_name(j)} must return a batch of {len(rows)} for "
                                     f"{'img' if k is None else repr(k)} (its sub-batch), got {got}")
            if first is None:
                first = j
                result = {k: v for k, v in o.items() if k not in split}
                for k in split:
                    result[k] = torch.empty((n,) + tuple(o[k].shape[1:]), dtype=o[k].dtype, device=o[k].device)
            for k in split:
                v, r = o[k], result[k]
                if v.shape[1:] != r.shape[1:] or v.dtype != r.dtype or v.device != r.device:
                    raise ValueError(
                        f"{name}: samples that chose {self._choice_name(first)} and {self._choice_name(j)} must "
                        f"come out alike to form one batch ({'img' if k is None else repr(k)}: {tuple(r.shape[1:])} "
                        f"{r.dtype} on {r.device} per sample vs {tuple(v.shape[1:])} {v.dtype} on {v.device}); give "
                        f"the transforms equal output shapes and dtypes, or call {name} per sample")
                r.index_copy_(0, _host_to(torch.from_numpy(rows), r.device), v)
        return result if is_dict else result[None]

    def _push_record(self, out: Any, index: Any) -> Any:
        from . import spatial

        def push(v):
            if not spatial._tracking(v):
                return v
            from monai.data import MetaTensor

            rec = {spatial._CLASS: type(self).__name__, spatial._ID: id(self),
                   spatial._ORIG_SIZE: tuple(int(s) for s in v.shape[-3:]),
                   spatial._EXTRA: self._record_info(index), spatial._DO: True, spatial._TRACING: True,
                   spatial._LAZY_KEY: False}
            return MetaTensor(v.as_tensor(), meta=dict(v.meta), applied_operations=list(v.applied_operations) + [rec])

        if isinstance(out, collections.abc.Mapping):
            return {k: push(v) for k, v in out.items()}
        return push(out)

    def _pop_record(self, data: Any) -> tuple[Any, dict]:
        """(the data without this transform's record on each MetaTensor, the record's extra_info)."""
        is_dict = isinstance(data, collections.abc.Mapping)
        d = dict(data) if is_dict else {None: data}
        name = type(self).__name__
        info = None
        for k, v in d.items():
            if not _is_meta_tensor(v):
                continue
            rec = v.applied_operations[-1] if v.applied_operations else None
            if not isinstance(rec, collections.abc.Mapping) or rec.get("id") != id(self):
                raise RuntimeError(f"{name}.inverse: the last applied operation of "
                                   f"{'img' if k is None else f'data[{k!r}]'} is not this {name}'s record "
                                   f"(id {id(self)}); invert transforms in the reverse order of application")
            from monai.data import MetaTensor

            info = rec["extra_info"]
            d[k] = MetaTensor(v.as_tensor(), meta=dict(v.meta), applied_operations=list(v.applied_operations[:-1]))
        if info is None:
            raise ValueError(f"{name}.inverse: no MetaTensor in the data, so no record of what was applied "
                             f"({name} records on MetaTensors while MONAI's track_meta is on)")
        return (d if is_dict else d[None]), info

    def _undo(self, j: int, data: Any) -> Any:
        if j == len(self.transforms):  # the gate was closed: nothing was applied
            return data
        t = self.transforms[j]
        return t.inverse(data) if callable(getattr(t, "inverse", None)) else data

    def inverse(self, data: Any) -> Any:
        """MONAI's OneOf.inverse: pops OneOf's record (the chosen index) from each MetaTensor and
        undoes that transform (when it has an inverse; intensity transforms have none)."""
        if not self.transforms:
            return data
        out, info = self._pop_record(data)
        return self._undo(int(info["index"]), out)


class _Ungated:
    """A Compose with TorchIO's p < 1, as its gate's one transform: the chain itself."""

    def __init__(self, compose: "Compose"):
        self.compose = compose

    def __call__(self, data: Any) -> Any:
        return self.compose._run(data)

    def inverse(self, data: Any) -> Any:
        from . import spatial

        return spatial.inverse_compose(self.compose, data)


class SomeOf(OneOf):
    """MONAI SomeOf(transforms, num_transforms=None, replace=False, weights=None): applies k of
    `transforms` in a drawn order, k uniform in [min, max] of `num_transforms` (None: all; an
    int n: min(n, len); a pair (min, max)), the transforms drawn one after another with
    probability proportional to `weights` (uniform when None), without repeats unless `replace`.
    MONAI's argument checks; a weighted draw without replacement that could run out of non-zero
    weights is refused up front (numpy would raise at the call that draws too many).

    Batches: each sample draws its own k and order from Philox (`draw_choices`); the samples with
    the same ordered choice run as one sub-batch, as :class:`OneOf` does (equal output shapes and
    dtypes needed when they differ). MetaTensors take one draw per call, and SomeOf records
    ``extra_info["applied_order"]`` so that :meth:`inverse` undoes the applied transforms in
    reverse order, as MONAI's."""

    def __init__(self, transforms: Union[Sequence[Callable], Callable, None] = None,
                 num_transforms: Union[int, tuple[int, int], list, None] = None, replace: bool = False,
                 weights: Optional[Sequence[float]] = None, seed: Optional[int] = None):
        OneOf.__init__(self, transforms, None, seed)
        n = len(self.transforms)
        if num_transforms is not None and not isinstance(num_transforms, (int, tuple, list)):
            raise ValueError(f"Expected num_transforms to be of type int, list, tuple or None, but it's "
                             f"{type(num_transforms)}")
        if num_transforms is None:
            lo = hi = n
        elif isinstance(num_transforms, int):
            lo = hi = min(n, num_transforms)
        else:
            if len(num_transforms) != 2:
                raise ValueError(f"Expected len(num_transforms)=2, but it was {len(num_transforms)}")
            if not all(isinstance(v, int) for v in num_transforms):
                raise ValueError(f"Expected (int,int), but received ({type(num_transforms[0])}, "
                                 f"{type(num_transforms[1])})")
            lo, hi = num_transforms
        if lo < 0 or hi > n or lo > hi:
            raise ValueError(f"num_transforms={num_transforms} are out of the bounds [0, {n}].")
        self.min_num_transforms, self.max_num_transforms = int(lo), int(hi)
        self.replace = bool(replace)
        if weights is None or n == 0:
            w = np.full(n, 1.0 / max(n, 1))
        else:
            w = np.asarray([float(v) for v in weights], dtype=np.float64)
            if w.shape != (n,):
                raise ValueError(f"Expected len(weights)={n}, got: {len(w)}.")
            if not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError(f"Probabilities must be greater than or equal to zero, got {w}.")
            if np.all(w == 0):
                raise ValueError(f"At least one probability must be greater than zero, got {w}.")
            w = w / w.sum()
        if not self.replace and hi > int(np.count_nonzero(w)):
            raise ValueError(f"num_transforms allows {hi} transforms without replacement, but only "
                             f"{int(np.count_nonzero(w))} have a non-zero weight")
        self.weights = tuple(float(v) for v in w)

    def draw_choices(self, batch_size: int = 1, first_sample: int = 0, seed: Optional[int] = None) -> list:
        """Each sample's applied order (a tuple of transform indices): u ~ Philox(seed, first_sample
        + i); k = min + floor(u_0 (max - min + 1)); pick t takes the first j with u_{t+1} below the
        cumulative normalised weights of the transforms still available."""
        seed = self._next_seed() if seed is None else int(seed) & ((1 << 64) - 1)
        n = len(self.transforms)
        u = ops.philox_uniform(seed, int(first_sample), int(batch_size), 1 + max(self.max_num_transforms, 1)).numpy()
        span = self.max_num_transforms - self.min_num_transforms + 1
        out = []
        for row in u:
            k = self.min_num_transforms + min(int(row[0] * span), span - 1)
            w = np.asarray(self.weights, dtype=np.float64).copy()
            order = []
            for t in range(k):
                cum = np.cumsum(w / w.sum())
                j = min(int(np.searchsorted(cum, row[1 + t], side="right")), int(np.flatnonzero(w > 0)[-1]))
                order.append(j)
                if not self.replace:
                    w[j] = 0.0
            out.append(tuple(order))
        return out if n else [()] * int(batch_size)

    def _apply_choice(self, choice: tuple, data: Any) -> Any:
        for j in choice:
            data = self.transforms[j](data)
        return data

    def _choice_name(self, choice: tuple) -> str:
        return f"the order {list(choice)}"

    def _record_info(self, choice: tuple) -> dict:
        return {"applied_order": [int(j) for j in choice]}

    def inverse(self, data: Any) -> Any:
        """MONAI's SomeOf.inverse: pops SomeOf's record from each MetaTensor and undoes the applied
        transforms in reverse order (those with an inverse)."""
        if not self.transforms:
            return data
        out, info = self._pop_record(data)
        for j in reversed([int(j) for j in info["applied_order"]]):
            out = self._undo(j, out)
        return out


class RandomOrder(SomeOf):
    """MONAI RandomOrder(transforms): every transform, in an order drawn per sample (per call for
    MetaTensors, recorded for :meth:`inverse`); see :class:`SomeOf`."""

    def __init__(self, transforms: Union[Sequence[Callable], Callable, None] = None, seed: Optional[int] = None):
        SomeOf.__init__(self, transforms, None, False, None, seed)


# ---------------- dictionary forms ----------------
class _Dict:
    """Applies an array transform to ``keys``; random transforms share one draw across keys."""

    def __init__(self, keys: Union[Hashable, Sequence[Hashable]], transform: _Pointwise, allow_missing_keys: bool):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform = transform
        self.allow_missing_keys = allow_missing_keys

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        if isinstance(self.transform, _Randomizable):
            self.transform.set_random_state(seed, generator)
        return self

    def __call__(self, data: Mapping[Hashable, Any], _in_place: frozenset = frozenset(),
                 _steps: Optional[list] = None) -> dict:
        # _in_place (Compose only): ids of tensors the caller allocated and owns; such a key is
        # updated in place when the transform is a plain pointwise pass that keeps the dtype.
        # _steps (Compose only): the plan drawn already (Compose._post_plan), replayed.
        d = dict(data)
        steps: Optional[list[Step]] = _steps  # one random draw per call, shared by every key
        for index, key in _present_keys(d, self.keys, self.allow_missing_keys):
            in_place = id(d[key]) in _in_place and self._can_update_in_place(d[key])
            x5 = d[key] if not in_place or d[key].dim() == 5 else d[key].unsqueeze(0)
            if not isinstance(self.transform, _Randomizable):  # e.g. statistics of each key's image
                if in_place:
                    ops.pointwise_chain_(x5, _steps if _steps is not None else self.transform._plan(x5))
                else:
                    d[key] = self.transform(d[key]) if _steps is None else self.transform.apply(d[key], _steps)
                continue
            if steps is None:
                steps = self.transform._plan(_as_batch(d[key])[0])
            key_steps = self._key_steps(d, index, key, steps)
            if in_place:
                ops.pointwise_chain_(x5, key_steps)
            else:
                d[key] = self.transform.apply(d[key], key_steps)
        return d

    def _key_steps(self, d: Mapping, index: int, key: Hashable, steps: list) -> list:
        """The shared draw's steps as key `key` (the index-th of keys) runs them."""
        return steps

    def _can_update_in_place(self, x: Any) -> bool:
        tr = self.transform
        return (type(x) is torch.Tensor and x.is_floating_point() and not x.requires_grad
                and x.dim() in (4, 5) and x.is_contiguous() and isinstance(tr, _Pointwise)
                and tr._single_pass and type(tr).apply is _Pointwise.apply
                and tr._float_finish_is_identity and tr._out_dtype(x) in (None, x.dtype))


class _DictSharedSeed(_Dict):
    """Dictionary form of a random transform whose plan depends on each key's image (statistics):
    one seed per call, shared by every key, each key planned with its own image."""

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        seed = self.transform._next_seed()
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transform.apply(d[key], self.transform._plan(_as_batch(d[key])[0], seed))
        return d


class ScaleIntensityRanged(_Dict):
    def __init__(self, keys, a_min: float, a_max: float, b_min: Optional[float] = None, b_max: Optional[float] = None,
                 clip: bool = False, dtype: DtypeLike = torch.float32, allow_missing_keys: bool = False):
        super().__init__(keys, ScaleIntensityRange(a_min, a_max, b_min, b_max, clip, dtype), allow_missing_keys)


class ShiftIntensityd(_Dict):
    def __init__(self, keys, offset: float, safe: bool = False, allow_missing_keys: bool = False):
        super().__init__(keys, ShiftIntensity(offset, safe), allow_missing_keys)


class RandShiftIntensityd(_Dict):
    """MONAI RandShiftIntensityd; with `factor_key`, each key's offset is multiplied by
    ``d[meta_key][factor_key]`` (meta_key: ``meta_keys``' entry, else ``f"{key}_{meta_key_postfix}"``)
    when that metadata dictionary is in the data (one draw shared by every key, as MONAI's)."""

    def __init__(self, keys, offsets, safe: bool = False, factor_key: Optional[str] = None,
                 meta_keys=None, meta_key_postfix: str = "meta_dict", prob: float = 0.1,
                 channel_wise: bool = False, allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandShiftIntensity(offsets, safe, prob, channel_wise, seed), allow_missing_keys)
        n = len(self.keys)
        self.factor_key = list(factor_key) if isinstance(factor_key, (list, tuple)) else [factor_key] * n
        self.meta_keys = [None] * n if meta_keys is None else (
            [meta_keys] if isinstance(meta_keys, str) else list(meta_keys))
        self.meta_key_postfix = list(meta_key_postfix) if isinstance(meta_key_postfix, (list, tuple)) \
            else [meta_key_postfix] * n
        for name, v in (("factor_key", self.factor_key), ("meta_keys", self.meta_keys),
                        ("meta_key_postfix", self.meta_key_postfix)):
            if len(v) != n:
                raise ValueError(f"{name} must have one entry per key ({n}), got {len(v)}")

    def _key_steps(self, d: Mapping, index: int, key: Hashable, steps: list) -> list:
        meta_key = self.meta_keys[index] or f"{key}_{self.meta_key_postfix[index]}"
        if self.factor_key[index] is None or meta_key not in d:
            return steps
        factor = d[meta_key].get(self.factor_key[index])
        if factor is None:
            return steps
        lo, hi = steps[0].params[1:3]
        return [dataclasses.replace(steps[0], params=(0.0, lo * float(factor), hi * float(factor)))]


class ScaleIntensityd(_Dict):
    def __init__(self, keys, minv: Optional[float] = 0.0, maxv: Optional[float] = 1.0, factor: Optional[float] = None,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32, allow_missing_keys: bool = False):
        super().__init__(keys, ScaleIntensity(minv, maxv, factor, channel_wise, dtype), allow_missing_keys)


class RandScaleIntensityd(_Dict):
    def __init__(self, keys, factors, prob: float = 0.1, channel_wise: bool = False, dtype: DtypeLike = torch.float32,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandScaleIntensity(factors, prob, channel_wise, dtype, seed), allow_missing_keys)


class RandGaussianNoised(_Dict):
    def __init__(self, keys, prob: float = 0.1, mean: float = 0.0, std: float = 0.1, dtype: DtypeLike = torch.float32,
                 allow_missing_keys: bool = False, sample_std: bool = True, seed: Optional[int] = None):
        super().__init__(keys, RandGaussianNoise(prob, mean, std, dtype, sample_std, seed), allow_missing_keys)


class RandRicianNoised(_DictSharedSeed):
    """MONAI RandRicianNoised; every key gets the same draw (the same noise where shapes agree)."""

    def __init__(self, keys, prob: float = 0.1, mean: Union[Sequence[float], float] = 0.0,
                 std: Union[Sequence[float], float] = 1.0, channel_wise: bool = False,
                 relative: bool = False, sample_std: bool = True, dtype: DtypeLike = torch.float32,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandRicianNoise(prob, mean, std, channel_wise, relative, sample_std, dtype, seed),
                         allow_missing_keys)


class RandBiasFieldd(_DictSharedSeed):
    def __init__(self, keys, degree: int = 3, coeff_range: tuple[float, float] = (0.0, 0.1),
                 dtype: DtypeLike = torch.float32, prob: float = 0.1, allow_missing_keys: bool = False,
                 seed: Optional[int] = None):
        super().__init__(keys, RandBiasField(degree, coeff_range, dtype, prob, seed), allow_missing_keys)


class AdjustContrastd(_Dict):
    def __init__(self, keys, gamma: float, invert_image: bool = False, retain_stats: bool = False,
                 allow_missing_keys: bool = False):
        super().__init__(keys, AdjustContrast(gamma, invert_image, retain_stats), allow_missing_keys)


class RandAdjustContrastd(_DictSharedSeed):
    """MONAI RandAdjustContrastd: one gamma per call for every key, each key with its own min / max."""

    def __init__(self, keys, prob: float = 0.1, gamma: Union[Sequence[float], float] = (0.5, 4.5),
                 invert_image: bool = False, retain_stats: bool = False, allow_missing_keys: bool = False,
                 seed: Optional[int] = None):
        super().__init__(keys, RandAdjustContrast(prob, gamma, invert_image, retain_stats, seed), allow_missing_keys)


class StdShiftIntensityd(_Dict):
    def __init__(self, keys, factor: float, nonzero: bool = False, channel_wise: bool = False,
                 dtype: DtypeLike = torch.float32, allow_missing_keys: bool = False):
        super().__init__(keys, StdShiftIntensity(factor, nonzero, channel_wise, dtype), allow_missing_keys)


class RandStdShiftIntensityd(_DictSharedSeed):
    """MONAI RandStdShiftIntensityd: one factor per call for every key, each key with its own std."""

    def __init__(self, keys, factors: Union[tuple[float, float], float], prob: float = 0.1, nonzero: bool = False,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32, allow_missing_keys: bool = False,
                 seed: Optional[int] = None):
        super().__init__(keys, RandStdShiftIntensity(factors, prob, nonzero, channel_wise, dtype, seed),
                         allow_missing_keys)


class ScaleIntensityFixedMeand(_Dict):
    def __init__(self, keys, factor: float = 0, preserve_range: bool = False, fixed_mean: bool = True,
                 channel_wise: bool = False, dtype: DtypeLike = torch.float32, allow_missing_keys: bool = False):
        super().__init__(keys, ScaleIntensityFixedMean(factor, preserve_range, fixed_mean, channel_wise, dtype),
                         allow_missing_keys)


class RandScaleIntensityFixedMeand(_DictSharedSeed):
    """MONAI RandScaleIntensityFixedMeand: one factor (per channel with ``channel_wise``) per call for
    every key, each key with its own statistics."""

    def __init__(self, keys, factors: Union[Sequence[float], float], fixed_mean: bool = True,
                 preserve_range: bool = False, prob: float = 0.1, dtype: DtypeLike = torch.float32,
                 allow_missing_keys: bool = False, channel_wise: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandScaleIntensityFixedMean(prob, factors, fixed_mean, preserve_range, dtype,
                                                           channel_wise, seed), allow_missing_keys)


class RandHistogramShiftd(_DictSharedSeed):
    """MONAI RandHistogramShiftd: the same control points for every key, each key scaled to its own
    min / max."""

    def __init__(self, keys, num_control_points: Union[tuple[int, int], int] = 10, prob: float = 0.1,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        super().__init__(keys, RandHistogramShift(num_control_points, prob, seed), allow_missing_keys)


# ---------------- spatial family (python/voxaug/spatial.py) ----------------
from .spatial import *  # noqa: E402,F401,F403
class ThresholdIntensityd(_Dict):
    def __init__(self, keys, threshold: float, above: bool = True, cval: float = 0.0,
                 allow_missing_keys: bool = False):
        super().__init__(keys, ThresholdIntensity(threshold, above, cval), allow_missing_keys)


class MaskIntensityd:
    """MONAI MaskIntensityd: the mask is ``mask_data``, or ``data[mask_key]`` when mask_data is None."""

    def __init__(self, keys, mask_data: Any = None, mask_key: Optional[str] = None,
                 select_fn: Callable = lambda m: m > 0, allow_missing_keys: bool = False):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform = MaskIntensity(mask_data, select_fn)
        self.mask_key, self.allow_missing_keys = mask_key, allow_missing_keys

    def __call__(self, data: Mapping[Hashable, Any]) -> dict:
        d = dict(data)
        mask = d[self.mask_key] if self.mask_key is not None else None
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transform(d[key], mask)
        return d


class AddCoordinateChannelsd(_Dict):
    def __init__(self, keys, spatial_dims: Sequence[int], allow_missing_keys: bool = False):
        super().__init__(keys, AddCoordinateChannels(spatial_dims), allow_missing_keys)


from .spatial import __all__ as _spatial_all  # noqa: E402

__all__ += _spatial_all
