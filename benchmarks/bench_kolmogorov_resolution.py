"""Kolmogorov flow on the unit torus: how fine must the reference be, at which Reynolds number?

The judging benchmark of learned corrections (``bench_correction``) compares every run with
a reference solution, which must itself be converged over the evaluation horizon: a run twice
as fine must stay at vorticity (Pearson) correlation ≥ 0.95 with it over the whole horizon.
This study measures it for Kochkov et al.'s (PNAS 2021) Kolmogorov flow, rescaled to the unit
torus (the ``kolmogorov-re1000`` preset: drag 0.1, forcing −4 cos(8πy), time in Kochkov's
units), at Re = 1000 (the preset, ν = 1e-3 / (2π)²) and lower Re (ν = (1/Re) / (2π)²).

Per Reynolds number, from ``--samples`` random initial vorticities (the preset's strong GRF,
seed ``--seed``):

1. spin-up: ``--spin-up`` time units on ``--spin-grid`` (the preset's field decays for about
   20 time units, then the forced flow builds up again: statistically steady after about 45),
   then the state is interpolated spectrally onto the finest grid and run ``--settle`` more
   time units there, so that its small scales are the finest grid's own. That state, restricted
   spectrally (:func:`ssmpde.solvers.spectral.spectral_resample`), starts every grid;
2. every grid runs ``--horizon`` time units with ETDRK4 at its step (:data:`STEPS`: the
   advective Courant number max(|u| + |v|) Δt n about 0.6 in the steady flow, where
   max(|u| + |v|) stays below about 1.1); frames every ``--record`` time units;
3. successive grids (n against 2n, the coarse run interpolated spectrally onto the fine grid)
   give the time until their correlation drops below 0.95 and below 0.8 (per sample, the
   steps before the first frame below the threshold, as
   :func:`ssmpde.core.high_correlation_time`), their relative L2 distance after one time unit,
   and each grid's cost: CPU seconds per time unit and sample on one thread;
4. the time step: on the grids up to ``--check-max``, runs at half and at twice the step
   (``--check-samples`` samples) against the half-step run: the same correlation times and
   distance, and whether twice the step stays finite.

The choice: the largest Re whose reference (256², or 128² where 256² is not converged) stays
at correlation ≥ 0.95 with the run twice as fine for at least ``--useful`` time units (the
minimum over the samples); its horizon is that time, rounded down to a whole time unit and at
most ``--horizon``. Writes ``benchmarks/results/kolmogorov_resolution.json`` and prints the
tables. The 512² runs dominate the cost (about 25 CPU seconds per time unit and sample):
``--fine-samples`` of them per Re. The committed result is the default study (about half an hour of
one core) with Re 1000 run again on two 512² samples (``--merge`` replaces one Re's entry).

    taskset -c 1 env SSMPDE_THREADS=1 python -m benchmarks.bench_kolmogorov_resolution
    python -m benchmarks.bench_kolmogorov_resolution --reynolds 1000 --fine-samples 2 --merge
    python -m benchmarks.bench_kolmogorov_resolution --reynolds 1000 --grids 64 128 256
    python -m benchmarks.bench_kolmogorov_resolution --quick     # seconds: the smoke test
    python -m benchmarks.bench_kolmogorov_resolution --table-only
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from benchmarks.common import RESULTS, fixed_threads, header, when, write

#: ETDRK4 step per grid side: Courant number max(|u| + |v|) Δt n ≈ 0.64 at max(|u| + |v|) = 1
#: (the steady flow's largest, 0.5–1.1 at Re 1000); each divides the record interval 0.1.
STEPS = {16: 4e-2, 32: 2e-2, 64: 1e-2, 128: 5e-3, 256: 2.5e-3, 512: 1.25e-3, 1024: 6.25e-4}
#: The spin-up's step: the preset's initial field has max(|u| + |v|) ≈ 3.2, so 2e-3 on the
#: 128² spin-up grid (Courant number 0.8); the preset's own 2e-3 at 256² diverges on it.
SPIN_STEP = 2e-3
#: The thresholds of the correlation times: the reference criterion and PDE-Refiner's.
THRESHOLDS = (0.95, 0.8)
#: --quick: a tiny study that runs in seconds (the smoke test).
#: Its flow is still the strong initial one: steps a quarter of :data:`STEPS`.
QUICK = dict(reynolds=[1000], grids=[16, 32, 64], samples=1, fine_samples=1, check_samples=1,
             check_max=32, horizon=1.0, spin_up=1.0, spin_grid=32, settle=0.2, useful=0.5,
             step_scale=0.25)


def viscosity(reynolds: float) -> float:
    """ν on the unit torus for Kochkov's Re: ν = 1/Re on [0, 2π)², lengths divided by 2π."""
    return 1.0 / reynolds / (2 * math.pi) ** 2


