"""A deformation (voxaug.deform) closing a lazy spatial group of voxaug.transforms.Compose: the
group's product map and the deformation's field in one resample_deformed launch. Compared
with the same Compose run step by step (fuse_spatial=False: one resample per spatial step,
then the deformation's own gather), which runs the ops checked against MONAI / scipy / torch
in test_resample.py, test_spatial.py and test_deform.py: bytes where both paths are exact
(flips, quarter turns, nearest), within a derived interpolation bound where the step-by-step
path interpolates twice; the random draws of every transform and the launch counts."""
import copy
import os
import warnings

import numpy as np
import pytest
import torch

import voxaug
from voxaug import crop as C
from voxaug import deform as D
from voxaug import spatial as S
from voxaug import transforms as T

from conftest import TEMPLATES, count_calls, devices

KEYS = ["image", "label"]


def _log_draws(compose) -> list:
    """Wraps _params_for of every random transform of `compose` (the one place a call draws);
    the returned list collects (index in the Compose, params) in call order."""
    log = []
    for i, t in enumerate(compose.transforms):
        inner = getattr(t, "transform", t)
        if not hasattr(inner, "_params_for"):
            continue
        real = inner._params_for

        def logged(*args, _real=real, _i=i, **kwargs):
            p = _real(*args, **kwargs)
            if p is not None:  # a deterministic step's call asks too and gets None: no draw
                log.append((_i, p.clone()))
            return p

        inner._params_for = logged
    return log


def _same_draws(a: list, b: list) -> bool:
    return len(a) == len(b) and all(i == j and (p is None and q is None or torch.equal(p, q))
                                    for (i, p), (j, q) in zip(a, b))


def _run_both(make, data, seed, monkeypatch):
    """(step-by-step output, fused output, their launch counts, draws equal, the deformation's
    displacement fields of both runs)."""
    calls = count_calls(monkeypatch, "resample", "resample_deformed")
    res = []
    for fuse in (False, True):
        calls.update(resample=0, resample_deformed=0)
        c = T.Compose(make(), fuse_spatial=fuse).set_random_state(seed)
        log = _log_draws(c)
        out = c(dict(data) if isinstance(data, dict) else data)
        deform = next(t for t in c.transforms if D._is_fusable_deformation(t))
        res.append((out, dict(calls), log, deform.displacement_field(), deform))
    (ref, ref_calls, ref_log, ref_u, _), (out, calls_, log, u, deform) = res
    assert ref_log, "no random draw was logged"
    _run_both.deformation, _run_both.compose = deform, c  # the fused run's deformation, Compose
    return ref, out, ref_calls, calls_, _same_draws(ref_log, log), torch.equal(ref_u, u)


def _near_ties(deform, key, shape, tol=1e-4) -> torch.Tensor:
    """(N, D, H, W): output voxels whose deformation sample point y = A (x + u(x)) (float64, from
    the call's dense field and map) lies within `tol` of a half-integer along some axis: the
    only voxels where nearest sampling may pick a different neighbour when y is carried through
    a flip or quarter turn in float32 (round half to even at a point the two paths round
    differently by one float32 ulp)."""
    plan = deform._field_plan(deform._fields[key])
    u = deform.displacement_field(key).cpu().double()
    grid = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in shape], indexing="ij"))
    mats = plan.mats.double()
    y = torch.einsum("nij,njdhw->nidhw", mats[:, :, :3], grid[None] + u) + mats[:, :, 3].reshape(-1, 3, 1, 1, 1)
    return ((y - y.floor() - 0.5).abs() < tol).any(1)


def _atlas():
    nib = pytest.importorskip("nibabel")
    paths = [os.path.join(TEMPLATES, f) for f in ("ch2.nii.gz", "aal.nii.gz")]
    if not all(os.path.exists(p) for p in paths):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    img, lab = (np.asarray(nib.load(p).dataobj) for p in paths)
    # Every second voxel (91 x 109 x 91): the test's speed, the atlas's 116 regions are kept.
    img = torch.from_numpy(img[::2, ::2, ::2].copy())[None].float()
    lab = torch.from_numpy(lab[::2, ::2, ::2].copy())[None]
    assert lab.dtype == torch.uint8
    return img, lab


