"""Selective scans: the engine under every SSM surrogate.

One dispatcher per scan, one ``backend`` argument, correctness by default:

* ``"reference"``: plain loops in float64 (:mod:`.reference`), the test oracle;
* ``"cpu"``: numba kernels with a recomputing backward (:mod:`.scan_cpu`);
* ``"triton"``: Triton kernels (:mod:`.scan_triton`), compiled on CUDA tensors, or run by the
  Triton interpreter on CPU tensors when ``TRITON_INTERPRET=1``;
* ``"auto"`` (default): Triton for CUDA tensors, the CPU path otherwise.

The S4D convolutions of SS-NO (:mod:`.s4d`: kernels by Vandermonde products, applied by FFT)
have the loop recurrence :func:`.reference.s4d_ref` as their oracle.

Every backend matches the reference in values and gradients (see ``tests/kernels``). The
dispatchers validate the arguments once, before choosing a backend
(:func:`._checks.check_scan_inputs`: shapes, floating dtypes, one device, non-empty); the
backends check only their own constraints.
"""

from __future__ import annotations

import importlib
import os

from ._checks import check_scan_inputs
from .cross_scan import cross_merge, cross_merge_2d, cross_scan, cross_scan_2d
from .reference import s4d_ref, selective_scan_2d_ref, selective_scan_ref, ssd_ref
from .s4d import s4d, s4d_convolution, s4d_kernel
from .ssd import ssd_scan

__all__ = ["BACKENDS", "cross_merge", "cross_merge_2d", "cross_scan", "cross_scan_2d",
           "s4d", "s4d_convolution", "s4d_kernel", "s4d_ref", "selective_scan",
           "selective_scan_2d", "selective_scan_2d_ref", "selective_scan_ref", "ssd_ref",
           "ssd_scan"]

BACKENDS = ("auto", "reference", "cpu", "triton")


def _triton():
    """The Triton backend module; the one place its optional import is guarded."""
    try:
        return importlib.import_module(".scan_triton", __name__)
    except ImportError as error:
        raise RuntimeError("backend='triton' needs the triton package (pip install triton, or "
                           "pip install 'ssmpde[triton]') and a CUDA GPU, or TRITON_INTERPRET=1 "
                           f"for the interpreter on CPU ({error})") from error


def _resolve(backend: str, tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return "triton" if tensor.is_cuda else "cpu"
    if backend == "triton" and not tensor.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("backend='triton' on CPU tensors needs TRITON_INTERPRET=1 (set before "
                           "triton is imported); use backend='cpu' for the fast CPU path")
    if backend == "cpu" and tensor.is_cuda:
        raise RuntimeError("backend='cpu' got CUDA tensors: use backend='triton' or 'auto'")
    return backend


def selective_scan(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                   delta_softplus=True, reverse=False, initial_state=None,
                   return_last_state=False, backend: str = "auto"):
    """1D selective scan with geometric correction (semantics: :func:`selective_scan_ref`).

    Parameters
    ----------
    u, delta : ``[batch, channel, length]``
    A : ``[channel, state]``; B, C : ``[batch, state, length]`` or grouped
    ``[batch, groups, state, length]``; D, delta_bias : ``[channel]``; R : ``[channel, state]``;
    z : ``[batch, channel, length]``; initial_state : ``[batch, channel, state]``.
    backend : {"auto", "reference", "cpu", "triton"}

    Returns
    -------
    out ``[batch, channel, length]``, and the last state if ``return_last_state``.

    Raises
    ------
    ValueError
        Naming the argument, if one has the wrong shape, is not a floating-point tensor on
        ``u``'s device, or is empty; if the groups of B or C do not divide the channels, or B
        and C are both grouped with different groups (backend "cpu": also one grouped and one
        plain).
    """
    check_scan_inputs(u, delta, A, B, C, D, R, z, delta_bias, initial_state, spatial=1)
    kwargs = dict(D=D, R=R, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus,
                  reverse=reverse, initial_state=initial_state,
                  return_last_state=return_last_state)
    chosen = _resolve(backend, u)
    if chosen == "reference":
        return selective_scan_ref(u, delta, A, B, C, **kwargs)
    if chosen == "cpu":
        from .scan_cpu import selective_scan_cpu
        return selective_scan_cpu(u, delta, A, B, C, **kwargs)
    return _triton().selective_scan_triton(u, delta, A, B, C, **kwargs)


def selective_scan_2d(u, delta, A, B, C, *, D=None, R=None, z=None, delta_bias=None,
                      delta_softplus=True, backend: str = "auto"):
    """2D selective scan (semantics: :func:`selective_scan_2d_ref`); grids
    ``[batch, channel, height, width]``, B/C ``[batch, state, height, width]`` or grouped;
    ValueError as :func:`selective_scan`."""
    check_scan_inputs(u, delta, A, B, C, D, R, z, delta_bias, None, spatial=2)
    kwargs = dict(D=D, R=R, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus)
    chosen = _resolve(backend, u)
    if chosen == "reference":
        return selective_scan_2d_ref(u, delta, A, B, C, **kwargs)
    if chosen == "cpu":
        from .scan_cpu import selective_scan_2d_cpu
        return selective_scan_2d_cpu(u, delta, A, B, C, **kwargs)
    return _triton().selective_scan_2d_triton(u, delta, A, B, C, **kwargs)
