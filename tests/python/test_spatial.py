"""voxaug spatial transforms (python/voxaug/spatial.py) vs MONAI on real volumes.

Volumes (mricron-data): inia19-t1-brain.nii.gz (float32) + inia19-NeuroMaps.nii.gz (int16
labels) taken every 2nd voxel (84 x 103 x 64), ch2.nii.gz + aal.nii.gz (uint8) every 3rd
voxel (61 x 73 x 61): odd, even and anisotropic sizes, and small enough for 2 CI cores.

Tolerances:
- Images: |voxaug - MONAI| <= 5e-5 x the data range. MONAI builds its sampling grid in
  float32 (coordinates up to ~100 voxels from the centre carry ~6e-6 voxel of rounding, and
  RandAffine samples in float64, the others in float32); voxaug computes each coordinate in
  float32 from a float64 matrix. A coordinate difference of d voxels changes a trilinear value
  by at most d x the largest step between neighbours (<= the data range), plus float32
  accumulation: ~1e-5 of the range at most (observed <= 1.2e-5).
- Labels (nearest): identical except where a coordinate is within float rounding of a
  half-voxel tie and the two float32 pipelines round it to different sides: at most
  LABEL_TIES = 1e-5 of the voxels (observed <= 4e-6). Rotations by exact multiples of 90
  degrees between axes of different parity put whole planes on ties (see
  test_rotate_quarter_turn_ties); use Rotate90 there.
- Flip, Rotate90, and Resize / Zoom nearest: bit-identical (voxaug reproduces
  interpolate's floor rule, see spatial._nearest_rule).
- Resize / Zoom 'area' (MONAI's default mode): bit-identical (both run torch's
  adaptive_avg_pool3d in MONAI's dtype on the same values).
- Resize anti_aliasing: |voxaug - MONAI| <= AA_TOL = 1e-5 x the data range. The Gaussian taps
  are the same erf values; voxaug's separable filter and MONAI's conv1d passes sum them in
  float32 in different orders: a few ulp of the values (observed <= 1e-6 of the range).
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from voxaug import ops
from voxaug import spatial
from voxaug import transforms as vt

from conftest import TEMPLATES

mt = pytest.importorskip("monai.transforms")
nib = pytest.importorskip("nibabel")
from monai.data import MetaTensor  # noqa: E402
import spatial_checks as checks  # noqa: E402
from spatial_checks import assert_bitwise, plain  # noqa: E402

IMG_TOL = 5e-5
LABEL_TIES = 1e-5
AA_TOL = 1e-5


def _load(name, step):
    path = os.path.join(TEMPLATES, name)
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    im = nib.load(path)
    data = np.asarray(im.dataobj)[::step, ::step, ::step]
    affine = im.affine @ np.diag([step, step, step, 1.0])
    return torch.from_numpy(np.ascontiguousarray(data))[None], torch.from_numpy(affine)


@pytest.fixture(scope="module")
def inia():
    img, aff = _load("inia19-t1-brain.nii.gz", 2)
    lab, _ = _load("inia19-NeuroMaps.nii.gz", 2)
    assert img.dtype == torch.float32 and lab.dtype == torch.int16 and img.shape == (1, 84, 103, 64)
    return img, lab, aff


@pytest.fixture(scope="module")
def ch2aal():
    img, aff = _load("ch2.nii.gz", 3)
    lab, _ = _load("aal.nii.gz", 3)
    assert img.dtype == torch.uint8 and lab.dtype == torch.uint8 and img.shape == (1, 61, 73, 61)
    return img, lab, aff


def assert_image_close(ours, ref):
    checks.assert_image_close(ours, ref, IMG_TOL)


def assert_labels_match(ours, ref, ties=LABEL_TIES):
    checks.assert_labels_match(ours, ref, ties)


# ---------------- Flip / Rotate90: bit-identical ----------------
@pytest.mark.parametrize("spatial_axis", [None, 0, 1, 2, -1, (0, 2), [2, 1, 0]])
def test_flip_bitwise_like_monai(inia, ch2aal, spatial_axis):
    for x in (inia[0], inia[1], ch2aal[1]):
        out = vt.Flip(spatial_axis)(x)
        assert out.dtype == x.dtype
        assert_bitwise(out, mt.Flip(spatial_axis)(x))


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 5])
@pytest.mark.parametrize("axes", [(0, 1), (1, 2), (2, 0), (0, -1)])
def test_rotate90_bitwise_like_monai(inia, k, axes):
    lab = inia[1]
    out = vt.Rotate90(k, axes)(lab)
    assert out.dtype == torch.int16
    assert_bitwise(out, mt.Rotate90(k, axes)(lab))
    assert_bitwise(out, torch.rot90(lab, k, [a % 3 + 1 for a in axes]))


def test_rand_flip_and_rand_rotate90_per_sample(inia):
    x = torch.stack([inia[1][:, i:i + 60, 10 + i:70 + i, :50] for i in range(5)])  # (5, 1, 60, 60, 50)
    flip = vt.RandFlip(prob=0.5, spatial_axis=(0, 2), seed=3)
    params = flip.draw_params(5)
    out = flip.apply(x, params)
    gates = params[:, 0] < 0.5
    assert 0 < gates.sum() < 5
    for i in range(5):
        assert torch.equal(out[i], torch.flip(x[i], [1, 3]) if gates[i] else x[i])
    rot = vt.RandRotate90(prob=0.8, max_k=3, spatial_axes=(0, 1), seed=4)
    params = rot.draw_params(5)
    out = rot.apply(x, params)
    ks = rot._ks(params)
    assert len(set(ks)) > 1
    for i in range(5):
        assert torch.equal(out[i], torch.rot90(x[i], ks[i], [1, 2]))


def test_rand_rotate90_k_distribution():
    t = vt.RandRotate90(prob=1.0, max_k=3, seed=1)
    ks = np.array(t._ks(t.draw_params(3000)))
    counts = np.bincount(ks, minlength=4)
    assert counts[0] == 0 and all(abs(c / 3000 - 1 / 3) < 0.04 for c in counts[1:])


def test_rand_axis_flip_per_sample_like_monai_flip(inia):
    """RandAxisFlip: each sample flips the axis it drew (or nothing), bit-identical to MONAI's
    Flip of that axis (what MONAI's RandAxisFlip applies after its draw) and to torch.flip; the
    dictionary form flips every key of a sample along the same axis."""
    lab = inia[1]
    x = torch.stack([lab[:, i:i + 60, 10 + i:70 + i, :50] for i in range(8)])  # (8, 1, 60, 60, 50) int16
    t = vt.RandAxisFlip(prob=0.8, seed=5)
    params = t.draw_params(8)
    out = t.apply(x, params)
    axes = t._axes(params)
    assert out.dtype == x.dtype and len({a for a in axes if a is not None}) > 1
    for i, a in enumerate(axes):
        if a is None:
            assert torch.equal(out[i], x[i])
        else:
            assert_bitwise(out[i], mt.Flip(spatial_axis=a)(x[i]))
            assert torch.equal(out[i], torch.flip(x[i], [a + 1]))
    img = x.float() * 0.5 - 3.0
    d = vt.RandAxisFlipd(["img", "lab"], prob=0.8, seed=5)({"img": img, "lab": x})
    for i, a in enumerate(axes):  # the same seed: the same draw, both keys the same axis
        dims = [] if a is None else [a + 1]
        assert torch.equal(d["img"][i], torch.flip(img[i], dims)) and torch.equal(d["lab"][i], torch.flip(x[i], dims))


def test_rand_axis_flip_draw_distribution():
    """Gate with probability prob, then each of the three axes with probability 1/3 (MONAI's
    R.randint(3)): 6000 draws within 4 standard deviations."""
    t = vt.RandAxisFlip(prob=0.6, seed=2)
    axes = t._axes(t.draw_params(6000))
    gated = [a for a in axes if a is not None]
    assert abs(len(gated) / 6000 - 0.6) < 4 * (0.6 * 0.4 / 6000) ** 0.5
    counts = np.bincount(gated, minlength=3)
    assert len(counts) == 3
    for c in counts:
        assert abs(c / len(gated) - 1 / 3) < 4 * (2 / 9 / len(gated)) ** 0.5, counts


def test_torchio_random_flip_per_sample_like_torchio_flip(inia):
    """TorchIO RandomFlip: each sample flips the axes it drew, bit-identical to TorchIO's Flip of
    those axes; dictionaries (Subjects) share the draw across their images."""
    tio = pytest.importorskip("torchio")
    lab = inia[1]
    x = torch.stack([lab[:, i:i + 40, 10 + i:50 + i, :30] for i in range(8)])  # (8, 1, 40, 40, 30) int16
    t = vt.RandomFlip(axes=(0, 2), flip_probability=0.5, p=0.9, seed=11)
    params = t.draw_params(8)
    out = t.apply(x, params)
    flips = t._flipped_axes(params)
    assert len(set(flips)) > 2 and all(1 not in f for f in flips)
    for i, f in enumerate(flips):
        ref = tio.Flip(axes=f)(x[i]) if f else x[i]
        assert out.dtype == x.dtype and torch.equal(out[i], torch.as_tensor(ref)), (i, f)
    img = x.float() / 3
    d = vt.RandomFlip(axes=(0, 2), flip_probability=0.5, p=0.9, seed=11)({"t1": img, "seg": x, "id": 7})
    for i, f in enumerate(flips):
        dims = [a + 1 for a in f]
        assert torch.equal(d["t1"][i], torch.flip(img[i], dims)) and torch.equal(d["seg"][i], torch.flip(x[i], dims))
    assert d["id"] == 7


def test_torchio_random_flip_draw_distribution():
    t = vt.RandomFlip(axes=(0, 1, 2), flip_probability=0.3, p=0.8, seed=2)
    params = t.draw_params(6000)
    flips = t._flipped_axes(params)
    gated = np.asarray(t._gates(params))
    assert abs(gated.mean() - 0.8) < 4 * (0.8 * 0.2 / 6000) ** 0.5
    for a in range(3):
        share = np.mean([a in f for f, g in zip(flips, gated) if g])
        assert abs(share - 0.3) < 4 * (0.3 * 0.7 / gated.sum()) ** 0.5, (a, share)


def test_torchio_random_flip_anatomical_names_follow_the_affine():
    """'IS' / 'Left' name the axes through the MetaTensor's affine, as TorchIO's
    axis_name_to_index through the image's: an image whose first array axis runs inferior ->
    superior flips that axis for 'IS'; TorchIO's result on the same image and affine is the same."""
    tio = pytest.importorskip("torchio")
    from monai.data import MetaTensor

    x = torch.arange(2 * 5 * 6 * 7, dtype=torch.float32).reshape(2, 5, 6, 7)
    aff = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]],
                       dtype=torch.float64)  # array axes: S, A, R
    for names, axis in ((("IS",), 0), (("Left",), 2), (("ap",), 1)):
        out = vt.RandomFlip(axes=names, flip_probability=1.0)(MetaTensor(x.clone(), affine=aff.clone()))
        assert torch.equal(out.as_tensor(), torch.flip(x, [axis + 1])), names
        ref = tio.RandomFlip(axes=names, flip_probability=1.0)(tio.ScalarImage(tensor=x.clone(), affine=aff.numpy()))
        assert torch.equal(out.as_tensor(), ref.data), names
    with pytest.raises(ValueError, match="need the image's orientation"):
        vt.RandomFlip(axes="LR", flip_probability=1.0)(x)
    # inside a Compose the named flip runs as itself (resolved on its input), equal to the call
    c = vt.Compose([vt.Flip(0), vt.RandomFlip(axes=("Left",), flip_probability=1.0)])
    got = c(MetaTensor(x.clone(), affine=aff.clone()))
    assert torch.equal(got.as_tensor(), torch.flip(x, [1, 3]))