@pytest.mark.parametrize("device", devices())
def test_exact_steps_then_elastic_nearest_equal_bytes(device, monkeypatch):
    # Flips and quarter turns move voxels exactly; with nearest sampling for both keys the
    # deformation reads the same voxel whether the exact steps ran first or are folded into
    # its map, so fused == step by step byte for byte, on the MRI and its label atlas.
    img, lab = _atlas()
    data = {"image": img.to(device), "label": lab.to(device)}

    def make():
        return [S.RandFlipd(KEYS, prob=0.5, spatial_axis=0), S.RandFlipd(KEYS, prob=0.5, spatial_axis=1),
                S.RandFlipd(KEYS, prob=0.5, spatial_axis=2), S.RandRotate90d(KEYS, prob=0.7, max_k=3,
                                                                             spatial_axes=(0, 2)),
                D.Rand3DElasticd(KEYS, sigma_range=(4, 6), magnitude_range=(2, 4), prob=0.9,
                                 rotate_range=(0.2, 0.1, 0.1), mode="nearest", padding_mode="border")]

    for seed in range(4):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 4, "resample_deformed": 1}  # one gather per step
        assert calls == {"resample": 0, "resample_deformed": 1}  # four steps + the deformation: one
        assert same_draws and same_u, seed
        assert out["label"].dtype == torch.uint8 and out["image"].dtype == torch.float32
        # Equal bytes except at near-ties of the nearest rule (a handful of the 900k voxels,
        # each checked to be one): float32 coordinates of the fused map round differently by
        # one ulp from those of the deformation alone.
        ties = _near_ties(_run_both.deformation, "image", out["image"].shape[1:])[0]
        for k in KEYS:
            differ = (out[k] != ref[k]).any(0).cpu()
            assert int(differ.sum()) <= 1e-5 * differ.numel(), (seed, k, int(differ.sum()))
            assert not (differ & ~ties).any(), (seed, k, differ.nonzero()[:5])
        assert not torch.equal(out["label"], data["label"]) and len(torch.unique(out["label"])) > 100


def _smooth_volume(n=2, shape=(40, 44, 36), amp=10.0, period=16.0):
    """Channel 0: a linear ramp (trilinear interpolation reproduces it exactly); channel 1:
    amp * (sin(w d) + sin(w h) + sin(w w)) + 40, w = 2 pi / period (|f_aa| <= amp w^2)."""
    idx = torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in shape], indexing="ij")
    w = 2 * np.pi / period
    ramp = 0.5 * idx[0] + 0.3 * idx[1] + 0.2 * idx[2] + 1.0
    waves = amp * (torch.sin(w * idx[0]) + torch.sin(w * idx[1] + 1.0) + torch.sin(w * idx[2] + 2.0)) + 40.0
    one = torch.stack([ramp, waves]).float()
    return one.expand(n, *one.shape).clone(), amp * w * w


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("field", ["fast", "exact"])
def test_affine_then_elastic_bilinear_within_interpolation_bound(device, field, monkeypatch):
    # Step by step interpolates twice (the affine's gather, then the deformation's), fused
    # once. Away from the borders (a key of ones, zero padded, is 1 where neither path read
    # padding) the two differ only by interpolation error:
    #  - on a linear ramp not at all (trilinear interpolation reproduces affine functions):
    #    float32 rounding of the 8-tap sums on values < 60 (about 8 ulp(60) = 3e-5 per gather,
    #    two gathers) and the weight of at most 1e-6 the mask lets fall on padding (6e-5):
    #    atol 2e-4;
    #  - on the sines, |fused - step| <= 2 e_f + e_g, e_f = (3/8) max|f_aa| the trilinear error
    #    bound of f, e_g = (3/8) max|f_aa| s^2 that of f after the affine (columns of norm <= s,
    #    s = 1.1 the largest scale): fused errs by e_f, step by step by e_f in the intermediate
    #    (carried through convex weights) plus e_g.
    img, fdd = _smooth_volume()
    ones = torch.ones(img.shape[0], 1, *img.shape[2:])
    data = {"image": img.to(device), "ones": ones.to(device)}
    keys = ["image", "ones"]

    def make():
        return [S.RandFlipd(keys, prob=0.5, spatial_axis=1),
                S.RandAffined(keys, prob=1.0, rotate_range=(0.3, 0.2, 0.2), scale_range=0.1,
                              translate_range=2.0, padding_mode="zeros"),
                D.Rand3DElasticd(keys, sigma_range=(4, 6), magnitude_range=(1, 3), prob=1.0, field=field,
                                 rotate_range=0.1, padding_mode="zeros")]

    bound = 3.0 / 8.0 * fdd * (2.0 + 1.1 ** 2)
    for seed in range(3):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 2, "resample_deformed": 1}
        assert calls == {"resample": 0, "resample_deformed": 1}
        assert same_draws and same_u, seed
        inside = (ref["ones"][:, 0] > 1 - 1e-6) & (out["ones"][:, 0] > 1 - 1e-6)
        assert inside.float().mean() > 0.3, "too little of the volume away from the borders"
        o, r = out["image"].cpu().double(), ref["image"].cpu().double()
        assert torch.isfinite(o).all() and o[:, 0][inside.cpu()].abs().min() > 0
        ramp_err = (o[:, 0] - r[:, 0]).abs()[inside.cpu()].max().item()
        wave_err = (o[:, 1] - r[:, 1]).abs()[inside.cpu()].max().item()
        assert ramp_err < 2e-4, (seed, ramp_err)
        assert wave_err < bound, (seed, wave_err, bound)
        assert not torch.equal(o, img.double()), "nothing moved"


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("kind", ["grid", "rand_grid", "elastic_array"])
def test_other_deformations_fused_exact(device, kind, monkeypatch):
    # GridDistortiond, RandGridDistortiond and the array form Rand3DElastic close the group the
    # same way; exact steps + nearest: bytes.
    g = torch.Generator().manual_seed(3)
    img = torch.rand(2, 1, 24, 20, 24, generator=g).to(device)
    lab = (img * 7).to(torch.uint8)
    if kind == "elastic_array":
        data = lab

        def make():
            return [S.RandFlip(prob=0.5, spatial_axis=2), S.RandRotate90(prob=0.8, spatial_axes=(0, 2)),
                    D.Rand3DElastic((3, 4), (1, 2), prob=1.0, mode="nearest", padding_mode="zeros")]
    else:
        data = {"image": img, "label": lab}

        def make():
            steps = [S.RandFlipd(KEYS, prob=0.5, spatial_axis=0), S.Rotate90d(KEYS, k=1, spatial_axes=(0, 2))]
            if kind == "grid":
                return steps + [D.GridDistortiond(KEYS, num_cells=3, distort_steps=[(1.0, 1.1, 0.9, 1.0)] * 3,
                                                  mode="nearest")]
            return steps + [D.RandGridDistortiond(KEYS, num_cells=(2, 3, 4), prob=1.0, distort_limit=0.2,
                                                  mode="nearest")]

    for seed in range(3):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 2, "resample_deformed": 1}
        assert calls == {"resample": 0, "resample_deformed": 1}
        assert same_draws and same_u
        pairs = [(out, ref)] if kind == "elastic_array" else [(out[k], ref[k]) for k in KEYS]
        for o, r in pairs:
            assert o.dtype == r.dtype and torch.equal(o, r), seed
        moved = out if kind == "elastic_array" else out["label"]
        assert not torch.equal(moved, lab)


