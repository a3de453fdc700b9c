"""Deformations in voxaug's C++ Compose (voxaug::transforms::Compose, torch_ext/include/voxaug/compose.h):
Rand3DElastic, GridDistortion, RandGridDistortion and RandomElasticDeformation close the pending
group of spatial steps, its product map joining the deformation's resample_deformed launch.
Through the test shim tests/torch/spatial_transforms_shim.cpp (op `compose`; deformation specs
"rand_elastic3d", "grid_distortion", "rand_grid_distortion", "rand_elastic", see make_step).

What is compared, on the mricron-data volumes:
- a deformation alone: the bytes of the C++ transform's own call with the step's seed
  (tests/torch/deform_transforms_shim.cpp), image and label;
- a fused group: equal bit for bit to Python's voxaug.transforms.Compose replaying the same draws
  (its own fusion of the group into the deformation), for each deformation; TorchIO's after a
  crop runs on the cropped tensor (two launches, as Python's);
- independently: crop + elastic as one gather equals scipy.ndimage.map_coordinates(order=1) of
  the full volume at crop start + (x + u(x)), u the dense displacement the deformation's call
  returns on the crop's grid (float64 numpy);
- group boundaries: a pending group with another padding is resampled first (then the result is
  the step-by-step one bit for bit); exact steps before a deformation adopt its mode (labels stay
  labels); flips and crops after a B-spline deformation fold into its launch (bit for bit Python's
  fold), not after a dense or separable field; lazy=False runs each step as itself;
- draws: each deformation draws with its step seed; a sample's result does not depend on the batch;
- TorchIO's zero max_displacement is no step; bad mode names name `modes`.
"""
import contextlib

import numpy as np
import pytest
import torch

from voxaug import deform
from voxaug import transforms as vt

pytest.importorskip("monai")
ndimage = pytest.importorskip("scipy.ndimage")
pytest.importorskip("nibabel")

import spatial_checks as checks  # noqa: E402
import test_spatial as tsp  # noqa: E402
from conftest import devices, load_test_shim  # noqa: E402
from spatial_checks import assert_bitwise  # noqa: E402
from test_cxx_compose import compose  # noqa: E402  (the C++ Compose through the shim)
from test_spatial import ch2aal, inia  # noqa: E402,F401  (fixtures)

pytestmark, SHIM = load_test_shim("voxaug_cxx_spatial_shim")
_, DEFORM_SHIM = load_test_shim("voxaug_cxx_deform_shim")


def replaying(ts_, seeds, n, first_sample=0):
    """Python's random transforms replay the draws the C++ steps made with `seeds`."""
    stack = contextlib.ExitStack()
    for t, s in zip(ts_, seeds):
        if hasattr(t, "draw_params"):
            stack.enter_context(t._replaying(t.draw_params(n, first_sample, s)))
    return stack


def batch(img, lab):
    """Three different samples (flips) of an image and its label."""
    return torch.stack([img, img.flip(1), img.flip(3)]).float(), torch.stack([lab, lab.flip(1), lab.flip(3)])


# Rand3DElastic: prob, sigma (lo, hi), magnitude (lo, hi), rotate 3, translate 3, scale 3.
ELASTIC = [1.0, 4.0, 6.0, 30.0, 60.0, 0.1, 0.05, 0.2, 2.0, 1.0, 3.0, 0.1, 0.1, 0.1]
ELASTIC_KW = dict(sigma_range=(4.0, 6.0), magnitude_range=(30.0, 60.0), prob=1.0, rotate_range=(0.1, 0.05, 0.2),
                  translate_range=(2.0, 1.0, 3.0), scale_range=(0.1, 0.1, 0.1))
RA = [1.0, 0.3, 0.2, 0.25] + [0.05] * 6 + [3, 2, 4] + [0.1] * 3
RA_KW = dict(rotate_range=(0.3, 0.2, 0.25), shear_range=(0.05,) * 6, translate_range=(3, 2, 4), scale_range=(0.1,) * 3)


