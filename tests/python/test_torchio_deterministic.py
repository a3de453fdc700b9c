"""TorchIO's deterministic transforms BiasField, Noise and ElasticDeformation (voxaug.transforms,
voxaug.deform) against TorchIO itself (ElasticDeformation: SimpleITK's B-spline resampling,
through TorchIO) on random volumes and on the real ch2 volume / AAL atlas, and Noise against the
normal distribution it promises."""
import numpy as np
import pytest
import torch

from voxaug import deform
from voxaug import transforms as vt

from conftest import devices, load_template

tio = pytest.importorskip("torchio")
DEVICES = devices()


def rand(shape, seed, lo=1.0, hi=100.0):
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(shape, generator=g)


# ---------------- BiasField ----------------
@pytest.mark.parametrize("order", [0, 1, 2, 3, 4])
def test_bias_field_equals_torchio(order):
    """TorchIO BiasField(coefficients, order) on a (C, X, Y, Z) image: float32, 3e-6 relative
    (exp of a float32 polynomial vs TorchIO's float64 field applied to float32 data)."""
    from torchio.transforms.augmentation.intensity.random_bias_field import BiasField

    k = (order + 1) * (order + 2) * (order + 3) // 6
    coeff = np.random.default_rng(order).uniform(-0.4, 0.4, k).tolist()
    x = rand((2, 11, 14, 9), seed=order)
    out = vt.BiasField(coeff, order)(x)
    ref = BiasField(coefficients=coeff, order=order)(tio.ScalarImage(tensor=x)).data
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, rtol=3e-6, atol=0)


def test_bias_field_per_sample_rows_replay_random_bias_field_on_ch2(ch2):
    """An (N, K) coefficient tensor is one row per sample: RandomBiasField's read-back coefficients
    replayed through BiasField give its output bit for bit (one kernel, the same float32 values),
    and each row equals TorchIO's BiasField on the real (uint8) volume."""
    from torchio.transforms.augmentation.intensity.random_bias_field import BiasField

    vol, affine = ch2
    crop = vol[:, 40:120, 60:140, 50:110]
    batch = torch.stack([crop, crop.flip(1), crop.flip(2)])
    t = vt.RandomBiasField(coefficients=0.4, order=3, seed=5)
    want = t(batch)
    got = vt.BiasField(t.last_coefficients, 3)(batch)
    assert torch.equal(got, want)
    for n in range(3):
        ref = BiasField(coefficients=t.last_coefficients[n].tolist(), order=3)(
            tio.ScalarImage(tensor=batch[n].float(), affine=affine)).data
        torch.testing.assert_close(got[n], ref, rtol=3e-6, atol=0)


def test_bias_field_bad_arguments():
    with pytest.raises(ValueError, match="10 values for order 2"):
        vt.BiasField([0.1] * 10 + [0.2], 2)
    with pytest.raises(ValueError, match="order"):
        vt.BiasField([0.1], -1)
    with pytest.raises(ValueError, match="order"):
        vt.BiasField([0.1], 1.5)
    with pytest.raises(ValueError, match="finite"):
        vt.BiasField([0.1, float("nan"), 0.0, 0.0], 1)
    with pytest.raises(ValueError, match="dict"):
        vt.BiasField({"t1": [0.1]}, 0)
    with pytest.raises(ValueError, match="3 rows but the batch has 2"):
        vt.BiasField(torch.zeros(3, 4), 1)(torch.rand(2, 1, 4, 4, 4))


