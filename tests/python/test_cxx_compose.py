"""voxaug's C++ lazy Compose (voxaug::transforms::Compose, torch_ext/spatial_compose.cpp) and the
C++ SpatialCrop / CenterSpatialCrop, through the test shim tests/torch/spatial_transforms_shim.cpp
(ops `compose` and `describe`; a step is "name[:mode[:padding[:align]]]" with its numbers, see
make_step there).

What is compared, on the mricron-data volumes:
- exact chains (flips, quarter turns, crops, Orientation): one launch, bit-identical to the steps
  run one by one and to MONAI's Compose of the same transforms (data and affine);
- interpolating chains (RandAffine, Rotate, Spacing, Zoom, crops, flips): one launch, equal to
  Python's voxaug.transforms.Compose (its lazy fusion) replaying the same draws, image and label;
  the fused gather against scipy.ndimage.map_coordinates(order=1) with the product of the steps'
  own maps (each from the transform's single call), computed in numpy;
- group boundaries: a step with another interpolation starts a new group, a step that is no
  index map (Zoom 'area', keep_size padding, Spacing recompute_affine) runs as itself, and then
  the result is the step-by-step one bit for bit;
- the affine after Spacing / Orientation / crop chains as MONAI's;
- draws: a Compose with seed s equals the random steps called with step_seed(s, j); a sample's
  draw does not depend on the batch;
- each transform's launch description (Result::single_map, exact, kernel mode / padding);
- bad arguments: errors name the argument.
"""
import contextlib

import numpy as np
import pytest
import torch

from voxaug import transforms as vt

mt = pytest.importorskip("monai.transforms")
ndimage = pytest.importorskip("scipy.ndimage")
pytest.importorskip("nibabel")
from monai.data import MetaTensor  # noqa: E402

import test_spacing as ts  # noqa: E402
import test_spatial as tsp  # noqa: E402
from conftest import load_test_shim  # noqa: E402
import spatial_checks as checks  # noqa: E402
from spatial_checks import assert_bitwise  # noqa: E402

pytestmark, SHIM = load_test_shim("voxaug_cxx_spatial_shim")
cxx = torch.ops.voxaug_cxx_test_spatial


from test_spatial import ch2aal, inia  # noqa: E402,F401  (fixtures: inia19 / ch2 + labels, every 2nd / 3rd voxel)


def compose(inputs, steps, seed=0, first_sample=0, lazy=True, share=False, modes=None, affine=None):
    """steps: [(spec, [numbers])]. Returns (outputs, affine, maps, meta, groups, seeds, single)."""
    names = [s for s, _ in steps]
    args, offsets = [], [0]
    for _, a in steps:
        args += [float(v) for v in a]
        offsets.append(len(args))
    outs, aff, maps, meta, groups, seeds, single = cxx.compose(inputs, names, args, offsets, seed, first_sample,
                                                               lazy, share, modes, affine)
    return outs, aff, maps, meta, groups.tolist(), seeds.tolist(), single


# ---------------- exact chains ----------------
EXACT = [("flip", [0]), ("rotate90", [1, 1, 2]), ("spatial_crop", [3, 5, 2, 50, 60, 55]), ("flip", [2, 1]),
         ("center_crop", [40, -1, 33])]


