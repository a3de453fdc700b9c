"""voxaug.crop.GridSampler / GridAggregator vs TorchIO's (torchio.GridSampler, GridAggregator,
the patch-based inference loop): the same locations in the same order, the same patches, and
aggregated outputs equal to TorchIO's bit for bit in the three overlap modes, padded and not, with
an identity and a small conv "network", on random volumes and on ch2.nii.gz; the
aggregate_patches_ op against plain torch slicing; bad inputs."""
import pytest
import torch

from voxaug import crop as C

from conftest import devices

tio = pytest.importorskip("torchio")


def _tio_run(subject_tensors, patch, overlap, padding_mode, mode, net, batch_size, factor=1):
    subject = tio.Subject(**{k: tio.ScalarImage(tensor=v) for k, v in subject_tensors.items()})
    sampler = tio.GridSampler(subject, patch, overlap, padding_mode=padding_mode)
    agg = tio.GridAggregator(sampler, overlap_mode=mode, downsampling_factor=factor)
    locs, patches = [], []
    for batch in torch.utils.data.DataLoader(sampler, batch_size=batch_size):
        x = batch["img"][tio.DATA]
        patches.append(x)
        locs.append(batch[tio.LOCATION])
        with torch.no_grad():
            agg.add_batch(net(x), batch[tio.LOCATION])
    return torch.cat(locs), torch.cat(patches), agg.get_output_tensor()


def _voxaug_run(subject_tensors, patch, overlap, padding_mode, mode, net, batch_size, device, factor=1):
    sampler = C.GridSampler({k: v.to(device) for k, v in subject_tensors.items()}, patch, overlap,
                            padding_mode=padding_mode)
    agg = C.GridAggregator(sampler, overlap_mode=mode, downsampling_factor=factor)
    locs, patches = [], []
    for batch in sampler.batches(batch_size):
        x = batch["img"]
        patches.append(x.cpu())
        locs.append(batch["location"])
        with torch.no_grad():
            agg.add_batch(net(x), batch["location"])
    return torch.cat(locs), torch.cat(patches), agg.get_output_tensor()


def _conv(channels_out=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    conv = torch.nn.Conv3d(1, channels_out, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.2)
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=g))
    return conv


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("mode", ["crop", "average", "hann"])
@pytest.mark.parametrize("padding_mode", [None, 0, "edge", "reflect"])
@pytest.mark.parametrize("shape,patch,overlap", [((23, 19, 17), (8, 7, 6), (4, 2, 0)),
                                                 ((16, 16, 16), 8, 4),
                                                 ((9, 20, 13), (9, 5, 6), (0, 4, 2))])
def test_matches_torchio(device, mode, padding_mode, shape, patch, overlap):
    g = torch.Generator().manual_seed(sum(shape))
    img = torch.randn((1,) + shape, generator=g) * 50 + 100
    net = _conv().to(device)
    ref_loc, ref_patches, ref = _tio_run({"img": img}, patch, overlap, padding_mode, mode, net.cpu(), 5)
    loc, patches, out = _voxaug_run({"img": img}, patch, overlap, padding_mode, mode, net.to(device), 5, device)
    assert torch.equal(loc, ref_loc.to(torch.int64))
    assert torch.equal(patches, ref_patches)
    assert out.shape == ref.shape and out.dtype == ref.dtype and out.device.type == device
    if device == "cpu":
        assert torch.equal(out, ref)  # the same additions in the same order
    else:  # the conv itself rounds differently on the GPU
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-4)
    assert out.abs().sum() > 0 and torch.isfinite(out).all()


