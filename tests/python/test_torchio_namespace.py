"""voxaug.torchio: TorchIO's names in one namespace, and the TorchIO transforms defined there
(Affine, Flip, Resize, AffineElasticDeformation: names MONAI's take in voxaug.spatial) against
TorchIO itself on the real ch2 volume and AAL atlas."""
import inspect
import warnings

import numpy as np
import pytest
import torch

import voxaug.torchio as vtio

from conftest import devices, load_template

tio = pytest.importorskip("torchio")
DEVICES = devices()


def test_namespace_holds_torchio_names():
    """Every exported name is one of TorchIO's transform (or torchio.data sampler) names and a
    voxaug class documented as TorchIO's (Compose: voxaug's fusing one); every TorchIO transform
    that some voxaug module implements under TorchIO's name is exported here."""
    tio_names = {n for n in dir(tio.transforms) if inspect.isclass(getattr(tio.transforms, n))}
    tio_data = {n for n in dir(tio.data) if inspect.isclass(getattr(tio.data, n))}  # samplers, aggregator
    for name in vtio.__all__:
        obj = getattr(vtio, name)
        assert name in tio_names | tio_data, name
        assert inspect.isclass(obj), name
        assert name == "Compose" or "TorchIO" in (obj.__doc__ or ""), name
    import voxaug

    implemented = set()
    for mod in (voxaug.transforms, voxaug.spatial, voxaug.deform, voxaug.filter, voxaug.stats, voxaug.degrade,
                voxaug.labels, __import__("voxaug.kspace", fromlist=["x"])):
        for n, o in vars(mod).items():
            if inspect.isclass(o) and n in tio_names and (o.__doc__ or "").lstrip().startswith("TorchIO"):
                implemented.add(n)
    assert implemented <= set(vtio.__all__), implemented - set(vtio.__all__)


def _ch2_crop():
    vol, affine = load_template("ch2.nii.gz")
    lab, _ = load_template("aal.nii.gz")
    return vol[:, 40:120, 50:140, 30:100].float(), lab[:, 40:120, 50:140, 30:100].to(torch.int16), affine


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", [dict(), dict(image_interpolation="bspline", default_pad_value="mean"),
                                dict(center="origin", default_pad_value=7.0)])
def test_affine_equals_torchio(device, kw):
    """TorchIO Affine with fixed parameters on a ch2 crop and the AAL labels (a dictionary; labels
    nearest, 0 beyond): images within 2e-5 of the range (bspline 1e-4), labels but for ties."""
    img, lab, affine = _ch2_crop()
    params = dict(scales=(0.9, 1.1, 1.05), degrees=(5, -8, 12), translation=(3, -2, 4))
    subject = tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine), label=tio.LabelMap(tensor=lab, affine=affine))
    ref = tio.Affine(**params, **kw)(subject)
    t = vtio.Affine(**params, **kw, label_keys=["label"], affine=affine)
    out = t({"image": img.to(device), "label": lab.to(device)})
    tol = 1e-4 if kw.get("image_interpolation") == "bspline" else 2e-5
    assert (out["image"].cpu() - ref["image"].data).abs().max().item() <= tol * 255
    assert out["label"].dtype == torch.int16
    assert (out["label"].cpu().float() != ref["label"].data.float()).float().mean().item() < 1e-3
    with pytest.raises(ValueError, match="scales"):
        vtio.Affine(scales=(1, 0, 1), degrees=0, translation=0)


def test_flip_equals_torchio():
    """TorchIO Flip with indices and anatomical names (through a MetaTensor's affine): bit-identical."""
    from monai.data import MetaTensor

    img, lab, affine = _ch2_crop()
    for axes in (0, (1, 2), ("LR",), ("Inferior", "A")):
        ref = tio.Flip(axes)(tio.ScalarImage(tensor=img, affine=affine)).data
        out = vtio.Flip(axes)(MetaTensor(img, affine=torch.as_tensor(affine)))
        assert torch.equal(out.as_tensor(), ref), axes


