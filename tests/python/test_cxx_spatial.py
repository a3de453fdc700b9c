"""voxaug's C++ spatial transforms (torch_ext/include/voxaug/spatial_transforms.h) vs MONAI and
vs python/voxaug/spatial.py, through the test shim tests/torch/spatial_transforms_shim.cpp
(torch.ops.voxaug_cxx_test_spatial; each op constructs the C++ class and calls it).

Builds nothing: loads libvoxaug_cxx_spatial_shim.so from the build dir named by
VOXAUG_BUILD_DIR (default <repo>/build) and skips when it is absent (build the
voxaug_cxx_spatial_shim target).

What is compared, on the real volumes of mricron-data (the fixtures of test_spatial.py and
test_spacing.py, their tolerances imported):
- Spacing (ch2better + a label; several pixdims, an oblique affine with diagonal / scale_extent /
  align_corners, min_pixdim / max_pixdim bounds, recompute_affine): shapes and affines as
  MONAI's within 1e-6 (recompute_affine's 1e-12), images within test_spacing's IMG_TOL (MONAI
  resamples in float64, voxaug in float32), labels up to half-voxel ties.
- Orientation (inia19 T1 + NeuroMaps labels; four axcodes, LPS-style custom labels, and
  as_closest_canonical on an oblique permuted affine): data bit-identical, affines as MONAI's to
  the last bits of float64.
- Affine, Rotate, Resize, Zoom, Flip, Rotate90 with fixed parameters, image + label in one call:
  images within test_spatial's IMG_TOL, labels within LABEL_TIES; Flip / Rotate90 and Resize /
  Zoom nearest and 'area' bit-identical (the same tolerances as the Python transforms get).
  Resize size_mode 'longest' and align_corners, Zoom align_corners and the constant pad value
  likewise; Resize anti_aliasing bit-identical to Python's Resize (the same gaussian_smooth op)
  and within test_spatial's AA_TOL of MONAI.
- Random transforms: for a seed, the C++ draw (uniforms, gates, parameters, centred matrices,
  maps) equals the Python transform's draw_params / parameters / angles / _ks for that seed;
  each sample's output equals MONAI's deterministic transform run with the drawn parameters;
  a sample's draw does not depend on the batch (first_sample), prob 0 / 1 gate every sample
  off / on, share_batch_params gives every sample sample first_sample's draw. RandZoom's outputs
  are also bit-identical to Python's RandZoom replaying the same draw.
- The constructor arguments of issue 3: rotate_order (Affine, Rotate: MONAI's create_rotate
  orders, extrinsic and intrinsic), Affine's explicit `affine` (vs MONAI and Python) and
  `normalized` (vs MONAI and Python), Resize / Zoom / RandZoom `dtype` (the
  precision of interpolate's nearest table, 'area' and anti-aliasing; float64 picks other
  source voxels than float32 for 84 -> 100: bit-identical to MONAI's and Python's with that
  dtype, None = each input's own), Spacing's output_spatial_shape (vs MONAI and Python).
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
import spatial_checks as checks  # noqa: E402
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


@pytest.mark.parametrize("order", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_affine_integer_modes_are_python_and_monai(ch2aal, order, padding_mode):
    """MONAI's integer modes as the strings "0" .. "5": the same kernels, maps and paddings as
    Python's Affine(mode=k) ('zeros' -> scipy's 'constant', the kernel's cutoff), bit for bit;
    a label given "nearest" beside them keeps grid_sample's zeros; and MONAI's Affine (scipy)
    agrees away from the edge planes, where rounding decides scipy's 'constant' cut."""
    img, lab, _ = ch2aal
    x = img.float()[:, 20:60, 30:64, 25:61]
    y = lab[:, 20:60, 30:64, 25:61]
    kw = dict(rotate_params=(0.2, 0.1, -0.3), scale_params=(1.1, 0.9, 1.0), padding_mode=padding_mode)
    (out, ol), _, _, _ = cxx.affine([x, y], [0.2, 0.1, -0.3], [], [], [1.1, 0.9, 1.0], [], str(order),
                                    padding_mode, False, ["", "nearest"])
    assert torch.equal(out, plain(vt.Affine(**kw, mode=order, image_only=True)(x)))
    assert torch.equal(ol, plain(vt.Affine(**kw, mode="nearest", image_only=True)(y)))
    ref = mt.Affine(**kw, mode=order, image_only=True)(x).as_tensor().double()
    rng = float(ref.max() - ref.min())
    off = (out.double() - ref).abs() > 1e-4 * rng
    # any difference sits where scipy's 'constant' cut put one side at 0 (rounding at the edge)
    assert bool(((ref == 0) | (out == 0))[off].all()), int(off.sum())
    assert int(off.sum()) <= 0.01 * out.numel()


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
    (out,), _, _, _, u, gates, params = cxx.rand_axis_flip([x], 0.8, 5, 0, False)
    py = vt.RandAxisFlip(prob=0.8)
    pu = py.draw_params(6, 0, 5)
    axes = py._axes(pu)
    assert torch.equal(u, pu) and [int(p.item()) for p in params] == [-1 if a is None else a for a in axes]
    assert len({a for a in axes if a is not None}) > 1
    for i, a in enumerate(axes):
        assert_bitwise(out[i], x[i] if a is None else mt.Flip(spatial_axis=a)(x[i]))
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


# ---------------- RandZoom ----------------
# Ranges that cross 1 on every axis: some samples crop (keep_size), some pad, per axis.
RZ_MIN, RZ_MAX = [0.6, 0.75, 0.8], [1.4, 1.3, 1.25]


@pytest.mark.parametrize("mode, align_corners, padding_mode", [("trilinear", None, "edge"), ("area", None, "constant"),
                                                               ("trilinear", True, "reflect"),
                                                               ("nearest", None, "wrap")])
