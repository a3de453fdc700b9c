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


def pytest_report_header(config):
    return [f"voxaug library: {voxaug.library_path}",
            f"CUDA device: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none (CUDA tests skip)'}"]
