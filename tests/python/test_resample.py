"""voxaug.resample vs torch.nn.functional.grid_sample + affine_grid (converted matrices)."""
import math

import numpy as np

import pytest
import torch
import torch.nn.functional as F

from voxaug import ops

from conftest import devices

DEVICES = devices()
# Both devices always listed: the CUDA cases skip, and say so, without a device.
CPU_AND_CUDA = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                     reason="no CUDA device"))]


def index_to_normalised(sizes, align_corners):
    """4x4 map of a (d, h, w) voxel index to grid_sample's normalised (d, h, w) coordinate."""
    t = torch.eye(4, dtype=torch.float64)
    for a, s in enumerate(sizes):
        if align_corners:
            t[a, a], t[a, 3] = 2.0 / (s - 1), -1.0
        else:
            t[a, a], t[a, 3] = 2.0 / s, 1.0 / s - 1.0
    return t


def theta_for(matrices, in_size, out_size, align_corners):
    """grid_sample's theta (normalised output (x, y, z) -> normalised input (x, y, z));
    differentiable w.r.t. `matrices` (float64, CPU)."""
    perm = torch.tensor([[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]], dtype=torch.float64)
    m4 = torch.cat([matrices.double().cpu(), torch.tensor([0, 0, 0, 1.0], dtype=torch.float64).expand(
        matrices.shape[0], 1, 4)], 1)
    t_in = index_to_normalised(in_size, align_corners)
    t_out_inv = torch.linalg.inv(index_to_normalised(out_size, align_corners))
    theta = perm @ t_in @ m4 @ t_out_inv @ perm
    return theta[:, :3, :]


def random_matrices(n, in_size, out_size, seed, strength=1.0):
    """Rotation + anisotropic scale + translation about the centres, per sample."""
    g = torch.Generator().manual_seed(seed)
    mats = []
    for _ in range(n):
        angles = (torch.rand(3, generator=g, dtype=torch.float64) - 0.5) * strength
        ca, sa = torch.cos(angles), torch.sin(angles)
        rx = torch.tensor([[1, 0, 0], [0, ca[0], -sa[0]], [0, sa[0], ca[0]]], dtype=torch.float64)
        ry = torch.tensor([[ca[1], 0, sa[1]], [0, 1, 0], [-sa[1], 0, ca[1]]], dtype=torch.float64)
        rz = torch.tensor([[ca[2], -sa[2], 0], [sa[2], ca[2], 0], [0, 0, 1]], dtype=torch.float64)
        scale = torch.diag(1 + (torch.rand(3, generator=g, dtype=torch.float64) - 0.5) * 0.6 * strength)
        a = rx @ ry @ rz @ scale
        c_in = (torch.tensor(in_size, dtype=torch.float64) - 1) / 2
        c_out = (torch.tensor(out_size, dtype=torch.float64) - 1) / 2
        shift = (torch.rand(3, generator=g, dtype=torch.float64) - 0.5) * 4 * strength
        b = c_in - a @ c_out + shift
        mats.append(torch.cat([a, b[:, None]], 1))
    return torch.stack(mats)


