"""voxaug.inferers.sliding_window_inference vs MONAI's sliding_window_inference.

MONAI is the reference: the same windows, order, importance map and additions, so float32
results agree to rounding (the tolerances are the issue's: 1e-6 constant, 1e-5 Gaussian; in
practice they are bit-identical on the CPU).
"""
import pytest
import torch

import voxaug  # noqa: F401
from voxaug.inferers import SlidingWindowInferer, sliding_window_inference

monai_inferers = pytest.importorskip("monai.inferers")


def _net(cin=2, cout=3, seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv3d(cin, 4, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv3d(4, cout, 1))
    return net.eval()


def _identity(t):
    # A copy: MONAI (1.6) multiplies the predictor's output in place, which for an identity that
    # returns its input view at sw_batch_size=1 would overwrite MONAI's own input.
    return t.clone()


def _tol(mode):
    return 1e-6 if mode == "constant" else 1e-5


def _compare(x, roi, sw, predictor, **kw):
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, roi, sw, predictor, **kw)
        got = sliding_window_inference(x, roi, sw, predictor, **kw)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.isfinite(got).all()
    assert got.abs().max() > 0
    return got, want


@pytest.mark.parametrize("overlap", [0.0, 0.25, 0.5, 0.8, (0.5, 0.25, 0.8)])
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_matches_monai_overlaps_and_modes(overlap, mode):
    x = torch.randn(2, 2, 21, 17, 24)
    net = _net()
    got, want = _compare(x, (8, 9, 10), 3, net, overlap=overlap, mode=mode)
    assert (got - want).abs().max() <= _tol(mode)
    got, want = _compare(x, (8, 9, 10), 4, _identity, overlap=overlap, mode=mode)
    assert (got - want).abs().max() <= _tol(mode)


@pytest.mark.parametrize("sigma_scale", [0.125, 0.3, (0.1, 0.2, 0.3)])
def test_matches_monai_sigma_scale(sigma_scale):
    x = torch.randn(1, 2, 19, 23, 16)
    got, want = _compare(x, (10, 12, 8), 2, _net(), overlap=0.5, mode="gaussian", sigma_scale=sigma_scale)
    assert (got - want).abs().max() <= 1e-5


@pytest.mark.parametrize("padding_mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_roi_larger_than_image_padding_modes(padding_mode, mode):
    # roi larger than the image on d and w (odd and even differences), smaller on h.
    x = torch.randn(2, 2, 7, 19, 9)
    got, want = _compare(x, (10, 8, 12), 3, _net(), overlap=0.25, mode=mode,
                         padding_mode=padding_mode, cval=0.75 if padding_mode == "constant" else 0.0)
    assert got.shape == (2, 3, 7, 19, 9)
    assert (got - want).abs().max() <= _tol(mode)


@pytest.mark.parametrize("sw", [1, 2, 5, 64])
def test_batch_sizes_and_window_order(sw):
    # N > 1 and batches that straddle two images; sw larger than the window count.
    x = torch.randn(3, 1, 13, 11, 17)
    got, want = _compare(x, (6, 6, 6), sw, _net(1, 2), overlap=0.5, mode="gaussian")
    assert (got - want).abs().max() <= 1e-5


def test_roi_fallback_and_int_roi():
    x = torch.randn(1, 2, 12, 14, 9)
    got, want = _compare(x, (6, -1, 0), 2, _net(), overlap=0.5)
    assert (got - want).abs().max() <= 1e-6
    got, want = _compare(x, 7, 2, _net(), overlap=0.5)
    assert (got - want).abs().max() <= 1e-6


def test_half_predictor_output_and_float64_input():
    x = torch.randn(1, 2, 15, 13, 11)
    half = lambda t: (t * 1.5 + 0.25).half()  # noqa: E731
    got, want = _compare(x, (8, 8, 8), 3, half, overlap=0.5, mode="gaussian")
    assert (got - want).abs().max() <= 1e-5
    bf16 = lambda t: (t * 1.5).bfloat16()  # noqa: E731
    got, want = _compare(x, (8, 8, 8), 3, bf16, overlap=0.25, mode="gaussian")
    assert (got - want).abs().max() <= 1e-5
    x64 = x.double()
    net = _net().double()
    got, want = _compare(x64, (8, 8, 8), 3, net, overlap=0.5, mode="gaussian")
    assert got.dtype == torch.float64
    assert (got - want).abs().max() <= 1e-12


def test_tuple_and_dict_outputs():
    x = torch.randn(2, 2, 12, 13, 10)
    net = _net()

    def two(t):
        y = net(t)
        return y, y[:, :1] * 2.0

    def named(t):
        y = net(t)
        return {"seg": y, "aux": torch.sigmoid(y[:, 1:])}

    for pred in (two, named):
        with torch.no_grad():
            want = monai_inferers.sliding_window_inference(x, (6, 7, 8), 3, pred, overlap=0.5, mode="gaussian")
            got = sliding_window_inference(x, (6, 7, 8), 3, pred, overlap=0.5, mode="gaussian")
        if isinstance(want, dict):
            assert set(got) == set(want)
            pairs = [(got[k], want[k]) for k in want]
        else:
            assert isinstance(got, tuple) and len(got) == len(want)
            pairs = list(zip(got, want))
        for g, w in pairs:
            assert g.shape == w.shape and (g - w).abs().max() <= 1e-5


def test_with_coord_passes_monai_slices():
    x = torch.randn(2, 1, 10, 9, 11)
    seen_m, seen_v = [], []

    def rec(store):
        def p(t, coords):
            store.append([tuple((s.start, s.stop) for s in c) for c in coords])
            return t.clone()
        return p

    with torch.no_grad():
        monai_inferers.sliding_window_inference(x, (6, 6, 6), 3, rec(seen_m), overlap=0.5, with_coord=True)
        sliding_window_inference(x, (6, 6, 6), 3, rec(seen_v), overlap=0.5, with_coord=True)
    assert seen_v == seen_m


def test_argmax_and_output_dtype():
    x = torch.randn(2, 2, 14, 12, 13)
    net = _net(2, 4)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian")
        labels = sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian", argmax=True)
        small = sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian",
                                         output_dtype=torch.float16)
        labels8 = sliding_window_inference(x, (8, 8, 8), 4, net, overlap=0.5, mode="gaussian", argmax=True,
                                           output_dtype=torch.uint8)
    assert labels.shape == (2, 1, 14, 12, 13) and labels.dtype == torch.int64
    assert torch.equal(labels, want.argmax(1, keepdim=True))
    assert torch.equal(labels8, want.argmax(1, keepdim=True).to(torch.uint8))
    assert small.dtype == torch.float16 and torch.equal(small, want.half())


