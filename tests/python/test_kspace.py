"""k-space artefacts (voxaug.kspace) against TorchIO's Ghosting / Spike, MONAI's KSpaceSpikeNoise and
float64 numpy versions of their algorithms (fftn, fftshift, the change, the inverse)."""
import numpy as np
import pytest
import torch

from conftest import devices
from voxaug.kspace import (Ghosting, KSpaceSpikeNoise, KSpaceSpikeNoised, Motion, RandKSpaceSpikeNoise,
                           RandKSpaceSpikeNoised, RandomGhosting, RandomMotion, RandomSpike, Spike)

tio = pytest.importorskip("torchio")
monai_t = pytest.importorskip("monai.transforms")

SHAPES = [(2, 17, 20, 15), (1, 16, 9, 12)]


def rand(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 100 - 20).to(dtype)


def close(a, b, ref, rel=2e-6):
    """max |a - b| within rel of the data's range (+ 1e-6 absolute)."""
    a, b = torch.as_tensor(a, dtype=torch.float64).cpu(), torch.as_tensor(b, dtype=torch.float64).cpu()
    span = float(torch.as_tensor(ref, dtype=torch.float64).abs().max())
    err = float((a - b).abs().max())
    assert err <= rel * span + 1e-6, f"max |diff| {err:.3g} for a range of {span:.3g}"


# ---------------- float64 oracles (TorchIO's and MONAI's algorithms in numpy) ----------------
def ghost64(x, ghosts, axis, intensity, restore):
    out = []
    for ch in np.asarray(x, dtype=np.float64):
        k = np.fft.fftshift(np.fft.fftn(ch))
        sl = [slice(None)] * 3
        sl[axis] = slice(None, None, ghosts)
        mid = k.shape[axis] // 2
        rs = [slice(None)] * 3
        if restore is None:
            rs[axis] = slice(mid, mid + 1)
        else:
            half = int(np.round(restore * k.shape[axis])) // 2
            rs[axis] = slice(mid - half, mid + half)
        keep = k[tuple(rs)].copy()
        k[tuple(sl)] *= 1 - intensity
        k[tuple(rs)] = keep
        out.append(np.fft.ifftn(np.fft.ifftshift(k)).real)
    return np.stack(out)


def spike64(x, positions, intensity):
    out = []
    for ch in np.asarray(x, dtype=np.float64):
        k = np.fft.fftshift(np.fft.fftn(ch))
        for idx in np.floor(np.asarray(positions) * np.array(k.shape)).astype(int):
            k[tuple(idx)] += np.abs(k).max() * intensity
        out.append(np.fft.ifftn(np.fft.ifftshift(k)).real)
    return np.stack(out)


def monai_spike64(x, spikes):
    """spikes: (channel, (i, j, k), log-intensity) in order, later ones replacing earlier ones."""
    k = np.fft.fftshift(np.fft.fftn(np.asarray(x, dtype=np.float64), axes=(1, 2, 3)), axes=(1, 2, 3))
    new = k.copy()
    for c, loc, v in spikes:
        idx = (c,) + tuple(loc)
        new[idx] = np.exp(v) * np.exp(1j * np.angle(k[idx]))
    return np.fft.ifftn(np.fft.ifftshift(new, axes=(1, 2, 3)), axes=(1, 2, 3)).real


# ---------------- Ghosting ----------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("ghosts,intensity,restore", [(1, 0.5, None), (2, 1.0, None), (3, 0.7, 0.3),
                                                      (5, 0.2, 0.02), (4, 0.9, 1.0)])
def test_ghosting_equals_torchio_and_float64(shape, axis, ghosts, intensity, restore):
    x = rand(shape, seed=axis + 3 * ghosts)
    got = Ghosting(ghosts, axis, intensity, restore)(x)
    assert got.dtype == torch.float32 and got.shape == x.shape
    ref = tio.Ghosting(num_ghosts=ghosts, axis=axis, intensity=intensity, restore=restore)(x.clone())
    close(got, ref, x)
    oracle = torch.from_numpy(ghost64(x.numpy(), ghosts, axis, intensity, restore))
    close(got, oracle, x, rel=1e-6)
    # The artefact is there, unless restore kept every plane (restore 1 on an even size).
    assert float((got - x).abs().max()) > 1e-2 or float((oracle - x).abs().max()) < 1e-3


