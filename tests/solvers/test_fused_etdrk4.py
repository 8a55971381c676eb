"""The fused ETDRK4 path of the semilinear solvers (FFTW executed from numba) against the
plain NumPy oracle (``reference_step``): every PDE (real and complex linear operators,
quadratic and cubic powers), any grid, batch and thread count; a sample's bits do not depend
on its batch or the threads; float32 within its documented bound of float64."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssmpde.core import relative_l2
from ssmpde.solvers import get_solver
from ssmpde.solvers.semilinear import BufferedETDRK4, FusedETDRK4

#: PDE -> (config of a short run, the per-sample parameter range)
CASES = {
    "kuramoto-sivashinsky": dict(domain_length=22.0, viscosity=(0.8, 1.2), time_step=0.02,
                                 lmax=3),
    "burgers": dict(viscosity=(0.02, 0.05), time_step=2e-3),
    "kdv": dict(domain_length=32.0, time_step=0.01, lmax=3),
    "allen-cahn": dict(diffusivity=(0.01, 0.02), time_step=0.02, lmax=3),
}


def solver(name, n, steps, **extra):
    config = dict(CASES[name], resolution=n, simulation_resolution=n, **extra)
    h = config["time_step"]
    config.update(record_interval=steps * h, final_time=steps * h)
    return get_solver(name, **config)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(CASES)), n=st.sampled_from([8, 16, 32, 64]),
       batch=st.integers(1, 5), steps=st.integers(1, 4), threads=st.integers(1, 3),
       seed=st.integers(0, 2 ** 16))
def test_fused_steps_match_the_numpy_oracle(name, n, batch, steps, threads, seed):
    ks = solver(name, n, steps, threads=threads)
    inputs = ks.sample_inputs(seed=seed, indices=list(range(batch)))
    parameters = {k: inputs[k] for k in ks.parameter_names if k in inputs}
    state = ks.start(inputs["initial"], parameters)
    assert isinstance(state.stepper, FusedETDRK4)
    ks.advance(state, 0.0)
    ours = ks.observe(state)[:, 0]
    v_hat = ks.reference_step(np.fft.rfft(inputs["initial"][:, 0]), parameters, steps=steps)
    theirs = np.fft.irfft(v_hat, n)
    scale = np.abs(theirs).max()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12 * scale)


def test_the_numpy_backend_runs_the_buffered_stepper_and_agrees():
    fused, buffered = (solver("kuramoto-sivashinsky", 32, 20, fft_backend=backend)
                       for backend in ("pyfftw", "numpy"))
    inputs = fused.sample_inputs(seed=1, indices=[0, 1, 2])
    a, b = fused.solve_batch(inputs)["u"], buffered.solve_batch(inputs)["u"]
    parameters = {"viscosity": inputs["viscosity"]}
    assert isinstance(buffered.start(inputs["initial"], parameters).stepper, BufferedETDRK4)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * np.abs(b).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_sample_has_the_same_bits_in_any_batch_and_with_any_threads(name):
    reference = solver(name, 64, 6, threads=1)
    inputs = reference.sample_inputs(seed=5, indices=list(range(7)))
    alone = reference.solve_batch({k: v[3:4] for k, v in inputs.items()})["u"][0]
    for threads in (1, 2, 3):
        batch = solver(name, 64, 6, threads=threads).solve_batch(inputs)["u"]
        np.testing.assert_array_equal(batch[3], alone)


#: float32 against float64, relative L2 at the end (measured maxima in comments): the
#: documented bounds of docs/numerics/float32.md.
FLOAT32_BOUNDS = {"kuramoto-sivashinsky": 1e-5, "burgers": 1e-5, "allen-cahn": 1e-5}


@pytest.mark.parametrize("name", sorted(FLOAT32_BOUNDS))
def test_float32_is_within_its_documented_bound_of_float64(name):
    double, single = (solver(name, 64, 50, dtype=dtype) for dtype in ("float64", "float32"))
    inputs = double.sample_inputs(seed=2, indices=[0, 1, 2, 3])
    a, b = double.solve_batch(inputs)["u"], single.solve_batch(inputs)["u"]
    error = relative_l2(b[:, -1], a[:, -1]).max()
    assert 1e-9 < error <= FLOAT32_BOUNDS[name], error  # it did run in float32
    assert b.dtype == np.float64


def test_a_bad_dtype_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"unknown dtype 'float16'.*float64.*float32"):
        solver("burgers", 16, 1, dtype="float16")
    with pytest.raises(ValueError, match="fused path only"):
        solver("burgers", 16, 1, dtype="float32", fft_backend="numpy")
