"""RandCropByPosNegLabel(d): centres drawn on the device vs MONAI's rules (crop equality for
given centres, centre correction, class fractions and uniformity, fallbacks, image mask),
ch2 + aal, batch-split invariance, bad inputs."""
import math
import os

import numpy as np
import pytest
import torch

from voxaug import crop as C

from conftest import TEMPLATES

mt = pytest.importorskip("monai.transforms")
from monai.transforms.utils import correct_crop_centers  # noqa: E402


def _label(shape=(1, 1, 20, 22, 24)):
    lab = torch.zeros(shape, dtype=torch.uint8)
    lab[..., 5:7, 6:8, 10:12] = 1  # 8 foreground voxels
    return lab


def test_crops_equal_monai_spatial_crop_at_the_drawn_centres():
    g = torch.Generator().manual_seed(0)
    img = torch.randn(2, 20, 22, 24, generator=g)
    lab = _label()[0]
    t = C.RandCropByPosNegLabel((8, 9, 10), label=lab, pos=1, neg=1, num_samples=6, seed=3)
    crops = t(img)
    assert len(crops) == 6
    for k, y in enumerate(crops):
        c = t.centers[0, k].tolist()
        assert list(correct_crop_centers(c, (8, 9, 10), lab.shape[1:])) == c  # already valid
        ref = mt.SpatialCrop(roi_center=c, roi_size=(8, 9, 10))(img)
        assert y.shape == ref.shape and torch.equal(y, torch.as_tensor(ref))


def test_positive_fraction_and_uniform_choice():
    # Crop size 1: no centre correction, the centre is the drawn voxel.
    lab = _label((8, 1, 20, 22, 24))
    t = C.RandCropByPosNegLabel((1, 1, 1), pos=1, neg=3, num_samples=500, seed=7)
    centers, _ = t.draw_centers(lab)
    c = centers.reshape(-1, 3)
    fg = lab[0, 0][c[:, 0], c[:, 1], c[:, 2]].bool()
    n, p = len(c), 0.25
    assert abs(fg.float().mean().item() - p) < 3.3 * math.sqrt(p * (1 - p) / n)  # 99.9 %
    # Uniform over the 8 foreground voxels: chi-square, 7 dof, 99.9 % quantile 24.3.
    idx = (c[fg, 0] - 5) * 4 + (c[fg, 1] - 6) * 2 + (c[fg, 2] - 10)
    counts = torch.bincount(idx, minlength=8).double()
    expected = counts.sum() / 8
    assert ((counts - expected) ** 2 / expected).sum().item() < 24.3
    # Background draws are spread over the volume (not stuck at the start).
    bg = c[~fg]
    assert bg[:, 0].float().std() > 4 and bg[:, 2].float().std() > 4


