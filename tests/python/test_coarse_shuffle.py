"""MONAI RandCoarseShuffle (voxaug.degrade): the op against an independent numpy reference of its
documented permutation (Philox keys, stable argsort, box after box), every dtype, strided input,
overlapping boxes; uniform permutations (chi-square); the transform's holes against MONAI's rules
(only hole voxels move, each hole keeps its values), MONAI's own transform on the same data;
bad tables; the device path against the CPU, without host syncs."""
import itertools

import numpy as np
import pytest
import torch

from conftest import devices, sync_is_error
from test_intensity_more import philox_words_np
from voxaug.degrade import RandCoarseShuffle, RandCoarseShuffled

SHUFFLE_STREAM = 5


def reference(x: np.ndarray, boxes: np.ndarray, counts: np.ndarray, seed: int, first_sample: int = 0) -> np.ndarray:
    out = x.copy()
    n_, c_ = x.shape[:2]
    for n in range(n_):
        for j in range(int(counts[n])):
            d0, h0, w0, d1, h1, w1 = (int(v) for v in boxes[n, j])
            for c in range(c_):
                region = out[n, c, d0:d1, h0:h1, w0:w1]
                v = region.size
                if v < 2:
                    continue
                i = np.arange(v, dtype=np.uint64)
                seg = np.uint64(j * c_ + c)
                words = philox_words_np(seed, first_sample + n, SHUFFLE_STREAM, (seg << np.uint64(40)) | (i >> np.uint64(2)))
                keys = np.choose((i & np.uint64(3)).astype(np.int64), words)
                perm = np.argsort(keys, kind="stable")
                out[n, c, d0:d1, h0:h1, w0:w1] = region.ravel()[perm].reshape(region.shape)
    return out


def boxes_table():
    boxes = np.zeros((3, 3, 6), np.int64)
    boxes[0, 0] = (0, 0, 0, 4, 5, 6)
    boxes[0, 1] = (2, 3, 4, 7, 9, 8)  # overlaps box 0: permutes its result
    boxes[1, 0] = (1, 1, 1, 2, 2, 9)  # one row
    boxes[1, 1] = (3, 3, 3, 3, 5, 5)  # empty
    boxes[1, 2] = (5, 0, 2, 6, 1, 3)  # one voxel
    boxes[2, 0] = (0, 0, 0, 8, 9, 10)  # the whole volume
    return boxes, np.array([2, 3, 1], np.int64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8,
                                   torch.int16, torch.int32, torch.int64])
def test_op_equals_reference(dtype):
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(3, 2, 8, 9, 10, generator=g) * 200).to(dtype)
    boxes, counts = boxes_table()
    seed = (0xABCDEF12 << 32) | 0x3456789A
    got = torch.ops.voxaug.coarse_shuffle(x, torch.from_numpy(boxes), torch.from_numpy(counts), seed - (1 << 64), 7)
    ref = reference(x.float().numpy() if dtype == torch.bfloat16 else x.numpy(), boxes, counts, seed, 7)
    assert got.dtype == dtype and not torch.equal(got, x)
    np.testing.assert_array_equal(got.float().numpy() if dtype == torch.bfloat16 else got.numpy(), ref)
    # A strided view gives the same values.
    t = x.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
    assert not t.is_contiguous()
    assert torch.equal(torch.ops.voxaug.coarse_shuffle(t, torch.from_numpy(boxes), torch.from_numpy(counts),
                                                       seed - (1 << 64), 7), got)


