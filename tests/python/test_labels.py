"""TorchIO's label-map and shape utilities (voxaug.labels) against TorchIO's."""
import os

import numpy as np
import pytest
import torch

from conftest import TEMPLATES, devices
from voxaug.labels import EnsureShapeMultiple, Mask, OneHot, RemapLabels, RemoveLabels, SequentialLabels

tio = pytest.importorskip("torchio")


def labels(shape=(1, 9, 10, 11), high=6, seed=0, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g).to(dtype)


def tio_label(transform, lab, **extra):
    subject = tio.Subject(l=tio.LabelMap(tensor=lab.clone()), **extra)
    return transform(subject)["l"].data


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8, torch.float32])
def test_one_hot_remap_remove_sequential_equal_torchio(dtype):
    lab = labels(dtype=dtype)
    for n in (6, -1):
        assert torch.equal(OneHot(n)(lab), tio_label(tio.OneHot(n), lab))
    rm = {1: 7, 3: 1, 5: 0}
    got = RemapLabels(rm)(lab)
    assert got.dtype == dtype and torch.equal(got, tio_label(tio.RemapLabels(rm), lab))
    with pytest.raises(ValueError, match="dictionary"):
        RemapLabels([3, 2, 1])
    assert torch.equal(RemoveLabels([2, 4], background_label=9)(lab),
                       tio_label(tio.RemoveLabels([2, 4], background_label=9), lab))
    spread = lab * 3 + 10
    assert torch.equal(SequentialLabels()(spread), tio_label(tio.SequentialLabels(), spread))


def test_masks_batches_and_dicts():
    lab = labels()
    img = torch.rand(1, 9, 10, 11)
    rm = {1: 7, 3: 1, 5: 0}
    left = torch.zeros_like(lab, dtype=torch.bool)
    left[:, : 9 // 2] = True  # TorchIO's 'Left' half of a RAS image
    assert torch.equal(RemapLabels(rm, masking_method=left)(lab), tio_label(tio.RemapLabels(rm, masking_method="Left"),
                                                                           lab))
    for labs in (None, [1, 2]):
        s = tio.Subject(img=tio.ScalarImage(tensor=img.clone()), seg=tio.LabelMap(tensor=lab.clone()))
        ref = tio.Mask("seg", outside_value=-1, labels=labs)(s)["img"].data
        got = Mask("seg", outside_value=-1, labels=labs, label_keys=("seg",))({"img": img, "seg": lab})
        assert torch.equal(got["img"], ref) and got["seg"] is lab
        assert torch.equal(Mask(lab, outside_value=-1, labels=labs)(img), ref)  # the label map itself
    # A batch: each sample as TorchIO would transform it alone (SequentialLabels per sample).
    batch = torch.stack([labels(seed=s) * (s + 1) for s in range(3)])
    seq = SequentialLabels()(batch)
    for n in range(3):
        assert torch.equal(seq[n], tio_label(tio.SequentialLabels(), batch[n]))
    assert torch.equal(OneHot(6)(labels(seed=1)[None])[0], OneHot(6)(labels(seed=1)))
    d = RemapLabels(rm, label_keys=("seg",))({"img": img, "seg": lab})
    assert d["img"] is img and torch.equal(d["seg"], tio_label(tio.RemapLabels(rm), lab))
    with pytest.raises(RuntimeError, match="channels must be 1"):
        OneHot(3)(torch.zeros(2, 4, 4, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="names no label map"):
        Mask("seg")(img)


def test_real_atlas_remap_and_mask(ch2):
    path = os.path.join(TEMPLATES, "aal.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    nib = pytest.importorskip("nibabel")
    aal = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.int16))[None, ::2, ::2, ::2].contiguous()
    values = torch.unique(aal).tolist()
    rm = {v: (i * 7) % 50 for i, v in enumerate(values)}  # every region, one table lookup
    assert torch.equal(RemapLabels(rm)(aal), tio_label(tio.RemapLabels(rm), aal))
    assert torch.equal(SequentialLabels()(aal), tio_label(tio.SequentialLabels(), aal))
    img = ch2[0][:, ::2, ::2, ::2].float()
    s = tio.Subject(img=tio.ScalarImage(tensor=img.clone()), seg=tio.LabelMap(tensor=aal.clone()))
    ref = tio.Mask("seg", labels=values[1:10])(s)["img"].data
    assert torch.equal(Mask("seg", labels=values[1:10], label_keys=("seg",))({"img": img, "seg": aal})["img"], ref)


@pytest.mark.parametrize("method", ["pad", "crop"])
@pytest.mark.parametrize("mult", [8, (4, 3, 5), 1])
def test_ensure_shape_multiple_equals_torchio(method, mult):
    img = torch.rand(2, 9, 10, 11)
    got = EnsureShapeMultiple(mult, method=method)(img)
    assert torch.equal(got, tio.EnsureShapeMultiple(mult, method=method)(img.clone()))
    d = EnsureShapeMultiple(mult, method=method)({"img": img, "lab": labels(), "n": 1})
    assert d["img"].shape == got.shape and d["lab"].shape[1:] == got.shape[1:] and d["n"] == 1
    with pytest.raises(ValueError):
        EnsureShapeMultiple(0)
    with pytest.raises(ValueError, match="Method"):
        EnsureShapeMultiple(8, method="resize")


@pytest.mark.parametrize("device", devices())
def test_device(device):
    lab = labels().to(device)
    for t in (OneHot(6), RemapLabels({1: 7, 3: 1}), RemoveLabels([2])):
        assert torch.equal(t(lab).cpu(), t(lab.cpu()))


# ---------------- TorchIO KeepLargestComponent, Contour ----------------
def _blobs(shape, density, seed, high=2, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=g) < density).to(dtype)
    if high > 2:
        x = x * torch.randint(1, high, shape, generator=g).to(dtype)
    return x