@pytest.mark.parametrize("mode", ["crop", "average"])
def test_identity_rebuilds_the_volume_and_labels_keep_their_dtype(mode):
    """An identity network gives the volume back (every mode), and a label map aggregated with
    'crop' stays int (TorchIO's int64 -> int32 warning)."""
    g = torch.Generator().manual_seed(1)
    lab = torch.randint(0, 9, (1, 21, 18, 15), generator=g)
    sampler = C.GridSampler({"img": lab}, (8, 6, 5), (2, 2, 2))
    agg = C.GridAggregator(sampler, overlap_mode=mode)
    for batch in sampler.batches(4):
        agg.add_batch(batch["img"], batch["location"])
    if mode == "crop":
        with pytest.warns(RuntimeWarning, match="int64"):
            out = agg.get_output_tensor()
        assert out.dtype == torch.int32 and torch.equal(out, lab.int())
    else:
        out = agg.get_output_tensor()
        assert out.dtype == torch.float32 and torch.equal(out, lab.float())


def test_ch2_through_a_conv_matches_torchio(ch2):
    img = ch2[0][:, 40:130, 50:160, 30:120].float() / 255  # a 90 x 110 x 90 block of the head
    net = _conv(3, seed=4)
    for mode, padding in (("hann", None), ("crop", "edge"), ("average", 0)):
        _, _, ref = _tio_run({"img": img}, 32, 8, padding, mode, net, 4)
        _, _, out = _voxaug_run({"img": img}, 32, 8, padding, mode, net, 4, "cpu")
        assert torch.equal(out, ref), mode


