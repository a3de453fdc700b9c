"""voxaug.ops.gaussian_smooth and voxaug.filter vs MONAI (GaussianSmooth, GaussianFilter,
RandGaussianSmooth, RandGaussianSharpen) and scipy.ndimage.correlate1d."""
import numpy as np
import pytest
import torch

from voxaug import filter as vf
from voxaug import ops

from conftest import devices

DEVICES = devices()
monai = pytest.importorskip("monai")
from monai.networks.layers import GaussianFilter  # noqa: E402
from monai.networks.layers.convutils import gaussian_1d  # noqa: E402
from monai.transforms import GaussianSharpen as MGaussianSharpen  # noqa: E402
from monai.transforms import GaussianSmooth as MGaussianSmooth  # noqa: E402
from monai.transforms import RandGaussianSharpen as MRandGaussianSharpen  # noqa: E402
from monai.transforms import RandGaussianSmooth as MRandGaussianSmooth  # noqa: E402


def rand(shape, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 200 - 50).to(dtype).to(device)


def close(ours, ref, rel=1e-5):
    ours, ref = ours.detach().cpu().double(), ref.detach().cpu().double()
    assert ours.shape == ref.shape
    assert not torch.isnan(ours).any()
    assert ours.abs().sum() > 0
    torch.testing.assert_close(ours, ref, rtol=rel, atol=rel * ref.abs().max().item())