# ---------------- a deformation alone ----------------
@pytest.mark.skipif(DEFORM_SHIM is None, reason="libvoxaug_cxx_deform_shim.so not built")
def test_elastic_alone_is_its_own_call(inia):
    img, lab, _ = inia
    x, y = batch(img, lab)
    outs, _, maps, meta, groups, seeds, single = compose([x, y], [("rand_elastic3d:bilinear:border", ELASTIC)],
                                                         seed=5, modes=["", "nearest"])
    assert groups == [[0, 1]] and not single
    d = torch.ops.voxaug_cxx_test_deform
    flat = [v for f in ELASTIC[5:8] for v in (-f, f)], [v for f in ELASTIC[8:11] for v in (-f, f)], \
        [v for f in ELASTIC[11:14] for v in (-f, f)]
    img_ref, extras, _, params = d.rand3d_elastic(x, [y], [4.0, 6.0], [30.0, 60.0], 1.0, flat[0], [], flat[1],
                                                  flat[2], [], "bilinear", "border", "fast", "nearest", seeds[0], 0,
                                                  False)
    assert_bitwise(outs[0], img_ref)
    assert_bitwise(outs[1], extras[0])
    assert outs[1].dtype == torch.int16
    # maps: the deformation's affine maps (its field is not in them); meta: unchanged
    assert torch.equal(meta, torch.eye(4, dtype=torch.float64).expand(3, 4, 4))
    assert not torch.equal(maps, meta)


@pytest.mark.skipif(DEFORM_SHIM is None, reason="libvoxaug_cxx_deform_shim.so not built")
def test_integer_modes_with_zeros_alone_and_fused(inia):
    """MONAI's integer modes with padding 'zeros' (scipy's 'constant', per input): the deformation
    alone is its own call, image "3" and label "0" (named through `modes`); after a RandAffine of
    the same reading it fuses into one launch (cutoff in each input's group key) and equals
    Python's Compose bit for bit."""
    img, lab, _ = inia
    x, y = batch(img, lab)
    outs, *_, groups, seeds, _ = compose([x, y], [("rand_elastic3d:3:zeros", ELASTIC)], seed=5, modes=["", "0"])
    assert groups == [[0, 1]]
    d = torch.ops.voxaug_cxx_test_deform
    flat = [v for f in ELASTIC[5:8] for v in (-f, f)], [v for f in ELASTIC[8:11] for v in (-f, f)], \
        [v for f in ELASTIC[11:14] for v in (-f, f)]
    img_ref, extras, _, _ = d.rand3d_elastic(x, [y], [4.0, 6.0], [30.0, 60.0], 1.0, flat[0], [], flat[1], flat[2],
                                             [], "3", "zeros", "fast", "0", seeds[0], 0, False)
    assert_bitwise(outs[0], img_ref)
    assert_bitwise(outs[1], extras[0])
    steps = [("rand_affine:3:zeros", RA), ("rand_elastic3d:3:zeros", ELASTIC)]
    outs, *_, groups, seeds, _ = compose([x, y], steps, seed=21, modes=["", "0"])
    assert groups == [[0, 2]]
    for k, (src, mode) in enumerate(((x, 3), (y, 0))):
        ts_ = [vt.RandAffine(prob=1.0, mode=mode, padding_mode="zeros", **RA_KW),
               deform.Rand3DElastic(mode=mode, padding_mode="zeros", **ELASTIC_KW)]
        with replaying(ts_, seeds, 3):
            ref = vt.Compose(ts_)(src)
        assert_bitwise(outs[k], ref)
    assert set(outs[1].unique().tolist()) <= set(lab.unique().tolist())


# ---------------- fused groups vs Python's Compose ----------------
def _python_steps(kind, mode):
    if kind == "elastic":
        return [vt.RandAffine(prob=1.0, mode=mode, padding_mode="reflection", **RA_KW),
                vt.CenterSpatialCrop((60, 70, 50)),
                deform.Rand3DElastic(mode=mode, padding_mode="reflection", **ELASTIC_KW)]
    if kind == "grid":
        return [vt.Rotate((0.2, -0.1, 0.15), mode=mode, padding_mode="border"), vt.Flip(1),
                deform.RandGridDistortion(num_cells=4, prob=1.0, distort_limit=(-0.2, 0.25), mode=mode,
                                          padding_mode="border")]
    first = vt.SpatialCrop(roi_start=(4, 6, 3), roi_end=(70, 90, 58)) if kind == "torchio_crop" else vt.Flip(0)
    return [first, vt.Rotate90(1, (0, 2)),
            deform.RandomElasticDeformation(num_control_points=6, max_displacement=4.0, locked_borders=1,
                                            image_interpolation=mode, label_interpolation=mode)]


