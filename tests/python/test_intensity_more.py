"""RandStdShiftIntensity, RandScaleIntensityFixedMean, RandHistogramShift (and their deterministic and
dictionary forms) vs MONAI given the same parameters, read back from the kernel's Philox draws or the
transform's host draws; parameter distributions; determinism; errors; opcheck / gradcheck; CUDA twin.
Also RandRicianNoise with per-channel mean / std sequences and NormalizeIntensity with array-valued
subtrahend / divisor (MONAI's voxel-wise form), vs MONAI and float64 references."""
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

from voxaug import ops
from voxaug import stats as vs
from voxaug import transforms as vt

from conftest import devices

monai = pytest.importorskip("monai")
from monai import transforms as mt  # noqa: E402
from monai.data import MetaTensor  # noqa: E402

DEVICES = devices()
need_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
MASK32 = 0xFFFFFFFF
SAMPLE, CHANNEL = 1, 2


def rand_volume(shape, lo=-300.0, hi=400.0, dtype=torch.float32, seed=0, device="cpu", zeros=0.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    if zeros:
        x = torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < zeros, torch.zeros(()), x)
    return x.to(dtype).to(device)


def philox4x32_10(ctr, key):
    """Independent Python Philox4x32-10 (Salmon et al.), to read back in-kernel draws."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def philox_words(seed, sample, stream, block=0):
    seed &= (1 << 64) - 1
    return philox4x32_10((block & MASK32, block >> 32, sample, stream), (seed & MASK32, seed >> 32))


def u01(word):
    return np.float32((word >> 8) / 16777216.0)


def draw_range(word, lo, hi):  # the kernel's float32 lo + (hi - lo) u
    lo, hi = np.float32(lo), np.float32(hi)
    return float(lo + (hi - lo) * u01(word))


def fixed_seed(t, seed):
    t._next_seed = lambda: seed
    return t


def ch2_float(ch2):
    return ch2[0].to(torch.float32)


def monai_hist(x, ref, flo):
    """MONAI RandHistogramShift on one (C, ...) sample with the given control points."""
    t = mt.RandHistogramShift(num_control_points=len(ref), prob=1.0)
    t._do_transform = True
    t.reference_control_points, t.floating_control_points = np.asarray(ref), np.asarray(flo)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.as_tensor(t(x.clone(), randomize=False))


# ---------------- StdShiftIntensity ----------------
@pytest.mark.parametrize("nonzero", [False, True])
@pytest.mark.parametrize("channel_wise", [False, True])
@pytest.mark.parametrize("shape", [(2, 5, 6, 7), (1, 1, 1, 3), (3, 4, 1, 9)])
def test_std_shift_matches_monai(nonzero, channel_wise, shape):
    x = rand_volume(shape, zeros=0.3, seed=1)
    for factor in (-1.3, 0.0, 0.7):
        ours = vt.StdShiftIntensity(factor, nonzero, channel_wise)(x)
        ref = torch.as_tensor(mt.StdShiftIntensity(factor, nonzero, channel_wise)(x.clone()))
        assert ours.dtype == ref.dtype == torch.float32
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=2e-4)
        if nonzero:
            assert torch.equal(ours[x == 0], x[x == 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rand_std_shift_read_back_factor_matches_monai(dtype):
    seed, prob = 4242, 0.6
    x = rand_volume((7, 2, 5, 6, 7), lo=-40, hi=90, zeros=0.2, dtype=dtype, seed=2)
    for nonzero, cw in ((False, False), (True, True)):
        out = fixed_seed(vt.RandStdShiftIntensity((-2.0, 1.5), prob, nonzero, cw), seed)(x)
        assert out.dtype == torch.float32
        applied = 0
        for n in range(7):
            w = philox_words(seed, n, SAMPLE)
            if not u01(w[0]) < prob:
                assert torch.equal(out[n], x[n].float())
                continue
            applied += 1
            factor = draw_range(w[1], -2.0, 1.5)
            assert -2.0 <= factor < 1.5
            # MONAI converts to float32 first (dtype=float32), as voxaug computes
            ref = torch.as_tensor(mt.StdShiftIntensity(factor, nonzero, cw)(x[n].float().clone()))
            torch.testing.assert_close(out[n], ref, rtol=1e-6, atol=1e-4)
        assert 0 < applied < 7


def test_rand_std_shift_matches_monai_on_ch2(ch2):
    img = ch2_float(ch2)[None]
    seed = 31
    out = fixed_seed(vt.RandStdShiftIntensity(2.0, prob=1.0, nonzero=True), seed)(img)
    factor = draw_range(philox_words(seed, 0, SAMPLE)[1], -2.0, 2.0)
    ref = torch.as_tensor(mt.StdShiftIntensity(factor, nonzero=True)(img[0].clone()))
    torch.testing.assert_close(out[0], ref, rtol=1e-6, atol=1e-3)
    assert not torch.equal(out[0], img[0])


def test_rand_std_shift_factor_distribution():
    # values {0, 2}: population std 1, so out - x is the factor itself
    x = torch.zeros(400, 1, 1, 1, 2)
    x[..., 1] = 2.0
    out = vt.RandStdShiftIntensity((-0.5, 1.5), prob=1.0, seed=5)(x)
    f = (out - x)[..., 0].flatten().double().numpy()
    assert (f >= -0.5).all() and (f < 1.5).all()
    assert stats.kstest(f, stats.uniform(loc=-0.5, scale=2.0).cdf).pvalue > 1e-3
    # MONAI's draws follow the same law
    m = mt.RandStdShiftIntensity((-0.5, 1.5), prob=1.0)
    m.set_random_state(0)
    mf = np.array([float(m(x[0].clone())[0, 0, 0, 0]) for _ in range(400)])
    assert stats.ks_2samp(f, mf).pvalue > 1e-3


# ---------------- ScaleIntensityFixedMean ----------------
FIXED_MEAN_CASES = [dict(fixed_mean=fm, preserve_range=pr, channel_wise=cw)
                    for fm in (True, False) for pr in (False, True) for cw in (False, True)]


@pytest.mark.parametrize("kw", FIXED_MEAN_CASES)
def test_scale_fixed_mean_matches_monai(kw):
    x = rand_volume((3, 6, 5, 4), lo=-20, hi=70, seed=3)
    for factor in (-0.4, 0.0, 0.9):
        ours = vt.ScaleIntensityFixedMean(factor, **kw)(x)
        ref = torch.as_tensor(mt.ScaleIntensityFixedMean(factor, **kw)(x.clone()))
        torch.testing.assert_close(ours, ref, rtol=1e-6, atol=2e-5)
        if kw["preserve_range"]:
            assert ours.min() >= x.min() and ours.max() <= x.max()


@pytest.mark.parametrize("kw", [dict(), dict(preserve_range=True), dict(channel_wise=True, preserve_range=True),
                                dict(fixed_mean=False, channel_wise=True)])
def test_rand_scale_fixed_mean_read_back_matches_monai(kw):
    seed, prob, c = 9876, 0.7, 3
    x = rand_volume((6, c, 5, 6, 4), lo=-10, hi=50, seed=4)
    out = fixed_seed(vt.RandScaleIntensityFixedMean(prob, (-0.5, 0.8), **kw), seed)(x)
    for n in range(6):
        w = philox_words(seed, n, SAMPLE)
        if not u01(w[0]) < prob:
            assert torch.equal(out[n], x[n])
            continue
        if kw.get("channel_wise"):  # one factor per channel, statistics per channel
            for ch in range(c):
                f = draw_range(philox_words(seed, n, CHANNEL, ch)[0], -0.5, 0.8)
                sub = {k: v for k, v in kw.items() if k != "channel_wise"}
                ref = torch.as_tensor(mt.ScaleIntensityFixedMean(f, **sub)(x[n, ch:ch + 1].clone()))
                torch.testing.assert_close(out[n, ch:ch + 1], ref, rtol=1e-6, atol=2e-5)
        else:
            f = draw_range(w[1], -0.5, 0.8)
            ref = torch.as_tensor(mt.ScaleIntensityFixedMean(f, **kw)(x[n].clone()))
            torch.testing.assert_close(out[n], ref, rtol=1e-6, atol=2e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rand_scale_fixed_mean_dtypes_and_ch2(ch2, dtype):
    img = ch2_float(ch2).to(dtype)[None]
    seed = 77
    out = fixed_seed(vt.RandScaleIntensityFixedMean(1.0, 0.5, preserve_range=True, dtype=None), seed)(img)
    assert out.dtype == dtype
    f = draw_range(philox_words(seed, 0, SAMPLE)[1], -0.5, 0.5)
    ref = torch.as_tensor(mt.ScaleIntensityFixedMean(f, preserve_range=True)(img[0].float().clone()))
    tol = {torch.float32: 1e-4, torch.float16: 0.13, torch.bfloat16: 1.0}[dtype]  # one output ulp at 255
    torch.testing.assert_close(out[0].float(), ref, rtol=0, atol=tol)
    assert out.min() >= img.min() and out.max() <= img.max() and not torch.equal(out, img)


def test_rand_scale_fixed_mean_factor_distribution_and_mean_kept():
    x = rand_volume((300, 1, 2, 2, 2), lo=0, hi=10, seed=6)
    out = vt.RandScaleIntensityFixedMean(1.0, (-0.3, 0.6), seed=7)(x)
    xc = x - x.mean(dim=(1, 2, 3, 4), keepdim=True)
    oc = out - x.mean(dim=(1, 2, 3, 4), keepdim=True)
    f = ((oc * xc).sum(dim=(1, 2, 3, 4)) / (xc * xc).sum(dim=(1, 2, 3, 4)) - 1).double().numpy()
    assert stats.kstest(f, stats.uniform(loc=-0.3, scale=0.9).cdf).pvalue > 1e-3
    torch.testing.assert_close(out.mean(dim=(1, 2, 3, 4)), x.mean(dim=(1, 2, 3, 4)), rtol=1e-5, atol=1e-5)


# ---------------- RandHistogramShift ----------------
@pytest.mark.parametrize("ncp", [3, 10, (4, 12)])
@pytest.mark.parametrize("shape", [(1, 9, 8, 7), (2, 5, 1, 6)])
def test_histogram_shift_read_back_matches_monai(ncp, shape):
    x = rand_volume((5, *shape), lo=-100, hi=250, seed=8)
    t = vt.RandHistogramShift(ncp, prob=0.8, seed=9)
    out = t(x)
    applied = 0
    for n in range(5):
        if not t.last_applied[n]:
            assert torch.equal(out[n], x[n])
            continue
        applied += 1
        k = int(t.last_num_points[n])
        pts = t.last_control_points[n, :k].numpy()
        ref = monai_hist(x[n], np.linspace(0, 1, k), pts)
        # MONAI's float32 slopes on the same points: equal up to rounding of the mean / stats
        torch.testing.assert_close(out[n], ref, rtol=0, atol=2e-4)
        assert not torch.equal(out[n], x[n])
    assert applied > 0


def test_histogram_shift_matches_monai_on_ch2(ch2):
    img = ch2_float(ch2)[None]
    t = vt.RandHistogramShift(10, prob=1.0, seed=10)
    out = t(img)
    pts = t.last_control_points[0].numpy()
    ref = monai_hist(img[0], np.linspace(0, 1, 10), pts)
    torch.testing.assert_close(out[0], ref, rtol=0, atol=1e-4)
    assert out.min() == img.min() and out.max() == img.max()  # end points stay


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_histogram_shift_half_precision(dtype):
    x = rand_volume((2, 1, 6, 7, 8), lo=-5, hi=30, seed=11)
    t = vt.RandHistogramShift(6, prob=1.0, seed=12)
    out = t(x.to(dtype))
    assert out.dtype == dtype
    for n in range(2):
        ref = monai_hist(x[n].to(dtype).float(), np.linspace(0, 1, 6), t.last_control_points[n].numpy())
        torch.testing.assert_close(out[n].float(), ref, rtol={torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype],
                                   atol=1e-3)


def test_histogram_shift_float64_reference_and_ends():
    """float64 np.interp on the float32 rounding of the image: agrees to float32 accuracy; values at
    min / max map to the end points exactly."""
    x = rand_volume((3, 2, 4, 5, 6), lo=-1, hi=1, seed=13)
    t = vt.RandHistogramShift((3, 7), prob=1.0, seed=14)
    out = t(x)
    for n in range(3):
        k = int(t.last_num_points[n])
        mn, mx = x[n].double().min().item(), x[n].double().max().item()
        xp = mn + np.linspace(0, 1, k) * (mx - mn)
        fp = mn + t.last_control_points[n, :k].numpy() * (mx - mn)
        ref = np.interp(x[n].double().numpy(), xp, fp)
        np.testing.assert_allclose(out[n].double().numpy(), ref, rtol=0, atol=2e-6)
    # the end points stay (up to MONAI's m x + (f0 - m x0) rounding)
    torch.testing.assert_close(out.amin(dim=(1, 2, 3, 4)), x.amin(dim=(1, 2, 3, 4)), rtol=0, atol=1e-6)
    torch.testing.assert_close(out.amax(dim=(1, 2, 3, 4)), x.amax(dim=(1, 2, 3, 4)), rtol=0, atol=1e-6)


def test_histogram_shift_constant_image_unchanged_and_nan_table_is_identity():
    x = torch.full((2, 1, 3, 3, 3), 5.0)
    assert torch.equal(vt.RandHistogramShift(prob=1.0, seed=1)(x), x)
    y = rand_volume((1, 1, 3, 4, 5), seed=15)
    table = torch.cat([ops.minmax(y).view(1, 2), torch.full((1, 5), float("nan"), dtype=torch.float64)], 1)
    assert torch.equal(ops.pointwise_chain(y, [ops.Step(ops.HISTOGRAM_SHIFT, values=table)]), y)


def test_histogram_shift_draws_follow_monai_law():
    t = vt.RandHistogramShift((4, 9), prob=0.3, seed=16)
    n = 4000
    pts = t._points(n, 1234)
    k, applied = t.last_num_points, t.last_applied
    assert abs(applied.double().mean().item() - 0.3) < 0.03
    counts = torch.bincount(k, minlength=10)[4:10].double().numpy()
    assert counts.min() > 0 and stats.chisquare(counts).pvalue > 1e-3  # randint(4, 10)
    for i in range(n):
        if not applied[i]:
            assert torch.isnan(pts[i]).all()
            continue
        kk = int(k[i])
        row = pts[i].numpy()
        ref = np.linspace(0, 1, kk)
        assert row[0] == 0.0 and row[kk - 1] == 1.0 and np.isnan(row[kk:]).all()
        assert (np.diff(row[:kk]) >= 0).all() and (row[1:kk - 1] <= ref[2:kk]).all()
    # first interior point: U(0, x_2) = U(0, 2 / (K - 1)); compare with MONAI's own draws
    sel = applied & (k == 6)
    ours = (pts[sel, 1] * 2.5).numpy()  # / (2 / 5)
    assert stats.kstest(ours, stats.uniform.cdf).pvalue > 1e-3
    m = mt.RandHistogramShift(6, prob=1.0)
    m.set_random_state(3)
    theirs = []
    for _ in range(400):
        m.randomize()
        theirs.append(m.floating_control_points[1] * 2.5)
    assert stats.ks_2samp(ours, np.array(theirs)).pvalue > 1e-3


# ---------------- shared: determinism, dict forms, compose, errors ----------------
def _make(name, **kw):
    return {
        "std": lambda: vt.RandStdShiftIntensity((-1, 1), prob=1.0, channel_wise=True, **kw),
        "fixed": lambda: vt.RandScaleIntensityFixedMean(1.0, (-0.5, 0.5), preserve_range=True, **kw),
        "hist": lambda: vt.RandHistogramShift((3, 8), prob=1.0, **kw),
    }[name]()


@pytest.mark.parametrize("name", ["std", "fixed", "hist"])
def test_same_seed_same_bytes_and_global_seed(name):
    x = rand_volume((3, 2, 5, 6, 7), seed=17)
    a, b = _make(name, seed=5)(x), _make(name, seed=5)(x)
    assert torch.equal(a, b) and not torch.equal(a, x)
    assert not torch.equal(a, _make(name, seed=6)(x))
    torch.manual_seed(3)
    c = _make(name)(x)
    torch.manual_seed(3)
    assert torch.equal(c, _make(name)(x))


@pytest.mark.parametrize("name", ["std", "fixed", "hist"])
def test_unbatched_numpy_and_meta_tensor(name):
    x = rand_volume((2, 5, 6, 7), seed=18)
    out = _make(name, seed=1)(x)
    assert out.shape == x.shape
    assert torch.equal(torch.as_tensor(_make(name, seed=1)(x.numpy())), out)
    mt_in = MetaTensor(x, meta={"filename_or_obj": "a.nii.gz"})
    res = _make(name, seed=1)(mt_in)
    assert isinstance(res, MetaTensor) and res.meta["filename_or_obj"] == "a.nii.gz"
    assert torch.equal(res.as_tensor(), out)


def test_dictionary_forms_share_draws_and_skip_missing_keys():
    x = rand_volume((1, 6, 7, 8), lo=0, hi=5, seed=19)
    y = rand_volume((1, 6, 7, 8), lo=-3, hi=9, seed=20)
    for d in (vt.RandStdShiftIntensityd(["a", "b"], 1.0, prob=1.0, seed=2),
              vt.RandScaleIntensityFixedMeand(["a", "b"], 0.5, prob=1.0, seed=2),
              vt.RandHistogramShiftd(["a", "b"], prob=1.0, seed=2)):
        same = d({"a": x, "b": x.clone()})
        assert torch.equal(same["a"], same["b"]) and not torch.equal(same["a"], x)
        res = d({"a": x, "b": y, "c": 1})
        assert res["c"] == 1
        with pytest.raises(KeyError, match="'b' is not in the data"):
            d({"a": x})
    # shared factor, each key with its own statistics (MONAI's d forms)
    seed = 2
    d = vt.RandStdShiftIntensityd(["a", "b"], 1.0, prob=1.0, seed=seed)
    d.transform._next_seed = lambda: 99
    res = d({"a": x, "b": y})
    f = draw_range(philox_words(99, 0, SAMPLE)[1], -1.0, 1.0)
    for k, v in (("a", x), ("b", y)):
        torch.testing.assert_close(res[k], torch.as_tensor(mt.StdShiftIntensity(f)(v.clone())), rtol=1e-6, atol=1e-5)
    h = vt.RandHistogramShiftd(["a", "b"], 5, prob=1.0)
    h.transform._next_seed = lambda: 7
    res = h({"a": x, "b": y})
    pts = h.transform.last_control_points[0].numpy()
    for k, v in (("a", x), ("b", y)):
        torch.testing.assert_close(res[k], monai_hist(v, np.linspace(0, 1, 5), pts), rtol=0, atol=1e-5)
    assert vt.RandHistogramShiftd(["a", "z"], prob=1.0, allow_missing_keys=True, seed=1)({"a": x})["a"].shape == x.shape
    d = vt.ScaleIntensityFixedMeand("a", 0.3, preserve_range=True)({"a": x})
    torch.testing.assert_close(d["a"], torch.as_tensor(mt.ScaleIntensityFixedMean(0.3, preserve_range=True)(x.clone())))
    d = vt.StdShiftIntensityd("a", 0.3)({"a": x})
    torch.testing.assert_close(d["a"], torch.as_tensor(mt.StdShiftIntensity(0.3)(x.clone())))


def test_compose_fuses_following_steps_and_equals_one_by_one(monkeypatch):
    calls = []
    real = ops.pointwise_chain
    monkeypatch.setattr(ops, "pointwise_chain", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    x = rand_volume((2, 2, 6, 7, 8), lo=0, hi=100, seed=21)
    make = lambda: [vt.RandShiftIntensity(1.0, prob=1.0, seed=1), _make("hist", seed=2),  # noqa: E731
                    vt.RandGaussianNoise(prob=1.0, seed=3), _make("std", seed=4), vt.RandScaleIntensity(0.1, 1.0, seed=5),
                    _make("fixed", seed=6), vt.RandGaussianNoise(prob=1.0, seed=7)]
    fused = vt.Compose(make())(x)
    assert calls == [1, 2, 2, 2]  # each new transform needs its own input's statistics
    y = x
    for t in make():
        y = t(y)
    assert torch.equal(fused, y)


def test_bad_inputs_give_clear_errors():
    x = rand_volume((2, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="greater than or equal to 3"):
        vt.RandHistogramShift(2)
    with pytest.raises(ValueError, match="greater than or equal to 3"):
        vt.RandHistogramShift((2, 5))
    with pytest.raises(ValueError, match="a number or a pair"):
        vt.RandHistogramShift((3, 4, 5))
    for bad in (10.5, (3, 7.5), True, float("nan")):
        with pytest.raises(ValueError, match="num_control_points must be an integer"):
            vt.RandHistogramShift(bad)
    for bad in (math.inf, float("nan"), 0.0):
        with pytest.raises(ValueError, match="gamma must be"):
            vt.AdjustContrast(bad)
        with pytest.raises(ValueError, match="gamma must be"):
            vt.Gamma(bad)
    for bad in ((0.0, 100.0), -90.0):
        with pytest.raises(ValueError, match=r"log_gamma must lie in \[-88, 88\]"):
            vt.RandomGamma(bad)
    with pytest.raises(ValueError, match="num_control_points must be <="):
        vt.RandHistogramShift(5000)
    with pytest.raises(ValueError, match="prob must be in"):
        vt.RandHistogramShift(prob=1.5)
    with pytest.raises(ValueError, match="factors should be a number or pair"):
        vt.RandStdShiftIntensity((1, 2, 3))
    with pytest.raises(ValueError, match="factors should be a number or pair"):
        vt.RandScaleIntensityFixedMean(factors=(1, 2, 3))
    with pytest.raises(ValueError, match="dtype must be"):
        vt.RandStdShiftIntensity(1.0, dtype="int8")
    with pytest.raises(ValueError, match="a histogram shift step needs"):
        ops.pointwise_chain(x, [ops.Step(ops.HISTOGRAM_SHIFT)])
    with pytest.raises(ValueError, match=r"histogram table must be float64 of shape \(2, 2 \+ K\)"):
        ops.pointwise_chain(x, [ops.Step(ops.HISTOGRAM_SHIFT, values=torch.zeros(2, 2, dtype=torch.float64))])
    with pytest.raises(ValueError, match=r"histogram table must be float64"):
        ops.pointwise_chain(x, [ops.Step(ops.HISTOGRAM_SHIFT, values=torch.zeros(2, 6))])
    with pytest.raises(ValueError, match="a std shift step needs the"):
        ops.pointwise_chain(x, [ops.Step(ops.STD_SHIFT_INTENSITY, 0, (1.0,))])
    with pytest.raises(ValueError, match=r"stats must be float64 of shape \(2, 1, 3\)"):
        ops.pointwise_chain(x, [ops.Step(ops.SCALE_INTENSITY_FIXED_MEAN, 0, (1.0,), values=ops.minmax(x))])
    with pytest.raises(ValueError, match="low must be <= high"):
        ops.pointwise_chain(x, [ops.Step(ops.STD_SHIFT_INTENSITY, ops.RANDOM, (0, 2.0, 1.0), values=ops.moments(x))])
    with pytest.raises(ValueError, match="factor must be finite"):
        ops.pointwise_chain(x, [ops.Step(ops.SCALE_INTENSITY_FIXED_MEAN, 0, (float("inf"),),
                                         values=torch.zeros(2, 1, 3, dtype=torch.float64))])
    with pytest.raises(ValueError, match=r"ops\[0\] must be 0..11"):
        ops.pointwise_chain(x, [ops.Step(12)])


# ---------------- op level: opcheck, gradcheck, batch split, CUDA twin ----------------
def _cases(device, dtype=torch.float32):
    x = rand_volume((3, 2, 3, 4, 5), lo=1, hi=50, dtype=dtype, device=device, zeros=0.1)
    n = x.shape[0]
    pts = torch.tensor([[0.0, 0.3, 0.35, 0.9, 1.0, float("nan")], [0.0, 0.7, 1.0] + [float("nan")] * 3,
                        [float("nan")] * 6], dtype=torch.float64)
    table = torch.cat([ops.minmax(x).view(n, 2), pts.to(device)], 1)
    # a wider range for gradcheck: keeps every voxel strictly inside the map
    mm = ops.minmax(x).view(n, 2)
    wide = torch.cat([torch.stack([mm[:, 0] - 1, mm[:, 1] + 1], 1), pts.to(device)], 1)
    fm = torch.cat([ops.moments(x, True)[..., 1:2], ops.minmax(x, True)], -1)
    chain = lambda t: [ops.Step(ops.HISTOGRAM_SHIFT, values=t), ops.Step(ops.GAUSSIAN_NOISE, 0, (0.0, 1.0), 1.0, 5),  # noqa
                       ops.Step(ops.STD_SHIFT_INTENSITY, ops.RANDOM, (0, -1, 1), 1.0, 6, values=ops.moments(x))]
    return x, [
        ("hist", [ops.Step(ops.HISTOGRAM_SHIFT, values=table)], [ops.Step(ops.HISTOGRAM_SHIFT, values=wide)]),
        ("std", [ops.Step(ops.STD_SHIFT_INTENSITY, ops.RANDOM | ops.NONZERO | ops.CHANNEL_WISE, (0, -1, 2), 0.8, 3,
                          values=ops.moments(x, True, True))], None),
        ("fixed", [ops.Step(ops.SCALE_INTENSITY_FIXED_MEAN, ops.RANDOM | ops.FIXED_MEAN | ops.CHANNEL_WISE,
                            (0, -0.5, 0.5), 0.9, 4, values=fm)], None),
        ("fixed_range", [ops.Step(ops.SCALE_INTENSITY_FIXED_MEAN, ops.FIXED_MEAN | ops.PRESERVE_RANGE | ops.CHANNEL_WISE,
                                  (0.7,), values=fm)], None),
        ("chain", chain(table), chain(wide)),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_new_steps(device):
    x, cases = _cases(device)
    for name, steps, _ in cases:
        torch.library.opcheck(torch.ops.voxaug.pointwise_chain, (x, *ops._lists(steps)))
        torch.library.opcheck(torch.ops.voxaug.pointwise_chain_, (x.clone(), *ops._lists(steps)),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_float64(device):
    x, cases = _cases(device, torch.float64)
    x = torch.where(x == 0, torch.full((), 3.0, dtype=x.dtype, device=device), x)  # nonzero: no jump at 0
    for name, steps, grad_steps in cases:
        steps = grad_steps or steps
        xx = x.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: ops.pointwise_chain(t, steps), (xx,), eps=1e-6, atol=1e-5), name


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_and_batch_split_invariant(device):
    x, cases = _cases(device)
    for name, steps, _ in cases:
        a = ops.pointwise_chain(x, steps)
        assert torch.equal(a, ops.pointwise_chain(x, steps)), name
        assert not torch.isnan(a).any() and not torch.equal(a, x), name
        for i in range(x.shape[0]):
            sub = [ops.Step(s.op, s.flags, s.params, s.prob, s.seed,
                            None if s.values is None else s.values[i:i + 1]) for s in steps]
            assert torch.equal(ops.pointwise_chain(x[i:i + 1], sub, first_sample=i), a[i:i + 1]), name


@need_cuda
def test_cuda_matches_cpu_bitwise():
    x, cases = _cases("cpu")
    xg, cases_g = _cases("cuda")
    for (name, steps, gs), (_, steps_g, gsg) in zip(cases, cases_g):
        assert torch.equal(ops.pointwise_chain(x, steps), ops.pointwise_chain(xg, steps_g).cpu()), name
        g = torch.rand_like(x)
        s, sg = gs or steps, gsg or steps_g
        a = torch.ops.voxaug.pointwise_chain_backward(g, x, *ops._lists(s))
        b = torch.ops.voxaug.pointwise_chain_backward(g.cuda(), xg, *ops._lists(sg))
        assert torch.equal(a, b.cpu()), name
    for name in ("std", "fixed", "hist"):  # transforms end to end
        x = rand_volume((2, 2, 9, 10, 11), seed=22)
        assert torch.equal(_make(name, seed=3)(x), _make(name, seed=3)(x.cuda()).cpu()), name


def test_integer_input_gives_float32_like_its_float_version(ch2):
    img = ch2[0][None, :, 60:100, 50:110, 40:90]  # uint8
    for make in (lambda: vt.RandHistogramShift(8, prob=1.0, seed=3),
                 lambda: vt.RandStdShiftIntensity(1.0, prob=1.0, seed=3),
                 lambda: vt.RandScaleIntensityFixedMean(1.0, 0.5, preserve_range=True, seed=3)):
        out = make()(img)
        assert out.dtype == torch.float32
        assert torch.equal(out, make()(img.float()))


# ---------------- issue 5: half-precision inputs, ch2, per-sample gates ----------------
# The reference is always MONAI / TorchIO on the float32 copy of the half data (every float16 /
# bfloat16 value is exact in float32) with voxaug's drawn parameters. Where voxaug's result is
# float32 (its default dtype, TorchIO's float32 results, the filters) the half type only shapes
# the input and the float32 tolerance of the float32 test holds; where the result keeps the half
# dtype (dtype=None), voxaug rounds its float32 result once to that type, which is off by at most
# half an ulp, eps / 2 relative (eps = 2^-10 for float16, 2^-7 for bfloat16); the tolerance is
# one eps, the other half covering the float32 differences.
HALF = [torch.float16, torch.bfloat16]
EPS = {dt: torch.finfo(dt).eps for dt in HALF}


def philox_words_np(seed, sample, stream, blocks):
    """philox_words over a numpy array of blocks (the same 32-bit arithmetic in uint64)."""
    seed &= (1 << 64) - 1
    k0, k1 = np.uint64(seed & MASK32), np.uint64(seed >> 32)
    m, b = np.uint64(MASK32), np.asarray(blocks, dtype=np.uint64)
    c0, c1 = b & m, b >> np.uint64(32)
    c2, c3 = np.full_like(b, sample), np.full_like(b, stream)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0) & m, p1 & m, ((p0 >> np.uint64(32)) ^ c3 ^ k1) & m, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return c0, c1, c2, c3


def test_numpy_philox_matches_scalar_philox():
    """The vectorised copy against the scalar one (itself checked on Random123's known answer in
    test_intensity.py), over blocks that cross 2^32 and a seed with both key words set."""
    blocks = np.array([0, 1, 7, MASK32, 1 << 32, (5 << 32) + 3], dtype=np.uint64)
    seed = (0xDEADBEEF << 32) | 0x12345678
    vec = philox_words_np(seed, 3, CHANNEL, blocks)
    for i, b in enumerate(blocks.tolist()):
        assert tuple(int(w[i]) for w in vec) == philox_words(seed, 3, CHANNEL, b)


def philox_normals(seed, sample, stream, numel):
    """Element e's standard normal, float64 Box-Muller on the words the kernel uses: block e // 4,
    words (x, y) for e % 4 in {0, 1} (cosine, sine), (z, w) for {2, 3}; radius from (r >> 8) + 1."""
    w = philox_words_np(seed, sample, stream, np.arange((numel + 3) // 4))
    z = np.empty((len(w[0]), 4))
    for j, (a, b) in enumerate(((w[0], w[1]), (w[2], w[3]))):
        radius = np.sqrt(-2.0 * np.log(((a >> np.uint64(8)) + np.uint64(1)) / 16777216.0))
        angle = np.pi * 2.0 * ((b >> np.uint64(8)) / 16777216.0)
        z[:, 2 * j], z[:, 2 * j + 1] = radius * np.cos(angle), radius * np.sin(angle)
    return z.reshape(-1)[:numel]


class ReplayR:
    """Stands in for MONAI's numpy RandomState inside RandRicianNoise: hands out voxaug's draws in
    MONAI's call order (uniform(0, std) for the sampled std, then normal(mean, s) twice)."""

    def __init__(self, fractions, normals):
        self.fractions, self.normals = list(fractions), list(normals)

    def uniform(self, lo, hi):
        return float(np.float32(hi) * self.fractions.pop(0))  # the kernel's float32 std * u

    def normal(self, mean, std, size):
        return (mean + std * self.normals.pop(0)).reshape(size)


