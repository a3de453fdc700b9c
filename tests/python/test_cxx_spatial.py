"""voxaug's C++ spatial transforms (torch_ext/include/voxaug/spatial_transforms.h) vs MONAI and
vs python/voxaug/spatial.py, through the test shim tests/torch/spatial_transforms_shim.cpp
(torch.ops.voxaug_cxx_test_spatial; each op constructs the C++ class and calls it).

Builds nothing: loads libvoxaug_cxx_spatial_shim.so from the build dir named by
VOXAUG_BUILD_DIR (default <repo>/build) and skips when it is absent (build the
voxaug_cxx_spatial_shim target).

What is compared, on the real volumes of mricron-data (the fixtures of test_spatial.py and
test_spacing.py, their tolerances imported):
- Spacing (ch2better + a label; several pixdims, an oblique affine with diagonal / scale_extent /
  align_corners): shapes and affines as MONAI's within 1e-6, images within test_spacing's
  IMG_TOL (MONAI resamples in float64, voxaug in float32), labels up to half-voxel ties.
- Orientation (inia19 T1 + NeuroMaps labels; four axcodes, and as_closest_canonical on an oblique
  permuted affine): data bit-identical, affines as MONAI's to the last bits of float64.
- Affine, Rotate, Resize, Zoom, Flip, Rotate90 with fixed parameters, image + label in one call:
  images within test_spatial's IMG_TOL, labels within LABEL_TIES; Flip / Rotate90 and Resize /
  Zoom nearest and 'area' bit-identical (the same tolerances as the Python transforms get).
- Random transforms: for a seed, the C++ draw (uniforms, gates, parameters, centred matrices,
  maps) equals the Python transform's draw_params / parameters / angles / _ks for that seed;
  each sample's output equals MONAI's deterministic transform run with the drawn parameters;
  a sample's draw does not depend on the batch (first_sample), prob 0 / 1 gate every sample
  off / on, share_batch_params gives every sample sample first_sample's draw.
- Bad arguments raise ValueError (c10::ValueError) naming the argument.
"""

import numpy as np
import pytest
import torch

from voxaug import spatial
from voxaug import transforms as vt

mt = pytest.importorskip("monai.transforms")
pytest.importorskip("nibabel")
from monai.data import MetaTensor  # noqa: E402

import test_spacing as ts  # noqa: E402  (fixtures' helpers and tolerances, not its tests)
import test_spatial as tsp  # noqa: E402
from conftest import load_test_shim  # noqa: E402
from spatial_checks import assert_bitwise  # noqa: E402

pytestmark, SHIM = load_test_shim("voxaug_cxx_spatial_shim")
cxx = torch.ops.voxaug_cxx_test_spatial  # an empty namespace when the shim is absent (the tests skip)


@pytest.fixture(scope="module")
def inia():
    """inia19 T1 (float32) + NeuroMaps (int16) every 2nd voxel: 84 x 103 x 64 (test_spatial's)."""
    img, aff = tsp._load("inia19-t1-brain.nii.gz", 2)
    lab, _ = tsp._load("inia19-NeuroMaps.nii.gz", 2)
    return img, lab, aff


@pytest.fixture(scope="module")
def ch2aal():
    """ch2 + AAL (uint8) every 3rd voxel: 61 x 73 x 61 (test_spatial's)."""
    img, aff = tsp._load("ch2.nii.gz", 3)
    lab, _ = tsp._load("aal.nii.gz", 3)
    return img, lab, aff


@pytest.fixture(scope="module")
def ch2better():
    """ch2better (uint8, 0.5 mm) cropped to 120^3 + a thresholded label (test_spacing's)."""
    data, aff = ts._load("ch2better.nii.gz")
    img = ts._crop(data, aff, (90, 120, 100), (120, 120, 120))
    return img, MetaTensor((img.as_tensor() > 80).to(torch.uint8), affine=img.affine.clone())


@pytest.fixture(scope="module")
def inia_meta():
    """inia19 T1 + NeuroMaps cropped to 80 x 100 x 60 as MetaTensors (test_spacing's)."""
    t1, aff = ts._load("inia19-t1-brain.nii.gz")
    lab, _ = ts._load("inia19-NeuroMaps.nii.gz")
    return ts._crop(t1, aff, (44, 50, 30), (80, 100, 60)), ts._crop(lab, aff, (44, 50, 30), (80, 100, 60))


