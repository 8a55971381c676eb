"""Is the surrogate worth using in the solver loop? Error at the horizon against wall time.

For Kuramoto–Sivashinsky (``lpsda``, ν = 0.1, 128 points, 50 steps of Δt = 0.1) and
Navier–Stokes (ν = 1e-4, 64², 20 steps of 1 time unit), from the first frame of held-out
test trajectories, every configuration a user could pick, side by side in one run:

* the fine solver in one continuous run (the reference) and the coarse solvers (the same
  solver on a coarser simulation grid and/or with longer steps: ``ssmpde.coupling.baseline``);
* the surrogate alone, fixed schedules (``surrogate:N,solver:1``);
* the error-controlled adaptive schedule at several tolerances (the default indicator);
* parareal with the surrogate as coarse propagator, the fine slices on a 2-worker dask
  ``LocalCluster`` (wall time on 2 workers, and the one-core cost).

It also measures how well each error indicator predicts the true one-step error of the
surrogate (Spearman rank correlation over every state of the test trajectories), which is
how the default indicator was chosen. Writes ``benchmarks/results/hybrid.json``, the Pareto
figures ``docs/images/pareto_ks.png`` and ``docs/images/pareto_ns.png`` and prints the tables.

The surrogates and the data come from ``benchmarks/bench_long_rollout.py`` (the best of its
variants per PDE, in ``--cache``):

    python -m benchmarks.bench_long_rollout          # data + surrogates (~35 min)
    python -m benchmarks.bench_hybrid                # ~3 minutes
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from benchmarks.common import REPO, RESULTS, header, portable_path, when, write

CACHE = REPO / "benchmarks" / ".cache" / "hybrid"
IMAGES = REPO / "docs" / "images"

#: PDE: steps, test trajectories (the batch), schedules
PROBLEMS = {
    "ks": dict(label="Kuramoto-Sivashinsky lpsda nu 0.1, 128 points", steps=50, samples=16,
               schedules=["surrogate:4,solver:1", "surrogate:1,solver:1",
                          *[f"adaptive:{t:g}" for t in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)],
                          "parareal:5:1", "parareal:5:2", "parareal:10:2"]),
    "ns": dict(label="Navier-Stokes nu 1e-4, 64x64", steps=20, samples=4,
               schedules=["surrogate:4,solver:1", "surrogate:1,solver:1",
                          *[f"adaptive:{t:g}" for t in (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)],
                          "parareal:4:1", "parareal:4:2", "parareal:5:2"]),
}


def indicator_study(checkpoint: Path, data: Path, samples: int) -> dict:
    """Spearman rank correlation of each indicator's estimate with the true one-step error,
    over every state of the first ``samples`` test trajectories."""
    import json

    import numpy as np

    from ssmpde import data as schema
    from ssmpde.coupling import Conditions, SurrogateStepper
    from ssmpde.coupling.indicators import INDICATORS, indicator_quality, make_indicator
    from ssmpde.coupling.run import _solver_for

    surrogate = SurrogateStepper.from_checkpoint(checkpoint)
    record = json.loads((checkpoint / "config.json").read_text())
    solver = _solver_for(record, data)
    with schema.open_dataset(data) as ds:
        sub = ds.isel({schema.SAMPLE: slice(0, samples)}).load()
        trajectories = np.stack([sub[f].values for f in solver.fields], axis=2)
        parameters = Conditions.from_dataset(sub)
        times = sub[schema.TIME].values
    indicators = {}
    for name in INDICATORS:
        with contextlib.suppress(ValueError):  # ensemble needs a second model
            indicators[name] = make_indicator(name, solver)
    return indicator_quality(solver, surrogate, trajectories, indicators,
                             parameters=parameters, times=times)


def table(rows: list[dict], fine_seconds: float) -> str:
    lines = ["| configuration | kind | rel. L2 at horizon | wall s | of fine | detail |",
             "|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if "failed" not in r), key=lambda r: r["seconds"]):
        detail = ""
        if r["kind"] == "parareal":
            detail = (f"{r['iterations']} it., {r['fine_steps']} fine steps, "
                      f"{r['serial_seconds']:.3f} s on one core")
        elif "surrogate" in r and r["kind"] != "coarse":
            detail = f"{r['surrogate']} surrogate / {r['solver'] + r['fallback']} solver steps"
        lines.append(f"| {r['schedule']} | {r['kind']} | {r['final_rel_l2']:.3g} | "
                     f"{r['seconds']:.3f} | {r['seconds'] / fine_seconds:.0%} | {detail} |")
    for r in (r for r in rows if "failed" in r):
        lines.append(f"| {r['schedule']} | {r['kind']} | failed | | | "
                     f"{r['failed'].splitlines()[0][:80]} |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The README section's tables: per problem the rows, the verdict and the indicators."""
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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help="where bench_long_rollout.py left data and checkpoints")
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
    args = parser.parse_args(argv)
    if args.table_only:
        import json

        saved = json.loads(args.out.read_text())
        print(markdown(saved))
        return saved

    from ssmpde.coupling.baseline import SURROGATE_KINDS, against_coarse
    from ssmpde.coupling.run import run_rollout
    from ssmpde.solvers.generate import dask_cluster

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
            if not checkpoint.exists() or not data.exists():
                raise SystemExit(f"{checkpoint} or {data} is missing: run "
                                 "python -m benchmarks.bench_long_rollout first")
            client.restart()  # fresh workers: no state carried over between problems
            # Warm-up, untimed: imports, numba compilation and FFT plans in the driver and in
            # every worker (parareal's first fine slices would otherwise pay for them).
            run_rollout(checkpoint, steps=2, schedules=["parareal:2:1"], data=data,
                        samples=f"0:{samples}", coarse=[], executor=client)
            figure = args.images / f"pareto_{name}.png"
            rows = run_rollout(checkpoint, steps=problem["steps"],
                               schedules=problem["schedules"], data=data,
                               samples=f"0:{samples}", pareto=figure, overwrite=True,
                               executor=client)
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