def test_permutations_uniform_and_errors():
    stats = pytest.importorskip("scipy.stats")
    n = 3000
    x = torch.arange(3, dtype=torch.float32).view(1, 1, 1, 1, 3).expand(n, 1, 1, 1, 3).contiguous()
    boxes = torch.tensor([[[0, 0, 0, 1, 1, 3]]]).expand(n, 1, 6).contiguous()
    counts = torch.ones(n, dtype=torch.int64)
    out = torch.ops.voxaug.coarse_shuffle(x, boxes, counts, 42, 0).view(n, 3).long().tolist()
    perms = {p: i for i, p in enumerate(itertools.permutations(range(3)))}
    hist = np.bincount([perms[tuple(r)] for r in out], minlength=6)
    assert stats.chisquare(hist).pvalue > 1e-3, hist
    x1 = torch.zeros(1, 1, 4, 4, 4)
    with pytest.raises(ValueError, match="inside the volume"):
        torch.ops.voxaug.coarse_shuffle(x1, torch.tensor([[[0, 0, 0, 5, 1, 1]]]), torch.tensor([1]), 0, 0)
    with pytest.raises(ValueError, match="counts"):
        torch.ops.voxaug.coarse_shuffle(x1, torch.tensor([[[0, 0, 0, 1, 1, 1]]]), torch.tensor([2]), 0, 0)
    with pytest.raises(ValueError, match="boxes must be"):
        torch.ops.voxaug.coarse_shuffle(x1, torch.zeros(1, 1, 5, dtype=torch.int64), torch.tensor([1]), 0, 0)


def _hole_mask(shape, boxes, counts):
    m = torch.zeros(shape, dtype=torch.bool)
    for n in range(shape[0]):
        for b in boxes[n, : int(counts[n])].tolist():
            m[n, :, b[0]:b[3], b[1]:b[4], b[2]:b[5]] = True
    return m


def test_transform_holes_follow_monai_rules():
    mt = pytest.importorskip("monai.transforms")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 2, 16, 17, 18, generator=g)
    t = RandCoarseShuffle(holes=2, spatial_size=(3, 4, 5), max_holes=4, max_spatial_size=(6, 7, 8), prob=1.0, seed=1)
    y = t(x)
    boxes, counts = t.last_boxes.numpy(), t.last_counts.numpy()
    assert ((counts >= 2) & (counts <= 4)).all()
    for n in range(4):
        for b in boxes[n, : counts[n]]:
            size = b[3:] - b[:3]
            assert (size >= (3, 4, 5)).all() and (size <= (6, 7, 8)).all()
    # Only hole voxels move; the whole result is the reference permutation of the op's tables.
    mask = _hole_mask(x.shape, boxes, counts)
    assert torch.equal(y[~mask], x[~mask]) and not torch.equal(y[mask], x[mask])
    # Each channel's hole voxels keep their values (a permutation within the union of holes).
    for n in range(4):
        for c in range(2):
            m = mask[n, c]
            assert torch.equal(y[n, c][m].sort().values, x[n, c][m].sort().values)
    # MONAI's own transform (its own holes) does the same kind of thing: values permuted within holes.
    m_t = mt.RandCoarseShuffle(holes=2, spatial_size=(3, 4, 5), max_holes=4, max_spatial_size=(6, 7, 8), prob=1.0)
    m_t.set_random_state(0)
    out = torch.as_tensor(m_t(x[0].clone()))
    moved = out != x[0]
    hole = torch.zeros_like(moved)
    for h in m_t.hole_coords:
        hole[h] = True
    assert not (moved & ~hole).any() and torch.equal(out[hole].sort().values, x[0][hole].sort().values)
    # prob 0: the input itself; the dictionary form shares the holes across keys.
    assert RandCoarseShuffle(holes=1, spatial_size=4, prob=0.0, seed=0)(x) is x
    d = RandCoarseShuffled(["a", "b"], holes=2, spatial_size=4, prob=1.0, seed=5)({"a": x, "b": x.clone()})
    assert torch.equal(d["a"], d["b"]) and not torch.equal(d["a"], x)


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    g = torch.Generator().manual_seed(2)
    x = torch.rand(3, 2, 12, 13, 14, generator=g)
    t_cpu = RandCoarseShuffle(holes=1, max_holes=5, spatial_size=2, max_spatial_size=9, prob=0.9, seed=8)
    t_dev = RandCoarseShuffle(holes=1, max_holes=5, spatial_size=2, max_spatial_size=9, prob=0.9, seed=8)
    ref = t_cpu(x)
    got = t_dev(x.to(device))
    assert torch.equal(got.cpu(), ref)
    if torch.device(device).type == "cuda":
        xd = x.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = t_dev(xd)
        assert out.is_cuda
