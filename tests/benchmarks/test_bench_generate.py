"""The generation benchmark (benchmarks/bench_generate.py) runs end to end at tiny sizes."""

import json

import pytest


@pytest.mark.e2e
def test_generate_benchmark_runs_and_the_cluster_writes_the_same_data(tmp_path):
    from benchmarks import bench_generate

    out = tmp_path / "generate.json"
    result = bench_generate.main(["--tiny", "--equations", "darcy", "--samples", "4",
                                  "--batch-size", "2", "--overhead-batches", "4",
                                  "--skip-cold", "--out", str(out)])
    assert json.loads(out.read_text())["rows"] == result["rows"]
    (row,) = result["rows"]
    assert row["equation"] == "darcy" and row["identical"] is True
    assert set(row["seconds"]) == {"one_process_one_thread", "one_process_all_threads",
                                   "local_cluster"}
    assert all(rate > 0 for rate in row["samples_per_second"].values())
    overhead = result["task_overhead"]
    assert overhead["batches"] == 4 and overhead["wall_seconds"] > 0
    assert overhead["region_write_seconds"] > 0
    assert len(result["load_before"]) == len(result["load_after"]) == 3