def _monai_warnings(**kw):
    """MONAI's RandCropByPosNegLabel on the first sample: its warning texts. The label goes to
    MONAI as float32: MONAI 1.6's map_binary_to_indices takes ``~label`` of a uint8 label
    bitwise, so every voxel of an all-ones uint8 label counts as background there."""
    import warnings as w

    kw = {k: (v[0].float() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    with w.catch_warnings(record=True) as rec:
        w.simplefilter("always")
        mt.RandCropByPosNegLabel(**kw)(kw["label"])
    return [str(r.message) for r in rec if "unable to generate" in str(r.message)]


def _spread(c, axes=(0, 1, 2)):
    return all(c[:, a].float().std() > 2 for a in axes)


def test_fallbacks_warn_as_monai_and_spread_the_centres():
    empty = torch.zeros(1, 1, 10, 11, 12, dtype=torch.uint8)
    full = torch.ones(1, 1, 10, 11, 12, dtype=torch.uint8)
    for lab, pos, neg in ((empty, 1, 0), (full, 0, 1)):
        (msg,) = _monai_warnings(spatial_size=(1, 1, 1), label=lab, pos=pos, neg=neg, num_samples=4)
        t = C.RandCropByPosNegLabel((1, 1, 1), pos=pos, neg=neg, num_samples=300, seed=1)
        with pytest.warns(UserWarning) as rec:
            c, _ = t.draw_centers(lab)
        assert msg in [str(r.message) for r in rec]  # MONAI's text: counts and the pos_ratio it falls back to
        assert c.shape == (1, 300, 3) and _spread(c[0])  # drawn over the whole other side, not one voxel
        assert t.class_counts.tolist() == [[int(lab.sum()), int((lab == 0).sum())]]
    # Crops larger than one voxel: every centre is MONAI's correction of a voxel of the volume.
    t = C.RandCropByPosNegLabel((4, 5, 6), pos=1, neg=0, num_samples=300, seed=2)
    with pytest.warns(UserWarning, match="Num foregrounds 0"):
        c, _ = t.draw_centers(empty)
    for a, (n, k) in enumerate(zip((10, 11, 12), (4, 5, 6))):
        assert int(c[0, :, a].min()) == k // 2 and int(c[0, :, a].max()) == int(n + 1 - k / 2.0) - 1


def test_image_mask_and_no_sampling_location_as_monai():
    empty = torch.zeros(1, 1, 10, 11, 12, dtype=torch.uint8)
    img = torch.zeros(1, 1, 10, 11, 12)
    img[..., 2:4, 3:5, 4:6] = 5.0
    t = C.RandCropByPosNegLabel((1, 1, 1), pos=1, neg=1, num_samples=200, image_threshold=1.0, seed=2)
    with pytest.warns(UserWarning, match="Num foregrounds 0, Num backgrounds 8"):
        c, _ = t.draw_centers(empty, img)
    c = c[0]
    assert bool((img[0, 0][c[:, 0], c[:, 1], c[:, 2]] > 1.0).all())
    # No candidate at all (the image is below the threshold everywhere): MONAI raises; so does
    # voxaug on the CPU, also through the dictionary form and with cached counts.
    dark = torch.zeros(1, 1, 10, 11, 12)
    with pytest.raises(ValueError, match="No sampling location available"):
        mt.RandCropByPosNegLabel((3, 3, 3), label=empty[0], image=dark[0], image_threshold=1.0)(dark[0])
    with pytest.raises(ValueError, match="No sampling location available"):
        C.RandCropByPosNegLabel((3, 3, 3), label=empty, image=dark, image_threshold=1.0, seed=1)(dark)
    d = {"img": dark, "lab": empty}
    with pytest.raises(ValueError, match="No sampling location available"):
        C.RandCropByPosNegLabeld(["img"], "lab", (3, 3, 3), image_key="img", image_threshold=1.0, seed=1)(d)
    d.update(C.FgBgToIndicesd("lab", image_key="img", image_threshold=1.0)(d))
    with pytest.raises(ValueError, match="No sampling location available"):
        C.RandCropByPosNegLabeld(["img"], "lab", (3, 3, 3), fg_indices_key="lab_fg_indices",
                                 bg_indices_key="lab_bg_indices", seed=1)(d)
    # One sample of a batch without candidates is enough.
    lab2 = torch.cat([_label((1, 1, 10, 11, 12)), empty])
    img2 = torch.cat([torch.ones_like(dark), dark])
    with pytest.raises(ValueError, match="No sampling location available"):
        C.RandCropByPosNegLabel((3, 3, 3), image_threshold=0.5, seed=1).draw_centers(lab2, img2)


def test_centre_correction_matches_monai():
    lab = torch.zeros(1, 1, 15, 9, 30, dtype=torch.uint8)
    lab[..., 0, 0, 0] = 1
    lab[..., 14, 8, 29] = 1
    for size in [(5, 4, 7), (15, 9, 1), (6, 8, 30), (1, 1, 1)]:
        t = C.RandCropByPosNegLabel(size, pos=1, neg=0, num_samples=40, seed=5)
        c, _ = t.draw_centers(lab)
        for center in c[0].tolist():
            # every centre is MONAI's correction of one of the two foreground voxels
            cand = [list(correct_crop_centers(v, size, (15, 9, 30))) for v in ([0, 0, 0], [14, 8, 29])]
            assert center in cand


def test_allow_smaller_and_bad_inputs():
    lab = _label((1, 1, 6, 22, 24))
    with pytest.raises(ValueError, match="larger than the image size"):
        C.RandCropByPosNegLabel((8, 8, 8), seed=1).draw_centers(lab)
    t = C.RandCropByPosNegLabel((8, 8, 8), allow_smaller=True, num_samples=2, seed=1)
    crops = t(torch.randn(1, 1, 6, 22, 24), label=lab)
    assert crops[0].shape == (1, 1, 6, 8, 8)
    with pytest.raises(ValueError, match="pos and neg"):
        C.RandCropByPosNegLabel((4, 4, 4), pos=0, neg=0)
    with pytest.raises(TypeError, match="index arrays must hold integers"):
        C.RandCropByPosNegLabel((4, 4, 4), fg_indices=[1.5, 2.0], bg_indices=[3, 4])
    with pytest.raises(ValueError, match="label's batch and spatial size"):
        torch.ops.voxaug.pos_neg_crop_centers(lab, torch.ones(1, 1, 6, 22, 23), 0.0, 0.5, 1, [2, 2, 2], 1, 0)


def test_batch_split_invariance_and_determinism():
    lab = _label((4, 1, 20, 22, 24))
    lab[2] = 0
    t = C.RandCropByPosNegLabel((5, 5, 5), num_samples=7)
    a, _ = t.draw_centers(lab, seed=11)
    b, _ = t.draw_centers(lab[2:], seed=11, first_sample=2)
    assert torch.equal(a[2:], b)
    assert torch.equal(a, t.draw_centers(lab, seed=11)[0])
    assert not torch.equal(a, t.draw_centers(lab, seed=12)[0])


def test_dict_form_on_ch2_aal():
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    img = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.float32))[None]
    lab = torch.from_numpy(np.asarray(nib.load(os.path.join(TEMPLATES, "aal.nii.gz")).dataobj).astype(np.int16))[None]
    t = C.RandCropByPosNegLabeld(["image", "label"], "label", (96, 96, 96), pos=1, neg=1, num_samples=4,
                                 image_key="image", seed=3)
    out = t({"image": img, "label": lab, "name": "ch2"})
    assert len(out) == 4
    for k, d in enumerate(out):
        c = t.cropper.centers[0, k].tolist()
        sl = tuple(slice(v - 48, v + 48) for v in c)
        assert d["name"] == "ch2" and d["label"].dtype == torch.int16
        assert torch.equal(d["image"], img[(slice(None),) + sl]) and torch.equal(d["label"], lab[(slice(None),) + sl])


