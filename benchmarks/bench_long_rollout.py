"""Window-1 surrogates for long rollouts: which training recipe keeps a CPU-trained model
stable over the horizon of the hybrid benchmark, measured at an equal wall-clock budget.

Data (generated into ``--out`` when absent, reused otherwise):

* Kuramoto–Sivashinsky, ``preset="lpsda"``, ν = 0.1 (128 points, Δt = 0.1, T = 5: 51
  frames), ``--ks-samples`` training trajectories (seed 0) and ``--ks-test`` test ones
  (seed 1): ``OUT/ks/train.nc``, ``OUT/ks/test.nc``. Horizon: 50 steps from frame 0;
* Navier–Stokes, ``preset="fno-nu1e-4"`` at 64² (simulated at 128², CFL time stepping),
  one frame per unit time to T = 20 (21 frames), ``--ns-samples`` / ``--ns-test``:
  ``OUT/ns/train.nc``, ``OUT/ns/test.nc``. Horizon: 20 steps from frame 0.

Every variant is a window-1 model (the hybrid solver is Markovian; viscosity and forcing are
conditioning channels the task adds) trained on the whole training file with AdamW (lr 1e-3,
weight decay 1e-4, cosine schedule, seed 0; batch 32 for KS, 8 for NS) for as many epochs as
``--budget`` seconds buy on one thread (``bench_training.budget_plan``: an epoch is timed on a few
samples, scaled; the budget is also a hard stop), ``--jobs`` variants at a time. A variant
is ``PDE/MODEL/RECIPE``; a recipe is

* ``tf``: teacher forcing, horizon 1;
* ``arK`` (K >= 2): autoregressive unrolls of K steps with pushforward (the loss of the last
  step only, gradients through it alone: the earlier predictions are fed back detached); or
* ``bpttK``: autoregressive unrolls of K steps, the loss averaged over the K steps and
  back-propagated through the whole unroll (``pushforward=False``);

optionally followed by ``-nSTD``: Gaussian noise of standard deviation STD on the
normalised input frames (e.g. ``tf-n0.01``, ``ar4-n0.01``), and by ``-inc``: the model predicts
the increment over its input frame (``TrainConfig(target="increment")``). By default (``VARIANTS``): on
KS, a 1D FNO of width 32 with ``tf``, ``tf-n0.001``, ``tf-n0.01``, ``ar4-n0.01``, ``bptt4``,
``bptt4-n0.01``, and ``tf`` for FNOs of width 16 and 64 and a small SS-NO (window 1: its
temporal memory sees one frame); on NS, the FNO paper's 2D FNO (width 20, 12 modes per
corner) with ``tf``, ``tf-n0.01``, ``ar4-n0.01``, ``bptt4-n0.01``.

(A curriculum on the horizon would need a run that starts from another run's weights, which
``ssmpde.surrogates.train.train`` does not offer: every run starts from a fresh
initialisation and ``resume`` refuses a changed horizon.)

Each trained run is evaluated with ``ssmpde.surrogates.train.evaluate`` on the test file: a
free autoregressive rollout from frame 0 over the whole trajectory. Reported per variant:
the one-step error (``rel_l2_per_step[0]``), the error at the horizon (step 50 for KS, 20 for
NS), the mean over the trajectory, the whole per-step curve, and the milliseconds of one
``SurrogateStepper.step`` on a batch of 16 states on one thread (what competes with the
solver in the hybrid; timed after all training, one run after the other). The run with the
lowest error at step 20 per PDE (KS is chaotic: at step 50 every model has decorrelated; among
those with a one-step error below 0.5: a model that collapsed to the mean scores about 1, less
than one that drifts) is copied to
``OUT/ks/best`` and ``OUT/ns/best`` (loadable by
``ssmpde.coupling.SurrogateStepper.from_checkpoint``).

    OMP_NUM_THREADS=1 python -m benchmarks.bench_long_rollout --budget 240 --jobs 2

(about 30 minutes on two cores, plus 8 for the data; ``--reuse`` keeps the variants already
in the results file and trains only the others). The committed results were made in three
invocations at ``--budget 240``, each training two variants at a time, the last one being

    OMP_NUM_THREADS=1 python -m benchmarks.bench_long_rollout --budget 240 --jobs 2 --reuse \
        --variants ks/fno-w32/tf ks/fno-w32/tf-n0.001 ks/fno-w32/tf-n0.01 \
        ks/fno-w32/ar4-n0.01 ks/fno-w32/bptt4 ks/fno-w32/bptt4-n0.01 ks/fno-w16/tf \
        ks/fno-w64/tf ks/ssno-w32/tf ns/fno-ns/tf ns/fno-ns/tf-n0.01 ns/fno-ns/ar4-n0.01 \
        ns/fno-ns/bptt4-n0.01 ks/fno-w32/ar4 ks/fno-w16/ar4-n0.01 ks/fno-w64/ar4-n0.01 \
        ks/ssno-w32/ar4-n0.01

(the defaults plus pushforward without noise and for the other KS models; rows marked
``reused`` were trained by the earlier invocations; all runs are timed by the last one).

Writes ``benchmarks/results/long_rollout.json`` (``--results``) and the runs under
``OUT/runs``. The paths it records are relative: the data files and the best runs to
``OUT``, each variant's ``run`` to the runs folder (``--runs``), so that a results file
made on one machine names the same files on another. ``--quick`` runs the variants on tiny
data and models with a 1-second budget (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import shutil
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.common import RESULTS, header, interleaved, portable_path, seconds, write

DEFAULT_OUT = Path(__file__).resolve().parent / ".cache" / "hybrid"

#: pde: solver, generator options (full and --quick), rollout horizon (steps from frame 0)
PDES = {
    "ks": dict(solver="kuramoto-sivashinsky", horizon=50,
               config=dict(preset="lpsda", viscosity=0.1),
               quick=dict(preset="lpsda", viscosity=0.1, final_time=0.5)),
    "ns": dict(solver="navier-stokes", horizon=20,
               config=dict(preset="fno-nu1e-4", resolution=64, simulation_resolution=128,
                           time_stepping="cfl", record_interval=1.0, final_time=20.0),
               quick=dict(preset="fno-nu1e-4", resolution=16, simulation_resolution=32,
                          time_stepping="cfl", record_interval=1.0, final_time=5.0)),
}
#: model label: (registered model, preset, overrides); fno presets fit 1D or 2D data
MODELS = {
    "fno-w16": ("fno", "burgers", {"width": 16}),        # 1D, 16 modes, 4 layers
    "fno-w32": ("fno", "burgers", {"width": 32}),
    "fno-w64": ("fno", "burgers", {}),                   # the FNO paper's 1D Burgers size
    "ssno-w32": ("ssno", "ks", {"width": 32, "lifting": 64, "state_size": 32}),
    "fno-ns": ("fno", "navier-stokes", {}),              # 2D, width 20, 12 modes per corner
}
QUICK_MODEL = {"width": 4, "depth": 1, "modes": [4], "lifting": 8, "state_size": 4}
#: the variants run by default: (pde, model, recipe); see :func:`recipe_options`
VARIANTS = [("ks", "fno-w32", "tf"), ("ks", "fno-w32", "tf-n0.001"),
            ("ks", "fno-w32", "tf-n0.01"), ("ks", "fno-w32", "ar4-n0.01"),
            ("ks", "fno-w32", "bptt4"), ("ks", "fno-w32", "bptt4-n0.01"),
            ("ks", "fno-w16", "tf"), ("ks", "fno-w64", "tf"), ("ks", "ssno-w32", "tf"),
            ("ns", "fno-ns", "tf"), ("ns", "fno-ns", "tf-n0.01"), ("ns", "fno-ns", "ar4-n0.01"),
            ("ns", "fno-ns", "bptt4-n0.01"), ("ks", "fno-w32", "tf-inc"),
            ("ks", "fno-w32", "bptt4-n0.01-inc"), ("ks", "fno-w16", "tf-inc"),
            ("ns", "fno-ns", "tf-inc")]
COMMON = dict(lr=1e-3, weight_decay=1e-4, schedule="cosine", window=1, num_test=0, seed=0)
INFERENCE_BATCH = 16
#: the best run per PDE is chosen among those whose one-step error is below this
USABLE_ONE_STEP = 0.5
#: ... by their error at this step: KS is chaotic, so at step 50 every model (and the solver
#: itself from a 1e-2 perturbation: 1.24) has decorrelated, and the horizon error no longer
#: ranks the steppers; at step 20 it does (NS: its horizon).
SELECT_STEP = 20


def label_of(pde: str, model: str, recipe: str) -> str:
    return f"{pde}/{model}/{recipe}"


def recipe_options(recipe: str) -> dict:
    """TrainConfig options of a recipe: ``tf``, ``arK`` or ``bpttK``, optionally followed by
    ``-nSTD`` (input noise) and ``-inc`` (predict increments: ``target="increment"``)."""
    head, *tails = recipe.split("-")
    unrolled = {"ar": True, "bptt": False}  # prefix: pushforward
    prefix = head.rstrip("0123456789")
    if head == "tf":
        options = dict(mode="teacher-forcing", horizon=1)
    elif prefix in unrolled and head[len(prefix):].isdigit() and int(head[len(prefix):]) >= 2:
        options = dict(mode="autoregressive", horizon=int(head[len(prefix):]),
                       pushforward=unrolled[prefix])
    else:
        raise ValueError(f"recipe {recipe!r}: tf, arK or bpttK (K >= 2), optionally -nSTD "
                         "and -inc")
    noise, target = 0.0, "state"
    for tail in tails:
        if tail == "inc":
            target = "increment"
            continue
        try:
            noise = float(tail[1:]) if tail.startswith("n") else -1.0
        except ValueError:
            noise = -1.0
        if not noise >= 0:
            raise ValueError(f"recipe {recipe!r}: the suffixes are -nSTD (e.g. -n0.01) and "
                             "-inc")
    return dict(options, noise_std=noise, target=target)


def variant_config(recipe: str, batch_size: int) -> dict:
    """The TrainConfig options (but epochs) of a variant."""
    return dict(COMMON, batch_size=batch_size, **recipe_options(recipe))


def model_overrides(model: str, quick: bool) -> dict:
    """The model options of a variant (tiny ones with ``quick``)."""
    name, _, overrides = MODELS[model]
    overrides = dict(overrides)
    if quick:
        keys = {"fno": ("width", "depth", "modes"),
                "ssno": ("width", "depth", "lifting", "state_size")}[name]
        overrides.update({k: QUICK_MODEL[k] for k in keys})
    return overrides


def reusable_rows(path: Path, settings: dict, files: dict, runs: Path) -> dict:
    """``{label: row}`` of an earlier results file made with the same budget, settings and
    data (the same paths relative to ``OUT``, samples and seeds), whose run directories
    still exist in ``runs``."""
    import json

    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if any(earlier.get(k) != v for k, v in settings.items()):
        return {}
    rows = {}
    for row in earlier.get("rows", []):
        data = earlier.get("data", {}).get(row.get("pde"), {})
        now = files.get(row.get("pde"), {})
        if all(data.get(split, {}).get(key) == now.get(split, {}).get(key)
               for split in ("train", "test") for key in ("path", "samples", "seed")) \
                and (runs / row["run"] / "weights.safetensors").exists():
            rows[row["label"]] = row
    return rows


def _one_thread() -> None:
    """Pool initialiser: one thread for torch and numba in this process."""
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(ImportError):
        import numba

        numba.set_num_threads(1)


def _generate(pde: str, split: str, samples: int, seed: int, path: Path, quick: bool) -> dict:
    """Generate one file (one thread); returns what was done."""
    from ssmpde.data import open_dataset
    from ssmpde.generation import generate

    spec = PDES[pde]
    options = dict(spec["quick" if quick else "config"])
    # threads=1: numba, torch and FFTW on one thread for the run, restored afterwards (with
    # --jobs 1 this runs in the caller's process, which keeps its own counts)
    elapsed, _ = seconds(lambda: generate(
        spec["solver"], num_samples=samples, seed=seed, out=path, progress=False,
        overwrite=True, threads=1, **options).close())
    with open_dataset(path) as ds:
        sizes = dict(ds.sizes)
    return {"pde": pde, "split": split, "path": str(path), "seed": seed, "samples": samples,
            "generated_seconds": elapsed, "sizes": sizes}


def ensure_data(out: Path, samples: dict, quick: bool, jobs: int) -> dict:
    """``{pde: {"train": info, "test": info}}``: the files in ``out``, generated if absent
    (or holding another number of samples); each ``info["path"]`` is relative to ``out``."""
    from ssmpde.data import open_dataset

    wanted, found = [], {}
    for pde, (train, test) in samples.items():
        for split, count, seed in (("train", train, 0), ("test", test, 1)):
            path = out / pde / f"{split}.nc"
            info = None
            if path.exists():
                with open_dataset(path) as ds:
                    if ds.sizes["sample"] == count:
                        info = {"pde": pde, "split": split, "path": portable_path(path, out),
                                "seed": seed,
                                "samples": count, "generated_seconds": None,
                                "sizes": dict(ds.sizes)}
            if info is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                wanted.append((pde, split, count, seed, path, quick))
            else:
                found.setdefault(pde, {})[split] = info
    # the biggest first, so that two workers finish together
    wanted.sort(key=lambda w: -(w[2] * (100 if w[0] == "ns" else 1)))
    for info in _map(_generate, wanted, jobs):
        print(f"generated {info['path']} ({info['samples']} samples) in "
              f"{info['generated_seconds']:.0f} s", flush=True)
        info["path"] = portable_path(info["path"], out)
        found.setdefault(info["pde"], {})[info["split"]] = info
    return found


def _map(function, arguments: list[tuple], jobs: int):
    """``function(*a)`` for each ``a``, ``jobs`` processes at a time (in this process when
    ``jobs == 1``), yielded as they are submitted."""
    if jobs == 1 or len(arguments) <= 1:
        for a in arguments:
            yield function(*a)
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_one_thread) as pool:
        futures = [pool.submit(function, *a) for a in arguments]
        for future in futures:
            yield future.result()


def inference_ms(run: Path, test_file: Path, repeats: int) -> dict:
    """Milliseconds (median and minimum over ``repeats``) of one ``SurrogateStepper.step`` on
    ``INFERENCE_BATCH`` test states (frame 0 of the test trajectories, repeated as needed),
    on one thread."""
    import numpy as np

    from ssmpde.coupling import SurrogateStepper
    from ssmpde.data import open_dataset

    stepper = SurrogateStepper.from_checkpoint(run)
    with open_dataset(test_file) as ds:
        index = np.arange(INFERENCE_BATCH) % ds.sizes["sample"]
        picked = ds.isel(sample=index)
        history = np.stack([picked[f].isel(time=slice(0, stepper.window)).values
                            for f in stepper.fields], axis=2)
        parameters = {name: picked[name].values for name in stepper.parameter_names}
    times = interleaved({"step": lambda: stepper.step(history, parameters=parameters)},
                        repeats=repeats, warmup=3, threads=1).times["step"]
    return {"median": 1e3 * statistics.median(times), "min": 1e3 * min(times)}


def run_variant(pde: str, model: str, recipe: str, train_file: str, test_file: str,
                budget: float, batch_size: int, runs: str, probe_samples: int,
                quick: bool) -> dict:
    """Plan, train and evaluate one variant on one thread; returns its row."""
    import torch

    from benchmarks.bench_training import _subset_file, budget_plan
    from ssmpde.data import open_dataset
    from ssmpde.surrogates import parameter_count
    from ssmpde.surrogates.train import TrainConfig, evaluate, load_checkpoint, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        name, preset, _ = MODELS[model]
        overrides = model_overrides(model, quick)
        common = variant_config(recipe, batch_size)
        label = label_of(pde, model, recipe)
        stem = label.replace("/", "-")
        runs_dir = Path(runs)
        train_path = Path(train_file)
        with open_dataset(train_path) as ds:
            num_train = ds.sizes["sample"]
        probe_count = min(probe_samples, num_train)
        probe_data, _ = _subset_file(train_path, 0, probe_count, runs_dir / f"{stem}-probe.nc")
        plan = budget_plan(name, preset, data=train_path, num_test=0, budget=budget,
                           probe_data=probe_data, probe_samples=probe_count,
                           num_train=num_train, common=common, overrides=overrides,
                           workdir=runs_dir, name=stem)
        probe_data.unlink(missing_ok=True)
        run = runs_dir / stem
        shutil.rmtree(run, ignore_errors=True)
        train_seconds, metrics = seconds(lambda: train(
            name, plan["data"], out=run, preset=preset, model_overrides=overrides,
            config=TrainConfig(epochs=plan["epochs"], **common), progress=False,
            time_limit=budget))
        evaluation = evaluate(run, test_file)
        per_step = evaluation["rel_l2_per_step"]
        horizon = min(PDES[pde]["horizon"], len(per_step))
        net, _ = load_checkpoint(run)
        return {"label": label, "pde": pde, "model": model, "recipe": recipe,
                "registered_model": name, "preset": preset, "model_overrides": overrides,
                "train_config": common, "parameters": parameter_count(net),
                "train_samples": plan["train_samples"],
                "epoch_seconds_estimate": plan["epoch_seconds_estimate"],
                "epochs_planned": plan["epochs"], "epochs_done": metrics["epoch"],
                "train_seconds": train_seconds, "final_train_loss": metrics["train_loss"],
                "one_step_rel_l2": per_step[0], "horizon_steps": horizon,
                "horizon_rel_l2": per_step[horizon - 1],
                "trajectory_rel_l2": sum(per_step[:horizon]) / horizon,
                "rel_l2_per_step": per_step, "run": portable_path(run, runs_dir)}
    finally:
        torch.set_num_threads(threads)


def details(result: dict) -> str:
    """The benchmarks page's table: every variant, its training and its errors, per PDE, the
    run kept as the best in bold."""
    lines = ["| variant | epochs (s) | one-step rel. L2 | rel. L2 at the horizon (step) | "
             "trajectory mean rel. L2 |", "|---|---|---|---|---|"]
    best = {entry["label"] for entry in result.get("best", {}).values()}
    for row in sorted(result["rows"], key=lambda r: r["pde"]):
        label = f"**{row['label']}**" if row["label"] in best else row["label"]
        lines.append(f"| {label} | {row['epochs_done']} ({row['train_seconds']:.0f}) | "
                     f"{row['one_step_rel_l2']:.3g} | {row['horizon_rel_l2']:.3g} "
                     f"({row['horizon_steps']}) | {row['trajectory_rel_l2']:.3g} |")
    lines.append(f"\nIn bold, the run kept per PDE: {result['best_rule']}.")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="data and best runs (OUT/ks, OUT/ns)")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="training seconds per variant (one thread)")
    parser.add_argument("--jobs", type=int, default=2, help="variants trained at a time")
    parser.add_argument("--ks-batch-size", type=int, default=32)
    parser.add_argument("--ns-batch-size", type=int, default=8)
    parser.add_argument("--ks-samples", type=int, default=256)
    parser.add_argument("--ks-test", type=int, default=32)
    parser.add_argument("--ns-samples", type=int, default=96)
    parser.add_argument("--ns-test", type=int, default=16)
    parser.add_argument("--probe-samples", type=int, default=8,
                        help="samples of the timed epoch that sets each variant's epochs")
    parser.add_argument("--variants", nargs="+", metavar="PDE/MODEL/RECIPE",
                        default=[label_of(*v) for v in VARIANTS],
                        help=f"models {sorted(MODELS)}; recipes tf, arK or bpttK, optionally "
                             "-nSTD")
    parser.add_argument("--runs", type=Path, help="run directories (default OUT/runs)")
    parser.add_argument("--results", type=Path, default=RESULTS / "long_rollout.json")
    parser.add_argument("--reuse", action="store_true",
                        help="take the rows of variants already in --results (same budget, "
                             "settings and data, run directory present) instead of training "
                             "them again; every run is timed again")
    parser.add_argument("--quick", action="store_true",
                        help="tiny data and models, a 1-second budget: a smoke test")
    args = parser.parse_args(argv)
    variants = []
    for text in args.variants:
        parts = tuple(text.split("/"))
        try:
            if len(parts) != 3 or parts[0] not in PDES or parts[1] not in MODELS:
                raise ValueError("")
            recipe_options(parts[2])
        except ValueError as error:
            parser.error(f"unknown variant {text!r}: PDE/MODEL/RECIPE with PDE in "
                         f"{sorted(PDES)}, MODEL in {sorted(MODELS)}, RECIPE tf, arK or "
                         f"bpttK, optionally -nSTD (e.g. ar4-n0.01). {error}")
        variants.append(parts)
    if args.quick:
        args.budget = min(args.budget, 1.0)
        args.ks_samples, args.ks_test, args.ns_samples, args.ns_test = 4, 2, 2, 1
        args.probe_samples = 2
    pdes = sorted({v[0] for v in variants})
    runs = args.runs or args.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    sizes = {"ks": (args.ks_samples, args.ks_test), "ns": (args.ns_samples, args.ns_test)}
    files = ensure_data(args.out, {p: sizes[p] for p in pdes}, args.quick, args.jobs)
    batch_size = {"ks": args.ks_batch_size, "ns": args.ns_batch_size}
    settings = {"quick": args.quick, "budget_seconds_per_variant": args.budget,
                "settings": COMMON, "batch_size": batch_size}
    result = header("long_rollout")
    result.update({**settings, "threads_per_variant": 1, "parallel_jobs": args.jobs,
                   "recipes": {v[2]: recipe_options(v[2]) for v in variants},
                   "models": {k: list(v) for k, v in MODELS.items()},
                   "horizons": {p: PDES[p]["horizon"] for p in pdes},
                   "inference_batch": INFERENCE_BATCH, "data": files,
                   "best_rule": f"lowest error at step {SELECT_STEP} among the variants "
                                f"with a one-step error below {USABLE_ONE_STEP} (all if none)",
                   "rows": []})
    earlier = reusable_rows(args.results, settings, files, runs) if args.reuse else {}
    rows, arguments = {}, []
    for pde, model, recipe in variants:
        label = label_of(pde, model, recipe)
        row = earlier.get(label)
        if row is not None and row["train_config"] == variant_config(
                recipe, batch_size[pde]) and row["model_overrides"] == model_overrides(
                model, args.quick):
            rows[label] = dict(row, reused=True)
            print(f"{label:>24}: reused from {args.results}", flush=True)
        else:
            arguments.append((pde, model, recipe, str(args.out / files[pde]["train"]["path"]),
                              str(args.out / files[pde]["test"]["path"]), args.budget,
                              batch_size[pde], str(runs), args.probe_samples, args.quick))
    for row in _map(run_variant, arguments, args.jobs):
        rows[row["label"]] = row
        print(f"{row['label']:>24}: {row['parameters']:>7,} parameters, "
              f"{row['epochs_done']}/{row['epochs_planned']} epochs in "
              f"{row['train_seconds']:.0f} s, one-step {row['one_step_rel_l2']:.2e}, step "
              f"{row['horizon_steps']} {row['horizon_rel_l2']:.3f}, mean "
              f"{row['trajectory_rel_l2']:.3f}", flush=True)
    # With --reuse, the earlier file's other variants stay in the results (not retimed).
    for label, row in earlier.items():
        rows.setdefault(label, dict(row, reused=True))
    # Timed here, one after the other on one thread, once no training runs.
    for pde, model, recipe in variants:
        row = rows[label_of(pde, model, recipe)]
        timing = inference_ms(runs / row["run"], args.out / files[pde]["test"]["path"],
                              5 if args.quick else 50)
        row["ms_per_step_batch16"], row["ms_per_step_batch16_min"] = (timing["median"],
                                                                      timing["min"])
        result["rows"].append(row)
        print(f"{row['label']:>24}: {timing['median']:.1f} ms per step (batch "
              f"{INFERENCE_BATCH}, median; min {timing['min']:.1f})", flush=True)
    best = {}
    for pde in pdes:
        rows = [r for r in result["rows"] if r["pde"] == pde]
        # A model that collapsed to the mean (one-step error ~1) scores ~1 at the horizon,
        # below a model that tracks the solution for a while and then drifts: not a stepper.
        usable = [r for r in rows if r["one_step_rel_l2"] < USABLE_ONE_STEP] or rows
        winner = min(usable, key=lambda r: r["rel_l2_per_step"][
            min(SELECT_STEP, len(r["rel_l2_per_step"])) - 1])
        target = args.out / pde / "best"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(runs / winner["run"], target)
        best[pde] = {"label": winner["label"], "path": portable_path(target, args.out),
                     "horizon_rel_l2": winner["horizon_rel_l2"]}
        print(f"best {pde}: {winner['label']} -> {target}", flush=True)
    result["best"] = best
    result["wall_seconds"] = time.perf_counter() - started
    write(result, args.results)
    return result


if __name__ == "__main__":
    main()
