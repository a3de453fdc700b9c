"""TorchIO's bounds and orientation transforms in voxaug.spatial (issue 6 and issue 3, TorchIO names):
Pad, Crop, CropOrPad (every padding mode, units, None axes, mask_name / labels, location='random'),
ToOrientation and Transpose -- each against TorchIO itself (np.pad, slicing, nibabel), on random
volumes of several dtypes and on ch2 + AAL from mricron-data."""
import warnings

import numpy as np
import pytest
import torch

from voxaug import spatial as S

from conftest import load_template

tio = pytest.importorskip("torchio")
MetaTensor = pytest.importorskip("monai.data").MetaTensor

MODES = [0, 3.5, -2, "constant", "edge", "reflect", "symmetric", "wrap", "mean", "median", "minimum", "maximum",
         "linear_ramp"]
BOUNDS = [(1, 2, 0, 3, 2, 1), 2, (0, 1, 3), (0, 0, 0, 0, 0, 4)]
AFFINE = np.array([[0.0, 0.0, -1.5, 10.0], [-0.8, 0.0, 0.0, -20.0], [0.0, 2.0, 0.0, 5.0], [0.0, 0.0, 0.0, 1.0]])


def _vol(dtype=torch.float32, shape=(2, 7, 10, 9), seed=0, zeros=0.2):
    """Random values (whole numbers for integer dtypes) with some zeros (numpy's linear_ramp
    branches on a zero edge)."""
    g = torch.Generator().manual_seed(seed)
    v = torch.rand(shape, generator=g) * 200 - (0 if dtype in (torch.uint8,) else 60)
    v = v * (torch.rand(shape, generator=g) > zeros)
    return (v if dtype.is_floating_point else v.round()).to(dtype)


def _same(ref: torch.Tensor, got: torch.Tensor, what) -> None:
    assert tuple(got.shape) == tuple(ref.shape) and got.dtype == ref.dtype, (what, got.shape, ref.shape)
    assert torch.equal(got, ref), (what, (got != ref).sum().item())


# ---------------- Pad ----------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8, torch.float64, torch.float16])
def test_pad_bit_identical_to_torchio(mode, dtype):
    """Every mode, the three bounds forms, bit for bit (the statistics of the whole sample, the
    ramp's float64 linspace and its zero-step branch, numpy's integer truncation)."""
    if dtype == torch.uint8 and isinstance(mode, (int, float)) and mode < 0:
        pytest.skip("a negative constant does not fit uint8")
    for seed in range(3):
        x = _vol(dtype, seed=seed)
        for bounds in BOUNDS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # TorchIO's truncation warning for integer mean / median
                ref = tio.Pad(bounds, padding_mode=mode)(x)
            _same(ref, S.Pad(bounds, padding_mode=mode)(x), (mode, dtype, bounds, seed))


@pytest.mark.parametrize("mode", ["mean", "median", "maximum", "linear_ramp", "wrap", 1.25])
def test_pad_batch_is_per_sample_and_subject(mode):
    """A batch: each sample as TorchIO pads it alone (its own statistic); a dictionary (Subject):
    every 4-D / 5-D tensor, labels with the same mode (as TorchIO), other entries untouched."""
    xb = torch.stack([_vol(seed=s) for s in range(3)])
    yb = S.Pad((1, 2, 0, 3, 2, 1), mode)(xb)
    for i in range(3):
        _same(tio.Pad((1, 2, 0, 3, 2, 1), padding_mode=mode)(xb[i]), yb[i], (mode, i))
    img, lab = _vol(seed=4, shape=(1, 7, 10, 9)), _vol(torch.int16, seed=5, shape=(1, 7, 10, 9))
    subject = tio.Subject(t1=tio.ScalarImage(tensor=img), seg=tio.LabelMap(tensor=lab))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = tio.Pad(2, padding_mode=mode)(subject)
    got = S.Pad(2, padding_mode=mode)({"t1": img, "seg": lab, "name": "s1"})
    _same(ref["t1"].data, got["t1"], "t1")
    _same(ref["seg"].data, got["seg"], "seg")
    assert got["name"] == "s1"