def monai_rician_replay(x1, seed, n, channel_wise, **kw):
    """MONAI RandRicianNoise on one float32 (C, D, H, W) sample with voxaug's sample-n draws."""
    c = x1.shape[0]
    z1, z2 = (philox_normals(seed, n, stream, x1.numel()).reshape(x1.shape) for stream in (0, 4))
    if channel_wise:
        fr = [u01(philox_words(seed, n, CHANNEL, ch)[0]) for ch in range(c)]
        normals = [v for ch in range(c) for v in (z1[ch], z2[ch])]
    else:
        fr, normals = [u01(philox_words(seed, n, SAMPLE)[2])], [z1, z2]
    m = mt.RandRicianNoise(prob=1.0, channel_wise=channel_wise, **kw)
    m._do_transform = True
    m.R = ReplayR(fr, normals)
    return torch.as_tensor(m(x1.clone(), randomize=False))


@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
@pytest.mark.parametrize("kw", [dict(std=3.0, channel_wise=False),
                                dict(std=0.2, channel_wise=True, relative=True, mean=0.3)])
def test_rician_matches_monai_voxel_by_voxel_with_read_back_noise(dtype, kw):
    """MONAI's own arithmetic on voxaug's noise (Philox words read back, Box-Muller in float64):
    agree voxel by voxel. float32 results: the kernel's float32 log / sincos against float64,
    2e-6 relative of the output's size; half results (dtype=None) as the section's note says."""
    seed, prob = 2024, 0.7
    x = rand_volume((5, 2, 6, 7, 9), lo=0, hi=40, seed=30).to(dtype)
    for out_dtype in (torch.float32, None):
        out = fixed_seed(vt.RandRicianNoise(prob=prob, dtype=out_dtype, **kw), seed)(x)
        expect = torch.float32 if out_dtype is not None else dtype
        assert out.dtype == expect and not torch.isnan(out.float()).any()
        applied = 0
        for n in range(5):
            if not u01(philox_words(seed, n, SAMPLE)[0]) < prob:
                assert torch.equal(out[n], x[n].to(expect))
                continue
            applied += 1
            ref = monai_rician_replay(x[n].float(), seed, n, **kw)
            rel = 2e-6 if expect == torch.float32 else EPS[dtype]
            torch.testing.assert_close(out[n].float(), ref, rtol=rel, atol=rel * ref.abs().max().item())
            assert not torch.equal(out[n].float(), x[n].float())
        assert 0 < applied < 5


