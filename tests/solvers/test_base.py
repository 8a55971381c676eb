"""The time-dependent solver base on a PDE it was not written for: the 1D heat equation.

A new PDE supplies its state, ``advance`` and variables; the base does stepping, per-sample
parameters, divergence checks, down-sampling (here pooling), datasets and the Stepper
contract. The heat equation u_t = ν u_xx on the periodic unit interval has the exact solution
û_k(t) = û_k(0) exp(−4π²k²νt), which the toy below integrates exactly in Fourier space.
"""

import dataclasses

import numpy as np
import pytest

from ssmpde.data import roles_of
from ssmpde.generation import generate
from ssmpde.solvers.base import (Checks, SolverDivergedError, Stepper, TimeDependentSolver,
                                 VariableSpec)
from ssmpde.solvers.random_fields import sample_rng


@dataclasses.dataclass(frozen=True)
class HeatConfig:
    resolution: int = 8
    simulation_resolution: int = 32
    viscosity: float | None = 0.01  # None: drawn per sample
    final_time: float = 0.3
    record_interval: float = 0.1
    blow_up: bool = False


class Heat1D(TimeDependentSolver):
    Config = HeatConfig
    name = "heat"
    fields = ("u",)
    field_units = {"u": ("temperature", "K")}
    parameter_names = ("viscosity",)
    checks = Checks(conserved=("u",))
    downsampling = "pool"

    @property
    def grid(self):
        return (self.config.resolution,)

    @property
    def simulation_grid(self):
        return (self.config.simulation_resolution,)

    def parameter_specs(self):
        return {"viscosity": ()}

    def default_parameter(self, name):
        return self.config.viscosity

    def sample_parameters(self, seed, indices):
        return {"viscosity": np.array([sample_rng(seed, i, stream=1).uniform(0.01, 0.02)
                                       for i in indices])}

    def check_parameters(self, parameters):
        if np.any(parameters["viscosity"] <= 0):
            raise ValueError("viscosity must be positive")

    def initial_condition(self, seed, indices):
        x = np.arange(self.config.simulation_resolution) / self.config.simulation_resolution
        return np.stack([[np.sin(2 * np.pi * x) + sample_rng(seed, i).uniform() *
                          np.cos(6 * np.pi * x)] for i in indices])

    def start(self, initial, parameters):
        return {"u_hat": np.fft.rfft(initial[:, 0]), "nu": parameters["viscosity"]}

    def advance(self, state, time):
        k = np.arange(state["u_hat"].shape[-1])
        rate = 4 * np.pi ** 2 * k ** 2 * state["nu"][:, None] * self.dt
        state["u_hat"] *= np.exp(rate if self.config.blow_up else -rate)

    def observe(self, state):
        return np.fft.irfft(state["u_hat"], n=self.config.simulation_resolution)[:, None]

    def extra_variables(self):
        return {"viscosity": VariableSpec((), "diffusivity", "m2 s-1", role="parameter")}

    def extra_outputs(self, inputs, times):
        return {"viscosity": np.asarray(inputs["viscosity"])}


def exact(u0, nu, t):
    k = np.arange(u0.shape[-1] // 2 + 1)
    return np.fft.irfft(np.fft.rfft(u0) * np.exp(-4 * np.pi ** 2 * k ** 2 * nu * t),
                        n=u0.shape[-1])


def test_simulate_matches_the_exact_solution_and_pools_to_the_stored_grid():
    solver = Heat1D()
    assert isinstance(solver, Stepper) and solver.dt == pytest.approx(0.1)
    u0 = solver.initial_condition(0, [0, 1])
    frames = solver.simulate(u0, 3, parameters={"viscosity": [0.01, 0.02]})
    assert frames.shape == (2, 4, 1, 32)
    for b, nu in enumerate((0.01, 0.02)):
        np.testing.assert_allclose(frames[b, -1, 0], exact(u0[b, 0], nu, 0.3), atol=1e-13)
    pooled = solver.simulate(u0, 3, parameters={"viscosity": [0.01, 0.02]},
                             output_resolution=8)
    np.testing.assert_allclose(pooled, frames.reshape(2, 4, 1, 8, 4).mean(axis=-1),
                               atol=1e-14)


def test_dataset_has_roles_coordinates_and_replays_through_step():
    solver = Heat1D(resolution=32, viscosity=None)
    ds = generate(solver, num_samples=2, seed=4, progress=False)
    assert roles_of(ds) == {"u": "state", "viscosity": "parameter"}
    assert ds.u.dims == ("sample", "time", "x") and ds.u.attrs["units"] == "K"
    np.testing.assert_allclose(ds.time.values, [0.0, 0.1, 0.2, 0.3])
    frame = solver.step(ds.u.values[:, 1:2, None], time=0.1,
                        parameters={"viscosity": ds.viscosity.values})
    np.testing.assert_allclose(frame[:, 0], ds.u.values[:, 2], atol=1e-13)
    with pytest.raises(ValueError, match="draws 'viscosity' per sample"):
        solver.step(ds.u.values[:, :1, None])
    with pytest.raises(ValueError, match="viscosity must be positive"):
        solver.step(ds.u.values[:, :1, None], parameters={"viscosity": [-1.0, 1.0]})
    with pytest.raises(ValueError, match="unknown parameters"):
        solver.step(ds.u.values[:, :1, None], parameters={"viscosity": [1.0, 1.0], "nu": 1})


def test_divergence_names_the_time_and_the_rows():
    solver = Heat1D(blow_up=True, viscosity=1.0)
    with np.errstate(all="ignore"), pytest.raises(SolverDivergedError,
                                                  match=r"heat solution.*t = 0\.[1-9]"):
        solver.simulate(solver.initial_condition(0, [0]), 30)


def test_bad_states():
    solver = Heat1D()
    with pytest.raises(ValueError, match=r"history must have shape \[batch, window, 1"):
        solver.step(np.zeros((1, 1, 32)))
    with pytest.raises(ValueError, match="simulation grid"):
        solver.simulate(np.zeros((1, 1, 16)), 1)
    with pytest.raises(ValueError, match="NaN"):
        solver.simulate(np.full((1, 1, 32), np.nan), 1)


def test_the_old_generate_address_is_a_deprecated_alias():
    import ssmpde.solvers

    with pytest.warns(DeprecationWarning, match="from ssmpde.generation import generate"):
        from ssmpde.solvers import generate as old
    assert old is generate
    with pytest.warns(DeprecationWarning):
        assert ssmpde.solvers.generate is generate
    assert "generate" not in ssmpde.solvers.__all__
    with pytest.raises(AttributeError, match="no attribute 'generates'"):
        ssmpde.solvers.generates  # noqa: B018