CASES = [((2, 2, 9, 10, 11), (7, 12, 8)), ((1, 1, 5, 6, 7), (5, 6, 7)), ((3, 1, 16, 4, 13), (9, 9, 9))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,out_size", CASES)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_matches_grid_sample(device, shape, out_size, padding, align_corners, dtype):
    x = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(1)).to(device)
    mats = random_matrices(shape[0], shape[2:], out_size, seed=sum(shape)).to(device)
    (ours,) = ops.resample([x], mats, out_size, ["linear"], [padding], align_corners=align_corners)
    theta = theta_for(mats, shape[2:], out_size, align_corners).to(device, dtype)
    grid = F.affine_grid(theta, (shape[0], shape[1], *out_size), align_corners=align_corners)
    ref = F.grid_sample(x, grid, mode="bilinear", padding_mode=padding, align_corners=align_corners)
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol * x.abs().max().item())
    assert ours.abs().sum() > 0 and not torch.isnan(ours).any()


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
@pytest.mark.parametrize("layout", ["contiguous", "offset", "w_stride_2"])
def test_linear_large_volumes_match_grid_sample(padding, layout):
    """Inputs of >= 4 MiB per channel: the host's float32 row path prefetches the lines a rotated
    row gathers (kPrefetchInputBytes); rows of odd length, channels that do not start on a cache
    line, and a w stride of 2 go through it. Values must not change."""
    size = (112, 100, 96)
    g = torch.Generator().manual_seed(3)
    if layout == "w_stride_2":
        x = torch.randn((1, 2, *size[:2], 2 * size[2]), generator=g)[..., ::2]
    elif layout == "offset":
        x = torch.randn(1 * 2 * 112 * 100 * 96 + 5, generator=g)[5:].view(1, 2, *size)
    else:
        x = torch.randn((1, 2, *size), generator=g)
    out_size = (24, 40, 93)
    mats = random_matrices(1, size, out_size, seed=11, strength=1.5)
    (ours,) = ops.resample([x], mats, out_size, ["linear"], [padding])
    theta = theta_for(mats, size, out_size, False)
    grid = F.affine_grid(theta.float(), (1, 2, *out_size), align_corners=False)
    ref = F.grid_sample(x, grid, mode="bilinear", padding_mode=padding, align_corners=False)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5 * x.abs().max().item())
    assert ours.abs().sum() > 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,out_size", CASES)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection", "constant"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_linear_matches_grid_sample(device, shape, out_size, padding, align_corners, dtype):
    """float16 / bfloat16 images vs grid_sample in float64 on the same stored values (upcast;
    "constant" as zeros padding of x - c, plus c, the weights summing to one): voxaug
    interpolates in float32 and rounds the result to the type once, so the error is at most
    half an ulp of the result (eps / 2 relative) plus float32 interpolation error; the bound is
    one eps relative (2^-10 float16, 2^-7 bfloat16) and 1e-5 of the data's magnitude absolute
    (float32 cancellation near zero)."""
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(13)) * 40).to(dtype).to(device)
    mats = random_matrices(shape[0], shape[2:], out_size, seed=sum(shape) + 1).to(device)
    c = 7.5 if padding == "constant" else 0.0  # exact in both types
    (ours,) = ops.resample([x], mats, out_size, ["linear"], [padding], [c], align_corners=align_corners)
    assert ours.dtype == dtype and ours.shape == (shape[0], shape[1], *out_size)
    theta = theta_for(mats, shape[2:], out_size, align_corners).to(device)
    grid = F.affine_grid(theta, (shape[0], shape[1], *out_size), align_corners=align_corners)
    ref = F.grid_sample(x.double() - c, grid, mode="bilinear", padding_mode="zeros" if padding == "constant"
                        else padding, align_corners=align_corners) + c
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(ours.double(), ref, rtol=eps, atol=1e-5 * x.double().abs().max().item())
    assert ours.double().abs().sum() > 0 and not torch.isnan(ours).any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_nearest_matches_grid_sample(device, padding, align_corners):
    shape, out_size = (2, 3, 11, 9, 10), (12, 7, 9)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(2)).to(device)
    mats = random_matrices(shape[0], shape[2:], out_size, seed=5).to(device)
    (ours,) = ops.resample([x], mats, out_size, ["nearest"], [padding], align_corners=align_corners)
    theta = theta_for(mats, shape[2:], out_size, align_corners).to(device, torch.float32)
    grid = F.affine_grid(theta, (shape[0], shape[1], *out_size), align_corners=align_corners)
    ref = F.grid_sample(x, grid, mode="nearest", padding_mode=padding, align_corners=align_corners)
    # Coordinates within float rounding of a half-voxel tie may round differently.
    assert (ours != ref).float().mean().item() < 2e-3


def tie_matrices(in_size):
    """Per-axis index maps src = s x + t with every coordinate on a half voxel or an integer,
    all exactly representable: sample 0 (1, +0.5) (2, -0.5) (0.5, +0.5); sample 1 (-1, S - 0.5)
    (0.5, -0.5) (2, +1.5). Sample 1's first axis is a flip shifted by half a voxel."""
    m = torch.zeros(2, 3, 4, dtype=torch.float64)
    for a, (sc, off) in enumerate([(1.0, 0.5), (2.0, -0.5), (0.5, 0.5)]):
        m[0, a, a], m[0, a, 3] = sc, off
    for a, (sc, off) in enumerate([(-1.0, in_size[0] - 0.5), (0.5, -0.5), (2.0, 1.5)]):
        m[1, a, a], m[1, a, 3] = sc, off
    return m


def grid_at_indices(src, in_size, align_corners):
    """grid_sample's (x, y, z) grid, float64, for source voxel indices src (N, 3, D, H, W). With
    S (align_corners=False) or S - 1 (True) a power of two, normalising and grid_sample's
    un-normalising are exact, so the sampled coordinates are exactly src."""
    t = index_to_normalised(in_size, align_corners)
    norm = [src[:, a] * t[a, a] + t[a, 3] for a in range(3)]
    return torch.stack([norm[2], norm[1], norm[0]], -1)


