"""Lazy spatial composition in voxaug.transforms.Compose: consecutive spatial index maps (a
following crop included) fuse into one per-sample map and one resample launch."""
import numpy as np
import pytest
import torch

from voxaug import ops
from voxaug import spatial as S
from voxaug import transforms as T


def _smooth(n, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    grids = torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in size], indexing="ij")
    out = []
    for _ in range(n):
        f = torch.rand(3, generator=g) * 0.25 + 0.1
        p = torch.rand(3, generator=g) * 6
        v = torch.sin(f[0] * grids[0] + p[0]) * torch.cos(f[1] * grids[1] + p[1])
        v = v + 0.5 * torch.sin(f[2] * grids[2] + p[2])
        out.append(v[None])
    return torch.stack(out)


def _run_both(make, data, resample_launches):
    """(fused result, launches, step-by-step result, launches) with identically seeded transforms."""
    resample_launches[0] = 0
    fused = T.Compose(make())(data)
    n_fused = resample_launches[0]
    resample_launches[0] = 0
    steps = T.Compose(make(), fuse_spatial=False)(data)
    return fused, n_fused, steps, resample_launches[0]


def _exact_chain():
    return [T.RandFlip(prob=0.5, spatial_axis=0, seed=1), T.Rotate90(1, (1, 2)),
            T.RandRotate90(prob=0.7, max_k=3, spatial_axes=(0, 1), seed=2), T.Flip(spatial_axis=[1, 2]),
            T.SpatialCrop(roi_start=[1, 0, 2], roi_end=[7, 6, 40]), T.CenterSpatialCrop([4, 5, -1])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16])
def test_exact_maps_fuse_bit_identical(resample_launches, dtype):
    x = (torch.randn(4, 2, 8, 9, 8) * 100).to(dtype)
    fused, n_fused, steps, n_steps = _run_both(_exact_chain, x, resample_launches)
    assert n_fused == 1 and n_steps == 6
    assert fused.dtype == dtype and fused.shape == steps.shape == (4, 2, 4, 5, 7)
    assert torch.equal(fused, steps)


def test_crops_match_monai_slicing():
    monai = pytest.importorskip("monai.transforms")
    x = torch.randn(2, 9, 10, 11)
    for kw in [dict(roi_start=[1, 2, 3], roi_end=[5, 20, 7]), dict(roi_center=[4, 1, 9], roi_size=[4, 6, 5]),
               dict(roi_slices=[slice(2, -1), slice(None, 4)]), dict(roi_center=5, roi_size=3)]:
        ref = monai.SpatialCrop(**kw)(x)
        out = T.SpatialCrop(**kw)(x)
        assert out.shape == ref.shape and torch.equal(out, ref.as_tensor())
    for roi in ([4, 5, -1], 3, [20, 2, 2]):
        ref = monai.CenterSpatialCrop(roi)(x)
        assert torch.equal(T.CenterSpatialCrop(roi)(x), ref.as_tensor())


def test_meta_tensor_orientation_and_crops_fuse():
    mdata = pytest.importorskip("monai.data")
    aff = torch.tensor([[2.0, 0, 0, -10], [0, 1.5, 0, 3], [0, 0, 1, 7], [0, 0, 0, 1]], dtype=torch.float64)
    img = mdata.MetaTensor(torch.randn(1, 7, 8, 9), affine=aff)

    def make():
        return [T.Orientation("LPI"), T.Flip(1), T.SpatialCrop(roi_center=[3, 4, 4], roi_size=[4, 4, 5]),
                T.Rotate90(1, (0, 2))]

    fused = T.Compose(make())(img)
    steps = T.Compose(make(), fuse_spatial=False)(img)
    assert torch.equal(fused.as_tensor(), steps.as_tensor())
    assert torch.allclose(fused.affine, steps.affine, atol=1e-12)
    # And as MONAI computes it (MONAI's crops / flips / orientation on the same MetaTensor).
    monai = pytest.importorskip("monai.transforms")
    ref = monai.Compose([monai.Orientation("LPI"), monai.Flip(1),
                         monai.SpatialCrop(roi_center=[3, 4, 4], roi_size=[4, 4, 5]), monai.Rotate90(1, (0, 2))])(img)
    assert torch.equal(fused.as_tensor(), ref.as_tensor())
    assert torch.allclose(fused.affine, ref.affine.to(torch.float64), atol=1e-6)


def _warp_chain(seed=3):
    return [T.RandRotate(range_x=0.4, range_z=0.2, prob=1.0, seed=seed), T.Zoom(1.3, mode="trilinear", keep_size=True),
            T.CenterSpatialCrop([12, 12, 12])]


