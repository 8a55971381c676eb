r"""2D compressible Euler equations: MUSCL-Hancock finite volumes with HLLC fluxes (numba).

See ``shared/specs/solvers.md``, section "2D compressible Euler": the Poseidon CE-RM
(Richtmyer–Meshkov) and GCE-RT (gravitational Rayleigh–Taylor) data, and the classic checks
(Sod along x and y, Lax, Toro's 123 problem, Kelvin–Helmholtz).

.. math::

    \partial_t U + \partial_x F(U) + \partial_y G(U) = S(U),\qquad
    U = (\rho,\ \rho u,\ \rho v,\ E,\ \rho c),\qquad
    E = \tfrac12 \rho (u^2 + v^2) + \frac{p}{\gamma - 1},

    F = (\rho u,\ \rho u^2 + p,\ \rho u v,\ u (E + p),\ \rho u c),\quad
    G = (\rho v,\ \rho u v,\ \rho v^2 + p,\ v (E + p),\ \rho v c),\quad
    S = (0,\ -\rho \partial_x \phi,\ -\rho \partial_y \phi,\ -\rho\, u \cdot \nabla \phi,\ 0),

with a static potential φ(x, y) (optional) and a passive tracer c.

Layout: primitive states are ``[batch, 5, ny, nx]`` float64 with fields (ρ, u, v, p, c) on the
cell centres ``x_i = (i + ½) Δx``, ``y_j = (j + ½) Δy`` (the arrays are ``[..., y, x]``).
:func:`integrate` is the low-level entry point (the benchmark's); :class:`Euler2D` is the
registered solver (datasets, the Stepper protocol); :func:`reference_step` is one step in plain
NumPy, the test oracle of the numba kernel.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numba
import numpy as np
import xarray as xr

from .. import data
from ..core import unknown_name
from .base import (
    Checks,
    SolverDivergedError,
    TimeDependentSolver,
    VariableSpec,
    positive_finite,
    register_solver,
    whole_multiple,
)
from .random_fields import sample_rng

__all__ = [
    "BOUNDARIES",
    "LIMITERS",
    "PROBLEMS",
    "RIEMANN_PROBLEMS",
    "Euler2D",
    "EulerConfig",
    "ce_rm_state",
    "conserved_totals",
    "fast_step",
    "gce_rt_state",
    "integrate",
    "kelvin_helmholtz_state",
    "reference_step",
]

#: Boundary kinds: periodic; outflow (transmissive, zero-gradient ghost cells); reflective
#: (a wall: ghost cells mirror the normal velocity).
BOUNDARIES = ("periodic", "outflow", "reflective")
#: Slope limiters of the primitive-variable reconstruction.
LIMITERS = ("mc", "minmod")
#: Initial-condition families (each is also a preset of :class:`Euler2D`).
PROBLEMS = ("ce-rm", "gce-rt", "sod-x", "sod-y", "lax", "toro-123", "kelvin-helmholtz")
#: Field order of primitive states (and of conserved states: ρ, ρu, ρv, E, ρc).
FIELDS = ("density", "velocity_x", "velocity_y", "pressure", "tracer")
#: Largest grid side accepted (one 16384² sample's three state buffers are already 32 GB).
MAX_RESOLUTION = 2 ** 14
#: A step shorter than this fraction of the interval means the solution has collapsed.
MIN_STEP_FRACTION = 1e-12
#: CE-RM interface amplitude ε (the spec's reading, see :func:`ce_rm_state`).
CE_RM_EPSILON = 0.06
#: Gravitational constant of GCE-RT (non-dimensional, Poseidon App. B.2.9).
GRAVITATIONAL_CONSTANT = 1.0

_BOUNDARY_CODES = {name: code for code, name in enumerate(BOUNDARIES)}
_PERIODIC, _OUTFLOW, _REFLECTIVE = 0, 1, 2
# Slots of a block's scratch buffer (rows of ``[slots, nx + 1]``): face states of the row
# being reconstructed (x-left, x-right, y-bottom), two rolling rows of y-top states, flux
# accumulators and momentum sources (parity of the row), and the x-fluxes of one row.
_XL, _XR, _YB, _YT, _ACC, _SRC, _FX = 0, 5, 10, 15, 25, 35, 39
_SLOTS = 44


# =========================================================================================
# numba kernels
# =========================================================================================
_JIT = dict(cache=True, error_model="numpy")


@numba.njit(**_JIT)
def _limit(forward, backward, mc):  # pragma: no cover (compiled)
    """Limited slope from a forward and a backward difference (Toro §13.7, §14.4).

    MC: minmod(½(a + b), 2a, 2b) (van Leer's monotonised central); minmod: the smaller one;
    zero at an extremum (a·b <= 0).
    """
    if forward * backward <= 0.0:
        return 0.0
    if mc:
        central = 0.5 * (forward + backward)
        bound = 2.0 * min(abs(forward), abs(backward))
        return central if abs(central) <= bound else math.copysign(bound, forward)
    return forward if abs(forward) < abs(backward) else backward


@numba.njit(**_JIT)
def _power(base, exponent):  # pragma: no cover (compiled)
    """``base ** exponent`` with the polytropic γ = 2 exponents (1, 2) spelled out."""
    if exponent == 1.0:
        return base
    if exponent == 2.0:
        return base * base
    return base ** exponent


@numba.njit(**_JIT)
def _hllc(rl, ul, vl, pl, cl, rr, ur, vr, pr, cr, gamma):  # pragma: no cover (compiled)
    """HLLC flux normal to a face (Toro §10.4–10.6), Davis wave-speed estimates.

    ``u`` is the normal and ``v`` the tangential velocity; returns the fluxes of
    (ρ, ρu, ρv, E, ρc). S_L = min(u_L − a_L, u_R − a_R), S_R = max(u_L + a_L, u_R + a_R)
    (Davis 1988, Toro eq. 10.48); S* from Toro eq. 10.37. In the star regions the flux is
    the physical flux of the star state, F*_K = S* U*_K + p* (0, 1, 0, S*, 0) with
    p* = p_K + ρ_K (S_K − u_K)(S* − u_K) and U*_K of Toro eq. 10.39 (equal to
    F_K + S_K (U*_K − U_K) in exact arithmetic). Written so that mirrored states give exactly
    mirrored fluxes (the mirror symmetry of the scheme holds to the bit), and a stationary
    contact (u = 0, equal p) exactly zero mass flux.
    """
    g1 = gamma - 1.0
    al = math.sqrt(gamma * pl / rl)
    ar = math.sqrt(gamma * pr / rr)
    sl = min(ul - al, ur - ar)
    sr = max(ul + al, ur + ar)
    if sl >= 0.0:
        m = rl * ul
        e = pl / g1 + 0.5 * rl * (ul * ul + vl * vl)
        return m, m * ul + pl, m * vl, ul * (e + pl), m * cl
    if sr <= 0.0:
        m = rr * ur
        e = pr / g1 + 0.5 * rr * (ur * ur + vr * vr)
        return m, m * ur + pr, m * vr, ur * (e + pr), m * cr
    ml = rl * (sl - ul)  # < 0: the mass flux through the left wave, in its frame
    mr = rr * (sr - ur)  # > 0
    star = ((pr - pl) + (ul * ml - ur * mr)) / (ml - mr)
    if star >= 0.0:
        r, u, v, p, c, m_rel, s = rl, ul, vl, pl, cl, ml, sl
    else:
        r, u, v, p, c, m_rel, s = rr, ur, vr, pr, cr, mr, sr
    density = m_rel / (s - star)  # ρ*_K
    pressure = p + m_rel * (star - u)  # p*
    energy = density * ((p / g1 + 0.5 * r * (u * u + v * v)) / r
                        + (star - u) * (star + p / m_rel))
    m = density * star
    return m, m * star + pressure, m * v, star * (energy + pressure), m * c


@numba.njit(**_JIT)
def _reconstruct_row(W, phi, gravity, b, pb, j, bx, by, mc, gamma, lx, ly, buf,
                     top):  # pragma: no cover (compiled)
    """Half-step face states of row ``j`` of sample ``b`` into ``buf``; see
    :func:`reference_step` for the equations (this is the same arithmetic, cell by cell).

    Writes the x-left, x-right and y-bottom states to slots ``_XL``, ``_XR``, ``_YB``, the
    y-top states to ``top`` (a rolling slot) and the momentum sources Δt S to ``top``'s
    partner slots ``_SRC``.
    """
    ny, nx = W.shape[2], W.shape[3]
    g1 = gamma - 1.0
    e_rho = 1.0 / g1
    e_p = gamma / g1
    src = _SRC + 2 * ((top - _YT) // 5)
    # Row neighbours; a ghost row (non-periodic edge) copies row j (mirrored v if reflective).
    ghost_s = j == 0 and by != _PERIODIC
    ghost_n = j == ny - 1 and by != _PERIODIC
    js = j - 1 if j > 0 else (ny - 1 if by == _PERIODIC else j)
    jn = j + 1 if j < ny - 1 else (0 if by == _PERIODIC else j)
    flip_y = -1.0 if by == _REFLECTIVE else 1.0
    flip_x = -1.0 if bx == _REFLECTIVE else 1.0
    for i in range(nx):
        ghost_w = i == 0 and bx != _PERIODIC
        ghost_e = i == nx - 1 and bx != _PERIODIC
        iw = i - 1 if i > 0 else (nx - 1 if bx == _PERIODIC else i)
        ie = i + 1 if i < nx - 1 else (0 if bx == _PERIODIC else i)
        r = W[b, 0, j, i]
        u = W[b, 1, j, i]
        v = W[b, 2, j, i]
        p = W[b, 3, j, i]
        c = W[b, 4, j, i]
        # velocity and tracer differences (forward, backward); ghosts copy or mirror
        u_e = W[b, 1, j, ie] * (flip_x if ghost_e else 1.0)
        u_w = W[b, 1, j, iw] * (flip_x if ghost_w else 1.0)
        dux = _limit(u_e - u, u - u_w, mc)
        dvx = _limit(W[b, 2, j, ie] - v, v - W[b, 2, j, iw], mc)
        dcx = _limit(W[b, 4, j, ie] - c, c - W[b, 4, j, iw], mc)
        v_n = W[b, 2, jn, i] * (flip_y if ghost_n else 1.0)
        v_s = W[b, 2, js, i] * (flip_y if ghost_s else 1.0)
        duy = _limit(W[b, 1, jn, i] - u, u - W[b, 1, js, i], mc)
        dvy = _limit(v_n - v, v - v_s, mc)
        dcy = _limit(W[b, 4, jn, i] - c, c - W[b, 4, js, i], mc)
        f = f_e = f_w = f_n = f_s = 0.0
        q_e = q_w = q_n = q_s = q_xp = q_xm = q_yp = q_ym = 1.0
        if gravity:
            # Käppeli & Mishra (2014): the local isentropic equilibrium through the cell,
            # h + φ = const with h = γ p / ((γ − 1) ρ), p ∝ ρ^γ, extrapolated with φ.
            f = phi[pb, j, i]
            f_e = phi[pb, j, ie] if not ghost_e else 2.0 * f - phi[pb, j, max(i - 1, 0)]
            f_w = phi[pb, j, iw] if not ghost_w else 2.0 * f - phi[pb, j, min(i + 1, nx - 1)]
            f_n = phi[pb, jn, i] if not ghost_n else 2.0 * f - phi[pb, max(j - 1, 0), i]
            f_s = phi[pb, js, i] if not ghost_s else 2.0 * f - phi[pb, min(j + 1, ny - 1), i]
            inv_h = g1 / (gamma * p / r)
            q_e = 1.0 - (f_e - f) * inv_h
            q_w = 1.0 - (f_w - f) * inv_h
            q_n = 1.0 - (f_n - f) * inv_h
            q_s = 1.0 - (f_s - f) * inv_h
            q_xp = 1.0 - 0.5 * (f_e - f) * inv_h
            q_xm = 1.0 - 0.5 * (f_w - f) * inv_h
            q_yp = 1.0 - 0.5 * (f_n - f) * inv_h
            q_ym = 1.0 - 0.5 * (f_s - f) * inv_h
            balanced = min(min(q_e, q_w), min(q_n, q_s)) > 0.0
        else:
            balanced = False
        if balanced:
            # perturbations δ = W_neighbour − W_eq(φ_neighbour), zero at ghosts (hydrostatic)
            r_xp = r * _power(q_xp, e_rho)
            r_xm = r * _power(q_xm, e_rho)
            r_yp = r * _power(q_yp, e_rho)
            r_ym = r * _power(q_ym, e_rho)
            p_xp = p * _power(q_xp, e_p)
            p_xm = p * _power(q_xm, e_p)
            p_yp = p * _power(q_yp, e_p)
            p_ym = p * _power(q_ym, e_p)
            fr_e = 0.0 if ghost_e else W[b, 0, j, ie] - r * _power(q_e, e_rho)
            fr_w = 0.0 if ghost_w else r * _power(q_w, e_rho) - W[b, 0, j, iw]
            fr_n = 0.0 if ghost_n else W[b, 0, jn, i] - r * _power(q_n, e_rho)
            fr_s = 0.0 if ghost_s else r * _power(q_s, e_rho) - W[b, 0, js, i]
            fp_e = 0.0 if ghost_e else W[b, 3, j, ie] - p * _power(q_e, e_p)
            fp_w = 0.0 if ghost_w else p * _power(q_w, e_p) - W[b, 3, j, iw]
            fp_n = 0.0 if ghost_n else W[b, 3, jn, i] - p * _power(q_n, e_p)
            fp_s = 0.0 if ghost_s else p * _power(q_s, e_p) - W[b, 3, js, i]
        else:
            r_xp = r_xm = r_yp = r_ym = r
            p_xp = p_xm = p_yp = p_ym = p
            fr_e = W[b, 0, j, ie] - r
            fr_w = r - W[b, 0, j, iw]
            fr_n = W[b, 0, jn, i] - r
            fr_s = r - W[b, 0, js, i]
            fp_e = W[b, 3, j, ie] - p
            fp_w = p - W[b, 3, j, iw]
            fp_n = W[b, 3, jn, i] - p
            fp_s = p - W[b, 3, js, i]
        drx = _limit(fr_e, fr_w, mc)
        dry = _limit(fr_n, fr_s, mc)
        dpx = _limit(fp_e, fp_w, mc)
        dpy = _limit(fp_n, fp_s, mc)
        # Hancock predictor (Toro §14.4.2) on the primitive variables: the equilibrium part
        # of ∇p balances gravity exactly, so only the perturbation slope accelerates.
        full_rx = drx + (r_xp - r_xm)
        full_ry = dry + (r_yp - r_ym)
        full_px = dpx + (p_xp - p_xm)
        full_py = dpy + (p_yp - p_ym)
        ht = -0.5
        d_r = ht * (lx * (u * full_rx + r * dux) + ly * (v * full_ry + r * dvy))
        d_u = ht * (lx * (u * dux + dpx / r) + ly * v * duy)
        d_v = ht * (lx * u * dvx + ly * (v * dvy + dpy / r))
        d_p = ht * (lx * (u * full_px + gamma * p * dux) + ly * (v * full_py + gamma * p * dvy))
        d_c = ht * (lx * u * dcx + ly * v * dcy)
        rl = r_xm + d_r - 0.5 * drx
        rr = r_xp + d_r + 0.5 * drx
        rb = r_ym + d_r - 0.5 * dry
        rt = r_yp + d_r + 0.5 * dry
        pl = p_xm + d_p - 0.5 * dpx
        pr = p_xp + d_p + 0.5 * dpx
        pb_ = p_ym + d_p - 0.5 * dpy
        pt = p_yp + d_p + 0.5 * dpy
        scale = (r + d_r) / r
        if min(min(min(rl, rr), min(rb, rt)), min(min(pl, pr), min(pb_, pt))) <= 0.0:
            # first-order fallback (Toro §14.4: positivity), still hydrostatic if possible
            rl, rr, rb, rt = r_xm, r_xp, r_ym, r_yp
            pl, pr, pb_, pt = p_xm, p_xp, p_ym, p_yp
            d_u = d_v = d_c = 0.0
            dux = dvx = dcx = duy = dvy = dcy = 0.0
            scale = 1.0
        buf[_XL, i] = rl
        buf[_XR, i] = rr
        buf[_YB, i] = rb
        buf[top, i] = rt
        buf[_XL + 3, i] = pl
        buf[_XR + 3, i] = pr
        buf[_YB + 3, i] = pb_
        buf[top + 3, i] = pt
        uh = u + d_u
        vh = v + d_v
        ch = c + d_c
        buf[_XL + 1, i] = uh - 0.5 * dux
        buf[_XR + 1, i] = uh + 0.5 * dux
        buf[_YB + 1, i] = uh - 0.5 * duy
        buf[top + 1, i] = uh + 0.5 * duy
        buf[_XL + 2, i] = vh - 0.5 * dvx
        buf[_XR + 2, i] = vh + 0.5 * dvx
        buf[_YB + 2, i] = vh - 0.5 * dvy
        buf[top + 2, i] = vh + 0.5 * dvy
        buf[_XL + 4, i] = ch - 0.5 * dcx
        buf[_XR + 4, i] = ch + 0.5 * dcx
        buf[_YB + 4, i] = ch - 0.5 * dcy
        buf[top + 4, i] = ch + 0.5 * dcy
        if gravity:
            if balanced:
                # well-balanced source Δt ∂p_eq/∂x = −Δt ρ ∂φ/∂x at the half-step density
                buf[src, i] = scale * lx * (p_xp - p_xm)
                buf[src + 1, i] = scale * ly * (p_yp - p_ym)
            else:  # the equilibrium cannot be extrapolated (h + Δφ <= 0): plain centred
                buf[src, i] = -scale * r * lx * 0.5 * (f_e - f_w)
                buf[src + 1, i] = -scale * r * ly * 0.5 * (f_n - f_s)


@numba.njit(**_JIT)
def _finish_row(U, Wnew, b, j, gamma, dx, dy, buf, acc, src, gravity, speed,
                bad):  # pragma: no cover (compiled)
    """U += accumulated flux differences and sources; new primitives, CFL speed, checks."""
    nx = U.shape[3]
    g1 = gamma - 1.0
    fastest = 0.0
    failed = 0
    for i in range(nx):
        m0 = U[b, 0, j, i] + buf[acc, i]
        m1 = U[b, 1, j, i] + buf[acc + 1, i]
        m2 = U[b, 2, j, i] + buf[acc + 2, i]
        m3 = U[b, 3, j, i] + buf[acc + 3, i]
        m4 = U[b, 4, j, i] + buf[acc + 4, i]
        if gravity:
            m1 += buf[src, i]
            m2 += buf[src + 1, i]
        U[b, 0, j, i] = m0
        U[b, 1, j, i] = m1
        U[b, 2, j, i] = m2
        U[b, 3, j, i] = m3
        U[b, 4, j, i] = m4
        u = m1 / m0
        v = m2 / m0
        p = g1 * (m3 - 0.5 * (m1 * u + m2 * v))
        Wnew[b, 0, j, i] = m0
        Wnew[b, 1, j, i] = u
        Wnew[b, 2, j, i] = v
        Wnew[b, 3, j, i] = p
        Wnew[b, 4, j, i] = m4 / m0
        a = math.sqrt(gamma * p / m0)
        s = max((abs(u) + a) / dx, (abs(v) + a) / dy)
        if not (m0 > 0.0 and p > 0.0 and s < math.inf):  # NaN fails every comparison
            failed = 1
        elif s > fastest:
            fastest = s
    speed[b, j] = fastest
    bad[b, j] = failed


@numba.njit(**_JIT)
def _x_fluxes(W, phi, gravity, b, pb, j, bx, gamma, lx, buf, acc):  # pragma: no cover
    """HLLC fluxes through the x-faces of row ``j``; ``buf[acc]`` =
    −Δt/Δx (F_{i+½} − F_{i−½}) plus the face-centred energy source of gravity."""
    nx = W.shape[3]
    flip = -1.0 if bx == _REFLECTIVE else 1.0
    for face in range(nx + 1):
        # face i − ½ between cells i − 1 (its x-right state) and i (its x-left state)
        if face == nx and bx == _PERIODIC:
            for k in range(5):
                buf[_FX + k, nx] = buf[_FX + k, 0]
            continue
        if face == 0:
            rr, ur, vr, pr, cr = (buf[_XL, 0], buf[_XL + 1, 0], buf[_XL + 2, 0],
                                  buf[_XL + 3, 0], buf[_XL + 4, 0])
            if bx == _PERIODIC:
                n = nx - 1
                rl, ul, vl, pl, cl = (buf[_XR, n], buf[_XR + 1, n], buf[_XR + 2, n],
                                      buf[_XR + 3, n], buf[_XR + 4, n])
            else:  # the ghost's face state mirrors (wall) or copies (outflow) the inner one
                rl, ul, vl, pl, cl = rr, flip * ur, vr, pr, cr
        elif face == nx:
            n = nx - 1
            rl, ul, vl, pl, cl = (buf[_XR, n], buf[_XR + 1, n], buf[_XR + 2, n],
                                  buf[_XR + 3, n], buf[_XR + 4, n])
            rr, ur, vr, pr, cr = rl, flip * ul, vl, pl, cl
        else:
            n = face - 1
            rl, ul, vl, pl, cl = (buf[_XR, n], buf[_XR + 1, n], buf[_XR + 2, n],
                                  buf[_XR + 3, n], buf[_XR + 4, n])
            rr, ur, vr, pr, cr = (buf[_XL, face], buf[_XL + 1, face], buf[_XL + 2, face],
                                  buf[_XL + 3, face], buf[_XL + 4, face])
        f0, f1, f2, f3, f4 = _hllc(rl, ul, vl, pl, cl, rr, ur, vr, pr, cr, gamma)
        buf[_FX, face] = f0
        buf[_FX + 1, face] = f1
        buf[_FX + 2, face] = f2
        buf[_FX + 3, face] = f3
        buf[_FX + 4, face] = f4
    for i in range(nx):
        for k in range(5):
            buf[acc + k, i] = -lx * (buf[_FX + k, i + 1] - buf[_FX + k, i])
    if gravity:
        # −ρ u ∂xφ as Σ_faces ½ F_ρ Δφ / Δx: the total E + ρφ is conserved exactly
        for i in range(nx):
            f = phi[pb, j, i]
            if i > 0 or bx == _PERIODIC:
                west = phi[pb, j, i - 1 if i > 0 else nx - 1]
                buf[acc + 3, i] -= 0.5 * lx * buf[_FX, i] * (f - west)
            if i < nx - 1 or bx == _PERIODIC:
                east = phi[pb, j, i + 1 if i < nx - 1 else 0]
                buf[acc + 3, i] -= 0.5 * lx * buf[_FX, i + 1] * (east - f)


@numba.njit(**_JIT)
def _y_face(phi, gravity, b, pb, j_south, j_north, boundary, flip, gamma, ly, buf, south,
            north, acc_south, acc_north):  # pragma: no cover (compiled)
    """HLLC fluxes through the y-faces between the row whose top states are ``buf[south]``
    and the row whose bottom states are ``buf[north]``; −Δt/Δy G into the north row's
    accumulator, +Δt/Δy G into the south row's (``acc_* < 0``: that row is not ours).

    ``boundary`` 0: interior (or periodic) face; 1: the domain's bottom edge (the south
    state is the ghost of ``north``); 2: the top edge (the north state is the ghost). A
    ghost mirrors v (``flip = −1``, a wall) or copies it (outflow)."""
    nx = buf.shape[1] - 1
    for i in range(nx):
        if boundary == 1:
            rr, ur, vr, pr, cr = (buf[north, i], buf[north + 1, i], buf[north + 2, i],
                                  buf[north + 3, i], buf[north + 4, i])
            rl, ul, vl, pl, cl = rr, ur, flip * vr, pr, cr
        elif boundary == 2:
            rl, ul, vl, pl, cl = (buf[south, i], buf[south + 1, i], buf[south + 2, i],
                                  buf[south + 3, i], buf[south + 4, i])
            rr, ur, vr, pr, cr = rl, ul, flip * vl, pl, cl
        else:
            rl, ul, vl, pl, cl = (buf[south, i], buf[south + 1, i], buf[south + 2, i],
                                  buf[south + 3, i], buf[south + 4, i])
            rr, ur, vr, pr, cr = (buf[north, i], buf[north + 1, i], buf[north + 2, i],
                                  buf[north + 3, i], buf[north + 4, i])
        # normal velocity v first: the y-flux is the x-flux with u and v exchanged
        g0, g2, g1, g3, g4 = _hllc(rl, vl, ul, pl, cl, rr, vr, ur, pr, cr, gamma)
        work = 0.0
        if gravity and boundary == 0:
            work = 0.5 * ly * g0 * (phi[pb, j_north, i] - phi[pb, j_south, i])
        if acc_south >= 0:
            buf[acc_south, i] -= ly * g0
            buf[acc_south + 1, i] -= ly * g1
            buf[acc_south + 2, i] -= ly * g2
            buf[acc_south + 3, i] -= ly * g3 + work
            buf[acc_south + 4, i] -= ly * g4
        if acc_north >= 0:
            buf[acc_north, i] += ly * g0
            buf[acc_north + 1, i] += ly * g1
            buf[acc_north + 2, i] += ly * g2
            buf[acc_north + 3, i] += ly * g3 - work
            buf[acc_north + 4, i] += ly * g4


def _step(U, W, Wnew, phi, gravity, dts, active, bx, by, mc, gamma, dx, dy, rows, scratch,
          speed, bad):  # pragma: no cover (compiled)
    """One MUSCL-Hancock step of every active sample, fused: reconstruction, half step,
    HLLC fluxes, update, new primitives and CFL speeds in one pass over each block of rows.

    Blocks of ``rows`` rows run in parallel (prange over batch × blocks); inside a block the
    rows are swept bottom to top with the y-top states of the previous row kept in a rolling
    slot, so every face flux is computed once (twice only at block edges). The result does
    not depend on ``rows`` or on the thread count: each cell sums its flux differences in
    the same order whatever the block.
    """
    batch, ny = U.shape[0], U.shape[2]
    blocks = (ny + rows - 1) // rows
    shared = phi.shape[0] == 1
    flip = -1.0 if by == _REFLECTIVE else 1.0
    for task in numba.prange(batch * blocks):
        b = task // blocks
        start = (task % blocks) * rows
        stop = min(ny, start + rows)
        if not active[b]:
            for j in range(start, stop):
                Wnew[b, :, j, :] = W[b, :, j, :]
            continue
        buf = scratch[task]
        pb = 0 if shared else b
        lx = dts[b] / dx
        ly = dts[b] / dy
        parity = 0
        south_ghost = start == 0 and by != _PERIODIC
        if not south_ghost:  # the top states of the row below the block
            below = start - 1 if start > 0 else ny - 1
            _reconstruct_row(W, phi, gravity, b, pb, below, bx, by, mc, gamma, lx, ly, buf,
                             _YT + 5)
        for j in range(start, stop):
            top = _YT + 5 * parity
            acc = _ACC + 5 * parity
            _reconstruct_row(W, phi, gravity, b, pb, j, bx, by, mc, gamma, lx, ly, buf, top)
            _x_fluxes(W, phi, gravity, b, pb, j, bx, gamma, lx, buf, acc)
            previous = _YT + 5 * (1 - parity)
            acc_previous = _ACC + 5 * (1 - parity) if j > start else -1
            if j == start and south_ghost:
                _y_face(phi, gravity, b, pb, -1, j, 1, flip, gamma, ly, buf, previous, _YB,
                        -1, acc)
            else:
                south = j - 1 if j > 0 else ny - 1
                _y_face(phi, gravity, b, pb, south, j, 0, flip, gamma, ly, buf, previous,
                        _YB, acc_previous, acc)
            if j > start:
                _finish_row(U, Wnew, b, j - 1, gamma, dx, dy, buf, acc_previous,
                            _SRC + 2 * (1 - parity), gravity, speed, bad)
            parity = 1 - parity
        last = stop - 1
        top = _YT + 5 * (1 - parity)
        acc = _ACC + 5 * (1 - parity)
        if stop == ny and by != _PERIODIC:
            _y_face(phi, gravity, b, pb, -1, last, 2, flip, gamma, ly, buf, top, _YB, acc,
                    -1)
        else:
            # the bottom states of the row above the block (its top states go to a free
            # slot: ours stay in ``top``)
            above = stop if stop < ny else 0
            _reconstruct_row(W, phi, gravity, b, pb, above, bx, by, mc, gamma, lx, ly, buf,
                             _YT + 5 * parity)
            _y_face(phi, gravity, b, pb, last, above, 0, flip, gamma, ly, buf, top, _YB,
                    acc, -1)
        _finish_row(U, Wnew, b, last, gamma, dx, dy, buf, acc, _SRC + 2 * (1 - parity),
                    gravity, speed, bad)


def _serial_build(function):
    """A serial build of a prange kernel (prange runs as range): for small grids, where a
    parallel region costs more than it saves (and waits for a busy core on a loaded
    machine). A distinct name keeps numba's on-disk cache entries of the two builds apart."""
    serial = types.FunctionType(function.__code__, function.__globals__,
                                function.__name__ + "_serial")
    serial.__qualname__ = function.__qualname__ + "_serial"
    return numba.njit(nogil=True, **_JIT)(serial)


