"""Connected components and the label post-processing built on them (voxaug.post) against
scipy.ndimage.label, MONAI's KeepLargestConnectedComponent / FillHoles (skimage / scipy), and
naive numpy; the op through torch.library.opcheck; the CUDA path against the CPU twin."""
import os

import numpy as np
import pytest
import torch

from conftest import TEMPLATES, devices, sync_is_error
from voxaug import ops
from voxaug.post import (FillHoles, FillHolesd, KeepLargestConnectedComponent, KeepLargestConnectedComponentd,
                         RemoveSmallObjects, RemoveSmallObjectsd, connected_components, largest_components_mask)

ndi = pytest.importorskip("scipy.ndimage")


def canonical(mask: np.ndarray, connectivity: int) -> np.ndarray:
    """scipy's labels of a 3-D mask renamed to 1 + the first voxel's C-order index."""
    lab, n = ndi.label(mask, structure=ndi.generate_binary_structure(3, connectivity))
    flat = lab.ravel()
    first = np.full(n + 1, flat.size, dtype=np.int64)
    fg = np.flatnonzero(flat)
    np.minimum.at(first, flat[fg], fg)
    out = np.zeros(flat.size, dtype=np.int64)
    out[fg] = first[flat[fg]] + 1
    return out.reshape(mask.shape)


def rand_mask(shape, density, seed):
    return np.random.default_rng(seed).random(shape) < density


@pytest.mark.parametrize("connectivity", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 9, 11, 7), (1, 1, 70, 9, 8), (3, 1, 1, 1, 13), (1, 2, 40, 1, 33)])
@pytest.mark.parametrize("density", [0.2, 0.5, 0.85])
def test_connected_components_equal_scipy(connectivity, shape, density):
    m = rand_mask(shape, density, seed=connectivity * 7 + shape[2])
    got = ops.connected_components(torch.from_numpy(m), connectivity)
    assert got.dtype == torch.int32 and got.shape == m.shape
    for n in range(shape[0]):
        for c in range(shape[1]):
            np.testing.assert_array_equal(got[n, c].numpy(), canonical(m[n, c], connectivity))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float32, torch.float16, torch.float64])
def test_connected_components_dtypes_views_and_edges(dtype):
    m = rand_mask((1, 2, 12, 10, 9), 0.5, seed=4)
    x = torch.from_numpy(m).to(dtype) * 3
    if dtype.is_floating_point:
        x[x != 0] = -0.5
        x[0, 0, 0, 0, 0] = float("nan")  # NaN is foreground
        m = m.copy()
        m[0, 0, 0, 0, 0] = True
    t = x.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)  # a non-contiguous view
    assert not t.is_contiguous()
    got = connected_components(t)
    for c in range(2):
        np.testing.assert_array_equal(got[0, c].numpy(), canonical(m[0, c], 3))
    assert torch.equal(connected_components(x[0]), got[0])  # (C, D, H, W)
    assert torch.equal(connected_components(torch.ones(1, 1, 3, 4, 5)), torch.ones(1, 1, 3, 4, 5, dtype=torch.int32))
    assert connected_components(torch.zeros(1, 1, 3, 4, 5)).abs().sum() == 0
    assert ops.connected_components(torch.zeros(0, 1, 3, 4, 5)).shape == (0, 1, 3, 4, 5)


def test_connected_components_opcheck_and_errors():
    m = torch.from_numpy(rand_mask((2, 1, 6, 7, 5), 0.5, 1))
    torch.library.opcheck(torch.ops.voxaug.connected_components.default, (m, 2))
    with pytest.raises(ValueError, match="connectivity"):
        ops.connected_components(m, 0)
    with pytest.raises(ValueError, match="5-D"):
        ops.connected_components(m[0], 3)
    with pytest.raises(ValueError, match="connectivity"):
        connected_components(m, 4)


def naive_keep(mask: np.ndarray, connectivity: int, k: int) -> np.ndarray:
    """The k largest components, ties to the component that starts first (numpy, float-free)."""
    lab = canonical(mask, connectivity)
    ids, counts = np.unique(lab[lab > 0], return_counts=True)
    order = sorted(zip(-counts, ids))[:k]
    return np.isin(lab, [i for _, i in order])


@pytest.mark.parametrize("connectivity", [1, 3])
@pytest.mark.parametrize("k", [1, 2, 5, 12])
def test_largest_components_mask_equals_naive(connectivity, k):
    m = rand_mask((3, 2, 11, 12, 10), 0.3, seed=k)
    got = largest_components_mask(torch.from_numpy(m), connectivity, k)
    for n in range(3):
        for c in range(2):
            np.testing.assert_array_equal(got[n, c].numpy(), naive_keep(m[n, c], connectivity, k))


