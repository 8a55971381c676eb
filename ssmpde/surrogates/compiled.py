r"""``torch.compile`` for surrogates, used only where it computes what the eager model computes.

:func:`compile_model` compiles a model, runs the compiled and the eager model on an example
input and returns the compiled one only if their outputs agree to a tolerance set by the
dtype; otherwise it warns and returns the eager model (or raises, on request). A compiler
that silently changes a surrogate's output would change every rollout and every reported
error downstream, so agreement is checked, never assumed.

Known refusals (torch 2.13, CPU): the FNO baseline under the ``inductor`` backend. Its
spectral convolution writes the kept modes into a slice of a complex buffer that is an input
of the second graph (neuraloperator's einsum ends the first), then rolls the buffer
(``fftshift``) and transforms it back; inductor loses the write and returns the roll of the
zeros, an output that differs from eager by a relative error of order one. ``aot_eager`` is
exact there. Minimal reproduction, independent of ssmpde and neuraloperator::

    def f(out, y):
        out[16:48, :3] = y                                   # write into a complex input
        return torch.view_as_real(torch.roll(out, 32, 0)) * 1

    y = torch.randn(32, 3, dtype=torch.cfloat)
    expected = f(torch.zeros(64, 33, dtype=torch.cfloat), y)
    got = torch.compile(f)(torch.zeros(64, 33, dtype=torch.cfloat), y)   # all zeros

The scans of GeoMaNO, MNO and the other SSM models are ``torch.library`` custom operators
(``torch.ops.ssmpde.*``), so dynamo traces through them without graph breaks under
``no_grad`` and ``inference_mode``. See ``docs/design_decisions.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from ssmpde.core import relative_l2

__all__ = ["CompileMismatchError", "CompileMismatchWarning", "CompiledOnFirstCall",
           "compile_backend", "compile_model",
           "compiled_difference", "default_tolerance"]

#: Largest relative L2 difference (per sample) between compiled and eager outputs accepted
#: by default, by the output's dtype: a few hundred ulps of the float's precision, what
#: reordered reductions and fused kernels give; a wrong compilation is off by far more.
TOLERANCES = {torch.float64: 1e-10, torch.float32: 1e-5, torch.float16: 5e-3,
              torch.bfloat16: 3e-2}


class CompileMismatchWarning(UserWarning):
    """Compiling a model changed its output (or failed); the eager model is used instead."""


class CompileMismatchError(RuntimeError):
    """Compiling a model changed its output (or failed), and ``on_mismatch="raise"``."""


def default_tolerance(dtype: torch.dtype) -> float:
    """The default tolerance of :func:`compile_model` for outputs of ``dtype``."""
    return TOLERANCES.get(dtype, TOLERANCES[torch.float32])


def compiled_difference(compiled: nn.Module, model: nn.Module,
                        example_inputs: Sequence[torch.Tensor]) -> float:
    """The largest per-sample relative L2 difference between the outputs of ``compiled`` and
    ``model`` on ``example_inputs`` (run without gradients, in eval mode); ``inf`` if the
    compiled output has another shape or a non-finite value where the eager one has none."""
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = model(*example_inputs)
            actual = compiled(*example_inputs)
    finally:
        model.train(training)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return float("inf")
    if not torch.equal(torch.isfinite(actual), torch.isfinite(expected)):
        return float("inf")
    finite = torch.isfinite(expected)
    difference = relative_l2(torch.where(finite, actual, 0.0), torch.where(finite, expected, 0.0))
    return float(difference.max())


def compile_model(model: nn.Module, example_inputs: Sequence[torch.Tensor], *,
                  backend: str = "inductor", tolerance: float | None = None,
                  on_mismatch: str = "warn", **options) -> nn.Module:
    """``torch.compile(model)``, checked against the eager model on an example.

    Parameters
    ----------
    model : nn.Module
        A surrogate (any module whose forward takes ``example_inputs`` and returns a tensor).
    example_inputs : sequence of torch.Tensor
        Inputs of the shapes and dtype the model will see, e.g. ``(x,)`` with
        ``x: [batch, in_channels, *grid]``. The check compiles for these shapes.
    backend : str
        ``torch.compile``'s backend: ``"inductor"`` (fused kernels, the fast one),
        ``"aot_eager"`` (traced, not fused: checks tracing, gains little).
    tolerance : float, optional
        Largest accepted per-sample relative L2 difference; by default
        :func:`default_tolerance` of the output dtype (1e-5 for float32, 1e-10 for float64).
    on_mismatch : {"warn", "raise"}
        What a difference beyond the tolerance, a non-finite value or a compiler error does:
        ``"warn"`` emits a :class:`CompileMismatchWarning` and returns ``model`` itself
        (eager), ``"raise"`` raises :class:`CompileMismatchError`.
    **options
        Passed to ``torch.compile`` (``mode``, ``dynamic``, ``fullgraph``, ...).

    Returns
    -------
    nn.Module
        The compiled module (it shares ``model``'s parameters; save and load weights through
        ``model``, whose ``state_dict`` keys it does not change), or ``model`` where compiling
        was refused.

    Raises
    ------
    ValueError
        For an unknown ``on_mismatch``.
    CompileMismatchError
        With ``on_mismatch="raise"``, where the compiled model differs or fails.

    Notes
    -----
    The check runs the forward once each way without gradients and in eval mode; the first
    compiled call compiles (seconds to minutes on a CPU), later calls reuse the code while
    shapes, dtypes and grad mode stay the same (``no_grad`` and ``inference_mode`` compile
    separately; ``torch.compile`` recompiles on its own when they change). Gradients are not
    compared: the trainer should compare a training step if it compiles one.

    Examples
    --------
    >>> from ssmpde.surrogates import build_model
    >>> model = build_model("geomano", preset="darcy", grid=(9, 9), latent_grid=(3, 3),
    ...                     width=8, depth=1).eval()
    >>> fast = compile_model(model, (torch.randn(2, 1, 9, 9),), backend="aot_eager")
    >>> fast is not model
    True
    """
    if on_mismatch not in ("warn", "raise"):
        raise ValueError(f"on_mismatch must be 'warn' or 'raise', got {on_mismatch!r}")
    example_inputs = tuple(example_inputs)
    name = type(model).__name__
    try:
        compiled = torch.compile(model, backend=backend, **options)
        difference = compiled_difference(compiled, model, example_inputs)
    except Exception as error:  # noqa: BLE001 - any compiler failure means: run eager
        return _refuse(model, f"torch.compile(backend={backend!r}) failed on {name}: "
                              f"{type(error).__name__}: {error}", on_mismatch, error)
    if tolerance is None:
        tolerance = default_tolerance(next(
            (p.dtype for p in model.parameters() if p.is_floating_point()),
            example_inputs[0].dtype))
    if not difference <= tolerance:
        return _refuse(model, f"torch.compile(backend={backend!r}) changes the output of {name}: "
                              f"relative L2 difference {difference:.3g} from eager, above the "
                              f"tolerance {tolerance:.1g}", on_mismatch)
    return compiled


def _refuse(model, message, on_mismatch, cause=None):
    if on_mismatch == "raise":
        raise CompileMismatchError(message) from cause
    warnings.warn(f"{message}; running the eager model", CompileMismatchWarning, stacklevel=3)
    return model


def compile_backend(compile: bool | str) -> str | None:
    """The ``torch.compile`` backend a ``compile`` option names: None (off), ``"inductor"``
    for True, or the backend given; a ValueError for an unknown one."""
    if compile is False or compile is None:
        return None
    if compile is True:
        return "inductor"
    if not isinstance(compile, str):
        raise ValueError(f"compile must be true, false or a torch.compile backend name, got "
                         f"{compile!r}")
    import torch._dynamo

    known = torch._dynamo.list_backends(exclude_tags=())
    if compile not in known:
        raise ValueError(f"unknown torch.compile backend {compile!r}; known: {sorted(known)}")
    return compile


class CompiledOnFirstCall(nn.Module):
    """``model`` compiled by :func:`~ssmpde.surrogates.compiled.compile_model` at its first
    call, that call's input the example it checks against eager. The parameters stay the
    bare model's (the optimiser and the checkpoint use those)."""

    def __init__(self, model: nn.Module, backend: str):
        super().__init__()
        self.model, self.backend, self.compiled = model, backend, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.compiled is None:
            self.compiled = compile_model(self.model, (x,), backend=self.backend)
        return self.compiled(x)