def test_exact_chain_is_one_bitwise_launch(ch2aal):
    img, lab, aff = ch2aal
    x = torch.stack([img, img.flip(2)]).float()  # (2, 1, 61, 73, 61), different samples
    y = torch.stack([lab, lab.flip(3)])
    mask = y > 40
    i64 = y.long() - 50
    lazy = compose([x, y, mask, i64], EXACT, affine=aff)
    ref = compose([x, y, mask, i64], EXACT, lazy=False, affine=aff)
    assert lazy[4] == [[0, len(EXACT)]] and lazy[6]
    assert ref[4] == [[j, j + 1] for j in range(len(EXACT))] and not ref[6]
    for a, b, src in zip(lazy[0], ref[0], (x, y, mask, i64)):
        assert a.dtype == src.dtype
        assert_bitwise(a, b)
    assert torch.equal(lazy[1], ref[1]) and torch.equal(lazy[2], ref[2])
    # MONAI, one sample at a time, step by step (data and affine).
    m = mt.Compose([mt.Flip(0), mt.Rotate90(1, (1, 2)), mt.SpatialCrop(roi_start=(3, 5, 2), roi_end=(50, 60, 55)),
                    mt.Flip((2, 1)), mt.CenterSpatialCrop((40, -1, 33))])
    for i in range(2):
        for ours, src in ((lazy[0][0], x), (lazy[0][1], y)):
            out = m(MetaTensor(src[i], affine=aff))
            assert_bitwise(ours[i], out.as_tensor())
            assert torch.allclose(lazy[1], out.affine.double(), rtol=0, atol=1e-9)


def test_orientation_and_crops_follow_monai(inia):
    img, lab, aff = inia
    steps = [("orientation:LPI", []), ("spatial_crop_centered", [30, 40, 20, 41, 50, 30]), ("rotate90", [2, 0, 2])]
    outs, out_aff, _, _, groups, _, _ = compose([img, lab], steps, affine=aff)
    assert groups == [[0, 3]]
    m = mt.Compose([mt.Orientation("LPI"), mt.SpatialCrop(roi_center=(30, 40, 20), roi_size=(41, 50, 30)),
                    mt.Rotate90(2, (0, 2))])
    for ours, src in zip(outs, (img, lab)):
        ref = m(MetaTensor(src, affine=aff))
        assert_bitwise(ours, ref.as_tensor())
        assert torch.allclose(out_aff, ref.affine.double(), rtol=0, atol=1e-9)


# ---------------- interpolating chains ----------------
def _replaying(ts_, seeds, n):
    """Python's random transforms replay the draws the C++ steps made with `seeds`."""
    stack = contextlib.ExitStack()
    for t, s in zip(ts_, seeds):
        if hasattr(t, "draw_params"):
            stack.enter_context(t._replaying(t.draw_params(n, 0, s)))
    return stack


RA = dict(rotate_range=(0.3, 0.2, 0.25), shear_range=(0.05,) * 6, translate_range=(3, 2, 4), scale_range=(0.1,) * 3)


def _interp_steps(pad):
    cxx_steps = [("rand_affine:bilinear:" + pad, [1.0, 0.3, 0.2, 0.25] + [0.05] * 6 + [3, 2, 4] + [0.1] * 3),
                 ("rotate:bilinear:" + pad, [0.2, -0.1, 0.15, 1]),
                 ("center_crop", [60, 70, 50]),
                 ("rand_flip", [0.5, 1]),
                 ("rand_axis_flip", [0.8])]

    def py(mode):
        return [vt.RandAffine(prob=1.0, mode=mode, padding_mode=pad, **RA), vt.Rotate((0.2, -0.1, 0.15), mode=mode,
                                                                                        padding_mode=pad),
                vt.CenterSpatialCrop((60, 70, 50)), vt.RandFlip(prob=0.5, spatial_axis=1), vt.RandAxisFlip(prob=0.8)]
    return cxx_steps, py


@pytest.mark.parametrize("pad", ["border", "zeros", "reflection"])
def test_interpolating_chain_equals_python_compose(inia, pad):
    img, lab, _ = inia
    x = torch.stack([img, img.flip(1), img.flip(3)])
    y = torch.stack([lab, lab.flip(1), lab.flip(3)])
    steps, py = _interp_steps(pad)
    outs, _, maps, _, groups, seeds, single = compose([x, y], steps, seed=11, modes=["", "nearest"])
    assert groups == [[0, 5]] and single
    assert outs[0].dtype == torch.float32 and outs[1].dtype == torch.int16
    for k, (src, mode) in enumerate(((x, "bilinear"), (y, "nearest"))):
        ts_ = py(mode)
        with _replaying(ts_, seeds, 3):
            ref = vt.Compose(ts_)(src)
        assert_bitwise(outs[k], ref)


