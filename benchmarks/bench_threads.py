"""Threads in a hybrid rollout: the thread policy against the old default, quiet and loaded.

A hybrid rollout (:func:`ssmpde.coupling.run.run_rollout`, what ``ssmpde rollout`` runs) of
a small FNO with the Kuramoto–Sivashinsky solver that generated its data (``lpsda``, ν = 0.1,
128 stored points simulated at 512, 16 trajectories, 20 steps, schedule
``surrogate:1,solver:1``, no coarse baselines), under three thread settings, side by side in
alternating rounds of one process:

* ``every core``: torch, numba and FFTW on every core (``threads=cores``), what ssmpde did
  before the policy (torch's own default);
* ``policy``: no count given, the policy's default for rollouts (one torch thread, every core
  for the solver: :data:`ssmpde.threads.DEFAULTS`);
* ``threads 1``: ``--threads 1``, every pool on one thread.

Two phases: as the machine is (``quiet``: other users' jobs are not stopped, the load
average says how quiet), then under a competing load (``loaded``: ``--load`` busy Python
processes started here and killed after). The load average (1, 5, 15 min) is recorded before
and after each phase. It also measures the CPU that OpenMP's idle threads burn while
spinning (:func:`ssmpde.threads.spin_seconds`) in fresh processes that import ssmpde before
torch (``OMP_WAIT_POLICY=PASSIVE`` set in time) and after it (too late).

    python -m benchmarks.bench_threads            # writes benchmarks/results/threads.json
    python -m benchmarks.bench_threads --quick    # tiny data, one round (smoke test)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import RESULTS, header, interleaved, sampled, table_row, when, write

#: The data, the surrogate and the rollout; ``--quick`` uses QUICK.
FULL = {"data": dict(preset="lpsda", viscosity=0.1, final_time=1.0), "samples": 16,
        "model": dict(width=16, depth=2, modes=(16,)), "steps": 20}
QUICK = {"data": dict(resolution=32, simulation_resolution=64, domain_length=22.0,
                      viscosity=1.0, final_time=1.0, record_interval=0.25, time_step=0.05),
         "samples": 4, "model": dict(width=8, depth=1, modes=(4,)), "steps": 4}
SCHEDULE = "surrogate:1,solver:1"
#: The settings compared: name → ``threads=`` of run_rollout (``"cores"``: every core).
SETTINGS = {"every core": "cores", "policy": None, "threads 1": 1}

SPIN = """
import sys
if sys.argv[1] == "ssmpde first":
    import ssmpde, torch
else:
    import torch, ssmpde
from ssmpde.threads import spin_seconds
print(spin_seconds(threads=int(sys.argv[2])))
"""


def prepare(folder: Path, setup: dict) -> Path:
    """KS data and a small FNO trained one epoch on it, in ``folder`` (reused when there);
    returns the run directory."""
    from ssmpde.generation import generate
    from ssmpde.surrogates.train import TrainConfig, train

    data, run = folder / "ks.nc", folder / "fno"
    if not data.exists():
        generate("kuramoto-sivashinsky", num_samples=setup["samples"], seed=0, out=data,
                 progress=False, **setup["data"])
    if not (run / "config.json").exists():
        train("fno", data, out=run, preset="burgers", model_overrides=setup["model"],
              config=TrainConfig(epochs=1, batch_size=8, window=1), progress=False)
    return run


@contextlib.contextmanager
def competing_load(processes: int):
    """``processes`` busy Python loops in the background while the block runs."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(processes)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


def spin(order: str, threads: int) -> float:
    """:func:`ssmpde.threads.spin_seconds` in a fresh process importing in ``order``."""
    # Without the variable in the child's environment: this process's `import ssmpde` put it
    # there, and libgomp would then read it at load whatever the order.
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", SPIN, order, str(threads)], check=True,
                          capture_output=True, text=True, timeout=300, env=env)
    return float(done.stdout.split()[-1])


