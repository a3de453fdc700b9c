"""voxaug.deform.RandomAffineElasticDeformation (TorchIO's) vs TorchIO's deterministic
AffineElasticDeformation (one SimpleITK resampling through [affine, B-spline]) given the same
drawn parameters, on the real ch2 volume and AAL atlas with their affine (and a left-right flipped
one): intensity images and label maps, TorchIO's pad values and outside rule, the gate, the
argument rules, and the device path without host syncs."""
import numpy as np
import pytest
import torch

from voxaug import deform

from conftest import devices, load_template, sync_is_error

tio = pytest.importorskip("torchio")
DEVICES = devices()
LPS = np.diag([-1.0, -1.0, 1.0, 1.0])


def _torchio_control_points(cp: torch.Tensor, affine: np.ndarray) -> np.ndarray:
    """voxaug's control displacements of one sample ((3, K0, K1, K2) voxels along the array axes)
    as TorchIO's (K0, K1, K2, 3) LPS millimetres. SimpleITK's BSplineTransformInitializer lays its
    grid along the physical axes (identity direction): along an array axis whose LPS direction is
    negative (RAS axes 0 and 1 of a positive-diagonal affine) its control index runs against the
    voxel index and its displacement component against the array axis (both grids span the same
    [-0.625, S - 0.375] voxel range), so that axis is mirrored and negated."""
    lps = LPS @ affine
    cp = cp.double().cpu().clone()
    for a in range(3):
        sign = np.sign(lps[a, a])
        assert sign != 0 and np.allclose(lps[:3, a][np.arange(3) != a], 0), "axis-aligned affines only"
        cp[a] *= float(np.linalg.norm(affine[:3, a])) * sign
        if sign < 0:
            cp = cp.flip(1 + a)
    return cp.permute(1, 2, 3, 0).numpy()


def _torchio_reference(t, n, tensors, affine, max_displacement, pad="minimum", label_keys=()):
    """TorchIO's AffineElasticDeformation with sample n's draws, on {key: (C, X, Y, Z) tensor}."""
    ra = t.random_affine
    ap = dict(scales=t.last_scales[n].tolist(), degrees=t.last_degrees[n].tolist(),
              translation=t.last_translation[n].tolist(), center=ra.center, default_pad_value=pad,
              image_interpolation=ra.image_interpolation, label_interpolation=ra.label_interpolation,
              check_shape=True)
    ep = dict(control_points=_torchio_control_points(t.last_control_points[n], affine),
              max_displacement=max_displacement, image_interpolation=ra.image_interpolation,
              label_interpolation=ra.label_interpolation)
    subject = tio.Subject(**{k: (tio.LabelMap if k in label_keys else tio.ScalarImage)(tensor=v, affine=affine)
                             for k, v in tensors.items()})
    out = tio.AffineElasticDeformation(affine_first=True, affine_params=ap, elastic_params=ep)(subject)
    return {k: out[k].data for k in tensors}


@pytest.mark.parametrize("flip", [False, True])
def test_matches_torchio_on_ch2_and_aal(flip):
    """A batch of 3 (ch2 uint8 + AAL int16), p = 0.7: each applied sample equals TorchIO's
    AffineElasticDeformation with the drawn parameters (float32 coordinates against ITK's double:
    within 2e-5 of the image's range, padded voxels included; labels equal but for rounding
    ties); the others are the float32 copy / the labels as they were."""
    vol, affine = load_template("ch2.nii.gz")
    lab, _ = load_template("aal.nii.gz")
    lab = lab.to(torch.int16)
    if flip:
        affine = affine.copy()
        affine[0, 0], affine[0, 3] = -1.0, 90.0
    t = deform.RandomAffineElasticDeformation(
        affine_kwargs=dict(scales=0.1, degrees=10, translation=3),
        elastic_kwargs=dict(num_control_points=(7, 8, 6), max_displacement=6), p=0.7, label_keys=["label"],
        affine=affine, seed=3)
    x = vol[None].repeat(3, 1, 1, 1, 1)
    out = t({"image": x, "label": lab[None].repeat(3, 1, 1, 1, 1), "name": "ch2"})
    assert out["name"] == "ch2" and out["image"].dtype == torch.float32 and out["label"].dtype == torch.int16
    applied = t.last_applied.tolist()
    assert 0 < sum(applied) < 3, applied  # this seed draws both cases
    for n in range(3):
        if not applied[n]:
            assert torch.equal(out["image"][n], vol.float()) and torch.equal(out["label"][n], lab)
            assert t.last_control_points[n].abs().max() == 0
            continue
        ref = _torchio_reference(t, n, {"image": vol, "label": lab}, affine, (6, 6, 6), label_keys=("label",))
        img = out["image"][n]
        assert (img - vol.float()).abs().mean() > 5.0  # deformed
        assert (img - ref["image"]).abs().max().item() <= 2e-5 * 255
        assert (img == 0).sum() > 10000  # the pad ('minimum', 0 for ch2) shows
        mismatch = (out["label"][n] != ref["label"].to(torch.int16)).sum().item()
        assert mismatch <= 20, mismatch