def test_ghosting_batch_real_volume_and_noop(ch2):
    vol = ch2[0][0][None, None, 40:140:2, 30:190:2, 20:160:2].to(torch.float32)
    batch = torch.cat([vol, vol.flip(2), vol * 0.5])
    t = RandomGhosting(num_ghosts=(2, 6), intensity=(0.3, 1.0), restore=(0.0, 0.2), seed=3)
    out = t(batch)
    p = t.last_params
    assert bool(p["applied"].all())
    assert len(set(p["axis"].tolist())) > 1  # several axes in one batch
    for i in range(3):
        ref = tio.Ghosting(num_ghosts=int(p["ghosts"][i]), axis=int(p["axis"][i]),
                           intensity=float(p["intensity"][i]), restore=float(p["restore"][i]))(batch[i].clone())
        close(out[i], ref, batch[i])
    # No-op arguments return the input itself, as TorchIO does.
    assert Ghosting(0, 1, 0.5)(batch) is batch
    assert Ghosting(3, 1, 0.0)(batch) is batch
    u8 = ch2[0][:, ::4, ::4, ::4]
    close(Ghosting(3, 2, 0.6)(u8), tio.Ghosting(num_ghosts=3, axis=2, intensity=0.6, restore=None)(u8.float()), u8)


def test_random_ghosting_draws_gate_and_dict():
    x = rand((64, 1, 6, 7, 8))
    t = RandomGhosting(num_ghosts=(2, 4), axes=(0, 2), intensity=(0.5, 1.0), p=0.5, seed=11)
    out = t(x)
    p = t.last_params
    applied = p["applied"].numpy()
    assert 15 < applied.sum() < 50
    assert set(p["ghosts"].tolist()) == {2, 3, 4} and set(p["axis"].tolist()) == {0, 2}
    assert ((p["intensity"] >= 0.5) & (p["intensity"] < 1.0)).all()
    assert torch.equal(out[~torch.from_numpy(applied)], x[~torch.from_numpy(applied)])
    for i in np.flatnonzero(applied)[:5]:
        ref = tio.Ghosting(num_ghosts=int(p["ghosts"][i]), axis=int(p["axis"][i]),
                           intensity=float(p["intensity"][i]), restore=None)(x[i].clone())
        close(out[i], ref, x[i])
    # Same seed, same result; the counts follow U{2..4} (chi-square, 2 dof, p ~ 1e-4 bound).
    again = RandomGhosting(num_ghosts=(2, 4), axes=(0, 2), intensity=(0.5, 1.0), p=0.5, seed=11)(x)
    assert torch.equal(again, out)
    big = RandomGhosting(num_ghosts=(2, 4), seed=5)
    draws = big._plan(torch.empty(3000, 1, 4, 4, 4))
    counts = np.bincount(draws["ghosts"], minlength=5)[2:]
    assert ((counts - 1000.0) ** 2 / 1000.0).sum() < 18.4
    assert np.bincount(draws["axis"], minlength=3).min() > 900
    # A dictionary: each intensity image its own draw, label maps untouched.
    data = {"a": rand((1, 8, 8, 8), 1), "b": rand((1, 8, 8, 8), 2), "label": torch.ones(1, 8, 8, 8)}
    res = RandomGhosting(label_keys=("label",), seed=2)(data)
    assert res["label"] is data["label"]
    assert not torch.equal(res["a"], data["a"]) and not torch.equal(res["b"], data["b"])


def test_ghosting_anatomical_axes():
    from monai.data import MetaTensor

    x = MetaTensor(rand((1, 10, 11, 12)), affine=torch.diag(torch.tensor([1.0, 1.0, 1.0, 1.0]))[[1, 0, 2, 3]])
    got = Ghosting(2, "LR", 0.8)(x)  # the affine's first voxel axis is A-P, the second L-R
    close(got, tio.Ghosting(num_ghosts=2, axis=1, intensity=0.8, restore=None)(x.as_tensor().clone()), x)
    with pytest.raises(ValueError, match="anatomical"):
        Ghosting(2, "LR", 0.8)(rand((1, 10, 11, 12)))


