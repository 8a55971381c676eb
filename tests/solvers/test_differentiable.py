"""The PyTorch record interval (``differentiable_step``) against the solvers' own ``step`` in
float64 (KS, Burgers, KdV, Allen–Cahn, Navier–Stokes in both time steppings and schemes, coarsened
solvers), gradients by finite differences (``gradcheck``), float32, and bad input."""

import numpy as np
import pytest
import torch

from ssmpde.solvers import get_solver
from ssmpde.solvers.allen_cahn import AllenCahn
from ssmpde.solvers.darcy import Darcy
from ssmpde.solvers.differentiable import DifferentiableStep, differentiable_step
from ssmpde.solvers.euler import Euler2D
from ssmpde.solvers.kdv import KdV
from ssmpde.solvers.kuramoto_sivashinsky import KuramotoSivashinsky
from ssmpde.solvers.navier_stokes import NavierStokes2D


def _ks():
    return KuramotoSivashinsky(resolution=32, simulation_resolution=64, domain_length=22.0,
                               viscosity=(0.9, 1.1), final_time=0.4, record_interval=0.2,
                               time_step=0.05)


def _burgers():
    return get_solver("burgers", resolution=32, simulation_resolution=64,
                      viscosity=(0.05, 0.1), final_time=0.1, record_interval=0.05,
                      time_step=0.01)


def _kdv():
    return KdV(resolution=32, simulation_resolution=64, domain_length=32.0, final_time=1.0,
               record_interval=0.5, time_step=0.05)


def _allen_cahn():
    return AllenCahn(resolution=48, simulation_resolution=96, diffusivity=(0.01, 0.03),
                     final_time=0.4, record_interval=0.2, time_step=0.02)


def _ns_cfl(**overrides):
    # the benchmark's configuration, small: nu = 1e-4, CFL mode (RK3/CN)
    return get_solver("navier-stokes", preset="fno-nu1e-4", resolution=16,
                      simulation_resolution=32, time_stepping="cfl", record_interval=0.5,
                      final_time=1.0, **overrides)


def _ns_moving():
    # faithful time stepping, the moving F-FNO forcing
    return NavierStokes2D(resolution=16, simulation_resolution=16, viscosity=(1e-3, 2e-3),
                          forcing="torus-vis-force", final_time=0.2, record_interval=0.1,
                          time_step=0.01)


def _ns_moving_rk3():
    return NavierStokes2D(resolution=16, simulation_resolution=16, viscosity=(1e-3, 2e-3),
                          forcing="torus-vis-force", final_time=0.2, record_interval=0.1,
                          time_step=0.01, scheme="rk3-cn")


def _ns_torus_cfl():
    return NavierStokes2D(resolution=16, simulation_resolution=32, viscosity=1e-3,
                          forcing="torus-vis", final_time=0.2, record_interval=0.1,
                          time_stepping="cfl")


def _ns_etdrk4(**overrides):
    # ETDRK4 with drag and the moving forcing, per-sample viscosities
    config = dict(resolution=16, simulation_resolution=16, viscosity=(1e-3, 2e-3),
                  forcing="torus-vis-force", final_time=0.2, record_interval=0.1,
                  time_step=0.02, scheme="etdrk4", drag=0.1)
    return NavierStokes2D(**{**config, **overrides})


def _ns_faithful():
    return get_solver("navier-stokes", preset="fno-nu1e-3", resolution=16,
                      simulation_resolution=16, record_interval=0.01, final_time=0.01,
                      time_step=1e-3)


