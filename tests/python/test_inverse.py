"""Invertibility of voxaug's spatial transforms (python/voxaug/spatial.py, Compose.inverse in
python/voxaug/transforms.py) against MONAI's own inverses, on real volumes.

Volumes (mricron-data): ch2.nii.gz (T1, uint8, used as float32) and aal.nii.gz (uint8 labels)
every 3rd voxel (61 x 73 x 61), as in test_spatial.py.

Each case runs forward then inverse with voxaug and with MONAI (same transform, same
parameters; voxaug's random draws are replayed as MONAI's fixed transforms) and compares:
- images: |voxaug - MONAI| <= IMG_TOL x the data range (two interpolations, each within float32
  grid rounding of MONAI's: observed <= 1.4e-5);
- labels (nearest): identical except half-voxel ties broken differently by the two float32
  pipelines, in either of the two lookups: at most LABEL_TIES of the voxels (observed <= 1.2e-5,
  i.e. 3 voxels; test_spatial.py allows 1e-5 for one lookup). Spacing uses pixdims whose
  ratios to the 3 mm grid put no voxel on a tie (2.7 / 3 = 0.9 would: o = 5 -> 4.5);
- the affine after the inverse equals the input's within 1e-10 (voxaug returns the recorded
  one); MONAI's comes back within its float32 rounding;
- exact transforms (flips, quarter turns, orientation, integer crops): bit-identical to MONAI's
  inverse, and the round trip is bit-exact (crops: zeros outside the ROI, as MONAI pads).
"""
import os

import numpy as np
import pytest
import torch

from voxaug import ops
from voxaug import spatial as S
from voxaug import transforms as vt

from conftest import TEMPLATES

mt = pytest.importorskip("monai.transforms")
nib = pytest.importorskip("nibabel")
from monai.data import MetaTensor  # noqa: E402
import spatial_checks as checks  # noqa: E402
from spatial_checks import assert_bitwise, plain  # noqa: E402
from monai.data.meta_obj import set_track_meta  # noqa: E402
from monai.utils import TraceKeys  # noqa: E402

IMG_TOL = 5e-5
LABEL_TIES = 2e-5  # two nearest lookups (forward + inverse), each within test_spatial's 1e-5
AFFINE_TOL = 1e-10
MONAI_AFFINE_TOL = 1e-4  # MONAI builds its matrices in float32

AFFINE_KW = dict(rotate_params=(0.3, -0.2, 0.1), shear_params=(0.05, 0.02, 0.0, 0.03, 0.01, 0.0),
                 translate_params=(3.5, -2.0, 1.25), scale_params=(1.1, 0.9, 1.2))
RAND_AFFINE_KW = dict(rotate_range=(0.4, (-0.2, 0.1), 0.3), shear_range=(0.1, 0.05), translate_range=(4, (-3, 1), 2),
                      scale_range=((-0.2, 0.2), 0.1, 0.15))
SPACING = (2.6, 3.4, 2.2)  # ratios 13/15, 17/15, 11/15 to the 3 mm grid: no half-voxel ties either way


def _load(name, step):
    path = os.path.join(TEMPLATES, name)
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    im = nib.load(path)
    data = np.asarray(im.dataobj)[::step, ::step, ::step]
    affine = im.affine @ np.diag([step, step, step, 1.0])
    return torch.from_numpy(np.ascontiguousarray(data))[None], torch.from_numpy(affine)


@pytest.fixture(scope="module")
def ch2aal():
    img, aff = _load("ch2.nii.gz", 3)
    lab, _ = _load("aal.nii.gz", 3)
    assert img.shape == lab.shape == (1, 61, 73, 61) and lab.dtype == torch.uint8
    return img.float(), lab, aff


def meta(x, aff):
    return MetaTensor(x.clone(), affine=aff.clone())


def first(out):
    return out[0] if isinstance(out, tuple) else out


def assert_image_close(ours, ref):
    checks.assert_image_close(ours, ref, IMG_TOL)


def assert_labels_match(ours, ref, ties=LABEL_TIES):
    checks.assert_labels_match(ours, ref, ties)


def assert_restored(out, aff):
    assert isinstance(out, MetaTensor) and out.applied_operations == []
    assert out.affine.shape == aff.shape
    assert (out.affine.double() - aff).abs().max().item() <= AFFINE_TOL


