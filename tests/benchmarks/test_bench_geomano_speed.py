"""The GeoMaNO speed benchmark (benchmarks/bench_geomano_speed.py) runs end to end at tiny
sizes, against a baseline revision imported side by side without touching the module search
path."""

import json
import subprocess
import sys

import pytest

from benchmarks.common import BASELINE_PACKAGE, REPO


def _has_git_history() -> bool:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "HEAD"],
                          capture_output=True)
    return done.returncode == 0


@pytest.mark.e2e
@pytest.mark.skipif(not _has_git_history(), reason="needs the git repository for --baseline")
def test_geomano_speed_benchmark_runs_against_a_baseline(tmp_path):
    from benchmarks import bench_geomano_speed

    search_path = list(sys.path)
    out = tmp_path / "geomano_speed.json"
    result = bench_geomano_speed.main(["--tiny", "--cases", "ks", "--repeats", "1",
                                       "--baseline", "HEAD", "--out", str(out)])
    assert sys.path == search_path
    assert json.loads(out.read_text())["baseline"] == "HEAD"
    case = result["cases"]["ks"]
    assert set(case["ms_per_step"]) == {"baseline", "eager"}
    assert all(ms > 0 for ms in case["ms_per_step"].values())
    assert case["speedup_eager"] > 0
    # Same weights and inputs: this checkout agrees with the committed package.
    assert max(case["difference_from_baseline"].values()) < 1e-5
    # The baseline is its own package (extracted from git), not this checkout renamed.
    names = [name for name in sys.modules
             if name.startswith(BASELINE_PACKAGE) and "." not in name]
    assert names
    assert all(not sys.modules[name].__file__.startswith(str(REPO)) for name in names)
    assert bench_geomano_speed.rows(result)  # a row for the results table


def test_geomano_speed_rows_skip_cases_without_a_baseline():
    from benchmarks import bench_geomano_speed

    result = {"baseline": None, "cases": {"ks": {"ms_per_step": {"eager": 1.0}, "batch": 2}}}
    assert bench_geomano_speed.rows(result) == []