# ---------------- Spike ----------------
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("positions,intensity", [
    ([[0.1, 0.7, 0.3]], 1.5),
    ([[0.9, 0.2, 0.55], [0.3, 0.3, 0.3], [0.1, 0.99, 0.0]], -2.0),
    ([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.2, 0.4, 0.6]], -0.7),  # the DC (maximum) twice, then elsewhere
    ([[0.5, 0.5, 0.5], [0.25, 0.75, 0.5]], 0.4),
])
def test_spike_equals_torchio_and_float64(shape, positions, intensity):
    x = rand(shape, seed=len(positions)) + 30  # positive: the spectrum's maximum is the DC term
    got = Spike(np.array(positions, dtype=np.float32), intensity)(x)
    assert got.dtype == torch.float32
    ref = tio.Spike(spikes_positions=np.array(positions, dtype=np.float32), intensity=intensity)(x.clone())
    span = (ref - x).abs().max()
    close(got, ref, span + x.abs().max())
    close(got, spike64(x.numpy(), np.array(positions, dtype=np.float32), intensity), span + x.abs().max())


def test_spike_mirrored_positions_and_signed_images():
    # k and -k both spiked, and a sign-changing image (the maximum is not the DC term).
    x = rand((2, 12, 10, 9), seed=4) - 40
    pos = np.array([[0.25, 0.3, 0.2], [0.75 + 1 / 24, 0.7 + 1 / 20, 0.8 + 1 / 18], [0.6, 0.1, 0.9]])
    pos = pos.astype(np.float32)
    got = Spike(pos, 2.5)(x)
    ref = tio.Spike(spikes_positions=pos.astype(np.float32), intensity=2.5)(x.clone())
    close(got, ref, (ref - x).abs().max() + x.abs().max())
    close(got, spike64(x.numpy(), pos.astype(np.float32), 2.5), (ref - x).abs().max() + x.abs().max())


def test_random_spike_per_sample_and_noop(ch2):
    vol = ch2[0][0][None, None, ::3, ::3, ::3].to(torch.float32)
    batch = torch.cat([vol, vol * 2, vol.flip(3), vol])
    t = RandomSpike(num_spikes=(1, 3), intensity=(0.5, 2), seed=8)
    out = t(batch)
    p = t.last_params
    for i in range(4):
        n = int(p["counts"][i])
        pos = p["positions"][i, :n].astype(np.float32)
        ref = tio.Spike(spikes_positions=pos, intensity=float(p["intensity"][i]))(batch[i].clone())
        close(out[i], ref, (ref - batch[i]).abs().max() + batch[i].abs().max())
    x = rand((40, 1, 5, 6, 7))
    t = RandomSpike(num_spikes=(0, 2), p=0.7, seed=1)
    out = t(x)
    p = t.last_params
    assert 0 < int(p["applied"].sum()) < 40
    assert set(p["counts"].tolist()) == {0, 1, 2}
    assert not bool(p["applied"][p["counts"] == 0].any())
    keep = ~p["applied"]
    assert torch.equal(out[keep], x[keep])
    assert Spike(np.zeros((0, 3)), 1.0)(x) is x and Spike([[0.1, 0.2, 0.3]], 0.0)(x) is x