@pytest.mark.parametrize("target", [(64, 80, 48), (96, -1, 33), 50, (58, 47, 26)])
def test_resize_equals_torchio(target):
    """TorchIO Resize (Resample to the fitting spacing, CropOrPad when TorchIO's grid is a voxel
    off, with its warning) on a ch2 crop with the AAL labels: same shape and affine, images
    within 2e-6 of the range, labels but for half-voxel ties."""
    from monai.data import MetaTensor

    img, lab, affine = _ch2_crop()
    subject = tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine), label=tio.LabelMap(tensor=lab, affine=affine))
    fixed = target == (58, 47, 26)  # floor(80 / (80 / 58)) = 57: one voxel short on two axes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = tio.Resize(target)(subject)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = vtio.Resize(target, label_keys=["label"])({"image": MetaTensor(img, affine=torch.as_tensor(affine)),
                                                         "label": MetaTensor(lab, affine=torch.as_tensor(affine))})
    assert any("Fixing with CropOrPad" in str(w.message) for w in seen) == fixed
    assert out["image"].shape == ref["image"].data.shape
    np.testing.assert_allclose(out["image"].affine.numpy(), ref["image"].affine, atol=1e-9)
    assert (out["image"].as_tensor() - ref["image"].data).abs().max().item() <= 2e-6 * 255
    # Nearest neighbour: spacings such as 80 / 50 = 1.6 put many grid points on exact half-voxel
    # ties, which ITK's own float arithmetic breaks either way (see Resample): 0.16 % here.
    assert (out["label"].as_tensor().float() != ref["label"].data.float()).float().mean().item() < 5e-3


@pytest.mark.parametrize("device", DEVICES)
def test_affine_elastic_deformation_equals_torchio(device):
    """TorchIO AffineElasticDeformation(affine_first=True) with given affine parameters and
    control points on ch2 + AAL: one gather; images within 2e-5 of the range, padded voxels
    included; labels but for ties."""
    img, lab, affine = _ch2_crop()
    cp = np.random.default_rng(3).uniform(-5, 5, (7, 8, 6, 3))
    cp[:2], cp[-2:], cp[:, :2], cp[:, -2:], cp[:, :, :2], cp[:, :, -2:] = 0, 0, 0, 0, 0, 0
    ap = dict(scales=(0.95, 1.05, 1.0), degrees=(4, 0, -6), translation=(2, 1, -3), default_pad_value="minimum")
    ep = dict(control_points=cp, max_displacement=(5, 5, 5))
    subject = tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine), label=tio.LabelMap(tensor=lab, affine=affine))
    ref = tio.AffineElasticDeformation(affine_first=True, affine_params=ap, elastic_params=ep)(subject)
    t = vtio.AffineElasticDeformation(True, ap, ep, label_keys=["label"], affine=affine)
    out = t({"image": img.to(device), "label": lab.to(device)})
    assert (out["image"].cpu() - ref["image"].data).abs().max().item() <= 2e-5 * 255
    assert (out["label"].cpu().float() != ref["label"].data.float()).float().mean().item() < 1e-3
    assert (out["image"].cpu() - img).abs().mean() > 1.0
    with pytest.raises(ValueError, match="affine_first=False"):
        vtio.AffineElasticDeformation(False, ap, ep)
    with pytest.raises(ValueError, match="unknown"):
        vtio.AffineElasticDeformation(True, ap, dict(ep, num_control_points=7))


