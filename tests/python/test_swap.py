"""TorchIO Swap / RandomSwap (voxaug.degrade): equal to TorchIO's swap for non-overlapping
patches, to a numpy true-swap reference for overlapping ones, every dtype, strided input; the
draws follow TorchIO's rules (corners in [0, size - patch), the second never the first); bad
inputs; the device path against the CPU, without host syncs."""
import numpy as np
import pytest
import torch

from conftest import devices, sync_is_error
from voxaug.degrade import RandomSwap, Swap

tio = pytest.importorskip("torchio")


def reference(x: np.ndarray, patch, locations) -> np.ndarray:
    """Both patches copied first, then written: a true swap (float64-free, exact)."""
    out = x.copy()
    p = np.asarray(patch)
    for f, s in locations:
        fs = tuple(slice(a, a + b) for a, b in zip(f, p))
        ss = tuple(slice(a, a + b) for a, b in zip(s, p))
        a, b = out[(Ellipsis, *fs)].copy(), out[(Ellipsis, *ss)].copy()
        out[(Ellipsis, *ss)] = a
        out[(Ellipsis, *fs)] = b
    return out


def test_swap_equals_torchio_without_overlap():
    from torchio.transforms.augmentation.intensity.random_swap import _swap
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 12, 13, 14, generator=g)
    locs = [((0, 0, 0), (6, 7, 8)), ((1, 2, 3), (7, 0, 9)), ((6, 7, 8), (0, 6, 0))]
    got = Swap((5, 6, 5), locs)(x)
    assert torch.equal(got, _swap(x, (5, 6, 5), locs)) and not torch.equal(got, x)
    subject = tio.Subject(img=tio.ScalarImage(tensor=x.clone()))
    assert torch.equal(got, tio.Swap(patch_size=(5, 6, 5), locations=locs)(subject)["img"].data)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                                   torch.int16, torch.int32, torch.int64])
def test_swap_overlapping_and_dtypes(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(3, 2, 9, 10, 11, generator=g) * 100).to(dtype)
    locs = [((0, 0, 0), (1, 2, 1)), ((2, 3, 4), (4, 4, 6)), ((4, 5, 6), (0, 0, 0))]  # overlaps
    got = Swap(4, locs)(x)
    ref = reference(x.float().numpy() if dtype == torch.bfloat16 else x.numpy(), (4, 4, 4), locs)
    np.testing.assert_array_equal(got.float().numpy() if dtype == torch.bfloat16 else got.numpy(), ref)
    t = x.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
    assert torch.equal(Swap(4, locs)(t), got)
    y = x.clone()
    assert Swap(4, locs, in_place=True)(y) is y and torch.equal(y, got)


def test_random_swap_draws_follow_torchio_rules():
    x = torch.rand(64, 1, 20, 15, 16)
    t = RandomSwap(patch_size=(5, 15, 4), num_iterations=30, seed=3)
    out = t(x)
    loc = t.last_locations
    assert loc.shape == (64, 30, 6)
    first, second = loc[..., :3], loc[..., 3:]
    assert (first >= 0).all() and (second >= 0).all()
    # randint(size - patch): the last position never drawn; patch == size on an axis: 0
    assert first[..., 0].max() == 20 - 5 - 1 and second[..., 2].max() == 16 - 4 - 1
    assert (first[..., 1] == 0).all() and (second[..., 1] == 0).all()
    assert (first != second).any(-1).all()
    # Uniform corners: all positions appear.
    assert set(np.unique(first[..., 0]).tolist()) == set(range(15))
    for n in (0, 17):
        np.testing.assert_array_equal(out[n].numpy(), reference(x[n].numpy(), (5, 15, 4), loc[n].reshape(-1, 2, 3)))
    # p = 0: unchanged; the same seed repeats; a dictionary's label maps are left alone.
    assert RandomSwap(p=0.0, seed=0)(x) is x
    assert torch.equal(RandomSwap(patch_size=(5, 15, 4), num_iterations=30, seed=3)(x), out)
    d = RandomSwap(patch_size=3, num_iterations=5, label_keys=("seg",), seed=1)(
        {"a": x[:2], "b": x[:2].clone(), "seg": x[:2]})
    assert torch.equal(d["seg"], x[:2])
    assert not torch.equal(d["a"], x[:2]) and not torch.equal(d["a"], d["b"])  # own draws per image


def test_bad_inputs():
    with pytest.raises(ValueError, match="cannot be larger"):
        RandomSwap(patch_size=30, seed=0)(torch.zeros(1, 1, 10, 40, 40))
    with pytest.raises(ValueError, match="single position"):
        RandomSwap(patch_size=(10, 10, 10), seed=0)(torch.zeros(1, 10, 10, 10))
    with pytest.raises(TypeError, match="num_iterations"):
        RandomSwap(num_iterations=2.5)
    with pytest.raises(ValueError, match="num_iterations"):
        RandomSwap(num_iterations=-1)
    with pytest.raises(ValueError, match="patch_size"):
        RandomSwap(patch_size=(3, 0, 3))
    with pytest.raises(ValueError, match="outside the volume"):
        Swap(4, [((0, 0, 0), (7, 0, 0))])(torch.zeros(1, 10, 10, 10))


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    x = torch.rand(3, 2, 17, 16, 15)
    ref = RandomSwap(patch_size=(4, 5, 6), num_iterations=40, p=0.8, seed=5)(x)
    got = RandomSwap(patch_size=(4, 5, 6), num_iterations=40, p=0.8, seed=5)(x.to(device))
    assert torch.equal(got.cpu(), ref)
    # TorchIO's default patch (15^3 = 3375 voxels, many passes of a CUDA block) on a small volume:
    # overlapping swaps in both corner orders.
    y = torch.rand(2, 1, 32, 32, 32)
    ref = RandomSwap(patch_size=15, num_iterations=30, seed=7)(y)
    assert torch.equal(RandomSwap(patch_size=15, num_iterations=30, seed=7)(y.to(device)).cpu(), ref)
    if torch.device(device).type == "cuda":
        xd = x.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = RandomSwap(patch_size=(4, 5, 6), num_iterations=40, seed=6)(xd)
        assert out.is_cuda