def test_torchio_random_flip_fuses_and_refuses_bad_arguments(resample_launches):
    x = torch.randn(4, 1, 6, 7, 8)

    def chain():
        return [vt.RandomFlip(axes=(0, 1, 2), flip_probability=0.5, seed=3), vt.Rotate90(1, (1, 2)),
                vt.CenterSpatialCrop((5, 6, 6))]

    resample_launches[0] = 0
    fused = vt.Compose(chain())(x)
    assert resample_launches[0] == 1
    ref = x
    for t in chain():
        ref = t(ref)
    assert torch.equal(fused, ref)
    for bad, match in [(dict(axes=3), "axes must be 0, 1, 2"), (dict(axes="Height"), "not an anatomical axis name"),
                       (dict(axes=()), "at least one axis"), (dict(flip_probability=1.5), "flip_probability"),
                       (dict(p=-0.1), "prob")]:
        with pytest.raises(ValueError, match=match):
            vt.RandomFlip(**bad)


# ---------------- Affine / RandAffine ----------------
AFFINE_KW = dict(rotate_params=(0.3, -0.2, 0.1), shear_params=(0.05, 0.02, 0.0, 0.03, 0.01, 0.0),
                 translate_params=(3.5, -2.0, 1.25), scale_params=(1.1, 0.9, 1.2))


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("spatial_size", [None, (70, 90, 61)])
def test_affine_matches_monai(inia, padding_mode, align_corners, spatial_size):
    img, lab, _ = inia
    kw = dict(AFFINE_KW, padding_mode=padding_mode, align_corners=align_corners, spatial_size=spatial_size)
    ours, our_affine = vt.Affine(**kw)(img)
    ref, ref_affine = mt.Affine(**kw)(img)
    assert_image_close(ours, ref)
    # MONAI builds the matrix in float32 (create_rotate's torch backend).
    np.testing.assert_allclose(our_affine.numpy(), ref_affine, atol=2e-6 * np.abs(ref_affine).max())
    ours = vt.Affine(**kw, mode="nearest", image_only=True)(lab)
    assert ours.dtype == torch.int16
    assert_labels_match(ours, mt.Affine(**kw, mode="nearest", image_only=True)(lab))


@pytest.mark.parametrize("kw", [
    dict(rotate_params=0.4), dict(rotate_params=(0.1, -0.3)), dict(rotate_params=(0.1, 0.2, 0.3), rotate_order="zyx"),
    dict(rotate_params=(0.1, 0.2, 0.3), rotate_order="ZXY"), dict(shear_params=0.2), dict(scale_params=1.5),
    dict(translate_params=(1.0, 2.0)), dict(rotate_params=0.0, scale_params=()), AFFINE_KW,
    dict(affine=np.array([[0.9, 0.1, 0, 2], [0, 1.1, 0.05, -1], [0.02, 0, 1, 0.5], [0, 0, 0, 1]])),
])
def test_affine_matrix_construction_matches_monai(kw):
    """Scalars, short tuples and rotate orders follow MONAI (a scalar scale only scales the
    first axis, a scalar rotation only rotates about the first axis, ...)."""
    size = (9, 12, 7)
    _, ours = vt.Affine(**kw, spatial_size=size)(torch.zeros(1, 6, 8, 10))
    _, ref = mt.Affine(**kw, spatial_size=size)(torch.zeros(1, 6, 8, 10))
    np.testing.assert_allclose(ours.numpy(), ref, atol=1e-5)
    centred = spatial._centred_affine(kw.get("rotate_params"), kw.get("shear_params"), kw.get("translate_params"),
                                      kw.get("scale_params"), kw.get("rotate_order", "XYZ"))
    if "affine" not in kw:
        grid = mt.AffineGrid(**{k: v for k, v in kw.items()}, lazy=True)
        np.testing.assert_allclose(centred, grid(size)[1].numpy(), atol=1e-6)


def test_affine_size_one_axes_like_monai():
    """MONAI normalises with 2 / max(2, size): a size-1 input axis samples at half the offset."""
    x = torch.rand(1, 1, 6, 7, generator=torch.Generator().manual_seed(0)) + 1  # (C, D=1, H, W)
    for ac in (False, True):
        kw = dict(translate_params=(0.6, 1.5, -0.5), padding_mode="zeros", align_corners=ac, image_only=True)
        assert_image_close(vt.Affine(**kw)(x), mt.Affine(**kw)(x))


RAND_AFFINE_KW = dict(rotate_range=(0.4, (-0.2, 0.1), 0.3), shear_range=(0.1, 0.05), translate_range=(4, (-3, 1), 2),
                      scale_range=((-0.2, 0.2), 0.1, 0.15))


