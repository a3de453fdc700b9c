"""SpatialPad / BorderPad / DivisiblePad (+ d forms) vs MONAI (which pads with numpy / torch):
bit-identical for every mode and dtype, affines as MONAI's, inverses crop back exactly."""
import numpy as np
import pytest
import torch

from voxaug import spatial as S

mt = pytest.importorskip("monai.transforms")
from monai.data import MetaTensor  # noqa: E402

MODES = ["constant", "edge", "reflect", "symmetric", "wrap", "replicate", "circular"]


def _vol(dtype=torch.float32, shape=(2, 7, 5, 9)):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g) * 100
    return x.to(dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls,args", [
    ("SpatialPad", dict(spatial_size=(11, 8, 9))),
    ("SpatialPad", dict(spatial_size=(10, -1, 14), method="end")),
    ("BorderPad", dict(spatial_border=2)),
    ("BorderPad", dict(spatial_border=(1, 0, 3))),
    ("BorderPad", dict(spatial_border=(1, 2, 0, 3, 4, 0))),
    ("DivisiblePad", dict(k=4)),
    ("DivisiblePad", dict(k=(8, 3, 5), method="end")),
])
def test_pads_bit_identical_to_monai(cls, args, mode):
    x = _vol()
    ref = getattr(mt, cls)(mode=mode, **args)(x)
    got = getattr(S, cls)(mode=mode, **args)(x)
    assert got.shape == ref.shape and torch.equal(got, torch.as_tensor(ref))
    assert got.shape != x.shape or cls == "BorderPad"


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int64, torch.float16, torch.float64])
def test_pads_every_dtype_and_value(dtype):
    x = _vol(torch.float32).abs().to(dtype)
    for mode in ("constant", "symmetric"):
        ref = mt.SpatialPad((9, 9, 12), mode=mode, value=7)(x) if mode == "constant" else \
            mt.SpatialPad((9, 9, 12), mode=mode)(x)
        kw = dict(value=7) if mode == "constant" else {}
        got = S.SpatialPad((9, 9, 12), mode=mode, **kw)(x)
        assert got.dtype == dtype and torch.equal(got, torch.as_tensor(ref))


def test_batched_and_metatensor_affine_and_inverse():
    aff = torch.diag(torch.tensor([1.5, 2.0, 0.8, 1.0], dtype=torch.float64))
    aff[:3, 3] = torch.tensor([3.0, -4.0, 5.0], dtype=torch.float64)
    x = MetaTensor(_vol(shape=(1, 7, 5, 9)), affine=aff)
    ref = mt.BorderPad((1, 2, 0, 3, 4, 0), mode="edge")(x)
    t = S.BorderPad((1, 2, 0, 3, 4, 0), mode="edge")
    got = t(x)
    assert torch.equal(got.as_tensor(), ref.as_tensor())
    assert torch.allclose(got.affine.double(), ref.affine.double(), atol=1e-12)
    back = t.inverse(got)
    assert torch.equal(back.as_tensor(), x.as_tensor())
    assert torch.allclose(back.affine.double(), aff, atol=1e-12)
    # A batch: every sample padded alike, one launch.
    xb = _vol(shape=(3, 2, 7, 5, 9))
    yb = S.DivisiblePad(4, mode="reflect")(xb)
    for i in range(3):
        assert torch.equal(yb[i], torch.as_tensor(mt.DivisiblePad(4, mode="reflect")(xb[i])))


def test_dict_forms_per_key_modes():
    img, lab = _vol(), _vol(torch.int16)
    d = {"img": img, "lab": lab}
    ref = mt.SpatialPadd(["img", "lab"], (10, 8, 12), mode=("reflect", "constant"))(d)
    got = S.SpatialPadd(["img", "lab"], (10, 8, 12), mode=("reflect", "constant"))(d)
    for k in ("img", "lab"):
        assert torch.equal(got[k], torch.as_tensor(ref[k]))
    ref = mt.BorderPadd(["img"], 2, mode="symmetric")(d)
    assert torch.equal(S.BorderPadd(["img"], 2, mode="symmetric")(d)["img"], torch.as_tensor(ref["img"]))
    ref = mt.DivisiblePadd(["lab"], 16, mode="edge")(d)
    assert torch.equal(S.DivisiblePadd(["lab"], 16, mode="edge")(d)["lab"], torch.as_tensor(ref["lab"]))


def test_bad_pad_arguments():
    with pytest.raises(ValueError, match="mode must be one of"):
        S.SpatialPad((4, 4, 4), mode="mean")
    with pytest.raises(ValueError, match="method"):
        S.SpatialPad((4, 4, 4), method="middle")
    with pytest.raises(ValueError, match="spatial_border"):
        S.BorderPad((1, 2))
    with pytest.raises(TypeError, match="unsupported pad arguments"):
        S.SpatialPad((4, 4, 4), stat_length=3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size, method", [((4, 3, 6), "symmetric"),     # every axis cropped
                                          ((11, 8, 14), "end"),          # every axis padded
                                          ((4, 10, 9), "symmetric"),     # crop, pad, keep
                                          ((6, -1, 12), "end"),          # crop by one (odd), keep, pad
                                          ((3, 9, 2), "symmetric")])
