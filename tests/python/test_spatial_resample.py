"""MONAI SpatialResample(d) and ResampleToMatch(d) (voxaug.spatial) against MONAI's, on random
volumes with oblique affines and on the real ch2 / ch2better templates."""
import os

import numpy as np
import pytest
import torch

from conftest import TEMPLATES
from voxaug.spatial import ResampleToMatch, ResampleToMatchd, SpatialResample, SpatialResampled

mt = pytest.importorskip("monai.transforms")
MetaTensor = pytest.importorskip("monai.data").MetaTensor

SRC = np.array([[0.9, 0.1, 0.0, -10.0], [0.0, 1.2, 0.05, -20.0], [0.02, 0.0, 2.0, 5.0], [0, 0, 0, 1.0]])
DST = np.array([[1.1, 0.0, 0.1, -12.0], [0.05, 0.9, 0.0, -18.0], [0.0, 0.1, 1.5, 4.0], [0, 0, 0, 1.0]])


SEEDS = {"bilinear": 0, "nearest": 1, "3": 2}
# Linear interpolation error vs MONAI, relative to the data range: voxaug maps output to input
# voxels in float32 (documented), MONAI in float64. At input indices up to ~24 a float32 coordinate
# carries a few ulps (ulp 1.9e-6) of rounding, and the data (uniform on [0, 100)) changes by up to
# the full range between neighbours, so |err| reaches ~5e-4 = 5e-6 * range on some voxels (seen
# over 572 seeds: max 5.2e-4). 1e-5 is twice that -- still 1000x below a wrong-voxel or
# wrong-weight error, which is O(range).
LINEAR_TOL = 1e-5


def meta(x, affine, name="src.nii"):
    return MetaTensor(x.clone(), affine=torch.as_tensor(affine, dtype=torch.float64), meta={"filename_or_obj": name})


