"""MONAI HistogramNormalize (voxaug.stats): the CPU path (numpy's histogram / interp per sample)
and the device path (the same rules in torch, run here on the CPU) both equal to MONAI's output
for several bin counts, ranges, masks, a constant image, float64, batches and ch2; bad inputs;
the device path on CUDA against the CPU, without host syncs."""
import numpy as np
import pytest
import torch

from conftest import devices, sync_is_error
from voxaug.stats import HistogramNormalize, HistogramNormalized, _equalize_device

mt = pytest.importorskip("monai.transforms")


def monai(x, **kw):
    return torch.as_tensor(mt.HistogramNormalize(**kw)(x.clone()))


def device_path(x, num_bins=256, min=0, max=255, mask=None):  # noqa: A002
    keep = None if mask is None else torch.as_tensor(mask).bool()[None].expand(1, *x.shape).reshape(1, -1)
    return _equalize_device(x.reshape(1, -1), keep, num_bins, min, max).reshape(x.shape).float()


@pytest.mark.parametrize("kw", [dict(), dict(num_bins=10, min=1, max=4), dict(num_bins=1000), dict(num_bins=1),
                                dict(num_bins=7, min=-3, max=3)])
def test_equals_monai(kw):
    rng = np.random.default_rng(kw.get("num_bins", 256))
    x = torch.from_numpy((rng.standard_normal((2, 9, 10, 11)) * 50 + 20).astype(np.float32))
    ref = monai(x, **kw)
    assert torch.equal(HistogramNormalize(**kw)(x), ref)
    assert torch.equal(device_path(x, **kw), ref)
    # A batch: each sample as MONAI equalises it alone.
    batch = torch.stack([x, x * 3 - 7])
    got = HistogramNormalized("img", **kw)({"img": batch})["img"]
    for n in range(2):
        assert torch.equal(got[n], monai(batch[n], **kw))


def test_mask_constant_float64_and_ch2(ch2):
    rng = np.random.default_rng(3)
    x = torch.from_numpy((rng.standard_normal((1, 9, 10, 11)) * 50).astype(np.float32))
    mask = torch.from_numpy(rng.random((1, 9, 10, 11)) > 0.5)
    ref = torch.as_tensor(mt.HistogramNormalize(mask=mask.numpy())(x.clone()))
    assert torch.equal(HistogramNormalize(mask=mask)(x), ref)
    assert torch.equal(HistogramNormalize()(x, mask=mask), ref)
    assert torch.equal(device_path(x, mask=mask[0]), ref)
    d = HistogramNormalized("img", mask_key="m")({"img": x, "m": mask})
    assert torch.equal(d["img"], ref)
    c = torch.full((1, 4, 4, 4), 3.0)
    assert torch.equal(HistogramNormalize()(c), monai(c)) and torch.equal(device_path(c), monai(c))
    x64 = x.double()
    assert torch.equal(HistogramNormalize()(x64), monai(x64))
    assert torch.equal(device_path(x64), monai(x64))
    vol = ch2[0].float()
    assert torch.equal(HistogramNormalize(num_bins=128, max=1)(vol), monai(vol, num_bins=128, max=1))
    with pytest.raises(TypeError, match="floating image"):
        HistogramNormalize()(torch.zeros(1, 2, 2, 2, dtype=torch.int16))
    with pytest.raises(ValueError, match="num_bins"):
        HistogramNormalize(num_bins=0)


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    x = torch.randn(2, 1, 12, 13, 14) * 40
    ref = HistogramNormalize(num_bins=64)(x)
    got = HistogramNormalize(num_bins=64)(x.to(device))
    assert torch.equal(got.cpu(), ref)
    if torch.device(device).type == "cuda":
        xd = x.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = HistogramNormalize(num_bins=64)(xd)
        assert out.is_cuda
