"""S4D kernels and their FFT convolution against independent oracles.

* the loop recurrence :func:`ssmpde.kernels.reference.s4d_ref`, in values and the gradients of
  every input (hypothesis over shapes, causal/bidirectional, with/without ``D``, small and
  large steps), and ``gradcheck``;
* an O(L²) convolution written out here (no FFT), and impulse responses that would show any
  wrap-around of the periodic FFT;
* the closed form ``K[l] = 2 Re(C (e^{ΔA} − 1)/A e^{ΔA l})`` in complex numpy, its ``A → 0``
  limit, and the Taylor series of ``(e^z − 1)/z``;
* float32 against float64 on long (L = 4096) and moderate sequences;
* the errors raised for malformed input.
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ssmpde.kernels.reference import s4d_ref
from ssmpde.kernels.s4d import s4d, s4d_convolution, s4d_kernel, zoh_input_factor

f64 = torch.float64
f32 = torch.float32
DT_MIN = 1e-3


def make_params(seed, *, channels, modes, kernels, dt_max=1e-1, damping=(-3.0, 3.0),
                with_D=True, dtype=f64):
    """S4D parameters: ``Δ`` log-uniform in ``[1e-3, dt_max]``, raw damping uniform in
    ``damping``, frequency uniform in ``[−πN, πN]``, complex ``C`` and ``D`` standard normal."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=g, dtype=f64)

    lo, hi = math.log(DT_MIN), math.log(dt_max)
    params = {
        "log_dt": lo + (hi - lo) * rand(channels),
        "damping": damping[0] + (damping[1] - damping[0]) * rand(channels, modes),
        "frequency": math.pi * modes * (2 * rand(channels, modes) - 1),
        "C": torch.randn(kernels, channels, modes, 2, generator=g, dtype=f64) / math.sqrt(2),
    }
    if with_D:
        params["D"] = torch.randn(channels, generator=g, dtype=f64)
    return {k: v.to(dtype) for k, v in params.items()}


def random_input(seed, *shape, dtype=f64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=f64).to(dtype)


def softplus_np(x):
    return np.logaddexp(0.0, x)


def direct_convolution(u, kernel, D=None):
    """``y_l = Σ_{j≤l} K[l−j] u_j + Σ_{j>l} K_b[j−l−1] u_j + D u_l`` as explicit sums (numpy,
    one output position at a time; no FFT)."""
    u = u.detach().to(f64).numpy()
    K = kernel.detach().to(f64).numpy()
    length = u.shape[-1]
    y = np.zeros_like(u)
    for l in range(length):
        # j = 0..l meets lags l, l−1, ..., 0
        y[..., l] = np.sum(K[0, :, l::-1] * u[..., :l + 1], axis=-1)
        if K.shape[0] == 2:
            # j = l+1..L−1 meets backward lags 0..L−l−2
            y[..., l] += np.sum(K[1, :, :length - l - 1] * u[..., l + 1:], axis=-1)
    if D is not None:
        y += D.detach().to(f64).numpy()[:, None] * u
    return torch.from_numpy(y)


def zoh_series(z, terms=30):
    """``Σ_{k=0}^{terms−1} z^k/(k+1)!`` in complex numpy."""
    total = np.zeros_like(z)
    power = np.ones_like(z)
    for k in range(terms):
        total = total + power / math.factorial(k + 1)
        power = power * z
    return total


def zoh_series_derivative(z, terms=30):
    """``Σ_{k=1}^{terms} k z^{k−1}/(k+1)!``, the derivative of :func:`zoh_series`."""
    total = np.zeros_like(z)
    power = np.ones_like(z)
    for k in range(1, terms + 1):
        total = total + k * power / math.factorial(k + 1)
        power = power * z
    return total


def zoh_exact(z):
    """``(e^z − 1)/z`` to ~1e-15: the 30-term series below |z| = 0.1 (remainder < 1e-60),
    the quotient above (cancellation ≤ eps/|z|)."""
    z = np.asarray(z, dtype=np.complex128)
    small = np.abs(z) < 0.1
    safe = np.where(small, 1.0, z)
    return np.where(small, zoh_series(z), (np.exp(safe) - 1) / safe)


