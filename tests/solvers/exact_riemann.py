"""Exact solution of the Riemann problem of the 1D Euler equations (ideal gas), after Toro,
Riemann Solvers and Numerical Methods for Fluid Dynamics, 3rd ed. (2009), chapter 4.

Written independently of ``ssmpde`` (the oracle of its Euler tests and of the Euler
benchmark): the star pressure is the root of

    f(p) = f_L(p) + f_R(p) + (u_R − u_L) = 0,

    f_K(p) = (p − p_K) √(A_K / (p + B_K))                    p > p_K  (shock),
             2 a_K / (γ − 1) [(p / p_K)^((γ−1)/(2γ)) − 1]     p ≤ p_K  (rarefaction),

A_K = 2 / ((γ + 1) ρ_K), B_K = p_K (γ − 1)/(γ + 1) (Toro eqs. 4.6–4.7), found by Newton's
method from the primitive-variable guess (eq. 4.47); u* = ½(u_L + u_R) + ½(f_R − f_L)
(eq. 4.9). The solution is sampled along x/t as in Toro §4.5 (fan, shock, contact).

States are (ρ, u, p) tuples. Example: Sod's problem,

>>> star = star_state((1.0, 0.0, 1.0), (0.125, 0.0, 0.1), 1.4)
>>> round(star.pressure, 5), round(star.velocity, 5)
(0.30313, 0.92745)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

__all__ = ["SOD_LEFT", "SOD_RIGHT", "StarState", "riemann_solution", "sample", "sod_density",
           "star_state"]

#: Sod's shock tube (Toro Table 4.1, test 1), (ρ, u, p).
SOD_LEFT, SOD_RIGHT = (1.0, 0.0, 1.0), (0.125, 0.0, 0.1)


class StarState(NamedTuple):
    """The star region between the left and right waves."""

    pressure: float
    velocity: float
    density_left: float
    density_right: float


def _pressure_function(p: float, state, gamma: float) -> tuple[float, float]:
    """f_K(p) and its derivative (Toro eqs. 4.6, 4.7, 4.37)."""
    rho, _, pk = state
    a = math.sqrt(gamma * pk / rho)
    if p > pk:  # shock
        big_a = 2.0 / ((gamma + 1.0) * rho)
        big_b = (gamma - 1.0) / (gamma + 1.0) * pk
        root = math.sqrt(big_a / (p + big_b))
        return (p - pk) * root, root * (1.0 - 0.5 * (p - pk) / (big_b + p))
    ratio = p / pk  # rarefaction
    value = 2.0 * a / (gamma - 1.0) * (ratio ** ((gamma - 1.0) / (2.0 * gamma)) - 1.0)
    return value, ratio ** (-(gamma + 1.0) / (2.0 * gamma)) / (rho * a)


def star_state(left, right, gamma: float = 1.4, *, tolerance: float = 1e-14) -> StarState:
    """Star pressure, velocity and the two star densities of a Riemann problem.

    Raises ValueError if the data generate a vacuum (Toro eq. 4.40).
    """
    rho_l, u_l, p_l = left
    rho_r, u_r, p_r = right
    a_l, a_r = math.sqrt(gamma * p_l / rho_l), math.sqrt(gamma * p_r / rho_r)
    if 2.0 * (a_l + a_r) / (gamma - 1.0) <= u_r - u_l:
        raise ValueError("the initial data generate a vacuum")
    # primitive-variable (PVRS) guess, Toro eq. 4.47, kept positive
    guess = 0.5 * (p_l + p_r) - 0.125 * (u_r - u_l) * (rho_l + rho_r) * (a_l + a_r)
    p = max(tolerance, guess)
    for _ in range(100):
        f_l, d_l = _pressure_function(p, left, gamma)
        f_r, d_r = _pressure_function(p, right, gamma)
        new = p - (f_l + f_r + u_r - u_l) / (d_l + d_r)
        new = max(new, tolerance)
        change = 2.0 * abs(new - p) / (new + p)
        p = new
        if change < tolerance:
            break
    else:
        raise RuntimeError("Newton's iteration for the star pressure did not converge")
    f_l, _ = _pressure_function(p, left, gamma)
    f_r, _ = _pressure_function(p, right, gamma)
    u = 0.5 * (u_l + u_r) + 0.5 * (f_r - f_l)
    g = (gamma - 1.0) / (gamma + 1.0)

    def star_density(state):
        rho, _, pk = state
        if p > pk:
            return rho * (p / pk + g) / (g * p / pk + 1.0)
        return rho * (p / pk) ** (1.0 / gamma)

    return StarState(p, u, star_density(left), star_density(right))


def sample(left, right, gamma: float, speed: np.ndarray) -> tuple[np.ndarray, ...]:
    """(ρ, u, p) of the self-similar solution at ``speed = (x − x0)/t`` (Toro §4.5)."""
    speed = np.asarray(speed, dtype=np.float64)
    star = star_state(left, right, gamma)
    p_s, u_s = star.pressure, star.velocity
    g1, g2 = gamma - 1.0, gamma + 1.0
    rho = np.empty_like(speed)
    u = np.empty_like(speed)
    p = np.empty_like(speed)

    def side(state, rho_star, sign, mask):
        """Fill ``mask`` on one side of the contact (sign −1 left, +1 right)."""
        rk, uk, pk = state
        ak = math.sqrt(gamma * pk / rk)
        s = speed[mask]
        out_r, out_u, out_p = np.empty_like(s), np.empty_like(s), np.empty_like(s)
        if p_s > pk:  # shock, speed from Toro eqs. 4.52 / 4.59
            shock = uk + sign * ak * math.sqrt(g2 / (2 * gamma) * p_s / pk + g1 / (2 * gamma))
            outside = sign * (s - shock) > 0
            out_r[:] = np.where(outside, rk, rho_star)
            out_u[:] = np.where(outside, uk, u_s)
            out_p[:] = np.where(outside, pk, p_s)
        else:  # rarefaction: head, tail and the fan between (Toro eqs. 4.56 / 4.63)
            a_star = ak * (p_s / pk) ** (g1 / (2 * gamma))
            head = uk + sign * ak
            tail = u_s + sign * a_star
            outside = sign * (s - head) > 0
            inside_star = sign * (s - tail) < 0
            fan = ~outside & ~inside_star
            factor = 2.0 / g2 - sign * g1 / (g2 * ak) * (uk - s[fan])
            out_r[:] = np.where(outside, rk, rho_star)
            out_u[:] = np.where(outside, uk, u_s)
            out_p[:] = np.where(outside, pk, p_s)
            out_r[fan] = rk * factor ** (2.0 / g1)
            out_u[fan] = 2.0 / g2 * (-sign * ak + g1 / 2.0 * uk + s[fan])
            out_p[fan] = pk * factor ** (2.0 * gamma / g1)
        rho[mask], u[mask], p[mask] = out_r, out_u, out_p

    left_of_contact = speed <= u_s
    side(left, star.density_left, -1.0, left_of_contact)
    side(right, star.density_right, 1.0, ~left_of_contact)
    return rho, u, p


def riemann_solution(x: np.ndarray, time: float, left, right, gamma: float = 1.4,
                     x0: float = 0.5) -> tuple[np.ndarray, ...]:
    """(ρ, u, p) at positions ``x`` and ``time`` > 0 for the jump at ``x0``."""
    return sample(left, right, gamma, (np.asarray(x, dtype=np.float64) - x0) / time)


def sod_density(x: np.ndarray, time: float) -> np.ndarray:
    """Exact density of Sod's problem (γ = 1.4, jump at x = ½) at ``x`` and ``time``."""
    return riemann_solution(x, time, SOD_LEFT, SOD_RIGHT, 1.4)[0]