_RING_CASES = [  # (input shape, roi, overlap, sw_batch_size): several window rows along d
    ((2, 2, 30, 12, 9), (8, 16, 6), (0.5, 0.25, 0.4), 5),  # h padded: cropped
    ((1, 2, 23, 11, 17), (5, 4, 9), (0.8, 0.5, 0.0), 7),   # interval 1 along d
    ((2, 2, 19, 13, 15), (6, 6, 6), 0.25, 64),             # a batch crossing rows and images
]


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("shape,roi,overlap,sw", _RING_CASES)
def test_ring_accumulator_matches_monai_with_one_window_row_of_memory(monkeypatch, mode, shape, roi, overlap, sw):
    """Results of their own (labels, a smaller dtype, a crop) stitch into a ring of roi d planes,
    drained window row by window row: MONAI's values, a fraction of the accumulator."""
    import voxaug.inferers as inf

    shapes = []
    real = inf._accumulator
    monkeypatch.setattr(inf, "_accumulator", lambda shape_, *a: shapes.append(list(shape_)) or real(shape_, *a))
    x = torch.randn(*shape)
    net = _net(2, 3)
    kw = dict(overlap=overlap, mode=mode)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, roi, sw, net, **kw)
        labels = sliding_window_inference(x, roi, sw, net, argmax=True, **kw)
        labels8 = sliding_window_inference(x, roi, sw, net, argmax=True, output_dtype=torch.uint8, **kw)
        half = sliding_window_inference(x, roi, sw, net, output_dtype=torch.float16, **kw)
        plain = sliding_window_inference(x, roi, sw, net, **kw)
    assert torch.equal(labels, want.argmax(1, keepdim=True))
    assert torch.equal(labels8, want.argmax(1, keepdim=True).to(torch.uint8))
    assert half.dtype == torch.float16 and torch.equal(half, want.half())
    torch.testing.assert_close(plain, want, rtol=0, atol=_tol(mode))
    lay = inf._Layout(list(shape[2:]), list(roi), [overlap] * 3 if isinstance(overlap, float) else list(overlap))
    assert lay.count[0] > 1
    cropped = lay.padded != list(shape[2:])
    ring_shape = [shape[0], 3, roi[0], *lay.padded[1:]]
    assert shapes == [ring_shape] * 3 + [ring_shape if cropped else [shape[0], 3, *lay.padded]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the ring on CUDA not tested")
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_ring_accumulator_on_cuda_equals_the_cpu_and_monai(mode):
    """The ring on CUDA (device stitch and plane drains, no host sync in the loop): labels and
    float16 probabilities equal the CPU's bit for bit and MONAI's on the GPU."""
    x = torch.randn(2, 1, 41, 19, 23)

    def pred(t):  # pointwise: the same bits on either device
        return torch.cat([t, -t, t * t - 0.5], 1)

    kw = dict(overlap=(0.6, 0.25, 0.5), mode=mode)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x.cuda(), (9, 8, 10), 5, pred, **kw)
        for extra in (dict(argmax=True, output_dtype=torch.uint8), dict(output_dtype=torch.float16)):
            cpu = sliding_window_inference(x, (9, 8, 10), 5, pred, **kw, **extra)
            gpu = sliding_window_inference(x.cuda(), (9, 8, 10), 5, pred, **kw, **extra)
            assert gpu.is_cuda and torch.equal(gpu.cpu(), cpu)
            ref = want.argmax(1, keepdim=True).to(torch.uint8) if "argmax" in extra else want.half()
            assert torch.equal(gpu, ref)


def test_ring_accumulator_tuple_outputs_and_inferer():
    """Several outputs share the ring's row schedule; the inferer's cached maps serve it too."""
    x = torch.randn(2, 2, 26, 10, 11)
    net_a, net_b = _net(2, 3, seed=1), _net(2, 2, seed=2)

    def two(t):
        return net_a(t), {"b": net_b(t)}["b"]

    kw = dict(overlap=0.5, mode="gaussian")
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (7, 8, 8), 3, two, **kw)
        got = sliding_window_inference(x, (7, 8, 8), 3, two, argmax=True, **kw)
        inferer = SlidingWindowInferer((7, 8, 8), 3, output_dtype=torch.float16, **kw)
        inferer(x, two)  # the second call reads the cached maps
        half = inferer(x, two)
    for g, w, h in zip(got, want, half):
        assert torch.equal(g, w.argmax(1, keepdim=True))
        assert torch.equal(h, w.half())


def test_window_dtype_hands_half_windows_to_the_predictor():
    x = torch.randn(1, 2, 12, 12, 12)
    seen = []

    def pred(t):
        seen.append(t.dtype)
        return t.float() * 2

    with torch.no_grad():
        got = sliding_window_inference(x, (8, 8, 8), 2, pred, overlap=0.5, window_dtype=torch.float16)
        want = monai_inferers.sliding_window_inference(x.half().float(), (8, 8, 8), 2, lambda t: t * 2, overlap=0.5)
    assert set(seen) == {torch.float16}
    assert (got - want).abs().max() <= 1e-6


def test_roi_weight_map_matches_monai():
    x = torch.randn(1, 2, 13, 15, 11)
    w = torch.rand(6, 7, 8) + 0.1
    got, want = _compare(x, (6, 7, 8), 3, _net(), overlap=0.5, roi_weight_map=w)
    assert (got - want).abs().max() <= 1e-5


def test_inferer_class_and_cache():
    x = torch.randn(2, 2, 16, 15, 14)
    net = _net()
    inf = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode="gaussian")
    ref = monai_inferers.SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode="gaussian")
    with torch.no_grad():
        a = inf(x, net)
        b = inf(x * 2, net)  # second call: cached count and weight maps
        ra, rb = ref(x, net), ref(x * 2, net)
    assert (a - ra).abs().max() <= 1e-5 and (b - rb).abs().max() <= 1e-5
    assert len(inf._caches) == 1 and "count" in next(iter(inf._caches.values()))
    with torch.no_grad():
        c = inf(torch.randn(1, 2, 9, 10, 11), net)  # another size: another cache entry
    assert c.shape == (1, 3, 9, 10, 11) and len(inf._caches) == 2