#: The step kernel, parallel over blocks of rows, and its serial twin (same arithmetic).
_STEP = {True: numba.njit(parallel=True, **_JIT)(_step), False: _serial_build(_step)}
#: Cells per step below which the serial kernel runs (measured on 2 idle cores: the parallel
#: build wins from about 2000 cells, 1.6x at 64²; kept above that for loaded machines).
SERIAL_CELLS = 2 ** 12


@numba.njit(parallel=True, **_JIT)
def _load(W, U, gamma, dx, dy, speed, bad):  # pragma: no cover (compiled)
    """Conserved variables and CFL speeds of the primitive states ``W``."""
    batch, ny, nx = W.shape[0], W.shape[2], W.shape[3]
    g1 = gamma - 1.0
    for row in numba.prange(batch * ny):
        b = row // ny
        j = row % ny
        fastest = 0.0
        failed = 0
        for i in range(nx):
            r = W[b, 0, j, i]
            u = W[b, 1, j, i]
            v = W[b, 2, j, i]
            p = W[b, 3, j, i]
            U[b, 0, j, i] = r
            U[b, 1, j, i] = r * u
            U[b, 2, j, i] = r * v
            U[b, 3, j, i] = p / g1 + 0.5 * r * (u * u + v * v)
            U[b, 4, j, i] = r * W[b, 4, j, i]
            a = math.sqrt(gamma * p / r)
            s = max((abs(u) + a) / dx, (abs(v) + a) / dy)
            if not (r > 0.0 and p > 0.0 and s < math.inf):
                failed = 1
            elif s > fastest:
                fastest = s
        speed[b, j] = fastest
        bad[b, j] = failed


