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


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_every_op(device):
    torch.library.opcheck(torch.ops.voxaug.minmax, (rand_volume((2, 3, 4, 5, 6), device=device), True))
    for name, args in _op_cases(device):
        torch.library.opcheck(getattr(torch.ops.voxaug, name), args)
        inplace = getattr(torch.ops.voxaug, name + "_")
        torch.library.opcheck(inplace, (args[0].clone(), *args[1:]),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


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
    for name, args in _op_cases("cpu"):
        cuda_args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
        cuda_args = tuple([t.cuda() if isinstance(t, torch.Tensor) else t for t in a] if isinstance(a, list) else a
                          for a in cuda_args)
        cpu_out = getattr(torch.ops.voxaug, name)(*args)
        gpu_out = getattr(torch.ops.voxaug, name)(*cuda_args)
        assert torch.equal(cpu_out, gpu_out.cpu()), name
