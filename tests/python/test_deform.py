"""Deformation fields in the gather: vs SimpleITK's BSplineTransform, vs grid_sample through
the materialised field, vs MONAI Rand3DElastic / GridDistortion with the same noise / steps,
fast-vs-exact field statistics, real volumes, bad inputs."""
import math
import os
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from voxaug import deform, ops

from conftest import TEMPLATES, devices


def _grid_sample_index(x, src, padding="zeros"):
    """grid_sample (align_corners=True) at input voxel indices src (N, 3, D, H, W), float64."""
    sizes = x.shape[2:]
    norm = [2.0 * src[:, a] / max(sizes[a] - 1, 1) - 1.0 for a in range(3)]
    grid = torch.stack([norm[2], norm[1], norm[0]], -1)  # grid_sample wants (x=w, y=h, z=d)
    return F.grid_sample(x.double(), grid.double(), mode="bilinear", padding_mode=padding, align_corners=True)


def _index_grid(size):
    return torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in size], indexing="ij"))


@pytest.mark.parametrize("size,spacing,k", [((20, 15, 12), (1.0, 1.0, 1.0), (7, 7, 7)),
                                            ((33, 17, 9), (0.7, 2.5, 1.3), (5, 8, 4)),
                                            ((181, 217, 181), (1.0, 1.0, 1.0), (7, 7, 7))])
def test_bspline_field_matches_simpleitk(size, spacing, k):
    sitk = pytest.importorskip("SimpleITK")
    img = sitk.Image(list(size), sitk.sitkFloat32)
    img.SetSpacing(list(spacing))
    img.SetOrigin([3.0, -7.0, 11.0])
    t = sitk.BSplineTransformInitializer(img, [kk - 3 for kk in k])
    rng = np.random.default_rng(5)
    p = rng.uniform(-6, 6, (*k, 3))  # mm, ITK's (x, y, z) control order
    t.SetParameters(p.flatten(order="F").tolist())
    disp = sitk.TransformToDisplacementField(t, sitk.sitkVectorFloat64, img.GetSize(), img.GetOrigin(),
                                             img.GetSpacing(), img.GetDirection())
    ref = np.transpose(sitk.GetArrayFromImage(disp), (3, 2, 1, 0))  # (3, x, y, z) mm
    sp = torch.tensor(spacing, dtype=torch.float64)
    coeff = (torch.from_numpy(p).permute(3, 0, 1, 2) / sp.view(3, 1, 1, 1))[None]  # voxels
    sc, off = deform.sitk_control_map(size, k)
    for dtype, tol in ((torch.float64, 1e-5), (torch.float32, 1e-4)):  # issue: 1e-4 mm
        u = ops.deform_field_dense(coeff.to(dtype), ops.BSPLINE_FIELD, size, sc, off)
        mm = u[0].double() * sp.view(3, 1, 1, 1)
        err = (mm - torch.from_numpy(ref)).abs().max().item()
        assert err < tol, f"{dtype}: max |voxaug - SimpleITK| = {err} mm"
    assert np.abs(ref).max() > 1.0


@pytest.mark.parametrize("device", devices())
def test_zero_field_is_plain_resample(device):
    x = torch.rand(2, 2, 11, 9, 13, device=device)
    lab = torch.randint(0, 5, (2, 1, 11, 9, 13), dtype=torch.int16, device=device)
    a = math.radians(20)
    m = torch.tensor([[math.cos(a), -math.sin(a), 0, 3], [math.sin(a), math.cos(a), 0, -1], [0, 0, 1, 0.5]],
                     dtype=torch.float64).expand(2, 3, 4).contiguous().to(device)
    zeros = torch.zeros(2, 3, 5, 5, 6, device=device)
    plain = ops.resample([x, lab], m, (10, 12, 8), ["linear", "nearest"], ["reflection", "zeros"])
    fused = ops.resample_deformed([x, lab], m, zeros, ops.BSPLINE_FIELD, (10, 12, 8), ["linear", "nearest"],
                                  ["reflection", "zeros"], field_scale=(0.3, 0.3, 0.5), field_offset=(1, 1, 1))
    for p, f in zip(plain, fused):
        assert torch.equal(p, f)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_fused_equals_materialised_field_and_grid_sample(device, padding):
    torch.manual_seed(0)
    x = torch.randn(3, 2, 14, 16, 15, device=device)
    out_size = (13, 17, 12)
    coeff = torch.empty(3, 3, 6, 7, 5, device=device).uniform_(-2, 2)
    fmap = torch.tensor([[5 / 12, 6 / 16, 3 / 11, 1, 1, 1], [0.3, 0.3, 0.2, 1.2, 1.1, 1.4],
                         [5 / 12, 6 / 16, 3 / 11, 1, 1, 1]], dtype=torch.float64, device=device)
    m = torch.eye(3, 4, dtype=torch.float64).repeat(3, 1, 1)
    m[:, :, 3] = torch.tensor([0.7, -0.4, 1.2], dtype=torch.float64)
    m[1, 0, 1] = 0.15
    m = m.to(device)
    (fused,) = ops.resample_deformed([x], m, coeff, ops.BSPLINE_FIELD, out_size, ["linear"], [padding],
                                     field_map=fmap)
    u = ops.deform_field_dense(coeff, ops.BSPLINE_FIELD, out_size, field_map=fmap)
    (via_dense,) = ops.resample_deformed([x], m, u, ops.DENSE_FIELD, out_size, ["linear"], [padding])
    assert torch.equal(fused, via_dense)
    # Independent: grid_sample through src = M (x + u), float64.
    pts = _index_grid(out_size).to(device)[None] + u.double()
    src = torch.einsum("nrk,nkdhw->nrdhw", m[:, :, :3], pts) + m[:, :, 3].view(3, 3, 1, 1, 1)
    ref = _grid_sample_index(x, src, padding)
    err = (fused.double() - ref).abs().max().item()
    assert err < 1e-4 * x.abs().max().item(), err
    assert u.abs().max() > 0.5


