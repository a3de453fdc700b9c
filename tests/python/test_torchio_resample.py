"""TorchIO Resample and ToCanonical (voxaug.spatial) against TorchIO's (SimpleITK) on random volumes
and on ch2.nii.gz."""
import numpy as np
import pytest
import torch

from conftest import devices
from voxaug.spatial import Resample, ToCanonical, torchio_reference_grid, _LPS

tio = pytest.importorskip("torchio")
MetaTensor = pytest.importorskip("monai.data").MetaTensor

AFFINES = {
    "identity": np.eye(4),
    "scaled": np.array([[0.9, 0.0, 0.0, -10.0], [0.0, 1.2, 0.0, -20.0], [0.0, 0.0, 2.0, 5.0], [0, 0, 0, 1.0]]),
    "flipped": np.array([[-1.1, 0.0, 0.0, 30.0], [0.0, 0.8, 0.0, -7.0], [0.0, 0.0, -1.5, 12.0], [0, 0, 0, 1.0]]),
    "oblique": np.array([[0.9, 0.15, 0.0, -8.0], [-0.15, 0.9, 0.05, -15.0], [0.0, -0.05, 1.6, 3.0], [0, 0, 0, 1.0]]),
}
TARGETS = [1, 2, 0.6, (1.5, 0.7, 3.0)]


def tio_resample(x4, affine, target, interp="linear", label=None, scalars_only=False):
    subject = tio.Subject(img=tio.ScalarImage(tensor=x4.clone(), affine=affine),
                          **({} if label is None else {"lab": tio.LabelMap(tensor=label.clone(), affine=affine)}))
    out = tio.Resample(target, image_interpolation=interp, scalars_only=scalars_only)(subject)
    return out["img"].data, out["img"].affine, (None if label is None else out["lab"].data)


def not_tie(m, in_size, out_size, tol):
    """(D, H, W) bool: output voxels whose input coordinates are all farther than tol from a
    nearest-neighbour tie (k + 1/2), from the float64 index map m."""
    g = np.meshgrid(*[np.arange(s, dtype=np.float64) for s in out_size], indexing="ij")
    ok = np.ones(out_size, dtype=bool)
    for a in range(3):
        c = m[a, 0] * g[0] + m[a, 1] * g[1] + m[a, 2] * g[2] + m[a, 3]
        ok &= np.abs(c - np.floor(c) - 0.5) > tol
    return torch.from_numpy(ok)


@pytest.mark.parametrize("affine", list(AFFINES))
@pytest.mark.parametrize("target", TARGETS)
def test_resample_linear_equals_torchio(affine, target):
    g = torch.Generator().manual_seed(1)
    x = torch.rand(2, 17, 20, 16, generator=g) * 100 - 20
    aff = AFFINES[affine]
    got = Resample(target)(MetaTensor(x, affine=torch.as_tensor(aff)))
    ref, ref_aff, _ = tio_resample(x, aff, target)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert np.abs(got.affine.numpy() - ref_aff).max() < 1e-9
    assert float((got.as_tensor() - ref).abs().max()) <= 2e-6 * 120


@pytest.mark.parametrize("affine", list(AFFINES))
@pytest.mark.parametrize("target", TARGETS)
def test_resample_bspline_equals_torchio(affine, target):
    """image_interpolation='bspline': SimpleITK's cubic B-spline (prefiltered, mirrored about the
    edge voxels: voxaug's cubic with 'reflection' + align_corners), the edge rule and 0 beyond as
    for linear: within 1e-5 of the range of TorchIO's (float32 prefilter and taps vs ITK's
    double); integer images truncate back to their dtype as ITK's cast: off by one where the two
    arithmetics straddle an integer -- at the input's own grid points (target 1 here) the spline
    reproduces the integers and ITK's double lands a hair below about half of them."""
    g = torch.Generator().manual_seed(2)
    x = torch.rand(2, 17, 20, 16, generator=g) * 100 - 20
    aff = AFFINES[affine]
    got = Resample(target, image_interpolation="bspline")(MetaTensor(x, affine=torch.as_tensor(aff)))
    ref, ref_aff, _ = tio_resample(x, aff, target, interp="bspline")
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert np.abs(got.affine.numpy() - ref_aff).max() < 1e-9
    assert float((got.as_tensor() - ref).abs().max()) <= 1e-5 * 120
    xi = (x + 20).to(torch.int16)
    got = Resample(target, image_interpolation="bspline")(MetaTensor(xi, affine=torch.as_tensor(aff)))
    ref, _, _ = tio_resample(xi, aff, target, interp="bspline")
    assert got.dtype == torch.int16 and ref.dtype == torch.int16
    assert int((got.as_tensor() - ref).abs().max()) <= 1


