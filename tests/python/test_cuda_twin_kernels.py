"""CUDA kernels vs their CPU twins, bit for bit, where the CUDA path has a structure of its own
(launchers, per-row tables, shared-memory histograms, warp reductions, atomics) and no test
compared the two exactly yet:

- class / weighted crop centres beyond 65535 samples (the grid's y dimension);
- resample: nearest / linear / the B-splines of orders 2..5 (the device prefilter kernels: every
  pole and boundary rule), every padding (scipy's 'constant' cutoff too), both
  align_corners, float32 / float64 / float16 images, integer labels, signed-permutation (exact)
  maps and maps whose nearest coordinates land on ties. kernels/resample/resample_cpu.h states
  that its host loops are bit-identical to the device's per-voxel functor;
- resample_deformed / deform_field_dense with a B-spline control grid (the device contracts the
  d / h taps into a per-row table first, bspline_rows_cuda; the host evaluates all 64 taps) and
  with a dense field;
- the crop-centre samplers: class counts (per-thread registers for <= 4 classes, a shared-memory
  histogram with atomics above), class / pos-neg centres, weighted centres and their stats (the
  chunk sums in the lane / butterfly order that the host emulates, with and without
  shift_negative), in C and Fortran memory order.

Skipped without a device: the CPU twin is what CI proves; a GPU machine proves twin == CUDA."""
import math

import pytest
import torch

from voxaug import ops

from test_resample import random_matrices as _matrices  # rotation + scale + shift per sample

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device: CUDA-vs-CPU twin comparison skipped")


def _both(fn):
    """fn(device) on the CPU and on CUDA; the CUDA results brought back to the host."""
    cpu = fn("cpu")
    gpu = fn("cuda")
    move = lambda r: [t.cpu() for t in r] if isinstance(r, (list, tuple)) else r.cpu()  # noqa: E731
    return cpu, move(gpu)


def _assert_equal(cpu, gpu, what):
    cpu = cpu if isinstance(cpu, (list, tuple)) else [cpu]
    gpu = gpu if isinstance(gpu, (list, tuple)) else [gpu]
    assert len(cpu) == len(gpu)
    for k, (c, g) in enumerate(zip(cpu, gpu)):
        assert c.dtype == g.dtype and c.shape == g.shape, (what, k)
        assert torch.equal(c, g), f"{what} [{k}]: max |cpu - cuda| = {(c.double() - g.double()).abs().max()}"
        if c.is_floating_point():
            assert not torch.isnan(c).any(), (what, k)


IN_SIZE, OUT_SIZE = (9, 7, 11), (8, 10, 6)


def _map_cases():
    """(name, (2, 3, 4) matrices): generic maps reaching outside the volume, a signed permutation
    with an integer shift (the exact copy path), a half-voxel scale (nearest on ties), a map far
    outside (the coordinate bound)."""
    perm = torch.zeros(2, 3, 4, dtype=torch.float64)
    perm[0, 0, 2], perm[0, 1, 1], perm[0, 2, 0] = 1.0, -1.0, 1.0
    perm[0, :, 3] = torch.tensor([-1.0, 8.0, 2.0])
    perm[1, 0, 0], perm[1, 1, 2], perm[1, 2, 1] = -1.0, 1.0, 1.0
    perm[1, :, 3] = torch.tensor([7.0, 0.0, -2.0])
    half = torch.zeros(2, 3, 4, dtype=torch.float64)
    for a in range(3):
        half[:, a, a] = 0.5
    half[1, :, 3] = torch.tensor([0.5, -0.5, 1.5])
    far = _matrices(2, IN_SIZE, OUT_SIZE, seed=5)
    far[1, :, 3] += 3e9
    return [("generic", _matrices(2, IN_SIZE, OUT_SIZE, seed=3, strength=1.5)), ("permutation", perm),
            ("half", half), ("far", far)]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection", "constant", "cutoff"])