def both(ours, ref, x, aff):
    """(voxaug forward, voxaug inverse, MONAI inverse) of one MetaTensor."""
    fwd = first(ours(meta(x, aff)))
    rec = fwd.applied_operations[-1]
    assert len(fwd.applied_operations) == 1 and rec[TraceKeys.CLASS_NAME] == type(ours).__name__
    assert rec[TraceKeys.ID] == id(ours) and rec[TraceKeys.ORIG_SIZE] == tuple(x.shape[1:])
    inv = ours.inverse(fwd)
    ref_inv = ref.inverse(first(ref(meta(x, aff))))
    assert_restored(inv, aff)
    assert (ref_inv.affine.double() - aff).abs().max().item() <= MONAI_AFFINE_TOL * aff.abs().max().item()
    assert inv.shape == ref_inv.shape == x.shape
    return fwd, inv, ref_inv


# ---------------- (a) array forms vs MONAI's inverse ----------------
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("spatial_size", [None, (70, 80, 50)])
def test_affine_inverse_matches_monai(ch2aal, padding_mode, align_corners, spatial_size):
    img, lab, aff = ch2aal
    kw = dict(AFFINE_KW, padding_mode=padding_mode, align_corners=align_corners, spatial_size=spatial_size,
              image_only=True)
    _, inv, ref = both(vt.Affine(**kw), mt.Affine(**kw), img, aff)
    assert_image_close(inv, ref)
    _, inv, ref = both(vt.Affine(**kw, mode="nearest"), mt.Affine(**kw, mode="nearest"), lab, aff)
    assert inv.dtype == torch.uint8
    assert_labels_match(inv, ref)


def test_affine_tuple_output_inverts_the_image(ch2aal):
    img, _, aff = ch2aal
    t = vt.Affine(**AFFINE_KW)
    out, _ = t(meta(img, aff))
    assert_restored(t.inverse(out), aff)


@pytest.mark.parametrize("keep_size", [True, False])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_rotate_inverse_matches_monai(ch2aal, keep_size, align_corners, padding_mode):
    img, lab, aff = ch2aal
    kw = dict(angle=(0.2, -0.1, 0.4), keep_size=keep_size, align_corners=align_corners, padding_mode=padding_mode)
    _, inv, ref = both(vt.Rotate(**kw), mt.Rotate(**kw), img, aff)
    assert_image_close(inv, ref)
    _, inv, ref = both(vt.Rotate(**kw, mode="nearest"), mt.Rotate(**kw, mode="nearest"), lab, aff)
    assert_labels_match(inv, ref)


@pytest.mark.parametrize("zoom", [1.3, 0.7, (1.2, 0.8, 1.0), (0.55, 1.71, 2.0)])
@pytest.mark.parametrize("keep_size", [True, False])
def test_zoom_inverse_matches_monai(ch2aal, zoom, keep_size):
    """MONAI undoes keep_size's crop (zero padding) or padding (a crop), then resizes back;
    voxaug does the same, so nearest labels are bit-identical (interpolate's index rule)."""
    img, lab, aff = ch2aal
    for ac in (None, True):
        kw = dict(zoom=zoom, mode="trilinear", align_corners=ac, keep_size=keep_size)
        _, inv, ref = both(vt.Zoom(**kw), mt.Zoom(**kw), img, aff)
        assert_image_close(inv, ref)
    for mode in ("nearest", "nearest-exact"):
        kw = dict(zoom=zoom, mode=mode, keep_size=keep_size)
        _, inv, ref = both(vt.Zoom(**kw), mt.Zoom(**kw), lab, aff)
        assert inv.dtype == torch.uint8
        assert_bitwise(inv.float(), ref)


@pytest.mark.parametrize("size", [(70, 90, 61), (40, -1, 33), (13, 100, 7)])
def test_resize_inverse_matches_monai(ch2aal, size):
    img, lab, aff = ch2aal
    for ac in (None, True):
        _, inv, ref = both(vt.Resize(size, mode="trilinear", align_corners=ac),
                           mt.Resize(size, mode="trilinear", align_corners=ac), img, aff)
        assert_image_close(inv, ref)
    for mode in ("nearest", "nearest-exact"):
        _, inv, ref = both(vt.Resize(size, mode=mode), mt.Resize(size, mode=mode), lab, aff)
        assert_bitwise(inv.float(), ref)