def tie_case(align_corners):
    """An input size whose normalisation is exact and the source indices of tie_matrices."""
    in_size = (4, 8, 16) if not align_corners else (5, 9, 17)
    out_size = (6, 5, 9)  # beyond the input on some axes: padding sees ties too
    mats = tie_matrices(in_size)
    idx = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in out_size], indexing="ij"))
    src = torch.einsum("nrk,kdhw->nrdhw", mats[:, :, :3], idx) + mats[:, :, 3].view(2, 3, 1, 1, 1)
    return in_size, out_size, mats, src


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_nearest_rounds_exact_ties_like_grid_sample(device, padding, align_corners):
    """Source coordinates exactly on .5 (and integers): voxaug's nearest must round half to
    even as grid_sample's nearbyint does. grid_sample runs in float64 on a grid that maps to
    the exact coordinates (see grid_at_indices); images (float32, float64) and labels (int64)
    must be bit-identical to it, no tolerance."""
    in_size, out_size, mats, src = tie_case(align_corners)
    frac = (src - src.floor())
    assert ((frac == 0.5).float().mean() > 0.4) and ((frac == 0.0).float().mean() > 0.1)  # ties are tested
    g = torch.Generator().manual_seed(21)
    x = torch.randn(2, 2, *in_size, dtype=torch.float64, generator=g)
    lab = torch.randint(1, 1000, (2, 1, *in_size), generator=g)
    ref = F.grid_sample(x, grid_at_indices(src, in_size, align_corners), mode="nearest", padding_mode=padding,
                        align_corners=align_corners)
    ref_lab = F.grid_sample(lab.double(), grid_at_indices(src, in_size, align_corners), mode="nearest",
                            padding_mode=padding, align_corners=align_corners).long()
    m = mats.to(device)
    out32, out64, out_lab = ops.resample([x.float().to(device), x.to(device), lab.to(device)], m, out_size,
                                         ["nearest"] * 3, [padding] * 3, align_corners=align_corners)
    assert torch.equal(out64.cpu(), ref)
    assert torch.equal(out32.cpu(), ref.float())
    assert torch.equal(out_lab.cpu(), ref_lab)
    assert out_lab.cpu().ne(0).any()


@pytest.mark.parametrize("device", DEVICES)
def test_constant_padding_equals_shifted_zeros(device):
    shape, out_size, c = (2, 1, 8, 9, 10), (10, 10, 10), 3.5
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(device)
    mats = random_matrices(2, shape[2:], out_size, seed=9, strength=2.0).to(device)
    (const,) = ops.resample([x], mats, out_size, ["linear"], ["constant"], [c])
    (zeros,) = ops.resample([x - c], mats, out_size, ["linear"], ["zeros"])
    torch.testing.assert_close(const, zeros + c)  # weights sum to one


@pytest.mark.parametrize("device", DEVICES)
def test_image_and_labels_in_one_launch(device):
    n, out_size = 3, (10, 11, 12)
    img = torch.randn(n, 2, 9, 10, 11, generator=torch.Generator().manual_seed(4)).to(device)
    lab = torch.randint(0, 117, (n, 1, 9, 10, 11), generator=torch.Generator().manual_seed(5)).to(device)
    mats = random_matrices(n, (9, 10, 11), out_size, seed=6).to(device)
    out_img, out_lab8, out_lab64 = ops.resample([img, lab.to(torch.uint8), lab], mats, out_size,
                                                ["linear", "nearest", "nearest"], ["border", "zeros", "zeros"])
    (alone,) = ops.resample([img], mats, out_size, ["linear"], ["border"])
    assert torch.equal(out_img, alone)
    assert out_lab8.dtype == torch.uint8 and out_lab64.dtype == torch.int64
    assert torch.equal(out_lab8.long(), out_lab64)
    assert set(out_lab64.unique().tolist()) <= set(lab.unique().tolist()) | {0}  # labels stay labels
    theta = theta_for(mats, (9, 10, 11), out_size, False).to(device, torch.float32)
    grid = F.affine_grid(theta, (n, 1, *out_size), align_corners=False)
    ref = F.grid_sample(lab.double(), grid.double(), mode="nearest", align_corners=False).long()
    assert (out_lab64 != ref).float().mean().item() < 2e-3


@pytest.mark.parametrize("device", DEVICES)
def test_identity_and_integer_shift_are_exact(device):
    x = torch.randn(2, 2, 6, 7, 8, generator=torch.Generator().manual_seed(7)).to(device)
    eye = torch.cat([torch.eye(3, dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)], 1)
    mats = eye.expand(2, 3, 4).clone().to(device)
    for mode in ["linear", "nearest"]:
        (out,) = ops.resample([x], mats, (6, 7, 8), [mode], ["zeros"])
        assert torch.equal(out, x)
    mats[:, :, 3] = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64, device=device)
    (out,) = ops.resample([x], mats, (6, 7, 8), ["linear"], ["zeros"])
    ref = torch.zeros_like(x)
    ref[:, :, :5, 2:, :] = x[:, :, 1:, :5, :]
    assert torch.equal(out, ref)