@pytest.mark.parametrize("case", ["mode_differs", "deformation_first", "exact_field", "steps_after",
                                  "key_not_in_group"])
def test_unfused_cases_and_steps_after(case, monkeypatch):
    # What does not fuse runs as the transforms themselves (same bytes, their launches); flips
    # and crops right after a B-spline deformation fold into its launch, other steps after it
    # start the next group (a quarter turn here).
    g = torch.Generator().manual_seed(5)
    img = torch.rand(2, 1, 20, 24, 20, generator=g)
    data = {"image": img, "label": (img * 5).to(torch.uint8)}
    elastic = dict(sigma_range=(3, 4), magnitude_range=(1, 2), prob=1.0, padding_mode="border")
    flip = [S.RandFlipd(KEYS, prob=0.6, spatial_axis=0)]
    if case == "mode_differs":  # the affine group is bilinear, the label's deformation nearest
        steps = [S.RandAffined(KEYS, prob=1.0, rotate_range=0.2, padding_mode="border"),
                 D.Rand3DElasticd(KEYS, mode=("bilinear", "nearest"), **elastic)]
        expect = ({"resample": 1, "resample_deformed": 1}, {"resample": 1, "resample_deformed": 1})
    elif case == "deformation_first":  # the flip after it folds into its launch
        steps = [D.Rand3DElasticd(KEYS, mode="nearest", **elastic)] + flip
        expect = ({"resample": 1, "resample_deformed": 1}, {"resample": 0, "resample_deformed": 1})
    elif case == "exact_field":  # a dense field (MONAI's exact mode) is not rewritten: the flip runs after
        steps = [D.Rand3DElasticd(KEYS, mode="nearest", field="exact", **elastic)] + flip
        expect = ({"resample": 1, "resample_deformed": 1}, {"resample": 1, "resample_deformed": 1})
    elif case == "steps_after":
        steps = flip + [D.Rand3DElasticd(KEYS, mode="nearest", **elastic)] + flip + \
            [S.RandRotate90d(KEYS, prob=1.0, spatial_axes=(0, 2))]
        expect = ({"resample": 3, "resample_deformed": 1}, {"resample": 1, "resample_deformed": 1})
    else:  # only the image has a pending step: the label is deformed in the same launch
        steps = [S.RandFlipd(["image"], prob=1.0, spatial_axis=1), D.Rand3DElasticd(KEYS, mode="nearest", **elastic)]
        expect = ({"resample": 1, "resample_deformed": 1}, {"resample": 0, "resample_deformed": 2})

    def make():  # fresh transforms per run (each run wraps their draws)
        return [copy.deepcopy(t) for t in steps]

    ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, 11, monkeypatch)
    assert (ref_calls, calls) == expect
    assert same_draws and same_u
    for k in KEYS:
        assert out[k].dtype == ref[k].dtype and torch.equal(out[k], ref[k]), k
    assert not torch.equal(out["image"], img)


