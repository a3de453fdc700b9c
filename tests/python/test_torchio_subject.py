"""TorchIO's Transform arguments on Subject dictionaries (voxaug's TorchIO intensity transforms):
``include`` / ``exclude`` / ``keep`` against TorchIO itself on a Subject of the real ch2 volume,
a second contrast made from it and the AAL atlas as the label map; ``p`` met once per Subject
(one gate per sample for every image, each open image with its own draws) against the binomial
law over many samples; the argument checks."""
import numpy as np
import pytest
import torch

import voxaug.torchio as vtio

from conftest import load_template

tio = pytest.importorskip("torchio")


@pytest.fixture(scope="module")
def subject_tensors():
    """t1: a crop of ch2 (float32); t2: its inverted contrast; seg: the AAL atlas crop (int16)."""
    t1, affine = load_template("ch2.nii.gz")
    seg, seg_affine = load_template("aal.nii.gz")
    assert np.allclose(affine, seg_affine)
    sl = (slice(None), slice(50, 110), slice(60, 130), slice(40, 90))
    t1 = t1[sl].float()
    return {"t1": t1, "t2": 255.0 - t1, "seg": seg[sl].to(torch.int16)}, affine


def _torchio_subject(tensors, affine):
    return tio.Subject(**{k: (tio.LabelMap if k == "seg" else tio.ScalarImage)(tensor=v.clone(), affine=affine)
                          for k, v in tensors.items()})


