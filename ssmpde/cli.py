"""Command line: ``ssmpde generate | info | convert | ...``. Thin wrappers over the Python API."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import re
import signal
import sys
import threading
import types
import typing
import warnings
from collections.abc import Sequence
from typing import Any

from . import __version__

__all__ = ["main"]

#: Short aliases for config fields, so the common flags read naturally.
_ALIASES = {"final_time": ["--time"]}


def _field_help(config_cls: type) -> dict[str, str]:
    """Per-field help text from the config's numpydoc ``Parameters`` section."""
    doc = inspect.getdoc(config_cls) or ""
    helps: dict[str, str] = {}
    names: list[str] = []
    for line in doc.split("Parameters\n----------\n", 1)[-1].splitlines():
        header = re.match(r"^([a-z_][a-z0-9_, ]*) : (.*)$", line)
        if header:
            names = [n.strip() for n in header[1].split(",")]
            for n in names:
                helps[n] = f"({header[2]}) "
        elif line.startswith("    ") and names:
            for n in names:
                helps[n] += line.strip() + " "
        elif not line.strip():
            continue
        else:
            names = []
    return {k: v.strip() for k, v in helps.items()}


#: reStructuredText roles (``:meth:`~Darcy.solve` ``) and inline literals of the docstrings.
_ROLE = re.compile(r":(?:meth|func|class|attr|data|mod|obj|exc|math):`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")
#: The docstrings' spelling of a per-sample range, and the one the flags take.
_PAIR = re.compile(r"a pair ``\((\w+), (\w+)\)``")


def _plain_help(text: str, flags: dict[str, str]) -> str:
    """A config docstring's text as command-line help: no reStructuredText (roles and
    literals become plain words) and every option named by its flag (``final_time`` ->
    --final-time, ``grid="nodes"`` -> --grid nodes); ``flags`` maps field names to flags."""
    text = _PAIR.sub("a range LOW:HIGH", text)
    text = re.sub(r"U\[low, high\]", "U[LOW, HIGH]", text)
    text = _ROLE.sub(lambda m: m[1], text)

    def literal(match: re.Match) -> str:
        inner = match[1]
        if inner in flags and "_" in inner:  # ``cfl`` may be a value; ``final_time`` is not
            return flags[inner]
        setting = re.fullmatch(r"(\w+)=[\"']?([^\"']*)[\"']?", inner)
        if setting and setting[1] in flags:
            return f"{flags[setting[1]]} {setting[2]}"
        names = set(re.findall(r"\w+", inner)) & set(flags)
        if any("_" in name for name in names):  # an expression of options: all as flags
            return re.sub(r"\w+", lambda w: flags.get(w[0], w[0]), inner)
        return inner

    text = _LITERAL.sub(literal, text)
    # Python names left in running text, where the flag is spelled otherwise.
    for name, flag in flags.items():
        if "_" in name:
            text = re.sub(rf"(?<![\w-]){name}\b", flag, text)
    return text


def _metavar(annotation: Any, kind: str) -> str:
    """The placeholder of a config flag: N, FLOAT, {a,b} (the docstring's choices), NAME,
    with |LOW:HIGH where a per-sample range is accepted."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) \
        else (annotation,)
    choices = re.match(r"\{(.*)\}", kind)
    if choices:
        return "{" + ",".join(c.strip().strip("\"'") for c in choices[1].split(",")) + "}"
    if bool in options:
        return "{true,false}"
    names = [name for t, name in ((int, "N"), (float, "FLOAT"), (str, "NAME")) if t in options]
    if any(typing.get_origin(o) is tuple for o in options):
        names.append("LOW:HIGH")
    return "|".join(names) or "VALUE"


def _default_text(value: Any) -> str:
    """A config default as it is typed on the command line."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ":".join(map(str, value))
    return str(value)


