"""The judging benchmark of learned corrections (benchmarks/bench_correction.py): its quick
configuration runs end to end, its solver rows carry every field and order as resolution says,
a corrected configuration is scored like a solver run, and the break-even arithmetic."""

import json
import math
import shutil
import threading
import time

import numpy as np
import pytest

from benchmarks import bench_correction
from benchmarks.bench_correction import Evaluation, corrected_row, solver_row
from ssmpde.coupling.pareto import (breakeven, dominates, equal_accuracy_seconds, judge,
                                    solver_front)

FIELDS = ("kind", "label", "model", "coarsening", "seconds", "final_rel_l2",
          "correlation_time", "correlation_time_95")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    folder = tmp_path_factory.mktemp("correction")
    out = folder / "correction.json"
    result = bench_correction.main(["--quick", "--out", str(out), "--images", str(folder)])
    return result, out, folder


def solver_rows(problem):
    return [r for r in problem["rows"] if r["kind"] == "solver" and "failed" not in r]


def by_grid(rows, key, best):
    """Each grid's best value of ``key`` (``best``: min or max), coarsest grid first."""
    grids = sorted({r["grid"] for r in rows})
    return [best(r[key] for r in rows if r["grid"] == n) for n in grids]


@pytest.mark.e2e
def test_quick_writes_every_field(quick):
    result, out, folder = quick
    saved = json.loads(out.read_text())
    assert set(saved["problems"]) == {"kolmogorov", "ks", "euler-kh", "euler-ce-rm"}
    assert "interpolated spectrally" in saved["evaluation"]
    for name, problem in saved["problems"].items():
        rows = problem["rows"]
        assert rows and {r["kind"] for r in rows} == {"solver"}  # no --correctors given
        for row in rows:
            assert all(field in row for field in FIELDS), row
            assert row["model"] is None
        done = solver_rows(problem)
        assert len({r["grid"] for r in done}) >= 3
        reference = [r for r in done if (r["grid"], r["time_step"]) == (
            problem["reference"]["grid"], problem["reference"]["time_step"])]
        assert len(reference) == 1 and reference[0]["final_rel_l2"] == 0.0
        assert reference[0]["correlation_time"] == pytest.approx(problem["horizon"])
        for row in done:
            assert row["seconds"] > 0 and math.isfinite(row["final_rel_l2"])
            assert 0 <= row["correlation_time_95"] <= row["correlation_time"] <= \
                problem["horizon"] + 1e-9
            assert len(row["correlation_times"]) == problem["samples"]
            factor = problem["reference"]["grid"] / row["grid"]
            assert all(v == factor for k, v in row["coarsening"].items() if k != "t")
        assert (folder / f"correction_pareto_{name}.png").stat().st_size > 10_000
    assert result["problems"]["ks"]["rows"] == saved["problems"]["ks"]["rows"]


@pytest.mark.e2e
def test_finer_solver_grids_are_more_accurate(quick):
    for problem in quick[0]["problems"].values():
        errors = by_grid(solver_rows(problem), "final_rel_l2", min)
        assert all(fine < coarse for coarse, fine in zip(errors, errors[1:])), errors


@pytest.mark.e2e
def test_correlation_times_are_monotone_in_the_resolution(quick):
    for problem in quick[0]["problems"].values():
        rows = solver_rows(problem)
        for key in ("correlation_time", "correlation_time_95"):
            times = by_grid(rows, key, max)
            assert all(fine >= coarse for coarse, fine in zip(times, times[1:])), (key, times)
        for step in {r["time_step"] for r in rows}:  # at one step, grid by grid
            same = sorted((r for r in rows if r["time_step"] == step), key=lambda r: r["grid"])
            times = [r["correlation_time"] for r in same]
            assert times == sorted(times), (step, times)


@pytest.mark.e2e
def test_table_and_figures_from_the_json(quick, capsys):
    _, out, folder = quick
    bench_correction.main(["--table-only", "--out", str(out)])
    assert "(reference)" in capsys.readouterr().out
    (folder / "correction_pareto_ks.png").unlink()
    bench_correction.main(["--figures-only", "--out", str(out), "--images", str(folder)])
    assert (folder / "correction_pareto_ks.png").exists()


