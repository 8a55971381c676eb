"""Hostile but realistic command lines: every one gets exit code 2, one line on stderr, no
traceback, and no file created or changed outside the intended output.

Runs in-process (``main(argv)``); the numeric options are also fuzzed with hypothesis.
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssmpde.cli import main
from ssmpde.data import DatasetFileError, load_dataset, open_dataset, save
from ssmpde.generation import generate
from ssmpde.surrogates.train import TrainConfig, train

BAD_NUMBERS = ["0", "-1", "nan", "inf", "-inf", "1e400", "fast", ""]
NS = dict(resolution=16, simulation_resolution=16, final_time=0.4, record_interval=0.1,
          time_step=0.01, viscosity=1e-3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    darcy, ns = root / "darcy.nc", root / "ns.nc"
    generate("darcy", num_samples=4, seed=0, out=darcy, resolution=9,
             simulation_resolution=17, progress=False)
    generate("navier-stokes", num_samples=3, seed=0, out=ns, progress=False, **NS)
    small = dict(width=8, depth=1, state_size=4)
    train("geomano", darcy, out=root / "darcy-run", preset="darcy", model_overrides=small,
          config=TrainConfig(epochs=1, batch_size=2), progress=False)
    train("geomano", ns, out=root / "ns-run", preset="navier-stokes", model_overrides=small,
          config=TrainConfig(epochs=1, batch_size=2, window=2), progress=False)
    corrupt = root / "corrupt.nc"
    shutil.copy(darcy, corrupt)
    raw = bytearray(corrupt.read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 2048] = os.urandom(2048)  # still opens; the values do not read
    corrupt.write_bytes(bytes(raw))
    return {"darcy": darcy, "ns": ns, "darcy-run": root / "darcy-run",
            "ns-run": root / "ns-run", "corrupt": corrupt, "root": root}


def snapshot(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.lstat().st_mtime_ns for p in sorted(root.rglob("*"))}


def run_bad(argv, capsys, root):
    before = snapshot(root)
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse: a command line it cannot parse
        status = exit_.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, (argv, status, err)
    assert len(lines) == 1, (argv, err)
    assert "Traceback" not in err and lines[0].startswith("ssmpde: error:"), err
    assert snapshot(root) == before, argv  # nothing created, changed or deleted
    return lines[0]


def assert_table(table, capsys, root, before_each=None):
    """Run every ``(id, argv, expected words, ...)`` row through :func:`run_bad`; report all
    failing rows at once. ``before_each(row)`` prepares a row (its environment)."""
    failures = []
    for row in table:
        name, argv, words = row[:3]
        if before_each is not None:
            before_each(row)
        try:
            line = run_bad(argv, capsys, root)
            assert words in line, (name, line)
        except AssertionError as error:
            failures.append(f"{name}: {error}")
    assert not failures, "\n".join(failures)


def cases(f):
    """(id, argv, expected words) of the bad-input table; ``f`` maps fixture names to paths."""
    d, ns, out = f["darcy"], f["ns"], f["root"] / "new"
    table = []
    for value in BAD_NUMBERS + ["1000000000000"]:
        table.append((f"generate-samples-{value}",
                      ["generate", "darcy", "--out", f"{out}.nc", "--samples", value], ""))
    for value in BAD_NUMBERS + ["100000"]:
        table.append((f"generate-resolution-{value}",
                      ["generate", "navier-stokes", "--out", f"{out}.nc", "--samples", "1",
                       "--resolution", value, "--simulation-resolution", value], ""))
    for option in ("viscosity", "time", "record-interval", "cfl", "alpha", "tau"):
        for value in ("0", "-1", "nan", "inf", "text"):
            table.append((f"generate-{option}-{value}",
                          ["generate", "navier-stokes", "--out", f"{out}.nc", "--samples", "1",
                           f"--{option}", value], ""))
    table += [
        ("generate-batch-0", ["generate", "darcy", "--out", f"{out}.nc", "--samples", "2",
                              "--batch-size", "0"], "batch_size"),
        ("generate-seed-neg", ["generate", "darcy", "--out", f"{out}.nc", "--samples", "2",
                               "--seed", "-1"], "seed"),
        ("generate-suffix", ["generate", "darcy", "--out", f"{out}.txt", "--samples", "2"],
         "suffix"),
        ("generate-no-dir", ["generate", "darcy", "--out", f"{out}/x/y.nc", "--samples", "2"],
         "does not exist"),
        ("generate-exists", ["generate", "darcy", "--out", d, "--samples", "2"], "exists"),
        ("generate-preset", ["generate", "darcy", "--out", f"{out}.nc", "--samples", "2",
                             "--preset", "nope"], "invalid choice"),
        ("generate-equation", ["generate", "heat", "--out", f"{out}.nc"], "invalid choice"),
    ]
    train_base = ["train", "geomano", "--data", d, "--out", out, "--no-progress",
                  "--model-option", "width=8", "--model-option", "depth=1"]
    ns_base = ["train", "geomano", "--data", ns, "--out", out, "--no-progress",
               "--model-option", "width=8", "--model-option", "depth=1"]
    invalid = {"epochs": ["0", "-1", "nan", "1.5", "x"], "batch-size": ["0", "-1", "x"],
               "lr": BAD_NUMBERS, "weight-decay": ["-1", "nan", "inf", "x"],
               "max-grad-norm": ["-1", "nan", "inf"], "gradient-loss-weight": ["-1", "nan", "inf"],
               "noise-std": ["-1", "nan", "inf"], "num-test": ["-1", "4", "x"],
               "seed": ["-1", "x"], "mode": ["sideways"], "schedule": ["linear"]}
    for option, values in invalid.items():
        for value in values:
            table.append((f"train-{option}-{value}", [*train_base, f"--{option}", value], ""))
    for option in ("window", "horizon"):
        for value in ("0", "-1", "1000", "x"):
            table.append((f"train-{option}-{value}", [*ns_base, f"--{option}", value], ""))
    for device in ("bogus", "cuda", "cuda:7", "meta"):
        table.append((f"train-device-{device}", [*train_base, "--device", device], "device"))
    table += [
        ("train-width-huge", [*train_base, "--model-option", "width=100000"], "parameters"),
        ("train-depth-0", [*train_base, "--model-option", "depth=0"], "depth"),
        ("train-channels", [*train_base, "--model-option", "in_channels=3"], "does not fit"),
        ("train-model", ["train", "geomamo", "--data", d, "--out", out], "geomano"),
        ("train-data-missing", [*train_base[:3], f"{out}.nc", *train_base[4:]], "no dataset"),
        ("train-out-is-data", ["train", "geomano", "--data", d, "--out", d], "inputs"),
        ("train-resume-empty", [*train_base, "--resume"], "nothing to resume"),
        ("train-resume-epochs", ["train", "geomano", "--data", d, "--out", f["darcy-run"],
                                 "--no-progress", "--resume", "--epochs", "3",
                                 "--model-option", "width=8", "--model-option", "depth=1",
                                 "--model-option", "state_size=4", "--batch-size", "2"],
         "epochs 1 (now 3)"),
        ("train-outputs-missing", [*train_base, "--outputs", "nope"], "both inputs and outputs"),
        ("train-outputs-unknown", [*train_base, "--inputs", "a", "--outputs", "nope"], "nope"),
        ("evaluate-batch-0", ["evaluate", f["darcy-run"], "--data", d, "--batch-size", "0"],
         "batch_size"),
        ("evaluate-out-is-data", ["evaluate", f["darcy-run"], "--data", d, "--out", d],
         "inputs"),
        ("evaluate-out-exists", ["evaluate", f["darcy-run"], "--data", d, "--out", ns],
         "exists"),
        ("evaluate-corrupt", ["evaluate", f["darcy-run"], "--data", f["corrupt"]], "corrupt"),
        ("evaluate-grid", ["evaluate", f["darcy-run"], "--data", ns], ""),
        ("evaluate-no-run", ["evaluate", f["root"], "--data", d], "not a checkpoint"),
        ("rollout-darcy-data", ["rollout", "--checkpoint", f["ns-run"], "--steps", "2",
                                "--schedule", "solver", "--data", d], "trajectories"),
        ("rollout-darcy-run", ["rollout", "--checkpoint", f["darcy-run"], "--steps", "2",
                               "--schedule", "solver"], "trajectories"),
        ("rollout-steps-0", ["rollout", "--checkpoint", f["ns-run"], "--steps", "0",
                             "--schedule", "solver"], "steps"),
        ("rollout-steps-huge", ["rollout", "--checkpoint", f["ns-run"], "--steps",
                                "1000000000000", "--schedule", "solver"], "steps"),
        ("rollout-schedule", ["rollout", "--checkpoint", f["ns-run"], "--steps", "2",
                              "--schedule", "model:3"], "schedule"),
        ("rollout-samples", ["rollout", "--checkpoint", f["ns-run"], "--steps", "2",
                             "--schedule", "solver", "--samples", "7:9"], "samples"),
        ("rollout-out-is-data", ["rollout", "--checkpoint", f["ns-run"], "--steps", "2",
                                 "--schedule", "solver", "--data", ns, "--out", ns], "inputs"),
        ("warm-start-samples-0", ["warm-start", f["darcy-run"], "--samples", "0"], "samples"),
        ("warm-start-samples-huge", ["warm-start", f["darcy-run"], "--samples", "10000000"],
         "samples"),
        ("warm-start-rtol", ["warm-start", f["darcy-run"], "--rtol", "2"], "rtol"),
        ("warm-start-ns", ["warm-start", f["ns-run"]], ""),
        ("info-missing", ["info", f"{out}.nc"], "no dataset"),
        ("info-directory", ["info", f["root"]], "zarr"),
    ]
    return table


def test_bad_input_table(files, capsys):
    assert_table(cases(files), capsys, files["root"])


def test_crafted_checkpoints_are_named_not_tracebacks(files, capsys, tmp_path):
    for key in ("task", "normalizers", "dataset", "model_config"):
        run = tmp_path / f"no-{key}"
        shutil.copytree(files["darcy-run"], run)
        record = json.loads((run / "config.json").read_text())
        del record[key]
        (run / "config.json").write_text(json.dumps(record))
        line = run_bad(["evaluate", run, "--data", files["darcy"]], capsys, tmp_path)
        assert f"'{key}' is missing" in line
    run = tmp_path / "truncated"
    shutil.copytree(files["darcy-run"], run)
    weights = run / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    line = run_bad(["evaluate", run, "--data", files["darcy"]], capsys, tmp_path)
    assert "unreadable checkpoint weights" in line
    line = run_bad(["train", "geomano", "--data", files["darcy"], "--out", run, "--resume",
                    "--no-progress"], capsys, tmp_path)
    assert "unreadable" in line or "damaged" in line


def test_toml_with_a_text_learning_rate(files, capsys, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[train]\nlr = "fast"\n')
    line = run_bad(["train", "geomano", "--data", files["darcy"], "--config", config, "--out",
                    tmp_path / "run"], capsys, tmp_path)
    assert "lr must be a number" in line


def test_an_existing_unrelated_directory_is_never_deleted(files, capsys, tmp_path):
    mine = tmp_path / "mine.zarr"
    mine.mkdir()
    (mine / "sentinel.txt").write_text("precious")
    for argv in (["generate", "darcy", "--out", mine, "--samples", "2", "--overwrite",
                  "--resolution", "9", "--simulation-resolution", "17", "--no-progress"],
                 ["evaluate", files["darcy-run"], "--data", files["darcy"], "--out", mine,
                  "--overwrite"]):
        line = run_bad(argv, capsys, tmp_path)
        assert "ssmpde did not write" in line
    assert (mine / "sentinel.txt").read_text() == "precious"


def test_evaluate_overwrites_its_own_output_only_when_asked(files, capsys, tmp_path):
    out = tmp_path / "pred.nc"
    args = ["evaluate", files["darcy-run"], "--data", files["darcy"], "--out", out]
    assert main([str(a) for a in args]) == 0
    first = out.stat().st_mtime_ns
    run_bad(args, capsys, tmp_path)
    assert main([str(a) for a in args] + ["--overwrite"]) == 0
    assert out.stat().st_mtime_ns != first


def test_object_arrays_are_refused_on_read(tmp_path):
    # A zarr (format 2) store whose metadata declares an object array: its values would be
    # unpickled on read, which can run code.
    store = tmp_path / "crafted.zarr"
    (store / "u").mkdir(parents=True)
    (store / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    (store / ".zattrs").write_text(json.dumps({"ssmpde_equation": "darcy"}))
    (store / "u" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|O", "compressor": None,
        "fill_value": None, "filters": [{"id": "pickle", "protocol": 5}], "order": "C",
        "dimension_separator": "."}))
    (store / "u" / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": ["sample"]}))
    with pytest.raises(DatasetFileError, match="object"):
        open_dataset(store, validate=False)


def test_interrupt_prints_a_message(monkeypatch, capsys, files):
    import ssmpde.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt()

    monkeypatch.setattr(cli, "_info", interrupted)
    assert main(["info", str(files["darcy"])]) == 130
    assert "ssmpde: interrupted" in capsys.readouterr().err


def test_internal_errors_exit_1_in_one_line(monkeypatch, capsys, files):
    import ssmpde.cli as cli

    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "_info", broken)
    assert main(["info", str(files["darcy"])]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "internal error (ZeroDivisionError" in lines[0]
    assert "--debug" in lines[0]
    with pytest.raises(ZeroDivisionError):
        main(["--debug", "info", str(files["darcy"])])


NON_NEGATIVE = ("weight-decay", "max-grad-norm", "gradient-loss-weight", "noise-std")


@settings(max_examples=40)
@given(option=st.sampled_from(("lr", *NON_NEGATIVE, "epochs", "batch-size", "num-test",
                               "seed")),
       value=st.one_of(st.floats(max_value=-1e-6, allow_infinity=True),
                       st.sampled_from(["nan", "inf", "NaN", "-inf", "1e999", "one", "--"]),
                       st.text(alphabet="abc!?", min_size=1, max_size=4)))
def test_fuzzed_numeric_training_options(option, value, files, capsys):
    text = value if isinstance(value, str) else repr(value)
    argv = ["train", "geomano", "--data", files["darcy"], "--out", files["root"] / "fuzz",
            "--no-progress", f"--{option}={text}"]
    run_bad(argv, capsys, files["root"])


@settings(max_examples=25)
@given(option=st.sampled_from(("samples", "batch-size", "seed", "resolution")),
       value=st.one_of(st.integers(max_value=-1), st.floats(allow_nan=True).map(repr),
                       st.sampled_from(["", "x", "1e999", "10**9"])))
def test_fuzzed_generation_options(option, value, files, capsys):
    argv = ["generate", "darcy", "--out", files["root"] / "fuzz.nc", "--samples", "2",
            f"--{option}={value}"]
    if option == "resolution":
        argv.append("--simulation-resolution=17")
    run_bad(argv, capsys, files["root"])
    np.testing.assert_equal(sorted(os.listdir(files["root"])).count("fuzz.nc"), 0)


def test_a_constant_target_field_is_refused(files, capsys, tmp_path):
    ds = load_dataset(files["darcy"])
    ds["u"] = ds["u"] * 0.0
    flat = tmp_path / "flat.nc"
    save(ds, flat)
    line = run_bad(["train", "geomano", "--data", flat, "--out", tmp_path / "run",
                    "--no-progress", "--model-option", "width=8", "--model-option", "depth=1"],
                   capsys, tmp_path)
    assert "u (= 0) never change" in line


# ------------------------------------------------------------------------------------------
# Disk space (issue 31): a run the disk cannot hold, and malformed --max-disk / SSMPDE_MAX_DISK
# ------------------------------------------------------------------------------------------

def disk_cases(f):
    """(id, argv, expected words, environment) of generate runs refused for their disk use."""
    out = f["root"] / "disk-new"
    darcy = ["generate", "darcy", "--resolution", "8", "--simulation-resolution", "29"]
    table = [
        # the run: 10**9 samples, hundreds of GB, refused before anything is written
        ("disk-huge-run", [*darcy, "--samples", "1000000000", "--out", f"{out}.nc"],
         "more disk space", {}),
        ("disk-huge-run-zarr", [*darcy, "--samples", "1000000000", "--out", f"{out}.zarr"],
         "more disk space", {}),
        ("disk-limit-too-small", [*darcy, "--samples", "100", "--out", f"{out}.nc",
                                  "--max-disk", "1K"], "more than the limit of", {}),
        ("disk-limit-env-too-small", [*darcy, "--samples", "100", "--out", f"{out}.nc"],
         "SSMPDE_MAX_DISK", {"SSMPDE_MAX_DISK": "10K"}),
        ("disk-env-malformed", [*darcy, "--samples", "1", "--out", f"{out}.nc"],
         "disk size", {"SSMPDE_MAX_DISK": "plenty"}),
    ]
    for value in ("0", "-1", "nan", "inf", "lots", ""):
        table.append((f"disk-max-disk-{value}", [*darcy, "--samples", "1", "--out",
                                                 f"{out}.nc", "--max-disk", value],
                      "disk size", {}))
    return table


def test_disk_cases_of_the_bad_input_table(files, capsys, monkeypatch):
    def environment(row):
        monkeypatch.delenv("SSMPDE_MAX_DISK", raising=False)
        for key, value in row[3].items():
            monkeypatch.setenv(key, value)

    assert_table(disk_cases(files), capsys, files["root"], before_each=environment)


# ------------------------------------------------------------------------------------------
# Escapes (round two): outputs that are not ssmpde's, runs that fail late on their own input,
# rollout outputs checked up front, invalid values, sizes past the estimate
# ------------------------------------------------------------------------------------------

def escape_cases(f):
    """(id, argv, expected words). The user's files are made in ``f["root"]`` itself: a
    command's lock comes and goes beside its output, which a subdirectory's time stamp
    would show."""
    d, ns, root = f["darcy"], f["ns"], f["root"]
    mine = {name: root / f"escape-{name}" for name in ("user.nc", "plain.zarr", "user.png",
                                                        "darcy-copy.nc", "ns-copy.nc")}
    if not mine["user.nc"].exists():
        mine["user.nc"].write_text("my notes")
        mine["plain.zarr"].write_text("not a store")
        mine["user.png"].write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 32)
        shutil.copy(d, mine["darcy-copy.nc"])
        shutil.copy(ns, mine["ns-copy.nc"])
        (root / ".escape-locked.nc.lock").mkdir()
    new = root / "escape-new"
    small = ["--resolution", "9", "--simulation-resolution", "17", "--no-progress"]
    ns_flags = ["--resolution", "16", "--simulation-resolution", "16", "--time", "0.4",
                "--record-interval", "0.1", "--time-step", "0.01", "--viscosity", "1e-3",
                "--no-progress"]
    rollout = ["rollout", "--checkpoint", f["ns-run"], "--steps", "2", "--schedule", "solver",
               "--coarse", "none"]
    train_base = ["train", "geomano", "--data", d, "--out", new, "--no-progress",
                  "--model-option", "width=8", "--model-option", "depth=1"]
    table = [
        ("overwrite-generate-user-nc", ["generate", "darcy", "--samples", "2", "--out",
                                        mine["user.nc"], "--overwrite", *small],
         "ssmpde did not write"),
        ("overwrite-generate-plain-zarr", ["generate", "darcy", "--samples", "2", "--out",
                                           mine["plain.zarr"], "--overwrite", *small],
         "ssmpde did not write"),
        ("overwrite-convert-user-nc", ["convert", d, mine["user.nc"], "--overwrite"],
         "ssmpde did not write"),
        ("overwrite-convert-plain-zarr", ["convert", d, mine["plain.zarr"], "--overwrite"],
         "ssmpde did not write"),
        ("overwrite-evaluate-training-data", ["evaluate", f["darcy-run"], "--data",
                                              mine["darcy-copy.nc"], "--out", d,
                                              "--overwrite"], "trained on"),
        ("overwrite-rollout-training-data", [*rollout, "--data", mine["ns-copy.nc"], "--out",
                                             ns, "--overwrite"], "trained on"),
        ("overwrite-rollout-user-png", [*rollout, "--plot", mine["user.png"], "--overwrite"],
         "ssmpde did not write"),
        ("rollout-plot-is-pareto", [*rollout, "--plot", f"{new}.png", "--pareto",
                                    f"{new}.png"], "--plot and --pareto both name"),
        ("rollout-out-is-plot", [*rollout, "--out", f"{new}.nc", "--plot", f"{new}.nc"],
         "figure"),
        ("rollout-pareto-format", [*rollout, "--pareto", f"{new}.nc"],
         "cannot write a figure as '.nc'"),
        ("rollout-plot-format", [*rollout, "--plot", f"{new}.txt"], "cannot write a figure"),
        ("rollout-out-format", [*rollout, "--out", f"{new}.png"], "cannot tell the format"),
        ("evaluate-out-format", ["evaluate", f["darcy-run"], "--data", d, "--out",
                                 f"{new}.txt"], "cannot tell the format"),
        ("generate-darcy-alpha-huge", ["generate", "darcy", "--samples", "2", "--out",
                                       f"{new}.nc", "--alpha", "1e30", *small], "alpha"),
        ("generate-ns-sigma-huge", ["generate", "navier-stokes", "--samples", "1", "--out",
                                    f"{new}.nc", "--sigma", "1e30", *ns_flags], "non-finite"),
        ("generate-ks-lmax-huge", ["generate", "kuramoto-sivashinsky", "--samples", "1",
                                   "--resolution", "32", "--simulation-resolution", "32",
                                   "--lmax", "1000000000", "--out", f"{new}.nc"],
         "choose lmax <= 16"),
        ("generate-lock-is-a-directory", ["generate", "darcy", "--samples", "2", "--out",
                                          root / "escape-locked.nc", *small], "cannot lock"),
        ("train-modes-huge", ["train", "fno", "--data", d, "--out", new / "deep" / "run",
                              "--no-progress", "--model-option", "modes=[1000,1000]"],
         "at most [9, 9]"),
        ("train-latent-grid-huge", [*train_base, "--model-option", "latent_grid=[100,100]"],
         "at most [9, 9]"),
        ("train-modes-bool", ["train", "fno", "--data", d, "--out", new, "--no-progress",
                              "--model-option", "modes=true"], "whole number"),
        ("train-width-overflow", [*train_base, "--model-option", "width=10000000000"],
         "parameters"),
        ("train-width-2**62", [*train_base, "--model-option", "width=4611686018427387904"],
         "parameters"),
        ("train-depth-absurd", [*train_base, "--model-option", "depth=100000000000"],
         "parameters"),
    ]
    for value in ("nan", "-1", "inf"):
        table.append((f"train-time-limit-{value}", [*train_base, f"--time-limit={value}"],
                      "time_limit"))
    return table


def test_escapes_table(files, capsys):
    assert_table(escape_cases(files), capsys, files["root"])
    assert (files["root"] / "escape-user.nc").read_text() == "my notes"
    assert (files["root"] / "escape-plain.zarr").read_text() == "not a store"


# ------------------------------------------------------------------------------------------
# Damaged and odd dataset files: missing and undecodable chunks, dimensions that cannot be
# read by name, files without samples. Every reader refuses them in one line (exit 2) and
# leaves nothing behind (a convert writes no partial target).
# ------------------------------------------------------------------------------------------

def _damage_copy(source: Path, target: Path, variable: str, chunk: str, how: str) -> Path:
    from ssmpde.data import convert

    convert(source, target)
    path = target / variable / chunk
    if how == "missing":
        path.unlink()
    elif how == "directory":
        shutil.rmtree(target / variable)
    elif how == "garbage":
        path.write_bytes(np.random.default_rng(0).bytes(200))
    else:  # truncated
        path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
    return target


@pytest.fixture(scope="module")
def damaged(files, tmp_path_factory):
    """Damaged copies of the table's Darcy and Navier-Stokes files, in a root of their own."""
    root = tmp_path_factory.mktemp("damaged")
    made = {"root": root}
    for how in ("missing", "directory", "garbage", "truncated"):
        made[f"darcy-{how}"] = _damage_copy(files["darcy"], root / f"darcy-{how}.zarr", "u",
                                            "0.0.0", how)
        made[f"ns-{how}"] = _damage_copy(files["ns"], root / f"ns-{how}.zarr", "vorticity",
                                         "0.0.0.0", how)
    made["darcy-last"] = _damage_copy(files["darcy"], root / "darcy-last.zarr", "u", "3.0.0",
                                      "garbage")
    ns = load_dataset(files["ns"])
    odd = ns.assign(vorticity=ns["vorticity"].rename({"y": "dim_2", "x": "dim_3"}))
    made["ns-odd"] = save(odd, root / "ns-odd.nc", validate=False)
    made["darcy-empty"] = save(load_dataset(files["darcy"]).isel(sample=slice(0, 0)),
                               root / "darcy-empty.nc")
    made["ns-empty"] = save(ns.isel(sample=slice(0, 0)), root / "ns-empty.nc")
    corrupt = root / "ns-corrupt.nc"
    raw = bytearray(files["ns"].read_bytes())
    middle = len(raw) // 2
    raw[middle:middle + 2048] = np.random.default_rng(2).bytes(2048)
    corrupt.write_bytes(bytes(raw))
    made["ns-corrupt"] = corrupt
    made["darcy-corrupt"] = files["corrupt"]
    return made


