"""A synthetic CT-like abdominal phantom: an unlimited training data set made on the device.

``phantom(batch, size, num_classes, seed, first_sample)`` returns an image (float32, Hounsfield
units) and a label map (uint8, 0 .. num_classes - 1), both (N, 1, D, H, W), in one launch from
``torch.ops.voxaug.phantom``. Subject ``i`` of a data set (``seed``, ``num_classes``) is
``phantom(1, size, num_classes, seed, first_sample=i)``; sample ``n`` of a batch is subject
``first_sample + n``, identical on the CPU and on CUDA whatever the batch split.

The phantom: air (-1000 HU) outside a body ellipsoid of soft tissue (~40 HU, label 0), inside
it ``num_classes - 1`` rotated, boundary-perturbed "organ" ellipsoids (labels 1 ..), each class
with its own size (class 1 the largest) and mean HU (distinct per class over [-100, 250]),
later classes on top; a sinusoidal texture, a smooth multiplicative bias field, and Gaussian
noise (std 15-25 HU). Intensities suit MONAI's BTCV preprocessing
``ScaleIntensityRange(a_min=-175, a_max=250, b_min=0, b_max=1, clip=True)`` unchanged. The
exact formulas and the parameter-table layout are in ``include/voxaug/phantom.h``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

__all__ = ["phantom", "phantom_params", "param_count", "HEADER", "OBJECT"]

HEADER, OBJECT = 25, 36  # floats of a table row: header, then one block per object (class)


def param_count(num_classes: int) -> int:
    """Columns of the parameter table: 25 + 36 * num_classes."""
    return HEADER + OBJECT * int(num_classes)


def _signed64(seed: int) -> int:
    seed = int(seed) & ((1 << 64) - 1)
    return seed - (1 << 64) if seed >= (1 << 63) else seed


def _size3(size: Union[int, Sequence[int]]) -> list[int]:
    if isinstance(size, int):
        return [size] * 3
    vals = [int(s) for s in size]
    if len(vals) != 3:
        raise ValueError(f"size must be an int or 3 ints (D, H, W), got {size}")
    return vals


def _device(device) -> torch.device:
    return torch.device("cpu") if device is None else torch.device(device)


def _check(batch: int, num_classes: int, first_sample: int, size=None) -> None:
    # The C++ kernels' checks, for the shape-only (fake / meta) path.
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not 2 <= num_classes <= 16:
        raise ValueError(f"num_classes must be in [2, 16], got {num_classes}")
    if first_sample < 0 or first_sample + batch > 2**32:
        raise ValueError(f"first_sample must be in [0, 2^32 - batch], got {first_sample} with batch {batch}")
    if size is not None:
        if len(size) != 3:
            raise ValueError(f"size must be [D, H, W] (3 values), got {len(size)} values {list(size)}")
        if any(s < 8 for s in size):
            raise ValueError(f"size must be >= 8 per axis, got {list(size)}")


# Shapes under FakeTensorMode (torch.compile, opcheck) and on the meta device. Registered here,
# not in C++: FakeTensorMode cannot give the outputs of a C++ Meta kernel of an op without tensor
# inputs and two outputs a device (torch_ext/phantom.cpp).
@torch.library.register_fake("voxaug::phantom")
def _phantom_fake(batch, size, num_classes, seed, first_sample=0, *, device):
    _check(batch, num_classes, first_sample, size)
    shape = (batch, 1, *size)
    return (torch.empty(shape, dtype=torch.float32, device=device),
            torch.empty(shape, dtype=torch.uint8, device=device))


@torch.library.register_fake("voxaug::phantom_params")
def _phantom_params_fake(batch, num_classes, seed, first_sample=0, *, device):
    _check(batch, num_classes, first_sample)
    return torch.empty((batch, param_count(num_classes)), dtype=torch.float32, device=device)


def phantom(batch: int, size: Union[int, Sequence[int]], num_classes: int = 5, seed: int = 0,
            first_sample: int = 0, device: Optional[Union[str, torch.device]] = None):
    """``(image, label)``: float32 HU and uint8 labels, both ``(batch, 1, *size)``, on ``device``
    (default CPU; CUDA runs on the current stream without syncing the host).

    ``seed``: any integer (used modulo 2**64). ``2 <= num_classes <= 16``, each size >= 8.
    """
    return torch.ops.voxaug.phantom(int(batch), _size3(size), int(num_classes), _signed64(seed),
                                    int(first_sample), device=_device(device))


def phantom_params(batch: int, num_classes: int = 5, seed: int = 0, first_sample: int = 0,
                   device: Optional[Union[str, torch.device]] = None) -> torch.Tensor:
    """The ``(batch, 25 + 36 * num_classes)`` float32 parameter table :func:`phantom` renders
    from (layout in ``include/voxaug/phantom.h``)."""
    return torch.ops.voxaug.phantom_params(int(batch), int(num_classes), _signed64(seed),
                                           int(first_sample), device=_device(device))