def test_largest_components_op_ties_opcheck_and_errors():
    # Two components of 3 voxels and one of 2: among equal sizes the one that starts first.
    m = torch.zeros(1, 1, 1, 3, 8, dtype=torch.bool)
    m[0, 0, 0, 0, 5:8] = True  # first voxel 5
    m[0, 0, 0, 2, 0:3] = True  # first voxel 16, the same size
    m[0, 0, 0, 2, 6:8] = True  # 2 voxels
    lab = ops.connected_components(m, 1)
    assert torch.equal(ops.largest_components(lab, 1), lab == 6)
    assert torch.equal(ops.largest_components(lab, 2), (lab == 6) | (lab == 17))
    assert torch.equal(ops.largest_components(lab, 9), m)  # fewer components than asked: all
    assert not ops.largest_components(torch.zeros(2, 1, 3, 3, 3, dtype=torch.int32)).any()
    assert ops.largest_components(torch.zeros(0, 1, 3, 3, 3, dtype=torch.int32)).shape == (0, 1, 3, 3, 3)
    big = ops.connected_components(torch.from_numpy(rand_mask((2, 1, 7, 6, 5), 0.4, 3)), 3)
    torch.library.opcheck(torch.ops.voxaug.largest_components.default, (big, 3))
    with pytest.raises(ValueError, match="num_components"):
        ops.largest_components(lab, 0)
    with pytest.raises(ValueError, match="int32"):
        ops.largest_components(lab.long(), 1)
    with pytest.raises(ValueError, match="5-D"):
        ops.largest_components(lab[0], 1)
    bad = lab.clone()
    bad[0, 0, 0, 0, 6] = 2  # voxel 1 is background, so label 2 is not canonical
    with pytest.raises(ValueError, match="connected_components output"):
        ops.largest_components(bad, 1)
    bad = lab.clone()
    bad[0, 0, 0, 1, 1] = -4
    with pytest.raises(ValueError, match="negative label"):
        ops.largest_components(bad, 1)


def blobs(seed: int, shape=(24, 26, 22)) -> np.ndarray:
    """(1, D, H, W) label map: balls of labels 1-3 (two of label 1), a hollow ball of label 2
    with a cavity holding a label-1 voxel, and scattered single voxels (islands)."""
    rng = np.random.default_rng(seed)
    g = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1)
    out = np.zeros(shape, np.int64)
    for lab, r in ((1, 4.5), (3, 5.0), (1, 3.0)):
        c = rng.uniform(5, np.array(shape) - 5)
        out[((g - c) ** 2).sum(-1) <= r * r] = lab
    c = np.array(shape) / 2 + rng.uniform(-1, 1, 3)
    d2 = ((g - c) ** 2).sum(-1)
    out[(d2 <= 36) & (d2 > 6)] = 2
    out[(d2 <= 6)] = 0
    out[tuple(np.round(c).astype(int))] = 1
    islands = rng.random(shape) < 0.01
    out[islands & (out == 0)] = rng.integers(1, 4, int((islands & (out == 0)).sum()))
    return out[None]


def tie_free(label_map: np.ndarray, labels, connectivity: int, k: int) -> bool:
    """Whether the k-th and (k+1)-th largest components of every label differ in size (MONAI's
    argsort leaves ties to numpy's unstable sort)."""
    for lab in labels:
        cc = canonical(label_map == lab, connectivity)
        sizes = sorted(np.unique(cc[cc > 0], return_counts=True)[1], reverse=True)
        if len(sizes) > k and sizes[k - 1] == sizes[k]:
            return False
    return True


@pytest.mark.parametrize("kw", [dict(), dict(applied_labels=[1, 2]), dict(independent=False, applied_labels=[1, 3]),
                                dict(connectivity=1), dict(connectivity=2, num_components=2)])
def test_keep_largest_equals_monai(kw):
    mt = pytest.importorskip("monai.transforms")
    pytest.importorskip("skimage")
    for seed in range(20):
        x = blobs(seed)
        if tie_free(x[0], [1, 2, 3], kw.get("connectivity") or 3, kw.get("num_components", 1)):
            break
    else:
        pytest.fail("no tie-free random label map in 20 draws")
    img = torch.from_numpy(x).float()
    got = KeepLargestConnectedComponent(**kw)(img)
    ref = torch.as_tensor(mt.KeepLargestConnectedComponent(**kw)(img.clone()))
    assert torch.equal(got, ref) and not torch.equal(got, img)
    for dtype in (torch.uint8, torch.int64):  # integer label maps (voxaug multiplies by the kept mask)
        lab = img.to(dtype)
        got = KeepLargestConnectedComponent(**kw)(lab)
        assert got.dtype == dtype and torch.equal(got, ref.to(dtype))
    onehot = torch.nn.functional.one_hot(img[0].long(), 4).permute(3, 0, 1, 2).to(torch.uint8)
    got = KeepLargestConnectedComponent(**kw)(onehot)
    ref = torch.as_tensor(mt.KeepLargestConnectedComponent(**kw)(onehot.clone()))
    assert torch.equal(got, ref) and got.dtype == torch.uint8
    # A batch: each sample as MONAI transforms it alone.
    batch = torch.stack([img, img.flip(1)])
    got = KeepLargestConnectedComponentd("seg", **kw)({"seg": batch})["seg"]
    for n in range(2):
        assert torch.equal(got[n], torch.as_tensor(mt.KeepLargestConnectedComponent(**kw)(batch[n].clone())))