# ---------------- MONAI KSpaceSpikeNoise ----------------
@pytest.mark.parametrize("loc,k", [
    ((5, 3, 7), 13.0),
    ((1, 5, 3, 7), 14.0),
    (((0, 8, 10, 7), (4, 4, 4), (1, 8, 10, 7)), (12.0, 11.0, 13.5)),
    (((3, 3, 3), (3, 3, 3)), (9.0, 12.0)),  # a later spike replaces an earlier one
    ((5, 3, 7), None),
    (((0, 2, 2, 2), (6, 1, 0)), None),
])
def test_kspace_spike_equals_monai_and_float64(loc, k):
    x = rand((2, 16, 13, 10), seed=9)
    got = KSpaceSpikeNoise(loc, k)(x)
    assert got.dtype == x.dtype and got.shape == x.shape
    if k is None and len(loc) == 3:
        # MONAI 1.6.1 raises here (it assigns the per-channel defaults, a tuple, to a tensor); its
        # documented meaning, each channel its own default, against float64.
        with pytest.raises(TypeError):
            monai_t.KSpaceSpikeNoise(loc, k)(x.clone())
        kk = np.fft.fftshift(np.fft.fftn(x.numpy().astype(np.float64), axes=(1, 2, 3)), axes=(1, 2, 3))
        default = 2.5 * np.log(np.abs(kk) + 1e-10).mean(axis=(1, 2, 3))
        ref = monai_spike64(x.numpy(), [(c, loc, default[c]) for c in range(2)])
        close(got, ref, np.abs(ref - x.numpy()).max() + x.abs().max(), rel=2e-5)
        return
    ref = monai_t.KSpaceSpikeNoise(loc, k)(x.clone())
    span = (ref - x).abs().max() + x.abs().max()
    close(got, ref, span, rel=5e-6)
    if k is not None:
        spikes = []
        locs = [loc] if not isinstance(loc[0], tuple) else list(loc)
        ks = [k] if not isinstance(k, tuple) else list(k)
        for l, v in zip(locs, ks):
            for c in ([l[0]] if len(l) == 4 else [0, 1]):
                spikes.append((c, l[-3:], float(np.float32(v))))
        close(got, monai_spike64(x.numpy(), spikes), span, rel=1e-6)


def test_kspace_spike_dtypes_batch_and_real_volume(ch2):
    vol = ch2[0][:, ::3, ::3, ::3]
    ref = monai_t.KSpaceSpikeNoise((10, 20, 30), 12.0)(vol.clone())
    got = KSpaceSpikeNoise((10, 20, 30), 12.0)(vol)
    assert got.dtype == torch.uint8 == ref.dtype
    assert (got.to(torch.int16) - ref.to(torch.int16)).abs().max() <= 1  # truncation at rounding ties
    x = rand((3, 2, 9, 8, 7), dtype=torch.float64)
    got = KSpaceSpikeNoise((1, 4, 1, 6))(x)
    assert got.dtype == torch.float64
    for i in range(3):
        ref = monai_t.KSpaceSpikeNoise((1, 4, 1, 6))(x[i].clone())
        assert torch.equal(got[i, 0], x[i, 0])  # the other channel is untouched
        close(got[i], ref, (ref - x[i]).abs().max() + x[i].abs().max())
    d = KSpaceSpikeNoised(["a", "b"], (1, 2, 3), 10.0)({"a": x[0], "b": x[1], "c": 1})
    close(d["b"], KSpaceSpikeNoise((1, 2, 3), 10.0)(x[1]), x[1], rel=0)
    assert d["c"] == 1


def test_rand_kspace_spike_equals_monai_with_the_draws():
    x = rand((5, 3, 12, 11, 10), seed=2)
    for channel_wise, rng in [(True, (10.0, 13.0)), (False, (10.0, 13.0)), (True, [(9, 10), (11, 12), (12, 13)]),
                              (True, None), (False, None)]:
        t = RandKSpaceSpikeNoise(prob=0.8, intensity_range=rng, channel_wise=channel_wise, seed=4)
        out = t(x)
        applied = t.last_applied.numpy()
        assert applied.any() and not applied.all()
        for i in range(5):
            if not applied[i]:
                assert torch.equal(out[i], x[i])
                continue
            locs = t.last_locs[i]
            if not channel_wise:
                assert (locs == locs[0]).all()
            if rng is None:
                lo_hi = monai_t.RandKSpaceSpikeNoise()._set_default_range(x[i])
            elif isinstance(rng, list):
                lo_hi = rng
            else:
                lo_hi = [rng] * 3
            ks = [float(a) + (float(b) - float(a)) * t.last_u[i, c] for c, (a, b) in enumerate(lo_hi)]
            if not channel_wise and rng is not None:
                assert len(set(ks)) == 1
            ref = monai_t.KSpaceSpikeNoise([(c,) + tuple(locs[c]) for c in range(3)], ks)(x[i].clone())
            close(out[i], ref, (ref - x[i]).abs().max() + x[i].abs().max(), rel=2e-5 if rng is None else 5e-6)
    t = RandKSpaceSpikeNoise(prob=1.0, intensity_range=(10, 11), seed=1)
    t(x[0])
    assert len(t.sampled_locs) == 3 and len(t.sampled_k_intensity) == 3


