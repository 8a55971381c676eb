"""The report of ``ssmpde rollout``: the legend of its step counts, a corrected coarse
solver's steps counted as corrected, and the note on data stored coarser than simulated."""

from __future__ import annotations

import warnings

import pytest

from ssmpde.cli import _format_warning, main
from ssmpde.coupling.run import (STEP_LEGEND, StoredGridWarning, _hand_over_loss, describe,
                                 report, run_rollout)
from ssmpde.surrogates.train import TrainConfig, train


@pytest.fixture(scope="module")
def ks_surrogate(ks_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "surrogate"
    train("fno", ks_data, out=run, preset="burgers", progress=False,
          model_overrides={"width": 4, "depth": 1, "modes": [4]},
          config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2))
    return run


@pytest.fixture(scope="module")
def ks_corrector(ks_data, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "ks-2x5"
    train("fno", ks_data, out=run, preset="burgers", progress=False,
          model_overrides={"width": 4, "depth": 1, "modes": [4]},
          config=TrainConfig(epochs=1, batch_size=8, window=1, num_test=2,
                             target="correction", coarse="2x5"))
    return run


def test_the_table_defines_its_step_counts_under_it(ks_surrogate, capsys):
    with pytest.warns(StoredGridWarning):
        assert main(["rollout", "--checkpoint", str(ks_surrogate), "--steps", "2",
                     "--schedule", "adaptive", "--coarse", "none"]) == 0
    out = capsys.readouterr().out
    table, _, below = out.partition("\n\n")
    assert "| adaptive | checks |" in table and "fallback steps" in table
    assert below.startswith(STEP_LEGEND)
    for term in ("solver = ", "surrogate = ", "corrected = ", "fallback = "):
        assert term in below


def test_corrected_steps_are_counted_as_corrected_not_surrogate(ks_surrogate, ks_corrector):
    with pytest.warns(StoredGridWarning):
        rows = run_rollout(ks_corrector, steps=3, schedules=["surrogate:1,solver:1"],
                           coarse=[], correctors=[ks_corrector])
    by_schedule = {r["schedule"]: r for r in rows}
    fixed = by_schedule["surrogate:1,solver:1"]
    assert (fixed["corrected"], fixed["solver"], fixed["fallback"]) == (2, 1, 0)
    assert "surrogate" not in fixed and fixed["corrected_seconds"] > 0
    assert "(1 solver, 2 corrected, 0 fallback steps)" in describe(fixed)
    alone = [r for r in rows if r["kind"] == "corrected"]
    assert len(alone) == 2  # the checkpoint's own and the --corrector's
    assert all("0 solver, 3 corrected, 0 fallback steps" in describe(r) for r in alone)
    with pytest.warns(StoredGridWarning):
        plain = run_rollout(ks_surrogate, steps=2, schedules=["surrogate"], coarse=[])
    assert {r["schedule"]: r for r in plain}["surrogate"]["surrogate"] == 2


def test_data_stored_coarser_than_simulated_warn_that_the_solver_row_is_no_reference(
        ks_data, ks_surrogate, capsys):
    with pytest.warns(StoredGridWarning, match="stored at 64 of the 128 simulated points") \
            as caught:
        rows = run_rollout(ks_surrogate, steps=3, schedules=["surrogate"], coarse=[])
    assert len(caught) == 1
    solver = next(r for r in rows if r["schedule"] == "solver")
    assert "not the reference" in solver["note"] and "solver, one run" in solver["note"]
    assert solver["final_rel_l2"] > 0  # the hand-over loss the note explains (tiny this early)
    assert all("note" not in r for r in rows if r is not solver)
    text = report(rows)
    assert text.splitlines()[-1] == f"Note (solver): {solver['note']}"
    # The command line: the warning (one line on stderr), the note under the table.
    with pytest.warns(StoredGridWarning) as caught:
        assert main(["rollout", "--checkpoint", str(ks_surrogate), "--steps", "2",
                     "--schedule", "surrogate", "--coarse", "none"]) == 0
    assert len(caught) == 1
    assert "Note (solver): 'ks.nc' is stored at 64 of the 128 simulated points" in \
        capsys.readouterr().out
    line = _format_warning(caught[0].message, StoredGridWarning, "run.py", 1)
    assert line.startswith("ssmpde: warning: 'ks.nc' is stored") and line.count("\n") == 1


def test_no_note_where_the_data_are_stored_at_the_simulation_resolution(tmp_path):
    assert _hand_over_loss(tmp_path / "d.nc", [128], (128,)) is None
    assert _hand_over_loss(tmp_path / "d.nc", [64, 64], (64, 64)) is None
    assert "stored at 32x32 of the 64x64 simulated points" in _hand_over_loss(
        tmp_path / "d.nc", [32, 32], (64, 64))
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoredGridWarning)
        assert report([]).endswith(STEP_LEGEND)
