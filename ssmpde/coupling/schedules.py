"""Rollout schedules as named objects: which component advances each step of a hybrid rollout.

The built-in schedules, each one class registered by name (the name is its kind in reports):

* ``"solver"`` (also ``solver-only``) and ``"surrogate"`` (also ``surrogate-only``): one
  component every step. The surrogate alone is reported as the learned stepper's kind:
  ``surrogate``, or ``corrected`` for a corrected coarse solver (named by its label,
  ``corrected 2x5``);
* ``"fixed"``: a repeating pattern ``"surrogate:4,solver:1"`` (four surrogate steps, then
  the solver re-anchors, and so on);
* ``"checks"``: ``"adaptive"``, the surrogate proposes every step, and the step goes to the
  solver (recorded as ``fallback``, with the reason) when the proposal fails a physical check
  the solver declares (:class:`ssmpde.solvers.base.Checks`: non-finite values, drift of a
  conserved mean, loss of positivity, growth of the mean square beyond a bound);
* ``"adaptive"``: ``"adaptive:TOL"`` (or ``"adaptive:TOL:INDICATOR"``), error control. The
  surrogate proposes every step; an error indicator (:mod:`ssmpde.coupling.indicators`)
  estimates the proposal's relative L2 error, and the solver takes the step unless the
  estimate (largest over the batch) is below ``TOL``. ``TOL = 0`` is the solver alone,
  ``inf`` the surrogate;
* ``"parareal"``: ``"parareal:SLICES[:ITERATIONS[:TOL]]"``, parareal with the surrogate as
  the coarse and the solver as the fine propagator (:mod:`ssmpde.coupling.parareal`).

A schedule (:class:`BaseSchedule`) knows how it is written (``parse``, ``text``), its kind in
reports (``kind``) and how it runs (``run``). Most choose per step: a :class:`Schedule`
says which component proposes (:meth:`Schedule.component`) and whether a surrogate proposal
is kept (:meth:`Schedule.reviewer`); parareal runs the rollout as a whole.
A new schedule is one class and its ``@register_schedule("name")`` line; no caller tests
which schedule it holds. See ``docs/hybrid.md``.
"""

from __future__ import annotations

import abc
import time as _time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ssmpde.core import Registry, autoregressive
from ssmpde.solvers.base import Checks, SolverDivergedError

from .indicators import DEFAULT_INDICATOR, INDICATORS, make_indicator
from .parareal import PararealInfo, parareal
from .steps import Conditions, advance

__all__ = ["Adaptive", "BaseSchedule", "CheckedAdaptive", "HybridResult", "HybridRolloutError",
           "Parareal", "Pattern", "Rollout", "Schedule", "SolverOnly", "SurrogateOnly",
           "as_schedule", "describe_schedules", "list_schedules", "parse_schedule",
           "register_schedule"]

#: The components a step's frame can come from (``HybridResult.source``).
SOLVER, SURROGATE, FALLBACK, PARAREAL = "solver", "surrogate", "fallback", "parareal"


class HybridRolloutError(ValueError):
    """The solver cannot continue from frames the surrogate made (a fixed schedule)."""