SHAPES = [(1, 9, 10, 11), (2, 1, 7, 5), (1, 16, 3, 33), (3, 4, 4, 4), (1, 1, 1, 1)]
SIGMAS = [1.0, (0.5, 1.5, 2.5), (0.0, 1.0, 0.7), (3.0, 0.3, 5.0)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_gaussian_smooth_matches_monai(device, shape, sigma):
    x = rand(shape, seed=sum(shape))
    ref = MGaussianSmooth(sigma=sigma)(x)
    ours = vf.GaussianSmooth(sigma=sigma)(x.to(device))
    assert ours.dtype == torch.float32 and ours.shape == x.shape
    if shape == (1, 1, 1, 1, 1):
        torch.testing.assert_close(ours.cpu(), torch.as_tensor(ref))
    else:
        close(ours, torch.as_tensor(ref))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sigma", [0.8, (1.5, 0.5, 2.0), (4.0, 4.0, 0.0)])
def test_gaussian_filter_truncated3_matches_monai(device, dtype, sigma):
    x = rand((2, 3, 12, 9, 14), dtype=dtype, seed=3)
    ref = GaussianFilter(3, sigma, truncated=3.0)(x)
    ours = ops.gaussian_smooth(x.to(device), sigma, truncated=3.0)
    assert ours.dtype == dtype
    close(ours, ref, 1e-5 if dtype == torch.float32 else 1e-7)


def test_taps_equal_monai_gaussian_1d():
    """The impulse response of one axis is the kernel itself (1 * tap + 0 exactly)."""
    for sigma in [0.3, 0.5, 1.0, 1.37, 2.0, 3.0, 6.5]:
        for truncated in [3.0, 4.0]:
            ref = gaussian_1d(torch.tensor(sigma), truncated=truncated).double()
            r = (ref.numel() - 1) // 2
            x = torch.zeros(1, 1, 1, 1, 2 * r + 1, dtype=torch.float64)
            x[..., r] = 1.0
            ours = ops.gaussian_smooth(x, (0.0, 0.0, sigma), truncated=truncated).flatten()
            assert ours.numel() == ref.numel()
            # MONAI's taps come from torch's float32 erf (on the CPU a polynomial approximation,
            # on CUDA erff); ours from a correctly rounded one. Both subtract values near 1 in
            # float32, so they agree to a float32 ulp of 1 (6e-8) absolute, not relative.
            assert ((ours - ref).abs() <= 1.2e-7).all(), (sigma, truncated, (ours - ref).abs().max())
            assert (ours == ref).float().mean() > 0.5  # mostly the very same float32 values


@pytest.mark.parametrize("shape", [(1, 1, 17, 12, 9), (2, 2, 5, 30, 1)])
def test_matches_scipy_correlate1d(shape):
    ndimage = pytest.importorskip("scipy.ndimage")
    sigma = (1.3, 0.0, 2.2)
    x = rand(shape, dtype=torch.float64, seed=5)
    ours = ops.gaussian_smooth(x, sigma).numpy()
    ref = x.numpy().copy()
    for axis, s in enumerate(sigma):
        if s == 0:
            continue
        w = gaussian_1d(torch.tensor(s), truncated=4.0).double().numpy()
        ref = ndimage.correlate1d(ref, w, axis=axis + 2, mode="constant", cval=0.0)
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("device", DEVICES)
def test_per_sample_sigma_in_one_batch(device):
    x = rand((4, 2, 10, 11, 12), seed=7, device=device)
    sigma = torch.tensor([[0.5, 1.0, 1.5], [2.0, 0.0, 0.7], [3.0, 3.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    out = ops.gaussian_smooth(x, sigma)
    for i in range(4):
        alone = ops.gaussian_smooth(x[i:i + 1], sigma[i])
        assert torch.equal(out[i:i + 1], alone), i  # a sample's result does not depend on its batch
        ref = GaussianFilter(3, sigma[i].tolist())(x[i:i + 1].cpu())
        if i == 3:
            assert torch.equal(out[3].cpu(), x[3].cpu())  # sigma 0 everywhere: identity
        else:
            close(out[i:i + 1], ref)


def test_real_volume_ch2(ch2):
    vol, _ = ch2
    x = vol.float()
    for sigma in [(1.5, 2.0, 0.8), 3.0]:
        ref = MGaussianSmooth(sigma=sigma)(x)
        ours = vf.GaussianSmooth(sigma=sigma)(vol)  # uint8 in, float32 out
        close(ours, torch.as_tensor(ref))
    ref3 = GaussianFilter(3, (1.0, 2.5, 0.5), truncated=3.0)(x[None])
    close(ops.gaussian_smooth(vol[None], (1.0, 2.5, 0.5), truncated=3.0), ref3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.uint8, torch.int16, torch.float64])
def test_dtypes(device, dtype):
    x = rand((2, 1, 8, 9, 10), seed=9).clamp(0, 120).to(dtype)
    ref = GaussianFilter(3, (1.0, 0.6, 2.0))(x.double() if dtype == torch.float64 else x.float())
    out = ops.gaussian_smooth(x.to(device), (1.0, 0.6, 2.0))
    expected = dtype if dtype.is_floating_point else torch.float32
    assert out.dtype == expected
    rel = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-5)
    close(out, ref, rel)
    for odt in [torch.float32, torch.float16, torch.bfloat16, torch.float64]:
        o = ops.gaussian_smooth(x.to(device), (1.0, 0.6, 2.0), dtype=odt)
        assert o.dtype == odt
        full = ops.gaussian_smooth(x.to(device), (1.0, 0.6, 2.0), dtype=torch.float64 if dtype == torch.float64
                                   else torch.float32)
        if odt == torch.float64 and dtype != torch.float64:
            close(o, full, 1e-6)  # a float64 output makes the whole computation float64
        else:
            assert torch.equal(o, full.to(odt))  # the compute-precision result rounded once


@pytest.mark.parametrize("device", DEVICES)
def test_non_contiguous_input(device):
    base = rand((2, 3, 11, 12, 13), seed=11, device=device)
    view = base.permute(0, 1, 4, 2, 3)[:, ::2, :, 1:, ::2]  # strided, transposed
    assert not view.is_contiguous()
    sigma = torch.tensor([[1.0, 2.0, 0.5], [0.7, 0.0, 1.4]], dtype=torch.float64)
    assert torch.equal(ops.gaussian_smooth(view, sigma), ops.gaussian_smooth(view.contiguous(), sigma))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUDA-vs-CPU twin comparison skipped")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_cuda_matches_cpu_bitwise(dtype):
    x = rand((3, 2, 20, 33, 70), dtype=dtype, seed=13)
    sigma = torch.tensor([[0.5, 1.0, 3.0], [2.0, 0.0, 0.7], [30.0, 1.0, 40.0]], dtype=torch.float64)
    cpu = ops.gaussian_smooth(x, sigma)
    gpu = ops.gaussian_smooth(x.cuda(), sigma)
    assert torch.equal(cpu, gpu.cpu())


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_and_gradcheck(device):
    x = rand((2, 2, 5, 6, 7), seed=15, device=device)
    sigma = torch.tensor([[1.0, 0.5, 2.0], [0.0, 1.5, 0.3]], dtype=torch.float64)
    torch.library.opcheck(torch.ops.voxaug.gaussian_smooth, (x, sigma, 4.0, None))
    torch.library.opcheck(torch.ops.voxaug.gaussian_smooth, (x.to(torch.uint8), sigma, 3.0, torch.float16))
    xg = x.double().requires_grad_()
    torch.library.opcheck(torch.ops.voxaug.gaussian_smooth, (xg, sigma, 3.0, None))
    xs = rand((2, 1, 4, 5, 3), dtype=torch.float64, seed=1, device=device).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: torch.ops.voxaug.gaussian_smooth(t, sigma, 3.0, None), (xs,))


def test_bad_inputs():
    x = rand((2, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="sigma must be"):
        torch.ops.voxaug.gaussian_smooth(x, torch.ones(3, 3, dtype=torch.float64), 4.0, None)
    with pytest.raises(ValueError, match="sigma must be"):
        ops.gaussian_smooth(x, (1.0, 2.0))
    with pytest.raises(ValueError, match="truncated must be positive"):
        ops.gaussian_smooth(x, 1.0, truncated=0.0)
    with pytest.raises(ValueError, match=r"sigma\[1\]\[2\] must be finite"):
        ops.gaussian_smooth(x, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, float("nan")]]))
    with pytest.raises(ValueError, match="dtype must be float64"):
        ops.gaussian_smooth(x, 1.0, dtype=torch.int32)
    with pytest.raises(ValueError, match="image must be 5-D"):
        torch.ops.voxaug.gaussian_smooth(x[0], torch.ones(1, 3, dtype=torch.float64), 4.0, None)
    with pytest.raises(ValueError, match="too large"):
        ops.gaussian_smooth(x, 1e9)
    with pytest.raises(NotImplementedError, match="approx"):
        vf.GaussianSmooth(1.0, approx="sampled")
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="sigma must be a CPU tensor"):
            torch.ops.voxaug.gaussian_smooth(x.cuda(), torch.ones(2, 3, dtype=torch.float64, device="cuda"), 4.0, None)
    # Empty batch: a (0, ...) result, no launch.
    assert ops.gaussian_smooth(torch.zeros(0, 1, 3, 3, 3), 1.0).shape == (0, 1, 3, 3, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_rand_gaussian_smooth_matches_monai_with_same_draw(device):
    t = vf.RandGaussianSmooth(sigma_x=(0.5, 1.5), sigma_y=(0.25, 2.0), sigma_z=(1.0, 3.0), prob=1.0, seed=3)
    x = rand((2, 10, 12, 9), seed=17)
    ours = t(x.to(device))
    m = MRandGaussianSmooth(sigma_x=(0.5, 1.5), sigma_y=(0.25, 2.0), sigma_z=(1.0, 3.0), prob=1.0)
    m._do_transform = True
    m.x, m.y, m.z = t.x, t.y, t.z
    assert 0.5 <= t.x < 1.5 and 0.25 <= t.y < 2.0 and 1.0 <= t.z < 3.0
    close(ours, torch.as_tensor(m(x, randomize=False)))
    # A batch: each sample with its own draw, read back from the transform.
    xb = rand((5, 1, 8, 9, 10), seed=19)
    tb = vf.RandGaussianSmooth(prob=0.6, seed=5)
    out = tb(xb.to(device))
    assert tb.last_sigma.shape == (5, 3)
    for i in range(5):
        if bool(tb.last_applied[i]):
            m.x, m.y, m.z = tb.last_sigma[i].tolist()
            close(out[i], torch.as_tensor(m(xb[i], randomize=False)))
        else:
            assert torch.equal(out[i].cpu(), xb[i])
    assert torch.equal(tb(xb.to(device), randomize=False), out)  # MONAI's randomize=False
    with pytest.raises(ValueError, match="batch of 5"):
        tb(xb[:2], randomize=False)
    # Same seed, same draw; prob 0: the input itself.
    assert torch.equal(vf.RandGaussianSmooth(prob=0.6, seed=5)(xb.to(device)), out)
    assert vf.RandGaussianSmooth(prob=0.0)(x) is x


@pytest.mark.parametrize("device", DEVICES)
def test_rand_gaussian_sharpen_matches_monai_with_same_draw(device):
    x = rand((1, 11, 10, 12), seed=21)
    for sigma2 in [0.5, (0.3, 0.6)]:
        t = vf.RandGaussianSharpen(sigma2_x=sigma2, sigma2_y=sigma2, sigma2_z=sigma2, prob=1.0, seed=7)
        ours = t(x.to(device))
        m = MRandGaussianSharpen(sigma2_x=sigma2, sigma2_y=sigma2, sigma2_z=sigma2, prob=1.0)
        m._do_transform = True
        m.x1, m.y1, m.z1, m.x2, m.y2, m.z2, m.a = t.x1, t.y1, t.z1, t.x2, t.y2, t.z2, t.a
        assert 10.0 <= t.a < 30.0
        if isinstance(sigma2, float):
            assert 0.5 >= t.x2 >= t.x1 or t.x1 <= t.x2 <= 0.5 or t.x1 >= t.x2 >= 0.5  # U(0.5, x1)
        ref = torch.as_tensor(m(x, randomize=False))
        # alpha (10..30) amplifies the difference of two smoothings: compare at that scale.
        close(ours, ref, 1e-4)
    close(vf.GaussianSharpen()(x.to(device)), torch.as_tensor(MGaussianSharpen()(x)), 1e-4)


def test_dictionary_forms_share_the_draw():
    x = rand((1, 8, 9, 10), seed=23)
    d = {"a": x, "b": x.clone(), "c": 5}
    out = vf.RandGaussianSmoothd(["a", "b"], prob=1.0, seed=9)(d)
    assert torch.equal(out["a"], out["b"]) and out["c"] == 5
    assert not torch.equal(out["a"], x.float())
    out = vf.GaussianSmoothd("a", sigma=1.2)(d)
    assert torch.equal(out["a"], vf.GaussianSmooth(1.2)(x))
    out = vf.RandGaussianSharpend(["a", "b"], prob=1.0, seed=2)(d)
    assert torch.equal(out["a"], out["b"])
    with pytest.raises(KeyError):
        vf.GaussianSmoothd("z")(d)


def tio_blur(x, std, spacing=(1.0, 1.0, 1.0)):
    """TorchIO's own Blur (scipy.ndimage.gaussian_filter per channel) of a (C, X, Y, Z) tensor."""
    tio = pytest.importorskip("torchio")
    img = tio.ScalarImage(tensor=x.float(), affine=np.diag([*spacing, 1.0]))
    return tio.Blur(std=tuple(float(v) for v in std))(img).data


def test_random_blur_torchio_style():
    x = rand((1, 30, 40, 64), seed=25)
    t = vf.RandomBlur(std=(2.0, 3.0), seed=4)
    out = t(x, spacing=(2.0, 1.0, 0.5))
    std = t.last_std[0]
    assert ((std >= 2.0) & (std < 3.0)).all()
    torch.testing.assert_close(t.last_sigma[0], std / torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64))
    # TorchIO's Blur with the read-back std, borders included (scipy's sampled taps, 'reflect').
    close(out, tio_blur(x, std.tolist(), (2.0, 1.0, 0.5)))
    # Spacing from a MetaTensor's affine.
    from monai.data import MetaTensor

    mt = MetaTensor(x, affine=torch.diag(torch.tensor([2.0, 1.0, 0.5, 1.0], dtype=torch.float64)))
    t2 = vf.RandomBlur(std=(2.0, 3.0), seed=4)
    out2 = t2(mt)
    assert isinstance(out2, MetaTensor)
    assert torch.equal(out2.as_tensor(), out)
    with pytest.raises(ValueError, match="std"):
        vf.RandomBlur(std=-1.0)