def test_opcheck():
    lab = _label((2, 1, 20, 22, 24))
    torch.library.opcheck(torch.ops.voxaug.pos_neg_crop_centers, (lab, None, 0.0, 0.5, 3, [4, 4, 4], 5, 0))


def test_dict_as_batch_equals_stacked_list():
    import voxaug.crop as vc

    torch.manual_seed(0)
    lab = (torch.rand(1, 30, 28, 26) > 0.7).to(torch.uint8)
    img = torch.randn(1, 30, 28, 26)
    kw = dict(keys=["image", "label"], label_key="label", spatial_size=(8, 9, 10), pos=1, neg=1, num_samples=5,
              image_key="image", image_threshold=0.0)
    listed = vc.RandCropByPosNegLabeld(**kw, seed=7)({"image": img, "label": lab, "meta": "x"})
    batched = vc.RandCropByPosNegLabeld(**kw, seed=7, as_batch=True)({"image": img, "label": lab, "meta": "x"})
    assert isinstance(listed, list) and isinstance(batched, dict) and batched["meta"] == "x"
    for k in ("image", "label"):
        assert batched[k].shape == (5, 1, 8, 9, 10)
        assert torch.equal(batched[k], torch.stack([d[k] for d in listed]))


# ---------------- cached candidate counts (MONAI FgBgToIndicesd) ----------------
@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("with_image", [False, True])
def test_cached_counts_give_the_same_centres(fortran, with_image):
    g = torch.Generator().manual_seed(4)
    lab = (torch.rand(3, 1, 30, 29, 27, generator=g) > 0.97).to(torch.uint8)
    lab[1] = 0  # no foreground: the background fallback
    img = torch.rand(3, 1, 30, 29, 27, generator=g)
    if fortran:
        lab = lab.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
        img = img.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
    im = img if with_image else None
    cc = C.CropCounts.of(lab, im, 0.4)
    # The counts against a naive count per chunk of the memory order.
    flat_lab = lab.permute(0, 1, 4, 3, 2).reshape(3, -1) if fortran else lab.reshape(3, -1)
    flat_img = img.permute(0, 1, 4, 3, 2).reshape(3, -1) if fortran else img.reshape(3, -1)
    cand = (flat_img > 0.4) if with_image else torch.ones_like(flat_lab, dtype=torch.bool)
    n_chunks = math.ceil(flat_lab.shape[1] / 4096)
    assert cc.counts.shape == (3, n_chunks, 2) and cc.counts.dtype == torch.int64
    for c in range(n_chunks):
        sl = slice(c * 4096, (c + 1) * 4096)
        fg = (flat_lab[:, sl] > 0).sum(1)  # MONAI's map_binary_to_indices: the image restricts the background
        bg = ((flat_lab[:, sl] == 0) & cand[:, sl]).sum(1)
        assert torch.equal(cc.counts[:, c, 0], fg) and torch.equal(cc.counts[:, c, 1], bg)
    for seed in range(4):
        a = torch.ops.voxaug.pos_neg_crop_centers(lab, im, 0.4, 0.6, 5, [8, 9, 10], seed, 0)
        b = torch.ops.voxaug.pos_neg_crop_centers(lab, im, 0.4, 0.6, 5, [8, 9, 10], seed, 0, cc.counts)
        assert torch.equal(a, b)