@pytest.mark.parametrize("dtype", HALF)
def test_bias_field_half_input_matches_monai_on_float32_copy(dtype):
    """RandBiasField with the read-back coefficients: float32 result (default dtype) at the float32
    test's 2e-6; the half result (dtype=None) within one eps of the half type."""
    x = rand_volume((3, 2, 9, 10, 11), lo=1, hi=200, seed=31).to(dtype)
    for out_dtype in (torch.float32, None):
        t = vt.RandBiasField(degree=3, coeff_range=(-0.2, 0.3), prob=0.6, dtype=out_dtype, seed=32)
        out = t(x)
        assert out.dtype == (torch.float32 if out_dtype is not None else dtype)
        assert 0 < int(t.last_applied.sum()) < 3
        for n in range(3):
            if not t.last_applied[n]:
                assert torch.equal(out[n], x[n].to(out.dtype))
                continue
            m = mt.RandBiasField(degree=3, coeff_range=(-0.2, 0.3), prob=1.0)
            m._do_transform = True
            m._coeff = t.last_coefficients[n].tolist()
            ref = torch.as_tensor(m(x[n].float(), randomize=False))
            rel = 2e-6 if out.dtype == torch.float32 else EPS[dtype]
            torch.testing.assert_close(out[n].float(), ref, rtol=rel, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32] + HALF)