@dataclass
class HybridResult:
    """A hybrid rollout: the frames, who made each, what it cost, how far it is off.

    Attributes
    ----------
    frames : array ``[batch, num_steps, field, *grid]``
        The new frames (the initial history excluded).
    times : array ``[num_steps]``
        Physical time of each frame.
    source : list of str
        Per step: ``solver``, ``surrogate``, ``fallback`` or ``parareal``.
    reasons : list of str or None
        Per step: why a fallback happened.
    seconds : dict
        Wall time per component (``solver``, ``surrogate``; the rejected surrogate proposals
        of fallback steps count as surrogate time).
    errors : array ``[num_steps]`` or None
        Relative L2 against the reference trajectory per step (mean over the batch).
    reference_seconds : float or None
        Wall time of the solver-only reference run.
    estimates : list of float or None
        ``"adaptive:TOL"``: per step, the indicator's estimate of the proposal's error
        (largest over the batch; None where the surrogate did not propose).
    parareal : PararealInfo or None
        Parareal: iterations, changes, fine steps, serial and wall seconds.
    wall_seconds : float
        Wall time of the rollout (parareal: with its parallel fine propagations).
    """

    frames: np.ndarray
    times: np.ndarray
    source: list[str]
    reasons: list[str | None]
    seconds: dict[str, float] = field(default_factory=dict)
    errors: np.ndarray | None = None
    reference_seconds: float | None = None
    estimates: list[float | None] | None = None
    parareal: PararealInfo | None = None
    wall_seconds: float | None = None

    @property
    def steps(self) -> dict[str, int]:
        counts = {name: self.source.count(name) for name in (SOLVER, SURROGATE, FALLBACK)}
        if PARAREAL in self.source:
            counts[PARAREAL] = self.source.count(PARAREAL)
        return counts


@dataclass
class Rollout:
    """One hybrid rollout as a schedule runs it: the two steppers, the start, the inputs and
    the options of :func:`~ssmpde.coupling.hybrid.hybrid_rollout`; ``seconds`` collects the
    wall time of each component (a schedule may add its own, e.g. ``indicator``)."""

    solver: Any
    surrogate: Any
    time: float
    parameters: Mapping[str, np.ndarray] | Conditions | None
    checks: Checks
    label: str
    indicator: Any = None
    coarse: Any = None
    second: Any = None
    executor: Any = None
    seconds: dict[str, float] = field(default_factory=lambda: {SOLVER: 0.0, SURROGATE: 0.0})

    def times(self, num_steps: int) -> np.ndarray:
        """The physical times of the ``num_steps`` new frames."""
        return self.time + self.solver.dt * np.arange(1, num_steps + 1)


#: ``review(window, proposal, time) -> (why it is rejected or None, error estimate or None)``
Reviewer = Callable[[np.ndarray, np.ndarray, float], tuple[str | None, float | None]]


class BaseSchedule(abc.ABC):
    """A rollout schedule: a frozen, comparable object registered by name, that runs a
    whole rollout (:meth:`run`). Most schedules choose a component per step: they derive
    from :class:`Schedule`; parareal runs the rollout as a whole and derives from this.

    Class attributes
    ----------------
    name : str
        Registry name (set by :func:`register_schedule`), also its kind in reports.
    syntax : str
        How it is written, for help and errors (``"adaptive:TOL[:INDICATOR]"``).
    summary : str
        What it does, in a few words, for help (:func:`describe_schedules`).
    """

    name: ClassVar[str] = ""
    syntax: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    @classmethod
    @abc.abstractmethod
    def parse(cls, text: str) -> BaseSchedule | None:
        """The schedule ``text`` (stripped, lower case) writes if it is one of this class,
        else None; ValueError for a malformed one of this class. The built-in classes
        recognise disjoint texts, so the order they are tried in does not matter."""

    @abc.abstractmethod
    def text(self) -> str:
        """Its text: :func:`parse_schedule` of it gives a schedule that runs the same."""

    def kind(self, learned: str = SURROGATE) -> str:
        """Its kind in reports; ``learned`` is the learned stepper's (``surrogate`` or
        ``corrected``)."""
        return self.name

    def label(self, text: str, stepper) -> str:
        """The report's name of its row with ``stepper``, given as ``text``."""
        return text

    @abc.abstractmethod
    def run(self, run: Rollout, history: np.ndarray, num_steps: int) -> HybridResult:
        """``num_steps`` steps from ``history`` (checked)."""