def plain(x):
    return x.as_tensor() if isinstance(x, MetaTensor) else x


# ---------------- Spacing / Orientation ----------------
@pytest.mark.parametrize("pixdim", [(1.0, 1.0, 1.0), (1.5, 1.5, 2.0), (0.7, 0.9, 1.3), (0.8,)])
def test_spacing_image_and_label_match_monai(ch2better, pixdim):
    img, lab = ch2better
    m = mt.Spacingd(["img", "lab"], pixdim=pixdim, mode=("bilinear", "nearest"))({"img": img, "lab": lab})
    (out_img, out_lab), aff, maps, meta = cxx.spacing([plain(img), plain(lab)], list(pixdim), "bilinear", "border",
                                                      False, False, False, ["", "nearest"], img.affine)
    assert out_img.dtype == torch.float32 and out_lab.dtype == torch.uint8
    ts._check_spacing(m["img"], MetaTensor(out_img, affine=aff), m["lab"], MetaTensor(out_lab, affine=aff))
    assert torch.equal(maps, meta)


@pytest.mark.parametrize("kw", [dict(diagonal=False), dict(diagonal=True, padding_mode="zeros"),
                                dict(scale_extent=True, align_corners=True),
                                dict(align_corners=True, padding_mode="reflection")])
def test_spacing_oblique_affine_options_match_monai(ch2better, kw):
    img, lab = ch2better
    img = ts._with_affine(img[:, :64, :64, :64], ts._oblique(img.affine.numpy()))
    lab = ts._with_affine(lab[:, :64, :64, :64], img.affine)
    args = dict(dict(diagonal=False, padding_mode="border", scale_extent=False, align_corners=False), **kw)
    for x, mode in ((img, "bilinear"), (lab, "nearest")):
        m = mt.Spacing((0.8, 1.1, 0.9), mode=mode, **kw)(x)
        (out,), aff, _, _ = cxx.spacing([plain(x)], [0.8, 1.1, 0.9], mode, args["padding_mode"],
                                        args["align_corners"], args["diagonal"], args["scale_extent"], [], x.affine)
        ts._check_spacing(m, MetaTensor(out, affine=aff))


def test_spacing_unchanged_affine_and_batch(ch2better):
    """MONAI's shortcut (the target spacing is the input's): the voxels come back as they are;
    a batch of 2 (shared (N, 4, 4) affine) equals each sample alone, in one launch."""
    img, _ = ch2better
    x = plain(img)[:, :40, :50, :30].float()
    (out,), aff, maps, _ = cxx.spacing([x], [0.5], "bilinear", "border", False, False, False, [], img.affine)
    assert torch.equal(out, x) and torch.equal(maps[0], torch.eye(4, dtype=torch.float64))
    assert torch.equal(aff, img.affine.double())
    batch = torch.stack([x, x.flip(1)])
    (outs,), baff, _, _ = cxx.spacing([batch], [0.9, 1.2, 0.7], "bilinear", "border", False, False, False, [],
                                      img.affine.double().expand(2, 4, 4))
    for i in range(2):
        (one,), oaff, _, _ = cxx.spacing([batch[i]], [0.9, 1.2, 0.7], "bilinear", "border", False, False, False,
                                         [], img.affine)
        assert torch.equal(outs[i], one) and torch.equal(baff[i], oaff)


@pytest.mark.parametrize("axcodes", ["RAS", "LPS", "PLI", "SAR"])
def test_orientation_bit_identical_to_monai(inia_meta, axcodes):
    img, lab = inia_meta
    m = mt.Orientationd(["img", "lab"], axcodes=axcodes)({"img": img, "lab": lab})
    (oi, ol), aff, maps, meta = cxx.orientation([plain(img), plain(lab)], axcodes, False, [], img.affine)
    assert oi.dtype == torch.float32 and ol.dtype == torch.int16
    assert torch.equal(oi, m["img"].as_tensor()) and torch.equal(ol, m["lab"].as_tensor().to(torch.int16))
    assert ts._affine_close(aff, m["img"].affine)