@pytest.mark.parametrize("std,spacing,shape", [
    ((1.0, 2.0, 0.5), (1.0, 1.0, 1.0), (2, 12, 15, 17)),
    ((3.0, 0.0, 7.0), (1.0, 0.7, 2.0), (1, 9, 10, 4)),   # an axis left alone; radius 14 on 4 voxels
    ((0.3, 0.45, 0.2), (1.0, 1.0, 1.0), (1, 6, 7, 8)),    # radius 1 and 2 kernels
    (2.5, (0.5, 0.5, 3.0), (3, 1, 20, 11)),                # a size-1 axis; a number for std
])
def test_blur_equals_torchio_and_scipy(std, spacing, shape):
    """TorchIO Blur(std) in mm vs TorchIO's own (scipy.ndimage.gaussian_filter, float32 per axis)
    and vs scipy in float64 on float64 input: the whole volume, borders included, 1e-5 of the
    largest value for float32 compute (float32 taps and sums vs scipy's float64), 1e-12 in
    float64."""
    ndi = pytest.importorskip("scipy.ndimage")
    x = rand(shape, seed=sum(shape)) - 50.0
    out = vf.Blur(std, spacing=spacing)(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    std3 = (float(std),) * 3 if isinstance(std, (int, float)) else std
    close(out, tio_blur(x, std3, spacing))
    sigma = np.array(std3) / np.array(spacing)
    xd = x.double()
    ref = torch.stack([torch.from_numpy(ndi.gaussian_filter(c.numpy(), sigma)) for c in xd])
    got = ops.gaussian_smooth(xd[None], torch.tensor(sigma)[None], 4.0, taps="sampled", border="reflect")[0]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12 * float(ref.abs().max()))