def test_per_sample_map_equals_separate_calls():
    coeff = torch.empty(2, 3, 6, 6, 6).uniform_(-1, 1)
    fmap = torch.tensor([[0.4, 0.3, 0.25, 1, 1.1, 1.2], [0.2, 0.35, 0.3, 1.3, 1, 1]], dtype=torch.float64)
    both = ops.deform_field_dense(coeff, ops.BSPLINE_FIELD, (9, 10, 11), field_map=fmap)
    for i in range(2):
        one = ops.deform_field_dense(coeff[i:i + 1], ops.BSPLINE_FIELD, (9, 10, 11), fmap[i, :3].tolist(),
                                     fmap[i, 3:].tolist())
        assert torch.equal(both[i:i + 1], one)


def _monai_elastic(sigma, magnitude, noise, rotate=None):
    from monai.transforms import Rand3DElastic as M

    m = M(sigma_range=(sigma, sigma), magnitude_range=(magnitude, magnitude), prob=1.0,
          rotate_range=None if rotate is None else [(r, r) for r in rotate], padding_mode="zeros")
    m.randomize(noise.shape[1:])
    m.rand_offset = noise.numpy()
    m.sigma, m.magnitude = sigma, magnitude
    return m


def test_exact_mode_matches_monai_rand3delastic_with_the_same_noise(ch2):
    """voxaug's exact field (its own Philox noise) through MONAI Rand3DElastic: same output."""
    img = ch2[0][None, :, 40:100, 50:120, 60:110].float()  # (1, 1, 60, 70, 50)
    t = deform.Rand3DElastic((4.0, 6.0), (20.0, 60.0), prob=1.0, rotate_range=(0.2, 0.1, 0.3),
                             padding_mode="zeros", field="exact", seed=7)
    params = t.draw_params(1)
    (p,) = t.parameters(params)
    plan = t._plan(tuple(img.shape[2:]), 1, params, img.device)
    noise = deform._RandomDeform._noise(params, (1, 3, *img.shape[2:]), img.device)
    # Smoothing equals MONAI's GaussianFilter(truncated=3) on the same noise.
    from monai.networks.layers import GaussianFilter

    ref_field = GaussianFilter(3, p["sigma"], 3.0)(noise) * p["magnitude"]
    assert (plan.field - ref_field).abs().max().item() < 1e-5 * ref_field.abs().max().item()
    m = _monai_elastic(p["sigma"], p["magnitude"], noise[0], p["rotate_params"])
    m.rand_affine_grid.randomize = lambda *a, **k: None  # MONAI redraws the affine inside __call__
    m.rand_affine_grid.rotate_params = p["rotate_params"]
    want = m(img[0], randomize=False)
    t._last = params  # replay the draw
    got = t(img, randomize=False)
    err = (got[0] - torch.as_tensor(want)).abs()
    assert err.max().item() < 1e-3 * 255, err.max().item()
    assert err.mean().item() < 1e-5 * 255
    assert (got - img).abs().mean() > 1.0  # it did deform


def _field_stats(u):
    """std of the displacement, std of its first differences along each axis."""
    core = u[:, :, 8:-8, 8:-8, 8:-8]
    diffs = [torch.diff(core, dim=d).std().item() for d in (2, 3, 4)]
    return core.std().item(), float(np.mean(diffs))


@pytest.mark.parametrize("sigma", [3.0, 5.0])
def test_fast_field_statistics_match_exact_mode(sigma):
    """The documented approximation: the B-spline field's displacement and gradient spread are
    within 10 % / 20 % of MONAI's smoothed-noise field (averaged over 4 samples of 64^3)."""
    size = (64, 64, 64)
    kw = dict(prob=1.0, seed=3)
    exact = deform.Rand3DElastic((sigma, sigma), (10.0, 10.0), field="exact", **kw)
    fast = deform.Rand3DElastic((sigma, sigma), (10.0, 10.0), field="fast", **kw)
    params = exact.draw_params(4)
    ue = exact._plan(size, 4, params, "cpu").field
    pf = fast._plan(size, 4, params, "cpu")
    uf = ops.deform_field_dense(pf.field, ops.BSPLINE_FIELD, size, field_map=pf.field_map)
    se, ge = _field_stats(ue)
    sf, gf = _field_stats(uf)
    # MONAI's variance from the kernel: 10^2 * (1/3) * (sum g^2)^3.
    predicted = 10 * math.sqrt(deform.gaussian_kernel_sum_sq(sigma) ** 3 / 3)
    assert abs(se / predicted - 1) < 0.1, (se, predicted)
    assert abs(sf / se - 1) < 0.1, (sf, se)
    assert abs(gf / ge - 1) < 0.2, (gf, ge)