def test_rand_zoom_draws_and_outputs_equal_python_and_samples_match_monai(inia, mode, align_corners, padding_mode):
    """A batch of 4 (T1 + labels, flipped copies), prob 0.7 (seed 0 gates sample 1 off): the C++
    draw equals Python's RandZoom draw_params / zooms; image (mode) and label (nearest) are
    bit-identical to Python's RandZoom replaying that draw (one launch + per-sample padding, or per
    sample for 'area'); each sample matches MONAI's Zoom with its factors (linear within IMG_TOL,
    'area' and nearest bit-identical) and its affine MONAI's."""
    img, lab, aff = inia
    x, y = torch.stack([img, img.flip(1), img.flip(2), img.flip(3)]), torch.stack([lab, lab.flip(1), lab.flip(2),
                                                                                  lab.flip(3)])
    (oi, ol), out_aff, maps, _, u, gates, params = cxx.rand_zoom(
        [x, y], 0.7, RZ_MIN, RZ_MAX, mode, padding_mode, align_corners, True, 0.0, 0, 0, False, ["", "nearest"], aff)
    kw = dict(prob=0.7, min_zoom=tuple(RZ_MIN), max_zoom=tuple(RZ_MAX), padding_mode=padding_mode)
    py = vt.RandZoom(mode=mode, align_corners=align_corners, **kw)
    pu = py.draw_params(4, 0, 0)
    zooms = py.zooms(pu)
    assert torch.equal(u, pu) and gates.tolist() == list(py._gates(pu)) == [True, False, True, True]
    assert [p.tolist() for p in params] == zooms and zooms[1] == [1.0, 1.0, 1.0]
    assert any(z[a] < 1 for z in zooms for a in range(3)) and any(z[a] > 1 for z in zooms for a in range(3))
    assert oi.shape == x.shape and ol.dtype == torch.int16 and maps.shape == (4, 4, 4)
    assert_bitwise(oi, plain(py.apply(x, params=pu)))
    assert_bitwise(ol, plain(vt.RandZoom(mode="nearest", **kw).apply(y, params=pu)))
    for i, z in enumerate(zooms):
        ref = mt.Zoom(z, mode=mode, padding_mode=padding_mode, align_corners=align_corners)(MetaTensor(x[i],
                                                                                                      affine=aff))
        if mode in ("area", "nearest"):
            assert_bitwise(oi[i], ref)
        else:
            tsp.assert_image_close(oi[i], ref)
        assert_bitwise(ol[i].float(), mt.Zoom(z, mode="nearest", padding_mode=padding_mode)(y[i]))
        assert torch.allclose(out_aff[i], ref.affine.double(), rtol=0, atol=1e-9)


def test_rand_zoom_batch_options_and_table_fallback(inia):
    """Sample first_sample + i draws the same in any batch; share_batch_params gives every sample
    sample first_sample's factors; 2 values: (z0, z0, z1); keep_size=False with one shape for the
    batch; constant padding with pad_value (MONAI's `value`); the nearest table fallback (6 -> 246
    voxels, see test_zoom_nearest_table_fallback_like_monai) per sample, bit-identical to MONAI."""
    img, lab, _ = inia
    x = torch.stack([img, img.flip(1), img.flip(2), img.flip(3)])
    args = (RZ_MIN, RZ_MAX, "trilinear", "edge", None, True, 0.0, 3)
    (full,), _, _, _, u4, _, _ = cxx.rand_zoom([x], 1.0, *args, 0, False)
    (part,), _, _, _, u2, _, _ = cxx.rand_zoom([x[2:]], 1.0, *args, 2, False)
    assert torch.equal(u4[2:], u2) and torch.equal(full[2:], part) and not torch.equal(u4[0], u4[1])
    (shared,), _, maps, _, u, _, _ = cxx.rand_zoom([x[:3]], 1.0, *args, 1, True)
    assert torch.equal(u[0], u4[1]) and torch.equal(u[2], u4[1]) and torch.equal(maps[0], maps[2])
    assert torch.equal(shared[0], cxx.rand_zoom([x[:3]], 1.0, *args, 1, False)[0][0][0])
    _, _, _, _, u, _, params = cxx.rand_zoom([x[:2]], 1.0, [0.8, 1.1], [0.9, 1.2], "area", "edge", None, True, 0.0,
                                             4, 0, False)
    py = vt.RandZoom(prob=1.0, min_zoom=(0.8, 1.1), max_zoom=(0.9, 1.2))
    z = py.zooms(py.draw_params(2, 0, 4))
    assert [p.tolist() for p in params] == z and z[0][0] == z[0][1] != z[0][2]
    (same,), _, _, _, _, _, params = cxx.rand_zoom([x[:2]], 1.0, [0.7], [0.7], "trilinear", "edge", None, False, 0.0,
                                                   1, 0, False)
    assert same.shape == (2, 1, 58, 72, 44)
    for i in range(2):
        tsp.assert_image_close(same[i], mt.Zoom(0.7, mode="trilinear", keep_size=False)(x[i]))
    (padded,), _, _, _, _, _, params = cxx.rand_zoom([lab[None].expand(2, -1, -1, -1, -1)], 1.0, [0.6], [0.8],
                                                     "nearest", "constant", None, True, -7.0, 2, 0, False)
    assert (padded == -7).any()
    for i in range(2):
        assert_bitwise(padded[i].float(), mt.Zoom(params[i].tolist(), mode="nearest", padding_mode="constant",
                                                  value=-7)(lab))
    t = torch.randn(2, 1, 6, 9, 7, generator=torch.Generator().manual_seed(4))
    (out,), _, _, _, _, _, _ = cxx.rand_zoom([t], 1.0, [41.0, 1.0, 1.0], [41.0, 1.0, 1.0], "nearest", "edge", None,
                                             False, 0.0, 0, 0, False)
    assert out.shape == (2, 1, 246, 9, 7)
    for i in range(2):
        assert_bitwise(out[i], mt.Zoom((41.0, 1.0, 1.0), mode="nearest", keep_size=False)(t[i]))


# ---------------- Resize: size_mode "longest", align_corners, anti-aliasing; Zoom: pad value ----------------
def test_resize_longest_and_align_corners_like_monai(ch2aal, inia):
    img, lab, _ = ch2aal
    (ol,), _, _, _ = cxx.resize([lab], [90], "nearest", size_mode="longest")
    ref = mt.Resize(90, size_mode="longest", mode="nearest")(lab)
    assert ol.shape == ref.shape and ol.dtype == torch.uint8
    assert_bitwise(ol.float(), ref)
    (oi,), _, _, _ = cxx.resize([img], [50], "trilinear", size_mode="longest")
    tsp.assert_image_close(oi, mt.Resize(50, size_mode="longest", mode="trilinear")(img))
    t1, t1_lab, _ = inia
    for size in ((70, 90, 61), (100, 120, 80)):
        (oi, ol), _, _, _ = cxx.resize([t1, t1_lab], list(size), "trilinear", ["", "nearest"], align_corners=True)
        ref = mt.Resize(size, mode="trilinear", align_corners=True)(t1)
        tsp.assert_image_close(oi, ref)
        assert_bitwise(oi, plain(vt.Resize(size, mode="trilinear", align_corners=True)(t1)))
        assert not torch.equal(oi, cxx.resize([t1], list(size), "trilinear")[0][0])
        assert_bitwise(ol.float(), mt.Resize(size, mode="nearest")(t1_lab))  # nearest ignores align_corners