@pytest.mark.parametrize("device", devices())
def test_keep_largest_component_and_contour_equal_torchio(device):
    """Random masks of several densities (many small face-connected components, ties among the
    largest, other label values) and the real atlas (aal, int16): each sample as TorchIO's
    SimpleITK filters give it."""
    from voxaug.labels import Contour, KeepLargestComponent

    cases = [_blobs((1, 9, 10, 11), d, s, high=h) for s, (d, h) in enumerate(
        [(0.2, 2), (0.35, 2), (0.5, 4), (0.7, 3), (0.05, 2)])]
    cases.append(torch.zeros(1, 3, 4, 1, dtype=torch.uint8))
    # Two single voxels: C order puts (0, 3, 0) first, SimpleITK's raster order (first axis fastest)
    # (2, 0, 0), which TorchIO keeps.
    cases[-1][0, 0, 3, 0] = 1
    cases[-1][0, 2, 0, 0] = 1
    for lab in cases:
        for t, ref in ((KeepLargestComponent(), tio.KeepLargestComponent()), (Contour(), tio.Contour())):
            want = ref(tio.LabelMap(tensor=lab.clone())).data
            got = t(lab.to(device)).cpu()
            assert got.dtype == want.dtype and torch.equal(got, want), (type(t).__name__, lab.shape)
    batch = torch.stack(cases[:3])
    assert torch.equal(KeepLargestComponent()(batch.to(device)).cpu(),
                       torch.stack([KeepLargestComponent()(c) for c in cases[:3]]))
    path = os.path.join(TEMPLATES, "aal.nii.gz")
    if os.path.exists(path):
        import nibabel as nib

        aal = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.int16))[None, 40:120, 50:150, 30:110]
        for t, ref in ((KeepLargestComponent(), tio.KeepLargestComponent()), (Contour(), tio.Contour())):
            want = ref(tio.LabelMap(tensor=aal.clone())).data
            assert torch.equal(t(aal.to(device)).cpu(), want), type(t).__name__
    d = Contour(label_keys=["seg"])({"seg": cases[0], "img": cases[0].float()})
    assert torch.equal(d["seg"], Contour()(cases[0])) and torch.equal(d["img"], cases[0].float())
    with pytest.raises(RuntimeError, match="number of input channels must be 1"):
        KeepLargestComponent()(torch.zeros(2, 3, 3, 3, dtype=torch.uint8))