def test_inferer_monai_arguments_in_monai_order():
    """MONAI's SlidingWindowInferer arguments by position (cache_roi_weight_map, cpu_thresh,
    buffer_steps, buffer_dim, with_coord), and its per-call device / buffer_steps / buffer_dim
    keywords: the same results as MONAI's inferer built and called the same way."""
    x = torch.randn(1, 2, 16, 15, 14)
    net = _net()
    args = ((8, 8, 8), 3, 0.5, "gaussian", 0.125, "constant", 0.0, None, None, False, True, 10, 2, 1, False)
    inf, ref = SlidingWindowInferer(*args), monai_inferers.SlidingWindowInferer(*args)
    assert (inf.cpu_thresh, inf.buffer_steps, inf.buffer_dim, inf.with_coord) == (10, 2, 1, False)
    with torch.no_grad():
        got, want = inf(x, net), ref(x, net)
        got2, want2 = inf(x, net, device="cpu", buffer_steps=None), ref(x, net, device="cpu", buffer_steps=None)
    assert got.device == want.device and (got - want).abs().max() <= 1e-5
    assert (got2 - want2).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="buffer_dim must be in"):
        inf(x, net, buffer_dim=5)
    with pytest.raises(ValueError, match="cpu_thresh must be an int"):
        SlidingWindowInferer((8, 8, 8), cpu_thresh=1.5)
    with pytest.raises(TypeError):
        SlidingWindowInferer((8, 8, 8), 1, 0.25, "constant", 0.125, "constant", 0.0, None, None, False, True, None,
                             None, -1, False, torch.ones(8, 8, 8))  # roi_weight_map is a keyword now


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_inferer_cpu_thresh_stitches_large_images_on_the_cpu():
    """cpu_thresh: a CUDA image of more voxels than the threshold is stitched (and returned) on
    the CPU, a smaller one on the GPU, as MONAI's inferer does; the values equal MONAI's."""
    net = _net().cuda()
    inf = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, cpu_thresh=16 * 15 * 14 - 1)
    ref = monai_inferers.SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, cpu_thresh=16 * 15 * 14 - 1)
    for shape, dev in (((1, 2, 16, 15, 14), "cpu"), ((1, 2, 8, 15, 14), "cuda")):
        x = torch.randn(shape, device="cuda")
        with torch.no_grad():
            got, want = inf(x, net), ref(x, net)
        assert got.device.type == dev == want.device.type
        assert (got - want).abs().max() <= 1e-5


def test_real_volume_ch2_small_convnet(ch2):
    vol, _ = ch2
    x = vol[None].float() / 255.0  # (1, 1, 181, 217, 181)
    net = _net(1, 2, seed=3)
    got, want = _compare(x, (64, 64, 64), 4, net, overlap=0.25, mode="gaussian")
    assert (got - want).abs().max() <= 1e-5


def test_bad_inputs():
    x = torch.randn(1, 1, 10, 10, 10)
    with pytest.raises(ValueError, match="roi_size must have one value per spatial axis"):
        sliding_window_inference(x, (4, 4), 1, _identity)
    with pytest.raises(ValueError, match="overlap must be >= 0 and < 1"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, overlap=1.0)
    with pytest.raises(ValueError, match="overlap must be >= 0 and < 1"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, overlap=(0.2, -0.1, 0.2))
    with pytest.raises(ValueError, match="sw_batch_size must be an int >= 1"):
        sliding_window_inference(x, (4, 4, 4), 0, _identity)
    with pytest.raises(ValueError, match="5-D"):
        sliding_window_inference(x[0], (4, 4, 4), 1, _identity)
    with pytest.raises(ValueError, match="mode must be one of"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, mode="hann")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, padding_mode="edge")
    with pytest.raises(ValueError, match="reflect padding"):
        sliding_window_inference(torch.randn(1, 1, 2, 10, 10), (8, 4, 4), 1, _identity, padding_mode="reflect")
    with pytest.raises(ValueError, match="buffer_dim must be in"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, buffer_steps=2, buffer_dim=4)
    with pytest.raises(ValueError, match="changed the window batch"):
        sliding_window_inference(x, (4, 4, 4), 2, lambda t: t[:1])
    with pytest.raises(ValueError, match="cannot place it either"):  # int(27 * 13 / 3.) - int(24 * 13 / 3.) = 12
        sliding_window_inference(torch.randn(1, 1, 27, 4, 4), (3, 4, 4), 9,
                                 lambda t: torch.nn.functional.interpolate(t, size=(13, 4, 4)), overlap=0.0)
    with pytest.raises(ValueError, match="after"):  # the scaled output's size changes between batches
        calls = iter(range(100))
        sliding_window_inference(x, (4, 4, 4), 1, lambda t: t[:, :, :2] if next(calls) == 0 else t[:, :, :1])


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("overlap", [0.25, 0.5, (0.5, 0.25, 0.8)])
def test_buffer_steps_match_monai_buffered_and_unbuffered(mode, overlap):
    """buffer_steps / buffer_dim are accepted and leave the result MONAI's unbuffered one (bit for
    bit on the CPU); MONAI's buffered order agrees within the issue's tolerances."""
    x = torch.randn(2, 2, 17, 15, 19)
    net = _net()
    for dim in (-1, 0, 1):
        with torch.no_grad():
            got = sliding_window_inference(x, (8, 7, 9), 3, net, overlap, mode, buffer_steps=2, buffer_dim=dim)
            plain = monai_inferers.sliding_window_inference(x, (8, 7, 9), 3, net, overlap, mode)
            buffered = monai_inferers.sliding_window_inference(x, (8, 7, 9), 3, net, overlap, mode,
                                                               buffer_steps=2, buffer_dim=dim)
        assert torch.equal(got, plain)
        assert (got - buffered).abs().max() <= _tol(mode)


def _zoom(scale):
    """A predictor whose output is the window resized by `scale` (trilinear up, average-pooled
    down), through a small conv net."""
    net = _net(cout=2)

    def run(t):
        y = net(t)
        if scale == 1:
            return y
        if scale < 1:
            return torch.nn.functional.avg_pool3d(y, int(round(1 / scale)))
        return torch.nn.functional.interpolate(y, scale_factor=scale, mode="trilinear")

    return run


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("scale", [0.5, 2])
@pytest.mark.parametrize("shape,roi,overlap", [((2, 2, 20, 18, 22), (8, 6, 10), 0.25),
                                               ((1, 2, 14, 9, 24), (8, 12, 8), (0.5, 0.0, 0.75)),
                                               ((1, 2, 6, 17, 16), (8, 6, 4), 0.5)])