@pytest.mark.parametrize("size", [(10, 40, 30), (46, 9, 7), (-1, 5, 60), (23, 19, 31)])
@pytest.mark.parametrize("sigma", [[], [1.0], [0.5, 0.0, 2.0]])
def test_resize_anti_aliasing_like_python_and_monai(size, sigma):
    """MONAI's rule (test_spatial's test_resize_anti_aliasing_matches_monai): smoothing only when
    some axis shrinks, sigma (in / out - 1) / 2 or the given one on shrinking axes; any mode.
    The same gaussian_smooth op as Python's Resize: bit-identical to it; MONAI within AA_TOL."""
    x = torch.randn(2, 1, 23, 19, 30, generator=torch.Generator().manual_seed(3))
    lab = (x > 0.5).to(torch.int16)
    out_size = [o if o > 0 else s for o, s in zip(size, x.shape[2:])]
    sig = sigma * 3 if len(sigma) == 1 else sigma or [None] * 3
    shrinks = any(o < s for o, s in zip(out_size, x.shape[2:]))
    smoothed = any(o < s and (g is None or g > 0) for o, s, g in zip(out_size, x.shape[2:], sig))
    py_sigma = None if not sigma else sigma[0] if len(sigma) == 1 else tuple(sigma)
    for mode in ("area", "trilinear", "nearest"):
        (ours, ol), _, _, _ = cxx.resize([x, lab], list(size), mode, ["", "nearest"], anti_aliasing=True,
                                         anti_aliasing_sigma=sigma)
        kw = dict(mode=mode, anti_aliasing=True, anti_aliasing_sigma=py_sigma)
        assert_bitwise(ours, plain(vt.Resize(size, **kw)(x)))
        for i in range(2):
            checks.assert_image_close(ours[i], mt.Resize(size, **kw)(x[i]), tsp.AA_TOL)
        assert torch.equal(ours, cxx.resize([x], list(size), mode)[0][0]) != smoothed, mode
        # a label resized with nearest goes through the smoothing too (MONAI smooths whenever an
        # axis shrinks, even with sigma 0 there): floating
        assert ol.dtype == (torch.float32 if shrinks else torch.int16)
        assert_bitwise(ol, plain(vt.Resize(size, mode="nearest", anti_aliasing=True,
                                           anti_aliasing_sigma=py_sigma)(lab)))


def test_resize_anti_aliasing_float16_rounds_once_like_monai():
    """A float16 image: smoothing and interpolation run in float32 (MONAI's dtype) and round to
    float16 once at the end, so the result is MONAI's float32 result rounded to float16 (up to a
    float16 rounding tie flipped by MONAI's own float32 rounding), in C++ and in Python; the
    session-8 review found 512 of 3640 voxels one float16 step off when the smoothed volume was
    rounded to float16 before the interpolation."""
    x = (torch.rand(1, 1, 24, 26, 28, generator=torch.Generator().manual_seed(5)) * 1000).half()
    for mode in ("trilinear", "nearest", "area"):
        (ours,), _, _, _ = cxx.resize([x], [10, 13, 28], mode, anti_aliasing=True)
        assert ours.dtype == torch.float16
        assert_bitwise(ours, plain(vt.Resize((10, 13, 28), mode=mode, anti_aliasing=True)(x)))
        ref = mt.Resize((10, 13, 28), mode=mode, anti_aliasing=True)(x[0].float())
        ref16 = plain(ref).half().unsqueeze(0)
        off = (ours.float() - ref16.float()).abs()
        step = torch.finfo(torch.float16).eps * ref16.float().abs().clamp_min(1.0)
        assert (off <= step).all(), (mode, off.max())
        assert (off > 0).float().mean() < 0.01, (mode, (off > 0).float().mean())


def test_resize_and_zoom_bounds_and_pad_value_dtype():
    """Resize with size_mode "longest" refuses output axes past 2^31 - 1 (it asked for memory it
    could not get); a constant pad value an integer output cannot hold is refused, naming
    pad_value; max_pixdim inf means no upper bound (as NaN)."""
    x = torch.zeros(1, 1, 4, 5, 6)
    for size in ([2 ** 31], [2 ** 62]):
        with pytest.raises(ValueError, match="spatial_size"):
            cxx.resize([x], size, "area", size_mode="longest")
    with pytest.raises(ValueError, match="spatial_size"):
        cxx.resize([x], [2 ** 31, 3, 3], "area")
    lab = torch.ones(1, 1, 10, 10, 10, dtype=torch.int16)
    for bad in (0.5, 40000.0):
        with pytest.raises(ValueError, match="pad_value"):
            cxx.zoom([lab], [0.5], "nearest", True, "constant", pad_value=bad)
    (ok,), _, _, _ = cxx.zoom([lab], [0.5], "nearest", True, "constant", pad_value=-7.0)
    assert ok.dtype == torch.int16 and int(ok.min()) == -7 and int(ok.max()) == 1
    aff = torch.diag(torch.tensor([0.5, 0.5, 0.5, 1.0], dtype=torch.float64))
    img = torch.rand(1, 1, 12, 12, 12)
    (kept,), kept_aff, _, _ = cxx.spacing([img], [0.3], "bilinear", "border", False, False, False, [], aff,
                                          max_pixdim=[float("inf")] * 3)
    (nan_kept,), _, _, _ = cxx.spacing([img], [0.3], "bilinear", "border", False, False, False, [], aff,
                                       max_pixdim=[float("nan")] * 3)
    assert kept.shape == img.shape and torch.equal(kept_aff, aff)  # 0.5 lies in [0.3, inf]
    assert nan_kept.shape != img.shape  # NaN: the target alone