def kernel_exact(log_dt, damping, frequency, C, length):
    """``K [S, H, L]`` from the closed form in complex numpy with :func:`zoh_exact`."""
    dt = np.exp(log_dt.detach().numpy())[:, None]                           # [H, 1]
    A = -softplus_np(damping.detach().numpy()) + 1j * frequency.detach().numpy()
    Cc = C.detach().numpy()[..., 0] + 1j * C.detach().numpy()[..., 1]       # [S, H, N]
    weights = Cc * dt * zoh_exact(dt * A)                                   # [S, H, N]
    powers = np.exp((dt * A)[..., None] * np.arange(length))               # [H, N, L]
    return torch.from_numpy(2 * np.einsum("shn,hnl->shl", weights, powers).real)


def assert_close_scaled(got, want, rel, what="values", scale=None):
    """``|got − want| ≤ rel · scale`` elementwise (NaN fails); ``scale``: ``max|want|``
    unless given (:func:`rounding_scale`)."""
    scale = max(want.abs().max().item() if scale is None else scale, 1e-30)
    torch.testing.assert_close(got, want, rtol=0, atol=rel * scale,
                               msg=lambda m: f"{what}: {m}")


def rounding_scale(u, params):
    """``max_l Σ |terms|`` of the layer's output sums: ``|u|`` convolved with the kernel of
    absolute terms ``2 Σ_n |C_n Δ (e^{ΔA}−1)/(ΔA)| |e^{ΔA}|^l`` plus ``|D u|``. Rounding errors
    of a sum scale with the sum of its terms' magnitudes, not with the sum: where terms cancel
    (a one-position output of -1e-5 from terms of order 0.1), the output's own size is no
    measure of the accuracy either path can have."""
    length = u.shape[-1]
    dt = np.exp(params["log_dt"].numpy())[:, None]
    A = -softplus_np(params["damping"].numpy()) + 1j * params["frequency"].numpy()
    C = params["C"].numpy()
    weights = np.abs(C[..., 0] + 1j * C[..., 1]) * np.abs(dt * zoh_exact(dt * A))
    powers = np.abs(np.exp((dt * A)[..., None] * np.arange(length)))
    kernel = torch.from_numpy(2 * np.einsum("shn,hnl->shl", weights, powers))
    D = params.get("D")
    return float(direct_convolution(u.abs(), kernel, None if D is None else D.abs()).max())


def values_and_grads(fn, u, params, cotangent):
    """``y = fn(u, **params)`` and the gradients of ``<y, cotangent>`` w.r.t. every input."""
    leaves = {"u": u, **params}
    leaves = {k: v.detach().clone().requires_grad_() for k, v in leaves.items()}
    y = fn(leaves["u"], **{k: v for k, v in leaves.items() if k != "u"})
    grads = torch.autograd.grad((y * cotangent).sum(), list(leaves.values()))
    return y.detach(), dict(zip(leaves, grads))


def fft_layer(u, **p):
    return s4d(u, **p, backend="fft")


def ref_layer(u, **p):
    return s4d_ref(u, **p)


# ---------------------------------------------------------------------------------------
# The FFT path against the loop recurrence.
# ---------------------------------------------------------------------------------------
# Tolerances relative to the largest |value| of each compared tensor. zoh_input_factor sums
# (e^z − 1)/z as a nine-term series below |z| = 1e-2 (test_zoh_input_factor_float64_accuracy),
# so the two paths agree to ~2e-13 in values and ~2e-10 in gradients, the latter limited by the
# reference's own (e^{ΔA} − 1)/A, which loses eps/|ΔA|.
VALUE_TOL = 1e-11
GRAD_TOL = {"u": 1e-9, "C": 1e-9, "D": 1e-9, "log_dt": 1e-9, "damping": 1e-9,
            "frequency": 1e-9}


@settings(max_examples=25)
# a one-position output of -1.1e-5 from terms of order 0.1 (the scale once was max|y|)
@example(seed=1, batch=1, channels=1, modes=5, length=1, kernels=2, with_D=False, dt_max=0.1)
@given(seed=st.integers(0, 2**31 - 1), batch=st.integers(1, 2), channels=st.integers(1, 4),
       modes=st.integers(1, 6), length=st.one_of(st.just(1), st.integers(1, 40)),
       kernels=st.sampled_from([1, 2]), with_D=st.booleans(),
       dt_max=st.sampled_from([1e-1, 1.0]))
