"""voxaug.transforms.OneOf: MONAI's OneOf / TorchIO's OneOf, one choice per sample of a batch."""
import numpy as np
import pytest
import torch

import monai.transforms as mt
from monai.data import MetaTensor
from monai.utils import TraceKeys

from voxaug import transforms as T


def _volumes(n=8, size=(6, 7, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn((n, 1) + size, generator=g) * 50 + 100


def _mixed_seed(make, n, want=None):
    """A seed whose draw for n samples uses more than one transform (every one in `want`)."""
    for seed in range(1, 200):
        ch = make(seed).draw_choices(n)
        if len(set(ch)) > 1 and (want is None or set(want) <= set(ch)):
            return seed, ch
    raise AssertionError("no mixed draw in 200 seeds")


def test_choice_frequencies_follow_the_weights():
    """6000 per-sample draws: each transform's share within 4 standard deviations of its
    normalised weight (MONAI's _normalize_probabilities); a zero weight is never chosen."""
    weights = [1.0, 2.0, 0.0, 3.0]
    t = T.OneOf([T.Flip(0), T.Flip(1), T.Flip(2), T.Rotate90(1)], weights, seed=4)
    assert t.weights == pytest.approx(tuple(np.array(weights) / 6.0))
    ch = np.array(t.draw_choices(6000))
    counts = np.bincount(ch, minlength=4)
    assert counts[2] == 0
    for c, w in zip(counts, weights):
        p = w / 6.0
        assert abs(c / 6000 - p) <= 4 * (p * (1 - p) / 6000) ** 0.5 + 1e-12, counts
    # per sample, not per batch: sample first_sample + i draws the same in any batch
    assert t.draw_choices(5, first_sample=3, seed=9) == t.draw_choices(8, seed=9)[3:]


def test_mixed_batch_equals_each_chosen_transform_per_sample():
    """A batch whose samples chose different transforms: each sample equals the chosen
    transform applied alone, and MONAI's equivalent of it."""
    x = _volumes()
    monai = [mt.Flip(0), mt.Rotate90(1, (0, 1)), mt.ShiftIntensity(5.0)]

    def make(seed):
        return T.OneOf([T.Flip(0), T.Rotate90(1, (0, 1)), T.ShiftIntensity(5.0)], seed=seed)

    x = x[..., :6, :6, :]  # square in the turned plane: every choice keeps the shape
    seed, ch = _mixed_seed(make, 8, want=(0, 1, 2))
    out = make(seed)(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    for i, j in enumerate(ch):
        ref = monai[j](x[i])
        assert torch.equal(out[i], torch.as_tensor(ref)), (i, j)


def test_uniform_draw_runs_the_transform_on_the_data():
    x = _volumes(3)
    t = T.OneOf([T.ShiftIntensity(1.0), T.ShiftIntensity(2.0)], [0.0, 1.0], seed=1)
    assert torch.equal(t(x), x + 2.0)
    assert torch.equal(t(x[0]), x[0] + 2.0)  # one (C, D, H, W) sample
    assert T.OneOf([])(x) is x
    with pytest.raises(ValueError, match="no transforms to choose from"):
        T.OneOf([]).draw_choices(2)


def test_dictionary_batch_shares_the_choice_across_keys():
    img = _volumes(6)
    lab = (img > 100).to(torch.uint8)

    def make(seed):
        return T.OneOf([T.Flipd(["img", "lab"], 2), T.Rotate90d(["img", "lab"], 2, (1, 2))], seed=seed)

    seed, ch = _mixed_seed(make, 6)
    out = make(seed)({"img": img, "lab": lab, "name": "case-1", "single": img[0]})
    assert out["name"] == "case-1" and out["single"] is not None and out["lab"].dtype == torch.uint8
    for i, j in enumerate(ch):
        ref = mt.Flipd(["img", "lab"], 2) if j == 0 else mt.Rotate90d(["img", "lab"], 2, (1, 2))
        r = ref({"img": img[i], "lab": lab[i]})
        assert torch.equal(out["img"][i], torch.as_tensor(r["img"]))
        assert torch.equal(out["lab"][i], torch.as_tensor(r["lab"]))


def test_torchio_mapping_and_random_members():
    """TorchIO's {transform: weight}; random members draw for their sub-batch (shapes kept)."""
    x = _volumes(8)
    def make(seed):
        return T.OneOf({T.RandGaussianNoise(prob=1.0, std=1.0, sample_std=False): 0.5, T.Flip(1): 0.5}, seed=seed)

    seed, ch = _mixed_seed(make, 8)
    t = make(seed)
    assert t.weights == (0.5, 0.5)
    out = t(x)
    for i, j in enumerate(ch):
        if j == 1:
            assert torch.equal(out[i], torch.flip(x[i], [2]))
        else:
            d = out[i] - x[i]
            assert 0.5 < d.std().item() < 1.5  # the noise of std 1


def test_outputs_that_do_not_form_a_batch_are_refused():
    x = _volumes(8, size=(8, 8, 8))

    def make(seed):
        return T.OneOf([T.Resize((4, 4, 4)), T.Flip(0)], seed=seed)

    seed, _ = _mixed_seed(make, 8)
    with pytest.raises(ValueError, match=r"transforms\[0\] and transforms\[1\] must come out alike"):
        make(seed)(x)

    def make_cast(seed):
        return T.OneOf([T.ScaleIntensity(minv=0.0, maxv=1.0), T.Flip(0)], seed=seed)

    seed, _ = _mixed_seed(make_cast, 8)
    with pytest.raises(ValueError, match="must come out alike"):  # uint8 stays uint8 under Flip, not ScaleIntensity
        make_cast(seed)(x.to(torch.uint8))


@pytest.mark.parametrize("bad, match", [
    (dict(transforms=[T.Flip(0)], weights=[1.0, 2.0]), "one entry per transform"),
    (dict(transforms=[T.Flip(0), T.Flip(1)], weights=[1.0, -1.0]), ">= 0"),
    (dict(transforms=[T.Flip(0), T.Flip(1)], weights=[0.0, 0.0]), "at least one weight"),
    (dict(transforms=[T.Flip(0), T.Flip(1)], weights=[1.0, float("nan")]), "finite"),
    (dict(transforms={T.Flip(0): 1.0}, weights=[1.0]), "weights must be None"),
    (dict(transforms=[T.Flip(0), 3]), r"transforms\[1\] must be callable"),
])
def test_bad_arguments_are_named(bad, match):
    with pytest.raises(ValueError, match=match):
        T.OneOf(**bad)


def test_mismatched_batches_are_refused():
    with pytest.raises(ValueError, match="agree on the batch size"):
        T.OneOf([T.Flip(0), T.Flip(1)])({"a": _volumes(2), "b": _volumes(3)})


def test_metatensor_one_choice_per_call_record_and_inverse():
    """MetaTensors: one choice per call (MONAI's per-call OneOf); OneOf's record with the index
    on top of the chosen transform's; inverse (OneOf's and Compose's) restores the input and
    its affine, and pops every record."""
    aff = torch.diag(torch.tensor([2.0, 1.5, 1.0, 1.0], dtype=torch.float64))
    x = _volumes(4, size=(6, 6, 5))
    seen = set()
    for seed in range(1, 12):
        t = T.OneOf([T.Flip(0), T.Rotate90(1, (0, 1)), T.ShiftIntensity(3.0)], seed=seed)
        j = T.OneOf([T.Flip(0), T.Rotate90(1, (0, 1)), T.ShiftIntensity(3.0)], seed=seed).draw_choices(1)[0]
        seen.add(j)
        fwd = t(MetaTensor(x.clone(), affine=aff.clone()))
        rec = fwd.applied_operations[-1]
        assert rec[TraceKeys.CLASS_NAME] == "OneOf" and rec[TraceKeys.EXTRA_INFO]["index"] == j
        ref = [lambda v: torch.flip(v, [2]), lambda v: torch.rot90(v, 1, [2, 3]), lambda v: v + 3.0][j](x)
        assert torch.equal(fwd.as_tensor(), ref)
        inv = t.inverse(fwd)
        expected = x + 3.0 if j == 2 else x  # intensity: nothing to undo (MONAI skips it too)
        assert torch.equal(inv.as_tensor(), expected) and inv.applied_operations == []
        assert torch.allclose(inv.affine.double(), aff)
        c = T.Compose([T.Flip(1), T.OneOf([T.Flip(0), T.Rotate90(1, (0, 1))], seed=seed)])
        fwd = c(MetaTensor(x.clone(), affine=aff.clone()))
        inv = c.inverse(fwd)
        assert torch.equal(inv.as_tensor(), x) and inv.applied_operations == []
    assert seen == {0, 1, 2}
    with pytest.raises(RuntimeError, match="not this OneOf's record"):
        t.inverse(T.Flip(0)(MetaTensor(x.clone(), affine=aff.clone())))
    with pytest.raises(ValueError, match="no MetaTensor"):
        t.inverse(x)


def test_in_a_compose_equals_the_steps_one_by_one():
    x = _volumes(6, size=(8, 8, 8))

    def chain(seed):
        return [T.RandAffine(prob=1.0, rotate_range=0.3, padding_mode="zeros", seed=seed),
                T.OneOf([T.Flip(0), T.Rotate90(1, (1, 2)), T.RandShiftIntensity(2.0, prob=1.0, seed=seed + 2)],
                        seed=seed + 1),
                T.ShiftIntensity(1.0), T.Flip(2)]

    fused = T.Compose(chain(5))(x)
    ref = x
    for t in chain(5):
        ref = t(ref)
    assert torch.equal(fused, ref)
    assert T.Compose(chain(5))([x[:2], x[2:]])[1].shape == (4, 1, 8, 8, 8)  # a list of items: mapped


# ---------------- SomeOf / RandomOrder ----------------
def _digit(j):
    """A transform that appends digit j + 1 to every value (x -> 10 x + j + 1): the output of a
    chain of them spells the applied order."""
    return lambda v: v * 10 + (j + 1)


def _spelled(order):
    v = 0
    for j in order:
        v = v * 10 + j + 1
    return v


@pytest.mark.parametrize("kw", [dict(num_transforms=(1, 3), weights=[1.0, 2.0, 3.0]),
                                dict(num_transforms=2, replace=True), dict()])
def test_some_of_orders_match_monai_distribution(kw):
    """Applied orders over 3000 samples (voxaug: one batch; MONAI: 3000 calls) have the same
    distribution (chi-square test of the two tables of ordered tuples), and each sample's output
    is its drawn order applied in sequence."""
    from scipy import stats
    ours_t = T.SomeOf([_digit(j) for j in range(3)], seed=5, **kw)
    n = 3000
    orders = ours_t.draw_choices(n, seed=77)
    x = torch.zeros(n, 1, 1, 1, 1, dtype=torch.float64)
    fixed = T.SomeOf([_digit(j) for j in range(3)], **kw)
    fixed._next_seed = lambda: 77
    y = fixed(x).flatten().tolist()
    assert y == [float(_spelled(o)) for o in orders]
    m = mt.SomeOf([_digit(j) for j in range(3)], **kw)
    m.set_random_state(3)
    theirs = [int(m(torch.zeros(1, dtype=torch.float64)).item()) for _ in range(n)]
    keys = sorted({_spelled(o) for o in orders} | set(theirs))
    table = np.array([[sum(1 for o in orders if _spelled(o) == k) for k in keys],
                      [theirs.count(k) for k in keys]])
    assert stats.chi2_contingency(table)[1] > 1e-3, (keys, table)


def test_random_order_applies_every_transform_in_a_per_sample_order():
    t = T.RandomOrder([_digit(j) for j in range(4)], seed=2)
    orders = t.draw_choices(500, seed=4)
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)
    assert len(set(orders)) == 24  # every permutation shows up in 500 draws (miss: < 1e-7)
    t._next_seed = lambda: 4
    y = t(torch.zeros(500, 1, 1, 1, 1, dtype=torch.float64)).flatten().tolist()
    assert y == [float(_spelled(o)) for o in orders]


def test_some_of_mixed_batch_and_dictionary_equal_each_order_per_sample():
    """Real transforms on a batch: each sample equals its drawn order applied to it alone; a
    dictionary shares the draw across keys."""
    x = _volumes(8, size=(6, 6, 6))
    members = [T.Flip(0), T.Rotate90(1, (1, 2)), T.ShiftIntensity(5.0)]
    t = T.SomeOf(members, num_transforms=(0, 3), seed=3)
    orders = t.draw_choices(8, seed=12)
    assert len(set(orders)) > 1
    t._next_seed = lambda: 12
    out = t(x)
    for i, o in enumerate(orders):
        ref = x[i:i + 1]
        for j in o:
            ref = members[j](ref)
        assert torch.equal(out[i:i + 1], ref), (i, o)
    keys = ["a", "b"]
    td = T.SomeOf([T.Flipd(keys, 0), T.Rotate90d(keys, 1, (1, 2)), T.ShiftIntensityd(keys, 5.0)],
                  num_transforms=(0, 3))
    td._next_seed = lambda: 12
    d = td({"a": x, "b": x + 1, "meta": "kept"})
    assert torch.equal(d["a"], out) and torch.allclose(d["b"], out + 1) and d["meta"] == "kept"


def test_some_of_metatensor_record_and_inverse():
    """MetaTensors: one order per call, recorded as MONAI's applied_order; inverse (and Compose's)
    undoes the spatial members in reverse order and pops every record."""
    aff = torch.diag(torch.tensor([2.0, 1.5, 1.0, 1.0], dtype=torch.float64))
    x = _volumes(2, size=(6, 6, 5))
    for seed in range(1, 6):
        t = T.SomeOf([T.Flip(0), T.Rotate90(1, (0, 1)), T.Flip(2)], num_transforms=(1, 3), seed=seed)
        order = T.SomeOf([T.Flip(0), T.Rotate90(1, (0, 1)), T.Flip(2)], num_transforms=(1, 3),
                         seed=seed).draw_choices(1)[0]
        fwd = t(MetaTensor(x.clone(), affine=aff.clone()))
        rec = fwd.applied_operations[-1]
        assert rec[TraceKeys.CLASS_NAME] == "SomeOf" and rec[TraceKeys.EXTRA_INFO]["applied_order"] == list(order)
        inv = t.inverse(fwd)
        assert torch.equal(inv.as_tensor(), x) and inv.applied_operations == []
        assert torch.allclose(inv.affine.double(), aff)
        c = T.Compose([T.Flip(1), T.RandomOrder([T.Flip(0), T.Rotate90(1, (0, 1))], seed=seed)])
        inv = c.inverse(c(MetaTensor(x.clone(), affine=aff.clone())))
        assert torch.equal(inv.as_tensor(), x) and inv.applied_operations == []


@pytest.mark.parametrize("kw", [dict(num_transforms="2"), dict(num_transforms=(1, 2, 3)),
                                dict(num_transforms=(1.0, 2)), dict(num_transforms=(0, 4)),
                                dict(weights=[1.0, 2.0]), dict(weights=[1.0, -1.0, 1.0]),
                                dict(weights=[0.0, 0.0, 0.0])])
def test_some_of_rejects_what_monai_rejects(kw):
    with pytest.raises(ValueError):
        mt.SomeOf([_digit(j) for j in range(3)], **kw)
    with pytest.raises(ValueError):
        T.SomeOf([_digit(j) for j in range(3)], **kw)


def test_some_of_refuses_a_draw_that_runs_out_of_weights():
    with pytest.raises(ValueError, match="non-zero weight"):
        T.SomeOf([_digit(j) for j in range(3)], num_transforms=3, weights=[1.0, 0.0, 1.0])
    assert T.SomeOf([_digit(j) for j in range(3)], num_transforms=3, weights=[1.0, 0.0, 1.0], replace=True)


def _shifted(out, x):
    """Per sample: True where the sample is x + 1, False where it is x unchanged."""
    flat_o, flat_x = out.flatten(1), x.flatten(1)
    added = (flat_o == flat_x + 1).all(1)
    same = (flat_o == flat_x).all(1)
    assert bool((added ^ same).all()), "every sample is either applied or untouched"
    return added


@pytest.mark.parametrize("make", [
    lambda p, seed: T.OneOf({T.ShiftIntensity(1.0): 1.0}, p=p, seed=seed),   # TorchIO's OneOf(..., p=)
    lambda p, seed: T.Compose([T.ShiftIntensity(1.0)], p=p).set_random_state(seed),  # TorchIO's Compose(..., p=)
])
def test_torchio_p_gates_each_sample(make):
    """TorchIO's p on OneOf and Compose (a transform applied with probability p): per sample of a
    batch, 4000 draws within 4 standard deviations of p; p=1 draws exactly as without p; p=0 never
    applies; the same seed, the same gates."""
    x = torch.randn(4000, 1, 2, 2, 2)
    for p in (0.3, 0.75):
        applied = _shifted(make(p, 11)(x), x)
        share = applied.double().mean().item()
        assert abs(share - p) <= 4 * (p * (1 - p) / 4000) ** 0.5, (p, share)
        assert torch.equal(_shifted(make(p, 11)(x), x), applied)
        assert not torch.equal(_shifted(make(p, 12)(x), x), applied)
    assert _shifted(make(1.0, 11)(x), x).all() and not _shifted(make(0.0, 11)(x), x).any()
    one = T.OneOf([T.Flip(0), T.Flip(1), T.Rotate90(1, (0, 1))], seed=5)
    assert one.draw_choices(64) == T.OneOf([T.Flip(0), T.Flip(1), T.Rotate90(1, (0, 1))], seed=5,
                                           p=1.0).draw_choices(64)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="prob must be in"):
            make(bad, 1)


def test_torchio_p_on_subjects_and_metatensors_records_and_inverse():
    """A gated OneOf / Compose on MetaTensors (one draw per call): the closed gate returns the
    input as it is with a record of its own, which inverse pops; the open gate runs the chain,
    and inverse undoes it (Compose.inverse through the gate). Subject dictionaries (TorchIO's
    form) share one gate across keys."""
    aff = torch.diag(torch.tensor([2.0, 1.5, 1.0, 1.0], dtype=torch.float64))
    x = _volumes(1, size=(6, 6, 5))
    outcomes = set()
    for seed in range(1, 30):
        c = T.Compose([T.Flip(1), T.Rotate90(1, (0, 1))], p=0.5).set_random_state(seed)
        fwd = c(MetaTensor(x.clone(), affine=aff.clone()))
        applied = not torch.equal(fwd.as_tensor(), x)
        outcomes.add(applied)
        if applied:
            assert torch.equal(fwd.as_tensor(), torch.rot90(torch.flip(x, [3]), 1, [2, 3]))
        rec = fwd.applied_operations[-1]
        assert rec[TraceKeys.CLASS_NAME] == "OneOf" and rec[TraceKeys.EXTRA_INFO]["index"] == (0 if applied else 1)
        inv = c.inverse(fwd)
        assert torch.equal(inv.as_tensor(), x) and inv.applied_operations == []
        assert torch.allclose(inv.affine.double(), aff)
    assert outcomes == {True, False}
    from voxaug import torchio as vio

    subject = {"t1": x[0].clone(), "seg": (x[0] > 100).float()}
    for seed in range(1, 20):
        out = vio.OneOf({vio.Lambda(lambda v: v + 1.0): 1.0}, p=0.5, seed=seed)(dict(subject))
        moved = [not torch.equal(out[k], subject[k]) for k in subject]
        assert moved[0] == moved[1]