def test_multi_resolution_outputs_match_monai(mode, scale, shape, roi, overlap):
    """Outputs at another resolution than the window (MONAI's zoom): scaled slices, the nearest-exact
    resized map, the count map, the crop of padded axes (roi larger than the image)."""
    x = torch.randn(*shape)
    got, want = _compare(x, roi, 3, _zoom(scale), overlap=overlap, mode=mode)
    assert (got - want).abs().max() <= _tol(mode)


def test_multi_resolution_tuple_dict_argmax_and_inferer():
    """Full-resolution and scaled outputs of one predictor (a deep-supervision head): each as MONAI
    computes it, including MONAI's chain of resized maps (the second scaled output resizes the first
    one's map), in tuples, dicts, with argmax and output_dtype, and through the inferer class."""
    x = torch.randn(2, 2, 19, 16, 21)
    full, half, quarter = _zoom(1), _zoom(0.5), _zoom(0.25)

    def heads(t):
        return full(t), half(t), quarter(t)

    roi = (8, 8, 12)
    for mode in ("constant", "gaussian"):
        with torch.no_grad():
            want = monai_inferers.sliding_window_inference(x, roi, 4, heads, 0.5, mode)
            got = sliding_window_inference(x, roi, 4, heads, 0.5, mode)
            assert len(got) == 3
            for g, w in zip(got, want):
                assert g.shape == w.shape and (g - w).abs().max() <= _tol(mode)
            named = sliding_window_inference(x, roi, 4, lambda t: {"b": half(t), "a": full(t)}, 0.5, mode)
            assert torch.equal(named["a"], got[0]) and torch.equal(named["b"], got[1])
            labels = sliding_window_inference(x, roi, 4, half, 0.5, mode, argmax=True)
            assert labels.dtype == torch.int64 and torch.equal(labels, got[1].argmax(1, keepdim=True))
            halfp = sliding_window_inference(x, roi, 4, half, 0.5, mode, output_dtype=torch.float16)
            assert halfp.dtype == torch.float16 and torch.equal(halfp, got[1].half())
            inf = SlidingWindowInferer(roi, 4, 0.5, mode)
            for _ in range(2):
                assert torch.equal(inf(x, half), got[1])


def test_ops_opcheck():
    x = torch.randn(2, 2, 9, 10, 11)
    roi, ov = [4, 5, 6], [0.5, 0.25, 0.5]
    torch.library.opcheck(torch.ops.voxaug.window_gather, (x, roi, ov, 1, 3, 2, 0.0, None))
    buf = torch.empty(3, 2, *roi)
    torch.library.opcheck(torch.ops.voxaug.window_gather_, (x, buf, roi, ov, 0, 0, 0.5))
    lay = torch.ops.voxaug.window_layout([9, 10, 11], roi, ov)
    acc = torch.zeros(2, 3, *lay[3:6])
    w = torch.ops.voxaug.window_importance_map(roi, "gaussian", [0.125], torch.float32, torch.device("cpu"))
    pred = torch.randn(3, 3, *roi)
    torch.library.opcheck(torch.ops.voxaug.window_stitch_, (acc, pred, w, [9, 10, 11], roi, ov, 2))
    torch.library.opcheck(torch.ops.voxaug.window_count, (acc, w, [9, 10, 11], roi, ov))
    count = torch.ops.voxaug.window_count(acc, w, [9, 10, 11], roi, ov)
    torch.library.opcheck(torch.ops.voxaug.window_finalize, (acc + 1, count, None, [9, 10, 11], roi, ov, None, False))
    torch.library.opcheck(torch.ops.voxaug.window_finalize, (acc + 1, None, w, [9, 10, 11], roi, ov, None, True))
    big = torch.zeros(1, 3, 9, 10, 11) + 1
    torch.library.opcheck(torch.ops.voxaug.window_finalize_, (big, None, w, [9, 10, 11], roi, ov))
    ring = torch.full((2, 3, roi[0], *lay[4:6]), float("nan"))
    torch.library.opcheck(torch.ops.voxaug.window_stitch_, (ring, pred, w, [9, 10, 11], roi, ov, 0, True, False,
                                                            None, True))
    out = torch.zeros(2, 3, 9, 10, 11)
    torch.library.opcheck(torch.ops.voxaug.window_finalize_planes_, (ring, None, w, [9, 10, 11], roi, ov, out, 0,
                                                                     2, False))
    labels = torch.zeros(2, 1, 9, 10, 11, dtype=torch.int32)
    torch.library.opcheck(torch.ops.voxaug.window_finalize_planes_, (ring, count, None, [9, 10, 11], roi, ov,
                                                                     labels, 0, 2, True))
    for d0, d1 in ((3, 1), (0, 10), (-1, 2), (0, 5)):  # inverted, past the padded d, negative, > the ring
        with pytest.raises(ValueError, match="d_begin|planes|d planes"):
            torch.ops.voxaug.window_finalize_planes_(ring, None, w, [9, 10, 11], roi, ov, out, d0, d1, False)
    with pytest.raises(ValueError, match="first_store"):
        torch.ops.voxaug.window_stitch_(ring, pred, w, [9, 10, 11], roi, ov, 0, False, False, None, True)


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("pred_dtype", [torch.float32, torch.float16])
def test_fused_stitch_equals_zero_fill_stitch_finalize(mode, pred_dtype):
    """window_stitch_'s first_store into an accumulator of NaNs and last_divide (with the count map,
    and computed on the fly) give the bits of zeros + plain stitch + window_finalize_; the sliding
    window takes that path whenever nothing is cropped."""
    size, roi, ov, sw = [13, 11, 17], [6, 5, 7], [0.5, 0.25, 0.8], 5
    lay = torch.ops.voxaug.window_layout(size, roi, ov)
    total = 2 * lay[0] * lay[1] * lay[2]
    g = torch.Generator().manual_seed(3)
    preds = torch.randn(total, 3, *roi, generator=g).to(pred_dtype)
    w = None if mode == "constant" else torch.ops.voxaug.window_importance_map(
        roi, mode, [0.125], torch.float32, torch.device("cpu"))
    plain = torch.zeros(2, 3, *size)
    for first in range(0, total, sw):
        torch.ops.voxaug.window_stitch_(plain, preds[first:first + sw], w, size, roi, ov, first)
    torch.ops.voxaug.window_finalize_(plain, None, w, size, roi, ov)
    count = torch.ops.voxaug.window_count(plain, w, size, roi, ov)
    for cnt in (count, None):
        fused = torch.full((2, 3, *size), float("nan"))
        for first in range(0, total, sw):
            torch.ops.voxaug.window_stitch_(fused, preds[first:first + sw], w, size, roi, ov, first, True, True, cnt)
        assert torch.equal(fused.view(torch.int32), plain.view(torch.int32))
    # The reference is MONAI's: the same bits through its Python loop.
    want = monai_inferers.sliding_window_inference(torch.randn(2, 3, *size), roi, sw, _Replay(preds), overlap=ov,
                                                   mode=mode)
    assert want.dtype == torch.float32 and torch.equal(want, plain)
    # first_store alone leaves the sum for window_finalize_.
    summed = torch.full((2, 3, *size), float("nan"))
    for first in range(0, total, sw):
        torch.ops.voxaug.window_stitch_(summed, preds[first:first + sw], w, size, roi, ov, first, True)
    torch.ops.voxaug.window_finalize_(summed, None, w, size, roi, ov)
    assert torch.equal(summed.view(torch.int32), plain.view(torch.int32))
    # count without last_divide, and last_divide with a cropped layout, are refused.
    with pytest.raises(ValueError, match="count is read only with last_divide"):
        torch.ops.voxaug.window_stitch_(fused, preds[:sw], w, size, roi, ov, 0, True, False, count)
    small = [4, 11, 17]
    lay_s = torch.ops.voxaug.window_layout(small, roi, ov)
    acc_s = torch.zeros(2, 3, *lay_s[3:6])
    with pytest.raises(ValueError, match="last_divide leaves the result in acc"):
        torch.ops.voxaug.window_stitch_(acc_s, preds[:sw], w, small, roi, ov, 0, True, True)
    torch.library.opcheck(torch.ops.voxaug.window_stitch_, (fused, preds[:sw], w, size, roi, ov, 0, True, True, count))