def test_tracked_metatensor_records_and_affine(monkeypatch):
    # A tracked MetaTensor gets the affine of the steps run one by one and one record of the
    # group before the deformation (its product map, undone by Compose.inverse in one launch);
    # the deformation writes none, as when called on its own.
    monai_data = pytest.importorskip("monai.data")
    g = torch.Generator().manual_seed(2)
    aff = torch.tensor([[0.0, -1.5, 0.0, 10.0], [2.0, 0.0, 0.0, -5.0], [0.0, 0.0, 1.0, 3.0], [0, 0, 0, 1.0]],
                       dtype=torch.float64)
    img = torch.rand(1, 18, 20, 22, generator=g)

    def make():
        return [S.RandFlipd(KEYS, prob=1.0, spatial_axis=2), S.Rotate90d(KEYS, k=1, spatial_axes=(1, 2)),
                D.Rand3DElasticd(KEYS, sigma_range=(3, 4), magnitude_range=(1, 2), prob=1.0, mode="nearest",
                                 padding_mode="zeros")]

    data = {"image": monai_data.MetaTensor(img, affine=aff.clone()),
            "label": monai_data.MetaTensor((img * 4).to(torch.uint8), affine=aff.clone())}
    ref, out, _, calls, same_draws, _ = _run_both(make, data, 4, monkeypatch)
    assert calls == {"resample": 0, "resample_deformed": 1} and same_draws
    ties = _near_ties(_run_both.deformation, "image", out["image"].shape[1:])[0]
    for k in KEYS:  # exact steps + nearest: equal but at near-ties (see the first test)
        assert not ((out[k] != ref[k]).any(0) & ~ties).any()
        assert out[k].shape == (1, 18, 22, 20) and out[k].dtype == ref[k].dtype
        assert torch.allclose(out[k].affine.double(), ref[k].affine.double(), atol=1e-12)
        assert not torch.allclose(out[k].affine.double(), aff)
        (rec,) = out[k].applied_operations
        assert [m["class"] for m in rec["extra_info"]["transforms"]] == ["RandFlipd", "Rotate90d"]
        flip_rec, affine_rec = ref[k].applied_operations  # step by step: one record per step
        product = flip_rec["extra_info"]["maps"] @ affine_rec["extra_info"]["maps"]
        assert torch.allclose(rec["extra_info"]["maps"], product, atol=1e-12)
    back = _run_both.compose.inverse(out)  # the group in one launch; the deformation is skipped
    for k in KEYS:
        assert back[k].shape == data[k].shape and not back[k].applied_operations
        assert torch.allclose(back[k].affine.double(), aff, atol=1e-12)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("image_mode", ["nearest", "bilinear"])