def test_rand_kspace_spike_dict_and_errors():
    x = rand((2, 1, 8, 8, 8))
    t = RandKSpaceSpikeNoised(["a", "b"], prob=1.0, intensity_range=(10, 12), seed=3)
    d = t({"a": x, "b": x.clone()})
    assert not torch.equal(d["a"], d["b"])  # a draw per key, as MONAI
    assert not torch.equal(d["a"], x)
    with pytest.raises(ValueError, match="channel_wise"):
        RandKSpaceSpikeNoise(intensity_range=[(1, 2), (3, 4)], channel_wise=False)
    with pytest.raises(RuntimeError, match="one \\(low, high\\) tuple for each channel"):
        RandKSpaceSpikeNoise(prob=1.0, intensity_range=[(1, 2), (3, 4)])(x)
    with pytest.raises(ValueError, match="out of bounds"):
        KSpaceSpikeNoise((8, 1, 1), 3.0)(x)
    with pytest.raises(ValueError, match="sequence of locations"):
        KSpaceSpikeNoise((1, 1, 1), (3.0,))
    with pytest.raises(ValueError, match="one intensity_factor"):
        KSpaceSpikeNoise(((1, 1, 1), (2, 2, 2)), 3.0)
    with pytest.raises(ValueError, match="give k_intensity"):
        KSpaceSpikeNoise(((0, 1, 1, 1), (1, 1, 1), (2, 2, 2)))(x)
    with pytest.raises(KeyError):
        KSpaceSpikeNoised("z", (1, 1, 1), 3.0)({"a": x})


def test_torchio_argument_errors_match():
    for kwargs in [dict(num_ghosts=-1), dict(num_ghosts=2.5), dict(axes=3), dict(intensity=-1.0),
                   dict(restore=(0.5, 1.5))]:
        with pytest.raises(ValueError):
            tio.RandomGhosting(**kwargs)
        with pytest.raises(ValueError):
            RandomGhosting(**kwargs)
    for kwargs in [dict(num_spikes=-1), dict(num_spikes=(2, 1)), dict(intensity=(3, 1))]:
        with pytest.raises(ValueError):
            tio.RandomSpike(**kwargs)
        with pytest.raises(ValueError):
            RandomSpike(**kwargs)


# ---------------- Motion ----------------
MOTIONS = [
    ([[3.0, -4.0, 5.0]], [[1.0, 2.0, -1.5]], [0.4]),  # no time past the middle: the last spectrum swaps
    ([[3.0, -4.0, 5.0], [-2.0, 6.0, 1.0]], [[1.0, 2.0, -1.5], [-2.0, 0.5, 1.0]], [0.3, 0.7]),
    ([[3.0, -4.0, 5.0], [1.0, 1.0, 1.0], [-2.0, -3.0, 4.0]], [[1.0, 2.0, -1.5], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]],
     [0.2, 0.55, 0.8]),
]
AFFINES = [np.eye(4), np.array([[0.9, 0.1, 0.0, -10.0], [0.0, 1.2, 0.05, -20.0], [0.02, 0.0, 2.0, 5.0],
                                [0.0, 0.0, 0.0, 1.0]])]


