import os

import numpy as np
import pytest
import torch

import voxaug  # noqa: F401  (loads torch.ops.voxaug)

TEMPLATES = "/usr/share/mricron/templates"


def devices():
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    return out


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


def pytest_report_header(config):
    return [f"voxaug library: {voxaug.library_path}",
            f"CUDA device: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none (CUDA tests skip)'}"]