@pytest.fixture(scope="module")
def ks_evaluation():
    """The quick KS problem's held-out states and reference."""
    config = bench_correction.problem_config("ks", quick=True, samples=2, horizon=1.0)
    initial, _ = bench_correction.initial_states("ks", config)
    solver = bench_correction.make_solver("ks", config, *config["reference"])
    reference = solver.simulate(initial, 10)
    return Evaluation("ks", config, initial, reference, repeats=1, budget=0.0)


@pytest.mark.e2e
def test_a_corrector_that_corrects_nothing_scores_as_its_coarse_solver(ks_evaluation):
    """Any Stepper: here the coarse solver itself, stepping record by record (a corrected
    stepper whose correction is zero)."""
    coarse = bench_correction.make_solver("ks", ks_evaluation.config, 256, 0.01)
    corrected = corrected_row(ks_evaluation, coarse, grid=256, label="zero correction",
                              time_step=0.01)
    plain = solver_row(ks_evaluation, 256, 0.01)
    assert corrected["kind"] == "corrected" and corrected["coarsening"] == plain["coarsening"]
    assert corrected["final_rel_l2"] == pytest.approx(plain["final_rel_l2"], rel=1e-6)
    assert corrected["correlation_time"] == plain["correlation_time"]
    assert corrected["seconds"] > 0 and corrected["upfront_seconds"] is None


@pytest.mark.e2e
def test_a_trained_corrector_adds_a_judged_row(tmp_path):
    """--correctors RUN: a tiny KS corrector of the 512-point solver coarsened 4x in space."""
    from ssmpde.generation import generate
    from ssmpde.surrogates.train import TrainConfig, train

    data = tmp_path / "train.nc"
    generate("kuramoto-sivashinsky", num_samples=4, seed=0, out=data, progress=False,
             preset="lpsda", resolution=128, simulation_resolution=512, final_time=0.5)
    run = tmp_path / "corrected-4x1"
    train("lean-fno", data, out=run, preset="ks-corrector",
          model_overrides=dict(width=4, depth=1, modes=[8]),
          config=TrainConfig(epochs=1, batch_size=4, window=1, target="correction",
                             coarse="4x1"), progress=False)
    out = tmp_path / "correction.json"
    result = bench_correction.main(["--quick", "--problems", "ks", "--correctors", str(run),
                                    "--data-seconds", "2.5", "--out", str(out),
                                    "--images", str(tmp_path)])
    rows = result["problems"]["ks"]["rows"]
    (row,) = [r for r in rows if r["kind"] == "corrected"]
    assert row["label"] == "corrected 4x1 (lean-fno)" and row["model"] == "lean-fno"
    assert row["grid"] == 128 and row["coarsening"] == {"x": 4, "t": 2.0}
    assert all(field in row for field in FIELDS + ("speedup", "breakeven_rollouts"))
    assert row["upfront_seconds"] > 2.5  # the data's seconds and the training's
    assert math.isfinite(row["final_rel_l2"]) and row["seconds"] > 0
    with pytest.raises(SystemExit):  # a corrector of a problem not run: a usage error
        bench_correction.main(["--quick", "--problems", "kolmogorov", "--correctors",
                               str(run), "--out", str(out), "--images", str(tmp_path)])
    # committed correctors: a folder of runs holding only their weights, config and upfront
    # cost, evaluated again without training; the evaluation replaces the row of the same
    # run and keeps the rows of others
    committed = tmp_path / "committed" / "ks-lean-fno-4x1"
    committed.mkdir(parents=True)
    for name in ("config.json", "weights.safetensors"):
        shutil.copy(run / name, committed / name)
    (committed / "upfront.json").write_text(json.dumps({"data_seconds": 1.0,
                                                        "train_seconds": 2.0}))
    for _ in range(2):
        result = bench_correction.main(["--quick", "--problems", "ks", "--correctors",
                                        str(tmp_path / "committed"), "--out", str(out),
                                        "--images", str(tmp_path)])
        rows = [r for r in result["problems"]["ks"]["rows"] if r["kind"] == "corrected"]
        assert [r["run"] for r in rows] == ["corrected-4x1", "ks-lean-fno-4x1"]
        assert rows[1]["upfront_seconds"] == 3.0 and rows[1]["label"] == row["label"]
        assert json.loads(out.read_text())["problems"]["ks"]["rows"] == \
            result["problems"]["ks"]["rows"]
    with pytest.raises(SystemExit):  # a folder without runs
        bench_correction.main(["--quick", "--problems", "ks", "--correctors", str(data.parent
                               / "nothing-here"), "--out", str(out)])