CXX_STEPS = {
    "elastic": [("rand_affine:bilinear:reflection", RA), ("center_crop", [60, 70, 50]),
                ("rand_elastic3d:bilinear:reflection", ELASTIC)],
    "grid": [("rotate:bilinear:border", [0.2, -0.1, 0.15, 1]), ("flip", [1]),
             ("rand_grid_distortion:bilinear:border", [4, 1.0, -0.2, 0.25])],
    "torchio": [("flip", [0]), ("rotate90", [1, 0, 2]), ("rand_elastic:linear:border", [6, 4.0, 1, 1.0])],
    # TorchIO's grid, locked borders and padding belong to the crop's window: the crop runs first
    "torchio_crop": [("spatial_crop", [4, 6, 3, 70, 90, 58]), ("rotate90", [1, 0, 2]),
                     ("rand_elastic:linear:border", [6, 4.0, 1, 1.0])],
}


@pytest.mark.parametrize("kind", ["elastic", "grid", "torchio", "torchio_crop"])
def test_fused_group_equals_python_compose(inia, kind):
    img, lab, _ = inia
    x, y = batch(img, lab)
    label_mode = "nearest"
    outs, _, _, _, groups, seeds, single = compose([x, y], CXX_STEPS[kind], seed=21, modes=["", label_mode])
    # one resample_deformed launch for the three steps (two launches after a crop for TorchIO's)
    assert groups == ([[0, 2], [2, 3]] if kind == "torchio_crop" else [[0, 3]]) and not single
    assert outs[0].dtype == torch.float32 and outs[1].dtype == torch.int16
    for k, (src, mode) in enumerate(((x, "linear" if kind.startswith("torchio") else "bilinear"), (y, "nearest"))):
        ts_ = _python_steps(kind, mode)
        with replaying(ts_, seeds, 3):
            ref = vt.Compose(ts_)(src)
        assert_bitwise(outs[k], ref)
    assert set(outs[1].unique().tolist()) <= set(lab.unique().tolist())


@pytest.mark.skipif(DEFORM_SHIM is None, reason="libvoxaug_cxx_deform_shim.so not built")
def test_crop_then_elastic_matches_scipy(inia):
    """One gather for SpatialCrop + Rand3DElastic (no affine): out(x) = in(start + x + u(x)), u the
    dense displacement of the deformation's own call on the crop's grid; scipy reads the full
    volume (real voxels beyond the crop window, as the fused gather does)."""
    img, _, _ = inia
    x = img[None].float()
    start, end = (10, 12, 8), (70, 88, 56)
    elastic = [1.0, 3.0, 3.0, 40.0, 40.0]
    (out,), *_, groups, seeds, _ = compose([x], [("spatial_crop", list(start) + list(end)),
                                                 ("rand_elastic3d:bilinear:border", elastic)], seed=3)
    assert groups == [[0, 2]]
    d = torch.ops.voxaug_cxx_test_deform
    crop = x[:, :, start[0]:end[0], start[1]:end[1], start[2]:end[2]]
    step_out, _, fields, _ = d.rand3d_elastic(crop, [], [3.0, 3.0], [40.0, 40.0], 1.0, [], [], [], [], [],
                                              "bilinear", "border", "fast", "nearest", seeds[1], 0, True)
    u = fields[0][0].double().numpy()
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in out.shape[2:]], indexing="ij"), 0).astype(np.float64)
    coords = grid + u + np.array(start, dtype=np.float64).reshape(3, 1, 1, 1)
    assert np.abs(u).max() > 2.0  # a real deformation
    ref = ndimage.map_coordinates(x[0, 0].double().numpy(), coords.reshape(3, -1), order=1,
                                  mode="nearest").reshape(out.shape[2:])
    rng = float(x.max() - x.min())
    assert np.abs(out[0, 0].double().numpy() - ref).max() <= 1e-4 * rng
    # inside the window the step-by-step result (which pads the crop) agrees
    inside = np.all((coords >= np.array(start).reshape(3, 1, 1, 1)) &
                    (coords <= np.array(end).reshape(3, 1, 1, 1) - 1), axis=0)
    assert inside.mean() > 0.5
    diff = (out[0, 0] - step_out[0, 0]).abs().numpy()[inside]
    assert diff.max() <= 1e-4 * rng