def test_fused_gather_matches_scipy_with_the_steps_maps(inia):
    """Border padding: one linear interpolation through M_affine @ M_rotate @ M_crop (each map from
    the transform's own single call) equals scipy's map_coordinates(order=1, mode='nearest')."""
    img, _, _ = inia
    x = img[None].float()
    ap = dict(rotate=[0.3, -0.2, 0.1], shear=[0.05, 0.02, 0.0, 0.03, 0.01, 0.0], translate=[2.0, -3.0, 1.0],
              scale=[1.1, 0.95, 1.05])
    steps = [("affine:bilinear:border", ap["rotate"] + ap["shear"] + ap["translate"] + ap["scale"]),
             ("rotate:bilinear:border", [0.0, 0.0, 0.4, 1]), ("spatial_crop", [5, 6, 7, 70, 90, 60])]
    (out,), _, maps, _, groups, _, _ = compose([x], steps)
    assert groups == [[0, 3]]
    # the steps' own maps, one call each on the tensor each step sees
    (a_out,), _, m1, _ = cxx.affine([x], ap["rotate"], ap["shear"], ap["translate"], ap["scale"], [], "bilinear",
                                    "border", False)
    (r_out,), _, m2, _ = cxx.rotate([a_out], [0.0, 0.0, 0.4], True, "bilinear", "border", False)
    m3 = np.eye(4)
    m3[:3, 3] = [5, 6, 7]
    total = m1[0].numpy() @ m2[0].numpy() @ m3
    np.testing.assert_allclose(maps[0].numpy(), total, rtol=0, atol=1e-12)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in out.shape[2:]], indexing="ij"), 0).reshape(3, -1)
    coords = total[:3, :3] @ grid + total[:3, 3:]
    ref = ndimage.map_coordinates(x[0, 0].double().numpy(), coords, order=1, mode="nearest").reshape(out.shape[2:])
    rng = float(x.max() - x.min())
    assert np.abs(out[0, 0].double().numpy() - ref).max() <= tsp.IMG_TOL * rng  # float32 kernel coordinates


def assert_same_up_to_float32_coordinates(ours, ref, half=False):
    """A map multiplied by an exact step's (a flip: i -> S - 1 - i) gives the same coordinates in
    float64 but the kernel evaluates them in float32 from other matrix entries: images agree to
    rounding, labels up to half-voxel ties."""
    if ours.is_floating_point():
        checks.assert_image_close(ours, ref, 2.0 ** -10 if half else tsp.IMG_TOL)
    else:
        checks.assert_labels_match(ours, ref, tsp.LABEL_TIES)


def test_float16_and_integer_images_in_a_fused_group(ch2aal):
    img, _, _ = ch2aal
    steps = [("rotate:bilinear:zeros", [0.1, 0.2, -0.3, 1]), ("flip", [1])]
    for x in (img[None].half(), img[None]):  # float16 stays float16, uint8 computes in float32
        (lz,), *_ = compose([x], steps)
        (rf,), *_ = compose([x], steps, lazy=False)
        assert lz.dtype == rf.dtype == (torch.float16 if x.dtype == torch.float16 else torch.float32)
        assert_same_up_to_float32_coordinates(lz, rf, half=x.dtype == torch.float16)