def test_spacing_inverse_matches_monai(ch2aal):
    img, lab, aff = ch2aal
    _, inv, ref = both(vt.Spacing(SPACING), mt.Spacing(SPACING), img, aff)
    assert_image_close(inv, ref)
    _, inv, ref = both(vt.Spacing(SPACING, mode="nearest"), mt.Spacing(SPACING, mode="nearest"), lab, aff)
    assert_labels_match(inv, ref)


EXACT_CASES = [
    ("Flip", dict(spatial_axis=(0, 2))), ("Flip", dict(spatial_axis=None)),
    ("Rotate90", dict(k=1, spatial_axes=(0, 1))), ("Rotate90", dict(k=3, spatial_axes=(2, 1))),
    ("Orientation", dict(axcodes="LPI")), ("Orientation", dict(axcodes="SAR")),
    ("SpatialCrop", dict(roi_start=(3, 5, 2), roi_end=(50, 60, 40))),
    ("SpatialCrop", dict(roi_center=(30, 20, 50), roi_size=(21, 30, 40))),
    ("CenterSpatialCrop", dict(roi_size=(40, -1, 33))),
]


@pytest.mark.parametrize("name,kw", EXACT_CASES)
def test_exact_inverse_bitwise_like_monai_and_round_trip(ch2aal, name, kw):
    """(a) + (b): flips, quarter turns and orientation round-trip bit-exactly; a crop comes back
    as the ROI in place with zeros around it (MONAI's BorderPad); both equal MONAI's inverse."""
    img, lab, aff = ch2aal
    for x in (lab, img):
        fwd, inv, ref = both(getattr(vt, name)(**kw), getattr(mt, name)(**kw), x, aff)
        assert inv.dtype == x.dtype
        assert_bitwise(inv, ref)
        if "Crop" in name:
            box = (plain(ref) != 0) | (x == 0)
            assert torch.equal(plain(inv)[box], x[box]) and plain(inv).count_nonzero() < x.count_nonzero()
        else:
            assert torch.equal(plain(inv), x)


# ---------------- random transforms: one batched record, per-sample draws ----------------
def _batch(x, n):
    return torch.stack([x, x.flip(1), x.flip(3), x.flip(2)][:n])


def test_rand_affine_batch_inverse_matches_monai_per_sample(ch2aal):
    img, lab, aff = ch2aal
    x, y = _batch(img, 3), _batch(lab, 3)
    t = vt.RandAffine(prob=0.8, spatial_size=(64, 70, 58), seed=11, **RAND_AFFINE_KW)
    fwd = t(meta(x, aff))
    params = t.parameters(t._last)
    assert any(p is None for p in params) or len(set(map(str, params))) == 3
    rec = fwd.applied_operations[-1]
    assert len(fwd.applied_operations) == 1 and rec[TraceKeys.EXTRA_INFO]["maps"].shape == (3, 4, 4)
    assert rec[TraceKeys.EXTRA_INFO]["do_transforms_per_sample"] == [p is not None for p in params]
    inv = t.inverse(fwd)
    assert_restored(inv, aff)
    lab_t = vt.RandAffine(prob=0.8, spatial_size=(64, 70, 58), mode="nearest", **RAND_AFFINE_KW)
    lab_inv = lab_t.inverse(lab_t.apply(meta(y, aff), t._last))
    for i, p in enumerate(params):
        p = p or {}
        ref_t = mt.Affine(**p, spatial_size=(64, 70, 58), padding_mode="reflection", image_only=True)
        assert_image_close(inv[i], ref_t.inverse(ref_t(meta(x[i], aff))))
        ref_l = mt.Affine(**p, spatial_size=(64, 70, 58), mode="nearest", padding_mode="reflection", image_only=True)
        assert_labels_match(lab_inv[i], ref_l.inverse(ref_l(meta(y[i], aff))))


def test_rand_rotate_batch_inverse_matches_monai_per_sample(ch2aal):
    img, lab, aff = ch2aal
    x, y = _batch(img, 2), _batch(lab, 2)
    t = vt.RandRotated(["img", "lab"], range_x=0.3, range_y=(0.1, 0.2), range_z=0.2, prob=1.0,
                       mode=("bilinear", "nearest"), padding_mode="zeros", seed=2)
    fwd = t({"img": meta(x, aff), "lab": meta(y, aff)})
    inv = t.inverse(fwd)
    for key in ("img", "lab"):
        assert_restored(inv[key], aff)
    for i, ang in enumerate(t.transform.angles(t.transform._last)):
        ref = mt.Rotate(ang, padding_mode="zeros")
        assert_image_close(inv["img"][i], ref.inverse(ref(meta(x[i], aff))))
        ref = mt.Rotate(ang, mode="nearest", padding_mode="zeros")
        assert_labels_match(inv["lab"][i], ref.inverse(ref(meta(y[i], aff))))


