"""voxaug.degrade (RandCoarseDropout, RandSimulateLowResolution) against MONAI with the random
parameters pinned (the same hole boxes, the same zoom), on random inputs and the real ch2
volume; statistics of the draws; determinism; bad inputs; opcheck."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import devices, dropout_mask
from voxaug.degrade import (RandCoarseDropout, RandCoarseDropoutd, RandSimulateLowResolution,
                            RandSimulateLowResolutiond)

monai_t = pytest.importorskip("monai.transforms")
stats = pytest.importorskip("scipy.stats")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _monai_dropout(x1, boxes, count, **kw):
    """MONAI RandCoarseDropout on one (C, D, H, W) sample with the given hole boxes pinned."""
    m = monai_t.RandCoarseDropout(prob=1.0, **kw)
    m._do_transform = True
    m.hole_coords = [(slice(None),) + tuple(slice(int(b[a]), int(b[a + 3])) for a in range(3))
                     for b in boxes[:count].tolist()]
    native = x1.dtype == torch.bfloat16  # numpy has no bfloat16: MONAI runs on float32 values
    out = m(x1.float().clone() if native else x1.clone(), randomize=False)
    out = torch.as_tensor(np.asarray(out)) if not isinstance(out, torch.Tensor) else out.as_tensor() \
        if hasattr(out, "as_tensor") else out
    return out.to(x1.dtype)


# ---------------- RandCoarseDropout ----------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dropout_holes", [True, False])
@pytest.mark.parametrize("shape", [(3, 1, 17, 12, 9), (2, 2, 8, 1, 13), (1, 1, 24, 24, 24)])
def test_dropout_constant_fill_equals_monai_exactly(dtype, dropout_holes, shape):
    x = (torch.randn(shape) * 3).to(dtype)
    t = RandCoarseDropout(holes=2, spatial_size=(3, -1, 4), max_holes=5, max_spatial_size=(9, -1, 7),
                          dropout_holes=dropout_holes, fill_value=-1.5, prob=1.0, seed=5)
    out = t(x)
    assert out.dtype == dtype and not torch.isnan(out.float()).any()
    for n in range(shape[0]):
        ref = _monai_dropout(x[n], t.last_boxes[n], int(t.last_counts[n]), holes=2, spatial_size=3,
                             dropout_holes=dropout_holes, fill_value=-1.5)
        assert torch.equal(out[n], ref), n
    assert (out != x).any()


@pytest.mark.parametrize("fill_value", [None, (2.0, 5.0)])
@pytest.mark.parametrize("dropout_holes", [True, False])
def test_dropout_random_fill_mask_and_range(fill_value, dropout_holes):
    x = torch.randn(4, 2, 20, 18, 16)
    t = RandCoarseDropout(holes=3, spatial_size=4, max_spatial_size=10, dropout_holes=dropout_holes,
                          fill_value=fill_value, prob=1.0, seed=11)
    out = t(x)
    for n in range(4):
        # MONAI with a sentinel constant marks exactly the voxels it fills for these boxes.
        ref = _monai_dropout(x[n], t.last_boxes[n], int(t.last_counts[n]), holes=3, spatial_size=4,
                             dropout_holes=dropout_holes, fill_value=1e30)
        filled = ref == 1e30
        assert torch.equal(filled[0], dropout_mask(x[n].shape, t.last_boxes[n], int(t.last_counts[n]), dropout_holes))
        assert torch.equal(out[n][~filled], x[n][~filled])
        lo, hi = (float(x[n].min()), float(x[n].max())) if fill_value is None else fill_value
        v = out[n][filled].double()
        assert v.numel() > 0 and float(v.min()) >= lo and float(v.max()) <= hi
        if v.numel() > 200:  # the fill is uniform on [lo, hi)
            assert stats.kstest(((v - lo) / (hi - lo)).numpy(), "uniform").pvalue > 1e-4


MASK32 = 0xFFFFFFFF


def _philox_u01(seed, sample, numel):
    """The kernel's per-element uniforms of one sample: Philox4x32-10 (Salmon et al.) in numpy,
    counter (block lo, block hi, sample, stream 0), element e -> word e % 4 of block e // 4,
    u = (word >> 8) / 2^24."""
    seed &= (1 << 64) - 1
    m = np.uint64(MASK32)
    k0, k1 = np.uint64(seed & MASK32), np.uint64(seed >> 32)
    b = np.arange((numel + 3) // 4, dtype=np.uint64)
    c0, c1, c2, c3 = b & m, b >> np.uint64(32), np.full_like(b, sample), np.zeros_like(b)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0) & m, p1 & m, ((p0 >> np.uint64(32)) ^ c3 ^ k1) & m, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    words = np.stack([c0, c1, c2, c3], 1).reshape(-1)[:numel]
    return (words >> np.uint64(8)).astype(np.float64) / 16777216.0


class _ReplayUniform:
    """Stands in for MONAI's numpy RandomState in RandCoarseDropout._transform_holes: uniform(low, high,
    size) gives low + (high - low) u with voxaug's per-element u, for the next hole's voxels
    (dropout_holes) or for the whole image."""

    def __init__(self, u, holes, dropout_holes):
        self.u, self.holes, self.dropout_holes = u, list(holes), dropout_holes

    def uniform(self, low, high, size):
        part = self.u[self.holes.pop(0)] if self.dropout_holes else self.u
        assert part.shape == tuple(size)
        low, high = float(low), float(high)  # numpy's uniform works in float64 (MONAI passes float32 min / max)
        return low + (high - low) * part


def test_numpy_philox_known_answer():
    """Philox4x32-10 at counter 0, key 0 (Random123's known-answer vector)."""
    words = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert _philox_u01(0, 0, 4).tolist() == [(w >> 8) / 16777216.0 for w in words]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fill_value", [None, (2.0, 5.0)])
@pytest.mark.parametrize("dropout_holes", [True, False])
def test_dropout_random_fill_equals_monai_with_read_back_draws(dtype, fill_value, dropout_holes):
    """Random fills (image range or a pair) on float32 / float16 / bfloat16 batches, prob 0.7: MONAI's
    RandCoarseDropout on the float32 copy of each sample, given voxaug's boxes and its per-voxel
    uniforms (read back from Philox), then rounded to the input dtype, equals voxaug exactly: both
    compute low + (high - low) u in float64 and round to float32 (MONAI's assignment), then to the
    half type (voxaug's store). Closed gates return the sample unchanged."""
    seed, prob = 97531, 0.7
    x = (torch.randn(6, 2, 12, 11, 10, generator=torch.Generator().manual_seed(12)) * 3).to(dtype)
    t = RandCoarseDropout(holes=2, spatial_size=3, max_holes=4, max_spatial_size=8, dropout_holes=dropout_holes,
                          fill_value=fill_value, prob=prob)
    t._next_seed = lambda: seed
    out = t(x)
    assert out.dtype == dtype and 0 < int(t.last_applied.sum()) < 6
    for n in range(6):
        if not t.last_applied[n]:
            assert torch.equal(out[n], x[n])
            continue
        x1 = x[n].float()
        count = int(t.last_counts[n])
        m = monai_t.RandCoarseDropout(holes=2, spatial_size=3, dropout_holes=dropout_holes, fill_value=fill_value,
                                      prob=1.0)
        m._do_transform = True
        m.hole_coords = [(slice(None),) + tuple(slice(int(b[a]), int(b[a + 3])) for a in range(3))
                         for b in t.last_boxes[n, :count].tolist()]
        m.R = _ReplayUniform(_philox_u01(seed, n, x1.numel()).reshape(x1.shape), m.hole_coords, dropout_holes)
        ref = torch.as_tensor(np.asarray(m(x1.clone(), randomize=False))).to(dtype)
        assert torch.equal(out[n], ref), n
        assert not torch.equal(out[n], x[n])


def test_dropout_real_volume_uint8(ch2):
    img, _ = ch2  # (1, 181, 217, 181) uint8
    x = img[None]
    for fill_value in (17, None):
        t = RandCoarseDropout(holes=4, spatial_size=20, max_holes=8, max_spatial_size=60, fill_value=fill_value,
                              prob=1.0, seed=2)
        out = t(x)
        assert out.dtype == torch.uint8
        ref = _monai_dropout(x[0], t.last_boxes[0], int(t.last_counts[0]), holes=4, spatial_size=20,
                             fill_value=17 if fill_value is not None else 255)
        if fill_value is not None:
            assert torch.equal(out[0], ref)
        else:
            mask = dropout_mask(x[0].shape, t.last_boxes[0], int(t.last_counts[0]), True)
            assert torch.equal(out[0][0][~mask], x[0][0][~mask])
            v = out[0][0][mask].double()
            assert float(v.min()) >= float(x.min()) and float(v.max()) <= float(x.max())
            assert v.std() > 20  # truncated uniform over [0, 255), not a constant


def test_dropout_draw_statistics_match_monai():
    kw = dict(holes=2, spatial_size=(2, 3, 1), max_holes=6, max_spatial_size=(10, 9, -1))
    x = torch.zeros(4000, 1, 12, 11, 10)
    t = RandCoarseDropout(prob=0.5, seed=123, **kw)
    t(x)
    counts, boxes, applied = t.last_counts, t.last_boxes, t.last_applied
    assert abs(applied.double().mean().item() - 0.5) < 0.05
    assert torch.equal(counts == 0, ~applied)
    c = counts[applied]
    assert int(c.min()) == 2 and int(c.max()) == 6
    assert stats.chisquare(torch.bincount(c - 2, minlength=5).numpy()).pvalue > 1e-4
    size = boxes[..., 3:] - boxes[..., :3]
    used = torch.arange(6)[None, :] < counts[:, None]
    s = size[used]
    assert (s >= torch.tensor([2, 3, 1])).all() and (s <= torch.tensor([10, 9, 10])).all()
    assert (boxes[..., :3] >= 0).all() and (boxes[..., 3:] <= torch.tensor([12, 11, 10])).all()
    # MONAI's own draws (numpy RandomState): same distributions of counts, sizes and corners.
    m = monai_t.RandCoarseDropout(prob=1.0, **kw)
    m.set_random_state(7)
    m_counts, m_first, m_last = [], [], []
    for _ in range(1500):
        m.randomize((12, 11, 10))
        m_counts.append(len(m.hole_coords))
        m_first.append([sl.start for sl in m.hole_coords[0][1:]] + [sl.stop - sl.start for sl in m.hole_coords[0][1:]])
        h = m.hole_coords[-1][1:]
        m_last.append([sl.stop - sl.start for sl in h])
    ours_first = torch.cat([boxes[applied, 0, :3], size[applied, 0]], 1).numpy()
    last_idx = (counts[applied] - 1)
    ours_last = size[applied][torch.arange(int(applied.sum())), last_idx].numpy()
    assert stats.ks_2samp(c.numpy(), m_counts).pvalue > 1e-3
    for a in range(6):
        assert stats.ks_2samp(ours_first[:, a], np.array(m_first)[:, a]).pvalue > 1e-3, a
    for a in range(3):  # MONAI's hole sizes grow along the loop; ours do too
        assert stats.ks_2samp(ours_last[:, a], np.array(m_last)[:, a]).pvalue > 1e-3, a


def test_dropout_determinism_gate_and_dict():
    x = torch.randn(3, 1, 10, 10, 10)
    a = RandCoarseDropout(holes=3, spatial_size=3, fill_value=(0, 1), prob=1.0, seed=9)(x)
    b = RandCoarseDropout(holes=3, spatial_size=3, fill_value=(0, 1), prob=1.0, seed=9)(x)
    c = RandCoarseDropout(holes=3, spatial_size=3, fill_value=(0, 1), prob=1.0, seed=10)(x)
    assert torch.equal(a, b) and not torch.equal(a, c)
    t = RandCoarseDropout(holes=3, spatial_size=3, prob=0.0, seed=1)
    assert t(x) is x  # no sample transformed: the input itself, as MONAI
    t = RandCoarseDropout(holes=3, spatial_size=3, fill_value=0.0, prob=1.0, seed=4)
    again = t(x, randomize=False)
    assert torch.equal(again, t(x, randomize=False))
    d = RandCoarseDropoutd(["img", "seg", "missing"], holes=2, spatial_size=4, fill_value=(0, 1), prob=1.0,
                           allow_missing_keys=True, seed=3)
    out = d({"img": x, "seg": x.clone()})
    assert torch.equal(out["img"], out["seg"]) and not torch.equal(out["img"], x)
    with pytest.raises(KeyError, match="missing"):
        RandCoarseDropoutd(["img", "missing"], holes=2, spatial_size=4, prob=1.0)({"img": x})
    # Unbatched (C, D, H, W) input and numpy input.
    one = RandCoarseDropout(holes=1, spatial_size=4, fill_value=7.0, prob=1.0, seed=2)(x[0].numpy())
    assert one.shape == x[0].shape and (one == 7).any()


@pytest.mark.parametrize("fill_value", [None, (0.0, 1.0), 2.0])
@pytest.mark.parametrize("dropout_holes", [True, False])
def test_dropout_in_place_equals_out_of_place(fill_value, dropout_holes):
    x = torch.randn(3, 2, 12, 13, 14)
    kw = dict(holes=2, spatial_size=3, max_holes=5, max_spatial_size=9, fill_value=fill_value,
              dropout_holes=dropout_holes, prob=0.7)
    expect = RandCoarseDropout(seed=21, **kw)(x)
    y = x.clone()
    got = RandCoarseDropout(seed=21, in_place=True, **kw)(y)
    assert got is y and torch.equal(y, expect)
    # a non-contiguous view, in place
    z = torch.randn(3, 2, 14, 13, 12).transpose(2, 4)
    ref = RandCoarseDropout(seed=5, **kw)(z)
    RandCoarseDropout(seed=5, in_place=True, **kw)(z)
    assert torch.equal(z, ref)


def test_dropout_bad_inputs():
    with pytest.raises(ValueError, match="holes"):
        RandCoarseDropout(holes=0, spatial_size=3)
    with pytest.raises(ValueError, match="max_holes"):
        RandCoarseDropout(holes=3, spatial_size=3, max_holes=2)
    with pytest.raises(ValueError, match="fill value"):
        RandCoarseDropout(holes=1, spatial_size=3, fill_value=(1, 2, 3))
    with pytest.raises(ValueError, match="max_spatial_size"):
        RandCoarseDropout(holes=1, spatial_size=5, max_spatial_size=3, prob=1.0)(torch.zeros(1, 1, 8, 8, 8))
    with pytest.raises(ValueError, match="spatial_size"):
        RandCoarseDropout(holes=1, spatial_size=(3, 3), prob=1.0)(torch.zeros(1, 1, 8, 8, 8))
    with pytest.raises(ValueError, match=r"\(N, C, D, H, W\)"):
        RandCoarseDropout(holes=1, spatial_size=3)(torch.zeros(8, 8))
    x = torch.zeros(2, 1, 4, 4, 4)
    op = torch.ops.voxaug.coarse_dropout
    boxes, counts = torch.zeros(2, 1, 6, dtype=torch.long), torch.ones(2, dtype=torch.long)
    with pytest.raises(ValueError, match="boxes must be"):
        op(x, boxes[:1], counts)
    with pytest.raises(ValueError, match=r"counts\[1\]"):
        op(x, boxes, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="fill_mode"):
        op(x, boxes, counts, True, 3)
    with pytest.raises(ValueError, match="int64"):
        op(x, boxes.int(), counts)


# ---------------- RandSimulateLowResolution ----------------
def _monai_lowres(x1, zoom, **kw):
    m = monai_t.RandSimulateLowResolution(prob=1.0, **kw)
    m._do_transform = True
    m.zoom_factor = float(zoom)
    out = m(x1, randomize=False)
    return out.as_tensor() if hasattr(out, "as_tensor") else out


def _pinned(zoom):
    z = torch.as_tensor(zoom, dtype=torch.float64).reshape(-1)
    return {"zoom": z, "applied": torch.ones(z.shape[0], dtype=torch.bool)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1, 17, 12, 9), (2, 2, 15, 1, 13), (1, 1, 32, 30, 28)])