CASES = {
    "RescaleIntensity": (dict(out_min_max=(0, 1), percentiles=(1, 99)), {}),
    "ZNormalization": (dict(masking_method="seg"), {}),
    "Gamma": (dict(gamma=0.7), {}),
    "Clamp": (dict(out_min=20, out_max=120), {}),
    "Blur": (dict(std=(1.5, 1.0, 2.0)), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("select", [{"include": ["t1"]}, {"exclude": ["t1"]}, {"include": ["t2", "absent"]},
                                    {"exclude": []}, {"keep": {"t1": "t1_original", "seg": "seg_original"}}])
def test_include_exclude_keep_equal_torchio(subject_tensors, name, select):
    """Each entry of voxaug's output dictionary equals TorchIO's on the Subject (float32 rounding
    of the transforms themselves), the images left out are the inputs themselves, and the same
    keys come back (kept originals included)."""
    tensors, affine = subject_tensors
    kwargs, _ = CASES[name]
    ref = getattr(tio, name)(**kwargs, **select)(_torchio_subject(tensors, affine))
    out = getattr(vtio, name)(**kwargs, **select, label_keys=["seg"])(dict(tensors))
    assert sorted(out) == sorted(ref.keys())
    chosen = set(select.get("include", tensors)) - set(select.get("exclude", ()))
    for k, v in out.items():
        want = ref[k].data
        if k not in chosen or k == "seg" or k.endswith("_original"):
            source = tensors[k.replace("_original", "")]
            assert v is source, k  # untouched entries are passed through
            assert torch.equal(v, want.to(v.dtype)), k
        else:
            assert v.dtype == torch.float32
            torch.testing.assert_close(v, want.float(), rtol=2e-5, atol=2e-5 * float(want.abs().max()))
            assert not torch.equal(v, tensors[k]), k


def test_masking_with_an_excluded_label_map(subject_tensors):
    """The masking_method entry is read from the dictionary even when it is not transformed."""
    tensors, affine = subject_tensors
    kw = dict(masking_method="seg", include=["t2"])
    ref = tio.ZNormalization(**kw)(_torchio_subject(tensors, affine))
    out = vtio.ZNormalization(**kw)(dict(tensors))
    assert out["t1"] is tensors["t1"] and out["seg"] is tensors["seg"]
    torch.testing.assert_close(out["t2"], ref["t2"].data, rtol=2e-5, atol=2e-5)


def _binomial_bounds(n, p, z=3.29):  # 99.9 % two-sided
    half = z * (n * p * (1 - p)) ** 0.5
    return n * p - half, n * p + half


@pytest.mark.parametrize("cls,kwargs", [
    (vtio.RandomNoise, dict(std=(1.0, 2.0))),
    (vtio.RandomGamma, dict(log_gamma=(0.2, 0.4))),
    (vtio.RandomBiasField, dict(coefficients=(0.3, 0.5), order=1)),
    (vtio.RandomBlur, dict(std=(1.0, 2.0))),
    (vtio.RandomGhosting, dict(intensity=(0.5, 1.0))),
])
def test_probability_is_met_once_per_subject(cls, kwargs):
    """p = 0.3 over 3000 subjects of two images: each sample is transformed in both images or in
    neither (the gate is the subject's), the count of transformed samples lies in the binomial
    99.9 % interval, the open images draw their own parameters (the two differ), the closed
    samples come back as they were, and last_subject_applied (and last_applied) hold the gate."""
    n = 3000
    g = torch.Generator().manual_seed(1)
    a = 1.0 + torch.rand((n, 1, 6, 5, 4), generator=g)
    b = a.clone()
    t = cls(**kwargs, p=0.3, seed=7)
    out = t({"a": a, "b": b, "id": "subject-7"})
    assert out["id"] == "subject-7"
    changed_a = (out["a"] != a).flatten(1).any(1)
    changed_b = (out["b"] != b).flatten(1).any(1)
    assert torch.equal(changed_a, changed_b)
    lo, hi = _binomial_bounds(n, 0.3)
    assert lo <= int(changed_a.sum()) <= hi
    assert torch.equal(t.last_subject_applied, changed_a)
    if hasattr(t, "last_applied"):  # the transforms that keep one (RandomNoise draws in the kernel)
        assert torch.equal(torch.as_tensor(t.last_applied).cpu().bool(), changed_a)
    opened = changed_a.nonzero().flatten()
    assert not torch.equal(out["a"][opened], out["b"][opened])  # own draws per image
    closed = (~changed_a).nonzero().flatten()
    assert torch.equal(out["a"][closed], a[closed]) and torch.equal(out["b"][closed], b[closed])


def test_probability_per_subject_in_place_swap():
    """RandomSwap(in_place=True) with a mixed gate: only the open samples of each image change,
    in the inputs themselves."""
    n = 400
    x = torch.arange(n * 8 * 8 * 8, dtype=torch.float32).reshape(n, 1, 8, 8, 8)
    y = x.clone() * 2
    x0, y0 = x.clone(), y.clone()
    t = vtio.RandomSwap(patch_size=2, num_iterations=3, p=0.5, seed=3, in_place=True)
    out = t({"x": x, "y": y})
    assert out["x"] is x and out["y"] is y
    changed = (x != x0).flatten(1).any(1)
    assert torch.equal(changed, (y != y0).flatten(1).any(1))
    assert torch.equal(changed, t.last_subject_applied)
    lo, hi = _binomial_bounds(n, 0.5)
    assert lo <= int(changed.sum()) <= hi


def test_closed_gate_returns_the_subject_as_it_came(subject_tensors):
    """p = 0: nothing is transformed and nothing is kept, as TorchIO (whose p check comes before
    its keep)."""
    tensors, affine = subject_tensors
    ref = tio.RandomNoise(p=0.0, keep={"t1": "orig"})(_torchio_subject(tensors, affine))
    out = vtio.RandomNoise(p=0.0, keep={"t1": "orig"}, seed=1)(dict(tensors))
    assert sorted(out) == sorted(ref.keys()) == sorted(tensors)
    assert all(out[k] is tensors[k] for k in tensors)


def test_unbatched_images_one_gate_per_call(subject_tensors):
    """4-D images are one subject: the gate opens all of them or none, over many calls."""
    tensors, _ = subject_tensors
    small = {k: v[:, :8, :8, :8] for k, v in tensors.items()}
    t = vtio.RandomNoise(std=(1.0, 1.0), p=0.5, seed=11, label_keys=["seg"])
    opened = 0
    for _ in range(200):
        out = t(small)
        ca, cb = not torch.equal(out["t1"], small["t1"]), not torch.equal(out["t2"], small["t2"])
        assert ca == cb and torch.equal(out["seg"], small["seg"])
        opened += ca
    lo, hi = _binomial_bounds(200, 0.5)
    assert lo <= opened <= hi


def test_subject_argument_errors():
    with pytest.raises(ValueError, match="include and exclude cannot both be specified"):
        vtio.RandomNoise(include=["a"], exclude=["b"])
    with pytest.raises(ValueError, match="include must be a sequence of keys, not the string"):
        vtio.Gamma(0.5, include="t1")
    with pytest.raises(ValueError, match="exclude must be a sequence of keys"):
        vtio.Clamp(exclude=3)
    with pytest.raises(ValueError, match="keep must be a dictionary"):
        vtio.RescaleIntensity(keep=["t1"])
    with pytest.raises(KeyError, match="keep names"):
        vtio.RescaleIntensity(keep={"t9": "t9_original"})({"t1": torch.rand(1, 4, 4, 4)})
    with pytest.raises(ValueError, match="agree on the batch size"):
        vtio.RandomNoise(p=0.5, seed=1)({"a": torch.rand(2, 1, 4, 4, 4), "b": torch.rand(3, 1, 4, 4, 4)})


# ---------------- the spatial and label transforms ----------------
SPATIAL_CASES = {
    "Flip": (dict(axes=(0, 2)), {}),
    "Pad": (dict(padding=(2, 1, 0, 3, 1, 1)), {}),
    "Crop": (dict(cropping=(2, 1, 0, 3, 1, 1)), {}),
    "CropOrPad": (dict(target_shape=(40, 80, 30), mask_name="seg"), {}),
    "Transpose": ({}, {}),
    "EnsureShapeMultiple": (dict(target_multiple=8), {}),
}


@pytest.mark.parametrize("name", sorted(SPATIAL_CASES))
@pytest.mark.parametrize("select", [{"include": ["t1"]}, {"exclude": ["seg"]}, {"exclude": ["t1", "t2"]},
                                    {"keep": {"t2": "t2_original"}}])
def test_spatial_include_exclude_keep_equal_torchio(subject_tensors, name, select):
    """TorchIO's spatial transforms with include / exclude / keep: the transformed images equal
    TorchIO's bit for bit (exact index maps), the others (a mask read by name included) come
    back as they were, the kept originals are added."""
    tensors, affine = subject_tensors
    kwargs, _ = SPATIAL_CASES[name]
    chosen = set(select.get("include", tensors)) - set(select.get("exclude", ()))
    out = getattr(vtio, name)(**kwargs, **select)(dict(tensors))
    try:
        ref = getattr(tio, name)(**kwargs, **select)(_torchio_subject(tensors, affine))
    except RuntimeError as e:  # TorchIO checks that a Subject's images (kept ones too) share one shape
        assert "More than one value" in str(e)
        # TorchIO's transform of the images it would transform (and the mask it reads)
        part = {k: v for k, v in tensors.items() if k in chosen or k == kwargs.get("mask_name")}
        ref = getattr(tio, name)(**kwargs)(_torchio_subject(part, affine))
    assert sorted(out) == sorted(set(tensors) | set(select.get("keep", {}).values()))
    for k, v in out.items():
        if k not in chosen or k.endswith("_original"):
            assert v is tensors[k.replace("_original", "")], k  # passed through
        else:
            assert torch.equal(v, ref[k].data.to(v.dtype)), k


def test_label_transforms_include_exclude(subject_tensors):
    """TorchIO's label transforms act on the label maps named by include (others untouched)."""
    tensors, affine = subject_tensors
    tensors = dict(tensors, seg2=tensors["seg"].clone())
    subject = tio.Subject(t1=tio.ScalarImage(tensor=tensors["t1"], affine=affine),
                          seg=tio.LabelMap(tensor=tensors["seg"].clone(), affine=affine),
                          seg2=tio.LabelMap(tensor=tensors["seg2"].clone(), affine=affine))
    a, b = (int(v) for v in torch.unique(tensors["seg"])[1:3])  # two labels of the crop
    ref = tio.RemapLabels({a: b, b: a}, include=["seg2"])(subject)
    out = vtio.RemapLabels({a: b, b: a}, include=["seg2"], label_keys=["seg", "seg2"])(
        {k: tensors[k] for k in ("t1", "seg", "seg2")})
    for k in ("t1", "seg", "seg2"):
        assert torch.equal(out[k], ref[k].data.to(out[k].dtype)), k
    assert out["seg"] is tensors["seg"] and not torch.equal(out["seg2"], tensors["seg2"])


def test_filtered_transforms_run_as_themselves_in_compose(subject_tensors):
    """A Compose of spatial steps fuses them into one gather; a step with include / exclude runs
    as itself, so the pipeline equals TorchIO's Compose of the same steps."""
    tensors, affine = subject_tensors
    steps = lambda lib: [lib.Flip(axes=(1,), include=["t1"]), lib.Pad(padding=2), lib.Flip(axes=(0,), exclude=["seg"]),
                         lib.Crop(cropping=(1, 0, 2, 2, 0, 1))]  # noqa: E731
    ref = tio.Compose(steps(tio))(_torchio_subject(tensors, affine))
    out = vtio.Compose(steps(vtio))(dict(tensors))
    for k in tensors:
        assert torch.equal(out[k], ref[k].data.to(out[k].dtype)), k


def test_random_spatial_include(subject_tensors):
    """RandomAffine / RandomElasticDeformation with include: the images left out come back as
    they were; the included ones are transformed (and alike: the same draw for every image)."""
    tensors, _ = subject_tensors
    data = dict(tensors, t3=tensors["t1"].clone())
    for t in (vtio.RandomAffine(degrees=15, include=["t1", "t3"], seed=3),
              vtio.RandomElasticDeformation(max_displacement=5, include=["t1", "t3"], label_keys=["seg"], seed=3)):
        out = t(data)
        assert out["t2"] is data["t2"] and out["seg"] is data["seg"]
        assert not torch.equal(out["t1"], data["t1"]) and torch.equal(out["t1"], out["t3"])


# ---------------- TorchIO's p on the deterministic transforms ----------------
P_CASES = {  # name: (kwargs, applies to the t1 / seg crop and changes it)
    "ZNormalization": dict(masking_method="seg"),
    "RescaleIntensity": dict(out_min_max=(0, 1)),
    "Clamp": dict(out_min=20, out_max=120),
    "Flip": dict(axes=(0,)),
    "Pad": dict(padding=2),
    "Crop": dict(cropping=(1, 0, 2, 2, 0, 1)),
    "Gamma": dict(gamma=0.7),
    "Lambda": dict(function=lambda x: x * 2),
    "Affine": dict(scales=1.1, degrees=(5, 0, -3), translation=1),
}  # (not CropOrPad or Resize: TorchIO's call their own inner transforms, each drawing its gate too)


def test_every_deterministic_transform_takes_torchio_p():
    """Each voxaug.torchio transform takes p (the random ones their own, the others TorchIO's
    gate) and refuses one outside [0, 1], naming it."""
    import inspect

    for name in vtio.__all__:
        cls = getattr(vtio, name)
        if cls.__module__ == "voxaug.crop":  # the patch samplers and GridAggregator: not transforms
            continue
        assert "p" in inspect.signature(cls).parameters, name
    for name, kw in P_CASES.items():
        with pytest.raises(ValueError, match="prob must be in"):
            getattr(vtio, name)(**kw, p=1.5)


@pytest.mark.parametrize("name", sorted(P_CASES))
def test_deterministic_p_decides_as_torchio_from_the_same_torch_seed(subject_tensors, name):
    """The gate is TorchIO's own draw (torch.rand(1) > p, one per call): from the same
    torch.manual_seed, 40 calls with p=0.4 apply the transform at exactly the calls TorchIO does,
    the applied results equal TorchIO's, and a closed gate returns the dictionary as it came."""
    tensors, affine = subject_tensors
    kw = P_CASES[name]
    import inspect

    cls = getattr(vtio, name)
    t = cls(**kw, p=0.4, **({"label_keys": ["seg"]} if "label_keys" in inspect.signature(cls).parameters else {}))
    ref_t = getattr(tio, name)(**kw, p=0.4)
    torch.manual_seed(123)
    ours = []
    for _ in range(40):
        data = dict(tensors)
        out = t(data)
        ours.append(out is not data)
        if out is data:
            assert all(out[k] is tensors[k] for k in tensors)
        else:
            applied = out
    torch.manual_seed(123)
    theirs = []
    for _ in range(40):
        subject = _torchio_subject(tensors, affine)
        ref = ref_t(subject)
        changed = ref["t1"].data.shape != tensors["t1"].shape or not torch.equal(ref["t1"].data, subject["t1"].data)
        theirs.append(changed)
        if theirs[-1]:
            last_ref = ref
    assert ours == theirs and 5 < sum(ours) < 35
    state = torch.get_rng_state()  # with p = 1 no draw from torch's generator at all
    cls(**kw, **({"label_keys": ["seg"]} if "label_keys" in inspect.signature(cls).parameters else {}))(dict(tensors))
    assert torch.equal(state, torch.get_rng_state())
    torch.testing.assert_close(applied["t1"], last_ref["t1"].data.to(applied["t1"].dtype), rtol=2e-5,
                               atol=2e-5 * float(last_ref["t1"].data.abs().max()))


def test_gated_steps_run_as_themselves_in_compose(subject_tensors):
    """In a Compose, steps with p < 1 are not fused (the gate is drawn by each call): the result
    equals the steps called one by one from the same torch seed, on tensors and dictionaries."""
    tensors, _ = subject_tensors
    steps = lambda: [vtio.Flip(axes=(0,), p=0.5), vtio.Pad(padding=2, p=0.5), vtio.Clamp(20, 120, p=0.5),  # noqa: E731
                     vtio.Gamma(0.7, p=0.5)]
    for data in (tensors["t1"][None], dict(tensors)):
        for seed in range(6):
            torch.manual_seed(seed)
            out = vtio.Compose(steps())(data)
            torch.manual_seed(seed)
            ref = data
            for s in steps():
                ref = s(ref)
            if isinstance(data, dict):
                assert all(torch.equal(out[k], ref[k]) for k in data)
            else:
                assert torch.equal(out, ref)
