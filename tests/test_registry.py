"""Registry smoke tests: every registered solver and model, so a new PDE or model is tested
the day it is registered (one file plus one line in BUILTIN_SOLVERS / BUILTIN_MODELS).

Solvers: tiny generation → schema and roles → the same numbers for any batch size → (evolution
problems) the Stepper contract and a replay of the stored trajectory from the stored
parameters. Models: every preset builds, runs forward and backward on its grid, round-trips
through JSON, and fits 1D and 2D tasks of both kinds through ``Config.for_task``.
"""

import dataclasses
import json

import numpy as np
import pytest
import torch

from ssmpde.coupling import Conditions
from ssmpde.data import TIME, roles_of, validate
from ssmpde.generation import generate
from ssmpde.solvers import Stepper, get_solver_class, list_solvers
from ssmpde.solvers.base import TimeDependentSolver
from ssmpde.surrogates import build_model, config_from_dict, get_model_class, list_models
from ssmpde.surrogates.datasets import Task

SOLVERS = list_solvers()
MODELS = [(name, preset) for name in list_models() for preset in get_model_class(name).PRESETS]


@pytest.mark.parametrize("name", SOLVERS)
def test_solver_generates_schema_valid_data_with_roles(name):
    cls = get_solver_class(name)
    assert cls.TINY, f"{cls.__name__} needs a TINY configuration for this test"
    ds = generate(name, num_samples=2, seed=3, batch_size=2, progress=False, **cls.TINY)
    validate(ds, check_finite=True)
    roles = roles_of(ds)
    assert set(roles) == set(cls(**cls.TINY).variables())
    assert "state" in roles.values()
    # Sample i depends on (seed, i) only.
    alone = generate(name, num_samples=2, seed=3, batch_size=1, progress=False, **cls.TINY)
    for variable in ds.data_vars:
        np.testing.assert_array_equal(ds[variable].values, alone[variable].values)


@pytest.mark.parametrize("name", [n for n in SOLVERS
                                  if issubclass(get_solver_class(n), TimeDependentSolver)])
def test_solver_is_a_stepper_that_replays_its_stored_trajectory(name):
    cls = get_solver_class(name)
    solver = cls(**cls.TINY)
    assert isinstance(solver, Stepper)
    ds = generate(name, num_samples=2, seed=1, progress=False, **cls.TINY)
    states = [v for v, role in roles_of(ds).items()
              if role == "state" and TIME in ds[v].dims]
    assert tuple(states) == solver.fields
    frames = np.stack([ds[f].values for f in solver.fields], axis=2)
    conditions = Conditions.from_dataset(ds)
    scale = float(np.abs(frames).max())
    for k in range(ds.sizes[TIME] - 1):
        time = float(ds[TIME][k])
        given = {n: v for n, v in conditions.at(time).items() if n in solver.parameter_names}
        frame = solver.step(frames[:, k:k + 1], time=time, parameters=given)
        np.testing.assert_allclose(frame, frames[:, k + 1], rtol=0, atol=1e-10 * scale)


def _task(kind: str, grid: tuple[int, ...]) -> Task:
    if kind == "operator":
        return Task("operator", ("a",), ("u",), grid)
    return Task("rollout", ("rho", "m"), ("rho", "m"), grid, ("nu",), window=3, horizon=1,
                dt=0.1)


def _small(config) -> dict:
    fields = {f.name for f in dataclasses.fields(config)}
    return {k: v for k, v in dict(depth=1, width=8).items() if k in fields}


@pytest.mark.parametrize("name, preset", MODELS, ids=[f"{n}-{p}" for n, p in MODELS])
def test_model_preset_builds_runs_and_round_trips(name, preset):
    config = config_from_dict(name, _small(config_from_dict(name, preset=preset)),
                              preset=preset)
    model = get_model_class(name)(config)
    frames = (getattr(config, "window", 1),) if type(config).input_layout == "history" else ()
    x = torch.randn(2, *frames, config.in_channels, *config.grid, requires_grad=True)
    out = model(x)
    assert out.shape == (2, config.out_channels, *config.grid)
    out.square().mean().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    again = config_from_dict(name, json.loads(json.dumps(dataclasses.asdict(config))))
    assert again == config  # JSON round trip, tuples restored


@pytest.mark.parametrize("grid", [(24,), (12, 10)], ids=["1d", "2d"])
@pytest.mark.parametrize("kind", ["operator", "rollout"])
@pytest.mark.parametrize("name, preset", MODELS, ids=[f"{n}-{p}" for n, p in MODELS])
def test_every_preset_fits_1d_and_2d_tasks(name, preset, kind, grid):
    task = _task(kind, grid)
    base = config_from_dict(name, preset=preset)
    config = config_from_dict(name, _small(base), preset=preset, task=task)
    assert config.grid == grid and config.out_channels == task.out_channels
    model = get_model_class(name)(config)
    layout = type(config).input_layout
    assert config.in_channels == task.input_channels(layout)
    if layout == "history" and kind == "rollout":
        x = torch.randn(2, task.window, config.in_channels, *grid)
    else:
        x = torch.randn(2, config.in_channels, *grid)
    out = model(x)
    assert out.shape == (2, task.out_channels, *grid)
    out.mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", list_models())
def test_each_model_has_a_1d_preset(name):
    # Regression: the presets were 2D only ("latent_grid (16, 16) must have as many
    # dimensions as grid (128,)").
    presets = get_model_class(name).PRESETS
    one_d = [p for p, values in presets.items() if len(values.get("grid", ())) == 1]
    assert one_d, f"{name} has no 1D preset"
    model = build_model(name, preset=one_d[0], **_small(config_from_dict(name,
                                                                          preset=one_d[0])))
    assert len(model.config.grid) == 1


def test_unknown_names_suggest_the_closest():
    from ssmpde.solvers import get_solver

    with pytest.raises(ValueError, match="Did you mean 'navier-stokes'"):
        get_solver("navier-stoke")
    with pytest.raises(ValueError, match="Did you mean 'geomano'"):
        build_model("geomamo")
