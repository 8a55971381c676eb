"""Contracts written once: the registry, relative L2, and the autoregressive rollout loop.

Solvers, models, training, evaluation and coupling all use these; none keeps its own copy.

* :class:`Registry`: name → class for solvers and for models, with a list of built-in modules
  imported on first use (a new PDE or model is one file plus one line in that list);
* :func:`relative_l2`: ``‖pred − true‖₂ / ‖true‖₂`` per sample, for NumPy arrays and torch
  tensors alike, optionally per field and averaged over fields (so that a large-valued field
  such as pressure does not drown a small one such as density); for a rollout, the two ways to
  score it: :func:`relative_l2_per_frame` (one error per output frame, which the per-frame
  mean averages) and :func:`pooled_relative_l2` (one error over the whole output horizon, the
  papers' rollout metric);
* :func:`autoregressive`: the one loop that feeds a model's (or a solver's) frames back as its
  input, used by training (teacher forcing, pushforward), evaluation and hybrid rollouts;
* :func:`decode_json`: every JSON document ssmpde reads back (a run's ``config.json``, a cache
  manifest, a dataset's JSON attributes), with one error naming where it came from.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["JSONFileError", "Registry", "autoregressive", "check_json_keys", "decode_json",
           "pooled_relative_l2", "relative_l2", "relative_l2_per_frame", "unknown_name"]

T = TypeVar("T")


def unknown_name(kind: str, name: str, known: Sequence[str]) -> str:
    """``unknown model 'geomamo'. Did you mean 'geomano'? Known: fno, geomano.``"""
    if not known:
        return f"unknown {kind} {name!r}: there are none to choose from."
    close = difflib.get_close_matches(str(name), list(known), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} {name!r}.{hint} Known: {', '.join(sorted(known))}."


class Registry(Generic[T]):
    """Names → classes, filled by a decorator, with built-in modules loaded on first use.

    Parameters
    ----------
    kind : str
        What is registered ("equation", "model"), for messages.
    package : str
        The package holding the built-in modules.
    builtins : sequence of str
        Module names (relative to ``package``) whose import registers the built-ins.

    Example
    -------
    >>> models = Registry("model", "ssmpde.surrogates", ("fno",))
    >>> @models.register("mine")
    ... class Mine: ...
    >>> models.get("mine") is Mine
    True
    """

    def __init__(self, kind: str, package: str, builtins: Sequence[str]) -> None:
        self.kind, self.package, self.builtins = kind, package, tuple(builtins)
        self._classes: dict[str, type[T]] = {}
        self._loaded = False

    def register(self, name: str, check: Callable[[type], None] | None = None):
        """Class decorator: make ``cls`` available as ``get(name)`` and set ``cls.name``."""

        def decorate(cls: type[T]) -> type[T]:
            if check is not None:
                check(cls)
            if name in self._classes and self._classes[name] is not cls:
                other = self._classes[name]
                raise ValueError(f"a {self.kind} named {name!r} is already registered "
                                 f"({other.__module__}.{other.__qualname__})")
            cls.name = name
            self._classes[name] = cls
            return cls

        return decorate

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self.builtins:
                importlib.import_module(f"{self.package}.{module}")

    def get(self, name: str) -> type[T]:
        """The class registered as ``name``; ValueError with a suggestion otherwise."""
        self._load()
        try:
            return self._classes[name]
        except (KeyError, TypeError):
            raise ValueError(unknown_name(self.kind, name, list(self._classes))) from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._load()
        return sorted(self._classes)


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def relative_l2(prediction, target, *, fields: bool = False, field_axis: int = 1):
    """Relative L2 error ``‖pred − true‖₂ / ‖true‖₂`` per sample.

    Parameters
    ----------
    prediction, target : array or tensor ``[batch, ...]``
        NumPy arrays or torch tensors (the result has the same kind; torch keeps gradients).
    fields : bool
        If true, the error is computed per field (index ``field_axis``) and averaged over the
        fields, so each field counts equally whatever its magnitude.
    field_axis : int
        The field axis when ``fields`` (1 for ``[batch, field, *grid]``, 2 for
        ``[batch, time, field, *grid]``).

    Returns
    -------
    array or tensor ``[batch]``
        A target that is zero everywhere gives the absolute norm of the error instead of a
        division by zero.
    """
    if fields:
        if _is_torch(target):
            pred_f, true_f = prediction.movedim(field_axis, 1), target.movedim(field_axis, 1)
            count = true_f.shape[1]
            return sum(relative_l2(pred_f[:, f], true_f[:, f]) for f in range(count)) / count
        pred_f = np.moveaxis(prediction, field_axis, 1)
        true_f = np.moveaxis(target, field_axis, 1)
        return np.mean([relative_l2(pred_f[:, f], true_f[:, f])
                        for f in range(true_f.shape[1])], axis=0)
    batch = target.shape[0]
    if _is_torch(target):
        difference = (prediction - target).reshape(batch, -1).norm(dim=1)
        norm = target.reshape(batch, -1).norm(dim=1)
        return difference / norm.clamp_min(1e-30)
    difference = np.linalg.norm(np.reshape(prediction - target, (batch, -1)), axis=1)
    norm = np.linalg.norm(np.reshape(target, (batch, -1)), axis=1)
    return difference / np.maximum(norm, 1e-300)


def relative_l2_per_frame(prediction, target):
    """The relative L2 of each output frame of a rollout: per sample and frame, per field and
    averaged over fields (:func:`relative_l2` with ``fields=True``).

    Parameters
    ----------
    prediction, target : array or tensor ``[batch, steps, field, *grid]``

    Returns
    -------
    array or tensor ``[batch, steps]``
        Its mean over the steps is the per-frame mean error of a rollout; the papers report
        :func:`pooled_relative_l2` instead.
    """
    frames = [relative_l2(prediction[:, k], target[:, k], fields=True)
              for k in range(target.shape[1])]
    if _is_torch(target):
        import torch

        return torch.stack(frames, dim=1)
    return np.stack(frames, axis=1)


def pooled_relative_l2(prediction, target, *, fields: bool = True):
    r"""The rollout error of the SSM operator papers: one relative L2 per sample over the whole
    output horizon, space and time pooled.

    .. math:: e_i = \frac{\lVert \hat u_i - u_i \rVert_2}{\lVert u_i \rVert_2},

    the norms taken over every output frame and grid point of sample :math:`i` together
    (SS-NO's "full-sequence relative error", Eq. 7; LaMO's and Transolver's
    ``test_l2_full``). The mean of :math:`e_i` over the samples is the reported number. It
    weighs each frame by its norm, so it differs from the mean of the per-frame errors
    (:func:`relative_l2_per_frame`) when the frames' norms differ (a decaying flow) or
    their errors do (a rollout drifting away).

    Parameters
    ----------
    prediction, target : array or tensor ``[batch, steps, field, *grid]``
    fields : bool
        True (default): each field's pooled error, averaged over the fields (for one field,
        the papers' number); False: fields pooled too.

    Returns
    -------
    array or tensor ``[batch]``
    """
    return relative_l2(prediction, target, fields=fields, field_axis=2)


def high_correlation_time(frames: np.ndarray, reference: np.ndarray, dt: float, *,
                          threshold: float = 0.8) -> float:
    """How long a rollout stays correlated with the reference (the PDE-Refiner metric).

    Per sample, the Pearson correlation over space (all fields together) of each frame
    with the reference frame; the high-correlation time is ``dt`` times the number of steps
    before it first drops below ``threshold``, averaged over the samples (Lippe et al.,
    "PDE-Refiner: Achieving Accurate Long Rollouts with Neural PDE Solvers", NeurIPS 2023).

    Parameters
    ----------
    frames, reference : array ``[batch, steps, field, *grid]``
    dt : float
        Time between frames.

    Returns
    -------
    float
        ``steps * dt`` for a rollout that never drops below the threshold.
    """
    frames, reference = np.asarray(frames, np.float64), np.asarray(reference, np.float64)
    if frames.shape != reference.shape or frames.ndim < 3:
        raise ValueError(f"frames {frames.shape} and reference {reference.shape} must both be "
                         "[batch, steps, field, *grid]")
    a = frames.reshape(*frames.shape[:2], -1)
    b = reference.reshape(*reference.shape[:2], -1)
    a = a - a.mean(axis=2, keepdims=True)
    b = b - b.mean(axis=2, keepdims=True)
    norms = np.linalg.norm(a, axis=2) * np.linalg.norm(b, axis=2)
    correlation = np.where(norms > 0, (a * b).sum(axis=2) / np.maximum(norms, 1e-300), 0.0)
    below = correlation < threshold
    steps = np.where(below.any(axis=1), below.argmax(axis=1), below.shape[1])
    return float(steps.mean() * dt)


def autoregressive(step: Callable[[int, Any], Any], history, num_steps: int, *,
                   feed: Callable[[int, Any], Any] | None = None):
    """Advance ``num_steps`` frames, feeding each new frame back into a sliding window.

    Parameters
    ----------
    step : callable ``(k, window) -> frame``
        Makes frame ``k`` (0-based) from the current window ``[batch, window, field, *grid]``;
        returns ``[batch, field, *grid]``.
    history : array or tensor ``[batch, window, field, *grid]``
        The initial window (NumPy or torch; the result has the same kind).
    num_steps : int
    feed : callable ``(k, frame) -> frame``, optional
        What enters the window after step ``k``: the frame itself by default; teacher forcing
        feeds the true frame, pushforward a detached one.

    Returns
    -------
    array or tensor ``[batch, num_steps, field, *grid]``
        The frames ``step`` made (before ``feed``).
    """
    torch_mode = _is_torch(history)
    if torch_mode:
        import torch

        stack = lambda frames: torch.stack(frames, dim=1)  # noqa: E731
    else:
        stack = lambda frames: np.stack(frames, axis=1)  # noqa: E731
    size = history.shape[1]
    window = list(history.unbind(1) if torch_mode else np.moveaxis(history, 1, 0))
    out = []
    for k in range(int(num_steps)):
        frame = step(k, stack(window[-size:]))
        out.append(frame)
        window.append(frame if feed is None else feed(k, frame))
    if not out:
        return history[:, :0]
    return stack(out)


_SIZES = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40, "P": 2 ** 50}


def parse_bytes(text: str | int, kind: str = "memory") -> int:
    """``"8G"`` → 8 GiB, ``"512M"``, ``"1.5T"``, or plain bytes; ValueError otherwise (naming
    the ``kind`` of size: memory, disk)."""
    if isinstance(text, (int, np.integer)) and not isinstance(text, bool):
        value = int(text)
    else:
        raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
        unit = raw[-1:] if raw[-1:] in _SIZES and raw[-1:] else ""
        try:
            value = int(float(raw[: len(raw) - len(unit)]) * _SIZES[unit])
        except (ValueError, OverflowError):
            raise ValueError(f"cannot read the {kind} size {text!r}: use bytes or a number "
                             "with K, M, G, T or P (e.g. 8G)") from None
    if value <= 0:
        raise ValueError(f"a {kind} size must be positive, got {text!r}")
    return value


def memory_limit(limit: str | int | None = None) -> int:
    """The most memory a run may plan to use at once, in bytes.

    ``limit`` if given; else the environment variable ``SSMPDE_MAX_MEMORY`` (e.g. ``8G``);
    else 80 % of the memory available now.
    """
    import os

    if limit is not None:
        return parse_bytes(limit)
    if os.environ.get("SSMPDE_MAX_MEMORY"):
        return parse_bytes(os.environ["SSMPDE_MAX_MEMORY"])
    import psutil

    return int(0.8 * psutil.virtual_memory().available)


def format_bytes(nbytes: float) -> str:
    """``nbytes`` as a message shows it: binary units, three significant digits.

    The one byte formatter of the package (memory limits, disk space, file sizes).

    Example
    -------
    >>> format_bytes(512), format_bytes(384 * 2 ** 20), format_bytes(16e9)
    ('512 B', '384 MiB', '14.9 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(nbytes) < 1000 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    raise AssertionError  # pragma: no cover


def counted(count: int, noun: str) -> str:
    """``count`` and ``noun``, in the plural unless there is exactly one.

    >>> counted(1, "sample"), counted(4, "step"), counted(0, "frame")
    ('1 sample', '4 steps', '0 frames')
    """
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) of at least ``minimum``, else a
    ValueError naming the argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class JSONFileError(ValueError):
    """A JSON document ssmpde reads back (a run's ``config.json``, a cache manifest, a dataset's
    JSON attribute) cannot be decoded or holds the wrong JSON types."""


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "integer", float: "number",
               bool: "boolean", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _is_a(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds and object not in kinds:
        return False  # JSON true is not a number
    return isinstance(value, kinds)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_JSON_TYPES.get(k, k.__name__) for k in kinds)


