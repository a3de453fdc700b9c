"""voxaug.ops.moments / percentiles and voxaug.stats (NormalizeIntensity,
ScaleIntensityRangePercentiles) vs MONAI, torch.quantile, numpy.percentile and float64 torch."""
import itertools

import numpy as np
import pytest
import torch

from voxaug import ops
from voxaug import stats as vs

from conftest import devices

DEVICES = devices()
monai = pytest.importorskip("monai")
from monai.transforms import NormalizeIntensity as MNormalizeIntensity  # noqa: E402
from monai.transforms import NormalizeIntensityd as MNormalizeIntensityd  # noqa: E402
from monai.transforms import ScaleIntensityRangePercentiles as MSIRP  # noqa: E402


def rand(shape, dtype=torch.float32, seed=0, device="cpu", lo=-50.0, hi=150.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    return x.to(dtype).to(device)


def with_zeros(x, frac=0.3, seed=1):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(x.shape, generator=g) < frac
    return x.masked_fill(mask.to(x.device), 0)


def plain(t):
    t = torch.as_tensor(t)
    return t.as_tensor() if hasattr(t, "as_tensor") else t


def close(ours, ref, rel=1e-5):
    ours, ref = plain(ours).detach().cpu().double(), plain(ref).detach().cpu().double()
    assert ours.shape == ref.shape
    assert not torch.isnan(ours).any()
    assert ours.abs().sum() > 0
    torch.testing.assert_close(ours, ref, rtol=rel, atol=rel * max(ref.abs().max().item(), 1e-30))


SHAPES = [(1, 1, 9, 10, 11), (2, 3, 7, 5, 13), (3, 2, 1, 1, 1), (1, 2, 33, 1, 70), (4, 1, 4, 4, 4)]


# ---------------- moments ----------------
def ref_moments(x, channel_wise, nonzero):
    x = x.double().cpu()
    n, c = x.shape[:2]
    segs = x.reshape(n, c, -1) if channel_wise else x.reshape(n, 1, -1)
    out = torch.zeros(segs.shape[0], segs.shape[1], 3, dtype=torch.float64)
    for i in range(segs.shape[0]):
        for j in range(segs.shape[1]):
            v = segs[i, j]
            if nonzero:
                v = v[v != 0]
            if v.numel() == 0:
                continue
            out[i, j] = torch.stack([torch.tensor(float(v.numel()), dtype=torch.float64), v.mean(),
                                     v.std(unbiased=False)])
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("channel_wise,nonzero", list(itertools.product([False, True], [False, True])))
def test_moments_vs_float64_torch(device, shape, channel_wise, nonzero):
    x = with_zeros(rand(shape, torch.float64, seed=sum(shape)) * 3 + 1000.0)
    m = ops.moments(x.to(device), channel_wise, nonzero)
    assert m.dtype == torch.float64 and m.device.type == device
    torch.testing.assert_close(m.cpu(), ref_moments(x, channel_wise, nonzero), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                                   torch.int32])
def test_moments_dtypes(dtype):
    x = rand((2, 3, 9, 8, 7), torch.float64, seed=5, lo=0, hi=200).to(dtype)
    for cw, nz in itertools.product([False, True], [False, True]):
        torch.testing.assert_close(ops.moments(x, cw, nz), ref_moments(x, cw, nz), rtol=1e-12, atol=1e-10)