def test_pad_and_crop_affines_and_inverse():
    """MetaTensors get TorchIO's new origin (affine @ -low / +low); the inverse undoes the record."""
    x = _vol(shape=(2, 7, 10, 9))
    img = tio.ScalarImage(tensor=x, affine=AFFINE)
    for vt, tt in [(S.Pad((1, 2, 0, 3, 2, 1), "median"), tio.Pad((1, 2, 0, 3, 2, 1), "median")),
                   (S.Pad(3, "linear_ramp"), tio.Pad(3, "linear_ramp")),
                   (S.Crop((1, 2, 0, 3, 2, 1)), tio.Crop((1, 2, 0, 3, 2, 1))),
                   (S.Crop(2), tio.Crop(2))]:
        ref = tt(img)
        got = vt(MetaTensor(x.clone(), affine=torch.as_tensor(AFFINE)))
        _same(ref.data, got.as_tensor(), type(vt).__name__)
        np.testing.assert_allclose(got.affine.numpy(), ref.affine, rtol=0, atol=1e-12)
        back = vt.inverse(got)
        assert tuple(back.shape) == tuple(x.shape) and back.applied_operations == []
        np.testing.assert_allclose(back.affine.numpy(), AFFINE, rtol=0, atol=1e-12)
        if isinstance(vt, S.Pad):  # a pad's inverse is exact; a crop's comes back with zeros
            _same(x, back.as_tensor(), "inverse")


@pytest.mark.parametrize("bounds", BOUNDS + [(3, 0, 0, 0, 0, 0)])
def test_crop_bit_identical_to_torchio(bounds):
    for dtype in (torch.float32, torch.int64, torch.uint8):
        x = _vol(dtype, seed=7)
        _same(tio.Crop(bounds)(x), S.Crop(bounds)(x), (bounds, dtype))
    xb = torch.stack([_vol(seed=s) for s in range(2)])
    yb = S.Crop(bounds)(xb)
    for i in range(2):
        _same(tio.Crop(bounds)(xb[i]), yb[i], i)


def test_pad_median_beyond_torch_quantile_limit():
    """TorchIO's median (torch.quantile) refuses more than 2^24 elements; voxaug's order
    statistics do not (checked against numpy's median of the same float32 values)."""
    x = torch.rand(1, 260, 260, 250)  # 16.9 M > 2^24
    y = S.Pad((1, 0, 0, 0, 0, 0), "median")(x)
    want = np.float32(np.median(x.numpy().astype(np.float64)))
    assert y[0, 0, 0, 0].item() == float(want)
    assert torch.equal(y[:, 1:], x)


# ---------------- CropOrPad ----------------
@pytest.mark.parametrize("mode", ["mean", "median", "minimum", "maximum", "linear_ramp"])
@pytest.mark.parametrize("shape", [(4, 13, 9), (6, 12, 5), 8, (None, 4, 12)])
def test_crop_or_pad_statistic_and_ramp_modes(mode, shape):
    """The modes that need the uncropped sample: its statistics, and the ramp numpy computes on the
    padded, not yet cropped volume (its zero-step branch sees the cropped-away edges)."""
    for dtype in (torch.float32, torch.int16):
        for seed in range(2):
            x = _vol(dtype, seed=seed)
            x[:, :2] = 0  # zeros on the faces that the crop removes
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = tio.CropOrPad(shape, padding_mode=mode)(x)
            _same(ref, S.CropOrPad(shape, padding_mode=mode)(x), (mode, shape, dtype, seed))


@pytest.mark.parametrize("units, target", [("mm", (20.0, 12.0, 9.5)), ("cm", (2.0, 1.1, None)),
                                           ("mm", (7.5, 30, 18.0)), ("voxels", (5.0, None, 12))])
def test_crop_or_pad_units_and_none_axes(units, target):
    """Physical targets use the affine's spacing (TorchIO's round); None keeps an axis."""
    x = _vol(shape=(1, 7, 10, 9))
    ref = tio.CropOrPad(target, units=units)(tio.ScalarImage(tensor=x, affine=AFFINE))
    got = S.CropOrPad(target, units=units)(MetaTensor(x.clone(), affine=torch.as_tensor(AFFINE)))
    _same(ref.data, got.as_tensor(), (units, target))
    np.testing.assert_allclose(got.affine.numpy(), ref.affine, rtol=0, atol=1e-12)
    if units == "voxels":  # a plain tensor: TorchIO's identity affine
        _same(tio.CropOrPad(target, units=units)(x), S.CropOrPad(target, units=units)(x), "plain")