def test_blur_per_sample_batch_gradient_and_errors():
    """A batch blurs each sample with its own sigmas in one call (as sample-by-sample calls); the
    gradient of the reflect-bordered filter is its adjoint (gradcheck in float64: the fold of
    the mirrored terms, radii beyond the axis included); bad arguments name themselves."""
    x = rand((3, 2, 7, 9, 5), seed=61)
    sigma = torch.tensor([[1.0, 0.5, 3.0], [0.0, 2.0, 0.7], [6.0, 0.2, 1.5]], dtype=torch.float64)
    batch = ops.gaussian_smooth(x, sigma, 4.0, taps="sampled", border="reflect")
    for i in range(3):
        one = ops.gaussian_smooth(x[i:i + 1], sigma[i:i + 1], 4.0, taps="sampled", border="reflect")
        assert torch.equal(batch[i:i + 1], one)
    xs = torch.rand((2, 1, 5, 4, 6), dtype=torch.float64, requires_grad=True)
    sg = torch.tensor([[1.3, 0.0, 4.0], [0.6, 2.2, 0.9]], dtype=torch.float64)
    for taps, border in (("sampled", "reflect"), ("erf", "reflect"), ("sampled", "zeros")):
        assert torch.autograd.gradcheck(lambda v: ops.gaussian_smooth(v, sg, 4.0, taps=taps, border=border), (xs,))
    # A batch MetaTensor's (N, 4, 4) affine gives the spacing as its (4, 4) one does.
    from monai.data import MetaTensor

    aff = torch.diag(torch.tensor([2.0, 1.0, 0.5, 1.0], dtype=torch.float64))
    one = vf.Blur((2.0, 1.0, 1.0))(MetaTensor(x, affine=aff))
    per_sample = vf.Blur((2.0, 1.0, 1.0))(MetaTensor(x, affine=aff[None].repeat(3, 1, 1)))
    assert torch.equal(one.as_tensor(), per_sample.as_tensor())
    assert torch.equal(one.as_tensor(), vf.Blur((2.0, 1.0, 1.0), spacing=(2.0, 1.0, 0.5))(x))
    with pytest.raises(ValueError, match="taps"):
        ops.gaussian_smooth(x, sigma, taps="box")
    with pytest.raises(ValueError, match="border"):
        ops.gaussian_smooth(x, sigma, border="wrap")
    with pytest.raises(ValueError, match=r"sigma\[0\]\[0\] must be >= 0"):
        ops.gaussian_smooth(x, -sigma, taps="sampled")
    with pytest.raises(ValueError, match="std"):
        vf.Blur((1.0, -2.0, 1.0))
    with pytest.raises(ValueError, match="std"):
        vf.Blur((1.0, 2.0))
    with pytest.raises(ValueError, match="dict"):
        vf.Blur({"t1": (1.0, 1.0, 1.0)})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_blur_cuda_equals_cpu():
    """The CUDA tiles' mirrored halo and the generic (wide-kernel) path vs the CPU twin, bit for bit."""
    x = rand((2, 2, 20, 33, 140), seed=62)
    for sigma in ([[1.0, 2.5, 0.7], [4.0, 0.0, 9.0]], [[40.0, 30.0, 60.0], [0.5, 0.5, 0.5]]):
        s = torch.tensor(sigma, dtype=torch.float64)
        cpu = ops.gaussian_smooth(x, s, 4.0, taps="sampled", border="reflect")
        gpu = ops.gaussian_smooth(x.cuda(), s, 4.0, taps="sampled", border="reflect")
        assert torch.equal(gpu.cpu(), cpu)