def test_zoom_pad_value_and_align_corners_like_monai(inia):
    img, lab, aff = inia
    for zoom in ([0.7], [0.55, 1.71, 0.9]):
        z = zoom[0] if len(zoom) == 1 else zoom
        (op,), _, _, _ = cxx.zoom([lab], zoom, "nearest", True, "constant", pad_value=-5.0)
        assert (op == -5).any()
        assert_bitwise(op.float(), mt.Zoom(z, mode="nearest", padding_mode="constant", value=-5)(lab))
        (oi,), out_aff, _, _ = cxx.zoom([img], zoom, "trilinear", True, "edge", None, aff, align_corners=True)
        ref = mt.Zoom(z, mode="trilinear", align_corners=True)(MetaTensor(img, affine=aff))
        tsp.assert_image_close(oi, ref)
        assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-6)
        assert_bitwise(oi, plain(vt.Zoom(z, mode="trilinear", align_corners=True)(img)))


# ---------------- Spacing min/max_pixdim, recompute_affine; Orientation labels ----------------
@pytest.mark.parametrize("pixdim, mn, mx", [([1.0], [0.4], []), ([1.0], [0.6, 0.45], [1.2]),
                                            ([0.4, 0.3, 1.0], [], [0.6]), ([1.2], [float("nan"), 0.4], [])])
def test_spacing_min_max_pixdim_like_monai(ch2better, pixdim, mn, mx):
    """MONAI 1.5's bounds: an axis whose 0.5 mm spacing lies in [min(min_pixdim, pixdim),
    max(max_pixdim, pixdim)] keeps it (per axis from the first, NaN / missing: the target)."""
    img, lab = ch2better
    kw = dict(min_pixdim=[None if np.isnan(v) else v for v in mn] or None, max_pixdim=mx or None)
    m = mt.Spacingd(["img", "lab"], pixdim=pixdim, mode=("bilinear", "nearest"), **kw)({"img": img, "lab": lab})
    (oi, ol), aff, _, _ = cxx.spacing([plain(img), plain(lab)], pixdim, "bilinear", "border", False, False, False,
                                      ["", "nearest"], img.affine, min_pixdim=mn, max_pixdim=mx)
    ts._check_spacing(m["img"], MetaTensor(oi, affine=aff), m["lab"], MetaTensor(ol, affine=aff))
    (plain_out,), _, _, _ = cxx.spacing([plain(img)], pixdim, "bilinear", "border", False, False, False, [],
                                        img.affine)
    assert oi.shape != plain_out.shape  # the bounds changed the result


@pytest.mark.parametrize("align_corners", [False, True])
def test_spacing_recompute_affine_like_monai(ch2better, align_corners):
    """recompute_affine: MONAI replaces the affine by scale_affine(in size, out size,
    align_corners); the data as without it."""
    img, _ = ch2better
    m = mt.Spacing((1.5, 1.0, 0.7), recompute_affine=True, align_corners=align_corners)(img)
    (out,), aff, _, _ = cxx.spacing([plain(img)], [1.5, 1.0, 0.7], "bilinear", "border", align_corners, False, False,
                                    [], img.affine, recompute_affine=True)
    (same,), plain_aff, _, _ = cxx.spacing([plain(img)], [1.5, 1.0, 0.7], "bilinear", "border", align_corners, False,
                                           False, [], img.affine)
    assert torch.equal(out, same) and not torch.allclose(aff, plain_aff)
    assert out.shape == m.shape
    np.testing.assert_allclose(aff.numpy(), m.affine.numpy(), rtol=0, atol=1e-12)
    (_,), baff, _, _ = cxx.spacing([plain(img)[None].expand(2, -1, -1, -1, -1)], [1.5, 1.0, 0.7], "bilinear",
                                   "border", align_corners, False, False, [], img.affine.expand(2, 4, 4),
                                   recompute_affine=True)
    assert baff.shape == (2, 4, 4) and torch.equal(baff[1], aff)


LPS = ["R", "L", "A", "P", "I", "S"]


@pytest.mark.parametrize("axcodes", ["RAS", "LPS", "PLI"])
def test_orientation_custom_labels_like_monai(inia_meta, axcodes):
    """MONAI's labels argument (LPS-style (("R", "L"), ("A", "P"), ("I", "S")): 'R' is now the
    start of the first axis): data bit-identical, affine as MONAI's; differs from the default
    labels' result."""
    img, lab = inia_meta
    labels = tuple(zip(LPS[::2], LPS[1::2]))
    m = mt.Orientationd(["img", "lab"], axcodes=axcodes, labels=labels)({"img": img, "lab": lab})
    (oi, ol), aff, _, _ = cxx.orientation([plain(img), plain(lab)], axcodes, False, [], img.affine, labels=LPS)
    assert torch.equal(oi, m["img"].as_tensor()) and torch.equal(ol, m["lab"].as_tensor().to(torch.int16))
    assert ts._affine_close(aff, m["img"].affine)
    (default,), _, _, _ = cxx.orientation([plain(img)], axcodes, False, [], img.affine)
    assert not torch.equal(default, oi)