def _parse_value(text: str, annotation: Any) -> Any:
    """Parse a flag value for a config field of the given type annotation (resolved by
    :func:`typing.get_type_hints`, never a string)."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) \
        else (annotation,)
    if text.lower() == "none" and type(None) in options:
        return None
    if bool in options:
        lowered = text.strip().lower()
        if lowered in ("true", "yes", "1", "on"):
            return True
        if lowered in ("false", "no", "0", "off"):
            return False
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    if any(typing.get_origin(o) is tuple for o in options) and ":" in text:
        low, high = text.split(":", 1)
        return (float(low), float(high))
    for kind in (int, float, str):
        if kind in options:
            try:
                return kind(text)
            except ValueError:
                continue
    raise argparse.ArgumentTypeError(f"cannot read {text!r}")


def _thread_count(text: str) -> int:
    """``--threads``: a positive integer (argparse turns the error into one line, exit 2)."""
    from .threads import parse

    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads in 1..1024, "
                                         f"got {text!r}") from None


def _add_threads(parser, default: str) -> None:
    parser.add_argument("--threads", type=_thread_count, metavar="N",
                        help=f"torch, numba and FFTW threads (default: the SSMPDE_THREADS "
                             f"environment variable, else {default}; see ssmpde.threads)")


def _add_compile(parser, dest: str = "compile") -> None:
    parser.add_argument("--compile", nargs="?", const=True, default=None, metavar="BACKEND",
                        dest=dest,
                        help="torch.compile the model (inductor, or the BACKEND named, e.g. "
                             "aot_eager), refused where its output differs from eager; off "
                             "by default")


def _no_presets(name: str, text: str) -> str:
    raise argparse.ArgumentTypeError(f"{name} has no presets (got {text!r}): set its options "
                                     "with its flags")


def _add_solver_parser(subparsers, name: str) -> None:
    from .solvers.base import get_solver_class

    cls = get_solver_class(name)
    summary = (inspect.getdoc(cls) or name).splitlines()[0]
    parser = subparsers.add_parser(
        name, help=summary, description=f"{summary}\n\nAll quantities are non-dimensional "
        "unless the help says otherwise.", formatter_class=argparse.RawDescriptionHelpFormatter)
    run = parser.add_argument_group("run")
    run.add_argument("--out", required=True, metavar="PATH",
                     help="output file: .nc (netCDF4) or .zarr")
    run.add_argument("--samples", type=int, required=True, metavar="N",
                     help="number of samples (at most 10**9)")
    run.add_argument("--seed", type=int, default=0, metavar="N", help="master seed (default 0)")
    run.add_argument("--batch-size", type=int, default=8, metavar="N",
                     help="samples integrated together; does not change results (default 8)")
    if cls.PRESETS:
        run.add_argument("--preset", choices=sorted(cls.PRESETS),
                         help="a benchmark configuration; other flags override it")
    else:
        run.add_argument("--preset", type=lambda text, n=name: _no_presets(n, text),
                         help=f"{name} has no presets: set its options below")
    run.add_argument("--overwrite", action="store_true",
                     help="replace an existing --out that is a dataset ssmpde wrote (never "
                          "a file or directory it did not write, nor an input), and discard "
                          "an unfinished run for --out stored with other settings")
    run.add_argument("--max-memory", metavar="SIZE",
                     help="most memory the run may plan to use at once: bytes or a size such "
                          "as 8G, 512M (default: SSMPDE_MAX_MEMORY, else 80%% of the "
                          "available memory)")
    run.add_argument("--max-disk", metavar="SIZE",
                     help="most disk space the run may use (part files and the merged file "
                          "at once): bytes or a size such as 500G; replaces the check against "
                          "the free space (default: SSMPDE_MAX_DISK, else the free space)")
    run.add_argument("--no-progress", action="store_true",
                     help="hide the progress bar (and, on a cluster, the dashboard line)")
    _add_threads(run, "every core")
    cluster = parser.add_argument_group(
        "dask cluster (writes a zarr store batch by batch; see docs/scale-out.md)")
    cluster.add_argument("--workers", type=int, metavar="N",
                         help="start a local dask cluster of N worker processes, each "
                              "running one batch at a time on cores // N numba/FFTW threads "
                              "(at most one a core, and as many as memory holds)")
    cluster.add_argument("--scheduler", metavar="ADDRESS",
                         help="'local', or the address of a running dask scheduler "
                              "(tcp://host:8786) whose workers share --out's file system")
    physics = parser.add_argument_group(f"{name} options (default: the solver's default)")
    helps = _field_help(cls.Config)
    hints = typing.get_type_hints(cls.Config)
    fields = dataclasses.fields(cls.Config)
    flag_of = {field.name: f"--{field.name.replace('_', '-')}" for field in fields}
    for field in fields:
        annotation = hints[field.name]
        # The docstring's help starts with its numpydoc type, "(float or (float, float))":
        # the metavar says that instead.
        kind, _, text = helps.get(field.name, "").partition(") ")
        text = _plain_help(text, flag_of)
        if any(typing.get_origin(o) is tuple for o in typing.get_args(annotation)) \
                and "LOW:HIGH" not in text:
            text += " A range LOW:HIGH draws a value per sample, uniformly."
        physics.add_argument(
            flag_of[field.name], *_ALIASES.get(field.name, []), dest=f"config__{field.name}",
            default=None, metavar=_metavar(annotation, kind.removeprefix("(")),
            type=lambda text, a=annotation: _parse_value(text, a),
            help=f"{text} [default: {_default_text(field.default)}]".strip())


class _Parser(argparse.ArgumentParser):
    """Bad command lines get one line (and exit 2), like every other user error."""

    def error(self, message: str):
        self.exit(2, f"ssmpde: error: {message} (see '{self.prog} --help')\n")


def _build_parser() -> argparse.ArgumentParser:
    from .data.formats import taking_dtype
    from .solvers.base import list_solvers

    parser = _Parser(
        prog="ssmpde", description="PDE solvers and SSM neural-operator surrogates in one loop.")
    parser.add_argument("--version", action="version", version=f"ssmpde {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    generate = commands.add_parser("generate", help="generate a dataset with a built-in solver",
                                   description="Generate a dataset. Choose an equation; "
                                               "`ssmpde generate EQUATION --help` lists its options.")
    equations = generate.add_subparsers(dest="equation", required=True, metavar="EQUATION")
    for name in list_solvers():
        _add_solver_parser(equations, name)
    info = commands.add_parser("info", help="describe a dataset file",
                               description="Print dims, variables, config and size of a "
                                           "dataset; for a zarr store still being written, "
                                           "how many batches are complete. With --check, "
                                           "read every chunk instead and list every damaged "
                                           "one (exit 2 if any).")
    info.add_argument("path", metavar="PATH", help="netCDF (.nc) file or zarr store")
    info.add_argument("--check", action="store_true",
                      help="read every chunk and list each one that is missing, undecodable "
                           "or holds NaN or infinity (exit status 2 if any)")
    info.add_argument("--no-progress", action="store_true",
                      help="hide the progress bar of --check")
    convert = commands.add_parser(
        "convert", help="copy a dataset between netCDF, zarr and other tools' formats",
        description="Copy a dataset between netCDF4 (.nc) and zarr (.zarr), either way, value "
                    "for value with every attribute, one sample at a time; or export it to "
                    "another tool's format (--to), printing what that format cannot carry. "
                    "Files in those formats are read as they are by every command.")
    convert.add_argument("source", help="netCDF file, finished zarr store, or a file in a "
                                        "foreign format (e.g. PDEBench HDF5)")
    convert.add_argument("target", help="the copy: .nc, .nc4, .netcdf or .zarr, or any name "
                                        "with --to")
    convert.add_argument("--to", metavar="FORMAT",
                         help="the target's format: netcdf, zarr, "
                              + ", ".join(_foreign_format_help())
                              + " (default: from the target's suffix)")
    convert.add_argument("--overwrite", action="store_true",
                         help="replace an existing target that is a dataset ssmpde wrote "
                              "(never a file or directory it did not write)")
    convert.add_argument("--dtype", choices=("float32", "float64"),
                         help="write the floating data variables in this precision, for "
                              "--to " + ", ".join(taking_dtype()) + " (float32 for "
                              "The Well's own models; values beyond float32's range are "
                              "refused; default: the dataset's). PDEBench is always float32")
    models = commands.add_parser("models", help="list the surrogate models and their presets",
                                 description="List the registered surrogate models with their "
                                             "presets and parameter counts.")
    models.add_argument("--describe", metavar="MODEL",
                        help="print every preset's full config and parameter count")
    _add_train_parser(commands)
    evaluate = commands.add_parser(
        "evaluate", help="relative L2 of a trained run on a dataset",
        description="Evaluate a run directory on a dataset: relative L2 per sample (and per "
                    "step for rollouts); optionally write the predictions as netCDF.")
    evaluate.add_argument("run", metavar="RUN", help="run directory written by 'ssmpde train'")
    evaluate.add_argument("--data", required=True, metavar="PATH",
                          help="dataset file (netCDF or zarr)")
    evaluate.add_argument("--out", metavar="PATH",
                          help="write the predictions here (.nc or .zarr)")
    evaluate.add_argument("--batch-size", type=int, default=8, metavar="N",
                          help="samples per forward pass (default 8)")
    evaluate.add_argument("--overwrite", action="store_true",
                          help="replace an existing --out that is a dataset ssmpde wrote "
                               "(never a file it did not write, nor the run's training data)")
    _add_threads(evaluate, "as torch starts: every core or OMP_NUM_THREADS")
    _add_compile(evaluate)
    rollout = commands.add_parser(
        "rollout", help="hybrid solver-surrogate rollouts of a trained time-stepper",
        description="Roll a trained surrogate out with the solver it was trained on, for one "
                    "or more schedules, against the solver alone; print errors and wall "
                    "times, write the first schedule's rollout and a figure.")
    rollout.add_argument("--checkpoint", required=True, metavar="RUN",
                         help="run directory of the surrogate")
    rollout.add_argument("--steps", type=int, required=True, metavar="N",
                         help="steps to advance")
    schedule = rollout.add_argument(
        "--schedule", action="append", required=True, metavar="SCHEDULE",
        help="one of %(schedules)s; repeatable (the first is written)")
    schedule.schedules = _ScheduleHelp()  # argparse fills %(schedules)s when help is shown
    rollout.add_argument("--coarse", action="append", metavar="SPACExTIME",
                         help="coarse-solver baseline SPACExTIME, e.g. 2x1 (grid 2x coarser) "
                              "or 1x4 (step 4x longer); repeatable; 'none' for none "
                              "(default: a standard set)")
    rollout.add_argument("--corrector", action="append", default=[], metavar="RUN",
                         help="also roll out this corrector of a coarse solver (a run trained "
                              "with --target correction) beside the others; repeatable")
    rollout.add_argument("--pareto", metavar="PATH",
                         help="write the error-against-wall-time figure here (.png, .pdf, .svg)")
    rollout.add_argument("--workers", type=int, default=None, metavar="N",
                         help="parareal: run the fine slices on a local dask cluster of N "
                              "processes (at most one a core, and as many as memory holds)")
    rollout.add_argument("--scheduler", metavar="ADDRESS",
                         help="parareal: address of a dask scheduler")
    rollout.add_argument("--data", metavar="PATH",
                         help="dataset to start from (default: the training data)")
    rollout.add_argument("--samples", default="0", metavar="N|START:STOP",
                         help="sample N or samples START:STOP (default 0)")
    rollout.add_argument("--out", metavar="PATH",
                         help="write the first schedule's rollout (.nc or .zarr)")
    rollout.add_argument("--plot", metavar="PATH", help="write a figure (.png, .pdf, .svg)")
    rollout.add_argument("--overwrite", action="store_true",
                         help="replace an existing --out, --plot or --pareto that ssmpde "
                              "wrote (a dataset, a figure); never a file it did not write, "
                              "nor an input or the run's training data")
    _add_threads(rollout, "one torch thread, every core for the solver")
    _add_compile(rollout)
    rollout.add_argument("--precision", choices=("float32", "bfloat16", "float16"),
                         default="float32",
                         help="compute the surrogate in float32 (default) or under 16-bit "
                              "autocast (relative errors per step against float32 of up to "
                              "4e-2 in bfloat16, 3e-3 in float16)")
    rollout.add_argument("--allow-mismatch", action="store_true",
                         help="roll out a surrogate or corrector on data of another generator "
                              "config (equation, viscosity, forcing, grids, ...) with a "
                              "warning, for a deliberate transfer; refused otherwise")
    warm = commands.add_parser(
        "warm-start", help="Darcy solves warm-started from a trained surrogate",
        description="Solve fresh Darcy problems by PCG from zero and from the surrogate's "
                    "prediction, to the same tolerance; print iterations and times.")
    warm.add_argument("checkpoint", metavar="RUN", help="run directory of a Darcy surrogate")
    warm.add_argument("--samples", type=int, default=4, metavar="N",
                      help="fresh problems to solve (default 4)")
    warm.add_argument("--seed", type=int, default=1_000_000, metavar="N",
                      help="seed of the coefficients (default: one not used in training)")
    warm.add_argument("--rtol", type=float, default=1e-8, metavar="FLOAT",
                      help="relative residual both solves stop at (default 1e-8)")
    return parser


def _add_train_parser(commands) -> None:
    train = commands.add_parser(
        "train", help="train a surrogate on a dataset",
        description="Train a surrogate (ssmpde models lists them) on an ssmpde dataset. "
                    "Options on the command line override those of --config, which override "
                    "the preset. Runs under torchrun as they are (DistributedDataParallel).")
    train.add_argument("model", metavar="MODEL", help="model name, e.g. geomano or fno")
    train.add_argument("--data", required=True, metavar="PATH",
                       help="training dataset (netCDF or zarr)")
    train.add_argument("--test-data", metavar="PATH",
                       help="test dataset; default: hold out --num-test samples")
    train.add_argument("--preset", metavar="NAME",
                       help="model preset, e.g. darcy or navier-stokes")
    train.add_argument("--config", metavar="PATH",
                       help="TOML file with [model] and [train] tables")
    train.add_argument("--out", required=True, metavar="RUN", help="run directory")
    train.add_argument("--resume", action="store_true", help="continue the run in --out")
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.add_argument("--time-limit", type=float, metavar="SECONDS",
                       help="stop after the epoch during which this many seconds passed "
                            "(a number >= 0; 0: after one epoch)")
    train.add_argument("--recipe", metavar="NAME[:VARIANT]",
                       help="the model's training recipe: 'paper' (the paper's or its "
                            "released code's, for the problem the data hold, or MNO's "
                            "backbone), or e.g. 'paper:darcy'; options given here or in "
                            "--config win over it")
    _add_threads(train, "as torch starts: every core or OMP_NUM_THREADS")
    _add_compile(train, dest="train__compile")
    for name, kind, metavar, text in (
            ("epochs", int, "N", "number of epochs"),
            ("batch-size", int, "N", "global batch size"),
            ("optimizer", str, "{adamw,adam}", "optimiser (default adamw)"),
            ("lr", float, "FLOAT", "peak learning rate (OneCycleLR), or the cosine's first"),
            ("weight-decay", float, "FLOAT", "the optimiser's weight decay"),
            ("max-grad-norm", float, "FLOAT", "gradient clipping norm (0: off)"),
            ("loss", str, "{relative-l2,mse}",
             "loss on the fields in physical units (default relative-l2, per field)"),
            ("normalization", str, "{gaussian,range,none}",
             "per-channel normalisation: unit Gaussian (default), the training range to "
             "[-1, 1], or none"),
            ("div-factor", float, "FLOAT", "OneCycleLR: the first lr is lr / this (25)"),
            ("final-div-factor", float, "FLOAT",
             "OneCycleLR: the last lr is the first / this (1e4)"),
            ("pct-start", float, "FLOAT", "OneCycleLR: fraction of the steps rising (0.3)"),
            ("gradient-loss-weight", float, "FLOAT", "weight of the gradient term of the loss"),
            ("window", int, "N", "rollout: frames in"),
            ("horizon", int, "N", "rollout: frames out"),
            ("mode", str, "{teacher-forcing,autoregressive}",
             "rollout: feed the true frames back, or the model's own predictions"),
            ("noise-std", float, "FLOAT", "Gaussian noise on the normalised inputs"),
            ("target", str, "{state,increment,correction}",
             "rollout: predict the next state (default), its increment, or the correction of "
             "a coarse solver's step (correction, with --coarse)"),
            ("coarse", str, "SPACExTIME",
             "with --target correction: the coarsening of the generating solver to correct, "
             "e.g. 2x5 (grid 2x coarser, step 5x longer); the data must be stored on that "
             "coarse grid"),
            ("correction-mode", str, "{after,source,flux}",
             "with --target correction: add the correction after the coarse step (default), "
             "inside it as a source term of the solver's right-hand side (spectral "
             "solvers; trained through the differentiable coarse step), or after it as the "
             "divergence of correction fluxes (finite-volume solvers: conservative)"),
            ("num-test", int, "N", "samples held out when no --test-data is given"),
            ("seed", int, "N", "seed of initialisation, data order and noise"),
            ("schedule", str, "{onecycle,cosine}",
             "learning-rate schedule: onecycle (default) or cosine"),
            ("device", str, "DEVICE", "torch device (cpu, cuda)")):
        train.add_argument(f"--{name}", type=kind, dest=f"train__{name.replace('-', '_')}",
                           metavar=metavar, help=text)
    train.add_argument("--curriculum", nargs="+", type=int, metavar="H",
                       dest="train__curriculum",
                       help="unrolled training: the horizons of successive phases of equal "
                            "length, ending at --horizon, e.g. 1 4 16 32")
    train.add_argument("--truncation", type=int, metavar="N", dest="train__truncation",
                       help="unrolled correction training: backpropagate through at most N "
                            "steps (0: all)")
    train.add_argument("--on-policy", type=int, metavar="N", dest="train__on_policy",
                       help="correctors: every N epochs, train on the states the corrected "
                            "solver itself visits over --horizon steps (no gradient through "
                            "the solver); 0: off")
    train.add_argument("--inputs", nargs="+", metavar="VAR",
                       help="operator task inputs: variables, NAME@FRAME for one frame of a "
                            "time-dependent one (e.g. u@0); default: from the variable roles")
    train.add_argument("--outputs", nargs="+", metavar="VAR",
                       help="operator task outputs (e.g. u@-1 for Burgers u0 -> u(T))")
    train.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a model config value (JSON), e.g. depth=4 or "
                            "latent_grid=[9,9]; repeatable")


def _generate(args: argparse.Namespace) -> int:
    from .generation import generate

    config = {k.removeprefix("config__"): v for k, v in vars(args).items()
              if k.startswith("config__") and v is not None}
    ds = generate(args.equation, num_samples=args.samples, seed=args.seed, out=args.out,
                  batch_size=args.batch_size, preset=args.preset, overwrite=args.overwrite,
                  progress=not args.no_progress, max_memory=args.max_memory,
                  max_disk=args.max_disk, scheduler=args.scheduler, workers=args.workers,
                  threads=args.threads, **config)
    sizes = ", ".join(f"{k}={v}" for k, v in ds.sizes.items())
    print(f"wrote {args.out} ({sizes})")
    ds.close()
    return 0


def _info(args: argparse.Namespace) -> int:
    from .data import DatasetFileError, check_file, describe

    if not args.check:
        print(describe(args.path))
        return 0
    report = check_file(args.path, progress=not args.no_progress)
    print(report.text())
    if report.damaged:
        raise DatasetFileError(f"'{report.path}' has {len(report.damaged)} damaged chunk"
                               f"{'s' if len(report.damaged) > 1 else ''} (listed above): "
                               "regenerate or re-copy it")
    return 0


def _convert(args: argparse.Namespace) -> int:
    from .data import convert

    result = convert(args.source, args.target, overwrite=args.overwrite, to=args.to,
                     dtype=args.dtype)
    sizes = ", ".join(f"{k}={v}" for k, v in result.sizes.items())
    kind = "" if result.format in ("netcdf", "zarr") else f" as {result.format}"
    print(f"wrote {result.target}{kind} ({sizes})")
    for note in result.notes:
        print(f"note: {note}")
    return 0


class _ScheduleHelp:
    """The registered rollout schedules, as ``--schedule``'s help lists them. Read from the
    registry only when the help is shown: importing it imports torch, which a plain command
    line (``ssmpde --version``) need not wait for."""

    def __str__(self) -> str:
        with _holding_sigint():  # the import of torch (see _holding_sigint)
            from .coupling.schedules import describe_schedules

        # a schedule registered elsewhere may have no summary: its syntax alone, then
        return ", ".join(f"{syntax} ({summary})" if summary else syntax
                         for syntax, summary in describe_schedules())


def _foreign_format_help() -> list[str]:
    from .data.formats import known_formats

    return [f"{name} ({module.DESCRIPTION})" for name, module in known_formats().items()]


def _train(args: argparse.Namespace) -> int:
    import json
    import tomllib

    from .core import JSONFileError, decode_json
    from .surrogates.train import TrainConfig, process_rank, train

    model_options: dict[str, Any] = {}
    train_options: dict[str, Any] = {}
    if args.config:
        try:
            with open(args.config, "rb") as handle:
                table = tomllib.load(handle)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{args.config} is not valid TOML: {error}") from error
        unknown = sorted(set(table) - {"model", "train"})
        if unknown:
            raise ValueError(f"{args.config}: unknown table(s) {unknown}; use [model] and "
                             "[train]")
        model_options.update(table.get("model", {}))
        train_options.update(table.get("train", {}))
    for option in args.model_option:
        key, sep, value = option.partition("=")
        if not sep:
            raise ValueError(f"--model-option needs KEY=VALUE, got {option!r}")
        try:
            model_options[key] = decode_json(f"--model-option {key}", text=value, expect=object)
        except JSONFileError:  # a plain word: the text itself
            model_options[key] = value
    train_options.update({k.removeprefix("train__"): v for k, v in vars(args).items()
                          if k.startswith("train__") and v is not None})
    fields = set(TrainConfig.__dataclass_fields__)
    unknown = sorted(set(train_options) - fields)
    if unknown:
        raise ValueError(f"unknown training option(s) {unknown}; valid: {sorted(fields)}")
    # The options named here (flags, --config) win over a --recipe: passed as they are.
    metrics = train(args.model, args.data, out=args.out, preset=args.preset,
                    model_overrides=model_options, config=train_options, recipe=args.recipe,
                    test_data=args.test_data, resume=args.resume,
                    progress=not args.no_progress, time_limit=args.time_limit,
                    inputs=args.inputs, outputs=args.outputs, threads=args.threads)
    if process_rank() == 0:  # under torchrun, once, not once per process
        shown = {k: v for k, v in metrics.items() if not isinstance(v, list)}
        print(f"trained {args.model} into {args.out}: {json.dumps(shown)}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .surrogates.train import evaluate

    result = evaluate(args.run, args.data, out=args.out, batch_size=args.batch_size,
                      overwrite=args.overwrite, threads=args.threads,
                      compile=args.compile or False)
    print(f"relative L2 on {args.data}: {result['rel_l2']:.5g} (mean over "
          f"{len(result['rel_l2_per_sample'])} samples)")
    if "rel_l2_per_step" in result:
        print(f"pooled over the {len(result['rel_l2_per_step'])} output frames (the papers' "
              f"rollout error): {result['pooled_rel_l2']:.5g}")
    if "best_epoch" in result:
        print(f"training's best test error {result['best_test_pooled_rel_l2']:.5g} at epoch "
              f"{result['best_epoch']} of {result.get('epoch', '?')} (the checkpoint holds "
              "the last)")
    if len(result["rel_l2_per_field"]) > 1:
        print("per field: " + ", ".join(f"{name} {v:.4g}"
                                        for name, v in result["rel_l2_per_field"].items()))
    if "rel_l2_per_step" in result:
        steps = ", ".join(f"{v:.4g}" for v in result["rel_l2_per_step"])
        print(f"per step: {steps}")
    if args.out:
        print(f"wrote predictions to {args.out}")
    return 0


def _rollout(args: argparse.Namespace) -> int:
    import contextlib

    from .coupling.run import report, run_rollout

    coarse = args.coarse
    if coarse is not None and [c.lower() for c in coarse] == ["none"]:
        coarse = []
    if args.workers is not None and args.scheduler is not None:
        raise ValueError("give --workers (a local cluster) or --scheduler, not both")
    with contextlib.ExitStack() as stack:
        executor = None
        if args.workers is not None or args.scheduler is not None:
            from .cluster import dask_cluster

            # dask_cluster checks both: the address's form, --workers against the machine
            executor, _ = stack.enter_context(dask_cluster(args.scheduler, args.workers))
            print(f"parareal fine slices on dask: dashboard {executor.dashboard_link}")
        rows = run_rollout(args.checkpoint, steps=args.steps, schedules=args.schedule,
                           data=args.data, samples=args.samples, out=args.out,
                           plot=args.plot, overwrite=args.overwrite, coarse=coarse,
                           pareto=args.pareto, executor=executor,
                           correctors=args.corrector, threads=args.threads,
                           compile=args.compile or False, precision=args.precision,
                           allow_mismatch=args.allow_mismatch)
    print(report(rows))  # the table, its legend, and notes such as a hand-over loss
    for path in (args.out, args.plot, args.pareto):
        if path:
            print(f"wrote {path}")
    return 0


def _warm_start(args: argparse.Namespace) -> int:
    from .coupling.run import run_warm_start

    r = run_warm_start(args.checkpoint, samples=args.samples, seed=args.seed, rtol=args.rtol)
    print(f"PCG to rtol {args.rtol:g} on {args.samples} fresh problems")
    print(f"iterations: cold {r['iterations_cold'].tolist()}, warm "
          f"{r['iterations_warm'].tolist()}")
    print(f"seconds: cold {r['seconds_cold']:.3f}, warm {r['seconds_warm']:.3f} (prediction "
          f"{r['seconds_prediction']:.3f})")
    print(f"initial guess error {r['initial_guess_error'].mean():.3g}; warm vs cold solution "
          f"{r['solution_difference'].max():.2g}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from .surrogates import describe_models

    print(describe_models(args.describe))
    return 0


def _one_line(error: BaseException) -> str:
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip()) \
        or type(error).__name__


def _interrupted(interrupt: KeyboardInterrupt, args: argparse.Namespace | None) -> str:
    """The one line for a Ctrl-C: what is kept and how to go on.

    A command that keeps resumable work says so in its KeyboardInterrupt (generate: the
    samples saved); otherwise it is read off the files here, importing nothing new (a
    second Ctrl-C must not land in a slow import).
    """
    if str(interrupt):
        return _one_line(interrupt)
    command = getattr(args, "command", None)
    out = getattr(args, "out", None)
    if command == "train" and out and "ssmpde.surrogates.checkpoint" in sys.modules:
        from pathlib import Path

        from .surrogates.checkpoint import STATE_JSON

        if (Path(out) / STATE_JSON).is_file():
            return (f"interrupted: the run in '{out}' keeps its last finished epoch; add "
                    "--resume to the same command to go on from it")
    if command == "generate" and out and "ssmpde.generation.generate" in sys.modules:
        from pathlib import Path

        from .data import DatasetFileError, store_progress
        from .generation import parts_directory

        try:
            in_progress = Path(out).is_dir() and store_progress(out) is not None
        except (DatasetFileError, OSError):
            in_progress = False
        if parts_directory(out).is_dir() or in_progress:
            return (f"interrupted: the samples saved for '{out}' are kept; run the same "
                    "command again to resume")
    if command is None or command in ("generate", "train", "convert", "evaluate", "rollout"):
        return ("interrupted before anything was saved (outputs are written whole or not at "
                "all); nothing to resume")
    return "interrupted"


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """ssmpde's own warnings as one line, like its errors; others as Python shows them."""
    if category.__module__.split(".")[0] == "ssmpde":
        return f"ssmpde: warning: {_one_line(message)}\n"
    return _python_format_warning(message, category, filename, lineno, line)


