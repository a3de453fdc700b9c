"""torch.ops.voxaug intensity / noise ops and voxaug.transforms vs MONAI, torch and float64."""
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

import voxaug
from voxaug import ops
from voxaug import transforms as vt

from conftest import devices

monai = pytest.importorskip("monai")
from monai import transforms as mt  # noqa: E402
from monai.data import MetaTensor  # noqa: E402

DEVICES = devices()
need_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def rand_volume(shape, lo=-300.0, hi=400.0, dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dtype).to(device)


# ---------------- deterministic ops vs MONAI ----------------
# Float a_min / a_max: MONAI computes `img - a_min` in the image dtype, so an integer a_min on
# a uint8 image wraps around in MONAI; voxaug always computes in float32.
SIR_CASES = [
    dict(a_min=-175.0, a_max=250.0, b_min=0.0, b_max=1.0, clip=True),
    dict(a_min=0.0, a_max=255.0, b_min=-1.0, b_max=1.0, clip=False),
    dict(a_min=20.0, a_max=180.0, b_min=None, b_max=None, clip=False),  # MONAI raises with clip=True
    dict(a_min=20.0, a_max=180.0, b_min=0.0, b_max=None, clip=True),
    dict(a_min=250.0, a_max=-175.0, b_min=0.0, b_max=1.0, clip=True),  # reversed range
]


@pytest.mark.parametrize("kw", SIR_CASES)
@pytest.mark.parametrize("device", DEVICES)
def test_scale_intensity_range_matches_monai_on_ch2(ch2, kw, device):
    img = ch2[0].to(device)
    ours = vt.ScaleIntensityRange(**kw)(img)
    ref = mt.ScaleIntensityRange(**kw)(img.clone())
    assert ours.dtype == torch.float32 and ours.shape == img.shape
    torch.testing.assert_close(ours, torch.as_tensor(ref).to(device), rtol=1e-6, atol=1e-6)
    assert ours.abs().sum() > 0 and not torch.isnan(ours).any()