@pytest.mark.parametrize("axcodes", ["RAS", "ILA", None])
def test_orientation_oblique_permuted_affine(inia_meta, axcodes):
    img, _ = inia_meta
    a = np.array([[0, 0, -0.5, 10], [0.5, 0, 0, -3], [0, -0.5, 0, 4], [0, 0, 0, 1]])
    x = ts._with_affine(img[:, :30, :40, :20], ts._oblique(a, (5.0, 3.0, -8.0)))
    kw = dict(axcodes=axcodes) if axcodes else dict(as_closest_canonical=True)
    m = mt.Orientation(**kw)(x)
    (out,), aff, _, _ = cxx.orientation([plain(x)], axcodes or "", axcodes is None, [], x.affine)
    assert torch.equal(out, m.as_tensor()) and ts._affine_close(aff, m.affine)


# ---------------- Affine / Rotate / Resize / Zoom / Flip / Rotate90 ----------------
def _affine_args(kw):
    return ([float(v) for v in kw["rotate_params"]], [float(v) for v in kw["shear_params"]],
            [float(v) for v in kw["translate_params"]], [float(v) for v in kw["scale_params"]])


@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("spatial_size", [None, (70, 90, 61)])
def test_affine_image_and_label_match_monai(inia, padding_mode, align_corners, spatial_size):
    img, lab, aff = inia
    kw = dict(tsp.AFFINE_KW, padding_mode=padding_mode, align_corners=align_corners, spatial_size=spatial_size)
    (oi, ol), out_aff, _, meta = cxx.affine([img, lab], *_affine_args(tsp.AFFINE_KW), list(spatial_size or []),
                                            "bilinear", padding_mode, align_corners, ["", "nearest"], aff)
    ref = mt.Affine(**kw, image_only=True)(MetaTensor(img, affine=aff))
    tsp.assert_image_close(oi, ref)
    assert ol.dtype == torch.int16
    tsp.assert_labels_match(ol, mt.Affine(**kw, mode="nearest", image_only=True)(lab))
    # The affine update: MONAI builds its matrix in float32 (create_rotate's torch backend), the
    # Python transform in float64 like C++.
    np.testing.assert_allclose(out_aff.numpy(), ref.affine.numpy(), atol=2e-6 * ref.affine.abs().max().item())
    _, py_meta = vt.Affine(**kw)(img)
    np.testing.assert_allclose(meta[0].numpy(), py_meta.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("angle", [[0.3], [0.2, -0.1, 0.4]])
@pytest.mark.parametrize("keep_size", [True, False])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_rotate_image_and_label_match_monai(inia, angle, keep_size, padding_mode):
    img, lab, _ = inia
    ang = angle[0] if len(angle) == 1 else angle
    kw = dict(angle=ang, keep_size=keep_size, padding_mode=padding_mode)
    (oi, ol), _, _, _ = cxx.rotate([img, lab], angle, keep_size, "bilinear", padding_mode, False, ["", "nearest"])
    tsp.assert_image_close(oi, mt.Rotate(**kw)(img))
    tsp.assert_labels_match(ol, mt.Rotate(**kw, mode="nearest")(lab))


def test_rotate_bicubic_is_python_cubic(ch2aal):
    """'bicubic' is voxaug's cubic B-spline, as the Python transform maps it: same kernel, same map."""
    img, _, _ = ch2aal
    (out,), _, _, _ = cxx.rotate([img.float()], [0.2, 0.1, -0.3], True, "bicubic", "border", False)
    ref = vt.Rotate((0.2, 0.1, -0.3), mode="bicubic", padding_mode="border")(img.float())
    assert torch.equal(out, plain(ref))


@pytest.mark.parametrize("size", [(70, 90, 61), (100, 120, 80), (84, -1, 33), (13, 200, 7)])
def test_resize_matches_monai(inia, size):
    img, lab, _ = inia
    (oi, ol), _, _, _ = cxx.resize([img, lab], list(size), "trilinear", ["", "nearest"])
    tsp.assert_image_close(oi, mt.Resize(size, mode="trilinear")(img))
    assert ol.dtype == torch.int16
    assert_bitwise(ol.float(), mt.Resize(size, mode="nearest")(lab))
    (oa, oe), _, _, _ = cxx.resize([img, lab], list(size), "area", ["", "nearest-exact"])
    assert_bitwise(oa, mt.Resize(size, mode="area")(img))
    assert_bitwise(oe.float(), mt.Resize(size, mode="nearest-exact")(lab))


@pytest.mark.parametrize("zoom", [[1.3], [0.7], [1.2, 0.8, 1.0], [0.55, 1.71, 2.0]])
@pytest.mark.parametrize("keep_size", [True, False])
def test_zoom_matches_monai(inia, zoom, keep_size):
    img, lab, aff = inia
    z = zoom[0] if len(zoom) == 1 else zoom
    (oi, ol), out_aff, _, _ = cxx.zoom([img, lab], zoom, "trilinear", keep_size, "edge", ["", "nearest"], aff)
    ref = mt.Zoom(z, mode="trilinear", keep_size=keep_size)(MetaTensor(img, affine=aff))
    tsp.assert_image_close(oi, ref)
    assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-6)
    assert ol.dtype == torch.int16
    assert_bitwise(ol.float(), mt.Zoom(z, mode="nearest", keep_size=keep_size)(lab))
    (oa,), _, _, _ = cxx.zoom([img], zoom, "area", keep_size, "edge")
    assert_bitwise(oa, mt.Zoom(z, mode="area", keep_size=keep_size)(img))
    for pad in (["constant", "reflect", "symmetric", "wrap", "replicate"] if keep_size else []):
        (op,), _, _, _ = cxx.zoom([lab], zoom, "nearest", True, pad)
        assert_bitwise(op.float(), mt.Zoom(z, mode="nearest", padding_mode=pad)(lab))