def test_torchio_random_bias_field_half_input_and_gate(dtype):
    """TorchIO RandomBiasField (float32 result) with p = 0.5 on half inputs vs TorchIO's BiasField on
    the float32 copy with the read-back coefficients: the float32 test's 3e-6."""
    from torchio.transforms.augmentation.intensity.random_bias_field import BiasField

    x = rand_volume((6, 1, 9, 12, 7), lo=1, hi=100, seed=33).to(dtype)
    t = vt.RandomBiasField(coefficients=(-0.3, 0.6), order=2, p=0.5, seed=34)
    out = t(x)
    assert out.dtype == torch.float32 and 0 < int(t.last_applied.sum()) < 6
    tio = pytest.importorskip("torchio")
    for n in range(6):
        if not t.last_applied[n]:
            assert torch.equal(out[n], x[n].float()) and (t.last_coefficients[n] == 0).all()
            continue
        c = t.last_coefficients[n]
        assert ((c >= -0.3) & (c < 0.6)).all()
        ref = BiasField(coefficients=c.tolist(), order=2)(tio.ScalarImage(tensor=x[n].float())).data
        torch.testing.assert_close(out[n], ref, rtol=3e-6, atol=0)


def test_torchio_random_bias_field_matches_torchio_on_ch2(ch2):
    """The real volume (uint8 in, cropped to 64^3 with its own affine) vs TorchIO's BiasField with
    the read-back coefficients, float32 results: 3e-6 relative (exp of float32 polynomials)."""
    from torchio.transforms.augmentation.intensity.random_bias_field import BiasField

    tio = pytest.importorskip("torchio")
    vol, affine = ch2
    crop = vol[:, 60:124, 80:144, 50:114]
    t = vt.RandomBiasField(coefficients=0.5, order=3, seed=35)
    out = t(crop[None])
    img = tio.ScalarImage(tensor=crop.float(), affine=affine)
    ref = BiasField(coefficients=t.last_coefficients[0].tolist(), order=3)(img).data
    assert out.dtype == torch.float32 and not torch.equal(out[0], crop.float())
    torch.testing.assert_close(out[0], ref, rtol=3e-6, atol=0)


