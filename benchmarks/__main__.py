"""Run the benchmarks and write the table the README shows.

    python -m benchmarks                 # solvers and scans (~5 minutes), then the table
    python -m benchmarks --all           # also the GeoMaNO step (~8 min) and, given data,
                                         # the training comparisons (see bench_training.py)
    python -m benchmarks --table-only    # rebuild benchmarks/results/table.md from the JSON

Every row is a side-by-side ratio measured in one run; the table says when and on what
machine each was measured (from the JSON files in ``benchmarks/results/``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS  # noqa: E402

TABLE = RESULTS / "table.md"


def _load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _when(result: dict) -> str:
    machine = result.get("machine", {})
    cpu = machine.get("processor") or "CPU"
    return f"{result['date'][:10]}, {machine.get('cpus', '?')} × {cpu}"


def table() -> str:
    """The Markdown table of every result file present."""
    rows = []
    ns = _load("navier_stokes")
    if ns:
        s = ns["seconds_per_step"]
        rows.append((f"Navier–Stokes faithful step, {ns['resolution']}², batch {ns['batch']}",
                     f"{s['ssmpde'] * 1e3:.1f} ms",
                     f"{s['numpy_reference'] * 1e3:.1f} ms (plain NumPy, same scheme)",
                     f"**{ns['speedup_vs_numpy']:.1f}x**", _when(ns)))
    darcy = _load("darcy")
    if darcy:
        s = darcy["seconds_per_sample"]
        for solver in ("direct", "pcg"):
            rows.append((f"Darcy sample at K = 421, {solver}", f"{s[solver]:.2f} s",
                         f"{s['baseline']:.2f} s (loop assembly + spsolve)",
                         f"**{darcy['speedup_vs_baseline'][solver]:.1f}x**", _when(darcy)))
    scan = _load("scan")
    if scan:
        shape = scan["shape"]
        for key, label in (("1d_state16", f"1D scan, L {shape['length']}"),
                           ("2d_state16", "2D scan, {0}×{1}".format(*shape["grid"]))):
            row = scan["cpu"].get(key)
            if row:
                memory = scan["peak_memory_mib"][key]
                rows.append((f"{label}, fwd+bwd, batch {shape['batch']} × {shape['channels']} "
                             "channels × state 16",
                             f"{row['cpu_seconds'] * 1e3:.0f} ms, {memory['cpu']:.0f} MiB",
                             f"{row['loop_seconds']:.2f} s, {memory['loop']:.0f} MiB "
                             "(PyTorch loop)", f"**{row['speedup']:.0f}x**", _when(scan)))
    geomano = _load("geomano")
    if geomano:
        rows.append(("GeoMaNO darcy preset, train step, batch 4 at 85²",
                     f"{geomano['cpu_scan_seconds']:.2f} s (CPU scans)",
                     f"{geomano['reference_scan_seconds']:.0f} s (reference scans)",
                     f"**{geomano['speedup']:.0f}x**", _when(geomano)))
    for task in ("darcy", "navier-stokes"):
        result = _load(f"training_{task}")
        if result and {"geomano", "fno"} <= set(result["models"]):
            g, f = result["models"]["geomano"], result["models"]["fno"]
            rows.append((f"{task}: GeoMaNO vs FNO, {result['budget_seconds']:.0f} s CPU "
                         "training each (test rel. L2)",
                         f"{g['test_rel_l2']:.4f} ({g['epochs_done']} epochs)",
                         f"{f['test_rel_l2']:.4f} ({f['epochs_done']} epochs)",
                         f"{g['test_rel_l2'] / f['test_rel_l2']:.2f}", _when(result)))
    lines = ["| benchmark | ssmpde | reference | ratio | measured |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="include the long benchmarks")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.table_only:
        from benchmarks import bench_darcy, bench_navier_stokes, bench_scan

        bench_navier_stokes.main([])
        bench_darcy.main([])
        bench_scan.main([])
        if args.all:
            from benchmarks import bench_geomano

            bench_geomano.main([])
    text = table()
    TABLE.write_text(text + "\n\nReproduce: `python -m benchmarks` (`--all` for the long ones; "
                     "`benchmarks/bench_training.py` for the training comparisons).\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
