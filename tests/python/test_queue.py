"""voxaug.crop.PatchQueue vs TorchIO's Queue: the same length (iterations per epoch, with and
without per-subject num_samples), the same order of subjects across fills without shuffling,
the same patches per volume per epoch with shuffling; batches, locations, the transform."""
import pytest
import torch

from voxaug import crop as C
from voxaug import spatial as S

from conftest import devices

tio = pytest.importorskip("torchio")


def _volumes(n=5, shape=(1, 8, 9, 10)):
    return [torch.full(shape, float(i)) for i in range(n)]


def _torchio_queue(vols, max_length, spv, shuffle, num_samples=None):
    subs = []
    for i, v in enumerate(vols):
        kw = {} if num_samples is None else {"num_samples": num_samples[i]}
        subs.append(tio.Subject(img=tio.ScalarImage(tensor=v), **kw))
    return tio.Queue(tio.SubjectsDataset(subs), max_length, spv, tio.UniformSampler(4), num_workers=0,
                     shuffle_subjects=shuffle, shuffle_patches=shuffle)


def _voxaug_queue(vols, max_length, spv, shuffle, num_samples=None, device=None, **kw):
    subs = [{"img": v, "id": i, **({} if num_samples is None else {"num_samples": num_samples[i]})}
            for i, v in enumerate(vols)]
    return C.PatchQueue(subs, max_length, spv, C.UniformSampler(4, seed=1), shuffle_subjects=shuffle,
                        shuffle_patches=shuffle, device=device, seed=3, **kw)


@pytest.mark.parametrize("max_length,spv,num_samples", [(7, 3, None), (4, 4, None), (10, 2, [1, 5, 2, 3, 4]),
                                                       (5, 5, None), (1, 1, None)])
def test_order_and_length_match_torchio_without_shuffling(max_length, spv, num_samples):
    vols = _volumes()
    tq = _torchio_queue(vols, max_length, spv, False, num_samples)
    vq = _voxaug_queue(vols, max_length, spv, False, num_samples)
    assert len(vq) == len(tq)
    n = 2 * len(tq) + 3  # two epochs and a bit: fills spanning passes over the subjects
    t_ids = [int(tq[i]["img"].data.flatten()[0]) for i in range(n)]
    v_ids = [int(vq[0]["img"].flatten()[0]) for _ in range(n)]
    assert v_ids == t_ids


# Fills that end on a pass boundary (every subject sampled once per epoch): then each epoch holds
# exactly samples_per_volume patches of every volume, in TorchIO and in voxaug.
@pytest.mark.parametrize("max_length,spv", [(15, 3), (6, 2)])
def test_patches_per_volume_match_torchio_with_shuffling(max_length, spv):
    vols = _volumes()
    tq = _torchio_queue(vols, max_length, spv, True)
    vq = _voxaug_queue(vols, max_length, spv, True)
    torch.manual_seed(0)
    for epoch in range(3):
        t_ids = [int(tq[i]["img"].data.flatten()[0]) for i in range(len(tq))]
        v_ids = [int(p["img"].flatten()[0]) for p in (vq[0] for _ in range(len(vq)))]
        t_counts = torch.bincount(torch.tensor(t_ids), minlength=5).tolist()
        v_counts = torch.bincount(torch.tensor(v_ids), minlength=5).tolist()
        assert v_counts == t_counts == [spv] * 5
        assert v_ids != sorted(v_ids)  # shuffled


@pytest.mark.parametrize("device", devices())
def test_batches_locations_and_transform(device):
    vols = [torch.arange(8 * 9 * 10, dtype=torch.float32).reshape(1, 8, 9, 10) + 1000 * i for i in range(3)]
    flip = S.Flipd(["img"], spatial_axis=0)
    vq = _voxaug_queue(vols, 5, 3, True, device=device, batch_size=4, transform=flip)
    batches = list(vq)
    assert [b["img"].shape[0] for b in batches] == [4, 4, 1]  # 9 patches per epoch
    for b in batches:
        assert b["img"].device.type == device and b["location"].shape == (b["img"].shape[0], 6)
        for j in range(b["img"].shape[0]):
            i = b["id"][j]
            loc = b["location"][j].tolist()
            sl = tuple(slice(a, c) for a, c in zip(loc[:3], loc[3:]))
            ref = torch.flip(vols[i][(slice(None),) + sl], dims=[1])
            assert torch.equal(b["img"][j].cpu(), ref)
    vq = _voxaug_queue(vols, 5, 3, False, batch_size=4, drop_last=True)
    assert [b["img"].shape[0] for b in vq] == [4, 4]


def test_bad_arguments():
    vols = _volumes(2)
    with pytest.raises(ValueError, match="max_length"):
        _voxaug_queue(vols, 0, 3, False)
    with pytest.raises(TypeError, match="sampler"):
        C.PatchQueue([{"img": vols[0]}], 3, 1, tio.UniformSampler(4))
    with pytest.raises(ValueError, match="num_samples"):
        _voxaug_queue(vols, 3, 1, False, num_samples=[0, 1])
    with pytest.raises(ValueError, match="subjects must not be empty"):
        C.PatchQueue([], 3, 1, C.UniformSampler(2))
    # samples_per_volume > max_length: TorchIO's islice fails on the negative count; voxaug
    # holds a subject's remainder over several fills
    q = _voxaug_queue(vols, 2, 5, False)
    assert [int(q[0]["img"].flatten()[0]) for _ in range(10)] == [0] * 5 + [1] * 5
    with pytest.raises(ValueError, match=r"\(1, C, D, H, W\)"):
        C.PatchQueue([{"img": torch.ones(2, 1, 4, 4, 4)}], 3, 1, C.UniformSampler(2))