def test_crop_sampler_then_deformation_one_gather_from_the_volume(device, image_mode, monkeypatch):
    # A crop sampler (as_batch) before a deformation: crop, flip and deformation are one gather
    # from the full volume (resample_deformed with the crops' starts), the same draws and
    # fields as step by step. Checked against float64 nearest sampling of the full volume at
    # start + M (x + u(x)) (M: the flip times the deformation's map, u its field): equal bytes
    # but at near-ties; inside the patch window also the step-by-step bytes (crop, flip, then
    # the deformation of the cut patch); beyond it the fused gather reads the volume's real
    # voxels where the step-by-step one reads the patch's reflection padding. A bilinear image:
    # within float32 coordinate rounding of scipy's map_coordinates(order=1) at those points.
    g = torch.Generator().manual_seed(1)
    img = (torch.rand(1, 1, 40, 40, 36, generator=g) + 1.0).to(device)
    lab = (torch.rand(1, 1, 40, 40, 36, generator=g) * 5).to(torch.uint8)
    lab[:, :, 10:30, 12:28, 8:26] = 7
    lab = lab.to(device)
    launched = []
    real_launch = D._fused_launch

    def spy(xs, mats, plan, opts, starts=None):
        launched.append((mats.clone(), starts))
        return real_launch(xs, mats, plan, opts, starts)

    monkeypatch.setattr(D, "_fused_launch", spy)

    def make():
        return [C.RandCropByPosNegLabeld(KEYS, label_key="label", spatial_size=(16, 16, 16), num_samples=3,
                                         as_batch=True),
                S.RandFlipd(KEYS, prob=0.5, spatial_axis=0),
                D.Rand3DElasticd(KEYS, sigma_range=(3, 4), magnitude_range=(4, 6), prob=1.0,
                                 mode=(image_mode, "nearest"), rotate_range=(0.4, 0.4, 0.4))]

    for seed in (3, 4):
        launched.clear()
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, {"image": img, "label": lab}, seed,
                                                                   monkeypatch)
        assert same_draws and same_u
        assert ref_calls["resample_deformed"] == 1 and calls == {"resample": 0, "resample_deformed": 1}
        ((mats, starts),) = launched
        assert starts is not None and starts.shape == (1, 3, 3)
        u = _run_both.deformation.displacement_field("image").cpu().double()  # (3, 3, 16, 16, 16)
        grid = torch.stack(torch.meshgrid(*[torch.arange(16, dtype=torch.float64)] * 3, indexing="ij"))
        m = mats.cpu().double()
        p = torch.einsum("nij,njdhw->nidhw", m[:, :, :3], grid[None] + u) + m[:, :, 3].reshape(-1, 3, 1, 1, 1)
        y = p + starts.cpu().double().reshape(-1, 3, 1, 1, 1)  # volume coordinates
        idx = torch.round(y).long()  # round half to even, as the kernel's nearest
        size = torch.tensor(img.shape[2:]).reshape(1, 3, 1, 1, 1)
        tie = ((y - y.floor() - 0.5).abs() < 1e-4).any(1)
        inside_vol = ((idx >= 0) & (idx < size)).all(1) & ~tie
        inside_win = ((p >= -0.5) & (p < 15.5)).all(1) & ~tie
        assert inside_vol.float().mean() > 0.9 and (~inside_win & inside_vol).any()
        if image_mode == "bilinear":
            ndimage = pytest.importorskip("scipy.ndimage")
            whole = ((y.floor() >= 0) & (y.floor() + 1 < size)).all(1)  # all 8 taps inside the volume
            want = torch.from_numpy(np.stack([ndimage.map_coordinates(img[0, 0].cpu().double().numpy(),
                                                                      yn.reshape(3, -1).numpy(), order=1)
                                              for yn in y])).reshape(whole.shape)
            got = out["image"][:, 0].cpu().double()
            assert whole.float().mean() > 0.9
            assert (got - want)[whole].abs().max() < 1e-4  # values in [1, 2], coordinates < 40
        for k, vol in (("image", img), ("label", lab)) if image_mode == "nearest" else (("label", lab),):
            v = vol[0, 0].cpu()
            c = idx.clamp_min(0)
            c = torch.minimum(c, size - 1)
            want = v[c[:, 0], c[:, 1], c[:, 2]]
            got = out[k][:, 0].cpu()
            assert torch.equal(got[inside_vol], want[inside_vol]), (seed, k)
            assert torch.equal(got[inside_win], ref[k][:, 0].cpu()[inside_win]), (seed, k)
        outside = ~inside_win & inside_vol
        assert not torch.equal(out["image"][:, 0].cpu()[outside], ref["image"][:, 0].cpu()[outside])
        if image_mode == "bilinear":  # inside the window (and away from it): step by step's, one interpolation
            deep = ((p >= 1) & (p < 14)).all(1)
            assert (out["image"] - ref["image"])[:, 0].cpu()[deep].abs().max() < 1e-4


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("form", ["dict", "array", "torchio", "after_exact", "patches"])
def test_flips_and_crops_after_a_deformation_fold_into_its_launch(device, form, monkeypatch):
    # Flips and crops right after a B-spline deformation are folded into its gather: the map
    # times the flips' / crop's map F, the control index through F, the flipped displacement
    # components negated. Against the steps run one by one (the deformation's gather, then exact
    # copies): nearest bytes equal but at float32 near-ties (the fused coordinates are the same
    # numbers computed from other matrix entries), bilinear within coordinate rounding. Per-sample
    # random flips (batch of 4), a crop, and a quarter turn after them that starts the next group.
    g = torch.Generator().manual_seed(7)
    img = _smooth_volume(4, (30, 34, 28))[0][:, 1:].contiguous()
    lab = (img / 20).to(torch.uint8)
    data = {"image": img.to(device), "label": lab.to(device)}
    elastic = dict(sigma_range=(3, 4), magnitude_range=(3, 5), prob=1.0, rotate_range=(0.2, 0.2, 0.2),
                   padding_mode="border")
    after = [S.RandFlipd(KEYS, prob=0.5, spatial_axis=0), S.RandFlipd(KEYS, prob=0.5, spatial_axis=2),
             S.CenterSpatialCropd(KEYS, (20, 20, 19)), S.RandAxisFlipd(KEYS, prob=0.8),
             S.RandRotate90d(KEYS, prob=1.0, spatial_axes=(0, 1))]
    if form == "array":
        data = data["image"]
        steps = [D.Rand3DElastic(mode="bilinear", **elastic), S.RandFlip(prob=0.5, spatial_axis=0),
                 S.SpatialCrop(roi_start=(2, 3, 4), roi_end=(25, 30, 26)), S.RandFlip(prob=0.5, spatial_axis=(1, 2))]
    elif form == "torchio":
        steps = [D.RandomElasticDeformation(num_control_points=6, max_displacement=3.0, label_keys=("label",))] + after
    elif form == "after_exact":  # exact steps before join the launch too (nearest: no second interpolation)
        steps = [S.Rotate90d(KEYS, k=2, spatial_axes=(0, 1)), S.RandFlipd(KEYS, prob=0.5, spatial_axis=1),
                 D.Rand3DElasticd(KEYS, mode="nearest", **elastic)] + after
    elif form == "patches":
        data["label"][:, :, 8:20, 10:22, 8:20] = 9
        steps = [C.RandCropByPosNegLabeld(KEYS, label_key="label", spatial_size=(18, 18, 18), num_samples=2,
                                          as_batch=True),
                 D.Rand3DElasticd(KEYS, mode=("bilinear", "nearest"), **elastic)] + after[:2]
    else:
        steps = [D.Rand3DElasticd(KEYS, mode=("bilinear", "nearest"), **elastic)] + after

    def make():
        return [copy.deepcopy(t) for t in steps]

    folds = []
    real_fold = S._fold_after

    def spy(*args, **kwargs):
        r = real_fold(*args, **kwargs)
        folds.append(0 if r is None else r[0])
        return r

    monkeypatch.setattr(S, "_fold_after", spy)
    for seed in (1, 2):
        folds.clear()
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert folds == [3 if form == "array" else 2 if form == "patches" else 4], folds  # all but the turn
        # one gather for the deformation and everything folded; the quarter turn after it, one more
        expect = {"resample": 0 if form in ("array", "patches") else 1, "resample_deformed": 1}
        assert calls == expect and same_draws and same_u, (seed, calls)
        pairs = [(out, ref, "image")] if form == "array" else [(out[k], ref[k], k) for k in KEYS]
        for o, r, k in pairs:
            assert o.shape == r.shape and o.dtype == r.dtype, (seed, k)
            if form == "patches":  # the step-by-step deformation pads at the patch's faces, the fused reads on
                o, r = o[..., 6:-6, 6:-6, 6:-6], r[..., 6:-6, 6:-6, 6:-6]
            if k == "label" or form == "after_exact":
                differ = (o != r).float().mean().item()
                assert differ <= 1e-4, (seed, differ)
            else:
                bound = _coordinate_rounding_bound(img, img.shape[2:])
                assert (o - r).abs().max().item() <= bound, (seed, (o - r).abs().max().item(), bound)
        o0 = out if form == "array" else out["image"]
        assert not torch.equal(o0[0], o0[1])  # per-sample draws


