"""The convolutional corrector: periodic translation equivariance, a receptive field of
(1 + 2 depth)(kernel − 1) + 1 points (a local model), and its configuration errors."""

import math

import numpy as np
import pytest
import torch

from ssmpde.surrogates import build_model
from ssmpde.surrogates.conv_corrector import vorticity_features


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
    (dict(grid=(32,), kernel=3, velocity=True), "square 2D grid"),
    (dict(grid=(16, 8), velocity=True), "square 2D grid"),
    (dict(velocity=1), "velocity must be True or False"),
])
def test_bad_configs_get_one_clear_line(options, message):
    with pytest.raises(ValueError, match=message):
        build_model("conv-corrector", **options)


def test_velocity_features_of_a_two_mode_vorticity_are_exact():
    # On [0, 2π)² with ω = a cos(2X) + b sin(3Y) (X = 2π x): −Δψ = ω gives ψ = a cos(2X)/4
    # + b sin(3Y)/9, so u = ψ_Y = b cos(3Y)/3, v = −ψ_X = a sin(2X)/2 and
    # u ω_X + v ω_Y = −(2ab/3) cos(3Y) sin(2X) + (3ab/2) sin(2X) cos(3Y).
    n, a, b = 16, 1.3, -0.7
    y, x = np.meshgrid(np.arange(n) / n, np.arange(n) / n, indexing="ij")
    X, Y = 2 * np.pi * x, 2 * np.pi * y
    omega = a * np.cos(2 * X) + b * np.sin(3 * Y)
    features = vorticity_features(torch.tensor(omega)[None]).numpy()[0]
    u, v = b * np.cos(3 * Y) / 3, a * np.sin(2 * X) / 2
    advection = u * (-2 * a * np.sin(2 * X)) + v * (3 * b * np.cos(3 * Y))
    for got, expected in zip(features, (u, v, advection)):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13)


def test_velocity_features_pass_gradcheck_and_enter_the_model():
    torch.manual_seed(2)
    omega = torch.randn(2, 8, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(vorticity_features, (omega,))
    model = build_model("conv-corrector", in_channels=2, grid=(32, 32), velocity=True,
                        depth=1).double()
    x = torch.randn(1, 2, 32, 32, dtype=torch.float64, requires_grad=True)
    model(x)[0, 0, 0, 0].backward()
    # channel 0 reaches the far side through the global velocity; channel 1 only the
    # 7-point stencil of one block
    assert x.grad[0, 0, 16, 16].abs() > 0
    assert x.grad[0, 1, 16, 16] == 0 and x.grad[0, 1, 3, 0] != 0
    shifts = (3, 5)
    torch.testing.assert_close(model(torch.roll(x, shifts, (2, 3))),
                               torch.roll(model(x), shifts, (2, 3)), rtol=1e-12, atol=1e-12)
    assert model.lift.in_channels == 2 + 3


def test_velocity_features_are_refused_on_data_that_is_not_a_periodic_vorticity(tmp_path,
                                                                               capsys):
    """An Euler dataset's first field is a density: velocity features would read it as a
    vorticity and train without a word. Refused before any work (no coarse predictions,
    no run directory), in one line; the same options on Navier-Stokes data train."""
    from ssmpde.cli import main
    from ssmpde.generation import generate

    euler = tmp_path / "eu2.nc"
    generate("euler", num_samples=2, resolution=16, simulation_resolution=32, final_time=0.2,
             record_interval=0.1, out=euler, progress=False).close()
    out = tmp_path / "x"
    status = main(["train", "conv-corrector", "--data", str(euler), "--window", "1",
                   "--num-test", "1", "--epochs", "1", "--model-option", "velocity=true",
                   "--target", "correction", "--coarse", "2x1", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and "periodic vorticity" in err and "'density'" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()

    ns = tmp_path / "ns.nc"
    generate("navier-stokes", num_samples=2, resolution=16, simulation_resolution=32,
             final_time=0.2, record_interval=0.1, viscosity=1e-3, time_step=0.01, out=ns,
             progress=False).close()
    status = main(["train", "conv-corrector", "--data", str(ns), "--window", "1",
                   "--num-test", "1", "--epochs", "1", "--model-option", "velocity=true",
                   "--model-option", "width=4", "--target", "correction", "--coarse", "2x1",
                   "--out", str(out)])
    assert status == 0, capsys.readouterr().err