# ---------------- issue 3: rotate_order, Affine's affine / normalized, dtype, output_spatial_shape --------
def _check_affine_like_monai_and_python(img, lab, aff, kw, oi, ol, out_aff, meta):
    """C++ Affine outputs vs MONAI's Affine(**kw) (image, labels, returned affine: MONAI takes
    the matrix into its float32 grid dtype) and bit for bit vs Python's, metadata map too."""
    ref = mt.Affine(**kw, image_only=True)(MetaTensor(img, affine=aff))
    tsp.assert_image_close(oi, ref)
    tsp.assert_labels_match(ol, mt.Affine(**kw, mode="nearest", image_only=True)(lab))
    np.testing.assert_allclose(out_aff.numpy(), ref.affine.numpy(), atol=2e-6 * ref.affine.abs().max().item())
    py, py_meta = vt.Affine(**kw)(img)
    assert_bitwise(oi, py)
    np.testing.assert_allclose(meta[0].numpy(), py_meta.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("order", ["zyx", "ZXY", "xy", "Z"])
def test_affine_rotate_order_like_monai_and_python(inia, order):
    """MONAI's create_rotate in rotate_order (lower case: extrinsic, upper: intrinsic; angle i about
    order[i]): image / label as MONAI's, bit-identical to Python's Affine, metadata map as Python's."""
    img, lab, aff = inia
    rot = [0.3, -0.2, 0.25][:len(order)]
    kw = dict(rotate_params=rot, scale_params=(1.1, 0.9, 1.05), padding_mode="zeros", rotate_order=order)
    (oi, ol), out_aff, _, meta = cxx.affine([img, lab], rot, [], [], [1.1, 0.9, 1.05], [], "bilinear", "zeros", False,
                                            ["", "nearest"], aff, rotate_order=order)
    _check_affine_like_monai_and_python(img, lab, aff, kw, oi, ol, out_aff, meta)
    (xyz,), _, _, _ = cxx.affine([img], rot, [], [], [1.1, 0.9, 1.05], [], "bilinear", "zeros", False)
    if order not in ("xy", "Z"):  # three angles: the order changes the rotation
        assert not torch.equal(oi, xyz)
    (default,), _, _, _ = cxx.affine([img], rot, [], [], [1.1, 0.9, 1.05], [], "bilinear", "zeros", False,
                                     rotate_order="XYZ")
    assert torch.equal(default, xyz)


@pytest.mark.parametrize("order", ["zyx", "ZXY", "yzx"])
@pytest.mark.parametrize("keep_size", [True, False])
def test_rotate_rotate_order_like_monai_and_python(inia, order, keep_size):
    img, lab, aff = inia
    angle = [0.3, -0.2, 0.1]
    kw = dict(angle=angle, keep_size=keep_size, padding_mode="zeros", rotate_order=order)
    (oi, ol), out_aff, _, _ = cxx.rotate([img, lab], angle, keep_size, "bilinear", "zeros", False, ["", "nearest"],
                                         aff, rotate_order=order)
    ref = mt.Rotate(**kw)(MetaTensor(img, affine=aff))
    tsp.assert_image_close(oi, ref)  # keep_size=False: MONAI's output shape for this order
    tsp.assert_labels_match(ol, mt.Rotate(**kw, mode="nearest")(lab))
    assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-6)
    assert_bitwise(oi, plain(vt.Rotate(**kw)(img)))
    (xyz,), _, _, _ = cxx.rotate([img], angle, keep_size, "bilinear", "zeros", False)
    assert xyz.shape != oi.shape or not torch.equal(xyz, oi)


def _random_matrix(seed, scale, shift):
    """A centred matrix with random float64 entries: decimal ones (0.93, 2.13, ...) put whole
    planes of voxels on exact half-voxel ties, where MONAI's grid and voxaug's map may round
    either way; random entries put none there."""
    g = torch.Generator().manual_seed(seed)
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] += 0.08 * torch.randn(3, 3, generator=g, dtype=torch.float64)
    m[:3, :3] = torch.diag(torch.tensor(scale, dtype=torch.float64)) @ m[:3, :3]
    m[:3, 3] = shift * torch.randn(3, generator=g, dtype=torch.float64)
    return m


AFFINE_MATRIX = _random_matrix(7, (1.0, 1.0, 1.0), 3.0)
# in normalised units: about 2 / size per voxel (inia's 84 x 103 x 64)
NORMALIZED_MATRIX = _random_matrix(8, (2.07 / 84, 2.03 / 103, 1.97 / 64), 0.05)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("spatial_size", [None, (70, 90, 61)])
def test_affine_explicit_matrix_like_monai_and_python(inia, align_corners, spatial_size):
    """MONAI's `affine`: the given centred matrix, the parameters ignored; images / labels / the
    affine update as MONAI's, bit-identical to Python's Affine(affine=...)."""
    img, lab, aff = inia
    kw = dict(affine=AFFINE_MATRIX.numpy(), padding_mode="zeros", align_corners=align_corners,
              spatial_size=spatial_size)
    size = list(spatial_size or [])
    (oi, ol), out_aff, _, meta = cxx.affine([img, lab], [0.5], [0.1], [3.0], [1.2], size, "bilinear", "zeros",
                                            align_corners, ["", "nearest"], aff, affine_matrix=AFFINE_MATRIX)
    _check_affine_like_monai_and_python(img, lab, aff, kw, oi, ol, out_aff, meta)
    (no_params,), _, _, _ = cxx.affine([img], [], [], [], [], size, "bilinear", "zeros", align_corners,
                                       affine_matrix=AFFINE_MATRIX)
    assert torch.equal(no_params, oi)
    (f32,), _, _, _ = cxx.affine([img], [], [], [], [], size, "bilinear", "zeros", align_corners,
                                 affine_matrix=AFFINE_MATRIX.float())  # any real dtype, read as float64
    (f64,), _, _, _ = cxx.affine([img], [], [], [], [], size, "bilinear", "zeros", align_corners,
                                 affine_matrix=AFFINE_MATRIX.float().double())
    assert torch.equal(f32, f64)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("spatial_size", [None, (70, 90, 61)])
@pytest.mark.parametrize("built", [False, True])
def test_affine_normalized_like_monai(inia, align_corners, spatial_size, built):
    """normalized=True (MONAI's Resample(norm_coords=False)): the matrix maps centred output voxels
    to grid_sample's [-1, 1] input coordinates; given explicitly or built from parameters (a
    rotation scaled into normalised units). Images / labels / the returned affine (MONAI's
    compute_w_affine of the matrix) as MONAI's; Python's Affine bit-identical."""
    img, lab, aff = inia
    size = list(spatial_size or [])
    if built:
        params = dict(rotate_params=[0.3, 0.0, -0.2], scale_params=[2.07 / 84, 2.03 / 103, 1.97 / 64])
        args = ([0.3, 0.0, -0.2], [], [], params["scale_params"])
        extra = {}
    else:
        params = dict(affine=NORMALIZED_MATRIX.numpy())
        args = ([], [], [], [])
        extra = dict(affine_matrix=NORMALIZED_MATRIX)
    kw = dict(params, padding_mode="zeros", align_corners=align_corners, spatial_size=spatial_size, normalized=True)
    (oi, ol), out_aff, _, _ = cxx.affine([img, lab], *args, size, "bilinear", "zeros", align_corners,
                                         ["", "nearest"], aff, normalized=True, **extra)
    ref = mt.Affine(**kw, image_only=True)(MetaTensor(img, affine=aff))
    tsp.assert_image_close(oi, ref)
    tsp.assert_labels_match(ol, mt.Affine(**kw, mode="nearest", image_only=True)(lab))
    np.testing.assert_allclose(out_aff.numpy(), ref.affine.numpy(), rtol=0, atol=2e-6 * ref.affine.abs().max().item())
    (voxel,), _, _, _ = cxx.affine([img], *args, size, "bilinear", "zeros", align_corners, **extra)
    assert not torch.equal(voxel, oi)  # the same matrix read in voxel units
    # Python's Affine: the same maps (bit-identical outputs), MONAI's returned affine
    py, py_aff = vt.Affine(**kw)(MetaTensor(img, affine=aff))
    assert_bitwise(plain(py), oi)
    assert torch.equal(py.affine.double(), out_aff)
    assert_bitwise(vt.Affine(**kw, mode="nearest", image_only=True)(lab), ol)
    np.testing.assert_allclose(np.asarray(py_aff, dtype=np.float64),
                               np.asarray(mt.Affine(**kw)(MetaTensor(img, affine=aff))[1], dtype=np.float64), rtol=0,
                               atol=1e-6)
    # in a lazy Compose the normalized map fuses with the next step like any other
    fused = vt.Compose([vt.Affine(**kw, image_only=True), vt.Flip(1)])(img)
    tsp.assert_image_close(fused, torch.flip(oi, [2]))
    with pytest.raises(NotImplementedError, match="spline order"):  # MONAI's scipy backend: voxel indices
        vt.Affine(**dict(kw, mode=1))
    with pytest.raises(NotImplementedError, match="spline order mode='3'"):  # the C++ Affine, the same refusal
        cxx.affine([img], *args, size, "3", "zeros", align_corners, normalized=True, **extra)