def test_rand_affined_per_sample_matches_monai_affine(inia):
    """A batch of 3 with different random matrices: image (bilinear) and label (nearest) in one
    call; each sample equals MONAI's Affine with that sample's drawn parameters."""
    img, lab, _ = inia
    imgs = torch.stack([img, img.flip(1), img.flip(3)])
    labs = torch.stack([lab, lab.flip(1), lab.flip(3)])
    t = vt.RandAffined(["img", "lab"], spatial_size=(80, 96, 60), prob=0.9, mode=("bilinear", "nearest"),
                       padding_mode=("reflection", "zeros"), seed=11, **RAND_AFFINE_KW)
    out = t({"img": imgs, "lab": labs})
    assert out["lab"].dtype == torch.int16 and out["img"].shape == (3, 1, 80, 96, 60)
    per_sample = t.transform.parameters(t.transform._last)
    assert all(p is not None for p in per_sample) and per_sample[0] != per_sample[1]
    for i, p in enumerate(per_sample):
        ref_img = mt.Affine(**p, spatial_size=(80, 96, 60), padding_mode="reflection", image_only=True)(imgs[i])
        ref_lab = mt.Affine(**p, spatial_size=(80, 96, 60), mode="nearest", padding_mode="zeros",
                            image_only=True)(labs[i])
        assert_image_close(out["img"][i], ref_img)
        assert_labels_match(out["lab"][i], ref_lab)


def test_rand_affine_parameter_ranges_and_gate():
    t = vt.RandAffine(prob=0.3, seed=5, **RAND_AFFINE_KW)
    params = t.draw_params(4000)
    per_sample = t.parameters(params)
    chosen = [p for p in per_sample if p is not None]
    assert abs(len(chosen) / 4000 - 0.3) < 0.03
    arr = {k: np.array([p[k] for p in chosen]) for k in chosen[0]}
    bounds = {"rotate_params": [(-0.4, 0.4), (-0.2, 0.1), (-0.3, 0.3)], "shear_params": [(-0.1, 0.1), (-0.05, 0.05)],
              "translate_params": [(-4, 4), (-3, 1), (-2, 2)], "scale_params": [(0.8, 1.2), (0.9, 1.1), (0.85, 1.15)]}
    for k, bs in bounds.items():
        assert arr[k].shape[1] == len(bs)
        for j, (lo, hi) in enumerate(bs):
            v = arr[k][:, j]
            assert lo <= v.min() and v.max() < hi and abs(v.mean() - (lo + hi) / 2) < 0.05 * (hi - lo)
    # A sample that is not selected is resampled with the identity: exact.
    x = torch.randn(2, 2, 7, 8, 9)
    none = vt.RandAffine(prob=0.0, rotate_range=1.0)(x)
    assert torch.equal(none, x)


@pytest.mark.parametrize("make", [
    lambda: vt.RandAffine(prob=0.7, spatial_size=(20, 22, 18), **RAND_AFFINE_KW),
    lambda: vt.RandRotate(0.3, 0.2, (-0.1, 0.4), prob=0.7),
    lambda: vt.RandFlip(prob=0.5),
    lambda: vt.RandRotate90(prob=0.7, spatial_axes=(1, 2)),
])
def test_batch_equals_per_sample_calls(make):
    """Sample i draws from (seed, first_sample + i): its result does not depend on the batch."""
    x = torch.randn(5, 2, 17, 19, 19, generator=torch.Generator().manual_seed(0))
    t = make()
    full = t.draw_params(5, seed=1234)
    out = t.apply(x, full)
    for i in range(5):
        single = t.draw_params(1, first_sample=i, seed=1234)
        assert torch.equal(single[0], full[i])
        assert torch.equal(t.apply(x[i:i + 1], single), out[i:i + 1])
        assert torch.equal(t.apply(x[i], single), out[i])  # unbatched (C, D, H, W)
    assert not torch.equal(full[0], full[1])
    # Same seed, same result; the default seed follows torch's global generator.
    a, b = make(), make()
    a.set_random_state(7)
    b.set_random_state(7)
    first = a(x)
    assert torch.equal(first, b(x))
    torch.manual_seed(0)
    c = make()(x)
    torch.manual_seed(0)
    assert torch.equal(make()(x), c)
    # randomize=False replays the last draw.
    assert torch.equal(a(x, randomize=False), first)


# ---------------- Rotate / RandRotate ----------------
@pytest.mark.parametrize("angle", [0.3, (0.2, -0.1, 0.4)])
@pytest.mark.parametrize("keep_size", [True, False])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_rotate_matches_monai(inia, angle, keep_size, padding_mode, align_corners):
    img, lab, _ = inia
    kw = dict(angle=angle, keep_size=keep_size, padding_mode=padding_mode, align_corners=align_corners)
    assert_image_close(vt.Rotate(**kw)(img), mt.Rotate(**kw)(img))
    ours = vt.Rotate(**kw, mode="nearest")(lab)
    assert ours.dtype == torch.int16
    assert_labels_match(ours, mt.Rotate(**kw, mode="nearest")(lab))


def test_rotate_quarter_turn_ties(inia):
    """(0, 0, pi/2) on 84 x 103 voxels with keep_size: every coordinate along D is o - 9.5, a
    half-voxel tie, and MONAI's float32 grid breaks those ties its own way. Without ties
    (keep_size=False, the output is 103 x 84) the labels are identical."""
    lab = inia[1]
    kw = dict(angle=(0.0, 0.0, np.pi / 2), mode="nearest")
    assert_bitwise(vt.Rotate(**kw, keep_size=False)(lab), mt.Rotate(**kw, keep_size=False)(lab))
    ours, ref = vt.Rotate(**kw)(lab), mt.Rotate(**kw)(lab)
    frac = (ours.float() != ref.as_tensor()).float().mean().item()
    assert 0 < frac < 0.1


def test_rand_rotate_per_sample_matches_monai_rotate(ch2aal):
    img, lab, _ = ch2aal
    x, y = torch.stack([img, img.flip(2)]), torch.stack([lab, lab.flip(2)])
    t = vt.RandRotated(["img", "lab"], range_x=0.3, range_y=(0.1, 0.2), range_z=0.2, prob=1.0,
                       mode=("bilinear", "nearest"), padding_mode="zeros", seed=2)
    out = t({"img": x, "lab": y})
    assert out["img"].dtype == torch.float32 and out["lab"].dtype == torch.uint8  # uint8 image computed in float32
    angles = t.transform.angles(t.transform._last)
    assert angles[0] != angles[1]
    for i, ang in enumerate(angles):
        assert -0.3 <= ang[0] <= 0.3 and 0.1 <= ang[1] <= 0.2 and -0.2 <= ang[2] <= 0.2
        assert_image_close(out["img"][i], mt.Rotate(ang, padding_mode="zeros")(x[i]))
        assert_labels_match(out["lab"][i], mt.Rotate(ang, mode="nearest", padding_mode="zeros")(y[i]))


# ---------------- Zoom / Resize ----------------
@pytest.mark.parametrize("zoom", [1.3, 0.7, (1.2, 0.8, 1.0), (0.55, 1.71, 2.0)])
@pytest.mark.parametrize("keep_size", [True, False])
def test_zoom_matches_monai(inia, zoom, keep_size):
    img, lab, _ = inia
    for mode, ac in [("trilinear", None), ("trilinear", True), ("bilinear", None)]:
        kw = dict(zoom=zoom, mode=mode, align_corners=ac, keep_size=keep_size)
        assert_image_close(vt.Zoom(**kw)(img), mt.Zoom(**kw)(img))
    for mode in ["nearest", "nearest-exact"]:
        ours = vt.Zoom(zoom, mode=mode, keep_size=keep_size)(lab)
        assert ours.dtype == torch.int16
        assert_bitwise(ours.float(), mt.Zoom(zoom, mode=mode, keep_size=keep_size)(lab))
    # keep_size pads after interpolating where the zoom shrinks an axis (MONAI's ResizeWithPadOrCrop).
    for pad in (["constant", "reflect", "symmetric", "wrap", "replicate"] if keep_size else []):
        assert_bitwise(vt.Zoom(zoom, mode="nearest", padding_mode=pad)(lab).float(),
                       mt.Zoom(zoom, mode="nearest", padding_mode=pad)(lab))


@pytest.mark.parametrize("size", [(70, 90, 61), (100, 120, 80), (84, -1, 33), (13, 200, 7)])
def test_resize_matches_monai(inia, size):
    img, lab, _ = inia
    for ac in (None, True):
        assert_image_close(vt.Resize(size, mode="trilinear", align_corners=ac)(img),
                           mt.Resize(size, mode="trilinear", align_corners=ac)(img))
    for mode in ("nearest", "nearest-exact"):
        ours = vt.Resize(size, mode=mode)(lab)
        assert ours.dtype == torch.int16
        assert_bitwise(ours.float(), mt.Resize(size, mode=mode)(lab))


def test_resize_nearest_follows_monai_dtype(inia):
    """interpolate computes o * scale in the data's precision: 84 -> 100 voxels picks source 62
    for output 75 in float32 and 63 in float64. MONAI interpolates in `dtype` (float32 by
    default; None: the image's), and so does voxaug's index rule."""
    lab = inia[1].double()
    f32, f64 = (vt.Resize((100, 103, 64), mode="nearest", dtype=d)(lab) for d in (torch.float32, None))
    assert not torch.equal(f32, f64)
    assert_bitwise(f32, mt.Resize((100, 103, 64), mode="nearest")(lab))
    assert_bitwise(f64, mt.Resize((100, 103, 64), mode="nearest", dtype=None)(lab))