@pytest.mark.parametrize("device", DEVICES)
def test_signed_permutations_are_bit_exact_copies(device):
    x = torch.randn(2, 2, 6, 7, 8, generator=torch.Generator().manual_seed(12)).to(device)
    x[0, 0, 3, 3, 3] = float("inf")  # must not leak into neighbours on the exact path
    # rot90 in the (h, w) plane for sample 0, flip of d plus an integer shift for sample 1
    m = torch.zeros(2, 3, 4, dtype=torch.float64)
    m[0, 0, 0], m[0, 1, 2], m[0, 2, 1], m[0, 2, 3] = 1, 1, -1, 7  # out (6, 8, 7)
    m[1, 0, 0], m[1, 0, 3], m[1, 1, 2], m[1, 2, 1], m[1, 2, 3] = -1, 5, 1, -1, 7
    out_size = (6, 8, 7)
    for mode in ["linear", "nearest"]:
        for padding in ["zeros", "reflection"]:
            (out,) = ops.resample([x], m.to(device), out_size, [mode], [padding])
            assert torch.equal(out[0], torch.rot90(x[0], 1, (2, 3)))
            assert torch.equal(out[1], torch.flip(torch.rot90(x[1], 1, (2, 3)), (1,)))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("layout", ["c", "fortran", "permuted"])
def test_exact_copies_of_large_volumes_any_layout(device, layout):
    """The exact path on volumes past the streaming size (5.6 MB): rows of 181 float32 (724 B,
    not whole cache lines: copied through the cache) and of 96 (384 B: streamed), inputs in C
    order, Fortran order (nibabel's; rows then run h-major) and a permuted layout, image and
    uint8 label in one launch: identity, flips and quarter turns equal torch's indexing bit for
    bit."""
    g = torch.Generator().manual_seed(5)
    for shape in ((2, 1, 45, 88, 181), (2, 1, 60, 80, 96)):
        x = torch.randn(shape, generator=g)
        lab = torch.randint(0, 255, shape, generator=g, dtype=torch.uint8)
        if layout == "fortran":
            x, lab = (t.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2) for t in (x, lab))
        elif layout == "permuted":
            x, lab = (t.permute(0, 1, 3, 2, 4).contiguous().permute(0, 1, 3, 2, 4) for t in (x, lab))
        x, lab = x.to(device), lab.to(device)
        d, h, w = shape[2:]
        eye = torch.eye(3, 4, dtype=torch.float64)
        flip_dw = eye.clone()
        flip_dw[0, 0], flip_dw[0, 3], flip_dw[2, 2], flip_dw[2, 3] = -1, d - 1, -1, w - 1
        turn_dh = torch.zeros(3, 4, dtype=torch.float64)  # out (h, d, w): out d walks in h, out h walks in d
        turn_dh[0, 1], turn_dh[1, 0], turn_dh[2, 2] = 1, 1, 1
        for m, size, ref in ((eye, (d, h, w), lambda t: t), (flip_dw, (d, h, w), lambda t: t.flip(2, 4)),
                             (turn_dh, (h, d, w), lambda t: t.transpose(2, 3))):
            mm = m.expand(shape[0], 3, 4).contiguous().to(device)
            out, out_lab = ops.resample([x, lab], mm, size, ["linear", "nearest"], ["zeros", "zeros"])
            assert torch.equal(out, ref(x)) and torch.equal(out_lab, ref(lab)), (shape, layout)


SCIPY_MODE = {("zeros", False): "grid-constant", ("constant", False): "grid-constant",
              ("border", False): "nearest", ("reflection", False): "reflect", ("reflection", True): "mirror",
              ("cutoff", False): "constant", ("cutoff", True): "constant"}


# The B-spline orders: ops.resample's mode names and scipy's orders. In float64 voxaug equals
# scipy's map_coordinates (1e-9 of the range) with 'grid-constant', 'nearest' and 'mirror':
# the same 12-voxel pads, boundary rules and tap rules. With 'reflect' it equals the exact
# interpolant (_exact_reflected): voxaug starts its filter from the sums over the infinite
# reflection, where scipy's closed form for 'reflect' is off by up to 7e-5 of the range on a
# 5-voxel axis at order 5 (1e-12 from 16 voxels on); against scipy it meets the 1e-4 bar.
SPLINES = [("quadratic", 2), ("cubic", 3), ("quartic", 4), ("quintic", 5)]