def test_rand_flip_and_rand_rotate90_batch_round_trip_bitwise(ch2aal):
    img, lab, aff = ch2aal
    y = _batch(lab, 4)
    flip = vt.RandFlip(prob=0.5, spatial_axis=(0, 2), seed=3)
    fwd = flip(meta(y, aff))
    gates = fwd.applied_operations[-1][TraceKeys.EXTRA_INFO]["do_transforms_per_sample"]
    assert 0 < sum(gates) < 4
    inv = flip.inverse(fwd)
    assert_restored(inv, aff)
    assert torch.equal(plain(inv), y)
    for i, g in enumerate(gates):  # MONAI: Flip where the gate was on, nothing otherwise
        ref = mt.Flip((0, 2))
        assert_bitwise(inv[i], ref.inverse(ref(meta(y[i], aff))) if g else y[i])
    rot = vt.RandRotate90(prob=0.9, max_k=3, spatial_axes=(0, 2), seed=4)  # 61 x 61 plane
    fwd = rot(meta(y, aff))
    ks = rot._ks(rot._last)
    assert len(set(ks)) > 1
    inv = rot.inverse(fwd)
    assert_restored(inv, aff)
    assert torch.equal(plain(inv), y)
    for i, k in enumerate(ks):
        ref = mt.Rotate90(k, (0, 2))
        assert_bitwise(inv[i], ref.inverse(ref(meta(y[i], aff))))


@pytest.mark.parametrize("form", ["RandAffined", "RandFlipd", "RandAxisFlipd", "RandRotate90d"])
def test_rand_dict_batch_inverse_matches_monai_per_sample(ch2aal, form, resample_launches):
    """Random dictionary forms: one draw shared by image and label, one record per key for the
    whole batch, one inverse launch for both keys; per sample equal to MONAI's fixed transform's
    inverse with the drawn parameters."""
    img, lab, aff = ch2aal
    keys = ["img", "lab"]
    x, y = _batch(img, 3), _batch(lab, 3)
    if form == "RandAffined":
        t = vt.RandAffined(keys, spatial_size=(64, 70, 58), prob=0.9, mode=("bilinear", "nearest"),
                           padding_mode="zeros", seed=7, **RAND_AFFINE_KW)
    elif form == "RandFlipd":
        t = vt.RandFlipd(keys, prob=0.5, spatial_axis=(1, 2), seed=8)
    elif form == "RandAxisFlipd":
        t = vt.RandAxisFlipd(keys, prob=0.8, seed=8)
    else:
        t = vt.RandRotate90d(keys, prob=0.9, max_k=3, spatial_axes=(2, 0), seed=9)
    fwd = t({"img": meta(x, aff), "lab": meta(y, aff)})
    resample_launches[0] = 0
    inv = t.inverse(fwd)
    assert resample_launches[0] == 1
    for key in keys:
        assert fwd[key].applied_operations[-1][TraceKeys.EXTRA_INFO]["maps"].shape == (3, 4, 4)
        assert_restored(inv[key], aff)
    assert inv["lab"].dtype == torch.uint8
    rt, params = t.transform, t.transform._last
    for i in range(3):
        if form == "RandAffined":
            p = rt.parameters(params)[i] or {}
            kw = dict(p, spatial_size=(64, 70, 58), padding_mode="zeros")
            ref = mt.Affined(keys, **kw, mode=("bilinear", "nearest"))
        elif form == "RandFlipd":
            ref = mt.Flipd(keys, (1, 2)) if rt._gates(params)[i] else None
        elif form == "RandAxisFlipd":
            a = rt._axes(params)[i]
            ref = mt.Flipd(keys, a) if a is not None else None
        else:
            ref = mt.Rotate90d(keys, rt._ks(params)[i], (2, 0))
        sample = {"img": meta(x[i], aff), "lab": meta(y[i], aff)}
        ref_inv = ref.inverse(ref(sample)) if ref is not None else sample  # not flipped: nothing to undo
        if form == "RandAffined":
            assert_image_close(inv["img"][i], ref_inv["img"])
            assert_labels_match(inv["lab"][i], ref_inv["lab"])
        else:
            assert_bitwise(inv["img"][i], ref_inv["img"])
            assert_bitwise(inv["lab"][i], ref_inv["lab"])
            assert torch.equal(plain(inv["lab"]), y)