def kolmogorov(reynolds: float, n: int, time_step: float, record: float):
    """The preset's solver at Re on an n² grid with an ETDRK4 step, one thread, no spin-up."""
    from ssmpde.solvers.navier_stokes import NavierStokes2D

    config = dict(NavierStokes2D.PRESETS["kolmogorov-re1000"])
    config.update(viscosity=viscosity(reynolds), simulation_resolution=n, resolution=n,
                  time_step=time_step, record_interval=record, final_time=record,
                  spin_up=0.0)
    return NavierStokes2D(threads=1, **config)


def correlations(a, b):
    """Pearson correlation over space of each frame pair: ``[batch, time, ...]`` → ``[batch,
    time]``."""
    import numpy as np

    a = a.reshape(*a.shape[:2], -1)
    b = b.reshape(*b.shape[:2], -1)
    a = a - a.mean(axis=2, keepdims=True)
    b = b - b.mean(axis=2, keepdims=True)
    norms = np.linalg.norm(a, axis=2) * np.linalg.norm(b, axis=2)
    return np.where(norms > 0, (a * b).sum(axis=2) / np.maximum(norms, 1e-300), 0.0)


def max_speed(vorticity):
    """max over the grid of |u| + |v| per sample, from vorticity ``[batch, 1, n, n]`` on the
    unit torus (u = ∂yψ, v = −∂xψ, −Δψ = ω, as the solver computes it for its CFL steps): the
    speed of the advective Courant number."""
    import numpy as np

    from ssmpde.solvers.spectral import velocity_spectra, vorticity_wavenumbers

    n = vorticity.shape[-1]
    u_hat, v_hat, _, _ = velocity_spectra(np.fft.rfft2(vorticity[:, 0]), vorticity_wavenumbers(n))
    u, v = np.fft.irfft2(np.stack([u_hat, v_hat]), s=(n, n))
    return (np.abs(u) + np.abs(v)).max(axis=(1, 2))


def sample_times(frames, reference, dt: float, threshold: float) -> list[float]:
    """Each sample's high-correlation time (:func:`ssmpde.core.high_correlation_time`, which
    averages over the samples) of ``frames`` against ``reference`` ``[batch, time, ...]``,
    the initial frame excluded."""
    from ssmpde.core import high_correlation_time

    return [high_correlation_time(frames[i:i + 1, 1:], reference[i:i + 1, 1:], dt,
                                  threshold=threshold) for i in range(frames.shape[0])]


def spin_up(reynolds: float, *, samples: int, seed: int, grid: int, duration: float,
            finest: int, settle: float, settle_step: float | None = None) -> tuple:
    """The spun-up vorticity ``[samples, 1, finest, finest]`` and what the spin-up saw:
    ``duration`` on ``grid`` at :data:`SPIN_STEP`, then ``settle`` on ``finest`` at
    ``settle_step`` (default its :data:`STEPS`)."""
    import numpy as np

    from ssmpde.solvers.spectral import spectral_resample

    def stats(state):
        return {"rms_vorticity": np.sqrt((state ** 2).mean(axis=(1, 2, 3))).round(3).tolist(),
                "max_speed": max_speed(state).round(3).tolist()}

    coarse = kolmogorov(reynolds, grid, SPIN_STEP, duration)
    state = coarse.sample_inputs(seed, list(range(samples)))["initial"]
    started = time.process_time()
    state = coarse.simulate(state, 1)[:, -1]
    info = {"grid": grid, "time": duration, "time_step": SPIN_STEP,
            "end": stats(state)}
    state = spectral_resample(state[:, 0], finest)[:, None]
    if settle:
        step = STEPS[finest] if settle_step is None else settle_step
        fine = kolmogorov(reynolds, finest, step, settle)
        state = fine.simulate(state, 1)[:, -1]
        info["settle"] = {"grid": finest, "time": settle, "time_step": step,
                          "end": stats(state)}
    info["cpu_seconds"] = round(time.process_time() - started, 2)
    return state, info


