"""k-space artefacts, batched on the data's device: TorchIO Ghosting / RandomGhosting, Spike /
RandomSpike and Motion / RandomMotion, MONAI KSpaceSpikeNoise(d) / RandKSpaceSpikeNoise(d).
(MONAI's Gibbs ringing and TorchIO's RandomAnisotropy are in :mod:`voxaug.degrade`.)

TorchIO and MONAI transform one channel of one image at a time: the centred spectrum (``fftn``,
``fftshift``), the change in k-space, the inverse (``ifftshift``, ``ifftn``) and its real part.
voxaug transforms a batch, every sample with its own random parameters drawn on the host with
Philox (no host sync: the draws need the shape only), and uses what each artefact is to do less:

- **Ghosting** scales planes of k-space along one axis by a real factor. The real part of the
  inverse transform of ``M(k) X(k)`` is the inverse transform of ``X(k) (M(k) + M(-k)) / 2``
  (``X`` is Hermitian, ``M`` real), and a factor of one frequency axis is a filter along that
  axis alone: so each sample goes through 1-D real transforms along its axis (``rfft`` /
  ``irfft``) with the symmetrised factor, in natural (unshifted) order, no 3-D transform and no
  shift materialised.
- **Spikes** change a few k-space values. The real part of the inverse transform of a change
  ``c`` at frequency ``k`` is the plane wave ``Re(c exp(2 pi i k.n / N)) / N``, so the artefact is
  added to the image directly (one batched matrix product per batch, separable in the three
  axes) and no inverse FFT runs. TorchIO's spike height is a fraction of the spectrum's maximum
  magnitude (recomputed before every spike, as TorchIO does): one ``rfftn`` per batch and a
  maximum of the magnitudes per spike. MONAI's spike sets the log-magnitude at the location,
  keeping its phase: the value there comes from a float64 DFT at that one frequency (a pass
  over the image), and an FFT runs only for MONAI's default intensity (the mean log-magnitude
  of the spectrum).
- **Motion** fills segments of the last frequency axis from the spectra of the original and the
  moved images: again a filter along one axis per image, so 1-D real transforms along it and one
  inverse; the moved images come from voxaug's resample with SimpleITK's geometry and edge rule.

The results equal TorchIO's and MONAI's up to the rounding of their FFT round trips (about
1e-6 of the image's range in float32); MONAI's log / exp of every k-space value (which also
adds 1e-10 to every magnitude) is not repeated for the values it does not change. TorchIO
returns float32; MONAI's transforms keep the input's dtype (integers truncate). float16 /
bfloat16 inputs are transformed in float32 (torch's CPU FFT takes no half types).
"""
from __future__ import annotations

import collections.abc
import numbers
from typing import Any, Hashable, Mapping, Optional, Sequence, Union

import numpy as np
import torch

from . import ops
from .degrade import _check_interp, _Degrade
from .spatial import _anatomical_indices, _torchio_axes
from .transforms import _as_batch, _check_prob, _host_to, _present_keys, _Randomizable, _Subject, _torchio_range

__all__ = [
    "Ghosting", "RandomGhosting", "Spike", "RandomSpike", "Motion", "RandomMotion",
    "KSpaceSpikeNoise", "KSpaceSpikeNoised", "RandKSpaceSpikeNoise", "RandKSpaceSpikeNoised",
]

_DIMS = (-3, -2, -1)


def _work(x: torch.Tensor) -> torch.Tensor:
    """x as the FFT's real dtype: float64 stays, everything else becomes float32."""
    return x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)


def _magnitude(spec: torch.Tensor) -> torch.Tensor:
    """|spec| as sqrt(re * re + im * im) in the spectrum's precision: within one rounding of
    torch.abs (hypot), whose CPU kernel is scalar and three times slower."""
    r = torch.view_as_real(spec)
    re, im = r[..., 0], r[..., 1]
    return (re * re).addcmul_(im, im).sqrt_()