def test_zoom_nearest_table_fallback_like_monai():
    """6 -> 246 voxels: float32 interpolate gives an index table no affine map reproduces (see
    spatial._nearest_rule); C++ gathers with the table, bit-identical to MONAI."""
    x = torch.arange(6 * 5 * 4, dtype=torch.int16).view(1, 6, 5, 4)
    (out,), _, _, _ = cxx.zoom([x], [41.0, 1.0, 1.0], "nearest", False, "edge")
    assert out.shape == (1, 246, 5, 4)
    assert_bitwise(out.float(), mt.Zoom((41.0, 1.0, 1.0), mode="nearest", keep_size=False)(x))


@pytest.mark.parametrize("spatial_axis", [[], [0], [2], [-1], [0, 2]])
def test_flip_bitwise_like_monai(inia, spatial_axis):
    img, lab, aff = inia
    (oi, ol), out_aff, _, _ = cxx.flip([img, lab], spatial_axis, [], aff)
    axis = spatial_axis or None
    ref = mt.Flip(axis)(MetaTensor(img, affine=aff))
    assert_bitwise(oi, ref)
    assert_bitwise(ol, mt.Flip(axis)(lab))
    assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8])
def test_exact_maps_take_bool_and_int8(dtype):
    """bool / int8 (no resample kernel of their own) go through as bytes: Flip, Rotate90 and
    Orientation equal torch.flip / torch.rot90 / MONAI's Orientation in the input's dtype."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-100, 100, (2, 2, 5, 6, 7), generator=g).to(dtype)
    (f,), _, _, _ = cxx.flip([x], [0, 2], [], None)
    assert f.dtype == dtype and torch.equal(f, torch.flip(x, (2, 4)))
    (r,), _, _, _ = cxx.rotate90([x[:, :, :, :, :6]], 1, [1, 2])
    assert r.dtype == dtype and torch.equal(r, torch.rot90(x[:, :, :, :, :6], 1, (3, 4)))
    aff = torch.diag(torch.tensor([-1.0, 1.0, 1.0, 1.0], dtype=torch.float64))
    (o,), _, _, _ = cxx.orientation([x[0]], "RAS", False, [], aff)
    ref = mt.Orientation("RAS")(MetaTensor(x[0].to(torch.int16), affine=aff))
    assert o.dtype == dtype and torch.equal(o.to(torch.int16), ref.as_tensor())


@pytest.mark.parametrize("k", [-1, 1, 2, 3])
@pytest.mark.parametrize("axes", [[0, 1], [1, 2], [2, 0]])
def test_rotate90_bitwise_like_monai(inia, k, axes):
    img, lab, _ = inia
    (oi, ol), _, _, _ = cxx.rotate90([img, lab], k, axes)
    assert_bitwise(oi, mt.Rotate90(k, axes)(img))
    assert_bitwise(ol, torch.rot90(lab, k, [a + 1 for a in axes]))


def test_batch_and_rank():
    """A (C, D, H, W) input comes back 4-D; a batch equals its samples transformed one by one."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 2, 9, 10, 11, generator=g)
    (batch,), _, maps, _ = cxx.affine([x], [0.2], [], [1.0, -0.5], [1.1], [], "bilinear", "zeros", False)
    assert maps.shape == (3, 4, 4)
    for i in range(3):
        (one,), _, _, _ = cxx.affine([x[i]], [0.2], [], [1.0, -0.5], [1.1], [], "bilinear", "zeros", False)
        assert one.dim() == 4 and torch.equal(one, batch[i])


