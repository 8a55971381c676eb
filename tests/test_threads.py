"""The thread policy (ssmpde.threads): counts applied to torch, numba and the solvers' FFTW,
restored afterwards; the SSMPDE_THREADS variable; --threads on the command line; the entry
points applying it."""

import doctest
import importlib
import inspect

import numba
import pytest
import torch

from ssmpde import threads
from ssmpde.cli import main
from ssmpde.solvers import get_solver

# the module (ssmpde.generation.generate is also the name of its function)
generate_module = importlib.import_module("ssmpde.generation.generate")

KS = ["--resolution", "16", "--simulation-resolution", "32", "--domain-length", "22",
      "--viscosity", "1", "--time", "0.5", "--record-interval", "0.25", "--time-step", "0.05",
      "--no-progress"]


@pytest.fixture(autouse=True)
def no_environment_count(monkeypatch):
    monkeypatch.delenv(threads.ENVIRONMENT, raising=False)


def test_apply_sets_torch_and_numba_and_restore_puts_them_back():
    before = threads.current()
    previous = threads.apply(1)
    try:
        assert torch.get_num_threads() == 1
        assert numba.get_num_threads() == 1
        assert threads.fftw_limit() == 1
    finally:
        threads.restore(previous)
    assert threads.current() == before
    assert (torch.get_num_threads(), numba.get_num_threads()) == (before.torch, before.numba)


def test_limited_restores_after_an_error():
    before = threads.current()
    with pytest.raises(RuntimeError), threads.limited(1) as inside:
        assert inside == threads.Settings(torch=1, numba=1, fftw=1)
        raise RuntimeError("the work failed")
    assert threads.current() == before


def test_numba_count_is_capped_at_its_pool():
    with threads.limited(numba.config.NUMBA_NUM_THREADS + 1) as inside:
        assert inside.numba == numba.config.NUMBA_NUM_THREADS
        assert inside.torch == numba.config.NUMBA_NUM_THREADS + 1


def test_workload_defaults_without_a_count():
    before = threads.current()
    with threads.limited(workload="rollout") as inside:
        assert inside.torch == threads.DEFAULTS["rollout"] == 1
        assert inside.numba == before.numba and inside.fftw is None  # the solver keeps its
    with threads.limited(workload="train") as inside:
        assert inside == before  # training keeps the counts the process started with
    with pytest.raises(ValueError, match="workload"):
        threads.apply(workload="inference")


def test_environment_variable_sets_the_count(monkeypatch):
    monkeypatch.setenv(threads.ENVIRONMENT, "1")
    assert threads.requested() == 1
    assert threads.requested(2) == 2  # an argument wins
    with threads.limited(workload="train") as inside:
        assert (inside.torch, inside.numba, inside.fftw) == (1, 1, 1)


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", "", "2000"])
def test_bad_environment_values_are_one_clear_error(monkeypatch, value):
    monkeypatch.setenv(threads.ENVIRONMENT, value)
    if not value:  # empty means unset
        assert threads.requested() is None
        return
    with pytest.raises(ValueError, match="SSMPDE_THREADS must be a whole number"):
        threads.requested()


@pytest.mark.parametrize("value", [0, True, 1.0, "x", None])
def test_parse_rejects_what_is_not_a_count(value):
    with pytest.raises(ValueError, match="threads"):
        threads.parse(value)


def test_entry_point_applies_the_policy_and_restores():
    seen = []

    @threads.entry_point("rollout")
    def work(*, threads=None):
        seen.append((torch.get_num_threads(), numba.get_num_threads()))
        return "done"

    before = threads.current()
    assert work() == "done" and seen[-1][0] == 1  # the rollout default: one torch thread
    assert work(threads=1) == "done" and seen[-1] == (1, 1)
    assert threads.current() == before
    with pytest.raises(ValueError, match="threads"):
        work(threads=0)


def test_solver_ffts_are_bounded_by_the_count():
    solver = get_solver("navier-stokes", resolution=16, simulation_resolution=32)
    threads.limit_solver(solver)  # outside a limit: unchanged
    assert solver.threads is None
    with threads.limited(1):
        threads.limit_solver(solver)
    assert solver.threads == 1


def test_generate_runs_under_the_count_and_cli_accepts_threads(tmp_path, monkeypatch):
    seen = []
    original = generate_module._run

    def spy(*args, **kwargs):
        seen.append(threads.current())
        return original(*args, **kwargs)

    monkeypatch.setattr(generate_module, "_run", spy)
    before = threads.current()
    out = tmp_path / "ks.nc"
    assert main(["generate", "kuramoto-sivashinsky", "--samples", "1", "--out", str(out),
                 "--threads", "1", *KS]) == 0
    assert seen[-1] == threads.Settings(torch=1, numba=1, fftw=1)
    assert threads.current() == before


@pytest.mark.parametrize("value", ["0", "abc", "1.5", "-1"])
@pytest.mark.parametrize("command", [
    ["generate", "kuramoto-sivashinsky", "--samples", "1", "--out", "x.nc"],
    ["train", "fno", "--data", "x.nc", "--out", "run"],
    ["evaluate", "run", "--data", "x.nc"],
    ["rollout", "--checkpoint", "run", "--steps", "1", "--schedule", "solver"],
])
def test_cli_rejects_bad_thread_counts_in_one_line(capsys, command, value):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--threads", value])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1
    assert "--threads" in error and "whole number of threads" in error


def test_cli_reports_a_bad_environment_value_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(threads.ENVIRONMENT, "many")
    status = main(["generate", "kuramoto-sivashinsky", "--samples", "1",
                   "--out", str(tmp_path / "ks.nc"), *KS])
    assert status == 2
    error = capsys.readouterr().err
    assert error.startswith("ssmpde: error: SSMPDE_THREADS") and error.count("\n") == 1
    assert not (tmp_path / "ks.nc").exists()


def test_idle_threads_sleep_when_ssmpde_comes_first():
    import subprocess
    import sys

    code = ("import ssmpde, torch\nfrom ssmpde.threads import spin_seconds\n"
            "print(spin_seconds(regions=10, pause=0.02))")
    environment = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=environment, timeout=120)
    assert float(done.stdout.split()[-1]) < 0.05  # a spinning runtime burns ~0.15 or more


def test_docstring_examples():
    assert doctest.testmod(threads).failed == 0


def test_solvers_plan_with_at_most_the_policy_count():
    from ssmpde import threads
    from ssmpde.solvers.spectral import default_threads, solver_threads

    with threads.limited(1):
        assert solver_threads() == 1
    assert solver_threads() <= default_threads()


def test_entry_point_refuses_a_function_without_threads():
    with pytest.raises(TypeError, match="takes no 'threads' argument"):
        @threads.entry_point("rollout")
        def title(solver: str) -> str:
            return solver


def test_every_entry_point_is_wrapped_by_the_policy():
    from ssmpde.coupling.run import run_rollout
    from ssmpde.generation import generate
    from ssmpde.surrogates.train import evaluate, train

    for function in (run_rollout, generate, train, evaluate):
        assert "threads" in inspect.signature(function.__wrapped__).parameters, function