def _contrast_ref(x1, gamma, invert, retain):
    return torch.as_tensor(mt.AdjustContrast(gamma, invert_image=invert, retain_stats=retain)(x1.float().clone()))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("invert", [False, True])
def test_adjust_contrast_retain_stats_half_matches_monai_on_float32_copy(dtype, invert):
    """The result keeps the half dtype and is rounded twice (after the contrast pass and after the
    retain-stats pass, whose statistics come from the rounded first result): within 2 eps of the
    largest magnitude (each rounding half an ulp of values <= max |ref|, scaled by the retained
    std ratio, ~1 here)."""
    x = rand_volume((2, 2, 7, 8, 9), lo=-20, hi=90, seed=36).to(dtype)
    for gamma in (0.6, 2.5):
        out = vt.AdjustContrast(gamma, invert_image=invert, retain_stats=True)(x)
        assert out.dtype == dtype
        for n in range(2):
            ref = _contrast_ref(x[n], gamma, invert, True)
            tol = 2 * EPS[dtype] * ref.abs().max().item()
            torch.testing.assert_close(out[n].float(), ref, rtol=0, atol=tol)
            assert not torch.equal(out[n], x[n])


@pytest.mark.parametrize("dtype", HALF)
def test_rand_adjust_contrast_half_read_back_gamma_matches_monai(dtype):
    """RandAdjustContrast (gate and gamma read back from Philox) on half inputs, with and without
    retain_stats: one rounding to the half type without (eps of the largest magnitude), two with
    (2 eps, as above)."""
    seed, prob = 888, 0.6
    x = rand_volume((6, 1, 8, 7, 9), lo=-50, hi=300, seed=37).to(dtype)
    for retain in (False, True):
        out = fixed_seed(vt.RandAdjustContrast(prob=prob, retain_stats=retain, invert_image=retain), seed)(x)
        assert out.dtype == dtype
        applied = 0
        for n in range(6):
            w = philox_words(seed, n, SAMPLE)
            if not u01(w[0]) < prob:
                assert torch.equal(out[n], x[n])
                continue
            applied += 1
            ref = _contrast_ref(x[n], draw_range(w[1], 0.5, 4.5), retain, retain)
            tol = (2 if retain else 1) * EPS[dtype] * ref.abs().max().item()
            torch.testing.assert_close(out[n].float(), ref, rtol=0, atol=tol)
        assert 0 < applied < 6


@pytest.mark.parametrize("dtype", HALF)
def test_torchio_gamma_half_input_matches_power_on_float32_copy(dtype):
    """Gamma and RandomGamma give float32 (as TorchIO, which casts to float): against TorchIO's power()
    on the float32 copy at the float32 test's 2e-6 relative."""
    from torchio.transforms.augmentation.intensity.random_gamma import power

    x = rand_volume((2, 3, 5, 6, 7), lo=-20, hi=40, seed=38).to(dtype)
    xf = x.float()
    out = vt.Gamma(1.7)(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.stack([power(xf[n], 1.7) for n in range(2)]), rtol=2e-6, atol=1e-6)
    seed = 4322
    out = fixed_seed(vt.RandomGamma(log_gamma=(-0.3, 0.3)), seed)(x)
    for n in range(2):
        for c in range(3):
            gamma = float(np.exp(draw_range(philox_words(seed, n, CHANNEL, c)[0], -0.3, 0.3)))
            torch.testing.assert_close(out[n, c], power(xf[n, c], gamma), rtol=2e-6, atol=1e-6)


def test_torchio_gamma_matches_torchio_on_ch2(ch2):
    """TorchIO's Gamma transform itself (a ScalarImage of the uint8 volume, cast to float by TorchIO)
    against voxaug's Gamma on the uint8 volume: float32 pow, 2e-6 relative."""
    tio = pytest.importorskip("torchio")
    vol, affine = ch2
    crop = vol[:, 50:114, 70:134, 40:104]
    for gamma in (0.6, 1.9):
        ref = tio.Gamma(gamma)(tio.ScalarImage(tensor=crop, affine=affine)).data
        out = vt.Gamma(gamma)(crop)
        assert out.dtype == torch.float32 and ref.dtype == torch.float32
        torch.testing.assert_close(out, ref, rtol=2e-6, atol=1e-6)
        assert not torch.equal(out, crop.float())


def test_random_gamma_gate_per_sample_matches_torchio():
    """RandomGamma with p = 0.4 on a batch: each sample is either its float32 copy (gate closed, read
    back from the Philox sample stream) or TorchIO's Gamma with the channel's read-back gamma."""
    tio = pytest.importorskip("torchio")
    seed, p = 5151, 0.4
    x = rand_volume((8, 2, 5, 6, 7), lo=0, hi=30, seed=39)
    out = fixed_seed(vt.RandomGamma(log_gamma=0.4, p=p), seed)(x)
    applied = 0
    for n in range(8):
        if not u01(philox_words(seed, n, SAMPLE)[0]) < p:
            assert torch.equal(out[n], x[n])
            continue
        applied += 1
        gammas = [float(np.exp(draw_range(philox_words(seed, n, CHANNEL, c)[0], -0.4, 0.4))) for c in range(2)]
        ref = torch.cat([tio.Gamma(g)(tio.ScalarImage(tensor=x[n, c:c + 1])).data for c, g in enumerate(gammas)])
        torch.testing.assert_close(out[n], ref, rtol=2e-6, atol=1e-6)
        assert not torch.equal(out[n], x[n])
    assert 0 < applied < 8


# ---------------- RandRicianNoise with per-channel mean / std sequences ----------------
RICIAN_SEQ_CASES = [
    dict(mean=[0.0, 0.5, -0.3], std=[0.5, 1.0, 2.0], sample_std=False),
    dict(mean=[0.0, 0.5, -0.3], std=[0.5, 1.0, 2.0], sample_std=True),
    dict(mean=0.25, std=np.array([0.1, 0.3, 0.2]), relative=True, sample_std=False),
    dict(mean=torch.tensor([1.0, 0.0, -1.0]), std=[0.1, 0.3, 0.2], relative=True, sample_std=True),
]


@pytest.mark.parametrize("kw", RICIAN_SEQ_CASES)
def test_rician_per_channel_sequences_match_monai_voxel_by_voxel_with_read_back_noise(kw):
    """MONAI's own per-channel loop (ensure_tuple_rep of mean / std, channel c with mean[c] and
    std[c], times the channel's std when relative) run on voxaug's noise read back from Philox:
    agrees voxel by voxel (2e-6 relative, float32 log / sincos against float64). Gated samples
    (prob 0.7) equal their input."""
    seed, prob = 777, 0.7
    x = rand_volume((6, 3, 5, 6, 7), lo=0, hi=40, seed=50)
    out = fixed_seed(vt.RandRicianNoise(prob=prob, channel_wise=True, **kw), seed)(x)
    assert out.dtype == torch.float32 and not torch.isnan(out).any()
    applied = 0
    for n in range(6):
        if not u01(philox_words(seed, n, SAMPLE)[0]) < prob:
            assert torch.equal(out[n], x[n])
            continue
        applied += 1
        ref = monai_rician_replay(x[n], seed, n, True, **kw)
        torch.testing.assert_close(out[n], ref, rtol=2e-6, atol=2e-6 * ref.abs().max().item())
        assert not torch.equal(out[n], x[n])
    assert 0 < applied < 6


