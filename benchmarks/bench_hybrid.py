"""Is a trained model worth using in the solver loop? Error at the horizon against wall time.

For Kuramoto–Sivashinsky (``lpsda``, ν = 0.1, simulated on 512 points and stored on 256, 50
steps of Δt = 0.1) and Navier–Stokes (ν = 1e-4, simulated on 128² and stored on 64², 20 steps
of 1 time unit), from the first frame of held-out test trajectories, every configuration a user
could pick, side by side in one run:

* the fine solver in one continuous run (the reference) and the coarse solvers (the same
  solver on a coarser simulation grid and/or with longer steps: ``ssmpde.coupling.baseline``);
* the learned correction of a coarse solver (``corrected SxT``: the coarse solver's step, then a
  trained corrector; ``ssmpde.coupling.corrected``), for two coarsenings per PDE. The data are
  stored on the coarse solver's own grid, so the corrected state is never handed through a
  coarser one;
* the surrogate alone, fixed schedules (``surrogate:N,solver:1``);
* the error-controlled adaptive schedule at several tolerances (the default indicator);
* parareal with the surrogate as coarse propagator, the fine slices on a 2-worker dask
  ``LocalCluster`` (wall time on 2 workers, and the one-core cost).

Every row also carries its high-correlation time (steps until the Pearson correlation with the
fine solution drops below 0.8, times Δt). It also measures how well each error indicator
predicts the true one-step error of the surrogate (Spearman rank correlation over every state
of the test trajectories), which is how the default indicator was chosen.

The data, the surrogate and the correctors are made in ``--cache`` when absent (``--prepare``
stops after that): the test trajectories (seed 1) and the training ones (seed 0) from the
generator configurations below, the surrogate with the recipe ``bench_long_rollout`` found best
(a window-1 FNO predicting increments), each corrector within ``--corrector-budget`` seconds of
one CPU thread (epochs set from the CPU time of a probe epoch, so the same whatever the load;
three times the budget in wall time is a hard stop). Writes
``benchmarks/results/hybrid.json``, the Pareto figures ``docs/images/pareto_ks.png`` and
``docs/images/pareto_ns.png`` and prints the tables.

    OMP_NUM_THREADS=1 python -m benchmarks.bench_hybrid --prepare --problems ks  # and ns
    python -m benchmarks.bench_hybrid                # the comparison (~5 minutes)
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from benchmarks.common import REPO, RESULTS, header, portable_path, when, write

CACHE = REPO / "benchmarks" / ".cache" / "corrected"
IMAGES = REPO / "docs" / "images"

#: PDE: steps, test trajectories (the batch), schedules, the coarsenings the correctors
#: correct, and how the data, the surrogate and the correctors are made (see :func:`prepare`)
PROBLEMS = {
    "ks": dict(label="Kuramoto-Sivashinsky lpsda nu 0.1, 256 points (512 simulated)",
               steps=50, samples=16,
               solver="kuramoto-sivashinsky", train_samples=512,
               generator=dict(preset="lpsda", viscosity=0.1, resolution=256,
                              simulation_resolution=512),
               surrogate=("fno", "burgers", {"width": 32}, dict(batch_size=32)),
               # Every Fourier mode: a coarse step's error lives at the highest resolved ones.
               corrector=("lean-fno", "ks-corrector", {"modes": [129]}, dict(batch_size=32)),
               coarsenings=["2x5", "2x10"], baselines=["2x1", "1x2", "1x5", "2x2", "2x5", "2x10"],
               # Variant (c): the 2x5 corrector trained through 4 unrolled coarse steps.
               unrolled={"2x5": 4},
               # A cheaper corrector: one Fourier layer of width 8 (every mode kept).
               small={"2x5": {"width": 8, "depth": 1}},
               schedules=["surrogate:4,solver:1", "surrogate:1,solver:1",
                          *[f"adaptive:{t:g}" for t in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)],
                          "parareal:5:1", "parareal:5:2", "parareal:10:2"]),
    "ns": dict(label="Navier-Stokes nu 1e-4, 64x64 (128x128 simulated)", steps=20, samples=4,
               solver="navier-stokes", train_samples=48,
               generator=dict(preset="fno-nu1e-4", resolution=64, simulation_resolution=128,
                              time_stepping="cfl", record_interval=1.0, final_time=20.0),
               surrogate=("fno", "navier-stokes", {}, dict(batch_size=8)),
               corrector=("lean-fno", "ns-corrector", {"modes": [32, 33]}, dict(batch_size=8)),
               coarsenings=["2x1", "2x2"], baselines=["2x1", "1x2", "2x2", "1x5", "2x5"],
               unrolled={}, small={},
               schedules=["surrogate:4,solver:1", "surrogate:1,solver:1",
                          *[f"adaptive:{t:g}" for t in (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)],
                          "parareal:4:1", "parareal:4:2", "parareal:5:2"]),
}


#: The training recipe of the surrogate and of the correctors (bench_long_rollout's best:
#: window 1, AdamW, cosine schedule, teacher forcing).
COMMON = dict(lr=1e-3, weight_decay=1e-4, schedule="cosine", window=1, num_test=0, seed=0)
#: --quick: a tiny KS problem (the smoke test) and tiny models.
QUICK = dict(generator=dict(resolution=32, simulation_resolution=64, domain_length=22.0,
                            viscosity=1.0, final_time=2.5, record_interval=0.5, time_step=0.05),
             train_samples=6, model={"width": 4, "depth": 1, "modes": [4]})


def _train_within(model: tuple, data: Path, out: Path, budget: float, quick: bool,
                  **options) -> dict:
    """Train into ``out`` for about ``budget`` CPU seconds: the CPU time of one probe epoch
    (its set-up included) sets the number of epochs of the cosine schedule, so the training
    is the same whatever else runs on the machine; three times the budget in wall time is a
    hard stop. A corrector's coarse predictions are computed once (the probe's run
    directory passes them on)."""
    import shutil
    import time

    from ssmpde.surrogates.train import TrainConfig, train
    from ssmpde.surrogates.correction import cache_directory

    name, preset, overrides, config = model
    if quick:
        overrides = QUICK["model"]
    config = dict(COMMON, **config, **options)
    test = data.with_name("test.nc")
    epochs, first, setup = 1, {"seconds": None}, None
    if not quick:
        probe = out.with_name(out.name + "-probe")
        shutil.rmtree(probe, ignore_errors=True)
        started, cpu = time.perf_counter(), time.process_time()
        first = train(name, data, out=probe, preset=preset, model_overrides=overrides,
                      config=TrainConfig(epochs=1, **config), progress=False, test_data=test)
        setup = time.perf_counter() - started - first["seconds"]
        epoch_cpu = time.process_time() - cpu
        epochs = max(1, int(budget // epoch_cpu))
        if cache_directory(probe).exists():
            shutil.copytree(cache_directory(probe).parent, cache_directory(out).parent)
        shutil.rmtree(probe)
    metrics = train(name, data, out=out, preset=preset, model_overrides=overrides,
                    config=TrainConfig(epochs=epochs, **config), progress=False,
                    time_limit=None if quick else 3 * budget, test_data=test)
    return {"model": name, "preset": preset, "overrides": overrides,
            "budget_cpu_seconds": budget, "epochs": metrics["epoch"], "planned_epochs": epochs,
            "epoch_seconds": first["seconds"], "setup_seconds": setup,
            "probe_cpu_seconds": None if quick else epoch_cpu,
            "test_rel_l2": metrics.get("test_rel_l2"),
            "test_rel_l2_first_step": (metrics.get("test_rel_l2_per_step") or [None])[0],
            **options}


def prepare(name: str, cache: Path, *, budget: float, corrector_budget: float,
            quick: bool = False) -> dict:
    """The data, the surrogate (``best``) and the correctors (``corrected-SxT``) of problem
    ``name`` in ``cache/name``, each made only when absent; returns what training did."""
    import json

    from ssmpde.generation import generate

    problem = PROBLEMS[name]
    folder = cache / name
    folder.mkdir(parents=True, exist_ok=True)
    generator = dict(problem["generator"], **(QUICK["generator"] if quick else {}))
    samples = {"train.nc": QUICK["train_samples"] if quick else problem["train_samples"],
               "test.nc": problem["samples"]}
    for seed, (file, count) in enumerate(samples.items()):
        if not (folder / file).exists():
            generate(problem["solver"], num_samples=count, seed=seed, out=folder / file,
                     progress=not quick, **generator)
    training = {}
    log = folder / "training.json"
    if log.exists():
        training = json.loads(log.read_text())
    runs = {"best": (problem["surrogate"], budget, dict(target="increment"))}
    for coarsening in problem["coarsenings"]:
        runs[f"corrected-{coarsening}"] = (problem["corrector"], corrector_budget,
                                           dict(target="correction", coarse=coarsening))
    if not quick:
        for coarsening, horizon in problem["unrolled"].items():
            runs[f"corrected-{coarsening}-unrolled{horizon}"] = (
                problem["corrector"], corrector_budget,
                dict(target="correction", coarse=coarsening, horizon=horizon,
                     mode="autoregressive", pushforward=False))
        for coarsening, overrides in problem["small"].items():
            model, preset, base, options = problem["corrector"]
            runs[f"corrected-{coarsening}-small"] = (
                (model, preset, dict(base, **overrides), options), corrector_budget,
                dict(target="correction", coarse=coarsening))
    for run, (model, seconds, options) in runs.items():
        if (folder / run / "config.json").exists():
            continue
        print(f"training {name}/{run} for {seconds:g} s", flush=True)
        training[run] = _train_within(model, folder / "train.nc", folder / run, seconds, quick,
                                      **options)
        log.write_text(json.dumps(training, indent=1))
    return training


def indicator_study(checkpoint: Path, data: Path, samples: int) -> dict:
    """Spearman rank correlation of each indicator's estimate with the true one-step error,
    over every state of the first ``samples`` test trajectories."""
    import numpy as np

    from ssmpde.coupling import Conditions, SurrogateStepper
    from ssmpde.coupling.indicators import INDICATORS, indicator_quality, make_indicator
    from ssmpde.data import SAMPLE, TIME, open_dataset
    from ssmpde.solvers.base import solver_of

    surrogate = SurrogateStepper.from_checkpoint(checkpoint)
    with open_dataset(data) as ds:
        solver = solver_of(ds)  # the test set's generator: that of the training data
        sub = ds.isel({SAMPLE: slice(0, samples)}).load()
        trajectories = np.stack([sub[f].values for f in solver.fields], axis=2)
        parameters = Conditions.from_dataset(sub)
        times = sub[TIME].values
    indicators = {}
    for name in INDICATORS:
        with contextlib.suppress(ValueError):  # ensemble needs a second model
            indicators[name] = make_indicator(name, solver)
    return indicator_quality(solver, surrogate, trajectories, indicators,
                             parameters=parameters, times=times)


def table(rows: list[dict], fine_seconds: float) -> str:
    lines = ["| configuration | kind | rel. L2 at horizon | corr. time | wall s | of fine | "
             "detail |", "|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if "failed" not in r), key=lambda r: r["seconds"]):
        detail = ""
        if r["kind"] == "parareal":
            detail = (f"{r['iterations']} it., {r['fine_steps']} fine steps, "
                      f"{r['serial_seconds']:.3f} s on one core")
        elif r["kind"] == "corrected":
            # files from before the 'corrected' step count hold it as 'surrogate'
            steps = r["corrected"] if "corrected" in r else r["surrogate"]
            detail = (f"{1e3 * r['seconds'] / steps:.2f} ms per step (coarse step "
                      f"and correction), run {r.get('run', '')}")
        elif "surrogate" in r and r["kind"] != "coarse":
            detail = f"{r['surrogate']} surrogate / {r['solver'] + r['fallback']} solver steps"
        correlation = r.get("correlation_time")
        lines.append(f"| {r['schedule']} | {r['kind']} | {r['final_rel_l2']:.3g} | "
                     f"{'' if correlation is None else f'{correlation:g}'} | "
                     f"{r['seconds']:.3f} | {r['seconds'] / fine_seconds:.0%} | {detail} |")
    for r in (r for r in rows if "failed" in r):
        lines.append(f"| {r['schedule']} | {r['kind']} | failed | | | | "
                     f"{r['failed'].splitlines()[0][:80]} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The tables of the benchmarks page: per problem the rows, the verdict and the
    indicators."""
    parts = []
    for problem in result["problems"].values():
        rows = problem["rows"]
        fine = next(r for r in rows if r["schedule"] == "solver, one run")
        parts.append(f"**{problem['label']}, {problem['steps']} steps, {problem['samples']} "
                     f"trajectories** ({when(result)}; parareal on {result['workers']} "
                     "dask workers)\n")
        parts.append(table(rows, fine["seconds"]))
        quality = problem["indicators"]
        parts.append(
            f"\n{problem['verdict'][0].upper()}{problem['verdict'][1:]}. Error indicators, "
            f"Spearman rank correlation with the true one-step error over "
            f"{quality['states']} states: " + ", ".join(
                f"{k} {v['spearman']:.2f} ({v['seconds_per_step'] * 1e3:.1f} ms per step)"
                for k, v in quality["indicators"].items()) + ".\n")
    return "\n".join(parts)