def decode_json(source: str | os.PathLike, *, text: str | bytes | None = None,
                expect: type | tuple[type, ...] = dict,
                keys: Mapping[str, type | tuple[type, ...]] | None = None,
                error: type[Exception] = JSONFileError, fix: str = "") -> Any:
    """The JSON document ``source`` (a file, read here), or ``text`` read from ``source``
    (then a description such as ``"global attribute 'ssmpde_config'"``), checked for its
    top-level type ``expect`` and, for an object, the types of the ``keys`` it must have.

    Every failure is one ``error`` (default :class:`JSONFileError`) naming ``source``, then
    ``fix``: invalid JSON, text that is not UTF-8, nesting too deep for the decoder (Python's
    RecursionError), a number too long to convert (Python's advice to raise
    ``sys.set_int_max_str_digits`` is not passed on), the wrong top-level type, a missing or
    ill-typed key. JSON ``true`` is not accepted as a number. OSError (a file that cannot be
    read) is the caller's.

    Example
    -------
    >>> decode_json("example", text='{"epoch": 3}', keys={"epoch": int})
    {'epoch': 3}
    """
    where = os.fspath(source)
    tail = f": {fix}" if fix else ""
    raw = Path(where).read_bytes() if text is None else text
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise error(f"{where} is not valid JSON ({exc}){tail}") from None
    except UnicodeDecodeError:
        raise error(f"{where} is not valid JSON (it is not UTF-8 text){tail}") from None
    except RecursionError:
        raise error(f"{where} is not valid ssmpde JSON (it is nested too deeply to "
                    f"decode){tail}") from None
    except ValueError:  # json's int(): a number with more digits than Python converts
        raise error(f"{where} is not valid ssmpde JSON (it holds a number too long to "
                    f"read){tail}") from None
    if not _is_a(value, expect):
        raise error(f"{where} must hold a JSON {_kind_name(expect)}, got "
                    f"{_json_type(value)}{tail}")
    if keys:
        check_json_keys(value, keys, where=where, error=error, fix=fix)
    return value


def check_json_keys(value: Any, keys: Mapping[str, type | tuple[type, ...]], *, where: str,
                    error: type[Exception] = JSONFileError, fix: str = "") -> None:
    """Check that ``value`` (a decoded JSON document or a part of one, described by ``where``)
    is an object holding ``keys`` of the JSON types given; one ``error`` naming ``where``, the
    key and both types otherwise, then ``fix`` (as :func:`decode_json`'s)."""
    tail = f": {fix}" if fix else ""
    if not _is_a(value, dict):
        raise error(f"{where} must hold a JSON object, got {_json_type(value)}{tail}")
    for key, kind in keys.items():
        if key not in value:
            raise error(f"{where} lacks the key {key!r}{tail}")
        if not _is_a(value[key], kind):
            raise error(f"{where}: {key!r} must be a JSON {_kind_name(kind)}, got "
                        f"{_json_type(value[key])}{tail}")