class Schedule(BaseSchedule):
    """A schedule that chooses, per step, which component proposes (:meth:`component`) and
    whether a surrogate proposal is kept (:meth:`reviewer`); :meth:`run` steps through."""

    @abc.abstractmethod
    def component(self, step: int) -> str:
        """Which component proposes step ``step`` (0-based): ``"solver"`` or ``"surrogate"``."""

    def reviewer(self, run: Rollout) -> Reviewer | None:
        """What judges a surrogate proposal in ``run`` (None: every proposal is kept)."""
        return None

    def run(self, run: Rollout, history: np.ndarray, num_steps: int) -> HybridResult:
        """``num_steps`` steps from ``history`` (checked), one component at a time."""
        solver, surrogate, seconds = run.solver, run.surrogate, run.seconds
        review = self.reviewer(run)
        source: list[str] = []
        reasons: list[str | None] = []
        estimates: list[float | None] = []

        def step(k: int, window: np.ndarray) -> np.ndarray:
            now = run.time + k * solver.dt
            component = self.component(k)
            reason = estimate = None
            started = _time.perf_counter()
            if component == SURROGATE:
                frame = advance(surrogate, window, now, run.parameters, solver.fields)
                seconds[SURROGATE] += _time.perf_counter() - started
                if review is not None:
                    reason, estimate = review(window, frame, now)
                if reason is not None:
                    component = FALLBACK
                    started = _time.perf_counter()
            if component != SURROGATE:
                try:
                    frame = advance(solver, window, now, run.parameters)
                except (ValueError, SolverDivergedError) as error:
                    if SURROGATE not in source[-solver.window:]:
                        raise
                    # A fixed schedule handed the solver an unphysical surrogate frame
                    # (negative density, say): say so, and name the schedule that would have
                    # caught it.
                    raise HybridRolloutError(
                        f"step {k + 1} of schedule {run.label!r}: the solver cannot continue "
                        f"from the surrogate's frames ({error}); the adaptive schedule checks "
                        "every surrogate frame and falls back to the solver") from error
                seconds[SOLVER] += _time.perf_counter() - started
            source.append(component)
            reasons.append(reason)
            estimates.append(estimate)
            return frame

        frames = autoregressive(step, history, num_steps)
        return HybridResult(frames, run.times(num_steps), source, reasons, seconds,
                            estimates=estimates)


def _check_schedule_class(cls: type) -> None:
    if not (isinstance(cls, type) and issubclass(cls, BaseSchedule)):
        raise TypeError(f"@register_schedule decorates Schedule subclasses, got {cls!r}")


_SCHEDULES: Registry[BaseSchedule] = Registry("schedule", __package__, ())


def register_schedule(name: str) -> Callable[[type[BaseSchedule]], type[BaseSchedule]]:
    """Class decorator: make a :class:`Schedule` subclass one :func:`parse_schedule` knows;
    ``name`` is its kind in reports."""
    return _SCHEDULES.register(name, _check_schedule_class)


def list_schedules() -> list[type[BaseSchedule]]:
    """The registered schedule classes, by name."""
    return [_SCHEDULES.get(name) for name in _SCHEDULES.names()]


def describe_schedules() -> list[tuple[str, str]]:
    """``(syntax, summary)`` of each registered schedule, by name: how it is written and
    what it does, for help texts (``ssmpde rollout --help``)."""
    return [(cls.syntax, cls.summary) for cls in list_schedules()]


def parse_schedule(schedule: str) -> BaseSchedule:
    """The schedule a text writes: ``"surrogate:4,solver:1"`` → ``Pattern(...)``,
    ``"adaptive:1e-3[:coarse]"`` → :class:`Adaptive`, ``"parareal:5[:2[:1e-4]]"`` →
    :class:`Parareal`, ... (every registered class is asked; ValueError listing them when
    none recognises it)."""
    if not isinstance(schedule, str):
        raise TypeError(f"a schedule is its text or a Schedule, got {type(schedule).__name__}")
    text = schedule.strip().lower()
    for cls in list_schedules():
        parsed = cls.parse(text)
        if parsed is not None:
            return parsed
    forms = ", ".join(f"'{cls.syntax}'" for cls in list_schedules())
    raise ValueError(f"bad schedule {schedule!r}: use one of {forms}")