def test_rotate_zoom_crop_is_one_gather_of_the_product_map(resample_launches):
    n, size = 3, (20, 22, 24)
    x = _smooth(n, size)
    resample_launches[0] = 0
    fused = T.Compose(_warp_chain())(x)
    assert resample_launches[0] == 1 and fused.shape == (n, 1, 12, 12, 12)
    # The product of the three maps, built independently, in one launch: bit-identical.
    rot, zoom, crop = _warp_chain()
    params = rot.draw_params(n)
    g1 = rot._geometry(size, n, params, rot._options())
    g2 = zoom._geometry(g1.out_size, n, None, S._for_input(zoom._options(), x))
    g3 = crop._geometry(g2.out_size, n, None, crop._options())
    total = S._square(g1.mats) @ S._square(g2.mats) @ S._square(g3.mats)  # out -> in: first @ ... @ last
    (ref,) = ops.resample([x], total[:, :3].contiguous(), g3.out_size, ["linear"], ["border"])
    assert torch.equal(fused, ref)
    # A single Affine whose (MONAI-convention, centred) matrix has that index map: same result up
    # to the float rounding of re-deriving the matrix (1e-5).
    for i in range(n):
        t_in = S._translate([(s - 1) / 2 for s in size])
        f_in = np.diag([s / max(2, s) for s in size] + [1.0])
        t_out = S._translate([-(s - 1) / 2 for s in g3.out_size])
        a = np.linalg.solve(t_in @ f_in, total[i].numpy()) @ np.linalg.inv(t_out)
        one = T.Affine(affine=a, spatial_size=g3.out_size, padding_mode="border", image_only=True)(x[i])
        assert (one - fused[i]).abs().max() < 1e-5


def test_rotate_zoom_crop_close_to_step_by_step(resample_launches):
    n = 3
    x = _smooth(n, (20, 22, 24), seed=1)
    fused, n_fused, steps, n_steps = _run_both(_warp_chain, x, resample_launches)
    assert n_fused == 1 and n_steps == 3
    # One linear interpolation instead of two, on a smooth field (amplitude 1.5, frequencies
    # <= 0.35 rad / voxel, so |f''| / 8 ~ 0.025 per linear interpolation): the crop lies far
    # from every border, so only interpolation error differs. Tolerance 0.04 max, 0.006 mean.
    err = (fused - steps).abs()
    assert err.max().item() < 0.04 and err.mean().item() < 0.006, (err.max(), err.mean())
    # The composition order matters: last @ ... @ first is far off.
    rot, zoom, crop = _warp_chain()
    params = rot.draw_params(n)
    g1 = rot._geometry(x.shape[2:], n, params, rot._options())
    g2 = zoom._geometry(g1.out_size, n, None, S._for_input(zoom._options(), x))
    g3 = crop._geometry(g2.out_size, n, None, crop._options())
    wrong = S._square(g3.mats) @ S._square(g2.mats) @ S._square(g1.mats)
    (bad,) = ops.resample([x], wrong[:, :3].contiguous(), g3.out_size, ["linear"], ["border"])
    assert (bad - steps).abs().max().item() > 10 * err.max().item()


def test_meta_affine_composes_through_fused_warp():
    mdata = pytest.importorskip("monai.data")
    aff = torch.tensor([[0, 1.2, 0, 5], [-0.9, 0, 0, 1], [0, 0, 1.1, -4], [0, 0, 0, 1]], dtype=torch.float64)
    img = mdata.MetaTensor(_smooth(1, (20, 22, 24))[0], affine=aff)
    fused = T.Compose(_warp_chain())(img)
    steps = T.Compose(_warp_chain(), fuse_spatial=False)(img)
    assert torch.allclose(fused.affine, steps.affine, atol=1e-12)


def test_spacing_orientation_crop_fuse(resample_launches):
    mdata = pytest.importorskip("monai.data")
    aff = torch.diag(torch.tensor([1.5, 2.0, 1.0, 1.0], dtype=torch.float64))
    img = mdata.MetaTensor(_smooth(1, (16, 14, 20))[0], affine=aff)

    def make():
        return [T.Orientation("LAS"), T.Spacing((1.2, 1.5, 1.0)), T.CenterSpatialCrop([12, 12, 12])]

    fused, n_fused, steps, n_steps = _run_both(make, img, resample_launches)
    assert n_fused == 1 and n_steps == 3
    assert fused.shape == steps.shape
    assert torch.allclose(fused.affine, steps.affine, atol=1e-12)
    # Orientation and the crop are exact: one interpolation either way.
    assert (fused.as_tensor() - steps.as_tensor()).abs().max() < 1e-5