def test_fft_matches_recurrence_values_and_grads(seed, batch, channels, modes, length, kernels,
                                                  with_D, dt_max):
    params = make_params(seed, channels=channels, modes=modes, kernels=kernels, dt_max=dt_max,
                         with_D=with_D)
    u = random_input(seed + 1, batch, channels, length)
    cotangent = random_input(seed + 2, batch, channels, length)
    y_fft, g_fft = values_and_grads(fft_layer, u, params, cotangent)
    y_ref, g_ref = values_and_grads(ref_layer, u, params, cotangent)
    assert y_fft.dtype == y_ref.dtype == f64 and y_fft.shape == u.shape
    assert_close_scaled(y_fft, y_ref, VALUE_TOL, scale=rounding_scale(u, params))
    assert set(g_ref) == set(GRAD_TOL) - ({"D"} if not with_D else set())
    for name in g_ref:
        assert_close_scaled(g_fft[name], g_ref[name], GRAD_TOL[name], f"gradient of {name}")


def test_leading_batch_dimensions():
    """``u [..., H, L]`` with two leading axes: the same as the recurrence on the flattened
    batch (``backend="reference"`` reshapes) and as the direct sums."""
    params = make_params(3, channels=3, modes=4, kernels=2)
    u = random_input(4, 2, 3, 3, 17)
    y_fft = s4d(u, **params, backend="fft")
    y_ref = s4d(u, **params, backend="reference")
    assert y_fft.shape == y_ref.shape == u.shape
    assert_close_scaled(y_fft, y_ref, 1e-12)
    kernel = s4d_kernel(params["log_dt"], params["damping"], params["frequency"], params["C"],
                        17)
    assert_close_scaled(y_fft, direct_convolution(u, kernel, params["D"]), 1e-12)


@pytest.mark.parametrize("kernels", [1, 2], ids=["causal", "bidirectional"])
def test_gradcheck_fft_path(kernels):
    params = make_params(11, channels=2, modes=2, kernels=kernels, dt_max=0.5)
    u = random_input(12, 1, 2, 5)
    names = ["u", *params]
    tensors = tuple(t.clone().requires_grad_() for t in (u, *params.values()))

    def layer(*args):
        kw = dict(zip(names, args))
        return s4d(kw.pop("u"), **kw, backend="fft")

    assert torch.autograd.gradcheck(layer, tensors)


# ---------------------------------------------------------------------------------------
# The convolution: no wrap-around, and the FFT product equals the explicit sums.
# ---------------------------------------------------------------------------------------
LENGTH = 33


def undamped_params(kernels, seed=21):
    """Nearly undamped modes (softplus(−20) ≈ 2e-9) and Δ ≥ 0.05: the kernel does not decay,
    so a lag that wrapped around would land on a large value."""
    p = make_params(seed, channels=2, modes=3, kernels=kernels, damping=(-20.0, -20.0),
                    dt_max=0.2)
    p["log_dt"] = torch.tensor([math.log(0.05), math.log(0.2)], dtype=f64)
    return p


def impulse(position, channels=2, length=LENGTH):
    u = torch.zeros(1, channels, length, dtype=f64)
    u[..., position] = 1.0
    return u


def test_causal_impulse_at_last_position_reaches_nothing_earlier():
    p = undamped_params(kernels=1)
    kernel = s4d_kernel(p["log_dt"], p["damping"], p["frequency"], p["C"], LENGTH)
    assert kernel.abs().amin(-1).min() > 0  # (a non-trivial kernel over every lag)
    y = s4d(impulse(LENGTH - 1), **p)[0]
    scale = y.abs().max().item()
    assert y[:, :-1].abs().max().item() <= 1e-12 * scale
    torch.testing.assert_close(y[:, -1], kernel[0, :, 0] + p["D"], rtol=1e-12, atol=0)
    # an impulse at 0 traces out the whole kernel, last lag included
    y0 = s4d(impulse(0), **{**p, "D": None})[0]
    assert_close_scaled(y0, kernel[0], 1e-12)