# ---------------- random transforms ----------------
def test_rand_affine_draws_equal_python_and_samples_match_monai(inia):
    img, lab, _ = inia
    imgs, labs = torch.stack([img, img.flip(1), img.flip(3)]), torch.stack([lab, lab.flip(1), lab.flip(3)])
    ranges = [[0.4, 0.2, 0.3], [0.1, 0.05], [-4.0, 4.0, -3.0, 1.0], [-0.2, 0.2, -0.1, 0.15]]
    paired = [0, 0, 1, 1]
    py_ranges = dict(rotate_range=(0.4, 0.2, 0.3), shear_range=(0.1, 0.05), translate_range=((-4, 4), (-3, 1)),
                     scale_range=((-0.2, 0.2), (-0.1, 0.15)))
    seed, size = 11, [80, 96, 60]
    (oi, ol), _, maps, _, u, gates, params = cxx.rand_affine(
        [imgs, labs], 0.8, *ranges, paired, size, "bilinear", "reflection", seed, 0, False, ["", "nearest"])
    py = vt.RandAffine(prob=0.8, spatial_size=size, padding_mode="reflection", **py_ranges)
    pu = py.draw_params(3, 0, seed)
    assert torch.equal(u, pu) and gates.tolist() == list(py._gates(pu))
    assert 0 < int(gates.sum())
    py_params = py.parameters(pu)
    names = ("rotate_params", "shear_params", "translate_params", "scale_params")
    for i, p in enumerate(py_params):
        flat = [] if p is None else [v for n in names for v in p[n]]
        assert params[i].tolist() == flat
    np.testing.assert_allclose(cxx.rand_affine_matrices(3, 0.8, *ranges, paired, seed, 0).numpy(),
                               py.centred_matrices(pu), rtol=0, atol=1e-14)
    geom = py._geometry(tuple(img.shape[1:]), 3, pu, py._options(), size)
    np.testing.assert_allclose(maps[:, :3].numpy(), geom.mats.numpy(), rtol=0, atol=1e-11)
    for i, p in enumerate(py_params):
        if p is None:
            continue
        tsp.assert_image_close(oi[i], mt.Affine(**p, spatial_size=size, padding_mode="reflection",
                                                image_only=True)(imgs[i]))
        tsp.assert_labels_match(ol[i], mt.Affine(**p, spatial_size=size, mode="nearest", padding_mode="reflection",
                                                 image_only=True)(labs[i]))


def test_rand_rotate_draws_equal_python_and_samples_match_monai(ch2aal):
    img, lab, _ = ch2aal
    x, y = torch.stack([img, img.flip(2)]), torch.stack([lab, lab.flip(2)])
    (oi, ol), _, _, _, u, gates, params = cxx.rand_rotate(
        [x, y], [0.3], [0.1, 0.2], [0.2], 1.0, True, "bilinear", "zeros", False, 2, 0, False, ["", "nearest"])
    py = vt.RandRotate(range_x=0.3, range_y=(0.1, 0.2), range_z=0.2, prob=1.0, padding_mode="zeros")
    pu = py.draw_params(2, 0, 2)
    assert torch.equal(u, pu) and bool(gates.all())
    angles = py.angles(pu)
    assert [p.tolist() for p in params] == angles and angles[0] != angles[1]
    assert oi.dtype == torch.float32 and ol.dtype == torch.uint8
    for i, ang in enumerate(angles):
        tsp.assert_image_close(oi[i], mt.Rotate(ang, padding_mode="zeros")(x[i]))
        tsp.assert_labels_match(ol[i], mt.Rotate(ang, mode="nearest", padding_mode="zeros")(y[i]))


