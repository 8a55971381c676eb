"""The long-rollout benchmark (benchmarks/bench_long_rollout.py) runs end to end at tiny
sizes and writes finite numbers and loadable best runs."""

import json
import math

import pytest


@pytest.mark.e2e
def test_long_rollout_benchmark_runs(tmp_path):
    from benchmarks import bench_long_rollout as bench
    from ssmpde.coupling import SurrogateStepper

    out, results = tmp_path / "hybrid", tmp_path / "long_rollout.json"
    variants = ["ks/fno-w32/tf", "ks/fno-w32/ar4-n0.01", "ns/fno-ns/tf-n0.01"]
    result = bench.main(["--quick", "--jobs", "1", "--out", str(out), "--results",
                         str(results), "--variants", *variants])
    written = json.loads(results.read_text())
    assert written["rows"] == json.loads(json.dumps(result["rows"]))
    for key in ("benchmark", "machine", "budget_seconds_per_variant", "recipes", "horizons",
                "data", "rows", "best", "wall_seconds"):
        assert key in written, key
    assert [row["label"] for row in written["rows"]] == variants
    for row in written["rows"]:
        for key in ("parameters", "epochs_planned", "epochs_done", "train_seconds",
                    "one_step_rel_l2", "horizon_rel_l2", "trajectory_rel_l2",
                    "ms_per_step_batch16", "final_train_loss"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["label"], key, row[key])
        assert row["rel_l2_per_step"][0] == row["one_step_rel_l2"]
        assert all(math.isfinite(v) for v in row["rel_l2_per_step"])
        assert row["horizon_steps"] == len(row["rel_l2_per_step"])  # short quick files
    assert set(written["best"]) == {"ks", "ns"}
    # paths relative to --out (data, best runs) and to the runs folder (runs): no /tmp/...
    for pde, best in written["best"].items():
        assert best["label"].startswith(pde + "/") and best["path"] == f"{pde}/best"
        stepper = SurrogateStepper.from_checkpoint(out / best["path"])
        assert stepper.window == 1
    for pde in ("ks", "ns"):
        for split in ("train", "test"):
            assert written["data"][pde][split]["path"] == f"{pde}/{split}.nc"
            assert (out / pde / f"{split}.nc").exists()
    for row in written["rows"]:
        assert row["run"] == row["label"].replace("/", "-")
        assert (out / "runs" / row["run"] / "weights.safetensors").exists()


def test_reusable_rows_resolve_the_runs_in_the_runs_folder(tmp_path):
    from benchmarks.bench_long_rollout import reusable_rows

    settings = {"quick": True, "budget_seconds_per_variant": 1.0}
    data = {"ks": {split: {"path": f"ks/{split}.nc", "samples": 4, "seed": seed}
                   for split, seed in (("train", 0), ("test", 1))}}
    rows = [{"label": "ks/fno-w32/tf", "pde": "ks", "run": "ks-fno-w32-tf"},
            {"label": "ks/fno-w16/tf", "pde": "ks", "run": "ks-fno-w16-tf"}]
    results = tmp_path / "long_rollout.json"
    results.write_text(json.dumps({**settings, "data": data, "rows": rows}))
    runs = tmp_path / "runs"
    (runs / "ks-fno-w32-tf").mkdir(parents=True)
    (runs / "ks-fno-w32-tf" / "weights.safetensors").write_bytes(b"")
    assert list(reusable_rows(results, settings, data, runs)) == ["ks/fno-w32/tf"]
    other = {"ks": dict(data["ks"], test=dict(data["ks"]["test"], seed=2))}
    assert reusable_rows(results, settings, other, runs) == {}  # other data: nothing reused
    assert reusable_rows(results, dict(settings, quick=False), data, runs) == {}
