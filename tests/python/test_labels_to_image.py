"""TorchIO RandomLabelsToImage (voxaug.labels): exact against TorchIO where the draws are
degenerate (std 0, fixed means), for label maps, one-hot and probability maps, used_labels,
ignore_background, discretize and the original image showing through; the random part by
statistics (each label's voxels N(mean_k, std_k), means and stds uniform over their ranges) and
determinism; bad inputs; the device path against the CPU and without host syncs."""
import numpy as np
import pytest
import torch

from conftest import devices, sync_is_error
from voxaug.labels import RandomLabelsToImage

tio = pytest.importorskip("torchio")

RNG = np.random.default_rng(11)
LABEL_MAP = torch.from_numpy(RNG.integers(0, 4, (1, 10, 11, 12)))
ORIGINAL = torch.from_numpy(RNG.random((1, 10, 11, 12)).astype(np.float32))
ONE_HOT = torch.nn.functional.one_hot(LABEL_MAP[0], 4).permute(3, 0, 1, 2).float()
_p = torch.from_numpy(RNG.random((4, 10, 11, 12)).astype(np.float32))
PROBS = _p / (_p.sum(0, keepdim=True) * 1.3)  # sums of 1 / 1.3: some voxels below 0.5 once channels drop


def torchio_image(lab, kw, original):
    d = {"label": tio.LabelMap(tensor=lab.clone())}
    if original is not None:
        d["image_from_labels"] = tio.ScalarImage(tensor=original.clone())
    return tio.RandomLabelsToImage(label_key="label", **kw)(tio.Subject(**d))["image_from_labels"].data


@pytest.mark.parametrize("name", ["label map", "one-hot", "probabilities"])
@pytest.mark.parametrize("kw", [dict(mean=[0.1, 0.5, 0.7, 1.0], std=[0, 0, 0, 0]),
                                dict(mean=[0.1, (0.5, 0.5), 0.7, 1.0], std=[0, 0, 0, 0], discretize=True),
                                dict(default_mean=0.4, default_std=0.0, used_labels=[1, 3]),
                                dict(default_mean=0.4, default_std=0.0, used_labels=[0, 2], ignore_background=True),
                                dict(mean=[0.1, 0.5, 0.7, 1.0], std=[0, 0, 0, 0], ignore_background=True)])
@pytest.mark.parametrize("with_original", [False, True])
def test_equals_torchio_without_noise(name, kw, with_original):
    lab = {"label map": LABEL_MAP, "one-hot": ONE_HOT, "probabilities": PROBS}[name]
    original = ORIGINAL if with_original else None
    ref = torchio_image(lab, kw, original)
    data = {"label": lab} if original is None else {"label": lab, "image_from_labels": original}
    got = RandomLabelsToImage(label_key="label", seed=0, **kw)(data)["image_from_labels"]
    assert got.dtype == torch.float32 and got.shape == ref.shape
    assert torch.equal(got, ref)
    # The tensor call: the label map alone, the original as `image`.
    assert torch.equal(RandomLabelsToImage(seed=1, **kw)(lab, image=original), ref)
    # A batch: each sample as TorchIO makes it alone.
    batch = torch.stack([lab, lab.flip(-1)])
    orig_b = None if original is None else torch.stack([original, original.flip(-2)])
    got = RandomLabelsToImage(seed=2, **kw)(batch, image=orig_b)
    for i in range(2):
        assert torch.equal(got[i], torchio_image(batch[i], kw, None if orig_b is None else orig_b[i]))