def integrity_cases(f, d):
    """(id, argv, expected words) for damaged inputs; ``d`` maps names to damaged files."""
    out = d["root"] / "new"
    small = ["--no-progress", "--model-option", "width=8", "--model-option", "depth=1"]
    table = []
    words = {"missing": "missing chunk", "directory": "all 4 chunks are missing",
             "garbage": "corrupt", "truncated": "corrupt", "corrupt": "corrupt"}
    for how, word in words.items():
        darcy = d[f"darcy-{how}"]
        table += [
            (f"info-darcy-{how}", ["info", darcy], word),
            (f"train-darcy-{how}", ["train", "geomano", "--data", darcy, "--out", out, *small],
             word),
            (f"evaluate-darcy-{how}", ["evaluate", f["darcy-run"], "--data", darcy], word),
            (f"convert-darcy-{how}", ["convert", darcy, f"{out}.nc"], word),
            # the corrupt netCDF file does not open at all: nothing inside it to list
            (f"check-darcy-{how}", ["info", "--check", "--no-progress", darcy],
             "corrupt" if how == "corrupt" else "damaged chunk"),
        ]
        if how == "directory":
            continue  # the Navier-Stokes store has 3 samples: its own words below
        ns = d[f"ns-{how}"]
        table += [
            (f"info-ns-{how}", ["info", ns], word),
            (f"train-ns-{how}", ["train", "geomano", "--data", ns, "--out", out, "--window",
                                 "2", *small], word),
            (f"evaluate-ns-{how}", ["evaluate", f["ns-run"], "--data", ns], word),
            (f"convert-ns-{how}", ["convert", ns, f"{out}.zarr"], word),
            (f"rollout-ns-{how}", ["rollout", "--checkpoint", f["ns-run"], "--data", ns,
                                   "--steps", "2", "--schedule", "solver", "--samples", "0:3",
                                   "--coarse", "none"], word),
        ]
    table += [
        # the damaged sample is held out: it is read after the first epoch, at the first test
        ("train-darcy-test-sample", ["train", "geomano", "--data", d["darcy-last"], "--out",
                                     out, "--num-test", "1", "--epochs", "1", *small],
         "at sample 3 (chunk '3.0.0')"),
        ("rollout-ns-directory", ["rollout", "--checkpoint", f["ns-run"], "--data",
                                  d["ns-directory"], "--steps", "2", "--schedule", "solver"],
         "all 3 chunks are missing"),
        ("train-ns-odd", ["train", "geomano", "--data", d["ns-odd"], "--out", out, "--window",
                          "2", *small], "which is which cannot be told by name"),
        ("evaluate-ns-odd", ["evaluate", f["ns-run"], "--data", d["ns-odd"]], "rename"),
        ("rollout-ns-odd", ["rollout", "--checkpoint", f["ns-run"], "--data", d["ns-odd"],
                            "--steps", "2", "--schedule", "solver"], "rename"),
        ("convert-ns-odd", ["convert", d["ns-odd"], f"{out}.zarr"], "rename"),
        ("evaluate-empty", ["evaluate", f["darcy-run"], "--data", d["darcy-empty"]],
         "holds no samples"),
        ("train-empty", ["train", "geomano", "--data", d["darcy-empty"], "--out", out, *small],
         "holds no samples"),
        ("train-empty-test", ["train", "geomano", "--data", f["darcy"], "--test-data",
                              d["darcy-empty"], "--out", out, *small], "holds no samples"),
        ("rollout-empty", ["rollout", "--checkpoint", f["ns-run"], "--data", d["ns-empty"],
                           "--steps", "2", "--schedule", "solver"], "holds no samples"),
    ]
    return table


