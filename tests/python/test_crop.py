"""CropForeground(d) and the foreground_bbox op vs MONAI (generate_spatial_bounding_box,
CropForeground / CropForegroundd) on random volumes and ch2 + aal."""
import os

import numpy as np
import pytest
import torch

from voxaug import ops
from voxaug import spatial as S

from conftest import TEMPLATES, devices

mt = pytest.importorskip("monai.transforms")
from monai.data import MetaTensor  # noqa: E402
from monai.transforms.utils import generate_spatial_bounding_box  # noqa: E402


def _blobs(shape=(2, 20, 17, 23), seed=0, p=0.001):
    g = torch.Generator().manual_seed(seed)
    x = -torch.rand(shape, generator=g)
    x[torch.rand(shape, generator=g) < p] = 3.0
    return x


@pytest.mark.parametrize("seed", range(4))
def test_bbox_op_matches_monai(seed):
    xs = [_blobs(seed=seed + 10 * i) for i in range(3)]
    xs[1] = -xs[1].abs()  # no foreground: zeros
    box = ops.foreground_bbox(torch.stack(xs))
    for i, x in enumerate(xs):
        start, end = generate_spatial_bounding_box(x, allow_smaller=True)
        assert box[i].tolist() == list(start) + list(end)
    box1 = ops.foreground_bbox(torch.stack(xs), 0.0, [1])
    start, end = generate_spatial_bounding_box(xs[0], channel_indices=[1], allow_smaller=True)
    assert box1[0].tolist() == list(start) + list(end)


@pytest.mark.parametrize("margin,allow_smaller,k,mode", [
    (0, False, 1, "constant"), (3, False, 1, "constant"), (3, True, 1, "constant"), (2, False, 8, "constant"),
    ((1, 4, 0), True, (4, 1, 16), "edge"), (5, False, 16, "edge"), (0, True, 7, "constant")])
def test_crop_foreground_matches_monai(margin, allow_smaller, k, mode):
    x = _blobs(seed=3)
    x[:, 0, 0, 5] = 1.0  # foreground at an edge, so margins and k leave the image
    kw = dict(margin=margin, allow_smaller=allow_smaller, k_divisible=k, mode=mode)
    ref = mt.CropForeground(**kw)(x)
    got = S.CropForeground(**kw)(x)
    assert got.shape == ref.shape and torch.equal(got, torch.as_tensor(ref))


def test_crop_foreground_select_fn_channels_value_and_coords():
    x = _blobs(seed=5, p=0.003)
    fn = lambda v: v > 2.5  # noqa: E731
    kw = dict(select_fn=fn, channel_indices=[0], margin=2, k_divisible=6, mode="constant", value=-9,
              return_coords=True)
    ref, rs, re = mt.CropForeground(**kw)(x)
    got, gs, ge = S.CropForeground(**kw)(x)
    assert torch.equal(got, torch.as_tensor(ref))
    assert list(gs) == list(rs) and list(ge) == list(re)


def test_crop_foreground_ch2_aal_dict_meta_and_inverse():
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    ch2 = nib.load(path)
    aal = nib.load(os.path.join(TEMPLATES, "aal.nii.gz"))
    aff = torch.as_tensor(ch2.affine, dtype=torch.float64)
    img = MetaTensor(torch.from_numpy(np.asarray(ch2.dataobj).astype(np.float32))[None], affine=aff)
    lab = MetaTensor(torch.from_numpy(np.asarray(aal.dataobj).astype(np.int16))[None], affine=aff)
    img = img - 40  # background below 0
    kw = dict(source_key="image", margin=4, k_divisible=16)
    ref = mt.CropForegroundd(["image", "label"], **kw)({"image": img, "label": lab})
    t = S.CropForegroundd(["image", "label"], **kw)
    got = t({"image": img, "label": lab})
    for k in ("image", "label"):
        assert got[k].shape == ref[k].shape and torch.equal(got[k].as_tensor(), ref[k].as_tensor())
        assert torch.allclose(got[k].affine.double(), ref[k].affine.double(), atol=1e-9)
    assert list(got["foreground_start_coord"]) == list(ref["foreground_start_coord"])
    assert all(s % 16 == 0 for s in got["image"].shape[1:])
    back = t.inverse(got)
    inside = tuple(slice(int(s), int(s) + n) for s, n in zip(got["foreground_start_coord"], got["image"].shape[1:]))
    assert back["image"].shape == img.shape
    assert torch.equal(back["label"].as_tensor()[(slice(None),) + inside], lab.as_tensor()[(slice(None),) + inside])


def test_crop_foreground_empty_and_bad_inputs():
    x = -torch.ones(1, 6, 7, 8)
    ref = mt.CropForeground()(x)
    got = S.CropForeground()(x)
    assert got.shape == ref.shape
    with pytest.raises(ValueError, match="one volume at a time"):
        S.CropForeground()(torch.ones(2, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="margin"):
        S.CropForeground(margin=-1)
    with pytest.raises(ValueError, match="channel_indices"):
        ops.foreground_bbox(torch.ones(1, 2, 4, 4, 4), 0.0, [3])


def test_bbox_opcheck():
    torch.library.opcheck(torch.ops.voxaug.foreground_bbox, (_blobs()[None], 0.0, [0, 1]))


@pytest.mark.parametrize("device", devices())
def test_empty_volumes_give_zero_boxes_and_filled_patches(device):
    """A volume with a zero-length axis has no data pointer: zero boxes (MONAI's
    generate_spatial_bounding_box of an empty image: all zeros) and patches of the fill, on
    every backend (CUDA used to refuse the null pointer)."""
    from voxaug import crop as C

    for shape in ((2, 1, 0, 4, 4), (1, 2, 3, 0, 5), (1, 1, 4, 4, 0)):
        x = torch.zeros(shape, device=device)
        box = ops.foreground_bbox(x)
        assert box.device == x.device and torch.equal(box.cpu(), torch.zeros(shape[0], 6, dtype=torch.int64))
        np.testing.assert_array_equal(np.asarray(generate_spatial_bounding_box(x[0].cpu().numpy())).ravel(), 0)
        centers = torch.ones(shape[0], 2, 3, dtype=torch.int64, device=device)
        p = C.extract_patches(x, centers, [2, 3, 2])
        assert p.shape == (shape[0] * 2, shape[1], 2, 3, 2) and p.device == x.device
        assert torch.equal(p.cpu(), torch.zeros(p.shape))
