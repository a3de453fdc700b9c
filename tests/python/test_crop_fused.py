"""A crop sampler's batch followed by spatial transforms, fused into one gather from the full
volume (voxaug.ops.resample_patches, Compose): exact steps give the bytes of crop-then-transform;
interpolating steps equal MONAI's transform applied to a wider crop around the same centre (so
the corners hold real data, not the crop's zero border); the op against per-patch resamples,
opcheck, bad inputs."""
import numpy as np
import pytest
import torch

import voxaug
from voxaug import crop as C
from voxaug import spatial as S
from voxaug import transforms as T

from conftest import count_calls, devices

mt = pytest.importorskip("monai.transforms")


def _volume(n=2, shape=(40, 44, 36), seed=0):
    g = torch.Generator().manual_seed(seed)
    img = torch.rand(n, 1, *shape, generator=g) * 100 + 1.0  # nonzero everywhere
    lab = torch.zeros(n, 1, *shape, dtype=torch.uint8)
    lab[:, :, 12:30, 10:28, 8:26] = 1
    lab[:, :, 18:24, 16:22, 12:20] = 2
    return img, lab


def _chain(fuse, tail, seed=7):
    c = T.Compose([C.RandCropByPosNegLabeld(keys=["image", "label"], label_key="label", spatial_size=(16, 16, 16),
                                            pos=1, neg=1, num_samples=3, as_batch=True)] + tail, fuse_spatial=fuse)
    return c.set_random_state(seed)


@pytest.mark.parametrize("device", devices())
def test_exact_steps_fused_equal_crop_then_transform(device, monkeypatch):
    launches = count_calls(monkeypatch, "resample", "resample_patches")
    img, lab = _volume()
    data = {"image": img.to(device), "label": lab.to(device)}

    def tail():
        return [S.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
                S.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=1),
                S.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=2),
                S.RandRotate90d(keys=["image", "label"], prob=0.5, max_k=3),
                T.RandShiftIntensityd(keys=["image"], offsets=0.1, prob=0.5)]

    for seed in range(4):
        launches.update(resample=0, resample_patches=0)
        ref = _chain(False, tail(), seed)(dict(data))
        assert launches == {"resample": 4, "resample_patches": 0}  # one per spatial step
        launches.update(resample=0, resample_patches=0)
        out = _chain(True, tail(), seed)(dict(data))
        assert launches == {"resample": 0, "resample_patches": 1}  # crop + 4 steps: one gather
        assert out["image"].shape == ref["image"].shape == (6, 1, 16, 16, 16)
        assert torch.equal(out["image"], ref["image"]), seed
        assert torch.equal(out["label"], ref["label"]), seed
        assert out["label"].dtype == torch.uint8 and int(out["label"].max()) > 0


def test_untouched_keys_are_cut_and_other_entries_pass_through():
    img, lab = _volume(n=1)
    extra = torch.arange(5)
    data = {"image": img, "label": lab, "mask": lab.clone(), "meta": extra}
    c = T.Compose([C.RandCropByPosNegLabeld(keys=["image", "label", "mask"], label_key="label",
                                            spatial_size=(16, 16, 16), num_samples=2, as_batch=True),
                   S.RandFlipd(keys=["image", "label"], prob=1.0, spatial_axis=0)]).set_random_state(3)
    out = c(data)
    assert out["meta"] is extra
    assert out["mask"].device.type == "cpu" and out["mask"].shape == (2, 1, 16, 16, 16)
    assert torch.equal(out["mask"].flip(2), out["label"])  # mask: cut only; label: cut + flipped


