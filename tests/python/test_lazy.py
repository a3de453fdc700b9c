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


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_rand_axis_flip_fuses_with_exact_and_grid_steps(resample_launches, dtype):
    """RandAxisFlip is an exact step: with quarter turns and a crop, one launch, bit-identical to
    the steps one by one; before a RandAffine (nearest) it joins the affine's gather too."""
    x = (torch.rand(6, 2, 10, 10, 9) * 200).to(dtype)

    def chain():
        return [T.RandAxisFlip(prob=0.9, seed=3), T.RandRotate90(prob=0.7, spatial_axes=(0, 1), seed=4),
                T.RandAxisFlip(prob=0.9, seed=5), T.CenterSpatialCrop([8, 7, -1])]

    fused, n_fused, steps, n_steps = _run_both(chain, x, resample_launches)
    assert n_fused == 1 and n_steps == 4 and fused.shape == steps.shape == (6, 2, 8, 7, 9)
    assert torch.equal(fused, steps)

    def with_affine():
        return [T.RandAxisFlip(prob=0.9, seed=6),
                T.RandAffine(prob=1.0, rotate_range=(0.0, 0.0, 1.5707963), mode="nearest", padding_mode="zeros",
                             seed=7)]

    fused, n_fused, steps, n_steps = _run_both(with_affine, x, resample_launches)
    assert n_fused == 1 and n_steps == 2 and fused.shape == steps.shape
    # one nearest gather instead of two: equal but where a sample point is a float32 near-tie
    assert (fused != steps).float().mean().item() < 1e-3


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


# ---------------- RandZoom(d) in a fused group ----------------
def _zoom_coords(size: int, factor: float) -> np.ndarray:
    """float64 source index of each output voxel of MONAI's Zoom(keep_size=True) on one axis:
    interpolate's (z + 1/2) * size / zoomed - 1/2 for zoomed voxel z, the centre crop's first
    voxel (zoom in) or the symmetric padding's width (zoom out; past the zoomed voxels the same
    line continues, what a fused gather with border clamping reads)."""
    zoomed = int(np.floor(size * factor))
    shift = zoomed // 2 - size // 2 if zoomed > size else -((size - zoomed) // 2)
    return (np.arange(size) + shift + 0.5) * size / zoomed - 0.5


def _zoom_field(in_size, factors) -> torch.Tensor:
    """(3, D, H, W) float64 source coordinates of a keep_size zoom (an image of coordinates, so
    that MONAI's own exact transforms can move it as they move the voxels)."""
    axes = [_zoom_coords(s, z) for s, z in zip(in_size, factors)]
    return torch.from_numpy(np.stack(np.meshgrid(*axes, indexing="ij")))


def _read(vol: torch.Tensor, field) -> np.ndarray:
    """scipy map_coordinates order 1 (float64), coordinates clamped to the volume (the kernel's
    border padding; interpolate clamps the same way)."""
    ndimage = pytest.importorskip("scipy.ndimage")
    return ndimage.map_coordinates(vol.double().numpy(), torch.as_tensor(field).numpy(), order=1, mode="nearest")


def _zoom_chain(lo, hi, crop=True, keys=("image", "label")):
    keys = list(keys)
    out = [T.RandZoomd(keys, prob=1.0, min_zoom=lo, max_zoom=hi, mode=("trilinear", "nearest"), seed=3),
           T.RandRotate90d(keys, prob=0.8, spatial_axes=(0, 1), seed=4),
           T.RandFlipd(keys, prob=0.5, spatial_axis=2, seed=5)]
    return out + [T.CenterSpatialCropd(keys, [16, 16, 16])] if crop else out