@pytest.mark.parametrize("kw", [dict(), dict(connectivity=1), dict(applied_labels=[2])])
def test_fill_holes_equals_monai(kw):
    mt = pytest.importorskip("monai.transforms")
    y = torch.from_numpy(blobs(5)).float()
    got = FillHoles(**kw)(y)
    ref = torch.as_tensor(mt.FillHoles(**kw)(y.clone()))
    assert torch.equal(got, ref) and not torch.equal(got, y)
    onehot = torch.nn.functional.one_hot(y[0].long(), 4).permute(3, 0, 1, 2).float()
    assert torch.equal(FillHolesd("s", **kw)({"s": onehot})["s"],
                       torch.as_tensor(mt.FillHoles(**kw)(onehot.clone())))


def test_real_atlas(ch2):
    mt = pytest.importorskip("monai.transforms")
    pytest.importorskip("skimage")
    nib = pytest.importorskip("nibabel")
    path = os.path.join(TEMPLATES, "aal.nii.gz")
    if not os.path.exists(path):
        pytest.skip("mricron-data not installed")
    aal = torch.from_numpy(np.asarray(nib.load(path).dataobj).astype(np.int16))[None, ::2, ::2, ::2].contiguous()
    # Brain mask of ch2 with islands: the largest component is the brain.
    brain = (ch2[0][:, ::2, ::2, ::2] > 40).to(torch.uint8)
    got = KeepLargestConnectedComponent(applied_labels=[1])(brain)
    ref = torch.as_tensor(mt.KeepLargestConnectedComponent(applied_labels=[1])(brain.clone()))
    assert torch.equal(got, ref) and int((brain - got).sum()) > 0
    labels = [int(v) for v in torch.unique(aal).tolist()[1:6]]
    if tie_free(aal[0].numpy(), labels, 3, 1):
        got = KeepLargestConnectedComponent(applied_labels=labels)(aal)
        assert torch.equal(got, torch.as_tensor(mt.KeepLargestConnectedComponent(applied_labels=labels)(aal.clone())))
    got = FillHoles(applied_labels=labels[:2])(aal)
    assert torch.equal(got, torch.as_tensor(mt.FillHoles(applied_labels=labels[:2])(aal.clone())))


@pytest.mark.parametrize("device", devices())
def test_device_matches_cpu(device):
    m = torch.from_numpy(rand_mask((2, 2, 30, 25, 20), 0.45, 9))
    for conn in (1, 2, 3):
        assert torch.equal(ops.connected_components(m.to(device), conn).cpu(), ops.connected_components(m, conn))
    x = torch.from_numpy(np.random.default_rng(2).integers(0, 3, (2, 1, 20, 21, 22)))
    for t in (KeepLargestConnectedComponent(applied_labels=[1, 2], num_components=2), FillHoles(applied_labels=[1])):
        assert torch.equal(t(x.to(device)).cpu(), t(x))
    sparse = torch.from_numpy(rand_mask((2, 2, 30, 25, 20), 0.2, 9))
    lab = ops.connected_components(sparse, 1)  # many components, ties among the small ones
    for k in (1, 3, 9, 40):  # 9, 40: the device's top-k branch
        assert torch.equal(ops.largest_components(lab.to(device), k).cpu(), ops.largest_components(lab, k))
    assert torch.equal(ops.component_sizes(lab.to(device)).cpu(), ops.component_sizes(lab))
    for dt in (torch.float16, torch.bfloat16, torch.int64, torch.float64):  # other mask dtypes, strided
        t = (m.to(dt) * 3).permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
        assert torch.equal(ops.connected_components(t.to(device), 2).cpu(), ops.connected_components(m, 2))
        assert torch.equal(ops.distance_transform_edt(t.to(device), (0.7, 1.3, 2.45)).cpu(),
                           ops.distance_transform_edt(m, (0.7, 1.3, 2.45)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (sync checks need one)")
def test_cuda_no_host_sync():
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 3, (2, 1, 20, 21, 22))).cuda()
    torch.cuda.synchronize()
    onehot = torch.nn.functional.one_hot(x[:, 0].long(), 3).permute(0, 4, 1, 2, 3).contiguous()
    torch.cuda.synchronize()
    with sync_is_error():
        a = KeepLargestConnectedComponent(applied_labels=[1, 2])(x)
        b = FillHoles(applied_labels=[1, 2])(x)
        c = KeepLargestConnectedComponent(applied_labels=[1, 2], is_onehot=True)(onehot)
        d = KeepLargestConnectedComponent(applied_labels=[1, 2], is_onehot=True, independent=False)(onehot)
        e = FillHoles(applied_labels=[1, 2])(onehot)
    torch.cuda.synchronize()
    assert all(t.is_cuda for t in (a, b, c, d, e))