def _exact_reflected(vol: np.ndarray, coords: np.ndarray, order: int, align_corners: bool) -> np.ndarray:
    """The B-spline interpolant of the infinitely reflected volume (float64): coordinates folded
    into the volume, coefficients of the volume padded by 80 reflected voxels (|z|^80 < 1e-29)."""
    from scipy import ndimage
    pad = 80
    c = ndimage.spline_filter(np.pad(vol, pad, mode="reflect" if align_corners else "symmetric"), order,
                              mode="mirror")
    folded = []
    for a, x in enumerate(coords):
        s = vol.shape[a]
        if s == 1:
            folded.append(np.zeros_like(x))
            continue
        lo, period = (0.0, 2.0 * (s - 1)) if align_corners else (-0.5, 2.0 * s)
        t = np.mod(x - lo, period)
        folded.append(lo + np.where(t > period / 2, period - t, t))
    return ndimage.map_coordinates(c, np.stack(folded) + pad, order=order, prefilter=False, mode="nearest")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padding,align_corners", list(SCIPY_MODE))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,out_size", [((2, 2, 9, 10, 11), (8, 9, 10)), ((1, 1, 5, 1, 7), (4, 3, 6))])
@pytest.mark.parametrize("mode,order", SPLINES)
def test_bspline_matches_scipy_map_coordinates(device, padding, align_corners, dtype, shape, out_size, mode, order):
    ndimage = pytest.importorskip("scipy.ndimage")
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    mats = random_matrices(shape[0], shape[2:], out_size, seed=7, strength=1.5)
    cval = 1.5 if padding in ("constant", "cutoff") else 0.0
    (ours,) = ops.resample([x.to(device, dtype)], mats.to(device), out_size, [mode], [padding], [cval],
                           align_corners=align_corners)
    assert ours.dtype == dtype
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in out_size], indexing="ij"), 0).reshape(3, -1)
    for n in range(shape[0]):
        m = mats[n].numpy()
        coords = m[:, :3] @ grid + m[:, 3:]
        for c in range(shape[1]):
            ref = ndimage.map_coordinates(x[n, c].numpy(), coords, order=order, prefilter=True, cval=cval,
                                          mode=SCIPY_MODE[(padding, align_corners)]).reshape(out_size)
            got = ours[n, c].double().cpu().numpy()
            rng = float(x.max() - x.min())
            # 1e-4 of the data range against scipy (the bar), in every dtype and mode.
            assert np.abs(got - ref).max() < 1e-4 * rng
            if dtype == torch.float64:
                if padding == "reflection" and not align_corners:
                    ref = _exact_reflected(x[n, c].numpy(), coords, order, align_corners).reshape(out_size)
                err = np.abs(got - ref).max()
                assert err < 1e-9 * rng, err