def test_fgbg_to_indicesd_then_cached_crop_equals_uncached():
    g = torch.Generator().manual_seed(5)
    lab = (torch.rand(1, 34, 30, 28, generator=g) > 0.8).to(torch.uint8)
    img = torch.randn(1, 34, 30, 28, generator=g)
    kw = dict(keys=["image", "label"], label_key="label", spatial_size=(8, 9, 10), pos=2, neg=1, num_samples=4,
              image_key="image", image_threshold=0.0)
    plain = C.RandCropByPosNegLabeld(**kw, seed=7)({"image": img, "label": lab})
    cached = C.FgBgToIndicesd("label", image_key="image", image_threshold=0.0)({"image": img, "label": lab})
    assert isinstance(cached["label_fg_indices"], C.CropCounts)
    assert cached["label_fg_indices"] is cached["label_bg_indices"]
    fast = C.RandCropByPosNegLabeld(**kw, fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices",
                                    seed=7)(cached)
    for p, f in zip(plain, fast):
        assert torch.equal(p["image"], f["image"]) and torch.equal(p["label"], f["label"])
    # The fused crop (as_batch, Compose) reads the cache too.
    from voxaug import spatial as S
    from voxaug import transforms as T

    def chain(**extra):
        return T.Compose([C.RandCropByPosNegLabeld(**kw, as_batch=True, **extra),
                          S.RandFlipd(["image", "label"], prob=0.5, spatial_axis=0)]).set_random_state(3)
    a = chain()({"image": img, "label": lab})
    b = chain(fg_indices_key="label_fg_indices")(cached)
    assert torch.equal(a["image"], b["image"]) and torch.equal(a["label"], b["label"])