def _subject(img, lab):
    return tio.Subject(t1=tio.ScalarImage(tensor=img), seg=tio.LabelMap(tensor=lab))


@pytest.mark.parametrize("labels", [None, [3], [1, 3]])
@pytest.mark.parametrize("target", [(4, 5, 6), (8, 13, 9), (3, 4, 5), None])
def test_crop_or_pad_mask_name(labels, target):
    """The output centred on the mask's bounding box with TorchIO's half-voxel rule (odd / even
    boxes and targets, boxes at the border that need padding), the box's size without a target."""
    img = _vol(shape=(1, 7, 10, 9))
    lab = torch.zeros(1, 7, 10, 9, dtype=torch.int16)
    lab[0, 2:5, 6:10, 1:4] = 3
    lab[0, 0, 0, 8] = 1
    ref = tio.CropOrPad(target, mask_name="seg", labels=labels)(_subject(img, lab))
    got = S.CropOrPad(target, mask_name="seg", labels=labels)({"t1": img, "seg": lab})
    _same(ref["t1"].data, got["t1"], (labels, target))
    _same(ref["seg"].data, got["seg"], (labels, target))


def test_crop_or_pad_mask_fallbacks_and_batches():
    img = _vol(shape=(1, 7, 10, 9))
    empty = torch.zeros(1, 7, 10, 9, dtype=torch.int16)
    with pytest.warns(RuntimeWarning, match="are zero"):
        got = S.CropOrPad((5, 12, 9), mask_name="seg")({"t1": img, "seg": empty})
    with pytest.warns(RuntimeWarning, match="are zero"):
        ref = tio.CropOrPad((5, 12, 9), mask_name="seg")(_subject(img, empty))
    _same(ref["t1"].data, got["t1"], "empty mask")
    with pytest.warns(RuntimeWarning, match="not found"):
        got = S.CropOrPad((5, 12, 9), mask_name="brain")({"t1": img})
    _same(tio.CropOrPad((5, 12, 9))(img), got["t1"], "missing mask")
    # a batch: every sample its own box
    labs = torch.zeros(2, 1, 7, 10, 9, dtype=torch.uint8)
    labs[0, 0, 1:3, 2:9, 0:2] = 1
    labs[1, 0, 4:7, 0:3, 5:9] = 1
    imgs = torch.stack([_vol(shape=(1, 7, 10, 9), seed=s) for s in range(2)])
    got = S.CropOrPad((4, 6, 5), mask_name="seg", padding_mode="edge")({"t1": imgs, "seg": labs})
    for i in range(2):
        ref = tio.CropOrPad((4, 6, 5), mask_name="seg", padding_mode="edge")(_subject(imgs[i], labs[i]))
        _same(ref["t1"].data, got["t1"][i], i)
        _same(ref["seg"].data, got["seg"][i], i)
    with pytest.raises(ValueError, match="differs per sample"):  # boxes of two sizes, no target
        S.CropOrPad(None, mask_name="seg")({"t1": imgs, "seg": labs})


