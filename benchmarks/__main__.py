"""Run the benchmarks and write the table the README shows.

    python -m benchmarks                 # solvers and scans (~5 minutes), then the table
    python -m benchmarks --all           # also the GeoMaNO step (~8 min); the training
                                         # comparisons need data (see bench_training.py)
    python -m benchmarks --table-only    # rebuild benchmarks/results/table.md from the JSON

Every row is a side-by-side ratio measured in one run; the table says when and on what
machine each was measured (from the JSON files in ``benchmarks/results/``). Each benchmark
module formats its own rows (its ``rows(result)``); this collects them.
"""

from __future__ import annotations

import argparse
import importlib
import json

from benchmarks.common import RESULTS

TABLE = RESULTS / "table.md"

#: The table's sections in order: a results file (``benchmarks/results/NAME.json``) and the
#: module that wrote it and formats its rows.
SECTIONS = (
    ("navier_stokes", "benchmarks.bench_navier_stokes"),
    ("darcy", "benchmarks.bench_darcy"),
    ("scan", "benchmarks.bench_scan"),
    ("scan_gpu", "benchmarks.bench_scan"),
    ("training_darcy_gpu", "benchmarks.gpu.training_result"),
    ("euler", "benchmarks.bench_euler"),
    ("ks", "benchmarks.bench_ks"),
    ("burgers", "benchmarks.bench_burgers"),
    ("peers", "benchmarks.bench_peers"),
    ("geomano", "benchmarks.bench_geomano"),
    ("geomano_speed", "benchmarks.bench_geomano_speed"),
    ("ssno", "benchmarks.bench_ssno"),
    ("ssd", "benchmarks.bench_ssd"),
    ("ks_learning", "benchmarks.bench_ks_learning"),
    ("mno", "benchmarks.bench_mno"),
    ("training_darcy", "benchmarks.bench_training"),
    ("training_navier-stokes", "benchmarks.bench_training"),
    ("models", "benchmarks.bench_models"),
    ("threads", "benchmarks.bench_threads"),
)
FOOTER = ("Reproduce: `python -m benchmarks` (`--all` for the long ones; "
          "`benchmarks/bench_training.py` for the training comparisons).")


def table() -> str:
    """The Markdown table of every result file present."""
    lines = ["| benchmark | ssmpde | reference | ratio | measured |", "|---|---|---|---|---|"]
    for name, module in SECTIONS:
        path = RESULTS / f"{name}.json"
        if path.exists():
            lines += importlib.import_module(module).rows(json.loads(path.read_text()))
    return "\n".join(lines)


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="include the long benchmarks")
    parser.add_argument("--table-only", action="store_true",
                        help="rebuild the table from the JSON files without running anything")
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
    TABLE.write_text(f"{text}\n\n{FOOTER}\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