def test_lowres_equals_monai_random_inputs(dtype, shape):
    x = (torch.randn(shape) * 4).to(dtype)
    t = RandSimulateLowResolution(prob=1.0, seed=3)
    out = t(x)
    assert out.dtype == torch.float32 and not torch.isnan(out).any() and (out != 0).any()
    for n in range(shape[0]):
        ref = _monai_lowres(x[n], t.last_zoom[n])
        torch.testing.assert_close(out[n], ref, atol=1e-5, rtol=1e-5)
        expect = [max(1, int(np.round(s * float(t.last_zoom[n])))) for s in shape[2:]]
        assert t.last_low_size[n].tolist() == expect


@pytest.mark.parametrize("zoom", [0.5, 0.5333333333, 0.75, 0.9, 1.0, 1.5, 2.0, 0.01])
@pytest.mark.parametrize("mode", [("trilinear", False), ("trilinear", True), ("nearest", False)])
def test_lowres_pinned_zoom_modes(zoom, mode):
    up, align = mode
    x = torch.randn(1, 2, 15, 16, 21)  # 15 * 0.5 = 7.5: half to even
    t = RandSimulateLowResolution(prob=1.0, upsample_mode=up, align_corners=align)
    out = t.apply(x, _pinned([zoom]))
    ref = _monai_lowres(x[0], zoom, upsample_mode=up, align_corners=align)
    torch.testing.assert_close(out[0], ref, atol=1e-5, rtol=1e-5)