# ---------------- issue 5: half inputs, ch2, per-sample gates ----------------
# Half inputs: the filters compute and return float32 (as MONAI, which converts to float32 first),
# and every float16 / bfloat16 value is exact in float32, so MONAI / TorchIO on the float32 copy of
# the half data is the reference at the float32 tolerance of the float32 tests; the half type's
# epsilon does not enter (its rounding happened before both, on the input).
HALF = [torch.float16, torch.bfloat16]


def monai_sharpen_with(t, i):
    """MONAI RandGaussianSharpen pinned to sample i's read-back draw of voxaug's RandGaussianSharpen."""
    m = MRandGaussianSharpen(prob=1.0)
    m._do_transform = True
    m.x1, m.y1, m.z1 = t.last_sigma1[i].tolist()
    m.x2, m.y2, m.z2 = t.last_sigma2[i].tolist()
    m.a = float(t.last_alpha[i])
    return m


def ch2_crop(ch2):
    vol, affine = ch2
    return vol[:, 58:122, 76:140, 60:124], affine  # 64^3 through the middle of the brain


@pytest.mark.parametrize("dtype", HALF)
def test_half_inputs_sharpen_and_smooth_match_monai_on_float32_copy(dtype):
    """GaussianSharpen, RandGaussianSharpen (read-back draw) and RandGaussianSmooth (read-back sigma)
    on float16 / bfloat16 batches: float32 results equal to MONAI on the float32 copy at the float32
    tests' tolerances (1e-4 of the largest value with alpha's amplification, 1e-5 without)."""
    x = rand((3, 2, 10, 11, 9), seed=41).to(dtype)
    xf = x.float()
    out = vf.GaussianSharpen(sigma1=(1.5, 2.0, 1.0), sigma2=0.7, alpha=12.0)(x)
    assert out.dtype == torch.float32
    m = MGaussianSharpen(sigma1=(1.5, 2.0, 1.0), sigma2=0.7, alpha=12.0)
    for i in range(3):
        close(out[i], torch.as_tensor(m(xf[i])), 1e-4)
    t = vf.RandGaussianSharpen(prob=1.0, seed=42)
    out = t(x)
    assert out.dtype == torch.float32
    for i in range(3):
        close(out[i], torch.as_tensor(monai_sharpen_with(t, i)(xf[i], randomize=False)), 1e-4)
    s = vf.RandGaussianSmooth(sigma_x=(0.5, 2.0), sigma_y=(0.3, 1.0), sigma_z=(1.0, 2.5), prob=1.0, seed=43)
    out = s(x)
    assert out.dtype == torch.float32
    ms = MRandGaussianSmooth(prob=1.0)
    ms._do_transform = True
    for i in range(3):
        ms.x, ms.y, ms.z = s.last_sigma[i].tolist()
        close(out[i], torch.as_tensor(ms(xf[i], randomize=False)))