@pytest.mark.parametrize("zoom_range", [(1.05, 1.4), (0.75, 0.95)], ids=["zoom_in", "zoom_out"])
def test_rand_zoomd_quarter_turn_flip_crop_is_one_gather_per_key(resample_launches, zoom_range):
    """Compose([RandZoomd(prob=1), RandRotate90d, RandFlipd, CenterSpatialCropd]) on an image
    (trilinear) and a label (nearest): one launch per key (the label's nearest rule is its own
    map, as in Zoomd) instead of five; the same draws as the unfused chain. The zoom is the only
    interpolating step (the others are exact), so fused and unfused are one interpolation each:
    labels identical, images within float32 rounding (1e-5). For zoom out, the crop (16 of 24)
    removes the keep_size padding band (at most 3 voxels a side), where fused and unfused differ
    (see test_rand_zoom_edge_padding_is_read_as_a_border_clamp). Independent references: a
    float64 reference of the composed map (the zoom's coordinates moved by MONAI's Rotate90, Flip
    and CenterSpatialCrop, read by scipy), MONAI's Compose with the drawn factors, quarter turns
    and flips (images lazy and not lazy, labels not lazy: MONAI's lazy nearest rounds a grid, not
    interpolate's floor rule)."""
    mt = pytest.importorskip("monai.transforms")
    mdata = pytest.importorskip("monai.data")
    n, size = 3, (24, 24, 22)
    img = _smooth(n, size, seed=5)
    lab = (img > 0.3).to(torch.uint8) + (img > 0.8).to(torch.uint8)
    data = {"image": img, "label": lab}
    fused_t = _zoom_chain(*zoom_range)
    resample_launches[0] = 0
    fused = T.Compose(fused_t)(data)
    assert resample_launches[0] == 2
    unfused_t = _zoom_chain(*zoom_range)
    resample_launches[0] = 0
    steps = T.Compose(unfused_t, fuse_spatial=False)(data)
    assert resample_launches[0] == 5  # zoom: image and label; quarter turn; flip; crop
    zoom, rot, flip, _ = fused_t
    zooms = zoom.transform.zooms(zoom.transform._last)
    assert zooms == unfused_t[0].transform.zooms(unfused_t[0].transform._last)  # the same draws
    assert all(1.0 > z[0] > 0.75 for z in zooms) if zoom_range[1] < 1 else all(z[0] > 1.05 for z in zooms)
    assert fused["image"].shape == (n, 1, 16, 16, 16) and fused["label"].dtype == torch.uint8
    assert torch.equal(fused["label"], steps["label"]) and int(fused["label"].max()) == 2
    assert (fused["image"] - steps["image"]).abs().max() < 1e-5
    ks, gates = rot.transform._ks(rot.transform._last), flip.transform._gates(flip.transform._last)
    for i in range(n):
        field = mt.Rotate90(k=ks[i], spatial_axes=(0, 1))(_zoom_field(size, zooms[i]))
        field = mt.Flip(spatial_axis=2)(field) if gates[i] else field
        field = mt.CenterSpatialCrop([16, 16, 16])(field)
        np.testing.assert_allclose(fused["image"][i, 0].numpy(), _read(img[i, 0], field), rtol=0, atol=1e-5)
        for lazy in (True, False):
            ref = mt.Compose([mt.Zoomd(["image", "label"], zoom=zooms[i], mode=("trilinear", "nearest"),
                                       padding_mode="edge", keep_size=True),
                              mt.Rotate90d(["image", "label"], k=ks[i], spatial_axes=(0, 1)),
                              mt.Flipd(["image", "label"], spatial_axis=2) if gates[i] else mt.Identityd(["image"]),
                              mt.CenterSpatialCropd(["image", "label"], [16, 16, 16])], lazy=lazy)(
                {"image": mdata.MetaTensor(img[i]), "label": mdata.MetaTensor(lab[i].float())})
            assert (fused["image"][i] - ref["image"].as_tensor()).abs().max() < 1e-5, (i, lazy)
            if not lazy:
                assert torch.equal(fused["label"][i].float(), ref["label"].as_tensor()), i