#: The benchmarks page shows these tables (``python -m benchmarks``' sections).
details = markdown


def redraw(result: dict, images: Path) -> None:
    """The Pareto figures of a saved comparison, drawn again from its rows (as ``rollout
    --pareto`` draws them), without running anything."""
    from ssmpde.coupling.run import pareto_title
    from ssmpde.plotting import plot_pareto

    for name, saved in result["problems"].items():
        figure = images / f"pareto_{name}.png"
        plot_pareto(figure, saved["rows"], title=pareto_title(
            PROBLEMS[name]["solver"], saved["steps"], saved["samples"]))
        print(f"wrote {figure}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="data, surrogate and correctors (made there when absent)")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="CPU seconds to train each surrogate (sets its epochs)")
    parser.add_argument("--corrector-budget", type=float, default=480.0,
                        help="CPU seconds to train each corrector (sets its epochs)")
    parser.add_argument("--prepare", action="store_true",
                        help="make the data and train the models, then stop")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--samples", type=int,
                        help="test trajectories (batch; default 16 for KS, 4 for NS, whose "
                             "fine solver takes about 0.25 s per sample and step)")
    parser.add_argument("--workers", type=int, default=2, help="parareal dask workers")
    parser.add_argument("--images", type=Path, default=IMAGES)
    parser.add_argument("--out", type=Path, default=RESULTS / "hybrid.json")
    parser.add_argument("--quick", action="store_true",
                        help="4 steps and three schedules (the smoke test)")
    parser.add_argument("--table-only", action="store_true",
                        help="print the Markdown tables of --out and stop")
    parser.add_argument("--figures-only", action="store_true",
                        help="redraw the Pareto figures from the rows of --out and stop")
    args = parser.parse_args(argv)
    if args.table_only or args.figures_only:
        import json

        saved = json.loads(args.out.read_text())
        if args.figures_only:
            redraw(saved, args.images)
        else:
            print(markdown(saved))
        return saved

    from ssmpde.coupling.baseline import SURROGATE_KINDS, against_coarse
    from ssmpde.coupling.run import run_rollout
    from ssmpde.cluster import dask_cluster

    training = {name: prepare(name, args.cache, budget=args.budget,
                              corrector_budget=args.corrector_budget, quick=args.quick)
                for name in args.problems}
    if args.prepare:
        return {"training": training}
    import json

    result = header("hybrid")
    result.update(workers=args.workers, problems={})
    with dask_cluster("local", args.workers) as (client, _):
        for name in args.problems:
            problem = PROBLEMS[name]
            samples = args.samples or problem["samples"]
            if args.quick:
                problem = dict(problem, steps=4, schedules=[
                    "surrogate:1,solver:1", "adaptive:0.01", "parareal:2:1"])
            checkpoint, data = args.cache / name / "best", args.cache / name / "test.nc"
            correctors = sorted(p for p in (args.cache / name).glob("corrected-*")
                                if (p / "config.json").exists())
            client.restart()  # fresh workers: no state carried over between problems
            # Warm-up, untimed: imports, numba compilation and FFT plans in the driver and in
            # every worker (parareal's first fine slices would otherwise pay for them).
            run_rollout(checkpoint, steps=2, schedules=["parareal:2:1"], data=data,
                        samples=f"0:{samples}", coarse=[], executor=client)
            figure = args.images / f"pareto_{name}.png"
            rows = run_rollout(checkpoint, steps=problem["steps"],
                               schedules=problem["schedules"], data=data,
                               samples=f"0:{samples}", pareto=figure, overwrite=True,
                               executor=client, correctors=correctors,
                               coarse=problem["baselines"])
            for row in rows:  # correctors of one coarsening differ by their run's name
                if "checkpoint" in row:
                    run = Path(row.pop("checkpoint")).name
                    row["run"] = run
                    if run.endswith("-small"):
                        row["schedule"] += ", small"
            fine = next(r for r in rows if r["schedule"] == "solver, one run")
            verdict = against_coarse(rows)
            # The goal on KS: <= 1 % at the horizon in <= 25 % of the fine solver's
            # wall time, and no coarse solver as fast as accurate.
            coarse = [r for r in rows if r["kind"] == "coarse" and "failed" not in r]
            goal = [r["schedule"] for r in rows
                    if r["kind"] in SURROGATE_KINDS and "failed" not in r
                    and r["final_rel_l2"] <= 0.01 and r["seconds"] <= 0.25 * fine["seconds"]
                    and all(c["final_rel_l2"] > r["final_rel_l2"] for c in coarse
                            if c["seconds"] <= r["seconds"])]
            quality = indicator_study(checkpoint, data, samples)
            for row in rows:
                row.pop("errors", None)
            result["problems"][name] = {
                "label": problem["label"], "steps": problem["steps"], "samples": samples,
                "rows": rows,
                "verdict": verdict["summary"], "goal_met_by": goal, "indicators": quality,
                "training": json.loads((args.cache / name / "training.json").read_text())
                if (args.cache / name / "training.json").exists() else {},
                "figure": portable_path(figure)}
            print(f"\n## {problem['label']}, {problem['steps']} steps, {samples} samples\n")
            print(table(rows, fine["seconds"]))
            print(f"\n{verdict['summary']}")
            print(f"<= 1 % in <= 25 % of the fine time, beating the coarse solver: "
                  f"{', '.join(goal) or 'none'}")
            print("indicators (Spearman rho with the true one-step error): " + ", ".join(
                f"{k} {v['spearman']:.3f} ({v['seconds_per_step'] * 1e3:.1f} ms/step)"
                for k, v in quality["indicators"].items()))
    write(result, args.out)
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