# ---------------- TorchIO RandomElasticDeformation closing the group ----------------
def _coordinate_rounding_bound(x: torch.Tensor, sizes) -> float:
    """|fused - step by step| for linear sampling after exact steps: both interpolate the same
    voxels; the fused sample point M (x + u) carries float32 rounding of the map (a few ulp of
    the largest index: 8 * 2^-24 * max size, generous), and a trilinear interpolant moves by at
    most that times the sum over the axes of its largest voxel difference (<= 3 (max - min));
    plus float32 rounding of the two 8-tap sums (8 ulp(max |x|) each)."""
    lo, hi = x.min().item(), x.max().item()
    delta = 8.0 * 2.0 ** -24 * max(sizes)
    return 3.0 * delta * (hi - lo) + 16.0 * 2.0 ** -23 * max(abs(lo), abs(hi))


def _torchio(**kw):
    return D.RandomElasticDeformation(**kw)


@pytest.mark.parametrize("device", devices())
def test_torchio_exact_steps_then_elastic(device, monkeypatch):
    # TorchIO's dictionary form after flips and a quarter turn (exact): one launch, the same
    # draws and control points; the integer atlas and a float mask listed in label_keys
    # (label_interpolation nearest) equal but at near-ties (see the first test), the float MRI
    # (image_interpolation linear) within the float32 rounding of the fused sample points.
    img, lab = _atlas()
    data = {"image": img.to(device), "label": lab.to(device), "mask": (lab > 40).float().to(device)}
    keys = KEYS + ["mask"]

    def make():
        return [S.RandFlipd(keys, prob=0.5, spatial_axis=0), S.RandFlipd(keys, prob=0.5, spatial_axis=1),
                S.RandFlipd(keys, prob=0.5, spatial_axis=2), S.RandRotate90d(keys, prob=0.7, max_k=3,
                                                                             spatial_axes=(0, 2)),
                _torchio(num_control_points=(7, 8, 6), max_displacement=(5, 4, 6), label_keys=["mask"])]

    bound = _coordinate_rounding_bound(img, img.shape[1:])
    for seed in range(4):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 4, "resample_deformed": 1}
        assert calls == {"resample": 0, "resample_deformed": 1}
        assert same_draws and same_u, seed
        deform = _run_both.deformation
        assert deform._fields["image"] is deform._fields["label"] is deform._fields["mask"]  # one plan
        assert out["label"].dtype == torch.uint8 and out["image"].dtype == out["mask"].dtype == torch.float32
        ties = _near_ties(deform, "label", out["label"].shape[1:])[0]
        for k in ("label", "mask"):
            differ = (out[k] != ref[k]).any(0).cpu()
            assert int(differ.sum()) <= 1e-5 * differ.numel(), (seed, k, int(differ.sum()))
            assert not (differ & ~ties).any(), (seed, k, differ.nonzero()[:5])
        assert set(out["mask"].unique().tolist()) == {0.0, 1.0}  # nearest: no blended mask values
        err = (out["image"] - ref["image"]).abs().max().item()
        assert err <= bound, (seed, err, bound)
        assert not torch.equal(out["label"], data["label"]) and len(torch.unique(out["label"])) > 100


def _metatensor_ch2():
    """ch2 + aal at every second voxel as MONAI MetaTensors with the NIfTI affine (2 mm)."""
    nib = pytest.importorskip("nibabel")
    monai_data = pytest.importorskip("monai.data")
    img, lab = _atlas()
    aff = torch.from_numpy(nib.load(os.path.join(TEMPLATES, "ch2.nii.gz")).affine @ np.diag([2.0, 2.0, 2.0, 1.0]))
    return monai_data.MetaTensor(img, affine=aff.clone()), monai_data.MetaTensor(lab, affine=aff.clone()), aff


