"""The thread benchmark (benchmarks/bench_threads.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_threads_benchmark_runs(tmp_path):
    from benchmarks import bench_threads

    out = tmp_path / "threads.json"
    result = bench_threads.main(["--quick", "--cache", str(tmp_path / "cache"),
                                 "--out", str(out)])
    written = json.loads(out.read_text())
    assert written["phases"].keys() == {"quiet", "loaded"}
    for phase in written["phases"].values():
        assert set(phase["seconds"]) == set(bench_threads.SETTINGS)
        for seconds in phase["seconds"].values():
            assert seconds["call"] > seconds["hybrid"] > 0
        assert len(phase["load_average_1_5_15min"]["before"]) == 3
        assert set(phase["speedup_vs_every_core"]) == {"policy", "threads 1"}
    spin = written["spin_cpu_seconds_per_idle_second"]
    assert spin["ssmpde first"] < 0.05  # OMP_WAIT_POLICY=PASSIVE read in time: no spinning
    assert result["policy_defaults"]["rollout"] == 1
    assert bench_threads.rows(written)[0].count("|") == 6
