"""What every benchmark shares: machine facts, the one timing helper, result files, table rows.

Every benchmark runs from the repository root as a module (``python -m benchmarks.bench_x``),
times through :func:`interleaved` (or :func:`seconds` for a single long run), measures errors
with :func:`ssmpde.core.relative_l2`, writes its JSON with :func:`write` and formats its own rows
of the results table (``benchmarks/results/table.md``) with :func:`table_row` and :func:`when`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssmpde.data import atomic_path

RESULTS = Path(__file__).parent / "results"
#: The repository root: committed results store paths relative to it (see :func:`portable_path`).
REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def revision(root: Path = REPO) -> dict:
    """The commit the code runs at and whether the tree differs from it.

    ``{"commit": full hash or None (not a git checkout), "dirty": the tracked files changed
    since that commit (benchmark results aside: a benchmark writes there itself), or None}``.
    A result from a dirty tree is marked so in the table (:func:`when`): nobody can check out
    the code that produced it.
    """
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    results = RESULTS.resolve().relative_to(Path(root).resolve()).as_posix() + "/"
    changed = sorted(line[3:] for line in status.splitlines()
                     if line[3:] and not line[3:].startswith(results))
    return {"commit": commit.strip(), "dirty": changed}


def header(name: str) -> dict:
    """The fields every result file starts with: what, at which commit (and whether the tree
    was dirty: :func:`revision`), when, on what machine."""
    import numpy as np

    import ssmpde

    return {"benchmark": name, **revision(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"platform": platform.platform(), "processor": cpu_model(),
                        "cpus": os.cpu_count(), "python": platform.python_version()},
            "versions": {"ssmpde": ssmpde.__version__, "numpy": np.__version__}}


# -- timing -----------------------------------------------------------------------------------
def seconds(function: Callable[[], Any]) -> tuple[float, Any]:
    """``(elapsed wall seconds, result)`` of one call of ``function``."""
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def cpu_seconds(function: Callable[[], Any]) -> tuple[float, Any]:
    """``(CPU seconds of this process, result)`` of one call: on one thread the wall time a
    quiet machine would show, much less disturbed than the wall clock by other jobs on a
    loaded one."""
    start = time.process_time()
    result = function()
    return time.process_time() - start, result


def cuda_seconds(function: Callable[[], Any]) -> tuple[float, Any]:
    """``(elapsed GPU seconds, result)`` of one call, between two CUDA events.

    The events are queued on the current stream, so the figure is the GPU time from the call's
    first kernel to its last, without the host's wait for the device afterwards.
    """
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    result = function()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3, result


@contextlib.contextmanager
def fixed_threads(count: int | None) -> Iterator[None]:
    """Run the block on ``count`` numba and torch threads, then restore the previous counts.

    ``None`` changes nothing. numba's count is capped at ``NUMBA_NUM_THREADS`` (its pool size);
    torch's is set only when torch is loaded (a process without torch has no torch threads).
    """
    if count is None:
        yield
        return
    import numba

    torch = sys.modules.get("torch")
    previous = numba.get_num_threads(), torch.get_num_threads() if torch else None
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        numba.set_num_threads(previous[0])
        if torch is not None:
            torch.set_num_threads(previous[1])


@contextlib.contextmanager
def sampled(probe: Callable[[], Any], interval: float) -> Iterator[list]:
    """Call ``probe`` every ``interval`` seconds on a thread during the block; the yielded
    list holds every value that was not None (complete once the block has ended)."""
    import threading

    samples: list = []
    done = threading.Event()

    def sample():
        while not done.is_set():
            value = probe()
            if value is not None:
                samples.append(value)
            time.sleep(interval)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        yield samples
    finally:
        done.set()
        watcher.join()


@dataclass
class Timings:
    """What :func:`interleaved` measured: every round's seconds per call, the last results."""

    times: dict[str, list[float]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)

    def medians(self) -> dict[str, float]:
        """The median seconds of each call."""
        import numpy as np

        return {name: float(np.median(t)) for name, t in self.times.items() if t}

    def ratios(self, numerator: str, denominator: str):
        """Per round, ``numerator``'s seconds over ``denominator``'s: array ``[rounds]``."""
        import numpy as np

        return np.array(self.times[numerator]) / np.array(self.times[denominator])