# name -> (solver, start time). Measured relative differences: 1e-16 .. 4e-15.
CASES = {
    "ks": (_ks, 0.0),
    "ks-coarsened-2x2": (lambda: _ks().coarsened(space=2, time=2), 0.0),
    "burgers": (_burgers, 0.0),
    "burgers-coarsened-2x5": (lambda: _burgers().coarsened(space=2, time=5), 0.0),
    "kdv": (_kdv, 0.0),
    "kdv-coarsened-2x2": (lambda: _kdv().coarsened(space=2, time=2), 0.0),
    "allen-cahn": (_allen_cahn, 0.0),
    "allen-cahn-coarsened-2x2": (lambda: _allen_cahn().coarsened(space=2, time=2), 0.0),
    "ns-cfl-nu1e-4": (_ns_cfl, 0.0),
    "ns-cfl-nu1e-4-coarsened-2x2": (lambda: _ns_cfl().coarsened(space=2, time=2), 0.0),
    "ns-faithful-moving-forcing": (_ns_moving, 3.0),
    "ns-faithful-rk3-moving-forcing": (_ns_moving_rk3, 3.0),
    "ns-cfl-torus-vis": (_ns_torus_cfl, 1.0),
    "ns-faithful-fno": (_ns_faithful, 0.0),
    "ns-etdrk4-drag-moving-forcing": (_ns_etdrk4, 2.0),
    "ns-etdrk4-coarsened-2x2": (lambda: _ns_etdrk4(simulation_resolution=32, time_step=0.01)
                                .coarsened(space=2, time=2), 0.0),
    "ns-cfl-rk3-drag": (lambda: _ns_cfl(drag=0.2), 0.0),
    "ns-euler-cn-drag": (lambda: NavierStokes2D(
        resolution=16, simulation_resolution=16, viscosity=1e-3, forcing="fno",
        final_time=0.1, record_interval=0.05, time_step=0.01, drag=0.3), 0.0),
}


def _inputs(solver, batch=3, seed=0):
    inputs = solver.sample_inputs(seed, list(range(batch)))
    return inputs.pop("initial"), inputs


@pytest.mark.parametrize("name", CASES)
def test_float64_step_equals_the_solver_step(name):
    build, time = CASES[name]
    solver = build()
    initial, parameters = _inputs(solver)
    expected = solver.step(initial[:, None], time=time, parameters=parameters)
    step = differentiable_step(solver)
    got = step(torch.as_tensor(initial), time=time, parameters=parameters)
    assert got.dtype == torch.float64 and got.shape == initial.shape
    scale = np.abs(expected).max()
    assert np.abs(got.numpy() - expected).max() <= 1e-10 * scale
    # again, from the cached constants, with the parameters as tensors
    again = step(torch.as_tensor(initial), time=time,
                 parameters={k: torch.as_tensor(v).requires_grad_() for k, v in
                             parameters.items()})
    assert np.abs(again.detach().numpy() - expected).max() <= 1e-10 * scale


def test_cfl_samples_with_different_step_counts_match_the_solver():
    solver = _ns_cfl(time_step=0.5)  # the step cap does not bind: the CFL limit decides
    initial, parameters = _inputs(solver, batch=2)
    initial = initial * np.array([1.0, 4.0])[:, None, None, None]
    step = differentiable_step(solver)
    counts = step._steps(torch.as_tensor(initial))
    assert counts[0] != counts[1], counts  # the masked sub-steps are exercised
    expected = solver.step(initial[:, None], parameters=parameters)
    got = step(torch.as_tensor(initial), parameters=parameters).numpy()
    assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max()


def test_ks_per_sample_viscosity_does_not_depend_on_the_batch():
    solver = _ks()
    initial, parameters = _inputs(solver, batch=3)
    step = differentiable_step(solver)
    whole = step(torch.as_tensor(initial), parameters=parameters)
    alone = step(torch.as_tensor(initial[1:2]),
                 parameters={k: v[1:2] for k, v in parameters.items()})
    np.testing.assert_allclose(alone.numpy(), whole[1:2].numpy(), rtol=0, atol=1e-14)


def test_gradcheck_kuramoto_sivashinsky():
    solver = KuramotoSivashinsky(resolution=16, simulation_resolution=16, domain_length=22.0,
                                 viscosity=(0.9, 1.1), final_time=0.1, record_interval=0.1,
                                 time_step=0.05)
    initial, parameters = _inputs(solver, batch=2)
    step = differentiable_step(solver)
    frame = torch.as_tensor(initial).requires_grad_()
    assert torch.autograd.gradcheck(lambda u: step(u, parameters=parameters), (frame,))


def test_gradcheck_kdv():
    solver = KdV(resolution=16, simulation_resolution=16, domain_length=32.0, final_time=0.1,
                 record_interval=0.1, time_step=0.05)
    initial, _ = _inputs(solver, batch=1)
    step = differentiable_step(solver)
    assert torch.autograd.gradcheck(step, (torch.as_tensor(initial).requires_grad_(),))


