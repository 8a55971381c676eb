"""bench_claims: the verdict rule on hand-made results, and (slow) the whole benchmark at tiny
sizes, end to end."""

import json
import math

import pytest

from benchmarks import bench_claims
from benchmarks.bench_claims import (NOT_REPRODUCED, REPRODUCED, UNRESOLVED, claim_verdict,
                                     judge, summary, verdict)


def arm(name, errors):
    return {"name": name, "parameters": 1000,
            "runs": [{"seed": s, "error": e, "seconds": 1.0, "curve": [2 * e, e]}
                     for s, e in enumerate(errors)]}


def entry(better_errors, worse_errors):
    return {"claim": "c", "paper": "P", "statement": "A beats B", "seeds": [0, 1, 2],
            "claimed_orderings": [["a", "b"]], "paper_errors": {},
            "setting": {"data": {}, "train": {}, "epochs": 2, "recipe": None},
            "arms": [arm("a", better_errors), arm("b", worse_errors)]}


def test_summary_is_the_mean_and_the_sample_standard_deviation():
    s = summary([1.0, 2.0, 3.0])
    assert s["mean"] == 2.0 and s["std"] == pytest.approx(1.0)


def test_a_gap_under_two_combined_standard_deviations_is_unresolved():
    # means 0.10 and 0.12, std 0.01 each: 2 * sqrt(2) * 0.01 = 0.0283 > gap 0.02
    judged = judge(entry([0.09, 0.10, 0.11], [0.11, 0.12, 0.13]))
    (ordering,) = judged["orderings"]
    assert ordering["verdict"] == UNRESOLVED and judged["verdict"] == UNRESOLVED
    assert ordering["resolvable"] == pytest.approx(2 * math.sqrt(2) * 0.01)
    assert ordering["ratio"] == pytest.approx(1.2)


def test_a_gap_over_the_noise_is_reproduced_or_reversed():
    assert judge(entry([0.09, 0.10, 0.11], [0.19, 0.20, 0.21]))["verdict"] == REPRODUCED
    assert judge(entry([0.19, 0.20, 0.21], [0.09, 0.10, 0.11]))["verdict"] == NOT_REPRODUCED


def test_the_rule_at_its_edge():
    # gap exactly at the threshold is not enough
    better, worse = {"mean": 1.0, "std": 0.3}, {"mean": 2.2, "std": 0.4}
    assert verdict(better, worse)["verdict"] == REPRODUCED  # threshold 1.0, gap 1.2
    assert verdict(better, {"mean": 2.0, "std": 0.4})["verdict"] == UNRESOLVED  # gap 1.0


def test_a_claim_of_several_orderings():
    assert claim_verdict([{"verdict": REPRODUCED}, {"verdict": REPRODUCED}]) == REPRODUCED
    assert claim_verdict([{"verdict": REPRODUCED}, {"verdict": UNRESOLVED}]) == UNRESOLVED
    assert claim_verdict([{"verdict": UNRESOLVED}, {"verdict": NOT_REPRODUCED}]) \
        == NOT_REPRODUCED


def test_the_readme_row_states_setting_errors_ratio_and_verdict():
    judged = judge(entry([0.09, 0.10, 0.11], [0.19, 0.20, 0.21]))
    judged["setting"] = {"data": {"equation": "darcy", "options": {"resolution": 43},
                                  "train_samples": 128, "test_samples": 50},
                         "train": {}, "epochs": 20, "recipe": "paper", "recipe_of": "lamo"}
    judged["paper_errors"] = {"a": 0.0039}
    header, rule, row = bench_claims.readme_table({"claims": [judged]})
    assert header.count("|") == rule.count("|") == row.count("|") == 6
    assert "Darcy 43², 128 / 50 samples, 20 epochs, lamo's paper, every arm, 3 seeds" in row
    assert "a 0.1000 ± 0.0100 (0.0039); b 0.2000 ± 0.0100" in row
    assert "a < b: 2.00 (+0.1000; 0.0283)" in row and f"**{REPRODUCED}**" in row


def test_a_rollout_claim_also_judges_the_last_one_step_errors():
    # saturated rollouts (about 1.3 for every arm: unresolved) over one-step errors that
    # do order the arms; an operator claim (curve ends at its error) gets no one-step field
    judged = entry([1.30, 1.35, 1.32], [1.31, 1.33, 1.36])
    for arm_, steps in zip(judged["arms"], ([0.10, 0.11, 0.12], [0.20, 0.21, 0.22])):
        for run, step in zip(arm_["runs"], steps):
            run["curve"] = [0.5, step]
    judge(judged)
    assert judged["verdict"] == UNRESOLVED
    (one,) = judged["one_step_orderings"]
    assert one["verdict"] == REPRODUCED and one["ratio"] == pytest.approx(0.21 / 0.11)
    assert judged["arms"][0]["one_step"]["mean"] == pytest.approx(0.11)
    plain = judge(entry([0.09, 0.10, 0.11], [0.19, 0.20, 0.21]))
    assert plain["one_step_orderings"] == [] and plain["arms"][0]["one_step"] is None


def test_late_fall_measures_how_much_the_curve_still_falls():
    # 8 epochs: the error two epochs before the end against the last one
    assert bench_claims.late_fall([[8, 7, 6, 5, 4, 3, 2.5, 2.0]]) == pytest.approx(0.5)
    assert bench_claims.late_fall([[1.0] * 8, [4, 3, 2, 2.0]]) == pytest.approx(0.0)
    assert bench_claims.late_fall([[1.0, 0.5]]) is None


def test_a_claim_with_missing_runs_has_no_verdict():
    judged = judge(entry([0.1, 0.1, 0.1], [0.2, 0.2]))
    assert judged["verdict"].startswith("incomplete")


def test_at_least_three_seeds_are_required(tmp_path):
    with pytest.raises(SystemExit):
        bench_claims.main(["--seeds", "0", "1", "--out", str(tmp_path / "c.json")])


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path):
    out = tmp_path / "claims.json"
    bench_claims.main(["--quick", "--seeds", "0", "1", "2", "--out", str(out),
                       "--workdir", str(tmp_path / "work"), "--figures", str(tmp_path)])
    result = json.loads(out.read_text())
    assert result["commit"] and {e["claim"] for e in result["claims"]} == {
        c.key for c in bench_claims.CLAIMS}
    for claim in result["claims"]:
        assert claim["verdict"] in (REPRODUCED, NOT_REPRODUCED, UNRESOLVED)
        assert claim["setting"]["data"]["equation"] and claim["setting"]["data"]["train_seed"]
        for a in claim["arms"]:
            assert len(a["errors"]) == 3 and a["mean"] is not None and a["std"] is not None
            assert all(run["curve"] and run["seconds"] > 0 for run in a["runs"])
        assert (tmp_path / f"claims_{claim['claim']}.png").exists()
    # a rerun with the same settings trains nothing
    before = out.read_text()
    bench_claims.main(["--quick", "--seeds", "0", "1", "2", "--out", str(out),
                       "--workdir", str(tmp_path / "work"), "--figures", str(tmp_path)])
    again = json.loads(out.read_text())
    assert [c["arms"] for c in again["claims"]] == [c["arms"] for c in json.loads(before)["claims"]]