def test_resize_with_pad_or_crop_bit_identical_to_monai(mode, size, method):
    """One exact launch per call; MONAI crops then pads: the same bytes, shape, and (on a
    MetaTensor) affine; the inverse equals MONAI's (padded axes cropped back, cropped axes
    padded with zeros)."""
    aff = torch.diag(torch.tensor([1.5, 2.0, 0.8, 1.0], dtype=torch.float64))
    aff[:3, 3] = torch.tensor([3.0, -4.0, 5.0], dtype=torch.float64)
    x = _vol()
    ref_t, t = mt.ResizeWithPadOrCrop(size, method=method, mode=mode), S.ResizeWithPadOrCrop(size, method, mode)
    ref = ref_t(MetaTensor(x.clone(), affine=aff.clone()))
    got = t(MetaTensor(x.clone(), affine=aff.clone()))
    assert got.shape == ref.shape and torch.equal(got.as_tensor(), ref.as_tensor())
    assert torch.allclose(got.affine.double(), ref.affine.double(), atol=1e-12)
    back, ref_back = t.inverse(got), ref_t.inverse(ref)
    assert back.shape == x.shape and torch.equal(back.as_tensor(), ref_back.as_tensor())
    assert back.applied_operations == [] and torch.allclose(back.affine.double(), aff, atol=1e-12)
    # a batch: each sample as MONAI's
    xb = _vol(shape=(3, 2, 7, 5, 9))
    yb = S.ResizeWithPadOrCrop(size, method, mode)(xb)
    for i in range(3):
        assert torch.equal(yb[i], torch.as_tensor(mt.ResizeWithPadOrCrop(size, method=method, mode=mode)(xb[i])))


def test_resize_with_pad_or_crop_dict_per_key_modes_and_value():
    img, lab = _vol(), _vol(torch.int16)
    d = {"img": img, "lab": lab}
    ref = mt.ResizeWithPadOrCropd(["img", "lab"], (5, 8, 12), mode=("reflect", "constant"))(d)
    got = S.ResizeWithPadOrCropd(["img", "lab"], (5, 8, 12), mode=("reflect", "constant"))(d)
    for k in ("img", "lab"):
        assert got[k].dtype == d[k].dtype and torch.equal(got[k], torch.as_tensor(ref[k]))
    ref = mt.ResizeWithPadOrCropd(["lab"], (5, 8, 12), value=3)(d)
    assert torch.equal(S.ResizeWithPadOrCropd(["lab"], (5, 8, 12), value=3)(d)["lab"], torch.as_tensor(ref["lab"]))
    with pytest.raises(ValueError, match="mode must be one of"):
        S.ResizeWithPadOrCrop((4, 4, 4), mode="mean")
    with pytest.raises(ValueError, match="method"):
        S.ResizeWithPadOrCropd(["img"], (4, 4, 4), method="middle")


@pytest.mark.parametrize("mode", [0, 3.5, "constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("shape, only", [((4, 13, 9), None), ((6, 12, 5), None), ((9, 9, 9), "crop"),
                                         ((9, 2, 12), "pad"), (8, None)])
def test_torchio_crop_or_pad_bit_identical(mode, shape, only):
    """TorchIO CropOrPad: ceil(n / 2) voxels at the start (crop or pad), TorchIO's padding modes;
    every dtype; batches sample by sample as TorchIO's."""
    tio = pytest.importorskip("torchio")
    kw = {"only_crop": only == "crop", "only_pad": only == "pad"}
    for dtype in (torch.float32, torch.int16):
        x = _vol(dtype, shape=(2, 7, 10, 9))
        ref = tio.CropOrPad(shape, padding_mode=mode, **kw)(x)
        got = S.CropOrPad(shape, padding_mode=mode, **kw)(x)
        assert got.shape == ref.shape and got.dtype == dtype and torch.equal(got, ref), (shape, mode, dtype)
    xb = _vol(shape=(3, 2, 7, 10, 9))
    yb = S.CropOrPad(shape, padding_mode=mode, **kw)(xb)
    for i in range(3):
        assert torch.equal(yb[i], tio.CropOrPad(shape, padding_mode=mode, **kw)(xb[i]))


def test_torchio_crop_or_pad_subject_inverse_and_refusals():
    tio = pytest.importorskip("torchio")
    img, lab = _vol(shape=(1, 7, 10, 9)), _vol(torch.int16, shape=(1, 7, 10, 9))
    subject = tio.Subject(t1=tio.ScalarImage(tensor=img), seg=tio.LabelMap(tensor=lab))
    ref = tio.CropOrPad((5, 12, 9), padding_mode="edge")(subject)
    got = S.CropOrPad((5, 12, 9), padding_mode="edge")({"t1": img, "seg": lab, "name": "s1"})
    assert torch.equal(got["t1"], ref["t1"].data) and torch.equal(got["seg"], ref["seg"].data)
    assert got["name"] == "s1"
    t = S.CropOrPad((5, 12, 9), padding_mode="reflect")
    back = t.inverse(t(MetaTensor(img.clone())))
    keep = torch.zeros_like(img, dtype=torch.bool)
    keep[:, 1:6] = True  # the cropped axis (7 -> 5: one voxel off each end) comes back as zeros
    assert back.shape == img.shape and back.applied_operations == []
    assert torch.equal(back.as_tensor()[keep], img[keep]) and not back.as_tensor()[~keep].any()
    # the other arguments (statistic modes, mask_name, location, units): test_torchio_bounds.py
    for bad, match in [(dict(target_shape=None), "target shape must be passed"),
                       (dict(target_shape=(4, 4)), "3 elements"),
                       (dict(target_shape=4, only_crop=True, only_pad=True), "cannot both")]:
        with pytest.raises(ValueError, match=match):
            S.CropOrPad(**bad)
