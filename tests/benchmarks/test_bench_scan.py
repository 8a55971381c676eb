"""The scan benchmark (benchmarks/bench_scan.py): its CPU comparison at a tiny size, and its
rows for the CPU and the GPU result files."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.mark.e2e
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


def test_gpu_rows_name_both_triton_kernels():
    """A GPU result with the recurrent kernel beside the chunked one gets a row for each, each
    with its own ratio to mamba-ssm; the short-sequence case is listed too."""
    from benchmarks.bench_scan import rows

    def timing(ms):
        return {"seconds": ms / 1e3, "peak_mib": 4.0}

    row = {"triton": timing(2.0), "recurrent": timing(0.5), "mamba": timing(1.0),
           "speed_ratio": 0.5, "speed_ratio_recurrent": 2.0,
           "shape": dict(batch=256, channels=128, state=16, length=64)}
    result = {"benchmark": "selective_scan_gpu", "date": "2026-11-27T00:00:00+00:00",
              "cuda": {"device": "NVIDIA H100", "mamba_ssm": "2.3.2", "2d": {},
                       "1d": {"rows_64_float32_fwd": row}}}
    lines = rows(result)
    assert len(lines) == 2
    assert "Triton chunked" in lines[0] and "**0.50x**" in lines[0]
    assert "Triton recurrent" in lines[1] and "**2.00x**" in lines[1]
    assert all("256 × 128 ch × state 16 × L 64" in line for line in lines)