def test_disagreeing_modes_split_groups(resample_launches):
    x = _smooth(2, (12, 12, 12))

    def make():
        return [T.Rotate(0.2), T.Flip(0), T.Rotate(0.1, mode="nearest"), T.CenterSpatialCrop(8),
                T.RandAffine(prob=1.0, rotate_range=0.2, seed=4), T.Rotate90()]

    fused, n_fused, steps, n_steps = _run_both(make, x, resample_launches)
    # [Rotate, Flip] bilinear/border | [Rotate nearest, crop] | [RandAffine reflection, Rotate90]
    assert n_fused == 3 and n_steps == 6
    assert fused.shape == steps.shape


def test_unfusable_steps_run_as_themselves(resample_launches):
    x = _smooth(2, (12, 13, 14))

    def make():  # Zoom keep_size with zoom < 1 pads after its resample: not an index map
        return [T.Flip(0), T.Zoom(0.8, mode="trilinear"), T.Flip(1), T.CenterSpatialCrop(6)]

    fused, n_fused, steps, n_steps = _run_both(make, x, resample_launches)
    assert n_fused == 3 and n_steps == 4
    assert torch.equal(fused, steps)


def test_random_draws_match_unfused_and_pointwise_still_fuses(resample_launches):
    x = torch.randn(3, 1, 10, 10, 10)

    def make():
        return [T.RandFlip(prob=0.5, seed=7), T.RandScaleIntensity(0.2, prob=1.0, seed=8),
                T.RandRotate90(prob=1.0, seed=9), T.CenterSpatialCrop(6)]

    fused, n_fused, steps, n_steps = _run_both(make, x, resample_launches)
    assert n_fused == 2 and n_steps == 3
    assert torch.equal(fused, steps)


def test_dictionary_exact_chain_fuses(resample_launches):
    img = torch.randn(2, 1, 8, 8, 9)
    lab = torch.randint(0, 5, (2, 1, 8, 8, 9), dtype=torch.int16)
    keys = ["image", "label"]

    def make():
        return [T.RandFlipd(keys, prob=0.5, spatial_axis=[0, 2], seed=11),
                T.RandRotate90d(keys, prob=0.8, spatial_axes=(0, 1), seed=12),
                T.SpatialCropd(keys, roi_start=[1, 1, 1], roi_end=[7, 6, 8]), T.CenterSpatialCropd(keys, [4, 4, 4])]

    fused, n_fused, steps, n_steps = _run_both(make, {"image": img, "label": lab, "other": 1}, resample_launches)
    assert n_fused == 1 and n_steps == 4
    assert fused["other"] == 1
    for k in keys:
        assert fused[k].dtype == steps[k].dtype and torch.equal(fused[k], steps[k])


def test_dictionary_warp_image_and_label_one_launch(resample_launches):
    img = _smooth(2, (18, 18, 18), seed=2)
    lab = (img > 0.3).to(torch.uint8) + (img > 0.8).to(torch.uint8)
    keys = ["image", "label"]

    def make():
        return [T.RandFlipd(keys, prob=0.5, spatial_axis=0, seed=21),
                T.RandRotated(keys, range_x=0.3, range_y=0.2, prob=1.0, mode=["bilinear", "nearest"], seed=22),
                T.Affined(keys, scale_params=[0.9, 1.1, 1.0], mode=["bilinear", "nearest"], padding_mode="border"),
                T.CenterSpatialCropd(keys, [10, 10, 10])]

    fused, n_fused, steps, n_steps = _run_both(make, {"image": img, "label": lab}, resample_launches)
    assert n_fused == 1 and n_steps == 4  # image bilinear + label nearest share each launch
    assert fused["label"].dtype == torch.uint8 and fused["image"].shape == (2, 1, 10, 10, 10)
    assert (fused["image"] - steps["image"]).abs().max() < 0.03
    # Labels: nearest of a composed map vs nearest twice; they differ only where rounding differs.
    assert (fused["label"] == steps["label"]).float().mean() > 0.9


def test_dictionary_resize_nearest_label_has_its_own_map(resample_launches):
    img = _smooth(2, (9, 11, 10), seed=4)
    lab = (img * 3).round().to(torch.int32)
    keys = ["image", "label"]

    def make():
        return [T.Flipd(keys, spatial_axis=0), T.Resized(keys, (12, 16, 14), mode=["trilinear", "nearest"]),
                T.CenterSpatialCropd(keys, [8, 9, 10])]

    fused, n_fused, steps, n_steps = _run_both(make, {"image": img, "label": lab}, resample_launches)
    # interpolate's nearest floors: the label's resize map differs from the image's -> 2 launches
    assert n_fused == 2 and n_steps == 4
    assert torch.equal(fused["label"], steps["label"])  # nearest of exact maps: identical indices
    assert (fused["image"] - steps["image"]).abs().max() < 1e-5  # one interpolation either way


