"""Darcy warm starts: a trained surrogate's prediction as the PCG initial guess."""

import numpy as np
import pytest

from ssmpde.coupling import OperatorSurrogate, SurrogateStepper, warm_start
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.surrogates.train import TrainConfig, train

DARCY = dict(resolution=29, simulation_resolution=57)


def _darcy_run(root, epochs: int):
    data = root / "darcy.nc"
    generate("darcy", num_samples=8, seed=0, out=data, progress=False, **DARCY)
    run = root / "run"
    train("geomano", data, out=run, preset="darcy", model_overrides=dict(width=32, depth=1),
          config=TrainConfig(epochs=epochs, batch_size=2, lr=3e-3, gradient_loss_weight=0.0),
          progress=False)
    return run


@pytest.fixture(scope="module")
def darcy_run(tmp_path_factory):
    """A trained checkpoint for the checks of inputs and the command (one epoch: what they
    test does not depend on how good the model is)."""
    return _darcy_run(tmp_path_factory.mktemp("darcy"), epochs=1)


@pytest.fixture(scope="module")
def darcy_run_trained(tmp_path_factory):
    """A surrogate good enough to save PCG iterations (60 epochs, ~24 s: a learning test)."""
    return _darcy_run(tmp_path_factory.mktemp("darcy-trained"), epochs=60)


@pytest.mark.slow
def test_warm_start_reaches_the_same_solution_in_fewer_iterations(darcy_run_trained):
    darcy_run = darcy_run_trained
    solver = get_solver("darcy", **DARCY)
    a = solver.coefficient(0, range(8))  # the training coefficients, at the solver's grid
    result = warm_start(solver, OperatorSurrogate.from_checkpoint(darcy_run), a, rtol=1e-8)
    assert result["converged"].all()
    assert (result["initial_guess_error"] < 0.1).all()
    assert (result["iterations_warm"] < result["iterations_cold"]).all()
    # Same solution within what the tolerance allows (1e-8 residual, condition ~ 4).
    assert result["solution_difference"].max() < 1e-7
    u_direct = solver.solve(a)
    difference = np.linalg.norm(result["u"] - u_direct) / np.linalg.norm(u_direct)
    assert difference < 1e-7


def test_warm_start_input_checks(darcy_run):
    solver = get_solver("darcy", **DARCY)
    surrogate = OperatorSurrogate.from_checkpoint(darcy_run)
    with pytest.raises(ValueError, match=r"a must have shape \[batch, 57, 57\]"):
        warm_start(solver, surrogate, np.ones((2, 29, 29)))
    with pytest.raises(ValueError, match=r"inputs must have shape \[batch, 1, 29, 29\]"):
        surrogate.predict(np.ones((2, 3, 29, 29)))
    with pytest.raises(ValueError, match="use OperatorSurrogate|trained on trajectories"):
        SurrogateStepper.from_checkpoint(darcy_run)


def test_warm_start_command(darcy_run, capsys):
    from ssmpde.cli import main

    assert main(["warm-start", str(darcy_run), "--samples", "2", "--seed", "0"]) == 0
    text = capsys.readouterr().out
    assert "iterations: cold" in text and "warm vs cold solution" in text