def test_rand_not_applied_is_identity_record(ch2aal):
    _, lab, aff = ch2aal
    t = vt.RandAffine(prob=0.0, rotate_range=0.5)
    fwd = t(meta(lab, aff))
    assert fwd.applied_operations[-1][TraceKeys.DO_TRANSFORM] is False
    inv = t.inverse(fwd)
    assert_restored(inv, aff)
    assert torch.equal(plain(inv), lab)


# ---------------- dictionary forms vs MONAI's dictionary inverse ----------------
DICT_CASES = [
    ("Affined", dict(AFFINE_KW, padding_mode="zeros", mode=("bilinear", "nearest")), "warp"),
    ("Rotated", dict(angle=(0.2, -0.1, 0.4), keep_size=False, padding_mode="zeros", mode=("bilinear", "nearest")),
     "warp"),
    ("Zoomd", dict(zoom=(1.2, 0.8, 1.0), mode=("trilinear", "nearest")), "resize"),
    ("Resized", dict(spatial_size=(70, 50, 61), mode=("trilinear", "nearest")), "resize"),
    ("Spacingd", dict(pixdim=SPACING, mode=("bilinear", "nearest")), "warp"),
    ("Orientationd", dict(axcodes="PLI"), "exact"),
    ("Flipd", dict(spatial_axis=1), "exact"),
    ("Rotate90d", dict(k=2, spatial_axes=(1, 2)), "exact"),
    ("SpatialCropd", dict(roi_start=(3, 5, 2), roi_end=(50, 60, 40)), "exact"),
    ("CenterSpatialCropd", dict(roi_size=(40, 50, 33)), "exact"),
]


@pytest.mark.parametrize("name,kw,kind", DICT_CASES)
def test_dict_inverse_matches_monai(ch2aal, name, kw, kind, resample_launches):
    img, lab, aff = ch2aal
    keys = ["img", "lab"]
    ours, ref = getattr(vt, name)(keys, **kw), getattr(mt, name)(keys, **kw)
    fwd = ours({"img": meta(img, aff), "lab": meta(lab, aff), "other": "kept"})
    for key in keys:
        rec = fwd[key].applied_operations[-1]
        assert rec[TraceKeys.CLASS_NAME] == name and rec[TraceKeys.ID] == id(ours)
    resample_launches[0] = 0
    inv = ours.inverse(fwd)
    # Image and label share one inverse launch where their maps agree (not Resize / Zoom:
    # interpolate's nearest has its own index rule).
    assert resample_launches[0] == (2 if kind == "resize" else 1)
    assert inv["other"] == "kept"
    ref_inv = ref.inverse(ref({"img": meta(img, aff), "lab": meta(lab, aff)}))
    for key in keys:
        assert_restored(inv[key], aff)
    assert inv["lab"].dtype == torch.uint8
    if kind == "exact":
        assert_bitwise(inv["img"], ref_inv["img"])
        assert_bitwise(inv["lab"], ref_inv["lab"])
        return
    assert_image_close(inv["img"], ref_inv["img"])
    if kind == "resize":
        assert_bitwise(inv["lab"].float(), ref_inv["lab"])
    else:
        assert_labels_match(inv["lab"], ref_inv["lab"])


def test_dict_missing_keys(ch2aal):
    img, _, aff = ch2aal
    t = vt.Flipd(["img", "nope"], spatial_axis=0, allow_missing_keys=True)
    inv = t.inverse(t({"img": meta(img, aff)}))
    assert set(inv) == {"img"} and torch.equal(plain(inv["img"]), img)


# ---------------- (c) Compose: a fused group is undone as one ----------------
def _exact_chain():
    return [vt.RandFlip(prob=0.5, spatial_axis=0, seed=1), vt.Rotate90(1, (1, 2)),
            vt.RandRotate90(prob=0.7, max_k=3, spatial_axes=(1, 2), seed=2), vt.Orientation("LPI"),
            vt.SpatialCrop(roi_start=[2, 3, 4], roi_end=[50, 60, 55]), vt.CenterSpatialCrop([40, -1, 33])]


