r"""Compiled kernels of the 2D Euler solver: HLLC fluxes and the fused MUSCL-Hancock step.

One step of every active sample runs in :data:`_STEP` (parallel over blocks of rows, with a
serial twin for small grids): reconstruction, Hancock half step, HLLC fluxes through the x-
and y-faces, the conserved update with the gravity sources, new primitives and CFL speeds.
:func:`_load` gives the conserved variables and CFL speeds of a primitive state. The
arithmetic is that of :func:`ssmpde.solvers.euler.reference_step`, cell by cell; the
engine that drives these kernels is :mod:`ssmpde.solvers.euler.engine`. See
``docs/numerics/euler.md``.

Layout: primitive states ``W`` and conserved states ``U`` are ``[batch, 5, ny, nx]``
float64, fields (ρ, u, v, p, c) and (ρ, ρu, ρv, E, ρc); ``phi`` is ``[batch or 1, ny, nx]``.
"""

from __future__ import annotations

import math
import types

import numba

from .variables import conserved_variables, primitive_variables

#: Boundary kinds: periodic; outflow (transmissive, zero-gradient ghost cells); reflective
#: (a wall: ghost cells mirror the normal velocity).
BOUNDARIES = ("periodic", "outflow", "reflective")

_BOUNDARY_CODES = {name: code for code, name in enumerate(BOUNDARIES)}
_PERIODIC, _OUTFLOW, _REFLECTIVE = 0, 1, 2
# Slots of a block's scratch buffer (rows of ``[slots, nx + 1]``): face states of the row
# being reconstructed (x-left, x-right, y-bottom), two rolling rows of y-top states, flux
# accumulators and momentum sources (parity of the row), and the x-fluxes of one row.
_XL, _XR, _YB, _YT, _ACC, _SRC, _FX = 0, 5, 10, 15, 25, 35, 39
_SLOTS = 44

_JIT = dict(cache=True, error_model="numpy")
#: The one primitive ↔ conserved map (:mod:`ssmpde.solvers.euler.variables`) on scalars.
_conserved = numba.njit(**_JIT)(conserved_variables)
_primitive = numba.njit(**_JIT)(primitive_variables)


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
    al = math.sqrt(gamma * pl / rl)
    ar = math.sqrt(gamma * pr / rr)
    sl = min(ul - al, ur - ar)
    sr = max(ul + al, ur + ar)
    if sl >= 0.0:
        m = rl * ul
        e = _conserved(rl, ul, vl, pl, cl, gamma)[3]
        return m, m * ul + pl, m * vl, ul * (e + pl), m * cl
    if sr <= 0.0:
        m = rr * ur
        e = _conserved(rr, ur, vr, pr, cr, gamma)[3]
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
    energy = density * (_conserved(r, u, v, p, c, gamma)[3] / r
                        + (star - u) * (star + p / m_rel))
    m = density * star
    return m, m * star + pressure, m * v, star * (energy + pressure), m * c


@numba.njit(**_JIT)
def _reconstruct_row(W, phi, gravity, b, pb, j, bx, by, mc, gamma, lx, ly, buf,
                     top):  # pragma: no cover (compiled)
    """Half-step face states of row ``j`` of sample ``b`` into ``buf``; see
    :func:`~ssmpde.solvers.euler.reference.reference_step` for the equations (this is the
    same arithmetic, cell by cell).

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
        _, u, v, p, c = _primitive(m0, m1, m2, m3, m4, gamma)
        Wnew[b, 0, j, i] = m0
        Wnew[b, 1, j, i] = u
        Wnew[b, 2, j, i] = v
        Wnew[b, 3, j, i] = p
        Wnew[b, 4, j, i] = c
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
            # element by element: an array assignment would compile numba's shape-mismatch
            # error path (2.5 s of the first compile)
            for v in range(W.shape[1]):
                for j in range(start, stop):
                    for i in range(W.shape[3]):
                        Wnew[b, v, j, i] = W[b, v, j, i]
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
            q0, q1, q2, q3, q4 = _conserved(r, u, v, p, W[b, 4, j, i], gamma)
            U[b, 0, j, i] = q0
            U[b, 1, j, i] = q1
            U[b, 2, j, i] = q2
            U[b, 3, j, i] = q3
            U[b, 4, j, i] = q4
            a = math.sqrt(gamma * p / r)
            s = max((abs(u) + a) / dx, (abs(v) + a) / dy)
            if not (r > 0.0 and p > 0.0 and s < math.inf):
                failed = 1
            elif s > fastest:
                fastest = s
        speed[b, j] = fastest
        bad[b, j] = failed