def test_pad_values_interpolation_and_bare_tensors():
    """default_pad_value 'mean' and a number on a background above the minimum, nearest and
    'bspline' image interpolation, a bare tensor (the identity affine, as TorchIO's ScalarImage of a tensor);
    a linearly interpolated label map pads with 0 (TorchIO's combined transform: 0, not
    default_pad_label)."""
    vol, affine = load_template("ch2.nii.gz")
    x = vol.float()[:, 20:120, 30:140, 10:110] + 3.0
    lab = (vol[:, 20:120, 30:140, 10:110] > 80).float()
    for akw in (dict(default_pad_value="mean"), dict(default_pad_value=-7.5, image_interpolation="nearest"),
                dict(default_pad_value=2.0, label_interpolation="linear", default_pad_label=5),
                dict(default_pad_value="minimum", image_interpolation="bspline")):
        akw = dict(degrees=20, translation=8, scales=0.15, **akw)
        t = deform.RandomAffineElasticDeformation(affine_kwargs=akw,
                                                  elastic_kwargs=dict(num_control_points=6, max_displacement=5),
                                                  label_keys=["label"], seed=7)
        out = t({"image": x, "label": lab})
        ref = _torchio_reference(t, 0, {"image": x, "label": lab}, np.eye(4), (5, 5, 5),
                                 pad=akw["default_pad_value"], label_keys=("label",))
        d = (out["image"] - ref["image"]).abs()
        if akw.get("image_interpolation") == "nearest":  # ties at half voxels may round either way
            assert (d > 0).float().mean().item() < 1e-3, akw
        elif akw.get("image_interpolation") == "bspline":  # ITK's mirrored cubic B-spline, float32 prefilter
            assert d.max().item() <= 1e-4 * 260, akw
        else:
            assert d.max().item() <= 2e-5 * 260, akw
        assert ((out["image"] == akw["default_pad_value"]) if isinstance(akw["default_pad_value"], float)
                else (d == 0)).sum() > 1000  # padded voxels are there
        dl = (out["label"].float() - ref["label"]).abs()
        if akw.get("label_interpolation") == "linear":
            assert dl.max().item() <= 1e-4, akw
        else:  # nearest: rounding ties only
            assert (dl > 0).float().mean().item() < 1e-3, akw
        # The array form: the same draws from the same seed.
        t2 = deform.RandomAffineElasticDeformation(affine_kwargs=akw,
                                                   elastic_kwargs=dict(num_control_points=6, max_displacement=5),
                                                   seed=7)
        assert torch.equal(t2(x), out["image"])


def test_draws_gate_determinism_and_folding_warning():
    """Per-sample draws within the parts' ranges, different across a batch; p = 0 copies; the
    same seed repeats bit for bit; set_random_state reseeds both parts; TorchIO's folding
    warning; a `p` inside the parts' arguments is ignored (TorchIO draws their parameters
    directly)."""
    x = torch.rand(6, 1, 24, 20, 22, generator=torch.Generator().manual_seed(0))
    kw = dict(affine_kwargs=dict(scales=(0.8, 1.2), degrees=15, p=0.0),
              elastic_kwargs=dict(num_control_points=5, max_displacement=2, p=0.0))
    t = deform.RandomAffineElasticDeformation(**kw, seed=1)
    a = t(x)
    assert bool(t.last_applied.all())
    s = t.last_scales
    assert bool(((s >= 0.8) & (s <= 1.2)).all()) and bool((t.last_degrees.abs() <= 15).all())
    assert not torch.equal(t.last_control_points[0], t.last_control_points[1])
    assert not torch.equal(a[0], a[1])
    assert torch.equal(deform.RandomAffineElasticDeformation(**kw, seed=1)(x), a)
    t.set_random_state(1)
    assert torch.equal(t(x), a)
    assert torch.equal(deform.RandomAffineElasticDeformation(**kw, p=0.0, seed=1)(x), x)
    with pytest.warns(RuntimeWarning, match="folding"):
        deform.RandomAffineElasticDeformation(elastic_kwargs=dict(num_control_points=12, max_displacement=20),
                                              seed=1)(torch.rand(1, 20, 20, 20))


def test_bad_arguments():
    with pytest.raises(ValueError, match="affine_first=False"):
        deform.RandomAffineElasticDeformation(affine_first=False)
    with pytest.raises(ValueError, match="elastic_kwargs must not set"):
        deform.RandomAffineElasticDeformation(elastic_kwargs=dict(padding_mode="zeros"))
    with pytest.raises(ValueError, match="affine_kwargs must not set"):
        deform.RandomAffineElasticDeformation(affine_kwargs=dict(seed=3))
    with pytest.raises(ValueError, match="num_control_points"):
        deform.RandomAffineElasticDeformation(elastic_kwargs=dict(num_control_points=3))
    with pytest.raises(ValueError, match="default_pad_value"):
        deform.RandomAffineElasticDeformation(affine_kwargs=dict(default_pad_value="median"))
    with pytest.raises(ValueError, match="same batch and spatial shape"):
        deform.RandomAffineElasticDeformation()({"a": torch.rand(1, 8, 8, 8), "b": torch.rand(1, 8, 8, 9)})


@pytest.mark.parametrize("device", DEVICES)
def test_device_matches_cpu_without_host_syncs(device):
    x = torch.rand(3, 2, 20, 18, 22, generator=torch.Generator().manual_seed(1)) * 100
    lab = (x[:, :1] > 50).to(torch.uint8)
    kw = dict(affine_kwargs=dict(degrees=10, translation=2), elastic_kwargs=dict(num_control_points=5,
                                                                                max_displacement=2),
              p=0.8, label_keys=["label"])
    ref = deform.RandomAffineElasticDeformation(**kw, seed=5)({"image": x, "label": lab})
    xd, ld = x.to(device), lab.to(device)
    t = deform.RandomAffineElasticDeformation(**kw, seed=5)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        with sync_is_error():
            got = t({"image": xd, "label": ld})
    else:
        got = t({"image": xd, "label": ld})
    torch.testing.assert_close(got["image"].cpu(), ref["image"], rtol=0, atol=1e-3)
    assert (got["label"].cpu() != ref["label"]).float().mean().item() < 1e-3
