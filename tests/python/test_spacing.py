"""voxaug Spacing / Orientation (python/voxaug/spatial.py) vs MONAI 1.6 on real volumes.

Volumes (mricron-data): ch2better.nii.gz (uint8, 0.5 mm) cropped to 120^3 with a thresholded
uint8 label; inia19-t1-brain.nii.gz (float32) + inia19-NeuroMaps.nii.gz (int16 labels) cropped
to 80 x 100 x 60. Crops get the affine of their first voxel.

Tolerances:
- Affines and output shapes: MONAI's geometry is reproduced step by step in float64
  (zoom_affine, compute_shape_offset, ``solve(src, dst)``, ``affine @ xform``): equal within
  1e-6 (observed: bit-identical).
- Spacing images: MONAI interpolates in float64 (Spacing's default dtype), voxaug in float32:
  |voxaug - MONAI| <= 1e-4 x the data range (observed <= 1e-5).
- Spacing labels (nearest): identical except voxels whose source coordinate is within float
  rounding of a half-voxel tie: at most LABEL_TIES of the voxels (observed: none).
- Orientation: a signed permutation, copied voxel for voxel: bit-identical, any dtype.
"""
import os

import numpy as np
import pytest
import torch

from voxaug import spatial

from conftest import TEMPLATES

mt = pytest.importorskip("monai.transforms")
nib = pytest.importorskip("nibabel")
from monai.data import MetaTensor  # noqa: E402

IMG_TOL = 1e-4
LABEL_TIES = 1e-5


def _load(name):
    path = os.path.join(TEMPLATES, name)
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    img = nib.load(path)
    return np.asarray(img.dataobj), img.affine


def _crop(data, affine, start, size):
    sl = tuple(slice(s, s + n) for s, n in zip(start, size))
    a = affine.copy()
    a[:3, 3] = affine[:3, :3] @ np.asarray(start, dtype=float) + affine[:3, 3]
    return MetaTensor(torch.from_numpy(np.ascontiguousarray(data[sl]))[None], affine=torch.as_tensor(a))


def _oblique(a, deg=(7.0, -4.0, 11.0)):
    """`a` rotated about the world origin (an oblique scan)."""
    rx, ry, rz = np.deg2rad(deg)
    cx, sx, cy, sy, cz, sz = np.cos(rx), np.sin(rx), np.cos(ry), np.sin(ry), np.cos(rz), np.sin(rz)
    r = np.eye(4)
    r[:3, :3] = (np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]]) @ np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
                 @ np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]]))
    return r @ a


@pytest.fixture(scope="module")
def ch2better():
    data, aff = _load("ch2better.nii.gz")
    assert data.dtype == np.uint8
    img = _crop(data, aff, (90, 120, 100), (120, 120, 120))
    lab = MetaTensor((img.as_tensor() > 80).to(torch.uint8), affine=img.affine.clone())
    return img, lab


@pytest.fixture(scope="module")
def inia():
    t1, aff = _load("inia19-t1-brain.nii.gz")
    lab, aff2 = _load("inia19-NeuroMaps.nii.gz")
    assert lab.dtype == np.int16 and np.allclose(aff, aff2)
    return _crop(t1, aff, (44, 50, 30), (80, 100, 60)), _crop(lab, aff, (44, 50, 30), (80, 100, 60))


def _with_affine(x, a):
    return MetaTensor(x.as_tensor().clone(), affine=torch.as_tensor(a, dtype=torch.float64))


def _check_spacing(m, v, lab_m=None, lab_v=None):
    assert tuple(v.shape) == tuple(m.shape)
    assert torch.allclose(v.affine, m.affine, rtol=0, atol=1e-6), (v.affine, m.affine)
    ref = m.as_tensor().double()
    rng = float(ref.max() - ref.min()) or 1.0
    assert float((v.as_tensor().double() - ref).abs().max()) <= IMG_TOL * rng
    if lab_m is not None:
        assert torch.allclose(lab_v.affine, lab_m.affine, rtol=0, atol=1e-6)
        assert tuple(lab_v.shape) == tuple(lab_m.shape)
        bad = (lab_v.as_tensor().double() != lab_m.as_tensor().double()).double().mean()
        assert float(bad) <= LABEL_TIES


