"""The C++ deformation transforms (torch_ext/include/voxaug/deform_transforms.h) through the test
shim torch.ops.voxaug_cxx_test_deform (tests/torch/deform_transforms_shim.cpp).

Builds nothing: loads libvoxaug_cxx_deform_shim.so from the build dir named by VOXAUG_BUILD_DIR
(default <repo>/build; target voxaug_cxx_deform_shim) and skips when it is absent.

- Against the Python transforms (python/voxaug/deform.py) replaying draw_params(N, first_sample,
  seed): the draws, the outputs (image and label through one field) and the dense displacement
  are identical bytes, since both run the same kernels with the same Philox keys.
- Against independent references: MONAI GridDistortion with the same steps, MONAI
  Rand3DElastic with the same noise and parameters, MONAI's Warp (the ddf convention) through
  the returned displacement, SimpleITK's BSplineTransform at a few points for
  RandomElasticDeformation's control-point field, grid_sample (float64) for the labels.
- TorchIO's folding warning (shown once per process and message), bad arguments naming the argument,
  same rank back for (C, D, H, W).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from voxaug import deform, spatial

from conftest import devices, load_test_shim
from test_deform import _monai_elastic, _through_field

pytestmark, SHIM = load_test_shim("voxaug_cxx_deform_shim")


@pytest.fixture(scope="module")
def cxx():
    return torch.ops.voxaug_cxx_test_deform


def _flat(rng) -> list[float]:
    """A MONAI range as the shim's flat (lo, hi) pairs (one per element; f means (-f, f))."""
    return [v for pair in spatial._rand_ranges(rng, "range") for v in pair]


def _elastic(cxx, x, extras=(), *, sigma_range, magnitude_range, prob=0.1, rotate_range=None, shear_range=None,
             translate_range=None, scale_range=None, spatial_size=(), mode="bilinear", padding_mode="reflection",
             field="fast", label_mode="nearest", seed=0, first_sample=0, return_displacement=True):
    return cxx.rand3d_elastic(x, list(extras), list(sigma_range), list(magnitude_range), prob, _flat(rotate_range),
                              _flat(shear_range), _flat(translate_range), _flat(scale_range), list(spatial_size), mode,
                              padding_mode, field, label_mode, seed, first_sample, return_displacement)


def _grid(cxx, x, extras=(), *, num_cells, distort_steps, mode="bilinear", padding_mode="border",
          label_mode="nearest", return_displacement=True):
    cells = [num_cells] if isinstance(num_cells, int) else list(num_cells)
    return cxx.grid_distortion(x, list(extras), cells, [len(s) for s in distort_steps],
                               [float(v) for s in distort_steps for v in s], mode, padding_mode, label_mode,
                               return_displacement)


def _rand_grid(cxx, x, extras=(), *, num_cells=5, prob=0.1, distort_limit=(-0.03, 0.03), mode="bilinear",
               padding_mode="border", label_mode="nearest", seed=0, first_sample=0, return_displacement=True):
    cells = [num_cells] if isinstance(num_cells, int) else list(num_cells)
    limit = [float(distort_limit)] if isinstance(distort_limit, (int, float)) else [float(v) for v in distort_limit]
    return cxx.rand_grid_distortion(x, list(extras), cells, prob, limit, mode, padding_mode, label_mode, seed,
                                    first_sample, return_displacement)


def _torchio(cxx, x, extras=(), *, num_control_points=7, max_displacement=7.5, locked_borders=2,
             image_interpolation="linear", label_interpolation="nearest", p=1.0, spacing=1.0, padding_mode="border",
             seed=0, first_sample=0, return_displacement=True):
    k = [num_control_points] if isinstance(num_control_points, int) else list(num_control_points)
    d = [float(v) for v in np.atleast_1d(max_displacement)]
    s = [float(v) for v in np.atleast_1d(spacing)]
    return cxx.random_elastic_deformation(x, list(extras), k, d, locked_borders, image_interpolation,
                                          label_interpolation, p, s, padding_mode, seed, first_sample,
                                          return_displacement)


def _data(n=3, size=(17, 20, 14), seed=8):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, *size, generator=g) * 100
    lab = torch.randint(0, 6, (n, 1, *size), generator=g, dtype=torch.int16)
    return x, lab


