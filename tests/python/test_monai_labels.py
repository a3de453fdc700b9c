"""MONAI MapLabelValue(d), LabelToMask(d) (voxaug.labels) and AddCoordinateChannels(d)
(voxaug.transforms) against MONAI's own, on random label maps and the AAL atlas: values, dtypes,
repeated and unmapped labels, one-hot maps, batches."""
import numpy as np
import pytest
import torch

from voxaug import labels as vl

from conftest import devices, load_template

mt = pytest.importorskip("monai.transforms")
DEVICES = devices()


@pytest.mark.parametrize("dtype", [np.float32, np.int16, torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize("src", [torch.int16, torch.uint8, torch.int64, torch.float32])
def test_map_label_value_equals_monai(dtype, src):
    """Integer maps take the lookup table, float maps one fill per pair: equal to MONAI's either
    way (a repeated original label: the last pair wins; labels outside the pairs keep their value;
    a pair mapping a label to itself does nothing)."""
    lab = torch.from_numpy(np.random.default_rng(0).integers(0, 9, (1, 12, 10, 14))).to(src)
    orig, target = [1, 3, 5, 3, 7, 8], [10, 0, 2, 4, 7, 250]
    ref = mt.MapLabelValue(orig, target, dtype=dtype)(lab.clone())
    got = vl.MapLabelValue(orig, target, dtype=dtype)(lab)
    assert got.dtype == ref.dtype and torch.equal(got, ref)
    arr = lab.numpy()
    ref_np = mt.MapLabelValue(orig, target, dtype=np.float32)(arr.copy())
    got_np = vl.MapLabelValue(orig, target, dtype=np.float32)(arr)
    assert isinstance(got_np, np.ndarray) and np.array_equal(got_np, ref_np)


@pytest.mark.parametrize("device", DEVICES)
def test_map_label_value_on_aal_batch_and_dict(device):
    """The AAL atlas (116 labels) merged into 4 groups as a batch on the device, and the dictionary
    form: equal to MONAI's per sample."""
    lab, _ = load_template("aal.nii.gz")
    lab = lab[:, 40:120, 50:140, 30:100].to(torch.int16)
    orig = list(range(1, 117))
    target = [1 + (v - 1) % 4 for v in orig]
    batch = torch.stack([lab, lab.flip(1)]).to(device)
    got = vl.MapLabelValue(orig, target, dtype=torch.int16)(batch)
    for n in range(2):
        assert torch.equal(got[n].cpu(), mt.MapLabelValue(orig, target, dtype=torch.int16)(batch[n].cpu()))
    d = vl.MapLabelValued("label", orig, target)({"label": lab, "image": lab.float()})
    assert torch.equal(d["label"], mt.MapLabelValue(orig, target)(lab)) and d["label"].dtype == torch.float32
    with pytest.raises(ValueError, match="same length"):
        vl.MapLabelValue([1, 2], [3])


@pytest.mark.parametrize("merge", [False, True])
def test_label_to_mask_equals_monai(merge):
    """A one-channel label map (bool mask of the selected values) and a one-hot map (the selected
    channels): equal to MONAI's, with merge_channels; a batch sample by sample; the dict form."""
    lab, _ = load_template("aal.nii.gz")
    lab = lab[:, 40:120, 50:140, 30:100].to(torch.int16)
    sel = [3, 17, 44, 90]
    ref = mt.LabelToMask(sel, merge_channels=merge)(lab)
    got = vl.LabelToMask(sel, merge_channels=merge)(lab)
    assert got.dtype == ref.dtype == torch.bool and torch.equal(got, torch.as_tensor(ref))
    onehot = torch.nn.functional.one_hot(torch.clamp(lab[0].long(), 0, 5), 6).permute(3, 0, 1, 2).float()
    ref = mt.LabelToMask([1, 4], merge_channels=merge)(onehot)
    got = vl.LabelToMask([1, 4], merge_channels=merge)(onehot)
    assert got.dtype == torch.as_tensor(ref).dtype and torch.equal(got, torch.as_tensor(ref))
    batch = torch.stack([lab, lab.flip(2)])
    got = vl.LabelToMask(sel, merge_channels=merge)(batch)
    for n in range(2):
        assert torch.equal(got[n], torch.as_tensor(mt.LabelToMask(sel, merge_channels=merge)(batch[n])))
    d = vl.LabelToMaskd("label", sel, merge_channels=merge)({"label": lab})
    assert torch.equal(d["label"], torch.as_tensor(mt.LabelToMask(sel, merge_channels=merge)(lab)))


@pytest.mark.parametrize("dims", [[0, 1, 2], [2], [1, 0]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16])
def test_add_coordinate_channels_equals_monai(dims, dtype):
    """AddCoordinateChannels(d): the coordinate channels (numpy's linspace(-0.5, 0.5), then the
    image's dtype) appended: equal to MONAI's, alone, in a batch and in the dict form."""
    from voxaug import transforms as vt

    x = (torch.rand(2, 9, 7, 5, generator=torch.Generator().manual_seed(4)) * 10).to(dtype)
    ref = torch.as_tensor(mt.AddCoordinateChannels(spatial_dims=dims)(x))
    got = vt.AddCoordinateChannels(dims)(x)
    assert got.dtype == ref.dtype and torch.equal(got, ref)
    batch = torch.stack([x, x.flip(1)])
    got = vt.AddCoordinateChannels(dims)(batch)
    for n in range(2):
        assert torch.equal(got[n], torch.as_tensor(mt.AddCoordinateChannels(spatial_dims=dims)(batch[n])))
    assert torch.equal(vt.AddCoordinateChannelsd("img", dims)({"img": x})["img"], ref)
    with pytest.raises(ValueError, match="spatial_dims"):
        vt.AddCoordinateChannels([3])(x)
