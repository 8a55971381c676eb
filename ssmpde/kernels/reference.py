"""Slow, obviously-correct selective scans: the oracle every fast backend is tested against.

Plain loops over the sequence (or grid), written from the equations of
``docs/kernels/selective_scan.md``, ``docs/kernels/ssd.md`` and ``docs/kernels/s4d.md`` with
no algebraic shortcuts. Computed in float64 whatever the input dtype (results are cast back),
and differentiable through ordinary torch autograd, so ``torch.autograd.gradcheck`` applies
directly.

Shapes (fixed once; no layout flags):

* 1D: ``u, delta, z: [batch, channel, length]``, ``A, R: [channel, state]``,
  ``B, C: [batch, state, length]`` or grouped ``[batch, groups, state, length]`` (channel
  ``d`` reads group ``d // (channel // groups)``), ``D, delta_bias: [channel]``.
* 2D: the same with ``length`` replaced by ``height, width``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["discretize", "s4d_ref", "selective_scan_2d_ref", "selective_scan_ref", "ssd_ref"]


def _grouped(x: torch.Tensor, channels: int, spatial: int) -> torch.Tensor:
    """B or C as ``[batch, channel, state, *space]`` (grouped inputs repeated per channel;
    shapes as checked by :func:`ssmpde.kernels._checks.check_scan_inputs`)."""
    if x.dim() == 2 + spatial:  # [batch, state, *space]: one group shared by every channel
        return x.unsqueeze(1).expand(x.shape[0], channels, *x.shape[1:])
    return x.repeat_interleave(channels // x.shape[1], dim=1)


def discretize(u, delta, A, B, *, delta_bias=None, delta_softplus=True, spatial=1):
    """Zero-order hold on A, Euler on B (Mamba S6).

    Returns
    -------
    dt : ``[batch, channel, *space]``, Δ = softplus(delta + delta_bias) (threshold 20).
    A_bar : ``[batch, channel, state, *space]``, exp(Δ A).
    Bx_bar : ``[batch, channel, state, *space]``, Δ B u.
    """
    dt = delta
    if delta_bias is not None:
        dt = dt + delta_bias.reshape(-1, *([1] * spatial))
    if delta_softplus:
        dt = F.softplus(dt, beta=1.0, threshold=20.0)
    channels = u.shape[1]
    a = A.reshape(1, channels, A.shape[1], *([1] * spatial))
    A_bar = torch.exp(dt.unsqueeze(2) * a)
    Bx_bar = dt.unsqueeze(2) * _grouped(B, channels, spatial) * u.unsqueeze(2)
    return dt, A_bar, Bx_bar


def _finish(y, u, Bx_bar, C, D, R, z, spatial):
    """y = Σ_n (C h − R B̄x) + D u, gated by silu(z); ``y`` here is Σ_n C h already."""
    channels = u.shape[1]
    if R is not None:
        r = R.reshape(1, channels, R.shape[1], *([1] * spatial))
        y = y - (r * Bx_bar).sum(dim=2)
    if D is not None:
        y = y + D.reshape(1, channels, *([1] * spatial)) * u
    if z is not None:
        y = y * F.silu(z)
    return y


def _float64(*tensors):
    return [None if t is None else t.to(torch.float64) for t in tensors]


def selective_scan_ref(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                       delta_softplus=True, reverse=False, initial_state=None,
                       return_last_state=False):
    r"""1D selective scan with GeoMaNO's geometric correction, by a plain loop.

    .. math::
        h_l = \bar A_l h_{l-1} + \bar B_l x_l,\qquad
        y_l = \sum_n (C_l h_l - R\,\bar B_l x_l) + D x_l,\qquad
        \text{out} = y \cdot \mathrm{silu}(z)

    with Δ = softplus(delta + delta_bias), Ā = exp(ΔA), B̄x = Δ B u (kernels.md; GeoMaNO Eq. 9).

    Parameters
    ----------
    u, delta : ``[batch, channel, length]``
    A : ``[channel, state]`` (negative)
    B, C : ``[batch, state, length]`` or ``[batch, groups, state, length]``
    D, delta_bias : ``[channel]``, optional
    R : ``[channel, state]``, optional (None: plain Mamba)
    z : ``[batch, channel, length]``, optional
    reverse : bool
        Run the recurrence from the last position to the first.
    initial_state : ``[batch, channel, state]``, optional
        h before the first processed position (zero by default).
    return_last_state : bool
        Also return h after the last processed position.

    Returns
    -------
    out : ``[batch, channel, length]`` in ``u``'s dtype; and ``last_state``
    ``[batch, channel, state]`` (in ``u``'s dtype) if requested.
    """
    dtype = u.dtype
    u, delta, A, B, C, D, R, z, delta_bias, initial_state = _float64(
        u, delta, A, B, C, D, R, z, delta_bias, initial_state)
    _, A_bar, Bx_bar = discretize(u, delta, A, B, delta_bias=delta_bias,
                                  delta_softplus=delta_softplus, spatial=1)
    C_full = _grouped(C, u.shape[1], 1)
    batch, channels, length = u.shape
    h = A_bar.new_zeros(batch, channels, A.shape[1]) if initial_state is None else initial_state
    ys = [None] * length
    order = range(length - 1, -1, -1) if reverse else range(length)
    for l in order:
        h = A_bar[..., l] * h + Bx_bar[..., l]
        ys[l] = (C_full[..., l] * h).sum(dim=-1)
    out = _finish(torch.stack(ys, dim=-1), u, Bx_bar, C, D, R, z, spatial=1).to(dtype)
    return (out, h.to(dtype)) if return_last_state else out


def selective_scan_2d_ref(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                          delta_softplus=True):
    r"""2D selective scan (2DMamba / GeoMaNO Eq. 4, 10), by plain loops over the grid.

    Per (batch, channel, state), with the same Ā at both passes:

    .. math::
        g_{i,j} = \bar A_{i,j}\, g_{i,j-1} + \bar B x_{i,j},\qquad
        h_{i,j} = \bar A_{i,j}\, h_{i-1,j} + g_{i,j},\qquad
        y_{i,j} = \sum_n (C_{i,j} h_{i,j} - R\,\bar B x_{i,j}) + D u_{i,j}

    Every source reaches a target along one path (its own row, then down the column): with
    constant Ā the weight is Ā to the Manhattan distance (GeoMaNO Eq. 23). (Beware a public
    "sequential reference" h = Ā h_left + Ā h_up + b: it counts paths and is a different
    recurrence.)

    Parameters
    ----------
    u, delta, z : ``[batch, channel, height, width]``
    A, R : ``[channel, state]``; D, delta_bias : ``[channel]``
    B, C : ``[batch, state, height, width]`` or ``[batch, groups, state, height, width]``

    Returns
    -------
    ``[batch, channel, height, width]`` in ``u``'s dtype.
    """
    dtype = u.dtype
    u, delta, A, B, C, D, R, z, delta_bias = _float64(u, delta, A, B, C, D, R, z, delta_bias)
    _, A_bar, Bx_bar = discretize(u, delta, A, B, delta_bias=delta_bias,
                                  delta_softplus=delta_softplus, spatial=2)
    C_full = _grouped(C, u.shape[1], 2)
    batch, channels, height, width = u.shape
    state = A.shape[1]
    rows = []
    for i in range(height):  # horizontal pass along each row
        g = A_bar.new_zeros(batch, channels, state)
        row = []
        for j in range(width):
            g = A_bar[..., i, j] * g + Bx_bar[..., i, j]
            row.append(g)
        rows.append(row)
    y = [[None] * width for _ in range(height)]
    for j in range(width):  # vertical pass down each column
        h = A_bar.new_zeros(batch, channels, state)
        for i in range(height):
            h = A_bar[..., i, j] * h + rows[i][j]
            y[i][j] = (C_full[..., i, j] * h).sum(dim=-1)
    y = torch.stack([torch.stack(row, dim=-1) for row in y], dim=-2)
    return _finish(y, u, Bx_bar, C, D, R, z, spatial=2).to(dtype)


def s4d_ref(u, log_dt, damping, frequency, C, D=None):
    """S4D layer as the loop recurrence (oracle of :mod:`ssmpde.kernels.s4d`), in float64.

    ``u [batch, H, L]``; ``A = −softplus(damping) + i·frequency`` ``[H, N]``; ``Δ = exp(log_dt)``;
    zero-order hold ``Ā = exp(ΔA)``, ``B̄ = (Ā − 1)/A``; ``C [S, H, N, 2]`` (real, imaginary).

    * forward (``C[0]``): ``h_l = Ā h_{l−1} + B̄ u_l``, ``y_l = 2 Re Σ_n C_n h_l``;
    * backward (``C[1]``, if ``S = 2``): ``g_{L−1} = 0``, ``g_l = Ā g_{l+1} + B̄ u_{l+1}``,
      ``y_l += 2 Re Σ_n C^b_n g_l`` (the positions strictly after ``l``);
    * ``y += D u``.
    """
    dtype = u.dtype
    u, log_dt, damping, frequency, C = (t.to(torch.float64) for t in
                                        (u, log_dt, damping, frequency, C))
    A = torch.complex(-F.softplus(damping), frequency)
    dA = torch.exp(torch.exp(log_dt)[:, None] * A)           # [H, N]
    B_bar = (dA - 1) / A
    Cc = torch.complex(C[..., 0], C[..., 1])                  # [S, H, N]
    batch, channels, length = u.shape
    h = torch.zeros(batch, channels, A.shape[1], dtype=torch.complex128, device=u.device)
    ys = []
    for l in range(length):
        h = dA * h + B_bar * u[:, :, l, None]
        ys.append(2 * (Cc[0] * h).sum(-1).real)
    y = torch.stack(ys, dim=-1)
    if C.shape[0] == 2:
        g = torch.zeros_like(h)
        back = [None] * length
        for l in range(length - 1, -1, -1):
            back[l] = 2 * (Cc[1] * g).sum(-1).real
            g = dA * g + B_bar * u[:, :, l, None]
        y = y + torch.stack(back, dim=-1)
    if D is not None:
        y = y + D.to(torch.float64)[:, None] * u
    return y.to(dtype)


def ssd_ref(x, dt, A, B, C, *, D=None, z=None, dt_bias=None, dt_softplus=True,
            initial_state=None, return_last_state=False):
    r"""Mamba-2's multi-head scan (SSD) by a plain loop over the sequence, in float64.

    Per head ``h`` (scalar decay ``A_h``), with ``Δ = softplus(dt + dt_bias)`` (threshold 20;
    ``dt + dt_bias`` if ``dt_softplus`` is False) and head ``h`` reading group
    ``h // (heads // groups)`` of B and C:

    .. math::
        H_t = e^{Δ_t A_h} H_{t-1} + Δ_t\, x_t B_t^{\mathsf T},\qquad
        y_t = H_t C_t + D x_t,\qquad \text{out}_t = y_t \cdot \mathrm{silu}(z_t)

    with the state ``H_t`` a ``head_dim × d_state`` matrix (``kernels.md``, "SSD"; Dao & Gu,
    "Transformers are SSMs", ICML 2024). The oracle of :func:`ssmpde.kernels.ssd.ssd_scan`.

    Parameters
    ----------
    x : ``[batch, length, heads, head_dim]``
    dt : ``[batch, length, heads]``
    A : ``[heads]`` (negative)
    B, C : ``[batch, length, groups, d_state]``, groups dividing heads
    D : ``[heads]`` or ``[heads, head_dim]``, optional
    z : ``[batch, length, heads, head_dim]``, optional
    dt_bias : ``[heads]``, optional
    initial_state : ``[batch, heads, head_dim, d_state]``, optional (zero by default)
    return_last_state : bool
        Also return ``H`` after the last position.

    Returns
    -------
    out : ``[batch, length, heads, head_dim]`` in ``x``'s dtype; and ``last_state``
    ``[batch, heads, head_dim, d_state]`` (in ``x``'s dtype) if requested.
    """
    dtype = x.dtype
    x, dt, A, B, C, D, z, dt_bias, initial_state = _float64(
        x, dt, A, B, C, D, z, dt_bias, initial_state)
    batch, _, heads, head_dim = x.shape
    per_group = heads // B.shape[2]
    B = B.repeat_interleave(per_group, dim=2)              # [batch, length, heads, d_state]
    C = C.repeat_interleave(per_group, dim=2)
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = F.softplus(dt, beta=1.0, threshold=20.0)
    decay = torch.exp(dt * A)                              # [batch, length, heads]
    state = (x.new_zeros(batch, heads, head_dim, B.shape[-1]) if initial_state is None
             else initial_state)
    ys = []
    # unbind, not x[:, t]: indexing inside the loop makes autograd add a full-size zero
    # gradient per step, O(length²) work in the backward
    for a_t, dt_t, x_t, b_t, c_t in zip(decay.unbind(1), dt.unbind(1), x.unbind(1),
                                        B.unbind(1), C.unbind(1)):
        state = (a_t[..., None, None] * state
                 + dt_t[..., None, None] * x_t[..., :, None] * b_t[..., None, :])
        ys.append((state * c_t[..., None, :]).sum(dim=-1))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + (D[:, None] if D.dim() == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    y = y.to(dtype)
    return (y, state.to(dtype)) if return_last_state else y