def interleaved(calls: Mapping[str, Callable[[], Any]], *, repeats: int, warmup: int = 0,
                threads: int | None = None,
                clock: Callable[[Callable[[], Any]], tuple[float, Any]] = seconds) -> Timings:
    """Time several calls in alternating rounds: the benchmarks' one timing loop.

    Each round calls every entry of ``calls`` once, in order. Shared machines drift (other
    jobs, frequency scaling), so alternating makes each ratio compare runs taken seconds
    apart; report medians (:meth:`Timings.medians`) and the per-round ratios
    (:meth:`Timings.ratios`).

    Parameters
    ----------
    calls : mapping of str to callable
        Name → a function of no arguments (one forward + backward, one trajectory, ...).
    repeats : int
        Rounds timed.
    warmup : int
        Untimed calls of each entry first (numba compilation, FFT plans, autotuning,
        allocator warm-up), all of one entry before the next.
    threads : int, optional
        numba and torch threads during the warm-up and the rounds (see
        :func:`fixed_threads`); by default the counts are left as they are.
    clock : callable
        ``clock(function) -> (seconds, result)``: :func:`seconds` (wall clock) or
        :func:`cuda_seconds` (CUDA events).

    Returns
    -------
    Timings
        ``times[name]``: the seconds of each round; ``results[name]``: the last round's result.

    Example
    -------
    >>> timings = interleaved({"a": lambda: sum(range(100)), "b": lambda: 4950}, repeats=3)
    >>> len(timings.times["a"]), timings.results["b"]
    (3, 4950)
    """
    timings = Timings({name: [] for name in calls})
    with fixed_threads(threads):
        for call in calls.values():
            for _ in range(warmup):
                call()
        for _ in range(repeats):
            for name, call in calls.items():
                elapsed, timings.results[name] = clock(call)
                timings.times[name].append(elapsed)
    return timings


