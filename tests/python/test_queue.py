"""voxaug.crop.PatchQueue vs TorchIO's Queue: the same length (iterations per epoch, with and
without per-subject num_samples), the same order of subjects across fills without shuffling,
the same patches per volume per epoch with shuffling; batches, locations, the transform; image +
label (+ probability map) subjects through LabelSampler and WeightedSampler: every patch is the
volume cut at its recorded location (an image that encodes its coordinates), the centres follow
TorchIO's label / weight rules (chi-square with fixed seeds), LabelSampler(check=False)."""
import numpy as np
import pytest
import torch

from voxaug import crop as C
from voxaug import spatial as S

from conftest import devices

tio = pytest.importorskip("torchio")
stats = pytest.importorskip("scipy.stats")


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


@pytest.mark.parametrize("device", devices())
def test_batches_mix_subjects_of_different_sizes_and_layouts(device):
    """Subjects of different sizes and memory layouts (one d-fastest, as nibabel loads) with a
    float image and a bool mask: each batch mixes subjects, and every patch equals its subject
    sliced at its location; the queue holds locations, not patch tensors."""
    g = torch.Generator().manual_seed(4)
    subs = []
    for i, shape in enumerate([(9, 10, 11), (12, 8, 9), (8, 8, 8), (10, 13, 8)]):
        img = torch.randn((1,) + shape, generator=g) + 100 * i
        if i == 1:
            img = img.permute(0, 3, 2, 1).contiguous().permute(0, 3, 2, 1)
        subs.append({"img": img, "mask": img > 100 * i, "id": i})
    q = C.PatchQueue(subs, 8, 3, C.UniformSampler((4, 5, 3), seed=2), batch_size=5, device=device, seed=1)
    mixed = 0
    for batch in q:
        assert batch["mask"].dtype == torch.bool and batch["img"].device.type == device
        mixed += len(set(batch["id"])) > 1
        for j, i in enumerate(batch["id"]):
            loc = batch["location"][j].tolist()
            sl = (slice(None), slice(None)) + tuple(slice(a, c) for a, c in zip(loc[:3], loc[3:]))
            for k in ("img", "mask"):
                assert torch.equal(batch[k][j:j + 1].cpu(), subs[i][k][None][sl]), (k, i, loc)
        assert not any(isinstance(v, torch.Tensor) and v.dim() == 5 for e in q.patches_list for v in e)
    assert mixed >= 2
    one = q[0]
    assert one["img"].shape == (1, 1, 4, 5, 3) and isinstance(one["id"], int)


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


# ---------------- image + label subjects through the queue ----------------
# An image whose value encodes (subject, d, h, w), exact in float32, so a patch says where it
# was cut; a label of classes 0..3 (class 3 only on the border: outside TorchIO's valid region).
_SHAPE = (11, 12, 10)