def test_fill_holes_cavities_open_through_each_face():
    """A label-1 wall around a cavity that opens through one face only: open, so not filled; the
    same cavity closed: filled (and MONAI's result equal)."""
    mt = pytest.importorskip("monai.transforms")
    shape = (9, 10, 11)
    for axis in range(3):
        for end in (0, -1):
            x = np.ones(shape, np.int64)
            inner = tuple(slice(2, s - 2) for s in shape)
            x[inner] = 0  # a cavity, closed
            closed = torch.from_numpy(x.copy())[None]
            sl = [slice(2, s - 2) for s in shape]
            sl[axis] = slice(0, 3) if end == 0 else slice(shape[axis] - 3, shape[axis])
            x[tuple(sl)] = 0  # a channel from the cavity to one face
            opened = torch.from_numpy(x)[None]
            got_open, got_closed = FillHoles()(opened), FillHoles()(closed)
            assert torch.equal(got_open, opened), (axis, end)
            assert bool((got_closed == 1).all()), (axis, end)
            assert torch.equal(got_open, torch.as_tensor(mt.FillHoles()(opened.clone())))
            assert torch.equal(got_closed, torch.as_tensor(mt.FillHoles()(closed.clone())))


def test_component_sizes_equal_numpy():
    m = rand_mask((2, 3, 13, 9, 11), 0.35, seed=8)
    lab = ops.connected_components(torch.from_numpy(m), 2)
    got = ops.component_sizes(lab)
    assert got.dtype == torch.int32 and got.shape == m.shape
    for n in range(2):
        for c in range(3):
            ref = canonical(m[n, c], 2)
            sizes = np.bincount(ref.ravel())
            np.testing.assert_array_equal(got[n, c].numpy(), np.where(ref > 0, sizes[ref], 0))
    torch.library.opcheck(torch.ops.voxaug.component_sizes.default, (lab,))
    with pytest.raises(ValueError, match="int32"):
        ops.component_sizes(lab.float())
    bad = torch.tensor([1, 0, 0, 2], dtype=torch.int32).view(1, 1, 1, 1, 4)  # voxel 1 does not carry 2
    with pytest.raises(ValueError, match="connected_components output"):
        ops.component_sizes(bad)


def _skimage_rule_inclusive() -> bool:
    """skimage >= 0.26 maps the positional min_size MONAI passes to max_size: objects of size <=
    min_size go (MONAI documents < min_size, which older skimage did)."""
    morphology = pytest.importorskip("skimage.morphology")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return not morphology.remove_small_objects(np.ones((1, 3), bool), 3).any()


def _monai_remove_small(x, **kw):
    import warnings
    mt = pytest.importorskip("monai.transforms")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.as_tensor(mt.RemoveSmallObjects(**kw)(x.clone()))


@pytest.mark.parametrize("kw", [dict(min_size=3), dict(min_size=5, connectivity=2), dict(min_size=4, connectivity=3),
                                dict(min_size=4, independent_channels=False), dict(min_size=20)])
def test_remove_small_objects_equals_monai(kw):
    """voxaug follows MONAI's documented rule (size < min_size goes); against a MONAI running on
    skimage's inclusive rule, voxaug's min_size + 1 is the same integer threshold."""
    shift = 1 if _skimage_rule_inclusive() else 0
    vk = dict(kw, min_size=kw["min_size"] + shift)
    rng = np.random.default_rng(kw["min_size"])
    binary = torch.from_numpy((rng.random((1, 14, 12, 13)) < 0.3).astype(np.float32))
    got = RemoveSmallObjects(**vk)(binary)
    assert torch.equal(got, _monai_remove_small(binary, **kw)) and not torch.equal(got, binary)
    for dtype in (torch.uint8, torch.int64):
        assert torch.equal(RemoveSmallObjects(**vk)(binary.to(dtype)), _monai_remove_small(binary.to(dtype), **kw))
    # A label map (max > 1): independent: each value is one object, connected or not.
    labels = torch.from_numpy(rng.integers(0, 5, (1, 14, 12, 13))).float()
    labels[labels == 3] = 0
    labels[0, 0, 0, :2] = 3  # a rare value
    labels[0, 5, 5, 5] = 2.7  # truncated to 2, as astype(int32)
    got = RemoveSmallObjects(**vk)(labels)
    assert torch.equal(got, _monai_remove_small(labels, **kw))
    # One-hot (exclusive channels): at connectivity 1 MONAI's 4-D labelling has no cross-channel joins.
    if kw.get("connectivity", 1) == 1:
        onehot = torch.nn.functional.one_hot(labels[0].long(), 5).permute(3, 0, 1, 2).float()
        assert torch.equal(RemoveSmallObjects(**vk)(onehot), _monai_remove_small(onehot, **kw))
    # A batch: each sample as MONAI transforms it alone (one binary, one a label map).
    batch = torch.stack([binary, labels])
    got = RemoveSmallObjectsd("s", **vk)({"s": batch})["s"]
    for n in range(2):
        assert torch.equal(got[n], _monai_remove_small(batch[n], **kw))


