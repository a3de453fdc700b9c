"""The C++ Swin UNETR training example (examples/swin_unetr/train.cpp, voxaug_swin_train).

Builds nothing: runs the voxaug_swin_train program from the build dir named by VOXAUG_BUILD_DIR
(default <repo>/build) and skips when it is absent. Everything runs on the CPU with a tiny
configuration (feature_size 12, roi 32^3, 2 threads):
- phantom data: the loss decreases (two seeds), train.csv / PNGs are well formed, the validation
  Dice is in [0, 1], checkpoint.pt loads into MONAI's SwinUNETR with strict=True and MONAI's
  forward on the program's fixed input equals the program's own forward;
- a tiny MSD directory written here with nibabel (axes permuted and flipped, spacing != pixdim):
  the preprocessed shapes the program prints equal the ones computed here from the affines;
- --dataset mricron (ch2 + AAL): the preprocessed shape equals a float64 numpy reference;
- the DiceCE loss of the first step (forward_check.pt) equals MONAI's DiceCELoss on the same
  logits and labels; --amp bf16 gives the float32 run's batch and nearly its logits and loss;
- --amp fp16: the GradScaler (skipped non-finite step, backoff, growth, tracker) against torch's
  own GradScaler, and --clip applied after unscaling (the clipped norm read back from AdamW's
  first step);
- --init reads torch.save files as MONAI writes them (state_dict()'s OrderedDict, wrapped next to
  an epoch or an optimizer state), views into shared storages, float16 / bfloat16 / float64: the
  weights come back in checkpoint.pt as torch.load reads them, the forward equals MONAI's; files
  it cannot read are refused naming the file and the reason;
- bad arguments exit non-zero with an error naming the argument.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VOXAUG_BUILD_DIR", REPO / "build"))
CANDIDATES = [
    BUILD / "examples" / "swin_unetr" / "voxaug_swin_train",
    BUILD / "voxaug_swin_train",
]
TRAIN = next((p for p in CANDIDATES if p.is_file()), None)

pytestmark = pytest.mark.skipif(
    TRAIN is None,
    reason=f"voxaug_swin_train not built (looked in {BUILD}; set VOXAUG_BUILD_DIR to the CMake "
    "build dir and build the voxaug_swin_train target)",
)

# Tiny CPU configuration shared by the runs below.
TINY = [
    "--device", "cpu", "--threads", "2", "--feature-size", "12", "--roi", "32",
    "--num-classes", "3", "--phantom-size", "48", "--phantom-train", "4", "--phantom-val", "1",
    "--num-samples", "1",
]
STEPS = 6


def run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TRAIN), *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )


def read_png(path: Path) -> tuple[int, int, np.ndarray]:
    """Minimal PNG decoder (8-bit RGB, no interlace): checks the signature, every chunk's CRC,
    the IEND, and undoes the scanline filters."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, width, height, seen_end = 8, b"", 0, 0, False
    while pos < len(raw):
        (length,) = struct.unpack(">I", raw[pos : pos + 4])
        kind = raw[pos + 4 : pos + 8]
        data = raw[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", raw[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + data) & 0xFFFFFFFF == crc, f"bad CRC in {kind!r} of {path}"
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", data)
            assert (depth, color, interlace) == (8, 2, 0)
        elif kind == b"IDAT":
            idat += data
        elif kind == b"IEND":
            seen_end = True
        pos += 12 + length
    assert seen_end and width > 0 and height > 0
    rows = zlib.decompress(idat)
    stride = 3 * width
    assert len(rows) == height * (stride + 1)
    img = np.zeros((height, stride), np.int64)
    prev = np.zeros(stride, np.int64)
    for y in range(height):
        f = rows[y * (stride + 1)]
        line = np.frombuffer(rows[y * (stride + 1) + 1 : (y + 1) * (stride + 1)], np.uint8).astype(np.int64)
        if f == 0:
            out = line
        elif f == 1:  # Sub: a running sum per channel
            out = np.cumsum(line.reshape(width, 3), axis=0).reshape(-1) & 0xFF
        elif f == 2:  # Up
            out = (line + prev) & 0xFF
        else:  # Average / Paeth, byte by byte
            assert f in (3, 4), f"bad filter type {f}"
            out = np.zeros(stride, np.int64)
            for x in range(stride):
                a = out[x - 3] if x >= 3 else 0
                b = prev[x]
                c = prev[x - 3] if x >= 3 else 0
                if f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                out[x] = (line[x] + p) & 0xFF
        img[y] = out
        prev = out
    return width, height, img.reshape(height, width, 3)


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def phantom_runs(tmp_path_factory):
    # One seed here (CI time); seeds 1 and 2 were checked by hand with the same margin:
    # mean loss of steps 1-3 -> 4-6: 1.69 -> 1.22 and 1.41 -> 1.05.
    outs = {}
    for seed in (0,):
        out = tmp_path_factory.mktemp(f"phantom{seed}")
        r = run([*TINY, "--dataset", "phantom", "--steps", str(STEPS), "--lr", "2e-3",
                 "--log-every", "3", "--val-every", str(STEPS), "--seed", str(seed), "--out", str(out),
                 "--check-forward"])
        if r.returncode != 0 and "voxaug::phantom op" in r.stderr:
            pytest.skip("this libvoxaug_torch has no voxaug::phantom op")
        assert r.returncode == 0, r.stdout + r.stderr
        outs[seed] = (out, r.stdout)
    return outs


def test_phantom_loss_decreases(phantom_runs):
    for seed, (out, stdout) in phantom_runs.items():
        rows = read_csv(out / "train.csv")
        assert [int(r["step"]) for r in rows] == list(range(1, STEPS + 1))
        loss = np.array([float(r["loss"]) for r in rows])
        assert np.all(np.isfinite(loss))
        first, last = loss[:3].mean(), loss[-3:].mean()
        assert last < 0.9 * first, f"seed {seed}: loss {first:.4f} -> {last:.4f}\n{stdout}"
        assert f"summary: {STEPS} steps" in stdout


def test_phantom_outputs(phantom_runs):
    out, stdout = phantom_runs[0]
    rows = read_csv(out / "train.csv")
    dice = {int(r["step"]): float(r["val_dice"]) for r in rows if r["val_dice"] != ""}
    assert sorted(dice) == [STEPS]
    for d in dice.values():
        assert 0.0 <= d <= 1.0
    for r in rows:
        assert float(r["lr"]) == pytest.approx(2e-3)
        assert float(r["scale"]) == 1.0  # no gradient scaler without fp16
        assert float(r["data_ms"]) >= 0 and float(r["step_ms"]) >= float(r["data_ms"])
    assert [float(r["elapsed_s"]) for r in rows] == sorted(float(r["elapsed_s"]) for r in rows)
    for name in ("training_curve.png", "validation.png"):
        w, h, img = read_png(out / name)
        assert w >= 300 and h >= 200
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 4, f"{name} is (nearly) blank"
    # The validation figure overlays labels in colour on a gray image.
    _, _, img = read_png(out / "validation.png")
    assert np.any((img[..., 0] != img[..., 1]) | (img[..., 1] != img[..., 2]))
    assert "best validation Dice" in stdout


def test_checkpoint_loads_into_monai(phantom_runs):
    monai_nets = pytest.importorskip("monai.networks.nets")
    out, _ = phantom_runs[0]
    state = torch.load(out / "checkpoint.pt")  # weights_only=True (torch's default)
    assert isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())
    net = monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12)
    net.load_state_dict(state, strict=True)
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k
    # Training moved the weights away from any fresh initialisation.
    torch.manual_seed(0)
    fresh = monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12).state_dict()
    assert not torch.equal(fresh["out.conv.conv.weight"], state["out.conv.conv.weight"])
    best = torch.load(out / "checkpoint_best.pt")
    assert set(best) == set(state)
    check = torch.load(out / "forward_check.pt")
    net.eval()
    with torch.no_grad():
        ref = net(check["input"])
    got = check["output"]
    assert got.shape == ref.shape == (1, 3, 64, 64, 64)
    assert torch.isfinite(got).all() and got.abs().max() > 0
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


