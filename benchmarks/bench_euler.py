"""Compressible Euler 2D: ssmpde (MUSCL-Hancock + HLLC, numba) against pyro-hydro, in one run.

Compared, side by side on the same grids, initial states and final times:

* ssmpde: :func:`ssmpde.solvers.euler.integrate` (unsplit MUSCL-Hancock, MC limiter on the
  primitive variables, HLLC fluxes; a passive tracer rides along as a fifth field);
* pyro-hydro's ``compressible`` solver (Colella's unsplit CTU Godunov scheme with
  characteristic tracing), driven through its ``Pyro`` class with the settings made as close
  as they go: HLLC Riemann solver (``compressible.riemann``), the 2nd-order MC limiter on the
  primitive variables (``compressible.limiter = 1``), CFL number 0.4 (``driver.cfl``; both
  take Δt = C min(Δx / (|u| + a), Δy / (|v| + a)) over the cells), no flattening and no
  artificial viscosity (ours has neither), the first step at the full CFL step
  (``driver.init_tstep_factor = 1``), no output files, no plots.

Problems:

1. Sod's shock tube along x on [0, 1] × [0, ny/nx] (square cells, ny = nx / ``--sod-aspect``),
   outflow boundaries, t = 0.2. Error: the L1 norm of the density error, the mean of
   |ρ − ρ_exact| over the cells, ρ_exact the exact Riemann solution at the cell centres
   (``tests/solvers/exact_riemann.py``), the same for both.
2. Kelvin–Helmholtz (McNally et al. 2012 with pyro's ``inputs.kh`` values: ρ 1 | 2, u −0.5 |
   0.5, smoothing 0.025, v = 0.01 sin 4πx, p = 2.5) on [0, 1]², periodic, t = 0.5. There is
   no exact solution: the L1 difference of the two densities is recorded.

Both start from the same primitive state, built here (pyro's own initial state is checked
against it). Per problem and grid: wall time of the time loop (set-up excluded), steps, cell
updates per second = nx·ny·steps / seconds, and the ratio ours / pyro of that rate (the
target: at least 3x at equal or lower error). Where ours has the larger Sod error on the same
grid, ours is also run on the coarsest finer grid at which its error is no larger than
pyro's, and the wall-time ratio at equal-or-lower error is reported.

Numba compiles before any timing, on both sides (a small run of each problem first). Both
sides run with the same numba thread count (``--threads``, default ``NUMBA_NUM_THREADS``, all
cores); pyro's numba kernels are serial and the rest of it is NumPy array code, so it uses
one core whatever the count: ours is also timed on one thread (``ssmpde_one_thread``).
Each timing records how many cores other processes kept busy meanwhile (``other_load_cores``,
from ``/proc/stat``). Runs are repeated, the same rule for both sides, until they took
``--min-seconds`` in all and the fastest was undisturbed (``--quiet-load``), at most
``--repeats`` times; the fastest undisturbed run is kept (``disturbed`` says if none was).

Finally the wall time of one sample of the ``ce-rm`` preset (Richtmyer–Meshkov, 256² → 128²,
through the solver's generation API ``sample_inputs`` + ``solve_batch``): the full sample by
default; with ``--quick``, a tenth of its final time, scaled up (stated in the JSON).

    pip install -e .[compare]                 # pyro-hydro; without it ssmpde's side runs alone
    python -m benchmarks.bench_euler          # ~6 minutes; writes benchmarks/results/euler.json
    python -m benchmarks.bench_euler --quick  # smaller grids, a tenth of the CE-RM sample
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import numba
import numpy as np

from benchmarks.common import (RESULTS, fixed_threads, header, seconds, table_row, when,
                               write)

GAMMA = 1.4
CFL = 0.4
#: Sod's left and right states (ρ, u, p), the jump at x = ½.
SOD_LEFT, SOD_RIGHT = (1.0, 0.0, 1.0), (0.125, 0.0, 0.1)
#: Kelvin–Helmholtz: (ρ, u) outside and inside the band 1/4 < y < 3/4, the smoothing width
#: of the shear layers, the amplitude of the v kick, and the pressure.
KH_OUTER, KH_INNER = (1.0, -0.5), (2.0, 0.5)
KH_WIDTH, KH_AMPLITUDE, KH_PRESSURE = 0.025, 0.01, 2.5


def has_pyro() -> bool:
    """Whether pyro-hydro is importable (another package may also be called ``pyro``)."""
    try:
        return importlib.util.find_spec("pyro.pyro_sim") is not None
    except ModuleNotFoundError:
        return False


# -- the problems -----------------------------------------------------------------------------
def centres(n: int, length: float) -> np.ndarray:
    return (np.arange(n) + 0.5) * (length / n)


def sod_state(nx: int, ny: int) -> tuple[np.ndarray, tuple[float, float]]:
    """Sod's tube along x on ``ny × nx`` square cells: primitive ``[1, 5, ny, nx]``, (Lx, Ly)."""
    lengths = (1.0, ny / nx)
    left = centres(nx, lengths[0]) <= 0.5
    prim = np.zeros((1, 5, ny, nx))
    for field, a, b in zip((0, 1, 3), SOD_LEFT, SOD_RIGHT, strict=True):
        prim[0, field] = np.where(left, a, b)[None, :]
    prim[0, 4] = left[None, :]  # tracer: the left gas
    return prim, lengths