def test_compose_exact_chain_fused_inverse_equals_step_by_step(ch2aal, resample_launches):
    img, lab, aff = ch2aal
    for x in (lab, img):
        resample_launches[0] = 0
        c = vt.Compose(_exact_chain())
        fused = c(meta(x, aff))
        assert resample_launches[0] == 1 and len(fused.applied_operations) == 1
        rec = fused.applied_operations[0]
        assert rec[TraceKeys.CLASS_NAME] == "Compose" and rec[TraceKeys.ID] == id(c)
        assert [m[TraceKeys.ID] for m in rec[TraceKeys.EXTRA_INFO]["transforms"]] == [id(t) for t in c.transforms]
        resample_launches[0] = 0
        inv = c.inverse(fused)
        assert resample_launches[0] == 1
        s = vt.Compose(_exact_chain(), fuse_spatial=False)
        steps = s(meta(x, aff))
        assert len(steps.applied_operations) == 6
        steps_inv = s.inverse(steps)
        assert_restored(inv, aff)
        assert_restored(steps_inv, aff)
        assert inv.dtype == x.dtype and torch.equal(plain(inv), plain(steps_inv))
        box = (plain(inv) != 0) | (x == 0)
        assert torch.equal(plain(inv)[box], x[box])


def _smooth(n, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    grids = torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in size], indexing="ij")
    out = []
    for _ in range(n):
        f = torch.rand(3, generator=g) * 0.25 + 0.1
        p = torch.rand(3, generator=g) * 6
        v = torch.sin(f[0] * grids[0] + p[0]) * torch.cos(f[1] * grids[1] + p[1])
        out.append((v + 0.5 * torch.sin(f[2] * grids[2] + p[2]))[None])
    return torch.stack(out)


def _warp_chain():
    return [vt.RandRotate(range_x=0.4, range_z=0.2, prob=1.0, seed=3), vt.Zoom(1.3, mode="trilinear"),
            vt.Affine(scale_params=(0.9, 1.1, 1.0), padding_mode="border", image_only=True),
            vt.CenterSpatialCrop([14, 14, 14])]


def test_compose_warp_chain_fused_inverse_is_one_gather_of_the_inverted_product(resample_launches):
    n, size = 3, (20, 22, 24)
    x = _smooth(n, size, seed=1)
    aff = torch.tensor([[0, 1.2, 0, 5], [-0.9, 0, 0, 1], [0, 0, 1.1, -4], [0, 0, 0, 1]], dtype=torch.float64)
    c = vt.Compose(_warp_chain())
    fused = c(meta(x, aff))
    resample_launches[0] = 0
    inv = c.inverse(fused)
    assert resample_launches[0] == 1 and inv.shape == x.shape
    assert_restored(inv, aff)
    # The product of the step maps, built independently, inverted, in one launch: bit-identical.
    rot, zoom, affine, crop = _warp_chain()
    params = rot.draw_params(n)
    g1 = rot._geometry(size, n, params, rot._options())
    g2 = zoom._geometry(g1.out_size, n, None, S._for_input(zoom._options(), x))
    g3 = affine._geometry(g2.out_size, n, None, affine._options())
    g4 = crop._geometry(g3.out_size, n, None, crop._options())
    total = S._square(g1.mats) @ S._square(g2.mats) @ S._square(g3.mats) @ S._square(g4.mats)
    inv_total = torch.linalg.inv(total)
    (ref,) = ops.resample([plain(fused)], inv_total[:, :3].contiguous(), size, ["linear"], ["border"])
    assert torch.equal(plain(inv), ref)
    # Step by step: six linear interpolations (three forward, three inverse; the crop is exact)
    # instead of two. Where the original voxel maps well inside the cropped output only
    # interpolation error differs: on this smooth field (|f''| / 8 ~ 0.025 per interpolation,
    # see test_lazy.py) at most 6 x 0.025; observed 0.089 max, 0.013 mean.
    s = vt.Compose(_warp_chain(), fuse_spatial=False)
    steps_inv = s.inverse(s(meta(x, aff)))
    assert_restored(steps_inv, aff)
    grid = torch.stack(torch.meshgrid(*[torch.arange(v, dtype=torch.float64) for v in size], indexing="ij"), -1)
    coords = torch.einsum("nij,dhwj->ndhwi", inv_total[:, :3, :3], grid) + inv_total[:, None, None, None, :3, 3]
    inside = ((coords >= 1) & (coords <= 14 - 2)).all(-1)[:, None]
    assert inside.float().mean() > 0.03
    err = (plain(inv) - plain(steps_inv)).abs()[inside]
    assert err.max().item() < 0.15 and err.mean().item() < 0.02, (err.max(), err.mean())


