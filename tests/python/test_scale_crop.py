"""MONAI CenterScaleCrop(d) and RandScaleCrop(d) against MONAI's."""
import math

import pytest
import torch

from voxaug.crop import RandScaleCrop, RandScaleCropd
from voxaug.spatial import CenterScaleCrop, CenterScaleCropd

mt = pytest.importorskip("monai.transforms")
MetaTensor = pytest.importorskip("monai.data").MetaTensor


def find(patch, x):
    """The corner at which `patch` (C, d, h, w) sits inside x (C, D, H, W), or None."""
    d, h, w = patch.shape[1:]
    for i in range(x.shape[1] - d + 1):
        for j in range(x.shape[2] - h + 1):
            for k in range(x.shape[3] - w + 1):
                if torch.equal(x[:, i:i + d, j:j + h, k:k + w], patch):
                    return i, j, k
    return None


@pytest.mark.parametrize("scale", [0.5, (0.3, 0.7, 1.0), (0.5, -1.0, 0.33), 1.0, 0.01])
def test_center_scale_crop_equals_monai(scale):
    x = torch.arange(2 * 17 * 20 * 15, dtype=torch.float32).reshape(2, 17, 20, 15)
    aff = torch.diag(torch.tensor([0.8, 1.2, 2.0, 1.0], dtype=torch.float64))
    ref = mt.CenterScaleCrop(scale)(MetaTensor(x.clone(), affine=aff))
    got = CenterScaleCrop(scale)(MetaTensor(x.clone(), affine=aff))
    assert torch.equal(got.as_tensor(), ref.as_tensor()) and torch.allclose(got.affine, ref.affine)
    d = CenterScaleCropd(["a", "b"], scale)({"a": x, "b": x + 1})
    assert torch.equal(d["a"], ref.as_tensor()) and torch.equal(d["b"], ref.as_tensor() + 1)


def test_rand_scale_crop_sizes_positions_and_dict():
    x = torch.arange(17 * 20 * 15, dtype=torch.float32).reshape(1, 17, 20, 15)
    t = RandScaleCrop((0.4, 0.5, 0.6), seed=3)
    out = t(x)
    assert out.shape == mt.RandScaleCrop((0.4, 0.5, 0.6))(x).shape
    assert find(out, x) is not None
    corners = {find(t(x), x) for _ in range(20)}
    assert len(corners) > 5  # random centres
    t = RandScaleCrop((0.4, 0.5, 0.6), max_roi_scale=0.9, random_size=True, seed=1)
    lo = [math.ceil(r * s) for r, s in zip((0.4, 0.5, 0.6), x.shape[1:])]
    hi = [math.ceil(0.9 * s) for s in x.shape[1:]]
    sizes = [tuple(t(x).shape[1:]) for _ in range(60)]
    for a in range(3):
        vals = {s[a] for s in sizes}
        assert min(vals) >= lo[a] and max(vals) <= hi[a] and len(vals) > 2
    centred = RandScaleCrop(0.5, random_center=False, seed=1)(x)
    assert torch.equal(centred, CenterScaleCrop(0.5)(x))
    d = RandScaleCropd(["img", "lab"], 0.5, seed=2)({"img": x, "lab": x * 2})
    assert torch.equal(d["lab"], d["img"] * 2)
    with pytest.raises(ValueError, match="larger than max ROI size"):
        RandScaleCrop(0.8, max_roi_scale=0.5, random_size=True, seed=1)(x)
    with pytest.raises(ValueError, match="roi_scale"):
        CenterScaleCrop((0.5, 0.5))