def run(reynolds: float, n: int, time_step: float, initial, horizon: float, record: float):
    """``(frames [batch, steps + 1, 1, n, n] or None if it diverged, CPU seconds, wall
    seconds)`` of one run from ``initial`` restricted to n²."""
    from ssmpde.solvers.base import SolverDivergedError
    from ssmpde.solvers.spectral import spectral_resample

    solver = kolmogorov(reynolds, n, time_step, record)
    start = spectral_resample(initial[:, 0], n)[:, None]
    solver.simulate(start, 0)  # FFT plans and ETDRK4 coefficients, untimed
    steps = round(horizon / record)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        frames = solver.simulate(start, steps)
    except SolverDivergedError:
        frames = None
    return frames, time.process_time() - cpu, time.perf_counter() - wall


def compare(coarse, fine, record: float) -> dict:
    """Correlation times (0.95, 0.8) per sample, the relative L2 distance after one time unit
    and the mean correlation curve of ``coarse`` against ``fine`` (interpolated onto its grid)."""
    import numpy as np

    from ssmpde.core import relative_l2
    from ssmpde.solvers.spectral import spectral_resample

    batch = min(coarse.shape[0], fine.shape[0])
    coarse, fine = coarse[:batch], fine[:batch]
    if coarse.shape[-1] != fine.shape[-1]:
        coarse = spectral_resample(coarse, fine.shape[-1])
    one = min(round(1.0 / record), coarse.shape[1] - 1)
    out = {"samples": batch}
    for threshold in THRESHOLDS:
        times = sample_times(coarse, fine, record, threshold)
        key = f"time_{round(100 * threshold)}"
        out[key] = [round(t, 4) for t in times]
        out[f"{key}_mean"], out[f"{key}_min"] = float(np.mean(times)), float(np.min(times))
    out["rel_l2_at_1"] = float(relative_l2(coarse[:, one], fine[:, one]).mean())
    out["correlation"] = correlations(coarse, fine).mean(axis=0).round(4).tolist()
    return out


def study(reynolds: float, args) -> dict:
    """Every measurement at one Reynolds number."""
    grids = sorted(args.grids)
    finest, record = grids[-1], args.record
    initial, spun = spin_up(reynolds, samples=args.samples, seed=args.seed,
                            grid=args.spin_grid, duration=args.spin_up, finest=finest,
                            settle=args.settle)
    print(f"Re {reynolds:g}: spun up in {spun['cpu_seconds']} s", flush=True)
    frames, costs = {}, {}
    for n in grids:
        batch = args.fine_samples if n >= 512 else args.samples
        out, cpu, wall = run(reynolds, n, STEPS[n], initial[:batch], args.horizon, record)
        units = args.horizon * batch
        costs[str(n)] = {"time_step": STEPS[n], "samples": batch, "diverged": out is None,
                         "cpu_seconds_per_time_unit": cpu / units,
                         "wall_seconds_per_time_unit": wall / units}
        frames[n] = out
        print(f"  {n}²: {cpu / units:.3f} s per time unit and sample"
              + (" (diverged)" if out is None else ""), flush=True)
    pairs = []
    for coarse, fine in zip(grids, grids[1:]):
        if frames[coarse] is None or frames[fine] is None:
            pairs.append({"coarse": coarse, "fine": fine, "failed": "a run diverged"})
            continue
        pairs.append({"coarse": coarse, "fine": fine,
                      **compare(frames[coarse], frames[fine], record)})
    checks = []
    for n in (n for n in grids if n <= args.check_max):
        batch = min(args.check_samples, args.samples)
        half, _, _ = run(reynolds, n, STEPS[n] / 2, initial[:batch], args.horizon, record)
        double, cpu, _ = run(reynolds, n, 2 * STEPS[n], initial[:batch], args.horizon, record)
        costs[str(n)]["cpu_seconds_per_time_unit_double_step"] = cpu / (args.horizon * batch)
        for step, out in ((STEPS[n], frames[n]), (2 * STEPS[n], double)):
            row = {"grid": n, "time_step": step, "against": STEPS[n] / 2,
                   "stable": out is not None}
            if out is not None and half is not None:
                row.update(compare(out[:batch], half, record))
                row.pop("correlation")
            checks.append(row)
    settings = {k: getattr(args, k) for k in ("samples", "fine_samples", "check_samples",
                                              "horizon", "record", "seed")}
    return {"reynolds": reynolds, "viscosity": viscosity(reynolds), "settings": settings,
            "spin_up": spun, "grids": costs, "pairs": pairs, "time_steps": checks}