def test_resize_longest_and_same_size(ch2aal):
    img, lab, _ = ch2aal
    assert_bitwise(vt.Resize(90, size_mode="longest", mode="nearest")(lab),
                   mt.Resize(90, size_mode="longest", mode="nearest")(lab).to(torch.uint8))
    assert_image_close(vt.Resize(50, size_mode="longest", mode="trilinear")(img),
                       mt.Resize(50, size_mode="longest", mode="trilinear")(img))
    assert torch.equal(vt.Resize((-1, -1, -1), mode="nearest")(lab), lab)


def test_resize_nearest_where_no_affine_map_exists():
    """torch's float32 `o * scale` makes a few index tables (here 6 -> 246 nearest and
    18 -> 111 nearest-exact) that no affine map rounds to; voxaug gathers with the table."""
    lab = torch.randint(0, 200, (1, 6, 5, 18), dtype=torch.int16, generator=torch.Generator().manual_seed(1))
    for mode, size in (("nearest", (246, 7, 20)), ("nearest-exact", (12, 7, 111))):
        t = vt.Resize(size, mode=mode)
        geom = t._geometry((6, 5, 18), 1, None, t._options())
        assert geom.tables is not None
        assert_bitwise(t(lab).float(), mt.Resize(size, mode=mode)(lab))


def test_nearest_rule_reproduces_interpolate():
    """Resize nearest through the kernel equals interpolate's index table for many size pairs
    and both data dtypes MONAI may interpolate in."""
    pairs = [(s, z) for s in (1, 2, 7, 31, 64, 97) for z in (1, 2, 5, 33, 64, 100, 129, 2 * s, 3 * s)]
    for dtype in (torch.float32, torch.float64):
        for s, z in pairs:
            x = torch.arange(s, dtype=torch.int32).view(1, 1, s, 1, 1)
            for mode in ("nearest", "nearest-exact"):
                ref = F.interpolate(torch.arange(s, dtype=dtype).view(1, 1, s), size=z, mode=mode).flatten()
                out = vt.Resize((z, 1, 1), mode=mode, dtype=dtype)(x).flatten()
                assert torch.equal(out.to(dtype), ref), (s, z, mode, dtype)


# ---------------- 'area' (MONAI's default mode) and anti-aliasing ----------------
AREA_ZOOMS = [1.5, 0.7, (1.3, 0.6, 1.0), (0.55, 1.71, 2.0), (0.45, 0.5, 3.1)]
AREA_SIZES = [(10, 40, 30), (46, 19, 7), (-1, 5, 60), (1, 2, 1), (23, 19, 30)]


@pytest.mark.parametrize("zoom", AREA_ZOOMS)
@pytest.mark.parametrize("keep_size", [True, False])
def test_zoom_default_area_bitwise_like_monai(zoom, keep_size):
    """Zoom(zoom) with MONAI's defaults (area, edge padding) on a random batch of 3 with odd,
    even and prime sizes, up and down: each sample bit-identical to MONAI's Zoom on it alone."""
    x = torch.randn(3, 2, 23, 19, 30, generator=torch.Generator().manual_seed(1))
    ours = vt.Zoom(zoom, keep_size=keep_size)(x)
    assert ours.dtype == torch.float32
    for i in range(3):
        assert_bitwise(ours[i], mt.Zoom(zoom, keep_size=keep_size)(x[i]))
    for pad in (["constant", "reflect", "wrap"] if keep_size else []):
        assert_bitwise(vt.Zoom(zoom, padding_mode=pad)(x[0]), mt.Zoom(zoom, padding_mode=pad)(x[0]))


# ---------------- RandZoom ----------------
# Ranges that cross 1 on every axis: some samples crop (keep_size), some pad, per axis.
RZ_RANGE = dict(min_zoom=(0.6, 0.75, 0.8), max_zoom=(1.4, 1.3, 1.25))


@pytest.mark.parametrize("mode, align_corners", [("area", None), ("trilinear", None), ("trilinear", True),
                                                 ("bilinear", None)])
def test_rand_zoom_per_sample_matches_monai_zoom(inia, mode, align_corners):
    """A batch of 4 (real T1, flipped copies): each sample's drawn factors read back and the
    sample compared with MONAI's Zoom(those factors) on it alone: 'area' bit-identical (same
    torch op, per sample), linear within IMG_TOL (module docstring). The batched result is also
    bit-identical to voxaug's own Zoom on each sample: the one launch with per-sample maps and the
    per-sample keep_size padding gather change nothing."""
    img, _, _ = inia
    x = torch.stack([img, img.flip(1), img.flip(2), img.flip(3)])
    t = vt.RandZoom(prob=1.0, mode=mode, align_corners=align_corners, seed=5, **RZ_RANGE)
    out = t(x)
    zooms = t.zooms(t._last)
    assert len({tuple(z) for z in zooms}) == 4
    assert any(z[a] < 1 for z in zooms for a in range(3)) and any(z[a] > 1 for z in zooms for a in range(3))
    assert out.shape == x.shape and out.dtype == torch.float32 and torch.isfinite(out).all()
    for i, z in enumerate(zooms):
        for a, (lo, hi) in enumerate(zip(RZ_RANGE["min_zoom"], RZ_RANGE["max_zoom"])):
            assert lo <= z[a] <= hi
        ref = mt.Zoom(z, mode=mode, align_corners=align_corners)(x[i])
        if mode == "area":
            assert_bitwise(out[i], ref)
        else:
            assert_image_close(out[i], ref)
        assert_bitwise(out[i], vt.Zoom(z, mode=mode, align_corners=align_corners)(x[i]))


@pytest.mark.parametrize("padding_mode", ["edge", "constant", "reflect", "symmetric", "wrap", "replicate"])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_rand_zoom_nearest_labels_bitwise_like_monai(inia, mode, padding_mode):
    """int16 labels, nearest: one launch for the batch (interpolate's floor rule, see
    _nearest_rule), then each sample's keep_size padding: bit-identical to MONAI's Zoom per sample
    for every padding mode; int16 stays int16."""
    _, lab, _ = inia
    y = torch.stack([lab, lab.flip(1), lab.flip(3)])
    t = vt.RandZoom(prob=1.0, mode=mode, padding_mode=padding_mode, seed=11, **RZ_RANGE)
    out = t(y)
    assert out.dtype == torch.int16 and out.shape == y.shape
    for i, z in enumerate(t.zooms(t._last)):
        assert_bitwise(out[i].float(), mt.Zoom(z, mode=mode, padding_mode=padding_mode)(y[i]))


def test_rand_zoom_nearest_table_fallback_and_keep_size_false():
    """Size pairs where no affine map gives interpolate's nearest indices (6 -> 246, see
    test_resize_nearest_where_no_affine_map_exists) are gathered with the table, per sample;
    keep_size=False with factors that give every sample the same shape. Bit-identical to MONAI."""
    x = torch.randn(2, 1, 6, 9, 7, generator=torch.Generator().manual_seed(4))
    t = vt.RandZoom(prob=1.0, min_zoom=(41.0, 1.0, 1.0), max_zoom=(41.0, 1.0, 1.0), mode="nearest", keep_size=False)
    out = t(x)
    assert out.shape == (2, 1, 246, 9, 7)
    for i, z in enumerate(t.zooms(t._last)):
        assert z == [41.0, 1.0, 1.0]
        assert_bitwise(out[i], mt.Zoom(z, mode="nearest", keep_size=False)(x[i]))


