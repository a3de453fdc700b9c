"""No host sync on CUDA (issues 2 and 5, STYLE.md "a launcher never synchronises the host"): every
intensity, noise, statistics, filter and degradation transform, array and dictionary forms and a
Compose of several, runs on a CUDA batch under ``torch.cuda.set_sync_debug_mode("error")``, the
random ones at prob 1 and prob 0.5. In that mode torch raises on every synchronising call it makes
(``.item()``, ``.tolist()``, ``.cpu()``, ``bool(tensor)``, ``nonzero``, ``torch.unique``, blocking
host <-> device copies, stream synchronisation), so a transform that returns made none; the mode is
restored afterwards, and only then is the result checked (finite, on the device, right shape and,
where a sample is transformed, changed).

What the mode cannot see: CUDA runtime calls made inside the ops library itself. Those were read
instead (kernels/ and torch_ext/ of these families: no cudaMemcpy, cudaStreamSynchronize,
cudaDeviceSynchronize, item() or cpu(); parameter tables reach the device from pinned memory with
non-blocking copies; reductions write into caller-allocated device buffers).

Transforms that sync, each listed in SYNCS with the reason (xfail, strict: the test fails once
they stop syncing, so the entry must then go).
Without a CUDA device every test here skips.
"""

import numpy as np
import pytest
import torch

from voxaug import degrade as vd
from voxaug import filter as vf
from voxaug import kspace as vk
from voxaug import smooth_field as vsf
from voxaug import spatial as vsp
from voxaug import stats as vs
from voxaug import transforms as vt

from conftest import sync_is_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (sync checks need one)")

SHAPE = (4, 2, 12, 13, 14)  # (N, C, D, H, W): odd sizes, several samples, two channels

# Transforms that synchronise the host today, with the reason. A legitimate sync is one a
# transform's contract documents; the entries below are not legitimate: they are bugs to fix.
SYNCS: dict[str, str] = {}  # none today (the sharpen alpha copy was fixed: pinned, non-blocking)