def test_downsampling_factor():
    """A network that halves the size: 'crop' without overlap equals TorchIO's; 'average' with
    overlap (TorchIO's adds full-size locations there and fails) equals the sequential float32
    sums at the halved locations."""
    g = torch.Generator().manual_seed(3)
    img = torch.randn(1, 24, 20, 16, generator=g)
    net = torch.nn.Sequential(_conv(2), torch.nn.AvgPool3d(2))
    _, _, ref = _tio_run({"img": img}, 8, 0, None, "crop", net, 3, factor=2)
    _, _, out = _voxaug_run({"img": img}, 8, 0, None, "crop", net, 3, "cpu", factor=2)
    assert out.shape == (2, 12, 10, 8) and torch.equal(out, ref)
    net = torch.nn.AvgPool3d(2)  # per element: the same bits in any batch
    loc, _, out = _voxaug_run({"img": img}, 8, 4, None, "average", net, 3, "cpu", factor=2)
    acc, cnt = torch.zeros(1, 12, 10, 8), torch.zeros(1, 12, 10, 8)
    sampler = C.GridSampler({"img": img}, 8, 4)
    for i in range(len(sampler)):
        with torch.no_grad():
            y = net(sampler[i]["img"])[0]
        a = (loc[i, :3] // 2).tolist()
        acc[:, a[0]:a[0] + 4, a[1]:a[1] + 4, a[2]:a[2] + 4] += y
        cnt[:, a[0]:a[0] + 4, a[1]:a[1] + 4, a[2]:a[2] + 4] += 1
    assert torch.equal(out, acc / cnt)


def test_single_patches_and_pass_through():
    img = torch.arange(10 * 12 * 9, dtype=torch.float32).reshape(1, 10, 12, 9)
    sampler = C.GridSampler({"img": img, "id": 7}, (5, 6, 9), (2, 2, 0))
    ref = tio.GridSampler(tio.Subject(img=tio.ScalarImage(tensor=img)), (5, 6, 9), (2, 2, 0))
    assert len(sampler) == len(ref) == 3 * 3
    for i, patch in enumerate(sampler()):
        assert patch["id"] == 7 and patch["img"].shape == (1, 1, 5, 6, 9)
        assert torch.equal(patch["location"], torch.as_tensor(ref[i][tio.LOCATION]).long())
        assert torch.equal(patch["img"][0], ref[i]["img"][tio.DATA])
    assert torch.equal(sampler[-1]["img"], sampler[8]["img"])


def test_torchio_subject_is_read_as_its_tensors():
    g = torch.Generator().manual_seed(2)
    img, lab = torch.rand(1, 12, 10, 9, generator=g), torch.randint(0, 3, (1, 12, 10, 9), generator=g)
    subject = tio.Subject(img=tio.ScalarImage(tensor=img), seg=tio.LabelMap(tensor=lab), name="s1")
    sampler = C.GridSampler(subject, (6, 5, 9), 2)
    ref = tio.GridSampler(subject, (6, 5, 9), 2)
    assert len(sampler) == len(ref)
    for i in range(len(ref)):
        assert torch.equal(sampler[i]["seg"][0], ref[i]["seg"][tio.DATA])
        assert torch.equal(sampler[i]["img"][0], ref[i]["img"][tio.DATA]) and sampler[i]["name"] == "s1"


def test_bad_inputs():
    img = torch.rand(1, 10, 10, 10)
    with pytest.raises(ValueError, match="cannot be larger than image size"):
        C.GridSampler({"img": img}, 11)
    with pytest.raises(ValueError, match="must be smaller than patch size"):
        C.GridSampler({"img": img}, 4, 4)
    with pytest.raises(ValueError, match="even integers"):
        C.GridSampler({"img": img}, 4, 1)
    with pytest.raises(ValueError, match="Padding mode"):
        C.GridSampler({"img": img}, 4, 2, padding_mode="linear_ramp")
    with pytest.raises(ValueError, match="share the spatial shape"):
        C.GridSampler({"img": img, "b": torch.rand(1, 9, 10, 10)}, 4)
    sampler = C.GridSampler({"img": img}, 4, 2)
    with pytest.raises(ValueError, match="Overlap mode"):
        C.GridAggregator(sampler, "max")
    agg = C.GridAggregator(sampler, "average")
    batch = next(sampler.batches(2))
    with pytest.raises(RuntimeError, match="does not match the shape of the target location"):
        agg.add_batch(batch["img"][..., :3], batch["location"])
    with pytest.raises(ValueError, match="locations must be"):
        agg.add_batch(batch["img"], batch["location"][:1])
    with pytest.raises(RuntimeError, match="no batch was added"):
        agg.get_output_tensor()


@pytest.mark.parametrize("device", devices())
def test_aggregate_op_vs_torch_slicing_and_opcheck(device):
    g = torch.Generator().manual_seed(11)
    patches = torch.randn(7, 2, 4, 5, 3, generator=g).to(device)
    weight = torch.rand(4, 5, 3, generator=g).to(device)
    starts = torch.randint(-2, 10, (7, 3), generator=g)
    out = torch.full((1, 2, 9, 11, 8), 0.5, device=device)
    count = torch.zeros(1, 1, 9, 11, 8, device=device)
    torch.ops.voxaug.aggregate_patches_(out, count, patches, starts.flatten().tolist(), None, weight, True)
    ref, rc = torch.full((2, 29, 31, 28), 0.5), torch.zeros(1, 29, 31, 28)
    for k in range(7):
        s = [int(v) + 10 for v in starts[k]]
        ref[:, s[0]:s[0] + 4, s[1]:s[1] + 5, s[2]:s[2] + 3] += patches[k].cpu() * weight.cpu()
        rc[:, s[0]:s[0] + 4, s[1]:s[1] + 5, s[2]:s[2] + 3] += weight.cpu()
    assert torch.equal(out[0].cpu(), ref[:, 10:19, 10:21, 10:18])
    assert torch.equal(count[0].cpu(), rc[:, 10:19, 10:21, 10:18])
    torch.library.opcheck(torch.ops.voxaug.aggregate_patches_,
                          (out, count, patches, starts.flatten().tolist(), None, weight, True))
    torch.library.opcheck(torch.ops.voxaug.aggregate_patches_,
                          (out, None, patches, starts.flatten().tolist(), [0, 0, 0, 4, 5, 3] * 7, None, False))
    for args, match in [((out.int(), None, patches, [0] * 21), "float32 or float64"),
                        ((out, None, patches, [0] * 20), "3 ints per patch"),
                        ((out, None, patches, [0] * 21, [0] * 6), "6 ints per patch"),
                        ((out, None, patches.double(), [0] * 21, None, None, False), "to be copied"),
                        ((out, count[:, :, :4], patches, [0] * 21), "count must be"),
                        ((out, None, patches, [0] * 21, None, weight[:3]), "weight must be")]:
        with pytest.raises(ValueError, match=match):
            torch.ops.voxaug.aggregate_patches_(*args)
