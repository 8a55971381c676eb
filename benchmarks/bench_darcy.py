"""Darcy at K = 421: ssmpde's solve against loop assembly + spsolve, side by side in one run.

Per sample (assembly + solve) for
  * the straightforward baseline: scipy.sparse matrix filled node by node with Python loops,
    then ``scipy.sparse.linalg.spsolve``;
  * ssmpde direct (vectorised assembly, SuperLU with minimum-degree ordering on AᵀA + A);
  * ssmpde pcg (CG preconditioned by the fast-sine-transform Laplacian, rtol 1e-12);
then the wall time of the full 1200-sample 85² benchmark through ``generate`` (measured on
``--samples`` samples and scaled, or all 1200 with ``--full``).

    python -m benchmarks.bench_darcy          # writes benchmarks/results/darcy.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import scipy.sparse.linalg as sparse_linalg

from benchmarks.common import RESULTS, header, interleaved, seconds, table_row, when, write
from ssmpde.generation import generate
from ssmpde.solvers import Darcy
from ssmpde.solvers.darcy import reference_matrix


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--samples", type=int, default=16,
                        help="samples generated to estimate the 1200-sample wall time")
    parser.add_argument("--full", action="store_true", help="generate all 1200 samples")
    parser.add_argument("--resolution", type=int, default=421,
                        help="K of the per-sample timing (the generation is 421 -> 85 unless "
                             "this is changed, then K -> K)")
    parser.add_argument("--out", type=Path, default=RESULTS / "darcy.json")
    args = parser.parse_args(argv)

    k = args.resolution
    darcy = Darcy(resolution=k, simulation_resolution=k, threads=1)
    a = darcy.coefficient(seed=0, indices=[0])
    rhs = np.ones((k - 2) ** 2)

    def baseline():
        return sparse_linalg.spsolve(reference_matrix(a[0]).tocsc(), rhs)

    def direct():
        return darcy.solve(a)[0, 1:-1, 1:-1].ravel()

    def pcg():
        return darcy.solve_iterative(a, rtol=1e-12)[0][0, 1:-1, 1:-1].ravel()

    timings = interleaved({"baseline": baseline, "direct": direct, "pcg": pcg},
                          repeats=args.repeats)
    times, results, median = timings.times, timings.results, timings.medians()
    scale = np.max(np.abs(results["baseline"]))
    agreement = {name: float(np.max(np.abs(results[name] - results["baseline"])) / scale)
                 for name in ("direct", "pcg")}

    samples = 1200 if args.full else args.samples
    generation = {}
    grids = {} if k == 421 else {"resolution": k, "simulation_resolution": k}
    for solver in ("direct", "pcg"):
        elapsed, _ = seconds(lambda solver=solver: generate(
            "darcy", num_samples=samples, seed=0, batch_size=8, progress=False,
            linear_solver=solver, **grids))
        generation[solver] = {"samples": samples, "seconds": elapsed,
                              "seconds_for_1200": elapsed * 1200 / samples}

    result = {
        **header("darcy_421"),
        "seconds_per_sample": median,
        "all_times": times,
        "speedup_vs_baseline": {name: median["baseline"] / median[name]
                                for name in ("direct", "pcg")},
        "max_difference_vs_baseline_relative": agreement,
        "generate_85_from_421": generation,
    }
    write(result, args.out)

    print(f"Darcy, K = {k} (one sample, assembly + solve; medians of {args.repeats} rounds)")
    print("| implementation | s / sample | speed-up | max diff vs baseline |")
    print("|---|---|---|---|")
    print(f"| loop assembly + spsolve | {median['baseline']:.2f} | 1.0x | - |")
    for name, label in (("direct", "ssmpde direct (vectorised + SuperLU)"),
                        ("pcg", "ssmpde pcg (FST-preconditioned CG)")):
        print(f"| {label} | {median[name]:.2f} | {median['baseline'] / median[name]:.1f}x | "
              f"{agreement[name]:.1e} |")
    for solver, g in generation.items():
        measured = "measured" if args.full else f"scaled from {g['samples']} samples"
        print(f"1200-sample 85² benchmark, {solver}: {g['seconds_for_1200'] / 60:.1f} min "
              f"({measured}, both cores)")
    return result


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table."""
    s = result["seconds_per_sample"]
    return [table_row(f"Darcy sample at K = 421, {solver}", f"{s[solver]:.2f} s",
                      f"{s['baseline']:.2f} s (loop assembly + spsolve)",
                      f"**{result['speedup_vs_baseline'][solver]:.1f}x**", when(result))
            for solver in ("direct", "pcg")]


if __name__ == "__main__":
    main()