def test_bidirectional_impulse_backward_kernel_acts_on_later_positions_only():
    p = undamped_params(kernels=2)
    p["C"][0] = 0.0  # backward kernel only
    kernel = s4d_kernel(p["log_dt"], p["damping"], p["frequency"], p["C"], LENGTH)
    assert kernel[0].abs().max() == 0 and kernel[1].abs().amin(-1).min() > 0
    # impulse at 0: K_b carries u_j only to positions l < j, and none lies before 0, so only
    # the skip term D·u_0 remains (a wrapped lag would reach the far end)
    y = s4d(impulse(0), **p)[0]
    expected = torch.zeros_like(y)
    expected[:, 0] = p["D"]
    scale = kernel[1].abs().max().item()
    torch.testing.assert_close(y, expected, rtol=0, atol=1e-12 * scale)
    # impulse at L−1: y[L−1] = D, y[l] = K_b[L−2−l] for l < L−1
    y = s4d(impulse(LENGTH - 1), **p)[0]
    torch.testing.assert_close(y[:, -1], p["D"], rtol=0, atol=1e-12 * scale)
    assert_close_scaled(y[:, :-1], kernel[1, :, :LENGTH - 1].flip(-1), 1e-12)


def test_bidirectional_forward_kernel_acts_on_earlier_positions_only():
    p = undamped_params(kernels=2)
    p["C"][1] = 0.0  # forward kernel only
    kernel = s4d_kernel(p["log_dt"], p["damping"], p["frequency"], p["C"], LENGTH)
    y = s4d(impulse(LENGTH - 1), **p)[0]
    scale = kernel[0].abs().max().item()
    assert y[:, :-1].abs().max().item() <= 1e-12 * scale
    torch.testing.assert_close(y[:, -1], kernel[0, :, 0] + p["D"], rtol=1e-12, atol=0)
    y = s4d(impulse(0), **{**p, "D": None})[0]
    assert_close_scaled(y, kernel[0], 1e-12)


@pytest.mark.parametrize("kernels", [1, 2], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length", [1, 2, 33])
def test_fft_convolution_equals_direct_sums(kernels, length):
    p = make_params(31 + length, channels=3, modes=4, kernels=kernels, dt_max=1.0)
    u = random_input(32, 2, 3, length)
    kernel = s4d_kernel(p["log_dt"], p["damping"], p["frequency"], p["C"], length)
    for k, D in ((kernel, p["D"]), (kernel, None),
                 (random_input(33, kernels, 3, length), p["D"])):  # any kernel, not just S4D's
        y = s4d_convolution(u, k, D)
        assert y.shape == u.shape
        assert_close_scaled(y, direct_convolution(u, k, D), 1e-12)


# ---------------------------------------------------------------------------------------
# The kernel formula.
# ---------------------------------------------------------------------------------------
def closed_form(log_dt, damping, frequency, C, length):
    """``2 Re(C (e^{ΔA} − 1)/A e^{ΔA l})`` for one channel and one mode, complex numpy."""
    dt = np.exp(log_dt)
    A = complex(-softplus_np(damping), frequency)
    l = np.arange(length)
    return 2 * np.real(C * (np.exp(dt * A) - 1) / A * np.exp(dt * A * l))


def one_mode_kernel(log_dt, damping, frequency, C, length):
    def t(x):
        return torch.tensor(x, dtype=f64)

    Ct = t([[[[C.real, C.imag]]]])
    return s4d_kernel(t([log_dt]), t([[damping]]), t([[frequency]]), Ct, length)[0, 0].numpy()


@pytest.mark.parametrize("log_dt, damping, frequency", [
    (math.log(1e-3), 0.5, 3 * math.pi),     # |ΔA| ≈ 9.5e-3: inside the series branch
    (math.log(1e-2), -3.0, math.pi),        # |ΔA| ≈ 3.2e-2
    (math.log(0.1), 0.0, 5 * math.pi),
    (math.log(0.1), 3.0, 0.0),              # real A
    (math.log(1.0), -1.0, -7.0),
    (math.log(1.0), 2.0, 60.0),             # many radians per step
])
def test_kernel_equals_closed_form(log_dt, damping, frequency):
    C = complex(0.7, -1.3)
    got = one_mode_kernel(log_dt, damping, frequency, C, 50)
    want = closed_form(log_dt, damping, frequency, C, 50)
    dt = np.exp(log_dt)
    dtA = dt * complex(-softplus_np(damping), frequency)
    # |K[l]| ≤ 2|C Δ (e^{ΔA} − 1)/(ΔA)| =: envelope (|e^{ΔA l}| ≤ 1). The naive closed form
    # loses eps/|ΔA| to cancellation, the kernel's series |ΔA|^4/120, the phase ΔA·l ~eps·|ΔA|l.
    envelope = 2 * abs(C) * dt * abs(zoh_exact(dtA))
    rel = (1e-14 * (1 + abs(dtA) * 50) + 4e-16 / abs(dtA)
           + (abs(dtA) ** 4 / 120 if abs(dtA) < 1e-2 else 0.0))
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * envelope)
    assert np.abs(want).max() > 0.1 * envelope  # (not a vanishing kernel)