# ---------------- group boundaries ----------------
def test_group_with_other_padding_is_resampled_first(inia):
    img, lab, _ = inia
    x, y = batch(img, lab)
    steps = [("rotate:bilinear:zeros", [0.1, 0.2, -0.3, 1]), ("flip", [2]),
             ("rand_elastic3d:bilinear:reflection", ELASTIC)]
    lazy = compose([x, y], steps, seed=4, modes=["", "nearest"])
    assert lazy[4] == [[0, 2], [2, 3]]
    ref = compose([x, y], steps, seed=4, lazy=False, modes=["", "nearest"])
    assert ref[4] == [[0, 1], [1, 2], [2, 3]]
    # rotate + flip as one map vs two steps: equal up to float32 coordinates; then the same elastic
    for a, b in zip(lazy[0], ref[0]):
        if a.is_floating_point():
            checks.assert_image_close(a, b, tsp.IMG_TOL * 4)
        else:
            checks.assert_labels_match(a, b, 1e-3)
    # a group already resampled (other padding), then the deformation: bit for bit
    steps2 = [("rotate:bilinear:zeros", [0.1, 0.2, -0.3, 1]), ("rand_elastic3d:bilinear:reflection", ELASTIC)]
    a = compose([x, y], steps2, seed=4, modes=["", "nearest"])
    b = compose([x, y], steps2, seed=4, lazy=False, modes=["", "nearest"])
    assert a[4] == b[4] == [[0, 1], [1, 2]]
    for p, q in zip(a[0], b[0]):
        assert_bitwise(p, q)


def test_exact_steps_take_the_deformation_mode(ch2aal):
    """Flips and a quarter turn of the whole volume commute with reflection padding: the fused gather
    equals the step-by-step one up to float32 coordinates; labels stay labels."""
    img, lab, _ = ch2aal
    x, y = img[None].float(), lab[None]
    steps = [("flip", [0, 2]), ("rotate90", [1, 1, 2]), ("rand_elastic3d:bilinear:reflection", ELASTIC)]
    lazy = compose([x, y], steps, seed=9, modes=["", "nearest"])
    ref = compose([x, y], steps, seed=9, lazy=False, modes=["", "nearest"])
    assert lazy[4] == [[0, 3]] and ref[4] == [[0, 1], [1, 2], [2, 3]]
    checks.assert_image_close(lazy[0][0], ref[0][0], tsp.IMG_TOL)
    checks.assert_labels_match(lazy[0][1], ref[0][1], 1e-3)
    assert lazy[0][1].dtype == torch.uint8
    assert set(lazy[0][1].unique().tolist()) <= set(lab.unique().tolist())


def test_deformation_then_spatial_steps_start_a_new_group(inia):
    img, _, _ = inia
    x = img[None].float()
    steps = [("rand_grid_distortion:bilinear:border", [3, 1.0, -0.2, 0.2]), ("flip", [0]), ("center_crop", [50, 60, 40])]
    lazy = compose([x], steps, seed=2)
    ref = compose([x], steps, seed=2, lazy=False)
    assert lazy[4] == [[0, 1], [1, 3]]
    assert_bitwise(lazy[0][0], ref[0][0])  # exact steps after: the same bytes


@pytest.mark.parametrize("kind", ["elastic", "torchio"])
def test_flips_and_crops_after_a_bspline_deformation_fold_into_its_launch(inia, kind):
    """Flip, RandFlip, RandAxisFlip and a centre crop after the deformation: one launch with the steps before it
    (the map times the flips' and crop's, the control index through them, flipped components
    negated), bit for bit Python's Compose, which folds them the same way."""
    img, lab, _ = inia
    x, y = batch(img, lab)
    after_cxx = [("flip", [2]), ("rand_flip", [0.5, 0]), ("rand_axis_flip", [0.9]), ("center_crop", [40, 50, 44])]
    steps = CXX_STEPS[kind] + after_cxx
    outs, _, _, _, groups, seeds, _ = compose([x, y], steps, seed=31, modes=["", "nearest"])
    assert groups == [[0, 7]]
    assert outs[0].shape == (3, 1, 40, 50, 44)
    for k, (src, mode) in enumerate(((x, "linear" if kind == "torchio" else "bilinear"), (y, "nearest"))):
        ts_ = _python_steps(kind, mode) + [vt.Flip(2), vt.RandFlip(prob=0.5, spatial_axis=0),
                                           vt.RandAxisFlip(prob=0.9), vt.CenterSpatialCrop((40, 50, 44))]
        with replaying(ts_, seeds, 3):
            ref = vt.Compose(ts_)(src)
        assert_bitwise(outs[k], ref)
    # the deformation and the steps after it one by one (no step before it that the fused gather
    # would read past): images to float32 coordinate rounding, labels up to ties
    tail = CXX_STEPS[kind][-1:] + after_cxx
    fused = compose([x, y], tail, seed=31, modes=["", "nearest"])
    ref = compose([x, y], tail, seed=31, lazy=False, modes=["", "nearest"])
    assert fused[4] == [[0, 5]] and ref[4] == [[j, j + 1] for j in range(5)]
    checks.assert_image_close(fused[0][0], ref[0][0], tsp.IMG_TOL * 4)
    checks.assert_labels_match(fused[0][1], ref[0][1], 1e-3)


