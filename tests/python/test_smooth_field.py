"""MONAI's smooth-field augmentations (voxaug.smooth_field) against MONAI's, given voxaug's coarse
field (MONAI's ``sfield.field`` overwritten after its own draw)."""
import pytest
import torch

from conftest import devices
from voxaug.smooth_field import (RandSmoothDeform, RandSmoothDeformd, RandSmoothFieldAdjustContrast,
                                 RandSmoothFieldAdjustContrastd, RandSmoothFieldAdjustIntensity, SmoothField)

mt = pytest.importorskip("monai.transforms")
SIZE, RAND = (20, 22, 18), (4, 5, 3)


def rand(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 100


def monai_with(monai_t, coarse):
    """MONAI's transform with its smooth field's random values replaced by `coarse`."""
    monai_t.randomize()
    monai_t.sfield.field[monai_t.sfield.rand_slices] = coarse.cpu().clone()
    return monai_t


@pytest.mark.parametrize("mode,align", [("area", None), ("trilinear", False), ("trilinear", True), ("nearest", None),
                                        ("nearest-exact", None)])
@pytest.mark.parametrize("pad", [0, 2])
def test_smooth_field_equals_monai(mode, align, pad):
    from monai.transforms.smooth_field.array import SmoothField as MonaiField

    f = SmoothField(RAND, pad=pad, pad_val=0.5, low=-2.0, high=3.0, channels=2, spatial_size=SIZE, mode=mode,
                    align_corners=align)
    coarse = f.draw(3, seed=5, device="cpu")
    assert float(coarse.min()) >= -2.0 and float(coarse.max()) < 3.0
    got = f.fields(coarse)
    for i in range(3):
        m = MonaiField(RAND, pad=pad, pad_val=0.5, low=-2.0, high=3.0, channels=2, spatial_size=SIZE, mode=mode,
                       align_corners=align)
        m.field[m.rand_slices] = coarse[i].clone()
        ref = m()
        assert got[i].shape == ref.shape
        # The same weights (torch's index rules); the sums of the separable products run in
        # another order than interpolate's.
        assert float((got[i] - ref).abs().max()) <= 1e-6 * 5.0


@pytest.mark.parametrize("cls,monai_cls,kw", [
    (RandSmoothFieldAdjustContrast, "RandSmoothFieldAdjustContrast", {}),
    (RandSmoothFieldAdjustContrast, "RandSmoothFieldAdjustContrast", dict(pad=2, mode="trilinear", gamma=(0.7, 2.0))),
    (RandSmoothFieldAdjustIntensity, "RandSmoothFieldAdjustIntensity", {}),
    (RandSmoothFieldAdjustIntensity, "RandSmoothFieldAdjustIntensity", dict(pad=1, gamma=3.0)),
])
def test_field_intensity_transforms_equal_monai(cls, monai_cls, kw):
    x = rand((4, 2) + SIZE, seed=1)
    t = cls(SIZE, RAND, prob=1.0, seed=3, **kw)
    out = t(x)
    for i in range(4):
        ref = monai_with(getattr(mt, monai_cls)(SIZE, RAND, prob=1.0, **kw), t.last_coarse[i])(x[i].clone(),
                                                                                              randomize=False)
        assert float((out[i] - ref).abs().max()) <= 2e-6 * 100
    assert not torch.equal(out, x)


@pytest.mark.parametrize("kw", [
    dict(def_range=0.3),
    dict(def_range=0.3, grid_mode="nearest", grid_padding_mode="zeros", grid_align_corners=True, pad=1),
    dict(def_range=0.1, grid_mode="bilinear", grid_padding_mode="zeros"),
    dict(def_range=(-0.2, 0.4), grid_mode="bilinear", grid_padding_mode="reflection", grid_align_corners=True),
    dict(def_range=0.3, grid_mode="bilinear", grid_padding_mode="border", field_mode="trilinear"),
])
@pytest.mark.parametrize("in_size", [SIZE, (24, 19, 18)])
def test_smooth_deform_equals_monai(kw, in_size):
    x = rand((3, 2) + in_size, seed=2)
    t = RandSmoothDeform(SIZE, RAND, prob=1.0, seed=4, **kw)
    out = t(x)
    assert out.shape == (3, 2) + SIZE
    for i in range(3):
        ref = monai_with(mt.RandSmoothDeform(SIZE, RAND, prob=1.0, **kw), t.last_coarse[i])(x[i].clone(),
                                                                                         randomize=False)
        if kw.get("grid_mode", "nearest") == "nearest":
            # float32 source coordinates in another order: a tie may round the other way.
            assert float((out[i] != ref).float().mean()) <= 1e-3
        else:
            assert float((out[i] - ref).abs().max()) <= 1e-5 * 100
    moved = float((out - x[..., :SIZE[0], :SIZE[1], :SIZE[2]]).abs().mean()) if in_size == SIZE else 1.0
    assert moved > 0.1


def test_gate_dicts_labels_and_real_volume(ch2):
    x = rand((6, 1) + SIZE, seed=7)
    t = RandSmoothFieldAdjustIntensity(SIZE, RAND, prob=0.5, seed=9)
    out = t(x)
    on = t.last_applied
    assert 0 < int(on.sum()) < 6 and torch.equal(out[~on], x[~on]) and not torch.equal(out[on], x[on])
    again = RandSmoothFieldAdjustIntensity(SIZE, RAND, prob=0.5, seed=9)(x)
    assert torch.equal(again, out)
    # Dictionary: one field for every key; per-key modes; integer labels gathered exactly.
    lab = (x > 50).to(torch.int16)
    dd = RandSmoothDeformd(["img", "lab"], SIZE, RAND, prob=1.0, def_range=0.2, grid_mode=("bilinear", "nearest"),
                           seed=2)
    res = dd({"img": x, "lab": lab})
    assert res["lab"].dtype == torch.int16 and set(torch.unique(res["lab"]).tolist()) <= {0, 1}
    single = RandSmoothDeform(SIZE, RAND, prob=1.0, def_range=0.2, grid_mode="nearest")
    single.apply(lab, {"applied": dd.transform.last_applied, "coarse": dd.transform.last_coarse})
    assert torch.equal(single.apply(lab, {"applied": dd.transform.last_applied, "coarse": dd.transform.last_coarse}),
                       res["lab"])
    for i in range(2):
        ref = monai_with(mt.RandSmoothDeform(SIZE, RAND, prob=1.0, def_range=0.2, grid_mode="bilinear"),
                         dd.transform.last_coarse[i])(x[i].clone(), randomize=False)
        assert float((res["img"][i] - ref).abs().max()) <= 1e-5 * 100
    cd = RandSmoothFieldAdjustContrastd(["a", "b"], SIZE, RAND, prob=1.0, seed=1)
    r = cd({"a": x, "b": x.clone()})
    assert torch.equal(r["a"], r["b"])
    vol = ch2[0][:, 40:120:2, 40:140:2, 40:120:2].float()
    size = tuple(vol.shape[1:])
    t = RandSmoothFieldAdjustContrast(size, (5, 5, 5), prob=1.0, seed=3)
    out = t(vol)
    ref = monai_with(mt.RandSmoothFieldAdjustContrast(size, (5, 5, 5), prob=1.0), t.last_coarse[0])(vol.clone(),
                                                                                                  randomize=False)
    assert float((out - ref).abs().max()) <= 2e-6 * float(vol.max() - vol.min())
    assert out.min() >= vol.min() - 1e-3 and out.max() <= vol.max() + 1e-3


def test_errors():
    with pytest.raises(ValueError, match="low"):
        SmoothField(RAND, low=1.0, high=1.0)
    with pytest.raises(ValueError, match="gamma"):
        RandSmoothFieldAdjustContrast(SIZE, RAND, gamma=(1, 2, 3))
    with pytest.raises(ValueError, match="rand_size"):
        RandSmoothFieldAdjustIntensity(SIZE, (4, 4))
    with pytest.raises(ValueError, match="spatial_size"):
        RandSmoothFieldAdjustIntensity(SIZE, RAND, prob=1.0, seed=1)(rand((1, 1, 8, 8, 8)))
    with pytest.raises(ValueError, match="grid_mode"):
        RandSmoothDeform(SIZE, RAND, grid_mode="bicubic")
    with pytest.raises(KeyError):
        RandSmoothFieldAdjustContrastd("z", SIZE, RAND)({"a": rand((1,) + SIZE)})


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    x = rand((2, 1) + SIZE, seed=5)
    for make in (lambda: RandSmoothFieldAdjustContrast(SIZE, RAND, prob=1.0, seed=1),
                 lambda: RandSmoothDeform(SIZE, RAND, prob=1.0, def_range=0.2, grid_mode="bilinear", seed=2)):
        a, t = make()(x), make()
        b = t(x.to(device))
        assert b.device.type == device and float((b.cpu() - a).abs().max()) <= 1e-4