def test_copy_affine_and_to_reference_space_equal_torchio():
    """CopyAffine: the other MetaTensors get the target's affine (the caller's keep theirs, the
    data are shared); ToReferenceSpace: an embedding-sized tensor gets TorchIO's affine for the
    reference's field of view (a MetaTensor reference and a (shape, affine) pair)."""
    from monai.data import MetaTensor

    img, lab, affine = _ch2_crop()
    other = affine.copy()
    other[:3, 3] += (5.0, -3.0, 2.0)
    data = {"image": MetaTensor(img, affine=torch.as_tensor(affine)),
            "label": MetaTensor(lab, affine=torch.as_tensor(other)), "name": "ch2"}
    out = vtio.CopyAffine("image")(data)
    ref = tio.CopyAffine("image")(tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine),
                                              label=tio.LabelMap(tensor=lab, affine=other)))
    np.testing.assert_array_equal(out["label"].affine.numpy(), ref["label"].affine)
    np.testing.assert_array_equal(data["label"].affine.numpy(), other)  # the input is left as it was
    assert out["label"].data_ptr() == data["label"].data_ptr() and out["name"] == "ch2"
    with pytest.raises(RuntimeError, match="not found"):
        vtio.CopyAffine("t1")(data)

    embedding = torch.rand(4, 10, 12, 7)
    ref = tio.ToReferenceSpace(tio.ScalarImage(tensor=img, affine=affine))(tio.ScalarImage(tensor=embedding))
    for reference in (MetaTensor(img, affine=torch.as_tensor(affine)), (tuple(img.shape[1:]), affine)):
        got = vtio.ToReferenceSpace(reference)(MetaTensor(embedding))
        assert torch.equal(got.as_tensor(), embedding)
        np.testing.assert_allclose(got.affine.numpy(), ref.affine, atol=1e-9)
    t = vtio.ToReferenceSpace((tuple(img.shape[1:]), affine))
    assert t({"emb": embedding})["emb"] is embedding
    np.testing.assert_allclose(t.last_affine, ref.affine, atol=1e-9)


def test_lambda_and_to_equal_torchio():
    """Lambda with types_to_apply (labels by label_keys) and its checks; To (dtype; TorchIO's is
    an intensity transform: label maps keep theirs)."""
    img, lab, affine = _ch2_crop()
    subject = tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine), label=tio.LabelMap(tensor=lab, affine=affine))
    for types in (None, ["intensity"], ["label"]):
        ref = tio.Lambda(lambda x: x * 2, types_to_apply=types)(subject)
        out = vtio.Lambda(lambda x: x * 2, types_to_apply=types, label_keys=["label"])({"image": img, "label": lab})
        assert torch.equal(out["image"], ref["image"].data) and torch.equal(out["label"], ref["label"].data)
    with pytest.raises(ValueError, match="number of dimensions"):
        vtio.Lambda(lambda x: x[0])(img)
    with pytest.raises(ValueError, match="of type"):
        vtio.Lambda(lambda x: 3)(img)
    ref = tio.To(torch.float64)(subject)
    out = vtio.To(torch.float64, label_keys=["label"])({"image": img, "label": lab})
    assert out["image"].dtype == ref["image"].data.dtype == torch.float64
    assert out["label"].dtype == ref["label"].data.dtype
    with pytest.raises(ValueError, match="target"):
        vtio.To(3)


def _subject_cases():
    return {
        "Noise": lambda: vtio.Noise(1.0, 2.0, seed=3, label_keys=["seg"]),
        "RandomNoise": lambda: vtio.RandomNoise(std=(1, 2), seed=3, label_keys=["seg"]),
        "BiasField": lambda: vtio.BiasField([0.1, 0.2, -0.1, 0.05], 1, label_keys=["seg"]),
        "RandomBiasField": lambda: vtio.RandomBiasField(seed=3, label_keys=["seg"]),
        "Gamma": lambda: vtio.Gamma(0.8, label_keys=["seg"]),
        "RandomGamma": lambda: vtio.RandomGamma(seed=3, label_keys=["seg"]),
        "Blur": lambda: vtio.Blur((1.0, 0.5, 2.0), label_keys=["seg"]),
        "RandomBlur": lambda: vtio.RandomBlur(seed=3, label_keys=["seg"]),
        "Clamp": lambda: vtio.Clamp(10, 80, label_keys=["seg"]),
        "ZNormalization": lambda: vtio.ZNormalization(label_keys=["seg"]),
        "RescaleIntensity": lambda: vtio.RescaleIntensity((0, 1), percentiles=(1, 99), label_keys=["seg"]),
        "HistogramStandardization": lambda: vtio.HistogramStandardization(np.linspace(0, 100, 13), label_keys=["seg"]),
        "Swap": lambda: vtio.Swap((5, 5, 5), [((0, 0, 0), (10, 10, 10))], label_keys=["seg"]),
    }


