"""Allen–Cahn, u_t = ε u_xx + u − u³: the exact uniform solution to round-off, fourth order in
time against a fine-step run, the fast path against the NumPy oracle, the general (non-
homogeneous) path of the nonlinearity hook, the maximum principle, datasets and bad input.

A spatially uniform state solves the ODE u' = u − u³, whose solution is
u(t) = u0 e^t / √(1 − u0² + u0² e^{2t}) (u² obeys a logistic equation).
"""

import numpy as np
import pytest
import torch

from ssmpde.data import roles_of, validate
from ssmpde.generation import generate
from ssmpde.solvers import get_solver
from ssmpde.solvers.allen_cahn import AllenCahn
from ssmpde.solvers.differentiable import differentiable_step
from ssmpde.solvers.semilinear import Nonlinearity, PowerReaction


def exact_uniform(u0, time):
    return u0 * np.exp(time) / np.sqrt(1 - u0 ** 2 + u0 ** 2 * np.exp(2 * time))


def solver(**overrides):
    config = dict(resolution=64, simulation_resolution=64, diffusivity=0.02, final_time=1.0,
                  record_interval=1.0, time_step=0.01)
    return AllenCahn(**{**config, **overrides})


@pytest.mark.parametrize("fft_backend", ["pyfftw", "numpy"])
def test_uniform_states_follow_the_exact_ode_solution_to_round_off(fft_backend,
                                                                   raise_on_fp_errors):
    # u0 on both sides of the unstable 0 and of the stable ±1. Measured over t = 2 at
    # h = 5e-4: 1.5e-14 .. 1.2e-13 (0 exactly for u0 = 0), the same at h = 2.5e-4: what is
    # left is round-off accumulated over 4000 steps (at h = 1e-3 u0 = 1.5 is still 3.7e-13
    # off, ETDRK4's error; at h = 1e-2, 5e-10).
    u0 = np.array([-0.9, -0.3, 0.0, 0.01, 0.5, 1.0, 1.2, 1.5])
    ac = solver(resolution=16, simulation_resolution=16, final_time=2.0, record_interval=0.5,
                time_step=5e-4, fft_backend=fft_backend)
    frames = ac.simulate(np.broadcast_to(u0[:, None, None], (8, 1, 16)).copy(), 4)[:, :, 0]
    exact = exact_uniform(u0[:, None, None], 0.5 * np.arange(5)[None, :, None])
    assert np.abs(frames - exact).max() < 2e-13, np.abs(frames - exact).max(axis=(1, 2))
    assert np.abs(frames - frames[..., :1]).max() <= 1e-15  # and stay uniform


def test_fourth_order_in_time_against_a_fine_step_run(raise_on_fp_errors):
    # A random sine series (max|u0| 1.4, interfaces forming): measured errors 5.8e-6, 3.4e-7,
    # 2.0e-8, 1.2e-9 at h = 1/10 .. 1/80 against h = 1/2560; orders 4.11, 4.06, 4.03.
    reference = solver(time_step=1 / 2560)
    inputs = reference.sample_inputs(3, [0, 1])
    u0 = inputs.pop("initial")
    fine = reference.simulate(u0, 1, parameters=inputs)[:, -1]
    steps = np.array([1 / 10, 1 / 20, 1 / 40, 1 / 80])
    errors = np.array([np.abs(solver(time_step=h).simulate(u0, 1, parameters=inputs)[:, -1]
                              - fine).max() for h in steps])
    orders = np.log2(errors[:-1] / errors[1:])
    assert np.all(np.abs(orders - 4) < 0.3), (orders, errors)
    assert np.abs(fine - u0).max() > 0.3  # the state has moved


@pytest.mark.parametrize("dealias", [True, False])
def test_fast_path_equals_the_numpy_oracle(dealias, raise_on_fp_errors):
    # measured 3e-16 of max|u| (3.4e-16 without dealiasing)
    ac = solver(diffusivity=(0.01, 0.05), final_time=0.1, record_interval=0.1, dealias=dealias)
    inputs = ac.sample_inputs(5, [0, 1, 2])
    initial = inputs.pop("initial")
    fast = ac.simulate(initial, 1, parameters=inputs)[:, -1, 0]
    slow = np.fft.irfft(ac.reference_step(np.fft.rfft(initial[:, 0]), inputs, steps=10), 64)
    assert np.abs(fast - slow).max() < 1e-13 * np.abs(slow).max()


class _GeneralCubic(Nonlinearity):
    """−u³ without a degree: every path feeds it u itself (the path of any f)."""

    def term(self, u):
        return -(u * u * u)

    def multiplier(self, k):
        return np.ones_like(k)


