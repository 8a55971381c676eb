"""The one spectral velocity-from-vorticity step (``ssmpde.solvers.spectral.spectral_velocity``):
exact on single Fourier modes for NumPy, torch and numba alike, and the only copy its users run.
"""

import ast
import inspect
import sys

import numpy as np
import pytest
import torch

import benchmarks.bench_kolmogorov_resolution as bench
from ssmpde.solvers import differentiable, navier_stokes, navier_stokes_engine, spectral
from ssmpde.solvers.differentiable import differentiable_step
from ssmpde.solvers.navier_stokes import NavierStokes2D, reference_advection
from ssmpde.solvers.spectral import (VorticityWavenumbers, advection, spectral_velocity,
                                     velocity_spectra, vorticity_wavenumbers)
from ssmpde.surrogates import conv_corrector
from ssmpde.surrogates.conv_corrector import vorticity_features

#: The modules that need a velocity from a vorticity (the solver's oracle and tendency, its
#: numba engine, the PyTorch step, the corrector's features, the Kolmogorov benchmark).
USERS = (navier_stokes, navier_stokes_engine, differentiable, conv_corrector, bench)


def single_mode(n, mx, my, length, amplitude=1.3, phase=0.4):
    """ω = A cos(κ·x + φ) on the n² grid of [0, length)², with κ = 2π (mx, my) / length,
    and its closed forms: ψ = ω / |κ|², u = ∂ψ/∂y, v = −∂ψ/∂x, ∇ω."""
    coord = np.arange(n) * length / n
    y, x = coord[:, None], coord[None, :]
    kx, ky = 2 * np.pi * mx / length, 2 * np.pi * my / length
    theta = kx * x + ky * y + phase
    omega = amplitude * np.cos(theta) + 0 * x * y
    sine = amplitude * np.sin(theta) + 0 * x * y
    k2 = kx ** 2 + ky ** 2
    return omega, (-ky * sine / k2, kx * sine / k2, -kx * sine, -ky * sine)


@pytest.mark.parametrize("length", [1.0, 2 * np.pi], ids=["unit-torus", "two-pi"])
@pytest.mark.parametrize("mx, my", [(1, 0), (0, 3), (2, -1), (-3, 5), (7, 7)])
@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_single_mode_velocity_is_exact(library, mx, my, length):
    # One mode: u·∇ω = A² sin²θ (−κy κx + κx κy) / |κ|² = 0, exactly the closed forms.
    n = 16
    omega, expected = single_mode(n, mx, my, length)
    k = vorticity_wavenumbers(n, length=length)
    if library == "torch":
        k = VorticityWavenumbers(*(torch.as_tensor(v) for v in k))
        fields = torch.fft.irfft2(torch.stack(velocity_spectra(torch.fft.rfft2(
            torch.as_tensor(omega)), k)), s=(n, n)).numpy()
    else:
        fields = np.fft.irfft2(np.stack(velocity_spectra(np.fft.rfft2(omega), k)), s=(n, n))
    scale = max(1.0, max(np.abs(e).max() for e in expected))
    for got, want in zip(fields, expected):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(advection(*fields), 0.0, rtol=0, atol=1e-12 * scale ** 2)


def test_the_numba_build_is_the_same_arithmetic_as_the_array_one():
    # The engine compiles spectral_velocity on scalars: same bits as on arrays.
    rng = np.random.default_rng(0)
    k = vorticity_wavenumbers(8)
    w_hat = np.fft.rfft2(rng.standard_normal((8, 8)))
    on_arrays = spectral_velocity(w_hat.real, w_hat.imag, k.ky[:, None], k.kx,
                                  k.inverse_laplacian)
    for i, j in [(0, 0), (1, 2), (4, 4), (7, 1), (3, 0)]:
        on_scalars = navier_stokes_engine._velocity_at(
            w_hat.real[i, j], w_hat.imag[i, j], k.ky[i], k.kx[j], k.inverse_laplacian[i, j])
        for (re, im), (s_re, s_im) in zip(on_arrays, on_scalars):
            assert (re[i, j], im[i, j]) == (s_re, s_im)


def test_the_wavenumbers_follow_the_solver_conventions():
    k = vorticity_wavenumbers(8)
    assert k.ky[4] == 0 and k.kx[4] == 0  # first derivatives drop the Nyquist mode
    assert k.laplacian[4, 0] == (2 * np.pi * 4) ** 2  # the Laplacian keeps it
    assert k.inverse_laplacian[0, 0] == 0  # zero-mean stream function
    np.testing.assert_array_equal(vorticity_wavenumbers(8, length=2 * np.pi).ky,
                                  [0, 1, 2, 3, 0, -3, -2, -1])


def test_every_user_calls_the_one_function(monkeypatch):
    calls = []

    def counting(*args):
        calls.append(sys._getframe(2).f_globals["__name__"])  # velocity_spectra's caller
        return spectral_velocity(*args)

    monkeypatch.setattr(spectral, "spectral_velocity", counting)
    rng = np.random.default_rng(1)
    frame = rng.standard_normal((1, 1, 16, 16))
    ns = NavierStokes2D(resolution=16, simulation_resolution=16, viscosity=1e-3,
                        final_time=0.02, record_interval=0.01, time_step=0.01,
                        time_stepping="cfl", forcing="none")
    runs = {
        "ssmpde.solvers.navier_stokes": lambda: (reference_advection(np.fft.rfft2(frame[:, 0])),
                                                 ns.tendency(frame)),
        "ssmpde.solvers.differentiable": lambda: differentiable_step(ns)(torch.as_tensor(frame)),
        "ssmpde.surrogates.conv_corrector": lambda: vorticity_features(
            torch.as_tensor(frame[:, 0])),
        "benchmarks.bench_kolmogorov_resolution": lambda: bench.max_speed(frame),
    }
    for module, run in runs.items():
        calls.clear()
        run()
        assert module in calls, (module, calls)
    # The numba engine cannot be patched: it compiles the same function object.
    assert navier_stokes_engine._velocity_at.py_func is spectral_velocity
    assert navier_stokes_engine._advection_at.py_func is advection


@pytest.mark.parametrize("module", USERS, ids=lambda m: m.__name__)
def test_no_user_keeps_a_copy(module):
    # A copy of the step multiplies by i k somewhere: no user writes an imaginary number.
    tree = ast.parse(inspect.getsource(module))
    imaginary = [node.lineno for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, complex)]
    assert not imaginary, f"{module.__name__} lines {imaginary}"
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert names & {"velocity_spectra", "spectral_velocity"}, module.__name__