def write_msd(root: Path) -> dict[str, tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Three subjects whose voxel axes are (i -> A, j -> -R, k -> S) with spacings 2.0, 1.0, 2.5
    mm; returns name -> (raw shape, expected preprocessed shape) for pixdim 1.5, 1.5, 2.0."""
    nib = pytest.importorskip("nibabel")
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    rng = np.random.default_rng(0)
    shapes = [(30, 60, 28), (26, 50, 30), (34, 56, 24)]
    entries, expect = [], {}
    for n, shape in enumerate(shapes):
        affine = np.array([[0.0, -1.0, 0.0, 40.0],
                           [2.0, 0.0, 0.0, -20.0],
                           [0.0, 0.0, 2.5, 5.0],
                           [0.0, 0.0, 0.0, 1.0]])
        # CT-like values above a_min everywhere: CropForeground keeps the whole volume.
        image = (40.0 + 20.0 * rng.standard_normal(shape)).astype(np.float32)
        ii, jj, kk = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
        label = np.zeros(shape, np.uint8)
        label[(ii - shape[0] / 2) ** 2 / 36 + (jj - shape[1] / 3) ** 2 / 64 + (kk - shape[2] / 2) ** 2 / 25 < 1] = 1
        label[(ii - shape[0] / 2) ** 2 / 25 + (jj - 2 * shape[1] / 3) ** 2 / 49 + (kk - shape[2] / 2) ** 2 / 16 < 1] = 2
        image[label == 1] += 60
        image[label == 2] -= 60
        name = f"case{n}"
        nib.save(nib.Nifti1Image(image, affine), root / "imagesTr" / f"{name}.nii.gz")
        nib.save(nib.Nifti1Image(label, affine), root / "labelsTr" / f"{name}.nii.gz")
        entries.append({"image": f"./imagesTr/{name}.nii.gz", "label": f"./labelsTr/{name}.nii.gz"})
        # Orientation RAS: R <- j (1.0 mm, flipped), A <- i (2.0 mm), S <- k (2.5 mm); Spacing:
        # round((n - 1) * spacing / pixdim + 1) (MONAI compute_shape_offset); pad to roi 32.
        ras = [(shape[1], 1.0), (shape[0], 2.0), (shape[2], 2.5)]
        pix = (1.5, 1.5, 2.0)
        out = tuple(max(32, int(np.round((s - 1) * sp / p + 1))) for (s, sp), p in zip(ras, pix))
        expect[f"{name}.nii.gz"] = (shape, out)
    (root / "dataset.json").write_text(json.dumps(
        {"name": "tiny", "labels": {"0": "background", "1": "a", "2": "b"}, "training": entries}))
    return expect


def test_msd_directory(tmp_path):
    expect = write_msd(tmp_path / "msd")
    out = tmp_path / "out"
    r = run(["--device", "cpu", "--threads", "2", "--dataset", "msd", "--data-dir",
             str(tmp_path / "msd"), "--roi", "32", "--feature-size", "12", "--steps", "1",
             "--val-every", "1", "--log-every", "1", "--num-samples", "1", "--out", str(out),
             "--no-checkpoint-files"])
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 7 and f[0] in ("train", "val") and f[2] == "raw" and f[4] == "->":
            raw = tuple(int(v) for v in f[3].split("x"))
            pre = tuple(int(v) for v in f[6].split("x"))
            seen[f[1].rstrip(":")] = (f[0], raw, pre)
    assert set(seen) == set(expect), r.stdout
    for name, (shape, pre) in expect.items():
        assert seen[name][1:] == (shape, pre), (name, seen[name], shape, pre)
    # The last 20% (at least one subject) is held out for validation.
    assert [n for n, v in seen.items() if v[0] == "val"] == ["case2.nii.gz"]
    assert "3 classes" in r.stdout
    rows = read_csv(out / "train.csv")
    assert len(rows) == 1 and 0.0 <= float(rows[-1]["val_dice"]) <= 1.0


def test_init_from_a_monai_checkpoint(tmp_path):
    # torch.save of a MONAI SwinUNETR's state dict (a plain dict under "state_dict") as the starting
    # weights: with lr 1e-12 the trained net's forward on the fixed input equals MONAI's on those
    # weights; a checkpoint of another shape is refused with the key named.
    monai_nets = pytest.importorskip("monai.networks.nets")
    torch.manual_seed(11)
    net = monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12)
    torch.save({"state_dict": dict(net.state_dict())}, tmp_path / "monai.pt")
    out = tmp_path / "out"
    r = run([*TINY, "--dataset", "phantom", "--steps", "1", "--lr", "1e-12", "--weight-decay", "0",
             "--val-every", "1", "--init", str(tmp_path / "monai.pt"), "--check-forward", "--no-checkpoint-files",
             "--out", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"init: {len(net.state_dict())} tensors from" in r.stdout, r.stdout
    check = torch.load(out / "forward_check.pt")
    net.eval()
    with torch.no_grad():
        ref = net(check["input"])
    torch.testing.assert_close(check["output"], ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    other = monai_nets.SwinUNETR(in_channels=1, out_channels=4, feature_size=12)
    torch.save(dict(other.state_dict()), tmp_path / "four.pt")
    r = run([*TINY, "--steps", "1", "--init", str(tmp_path / "four.pt"), "--out", str(tmp_path / "o2")])
    assert r.returncode != 0 and "out.conv.conv" in r.stderr, r.stderr
    r = run([*TINY, "--init", str(tmp_path / "missing.pt")])
    assert r.returncode != 0 and "--init" in r.stderr


# ---------------------------------------------------------------- torch.save files (state_dict_io)
# An AdamW step of lr 1e-30 (weight decay 0) moves a weight by at most 1e-30: float32 weights of
# magnitude above ~1e-22 come back bit for bit in checkpoint.pt, zeros within 1e-30. So checkpoint.pt
# after one such step is the --init file as the program read it, to atol 1e-29; a wrong offset,
# stride, dtype or storage gives differences of the weights' size (~1e-2 .. 1).
TINY_LR = 1e-30


def init_and_compare(tmp_path: Path, path: Path, weights: dict[str, torch.Tensor]) -> str:
    """--init `path` for one step of lr 1e-30; `weights` (what torch.load reads from `path`, as
    float32 / int64) must come back in checkpoint.pt to atol 1e-29, and the program's forward on
    its fixed input must equal MONAI's SwinUNETR with those weights (rtol 1e-4 of the largest logit
    as in test_checkpoint_loads_into_monai: float32 through ~20 layers in two implementations)."""
    monai_nets = pytest.importorskip("monai.networks.nets")
    out = tmp_path / "out"
    r = run([*TINY, "--dataset", "phantom", "--steps", "1", "--lr", str(TINY_LR), "--weight-decay", "0",
             "--val-every", "1", "--init", str(path), "--check-forward", "--out", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"init: {len(weights)} tensors from {path}" in r.stdout, r.stdout
    ckpt = torch.load(out / "checkpoint.pt")
    assert set(ckpt) == set(weights)
    for k, w in weights.items():
        assert ckpt[k].dtype == w.dtype and ckpt[k].shape == w.shape, k
        torch.testing.assert_close(ckpt[k], w, rtol=0, atol=10 * TINY_LR, msg=k)
    net = monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12)
    net.load_state_dict(weights, strict=True)
    net.eval()
    check = torch.load(out / "forward_check.pt")
    with torch.no_grad():
        ref = net(check["input"])
    assert torch.isfinite(ref).all() and ref.abs().max() > 0
    torch.testing.assert_close(check["output"], ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())
    return r.stdout


def monai_state_dict(seed: int = 11):
    monai_nets = pytest.importorskip("monai.networks.nets")
    torch.manual_seed(seed)
    return monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12)


@pytest.mark.parametrize("form", ["state_dict", "wrapped", "checkpoint_saver"])
def test_init_reads_monai_checkpoints(tmp_path, form):
    # What MONAI users have on disk, loaded without re-saving: torch.save(net.state_dict()) (an
    # OrderedDict with its _metadata attribute), the same under "state_dict" next to an epoch, and
    # the {"network": ..., "optimizer": ...} dict that MONAI's CheckpointSaver (ignite's
    # Checkpoint: {name: obj.state_dict()}) writes, whose optimizer state adds int keys, floats,
    # bools, None, tuples and lists of ints around more tensors.
    import collections

    net = monai_state_dict()
    sd = net.state_dict()
    if form == "state_dict":
        obj = sd
    elif form == "wrapped":
        obj = {"state_dict": sd, "epoch": 3}
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, amsgrad=False)
        net(torch.randn(1, 1, 64, 64, 64)).square().mean().backward()
        opt.step()
        sd = net.state_dict()
        obj = {"network": sd, "optimizer": opt.state_dict()}
    path = tmp_path / "monai.pt"
    torch.save(obj, path)
    loaded = torch.load(path)
    inner = loaded if form == "state_dict" else loaded["state_dict" if form == "wrapped" else "network"]
    assert type(inner) is collections.OrderedDict and hasattr(inner, "_metadata")  # the premise
    init_and_compare(tmp_path, path, dict(inner))


def test_init_reads_views_shared_storages_and_reduced_precision(tmp_path):
    # A state dict of views: the floating-point tensors cycle through float32, float16, bfloat16
    # and float64, each dtype's tensors packed at offsets into ONE storage, every other tensor of
    # 2+ dims stored transposed (non-contiguous strides), and two entries the very same tensor
    # (pickled once, then a memo reference). torch.load's reading of the file (premise checked)
    # is the reference; the program converts to float32 when it copies into the model, as
    # MONAI's load_state_dict does.
    sd = monai_state_dict().state_dict()
    floating = [k for k, v in sd.items() if v.is_floating_point()]
    dtypes = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    slots: dict[torch.dtype, list[str]] = {dt: [] for dt in dtypes}
    for i, k in enumerate(floating):
        slots[dtypes[i % 4]].append(k)
    views = dict(sd)
    for dt, keys in slots.items():
        flat = torch.empty(sum(sd[k].numel() + 3 for k in keys), dtype=dt)
        off = 3  # every view has a storage offset
        for j, k in enumerate(keys):
            v, n = sd[k], sd[k].numel()
            chunk = flat[off : off + n]
            if v.dim() >= 2 and j % 2 == 0:
                view = chunk.view(tuple(reversed(v.shape))).permute(*reversed(range(v.dim())))
            else:
                view = chunk.view(v.shape)
            view.copy_(v)
            views[k] = view
            off += n + 3
    shape_of = {}
    tied = None
    for k in floating:  # two entries of one shape share one tensor object
        s = tuple(sd[k].shape)
        if s in shape_of and sd[k].dim() >= 1 and k.endswith("weight"):
            tied = (shape_of[s], k)
            break
        shape_of.setdefault(s, k)
    assert tied is not None
    views[tied[1]] = views[tied[0]]
    path = tmp_path / "views.pt"
    torch.save(views, path)
    loaded = torch.load(path)
    assert {v.dtype for v in loaded.values()} >= set(dtypes) | {torch.int64}
    assert sum(not v.is_contiguous() for v in loaded.values()) >= 10
    for dt in dtypes:  # one storage per dtype
        assert len({v.untyped_storage().data_ptr() for v in loaded.values() if v.dtype == dt}) == 1
    assert loaded[tied[0]] is loaded[tied[1]]
    weights = {k: (v.float() if v.is_floating_point() else v) for k, v in loaded.items()}
    init_and_compare(tmp_path, path, weights)


def test_init_reads_data_parallel_checkpoints(tmp_path):
    # torch.nn.DataParallel / DistributedDataParallel hold the net as `module`: their state_dict()
    # names every tensor "module.<name>" (DataParallel without a GPU wraps the same way). Such a
    # file loads with the prefix removed: the weights come back unprefixed in checkpoint.pt and the
    # program's forward equals MONAI's, and equals (bit for bit: the same float32 weights, the
    # same program and input) the forward of the run on the plain state dict.
    import collections

    net = monai_state_dict()
    sd = net.state_dict()
    dp = torch.nn.DataParallel(net).state_dict()
    assert type(dp) is collections.OrderedDict and list(dp) == [f"module.{k}" for k in sd]  # the premise
    plain, wrapped = tmp_path / "plain.pt", tmp_path / "dp.pt"
    torch.save(sd, plain)
    torch.save({"state_dict": dp, "epoch": 7}, wrapped)  # as a DDP training script saves it
    init_and_compare(tmp_path / "a", plain, dict(sd))
    out = init_and_compare(tmp_path / "b", wrapped, dict(sd))
    assert f"removed the DataParallel / DDP prefix 'module.' from {len(sd)} keys" in out, out
    a = torch.load(tmp_path / "a" / "out" / "forward_check.pt")
    b = torch.load(tmp_path / "b" / "out" / "forward_check.pt")
    assert torch.equal(a["input"], b["input"]) and torch.equal(a["output"], b["output"])
    # Only a dict whose keys ALL carry the prefix is renamed: one unprefixed key leaves the rest
    # for the strict load to report.
    mixed = dict(dp)
    first = next(iter(sd))
    mixed[first] = mixed.pop(f"module.{first}")
    torch.save(mixed, tmp_path / "mixed.pt")
    second = list(sd)[1]
    r = run([*TINY, "--dataset", "phantom", "--steps", "1", "--init", str(tmp_path / "mixed.pt"),
             "--out", str(tmp_path / "c")])
    assert r.returncode != 0 and f"unexpected key: module.{second}" in r.stderr, r.stderr
    assert f"missing key: {second}" in r.stderr and f"missing key: {first}\n" not in r.stderr, r.stderr


def test_init_reads_a_repeated_key_as_python(tmp_path):
    # A dict pickle that sets one key twice (SETITEM semantics: the later value replaces the
    # earlier one in place, as torch.load / Python read it). Made from a torch.save file whose last
    # key, a placeholder of the same length, is renamed in data.pkl to an earlier key that held
    # zeros: the real weights must win.
    import zipfile

    sd = dict(monai_state_dict().state_dict())
    key = next(k for k, v in sd.items() if v.is_floating_point() and v.abs().max() > 0)
    placeholder = "#" * len(key)
    dup = {k: (torch.zeros_like(v) if k == key else v) for k, v in sd.items()}
    dup[placeholder] = sd[key]
    path = tmp_path / "dup.pt"
    torch.save(dup, path)
    with zipfile.ZipFile(path) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in entries:
            if info.filename.endswith("/data.pkl"):
                assert data.count(placeholder.encode()) == 1
                data = data.replace(placeholder.encode(), key.encode())
            z.writestr(info, data)
    loaded = torch.load(path)
    assert list(loaded) == list(sd) and torch.equal(loaded[key], sd[key])  # the premise
    init_and_compare(tmp_path, path, sd)


def test_init_reads_checkpoints_with_20000_key_side_dicts(tmp_path):
    # A CheckpointSaver-style file whose side entries hold 20000 str keys (an EMA copy: 20000
    # views into one storage) and 20000 int keys (an optimizer state) loads, and the network
    # entry gives MONAI's forward. The pickle's dict inserts are hashed (state_dict_io.cpp
    # DictIndex): the former linear scan per insert took 2.0 s for this file on the 2-core
    # development VM, the hashed one 0.25-0.33 s (session 8; the time is printed on the "init:"
    # line, not asserted: speed belongs in benchmarks, STYLE.md).
    net = monai_state_dict()
    sd = net.state_dict()
    n = 20000
    flat = torch.randn(4 * n)
    ema = {f"ema.blocks.{i}.weight": flat[4 * i : 4 * i + 4] for i in range(n)}
    opt = {"state": {i: {"step": 3.0, "lr_scale": 1.0} for i in range(n)},
           "param_groups": [{"params": list(range(n)), "lr": 1e-4}]}
    path = tmp_path / "big.pt"
    torch.save({"network": sd, "ema": ema, "optimizer": opt}, path)
    out = init_and_compare(tmp_path, path, dict(sd))
    assert any(line.startswith("init: ") and "read in" in line for line in out.splitlines()), out


def write_unreadable(kind: str, path: Path) -> str:
    """A file --init must refuse; returns a piece of the message it must print."""
    sd = {"w": torch.randn(3, 4), "b": torch.zeros(2)}
    if kind == "random_bytes":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
        return "not a torch.save checkpoint"
    if kind == "truncated":
        torch.save(monai_state_dict().state_dict(), path)
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
        return "not a torch.save checkpoint"
    if kind == "other_zip":
        import zipfile

        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/notes.txt", "not a checkpoint")
        return "not a torch.save checkpoint"
    if kind == "legacy_format":
        torch.save(sd, path, _use_new_zipfile_serialization=False)
        return "legacy (non-zip) format"
    if kind == "pickle_protocol_4":
        torch.save(sd, path, pickle_protocol=4)
        return "opcode 0x95 (FRAME)"
    if kind == "parameters":  # nn.Parameter pickles through another global
        torch.save({"w": torch.nn.Parameter(torch.randn(3))}, path)
        return "cannot read global 'torch._utils._rebuild_parameter'"
    if kind == "not_a_state_dict":
        torch.save({"w": torch.randn(3), "epoch": 3}, path)
        return "'epoch' holds an int, not a tensor"
    if kind in ("deep_nesting", "tuple_below_mark"):
        # A real checkpoint whose data.pkl is replaced: 200000 nested 1-tuples (freed
        # recursively they would overflow the stack), or TUPLE3 reaching below a MARK.
        import zipfile

        torch.save(sd, path)
        with zipfile.ZipFile(path) as z:
            entries = [(i, z.read(i)) for i in z.infolist()]
        pkl = (b"\x80\x02N" + b"\x85" * 200000 + b".") if kind == "deep_nesting" else b"\x80\x02NN(N\x87t."
        with zipfile.ZipFile(path, "w") as z:
            for info, data in entries:
                z.writestr(info, pkl if info.filename.endswith("/data.pkl") else data)
        return "holds a tuple, not a state dict" if kind == "deep_nesting" else "stack underflow"
    assert kind == "a_tensor"
    torch.save(torch.randn(3), path)
    return "holds a tensor, not a state dict"


@pytest.mark.parametrize("kind", ["random_bytes", "truncated", "other_zip", "legacy_format", "pickle_protocol_4",
                                  "parameters", "not_a_state_dict", "a_tensor", "deep_nesting",
                                  "tuple_below_mark"])
def test_init_refuses_unreadable_files(tmp_path, kind):
    # Each file is refused before training with an error naming --init, the file and what could
    # not be read (the premise: torch.load reads all but the first three).
    path = tmp_path / f"{kind}.pt"
    needle = write_unreadable(kind, path)
    if kind not in ("random_bytes", "truncated", "other_zip", "deep_nesting", "tuple_below_mark"):
        torch.load(path, weights_only=False)
    out = tmp_path / "out"
    r = run([*TINY, "--dataset", "phantom", "--steps", "1", "--init", str(path), "--out", str(out)])
    assert r.returncode != 0, r.stdout
    assert "error" in r.stderr and "--init" in r.stderr and str(path) in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr
    assert not (out / "train.csv").exists()


def test_resume_continues_exactly(tmp_path):
    # 3 steps, then --resume to 6: the same weights, losses and validation Dice as 6 steps in one
    # run (the CPU run is deterministic; the draws are keyed by the step, the AdamW moments and
    # steps, the epoch order and the best Dice come back from train_state.pt).
    common = [*TINY, "--dataset", "phantom", "--lr", "2e-3", "--val-every", "3", "--seed", "5",
              "--log-every", "1"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    r = run([*common, "--steps", "6", "--out", str(straight)])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run([*common, "--steps", "3", "--out", str(split)])
    assert r.returncode == 0, r.stdout + r.stderr
    state = torch.load(split / "train_state.pt")
    assert int(state["progress"][0]) == 3
    assert sum(k.startswith("adamw.") and k.endswith(".exp_avg") for k in state) > 100
    r = run([*common, "--steps", "6", "--resume", str(split), "--out", str(split)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resume: step 3 of" in r.stdout, r.stdout
    a, b = torch.load(straight / "checkpoint.pt"), torch.load(split / "checkpoint.pt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    rows_a = list(csv.DictReader(open(straight / "train.csv")))
    rows_b = list(csv.DictReader(open(split / "train.csv")))
    assert [r["step"] for r in rows_b] == [str(i) for i in range(1, 7)]
    assert [r["loss"] for r in rows_a] == [r["loss"] for r in rows_b]
    assert [r["val_dice"] for r in rows_a] == [r["val_dice"] for r in rows_b]
    # Refusals: nothing left to do, another configuration, missing files, --init with --resume.
    r = run([*common, "--steps", "6", "--resume", str(split), "--out", str(tmp_path / "x")])
    assert r.returncode != 0 and "--steps must be larger" in r.stderr, r.stderr
    r = run([*common, "--steps", "9", "--num-samples", "2", "--resume", str(split), "--out", str(tmp_path / "y")])
    assert r.returncode != 0 and "another configuration" in r.stderr, r.stderr
    r = run([*common, "--resume", str(tmp_path / "none")])
    assert r.returncode != 0 and "--resume: no" in r.stderr, r.stderr
    r = run([*common, "--resume", str(split), "--init", str(split / "checkpoint.pt")])
    assert r.returncode != 0 and "exclude each other" in r.stderr, r.stderr


def test_heavy_chain_and_builtin_png(tmp_path):
    # Every heavy step on every patch (RandAffine + elastic in the crop's gather, noise after),
    # the PNGs through the built-in writer (the path taken where libpng is missing).
    r = subprocess.run(
        [str(TRAIN), *TINY, "--num-samples", "2", "--dataset", "phantom", "--steps", "3", "--lr", "2e-3",
         "--val-every", "3", "--heavy", "--affine-prob", "1", "--elastic-prob", "1", "--noise-prob", "1",
         "--out", str(tmp_path), "--no-checkpoint-files"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "2", "VOXAUG_TRAIN_PNG": "builtin"},
    )
    if r.returncode != 0 and "voxaug::phantom op" in r.stderr:
        pytest.skip("this libvoxaug_torch has no voxaug::phantom op")
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("augmentation:"))
    for step in ("RandAffine (p 1", "elastic (p 1", "RandGaussianNoise (p 1"):
        assert step in line, line
    rows = read_csv(tmp_path / "train.csv")
    assert len(rows) == 3 and all(np.isfinite(float(r["loss"])) for r in rows)
    assert 0.0 <= float(rows[-1]["val_dice"]) <= 1.0
    for name in ("training_curve.png", "validation.png"):
        w, h, img = read_png(tmp_path / name)  # CRCs, Adler-32 (zlib) and size checked there
        assert w >= 300 and h >= 200
        assert len(np.unique(img.reshape(-1, 3), axis=0)) > 4, f"{name} is (nearly) blank"
    assert not (tmp_path / "checkpoint.pt").exists()


def test_validation_equals_monai_inference(tmp_path):
    # The trainer's validation (voxaug's C++ sliding window, argmax and Dice on the device) against
    # examples/swin_unetr/infer.py: the checkpoint in MONAI's SwinUNETR (strict load), the held-out
    # phantoms regenerated and preprocessed in Python, MONAI's sliding_window_inference and a
    # numpy-style Dice. roi 32x32x64: MONAI refuses 32^3 windows.
    pytest.importorskip("monai")
    import re
    import sys

    geometry = ["--roi", "32,32,64", "--phantom-size", "48,48,64"]
    r = run([*TINY, *geometry, "--phantom-train", "2", "--phantom-val", "2",
             "--steps", "3", "--val-every", "3", "--lr", "2e-3", "--seed", "3", "--out", str(tmp_path)])
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"validation step 3: mean Dice ([0-9.]+) \(per class: ([^)]*)\)", r.stdout)
    assert m, r.stdout
    trainer_mean = float(m.group(1))
    trainer_cls = [float("nan") if v == "-" else float(v) for v in m.group(2).split()]
    sys.path.insert(0, str(REPO / "examples" / "swin_unetr"))
    import infer

    rows = infer.main(["--checkpoint", str(tmp_path / "checkpoint.pt"), "--device", "cpu", "--seed", "3",
                       "--train-subjects", "2", "--val-subjects", "2", *geometry, "--repeats", "1"])
    assert len(rows) == 2
    for row in rows:
        assert row["argmax_differs"] == 0 and row["max_prob_diff"] <= 1e-5, row
    per = np.array([row["dice_monai"] for row in rows])  # (subjects, classes - 1), NaN: absent
    cls = np.nanmean(per, axis=0)
    np.testing.assert_allclose(cls, trainer_cls, atol=6e-4)  # the trainer prints 3 decimals
    mean = np.nanmean([np.nanmean(v) for v in per])
    assert abs(mean - trainer_mean) <= 6e-5, (mean, trainer_mean)


def test_mricron_dataset(tmp_path):
    # --dataset mricron: the preprocessed shape against a float64 numpy reference. ch2 and AAL are
    # 1 mm voxels on RAS axes, so Spacing to an integer pixdim p (MONAI keeps the first voxel's
    # centre) samples input voxel p * o exactly: the resampled image is ch2[::p, ::p, ::p];
    # ScaleIntensityRange(0, 255, clip) keeps > 0 exactly where ch2 > 0, so CropForeground's box is
    # the box of ch2[::p, ::p, ::p] > 0, padded to the roi. (MONAI itself is no exact oracle here:
    # at pixdim 3 its grid leaves 3e-15 in two voxels of a slice that is exactly 0, one slice more.)
    nib = pytest.importorskip("nibabel")
    templates = Path("/usr/share/mricron/templates")
    if not all((templates / f).is_file() for f in ("ch2.nii.gz", "aal.nii.gz")):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    ch2, aal = nib.load(templates / "ch2.nii.gz"), nib.load(templates / "aal.nii.gz")
    for img in (ch2, aal):  # the reference's premise
        np.testing.assert_array_equal(img.affine[:3, :3], np.eye(3))
    np.testing.assert_array_equal(ch2.affine, aal.affine)
    data = np.asarray(ch2.dataobj, np.float64)
    p = 4
    fg = np.nonzero(data[::p, ::p, ::p] > 0)
    expect = tuple(max(32, int(a.max() - a.min() + 1)) for a in fg)
    out = tmp_path / "out"
    r = run(["--device", "cpu", "--threads", "2", "--dataset", "mricron", "--pixdim", str(p), "--roi", "32",
             "--feature-size", "12", "--num-samples", "1", "--steps", "1", "--val-every", "1",
             "--log-every", "1", "--sw-batch-size", "8", "--out", str(out), "--no-checkpoint-files"])
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("  train "))
    f = line.split()
    assert f[1] == "ch2:" and f[3] == "x".join(map(str, data.shape)), line
    assert tuple(int(v) for v in f[6].split("x")) == expect, (line, expect)
    assert "7 classes" in r.stdout and "val: the training subject (not held out)" in r.stdout, r.stdout
    import re

    m = re.search(r"validation step 1: mean Dice ([0-9.]+) \(per class: ([^)]*)\)", r.stdout)
    assert m, r.stdout
    per = m.group(2).split()
    assert len(per) == 6 and all(v == "-" or 0.0 <= float(v) <= 1.0 for v in per), per
    rows = read_csv(out / "train.csv")
    assert len(rows) == 1 and np.isfinite(float(rows[0]["loss"]))
    assert 0.0 <= float(rows[0]["val_dice"]) <= 1.0
    for name in ("training_curve.png", "validation.png"):
        read_png(out / name)


# ---------------------------------------------------------------- the loss, AMP and clipping
# Two 32^3 patches per step (the loss's batch mean is exercised) from 32^3 phantoms (one window
# per validation).
SMALL = [*TINY, "--phantom-size", "32", "--phantom-train", "2", "--num-samples", "2"]


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory):
    """The same seed in float32 (1 step) and bf16 autocast (2 steps), with forward_check.pt's
    first-step tensors."""
    outs = {}
    for amp, steps in (("off", 1), ("bf16", 2)):
        out = tmp_path_factory.mktemp(f"amp_{amp}")
        r = run([*SMALL, "--dataset", "phantom", "--amp", amp, "--steps", str(steps), "--val-every", str(steps),
                 "--log-every", "1", "--lr", "2e-3", "--seed", "4", "--check-forward", "--no-checkpoint-files",
                 "--out", str(out)])
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"amp {amp}," in r.stdout, r.stdout
        outs[amp] = (out, torch.load(out / "forward_check.pt"), read_csv(out / "train.csv"))
    return outs


def test_dice_ce_equals_monai(first_steps):
    # The trainer's DiceCE (its own code, on the float32 logits) against MONAI's
    # DiceCELoss(to_onehot_y=True, softmax=True) on the same logits and labels, in float64:
    # rtol 1e-5 covers float32 sums over 2 x 32^3 voxels (measured: 1.4e-7).
    losses = pytest.importorskip("monai.losses")
    dice_ce = losses.DiceCELoss(to_onehot_y=True, softmax=True)
    for amp, (out, check, rows) in first_steps.items():
        logits, label, loss = check["first_logits"], check["first_label"], check["first_loss"]
        assert int(check["first_step"][0]) == 1
        assert logits.dtype == (torch.bfloat16 if amp == "bf16" else torch.float32)
        assert logits.shape == (2, 3, 32, 32, 32) and label.shape == (2, 1, 32, 32, 32)
        assert torch.isfinite(logits).all() and label.dtype == torch.uint8
        for b in range(2):  # every patch has foreground: the Dice term is not trivial
            assert len(torch.unique(label[b])) >= 2
        ref = dice_ce(logits.double(), label.long())
        assert loss.dtype == torch.float32 and loss.shape == ()
        torch.testing.assert_close(loss.double(), ref, rtol=1e-5, atol=0)
        assert abs(float(rows[0]["loss"]) - float(loss)) <= 5e-7 + 1e-6 * abs(float(loss))  # the CSV's %.6f


def test_bf16_autocast(first_steps):
    # --amp bf16 on the CPU: the same batch as float32 (the draws do not depend on AMP), logits
    # within bf16's rounding of the float32 ones (8-bit mantissa, ~0.4% per op through ~20 layers:
    # 3% of the largest logit; measured 0.8%), the first loss within 1% (measured 1e-4); finite
    # losses and no gradient scaler.
    _, f32, _ = first_steps["off"]
    out, bf, rows = first_steps["bf16"]
    assert torch.equal(bf["first_label"], f32["first_label"])
    ref = f32["first_logits"]
    diff = (bf["first_logits"].float() - ref).abs().max()
    assert diff <= 0.03 * ref.abs().max(), (diff, ref.abs().max())
    torch.testing.assert_close(bf["first_loss"], f32["first_loss"], rtol=1e-2, atol=0)
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert all(np.isfinite(float(r["loss"])) and float(r["scale"]) == 1.0 for r in rows)
    assert 0.0 <= float(rows[-1]["val_dice"]) <= 1.0


def grad_scaler_reference(scale: float, tracker: int, found_inf: list[bool]) -> tuple[list[float], int]:
    """torch.amp.GradScaler with the trainer's constants (growth 2, backoff 0.5, interval 2000),
    started from (scale, tracker): the scale after each step of `found_inf`, and the final growth
    tracker. Non-finite steps are made with an inf gradient on a dummy parameter."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.0)
    gs = torch.amp.GradScaler("cpu", init_scale=scale, growth_factor=2.0, backoff_factor=0.5,
                              growth_interval=2000)
    gs.load_state_dict({"scale": scale, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                        "_growth_tracker": tracker})
    scales = []
    for inf in found_inf:
        gs.scale(torch.ones(()))  # creates the scale tensor from the loaded state
        p.grad = torch.full((1,), float("inf") if inf else 1.0)
        gs.step(opt)
        gs.update()
        scales.append(gs.get_scale())
    return scales, int(gs.state_dict()["_growth_tracker"])


