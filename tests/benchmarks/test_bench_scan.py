"""The scan benchmark (benchmarks/bench_scan.py): its CPU comparison at a tiny size, and its
rows for the CPU and the GPU result files."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_compare_times_the_loop_against_the_cpu_scan(kind):
    from benchmarks.bench_scan import compare

    row = compare(kind, "cpu", 1, 2, 2, 3, repeats=2)
    assert row["loop_seconds"] > 0 and row["cpu_seconds"] > 0
    assert len(row["speedups"]) == 2 and row["speedup"] > 0


def test_rows_of_the_cpu_and_the_gpu_results():
    from benchmarks.bench_scan import rows

    cpu = rows(json.loads((RESULTS / "scan.json").read_text()))
    assert [line.split(",")[0] for line in cpu] == ["| 1D scan", "| 2D scan"]
    gpu = json.loads((RESULTS / "scan_gpu.json").read_text())
    lines = rows(gpu)
    assert lines and all(line.startswith("| GPU ") for line in lines)
    assert all(gpu["cuda"]["device"] in line for line in lines)
    assert rows(dict(gpu, cuda=None)) == []  # no CUDA device: no GPU rows