def test_lowres_real_volume(ch2):
    img, _ = ch2
    x = img[None].float()
    for zoom in (0.5, 0.63, 0.87):
        out = RandSimulateLowResolution(prob=1.0).apply(img[None], _pinned([zoom]))  # uint8 in
        ref = _monai_lowres(img, zoom)
        torch.testing.assert_close(out[0], ref, atol=1e-5 * 255, rtol=1e-5)
        # and MONAI's two steps written out with torch on the float volume
        low = [max(1, int(np.round(s * zoom))) for s in img.shape[1:]]
        two = F.interpolate(F.interpolate(x, size=low, mode="nearest"), size=img.shape[1:], mode="trilinear",
                            align_corners=False)
        torch.testing.assert_close(out, two, atol=1e-5 * 255, rtol=1e-5)


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("mode", [(0, False), (0, True), (1, False)])
def test_lowres_gradient_is_the_adjoint(device, mode):
    """The map is linear in the image: its gradient is the adjoint of voxaug's own forward
    (<F x, g> = <x, F^T g> to float32 rounding, the forward's math), equal to the gradient of
    MONAI's two torch interpolations per sample (each sample its own grid; one unchanged), and
    the transform passes it through (float32)."""
    up, align = mode
    g0 = torch.Generator().manual_seed(3)
    x = torch.randn(3, 2, 9, 10, 11, dtype=torch.float64, generator=g0).to(device).requires_grad_(True)
    low = torch.tensor([[4, 5, 6], [9, 10, 11], [7, 3, 8]])
    y = torch.ops.voxaug.simulate_low_resolution(x, low, up, align, torch.float64)
    g = torch.randn(y.shape, dtype=torch.float64, generator=g0).to(device)
    (got,) = torch.autograd.grad(y, x, g)
    lhs, rhs = float((y.detach() * g).sum()), float((x.detach() * got).sum())
    assert abs(lhs - rhs) <= 1e-5 * (y.detach().abs() * g.abs()).sum().item()
    for n in range(3):
        xr = x[n:n + 1].detach().requires_grad_(True)
        kw = {"mode": "trilinear", "align_corners": align} if up == 0 else {"mode": "nearest"}
        ref = F.interpolate(F.interpolate(xr, size=low[n].tolist(), mode="nearest"), size=list(x.shape[2:]), **kw)
        (want,) = torch.autograd.grad(ref, xr, g[n:n + 1])
        torch.testing.assert_close(got[n:n + 1], want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[1], g[1])  # low size = size: unchanged
    xf = x.detach().float().requires_grad_(True)
    t = RandSimulateLowResolution(prob=1.0, upsample_mode="trilinear" if up == 0 else "nearest", align_corners=align)
    params = _pinned([0.5, 1.0, 0.7])
    (gt,) = torch.autograd.grad(t.apply(xf, params), xf, g.float())
    y2 = torch.ops.voxaug.simulate_low_resolution(x, t._low_size(xf, params["zoom"], params["applied"]), up, align,
                                                  torch.float64)
    (want,) = torch.autograd.grad(y2, x, g)
    torch.testing.assert_close(gt, want.float(), rtol=1e-5, atol=1e-5)