def test_damaged_inputs_table(files, damaged, capsys):
    assert_table(integrity_cases(files, damaged), capsys, damaged["root"])


def test_check_of_intact_files_exits_0(files, capsys):
    for path in (files["darcy"], files["ns"]):
        assert main(["info", "--check", "--no-progress", str(path)]) == 0
        assert "check: all" in capsys.readouterr().out


def test_a_state_stored_transposed_evaluates_and_rolls_out_as_stored_by_name(files, tmp_path):
    from ssmpde.coupling.run import run_rollout
    from ssmpde.surrogates.train import evaluate

    ns = load_dataset(files["ns"])
    stored = ns.assign(vorticity=ns["vorticity"].transpose("sample", "time", "x", "y"))
    transposed = save(stored, tmp_path / "ns-xy.nc", validate=False)
    assert evaluate(files["ns-run"], transposed) == evaluate(files["ns-run"], files["ns"])
    rows = {path: run_rollout(files["ns-run"], steps=2, schedules=["surrogate"], data=path,
                              coarse=[]) for path in (files["ns"], transposed)}
    errors = {path: [r["final_rel_l2"] for r in result] for path, result in rows.items()}
    assert errors[transposed] == errors[files["ns"]]


# ------------------------------------------------------------------------------------------
# Clusters: --scheduler addresses are checked before dask sees them (a client built half-way
# from a bad one blocked the exit for minutes; tests/test_hangs.py runs them as processes),
# --workers must fit the machine
# ------------------------------------------------------------------------------------------