def test_rand_zoom_parameter_rule_and_gate():
    """MONAI's factor rule: a number is one factor for all axes, two numbers are (first, first,
    second), three are per axis; factors lie in [min, max]; the gate u < prob is per sample
    (binomial bounds, 6 sigma), gated-off samples come back unchanged, and a sample's draw does
    not depend on the batch it is in (Philox addressed by sample index)."""
    iso = vt.RandZoom(prob=1.0, min_zoom=0.7, max_zoom=1.3, seed=1)
    for z in iso.zooms(iso.draw_params(50)):
        assert z[0] == z[1] == z[2] and 0.7 <= z[0] <= 1.3
    two = vt.RandZoom(prob=1.0, min_zoom=(0.8, 1.1), max_zoom=(0.9, 1.2), seed=1)
    for z in two.zooms(two.draw_params(50)):
        assert z[0] == z[1] and 0.8 <= z[0] <= 0.9 and 1.1 <= z[2] <= 1.2
    n, prob = 2000, 0.3
    gated = vt.RandZoom(prob=prob, min_zoom=1.2, max_zoom=1.5, seed=2)
    params = gated.draw_params(n)
    on = np.array([z != [1.0, 1.0, 1.0] for z in gated.zooms(params)])
    assert abs(on.sum() - n * prob) < 6 * np.sqrt(n * prob * (1 - prob))
    np.testing.assert_array_equal(on, params[:, 0].numpy() < prob)
    assert torch.equal(gated.draw_params(3, first_sample=5, seed=9)[1], gated.draw_params(10, seed=9)[6])
    x = torch.randn(8, 1, 11, 12, 13, generator=torch.Generator().manual_seed(3))
    t = vt.RandZoom(prob=0.5, min_zoom=1.2, max_zoom=1.5, mode="trilinear", seed=4)
    out = t(x)
    gates = t._gates(t._last)
    assert 0 < gates.sum() < 8
    for i, g in enumerate(gates):
        assert torch.equal(out[i], x[i]) != bool(g)


def test_rand_zoomd_image_and_label_share_the_draw(ch2aal):
    """RandZoomd: image bilinear + label nearest get the same per-sample factors; each compared
    with MONAI's Zoom on the sample (image within IMG_TOL, uint8 labels bit-identical)."""
    img, lab, _ = ch2aal
    x, y = torch.stack([img, img.flip(2), img.flip(3)]), torch.stack([lab, lab.flip(2), lab.flip(3)])
    t = vt.RandZoomd(["img", "lab"], prob=1.0, mode=("bilinear", "nearest"), padding_mode="constant", seed=7,
                     **RZ_RANGE)
    out = t({"img": x, "lab": y, "other": 5})
    assert out["other"] == 5 and out["img"].dtype == torch.float32 and out["lab"].dtype == torch.uint8
    zooms = t.transform.zooms(t.transform._last)
    assert len({tuple(z) for z in zooms}) == 3
    for i, z in enumerate(zooms):
        assert_image_close(out["img"][i], mt.Zoom(z, mode="bilinear", padding_mode="constant")(x[i]))
        assert_bitwise(out["lab"][i].float(), mt.Zoom(z, mode="nearest", padding_mode="constant")(y[i]))
    t2 = vt.RandZoomd(["img", "lab"], prob=1.0, mode=("bilinear", "nearest"), padding_mode="constant", seed=7,
                      **RZ_RANGE)
    again = t2({"img": x, "lab": y})
    assert torch.equal(again["img"], out["img"]) and torch.equal(again["lab"], out["lab"])
    assert "missing" not in vt.RandZoomd(["img", "missing"], prob=1.0, allow_missing_keys=True)({"img": x})
    with pytest.raises(KeyError, match="missing"):
        vt.RandZoomd(["img", "missing"], prob=1.0)({"img": x})


@pytest.mark.parametrize("mode", ["area", "trilinear", "nearest"])
def test_rand_zoom_metatensor_affine_and_inverse_like_monai(ch2aal, mode):
    """MetaTensor: per sample, the affine equals MONAI's RandZoom(prob=1, min_zoom = max_zoom =
    that sample's factors) result's affine (float64, 1e-9), and the inverse (record popped,
    original affine back) equals MONAI's RandZoom inverse of that output: area and nearest
    bit-identical, trilinear within IMG_TOL. The single-sample call (4-D) is compared directly."""
    img, _, aff = ch2aal
    x = MetaTensor(torch.stack([img[:, :40, :50, :45], img[:, 10:50, 5:55, 8:53]]).float(), affine=aff)
    t = vt.RandZoom(prob=1.0, mode=mode, seed=3, **RZ_RANGE)
    out = t(x)
    zooms = t.zooms(t._last)
    assert out.affine.shape == (2, 4, 4)
    back = t.inverse(out)
    assert len(back.applied_operations) == 0 and torch.equal(back.affine.double(), x.affine.double())
    for i, z in enumerate(zooms):
        ref_t = mt.RandZoom(prob=1.0, min_zoom=z, max_zoom=z, mode=mode)
        ref = ref_t(MetaTensor(x.as_tensor()[i], affine=aff))
        torch.testing.assert_close(out.affine[i].double(), ref.affine.double(), rtol=0, atol=1e-9)
        ref_back = ref_t.inverse(ref)
        (assert_image_close if mode == "trilinear" else assert_bitwise)(back[i], ref_back)
    one = vt.RandZoom(prob=1.0, mode=mode, seed=8, **RZ_RANGE)
    single = one(MetaTensor(x.as_tensor()[0], affine=aff))
    (z,) = one.zooms(one._last)
    ref = mt.RandZoom(prob=1.0, min_zoom=z, max_zoom=z, mode=mode)(MetaTensor(x.as_tensor()[0], affine=aff))
    torch.testing.assert_close(single.affine.double(), ref.affine.double(), rtol=0, atol=1e-9)
    (assert_image_close if mode == "trilinear" else assert_bitwise)(single, ref)


def test_rand_zoomd_in_compose_and_inverse(ch2aal):
    """In a Compose, RandZoomd in mode 'area' runs as itself between fused spatial groups
    (adaptive average pooling is no index map): the result equals the transforms called one
    by one with the same seeds, and Compose.inverse restores shapes, affines and empty
    applied_operations (the zoom's inverse per sample, as MONAI's RandZoom inverse)."""
    img, lab, aff = ch2aal
    x = MetaTensor(torch.stack([img[:, :40, :48, :48], img[:, 10:50, 5:53, 8:56]]).float(), affine=aff)
    y = MetaTensor(torch.stack([lab[:, :40, :48, :48], lab[:, 10:50, 5:53, 8:56]]), affine=aff)

    def make():
        return [vt.RandFlipd(["img", "lab"], prob=1.0, spatial_axis=0, seed=1),
                vt.RandZoomd(["img", "lab"], prob=1.0, mode=("area", "nearest"), seed=2, **RZ_RANGE),
                vt.RandRotate90d(["img", "lab"], prob=1.0, spatial_axes=(1, 2), seed=3)]

    comp = vt.Compose(make())
    out = comp({"img": x, "lab": y})
    step = {"img": x, "lab": y}
    for t in make():
        step = t(step)
    for k in ("img", "lab"):
        assert_bitwise(out[k], step[k])
        torch.testing.assert_close(out[k].affine, step[k].affine, rtol=0, atol=0)
    back = comp.inverse(out)
    for k, src in (("img", x), ("lab", y)):
        assert back[k].shape == src.shape and len(back[k].applied_operations) == 0
        torch.testing.assert_close(back[k].affine.double(), src.affine.double(), rtol=0, atol=1e-9)