def test_kernel_sums_modes_channels_and_kernels():
    """The full ``[S, H, L]`` kernel is the sum over modes of one-mode closed forms, each
    channel with its own ``Δ`` and each of the ``S`` kernels with its own ``C``."""
    p = make_params(41, channels=3, modes=5, kernels=2, dt_max=1.0, damping=(-1.0, 3.0))
    p["log_dt"] = torch.log(torch.tensor([0.05, 0.3, 1.0], dtype=f64))  # |ΔA| > 1e-2
    kernel = s4d_kernel(p["log_dt"], p["damping"], p["frequency"], p["C"], 20).numpy()
    assert kernel.shape == (2, 3, 20)
    want = np.zeros_like(kernel)
    for s in range(2):
        for h in range(3):
            for n in range(5):
                C = complex(*p["C"][s, h, n].tolist())
                want[s, h] += closed_form(p["log_dt"][h].item(), p["damping"][h, n].item(),
                                          p["frequency"][h, n].item(), C, 20)
    np.testing.assert_allclose(kernel, want, rtol=0, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(kernel_exact(p["log_dt"], p["damping"], p["frequency"], p["C"],
                                            20).numpy(), want, rtol=0,
                               atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("dt", [1e-3, 0.5])
def test_kernel_tiny_A_has_the_limit_delta(dt):
    """softplus(−30) ≈ 9.4e-14 and ω = 0: ``(e^{ΔA} − 1)/A → Δ`` and ``e^{ΔA l} → 1``, so
    ``K[l] ≈ 2 Re(C) Δ``; the naive quotient has cancelled (all of it at Δ = 1e-3)."""
    C = complex(0.8, 2.0)
    got = one_mode_kernel(math.log(dt), -30.0, 0.0, C, 64)
    np.testing.assert_allclose(got, 2 * C.real * dt, rtol=1e-9)
    naive = closed_form(math.log(dt), -30.0, 0.0, C, 64)
    assert np.abs(naive / (2 * C.real * dt) - 1).max() > 1e-4  # the case is a real test
    # Gradients: near A = 0, Δ (e^{ΔA} − 1)/(ΔA) e^{ΔA l} = Δ (1 + ΔA (l + 1/2) + O(ΔA)^2),
    # so with Σ_{l<L} (l + 1/2) = L²/2, the gradients of Σ_l K[l] are
    #   log Δ: 2 Re(C) Δ L,  ω: −2 Im(C) Δ² L²/2,  ρ̃: −σ(ρ̃) 2 Re(C) Δ² L²/2,
    #   (Re C, Im C): (2 Δ L, 0)   [relative corrections O(|ΔA| L) < 1e-11].
    length = 64
    leaves = [torch.tensor([math.log(dt)], dtype=f64), torch.tensor([[-30.0]], dtype=f64),
              torch.tensor([[0.0]], dtype=f64), torch.tensor([[[[C.real, C.imag]]]], dtype=f64)]
    leaves = [t.requires_grad_() for t in leaves]
    g_log_dt, g_damping, g_frequency, g_C = (
        g.item() if g.numel() == 1 else g.flatten().tolist()
        for g in torch.autograd.grad(s4d_kernel(*leaves, length).sum(), leaves))
    half_square = length ** 2 / 2
    assert g_log_dt == pytest.approx(2 * C.real * dt * length, rel=1e-9)
    assert g_frequency == pytest.approx(-2 * C.imag * dt ** 2 * half_square, rel=1e-9)
    sigmoid = 1 / (1 + math.exp(30.0))
    assert g_damping == pytest.approx(-sigmoid * 2 * C.real * dt ** 2 * half_square, rel=1e-9)
    assert g_C[0] == pytest.approx(2 * dt * length, rel=1e-9)
    assert abs(g_C[1]) <= 1e-9 * dt * length


def zoh_and_derivative(z):
    """``zoh_input_factor(z)`` and its complex derivative from autograd (holomorphic: the
    gradient of ``Re f`` is ``conj f'``)."""
    t = torch.from_numpy(z).requires_grad_()
    value = zoh_input_factor(t)
    (grad,) = torch.autograd.grad(value.real.sum(), t)
    return value.detach().numpy(), grad.conj().resolve_conj().numpy()


def random_points(seed, log_radius, count):
    rng = np.random.default_rng(seed)
    radius = 10 ** rng.uniform(*log_radius, count)
    return radius * np.exp(1j * rng.uniform(-np.pi, np.pi, count))


def test_zoh_input_factor_small_arguments_equal_the_series():
    z = np.concatenate([[0.0, 1e-300, 1e-12j, -1e-6, 9.999e-3, -9.999e-3j],
                        random_points(51, (-8, -2), 200)])
    got, slope = zoh_and_derivative(z)
    assert got[0] == 1 and slope[0] == 0.5
    # The implementation truncates after z^3, which bounds its error by |z|^4/120 in value
    # and ≈ |z|^3/15 relative in derivative (≤ 8.3e-11 and 6.7e-8 below |z| = 1e-2).
    r = np.abs(z)
    assert (np.abs(got / zoh_series(z) - 1) <= 1.05 * r ** 4 / 120 + 4e-16).all()
    assert (np.abs(slope / zoh_series_derivative(z) - 1) <= r ** 3 / 14 + 1e-15).all()


def test_zoh_input_factor_large_arguments_equal_the_quotient():
    z = np.concatenate([[1.0001e-2, -1.0001e-2j, 0.1, 1.0, 10.0, 100.0, -40 + 3j, -700.0,
                         30.0, 1e3j], random_points(52, (-2, 2), 200)])
    got, slope = zoh_and_derivative(z)
    # (e^z − 1) loses at most eps/|z| ≤ 2.2e-14 relative for |z| ≥ 1e-2
    np.testing.assert_allclose(got, (np.exp(z) - 1) / z, rtol=1e-13, atol=0)
    # derivative: the series below |z| = 1 (remainder < 1e-30), (z e^z − e^z + 1)/z^2 above
    want = np.where(np.abs(z) < 1, zoh_series_derivative(z),
                    (z * np.exp(z) - np.exp(z) + 1) / z ** 2)
    # autograd of expm1(z)/z cancels: ≈ eps/|z|^2 ≤ 2e-12 relative at |z| = 1e-2
    np.testing.assert_allclose(slope, want, rtol=1e-11, atol=0)


def test_zoh_input_factor_float64_accuracy():
    z = random_points(53, (-3, -2), 200)
    got, slope = zoh_and_derivative(z)
    np.testing.assert_allclose(got, zoh_series(z), rtol=1e-14, atol=0)
    np.testing.assert_allclose(slope, zoh_series_derivative(z), rtol=1e-12, atol=0)


# ---------------------------------------------------------------------------------------
# float32.
# ---------------------------------------------------------------------------------------
LONG = 4096


def s4d_lin_params(seed, *, channels, modes, damping, kernels=2):
    """S4D-Lin frequencies ``ω_n = π n``, log-spaced ``Δ ∈ [1e-3, 1e-1]`` across channels."""
    g = torch.Generator().manual_seed(seed)
    return {
        "log_dt": torch.linspace(math.log(1e-3), math.log(1e-1), channels, dtype=f64),
        "damping": torch.full((channels, modes), damping, dtype=f64),
        "frequency": math.pi * torch.arange(modes, dtype=f64).expand(channels, modes).clone(),
        "C": torch.randn(kernels, channels, modes, 2, generator=g, dtype=f64) / math.sqrt(2),
        "D": torch.randn(channels, generator=g, dtype=f64),
    }


def assert_close_per_channel(got, want, rel, what):
    """``|got − want| ≤ rel[h] · max|want[..., h, :]|`` for each channel ``h``."""
    for h in range(want.shape[-2]):
        assert_close_scaled(got[..., h, :], want[..., h, :], float(rel[h]),
                            f"{what}, channel {h}")


@pytest.mark.parametrize("damping", [-20.0, 3.0], ids=["undamped", "damped"])
def test_long_sequence(damping):
    """L = 4096, S4D-Lin modes, Δ = 1e-3 and 1e-1, nearly undamped (softplus(−20) ≈ 2e-9) or
    damped. float64: the kernel against the closed form at every lag, the FFT output
    against the direct sums; float32 against float64 on the same (float32) parameters."""
    p64 = s4d_lin_params(61, channels=2, modes=8, damping=damping)
    p32 = {k: v.to(f32) for k, v in p64.items()}
    p64 = {k: v.to(f64) for k, v in p32.items()}  # the same (float32-rounded) parameters
    u32 = random_input(62, 1, 2, LONG, dtype=f32)
    u64 = u32.to(f64)
    k32 = s4d_kernel(p32["log_dt"], p32["damping"], p32["frequency"], p32["C"], LONG)
    k64 = s4d_kernel(p64["log_dt"], p64["damping"], p64["frequency"], p64["C"], LONG)
    y32 = s4d(u32, **p32)
    y64 = s4d(u64, **p64)
    assert k32.dtype == y32.dtype == f32
    assert torch.isfinite(k32).all() and torch.isfinite(y32).all()
    if damping < 0:  # the undamped kernel has not decayed at the last lag
        assert (k64[:, :, -64:].abs().amax(-1) > 1e-3 * k64.abs().amax(-1)).all()

    # float64: phase error ~eps·|ΔA|·L ≈ 2e-12, the series' |ΔA|^4/120 ≤ 8.3e-11
    exact = kernel_exact(p64["log_dt"], p64["damping"], p64["frequency"], p64["C"], LONG)
    assert_close_scaled(k64, exact, 1e-9, "float64 kernel")
    assert_close_scaled(y64, direct_convolution(u64, k64, p64["D"]), 1e-11, "direct sums")
    if damping > 0:
        # (not undamped: there the reference's (e^{ΔA} − 1)/A cancels for ω = 0, |ΔA| ~ 1e-12)
        assert_close_scaled(y64, s4d_ref(u64, **p64), 1e-10, "recurrence")

    # float32: ΔA·l is rounded to ~eps32·|ΔA|·l, a phase error of up to 5e-4 rad at Δ = 0.1,
    # ω = 7π, l = 4095 (any float32 evaluation of e^{ΔA l} shares it), on top of 1e-5 for the
    # float32 sums and FFT.
    eps32 = torch.finfo(f32).eps
    dtA = (p64["log_dt"].exp()[:, None]
           * torch.complex(-torch.nn.functional.softplus(p64["damping"]), p64["frequency"]))
    rel = 1e-5 + 2 * eps32 * LONG * dtA.abs().amax(-1)
    assert_close_per_channel(k32.to(f64), k64, rel, "float32 kernel")
    assert_close_per_channel(y32.to(f64), y64, rel, "float32 output")


def test_float32_against_float64_reference():
    p64 = make_params(71, channels=8, modes=16, kernels=2)
    p32 = {k: v.to(f32) for k, v in p64.items()}
    p64 = {k: v.to(f64) for k, v in p32.items()}
    u32 = random_input(72, 2, 8, 128, dtype=f32)
    cotangent = random_input(73, 2, 8, 128)
    y32, g32 = values_and_grads(fft_layer, u32, p32, cotangent.to(f32))
    y64, g64 = values_and_grads(ref_layer, u32.to(f64), p64, cotangent)
    assert y32.dtype == f32
    assert_close_scaled(y32.to(f64), y64, 1e-5, "output")
    for name in g64:
        assert g32[name].dtype == f32
        assert_close_scaled(g32[name].to(f64), g64[name], 1e-4, f"gradient of {name}")


# ---------------------------------------------------------------------------------------
# Malformed input.
# ---------------------------------------------------------------------------------------
def good_args(channels=2, modes=3, kernels=1):
    p = make_params(81, channels=channels, modes=modes, kernels=kernels, with_D=False)
    return p["log_dt"], p["damping"], p["frequency"], p["C"]


def test_kernel_rejects_mismatched_shapes():
    log_dt, damping, frequency, C = good_args()
    with pytest.raises(ValueError, match="log_dt"):
        s4d_kernel(log_dt[:1], damping, frequency, C, 8)
    with pytest.raises(ValueError, match="log_dt"):
        s4d_kernel(log_dt[:, None], damping, frequency, C, 8)
    with pytest.raises(ValueError, match="damping and frequency"):
        s4d_kernel(log_dt, damping, frequency[:, :2], C, 8)
    with pytest.raises(ValueError, match="damping and frequency"):
        s4d_kernel(log_dt, damping[0], frequency[0], C, 8)
    with pytest.raises(ValueError, match="C must"):
        s4d_kernel(log_dt, damping, frequency, C[..., 0], 8)
    with pytest.raises(ValueError, match="C must"):
        s4d_kernel(log_dt, damping, frequency, C[:, :, :2], 8)
    with pytest.raises(ValueError, match="C must"):
        s4d_kernel(log_dt, damping, frequency, C[0], 8)


@pytest.mark.parametrize("length", [0, -3, 2.0])
def test_kernel_rejects_bad_length(length):
    with pytest.raises(ValueError, match="length"):
        s4d_kernel(*good_args(), length)


def test_convolution_rejects_wrong_kernel_shape():
    u = random_input(82, 2, 3, 10)
    for shape in [(3, 10), (3, 3, 10), (1, 2, 10), (1, 3, 9), (2, 3, 11), (1, 1, 3, 10)]:
        with pytest.raises(ValueError, match="kernel must be"):
            s4d_convolution(u, torch.zeros(shape, dtype=f64))


def test_unknown_backend():
    log_dt, damping, frequency, C = good_args()
    u = random_input(83, 1, 2, 6)
    with pytest.raises(ValueError, match="'fft' or 'reference'"):
        s4d(u, log_dt, damping, frequency, C, backend="cuda")


def _kernel_every_lag(log_dt, damping, frequency, C, length):
    """The kernel with ``e^{ΔA l}`` evaluated at every lag (no factorisation): the direct
    form of the module docstring, in torch so that autograd gives its gradients."""
    dt = torch.exp(log_dt).unsqueeze(-1)
    dtA = dt * torch.complex(-torch.nn.functional.softplus(damping), frequency)
    weights = torch.view_as_complex(C.contiguous()) * (dt * zoh_input_factor(dtA))
    powers = torch.exp(dtA.unsqueeze(-1) * torch.arange(length, dtype=log_dt.dtype))
    return 2 * torch.einsum("shn,hnl->shl", weights, powers).real


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), channels=st.integers(1, 3), modes=st.integers(1, 5),
       length=st.integers(1, 300), kernels=st.sampled_from([1, 2]),
       dt_max=st.sampled_from([1e-1, 1.0]))
def test_kernel_by_factored_powers_equals_every_lag_values_and_grads(seed, channels, modes,
                                                                      length, kernels, dt_max):
    # s4d_kernel forms e^{ΔA l} as e^{ΔA·mT} e^{ΔA·r} (T = ⌈√L⌉); lengths that are squares,
    # one past a square and primes all crop the M·T lags differently.
    params = make_params(seed, channels=channels, modes=modes, kernels=kernels, dt_max=dt_max)
    leaves = [params[k].detach().clone().requires_grad_()
              for k in ("log_dt", "damping", "frequency", "C")]
    cotangent = torch.randn(kernels, channels, length, dtype=f64,
                            generator=torch.Generator().manual_seed(seed))
    results = []
    for fn in (s4d_kernel, _kernel_every_lag):
        kernel = fn(*leaves, length)
        results.append((kernel.detach(), torch.autograd.grad((kernel * cotangent).sum(), leaves)))
    (got, got_grads), (want, want_grads) = results
    assert got.shape == (kernels, channels, length)
    assert_close_scaled(got, want, 1e-12)
    for name, g, w in zip(("log_dt", "damping", "frequency", "C"), got_grads, want_grads):
        assert_close_scaled(g, w, 1e-10, f"gradient of {name}")