@pytest.mark.parametrize("relative", [False, True])
def test_rician_per_channel_distribution_matches_monai_per_channel(relative):
    """Statistical comparison with MONAI's own RandRicianNoise (its numpy draws): on a 3-channel input,
    each output channel's values follow the same distribution as MONAI's channel (two-sample KS,
    p > 1e-3; seeded, so deterministic), and the channels differ as the sequences say: per voxel
    R^2 - (x + m)^2 - m^2 has mean 2 s^2, s = std[c] (times the channel's std when relative),
    checked within 5 standard errors of the channel's mean (float64)."""
    mean, std = [0.0, 1.5, -2.0], [0.5, 2.0, 1.0]
    x = rand_volume((1, 3, 40, 40, 40), lo=0, hi=5, seed=51)
    x[:, 1] *= 3
    kw = dict(mean=mean, std=std, channel_wise=True, relative=relative, sample_std=False)
    ours = vt.RandRicianNoise(prob=1.0, seed=9, **kw)(x)[0].double()
    m = mt.RandRicianNoise(prob=1.0, **kw)
    m.set_random_state(9)
    theirs = torch.as_tensor(m(x[0].clone())).double()
    for c in range(3):
        a, b = ours[c].flatten().numpy(), theirs[c].flatten().numpy()
        assert stats.ks_2samp(a[:20000], b[:20000]).pvalue > 1e-3, c
        s = kw["std"][c] * (x[0, c].double().std().item() if relative else 1.0)
        # E[R^2] = (x + m)^2 + m^2 + 2 s^2 (n1 = m + s z1, n2 = m + s z2)
        q = (ours[c] ** 2 - (x[0, c].double() + mean[c]) ** 2 - mean[c] ** 2).flatten()
        se = q.std().item() / math.sqrt(q.numel())
        assert abs(q.mean().item() - 2 * s * s) < 5 * se, (c, q.mean().item(), 2 * s * s, se)
        assert 5 * se < 0.2 * 2 * s * s  # the check has power


def test_rician_per_channel_dictionary_form():
    """RandRicianNoised with sequences: per key and channel the same distribution as MONAI's
    RandRicianNoised (KS, p > 1e-3); one draw per call shared by the keys (equal inputs give equal
    outputs); a key with the wrong channel count raises MONAI's error."""
    kw = dict(mean=[0.2, -0.4], std=[0.3, 1.2], channel_wise=True, sample_std=False)
    a = rand_volume((2, 32, 32, 32), lo=0, hi=3, seed=52)
    b = rand_volume((2, 32, 32, 32), lo=2, hi=9, seed=53)
    ours = vt.RandRicianNoised(["a", "b"], prob=1.0, seed=4, **kw)({"a": a, "b": b})
    m = mt.RandRicianNoised(["a", "b"], prob=1.0, **kw)
    m.set_random_state(4)
    theirs = m({"a": a.clone(), "b": b.clone()})
    for key in ("a", "b"):
        for c in range(2):
            u, v = ours[key][c].flatten().numpy(), torch.as_tensor(theirs[key][c]).flatten().numpy()
            assert stats.ks_2samp(u[:20000], v[:20000]).pvalue > 1e-3, (key, c)
    same = vt.RandRicianNoised(["a", "b"], prob=1.0, seed=5, **kw)({"a": a, "b": a.clone()})
    assert torch.equal(same["a"], same["b"]) and not torch.equal(same["a"], a)
    bad = {"a": a, "b": rand_volume((3, 4, 4, 4), seed=54)}
    with pytest.raises(ValueError) as ref:
        mt.RandRicianNoised(["a", "b"], prob=1.0, **kw)(bad)
    with pytest.raises(ValueError, match=re_escape(str(ref.value))):
        vt.RandRicianNoised(["a", "b"], prob=1.0, seed=1, **kw)(bad)


def re_escape(s):
    import re

    return re.escape(s)


@pytest.mark.parametrize("kw", [
    dict(mean=[0.0, 1.0], std=1.0, channel_wise=True),  # wrong length (3 channels)
    dict(mean=0.0, std=[1.0, 2.0, 3.0, 4.0], channel_wise=True),
    dict(mean=[0.5], std=1.0, channel_wise=True),
    dict(mean=(0.0, 1.0, 2.0), std=1.0, channel_wise=False),  # sequences need channel_wise
    dict(mean=0.0, std=[1.0, 2.0, 3.0], channel_wise=False),
    dict(mean=np.array([0.0, 1.0, 2.0]), std=[1.0, 2.0, 3.0], channel_wise=False),
])
def test_rician_sequence_errors_match_monai(kw):
    """The exception MONAI 1.6.1 raises on the call (ValueError from ensure_tuple_rep, RuntimeError
    without channel_wise): voxaug raises the same type with MONAI's message in it, array and
    dictionary forms, batched and unbatched."""
    x = rand_volume((3, 4, 4, 4), seed=55)
    m = mt.RandRicianNoise(prob=1.0, **kw)
    with pytest.raises((ValueError, RuntimeError)) as ref:
        m(x.clone())
    t = vt.RandRicianNoise(prob=1.0, seed=1, **kw)
    for img in (x, x[None].expand(2, -1, -1, -1, -1)):
        with pytest.raises(type(ref.value), match=re_escape(str(ref.value))):
            t(img)
    with pytest.raises(type(ref.value), match=re_escape(str(ref.value))):
        vt.RandRicianNoised("img", prob=1.0, seed=1, **kw)({"img": x})


def test_rician_sequence_values_validated():
    for kw, msg in ((dict(std=[1.0, -2.0]), r"std\[1\] must be >= 0"), (dict(std=[1.0, math.inf]), r"std\[1\] must be"),
                    (dict(mean=[0.0, float("nan")]), r"mean\[1\] must be finite"),
                    (dict(std=[[1.0, 2.0]]), "std must be a number or a sequence of numbers"),
                    (dict(mean="ab"), "mean must be a number or a sequence of numbers"),
                    (dict(std=-1.0), "std must be >= 0")):
        with pytest.raises(ValueError, match=msg):
            vt.RandRicianNoise(channel_wise=True, **kw)
    x = rand_volume((2, 2, 4, 4, 4))
    with pytest.raises(ValueError, match=r"Rician \(mean, std\) table must be float64 of shape \(2, 2, 2\)"):
        ops.pointwise_chain(x, [ops.Step(ops.RICIAN_NOISE, ops.CHANNEL_WISE, (0.0, 0.0),
                                         values=torch.zeros(2, 3, 2, dtype=torch.float64))])


def test_rician_equal_sequences_equal_scalars_and_compose_fuses(monkeypatch):
    """Sequences of one repeated value give the bytes of the scalar form (same draws, the same
    float32 arithmetic); a per-channel Rician step fuses with its neighbours in Compose like the
    scalar one (one pass), equal to applying them one by one; relative starts a new pass."""
    x = rand_volume((3, 2, 6, 7, 8), lo=0, hi=50, seed=56)
    for sample_std in (False, True):
        a = vt.RandRicianNoise(prob=0.6, mean=0.3, std=2.0, channel_wise=True, sample_std=sample_std, seed=8)(x)
        b = vt.RandRicianNoise(prob=0.6, mean=[0.3, 0.3], std=(2.0, 2.0), channel_wise=True, sample_std=sample_std,
                               seed=8)(x)
        assert torch.equal(a, b)
    calls = []
    real = ops.pointwise_chain
    monkeypatch.setattr(ops, "pointwise_chain", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    make = lambda: [vt.RandShiftIntensity(1.0, prob=1.0, seed=1),  # noqa: E731
                    vt.RandRicianNoise(prob=0.7, mean=[0.0, 0.5], std=[1.0, 3.0], channel_wise=True, seed=2),
                    vt.RandScaleIntensity(0.1, prob=1.0, seed=3),
                    vt.RandRicianNoise(prob=1.0, std=[0.1, 0.2], channel_wise=True, relative=True, seed=4)]
    fused = vt.Compose(make())(x)
    assert calls == [3, 1]
    y = x
    for t in make():
        y = t(y)
    assert torch.equal(fused, y)


@pytest.mark.parametrize("device", DEVICES)
def test_rician_table_opcheck_and_batch_split(device):
    """The (N, C, 2) table form passes opcheck; a batch split with matching first_sample gives the
    same bytes (draws keyed by the global sample, the table row by the local one)."""
    x = rand_volume((4, 2, 3, 4, 5), lo=0, hi=9, device=device, seed=57)
    table = torch.tensor([[0.1, 1.0], [-0.2, 2.5]], dtype=torch.float64, device=device).expand(4, 2, 2)
    steps = [ops.Step(ops.RICIAN_NOISE, ops.CHANNEL_WISE | ops.SAMPLE_STD, (0.0, 0.0), 0.8, 11, values=table)]
    torch.library.opcheck(torch.ops.voxaug.pointwise_chain, (x, *ops._lists(steps)))
    whole = ops.pointwise_chain(x, steps)
    half = [ops.Step(s.op, s.flags, s.params, s.prob, s.seed, values=table[:2]) for s in steps]
    parts = torch.cat([ops.pointwise_chain(x[:2], half), ops.pointwise_chain(x[2:], half, first_sample=2)])
    assert torch.equal(whole, parts)


@need_cuda
def test_rician_per_channel_cuda_matches_cpu():
    """The CUDA twin: bit-identical with fixed sequences; with relative the channel stds come from
    torch.std on each device (different summation orders), so 1e-5 relative."""
    x = rand_volume((3, 3, 9, 10, 11), lo=0, hi=30, seed=58)
    for kw in RICIAN_SEQ_CASES:
        t = vt.RandRicianNoise(prob=0.8, channel_wise=True, **kw)
        cpu = fixed_seed(t, 31)(x)
        gpu = fixed_seed(t, 31)(x.cuda()).cpu()
        if kw.get("relative"):
            torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-5 * cpu.abs().max().item())
        else:
            assert torch.equal(gpu, cpu)