def test_cached_counts_bad_inputs():
    lab = _label((2, 1, 20, 22, 24))
    cc = C.CropCounts.of(lab)
    with pytest.raises(ValueError, match="counts must be class_crop_counts of this label"):
        torch.ops.voxaug.pos_neg_crop_centers(lab[:1], None, 0.0, 0.5, 3, [4, 4, 4], 5, 0, cc.counts)
    with pytest.raises(ValueError, match="counts must be int64"):
        torch.ops.voxaug.pos_neg_crop_centers(lab, None, 0.0, 0.5, 3, [4, 4, 4], 5, 0, cc.counts.int())
    with pytest.raises(TypeError, match="both as the same CropCounts or both as MONAI's index arrays"):
        C.RandCropByPosNegLabel((4, 4, 4), fg_indices=cc, bg_indices=np.arange(5))
    t = C.RandCropByPosNegLabeld(["label"], "label", (4, 4, 4), fg_indices_key="lab_fg")
    with pytest.raises(KeyError, match="FgBgToIndicesd"):
        t({"label": lab[0]})
    with pytest.raises(ValueError, match="num_classes"):
        torch.ops.voxaug.class_crop_counts(lab, None, 0.0, 0, 0)
    torch.library.opcheck(torch.ops.voxaug.class_crop_counts, (lab, None, 0.0, 0, 2))
    torch.library.opcheck(torch.ops.voxaug.pos_neg_crop_centers, (lab, None, 0.0, 0.5, 3, [4, 4, 4], 5, 0, cc.counts))


# ---------------- MONAI's semantics with an image; MONAI's index arrays ----------------
def _random_case(seed, channels=1):
    g = torch.Generator().manual_seed(seed)
    if channels == 1:
        lab = (torch.rand(1, 1, 20, 22, 18, generator=g) > 0.8).to(torch.int64)
    else:  # one-hot: channel 0 the background
        cls = torch.randint(0, channels, (1, 20, 22, 18), generator=g)
        lab = torch.nn.functional.one_hot(cls, channels).permute(0, 4, 1, 2, 3).to(torch.uint8)
    img = torch.rand(1, 1, 20, 22, 18, generator=g)
    return lab, img


@pytest.mark.parametrize("channels", [1, 3])
def test_image_restricts_the_background_only_as_monai(channels):
    """MONAI's map_binary_to_indices (FgBgToIndices): every foreground voxel is a positive
    candidate, the image restricts the background; a several-channel label is one-hot (channel 0
    dropped). voxaug's candidate counts equal the lengths of MONAI's lists, and with crop size 1
    (no centre correction) every drawn centre lies in MONAI's list of its kind -- including the
    foreground voxels the image leaves out."""
    lab, img = _random_case(5, channels)
    fg, bg = mt.FgBgToIndices(image_threshold=0.4)(lab[0], img[0])
    fg_set, bg_set = set(fg.tolist()), set(bg.tolist())
    strides = (22 * 18, 18, 1)
    for pos, neg, want in ((1, 0, fg_set), (0, 1, bg_set)):
        t = C.RandCropByPosNegLabel((1, 1, 1), pos=pos, neg=neg, num_samples=3000, image_threshold=0.4, seed=4)
        c, _ = t.draw_centers(lab, img)
        assert t.class_counts.tolist() == [[len(fg), len(bg)]]
        flat = (c[0] * torch.tensor(strides)).sum(1).tolist()
        assert set(flat) <= want
        expected = len(want) * (1 - math.exp(-3000 / len(want)))  # distinct voxels of 3000 uniform draws
        assert len(set(flat)) > 0.95 * expected
    dark_fg = {i for i in fg_set if float(img.view(-1)[i]) <= 0.4}
    assert dark_fg and set(flat).isdisjoint(dark_fg)  # (the last loop drew background)
    t = C.RandCropByPosNegLabel((1, 1, 1), pos=1, neg=0, num_samples=3000, image_threshold=0.4, seed=6)
    c, _ = t.draw_centers(lab, img)
    assert set((c[0] * torch.tensor(strides)).sum(1).tolist()) & dark_fg


