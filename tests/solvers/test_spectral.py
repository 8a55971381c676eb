"""Spectral helpers: the pyFFTW path against numpy.fft, derivatives, masks, resampling."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssmpde.solvers.spectral import (RealFFT, dealias_mask, derivative_wavenumbers, irfftn,
                                     rfftn, spectral_resample, wavenumbers)

even_sizes = st.integers(1, 24).map(lambda h: 2 * h)
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


@given(batch=batch_shapes, n=even_sizes, ndim=st.sampled_from([1, 2]),
       seed=st.integers(0, 2 ** 16))
def test_pyfftw_equals_numpy_to_round_off(batch, n, ndim, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(batch + (n,) * ndim)
    fast, slow = (RealFFT(batch, n, ndim=ndim, backend=b) for b in ("pyfftw", "numpy"))
    for fft in (fast, slow):
        fft.real[...] = x
        fft.forward()
    scale = np.max(np.abs(slow.spectral))
    assert np.max(np.abs(fast.spectral - slow.spectral)) <= 1e-13 * scale
    np.testing.assert_allclose(slow.spectral, np.fft.rfftn(x, axes=tuple(range(-ndim, 0))),
                               rtol=0, atol=1e-13 * scale)
    # backward: unnormalised, n**ndim times numpy's inverse, for both backends
    spectrum = fast.spectral.copy()
    for fft in (fast, slow):
        fft.spectral[...] = spectrum
        fft.backward()
    assert np.max(np.abs(fast.real - slow.real)) <= 1e-12 * n ** ndim * np.max(np.abs(x))
    np.testing.assert_allclose(fast.real / n ** ndim, x, rtol=0, atol=1e-12 * np.max(np.abs(x)))


@pytest.mark.parametrize("n", [16, 256])
def test_batched_transform_is_bit_identical_to_single(n):
    # FFTW_ESTIMATE plans depend on the shape only: sample i of a batch must come out
    # exactly as when it is transformed alone (the dataset reproducibility contract).
    x = np.random.default_rng(0).standard_normal((7, n, n))
    batch = RealFFT((7,), n)
    batch.real[...] = x
    batch.forward()
    single = RealFFT((1,), n)
    for i in range(7):
        single.real[...] = x[i]
        single.forward()
        np.testing.assert_array_equal(single.spectral[0], batch.spectral[i])


def test_spectral_derivative_is_exact_for_resolved_modes():
    n = 32
    x = np.arange(n) / n
    for k in range(1, n // 2):
        u_hat = rfftn(np.sin(2 * np.pi * k * x), ndim=1)
        du = irfftn(2j * np.pi * derivative_wavenumbers(n, real=True) * u_hat, n, ndim=1)
        np.testing.assert_allclose(du, 2 * np.pi * k * np.cos(2 * np.pi * k * x), atol=1e-11 * k)


def test_nyquist_derivative_is_zeroed():
    n = 8
    assert derivative_wavenumbers(n)[n // 2] == 0.0
    assert derivative_wavenumbers(n, real=True)[-1] == 0.0
    assert wavenumbers(n)[n // 2] == -n // 2


@pytest.mark.parametrize("n", [6, 16, 64, 256])
def test_dealias_mask_is_the_square_two_thirds_rule(n):
    mask = dealias_mask(n)
    ky, kx = wavenumbers(n)[:, None], wavenumbers(n, real=True)[None, :]
    expected = (np.abs(ky) <= n / 3) & (np.abs(kx) <= n / 3)
    np.testing.assert_array_equal(mask, expected)
    assert mask.shape == (n, n // 2 + 1)
    kept = int(2 * np.floor(n / 3) + 1)
    assert mask.sum() == kept * (np.floor(n / 3) + 1)


@given(seed=st.integers(0, 1000), m=st.sampled_from([8, 16]), factor=st.sampled_from([2, 4]))
def test_resampling_band_limited_fields_is_exact(seed, m, factor):
    rng = np.random.default_rng(seed)
    n = m * factor
    y, x = (np.arange(n) / n)[:, None], (np.arange(n) / n)[None, :]
    field = np.zeros((n, n))
    for _ in range(4):  # random modes below the coarse Nyquist
        kx, ky = rng.integers(-m // 2 + 1, m // 2, size=2)
        field += rng.standard_normal() * np.cos(2 * np.pi * (kx * x + ky * y) + rng.uniform(0, 6))
    coarse = field[::factor, ::factor]
    np.testing.assert_allclose(spectral_resample(coarse, n), field, atol=1e-12)
    np.testing.assert_allclose(spectral_resample(field, m), coarse, atol=1e-12)


@pytest.mark.parametrize("bad", [0, 3, 7, -2, 2.0])
def test_odd_or_invalid_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="even"):
        RealFFT((1,), bad)


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend"):
        RealFFT((1,), 8, backend="cufft")


@pytest.mark.parametrize("forcing", [0.0, 0.7 - 0.2j])
def test_etdrk4_integrates_a_dispersive_operator_exactly(forcing):
    # L = i k³ (KdV's u_t = −u_xxx) and a constant N = F, for which ETDRK4 is exact:
    # v(h) = e^{hL} v + (e^{hL} − 1) / L · F (h F at L = 0), whatever |hL| (up to 1.4e3 here).
    from ssmpde.solvers.spectral import ETDRK4

    k, h = np.arange(17.0), 0.35
    linear = 1j * k ** 3
    stepper = ETDRK4(linear, h, lambda v, out: out.fill(forcing), batch=2)
    v = np.ones((2, 17), complex)
    stepper.step(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.where(k == 0, h, (np.exp(h * linear) - 1) / linear)
    exact = np.exp(h * linear) + phi * forcing
    np.testing.assert_allclose(v, exact[None].repeat(2, 0), rtol=0, atol=1e-14)
    # a real operator keeps real coefficients (Burgers and KS round as they always did)
    assert np.all(ETDRK4(-k ** 2, h, None, batch=1).c["f1"].imag == 0)


@pytest.mark.parametrize("coefficient", [1.0, 6.0, 0.3])
def test_quadratic_flux_is_minus_b_u_u_x(coefficient):
    from ssmpde.solvers.semilinear import NonlinearTerm1D, QuadraticFlux

    n, length = 32, 7.0
    x = length * np.arange(n) / n
    kappa = 2 * np.pi * 3 / length
    u = np.stack([np.sin(kappa * x), 0.5 * np.cos(kappa * x)])
    hook = QuadraticFlux(coefficient)
    k = 2 * np.pi / length * np.fft.rfftfreq(n, 1.0 / n)
    k[-1] = 0.0
    flux = NonlinearTerm1D(hook, hook.multiplier(k) / n ** 2, batch=2)
    v_hat = flux.spectral(u)
    np.testing.assert_allclose(flux.physical(v_hat), u, rtol=0, atol=1e-14)
    out = np.empty_like(v_hat)
    flux(v_hat, out)
    u_u_x = u * kappa * np.stack([np.cos(kappa * x), -0.5 * np.sin(kappa * x)])
    np.testing.assert_allclose(np.fft.irfft(out, n), -coefficient * u_u_x, rtol=0,
                               atol=1e-13 * coefficient)