def test_label_statistics_and_draws():
    """Each label's voxels are N(mean_k, std_k) with the sample's draws; the draws are uniform over
    their ranges across a batch; a fractional one-channel map is a partial volume (TorchIO)."""
    stats = pytest.importorskip("scipy.stats")
    lab = torch.from_numpy(np.repeat(np.arange(3), 4000).reshape(1, 1, 12, 20, 50))
    t = RandomLabelsToImage(mean=[(0.0, 1.0), (2.0, 3.0), (5.0, 5.0)], std=[(0.1, 0.2), 0.5, (0.0, 0.3)], seed=5)
    batch = lab.expand(64, -1, -1, -1, -1).contiguous()
    out = t(batch)
    assert out.shape == (64, 1, 12, 20, 50)
    m, s = t.last_mean, t.last_std
    assert m.shape == (64, 3) and ((m[:, 0] >= 0) & (m[:, 0] < 1)).all() and ((m[:, 1] >= 2) & (m[:, 1] < 3)).all()
    assert (m[:, 2] == 5).all() and (s[:, 1] == 0.5).all()
    flat = out.reshape(64, -1).double().numpy()
    ids = lab.reshape(-1).numpy()
    for k in range(3):
        v = flat[:, ids == k]  # 4000 voxels of label k per sample
        z_mean = (v.mean(1) - m[:, k]) / (s[:, k] / np.sqrt(v.shape[1]) + 1e-12)
        assert np.abs(z_mean).max() < 5.0, k
        assert np.allclose(v.std(1), s[:, k], rtol=0.06, atol=1e-6), k
    # Draws uniform over their ranges: KS over 2,000 samples of a tiny map.
    tiny = torch.zeros(2000, 1, 1, 1, 2, dtype=torch.int64)
    tiny[:, :, :, :, 1] = 1
    t2 = RandomLabelsToImage(seed=9)  # TorchIO's defaults: mean U(0.1, 0.9), std U(0.01, 0.1)
    t2(tiny)
    assert stats.kstest((t2.last_mean.ravel() - 0.1) / 0.8, "uniform").pvalue > 1e-3
    assert stats.kstest((t2.last_std.ravel() - 0.01) / 0.09, "uniform").pvalue > 1e-3
    # Samples differ; the same seed repeats.
    again = RandomLabelsToImage(mean=[(0.0, 1.0), (2.0, 3.0), (5.0, 5.0)], std=[(0.1, 0.2), 0.5, (0.0, 0.3)], seed=5)
    assert torch.equal(again(batch), out) and not torch.equal(out[0], out[1])
    # A label's draws do not depend on the table size K; a discretized partial volume takes K =
    # its channel count (no read-back of the arg-max's maximum), the same image as that K given.
    t3, t5 = RandomLabelsToImage(num_labels=3, seed=7), RandomLabelsToImage(num_labels=5, seed=7)
    assert torch.equal(t3(lab), t5(lab)) and np.array_equal(t3.last_mean, t5.last_mean[:, :3])
    probs = PROBS[None].expand(2, -1, -1, -1, -1).contiguous()
    td, tk = RandomLabelsToImage(discretize=True, seed=8), RandomLabelsToImage(discretize=True, num_labels=4, seed=8)
    assert torch.equal(td(probs), tk(probs)) and td.last_mean.shape == (2, PROBS.shape[0])
    # A one-channel map with fractional values: a partial volume (one channel), as TorchIO's.
    frac = torch.full((1, 2, 2, 2), 0.5)
    got = RandomLabelsToImage(mean=[2.0], std=[0.0], seed=0)(frac)
    assert torch.equal(got, torchio_image(frac, dict(mean=[2.0], std=[0.0]), None))


def test_bad_inputs():
    with pytest.raises(RuntimeError, match="must define a value for each label"):
        RandomLabelsToImage(mean=[0.1, 0.2], std=[0, 0])(LABEL_MAP)  # labels up to 3
    with pytest.raises(ValueError, match="must be >= 0"):
        RandomLabelsToImage()(torch.tensor([[[[0, -2, 1]]]]))
    with pytest.raises(ValueError, match="label_key"):
        RandomLabelsToImage()({"label": LABEL_MAP})
    with pytest.raises(KeyError, match="seg"):
        RandomLabelsToImage(label_key="seg")({"label": LABEL_MAP})
    with pytest.raises(ValueError, match="second value must be equal or greater"):
        RandomLabelsToImage(mean=[(0.5, 0.1)])
    with pytest.raises(ValueError, match="same length"):
        RandomLabelsToImage(mean=[0.1, 0.2], used_labels=[1])
    with pytest.raises(ValueError, match="same length"):
        RandomLabelsToImage(mean=[0.1, 0.2], std=[0.1])
    with pytest.raises(ValueError, match="integers"):
        RandomLabelsToImage(used_labels=[1.5])
    with pytest.raises(ValueError, match="must match the label map"):
        RandomLabelsToImage()(LABEL_MAP, image=ORIGINAL[:, :5])


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    lab = LABEL_MAP.expand(3, 1, -1, -1, -1).contiguous()
    t_cpu, t_dev = RandomLabelsToImage(num_labels=4, seed=3), RandomLabelsToImage(num_labels=4, seed=3)
    ref = t_cpu(lab)
    got = t_dev(lab.to(device)).cpu()
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-6)
    probs = PROBS[None].expand(2, -1, -1, -1, -1).contiguous()
    ref = RandomLabelsToImage(seed=4, used_labels=[1, 2])(probs, image=ORIGINAL[None].expand(2, -1, -1, -1, -1))
    got = RandomLabelsToImage(seed=4, used_labels=[1, 2])(probs.to(device),
                                                          image=ORIGINAL[None].expand(2, -1, -1, -1, -1).to(device))
    torch.testing.assert_close(got.cpu(), ref, rtol=0, atol=1e-6)
    if torch.device(device).type == "cuda":
        lab_d, probs_d = lab.to(device), probs.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = RandomLabelsToImage(num_labels=4, seed=3)(lab_d)
            disc = RandomLabelsToImage(discretize=True, seed=4)(probs_d)
        assert out.is_cuda
        torch.testing.assert_close(disc.cpu(), RandomLabelsToImage(discretize=True, seed=4)(probs), rtol=0, atol=1e-6)


