"""The one validation of a selective scan's arguments, run by the dispatchers of
:mod:`ssmpde.kernels` before they choose a backend.

Layouts (those of :mod:`.reference`): ``u, delta, z: [batch, channel, *space]``,
``A, R: [channel, state]``, ``B, C: [batch, state, *space]`` or grouped
``[batch, groups, state, *space]`` (groups dividing channel; both grouped: the same groups),
``D, delta_bias: [channel]``, ``initial_state: [batch, channel, state]`` (1D only).
Every tensor is floating point, non-empty and on ``u``'s device. The backends rely on this and
check only what is their own (Triton's power-of-two tiles, the cpu kernels' single grouping).
"""

from __future__ import annotations

import torch

__all__ = ["check_scan_inputs"]


def _space(spatial: int) -> str:
    return "length" if spatial == 1 else "height, width"


def _check_tensor(name, x, device):
    """A floating-point torch.Tensor on ``device`` (None: any), or ValueError saying how."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor; got {type(x).__name__}. "
                         f"Pass it as a floating-point tensor, e.g. torch.as_tensor({name}).")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor; got {x.dtype}. "
                         f"Convert it, e.g. {name}.float() or {name}.double().")
    if device is not None and x.device != device:
        raise ValueError(f"{name} must be on u's device {device}; got {x.device}. "
                         f"Move it with {name}.to(u.device).")


def _check_shape(name, x, layout, shape, fix):
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape [{layout}] = {list(shape)}; "
                         f"got {list(x.shape)}. {fix}")


def _groups(name, x, batch, channels, state, grid, spatial):
    """The number of groups of B or C (None if plain), or ValueError."""
    space = _space(spatial)
    plain = [batch, state, *grid]
    if x.dim() == 2 + spatial and list(x.shape) == plain:
        return None
    if (x.dim() == 3 + spatial and x.shape[1] > 0 and channels % x.shape[1] == 0
            and list(x.shape) == [batch, x.shape[1], state, *grid]):
        return x.shape[1]
    raise ValueError(
        f"{name} must have shape [batch, state, {space}] = {plain} or "
        f"[batch, groups, state, {space}] = {[batch, 'groups', state, *grid]} with "
        f"groups dividing channel={channels}; got {list(x.shape)}. Match batch and {space} to "
        f"u, state to A's second dimension, and pick groups among the divisors of {channels}.")


def check_scan_inputs(u, delta, A, B, C, D, R, z, delta_bias, initial_state, *, spatial):
    """Raise ValueError, naming the argument, its expected shape and the fix, unless the scan
    arguments fit the layouts above (``spatial``: 1 for the 1D scan, 2 for the 2D scan)."""
    space = _space(spatial)
    _check_tensor("u", u, None)  # u sets the device of the others
    device = u.device
    if u.dim() != 2 + spatial or 0 in u.shape:
        other = ("a grid [batch, channel, height, width] goes to selective_scan_2d"
                 if spatial == 1 else "a sequence [batch, channel, length] goes to selective_scan")
        raise ValueError(f"u must be a non-empty [batch, channel, {space}] tensor; got shape "
                         f"{list(u.shape)}. Add the missing dimensions (u[None] for one "
                         f"sample); {other}.")
    batch, channels, *grid = u.shape
    _check_tensor("delta", delta, device)
    _check_shape("delta", delta, f"batch, channel, {space}", u.shape, "Give one step per "
                 "element of u.")
    _check_tensor("A", A, device)
    if A.dim() != 2 or A.shape[0] != channels or A.shape[1] == 0:
        raise ValueError(f"A must have shape [channel={channels}, state] with state >= 1; got "
                         f"{list(A.shape)}. Give one row of A per channel of u.")
    state = A.shape[1]
    for name, x in (("B", B), ("C", C)):
        _check_tensor(name, x, device)
    groups_b = _groups("B", B, batch, channels, state, grid, spatial)
    groups_c = _groups("C", C, batch, channels, state, grid, spatial)
    if groups_b is not None and groups_c is not None and groups_b != groups_c:
        raise ValueError(f"B and C must have the same number of groups; got B with {groups_b} "
                         f"and C with {groups_c}. Group them alike (as mamba-ssm's "
                         f"selective_scan_fn).")
    for name, x, layout, shape, fix in (
            ("D", D, "channel", [channels], "One skip weight per channel of u."),
            ("delta_bias", delta_bias, "channel", [channels], "One bias per channel of u."),
            ("R", R, "channel, state", [channels, state], "R has A's shape."),
            ("z", z, f"batch, channel, {space}", u.shape, "The gate has u's shape."),
            ("initial_state", initial_state, "batch, channel, state", [batch, channels, state],
             "Pass the last_state of the previous scan.")):
        if x is not None:
            _check_tensor(name, x, device)
            _check_shape(name, x, layout, shape, fix)