@pytest.mark.parametrize("interp", ["linear", "nearest", "bspline"])
@pytest.mark.parametrize("affine", [0, 1])
@pytest.mark.parametrize("motion", range(len(MOTIONS)))
def test_motion_equals_torchio(interp, affine, motion):
    """Motion vs TorchIO's for each interpolation ('bspline': SimpleITK's mirrored cubic
    B-spline, float32 prefilter and taps: 2e-5 of the range)."""
    from monai.data import MetaTensor

    deg, tr, tm = (np.asarray(v, dtype=np.float64) for v in MOTIONS[motion])
    tm = tm.astype(np.float32)
    x = rand((2, 17, 20, 16), seed=motion) + 30
    aff = AFFINES[affine]
    got = Motion(deg, tr, tm, interp)(MetaTensor(x, affine=torch.as_tensor(aff)))
    subject = tio.Subject(img=tio.ScalarImage(tensor=x.clone(), affine=aff))
    ref = tio.Motion(degrees=deg, translation=tr, times=tm, image_interpolation=interp)(subject)["img"].data
    assert got.dtype == torch.float32
    close(got.as_tensor(), ref, x, rel=2e-5 if interp == "bspline" else 3e-6)
    assert float((got.as_tensor() - x).abs().max()) > 1.0  # the artefact is there


def test_random_motion_per_sample_real_volume_and_dict(ch2):
    vol = ch2[0][0][None, None, ::3, ::3, ::3].to(torch.float32)
    batch = torch.cat([vol, vol.flip(2), vol * 0.5])
    t = RandomMotion(degrees=5, translation=4, num_transforms=2, seed=6, affine=ch2[1])
    out = t(batch)
    p = t.last_params
    assert bool(p["applied"].all())
    for i in range(3):
        subject = tio.Subject(img=tio.ScalarImage(tensor=batch[i].clone(), affine=ch2[1]))
        ref = tio.Motion(degrees=p["degrees"][i], translation=p["translation"][i],
                         times=p["times"][i].astype(np.float32), image_interpolation="linear")(subject)["img"].data
        close(out[i], ref, batch[i], rel=3e-6)
    x = rand((300, 1, 5, 6, 7))
    t = RandomMotion(degrees=(1, 3), translation=2, num_transforms=3, p=0.5, seed=2)
    small = t._plan(x)
    assert 100 < int(small["applied"].sum()) < 200
    assert ((small["degrees"] >= 1) & (small["degrees"] < 3)).all() and (np.abs(small["translation"]) < 2).all()
    step = 0.25
    assert (np.abs(small["times"] - step * np.arange(1, 4)) <= 0.3 * step).all()
    out = t(x[:6])
    keep = ~t.last_params["applied"]
    assert torch.equal(out[keep], x[:6][keep])
    data = {"a": rand((1, 8, 8, 8), 1) + 10, "b": rand((1, 8, 8, 8), 1) + 10, "label": torch.ones(1, 8, 8, 8)}
    res = RandomMotion(label_keys=("label",), seed=4)(data)
    assert res["label"] is data["label"] and not torch.equal(res["a"], res["b"])  # a draw per image


def test_motion_argument_errors_match():
    for kwargs in [dict(num_transforms=0), dict(degrees=(3, 1)), dict(translation=-1)]:
        with pytest.raises(ValueError):
            tio.RandomMotion(**kwargs)
        with pytest.raises(ValueError):
            RandomMotion(**kwargs)
    with pytest.raises(ValueError, match="one row per motion"):
        Motion([[1, 2, 3]], [[1, 2, 3], [4, 5, 6]], [0.5])
    with pytest.raises(NotImplementedError, match="image_interpolation"):
        RandomMotion(image_interpolation="lanczos")


@pytest.mark.parametrize("device", devices())
def test_device_batches_match_cpu(device):
    x = rand((3, 2, 14, 12, 11), seed=6)
    for t in (lambda: RandomGhosting(seed=1), lambda: RandomSpike(num_spikes=(1, 3), seed=2),
              lambda: RandKSpaceSpikeNoise(prob=1.0, seed=3), lambda: KSpaceSpikeNoise((3, 4, 5)),
              lambda: RandomMotion(seed=4)):
        a, b = t()(x), t()(x.to(device))
        assert b.device.type == device
        close(b, a, (a - x).abs().max() + x.abs().max())