# -- results ----------------------------------------------------------------------------------
def write(result: dict, path: Path) -> None:
    """Write ``result`` as JSON through a temporary name (no half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(result, indent=2))


def portable_path(path: str | os.PathLike, start: str | os.PathLike = REPO) -> str:
    """``path`` as a result file stores it: relative to ``start`` (the repository by default),
    or its name alone when it lies outside ``start``.

    A machine's own folders (``/tmp/...``, a home directory) say nothing to a reader of a
    committed result and would differ on every machine that reruns it.
    """
    path, start = Path(path).resolve(), Path(start).resolve()
    return path.relative_to(start).as_posix() if path.is_relative_to(start) else path.name


def when(result: dict) -> str:
    """The results table's "measured" cell: the date, the machine and the commit of a result
    (``+dirty`` when the tree had uncommitted changes; ``≤`` for a commit recorded after the
    fact: the commit that stored the file, for results older than :func:`revision`)."""
    machine = result.get("machine", {})
    cpu = machine.get("processor") or "CPU"
    cell = f"{result['date'][:10]}, {machine.get('cpus', '?')} × {cpu}"
    commit = result.get("commit")
    if commit:
        before = "≤" if result.get("commit_recorded") == "backfilled" else ""
        cell += f", at {before}{commit[:7]}{'+dirty' if result.get('dirty') else ''}"
    return cell


def table_row(*cells: str) -> str:
    """One Markdown row of the results table (benchmark, ssmpde, reference, ratio, measured)."""
    return "| " + " | ".join(cells) + " |"


#: The name a baseline revision's package is imported under (:func:`import_revision`).
BASELINE_PACKAGE = "ssmpde_baseline"


def import_revision(revision: str, into: Path):
    """The ``ssmpde`` package of git ``revision`` imported as :data:`BASELINE_PACKAGE`
    (with a numeric suffix if this process imported a baseline already).

    The package is extracted with ``git archive`` into ``into`` and renamed; its absolute
    imports and its ``torch.library`` namespace are renamed with it, so both versions live in
    one process. The package is imported from its folder by location
    (:func:`importlib.util.spec_from_file_location`); its submodules are then found through
    the package's own ``__path__``, so the interpreter's module search path is left as it is.
    """
    name, count = BASELINE_PACKAGE, 1
    while name in sys.modules:  # torch.library namespaces cannot be registered twice
        name, count = f"{BASELINE_PACKAGE}_{count}", count + 1
    archive = into / "baseline.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "--output", str(archive), revision,
                    "ssmpde"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    package = into / name
    (into / "ssmpde").rename(package)
    for path in package.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bfrom ssmpde([. ])", rf"from {name}\1", text)
        text = re.sub(r"\bimport ssmpde\b", f"import {name}", text)
        text = text.replace('"ssmpde.', f'"{name}.').replace(
            "ssmpde::", f"{name}::").replace("torch.ops.ssmpde.", f"torch.ops.{name}.")
        # xarray's classes are shared by the process: the baseline's accessor goes under its
        # own name, or every later ``ds.ssmpde`` (another benchmark, a test in the same
        # worker) would run the baseline's code.
        text = re.sub(r'(register_data(?:set|array)_accessor\()"ssmpde"\)', rf'\1"{name}")',
                      text)
        path.write_text(text)
    spec = importlib.util.spec_from_file_location(
        name, package / "__init__.py", submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        return importlib.import_module(f"{name}.surrogates")
    except BaseException:
        for key in [key for key in sys.modules if key == name or key.startswith(name + ".")]:
            del sys.modules[key]
        raise


# -- which model and which training a row ran -------------------------------------------------
#: The day the models took their papers' layouts and training took ``--recipe`` (issue 50):
#: SS-NO's ``layout="paper"`` (before, the presets built ``layout="ssmpde"``), MNO's OFormer
#: with GEGLU feed-forwards and its 2D Galerkin regressor head 2·d·width wide (before: plain
#: GELU feed-forwards, a head 2·width wide), GeoMaNO's ``paper-*`` presets beside its own
#: (whose model did not change). A result dated before it ran the earlier layouts, trained
#: with the package's defaults and the benchmark's settings.
PAPER_LAYOUTS_DATE = "2026-11-29"
#: The training of a result dated before :data:`PAPER_LAYOUTS_DATE`, where the benchmark set
#: nothing else: ``TrainConfig``'s defaults then (the package's only way to train; the
#: gradient term of the loss, 0.1 on operator tasks on 2D grids, is added by
#: :func:`training_recipe`).
EARLIER_TRAINING = {"optimizer": "adamw", "schedule": "onecycle", "lr": 3e-4, "batch_size": 4,
                    "weight_decay": 1e-4, "max_grad_norm": 1.0, "loss": "relative-l2",
                    "normalization": "gaussian", "noise_std": 0.0}
#: How a row names the fields it lists.
_FIELD_NAMES = {"schedule": "schedule", "lr": "lr", "batch_size": "batch",
                "weight_decay": "weight decay", "max_grad_norm": "clip",
                "noise_std": "input noise", "normalization": "normalisation"}


def measured_before_paper_layouts(result: Mapping) -> bool:
    """Whether ``result`` is dated before :data:`PAPER_LAYOUTS_DATE`."""
    return result["date"][:10] < PAPER_LAYOUTS_DATE


def model_configuration(model: str, preset: str, result: Mapping,
                        config: Mapping | None = None, overrides: Mapping | None = None) -> str:
    """Which model a row's result ran, in words: ``model``'s ``preset`` with its
    :func:`preset_layout` and the benchmark's ``overrides``.

    ``'ks preset, layout="ssmpde"'``, ``"darcy preset with this package's options, not
    paper-darcy"``, ``"galerkin preset, earlier layout (64-wide regressor head)"`` (no
    Markdown code: the benchmarks page shows the rows' text as it is).
    """
    text = f"{preset} preset{preset_layout(model, preset, result, config)}"
    if overrides:
        text += ", " + ", ".join(f"{key}={value}" for key, value in overrides.items())
    return text


def preset_layout(model: str, preset: str, result: Mapping,
                  config: Mapping | None = None) -> str:
    """The words after a preset's name that say which of its layouts a result ran (empty
    where the preset has one): read from the recorded model ``config`` where it says, else
    from the result's date (:data:`PAPER_LAYOUTS_DATE`)."""
    earlier = measured_before_paper_layouts(result)
    config = config or {}
    if model == "ssno":
        if config:  # a config with `lifting` and no `layout` is the earlier layout
            layout = config.get("layout") or ("ssmpde" if "lifting" in config else "paper")
        else:
            layout = "ssmpde" if earlier else "paper"
        return f', layout="{layout}"'
    if model == "mno" and earlier:
        from ssmpde.surrogates.mno import MNO

        config = config or MNO.PRESETS.get(preset, {})
        if config.get("backbone") == "galerkin" and len(config.get("grid", ())) == 2:
            return f", earlier layout ({2 * config['regressor_width']}-wide regressor head)"
        if config.get("backbone") == "oformer":
            return ", earlier layout (plain GELU feed-forwards)"
    if model == "geomano" and not preset.startswith("paper-"):
        from ssmpde.surrogates.geomano import PAPER_OPTIONS, GeoMaNO

        # an option missing from a recorded config predates it: the model is this package's
        if not (config and all(config.get(k) == v for k, v in PAPER_OPTIONS.items())):
            return " with this package's options" + (
                f", not paper-{preset}" if f"paper-{preset}" in GeoMaNO.PRESETS else "")
    return ""


