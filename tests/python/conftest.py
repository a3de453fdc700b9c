import contextlib
import os
import random
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import voxaug  # noqa: F401  (loads torch.ops.voxaug)

TEMPLATES = "/usr/share/mricron/templates"


@pytest.fixture(autouse=True)
def _seeded_rngs(request):
    """Every test starts from global RNG states fixed by its own id (torch, numpy, random), so its
    unseeded draws are the same in every run, alone or in the full suite, in any order."""
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    yield


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out


def load_template(name: str):
    """A mricron-data volume as a (1, X, Y, Z) tensor of its stored dtype, and its affine (the
    test skips when the package is not installed)."""
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, name)
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    img = nib.load(path)
    return torch.from_numpy(np.asarray(img.dataobj).copy())[None], img.affine


@pytest.fixture(scope="session")
def ch2():
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "ch2.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed (apt-get install mricron-data)")
    img = nib.load(path)
    data = np.asarray(img.dataobj)
    assert data.dtype == np.uint8 and data.shape == (181, 217, 181)
    return torch.from_numpy(data.copy())[None], img.affine


@pytest.fixture
def resample_launches(monkeypatch):
    """Counts voxaug.ops.resample launches (a one-element list)."""
    from voxaug import ops

    count = [0]
    real = ops.resample

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "resample", counting)
    return count


def count_calls(monkeypatch, *names) -> dict:
    """Wraps voxaug.ops.<name> for each name; the returned dict counts their calls."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(voxaug.ops, name)

        def counting(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(voxaug.ops, name, counting)
    return calls


def dropout_mask(shape, boxes, count, dropout_holes):
    """The voxels RandCoarseDropout fills in one sample of spatial `shape[1:]`: inside its first
    `count` half-open boxes (d0, h0, w0, d1, h1, w1), or outside them without dropout_holes."""
    m = torch.zeros(shape[1:], dtype=torch.bool)
    for b in boxes[:count].tolist():
        m[b[0]:b[3], b[1]:b[4], b[2]:b[5]] = True
    return m if dropout_holes else ~m


@contextlib.contextmanager
def sync_is_error():
    """torch.cuda.set_sync_debug_mode("error") for the block (any host sync raises); the previous
    mode afterwards."""
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def load_test_shim(name: str):
    """Loads the test-only op library `lib<name>.so` (tests/torch/*_shim.cpp) from the CMake build
    dir (VOXAUG_BUILD_DIR, default <repo>/build). Returns (module-level skip mark, path or None):
    the tests skip with a clear reason when the target was not built."""
    repo = Path(__file__).resolve().parents[2]
    build = Path(os.environ.get("VOXAUG_BUILD_DIR", repo / "build"))
    shim = next((p for p in (build / "tests" / f"lib{name}.so", build / f"lib{name}.so") if p.is_file()), None)
    if shim is not None:
        torch.ops.load_library(str(shim))  # after `import voxaug`: the shim links the ops library
    mark = pytest.mark.skipif(shim is None, reason=f"lib{name}.so not built (looked in {build}/tests; set "
                              f"VOXAUG_BUILD_DIR to the CMake build dir and build the {name} target)")
    return mark, shim


def pytest_report_header(config):
    return [f"voxaug library: {voxaug.library_path}",
            f"CUDA device: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none (CUDA tests skip)'}"]
