"""Exact rows of resample_patches whose source walks backwards (a flip of the row's axis) or
across lines (quarter turns): every element size (1, 2, 4, 8 bytes), row lengths that are not
multiples of any vector width, output samples below and above the streaming threshold
(kernels/common/stream_store.h kStreamOutputBytes, 2 MiB per sample over the targets), post
steps on a floating row, crops that reach the zero padding. References: torch.flip /
torch.permute / torch.rot90 of the crop, compared bit for bit."""
import math

import pytest
import torch

import voxaug  # noqa: F401  (loads torch.ops.voxaug)
from voxaug import ops as O

from conftest import devices

STREAM_BYTES = 2 << 20  # kStreamOutputBytes

# (dtype, mode): integer tensors go through nearest, floating ones through linear (the exact
# path copies either way when the dtype does not change).
DTYPES = [(torch.uint8, "nearest"), (torch.int16, "nearest"), (torch.float16, "linear"),
          (torch.float32, "linear"), (torch.int32, "nearest"), (torch.float64, "linear"),
          (torch.int64, "nearest")]

# Output axis a reads input axis PERM[a], flipped where FLIP[a].
MAPS = {
    "flip_w": ((0, 1, 2), (False, False, True)),
    "flip_dw": ((0, 1, 2), (True, False, True)),
    "flip_h": ((0, 1, 2), (False, True, False)),
    "rot90_hw": ((0, 2, 1), (False, True, False)),   # output w walks input h (step +-W)
    "rot270_hw": ((0, 2, 1), (False, False, True)),
    "rot90_dw": ((2, 1, 0), (True, False, False)),   # output w walks input d (step +-H*W)
    "rot270_dw": ((2, 1, 0), (False, False, True)),
}


def _matrix(perm, flip, out_size):
    """The (3, 4) map output index -> index inside the patch."""
    m = torch.zeros(3, 4, dtype=torch.float64)
    for a, b in enumerate(perm):
        m[b, a] = -1.0 if flip[a] else 1.0
        m[b, 3] = out_size[a] - 1 if flip[a] else 0
    return m


def _reference(crop, perm, flip):
    out = crop.permute(0, 1, *(2 + b for b in perm))
    dims = [2 + a for a in range(3) if flip[a]]
    return out.flip(dims) if dims else out


def _random(shape, dtype, g, bits):
    """Random bit patterns (NaNs and infinities included: a copy keeps them) or, for a row with
    post steps, finite values."""
    if bits or not dtype.is_floating_point:
        n = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        return torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).view(dtype).view(shape)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)


def _bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)  # 1-D: size-1 axes may keep odd strides