def test_resize_dtype_like_monai_and_python(inia):
    """dtype decides interpolate's nearest table: 84 -> 100 picks source 62 for output 75 in
    float32 and 63 in float64 (test_spatial's test_resize_nearest_follows_monai_dtype); None:
    each input's own (two groups for a float64 image + an int16 label); 'area' and anti-aliasing
    run in it. Bit-identical to MONAI's and Python's Resize with that dtype."""
    img, lab, _ = inia
    size = [100, 103, 64]
    (f32,), _, _, _ = cxx.resize([lab], size, "nearest")
    (f64,), _, _, _ = cxx.resize([lab], size, "nearest", dtype=torch.float64)
    assert f64.dtype == torch.int16 and not torch.equal(f32, f64)
    assert_bitwise(f32.float(), mt.Resize(size, mode="nearest")(lab))
    assert_bitwise(f64.float(), mt.Resize(size, mode="nearest", dtype=torch.float64)(lab).float())
    assert_bitwise(f64, plain(vt.Resize(size, mode="nearest", dtype=torch.float64)(lab)))
    (f16,), _, _, _ = cxx.resize([lab], size, "nearest", dtype=torch.float16)  # float32, as Python
    assert torch.equal(f16, f32)
    (mixed_img, mixed_lab), _, _, _ = cxx.resize([lab.double(), lab], size, "nearest", dtype_of_input=True)
    assert mixed_img.dtype == torch.float64 and torch.equal(mixed_img, f64.double())
    assert torch.equal(mixed_lab, f32)
    x = img[:, 5:52, 8:70, 3:58]
    (a64,), _, _, _ = cxx.resize([x], [30, 80, 41], "area", dtype=torch.float64)
    (a32,), _, _, _ = cxx.resize([x], [30, 80, 41], "area")
    assert a64.dtype == torch.float32 and not torch.equal(a64, a32)
    assert_bitwise(a64, mt.Resize((30, 80, 41), dtype=torch.float64)(x))
    assert_bitwise(a64, plain(vt.Resize((30, 80, 41), dtype=torch.float64)(x)))
    (d64,), _, _, _ = cxx.resize([x.double()], [30, 80, 41], "area", dtype_of_input=True)
    assert d64.dtype == torch.float64
    assert_bitwise(d64, torch.nn.functional.adaptive_avg_pool3d(x.double()[None], (30, 80, 41))[0])
    assert_bitwise(d64.float(), mt.Resize((30, 80, 41), dtype=None)(x.double()))
    y = torch.randn(1, 23, 19, 30, generator=torch.Generator().manual_seed(3))
    for mode in ("trilinear", "area"):
        (aa,), _, _, _ = cxx.resize([y], [10, 40, 30], mode, anti_aliasing=True, dtype=torch.float64)
        kw = dict(mode=mode, anti_aliasing=True, dtype=torch.float64)
        assert aa.dtype == torch.float32
        assert_bitwise(aa, plain(vt.Resize((10, 40, 30), **kw)(y)))
        checks.assert_image_close(aa, mt.Resize((10, 40, 30), **kw)(y), tsp.AA_TOL)


def test_zoom_and_rand_zoom_dtype_like_monai_and_python(inia):
    """Zoom 1.195 on the first axis is 84 -> 100 voxels: float64 picks other source voxels than
    float32, as MONAI's Zoom with that dtype; RandZoom's samples likewise, each as MONAI's Zoom
    with its factors and the whole batch as Python's RandZoom replaying the draw."""
    img, lab, aff = inia
    z = [1.195, 1.0, 1.0]
    (o64, i64), out_aff, _, _ = cxx.zoom([lab, img], z, "nearest", False, "edge", None, aff, dtype=torch.float64)
    (o32,), _, _, _ = cxx.zoom([lab], z, "nearest", False, "edge")
    assert o64.shape == (1, 100, 103, 64) and not torch.equal(o64, o32)
    ref = mt.Zoom(z, mode="nearest", keep_size=False, dtype=torch.float64)(MetaTensor(lab, affine=aff))
    assert_bitwise(o64.float(), ref.float())
    assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-9)
    assert_bitwise(i64, mt.Zoom(z, mode="nearest", keep_size=False, dtype=torch.float64)(img).float())
    assert_bitwise(o64, plain(vt.Zoom(z, mode="nearest", keep_size=False, dtype=torch.float64)(lab)))
    (area,), _, _, _ = cxx.zoom([img], [0.7, 1.3, 0.9], "area", True, "edge", dtype=torch.float64)
    assert_bitwise(area, mt.Zoom((0.7, 1.3, 0.9), dtype=torch.float64)(img))
    y = torch.stack([lab, lab.flip(1), lab.flip(3)])
    t1 = torch.stack([img, img.flip(1), img.flip(3)])
    lo, hi = [1.191, 0.9, 0.95], [1.2, 1.1, 1.05]  # 84 * [1.191, 1.2) = 100.04 .. 100.8: nearest tables differ
    shrink_lo, shrink_hi = [0.6, 0.7, 0.75], [0.8, 0.85, 0.9]  # 'area' averages several voxels: roundings differ
    cases = [("nearest", torch.float64, y, lo, hi), ("nearest", None, y.double(), lo, hi),
             ("area", torch.float64, t1, shrink_lo, shrink_hi), ("area", None, t1.double(), shrink_lo, shrink_hi)]
    for mode, dt, x, mn, mx in cases:
        dkw = dict(dtype_of_input=True) if dt is None else dict(dtype=dt)
        (out,), _, _, _, u, _, params = cxx.rand_zoom([x], 1.0, mn, mx, mode, "edge", None, True, 0.0, 5, 0, False,
                                                      **dkw)
        (out32,), _, _, _, _, _, _ = cxx.rand_zoom([x], 1.0, mn, mx, mode, "edge", None, True, 0.0, 5, 0, False)
        assert out.dtype == x.dtype if mode == "nearest" or dt is None else out.dtype == torch.float32
        assert not torch.equal(out.float(), out32.float())
        py = vt.RandZoom(prob=1.0, min_zoom=tuple(mn), max_zoom=tuple(mx), mode=mode, dtype=dt)
        assert_bitwise(out, plain(py.apply(x, params=u)))
        for i, p in enumerate(params):
            # MONAI returns float32 (its float64 result rounded once, as ours for a float64 input)
            assert_bitwise(out[i].float(), mt.Zoom(p.tolist(), mode=mode, dtype=dt)(x[i]).float())