# =========================================================================================
# The engine: buffers of one (batch, grid) and the CFL-limited time loop
# =========================================================================================
def _boundary_pair(boundary: Any) -> tuple[str, str]:
    """``"outflow"`` or ``("outflow", "periodic")`` (x, y) → a validated pair."""
    pair = (boundary, boundary) if isinstance(boundary, str) else tuple(boundary)
    if len(pair) != 2 or any(not isinstance(k, str) or k not in BOUNDARIES for k in pair):
        bad = [k for k in pair if k not in BOUNDARIES] or [boundary]
        raise ValueError(unknown_name("boundary", bad[0], BOUNDARIES)
                         + " Give one kind for all sides or an (x, y) pair.")
    return pair


def _check_numerics(gamma: Any, cfl: Any, limiter: Any) -> None:
    if not positive_finite(gamma) or gamma <= 1.0:
        raise ValueError(f"gamma must be a finite number > 1 (the ratio of specific heats, "
                         f"e.g. 1.4 for air), got {gamma!r}")
    if not positive_finite(cfl) or cfl > 1.0:
        raise ValueError(f"cfl must lie in (0, 1] (0.4 is the default; lower it if a run "
                         f"diverges), got {cfl!r}")
    if limiter not in LIMITERS:
        raise ValueError(unknown_name("limiter", limiter, LIMITERS))


