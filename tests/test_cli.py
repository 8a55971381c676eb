"""The ssmpde command line: generate, info and models, including its error messages."""

import inspect
import re

import numpy as np
import pytest

from ssmpde.cli import main
from ssmpde.data import config_of, open_dataset

SMALL = ["--resolution", "16", "--simulation-resolution", "32", "--time", "1",
         "--record-interval", "0.5", "--time-step", "0.01", "--no-progress"]


def test_generate_then_info(tmp_path, capsys):
    out = tmp_path / "ns.nc"
    status = main(["generate", "navier-stokes", "--samples", "2", "--viscosity", "1e-3",
                   "--seed", "0", "--out", str(out), *SMALL])
    assert status == 0
    with open_dataset(out) as ds:
        assert ds.vorticity.shape == (2, 3, 16, 16)
        assert config_of(ds)["solver"]["viscosity"] == 1e-3
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    for word in ("vorticity", "sample", "navier-stokes", "viscosity"):
        assert word in text


def test_viscosity_range_and_preset(tmp_path):
    out = tmp_path / "tv.nc"
    status = main(["generate", "navier-stokes", "--preset", "torus-vis", "--samples", "2",
                   "--viscosity", "1e-4:1e-3", "--out", str(out), *SMALL])
    assert status == 0
    with open_dataset(out) as ds:
        nu = ds.viscosity.values
        assert np.all((nu >= 1e-4) & (nu <= 1e-3)) and nu[0] != nu[1]
        assert ds.forcing_amplitude.shape == (2, 2, 6)


def test_help_explains_every_option(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "navier-stokes", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--viscosity", "--time", "--resolution", "--simulation-resolution",
                 "--forcing", "--time-stepping", "--cfl", "--record-interval"):
        assert flag in text
    assert "non-dimensional" in text and "Kinematic viscosity" in text


@pytest.mark.parametrize("extra, message", [
    (["--viscosity", "-1"], "viscosity"),
    (["--viscosity", "0"], "viscosity"),
    (["--resolution", "24"], "divisor"),
    (["--forcing", "kolmogorov-flow"], "unknown forcing"),
])
def test_bad_physics_prints_one_clear_message(tmp_path, capsys, extra, message):
    out = tmp_path / "ns.nc"
    status = main(["generate", "navier-stokes", "--samples", "1", "--out", str(out),
                   *SMALL, *extra])
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_and_unknown_equation(tmp_path, capsys):
    status = main(["generate", "navier-stokes", "--samples", "1",
                   "--out", str(tmp_path / "nope" / "ns.nc"), *SMALL])
    assert status == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "navier-stoke", "--samples", "1", "--out", "x.nc"])
    assert exit_info.value.code == 2
    assert "navier-stokes" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"not a netcdf file\n", b"\x89HDF\r\n\x1a\n" + bytes(64)])
def test_info_on_a_corrupt_file_is_one_clear_message(tmp_path, capsys, content):
    bad = tmp_path / "bad.nc"
    bad.write_bytes(content)
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.nc" in err and "Traceback" not in err


def test_info_on_a_missing_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "none.nc")]) == 2
    assert "none.nc" in capsys.readouterr().err


def test_generate_darcy(tmp_path, capsys):
    out = tmp_path / "darcy.nc"
    status = main(["generate", "darcy", "--samples", "2", "--resolution", "11",
                   "--simulation-resolution", "41", "--seed", "0", "--out", str(out),
                   "--no-progress"])
    assert status == 0
    with open_dataset(out) as ds:
        assert ds.a.shape == ds.u.shape == (2, 11, 11)
        assert float(ds.u.min()) >= 0.0
    capsys.readouterr()
    status = main(["generate", "darcy", "--samples", "1", "--resolution", "12",
                   "--out", str(tmp_path / "bad.nc"), "--no-progress"])
    assert status == 2
    assert "multiple of resolution - 1" in capsys.readouterr().err


def test_models_lists_presets_with_parameter_counts(capsys):
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "| geomano | darcy | 1,074,267 |" in text
    assert "| geomano | navier-stokes | 8,100,865 |" in text
    assert "| fno | darcy |" in text
    assert main(["models", "--describe", "geomano"]) == 0
    text = capsys.readouterr().out
    assert "geomano preset 'darcy': 1,074,267 parameters" in text
    assert '"correction": "0011"' in text and '"correction": "learnable"' in text


def test_models_unknown_name(capsys):
    assert main(["models", "--describe", "geomamba"]) == 2
    assert "Did you mean 'geomano'" in capsys.readouterr().err