def test_moments_strided_and_special_segments():
    base = rand((3, 4, 10, 12, 14), torch.float32, seed=2)
    x = base[:, ::2, 1:9, ::3, 2:]  # non-contiguous view
    assert not x.is_contiguous()
    torch.testing.assert_close(ops.moments(x, True, False), ref_moments(x, True, False), rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(ops.moments(x.permute(0, 1, 4, 3, 2), False, True),
                               ref_moments(x.permute(0, 1, 4, 3, 2), False, True), rtol=1e-12, atol=1e-10)
    z = torch.zeros(2, 2, 5, 6, 7)
    z[1, 1] = 7.5  # constant channel: std exactly 0
    m = ops.moments(z, True, True)
    assert m[0].abs().sum() == 0 and m[1, 0].abs().sum() == 0  # all-zero segments: (0, 0, 0)
    assert m[1, 1].tolist() == [210.0, 7.5, 0.0]
    m = ops.moments(z, True, False)
    assert m[1, 1].tolist() == [210.0, 7.5, 0.0] and m[0, 0].tolist() == [210.0, 0.0, 0.0]


def test_moments_large_segment_deterministic():
    """Several chunks of the two-level reduction; the result is reproducible to the bit."""
    x = rand((1, 2, 40, 50, 61), torch.float32, seed=9) + 5000
    a, b = ops.moments(x, True), ops.moments(x.clone(), True)
    assert torch.equal(a, b)
    torch.testing.assert_close(a, ref_moments(x, True, False), rtol=1e-12, atol=1e-9)


# ---------------- percentiles ----------------
QS = [0.0, 0.5, 1.0, 10.0, 25.0, 33.3, 50.0, 75.0, 99.0, 99.9, 100.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("channel_wise", [False, True])
def test_percentiles_vs_numpy_and_torch_quantile(device, shape, channel_wise):
    x = rand(shape, torch.float64, seed=sum(shape) + 1)
    x[..., 0] = x[..., -1]  # ties
    p = ops.percentiles(x.to(device), QS, channel_wise).cpu()
    n, c = shape[:2]
    flat = x.reshape(n, c, -1) if channel_wise else x.reshape(n, 1, -1)
    ref_np = np.percentile(flat.numpy(), QS, axis=2)  # (q, n, segs)
    ref_t = torch.quantile(flat, torch.tensor(QS, dtype=torch.float64) / 100, dim=2)
    # float64 data: the same operations as numpy's (n - 1) * q and lerp -> the same bits.
    assert torch.equal(p, torch.from_numpy(ref_np).permute(1, 2, 0))
    torch.testing.assert_close(p, ref_t.permute(1, 2, 0), rtol=1e-15, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                                   torch.int32])
def test_percentiles_dtypes(dtype):
    x = rand((2, 2, 6, 7, 9), torch.float64, seed=3, lo=-20 if dtype != torch.uint8 else 0, hi=200).to(dtype)
    p = ops.percentiles(x, QS, True)
    ref = np.percentile(x.double().reshape(2, 2, -1).numpy(), QS, axis=2)
    torch.testing.assert_close(p, torch.from_numpy(ref).permute(1, 2, 0), rtol=1e-14, atol=1e-12)


def test_percentiles_nan_strided_negative_zero():
    x = rand((2, 1, 5, 6, 7), torch.float32, seed=4)
    x[1, 0, 2, 3, 4] = float("nan")
    p = ops.percentiles(x, [10, 50, 90])
    assert torch.isnan(p[1]).all() and not torch.isnan(p[0]).any()
    s = rand((2, 3, 8, 9, 10), torch.float32, seed=6)[:, 1:, ::2, 1:, ::3]
    ref = np.percentile(s.double().reshape(2, 2, -1).numpy(), QS, axis=2)
    torch.testing.assert_close(ops.percentiles(s, QS, True), torch.from_numpy(ref).permute(1, 2, 0))
    z = torch.tensor([-0.0, 0.0, -1.0, 1.0]).reshape(1, 1, 1, 1, 4)
    assert ops.percentiles(z, [50.0]).item() == 0.0


# ---------------- NormalizeIntensity vs MONAI ----------------
def monai_per_sample(transform, x):
    return torch.stack([plain(transform(x[i].clone())) for i in range(x.shape[0])])


NORMALIZE_CASES = [
    # subtrahend, divisor (per-channel lists only with channel_wise)
    (None, None), (2.5, None), (None, 4.0), (2.5, 4.0), (None, 0.0),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("nonzero,channel_wise", list(itertools.product([False, True], [False, True])))
@pytest.mark.parametrize("sub,div", NORMALIZE_CASES)
def test_normalize_intensity_matches_monai(device, shape, nonzero, channel_wise, sub, div):
    x = with_zeros(rand(shape, seed=sum(shape) + 7))
    if channel_wise:
        c = shape[1]
        sub = None if sub is None else [sub + k for k in range(c)]
        div = None if div is None else [div * (k % 2) if div == 0 else div + k for k in range(c)]
    kw = dict(subtrahend=sub, divisor=div, nonzero=nonzero, channel_wise=channel_wise)
    ref = monai_per_sample(MNormalizeIntensity(**kw), x)
    ours = vs.NormalizeIntensity(**kw)(x.to(device))
    assert ours.dtype == torch.float32 and ours.device.type == device
    if ref.abs().max() == 0:  # e.g. one voxel per segment: every output is 0
        torch.testing.assert_close(ours.cpu(), ref, rtol=0, atol=0)
    else:
        close(ours, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                                   torch.float64])
@pytest.mark.parametrize("out_dtype", [np.float32, None])
def test_normalize_intensity_dtypes_match_monai(dtype, out_dtype):
    x = with_zeros(rand((2, 2, 9, 10, 11), torch.float64, seed=11, lo=0, hi=250)).to(dtype)
    for nonzero, channel_wise in itertools.product([False, True], [False, True]):
        kw = dict(nonzero=nonzero, channel_wise=channel_wise, dtype=out_dtype)
        ref = monai_per_sample(MNormalizeIntensity(**kw), x)
        ours = vs.NormalizeIntensity(**kw)(x)
        assert ours.dtype == ref.dtype
        if ref.dtype.is_floating_point:
            # MONAI's channel-wise loop writes each float32 channel result back into the
            # float16 / bfloat16 image (a rounding we do not repeat): compare at that precision.
            low = ref.dtype if ref.dtype in (torch.float16, torch.bfloat16) else (
                dtype if channel_wise and dtype in (torch.float16, torch.bfloat16) else None)
            close(ours, ref, {torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(low, 1e-5))
        else:  # integer output: MONAI casts the float result back; allow a one-off at rounding
            assert (ours.long() - ref.long()).abs().max() <= 1


def test_normalize_intensity_special_samples():
    x = torch.zeros(3, 2, 4, 5, 6)
    x[1] = 3.0  # constant sample: std 0 -> divisor 1
    x[2] = rand((2, 4, 5, 6), seed=1)
    for nonzero, cw in itertools.product([False, True], [False, True]):
        ref = monai_per_sample(MNormalizeIntensity(nonzero=nonzero, channel_wise=cw), x)
        ours = vs.NormalizeIntensity(nonzero=nonzero, channel_wise=cw)(x)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    out = vs.NormalizeIntensity(nonzero=True)(x)
    assert torch.equal(out[0], x[0])  # all zeros: unchanged
    assert torch.equal(out[1], torch.zeros_like(x[1]))  # (3 - 3) / 1


def test_normalize_intensity_ch2_matches_monai(ch2):
    vol, _ = ch2
    x = vol.float()
    for nonzero in (False, True):
        ref = plain(MNormalizeIntensity(nonzero=nonzero)(x.clone()))
        ours = vs.NormalizeIntensity(nonzero=nonzero)(vol)  # uint8 in, float32 out
        close(ours, ref)
        m = ops.moments(vol[None], nonzero=nonzero)[0, 0]
        v = x.double()
        v = v[v != 0] if nonzero else v.flatten()
        torch.testing.assert_close(m, torch.stack([torch.tensor(float(v.numel()), dtype=torch.float64), v.mean(),
                                                   v.std(unbiased=False)]), rtol=1e-10, atol=0)


def test_normalize_intensity_dict_and_4d():
    x = rand((2, 5, 6, 7), seed=3)
    ref = MNormalizeIntensityd(keys=["img"], nonzero=True)({"img": x.clone()})["img"]
    ours = vs.NormalizeIntensityd(keys=["img"], nonzero=True)({"img": x})["img"]
    close(ours, ref)
    from monai.transforms import ScaleIntensityRangePercentilesd as MSIRPd

    kw = dict(lower=2, upper=98, b_min=0.0, b_max=1.0, clip=True, channel_wise=True)
    ref = MSIRPd(keys=["a", "b"], **kw)({"a": x.clone(), "b": 2 * x})
    ours = vs.ScaleIntensityRangePercentilesd(keys=["a", "b"], **kw)({"a": x, "b": 2 * x})
    close(ours["a"], ref["a"])
    close(ours["b"], ref["b"])


# ---------------- ScaleIntensityRangePercentiles vs MONAI ----------------
SIRP_CASES = [
    # lower, upper, b_min, b_max, clip, relative
    (0, 100, 0.0, 1.0, False, False), (10, 90, 0.0, 1.0, False, False), (10, 90, 0.0, 1.0, True, False),
    (5, 95, -1.0, 2.0, True, True), (5, 95, -1.0, 2.0, False, True), (1, 99.5, None, None, False, False),
    (2, 98, 0.0, None, True, False), (2, 98, None, 5.0, True, False), (25, 75, 0.0, 200.0, False, False),
    (50, 50, 0.0, 1.0, True, False), (50, 50, None, None, False, False), (90, 10, 0.0, 1.0, True, False),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", SIRP_CASES)
@pytest.mark.parametrize("channel_wise", [False, True])
def test_sirp_matches_monai(device, shape, case, channel_wise):
    lower, upper, b_min, b_max, clip, relative = case
    x = rand(shape, seed=sum(shape) + 3)
    kw = dict(lower=lower, upper=upper, b_min=b_min, b_max=b_max, clip=clip, relative=relative,
              channel_wise=channel_wise)
    ref = monai_per_sample(MSIRP(**kw), x)
    ours = vs.ScaleIntensityRangePercentiles(**kw)(x.to(device))
    assert ours.dtype == torch.float32 and ours.device.type == device
    if ref.abs().max() == 0:
        assert torch.equal(ours.cpu(), ref)
    else:
        close(ours, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                                   torch.float64])
def test_sirp_dtypes_match_monai(dtype):
    # MONAI's torch.quantile needs a floating image: its reference runs on the float32 copy
    # (exact for these dtypes except float64, which it quantiles in float64).
    x = rand((2, 2, 9, 10, 11), torch.float64, seed=12, lo=0, hi=250).to(dtype)
    xm = x if dtype == torch.float64 else x.float()
    for cw, clip in itertools.product([False, True], [False, True]):
        kw = dict(lower=3, upper=97, b_min=0.0, b_max=1.0, clip=clip, channel_wise=cw)
        ref = monai_per_sample(MSIRP(**kw), xm)
        ours = vs.ScaleIntensityRangePercentiles(**kw)(x)
        assert ours.dtype == torch.float32
        close(ours, ref)
    ours = vs.ScaleIntensityRangePercentiles(3, 97, 0.0, 1.0, dtype=None)(x)
    assert ours.dtype == x.dtype


def test_sirp_ch2_matches_monai(ch2):
    vol, _ = ch2
    x = vol.float()  # > 1e6 voxels: MONAI takes numpy.percentile
    for case in [(0.5, 99.5, 0.0, 1.0, True, False), (5, 95, -1.0, 1.0, False, True)]:
        lower, upper, b_min, b_max, clip, relative = case
        ref = plain(MSIRP(lower, upper, b_min, b_max, clip, relative)(x.clone()))
        close(vs.ScaleIntensityRangePercentiles(lower, upper, b_min, b_max, clip, relative)(vol), ref)
    p = ops.percentiles(vol[None], [0.5, 50, 99.5])[0, 0]
    torch.testing.assert_close(p, torch.from_numpy(np.percentile(vol.numpy(), [0.5, 50, 99.5])))


# ---------------- batch == per-sample, opcheck, bad inputs ----------------
@pytest.mark.parametrize("device", DEVICES)
def test_batch_equals_per_sample(device):
    x = with_zeros(rand((4, 3, 7, 8, 9), seed=21)).to(device)
    for t in [vs.NormalizeIntensity(nonzero=True, channel_wise=True), vs.NormalizeIntensity(),
              vs.ScaleIntensityRangePercentiles(5, 95, 0.0, 1.0, clip=True, channel_wise=True),
              vs.ScaleIntensityRangePercentiles(1, 99, -1.0, 1.0, relative=True)]:
        batch = t(x)
        for i in range(x.shape[0]):
            assert torch.equal(batch[i], t(x[i]))
    assert torch.equal(ops.moments(x, True, True)[2:3], ops.moments(x[2:3], True, True))
    assert torch.equal(ops.percentiles(x, QS, True)[1:3], ops.percentiles(x[1:3], QS, True))


def _normalize_reference(t, sub=None, div=None, nonzero=False, channel_wise=False):
    """NormalizeIntensity written with torch ops (float64, autograd through mean and std)."""
    n, segs = t.shape[0], (t.shape[1] if channel_wise else 1)
    x = t.reshape(n, segs, -1)
    m = (x != 0).double() if nonzero else torch.ones_like(x)
    cnt = m.sum(-1, keepdim=True).clamp_min(1)
    mean = (x * m).sum(-1, keepdim=True) / cnt
    var = (((x - mean) * m) ** 2).sum(-1, keepdim=True).div(cnt)
    std = torch.where(var > 0, var, torch.ones_like(var)).sqrt()  # a zero std divides by 1, as MONAI
    c = mean if sub is None else torch.tensor(sub, dtype=torch.float64)
    d = std if div is None else torch.tensor(div, dtype=torch.float64)
    return torch.where(m.bool(), (x - c) / d, x).reshape(t.shape)


NORMALIZE_GRAD_CASES = [dict(), dict(channel_wise=True), dict(sub=[0.3]), dict(div=[2.0]),
                        dict(sub=[0.3], div=[2.0]), dict(sub=[0.1, 0.2, 0.3], channel_wise=True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", NORMALIZE_GRAD_CASES, ids=str)
def test_normalize_intensity_gradcheck(device, kw):
    """The backward differentiates through the statistics (the mean and the population std):
    gradcheck in float64, and the gradient of torch's own layer_norm / instance_norm (eps 0, no
    affine) where those are the same function."""
    x = torch.randn(2, 3, 4, 5, 3, dtype=torch.float64, device=device, requires_grad=True)

    def f(t):
        return ops.normalize_intensity(t, kw.get("sub"), kw.get("div"), False, kw.get("channel_wise", False))

    assert torch.autograd.gradcheck(f, (x,))
    if "sub" not in kw and "div" not in kw:
        g = torch.randn_like(x)
        (got,) = torch.autograd.grad(f(x), x, g)
        norm = (torch.nn.functional.instance_norm(x, eps=0.0) if kw.get("channel_wise")
                else torch.nn.functional.layer_norm(x, x.shape[1:], eps=0.0))
        (want,) = torch.autograd.grad(norm, x, g)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("channel_wise", [False, True])
def test_normalize_intensity_nonzero_gradient(device, channel_wise):
    """nonzero=True: the statistics of the nonzero values, the zeros passed through (gradient 1);
    against the same function written with torch ops (finite differences are undefined at the
    zeros, where the counted set changes). Also through the transform, in float32."""
    x = torch.randn(2, 3, 4, 5, 3, dtype=torch.float64, device=device)
    x[x.abs() < 0.5] = 0
    x[1, :] = 0  # a sample without values: unchanged, gradient 1
    x.requires_grad_(True)
    g = torch.randn_like(x)
    (got,) = torch.autograd.grad(ops.normalize_intensity(x, None, None, True, channel_wise), x, g)
    (want,) = torch.autograd.grad(_normalize_reference(x, nonzero=True, channel_wise=channel_wise), x, g)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(got[1], g[1])
    xf = x.detach().float().requires_grad_(True)
    (got32,) = torch.autograd.grad(vs.NormalizeIntensity(nonzero=True, channel_wise=channel_wise)(xf), xf, g.float())
    torch.testing.assert_close(got32, want.float(), rtol=1e-4, atol=1e-5)


SRP_GRAD_CASES = [dict(lower=5, upper=95, b_min=0.0, b_max=1.0),
                  dict(lower=5, upper=95, b_min=0.0, b_max=1.0, clip=True),
                  dict(lower=10, upper=90, b_min=-1.0, b_max=2.0, relative=True),
                  dict(lower=5, upper=95, b_min=None, b_max=None),
                  dict(lower=5, upper=95, b_min=0.0, b_max=1.0, channel_wise=True),
                  dict(lower=0, upper=100, b_min=0.0, b_max=1.0, clip=True),
                  dict(lower=37.3, upper=62.9, b_min=0.2, b_max=None, clip=True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", SRP_GRAD_CASES, ids=str)
def test_scale_intensity_range_percentiles_gradient(device, kw):
    """The backward differentiates through the two percentiles (their order statistics get the
    interpolation weights), the scaling and the clamp: gradcheck in float64, and the gradient of
    MONAI's own transform (torch.quantile for images of up to 10^6 voxels) per sample."""
    x = torch.randn(2, 3, 5, 6, 4, dtype=torch.float64, device=device, requires_grad=True)

    def f(t):
        return ops.scale_intensity_range_percentiles(t, kw["lower"], kw["upper"], kw["b_min"], kw["b_max"],
                                                     kw.get("clip", False), kw.get("relative", False),
                                                     kw.get("channel_wise", False))

    assert torch.autograd.gradcheck(f, (x,))
    g = torch.randn_like(x)
    (got,) = torch.autograd.grad(f(x), x, g)
    for n in range(2):
        xm = x[n].detach().cpu().requires_grad_(True)
        ym = MSIRP(**kw, dtype=torch.float64)(xm * 1)  # (MONAI's channel loop writes into its input)
        (want,) = torch.autograd.grad(ym, xm, g[n].cpu())
        torch.testing.assert_close(got[n].cpu(), want, rtol=1e-10, atol=1e-12)


def test_scale_intensity_range_percentiles_flat_segment_gradient():
    """A segment whose two percentiles are equal is x - a (MONAI's divide-by-zero branch): its
    gradient is g - da * sum(g), MONAI's too."""
    x = torch.randn(1, 1, 4, 5, 6, dtype=torch.float64)
    x[0, 0, :, :, 1:] = 0.25  # most values equal: the 10th and 90th percentiles coincide
    x.requires_grad_(True)
    g = torch.randn_like(x)
    (got,) = torch.autograd.grad(ops.scale_intensity_range_percentiles(x, 10.0, 90.0, 0.0, 1.0), x, g)
    xm = x[0].detach().requires_grad_(True)
    with pytest.warns(Warning, match="Divide by zero"):
        ym = MSIRP(10, 90, 0.0, 1.0, dtype=torch.float64)(xm * 1)
    (want,) = torch.autograd.grad(ym, xm, g[0])
    torch.testing.assert_close(got[0].sum(), want.sum(), rtol=1e-12, atol=1e-12)  # ties: one order statistic each
    torch.testing.assert_close(got[0][..., 0], want[..., 0], rtol=1e-12, atol=1e-12)  # the distinct values


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x = with_zeros(rand((2, 3, 5, 6, 7), seed=8)).to(device)
    torch.library.opcheck(torch.ops.voxaug.moments, (x, True, True))
    torch.library.opcheck(torch.ops.voxaug.percentiles, (x, [1.0, 50.0, 99.0], False))
    torch.library.opcheck(torch.ops.voxaug.normalize_intensity, (x, None, [2.0], True, False, None))
    torch.library.opcheck(torch.ops.voxaug.normalize_intensity,
                          (x.double().requires_grad_(True), None, None, False, True, None))
    torch.library.opcheck(torch.ops.voxaug.normalize_intensity,
                          (x.to(torch.uint8), [1.0, 2.0, 3.0], None, False, True, torch.float16))
    torch.library.opcheck(torch.ops.voxaug.scale_intensity_range_percentiles,
                          (x, 5.0, 95.0, 0.0, 1.0, True, True, True, None))
    torch.library.opcheck(torch.ops.voxaug.scale_intensity_range_percentiles,
                          (x.double().requires_grad_(True), 5.0, 95.0, 0.0, 1.0, True, False, True, None))


def test_meta_shapes():
    x = torch.empty(2, 3, 4, 5, 6, device="meta")
    assert ops.moments(x, True).shape == (2, 3, 3)
    assert ops.percentiles(x, [1, 2, 3, 4]).shape == (2, 1, 4)
    assert ops.normalize_intensity(x).shape == x.shape
    assert ops.scale_intensity_range_percentiles(x, 1, 99, 0, 1, dtype=torch.float16).dtype == torch.float16


def test_bad_inputs():
    x = rand((1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="5-D"):
        ops.moments(x[0])
    with pytest.raises(ValueError, match=r"q\[1\] must be a percentile in \[0, 100\]"):
        ops.percentiles(x, [5, 101])
    with pytest.raises(ValueError, match="int64"):
        ops.moments(x.long())
    with pytest.raises(ValueError, match="empty volume"):
        ops.percentiles(torch.empty(1, 1, 0, 2, 2), [50])
    assert ops.moments(torch.empty(0, 1, 2, 2, 2)).shape == (0, 1, 3)
    with pytest.raises(ValueError, match=r"one per channel \(2\), got 3"):
        ops.normalize_intensity(x, [1.0, 2.0, 3.0], None, False, True)
    with pytest.raises(ValueError, match="img has 2 channels, but subtrahend has 3 components"):
        vs.NormalizeIntensity(subtrahend=[1, 2, 3], channel_wise=True)(x)
    with pytest.raises(NotImplementedError, match="subtrahend"):
        vs.NormalizeIntensity(subtrahend=[1, 2])(x)
    with pytest.raises(ValueError, match="Percentiles must be in the range"):
        vs.ScaleIntensityRangePercentiles(-1, 50, 0, 1)
    with pytest.raises(ValueError, match="relative"):
        vs.ScaleIntensityRangePercentiles(1, 50, None, 1, relative=True)(x)
    with pytest.raises(ValueError, match="relative=True needs both"):
        ops.scale_intensity_range_percentiles(x, 1, 50, None, 1.0, relative=True)
    with pytest.raises(ValueError, match="dtype must be"):
        ops.normalize_intensity(x, dtype=torch.int32)
    with pytest.raises(ValueError, match="img must be"):
        vs.NormalizeIntensity()(torch.zeros(3, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.uint8, torch.int16,
                                   torch.int32, torch.float64])
def test_percentiles_large_segments_vs_numpy(device, dtype):
    """>= 2^16 values per segment (the CPU's radix-select path), with ties."""
    x = rand((2, 2, 40, 41, 42), torch.float64, seed=31, lo=0 if dtype == torch.uint8 else -100, hi=250)
    x = (x * 2).round() / 2
    x = x.to(dtype)
    qs = [0.0, 0.01, 2.5, 50.0, 99.0, 99.99, 100.0]
    for cw in (False, True):
        p = ops.percentiles(x.to(device), qs, cw).cpu()
        flat = x.double().reshape(2, 2 if cw else 1, -1).numpy()
        ref = torch.from_numpy(np.percentile(flat, qs, axis=2)).permute(1, 2, 0)
        torch.testing.assert_close(p, ref, rtol=1e-14, atol=1e-12)
        # Few q values per call: the radix select (many q: more bins than it takes -> selection).
        for k in range(0, len(qs), 2):
            p = ops.percentiles(x.to(device), qs[k:k + 2], cw).cpu()
            torch.testing.assert_close(p, ref[..., k:k + 2], rtol=1e-14, atol=1e-12)
    # HistogramStandardization's 13 landmarks (radix select) and 40 values (past its 32 bins: selection).
    for many in (_hs_q(), [2.5 * k for k in range(40)]):
        p = ops.percentiles(x.to(device), many, False).cpu()
        ref = torch.from_numpy(np.percentile(x.double().reshape(2, 1, -1).numpy(), many, axis=2)).permute(1, 2, 0)
        torch.testing.assert_close(p, ref, rtol=1e-14, atol=1e-12)
    x = x.clone()
    x[1, 0, 3, 4, 5] = float("nan") if dtype.is_floating_point else x[1, 0, 3, 4, 5]
    p = ops.percentiles(x.to(device), qs, True).cpu()
    assert torch.isnan(p[1, 0]).all() == dtype.is_floating_point and not torch.isnan(p[0]).any()


# ---------------- TorchIO ZNormalization / RescaleIntensity ----------------
def _tio_apply(t, x4):
    """A TorchIO transform on one (C, D, H, W) float32 / uint8 image."""
    tio = pytest.importorskip("torchio")
    return t(tio.ScalarImage(tensor=x4.cpu())).data


def _aal_label():
    nib = pytest.importorskip("nibabel")
    import os

    from conftest import TEMPLATES
    path = os.path.join(TEMPLATES, "aal.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    return torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.int16))[None]


def _mean_mask(t):
    return t > t.mean()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", [None, "callable", "tensor"])
def test_znormalization_matches_torchio(device, mask):
    """Each sample of a (3, 2, ...) batch as TorchIO's ZNormalization of that image alone (mean and
    unbiased std over all channels of the masked voxels): float32 rounding of the statistics."""
    tio = pytest.importorskip("torchio")
    x = rand((3, 2, 9, 10, 11), seed=5)
    lab = (rand((2, 9, 10, 11), seed=6) > 40).to(torch.uint8)  # TorchIO: a mask of the image's shape
    method = {None: None, "callable": _mean_mask, "tensor": lab}[mask]
    out = vs.ZNormalization(masking_method=None if method is None else
                            (method if callable(method) else method.to(device)))(x.to(device))
    assert out.dtype == torch.float32 and out.device.type == device
    for n in range(3):
        tm = None if method is None else (method if callable(method) else "lab")
        img = tio.Subject(img=tio.ScalarImage(tensor=x[n]), lab=tio.LabelMap(tensor=lab))
        ref = tio.ZNormalization(masking_method=tm, include=["img"])(img)["img"].data
        torch.testing.assert_close(out[n].cpu(), ref, rtol=0, atol=2e-6 * ref.abs().max().item())


def test_znormalization_ch2_and_aal_mask_match_torchio(ch2):
    """The real volume (uint8 in, float32 out), whole image and inside the AAL atlas's labels."""
    tio = pytest.importorskip("torchio")
    vol, _ = ch2
    lab = _aal_label()
    ref = _tio_apply(tio.ZNormalization(), vol)
    torch.testing.assert_close(vs.ZNormalization()(vol), ref, rtol=0, atol=2e-6 * ref.abs().max().item())
    subject = tio.Subject(img=tio.ScalarImage(tensor=vol), brain=tio.LabelMap(tensor=lab))
    ref = tio.ZNormalization(masking_method="brain", include=["img"])(subject)["img"].data
    out = vs.ZNormalization(masking_method=lab)(vol)
    torch.testing.assert_close(out, ref, rtol=0, atol=2e-6 * ref.abs().max().item())
    inside = out[lab > 0].double()
    assert abs(inside.mean().item()) < 1e-5 and abs(inside.std().item() - 1) < 1e-5


def test_znormalization_constant_sample_divides_by_one():
    """A deliberate difference: TorchIO raises on a zero std; voxaug returns x - mean (no host read)."""
    x = torch.full((2, 1, 3, 4, 5), 7.0)
    x[1] = rand((1, 3, 4, 5), seed=9)
    out = vs.ZNormalization()(x)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert abs(out[1].double().std().item() - 1) < 1e-6


RESCALE_CASES = [dict(), dict(percentiles=(1, 99)), dict(out_min_max=(-1, 1), percentiles=(5, 95)),
                 dict(in_min_max=(0, 50)), dict(out_min_max=2.5), dict(percentiles=(2, 98), masking_method="callable"),
                 dict(out_min_max=(0, 255), percentiles=10, masking_method="tensor")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", RESCALE_CASES)
def test_rescale_intensity_matches_torchio(device, kw):
    """Each sample of a batch as TorchIO's RescaleIntensity of that image alone (numpy percentiles
    of the masked voxels, clip, then TorchIO's float32 operations in its order)."""
    tio = pytest.importorskip("torchio")
    x = rand((3, 2, 9, 10, 11), seed=7)
    lab = (rand((2, 9, 10, 11), seed=8) > 40).to(torch.uint8)
    kw = dict(kw)
    method = kw.pop("masking_method", None)
    ours_m = {None: None, "callable": _mean_mask, "tensor": lab.to(device)}[method]
    tio_m = {None: None, "callable": _mean_mask, "tensor": "lab"}[method]
    out = vs.RescaleIntensity(masking_method=ours_m, **kw)(x.to(device))
    assert out.dtype == torch.float32 and out.device.type == device
    for n in range(3):
        subject = tio.Subject(img=tio.ScalarImage(tensor=x[n]), lab=tio.LabelMap(tensor=lab))
        ref = tio.RescaleIntensity(masking_method=tio_m, include=["img"], **kw)(subject)["img"].data
        torch.testing.assert_close(out[n].cpu(), ref, rtol=0, atol=1e-6 * (1 + ref.abs().max().item()))


def test_rescale_intensity_ch2_and_aal_mask_match_torchio(ch2):
    tio = pytest.importorskip("torchio")
    vol, _ = ch2
    lab = _aal_label()
    for kw in (dict(out_min_max=(-1, 1), percentiles=(0.5, 99.5)), dict()):
        ref = _tio_apply(tio.RescaleIntensity(**kw), vol)
        torch.testing.assert_close(vs.RescaleIntensity(**kw)(vol), ref, rtol=0, atol=1e-6)
    subject = tio.Subject(img=tio.ScalarImage(tensor=vol), brain=tio.LabelMap(tensor=lab))
    ref = tio.RescaleIntensity(percentiles=(1, 99), masking_method="brain", include=["img"])(subject)["img"].data
    torch.testing.assert_close(vs.RescaleIntensity(percentiles=(1, 99), masking_method=lab)(vol), ref,
                               rtol=0, atol=1e-6)


def test_rescale_intensity_unchanged_samples_and_dtypes():
    """TorchIO returns an image unchanged when its range is 0 or its mask is empty (with a
    warning): those samples come back as their float32 copy; the others are rescaled. Half and
    integer images give float32."""
    x = rand((3, 1, 4, 5, 6), seed=11)
    x[0] = 3.0
    mask = torch.ones(3, 1, 4, 5, 6, dtype=torch.bool)
    mask[2] = False
    out = vs.RescaleIntensity(masking_method=mask)(x)
    assert torch.equal(out[0], x[0]) and torch.equal(out[2], x[2])
    assert out[1].min().item() == 0.0 and out[1].max().item() == 1.0
    for dtype in (torch.uint8, torch.float16):
        y = vs.RescaleIntensity()(rand((1, 1, 4, 5, 6), seed=12, lo=0, hi=200).to(dtype))
        assert y.dtype == torch.float32 and y.min().item() == 0.0 and y.max().item() == 1.0


@pytest.mark.parametrize("make", [
    lambda: vs.RescaleIntensity(percentiles=(90, 10)),
    lambda: vs.RescaleIntensity(percentiles=(-1, 50)),
    lambda: vs.RescaleIntensity(percentiles=(50, 101)),
    lambda: vs.RescaleIntensity(out_min_max="wide"),
    lambda: vs.RescaleIntensity(out_min_max=(0, 1, 2)),
    lambda: vs.RescaleIntensity(in_min_max=(1, float("nan"))),
    lambda: vs.ZNormalization(masking_method="brain")(rand((1, 4, 5, 6))),
    lambda: vs.RescaleIntensity(masking_method=torch.ones(2, 3, 3))(rand((1, 4, 5, 6))),
    lambda: vs.ZNormalization(masking_method=lambda t: t[0] > 0)(rand((2, 4, 5, 6))),
    lambda: vs.ZNormalization(masking_method=3.5)(rand((1, 4, 5, 6))),
])
def test_torchio_normalizations_reject_bad_arguments(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.float16, torch.float64])
def test_torchio_normalizations_other_dtypes_match_torchio(dtype):
    """TorchIO converts to float32 first: integer, half and float64 images give float32 results
    equal to TorchIO's (statistics of the float32 values)."""
    tio = pytest.importorskip("torchio")
    x = rand((1, 2, 7, 8, 9), seed=13, lo=0, hi=200).to(dtype)
    for ours, theirs in ((vs.ZNormalization(), tio.ZNormalization()),
                         (vs.RescaleIntensity(percentiles=(3, 97)), tio.RescaleIntensity(percentiles=(3, 97)))):
        out = ours(x)
        ref = _tio_apply(theirs, x[0])
        assert out.dtype == torch.float32
        torch.testing.assert_close(out[0], ref, rtol=0, atol=2e-6 * (1 + ref.abs().max().item()))


# ---------------- ClipIntensityPercentiles, ThresholdIntensity, MaskIntensity, Clamp ----------------
CLIP_CASES = [dict(lower=5, upper=95), dict(lower=None, upper=90), dict(lower=10, upper=None, channel_wise=True),
              dict(lower=5, upper=95, sharpness_factor=0.5), dict(lower=None, upper=80, sharpness_factor=2.0,
                                                                  channel_wise=True),
              dict(lower=0, upper=100, sharpness_factor=1.0)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", CLIP_CASES)
def test_clip_intensity_percentiles_matches_monai(device, kw):
    """Each sample as MONAI's ClipIntensityPercentiles of that image (its torch.quantile in float32
    may sit one float32 step from the exact percentile: 2 steps of the image's size)."""
    from monai.transforms import ClipIntensityPercentiles as MClip
    x = rand((3, 2, 9, 10, 11), seed=21)
    out = vs.ClipIntensityPercentiles(**kw)(x.to(device))
    assert out.dtype == x.dtype and out.device.type == device
    for n in range(3):
        ref = plain(MClip(**kw)(x[n].clone()))
        torch.testing.assert_close(out[n].cpu(), ref, rtol=0, atol=2.5e-7 * x.abs().max().item())


def test_clip_intensity_percentiles_ch2_and_clipping_values():
    """uint8 ch2 (MONAI's numpy path: percentiles truncated to uint8): bytes equal; a MetaTensor
    gets MONAI's clipping values."""
    from monai.data import MetaTensor
    from monai.transforms import ClipIntensityPercentiles as MClip
    import os

    from conftest import TEMPLATES
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    vol = torch.from_numpy(np.asarray(nib.load(path).dataobj).copy())[None]
    ref = plain(MClip(2, 98)(vol.clone()))
    out = vs.ClipIntensityPercentiles(2, 98)(vol)
    assert out.dtype == torch.uint8 and torch.equal(out, ref)
    img = MetaTensor(vol.float())
    for kw in (dict(lower=2, upper=98), dict(lower=None, upper=98, sharpness_factor=0.3, channel_wise=True)):
        ours = vs.ClipIntensityPercentiles(return_clipping_values=True, **kw)(img.clone())
        theirs = MClip(return_clipping_values=True, **kw)(img.clone())
        assert len(ours.meta["clipping_values"]) == len(theirs.meta["clipping_values"])
        for (a, b), (c, d) in zip(ours.meta["clipping_values"], theirs.meta["clipping_values"]):
            assert (a is None) == (c is None) and (b is None) == (d is None)
            assert a is None or abs(a - c) <= 1e-4 * (1 + abs(c))
            assert b is None or abs(b - d) <= 1e-4 * (1 + abs(d))


@pytest.mark.parametrize("make", [lambda: vs.ClipIntensityPercentiles(None, None),
                                  lambda: vs.ClipIntensityPercentiles(-1, 50),
                                  lambda: vs.ClipIntensityPercentiles(10, 101),
                                  lambda: vs.ClipIntensityPercentiles(60, 40),
                                  lambda: vs.ClipIntensityPercentiles(5, 95, sharpness_factor=0.0)])
def test_clip_intensity_percentiles_rejects_what_monai_rejects(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8, torch.float16])
@pytest.mark.parametrize("kw", [dict(threshold=30), dict(threshold=30, above=False, cval=7.5)])
def test_threshold_intensity_matches_monai(dtype, kw):
    from monai.transforms import ThresholdIntensity as MThreshold
    from voxaug import transforms as vt
    x = rand((2, 2, 5, 6, 7), seed=23, lo=0, hi=100).to(dtype)
    out = vt.ThresholdIntensity(**kw)(x)
    assert out.dtype == dtype
    for n in range(2):
        assert torch.equal(out[n], plain(MThreshold(**kw)(x[n].clone())))
    d = vt.ThresholdIntensityd(["a", "b"], **kw)({"a": x, "b": x[0]})
    assert torch.equal(d["a"], out) and torch.equal(d["b"], out[0])
    with pytest.raises(ValueError, match="threshold"):
        vt.ThresholdIntensity(threshold="30")


def test_mask_intensity_matches_monai():
    """One-channel and per-channel masks, a custom select_fn, a batch with one mask per sample,
    the dictionary form with mask_key; MONAI's refusals."""
    from monai.transforms import MaskIntensity as MMask
    from monai.transforms import MaskIntensityd as MMaskd
    from voxaug import transforms as vt
    x = rand((2, 2, 5, 6, 7), seed=24)
    one = rand((1, 5, 6, 7), seed=25) > 40
    two = rand((2, 5, 6, 7), seed=26)
    for mask, kw in ((one, {}), (two, dict(select_fn=lambda m: m > 60))):
        out = vt.MaskIntensity(mask, **kw)(x)
        for n in range(2):
            assert torch.equal(out[n], plain(MMask(mask, **kw)(x[n].clone())))
    per_sample = rand((2, 1, 5, 6, 7), seed=27) > 50
    out = vt.MaskIntensity()(x, per_sample)
    for n in range(2):
        assert torch.equal(out[n], plain(MMask(per_sample[n])(x[n].clone())))
    u8 = x[0].clamp(0, 255).to(torch.uint8)
    assert torch.equal(vt.MaskIntensity(one)(u8), plain(MMask(one)(u8.clone())))
    d = vt.MaskIntensityd(["img"], mask_key="mask")({"img": x[0], "mask": one})
    assert torch.equal(d["img"], plain(MMaskd(["img"], mask_key="mask")({"img": x[0].clone(), "mask": one})["img"]))
    with pytest.raises(ValueError, match="channels"):
        vt.MaskIntensity(rand((3, 5, 6, 7)) > 0)(x)
    with pytest.raises(ValueError, match="mask_data"):
        vt.MaskIntensity()(x)
    with pytest.raises(ValueError, match="spatial shape"):
        vt.MaskIntensity(torch.ones(1, 5, 6, 8))(x)


def test_clamp_matches_torchio():
    tio = pytest.importorskip("torchio")
    from voxaug import transforms as vt
    x = rand((2, 1, 5, 6, 7), seed=28)
    for kw in (dict(out_min=0.0, out_max=80.0), dict(out_min=10.0), dict(out_max=-3.0)):
        out = vt.Clamp(**kw)(x)
        for n in range(2):
            assert torch.equal(out[n], _tio_apply(tio.Clamp(**kw), x[n]))
    for bad in (dict(out_min=5.0, out_max=1.0), dict(out_min=float("nan")), dict(out_max="high")):
        with pytest.raises(ValueError):
            vt.Clamp(**bad)


# ---------------- TorchIO HistogramStandardization ----------------
def _hs_q():
    return [1.0, 10.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 70.0, 75.0, 80.0, 90.0, 99.0]


def _mri_paths():
    import os

    from conftest import TEMPLATES
    paths = [os.path.join(TEMPLATES, f) for f in ("ch2.nii.gz", "ch2better.nii.gz", "ch2bet.nii.gz",
                                                  "inia19-t1-brain.nii.gz")]
    if not all(os.path.exists(p) for p in paths):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    return paths


def test_histogram_standardization_train_matches_torchio(tmp_path):
    """Landmarks trained on the real MRI volumes of mricron-data (file paths), with and without a
    mask per image and a masking function, equal TorchIO's train; the .npy / .txt outputs."""
    tio = pytest.importorskip("torchio")
    nib = pytest.importorskip("nibabel")
    paths = _mri_paths()
    want = tio.HistogramStandardization.train(paths, progress=False)
    got = vs.HistogramStandardization.train(paths, output_path=tmp_path / "lm.npy")
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)
    assert np.array_equal(np.load(tmp_path / "lm.npy"), got)
    masks = []
    for k, p in enumerate(paths):
        img = nib.load(p)
        m = (np.asarray(img.dataobj) > 20 + 5 * k).astype(np.uint8)
        masks.append(str(tmp_path / f"m{k}.nii.gz"))
        nib.save(nib.Nifti1Image(m, img.affine), masks[-1])
    want = tio.HistogramStandardization.train(paths, mask_path=masks, cutoff=(0.05, 0.95), progress=False)
    got = vs.HistogramStandardization.train(paths, mask_path=masks, cutoff=(0.05, 0.95))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)
    fn = lambda t: t > t.float().mean()  # noqa: E731
    want = tio.HistogramStandardization.train(paths, masking_function=fn, progress=False)
    got = vs.HistogramStandardization.train(paths, masking_function=fn, output_path=tmp_path / "lm.txt")
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-12)
    assert (tmp_path / "lm.txt").read_text().startswith("image ")
    tensors = [torch.from_numpy(np.asarray(nib.load(p).dataobj))[None] for p in paths]
    np.testing.assert_allclose(vs.HistogramStandardization.train(tensors), tio.HistogramStandardization.train(
        paths, progress=False), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask", [None, "callable", "tensor"])
def test_histogram_standardization_matches_torchio(device, mask):
    """Each sample of a batch as TorchIO standardises that image alone: landmarks trained on the
    mricron-data volumes, the images ch2 (uint8), a rescaled float copy and a random float volume
    with flat stretches (equal landmarks: TorchIO's 1e-5 rule); masks as TorchIO takes them."""
    tio = pytest.importorskip("torchio")
    nib = pytest.importorskip("nibabel")
    paths = _mri_paths()
    landmarks = tio.HistogramStandardization.train(paths, progress=False)
    ch2 = torch.from_numpy(np.asarray(nib.load(paths[0]).dataobj).astype(np.float32))[None, :60, :70, :50]
    flat = torch.where(ch2 < 30, torch.zeros(()), ch2 * 3.7 + 11)
    noise = torch.from_numpy(np.random.default_rng(3).random(ch2.shape).astype(np.float32)) * 500
    x = torch.stack([ch2, flat, noise])
    lab = (ch2 > 50).to(torch.uint8)
    method = {None: None, "callable": _mean_mask, "tensor": lab}[mask]
    t = vs.HistogramStandardization(landmarks, masking_method=None if method is None else
                                    (method if callable(method) else method.to(device)))
    out = t(x.to(device)).cpu()
    assert out.dtype == torch.float32 and out.shape == x.shape
    for n in range(3):
        tm = None if method is None else (method if callable(method) else "lab")
        subject = tio.Subject(img=tio.ScalarImage(tensor=x[n]), lab=tio.LabelMap(tensor=lab))
        ref = tio.HistogramStandardization({"img": landmarks}, masking_method=tm, include=["img"])(subject)["img"].data
        assert torch.equal(out[n], ref), (n, (out[n] - ref).abs().max())
    assert torch.equal(vs.HistogramStandardization(landmarks)(x[0]), t(x[:1])[0]) if mask is None else True


def test_histogram_standardization_dict_forms_and_errors(tmp_path):
    lm = np.linspace(0, 100, 13)
    x = torch.rand(1, 8, 9, 10) * 100
    t = vs.HistogramStandardization(lm)
    d = vs.HistogramStandardizationd({"t1": lm, "t2": torch.from_numpy(lm * 2)})({"t1": x, "t2": x, "o": 1})
    assert torch.equal(d["t1"], t(x)) and torch.equal(d["t2"], vs.HistogramStandardization(lm * 2)(x)) and d["o"] == 1
    np.save(tmp_path / "t1.npy", lm)
    torch.save({"t1": str(tmp_path / "t1.npy")}, tmp_path / "lm.pth")
    assert torch.equal(vs.HistogramStandardizationd(tmp_path / "lm.pth")({"t1": x})["t1"], t(x))
    with pytest.raises(ValueError, match="must have extension .pt or .pth"):
        vs.HistogramStandardizationd(tmp_path / "t1.npy")
    with pytest.raises(KeyError, match="should be a key in the landmarks dictionary"):
        vs.HistogramStandardizationd({"t1": lm}, keys=["t2"])
    with pytest.raises(ValueError, match="landmarks must be 13 finite values"):
        vs.HistogramStandardization(lm[:5])
    with pytest.raises(ValueError, match="with NaN"):
        vs.HistogramStandardization(np.full(13, np.nan))
    empty = vs.HistogramStandardization(lm, masking_method=torch.zeros(1, 8, 9, 10))(x)
    assert torch.isnan(empty).all()  # an empty mask: NaN (TorchIO's numpy.percentile raises)


@pytest.mark.parametrize("device", DEVICES)
def test_piecewise_linear_op(device):
    """The op behind HistogramStandardization vs numpy's digitize / float64 arithmetic; opcheck;
    errors naming the argument."""
    rng = np.random.default_rng(12)
    x = torch.from_numpy((np.round(rng.uniform(-10, 110, (2, 3, 7, 8, 9)) * 2) / 2).astype(np.float32))
    edges = np.sort(np.round(rng.uniform(0, 100, (2, 9)) * 2) / 2, axis=1)
    slopes, icpts = rng.uniform(-2, 2, (2, 10)), rng.uniform(-50, 50, (2, 10))
    table = torch.from_numpy(np.concatenate([edges, slopes, icpts], 1))
    got = ops.piecewise_linear(x.to(device), table.to(device), 10).cpu()
    for n in range(2):
        flat = x[n].numpy().reshape(-1)
        k = np.digitize(flat, edges[n], right=False)
        want = (slopes[n][k] * flat + icpts[n][k]).astype(np.float32).reshape(x.shape[1:])
        assert np.array_equal(got[n].numpy(), want)
    torch.library.opcheck(torch.ops.voxaug.piecewise_linear, (x.to(device), table.to(device), 10))
    with pytest.raises(ValueError, match="image must be float32"):
        ops.piecewise_linear(x.double().to(device), table.to(device), 10)
    with pytest.raises(ValueError, match=r"table must be float64 of shape \(N, 3 \* pieces - 1\)"):
        ops.piecewise_linear(x.to(device), table[:, :20].to(device), 10)
    with pytest.raises(ValueError, match="pieces must be in"):
        ops.piecewise_linear(x.to(device), torch.zeros(2, 50, dtype=torch.float64, device=device), 17)


@pytest.mark.parametrize("by_sort", [False, True])
def test_masked_percentiles_both_ways_vs_numpy(by_sort):
    """The masked landmark percentiles (the CPU's compaction + exact select, the GPU's sort of each
    sample) vs numpy.percentile of the masked voxels; NaN inside the mask, an empty mask."""
    from voxaug.stats import _masked_percentiles

    rng = np.random.default_rng(14)
    x = torch.from_numpy((np.round(rng.uniform(-5, 40, (4, 2, 9, 10, 11)) * 4) / 4).astype(np.float32))
    mask = torch.from_numpy(rng.random((4, 2, 9, 10, 11)) < 0.4)
    mask[2] = False
    x[3, 1, 2, 3, 4] = float("nan")
    mask[3, 1, 2, 3, 4] = True
    q = _hs_q() + [0.0, 100.0, 33.3]
    got = _masked_percentiles(x, mask, q, by_sort=by_sort)
    for n in range(4):
        v = x[n][mask[n]].double().numpy()
        want = np.percentile(v, q) if v.size else np.full(len(q), np.nan)
        np.testing.assert_array_equal(got[n].numpy(), want)