def test_remove_small_objects_rules_and_errors():
    # Single-valued samples are returned as they are (MONAI), even an all-ones mask below min_size.
    ones = torch.ones(1, 3, 3, 3)
    assert torch.equal(RemoveSmallObjects(min_size=100)(ones), ones)
    # min_size 0 removes nothing; the background stays background.
    m = torch.from_numpy(rand_mask((1, 6, 7, 8), 0.3, 2)).float()
    assert torch.equal(RemoveSmallObjects(min_size=0)(m), m)
    # by_measure: min_size in mm^3 -> ceil(min_size / voxel volume) voxels, spacing from the affine.
    mt = pytest.importorskip("monai.data")
    lab = canonical(m[0].numpy() > 0, 1)
    sizes = np.bincount(lab.ravel())
    for pixdim, mm3 in (((2.0, 1.0, 1.5), 10.0), ((0.5, 0.5, 0.5), 0.3)):
        need = np.ceil(mm3 / np.prod(pixdim))
        ref = torch.from_numpy(((lab > 0) & (sizes[lab] >= need)).astype(np.float32))[None]
        assert torch.equal(RemoveSmallObjects(min_size=mm3, by_measure=True, pixdim=pixdim)(m), ref)
        meta = mt.MetaTensor(m.clone(), affine=torch.diag(torch.tensor([*pixdim, 1.0], dtype=torch.float64)))
        assert torch.equal(torch.as_tensor(RemoveSmallObjects(min_size=mm3, by_measure=True)(meta)), ref)
    with pytest.warns(UserWarning, match="assuming affine to be identity"):
        RemoveSmallObjects(min_size=3, by_measure=True)(m)
    with pytest.warns(UserWarning, match="not in use"):
        RemoveSmallObjects(min_size=3, pixdim=2.0)(m)
    # A label map through a transposed view (each value one object).
    lab_map = torch.from_numpy(np.random.default_rng(1).integers(0, 6, (1, 9, 8, 7))).float()
    lab_map[0, 0, 0, :3] = 9
    t = lab_map.permute(0, 3, 2, 1).contiguous().permute(0, 3, 2, 1)
    assert not t.is_contiguous()
    ref = torch.where(lab_map == 9, 0.0, lab_map)
    assert torch.equal(RemoveSmallObjects(min_size=4)(t), ref)
    with pytest.raises(ValueError, match="Negative value labels"):
        RemoveSmallObjects()(torch.tensor([[[[0.0, -2.0, 3.0]]]]))
    with pytest.raises(ValueError, match="connectivity"):
        RemoveSmallObjects(connectivity=4)


@pytest.mark.parametrize("device", devices())
def test_remove_small_objects_device_matches_cpu(device):
    rng = np.random.default_rng(4)
    x = torch.from_numpy(rng.integers(0, 4, (2, 1, 16, 15, 14))).float()
    x[1] = (x[1] > 1).float()  # one label map, one binary sample
    for t in (RemoveSmallObjects(min_size=3), RemoveSmallObjects(min_size=5, independent_channels=False)):
        assert torch.equal(t(x.to(device)).cpu(), t(x))
    if torch.device(device).type == "cuda":
        xd = x.to(device)  # the blocking upload outside the no-sync block
        torch.cuda.synchronize()
        with sync_is_error():
            out = RemoveSmallObjects(min_size=3)(xd)
        assert out.is_cuda


# ---------------- distance transform (MONAI DistanceTransformEDT, scipy) ----------------
def _scipy_edt(m: np.ndarray, sampling=None) -> np.ndarray:
    """scipy.ndimage.distance_transform_edt of every (n, c) volume of a 5-D array."""
    out = np.zeros(m.shape, dtype=np.float64)
    for n in range(m.shape[0]):
        for c in range(m.shape[1]):
            out[n, c] = ndi.distance_transform_edt(m[n, c], sampling=sampling)
    return out


@pytest.mark.parametrize("shape", [(2, 3, 9, 11, 7), (1, 1, 40, 9, 33), (1, 2, 1, 17, 13)])
@pytest.mark.parametrize("density", [0.03, 0.5, 0.97])
@pytest.mark.parametrize("sampling", [None, 2.0, (1.0, 3.0, 2.0), (0.7, 1.3, 2.45)])
def test_distance_transform_equals_scipy(shape, density, sampling):
    m = rand_mask(shape, density, seed=shape[2] + int(density * 100))
    m[0, 0] = True  # a volume without background: scipy's virtual voxel (-1, 0, 0)
    if shape[1] > 1:
        m[0, 1] = False  # and one without foreground
    want = torch.from_numpy(_scipy_edt(m, sampling))
    got = ops.distance_transform_edt(torch.from_numpy(m), 1.0 if sampling is None else sampling)
    assert got.dtype == torch.float64 and got.shape == m.shape
    integral = sampling is None or all(float(v).is_integer() for v in np.atleast_1d(sampling))
    if integral:  # squared distances are exact integers on both sides
        assert torch.equal(got, want)
    else:  # scipy sums (s * delta)^2 per axis in its own order: a few float64 ulps
        torch.testing.assert_close(got, want, rtol=4e-15, atol=0)
    f32 = ops.distance_transform_edt(torch.from_numpy(m), 1.0 if sampling is None else sampling, torch.float32)
    assert f32.dtype == torch.float32 and torch.equal(f32, got.float())