def test_crop_or_pad_random_location():
    """Each cropped axis starts uniformly in [0, n] per sample (chi-square over many draws), padding
    stays centred; the result is TorchIO's Crop / Pad with those bounds; one draw for a subject;
    the seed reproduces it."""
    x = torch.arange(7 * 10 * 9, dtype=torch.float32).reshape(1, 7, 10, 9)
    t = S.CropOrPad((4, 12, 6), location="random", seed=11)
    counts = np.zeros((2, 4), dtype=np.int64)  # axis 0: 4 starts (7 - 4 + 1), axis 2: 4 starts (9 - 6 + 1)
    for _ in range(100):
        y = t(x.expand(8, 1, 7, 10, 9))
        assert y.shape == (8, 1, 4, 12, 6)
        for k in range(8):
            v = int(y[k, 0, 0, 1, 0].item())  # row 1 of axis 1 is the first original row (1 voxel padded)
            i0, rem = divmod(v, 10 * 9)
            j0, k0 = divmod(rem, 9)
            assert j0 == 0 and 0 <= i0 <= 3 and 0 <= k0 <= 3
            counts[0, i0] += 1
            counts[1, k0] += 1
            ref = tio.Pad((0, 0, 1, 1, 0, 0))(tio.Crop((i0, 3 - i0, 0, 0, k0, 3 - k0))(x))
            _same(ref, y[k], k)
    chi2 = ((counts - 200.0) ** 2 / 200.0).sum(axis=1)
    assert (chi2 < 16.27).all(), counts  # chi-square, 3 degrees of freedom, p = 0.001
    a = S.CropOrPad((4, 12, 6), location="random", seed=5)(x.expand(4, 1, 7, 10, 9))
    b = S.CropOrPad((4, 12, 6), location="random", seed=5)(x.expand(4, 1, 7, 10, 9))
    assert torch.equal(a, b)
    d = S.CropOrPad((4, 12, 6), location="random", seed=6, padding_mode="wrap")({"a": x, "b": x.to(torch.int32)})
    assert torch.equal(d["a"].to(torch.int32), d["b"])
    # per-sample starts with 'wrap' (index tables: sample by sample) and the inverse of a batch
    xb = x.expand(4, 1, 7, 10, 9).clone()
    t = S.CropOrPad((4, 12, 6), location="random", seed=7, padding_mode="wrap")
    yb = t(MetaTensor(xb))
    for k in range(4):
        i0, k0 = (int(yb[k, 0, 0, 1, 0].item()) // 90), int(yb[k, 0, 0, 1, 0].item()) % 9
        ref = tio.Pad((0, 0, 1, 1, 0, 0), padding_mode="wrap")(tio.Crop((i0, 3 - i0, 0, 0, k0, 3 - k0))(x))
        _same(ref, yb[k].as_tensor(), ("wrap", k))
    back = t.inverse(yb).as_tensor()
    kept = back != 0
    # every kept voxel back in place, zeros elsewhere (voxel 0 holds the value 0 itself)
    assert torch.equal(back[kept], xb[kept]) and 4 * 4 * 10 * 6 - 4 <= int(kept.sum()) <= 4 * 4 * 10 * 6


def test_crop_or_pad_on_ch2_and_aal():
    """Real data: ch2 centred on an AAL structure's box (labels), median / linear-ramp padding, and
    a physical target in mm, against TorchIO."""
    ch2, aff = load_template("ch2.nii.gz")
    aal, aff2 = load_template("aal.nii.gz")
    if ch2.shape != aal.shape:
        pytest.skip(f"ch2 {tuple(ch2.shape)} and aal {tuple(aal.shape)} differ")
    subject = tio.Subject(t1=tio.ScalarImage(tensor=ch2, affine=aff), seg=tio.LabelMap(tensor=aal, affine=aff))
    for kw in [dict(target_shape=(96, 112, 80), mask_name="seg", labels=[37, 38, 300], padding_mode="median"),
               dict(target_shape=(200, 100, 220), padding_mode="linear_ramp"),
               dict(target_shape=(150.0, 240.0, 100.0), units="mm", padding_mode="mean"),
               dict(target_shape=None, mask_name="seg", labels=[71])]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = tio.CropOrPad(**kw)(subject)
        got = S.CropOrPad(**kw)({"t1": MetaTensor(ch2.clone(), affine=torch.as_tensor(aff)),
                                 "seg": MetaTensor(aal.clone(), affine=torch.as_tensor(aff))})
        _same(ref["t1"].data, got["t1"].as_tensor(), kw)
        _same(ref["seg"].data, got["seg"].as_tensor(), kw)
        np.testing.assert_allclose(got["t1"].affine.numpy(), ref["t1"].affine, rtol=0, atol=1e-9)
    for mode in ("median", "mean", "minimum"):
        _same(tio.Pad((3, 0, 2, 5, 0, 1), mode)(ch2.float()), S.Pad((3, 0, 2, 5, 0, 1), mode)(ch2.float()), mode)


# ---------------- ToOrientation / Transpose ----------------
@pytest.mark.parametrize("code", ["RAS", "LPS", "PLS", "SLP", "IAR", "las"])
def test_to_orientation_bit_identical(code):
    x = _vol(shape=(2, 7, 10, 9))
    ref = tio.ToOrientation(code)(tio.ScalarImage(tensor=x, affine=AFFINE))
    t = S.ToOrientation(code)
    got = t(MetaTensor(x.clone(), affine=torch.as_tensor(AFFINE)))
    _same(ref.data, got.as_tensor(), code)
    np.testing.assert_allclose(got.affine.numpy(), ref.affine, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t.last_affine, ref.affine, rtol=0, atol=1e-12)
    _same(tio.ToOrientation(code)(x), S.ToOrientation(code)(x), "plain")  # TorchIO's identity affine
    d = S.ToOrientation(code)({"a": x, "b": x[:1].to(torch.int16), "n": 3})
    _same(tio.ToOrientation(code)(x), d["a"], "dict")
    assert d["n"] == 3 and d["b"].dtype == torch.int16


def test_transpose_and_ch2():
    x = _vol(shape=(1, 7, 10, 9))
    ref = tio.Transpose()(tio.ScalarImage(tensor=x, affine=AFFINE))
    got = S.Transpose()(MetaTensor(x.clone(), affine=torch.as_tensor(AFFINE)))
    _same(ref.data, got.as_tensor(), "transpose")
    np.testing.assert_allclose(got.affine.numpy(), ref.affine, rtol=0, atol=1e-12)
    _same(tio.Transpose()(x), S.Transpose()(x), "plain")
    assert torch.equal(S.Transpose().inverse(S.Transpose()(x)), x)
    lps = MetaTensor(x.clone(), affine=torch.as_tensor(AFFINE))
    lps.meta["space"] = "LPS"  # the codes of the RAS affine: still a pure swap of the first and last axes
    assert torch.equal(S.Transpose()(lps).as_tensor(), x.permute(0, 3, 2, 1))
    ch2, aff = load_template("ch2.nii.gz")
    img = tio.ScalarImage(tensor=ch2, affine=aff)
    for t, v in [(tio.ToOrientation("PIR"), S.ToOrientation("PIR")), (tio.Transpose(), S.Transpose())]:
        ref = t(img)
        got = v(MetaTensor(ch2.clone(), affine=torch.as_tensor(aff)))
        _same(ref.data, got.as_tensor(), type(v).__name__)
        np.testing.assert_allclose(got.affine.numpy(), ref.affine, rtol=0, atol=1e-9)


# ---------------- bad input ----------------
def test_bad_arguments():
    for bad, match in [(dict(padding=-1), "ints >= 0"), (dict(padding=(1, 2)), "3 or 6"),
                       (dict(padding=True), "ints >= 0"), (dict(padding=(1.5, 1, 1)), "ints >= 0"),
                       (dict(padding=1, padding_mode="middle"), "padding_mode must be"),
                       (dict(padding=1, padding_mode=lambda v, w, a, k: None), "callable")]:
        with pytest.raises(ValueError, match=match):
            S.Pad(**bad)
    with pytest.raises(ValueError, match="3 or 6"):
        S.Crop((1, 1, 1, 1))
    with pytest.raises(ValueError, match="leaves no voxels"):
        S.Crop((4, 3, 0, 0, 0, 0))(torch.zeros(1, 7, 10, 9))
    for bad, match in [(dict(target_shape=None), "target shape must be passed"),
                       (dict(target_shape=(4, 4)), "3 elements"), (dict(target_shape=(4, 0, 4)), "positive"),
                       (dict(target_shape=(4, 4.5, 4)), "integers"), (dict(target_shape="4"), "target_shape"),
                       (dict(target_shape=4, padding_mode="middle"), "padding_mode"),
                       (dict(target_shape=4, location="random", mask_name="seg"), "cannot be combined"),
                       (dict(target_shape=4, location="left"), "location"),
                       (dict(target_shape=4, units="inch"), "units"),
                       (dict(target_shape=4, labels=[1]), "labels should be None"),
                       (dict(target_shape=4, only_crop=True, only_pad=True), "cannot both")]:
        with pytest.raises(ValueError, match=match):
            S.CropOrPad(**bad)
    with pytest.raises(ValueError, match="mask_name names a tensor of a dictionary"):
        S.CropOrPad(4, mask_name="seg")(torch.zeros(1, 7, 10, 9))
    with pytest.raises(ValueError, match="Resolved target shape"):
        S.CropOrPad((0.2, 10.0, 10.0), units="mm")(torch.zeros(1, 7, 10, 9))
    with pytest.raises(ValueError, match="share the batch size and spatial shape"):
        S.CropOrPad(4)({"a": torch.zeros(1, 7, 10, 9), "b": torch.zeros(1, 7, 10, 8)})
    for bad in ["RAX", "RRS", "RA", 3]:
        with pytest.raises(ValueError, match="Orientation"):
            S.ToOrientation(bad)
