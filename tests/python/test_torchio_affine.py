"""voxaug.spatial.RandomAffine (TorchIO's RandomAffine) vs TorchIO's Affine (SimpleITK) given the
same drawn parameters, on the real ch2 volume with its affine (and a left-right flipped one),
intensity images and label maps, TorchIO's pad values and argument rules."""
import numpy as np
import pytest
import torch

from voxaug import spatial as vsp

from conftest import devices, load_template

tio = pytest.importorskip("torchio")
DEVICES = devices()


def _tio_affine(x4, affine, n_params, label=False, **kw):
    """TorchIO's deterministic Affine of one (C, X, Y, Z) image with sample n's parameters."""
    scales, degrees, translation = (tuple(float(v) for v in p) for p in n_params)
    cls = tio.LabelMap if label else tio.ScalarImage
    t = tio.Affine(scales=scales, degrees=degrees, translation=translation, **kw)
    return t(cls(tensor=x4, affine=affine)).data


def _params(t, n):
    return t.last_scales[n], t.last_degrees[n], t.last_translation[n]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("flip", [False, True])
def test_random_affine_matches_torchio_affine_on_ch2(device, flip):
    """A batch of 3 ch2 volumes (uint8 in, float32 out), p = 0.7: each applied sample equals
    TorchIO's Affine with the drawn scales / degrees / translation (float32 interpolation and
    coordinates against ITK's double: within 2e-5 of the image's range, no voxel padded
    differently); the others are their float32 copy. A flipped affine changes the geometry."""
    vol, affine = load_template("ch2.nii.gz")
    if flip:
        affine = affine.copy()
        affine[0, 0], affine[0, 3] = -1.0, 90.0
    t = vsp.RandomAffine(scales=(0.85, 1.15), degrees=15, translation=4, p=0.7, affine=affine, seed=11)
    x = vol[None].repeat(3, 1, 1, 1, 1).to(device)
    out = t(x)
    assert out.dtype == torch.float32 and out.device.type == device
    applied = t.last_applied.tolist()
    assert 0 < sum(applied) < 3 or applied == [True] * 3
    for n in range(3):
        if not applied[n]:
            assert torch.equal(out[n].cpu(), vol.float())
            continue
        ref = _tio_affine(vol, affine, _params(t, n), image_interpolation="linear", default_pad_value="minimum")
        d = (out[n].cpu() - ref).abs()
        assert d.max().item() <= 2e-5 * 255, (n, d.max().item())


@pytest.mark.parametrize("device", DEVICES)
def test_random_affine_bspline_matches_torchio_on_ch2(device):
    """image_interpolation='bspline' (SimpleITK's prefiltered cubic B-spline, mirrored at the
    edges) on a ch2 crop with a linearly interpolated label map beside it: TorchIO's Affine within
    1e-4 of the range (float32 prefilter and taps vs ITK's double), padded voxels included; the
    AAL labels interpolated with 'bspline' too (float32 out, 0 beyond the buffer)."""
    vol, affine = load_template("ch2.nii.gz")
    lab, _ = load_template("aal.nii.gz")
    img = vol[:, 40:120, 50:140, 30:100].float()
    labels = lab[:, 40:120, 50:140, 30:100].to(torch.int16)
    t = vsp.RandomAffine(scales=0.1, degrees=12, translation=5, image_interpolation="bspline",
                         label_interpolation="bspline", label_keys=["label"], affine=affine, seed=21)
    out = t({"image": img.to(device), "label": labels.to(device)})
    ref = _tio_affine(img, affine, _params(t, 0), image_interpolation="bspline")
    assert out["image"].dtype == torch.float32
    assert (out["image"][0].cpu() - ref).abs().max().item() <= 1e-4 * 255
    ref_l = _tio_affine(labels, affine, _params(t, 0), label=True, label_interpolation="bspline")
    assert out["label"].dtype == torch.float32
    assert (out["label"][0].cpu() - ref_l).abs().max().item() <= 1e-4 * 116


def test_random_affine_pad_values_center_and_isotropic():
    """default_pad_value 'mean' (the six faces) and a number, center='origin' (a translation-like
    move of the whole volume), isotropic scales: TorchIO's Affine agrees."""
    vol, affine = load_template("ch2.nii.gz")
    x = vol.float()[None] + 3.0  # a background above 0, so the pad value matters
    for kw in (dict(default_pad_value="mean"), dict(default_pad_value=-7.5, center="origin"),
               dict(default_pad_value="minimum", isotropic=True, scales=(0.7, 1.3))):
        t = vsp.RandomAffine(degrees=20, translation=6, affine=affine, seed=5, **kw)
        out = t(x)
        if kw.get("isotropic"):
            s = t.last_scales[0]
            assert s[0] == s[1] == s[2]
        pad = {k: v for k, v in kw.items() if k in ("default_pad_value", "center")}
        ref = _tio_affine(x[0], affine, _params(t, 0), image_interpolation="linear", **pad)
        assert (out[0] - ref).abs().max().item() <= 2e-5 * 260, kw