def test_rand3delastic_dict_labels_stay_labels(ch2):
    nib = pytest.importorskip("nibabel")
    aal = nib.load(os.path.join(TEMPLATES, "aal.nii.gz"))
    lab = torch.from_numpy(np.asarray(aal.dataobj).astype(np.int16))[None, None]
    img = ch2[0][None].float()
    assert lab.shape[2:] == img.shape[2:]
    batch_img, batch_lab = img.expand(2, -1, -1, -1, -1), lab.expand(2, -1, -1, -1, -1)
    t = deform.Rand3DElasticd(["image", "label"], (6, 8), (50, 100), prob=1.0, rotate_range=0.2,
                              mode=["bilinear", "nearest"], padding_mode="zeros", seed=11)
    out = t({"image": batch_img, "label": batch_lab})
    assert out["label"].dtype == torch.int16
    assert set(torch.unique(out["label"]).tolist()) <= set(torch.unique(lab).tolist())
    assert not torch.equal(out["label"][0], out["label"][1])  # independent draws per sample
    assert (out["image"] - batch_img).abs().mean() > 1.0
    # The label follows the image: the foreground of the deformed image sits on labelled voxels.
    fg, fg0 = out["image"] > 60, batch_img > 60
    base = (batch_lab[fg0] > 0).float().mean()
    assert (out["label"][fg] > 0).float().mean() > base - 0.05


def test_grid_distortion_matches_monai(ch2):
    from monai.transforms import GridDistortion as M

    img = ch2[0][None, :, 20:120, 30:140, 10:90].float()
    steps = [(1.1, 0.9, 1.05, 0.95, 1.0, 1.02), (0.8, 1.2, 1.0, 1.0, 0.9, 1.1), (1.0, 1.0, 1.3, 0.7, 1.0, 1.0)]
    for mode, padding in (("bilinear", "border"), ("nearest", "zeros")):
        want = torch.as_tensor(M(5, steps, mode=mode, padding_mode=padding)(img[0]))
        got = deform.GridDistortion(5, steps, mode=mode, padding_mode=padding)(img)[0]
        err = (got - want).abs()
        if mode == "bilinear":
            assert err.max().item() < 1e-3 * 255, err.max().item()
        else:  # ties at half voxels may round either way
            assert (err > 0).float().mean().item() < 1e-3


def test_rand_grid_distortion_per_sample_draws(ch2):
    from monai.transforms import GridDistortion as M

    img = ch2[0][None, :, 20:100, 30:110, 10:90].float().expand(3, -1, -1, -1, -1)
    t = deform.RandGridDistortion(num_cells=4, prob=0.7, distort_limit=0.2, seed=5)
    params = t.draw_params(3)
    steps = t.parameters(params)
    t._last = params
    out = t(img, randomize=False)
    for i, s in enumerate(steps):
        if s is None:
            assert torch.equal(out[i], img[i])
            continue
        want = torch.as_tensor(M(4, s, padding_mode="border")(img[i]))
        assert (out[i] - want).abs().max().item() < 1e-3 * 255


def test_torchio_random_elastic_matches_simpleitk_resample():
    """voxaug RandomElasticDeformation == SimpleITK resampling through TorchIO's transform with
    the same control points (identity direction, linear interpolation)."""
    sitk = pytest.importorskip("SimpleITK")
    rng = np.random.default_rng(2)
    vol = rng.uniform(0, 100, (30, 26, 22)).astype(np.float32)
    vol = torch.from_numpy(vol)
    spacing = (1.2, 0.9, 1.5)
    t = deform.RandomElasticDeformation(num_control_points=(7, 6, 8), max_displacement=(4, 3, 5), spacing=spacing,
                                        seed=4)
    params = t.draw_params(1)
    plan = t._plan(tuple(vol.shape), 1, params, "cpu", spacing)
    coeff_mm = plan.field[0].double() * torch.tensor(spacing, dtype=torch.float64).view(3, 1, 1, 1)
    assert coeff_mm[0].abs().max() <= 4 and coeff_mm[:, :2].abs().max() == 0  # locked borders
    img = sitk.GetImageFromArray(vol.numpy().transpose(2, 1, 0).copy())
    img.SetSpacing(spacing)
    bs = sitk.BSplineTransformInitializer(img, [k - 3 for k in (7, 6, 8)])
    bs.SetParameters(coeff_mm.permute(1, 2, 3, 0).numpy().flatten(order="F").tolist())
    res = sitk.Resample(img, img, bs, sitk.sitkLinear, 0.0, sitk.sitkFloat32)
    want = torch.from_numpy(sitk.GetArrayFromImage(res).transpose(2, 1, 0).copy())
    t._last = params
    got = deform.RandomElasticDeformation(num_control_points=(7, 6, 8), max_displacement=(4, 3, 5), spacing=spacing,
                                          padding_mode="zeros")
    got._last = params
    out = got(vol[None], randomize=False)[0]
    # ITK's linear interpolator treats [-0.5, S - 0.5] as inside and returns the default value
    # beyond; compare where the displaced point lies within [0, S - 1] (both sides interpolate).
    u = ops.deform_field_dense(plan.field, ops.BSPLINE_FIELD, vol.shape, plan.scale, plan.offset)[0].double()
    src = _index_grid(vol.shape) + u
    inside = torch.ones(vol.shape, dtype=torch.bool)
    for a in range(3):
        inside &= (src[a] >= 0) & (src[a] <= vol.shape[a] - 1)
    assert inside.float().mean() > 0.5
    err = (out - want).abs()[inside]
    assert err.max().item() < 1e-3, err.max().item()
    assert (out - vol).abs().mean() > 1.0