@pytest.mark.parametrize("affine", list(AFFINES))
@pytest.mark.parametrize("target", TARGETS)
def test_resample_nearest_equals_torchio_off_ties(affine, target):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(1, 17, 20, 16, generator=g) * 100
    aff = AFFINES[affine]
    got = Resample(target, image_interpolation="nearest")(MetaTensor(x, affine=torch.as_tensor(aff))).as_tensor()
    ref, _, _ = tio_resample(x, aff, target, "nearest")
    size, out_aff = torchio_reference_grid(x.shape[1:], aff, (target,) * 3 if np.isscalar(target) else target)
    m = np.linalg.inv(_LPS @ aff) @ (_LPS @ out_aff)
    # Exact ties fall either side in ITK's arithmetic (see Resample's notes); elsewhere equal.
    keep = not_tie(m, x.shape[1:], size, 1e-6 if affine != "oblique" else 2e-4)
    assert torch.equal(got[0][keep], ref[0][keep])
    if affine == "identity" and target == 2:  # all ties, in exact binary arithmetic: they agree too
        assert torch.equal(got, ref) and not bool(keep.all())


def test_resample_grid_targets_labels_and_plain_tensors():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(1, 15, 14, 13, generator=g) * 50
    lab = (x > 25).to(torch.int16) * 3 + (x > 40).to(torch.int16)
    aff = AFFINES["scaled"]
    tgt_aff = AFFINES["oblique"]
    ref, ref_aff, ref_lab = tio_resample(x, aff, ((12, 11, 10), tgt_aff), label=lab)
    res = Resample(((12, 11, 10), tgt_aff), label_keys=("lab",))(
        {"img": MetaTensor(x, affine=torch.as_tensor(aff)), "lab": MetaTensor(lab, affine=torch.as_tensor(aff)),
         "n": 1})
    assert res["n"] == 1 and res["lab"].dtype == torch.int16
    assert float((res["img"].as_tensor() - ref).abs().max()) <= 2e-6 * 50
    m = np.linalg.inv(_LPS @ aff) @ (_LPS @ tgt_aff)
    keep = not_tie(m, x.shape[1:], (12, 11, 10), 2e-4)
    assert torch.equal(res["lab"].as_tensor()[0][keep], ref_lab[0][keep])
    # A reference MetaTensor as the target gives the same grid.
    ref_img = MetaTensor(torch.zeros(1, 12, 11, 10), affine=torch.as_tensor(tgt_aff))
    again = Resample(ref_img)(MetaTensor(x, affine=torch.as_tensor(aff)))
    assert torch.equal(again.as_tensor(), res["img"].as_tensor())
    # scalars_only leaves label maps alone; a plain tensor is taken with the identity affine.
    res2 = Resample(2, scalars_only=True, label_keys=("lab",))({"img": x, "lab": lab})
    assert res2["lab"] is lab
    t = Resample(2)
    plain = t(x)
    ref2, ref2_aff, _ = tio_resample(x, np.eye(4), 2)
    assert float((plain - ref2).abs().max()) <= 2e-6 * 50 and np.abs(t.last_affine - ref2_aff).max() < 1e-9