# ---------------- TorchIO's deterministic LabelsToImage ----------------
def torchio_fixed_image(lab, kw, original):
    d = {"label": tio.LabelMap(tensor=lab.clone())}
    if original is not None:
        d["image_from_labels"] = tio.ScalarImage(tensor=original.clone())
    return tio.LabelsToImage(label_key="label", **kw)(tio.Subject(**d))["image_from_labels"].data


@pytest.mark.parametrize("name", ["label map", "sparse label map", "one-hot", "probabilities"])
@pytest.mark.parametrize("kw", [dict(), dict(discretize=True), dict(used_labels=[1, 3]),
                                dict(used_labels=[0, 3], ignore_background=True), dict(ignore_background=True)])
@pytest.mark.parametrize("with_original", [False, True])
def test_fixed_labels_to_image_equals_torchio_without_noise(name, kw, with_original):
    """LabelsToImage with std 0: equal to TorchIO's, mean i for the i-th label present (a sparse
    map, labels {0, 2, 5, 9}, shows the positional indexing), every option, with and without the
    original image, alone and in a batch whose samples hold different labels."""
    from voxaug.labels import LabelsToImage

    lab = {"label map": LABEL_MAP, "sparse label map": torch.tensor([0, 2, 5, 9])[LABEL_MAP],
           "one-hot": ONE_HOT, "probabilities": PROBS}[name]
    if name == "sparse label map" and kw.get("used_labels") == [1, 3]:
        kw = dict(kw, used_labels=[2, 9])
    means = [0.1, 0.5, 0.7, 1.0]
    original = ORIGINAL if with_original else None
    ref = torchio_fixed_image(lab, dict(kw, mean=means, std=[0.0] * 4), original)
    data = {"label": lab} if original is None else {"label": lab, "image_from_labels": original}
    got = LabelsToImage(label_key="label", mean=means, std=[0.0] * 4, seed=0, **kw)(data)["image_from_labels"]
    assert got.dtype == torch.float32 and torch.equal(got, ref)
    if name in ("label map", "sparse label map"):
        other = lab.clone()
        other[other == other.max()] = 0  # three labels present: three means
        batch = torch.stack([lab, other])
        t = LabelsToImage(mean=means, std=[0.0] * 4, seed=1, **kw)
        with pytest.raises(RuntimeError, match='"mean" must define a value for each label'):
            t(batch)
        got = LabelsToImage(mean=means[:3], std=[0.0] * 3, seed=1, **kw)(other[None])
        assert torch.equal(got[0], torchio_fixed_image(other, dict(kw, mean=means[:3], std=[0.0] * 3), None))


def test_fixed_labels_to_image_noise_statistics_and_errors():
    """std > 0: each label's voxels have mean[i] and std[i] (z-scores over ~330 voxels each);
    the same seed repeats; bad arguments are refused."""
    from voxaug.labels import LabelsToImage

    lab = torch.from_numpy(np.random.default_rng(3).integers(0, 4, (1, 30, 30, 30)))
    means, stds = [0.0, 2.0, -1.0, 5.0], [1.0, 0.5, 2.0, 0.1]
    out = LabelsToImage(mean=means, std=stds, seed=7)(lab)
    for v in range(4):
        vals = out[lab == v].double()
        n = vals.numel()
        assert abs(float(vals.mean()) - means[v]) < 5 * stds[v] / n ** 0.5
        assert abs(float(vals.std()) / stds[v] - 1) < 5 / (2 * n) ** 0.5
    assert torch.equal(LabelsToImage(mean=means, std=stds, seed=7)(lab), out)
    with pytest.raises(ValueError, match="needs mean and std"):
        LabelsToImage(mean=means)
    with pytest.raises(ValueError, match="std must hold finite numbers >= 0"):
        LabelsToImage(mean=means, std=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="label values must be >= 0"):
        LabelsToImage(mean=[0.0, 1.0], std=[0.0, 0.0])(torch.tensor([-2, 1])[torch.zeros(1, 3, 3, 3, dtype=torch.long)])