# ---------------- Noise ----------------
def test_noise_is_normal_deterministic_and_per_sample():
    """Noise(mean, std, seed) adds N(mean, std): over 2 x 110,592 voxels a Kolmogorov-Smirnov test
    against that normal does not reject at 1e-3 (the seed is fixed: the check is deterministic);
    the same seed gives the same noise (alone or in a batch), another seed other noise, and the
    samples of a batch independent noise (correlation ~ 0)."""
    stats = pytest.importorskip("scipy.stats")
    x = rand((2, 1, 48, 48, 48), seed=1)
    out = vt.Noise(2.5, 4.0, seed=11)(x)
    assert out.dtype == torch.float32
    noise = (out.double() - x.double())
    for n in range(2):
        assert stats.kstest(noise[n].flatten().numpy(), "norm", args=(2.5, 4.0)).pvalue > 1e-3
    assert abs(float(torch.corrcoef(noise.reshape(2, -1))[0, 1])) < 0.01
    assert torch.equal(vt.Noise(2.5, 4.0, seed=11)(x), out)
    assert torch.equal(vt.Noise(2.5, 4.0, seed=11)(x[:1]), out[:1])
    assert not torch.equal(vt.Noise(2.5, 4.0, seed=12)(x), out)
    # A (C, D, H, W) image and integer input: float32 out, as TorchIO's float32 noise sum.
    img = (x[0] * 2).to(torch.int16)
    y = vt.Noise(0.0, 0.0, seed=3)(img)
    assert y.dtype == torch.float32 and torch.equal(y, img.float())


def test_noise_bad_arguments():
    with pytest.raises(ValueError, match="std must be >= 0"):
        vt.Noise(0.0, -1.0, seed=1)
    with pytest.raises(ValueError, match="mean"):
        vt.Noise(float("inf"), 1.0, seed=1)
    with pytest.raises(ValueError, match="seed"):
        vt.Noise(0.0, 1.0, seed=1.5)
    with pytest.raises(ValueError, match="dict"):
        vt.Noise({"t1": 0.0}, 1.0, seed=1)


# ---------------- ElasticDeformation ----------------
def _torchio_elastic(tensors, affine, cp, max_displacement, label_keys=(), image_interpolation="linear"):
    subject = tio.Subject(**{k: (tio.LabelMap if k in label_keys else tio.ScalarImage)(tensor=v, affine=affine)
                             for k, v in tensors.items()})
    t = tio.ElasticDeformation(control_points=cp, max_displacement=max_displacement,
                               image_interpolation=image_interpolation)
    out = t(subject)
    return {k: out[k].data for k in tensors}


def _control_points(shape, scale, seed):
    cp = np.random.default_rng(seed).uniform(-scale, scale, (*shape, 3))
    cp[:2], cp[-2:], cp[:, :2], cp[:, -2:], cp[:, :, :2], cp[:, :, -2:] = 0, 0, 0, 0, 0, 0  # TorchIO's locked borders
    return cp


def _check_image(got, ref, tol):
    """float32 coordinates vs ITK's double: within `tol` of the range; a few voxels may differ
    more where a point lies within float32 rounding of ITK's buffer edge (padded one side, read
    the other)."""
    err = (got.double() - ref.double()).abs()
    scale = float(ref.abs().max())
    bad = err > tol * scale
    assert bad.double().mean() < 1e-4, (float(err.max()), int(bad.sum()))


@pytest.mark.parametrize("case", ["ras", "flipped", "permuted"])
def test_elastic_deformation_equals_torchio_on_ch2_and_aal(case):
    """TorchIO ElasticDeformation(control_points in LPS mm) on a 2-channel crop of ch2 and the AAL
    labels with the crop's real affine, and with a left-right flipped and an axis-permuted affine
    (SimpleITK lays the grid along the physical axes): images within 2e-5 of the range, padded
    voxels (each channel's minimum) included; labels equal but for rounding ties at 1e-3."""
    vol, affine = load_template("ch2.nii.gz")
    lab, _ = load_template("aal.nii.gz")
    img = vol[:, 50:110, 60:130, 40:90].float()
    img = torch.cat([img, 200.0 - img])  # two channels with different minima
    labels = lab[:, 50:110, 60:130, 40:90].to(torch.int16)
    aff = affine.copy()
    if case == "flipped":
        aff[0, 0], aff[0, 3] = -1.0, 90.0
    elif case == "permuted":
        aff = aff[:, [1, 0, 2, 3]].copy()
    cp = _control_points((7, 8, 6), 6.0, seed=len(case))
    ref = _torchio_elastic({"image": img, "label": labels}, aff, cp, (6, 6, 6), label_keys=("label",))
    t = deform.ElasticDeformation(cp, (6, 6, 6), label_keys=["label"], affine=aff)
    out = t({"image": img, "label": labels, "name": "ch2"})
    assert out["name"] == "ch2" and out["image"].dtype == torch.float32 and out["label"].dtype == torch.int16
    _check_image(out["image"], ref["image"], 2e-5)
    assert (out["label"].float() != ref["label"]).float().mean() < 1e-3
    assert (out["image"] - img).abs().mean() > 1.0