def test_rand_zoom_bad_arguments():
    x = torch.zeros(2, 1, 8, 9, 10)
    with pytest.raises(ValueError, match="same length"):
        vt.RandZoom(min_zoom=(0.9, 0.9, 0.9), max_zoom=(1.1, 1.1))
    with pytest.raises(ValueError, match="min_zoom / max_zoom must be a number"):
        vt.RandZoom(min_zoom=(0.9,) * 4, max_zoom=(1.1,) * 4)
    with pytest.raises(ValueError, match="must be > 0"):
        vt.RandZoom(min_zoom=0.0, max_zoom=1.1)
    with pytest.raises(ValueError, match="min_zoom must be a finite number"):
        vt.RandZoom(min_zoom="small")
    with pytest.raises(ValueError, match="prob must be in"):
        vt.RandZoom(prob=1.5)
    with pytest.raises(ValueError, match="mode must be one of"):
        vt.RandZoom(mode="cubic")
    with pytest.raises(NotImplementedError, match="bicubic"):
        vt.RandZoom(mode="bicubic")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        vt.RandZoom(padding_mode="mirror")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        vt.RandZoomd(["img", "lab"], padding_mode=("edge", "bogus"))
    with pytest.raises(ValueError, match="different shapes"):
        vt.RandZoom(prob=1.0, min_zoom=0.5, max_zoom=1.5, keep_size=False, seed=0)(x)
    with pytest.raises(ValueError, match="params must be a"):
        vt.RandZoom(prob=1.0).apply(x, torch.zeros(2, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="gives an empty output"):
        vt.RandZoom(prob=1.0, min_zoom=0.05, max_zoom=0.06, mode="nearest")(x)
    with pytest.raises(NotImplementedError, match="lazy"):
        vt.RandZoom(lazy=True)
    with pytest.raises(ValueError, match="same batch size"):
        vt.RandZoomd(["a", "b"], prob=1.0)({"a": x, "b": x[:1]})


@pytest.mark.parametrize("size", AREA_SIZES)
def test_resize_default_area_bitwise_like_monai(size):
    x = torch.randn(3, 2, 23, 19, 30, generator=torch.Generator().manual_seed(2))
    ours = vt.Resize(size)(x)
    for i in range(3):
        assert_bitwise(ours[i], mt.Resize(size)(x[i]))
    assert_bitwise(vt.Resize(40, size_mode="longest")(x[0]), mt.Resize(40, size_mode="longest")(x[0]))


def test_area_on_ch2_and_dtypes(ch2aal):
    """uint8 ch2 (cropped, odd sizes): area in float32 as MONAI (dtype float32), float64 with
    dtype=None, half in float32 and returned as half; all bit-identical to MONAI's result in the
    dtype MONAI computed in."""
    img = ch2aal[0][:, 5:52, 8:70, 3:58]
    for t, r in ((vt.Zoom(1.4), mt.Zoom(1.4)), (vt.Zoom((0.6, 0.8, 1.3), keep_size=False),
                                                 mt.Zoom((0.6, 0.8, 1.3), keep_size=False)),
                 (vt.Resize((30, 80, 41)), mt.Resize((30, 80, 41)))):
        ours, ref = t(img), r(img)
        assert ours.dtype == torch.float32 and ours.abs().sum() > 0
        assert_bitwise(ours, ref)
        assert_bitwise(t(img.double()).float(), ref)  # MONAI's dtype float32 for float64 input too
        assert_bitwise(t(img.half()), r(img.half()).half())
    f64 = vt.Resize((30, 80, 41), dtype=None)(img.double())
    assert f64.dtype == torch.float64
    assert_bitwise(f64, F.adaptive_avg_pool3d(img.double()[None], (30, 80, 41))[0])
    assert_bitwise(f64.float(), mt.Resize((30, 80, 41), dtype=None)(img.double()))


@pytest.mark.parametrize("size", [(10, 40, 30), (46, 9, 7), (-1, 5, 60), (23, 19, 31)])
@pytest.mark.parametrize("sigma", [None, 1.0, (0.5, 0.0, 2.0)])
def test_resize_anti_aliasing_matches_monai(size, sigma):
    """MONAI's rule: smooth (GaussianSmooth) before interpolating when some axis shrinks, with
    sigma max(0, (in/out - 1) / 2) per axis or the given sigma on shrinking axes only; any mode.
    Up-sizing every axis (23, 19, 31 from 23, 19, 30) is not smoothed at all, nor is (-1, 5, 60)
    with sigma (0.5, 0, 2): its only shrinking axis has sigma 0."""
    x = torch.randn(2, 1, 23, 19, 30, generator=torch.Generator().manual_seed(3))
    out_size = [o if o > 0 else s for o, s in zip(size, x.shape[2:])]
    sig = [sigma] * 3 if not isinstance(sigma, tuple) else sigma
    smoothed = any(o < s and (g is None or g > 0) for o, s, g in zip(out_size, x.shape[2:], sig))
    for mode in ("area", "trilinear", "nearest"):
        kw = dict(mode=mode, anti_aliasing=True, anti_aliasing_sigma=sigma)
        ours = vt.Resize(size, **kw)(x)
        for i in range(2):
            checks.assert_image_close(ours[i], mt.Resize(size, **kw)(x[i]), AA_TOL)
        plain_resize = vt.Resize(size, mode=mode)(x)
        assert torch.equal(ours, plain_resize) != smoothed, mode
    # the call-time arguments override the constructor's, as MONAI's
    t = vt.Resize(size)
    checks.assert_image_close(t(x[0], anti_aliasing=True, anti_aliasing_sigma=sigma),
                              mt.Resize(size)(x[0], anti_aliasing=True, anti_aliasing_sigma=sigma), AA_TOL)


def test_resize_anti_aliasing_on_ch2(ch2aal):
    img = ch2aal[0][:, 5:52, 8:70, 3:58]
    for size in ((20, 31, 55), (12, 70, 20)):
        kw = dict(anti_aliasing=True)
        ours = vt.Resize(size, **kw)(img)
        ref = mt.Resize(size, **kw)(img)
        checks.assert_image_close(ours, ref, AA_TOL)
        # smoothing is not a no-op here: without it the result is further from MONAI's
        assert (plain(vt.Resize(size)(img)) - plain(ref)).abs().max() > 100 * AA_TOL * float(ref.max() - ref.min())


def test_default_modes_dictionary_forms_and_meta_tensor(ch2aal):
    """Zoomd / Resized with MONAI's default modes (image area, label nearest), per-key
    anti-aliasing, on MetaTensors: data bit-identical (anti-aliased within AA_TOL), affines and
    metadata as MONAI's."""
    img, lab, aff = ch2aal
    sl = (slice(None), slice(5, 52), slice(8, 70), slice(3, 58))
    d = {"img": MetaTensor(img[sl], affine=aff), "lab": MetaTensor(lab[sl], affine=aff)}
    keys, modes = ["img", "lab"], ("area", "nearest")
    for name, args, kw in (("Zoomd", ((1.3, 0.7, 1.0),), {}), ("Zoomd", (0.8,), dict(keep_size=False)),
                           ("Resized", ((30, 80, 41),), {}),
                           ("Resized", ((20, 31, 55),), dict(anti_aliasing=(True, False)))):
        ours = getattr(vt, name)(keys, *args, mode=modes, **kw)(d)
        ref = getattr(mt, name)(keys, *args, mode=modes, **kw)({k: v.clone() for k, v in d.items()})
        if "anti_aliasing" in kw:
            checks.assert_image_close(ours["img"], ref["img"], AA_TOL)
        else:
            assert_bitwise(ours["img"], ref["img"])
        assert ours["lab"].dtype == torch.uint8
        assert_bitwise(ours["lab"].float(), ref["lab"])
        for k in ("img", "lab"):
            assert isinstance(ours[k], MetaTensor) and ours[k].shape == ref[k].shape
            torch.testing.assert_close(ours[k].affine, ref[k].affine, atol=1e-12, rtol=0)
        assert torch.equal(d["img"].affine, aff.to(d["img"].affine.dtype))  # the input is untouched
    # Zoom / Resize defaults on a batched MetaTensor: one affine for the batch, as MONAI's per sample.
    x = MetaTensor(torch.stack([img[sl].float(), img[sl].float().flip(1)]), affine=aff)
    for ours_t, ref_t in ((vt.Zoom(1.5, keep_size=False), mt.Zoom(1.5, keep_size=False)),
                          (vt.Resize((30, -1, 20)), mt.Resize((30, -1, 20)))):
        out = ours_t(x)
        for i in range(2):
            ref = ref_t(MetaTensor(x.as_tensor()[i], affine=aff))
            assert_bitwise(out.as_tensor()[i], ref)
            torch.testing.assert_close(out.affine, ref.affine, atol=1e-12, rtol=0)


def test_area_inverse_and_compose_like_monai(ch2aal):
    """The inverse of an area Zoom / Resize resizes back with 'area' (MONAI's inverse), and a
    Compose containing one runs it eagerly (area is no index map): both bit-identical to MONAI."""
    img, _, aff = ch2aal
    x = MetaTensor(img[:, 5:52, 8:70, 3:58].float(), affine=aff)
    for ours_t, ref_t in ((vt.Zoom((1.3, 0.7, 1.0)), mt.Zoom((1.3, 0.7, 1.0))),
                          (vt.Zoom(0.6, keep_size=False), mt.Zoom(0.6, keep_size=False)),
                          (vt.Resize((30, 80, 41)), mt.Resize((30, 80, 41)))):
        ours, ref = ours_t(x), ref_t(x.clone())
        back, ref_back = ours_t.inverse(ours), ref_t.inverse(ref)
        assert_bitwise(back, ref_back)
        torch.testing.assert_close(back.affine, ref_back.affine, atol=1e-12, rtol=0)
        assert not back.applied_operations
    ours = vt.Compose([vt.Resize((30, 80, 41)), vt.Flip(0), vt.Zoom(1.2)])(x)
    ref = mt.Compose([mt.Resize((30, 80, 41)), mt.Flip(0), mt.Zoom(1.2)])(x.clone())
    assert_bitwise(ours, ref)
    torch.testing.assert_close(ours.affine, ref.affine, atol=1e-12, rtol=0)
    # After a crop sampler's batch (patches gathered straight from the volume when the next steps
    # fuse): area and anti-aliasing cut the patches first, same result as the unfused pipeline.
    from voxaug import crop
    lab = (img[:, 5:52, 8:70, 3:58] > 60).to(torch.uint8)
    data = {"img": img[:, 5:52, 8:70, 3:58].float(), "lab": lab}

    def pipeline(fuse):
        sampler = crop.RandCropByPosNegLabeld(["img", "lab"], "lab", (20, 24, 18), num_samples=3, as_batch=True)
        sampler.set_random_state(5)
        return vt.Compose([sampler, vt.Resized(["img", "lab"], (10, 30, 9), mode=("area", "nearest"),
                                               anti_aliasing=(True, False)), vt.Flipd(["img", "lab"], 0)],
                          fuse_spatial=fuse)

    fused, eager = pipeline(True)(data), pipeline(False)(data)
    assert fused["img"].shape == (3, 1, 10, 30, 9) and fused["img"].abs().sum() > 0
    assert torch.equal(plain(fused["img"]), plain(eager["img"])) and torch.equal(plain(fused["lab"]),
                                                                                plain(eager["lab"]))


# ---------------- uint8 volumes (ch2 + aal) ----------------
def test_ch2_aal_affine_and_zoom(ch2aal):
    img, lab, _ = ch2aal
    kw = dict(AFFINE_KW, padding_mode="border", image_only=True)
    ours = vt.Affined(["img", "lab"], **{k: v for k, v in kw.items() if k != "image_only"},
                      mode=("bilinear", "nearest"))({"img": img, "lab": lab})
    assert ours["img"].dtype == torch.float32 and ours["lab"].dtype == torch.uint8
    assert_image_close(ours["img"], mt.Affine(**kw)(img))
    assert_labels_match(ours["lab"], mt.Affine(**kw, mode="nearest")(lab))
    z = vt.Zoomd(["img", "lab"], zoom=(1.4, 0.9, 1.1), mode=("trilinear", "nearest"))({"img": img, "lab": lab})
    assert_image_close(z["img"], mt.Zoom((1.4, 0.9, 1.1), mode="trilinear")(img))
    assert_bitwise(z["lab"].float(), mt.Zoom((1.4, 0.9, 1.1), mode="nearest")(lab))


# ---------------- dictionary forms ----------------
def test_dictionary_forms_share_one_launch(inia, monkeypatch):
    img, lab, _ = inia
    img, lab = img[:, :40, :50, :30].contiguous(), lab[:, :40, :50, :30].contiguous()
    calls = []
    real = ops.resample

    def counting(inputs, *args, **kwargs):
        calls.append(len(inputs))
        return real(inputs, *args, **kwargs)

    monkeypatch.setattr(ops, "resample", counting)
    data = {"img": img, "lab": lab, "other": "kept"}
    cases = [
        (vt.Affined(["img", "lab"], **AFFINE_KW, mode=("bilinear", "nearest")),
         [vt.Affine(**AFFINE_KW, image_only=True), vt.Affine(**AFFINE_KW, mode="nearest", image_only=True)], [2]),
        (vt.Rotated(["img", "lab"], 0.2, mode=("bilinear", "nearest")),
         [vt.Rotate(0.2), vt.Rotate(0.2, mode="nearest")], [2]),
        (vt.Flipd(["img", "lab"], 1), [vt.Flip(1), vt.Flip(1)], [2]),
        (vt.Rotate90d(["img", "lab"], 3, (1, 2)), [vt.Rotate90(3, (1, 2))] * 2, [2]),
        # interpolate's nearest floors: a different map from trilinear, so two launches.
        (vt.Resized(["img", "lab"], (30, 45, 33), mode=("trilinear", "nearest")),
         [vt.Resize((30, 45, 33), mode="trilinear"), vt.Resize((30, 45, 33), mode="nearest")], [1, 1]),
    ]
    for dict_t, array_ts, expected in cases:
        calls.clear()
        out = dict_t(data)
        assert calls == expected, type(dict_t).__name__
        assert out["other"] == "kept"
        for key, t in zip(["img", "lab"], array_ts):
            assert torch.equal(out[key], t(data[key]))
    calls.clear()
    r = vt.RandAffined(["img", "lab"], prob=1.0, mode=("bilinear", "nearest"), seed=3, **RAND_AFFINE_KW)
    out = r(data)
    assert calls == [2]
    replay = vt.RandAffine(prob=1.0, **RAND_AFFINE_KW)
    assert torch.equal(out["img"], replay.apply(img, r.transform._last))
    assert torch.equal(out["lab"], replay.apply(lab, r.transform._last, mode="nearest"))
    # Missing keys.
    assert set(vt.Flipd(["img", "nope"], allow_missing_keys=True)({"img": img})) == {"img"}
    with pytest.raises(KeyError, match="nope"):
        vt.Flipd(["img", "nope"])({"img": img})


# ---------------- MetaTensor ----------------
META_CASES = [
    ("Flip", dict(spatial_axis=(0, 2))), ("Rotate90", dict(k=3, spatial_axes=(2, 1))),
    ("Affine", dict(AFFINE_KW, spatial_size=(40, 30, 35), image_only=True)),
    ("Rotate", dict(angle=(0.2, 0.1, -0.3), keep_size=False)), ("Zoom", dict(zoom=(1.3, 0.7, 1.0), mode="trilinear")),
    ("Zoom", dict(zoom=(1.3, 0.7, 1.0), mode="nearest", keep_size=False)),
    ("Resize", dict(spatial_size=(30, -1, 20), mode="trilinear")),
    ("Resize", dict(spatial_size=(30, 40, 20), mode="trilinear", align_corners=True)),
    ("Zoom", dict(zoom=(1.3, 0.7, 1.0))), ("Zoom", dict(zoom=0.6, keep_size=False)),
    ("Resize", dict(spatial_size=(30, -1, 20))), ("Resize", dict(spatial_size=(30, 40, 20), anti_aliasing=True)),
]


@pytest.mark.parametrize("name,kw", META_CASES)
def test_meta_tensor_keeps_metadata_and_updates_affine_like_monai(inia, name, kw):
    img, _, aff = inia
    aff2 = aff @ torch.diag(torch.tensor([2.0, 2, 2, 1], dtype=torch.float64))
    x = MetaTensor(img[:, ::2, ::2, ::2].contiguous(), affine=aff2)
    x.meta["filename_or_obj"] = "inia19-t1-brain.nii.gz"
    ours = getattr(vt, name)(**kw)(x)
    ref = getattr(mt, name)(**kw)(x.clone())
    assert isinstance(ours, MetaTensor) and ours.meta["filename_or_obj"] == "inia19-t1-brain.nii.gz"
    assert ours.shape == ref.shape
    torch.testing.assert_close(ours.affine, ref.affine, atol=1e-5, rtol=0)
    assert torch.equal(x.affine, aff2)  # the input is untouched


def test_batched_meta_tensor_gets_per_sample_affines(inia):
    img, _, aff = inia
    x = MetaTensor(torch.stack([img[:, :30, :30, :30]] * 3), affine=aff)
    t = vt.RandAffine(prob=1.0, rotate_range=0.5, translate_range=3, seed=1)
    params = t.draw_params(3)
    out = t.apply(x, params)
    assert out.affine.shape == (3, 4, 4)
    for i in range(3):
        single = t.apply(MetaTensor(x.as_tensor()[i], affine=aff), params[i:i + 1])
        torch.testing.assert_close(out.affine[i], single.affine)
        assert torch.equal(out.as_tensor()[i], single.as_tensor())


# ---------------- dtypes, layouts, devices ----------------
def test_dtypes_and_non_contiguous(inia):
    img = inia[0][:, :40, :44, :36]
    t = vt.Affine(**AFFINE_KW, image_only=True)
    ref = t(img.contiguous())
    assert torch.equal(t(img), ref)  # non-contiguous view
    assert t(img.double()).dtype == torch.float64
    torch.testing.assert_close(t(img.double()).float(), ref, atol=IMG_TOL * 400, rtol=0)
    half = t(img.half())
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), ref, atol=0.5, rtol=2e-3)
    assert isinstance(vt.Flip(0)(img.numpy()), torch.Tensor)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CPU twin is what CI proves")