def test_compose_dict_fused_inverse_one_launch_for_image_and_label(ch2aal, resample_launches):
    img, lab, aff = ch2aal
    keys = ["img", "lab"]

    def make():
        return [vt.RandFlipd(keys, prob=0.5, spatial_axis=0, seed=21),
                vt.RandRotated(keys, range_x=0.3, range_y=0.2, prob=1.0, mode=["bilinear", "nearest"], seed=22),
                vt.Affined(keys, scale_params=[0.9, 1.1, 1.0], mode=["bilinear", "nearest"], padding_mode="border"),
                vt.CenterSpatialCropd(keys, [40, 40, 40])]

    c = vt.Compose(make())
    fused = c({"img": meta(img, aff), "lab": meta(lab, aff)})
    resample_launches[0] = 0
    inv = c.inverse(fused)
    assert resample_launches[0] == 1
    for key in keys:
        assert_restored(inv[key], aff)
    assert inv["lab"].dtype == torch.uint8
    s = vt.Compose(make(), fuse_spatial=False)
    steps = s({"img": meta(img, aff), "lab": meta(lab, aff)})
    resample_launches[0] = 0
    steps_inv = s.inverse(steps)
    assert resample_launches[0] == 4
    # One nearest lookup through the inverted product vs four: labels agree in the bulk.
    inside = plain(steps_inv["img"]) != 0
    agree = (plain(inv["lab"]) == plain(steps_inv["lab"]))[inside].float().mean()
    assert agree > 0.9


def test_compose_mixed_groups_and_skipped_intensity(ch2aal, resample_launches):
    """[Flip] alone records as Flip; Zoom keep_size < 1 runs as itself (pads); [Flip, crop] fuse;
    the intensity step is not invertible and is skipped. Nearest throughout: the inverse equals
    the step-by-step inverse bit for bit."""
    _, lab, aff = ch2aal

    def make():
        return [vt.Flip(0), vt.ShiftIntensity(0.0), vt.Zoom(0.8, mode="nearest"), vt.Flip(1),
                vt.CenterSpatialCrop([40, 50, 40])]

    c = vt.Compose(make())
    fused = c(meta(lab, aff))
    names = [r[TraceKeys.CLASS_NAME] for r in fused.applied_operations]
    assert names == ["Flip", "Zoom", "Compose"]
    assert fused.applied_operations[0][TraceKeys.ID] == id(c.transforms[0])
    inv = c.inverse(fused)
    s = vt.Compose(make(), fuse_spatial=False)
    steps_inv = s.inverse(s(meta(lab, aff)))
    assert_restored(inv, aff)
    assert torch.equal(plain(inv), plain(steps_inv))
    # A group of one step is that transform's own record: its inverse undoes it.
    single = vt.Compose([vt.Rotate90(1, (0, 2))])
    out = single(meta(lab, aff))
    assert torch.equal(plain(single.transforms[0].inverse(out)), lab)


