"""MONAI MedianSmooth (voxaug.filter): equal to MONAI's (unfold + torch.median) and to
scipy.ndimage.median_filter(mode="nearest") for several radii, dtypes, strided input, NaN / inf,
a batch and ch2; the box limit and bad radii raise; opcheck; the device path against the CPU,
without host syncs."""
import numpy as np
import pytest
import torch

from conftest import devices, sync_is_error
from voxaug.filter import MedianSmooth, MedianSmoothd

ndi = pytest.importorskip("scipy.ndimage")


def scipy_median(x: torch.Tensor, r) -> np.ndarray:
    size = (1,) * (x.dim() - 3) + tuple(2 * v + 1 for v in r)
    return ndi.median_filter(x.float().numpy(), size=size, mode="nearest")


@pytest.mark.parametrize("radius", [1, (1, 2, 1), (0, 0, 3), (3, 3, 3), (2, 0, 1), 0])
def test_equals_scipy(radius):
    g = torch.Generator().manual_seed(sum(radius) if isinstance(radius, tuple) else radius)
    x = torch.randn(2, 3, 11, 12, 13, generator=g)
    x[x > 2.0] = float("inf")
    x[x < -2.0] = -float("inf")
    r = radius if isinstance(radius, tuple) else (radius,) * 3
    got = MedianSmooth(radius)(x)
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), scipy_median(x, r))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                                   torch.int16, torch.int32, torch.int64])
def test_equals_monai_dtypes_and_views(dtype):
    mt = pytest.importorskip("monai.transforms")
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(2, 9, 10, 11, generator=g) * 200).to(dtype)
    ref = torch.as_tensor(mt.MedianSmooth(radius=1)(x.clone()))
    got = MedianSmooth(1)(x)
    assert torch.equal(got, ref.float())
    t = x.permute(0, 3, 2, 1).contiguous().permute(0, 3, 2, 1)
    assert not t.is_contiguous() and torch.equal(MedianSmooth(1)(t), got)
    # A batch through the dictionary form: each sample as MONAI filters it alone.
    batch = torch.stack([x, x.flip(-1)])
    out = MedianSmoothd("img", radius=1)({"img": batch})["img"]
    for n in range(2):
        assert torch.equal(out[n], torch.as_tensor(mt.MedianSmooth(radius=1)(batch[n].clone())).float())


def test_nan_ch2_and_errors(ch2):
    mt = pytest.importorskip("monai.transforms")
    x = torch.rand(1, 7, 8, 9)
    x[0, 3, 4, 5] = float("nan")
    got = MedianSmooth(1)(x)
    nan = torch.isnan(got[0])
    assert nan[2:5, 3:6, 4:7].all() and int(nan.sum()) == 27  # every box holding the NaN voxel
    vol = ch2[0][:, 40:100, 50:110, 60:120].contiguous()
    assert torch.equal(MedianSmooth((1, 1, 2))(vol), torch.as_tensor(mt.MedianSmooth(radius=(1, 1, 2))(vol.clone())))
    with pytest.raises(ValueError, match="at most 343"):
        MedianSmooth((4, 3, 3))(x)
    with pytest.raises(ValueError, match="radius"):
        MedianSmooth(-1)
    with pytest.raises(ValueError, match="radius"):
        torch.ops.voxaug.median_filter(x[None], [1, 1])
    torch.library.opcheck(torch.ops.voxaug.median_filter.default, (torch.rand(1, 2, 5, 6, 7), [1, 0, 2]))


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    x = torch.randn(2, 2, 13, 12, 11)
    for r in ([1, 1, 1], [0, 2, 1], [3, 3, 3]):
        assert torch.equal(torch.ops.voxaug.median_filter(x.to(device), r).cpu(), torch.ops.voxaug.median_filter(x, r))
    if torch.device(device).type == "cuda":
        xd = x.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = MedianSmooth(1)(xd)
        assert out.is_cuda