_python_format_warning = warnings.formatwarning


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ssmpde`` command; returns the exit status.

    Exit 0 on success, 2 for a user error (bad input, a file that cannot be read, an output
    that exists or is locked, a diverged solver or training run), 1 for an internal error,
    130 on Ctrl-C at any moment, the imports included; the message is one line on stderr
    (``--debug`` adds the traceback).
    """
    warnings.formatwarning = _format_warning
    args = None
    try:
        parser = _build_parser()
        args = parser.parse_args(argv)  # a bad command line exits 2 with one line
        return _run(args)
    except KeyboardInterrupt as interrupt:
        print(f"\nssmpde: {_interrupted(interrupt, args)}", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _holding_sigint():
    """Ctrl-C held back (SIGINT blocked) in the main thread until the block ends.

    For ``import torch``: its import runs Python callbacks from C++ (pybind11), and a
    KeyboardInterrupt raised inside one ends the process with std::terminate (exit -6,
    "terminate called after throwing an instance of 'pybind11::error_already_set'") instead
    of reaching :func:`main` (1 in ~40 Ctrl-Cs during a plain ``import torch``, measured).
    Held back, the interrupt arrives as the block ends: a KeyboardInterrupt that main turns
    into one line and exit 130, at most the length of the import later. The mask holds only
    this thread: a thread started before the block (an import's worker pool) may take the
    signal, and Python then runs the handler in the main thread at once, inside the import.
    So the handler is also replaced for the block by one that only notes the interrupt,
    and a noted one is raised as the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    handler = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        signal.signal(signal.SIGINT, handler)
    if noted and callable(handler):
        handler(signal.SIGINT, None)


def _run(args: argparse.Namespace) -> int:
    """The command of ``args``, its errors as one line and an exit status (see main)."""
    with _holding_sigint():  # these import torch (see _holding_sigint)
        from .data import DatasetFileError, SchemaError
        from .solvers.base import SolverDivergedError
        from .surrogates.train import TrainingDivergedError

    handlers = {"generate": _generate, "info": _info, "convert": _convert, "models": _models,
                "train": _train,
                "evaluate": _evaluate, "rollout": _rollout, "warm-start": _warm_start}
    try:
        return handlers[args.command](args)
    except MemoryError as error:
        if args.debug:
            raise
        # numpy's text names array shapes and dtypes; say what it means and what to change.
        # (ssmpde's own MemoryErrors, e.g. a dask worker restarted for memory, already do.)
        size = re.search(r"allocate ([\d.]+ \w+)", str(error))
        if size or not str(error) or "Unable to allocate" in str(error):
            print(f"ssmpde: error: out of memory"
                  f"{f' (it asked for {size[1]} at once)' if size else ''}"
                  ": the run needs more memory than this machine has; lower the sizes "
                  "(samples, resolution, --batch-size, steps) and keep --max-memory / "
                  "SSMPDE_MAX_MEMORY within the machine's memory", file=sys.stderr)
        else:
            print(f"ssmpde: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError, ImportError, SchemaError, DatasetFileError,
            SolverDivergedError, TrainingDivergedError) as error:
        if args.debug:
            raise
        print(f"ssmpde: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except Exception as error:  # the last line of defence: one line, never a traceback
        if args.debug:
            raise
        print(f"ssmpde: internal error ({type(error).__name__}: {_one_line(error)}); rerun "
              "with --debug for the traceback and report it", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
