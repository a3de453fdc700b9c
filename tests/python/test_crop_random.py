"""RandCropByLabelClasses(d), RandWeightedCrop(d), RandSpatialCrop(d), RandSpatialCropSamples(d)
and the extract_patches op vs MONAI: crops at the drawn centres equal MONAI's SpatialCrop there,
every centre is one MONAI could draw, class / weight / position frequencies follow MONAI's rules
(binomial 99.9 % intervals, chi-square with fixed seeds), class counts equal MONAI's
map_classes_to_indices, edge cases, ch2 + aal, bad inputs, opcheck."""
import math
import os
import warnings

import numpy as np
import pytest
import torch

from voxaug import crop as C

from conftest import TEMPLATES, devices

mt = pytest.importorskip("monai.transforms")
from monai.transforms.utils import correct_crop_centers, map_classes_to_indices  # noqa: E402

stats = pytest.importorskip("scipy.stats")
Z999 = 3.2905  # two-sided 99.9 % normal quantile


def _classes_label(shape=(1, 20, 22, 24)):
    lab = torch.zeros(shape, dtype=torch.int16)
    lab[..., 2:5, 3:6, 4:7] = 1  # 27 voxels
    lab[..., 10:12, 10:12, 10:12] = 2  # 8 voxels
    lab[..., 15, 20, 3] = 3  # 1 voxel
    return lab


def _binomial_ok(hits, n, p):
    return abs(hits / n - p) <= Z999 * math.sqrt(p * (1 - p) / n) + 1e-12


# ---------------- RandCropByLabelClasses ----------------
def test_label_classes_crops_equal_monai_spatial_crop():
    g = torch.Generator().manual_seed(0)
    img = torch.randn(2, 20, 22, 24, generator=g)
    lab = _classes_label()
    t = C.RandCropByLabelClasses((8, 9, 10), ratios=[1, 1, 1, 1], label=lab, num_classes=4, num_samples=7, seed=3)
    crops = t(img)
    assert len(crops) == 7
    for k, y in enumerate(crops):
        c = t.centers[0, k].tolist()
        assert list(correct_crop_centers(c, (8, 9, 10), lab.shape[1:])) == c
        ref = mt.SpatialCrop(roi_center=c, roi_size=(8, 9, 10))(img)
        assert y.shape == ref.shape and torch.equal(y, torch.as_tensor(ref))


@pytest.mark.parametrize("device", devices())
def test_label_classes_ratios_binomial(device):
    # Crop size 1: no correction, so the label at the centre is the drawn class.
    lab = _classes_label((8, 1, 20, 22, 24)).to(device)
    ratios = [1.0, 2.0, 3.0, 0.5]
    t = C.RandCropByLabelClasses((1, 1, 1), ratios=ratios, num_classes=4, num_samples=300, seed=11)
    centers, _ = t.draw_centers(lab)
    c = centers.reshape(-1, 3).cpu()
    cls = lab[0, 0].cpu()[c[:, 0], c[:, 1], c[:, 2]].long()
    n = len(cls)
    assert n >= 2000
    for k, r in enumerate(ratios):
        assert _binomial_ok(int((cls == k).sum()), n, r / sum(ratios)), (k, int((cls == k).sum()))
    # uniform within a class: class 1 has 27 voxels (chi-square, fixed seed)
    idx = c[cls == 1]
    flat = ((idx[:, 0] - 2) * 9 + (idx[:, 1] - 3) * 3 + (idx[:, 2] - 4)).numpy()
    assert stats.chisquare(np.bincount(flat, minlength=27)).pvalue > 1e-3


def test_label_classes_counts_equal_monai_map_classes_to_indices():
    g = torch.Generator().manual_seed(1)
    lab = torch.randint(0, 5, (1, 13, 17, 19), generator=g).float()
    lab[lab == 3] = 2.5  # not a class value: in no class
    img = torch.rand(2, 13, 17, 19, generator=g)
    for image in (None, img):
        ind = map_classes_to_indices(lab, 6, image, 0.6)
        t = C.RandCropByLabelClasses(3, ratios=[1] * 6, num_classes=6, num_samples=2, image_threshold=0.6, seed=1,
                                     warn=False)
        t.draw_centers(lab, image)
        assert t.class_counts[0].tolist() == [len(i) for i in ind]
    onehot = (torch.rand(3, 13, 17, 19, generator=g) < 0.1).to(torch.uint8)  # overlapping channels
    ind = map_classes_to_indices(onehot, None, img, 0.6)
    t = C.RandCropByLabelClasses(3, num_samples=2, image_threshold=0.6, seed=1)
    t.draw_centers(onehot, img)
    assert t.class_counts[0].tolist() == [len(i) for i in ind]