def test_torchio_folding_warning_and_validation():
    with pytest.warns(RuntimeWarning, match="folding"):
        deform.RandomElasticDeformation(num_control_points=12, max_displacement=20, seed=1)(torch.rand(1, 20, 20, 20))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        deform.RandomElasticDeformation(num_control_points=5, max_displacement=2, seed=1)(torch.rand(1, 20, 20, 20))
    with pytest.raises(ValueError, match="num_control_points"):
        deform.RandomElasticDeformation(num_control_points=3)
    with pytest.raises(ValueError, match="locked_borders"):
        deform.RandomElasticDeformation(num_control_points=4, locked_borders=2)
    with pytest.raises(ValueError, match="sigma_range"):
        deform.Rand3DElastic((0, 1), (1, 2))
    with pytest.raises(ValueError, match="field"):
        deform.Rand3DElastic((1, 2), (1, 2), field="approx")
    # uniform_fill_ into elements that share memory: refused (a race on CUDA)
    with pytest.raises(ValueError, match="sharing memory"):
        ops.uniform_fill_(torch.empty(1, 1, 1, 1, 1).expand(2, 3, 4, 4, 4), -1.0, 1.0, 5, 0)


def test_jacobian_determinant_and_folding():
    # An affine displacement u = B x has det(I + B) everywhere.
    b = torch.tensor([[0.1, 0.2, 0.0], [0.0, -0.3, 0.1], [0.05, 0.0, 0.2]], dtype=torch.float64)
    u = torch.einsum("rk,kdhw->rdhw", b, _index_grid((6, 7, 8)))[None]
    det = deform.jacobian_determinant(u)
    assert torch.allclose(det, torch.linalg.det(torch.eye(3, dtype=torch.float64) + b).expand_as(det))
    assert deform.folding_fraction(u).item() == 0
    fold = u.clone()
    fold[:, 0] = -2 * _index_grid((6, 7, 8))[0]  # d -> -d: folded everywhere
    assert deform.folding_fraction(fold).item() == 1.0
    # Small elastic fields from the fast mode do not fold.
    t = deform.Rand3DElastic((6, 6), (5, 5), prob=1.0, seed=1)
    p = t._plan((40, 40, 40), 2, t.draw_params(2), "cpu")
    uf = ops.deform_field_dense(p.field, ops.BSPLINE_FIELD, (40, 40, 40), field_map=p.field_map)
    assert deform.folding_fraction(uf).max().item() == 0


def test_batch_split_invariance_and_determinism():
    x = torch.rand(4, 1, 20, 22, 18)
    t = deform.Rand3DElastic((3, 5), (5, 10), prob=0.8, rotate_range=0.2, seed=9)
    params = t.draw_params(4, first_sample=0, seed=123)
    parts = [t.draw_params(2, first_sample=0, seed=123), t.draw_params(2, first_sample=2, seed=123)]
    assert torch.equal(torch.cat(parts), params)
    t._last = params
    whole = t(x, randomize=False)
    t._last = parts[1]
    half = t(x[2:], randomize=False)
    assert torch.equal(whole[2:], half)
    # Each sample alone (its own sigma, so its own control spacing) equals its row of the batch:
    # the control grid must not depend on the batch mates' sigmas (it is sigma_range's).
    for i in range(4):
        t._last = t.draw_params(1, first_sample=i, seed=123)
        assert torch.equal(t(x[i:i + 1], randomize=False), whole[i:i + 1]), i
    t._last = params
    assert torch.equal(t(x, randomize=False), whole)
    shared = deform.Rand3DElastic((3, 5), (5, 10), prob=1.0, seed=9).share_batch_params()
    y = shared(x[:1].expand(3, -1, -1, -1, -1))
    assert torch.equal(y[0], y[1]) and torch.equal(y[0], y[2])