@pytest.mark.parametrize("mode,order", SPLINES)
def test_bspline_far_outside_the_volume_matches_scipy(mode, order):
    """Coordinates swept from 20 voxels before the volume to 20 past it (through the 12-voxel
    coefficient pad and beyond), one axis at a time: zeros / constant fade to cval, border to
    the edge, reflection folds back; each as scipy (the exact interpolant for 'reflect')."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = torch.randn(1, 1, 6, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    out_size = (1, 1, 185)
    for axis in range(3):
        for padding, ac in SCIPY_MODE:
            m = torch.zeros(1, 3, 4, dtype=torch.float64)
            m[0, :, 3] = torch.tensor([2.3, 3.1, 4.4], dtype=torch.float64)
            m[0, axis, 3] = -20.0
            m[0, axis, 2] = (x.shape[2 + axis] + 39.0) / 184  # w index -> this axis, -20 .. S + 19
            cval = -2.0 if padding in ("constant", "cutoff") else 0.0
            (ours,) = ops.resample([x], m, out_size, [mode], [padding], [cval], align_corners=ac)
            coords = np.stack([np.full(185, 2.3), np.full(185, 3.1), np.full(185, 4.4)])
            coords[axis] = -20.0 + m[0, axis, 2].item() * np.arange(185.0)
            if padding == "reflection" and not ac:
                ref = _exact_reflected(x[0, 0].numpy(), coords, order, ac)
            else:
                ref = ndimage.map_coordinates(x[0, 0].numpy(), coords, order=order, mode=SCIPY_MODE[(padding, ac)],
                                              cval=cval)
            err = np.abs(ours[0, 0, 0, 0].numpy() - ref).max()
            assert err < 1e-9 * float(x.max() - x.min()), (axis, padding, ac, err)


@pytest.mark.parametrize("mode", [m for m, _ in SPLINES])
def test_bspline_interpolates_at_voxel_centres_and_has_no_gradient(mode):
    x = torch.randn(1, 1, 6, 7, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    m = torch.cat([torch.eye(3, dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)], 1)[None]
    m[0, :, 3] = torch.tensor([0.0, 1e-12, 0.0], dtype=torch.float64)  # not the exact-copy path
    (out,) = ops.resample([x], m, (6, 7, 8), [mode], ["reflection"])
    torch.testing.assert_close(out, x, rtol=1e-9, atol=1e-9)
    with pytest.raises((RuntimeError, ValueError), match="cubic interpolation has no gradient"):
        y = x.clone().requires_grad_()
        ops.resample([y], m, (6, 7, 8), [mode], ["zeros"])[0].sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int16])
def test_cutoff_nearest_and_linear_match_scipy_constant(device, dtype):
    """Padding "cutoff" is scipy's 'constant' for orders 0 and 1 too: the pad value wherever the
    coordinate leaves [0, S-1] on any axis (no blending), plain nearest / linear inside; labels
    (nearest) keep their dtype; an exact map (a flip with an offset) fills the same way."""
    ndimage = pytest.importorskip("scipy.ndimage")
    g = torch.Generator().manual_seed(31)
    x = torch.randn(2, 1, 7, 6, 9, dtype=torch.float64, generator=g) * 10
    if dtype == torch.int16:
        x = x.round()
    out_size = (8, 7, 8)
    mats = random_matrices(2, (7, 6, 9), out_size, seed=32, strength=1.2)
    flip = torch.tensor([[-1.0, 0, 0, 7], [0, 1, 0, -1], [0, 0, 1, 2]], dtype=torch.float64)  # exact path
    mats[1] = flip
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in out_size], indexing="ij"), 0).reshape(3, -1)
    for order, mode in ((0, "nearest"), (1, "linear")):
        if dtype == torch.int16 and order == 1:
            continue
        (ours,) = ops.resample([x.to(device, dtype)], mats.to(device), out_size, [mode], ["cutoff"], [-3.0])
        assert ours.dtype == dtype
        for n in range(2):
            m = mats[n].numpy()
            ref = ndimage.map_coordinates(x[n, 0].numpy(), m[:, :3] @ grid + m[:, 3:], order=order, mode="constant",
                                          cval=-3.0).reshape(out_size)
            tol = 1e-9 if dtype == torch.float64 else (0 if dtype == torch.int16 else 1e-4)
            np.testing.assert_allclose(ours[n, 0].double().cpu().numpy(), ref, rtol=0, atol=tol * 40)
    y = x.float().clone().requires_grad_()
    with pytest.raises((RuntimeError, ValueError), match="Cutoff padding .* has no gradient"):
        ops.resample([y], mats.float(), out_size, ["linear"], ["cutoff"])[0].sum().backward()


def test_bspline_modes_refuse_labels_and_unknown_codes():
    lab = torch.zeros(1, 1, 4, 4, 4, dtype=torch.int16)
    m = torch.cat([torch.eye(3, dtype=torch.float64), torch.zeros(3, 1, dtype=torch.float64)], 1)[None]
    with pytest.raises(ValueError, match="B-spline interpolation need a floating tensor"):
        ops.resample([lab], m, (4, 4, 4), ["quintic"], ["zeros"])
    with pytest.raises(ValueError, match=r"modes\[0\] must be 0 \(nearest\)"):
        ops.resample([lab.float()], m, (4, 4, 4), [6], ["zeros"])
    with pytest.raises(ValueError, match="mode must be one of"):
        ops.resample([lab.float()], m, (4, 4, 4), ["sextic"], ["zeros"])


def test_non_contiguous_and_half_precision():
    x = torch.randn(2, 1, 10, 9, 8, generator=torch.Generator().manual_seed(8))
    xt = x.permute(0, 1, 4, 3, 2)  # non-contiguous (N, C, W, H, D) view
    mats = random_matrices(2, (8, 9, 10), (8, 8, 8), seed=11)
    (a,) = ops.resample([xt], mats, (8, 8, 8), ["linear"], ["reflection"])
    (b,) = ops.resample([xt.contiguous()], mats, (8, 8, 8), ["linear"], ["reflection"])
    assert torch.equal(a, b)
    (h,) = ops.resample([xt.half()], mats, (8, 8, 8), ["linear"], ["reflection"])
    assert h.dtype == torch.float16
    torch.testing.assert_close(h.float(), a, rtol=2e-3, atol=2e-3)


def test_constant_pad_value_must_fit_an_integer_output():
    """An out-of-range pad value would be an undefined conversion (the host and the device stored
    different numbers): refused, as torch's fill refuses it; values that fit are truncated."""
    lab = (torch.rand(1, 1, 5, 5, 5) * 9).to(torch.uint8)
    m = torch.eye(3, 4, dtype=torch.float64)[None].clone()
    m[0, 0, 3] = 3.0  # rows 2..4 of the output read outside: padding
    for dtype, ok, bad in ((torch.uint8, (0.0, 255.9, -0.5), (-1.0, 256.0)),
                           (torch.int16, (-32768.0, 32767.0), (-32769.0, 32768.0)),
                           (torch.int32, (-2147483648.0, 2147483647.0), (2147483648.0, -2147483649.0)),
                           (torch.int64, (-9.2e18, 9.2e18), (9.3e18, -9.3e18))):
        x = lab.to(dtype)
        for v in ok:
            (out,) = ops.resample([x], m, (5, 5, 5), ["nearest"], ["constant"], [v])
            assert out.dtype == dtype and int(out[0, 0, 4, 0, 0]) == int(v)  # truncated toward zero
            assert torch.equal(out[:, :, :2], x[:, :, 3:])
        for v in bad:
            with pytest.raises(ValueError, match="pad_value .* does not fit the output dtype"):
                ops.resample([x], m, (5, 5, 5), ["nearest"], ["constant"], [v])
    # a floating output takes any finite value; other paddings ignore it
    (out,) = ops.resample([lab.float()], m, (5, 5, 5), ["nearest"], ["constant"], [-1e30])
    assert out[0, 0, 4, 0, 0].item() == float(torch.tensor(-1e30, dtype=torch.float32))
    assert ops.resample([lab], m, (5, 5, 5), ["nearest"], ["zeros"], [-1.0])[0].dtype == torch.uint8


