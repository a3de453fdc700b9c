"""Thin Python entry points to ``torch.ops.voxaug`` (5-D (N, C, D, H, W) tensors).

Chains use the canonical flat form documented in torch_ext/ops.cpp; :class:`Step` builds it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

# Op codes and flag bits of the canonical chain form (torch_ext/ops.cpp).
SCALE_INTENSITY_RANGE, SHIFT_INTENSITY, SCALE_INTENSITY, GAUSSIAN_NOISE, RESCALE_INTENSITY = 0, 1, 2, 3, 4
HAS_B_MIN, HAS_B_MAX, CLIP, RANDOM, CHANNEL_WISE, SAMPLE_STD = 1, 2, 4, 8, 16, 32
HAS_MINV, HAS_MAXV = HAS_B_MIN, HAS_B_MAX
RICIAN_NOISE, BIAS_FIELD, ADJUST_CONTRAST, GAMMA = 5, 6, 7, 8
MONOMIAL_BASIS, INVERT_IMAGE = 64, 128
MAX_BIAS_FIELD_DEGREE = 7
# 9: MONAI RandHistogramShift's piecewise-linear map; values: (N, 2 + K) float64 table (min, max
# from minmax, then the floating control points in units of the range, NaN-padded; reference
# points linspace(0, 1, count)). 10: MONAI StdShiftIntensity (values: moments (N, 1 or C, 3)).
# 11: MONAI ScaleIntensityFixedMean (values: (N, 1 or C, 3) float64 mean, min, max).
HISTOGRAM_SHIFT, STD_SHIFT_INTENSITY, SCALE_INTENSITY_FIXED_MEAN = 9, 10, 11
NONZERO, FIXED_MEAN, PRESERVE_RANGE = 256, 512, 1024
MAX_HISTOGRAM_POINTS = 4096


def bias_field_coefficients(degree: int) -> int:
    """Coefficients of a 3-D bias field of `degree`: (d + 1)(d + 2)(d + 3) / 6 (MONAI's count)."""
    return (degree + 1) * (degree + 2) * (degree + 3) // 6


@dataclass
class Step:
    """One pointwise step: op code, flag bits, up to 7 parameters, gate probability, seed."""

    op: int
    flags: int = 0
    params: Sequence[float] = ()
    prob: float = 1.0
    seed: int = 0
    values: Optional[torch.Tensor] = None
    extra: dict = field(default_factory=dict)

    def row(self) -> list[float]:
        p = [float(v) for v in self.params]
        if len(p) > 7:
            raise ValueError(f"a step has at most 7 parameters, got {len(p)}")
        return p + [0.0] * (7 - len(p)) + [float(self.prob)]


def _signed64(seed: int) -> int:
    seed &= (1 << 64) - 1
    return seed - (1 << 64) if seed >= (1 << 63) else seed


def _lists(steps: Sequence[Step]):
    ops = [s.op for s in steps]
    flags = [s.flags for s in steps]
    params = [v for s in steps for v in s.row()]
    seeds = [_signed64(s.seed) for s in steps]
    values = [s.values for s in steps]
    return ops, flags, params, seeds, values


def pointwise_chain(image: torch.Tensor, steps: Sequence[Step], first_sample: int = 0,
                    dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """All steps in one pass over memory (differentiable w.r.t. ``image``)."""
    return torch.ops.voxaug.pointwise_chain(image, *_lists(steps), first_sample, dtype)


def pointwise_chain_(image: torch.Tensor, steps: Sequence[Step], first_sample: int = 0) -> torch.Tensor:
    """In-place form of :func:`pointwise_chain` (floating images; not differentiable)."""
    torch.ops.voxaug.pointwise_chain_(image, *_lists(steps), first_sample)
    return image


def _in_place(op):
    # The in-place ops return nothing (so torch.compile can functionalise them); the
    # Python forms return the mutated image for chaining.
    def run(image: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        op(image, *args, **kwargs)
        return image

    run.__name__ = str(op).rsplit(".", 1)[-1]
    run.__doc__ = f"In-place {run.__name__}: mutates and returns `image`."
    return run


minmax = torch.ops.voxaug.minmax


def philox_uniform(seed: int, first_sample: int, batch: int, count: int) -> torch.Tensor:
    """(batch, count) float64 uniforms in [0, 1) on the CPU: Philox keyed by `seed`, row i is
    global sample first_sample + i (host-side parameter draws of the spatial transforms)."""
    return torch.ops.voxaug.philox_uniform(_signed64(seed), first_sample, batch, count)


def host_cache_bytes() -> int:
    """Bytes of freed CPU outputs the ops keep for reuse (outputs of 32 MiB and more: glibc
    maps each such allocation afresh, so every call would page-fault on its output; at most
    VOXAUG_HOST_CACHE_MB MiB, read at the first large output, default 1024, 0 keeps none)."""
    return int(torch.ops.voxaug.host_cache_bytes())


def release_host_cache() -> int:
    """Frees the CPU output buffers kept for reuse (see host_cache_bytes); returns the bytes."""
    return int(torch.ops.voxaug.release_host_cache())


scale_intensity_range = torch.ops.voxaug.scale_intensity_range
scale_intensity_range_ = _in_place(torch.ops.voxaug.scale_intensity_range_)
shift_intensity = torch.ops.voxaug.shift_intensity
shift_intensity_ = _in_place(torch.ops.voxaug.shift_intensity_)
scale_intensity = torch.ops.voxaug.scale_intensity
scale_intensity_ = _in_place(torch.ops.voxaug.scale_intensity_)
rand_shift_intensity = torch.ops.voxaug.rand_shift_intensity
rand_shift_intensity_ = _in_place(torch.ops.voxaug.rand_shift_intensity_)
rand_scale_intensity = torch.ops.voxaug.rand_scale_intensity
rand_scale_intensity_ = _in_place(torch.ops.voxaug.rand_scale_intensity_)
rand_gaussian_noise = torch.ops.voxaug.rand_gaussian_noise
rand_gaussian_noise_ = _in_place(torch.ops.voxaug.rand_gaussian_noise_)

# ---------------- spatial family ----------------
NEAREST, LINEAR, CUBIC, QUADRATIC, QUARTIC, QUINTIC = 0, 1, 2, 3, 4, 5
# The B-splines by name: cubic is order 3, quadratic / quartic / quintic orders 2 / 4 / 5
# (scipy's map_coordinates orders, prefiltered so that they interpolate).
MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC, "quadratic": QUADRATIC, "quartic": QUARTIC,
         "quintic": QUINTIC}
# "cutoff" is scipy's 'constant' (MONAI's 'zeros' with its integer spline modes): the pad value
# wherever the coordinate is outside [0, S-1], no blending; the spline taps read the mirror.
PADDING = {"zeros": 0, "border": 1, "reflection": 2, "constant": 3, "cutoff": 4}


def _modes_paddings(inputs, modes, paddings, pad_values):
    """Mode and padding names -> the ops' codes (ints pass through; the op checks them)."""
    def code(table, v, what):
        if isinstance(v, int):
            return v
        if v not in table:
            raise ValueError(f"{what} must be one of {sorted(table)} or its code, got {v!r}")
        return table[v]
    modes = [code(MODES, m, "mode") for m in modes]
    paddings = [code(PADDING, p, "padding") for p in paddings]
    pad_values = [0.0] * len(inputs) if pad_values is None else [float(v) for v in pad_values]
    return modes, paddings, pad_values


def resample(inputs, matrices: torch.Tensor, out_size, modes, paddings, pad_values=None,
             align_corners: bool = False):
    """Resamples each (N, C, D, H, W) tensor of `inputs` through the per-sample (N, 3, 4)
    `matrices` (output voxel index -> input voxel index) onto an `out_size` grid, all in one
    launch. `modes`: "nearest" / "linear" / "cubic" (or 0 / 1 / 2) per input, or the B-splines of
    order 2 / 4 / 5, "quadratic" / "quartic" / "quintic" (3 / 4 / 5); `paddings`: "zeros",
    "border", "reflection", "constant" or "cutoff" (scipy's 'constant') per input."""
    inputs = list(inputs)
    modes, paddings, pad_values = _modes_paddings(inputs, modes, paddings, pad_values)
    return torch.ops.voxaug.resample(inputs, matrices, list(out_size), modes, paddings, pad_values,
                                     align_corners)


# Pointwise steps that may run inside a resample gather, on the values as they are stored
# (include/voxaug/resample.h, ResampleTarget::post): no statistics of their input, no per-voxel
# random numbers, not channel-wise.
MAX_POST_STEPS = 4


def post_fusable(steps: Sequence[Step]) -> bool:
    """Whether `steps` can run inside a resample gather (``post_steps`` of resample_patches):
    ScaleIntensityRange, Shift / ScaleIntensity (fixed, per-sample or random, not channel-wise)
    and a fixed Gamma (a random one is drawn per channel)."""
    def ok(s: Step) -> bool:
        if s.flags & CHANNEL_WISE:
            return False
        return s.op in (SCALE_INTENSITY_RANGE, SHIFT_INTENSITY, SCALE_INTENSITY) or (
            s.op == GAMMA and not s.flags & RANDOM)
    return 0 < len(steps) <= MAX_POST_STEPS and all(ok(s) for s in steps)


def resample_patches(inputs, matrices: torch.Tensor, starts: torch.Tensor, out_size, modes, paddings,
                     pad_values=None, align_corners: bool = False, post_input: Optional[int] = None,
                     post_steps: Sequence[Step] = (), post_first_sample: int = 0):
    """A crop followed by a spatial map, as one gather from the full volumes: each (M, C, D, H, W)
    tensor of `inputs` gives (M * K, C, *out_size), patch m * K + k read from volume m through
    ``matrices[m * K + k]`` (output index -> index inside the patch) offset by ``starts[m, k]``
    ((M, K, 3) integer crop starts on the inputs' device). Voxels the map sends outside the crop
    window read the volume there; outside the volume the padding applies.

    ``post_steps`` (see :func:`post_fusable`) run on input ``post_input``'s patches as they are
    stored: the bytes of ``pointwise_chain_(patches, post_steps, post_first_sample)`` after the
    gather, without a second pass over memory."""
    inputs = list(inputs)
    modes, paddings, pad_values = _modes_paddings(inputs, modes, paddings, pad_values)
    if not post_steps:
        return torch.ops.voxaug.resample_patches(inputs, matrices, starts, list(out_size), modes, paddings,
                                                 pad_values, align_corners)
    return torch.ops.voxaug.resample_patches_post(inputs, matrices, starts, list(out_size), modes, paddings,
                                                  pad_values, align_corners,
                                                  -1 if post_input is None else int(post_input),
                                                  *_lists(post_steps), int(post_first_sample))


# ---------------- crop family ----------------
def foreground_bbox(image: torch.Tensor, threshold: float = 0.0, channel_indices=None) -> torch.Tensor:
    """(N, 6) int64 on the image's device: per sample the half-open box (d0, h0, w0, d1, h1, w1)
    of the voxels where any selected channel is > threshold (zeros without foreground). No
    host synchronisation."""
    ch = None if channel_indices is None else [int(c) for c in channel_indices]
    return torch.ops.voxaug.foreground_bbox(image, float(threshold), ch)


# ---------------- label family ----------------
def connected_components(mask: torch.Tensor, connectivity: int = 3) -> torch.Tensor:
    """Canonical connected-component labels of every (n, c) volume of a 5-D mask (nonzero =
    foreground): int32, 0 background, else 1 + the C-order index of the component's first voxel;
    connectivity 1 / 2 / 3 (6 / 18 / 26 neighbours). On the mask's device, no host sync."""
    return torch.ops.voxaug.connected_components(mask, int(connectivity))


def largest_components(labels: torch.Tensor, num_components: int = 1) -> torch.Tensor:
    """Bool mask of the `num_components` largest components of each (n, c) volume of
    `connected_components` labels (int32, 5-D): larger first, then the smaller label (MONAI's
    get_largest_connected_component_mask). On the labels' device, no host sync."""
    return torch.ops.voxaug.largest_components(labels, int(num_components))


def component_sizes(labels: torch.Tensor) -> torch.Tensor:
    """int32: the voxel count of each voxel's component in `connected_components` labels (0 for
    background). On the labels' device, no host sync."""
    return torch.ops.voxaug.component_sizes(labels)


def distance_transform_edt(mask: torch.Tensor, spacing=(1.0,), dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Each voxel's Euclidean distance to the nearest zero voxel of its (n, c) volume of a 5-D mask,
    axes scaled by `spacing` (one value or (d, h, w)); 0 on zero voxels; scipy's
    distance_transform_edt per volume (a volume without zeros: scipy's virtual voxel (-1, 0, 0)).
    float64 unless `dtype` is torch.float32. On the mask's device, no host sync."""
    sp = [float(spacing)] if isinstance(spacing, (int, float)) else [float(v) for v in spacing]
    return torch.ops.voxaug.distance_transform_edt(mask, sp, dtype)


# ---------------- deform family ----------------
BSPLINE_FIELD, DENSE_FIELD, SEPARABLE_FIELD = 1, 2, 3


def resample_deformed(inputs, matrices: torch.Tensor, field: torch.Tensor, field_kind: int, out_size, modes,
                      paddings, pad_values=None, align_corners: bool = False, field_scale=(1.0, 1.0, 1.0),
                      field_offset=(0.0, 0.0, 0.0), field_map: Optional[torch.Tensor] = None,
                      starts: Optional[torch.Tensor] = None):
    """:func:`resample` through a displacement field: out(x) = in(M (x + u(x))), u in output voxels
    (include/voxaug/deform.h). `field_kind`: BSPLINE_FIELD (control grid (N, 3, Kd, Kh, Kw), control
    index g = field_scale * x + field_offset per axis), DENSE_FIELD ((N, 3, D', H', W')) or
    SEPARABLE_FIELD ((N, 3, L, 1, 1): u_a depends on x_a only). `field_map` (B-spline): per-sample
    (N, 6) float64 (scale d, h, w, offset d, h, w) on the data's device instead of the shared
    scale / offset. `starts` ((M, K, 3) integer crop starts on the data's device, as
    :func:`resample_patches`): K patches per (M, C, D, H, W) input, `matrices`, the field and
    `field_map` for the M * K patches (patch coordinates); patch (m, k) reads volume m, so the
    crop, the map and the deformation are one gather from the full volumes. One launch for all
    inputs."""
    inputs = list(inputs)
    modes, paddings, pad_values = _modes_paddings(inputs, modes, paddings, pad_values)
    return torch.ops.voxaug.resample_deformed(inputs, matrices, field, int(field_kind),
                                              [float(v) for v in field_scale], [float(v) for v in field_offset],
                                              list(out_size), modes, paddings, pad_values, align_corners,
                                              field_map, starts)


def deform_field_dense(field: torch.Tensor, field_kind: int, out_size, field_scale=(1.0, 1.0, 1.0),
                       field_offset=(0.0, 0.0, 0.0), dtype: Optional[torch.dtype] = None,
                       field_map: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The displacement u(x) of every output voxel, (N, 3, D', H', W') (same field conventions as
    :func:`resample_deformed`)."""
    return torch.ops.voxaug.deform_field_dense(field, int(field_kind), [float(v) for v in field_scale],
                                               [float(v) for v in field_offset], list(out_size), dtype,
                                               field_map)


def uniform_fill_(out: torch.Tensor, low: float, high: float, seed: int, first_sample: int = 0) -> torch.Tensor:
    """Fills the 5-D floating `out` with U(low, high) from Philox keyed by (seed, first_sample + n,
    element), on its device, in place; returns it."""
    torch.ops.voxaug.uniform_fill_(out, float(low), float(high), _signed64(seed), int(first_sample))
    return out


# ---------------- filter family ----------------
def _per_sample_sigma(sigma, n: int) -> torch.Tensor:
    """sigma as an (n, 3) float64 CPU tensor: a number, 3 numbers (D, H, W), or (n, 3)."""
    s = torch.as_tensor(sigma, dtype=torch.float64)
    if s.device.type != "cpu":
        raise ValueError(f"sigma must be on the CPU (the taps are built on the host), got {s.device}")
    if s.dim() == 0:
        return s.expand(n, 3).contiguous()
    if s.dim() == 1 and s.shape[0] == 3:
        return s.expand(n, 3).contiguous()
    if s.dim() == 2 and tuple(s.shape) == (n, 3):
        return s.contiguous()
    raise ValueError(f"sigma must be a number, 3 numbers (D, H, W) or ({n}, 3), got shape {tuple(s.shape)}")


def gaussian_smooth(image: torch.Tensor, sigma, truncated: float = 4.0,
                    dtype: Optional[torch.dtype] = None, taps: str = "erf", border: str = "zeros") -> torch.Tensor:
    """A separable Gaussian filter on an (N, C, D, H, W) tensor in one launch per axis; `sigma`
    in voxels: a number, (D, H, W), or an (N, 3) per-sample CPU tensor. ``taps="erf",
    border="zeros"`` (the defaults) is MONAI's GaussianFilter; ``taps="sampled",
    border="reflect"`` is scipy.ndimage.gaussian_filter's (``truncated``: scipy's truncate).
    Differentiable w.r.t. `image`."""
    s = _per_sample_sigma(sigma, image.shape[0])
    return torch.ops.voxaug.gaussian_smooth(image, s, float(truncated), dtype, taps, border)


# ---------------- stats family ----------------
def moments(image: torch.Tensor, channel_wise: bool = False, nonzero: bool = False) -> torch.Tensor:
    """(N, 1 or C, 3) float64 on the image's device: count, mean and population std (ddof 0) of
    each sample (each channel with `channel_wise`); with `nonzero` only values != 0 count. No
    host sync; deterministic, identical on the CPU and CUDA."""
    return torch.ops.voxaug.moments(image, bool(channel_wise), bool(nonzero))


def percentiles(image: torch.Tensor, q, channel_wise: bool = False) -> torch.Tensor:
    """(N, 1 or C, len(q)) float64 on the image's device: exact q-th percentiles (q in [0, 100],
    numpy.percentile's default linear method) of each sample (each channel with
    `channel_wise`). A NaN in a segment gives NaN. No host sync."""
    q = [float(v) for v in (q if isinstance(q, (list, tuple)) else torch.as_tensor(q).flatten().tolist())]
    return torch.ops.voxaug.percentiles(image, q, bool(channel_wise))


def piecewise_linear(image: torch.Tensor, table: torch.Tensor, pieces: int) -> torch.Tensor:
    """float32 (N, C, D, H, W) -> float32: per sample, float32(slope[k] * x + intercept[k]) in float64
    with k = the number of edges <= x (numpy.digitize, right=False); `table` (N, 3 * pieces - 1)
    float64 on the image's device: pieces - 1 edges, pieces slopes, pieces intercepts (TorchIO
    HistogramStandardization's map). No host sync."""
    return torch.ops.voxaug.piecewise_linear(image, table, int(pieces))


def _value_list(v):
    if v is None:
        return None
    return [float(x) for x in torch.as_tensor(v, dtype=torch.float64).flatten().tolist()]


def normalize_intensity(image: torch.Tensor, subtrahend=None, divisor=None, nonzero: bool = False,
                        channel_wise: bool = False, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """MONAI NormalizeIntensity on an (N, C, D, H, W) batch: (x - sub) / div per sample (per channel
    with `channel_wise`), sub / div the mean / std unless given (one value, or one per channel);
    div == 0 -> 1; with `nonzero` only values != 0 count and change. Output dtype: `dtype`, else
    the image's (float32 for integer images)."""
    return torch.ops.voxaug.normalize_intensity(image, _value_list(subtrahend), _value_list(divisor),
                                                bool(nonzero), bool(channel_wise), dtype)


def scale_intensity_range_percentiles(image: torch.Tensor, lower: float, upper: float,
                                      b_min: Optional[float] = None, b_max: Optional[float] = None,
                                      clip: bool = False, relative: bool = False, channel_wise: bool = False,
                                      dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """MONAI ScaleIntensityRangePercentiles on an (N, C, D, H, W) batch: per sample (per channel with
    `channel_wise`) ScaleIntensityRange(a_min = lower-th percentile, a_max = upper-th percentile,
    b_min, b_max, clip), `relative` as MONAI. One sort for the batch, no host sync."""
    return torch.ops.voxaug.scale_intensity_range_percentiles(
        image, float(lower), float(upper), None if b_min is None else float(b_min),
        None if b_max is None else float(b_max), bool(clip), bool(relative), bool(channel_wise), dtype)