class _Replay:
    """A predictor that returns the next stored window outputs (MONAI's loop sees the same values)."""

    def __init__(self, outs):
        self.outs, self.i = outs, 0

    def __call__(self, x):
        out = self.outs[self.i:self.i + x.shape[0]].clone()
        self.i += x.shape[0]
        return out


def test_importance_map_matches_monai():
    from monai.data.utils import compute_importance_map

    for roi, sigma in [((96, 96, 96), 0.125), ((7, 12, 5), (0.1, 0.2, 0.3)), ((1, 4, 9), 0.5)]:
        want = compute_importance_map(roi, mode="gaussian", sigma_scale=sigma, device="cpu")
        got = torch.ops.voxaug.window_importance_map(list(roi), "gaussian",
                                                     [sigma] * 3 if isinstance(sigma, float) else list(sigma),
                                                     torch.float32, torch.device("cpu"))
        assert torch.equal(got, want)


def test_window_accumulator_is_zeroed_and_owned():
    for shape in ([1, 2, 3, 4, 5], [1, 1, 100, 110, 120]):  # below and above the huge-page size
        a = torch.ops.voxaug.window_accumulator(shape, torch.float32, torch.device("cpu"), True)
        assert list(a.shape) == shape and a.dtype == torch.float32 and a.is_contiguous()
        assert torch.count_nonzero(a) == 0
        a += 2.0
        b = a.clone()
        del a
        assert torch.all(b == 2.0)
    e = torch.ops.voxaug.window_accumulator([2, 1, 128, 128, 128], torch.float16, torch.device("cpu"), False)
    assert e.dtype == torch.float16 and e.shape == (2, 1, 128, 128, 128)


def test_meta_tensor_input_keeps_metadata():
    from monai.data import MetaTensor

    affine = torch.diag(torch.tensor([2.0, 1.5, 3.0, 1.0], dtype=torch.float64))
    x = MetaTensor(torch.randn(1, 1, 20, 18, 22), affine=affine)
    net = _net(1, 2)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (8, 8, 8), 2, net, overlap=0.5, mode="gaussian")
        got = sliding_window_inference(x, (8, 8, 8), 2, net, overlap=0.5, mode="gaussian")
    assert type(got) is type(want)
    assert torch.equal(got.affine, want.affine)
    assert (got.as_tensor() - want.as_tensor()).abs().max() <= 1e-5


def test_cuda_graph_needs_cuda_inputs():
    inf = SlidingWindowInferer((8, 8, 8), 2, cuda_graph=True)
    with pytest.raises(ValueError, match="cuda_graph=True needs CUDA inputs"):
        inf(torch.randn(1, 2, 12, 12, 12), _net())
    with pytest.raises(ValueError, match="cuda_graph=True does not take condition="):
        inf(torch.randn(1, 2, 12, 12, 12), _net(), condition=torch.randn(1, 1, 12, 12, 12))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUDA-graph capture not tested")
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_cuda_graph_replays_equal_the_eager_pass_and_monai(mode):
    net = _net().cuda()
    graphed = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode=mode, cuda_graph=True)
    eager = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode=mode)
    ref = monai_inferers.SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, mode=mode)
    with torch.no_grad():
        for seed in range(3):  # capture on the first call, replays after
            x = torch.randn(2, 2, 16, 15, 14, generator=torch.Generator().manual_seed(seed)).cuda()
            got, want = graphed(x, net), eager(x, net)
            assert torch.equal(got, want), seed
            assert (got - ref(x, net)).abs().max() <= _tol(mode)
        assert len(graphed._graphs) == 1
        y = graphed(torch.randn(1, 2, 9, 10, 11).cuda(), net)  # another shape: another graph
    assert y.shape == (1, 3, 9, 10, 11) and len(graphed._graphs) == 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="fewer than 2 CUDA devices: cross-device capture not tested")
def test_cuda_graph_on_a_device_that_is_not_current():
    # Inputs on cuda:1 while cuda:0 is current: the capture must record cuda:1's work (a graph
    # captured on cuda:0's stream would be empty and replay the capture run's output).
    net = _net().to("cuda:1")
    graphed = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5, cuda_graph=True)
    eager = SlidingWindowInferer((8, 8, 8), 3, overlap=0.5)
    torch.cuda.set_device(0)
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(1, 2, 16, 15, 14, generator=torch.Generator().manual_seed(seed)).to("cuda:1")
            got = graphed(x, net)
            assert got.device == x.device and torch.equal(got, eager(x, net)), seed


