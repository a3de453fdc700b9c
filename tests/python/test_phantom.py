"""voxaug.phantom (include/voxaug/phantom.h) against an independent float64 numpy reference of the
documented formulas: the parameter table from its Philox draws, the image and label from the
table; plus the subject-addressing property, determinism, the statistics of a 96^3 volume, the
argument checks and the meta device."""
import math

import numpy as np
import pytest
import torch

from voxaug import phantom as ph
from conftest import devices

MASK32 = 0xFFFFFFFF
SAMPLE_STREAM = 1  # PhiloxStream::Sample (per-sample parameters)
ELEMENT_STREAM = 0  # PhiloxStream::Element (per-voxel noise)


# ---------------------------------------------------------------- numpy Philox4x32-10
def philox(c0, c1, c2, c3, seed):
    """Philox4x32-10 (Salmon et al.) on arrays of counters, numpy uint64 holding 32-bit words."""
    seed &= (1 << 64) - 1
    c = [np.asarray(v, dtype=np.uint64) & np.uint64(MASK32) for v in (c0, c1, c2, c3)]
    c = np.broadcast_arrays(*c)
    c0, c1, c2, c3 = (v.copy() for v in c)
    k0, k1 = seed & MASK32, seed >> 32
    m = np.uint64(MASK32)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0)) & m, p1 & m, \
                         ((p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1)) & m, p0 & m
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def test_numpy_philox_known_answer():
    # Random123's known-answer vector for Philox4x32-10 with zero counter and key.
    assert tuple(int(v) for v in philox(0, 0, 0, 0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)


def draws(seed, sample, count=544):
    """u_k, k < count, of (seed, sample): uniform01 of word k & 3 of block k >> 2 (Sample stream)."""
    blocks = np.arange((count + 3) // 4, dtype=np.uint64)
    w = philox(blocks, 0, sample, SAMPLE_STREAM, seed)
    words = np.stack(w, axis=1).reshape(-1)[:count]
    return (words >> np.uint64(8)).astype(np.float64) / 16777216.0


# ---------------------------------------------------------------- the table, float64
HEADER, OBJECT = 25, 36


def direction(u, v):
    z = 2 * u - 1
    s = math.sqrt(max(0.0, 1 - z * z))
    return np.array([s * math.cos(2 * math.pi * v), s * math.sin(2 * math.pi * v), z])


def term(u, k0, f_lo, f_hi, a_lo, a_hi):
    f = f_lo + (f_hi - f_lo) * u[k0 + 2]
    return list(f * direction(u[k0], u[k0 + 1])) + [u[k0 + 3], a_lo + (a_hi - a_lo) * u[k0 + 4]]


def reference_row(seed, sample, K):
    u = draws(seed, sample)
    row = np.zeros(HEADER + OBJECT * K)
    row[0] = 15 + 10 * u[0]
    rng = [0.05] * 3 + [0.03] * 3 + [0.02] * 3
    row[1:10] = [r * (2 * u[1 + i] - 1) for i, r in enumerate(rng)]
    for t in range(3):
        row[10 + 5 * t:15 + 5 * t] = term(u, 10 + 5 * t, 1, 4, 3, 5)
    cb = -0.05 + 0.1 * u[32:35]
    rb = 0.7 + 0.2 * u[35:38]
    M = K - 2
    for o in range(K):
        k0 = 32 + 32 * o
        obj = row[HEADER + OBJECT * o:HEADER + OBJECT * (o + 1)]
        if o == 0:
            c, r, R = cb, rb, np.eye(3)
        else:
            s = 0.25 - 0.17 * (o - 1) / max(M, 1)
            c = cb + rb * (-0.45 + 0.9 * u[k0:k0 + 3])
            r = 2 * s * (0.75 + 0.5 * u[k0 + 3:k0 + 6])
            u1, u2, u3 = u[k0 + 6:k0 + 9]
            a, b = math.sqrt(1 - u1), math.sqrt(u1)
            x, y = a * math.sin(2 * math.pi * u2), a * math.cos(2 * math.pi * u2)
            z, w = b * math.sin(2 * math.pi * u3), b * math.cos(2 * math.pi * u3)
            R = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                          [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                          [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
        obj[0:3] = c
        obj[3:12] = (R.T / r[:, None]).reshape(-1)
        amp = 0.0
        for t in range(3):
            tt = term(u, k0 + 9 + 5 * t, 0.5, 1.0 if o == 0 else 1.5, 0.01 if o == 0 else 0.03,
                      0.03 if o == 0 else 0.08)
            obj[12 + 5 * t:17 + 5 * t] = tt
            amp += tt[4]
        obj[27] = (1 - amp) ** 2 * 0.99
        obj[28] = (1 + amp) ** 2 * 1.01
        ext = math.sqrt(obj[28]) * np.sqrt(((R * r[None, :]) ** 2).sum(axis=1)) * 1.01 + 1e-3
        obj[29:32] = c - ext
        obj[32:35] = c + ext
        um = u[k0 + 24]
        if o == 0:
            obj[35] = 40 + (-5 + 10 * um)
        else:
            rank = (o - 1) // 2 if o % 2 else M - (o - 2) // 2
            h = -100 + 270 * rank / max(M, 1)
            if h > 0:
                h += 80
            obj[35] = h + min(10.0, 67.5 / max(M, 1)) * (2 * um - 1)
    return row


@pytest.mark.parametrize("K,seed,first", [(5, 0, 0), (2, 2**64 - 1, 11), (16, 1234567, 2**32 - 3), (14, 7, 40)])
def test_table_matches_numpy_recomputation(K, seed, first):
    n = 3
    table = ph.phantom_params(n, K, seed, first).numpy().astype(np.float64)
    assert table.shape == (n, ph.param_count(K))
    ref = np.stack([reference_row(seed, first + i, K) for i in range(n)])
    np.testing.assert_allclose(table, ref, rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------- voxels, float64
def sin2pi(t):
    return np.sin(2 * np.pi * t)


def waves(terms, p):
    """sum_t a_t sin(2 pi (k_t . p + phase_t)); terms (3, 5), p (..., 3)."""
    return sum(terms[t, 4] * sin2pi(p @ terms[t, :3] + terms[t, 3]) for t in range(3))


def inside(obj, x):
    q = (x - obj[0:3]) @ obj[3:12].reshape(3, 3).T
    r2 = (q * q).sum(-1)
    s = 1 + waves(obj[12:27].reshape(3, 5), q)
    return r2 <= s * s


def gaussian(seed, sample, numel):
    """The voxel normals: Box-Muller on the Element stream, element e from block e >> 2."""
    blocks = np.arange((numel + 3) // 4, dtype=np.uint64)
    a, b, c, d = philox(blocks, 0, sample, ELEMENT_STREAM, seed)

    def bm(w0, w1):
        u0 = ((w0 >> np.uint64(8)) + np.uint64(1)).astype(np.float64) / 16777216.0
        u1 = (w1 >> np.uint64(8)).astype(np.float64) / 16777216.0
        rad = np.sqrt(-2 * np.log(u0))
        return rad * np.cos(2 * np.pi * u1), rad * np.sin(2 * np.pi * u1)

    z0, z1 = bm(a, b)
    z2, z3 = bm(c, d)
    return np.stack([z0, z1, z2, z3], axis=1).reshape(-1)[:numel]


def reference_volume(row, K, size, seed, sample):
    D, H, W = size
    axes = [(np.arange(s) + 0.5) * 2.0 / s - 1 for s in size]
    x = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)  # (D, H, W, 3)
    objs = [row[HEADER + OBJECT * o:HEADER + OBJECT * (o + 1)] for o in range(K)]
    body = inside(objs[0], x)
    label = np.zeros((D, H, W), np.int64)
    for c in range(1, K):  # later classes overwrite earlier ones
        label[inside(objs[c], x) & body] = c
    mean = np.array([o[35] for o in objs])[label]
    tex = waves(row[10:25].reshape(3, 5), x)
    b = row[1:10]
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    poly = (b[0] * x0 + b[1] * x1 + b[2] * x2 + b[3] * x0 * x0 + b[4] * x1 * x1 + b[5] * x2 * x2
            + b[6] * x0 * x1 + b[7] * x1 * x2 + b[8] * x0 * x2)
    value = np.where(body, (mean + tex) * np.exp(poly), -1000.0)
    value = value + row[0] * gaussian(seed, sample, D * H * W).reshape(D, H, W)
    return value, label


@pytest.mark.parametrize("size,K,seed,first", [((24, 20, 28), 5, 3, 0), ((17, 23, 9), 7, 2**63 + 5, 1000),
                                               ((8, 8, 8), 2, 0, 0), ((21, 19, 25), 16, 77, 12)])
def test_volume_matches_numpy_reference(size, K, seed, first):
    n = 2
    image, label = ph.phantom(n, size, K, seed, first)
    assert image.shape == (n, 1, *size) and image.dtype == torch.float32
    assert label.shape == (n, 1, *size) and label.dtype == torch.uint8
    table = ph.phantom_params(n, K, seed, first).numpy().astype(np.float64)
    mismatched = 0
    for i in range(n):
        ref_v, ref_l = reference_volume(table[i], K, size, seed, first + i)
        got_l = label[i, 0].numpy().astype(np.int64)
        got_v = image[i, 0].numpy().astype(np.float64)
        same = got_l == ref_l
        # A voxel whose |q|^2 lies within float32 rounding of its (perturbed) boundary may flip
        # between float32 (kernel) and float64 (here); such coincidences are rare.
        mismatched += int((~same).sum())
        np.testing.assert_allclose(got_v[same], ref_v[same], rtol=0, atol=1e-3)
        assert np.isfinite(got_v).all()
    assert mismatched <= max(1, 0.001 * n * np.prod(size)), mismatched
    # Something was rendered: air and tissue, and for the larger volumes organs.
    assert (label > 0).any() and (image < -500).any() and (image > -400).any()


# ---------------------------------------------------------------- subjects, seeds
def test_sample_n_is_subject_first_sample_plus_n():
    image, label = ph.phantom(3, (16, 12, 20), 6, seed=9, first_sample=10)
    for n in range(3):
        im1, lb1 = ph.phantom(1, (16, 12, 20), 6, seed=9, first_sample=10 + n)
        assert torch.equal(im1[0], image[n]) and torch.equal(lb1[0], label[n])
    table = ph.phantom_params(3, 6, 9, 10)
    assert torch.equal(table[1:], ph.phantom_params(2, 6, 9, 11))


def test_deterministic_and_seeds_differ():
    a = ph.phantom(2, 16, 5, seed=1)
    b = ph.phantom(2, 16, 5, seed=1)
    c = ph.phantom(2, 16, 5, seed=2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0]) and not torch.equal(a[1], c[1])
    assert not torch.equal(a[1][0], a[1][1])  # subjects differ within a batch
    # Seeds are 64-bit: -1 is 2**64 - 1.
    assert torch.equal(ph.phantom(1, 8, 3, seed=-1)[0], ph.phantom(1, 8, 3, seed=2**64 - 1)[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUDA-vs-CPU twin skipped")
def test_cuda_equals_cpu_bitwise():
    for K, size in [(5, (24, 20, 28)), (16, (33, 8, 31))]:
        ci, cl = ph.phantom(3, size, K, 4, 17)
        gi, gl = ph.phantom(3, size, K, 4, 17, device="cuda")
        assert gi.is_cuda and gl.is_cuda
        assert torch.equal(ci, gi.cpu()) and torch.equal(cl, gl.cpu())
        assert torch.equal(ph.phantom_params(3, K, 4, 17), ph.phantom_params(3, K, 4, 17, device="cuda").cpu())


# ---------------------------------------------------------------- statistics at 96^3
def test_default_96_cube_statistics():
    n, K = 6, 5
    image, label = ph.phantom(n, 96, seed=2025)
    table = ph.phantom_params(n, K, 2025).numpy()
    present = 0
    for i in range(n):
        im, lb = image[i, 0].numpy().astype(np.float64), label[i, 0].numpy()
        row = table[i]
        counts = np.bincount(lb.reshape(-1), minlength=K)
        present += int((counts > 0).all())
        # The body: the voxels that are not air (HU far above -1000 + noise).
        body = im > -700
        frac = body.mean()
        assert 0.12 < frac < 0.45, frac
        sigma = row[0]
        air = im[~body]
        assert abs(air.mean() + 1000) < 1.0
        assert abs(air.std() / sigma - 1) < 0.05
        for c in range(K):
            sel = (lb == c) & body
            if sel.sum() < 300:
                continue
            mean = row[HEADER + OBJECT * c + 35]
            # Texture (<= 15 HU peak) and bias (a few %) move a region's mean a little.
            assert abs(im[sel].mean() - mean) < 15, (c, im[sel].mean(), mean)
            assert sigma * 0.95 < im[sel].std() < sigma + 20
        # BTCV's window [-175, 250] holds the tissue (noise tails aside).
        assert ((im[body] > -175) & (im[body] < 250)).mean() > 0.9
    assert present >= n - 1, present
    means = table[:, HEADER + OBJECT * np.arange(1, K) + 35]
    assert (np.abs(np.diff(np.sort(means, axis=1), axis=1)) > 30).all()  # distinct per class


# ---------------------------------------------------------------- errors, meta
@pytest.mark.parametrize("kwargs,match", [
    (dict(batch=0), "batch"),
    (dict(size=(8, 8)), "size"),
    (dict(size=(8, 7, 8)), "size"),
    (dict(num_classes=1), "num_classes"),
    (dict(num_classes=17), "num_classes"),
    (dict(first_sample=-1), "first_sample"),
    (dict(batch=2, first_sample=2**32 - 1), "first_sample"),
])
def test_bad_arguments_raise_named_errors(kwargs, match):
    args = dict(batch=1, size=(8, 8, 8), num_classes=5, seed=0, first_sample=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ph.phantom(**args)
    if "size" not in kwargs:
        with pytest.raises(ValueError, match=match):
            ph.phantom_params(args["batch"], args["num_classes"], 0, args["first_sample"])


def test_meta_device_gives_shapes():
    image, label = torch.ops.voxaug.phantom(3, [9, 10, 11], 4, 0, 0, device=torch.device("meta"))
    assert image.is_meta and image.shape == (3, 1, 9, 10, 11) and image.dtype == torch.float32
    assert label.is_meta and label.shape == (3, 1, 9, 10, 11) and label.dtype == torch.uint8
    t = torch.ops.voxaug.phantom_params(3, 4, 0, 0, device=torch.device("meta"))
    assert t.is_meta and t.shape == (3, ph.param_count(4))


def test_opcheck_and_compile():
    cpu = torch.device("cpu")
    torch.library.opcheck(torch.ops.voxaug.phantom.default, (2, [8, 9, 10], 5, 3, 0), {"device": cpu})
    torch.library.opcheck(torch.ops.voxaug.phantom_params.default, (2, 5, 3, 0), {"device": cpu})

    # The op stays opaque under torch.compile (a traced composite would return empty() memory).
    @torch.compile(fullgraph=True, backend="aot_eager")
    def btcv(seed):
        image, label = torch.ops.voxaug.phantom(2, [12, 10, 9], 4, seed, 3, device=cpu)
        return ((image.clamp(-175, 250) + 175) / 425), label.long()

    x, y = btcv(11)
    image, label = ph.phantom(2, (12, 10, 9), 4, 11, 3)
    assert torch.equal(x, (image.clamp(-175, 250) + 175) / 425) and torch.equal(y, label.long())


@pytest.mark.parametrize("device", devices())
def test_device_placement(device):
    image, label = ph.phantom(1, 8, device=device)
    assert image.device.type == device and label.device.type == device
