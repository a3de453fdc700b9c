"""TorchIO samplers (UniformSampler, WeightedSampler, LabelSampler) vs TorchIO's rules: the valid
centre region, the centre distribution against TorchIO's own probability maps
(clear_probability_borders, get_probabilities_from_label_map; chi-square with fixed seeds),
locations and patch contents, TorchIO's errors, ch2 + aal."""
import os

import numpy as np
import pytest
import torch

from voxaug import crop as C

from conftest import TEMPLATES, devices

tio = pytest.importorskip("torchio")
stats = pytest.importorskip("scipy.stats")


def _subject(shape=(1, 1, 9, 10, 11), seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.randn(shape, generator=g)
    return {"image": img, "name": "s0"}


def _centres(sampler, subject, n):
    locs = torch.stack([p["location"] for p in sampler(subject, num_patches=n)])  # (n, N, 6)
    half = torch.tensor([p // 2 for p in sampler.patch_size])
    return locs[..., :3] + half, locs


def _check_patches(sampler, subject, n=5):
    for p in sampler(subject, num_patches=n):
        for m, loc in enumerate(p["location"].tolist()):
            sl = tuple(slice(a, b) for a, b in zip(loc[:3], loc[3:]))
            for k, v in subject.items():
                if isinstance(v, torch.Tensor):
                    assert torch.equal(p[k][m], v[m][(slice(None),) + sl])
        assert p["name"] == subject["name"]


@pytest.mark.parametrize("device", devices())
def test_uniform_sampler_range_and_uniformity(device):
    sub = _subject((2, 1, 9, 10, 11))
    sub = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in sub.items()}
    s = C.UniformSampler((4, 10, 3), seed=1)
    _, locs = _centres(s, sub, 1200)
    ini = locs[..., :3].reshape(-1, 3).cpu()
    # TorchIO: index_ini uniform in [0, size - patch] per axis
    assert ini[:, 0].min() == 0 and ini[:, 0].max() == 5 and bool((ini[:, 1] == 0).all())
    assert ini[:, 2].min() == 0 and ini[:, 2].max() == 8
    assert stats.chisquare(np.bincount(ini[:, 2].numpy(), minlength=9)).pvalue > 1e-3
    # TorchIO's own sampler covers the same range
    t_sub = tio.Subject(image=tio.ScalarImage(tensor=sub["image"][0].cpu()))
    t_ini = np.array([p[tio.LOCATION][:3].numpy() for p in tio.UniformSampler((4, 10, 3))(t_sub, num_patches=300)])
    assert t_ini[:, 0].min() == 0 and t_ini[:, 0].max() == 5 and t_ini[:, 2].max() == 8
    _check_patches(s, sub)


def _torchio_expected(prob: np.ndarray, patch) -> np.ndarray:
    """TorchIO's sampling distribution: the map with its borders cleared, normalised."""
    p = prob.astype(np.float64).copy()
    tio.WeightedSampler.clear_probability_borders(p, np.array(patch, dtype=np.uint16))
    return p / p.sum()


@pytest.mark.parametrize("device", devices())
def test_weighted_sampler_follows_torchio_distribution(device):
    g = torch.Generator().manual_seed(2)
    prob = torch.randint(0, 4, (1, 1, 6, 7, 5), generator=g).float()
    prob[0, 0, 3, 3, 2] = 10
    patch = (3, 4, 2)
    sub = {"image": torch.randn(1, 2, 6, 7, 5, generator=g).to(device), "w": prob.to(device), "name": "s0"}
    s = C.WeightedSampler(patch, "w", seed=3)
    centres, _ = _centres(s, sub, 4000)
    c = centres.reshape(-1, 3).cpu().numpy()
    expected = _torchio_expected(prob[0, 0].numpy(), patch)
    counts = np.zeros(expected.shape)
    np.add.at(counts, (c[:, 0], c[:, 1], c[:, 2]), 1)
    assert counts[expected == 0].sum() == 0  # border and zero-probability voxels never drawn
    e = expected[expected > 0]
    res = stats.chisquare(counts[expected > 0], e * counts.sum())
    assert res.pvalue > 1e-3, res
    _check_patches(s, sub)


def test_weighted_sampler_errors_like_torchio():
    sub = _subject()
    neg = torch.ones(1, 1, 9, 10, 11)
    neg[0, 0, 0, 0, 0] = -1
    with pytest.raises(ValueError, match="Negative values"):
        next(iter(tio.WeightedSampler(3, "w")(tio.Subject(w=tio.ScalarImage(tensor=neg[0])))))
    with pytest.raises(ValueError, match="Negative values"):
        next(C.WeightedSampler(3, "w")({**sub, "w": neg}))
    border = torch.zeros(1, 1, 9, 10, 11)
    border[0, 0, 0, 5, 5] = 1  # only on the border: cleared
    with pytest.raises(RuntimeError, match="Empty probability map"):
        next(iter(tio.WeightedSampler(3, "w")(tio.Subject(w=tio.ScalarImage(tensor=border[0])))))
    with pytest.raises(RuntimeError, match="Empty probability map"):
        next(C.WeightedSampler(3, "w")({**sub, "w": border}))
    with pytest.raises(KeyError, match="not found"):
        next(C.WeightedSampler(3, "missing")(sub))
    with pytest.raises(RuntimeError, match="cannot be larger"):
        next(C.UniformSampler((10, 1, 1))(sub))
    with pytest.raises(ValueError, match="positive integers"):
        C.UniformSampler((0, 2, 2))
    with pytest.raises(ValueError, match="share N and the spatial shape"):
        next(C.UniformSampler(2)({"a": torch.ones(1, 1, 4, 4, 4), "b": torch.ones(1, 1, 4, 4, 5)}))
    # check=False: no host read, an empty map draws uniformly in the valid region
    p = next(C.WeightedSampler(3, "w", check=False, seed=1)({**sub, "w": border}))
    ini = p["location"][0, :3]
    assert bool((ini >= 0).all()) and bool((ini <= torch.tensor([6, 7, 8])).all())


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("probs", [{0: 1, 1: 2, 2: 1, 5: 3}, {1: 1, 3: 1}, None])
def test_label_sampler_follows_torchio_distribution(device, probs):
    g = torch.Generator().manual_seed(4)
    lab = torch.randint(0, 4, (1, 1, 7, 8, 6), generator=g)
    lab[lab == 3] = 0
    lab[0, 0, 0, 0, 0] = 3  # class 3 only on the border: TorchIO skips it
    patch = (3, 2, 4)
    sub = {"image": torch.randn(1, 1, 7, 8, 6, generator=g).to(device), "label": lab.to(device), "name": "s0"}
    s = C.LabelSampler(patch, "label", probs, seed=5)
    centres, _ = _centres(s, sub, 3000)
    c = centres.reshape(-1, 3).cpu().numpy()
    lab_t = lab[0].float()
    if probs is None:
        pmap = (lab_t > 0).float()
    else:
        pmap = tio.LabelSampler.get_probabilities_from_label_map(lab_t, probs, np.array(patch, dtype=np.uint16))
    expected = _torchio_expected(pmap[0].numpy(), patch)
    counts = np.zeros(expected.shape)
    np.add.at(counts, (c[:, 0], c[:, 1], c[:, 2]), 1)
    assert counts[expected == 0].sum() == 0
    res = stats.chisquare(counts[expected > 0], expected[expected > 0] * counts.sum())
    assert res.pvalue > 1e-3, res
    _check_patches(s, sub)


def test_label_sampler_multichannel_and_errors():
    g = torch.Generator().manual_seed(6)
    onehot = (torch.rand(1, 3, 8, 9, 7, generator=g) < 0.1).float()
    patch = (2, 3, 3)
    probs = {0: 1, 2: 3}
    s = C.LabelSampler(patch, "seg", probs, seed=1)
    centres, _ = _centres(s, {"seg": onehot, "name": "x"}, 3000)
    c = centres.reshape(-1, 3).numpy()
    pmap = tio.LabelSampler.get_probabilities_from_label_map(onehot[0], probs, np.array(patch, dtype=np.uint16))
    expected = _torchio_expected(pmap[0].numpy(), patch)
    counts = np.zeros(expected.shape)
    np.add.at(counts, (c[:, 0], c[:, 1], c[:, 2]), 1)
    assert counts[expected == 0].sum() == 0
    assert stats.chisquare(counts[expected > 0], expected[expected > 0] * counts.sum()).pvalue > 1e-3
    empty = {"label": torch.zeros(1, 1, 8, 9, 7, dtype=torch.uint8), "name": "x"}
    with pytest.raises(RuntimeError, match="Empty probability map"):
        next(C.LabelSampler(patch)(empty))
    with pytest.raises(ValueError, match="label_probabilities"):
        C.LabelSampler(patch, "label", {-1: 1})
    with pytest.raises(ValueError, match="not all be 0"):
        C.LabelSampler(patch, "label", {1: 0})
    with pytest.raises(ValueError, match="not a channel"):
        next(C.LabelSampler(patch, "seg", {5: 1})({"seg": onehot}))


def test_samplers_infinite_stream_and_blocks():
    sub = _subject((1, 1, 20, 21, 22))
    s = C.UniformSampler(4, seed=9)
    it = s(sub)  # num_patches None: endless, drawn in blocks
    locs = [next(it)["location"] for _ in range(40)]
    assert len({tuple(x[0].tolist()) for x in locs}) > 30
    s2 = C.UniformSampler(4, seed=9)
    first = [p["location"] for p in s2(sub, num_patches=40)]
    assert all(torch.equal(a, b) for a, b in zip(locs, first))  # independent of the block split


def test_label_sampler_on_ch2_aal():
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    img = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.float32))[None, None]
    lab = torch.from_numpy(np.asarray(nib.load(os.path.join(TEMPLATES, "aal.nii.gz")).dataobj).astype(np.int16))[None,
                                                                                                                 None]
    probs = {0: 1, 37: 2, 38: 2}  # background and the two hippocampi (AAL 37, 38)
    s = C.LabelSampler(96, "label", probs, seed=2)
    for p in s({"image": img, "label": lab}, num_patches=6):
        loc = p["location"][0]
        centre = (loc[:3] + 48).tolist()
        assert all(48 <= c <= sz - 48 for c, sz in zip(centre, lab.shape[2:]))
        assert int(lab[0, 0][tuple(centre)]) in probs
        assert p["image"].shape == (1, 1, 96, 96, 96)
        sl = tuple(slice(a, b) for a, b in zip(loc[:3].tolist(), loc[3:].tolist()))
        assert torch.equal(p["label"][0], lab[0][(slice(None),) + sl])