def cluster_cases(f):
    from ssmpde.threads import cores

    generate_argv = ["generate", "darcy", "--out", f["root"] / "new.zarr", "--samples", "2",
                     "--resolution", "9", "--simulation-resolution", "17", "--no-progress"]
    rollout_argv = ["rollout", "--checkpoint", f["ns-run"], "--steps", "4", "--schedule",
                    "parareal:2"]  # valid but for the cluster options
    addresses = [("http://localhost:8786", "unknown scheme http://"),
                 ("tcp://localhost", "has no port"), ("bogus", "has no port"),
                 ("tls://localhost:8786", "needs a TLS configuration"),
                 ("inproc://x", "inproc://HOST/PID/N"), ("", "empty address"),
                 ("localhost:99999", "not in 1..65535"), ("tcp://:8786", "names no host"),
                 ("tcp://host:port", "not a number")]
    table = [(f"generate-scheduler-{address or 'empty'}",
              [*generate_argv, "--scheduler", address], words)
             for address, words in addresses]
    table += [(f"rollout-scheduler-{address or 'empty'}",
               [*rollout_argv, "--scheduler", address], words)
              for address, words in addresses[:3] + addresses[5:6]]
    too_many = "more than this machine can run: at most"
    for workers in (str(cores() + 1), "1000000000"):
        table.append((f"generate-workers-{workers}", [*generate_argv, "--workers", workers],
                      too_many))
        table.append((f"rollout-workers-{workers}", [*rollout_argv, "--workers", workers],
                      too_many))
    table.append(("rollout-workers-0", [*rollout_argv, "--workers", "0"], "workers must be"))
    table.append(("rollout-workers-and-scheduler",
                  [*rollout_argv, "--workers", "1", "--scheduler", "local"], "not both"))
    return table


def test_bad_cluster_input_table(files, capsys):
    assert_table(cluster_cases(files), capsys, files["root"])


def test_too_little_memory_for_one_worker_is_refused(files, capsys, monkeypatch):
    import distributed.system

    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", 100 * 2 ** 20)  # as a cgroup
    for command in (["generate", "darcy", "--out", files["root"] / "new.zarr", "--samples",
                     "2", "--resolution", "9", "--simulation-resolution", "17"],
                    ["rollout", "--checkpoint", files["ns-run"], "--steps", "4", "--schedule",
                     "parareal:2"]):
        line = run_bad([*command, "--workers", "1"], capsys, files["root"])
        assert "a local dask cluster needs about 384 MiB a worker process" in line, line
        assert "run without --workers" in line


# ------------------------------------------------------------------------------------------
# Hostile JSON in a run's config.json and a correction cache's manifest: one error naming the
# file (ssmpde.core.decode_json), never an internal error (RecursionError) or Python's advice
# on long integers; a crafted task is refused before anything of its size is allocated
# ------------------------------------------------------------------------------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _crafted_run(source: Path, run: Path, change) -> Path:
    shutil.copytree(source, run)
    config = run / "config.json"
    if callable(change):
        record = json.loads(config.read_text())
        change(record)
        config.write_text(json.dumps(record))
    else:
        config.write_text(change)
    return run