def test_resample_cuda_equals_cpu_bitwise(padding, align_corners):
    g = torch.Generator().manual_seed(11)
    x32 = torch.randn(2, 2, *IN_SIZE, generator=g) * 50
    x64 = torch.randn(2, 1, *IN_SIZE, generator=g, dtype=torch.float64)
    x16 = (torch.randn(2, 3, *IN_SIZE, generator=g) * 10).half()
    lab8 = torch.randint(0, 6, (2, 1, *IN_SIZE), generator=g, dtype=torch.uint8)
    lab64 = torch.randint(-3, 1000, (2, 2, *IN_SIZE), generator=g)
    # A channel-strided view too (the host row paths special-case dense inputs).
    xs = torch.randn(2, 4, *IN_SIZE, generator=g)[:, 1::2]
    for name, m in _map_cases():
        for modes, inputs in ((["linear", "nearest", "linear", "nearest"], [x32, lab8, x16, lab64]),
                              (["cubic", "linear", "cubic"], [x32, x64, xs]),
                              (["cubic", "nearest"], [x64, x16]),
                              (["quadratic", "quartic", "quintic", "quintic"], [x32, x64, xs, x64])):
            cpu, gpu = _both(lambda dev: ops.resample([t.to(dev) for t in inputs], m.to(dev), OUT_SIZE, modes,
                                                      [padding] * len(inputs), [3.0] * len(inputs),
                                                      align_corners=align_corners))
            _assert_equal(cpu, gpu, f"resample {name} {modes} {padding} align_corners={align_corners}")
            assert cpu[0].abs().sum() > 0