def running() -> int | None:
    """Processes runnable right now (``procs_running`` of ``/proc/stat``; None off Linux)."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@contextlib.contextmanager
def runnable_sampler(result: dict):
    """Sample :func:`running` every 0.1 s during the block: ``result["runnable"]`` is the
    mean (this process included), a measure of the load during a phase too short for the
    one-minute load average."""
    samples: list = []
    try:
        with sampled(running, 0.1) as samples:
            yield
    finally:
        result["runnable"] = round(sum(samples) / len(samples), 2) if samples else None


def phase(run: Path, setup: dict, repeats: int) -> dict:
    """Time the rollout under every setting in alternating rounds; medians of the call and
    of the parts of its rows (hybrid schedule, surrogate alone, solver alone)."""
    import numpy as np

    from ssmpde.coupling.run import run_rollout
    from ssmpde.threads import cores

    rows: dict[str, list[dict]] = {name: [] for name in SETTINGS}

    def call(name, threads):
        def rollout():
            result = run_rollout(run, steps=setup["steps"], schedules=[SCHEDULE],
                                 samples=f"0:{setup['samples']}", coarse=[],
                                 threads=cores() if threads == "cores" else threads)
            rows[name].append({r["schedule"]: r for r in result})
        return rollout

    before, sampled = os.getloadavg(), {}
    with runnable_sampler(sampled):
        timings = interleaved({name: call(name, threads)
                               for name, threads in SETTINGS.items()},
                              repeats=repeats, warmup=1)
    after = os.getloadavg()
    out = {"load_average_1_5_15min": {"before": [round(v, 2) for v in before],
                                      "after": [round(v, 2) for v in after]},
           "runnable_processes_mean": sampled["runnable"], "seconds": {}}
    for name in SETTINGS:
        timed = rows[name][1:]  # the first entry is the warm-up's
        hybrid = [r[SCHEDULE] for r in timed]
        out["seconds"][name] = {
            "call": float(np.median(timings.times[name])),
            "hybrid": float(np.median([r["seconds"] for r in hybrid])),
            "hybrid_surrogate": float(np.median([r["surrogate_seconds"] for r in hybrid])),
            "hybrid_solver": float(np.median([r["solver_seconds"] for r in hybrid])),
            "surrogate_alone": float(np.median([r["surrogate"]["seconds"] for r in timed])),
            "solver_alone": float(np.median([r["solver, one run"]["seconds"] for r in timed])),
            "rounds": [round(t, 4) for t in timings.times[name]]}
    base = timings.times["every core"]
    out["speedup_vs_every_core"] = {
        name: float(np.median(np.array(base) / np.array(timings.times[name])))
        for name in SETTINGS if name != "every core"}
    return out


def main(argv=None) -> dict:
    import numba
    import torch

    from ssmpde.threads import DEFAULTS, cores

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="rounds per phase")
    parser.add_argument("--load", type=int, default=1,
                        help="busy processes of the loaded phase (default 1)")
    parser.add_argument("--cache", type=Path,
                        help="keep the data and the surrogate here (default: a temporary "
                             "folder)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny data, one round per phase (smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS / "threads.json")
    args = parser.parse_args(argv)
    setup = QUICK if args.quick else FULL
    repeats = 1 if args.quick else args.repeats

    with contextlib.ExitStack() as stack:
        folder = args.cache or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder.mkdir(parents=True, exist_ok=True)
        run = prepare(folder, setup)
        quiet = phase(run, setup, repeats)
        with competing_load(args.load):
            loaded = phase(run, setup, repeats)
    spinning = {order: spin(order, min(2, cores())) for order in ("ssmpde first",
                                                                  "torch first")}

    result = header("threads")
    result.update({
        "setup": {"equation": "kuramoto-sivashinsky", **{k: (list(v) if isinstance(v, tuple)
                                                             else v)
                                                         for k, v in setup["data"].items()},
                  "trajectories": setup["samples"], "steps": setup["steps"],
                  "schedule": SCHEDULE, "model": "fno",
                  "model_overrides": {k: list(v) if isinstance(v, tuple) else v
                                      for k, v in setup["model"].items()}},
        "cores": cores(), "settings": {k: ("every core" if v == "cores" else v)
                                       for k, v in SETTINGS.items()},
        "policy_defaults": DEFAULTS, "competing_processes": args.load, "repeats": repeats,
        "torch": torch.__version__, "numba": numba.__version__,
        "numba_threading_layer": numba.threading_layer(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "phases": {"quiet": quiet, "loaded": loaded},
        "spin_cpu_seconds_per_idle_second": spinning,
        "notes": ("Wall seconds, medians over alternating rounds of the three settings in one "
                  "process. 'call' is the whole run_rollout call (checkpoint and data "
                  "loading, the reference solver run, the schedules); 'hybrid' the "
                  f"{SCHEDULE} row and its surrogate and solver parts. speedup_vs_every_core: "
                  "median over rounds of the every-core call time over the setting's. The "
                  "quiet phase shares the machine with whatever else runs (see the load "
                  "averages, and runnable_processes_mean: the runnable processes sampled "
                  "every 0.1 s during the phase, this one included). Spin: CPU seconds burnt "
                  "per second of sleep right after torch parallel regions on 2 threads, in "
                  "fresh processes without OMP_WAIT_POLICY in their environment."),
    })
    for name, data in result["phases"].items():
        print(f"{name}: load {data['load_average_1_5_15min']['before'][0]:.1f} -> "
              f"{data['load_average_1_5_15min']['after'][0]:.1f}, runnable processes "
              f"{data['runnable_processes_mean']} on average")
        for setting, seconds in data["seconds"].items():
            print(f"  {setting:10s} call {seconds['call']:.3f} s, hybrid {seconds['hybrid']:.3f} s "
                  f"(surrogate {seconds['hybrid_surrogate']:.3f}, solver "
                  f"{seconds['hybrid_solver']:.3f}), surrogate alone "
                  f"{seconds['surrogate_alone']:.3f} s")
        print(f"  speed-up over every core: {json.dumps(data['speedup_vs_every_core'])}")
    print(f"spin (CPU s per idle s): {json.dumps(spinning)}")
    write(result, args.out)
    return result


def details(result: dict) -> str:
    """The benchmarks page's table: per phase and setting, the medians (wall seconds) of the
    whole call, the hybrid row and its parts, and the speed-up over every pool on every
    core; then the CPU that idle OpenMP threads burn."""
    lines = ["| phase (runnable processes) | setting | call s | hybrid s | surrogate part s | "
             "solver part s | speed-up of the call |", "|---|---|---|---|---|---|---|"]
    for phase, data in result["phases"].items():
        for setting, s in data["seconds"].items():
            speedup = data["speedup_vs_every_core"].get(setting)
            lines.append(f"| {phase} ({data['runnable_processes_mean']}) | {setting} | "
                         f"{s['call']:.3f} | {s['hybrid']:.3f} | {s['hybrid_surrogate']:.3f} | "
                         f"{s['hybrid_solver']:.3f} | "
                         f"{'–' if speedup is None else f'{speedup:.2f}x'} |")
    spin = result["spin_cpu_seconds_per_idle_second"]
    lines.append("\nCPU seconds that idle OpenMP threads burn per idle second: " + ", ".join(
        f"{order} {seconds:.3f}" for order, seconds in spin.items()) + ".")
    return "\n".join(lines)


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table: the rollout under load, each setting."""
    setup, loaded = result["setup"], result["phases"]["loaded"]
    seconds = loaded["seconds"]
    load = loaded["runnable_processes_mean"]
    label = (f"Hybrid rollout KS {setup['trajectories']} × {setup['steps']} steps, small FNO, "
             f"{result['cores']} cores under load ({load} runnable processes): policy (1 "
             "torch thread)")
    return [table_row(label, f"{seconds['policy']['call']:.2f} s",
                      f"{seconds['every core']['call']:.2f} s (every pool on every core, the "
                      "old default)",
                      f"**{loaded['speedup_vs_every_core']['policy']:.1f}x**", when(result))]


if __name__ == "__main__":
    main()
