"""The source term of the spectral solvers (the learned correction inside the step): a zero
source gives the plain step bit for bit, a source enters as the scheme says (exactly for a
linear problem), the PyTorch step equals the numba step with a source and differentiates
through it, and bad sources get one clear line."""

import numpy as np
import pytest
import torch

from ssmpde.solvers import get_solver
from ssmpde.solvers.differentiable import differentiable_step
from ssmpde.solvers.navier_stokes import NavierStokes2D


def _ks(**extra):
    return get_solver("kuramoto-sivashinsky", resolution=32, simulation_resolution=64,
                      domain_length=22.0, viscosity=(0.8, 1.2), time_step=0.05,
                      record_interval=0.1, final_time=0.1, lmax=3, **extra)


def _ns(scheme, **extra):
    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"], simulation_resolution=16,
                  resolution=16, spin_up=0.0, final_time=0.1, record_interval=0.05,
                  time_step=0.01, scheme=scheme)
    return NavierStokes2D(**{**config, **extra})


SOLVERS = {
    "ks": _ks,
    "ks-numpy-backend": lambda: _ks(fft_backend="numpy"),
    "burgers": lambda: get_solver("burgers", resolution=32, simulation_resolution=32,
                                  viscosity=(0.02, 0.05), time_step=0.01,
                                  record_interval=0.02, final_time=0.02),
    "ns-euler-cn": lambda: _ns("euler-cn"),
    "ns-rk3-cn": lambda: _ns("rk3-cn"),
    "ns-etdrk4": lambda: _ns("etdrk4"),
}


def _state(solver, batch=3, seed=0):
    inputs = solver.sample_inputs(seed, list(range(batch)))
    return inputs.pop("initial"), inputs


def _smooth_source(solver, batch, seed=1):
    rng = np.random.default_rng(seed)
    n = solver.simulation_grid[-1]
    x = np.arange(n) / n
    if len(solver.simulation_grid) == 1:
        return rng.normal(size=(batch, 1, 1)) * np.cos(2 * np.pi * 2 * x) + 0.0
    y = x[:, None]
    return rng.normal(size=(batch, 1, 1, 1)) * np.sin(2 * np.pi * (x + 2 * y))


@pytest.mark.parametrize("name", SOLVERS)
def test_a_zero_source_is_the_plain_step_bit_for_bit(name):
    solver = SOLVERS[name]()
    initial, parameters = _state(solver)
    plain = solver.step(initial[:, None], time=0.3, parameters=parameters)
    zero = solver.step(initial[:, None], time=0.3, parameters=parameters,
                       source=np.zeros_like(initial))
    np.testing.assert_array_equal(zero, plain)
    assert not np.array_equal(plain, solver.step(initial[:, None], time=0.3,
                                                 parameters=parameters,
                                                 source=_smooth_source(solver, 3)))


@pytest.mark.parametrize("scheme", ["euler-cn", "rk3-cn", "etdrk4"])
def test_a_source_on_a_decaying_shell_gives_the_exact_linear_solution(scheme):
    # With u·∇ω = 0 (one shell, the Kolmogorov forcing's) ω̂' = −r ω̂ + f̂ + Ŝ: a source on the
    # same shell shifts the steady state to (f + S) / r. ETDRK4 is exact; CN-type schemes
    # to their order in r Δt (r Δt = 1.2e-3 here).
    solver = _ns(scheme, final_time=1.0, record_interval=1.0)
    n = 16
    y = (np.arange(n) / n)[:, None] + 0 * np.arange(n)[None, :]
    shell = np.cos(8 * np.pi * y)
    rate = 1e-3 / (4 * np.pi ** 2) * 4 * np.pi ** 2 * 16 + 0.1  # ν λ + μ, |k|² = 16
    w0, strength = 2.0 * shell, 1.5
    out = solver.step(w0[None, None, None], source=strength * shell[None, None])[0, 0]
    steady = (-4.0 + strength) / rate * shell
    exact = steady + (w0 - steady) * np.exp(-rate * 1.0)
    tolerance = {"etdrk4": 1e-13, "rk3-cn": 1e-6, "euler-cn": 1e-6}[scheme]
    assert np.abs(out - exact).max() <= tolerance * np.abs(exact).max()


@pytest.mark.parametrize("name", ["ks", "burgers", "ns-rk3-cn", "ns-etdrk4"])
def test_the_torch_step_with_a_source_equals_the_numba_step(name):
    solver = SOLVERS[name]()
    initial, parameters = _state(solver)
    source = _smooth_source(solver, 3)
    expected = solver.step(initial[:, None], time=0.2, parameters=parameters, source=source)
    got = differentiable_step(solver)(torch.as_tensor(initial), time=0.2, parameters=parameters,
                                      source=torch.as_tensor(source))
    assert np.abs(got.numpy() - expected).max() <= 1e-10 * np.abs(expected).max()


@pytest.mark.parametrize("name", ["ks", "ns-etdrk4"])
def test_gradcheck_through_state_and_source(name):
    solver = SOLVERS[name]()
    if name.startswith("ns"):
        solver = _ns("etdrk4", simulation_resolution=8, resolution=8)
    initial, parameters = _state(solver, batch=2)
    step = differentiable_step(solver)
    frame = torch.as_tensor(initial).requires_grad_()
    source = torch.as_tensor(_smooth_source(solver, 2)).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda u, s: step(u, parameters=parameters, source=s), (frame, source))


def test_bad_sources_get_one_clear_line():
    solver = _ks()
    initial, parameters = _state(solver)
    with pytest.raises(ValueError, match=r"source must have the state's shape \(3, 1, 64\)"):
        solver.step(initial[:, None], parameters=parameters, source=np.zeros((3, 64)))
    with pytest.raises(ValueError, match="source contains NaN"):
        solver.step(initial[:, None], parameters=parameters,
                    source=np.full_like(initial, np.nan))
    darcy = get_solver("darcy", resolution=16)
    assert not getattr(darcy, "takes_source", False)
    moving = NavierStokes2D(resolution=16, simulation_resolution=16, viscosity=1e-3,
                            forcing="torus-vis-force", final_time=0.1, record_interval=0.1,
                            time_step=0.01)
    initial, parameters = _state(moving, batch=1)
    with pytest.raises(ValueError, match="moving torus-vis-force"):
        moving.step(initial[:, None], parameters=parameters, source=np.zeros_like(initial))
    with pytest.raises(ValueError, match="moving torus-vis-force"):
        differentiable_step(moving)(torch.as_tensor(initial), parameters=parameters,
                                    source=torch.zeros(initial.shape, dtype=torch.float64))