def _out_dh(w, elem, stream):
    """(D, H) of the output: a few rows, or enough for one sample of >= 2 MiB."""
    if not stream:
        return 3, 5
    side = math.isqrt(-(-(STREAM_BYTES + 4096) // (w * elem))) + 1
    return side, side


def _check(device, dtype, mode, w, stream, map_name, post, channels=1, pad=0):
    perm, flip = MAPS[map_name]
    elem = torch.empty((), dtype=dtype).element_size()
    d, h = _out_dh(w, elem, stream)
    out_size = (d, h, w)
    assert (channels * d * h * w * elem >= STREAM_BYTES) == stream
    patch = [0, 0, 0]
    for a, b in enumerate(perm):
        patch[b] = out_size[a]
    g = torch.Generator().manual_seed(w * 131 + elem)
    margin = (2, 3, 5)
    vol = _random((1, channels, *(p + 2 * s for p, s in zip(patch, margin))), dtype, g, bits=not post)
    # The patch starts inside the volume, or `pad` voxels before it on every axis (the rows
    # then reach the zero padding: the general path around a shorter copied run).
    start = [-pad] * 3 if pad else list(margin)
    starts = torch.tensor([[start]], dtype=torch.int64)
    mats = _matrix(perm, flip, out_size)[None]
    steps = []
    if post:
        steps = [O.Step(O.SHIFT_INTENSITY, 0, (0.25,)), O.Step(O.SCALE_INTENSITY, 0, (1.0,))]  # x (1 + 1.0)
    out = O.resample_patches([vol.to(device)], mats.to(device), starts.to(device), out_size, [mode], ["zeros"],
                             post_input=0 if post else None, post_steps=steps)[0].cpu()
    # Reference: the crop (zero padded outside the volume), permuted and flipped by torch.
    padded = torch.nn.functional.pad(vol, (pad, pad, pad, pad, pad, pad)) if pad else vol
    lo = [s + pad for s in start]
    crop = padded[:, :, lo[0]:lo[0] + patch[0], lo[1]:lo[1] + patch[1], lo[2]:lo[2] + patch[2]]
    ref = _reference(crop, perm, flip)
    if post:
        ref = (ref + 0.25) * 2.0  # float32 / float64: one rounding per step, as the op
    assert out.shape == ref.shape
    assert torch.equal(_bits(out), _bits(ref)), (dtype, w, stream, map_name, post)
    assert _bits(out).any()


@pytest.mark.parametrize("stream", [False, True], ids=["small", "streamed"])
@pytest.mark.parametrize("w", [1, 7, 33, 96, 257])
@pytest.mark.parametrize("dtype,mode", DTYPES, ids=[str(d).split(".")[1] for d, _ in DTYPES])
def test_flipped_rows_every_element_size(dtype, mode, w, stream):
    _check("cpu", dtype, mode, w, stream, "flip_w", post=False)


@pytest.mark.parametrize("stream", [False, True], ids=["small", "streamed"])
@pytest.mark.parametrize("w", [1, 7, 33, 96, 257])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_flipped_rows_with_post_steps(dtype, w, stream):
    # Streamed or not, the post target's rows are copied with plain stores, then stepped in
    # place (the other targets' rows stream).
    _check("cpu", dtype, "linear", w, stream, "flip_w", post=True)


@pytest.mark.parametrize("map_name", list(MAPS))
@pytest.mark.parametrize("w", [7, 96])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streamed_rows_with_post_steps_every_map(dtype, w, map_name):
    # contiguous (flip_h), reversed (flip_w, flip_dw) and gathered (quarter turns) rows
    _check("cpu", dtype, "linear", w, True, map_name, post=True)


@pytest.mark.parametrize("map_name", list(MAPS))
@pytest.mark.parametrize("dtype,mode", [(torch.uint8, "nearest"), (torch.int16, "nearest"),
                                        (torch.float32, "linear"), (torch.int64, "nearest")],
                         ids=["uint8", "int16", "float32", "int64"])
@pytest.mark.parametrize("device", devices())
def test_signed_permutations_small_multichannel(device, dtype, mode, map_name):
    for w in (1, 7, 33):
        _check(device, dtype, mode, w, False, map_name, post=False, channels=2)


@pytest.mark.parametrize("map_name", ["flip_w", "flip_dw", "rot90_hw", "rot270_dw"])
@pytest.mark.parametrize("w", [7, 96])
def test_rows_reaching_the_padding(map_name, w):
    # Crops 2 voxels before the volume on every axis: each row copies an inner run (reversed
    # for flip_w) and fills the rest.
    _check("cpu", torch.float32, "linear", w, False, map_name, post=False, pad=2)
    _check("cpu", torch.uint8, "nearest", w, True, map_name, post=False, pad=2)


@pytest.mark.parametrize("k,dims", [(1, (3, 4)), (3, (3, 4)), (1, (2, 4)), (2, (2, 4))])
@pytest.mark.parametrize("stream", [False, True], ids=["small", "streamed"])
def test_quarter_turns_equal_torch_rot90(k, dims, stream):
    """torch.rot90 itself as the reference (the map built from its definition: output axes
    dims[0], dims[1] of rot90 by k)."""
    g = torch.Generator().manual_seed(5 + k)
    size = (40, 36, 33) if not stream else (130, 128, 96)  # 96 output rows of 130 * 128 * 4 B
    vol = torch.randn(1, 1, *(s + 4 for s in size), generator=g)
    lab = torch.randint(0, 250, vol.shape, generator=g, dtype=torch.uint8)
    crop = (slice(None), slice(None), slice(1, 1 + size[0]), slice(2, 2 + size[1]), slice(3, 3 + size[2]))
    ref = torch.rot90(vol[crop], k, dims)
    lref = torch.rot90(lab[crop], k, dims)
    # The map: out index o -> patch index i with rot90's rule, found from an index volume.
    idx = torch.arange(math.prod(size), dtype=torch.int64).view(1, 1, *size)
    rot = torch.rot90(idx, k, dims)[0, 0]
    out_size = tuple(rot.shape)
    strides = (size[1] * size[2], size[2], 1)
    m = torch.zeros(3, 4, dtype=torch.float64)
    origin = int(rot[0, 0, 0])
    o = [origin // strides[0], (origin // strides[1]) % size[1], origin % size[2]]
    for a in range(3):
        e = [0, 0, 0]
        e[a] = 1
        v = int(rot[tuple(e)]) - origin  # one step along output axis a, in patch offsets
        b = [j for j in range(3) if abs(v) == strides[j]][0]
        m[b, a] = 1.0 if v > 0 else -1.0
    for b in range(3):
        m[b, 3] = o[b]
    starts = torch.tensor([[[1, 2, 3]]])
    out, lout = O.resample_patches([vol, lab], m[None], starts, out_size, ["linear", "nearest"], ["zeros"] * 2)
    assert torch.equal(out, ref) and torch.equal(lout, lref)
    assert (out.numel() * 5 >= STREAM_BYTES) == stream


@pytest.mark.parametrize("stream", [False, True], ids=["small", "streamed"])
@pytest.mark.parametrize("map_name", ["rot90_hw", "rot270_dw", "flip_dw"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quarter_turns_with_post_steps(dtype, map_name, stream):
    # rot270_dw runs its rows h-major (exact_items): the post steps then go row by row.
    for w in (7, 96):
        _check("cpu", dtype, "linear", w, stream, map_name, post=True)


@pytest.mark.parametrize("map_name", ["none", "flip_h", "flip_w"])
@pytest.mark.parametrize("chain", ["shift_scale", "with_sir"])
def test_streamed_post_chains_equal_gather_then_chain(chain, map_name):
    """Streamed float32 patches (6 from 2 volumes) with post chains of random gated shifts and
    scales (contiguous rows: loaded, stepped in registers and streamed in one pass) or with a
    ScaleIntensityRange among them (rows copied, then stepped in L1), rows starting off the
    16-byte grid (w = 37), a non-zero first sample: bit for bit the gather without post steps
    followed by pointwise_chain_ with the same steps and first sample."""
    perm, flip = MAPS.get(map_name, ((0, 1, 2), (False, False, False)))
    w = 37
    d, h = _out_dh(w, 4, True)
    out_size = (d, h, w)
    g = torch.Generator().manual_seed(41)
    vol = (torch.rand(2, 1, d + 6, h + 6, w + 6, generator=g, dtype=torch.float64) * 8 - 4).float()
    starts = torch.randint(0, 7, (2, 3, 3), generator=g, dtype=torch.int64)
    mats = _matrix(perm, flip, out_size)[None].repeat(6, 1, 1)
    steps = [O.Step(O.SHIFT_INTENSITY, O.RANDOM, (0.0, -1.0, 1.0), 0.5, 11),
             O.Step(O.SCALE_INTENSITY, O.RANDOM, (0.0, -0.5, 0.5), 0.7, 12),
             O.Step(O.SHIFT_INTENSITY, 0, (0.125,))]
    if chain == "with_sir":
        steps.insert(1, O.Step(O.SCALE_INTENSITY_RANGE, 0, (-4.0, 4.0, 0.0, 1.0)))
    assert O.post_fusable(steps)
    fused = O.resample_patches([vol], mats, starts, out_size, ["linear"], ["zeros"], post_input=0,
                               post_steps=steps, post_first_sample=5)[0]
    ref = O.resample_patches([vol], mats, starts, out_size, ["linear"], ["zeros"])[0]
    assert fused[0].numel() * 4 >= STREAM_BYTES
    O.pointwise_chain_(ref, steps, first_sample=5)
    assert torch.equal(_bits(fused), _bits(ref))
    # The gates and draws differ between samples: some shifted, some not.
    plain = O.resample_patches([vol], mats, starts, out_size, ["linear"], ["zeros"])[0]
    changed = [(fused[i] != plain[i]).any().item() for i in range(6)]
    assert any(changed)