def _torchio_int_range(value: Any, name: str) -> tuple[int, int]:
    """TorchIO's integer range with min_constraint 0: d -> (0, d), (a, b) with 0 <= a <= b, ints."""
    def is_int(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not is_int(value):
            raise ValueError(f"If {name} is a single number, it must be of type int, not {value!r}")
        if value < 0:
            raise ValueError(f"If {name} is a single number, it must be positive, not {value!r}")
        return 0, int(value)
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(is_int(v) for v in pair):
        raise ValueError(f"{name} must be an int or a sequence of two ints, got {value!r}")
    lo, hi = int(pair[0]), int(pair[1])
    if not 0 <= lo <= hi:
        raise ValueError(f"{name} must satisfy 0 <= min <= max, got {value!r}")
    return lo, hi


def _randint(lo: int, hi: int, u: np.ndarray) -> np.ndarray:
    """Integers uniform on [lo, hi] from float64 uniforms in [0, 1)."""
    return lo + np.minimum(np.floor(u * (hi - lo + 1)).astype(np.int64), hi - lo)


def _on_applied(x: torch.Tensor, applied: torch.Tensor, fn, out_dtype: Optional[torch.dtype] = torch.float32
                ) -> torch.Tensor:
    """fn(part, idx) on the samples whose gate is open (idx: their host indices; part: those
    samples, or x itself when all are), merged into a copy of x in out_dtype (x's dtype for None)
    where only some are."""
    sel = torch.nonzero(applied).flatten()
    idx = sel.numpy()
    if len(idx) == x.shape[0]:
        return fn(x, idx)
    dev_sel = _host_to(sel, x.device)
    part = fn(x.index_select(0, dev_sel), idx)
    out = x.to(out_dtype or x.dtype, copy=True)
    out.index_copy_(0, dev_sel, part)
    return out


class _TorchIOIntensity(_Subject, _Degrade):
    """TorchIO's intensity-transform calling convention (:class:`voxaug.transforms._Subject`): a
    tensor ((C, D, H, W) or a batch), or a dictionary whose intensity images (4-D / 5-D tensors
    not under `label_keys`) each get their own draw, as TorchIO draws per image."""


# ---------------- ghosting ----------------
def _ghost_factor(size: int, ghosts: int, strength: float, restore: Optional[float]) -> np.ndarray:
    """TorchIO Ghosting's multiplier of the centred spectrum along the axis (every `ghosts`-th
    plane times float32(1 - strength), the centre restored), in natural FFT order and made
    symmetric under k -> -k (see the module notes), float64."""
    m = np.ones(size)
    m[::ghosts] = np.float32(1.0 - strength)
    mid = size // 2
    if restore is None:
        m[mid: mid + 1] = 1.0
    else:
        half = int(np.round(restore * size)) // 2
        m[mid - half: mid + half] = 1.0
    k = np.arange(size)
    natural = m[(k + mid) % size]
    return 0.5 * (natural + natural[(-k) % size])


def _ghost(x: torch.Tensor, axis: np.ndarray, ghosts: np.ndarray, strength: np.ndarray,
           restore: Sequence[Optional[float]]) -> torch.Tensor:
    """Ghosting of every sample of x (M, C, D, H, W) with its own parameters. The factor depends on
    the frequency along one axis only, so the 3-D transform pair reduces to 1-D real transforms
    along that axis (rfft, multiply, irfft): one pair per axis in use, over the samples that use it."""
    xw = _work(x)
    out = torch.empty_like(xw)
    size = x.shape[2:]
    for a in sorted(set(int(v) for v in axis)):
        rows = np.flatnonzero(axis == a)
        length = size[a] // 2 + 1
        f = np.stack([_ghost_factor(size[a], int(ghosts[i]), float(strength[i]), restore[i])[:length]
                      for i in rows])
        shape = [len(rows), 1, 1, 1, 1]
        shape[2 + a] = length
        factor = _host_to(torch.from_numpy(f).to(xw.dtype).reshape(shape), x.device)
        dim = 2 + a
        if len(rows) == x.shape[0]:
            return torch.fft.irfft(torch.fft.rfft(xw, dim=dim).mul_(factor), n=size[a], dim=dim)
        idx = _host_to(torch.from_numpy(rows), x.device)
        part = torch.fft.irfft(torch.fft.rfft(xw.index_select(0, idx), dim=dim).mul_(factor), n=size[a], dim=dim)
        out.index_copy_(0, idx, part)
    return out


def _resolve_axes(axes: tuple, img: Any) -> list[int]:
    named = [a for a in axes if isinstance(a, str)]
    found = iter(_anatomical_indices(img, named)) if named else iter(())
    return [next(found) if isinstance(a, str) else a for a in axes]


class _GhostingBase(_TorchIOIntensity):
    _img: Any = None  # the call's input (its affine resolves anatomical axis names)

    def apply(self, img: Any, params: Any = None) -> Any:
        self._img = img
        return super().apply(img, params)

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        def ghost(part: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
            restore = [params["restore"][i] for i in idx]
            return _ghost(part, params["axis"][idx], params["ghosts"][idx], params["intensity"][idx],
                          restore).to(torch.float32)

        return _on_applied(x, params["applied"], ghost)

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_params = params


class Ghosting(_GhostingBase):
    """TorchIO Ghosting(num_ghosts, axis, intensity, restore): every `num_ghosts`-th plane of the
    centred spectrum along `axis` scaled by (1 - intensity), the central plane (restore=None) or
    the central round(restore * size) planes kept; the real part of the inverse, float32. Every
    sample and channel of a batch the same way (1-D real transforms along the axis; see the module
    notes). num_ghosts == 0 or intensity == 0 returns the input as it is, as TorchIO does."""

    def __init__(self, num_ghosts: int, axis: Union[int, str], intensity: float, restore: Optional[float] = None,
                 label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        if not isinstance(num_ghosts, (int, np.integer)) or isinstance(num_ghosts, bool) or num_ghosts < 0:
            raise ValueError(f"num_ghosts must be a non-negative int, got {num_ghosts!r}")
        self.num_ghosts, self.intensity = int(num_ghosts), float(intensity)
        if isinstance(axis, (list, tuple)):
            raise ValueError(f"axis must be one axis (0, 1, 2 or an anatomical name), got {axis!r}")
        (self.axis,) = _torchio_axes(axis)
        if restore is not None and not 0.0 <= float(restore) <= 1.0:
            raise ValueError(f"restore must be in [0, 1] or None, got {restore!r}")
        self.restore = None if restore is None else float(restore)
        self._subject_keys(label_keys, include, exclude, keep)
        self._img: Any = None

    def _plan(self, x: torch.Tensor) -> dict:
        n = x.shape[0]
        axis = _resolve_axes((self.axis,), self._img)[0]
        on = self.num_ghosts > 0 and self.intensity != 0.0
        return {"applied": torch.full((n,), on, dtype=torch.bool), "axis": np.full(n, axis),
                "ghosts": np.full(n, self.num_ghosts), "intensity": np.full(n, self.intensity),
                "restore": [self.restore] * n}


class RandomGhosting(_GhostingBase, _Randomizable):
    """TorchIO RandomGhosting(num_ghosts=(4, 10), axes=(0, 1, 2), intensity=(0.5, 1), restore=None,
    p=1): per sample, with probability `p`, num_ghosts ~ U{a..b} (a number d means 0..d), the axis
    uniformly from `axes` (0, 1, 2 or anatomical names, which need a MetaTensor's affine),
    intensity ~ U(a, b) (d means (0, d)), restore ~ U(a, b) if given; then :class:`Ghosting`.
    A dictionary (TorchIO's Subject) gets a draw per intensity image (not under `label_keys`).
    Parameters of the last call: ``last_params`` (numpy arrays, and ``applied``).

    Differences: Philox draws (not torch's generator), one per sample of a batch; a sample whose
    draw is a no-op (0 ghosts or intensity 0) or whose gate is closed comes back unchanged as
    float32 when other samples of the batch are transformed."""

    def __init__(self, num_ghosts: Union[int, tuple[int, int]] = (4, 10),
                 axes: Union[int, str, Sequence[Union[int, str]]] = (0, 1, 2),
                 intensity: Union[float, tuple[float, float]] = (0.5, 1), restore: Any = None, p: float = 1.0,
                 label_keys: Sequence[str] = (), seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.axes = _torchio_axes(axes)
        self.num_ghosts_range = _torchio_int_range(num_ghosts, "num_ghosts")
        self.intensity_range = _torchio_range(intensity, "intensity_range", min_constraint=0.0)
        self.restore_range = None if restore is None else _torchio_range(restore, "restore", 0.0, 1.0)
        self.p = _check_prob(p)
        self._subject_keys(label_keys, include, exclude, keep)
        self.last_params: Optional[dict] = None
        self._img: Any = None

    def _plan(self, x: torch.Tensor) -> dict:
        n = x.shape[0]
        axes = np.array(_resolve_axes(self.axes, self._img))
        u = ops.philox_uniform(self._next_seed(), 0, n, 5).numpy()
        ghosts = _randint(*self.num_ghosts_range, u[:, 1])
        axis = axes[np.minimum(np.floor(u[:, 2] * len(axes)).astype(np.int64), len(axes) - 1)]
        lo, hi = self.intensity_range
        strength = lo + (hi - lo) * u[:, 3]
        if self.restore_range is None:
            restore = [None] * n
        else:
            rlo, rhi = self.restore_range
            restore = list(rlo + (rhi - rlo) * u[:, 4])
        applied = (u[:, 0] < self.p) & (ghosts > 0) & (strength != 0.0)
        return {"applied": torch.from_numpy(applied), "axis": axis, "ghosts": ghosts, "intensity": strength,
                "restore": restore}


# ---------------- plane waves (spikes) ----------------
def _phase_tables(freqs: np.ndarray, size: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """For frequencies (M, C, S, 3) (natural indices): exp(2 pi i (kd d / D + kh h / H)) as (M, C, S,
    D * H) complex128 and exp(2 pi i kw w / W) as (M, C, S, W), phases reduced exactly in integers."""
    d, h, w = (np.arange(s, dtype=np.int64) for s in size)
    kd, kh, kw = (freqs[..., a, None] for a in range(3))
    frac_d = ((kd * d) % size[0]) / size[0]
    frac_h = ((kh * h) % size[1]) / size[1]
    dh = frac_d[..., :, None] + frac_h[..., None, :]
    e_dh = np.exp(2j * np.pi * dh).reshape(*freqs.shape[:3], -1)
    e_w = np.exp(2j * np.pi * ((kw * w) % size[2]) / size[2])
    return e_dh, e_w


def _add_waves(x: torch.Tensor, freqs: np.ndarray, coef: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """x (M, C, D, H, W) plus sum_s Re(coef[m, c, s] exp(2 pi i k_mcs . n / N)) / N -- the real part
    of the inverse FFT of the spectrum changes coef at frequencies freqs (M, C, S, 3) -- as one
    batched matrix product: (D*H, 2S) @ (2S, W) per (sample, channel)."""
    m, c, d, h, w = x.shape
    s = freqs.shape[2]
    e_dh, e_w = _phase_tables(freqs, (d, h, w))
    work = _work(x)
    dev, rdt = x.device, work.dtype
    p = _host_to(torch.from_numpy(e_dh), dev) * (coef.to(torch.complex128) / (d * h * w))[..., None]  # (M, C, S, DH)
    a = torch.stack((p.real, -p.imag), dim=-1).permute(0, 1, 3, 2, 4).reshape(m * c, d * h, 2 * s)
    e_w_t = torch.from_numpy(np.stack((e_w.real, e_w.imag), axis=-2)).reshape(m * c, 2 * s, w).to(rdt)
    out = torch.baddbmm(work.reshape(m * c, d * h, w), a.to(rdt), _host_to(e_w_t, dev))
    return out.reshape(m, c, d, h, w).to(out_dtype)  # integers truncate, as MONAI's convert_to_dst_type


def _dft_at(x: torch.Tensor, freqs: np.ndarray) -> torch.Tensor:
    """X(k) = sum_n x[n] exp(-2 pi i k . n / N) at frequencies (M, C, S, 3), complex128 (M, C, S):
    one float64 pass over x (a batched matrix product with the w phases, then the small d, h sums)."""
    m, c, d, h, w = x.shape
    s = freqs.shape[2]
    e_dh, e_w = _phase_tables(freqs, (d, h, w))
    dev = x.device
    bw = _host_to(torch.from_numpy(np.concatenate((e_w.real, -e_w.imag), axis=2)), dev)  # (M, C, 2S, W)
    y = torch.bmm(x.reshape(m * c, d * h, w).to(torch.float64), bw.reshape(m * c, 2 * s, w).transpose(1, 2))
    y = y.reshape(m, c, d * h, 2, s)
    yc = torch.complex(y[:, :, :, 0], y[:, :, :, 1]).permute(0, 1, 3, 2)  # (M, C, S, DH): sum_w x e^{-i tw}
    return (yc * _host_to(torch.from_numpy(np.conj(e_dh)), dev)).sum(-1)


def _natural(loc: np.ndarray, size: Sequence[int]) -> np.ndarray:
    """Centred-spectrum (fftshift) indices (..., 3) -> natural FFT frequency indices."""
    sz = np.asarray(size, dtype=np.int64)
    return (np.asarray(loc, dtype=np.int64) - sz // 2) % sz


# ---------------- TorchIO spikes ----------------
def _torchio_spike_heights(xw: torch.Tensor, freqs: np.ndarray, counts: np.ndarray, ratio: np.ndarray
                           ) -> torch.Tensor:
    """TorchIO Spike's heights (M, C, S) float32: spike s of a channel adds
    float32(max |spectrum| * ratio) to the real part of the spectrum at its frequency, the maximum
    taken over the spectrum as the earlier spikes left it: the larger of the touched positions'
    new magnitudes and the maximum over the untouched ones. From the half spectrum (rfftn): a
    stored value stands for one full-spectrum position (planes kw = 0 and kw = W / 2) or two (k and
    -k, the same magnitude); once every position a stored value stands for has been touched, it is
    zeroed in the magnitudes before the next maximum (which positions are touched is host data)."""
    m, c, d, h, w = xw.shape
    s_max = freqs.shape[1]
    wh = w // 2 + 1
    spec = torch.fft.rfftn(xw, dim=_DIMS).reshape(m, c, -1)
    mag = _magnitude(spec)

    # Element of the half spectrum holding each spike's frequency, and whether it is the conjugate.
    kd, kh, kw = freqs[..., 0], freqs[..., 1], freqs[..., 2]
    mirror = kw > w // 2
    ed = np.where(mirror, (-kd) % d, kd)
    eh = np.where(mirror, (-kh) % h, kh)
    ew = np.where(mirror, w - kw, kw)
    elem = (ed * h + eh) * wh + ew  # (M, S)
    full = (kd * h + kh) * w + kw  # full-spectrum position id
    mult = np.where((ew == 0) | ((w % 2 == 0) & (ew == w // 2)), 1, 2)
    dev = xw.device
    vals = spec.gather(-1, _host_to(torch.from_numpy(elem), dev)[:, None, :].expand(m, c, s_max))
    vals = torch.where(_host_to(torch.from_numpy(mirror), dev)[:, None, :], vals.conj(), vals)  # (M, C, S) complex

    ratio_t = _host_to(torch.from_numpy(ratio.astype(np.float32)), dev)[:, None]  # (M, 1)
    heights = torch.zeros(m, c, s_max, dtype=torch.float32, device=dev)
    zeroed: list[set] = [set() for _ in range(m)]
    for s in range(s_max):
        same = np.zeros((m, s_max, s_max))  # same[i, a, b]: spike a (< s) is at spike b's position
        for i in range(m):
            done = min(s, int(counts[i]))
            pos = full[i, :done]
            same[i, :done, :done] = pos[:, None] == pos[None, :]
            touched: dict = {}
            for p, e, k in zip(pos.tolist(), elem[i, :done].tolist(), mult[i, :done].tolist()):
                touched.setdefault(e, [set(), k])[0].add(p)
            gone = [e for e, (ps, k) in touched.items() if len(ps) >= k and e not in zeroed[i]]
            if gone:
                mag[i].index_fill_(-1, _host_to(torch.tensor(gone, dtype=torch.int64), dev), 0.0)
                zeroed[i].update(gone)
        peak = mag.amax(-1)
        if s:
            added = torch.einsum("mca,mab->mcb", heights, _host_to(torch.from_numpy(same).to(torch.float32), dev))
            now = (vals + added.to(vals.dtype)).abs()
            touched_mask = _host_to(torch.from_numpy(same.any(1)), dev)[:, None, :]
            now = torch.where(touched_mask, now, torch.zeros((), dtype=now.dtype, device=dev))
            peak = torch.maximum(peak, now.amax(-1))
        active = _host_to(torch.from_numpy(s < counts), dev)[:, None]
        heights[:, :, s] = torch.where(active, peak * ratio_t, torch.zeros((), device=dev))
    return heights


class _SpikeBase(_TorchIOIntensity):
    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        size = x.shape[2:]

        def spike(part: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
            part = _work(part)
            counts = params["counts"][idx]
            s_max = int(counts.max())
            loc = np.floor(params["positions"][idx, :s_max] * np.asarray(size, dtype=np.float64)).astype(np.int64)
            freqs = _natural(loc, size)  # (M, S, 3)
            heights = _torchio_spike_heights(part, freqs, counts, params["intensity"][idx])
            waves = np.broadcast_to(freqs[:, None], (len(idx), x.shape[1], s_max, 3))
            return _add_waves(part, waves, heights, torch.float32)

        return _on_applied(x, params["applied"], spike)

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_params = params


class Spike(_SpikeBase):
    """TorchIO Spike(spikes_positions, intensity): for each position p in [0, 1)^3 (rows of
    `spikes_positions`), float32(max |spectrum| * intensity) added to the centred spectrum at
    floor(p * shape), the maximum recomputed before each spike as TorchIO does; the real part of
    the inverse, float32. Added here as the plane waves those values are (no inverse FFT; see the
    module notes). Every sample and channel of a batch the same positions (each channel its own
    maximum, as TorchIO). No positions or intensity 0 returns the input as it is."""

    def __init__(self, spikes_positions: Any, intensity: float, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        pos = np.asarray(spikes_positions, dtype=np.float64).reshape(-1, 3) if np.size(spikes_positions) else \
            np.zeros((0, 3))
        if not (np.isfinite(pos).all() and (pos >= 0).all() and (pos < 1).all()):
            raise ValueError(f"spikes_positions must be (n, 3) numbers in [0, 1), got {spikes_positions!r}")
        self.spikes_positions, self.intensity = pos, float(intensity)
        if not np.isfinite(self.intensity):
            raise ValueError(f"intensity must be finite, got {intensity!r}")
        self._subject_keys(label_keys, include, exclude, keep)

    def _plan(self, x: torch.Tensor) -> dict:
        n, s = x.shape[0], len(self.spikes_positions)
        on = s > 0 and self.intensity != 0.0
        return {"applied": torch.full((n,), on, dtype=torch.bool), "counts": np.full(n, s),
                "positions": np.broadcast_to(self.spikes_positions, (n, s, 3)).copy(),
                "intensity": np.full(n, self.intensity)}


class RandomSpike(_SpikeBase, _Randomizable):
    """TorchIO RandomSpike(num_spikes=(1, 1), intensity=(1, 3), p=1): per sample, with probability `p`,
    num_spikes ~ U{a..b} (a number d means 0..d), intensity ~ U(a, b) (a number d means (-d, d)),
    positions uniform in [0, 1)^3; then :class:`Spike`. A dictionary gets a draw per intensity
    image (not under `label_keys`). ``last_params`` holds the draws. Philox draws, one per sample;
    a no-op draw (no spikes, intensity 0) or a closed gate leaves the sample unchanged (float32
    when others in the batch are transformed)."""

    def __init__(self, num_spikes: Union[int, tuple[int, int]] = (1, 1),
                 intensity: Union[float, tuple[float, float]] = (1, 3), p: float = 1.0,
                 label_keys: Sequence[str] = (), seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.intensity_range = _torchio_range(intensity, "intensity_range")
        self.num_spikes_range = _torchio_int_range(num_spikes, "num_spikes")
        self.p = _check_prob(p)
        self._subject_keys(label_keys, include, exclude, keep)
        self.last_params: Optional[dict] = None

    def _plan(self, x: torch.Tensor) -> dict:
        n, s_max = x.shape[0], self.num_spikes_range[1]
        u = ops.philox_uniform(self._next_seed(), 0, n, 3 + 3 * s_max).numpy()
        counts = _randint(*self.num_spikes_range, u[:, 1])
        lo, hi = self.intensity_range
        strength = lo + (hi - lo) * u[:, 2]
        applied = (u[:, 0] < self.p) & (counts > 0) & (strength != 0.0)
        return {"applied": torch.from_numpy(applied), "counts": counts,
                "positions": u[:, 3:].reshape(n, s_max, 3), "intensity": strength}


# ---------------- TorchIO motion ----------------
def _motion_maps(degrees: np.ndarray, translation: np.ndarray, affine: np.ndarray) -> np.ndarray:
    """(K, 4, 4) voxel-index maps (output -> input) of TorchIO Motion's resamples: SimpleITK
    Euler3D transforms p -> R p + t in LPS space (angles in degrees and t in mm as drawn, no RAS
    conversion). TorchIO builds each transform about the image centre and then rebuilds it from
    its matrix and translation parameter alone, which drops the centre: the rotation is about
    the LPS origin, and so it is here."""
    from .spatial import _euler_zxy

    p = np.diag([-1.0, -1.0, 1.0, 1.0]) @ np.asarray(affine, dtype=np.float64)
    p_inv = np.linalg.inv(p)
    maps = []
    for deg, t in zip(np.asarray(degrees, dtype=np.float64), np.asarray(translation, dtype=np.float64)):
        m = np.eye(4)
        m[:3, :3] = _euler_zxy(np.radians(deg))
        m[:3, 3] = t
        maps.append(p_inv @ m @ p)
    return np.stack(maps)


def _motion_masks(times: np.ndarray, width: int) -> list[np.ndarray]:
    """TorchIO Motion's k-space segments along the last axis (centred spectrum: [0, int(W t_0)),
    ..., [int(W t_{K-1}), W)), one per spectrum in TorchIO's order, as symmetrised real factors in
    natural order for the first W // 2 + 1 frequencies (see the module notes)."""
    ends = (np.float32(width) * np.asarray(times, dtype=np.float32)).astype(np.int64).tolist() + [width]
    k = np.arange(width)
    shifted = (k + width // 2) % width  # natural frequency k sits at centred index shifted[k]
    masks, start = [], 0
    for end in ends:
        m = ((shifted >= start) & (shifted < end)).astype(np.float64)
        masks.append((0.5 * (m + m[(-k) % width]))[: width // 2 + 1])
        start = end
    return masks


class _MotionBase(_TorchIOIntensity):
    affine: Any = None

    def _affine_of(self, img: Any) -> np.ndarray:
        from .spatial import _one_affine

        if self.affine is not None:
            return _one_affine(self.affine, "affine")
        aff = getattr(img, "affine", None)
        if isinstance(aff, torch.Tensor):
            return _one_affine(aff, "img.affine")
        return np.eye(4)

    def apply(self, img: Any, params: Any = None) -> Any:
        self._img = img
        return super().apply(img, params)

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_params = params

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        affine = self._affine_of(self._img)
        return _on_applied(x, params["applied"], lambda part, idx: self._moved(part.to(torch.float32), idx,
                                                                               params, affine))

    def _moved(self, part_in: torch.Tensor, idx: np.ndarray, params: dict, affine: np.ndarray) -> torch.Tensor:
        from .spatial import _itk_outside, _itk_resample

        size = tuple(part_in.shape[2:])
        w, dev = size[2], part_in.device
        maps = [_motion_maps(params["degrees"][i], params["translation"][i], affine) for i in idx]
        pad = ops.minmax(part_in, True)[..., 0].float()  # TorchIO: each channel's minimum
        images = [part_in]
        for j in range(maps[0].shape[0]):
            m34 = torch.as_tensor(np.stack([mp[j] for mp in maps])[:, :3, :], dtype=torch.float64)
            res = _itk_resample(part_in, _host_to(m34, dev), size, self.image_interpolation)
            for r, mp in enumerate(maps):
                out_r = _itk_outside(mp[j], size, dev)
                res[r] = torch.where(out_r, pad[r, :, None, None, None], res[r])
            images.append(res)
        # TorchIO's order: the spectrum of the original image swaps with that of the first motion
        # whose time is past the middle (else the last); spectrum j fills segment j of the last axis.
        part = torch.empty_like(part_in)
        for r, i in enumerate(idx):
            times = np.asarray(params["times"][i])
            swap = int(np.flatnonzero(times > 0.5).min()) if np.any(times > 0.5) else len(times)
            order = list(range(len(times) + 1))
            order[0], order[swap] = order[swap], order[0]
            masks = _motion_masks(times, w)
            spec = None
            for seg, src in enumerate(order):
                f = _host_to(torch.from_numpy(masks[seg]).to(torch.float32), dev)
                term = torch.fft.rfft(images[src][r], dim=-1).mul_(f)
                spec = term if spec is None else spec.add_(term)
            torch.fft.irfft(spec, n=w, dim=-1, out=part[r])
        return part


class Motion(_MotionBase):
    """TorchIO Motion(degrees, translation, times, image_interpolation='linear'): K rigid motions
    (rows of `degrees`, `translation`; `times` in (0, 1)) resampled with SimpleITK's rules (see
    :func:`_motion_maps`: rotation about the LPS origin, as TorchIO's rebuilt transforms do; the
    channel's minimum beyond half a voxel), and k-space assembled from the original and moved
    images' spectra in segments of the last axis, TorchIO's order; the real part, float32. The
    segments depend on the last frequency axis only, so this is 1-D real FFTs along that axis
    (one per image, one inverse), no 3-D transform. Every sample of a batch moves the same way;
    physical space from `affine=`, a MetaTensor's affine, else the identity (TorchIO's for a bare
    tensor)."""

    def __init__(self, degrees: Any, translation: Any, times: Any, image_interpolation: str = "linear",
                 affine: Any = None, label_keys: Sequence[str] = (),
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        deg = np.asarray(degrees, dtype=np.float64).reshape(-1, 3)
        tr = np.asarray(translation, dtype=np.float64).reshape(-1, 3)
        tm = np.asarray(times, dtype=np.float64).reshape(-1)
        if not (len(deg) == len(tr) == len(tm) >= 1):
            raise ValueError(f"degrees, translation and times need one row per motion (K >= 1), got "
                             f"{len(deg)}, {len(tr)} and {len(tm)}")
        if not (np.isfinite(deg).all() and np.isfinite(tr).all() and np.isfinite(tm).all()):
            raise ValueError("degrees, translation and times must be finite")
        self.degrees, self.translation, self.times = deg, tr, tm
        self.image_interpolation = _check_interp(image_interpolation, bspline=True)
        self.affine = affine
        self._subject_keys(label_keys, include, exclude, keep)
        self._img = None

    def _plan(self, x: torch.Tensor) -> dict:
        n = x.shape[0]
        def each(a: np.ndarray) -> np.ndarray:
            return np.broadcast_to(a, (n,) + a.shape)

        return {"applied": torch.ones(n, dtype=torch.bool), "degrees": each(self.degrees),
                "translation": each(self.translation), "times": each(self.times)}


class RandomMotion(_MotionBase, _Randomizable):
    """TorchIO RandomMotion(degrees=10, translation=10, num_transforms=2, image_interpolation='linear',
    p=1): per sample, with probability `p`, `num_transforms` motions with angles ~ U(degrees) and
    translations ~ U(translation) per axis (a number d means (-d, d)), at times
    (j + 1) / (K + 1) + U(-0.3, 0.3) / (K + 1); then :class:`Motion`. A dictionary gets a draw per
    intensity image (not under `label_keys`), as TorchIO. ``last_params`` holds the draws.
    Differences: Philox draws, one per sample; float32 resampling (ITK: double), so values agree
    with TorchIO's to about 1e-5 of the range."""

    def __init__(self, degrees: Any = 10, translation: Any = 10, num_transforms: int = 2,
                 image_interpolation: str = "linear", p: float = 1.0, affine: Any = None,
                 label_keys: Sequence[str] = (), seed: Optional[int] = None,
                 *, include: Optional[Sequence[Hashable]] = None, exclude: Optional[Sequence[Hashable]] = None,
                 keep: Optional[Mapping[Hashable, Hashable]] = None):
        _Randomizable.__init__(self, seed)
        self.degrees_range = _torchio_range(degrees, "degrees")
        self.translation_range = _torchio_range(translation, "translation")
        if not isinstance(num_transforms, (int, np.integer)) or isinstance(num_transforms, bool) or num_transforms < 1:
            raise ValueError(f"Number of transforms must be a strictly positive natural number, not {num_transforms}")
        self.num_transforms = int(num_transforms)
        self.image_interpolation = _check_interp(image_interpolation, bspline=True)
        self.p = _check_prob(p)
        self.affine = affine
        self._subject_keys(label_keys, include, exclude, keep)
        self.last_params: Optional[dict] = None
        self._img = None

    def _plan(self, x: torch.Tensor) -> dict:
        n, k = x.shape[0], self.num_transforms
        u = ops.philox_uniform(self._next_seed(), 0, n, 1 + 7 * k).numpy()
        (dlo, dhi), (tlo, thi) = self.degrees_range, self.translation_range
        degrees = dlo + (dhi - dlo) * u[:, 1: 1 + 3 * k].reshape(n, k, 3)
        translation = tlo + (thi - tlo) * u[:, 1 + 3 * k: 1 + 6 * k].reshape(n, k, 3)
        step = 1.0 / (k + 1)
        times = step * np.arange(1, k + 1) + (2 * u[:, 1 + 6 * k:] - 1) * 0.3 * step
        return {"applied": torch.from_numpy(u[:, 0] < self.p), "degrees": degrees, "translation": translation,
                "times": times}


# ---------------- MONAI k-space spikes ----------------
def _mean_log_magnitude(xw: torch.Tensor) -> torch.Tensor:
    """(M, C) float64: the mean over the full spectrum of float32 log(|X| + 1e-10), MONAI's
    default spike log-intensity base, from the half spectrum (interior kw planes count twice)."""
    w = xw.shape[-1]
    log_abs = _magnitude(torch.fft.rfftn(xw, dim=_DIMS)).add_(1e-10).log_()
    total = log_abs.sum(dim=_DIMS, dtype=torch.float64)
    interior = log_abs[..., 1: (w + 1) // 2]  # the planes whose mirror images are not stored
    return (total + interior.sum(dim=_DIMS, dtype=torch.float64)) / float(np.prod(xw.shape[2:]))


def _monai_spikes(x: torch.Tensor, freqs: np.ndarray, log_k: torch.Tensor) -> torch.Tensor:
    """MONAI KSpaceSpikeNoise: at each (sample, channel, spike) frequency the spectrum's
    log-magnitude becomes log_k (float32, as MONAI stores it), its phase kept; log_k NaN marks an
    unused slot. The image plus the plane waves of those changes, in x's dtype."""
    xw = _work(x)
    valid = ~torch.isnan(log_k)
    kp = _dft_at(xw, freqs)  # (M, C, S) complex128
    mag = torch.exp(torch.where(valid, log_k, torch.zeros((), dtype=log_k.dtype, device=log_k.device))
                    .to(torch.float32).to(torch.float64))
    phase = torch.angle(kp)
    coef = torch.polar(mag, phase) - kp
    coef = torch.where(valid, coef, torch.zeros((), dtype=coef.dtype, device=coef.device))
    return _add_waves(xw, freqs, coef, x.dtype)


def _check_loc(loc: tuple, shape: Sequence[int]) -> None:
    full = (0,) * (len(shape) - len(loc)) + tuple(loc)
    for i, (v, s) in enumerate(zip(full, shape)):
        if not 0 <= v < s:
            raise ValueError(f"loc: index {v} at position {i} of {tuple(loc)} is out of bounds for an image of "
                             f"shape {tuple(shape)} (channel first)")


class KSpaceSpikeNoise:
    """MONAI KSpaceSpikeNoise(loc, k_intensity=None): the centred spectrum's log-magnitude set to
    `k_intensity` at `loc` ((X, Y, Z): every channel; (C, X, Y, Z): channel C; or a sequence of
    locations with one intensity each), the phase kept, then the real part of the inverse. Default
    intensity: 2.5 x the mean log-magnitude of each channel's spectrum (one rfftn per batch); with
    several locations, MONAI gives the i-th location channel i's default (more locations than
    channels: an error here, MONAI drops the extra ones); one (X, Y, Z) location gives each channel
    its own default, as MONAI documents (MONAI 1.6.1 raises there: it assigns a tuple to a tensor). Every
    sample of a batch gets the same locations. Result in the input's dtype, as MONAI's (integers
    truncate). Applied as plane waves (see the module notes): the spectrum value at each location
    comes from a float64 DFT at that frequency."""

    def __init__(self, loc: Any, k_intensity: Union[Sequence[float], float, None] = None):
        locs = tuple(loc) if isinstance(loc, (list, tuple)) else (loc,)
        if not locs:
            raise ValueError("loc must give at least one location")
        many = isinstance(locs[0], collections.abc.Sequence)
        if isinstance(k_intensity, collections.abc.Sequence):
            if not many:
                raise ValueError("If a sequence is passed to k_intensity, then a sequence of locations must be "
                                 "passed to loc")
            if len(k_intensity) != len(locs):
                raise ValueError("There must be one intensity_factor value for each tuple of indices in loc.")
        elif many and k_intensity is not None:
            raise ValueError("There must be one intensity_factor value for each tuple of indices in loc.")
        self.locs = [tuple(int(v) for v in l) for l in locs] if many else [tuple(int(v) for v in locs)]
        for l in self.locs:
            if len(l) not in (3, 4):
                raise RuntimeError("Input images of dimension 4 need location tuple to be length 3 or 4")
        if k_intensity is None:
            self.values: list = [None] * len(self.locs)
        elif many:
            self.values = [float(v) for v in k_intensity]
        else:
            self.values = [float(k_intensity)]
        self.loc, self.k_intensity = loc, k_intensity

    def __call__(self, img: Any) -> Any:
        x, restore = _as_batch(img)
        for l in self.locs:
            _check_loc(l, x.shape[1:])
        n, c = x.shape[:2]
        many = len(self.locs) > 1 or isinstance(self.loc[0], collections.abc.Sequence)
        if many and self.values[0] is None and len(self.locs) > c:
            raise ValueError(f"loc: {len(self.locs)} locations without k_intensity take the default intensity of "
                             f"channels 0..{len(self.locs) - 1} in turn (MONAI pairs them), but the image has {c} "
                             "channel(s); give k_intensity")
        # Per channel: its spikes in order, a later one at the same location replacing an earlier.
        # A value is a number, or ("default", j): channel j's default (MONAI pairs the i-th of several
        # locations with channel i's default; one location gets each channel's own).
        per_channel: list[dict] = [{} for _ in range(c)]
        for i, (l, v) in enumerate(zip(self.locs, self.values)):
            channels = range(c) if len(l) == 3 else [l[0]]
            for ch in channels:
                per_channel[ch].pop(l[-3:], None)
                per_channel[ch][l[-3:]] = v if v is not None else ("default", i if many else ch)
        s = max(1, max(len(p) for p in per_channel))
        loc = np.zeros((c, s, 3), dtype=np.int64)
        log_k = torch.full((n, c, s), float("nan"), dtype=torch.float64, device=x.device)
        default = None
        if self.values[0] is None:
            default = _mean_log_magnitude(_work(x)).to(torch.float32).to(torch.float64) * 2.5
        for ch, p in enumerate(per_channel):
            for j, (l, v) in enumerate(p.items()):
                loc[ch, j] = l
                log_k[:, ch, j] = default[:, v[1]] if isinstance(v, tuple) else v
        freqs = np.broadcast_to(_natural(loc, x.shape[2:])[None], (n, c, s, 3))
        return restore(_monai_spikes(x, freqs, log_k))


class RandKSpaceSpikeNoise(_Degrade, _Randomizable):
    """MONAI RandKSpaceSpikeNoise(prob=0.1, intensity_range=None, channel_wise=True): per sample,
    with probability `prob`, one spike per channel: channel_wise, each channel its own location
    (uniform over the spectrum) and log-intensity ~ U(range of the channel); otherwise one
    location for all channels and one draw (or one per channel with per-channel ranges).
    intensity_range: (a, b), one (a, b) per channel, or None: (0.95 x, 1.1 x) with x = 2.5 x the
    channel's mean log-magnitude (an rfftn per batch, on the device). Draws: Philox on the host
    (the uniforms; the default ranges scale them on the device, no sync), ``last_locs`` ((N, C, 3)
    centred-spectrum indices), ``last_u`` and ``last_applied``; MONAI's ``sampled_locs`` /
    ``sampled_k_intensity`` for sample 0 when its range is given (no host read otherwise)."""

    def __init__(self, prob: float = 0.1, intensity_range: Any = None, channel_wise: bool = True,
                 seed: Optional[int] = None):
        _Randomizable.__init__(self, seed)
        self.prob = _check_prob(prob)
        self.channel_wise = bool(channel_wise)
        per_channel = intensity_range is not None and isinstance(intensity_range[0], collections.abc.Sequence)
        if per_channel and not self.channel_wise:
            raise ValueError("When channel_wise = False, intensity_range should be a 2-tuple (low, high) or None.")
        if intensity_range is None:
            self.intensity_range = None
        elif per_channel:
            self.intensity_range = [(float(a), float(b)) for a, b in intensity_range]
        else:
            if len(intensity_range) != 2:
                raise ValueError(f"intensity_range must be (low, high), got {intensity_range!r}")
            self.intensity_range = (float(intensity_range[0]), float(intensity_range[1]))
        self.sampled_locs: list = []
        self.sampled_k_intensity: list = []
        self.last_locs: Optional[np.ndarray] = None
        self.last_u: Optional[np.ndarray] = None
        self.last_applied: Optional[torch.Tensor] = None

    def _plan(self, x: torch.Tensor) -> dict:
        n, c = x.shape[:2]
        if isinstance(self.intensity_range, list) and len(self.intensity_range) != c:
            raise RuntimeError("If intensity_range is a sequence of sequences, then there must be one (low, high) "
                               "tuple for each channel.")
        u = ops.philox_uniform(self._next_seed(), 0, n, 1 + 4 * c).numpy()
        size = np.asarray(x.shape[2:], dtype=np.int64)
        loc_u = u[:, 1: 1 + 3 * c].reshape(n, c, 3)
        if not self.channel_wise:
            loc_u = np.broadcast_to(loc_u[:, :1], (n, c, 3))
        locs = np.minimum(np.floor(loc_u * size).astype(np.int64), size - 1)
        vu = u[:, 1 + 3 * c:]
        if not self.channel_wise and self.intensity_range is not None:
            # One draw for every channel (with its default ranges MONAI draws one per channel).
            vu = np.broadcast_to(vu[:, :1], (n, c))
        return {"applied": torch.from_numpy(u[:, 0] < self.prob), "locs": np.ascontiguousarray(locs),
                "u": np.ascontiguousarray(vu)}

    def _ranges(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, c = x.shape[:2]
        if self.intensity_range is None:
            mean = (_mean_log_magnitude(_work(x)) * 2.5).to(torch.float32)
            return (mean * 0.95).to(torch.float64), (mean * 1.1).to(torch.float64)
        pairs = self.intensity_range if isinstance(self.intensity_range, list) else [self.intensity_range] * c
        lo = _host_to(torch.tensor([p[0] for p in pairs], dtype=torch.float64), x.device).expand(n, c)
        hi = _host_to(torch.tensor([p[1] for p in pairs], dtype=torch.float64), x.device).expand(n, c)
        return lo, hi

    def _record(self, x: torch.Tensor, params: dict) -> None:
        self.last_locs, self.last_u, self.last_applied = params["locs"], params["u"], params["applied"]
        self.sampled_locs, self.sampled_k_intensity = [], []
        if bool(params["applied"][0]):
            self.sampled_locs = [(ch,) + tuple(int(v) for v in params["locs"][0, ch]) for ch in range(x.shape[1])]
            if self.intensity_range is not None:
                pairs = (self.intensity_range if isinstance(self.intensity_range, list)
                         else [self.intensity_range] * x.shape[1])
                self.sampled_k_intensity = [a + (b - a) * float(params["u"][0, ch]) for ch, (a, b) in enumerate(pairs)]

    def _run(self, x: torch.Tensor, params: dict) -> torch.Tensor:
        def spikes(part: torch.Tensor, idx: np.ndarray) -> torch.Tensor:
            lo, hi = self._ranges(part)
            u = _host_to(torch.from_numpy(params["u"][idx]), x.device)
            log_k = (lo + (hi - lo) * u)[..., None]  # (M, C, 1)
            freqs = _natural(params["locs"][idx], x.shape[2:])[:, :, None, :]  # (M, C, 1, 3)
            return _monai_spikes(part, freqs, log_k)

        return _on_applied(x, params["applied"], spikes, out_dtype=None)  # MONAI keeps the dtype


class KSpaceSpikeNoised:
    """MONAI KSpaceSpikeNoised(keys, loc, k_intensity=None)."""

    def __init__(self, keys: Any, loc: Any, k_intensity: Union[Sequence[float], float, None] = None,
                 allow_missing_keys: bool = False):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.transform = KSpaceSpikeNoise(loc, k_intensity)
        self.allow_missing_keys = allow_missing_keys

    def __call__(self, data: Any) -> dict:
        d = dict(data)
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            d[key] = self.transform(d[key])
        return d


class RandKSpaceSpikeNoised:
    """MONAI RandKSpaceSpikeNoised(keys, prob=0.1, intensity_range=None, channel_wise=True): one gate
    per sample for the call, and, as MONAI, a fresh draw of locations and intensities per key."""

    def __init__(self, keys: Any, prob: float = 0.1, intensity_range: Any = None, channel_wise: bool = True,
                 allow_missing_keys: bool = False, seed: Optional[int] = None):
        self.keys = [keys] if isinstance(keys, (str, int)) or not isinstance(keys, Sequence) else list(keys)
        self.prob = _check_prob(prob)
        self.transform = RandKSpaceSpikeNoise(1.0, intensity_range, channel_wise, seed)
        self.allow_missing_keys = allow_missing_keys

    def set_random_state(self, seed: Optional[int] = None, generator: Optional[torch.Generator] = None):
        self.transform.set_random_state(seed, generator)
        return self

    def __call__(self, data: Any) -> dict:
        d = dict(data)
        gate = None
        for _, key in _present_keys(d, self.keys, self.allow_missing_keys):
            x, _ = _as_batch(d[key])
            if gate is None:
                gate = ops.philox_uniform(self.transform._next_seed(), 0, x.shape[0], 1)[:, 0] < self.prob
            params = self.transform._plan(x)
            params["applied"] = gate.clone()
            d[key] = self.transform.apply(d[key], params)
        return d