def _seed64(seed: int) -> int:
    """The int64 seed the shim takes for Python's 64-bit seed."""
    return seed - (1 << 64) if seed >= (1 << 63) else seed


# ---------------- identical to the Python transforms ----------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("field", ["fast", "exact"])
@pytest.mark.parametrize("seed", [12345, (1 << 64) - 98765])
def test_rand3d_elastic_equals_python(cxx, device, field, seed):
    """Rand3DElastic with a random affine (rotate / shear / translate / scale ranges, pairs and
    numbers), a gate that skips some samples, a spatial_size with a fall-back entry and
    first_sample > 0: the C++ draws, image, label and displacement are the Python transform's
    bytes (its draw_params(N, first_sample, seed) replayed; the label through the same plan in
    one gather, as Rand3DElasticd does). On CUDA too (no GPU in CI: skipped)."""
    x, lab = (t.to(device) for t in _data(6))
    kw = dict(sigma_range=(3.0, 4.5), magnitude_range=(40.0, 90.0), prob=0.5, rotate_range=((0.1, 0.3), 0.2),
              shear_range=0.05, translate_range=(2.0, 1.0, 3.0), scale_range=0.1, padding_mode="border", field=field)
    img, extras, fields, params = _elastic(cxx, x, [lab], spatial_size=(19, -1, 12), seed=_seed64(seed),
                                           first_sample=5, **kw)
    t = deform.Rand3DElastic(spatial_size=(19, -1, 12), **kw)
    want_params = t.draw_params(6, first_sample=5, seed=seed)
    assert torch.equal(params, want_params)
    gates = t._gates(want_params)
    assert gates.any() and not gates.all()
    t._last = want_params
    want = t(x, randomize=False)
    assert img.shape == (6, 2, 19, 20, 12) and torch.equal(img, want)
    assert torch.equal(fields[0], t.displacement_field())
    plan = t._plan(tuple(x.shape[2:]), 6, want_params, x.device, None)
    want_img, want_lab = deform._launch([x, lab], plan, ["linear", "nearest"], ["border", "border"])
    assert torch.equal(want_img, img) and torch.equal(extras[0], want_lab)
    assert extras[0].dtype == torch.int16
    assert set(extras[0].unique().tolist()) <= set(lab.unique().tolist())
    assert img.device == x.device and fields[0].device == x.device
    assert not img.isnan().any() and fields[0][torch.from_numpy(gates).to(device)].abs().max() > 1.0


@pytest.mark.parametrize("device", devices())
def test_rand_grid_distortion_equals_python(cxx, device):
    x, lab = (t.to(device) for t in _data(5))
    img, extras, fields, params = _rand_grid(cxx, x, [lab], num_cells=(3, 4, 5), prob=0.6, distort_limit=0.25,
                                             padding_mode="zeros", seed=7, first_sample=2)
    t = deform.RandGridDistortion((3, 4, 5), 0.6, 0.25, padding_mode="zeros")
    t._last = t.draw_params(5, first_sample=2, seed=7)
    assert torch.equal(params, t._last)
    assert torch.equal(img, t(x, randomize=False))
    assert torch.equal(fields[0], t.displacement_field()) and fields[0].dtype == torch.float64
    plan = t._plan(tuple(x.shape[2:]), 5, t._last, x.device)
    _, want_lab = deform._launch([x, lab], plan, ["linear", "nearest"], ["zeros", "zeros"])
    assert torch.equal(extras[0], want_lab)
    # distort_limit as (lo, hi), not sorted by the transform (MONAI keeps the order).
    img2, _, _, _ = _rand_grid(cxx, x, num_cells=2, prob=1.0, distort_limit=(0.1, -0.2), seed=3)
    t2 = deform.RandGridDistortion(2, 1.0, (0.1, -0.2))
    t2._last = t2.draw_params(5, seed=3)
    assert torch.equal(img2, t2(x, randomize=False))