def test_rand_zoom_edge_padding_is_read_as_a_border_clamp(resample_launches):
    """Zoom out with keep_size and padding_mode 'edge' (RandZoom's default) fused with a flip:
    one launch, the sample's map continued past its zoomed voxels with the kernel's border
    clamp. Independent references: the float64 composed map read by scipy (clamped), everywhere,
    and MONAI's lazy Compose (Zoom + Flip with the drawn factors), which reads the 'edge' pad the
    same way. Step by step (zoom, pad, flip) agrees away from the padding band and differs
    inside it (the band repeats the zoomed edge voxel, the fused gather the input's edge voxel).
    A RandZoom with nothing to fuse with is exactly its own call, band included."""
    mt = pytest.importorskip("monai.transforms")
    mdata = pytest.importorskip("monai.data")
    n, size = 3, (20, 22, 18)
    x = _smooth(n, size, seed=6)

    def make():
        return [T.RandZoom(prob=1.0, min_zoom=0.7, max_zoom=0.9, mode="trilinear", seed=8),
                T.RandFlip(prob=1.0, spatial_axis=0, seed=9)]

    fused_t = make()
    resample_launches[0] = 0
    fused = T.Compose(fused_t)(x)
    assert resample_launches[0] == 1
    resample_launches[0] = 0
    steps = T.Compose(make(), fuse_spatial=False)(x)
    assert resample_launches[0] == 2
    zooms = fused_t[0].zooms(fused_t[0]._last)
    band = torch.zeros(n, 1, *size, dtype=torch.bool)
    for i in range(n):
        field = mt.Flip(spatial_axis=0)(_zoom_field(size, zooms[i]))
        np.testing.assert_allclose(fused[i, 0].numpy(), _read(x[i, 0], field), rtol=0, atol=1e-5)
        ref = mt.Compose([mt.Zoom(zooms[i], mode="trilinear", padding_mode="edge", keep_size=True),
                          mt.Flip(spatial_axis=0)], lazy=True)(mdata.MetaTensor(x[i]))
        assert (fused[i] - ref.as_tensor()).abs().max() < 1e-5, i
        for a, (s, z) in enumerate(zip(size, zooms[i])):
            zoomed = int(np.floor(s * z))
            before = (s - zoomed) // 2
            inside = torch.zeros(s, dtype=torch.bool)
            inside[before:before + zoomed] = True
            inside = inside.flip(0) if a == 0 else inside  # the flip moves the band of axis 0
            shape = [1, 1, 1]
            shape[a] = s
            band[i, 0] |= ~inside.view(shape).expand(size)
    assert 0 < band.float().mean() < 0.75
    assert (fused - steps)[~band].abs().max() < 1e-5
    assert (fused - steps)[band].abs().max() > 1e-3  # the band: border clamp vs zoomed edge
    # Nothing to fuse with: the Compose is the call itself (bit-identical, band included).
    alone = T.Compose([T.RandZoom(prob=1.0, min_zoom=0.7, max_zoom=0.9, mode="trilinear", seed=8)])(x)
    assert torch.equal(alone, T.RandZoom(prob=1.0, min_zoom=0.7, max_zoom=0.9, mode="trilinear", seed=8)(x))


@pytest.mark.parametrize("case", ["area", "constant_padding", "keep_size_false_one_shape"])
def test_rand_zoom_runs_as_itself_where_its_draw_is_no_index_map(resample_launches, case):
    """Where a RandZoom draw is no index map ('area' pools each sample; keep_size padding with
    padding_mode 'constant' is not a border clamp) Compose runs it as itself with the draw it
    made for the group, between the fused groups around it: bit-identical to the transforms
    called one by one, over two calls (the seed sequences stay in step). keep_size=False with
    one output shape for the batch is an index map and fuses (one launch)."""
    x = _smooth(3, (14, 14, 12), seed=7)
    zoom = {"area": dict(mode="area", min_zoom=0.8, max_zoom=1.2),
            "constant_padding": dict(mode="trilinear", padding_mode="constant", min_zoom=0.7, max_zoom=0.9),
            "keep_size_false_one_shape": dict(mode="trilinear", keep_size=False, min_zoom=1.3, max_zoom=1.3)}[case]

    def make():
        return [T.RandFlip(prob=0.5, spatial_axis=0, seed=1), T.RandZoom(prob=1.0, seed=2, **zoom),
                T.RandRotate90(prob=1.0, spatial_axes=(0, 1), seed=3)]

    fused_c, steps_c = T.Compose(make()), make()
    for _ in range(2):
        resample_launches[0] = 0
        fused = fused_c(x)
        n_fused = resample_launches[0]
        step = x
        for t in steps_c:
            step = t(step)
        if case == "keep_size_false_one_shape":
            assert n_fused == 1 and fused.shape == step.shape == (3, 1, 18, 18, 15)
            assert (fused - step).abs().max() < 1e-5  # one interpolation either way
        else:
            # the flip and the quarter turn: one launch each; the zoom: pooling ('area', no
            # resample launch) or one launch
            assert n_fused == (2 if case == "area" else 3)
            assert torch.equal(fused, step)


def test_rand_zoom_keep_size_false_per_sample_shapes_raise_in_compose():
    x = _smooth(3, (14, 14, 12), seed=7)
    c = T.Compose([T.RandFlip(prob=1.0, spatial_axis=0),
                   T.RandZoom(prob=1.0, min_zoom=0.6, max_zoom=1.5, mode="trilinear", keep_size=False, seed=2)])
    with pytest.raises(ValueError, match="keep_size=False gives the samples of this batch different shapes"):
        c(x)