def choose(result: dict, *, useful: float, horizon: float) -> dict:
    """The largest Re whose 256² (else 128²) reference stays at correlation ≥ 0.95 with the
    run twice as fine for at least ``useful`` time units (minimum over the samples)."""
    for reynolds in sorted(result["reynolds"], key=float, reverse=True):
        entry = result["reynolds"][reynolds]
        for reference in (256, 128):
            pair = next((p for p in entry["pairs"] if p["coarse"] == reference
                         and "failed" not in p), None)
            if pair is None or pair["time_95_min"] < useful:
                continue
            converged = min(pair["time_95_min"], horizon)
            steps = {n: c["time_step"] for n, c in entry["grids"].items()
                     if int(n) <= reference}
            return {"reynolds": float(reynolds), "viscosity": entry["viscosity"],
                    "reference_grid": reference, "horizon": float(math.floor(converged)),
                    "converged_for": pair["time_95_min"],
                    "spin_up": {"grid": entry["spin_up"]["grid"],
                                "time": entry["spin_up"]["time"],
                                "settle": entry["spin_up"].get("settle", {}).get("time", 0.0)},
                    "time_steps": steps,
                    "reason": f"{reference}² stays at correlation >= 0.95 with "
                              f"{2 * reference}² for {pair['time_95_min']:g} time units "
                              f"(minimum over {pair['samples']} samples; at least {useful:g} "
                              "wanted), the largest Re measured that does"}
    return {"reynolds": None, "reason": f"no Re measured has a 256² or 128² reference "
                                        f"converged for {useful:g} time units"}


def tables(result: dict) -> str:
    """Markdown: per Re the grids (cost, convergence against 2n) and the time-step checks."""
    lines = [f"Kolmogorov flow resolution study ({when(result)}; horizon "
             f"{result['settings']['horizon']:g}, one thread; the times per sample)\n",
             "| Re | grid | Δt | CPU s per time unit | t(corr ≥ 0.95) vs 2n | "
             "t(corr ≥ 0.8) vs 2n | rel. L2 vs 2n at t = 1 | samples |",
             "|---|---|---|---|---|---|---|---|"]
    for reynolds, entry in result["reynolds"].items():
        for n, cost in entry["grids"].items():
            pair = next((p for p in entry["pairs"] if p["coarse"] == int(n)), None)
            if pair is None or "failed" in pair:
                cells = ["—", "—", "—", str(cost["samples"])]
            else:
                cells = [" / ".join(f"{t:g}" for t in pair["time_95"]),
                         " / ".join(f"{t:g}" for t in pair["time_80"]),
                         f"{pair['rel_l2_at_1']:.2e}", str(pair["samples"])]
            lines.append(f"| {reynolds} | {n}² | {cost['time_step']:g} | "
                         f"{cost['cpu_seconds_per_time_unit']:.3g} | " + " | ".join(cells)
                         + " |")
    lines += ["", "| Re | grid | Δt | stable | t(corr ≥ 0.95) vs Δt/2 | t(corr ≥ 0.8) vs Δt/2 "
              "| rel. L2 vs Δt/2 at t = 1 |", "|---|---|---|---|---|---|---|"]
    for reynolds, entry in result["reynolds"].items():
        for row in entry["time_steps"]:
            cells = (["—"] * 3 if "time_95" not in row else
                     [" / ".join(f"{t:g}" for t in row["time_95"]),
                      " / ".join(f"{t:g}" for t in row["time_80"]),
                      f"{row['rel_l2_at_1']:.2e}"])
            lines.append(f"| {reynolds} | {row['grid']}² | {row['time_step']:g} | "
                         f"{'yes' if row['stable'] else 'no'} | " + " | ".join(cells) + " |")
    choice = result.get("choice", {})
    lines.append("")
    if choice.get("reynolds"):
        lines.append(f"Choice: Re {choice['reynolds']:g}, reference {choice['reference_grid']}²,"
                     f" horizon {choice['horizon']:g}, spin-up {choice['spin_up']['time']:g} "
                     f"on {choice['spin_up']['grid']}² + {choice['spin_up']['settle']:g} on the "
                     f"finest grid; steps {choice['time_steps']}: {choice['reason']}.")
    else:
        lines.append(f"Choice: none ({choice.get('reason', '')}).")
    return "\n".join(lines)