@pytest.mark.parametrize("device", devices())
def test_integer_modes_with_zeros_equal_python(cxx, device):
    """MONAI's integer (scipy) modes read padding 'zeros' as scipy's 'constant' (resample's
    "cutoff"), per input: the C++ deformations gather as Python's do, bit for bit (image spline
    order 3, label order 0; RandGridDistortion with order 1 and a named label mode)."""
    x, lab = (t.to(device) for t in _data(3))
    kw = dict(sigma_range=(3.0, 4.5), magnitude_range=(80.0, 160.0), prob=1.0, padding_mode="zeros")
    img, extras, _, params = _elastic(cxx, x, [lab], mode="3", label_mode="0", seed=11, **kw)
    t = deform.Rand3DElastic(mode=3, **kw)
    t._last = t.draw_params(3, seed=11)
    assert torch.equal(params, t._last)
    assert torch.equal(img, t(x, randomize=False))
    plan = t._plan(tuple(x.shape[2:]), 3, t._last, x.device, None)
    (want_lab,) = deform._launch([lab], plan, ["nearest"], ["cutoff"])
    assert torch.equal(extras[0], want_lab)
    # not grid_sample's 'zeros' (half a voxel of blending beyond the edge)
    z_img, z_lab = deform._launch([x, lab], plan, ["cubic", "nearest"], ["zeros", "zeros"])
    assert not torch.equal(img, z_img) and not torch.equal(extras[0], z_lab)
    img, extras, _, _ = _rand_grid(cxx, x, [lab], num_cells=3, prob=1.0, distort_limit=0.3, mode="1",
                                   padding_mode="zeros", seed=2)
    t = deform.RandGridDistortion(3, 1.0, 0.3, mode=1, padding_mode="zeros")
    t._last = t.draw_params(3, seed=2)
    assert torch.equal(img, t(x, randomize=False))
    plan = t._plan(tuple(x.shape[2:]), 3, t._last, x.device)
    (want_lab,) = deform._launch([lab], plan, ["nearest"], ["zeros"])
    assert torch.equal(extras[0], want_lab)