@pytest.mark.parametrize("dtype", HALF)
def test_half_inputs_random_blur_matches_monai_and_torchio_on_float32_copy(dtype):
    """TorchIO RandomBlur on half inputs: TorchIO's Blur with the read-back std on the float32
    copy, the whole volume at the float32 test's 1e-5."""
    x = rand((1, 24, 30, 40), seed=44).to(dtype)
    t = vf.RandomBlur(std=(1.5, 2.5), seed=45)
    out = t(x, spacing=(1.0, 0.8, 0.5))
    assert out.dtype == torch.float32
    close(out, tio_blur(x.float(), t.last_std[0].tolist(), (1.0, 0.8, 0.5)))


def test_gaussian_sharpen_matches_monai_on_ch2(ch2):
    """The real volume (uint8 in, float32 out; a 64^3 crop keeps it fast): MONAI's GaussianSharpen
    with its defaults and with per-axis sigmas, 1e-4 of the largest value (alpha up to 30 amplifies
    float32 rounding of the two smoothings' difference)."""
    crop, _ = ch2_crop(ch2)
    for kw in (dict(), dict(sigma1=(2.0, 1.0, 1.5), sigma2=(0.5, 0.8, 0.3), alpha=15.0)):
        out = vf.GaussianSharpen(**kw)(crop)
        assert out.dtype == torch.float32
        close(out, torch.as_tensor(MGaussianSharpen(**kw)(crop.float())), 1e-4)