def test_rand_zoomd_meta_tensor_fused_record_and_inverse():
    """Tracked MetaTensors: RandZoomd between a flip and a quarter turn is one fused record of
    the Compose with the affine of the step-by-step chain; Compose.inverse restores shapes,
    affines and empty applied_operations. A RandZoomd alone in a Compose writes RandZoomd's own
    record ('zoom_per_sample', undone by MONAI-style per-sample resizes)."""
    mdata = pytest.importorskip("monai.data")
    aff = torch.tensor([[0, 1.2, 0, 5], [-0.9, 0, 0, 1], [0, 0, 1.1, -4], [0, 0, 0, 1]], dtype=torch.float64)
    vol = _smooth(2, (20, 20, 18), seed=8)
    keys = ["img", "lab"]
    data = {"img": mdata.MetaTensor(vol, affine=aff),
            "lab": mdata.MetaTensor((vol > 0.3).to(torch.uint8), affine=aff)}

    def zoomd():
        return T.RandZoomd(keys, prob=1.0, min_zoom=1.1, max_zoom=1.3, mode=("trilinear", "nearest"), seed=2)

    for make, kind in [(lambda: [T.RandFlipd(keys, prob=1.0, spatial_axis=0, seed=1), zoomd(),
                                 T.RandRotate90d(keys, prob=1.0, spatial_axes=(0, 1), seed=3)], "map"),
                       (lambda: [zoomd()], "zoom_per_sample")]:
        comp = T.Compose(make())
        out = comp(dict(data))
        step = dict(data)
        for t in make():
            step = t(step)
        for k in keys:
            assert len(out[k].applied_operations) == 1 and out[k].applied_operations[0]["extra_info"]["kind"] == kind
            assert torch.allclose(out[k].affine, step[k].affine, atol=1e-9)
            assert (out[k].as_tensor().float() - step[k].as_tensor().float()).abs().max() < 1e-5
        back = comp.inverse(out)
        for k in keys:
            assert back[k].shape == data[k].shape and len(back[k].applied_operations) == 0
            assert torch.allclose(back[k].affine.double(), aff, atol=1e-9)


def test_rand_zoomd_and_rand_rotated_compose_as_one_map(resample_launches):
    """Two interpolating steps (RandZoomd zooming in, RandRotated) with a flip and a crop: one
    launch per key. Against the step-by-step chain (two interpolations) with this file's
    tolerance for composed interpolation (0.04 max, 0.006 mean on the smooth field; labels
    agree where nearest rounding does, > 0.9), and against MONAI's lazy Compose with the drawn
    factors, angles and flips (one resample of the composed map too: float32 rounding, 1e-5)."""
    mt = pytest.importorskip("monai.transforms")
    mdata = pytest.importorskip("monai.data")
    n, size = 3, (24, 24, 22)
    img = _smooth(n, size, seed=5)
    lab = (img > 0.3).to(torch.uint8) + (img > 0.8).to(torch.uint8)
    keys = ["image", "label"]

    def make():
        return [T.RandZoomd(keys, prob=1.0, min_zoom=1.05, max_zoom=1.3, mode=("trilinear", "nearest"), seed=3),
                T.RandRotated(keys, range_x=0.3, range_z=0.2, prob=1.0, mode=("bilinear", "nearest"),
                              padding_mode="border", seed=6),
                T.RandFlipd(keys, prob=0.5, spatial_axis=2, seed=5), T.CenterSpatialCropd(keys, [16, 16, 16])]

    ts = make()
    resample_launches[0] = 0
    fused = T.Compose(ts)({"image": img, "label": lab})
    assert resample_launches[0] == 2
    resample_launches[0] = 0
    steps = T.Compose(make(), fuse_spatial=False)({"image": img, "label": lab})
    assert resample_launches[0] == 5  # zoom: image and label; rotate (one map, two modes); flip; crop
    err = (fused["image"] - steps["image"]).abs()
    assert err.max().item() < 0.04 and err.mean().item() < 0.006, (err.max(), err.mean())
    assert (fused["label"] == steps["label"]).float().mean() > 0.9
    zooms = ts[0].transform.zooms(ts[0].transform._last)
    angles = ts[1].transform.angles(ts[1].transform._last)
    gates = ts[2].transform._gates(ts[2].transform._last)
    for i in range(n):
        ref = mt.Compose([mt.Zoomd(keys, zoom=zooms[i], mode=("trilinear", "nearest"), padding_mode="edge"),
                          mt.Rotated(keys, angle=angles[i], mode=("bilinear", "nearest"), padding_mode="border"),
                          mt.Flipd(keys, spatial_axis=2) if gates[i] else mt.Identityd(keys),
                          mt.CenterSpatialCropd(keys, [16, 16, 16])], lazy=True)(
            {"image": mdata.MetaTensor(img[i]), "label": mdata.MetaTensor(lab[i].float())})
        assert (fused["image"][i] - ref["image"].as_tensor()).abs().max() < 1e-5, i