def test_lowres_draw_statistics_determinism_and_dict():
    x = torch.randn(3000, 1, 4, 5, 6)
    t = RandSimulateLowResolution(prob=0.25, zoom_range=(0.5, 1.0), seed=8)
    out = t(x)
    applied, zoom = t.last_applied, t.last_zoom
    assert abs(applied.double().mean().item() - 0.25) < 0.03
    assert float(zoom.min()) >= 0.5 and float(zoom.max()) < 1.0
    assert stats.kstest(((zoom - 0.5) / 0.5).numpy(), "uniform").pvalue > 1e-4
    assert torch.equal(out[~applied], x[~applied])  # closed gate: float32 copy
    assert torch.equal(t.last_low_size[~applied], torch.tensor([4, 5, 6]).expand(int((~applied).sum()), 3))
    y = torch.randn(2, 1, 20, 20, 20)
    a = RandSimulateLowResolution(prob=1.0, seed=5)(y)
    b = RandSimulateLowResolution(prob=1.0, seed=5)(y)
    assert torch.equal(a, b)
    assert RandSimulateLowResolution(prob=0.0)(y) is y
    d = RandSimulateLowResolutiond(["img", "big", "absent"], prob=1.0, allow_missing_keys=True, seed=1)
    big = torch.randn(2, 1, 30, 30, 30)
    res = d({"img": y, "big": big})
    z = d.transform.last_zoom
    for n in range(2):  # one zoom per call; each key resized from its own shape
        torch.testing.assert_close(res["img"][n], _monai_lowres(y[n], z[n]), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(res["big"][n], _monai_lowres(big[n], z[n]), atol=1e-5, rtol=1e-5)


def test_lowres_bad_inputs():
    with pytest.raises(NotImplementedError, match="downsample_mode"):
        RandSimulateLowResolution(downsample_mode="area")
    with pytest.raises(NotImplementedError, match="upsample_mode"):
        RandSimulateLowResolution(upsample_mode="bicubic")
    with pytest.raises(ValueError, match="zoom_range"):
        RandSimulateLowResolution(zoom_range=(0.0, 1.0))
    with pytest.raises(ValueError, match="prob"):
        RandSimulateLowResolution(prob=1.5)
    op = torch.ops.voxaug.simulate_low_resolution
    x = torch.zeros(2, 1, 4, 4, 4)
    with pytest.raises(ValueError, match="low_size must be"):
        op(x, torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"low_size\[1\]\[2\]"):
        op(x, torch.tensor([[2, 2, 2], [2, 2, 0]]))
    with pytest.raises(ValueError, match="upsample_mode"):
        op(x, torch.ones(2, 3, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="dtype"):
        op(x, torch.ones(2, 3, dtype=torch.long), 0, False, torch.int32)


# ---------------- both ----------------
@pytest.mark.parametrize("device", devices())
def test_opcheck(device):
    x = torch.randn(2, 2, 5, 6, 7, device=device)
    boxes = torch.tensor([[[0, 1, 2, 3, 4, 5], [1, 0, 0, 5, 2, 7]], [[2, 2, 2, 4, 4, 4], [0, 0, 0, 0, 0, 0]]])
    counts = torch.tensor([2, 1])
    for mode, args in ((0, (1.5, 0.0, 0.0)), (1, (0.0, -1.0, 1.0)), (2, (0.0, 0.0, 0.0))):
        torch.library.opcheck(torch.ops.voxaug.coarse_dropout, (x, boxes, counts, True, mode, *args, 7, 0))
    torch.library.opcheck(torch.ops.voxaug.coarse_dropout,
                          (x.to(torch.float16), boxes, counts, False, 1, 0.0, 0.0, 1.0, 3, 0))
    torch.library.opcheck(torch.ops.voxaug.coarse_dropout_,
                          (x.clone(), boxes, counts, False, 1, 0.0, 0.0, 1.0, 3, 0))
    low = torch.tensor([[3, 3, 4], [5, 6, 7]])
    torch.library.opcheck(torch.ops.voxaug.simulate_low_resolution, (x, low, 0, False, None))
    torch.library.opcheck(torch.ops.voxaug.simulate_low_resolution,
                          (x.to(torch.bfloat16), low, 1, True, torch.float16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUDA twin not run")
def test_cuda_matches_cpu_bit_for_bit():
    x = torch.randn(3, 2, 33, 40, 27)
    for fill in (None, (0.0, 2.0), 3.0):
        for holes in (True, False):
            t = RandCoarseDropout(holes=2, spatial_size=5, max_holes=6, max_spatial_size=20, fill_value=fill,
                                  dropout_holes=holes, prob=1.0, seed=4)
            cpu = t(x)
            gpu = t(x.cuda(), randomize=False)
            assert torch.equal(gpu.cpu(), cpu)
    t = RandSimulateLowResolution(prob=1.0, seed=6)
    cpu = t(x.half())
    gpu = t(x.half().cuda(), randomize=False)
    assert torch.equal(gpu.cpu(), cpu)
    ref = _monai_lowres(x[0].cuda(), t.last_zoom[0])
    torch.testing.assert_close(gpu[0], ref, atol=1e-5, rtol=1e-5)


def test_metatensor_and_float64_inputs():
    from monai.data import MetaTensor

    x = torch.randn(1, 12, 10, 14, dtype=torch.float64)
    mtx = MetaTensor(x.clone(), affine=torch.diag(torch.tensor([2.0, 1.0, 1.0, 1.0])))
    out = RandSimulateLowResolution(prob=1.0, seed=4)(mtx)
    assert isinstance(out, MetaTensor) and out.dtype == torch.float32
    assert torch.equal(out.affine, mtx.affine)
    ref = _monai_lowres(x, RandSimulateLowResolution(prob=1.0, seed=4)._plan(x[None])["zoom"][0])
    torch.testing.assert_close(out.as_tensor(), ref, atol=1e-5, rtol=1e-5)
    d = RandCoarseDropout(holes=2, spatial_size=4, fill_value=0.0, prob=1.0, seed=1)(mtx)
    assert isinstance(d, MetaTensor) and d.dtype == torch.float64 and (d == 0).any()
    assert torch.equal(mtx.as_tensor(), x)  # the input is not modified


# ---------------- GibbsNoise / RandGibbsNoise ----------------
@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.85, 1.0])
def test_gibbs_noise_batch_matches_monai(device, alpha):
    """Every sample of a (3, 2, 12, 13, 14) batch equals MONAI's GibbsNoise of that image (the same
    torch FFTs and mask: bytes equal on the CPU; float32 FFT rounding on CUDA)."""
    from voxaug.degrade import GibbsNoise
    g = torch.Generator().manual_seed(1)
    x = torch.rand(3, 2, 12, 13, 14, generator=g) * 100
    out = GibbsNoise(alpha)(x.to(device))
    assert out.dtype == torch.float32 and out.device.type == device
    for n in range(3):
        ref = torch.as_tensor(monai_t.GibbsNoise(alpha)(x[n].clone()))
        if device == "cpu":
            assert torch.equal(out[n], ref)
        else:
            torch.testing.assert_close(out[n].cpu(), ref, rtol=0, atol=1e-4)


def test_gibbs_noise_rings_a_step_edge():
    """Independent of MONAI: truncating k-space of a step edge overshoots next to the edge (the
    Gibbs phenomenon, about 9% of the jump for a sharp cutoff) and a smaller alpha keeps more of
    the spectrum (the result closer to the input)."""
    from voxaug.degrade import GibbsNoise
    x = torch.zeros(1, 1, 32, 32, 32, dtype=torch.float64)
    x[..., 16:] = 1.0
    strong, mild = GibbsNoise(0.6)(x), GibbsNoise(0.1)(x)
    assert strong.dtype == torch.float64
    assert strong.max().item() > 1.03 and strong.min().item() < -0.03
    assert (mild - x).abs().mean().item() < (strong - x).abs().mean().item()
    assert abs(strong.mean().item() - x.mean().item()) < 1e-12  # the DC term is kept


def test_rand_gibbs_noise_gate_draws_and_dictionary():
    """Per-sample gate and alpha (Philox): applied samples equal MONAI's GibbsNoise with the drawn
    alpha, the others are their float32 copies; alpha ~ U(a, b) (a number a: (0, a)); the
    dictionary form shares one draw; MONAI's argument checks."""
    from voxaug.degrade import RandGibbsNoise, RandGibbsNoised
    g = torch.Generator().manual_seed(2)
    x = (torch.rand(6, 1, 10, 11, 9, generator=g) * 200).to(torch.uint8)
    t = RandGibbsNoise(prob=0.5, alpha=(0.2, 0.7), seed=8)
    out = t(x)
    applied = t.last_applied.tolist()
    assert 0 < sum(applied) < 6 and out.dtype == torch.float32
    for n in range(6):
        if applied[n]:
            a = float(t.last_alpha[n])
            assert 0.2 <= a <= 0.7
            assert torch.equal(out[n], torch.as_tensor(monai_t.GibbsNoise(a)(x[n].clone())))
        else:
            assert torch.equal(out[n], x[n].float())
    draws = RandGibbsNoise(prob=1.0, alpha=0.4, seed=1)
    draws(torch.zeros(2000, 1, 2, 2, 2))
    a = draws.last_alpha.numpy()
    assert a.min() >= 0 and a.max() <= 0.4 and stats.kstest(a / 0.4, "uniform").pvalue > 1e-3
    d = RandGibbsNoised(["a", "b"], prob=0.5, alpha=(0.2, 0.7), seed=8)({"a": x, "b": x.float()})
    assert torch.equal(d["a"], out) and torch.equal(d["b"], out)
    for bad in ((0.5, 0.2), (-0.1, 0.5), (0.1, 1.5), (0.1, 0.2, 0.3)):
        with pytest.raises(ValueError):
            monai_t.RandGibbsNoise(alpha=bad)
        with pytest.raises(ValueError):
            RandGibbsNoise(alpha=bad)
    with pytest.raises(ValueError):
        monai_t.GibbsNoise(1.5)
    from voxaug.degrade import GibbsNoise
    with pytest.raises(ValueError, match="alpha"):
        GibbsNoise(1.5)


# ---------------- TorchIO RandomAnisotropy ----------------
def _tio_anisotropy(x4, axis, factor, affine=None, interp="linear", label=None, scalars_only=True):
    """TorchIO's RandomAnisotropy with its draw pinned to (axis, factor), on one (C, D, H, W) sample."""
    import torchio as tio

    aff = np.eye(4) if affine is None else affine
    subject = tio.Subject(img=tio.ScalarImage(tensor=x4.clone(), affine=aff),
                          **({} if label is None else {"lab": tio.LabelMap(tensor=label.clone(), affine=aff)}))
    t = tio.RandomAnisotropy(axes=(axis,), downsampling=(factor, factor), image_interpolation=interp,
                             scalars_only=scalars_only)
    out = t(subject)
    return out["img"].data, (None if label is None else out["lab"].data)


@pytest.mark.parametrize("interp", ["linear", "nearest"])
@pytest.mark.parametrize("shape", [(2, 17, 20, 15), (1, 16, 9, 24)])
def test_anisotropy_equals_torchio(interp, shape):
    pytest.importorskip("torchio")
    from voxaug.degrade import RandomAnisotropy

    g = torch.Generator().manual_seed(3)
    x = torch.rand((6,) + shape, generator=g) * 100 - 30
    t = RandomAnisotropy(downsampling=(1.2, 4.5), image_interpolation=interp, seed=5)
    out = t(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    assert len(set(t.last_axis.tolist())) > 1
    zero_slabs = ties = 0
    for i in range(6):
        a, f = int(t.last_axis[i]), float(t.last_downsampling[i])
        ref, _ = _tio_anisotropy(x[i], a, f, interp=interp)
        diff = (out[i] - ref).abs()
        if interp == "nearest":
            # A voxel exactly halfway between two coarse voxels (the centre of an odd axis over an
            # even coarse grid) rounds by ITK's floating-point noise in its physical coordinates.
            n = x.shape[2 + a]
            m = int(np.floor(n / f))
            u = (np.arange(n) - ((n - 1) / 2 - (m - 1) / 2 * f)) / f
            tie = torch.from_numpy(np.abs(u - np.floor(u) - 0.5) < 1e-9)
            ties += int(tie.sum())
            diff = diff.movedim(a + 1, -1)[..., ~tie]
        assert float(diff.max()) <= 2e-6 * 130
        zero_slabs += int((ref == 0).any())
    assert interp == "linear" or shape[1] % 2 == 0 or ties > 0  # the exclusion is not vacuous (odd sizes)
    assert zero_slabs > 0  # ITK's default value beyond half a coarse voxel is part of what is checked


def test_anisotropy_spacing_labels_and_real_volume(ch2):
    pytest.importorskip("torchio")
    from monai.data import MetaTensor
    from voxaug.degrade import RandomAnisotropy

    vol, affine = ch2
    img = vol[:, ::2, ::2, ::2].contiguous()  # uint8, ITK's cast truncates
    lab = (img > 60).to(torch.uint8) + (img > 120).to(torch.uint8)
    aff = np.diag([0.7, 1.3, 2.0, 1.0]) @ np.asarray(affine)
    for scalars_only in (True, False):
        t = RandomAnisotropy(axes=(0, 2), downsampling=3.0, scalars_only=scalars_only, label_keys=("lab",), seed=2)
        res = t({"img": MetaTensor(img, affine=torch.as_tensor(aff)), "lab": lab, "other": 3})
        ref_img, ref_lab = _tio_anisotropy(img, int(t.last_axis[0]), float(t.last_downsampling[0]), affine=aff,
                                           label=lab, scalars_only=scalars_only)
        assert res["img"].dtype == torch.uint8 and res["other"] == 3
        assert (res["img"].as_tensor().to(torch.int16) - ref_img.to(torch.int16)).abs().max() <= 1  # ties of the cast
        assert torch.equal(res["lab"], ref_lab)
        assert (res["lab"] is lab) == scalars_only


def test_anisotropy_draws_gate_and_errors():
    pytest.importorskip("torchio")
    import torchio as tio
    from voxaug.degrade import RandomAnisotropy

    x = torch.rand(400, 1, 8, 9, 10)
    t = RandomAnisotropy(axes=(1, 2), downsampling=2.5, p=0.6, seed=9)
    out = t(x)
    assert set(t.last_axis.tolist()) == {1, 2} and 0.5 < t.last_applied.mean() < 0.7
    assert (t.last_downsampling >= 1.0).all() and (t.last_downsampling < 2.5).all()
    assert torch.equal(out[~torch.from_numpy(t.last_applied)], x[~torch.from_numpy(t.last_applied)])
    assert torch.equal(RandomAnisotropy(p=0.0, seed=1)(x), x)
    again = RandomAnisotropy(axes=(1, 2), downsampling=2.5, p=0.6, seed=9)(x)
    assert torch.equal(again, out)
    for kwargs in [dict(axes=3), dict(downsampling=0.5), dict(downsampling=(3, 2))]:
        with pytest.raises(ValueError):
            tio.RandomAnisotropy(**kwargs)
        with pytest.raises(ValueError):
            RandomAnisotropy(**kwargs)
    with pytest.raises(NotImplementedError, match="image_interpolation"):
        RandomAnisotropy(image_interpolation="bspline")
    with pytest.raises(ValueError, match="leaves no voxel"):
        RandomAnisotropy(axes=0, downsampling=(4.0, 4.0), seed=1)(torch.rand(1, 1, 3, 5, 5))


@pytest.mark.parametrize("device", devices())
def test_anisotropy_device_matches_cpu(device):
    from voxaug.degrade import RandomAnisotropy

    x = torch.rand(3, 2, 11, 12, 13) * 10
    a = RandomAnisotropy(seed=4)(x)
    b = RandomAnisotropy(seed=4)(x.to(device))
    assert b.device.type == device and float((b.cpu() - a).abs().max()) <= 1e-5