@pytest.mark.parametrize("name", list(_subject_cases()))
def test_intensity_transforms_on_a_subject_dictionary(name):
    """TorchIO's intensity transforms called on a dictionary (TorchIO's Subject): each image not
    under label_keys is transformed as a call on it alone would (its own draws: two images get
    two), the label map and other entries are kept as they are."""
    make = _subject_cases()[name]
    t1 = torch.rand(2, 1, 20, 22, 18, generator=torch.Generator().manual_seed(1)) * 100
    t2 = t1.flip(-1) + 5
    seg = (t1 > 50).to(torch.uint8)
    out = make()({"t1": t1, "t2": t2, "seg": seg, "name": "s"})
    assert out["seg"] is seg and out["name"] == "s"
    t = make()
    want1, want2 = t(t1), t(t2)  # the same sequence of calls: the same draws
    assert torch.equal(out["t1"], want1) and torch.equal(out["t2"], want2)
    assert not torch.equal(out["t1"], t1)


def test_masking_method_names_a_label_map_of_the_dictionary():
    """ZNormalization / RescaleIntensity / HistogramStandardization(masking_method='brain'): the
    dictionary's 'brain' entry is the mask, as TorchIO's Subject label map; equal to TorchIO's.
    Without a dictionary holding it, the name is refused."""
    img, lab, affine = _ch2_crop()
    brain = (lab > 0).to(torch.uint8)
    subject = tio.Subject(image=tio.ScalarImage(tensor=img, affine=affine),
                          brain=tio.LabelMap(tensor=brain, affine=affine))
    for vt_t, tio_t in ((vtio.ZNormalization(masking_method="brain", label_keys=["brain"]),
                         tio.ZNormalization(masking_method="brain")),
                        (vtio.RescaleIntensity((0, 1), percentiles=(0.5, 99.5), masking_method="brain",
                                               label_keys=["brain"]),
                         tio.RescaleIntensity((0, 1), percentiles=(0.5, 99.5), masking_method="brain"))):
        out = vt_t({"image": img, "brain": brain})
        ref = tio_t(subject)["image"].data
        torch.testing.assert_close(out["image"], ref, rtol=1e-5, atol=1e-5)
        assert out["brain"] is brain
    with pytest.raises(ValueError, match="looked up in the dictionary"):
        vtio.ZNormalization(masking_method="brain")(img)


def test_compose_on_a_subject_dictionary():
    """vtio.Compose of spatial and intensity transforms on a Subject dictionary: the spatial ones
    move image and label together (one gather), the intensity ones touch the image only."""
    img, lab, affine = _ch2_crop()
    aug = vtio.Compose([
        vtio.RandomAffine(scales=0.1, degrees=10, label_keys=["label"], affine=affine, seed=1),
        vtio.RandomBlur(std=(0, 1), label_keys=["label"], seed=2),
        vtio.RandomBiasField(label_keys=["label"], seed=3),
        vtio.RandomNoise(std=(0, 5), label_keys=["label"], seed=4),
    ])
    out = aug({"image": img, "label": lab})
    assert out["image"].dtype == torch.float32 and out["label"].dtype == torch.int16
    assert set(torch.unique(out["label"]).tolist()) <= set(torch.unique(lab).tolist())
    assert not torch.equal(out["image"], img)
