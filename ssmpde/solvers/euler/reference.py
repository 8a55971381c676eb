"""Plain NumPy reference of the 2D Euler step, written from the equations.

:func:`reference_step` is one MUSCL-Hancock + HLLC step (with the well-balanced gravity
reconstruction) in array code: the test oracle of the compiled kernel
(:func:`ssmpde.solvers.euler.engine.fast_step`). See ``docs/numerics/euler.md``.
"""

from __future__ import annotations

import numpy as np

from .engine import _boundary_pair
from .variables import conserved_variables, primitive_variables


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
    al, ar = np.sqrt(gamma * pl / rl), np.sqrt(gamma * pr / rr)
    sl, sr = np.minimum(ul - al, ur - ar), np.maximum(ul + al, ur + ar)
    el, er = conserved_variables(*left, gamma)[3], conserved_variables(*right, gamma)[3]
    star = (pr - pl + rl * ul * (sl - ul) - rr * ur * (sr - ur)) / (rl * (sl - ul)
                                                                     - rr * (sr - ur))

    def physical(r, u, v, p, c, e):
        m = r * u
        return np.stack([m, m * u + p, m * v, u * (e + p), m * c])

    def starred(r, u, v, p, c, e, s):
        conserved = np.stack(conserved_variables(r, u, v, p, c, gamma))
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
    U = np.stack(conserved_variables(r, u, v, p, c, gamma))
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
    return np.stack(primitive_variables(*U, gamma), axis=1)