def test_torchio_spacing_from_the_composed_affine(monkeypatch):
    # The deformation's max_displacement is in mm: after a Spacing step its input has the new
    # spacing, and the fused call must convert with that one (the group's affine), not the
    # 2 mm of the tensor it gathers from. Checked against a RandomElasticDeformation given
    # spacing=pixdim explicitly, replaying the same draw on a tensor of the Spacing output's
    # size (independent of how the affine is carried): float32 scale m / s, rtol 1e-6.
    nib = pytest.importorskip("nibabel")
    img, lab, aff = _metatensor_ch2()
    pixdim = (3.0, 2.5, 3.5)
    kw = dict(num_control_points=(7, 6, 8), max_displacement=(6.0, 4.0, 8.0))

    def make():
        return [S.Spacingd(KEYS, pixdim=pixdim, mode=("bilinear", "nearest")),
                S.RandFlipd(KEYS, prob=1.0, spatial_axis=1), _torchio(**kw)]

    data = {"image": img, "label": lab}
    for seed in range(2):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 2, "resample_deformed": 1}
        assert calls == {"resample": 0, "resample_deformed": 1}
        assert same_draws and same_u, seed
        for k in KEYS:
            assert out[k].shape == ref[k].shape and out[k].dtype == ref[k].dtype
            assert torch.allclose(out[k].affine.double(), ref[k].affine.double(), atol=1e-12)
            assert np.allclose(nib.affines.voxel_sizes(out[k].affine.double().numpy()), pixdim)
        deform = _run_both.deformation
        u = deform.displacement_field("image")
        params = deform._last
        shape = tuple(out["image"].shape[1:])
        for spacing, same in ((pixdim, True), ((2.0, 2.0, 2.0), False)):
            explicit = _torchio(spacing=spacing, **kw)
            with explicit._replaying(params):
                explicit(torch.zeros(1, *shape))
            want = explicit.displacement_field()
            assert torch.allclose(u, want, rtol=1e-6, atol=1e-7) == same, (seed, spacing)
        mm = u[0].double().abs().flatten(1).max(1).values * torch.tensor(pixdim, dtype=torch.float64)
        assert (mm <= torch.tensor(kw["max_displacement"], dtype=torch.float64) + 1e-5).all()
        assert (mm > 0.3 * torch.tensor(kw["max_displacement"], dtype=torch.float64)).all()
        assert set(out["label"].unique().tolist()) <= set(lab.unique().tolist())
        assert torch.isfinite(out["image"]).all() and out["image"].abs().max() > 0
        back = _run_both.compose.inverse(out)  # the Spacing + flip group; the deformation is skipped
        for k in KEYS:
            assert back[k].shape == data[k].shape and torch.allclose(back[k].affine.double(), aff, atol=1e-9)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("step", ["affine", "spacing"])
def test_torchio_affine_or_spacing_then_elastic_within_interpolation_bound(device, step, monkeypatch):
    # One interpolation (fused) vs two (step by step); the bound of
    # test_affine_then_elastic_bilinear_within_interpolation_bound: 2 e_f + e_g with s the
    # largest column norm of the step's index map (RandAffined: scale 1.1; Spacingd from
    # (1.2, 0.9, 1.1) mm to 1 mm: 1 / 0.9), the ramp within 2e-4. An integer key that the
    # bilinear affine makes float is an image to TorchIO's dictionary form (linear), in both
    # paths (else the groups' modes would differ and the Compose would not fuse).
    n = 2 if step == "affine" else 1
    img, fdd = _smooth_volume(n=n)
    ones = torch.ones(n, 1, *img.shape[2:])
    data = {"image": img.to(device), "ones": ones.to(device)}
    keys = ["image", "ones"]
    if step == "affine":
        data["count"] = (img[:, 1:] / 10).to(torch.uint8).to(device)
        keys = keys + ["count"]
        first = [S.RandFlipd(keys, prob=0.5, spatial_axis=1),
                 S.RandAffined(keys, prob=1.0, rotate_range=(0.3, 0.2, 0.2), scale_range=0.1, translate_range=2.0,
                               padding_mode="zeros")]
        s = 1.1
    else:
        monai_data = pytest.importorskip("monai.data")
        src = (1.2, 0.9, 1.1)
        aff = torch.diag(torch.tensor([*src, 1.0], dtype=torch.float64))
        aff[:3, 3] = torch.tensor([-20.0, 5.0, 3.0], dtype=torch.float64)
        data = {k: monai_data.MetaTensor(v[0], affine=aff.clone()) for k, v in data.items()}
        first = [S.RandFlipd(keys, prob=0.5, spatial_axis=1),
                 S.Spacingd(keys, pixdim=(1.0, 1.0, 1.0), padding_mode="zeros")]
        s = 1.0 / min(src)

    def make():
        return [copy.deepcopy(t) for t in first] + [
            _torchio(num_control_points=6, max_displacement=3.0, locked_borders=1, padding_mode="zeros")]

    bound = 3.0 / 8.0 * fdd * (2.0 + s ** 2)
    for seed in range(3):
        ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, seed, monkeypatch)
        assert ref_calls == {"resample": 2, "resample_deformed": 1}
        assert calls == {"resample": 0, "resample_deformed": 1}
        assert same_draws and same_u, seed
        o, r = (out["image"].cpu().double(), ref["image"].cpu().double())
        one_o, one_r = out["ones"].cpu(), ref["ones"].cpu()
        if step == "spacing":
            o, r, one_o, one_r = o[None], r[None], one_o[None], one_r[None]
        else:
            assert out["count"].dtype == ref["count"].dtype == torch.float32
        inside = (one_r[:, 0] > 1 - 1e-6) & (one_o[:, 0] > 1 - 1e-6)
        assert inside.float().mean() > 0.3, "too little of the volume away from the borders"
        assert torch.isfinite(o).all() and o[:, 0][inside].abs().min() > 0
        ramp_err = (o[:, 0] - r[:, 0]).abs()[inside].max().item()
        wave_err = (o[:, 1] - r[:, 1]).abs()[inside].max().item()
        assert ramp_err < 2e-4, (seed, ramp_err)
        assert wave_err < bound, (seed, wave_err, bound)
        assert _run_both.deformation.displacement_field().abs().max() > 1.0, "nothing moved"