def _check_wide_crop_reference(out, unfused, img, lab, centers, roi, pad, monai_t) -> int:
    """Each fused patch k (of the one-sample (1, 1, D, H, W) image and label, centres (K, 3))
    against the MONAI transform `monai_t` (called with mode=) on a crop wider by `pad` around the
    same centre, cut back to the roi: both read the real volume outside the roi. Also: where
    crop-then-transform (`unfused`) reads only the crop's zero border, the fused patch has real
    data (the image is >= 1 everywhere inside the volume) when the wide crop lies inside the
    volume. Returns how many patches that last check covered."""
    big = roi + 2 * pad
    vol = torch.nn.functional.pad(img[0], (big,) * 6)  # zeros outside, as the kernel's padding
    lvol = torch.nn.functional.pad(lab[0], (big,) * 6)
    inner = (slice(None),) + (slice(pad, pad + roi),) * 3
    checked = 0
    for k in range(centers.shape[0]):
        c = centers[k].tolist()
        sl = (slice(None),) + tuple(slice(ci + big - roi // 2 - pad, ci + big - roi // 2 - pad + big) for ci in c)
        ref = torch.as_tensor(monai_t(vol[sl], mode="bilinear"))[inner]
        lref = torch.as_tensor(monai_t(lvol[sl].float(), mode="nearest"))[inner]
        got = out["image"][k]
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=2e-3)
        mismatch = (out["label"][k].float() != lref).float().mean().item()
        assert mismatch < 2e-3  # nearest ties where MONAI's float32 grid rounds the other way
        border = unfused["image"][k] == 0
        assert int(border.sum()) > 20
        if all(roi // 2 + pad <= ci < s - roi // 2 - pad for ci, s in zip(c, img.shape[2:])):
            assert bool((got[border] > 0.5).all())
            checked += 1
    return checked


@pytest.mark.parametrize("angle", [0.35, -0.6])
def test_rotated_patch_reads_the_volume_at_its_corners(angle):
    """Crop + Affined(rotate) fused == MONAI's Affine on a crop wider by `pad` around the same
    centre, then its centre cut back to the roi: both read the real volume outside the roi."""
    img, lab = _volume(n=1, shape=(56, 52, 60), seed=2)
    roi, pad = 16, 8
    crop = C.RandCropByPosNegLabeld(keys=["image", "label"], label_key="label", spatial_size=(roi,) * 3,
                                    num_samples=4, as_batch=True)
    aff = S.Affined(keys=["image", "label"], rotate_params=(angle, 0.0, 0.0), mode=("bilinear", "nearest"),
                    padding_mode="zeros")
    out = T.Compose([crop, aff]).set_random_state(11)({"image": img, "label": lab})
    centers = crop.cropper.centers[0]
    monai_aff = mt.Affine(rotate_params=(angle, 0.0, 0.0), padding_mode="zeros", image_only=True)
    unfused = T.Compose([crop, aff], fuse_spatial=False).set_random_state(11)({"image": img, "label": lab})
    assert _check_wide_crop_reference(out, unfused, img, lab, centers, roi, pad, monai_aff) > 0


# ---- the other dictionary crop samplers: RandCropByLabelClassesd, RandWeightedCropd, RandSpatialCropSamplesd
KEYS = ["image", "label"]
SAMPLERS = ["label_classes", "weighted", "spatial_samples"]


def _data(n=2, shape=(40, 44, 36), seed=0) -> dict:
    """_volume's image and label (classes 0, 1, 2) and a weight map heaviest on the labelled box."""
    img, lab = _volume(n, shape, seed)
    return {"image": img, "label": lab, "weight": lab.float() * 4 + 0.05}


def _sampler(name: str, roi=(16, 16, 16), k=3, **kw):
    if name == "label_classes":
        return C.RandCropByLabelClassesd(KEYS, "label", roi, ratios=[1, 2, 3], num_classes=3, num_samples=k, **kw)
    if name == "weighted":
        return C.RandWeightedCropd(KEYS, "weight", roi, num_samples=k, **kw)
    assert name == "spatial_samples"
    return C.RandSpatialCropSamplesd(KEYS, roi, num_samples=k, **kw)


def _centers(sampler) -> torch.Tensor:
    """The (N, K, 3) centres of the sampler's last draw."""
    if isinstance(sampler, C.RandSpatialCropSamplesd):
        ((centers, _),) = sampler.cropper.plan
        return centers
    return sampler.cropper.centers


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("name", SAMPLERS)
def test_samplers_exact_steps_fused_equal_crop_then_transform(name, device, monkeypatch):
    """Random flips and quarter turns after the sampler: the fused gather (one resample_patches
    launch, no resample) gives the bytes of crop-then-transform (one resample per step), for
    several seeds."""
    launches = count_calls(monkeypatch, "resample", "resample_patches")
    data = {k: v.to(device) for k, v in _data().items()}

    def chain(fuse, seed):
        tail = [S.RandFlipd(KEYS, prob=0.5, spatial_axis=a) for a in range(3)]
        tail.append(S.RandRotate90d(KEYS, prob=0.5, max_k=3))
        return T.Compose([_sampler(name, as_batch=True)] + tail, fuse_spatial=fuse).set_random_state(seed)

    for seed in range(4):
        launches.update(resample=0, resample_patches=0)
        ref = chain(False, seed)(dict(data))
        assert launches == {"resample": 4, "resample_patches": 0}  # one per spatial step
        launches.update(resample=0, resample_patches=0)
        out = chain(True, seed)(dict(data))
        assert launches == {"resample": 0, "resample_patches": 1}  # crop + 4 steps: one gather
        assert out["image"].shape == ref["image"].shape == (6, 1, 16, 16, 16)
        assert torch.equal(out["image"], ref["image"]), seed
        assert torch.equal(out["label"], ref["label"]), seed
        assert out["label"].dtype == torch.uint8
        assert out["weight"] is data["weight"]  # not a key of the sampler: passed through


@pytest.mark.parametrize("name", SAMPLERS)
def test_samplers_fused_exact_steps_equal_monai_on_the_drawn_crops(name):
    """Independent reference for the fused crop + Flipd + Rotate90d: MONAI's SpatialCrop at the
    drawn centres, then MONAI's Flip and Rotate90 (non-cubic roi: the quarter turn swaps axes)."""
    data = _data(n=2)
    sampler = _sampler(name, roi=(12, 16, 20), k=2, as_batch=True, seed=5)
    pipe = T.Compose([sampler, S.Flipd(KEYS, spatial_axis=0), S.Rotate90d(KEYS, k=1, spatial_axes=(1, 2))])
    out = pipe(dict(data))
    centers = _centers(sampler)
    assert out["image"].shape == (4, 1, 12, 20, 16)
    for n in range(2):
        for k in range(2):
            crop = mt.SpatialCrop(roi_center=centers[n, k].tolist(), roi_size=(12, 16, 20))
            for key in KEYS:
                want = mt.Rotate90(k=1, spatial_axes=(1, 2))(mt.Flip(spatial_axis=0)(crop(data[key][n])))
                assert torch.equal(out[key][n * 2 + k], torch.as_tensor(want).to(out[key].dtype)), (n, k, key)


@pytest.mark.parametrize("name", SAMPLERS)
def test_samplers_fused_draws_equal_the_unfused_samplers(name):
    """With the same seed, the sampler inside a fusing Compose draws the centres that the plain
    sampler (MONAI's list of crops) draws, call after call; the as_batch batch holds sample n's
    crop k at n * K + k, each equal to MONAI's SpatialCrop at that centre."""
    data = _data(n=2)
    fused = _sampler(name, as_batch=True, seed=21)
    plain = _sampler(name, seed=21)
    pipe = T.Compose([fused, S.RandFlipd(KEYS, prob=0.5, spatial_axis=1)])
    seen = set()
    for _ in range(3):
        pipe(dict(data))
        crops = plain(dict(data))
        assert isinstance(crops, list) and len(crops) == 3
        assert torch.equal(_centers(fused), _centers(plain))
        seen.add(tuple(_centers(plain).flatten().tolist()))
    assert len(seen) == 3  # the draws move on from call to call
    batched = _sampler(name, as_batch=True, seed=21)(dict(data))
    plain = _sampler(name, seed=21)
    crops = plain(dict(data))
    assert isinstance(batched, dict) and batched["image"].shape == (6, 1, 16, 16, 16)
    assert batched["weight"] is data["weight"]
    for n in range(2):
        for k in range(3):
            want = mt.SpatialCrop(roi_center=_centers(plain)[n, k].tolist(), roi_size=(16, 16, 16))(data["image"][n])
            assert torch.equal(batched["image"][n * 3 + k], torch.as_tensor(want))
            assert torch.equal(crops[k]["image"][n], torch.as_tensor(want))
            assert torch.equal(batched["label"][n * 3 + k], crops[k]["label"][n])


@pytest.mark.parametrize("name", SAMPLERS)
@pytest.mark.parametrize("angle", [0.35, -0.6])
def test_samplers_rotated_patch_reads_the_volume_at_its_corners(name, angle):
    """Sampler + Rotated fused == MONAI's Rotate on a crop wider by `pad` around the same centre
    (the rotation centre is the same point), cut back to the roi."""
    data = _data(n=1, shape=(64, 60, 68), seed=2)
    roi, pad = 16, 8
    angles = (angle, 0.0, -angle / 2)
    crop = _sampler(name, roi=(roi,) * 3, k=6, as_batch=True)
    rot = S.Rotated(KEYS, angle=angles, mode=("bilinear", "nearest"), padding_mode="zeros")
    out = T.Compose([crop, rot]).set_random_state(13)(dict(data))
    centers = _centers(crop)[0]
    unfused = T.Compose([crop, rot], fuse_spatial=False).set_random_state(13)(dict(data))
    assert torch.equal(_centers(crop)[0], centers)  # the same draw
    monai_rot = mt.Rotate(angle=angles, padding_mode="zeros")
    assert _check_wide_crop_reference(out, unfused, data["image"], data["label"], centers, roi, pad, monai_rot) > 0


def test_samplers_as_batch_bad_input_and_missing_keys():
    with pytest.raises(ValueError, match="random_size must be False"):
        C.RandSpatialCropSamplesd(KEYS, (8, 8, 8), num_samples=2, random_size=True, as_batch=True)
    sampler = C.RandSpatialCropSamplesd(KEYS, (8, 8, 8), num_samples=2, random_size=True)
    sampler.as_batch = True
    data = _data(n=1)
    with pytest.raises(ValueError, match="random_size must be False"):
        sampler(dict(data))
    with pytest.raises(KeyError, match="'mask' is not in the data"):
        C.RandWeightedCropd(["image", "mask"], "weight", (8, 8, 8), as_batch=True).draw_patches(dict(data))
    with pytest.raises(KeyError, match="'mask' is not in the data"):
        C.RandCropByLabelClassesd(["image", "mask"], "label", (8, 8, 8), num_classes=3, as_batch=True)(dict(data))
    only_other = {"other": data["image"]}
    for fn in (C.RandSpatialCropSamplesd(KEYS, (8, 8, 8), 2, allow_missing_keys=True, as_batch=True),
               C.RandSpatialCropSamplesd(KEYS, (8, 8, 8), 2, allow_missing_keys=True, as_batch=True).draw_patches):
        got = fn(only_other)
        got = got[0] if isinstance(got, tuple) else got
        assert list(got) == ["other"] and got["other"] is only_other["other"]


@pytest.mark.parametrize("device", devices())
def test_resample_patches_op_equals_per_patch_resample(device):
    g = torch.Generator().manual_seed(5)
    vol = torch.randn(2, 2, 20, 18, 22, generator=g).to(device)
    lab = torch.randint(0, 9, (2, 1, 20, 18, 22), generator=g, dtype=torch.int32).to(device)
    k = 3
    starts = torch.randint(-3, 12, (2, k, 3), generator=g).to(device)
    mats = torch.zeros(2 * k, 3, 4, dtype=torch.float64)
    for n in range(2 * k):
        a = torch.eye(3, dtype=torch.float64) + 0.3 * torch.randn(3, 3, generator=g, dtype=torch.float64)
        mats[n, :, :3] = a
        mats[n, :, 3] = torch.randn(3, generator=g, dtype=torch.float64)
    mats = mats.to(device)
    out, lout = voxaug.ops.resample_patches([vol, lab], mats, starts, (7, 8, 9), ["linear", "nearest"],
                                            ["border", "zeros"])
    assert out.shape == (6, 2, 7, 8, 9) and lout.shape == (6, 1, 7, 8, 9) and lout.dtype == torch.int32
    for n in range(2 * k):
        m = mats[n:n + 1].clone()
        m[0, :, 3] += starts.reshape(-1, 3)[n].double()
        ref, lref = voxaug.ops.resample([vol[n // k:n // k + 1], lab[n // k:n // k + 1]], m, (7, 8, 9),
                                        ["linear", "nearest"], ["border", "zeros"])
        assert torch.equal(out[n:n + 1], ref) and torch.equal(lout[n:n + 1], lref), n


def test_resample_patches_against_grid_sample_float64():
    """Independent reference: torch grid_sample (float64, align_corners=True index mapping) on
    the volume with the start-offset map."""
    g = torch.Generator().manual_seed(9)
    vol = torch.randn(1, 1, 12, 14, 10, generator=g, dtype=torch.float64)
    starts = torch.tensor([[[2, 3, 1], [-2, 0, 4]]])
    mats = torch.zeros(2, 3, 4, dtype=torch.float64)
    mats[:, :, :3] = torch.eye(3, dtype=torch.float64) + 0.2 * torch.randn(2, 3, 3, generator=g, dtype=torch.float64)
    mats[:, :, 3] = torch.randn(2, 3, generator=g, dtype=torch.float64)
    (out,) = voxaug.ops.resample_patches([vol], mats, starts, (6, 5, 7), ["linear"], ["zeros"], align_corners=True)
    o = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in (6, 5, 7)], indexing="ij"), -1)
    for n in range(2):
        p = o @ mats[n, :, :3].T + mats[n, :, 3] + starts[0, n].double()  # (d, h, w) input index
        size = torch.tensor([12, 14, 10], dtype=torch.float64)
        grid = (2 * p / (size - 1) - 1).flip(-1)[None]  # grid_sample wants (x=w, y=h, z=d)
        ref = torch.nn.functional.grid_sample(vol, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
        torch.testing.assert_close(out[n:n + 1], ref, rtol=0, atol=1e-12)


def test_resample_patches_opcheck_and_bad_inputs():
    vol = torch.randn(2, 1, 10, 10, 10)
    starts = torch.zeros(2, 2, 3, dtype=torch.int64)
    mats = torch.eye(3, 4, dtype=torch.float64).repeat(4, 1, 1)
    torch.library.opcheck(torch.ops.voxaug.resample_patches.default,
                          ([vol], mats, starts, [4, 4, 4], [1], [0], [0.0], False))
    with pytest.raises(ValueError, match=r"starts must be \(M, K, 3\)"):
        voxaug.ops.resample_patches([vol], mats, starts[0], (4, 4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="starts must be an integer tensor"):
        voxaug.ops.resample_patches([vol], mats, starts.float(), (4, 4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match=r"matrices must be \(M \* K, 3, 4\)"):
        voxaug.ops.resample_patches([vol], mats[:3], starts, (4, 4, 4), ["linear"], ["zeros"])


@pytest.mark.parametrize("device", devices())
def test_pointwise_after_fused_gather_runs_in_place(device, monkeypatch):
    # Compose owns the fused gather's outputs, so the pointwise steps after it update them in
    # place: the same values as the unfused chain (step by step, each allocating), the caller's
    # tensors untouched, one pointwise_chain_ call per step and no out-of-place one.
    calls = count_calls(monkeypatch, "pointwise_chain", "pointwise_chain_", "resample_patches")
    img, lab = _volume()
    data = {"image": img.to(device), "label": lab.to(device), "other": img[:, :, :4].clone().to(device)}
    before = {k: v.clone() for k, v in data.items()}

    def tail():
        return [S.RandFlipd(keys=["image", "label"], prob=0.5, spatial_axis=0),
                T.RandShiftIntensityd(keys=["image"], offsets=0.1, prob=1.0),
                T.RandScaleIntensityd(keys=["image"], factors=0.2, prob=1.0),
                T.ShiftIntensityd(keys=["image", "other"], offset=2.0)]

    for seed in range(3):
        calls.update(pointwise_chain=0, pointwise_chain_=0)
        ref = _chain(False, tail(), seed)(dict(data))
        assert calls["pointwise_chain_"] == 0
        calls.update(pointwise_chain=0, pointwise_chain_=0, resample_patches=0)
        got = _chain(True, tail(), seed)(dict(data))
        # The shift runs inside the gather (post steps), then 2 in-place passes on the image;
        # "other" is the caller's tensor: out of place.
        assert calls == {"pointwise_chain": 1, "pointwise_chain_": 2, "resample_patches": 1}, calls
        for k in ("image", "label", "other"):
            assert torch.equal(got[k], ref[k]), k
        for k, v in data.items():
            assert torch.equal(v, before[k]), f"the caller's {k} changed"


@pytest.mark.parametrize("device", devices())
def test_resample_patches_post_steps_equal_gather_then_chain(device):
    """Post steps inside the gather give the bytes of the gather, then pointwise_chain_ on its
    output: a random shift (gated per patch), ScaleIntensityRange with clipping, per-patch
    factors and a fixed gamma; interpolated and exact maps; first_sample offsets the draws."""
    g = torch.Generator().manual_seed(11)
    vol = (torch.rand(2, 1, 24, 20, 22, generator=g) * 3).to(device)
    lab = torch.randint(0, 4, (2, 1, 24, 20, 22), generator=g, dtype=torch.uint8).to(device)
    k = 3
    starts = torch.randint(-2, 10, (2, k, 3), generator=g).to(device)
    mats = torch.zeros(2 * k, 3, 4, dtype=torch.float64)
    mats[:, :, :3] = torch.eye(3, dtype=torch.float64)
    mats[1, 1, 1], mats[1, 1, 3] = -1.0, 7.0  # flip h: exact
    mats[2:, :, :3] += 0.2 * torch.randn(4, 3, 3, generator=g, dtype=torch.float64)  # interpolated
    mats = mats.to(device)
    factors = torch.linspace(-0.3, 0.4, 2 * k).to(device)
    O = voxaug.ops
    steps = [O.Step(O.SCALE_INTENSITY_RANGE, O.HAS_B_MIN | O.HAS_B_MAX | O.CLIP, (0.2, 2.5, -1.0, 1.0)),
             O.Step(O.SHIFT_INTENSITY, O.RANDOM, (0.0, -0.5, 0.5), prob=0.5, seed=123),
             O.Step(O.SCALE_INTENSITY, 0, (0.0,), values=factors),
             O.Step(O.GAMMA, 0, (1.0,))]
    assert O.post_fusable(steps)
    torch.library.opcheck(torch.ops.voxaug.resample_patches_post.default,
                          ([vol, lab], mats, starts, [5, 4, 6], [1, 0], [1, 0], [0.0, 0.0], False, 0,
                           *O._lists(steps), 2))
    for first in (0, 4):
        out, lout = O.resample_patches([vol, lab], mats, starts, (9, 8, 7), ["linear", "nearest"],
                                       ["border", "zeros"], post_input=0, post_steps=steps, post_first_sample=first)
        ref, lref = O.resample_patches([vol, lab], mats, starts, (9, 8, 7), ["linear", "nearest"],
                                       ["border", "zeros"])
        O.pointwise_chain_(ref, steps, first_sample=first)
        assert torch.equal(out, ref), first
        assert torch.equal(lout, lref)
    # Not fusable: noise (per-voxel draws), statistics, channel-wise draws, random gamma.
    assert not O.post_fusable([O.Step(O.GAUSSIAN_NOISE, 0, (0.0, 0.1))])
    assert not O.post_fusable([O.Step(O.SHIFT_INTENSITY, O.RANDOM | O.CHANNEL_WISE, (0.0, -1.0, 1.0))])
    assert not O.post_fusable([O.Step(O.GAMMA, O.RANDOM, (0.0, -0.1, 0.1))])
    assert not O.post_fusable([])
    with pytest.raises(ValueError, match="post_input must index inputs"):
        O.resample_patches([vol], mats, starts, (4, 4, 4), ["linear"], ["zeros"], post_input=3,
                           post_steps=steps[:1])
    with pytest.raises(ValueError, match="post step 0 must be scale_intensity_range"):
        O.resample_patches([vol], mats, starts, (4, 4, 4), ["linear"], ["zeros"], post_input=0,
                           post_steps=[O.Step(O.GAUSSIAN_NOISE, 0, (0.0, 0.1))])
    with pytest.raises(ValueError, match="post steps need a floating output"):
        O.resample_patches([lab], mats, starts, (4, 4, 4), ["nearest"], ["zeros"], post_input=0,
                           post_steps=steps[:1])


def test_list_of_crops_maps_the_remaining_transforms_as_monai():
    """A sampler without as_batch returns one dictionary per crop; Compose runs the remaining
    steps on each (MONAI's map_items). Reference: MONAI's SpatialCrop at the recorded centres,
    then torch.flip and + 1.5 (the flip and shift are deterministic)."""
    img, lab = _volume(n=1)
    keys = ["image", "label"]
    sampler = C.RandCropByPosNegLabeld(keys, "label", (16, 12, 20), num_samples=3, seed=4)
    pipe = T.Compose([sampler, S.RandFlipd(keys, prob=1.0, spatial_axis=0), T.ShiftIntensityd(["image"], 1.5)])
    out = pipe({"image": img, "label": lab, "name": "case0"})
    assert isinstance(out, list) and len(out) == 3
    for k, d in enumerate(out):
        c = sampler.cropper.centers[0, k].tolist()
        crop = mt.SpatialCrop(roi_center=c, roi_size=(16, 12, 20))
        want_img = torch.flip(torch.as_tensor(crop(img[0])), dims=[1]) + 1.5
        want_lab = torch.flip(torch.as_tensor(crop(lab[0])), dims=[1])
        assert torch.equal(torch.as_tensor(d["image"]).reshape(want_img.shape), want_img)
        assert torch.equal(torch.as_tensor(d["label"]).reshape(want_lab.shape), want_lab)
        assert d["name"] == "case0"


# ---- RandSpatialCrop(d): one crop per sample, fused with the spatial steps after it
def _spatial_crop(form: str, roi=(16, 16, 16), **kw):
    if form.startswith("dict"):
        return C.RandSpatialCropd(KEYS, roi, **kw)
    return C.RandSpatialCrop(roi, **kw)


def _spatial_crop_input(form: str, n: int = 3) -> tuple:
    """(input, image, label) for a form: dict or array, batched (N, C, ...) or one (C, ...) volume."""
    data = _data(n=n)
    img, lab = data["image"], data["label"]
    if form.endswith("4d"):
        img, lab = img[0], lab[0]
    return ({"image": img, "label": lab, "weight": data["weight"]} if form.startswith("dict") else img), img, lab


def _exact_tail(form: str, quarter_turn: bool):
    if form.startswith("dict"):
        tail = [S.RandFlipd(KEYS, prob=0.5, spatial_axis=a) for a in range(3)]
        return tail + [S.RandRotate90d(KEYS, prob=0.5, max_k=3)] if quarter_turn else tail
    tail = [S.RandFlip(prob=0.5, spatial_axis=a) for a in range(3)]
    return tail + [S.RandRotate90(prob=0.5, max_k=3)] if quarter_turn else tail


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("form", ["dict", "dict4d", "array", "array4d"])
@pytest.mark.parametrize("random_size", [False, True])
def test_rand_spatial_crop_fused_exact_steps_equal_crop_then_transform(form, random_size, device, monkeypatch):
    """RandSpatialCrop(d) then random flips (and quarter turns where the size is fixed: a random
    size is not cubic, and a batch's quarter turn needs equal sides): the fused chain is one
    resample_patches launch (no resample, no separate cut) and gives the bytes of the unfused
    chain (the crop cut, then one resample per step), for several seeds; the output keeps the
    input's form (a (C, D, H, W) volume gives (C, *roi)) and the crop draws the boxes the unfused
    crop draws with the same seed."""
    launches = count_calls(monkeypatch, "resample", "resample_patches")
    launches["extract_patches"] = 0
    real_cut = C.extract_patches

    def counting_cut(*args, **kwargs):
        launches["extract_patches"] += 1
        return real_cut(*args, **kwargs)

    monkeypatch.setattr(C, "extract_patches", counting_cut)
    x, _, _ = _spatial_crop_input(form)
    x = {k: v.to(device) for k, v in x.items()} if isinstance(x, dict) else x.to(device)
    steps = 3 if random_size else 4

    def chain(fuse, seed):
        crop = _spatial_crop(form, max_roi_size=(20, 20, 20), random_size=random_size)
        return T.Compose([crop] + _exact_tail(form, not random_size), fuse_spatial=fuse).set_random_state(seed), crop

    for seed in range(4):
        launches.update(resample=0, resample_patches=0, extract_patches=0)
        ref_chain, ref_crop = chain(False, seed)
        ref = ref_chain(dict(x) if isinstance(x, dict) else x)
        cuts = len(KEYS) if isinstance(x, dict) else 1  # one cut per key
        assert launches == {"resample": steps, "resample_patches": 0, "extract_patches": cuts}
        launches.update(resample=0, resample_patches=0, extract_patches=0)
        out_chain, out_crop = chain(True, seed)
        out = out_chain(dict(x) if isinstance(x, dict) else x)
        assert launches == {"resample": 0, "resample_patches": 1, "extract_patches": 0}  # crop + steps: one gather
        cropper = (lambda c: c.cropper if isinstance(c, C.RandSpatialCropd) else c)
        assert torch.equal(cropper(out_crop).centers, cropper(ref_crop).centers), seed  # the same boxes
        assert cropper(out_crop)._size == cropper(ref_crop)._size
        pairs = [(out[k], ref[k]) for k in KEYS] if isinstance(x, dict) else [(out, ref)]
        for got, want in pairs:
            assert got.shape == want.shape and got.dtype == want.dtype and got.device == want.device
            assert got.dim() == (4 if form.endswith("4d") else 5)
            assert torch.equal(got, want), seed
        if isinstance(x, dict):
            assert out["weight"] is x["weight"]  # not a key of the crop: passed through


@pytest.mark.parametrize("random_center", [True, False])
def test_rand_spatial_cropd_fused_boxes_equal_monai_crops(random_center):
    """Independent reference: the fused RandSpatialCropd + Flipd + Rotate90d equals MONAI's
    SpatialCrop at the drawn box, then MONAI's Flip and Rotate90, per sample; each box lies in
    MONAI get_random_patch's range [0, size - roi] (random_center), or is MONAI's
    RandSpatialCrop(random_center=False) box (the centred crop)."""
    data = _data(n=3)
    roi = (12, 16, 20)
    crop = C.RandSpatialCropd(KEYS, roi, random_center=random_center, seed=5)
    out = T.Compose([crop, S.Flipd(KEYS, spatial_axis=0), S.Rotate90d(KEYS, k=1, spatial_axes=(1, 2))])(dict(data))
    starts = crop.cropper.centers[:, 0] - torch.tensor([r // 2 for r in roi])
    assert out["image"].shape == (3, 1, 12, 20, 16)
    for n in range(3):
        s = starts[n].tolist()
        assert all(0 <= a <= m - r for a, m, r in zip(s, data["image"].shape[2:], roi))
        box = mt.SpatialCrop(roi_start=s, roi_end=[a + r for a, r in zip(s, roi)])
        if not random_center:
            want = mt.RandSpatialCrop(roi, random_center=False)(data["image"][n])
            assert torch.equal(torch.as_tensor(box(data["image"][n])), torch.as_tensor(want))
        for key in KEYS:
            want = mt.Rotate90(k=1, spatial_axes=(1, 2))(mt.Flip(spatial_axis=0)(box(data[key][n])))
            assert torch.equal(out[key][n], torch.as_tensor(want).to(out[key].dtype)), (n, key)
    if random_center:
        assert len({tuple(s) for s in starts.tolist()}) > 1  # each sample its own box


def test_rand_spatial_cropd_then_rand_zoomd_one_gather_per_key(monkeypatch):
    """RandSpatialCropd + RandZoomd (zoom in: keep_size crops the zoomed patch) + RandRotate90d +
    RandFlipd: one resample_patches launch per key (the image's linear map and the label's
    nearest rule differ), against a float64 reference of the composed map: the zoom's source
    coordinate of each output voxel (interpolate's (o + first + 1/2) * size / zoomed - 1/2),
    moved by MONAI's Rotate90 and Flip as a (3, D, H, W) coordinate image, offset by the box's
    start and read from the full volume by scipy map_coordinates (order 1, clamped: the
    kernel's border). The label equals the unfused chain (every nearest index lies inside the
    patch, so cutting first reads the same voxels)."""
    ndimage = pytest.importorskip("scipy.ndimage")
    launches = count_calls(monkeypatch, "resample", "resample_patches")
    data = _data(n=3, shape=(40, 44, 36))
    roi = 16

    def make():
        return [C.RandSpatialCropd(KEYS, (roi,) * 3, seed=1),
                S.RandZoomd(KEYS, prob=1.0, min_zoom=1.05, max_zoom=1.4, mode=("trilinear", "nearest"), seed=2),
                S.RandRotate90d(KEYS, prob=0.8, spatial_axes=(0, 1), seed=3),
                S.RandFlipd(KEYS, prob=0.5, spatial_axis=2, seed=4)]

    fused_t = make()
    out = T.Compose(fused_t)(dict(data))
    assert launches == {"resample": 0, "resample_patches": 2}
    launches.update(resample=0, resample_patches=0)
    ref = T.Compose(make(), fuse_spatial=False)(dict(data))
    assert launches == {"resample": 4, "resample_patches": 0}  # zoom: image and label; rot90; flip
    assert torch.equal(out["label"], ref["label"]) and int(out["label"].max()) > 0
    crop, zoom, rot, flip = fused_t
    starts = crop.cropper.centers[:, 0] - roi // 2
    zooms = zoom.transform.zooms(zoom.transform._last)
    ks, gates = rot.transform._ks(rot.transform._last), flip.transform._gates(flip.transform._last)
    vol = data["image"][:, 0].double().numpy()
    for n in range(3):
        coords = []
        for z in zooms[n]:
            zoomed = int(np.floor(roi * z))
            first = zoomed // 2 - roi // 2
            coords.append((np.arange(roi) + first + 0.5) * roi / zoomed - 0.5)
        field = torch.from_numpy(np.stack(np.meshgrid(*coords, indexing="ij")))
        field = mt.Rotate90(k=ks[n], spatial_axes=(0, 1))(field)
        field = mt.Flip(spatial_axis=2)(field) if gates[n] else field
        field = torch.as_tensor(field).numpy() + starts[n].numpy()[:, None, None, None]
        want = ndimage.map_coordinates(vol[n], field, order=1, mode="nearest")
        # The kernel maps in float32: coordinates near 40 carry ~4e-6 voxel of rounding, and the
        # random volume changes by up to 100 per voxel, so 1e-3 absolute (values 1 .. 101).
        np.testing.assert_allclose(out["image"][n, 0].numpy(), want, rtol=0, atol=1e-3)


def test_rand_spatial_crop_meta_tensor_cut_first_and_bad_inputs(monkeypatch):
    """A MetaTensor is cut at once (its crop affine needs the box on the host): the steps after
    it still fuse among themselves (one resample, no resample_patches), values and affines equal
    the unfused chain's. Missing keys and bad ranks raise the transform's own errors."""
    mdata = pytest.importorskip("monai.data")
    launches = count_calls(monkeypatch, "resample", "resample_patches")
    aff = torch.diag(torch.tensor([1.5, 0.8, 2.0, 1.0], dtype=torch.float64))
    data = _data(n=1)
    meta = {k: mdata.MetaTensor(data[k][0], affine=aff) for k in KEYS}

    def make():
        return [C.RandSpatialCropd(KEYS, (12, 10, 14), seed=3), S.RandFlipd(KEYS, prob=1.0, spatial_axis=1, seed=4),
                S.Rotate90d(KEYS, k=2, spatial_axes=(0, 2))]

    out = T.Compose(make())(dict(meta))
    assert launches == {"resample": 1, "resample_patches": 0}
    ref = T.Compose(make(), fuse_spatial=False)(dict(meta))
    for k in KEYS:
        assert isinstance(out[k], mdata.MetaTensor) and out[k].shape == (1, 12, 10, 14)
        assert torch.equal(out[k].as_tensor(), ref[k].as_tensor())
        assert torch.allclose(out[k].affine.double(), ref[k].affine.double(), atol=1e-12)
    with pytest.raises(KeyError, match="'mask' is not in the data"):
        C.RandSpatialCropd(["image", "mask"], 8).draw_patches(dict(data))
    with pytest.raises(KeyError, match="'mask' is not in the data"):
        T.Compose([C.RandSpatialCropd(["image", "mask"], 8), S.Flipd(["image"], 0)])(dict(data))
    only_other = {"other": data["image"]}
    got, patches = C.RandSpatialCropd(KEYS, 8, allow_missing_keys=True).draw_patches(only_other)
    assert list(got) == ["other"] and got["other"] is only_other["other"] and patches == {}
    with pytest.raises(ValueError, match=r"img must be \(C, D, H, W\) or \(N, C, D, H, W\)"):
        C.RandSpatialCrop(8).draw_patches(data["image"][0, 0])
    with pytest.raises(ValueError, match=r"img must be \(C, D, H, W\) or \(N, C, D, H, W\)"):
        C.RandSpatialCropd(KEYS, 8).draw_patches({"image": data["image"], "label": data["label"][0, 0]})
