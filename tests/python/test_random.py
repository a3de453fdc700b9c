"""Host-side Philox parameter draws (voxaug.ops.philox_uniform) used by the spatial transforms."""
import numpy as np
import pytest
import torch
from scipy import stats

from voxaug import ops
from voxaug import transforms as vt


def test_rows_depend_only_on_seed_and_global_sample():
    a = ops.philox_uniform(2**63 + 12345, 0, 6, 9)  # seeds are full 64-bit
    assert a.dtype == torch.float64 and a.shape == (6, 9) and a.device.type == "cpu"
    assert torch.equal(a[3:], ops.philox_uniform(2**63 + 12345, 3, 3, 9))
    assert torch.equal(a[:, :4], ops.philox_uniform(2**63 + 12345, 0, 6, 4))  # prefix of a row
    assert not torch.equal(a, ops.philox_uniform(2**63 + 12346, 0, 6, 9))


def test_uniform_distribution():
    u = ops.philox_uniform(7, 0, 2000, 16).flatten().numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    # neighbouring draws are not correlated
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02


def test_opcheck_and_bad_arguments():
    torch.library.opcheck(torch.ops.voxaug.philox_uniform, (5, 0, 3, 5))
    with pytest.raises(ValueError, match="batch and count must be >= 0"):
        ops.philox_uniform(1, 0, -1, 2)
    with pytest.raises(ValueError, match="first_sample must be in"):
        ops.philox_uniform(1, -1, 1, 2)


def test_spatial_draws_are_philox_rows():
    t = vt.RandAffine(prob=1.0, rotate_range=(0.3, 0.3, 0.3), seed=3)
    p = t.draw_params(4, first_sample=2, seed=99)
    assert torch.equal(p, ops.philox_uniform(99, 2, 4, p.shape[1]))


def test_spatial_batch_can_share_one_draw():
    x = torch.randn(1, 1, 12, 13, 14, generator=torch.Generator().manual_seed(1)).expand(3, 1, 12, 13, 14)
    kw = dict(prob=1.0, rotate_range=(0.4, 0.4, 0.4), scale_range=(0.2, 0.2, 0.2), seed=5)
    shared = vt.RandAffine(**kw).share_batch_params()(x)
    assert torch.equal(shared[0], shared[1]) and torch.equal(shared[0], shared[2])
    independent = vt.RandAffine(**kw)(x)
    assert not torch.equal(independent[0], independent[1])
