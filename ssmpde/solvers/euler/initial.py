r"""Initial states of the 2D Euler problems: CE-RM, GCE-RT, the Riemann presets and
Kelvin–Helmholtz, as point values at the cell centres. See ``docs/numerics/euler.md``.
"""

from __future__ import annotations

import math

import numpy as np

#: CE-RM interface amplitude ε (Poseidon does not give it; our reading, see
#: :func:`ce_rm_state`).
CE_RM_EPSILON = 0.06
#: Gravitational constant of GCE-RT (non-dimensional, Poseidon App. B.2.9).
GRAVITATIONAL_CONSTANT = 1.0


def ce_rm_state(x: np.ndarray, y: np.ndarray, amplitudes: np.ndarray, phases: np.ndarray, *,
                epsilon: float = CE_RM_EPSILON) -> np.ndarray:
    r"""CE-RM-like Richtmyer–Meshkov initial state (Poseidon App. B.2.8, one reading of it).

    With r, θ the polar coordinates about the domain centre (½, ½),

    .. math::
        R(\theta) = 0.25 + \varepsilon \sum_{j=1}^{10} a_j \sin(j\theta + 2\pi b_j),\quad
        \rho = \begin{cases} 2 & r < R(\theta) \\ 1 & \text{else}\end{cases},\quad
        p = \begin{cases} 20 & r < 0.1 \\ 1 & \text{else}\end{cases},\quad u = v = 0,

    tracer c = 1 where r < R(θ), else 0; a_j, b_j ~ U[0, 1] with the a_j normalised to
    Σ a_j = 1 and ε = 0.06, so R ∈ [0.19, 0.31]: the interface keeps clear of the blast
    (r < 0.1) and of the domain edge.

    Parameters
    ----------
    x, y : arrays (broadcasting to ``[ny, nx]``)
        Cell centres in [0, 1].
    amplitudes, phases : arrays ``[10]``
        a_j (normalised here) and b_j.
    epsilon : float

    Returns
    -------
    numpy.ndarray ``[5, ny, nx]``: (ρ, u, v, p, c).
    """
    a = np.asarray(amplitudes, dtype=np.float64)
    a = a / a.sum()
    dx, dy = x - 0.5, y - 0.5
    radius, angle = np.hypot(dx, dy), np.arctan2(dy, dx)
    j = np.arange(1, len(a) + 1)
    interface = 0.25 + epsilon * np.tensordot(
        a, np.sin(j[:, None, None] * angle[None] + 2 * np.pi * np.asarray(phases)[:, None, None]),
        axes=1)
    inside = radius < interface
    state = np.zeros((5, *radius.shape))
    state[0] = np.where(inside, 2.0, 1.0)
    state[3] = np.where(radius < 0.1, 20.0, 1.0)
    state[4] = inside
    return state


def gce_rt_state(x: np.ndarray, y: np.ndarray, *, rho0: float, p0: float, atwood: float,
                 a: float, b: float,
                 gravitational_constant: float = GRAVITATIONAL_CONSTANT
                 ) -> tuple[np.ndarray, np.ndarray]:
    r"""GCE-RT initial state and potential (Poseidon App. B.2.9; Käppeli & Mishra §3.2.4).

    On D = [−½, ½]² with r = √(x² + y²), K₀ = p₀/ρ₀², α = √(4πG / (2K₀)),
    s(r) = sin(αr)/(αr):

    .. math::
        p = K_0 (\rho_0 s)^2,\quad \phi = -2 K_0 \rho_0 s,\quad
        \rho = \sqrt{K_0 / \tilde K}\, \rho_0 s,\quad
        \tilde K = \begin{cases} K_0 & r < r_{RT} \\ \left(\frac{1-A}{1+A}\right)^2 K_0
        & \text{else}\end{cases},\quad r_{RT} = 0.25\,(1 + a \cos(\operatorname{atan2}(y, x)
        + b)),

    u = v = 0, tracer c = 1 where r < r_RT. The pressure is continuous (p = K̃ρ² is the same
    on both sides); inside, 2K₀ρ + φ = 0, the γ = 2 polytrope in hydrostatic equilibrium.
    Outside, ρ is (1 + A)/(1 − A) times the equilibrium density at the same pressure: the
    heavier gas lies above (gravity points to the centre) and is not in equilibrium; that is
    the Rayleigh–Taylor perturbation. With A = 0 the whole state is the equilibrium. The
    formula is used up to the corners (r ≤ √2/2, where s ≈ 0.55 > 0).

    Returns
    -------
    (numpy.ndarray ``[5, ny, nx]``, numpy.ndarray ``[ny, nx]``): primitive state and φ.
    """
    k0 = p0 / rho0 ** 2
    alpha = math.sqrt(4 * math.pi * gravitational_constant / (2 * k0))
    radius = np.hypot(x, y)
    s = np.sinc(alpha * radius / np.pi)  # numpy's sinc is sin(πz)/(πz)
    interface = 0.25 * (1 + a * np.cos(np.arctan2(y, x) + b))
    inside = radius < interface
    k_ratio = np.where(inside, 1.0, ((1 - atwood) / (1 + atwood)) ** 2)  # K̃ / K₀
    state = np.zeros((5, *radius.shape))
    state[0] = np.sqrt(1.0 / k_ratio) * rho0 * s
    state[3] = k0 * (rho0 * s) ** 2
    state[4] = inside
    return state, -2 * k0 * rho0 * s


