"""The convolutional corrector: periodic translation equivariance, a receptive field of
(1 + 2 depth)(kernel − 1) + 1 points (a local model), and its configuration errors."""

import pytest
import torch

from ssmpde.surrogates import build_model


@pytest.mark.parametrize("grid, kernel", [((32,), 5), ((12, 10), 3)])
def test_commutes_with_periodic_shifts(grid, kernel):
    torch.manual_seed(0)
    model = build_model("conv-corrector", in_channels=2, grid=grid, kernel=kernel).double()
    x = torch.randn(2, 2, *grid, dtype=torch.float64)
    dims = tuple(range(2, 2 + len(grid)))
    shifts = (3,) * len(grid)
    torch.testing.assert_close(model(torch.roll(x, shifts, dims)),
                               torch.roll(model(x), shifts, dims), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("depth, kernel", [(1, 3), (2, 5)])
def test_receptive_field_is_the_stencil_of_its_layers(depth, kernel):
    # (1 + 2 depth) convolutions of radius (kernel - 1) / 2: the output at 0 feels the input
    # up to that many points away (through a circular wrap) and nothing further.
    torch.manual_seed(1)
    n = 64
    model = build_model("conv-corrector", in_channels=1, grid=(n,), kernel=kernel,
                        depth=depth).double()
    x = torch.zeros(1, 1, n, dtype=torch.float64, requires_grad=True)
    model(x)[0, 0, 0].backward()
    radius = (1 + 2 * depth) * (kernel // 2)
    reached = torch.nonzero(x.grad[0, 0]).flatten().tolist()
    expected = sorted({i % n for i in range(-radius, radius + 1)})
    assert reached == expected


@pytest.mark.parametrize("options, message", [
    (dict(kernel=4), r"kernel must be one of \(3, 5\)"),
    (dict(kernel=True), "kernel"),
    (dict(grid=(4,), kernel=5), "wider than the grid"),
    (dict(width=0), "width"),
])
def test_bad_configs_get_one_clear_line(options, message):
    with pytest.raises(ValueError, match=message):
        build_model("conv-corrector", **options)