@pytest.mark.parametrize("channels", [1, 3])
def test_monai_index_arrays_draw_as_the_scan(channels):
    """MONAI's FgBgToIndices lists given as fg_indices / bg_indices (numpy or torch): the same
    candidates as the scan of the label and image, so the same centres for the same seed; the
    dictionary form takes them from the keys FgBgToIndicesd writes."""
    lab, img = _random_case(7, channels)
    fg, bg = mt.FgBgToIndices(image_threshold=0.4)(lab[0], img[0])
    t = C.RandCropByPosNegLabel((5, 6, 4), pos=1, neg=2, num_samples=60, image_threshold=0.4)
    want, _ = t.draw_centers(lab, img, seed=9)
    for f, b in ((fg, bg), (fg.numpy(), bg.numpy()), (fg.int(), bg.int())):
        got, _ = t.draw_centers(lab, None, seed=9, counts=C._counts_arg(f, b, "fg_indices / bg_indices"))
        assert torch.equal(got, want)
        assert t.class_counts.tolist() == [[len(fg), len(bg)]]
    x = torch.randn(2, 20, 22, 18)
    crops = C.RandCropByPosNegLabel((5, 6, 4), label=lab[0], num_samples=4, seed=1)(x, fg_indices=fg, bg_indices=bg)
    assert len(crops) == 4 and crops[0].shape == (2, 5, 6, 4)
    d = mt.FgBgToIndicesd("label", image_key="image", image_threshold=0.4)({"label": lab[0], "image": img[0]})
    d["x"] = x
    kw = dict(keys=["x"], label_key="label", spatial_size=(5, 6, 4), pos=1, neg=2, num_samples=60)
    a = C.RandCropByPosNegLabeld(**kw, image_key="image", image_threshold=0.4, seed=2, as_batch=True)(d)
    b = C.RandCropByPosNegLabeld(**kw, fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices",
                                 seed=2, as_batch=True)(d)
    assert torch.equal(a["x"], b["x"])


def test_monai_index_arrays_bad_inputs():
    lab, img = _random_case(3)
    fg, bg = mt.FgBgToIndices()(lab[0])
    t = C.RandCropByPosNegLabel((4, 4, 4), num_samples=2, seed=1)
    with pytest.raises(ValueError, match="outside the label's 7920 voxels"):
        t(img, label=lab, fg_indices=fg, bg_indices=torch.cat([bg, torch.tensor([7920])]))
    with pytest.raises(ValueError, match="describe one volume; the label is a batch of 2"):
        t(torch.cat([img, img]), label=torch.cat([lab, lab]), fg_indices=fg, bg_indices=bg)
    # One list alone is ignored (MONAI recomputes both from the label): the scan's centres.
    a = t.draw_centers(lab, seed=3)[0]
    t2 = C.RandCropByPosNegLabel((4, 4, 4), num_samples=2, fg_indices=fg[:3])
    assert t2.counts is None and torch.equal(t2.draw_centers(lab, seed=3)[0], a)


def test_more_samples_than_candidates_and_size_one_axes():
    """num_samples far above the candidate count: every centre is one of the 2 foreground voxels
    (corrected as MONAI corrects them) and both are drawn; a volume with a size-1 axis: the crops
    are MONAI's SpatialCrop at the drawn centres, on the label's foreground."""
    lab = torch.zeros(1, 1, 15, 9, 30, dtype=torch.uint8)
    lab[..., 0, 0, 0] = 1
    lab[..., 14, 8, 29] = 1
    t = C.RandCropByPosNegLabel((5, 4, 7), pos=1, neg=0, num_samples=60, seed=2)
    c, _ = t.draw_centers(lab)
    cand = [list(correct_crop_centers(v, (5, 4, 7), (15, 9, 30))) for v in ([0, 0, 0], [14, 8, 29])]
    got = c[0].tolist()
    assert all(x in cand for x in got) and cand[0] in got and cand[1] in got
    lab1 = torch.zeros(1, 20, 1, 24, dtype=torch.uint8)
    lab1[0, 3:5, 0, 7:9] = 1
    img1 = torch.randn(2, 20, 1, 24)
    t = C.RandCropByPosNegLabel((3, 1, 5), label=lab1, pos=1, neg=0, num_samples=20, seed=3)
    for k, y in enumerate(t(img1)):
        cc = t.centers[0, k].tolist()
        assert cc[1] == 0 and 3 <= cc[0] <= 4 and 7 <= cc[2] <= 8
        assert torch.equal(y, torch.as_tensor(mt.SpatialCrop(roi_center=cc, roi_size=(3, 1, 5))(img1)))