def test_cuda_equals_cpu(inia):
    img, lab, _ = inia
    data = {"img": torch.stack([img] * 3), "lab": torch.stack([lab] * 3)}
    make = lambda: vt.RandAffined(["img", "lab"], prob=1.0, mode=("bilinear", "nearest"), seed=5,  # noqa: E731
                                  **RAND_AFFINE_KW)
    cpu = make()(data)
    cuda = make()({k: v.cuda() for k, v in data.items()})
    torch.testing.assert_close(cuda["img"].cpu(), cpu["img"], atol=1e-4, rtol=1e-5)
    assert (cuda["lab"].cpu() != cpu["lab"]).float().mean() < LABEL_TIES
    for t in (vt.Flip((0, 2)), vt.Rotate90(1, (0, 2)), vt.Resize((50, 60, 70), mode="nearest")):
        assert torch.equal(t(lab.cuda()).cpu(), t(lab))
    # 'area' and anti-aliasing on the device: area is torch's own CUDA pooling, as MONAI's there;
    # CPU and CUDA sum the windows (and the Gaussian taps) in different orders.
    for t, r in ((vt.Zoom(0.7), mt.Zoom(0.7)), (vt.Resize((50, 60, 70)), mt.Resize((50, 60, 70))),
                 (vt.Resize((40, 50, 30), anti_aliasing=True), mt.Resize((40, 50, 30), anti_aliasing=True))):
        batch = torch.stack([img, img.flip(1)]).cuda()
        out = t(batch)
        assert out.is_cuda
        checks.assert_image_close(out.cpu(), t(batch.cpu()), AA_TOL)
        checks.assert_image_close(out[1].cpu(), plain(r(batch[1])).cpu(), AA_TOL)