def test_bad_inputs():
    x = torch.rand(2, 1, 8, 8, 8)
    m = torch.eye(3, 4, dtype=torch.float64).repeat(2, 1, 1)
    with pytest.raises(ValueError, match="at least 4 control points"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 3, 4, 4), ops.BSPLINE_FIELD, (8, 8, 8), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match=r"\(N, 3, \.\.\.\)"):
        ops.resample_deformed([x], m, torch.zeros(1, 3, 4, 4, 4), ops.BSPLINE_FIELD, (8, 8, 8), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="output's spatial size"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 4, 4, 4), ops.DENSE_FIELD, (8, 8, 8), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="float32 or float64"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 4, 4, 4, dtype=torch.int32), ops.BSPLINE_FIELD, (8, 8, 8),
                              ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="field_kind"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 4, 4, 4), 7, (8, 8, 8), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="field_map"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 4, 4, 4), ops.BSPLINE_FIELD, (8, 8, 8), ["linear"],
                              ["zeros"], field_map=torch.zeros(2, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="separable"):
        ops.resample_deformed([x], m, torch.zeros(2, 3, 5, 1, 1), ops.SEPARABLE_FIELD, (8, 8, 8), ["linear"],
                              ["zeros"])
    with pytest.raises(ValueError, match="low"):
        ops.uniform_fill_(torch.empty(1, 1, 2, 2, 2), 1.0, 0.0, 3)
    # starts: (M, K, 3) integers; the field and matrices for the M * K patches
    st = torch.zeros(2, 3, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"field must be \(N, 3, ...\) with N = 6"):
        ops.resample_deformed([x], m.repeat(3, 1, 1), torch.zeros(2, 3, 5, 5, 5), ops.BSPLINE_FIELD, (4, 4, 4),
                              ["linear"], ["zeros"], starts=st)
    with pytest.raises(ValueError, match=r"matrices must be \(M \* K, 3, 4\)"):
        ops.resample_deformed([x], m, torch.zeros(6, 3, 5, 5, 5), ops.BSPLINE_FIELD, (4, 4, 4), ["linear"],
                              ["zeros"], starts=st)
    with pytest.raises(ValueError, match="starts must be an integer tensor"):
        ops.resample_deformed([x], m.repeat(3, 1, 1), torch.zeros(6, 3, 5, 5, 5), ops.BSPLINE_FIELD, (4, 4, 4),
                              ["linear"], ["zeros"], starts=st.double())


def test_opcheck():
    x = torch.rand(2, 1, 6, 7, 5)
    m = torch.eye(3, 4, dtype=torch.float64).repeat(2, 1, 1)
    coeff = torch.rand(2, 3, 5, 5, 5)
    fmap = torch.tensor([[0.5, 0.5, 0.5, 1, 1, 1]] * 2, dtype=torch.float64)
    torch.library.opcheck(torch.ops.voxaug.resample_deformed,
                          ([x], m, coeff, 1, [0.5, 0.5, 0.5], [1.0, 1.0, 1.0], [6, 7, 5], [1], [0], [0.0], False,
                           fmap), test_utils=("test_schema", "test_faketensor"))
    # starts: 3 patches per volume, the field and field_map for the 6 patches
    starts = torch.tensor([[[0, 1, 0], [1, 0, 1], [2, 2, 0]]] * 2)
    torch.library.opcheck(torch.ops.voxaug.resample_deformed,
                          ([x, (x * 4).to(torch.uint8)], m.repeat(3, 1, 1), coeff.repeat(3, 1, 1, 1, 1), 1,
                           [0.5, 0.5, 0.5], [1.0, 1.0, 1.0], [4, 5, 3], [1, 0], [0, 0], [0.0, 0.0], False,
                           fmap.repeat(3, 1), starts), test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.voxaug.deform_field_dense, (coeff, 1, [0.5] * 3, [1.0] * 3, [6, 7, 5], None, None),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.voxaug.uniform_fill_, (torch.empty(2, 1, 3, 3, 3), -1.0, 1.0, 5, 0))


def test_parameter_draws_are_uniform_and_gated():
    """sigma, magnitude and the gate over 4000 samples: Kolmogorov-Smirnov vs U(range) and a
    binomial bound on the selected fraction."""
    scipy_stats = pytest.importorskip("scipy.stats")
    t = deform.Rand3DElastic((2.0, 6.0), (10.0, 30.0), prob=0.3, rotate_range=0.5, seed=1)
    per = t.parameters(t.draw_params(4000, seed=77))
    chosen = [p for p in per if p is not None]
    frac = len(chosen) / len(per)
    assert abs(frac - 0.3) < 5 * math.sqrt(0.3 * 0.7 / len(per))
    for key, (lo, hi) in (("sigma", (2.0, 6.0)), ("magnitude", (10.0, 30.0))):
        vals = np.array([p[key] for p in chosen])
        assert vals.min() >= lo and vals.max() < hi
        assert scipy_stats.kstest(vals, "uniform", args=(lo, hi - lo)).pvalue > 1e-3
    rot = np.array([p["rotate_params"][0] for p in chosen])
    assert scipy_stats.kstest(rot, "uniform", args=(-0.5, 1.0)).pvalue > 1e-3
    g = deform.RandGridDistortion(num_cells=3, prob=1.0, distort_limit=(-0.2, 0.1), seed=2)
    steps = np.array([s for p in g.parameters(g.draw_params(500, seed=3)) for axis in p for s in axis])
    assert steps.min() >= 0.8 and steps.max() < 1.1
    assert scipy_stats.kstest(steps, "uniform", args=(0.8, 0.3)).pvalue > 1e-3