ROWS = [  # a solver's curve: twice the time buys a longer correlation time
    {"kind": "solver", "seconds": 1.0, "correlation_time": 1.0},
    {"kind": "solver", "seconds": 2.0, "correlation_time": 3.0},
    {"kind": "solver", "seconds": 3.0, "correlation_time": 2.0},  # beaten: off the front
    {"kind": "solver", "seconds": 8.0, "correlation_time": 5.0},
    {"kind": "corrected", "seconds": 0.1, "correlation_time": 9.0},
]


def test_the_solver_front_and_its_cost_at_equal_accuracy():
    metric = "correlation_time"
    assert [r["seconds"] for r in solver_front(ROWS, metric)] == [1.0, 2.0, 8.0]
    assert equal_accuracy_seconds(ROWS, 3.0, metric) == pytest.approx(2.0)
    assert equal_accuracy_seconds(ROWS, 4.0, metric) == pytest.approx(4.0)  # halfway, log time
    assert equal_accuracy_seconds(ROWS, 0.5, metric) == 1.0  # the cheapest: an upper bound
    assert equal_accuracy_seconds(ROWS, 6.0, metric) is None  # no solver row is as accurate


def test_breakeven():
    assert breakeven(100.0, 1.0, 3.0) == 50  # 2 s saved per rollout
    assert breakeven(101.0, 1.0, 3.0) == 51
    assert breakeven(0.0, 1.0, 3.0) == 0
    assert breakeven(100.0, 3.0, 3.0) is None  # nothing saved: never
    assert breakeven(None, 1.0, 3.0) is None and breakeven(100.0, 1.0, None) is None


def test_judge_fills_the_corrected_rows():
    rows = [dict(r) for r in ROWS] + [
        {"kind": "corrected", "seconds": 1.0, "correlation_time": 4.0, "upfront_seconds": 30.0}]
    judge(rows, "correlation_time")
    first, second = rows[-2:]
    assert first["equal_accuracy_solver_seconds"] is None and first["speedup"] is None
    assert second["equal_accuracy_solver_seconds"] == pytest.approx(4.0)
    assert second["speedup"] == pytest.approx(4.0) and second["breakeven_rollouts"] == 10
    assert all("speedup" not in r for r in rows if r["kind"] == "solver")


def test_coarse_states_are_spectral_restrictions():
    rng = np.random.default_rng(0)
    x = np.arange(64) / 64
    field = np.sin(2 * np.pi * 3 * x) + 0.1 * rng.standard_normal(64)
    states = field[None, None]
    down = bench_correction.restrict(states, 16)
    back = bench_correction.to_grid(down[:, None], 64)[:, 0]
    modes = np.fft.rfft(back[0, 0])
    assert np.allclose(modes[:8], np.fft.rfft(field)[:8])  # the band the 16 points hold
    assert np.allclose(modes[8:], 0, atol=1e-12)