@pytest.mark.parametrize("device", DEVICES)
def test_elastic_deformation_batch_meta_tensor_2d_and_no_displacement(device):
    """A batch is deformed sample by sample as TorchIO would (the same field for each); the affine
    comes from a MetaTensor; a volume with one slice along the last axis gets no displacement
    along it (TorchIO's 2-D rule); max_displacement 0 returns the input; cubic ('bspline')
    interpolation as TorchIO's within 1e-4."""
    from monai.data import MetaTensor

    aff = np.diag([1.2, 0.9, 1.5, 1.0])
    x = rand((2, 1, 20, 18, 16), seed=7)
    cp = _control_points((6, 6, 7), 2.5, seed=8)
    got = deform.ElasticDeformation(cp, 2.5)(MetaTensor(x.to(device), affine=torch.as_tensor(aff)))
    assert isinstance(got, MetaTensor)
    for n in range(2):
        ref = _torchio_elastic({"image": x[n]}, aff, cp, (2.5, 2.5, 2.5))["image"]
        _check_image(got[n].as_tensor().cpu(), ref, 2e-5)
    ref = _torchio_elastic({"image": x[0]}, aff, cp, (2.5, 2.5, 2.5), image_interpolation="bspline")["image"]
    cubic = deform.ElasticDeformation(cp, 2.5, image_interpolation="bspline", affine=aff)(x[0].to(device))
    _check_image(cubic.cpu(), ref, 1e-4)
    flat = rand((1, 24, 20, 1), seed=9)
    ref = _torchio_elastic({"image": flat}, aff, cp, (2.5, 2.5, 2.5))["image"]
    _check_image(deform.ElasticDeformation(cp, 2.5, affine=aff)(flat.to(device)).cpu(), ref, 2e-5)
    assert deform.ElasticDeformation(cp, 0)(x) is x


def test_elastic_deformation_bad_arguments_and_folding_warning():
    cp = _control_points((6, 6, 6), 1.0, seed=1)
    with pytest.raises(ValueError, match=r"\(Kx, Ky, Kz, 3\)"):
        deform.ElasticDeformation(cp[..., :2], 1.0)
    with pytest.raises(ValueError, match="K >= 4"):
        deform.ElasticDeformation(np.zeros((3, 6, 6, 3)), 1.0)
    with pytest.raises(ValueError, match="max_displacement"):
        deform.ElasticDeformation(cp, -1.0)
    with pytest.raises(ValueError, match="image_interpolation"):
        deform.ElasticDeformation(cp, 1.0, image_interpolation="sinc")
    oblique = np.eye(4)
    oblique[:3, :3] = [[0.9, 0.1, 0.0], [-0.1, 0.9, 0.0], [0.0, 0.0, 1.0]]
    with pytest.raises(ValueError, match="oblique"):
        deform.ElasticDeformation(cp, 1.0, affine=oblique)(torch.rand(1, 8, 8, 8))
    with pytest.raises(ValueError, match="same batch and spatial shape"):
        deform.ElasticDeformation(cp, 1.0)({"a": torch.rand(1, 8, 8, 8), "b": torch.rand(1, 8, 8, 9)})
    with pytest.warns(RuntimeWarning, match="folding"):
        deform.ElasticDeformation(cp, 20.0)(torch.rand(1, 12, 12, 12))
