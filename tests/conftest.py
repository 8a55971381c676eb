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
    """In an xdist worker, torch gets the worker's share of the cores (one thread each with
    ``-n 2`` on two cores), as ``torchrun`` gives each of its processes: with every worker on
    every core, the tiny models of the tests spent their time in OpenMP barriers waiting for
    a thread the other worker had descheduled (tests/surrogates and tests/coupling: 124 s of
    CPU on two threads, 112 s on one). numba keeps every core, so its kernels still run in
    parallel. Its OpenMP pool is started first: starting it later sets the OpenMP runtime,
    which it shares with torch, back to numba's count."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers:
        return
    import numba

    from ssmpde.threads import cores

    numba.get_num_threads()
    torch.set_num_threads(max(1, cores() // workers))


# -- where a cold run's time goes: numba's compilations, when asked ----------------------------
_COMPILES: list = []


def pytest_sessionstart(session):
    """``SSMPDE_NUMBA_COMPILE_LOG=DIR``: every process of the run writes the numba
    compilations it made (:func:`ssmpde.warmup.compile_log`'s records) to
    ``DIR/<worker>.json`` at its end, so a cold run's compile time can be told from its
    tests' own (it writes nothing otherwise)."""
    if os.environ.get("SSMPDE_NUMBA_COMPILE_LOG"):
        from ssmpde.warmup import compile_log

        _COMPILES.append(compile_log())


def pytest_sessionfinish(session):
    folder = os.environ.get("SSMPDE_NUMBA_COMPILE_LOG")
    if folder and _COMPILES:
        import json
        from pathlib import Path

        worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{worker}.json").write_text(json.dumps(_COMPILES[0]))