def test_upfront_seconds(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert bench_correction.upfront_seconds(run, 5.0) is None  # no training time known
    (run / "metrics.jsonl").write_text('{"epoch": 1, "seconds": 2.0}\n'
                                       '{"epoch": 2, "seconds": 3.0}\n')
    assert bench_correction.upfront_seconds(run, 5.0) == 10.0
    assert bench_correction.upfront_seconds(run) is None  # the data's seconds unknown
    (run / "upfront.json").write_text(json.dumps({"data_seconds": 1.5, "train_seconds": 4.0}))
    assert bench_correction.upfront_seconds(run, 5.0) == 5.5  # the run's own record first


def test_judge_names_the_solver_rows_that_dominate_and_judges_euler_by_error():
    rows = [
        {"kind": "solver", "label": "a", "seconds": 1.0, "final_rel_l2": 0.4,
         "correlation_time": 1.0},
        {"kind": "solver", "label": "b", "seconds": 8.0, "final_rel_l2": 0.1,
         "correlation_time": 1.0},
        {"kind": "corrected", "label": "c", "seconds": 2.0, "final_rel_l2": 0.2,
         "correlation_time": 1.0, "upfront_seconds": 40.0},
        {"kind": "corrected", "label": "d", "seconds": 2.0, "final_rel_l2": 0.5,
         "correlation_time": 1.0},
    ]
    judge(rows, "final_rel_l2")
    c, d = rows[2:]
    assert c["dominated_by"] == [] and d["dominated_by"] == ["a"]
    # the solver's error falls 4x (0.4 -> 0.1) as its time grows 8x; log-log, 0.2 is halfway:
    # 1 s * 8^(1/2)
    assert c["equal_accuracy_solver_seconds"] == pytest.approx(8 ** 0.5)
    assert c["speedup"] == pytest.approx(8 ** 0.5 / 2)
    assert c["breakeven_rollouts"] == math.ceil(40.0 / (8 ** 0.5 - 2))
    assert d["speedup"] == pytest.approx(0.5)  # the cheapest solver row is more accurate


def test_euler_states_are_restricted_and_compared_as_cell_averages():
    rng = np.random.default_rng(0)
    cells = rng.uniform(1.0, 2.0, (2, 5, 16, 16))
    down = bench_correction.pool(cells, 4)
    assert down.shape == (2, 5, 4, 4)
    np.testing.assert_allclose(down.mean(axis=(-2, -1)), cells.mean(axis=(-2, -1)))
    np.testing.assert_allclose(down[0, 0, 0, 0], cells[0, 0, :4, :4].mean())
    with pytest.raises(ValueError, match="does not pool onto 5 cells"):
        bench_correction.pool(cells, 5)


@pytest.mark.e2e
def test_an_euler_corrector_that_corrects_nothing_scores_as_its_coarse_solver():
    config = bench_correction.problem_config("euler-kh", quick=True)
    initial, _ = bench_correction.initial_states("euler-kh", config)
    solver = bench_correction.make_solver("euler-kh", config, *config["reference"])
    evaluation = Evaluation("euler-kh", config, initial, None, repeats=1, budget=0.0)
    evaluation.reference = evaluation.compared(solver.simulate(initial, 2))
    assert evaluation.reference.shape == (2, 3, 1, 8, 8)  # density, on the coarsest grid
    coarse = bench_correction.make_solver("euler-kh", config, 16, 0.4)
    corrected = corrected_row(evaluation, coarse, grid=16, label="zero correction",
                              time_step=0.4)
    plain = solver_row(evaluation, 16, 0.4)
    assert corrected["coarsening"] == plain["coarsening"] == {"y": 2, "x": 2, "t": 1.0}
    assert corrected["final_rel_l2"] == pytest.approx(plain["final_rel_l2"], rel=1e-12)
    assert 0 < plain["final_rel_l2"] < 0.05


def test_a_coarsened_kolmogorov_dataset_is_the_one_generated_on_that_grid(tmp_path):
    # train_correctors derives its 32² Kolmogorov data from the 64² file; the derived file
    # must be what generating with the 32² stored grid gives (spectral restriction twice is
    # one restriction), with the config to rebuild its coarse solver from.
    from benchmarks.train_correctors import coarsened_dataset
    from ssmpde.data import open_dataset
    from ssmpde.data.schema import config_of
    from ssmpde.generation import generate

    options = dict(num_samples=2, seed=0, preset="kolmogorov-re1000",
                   simulation_resolution=32, time_step=0.01, final_time=0.2,
                   record_interval=0.1, spin_up=0.1, spin_up_resolution=16,
                   downsampling="spectral", progress=False)
    generate("navier-stokes", out=tmp_path / "a16.nc", resolution=16, **options).close()
    generate("navier-stokes", out=tmp_path / "b8.nc", resolution=8, **options).close()
    coarsened_dataset(tmp_path / "a16.nc", tmp_path / "c8.nc", 8)
    with open_dataset(tmp_path / "b8.nc") as direct, open_dataset(tmp_path / "c8.nc") as derived:
        for name in ("vorticity", "forcing"):
            np.testing.assert_allclose(derived[name].values, direct[name].values, rtol=0,
                                       atol=1e-12 * float(np.abs(direct[name]).max()))
        np.testing.assert_array_equal(derived["x"].values, direct["x"].values)
        assert config_of(derived)["solver"] == config_of(direct)["solver"]
    strided = dict(options, downsampling="stride")
    generate("navier-stokes", out=tmp_path / "s16.nc", resolution=16, **strided).close()
    with pytest.raises(ValueError, match="not spectrally down-sampled"):
        coarsened_dataset(tmp_path / "s16.nc", tmp_path / "t8.nc", 8)


def test_concatenated_seeds_keep_every_trajectory(tmp_path):
    from benchmarks.train_correctors import concatenated_dataset
    from ssmpde.data import open_dataset
    from ssmpde.data.schema import config_of
    from ssmpde.generation import generate

    options = dict(num_samples=2, preset="kolmogorov-re1000", simulation_resolution=16,
                   resolution=8, time_step=0.01, final_time=0.1, record_interval=0.1,
                   progress=False)
    for seed in (0, 1):
        generate("navier-stokes", seed=seed, out=tmp_path / f"s{seed}.nc", **options).close()
    concatenated_dataset([tmp_path / "s0.nc", tmp_path / "s1.nc"], tmp_path / "both.nc")
    with open_dataset(tmp_path / "s0.nc") as a, open_dataset(tmp_path / "s1.nc") as b, \
            open_dataset(tmp_path / "both.nc") as both:
        np.testing.assert_array_equal(both["vorticity"].values,
                                      np.concatenate([a["vorticity"], b["vorticity"]]))
        assert list(both["sample"].values) == [0, 1, 2, 3]
        assert config_of(both)["seeds"] == [0, 1] and config_of(both)["num_samples"] == 4
    generate("navier-stokes", seed=2, out=tmp_path / "other.nc",
             **dict(options, viscosity=1e-3)).close()
    with pytest.raises(ValueError, match="different configurations"):
        concatenated_dataset([tmp_path / "s0.nc", tmp_path / "other.nc"], tmp_path / "x.nc")


# -- the result file: merged under its lock, judged over all rows at every write -------------
SETUP = {"label": "Kolmogorov flow", "horizon": 10.0, "record_interval": 0.1, "samples": 8,
         "seed": 1000, "reference": {"grid": 256, "time_step": 0.0025},
         "accuracy_metric": "correlation_time"}
PLAIN_64 = {"kind": "solver", "label": "64², Δt 0.025", "grid": 64, "time_step": 0.025,
            "seconds": 0.582, "correlation_time": 4.475, "final_rel_l2": 1.3281}
PLAIN_128 = {"kind": "solver", "label": "128², Δt 0.0125", "grid": 128, "time_step": 0.0125,
             "seconds": 6.158, "correlation_time": 8.575, "final_rel_l2": 0.8355}


def corrected(label, seconds, correlation_time, run=None):
    return {"kind": "corrected", "label": label, "grid": 64, "seconds": seconds,
            "run": run or label, "correlation_time": correlation_time, "final_rel_l2": 1.3}


def a_run(*rows, quick=False):
    """A result as one run of the benchmark makes it: one Kolmogorov problem."""
    return {"benchmark": "correction", "settings": {"quick": quick},
            "problems": {"kolmogorov": dict(SETUP, rows=[dict(r) for r in rows])}}


def assert_judged_over_all_rows(problem):
    solvers = [r for r in problem["rows"] if r["kind"] == "solver"]
    for row in (r for r in problem["rows"] if r["kind"] == "corrected"):
        assert row["dominated_by"] == [s["label"] for s in solvers
                                       if dominates(s, row, "correlation_time")], row


def test_a_row_added_after_a_judgement_is_judged_with_every_row(tmp_path):
    """Stale rows: a solver row that a later run adds dominates a corrected row written
    before it, and the file says so; a row measured again replaces its old self."""
    out = tmp_path / "correction.json"
    bench_correction.save(a_run(PLAIN_128, corrected("mine", 1.712, 3.29)), out)
    assert json.loads(out.read_text())["problems"]["kolmogorov"]["rows"][1]["dominated_by"] \
        == []
    saved = bench_correction.save(a_run(PLAIN_64), out)  # another run: the 64² solver row
    problem = json.loads(out.read_text())["problems"]["kolmogorov"]
    assert problem == saved["problems"]["kolmogorov"]
    assert [r["label"] for r in problem["rows"]] == ["128², Δt 0.0125", "mine",
                                                     "64², Δt 0.025"]
    assert problem["rows"][1]["dominated_by"] == ["64², Δt 0.025"]
    assert_judged_over_all_rows(problem)
    bench_correction.save(a_run(corrected("mine", 0.4, 4.6)), out)  # measured again
    problem = json.loads(out.read_text())["problems"]["kolmogorov"]
    assert len(problem["rows"]) == 3 and problem["rows"][1]["dominated_by"] == []
    assert_judged_over_all_rows(problem)
    # another setup (a longer horizon) replaces the problem; a quick run the whole file
    bench_correction.save({**a_run(PLAIN_64), "problems": {"kolmogorov": dict(
        SETUP, horizon=20.0, rows=[dict(PLAIN_64)])}}, out)
    assert len(json.loads(out.read_text())["problems"]["kolmogorov"]["rows"]) == 1
    bench_correction.save(a_run(PLAIN_128, quick=True), out)
    assert json.loads(out.read_text())["problems"]["kolmogorov"]["rows"][0]["label"] == \
        "128², Δt 0.0125"


def test_two_writers_at_once_keep_each_others_rows(tmp_path, monkeypatch):
    """Two runs saving into one file at the same time (threads here; each holds the file's
    write lock in turn): every row of both survives, judged over all of them. The read is
    slowed, so that writers without the lock would lose rows."""
    out = tmp_path / "correction.json"
    read = bench_correction._read_result

    def slow_read(path):
        saved = read(path)
        time.sleep(0.02)
        return saved

    monkeypatch.setattr(bench_correction, "_read_result", slow_read)
    bench_correction.save(a_run(PLAIN_64, PLAIN_128), out)
    start = threading.Barrier(2)
    errors = []

    def writer(name):
        try:
            start.wait()
            for k in range(5):
                bench_correction.save(a_run(corrected(f"{name} {k}", 0.5 + k, 4.0 + k)), out)
        except Exception as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    problem = json.loads(out.read_text())["problems"]["kolmogorov"]
    labels = sorted(r["label"] for r in problem["rows"] if r["kind"] == "corrected")
    assert labels == sorted(f"{name} {k}" for name in "ab" for k in range(5))
    assert_judged_over_all_rows(problem)
    assert not list(tmp_path.glob(".*"))  # no lock or temporary left behind


def test_rejudge_corrects_a_stale_file_without_running_anything(tmp_path, capsys):
    out = tmp_path / "correction.json"
    bench_correction.save(a_run(PLAIN_64, PLAIN_128, corrected("mine", 1.712, 3.29)), out)
    stale = json.loads(out.read_text())
    stale["problems"]["kolmogorov"]["rows"][2]["dominated_by"] = []  # as an old test left it
    stale["problems"]["kolmogorov"]["figure"] = "correction_pareto_kolmogorov.png"
    out.write_text(json.dumps(stale))
    saved = bench_correction.main(["--rejudge", "--out", str(out), "--images", str(tmp_path)])
    printed = capsys.readouterr().out
    assert "kolmogorov: mine (mine): dominated_by ['64², Δt 0.025']" in printed
    assert saved["problems"]["kolmogorov"]["rows"][2]["dominated_by"] == ["64², Δt 0.025"]
    assert json.loads(out.read_text()) == saved
    assert (tmp_path / "correction_pareto_kolmogorov.png").stat().st_size > 10_000


@pytest.mark.e2e
def test_rows_carry_the_final_error_of_every_sample(ks_evaluation):
    """The per-sample errors the paired interval of an error-judged problem (Euler) needs:
    their mean is the row's error, each is that sample's own relative L2."""
    from ssmpde.core import relative_l2

    row = solver_row(ks_evaluation, 128, 0.01)
    assert len(row["final_rel_l2s"]) == 2
    assert np.mean(row["final_rel_l2s"]) == pytest.approx(row["final_rel_l2"], rel=1e-5)
    frames = bench_correction.make_solver("ks", ks_evaluation.config, 128, 0.01).simulate(
        bench_correction.restrict(ks_evaluation.initial, 128), ks_evaluation.steps)
    second = relative_l2(bench_correction.to_grid(frames, 512)[1:, -1],
                         ks_evaluation.reference[1:, -1])
    assert row["final_rel_l2s"][1] == pytest.approx(float(second[0]), rel=1e-5)


def test_the_reference_is_cached_per_setup(tmp_path, monkeypatch):
    """A second run of the same setup reads the initial states and the reference instead of
    simulating them; another seed (or sample count) is another setup; the solver rows'
    grids are not part of it."""
    config = bench_correction.problem_config("ks", quick=True, samples=2, horizon=0.2)
    first = bench_correction.reference_run("ks", config, "cpu", tmp_path)
    assert len(list(tmp_path.glob("*.npz"))) == 1

    def no_simulation(*args, **kwargs):
        raise AssertionError("the cached reference was simulated again")

    monkeypatch.setattr(bench_correction, "initial_states", no_simulation)
    other_grids = dict(config, grids={64: [1e-2]})
    again = bench_correction.reference_run("ks", other_grids, "cpu", tmp_path)
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[2], first[2])
    assert again[3] == first[3] and again[1] == first[1]
    keys = {bench_correction.reference_key("ks", dict(config, **change))
            for change in ({}, {"seed": 7}, {"samples": 3}, {"grids": {}})}
    assert len(keys) == 3
    with pytest.raises(AssertionError, match="simulated again"):
        bench_correction.reference_run("ks", dict(config, seed=7), "cpu", tmp_path)