@pytest.mark.parametrize("shape", [[100, 90, 80], [-1, 60, -1], [120, 120, 120]])
@pytest.mark.parametrize("pixdim", [(1.0, 1.1, 0.9), (0.5,)])
def test_spacing_output_spatial_shape_like_monai_and_python(ch2better, shape, pixdim):
    """MONAI's output_spatial_shape: the computed affine, the given grid extent (negative: the
    input's size); the input's own size and spacing is MONAI's unchanged shortcut. Image + label
    as MONAI's, bit-identical to Python's Spacing; recompute_affine scales to the given shape."""
    img, lab = ch2better
    (oi, ol), aff, _, _ = cxx.spacing([plain(img), plain(lab)], list(pixdim), "bilinear", "border", False, False,
                                      False, ["", "nearest"], img.affine, output_spatial_shape=shape)
    m = mt.Spacing(pixdim)(img, output_spatial_shape=shape)
    ml = mt.Spacing(pixdim, mode="nearest")(lab, output_spatial_shape=shape)
    assert oi.shape[1:] == tuple(s if s > 0 else 120 for s in shape)
    ts._check_spacing(m, MetaTensor(oi, affine=aff), ml, MetaTensor(ol, affine=aff))
    py = vt.Spacing(pixdim)(img, output_spatial_shape=shape)
    assert_bitwise(oi, py)
    assert torch.equal(aff, py.affine)
    (computed,), _, _, _ = cxx.spacing([plain(img)], list(pixdim), "bilinear", "border", False, False, False, [],
                                       img.affine)
    assert computed.shape != oi.shape or pixdim == (0.5,)
    (_,), raff, _, _ = cxx.spacing([plain(img)], list(pixdim), "bilinear", "border", False, False, False, [],
                                   img.affine, recompute_affine=True, output_spatial_shape=shape)
    pr = vt.Spacing(pixdim, recompute_affine=True)(img, output_spatial_shape=shape)
    assert torch.equal(raff, pr.affine)
    if min(shape) > 0:  # MONAI scales to the requested shape as given, -1 entries included
        mr = mt.Spacing(pixdim, recompute_affine=True)(img, output_spatial_shape=shape)
        np.testing.assert_allclose(raff.numpy(), mr.affine.numpy(), rtol=0, atol=1e-12)


def test_spacing_output_spatial_shape_one_value_like_python(ch2better):
    """One value for all three axes, as Python's Spacing (MONAI reads an int as a 1-D shape)."""
    img, _ = ch2better
    (out,), aff, _, _ = cxx.spacing([plain(img)], [1.0, 1.1, 0.9], "bilinear", "border", False, False, False, [],
                                    img.affine, output_spatial_shape=[70])
    py = vt.Spacing((1.0, 1.1, 0.9))(img, output_spatial_shape=70)
    assert out.shape == (1, 70, 70, 70)
    assert_bitwise(out, py)
    assert torch.equal(aff, py.affine)