def test_random_affine_subject_dictionary_with_labels():
    """{'image', 'label'}: one draw per sample for both keys; the AAL atlas (int16) resampled by
    nearest neighbour keeps its dtype and labels, pads with default_pad_label, and equals TorchIO's
    LabelMap resampling except at exact rounding ties (none expected here)."""
    vol, affine = load_template("ch2.nii.gz")
    lab, _ = load_template("aal.nii.gz")
    lab = lab.to(torch.int16)
    t = vsp.RandomAffine(scales=0.1, degrees=12, translation=3, affine=affine, default_pad_label=0, seed=9,
                         label_keys=["label"])
    out = t({"image": vol[None], "label": lab[None], "name": "ch2"})
    assert out["name"] == "ch2" and out["label"].dtype == torch.int16
    assert set(out["label"].unique().tolist()) <= set(lab.unique().tolist())
    ref_img = _tio_affine(vol, affine, _params(t, 0), image_interpolation="linear")
    assert (out["image"][0] - ref_img).abs().max().item() <= 2e-5 * 255
    ref_lab = _tio_affine(lab, affine, _params(t, 0), label=True, label_interpolation="nearest",
                          default_pad_label=0)
    mismatch = (out["label"][0] != ref_lab.to(torch.int16)).sum().item()
    assert mismatch <= 10, mismatch


def test_random_affine_draws_and_determinism():
    """Draws lie in TorchIO's ranges (a number d: (1 - d, 1 + d) scales, (-d, d) degrees /
    translation; six values per axis); the same seed gives the same bytes; p = 0 is the float32
    copy; a bare tensor uses the identity affine (as a TorchIO ScalarImage of a tensor)."""
    x = torch.rand(64, 1, 6, 7, 8, generator=torch.Generator().manual_seed(0))
    t = vsp.RandomAffine(scales=(0.5, 0.6, 1, 1.2, 2, 3), degrees=(1, 2, -5, -4, 10, 30), translation=2, seed=1)
    a = t(x)
    lo = torch.tensor([[0.5, 1, 2], [1, -5, 10], [-2, -2, -2]], dtype=torch.float64)
    hi = torch.tensor([[0.6, 1.2, 3], [2, -4, 30], [2, 2, 2]], dtype=torch.float64)
    for k, p in enumerate((t.last_scales, t.last_degrees, t.last_translation)):
        assert bool(((p >= lo[k]) & (p <= hi[k])).all())
    assert torch.equal(vsp.RandomAffine(scales=(0.5, 0.6, 1, 1.2, 2, 3), degrees=(1, 2, -5, -4, 10, 30),
                                        translation=2, seed=1)(x), a)
    assert torch.equal(vsp.RandomAffine(p=0.0, seed=1)(x), x)
    ref = _tio_affine(x[0], np.eye(4), _params(t, 0), image_interpolation="linear")
    assert (a[0] - ref).abs().max().item() <= 1e-5


@pytest.mark.parametrize("kw", [dict(scales=-0.1), dict(degrees=(10, 5)), dict(scales=(1, 2, 3, 4)),
                                dict(scales=(0.5, 1, 2), isotropic=True), dict(center="middle"),
                                dict(default_pad_value="median")])
def test_random_affine_rejects_what_torchio_rejects(kw):
    with pytest.raises(ValueError):
        tio.RandomAffine(**kw)
    with pytest.raises(ValueError):
        vsp.RandomAffine(**kw)


def test_random_affine_refusals_of_its_own():
    """What voxaug does not offer is refused by name: the Otsu pad value, SimpleITK-only
    interpolators, non-square affines, mismatched dictionary shapes."""
    with pytest.raises(ValueError, match="otsu"):
        vsp.RandomAffine(default_pad_value="otsu")
    with pytest.raises(ValueError, match="image_interpolation"):
        vsp.RandomAffine(image_interpolation="lanczos")
    with pytest.raises(ValueError, match="label_interpolation"):
        vsp.RandomAffine(label_interpolation="label_gaussian")
    with pytest.raises(ValueError, match="finite"):  # TorchIO takes it (and resamples to NaN)
        vsp.RandomAffine(translation=(0, float("inf")))
    with pytest.raises(ValueError, match="square"):
        vsp.RandomAffine(affine=np.eye(3, 4))
    with pytest.raises(ValueError, match="same batch and spatial shape"):
        vsp.RandomAffine(seed=0)({"a": torch.zeros(1, 4, 5, 6), "b": torch.zeros(1, 4, 5, 7)})