# ---------------- NormalizeIntensity with array subtrahend / divisor (channel_wise=False) ----------------
def normalize_ref_f64(x1, sub, div, nonzero):
    """MONAI NormalizeIntensity._normalize for one (C, D, H, W) sample, in float64 numpy: independent
    of torch and of voxaug (mean / population std of the (nonzero) values, a zero divisor reads
    as 1, only nonzero voxels change)."""
    x1 = np.asarray(x1, dtype=np.float64)
    mask = x1 != 0 if nonzero else np.ones(x1.shape, dtype=bool)
    if not mask.any():
        return x1.copy()
    vals = x1[mask]
    s = vals.mean() if sub is None else np.asarray(sub, dtype=np.float64)
    d = vals.std() if div is None else np.asarray(div, dtype=np.float64)
    d = np.where(d == 0, 1.0, d)
    full = (x1 - s) / d
    if not nonzero:
        return full
    out = x1.copy()
    out[mask] = full[mask]
    return out


def monai_normalize(x, **kw):
    """MONAI's NormalizeIntensity applied to each sample of the batch (its arrays copied: MONAI
    writes 1 into the zeros of a divisor it was given as a float32 tensor)."""
    kw = {k: (v.copy() if isinstance(v, np.ndarray) else v.clone() if isinstance(v, torch.Tensor) else v)
          for k, v in kw.items()}
    return torch.stack([torch.as_tensor(mt.NormalizeIntensity(**kw)(x[i].clone())).as_tensor()
                        for i in range(x.shape[0])])


def _arrays(shape, seed, zeros=True):
    rng = np.random.default_rng(seed)
    sub = rng.uniform(-20, 60, shape)
    div = rng.uniform(0.5, 30, shape)
    if zeros:
        div[rng.uniform(size=shape) < 0.2] = 0.0  # zeros divide by 1
    return sub, div


ARRAY_SHAPES = [(2, 5, 6, 7), (5, 6, 7), (7,), (6, 1), (), (2, 1, 1, 1), (1, 5, 1, 7)]


@pytest.mark.parametrize("shape", ARRAY_SHAPES)
@pytest.mark.parametrize("which", ["sub", "div", "both", "sub+scalar_div", "div+scalar_sub"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_normalize_array_operands_match_monai_and_float64(shape, which, dtype):
    """Array subtrahend / divisor broadcast against each sample of an (N, C, D, H, W) batch: per
    sample MONAI's result (float32 arithmetic, 1e-5 relative of the output's range: MONAI's float32
    mean / std vs voxaug's float64 statistics) and a float64 numpy reference (float64 images are
    computed in float64: 1e-12; float32 images: float32 rounding, 1e-5). nonzero=False here (MONAI
    refuses these shapes with nonzero unless they are the sample's; see the next test)."""
    x = rand_volume((3, 2, 5, 6, 7), lo=-50, hi=150, dtype=dtype, seed=60, zeros=0.2)
    sub, div = _arrays(shape, seed=len(shape) + 1)
    kw = {"sub": dict(subtrahend=sub), "div": dict(divisor=div), "both": dict(subtrahend=sub, divisor=div),
          "sub+scalar_div": dict(subtrahend=sub, divisor=7.5),
          "div+scalar_sub": dict(subtrahend=-3.0, divisor=div)}[which]
    for out_dtype in (np.float32, None):
        out = vs.NormalizeIntensity(dtype=out_dtype, **kw)(x)
        assert out.dtype == (torch.float32 if out_dtype is not None else dtype) and out.shape == x.shape
        ref = monai_normalize(x, dtype=out_dtype, **kw)
        assert ref.dtype == out.dtype
        scale = ref.abs().max().item()
        torch.testing.assert_close(out.double(), ref.double(), rtol=1e-5, atol=1e-5 * scale)
        f64 = torch.stack([torch.from_numpy(normalize_ref_f64(x[i].double().numpy(), kw.get("subtrahend"),
                                                              kw.get("divisor"), False)) for i in range(3)])
        tol = 1e-12 if out.dtype == torch.float64 else 1e-6
        torch.testing.assert_close(out.double(), f64, rtol=tol, atol=tol * scale)
        assert not torch.isnan(out).any() and out.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("which", ["sub", "div", "both", "div+scalar_sub"])
def test_normalize_array_operands_nonzero_match_monai(dtype, which):
    """nonzero=True: arrays of the sample's exact shape, indexed by the sample's nonzero mask
    (MONAI's _sub[slices]): only nonzero voxels change, the statistics of the others come from the
    nonzero values. A sample of zeros comes back unchanged, as MONAI returns it."""
    x = rand_volume((3, 2, 5, 6, 7), lo=-50, hi=150, dtype=dtype, seed=61, zeros=0.3)
    x[2] = 0
    sub, div = _arrays((2, 5, 6, 7), seed=62)
    kw = {"sub": dict(subtrahend=sub), "div": dict(divisor=div), "both": dict(subtrahend=sub, divisor=div),
          "div+scalar_sub": dict(subtrahend=4.0, divisor=div)}[which]
    out = vs.NormalizeIntensity(nonzero=True, dtype=None, **kw)(x)
    ref = monai_normalize(x, nonzero=True, dtype=None, **kw)
    assert out.dtype == ref.dtype == dtype
    scale = ref.abs().max().item()
    torch.testing.assert_close(out.double(), ref.double(), rtol=1e-5, atol=1e-5 * scale)
    f64 = torch.stack([torch.from_numpy(normalize_ref_f64(x[i].double().numpy(), kw.get("subtrahend"),
                                                          kw.get("divisor"), True)) for i in range(3)])
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(out.double(), f64, rtol=tol, atol=tol * scale)
    assert torch.equal(out[2], x[2]) and torch.equal(out[x == 0], x[x == 0])
    assert not torch.equal(out[0], x[0])


def test_normalize_array_operands_on_ch2(ch2):
    """The ch2 template (uint8, 181 x 217 x 181) as a batch of two (itself and its mirror image), a
    voxel-wise mean image and std image (smooth fields with a zero patch in the std), nonzero on
    and off: MONAI per sample (1e-5 of the range) and float64 numpy (1e-6, float32 results)."""
    vol, _ = ch2
    x = torch.stack([vol, vol.flip(-1)])  # (2, 1, 181, 217, 181) uint8
    d, h, w = vol.shape[1:]
    zz, yy, xx = np.meshgrid(np.linspace(-1, 1, d), np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    sub = (40 + 20 * zz + 10 * yy * xx)[None]
    div = (25 + 5 * np.cos(3 * xx) + 3 * yy)[None]
    div[:, :20, :20, :20] = 0.0
    for nonzero in (False, True):
        for kw in (dict(subtrahend=sub), dict(divisor=div), dict(subtrahend=sub, divisor=div)):
            out = vs.NormalizeIntensity(nonzero=nonzero, **kw)(x)
            assert out.dtype == torch.float32 and out.shape == x.shape
            ref = monai_normalize(x.float(), nonzero=nonzero, **kw)
            scale = ref.abs().max().item()
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * scale)
            for i in range(2):
                f64 = torch.from_numpy(normalize_ref_f64(x[i].double().numpy(), kw.get("subtrahend"),
                                                         kw.get("divisor"), nonzero))
                torch.testing.assert_close(out[i].double(), f64, rtol=1e-6, atol=1e-6 * scale)


def test_normalize_array_operand_forms_and_no_mutation():
    """Tensors (float64, int, bool), numpy int arrays, unbatched input, the dictionary form, and a
    divisor that widens the image's channel axis (MONAI broadcasts (1, ...) against (2, ...)): all
    as MONAI per sample. The caller's arrays are never written (MONAI writes 1 into the zeros
    of a float32 tensor divisor)."""
    x = rand_volume((2, 1, 4, 5, 6), lo=-10, hi=30, seed=63, zeros=0.2)
    sub, div = _arrays((1, 4, 5, 6), seed=64)
    div_t = torch.from_numpy(div).float()
    keep = div_t.clone()
    for kw in (dict(subtrahend=torch.from_numpy(sub)), dict(divisor=div_t), dict(subtrahend=sub.astype(np.int64)),
               dict(subtrahend=torch.from_numpy(sub > 10)), dict(subtrahend=sub, divisor=div_t, nonzero=True)):
        out = vs.NormalizeIntensity(**kw)(x)
        ref = monai_normalize(x, **kw)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())
        torch.testing.assert_close(vs.NormalizeIntensity(**kw)(x[0]), ref[0], rtol=1e-5,
                                   atol=1e-5 * ref.abs().max().item())
        res = vs.NormalizeIntensityd(["a", "b"], **kw)({"a": x[0], "b": x[1]})
        torch.testing.assert_close(torch.stack([res["a"], res["b"]]), out, rtol=0, atol=0)
    assert torch.equal(div_t, keep)
    wide = _arrays((2, 4, 5, 6), seed=65)[0]
    out = vs.NormalizeIntensity(subtrahend=wide)(x)
    ref = monai_normalize(x, subtrahend=wide)
    assert out.shape == (2, 2, 4, 5, 6) == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5 * ref.abs().max().item())