def test_dense_field_does_not_fold(inia):
    img, _, _ = inia
    x = img[None].float()
    steps = [("rand_elastic3d:bilinear:reflection:exact", [1.0, 3.0, 3.0, 20.0, 20.0]), ("flip", [0])]
    outs, *_, groups, _, _ = compose([x], steps, seed=6)
    assert groups == [[0, 1], [1, 2]]
    ref = compose([x], steps, seed=6, lazy=False)
    assert_bitwise(outs[0], ref[0][0])


# ---------------- draws ----------------
def test_a_sample_does_not_depend_on_its_batch(inia):
    img, lab, _ = inia
    x, y = batch(img, lab)
    steps = CXX_STEPS["elastic"]
    full = compose([x, y], steps, seed=77, modes=["", "nearest"])
    for i in range(3):
        one = compose([x[i:i + 1], y[i:i + 1]], steps, seed=77, first_sample=i, modes=["", "nearest"])
        assert_bitwise(one[0][0][0], full[0][0][i])
        assert_bitwise(one[0][1][0], full[0][1][i])
    other = compose([x, y], steps, seed=78, modes=["", "nearest"])
    assert not torch.equal(other[0][0], full[0][0])


def test_zero_displacement_torchio_step_is_no_step(inia):
    img, _, _ = inia
    x = img[None].float()
    steps = [("rotate:bilinear:border", [0.1, 0.0, 0.2, 1]), ("rand_elastic:linear:border", [7, 0.0, 2, 1.0]),
             ("flip", [1])]
    out = compose([x], steps)
    assert out[4] == [[0, 3]]  # the rotate and the flip: one launch
    want = compose([x], [steps[0], steps[2]])
    assert_bitwise(out[0][0], want[0][0])


def test_grid_distortion_and_integer_image(ch2aal):
    """A uint8 image with a linear deformation computes in float32 (as the call); nearest keeps uint8."""
    img, lab, _ = ch2aal
    steps = [("flip", [1]), ("grid_distortion:bilinear:border", [2, 1.0, 1.2, 0.8, 1.1, 0.9, 1.0, 1.0, 1.3, 0.7])]
    outs, *_, groups, _, _ = compose([img, lab], steps, modes=["", "nearest"])
    assert groups == [[0, 2]]
    assert outs[0].dtype == torch.float32 and outs[1].dtype == torch.uint8
    ref = compose([img, lab], steps, lazy=False, modes=["", "nearest"])
    checks.assert_image_close(outs[0], ref[0][0], tsp.IMG_TOL)
    checks.assert_labels_match(outs[1], ref[0][1], 1e-3)


@pytest.mark.parametrize("device", [d for d in devices() if d != "cpu"] or
                         [pytest.param("cuda", marks=pytest.mark.skip(reason="no CUDA device"))])
def test_cuda_equals_cpu(inia, device):
    img, lab, _ = inia
    x, y = batch(img, lab)
    for kind in ("elastic", "torchio"):
        cpu = compose([x, y], CXX_STEPS[kind], seed=21, modes=["", "nearest"])
        dev = compose([x.to(device), y.to(device)], CXX_STEPS[kind], seed=21, modes=["", "nearest"])
        assert dev[4] == cpu[4]
        checks.assert_image_close(dev[0][0].cpu(), cpu[0][0], 1e-6)
        checks.assert_labels_match(dev[0][1].cpu(), cpu[0][1], 1e-4)


# ---------------- bad arguments ----------------
def test_bad_mode_names_the_argument(inia):
    img, lab, _ = inia
    with pytest.raises(ValueError, match="modes"):
        compose([img, lab], [("rand_elastic3d:bilinear:border", ELASTIC)], modes=["", "linear"])
    with pytest.raises(ValueError, match="modes"):
        compose([img, lab], [("rand_elastic:linear:border", [6, 4.0, 1, 1.0])], modes=["bilinear"])
    with pytest.raises(ValueError, match="image_interpolation"):
        compose([img], [("rand_elastic:bilinear:border", [6, 4.0, 1, 1.0])])