def _riemann_state(shape: tuple[int, int], coordinate: np.ndarray, left, right,
                   axis: str) -> np.ndarray:
    """A Riemann problem at ½ along ``axis``: (ρ, u_n, p) on each side, tracer 1 left."""
    is_left = coordinate < 0.5
    state = np.zeros((5, *shape))
    normal = 1 if axis == "x" else 2
    for field, k in ((0, 0), (normal, 1), (3, 2)):
        state[field] = np.where(is_left, left[k], right[k])
    state[4] = is_left
    return state


#: (ρ, u, p) left | right of the 1D Riemann presets (Toro, Table 4.1 and §4.3.3).
RIEMANN_PROBLEMS = {
    "sod-x": ((1.0, 0.0, 1.0), (0.125, 0.0, 0.1), "x"),
    "sod-y": ((1.0, 0.0, 1.0), (0.125, 0.0, 0.1), "y"),
    "lax": ((0.445, 0.698, 3.528), (0.5, 0.0, 0.571), "x"),
    "toro-123": ((1.0, -2.0, 0.4), (1.0, 2.0, 0.4), "x"),
}


def kelvin_helmholtz_state(x: np.ndarray, y: np.ndarray, amplitudes: np.ndarray,
                           phases: np.ndarray) -> np.ndarray:
    r"""Kelvin–Helmholtz: McNally et al. (2012) smoothed shear layers with a seeded kick.

    ρ = 2, u = ½ in the band ¼ < y < ¾, ρ = 1, u = −½ outside, joined by exponential
    profiles of width L = 0.025 (McNally et al., eq. 1, with these velocities);
    p = 2.5; v = 0.01 Σ_{k=1}^{4} a_k sin(2π k (x + b_k)) with a_k, b_k ~ U[0, 1],
    Σ a_k = 1 (McNally's kick is the single mode sin 4πx). Tracer: the fraction of the
    band's gas, (ρ − 1) / (2 − 1).
    """
    width = 0.025
    inner, outer = (2.0, 0.5), (1.0, -0.5)
    distance = np.where(y < 0.5, y - 0.25, 0.75 - y)  # into the band from its nearer edge
    blend = np.where(distance >= 0, -np.exp(-distance / width), np.exp(distance / width))
    state = np.zeros((5, *np.broadcast_shapes(np.shape(x), np.shape(y))))
    for field, k in ((0, 0), (1, 1)):
        half = 0.5 * (outer[k] - inner[k])
        state[field] = np.where(distance >= 0, inner[k], outer[k]) - half * blend
    a = np.asarray(amplitudes, dtype=np.float64)
    a = a / a.sum()
    k = np.arange(1, len(a) + 1)
    state[2] = 0.01 * np.tensordot(
        a, np.sin(2 * np.pi * k[:, None, None] * (x + np.asarray(phases)[:, None, None])),
        axes=1)
    state[3] = 2.5
    state[4] = state[0] - 1.0
    return state