def test_rand_gaussian_sharpen_read_back_matches_monai_on_ch2(ch2):
    """RandGaussianSharpen on the real volume: its draw read back (sample 0's also as MONAI's
    x1 ... a attributes) and given to MONAI's RandGaussianSharpen; 1e-4 as above."""
    crop, _ = ch2_crop(ch2)
    t = vf.RandGaussianSharpen(sigma1_x=(0.5, 1.5), sigma2_x=(0.2, 0.4), prob=1.0, seed=46)
    out = t(crop)
    assert (t.x1, t.y1, t.z1) == tuple(t.last_sigma1[0].tolist()) and t.a == float(t.last_alpha[0])
    assert 0.5 <= t.x1 < 1.5 and 0.2 <= t.x2 < 0.4 and 10.0 <= t.a < 30.0
    assert 0.5 <= t.y2 <= t.y1  # sigma2_y = 0.5: U(0.5, y1)
    close(out, torch.as_tensor(monai_sharpen_with(t, 0)(crop.float(), randomize=False)), 1e-4)


def test_random_blur_matches_monai_and_torchio_on_ch2(ch2):
    """TorchIO RandomBlur on the real volume as a MetaTensor (spacing from its affine): TorchIO's
    Blur of the same image with the read-back std, the whole volume at 1e-5 of the largest value;
    and the whole 181 x 217 x 181 volume with TorchIO's own RandomBlur-sized std."""
    tio = pytest.importorskip("torchio")
    from monai.data import MetaTensor

    crop, affine = ch2_crop(ch2)
    t = vf.RandomBlur(std=(1.0, 3.0), seed=47)
    out = t(MetaTensor(crop, affine=torch.as_tensor(affine)))
    assert isinstance(out, MetaTensor) and out.dtype == torch.float32
    out = out.as_tensor()
    torch.testing.assert_close(t.last_sigma, t.last_std)  # ch2 has 1 mm voxels
    ref = tio.Blur(std=tuple(t.last_std[0].tolist()))(tio.ScalarImage(tensor=crop.float(), affine=affine)).data
    close(out, ref)
    assert not torch.equal(out, crop.float())
    vol, _ = ch2
    whole = vf.Blur((2.0, 1.0, 0.5))(vol)
    close(whole, tio.Blur(std=(2.0, 1.0, 0.5))(tio.ScalarImage(tensor=vol.float(), affine=affine)).data)


def test_rand_gaussian_sharpen_per_sample_gate_in_a_batch():
    """prob 0.6 on a batch of 8: each sample either equals MONAI's RandGaussianSharpen with its own
    read-back draw (1e-4) or is its float32 copy, unchanged; both kinds occur."""
    x = rand((8, 1, 9, 10, 11), seed=48)
    t = vf.RandGaussianSharpen(sigma2_x=(0.1, 0.4), prob=0.6, seed=49)
    out = t(x)
    applied = t.last_applied
    assert out.dtype == torch.float32 and 0 < int(applied.sum()) < 8
    for i in range(8):
        if applied[i]:
            close(out[i], torch.as_tensor(monai_sharpen_with(t, i)(x[i], randomize=False)), 1e-4)
            assert not torch.equal(out[i], x[i])
        else:
            assert torch.equal(out[i], x[i])
            assert (t.last_sigma1[i] == 0).all() and float(t.last_alpha[i]) == 0.0
        # the same draw on the sample alone: the same result (a closed gate returns the input)
        alone = vf.RandGaussianSharpen(sigma2_x=(0.1, 0.4), prob=0.6).apply(
            x[i:i + 1], {k: v[i:i + 1] for k, v in t._last_params.items()})
        assert torch.equal(alone[0], out[i])


def test_random_blur_per_sample_gate_in_a_batch():
    """TorchIO RandomBlur with p = 0.5 on a batch of 8: each sample either equals TorchIO's Blur with
    its read-back std (1e-5) or is its float32 copy; p = 0 returns the input itself."""
    x = rand((8, 2, 9, 12, 10), seed=50)
    t = vf.RandomBlur(std=(0.5, 2.0), p=0.5, seed=51)
    out = t(x, spacing=(1.0, 1.5, 2.0))
    applied = t.last_applied
    assert 0 < int(applied.sum()) < 8
    for i in range(8):
        if applied[i]:
            std = t.last_std[i]
            assert ((std >= 0.5) & (std < 2.0)).all()
            close(out[i], tio_blur(x[i], std.tolist(), (1.0, 1.5, 2.0)))
        else:
            assert torch.equal(out[i], x[i]) and (t.last_std[i] == 0).all()
    assert vf.RandomBlur(p=0.0, seed=1)(x) is x