class _General(AllenCahn):
    nonlinearity = _GeneralCubic()


def test_a_hook_without_a_degree_gives_the_same_solution_on_every_path():
    # 96 points (not a power of 2: scaling u by 1/n rounds); measured 4.4e-16 (fast), 4.9e-16
    # (PyTorch), 0 (tendency: both evaluate f(u) on u)
    config = dict(resolution=96, simulation_resolution=96, diffusivity=(0.01, 0.05),
                  final_time=0.2, record_interval=0.1, time_step=0.01)
    special, general = AllenCahn(**config), _General(**config)
    inputs = special.sample_inputs(1, [0, 1])
    initial = inputs.pop("initial")
    expected = special.simulate(initial, 2, parameters=inputs)
    assert np.abs(general.simulate(initial, 2, parameters=inputs) - expected).max() < 1e-14
    torch_step = differentiable_step(general)(torch.as_tensor(initial), parameters=inputs)
    assert np.abs(torch_step.numpy() - expected[:, 1]).max() < 1e-14
    np.testing.assert_allclose(general.tendency(initial, parameters=inputs),
                               special.tendency(initial, parameters=inputs), rtol=0, atol=1e-13)


def test_power_reaction_is_c_u_to_the_p():
    u = np.linspace(-2.0, 2.0, 9)
    for power in (2, 3, 5):
        reaction = PowerReaction(-0.5, power)
        assert reaction.degree == power
        np.testing.assert_allclose(reaction.term(u), u ** power, rtol=1e-15)
        np.testing.assert_array_equal(reaction.multiplier(np.arange(3.0)), -0.5)
    with pytest.raises(ValueError, match="power must be an integer >= 2"):
        PowerReaction(1.0, 1)


def test_maximum_principle_datasets_and_reproducibility():
    options = dict(resolution=32, simulation_resolution=128, final_time=4.0,
                   record_interval=1.0, diffusivity=(0.005, 0.02))
    a = generate("allen-cahn", num_samples=4, seed=2, batch_size=1, progress=False, **options)
    b = generate("allen-cahn", num_samples=4, seed=2, batch_size=4, progress=False, **options)
    np.testing.assert_array_equal(a.u.values, b.u.values)
    validate(b, check_finite=True)
    assert roles_of(b) == {"u": "state", "diffusivity": "parameter"}
    assert b.u.dims == ("sample", "time", "x") and b.u.shape == (4, 5, 32)
    np.testing.assert_allclose(b.x.values, 2 * np.pi * np.arange(32) / 32)  # x_j = L j / N
    bound = np.maximum(1.0, np.abs(b.u.values[:, 0]).max(axis=-1))
    assert np.all(np.abs(b.u.values).max(axis=(1, 2)) <= bound + 1e-12)
    # phases separate: the share of points within 0.1 of ±1 grows (measured 8, 14, 21, 31,
    # 38 %)
    near = (np.abs(np.abs(b.u.values) - 1) < 0.1).mean(axis=(0, 2))
    assert np.all(np.diff(near) > 0) and near[-1] > 0.3, near


def test_bad_configs_are_refused_naming_the_field():
    refused = {"diffusivity must be a positive": dict(diffusivity=0.0),
               "diffusivity": dict(diffusivity=(0.1, -1.0)),
               "even divisor of the simulation resolution": dict(resolution=100),
               "whole number of time steps": dict(time_step=0.03),
               "lmax must be an integer >= 2": dict(lmax=1),
               "lmax 200 draws sines": dict(lmax=200),
               "dealias must be True or False": dict(dealias="no")}
    for message, options in refused.items():
        with pytest.raises(ValueError, match=message):
            AllenCahn(**options)


def test_the_step_limit_of_the_explicit_reaction():
    # From u0 = 2, h · 3 max|u|² = 3.6 still settles on u = 1, 4.8 blows up; the error names
    # the limit of the hook
    from ssmpde.solvers.base import SolverDivergedError

    def run(time_step):
        ac = get_solver("allen-cahn", resolution=16, simulation_resolution=16,
                        final_time=12.0, record_interval=12.0, time_step=time_step)
        return ac.simulate(np.full((1, 1, 16), 2.0), 1)[0, -1, 0]

    np.testing.assert_allclose(run(0.3), 1.0, rtol=0, atol=1e-6)
    with np.errstate(all="ignore"), pytest.raises(
            SolverDivergedError, match=r"time_step 0.4 .* time_step \* 3 \|c\| max\|u\|\^2"):
        run(0.4)