@pytest.mark.parametrize("pixdim", [(1.0, 1.0, 1.0), (1.5, 1.5, 2.0), (0.7, 0.9, 1.3)])
def test_spacingd_matches_monai(ch2better, pixdim):
    img, lab = ch2better
    kw = dict(keys=["img", "lab"], pixdim=pixdim, mode=("bilinear", "nearest"))
    m = mt.Spacingd(**kw)({"img": img, "lab": lab})
    v = spatial.Spacingd(**kw)({"img": img, "lab": lab})
    _check_spacing(m["img"], v["img"], m["lab"], v["lab"])
    assert v["lab"].dtype == torch.uint8 and v["img"].dtype == torch.float32  # MONAI: float32 for both


@pytest.mark.parametrize("kw", [dict(diagonal=False), dict(diagonal=True), dict(diagonal=True, padding_mode="zeros"),
                                dict(scale_extent=True, align_corners=True), dict(recompute_affine=True),
                                dict(align_corners=True, padding_mode="reflection")])
def test_spacing_oblique_affine_options(ch2better, kw):
    img, lab = ch2better
    img = _with_affine(img[:, :64, :64, :64], _oblique(img.affine.numpy()))
    lab = _with_affine(lab[:, :64, :64, :64], img.affine)
    for x, mode in ((img, "bilinear"), (lab, "nearest")):
        m = mt.Spacing((0.8, 1.1, 0.9), mode=mode, **kw)(x)
        v = spatial.Spacing((0.8, 1.1, 0.9), mode=mode, **kw)(x)
        _check_spacing(m, v)