@pytest.mark.parametrize("kw", SIR_CASES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 5, 7, 3), (3, 1, 17, 9)])
def test_scale_intensity_range_matches_monai_on_random_float(kw, shape):
    img = rand_volume(shape)
    torch.testing.assert_close(vt.ScaleIntensityRange(**kw)(img), mt.ScaleIntensityRange(**kw)(img.clone()),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("b_min", [None, 0.5])
def test_scale_intensity_range_degenerate_like_monai(b_min):
    # a_min == a_max: MONAI warns and returns img - a_min (+ b_min), without clipping.
    img = rand_volume((1, 4, 5, 6))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ours = vt.ScaleIntensityRange(10, 10, b_min, 1.0, clip=True)(img)
        ref = mt.ScaleIntensityRange(10, 10, b_min, 1.0, clip=True)(img.clone())
    assert any("Divide by zero" in str(x.message) for x in w)
    torch.testing.assert_close(ours, torch.as_tensor(ref).float(), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_shift_and_scale_match_monai(ch2, device):
    img = ch2[0].to(device).float()
    torch.testing.assert_close(vt.ShiftIntensity(12.5)(img), mt.ShiftIntensity(12.5)(img.clone()).to(device))
    torch.testing.assert_close(vt.ScaleIntensity(None, None, factor=-0.25)(img),
                               mt.ScaleIntensity(None, None, factor=-0.25)(img.clone()).to(device))
    u8 = ch2[0].to(device)
    # Integer images keep their dtype: wrap-around like MONAI (torch uint8 arithmetic) ...
    ours = vt.ShiftIntensity(100)(u8)
    assert ours.dtype == torch.uint8
    torch.testing.assert_close(ours, torch.as_tensor(mt.ShiftIntensity(100)(u8.clone())).to(device))
    # ... or, with safe=True, clamped to the dtype's range (MONAI's documented intent; its torch
    # path wraps before the safe conversion can see the overflow).
    ours = vt.ShiftIntensity(100, safe=True)(u8)
    assert torch.equal(ours, (u8.long() + 100).clamp(0, 255).to(torch.uint8))


@pytest.mark.parametrize("kw", [dict(), dict(minv=-1.0, maxv=2.0), dict(minv=None, maxv=3.0),
                                dict(minv=0.5, maxv=None), dict(channel_wise=True)])
@pytest.mark.parametrize("device", DEVICES)
def test_scale_intensity_minmax_matches_monai(ch2, kw, device):
    img = ch2[0].to(device)
    ours = vt.ScaleIntensity(**kw)(img)
    ref = mt.ScaleIntensity(**kw)(img.clone())
    torch.testing.assert_close(ours, torch.as_tensor(ref).to(device), rtol=1e-6, atol=1e-6)
    multi = rand_volume((3, 4, 5, 6), seed=2, device=device)
    multi[1] = 7.0  # a constant channel: MONAI returns img * minv there
    torch.testing.assert_close(vt.ScaleIntensity(**kw)(multi), mt.ScaleIntensity(**kw)(multi.clone()).to(device),
                               rtol=1e-6, atol=1e-6)


def test_minmax_matches_torch_and_batches_per_sample():
    x = rand_volume((4, 3, 5, 6, 7))
    torch.testing.assert_close(ops.minmax(x), torch.stack([x.flatten(1).amin(1), x.flatten(1).amax(1)], -1)
                               .double().unsqueeze(1))
    torch.testing.assert_close(ops.minmax(x, True), torch.stack([x.flatten(2).amin(2), x.flatten(2).amax(2)], -1)
                               .double())
    # a batch rescales each sample with its own statistics
    out = vt.ScaleIntensity()(x)
    assert torch.allclose(out.flatten(1).amin(1), torch.zeros(4)) and torch.allclose(out.flatten(1).amax(1), torch.ones(4))


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_minmax_zero_extreme_is_positive_zero(device, dtype):
    """-0 and +0 tie: a zero minimum / maximum is +0 whichever zero comes first, on both backends
    (CUDA's order-preserving atomics put -0 below +0; the CPU kept the first seen)."""
    torch.manual_seed(3)
    x = torch.rand(2, 2, 9, 10, 70, dtype=torch.float64)
    x[0] = -x[0]
    x[0].view(-1)[::7] = -0.0  # sample 0: max is a zero, -0 first and many
    x[0].view(-1)[5::11] = 0.0
    x[1].view(-1)[::5] = 0.0  # sample 1: min is a zero, +0 first, -0 later in every channel
    x[1].view(-1)[3::13] = -0.0
    x = x.to(dtype).to(device)
    for channel_wise in (False, True):
        got = ops.minmax(x, channel_wise).cpu()
        zeros = torch.cat([got[0].view(-1, 2)[:, 1], got[1].view(-1, 2)[:, 0]])
        assert torch.equal(zeros, torch.zeros_like(zeros)) and not torch.signbit(zeros).any(), zeros
        ref = x.cpu().double().flatten(2 if channel_wise else 1)
        want = torch.stack([ref.amin(-1), ref.amax(-1)], -1).view_as(got)
        assert torch.equal(got, want)


def test_per_sample_ops_match_torch():
    x = rand_volume((4, 2, 5, 6, 7), dtype=torch.float64)
    offsets = torch.tensor([1.5, -2.0, 0.0, 10.0], dtype=torch.float64)
    factors = torch.tensor([0.5, -0.5, 0.0, 2.0], dtype=torch.float64)
    torch.testing.assert_close(ops.shift_intensity(x, offsets), x + offsets.view(-1, 1, 1, 1, 1))
    torch.testing.assert_close(ops.scale_intensity(x, factors), x * (1 + factors.view(-1, 1, 1, 1, 1)))
    torch.testing.assert_close(ops.shift_intensity(x, torch.tensor(3.0)), x + 3.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_outputs_round_like_torch(dtype):
    x = rand_volume((2, 1, 9, 10, 11), dtype=dtype)
    ours = ops.scale_intensity_range(x, -175.0, 250.0, 0.0, 1.0, True)
    assert ours.dtype == dtype
    ref = ((x.float() + 175.0) / 425.0 * 1.0 + 0.0).clamp(0, 1).to(dtype)
    assert torch.equal(ours, ref)


# ---------------- random transforms: semantics and distributions ----------------
def _offsets_per_sample(out, x):
    d = (out.double() - x.double()).flatten(1)
    return d[:, 0], d


def test_rand_shift_offsets_uniform_and_gated():
    n = 4000
    x = torch.zeros(n, 1, 2, 2, 2)
    out = ops.rand_shift_intensity(x, -0.3, 0.7, 0.6, 1234)
    first, d = _offsets_per_sample(out, x)
    assert torch.allclose(d, first[:, None].expand_as(d))  # one offset per sample
    applied = first != 0
    frac = applied.double().mean().item()
    assert abs(frac - 0.6) < 4 * np.sqrt(0.6 * 0.4 / n)
    assert stats.kstest(first[applied].numpy(), stats.uniform(loc=-0.3, scale=1.0).cdf).pvalue > 1e-3


def test_rand_shift_offset_distribution_matches_monai():
    n = 1500
    x = torch.zeros(n, 1, 1, 1, 2)
    ours = _offsets_per_sample(vt.RandShiftIntensity(2.0, prob=1.0, seed=5)(x), x)[0].numpy()
    t = mt.RandShiftIntensity(2.0, prob=1.0)
    t.set_random_state(5)
    theirs = np.array([float(t(torch.zeros(1, 1, 1, 2))[0, 0, 0, 0]) for _ in range(n)])
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3


def test_rand_shift_channel_wise():
    x = torch.zeros(300, 3, 2, 2, 1)
    out = vt.RandShiftIntensity((-1, 1), prob=1.0, channel_wise=True, seed=9)(x)
    per_channel = out.flatten(2)
    assert torch.allclose(per_channel, per_channel[..., :1].expand_as(per_channel))
    assert (per_channel[:, 0, 0] != per_channel[:, 1, 0]).float().mean() > 0.99
    assert stats.kstest(per_channel[:, :, 0].flatten().numpy(), stats.uniform(loc=-1, scale=2).cdf).pvalue > 1e-3


def test_rand_scale_factor_distribution_matches_monai():
    n = 1500
    x = torch.ones(n, 1, 1, 1, 2)
    ours = vt.RandScaleIntensity((-0.4, 0.2), prob=1.0, seed=3)(x)[:, 0, 0, 0, 0].numpy() - 1
    t = mt.RandScaleIntensity((-0.4, 0.2), prob=1.0)
    t.set_random_state(3)
    theirs = np.array([float(t(torch.ones(1, 1, 1, 2))[0, 0, 0, 0]) - 1 for _ in range(n)])
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3
    assert ours.min() >= -0.4 and ours.max() < 0.2


def test_gaussian_noise_statistics():
    x = torch.zeros(1, 1, 64, 64, 64)
    noise = ops.rand_gaussian_noise(x, 0.5, 2.0, False, 1.0, 77).flatten().double()
    assert abs(noise.mean().item() - 0.5) < 5 * 2.0 / np.sqrt(noise.numel())
    assert abs(noise.std().item() - 2.0) < 0.01
    sample = ((noise[:20000] - 0.5) / 2.0).numpy()
    assert stats.kstest(sample, "norm").pvalue > 1e-3


def test_gaussian_noise_sample_std_matches_monai():
    # sample_std: each sample's std ~ U(0, std). Compare the per-sample std distribution.
    n = 600
    x = torch.zeros(n, 1, 8, 8, 8)
    ours = vt.RandGaussianNoise(prob=1.0, std=0.3, sample_std=True, seed=4)(x).flatten(1).std(1).numpy()
    t = mt.RandGaussianNoise(prob=1.0, std=0.3, sample_std=True)
    t.set_random_state(4)
    theirs = np.array([float(torch.as_tensor(t(torch.zeros(1, 8, 8, 8))).std()) for _ in range(n)])
    assert stats.ks_2samp(ours, theirs).pvalue > 1e-3
    assert ours.max() <= 0.3 * 1.2


def test_prob_zero_is_identity_and_prob_gate_is_per_sample():
    x = rand_volume((16, 1, 3, 3, 3))
    assert torch.equal(ops.rand_gaussian_noise(x, 0.0, 1.0, False, 0.0, 1), x)
    out = ops.rand_gaussian_noise(x, 0.0, 1.0, False, 0.5, 1)
    changed = (out != x).flatten(1).any(1)
    assert 0 < changed.sum() < 16


# ---------------- determinism ----------------
@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_same_bytes_and_batch_independence(device):
    x = rand_volume((8, 2, 9, 8, 7), device=device)
    chain = [ops.Step(ops.SCALE_INTENSITY_RANGE, ops.HAS_B_MIN | ops.HAS_B_MAX | ops.CLIP, (-175, 250, 0, 1)),
             ops.Step(ops.SHIFT_INTENSITY, ops.RANDOM, (0, -0.1, 0.1), 0.5, 11),
             ops.Step(ops.GAUSSIAN_NOISE, ops.SAMPLE_STD, (0, 0.1), 0.9, 12)]
    a = ops.pointwise_chain(x, chain)
    assert torch.equal(a, ops.pointwise_chain(x, chain))
    for i in range(8):  # sample i alone, told its place in the batch, gives the same bytes
        assert torch.equal(ops.pointwise_chain(x[i:i + 1], chain, first_sample=i), a[i:i + 1])
    assert torch.equal(ops.pointwise_chain(x[:1], chain), a[:1])  # batch of 1 vs batch of 8
    t1, t2 = vt.RandGaussianNoise(prob=1.0, seed=42), vt.RandGaussianNoise(prob=1.0, seed=42)
    assert torch.equal(t1(x), t2(x))
    assert not torch.equal(t1(x), t1(x))  # a transform advances its stream every call


def test_global_torch_seed_controls_default_seeds():
    x = rand_volume((2, 1, 4, 4, 4))
    torch.manual_seed(0)
    a = vt.RandGaussianNoise(prob=1.0)(x)
    torch.manual_seed(0)
    b = vt.RandGaussianNoise(prob=1.0)(x)
    assert torch.equal(a, b)


def test_fused_compose_equals_one_by_one():
    x = rand_volume((3, 1, 10, 11, 12))
    make = lambda: [vt.ScaleIntensityRange(-175, 250, 0, 1, True), vt.RandShiftIntensity(0.1, prob=0.5, seed=1),
                    vt.RandScaleIntensity(0.2, prob=1.0, seed=2), vt.RandGaussianNoise(prob=1.0, seed=3)]
    fused = vt.Compose(make())(x)
    y = x
    for t in make():
        y = t(y)
    assert torch.equal(fused, y)


def test_compose_fuses_into_one_pass_and_keeps_integer_shift_semantics(monkeypatch):
    calls = []
    real = ops.pointwise_chain
    monkeypatch.setattr(ops, "pointwise_chain", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    u8 = (rand_volume((1, 6, 7, 8), lo=0, hi=255)).to(torch.uint8)
    btcv = vt.Compose([vt.ScaleIntensityRange(0, 255, 0, 1, True), vt.RandShiftIntensity(0.1, prob=1.0, seed=1),
                       vt.RandGaussianNoise(prob=1.0, seed=2)])
    assert btcv(u8).dtype == torch.float32 and calls == [3]  # one pass of three steps
    calls.clear()
    out = vt.Compose([vt.ShiftIntensity(100), vt.RandGaussianNoise(prob=1.0, seed=2)])(u8)
    assert calls == [1, 1]  # the integer shift keeps uint8 (wraps) before the noise pass
    ref = vt.RandGaussianNoise(prob=1.0, seed=2)(mt.ShiftIntensity(100)(u8.clone()).as_tensor())
    assert torch.equal(out, ref)


def test_dictionary_forms_share_one_draw_and_skip_missing():
    x = rand_volume((1, 6, 6, 6))
    d = vt.RandShiftIntensityd(["a", "b", "c"], 1.0, prob=1.0, allow_missing_keys=True, seed=1)({"a": x, "b": x.clone()})
    assert torch.equal(d["a"], d["b"]) and "c" not in d
    with pytest.raises(KeyError, match="allow_missing_keys"):
        vt.RandGaussianNoised(["zz"], prob=1.0)({"a": x})
    y = rand_volume((1, 6, 6, 6), lo=5, hi=9, seed=4)
    d = vt.ScaleIntensityd(["a", "b"])({"a": x, "b": y})  # each key rescaled with its own min / max
    ref = mt.ScaleIntensityd(["a", "b"])({"a": x.clone(), "b": y.clone()})
    torch.testing.assert_close(d["a"], ref["a"])
    torch.testing.assert_close(d["b"], ref["b"])
    d = vt.ScaleIntensityRanged("a", -175, 250, 0, 1, True)({"a": x})
    torch.testing.assert_close(d["a"], mt.ScaleIntensityRanged("a", -175, 250, 0, 1, True)({"a": x.clone()})["a"])


# ---------------- layouts, forms, in place ----------------
def test_non_contiguous_input():
    base = rand_volume((2, 1, 7, 6, 5))
    x = base.permute(0, 1, 4, 3, 2)  # non-contiguous view
    assert not x.is_contiguous()
    for f in (lambda t: ops.scale_intensity_range(t, -100.0, 100.0, 0.0, 1.0, True),
              lambda t: ops.rand_gaussian_noise(t, 0.0, 1.0, True, 1.0, 3),
              lambda t: ops.rand_shift_intensity(t, -1.0, 1.0, 1.0, 4, True)):
        assert torch.equal(f(x), f(x.contiguous()))


def test_in_place_equals_out_of_place():
    x = rand_volume((3, 2, 5, 5, 5))
    for name, args in [("scale_intensity_range", (-50.0, 50.0, 0.0, 1.0, True)),
                       ("rand_shift_intensity", (-1.0, 1.0, 0.7, 9)), ("rand_scale_intensity", (-1.0, 1.0, 0.7, 9)),
                       ("rand_gaussian_noise", (0.0, 1.0, True, 0.8, 9))]:
        y = x.clone()
        ret = getattr(ops, name + "_")(y, *args)
        assert ret is y
        assert torch.equal(y, getattr(torch.ops.voxaug, name)(x, *args)), name


# Outputs of 2 MiB and more are written with streaming stores on the CPU (kernels/common/
# stream_store.h); in place never streams. Odd spatial sizes put sample and tile starts off the
# 16-byte grid (the head and tail of each streamed row go through memcpy).
@pytest.mark.parametrize("out_dtype", [None, torch.float16, torch.bfloat16])
def test_large_streamed_outputs_equal_in_place_and_torch(out_dtype):
    x = rand_volume((3, 1, 61, 97, 93))  # 6.6 MB float32, 3.3 MB as 16-bit
    chain = [ops.Step(ops.SCALE_INTENSITY_RANGE, ops.HAS_B_MIN | ops.HAS_B_MAX | ops.CLIP, (-175, 250, 0, 1)),
             ops.Step(ops.SHIFT_INTENSITY, ops.RANDOM, (0, -0.1, 0.1), 0.7, 11),
             ops.Step(ops.GAUSSIAN_NOISE, ops.SAMPLE_STD, (0, 0.1), 0.9, 12)]
    streamed = ops.pointwise_chain(x, chain, dtype=out_dtype)
    in_place = ops.pointwise_chain_(x.clone(), chain)
    want = in_place if out_dtype is None else in_place.to(out_dtype)  # one rounding from float32
    assert streamed.dtype == want.dtype and torch.equal(streamed, want)
    for i in range(3):  # a sample alone (below the threshold: not streamed) gives the same bytes
        assert torch.equal(ops.pointwise_chain(x[i:i + 1], chain, first_sample=i, dtype=out_dtype), streamed[i:i + 1])
    # Deterministic steps vs torch's own ops.
    det = ops.pointwise_chain(x, chain[:1], dtype=out_dtype)
    assert torch.equal(det, ((x + 175.0) / 425.0 * 1.0 + 0.0).clamp(0, 1).to(det.dtype))
    x64 = x.double()
    torch.testing.assert_close(ops.pointwise_chain(x64, [ops.Step(ops.SHIFT_INTENSITY, 0, (1.25,))]), x64 + 1.25,
                               rtol=0, atol=0)


def test_meta_tensor_metadata_preserved():
    affine = torch.diag(torch.tensor([1.5, 1.5, 2.0, 1.0], dtype=torch.float64))
    img = MetaTensor(rand_volume((1, 5, 6, 7)), affine=affine, meta={"filename_or_obj": "x.nii.gz"})
    out = vt.Compose([vt.ScaleIntensityRange(-175, 250, 0, 1, True), vt.RandGaussianNoise(prob=1.0, seed=1)])(img)
    assert isinstance(out, MetaTensor)
    assert torch.equal(out.affine, img.affine) and out.meta["filename_or_obj"] == "x.nii.gz"


def test_numpy_input_and_unbatched_shapes():
    arr = np.random.default_rng(0).uniform(-100, 100, (1, 4, 5, 6)).astype(np.float32)
    out = vt.ScaleIntensityRange(-100, 100, 0, 1)(arr)
    assert isinstance(out, torch.Tensor) and out.shape == (1, 4, 5, 6)


def test_empty_inputs_return_empty():
    for shape in [(0, 1, 4, 4, 4), (2, 1, 0, 4, 4)]:
        x = torch.empty(shape)
        assert ops.rand_gaussian_noise(x, 0.0, 1.0, True, 1.0, 1).shape == shape
        assert ops.scale_intensity_range(x, 0.0, 1.0, None, None, False).shape == shape


# ---------------- bad inputs ----------------
def test_bad_inputs_give_named_errors():
    x = rand_volume((1, 1, 4, 4, 4))
    with pytest.raises(ValueError, match=r"image must be 5-D \(N, C, D, H, W\), got 4-D"):
        ops.scale_intensity_range(x[0], 0.0, 1.0, None, None, False)
    with pytest.raises(ValueError, match="img must be"):
        vt.ScaleIntensityRange(0, 1)(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="int64 images are not supported"):
        ops.scale_intensity_range(x.long(), 0.0, 1.0, None, None, False)
    with pytest.raises(ValueError, match="prob must be in"):
        ops.rand_gaussian_noise(x, 0.0, 1.0, True, 1.5, 1)
    with pytest.raises(ValueError, match="std must be >= 0"):
        ops.rand_gaussian_noise(x, 0.0, -1.0, True, 1.0, 1)
    with pytest.raises(ValueError, match="mean must be finite"):
        ops.rand_gaussian_noise(x, float("nan"), 1.0, True, 1.0, 1)
    with pytest.raises(ValueError, match="a_max must be finite"):
        ops.scale_intensity_range(x, 0.0, float("inf"), None, None, False)
    with pytest.raises(ValueError, match="low must be <= high"):
        ops.rand_shift_intensity(x, 1.0, -1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"offsets must be a scalar tensor or have shape \(N,\)"):
        ops.shift_intensity(x, torch.zeros(3))
    with pytest.raises(ValueError, match="dtype must be float32, float16, bfloat16 or float64"):
        ops.scale_intensity_range(x, 0.0, 1.0, None, None, False, torch.int32)
    with pytest.raises(ValueError, match="in-place ops need a floating image"):
        ops.rand_gaussian_noise_(x.to(torch.uint8), 0.0, 1.0, True, 1.0, 1)
    with pytest.raises(ValueError, match="prob must be in"):
        vt.RandShiftIntensity(0.1, prob=-0.1)
    with pytest.raises(ValueError, match=r"stats must be float64 of shape"):
        ops.pointwise_chain(x, [ops.Step(ops.RESCALE_INTENSITY, 3, (0, 1), values=torch.zeros(1, 1, 2))])
    with pytest.raises(ValueError, match="min / max of an empty volume"):
        ops.minmax(torch.empty(1, 1, 0, 2, 2))


@need_cuda
def test_mixed_devices_error():
    x = rand_volume((1, 1, 4, 4, 4), device="cuda")
    with pytest.raises(ValueError, match="offsets must be on the image's device"):
        ops.shift_intensity(x, torch.zeros(1))


# ---------------- torch.library checks ----------------
def _op_cases(device):
    x = rand_volume((2, 2, 3, 4, 5), device=device)
    off = torch.tensor([0.5, -1.0], device=device)
    chain = ops._lists([ops.Step(ops.SCALE_INTENSITY_RANGE, 7, (-100, 100, 0, 1)),
                        ops.Step(ops.SHIFT_INTENSITY, ops.RANDOM | ops.CHANNEL_WISE, (0, -1, 1), 0.7, 3),
                        ops.Step(ops.GAUSSIAN_NOISE, ops.SAMPLE_STD, (0, 1), 1.0, 4)])
    return [
        ("scale_intensity_range", (x, -100.0, 100.0, 0.0, 1.0, True)),
        ("shift_intensity", (x, off)),
        ("scale_intensity", (x, off)),
        ("rand_shift_intensity", (x, -1.0, 1.0, 0.5, 7)),
        ("rand_scale_intensity", (x, -0.5, 0.5, 0.5, 7, True)),
        ("rand_gaussian_noise", (x, 0.0, 1.0, True, 0.9, 7)),
        ("pointwise_chain", (x, *chain)),
        ("pointwise_chain", (x, *ops._lists([ops.Step(ops.RESCALE_INTENSITY, 3, (-1, 1), values=ops.minmax(x))]))),
    ]


def _backward_cases(device):
    """pointwise_chain_backward (the op autograd calls; no in-place form) on the chains of
    _op_cases, also with a float64 grad for a float32 image and with a first_sample offset."""
    g = rand_volume((2, 2, 3, 4, 5), lo=-1.0, hi=1.0, seed=21, device=device)
    cases = [("pointwise_chain_backward", (g, *args)) for name, args in _op_cases(device) if name == "pointwise_chain"]
    assert len(cases) == 2 and cases[0][1][1].shape == g.shape
    cases.append(("pointwise_chain_backward", (g.double(), *cases[0][1][1:], 3)))
    return cases


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_every_op(device):
    torch.library.opcheck(torch.ops.voxaug.minmax, (rand_volume((2, 3, 4, 5, 6), device=device), True))
    for name, args in _op_cases(device):
        torch.library.opcheck(getattr(torch.ops.voxaug, name), args)
        inplace = getattr(torch.ops.voxaug, name + "_")
        torch.library.opcheck(inplace, (args[0].clone(), *args[1:]),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    for name, args in _backward_cases(device):
        torch.library.opcheck(getattr(torch.ops.voxaug, name), args)


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_float64(device):
    for name, args in _op_cases(device):
        x = args[0].double().requires_grad_(True)
        rest = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in args[1:])
        f = lambda t: getattr(torch.ops.voxaug, name)(t, *rest)
        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-7), name


def test_inplace_rejects_autograd():
    x = rand_volume((1, 1, 3, 3, 3)).requires_grad_(True)
    y = x * 1.0
    with pytest.raises(RuntimeError, match="not differentiable"):
        torch.ops.voxaug.rand_shift_intensity_(y, -1.0, 1.0, 1.0, 1)
    with torch.no_grad():
        before = y._version
        ops.rand_shift_intensity_(y, -1.0, 1.0, 1.0, 1)
        assert y._version > before  # the version counter sees the mutation


# ---------------- CUDA vs CPU twin (GPU machines) ----------------
@need_cuda
def test_cuda_matches_cpu_bitwise():
    for name, args in _op_cases("cpu") + _backward_cases("cpu"):
        cuda_args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
        cuda_args = tuple([t.cuda() if isinstance(t, torch.Tensor) else t for t in a] if isinstance(a, list) else a
                          for a in cuda_args)
        cpu_out = getattr(torch.ops.voxaug, name)(*args)
        gpu_out = getattr(torch.ops.voxaug, name)(*cuda_args)
        assert torch.equal(cpu_out, gpu_out.cpu()), name


# ---------------- Rician noise, bias field, contrast, gamma (issue 5) ----------------
MASK32 = 0xFFFFFFFF


def philox4x32_10(ctr, key):
    """Independent Python Philox4x32-10 (Salmon et al.), to read back in-kernel draws."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def philox_words(seed, sample, stream, block=0):
    seed &= (1 << 64) - 1
    return philox4x32_10((block & MASK32, block >> 32, sample, stream), (seed & MASK32, seed >> 32))


def u01(word):
    return np.float32((word >> 8) / 16777216.0)


def draw_range(word, lo, hi):  # the kernel's float32 lo + (hi - lo) u
    lo, hi = np.float32(lo), np.float32(hi)
    return float(lo + (hi - lo) * u01(word))


SAMPLE, CHANNEL = 1, 2


def test_python_philox_known_answer():
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def fixed_seed(t, seed):
    t._next_seed = lambda: seed
    return t


# ---- Rician ----
def test_rician_moments_match_rice_distribution():
    sigma, nu = 2.0, 3.0
    x = torch.zeros(2, 1, 64, 64, 64)
    x[1] = nu
    out = vt.RandRicianNoise(prob=1.0, std=sigma, sample_std=False, seed=3)(x).double()
    n = out[0].numel()
    r0, r1 = out[0].flatten(), out[1].flatten()
    # x = 0: Rayleigh, mean sigma sqrt(pi/2), variance (2 - pi/2) sigma^2
    mean0, var0 = sigma * np.sqrt(np.pi / 2), (2 - np.pi / 2) * sigma ** 2
    assert abs(r0.mean().item() - mean0) < 5 * np.sqrt(var0 / n)
    assert abs(r0.var().item() - var0) < 0.01 * var0
    # Rice(nu, sigma): E[R^2] = nu^2 + 2 sigma^2, mean sigma sqrt(pi/2) L_1/2(-nu^2 / (2 sigma^2))
    assert abs((r1 ** 2).mean().item() - (nu ** 2 + 2 * sigma ** 2)) < 0.01 * (nu ** 2 + 2 * sigma ** 2)
    rice = stats.rice(nu / sigma, scale=sigma)
    assert abs(r1.mean().item() - rice.mean()) < 5 * rice.std() / np.sqrt(n)
    assert stats.kstest(r1[:20000].numpy(), rice.cdf).pvalue > 1e-3
    assert (out >= 0).all()


def test_rician_matches_monai_distribution():
    x = torch.full((1, 1, 32, 32, 32), 1.5)
    ours = vt.RandRicianNoise(prob=1.0, mean=0.2, std=0.7, sample_std=False, seed=5)(x).flatten().numpy()
    t = mt.RandRicianNoise(prob=1.0, mean=0.2, std=0.7, sample_std=False)
    t.set_random_state(5)
    theirs = torch.as_tensor(t(x[0])).flatten().numpy()
    assert stats.ks_2samp(ours[:20000], theirs[:20000]).pvalue > 1e-3


@pytest.mark.parametrize("channel_wise", [False, True])
def test_rician_sample_std_read_back(channel_wise):
    # x = 0, mean 0: E[R^2] = 2 s^2, s = std * u from the sample (channel) Philox stream.
    seed, std = 1234, 3.0
    x = torch.zeros(4, 2, 24, 24, 24)
    out = fixed_seed(vt.RandRicianNoise(prob=1.0, std=std, channel_wise=channel_wise), seed)(x).double()
    for n in range(4):
        for c in range(2):
            word = philox_words(seed, n, CHANNEL, c)[0] if channel_wise else philox_words(seed, n, SAMPLE)[2]
            s = std * float(u01(word))
            est = np.sqrt((out[n, c] ** 2).mean().item() / 2)
            assert abs(est - s) < 0.03 * s + 1e-6, (n, c, est, s)


@pytest.mark.parametrize("channel_wise", [False, True])
def test_rician_relative_scales_by_image_std(channel_wise):
    x = rand_volume((2, 2, 24, 24, 24), lo=0, hi=10, seed=6)
    x[:, 1] *= 5
    out = vt.RandRicianNoise(prob=1.0, std=0.5, relative=True, sample_std=False, channel_wise=channel_wise,
                             seed=7)(x).double()
    # E[R^2] = (x + 0)^2 + 2 s^2 per voxel: s^2 = mean(R^2 - x^2) / 2
    s2 = ((out ** 2 - x.double() ** 2) / 2).flatten(2 if channel_wise else 1).mean(-1)
    img_std = x.double().flatten(2 if channel_wise else 1).std(-1)
    torch.testing.assert_close(s2, (0.5 * img_std) ** 2, rtol=0.05, atol=0)
    # MONAI computes the same std (torch.std, unbiased) from the image. Seeded: each estimate of
    # s^2 has a relative standard error of ~4% here (the 2 x n cross term), so two unseeded
    # estimates differed by over 10% in about one run in ten.
    m = mt.RandRicianNoise(prob=1.0, std=0.5, relative=True, sample_std=False, channel_wise=channel_wise)
    m.set_random_state(seed=3)
    mo = torch.as_tensor(m(x[0].clone())).double()  # MONAI writes channel-wise results in place
    ms2 = ((mo ** 2 - x[0].double() ** 2) / 2).flatten(1 if channel_wise else 0).mean(-1)
    torch.testing.assert_close(ms2, (0.5 * img_std[0]) ** 2, rtol=0.05, atol=0)


def test_rician_gradient_is_refused_clearly():
    x = rand_volume((1, 1, 4, 4, 4), dtype=torch.float64).requires_grad_(True)
    y = vt.RandRicianNoise(prob=1.0, seed=1, dtype=None)(x)
    with pytest.raises(ValueError, match="rician_noise\\) is not differentiable"):
        y.sum().backward()


# ---- bias field ----
def monai_bias(x_sample, degree, coeff):
    m = mt.RandBiasField(degree=degree, prob=1.0)
    return m._generate_random_field(list(x_sample.shape[1:]), degree, coeff)


@pytest.mark.parametrize("degree", [1, 3, 5])
@pytest.mark.parametrize("shape", [(3, 2, 9, 10, 11), (2, 1, 1, 7, 6), (1, 1, 17, 2, 5)])
def test_bias_field_matches_monai_field(degree, shape):
    x = rand_volume(shape, lo=1, hi=200, seed=8)
    t = vt.RandBiasField(degree=degree, coeff_range=(-0.2, 0.3), prob=1.0, seed=9)
    out = t(x)
    assert t.last_coefficients.shape == (shape[0], (degree + 1) * (degree + 2) * (degree + 3) // 6)
    for n in range(shape[0]):
        field = monai_bias(x[n], degree, t.last_coefficients[n].tolist())
        ref = x[n].double() * torch.from_numpy(np.exp(field))
        torch.testing.assert_close(out[n].double(), ref, rtol=2e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_bias_field_matches_monai_on_ch2(ch2, device):
    img = ch2[0].to(device)
    t = vt.RandBiasField(prob=1.0, seed=10)
    out = t(img)
    m = mt.RandBiasField(prob=1.0)
    m._do_transform = True
    m._coeff = t.last_coefficients[0].tolist()
    ref = torch.as_tensor(m(img.cpu(), randomize=False))
    assert out.dtype == torch.float32 and out.abs().sum() > 0
    torch.testing.assert_close(out.cpu(), ref, rtol=2e-6, atol=1e-5)


def test_bias_field_coefficients_uniform_and_gate_per_sample():
    x = rand_volume((400, 1, 2, 2, 2), lo=1, hi=2)
    t = vt.RandBiasField(coeff_range=(0.02, 0.1), prob=0.4, seed=11)
    out = t(x)
    applied = t.last_applied
    assert abs(applied.double().mean().item() - 0.4) < 4 * np.sqrt(0.24 / 400)
    assert torch.equal(out[~applied], x[~applied])  # exp(0) = 1: untouched
    c = t.last_coefficients[applied].flatten().numpy()
    assert stats.kstest(c, stats.uniform(loc=0.02, scale=0.08).cdf).pvalue > 1e-3


def test_torchio_random_bias_field_matches_torchio_field():
    tio = pytest.importorskip("torchio")
    from torchio.transforms.augmentation.intensity.random_bias_field import BiasField

    x = rand_volume((2, 1, 9, 12, 7), lo=1, hi=100, seed=12)
    t = vt.RandomBiasField(coefficients=0.5, order=3, seed=13)
    out = t(x)
    c = t.last_coefficients
    assert (c.abs() <= 0.5).all() and c.shape == (2, 20)
    for n in range(2):
        field = BiasField.generate_bias_field(x[n].numpy(), 3, c[n].tolist())
        torch.testing.assert_close(out[n], x[n] * torch.from_numpy(field), rtol=3e-6, atol=0)
    img = tio.ScalarImage(tensor=x[0])
    ref = BiasField(coefficients=c[0].tolist(), order=3)(img).data
    torch.testing.assert_close(out[0], ref, rtol=3e-6, atol=0)


# ---- contrast (MONAI) and gamma (TorchIO) ----
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.7, 4.5])
@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_adjust_contrast_matches_monai_on_ch2(ch2, gamma, invert, device):
    img = ch2[0].to(device)
    ours = vt.AdjustContrast(gamma, invert_image=invert)(img.float())
    ref = torch.as_tensor(mt.AdjustContrast(gamma, invert_image=invert)(img.float().clone())).to(device)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=2e-4)
    if not invert:  # uint8 input: MONAI promotes to float32 (inverting a uint8 image wraps in MONAI)
        ours8 = vt.AdjustContrast(gamma)(img)
        assert ours8.dtype == torch.float32
        torch.testing.assert_close(ours8, torch.as_tensor(mt.AdjustContrast(gamma)(img.clone())).to(device),
                                   rtol=1e-5, atol=2e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adjust_contrast_matches_monai_on_random(dtype):
    x = rand_volume((2, 3, 5, 6, 7), dtype=dtype, seed=14)
    x[1] = 4.0  # a constant sample: range 0, MONAI returns min
    for gamma in (0.6, 3.3):
        for invert in (False, True):
            ours = vt.AdjustContrast(gamma, invert_image=invert)(x)
            for n in range(2):
                ref = torch.as_tensor(mt.AdjustContrast(gamma, invert_image=invert)(x[n].clone()))
                torch.testing.assert_close(ours[n], ref, rtol=1e-5 if dtype == torch.float32 else 1e-12,
                                           atol=1e-3 if dtype == torch.float32 else 1e-9)


@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_adjust_contrast_retain_stats_matches_monai(ch2, invert, device):
    img = ch2[0].to(device).float()
    for gamma in (0.7, 2.5):
        ours = vt.AdjustContrast(gamma, invert_image=invert, retain_stats=True)(img)
        ref = torch.as_tensor(mt.AdjustContrast(gamma, invert_image=invert, retain_stats=True)(img.clone()))
        torch.testing.assert_close(ours, ref.to(device), rtol=1e-4, atol=2e-3)
        torch.testing.assert_close(ours.mean(), img.mean(), rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(ours.std(), img.std(), rtol=1e-4, atol=1e-3)


def test_rand_adjust_contrast_retain_stats_gate_and_compose():
    seed = 555
    x = rand_volume((6, 2, 7, 8, 9), lo=-20, hi=90, seed=20)
    t = fixed_seed(vt.RandAdjustContrast(prob=0.5, retain_stats=True, invert_image=True), seed)
    out = t(x)
    for n in range(6):
        w = philox_words(seed, n, SAMPLE)
        if not u01(w[0]) < 0.5:
            assert torch.equal(out[n], x[n])  # the gate also holds for the second pass
            continue
        gamma = draw_range(w[1], 0.5, 4.5)
        ref = torch.as_tensor(mt.AdjustContrast(gamma, invert_image=True, retain_stats=True)(x[n].clone()))
        torch.testing.assert_close(out[n], ref, rtol=1e-4, atol=1e-3)
    # never fused: the transforms around it run in their own passes and give the same result
    make = lambda: [vt.RandShiftIntensity(1.0, prob=1.0, seed=1),
                    vt.RandAdjustContrast(prob=1.0, retain_stats=True, seed=2), vt.RandGaussianNoise(prob=1.0, seed=3)]
    y = x
    for tr in make():
        y = tr(y)
    assert torch.equal(vt.Compose(make())(x), y)


def test_rand_adjust_contrast_read_back_gamma_matches_monai():
    seed = 777
    x = rand_volume((5, 1, 9, 8, 7), lo=-50, hi=300, seed=15)
    t = fixed_seed(vt.RandAdjustContrast(prob=0.7, gamma=(0.5, 4.5)), seed)
    out = t(x)
    for n in range(5):
        w = philox_words(seed, n, SAMPLE)
        if not u01(w[0]) < 0.7:
            assert torch.equal(out[n], x[n])
            continue
        gamma = draw_range(w[1], 0.5, 4.5)
        ref = torch.as_tensor(mt.AdjustContrast(gamma)(x[n].clone()))
        torch.testing.assert_close(out[n], ref, rtol=1e-5, atol=1e-3)


def test_rand_adjust_contrast_dict_shares_gamma_per_key_stats():
    x, y = rand_volume((1, 6, 6, 6), seed=16), rand_volume((1, 6, 6, 6), lo=2, hi=9, seed=17)
    d = fixed_seed(vt.RandAdjustContrastd(["a", "b"], prob=1.0).transform, 99)
    out = vt.RandAdjustContrastd(["a", "b"], prob=1.0)
    out.transform = d
    res = out({"a": x, "b": y})
    gamma = draw_range(philox_words(99, 0, SAMPLE)[1], 0.5, 4.5)
    for k, v in (("a", x), ("b", y)):
        torch.testing.assert_close(res[k], torch.as_tensor(mt.AdjustContrast(gamma)(v.clone())), rtol=1e-5, atol=1e-4)


def test_torchio_gamma_matches_power():
    from torchio.transforms.augmentation.intensity.random_gamma import power

    x = rand_volume((2, 3, 5, 6, 7), lo=-20, hi=40, seed=18)
    torch.testing.assert_close(vt.Gamma(1.7)(x), torch.stack([power(x[n], 1.7) for n in range(2)]),
                               rtol=2e-6, atol=1e-6)
    seed = 4321
    out = fixed_seed(vt.RandomGamma(log_gamma=(-0.3, 0.3)), seed)(x)
    for n in range(2):
        for c in range(3):  # TorchIO draws one gamma per channel
            gamma = float(np.exp(draw_range(philox_words(seed, n, CHANNEL, c)[0], -0.3, 0.3)))
            assert 0.74 < gamma < 1.35
            torch.testing.assert_close(out[n, c], power(x[n, c], gamma), rtol=2e-6, atol=1e-6)
    pos = x.abs()
    torch.testing.assert_close(vt.Gamma(0.8)(pos), pos ** 0.8, rtol=2e-6, atol=1e-6)


def test_random_gamma_log_uniform_distribution():
    x = torch.full((500, 4, 1, 1, 2), 2.0)
    out = vt.RandomGamma(log_gamma=0.4, seed=19)(x)[..., 0, 0, 0]
    beta = torch.log(torch.log(out.double()) / np.log(2.0)).flatten().numpy()
    assert stats.kstest(beta, stats.uniform(loc=-0.4, scale=0.8).cdf).pvalue > 1e-3


# ---- op level: gradcheck, opcheck, determinism, fusion, errors ----
def _new_step_cases(device, dtype=torch.float32):
    x = rand_volume((2, 2, 3, 4, 5), lo=1, hi=50, dtype=dtype, device=device)
    coeff = (torch.rand(2, 20, generator=torch.Generator().manual_seed(3)) * 0.2 - 0.1).to(device)
    mm = ops.minmax(x)
    wide = torch.stack([mm[..., 0] - 1, mm[..., 1] + 1], -1)  # keeps d/dx finite at the extremes
    return x, [
        ("bias", [ops.Step(ops.BIAS_FIELD, 0, (3,), 0.8, 5, values=coeff)]),
        ("bias_torchio", [ops.Step(ops.BIAS_FIELD, ops.MONOMIAL_BASIS, (3,), 1.0, 5, values=coeff)]),
        ("contrast", [ops.Step(ops.ADJUST_CONTRAST, ops.RANDOM, (1.0, 0.5, 4.5), 0.9, 6, values=wide)]),
        ("contrast_inv", [ops.Step(ops.ADJUST_CONTRAST, ops.INVERT_IMAGE, (2.2,), values=wide)]),
        ("gamma", [ops.Step(ops.GAMMA, ops.RANDOM, (1.0, -0.3, 0.3), 1.0, 7)]),
        ("chain", [ops.Step(ops.GAMMA, 0, (1.2,)), ops.Step(ops.BIAS_FIELD, 0, (3,), 1.0, 5, values=coeff),
                   ops.Step(ops.SHIFT_INTENSITY, ops.RANDOM, (0, -1, 1), 0.7, 3)]),
        ("rician", [ops.Step(ops.RICIAN_NOISE, ops.SAMPLE_STD | ops.CHANNEL_WISE, (0.1, 2.0), 0.9, 8,
                             values=torch.ones(2, 2, device=device))]),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_new_steps_gradcheck_float64(device):
    x, cases = _new_step_cases(device, torch.float64)
    for name, steps in cases:
        if name == "rician":
            continue
        xx = x.clone().requires_grad_(True)
        assert torch.autograd.gradcheck(lambda t: ops.pointwise_chain(t, steps), (xx,), eps=1e-6, atol=1e-6), name


@pytest.mark.parametrize("device", DEVICES)
def test_new_steps_opcheck(device):
    x, cases = _new_step_cases(device)
    for name, steps in cases:
        torch.library.opcheck(torch.ops.voxaug.pointwise_chain, (x, *ops._lists(steps)))
        torch.library.opcheck(torch.ops.voxaug.pointwise_chain_, (x.clone(), *ops._lists(steps)),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("device", DEVICES)
def test_new_steps_deterministic_and_batch_split_invariant(device):
    x, cases = _new_step_cases(device)
    for name, steps in cases:
        a = ops.pointwise_chain(x, steps)
        assert torch.equal(a, ops.pointwise_chain(x, steps)), name
        assert not torch.isnan(a).any() and a.abs().sum() > 0, name
        for i in range(2):  # sample i alone: its own rows of per-sample values, first_sample i
            sub = [ops.Step(s.op, s.flags, s.params, s.prob, s.seed,
                            None if s.values is None else s.values[i:i + 1]) for s in steps]
            assert torch.equal(ops.pointwise_chain(x[i:i + 1], sub, first_sample=i), a[i:i + 1]), name


def test_new_transforms_fuse_in_compose(monkeypatch):
    calls = []
    real = ops.pointwise_chain
    monkeypatch.setattr(ops, "pointwise_chain", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    x = rand_volume((2, 1, 8, 9, 10), lo=0, hi=100)
    make = lambda: [vt.ScaleIntensityRange(0, 100, 0, 1, True), vt.RandBiasField(prob=1.0, seed=1),
                    vt.RandomGamma(seed=2), vt.RandRicianNoise(prob=1.0, std=0.05, seed=3),
                    vt.RandAdjustContrast(prob=1.0, seed=4), vt.RandGaussianNoise(prob=1.0, seed=5)]
    fused = vt.Compose(make())(x)
    assert calls == [4, 2]  # the contrast step needs its input's min / max: a second pass
    y = x
    for t in make():
        y = t(y)
    assert torch.equal(fused, y)


def test_new_transforms_dict_forms_and_meta_tensor():
    x = rand_volume((1, 6, 7, 8), lo=1, hi=9)
    d = vt.RandBiasFieldd(["a", "b"], prob=1.0, seed=1)({"a": x, "b": x.clone()})
    assert torch.equal(d["a"], d["b"]) and not torch.equal(d["a"], x)
    d = vt.RandRicianNoised(["a"], prob=1.0, relative=True, seed=2)({"a": x})
    assert d["a"].shape == x.shape and (d["a"] >= 0).all()
    d = vt.AdjustContrastd("a", 2.0)({"a": x})
    torch.testing.assert_close(d["a"], torch.as_tensor(mt.AdjustContrastd("a", 2.0)({"a": x.clone()})["a"]))
    img = MetaTensor(x, meta={"filename_or_obj": "x.nii.gz"})
    out = vt.Compose([vt.RandBiasField(prob=1.0, seed=1), vt.RandomGamma(seed=2)])(img)
    assert isinstance(out, MetaTensor) and out.meta["filename_or_obj"] == "x.nii.gz"


def test_new_steps_bad_inputs_give_clear_errors():
    x = rand_volume((2, 1, 4, 4, 4))
    with pytest.raises(ValueError, match="std must be >= 0"):
        vt.RandRicianNoise(std=-1.0)
    with pytest.raises(ValueError, match="degree should be no less than 1"):
        vt.RandBiasField(degree=0)
    with pytest.raises(ValueError, match="degree must be in"):
        vt.RandBiasField(degree=8)
    with pytest.raises(ValueError, match="must greater than 0.5"):
        vt.RandAdjustContrast(gamma=0.4)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        vt.AdjustContrast(-1.0)
    with pytest.raises(ValueError, match=r"coefficients must be a floating tensor of shape \(2, 20\)"):
        ops.pointwise_chain(x, [ops.Step(ops.BIAS_FIELD, 0, (3,), values=torch.zeros(2, 10))])
    with pytest.raises(ValueError, match="a bias field step needs"):
        ops.pointwise_chain(x, [ops.Step(ops.BIAS_FIELD, 0, (3,))])
    with pytest.raises(ValueError, match="bias field degree must be an integer"):
        ops.pointwise_chain(x, [ops.Step(ops.BIAS_FIELD, 0, (2.5,), values=torch.zeros(2, 10))])
    with pytest.raises(ValueError, match="a contrast step needs"):
        ops.pointwise_chain(x, [ops.Step(ops.ADJUST_CONTRAST, 0, (2.0,))])
    with pytest.raises(ValueError, match="std_scale .* must be a floating tensor with 2 values"):
        ops.pointwise_chain(x, [ops.Step(ops.RICIAN_NOISE, 0, (0.0, 1.0), values=torch.ones(3))])
    with pytest.raises(ValueError, match=r"ops\[0\] must be 0..11"):
        ops.pointwise_chain(x, [ops.Step(12)])
    with pytest.raises(ValueError, match="gamma must be > 0"):
        ops.pointwise_chain(x, [ops.Step(ops.GAMMA, 0, (0.0,))])


@need_cuda
def test_new_steps_cuda_matches_cpu_bitwise():
    x, cases = _new_step_cases("cpu")
    xg, cases_g = _new_step_cases("cuda")
    for (name, steps), (_, steps_g) in zip(cases, cases_g):
        assert torch.equal(ops.pointwise_chain(x, steps), ops.pointwise_chain(xg, steps_g).cpu()), name
        if name != "rician":
            g = torch.rand_like(x)
            a = torch.ops.voxaug.pointwise_chain_backward(g, x, *ops._lists(steps))
            b = torch.ops.voxaug.pointwise_chain_backward(g.cuda(), xg, *ops._lists(steps_g))
            assert torch.equal(a, b.cpu()), name


# ---------------- random shift / scale / noise on ch2 vs MONAI (read-back draws) ----------------
def ch2_batch(ch2, dtype, n=3):
    """n different samples of the ch2 volume (as loaded, then flipped along W and H), in `dtype`."""
    img = ch2[0]
    return torch.stack([img, img.flip(-1), img.flip(-2)][:n]).to(dtype)


def read_back(seed, n, prob, lo, hi):
    """(gate open, value) the kernel draws for sample n of a shift / scale step: u < prob from word
    0 and the kernel's float32 U(lo, hi) from word 1 of the sample stream (Python Philox above)."""
    w = philox_words(seed, n, SAMPLE)
    return bool(u01(w[0]) < prob), draw_range(w[1], lo, hi)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("safe", [False, True])
def test_rand_shift_on_ch2_matches_monai_with_read_back_offsets(ch2, dtype, safe):
    """Every sample's gate and offset are read back from Philox; MONAI's ShiftIntensity with that
    offset gives the same bytes (uint8 as loaded: the float32 sum truncated and wrapped, or with
    safe clamped, as MONAI converts back). Exact: both add one float32 offset once."""
    seed, prob, lo, hi = 2024, 0.75, -40.5, 60.25  # this seed opens the gate of some samples only
    x = ch2_batch(ch2, dtype)
    out = fixed_seed(vt.RandShiftIntensity((hi, lo), safe=safe, prob=prob), seed)(x)
    d = vt.RandShiftIntensityd(["img", "f"], (lo, hi), safe=safe, prob=prob)
    fixed_seed(d.transform, seed)
    dout = d({"img": x, "f": x.float()})
    assert out.dtype == dtype and out.shape == x.shape and dout["img"].dtype == dtype
    drawn = []
    for n in range(x.shape[0]):
        applied, offset = read_back(seed, n, prob, lo, hi)
        if not applied:
            assert torch.equal(out[n], x[n]) and torch.equal(dout["f"][n], x[n].float())
            continue
        drawn.append(offset)
        assert lo <= offset < hi
        ref = torch.as_tensor(mt.ShiftIntensity(offset, safe=safe)(x[n].clone()))
        assert ref.dtype == dtype and torch.equal(out[n], ref), n
        assert torch.equal(dout["img"][n], ref), n  # the dictionary form: one draw for every key
        refd = mt.ShiftIntensityd("f", offset, safe=safe)({"f": x[n].float().clone()})["f"]
        assert torch.equal(dout["f"][n], torch.as_tensor(refd)), n
    assert 0 < len(drawn) < x.shape[0] and len(set(drawn)) == len(drawn)  # independent per sample
    assert out.float().abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_rand_scale_on_ch2_matches_monai_with_read_back_factors(ch2, dtype):
    """As the shift test, for RandScaleIntensity vs MONAI's ScaleIntensity(minv=None, maxv=None,
    factor=f): ``img * (1 + f)`` in float32 (float32 result for uint8 too). Exact: 1 + f of a
    float32 f rounds to the same float32 in MONAI's double sum and in the kernel's float sum."""
    seed, prob, lo, hi = 2021, 0.75, -0.5, 0.8  # this seed opens the gate of some samples only
    x = ch2_batch(ch2, dtype)
    out = fixed_seed(vt.RandScaleIntensity((lo, hi), prob=prob), seed)(x)
    d = vt.RandScaleIntensityd(["img", "f"], (lo, hi), prob=prob)
    fixed_seed(d.transform, seed)
    dout = d({"img": x, "f": x.float()})
    assert out.dtype == torch.float32 and out.shape == x.shape
    drawn = []
    for n in range(x.shape[0]):
        applied, factor = read_back(seed, n, prob, lo, hi)
        if not applied:
            assert torch.equal(out[n], x[n].float())
            continue
        drawn.append(factor)
        ref = torch.as_tensor(mt.ScaleIntensity(minv=None, maxv=None, factor=factor)(x[n].clone()))
        assert ref.dtype == torch.float32 and torch.equal(out[n], ref), n
        for key in ("img", "f"):  # the dictionary form: one draw for every key
            assert torch.equal(dout[key][n], ref), (n, key)
    assert 0 < len(drawn) < x.shape[0] and len(set(drawn)) == len(drawn)
    assert out.abs().sum() > 0 and not torch.isnan(out).any()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("sample_std", [False, True])
def test_rand_gaussian_noise_on_ch2_adds_the_zero_volume_noise(ch2, dtype, sample_std):
    """out - img is the noise the same seed draws on a zero volume: out equals the float32 sum
    img + noise byte for byte, and MONAI's RandGaussianNoise given that noise (randomize=False)
    returns the same bytes. Each sample's noise has the requested mean and std (sample_std: the
    std read back from Philox, word 2 of the sample stream) within 5 standard errors (s / sqrt(k)
    for the mean, s / sqrt(2k) for the std of k normals), and two samples' noises are uncorrelated
    (|r| < 5 / sqrt(k)): independent draws."""
    seed, mean, std = 77, 3.5, 12.0
    x = ch2_batch(ch2, dtype, n=2)
    make = lambda: fixed_seed(vt.RandGaussianNoise(prob=1.0, mean=mean, std=std, sample_std=sample_std), seed)
    out = make()(x)
    noise = make()(torch.zeros(x.shape))
    assert out.dtype == torch.float32 and torch.equal(out, x.float() + noise)
    d = vt.RandGaussianNoised(["img", "f"], prob=1.0, mean=mean, std=std, sample_std=sample_std)
    fixed_seed(d.transform, seed)
    dout = d({"img": x, "f": x.float()})
    assert torch.equal(dout["img"], out) and torch.equal(dout["f"], out)  # one draw for every key
    k = noise[0].numel()
    for n in range(2):
        m = mt.RandGaussianNoise(prob=1.0, mean=mean, std=std)
        m._do_transform, m.noise = True, noise[n].numpy()
        assert torch.equal(out[n], torch.as_tensor(m(x[n].clone(), randomize=False))), n
        s = std * float(u01(philox_words(seed, n, SAMPLE)[2])) if sample_std else std
        v = noise[n].double().flatten()
        assert abs(v.mean().item() - mean) < 5 * s / np.sqrt(k), n
        assert abs(v.std().item() - s) < 5 * s / np.sqrt(2 * k), n
    a, b = (noise[n].double().flatten() - noise[n].double().mean() for n in range(2))
    r = ((a * b).sum() / torch.sqrt((a * a).sum() * (b * b).sum())).item()
    assert abs(r) < 5 / np.sqrt(k)
    assert not torch.isnan(out).any()


# ---------------- range arguments: NaN / inf refused at construction ----------------
RANGE_ARGS = [
    ("offsets", lambda v: vt.RandShiftIntensity(v)),
    ("offsets", lambda v: vt.RandShiftIntensityd("a", v)),
    ("factors", lambda v: vt.RandScaleIntensity(v)),
    ("factors", lambda v: vt.RandScaleIntensityd("a", v)),
    ("factors", lambda v: vt.RandStdShiftIntensity(v)),
    ("factors", lambda v: vt.RandScaleIntensityFixedMean(factors=v)),
    ("log_gamma", lambda v: vt.RandomGamma(log_gamma=v)),
    ("coefficients", lambda v: vt.RandomBiasField(coefficients=v)),
    ("coeff_range", lambda v: vt.RandBiasField(coeff_range=v)),
    ("gamma", lambda v: vt.RandAdjustContrast(gamma=v)),
]
NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("name, make", RANGE_ARGS, ids=lambda a: a if isinstance(a, str) else "")
@pytest.mark.parametrize("bad", [(0.6, NAN), (NAN, 0.6), (0.6, INF), (-INF, 0.6), (NAN, NAN)],
                         ids=["x_nan", "nan_x", "x_inf", "minf_x", "nan_nan"])
def test_range_arguments_refuse_nan_and_inf(name, make, bad):
    """min / max of a pair with a NaN drops or keeps the NaN depending on the order ((0, nan) was
    silently (0, 0)): every range argument checks both ends are finite, naming itself."""
    with pytest.raises(ValueError, match=rf"{name} must be a finite number or a pair of finite numbers"):
        make(bad)
    attr = "coeff_range" if name == "coefficients" else name  # where the transform keeps it
    for good in ((0.6, 0.7), (0.7, 0.6)):  # finite ends are accepted, in either order
        t = make(good)
        assert getattr(getattr(t, "transform", t), attr) == (0.6, 0.7)


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_number_range_arguments_refuse_nan_and_inf(bad):
    """A number v means (-v, v) (RandAdjustContrast: (0.5, v)); NaN or inf is refused at
    construction with the argument's name, as is a NaN or infinite noise std."""
    for name, make in RANGE_ARGS:
        if name == "coeff_range":  # MONAI's RandBiasField takes a pair only
            with pytest.raises(ValueError, match="coeff_range should be a pair of numbers"):
                make(bad)
            continue
        expected = (r"if gamma is a number, must greater than 0.5" if name == "gamma" and not bad > 0.5
                    else rf"{name} must be a finite number or a pair of finite numbers")
        with pytest.raises(ValueError, match=expected):
            make(bad)
    for make in (lambda s: vt.RandGaussianNoise(std=s), lambda s: vt.RandGaussianNoised("a", std=s),
                 lambda s: vt.RandRicianNoise(std=s)):
        with pytest.raises(ValueError, match="std must be >= 0 and finite"):
            make(bad)


def test_range_arguments_shapes_and_numbers():
    x = torch.ones(2, 1, 2, 2, 2)
    with pytest.raises(ValueError, match=r"offsets should be a number or pair of numbers, got \(1, 2, 3\)"):
        vt.RandShiftIntensity((1, 2, 3))
    with pytest.raises(ValueError, match="factors should be a number or pair of numbers, got 'ab'"):
        vt.RandScaleIntensity("ab")
    with pytest.raises(ValueError, match="log_gamma should be a number or pair of numbers"):
        vt.RandomGamma(log_gamma=(0.1, None))
    # numpy numbers are numbers: (-v, v) (np.float32 is not a Python float)
    assert vt.RandScaleIntensity(np.float32(0.25)).factors == (-0.25, 0.25)
    assert vt.RandAdjustContrast(gamma=np.float64(2.0)).gamma == (0.5, 2.0)
    # (0, nan) used to run as (0, 0): the identity, silently
    with pytest.raises(ValueError, match="factors must be a finite number"):
        vt.RandScaleIntensity((0, NAN), prob=1, seed=1)(x)


# ---------------- set_random_state with a torch.Generator ----------------
RANDOM_FORMS = [
    lambda: vt.RandShiftIntensity(5.0, prob=1.0),
    lambda: vt.RandScaleIntensity(0.5, prob=1.0),
    lambda: vt.RandGaussianNoise(prob=1.0),
]


@pytest.mark.parametrize("make", RANDOM_FORMS, ids=["shift", "scale", "noise"])
def test_set_random_state_with_torch_generator(make):
    """set_random_state(generator=g): the transform draws its per-call seeds from g itself (not a
    copy); seed=s, in the constructor or in set_random_state, is a CPU generator seeded with s;
    set_random_state() with neither goes back to torch's global generator."""
    x = rand_volume((2, 1, 6, 7, 8), seed=30)
    gen = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    a = make().set_random_state(generator=gen(5))(x)
    assert not torch.equal(a, x) and not torch.isnan(a).any()
    assert torch.equal(a, make().set_random_state(generator=gen(5))(x))  # same seed: same bytes
    assert not torch.equal(a, make().set_random_state(generator=gen(6))(x))  # another seed: another draw
    assert not torch.equal(a[0], a[1])  # two samples, two draws
    t = make()
    t.set_random_state(5)
    assert torch.equal(a, t(x))
    seeded = make()
    seeded.set_random_state(9)
    assert torch.equal(a, seeded.set_random_state(generator=gen(5))(x))  # the later call wins
    # the generator is used, not copied: transforms sharing one take turns on its stream, and
    # drawing from it in between moves them on
    shared, solo = gen(5), make().set_random_state(generator=gen(5))
    t1, t2 = make().set_random_state(generator=shared), make().set_random_state(generator=shared)
    assert torch.equal(t1(x), solo(x)) and torch.equal(t2(x), solo(x))
    shared.manual_seed(5)
    assert torch.equal(t2(x), a)
    torch.randint(0, 2, (1,), generator=shared)
    assert not torch.equal(t1(x), solo(x))
    # the dictionary form passes the generator to its transform
    d = vt.RandGaussianNoised("img", prob=1.0).set_random_state(generator=gen(5))
    assert torch.equal(d({"img": x})["img"], vt.RandGaussianNoise(prob=1.0).set_random_state(generator=gen(5))(x))
    # neither seed nor generator: torch's global generator again
    back = make().set_random_state(generator=gen(5)).set_random_state()
    torch.manual_seed(5)
    b = back(x)
    torch.manual_seed(5)
    assert torch.equal(b, back(x))