def rand(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 100


@pytest.mark.parametrize("mode", ["bilinear", "nearest", 3])
@pytest.mark.parametrize("padding_mode", ["border", "zeros", "reflection"])
@pytest.mark.parametrize("size", [None, (14, 18, 20), -1])
def test_spatial_resample_equals_monai(mode, padding_mode, size):
    # A fixed seed per case (str hashes are salted per process, so hash() would change the data each run).
    x = rand((2, 17, 20, 16), seed=SEEDS[str(mode)] * 3 + ["border", "zeros", "reflection"].index(padding_mode))
    ref = mt.SpatialResample(mode=mode, padding_mode=padding_mode)(meta(x, SRC), dst_affine=torch.as_tensor(DST),
                                                                   spatial_size=size)
    got = SpatialResample(mode=mode, padding_mode=padding_mode)(meta(x, SRC), dst_affine=torch.as_tensor(DST),
                                                                spatial_size=size)
    assert got.shape == ref.shape
    assert float((got.affine - ref.affine).abs().max()) < 1e-12
    err = float((got.as_tensor().double() - ref.as_tensor().double()).abs().max())
    if mode == "nearest":
        assert err == 0.0
    else:  # voxaug computes in float32, MONAI (dtype=float64) in float64: see LINEAR_TOL
        assert err <= (1e-4 if mode == 3 else LINEAR_TOL) * 100


def test_spatial_resample_unchanged_and_plain_inputs(resample_launches):
    x = rand((1, 9, 10, 11), seed=3)
    out = SpatialResample()(meta(x, SRC), dst_affine=torch.as_tensor(SRC), spatial_size=-1)
    ref = mt.SpatialResample()(meta(x, SRC), dst_affine=torch.as_tensor(SRC), spatial_size=-1)
    assert resample_launches[0] == 0  # MONAI's "affine unchanged" shortcut: no resampling
    assert out.dtype == ref.dtype == torch.float32 and torch.equal(out.as_tensor(), ref.as_tensor())
    xi = (x * 3).to(torch.int16)
    same = SpatialResample()(meta(xi, SRC))  # dst_affine None: the image's own
    assert same.dtype == torch.float32 and torch.equal(same.as_tensor(), xi.float())
    with pytest.warns(UserWarning, match="identity affine"):
        plain, new_aff = SpatialResample()(x, dst_affine=torch.as_tensor(DST), spatial_size=(8, 8, 8))
    ref = mt.SpatialResample()(x.clone(), dst_affine=torch.as_tensor(DST), spatial_size=(8, 8, 8))
    assert float((plain - torch.as_tensor(ref)).abs().max()) <= LINEAR_TOL * 100
    assert torch.allclose(new_aff.double(), torch.as_tensor(DST))


def test_resample_to_match_and_dicts():
    x = rand((1, 17, 20, 16), seed=4)
    lab = (x > 50).to(torch.int16) + (x > 80).to(torch.int16)
    dst = MetaTensor(torch.zeros(1, 12, 13, 14), affine=torch.as_tensor(DST), meta={"filename_or_obj": "dst.nii",
                                                                                    "extra": 7})
    ref = mt.ResampleToMatch()(meta(x, SRC), dst)
    got = ResampleToMatch()(meta(x, SRC), dst)
    assert got.shape == ref.shape and float((got.as_tensor() - ref.as_tensor()).abs().max()) <= LINEAR_TOL * 100
    assert torch.equal(got.affine, ref.affine) and got.meta["filename_or_obj"] == "src.nii" and got.meta["extra"] == 7
    data = {"img": meta(x, SRC), "lab": meta(lab, SRC), "dst": dst}
    ref_d = mt.ResampleToMatchd(["img", "lab"], "dst", mode=("bilinear", "nearest"))(dict(data))
    got_d = ResampleToMatchd(["img", "lab"], "dst", mode=("bilinear", "nearest"))(dict(data))
    assert torch.equal(got_d["lab"].as_tensor().float(), ref_d["lab"].as_tensor())  # MONAI casts to float32
    assert float((got_d["img"].as_tensor() - ref_d["img"].as_tensor()).abs().max()) <= LINEAR_TOL * 100
    data = {"img": meta(x, SRC), "dst_affine": torch.as_tensor(DST)}
    ref_s = mt.SpatialResampled("img")(dict(data))["img"]
    got_s = SpatialResampled("img")(dict(data))["img"]
    assert got_s.shape == ref_s.shape and float((got_s.as_tensor() - ref_s.as_tensor()).abs().max()) <= LINEAR_TOL * 100
    with pytest.raises(RuntimeError, match="img_dst"):
        ResampleToMatch()(meta(x, SRC), None)
    with pytest.raises(ValueError, match="not invertible"):
        SpatialResample()(meta(x, np.zeros((4, 4))), dst_affine=torch.as_tensor(DST))
    with pytest.raises(KeyError):
        ResampleToMatchd("nope", "dst")({"dst": dst})


def test_resample_to_match_real_volumes():
    nib = pytest.importorskip("nibabel")
    paths = [os.path.join(TEMPLATES, n) for n in ("ch2.nii.gz", "ch2better.nii.gz")]
    if not all(os.path.exists(p) for p in paths):
        pytest.skip("mricron-data not installed")
    small, big = (nib.load(p) for p in paths)
    img = MetaTensor(torch.from_numpy(np.asarray(big.dataobj).astype(np.float32))[None],
                     affine=torch.as_tensor(big.affine))
    dst = MetaTensor(torch.zeros((1,) + small.shape), affine=torch.as_tensor(small.affine))
    ref = mt.ResampleToMatch()(img.clone(), dst)
    got = ResampleToMatch()(img, dst)
    assert got.shape == ref.shape == (1,) + small.shape
    rng = float(ref.max() - ref.min())
    assert float((got.as_tensor() - ref.as_tensor()).abs().max()) <= 2e-5 * rng