@pytest.mark.parametrize("order", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("padding_mode", ["border", "zeros", "reflection"])
def test_spacing_spline_orders_match_monai(ch2better, order, padding_mode):
    # MONAI's integer modes are scipy map_coordinates(order=k) (padding "border" -> scipy
    # "nearest", "zeros" -> "constant" (MONAI reads it as grid-constant's cval 0 here), "reflection"
    # -> "reflect"); voxaug's modes 2..5 are the same prefiltered B-splines, in float32.
    img, _ = ch2better
    x = _with_affine(img[:, :48, :48, :48], _oblique(img.affine.numpy()))
    m = mt.Spacing((0.8, 1.1, 0.9), mode=order, padding_mode=padding_mode)(x)
    v = spatial.Spacing((0.8, 1.1, 0.9), mode=order, padding_mode=padding_mode)(x)
    if padding_mode != "zeros":
        _check_spacing(m, v)
        return
    # scipy's 'constant' (0 outside [0, S-1], no blending: voxaug's "cutoff"). Spacing maps the
    # outermost output planes exactly onto the input's edge planes, where the rounding of the
    # two coordinate computations decides inside or outside: there a voxel matches or one side
    # is exactly 0. Everything inside matches.
    assert tuple(v.shape) == tuple(m.shape)
    assert torch.allclose(v.affine, m.affine, rtol=0, atol=1e-6)
    ref, got = m.as_tensor().double(), v.as_tensor().double()
    rng = float(ref.max() - ref.min())
    assert float((got - ref)[:, 1:-1, 1:-1, 1:-1].abs().max()) <= IMG_TOL * rng
    off = (got - ref).abs() > IMG_TOL * rng
    assert bool(((ref == 0) | (got == 0))[off].all())


def test_spacing_min_max_pixdim_and_fallback(ch2better):
    img, _ = ch2better
    img = img[:, :48, :40, :56]
    for kw in [dict(pixdim=(1.0, 0.0, -1.0)), dict(pixdim=(1.0,)), dict(pixdim=(1.0, 1.0, 1.0), min_pixdim=0.4),
               dict(pixdim=(1.0, 1.0, 1.0), max_pixdim=(0.4, 0.6, 2.0)), dict(pixdim=0.5)]:
        m = mt.Spacing(**kw)(img)
        v = spatial.Spacing(**kw)(img)
        _check_spacing(m, v)


def test_spacing_plain_tensor_and_batch(ch2better):
    img, _ = ch2better
    x = img[:, :40, :48, :36]
    m = mt.Spacing((1.2, 0.8, 1.0))(x)
    out, aff = spatial.Spacing((1.2, 0.8, 1.0))(x.as_tensor(), affine=x.affine.numpy())
    assert not isinstance(out, MetaTensor) and aff.dtype == torch.float64
    assert torch.allclose(aff, m.affine, rtol=0, atol=1e-6) and out.shape == m.shape
    batch = torch.stack([x.as_tensor(), x.as_tensor().flip(1)])
    outb, affb = spatial.Spacing((1.2, 0.8, 1.0))(batch, affine=x.affine)
    assert outb.shape == (2, *m.shape) and torch.equal(affb, aff)
    assert torch.equal(outb[0], out)
    with pytest.raises(ValueError, match="affine"):
        spatial.Spacing(1.0)(batch, affine=torch.stack([x.affine, 2 * x.affine]))
    same = spatial.Spacing((1.2, 0.8, 1.0))(batch, affine=torch.stack([x.affine, x.affine]))[1]
    assert torch.equal(same, aff)


def test_spacing_bad_arguments(ch2better):
    img, _ = ch2better
    with pytest.raises(ValueError, match="pixdim"):
        spatial.Spacing("1mm")
    with pytest.raises(ValueError, match="min_pixdim"):
        spatial.Spacing(1.0, min_pixdim=2.0, max_pixdim=1.0)
    with pytest.raises(ValueError, match="mode"):
        spatial.Spacing(1.0, mode="linear-ish")
    with pytest.raises(ValueError, match="padding_mode"):
        spatial.Spacing(1.0, padding_mode="wrap")
    with pytest.raises(ValueError, match="affine"):
        spatial.Spacing(1.0)(img.as_tensor(), affine=np.eye(3)[:2])
    with pytest.raises(ValueError, match="affine"):
        spatial.Spacing(1.0)(img, affine=np.eye(4))
    with pytest.raises(ValueError, match="mode"):
        spatial.Spacingd(["a", "b"], 1.0, mode=("bilinear", "nearest", "nearest"))


@pytest.mark.parametrize("singular", [
    np.diag([1.0, 0.0, 1.0, 1.0]),  # a zero voxel spacing
    np.array([[1.0, 1.0, 0, 5], [1.0, 1.0, 0, 6], [0, 0, 2.0, 7], [0, 0, 0, 1]]),  # two parallel axes
    np.diag([1.0, 1.0, 1e-300, 1.0]),  # singular up to float rounding
])
def test_spacing_refuses_singular_affine(ch2better, singular):
    """A singular input affine has no inverse, which Spacing needs; MONAI fails with numpy's
    LinAlgError (or its own "not invertible") from deep inside, voxaug with a ValueError that
    names the affine (array form, plain tensor with affine=, dictionary form and a lazily
    composed Compose alike). Affines that are merely small or skewed stay legal and match
    MONAI's geometry."""
    img, _ = ch2better
    x = img[:, :12, :14, :10].as_tensor()
    bad = MetaTensor(x, affine=torch.as_tensor(singular))
    with pytest.raises((np.linalg.LinAlgError, ValueError)):  # the reference fails too, less clearly
        mt.Spacing(1.0)(bad.clone())
    msg = r"input affine .* is singular \(not invertible\)"
    with pytest.raises(ValueError, match=msg):
        spatial.Spacing(1.0)(bad)
    with pytest.raises(ValueError, match=msg):
        spatial.Spacing(1.0)(x, affine=singular)
    with pytest.raises(ValueError, match=msg):
        spatial.Spacingd("img", 1.0)({"img": bad})
    from voxaug import transforms as vt
    with pytest.raises(ValueError, match=msg):
        vt.Compose([spatial.Spacing(1.0), spatial.Flip(0)])(bad)
    skewed = np.array([[1.0, 0.9, 0, 5], [0, 1.0, 0, 6], [0, 0, 2.0, 7], [0, 0, 0, 1]])
    for a, pixdim in ((np.diag([1.0, 1.0, 1e-3, 1.0]), (1.0, 1.0, 0.5e-3)), (skewed, (1.0, 0.8, 1.5))):
        ok = MetaTensor(x, affine=torch.as_tensor(a))
        v, m = spatial.Spacing(pixdim)(ok), mt.Spacing(pixdim)(ok.clone())
        assert v.shape == m.shape and torch.allclose(v.affine, m.affine, rtol=0, atol=1e-6)
        err = (v.as_tensor().double() - m.as_tensor().double()).abs().max().item()
        assert err <= IMG_TOL * float(m.max() - m.min()) and v.abs().sum() > 0


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_spacing_refuses_non_finite_affine(ch2better, value):
    img, _ = ch2better
    x = img[:, :12, :14, :10].as_tensor()
    a = np.eye(4)
    a[1, 3] = value
    with pytest.raises(ValueError, match="img.affine must be finite"):
        spatial.Spacing(1.0)(MetaTensor(x, affine=torch.as_tensor(a)))
    with pytest.raises(ValueError, match="affine must be finite"):
        spatial.Spacing(1.0)(x, affine=a)


@pytest.mark.parametrize("axcodes", ["RAS", "LPS", "PLI", "SAR"])
def test_orientationd_bit_identical(inia, axcodes):
    img, lab = inia
    m = mt.Orientationd(["img", "lab"], axcodes=axcodes)({"img": img, "lab": lab})
    v = spatial.Orientationd(["img", "lab"], axcodes=axcodes)({"img": img, "lab": lab})
    for k in ("img", "lab"):
        assert torch.equal(v[k].affine, m[k].affine)
        assert torch.equal(v[k].as_tensor(), m[k].as_tensor().to(v[k].dtype))
        assert v[k].dtype == img.dtype if k == "img" else v[k].dtype == torch.int16
    assert torch.equal(v["lab"].as_tensor().float(), m["lab"].as_tensor().float())


@pytest.mark.parametrize("axcodes", ["RAS", "ILA", None])
def test_orientation_permuted_oblique_affine_and_lps_space(inia, axcodes):
    img, _ = inia
    x = img[:, :30, :40, :20]
    a = np.array([[0, 0, -0.5, 10], [0.5, 0, 0, -3], [0, -0.5, 0, 4], [0, 0, 0, 1]]) @ np.eye(4)
    x = _with_affine(x, _oblique(a, (5.0, 3.0, -8.0)))
    kw = dict(axcodes=axcodes) if axcodes else dict(as_closest_canonical=True)
    for meta in ({}, {"space": "LPS"}):
        xi = MetaTensor(x.as_tensor(), affine=x.affine, meta=meta)
        m = mt.Orientation(**kw)(xi)
        v = spatial.Orientation(**kw)(xi)
        # Data bit-exact; affines to the last bits of float64: MONAI's 4x4 float64 matmul rounds
        # differently on CPUs whose BLAS kernels use FMA (seen on an AMD EPYC machine).
        assert _affine_close(v.affine, m.affine) and torch.equal(v.as_tensor(), m.as_tensor())
    out, aff = spatial.Orientation(**kw)(x.as_tensor(), affine=x.affine)
    m = mt.Orientation(**kw)(x)
    assert _affine_close(aff, m.affine) and torch.equal(out, m.as_tensor())


def _affine_close(a, b):
    return a.shape == b.shape and (a.double() - b.double()).abs().max().item() <= 1e-12 * (1 + b.abs().max().item())


def test_orientation_bad_arguments(inia):
    img, _ = inia
    with pytest.raises(ValueError, match="axcodes"):
        spatial.Orientation()
    with pytest.raises(ValueError, match="axcodes"):
        spatial.Orientation("RAX")
    with pytest.raises(ValueError, match="axcodes"):
        spatial.Orientation("RRS")
    with pytest.raises(ValueError, match="axcodes"):
        spatial.Orientation(axcodes=3)
    with pytest.raises(ValueError, match="labels"):
        spatial.Orientation("RAS", labels=("LR", "PA"))
    with pytest.raises(ValueError, match="affine"):
        spatial.Orientation("RAS")(img.as_tensor(), affine=np.full((4, 4), np.nan))
