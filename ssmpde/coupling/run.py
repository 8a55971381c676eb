"""The ``ssmpde rollout`` and ``ssmpde warm-start`` commands as functions."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xarray as xr

from ssmpde.core import counted, format_bytes, high_correlation_time, memory_limit
from ssmpde.data import (SAMPLE, SPATIAL_DIMS, TIME, check_output, config_of, open_dataset,
                         output_lock, save)
from ssmpde.solvers.base import solver_of
from ssmpde.threads import entry_point, limit_solver

from .baseline import coarse_baselines, solver_run
from .corrected import CorrectedStepper, stepper_from_checkpoint
from .hybrid import hybrid_rollout, to_dataset
from .schedules import HybridRolloutError, SurrogateOnly, parse_schedule
from .steps import Conditions
from .warm_start import OperatorSurrogate, warm_start

__all__ = ["IGNORED_GENERATOR_FIELDS", "GeneratorMismatchWarning", "STEP_LEGEND",
           "StoredGridWarning", "generator_differences", "report", "run_rollout",
           "run_warm_start"]


def _parse_samples(text: str, available: int) -> np.ndarray:
    """``"3"`` → [3]; ``"0:4"`` → [0, 1, 2, 3] (checked against the file's samples)."""
    start, sep, stop = text.partition(":")
    try:
        indices = (np.arange(int(start or 0), int(stop or available)) if sep
                   else np.array([int(start)]))
    except ValueError as error:
        raise ValueError(f"--samples takes N or START:STOP, got {text!r}") from error
    if len(indices) == 0 or indices.min() < 0 or indices.max() >= available:
        raise ValueError(f"--samples {text!r} is outside the file's {available} samples")
    return indices


def _trained_solver(stepper, data: Path, data_config: Mapping | None = None):
    """The solver of a learned stepper's training data, from the generator config its
    checkpoint records, else from that of ``data`` (``data_config``, or read from the file)."""
    config = stepper.record.get("dataset", {}).get("generator_config")
    if config is not None:
        return solver_of(config, origin=f"the checkpoint {stepper.source}")
    if data_config is None:
        with open_dataset(data) as ds:
            return solver_of(ds)
    return solver_of(data_config, origin=f"the generator config of '{data}'")


#: Generator-config fields (dotted below ``solver``) that may differ between a learned
#: stepper's training data and the data it is rolled out on: which samples (``seed``,
#: ``num_samples``), how long each trajectory runs (``solver.final_time``: a test set may be
#: longer), and how a run was executed (``batch_size``, ``workers``, ``scheduler``,
#: ``threads``, ``out``: not recorded today, listed so that a generator recording them stays
#: comparable). Every other field (the equation, viscosity, forcing, grids and coarsening,
#: time step, initial-condition distribution) must match, or ``allow_mismatch``.
IGNORED_GENERATOR_FIELDS = frozenset({"seed", "num_samples", "batch_size", "workers",
                                      "scheduler", "threads", "out", "solver.final_time"})


class GeneratorMismatchWarning(UserWarning):
    """A learned stepper rolled out, with ``allow_mismatch``, on data another generator
    config made (a deliberate transfer)."""


_ABSENT = object()  # a field one of two configs lacks


def _flat(config: Mapping, prefix: str = "") -> dict:
    flat = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def generator_differences(trained: Mapping, data: Mapping) -> list[str]:
    """How the generator config of a stepper's training data and that of the rollout's data
    differ, field by field (``"viscosity 0.5 in training, 1.0 in the data"``), leaving out
    :data:`IGNORED_GENERATOR_FIELDS`; only the equation where the equations differ."""
    def shown(value) -> str:
        text = json.dumps(value) if value is not _ABSENT else "absent"
        return text if len(text) <= 40 else text[:37] + "..."

    if trained.get("equation") != data.get("equation"):
        keys = ["equation"]
    else:
        trained, data = _flat(trained), _flat(data)
        keys = [k for k in dict.fromkeys([*trained, *data])
                if k not in IGNORED_GENERATOR_FIELDS
                and trained.get(k, _ABSENT) != data.get(k, _ABSENT)]
    return [f"{key.removeprefix('solver.')} {shown(trained.get(key, _ABSENT))} in training, "
            f"{shown(data.get(key, _ABSENT))} in the data" for key in keys]


def _check_generators(steppers, data_config: Mapping, data: Path, *,
                      allow_mismatch: bool) -> bool:
    """Refuse (ValueError) a learned stepper trained on data of another generator config than
    ``data``'s, in one line naming the differences; with ``allow_mismatch`` warn instead
    (:class:`GeneratorMismatchWarning`). True where a mismatch was allowed. A checkpoint that
    does not record its generator config (written before it did) is not compared."""
    allowed = False
    for stepper in steppers:
        trained = stepper.record.get("dataset", {}).get("generator_config")
        differences = [] if trained is None else generator_differences(trained, data_config)
        if not differences:
            continue
        message = (f"{stepper.source} was trained on data of another generator config than "
                   f"'{data}': {'; '.join(differences)}. Roll it out on data of its own "
                   "generator, or pass --allow-mismatch (allow_mismatch=True) for a "
                   "deliberate transfer")
        if not allow_mismatch:
            raise ValueError(message)
        warnings.warn(message, GeneratorMismatchWarning, stacklevel=4)
        allowed = True
    return allowed


def pareto_title(solver: str, steps: int, samples: int) -> str:
    """The title of a rollout's Pareto figure (``rollout --pareto``, the benchmarks')."""
    return (f"{solver}: error after {counted(steps, 'step')} against wall time "
            f"({counted(samples, 'sample')})")


@entry_point("rollout")
def run_rollout(checkpoint, *, steps: int, schedules: list[str], data=None,
                samples: str = "0", out=None, plot=None, overwrite: bool = False,
                coarse=None, pareto=None, executor=None, correctors=(),
                threads: int | None = None, compile: bool | str = False,
                precision: str = "float32", allow_mismatch: bool = False) -> list[dict]:
    """Hybrid rollouts of a trained surrogate from the first ``window`` frames of ``samples``
    of ``data`` (default: the training data), for every schedule, against the solver alone,
    beside the honest baseline: the same solver at reduced cost.

    ``checkpoint`` may hold a corrector of a coarse solver (``target="correction"``): the
    corrected stepper then plays the surrogate, and its own row is ``corrected SxT`` (kind
    ``corrected``). ``correctors``: more correctors' run directories, each rolled out on its
    own beside the rest (a ``corrected SxT`` row each). Every row also has its
    ``correlation_time`` (:func:`ssmpde.core.high_correlation_time`). Each run directory is
    loaded once, also where it is both ``checkpoint`` and a corrector.

    A surrogate or corrector trained on data of another generator config than ``data``'s
    (another equation, viscosity, forcing, grids or coarsening, ...; not another seed, sample
    count or length: :data:`IGNORED_GENERATOR_FIELDS`) is refused, in one line naming the
    differences. ``allow_mismatch``: warn instead (:class:`GeneratorMismatchWarning`), for a
    deliberate transfer; the solver, and so the reference, is then the one that made
    ``data``.

    Returns one row per schedule (and for "solver" and "surrogate", and per coarse solver):
    ``kind``, relative L2 at the final step, wall time (``seconds``; for parareal also its
    one-core cost ``serial_seconds`` and ``iterations``), component times, step counts; or
    ``failed`` (why) for a fixed schedule that handed the solver frames it cannot continue
    from, or a coarse solver that diverged. ``coarse``: the coarsenings ("2x1": grid 2x
    coarser, "1x4": time step 4x longer; default a standard set, ``[]`` none). Writes the
    first schedule that ran to the end to ``out`` (netCDF/zarr), a figure to ``plot``, and
    the error-against-wall-time (Pareto) figure of all rows to ``pareto``.

    ``threads``: torch, numba and FFTW threads (default ``SSMPDE_THREADS``, else one torch
    thread and every core for the solver: :mod:`ssmpde.threads`). ``compile`` and
    ``precision``: how the surrogate and the correctors run their models
    (:meth:`~ssmpde.coupling.stepper.SurrogateStepper.configure`; off and float32 by default).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"--steps must be a positive integer, got {steps!r}")
    if not schedules:
        raise ValueError("give at least one --schedule")
    # Each schedule is parsed once, here: a bad one fails before any work.
    plans = {schedule: parse_schedule(schedule)
             for schedule in dict.fromkeys(["solver", "surrogate", *schedules])}
    loaded = {}

    def load(path):
        key = Path(path).resolve()
        if key not in loaded:
            loaded[key] = stepper_from_checkpoint(path, compile=compile, precision=precision)
        return loaded[key]

    surrogate = load(checkpoint)
    extra = []
    for path in correctors:
        corrector = load(path)
        if not isinstance(corrector, CorrectedStepper):
            raise ValueError(f"--corrector {path} is not a corrector of a coarse solver (it "
                             "was not trained with --target correction)")
        extra.append(corrector)
    learned = list({id(s): s for s in (surrogate, *extra)}.values())
    data = Path(data or surrogate.record["dataset"]["path"])
    _check_outputs({"--out": out, "--plot": plot, "--pareto": pareto},
                   inputs=(data, checkpoint, *correctors), overwrite=overwrite)
    # The data file is opened and validated once; everything read from it comes from here.
    with open_dataset(data) as ds:
        data_config = config_of(ds)
        solver = _trained_solver(surrogate, data, data_config)
        if ds.sizes[SAMPLE] == 0:
            raise ValueError(f"'{data}' holds no samples: there is no initial state to roll "
                             "out from; generate it with --samples 1 or more, or choose "
                             "another --data")
        indices = _parse_samples(samples, ds.sizes[SAMPLE])
        window = surrogate.window
        missing = [f for f in solver.fields if f not in ds.data_vars]
        if missing or TIME not in ds.dims:
            raise ValueError(f"{data} does not hold trajectories of {list(solver.fields)}, "
                             f"the fields the solver advances (it has "
                             f"{sorted(ds.data_vars)}): use the data it was trained on")
        # Before the record interval and the grid: the generator configs name the cause.
        if _check_generators(learned, data_config, data, allow_mismatch=allow_mismatch):
            # A deliberate transfer: the physics of the data is the reference.
            solver = solver_of(data_config, origin=f"the generator config of '{data}'")
        for stepper in learned:
            if abs(solver.dt - stepper.dt) > 1e-12 * max(1.0, stepper.dt):
                raise ValueError(f"the solver's record interval {solver.dt} differs from the "
                                 f"dt {stepper.dt} of {stepper.source}")
        stored = [ds.sizes[d] for d in SPATIAL_DIMS[len(solver.grid)]]
        for stepper in learned:
            if list(stepper.grid) != stored:
                raise ValueError(f"{stepper.source} was trained on a {list(stepper.grid)} "
                                 f"grid; {data} is stored on {stored}")
        limit_solver(solver)
        hand_over = _hand_over_loss(data, stored, solver.simulation_grid)
        if hand_over is not None:
            warnings.warn(hand_over, StoredGridWarning, stacklevel=3)
        if ds.sizes[TIME] < window:
            raise ValueError(f"{data} has {ds.sizes[TIME]} frames; the surrogate needs "
                             f"{window} to start")
        frame_bytes = 8 * len(indices) * len(solver.fields) * math.prod(surrogate.grid)
        needed = steps * frame_bytes * (2 + len(plans))
        if needed > memory_limit():
            raise ValueError(f"--steps {steps} keeps about {format_bytes(needed)} of frames, more than "
                             f"the limit of {format_bytes(memory_limit())}: roll out fewer steps or "
                             "samples, or raise SSMPDE_MAX_MEMORY")
        sub = ds.isel({SAMPLE: indices}).load()
        history = np.stack([sub[f].values[:, :window] for f in solver.fields], axis=2)
        time = float(sub[TIME].values[window - 1])
        parameters = Conditions.from_dataset(sub, validate=False)
    # The fine solver as a user runs it (one continuous integration) is the reference; the
    # "solver" schedule restarts it from the stored grid every step, as hybrids do.
    reference, seconds = solver_run(solver, history, steps, time=time, parameters=parameters)
    runs = {}
    rows = [{"schedule": "solver, one run", "kind": "solver", "final_rel_l2": 0.0,
             "errors": [0.0] * steps, "seconds": seconds, "correlation_time": steps * solver.dt}]
    runners = [(text, schedule, surrogate) for text, schedule in plans.items()]
    runners += [(corrector.label, SurrogateOnly(), corrector) for corrector in extra]
    for text, schedule, stepper in runners:
        kind, label = schedule.kind(stepper.kind), schedule.label(text, stepper)
        try:
            result = hybrid_rollout(solver, stepper, history, steps, schedule, time=time,
                                    parameters=parameters, reference=reference,
                                    executor=executor)
        except HybridRolloutError as error:  # one schedule failing does not void the others
            rows.append({"schedule": label, "kind": kind, "failed": str(error)})
            continue
        runs[text] = result
        rows.append(_row(label, kind, result, learned=stepper.kind)
                    | {"correlation_time": high_correlation_time(result.frames, reference,
                                                                 solver.dt)}
                    | ({"checkpoint": stepper.source} if kind == "corrected" else {}))
    if hand_over is not None:
        for row in rows:
            if row["schedule"] == "solver" and row["kind"] == "solver":
                row["note"] = hand_over
    rows += coarse_baselines(solver, history, steps, reference=reference, time=time,
                             parameters=parameters, coarsenings=coarse)
    # The figure and the file show the first schedule that ran to the end.
    main = next((s for s in schedules if s in runs), "surrogate")
    if out is not None:
        ds = to_dataset(runs[main], solver=solver, surrogate=surrogate, schedule=main,
                        samples=indices)
        with output_lock(out):
            save(ds, out, overwrite=overwrite)
    if plot is not None:
        from ssmpde.plotting import plot_hybrid

        specs = solver.variables()
        coords = {dim: solver.coordinates()[dim].values
                  for dim in SPATIAL_DIMS[len(surrogate.grid)]}
        plot_hybrid(plot, reference=reference, hybrid=runs[main].frames,
                    surrogate=runs["surrogate"].frames, times=runs[main].times,
                    errors={k: v.errors for k, v in runs.items()}, schedule=main,
                    fields=solver.fields, coords=coords,
                    units={f: specs[f].units for f in solver.fields},
                    long_names={f: specs[f].long_name for f in solver.fields},
                    sample_label=int(indices[0]))
    if pareto is not None:
        from ssmpde.plotting import plot_pareto

        plot_pareto(pareto, rows, title=pareto_title(solver.name, steps, len(indices)))
    return rows


class StoredGridWarning(UserWarning):
    """The rollout's data are stored on a coarser grid than the solver simulates: its
    restarted solver steps lose the modes only the simulation grid resolves."""


def _hand_over_loss(data: Path, stored: list[int], simulated) -> str | None:
    """Why the "solver" row of a rollout from data stored coarser than it was simulated is
    not the reference, or None where the grids are the same."""
    simulated = [int(n) for n in simulated]
    if all(m >= n for m, n in zip(stored, simulated)):
        return None
    points = ("x".join(map(str, grid)) for grid in (stored, simulated))
    return (f"'{data.name}' is stored at {next(points)} of the {next(points)} simulated "
            "points: the 'solver' row restarts the solver from the stored frames every step "
            "and so loses the modes only the simulation grid resolves, every step (a hybrid's "
            "solver steps do too); its error is that hand-over loss, and it is not the "
            "reference, which is 'solver, one run' (one continuous integration from the same "
            "first frame). Data stored at the simulation resolution have no such loss")


def _check_outputs(outputs: dict[str, object], *, inputs, overwrite: bool) -> None:
    """Every output of a rollout, before any work: distinct paths, each with a format it can
    be written in (a dataset for ``--out``, a figure for the others), none replacing an input
    (:func:`~ssmpde.data.check_output`)."""
    given = {flag: Path(path).expanduser() for flag, path in outputs.items()
             if path is not None}
    for flag, path in given.items():
        check_output(path, inputs=inputs, overwrite=overwrite, flag=flag,
                     kind="dataset" if flag == "--out" else "figure")
    seen: dict[Path, str] = {}
    for flag, path in given.items():
        first = seen.setdefault(path.resolve(), flag)
        if first != flag:
            raise ValueError(f"{first} and {flag} both name '{path}': one would overwrite the "
                             "other; choose a path for each")


def _row(schedule: str, kind: str, result, *, learned: str = "surrogate") -> dict:
    """The report row of a hybrid rollout. ``learned``: what the learned stepper's steps (and
    time) count as, ``surrogate`` or ``corrected`` (a corrected coarse solver)."""
    steps = dict(result.steps)
    steps[learned] = steps.pop("surrogate")
    row = {"schedule": schedule, "kind": kind,
           "final_rel_l2": float(result.errors[-1]), "errors": result.errors.tolist(),
           "seconds": result.wall_seconds,
           "solver_seconds": result.seconds["solver"],
           f"{learned}_seconds": result.seconds["surrogate"], **steps}
    if "indicator" in result.seconds:
        row["indicator_seconds"] = result.seconds["indicator"]
    if result.parareal is not None:
        info = result.parareal
        row.update(iterations=info.iterations, converged=info.converged,
                   serial_seconds=info.serial_seconds, fine_steps=info.fine_steps,
                   workers=info.workers, changes=info.changes)
    return row


def describe(row: dict) -> str:
    """One line for a row of :func:`run_rollout`: its error, time and step counts, or why it
    failed."""
    if "failed" in row:
        return f"failed: {row['failed']}"
    head = f"final rel. L2 {row['final_rel_l2']:.3g}, {row['seconds']:.3f} s"
    if row.get("kind") == "coarse":
        return f"{head} (the solver alone at reduced cost)"
    if "solver" not in row:
        return f"{head} (the fine solver in one run: the reference)"
    if row.get("kind") == "parareal":
        return (f"{head} ({counted(row['iterations'], 'iteration')}, "
                f"{counted(row['fine_steps'], 'fine step')}, "
                f"{row['serial_seconds']:.3f} s on one core, {counted(row['workers'], 'worker')})")
    learned = "corrected" if "corrected" in row else "surrogate"
    return (f"{head} ({row['solver']} solver, {row[learned]} {learned}, "
            f"{row['fallback']} fallback steps)")


#: What the step counts of a rollout table mean: printed under every table (:func:`report`)
#: and in docs/hybrid.md.
STEP_LEGEND = (
    "Steps in the detail column, each one record interval: solver = the fine solver "
    "restarted from the stored frames; surrogate = the trained surrogate; corrected = the "
    "coarse solver's step plus a trained correction (a --corrector run, or a checkpoint "
    "trained with --target correction); fallback = a surrogate proposal the schedule "
    "rejected (adaptive: it failed a physical check; adaptive:TOL: its estimated error was "
    "at or above TOL), so the solver took the step; the proposal's time counts as "
    "surrogate time.")


def report(rows: list[dict]) -> str:
    """The rollout table of ``ssmpde rollout`` (Markdown) with its legend and the notes of
    its rows underneath."""
    lines = ["| schedule | kind | final rel. L2 | wall s | detail |", "|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['schedule']} | {r['kind']} | failed: {r['failed']} | | |")
            continue
        detail = describe(r).partition("s (")[2].rstrip(")")
        lines.append(f"| {r['schedule']} | {r['kind']} | {r['final_rel_l2']:.3g} | "
                     f"{r['seconds']:.3f} | {detail} |")
    lines += ["", STEP_LEGEND]
    lines += [f"Note ({r['schedule']}): {r['note']}" for r in rows if r.get("note")]
    return "\n".join(lines)


def run_warm_start(checkpoint, *, samples: int = 4, seed: int = 1_000_000,
                   rtol: float = 1e-8) -> dict:
    """Warm against cold PCG solves of ``samples`` fresh Darcy problems (drawn with ``seed``,
    by default unseen in training) with the solver configuration of the training data."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 10_000:
        raise ValueError(f"--samples must be an integer in 1..10000, got {samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be a non-negative integer, got {seed!r}")
    if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
        raise ValueError(f"--rtol must be in (0, 1), got {rtol!r}")
    surrogate = OperatorSurrogate.from_checkpoint(checkpoint)
    record = surrogate.record
    solver = _trained_solver(surrogate, Path(record["dataset"]["path"]))
    if getattr(solver, "name", None) != "darcy":
        raise ValueError("warm starts are for steady Darcy checkpoints")
    a = solver.coefficient(seed, range(samples))
    return warm_start(solver, surrogate, a, rtol=rtol)