def test_integer_modes_with_zeros_match_scipy(cxx):
    """Independently: out(x) = scipy.ndimage.map_coordinates(in, x + u(x), order=k,
    mode='constant') (float64), u the displacement the call returns, for image orders 3 and 1
    and the label's order 0. A coordinate within float32 rounding of an edge may fall on either
    side of scipy's cutoff: at most 0.1% of the voxels may differ beyond the tolerance."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x, lab = _data(2, (15, 18, 13))
    grid = np.stack(np.meshgrid(*[np.arange(s, dtype=np.float64) for s in x.shape[2:]], indexing="ij"))
    for order in (3, 1):
        img, extras, fields, _ = _elastic(cxx, x, [lab], sigma_range=(3.0, 4.0), magnitude_range=(150.0, 250.0),
                                          prob=1.0, mode=str(order), label_mode="0", padding_mode="zeros", seed=4)
        u = fields[0].double().numpy()
        assert np.abs(u).max() > 2.0
        outside = 0
        for n in range(2):
            coords = grid + u[n]
            for c in range(2):
                ref = ndimage.map_coordinates(x[n, c].double().numpy(), coords, order=order, mode="constant")
                err = np.abs(img[n, c].double().numpy() - ref)
                assert (err > 1e-3 * 100).mean() < 1e-3, (order, err.max())
                outside += int((ref == 0).sum())
            ref = ndimage.map_coordinates(lab[n, 0].double().numpy(), coords, order=0, mode="constant")
            assert (extras[0][n, 0].double().numpy() != ref).mean() < 1e-3
        assert outside > 100  # the cutoff is exercised


def test_grid_distortion_equals_python(cxx):
    x, lab = _data(2, (13, 17, 11))
    steps = [(1.2, 0.8, 1.1, 0.9), (0.9, 1.1, 1.0, 1.05), (1.0, 0.7, 1.3, 1.0)]
    for mode, padding in (("bilinear", "zeros"), ("nearest", "border"), ("bicubic", "reflection")):
        img, extras, fields, _ = _grid(cxx, x, [lab], num_cells=3, distort_steps=steps, mode=mode,
                                       padding_mode=padding)
        t = deform.GridDistortion(3, steps, mode=mode, padding_mode=padding)
        assert torch.equal(img, t(x))
        assert torch.equal(fields[0], t.displacement_field())
        plan = t._plan(tuple(x.shape[2:]), 2, None, x.device)
        _, want_lab = deform._launch([x, lab], plan, [spatial._grid_mode(mode), "nearest"], [padding] * 2)
        assert torch.equal(extras[0], want_lab)


@pytest.mark.parametrize("device", devices())
def test_random_elastic_deformation_equals_python(cxx, device):
    x, lab = (t.to(device) for t in _data(3, (18, 15, 21)))
    kw = dict(num_control_points=(6, 5, 7), max_displacement=(3.0, 2.0, 4.0), p=0.6, spacing=(1.2, 0.9, 1.5))
    for interp, locked in (("linear", 2), ("bspline", 1), ("nearest", 0)):
        img, extras, fields, params = _torchio(cxx, x, [lab], image_interpolation=interp, locked_borders=locked,
                                               seed=99, first_sample=1, **kw)
        t = deform.RandomElasticDeformation(image_interpolation=interp, locked_borders=locked, **kw)
        t._last = t.draw_params(3, first_sample=1, seed=99)
        assert torch.equal(params, t._last)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # TorchIO's folding warning, if any
            out = t({"image": x, "label": lab}, randomize=False)
        assert torch.equal(img, out["image"]) and torch.equal(extras[0], out["label"])
        assert torch.equal(fields[0], t.displacement_field())
        assert extras[0].dtype == torch.int16


def test_rank_4_input_and_batch_split(cxx):
    """(C, D, H, W) comes back (C, D', H', W') and equals the batched call of one sample; a batch
    split with first_sample gives the rows of the whole batch (Philox keyed by global sample).
    One sigma: the fast field's control grid is the batch's largest (deform.py), so with a sigma
    range a sample's coefficients depend on its batch mates' sigmas, in Python as in C++."""
    x, lab = _data(4)
    kw = dict(sigma_range=(4.0, 4.0), magnitude_range=(5.0, 10.0), prob=0.8, rotate_range=0.2, seed=123)
    whole, lw, uw, _ = _elastic(cxx, x, [lab], **kw)
    half, lh, uh, _ = _elastic(cxx, x[2:], [lab[2:]], first_sample=2, **kw)
    assert torch.equal(whole[2:], half) and torch.equal(lw[0][2:], lh[0]) and torch.equal(uw[0][2:], uh[0])
    one, l1, u1, _ = _elastic(cxx, x[1], [lab[1]], first_sample=1, **kw)
    assert one.shape == x[1].shape and l1[0].shape == lab[1].shape
    assert torch.equal(one, whole[1]) and torch.equal(l1[0], lw[0][1]) and torch.equal(u1[0][0], uw[0][1])
    g, gl, _, _ = _grid(cxx, x[0], [lab[0]], num_cells=2, distort_steps=[(1.1, 0.9, 1.0)] * 3)
    assert g.shape == x[0].shape and gl[0].shape == lab[0].shape
    r, _, _, _ = _torchio(cxx, x[3], num_control_points=5, max_displacement=1.0, seed=4, first_sample=3)
    rw, _, _, _ = _torchio(cxx, x, num_control_points=5, max_displacement=1.0, seed=4)
    assert r.shape == x[3].shape and torch.equal(r, rw[3])
    # No displacement field asked: none returned.
    assert _elastic(cxx, x, return_displacement=False, **kw)[2] == []


def test_more_than_four_tensors_share_the_field(cxx):
    """Five extras (the gather takes 4 tensors per launch): every one gets the image's field."""
    x, lab = _data(2)
    extras = [lab, lab.to(torch.int32), lab.to(torch.uint8), lab.to(torch.int64), lab.float()]
    img, outs, _, _ = _elastic(cxx, x, extras, sigma_range=(3.0, 3.0), magnitude_range=(60.0, 60.0), prob=1.0,
                               seed=2)
    ref = outs[0]
    for o, e in zip(outs, extras):
        assert o.dtype == e.dtype and torch.equal(o.to(torch.int64), ref.to(torch.int64))
    assert (ref != lab).float().mean() > 0.05


# ---------------- independent references ----------------
def test_grid_distortion_matches_monai(cxx, ch2):
    """C++ GridDistortion vs MONAI GridDistortion with the same steps on the ch2 template:
    bilinear within 1e-3 of 255 (MONAI's float32 grid), nearest on all but 1e-3 of the voxels
    (half-voxel ties may round either way)."""
    from monai.transforms import GridDistortion as M

    img = ch2[0][None, :, 20:120, 30:140, 10:90].float()
    steps = [(1.1, 0.9, 1.05, 0.95, 1.0, 1.02), (0.8, 1.2, 1.0, 1.0, 0.9, 1.1), (1.0, 1.0, 1.3, 0.7, 1.0, 1.0)]
    for mode, padding in (("bilinear", "border"), ("nearest", "zeros")):
        want = torch.as_tensor(M(5, steps, mode=mode, padding_mode=padding)(img[0]))
        got = _grid(cxx, img, num_cells=5, distort_steps=steps, mode=mode, padding_mode=padding)[0][0]
        err = (got - want).abs()
        if mode == "bilinear":
            assert err.max().item() < 1e-3 * 255, err.max().item()
        else:
            assert (err > 0).float().mean().item() < 1e-3
        assert (got - img[0]).abs().mean() > 1.0


def test_rand_grid_distortion_matches_monai_per_sample(cxx, ch2):
    """Each selected sample vs MONAI GridDistortion with that sample's steps (read from the draw
    by the Python class's parameters()); unselected samples are unchanged."""
    from monai.transforms import GridDistortion as M

    img = ch2[0][None, :, 20:100, 30:110, 10:90].float().expand(3, -1, -1, -1, -1)
    out, _, _, params = _rand_grid(cxx, img, num_cells=4, prob=0.7, distort_limit=0.2, seed=5)
    steps = deform.RandGridDistortion(4, 0.7, 0.2).parameters(params)
    assert any(s is not None for s in steps)
    for i, s in enumerate(steps):
        if s is None:
            assert torch.equal(out[i], img[i])
            continue
        want = torch.as_tensor(M(4, s, padding_mode="border")(img[i]))
        assert (out[i] - want).abs().max().item() < 1e-3 * 255


def test_rand3d_elastic_exact_matches_monai_with_the_same_noise(cxx, ch2):
    """C++ exact field through MONAI Rand3DElastic given the same noise (Philox, keyed as the C++
    transform keys it) and the same sigma, magnitude and rotation: within 1e-3 of 255 at most,
    1e-5 of 255 on average (float32 smoothing and coordinates)."""
    img = ch2[0][None, :, 40:100, 50:120, 60:110].float()
    out, _, _, params = _elastic(cxx, img, sigma_range=(4.0, 6.0), magnitude_range=(20.0, 60.0), prob=1.0,
                                 rotate_range=(0.2, 0.1, 0.3), padding_mode="zeros", field="exact", seed=7)
    t = deform.Rand3DElastic((4.0, 6.0), (20.0, 60.0), prob=1.0, rotate_range=(0.2, 0.1, 0.3))
    (p,) = t.parameters(params)
    noise = deform._RandomDeform._noise(params, (1, 3, *img.shape[2:]), img.device)
    m = _monai_elastic(p["sigma"], p["magnitude"], noise[0], p["rotate_params"])
    m.rand_affine_grid.randomize = lambda *a, **k: None
    m.rand_affine_grid.rotate_params = p["rotate_params"]
    want = torch.as_tensor(m(img[0], randomize=False))
    err = (out[0] - want).abs()
    assert err.max().item() < 1e-3 * 255, err.max().item()
    assert err.mean().item() < 1e-5 * 255
    assert (out - img).abs().mean() > 1.0


@pytest.mark.filterwarnings("ignore:monai.networks.blocks.Warp")
@pytest.mark.parametrize("name", ["Rand3DElastic-fast", "Rand3DElastic-exact", "GridDistortion",
                                  "RandGridDistortion", "RandomElasticDeformation"])
def test_displacement_field_is_monai_ddf(cxx, name):
    """The returned displacement u is MONAI's ddf: monai.networks.blocks.Warp(image, u) (float64
    grid_sample, border padding) reproduces the C++ output within 1e-4 of the data range; the
    label (nearest) matches grid_sample nearest through u on all but 1e-3 of the voxels (ties)
    and keeps its values; samples the gate skipped have u = 0 and are unchanged."""
    from monai.networks.blocks import Warp

    x, lab = _data(5, (17, 20, 14))
    common = dict(padding_mode="border")
    if name.startswith("Rand3DElastic"):
        img, extras, fields, params = _elastic(cxx, x, [lab], sigma_range=(3.0, 4.0), magnitude_range=(150.0, 250.0),
                                               prob=0.6, field=name.split("-")[1], seed=4, **common)
        gates = params[:, 0] < 0.6
    elif name == "GridDistortion":
        img, extras, fields, _ = _grid(cxx, x, [lab], num_cells=3, distort_steps=[(1.2, 0.8, 1.1, 0.9)] * 3,
                                       **common)
        gates = torch.ones(5, dtype=torch.bool)
    elif name == "RandGridDistortion":
        img, extras, fields, params = _rand_grid(cxx, x, [lab], num_cells=3, prob=0.6, distort_limit=0.3, seed=4,
                                                 **common)
        gates = params[:, 0] < 0.6
    else:
        img, extras, fields, params = _torchio(cxx, x, [lab], num_control_points=(6, 5, 7),
                                               max_displacement=(3.0, 2.0, 4.0), p=0.6, seed=5, **common)
        gates = params[:, 0] < 0.6
    (u,) = fields
    assert u.shape == (5, 3, 17, 20, 14) and gates.any()
    assert u.abs().max() > 1.0
    want = Warp("bilinear", "border")(x.double(), u.double())
    err = (img.double() - want).abs().max().item()
    assert err < 1e-4 * 100, err
    ref = _through_field(lab.double(), u, "nearest", "border")
    assert (extras[0].double() != ref).float().mean().item() < 1e-3
    assert set(extras[0].unique().tolist()) <= set(lab.unique().tolist())
    moved = u.flatten(1).abs().amax(1) > 0
    assert torch.equal(moved, gates)
    for i in torch.nonzero(~gates).flatten().tolist():
        assert torch.equal(img[i], x[i]) and torch.equal(extras[0][i], lab[i])


def test_random_elastic_field_matches_simpleitk_bspline(cxx):
    """RandomElasticDeformation's displacement (voxels x spacing = mm) at a few voxels vs
    SimpleITK's BSplineTransformInitializer / BSplineTransform with the draw's control points
    (the Python class's plan of the same draw, converted to mm), evaluated by TransformPoint:
    within 1e-4 mm."""
    sitk = pytest.importorskip("SimpleITK")
    size, spacing, k = (30, 26, 22), (1.2, 0.9, 1.5), (7, 6, 8)
    x = torch.rand(1, 1, *size)
    _, _, (u,), params = _torchio(cxx, x, num_control_points=k, max_displacement=(4.0, 3.0, 5.0), spacing=spacing,
                                  seed=4)
    t = deform.RandomElasticDeformation(num_control_points=k, max_displacement=(4.0, 3.0, 5.0), spacing=spacing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # axis 2 exceeds half its control spacing
        plan = t._plan(size, 1, params, "cpu", spacing)
    coeff_mm = plan.field[0].double() * torch.tensor(spacing, dtype=torch.float64).view(3, 1, 1, 1)
    # Array axes (d, h, w) are ITK's (x, y, z) here: an image of size `size` in ITK order.
    img = sitk.Image(list(size), sitk.sitkFloat32)
    img.SetSpacing(list(spacing))
    bs = sitk.BSplineTransformInitializer(img, [kk - 3 for kk in k])
    bs.SetParameters(coeff_mm.permute(1, 2, 3, 0).numpy().flatten(order="F").tolist())
    rng = np.random.default_rng(0)
    points = [tuple(int(rng.integers(0, s)) for s in size) for _ in range(40)] + [(0, 0, 0), (29, 25, 21)]
    mm = u[0].double() * torch.tensor(spacing, dtype=torch.float64).view(3, 1, 1, 1)
    worst = 0.0
    for idx in points:
        phys = img.TransformIndexToPhysicalPoint(idx)
        moved = np.array(bs.TransformPoint(phys)) - np.array(phys)
        got = mm[(slice(None), *idx)].numpy()
        worst = max(worst, float(np.abs(got - moved).max()))
    assert worst < 1e-4, worst
    assert mm.abs().max() > 1.0


# ---------------- warning, zero displacement, errors ----------------
def _warned(capfd, record) -> str:
    """TORCH_WARN's text: a Python warning where torch converts it, else the C++ handler's stderr."""
    return " ".join(str(w.message) for w in record) + capfd.readouterr().err


@pytest.fixture
def warn_always():
    """torch.set_warn_always(True) for one test: the folding warning is shown once per process
    and message otherwise, and earlier tests may have shown it already."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    yield
    torch.set_warn_always(before)


def test_folding_warning(cxx, capfd, warn_always):
    """TorchIO's check: max_displacement above half the control spacing ((S + 0.25) * spacing /
    (K - 3) per axis) warns and names the axes; below it, nothing."""
    x = torch.rand(1, 20, 20, 20)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _torchio(cxx, x, num_control_points=12, max_displacement=20.0, seed=1)
    text = _warned(capfd, record)
    assert "folding may occur" in text and "[0, 1, 2]" in text
    # Axis 2 only: spacing (20.25 * 1 / 4) / 2 = 2.53 mm against 3 mm; axes 0, 1 allow 5.06 mm.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _torchio(cxx, x, num_control_points=(7, 7, 7), max_displacement=(2.0, 2.0, 3.0),
                 spacing=(2.0, 2.0, 1.0), seed=1)
    text = _warned(capfd, record)
    assert "folding may occur" in text and "dimensions: [2]" in text
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _torchio(cxx, x, num_control_points=5, max_displacement=2.0, seed=1)
    assert "folding" not in _warned(capfd, record)


# A fresh process (the warning's once-per-process state is global). TORCH_WARN reaches Python as
# a warning where torch converts it (recorded under the "always" filter, so only the C++ side can
# drop a repeat) and otherwise as a line on stderr from c10's handler: every call is preceded by
# a marker line on stderr, and the parent reads both.
_ONCE_SCRIPT = r"""
import sys, warnings
import torch
import voxaug
torch.ops.load_library(sys.argv[1])
cxx = torch.ops.voxaug_cxx_test_deform
x = torch.rand(1, 1, 20, 20, 20)

def call(k, d, s=(1.0,)):
    print("@@call", file=sys.stderr, flush=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cxx.random_elastic_deformation(x, [], k, d, 2, "linear", "nearest", 1.0, list(s), "border", 1, 0, False)
    for w in record:
        print(str(w.message), file=sys.stderr, flush=True)

for _ in range(3):
    call([12], [20.0])                             # every axis
call([7, 7, 7], [2.0, 2.0, 3.0], [2.0, 2.0, 1.0])  # axis 2: another message
call([7, 7, 7], [2.0, 2.0, 3.0], [2.0, 2.0, 1.0])
call([12], [20.0])
torch.set_warn_always(True)                        # TORCH_WARN_ONCE's escape hatch
call([12], [20.0])
call([12], [20.0])
"""


def test_folding_warning_once_per_process_and_message(tmp_path):
    """The C++ warning is shown once per process for each message (the axes it names), as
    Python's default filter shows TorchIO's warnings.warn once per text and location, instead of
    on every call (c10's handler printed it at every step of a C++ training loop);
    torch.set_warn_always(True) shows every one, as for TORCH_WARN_ONCE."""
    import re
    import subprocess
    import sys

    script = tmp_path / "once.py"
    script.write_text(_ONCE_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(SHIM)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls = r.stderr.split("@@call\n")[1:]
    seen = [re.findall(r"dimensions: (\[[^\]]*\]), so folding may occur", c) for c in calls]
    assert seen == [["[0, 1, 2]"], [], [], ["[2]"], [], [], ["[0, 1, 2]"], ["[0, 1, 2]"]], r.stderr


def test_zero_max_displacement_returns_the_input(cxx):
    x, lab = _data(2)
    img, extras, (u,), _ = _torchio(cxx, x, [lab], max_displacement=0.0, seed=3)
    assert torch.equal(img, x) and torch.equal(extras[0], lab)
    assert u.shape == (2, 3, *x.shape[2:]) and u.dtype == torch.float32 and u.abs().max() == 0


def test_bad_arguments_name_the_argument(cxx):
    x, lab = _data(2)
    el = dict(sigma_range=(1.0, 2.0), magnitude_range=(1.0, 2.0))
    cases = [
        (lambda: _elastic(cxx, x, sigma_range=(0.0, 2.0), magnitude_range=(1.0, 2.0)), "sigma_range"),
        (lambda: _elastic(cxx, x, sigma_range=(3.0, 2.0), magnitude_range=(1.0, 2.0)), "sigma_range"),
        (lambda: _elastic(cxx, x, sigma_range=(1.0, 2.0), magnitude_range=(3.0, 2.0)), "magnitude_range"),
        (lambda: _elastic(cxx, x, prob=1.5, **el), "prob"),
        (lambda: _elastic(cxx, x, field="approx", **el), "field"),
        (lambda: _elastic(cxx, x, mode="trilinear", **el), "mode"),
        (lambda: _elastic(cxx, x, padding_mode="constant", **el), "padding_mode"),
        (lambda: _elastic(cxx, x, label_mode="linear", **el), "label_mode"),
        (lambda: _elastic(cxx, x, rotate_range=(0.1, 0.1, 0.1, 0.1), **el), "rotate_range"),
        (lambda: _elastic(cxx, x, spatial_size=(4, 4), **el), "spatial_size"),
        (lambda: _elastic(cxx, x[0, 0, 0], **el), "image must be"),
        (lambda: _elastic(cxx, x, [lab[:, :, :-1]], **el), r"extras\[0\]"),
        (lambda: _elastic(cxx, x, [lab[0]], **el), r"extras\[0\]"),
        (lambda: _grid(cxx, x, num_cells=0, distort_steps=[(1.0,)] * 3), "num_cells"),
        (lambda: _grid(cxx, x, num_cells=2, distort_steps=[(1.0, 1.0, 1.0), (1.0, 1.0), (1.0, 1.0, 1.0)]),
         r"distort_steps\[1\]"),
        (lambda: _grid(cxx, x, num_cells=2, distort_steps=[(1.0, 1.0, 1.0)] * 2), "distort_steps"),
        (lambda: _rand_grid(cxx, x, distort_limit=(0.1, 0.2, 0.3)), "distort_limit"),
        (lambda: _rand_grid(cxx, x, num_cells=(2, 2)), "num_cells"),
        (lambda: _rand_grid(cxx, x, prob=-0.1), "prob"),
        (lambda: _torchio(cxx, x, num_control_points=3), "num_control_points"),
        (lambda: _torchio(cxx, x, num_control_points=4, locked_borders=2), "num_control_points"),
        (lambda: _torchio(cxx, x, locked_borders=3), "locked_borders"),
        (lambda: _torchio(cxx, x, max_displacement=-1.0), "max_displacement"),
        (lambda: _torchio(cxx, x, spacing=(1.0, 0.0, 1.0)), "spacing"),
        (lambda: _torchio(cxx, x, image_interpolation="bilinear"), "image_interpolation"),
        (lambda: _torchio(cxx, x, label_interpolation="area"), "label_interpolation"),
        (lambda: _torchio(cxx, x, padding_mode="wrap"), "padding_mode"),
        (lambda: _torchio(cxx, x, p=2.0), r"\bp\b"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


def test_apply_checks_params(cxx):
    """apply() replays a draw: the draw of draw_params gives the seeded call's bytes; params of
    the wrong shape or dtype, or rows that are not consecutive samples, raise."""
    x, _ = _data(3)
    out, _, (u,), params = _elastic(cxx, x, sigma_range=(2.0, 3.0), magnitude_range=(20.0, 40.0), prob=1.0,
                                    field="exact", seed=17)
    got, (gu,) = cxx.rand3d_elastic_apply(x, params, [2.0, 3.0], [20.0, 40.0], 1.0, "exact")
    assert torch.equal(got, out) and torch.equal(gu, u)
    with pytest.raises(ValueError, match="params"):
        cxx.rand3d_elastic_apply(x, params[:2], [2.0, 3.0], [20.0, 40.0], 1.0, "exact")
    with pytest.raises(ValueError, match="params"):
        cxx.rand3d_elastic_apply(x, params.float(), [2.0, 3.0], [20.0, 40.0], 1.0, "exact")
    with pytest.raises(ValueError, match="consecutive"):
        cxx.rand3d_elastic_apply(x, params[[0, 2, 1]], [2.0, 3.0], [20.0, 40.0], 1.0, "exact")
    # A shared draw (every row the same sample) gives every sample the same deformation.
    shared = params[:1].expand(3, -1).contiguous()
    same, _ = cxx.rand3d_elastic_apply(x[:1].expand(3, -1, -1, -1, -1).contiguous(), shared, [2.0, 3.0],
                                       [20.0, 40.0], 1.0, "exact")
    assert torch.equal(same[0], same[1]) and torch.equal(same[0], out[0])