def test_torchio_random_elastic_control_points_are_uniform():
    """TorchIO RandomElasticDeformation's control points: each unlocked coefficient U(-max, max)
    mm per axis (Kolmogorov-Smirnov over 200 samples x 3 x 4 x 2 x 4 points), the outer
    locked_borders layers 0 on every side, independent samples."""
    scipy_stats = pytest.importorskip("scipy.stats")
    spacing, maxd = (1.2, 0.9, 1.5), (4.0, 3.0, 2.0)
    t = deform.RandomElasticDeformation(num_control_points=(7, 6, 8), max_displacement=maxd, spacing=spacing, seed=4)
    n = 200
    plan = t._plan((30, 26, 22), n, t.draw_params(n), "cpu", spacing)
    mm = plan.field.double() * torch.tensor(spacing, dtype=torch.float64).view(1, 3, 1, 1, 1)
    assert mm.shape == (n, 3, 7, 6, 8)
    locked = torch.ones(7, 6, 8, dtype=torch.bool)
    locked[2:-2, 2:-2, 2:-2] = False
    assert mm[:, :, locked].abs().max() == 0
    inner = mm[:, :, 2:-2, 2:-2, 2:-2]
    for a, m in enumerate(maxd):
        v = inner[:, a].flatten().numpy()
        assert v.min() >= -m and v.max() <= m
        assert scipy_stats.kstest(v, "uniform", args=(-m, 2 * m)).pvalue > 1e-3, a
    # samples are drawn independently: no two share their coefficients
    flat = inner.flatten(1)
    assert torch.corrcoef(flat[:20]).fill_diagonal_(0).abs().max() < 0.5


# ---------------- displacement_field(): the field a call applied ----------------
def _through_field(x, u, mode, padding):
    """grid_sample (float64) of x at output index + u: an identity affine index map."""
    src = _index_grid(u.shape[2:]).to(u.device)[None] + u.double()
    sizes = x.shape[2:]
    norm = [2.0 * src[:, a] / max(sizes[a] - 1, 1) - 1.0 for a in range(3)]
    grid = torch.stack([norm[2], norm[1], norm[0]], -1)
    return F.grid_sample(x.double(), grid, mode=mode, padding_mode=padding, align_corners=True)


_FIELD_TRANSFORMS = {
    "Rand3DElastic-fast": lambda: deform.Rand3DElastic((3, 4), (150, 250), prob=0.6, padding_mode="border", seed=3),
    "Rand3DElastic-exact": lambda: deform.Rand3DElastic((3, 4), (150, 250), prob=0.6, padding_mode="zeros",
                                                        field="exact", seed=3),
    "GridDistortion": lambda: deform.GridDistortion(3, [(1.2, 0.8, 1.1, 0.9)] * 3, padding_mode="zeros"),
    "RandGridDistortion": lambda: deform.RandGridDistortion(3, prob=0.6, distort_limit=0.3, seed=4),
    "RandomElasticDeformation": lambda: deform.RandomElasticDeformation(num_control_points=(6, 5, 7),
                                                                        max_displacement=(3, 2, 4), p=0.6, seed=5),
}


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", list(_FIELD_TRANSFORMS))
def test_displacement_field_reproduces_the_output(device, name):
    """displacement_field() of the last call vs the output it produced: (1) voxaug's gather
    through the returned dense field is bit-identical (the field is the one applied, not a
    redraw); (2) grid_sample (float64, bilinear, the transform's padding) at x + u matches to
    1e-4 of the data range (float32 gather); (3) samples the probability gate skipped have u = 0
    and are unchanged."""
    t = _FIELD_TRANSFORMS[name]()
    x = torch.rand(5, 2, 17, 20, 14, generator=torch.Generator().manual_seed(8)).to(device) * 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # TorchIO's folding warning
        out = t(x)
    u = t.displacement_field()
    assert u.shape == (5, 3, 17, 20, 14) and u.device == x.device
    padding = t.padding_mode
    eye = torch.eye(3, 4, dtype=torch.float64).repeat(5, 1, 1).to(device)
    (via_dense,) = ops.resample_deformed([x], eye, u, ops.DENSE_FIELD, x.shape[2:], ["linear"], [padding])
    assert torch.equal(via_dense, out)
    ref = _through_field(x, u, "bilinear", padding)
    err = (out.double() - ref).abs().max().item()
    assert err < 1e-4 * 100, err
    moved = u.flatten(1).abs().amax(1) > 0
    random = isinstance(t, deform._RandomDeform)
    selected = torch.from_numpy(t._gates(t._last)) if random else torch.ones(5, dtype=torch.bool)
    assert torch.equal(moved.cpu(), selected) and selected.any()
    assert u.abs().max() > 1.0  # displacements of voxels, not rounding noise
    for i in torch.nonzero(~selected).flatten().tolist():
        assert torch.equal(out[i], x[i])
    assert torch.equal(t.displacement_field(), u)  # asking twice returns the same field
    if name == "Rand3DElastic-exact":
        assert t.displacement_field(dtype=torch.float64).dtype == torch.float64