# ---------------- bad arguments ----------------
def test_bad_arguments_name_the_argument():
    x = torch.zeros(1, 4, 5, 6)

    def rz(mn, mx, mode="area", padding_mode="edge", align_corners=None):
        return cxx.rand_zoom([x], 0.5, mn, mx, mode, padding_mode, align_corners, True, 0.0, 0, 0, False)

    cases = [
        (lambda: cxx.affine([x], [], [], [], [], [], "bogus", "zeros", False), "mode"),
        (lambda: cxx.affine([x], [], [], [], [], [], "6", "zeros", False), "spline order '0' to '5'"),
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
        (lambda: cxx.rand_axis_flip([x], -0.1, 0, 0, False), "prob"),
        (lambda: cxx.rand_rotate90([x], 0.5, 0, [0, 1], 0, 0, False), "max_k"),
        (lambda: cxx.rand_rotate([x], [float("nan")], [0.0], [0.0], 0.5, True, "bilinear", "border", False, 0, 0,
                                 False), "range_x"),
        (lambda: rz([0.9, 0.9, 0.9], [1.1, 1.1]), "min_zoom and max_zoom"),
        (lambda: rz([0.9] * 4, [1.1] * 4), "min_zoom"),
        (lambda: rz([0.0], [1.1]), "min_zoom"),
        (lambda: rz([0.9], [float("inf")]), "max_zoom"),
        (lambda: rz([0.9], [1.1], "cubic"), "mode"),
        (lambda: rz([0.9], [1.1], "area", "mirror"), "padding_mode"),
        (lambda: rz([0.9], [1.1], "area", "edge", True), "align_corners"),
        (lambda: cxx.rand_zoom([torch.zeros(2, 1, 20, 20, 20)], 1.0, [0.5], [1.5], "trilinear", "edge", None, False,
                               0.0, 0, 0, False), "keep_size"),
        (lambda: cxx.zoom([x], [0.5], "nearest", True, "edge", align_corners=False), "align_corners"),
        (lambda: cxx.zoom([x], [0.5], "nearest", True, "constant", pad_value=float("nan")), "pad_value"),
        (lambda: cxx.resize([x], [3, 3, 3], "area", size_mode="bogus"), "size_mode"),
        (lambda: cxx.resize([x], [3, 3, 3], "area", size_mode="longest"), "spatial_size"),
        (lambda: cxx.resize([torch.zeros(1, 1, 1, 50)], [10], "area", size_mode="longest"), "spatial_size"),
        (lambda: cxx.resize([x], [3, 3, 3], "area", anti_aliasing=True, anti_aliasing_sigma=[-1.0]),
         "anti_aliasing_sigma"),
        (lambda: cxx.resize([x], [3, 3, 3], "area", anti_aliasing_sigma=[1.0, 2.0]), "anti_aliasing_sigma"),
        (lambda: cxx.spacing([x], [1.0], "bilinear", "border", False, False, False, min_pixdim=[1.2],
                             max_pixdim=[0.8]), "min_pixdim"),
        (lambda: cxx.spacing([x], [1.0], "bilinear", "border", False, False, False, min_pixdim=[float("inf")]),
         "min_pixdim"),
        (lambda: cxx.orientation([x], "RAS", False, labels=["R", "L", "A", "P"]), "labels"),
        (lambda: cxx.orientation([x], "RAS", False, labels=["R", "L", "A", "R", "I", "S"]), "labels"),
        (lambda: cxx.orientation([x], "RAS", False, labels=["RR", "L", "A", "P", "I", "S"]), "labels"),
        (lambda: cxx.orientation([x], "RAS", False, labels=["X", "L", "A", "P", "I", "S"]), "axcodes"),
        # issue 3's arguments
        (lambda: cxx.rotate([x], [0.1], True, "bilinear", "border", False, rotate_order="XXY"), "rotate_order"),
        (lambda: cxx.rotate([x], [0.1], True, "bilinear", "border", False, rotate_order="xY"), "rotate_order"),
        (lambda: cxx.rotate([x], [0.1], True, "bilinear", "border", False, rotate_order="XYW"), "rotate_order"),
        (lambda: cxx.rotate([x], [0.1], True, "bilinear", "border", False, rotate_order="XYZX"), "rotate_order"),
        (lambda: cxx.rotate([x], [0.1], True, "bilinear", "border", False, rotate_order="XY"), "rotate_order"),
        (lambda: cxx.affine([x], [0.1, 0.2, 0.3], [], [], [], [], "bilinear", "zeros", False, rotate_order="zy"),
         "rotate_order"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False, rotate_order=""), "rotate_order"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False, affine_matrix=torch.eye(3)),
         r"affine must be a \(4, 4\)"),
        (lambda: cxx.affine([x], [], [], [], [], [], "bilinear", "zeros", False,
                            affine_matrix=torch.eye(4).index_fill(0, torch.tensor([1]), float("nan"))),
         "affine must be finite"),
        (lambda: cxx.resize([x], [3, 3, 3], "nearest", dtype=torch.int32), "dtype"),
        (lambda: cxx.zoom([x], [0.5], "nearest", True, "edge", dtype=torch.int64), "dtype"),
        (lambda: cxx.rand_zoom([x], 0.5, [0.9], [1.1], "area", "edge", None, True, 0.0, 0, 0, False,
                               dtype=torch.bool), "dtype"),
        (lambda: cxx.spacing([x], [1.0], "bilinear", "border", False, False, False, output_spatial_shape=[4, 5]),
         "output_spatial_shape"),
        (lambda: cxx.spacing([x], [1.0], "bilinear", "border", False, False, False, output_spatial_shape=[4, 0, 5]),
         "output_spatial_shape"),
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
        lambda xs, a: cxx.rand_zoom([x.expand(3, -1, -1, -1, -1) for x in xs], 1.0, [0.6, 0.75, 0.8],
                                    [1.4, 1.3, 1.25], "trilinear", "constant", None, True, -1.0, 3, 0, False,
                                    ["", "nearest"], a)[:4],
        lambda xs, a: cxx.rand_zoom([x.expand(3, -1, -1, -1, -1) for x in xs], 1.0, [0.6, 0.75, 0.8],
                                    [1.4, 1.3, 1.25], "area", "edge", None, True, 0.0, 3, 0, False,
                                    ["", "nearest"], a)[:4],
        # issue 3's arguments: host-side maps / tables, the same launches
        lambda xs, a: cxx.affine(xs, [], [], [], [], [70, 90, 61], "bilinear", "zeros", True, ["", "nearest"], a,
                                 affine_matrix=NORMALIZED_MATRIX, normalized=True),
        lambda xs, a: cxx.rotate(xs, [0.3, -0.2, 0.1], False, "bilinear", "zeros", False, ["", "nearest"], a,
                                 rotate_order="zyx"),
        lambda xs, a: cxx.zoom(xs, [1.195, 0.8, 1.0], "area", True, "edge", ["", "nearest"], a, dtype=torch.float64),
        lambda xs, a: cxx.spacing(xs, [1.3, 1.1, 1.7], "bilinear", "border", False, False, False, ["", "nearest"], a,
                                  output_spatial_shape=[50, -1, 40]),
    ]
    for call in calls:
        (ci, cl), caff, _, _ = call([img, lab], aff)
        (gi, gl), gaff, _, _ = call([img.cuda(), lab.cuda()], aff.cuda())
        assert gi.is_cuda and gaff.is_cuda and gl.dtype == cl.dtype
        tsp.assert_image_close(gi.cpu(), ci)
        tsp.assert_labels_match(gl.cpu(), cl)
        assert torch.allclose(gaff.cpu(), caff, rtol=0, atol=1e-12)
    # anti-aliasing smooths the nearest label too (floating): both compared as images
    call = lambda xs, a: cxx.resize(xs, [40, 90, 33], "trilinear", ["", "nearest"], a, anti_aliasing=True)  # noqa: E731
    (ci, cl), caff, _, _ = call([img, lab], aff)
    (gi, gl), gaff, _, _ = call([img.cuda(), lab.cuda()], aff.cuda())
    assert gi.is_cuda and gl.dtype == cl.dtype == torch.float32
    tsp.assert_image_close(gi.cpu(), ci)
    tsp.assert_image_close(gl.cpu(), cl)
    assert torch.allclose(gaff.cpu(), caff, rtol=0, atol=1e-12)