def _coded_subjects(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    d, h, w = torch.meshgrid(*(torch.arange(s) for s in _SHAPE), indexing="ij")
    subs = []
    for i in range(n):
        img = (i * 1_000_000 + d * 10_000 + h * 100 + w).float()[None]
        lab = torch.randint(0, 3, (1,) + _SHAPE, generator=g, dtype=torch.int16)
        lab[0, 0, 0, 0] = 3
        prob = torch.rand((1,) + _SHAPE, generator=g) * (lab > 0)  # weights on classes 1, 2 only
        subs.append({"img": img, "label": lab, "prob": prob, "id": i})
    return subs


def _check_aligned(batch, subs, keys=("img", "label", "prob")):
    """Every patch of the batch is its subject's volume sliced at the recorded location, for
    every tensor key: image and label (and map) patches come from the same place. Returns the
    (subject, centre) pairs, centre = location start + patch // 2 (TorchIO's)."""
    out = []
    for j in range(batch["img"].shape[0]):
        i = batch["id"][j]
        loc = batch["location"][j].tolist()
        sl = (slice(None),) + tuple(slice(a, c) for a, c in zip(loc[:3], loc[3:]))
        for k in keys:
            assert torch.equal(batch[k][j].cpu(), subs[i][k][sl]), (k, i, loc)
        # the image's code names the same voxel as the location
        code = int(batch["img"][j, 0, 0, 0, 0])
        assert (code // 1_000_000, code // 10_000 % 100, code // 100 % 100, code % 100) == (i, *loc[:3])
        size = [c - a for a, c in zip(loc[:3], loc[3:])]
        out.append((i, tuple(a + s // 2 for a, s in zip(loc[:3], size))))
    return out


def _expected_class_freq(subs, probs, patch):
    """TorchIO's class frequencies of the patch centres over a pass in which every subject gives
    the same number of patches: the mean over subjects of the per-class sums of TorchIO's
    LabelSampler.get_probabilities_from_label_map, normalised."""
    freq = np.zeros(4)
    for s in subs:
        pmap = tio.LabelSampler.get_probabilities_from_label_map(s["label"].float(), probs,
                                                                 np.array(patch, dtype=np.uint16))[0].numpy()
        lab = s["label"][0].numpy()
        freq += [pmap[lab == c].sum() / pmap.sum() for c in range(4)]
    return freq / len(subs)


@pytest.mark.parametrize("device", devices())
def test_label_sampler_queue_patches_line_up_and_follow_torchio(device):
    subs = _coded_subjects()
    patch = (5, 4, 3)
    probs = {0: 1, 1: 2, 2: 1, 3: 5}  # 3 only on the border: never drawn (TorchIO)
    vq = C.PatchQueue(subs, 6, 4, C.LabelSampler(patch, "label", probs, seed=2), batch_size=5, device=device,
                      seed=4)
    centres = []
    for epoch in range(25):
        for b in vq:
            assert b["img"].device.type == device and b["label"].dtype == torch.int16
            assert b["img"].shape[1:] == (1,) + patch and b["label"].shape[1:] == (1,) + patch
            centres += _check_aligned(b, subs)
    assert len(centres) == 25 * len(vq) == 25 * 12
    per_subject = np.bincount([i for i, _ in centres], minlength=3)
    assert per_subject.tolist() == [25 * 4] * 3  # samples_per_volume of each subject per epoch
    cls = np.array([int(subs[i]["label"][(0,) + c]) for i, c in centres])
    expected = _expected_class_freq(subs, probs, patch)
    assert expected[3] == 0 and (cls == 3).sum() == 0
    counts = np.bincount(cls, minlength=4)[:3]
    e = expected[:3] / expected[:3].sum()  # TorchIO's map is float32: renormalise in float64
    assert stats.chisquare(counts, e * counts.sum()).pvalue > 1e-3
    # TorchIO's own queue, same subjects and sampler: its patches line up by the same rule
    t_subs = [tio.Subject(img=tio.ScalarImage(tensor=s["img"]), label=tio.LabelMap(tensor=s["label"]),
                          prob=tio.ScalarImage(tensor=s["prob"]), id=s["id"]) for s in subs]
    tq = tio.Queue(tio.SubjectsDataset(t_subs), 6, 4, tio.LabelSampler(patch, "label", probs), num_workers=0)
    assert len(tq) == len(vq)
    for i in range(len(tq)):
        p = tq[i]
        _check_aligned({"img": p["img"].data[None], "label": p["label"].data[None], "prob": p["prob"].data[None],
                        "id": [p["id"]], "location": p[tio.LOCATION][None]}, subs)


@pytest.mark.parametrize("device", devices())
def test_weighted_sampler_queue_patches_line_up(device):
    subs = _coded_subjects(seed=1)
    patch = (3, 5, 4)
    vq = C.PatchQueue(subs, 5, 3, C.WeightedSampler(patch, "prob", seed=6), batch_size=4, device=device, seed=7)
    centres = []
    for epoch in range(10):
        for b in vq:
            centres += _check_aligned(b, subs)
    assert len(centres) == 10 * 9
    for i, c in centres:
        # TorchIO's rule: a centre on a voxel of positive probability inside the cleared borders
        expected = _torchio_weighted(subs[i]["prob"][0].numpy(), patch)
        assert expected[c] > 0, (i, c)
        assert int(subs[i]["label"][(0,) + c]) in (1, 2)  # the map is zero on class 0


def _torchio_weighted(prob, patch):
    p = prob.astype(np.float64).copy()
    tio.WeightedSampler.clear_probability_borders(p, np.array(patch, dtype=np.uint16))
    return p


def test_label_sampler_check_false_in_queue():
    """check=False skips the host read of the class counts: the same draws as check=True where
    TorchIO's rule is met; where no labelled voxel of positive probability is in the valid region
    (TorchIO and check=True raise) it draws a present class uniformly, then a voxel of it
    uniformly (the reference distribution below, built from the label by counting)."""
    subs = _coded_subjects(2, seed=3)
    patch = (3, 3, 3)
    probs = {1: 1, 2: 1}
    a = [b for b in C.PatchQueue(subs, 4, 4, C.LabelSampler(patch, "label", probs, seed=1), shuffle_subjects=False,
                                 shuffle_patches=False, batch_size=8)]
    b = [b for b in C.PatchQueue(subs, 4, 4, C.LabelSampler(patch, "label", probs, check=False, seed=1),
                                 shuffle_subjects=False, shuffle_patches=False, batch_size=8)]
    assert all(torch.equal(x["location"], y["location"]) and torch.equal(x["label"], y["label"]) for x, y in zip(a, b))
    # labels 0 and 2 in the valid region, 3 on the border; ask for 1 and 3 only
    lab = subs[0]["label"].clone()
    lab[lab == 1] = 2
    sub = {**subs[0], "label": lab}
    absent = {1: 1, 3: 4}
    t_sub = tio.Subject(label=tio.LabelMap(tensor=lab))
    with pytest.raises(RuntimeError):  # TorchIO: an empty probability map
        next(iter(tio.LabelSampler(patch, "label", absent)(t_sub)))
    with pytest.raises(RuntimeError, match="Empty probability map"):
        next(C.LabelSampler(patch, "label", absent)({k: v[None] for k, v in sub.items() if k != "id"}))
    vq = C.PatchQueue([sub], 50, 50, C.LabelSampler(patch, "label", absent, check=False, seed=8), batch_size=50,
                      seed=9)
    centres = []
    for epoch in range(40):
        for bt in vq:
            centres += _check_aligned(bt, [sub])
    inner = np.zeros(_SHAPE, dtype=bool)
    inner[1:-1, 1:-1, 1:-1] = True  # TorchIO's valid region for a 3^3 patch
    l0 = lab[0].numpy()
    present = [c for c in range(4) if (inner & (l0 == c)).any()]
    assert present == [0, 2]
    expected = np.zeros(_SHAPE)
    for c in present:
        m = inner & (l0 == c)
        expected[m] = 1.0 / len(present) / m.sum()
    counts = np.zeros(_SHAPE)
    for _, c in centres:
        counts[c] += 1
    assert counts[expected == 0].sum() == 0
    cls = np.bincount([int(l0[c]) for _, c in centres], minlength=4)
    assert stats.chisquare(cls[present], [counts.sum() / 2] * 2).pvalue > 1e-3
    assert stats.chisquare(counts[expected > 0], expected[expected > 0] * counts.sum()).pvalue > 1e-3


@pytest.mark.parametrize("device", devices())
def test_queue_on_ch2_and_aal(device):
    """The real volumes (mricron-data): two subjects, ch2 with the AAL atlas and the same flipped,
    through LabelSampler on the atlas's brain mask (background 1, brain 4): every image and label
    patch is its volume cut at the recorded location, and the centres' brain fraction follows
    TorchIO's LabelSampler probabilities (chi-square over 3 epochs)."""
    from conftest import load_template

    img, _ = load_template("ch2.nii.gz")
    aal, _ = load_template("aal.nii.gz")
    img, mask = img[:, ::3, ::3, ::3].float().contiguous(), (aal[:, ::3, ::3, ::3] > 0).to(torch.int16).contiguous()
    subs = [{"img": img, "label": mask, "id": 0},
            {"img": img.flip(1).contiguous(), "label": mask.flip(1).contiguous(), "id": 1}]
    patch, probs = (16, 16, 16), {0: 1, 1: 4}
    vq = C.PatchQueue(subs, 8, 16, C.LabelSampler(patch, "label", probs, seed=5), batch_size=4, device=device,
                      seed=2)
    brain = 0
    n = 0
    for _ in range(3):
        for b in vq:
            for j in range(b["img"].shape[0]):
                i, loc = b["id"][j], b["location"][j].tolist()
                sl = (slice(None),) + tuple(slice(a, c) for a, c in zip(loc[:3], loc[3:]))
                assert torch.equal(b["img"][j].cpu(), subs[i]["img"][sl])
                assert torch.equal(b["label"][j].cpu(), subs[i]["label"][sl])
                centre = tuple(a + s // 2 for a, s in zip(loc[:3], patch))
                brain += int(subs[i]["label"][(0,) + centre])
                n += 1
    assert n == 3 * len(vq) == 3 * 32
    freq = _expected_class_freq([{"label": s["label"]} for s in subs], probs, patch)
    p_brain = freq[1] / freq[:2].sum()
    assert 0.5 < p_brain < 1.0
    assert stats.binomtest(brain, n, p_brain).pvalue > 1e-3