def kh_state(n: int) -> tuple[np.ndarray, tuple[float, float]]:
    """Two smoothed shear layers at y = 1/4 and 3/4, v = A sin 4πx: ``[1, 5, n, n]``, (1, 1)."""
    x, y = centres(n, 1.0), centres(n, 1.0)
    # distance into the inner band from its nearer edge (negative outside the band); each
    # field relaxes from its band value towards the mean of both at the edge, e^(−|d|/width)
    d = np.where(y < 0.5, y - 0.25, 0.75 - y)
    inside = d >= 0
    blend = np.where(inside, -np.exp(-d / KH_WIDTH), np.exp(d / KH_WIDTH))
    prim = np.zeros((1, 5, n, n))
    for field in (0, 1):
        outer, inner = KH_OUTER[field], KH_INNER[field]
        prim[0, field] = (np.where(inside, inner, outer) - 0.5 * (outer - inner) * blend)[:, None]
    prim[0, 2] = KH_AMPLITUDE * np.sin(4 * np.pi * x)[None, :]
    prim[0, 3] = KH_PRESSURE
    prim[0, 4] = (prim[0, 0] - KH_OUTER[0]) / (KH_INNER[0] - KH_OUTER[0])  # tracer: inner gas
    return prim, (1.0, 1.0)


#: Our boundary kind and pyro's (every side) per problem.
BOUNDARY = {"sod": ("outflow", "outflow"), "kh": ("periodic", "periodic")}


def state_of(problem: str, nx: int, ny: int) -> tuple[np.ndarray, tuple[float, float]]:
    return sod_state(nx, ny) if problem == "sod" else kh_state(nx)