def _every_command() -> list[list[str]]:
    """Every command line that has its own --help: the commands and generate's equations."""
    import argparse

    from ssmpde.cli import _build_parser

    def children(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices
        return {}

    commands = []
    for name, parser in children(_build_parser()).items():
        commands.append([name])
        commands += [[name, child] for child in children(parser)]
    return commands


def _python_names_with_other_flags() -> set[str]:
    """The Python spellings (``final_time``, ``num_samples``) of options whose flag is spelled
    otherwise (--time/--final-time, --samples): a help text names the flag, never these."""
    import dataclasses

    from ssmpde.generation import generate
    from ssmpde.solvers.base import get_solver_class, list_solvers
    from ssmpde.surrogates.train import TrainConfig, train

    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for solver in list_solvers():
        names |= {f.name for f in dataclasses.fields(get_solver_class(solver).Config)}
    names |= set(inspect.signature(generate).parameters)
    names |= set(inspect.signature(train).parameters)
    return {name for name in names if "_" in name}


@pytest.mark.parametrize("command", _every_command(), ids=" ".join)
def test_help_is_plain_text_with_flag_spellings(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for markup in (":meth:", ":func:", ":class:", ":attr:", ":mod:", ":data:", "``"):
        assert markup not in text, f"reStructuredText {markup!r} in {command} --help"
    # A placeholder says what to give (N, FLOAT, PATH, LOW:HIGH ...): never a bare VALUE,
    # nor the internal destination (TRAIN__EPOCHS).
    assert not re.search(r"(?<![=\w])VALUE\b", text), text
    assert "__" not in text
    python_names = sorted(name for name in _python_names_with_other_flags()
                          if re.search(rf"(?<![\w-]){name}\b", text))
    assert not python_names, f"{command} --help names {python_names}: use the flags"


def test_rollout_help_lists_every_registered_schedule(capsys):
    from ssmpde.coupling.schedules import list_schedules

    with pytest.raises(SystemExit):
        main(["rollout", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    entry = text.rsplit("--schedule SCHEDULE ", 1)[1].split(" --", 1)[0]
    for cls in list_schedules():
        # ssmpde's own have a summary; one registered by other code (a test's) may not
        if cls.__module__ == "ssmpde.coupling.schedules" or cls.summary:
            assert cls.summary and f"{cls.syntax} ({cls.summary})" in entry, (cls.name, entry)
        else:
            assert cls.syntax in entry and f"{cls.syntax} ()" not in entry, (cls.name, entry)


@pytest.mark.parametrize("equation", ["navier-stokes", "burgers", "kuramoto-sivashinsky"])
def test_a_viscosity_range_is_described_once_as_it_is_typed(equation, capsys):
    with pytest.raises(SystemExit):
        main(["generate", equation, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    entry = text.rsplit("--viscosity ", 1)[1].split(" --", 1)[0]  # the option, not the usage
    assert entry.startswith("FLOAT|LOW:HIGH "), entry
    assert "pair" not in entry and "(low, high)" not in entry
    assert entry.count("LOW:HIGH") == 2  # the metavar, and the one description


@pytest.mark.parametrize("rank, printed", [(None, True), ("0", True), ("1", False)])
def test_train_prints_its_result_on_rank_zero_only(monkeypatch, capsys, tmp_path, rank, printed):
    # Under torchrun every rank runs the command; its last line must appear once. torchrun
    # tells a process its rank through RANK (the process group is gone when train returns).
    import ssmpde.surrogates.train as train_module

    monkeypatch.setattr(train_module, "train", lambda *args, **kwargs: {"epoch": 1})
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)
    assert main(["train", "fno", "--data", str(tmp_path / "d.nc"),
                 "--out", str(tmp_path / "run")]) == 0
    assert ("trained fno into" in capsys.readouterr().out) == printed


def test_a_correction_checks_the_model_options_before_any_coarse_prediction(
        tmp_path, monkeypatch, capsys):
    # The coarse predictions of a correction run take a coarse solve of every stored frame
    # (hours at benchmark sizes): options the data cannot take are refused before them.
    import ssmpde.surrogates.correction_training as correction_training

    data = tmp_path / "ns.nc"
    assert main(["generate", "navier-stokes", "--samples", "2", "--out", str(data),
                 *SMALL]) == 0

    def never(*args, **kwargs):
        raise AssertionError("coarse predictions computed before the model options were checked")

    monkeypatch.setattr(correction_training, "coarse_predictions", never)
    capsys.readouterr()
    status = main(["train", "lean-fno", "--data", str(data), "--preset", "ns-corrector",
                   "--model-option", "modes=[32,33]", "--window", "1", "--target",
                   "correction", "--coarse", "2x2", "--num-test", "1", "--no-progress",
                   "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "modes=[32, 33]" in err and "16x16 grid" in err
    assert not (tmp_path / "run").exists()



def test_ctrl_c_during_the_imports_of_torch_waits_for_them_to_end():
    # A KeyboardInterrupt raised inside `import torch` (in a callback torch's C++ makes into
    # Python) aborted the process (exit -6) 1 time in ~40; main holds SIGINT back over the
    # imports so that it arrives after them, as a KeyboardInterrupt it can answer. In a fresh
    # interpreter: the signal must reach that process's main thread, not a test worker.
    import signal
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, signal
        from ssmpde.cli import _holding_sigint
        reached = 0
        try:
            with _holding_sigint():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # where Python would raise it, were it not held back
                    reached += 1
        except KeyboardInterrupt:
            print("interrupted after", reached)
    """)
    # A test run started in the background of a script ignores SIGINT and its children
    # inherit that (Python then installs no handler): give the child a terminal's default.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert result.stdout.strip() == "interrupted after 1000", (result.stdout, result.stderr)
