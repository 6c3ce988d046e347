"""Known answers for the ROAD solver's building blocks (faithbench.metrics._laplace): the 3 x 3 stencil and the
masked operator it builds."""

import pytest
import torch
import torch.nn.functional as F

from faithbench.metrics._laplace import Level, stencil

KERNEL = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]], dtype=torch.float64)


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1, 4), (1, 1, 4, 1), (1, 1, 1, 1), (1, 2, 2, 2)])
def test_the_stencil_is_the_zero_padded_121_by_121_convolution(shape):
    u = torch.randint(-9, 10, shape, generator=torch.Generator().manual_seed(0)).double()  # integers: sums exact
    expected = F.conv2d(u.reshape(-1, 1, *shape[-2:]), KERNEL.view(1, 1, 3, 3), padding=1).view(shape)
    assert torch.equal(stencil(u), expected)


def test_the_stencil_leaves_its_input_alone_and_takes_a_non_contiguous_one():
    u = torch.randn(2, 6, 5, dtype=torch.float64).transpose(-1, -2).unsqueeze(0)  # (1, 2, 5, 6), not contiguous
    before = u.clone()
    expected = F.conv2d(u.reshape(2, 1, 5, 6), KERNEL.view(1, 1, 3, 3), padding=1).view(1, 2, 5, 6)
    assert torch.allclose(stencil(u), expected, atol=1e-12) and torch.equal(u, before)


def test_the_masked_operator_is_symmetric_and_positive_on_the_removed_pixels():
    g = torch.Generator().manual_seed(1)
    m = (torch.rand(3, 1, 9, 11, generator=g) < 0.6).double()
    m[:, :, 0, 0] = 0  # every image keeps a pixel: the system is positive definite
    level = Level(m, torch.ones(1, 1, 9, 11, dtype=torch.float64))
    u, v = (m * torch.randn(3, 2, 9, 11, generator=g, dtype=torch.float64) for _ in range(2))
    uav, vau = (u * level.apply(v)).sum((-2, -1)), (v * level.apply(u)).sum((-2, -1))
    assert torch.allclose(uav, vau, atol=1e-12)
    assert ((u * level.apply(u)).sum((-2, -1)) > 0).all()
    # Every pixel removed, a constant field: (A u)_i = d_i u_i - sum_j w_ij u_j = 0, at the border too (d_i sums the
    # weights of the in-image neighbours only)
    ones = torch.ones(1, 1, 5, 5, dtype=torch.float64)
    assert torch.allclose(Level(ones, ones).apply(ones), torch.zeros_like(ones), atol=1e-12)