def test_label_classes_image_mask_and_one_hot_membership():
    g = torch.Generator().manual_seed(2)
    onehot = (torch.rand(3, 12, 13, 14, generator=g) < 0.05).to(torch.uint8)
    img = torch.rand(1, 12, 13, 14, generator=g)
    t = C.RandCropByLabelClasses((1, 1, 1), ratios=[0, 1, 0], num_samples=400, image_threshold=0.5, seed=4)
    c, _ = t.draw_centers(onehot, img)
    c = c[0]
    assert bool((img[0][c[:, 0], c[:, 1], c[:, 2]] > 0.5).all())
    assert bool((onehot[1][c[:, 0], c[:, 1], c[:, 2]] == 1).all())


def test_label_classes_absent_class_warns_and_gets_ratio_zero():
    lab = _classes_label((1, 1, 20, 22, 24))
    lab[lab == 3] = 0  # class 3 absent
    t = C.RandCropByLabelClasses((1, 1, 1), ratios=[1, 1, 1, 1], num_classes=4, num_samples=2400, seed=5)
    with pytest.warns(UserWarning, match="no available indices of class 3 to crop"):
        c, _ = t.draw_centers(lab)
    with warnings.catch_warnings():  # MONAI warns the same
        warnings.simplefilter("ignore")
        mt.RandCropByLabelClasses(1, ratios=[1, 1, 1, 1], num_classes=4, num_samples=2)(lab[0], label=lab[0])
    cls = lab[0, 0][c[0, :, 0], c[0, :, 1], c[0, :, 2]].long()
    assert int((cls == 3).sum()) == 0
    for k in range(3):
        assert _binomial_ok(int((cls == k).sum()), len(cls), 1 / 3)
    t = C.RandCropByLabelClasses((1, 1, 1), ratios=[1, 1, 1, 1], num_classes=4, num_samples=2, seed=5, warn=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t.draw_centers(lab)  # warn=False: silent


def test_label_classes_no_positive_class_raises_like_monai():
    lab = torch.zeros(1, 6, 7, 8, dtype=torch.uint8)
    with pytest.raises(ValueError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mt.RandCropByLabelClasses(2, ratios=[0, 1], num_classes=2, num_samples=1)(lab, label=lab)
    t = C.RandCropByLabelClasses(2, ratios=[0, 1], num_classes=2, num_samples=1, warn=False, seed=1)
    with pytest.raises(ValueError, match="no class with a positive ratio"):
        t(lab, label=lab)


def test_label_classes_edge_cases():
    # more samples than candidates: 2 voxels of class 1
    lab = torch.zeros(1, 1, 15, 9, 30, dtype=torch.uint8)
    lab[..., 0, 0, 0] = 1
    lab[..., 14, 8, 29] = 1
    t = C.RandCropByLabelClasses((5, 4, 7), ratios=[0, 1], num_classes=2, num_samples=60, seed=2)
    c, _ = t.draw_centers(lab)
    cand = [list(correct_crop_centers(v, (5, 4, 7), (15, 9, 30))) for v in ([0, 0, 0], [14, 8, 29])]
    got = c[0].tolist()
    assert all(x in cand for x in got) and cand[0] in got and cand[1] in got
    # volume smaller than the patch
    small = torch.zeros(1, 6, 22, 24, dtype=torch.uint8)
    small[0, 2, 3, 4] = 1
    with pytest.raises(ValueError, match="larger than the image size"):
        C.RandCropByLabelClasses((8, 8, 8), num_classes=2, seed=1)(small, label=small)
    img = torch.randn(1, 6, 22, 24)
    t = C.RandCropByLabelClasses((8, 8, 8), ratios=[1, 1], num_classes=2, num_samples=3, allow_smaller=True, seed=1)
    crops = t(img, label=small)
    ref = mt.RandCropByLabelClasses((8, 8, 8), ratios=[1, 1], num_classes=2, num_samples=3,
                                    allow_smaller=True)(img, label=small)
    for k, y in enumerate(crops):
        assert y.shape == ref[k].shape == (1, 6, 8, 8)
        m = mt.SpatialCrop(roi_center=t.centers[0, k].tolist(), roi_size=(8, 8, 8))(img)
        assert torch.equal(y, torch.as_tensor(m))
    # size-1 axes
    lab1 = torch.zeros(1, 1, 20, 1, 24, dtype=torch.uint8)
    lab1[..., 3:5, 0, 7:9] = 1
    t = C.RandCropByLabelClasses((3, 1, 5), ratios=[0, 1], num_classes=2, num_samples=20, seed=3)
    img1 = torch.randn(1, 2, 20, 1, 24)
    for k, y in enumerate(t(img1, label=lab1)):
        c = t.centers[0, k].tolist()
        assert c[1] == 0 and 3 <= c[0] <= 4 and 7 <= c[2] <= 8
        assert torch.equal(y[0], torch.as_tensor(mt.SpatialCrop(roi_center=c, roi_size=(3, 1, 5))(img1[0])))


def test_label_classes_bad_inputs():
    lab = _classes_label((1, 1, 20, 22, 24))
    with pytest.raises(ValueError, match="must provide ``num_classes``"):
        C.RandCropByLabelClasses(4, seed=1).draw_centers(lab)
    with pytest.raises(ValueError, match="ratios must match"):
        C.RandCropByLabelClasses(4, ratios=[1, 1], num_classes=4).draw_centers(lab)
    with pytest.raises(ValueError, match="negative"):
        C.RandCropByLabelClasses(4, ratios=[1, -1], num_classes=2)
    with pytest.raises(TypeError, match="index arrays must hold integers"):
        C.RandCropByLabelClasses(4, indices=[np.array([1.0])])
    with pytest.raises(TypeError, match="list of index arrays"):
        C.RandCropByLabelClasses(4, indices=np.array([1, 2]))
    with pytest.raises(NotImplementedError, match="max_samples_per_class"):
        C.RandCropByLabelClasses(4, max_samples_per_class=10)
    with pytest.raises(ValueError, match="num_samples"):
        C.RandCropByLabelClasses(4, num_samples=0)
    with pytest.raises(ValueError, match="num_classes must be in"):
        torch.ops.voxaug.class_crop_centers(lab, None, 0.0, 1, [1.0] * 5000, 1, None, [], 1, 0, 0)
    with pytest.raises(ValueError, match="one class per channel"):
        torch.ops.voxaug.class_crop_centers(lab.expand(1, 2, 20, 22, 24), None, 0.0, 2, [1.0] * 3, 1, None, [], 1)
    with pytest.raises(ValueError, match="label_form"):
        torch.ops.voxaug.class_crop_centers(lab, None, 0.0, 7, [1.0], 1, None, [], 1)
    with pytest.raises(ValueError, match="same spatial size"):
        C.RandCropByLabelClasses(4, num_classes=4, seed=1)(torch.ones(1, 20, 22, 23), label=lab[0])


@pytest.mark.parametrize("one_hot", [False, True])
def test_label_classes_cached_counts_give_the_same_centres(one_hot):
    lab = _classes_label((2, 1, 30, 26, 28))
    img = torch.rand(2, 1, 30, 26, 28, generator=torch.Generator().manual_seed(9))
    if one_hot:
        lab = torch.cat([(lab == k) for k in range(4)], 1).to(torch.uint8)
    kw = dict(ratios=[1, 2, 3, 4], num_classes=None if one_hot else 4, num_samples=6, image_threshold=0.2)
    cc = C.CropCounts.of(lab, img, 0.2, num_classes=None if one_hot else 4, classes=True)
    assert cc.counts.shape[2] == 4 and cc.form == (C.ONE_HOT if one_hot else C.ARGMAX)
    a, _ = C.RandCropByLabelClasses((6, 6, 6), **kw).draw_centers(lab, img, seed=4)
    t = C.RandCropByLabelClasses((6, 6, 6), **kw)
    b, _ = t.draw_centers(lab, img, seed=4, cached=cc)
    assert torch.equal(a, b)
    # Per-class totals (returned with the centres) equal the cached counts summed over chunks.
    assert torch.equal(t.class_counts, cc.counts.sum(1))
    # The dictionary form through ClassesToIndicesd.
    d = {"image": img[0], "label": lab[0]}
    dk = dict(keys=["image", "label"], label_key="label", spatial_size=(6, 6, 6), image_key="image", **kw)
    plain = C.RandCropByLabelClassesd(**dk, seed=2)(d)
    cached = C.ClassesToIndicesd("label", num_classes=None if one_hot else 4, image_key="image",
                                 image_threshold=0.2)(d)
    fast = C.RandCropByLabelClassesd(**dk, indices_key="label_cls_indices", seed=2)(cached)
    for p, f in zip(plain, fast):
        assert torch.equal(p["image"], f["image"]) and torch.equal(p["label"], f["label"])
    # Counts of another form are refused.
    with pytest.raises(ValueError, match="made for label form"):
        C.RandCropByLabelClasses((6, 6, 6), **kw).draw_centers(lab, img, seed=4, cached=C.CropCounts.of(lab))


def test_label_classes_dict_on_ch2_aal():
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    img = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.float32))[None]
    lab = torch.from_numpy(np.asarray(nib.load(os.path.join(TEMPLATES, "aal.nii.gz")).dataobj).astype(np.int16))[None]
    k = int(lab.max()) + 1
    t = C.RandCropByLabelClassesd(["image", "label"], "label", (96, 96, 96), ratios=[1] * k, num_classes=k,
                                  num_samples=4, image_key="image", image_threshold=0, warn=False, seed=3)
    out = t({"image": img, "label": lab, "name": "ch2"})
    assert len(out) == 4
    expect = torch.bincount((lab * (img > 0)).flatten().long() + (img <= 0).flatten().long() * k, minlength=k + 1)
    assert t.cropper.class_counts[0].tolist() == expect[:k].tolist()
    for i, d in enumerate(out):
        c = t.cropper.centers[0, i].tolist()
        sl = tuple(slice(v - 48, v + 48) for v in c)
        assert d["name"] == "ch2" and d["label"].dtype == torch.int16
        assert torch.equal(d["image"], img[(slice(None),) + sl]) and torch.equal(d["label"], lab[(slice(None),) + sl])