@pytest.mark.parametrize("device", devices())
def test_label_sampler_check_false(device):
    """check=False (no host read of the class counts): the same draws as check=True where
    TorchIO's rule is met; where it is not (TorchIO raises) a present class is drawn uniformly,
    then one of its voxels in the valid region uniformly. Reference: that distribution built by
    counting the label's voxels; patches against slices of the volumes."""
    g = torch.Generator().manual_seed(8)
    patch = (3, 4, 2)
    lab = torch.randint(0, 3, (1, 1, 7, 8, 6), generator=g)
    sub = {"image": torch.randn(1, 2, 7, 8, 6, generator=g).to(device), "label": lab.to(device), "name": "s0"}
    on = C.LabelSampler(patch, "label", {1: 1, 2: 3}, seed=4)
    off = C.LabelSampler(patch, "label", {1: 1, 2: 3}, check=False, seed=4)
    a, _ = _centres(on, sub, 50)
    b, _ = _centres(off, sub, 50)
    assert torch.equal(a, b)
    inner = np.zeros(lab.shape[2:], dtype=bool)
    inner[tuple(slice(p // 2, s - (p - 1) // 2) for p, s in zip(patch, lab.shape[2:]))] = True
    cases = [
        # probabilities None on an all-background label: foreground absent, background drawn
        (torch.zeros_like(lab), None),
        # classes 0 and 2 in the valid region, 1 only on the border; ask for 1 (and an absent 5)
        (torch.where(lab == 1, 2, lab).index_put_((torch.tensor([0]), torch.tensor([0]), torch.tensor([0]),
                                                   torch.tensor([0]), torch.tensor([0])), torch.tensor(1)),
         {1: 1, 5: 2}),
    ]
    for label, probs in cases:
        t_sub = tio.Subject(label=tio.LabelMap(tensor=label[0]))
        with pytest.raises(RuntimeError):  # TorchIO: an empty probability map
            next(iter(tio.LabelSampler(patch, "label", probs)(t_sub)))
        s_sub = {**sub, "label": label.to(device)}
        with pytest.raises(RuntimeError, match="Empty probability map"):
            next(C.LabelSampler(patch, "label", probs)(s_sub))
        s = C.LabelSampler(patch, "label", probs, check=False, seed=6)
        centres, _ = _centres(s, s_sub, 3000)
        c = centres.reshape(-1, 3).cpu().numpy()
        lab_np = label[0, 0].numpy()
        if probs is None:  # the foreground / background classes
            classes = [inner & (lab_np > 0), inner & (lab_np == 0)]
        else:
            classes = [inner & (lab_np == k) for k in range(int(lab_np.max()) + 1)]
        present = [m for m in classes if m.any()]
        expected = np.zeros(lab_np.shape)
        for m in present:
            expected[m] += 1.0 / len(present) / m.sum()
        counts = np.zeros(lab_np.shape)
        np.add.at(counts, (c[:, 0], c[:, 1], c[:, 2]), 1)
        assert counts[expected == 0].sum() == 0
        assert stats.chisquare(counts[expected > 0], expected[expected > 0] * counts.sum()).pvalue > 1e-3
        _check_patches(s, s_sub)


@pytest.mark.parametrize("device", devices())
def test_samplers_on_a_size_one_axis_and_few_candidates(device):
    """A volume with a size-1 axis and patches of size 1 along it; a weight map and a label with
    two candidate voxels and many more patches than that: every patch is the volume cut at its
    location, every centre on a candidate, both candidates drawn (TorchIO's rules)."""
    g = torch.Generator().manual_seed(2)
    img = torch.randn(1, 1, 12, 1, 14, generator=g).to(device)
    lab = torch.zeros(1, 1, 12, 1, 14, dtype=torch.int16)
    lab[0, 0, 4, 0, 5] = 1
    lab[0, 0, 8, 0, 9] = 1
    sub = {"img": img, "label": lab.to(device), "w": lab.float().to(device)}
    patch = (3, 1, 4)
    for s in (C.LabelSampler(patch, "label", {1: 1}, seed=1), C.WeightedSampler(patch, "w", seed=1)):
        seen = set()
        for p in s(sub, num_patches=40):
            loc = p["location"][0].tolist()
            assert loc[1] == 0 and loc[4] == 1
            assert torch.equal(p["img"][0].cpu(), img[0, :, loc[0]:loc[3], :, loc[2]:loc[5]].cpu())
            centre = (loc[0] + patch[0] // 2, 0, loc[2] + patch[2] // 2)
            assert centre in {(4, 0, 5), (8, 0, 9)}, (type(s).__name__, centre)
            seen.add(centre)
        assert len(seen) == 2


@pytest.mark.parametrize("form", ["tensors", "tio.Subject"])
def test_samplers_take_torchio_subjects_of_4d_images(form):
    """A subject of (C, D, H, W) tensors, or a tio.Subject, gives TorchIO's patch form: (C,
    *patch) tensors cut at the (6,) location; PatchQueue takes tio.Subjects too."""
    tio = pytest.importorskip("torchio")
    g = torch.Generator().manual_seed(6)
    img = torch.rand(1, 14, 12, 10, generator=g)
    lab = (torch.rand(1, 14, 12, 10, generator=g) > 0.7).to(torch.int16)
    subject = {"img": img, "seg": lab, "id": 3}
    if form == "tio.Subject":
        subject = tio.Subject(img=tio.ScalarImage(tensor=img), seg=tio.LabelMap(tensor=lab), id=3)
    for sampler in (C.UniformSampler(5, seed=1), C.LabelSampler(5, "seg", seed=2),
                    C.WeightedSampler(5, "img", seed=3)):
        patches = list(sampler(subject, num_patches=6))
        assert len(patches) == 6
        for p in patches:
            loc = p["location"].tolist()
            assert p["img"].shape == (1, 5, 5, 5) and p["location"].shape == (6,) and p["id"] == 3
            sl = (slice(None),) + tuple(slice(a, b) for a, b in zip(loc[:3], loc[3:]))
            assert torch.equal(p["img"], img[sl]) and torch.equal(p["seg"], lab[sl])
            if isinstance(sampler, C.LabelSampler):
                assert lab[(0,) + tuple(a + 2 for a in loc[:3])] > 0  # the centre is labelled
    q = C.PatchQueue([subject, subject], 4, 2, C.UniformSampler(5, seed=1), batch_size=2, seed=0)
    batch = next(iter(q))
    assert batch["img"].shape == (2, 1, 5, 5, 5) and batch["id"] == [3, 3]