def test_distance_transform_equals_monai_on_ch2(ch2):
    """The ch2 brain mask at its 1 mm spacing and at a 2 mm grid with anisotropic sampling, as
    MONAI's DistanceTransformEDT(d) computes it (scipy per channel), with the inside and the outside
    of the mask as two channels (a signed distance map's two halves)."""
    mt = pytest.importorskip("monai.transforms")
    from voxaug.post import DistanceTransformEDT, DistanceTransformEDTd

    brain = ch2[0][0] > 40
    img = torch.stack([brain, ~brain]).to(torch.uint8)  # (2, 181, 217, 181)
    for x, sampling in ((img, None), (img[:, ::2, ::2, ::2].contiguous(), [2.0, 2.5, 3.0])):
        want = torch.as_tensor(mt.DistanceTransformEDT(sampling=sampling)(x.clone()))
        got = DistanceTransformEDT(sampling=sampling)(x)
        assert got.dtype == torch.float64 == want.dtype and got.shape == want.shape
        if sampling is None:
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=4e-15, atol=0)
        assert float(got.max()) > 10
        d = DistanceTransformEDTd(keys="m", sampling=sampling)({"m": x, "other": 1})
        assert torch.equal(d["m"], got) and d["other"] == 1


def test_distance_transform_inputs_and_errors():
    from voxaug.post import DistanceTransformEDT

    m = rand_mask((2, 1, 6, 7, 8), 0.6, 4)
    ref = ops.distance_transform_edt(torch.from_numpy(m))
    # Any dtype (nonzero, NaN too, is foreground), any strides, a batch or one sample, numpy input.
    f = torch.from_numpy(np.where(m, np.float32(-2.5), np.float32(0.0)))
    f[0, 0, 0, 0, 0] = float("nan") if m[0, 0, 0, 0, 0] else 0.0
    assert torch.equal(ops.distance_transform_edt(f), ref)
    wide = torch.zeros(2, 1, 6, 7, 16, dtype=torch.int16)
    wide[..., ::2] = torch.from_numpy(m.astype(np.int16))
    assert torch.equal(ops.distance_transform_edt(wide[..., ::2]), ref)
    assert torch.equal(DistanceTransformEDT()(torch.from_numpy(m[1])), ref[1])
    assert torch.equal(DistanceTransformEDT()(m[1]), ref[1])
    torch.library.opcheck(torch.ops.voxaug.distance_transform_edt, (torch.from_numpy(m), [1.0, 2.0, 0.5], None))
    torch.library.opcheck(torch.ops.voxaug.distance_transform_edt, (torch.from_numpy(m), [1.5], torch.float32))
    with pytest.raises(ValueError, match="spacing must have one value or three"):
        ops.distance_transform_edt(torch.from_numpy(m), (1.0, 2.0))
    with pytest.raises(ValueError, match="spacing must be positive"):
        ops.distance_transform_edt(torch.from_numpy(m), -1.0)
    with pytest.raises(ValueError, match="dtype must be torch.float32 or torch.float64"):
        ops.distance_transform_edt(torch.from_numpy(m), 1.0, torch.float16)
    with pytest.raises(ValueError, match="sampling must be a number or one value per spatial axis"):
        DistanceTransformEDT(sampling=(1.0, 2.0, 3.0, 4.0))
    with pytest.raises(ValueError, match="sampling must be a number or three values for a 3-D image"):
        DistanceTransformEDT(sampling=(1.0, 2.0))(torch.from_numpy(m[1]))
    with pytest.raises(ValueError, match="sampling must be a number or two values for a 2-D image"):
        DistanceTransformEDT(sampling=(1.0, 2.0, 3.0))(torch.zeros(3, 4, 5))
    with pytest.raises(ValueError, match="img must be"):
        DistanceTransformEDT()(torch.zeros(4, 5))


@pytest.mark.parametrize("sampling", [None, 1.5, (2.0, 0.5)])
def test_distance_transform_2d_equals_scipy_and_monai(sampling):
    """MONAI's DistanceTransformEDT also takes 2-D images (C, H, W): scipy per channel, including a
    channel without zeros (scipy's virtual pixel (-1, 0)), and numpy or MetaTensor input."""
    from voxaug.post import DistanceTransformEDT, DistanceTransformEDTd

    m = rand_mask((1, 3, 23, 31, 1), 0.8, 11)[0, ..., 0]  # (3, 23, 31)
    m[1] = True
    want = np.stack([ndi.distance_transform_edt(c, sampling=sampling) for c in m])
    got = DistanceTransformEDT(sampling=sampling)(torch.from_numpy(m))
    assert got.dtype == torch.float64 and got.shape == m.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15, atol=0)
    assert torch.equal(DistanceTransformEDT(sampling=sampling)(m), got)
    assert torch.equal(DistanceTransformEDT(sampling=sampling, dtype=torch.float32)(m), got.float())
    mt = pytest.importorskip("monai.transforms")
    from monai.data import MetaTensor

    x = MetaTensor(torch.from_numpy(m).to(torch.uint8), meta={"tag": 7})
    ref = torch.as_tensor(mt.DistanceTransformEDT(sampling=sampling)(x.clone()))
    out = DistanceTransformEDTd(keys="m", sampling=sampling)({"m": x})["m"]
    assert isinstance(out, MetaTensor) and out.meta["tag"] == 7
    np.testing.assert_allclose(out.as_tensor().numpy(), ref.numpy(), rtol=1e-15, atol=0)