def as_schedule(schedule: str | BaseSchedule) -> BaseSchedule:
    """A :class:`Schedule` as it is; a text parsed (:func:`parse_schedule`)."""
    return schedule if isinstance(schedule, BaseSchedule) else parse_schedule(schedule)


def _number(text: str, schedule: str, kind=float):
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"bad schedule {schedule!r}: {text!r} is not a number") from None
    if not value >= 0:
        raise ValueError(f"bad schedule {schedule!r}: {text!r} must be >= 0")
    return value


class _Alone(Schedule):
    """One component every step: the one the schedule is registered as."""

    @classmethod
    def parse(cls, text: str) -> _Alone | None:
        return cls() if text in (cls.name, f"{cls.name}-only", f"{cls.name}:1") else None

    def text(self) -> str:
        return self.name

    def component(self, step: int) -> str:
        return self.name


@register_schedule(SOLVER)
@dataclass(frozen=True)
class SolverOnly(_Alone):
    """``solver`` (``solver-only``, ``solver:1``): the solver restarted every step."""

    syntax = SOLVER
    summary = "the solver every step"


@register_schedule(SURROGATE)
@dataclass(frozen=True)
class SurrogateOnly(_Alone):
    """``surrogate`` (``surrogate-only``, ``surrogate:1``): the learned stepper every step;
    its row is the stepper's kind and, for a corrector, its label (``corrected 2x5``)."""

    syntax = SURROGATE
    summary = "the learned stepper every step"

    def kind(self, learned: str = SURROGATE) -> str:
        return learned

    def label(self, text: str, stepper) -> str:
        return getattr(stepper, "label", None) or text


@register_schedule("fixed")
@dataclass(frozen=True)
class Pattern(Schedule):
    """``surrogate:4,solver:1``: the components in turn, each for its count of steps, over
    and over (one component once is :class:`SolverOnly` or :class:`SurrogateOnly`)."""

    pattern: tuple[tuple[str, int], ...]
    syntax = "surrogate:4,solver:1"
    summary = "a pattern: each component for its count of steps, in turn"

    @classmethod
    def parse(cls, text: str) -> Pattern | None:
        pattern = []
        for part in text.split(","):
            name, sep, count = part.strip().partition(":")
            if name not in (SOLVER, SURROGATE) or not sep or not count.isdigit() \
                    or int(count) < 1:
                return None
            pattern.append((name, int(count)))
        return None if pattern in ([(SOLVER, 1)], [(SURROGATE, 1)]) else cls(tuple(pattern))

    def text(self) -> str:
        return ",".join(f"{name}:{count}" for name, count in self.pattern)

    def component(self, step: int) -> str:
        position = step % sum(count for _, count in self.pattern)
        for name, count in self.pattern:
            if position < count:
                return name
            position -= count
        raise AssertionError("unreachable")


@register_schedule("checks")
@dataclass(frozen=True)
class CheckedAdaptive(Schedule):
    """``adaptive``: the surrogate proposes every step; a proposal that fails one of the
    solver's physical checks (:class:`~ssmpde.solvers.base.Checks`) goes to the solver."""

    syntax = "adaptive"
    summary = "the surrogate, the solver where a step fails a physical check"

    @classmethod
    def parse(cls, text: str) -> CheckedAdaptive | None:
        return cls() if text == "adaptive" else None

    def text(self) -> str:
        return "adaptive"

    def component(self, step: int) -> str:
        return SURROGATE

    def reviewer(self, run: Rollout) -> Reviewer:
        fields = run.solver.fields
        return lambda window, frame, now: (run.checks.failure(window[:, -1], frame, fields),
                                           None)


