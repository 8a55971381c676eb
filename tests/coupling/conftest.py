"""Fixtures shared by the coupling tests."""

import pytest

from ssmpde.generation import generate


@pytest.fixture(scope="module")
def ks_data(tmp_path_factory):
    """Six KS trajectories stored at 64 of the 128 points they were simulated on (one per test
    module)."""
    path = tmp_path_factory.mktemp("ks") / "ks.nc"
    generate("kuramoto-sivashinsky", num_samples=6, seed=0, out=path, preset="lpsda",
             resolution=64, simulation_resolution=128, final_time=0.5, progress=False)
    return path
