"""S4D: diagonal state-space convolution kernels, applied by FFT (SS-NO, temporal memory).

Per channel ``h`` and mode ``n`` the state matrix is diagonal and complex,

.. math::
    A_{hn} = -\\operatorname{softplus}(\\tilde\\rho_{hn}) + i\\,\\omega_{hn},

discretised by zero-order hold with step ``Δ_h = exp(log_dt_h)``. The convolution kernel of the
recurrence ``h_l = e^{ΔA} h_{l-1} + \\bar B u_l``, ``y_l = 2 Re(C h_l)`` with
``\\bar B = (e^{ΔA} - 1)/A`` is

.. math::
    K[l] = 2\\,\\mathrm{Re} \\sum_n C_n \\frac{e^{Δ A_n} - 1}{A_n} e^{Δ A_n l},
    \\qquad l = 0, \\dots, L-1

(``docs/kernels/s4d.md``; Gu et al., "On the Parameterization and Initialization of
Diagonal State Space Models", 2022). A causal layer is ``y = K * u + D u``. The bidirectional
layer of SS-NO adds a second kernel ``K_b`` (its own ``C``, the same ``A`` and ``Δ``) over the
positions strictly after ``l``: ``y_l += Σ_{j > l} K_b[j - l - 1] u_j``, the same split as
S4's bidirectional mode, so position ``l`` itself is counted once.

Both convolutions are products of FFTs of length ``2L``: every lag lies in ``(-L, L)``, so
nothing wraps around the periodic FFT (an impulse at the last position never reaches the
first). Gradients are torch's own through ``rfft``/``irfft``.

The loop recurrence in :func:`ssmpde.kernels.reference.s4d_ref` is the oracle; the tests tie
the two together in values and every gradient.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["s4d", "s4d_convolution", "s4d_kernel", "zoh_input_factor"]

#: Below this modulus ``(e^z − 1)/z`` is summed as its Taylor series: nine terms leave an error
#: below |z|^9/10! < 3e-25 (value) and 1e-19 (derivative), under float64 rounding.
_SERIES_BELOW = 1e-2
_SERIES_TERMS = 9


def zoh_input_factor(dtA: torch.Tensor) -> torch.Tensor:
    """``(exp(z) − 1) / z = Σ_k z^k / (k + 1)!`` for complex ``z = ΔA``, accurate (and
    differentiable) near 0, where the quotient cancels."""
    small = dtA.abs() < _SERIES_BELOW
    safe = torch.where(small, torch.ones_like(dtA), dtA)
    series = torch.ones_like(dtA) / math.factorial(_SERIES_TERMS)
    for k in range(_SERIES_TERMS - 1, 0, -1):  # Horner, from the highest term down
        series = 1 / math.factorial(k) + dtA * series
    return torch.where(small, series, torch.expm1(safe) / safe)


def _state_matrix(log_dt, damping, frequency):
    """``Δ [H, 1]`` and ``A [H, N]`` (complex) from the raw parameters."""
    dt = torch.exp(log_dt).unsqueeze(-1)
    return dt, torch.complex(-F.softplus(damping), frequency)


def s4d_kernel(log_dt: torch.Tensor, damping: torch.Tensor, frequency: torch.Tensor,
               C: torch.Tensor, length: int) -> torch.Tensor:
    """Convolution kernels ``K [S, H, length]`` (real) of ``S`` output maps sharing ``A, Δ``.

    Parameters
    ----------
    log_dt : ``[H]``, ``log Δ`` per channel.
    damping, frequency : ``[H, N]``, raw damping ``ρ̃`` (``Re A = −softplus(ρ̃)``) and ``Im A``.
    C : ``[S, H, N, 2]``, real and imaginary parts of ``C`` for each of ``S`` kernels
        (``S = 2``: forward and backward of a bidirectional layer).
    length : int, number of lags ``L``.
    """
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be a positive integer, got {length!r}")
    if damping.shape != frequency.shape or damping.dim() != 2:
        raise ValueError(f"damping and frequency must both be [channels, modes]; got "
                         f"{list(damping.shape)} and {list(frequency.shape)}")
    if log_dt.shape != damping.shape[:1]:
        raise ValueError(f"log_dt must be [channels={damping.shape[0]}], got "
                         f"{list(log_dt.shape)}")
    if C.dim() != 4 or C.shape[1:] != (*damping.shape, 2):
        raise ValueError(f"C must be [kernels, channels={damping.shape[0]}, "
                         f"modes={damping.shape[1]}, 2], got {list(C.shape)}")
    dt, A = _state_matrix(log_dt, damping, frequency)
    dtA = dt * A                                                          # [H, N]
    weights = torch.view_as_complex(C.contiguous()) * (dt * zoh_input_factor(dtA))  # [S, H, N]
    # e^{ΔA l} for l = m·T + r (T ≈ √L) as e^{ΔA·mT} e^{ΔA·r}: exp, cos and sin on √L + √L
    # lags instead of L (they were most of the layer's time), and the sum over modes of
    # C̄ e^{ΔA·mT} times e^{ΔA·r} is one batched matrix product per channel. Each factor is a
    # power of e^{ΔA} with modulus ≤ 1 (Re ΔA ≤ 0), so the product loses nothing to
    # cancellation.
    step = math.isqrt(length - 1) + 1                                     # T = ⌈√L⌉
    rows = -(-length // step)                                             # M = ⌈L / T⌉
    arange = dict(device=C.device, dtype=log_dt.dtype)
    low = _powers(dtA, torch.arange(step, **arange))                      # [2, H, N, T]
    high = _powers(dtA, step * torch.arange(rows, **arange))              # [2, H, N, M]
    # C̄ e^{ΔA·mT} in real arithmetic: [S, H, N, M] real and imaginary parts
    w_re, w_im = weights.real.unsqueeze(-1), weights.imag.unsqueeze(-1)
    left = torch.cat([w_re * high[0] - w_im * high[1],
                      -(w_re * high[1] + w_im * high[0])], dim=2)         # [S, H, 2N, M]
    right = low.permute(1, 0, 2, 3).flatten(1, 2)                         # [H, 2N, T]
    kernel = 2 * torch.einsum("shnm,hnr->shmr", left, right)              # Re: [S, H, M, T]
    return kernel.flatten(2)[..., :length]


def _powers(dtA: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
    """``e^{ΔA l}`` for ``dtA [H, N]`` (complex) and real ``lags [K]``: real and imaginary
    parts ``[2, H, N, K]``, as e^{Re(ΔA) l} (cos + i sin)(Im(ΔA) l) (complex exp is several
    times slower on a CPU)."""
    decay = torch.exp(dtA.real.unsqueeze(-1) * lags)
    angle = dtA.imag.unsqueeze(-1) * lags
    return torch.stack([decay * torch.cos(angle), decay * torch.sin(angle)])


def s4d_convolution(u: torch.Tensor, kernel: torch.Tensor,
                    D: torch.Tensor | None = None) -> torch.Tensor:
    """``y = K * u (+ D u)`` along the last axis of ``u [..., H, L]``, by FFT of length 2L.

    ``kernel [1, H, L]`` is causal; ``kernel [2, H, L]`` is bidirectional (``kernel[1]`` acts
    on the strictly later positions). ``D [H]`` is the skip term.
    """
    length = u.shape[-1]
    if kernel.dim() != 3 or kernel.shape[0] not in (1, 2) or kernel.shape[1:] != u.shape[-2:]:
        raise ValueError(f"kernel must be [1 or 2, H={u.shape[-2]}, L={length}] for input "
                         f"{list(u.shape)}, got {list(kernel.shape)}")
    n = 2 * length
    if kernel.shape[0] == 1:
        k = kernel[0]
    else:
        # Lag d ∈ (−L, 0) sits at index 2L + d: K_b[m] (lag −m−1) at 2L−1−m; index L unused.
        k = torch.cat([kernel[0], kernel.new_zeros(kernel.shape[1], 1),
                       kernel[1, :, :length - 1].flip(-1)], dim=-1)
    y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n), n=n)[..., :length]
    if D is not None:
        y = y + D.unsqueeze(-1) * u
    return y


def s4d(u: torch.Tensor, log_dt: torch.Tensor, damping: torch.Tensor, frequency: torch.Tensor,
        C: torch.Tensor, D: torch.Tensor | None = None, *, backend: str = "fft") -> torch.Tensor:
    """An S4D layer on ``u [..., H, L]``: causal if ``C`` holds one kernel, bidirectional if
    two (see the module docstring). ``backend="reference"`` runs the loop recurrence."""
    if backend == "fft":
        return s4d_convolution(u, s4d_kernel(log_dt, damping, frequency, C, u.shape[-1]), D)
    if backend == "reference":
        from .reference import s4d_ref

        shape = u.shape
        y = s4d_ref(u.reshape(-1, *shape[-2:]), log_dt, damping, frequency, C, D)
        return y.reshape(shape)
    raise ValueError(f"unknown S4D backend {backend!r}; choose 'fft' or 'reference'")