@pytest.mark.parametrize("device", devices())
def test_distance_transform_device_matches_cpu(device):
    from voxaug.post import DistanceTransformEDT

    m = torch.from_numpy(rand_mask((2, 2, 30, 25, 20), 0.7, 5))
    m[1, 1] = True
    for dtype in (torch.float32, torch.float64):
        got = ops.distance_transform_edt(m.to(device), (0.7, 1.3, 2.45), dtype)
        assert got.device.type == device
        assert torch.equal(got.cpu(), ops.distance_transform_edt(m, (0.7, 1.3, 2.45), dtype))
    want_dtype = torch.float32 if device == "cuda" else torch.float64  # MONAI: cuCIM / scipy
    assert DistanceTransformEDT()(m.to(device)).dtype == want_dtype
    if device == "cuda":
        md = m.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            out = DistanceTransformEDT(sampling=2.0)(md)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), ops.distance_transform_edt(m, 2.0, torch.float32))


# ---------------- MONAI's validation post-processing ----------------
def _monai_each(t, x):
    """MONAI's transform on each sample of a batch, stacked."""
    return torch.stack([torch.as_tensor(t(s.clone())) for s in x])


def test_activations_match_monai():
    mt = pytest.importorskip("monai.transforms")
    from voxaug.post import Activations, Activationsd

    x = torch.randn(2, 4, 5, 6, 7) * 3
    for kw in (dict(softmax=True), dict(sigmoid=True), dict(softmax=True, dim=1), dict(other=torch.tanh),
               dict(sigmoid=True, other=lambda t: t * 2)):
        for img in (x[0], x[0].half(), x[0].double()):
            want = torch.as_tensor(mt.Activations(**kw)(img.clone()))
            got = Activations(**kw)(img)
            assert got.dtype == want.dtype == img.dtype and torch.equal(got, want), kw
        # (a batch's softmax along dim 1 may take another torch kernel than an image's along dim 0)
        torch.testing.assert_close(Activations(**kw)(x), _monai_each(mt.Activations(**kw), x), rtol=1e-6, atol=1e-7)
    assert torch.equal(Activations()(x[0], softmax=True), torch.as_tensor(mt.Activations()(x[0].clone(), softmax=True)))
    d = Activationsd(["a", "b"], softmax=[True, False], sigmoid=[False, True])({"a": x[0], "b": x[1], "c": 3})
    ref = mt.Activationsd(["a", "b"], softmax=[True, False], sigmoid=[False, True])
    want = ref({"a": x[0].clone(), "b": x[1].clone()})
    assert torch.equal(d["a"], torch.as_tensor(want["a"])) and torch.equal(d["b"], torch.as_tensor(want["b"]))
    with pytest.raises(ValueError, match="Incompatible values"):
        Activations()(x, sigmoid=True, softmax=True)
    with pytest.raises(TypeError, match="other must be None or callable"):
        Activations(other=3)


def test_as_discrete_matches_monai():
    mt = pytest.importorskip("monai.transforms")
    from voxaug.post import AsDiscrete, AsDiscreted

    x = torch.randn(2, 4, 5, 6, 7)
    lab = torch.randint(0, 4, (2, 1, 5, 6, 7)).float()
    cases = [(x, dict(argmax=True)), (x, dict(argmax=True, to_onehot=4)), (lab, dict(to_onehot=4)),
             (x, dict(threshold=0.3)), (x * 3, dict(rounding="torchrounding")),
             (x, dict(argmax=True, keepdim=False)), (lab, dict(to_onehot=5, dtype=torch.uint8)),
             (x, dict(argmax=True, dim=1)), (x.sigmoid(), dict(threshold=0.5, dtype=torch.bool))]
    for img, kw in cases:
        want = torch.as_tensor(mt.AsDiscrete(**kw)(img[0].clone()))
        got = AsDiscrete(**kw)(img[0])
        assert got.dtype == want.dtype and torch.equal(got, want), kw
        assert torch.equal(AsDiscrete(**kw)(img), _monai_each(mt.AsDiscrete(**kw), img)), kw
    assert torch.equal(AsDiscrete()(x[0], argmax=True, to_onehot=4),
                       torch.as_tensor(mt.AsDiscrete()(x[0].clone(), argmax=True, to_onehot=4)))
    bad = lab[0].clone()
    bad[0, 0, 0, 0] = 7  # outside [0, K): a zero vector here (MONAI's scatter fails)
    oh = AsDiscrete(to_onehot=4)(bad)
    assert oh[:, 0, 0, 0].sum() == 0 and torch.equal(oh[:, 1:], AsDiscrete(to_onehot=4)(lab[0])[:, 1:])
    d = AsDiscreted(["p", "l"], argmax=[True, False], to_onehot=4)({"p": x[0], "l": lab[0]})
    want = mt.AsDiscreted(["p", "l"], argmax=[True, False], to_onehot=4)({"p": x[0].clone(), "l": lab[0].clone()})
    assert torch.equal(d["p"], torch.as_tensor(want["p"])) and torch.equal(d["l"], torch.as_tensor(want["l"]))
    with pytest.raises(ValueError, match="to_onehot=True/False"):
        AsDiscrete(to_onehot=True)
    with pytest.raises(ValueError, match="channel of length one"):
        AsDiscrete(to_onehot=3)(x[0])
    with pytest.raises(ValueError, match="rounding must be 'torchrounding'"):
        AsDiscrete(rounding="floor")(x[0])
    with pytest.raises(ValueError, match="a sequence of per-key values"):
        AsDiscreted(["a", "b"], argmax=[True])


