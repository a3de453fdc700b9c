"""Checks shared by the spatial tests (test_spatial, test_inverse): outputs vs MONAI's."""
import torch
from monai.data import MetaTensor


def plain(x):
    return x.as_tensor() if isinstance(x, MetaTensor) else torch.as_tensor(x)


def assert_image_close(ours, ref, tol):
    """Max error within `tol` times the reference's range; not all zeros, no NaN."""
    ours, ref = plain(ours), plain(ref)
    assert ours.shape == ref.shape
    rng = (ref.max() - ref.min()).item()
    err = (ours.double() - ref.double()).abs().max().item()
    assert err <= tol * rng, f"max error {err:.3g} > {tol} x range {rng:.4g}"
    assert ours.abs().sum() > 0 and not torch.isnan(ours).any()


def assert_labels_match(ours, ref, ties):
    """At most a fraction `ties` of the labels differ (half-voxel ties); not all zeros."""
    ours, ref = plain(ours), plain(ref)
    assert ours.shape == ref.shape
    frac = (ours.double() != ref.double()).double().mean().item()
    assert frac <= ties, f"{frac:.3g} of the labels differ (allowed: half-voxel ties, {ties})"
    assert ours.abs().sum() > 0


def assert_bitwise(ours, ref):
    ours, ref = plain(ours), plain(ref)
    assert ours.shape == ref.shape and torch.equal(ours.to(ref.dtype), ref)