def test_gradcheck_allen_cahn():
    solver = AllenCahn(resolution=12, simulation_resolution=12, diffusivity=(0.05, 0.1),
                       final_time=0.1, record_interval=0.1, time_step=0.05, lmax=4)
    initial, parameters = _inputs(solver, batch=2)
    step = differentiable_step(solver)
    frame = torch.as_tensor(initial).requires_grad_()
    assert torch.autograd.gradcheck(lambda u: step(u, parameters=parameters), (frame,))


def test_gradcheck_navier_stokes_cfl_with_moving_forcing():
    # RK3/CN, per-sample step counts (the second sample is faster), the moving forcing
    solver = NavierStokes2D(resolution=8, simulation_resolution=8, viscosity=(1e-3, 2e-3),
                            forcing="torus-vis-force", final_time=1.0, record_interval=1.0,
                            time_stepping="cfl", time_step=1.0)
    initial, parameters = _inputs(solver, batch=2)
    step = differentiable_step(solver)
    frame = torch.as_tensor(initial).requires_grad_()
    assert list(step._steps(frame)) == [1, 2]  # max|u| + |v|: 0.051 and 0.085
    assert torch.autograd.gradcheck(lambda w: step(w, time=1.0, parameters=parameters),
                                    (frame,))


def test_gradcheck_navier_stokes_etdrk4_with_drag_and_moving_forcing():
    solver = NavierStokes2D(resolution=8, simulation_resolution=8, viscosity=(1e-3, 2e-3),
                            forcing="torus-vis-force", final_time=0.2, record_interval=0.2,
                            time_step=0.1, scheme="etdrk4", drag=0.1)
    initial, parameters = _inputs(solver, batch=2)
    step = differentiable_step(solver)
    frame = torch.as_tensor(initial).requires_grad_()
    assert torch.autograd.gradcheck(lambda w: step(w, time=1.0, parameters=parameters),
                                    (frame,))


def test_float32_follows_float64():
    for build in (_ks, _ns_cfl):
        solver = build()
        initial, parameters = _inputs(solver, batch=2)
        step = differentiable_step(solver)
        double = step(torch.as_tensor(initial), parameters=parameters)
        single = step(torch.as_tensor(initial, dtype=torch.float32), parameters=parameters)
        assert single.dtype == torch.float32
        error = (single.double() - double).abs().max() / double.abs().max()
        assert error < 1e-5, error


@pytest.mark.gpu
def test_cuda_matches_cpu():
    solver = _ns_cfl()
    initial, parameters = _inputs(solver, batch=2)
    step = differentiable_step(solver)
    cpu = step(torch.as_tensor(initial), parameters=parameters)
    gpu = step(torch.as_tensor(initial, device="cuda"), parameters=parameters)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=0, atol=1e-12)


def test_step_object_mirrors_the_solver():
    solver = _ns_cfl()
    step = differentiable_step(solver)
    assert isinstance(step, DifferentiableStep)
    assert (step.solver, step.fields, step.dt, step.simulation_grid) == \
        (solver, ("vorticity",), 0.5, (32, 32))


@pytest.mark.parametrize("solver", [Darcy(**Darcy.TINY), Euler2D(**Euler2D.TINY)],
                         ids=["darcy", "euler"])
def test_unsupported_solver_is_refused_with_the_supported_ones_named(solver):
    with pytest.raises(ValueError, match="Kuramoto-Sivashinsky, Burgers, KdV, Allen-Cahn.*Navier"):
        differentiable_step(solver)


def test_bad_frames_are_refused():
    step = differentiable_step(_ks())
    with pytest.raises(TypeError, match="torch.Tensor"):
        step(np.zeros((1, 1, 64)))
    with pytest.raises(ValueError, match="simulation grid"):
        step(torch.zeros(1, 1, 32, dtype=torch.float64))  # the stored grid
    with pytest.raises(ValueError, match="float32 or float64"):
        step(torch.zeros(1, 1, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match="per sample"):
        step(torch.zeros(1, 1, 64, dtype=torch.float64))  # the ranged viscosity is missing