def json_cases(f, root):
    ns, run = f["ns"], f["ns-run"]
    text = (run / "config.json").read_text()
    long_epoch = text.replace('"epoch": 1', '"epoch": ' + "1" * 5000)
    assert long_epoch != text

    def task(**values):
        return lambda record: record["task"].update(values)

    def more_means(record):
        record["normalizers"]["fields"]["mean"].append(0.0)

    crafted = {"deep": (DEEP_JSON, "nested too deeply"),
               "long-number": (long_epoch, "number too long"),
               "not-object": ("[1]", "must hold a JSON object, got array"),
               "window-text": (task(window="2"), "task 'window' must be int, got str"),
               "window-0": (task(window=0), "task 'window' must be at least 1"),
               "window-true": (task(window=True), "task 'window' must be int, got bool"),
               "horizon-float": (task(horizon=1.5), "task 'horizon' must be int, got float"),
               "grid-3d": (task(grid=[16, 16, 16]), "'grid' must hold one or two positive"),
               "grid-0": (task(grid=[0, 16]), "'grid' must hold one or two positive"),
               "dt-nan": (task(dt=float("nan")), "'dt' must be a finite number"),
               "inputs-numbers": (task(inputs=[1]), "'inputs' must hold variable names"),
               "unknown-key": (task(stride=2), "unknown key 'stride'"),
               "means": (more_means, "'mean' must hold 1 values")}
    table = []
    for name, (change, words) in crafted.items():
        path = _crafted_run(run, root / f"run-{name}", change)
        table.append((f"evaluate-{name}", ["evaluate", path, "--data", ns], words))
        if name in ("deep", "long-number"):
            table.append((f"resume-{name}", ["train", "geomano", "--data", ns, "--out", path,
                                             "--resume", "--no-progress"], words))
        if name in ("window-0", "deep"):
            table.append((f"rollout-{name}", ["rollout", "--checkpoint", path, "--steps", "2",
                                              "--schedule", "surrogate"], words))
    # A correction run's cache whose manifest is damaged: named, with the fix.
    manifests = {"invalid": ("{bad", "is not valid JSON"),
                 "deep": (DEEP_JSON, "nested too deeply"),
                 "long-number": ('{"digest": ' + "1" * 5000 + "}", "number too long"),
                 "array": ("[]", "must hold a JSON object, got array"),
                 "digest-number": ('{"digest": 5}', "'digest' must be a JSON string"),
                 "blocks-array": ('{"digest": "x", "blocks": [1]}', "'blocks' must map")}
    for name, (content, words) in manifests.items():
        out = root / f"corrector-{name}"
        manifest = out / "correction_cache" / "train" / "manifest.json"
        manifest.parent.mkdir(parents=True)
        manifest.write_text(content)
        table.append((f"cache-manifest-{name}",
                      ["train", "geomano", "--data", ns, "--out", out, "--no-progress",
                       "--model-option", "width=8", "--model-option", "depth=1", "--window",
                       "1", "--target", "correction", "--coarse", "1x2"],
                      str(manifest)))
        table.append((f"cache-manifest-{name}-words", table[-1][1], words))
    return table


def test_hostile_json_and_crafted_tasks_are_named(files, capsys, tmp_path):
    assert_table(json_cases(files, tmp_path), capsys, tmp_path)


HUGE_WINDOW = """
import resource, sys
import psutil
import ssmpde.surrogates.train  # torch and the rest, before the limit
from ssmpde.cli import main

process = psutil.Process()
# A regression that builds window-sized lists or frames hits MemoryError (exit 2, 'out of
# memory') under this limit instead of eating the machine's memory.
resource.setrlimit(resource.RLIMIT_AS, (process.memory_info().vms + 2 ** 31,
                                        resource.getrlimit(resource.RLIMIT_AS)[1]))
sys.exit(main(sys.argv[1:]))
"""


def test_a_crafted_window_is_refused_before_it_is_allocated(files, tmp_path):
    import subprocess
    import sys

    run = _crafted_run(files["ns-run"], tmp_path / "huge-window",
                       lambda record: record["task"].update(window=10 ** 9))
    done = subprocess.run([sys.executable, "-c", HUGE_WINDOW, "evaluate", str(run), "--data",
                           str(files["ns"])], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"ssmpde: error: checkpoint config {run / 'config.json'}: "
                               "its task (window 1000000000"), lines[0]
    assert "for one sample, more than the limit" in lines[0]


