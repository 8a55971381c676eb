"""Dataset generation: one process against a two-worker dask LocalCluster, and the cost of a task.

For each equation (Navier–Stokes, Darcy), the same dataset (same seed, samples, batch size,
written to a zarr store) is generated

* ``one_process_one_thread``: in this process (``scheduler=None``), numba and the solver's
  FFTW/thread pools held to one thread: one core's worth of work, the unit the workers use;
* ``one_process_all_threads``: in this process with the solver's defaults (every core);
* ``local_cluster``: on an already started LocalCluster of ``--workers`` single-threaded
  processes (``scheduler=client``), after a warm-up run, so the figure is the steady rate
  (imports and numba's compile-cache loads excluded);
* ``local_cluster_cold``: ``generate(..., workers=N)`` end to end, as the command line runs it
  (cluster start, worker imports, the run, shutdown).

Samples per second are ``samples / wall seconds``; the speed-up of the cluster is over the
one-thread process (the core scaling: at most ``--workers`` on as many idle cores). Each
store is compared with the single-process store, every variable, bit for bit.

Per-task overhead: a one-worker cluster generates ``--overhead-batches`` batches of one tiny
Darcy sample (``Darcy.TINY``); the overhead is ``(wall − Σ compute) / batches``, where
``Σ compute`` is the time the same batches take to compute (solve + dataset) in this process.
It holds the scheduling round trip, moving the task and its solver to the worker, the region
write of the batch into the store and the driver's update of the progress record. The region
write alone is timed too (``region_write_seconds``).

The machine's load (``os.getloadavg()``) before and after is recorded: on a shared machine a
load above the core count marks disturbed timings.

    python -m benchmarks.bench_generate            # ~2 minutes; writes results/generate.json
    python -m benchmarks.bench_generate --quick    # smaller samples
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, header, seconds, write

#: Configurations with samples of about a third of a second on one core (2.x GHz).
WORKLOADS = {
    "navier-stokes": dict(resolution=64, simulation_resolution=128, viscosity=1e-3,
                          final_time=1.0, record_interval=0.25, time_step=1e-3),
    "darcy": dict(resolution=65, simulation_resolution=257),
}
QUICK = {
    "navier-stokes": dict(resolution=32, simulation_resolution=64, viscosity=1e-3,
                          final_time=0.5, record_interval=0.25, time_step=1e-3),
    "darcy": dict(resolution=33, simulation_resolution=129),
}


def _same(a_path: Path, b_path: Path) -> bool:
    """Every variable of two stores equal, bit for bit, with the same dtype."""
    from ssmpde.data import open_dataset

    with open_dataset(a_path) as a, open_dataset(b_path) as b:
        return set(a.variables) == set(b.variables) and all(
            a[name].dtype == b[name].dtype and np.array_equal(a[name].values, b[name].values)
            for name in a.variables)


def _timed_generate(directory: Path, label: str, equation: str, config: dict, *,
                    samples: int, batch_size: int, threads: int | None = None,
                    **options) -> tuple[float, Path]:
    """Wall seconds of one generate() to ``directory/label.zarr`` (removed first)."""
    import numba

    from ssmpde.generation import generate
    from ssmpde.solvers import get_solver

    out = directory / f"{label}.zarr"
    shutil.rmtree(out, ignore_errors=True)
    solver = get_solver(equation, **config)
    if threads is not None:
        solver.threads = threads  # the solvers' own FFTW/thread-pool option
    previous = numba.get_num_threads()
    if threads is not None:
        numba.set_num_threads(threads)
    try:
        elapsed, _ = seconds(lambda: generate(
            solver, num_samples=samples, seed=0, batch_size=batch_size, out=out,
            progress=False, **options).close())
        return elapsed, out
    finally:
        numba.set_num_threads(previous)


def _compute_seconds(equation: str, config: dict, batches: int) -> tuple[float, float]:
    """(seconds to compute ``batches`` one-sample batches here, one thread; seconds of one
    region write of such a batch into a store being written)."""
    import numba

    from ssmpde.data import StoreProgress, create_store, write_store_region
    from ssmpde.solvers import get_solver
    from ssmpde.generation._batches import _batch_dataset, _history, _run_config
    from ssmpde.generation.scale_out import _layout

    solver = get_solver(equation, **config)
    solver.threads = 1
    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        run_config = _run_config(solver, batches, 0)
        history = _history(equation)
        _batch_dataset(solver, 0, 0, 1, run_config, history)  # warm
        compute, pieces = seconds(lambda: [_batch_dataset(solver, 0, i, i + 1, run_config,
                                                          history) for i in range(batches)])
    finally:
        numba.set_num_threads(previous)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "regions.zarr"
        record = StoreProgress(config=run_config, history=history, run_id="0" * 32,
                               num_samples=batches, batch_size=1)
        create_store(_layout(solver, batches, run_config, history), store, record)
        writing, _ = seconds(lambda: [write_store_region(piece, store,
                                                         run_id=record.run_id)
                                      for piece in pieces])
    return compute, writing / batches


def details(result: dict) -> str:
    """The benchmarks page's table: samples per second of each way to run the same dataset,
    whether the stores are identical, and the cost of one task."""
    ways = ("one_process_one_thread", "one_process_all_threads", "local_cluster",
            "local_cluster_cold")
    lines = [f"| equation (samples {result['samples']}, batch {result['batch_size']}) | "
             + " | ".join(way.replace("_", " ") for way in ways)
             + " | cluster over one thread | identical |", "|---|" + "---|" * (len(ways) + 2)]
    for row in result["rows"]:
        rates = row["samples_per_second"]
        lines.append(f"| {row['equation']} | " + " | ".join(f"{rates[w]:.2f}/s" for w in ways)
                     + f" | {row['speedup_vs_one_thread']:.2f}x | "
                     f"{'yes' if row['identical'] else 'no'} |")
    task = result.get("task_overhead")
    if task:
        lines.append(f"\nOne task on a {task['workers']}-worker cluster costs "
                     f"{task['seconds_per_task'] * 1e3:.1f} ms beyond its compute, of which "
                     f"{task['region_write_seconds'] * 1e3:.1f} ms is the region write "
                     f"({task['batches']} tiny {task['equation']} batches). Load average "
                     f"{result['load_before'][0]:.2f} before, {result['load_after'][0]:.2f} "
                     "after.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--equations", nargs="+", default=list(WORKLOADS),
                        choices=sorted(WORKLOADS))
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--overhead-batches", type=int, default=40)
    parser.add_argument("--quick", action="store_true",
                        help="smaller samples (QUICK configurations)")
    parser.add_argument("--tiny", action="store_true",
                        help="the solvers' TINY configurations (a smoke test of the script)")
    parser.add_argument("--skip-cold", action="store_true",
                        help="skip the end-to-end workers=N run (cluster start included)")
    parser.add_argument("--out", type=Path, default=RESULTS / "generate.json")
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    from ssmpde.solvers.base import get_solver_class

    workloads = QUICK if args.quick else WORKLOADS
    if args.tiny:
        workloads = {name: dict(get_solver_class(name).TINY) for name in WORKLOADS}
    result = header("generate")
    result["load_before"] = list(os.getloadavg())
    result.update(samples=args.samples, batch_size=args.batch_size, workers=args.workers,
                  quick=args.quick, tiny=args.tiny, rows=[])
    one_thread = {name: "1" for name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0", env=one_thread) as cluster, \
                Client(cluster, set_as_default=False) as client:
            for equation in args.equations:
                config = workloads[equation]
                common = dict(samples=args.samples, batch_size=args.batch_size)
                # warm-ups: numba caches, FFTW, imports, here and on every worker
                _timed_generate(directory, "warm", equation, config, samples=2 * args.workers,
                                batch_size=1, threads=1)
                _timed_generate(directory, "warm", equation, config, samples=2 * args.workers,
                                batch_size=1, scheduler=client)
                serial, reference = _timed_generate(directory, "one-thread", equation, config,
                                                    threads=1, **common)
                default, default_out = _timed_generate(directory, "all-threads", equation,
                                                       config, **common)
                warm, warm_out = _timed_generate(directory, "cluster", equation, config,
                                                 scheduler=client, **common)
                row = {"equation": equation, "config": config,
                       "seconds": {"one_process_one_thread": serial,
                                   "one_process_all_threads": default,
                                   "local_cluster": warm},
                       "identical": _same(reference, warm_out) and _same(reference,
                                                                          default_out)}
                if not args.skip_cold:
                    cold, cold_out = _timed_generate(directory, "cold", equation, config,
                                                     workers=args.workers, **common)
                    row["seconds"]["local_cluster_cold"] = cold
                    row["identical"] = row["identical"] and _same(reference, cold_out)
                row["samples_per_second"] = {key: args.samples / value
                                             for key, value in row["seconds"].items()}
                rate = row["samples_per_second"]
                row["speedup_vs_one_thread"] = rate["local_cluster"] / rate[
                    "one_process_one_thread"]
                row["speedup_vs_all_threads"] = rate["local_cluster"] / rate[
                    "one_process_all_threads"]
                result["rows"].append(row)
                print(f"{equation}: " + ", ".join(f"{k} {v:.2f} samples/s"
                                                  for k, v in rate.items())
                      + f"; cluster x{row['speedup_vs_one_thread']:.2f} over one thread, "
                        f"identical={row['identical']}", flush=True)
        tiny = dict(get_solver_class("darcy").TINY)
        batches = args.overhead_batches
        compute, region_write = _compute_seconds("darcy", tiny, batches)
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                          dashboard_address=":0", env=one_thread) as cluster, \
                Client(cluster, set_as_default=False) as client:
            _timed_generate(directory, "warm", "darcy", tiny, samples=4, batch_size=1,
                            scheduler=client)
            wall, _ = _timed_generate(directory, "overhead", "darcy", tiny, samples=batches,
                                      batch_size=1, scheduler=client)
    result["task_overhead"] = {
        "equation": "darcy", "config": tiny, "batches": batches, "workers": 1,
        "wall_seconds": wall, "compute_seconds": compute,
        "seconds_per_task": (wall - compute) / batches,
        "region_write_seconds": region_write}
    print(f"per-task overhead: {result['task_overhead']['seconds_per_task'] * 1e3:.1f} ms "
          f"(of which the region write {region_write * 1e3:.1f} ms)", flush=True)
    result["load_after"] = list(os.getloadavg())
    write(result, args.out)
    return result


if __name__ == "__main__":  # the guard matters: LocalCluster's workers re-import __main__
    main()