def adamw_steps(state: dict) -> set[int]:
    return {int(v[0]) for k, v in state.items() if k.startswith("adamw.") and k.endswith(".step")}


FP16 = [*TINY, "--phantom-size", "32", "--phantom-train", "2", "--dataset", "phantom", "--amp", "fp16",
        "--lr", "2e-3", "--weight-decay", "0", "--log-every", "1", "--seed", "6"]
CLIP = 1e-8


@pytest.fixture(scope="module")
def fp16_run(tmp_path_factory):
    """One fp16 step (scale 65536) with --clip 1e-8 and weight decay 0 from known weights (a
    MONAI SwinUNETR's); its checkpoint and train_state.pt are the start of the resumed runs."""
    monai_nets = pytest.importorskip("monai.networks.nets")
    root = tmp_path_factory.mktemp("fp16")
    torch.manual_seed(11)
    init = dict(monai_nets.SwinUNETR(in_channels=1, out_channels=3, feature_size=12).state_dict())
    torch.save(init, root / "init.pt")
    out = root / "first"
    r = run([*FP16, "--clip", str(CLIP), "--steps", "1", "--val-every", "1", "--init", str(root / "init.pt"),
             "--out", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "amp fp16," in r.stdout, r.stdout
    return init, out


def test_fp16_clip_after_unscaling(fp16_run):
    # AdamW's first step (LibTorch: betas 0.9, 0.999, eps 1e-8) stores exp_avg = 0.1 g and moves a
    # weight by -lr g / (|g| + eps) (weight decay 0), g the gradient after unscaling and clipping;
    # both give the clipped gradient back. clip_grad_norm_ scales to norm C N / (N + 1e-6) for an
    # unclipped norm N: C within 1e-3 for N > 1e-3. Clipping before unscaling would leave
    # C / 65536, no clipping the full gradient. The weights give g through a float32 difference
    # (1e-2: the largest moves are 3e-4 against weights of ~0.1-1).
    init, out = fp16_run
    rows = read_csv(out / "train.csv")
    state = torch.load(out / "train_state.pt")
    ckpt = torch.load(out / "checkpoint.pt")
    assert adamw_steps(state) == {1}, "the first fp16 step was skipped (found_inf at scale 65536)"
    scales, tracker = grad_scaler_reference(65536.0, 0, [False])
    assert float(rows[0]["scale"]) == pytest.approx(scales[0], rel=1e-6)
    assert float(state["scale"][0]) == scales[0] and int(state["growth_tracker"][0]) == tracker
    assert np.isfinite(float(rows[0]["loss"]))
    lr, eps = 2e-3, 1e-8
    from_state, from_weights, moved = 0.0, 0.0, 0
    for k, w in ckpt.items():
        if not w.is_floating_point():
            continue
        ea = state.get(f"adamw.{k}.exp_avg")
        if ea is not None:
            from_state += float(((ea.double() / 0.1) ** 2).sum())
        d = w.double() - init[k].double()
        assert float(d.abs().max()) < lr, k
        from_weights += float(((eps * d / (lr - d.abs())) ** 2).sum())
        moved += int((d != 0).sum())
    assert moved > 0
    assert from_state ** 0.5 == pytest.approx(CLIP, rel=1e-3)
    assert from_weights ** 0.5 == pytest.approx(CLIP, rel=1e-2)


@pytest.mark.parametrize("start_scale, skipped", [(3e38, True), (8.0, False)])
def test_fp16_grad_scaler(fp16_run, tmp_path, start_scale, skipped):
    # The scaler state of the first run's train_state.pt replaced, then --resume for one fp16 step
    # (--clip 1): at 3e38 the scaled loss (~2 x 3e38) overflows float32, so the step must be
    # skipped (weights and AdamW state unchanged) and the scale back off; at 8 the step is taken
    # and, with the growth tracker at 1999 of 2000, the scale grows. Whether the step was taken
    # is read from AdamW's step counts; the scale and tracker are then compared with torch's own
    # GradScaler from the same state.
    init, first = fp16_run
    out = tmp_path / "resumed"
    shutil.copytree(first, out)
    state = torch.load(out / "train_state.pt")
    state["scale"] = torch.tensor([start_scale], dtype=torch.float32)
    state["growth_tracker"] = torch.tensor([1999], dtype=torch.int32)
    torch.save(dict(state), out / "train_state.pt")
    r = run([*FP16, "--clip", "1", "--steps", "2", "--val-every", "2", "--resume", str(out), "--out", str(out)])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_csv(out / "train.csv")
    after = torch.load(out / "train_state.pt")
    taken = adamw_steps(after)
    assert taken == ({1} if skipped else {2}), taken
    scales, tracker = grad_scaler_reference(float(torch.tensor(start_scale, dtype=torch.float32)), 1999, [skipped])
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert float(rows[1]["scale"]) == pytest.approx(scales[0], rel=1e-5)  # CSV: %g
    assert float(after["scale"][0]) == pytest.approx(scales[0], rel=1e-7)
    assert int(after["growth_tracker"][0]) == tracker
    assert np.isfinite(float(rows[1]["loss"]))  # the loss is logged unscaled
    a, b = torch.load(first / "checkpoint.pt"), torch.load(out / "checkpoint.pt")
    same = all(torch.equal(a[k], b[k]) for k in a)
    assert same == skipped
    if skipped:  # the same weights validate to the same Dice
        assert rows[1]["val_dice"] == rows[0]["val_dice"]
        for k, v in state.items():
            if k.startswith("adamw."):
                assert torch.equal(after[k], v), k


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--dataset", "nope"], "--dataset"),
        (["--roi", "33"], "--roi"),
        (["--steps", "abc"], "--steps"),
        (["--amp", "fp8"], "--amp"),
        (["--dataset", "msd"], "--data-dir"),
        (["--frobnicate"], "--frobnicate"),
        (["--affine-prob", "1.5"], "--affine-prob"),
        (["--scale-range", "1"], "--scale-range"),
        (["--elastic-max", "-1"], "--elastic-max"),
        (["--device", "cpu", "--dataset", "msd", "--data-dir", "/nonexistent/dir"], "dataset.json"),
    ],
)
def test_bad_arguments(args, needle):
    r = run(args, timeout=60)
    assert r.returncode != 0
    assert needle in r.stderr and "error" in r.stderr.lower(), r.stderr


def test_help():
    r = run(["--help"], timeout=30)
    assert r.returncode == 0
    for flag in ("--dataset", "--amp", "--roi", "--pixdim", "--check-forward", "--heavy", "--resume", "putamen"):
        assert flag in r.stdout