@pytest.mark.parametrize("shape,nonzero", [((3, 5, 6, 7), False), ((2, 5, 6, 8), False), ((5, 6, 7), True),
                                           ((7,), True), ((), True), ((2, 1, 1, 1), True), ((1, 5, 6, 7), True)])
def test_normalize_array_shapes_monai_refuses_raise_clear_errors(shape, nonzero):
    """Shapes MONAI refuses (a broadcast error, or an IndexError from its nonzero mask): voxaug raises
    ValueError naming the argument and the sample's shape, for the subtrahend and the divisor."""
    x = rand_volume((2, 2, 5, 6, 7), seed=66, zeros=0.2)
    arr = np.ones(shape)
    for name in ("subtrahend", "divisor"):
        with pytest.raises((RuntimeError, IndexError)):
            mt.NormalizeIntensity(nonzero=nonzero, **{name: arr})(x[0].clone())
        with pytest.raises(ValueError, match=name + r".*\(C, D, H, W\) = \(2, 5, 6, 7\)"):
            vs.NormalizeIntensity(nonzero=nonzero, **{name: arr})(x)


def test_normalize_array_refusals_by_design():
    """An array with more dimensions than a sample would make MONAI's result gain a leading axis (it
    broadcasts (1, C, D, H, W) against (C, D, H, W)); voxaug refuses it (a batch already has that
    axis). A list without channel_wise: MONAI fails on img - list (TypeError), voxaug refuses it
    too, naming the argument. A complex array is refused."""
    x = rand_volume((2, 2, 5, 6, 7), seed=67)
    assert torch.as_tensor(mt.NormalizeIntensity(subtrahend=np.ones((1, 2, 5, 6, 7)))(x[0].clone())).dim() == 5
    with pytest.raises(ValueError, match="subtrahend must broadcast against one sample's"):
        vs.NormalizeIntensity(subtrahend=np.ones((1, 2, 5, 6, 7)))(x)
    with pytest.raises(TypeError):
        mt.NormalizeIntensity(subtrahend=[1.0, 2.0])(x[0].clone())
    with pytest.raises(NotImplementedError, match="subtrahend as a list of 2 values with channel_wise=False"):
        vs.NormalizeIntensity(subtrahend=[1.0, 2.0])(x)
    with pytest.raises(ValueError, match="divisor must hold real numbers"):
        vs.NormalizeIntensity(divisor=np.ones((2, 5, 6, 7), dtype=np.complex64))(x)


@need_cuda
def test_normalize_array_operands_cuda_matches_cpu():
    """On CUDA (arrays from the host and already on the device; per-channel CUDA tensors with
    channel_wise): the CPU result to 1e-6 (statistics from ops.moments are identical; the
    elementwise ops are the same IEEE operations)."""
    x = rand_volume((3, 2, 5, 6, 7), lo=-50, hi=150, seed=68, zeros=0.2)
    sub, div = _arrays((2, 5, 6, 7), seed=69)
    for kw in (dict(subtrahend=sub), dict(divisor=torch.from_numpy(div).cuda(), nonzero=True),
               dict(subtrahend=torch.tensor([1.0, 2.0], device="cuda"), channel_wise=True),
               dict(divisor=torch.tensor([3.0, 0.0], device="cuda"), channel_wise=True, nonzero=True)):
        cpu_kw = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        ref = vs.NormalizeIntensity(**cpu_kw)(x)
        out = vs.NormalizeIntensity(**kw)(x.cuda())
        assert out.device.type == "cuda"
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item())


# ---------------- TorchIO RandomNoise ----------------
def test_random_noise_matches_float64_replay_of_its_draws():
    """RandomNoise with p = 0.7 on a batch: a gated-out sample is its float32 copy; an applied one is
    x + (mean + std z) with mean = U(mean range), std = U(std range) from words 1 and 2 of the
    sample's Philox block (float32 lo + (hi - lo) u, as the kernel and TorchIO's uniform_ write it)
    and z the float64 Box-Muller normals of the element stream: 2e-6 of the output's size."""
    seed, (m_lo, m_hi), (s_lo, s_hi) = 4242, (-1.0, 2.0), (0.5, 1.5)
    x = rand_volume((6, 2, 5, 6, 7), lo=-20, hi=30, seed=41)
    out = fixed_seed(vt.RandomNoise(mean=(m_lo, m_hi), std=(s_lo, s_hi), p=0.7), seed)(x)
    assert out.dtype == torch.float32
    applied = 0
    for n in range(6):
        w = philox_words(seed, n, SAMPLE)
        if not u01(w[0]) < 0.7:
            assert torch.equal(out[n], x[n])
            continue
        applied += 1
        f = np.float32
        mean = f(m_lo) + (f(m_hi) - f(m_lo)) * u01(w[1])
        std = f(s_lo) + (f(s_hi) - f(s_lo)) * u01(w[2])
        assert m_lo <= mean <= m_hi and s_lo <= std <= s_hi
        z = torch.from_numpy(philox_normals(seed, n, 0, x[n].numel()).reshape(x[n].shape))
        ref = x[n].double() + (float(mean) + float(std) * z)
        torch.testing.assert_close(out[n].double(), ref, rtol=0, atol=2e-6 * ref.abs().max().item())
    assert 0 < applied < 6


def test_random_noise_parameter_distribution_matches_torchio():
    """Per-sample noise mean and std over 300 samples of an 8^3 zero volume: the same distributions
    as TorchIO's RandomNoise applied 300 times (two-sample Kolmogorov-Smirnov)."""
    tio = pytest.importorskip("torchio")
    n, kw = 300, dict(mean=(-0.5, 1.0), std=(0.2, 0.6))
    ours = vt.RandomNoise(**kw, seed=17)(torch.zeros(n, 1, 8, 8, 8)).flatten(1).double()
    torch.manual_seed(17)
    t = tio.RandomNoise(**kw)
    theirs = torch.stack([t(tio.ScalarImage(tensor=torch.zeros(1, 8, 8, 8))).data.flatten().double()
                          for _ in range(n)])
    for stat in (lambda v: v.mean(1), lambda v: v.std(1)):
        assert stats.ks_2samp(stat(ours).numpy(), stat(theirs).numpy()).pvalue > 1e-3


@pytest.mark.parametrize("kw", [dict(mean=-1.0), dict(std=-0.1), dict(std=(0.5, 0.2)), dict(std=(-0.1, 0.2)),
                                dict(mean=(2.0, 1.0)), dict(mean=(0.0, 1.0, 2.0)), dict(std="wide")])
def test_random_noise_rejects_what_torchio_rejects(kw):
    tio = pytest.importorskip("torchio")
    with pytest.raises(ValueError):
        tio.RandomNoise(**kw)
    with pytest.raises(ValueError):
        vt.RandomNoise(**kw)


def test_random_noise_defaults_dtypes_and_bad_values():
    """TorchIO's defaults (mean 0, std U(0, 0.25)); integer and half images give float32 (TorchIO's
    sum with its float32 noise); non-finite ranges and p outside [0, 1] are refused by name."""
    t = vt.RandomNoise(seed=3)
    assert t.mean_range == (0.0, 0.0) and t.std_range == (0.0, 0.25)
    for dtype in (torch.uint8, torch.float16):
        x = rand_volume((2, 1, 4, 5, 6), lo=0, hi=100, seed=5).to(dtype)
        out = vt.RandomNoise(std=(1.0, 1.0), seed=3)(x)
        assert out.dtype == torch.float32 and not torch.equal(out, x.float())
        assert (out - x.float()).abs().max().item() < 10.0
    with pytest.raises(ValueError, match="mean"):
        vt.RandomNoise(mean=(0.0, float("inf")))
    with pytest.raises(ValueError, match="std"):
        vt.RandomNoise(std=float("nan"))
    with pytest.raises(ValueError, match="prob|p "):
        vt.RandomNoise(p=1.5)