# ---------------- (d) errors ----------------
def test_inverse_errors_name_what_was_expected(ch2aal):
    _, lab, aff = ch2aal
    flip, rot = vt.Flip(0), vt.Rotate90(1)
    with pytest.raises(ValueError, match=r"Flip\.inverse: img is a Tensor, not a MetaTensor.*record of Flip"):
        flip.inverse(flip(lab))
    with pytest.raises(ValueError, match=r"empty applied_operations.*expected a record of Flip"):
        flip.inverse(meta(lab, aff))
    with pytest.raises(RuntimeError, match=r"last applied operation of img is Rotate90 .*expected a record of Flip"):
        flip.inverse(rot(meta(lab, aff)))
    with pytest.raises(RuntimeError, match="expected a record of Flip"):  # another Flip instance
        vt.Flip(0).inverse(flip(meta(lab, aff)))
    with pytest.raises(RuntimeError, match=r"is Rotate90 .*reverse order"):  # out of order
        flip.inverse(rot(flip(meta(lab, aff))))
    with pytest.raises(RuntimeError, match=r"is Flip .*expected a record of Flip \(id"):  # MONAI's record
        flip.inverse(mt.Flip(0)(meta(lab, aff)))
    c = vt.Compose([vt.Flip(0), vt.Rotate90(1)])
    with pytest.raises(RuntimeError, match=r"Compose .*fusing \[Flip, Rotate90\].*expected a record of Rotate90"):
        c.transforms[1].inverse(c(meta(lab, aff)))
    d = vt.Flipd(["a", "b"], 0)
    out = d({"a": meta(lab, aff), "b": meta(lab, aff)})
    out["b"] = meta(lab, aff)
    with pytest.raises(ValueError, match=r"data\['b'\] has empty applied_operations.*record of Flipd"):
        d.inverse(out)
    out = flip(meta(lab, aff))
    with pytest.raises(ValueError, match="spatial size"):
        flip.inverse(MetaTensor(plain(out)[:, 1:], affine=aff, applied_operations=out.applied_operations))
    with pytest.raises(ValueError, match="no .*record|empty applied_operations"):
        vt.Compose([vt.Flip(0)]).inverse(meta(lab, aff))


# ---------------- record format ----------------
def test_singular_map_has_no_inverse():
    """A forward that collapsed an axis (a singular affine) runs, as MONAI's; its inverse is a
    clear error naming the transform, not linalg's."""
    from monai.data import MetaTensor

    x = MetaTensor(torch.rand(1, 8, 9, 10))
    t = S.Affine(affine=torch.diag(torch.tensor([1.0, 0.0, 1.0, 1.0])), image_only=True)
    y = t(x)
    assert y.shape == x.shape
    with pytest.raises(ValueError, match=r"Affine\.inverse: the index map of sample\(s\) \[0\] is singular"):
        t.inverse(y)


def test_record_format_and_track_meta(ch2aal):
    _, lab, aff = ch2aal
    t = vt.RandAffine(prob=0.5, rotate_range=0.3, spatial_size=(50, 60, 40), mode="nearest", seed=5)
    x = meta(torch.stack([lab] * 4), aff)
    out = t(x)
    assert x.applied_operations == []  # the input is untouched
    (rec,) = out.applied_operations
    assert set(rec) >= {TraceKeys.CLASS_NAME, TraceKeys.ID, TraceKeys.ORIG_SIZE, TraceKeys.EXTRA_INFO,
                        TraceKeys.DO_TRANSFORM}
    info = rec[TraceKeys.EXTRA_INFO]
    assert info["format"] == S.RECORD_FORMAT and info["kind"] == "map" and info["batch_size"] == 4
    assert info["maps"].shape == info["meta"].shape == (4, 4, 4) and info["maps"].dtype == torch.float64
    assert info["out_size"] == (50, 60, 40) and rec[TraceKeys.ORIG_SIZE] == (61, 73, 61)
    assert info["mode"] == "nearest" and info["padding_mode"] == "reflection" and info["align_corners"] is False
    assert torch.equal(info["affine"], aff)
    inv = t.inverse(out)
    assert_restored(inv, aff)
    assert inv.affine.shape == (4, 4)  # per-sample affines came back to the one shared affine
    set_track_meta(False)
    try:
        assert not isinstance(t(meta(lab, aff)), MetaTensor) or t(meta(lab, aff)).applied_operations == []
    finally:
        set_track_meta(True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU twin is what CI proves")
def test_cuda_inverse_equals_cpu(ch2aal):
    img, lab, aff = ch2aal
    keys = ["img", "lab"]
    make = lambda: vt.Compose([vt.RandAffined(keys, prob=1.0, mode=("bilinear", "nearest"), seed=5,  # noqa: E731
                                              **RAND_AFFINE_KW), vt.Flipd(keys, 1), vt.CenterSpatialCropd(keys, 40)])
    out = {}
    for dev in ("cpu", "cuda"):
        c = make()
        data = {"img": meta(img, aff).to(dev), "lab": meta(lab, aff).to(dev)}
        out[dev] = c.inverse(c(data))
        assert_restored(out[dev]["img"], aff)
    torch.testing.assert_close(plain(out["cuda"]["img"]).cpu(), plain(out["cpu"]["img"]), atol=1e-4, rtol=1e-5)
    assert (plain(out["cuda"]["lab"]).cpu() != plain(out["cpu"]["lab"])).float().mean() < LABEL_TIES