def test_displacement_field_of_dictionary_calls_and_errors(ch2):
    """Dictionary forms: every key of one spatial size shares the one field, which reproduces
    the image (grid_sample bilinear, 1e-4 of 255) and the label (grid_sample nearest; at most
    1e-3 of voxels differ, float32 vs float64 coordinates at half-voxel ties); keys of another
    size have their own field and key= selects it; named errors before any call and for a key
    the call did not deform."""
    img = ch2[0][None, :, 40:90, 50:110, 60:100].float().expand(2, -1, -1, -1, -1)
    lab = (img > 80).to(torch.int16) + (img > 120).to(torch.int16) * 2
    t = deform.Rand3DElasticd(["image", "label", "small"], (4, 5), (200, 300), prob=1.0,
                              mode=["bilinear", "nearest", "bilinear"], padding_mode="border", seed=9)
    with pytest.raises(RuntimeError, match="has not been called or its last call deformed no tensor"):
        t.displacement_field()
    out = t({"image": img, "label": lab, "small": img[:, :, :20]})
    u = t.displacement_field("image")
    assert torch.equal(t.displacement_field("label"), u)
    assert t.displacement_field("small").shape == (2, 3, 20, 60, 40)
    with pytest.raises(ValueError, match="key must name one of"):
        t.displacement_field()
    with pytest.raises(KeyError, match="'other' was not deformed"):
        t.displacement_field("other")
    err = (out["image"].double() - _through_field(img, u, "bilinear", "border")).abs().max().item()
    assert err < 1e-4 * 255, err
    ref_lab = _through_field(lab, u, "nearest", "border").to(torch.int16)
    assert (out["label"] != ref_lab).float().mean().item() < 1e-3
    assert u.abs().max() > 1.0 and (out["label"] != lab).any()
    g = deform.GridDistortiond(["image", "label"], 4, [(1.2, 0.8, 1.1, 0.9, 1.0)] * 3, mode=["bilinear", "nearest"],
                               allow_missing_keys=True)
    g({"image": img, "label": lab})
    assert torch.equal(g.displacement_field(), g.displacement_field("label"))
    g({"other": img})  # nothing deformed: no stale field from the call before
    with pytest.raises(RuntimeError, match="deformed no tensor"):
        g.displacement_field()


@pytest.mark.parametrize("field", ["fast", "exact"])
def test_displacement_field_survives_pickling_and_zero_displacement(field):
    """A called transform still pickles (DataLoader workers) and its copy returns the same
    field; RandomElasticDeformation with max_displacement 0 (TorchIO: returns the input) reports
    a zero field of the input's shape."""
    import pickle

    x = torch.rand(2, 1, 12, 14, 10)
    t = deform.Rand3DElasticd(["image"], (3, 4), (100, 200), prob=1.0, field=field, seed=2)
    t({"image": x})
    copy = pickle.loads(pickle.dumps(t))
    assert torch.equal(copy.displacement_field(), t.displacement_field())
    z = deform.RandomElasticDeformation(max_displacement=0, seed=1)
    assert z(x) is x
    u = z.displacement_field()
    assert u.shape == (2, 3, 12, 14, 10) and u.abs().max() == 0


# ---------------- untested forms: TorchIO dict / labels / MetaTensor spacing, grid-distortion dicts ----------------
@pytest.fixture(scope="module")
def ch2_aal_crop(ch2):
    nib = pytest.importorskip("nibabel")
    aal = np.asarray(nib.load(os.path.join(TEMPLATES, "aal.nii.gz")).dataobj)
    sl = (slice(40, 100), slice(50, 120), slice(60, 110))
    img = ch2[0][0][sl].float()[None]  # (1, 60, 70, 50)
    lab = torch.from_numpy(aal[sl].astype(np.int16))[None]
    assert lab.unique().numel() > 20
    return img, lab