# ---------------- bad inputs ----------------
def test_bad_inputs_give_clear_errors():
    x = torch.zeros(1, 6, 7, 8)
    with pytest.raises(ValueError, match="spatial_axis"):
        vt.Flip(spatial_axis=3)
    with pytest.raises(ValueError, match="spatial_axes"):
        vt.Rotate90(spatial_axes=(1, 1))
    with pytest.raises(ValueError, match="spatial_axes"):
        vt.RandRotate90(spatial_axes=(0, 1, 2))
    with pytest.raises(ValueError, match="k must be an int"):
        vt.Rotate90(k=1.5)
    with pytest.raises(ValueError, match="max_k"):
        vt.RandRotate90(max_k=0)
    with pytest.raises(ValueError, match="mode must be 'bilinear', 'nearest', 'bicubic'"):
        vt.Affine(rotate_params=0.1, mode="cubic")
    with pytest.raises(ValueError, match="spline orders are 0 to 5"):
        vt.Affine(mode=6)
    with pytest.raises(ValueError, match="padding_mode"):
        vt.Rotate(0.1, padding_mode="wrap")
    with pytest.raises(ValueError, match="spatial_size"):
        vt.Affine(spatial_size=(4, 5))
    with pytest.raises(ValueError, match="angle"):
        vt.Rotate((0.1, 0.2))
    with pytest.raises(ValueError, match="rotate_order"):
        vt.Affine(rotate_params=(0.1, 0.2, 0.3), rotate_order="xxz")
    with pytest.raises(ValueError, match="zoom"):
        vt.Zoom(0.0, mode="nearest")
    with pytest.raises(NotImplementedError, match="'bicubic'"):
        vt.Zoom(1.5, mode="bicubic")
    with pytest.raises(ValueError, match="mode must be one of .*'area'"):
        vt.Resized("img", (4, 4, 4), mode="cubic")
    with pytest.raises(ValueError, match="padding_mode"):
        vt.Zoom(1.5, mode="nearest", padding_mode="median")
    with pytest.raises(ValueError, match="spatial_size"):
        vt.Resize(64, mode="nearest")
    with pytest.raises(ValueError, match="anti_aliasing_sigma must be finite and >= 0"):
        vt.Resize((4, 4, 4), anti_aliasing=True, anti_aliasing_sigma=-1.0)
    with pytest.raises(ValueError, match="anti_aliasing_sigma must be a number or 3 numbers"):
        vt.Resize((4, 4, 4), anti_aliasing=True, anti_aliasing_sigma=(1.0, 2.0))
    with pytest.raises(ValueError, match="anti_aliasing must be a bool"):
        vt.Resize((4, 4, 4))(x, anti_aliasing="yes")
    with pytest.raises(ValueError, match="prob"):
        vt.RandAffine(prob=1.5)
    with pytest.raises(ValueError, match="rotate_range"):
        vt.RandAffine(rotate_range=((0.0, 0.1, 0.2),))
    with pytest.raises(ValueError, match="translate_range"):
        vt.RandAffine(translate_range="a")
    with pytest.raises(ValueError, match="range_x"):
        vt.RandRotate(range_x=(0.1, 0.2, 0.3))
    with pytest.raises(NotImplementedError, match="lazy"):
        vt.Flip(lazy=True)
    with pytest.raises(ValueError, match="img must be"):
        vt.Flip()(torch.zeros(6, 7, 8))
    with pytest.raises(ValueError, match="equal sizes along spatial_axes"):
        vt.RandRotate90(prob=1.0)(torch.zeros(2, 1, 6, 7, 8))
    with pytest.raises(ValueError, match="keep_size=False"):
        vt.RandRotate(0.5, prob=1.0, keep_size=False, seed=1)(torch.zeros(3, 1, 6, 7, 8))
    with pytest.raises(ValueError, match="same batch size"):
        vt.RandAffined(["a", "b"], prob=1.0)({"a": torch.zeros(2, 1, 4, 4, 4), "b": torch.zeros(3, 1, 4, 4, 4)})
    with pytest.raises(ValueError, match="mode must be one value or one per key"):
        vt.Affined(["a", "b"], mode=("bilinear", "nearest", "nearest"))
    with pytest.raises(ValueError, match="params must be a"):
        vt.RandFlip(prob=1.0).apply(x, torch.zeros(2, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="randomize=False reuses the last draw"):
        t = vt.RandFlip(prob=1.0)
        t(torch.zeros(2, 1, 4, 4, 4))
        t(x, randomize=False)
    with pytest.raises(ValueError, match="gives an empty output"):
        vt.Zoom(0.1, mode="nearest")(x)


def test_empty_batch():
    x = torch.zeros(0, 1, 5, 6, 7)
    assert vt.RandAffine(prob=1.0, rotate_range=0.3)(x).shape == (0, 1, 5, 6, 7)
    assert vt.Resize((3, 4, 5), mode="nearest")(x).shape == (0, 1, 3, 4, 5)
    assert vt.RandRotate90(prob=1.0)(x).shape == (0, 1, 5, 6, 7)
    assert vt.RandZoom(prob=1.0, mode="nearest")(x).shape == (0, 1, 5, 6, 7)
    assert vt.RandZoom(prob=1.0)(x).shape == (0, 1, 5, 6, 7)


@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
@pytest.mark.parametrize("mode", [3, "bicubic"])
def test_cubic_affine_matches_monai_spline_order_3(padding_mode, mode):
    # MONAI's integer mode 3 resamples with scipy's map_coordinates(order=3); voxaug's cubic is
    # the same prefiltered B-spline. (With padding 'zeros' MONAI's spline path uses scipy's
    # 'constant' mode while voxaug keeps grid_sample's zeros ('grid-constant'): not compared.)
    x = torch.randn(1, 20, 22, 18, generator=torch.Generator().manual_seed(0))
    kw = dict(rotate_params=(0.2, 0.1, -0.15), scale_params=(1.1, 0.9, 1.0), padding_mode=padding_mode,
              image_only=True)
    ref = torch.as_tensor(mt.Affine(mode=3, **kw)(x.clone()))
    ours = vt.Affine(mode=mode, **kw)(x)
    assert (torch.as_tensor(ours) - ref).abs().max().item() < 1e-4 * float(x.max() - x.min())


@pytest.mark.parametrize("mode", ["area", "nearest", "nearest-exact"])
@pytest.mark.parametrize("align", [False, True])
def test_align_corners_with_a_non_interpolating_mode_fails_as_monai(mode, align):
    """torch's interpolate (MONAI's Zoom / Resize) refuses align_corners for area and nearest
    modes; so does voxaug, instead of ignoring it. None (the default) is accepted by both."""
    x = torch.rand(1, 6, 7, 8)
    for m_t, v_t in ((mt.Zoom(1.5, mode=mode, align_corners=align), vt.Zoom(1.5, mode=mode, align_corners=align)),
                     (mt.Resize((5, 9, 4), mode=mode, align_corners=align),
                      vt.Resize((5, 9, 4), mode=mode, align_corners=align))):
        with pytest.raises(ValueError, match="align_corners"):
            m_t(x)
        with pytest.raises(ValueError, match="align_corners"):
            v_t(x)
    m = torch.as_tensor(mt.Zoom(1.5, mode=mode)(x))
    assert torch.equal(torch.as_tensor(vt.Zoom(1.5, mode=mode)(x)), m)