def test_rand_flip_and_rand_rotate90_draws_equal_python(inia):
    lab = inia[1]
    x = torch.stack([lab[:, i:i + 60, 10 + i:70 + i, :50] for i in range(6)])  # (6, 1, 60, 60, 50)
    (out,), _, _, _, u, gates, _ = cxx.rand_flip([x], 0.5, [0, 2], 3, 0, False)
    py = vt.RandFlip(prob=0.5, spatial_axis=(0, 2))
    pu = py.draw_params(6, 0, 3)
    assert torch.equal(u, pu) and gates.tolist() == list(py._gates(pu)) and 0 < int(gates.sum()) < 6
    for i in range(6):
        assert torch.equal(out[i], torch.flip(x[i], [1, 3]) if gates[i] else x[i])
    (out,), _, _, _, u, gates, params = cxx.rand_rotate90([x], 0.8, 3, [0, 1], 4, 0, False)
    py = vt.RandRotate90(prob=0.8, max_k=3, spatial_axes=(0, 1))
    pu = py.draw_params(6, 0, 4)
    ks = py._ks(pu)
    assert torch.equal(u, pu) and [int(p.item()) for p in params] == ks and len(set(ks)) > 1
    for i in range(6):
        assert_bitwise(out[i], mt.Rotate90(ks[i], (0, 1))(x[i]))


def test_random_draws_per_sample_independent_of_batch(ch2aal):
    """Sample first_sample + i draws the same whatever the batch: samples 2, 3 of a batch of 4
    equal a batch of 2 with first_sample=2, uniforms and outputs."""
    img = ch2aal[0].float()
    x = torch.stack([img, img.flip(1), img.flip(2), img.flip(3)])
    args = ([0.4], [0.2], [0.3], [], [0, 0, 0, 0], [], "bilinear", "border")
    (full,), _, _, _, u4, _, _ = cxx.rand_affine([x], 0.7, *args, 9, 0, False)
    (part,), _, _, _, u2, _, _ = cxx.rand_affine([x[2:]], 0.7, *args, 9, 2, False)
    assert torch.equal(u4[2:], u2) and torch.equal(full[2:], part)
    assert not torch.equal(u4[0], u4[1])


def test_prob_gates_every_sample(ch2aal):
    img = ch2aal[0].float()
    x = torch.stack([img, img.flip(1), img.flip(2)])
    (off,), _, _, _, _, gates, params = cxx.rand_rotate([x], [0.5], [0.5], [0.5], 0.0, True, "bilinear", "border",
                                                       False, 5, 0, False)
    assert not bool(gates.any()) and all(p.tolist() == [0.0, 0.0, 0.0] for p in params)
    assert torch.equal(off, x)  # the identity map samples voxel centres exactly
    (on,), _, _, _, _, gates, params = cxx.rand_rotate([x], [0.5], [0.5], [0.5], 1.0, True, "bilinear", "border",
                                                      False, 5, 0, False)
    assert bool(gates.all()) and all(p.abs().sum() > 0 for p in params)
    for i in range(3):
        tsp.assert_image_close(on[i], mt.Rotate(params[i].tolist())(x[i]))


def test_share_batch_params_like_python(ch2aal):
    img = ch2aal[0].float()
    x = torch.stack([img, img.flip(1), img.flip(2)])
    (out,), _, maps, _, u, _, _ = cxx.rand_rotate([x], [0.5], [0.5], [0.5], 1.0, True, "bilinear", "border", False,
                                                  5, 1, True)
    py = vt.RandRotate(0.5, 0.5, 0.5, prob=1.0).share_batch_params()
    assert torch.equal(u, py.draw_params(3, 1, 5)) and torch.equal(u[0], u[2])
    assert torch.equal(maps[0], maps[1]) and torch.equal(maps[0], maps[2])
    (one,), _, _, _, _, _, _ = cxx.rand_rotate([x[2:]], [0.5], [0.5], [0.5], 1.0, True, "bilinear", "border",
                                               False, 5, 1, False)
    assert torch.equal(out[2], one[0])