def test_random_elastic_deformation_dictionary_labels(ch2_aal_crop):
    """TorchIO-style dictionary: the float image is interpolated linearly, the integer atlas
    and a float mask listed in label_keys use nearest; all three get the same field (checked
    against grid_sample through displacement_field(): bilinear within 1e-4 of 255, nearest on
    all but 1e-3 of voxels, ties), labels keep their dtype and values, other entries pass through."""
    img, lab = ch2_aal_crop
    mask = (lab > 0).float()
    t = deform.RandomElasticDeformation(num_control_points=6, max_displacement=(6, 6, 6), label_keys=["mask"],
                                        seed=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = t({"image": img, "label": lab, "mask": mask, "name": "subject-1"})
    assert out["name"] == "subject-1"
    assert out["label"].dtype == torch.int16 and out["mask"].dtype == torch.float32
    assert set(out["label"].unique().tolist()) <= set(lab.unique().tolist())
    assert set(out["mask"].unique().tolist()) == {0.0, 1.0}  # nearest: no blended mask values
    u = t.displacement_field()
    for key in ("image", "label", "mask"):
        assert torch.equal(t.displacement_field(key), u)
    assert u.abs().max() > 1.0
    ref = _through_field(img[None], u, "bilinear", "border")[0]
    assert (out["image"].double() - ref).abs().max().item() < 1e-4 * 255
    for key, x in (("label", lab), ("mask", mask)):
        ref = _through_field(x[None].double(), u, "nearest", "border")[0]
        assert (out[key].double() != ref).float().mean().item() < 1e-3, key
        assert (out[key] != x).float().mean() > 0.01  # it moved
    # The same draw applied to the image alone gives the same image.
    assert torch.equal(t(img, randomize=False), out["image"])


@pytest.mark.parametrize("rotated", [False, True])
def test_random_elastic_deformation_spacing_from_metatensor_affine(ch2_aal_crop, rotated):
    """Spacing taken from a MetaTensor's affine (the column norms, nibabel's voxel_sizes) gives
    the output of spacing= those sizes; the displacement in mm (voxels x spacing) is that of
    unit spacing with the same draw (max_displacement is in mm), float32: 1e-5 mm."""
    nib = pytest.importorskip("nibabel")
    from monai.data import MetaTensor

    img, _ = ch2_aal_crop
    aff = np.diag([1.5, 0.8, 2.0, 1.0])
    if rotated:
        a = math.radians(30)
        rot = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
        aff[:3, :3] = rot @ aff[:3, :3]
    aff[:3, 3] = (-40, 12, 7)
    spacing = tuple(float(v) for v in nib.affines.voxel_sizes(aff))
    meta = MetaTensor(img, affine=torch.from_numpy(aff))
    kw = dict(num_control_points=7, max_displacement=(3, 2, 4), seed=6)
    from_meta = deform.RandomElasticDeformation(**kw)
    explicit = deform.RandomElasticDeformation(spacing=spacing, **kw)
    unit = deform.RandomElasticDeformation(spacing=1.0, **kw)
    a, b, _ = from_meta(meta), explicit(img), unit(img)
    assert isinstance(a, MetaTensor) and torch.allclose(a.affine.double(), torch.from_numpy(aff))
    assert torch.equal(a.as_tensor(), b)
    u_meta, u_unit = from_meta.displacement_field(), unit.displacement_field()
    assert torch.equal(u_meta, explicit.displacement_field())
    mm = u_meta.double() * torch.tensor(spacing, dtype=torch.float64).view(1, 3, 1, 1, 1)
    assert (mm - u_unit.double()).abs().max().item() < 1e-5
    assert u_unit.abs().max() > 1.0


def test_grid_distortiond_matches_monai(ch2_aal_crop):
    """GridDistortiond (image bilinear, atlas nearest) vs MONAI GridDistortiond with the same
    steps: bilinear within 1e-3 of 255 (float32 pieces), nearest on all but 1e-3 of voxels
    (half-voxel ties may round either way); labels keep their dtype and values."""
    from monai.transforms import GridDistortiond as M

    img, lab = ch2_aal_crop
    steps = [(1.1, 0.9, 1.05, 0.95, 1.2), (0.8, 1.2, 1.0, 0.9, 1.1), (1.0, 1.3, 0.7, 1.0, 1.1)]
    data = {"image": img, "label": lab}
    for padding in ("border", "zeros"):
        want = M(["image", "label"], 4, steps, mode=["bilinear", "nearest"], padding_mode=padding)(dict(data))
        got = deform.GridDistortiond(["image", "label"], 4, steps, mode=["bilinear", "nearest"],
                                     padding_mode=padding)(dict(data))
        assert (got["image"] - torch.as_tensor(want["image"])).abs().max().item() < 1e-3 * 255
        assert got["label"].dtype == torch.int16
        assert set(got["label"].unique().tolist()) <= set(lab.unique().tolist())
        assert (got["label"] != torch.as_tensor(want["label"]).to(torch.int16)).float().mean().item() < 1e-3
        assert (got["label"] != lab).float().mean() > 0.01


def test_rand_grid_distortiond_matches_monai(ch2_aal_crop):
    """RandGridDistortiond per sample vs MONAI RandGridDistortiond replaying the drawn steps
    (parameters() of the draw): same bounds as test_grid_distortiond_matches_monai; unselected
    samples are unchanged; image and label of one sample get the same steps."""
    from monai.transforms import RandGridDistortiond as M

    img, lab = ch2_aal_crop
    n = 4
    imgs, labs = img[None].expand(n, -1, -1, -1, -1), lab[None].expand(n, -1, -1, -1, -1)
    t = deform.RandGridDistortiond(["image", "label"], num_cells=(3, 4, 5), prob=0.6, distort_limit=0.25,
                                   mode=["bilinear", "nearest"], padding_mode="zeros", seed=10)
    out = t({"image": imgs, "label": labs})
    steps = t.transform.parameters(t.transform._last)
    assert any(s is None for s in steps) and any(s is not None for s in steps)
    for i, s in enumerate(steps):
        if s is None:
            assert torch.equal(out["image"][i], img) and torch.equal(out["label"][i], lab)
            continue
        m = M(["image", "label"], num_cells=(3, 4, 5), prob=1.0, distort_limit=0.25, mode=["bilinear", "nearest"],
              padding_mode="zeros")
        m.rand_grid_distortion.randomize = lambda *a, **k: None
        m.rand_grid_distortion.distort_steps = tuple(tuple(a) for a in s)
        m.rand_grid_distortion._do_transform = True
        want = m({"image": img, "label": lab})
        assert (out["image"][i] - torch.as_tensor(want["image"])).abs().max().item() < 1e-3 * 255
        assert out["label"].dtype == torch.int16
        assert (out["label"][i] != torch.as_tensor(want["label"]).to(torch.int16)).float().mean().item() < 1e-3
        assert set(out["label"][i].unique().tolist()) <= set(lab.unique().tolist())