@register_schedule("adaptive")
@dataclass(frozen=True)
class Adaptive(Schedule):
    """``adaptive:TOL[:INDICATOR]``: error control, a surrogate step is kept if its estimated
    error is below ``tolerance``."""

    tolerance: float
    indicator: str | None = None  # None: the default (indicators.DEFAULT_INDICATOR)
    syntax = "adaptive:TOL[:INDICATOR]"
    summary = f"error control, INDICATOR {'|'.join(INDICATORS)}"

    @classmethod
    def parse(cls, text: str) -> Adaptive | None:
        head, sep, rest = text.partition(":")
        if head != "adaptive" or not sep:
            return None
        tolerance, _, indicator = rest.partition(":")
        if indicator and indicator not in INDICATORS:
            raise ValueError(f"bad schedule {text!r}: unknown error indicator "
                             f"{indicator!r}; choose one of {', '.join(INDICATORS)}")
        return cls(_number(tolerance, text), indicator or None)

    def text(self) -> str:
        return f"adaptive:{self.tolerance!r}" + (f":{self.indicator}" if self.indicator else "")

    def component(self, step: int) -> str:
        return SURROGATE if self.tolerance > 0 else SOLVER

    def reviewer(self, run: Rollout) -> Reviewer:
        # The call's indicator overrides the schedule's.
        estimate_of = make_indicator(run.indicator or self.indicator or DEFAULT_INDICATOR,
                                     run.solver, coarse=run.coarse, second=run.second)
        run.seconds["indicator"] = 0.0

        def review(window, frame, now):
            started = _time.perf_counter()
            estimate = float(np.max(estimate_of(window, frame, time=now,
                                                parameters=run.parameters)))
            run.seconds["indicator"] += _time.perf_counter() - started
            if not estimate < self.tolerance:  # NaN is rejected too
                return f"estimated error {estimate:.3g} >= tolerance {self.tolerance:g}", \
                    estimate
            return None, estimate

        return review


@register_schedule(PARAREAL)
@dataclass(frozen=True)
class Parareal(BaseSchedule):
    """``parareal:SLICES[:ITERATIONS[:TOL]]``: ``slices`` time slices, at most
    ``iterations`` corrections (default ``slices``: exact), stop when the starts change by
    less than ``tolerance``."""

    slices: int
    iterations: int | None = None
    tolerance: float = 1e-6
    syntax = "parareal:SLICES[:ITERATIONS[:TOL]]"
    summary = "parareal, the surrogate as the coarse propagator"

    @classmethod
    def parse(cls, text: str) -> Parareal | None:
        head, _, rest = text.partition(":")
        if head != PARAREAL:
            return None
        parts = rest.split(":") if rest else []
        if not 1 <= len(parts) <= 3:
            raise ValueError(f"bad schedule {text!r}: use parareal:SLICES, "
                             "parareal:SLICES:ITERATIONS or parareal:SLICES:ITERATIONS:TOL")
        slices = _number(parts[0], text, int)
        iterations = _number(parts[1], text, int) if len(parts) > 1 else None
        tolerance = _number(parts[2], text) if len(parts) > 2 else 1e-6
        if slices < 1:
            raise ValueError(f"bad schedule {text!r}: at least one slice")
        return cls(slices, iterations, tolerance)

    def text(self) -> str:
        """``Parareal(4, None, 1e-3)`` reads ``"parareal:4:4:0.001"``, the iterations made
        explicit."""
        text = f"parareal:{self.slices}"
        if self.iterations is not None or self.tolerance != Parareal.tolerance:
            text += f":{self.slices if self.iterations is None else self.iterations}"
        if self.tolerance != Parareal.tolerance:
            text += f":{self.tolerance!r}"
        return text

    def run(self, run: Rollout, history: np.ndarray, num_steps: int) -> HybridResult:
        frames, info = parareal(run.solver, run.surrogate, history, num_steps,
                                slices=self.slices, max_iterations=self.iterations,
                                tolerance=self.tolerance, time=run.time,
                                parameters=run.parameters, executor=run.executor)
        return HybridResult(frames, run.times(num_steps), [PARAREAL] * num_steps,
                            [None] * num_steps,
                            {SOLVER: info.fine_seconds, SURROGATE: info.coarse_seconds},
                            parareal=info)