# ---------------- bad arguments ----------------
def test_bad_arguments_name_the_argument():
    x = torch.zeros(1, 4, 5, 6)
    cases = [
        (lambda: cxx.affine([x], [], [], [], [], [], "bogus", "zeros", False), "mode"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "edge", False), "padding_mode"),
        (lambda: cxx.affine([x], [0.1, 0.2, 0.3, 0.4], [], [], [], [], "bilinear", "zeros", False), "rotate_params"),
        (lambda: cxx.affine([x], [], [], [], [], [1, 2], "bilinear", "zeros", False), "spatial_size"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False, ["", "nearest"]), "modes"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False, ["cubic"]), r"modes\[0\]"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False, [], torch.eye(3)), "affine"),
        (lambda: cxx.affine([x[0]], [], [], [], [], [], "bilinear", "zeros", False), r"inputs\[0\]"),
        (lambda: cxx.affine([x, torch.zeros(1, 4, 5, 7)], [], [], [], [], [], "bilinear", "zeros", False),
         r"inputs\[1\]"),
        (lambda: cxx.flip([x], [3]), "spatial_axis"),
        (lambda: cxx.rotate90([x], 1, [1, -2]), "spatial_axes"),
        (lambda: cxx.rotate([x], [0.1, 0.2], True, "bilinear", "border", False), "angle"),
        (lambda: cxx.resize([x], [3, 3], "area"), "spatial_size"),
        (lambda: cxx.resize([x], [3, 3, 3], "cubic"), "mode"),
        (lambda: cxx.zoom([x], [0.0], "area", True, "edge"), "zoom"),
        (lambda: cxx.zoom([x], [1.5], "area", True, "border"), "padding_mode"),
        (lambda: cxx.spacing([x], [], "bilinear", "border", False, False, False), "pixdim"),
        (lambda: cxx.spacing([x], [1.0], "bilinear", "border", False, False, False, [],
                             torch.diag(torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=torch.float64))), "singular"),
        (lambda: cxx.orientation([x], "RAX", False), "axcodes"),
        (lambda: cxx.orientation([x], "RRS", False), "axcodes"),
        (lambda: cxx.rand_flip([x], 1.5, [], 0, 0, False), "prob"),
        (lambda: cxx.rand_rotate90([x], 0.5, 0, [0, 1], 0, 0, False), "max_k"),
        (lambda: cxx.rand_rotate([x], [float("nan")], [0.0], [0.0], 0.5, True, "bilinear", "border", False, 0, 0,
                                 False), "range_x"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
    with pytest.raises(NotImplementedError, match="bicubic"):
        cxx.resize([x], [3, 3, 3], "bicubic")
    with pytest.raises(ValueError, match="spatial_axes"):  # a quarter turn would change a sample's shape
        cxx.rand_rotate90([torch.zeros(2, 1, 4, 5, 6)], 1.0, 3, [0, 1], 0, 0, False)


# ---------------- CUDA twin ----------------
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: the C++ transforms' CUDA path is compared with the CPU path on a GPU machine")
def test_cuda_matches_cpu(inia):
    """The same calls on CUDA tensors (maps built on the host, copied non-blocking) give the CPU
    results: images within IMG_TOL, labels within LABEL_TIES, the same affines on the affine's device."""
    img, lab, aff = inia
    calls = [
        lambda xs, a: cxx.affine(xs, *_affine_args(tsp.AFFINE_KW), [70, 90, 61], "bilinear", "zeros", False,
                                 ["", "nearest"], a),
        lambda xs, a: cxx.zoom(xs, [1.2, 0.8, 1.0], "trilinear", True, "edge", ["", "nearest"], a),
        lambda xs, a: cxx.resize(xs, [70, 90, 61], "area", ["", "nearest"], a),
        lambda xs, a: cxx.spacing(xs, [1.3, 1.1, 1.7], "bilinear", "border", False, False, False, ["", "nearest"], a),
        lambda xs, a: cxx.orientation(xs, "PLI", False, None, a),
        lambda xs, a: cxx.rand_affine(xs, 0.9, [0.3], [0.1], [3.0], [0.1], [0, 0, 0, 0], [], "bilinear",
                                      "border", 7, 0, False, ["", "nearest"], a)[:4],
    ]
    for call in calls:
        (ci, cl), caff, _, _ = call([img, lab], aff)
        (gi, gl), gaff, _, _ = call([img.cuda(), lab.cuda()], aff.cuda())
        assert gi.is_cuda and gaff.is_cuda and gl.dtype == cl.dtype
        tsp.assert_image_close(gi.cpu(), ci)
        tsp.assert_labels_match(gl.cpu(), cl)
        assert torch.allclose(gaff.cpu(), caff, rtol=0, atol=1e-12)
