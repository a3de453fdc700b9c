"""MONAI's call-time arguments of the pointwise transforms: ShiftIntensity(img, offset),
RandShiftIntensity(img, factor, randomize), RandScaleIntensity(img, randomize),
RandGaussianNoise(img, mean, randomize), and RandShiftIntensityd's factor_key / meta_keys /
meta_key_postfix. Against MONAI where the draw is degenerate (a zero-width range, std 0: the
same values without sharing a generator), and replays (randomize=False) against the first call."""
import pytest
import torch
from monai import transforms as mt

from voxaug import transforms as vt


def _x(seed=0, shape=(2, 5, 6, 7)):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed)) * 10


def _t(y):
    return y.as_tensor() if hasattr(y, "as_tensor") else torch.as_tensor(y)


def test_shift_intensity_offset_at_call():
    x = _x()
    assert torch.equal(vt.ShiftIntensity(1.0)(x, offset=2.5), _t(mt.ShiftIntensity(1.0)(x, offset=2.5)))
    assert torch.equal(vt.ShiftIntensity(1.0)(x), _t(mt.ShiftIntensity(1.0)(x)))


def test_rand_shift_intensity_factor_and_replay():
    x = _x(1)
    for factor in (None, 3.0, -0.5):
        ref = _t(mt.RandShiftIntensity((1.5, 1.5), prob=1.0)(x, factor=factor))
        assert torch.equal(vt.RandShiftIntensity((1.5, 1.5), prob=1.0, seed=0)(x, factor=factor), ref), factor
    t = vt.RandShiftIntensity((-2.0, 2.0), prob=1.0, channel_wise=True, seed=4)
    a = t(x)
    assert torch.equal(t(x, randomize=False), a)  # the same draw
    torch.testing.assert_close(t(x, factor=2.0, randomize=False) - x, 2 * (a - x), rtol=0, atol=1e-5)
    assert not torch.equal(t(x), a)  # a new draw
    with pytest.raises(ValueError, match="randomize=False"):
        vt.RandShiftIntensity(1.0, prob=1.0)(x, randomize=False)


def test_rand_scale_intensity_and_noise_replay():
    x = _x(2)
    t = vt.RandScaleIntensity(0.5, prob=1.0, seed=1)
    a = t(x)
    assert torch.equal(t(x, randomize=False), a) and not torch.equal(t(x), a)
    n = vt.RandGaussianNoise(prob=1.0, std=1.0, seed=2)
    b = n(x)
    assert torch.equal(n(x, randomize=False), b) and not torch.equal(n(x), b)
    # a noise mean given at the call (std 0: the noise is the mean)
    ref = _t(mt.RandGaussianNoise(prob=1.0, mean=0.0, std=0.0)(x, mean=2.0))
    assert torch.equal(vt.RandGaussianNoise(prob=1.0, mean=0.0, std=0.0, seed=0)(x, mean=2.0), ref)
    torch.testing.assert_close(ref, x + 2.0)


def test_rand_shift_intensityd_factor_key():
    x, y = _x(3), _x(4)
    data = {"img": x, "seg": y, "img_meta_dict": {"scale": 4.0}, "seg_custom": {"scale": -1.0}}
    kw = dict(offsets=(0.5, 0.5), factor_key="scale", prob=1.0)
    ref = mt.RandShiftIntensityd(["img", "seg"], meta_keys=[None, "seg_custom"], **kw)(data)
    got = vt.RandShiftIntensityd(["img", "seg"], meta_keys=[None, "seg_custom"], seed=0, **kw)(data)
    assert torch.equal(got["img"], _t(ref["img"])) and torch.equal(got["seg"], _t(ref["seg"]))
    torch.testing.assert_close(got["img"], x + 2.0)
    # without the metadata dictionary the plain offset; one draw shared by the keys
    t = vt.RandShiftIntensityd(["img", "seg"], offsets=(-1.0, 1.0), factor_key="scale", prob=1.0, seed=5)
    out = t({"img": x, "seg": x.clone(), "seg_meta_dict": {"scale": 3.0}})
    torch.testing.assert_close(out["seg"] - x, 3 * (out["img"] - x), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="meta_keys must have one entry per key"):
        vt.RandShiftIntensityd(["img", "seg"], 1.0, meta_keys=["a", "b", "c"])
