"""The peers benchmark (benchmarks/bench_peers.py): a missing peer stops it in one line naming
the extra; with Exponax and torch-cfd installed it runs end to end at tiny sizes, in its own
interpreter (it pins the process to one core and sets JAX and torch options for good)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_peer_names_the_extra_and_exits_2(monkeypatch, capsys, tmp_path):
    from benchmarks import bench_peers

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "torch_cfd" else find(name, *rest))
    out = tmp_path / "peers.json"
    with pytest.raises(SystemExit) as stop:
        bench_peers.main(["--quick", "--out", str(out)])
    assert stop.value.code == 2
    printed = capsys.readouterr().out
    assert printed.count("\n") == 1 and "torch-cfd" in printed
    assert "pip install -e .[peers]" in printed
    assert not out.exists()


def test_peers_benchmark_runs_tiny(tmp_path):
    pytest.importorskip("exponax")
    pytest.importorskip("torch_cfd")
    from benchmarks import bench_peers

    out = tmp_path / "peers.json"
    core = min(os.sched_getaffinity(0))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_peers", "--quick",
                           "--core", str(core), "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["affinity"] == [core] and result["environment"]["SSMPDE_THREADS"] == "1"
    assert result["torch_threads"] == 1
    for name in ("exponax", "jax", "jaxlib", "torch", "torch-cfd"):
        assert result["versions"][name], name
    assert all(len(result["load_average_1_5_15min"][k]) == 3 for k in ("before", "after"))

    ns = result["navier_stokes"]
    (grid,) = ns["grids"]
    names = set(grid["libraries"])
    assert {"exponax", "torch-cfd"} <= names and any(n.startswith("ssmpde") for n in names)
    for name, library in grid["libraries"].items():
        assert library["reference"]["converged"], name
    # one semi-discrete system, three time integrators: the converged references agree, and
    # the peers' default masks (one mode fewer or one row more than ssmpde's) differ visibly
    assert max(grid["reference_differences"].values()) < 1e-8
    assert grid["default_band_effect"]["exponax"]["rel_l2_default_vs_matched"] > 1e-6
    for row in grid["equal_error"]:
        assert set(row["seconds"]) == names
        for name, error in row["rel_l2_error_max"].items():
            assert error <= row["target"], (name, row)
        assert all(ratio > 0 for peer in row["ratios"].values() for ratio in peer.values())
    assert set(grid["per_step"]["seconds_per_step"]) == names

    for row in result["kuramoto_sivashinsky"]["rows"]:
        if row["dtype"] == "float64":
            assert row["rel_l2_ssmpde_vs_exponax"] < 1e-12
        else:  # float32 arithmetic: off float64 by float32's round-off, no more, no less
            assert row["exponax_output_dtype"] == "float32"
            assert 1e-10 < row["rel_l2_exponax_vs_float64"] < 1e-4
            if "ssmpde_skipped" not in row:
                assert 1e-10 < row["rel_l2_ssmpde_vs_float64"] < 1e-4
                assert row["rel_l2_ssmpde_vs_exponax"] < 1e-4
    assert result["burgers"]["rel_l2_ssmpde_vs_exponax"] < 1e-12
    lines = bench_peers.rows(result)
    assert lines and all(line.count("|") == 6 for line in lines)