def test_single_output_tuple_is_unpacked_like_monai():
    # MONAI's _pack_struct returns the tensor itself for a one-element tuple or list.
    x = torch.randn(1, 2, 12, 10, 11)
    net = _net()
    for pred in (lambda t: (net(t),), lambda t: [net(t)]):
        with torch.no_grad():
            want = monai_inferers.sliding_window_inference(x, (6, 6, 6), 2, pred, overlap=0.5)
            got = sliding_window_inference(x, (6, 6, 6), 2, pred, overlap=0.5)
        assert type(got) is type(want) is torch.Tensor
        assert (got - want).abs().max() <= 1e-6


# ---- output and window devices (device=, sw_device=) ----

def _devices_case(x, net, **kw):
    """MONAI and voxaug with the same devices: results on the same device, equal to rounding."""
    seen_v, seen_m = set(), set()

    def rec(store):
        def p(t):
            store.add(t.device)
            return net(t)
        return p

    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (8, 7, 9), 3, rec(seen_m), **kw)
        got = sliding_window_inference(x, (8, 7, 9), 3, rec(seen_v), **kw)
    assert seen_v == seen_m  # windows reach the predictor on sw_device
    assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
    assert torch.isfinite(got).all() and got.abs().max() > 0
    return got.cpu(), want.cpu()


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_explicit_cpu_devices_match_monai(mode):
    # The CPU-only share of the device arguments: strings and torch.device objects, the inferer's
    # cache keyed by them; the cross-device copies themselves need a GPU (test below).
    x = torch.randn(2, 2, 15, 12, 16)
    net = _net()
    for sw_device, device in (("cpu", None), (None, "cpu"), (torch.device("cpu"), torch.device("cpu"))):
        got, want = _devices_case(x, net, overlap=0.5, mode=mode, sw_device=sw_device, device=device)
        assert got.device.type == "cpu"
        assert (got - want).abs().max() <= _tol(mode)
    inf = SlidingWindowInferer((8, 7, 9), 3, overlap=0.5, mode=mode, sw_device="cpu", device="cpu")
    ref = monai_inferers.SlidingWindowInferer((8, 7, 9), 3, overlap=0.5, mode=mode, sw_device="cpu", device="cpu")
    with torch.no_grad():
        assert (inf(x, net) - ref(x, net)).abs().max() <= _tol(mode)


_CUDA_DEVICE_CASES = [
    # (inputs' device, sw_device, device): GPU volume with the result on the host; host volume
    # with windows on the GPU (MONAI's usual large-volume set-up), result on the host or the GPU.
    ("cuda", None, "cpu"),
    ("cuda", "cuda", "cpu"),
    ("cpu", "cuda", None),
    ("cpu", "cuda", "cuda"),
    ("cuda", "cpu", "cuda"),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: cross-device windows/output not tested")
@pytest.mark.parametrize("in_dev,sw_device,device", _CUDA_DEVICE_CASES)
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_cross_device_windows_and_output_match_monai(in_dev, sw_device, device, mode):
    x = torch.randn(2, 2, 15, 12, 16).to(in_dev)
    net = _net().to(sw_device or in_dev)
    got, want = _devices_case(x, net, overlap=0.5, mode=mode, sw_device=sw_device, device=device)
    assert (got - want).abs().max() <= _tol(mode)
    # Tuple outputs and padding (roi larger than the image) across devices.
    small = x[:, :, :6]

    def two(t):
        y = net(t)
        return y, torch.sigmoid(y[:, :1])

    with torch.no_grad():
        want2 = monai_inferers.sliding_window_inference(small, (8, 7, 9), 2, two, overlap=0.25, mode=mode,
                                                        sw_device=sw_device, device=device, padding_mode="reflect")
        got2 = sliding_window_inference(small, (8, 7, 9), 2, two, overlap=0.25, mode=mode,
                                        sw_device=sw_device, device=device, padding_mode="reflect")
    for g, w in zip(got2, want2):
        assert g.device == w.device and g.shape == w.shape
        assert (g.cpu() - w.cpu()).abs().max() <= _tol(mode)
    inf = SlidingWindowInferer((8, 7, 9), 3, overlap=0.5, mode=mode, sw_device=sw_device, device=device)
    ref = monai_inferers.SlidingWindowInferer((8, 7, 9), 3, overlap=0.5, mode=mode, sw_device=sw_device,
                                              device=device)
    with torch.no_grad():
        a, r = inf(x, net), ref(x, net)
        b = inf(x * 2, net)  # cached maps on the output device
        rb = ref(x * 2, net)
    assert a.device == r.device and b.device == rb.device
    assert (a.cpu() - r.cpu()).abs().max() <= _tol(mode) and (b.cpu() - rb.cpu()).abs().max() <= _tol(mode)


# ---- process_fn (MONAI's per-batch hook on the outputs and the importance map) ----

def _scaling_process_fn(shape=None):
    """A process_fn whose weights change from batch to batch: MONAI multiplies each batch by its
    own returned map and divides by the count map of the first batch's; a fresh one per run."""
    calls = []

    def fn(outs, windows, importance_map):
        calls.append((tuple(o.shape for o in outs), tuple(windows.shape), tuple(importance_map.shape),
                      windows.device, importance_map.dtype))
        w = importance_map * (1.0 + 0.25 * len(calls)) + 0.01 * windows.mean()
        if shape is not None:
            w = w.reshape(shape)
        return [torch.sigmoid(o) * 2.0 - 0.5 for o in outs], w

    fn.calls = calls
    return fn


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("weight_shape", [None, (1, 1, 6, 5, 7)])
def test_process_fn_matches_monai(mode, weight_shape):
    x = torch.randn(2, 2, 13, 11, 14)
    net = _net()
    pm, pv = _scaling_process_fn(weight_shape), _scaling_process_fn(weight_shape)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (6, 5, 7), 3, net, overlap=0.5, mode=mode, process_fn=pm)
        got = sliding_window_inference(x, (6, 5, 7), 3, net, overlap=0.5, mode=mode, process_fn=pv)
    assert pv.calls == pm.calls  # same batches, windows and importance map handed over
    assert got.shape == want.shape and torch.isfinite(got).all() and got.abs().max() > 0
    assert (got - want).abs().max() <= _tol(mode)