def test_resample_real_volume(ch2):
    vol, affine = ch2
    img = vol[:, :120, :140, :110].contiguous()  # uint8: ITK's cast truncates
    got = Resample((2.0, 1.5, 3.0))(MetaTensor(img, affine=torch.as_tensor(affine)))
    ref, ref_aff, _ = tio_resample(img, affine, (2.0, 1.5, 3.0))
    assert got.dtype == torch.uint8 and got.shape == ref.shape
    assert np.abs(got.affine.numpy() - ref_aff).max() < 1e-9
    # The interpolation itself, on the float image, against TorchIO on the float64 image.
    as_float = Resample((2.0, 1.5, 3.0))(MetaTensor(img.float(), affine=torch.as_tensor(affine))).as_tensor()
    ref64, _, _ = tio_resample(img.double(), affine, (2.0, 1.5, 3.0))
    assert float((as_float.double() - ref64).abs().max()) <= 2e-6 * 255
    # uint8: the float result truncated; ITK's double lands a hair below some integers (120.99999999999987
    # where float32 gives 121.0), so those voxels differ by one.
    assert torch.equal(got.as_tensor(), as_float.trunc().to(torch.uint8))
    diff = (got.as_tensor().to(torch.int16) - ref.to(torch.int16)).abs()
    assert int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-2


def test_resample_errors():
    with pytest.raises(NotImplementedError, match="antialias"):
        Resample(2, antialias=True)
    with pytest.raises(NotImplementedError, match="image_interpolation"):
        Resample(2, image_interpolation="lanczos")
    with pytest.raises(ValueError, match="Target not understood"):
        Resample((1, 2))
    with pytest.raises(ValueError, match="positive"):
        Resample(-1)
    with pytest.raises(NotImplementedError, match="file paths"):
        Resample("t1.nii.gz")
    with pytest.raises(ValueError, match="empty"):
        Resample(100)(torch.rand(1, 5, 5, 5))


def test_to_canonical_equals_torchio(ch2):
    vol, affine = ch2
    img = vol[:, :60, :70, :50].contiguous()
    # A LIP-ish affine: axes permuted and flipped relative to RAS.
    perm = np.array([[0, -1.0, 0, 0], [0, 0, -1.0, 0], [1.0, 0, 0, 0], [0, 0, 0, 1.0]])
    aff = perm @ np.asarray(affine)
    got = ToCanonical()({"img": MetaTensor(img, affine=torch.as_tensor(aff)), "k": 2})
    ref = tio.ToCanonical()(tio.Subject(img=tio.ScalarImage(tensor=img.clone(), affine=aff)))["img"]
    assert torch.equal(got["img"].as_tensor(), ref.data) and got["k"] == 2
    assert np.abs(got["img"].affine.numpy() - ref.affine).max() < 1e-9
    x = torch.rand(1, 4, 5, 6)
    assert ToCanonical()(x) is x
    # An image in RAS already (ch2 itself): returned as it is, as TorchIO skips it.
    ras = MetaTensor(img, affine=torch.as_tensor(np.asarray(affine)))
    assert ToCanonical()(ras) is ras
    ref = tio.ToCanonical()(tio.Subject(img=tio.ScalarImage(tensor=img.clone(), affine=np.asarray(affine))))["img"]
    assert torch.equal(ras.as_tensor(), ref.data)


def test_to_orientation_skips_images_in_the_target_orientation(ch2):
    """TorchIO's ToOrientation skips an image whose axis codes are the target's: voxaug returns
    it as it is (a bare tensor is RAS); others are reoriented as TorchIO does."""
    from voxaug.spatial import ToOrientation

    vol, affine = ch2
    img = vol[:, :30, :40, :20].contiguous()
    las = np.diag([-1.0, 1.0, 1.0, 1.0]) @ np.asarray(affine)
    m = MetaTensor(img, affine=torch.as_tensor(las))
    t = ToOrientation("LAS")
    assert t(m) is m and np.allclose(t.last_affine, las)
    x = torch.rand(1, 4, 5, 6)
    assert ToOrientation("RAS")(x) is x
    got = ToOrientation("RAS")(m)
    ref = tio.ToOrientation("RAS")(tio.Subject(img=tio.ScalarImage(tensor=img.clone(), affine=las)))["img"]
    assert got is not m and torch.equal(got.as_tensor(), ref.data)


@pytest.mark.parametrize("device", devices())
def test_resample_device_matches_cpu(device):
    x = torch.rand(2, 1, 12, 13, 14) * 10
    aff = torch.as_tensor(AFFINES["oblique"])
    a = Resample((1.3, 0.9, 2.0))(MetaTensor(x, affine=aff))
    b = Resample((1.3, 0.9, 2.0))(MetaTensor(x.to(device), affine=aff))
    assert b.device.type == device and float((b.as_tensor().cpu() - a.as_tensor()).abs().max()) <= 1e-5