def test_dictionary_orientation_spacing_crop_fuse(resample_launches):
    """Orientationd -> Spacingd -> CenterSpatialCropd on image + label MetaTensors: one launch
    (both keys share the product map), equal to step by step and to MONAI's Compose."""
    mdata = pytest.importorskip("monai.data")
    mt = pytest.importorskip("monai.transforms")
    aff = torch.tensor([[0, 0, -1.5, 20], [2.0, 0, 0, -3], [0, 1.0, 0, 4], [0, 0, 0, 1]], dtype=torch.float64)
    vol = _smooth(1, (16, 14, 20))[0]
    img = mdata.MetaTensor(vol, affine=aff)
    lab = mdata.MetaTensor((vol > 0.3).to(torch.uint8) + (vol > 0.8).to(torch.uint8), affine=aff)
    keys = ["image", "label"]

    def make():
        return [T.Orientationd(keys, "RAS"), T.Spacingd(keys, (1.2, 1.5, 1.0), mode=("bilinear", "nearest")),
                T.CenterSpatialCropd(keys, [12, 12, 12])]

    fused, n_fused, steps, n_steps = _run_both(make, {"image": img, "label": lab}, resample_launches)
    assert n_fused == 1 and n_steps == 3
    ref = mt.Compose([mt.Orientationd(keys, "RAS"), mt.Spacingd(keys, (1.2, 1.5, 1.0), mode=("bilinear", "nearest")),
                      mt.CenterSpatialCropd(keys, [12, 12, 12])])({"image": img, "label": lab})
    for k in keys:
        assert fused[k].shape == steps[k].shape == ref[k].shape
        assert torch.allclose(fused[k].affine, steps[k].affine, atol=1e-12)
        assert torch.allclose(fused[k].affine, ref[k].affine.double(), atol=1e-6)
    # Orientation and the crop are exact: one interpolation either way.
    assert (fused["image"].as_tensor() - steps["image"].as_tensor()).abs().max() < 1e-5
    assert (fused["image"].as_tensor() - ref["image"].as_tensor()).abs().max() < 5e-5 * 2
    assert torch.equal(fused["label"].as_tensor(), steps["label"].as_tensor())
    assert (fused["label"].as_tensor() != ref["label"].as_tensor()).float().mean() < 1e-3


def test_dictionary_spacingd_ensure_same_shape_when_fused(resample_launches):
    """Spacingd's ensure_same_shape (a second key with the first key's shape and pixdim gets
    its output shape) holds inside a fused group as it does step by step."""
    mdata = pytest.importorskip("monai.data")
    aff = torch.diag(torch.tensor([1.3, 0.9, 2.1, 1.0], dtype=torch.float64))
    vol = _smooth(2, (15, 17, 9))
    a = mdata.MetaTensor(vol, affine=aff)
    b = mdata.MetaTensor(vol * 2, affine=aff + 1e-4 * torch.eye(4, dtype=torch.float64) * torch.tensor([1, 0, 0, 0]))
    keys = ["a", "b"]

    def make():
        return [T.Flipd(keys, spatial_axis=1), T.Spacingd(keys, (1.0, 1.0, 1.0)), T.Rotate90d(keys, 1, (0, 1))]

    fused, n_fused, steps, _ = _run_both(make, {"a": a, "b": b}, resample_launches)
    assert n_fused <= 2
    for k in keys:
        assert fused[k].shape == steps[k].shape
        assert torch.allclose(fused[k].affine, steps[k].affine, atol=1e-9)
        assert (fused[k].as_tensor() - steps[k].as_tensor()).abs().max() < 1e-5


def test_dictionary_orientation_spacing_fused_group_inverts():
    """Compose.inverse undoes the fused Orientationd + Spacingd group in one map: back to the
    original shape and affine, image close to the input away from the borders."""
    mdata = pytest.importorskip("monai.data")
    aff = torch.tensor([[0, 0, -1.0, 20], [1.0, 0, 0, -3], [0, 1.0, 0, 4], [0, 0, 0, 1]], dtype=torch.float64)
    vol = _smooth(1, (16, 14, 20))[0]
    data = {"image": mdata.MetaTensor(vol, affine=aff)}
    c = T.Compose([T.Orientationd(["image"], "RAS"), T.Spacingd(["image"], (0.8, 0.8, 0.8))])
    out = c(data)
    assert len(out["image"].applied_operations) == 1  # one fused record
    back = c.inverse(out)["image"]
    assert back.shape == vol.shape and len(back.applied_operations) == 0
    assert torch.allclose(back.affine.double(), aff, atol=1e-9)
    inner = (slice(None), slice(2, -2), slice(2, -2), slice(2, -2))
    assert (back.as_tensor()[inner] - vol[inner]).abs().max() < 0.05