def test_label_filter_contour_and_brats_match_monai():
    mt = pytest.importorskip("monai.transforms")
    from monai.data import MetaTensor
    from voxaug.post import (ConvertToMultiChannelBasedOnBratsClasses, ConvertToMultiChannelBasedOnBratsClassesd,
                             LabelFilter, LabelFilterd, LabelToContour, LabelToContourd)

    rng = np.random.default_rng(8)
    lab = torch.from_numpy(rng.integers(0, 5, (2, 1, 9, 10, 11)))
    for labels in (1, [1, 3], (2, 4, 9)):
        for img in (lab, lab.float(), lab[0, 0]):
            want = torch.as_tensor(mt.LabelFilter(labels)(img.clone()))
            assert torch.equal(LabelFilter(labels)(img), want), labels
    assert torch.equal(LabelFilter(2)(lab.numpy()), LabelFilter(2)(lab))
    m = MetaTensor(lab[0].float(), meta={"tag": 1})
    out = LabelFilterd("m", [2])({"m": m})["m"]
    assert isinstance(out, MetaTensor) and out.meta["tag"] == 1
    assert torch.equal(out.as_tensor(), LabelFilter(2)(lab[0].float()))
    masks = (lab > 2).float()
    probs = torch.from_numpy(rng.random((2, 2, 9, 10, 11))).float()
    for img, exact in ((masks, True), (probs, False)):
        want = _monai_each(mt.LabelToContour(), img)
        got = LabelToContour()(img)
        assert got.shape == want.shape and got.dtype == want.dtype
        if exact:
            assert torch.equal(got, want) and got.sum() > 0
        else:
            assert (got - want).abs().max() <= 1e-5
        assert torch.equal(LabelToContour()(img[1]), got[1])
    assert torch.equal(LabelToContourd("k")({"k": masks[0]})["k"], LabelToContour()(masks[0]))
    with pytest.raises(NotImplementedError):
        LabelToContour("Sobel")
    for et in (4, 3):
        t, ref = ConvertToMultiChannelBasedOnBratsClasses(et), mt.ConvertToMultiChannelBasedOnBratsClasses(et)
        for img in (lab[0], lab[0, 0]):
            want = torch.as_tensor(ref(img.clone()))
            got = t(img)
            assert got.dtype == torch.bool and torch.equal(got, want)
        assert torch.equal(t(lab), torch.stack([torch.as_tensor(ref(s.clone())) for s in lab]))
    d = ConvertToMultiChannelBasedOnBratsClassesd("l", et_label=3)({"l": lab[0]})
    assert torch.equal(d["l"], ConvertToMultiChannelBasedOnBratsClasses(3)(lab[0]))
    with pytest.raises(ValueError, match="et_label cannot be 1 or 2"):
        ConvertToMultiChannelBasedOnBratsClasses(2)
    with pytest.raises(ValueError, match=r"\(N, 1, D, H, W\)"):
        ConvertToMultiChannelBasedOnBratsClasses()(lab.expand(2, 2, 9, 10, 11))


@pytest.mark.parametrize("device", devices())
def test_validation_post_processing_device_matches_cpu(device):
    from voxaug.post import (Activations, AsDiscrete, ConvertToMultiChannelBasedOnBratsClasses, LabelFilter,
                             LabelToContour)

    x = torch.randn(2, 3, 8, 9, 10)
    lab = torch.randint(0, 5, (2, 1, 8, 9, 10))
    ts = [(Activations(softmax=True), x, 1e-6), (AsDiscrete(argmax=True, to_onehot=3), x, 0),
          (LabelFilter([1, 4]), lab, 0), (LabelToContour(), (lab > 2).float(), 0),
          (ConvertToMultiChannelBasedOnBratsClasses(), lab, 0)]
    for t, img, tol in ts:
        got, want = t(img.to(device)).cpu(), t(img)
        assert got.dtype == want.dtype and (got.double() - want.double()).abs().max() <= tol, type(t).__name__
    if torch.device(device).type == "cuda":
        xd, ld = x.to(device), lab.to(device)
        torch.cuda.synchronize()
        with sync_is_error():
            outs = [t(xd if img is x else ld if img is lab else (ld > 2).float()) for t, img, _ in ts]
        assert all(o.is_cuda for o in outs)