def foreign_file_cases(root: Path):
    """(id, argv, words, environment) of PDEBench and Well files that must not read as data,
    written under ``root``; an outside probe's findings."""
    import h5py
    import xarray as xr

    from ssmpde.data import build_dataset, sample_coordinate, spatial_coordinate, time_coordinate
    from ssmpde.data.formats import the_well

    def coordinates(f, nx, nt):
        f["x-coordinate"] = ((np.arange(nx) + 0.5) / nx).astype(np.float32)
        f["t-coordinate"] = (np.arange(nt + 1) * 0.1).astype(np.float32)

    with h5py.File(root / "cut.hdf5", "w") as f:  # samples 2, 3 never written
        tensor = f.create_dataset("tensor", shape=(4, 11, 64), dtype=np.float32,
                                  chunks=(1, 11, 64))
        tensor[0:2] = 1.0
        coordinates(f, 64, 11)
    for name, frames, scales in (("ragged.h5", (3, 5), (1, 1)), ("grids.h5", (4, 4), (1, 2))):
        with h5py.File(root / name, "w") as f:
            for index, (nt, scale) in enumerate(zip(frames, scales)):
                group = f.create_group(f"{index:04d}")
                group["data"] = np.random.default_rng(index).random((nt, 8, 8, 1),
                                                                    dtype=np.float32)
                group["grid/x"] = np.linspace(0, scale, 8, dtype=np.float32)
                group["grid/y"] = np.linspace(0, 1, 8, dtype=np.float32)
                group["grid/t"] = np.linspace(0, 1, nt, dtype=np.float32)
    with h5py.File(root / "huge.hdf5", "w") as f:  # 10⁹ samples declared in ~2 KB
        f.create_dataset("tensor", shape=(10 ** 9, 11, 64), dtype=np.float32,
                         chunks=(1, 11, 64))
        coordinates(f, 64, 11)
    with h5py.File(root / "rank2.hdf5", "w") as f:
        f["tensor"] = np.ones((5, 16), dtype=np.float32)
        f["x-coordinate"] = np.arange(16, dtype=np.float32)
    with h5py.File(root / "bool.hdf5", "w") as f:
        f["tensor"] = np.arange(3 * 5 * 16).reshape(3, 5, 16) % 3 == 0
        coordinates(f, 16, 5)
    with h5py.File(root / "inf.hdf5", "w") as f:
        f["tensor"] = np.where(np.arange(4 * 5 * 16).reshape(4, 5, 16) % 7, 1.0,
                               np.inf).astype(np.float32)
        coordinates(f, 16, 5)
    rng = np.random.default_rng(0)
    ds = build_dataset(
        {"u": xr.DataArray(rng.standard_normal((3, 4, 8)), dims=("sample", "time", "x"),
                           attrs={"long_name": "u", "units": "1", "role": "state"})},
        coords={"sample": sample_coordinate(3), "time": time_coordinate(np.arange(4.0)),
                "x": spatial_coordinate("x", np.arange(8.0) / 8)},
        equation="test", config={}, title="t", references="none", solver="none")
    the_well.export(ds, root / "nan_well.hdf5")
    with h5py.File(root / "nan_well.hdf5", "a") as f:
        f.attrs["n_trajectories"] = np.nan
    the_well.export(ds, root / "cut_well")
    cut = root / "cut_well" / "data" / "train" / "test.hdf5"
    cut.write_bytes(cut.read_bytes()[:cut.stat().st_size // 2])
    out = root / "out"
    train = ["train", "geomano", "--preset", "1d", "--out", out, "--no-progress",
             "--model-option", "width=8", "--model-option", "depth=1", "--window", "2",
             "--batch-size", "1", "--num-test", "1", "--data"]
    memory = {"SSMPDE_MAX_MEMORY": "1G"}
    return [
        ("unwritten-info", ["info", root / "cut.hdf5"], "'tensor' (samples 2..3) was never "
         "written (2 chunks without storage)", {}),
        ("unwritten-check", ["info", "--check", root / "cut.hdf5"], "has 2 damaged chunks", {}),
        ("unwritten-train", [*train, root / "cut.hdf5"], "was never written", {}),
        ("unwritten-convert", ["convert", root / "cut.hdf5", f"{out}.nc"], "was never written",
         {}),
        ("ragged-convert", ["convert", root / "ragged.h5", f"{out}.nc"],
         "sample group '0001' holds data of shape [5, 8, 8, 1]", {}),
        ("ragged-train", [*train, root / "ragged.h5"], "one number of frames", {}),
        ("grids-convert", ["convert", root / "grids.h5", f"{out}.nc"],
         "another grid/x than the group '0000'", {}),
        ("huge-info", ["info", root / "huge.hdf5"], "declares 1000000000 samples", memory),
        ("huge-check", ["info", "--check", root / "huge.hdf5"], "damaged chunk", memory),
        ("rank2-info", ["info", root / "rank2.hdf5"], "PDEBench 1D files hold tensor "
         "[N, nt, nx]", {}),
        ("bool-train", [*train, root / "bool.hdf5"], "'tensor' holds booleans", {}),
        ("inf-train-one-line", [*train, root / "inf.hdf5"], "NaN or inf", {}),
        ("well-nan-trajectories", ["info", root / "nan_well.hdf5"],
         f"'{root / 'nan_well.hdf5'}': its n_trajectories attribute is nan", {}),
        ("well-truncated-split", ["info", root / "cut_well"],
         f"cannot read the Well file '{cut}'", {}),
        ("dtype-for-pdebench", ["convert", root / "rank2.hdf5", f"{out}.hdf5", "--to",
                                "pdebench", "--dtype", "float32"],
         "the pdebench format does not take a dtype", {}),
    ]


def test_foreign_files_that_are_no_data_are_one_line(capsys, tmp_path, monkeypatch):
    pytest.importorskip("h5py")
    table = foreign_file_cases(tmp_path)

    def environment(row):
        monkeypatch.delenv("SSMPDE_MAX_MEMORY", raising=False)
        for key, value in row[3].items():
            monkeypatch.setenv(key, value)

    assert_table(table, capsys, tmp_path, before_each=environment)


def test_a_rollout_on_data_of_another_generator_is_one_line_unless_allowed(files, capsys,
                                                                           tmp_path):
    """A surrogate trained on ν = 1e-3 rolled out on data of ν = 2e-3: refused in one line
    naming the viscosity; ``--allow-mismatch`` makes it a warning (a deliberate transfer)."""
    other = tmp_path / "ns-nu2e-3.nc"
    generate("navier-stokes", num_samples=1, seed=0, out=other, progress=False,
             **{**NS, "viscosity": 2e-3})
    argv = ["rollout", "--checkpoint", files["ns-run"], "--data", other, "--steps", "1",
            "--schedule", "solver", "--coarse", "none"]
    line = run_bad(argv, capsys, tmp_path)
    assert "viscosity 0.001 in training, 0.002 in the data" in line
    assert "--allow-mismatch" in line
    from ssmpde.coupling.run import GeneratorMismatchWarning

    with pytest.warns(GeneratorMismatchWarning, match="viscosity 0.001 in training"):
        assert main([str(a) for a in argv] + ["--allow-mismatch"]) == 0


# ------------------------------------------------------------------------------------------
# Round four (issue 53): an outside probe of main. Narrowing conversions that would write inf,
# damaged correction caches, headers that declare unbounded work, the xarray engines' guards,
# messages that leaked Python's or numpy's words.
# ------------------------------------------------------------------------------------------

def _tiny_trajectories(values=None):
    """A valid 1D dataset of 4 frames of 8 points: ``u`` holds ``values`` ``[sample, 4, 8]``
    (default: 2 random samples)."""
    import xarray as xr

    from ssmpde.data import build_dataset, sample_coordinate, spatial_coordinate, time_coordinate

    if values is None:
        values = np.random.default_rng(0).standard_normal((2, 4, 8))
    return build_dataset(
        {"u": xr.DataArray(values, dims=("sample", "time", "x"),
                           attrs={"long_name": "u", "units": "1", "role": "state"})},
        coords={"sample": sample_coordinate(len(values)),
                "time": time_coordinate(np.arange(4.0)),
                "x": spatial_coordinate("x", np.arange(8.0) / 8)},
        equation="test", config={}, title="t", references="none", solver="none")


def _beyond_float32(root: Path) -> Path:
    """A 1D dataset whose state reaches 1e39, past float32's range (3.4e38)."""
    return save(_tiny_trajectories(np.linspace(-1, 1, 2 * 4 * 8).reshape(2, 4, 8) * 1e39),
                root / "beyond-float32.nc")


def narrowing_cases(root: Path):
    """(id, argv, words, environment): a narrowing conversion checks the range first and
    refuses, naming the variable and its largest magnitude (it wrote inf with exit 0)."""
    big, out = _beyond_float32(root), root / "narrowed"
    words = "'u' holds values up to 1e+39 in magnitude, beyond the range of float32"
    return [
        ("narrow-well-float32", ["convert", big, out, "--to", "the-well", "--dtype",
                                 "float32"], words, {}),
        ("narrow-well-file-float32", ["convert", big, f"{out}.hdf5", "--to", "the-well",
                                      "--dtype", "float32"], words, {}),
        ("narrow-pdebench", ["convert", big, f"{out}.hdf5", "--to", "pdebench"], words, {}),
        ("narrow-netcdf-float32", ["convert", big, f"{out}.nc", "--dtype", "float32"], words,
         {}),
        ("narrow-zarr-float32", ["convert", big, f"{out}.zarr", "--dtype", "float32"], words,
         {}),
    ]


def test_round_four_narrowing(capsys, tmp_path):
    pytest.importorskip("h5py")
    assert_table(narrowing_cases(tmp_path), capsys, tmp_path)


def test_convert_dtype_to_our_own_formats(files, tmp_path):
    """--dtype is offered for every target that takes it, our own formats included."""
    from ssmpde.data import convert

    for suffix in ("nc", "zarr"):
        result = convert(files["ns"], tmp_path / f"ns32.{suffix}", dtype="float32")
        assert any("written as float32" in note for note in result.notes), result.notes
        with open_dataset(result.target) as ds, open_dataset(files["ns"]) as source:
            assert ds["vorticity"].dtype == np.float32
            assert ds["time"].dtype == source["time"].dtype  # coordinates keep theirs
            np.testing.assert_array_equal(ds["vorticity"].values,
                                          source["vorticity"].values.astype(np.float32))


DAMAGED_CACHE = """
import json, os, resource, shutil, sys, warnings
import numpy as np
import psutil
from ssmpde.surrogates.correction import coarse_predictions

data, reference = sys.argv[1], sys.argv[2]
resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + 2 ** 30,
                                        resource.getrlimit(resource.RLIMIT_AS)[1]))
expected = coarse_predictions(data, "1x2", reference).values
good = os.path.join(reference, "block_00000.npy")


def sparse(path):
    with open(path, "wb") as f:
        f.truncate(20 * 2 ** 30)


damages = {"dev-zero": lambda path: os.symlink("/dev/zero", path), "fifo": os.mkfifo,
           "sparse-20GB": sparse, "link-to-a-good-copy": lambda path: os.symlink(good, path),
           "short": lambda path: open(path, "wb").write(open(good, "rb").read()[:-4])}
report = {}
for name, damage in damages.items():
    cache = f"{reference}-{name}"
    shutil.copytree(reference, cache, symlinks=True)
    os.remove(os.path.join(cache, "block_00000.npy"))
    damage(os.path.join(cache, "block_00000.npy"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = coarse_predictions(data, "1x2", cache)
    report[name] = {"warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
                    "computed": result.computed,
                    "same": bool(np.array_equal(result.values, expected)),
                    "regular": os.path.isfile(os.path.join(cache, "block_00000.npy"))
                               and not os.path.islink(os.path.join(cache, "block_00000.npy"))}
for name, damage in {"manifest-fifo": os.mkfifo,
                     "manifest-dev-zero": lambda path: os.symlink("/dev/zero", path)}.items():
    cache = f"{reference}-{name}"
    os.mkdir(cache)
    damage(os.path.join(cache, "manifest.json"))
    try:
        coarse_predictions(data, "1x2", cache)
    except ValueError as error:
        report[name] = str(error)
print(json.dumps(report))
"""


def test_a_damaged_correction_cache_block_is_checked_before_it_is_read(files, tmp_path):
    """A cache block replaced by a link to /dev/zero (read until memory ran out), a FIFO (waited
    on forever) or a 20 GB sparse file (read whole) is recomputed from its type and size alone,
    with one DamagedCacheWarning; run in a process under a memory limit and a timeout."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", DAMAGED_CACHE, str(files["ns"]),
                           str(tmp_path / "cache")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    why = {"dev-zero": "it is a symbolic link", "fifo": "it is not a regular file",
           "sparse-20GB": f"it holds {20 * 2 ** 30} bytes, not the",
           "link-to-a-good-copy": "it is a symbolic link", "short": "bytes, not the"}
    for name, words in why.items():
        case = report[name]
        assert case["computed"] == [0] and case["same"] and case["regular"], (name, case)
        assert len(case["warnings"]) == 1, (name, case)
        assert case["warnings"][0].startswith("DamagedCacheWarning: the correction cache "
                                              "block"), (name, case)
        assert words in case["warnings"][0], (name, case)
    for name in ("manifest-fifo", "manifest-dev-zero"):  # refused, with the fix
        manifest = f"{tmp_path / 'cache'}-{name}/manifest.json"
        assert report[name].startswith(f"{manifest}: it is "), report[name]
        assert "the cache is damaged; remove" in report[name]


def test_a_damaged_cache_notice_is_one_ssmpde_line(files, tmp_path):
    """The notice of a recomputed block reads as the command line's other notices: one
    ``ssmpde: warning:`` line (it was Python's UserWarning, with file, line and source)."""
    import warnings

    from ssmpde.cli import _format_warning
    from ssmpde.surrogates.correction import coarse_predictions

    cache = tmp_path / "cache"
    coarse_predictions(files["ns"], "1x2", cache)
    block = cache / "block_00000.npy"
    raw = bytearray(block.read_bytes())
    raw[-1] ^= 0xFF
    block.write_bytes(bytes(raw))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coarse_predictions(files["ns"], "1x2", cache)
    assert len(caught) == 1
    text = _format_warning(caught[0].message, caught[0].category, caught[0].filename,
                           caught[0].lineno)
    assert text.count("\n") == 1 and text.startswith(
        f"ssmpde: warning: the correction cache block {block} is damaged (its SHA-256 "
        "differs from the one in the manifest): computing it again"), text



# Hang- and memory-prone rows run in one process of their own, each through main() as the
# command line runs it, under a memory limit (2 GiB over what the imports took) and a timeout:
# a regression fails the test instead of eating the machine or blocking the suite.
ISOLATED = """
import contextlib, io, json, os, resource, sys
import psutil
import ssmpde.surrogates.train  # torch and the rest, before the limit
from ssmpde.cli import main

resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + 2 ** 31,
                                        resource.getrlimit(resource.RLIMIT_AS)[1]))


def through_engine(engine, path):
    # xr.open_dataset(path, engine=engine): what it raised, or whether it gave what
    # ssmpde.data.open_dataset gives (before validation)
    import xarray as xr
    from ssmpde.data import open_dataset
    try:
        with xr.open_dataset(path, engine=engine) as theirs:
            with open_dataset(path, validate=False) as ours:
                same = theirs.load().identical(ours.load())
        return {"status": 0, "same": same, "err": ""}
    except Exception as error:
        return {"status": 2, "type": type(error).__name__, "err": str(error)}


results = []
for argv, environment in json.loads(sys.stdin.read()):
    os.environ.pop("SSMPDE_MAX_MEMORY", None)
    os.environ.update(environment)
    if argv[0] == "--engine":
        results.append(through_engine(argv[1], argv[2]))
        continue
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
    results.append({"status": status, "err": err.getvalue(), "out": out.getvalue()[-2000:]})
print(json.dumps(results))
"""


def run_isolated(rows, timeout: float = 120) -> list[dict]:
    """``[(argv, environment)]`` run one after the other in a fresh process (see ISOLATED):
    each row's exit status, stderr and the end of its stdout. An argv ``["--engine", NAME,
    PATH]`` opens PATH with ``xr.open_dataset(PATH, engine=NAME)`` instead: what it raised
    (``type``, ``err``) or whether it gave what :func:`ssmpde.data.open_dataset` gives
    (``same``)."""
    import subprocess
    import sys

    payload = json.dumps([([str(a) for a in argv], environment) for argv, environment in rows])
    done = subprocess.run([sys.executable, "-c", ISOLATED], input=payload, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def isolated_failures(table, results: list[dict]) -> list[str]:
    """What went wrong with the rows ``(id, argv, words, environment)`` that
    :func:`run_isolated` ran (``results``, in order): words None for a command that must
    succeed (exit 0, nothing on stderr), else the one-line refusal of :func:`run_bad` (exit 2,
    one ``ssmpde: error:`` line holding the words)."""
    failures = []
    for (name, _, words, _), result in zip(table, results):
        lines = [line for line in result["err"].splitlines() if line.strip()]
        if words is None:
            ok = result["status"] == 0 and not lines
        else:
            ok = (result["status"] == 2 and len(lines) == 1
                  and lines[0].startswith("ssmpde: error:") and words in lines[0])
        if not ok:
            failures.append(f"{name}: exit {result['status']}, stderr {result['err']!r}")
    return failures


def declared_work_cases(root: Path):
    """(id, argv, words or None, environment): headers that declare unbounded work. A file of
    2¹⁶ tiny samples, every chunk written (one dask task and one Python step a sample made
    `info` take minutes and gigabytes); chunks that decompress to more than memory holds (a
    compressed file of kilobytes; each read decompresses the chunk whole)."""
    import h5py

    from ssmpde.data.formats import the_well

    many, count = root / "many.hdf5", 2 ** 16
    with h5py.File(many, "w") as f:
        tensor = f.create_dataset("tensor", shape=(count, 2, 4), dtype=np.float32,
                                  chunks=(count, 2, 4), compression="gzip")
        pattern = np.random.default_rng(0).random((8, 2, 4), dtype=np.float32)
        tensor[...] = np.tile(pattern, (count // 8, 1, 1))
        f["x-coordinate"] = ((np.arange(4) + 0.5) / 4).astype(np.float32)
        f["t-coordinate"] = (np.arange(3) * 0.1).astype(np.float32)
    big = root / "big-chunk.hdf5"  # one chunk of 64 MiB, stored in about 100 KB
    with h5py.File(big, "w") as f:
        tensor = f.create_dataset("tensor", shape=(16, 8, 2 ** 17), dtype=np.float32,
                                  chunks=(16, 8, 2 ** 17), compression="gzip",
                                  compression_opts=1)
        tensor[...] = 0.5
        f["x-coordinate"] = np.arange(2 ** 17, dtype=np.float32)
        f["t-coordinate"] = (np.arange(9) * 0.1).astype(np.float32)
    well = root / "big-chunk-well.hdf5"  # a field of 256 bytes in chunks of 128 MiB
    the_well.export(_tiny_trajectories(), well)
    with h5py.File(well, "a") as f:
        attrs = dict(f["t0_fields/u"].attrs)
        del f["t0_fields/u"]
        field = f["t0_fields"].create_dataset("u", shape=(2, 4, 8), maxshape=(None, 4, 8),
                                              chunks=(2 ** 20, 4, 8), dtype=np.float64,
                                              compression="gzip")
        field[...] = 1.0
        field.attrs.update(attrs)
    out = root / "out"
    train = ["train", "geomano", "--preset", "1d", "--out", out, "--no-progress",
             "--model-option", "width=8", "--model-option", "depth=1", "--window", "1",
             "--epochs", "1", "--data"]
    limit = {"SSMPDE_MAX_MEMORY": "32M"}
    chunk = "declares chunks of [16, 8, 131072] values in 'tensor'"
    return [
        ("many-info", ["info", many], None, {}),
        ("many-check", ["info", "--check", "--no-progress", many], None, {}),
        ("many-convert", ["convert", many, root / "many.nc"], None, {}),
        ("big-chunk-info", ["info", big], chunk, limit),
        ("big-chunk-train", [*train, big], chunk, limit),
        ("big-chunk-convert", ["convert", big, f"{out}.nc"], chunk, limit),
        ("big-chunk-well-info", ["info", well], "declares chunks of [1048576, 4, 8] values "
         "in t0_fields/u", limit),
    ]


def hostile_path_cases(root: Path):
    """(id, argv, words, environment): paths that hold no dataset. A FIFO is refused, never
    waited on; a symbolic link that loops or leads nowhere is named as one (it gave Python's
    '[Errno 2]' or '[Errno 40]')."""
    fifo, loop, dangling = root / "pipe.hdf5", root / "loop.hdf5", root / "dangling.nc"
    os.mkfifo(fifo)
    os.symlink(root / "loop-b.hdf5", loop)
    os.symlink(loop, root / "loop-b.hdf5")
    os.symlink(root / "nowhere.nc", dangling)
    out = root / "out"
    cases = []
    for what, path, words in (("fifo", fifo, "is not a regular file (a FIFO"),
                              ("loop", loop, "is a symbolic link that leads back to itself"),
                              ("dangling", dangling, "is a symbolic link to")):
        cases += [(f"{what}-info", ["info", path], words, {}),
                  (f"{what}-train", ["train", "geomano", "--data", path, "--out", out,
                                     "--no-progress"], words, {}),
                  (f"{what}-convert", ["convert", path, f"{out}.nc"], words, {})]
    return cases


def _opened_paths(table) -> dict[Path, dict]:
    """The inputs the rows of ``table`` open that are in a foreign format or hold no file or
    directory (a FIFO, a link that leads nowhere), each with its row's environment."""
    from ssmpde.data import formats

    opened: dict[Path, dict] = {}
    for row in table:
        for arg in row[1]:
            if not isinstance(arg, Path) or not (arg.exists() or arg.is_symlink()):
                continue
            odd = not (arg.is_file() or arg.is_dir())
            if odd or formats.sniff(arg) is not None:
                opened.setdefault(arg, row[3] if len(row) > 3 else {})
    return opened


def _engine_rows(table, first: int):
    """The rows of :func:`run_isolated` that open every input of ``table``'s rows
    (:func:`_opened_paths`) with ``ssmpde info`` and with its engine (both engines for a path
    of no format), and ``(path, engine, info row, engine row)`` for each, counting rows from
    ``first``."""
    from ssmpde.data import formats

    rows, expected = [], []
    for path, environment in _opened_paths(table).items():
        module = formats.sniff(path) if path.is_file() or path.is_dir() else None
        rows.append((["info", path], environment))
        info_row = first + len(rows) - 1
        for engine in [module.NAME] if module is not None else ["pdebench", "the-well"]:
            rows.append((["--engine", engine, path], environment))
            expected.append((path, engine, info_row, first + len(rows) - 1))
    return rows, expected


def _engine_failures(expected, results: list[dict]) -> list[str]:
    """Where info refused a path, its engine must refuse it with the same message; where info
    read it, the engine must give what open_dataset gives."""
    failures = []
    for path, engine, info_row, engine_row in expected:
        info, theirs = results[info_row], results[engine_row]
        if info["status"] == 0:
            ok = theirs["status"] == 0 and theirs["same"]
        else:
            said = info["err"].strip().removeprefix("ssmpde: error: ")
            ok = theirs["status"] == 2 and " ".join(theirs["err"].split()) == said
        if not ok:
            failures.append(f"{path.name} ({engine}): info {info}, engine {theirs}")
    return failures


def test_hostile_files_and_paths_also_through_the_xarray_engines(tmp_path):
    """In one process of their own, under a memory limit and a timeout (a regression fails
    here instead of eating the machine or blocking the suite): the declared-work and
    hostile-path rows through main(); then every file the foreign-file, declared-work,
    hostile-path and message rows open, opened with ``xr.open_dataset(path, engine=...)``:
    where ``ssmpde info`` refuses it the engine refuses it with the same message (the same
    guards: a FIFO blocked the engine forever, sizes went unchecked), and where info reads it
    the engine gives what open_dataset gives. A path of no format goes through both
    engines."""
    pytest.importorskip("h5py")
    for name in ("work", "paths", "foreign", "messages"):
        (tmp_path / name).mkdir()
    commands = [*declared_work_cases(tmp_path / "work"),
                *hostile_path_cases(tmp_path / "paths")]
    unused = {"ns": tmp_path / "no-ns.nc", "euler": tmp_path / "no-euler.nc"}  # not opened
    opened = [*commands, *foreign_file_cases(tmp_path / "foreign"),
              *message_cases(unused, tmp_path / "messages")]
    rows, expected = _engine_rows(opened, first=len(commands))
    before = snapshot(tmp_path / "paths")
    results = run_isolated([(argv, env) for _, argv, _, env in commands] + rows, timeout=150)
    failures = isolated_failures(commands, results) + _engine_failures(expected, results)
    assert len(expected) >= 15 and not failures, "\n".join(failures)
    assert snapshot(tmp_path / "paths") == before  # the refused commands wrote nothing

def _pdebench_with_metadata(source: Path, target: Path, change) -> Path:
    """A PDEBench export of ``source`` whose ``ssmpde_metadata`` JSON ``change`` edits."""
    import netCDF4

    from ssmpde.data import convert

    convert(source, target, to="pdebench")
    with netCDF4.Dataset(target, "a") as nc:
        meta = json.loads(nc.getncattr("ssmpde_metadata"))
        change(meta)
        nc.setncattr_string("ssmpde_metadata", json.dumps(meta))
    return target


def message_cases(f, root: Path):
    """(id, argv, words): inputs whose refusal reached the user in Python's or numpy's words
    ('internal error (AttributeError)', '[Errno 17] File exists', a broadcast error) or blamed
    the wrong thing, and a run refused after its work had begun."""
    import shutil as shell

    import h5py

    from ssmpde.data.formats import the_well

    tiny = save(_tiny_trajectories(), root / "tiny.nc")
    meta_changes = {
        "coords-array": (lambda m: m.update(coords=[]), "'coords' must be a JSON object, got "
                         "array"),
        "variable-number": (lambda m: m["variables"].update(u=5), "variables 'u' must hold a "
                            "JSON object, got integer"),
        "dims-number": (lambda m: m["variables"]["u"].update(dims=3), "variables 'u': 'dims' "
                        "must be a JSON array, got integer"),
        "axes-text": (lambda m: m["variables"]["u"].update(axes=["0", "1", "2"]),
                      "'axes' must hold integers"),
        "coord-attrs-array": (lambda m: m["coords"]["x"].update(attrs=[]), "coords 'x': "
                              "'attrs' must be a JSON object, got array"),
    }
    table = []
    for name, (change, words) in meta_changes.items():
        path = _pdebench_with_metadata(tiny, root / f"meta-{name}.hdf5", change)
        table.append((f"pdebench-meta-{name}", ["info", path], words))
    short = root / "short-field.hdf5"  # the field one frame short of its header's time axis
    the_well.export(_tiny_trajectories(), short)
    with h5py.File(short, "a") as file:
        attrs = dict(file["t0_fields/u"].attrs)
        del file["t0_fields/u"]
        file["t0_fields"].create_dataset("u", data=np.ones((2, 3, 8)))
        file["t0_fields/u"].attrs.update(attrs)
    looped = root / "looped-split"  # a Well directory whose valid split is a symlink loop
    the_well.export(_tiny_trajectories(np.random.default_rng(1).standard_normal((4, 4, 8))),
                    looped)
    shell.rmtree(looped / "data" / "valid")
    os.symlink(looped / "data" / "valid", looped / "data" / "valid")
    out = root / "new"
    train_1d = ["train", "geomano", "--preset", "1d", "--out", out, "--no-progress",
                "--window", "1", "--epochs", "1", "--model-option", "width=8", "--data"]
    for name, path, words in (("well-short-field", short, "holds an array of shape [2, 3, 8], "
                               "but the file's n_trajectories, dimensions/time and grid make "
                               "it [2, 4, 8]"),
                              ("well-looped-split", looped, "is a symbolic link that leads "
                               "back to itself")):
        table += [(f"{name}-info", ["info", path], words),
                  (f"{name}-train", [*train_1d, path], words),
                  (f"{name}-convert", ["convert", path, f"{out}.nc"], words)]
    correction = ["train", "geomano", "--data", f["ns"], "--no-progress", "--model-option",
                  "width=8", "--model-option", "depth=1", "--window", "1", "--target",
                  "correction", "--coarse", "1x2", "--out"]
    for name, blocking in (("cache-file", "correction_cache"),
                           ("cache-split-file", "correction_cache/train")):
        run = root / f"run-{name}"
        (run / blocking).parent.mkdir(parents=True, exist_ok=True)
        (run / blocking).write_text("in the way")
        table.append((name, [*correction, run], f"'{run / blocking}' is not a directory, but "
                      "the correction cache"))
    small = ["--samples", "1", "--resolution", "32", "--simulation-resolution", "32",
             "--out", f"{out}.nc", "--no-progress"]
    stiff = "of the stiffest mode is"
    table += [
        ("allen-cahn-diffusivity-1e300", ["generate", "allen-cahn", *small, "--diffusivity",
                                          "1e300"], stiff),
        ("allen-cahn-domain-1e-300", ["generate", "allen-cahn", *small, "--domain-length",
                                      "1e-300"], stiff),
        ("burgers-viscosity-1e300", ["generate", "burgers", *small, "--viscosity", "1e300"],
         stiff),
        ("kdv-domain-1e-300", ["generate", "kdv", *small, "--domain-length", "1e-300"], stiff),
        ("ks-domain-1e-300", ["generate", "kuramoto-sivashinsky", *small, "--domain-length",
                              "1e-300"], stiff),
        ("allen-cahn-preset", ["generate", "allen-cahn", *small, "--preset", "nope"],
         "allen-cahn has no presets (got 'nope')"),
        ("euler-source-correction", ["train", "geomano", "--data", f["euler"], "--out", out,
                                     "--no-progress", "--model-option", "width=8",
                                     "--window", "1", "--target", "correction", "--coarse",
                                     "2x1", "--correction-mode", "source", "--num-test", "1"],
         "no differentiable step for 'euler'"),
    ]
    return table


@pytest.fixture(scope="module")
def euler(files):
    """A tiny Euler dataset stored at half its simulation grid (a 2x1 coarsening steps it)."""
    path = files["root"] / "euler.nc"
    if not path.exists():
        generate("euler", num_samples=3, seed=0, out=path, progress=False, resolution=16,
                 simulation_resolution=32, final_time=0.04, record_interval=0.01)
    return path


def test_messages_round_four(files, euler, capsys, tmp_path):
    pytest.importorskip("h5py")
    assert_table(message_cases({**files, "euler": euler}, tmp_path), capsys, tmp_path)


def test_every_generate_option_has_its_own_help():
    """Allen-Cahn's options shared their help (a config docstring's grouped entry,
    'final_time, record_interval, time_step : float', became three copies of one text)."""
    from ssmpde.cli import _build_parser
    from ssmpde.solvers.base import list_solvers

    parser = _build_parser()
    generate_parser = parser._subparsers._group_actions[0].choices["generate"]
    equations = generate_parser._subparsers._group_actions[0].choices
    repeated = {}
    for name in list_solvers():
        helps = [action.help for group in equations[name]._action_groups
                 if group.title and "options" in group.title and group.title != "options"
                 for action in group._group_actions]
        texts = [h.rsplit(" [default:", 1)[0] for h in helps]
        if len(set(texts)) != len(texts):
            repeated[name] = sorted({t for t in texts if texts.count(t) > 1})
    assert not repeated, repeated
