"""Autograd of the ops outside the intensity / resample / filter families.

- coarse_dropout has a backward: the kept voxels pass the gradient through, the filled ones
  get none (fill values are constants; the image-range fill's min / max too, which MONAI's
  numpy dropout does not differentiate at all). Checked with torch.autograd.gradcheck (finite
  differences, float64; not for the image-range fill, whose finite differences see the min /
  max) and against a mask built from the hole boxes (conftest.dropout_mask).
- The ops without a backward (statistics-based normalisation, the low-resolution gather, the
  patch and deformation gathers, patch extraction, the backward ops themselves, in-place ops)
  must refuse an input that requires grad, naming the argument, instead of letting PyTorch's
  autograd fallback drop its gradient silently; under torch.no_grad() or with a detached input
  they give the same bytes as before.
"""
import pytest
import torch

from voxaug import ops

from conftest import dropout_mask

V = torch.ops.voxaug


def _boxes():
    boxes = torch.tensor([[[1, 0, 2, 3, 4, 5], [0, 2, 0, 2, 5, 3]], [[2, 2, 2, 4, 5, 6], [0, 0, 0, 0, 0, 0]]])
    return boxes, torch.tensor([2, 1])


@pytest.mark.parametrize("dropout_holes", [True, False])
@pytest.mark.parametrize("fill", [(0, 3.5, 0.0, 0.0), (1, 0.0, -1.0, 2.0), (2, 0.0, 0.0, 0.0)])
def test_coarse_dropout_gradient(dropout_holes, fill):
    boxes, counts = _boxes()
    x = torch.randn(2, 1, 4, 5, 6, dtype=torch.float64, requires_grad=True)

    def f(t):
        return V.coarse_dropout(t, boxes, counts, dropout_holes, *fill, 7, 0)

    if fill[0] != 2:  # the image-range fill depends on the sample's min / max, held constant
        assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-8)
    g = torch.randn(x.shape, dtype=torch.float64)
    (grad,) = torch.autograd.grad(f(x), x, g)
    # A sample without holes (count 0) is unchanged.
    filled = torch.stack([dropout_mask(x.shape[1:], boxes[n], int(counts[n]), dropout_holes) if int(counts[n])
                          else torch.zeros(x.shape[2:], dtype=torch.bool) for n in range(x.shape[0])])[:, None]
    assert torch.equal(grad, g * (~filled).double())
    with torch.no_grad():
        assert torch.equal(f(x), V.coarse_dropout(x.detach(), boxes, counts, dropout_holes, *fill, 7, 0))


def _no_backward_cases():
    x = torch.rand(2, 1, 6, 7, 8)
    eye = torch.eye(3, 4).repeat(2, 1, 1).double()
    boxes, counts = _boxes()
    grid = torch.zeros(2, 3, 4, 4, 4)
    return [
        ("extract_patches", lambda t: V.extract_patches(t, torch.tensor([[[3, 3, 4]], [[2, 3, 4]]]), [3, 3, 3]), x),
        ("resample_patches", lambda t: ops.resample_patches([t], eye, torch.zeros(2, 1, 3, dtype=torch.long),
                                                              [3, 3, 3], [1], [0])[0], x),
        ("resample_deformed", lambda t: ops.resample_deformed([t], eye, grid, ops.BSPLINE_FIELD, [6, 7, 8], [1],
                                                              [0])[0], x),
        ("deform_field_dense", lambda t: ops.deform_field_dense(t, ops.BSPLINE_FIELD, [6, 7, 8]), grid),
        ("resample_backward_input", lambda t: V.resample_backward_input(t, x, eye, 1, 0), x),
        ("pointwise_chain_backward",
         lambda t: V.pointwise_chain_backward(t, x, *ops._lists([ops.Step(ops.SHIFT_INTENSITY, 0, (0.5,))])), x),
        ("coarse_dropout_", lambda t: V.coarse_dropout_(t * 1.0, boxes, counts), x),
        ("uniform_fill_", lambda t: V.uniform_fill_(t * 1.0, 0.0, 1.0, 3), x),
    ]


@pytest.mark.parametrize("case", _no_backward_cases(), ids=lambda c: c[0])
def test_ops_without_backward_refuse_grad(case):
    name, f, x = case
    ref = f(x)  # no grad involved: runs
    t = x.clone().requires_grad_(True)
    with pytest.raises(RuntimeError, match=r"requires grad, but this op is not differentiable") as e:
        f(t)
    assert name in str(e.value) and "argument '" in str(e.value)
    with torch.no_grad():
        out = f(t)
    if ref is not None:
        assert torch.equal(out, ref) and not out.requires_grad
        assert torch.equal(f(t.detach()), ref)


def test_in_place_ops_bump_the_version():
    x = torch.rand(1, 1, 4, 4, 4)
    v = x._version
    V.uniform_fill_(x, 0.0, 1.0, 3)
    assert x._version > v
    boxes, counts = _boxes()
    y = torch.rand(2, 1, 4, 5, 6)
    v = y._version
    V.coarse_dropout_(y, boxes, counts)
    assert y._version > v