def test_resample_patches_cuda_equals_cpu_bitwise():
    """The group launch (K patches per volume, output sample n reads volume n // K)."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(2, 2, 17, 15, 19, generator=g)
    lab = torch.randint(0, 4, (2, 1, 17, 15, 19), generator=g, dtype=torch.int16)
    starts = torch.tensor([[[0, 0, 0], [5, 3, 9], [-2, 10, 14]], [[8, 8, 8], [1, -1, 2], [12, 0, 3]]])
    m = _matrices(6, (6, 7, 5), (6, 7, 5), seed=4, strength=0.6)
    cpu, gpu = _both(lambda dev: ops.resample_patches([x.to(dev), lab.to(dev)], m.to(dev), starts.to(dev),
                                                      (6, 7, 5), ["linear", "nearest"], ["zeros", "border"]))
    _assert_equal(cpu, gpu, "resample_patches")


def test_cubic_float64_tiny_axis_cuda_equals_cpu():
    """float64 coefficients of a volume with an axis of <= 4 voxels: bspline_filter_line's
    short-line initialisation (line length <= 28) takes z^(n-1) as a repeated product in double
    (pow's last bit differs between libm and CUDA's libdevice), so the twins agree bit for bit."""
    g = torch.Generator().manual_seed(13)
    x = torch.randn(1, 1, 3, 9, 4, generator=g, dtype=torch.float64)
    m = _matrices(1, (3, 9, 4), (5, 6, 7), seed=6, strength=0.5)
    cpu, gpu = _both(lambda dev: ops.resample([x.to(dev)], m.to(dev), (5, 6, 7), ["cubic"], ["reflection"]))
    _assert_equal(cpu, gpu, "float64 cubic, tiny axis")


def _bspline_field(seed, n=2):
    g = torch.Generator().manual_seed(seed)
    coeff = torch.rand(n, 3, 6, 7, 5, generator=g) * 4 - 2
    fmap = torch.tensor([[5 / 12, 6 / 16, 3 / 11, 1, 1, 1], [0.3, 0.3, 0.2, 1.2, 1.1, 1.4]],
                        dtype=torch.float64)[:n]
    return coeff, fmap


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_deform_field_dense_cuda_equals_cpu_bitwise(dtype):
    coeff, fmap = _bspline_field(21)
    coeff = coeff.to(dtype)
    for kw in (dict(field_map=fmap), dict(field_scale=(0.41, 0.37, 0.3), field_offset=(1.0, 1.5, 1.2))):
        cpu, gpu = _both(lambda dev: ops.deform_field_dense(
            coeff.to(dev), ops.BSPLINE_FIELD, (13, 17, 12),
            **{k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}))
        _assert_equal(cpu, gpu, f"deform_field_dense {dtype} {list(kw)}")
        assert cpu.abs().max() > 0.5


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_resample_deformed_cuda_equals_cpu_bitwise(padding):
    g = torch.Generator().manual_seed(22)
    x = torch.randn(2, 2, 14, 16, 15, generator=g)
    x64 = torch.randn(2, 1, 14, 16, 15, generator=g, dtype=torch.float64)
    lab = torch.randint(0, 5, (2, 1, 14, 16, 15), generator=g, dtype=torch.uint8)
    coeff, fmap = _bspline_field(23)
    m = torch.eye(3, 4, dtype=torch.float64).repeat(2, 1, 1)
    m[:, :, 3] = torch.tensor([0.7, -0.4, 1.2], dtype=torch.float64)
    m[1, 0, 1] = 0.15
    out = (13, 17, 12)
    dense = ops.deform_field_dense(coeff, ops.BSPLINE_FIELD, out, field_map=fmap)
    for kind, field, fm in ((ops.BSPLINE_FIELD, coeff, fmap), (ops.BSPLINE_FIELD, coeff.double(), fmap),
                            (ops.DENSE_FIELD, dense, None)):
        cpu, gpu = _both(lambda dev: ops.resample_deformed(
            [x.to(dev), lab.to(dev), x64.to(dev)], m.to(dev), field.to(dev), kind, out,
            ["linear", "nearest", "cubic"], [padding] * 3, field_map=None if fm is None else fm.to(dev)))
        _assert_equal(cpu, gpu, f"resample_deformed kind {kind} {field.dtype} {padding}")


@pytest.mark.parametrize("padding", ["border", "reflection", "zeros"])
def test_cubic_at_nan_field_cuda_matches_cpu(padding):
    """NaN displacements (all components at one voxel, one component at another) under cubic
    interpolation: NaN there with Border / Reflection, the fill with Zeros, the same bits
    elsewhere on both devices. Under compute-sanitizer this also shows the taps stay inside the
    coefficients (a NaN tap index used to read before them; ResampleCpu.CubicAtNanCoordinates...
    checks the host side with guard pages)."""
    g = torch.Generator().manual_seed(24)
    x = torch.randn(2, 2, 8, 9, 10, generator=g)
    u = torch.randn(2, 3, 6, 7, 5, generator=g) * 0.4
    u[0, :, 2, 3, 1] = float("nan")
    u[1, 1, 4, 0, 3] = float("nan")
    m = torch.eye(3, 4, dtype=torch.float64).repeat(2, 1, 1)
    m[:, :, 3] = torch.tensor([0.25, -0.5, 0.75], dtype=torch.float64)
    cpu, gpu = _both(lambda dev: ops.resample_deformed([x.to(dev)], m.to(dev), u.to(dev), ops.DENSE_FIELD,
                                                       (6, 7, 5), ["cubic"], [padding])[0])
    nan = torch.zeros_like(cpu, dtype=torch.bool)
    nan[0, :, 2, 3, 1] = True
    nan[1, :, 4, 0, 3] = True
    if padding == "zeros":
        assert torch.equal(cpu[nan], torch.zeros(int(nan.sum())))
    else:
        assert torch.isnan(cpu[nan]).all()
    assert torch.equal(torch.isnan(gpu), torch.isnan(cpu))
    assert torch.equal(gpu[~nan], cpu[~nan]) and torch.isfinite(cpu[~nan]).all()


# ---------------- crop-centre samplers ----------------
def _fortran(t):
    """The same values in reversed memory order (strides increasing with the axis)."""
    return t.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)


def _class_label(num_classes, seed, shape=(2, 1, 23, 19, 17)):
    """An argmax label over more than one 4096-voxel chunk per sample, a few non-class values."""
    g = torch.Generator().manual_seed(seed)
    lab = torch.randint(0, num_classes, shape, generator=g, dtype=torch.int16)
    lab[:, :, :4] = 0  # class 0 dominates the first chunk
    lab[1, 0, 7, 3, 2] = num_classes + 3  # outside the classes: counted nowhere
    return lab


@pytest.mark.parametrize("num_classes", [2, 3, 7])
@pytest.mark.parametrize("order", ["C", "F"])
def test_class_crop_centers_cuda_equal_cpu(num_classes, order):
    """<= 4 classes: the per-thread register counts; 7: the shared-memory histogram."""
    lab = _class_label(num_classes, seed=30 + num_classes)
    g = torch.Generator().manual_seed(31)
    img = torch.randn(2, 2, *lab.shape[2:], generator=g)
    if order == "F":
        lab, img = _fortran(lab), _fortran(img)
    ratios = [float(k % 3) for k in range(num_classes)]  # zeros included
    for image, thr in ((None, 0.0), (img, 0.3)):
        for region, size in (([], None), ([2, 1, 3, 20, 19, 15], [5, 4, 6])):
            def run(dev):
                im = None if image is None else image.to(dev)
                counts = torch.ops.voxaug.class_crop_counts(lab.to(dev), im, thr, 1, num_classes)
                c, cc = torch.ops.voxaug.class_crop_centers(lab.to(dev), im, thr, 1, ratios, 37, size, region,
                                                            17, 3, 5)
                out = [c, cc]
                if not region:  # cached counts: the whole volume
                    out.append(torch.ops.voxaug.class_crop_centers(lab.to(dev), im, thr, 1, ratios, 37, size,
                                                                   region, 17, 3, 5, counts)[0])
                return [counts] + out

            cpu, gpu = _both(run)
            _assert_equal(cpu, gpu, f"class centres K={num_classes} {order} image={image is not None} "
                                    f"region={region}")
            assert cpu[0].sum() > 0 and cpu[1].abs().sum() > 0


@pytest.mark.parametrize("num_classes", [3, 6])
def test_one_hot_and_pos_neg_crop_centers_cuda_equal_cpu(num_classes):
    lab = _class_label(num_classes, seed=40, shape=(2, 1, 13, 12, 31))
    onehot = torch.nn.functional.one_hot(lab.clamp(max=num_classes - 1).long()[:, 0], num_classes)
    onehot = onehot.permute(0, 4, 1, 2, 3).float().contiguous()
    ratios = [1.0] * num_classes
    cpu, gpu = _both(lambda dev: list(torch.ops.voxaug.class_crop_centers(onehot.to(dev), None, 0.0, 2, ratios,
                                                                          25, [3, 3, 3], [], 7))
                     + [torch.ops.voxaug.class_crop_counts(onehot.to(dev), None, 0.0, 2, num_classes)])
    _assert_equal(cpu, gpu, f"one-hot centres K={num_classes}")
    g = torch.Generator().manual_seed(41)
    img = torch.randn(2, 1, *lab.shape[2:], generator=g)
    fg = (lab > 0).to(torch.uint8)
    for pos in (0.0, 0.3, 1.0):
        def run(dev):
            counts = torch.ops.voxaug.class_crop_counts(fg.to(dev), img.to(dev), 0.1, 0, 2)
            return [torch.ops.voxaug.pos_neg_crop_centers(fg.to(dev), img.to(dev), 0.1, pos, 30, [4, 5, 6], 9, 2),
                    torch.ops.voxaug.pos_neg_crop_centers(fg.to(dev), img.to(dev), 0.1, pos, 30, [4, 5, 6], 9, 2,
                                                          counts), counts]

        cpu, gpu = _both(run)
        _assert_equal(cpu, gpu, f"pos-neg centres pos_ratio={pos}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16])
@pytest.mark.parametrize("order", ["C", "F"])
def test_weighted_crop_centers_cuda_equal_cpu(dtype, order):
    """Three 4096-voxel chunks per sample; negative weights (clamped to 0, or shifted with
    shift_negative); a region; a map that is zero in the region (the uniform fallback). The
    stats (total, shift, minimum) are compared bit for bit: the device sums each chunk's 256 lanes
    with the warp butterfly the host emulates."""
    g = torch.Generator().manual_seed(50)
    w = torch.randn(3, 2, 29, 23, 13, generator=g, dtype=torch.float64) * 3 + 0.5
    w[2, 0] = -1.0
    w[2, 0, 0, 0, 0] = 5.0  # outside the region below: not drawn there
    w = w.to(dtype)
    if order == "F":
        w = _fortran(w)
    for shift_negative in (False, True):
        for region in ([], [1, 2, 0, 27, 23, 11]):
            cpu, gpu = _both(lambda dev: list(torch.ops.voxaug.weighted_crop_centers(
                w.to(dev), shift_negative, 41, region, 12, 1, 3)))
            _assert_equal(cpu, gpu, f"weighted centres {dtype} {order} shift_negative={shift_negative} "
                                    f"region={region}")
            assert cpu[1][:2, 0].min() > 0


@pytest.mark.parametrize("num_classes", [3, 6])
def test_crop_centers_beyond_65535_samples_cuda_equal_cpu(num_classes):
    """More samples than a grid's y dimension: the counting and weight passes stride over the
    samples (class counts with registers (3 classes) and the shared histogram (6), the weight
    sums with and without the shift pass)."""
    n = 65535 + 37
    g = torch.Generator().manual_seed(60)
    lab = torch.randint(0, num_classes, (n, 1, 3, 2, 4), generator=g, dtype=torch.uint8)
    w = torch.randn(n, 1, 3, 2, 4, generator=g) + 0.2
    ratios = [1.0 + k for k in range(num_classes)]

    def run(dev):
        counts = torch.ops.voxaug.class_crop_counts(lab.to(dev), None, 0.0, 1, num_classes)
        c, cc = torch.ops.voxaug.class_crop_centers(lab.to(dev), None, 0.0, 1, ratios, 2, [1, 1, 1], [], 5)
        w1 = list(torch.ops.voxaug.weighted_crop_centers(w.to(dev), False, 2, [], 6))
        w2 = list(torch.ops.voxaug.weighted_crop_centers(w.to(dev), True, 2, [], 6))
        return [counts, c, cc] + w1 + w2

    cpu, gpu = _both(run)
    _assert_equal(cpu, gpu, f"crop centres, {n} samples, K={num_classes}")
    assert cpu[0][-1].sum() > 0


def test_uniform_crop_centers_and_uniform_fill_cuda_equal_cpu():
    like = torch.empty(3, 1, 9, 4, 11)
    cpu, gpu = _both(lambda dev: torch.ops.voxaug.uniform_crop_centers(like.to(dev), 50, [2, 0, 3, 7, 0, 5], 4,
                                                                       1, 2))
    _assert_equal(cpu, gpu, "uniform centres")

    def fill(dev):
        out = torch.empty(2, 3, 5, 6, 7, dtype=torch.float16, device=dev)[:, ::2]  # strided
        torch.ops.voxaug.uniform_fill_(out, -2.0, 3.0, 77, 5)
        return out.contiguous()

    cpu, gpu = _both(fill)
    _assert_equal(cpu, gpu, "uniform_fill_")
    assert not math.isclose(cpu.float().std().item(), 0.0)
