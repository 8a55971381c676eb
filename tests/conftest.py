import os

# Before torch: `import ssmpde` sets OMP_WAIT_POLICY=PASSIVE, which the OpenMP runtime reads
# once, when `import torch` loads it. With torch first, idle OpenMP threads spin after every
# parallel region, and two xdist workers on two cores steal each other's cores at every
# barrier (a Navier-Stokes test took 10 s instead of 1.5 s beside another worker). The
# variable lands in this process's environment, which xdist's workers and the tests'
# subprocesses inherit.
import ssmpde  # noqa: F401

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

#: Seconds the controller spent filling numba's cache (pytest_configure), for the summary.
NUMBA_CACHE_SECONDS = pytest.StashKey[float]()

# Triton reads TRITON_INTERPRET when it is first imported: without a GPU, the Triton kernels
# are tested by its interpreter on CPU tensors, so set it before any test module loads.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# CI machines are small and shared: keep hypothesis runs bounded and without deadlines
# (numba compiles on first call).
settings.register_profile(
    "ssmpde", deadline=None, max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ssmpde"))


@pytest.fixture
def raise_on_fp_errors():
    """Turn silent floating-point overflow/invalid operations into errors (solver tests)."""
    old = np.seterr(all="raise")
    try:
        yield
    finally:
        np.seterr(**old)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip cleanly on machines without CUDA."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def compile_calls(monkeypatch):
    """Every call of compile_model, by its backend (the real function still runs)."""
    from ssmpde.surrogates import compiled

    calls = []
    real = compiled.compile_model

    def spy(model, example_inputs, *, backend="inductor", **kwargs):
        calls.append(backend)
        return real(model, example_inputs, backend=backend, **kwargs)

    monkeypatch.setattr(compiled, "compile_model", spy)
    return calls


def pytest_configure(config):
    """Under xdist, compile the numba kernels into their on-disk cache before the workers
    start (tests/numba_cache.py), a few groups side by side: otherwise every worker compiles
    the same kernels at the same time, one at a time (the CPU scans alone take 70 s of one
    core). Does nothing in a worker, or without xdist. A group that fails only warns: its
    kernels then compile in the tests that call them, as they would without this."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    import subprocess
    import sys
    import time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from ssmpde.threads import cores
    from tests.numba_cache import GROUPS

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]))

    def compile_groups(groups):
        try:
            done = subprocess.run([sys.executable, str(root / "tests" / "numba_cache.py"),
                                   *groups], cwd=root, env=env, capture_output=True, text=True,
                                  timeout=600)
        except subprocess.TimeoutExpired:
            return f"{groups}: still compiling after 600 s, stopped"
        return None if done.returncode == 0 else f"{groups}: {done.stderr[-1500:]}"

    # One process a core, the groups dealt out costliest first: each process imports torch
    # once (about 2 s), which is all this costs when the cache is already filled.
    processes = min(len(GROUPS), cores())
    started = time.monotonic()
    with ThreadPoolExecutor(processes) as pool:
        failures = [f for f in pool.map(compile_groups, [GROUPS[i::processes]
                                                         for i in range(processes)]) if f]
    for failure in failures:
        config.issue_config_time_warning(pytest.PytestWarning(
            f"tests/numba_cache.py could not compile the groups {failure}"), stacklevel=2)
    config.stash[NUMBA_CACHE_SECONDS] = time.monotonic() - started


def pytest_terminal_summary(terminalreporter, config):
    if NUMBA_CACHE_SECONDS in config.stash:
        terminalreporter.write_line(f"numba kernels compiled into the cache before the workers "
                                    f"started: {config.stash[NUMBA_CACHE_SECONDS]:.0f} s")
