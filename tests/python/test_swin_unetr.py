"""The LibTorch C++ SwinUNETR (examples/swin_unetr) against MONAI's SwinUNETR.

Builds nothing: runs the voxaug_swin_unetr_check program from the build dir named by
VOXAUG_BUILD_DIR (default <repo>/build) and skips when it is absent. Weights come from
torch.manual_seed + MONAI's own initialisation; both forwards run in float32 on the CPU.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

monai_nets = pytest.importorskip("monai.networks.nets")

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VOXAUG_BUILD_DIR", REPO / "build"))
CANDIDATES = [
    BUILD / "examples" / "swin_unetr" / "voxaug_swin_unetr_check",
    BUILD / "voxaug_swin_unetr_check",
]
CHECK = next((p for p in CANDIDATES if p.is_file()), None)

pytestmark = pytest.mark.skipif(
    CHECK is None,
    reason=f"voxaug_swin_unetr_check not built (looked in {BUILD}; set VOXAUG_BUILD_DIR to the "
    "CMake build dir and build the voxaug_swin_unetr_check target)",
)

RTOL = 1e-4


def write_tensor_dir(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """index.txt ("name dtype offset ndim dims...") + data.bin, as swin_unetr.h documents."""
    path.mkdir(parents=True, exist_ok=True)
    offset = 0
    with open(path / "index.txt", "w") as index, open(path / "data.bin", "wb") as data:
        for name, t in tensors.items():
            a = t.detach().cpu().contiguous().numpy()
            if a.dtype == np.int64:
                dtype = "int64"
            else:
                a = a.astype("<f4")
                dtype = "float32"
            index.write(f"{name} {dtype} {offset} {a.ndim} {' '.join(map(str, a.shape))}\n")
            b = a.tobytes(order="C")
            data.write(b)
            offset += len(b)


def read_tensor_dir(path: Path) -> dict[str, np.ndarray]:
    raw = (path / "data.bin").read_bytes()
    out = {}
    for line in (path / "index.txt").read_text().splitlines():
        f = line.split()
        name, dtype, offset, ndim = f[0], f[1], int(f[2]), int(f[3])
        shape = tuple(int(s) for s in f[4 : 4 + ndim])
        dt = np.dtype("<f4") if dtype == "float32" else np.dtype("<i8")
        n = int(np.prod(shape)) if shape else 1
        out[name] = np.frombuffer(raw, dtype=dt, count=n, offset=offset).reshape(shape)
    return out


def make_net(feature_size: int, out_channels: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = monai_nets.SwinUNETR(in_channels=1, out_channels=out_channels, feature_size=feature_size)
    # MONAI zero-initialises nothing we rely on, but make every parameter non-trivial so that a
    # wrong transpose or key cannot hide behind zeros or ones (LayerNorm weights start at 1).
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return net.eval()


def run_check(tmp: Path, net: torch.nn.Module, x: torch.Tensor, *extra: str) -> tuple[dict, str]:
    wdir, idir, odir = tmp / "weights", tmp / "input", tmp / "output"
    write_tensor_dir(wdir, net.state_dict())
    write_tensor_dir(idir, {"input": x})
    odir.mkdir(parents=True, exist_ok=True)
    cmd = [str(CHECK), "--weights", str(wdir), "--input", str(idir), "--output", str(odir), *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout}\n{res.stderr}"
    return read_tensor_dir(odir), res.stdout


def max_rel_err(got: np.ndarray, ref: torch.Tensor) -> float:
    r = ref.detach().numpy().astype(np.float64)
    g = got.astype(np.float64)
    assert g.shape == r.shape, (g.shape, r.shape)
    # Relative to the output's scale: elementwise |diff| / max|ref|.
    return float(np.max(np.abs(g - r)) / max(np.max(np.abs(r)), 1e-30))


CASES = [
    # (feature_size, out_channels, spatial shape)
    (12, 3, (64, 64, 64)),
    (12, 14, (96, 96, 96)),
    (48, 14, (64, 64, 64)),
]


@pytest.mark.parametrize("feature_size,out_channels,shape", CASES)
def test_forward_matches_monai(tmp_path, feature_size, out_channels, shape):
    net = make_net(feature_size, out_channels, seed=feature_size + out_channels)
    torch.manual_seed(7)
    x = torch.randn(1, 1, *shape)
    with torch.no_grad():
        ref = net(x)
    got, stdout = run_check(tmp_path, net, x, "--feature-size", str(feature_size))
    err = max_rel_err(got["output"], ref)
    print(f"feature_size={feature_size} out={out_channels} shape={shape}: max rel err {err:.3e}")
    assert err <= RTOL
    nparams = sum(p.numel() for p in net.parameters())
    m = re.search(r"^parameters (\d+)$", stdout, re.M)
    assert m and int(m.group(1)) == nparams, (stdout, nparams)
    m = re.search(r"^loaded (\d+)$", stdout, re.M)
    assert m and int(m.group(1)) == len(net.state_dict()), stdout


def test_hidden_states_odd_shape_match_monai(tmp_path):
    """swinViT alone on 70x64x66: patch-embed padding, window padding, odd PatchMerging padding and
    window clamping at the last stage (MONAI's full SwinUNETR rejects sizes not divisible by 32)."""
    net = make_net(12, 3, seed=3)
    torch.manual_seed(11)
    x = torch.randn(1, 1, 70, 64, 66)
    with torch.no_grad():
        ref = net.swinViT(x, True)
    got, _ = run_check(tmp_path, net, x, "--hidden-states")
    for i, r in enumerate(ref):
        err = max_rel_err(got[f"hs{i}"], r)
        print(f"hidden state {i} {tuple(r.shape)}: max rel err {err:.3e}")
        assert err <= RTOL


def test_state_dict_keys_and_shapes_equal_monai(tmp_path):
    net = make_net(24, 2, seed=0)
    wdir = tmp_path / "weights"
    write_tensor_dir(wdir, net.state_dict())
    bdir = tmp_path / "buffers"
    bdir.mkdir()
    res = subprocess.run([str(CHECK), "--weights", str(wdir), "--list-keys", "--output", str(bdir)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    # Buffers (relative_position_index) as the C++ constructor computes them, not as loaded.
    buffers = read_tensor_dir(bdir)
    ref_buffers = dict(net.named_buffers())
    assert sorted(buffers) == sorted(ref_buffers) and len(buffers) == 8
    for k, b in ref_buffers.items():
        assert buffers[k].dtype == np.int64 and np.array_equal(buffers[k], b.numpy()), k
    cpp = {}
    for line in res.stdout.splitlines():
        if line.startswith("key "):
            f = line.split()
            cpp[f[1]] = tuple(int(s) for s in f[2:])
    py = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert sorted(set(py) - set(cpp)) == [] and sorted(set(cpp) - set(py)) == []
    assert cpp == py


def test_rejects_missing_and_extra_keys(tmp_path):
    net = make_net(12, 3, seed=1)
    sd = dict(net.state_dict())
    sd.pop("decoder3.conv_block.conv2.conv.weight")
    sd["extra.weight"] = torch.zeros(3)
    wdir = tmp_path / "weights"
    write_tensor_dir(wdir, sd)
    res = subprocess.run([str(CHECK), "--weights", str(wdir), "--list-keys"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0
    assert "missing key: decoder3.conv_block.conv2.conv.weight" in res.stderr
    assert "unexpected key: extra.weight" in res.stderr


def test_rejects_input_not_divisible_by_32(tmp_path):
    net = make_net(12, 3, seed=2)
    wdir, idir, odir = tmp_path / "w", tmp_path / "i", tmp_path / "o"
    write_tensor_dir(wdir, net.state_dict())
    write_tensor_dir(idir, {"input": torch.zeros(1, 1, 70, 64, 64)})
    odir.mkdir()
    res = subprocess.run([str(CHECK), "--weights", str(wdir), "--input", str(idir), "--output",
                          str(odir)], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "divisible by 2**5 = 32" in res.stderr


@pytest.mark.parametrize("checkpoint", [False, True], ids=["plain", "use_checkpoint"])
def test_gradients_match_monai(tmp_path, checkpoint):
    """Backward of the C++ model (with and without its gradient checkpointing) against MONAI's
    autograd gradients for the input and every parameter."""
    net = make_net(12, 3, seed=5)
    torch.manual_seed(13)
    x = torch.randn(1, 1, 32, 64, 32, requires_grad=True)
    y = net(x)
    g = torch.randn_like(y)
    y.backward(g)
    wdir, idir, odir = tmp_path / "weights", tmp_path / "input", tmp_path / "output"
    write_tensor_dir(wdir, net.state_dict())
    write_tensor_dir(idir, {"input": x.detach(), "grad_output": g})
    odir.mkdir()
    cmd = [str(CHECK), "--weights", str(wdir), "--input", str(idir), "--output", str(odir),
           "--backward"] + (["--checkpoint"] if checkpoint else [])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout}\n{res.stderr}"
    got = read_tensor_dir(odir)
    assert max_rel_err(got["output"], y) <= RTOL
    worst = ("grad_input", max_rel_err(got["grad_input"], x.grad))
    named = dict(net.named_parameters())
    assert sorted(k[5:] for k in got if k.startswith("grad.")) == sorted(named)
    # encoder1's 1x1x1 residual conv has one input channel and feeds an instance norm, so the
    # loss is invariant to its per-channel scale: its exact gradient is ~0 (eps only) and both
    # sides hold rounding noise (|grad| ~ 1 against ~400 for its neighbours). It is held to the
    # model-wide gradient scale instead of its own.
    scale_free = {"encoder1.layer.conv3.conv.weight"}
    global_scale = max(float(p.grad.abs().max()) for p in named.values())
    for k, p in named.items():
        if k in scale_free:
            diff = np.max(np.abs(got["grad." + k].astype(np.float64) - p.grad.double().numpy()))
            assert diff <= 1e-4 * global_scale, (k, diff, global_scale)
            continue
        err = max_rel_err(got["grad." + k], p.grad)
        worst = max(worst, (k, err), key=lambda t: t[1])
    print(f"checkpoint={checkpoint}: worst gradient max rel err {worst[1]:.3e} ({worst[0]})")
    assert worst[1] <= 1e-3