def training_recipe(result: Mapping, run: Mapping, settings: Mapping, *,
                    gradient_loss: bool = False, rollout: bool = False) -> str:
    """How a training row's model was trained, in words.

    From the run's recorded ``train_config`` (and ``recipe``) where the result holds them
    (the training benchmarks record both in each run's entry); for a result dated before
    :data:`PAPER_LAYOUTS_DATE`, :data:`EARLIER_TRAINING` with the benchmark's ``settings``
    over it. ``gradient_loss``: an operator task on a 2D grid, whose loss adds 0.1 × the
    relative L2 of the gradients unless the config sets another weight; ``rollout``: a
    rollout task (its mode and window are named).
    """
    if "train_config" in run:
        config, recipe, dated = run["train_config"], run.get("recipe"), ""
    elif measured_before_paper_layouts(result):
        config, recipe, dated = {**EARLIER_TRAINING, **settings}, None, ", before --recipe existed"
    else:
        return "training not recorded"
    weight = config.get("gradient_loss_weight")
    weight = (0.1 if gradient_loss else 0.0) if weight is None else weight
    values = [{"adamw": "AdamW", "adam": "Adam"}.get(config["optimizer"], config["optimizer"]),
              {"onecycle": "OneCycle"}.get(config["schedule"], config["schedule"]),
              f"lr {_number(config['lr'])}", f"batch {config['batch_size']}",
              f"weight decay {_number(config['weight_decay'])}",
              f"clip {_number(config['max_grad_norm'])}",
              ("relative L2" if config["loss"] == "relative-l2" else config["loss"])
              + (f" + {_number(weight)} × its gradients" if weight else ""),
              {"gaussian": "Gaussian normalisation", "range": "normalised to [-1, 1]",
               "none": "no normalisation"}.get(config["normalization"],
                                               config["normalization"])]
    if config.get("noise_std"):
        values.append(f"input noise {_number(config['noise_std'])}")
    if rollout:
        values.append(f"{config['mode'].replace('-', ' ')}, window {config['window']}")
    if recipe:
        source = f"--recipe {recipe['name']} ({recipe['variant']})"
    else:
        changed = [_FIELD_NAMES[key] for key in _FIELD_NAMES
                   if key in config and config[key] != EARLIER_TRAINING[key]]
        source = "ssmpde defaults"
        if changed:
            listed = ", ".join(changed[:-1]) + " and " if len(changed) > 1 else ""
            source += f" and the benchmark's {listed}{changed[-1]}"
    return f"{source} ({', '.join(values)}){dated}"


def _number(value: float) -> str:
    """``1e-4`` rather than ``0.0001``; ``0.1``, ``1``, ``0.0015`` as they are."""
    text = f"{value:g}"
    if 0 < abs(value) < 0.01 and float(f"{value:.0e}") == value:
        text = f"{value:.0e}"
    return text.replace("e-0", "e-")