# ---------------- RandWeightedCrop ----------------
def _monai_region(win, img):
    return [(w // 2, m - w + w // 2) if m > w else (m // 2, m // 2 + 1) for w, m in zip(win, img)]


@pytest.mark.parametrize("device", devices())
def test_weighted_follows_the_map_chi_square(device):
    g = torch.Generator().manual_seed(3)
    w = torch.randint(0, 4, (1, 5, 6, 7), generator=g).float()
    w[0, 2, 2, 2] = 9.0
    spatial = (1, 1, 1)  # MONAI's valid region is then [0, m - 1) per axis
    t = C.RandWeightedCrop(spatial, num_samples=4000, seed=7)
    centers, _ = t.draw_centers(w.to(device))
    c = centers[0].cpu()
    region = _monai_region(spatial, w.shape[1:])
    v = w[0][tuple(slice(a, b) for a, b in region)]
    flat = ((c[:, 0] - region[0][0]) * v.shape[1] + (c[:, 1] - region[1][0])) * v.shape[2] + (c[:, 2] - region[2][0])
    assert all(region[a][0] <= int(c[:, a].min()) and int(c[:, a].max()) < region[a][1] for a in range(3))
    counts = np.bincount(flat.numpy(), minlength=v.numel())
    p = v.flatten().double().numpy() / float(v.sum())
    assert counts[p == 0].sum() == 0  # zero weight: never drawn
    res = stats.chisquare(counts[p > 0], p[p > 0] * counts.sum())
    assert res.pvalue > 1e-3, res


def test_weighted_single_voxel_matches_monai_and_shapes():
    img = torch.arange(2 * 15 * 16 * 17, dtype=torch.float32).reshape(2, 15, 16, 17)
    for spatial, voxel in [((5, 6, 7), (7, 8, 9)), ((20, 6, -1), (7, 8, 8)), ((4, 4, 4), (2, 2, 14))]:
        w = torch.zeros(1, 15, 16, 17)
        w[(0,) + voxel] = 2.0
        ref = mt.RandWeightedCrop(spatial, num_samples=3, weight_map=w)(img)
        got = C.RandWeightedCrop(spatial, num_samples=3, weight_map=w, seed=1)(img)
        for r, y in zip(ref, got):  # one positive voxel in MONAI's valid region: no randomness
            assert y.shape == r.shape and torch.equal(y, torch.as_tensor(r)), spatial


def test_weighted_negative_shift_zero_map_and_crops():
    g = torch.Generator().manual_seed(4)
    w = torch.rand(1, 12, 13, 14, generator=g) - 0.5  # MONAI shifts by the minimum
    img = torch.randn(1, 12, 13, 14, generator=g)
    t = C.RandWeightedCrop((4, 5, 6), num_samples=50, weight_map=w, seed=2)
    crops = t(img)
    region = _monai_region((4, 5, 6), (12, 13, 14))
    argmin = np.unravel_index(int(w[0].flatten().argmin()), (12, 13, 14))
    for k, y in enumerate(crops):
        c = t.centers[0, k].tolist()
        assert all(a <= x < b for x, (a, b) in zip(c, region))
        assert c != list(argmin)
        assert torch.equal(y, torch.as_tensor(mt.SpatialCrop(roi_center=c, roi_size=(4, 5, 6))(img)))
    assert float(t.stats[0, 1]) == float(w[0][tuple(slice(a, b) for a, b in region)].min())
    t = C.RandWeightedCrop((4, 5, 6), num_samples=400, weight_map=torch.zeros(1, 12, 13, 14), seed=2)
    t(img)
    c = t.centers[0]
    for a, (lo, hi) in enumerate(region):  # uniform: every valid position drawn
        assert sorted(set(c[:, a].tolist())) == list(range(lo, hi))


def test_weighted_dict_and_bad_inputs():
    img = torch.randn(1, 10, 11, 12)
    lab = (img > 1).to(torch.uint8)
    w = torch.rand(1, 10, 11, 12)
    t = C.RandWeightedCropd(["img", "lab"], "w", (3, 4, 5), num_samples=5, seed=1)
    out = t({"img": img, "lab": lab, "w": w})
    for k, d in enumerate(out):
        c = t.cropper.centers[0, k].tolist()
        sl = (slice(None),) + tuple(slice(x - s // 2, x - s // 2 + s) for x, s in zip(c, (3, 4, 5)))
        assert torch.equal(d["img"], img[sl]) and torch.equal(d["lab"], lab[sl]) and d["w"] is w
    with pytest.raises(ValueError, match="weight map must be provided"):
        C.RandWeightedCrop(3)(img)
    with pytest.raises(ValueError, match="spatial shape mismatch"):
        C.RandWeightedCrop(3, weight_map=torch.rand(1, 10, 11, 13))(img)
    with pytest.raises(ValueError, match="num_samples"):
        C.RandWeightedCrop(3, num_samples=-1)


# ---------------- RandSpatialCrop / RandSpatialCropSamples ----------------
def test_spatial_crop_center_matches_monai():
    img = torch.randn(2, 11, 16, 9)
    for roi in [(4, 5, 6), (20, 6, -1), 3]:
        ref = mt.RandSpatialCrop(roi, random_center=False)(img)
        got = C.RandSpatialCrop(roi, random_center=False, seed=0)(img)
        assert got.shape == ref.shape and torch.equal(got, torch.as_tensor(ref))
        assert torch.equal(got, torch.as_tensor(mt.CenterSpatialCrop(roi)(img)))


@pytest.mark.parametrize("device", devices())
def test_spatial_crop_random_positions_uniform(device):
    img = torch.arange(11 * 16 * 9, dtype=torch.float32).reshape(1, 1, 11, 16, 9).to(device)
    t = C.RandSpatialCropSamples((4, 16, 20), num_samples=2100, seed=4)
    crops = t(img)
    (centers, size), = t.plan
    assert size == (4, 16, 9)  # an axis larger than the image is not cropped (MONAI)
    ref_shape = mt.RandSpatialCropSamples((4, 16, 20), num_samples=1)(img[0].cpu())[0].shape
    assert tuple(crops[0].shape[1:]) == tuple(ref_shape)
    starts = (centers[0] - torch.tensor([2, 8, 4], device=device)).cpu()
    assert int(starts[:, 0].min()) == 0 and int(starts[:, 0].max()) == 7  # get_random_patch: [0, 11 - 4]
    assert bool((starts[:, 1:] == 0).all())
    assert stats.chisquare(np.bincount(starts[:, 0].numpy(), minlength=8)).pvalue > 1e-3
    for k in (0, 1, 2099):
        s = starts[k].tolist()
        ref = mt.SpatialCrop(roi_start=s, roi_end=[a + b for a, b in zip(s, size)])(img[0].cpu())
        assert torch.equal(crops[k][0].cpu(), torch.as_tensor(ref))


def test_spatial_crop_random_size_and_dict():
    img = torch.randn(1, 12, 13, 14)
    lab = (img > 0).to(torch.uint8)
    t = C.RandSpatialCropSamplesd(["img", "lab"], (3, 4, 5), num_samples=6, max_roi_size=(8, 9, -1),
                                  random_size=True, seed=3)
    out = t({"img": img, "lab": lab, "meta": 1})
    assert len(out) == 6 and all(d["meta"] == 1 for d in out)
    for d in out:
        s = d["img"].shape[1:]
        assert 3 <= s[0] <= 8 and 4 <= s[1] <= 9 and 5 <= s[2] <= 14
        assert torch.equal(d["lab"], (d["img"] > 0).to(torch.uint8))  # the same crop for every key
    d = C.RandSpatialCropd(["img", "lab"], (5, 5, 5), seed=1)({"img": img, "lab": lab})
    assert d["img"].shape == (1, 5, 5, 5) and torch.equal(d["lab"], (d["img"] > 0).to(torch.uint8))
    with pytest.raises(ValueError, match="larger than max ROI size"):
        C.RandSpatialCrop((9, 9, 9), max_roi_size=(8, 9, 9), random_size=True, seed=1)(img)
    with pytest.raises(ValueError, match="num_samples"):
        C.RandSpatialCropSamples(3, 0)


def test_spatial_crop_batch_each_sample_own_centre_and_split_invariance():
    img = torch.randn(6, 1, 30, 31, 32)
    t = C.RandSpatialCrop((5, 5, 5), seed=1)
    t(img)
    c = t.centers
    assert len({tuple(x) for x in c[:, 0].tolist()}) > 1
    a = torch.ops.voxaug.uniform_crop_centers(img, 5, [2, 2, 2, 28, 29, 30], 77, 0, 0)
    b = torch.ops.voxaug.uniform_crop_centers(img[3:], 3, [2, 2, 2, 28, 29, 30], 77, 3, 2)
    assert torch.equal(a[3:, 2:], b)


# ---------------- extract_patches op ----------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8, torch.int64, torch.bool])
@pytest.mark.parametrize("layout", ["transposed", "fortran", "contiguous"])
def test_extract_patches_vs_padded_slicing(device, dtype, layout):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 2, 9, 10, 11, generator=g) * 10).to(dtype).to(device)
    if layout == "transposed":
        x = x.transpose(3, 4)  # non-contiguous (3, 2, 9, 11, 10)
    elif layout == "fortran":  # nibabel's order: d fastest
        x = x.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
    centers = torch.randint(-3, 14, (3, 4, 3), generator=g).to(device)
    size = (4, 5, 3)
    out = C.extract_patches(x, centers, size)
    assert out.shape == (12, 2, 4, 5, 3) and out.dtype == dtype
    pad = torch.nn.functional.pad(x.cpu().to(torch.float64), (20, 20, 20, 20, 20, 20))
    for m in range(3):
        for k in range(4):
            s = [int(v) - z // 2 + 20 for v, z in zip(centers[m, k].cpu(), size)]
            ref = pad[m, :, s[0]:s[0] + 4, s[1]:s[1] + 5, s[2]:s[2] + 3]
            assert torch.equal(out[m * 4 + k].cpu().to(torch.float64), ref)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.uint8, torch.int64, torch.bool])
def test_gather_patches_vs_padded_slicing(device, dtype):
    """Patches of several volumes of different sizes and layouts (C order with two samples, d
    fastest, a transposed view) in one op, against slicing each volume zero-padded by torch; 60
    patches (two CUDA launches of 48 + 12), starts partly outside."""
    g = torch.Generator().manual_seed(9)
    a = (torch.randn(2, 2, 9, 10, 11, generator=g) * 10).to(dtype)
    b = (torch.randn(1, 2, 6, 5, 7, generator=g) * 10).to(dtype).permute(0, 1, 4, 3, 2).contiguous() \
        .permute(0, 1, 4, 3, 2)
    c = (torch.randn(1, 2, 12, 4, 8, generator=g) * 10).to(dtype).transpose(3, 4)  # (1, 2, 12, 8, 4)
    vols = [v.to(device) for v in (a, b, c)]
    samples = [a[0], a[1], b[0], c[0]]
    K, size = 60, (4, 5, 3)
    index = torch.randint(0, 4, (K,), generator=g).tolist()
    starts = torch.randint(-3, 10, (K, 3), generator=g)
    out = C.gather_patches(vols, index, starts.to(device), size)
    assert out.shape == (K, 2, *size) and out.dtype == dtype and out.device.type == device
    inside = 0
    for k in range(K):
        pad = torch.nn.functional.pad(samples[index[k]].to(torch.float64), (20, 20, 20, 20, 20, 20))
        s = [int(v) + 20 for v in starts[k]]
        ref = pad[:, s[0]:s[0] + 4, s[1]:s[1] + 5, s[2]:s[2] + 3]
        assert torch.equal(out[k].cpu().to(torch.float64), ref), k
        inside += int((ref != 0).sum())
    assert 0 < inside < out.numel()


def test_gather_patches_opcheck_and_bad_inputs():
    a, b = torch.rand(2, 3, 8, 9, 10), torch.rand(1, 3, 5, 6, 7)
    starts = torch.tensor([[0, 1, 2], [3, 2, 1], [-1, 0, 4]])
    torch.library.opcheck(torch.ops.voxaug.gather_patches, ([a, b], [2, 0, 1], starts, [3, 4, 5]))
    empty = C.gather_patches([a], [], torch.zeros(0, 3, dtype=torch.int64), (2, 2, 2))
    assert empty.shape == (0, 3, 2, 2, 2)
    one = starts[:1]
    for args, match in [(([a, b.double()], [0], one, (2, 2, 2)), r"volumes\[1\] must have volumes\[0\]'s dtype"),
                        (([a, b[:, :2]], [0], one, (2, 2, 2)), r"volumes\[1\] must have volumes\[0\]'s 3 channels"),
                        (([a, b], [3], starts[:1], (2, 2, 2)), r"sample_index\[0\] must be in \[0, 3\)"),
                        (([a, b], [0, 1], starts[:1], (2, 2, 2)), r"starts must be \(K, 3\) with K = len\(sample_index\) = 2"),
                        (([a], [0], starts[:1].int(), (2, 2, 2)), "starts must be int64"),
                        (([a], [0], starts[:1], (2, 0, 2)), "size must be 3 positive ints"),
                        (([a[0]], [0], starts[:1], (2, 2, 2)), r"volumes\[0\] must be 5-D"),
                        (([], [0], starts[:1], (2, 2, 2)), "volumes must hold at least one tensor")]:
        with pytest.raises(ValueError, match=match):
            C.gather_patches(*args)


def test_opchecks():
    lab = _classes_label((2, 1, 20, 22, 24))
    torch.library.opcheck(torch.ops.voxaug.class_crop_centers,
                          (lab, None, 0.0, 1, [1.0, 1.0, 2.0, 0.0], 3, [4, 4, 4], [], 5, 0, 0))
    torch.library.opcheck(torch.ops.voxaug.weighted_crop_centers,
                          (lab.float(), True, 3, [1, 1, 1, 10, 10, 10], 5, 0, 0))
    torch.library.opcheck(torch.ops.voxaug.uniform_crop_centers, (lab, 3, [1, 1, 1, 10, 10, 10], 5, 0, 0))
    centers = torch.full((2, 3, 3), 4, dtype=torch.int64)
    torch.library.opcheck(torch.ops.voxaug.extract_patches, (lab, centers, [3, 4, 5]))


def test_size_one_axes_weighted_uniform_and_samplers():
    g = torch.Generator().manual_seed(8)
    img = torch.randn(1, 10, 1, 12, generator=g)
    w = torch.rand(1, 10, 1, 12, generator=g)
    t = C.RandWeightedCrop((3, 1, 4), num_samples=30, weight_map=w, seed=1)
    for k, y in enumerate(t(img)):
        c = t.centers[0, k].tolist()
        assert c[1] == 0 and y.shape == (1, 3, 1, 4)
        assert torch.equal(y, torch.as_tensor(mt.SpatialCrop(roi_center=c, roi_size=(3, 1, 4))(img)))
    ref = mt.RandSpatialCrop((3, 5, 4))(img)
    got = C.RandSpatialCrop((3, 5, 4), seed=1)(img)
    assert got.shape == ref.shape == (1, 3, 1, 4)
    s = C.UniformSampler((2, 1, 3), seed=1)
    for p in s({"img": img[None]}, num_patches=5):
        loc = p["location"][0].tolist()
        assert loc[1] == 0 and loc[4] == 1
        assert torch.equal(p["img"][0], img[:, loc[0]:loc[3], :, loc[2]:loc[5]])


@pytest.mark.parametrize("one_hot", [False, True])
def test_monai_class_index_lists_draw_as_the_scan(one_hot):
    """MONAI's ClassesToIndices lists (one per class, restricted by the image) given as
    `indices`: the same candidates as the scan, so the same centres for the same seed, and with
    crop size 1 every centre lies in the list of a class; the dictionary form takes them from
    the key ClassesToIndicesd writes."""
    mt = pytest.importorskip("monai.transforms")
    g = torch.Generator().manual_seed(8)
    cls = torch.randint(0, 3, (1, 20, 22, 18), generator=g)
    lab = torch.nn.functional.one_hot(cls[0], 3).permute(3, 0, 1, 2).to(torch.uint8) if one_hot else cls
    img = torch.rand(1, 20, 22, 18, generator=g)
    nc = None if one_hot else 3
    lists = mt.ClassesToIndices(num_classes=nc, image_threshold=0.3)(lab, img)
    t = C.RandCropByLabelClasses((5, 6, 4), ratios=[1, 2, 3], num_classes=nc, num_samples=50, image_threshold=0.3)
    want, _ = t.draw_centers(lab, img, seed=4)
    got, _ = t.draw_centers(lab, None, seed=4, cached=C._class_lists_arg([v.numpy() for v in lists], "indices"))
    assert torch.equal(got, want)
    assert t.class_counts.tolist() == [[len(v) for v in lists]]
    t1 = C.RandCropByLabelClasses((1, 1, 1), ratios=[0, 0, 1], num_classes=nc, num_samples=500)
    c, _ = t1.draw_centers(lab, None, seed=2, cached=C._class_lists_arg(lists, "indices"))
    flat = (c[0] * torch.tensor([22 * 18, 18, 1])).sum(1).tolist()
    assert set(flat) <= set(lists[2].tolist())
    d = mt.ClassesToIndicesd("label", num_classes=nc, image_key="image", image_threshold=0.3)(
        {"label": lab, "image": img})
    d["x"] = img
    kw = dict(keys=["x"], label_key="label", spatial_size=(5, 6, 4), ratios=[1, 2, 3], num_classes=nc,
              num_samples=50, as_batch=True)
    a = C.RandCropByLabelClassesd(**kw, image_key="image", image_threshold=0.3, seed=5)(d)
    b = C.RandCropByLabelClassesd(**kw, indices_key="label_cls_indices", seed=5)(d)
    assert torch.equal(a["x"], b["x"])