def grid_of(problem: str, n: int, aspect: int) -> tuple[int, int]:
    """(nx, ny): Sod's strip is ``n × n/aspect`` (at least 2 rows), Kelvin–Helmholtz ``n × n``."""
    return (n, max(n // aspect, 2)) if problem == "sod" else (n, n)


def sod_exact_density(nx: int, final_time: float) -> np.ndarray:
    """The exact density of Sod's problem at the cell centres along x at ``final_time``."""
    from tests.solvers.exact_riemann import riemann_solution

    return riemann_solution(centres(nx, 1.0), final_time, SOD_LEFT, SOD_RIGHT, GAMMA,
                            x0=0.5)[0]


def l1(a: np.ndarray, b: np.ndarray) -> float:
    """Mean |a − b| over the cells (the L1 norm per unit area on a unit-length domain)."""
    return float(np.mean(np.abs(a - b)))


# -- the two solvers ---------------------------------------------------------------------------
def busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (Linux), else None."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed(function) -> dict:
    """Wall and CPU seconds of one call, and how many cores other processes kept busy
    meanwhile (``other_load_cores``: machine CPU time less ours, over the wall time)."""
    busy, cpu = busy_cpu_seconds(), time.process_time()
    elapsed, result = seconds(function)
    cpu = time.process_time() - cpu
    other = None if busy is None else max(busy_cpu_seconds() - busy - cpu, 0.0) / elapsed
    return {"seconds": elapsed, "cpu_seconds": cpu, "other_load_cores": other,
            "result": result}


def run_ours(problem: str, nx: int, ny: int, final_time: float) -> dict:
    from ssmpde.solvers.euler import integrate

    prim, lengths = state_of(problem, nx, ny)
    run = timed(lambda: integrate(prim, final_time, lengths=lengths, gamma=GAMMA,
                                  boundary=BOUNDARY[problem][0], limiter="mc", cfl=CFL))
    out, steps = run.pop("result")
    return {**run, "steps": int(steps), "primitive": out[0, :4]}


def pyro_settings(problem: str, nx: int, ny: int, final_time: float) -> dict:
    """pyro's runtime parameters of one run (all that the benchmark sets)."""
    lengths = (1.0, ny / nx) if problem == "sod" else (1.0, 1.0)
    boundary = BOUNDARY[problem][1]
    settings = {
        "mesh.nx": nx, "mesh.ny": ny, "mesh.xmin": 0.0, "mesh.xmax": lengths[0],
        "mesh.ymin": 0.0, "mesh.ymax": lengths[1],
        "mesh.xlboundary": boundary, "mesh.xrboundary": boundary,
        "mesh.ylboundary": boundary, "mesh.yrboundary": boundary,
        "driver.tmax": float(final_time), "driver.cfl": CFL, "driver.max_steps": 10 ** 9,
        "driver.init_tstep_factor": 1.0, "driver.verbose": 0,
        "compressible.riemann": "HLLC", "compressible.limiter": 1,
        "compressible.use_flattening": 0, "compressible.cvisc": 0.0, "eos.gamma": GAMMA,
        "io.do_io": 0, "io.force_final_output": 0, "vis.dovis": 0,
    }
    if problem == "sod":
        settings.update({"sod.direction": "x", "sod.dens_left": SOD_LEFT[0],
                         "sod.u_left": SOD_LEFT[1], "sod.p_left": SOD_LEFT[2],
                         "sod.dens_right": SOD_RIGHT[0], "sod.u_right": SOD_RIGHT[1],
                         "sod.p_right": SOD_RIGHT[2]})
    else:
        settings.update({"kh.rho_1": KH_OUTER[0], "kh.u_1": KH_OUTER[1],
                         "kh.rho_2": KH_INNER[0], "kh.u_2": KH_INNER[1],
                         "kh.bulk_velocity": 0.0})
    return settings


def pyro_primitive(simulation) -> np.ndarray:
    """pyro's (ρ, u, v, p) without ghost cells as ``[4, ny, nx]`` (pyro stores ``[x, y]``)."""
    return np.stack([np.asarray(f.v()).T for f in simulation.cc_data.get_var("primitive")])


def run_pyro(problem: str, nx: int, ny: int, final_time: float) -> dict:
    from pyro.pyro_sim import Pyro

    driver = Pyro("compressible")
    # pyro writes its parameters to ./inputs.auto: keep that out of the working directory
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        driver.initialize_problem(problem, inputs_dict=pyro_settings(problem, nx, ny,
                                                                     final_time))
    simulation = driver.get_sim()
    initial = pyro_primitive(simulation)

    def evolve():  # Pyro.run_sim without its final report
        while not simulation.finished():
            driver.single_step()

    run = timed(evolve)
    del run["result"]
    return {**run, "steps": int(simulation.n), "initial": initial,
            "primitive": pyro_primitive(simulation), "time": float(simulation.cc_data.t)}


# -- the comparison ----------------------------------------------------------------------------
class Repeats(NamedTuple):
    """How often a timing is repeated: at most ``most`` runs, until they took ``until`` seconds
    in all and the best was undisturbed (other processes kept at most ``quiet`` cores busy)."""

    most: int = 5
    until: float = 5.0
    quiet: float = 0.2


def fastest(repeats: Repeats, run) -> dict:
    """The fastest undisturbed run (the fastest of all if none was): the same rule for both
    sides, so short runs are repeated, long ones only when other work disturbed them."""
    best, total, runs = None, 0.0, 0

    def rank(result):
        load = result["other_load_cores"]
        return (load is not None and load > repeats.quiet, result["seconds"])

    while runs < repeats.most:
        result = run()
        runs += 1
        total += result["seconds"]
        if best is None or rank(result) < rank(best):
            best = result
        if total >= repeats.until and not rank(best)[0]:
            break
    return {**best, "runs": runs, "disturbed": rank(best)[0]}


def timing(run: dict, cells: int) -> dict:
    return {"seconds": run["seconds"], "cpu_seconds": run["cpu_seconds"],
            "other_load_cores": run["other_load_cores"], "disturbed": run["disturbed"],
            "steps": run["steps"], "runs": run["runs"],
            "cell_updates_per_second": cells * run["steps"] / run["seconds"]}


def sod_matched(nx: int, aspect: int, final_time: float, target: float,
                repeats: Repeats) -> dict:
    """ssmpde on the coarsest Sod grid finer than ``nx`` (steps of about nx/32, up to 2 nx)
    whose density L1 error is at most ``target``."""
    step = max(nx // 32, 1)
    for n in range(nx + step, 2 * nx + 1, step):
        nx_m, ny_m = grid_of("sod", n, aspect)
        run = fastest(repeats, lambda nx_m=nx_m, ny_m=ny_m: run_ours("sod", nx_m, ny_m,
                                                                    final_time))
        error = l1(run["primitive"][0], sod_exact_density(nx_m, final_time)[None, :])
        if error <= target:
            return {"nx": nx_m, "ny": ny_m, **timing(run, nx_m * ny_m),
                    "density_l1_error": error}
    return {"not_found_up_to_nx": 2 * nx}


def compare(problem: str, nx: int, ny: int, final_time: float, *, repeats: Repeats,
            pyro: bool, aspect: int) -> dict:
    """One problem on one grid: both sides' timings, errors and ratios."""
    cells = nx * ny
    ours = fastest(repeats, lambda: run_ours(problem, nx, ny, final_time))
    with fixed_threads(1):
        single = fastest(repeats, lambda: run_ours(problem, nx, ny, final_time))
    row = {"problem": problem, "nx": nx, "ny": ny, "lengths": list(state_of(problem, nx, ny)[1]),
           "boundary": BOUNDARY[problem][0], "final_time": final_time,
           "ssmpde": timing(ours, cells), "ssmpde_one_thread": timing(single, cells)}
    theirs = None
    if pyro:
        theirs = fastest(repeats, lambda: run_pyro(problem, nx, ny, final_time))
        row["pyro"] = {**timing(theirs, cells), "final_time_reached": theirs["time"]}
        ours_initial = state_of(problem, nx, ny)[0][0, :4]
        row["initial_state_max_difference"] = float(np.abs(theirs["initial"]
                                                           - ours_initial).max())
        rate = {side: row[side]["cell_updates_per_second"]
                for side in ("ssmpde", "ssmpde_one_thread", "pyro")}
        row["rate_ratio"] = rate["ssmpde"] / rate["pyro"]
        row["rate_ratio_one_thread"] = rate["ssmpde_one_thread"] / rate["pyro"]
        row["wall_time_ratio_pyro_over_ssmpde"] = theirs["seconds"] / ours["seconds"]
        row["density_l1_difference"] = l1(ours["primitive"][0], theirs["primitive"][0])
    if problem == "sod":
        exact = sod_exact_density(nx, final_time)[None, :]
        row["ssmpde"]["density_l1_error"] = l1(ours["primitive"][0], exact)
        if theirs is not None:
            row["pyro"]["density_l1_error"] = target = l1(theirs["primitive"][0], exact)
            row["equal_or_lower_error"] = row["ssmpde"]["density_l1_error"] <= target
            matched = ({"nx": nx, "ny": ny, **row["ssmpde"]} if row["equal_or_lower_error"]
                       else sod_matched(nx, aspect, final_time, target, repeats))
            row["ssmpde_at_equal_or_lower_error"] = matched
            if "seconds" in matched:
                row["wall_time_ratio_at_equal_or_lower_error"] = (theirs["seconds"]
                                                                  / matched["seconds"])
    return row


def warm_up(pyro: bool) -> None:
    """Compile both sides' numba kernels (each boundary kind) before any timing."""
    for problem in BOUNDARY:
        compare(problem, *grid_of(problem, 16, 4), 0.01, repeats=Repeats(1, 0.0, math.inf),
                pyro=pyro, aspect=4)


def ce_rm_sample(fraction: float, resolution: int | None, repeats: Repeats) -> dict:
    """Wall time of one ``ce-rm`` sample through the generation API (``sample_inputs`` then
    ``solve_batch``), over ``fraction`` of the preset's final time (whole record intervals,
    at least one); the full-sample figure is that time over the fraction timed."""
    from ssmpde.solvers import get_solver

    overrides = {} if resolution is None else {"simulation_resolution": resolution,
                                               "resolution": resolution // 2}
    preset = get_solver("euler", preset="ce-rm", **overrides)
    records = max(1, round(fraction * preset.num_records))
    solver = preset if records == preset.num_records else get_solver(
        "euler", preset="ce-rm", **overrides, final_time=records * preset.config.record_interval)
    inputs = solver.sample_inputs(0, [0])
    once = repeats._replace(most=min(repeats.most, 3), until=0.0)  # redone only if disturbed
    run = fastest(once, lambda: timed(lambda: solver.solve_batch(inputs)))
    del run["result"]
    share = records / preset.num_records
    return {"preset": "ce-rm", "config": solver.config_dict(),
            "full_final_time": preset.config.final_time, "fraction_of_final_time": share,
            "measured_in_full": records == preset.num_records, **run,
            "seconds_per_full_sample": run["seconds"] / share}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smaller grids and a tenth of the CE-RM sample")
    parser.add_argument("--sod-grids", type=int, nargs="+",
                        help="nx of the Sod runs (default 128 256 512; quick 64 128)")
    parser.add_argument("--sod-aspect", type=int, default=8, help="Sod's nx / ny")
    parser.add_argument("--sod-time", type=float, default=0.2)
    parser.add_argument("--kh-grids", type=int, nargs="+",
                        help="n of the n × n Kelvin–Helmholtz runs (default 64 128 256; "
                             "quick 32 64)")
    parser.add_argument("--kh-time", type=float, default=0.5)
    parser.add_argument("--repeats", type=int, default=Repeats().most,
                        help="most runs per side and grid (the fastest is kept)")
    parser.add_argument("--min-seconds", type=float, default=Repeats().until,
                        help="runs are repeated until they took this long in all")
    parser.add_argument("--quiet-load", type=float, default=Repeats().quiet,
                        help="a run during which other processes kept more cores than this "
                             "busy is redone (within --repeats)")
    parser.add_argument("--threads", type=int, default=numba.config.NUMBA_NUM_THREADS,
                        help="numba threads of both sides")
    parser.add_argument("--ce-rm-fraction", type=float,
                        help="fraction of the CE-RM final time timed (default 1, quick 0.1; "
                             "0 skips it)")
    parser.add_argument("--ce-rm-resolution", type=int,
                        help="simulation grid of the CE-RM sample (default the preset's 256, "
                             "stored at half of it)")
    parser.add_argument("--skip-pyro", action="store_true", help="time ssmpde alone")
    parser.add_argument("--out", type=Path, default=RESULTS / "euler.json")
    args = parser.parse_args(argv)
    sod_grids = args.sod_grids or ([64, 128] if args.quick else [128, 256, 512])
    kh_grids = args.kh_grids or ([32, 64] if args.quick else [64, 128, 256])
    fraction = args.ce_rm_fraction if args.ce_rm_fraction is not None else (
        0.1 if args.quick else 1.0)
    pyro = has_pyro() and not args.skip_pyro
    repeats = Repeats(args.repeats, args.min_seconds, args.quiet_load)

    load_before = os.getloadavg()
    with fixed_threads(args.threads):
        warm_up(pyro)
        rows = [compare("sod", *grid_of("sod", n, args.sod_aspect), args.sod_time,
                        repeats=repeats, pyro=pyro, aspect=args.sod_aspect)
                for n in sod_grids]
        rows += [compare("kh", n, n, args.kh_time, repeats=repeats, pyro=pyro, aspect=1)
                 for n in kh_grids]
        ce_rm = (ce_rm_sample(fraction, args.ce_rm_resolution, repeats) if fraction > 0
                 else None)

    result = {**header("euler_2d"), "quick": args.quick, "numba_threads": args.threads,
              "repeats": repeats._asdict(),
              # other work on the machine: here, and per timing as other_load_cores
              "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()}}
    result["versions"]["numba"] = numba.__version__
    result["settings"] = {
        "gamma": GAMMA, "cfl": CFL, "riemann_solver": "HLLC",
        "limiter": "2nd-order MC on the primitive variables",
        "ssmpde": f"ssmpde.solvers.euler.integrate(..., limiter='mc', cfl={CFL})",
        "pyro": {key: value for key, value in pyro_settings("sod", 2, 2, 0.0).items()
                 if key.startswith(("driver.", "compressible.", "eos.", "io.", "vis."))
                 and key not in ("driver.tmax", "driver.verbose")},
        "boundaries": {problem: kinds[0] for problem, kinds in BOUNDARY.items()},
        "sod": {"left": SOD_LEFT, "right": SOD_RIGHT, "aspect_nx_over_ny": args.sod_aspect,
                "density_l1_error": "mean |rho - rho_exact| over the cells, rho_exact at "
                                    "the cell centres (tests/solvers/exact_riemann.py)"},
        "kh": {"outer": KH_OUTER, "inner": KH_INNER, "width": KH_WIDTH,
               "amplitude": KH_AMPLITUDE, "pressure": KH_PRESSURE},
        "timed": "the time loop only (set-up excluded), after a warm-up run of each problem "
                 "on both sides (numba compilation); the fastest undisturbed of up to "
                 "--repeats runs, repeated until they took --min-seconds in all and one was "
                 "undisturbed (other processes kept at most --quiet-load cores busy); the "
                 "same rule for both sides",
    }
    if pyro:
        from importlib.metadata import version

        result["versions"]["pyro-hydro"] = version("pyro-hydro")
    else:
        result["pyro_skipped"] = ("--skip-pyro" if args.skip_pyro else
                                  "pyro-hydro not installed (pip install -e .[compare])")
    result["rows"] = rows
    result["ce_rm_sample"] = ce_rm
    write(result, args.out)
    print_table(result)
    return result


def _figure(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(result: dict) -> None:
    print(f"2D Euler, HLLC + MC, CFL {CFL}, numba threads {result['numba_threads']} "
          "(pyro: serial)")
    print("| problem | grid | steps ours / pyro | cell updates/s ours (1 thread) | pyro | "
          "ratio (1 thread) | L1(ρ) ours | pyro | wall-time ratio at ≤ error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in result["rows"]:
        ours, single, theirs = row["ssmpde"], row["ssmpde_one_thread"], row.get("pyro", {})
        matched = row.get("ssmpde_at_equal_or_lower_error", {})
        at_error = row.get("wall_time_ratio_at_equal_or_lower_error")
        print(f"| {row['problem']} | {row['nx']}×{row['ny']} | {ours['steps']} / "
              f"{theirs.get('steps', '-')} | {ours['cell_updates_per_second']:.3g} "
              f"({single['cell_updates_per_second']:.3g}) | "
              f"{_figure(theirs.get('cell_updates_per_second'), '.3g')} | "
              f"{_figure(row.get('rate_ratio'), '.1f')}x "
              f"({_figure(row.get('rate_ratio_one_thread'), '.1f')}x) | "
              f"{_figure(ours.get('density_l1_error'), '.2e')} | "
              f"{_figure(theirs.get('density_l1_error'), '.2e')} | "
              + (f"{at_error:.1f}x (ours at nx {matched['nx']}) |" if at_error else "- |"))
    loads = [row[side]["other_load_cores"] for row in result["rows"]
             for side in ("ssmpde", "ssmpde_one_thread", "pyro") if side in row]
    if loads and None not in loads:
        print(f"Other processes kept up to {max(loads):.2f} cores busy during a timing "
              f"(of {os.cpu_count()}; other_load_cores in the JSON)")
    ce_rm = result["ce_rm_sample"]
    if ce_rm:
        grid = ce_rm["config"]["simulation_resolution"], ce_rm["config"]["resolution"]
        print(f"CE-RM sample ({grid[0]}² → {grid[1]}²): {ce_rm['seconds']:.2f} s for "
              f"{ce_rm['fraction_of_final_time']:g} of T = {ce_rm['full_final_time']:g}, "
              f"{ce_rm['seconds_per_full_sample']:.1f} s per sample")


def rows(result: dict) -> list[str]:
    """This benchmark's rows of the results table: Sod at equal or lower error, the
    Kelvin–Helmholtz update rates from 128² up, the CE-RM sample."""
    lines = []
    for r in result["rows"]:
        if "pyro" not in r:
            continue
        ours, pyro = r["ssmpde"], r["pyro"]
        rate = (f"{ours['cell_updates_per_second'] / 1e6:.1f} M cell updates/s",
                f"{pyro['cell_updates_per_second'] / 1e6:.2f} M/s (pyro-hydro "
                f"{result['versions'].get('pyro-hydro', '')} compressible, HLLC, MC)")
        if r["problem"] == "sod" and "ssmpde_at_equal_or_lower_error" in r:
            fine = r["ssmpde_at_equal_or_lower_error"]
            lines.append(table_row(
                f"Euler Sod {r['nx']}×{r['ny']}, T {r['final_time']:g}: wall time at equal or "
                f"lower L1(ρ) error (pyro {pyro['density_l1_error']:.2e})",
                f"{fine['seconds'] * 1e3:.0f} ms at {fine['nx']}×{fine['ny']} "
                f"(L1 {fine['density_l1_error']:.2e}); {rate[0]}",
                f"{pyro['seconds']:.2f} s; {rate[1]}",
                f"**{r['wall_time_ratio_at_equal_or_lower_error']:.0f}x**", when(result)))
        elif r["problem"] == "kh" and r["nx"] >= 128:
            lines.append(table_row(
                f"Euler Kelvin–Helmholtz {r['nx']}², T {r['final_time']:g}, {ours['steps']} "
                "steps", rate[0], rate[1], f"**{r['rate_ratio']:.0f}x**", when(result)))
    sample = result.get("ce_rm_sample")
    if sample:
        lines.append(table_row("Euler CE-RM sample, 256² → 128², T 2 (21 frames)",
                               f"{sample['seconds_per_full_sample']:.0f} s", "–", "–",
                               when(result)))
    return lines


if __name__ == "__main__":
    main()