@pytest.mark.parametrize("padding_mode", ["constant", "reflect"])
def test_process_fn_with_padding_roi_weight_map_and_tuple_outputs(padding_mode):
    # roi larger than the image (cropped output), a user weight map handed to process_fn, and a
    # two-output predictor whose outputs process_fn transforms separately.
    x = torch.randn(2, 2, 5, 13, 9)
    net = _net()
    wmap = torch.rand(8, 6, 10) + 0.1
    cval = 0.5 if padding_mode == "constant" else 0.0  # torch's F.pad (in MONAI) rejects a value for reflect

    def two(t):
        y = net(t)
        return y, y[:, :1] * 3.0

    def pf(outs, windows, importance_map):
        assert isinstance(outs, tuple) and len(outs) == 2
        return (outs[0].softmax(1), outs[1].tanh()), importance_map.sqrt()

    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (8, 6, 10), 4, two, overlap=0.25, mode="gaussian",
                                                        padding_mode=padding_mode, cval=cval, roi_weight_map=wmap,
                                                        process_fn=pf)
        got = sliding_window_inference(x, (8, 6, 10), 4, two, overlap=0.25, mode="gaussian",
                                       padding_mode=padding_mode, cval=cval, roi_weight_map=wmap, process_fn=pf)
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        assert g.shape == w.shape == (2, g.shape[1], 5, 13, 9)
        assert torch.isfinite(g).all() and g.abs().max() > 0
        assert (g - w).abs().max() <= 1e-5


def test_process_fn_float64_and_dict_outputs():
    x = torch.randn(1, 2, 12, 14, 10, dtype=torch.float64)
    net = _net().double()

    def named(t):
        y = net(t)
        return {"seg": y, "aux": y[:, 1:] ** 2}

    def pf(outs, windows, importance_map):
        assert importance_map.dtype == torch.float64
        return [o * 0.5 for o in outs], importance_map ** 2

    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (6, 7, 5), 3, named, overlap=0.5, mode="gaussian",
                                                        process_fn=pf)
        got = sliding_window_inference(x, (6, 7, 5), 3, named, overlap=0.5, mode="gaussian", process_fn=pf)
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == torch.float64 and (got[k] - want[k]).abs().max() <= 1e-12


def test_process_fn_bad_arguments():
    x = torch.randn(1, 1, 10, 10, 10)
    with pytest.raises(ValueError, match="process_fn must be callable"):
        sliding_window_inference(x, (4, 4, 4), 1, _identity, process_fn=3)
    with pytest.raises(ValueError, match=r"process_fn must return \(outputs, weight\)"):
        sliding_window_inference(x, (4, 4, 4), 2, _identity, process_fn=lambda o, w, m: o)
    with pytest.raises(ValueError, match="process_fn must return a roi-sized weight map"):
        sliding_window_inference(x, (4, 4, 4), 2, _identity, process_fn=lambda o, w, m: (o, m[:2]))
    with pytest.raises(ValueError, match="process_fn must return a roi-sized weight map"):
        sliding_window_inference(x, (4, 4, 4), 2, _identity,
                                 process_fn=lambda o, w, m: (o, m.expand(2, 1, 4, 4, 4)))
    with pytest.raises(ValueError, match="changed the window batch"):
        sliding_window_inference(x, (4, 4, 4), 2, _identity, process_fn=lambda o, w, m: ([o[0][:1]], m))


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_process_fn_with_scaled_outputs_matches_monai(mode):
    """process_fn returning outputs at another resolution: MONAI resizes process_fn's map to them."""
    x = torch.randn(2, 2, 13, 16, 11)
    net = _net()

    def fn(outs, windows, imap):
        # (MONAI fails on an output at the roi's size after a scaled one: its map was resized)
        return [outs[0], torch.nn.functional.avg_pool3d(outs[0], 2)], imap * 0.5 + 0.25

    with torch.no_grad():
        got, want = (f(x, (6, 8, 6), 3, net, 0.5, mode, process_fn=fn) for f in (
            sliding_window_inference, monai_inferers.sliding_window_inference))
    for g, w in zip(got, want):
        assert g.shape == w.shape and (g - w).abs().max() <= _tol(mode)


@pytest.mark.parametrize("padding_mode", ["reflect", "replicate", "circular"])
def test_cval_with_a_padding_mode_that_takes_none_fails_as_monai(padding_mode):
    """MONAI pads an image smaller than the roi with F.pad(mode, value=cval), which refuses a
    non-zero value for these modes; voxaug refuses it too (a ValueError naming cval) instead of
    ignoring it. An image that needs no padding takes any cval in both."""
    small = torch.rand(1, 1, 7, 15, 8)
    with pytest.raises(Exception, match="value"):
        monai_inferers.sliding_window_inference(small, (10, 6, 12), 2, _identity, padding_mode=padding_mode,
                                                cval=0.75)
    with pytest.raises(ValueError, match="cval"):
        sliding_window_inference(small, (10, 6, 12), 2, _identity, padding_mode=padding_mode, cval=0.75)
    big = torch.rand(1, 1, 12, 15, 13)
    want = monai_inferers.sliding_window_inference(big, (10, 6, 12), 2, _identity, padding_mode=padding_mode,
                                                   cval=0.75)
    got = sliding_window_inference(big, (10, 6, 12), 2, _identity, padding_mode=padding_mode, cval=0.75)
    assert torch.equal(got, torch.as_tensor(want))


class _Conditioned(torch.nn.Module):
    """A conditional predictor: the window and its condition concatenated along channels."""

    def __init__(self, cin, ccond):
        super().__init__()
        torch.manual_seed(3)
        self.conv = torch.nn.Conv3d(cin + ccond, 2, 3, padding=1)

    def forward(self, x, condition=None):
        return self.conv(torch.cat([x, condition.to(x.dtype)], 1))