#: The benchmarks page shows these tables (``python -m benchmarks``' sections).
details = tables


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reynolds", type=float, nargs="+", default=[1000, 500, 250])
    parser.add_argument("--grids", type=int, nargs="+", default=[64, 128, 256, 512],
                        choices=sorted(STEPS))
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--fine-samples", type=int, default=1,
                        help="samples of the 512² (and finer) runs")
    parser.add_argument("--check-samples", type=int, default=1,
                        help="samples of the time-step checks")
    parser.add_argument("--check-max", type=int, default=256,
                        help="largest grid whose time step is checked")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--horizon", type=float, default=10.0)
    parser.add_argument("--record", type=float, default=0.1)
    parser.add_argument("--spin-up", type=float, default=50.0)
    parser.add_argument("--spin-grid", type=int, default=128)
    parser.add_argument("--settle", type=float, default=1.0,
                        help="time run on the finest grid after the spin-up")
    parser.add_argument("--useful", type=float, default=5.0,
                        help="the shortest converged horizon a reference may have")
    parser.add_argument("--step-scale", type=float, default=1.0,
                        help="every grid's step times this (a power of 2: it must divide the "
                             "record interval)")
    parser.add_argument("--quick", action="store_true", help="a tiny study (seconds)")
    parser.add_argument("--out", type=Path, default=RESULTS / "kolmogorov_resolution.json")
    parser.add_argument("--table-only", action="store_true",
                        help="print the tables of --out and stop")
    parser.add_argument("--merge", action="store_true",
                        help="keep the other Reynolds numbers of --out (a rerun of one Re, "
                             "with more samples say, replaces only its own entry)")
    args = parser.parse_args(argv)
    if args.table_only:
        import json

        saved = json.loads(args.out.read_text())
        print(tables(saved))
        return saved
    if args.quick:  # the tiny settings, but for those given on the command line
        for key, value in QUICK.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
    if args.spin_grid not in STEPS:
        parser.error(f"--spin-grid must be one of {sorted(STEPS)}")
    STEPS.update({n: step * args.step_scale for n, step in STEPS.items()})
    result = header("kolmogorov_resolution")
    result["settings"] = {k: v for k, v in vars(args).items()
                          if k not in ("out", "table_only")}
    result["settings"]["steps"] = {str(n): STEPS[n] for n in sorted(args.grids)}
    result["settings"]["comparison"] = (
        "n against 2n: the n run interpolated spectrally onto the 2n grid; Pearson "
        "correlation over space per frame; a correlation time is the number of frames "
        "(the initial one excluded) before the first below the threshold, times the record "
        "interval")
    result["reynolds"] = {}
    if args.merge and args.out.exists():
        import json

        result["reynolds"] = json.loads(args.out.read_text())["reynolds"]
    with fixed_threads(1):
        for reynolds in args.reynolds:
            result["reynolds"][f"{reynolds:g}"] = study(reynolds, args)
            write(result, args.out)  # a long study keeps what it has measured
    result["reynolds"] = dict(sorted(result["reynolds"].items(), key=lambda e: -float(e[0])))
    result["choice"] = choose(result, useful=args.useful, horizon=args.horizon)
    write(result, args.out)
    print(tables(result))
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
