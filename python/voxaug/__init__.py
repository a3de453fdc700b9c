"""voxaug: GPU-native augmentation kernels for 3D medical images.

Importing the package loads the ``torch.ops.voxaug`` custom-op library. The transforms
in :mod:`voxaug.transforms` mirror MONAI's names and arguments.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

__version__ = "0.1.0"


def _library_path() -> Path:
    env = os.environ.get("VOXAUG_LIBRARY")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "lib" / "libvoxaug_torch.so"


def _load() -> Path:
    path = _library_path()
    if not path.is_file():
        raise ImportError(
            f"voxaug: ops library not found at {path}. Build it with the README's test command "
            "(scripts/test.sh), or point VOXAUG_LIBRARY at libvoxaug_torch.so."
        )
    torch.ops.load_library(str(path))
    return path


library_path = _load()

from . import ops  # noqa: E402
from . import transforms  # noqa: E402
from . import spatial  # noqa: E402
from . import deform  # noqa: E402
from . import filter  # noqa: E402  (voxaug.filter: the Gaussian smoothing family)
from . import crop  # noqa: E402
from . import stats  # noqa: E402
from . import degrade  # noqa: E402  (voxaug.degrade: coarse dropout, simulated low resolution)
from . import inferers  # noqa: E402  (sliding-window inference)
from . import phantom  # noqa: E402  (voxaug.phantom: synthetic CT-like training phantom)
from . import torchio  # noqa: E402  (voxaug.torchio: TorchIO's transform names in one namespace)

__all__ = ["ops", "transforms", "spatial", "deform", "filter", "crop", "stats", "degrade", "inferers", "phantom", "torchio", "library_path", "__version__"]