@pytest.mark.parametrize("mode", ["constant", "gaussian"])
@pytest.mark.parametrize("padding_mode", ["constant", "replicate"])
@pytest.mark.parametrize("sw", [1, 3])
def test_condition_is_windowed_as_monai(mode, padding_mode, sw):
    """MONAI's condition= keyword: cut into the inputs' windows (padded alike when the roi is larger
    than the image) and passed to the predictor; float conditions through the gather, integer ones
    by slicing."""
    x = torch.randn(2, 1, 12, 7, 15)
    net = _Conditioned(1, 2)
    for cond in (torch.randn(2, 2, 12, 7, 15), torch.randint(0, 4, (2, 2, 12, 7, 15), dtype=torch.uint8)):
        with torch.no_grad():
            want = monai_inferers.sliding_window_inference(x, (6, 9, 8), sw, net, 0.5, mode, padding_mode=padding_mode,
                                                           condition=cond)
            got = sliding_window_inference(x, (6, 9, 8), sw, net, 0.5, mode, padding_mode=padding_mode, condition=cond)
            inf = SlidingWindowInferer((6, 9, 8), sw, 0.5, mode, padding_mode=padding_mode)(x, net, condition=cond)
        assert got.shape == want.shape and (got - want).abs().max() <= _tol(mode)
        assert torch.equal(inf, got)
    with pytest.raises(ValueError, match="condition must be a 5-D tensor of the inputs' batch and spatial size"):
        sliding_window_inference(x, (6, 9, 8), sw, net, condition=torch.randn(2, 2, 12, 7, 14))
    with pytest.raises(ValueError, match="condition must be a 5-D tensor"):
        sliding_window_inference(x, (6, 9, 8), sw, net, condition=torch.randn(1, 2, 12, 7, 15))


def test_inferer_adapt_matches_monai_on_the_cpu():
    """SlidingWindowInfererAdapt on the CPU (nothing to adapt) and with a device given: MONAI's
    SlidingWindowInfererAdapt's results."""
    from voxaug.inferers import SlidingWindowInfererAdapt

    x = torch.randn(1, 2, 21, 17, 19)
    net = _net(2, 3)
    for kw in (dict(), dict(device="cpu"), dict(cpu_thresh=100)):
        with torch.no_grad():
            want = monai_inferers.SlidingWindowInfererAdapt((8, 8, 8), 3, overlap=0.5, mode="gaussian", **kw)(x, net)
            got = SlidingWindowInfererAdapt((8, 8, 8), 3, overlap=0.5, mode="gaussian", **kw)(x, net)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: SlidingWindowInfererAdapt on cuda not tested")
def test_inferer_adapt_falls_back_to_cpu_stitching_after_a_cuda_oom(monkeypatch):
    """An out-of-memory error while stitching on the GPU: the call is repeated with the output
    stitched on the CPU (MONAI's result), cpu_thresh drops below the image's voxel count, and the
    next image of that size goes to the CPU at once; other errors propagate."""
    import voxaug.inferers as inf

    x = torch.randn(1, 2, 21, 17, 19)
    net = _net(2, 3)
    devices = []
    real = inf.SlidingWindowInferer._run

    def run(self, inputs, network, *args, **kwargs):
        devices.append(str(kwargs.get("device")))
        if str(kwargs.get("device")).startswith("cuda"):
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return real(self, inputs, network, *args, **kwargs)

    monkeypatch.setattr(inf.SlidingWindowInferer, "_run", run)
    t = inf.SlidingWindowInfererAdapt((8, 8, 8), 3, overlap=0.5)
    with torch.no_grad():
        want = monai_inferers.sliding_window_inference(x, (8, 8, 8), 3, net, overlap=0.5)
        got = t(x.cuda(), net.cuda())
        assert devices == ["cuda:0", "cpu"] and got.device.type == "cpu"
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # the GPU's convolution
        assert t.cpu_thresh == 21 * 17 * 19 - 1
        t(x.cuda(), net.cuda())
        assert devices[2:] == ["cpu"]
    monkeypatch.setattr(inf.SlidingWindowInferer, "_run",
                        lambda self, *a, **k: (_ for _ in ()).throw(RuntimeError("not a memory error")))
    with pytest.raises(RuntimeError, match="not a memory error"):
        inf.SlidingWindowInfererAdapt((8, 8, 8), 3)(x.cuda(), net.cuda())


def _net2d(cin=2, cout=3, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(cin, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, cout, 1)).eval()


@pytest.mark.parametrize("spatial_dim", [0, 1, 2])
@pytest.mark.parametrize("mode", ["constant", "gaussian"])
def test_slice_inferer_matches_monai(spatial_dim, mode):
    """SliceInferer: a 2-D network over the slices along each axis, MONAI's results (and labels
    from the ring); tuple and dict outputs; the condition sliced alongside."""
    from voxaug.inferers import SliceInferer

    x = torch.randn(2, 2, 13, 11, 9)
    net = _net2d()
    kw = dict(roi_size=(7, 6), sw_batch_size=4, overlap=0.5, mode=mode)
    with torch.no_grad():
        want = monai_inferers.SliceInferer(spatial_dim=spatial_dim, **kw)(x, net)
        got = SliceInferer(spatial_dim, **kw)(x, net)
        torch.testing.assert_close(got, want, rtol=0, atol=_tol(mode))
        labels = SliceInferer(spatial_dim, **kw, argmax=True)(x, net)
        assert torch.equal(labels, want.argmax(1, keepdim=True))
        both = lambda t: (net(t), net(t) * 2)  # noqa: E731
        want_t = monai_inferers.SliceInferer(spatial_dim=spatial_dim, **kw)(x, both)
        got_t = SliceInferer(spatial_dim, **kw)(x, both)
        for g, w in zip(got_t, want_t):
            torch.testing.assert_close(g, w, rtol=0, atol=_tol(mode))
        as_dict = lambda t: {"seg": net(t)}  # noqa: E731
        got_d = SliceInferer(spatial_dim, **kw)(x, as_dict)
        torch.testing.assert_close(got_d["seg"], want, rtol=0, atol=_tol(mode))
        cond = torch.randn_like(x)
        conditioned = lambda t, c: net(t + c)  # noqa: E731
        want_c = monai_inferers.SliceInferer(spatial_dim=spatial_dim, **kw)(x, conditioned, condition=cond)
        got_c = SliceInferer(spatial_dim, **kw)(x, conditioned, condition=cond)
        torch.testing.assert_close(got_c, want_c, rtol=0, atol=_tol(mode))


def test_slice_inferer_bad_arguments():
    from voxaug.inferers import SliceInferer

    x = torch.randn(1, 2, 8, 8, 8)
    with pytest.raises(ValueError, match="spatial_dim"):
        SliceInferer(3, roi_size=(4, 4))(x, _net2d())
    with pytest.raises(RuntimeError, match="2D `roi_size`"):
        SliceInferer(0, roi_size=(4, 4, 4))(x, _net2d())
    with pytest.raises(ValueError, match="condition"):
        SliceInferer(0, roi_size=(4, 4))(x, lambda t, c: t, condition=torch.randn(1, 2, 8, 8, 7))