def _check_primitive(primitive: np.ndarray) -> None:
    """One ValueError naming what is wrong with an initial state and how to fix it."""
    if primitive.ndim != 4 or primitive.shape[1] != 5 or min(primitive.shape[2:]) < 1:
        raise ValueError(f"primitive states must have shape [batch, 5, ny, nx] with fields "
                         f"(density, velocity_x, velocity_y, pressure, tracer), got "
                         f"{primitive.shape}")
    for field, name in ((0, "density"), (3, "pressure")):
        values = primitive[:, field]
        if not np.all(np.isfinite(values)) or not np.all(values > 0):
            finite = values[np.isfinite(values)]
            low = f"minimum {finite.min():.3g}" if finite.size else "no finite value"
            if finite.size < values.size:
                low += ", NaN or inf present"
            raise ValueError(f"initial {name} must be positive and finite everywhere ({low}): "
                             f"fix the initial state (a vacuum is not representable)")
    if not np.all(np.isfinite(primitive)):
        raise ValueError("initial velocity or tracer contains NaN or inf: fix the initial state")


class _Engine:
    """Conserved and primitive buffers, scratch and per-sample clocks for one problem size.

    Nothing is allocated per step: the step kernel writes the new primitives into the second
    buffer, and the two are swapped.
    """

    def __init__(self, primitive: np.ndarray, lengths: tuple[float, float], *, gamma: float,
                 boundary: tuple[str, str], limiter: str, cfl: float,
                 potential: np.ndarray | None, rows: int | None = None) -> None:
        batch, _, ny, nx = primitive.shape
        self.batch, self.ny, self.nx = batch, ny, nx
        self.dx, self.dy = lengths[0] / nx, lengths[1] / ny
        self.gamma, self.cfl = float(gamma), float(cfl)
        self.bx, self.by = (_BOUNDARY_CODES[k] for k in boundary)
        self.mc = limiter == "mc"
        self.gravity = potential is not None
        self.phi = (np.zeros((1, 1, 1)) if potential is None
                    else np.ascontiguousarray(potential, dtype=np.float64))
        threads = numba.get_num_threads()
        # Enough blocks for every thread (4 each, for balance); at least 8 rows per block so
        # the two extra rows a block reconstructs stay cheap. Results do not depend on it.
        self.rows = rows or int(min(ny, max(8, -(-batch * ny // (4 * threads)))))
        self.kernel = _STEP[threads > 1 and batch * ny * nx >= SERIAL_CELLS]
        blocks = batch * (-(-ny // self.rows))
        self.W = np.ascontiguousarray(primitive, dtype=np.float64).copy()
        self.W_next = np.empty_like(self.W)
        self.U = np.empty_like(self.W)
        self.scratch = np.zeros((blocks, _SLOTS, nx + 1))
        self.speed = np.zeros((batch, ny))
        self.bad = np.zeros((batch, ny), dtype=np.int64)
        self.dts = np.zeros(batch)
        self.active = np.ones(batch, dtype=np.bool_)
        _load(self.W, self.U, self.gamma, self.dx, self.dy, self.speed, self.bad)

    def evolve(self, duration: float, *, time: float = 0.0,
               hint: str = "") -> np.ndarray:
        """Advance every sample by ``duration`` with its own CFL steps, the last one clipped
        to land on ``time + duration`` exactly; returns the steps per sample."""
        elapsed = np.zeros(self.batch)
        done = np.zeros(self.batch, dtype=np.bool_)
        steps = np.zeros(self.batch, dtype=np.int64)
        while not done.all():
            fastest = self.speed.max(axis=1)
            with np.errstate(divide="ignore"):
                limit = self.cfl / fastest
            remaining = duration - elapsed
            last = (limit >= remaining) & ~done
            np.copyto(self.dts, np.where(last, remaining, limit))
            self.dts[done] = 0.0
            collapsed = ~done & (self.dts < MIN_STEP_FRACTION * duration) & ~last
            if collapsed.any():
                raise SolverDivergedError(
                    f"the CFL time step collapsed (below {MIN_STEP_FRACTION:g} of the interval) "
                    f"by t = {time + float(elapsed[collapsed].min()):g} in batch rows "
                    f"{np.flatnonzero(collapsed).tolist()}: {hint}")
            np.logical_not(done, out=self.active)
            self.kernel(self.U, self.W, self.W_next, self.phi, self.gravity, self.dts,
                        self.active, self.bx, self.by, self.mc, self.gamma, self.dx, self.dy,
                        self.rows, self.scratch, self.speed, self.bad)
            self.W, self.W_next = self.W_next, self.W
            failed = self.active & self.bad.any(axis=1)
            if failed.any():
                raise SolverDivergedError(
                    f"density or pressure became non-positive or non-finite by t = "
                    f"{time + float((elapsed + self.dts)[failed].min()):g} in batch rows "
                    f"{np.flatnonzero(failed).tolist()} (after the first-order fallback): "
                    f"{hint}")
            steps += self.active
            elapsed += self.dts
            elapsed[last] = duration
            done |= last
        return steps


def integrate(primitive, final_time, *, lengths=(1.0, 1.0), gamma=1.4, boundary="periodic",
              limiter="mc", cfl=0.4, potential=None):
    r"""Evolve primitive states of the 2D Euler equations to ``final_time``.

    Second-order MUSCL-Hancock (unsplit), HLLC fluxes, CFL-limited steps; see
    :class:`Euler2D` for the scheme.

    Parameters
    ----------
    primitive : array, shape ``[batch, 5, ny, nx]``
        (ρ, u, v, p, c) at the cell centres of a grid covering ``[0, Lx] × [0, Ly]``;
        ρ and p positive.
    final_time : float
        Time to integrate over (> 0).
    lengths : (float, float)
        ``(Lx, Ly)``; Δx = Lx / nx, Δy = Ly / ny.
    gamma : float
        Ratio of specific heats γ > 1.
    boundary : {"periodic", "outflow", "reflective"} or (x, y) pair of them
    limiter : {"mc", "minmod"}
    cfl : float
        Courant number C in (0, 1]: Δt = C / max over cells of max((|u| + a)/Δx,
        (|v| + a)/Δy), per sample.
    potential : array ``[batch, ny, nx]`` (or ``[1, ny, nx]``, shared), optional
        Static gravitational potential φ at the cell centres; adds
        S = (0, −ρ∇φ, −ρu·∇φ, 0).

    Returns
    -------
    (numpy.ndarray, int)
        The primitive states at ``final_time`` (a new array) and the number of time steps
        (with a batch, the largest number over its samples: each takes its own CFL steps).

    Raises
    ------
    ValueError
        Bad shapes or settings, or non-positive/non-finite initial ρ or p.
    SolverDivergedError
        ρ or p non-positive or non-finite after a step, or the step size collapsing.

    Example
    -------
    >>> x = (np.arange(64) + 0.5) / 64
    >>> prim = np.zeros((1, 5, 4, 64))
    >>> prim[0, 0], prim[0, 3] = np.where(x < 0.5, 1.0, 0.125), np.where(x < 0.5, 1.0, 0.1)
    >>> out, steps = integrate(prim, 0.2, lengths=(1.0, 4 / 64), boundary="outflow")
    >>> out.shape
    (1, 5, 4, 64)
    """
    primitive = np.asarray(primitive, dtype=np.float64)
    _check_primitive(primitive)
    _check_numerics(gamma, cfl, limiter)
    pair = _boundary_pair(boundary)
    if not positive_finite(final_time):
        raise ValueError(f"final_time must be a positive finite number, got {final_time!r}")
    lengths = tuple(float(v) for v in lengths)
    if len(lengths) != 2 or not all(positive_finite(v) for v in lengths):
        raise ValueError(f"lengths must be two positive finite numbers (Lx, Ly), got {lengths}")
    phi = _check_potential(potential, primitive.shape)
    engine = _Engine(primitive, lengths, gamma=gamma, boundary=pair, limiter=limiter, cfl=cfl,
                     potential=phi)
    steps = engine.evolve(float(final_time), hint=_hint(cfl, limiter))
    return engine.W.copy(), int(steps.max())


def fast_step(primitive, dt, *, lengths=(1.0, 1.0), gamma=1.4, boundary="periodic",
              limiter="mc", potential=None, rows=None, parallel=None):
    """One step of the numba kernel at a given Δt (per sample): the fast counterpart of
    :func:`reference_step`, same arguments; ``rows`` is the kernel's block height and
    ``parallel`` picks the parallel or the serial build (default: by grid size, as
    :func:`integrate`); the result depends on neither.

    Returns the primitive states after the step and a boolean ``[batch]`` array: whether
    the sample's new ρ or p is non-positive or non-finite somewhere.
    """
    primitive = np.asarray(primitive, dtype=np.float64)
    _check_primitive(primitive)
    _check_numerics(gamma, 1.0, limiter)
    phi = _check_potential(potential, primitive.shape)
    engine = _Engine(primitive, tuple(float(v) for v in lengths), gamma=gamma,
                     boundary=_boundary_pair(boundary), limiter=limiter, cfl=1.0,
                     potential=phi, rows=rows)
    engine.dts[:] = np.broadcast_to(np.asarray(dt, dtype=np.float64), (engine.batch,))
    engine.W_next.fill(np.nan)  # an unwritten value fails loudly
    kernel = engine.kernel if parallel is None else _STEP[bool(parallel)]
    kernel(engine.U, engine.W, engine.W_next, engine.phi, engine.gravity, engine.dts,
           engine.active, engine.bx, engine.by, engine.mc, engine.gamma, engine.dx, engine.dy,
           engine.rows, engine.scratch, engine.speed, engine.bad)
    return engine.W_next.copy(), engine.bad.any(axis=1)


def _check_potential(potential, shape) -> np.ndarray | None:
    if potential is None:
        return None
    phi = np.asarray(potential, dtype=np.float64)
    if phi.ndim != 3 or phi.shape[1:] != tuple(shape[2:]) or phi.shape[0] not in (1, shape[0]):
        raise ValueError(f"potential must have shape [batch, ny, nx] = "
                         f"{[shape[0], *shape[2:]]} (or batch 1), got {list(phi.shape)}")
    if not np.all(np.isfinite(phi)):
        raise ValueError("potential contains NaN or inf")
    return phi


def _hint(cfl: float, limiter: str) -> str:
    return (f"cfl {cfl:g}, limiter {limiter!r}: lower the cfl number (e.g. 0.2), use "
            "limiter='minmod' for strong shocks, or raise the resolution")


def conserved_totals(primitive: np.ndarray, gamma: float) -> np.ndarray:
    """Per sample the sums of (ρ, ρu, ρv, E, ρc) over the cells: ``[batch, 5]``."""
    r, u, v, p, c = (primitive[:, k] for k in range(5))
    conserved = np.stack([r, r * u, r * v, p / (gamma - 1) + 0.5 * r * (u * u + v * v), r * c],
                         axis=1)
    return conserved.sum(axis=(2, 3))


# =========================================================================================
# Plain NumPy reference: one step, from the equations (the test oracle of the kernel)
# =========================================================================================
def _np_limit(forward, backward, mc):
    same = forward * backward > 0
    if mc:
        central = 0.5 * (forward + backward)
        bound = 2.0 * np.minimum(np.abs(forward), np.abs(backward))
        slope = np.where(np.abs(central) <= bound, central, np.copysign(bound, forward))
    else:
        slope = np.where(np.abs(forward) < np.abs(backward), forward, backward)
    return np.where(same, slope, 0.0)


def _np_hllc(left, right, gamma):
    """HLLC normal fluxes of states ``(ρ, u_n, u_t, p, c)`` (tuples of arrays), in Toro's
    form F*_K = F_K + S_K (U*_K − U_K) (eqs. 10.38–10.39)."""
    rl, ul, vl, pl, cl = left
    rr, ur, vr, pr, cr = right
    g1 = gamma - 1.0
    al, ar = np.sqrt(gamma * pl / rl), np.sqrt(gamma * pr / rr)
    sl, sr = np.minimum(ul - al, ur - ar), np.maximum(ul + al, ur + ar)
    el = pl / g1 + 0.5 * rl * (ul ** 2 + vl ** 2)
    er = pr / g1 + 0.5 * rr * (ur ** 2 + vr ** 2)
    star = (pr - pl + rl * ul * (sl - ul) - rr * ur * (sr - ur)) / (rl * (sl - ul)
                                                                     - rr * (sr - ur))

    def physical(r, u, v, p, c, e):
        m = r * u
        return np.stack([m, m * u + p, m * v, u * (e + p), m * c])

    def starred(r, u, v, p, c, e, s):
        conserved = np.stack([r, r * u, r * v, e, r * c])
        f = r * (s - u) / (s - star)
        state = np.stack([f, f * star, f * v,
                          f * (e / r + (star - u) * (star + p / (r * (s - u)))), f * c])
        return physical(r, u, v, p, c, e) + s * (state - conserved)

    fl, fr = physical(rl, ul, vl, pl, cl, el), physical(rr, ur, vr, pr, cr, er)
    with np.errstate(divide="ignore", invalid="ignore"):  # unused branches of np.where
        fsl = starred(rl, ul, vl, pl, cl, el, sl)
        fsr = starred(rr, ur, vr, pr, cr, er, sr)
    return np.where(sl >= 0, fl, np.where(sr <= 0, fr, np.where(star >= 0, fsl, fsr)))


def _ghosts(values, axis, kind, flip):
    """Pad one cell on both sides of ``axis`` (the last two of [batch, ny, nx] arrays)."""
    n = values.shape[axis]
    if kind == "periodic":
        lo, hi = np.take(values, [n - 1], axis), np.take(values, [0], axis)
    else:
        lo, hi = np.take(values, [0], axis), np.take(values, [n - 1], axis)
        if kind == "reflective" and flip:
            lo, hi = -lo, -hi
    return np.concatenate([lo, values, hi], axis=axis)


def reference_step(primitive, dt, *, lengths=(1.0, 1.0), gamma=1.4, boundary="periodic",
                   limiter="mc", potential=None):
    r"""One MUSCL-Hancock + HLLC step in plain NumPy (the kernel's oracle).

    With slopes Δ limited from the neighbouring differences (MC or minmod) and the primitive
    quasi-linear form W_t + A(W) W_x + B(W) W_y = 0, the half-step centre value is
    W̄ = W − ½Δt (A Δ_x W / Δx + B Δ_y W / Δy) and the face states W̄ ± ½Δ (Toro
    §14.4.2, unsplit). Fluxes are HLLC (Toro §10.6) with Davis speeds;
    U ← U − Δt/Δx ΔF − Δt/Δy ΔG + Δt S. A cell whose face ρ or p would be non-positive uses
    its centre values (first order).

    Gravity (Käppeli & Mishra 2014): through each cell the local isentropic equilibrium
    h + φ = h_i + φ_i, p/ρ^γ = p_i/ρ_i^γ gives ρ_eq,i(φ), p_eq,i(φ); ρ and p are
    reconstructed as equilibrium plus limited perturbation (zero at the centre), the
    momentum source is Δt (ρ̄/ρ_i) (p_eq,i(φ_{i+½}) − p_eq,i(φ_{i−½}))/Δx with
    φ_{i+½} = ½(φ_i + φ_{i+1}), and the energy source is −½ Σ_faces F_ρ Δφ/Δx. A hydrostatic
    isentropic state is then kept exactly: face pressures match and cancel the source.

    Parameters
    ----------
    primitive : array ``[batch, 5, ny, nx]``
    dt : float or array ``[batch]``
    lengths, gamma, boundary, limiter, potential
        As for :func:`integrate`.

    Returns
    -------
    numpy.ndarray ``[batch, 5, ny, nx]``: the primitive states after one step.
    """
    W = np.asarray(primitive, dtype=np.float64)
    batch, _, ny, nx = W.shape
    bxk, byk = _boundary_pair(boundary)
    mc = limiter == "mc"
    dt = np.broadcast_to(np.asarray(dt, dtype=np.float64), (batch,))[:, None, None]
    lx, ly = dt / (lengths[0] / nx), dt / (lengths[1] / ny)
    g1 = gamma - 1.0
    r, u, v, p, c = (W[:, k] for k in range(5))
    gravity = potential is not None
    phi = (np.broadcast_to(np.asarray(potential, dtype=np.float64), (batch, ny, nx))
           if gravity else np.zeros((batch, ny, nx)))

    def pad(values, flip_x=False, flip_y=False):
        return _ghosts(_ghosts(values, 2, bxk, flip_x), 1, byk, flip_y)

    def pad_phi(values):  # ghosts of φ: linear extrapolation at non-periodic edges
        out = _ghosts(_ghosts(values, 2, bxk, False), 1, byk, False)
        for axis, kind in ((2, bxk), (1, byk)):
            if kind != "periodic":
                n = values.shape[axis]
                lo = 2 * np.take(values, [0], axis) - np.take(values, [1 if n > 1 else 0], axis)
                hi = (2 * np.take(values, [n - 1], axis)
                      - np.take(values, [n - 2 if n > 1 else n - 1], axis))
                index = [slice(None)] * 3
                other = 1 if axis == 2 else 2
                index[other] = slice(1, -1)
                index[axis] = 0
                out[tuple(index)] = lo.squeeze(axis)
                index[axis] = -1
                out[tuple(index)] = hi.squeeze(axis)
        return out

    P = {k: pad(W[:, k], k == 1, k == 2) for k in range(5)}
    F = pad_phi(phi)
    core = (slice(None), slice(1, -1), slice(1, -1))
    east, west = (slice(None), slice(1, -1), slice(2, None)), (slice(None), slice(1, -1),
                                                               slice(None, -2))
    north, south = (slice(None), slice(2, None), slice(1, -1)), (slice(None), slice(None, -2),
                                                                 slice(1, -1))

    def diffs(k):
        return (P[k][east] - P[k][core], P[k][core] - P[k][west],
                P[k][north] - P[k][core], P[k][core] - P[k][south])

    dux, duy = _np_limit(*diffs(1)[:2], mc), _np_limit(*diffs(1)[2:], mc)
    dvx, dvy = _np_limit(*diffs(2)[:2], mc), _np_limit(*diffs(2)[2:], mc)
    dcx, dcy = _np_limit(*diffs(4)[:2], mc), _np_limit(*diffs(4)[2:], mc)
    ghost = {}
    for name, sl_, kind, edge in (("e", east, bxk, (slice(None), slice(None), -1)),
                                  ("w", west, bxk, (slice(None), slice(None), 0)),
                                  ("n", north, byk, (slice(None), -1, slice(None))),
                                  ("s", south, byk, (slice(None), 0, slice(None)))):
        mask = np.zeros((batch, ny, nx), dtype=bool)
        if kind != "periodic":
            mask[edge] = True
        ghost[name] = mask
    if gravity:
        inv_h = g1 / (gamma * p / r)
        q = {name: 1.0 - (F[sl_] - phi) * inv_h
             for name, sl_ in (("e", east), ("w", west), ("n", north), ("s", south))}
        qf = {name: 1.0 - 0.5 * (F[sl_] - phi) * inv_h
              for name, sl_ in (("e", east), ("w", west), ("n", north), ("s", south))}
        balanced = np.minimum(np.minimum(q["e"], q["w"]), np.minimum(q["n"], q["s"])) > 0
    else:
        balanced = np.zeros((batch, ny, nx), dtype=bool)
    with np.errstate(invalid="ignore"):  # powers of unused negative ratios
        def eq(base, name, exponent, table):
            return np.where(balanced, base * np.maximum(table[name], 0.0) ** exponent, base)

        if gravity:
            r_face = {n: eq(r, n, 1 / g1, qf) for n in "ewns"}
            p_face = {n: eq(p, n, gamma / g1, qf) for n in "ewns"}
            r_nb = {n: eq(r, n, 1 / g1, q) for n in "ewns"}
            p_nb = {n: eq(p, n, gamma / g1, q) for n in "ewns"}
        else:
            r_face = p_face = r_nb = p_nb = None

    def perturbation(k, base, neighbours):
        fe, bw, fn, bs = diffs(k)
        if gravity:
            fe = np.where(balanced, np.where(ghost["e"], 0.0, P[k][east] - neighbours["e"]), fe)
            bw = np.where(balanced, np.where(ghost["w"], 0.0, neighbours["w"] - P[k][west]), bw)
            fn = np.where(balanced, np.where(ghost["n"], 0.0, P[k][north] - neighbours["n"]),
                          fn)
            bs = np.where(balanced, np.where(ghost["s"], 0.0, neighbours["s"] - P[k][south]),
                          bs)
        return _np_limit(fe, bw, mc), _np_limit(fn, bs, mc)

    drx, dry = perturbation(0, r, r_nb)
    dpx, dpy = perturbation(3, p, p_nb)
    if gravity:
        rxp, rxm, ryp, rym = r_face["e"], r_face["w"], r_face["n"], r_face["s"]
        pxp, pxm, pyp, pym = p_face["e"], p_face["w"], p_face["n"], p_face["s"]
    else:
        rxp = rxm = ryp = rym = r
        pxp = pxm = pyp = pym = p
    d_r = -0.5 * (lx * (u * (drx + (rxp - rxm)) + r * dux) + ly * (v * (dry + (ryp - rym))
                                                                  + r * dvy))
    d_u = -0.5 * (lx * (u * dux + dpx / r) + ly * v * duy)
    d_v = -0.5 * (lx * u * dvx + ly * (v * dvy + dpy / r))
    d_p = -0.5 * (lx * (u * (dpx + (pxp - pxm)) + gamma * p * dux)
                  + ly * (v * (dpy + (pyp - pym)) + gamma * p * dvy))
    d_c = -0.5 * (lx * u * dcx + ly * v * dcy)
    faces = {"xl": [rxm + d_r - 0.5 * drx, u + d_u - 0.5 * dux, v + d_v - 0.5 * dvx,
                    pxm + d_p - 0.5 * dpx, c + d_c - 0.5 * dcx],
             "xr": [rxp + d_r + 0.5 * drx, u + d_u + 0.5 * dux, v + d_v + 0.5 * dvx,
                    pxp + d_p + 0.5 * dpx, c + d_c + 0.5 * dcx],
             "yb": [rym + d_r - 0.5 * dry, u + d_u - 0.5 * duy, v + d_v - 0.5 * dvy,
                    pym + d_p - 0.5 * dpy, c + d_c - 0.5 * dcy],
             "yt": [ryp + d_r + 0.5 * dry, u + d_u + 0.5 * duy, v + d_v + 0.5 * dvy,
                    pyp + d_p + 0.5 * dpy, c + d_c + 0.5 * dcy]}
    scale = (r + d_r) / r
    fallback = np.zeros((batch, ny, nx), dtype=bool)
    for side in faces.values():
        fallback |= (side[0] <= 0) | (side[3] <= 0)
    first = {"xl": (rxm, pxm), "xr": (rxp, pxp), "yb": (rym, pym), "yt": (ryp, pyp)}
    for name, side in faces.items():
        centre = [first[name][0], u, v, first[name][1], c]
        faces[name] = [np.where(fallback, centre[k], side[k]) for k in range(5)]
    scale = np.where(fallback, 1.0, scale)

    # fluxes through x-faces: index i is the face i − ½, i = 0..nx
    def x_faces():
        left = [np.concatenate([f[..., -1:] if bxk == "periodic" else g[..., :1], f], axis=-1)
                for f, g in zip(faces["xr"], faces["xl"])]
        right = [np.concatenate([g, f[..., :1] if bxk == "periodic" else h[..., -1:]],
                                axis=-1) for g, f, h in zip(faces["xl"], faces["xl"],
                                                           faces["xr"])]
        if bxk != "periodic":
            sign = -1.0 if bxk == "reflective" else 1.0
            for k in range(5):
                left[k][..., 0] = right[k][..., 0] * (sign if k == 1 else 1.0)
                right[k][..., -1] = left[k][..., -1] * (sign if k == 1 else 1.0)
        return _np_hllc(left, right, gamma)

    def y_faces():
        lo = [np.concatenate([f[:, -1:] if byk == "periodic" else g[:, :1], f], axis=1)
              for f, g in zip(faces["yt"], faces["yb"])]
        hi = [np.concatenate([g, g[:, :1] if byk == "periodic" else h[:, -1:]], axis=1)
              for g, h in zip(faces["yb"], faces["yt"])]
        if byk != "periodic":
            sign = -1.0 if byk == "reflective" else 1.0
            for k in range(5):
                lo[k][:, 0] = hi[k][:, 0] * (sign if k == 2 else 1.0)
                hi[k][:, -1] = lo[k][:, -1] * (sign if k == 2 else 1.0)
        swap = lambda s: [s[0], s[2], s[1], s[3], s[4]]
        flux = _np_hllc(swap(lo), swap(hi), gamma)
        return flux[[0, 2, 1, 3, 4]]

    fx, fy = x_faces(), y_faces()
    U = np.stack([r, r * u, r * v, p / g1 + 0.5 * r * (u * u + v * v), r * c])
    U = (U - lx * (fx[..., 1:] - fx[..., :-1])) - ly * (fy[:, :, 1:] - fy[:, :, :-1])
    if gravity:
        # energy: ½ F_ρ Δφ on both sides of each interior (or periodic) face
        dphi_x = np.concatenate([phi[..., :1] - phi[..., -1:], np.diff(phi, axis=-1),
                                 phi[..., :1] - phi[..., -1:]], axis=-1)
        work_x = 0.5 * lx * fx[0] * dphi_x
        if bxk != "periodic":
            work_x[..., 0] = work_x[..., -1] = 0.0
        dphi_y = np.concatenate([phi[:, :1] - phi[:, -1:], np.diff(phi, axis=1),
                                 phi[:, :1] - phi[:, -1:]], axis=1)
        work_y = 0.5 * ly * fy[0] * dphi_y
        if byk != "periodic":
            work_y[:, 0] = work_y[:, -1] = 0.0
        U[3] -= (work_x[..., 1:] + work_x[..., :-1]) + (work_y[:, 1:] + work_y[:, :-1])
        plain_x = -r * lx * 0.5 * (F[east] - F[west])
        plain_y = -r * ly * 0.5 * (F[north] - F[south])
        U[1] += np.where(balanced, scale * lx * (pxp - pxm), scale * plain_x)
        U[2] += np.where(balanced, scale * ly * (pyp - pym), scale * plain_y)
    out = np.empty_like(W)
    out[:, 0] = U[0]
    out[:, 1] = U[1] / U[0]
    out[:, 2] = U[2] / U[0]
    out[:, 3] = g1 * (U[3] - 0.5 * (U[1] * out[:, 1] + U[2] * out[:, 2]))
    out[:, 4] = U[4] / U[0]
    return out


# =========================================================================================
# Initial conditions
# =========================================================================================
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
    profiles of width L = 0.025 (McNally et al., eq. 1 with the velocities of the spec);
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


# =========================================================================================
# The registered solver
# =========================================================================================
@dataclasses.dataclass(frozen=True)
class EulerConfig:
    """Configuration of :class:`Euler2D` (non-dimensional; unit square domain).

    Parameters
    ----------
    resolution : int
        Stored cells per side (the dataset's ``x`` and ``y``); must divide
        ``simulation_resolution``. Stored frames are averages of s × s simulation cells
        (s = simulation_resolution / resolution): finite-volume data are cell averages.
    simulation_resolution : int
        Cells per side N of the simulation grid, Δx = Δy = 1 / N.
    problem : str
        Initial-condition family: ``ce-rm``, ``gce-rt``, ``sod-x``, ``sod-y``, ``lax``,
        ``toro-123``, ``kelvin-helmholtz`` (see :class:`Euler2D`).
    gamma : float
        Ratio of specific heats γ > 1 (1.4 air; GCE-RT uses the γ = 2 polytrope).
    boundary : str
        ``periodic``, ``outflow`` (transmissive) or ``reflective`` (walls), on all sides.
    limiter : str
        Slope limiter of the reconstruction: ``mc`` (monotonised central) or ``minmod``
        (more diffusive, more robust at strong shocks).
    cfl : float
        Courant number C in (0, 1]: Δt = C / max((|u| + a)/Δx, (|v| + a)/Δy). 0.4 is the
        default; the unsplit scheme is stable to 0.6 on diagonal flows.
    final_time : float
        Simulated time T; ``final_time / record_interval + 1`` frames are stored.
    record_interval : float
        Time between stored frames; one Stepper ``step`` advances this much.
    interface_amplitude : float
        ε of the CE-RM interface R(θ) = 0.25 + ε Σ a_j sin(jθ + 2π b_j); below 0.09 the
        interface stays clear of the blast region r < 0.1.
    """

    resolution: int = 128
    simulation_resolution: int = 256
    problem: str = "ce-rm"
    gamma: float = 1.4
    boundary: str = "periodic"
    limiter: str = "mc"
    cfl: float = 0.4
    final_time: float = 2.0
    record_interval: float = 0.1
    interface_amplitude: float = CE_RM_EPSILON

    def __post_init__(self) -> None:
        n, m = self.simulation_resolution, self.resolution
        for name, value in (("simulation_resolution", n), ("resolution", m)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 1 <= value <= MAX_RESOLUTION:
                raise ValueError(f"{name} must be an integer in 1..{MAX_RESOLUTION}, got "
                                 f"{value!r}")
        if n % m:
            divisors = [d for d in range(n, 0, -1) if n % d == 0][:8]
            raise ValueError(f"stored resolution {m} must divide the simulation resolution "
                             f"{n} (frames are average-pooled); choose one of {divisors}")
        if self.problem not in PROBLEMS:
            raise ValueError(unknown_name("problem", self.problem, PROBLEMS))
        _check_numerics(self.gamma, self.cfl, self.limiter)
        _boundary_pair(self.boundary)
        if not isinstance(self.boundary, str):
            raise ValueError(f"boundary must be one of {BOUNDARIES} (one kind for all sides), "
                             f"got {self.boundary!r}")
        for name in ("final_time", "record_interval"):
            if not positive_finite(getattr(self, name)):
                raise ValueError(f"{name} must be a positive finite number, got "
                                 f"{getattr(self, name)!r}")
        if not (positive_finite(self.interface_amplitude) or self.interface_amplitude == 0) \
                or self.interface_amplitude >= 0.15:
            raise ValueError(f"interface_amplitude must lie in [0, 0.15) so that the CE-RM "
                             f"interface stays inside the domain, got "
                             f"{self.interface_amplitude!r}")
        whole_multiple(self.final_time, self.record_interval,
                       "final_time must be a whole number of record intervals")

    @property
    def gravity(self) -> bool:
        return self.problem == "gce-rt"


@register_solver("euler")
class Euler2D(TimeDependentSolver):
    r"""2D compressible Euler equations with a passive tracer and optional static gravity.

    .. math:: \partial_t U + \nabla \cdot \mathbf F(U) = S,\quad
              U = (\rho, \rho u, \rho v, E, \rho c),\quad
              S = (0, -\rho \nabla \phi, -\rho\, \mathbf u \cdot \nabla \phi, 0)

    with E = ½ρ|u|² + p/(γ − 1) (ideal gas). Fields (the state, ``[batch, 5, y, x]``):
    ``density`` ρ, ``velocity_x`` u, ``velocity_y`` v, ``pressure`` p, ``tracer`` c. The
    GCE-RT problem adds the per-sample static ``potential`` φ ``[batch, y, x]`` (role
    ``forcing``: a known grid field the surrogate takes as input, and the Stepper's
    parameter). See :class:`EulerConfig` for the parameters.

    Scheme: finite volumes on the cell centres of the unit square (x_i = (i + ½)/N; the
    GCE-RT domain is shifted to [−½, ½]²). Second-order MUSCL-Hancock on the primitive
    variables, unsplit (Toro §14.4.2: limited slopes in x and y, a half-step predictor with
    both directions' derivatives, face states W̄ ± ½Δ), HLLC fluxes with Davis wave speeds
    (Toro §10.4–10.6), Δt = C / max((|u| + a)/Δx, (|v| + a)/Δy) per sample and step, the
    last step of each record interval clipped to land on the record time. A cell whose face
    ρ or p would be non-positive falls back to first order. Gravity: the well-balanced
    reconstruction of Käppeli & Mishra (2014) around the local isentropic equilibrium of
    each cell (see :func:`reference_step`), which keeps an isentropic hydrostatic state (the
    γ = 2 GCE-RT polytrope) at rest to round-off.

    Presets: ``ce-rm`` (Richtmyer–Meshkov, 256² → 128², T = 2, 21 frames),
    ``gce-rt`` (gravitational Rayleigh–Taylor, γ = 2, 256² → 128², T = 5, 11 frames),
    ``sod-x``, ``sod-y``, ``lax``, ``toro-123`` (Riemann problems across x = ½ or y = ½,
    outflow), ``kelvin-helmholtz`` (periodic shear layers). The initial states are point
    values at the simulation cell centres; the formulas are in :func:`ce_rm_state`,
    :func:`gce_rt_state`, :func:`kelvin_helmholtz_state` and :data:`RIEMANN_PROBLEMS`.

    Conventions: the coordinates are the cell centres (unlike the spectral solvers' nodes
    j/N); stored frames are block averages of the simulation grid (``downsampling =
    "pool"``). A state on a coarser grid given to :meth:`step` is spread to the simulation
    grid piecewise constantly (so that pooling it back gives it exactly); a coarser
    potential is interpolated bilinearly.

    Good values: C = 0.4. The unsplit scheme is stable to C = 0.6 on a diagonal flow, its
    worst case (measured: at 0.7 the smooth advected wave grows, at 0.8 it diverges; grid-
    aligned flows tolerate 0.8). MC for smooth and moderate flows, minmod for very strong
    shocks.

    Stability: if ρ or p turns non-positive after the first-order fallback, or the step
    collapses, :class:`SolverDivergedError` names the time and samples.

    References
    ----------
    E. F. Toro, Riemann Solvers and Numerical Methods for Fluid Dynamics, 3rd ed., Springer
    2009 (§10.4–10.6 HLLC, §14.4 MUSCL-Hancock).
    R. Käppeli & S. Mishra, Well-balanced schemes for the Euler equations with gravitation,
    J. Comput. Phys. 259 (2014) 199–219.
    M. Herde et al., Poseidon: efficient foundation models for PDEs, NeurIPS 2024
    (CE-RM, GCE-RT; App. B.2.8–B.2.9).
    C. P. McNally, W. Lyra & J.-C. Passy, ApJS 201 (2012) 18 (Kelvin–Helmholtz set-up).

    Example
    -------
    >>> solver = Euler2D(resolution=16, simulation_resolution=32, final_time=0.02,
    ...                  record_interval=0.01)
    >>> out = solver.solve_batch(solver.sample_inputs(seed=0, indices=[0]))
    >>> out["density"].shape
    (1, 3, 16, 16)
    """

    Config = EulerConfig
    fields = FIELDS
    field_units = {"density": ("density", "1"), "velocity_x": ("x velocity", "1"),
                   "velocity_y": ("y velocity", "1"), "pressure": ("pressure", "1"),
                   "tracer": ("passive tracer (mass fraction)", "1")}
    spatial_ndim = 2
    downsampling = "pool"
    parameter_names = ("potential",)
    title = "2D compressible Euler equations (MUSCL-Hancock, HLLC)"
    references = ("Toro, Riemann Solvers and Numerical Methods for Fluid Dynamics, 3rd ed. "
                  "2009; Kaeppeli & Mishra, J. Comput. Phys. 259 (2014); Herde et al., "
                  "Poseidon, NeurIPS 2024")
    PRESETS = {
        "ce-rm": dict(problem="ce-rm", resolution=128, simulation_resolution=256, gamma=1.4,
                      boundary="periodic", final_time=2.0, record_interval=0.1),
        "gce-rt": dict(problem="gce-rt", resolution=128, simulation_resolution=256, gamma=2.0,
                       boundary="periodic", final_time=5.0, record_interval=0.5),
        "sod-x": dict(problem="sod-x", resolution=256, simulation_resolution=256, gamma=1.4,
                      boundary="outflow", final_time=0.2, record_interval=0.02),
        "sod-y": dict(problem="sod-y", resolution=256, simulation_resolution=256, gamma=1.4,
                      boundary="outflow", final_time=0.2, record_interval=0.02),
        "lax": dict(problem="lax", resolution=256, simulation_resolution=256, gamma=1.4,
                    boundary="outflow", final_time=0.14, record_interval=0.014),
        "toro-123": dict(problem="toro-123", resolution=256, simulation_resolution=256,
                         gamma=1.4, boundary="outflow", final_time=0.15,
                         record_interval=0.015),
        "kelvin-helmholtz": dict(problem="kelvin-helmholtz", resolution=128,
                                 simulation_resolution=256, gamma=1.4, boundary="periodic",
                                 final_time=2.0, record_interval=0.1),
    }
    TINY = dict(problem="gce-rt", resolution=16, simulation_resolution=16, gamma=2.0,
                boundary="periodic", final_time=0.1, record_interval=0.05)

    # -- configuration-dependent declarations ------------------------------------------------
    @property
    def checks(self) -> Checks:
        """Checks of a proposed frame that fit compressible flow, chosen from the config.

        Density and pressure stay positive. On a periodic domain without gravity the totals of
        mass, x and y momentum and energy E = ½ρ|u|² + p/(γ − 1) are conserved (with gravity
        the mass only: momentum and E exchange with the potential). The mean-square growth
        bound covers density and pressure only: the velocities start from rest.
        """
        cfg = self.config
        totals = {}
        if cfg.boundary == "periodic" and not cfg.gravity:
            gamma = cfg.gamma
            totals = {
                "x momentum": lambda f: f["density"] * f["velocity_x"],
                "y momentum": lambda f: f["density"] * f["velocity_y"],
                "energy": lambda f: (0.5 * f["density"] * (f["velocity_x"] ** 2
                                                           + f["velocity_y"] ** 2)
                                     + f["pressure"] / (gamma - 1.0)),
            }
        conserved = ("density",) if cfg.boundary == "periodic" else ()
        return Checks(conserved=conserved, positive=("density", "pressure"), totals=totals,
                      bounded=("density", "pressure"))

    @property
    def origin(self) -> float:
        """Lower-left corner of the domain (−½ for GCE-RT, 0 otherwise), both axes."""
        return -0.5 if self.config.problem == "gce-rt" else 0.0

    def centres(self, n: int) -> np.ndarray:
        """Cell centres of an ``n``-cell axis of the domain."""
        return self.origin + (np.arange(n) + 0.5) / n

    # -- per-sample inputs -----------------------------------------------------------------
    def _draws(self, seed: int, index: int) -> dict[str, Any]:
        """The random numbers of one sample (stream 0, in this order)."""
        rng = sample_rng(seed, index, stream=0)
        problem = self.config.problem
        if problem == "ce-rm":
            return {"amplitudes": rng.uniform(0.0, 1.0, 10), "phases": rng.uniform(0.0, 1.0, 10)}
        if problem == "gce-rt":
            a, b = rng.uniform(-1.0, 1.0), rng.uniform(-np.pi, np.pi)
            c, d, e = rng.uniform(-1.0, 1.0, 3)
            return {"a": a, "b": b, "rho0": 1 + 0.2 * c, "p0": 1 + 0.2 * d,
                    "atwood": 0.05 * (1 + 0.2 * e)}
        if problem == "kelvin-helmholtz":
            return {"amplitudes": rng.uniform(0.0, 1.0, 4), "phases": rng.uniform(0.0, 1.0, 4)}
        return {}

    def _sample_state(self, seed: int, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        cfg = self.config
        n = cfg.simulation_resolution
        x, y = self.centres(n)[None, :], self.centres(n)[:, None]
        draws = self._draws(seed, index)
        if cfg.problem == "ce-rm":
            return ce_rm_state(x, y, draws["amplitudes"], draws["phases"],
                               epsilon=cfg.interface_amplitude), None
        if cfg.problem == "gce-rt":
            return gce_rt_state(x, y, **draws)
        if cfg.problem == "kelvin-helmholtz":
            return kelvin_helmholtz_state(x, y, draws["amplitudes"], draws["phases"]), None
        left, right, axis = RIEMANN_PROBLEMS[cfg.problem]
        coordinate = np.broadcast_to(x if axis == "x" else y, (n, n))
        return _riemann_state((n, n), coordinate, left, right, axis), None

    def initial_condition(self, seed: int, indices: Sequence[int]) -> np.ndarray:
        """Primitive states ``[batch, 5, N, N]`` at the simulation cell centres."""
        return np.stack([self._sample_state(seed, i)[0] for i in indices])

    def parameter_specs(self) -> dict[str, tuple[int, ...]]:
        return {"potential": self.simulation_grid} if self.config.gravity else {}

    def default_parameter(self, name: str) -> Any:
        return None  # the potential is drawn per sample

    def check_parameters(self, parameters: Mapping[str, np.ndarray]) -> None:
        return None  # any finite potential will do (finiteness is checked by the base)

    def sample_parameters(self, seed: int, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """GCE-RT: the potential φ ``[batch, N, N]`` (from the same draws as the state)."""
        if not self.config.gravity:
            return {}
        return {"potential": np.stack([self._sample_state(seed, i)[1] for i in indices])}

    def resolve_parameters(self, batch: int, parameters: Mapping[str, np.ndarray] | None
                           ) -> dict[str, np.ndarray]:
        """As the base, but a potential on a coarser grid (a dataset's) is interpolated
        bilinearly to the simulation grid first."""
        parameters = dict(parameters or {})
        value = parameters.get("potential")
        if self.config.gravity and value is not None:
            value = np.asarray(value, dtype=np.float64)
            n = self.config.simulation_resolution
            if value.ndim >= 2 and value.shape[-1] == value.shape[-2] and value.shape[-1] != n \
                    and n % value.shape[-1] == 0:
                parameters["potential"] = _interpolate(value, n, periodic=(
                    self.config.boundary == "periodic"))
        return super().resolve_parameters(batch, parameters)

    # -- simulation ------------------------------------------------------------------------
    def to_simulation_grid(self, frames: np.ndarray) -> np.ndarray:
        """States on a coarser square grid → the simulation grid, each cell's value repeated
        over the s × s cells it covers (pooling gives the input back exactly)."""
        n = self.config.simulation_resolution
        if frames.shape[-1] != frames.shape[-2] or n % frames.shape[-1]:
            raise ValueError(f"states must be on a square grid dividing the simulation grid "
                             f"{n}x{n}, got {frames.shape[-2:]}")
        factor = n // frames.shape[-1]
        return np.repeat(np.repeat(frames, factor, axis=-1), factor, axis=-2)

    def start(self, initial: np.ndarray, parameters: Mapping[str, np.ndarray]):
        cfg = self.config
        _check_primitive(initial)
        potential = parameters.get("potential") if cfg.gravity else None
        engine = _Engine(initial, (1.0, 1.0), gamma=cfg.gamma, boundary=(cfg.boundary,) * 2,
                         limiter=cfg.limiter, cfl=cfg.cfl, potential=potential)
        return types.SimpleNamespace(engine=engine, steps=0)

    def advance(self, state, time: float) -> None:
        steps = state.engine.evolve(self.config.record_interval, time=time,
                                    hint=self.divergence_hint())
        state.steps += int(steps.max())

    def observe(self, state) -> np.ndarray:
        return state.engine.W.copy()

    def divergence_hint(self) -> str:
        return _hint(self.config.cfl, self.config.limiter)

    # -- dataset ---------------------------------------------------------------------------
    def extra_variables(self) -> dict[str, VariableSpec]:
        if not self.config.gravity:
            return {}
        return {"potential": VariableSpec((data.Y, data.X), "gravitational potential", "1",
                                          role="forcing")}

    def extra_outputs(self, inputs: Mapping[str, np.ndarray],
                      times: np.ndarray) -> dict[str, np.ndarray]:
        if not self.config.gravity:
            return {}
        phi = np.asarray(inputs["potential"], dtype=np.float64)
        return {"potential": self._restrict(phi[:, None], self.grid)[:, 0]}

    def coordinates(self) -> dict[str, xr.DataArray]:
        coords = {}
        n = self.config.resolution
        for dim in (data.Y, data.X):
            coords[dim] = xr.DataArray(
                self.centres(n), dims=(dim,), name=dim,
                attrs={"units": "1", "long_name": f"{dim} of the cell centres",
                       "axis": dim.upper()})
        coords[data.TIME] = data.time_coordinate(np.arange(self.num_records + 1) * self.dt)
        return coords

    def stored_bytes_per_sample(self) -> int:
        r = self.config.resolution
        return self._stored_bytes({data.TIME: self.num_records + 1, data.Y: r, data.X: r})


def _interpolate(values: np.ndarray, n: int, *, periodic: bool) -> np.ndarray:
    """Bilinear interpolation of cell-centred ``[..., m, m]`` values to ``n`` cells per side."""
    m = values.shape[-1]
    coarse = (np.arange(m) + 0.5) / m
    fine = (np.arange(n) + 0.5) / n
    if periodic:
        coarse = np.concatenate([[coarse[-1] - 1.0], coarse, [coarse[0] + 1.0]])
        values = np.concatenate([values[..., -1:], values, values[..., :1]], axis=-1)
        values = np.concatenate([values[..., -1:, :], values, values[..., :1, :]], axis=-2)
    out = np.apply_along_axis(lambda row: np.interp(fine, coarse, row), -1, values)
    return np.apply_along_axis(lambda col: np.interp(fine, coarse, col), -2, out)