# ---------------- group boundaries ----------------
def test_other_interpolation_starts_a_new_group(inia):
    img, lab, _ = inia
    steps = [("affine:bilinear:border", [0.1, 0, 0] + [0.0] * 6 + [1, 2, 3] + [1, 1, 1]),
             ("flip", [0]),
             ("rotate:nearest:border", [0.0, 0.2, 0.0, 1]),
             ("rotate:nearest:zeros", [0.1, 0.0, 0.0, 1])]
    lazy = compose([img, lab], steps, modes=["", "nearest"])
    assert lazy[4] == [[0, 2], [2, 3], [3, 4]]
    ref = compose([img, lab], steps, lazy=False, modes=["", "nearest"])
    for a, b in zip(lazy[0], ref[0]):  # affine + flip: one interpolation of the same coordinates
        assert_same_up_to_float32_coordinates(a, b)
    assert torch.allclose(lazy[1], ref[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("middle,groups", [
    (("zoom:area:edge", [1.2, 0.8, 1.0, 1]), [[0, 1], [1, 2], [2, 3]]),  # pools
    (("zoom:trilinear:edge", [0.8, 0.9, 0.7, 1]), [[0, 1], [1, 2], [2, 3]]),  # keep_size pads
    (("resize:nearest", [50, 60, 41]), [[0, 1], [1, 3]])])  # an affine nearest rule: fuses with the flip
def test_steps_that_are_no_index_map_run_as_themselves(inia, middle, groups):
    img, lab, aff = inia
    x = torch.stack([img, img.flip(2)])
    y = torch.stack([lab, lab.flip(2)])
    steps = [("rotate:bilinear:border", [0.1, 0.0, 0.0, 1]), middle, ("flip", [2])]
    lazy = compose([x, y], steps, modes=["", "nearest"], affine=aff)
    ref = compose([x, y], steps, lazy=False, modes=["", "nearest"], affine=aff)
    assert lazy[4] == groups
    for a, b in zip(lazy[0], ref[0]):
        if len(groups) == len(steps):  # every step alone: the step-by-step result itself
            assert_bitwise(a, b)
        else:
            assert_same_up_to_float32_coordinates(a, b)
    assert torch.allclose(lazy[1], ref[1], rtol=0, atol=1e-12)


def test_resize_with_interpolates_index_table_runs_as_itself():
    """6 -> 246 voxels nearest: torch's float32 index table, which no affine map reproduces."""
    lab = torch.randint(0, 200, (2, 1, 6, 5, 18), dtype=torch.int16, generator=torch.Generator().manual_seed(1))
    steps = [("flip", [0]), ("resize:nearest", [246, 7, 20]), ("flip", [2])]
    lazy = compose([lab], steps)
    assert lazy[4] == [[0, 1], [1, 2], [2, 3]]
    assert_bitwise(lazy[0][0], compose([lab], steps, lazy=False)[0][0])
    ref = torch.stack([mt.Resize((246, 7, 20), mode="nearest")(s.flip(1)).flip(3) for s in lab])
    assert_bitwise(lazy[0][0], ref)


def test_zoom_and_resize_maps_fuse(inia):
    img, lab, _ = inia
    steps = [("zoom:trilinear:edge", [1.3, 1.2, 1.25, 1]), ("flip", [0]), ("resize:trilinear", [40, 50, 30])]
    outs, _, _, _, groups, _, _ = compose([img], steps)
    assert groups == [[0, 3]]
    ts_ = [vt.Zoom((1.3, 1.2, 1.25), mode="trilinear"), vt.Flip(0), vt.Resize((40, 50, 30), mode="trilinear")]
    assert_bitwise(outs[0], vt.Compose(ts_)(img))


def test_spacing_orientation_crop_affine_like_monai():
    img, lab = ts._crop(*ts._load("ch2better.nii.gz"), (90, 120, 100), (96, 96, 96)), None
    lab = MetaTensor((img.as_tensor() > 80).to(torch.uint8), affine=img.affine.clone())
    steps = [("spacing:bilinear:border", [1.1, 0.9, 1.3]), ("orientation:PLS", []), ("center_crop", [40, 50, 30])]
    lazy = compose([img.as_tensor(), lab.as_tensor()], steps, modes=["", "nearest"], affine=img.affine)
    ref = compose([img.as_tensor(), lab.as_tensor()], steps, lazy=False, modes=["", "nearest"], affine=img.affine)
    assert lazy[4] == [[0, 3]]
    for a, b in zip(lazy[0], ref[0]):
        assert_same_up_to_float32_coordinates(a, b)
    m = mt.Compose([mt.Spacingd(["i", "l"], (1.1, 0.9, 1.3), mode=("bilinear", "nearest")),
                    mt.Orientationd(["i", "l"], "PLS"), mt.CenterSpatialCropd(["i", "l"], (40, 50, 30))])
    out = m({"i": img, "l": lab})
    assert torch.allclose(lazy[1], out["i"].affine.double(), rtol=0, atol=1e-6)
    ts._check_spacing(out["i"], MetaTensor(lazy[0][0], affine=lazy[1]), out["l"], MetaTensor(lazy[0][1],
                                                                                             affine=lazy[1]))
    # recompute_affine replaces the affine: Spacing then runs as itself
    steps[0] = ("spacing:bilinear:border", [1.1, 0.9, 1.3, 1])
    assert compose([img.as_tensor()], steps, affine=img.affine)[4] == [[0, 1], [1, 3]]


# ---------------- draws ----------------
def test_draws_are_the_steps_own_with_step_seeds(ch2aal):
    img, lab, _ = ch2aal
    x = torch.stack([img, img.flip(1), img.flip(2), img.flip(3)]).float()
    steps = [("rand_flip", [0.5, 0]), ("rand_rotate90", [0.7, 3, 0, 2]), ("rand_rotate:bilinear:zeros",
                                                                            [0.3, 0.2, 0.1, 0.8, 1])]
    outs, _, _, _, _, seeds, _ = compose([x], steps, seed=123, lazy=False)
    y = x
    (y,), *_ = cxx.rand_flip([y], 0.5, [0], seeds[0], 0, False)
    (y,), *_ = cxx.rand_rotate90([y], 0.7, 3, [0, 2], seeds[1], 0, False)
    (y,), *_ = cxx.rand_rotate([y], [0.3], [0.2], [0.1], 0.8, True, "bilinear", "zeros", False, seeds[2], 0, False)
    assert_bitwise(outs[0], y)
    assert len(set(seeds)) == 3 and seeds == compose([x], steps, seed=123)[5]
    assert seeds != compose([x], steps, seed=124)[5]
    # a sample's draw does not depend on its batch
    (one,), *_ = compose([x[2:3]], steps, seed=123, first_sample=2)
    (all_,), *_ = compose([x], steps, seed=123)
    assert_bitwise(one[0], all_[2])
    # share: every sample gets sample first_sample's draw
    (sh,), *_ = compose([x[:1].expand(4, -1, -1, -1, -1).contiguous()], steps, seed=5, share=True)
    for i in range(1, 4):
        assert_bitwise(sh[i], sh[0])


def test_empty_batch_and_output_dtypes():
    """N = 0: the shapes and dtypes of the step-by-step result, no launch needed to say so."""
    x = torch.rand(0, 1, 10, 12, 14)
    steps = [("rotate:bilinear:zeros", [0.1, 0, 0, 1]), ("flip", [0]), ("center_crop", [6, 7, 8])]
    lazy = compose([x, x.long(), x.half()], steps)
    ref = compose([x, x.long(), x.half()], steps, lazy=False)
    for a, b in zip(lazy[0], ref[0]):
        assert a.shape == b.shape == (0, 1, 6, 7, 8) and a.dtype == b.dtype
    assert [o.dtype for o in lazy[0]] == [torch.float32, torch.float32, torch.float16]
    assert lazy[2].shape == (0, 4, 4)


# ---------------- launch descriptions ----------------
@pytest.mark.parametrize("step,args,expect", [
    ("flip", [0], (True, True, 0, 0, False)),
    ("spatial_crop", [1, 1, 1, 9, 9, 9], (True, True, 0, 0, False)),
    ("rotate:bicubic:reflection:align", [0.1, 0, 0, 1], (True, False, 2, 2, True)),
    ("zoom:trilinear:edge", [1.5, 1.5, 1.5, 1], (True, False, 1, 1, False)),
    ("zoom:trilinear:edge", [0.5, 1.5, 1.5, 1], (False, False, 1, 1, False)),  # keep_size pads
    ("zoom:area:edge", [1.5, 1.5, 1.5, 1], (False, False, 1, 1, False)),
    ("rand_zoom:trilinear:edge", [1.0, 1.1, 1.3, 1], (True, False, 1, 1, False)),
    ("rand_zoom:trilinear:edge", [1.0, 0.6, 0.8, 1], (False, False, 1, 1, False)),
])
def test_launch_description(step, args, expect):
    x = torch.rand(2, 1, 12, 10, 14)
    assert tuple(cxx.describe([x], step, [float(a) for a in args], 3)) == expect


# ---------------- bad arguments ----------------
def test_bad_arguments():
    x = torch.rand(1, 1, 8, 8, 8)
    with pytest.raises(ValueError, match="is empty"):
        compose([x], [("spatial_crop", [9, 0, 0, 12, 8, 8])])
    with pytest.raises(ValueError, match="roi_start and roi_end must have 1 value"):
        compose([x], [("spatial_crop", [1, 2])])
    with pytest.raises(ValueError, match="roi_size must be 1 value"):
        compose([x], [("center_crop", [4, 4])])
    with pytest.raises(ValueError, match="modes must have at most one entry per input"):
        compose([x], [("flip", [0])], modes=["", "nearest"])
    with pytest.raises(ValueError, match=r"inputs\[0\] must be 5-D"):
        compose([x[0, 0]], [("flip", [0])])
    with pytest.raises(ValueError, match=r"inputs\[1\] must have the batch size and spatial size"):
        compose([x, torch.rand(1, 1, 8, 8, 9)], [("flip", [0])])
    with pytest.raises(ValueError, match=r"inputs\[1\] must have the batch size and spatial size"):
        compose([x, torch.rand(2, 1, 8, 8, 8)], [("flip", [0])])
    with pytest.raises(ValueError, match="mode"):
        compose([x], [("rotate:cubic:zeros", [0.1, 0, 0, 1])])


# ---------------- CUDA ----------------
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_compose_equals_cpu_twin_without_sync(inia):
    """The same Compose on CUDA tensors (planning on meta tensors, maps through pinned memory, one
    launch): no host sync (torch's sync debug mode raises on any), outputs as the CPU twin's
    (the same kernel arithmetic on both backends: images to float32 rounding, labels up to ties)."""
    img, lab, aff = inia
    x = torch.stack([img, img.flip(1)])
    y = torch.stack([lab, lab.flip(1)])
    steps, _ = _interp_steps("zeros")
    steps = steps + [("zoom:trilinear:edge", [1.2, 1.2, 1.2, 1]), ("rotate90", [1, 0, 1])]
    cpu = compose([x, y], steps, seed=4, modes=["", "nearest"], affine=aff)
    xc, yc, ac = x.cuda(), y.cuda(), aff.cuda()
    compose([xc, yc], steps, seed=4, modes=["", "nearest"], affine=ac)  # warm-up (pinned allocator, kernels)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        gpu = compose([xc, yc], steps, seed=4, modes=["", "nearest"], affine=ac)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert gpu[4] == cpu[4] == [[0, len(steps)]]
    checks.assert_image_close(gpu[0][0].cpu(), cpu[0][0], tsp.IMG_TOL)
    checks.assert_labels_match(gpu[0][1].cpu(), cpu[0][1], tsp.LABEL_TIES)
    assert gpu[1].is_cuda and torch.allclose(gpu[1].cpu(), cpu[1], rtol=0, atol=1e-9)