def test_an_error_judged_row_gets_its_paired_interval():
    """Euler's metric is the error at the horizon: the paired difference is oriented so that
    a positive value favours the corrected row (the plain row's error minus its own)."""
    rows = [dict(kind="solver", label="64²", seconds=0.5, final_rel_l2=0.01,
                 final_rel_l2s=[0.010, 0.011, 0.009, 0.010]),
            dict(kind="solver", label="128²", seconds=3.0, final_rel_l2=0.0025,
                 final_rel_l2s=[0.0024, 0.0026, 0.0025, 0.0025]),
            dict(kind="corrected", label="4x", seconds=0.6, final_rel_l2=0.0018,
                 final_rel_l2s=[0.0017, 0.0019, 0.0018, 0.0018])]
    judge(rows, "final_rel_l2")
    paired = rows[2]["paired"]
    assert paired["against"] == "128²" and paired["supported"]
    assert paired["difference"] == pytest.approx(0.0007) and paired["low"] > 0


def test_a_run_without_a_check_keeps_the_stored_one_naming_its_samples():
    """--no-check on another seed: the reference check measured before stays, saying which
    seed and samples it was measured on; a run that checks replaces it; another reference
    grid drops it."""
    stored = {"label": "p", "samples": 4, "seed": 1000, "reference": {"grid": 256,
              "time_step": 0.4}, "reference_check": {"grid": 512, "final_rel_l2": 0.01},
              "rows": []}
    new = dict(stored, samples=16, seed=5000, rows=[])
    del new["reference_check"]
    kept = bench_correction.merged_problem(stored, new)["reference_check"]
    assert kept == {"grid": 512, "final_rel_l2": 0.01, "seed": 1000, "samples": 4}
    checked = dict(new, reference_check={"grid": 512, "final_rel_l2": 0.02})
    assert bench_correction.merged_problem(stored, checked)["reference_check"][
        "final_rel_l2"] == 0.02
    other = dict(new, reference={"grid": 128, "time_step": 0.4})
    assert "reference_check" not in bench_correction.merged_problem(stored, other)
    same = dict(stored, rows=[])
    del same["reference_check"]
    assert bench_correction.merged_problem(stored, same)["reference_check"]["seed"] == 1000


def test_the_committed_correctors_load_as_their_problems_correctors():
    """benchmarks/correctors/: every run there loads without training, as a corrector of the
    problem and coarsening its README names (what --correctors benchmarks/correctors
    re-evaluates), and its recipe and upfront seconds are recorded."""
    from benchmarks.common import REPO

    folder = REPO / "benchmarks" / "correctors"
    runs = bench_correction.corrector_runs([folder])
    loaded = bench_correction.load_correctors(runs, None)
    assert {name: [stepper.record["correction"]["coarsening"] for _, stepper, _ in entries]
            for name, entries in loaded.items()} == {"kolmogorov": ["8x20"],
                                                     "euler-kh": ["4x1"]}
    for name, entries in loaded.items():
        for run, stepper, upfront in entries:
            bench_correction.check_corrector(stepper, bench_correction.problem_config(name),
                                             name)
            assert upfront and upfront > 0
            recipe = json.loads((run / "config.json").read_text())["train_config"]
            assert recipe["epochs"] >= 12 and run.name in (folder / "README.md").read_text()