def _folding_messages(make, data, fuse) -> tuple:
    """(the folding warnings of one Compose run, its output)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = T.Compose(make(), fuse_spatial=fuse).set_random_state(0)(data)
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
            and "folding" in str(w.message)], out


@pytest.mark.parametrize("form", ["dict", "array"])
def test_torchio_folding_warning_on_the_fused_geometry(form, monkeypatch):
    # The folding check looks at the control spacing of the deformation's own input: after a
    # quarter turn of a (40, 20, 30) volume, that of (20, 40, 30). The fused path warns as the
    # unfused one, and as TorchIO itself does for an image of that shape (its message names
    # the axes), not as for the shape before the turn. Outputs: linear after an exact step,
    # within the float32 rounding of the fused sample points (_coordinate_rounding_bound).
    tio = pytest.importorskip("torchio")
    calls = count_calls(monkeypatch, "resample", "resample_deformed")
    g = torch.Generator().manual_seed(4)
    x = torch.rand(1, 40, 20, 30, generator=g)
    kw = dict(num_control_points=7, max_displacement=4.0)
    if form == "dict":
        data = {"image": x}

        def make():
            return [S.Rotate90d(["image"], k=1, spatial_axes=(0, 1)), _torchio(**kw)]
    else:
        data = x

        def make():
            return [S.Rotate90(k=1, spatial_axes=(0, 1)), _torchio(**kw)]

    def torchio_messages(shape):
        subject = tio.Subject(image=tio.ScalarImage(tensor=torch.rand(1, *shape, generator=g)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tio.RandomElasticDeformation(**kw)(subject)
        return [str(w.message) for w in caught if "folding" in str(w.message)]

    want, before = torchio_messages((20, 40, 30)), torchio_messages((40, 20, 30))
    assert len(want) == 1 and want != before
    unfused, ref = _folding_messages(make, data, False)
    calls.update(resample=0, resample_deformed=0)
    fused, out = _folding_messages(make, data, True)
    assert unfused == fused == want
    assert calls == {"resample": 0, "resample_deformed": 1}
    if form == "dict":
        ref, out = ref["image"], out["image"]
    assert out.shape == ref.shape == (1, 20, 40, 30)
    assert (out - ref).abs().max().item() <= _coordinate_rounding_bound(x, x.shape[1:])
    assert (out - torch.rot90(x, 1, (1, 2))).abs().mean() > 0.05  # deformed, not just turned (MONAI: torch.rot90)


@pytest.mark.parametrize("case", ["crop", "center_crop", "no_displacement", "mode_differs"])
def test_torchio_unfused_cases(case, monkeypatch):
    # Where fusion would change what TorchIO's call computes, the Compose runs the call itself
    # (the group gathered first): after a crop (the call lays its grid and locked borders over
    # the window and pads beyond it), with no displacement (the call returns its input and
    # draws nothing), when the group's interpolation differs. Same bytes; the deformation's
    # own launch (the steps before it still one group).
    g = torch.Generator().manual_seed(6)
    img = torch.rand(1, 1, 24, 28, 22, generator=g)
    data = {"image": img, "label": (img * 5).to(torch.uint8)}
    kw = dict(num_control_points=6, max_displacement=2.0)
    flip = S.RandFlipd(KEYS, prob=0.6, spatial_axis=0)
    if case == "crop":
        steps = [flip, S.SpatialCropd(KEYS, roi_start=(2, 3, 1), roi_end=(20, 25, 21)), _torchio(**kw)]
        expect = ({"resample": 2, "resample_deformed": 1}, {"resample": 1, "resample_deformed": 1})
    elif case == "center_crop":
        steps = [S.CenterSpatialCropd(KEYS, roi_size=(16, 20, 18)), flip, _torchio(**kw)]
        expect = ({"resample": 2, "resample_deformed": 1}, {"resample": 1, "resample_deformed": 1})
    elif case == "no_displacement":
        steps = [flip, _torchio(num_control_points=6, max_displacement=0.0)]
        expect = ({"resample": 1, "resample_deformed": 0},) * 2
    else:  # the affine group is nearest for the image, TorchIO's image_interpolation linear
        steps = [S.RandAffined(KEYS, prob=1.0, rotate_range=0.2, mode="nearest", padding_mode="border"),
                 _torchio(**kw)]
        expect = ({"resample": 1, "resample_deformed": 1},) * 2

    def make():
        return [copy.deepcopy(t) for t in steps]

    ref, out, ref_calls, calls, same_draws, same_u = _run_both(make, data, 2, monkeypatch)
    assert (ref_calls, calls) == expect  # the group before: one launch when fused (the crop's own group)
    assert same_draws and same_u
    for k in KEYS:
        assert out[k].dtype == ref[k].dtype and torch.equal(out[k], ref[k]), k