def test_bad_inputs_give_named_errors():
    x = torch.randn(2, 1, 4, 4, 4)
    m = random_matrices(2, (4, 4, 4), (4, 4, 4), seed=1)
    with pytest.raises(ValueError, match="matrices must be \\(N, 3, 4\\) with N = 2"):
        ops.resample([x], m[:1], (4, 4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="linear and B-spline interpolation need a floating tensor"):
        ops.resample([x.long()], m, (4, 4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="has batch size 1, inputs\\[0\\] has 2"):
        ops.resample([x, x[:1]], m, (4, 4, 4), ["linear", "linear"], ["zeros", "zeros"])
    with pytest.raises(ValueError, match="matrices must be finite"):
        bad = m.clone()
        bad[0, 1, 2] = math.nan
        ops.resample([x], bad, (4, 4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="out_size must be \\[D, H, W\\]"):
        ops.resample([x], m, (4, 4), ["linear"], ["zeros"])
    with pytest.raises(ValueError, match="inputs\\[0\\] must be 5-D"):
        ops.resample([x[0]], m, (4, 4, 4), ["linear"], ["zeros"])


@pytest.mark.parametrize("device", CPU_AND_CUDA)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection", "constant"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_gradcheck_float64(device, padding, align_corners):
    x = torch.randn(2, 2, 4, 5, 3, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
    m = random_matrices(2, (4, 5, 3), (3, 4, 5), seed=3).to(device).requires_grad_()
    f = lambda x, m: ops.resample([x], m, (3, 4, 5), ["linear"], [padding], [0.7], align_corners=align_corners)[0]
    assert torch.autograd.gradcheck(f, (x, m), eps=1e-6, atol=1e-6)
    g = lambda x: ops.resample([x], m.detach(), (3, 4, 5), ["nearest"], [padding], [0.7],
                               align_corners=align_corners)[0]
    assert torch.autograd.gradcheck(g, (x,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("device", CPU_AND_CUDA)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_gradients_match_grid_sample(device, padding, align_corners):
    """Input and matrix gradients vs grid_sample + affine_grid's autograd (float64; the
    matrix gradient goes through theta_for's conversion, hence the looser 1e-7)."""
    shape, out_size = (2, 3, 7, 6, 8), (5, 9, 6)
    x0 = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).to(device)
    m0 = random_matrices(2, shape[2:], out_size, seed=8).to(device)
    w = torch.randn(2, 3, *out_size, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(device)
    x, m = x0.clone().requires_grad_(), m0.clone().requires_grad_()
    (ops.resample([x], m, out_size, ["linear"], [padding], align_corners=align_corners)[0] * w).sum().backward()
    xr, mr = x0.clone().requires_grad_(), m0.clone().requires_grad_()
    grid = F.affine_grid(theta_for(mr, shape[2:], out_size, align_corners).to(device), (2, 3, *out_size),
                         align_corners=align_corners)
    (F.grid_sample(xr, grid, mode="bilinear", padding_mode=padding, align_corners=align_corners) * w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(m.grad, mr.grad, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("device", CPU_AND_CUDA)
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_nearest_input_gradient_matches_grid_sample(device, padding, align_corners):
    """Nearest mode's input gradient (each output's weight added to the voxel it copied) vs
    grid_sample's nearest backward, float64, on the exact-tie maps of tie_case (so both pick the
    same voxel, ties included) and on a generic map 0.75 x + 0.3 whose coordinates stay 0.05
    voxel or more from a tie. Sums of at most a few float64 terms: 1e-12."""
    in_size, out_size, mats, src = tie_case(align_corners)
    generic = torch.zeros(2, 3, 4, dtype=torch.float64)
    generic[:, 0, 0], generic[:, 1, 1], generic[:, 2, 2] = 0.75, 0.75, 0.75
    generic[:, :, 3] = 0.3
    generic[1, 0, 1] = 0.25  # a shear: more than one axis feeds a coordinate
    idx = torch.stack(torch.meshgrid(*[torch.arange(s, dtype=torch.float64) for s in out_size], indexing="ij"))
    src_generic = torch.einsum("nrk,kdhw->nrdhw", generic[:, :, :3], idx) + generic[:, :, 3].view(2, 3, 1, 1, 1)
    g = torch.Generator().manual_seed(31)
    x0 = torch.randn(2, 2, *in_size, dtype=torch.float64, generator=g).to(device)
    w = torch.randn(2, 2, *out_size, dtype=torch.float64, generator=g).to(device)
    for m, s in ((mats, src), (generic, src_generic)):
        x = x0.clone().requires_grad_()
        (ops.resample([x], m.to(device), out_size, ["nearest"], [padding], align_corners=align_corners)[0] * w
         ).sum().backward()
        xr = x0.clone().requires_grad_()
        grid = grid_at_indices(s, in_size, align_corners).to(device)
        (F.grid_sample(xr, grid, mode="nearest", padding_mode=padding, align_corners=align_corners) * w
         ).sum().backward()
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-12, atol=1e-12)
        assert xr.grad.abs().sum() > 0


def _resample_grads(x0, m0, w, out_size, mode, padding, align_corners):
    x, m = x0.clone().requires_grad_(), m0.clone().requires_grad_(mode == "linear")
    (ops.resample([x], m, out_size, [mode], [padding], [0.7], align_corners=align_corners)[0] * w).sum().backward()
    return x.grad, m.grad


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection", "constant"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_backward_is_deterministic(mode, padding, dtype):
    """The CPU backward scatters many outputs into one input voxel (a 2.5x downscale) and
    reduces the matrix gradient over the volume: repeated calls and 1 vs 2 OpenMP threads must
    give bit-identical image and matrix gradients (no order-dependent float sums)."""
    shape, out_size = (2, 3, 9, 8, 10), (21, 19, 23)
    x0 = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(41))
    m0 = random_matrices(2, shape[2:], out_size, seed=42, strength=1.5)
    m0[:, :, :3] *= 0.4
    w = torch.randn(2, 3, *out_size, dtype=dtype, generator=torch.Generator().manual_seed(43))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        gx1, gm1 = _resample_grads(x0, m0, w, out_size, mode, padding, False)
        torch.set_num_threads(2)
        runs = [_resample_grads(x0, m0, w, out_size, mode, padding, False) for _ in range(3)]
    finally:
        torch.set_num_threads(threads)
    assert gx1.abs().sum() > 0 and not torch.isnan(gx1).any()
    for gx, gm in runs:
        assert torch.equal(gx, gx1)
        if mode == "linear":
            assert gm1.abs().sum() > 0
            assert torch.equal(gm, gm1)


def test_labels_are_not_differentiable_and_images_are():
    img = torch.randn(1, 1, 4, 4, 4, requires_grad=True)
    lab = torch.randint(0, 3, (1, 1, 4, 4, 4))
    m = random_matrices(1, (4, 4, 4), (4, 4, 4), seed=1)
    out_img, out_lab = ops.resample([img, lab], m, (4, 4, 4), ["linear", "nearest"], ["zeros", "zeros"])
    assert out_img.requires_grad and not out_lab.requires_grad
    out_img.sum().backward()
    assert img.grad is not None and img.grad.abs().sum() > 0


def test_opcheck():
    x = torch.randn(2, 2, 5, 6, 7)
    lab = torch.randint(0, 5, (2, 1, 5, 6, 7), dtype=torch.int32)
    m = random_matrices(2, (5, 6, 7), (4, 5, 6), seed=2)
    torch.library.opcheck(torch.ops.voxaug.resample, ([x, lab], m, [4, 5, 6], [1, 0], [2, 3], [0.0, 7.0], True))
    xg, mg = x.double().requires_grad_(), m.clone().requires_grad_()
    torch.library.opcheck(torch.ops.voxaug.resample, ([xg], mg, [4, 5, 6], [1], [1], [0.0], False))