def volume(seed=0, zeros=0.2, lo=-20.0, hi=80.0, dtype=torch.float32):
    """A CUDA batch made (and uploaded) before the check starts."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(SHAPE, generator=g, dtype=torch.float64) * (hi - lo) + lo
    x = torch.where(torch.rand(SHAPE, generator=g) < zeros, torch.zeros((), dtype=torch.float64), x)
    return x.to(dtype).cuda()


def run_without_sync(transform, data):
    """Calls transform(data) with synchronising calls turned into errors; returns the result."""
    torch.cuda.synchronize()
    with sync_is_error():
        out = transform(data)
    torch.cuda.synchronize()
    return out


def check_result(out, x):
    out = out.as_tensor() if hasattr(out, "as_tensor") else out
    assert isinstance(out, torch.Tensor) and out.is_cuda
    assert out.shape[0] == x.shape[0] and out.shape[2:] == x.shape[2:]
    assert torch.isfinite(out.float()).all()


def _xfail_syncing(name):
    reason = SYNCS.get(name.split("[")[0])
    return [pytest.mark.xfail(strict=True, raises=RuntimeError, reason=reason)] if reason else []


# ---------------- array transforms ----------------
# name -> factory(prob) for random transforms (prob None: deterministic, run once)
RANDOM = {
    "RandShiftIntensity": lambda p: vt.RandShiftIntensity((-5, 5), prob=p, seed=1),
    "RandShiftIntensity[channel_wise]": lambda p: vt.RandShiftIntensity(5, prob=p, channel_wise=True, seed=1),
    "RandScaleIntensity": lambda p: vt.RandScaleIntensity(0.2, prob=p, channel_wise=True, seed=2),
    "RandGaussianNoise": lambda p: vt.RandGaussianNoise(prob=p, std=0.5, seed=3),
    "RandRicianNoise": lambda p: vt.RandRicianNoise(prob=p, std=0.5, seed=4),
    "RandRicianNoise[relative]": lambda p: vt.RandRicianNoise(prob=p, std=0.1, relative=True, channel_wise=True,
                                                              seed=4),
    "RandRicianNoise[per_channel]": lambda p: vt.RandRicianNoise(prob=p, mean=[0.0, 1.0], std=[0.5, 2.0],
                                                                 channel_wise=True, seed=4),
    "RandRicianNoise[per_channel_relative]": lambda p: vt.RandRicianNoise(
        prob=p, mean=np.array([0.5, -0.5]), std=(0.1, 0.3), channel_wise=True, relative=True, sample_std=False,
        seed=4),
    "RandBiasField": lambda p: vt.RandBiasField(degree=3, coeff_range=(0.0, 0.2), prob=p, seed=5),
    "RandomBiasField": lambda p: vt.RandomBiasField(0.3, order=2, p=p, seed=6),
    "RandAdjustContrast": lambda p: vt.RandAdjustContrast(prob=p, gamma=(0.7, 1.5), seed=7),
    "RandAdjustContrast[retain_stats]": lambda p: vt.RandAdjustContrast(prob=p, gamma=(0.7, 1.5), invert_image=True,
                                                                        retain_stats=True, seed=7),
    "RandomGamma": lambda p: vt.RandomGamma(p=p, seed=8),
    "RandStdShiftIntensity": lambda p: vt.RandStdShiftIntensity((-1, 1), prob=p, nonzero=True, channel_wise=True,
                                                                seed=9),
    "RandScaleIntensityFixedMean": lambda p: vt.RandScaleIntensityFixedMean(prob=p, factors=0.3, preserve_range=True,
                                                                            channel_wise=True, seed=10),
    "RandHistogramShift": lambda p: vt.RandHistogramShift((4, 8), prob=p, seed=11),
    "RandGaussianSmooth": lambda p: vf.RandGaussianSmooth(prob=p, seed=12),
    "RandGaussianSharpen": lambda p: vf.RandGaussianSharpen(prob=p, seed=13),
    "RandomBlur": lambda p: vf.RandomBlur(std=(0.5, 1.5), p=p, seed=14),
    "RandCoarseDropout[constant]": lambda p: vd.RandCoarseDropout(3, 4, fill_value=0.0, max_holes=5, prob=p,
                                                                  seed=15),
    "RandCoarseDropout[uniform]": lambda p: vd.RandCoarseDropout(2, 3, fill_value=(0.0, 1.0), max_spatial_size=6,
                                                                 prob=p, seed=16),
    "RandCoarseDropout[image_range_keep]": lambda p: vd.RandCoarseDropout(2, 5, dropout_holes=False, prob=p,
                                                                          seed=17),
    "RandCoarseDropout[in_place]": lambda p: vd.RandCoarseDropout(2, 4, fill_value=(0.0, 1.0), prob=p, seed=19,
                                                                  in_place=True),
    "RandSimulateLowResolution": lambda p: vd.RandSimulateLowResolution(prob=p, zoom_range=(0.4, 0.9), seed=18),
    "RandSimulateLowResolution[nearest]": lambda p: vd.RandSimulateLowResolution(prob=p, upsample_mode="nearest",
                                                                                 seed=18),
    "RandGibbsNoise": lambda p: vd.RandGibbsNoise(prob=p, alpha=(0.3, 0.8), seed=20),
    "RandomAnisotropy": lambda p: vd.RandomAnisotropy(downsampling=(1.5, 3), p=p, seed=25),
    "RandomGhosting": lambda p: vk.RandomGhosting(p=p, seed=21),
    "RandomSpike": lambda p: vk.RandomSpike(num_spikes=(1, 3), p=p, seed=22),
    "RandomMotion": lambda p: vk.RandomMotion(p=p, seed=26),
    "RandomAffine[torchio]": lambda p: vsp.RandomAffine(degrees=15, p=p, seed=27),
    "RandSmoothFieldAdjustContrast": lambda p: vsf.RandSmoothFieldAdjustContrast(SHAPE[2:], (3, 4, 3), prob=p, seed=27),
    "RandSmoothFieldAdjustIntensity": lambda p: vsf.RandSmoothFieldAdjustIntensity(SHAPE[2:], (3, 4, 3), prob=p,
                                                                                   seed=28),
    "RandSmoothDeform": lambda p: vsf.RandSmoothDeform(SHAPE[2:], (3, 4, 3), prob=p, def_range=0.2,
                                                       grid_mode="bilinear", seed=29),
    "RandKSpaceSpikeNoise": lambda p: vk.RandKSpaceSpikeNoise(prob=p, seed=23),
    "RandKSpaceSpikeNoise[range]": lambda p: vk.RandKSpaceSpikeNoise(prob=p, intensity_range=(8, 9),
                                                                     channel_wise=False, seed=24),
}

DETERMINISTIC = {
    "ScaleIntensityRange": lambda: vt.ScaleIntensityRange(-20, 80, 0.0, 1.0, clip=True),
    "ShiftIntensity": lambda: vt.ShiftIntensity(3.0),
    "ScaleIntensity[minmax]": lambda: vt.ScaleIntensity(0.0, 1.0, channel_wise=True),
    "ScaleIntensity[factor]": lambda: vt.ScaleIntensity(None, None, factor=0.5),
    "AdjustContrast": lambda: vt.AdjustContrast(1.5),
    "AdjustContrast[retain_stats]": lambda: vt.AdjustContrast(0.8, invert_image=True, retain_stats=True),
    "Gamma": lambda: vt.Gamma(0.7),
    "StdShiftIntensity": lambda: vt.StdShiftIntensity(0.5, nonzero=True),
    "ScaleIntensityFixedMean": lambda: vt.ScaleIntensityFixedMean(0.3, preserve_range=True),
    "NormalizeIntensity": lambda: vs.NormalizeIntensity(),
    "NormalizeIntensity[nonzero_channel_wise_lists]": lambda: vs.NormalizeIntensity([1.0, 2.0], [3.0, 0.0],
                                                                                    nonzero=True, channel_wise=True),
    "NormalizeIntensity[host_array]": lambda: vs.NormalizeIntensity(subtrahend=np.linspace(0, 1, 14), divisor=2.0),
    "NormalizeIntensity[host_array_nonzero]": lambda: vs.NormalizeIntensity(
        divisor=np.full(SHAPE[1:], 3.0), nonzero=True),
    "NormalizeIntensity[device_array]": lambda: vs.NormalizeIntensity(
        subtrahend=torch.ones(SHAPE[1:], device="cuda"), divisor=torch.full(SHAPE[2:], 2.0, device="cuda")),
    "NormalizeIntensity[device_per_channel]": lambda: vs.NormalizeIntensity(
        subtrahend=torch.tensor([1.0, 2.0], device="cuda"), nonzero=True, channel_wise=True),
    "ScaleIntensityRangePercentiles": lambda: vs.ScaleIntensityRangePercentiles(5, 95, 0.0, 1.0, clip=True,
                                                                                channel_wise=True),
    "GaussianSmooth": lambda: vf.GaussianSmooth((0.5, 1.0, 1.5)),
    "GaussianSharpen": lambda: vf.GaussianSharpen(),
    "Blur": lambda: vf.Blur((1.0, 2.0, 0.5)),
    "Noise": lambda: vt.Noise(0.5, 2.0, seed=3),
    "BiasField": lambda: vt.BiasField([0.1, -0.2, 0.05, 0.3], order=1),
    "GibbsNoise": lambda: vd.GibbsNoise(0.4),
    "Ghosting": lambda: vk.Ghosting(3, 1, 0.7, restore=0.1),
    "Spike": lambda: vk.Spike([[0.1, 0.2, 0.3], [0.6, 0.6, 0.1]], 1.5),
    "KSpaceSpikeNoise": lambda: vk.KSpaceSpikeNoise((3, 4, 5)),
    "KSpaceSpikeNoise[given]": lambda: vk.KSpaceSpikeNoise(((0, 3, 4, 5), (1, 2, 2, 2)), (9.0, 10.0)),
    "Motion": lambda: vk.Motion([[5, 3, 2], [-4, 2, 1]], [[1, 2, 0], [-1, 0, 1]], [0.3, 0.7]),
    "RescaleIntensity": lambda: vs.RescaleIntensity((0, 1), percentiles=(1, 99)),
    "RescaleIntensity[in_min_max]": lambda: vs.RescaleIntensity((-1, 1), in_min_max=(0, 50)),
    "ThresholdIntensity": lambda: vt.ThresholdIntensity(10.0, above=True, cval=-1.0),
    "HistogramStandardization": lambda: vs.HistogramStandardization(np.linspace(0.0, 100.0, 13) ** 1.1),
    "HistogramStandardization[masked]": lambda: vs.HistogramStandardization(
        np.linspace(0.0, 100.0, 13), masking_method=torch.rand(SHAPE[1:], device="cuda") > 0.3),
}


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", [pytest.param(n, marks=_xfail_syncing(n)) for n in RANDOM])
def test_cuda_random_array_transform_does_not_sync(name, prob):
    x = volume(seed=1)
    before = x.clone()
    transform = RANDOM[name](prob)  # built (CUDA tensors included) before the check starts
    out = run_without_sync(transform, x)
    check_result(out, x)
    if prob == 1.0:  # every sample transformed
        assert not torch.equal(out.float(), before.float())


@pytest.mark.parametrize("name", [pytest.param(n, marks=_xfail_syncing(n)) for n in DETERMINISTIC])
def test_cuda_deterministic_array_transform_does_not_sync(name):
    x = volume(seed=2)
    transform = DETERMINISTIC[name]()
    out = run_without_sync(transform, x)
    check_result(out, x)
    assert not torch.equal(out.float(), x.float())


def test_cuda_unbatched_and_integer_inputs_do_not_sync():
    """A (C, D, H, W) sample and a uint8 batch (the dtype casts after the kernels: device ops)."""
    x = volume(seed=3)
    img = (x.clamp(0, 80) * 3).to(torch.uint8)
    for transform in (vt.RandShiftIntensity(4, prob=0.5, safe=True, seed=1), vt.RandRicianNoise(prob=1.0, seed=2),
                      vs.NormalizeIntensity(dtype=None), vt.RandHistogramShift(prob=1.0, seed=3)):
        check_result(run_without_sync(transform, img), img)
        out = run_without_sync(transform, x[0])
        assert out.is_cuda and out.shape == x[0].shape


# ---------------- dictionary forms ----------------
DICTS = {
    "ScaleIntensityRanged": lambda p: vt.ScaleIntensityRanged(["img", "t2"], -20, 80, 0.0, 1.0, clip=True),
    "RandShiftIntensityd": lambda p: vt.RandShiftIntensityd(["img", "t2"], 5, prob=p, seed=1),
    "RandScaleIntensityd": lambda p: vt.RandScaleIntensityd(["img", "t2"], 0.2, prob=p, seed=2),
    "ScaleIntensityd": lambda p: vt.ScaleIntensityd(["img", "t2"], channel_wise=True),
    "RandGaussianNoised": lambda p: vt.RandGaussianNoised(["img", "t2"], prob=p, seed=3),
    "RandRicianNoised": lambda p: vt.RandRicianNoised(["img", "t2"], prob=p, mean=[0.0, 0.3], std=[1.0, 0.5],
                                                      channel_wise=True, relative=True, seed=4),
    "RandBiasFieldd": lambda p: vt.RandBiasFieldd(["img", "t2"], prob=p, seed=5),
    "AdjustContrastd": lambda p: vt.AdjustContrastd(["img", "t2"], 1.3, retain_stats=True),
    "RandAdjustContrastd": lambda p: vt.RandAdjustContrastd(["img", "t2"], prob=p, seed=6),
    "StdShiftIntensityd": lambda p: vt.StdShiftIntensityd(["img", "t2"], 0.5, channel_wise=True),
    "RandStdShiftIntensityd": lambda p: vt.RandStdShiftIntensityd(["img", "t2"], 1.0, prob=p, seed=7),
    "ScaleIntensityFixedMeand": lambda p: vt.ScaleIntensityFixedMeand(["img", "t2"], 0.2),
    "RandScaleIntensityFixedMeand": lambda p: vt.RandScaleIntensityFixedMeand(["img", "t2"], 0.3, prob=p, seed=8),
    "RandHistogramShiftd": lambda p: vt.RandHistogramShiftd(["img", "t2"], prob=p, seed=9),
    "NormalizeIntensityd": lambda p: vs.NormalizeIntensityd(["img", "t2"], subtrahend=np.zeros(SHAPE[1:]),
                                                            nonzero=True),
    "ScaleIntensityRangePercentilesd": lambda p: vs.ScaleIntensityRangePercentilesd(["img", "t2"], 1, 99, 0.0, 1.0),
    "GaussianSmoothd": lambda p: vf.GaussianSmoothd(["img", "t2"], 1.0),
    "RandGaussianSmoothd": lambda p: vf.RandGaussianSmoothd(["img", "t2"], prob=p, seed=10),
    "GaussianSharpend": lambda p: vf.GaussianSharpend(["img", "t2"]),
    "RandGaussianSharpend": lambda p: vf.RandGaussianSharpend(["img", "t2"], prob=p, seed=11),
    "RandCoarseDropoutd": lambda p: vd.RandCoarseDropoutd(["img", "t2"], 2, 4, max_holes=4, prob=p, seed=12),
    "RandSimulateLowResolutiond": lambda p: vd.RandSimulateLowResolutiond(["img", "t2"], prob=p, seed=13),
}


def _dict_marks(name):
    return _xfail_syncing(name[:-1])  # GaussianSharpend -> GaussianSharpen


@pytest.mark.parametrize("prob", [1.0, 0.5])
@pytest.mark.parametrize("name", [pytest.param(n, marks=_dict_marks(n)) for n in DICTS])
def test_cuda_dictionary_transform_does_not_sync(name, prob):
    x, y = volume(seed=4), volume(seed=5, lo=0, hi=300)
    transform = DICTS[name](prob)
    out = run_without_sync(transform, {"img": x, "t2": y, "label": "kept"})
    assert out["label"] == "kept"
    check_result(out["img"], x)
    check_result(out["t2"], y)


# ---------------- Compose ----------------
def test_cuda_compose_of_several_does_not_sync():
    """A fused pointwise group (shift, per-channel Rician, scale, noise), steps that need their
    input's statistics (contrast, histogram shift, std shift), statistics transforms, a filter and
    a degradation, array and dictionary pipelines, at prob 1 and 0.5."""
    for prob in (1.0, 0.5):
        array = vt.Compose([
            vt.ScaleIntensityRange(-20, 80, 0.0, 1.0),
            vt.RandShiftIntensity(0.1, prob=prob, seed=1),
            vt.RandRicianNoise(prob=prob, mean=[0.0, 0.1], std=[0.05, 0.1], channel_wise=True, seed=2),
            vt.RandScaleIntensity(0.1, prob=prob, seed=3),
            vt.RandGaussianNoise(prob=prob, std=0.05, seed=4),
            vt.RandAdjustContrast(prob=prob, seed=5),
            vt.RandHistogramShift(prob=prob, seed=6),
            vs.NormalizeIntensity(nonzero=True, channel_wise=True),
            vt.RandStdShiftIntensity(0.5, prob=prob, seed=7),
            vf.RandGaussianSmooth(prob=prob, seed=8),
            vd.RandCoarseDropout(2, 3, prob=prob, seed=9),
            vs.ScaleIntensityRangePercentiles(1, 99, 0.0, 1.0, clip=True),
            vt.RandBiasField(prob=prob, seed=10),
        ])
        x = volume(seed=6)
        check_result(run_without_sync(array, x), x)
        dictionary = vt.Compose([
            vt.ScaleIntensityRanged("img", -20, 80, 0.0, 1.0),
            vt.RandShiftIntensityd("img", 0.1, prob=prob, seed=1),
            vt.RandRicianNoised("img", prob=prob, std=0.1, seed=2),
            vt.RandScaleIntensityd("img", 0.1, prob=prob, seed=3),
            vs.NormalizeIntensityd("img", nonzero=True),
            vt.RandScaleIntensityFixedMeand("img", 0.2, prob=prob, seed=4),
            vd.RandSimulateLowResolutiond("img", prob=prob, seed=5),
            vf.RandGaussianSmoothd("img", prob=prob, seed=6),
        ])
        out = run_without_sync(dictionary, {"img": x})
        check_result(out["img"], x)


def test_cuda_sync_debug_mode_is_restored_and_catches_a_sync():
    """The check itself: under the mode a synchronising call (item) raises, and the previous mode is
    back afterwards, also after an error."""
    x = volume(seed=7)
    old = torch.cuda.get_sync_debug_mode()
    with pytest.raises(RuntimeError):
        with sync_is_error():
            x.sum().item()
    assert torch.cuda.get_sync_debug_mode() == old
    with pytest.raises(RuntimeError):
        with sync_is_error():
            x.cpu()
    assert torch.cuda.get_sync_debug_mode() == old


def test_cuda_torchio_label_affine_and_rotated_resample_do_not_sync():
    """TorchIO RandomAffine with a label map (its default_pad_label, the outside mask of ITK's
    rules) and Resample through a rotated affine (the same mask), on CUDA data."""
    x = volume(seed=5)
    seg = (volume(seed=6, lo=0.0, hi=3.0)[:, :1]).to(torch.uint8)
    t = vsp.RandomAffine(degrees=15, label_keys=("seg",), seed=4)
    out = run_without_sync(t, {"img": x, "seg": seg})
    check_result(out["img"], x)
    assert out["seg"].is_cuda and out["seg"].dtype == torch.uint8
    aff = np.eye(4)
    c, s = np.cos(0.3), np.sin(0.3)
    aff[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
    res = run_without_sync(vsp.Resample(1.5, affine=aff), x)
    assert res.is_cuda and torch.isfinite(res).all()
