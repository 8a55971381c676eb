"""float32 time stepping against float64: each bound that ``docs/numerics/float32.md`` states,
per PDE and regime, read from its table "Bounds the tests hold" and held here."""

import re
from pathlib import Path

import numpy as np
import pytest

from ssmpde.core import relative_l2
from ssmpde.solvers import get_solver
from ssmpde.solvers.navier_stokes import NavierStokes2D

DOC = Path(__file__).resolve().parents[2] / "docs" / "numerics" / "float32.md"
ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (.+?) \| ([0-9.e-]+) \| ([0-9.e-]+) \|$")
DTYPES = ("float64", "float32")


def documented_bounds() -> dict[str, tuple[float, float]]:
    """case -> (measured, bound), from the doc's table."""
    section = DOC.read_text().split("## Bounds the tests hold", 1)[1].split("\n## ", 1)[0]
    rows = (ROW.match(line.strip()) for line in section.splitlines())
    return {row[1]: (float(row[3]), float(row[4])) for row in rows if row}


def semilinear(name: str, n: int, steps: int, **config) -> float:
    """The worst of 4 samples (seed 2) at the last of ``steps`` steps."""
    h = config["time_step"]
    config.update(resolution=n, simulation_resolution=n, record_interval=steps * h,
                  final_time=steps * h)
    double, single = (get_solver(name, **config, dtype=dtype) for dtype in DTYPES)
    inputs = double.sample_inputs(seed=2, indices=[0, 1, 2, 3])
    a, b = double.solve_batch(inputs)["u"], single.solve_batch(inputs)["u"]
    assert b.dtype == np.float64  # stored frames stay float64
    return float(relative_l2(b[:, -1], a[:, -1]).max())


def navier_stokes(final_time: float, **config) -> float:
    """The worst of 2 samples (seed 0) at ``final_time``, 32², FNO forcing."""
    config = dict(resolution=32, simulation_resolution=32, forcing="fno",
                  final_time=final_time, record_interval=final_time, **config)
    double, single = (NavierStokes2D(**config, dtype=dtype) for dtype in DTYPES)
    w0 = double.sample_inputs(seed=0, indices=[0, 1])["initial"]
    a, b = double.simulate(w0, 1)[:, -1], single.simulate(w0, 1)[:, -1]
    return float(relative_l2(b, a).max())


KS = dict(domain_length=22.0, viscosity=(0.8, 1.2), time_step=0.02, lmax=3)
KDV = dict(domain_length=32.0, time_step=0.01, lmax=3)
#: The runs of the doc's table, by case.
CASES = {
    "ks-short": lambda: semilinear("kuramoto-sivashinsky", 64, 50, **KS),
    "ks-long": lambda: semilinear("kuramoto-sivashinsky", 64, 1000, **KS),
    "burgers-short": lambda: semilinear("burgers", 64, 50, viscosity=(0.02, 0.05),
                                        time_step=2e-3),
    "burgers-fronts": lambda: semilinear("burgers", 256, 500, viscosity=1e-3, time_step=1e-3),
    "kdv-short": lambda: semilinear("kdv", 64, 50, **KDV),
    "kdv-long": lambda: semilinear("kdv", 64, 1000, **KDV),
    "allen-cahn-short": lambda: semilinear("allen-cahn", 64, 50, diffusivity=(0.01, 0.02),
                                           time_step=0.02, lmax=3),
    "allen-cahn-thin": lambda: semilinear("allen-cahn", 128, 1000, diffusivity=1e-3,
                                          time_step=0.01, lmax=3),
    "ns-etdrk4": lambda: navier_stokes(0.5, viscosity=1e-3, scheme="etdrk4", time_step=0.01),
    "ns-rk3-cn": lambda: navier_stokes(0.5, viscosity=1e-3, scheme="rk3-cn", time_step=0.01),
    "ns-euler-cn": lambda: navier_stokes(0.5, viscosity=1e-3, scheme="euler-cn",
                                         time_step=1e-3),
    "ns-etdrk4-long": lambda: navier_stokes(5.0, viscosity=1e-4, scheme="etdrk4",
                                            time_step=0.01),
    "ns-rk3-cn-long": lambda: navier_stokes(5.0, viscosity=1e-4, scheme="rk3-cn",
                                            time_step=0.01),
}


def test_the_doc_states_a_bound_for_every_run_and_every_pde():
    bounds = documented_bounds()
    assert set(bounds) == set(CASES)
    for case, (measured, bound) in bounds.items():
        assert 0 < measured < bound, case  # a bound with margin over what was measured
    covered = {case.rsplit("-", 1)[0] for case in bounds} | {"ns"}
    assert {"ks", "burgers", "kdv", "allen-cahn", "ns"} <= covered


@pytest.mark.parametrize("case", sorted(CASES))
def test_float32_is_within_the_documented_bound(case):
    error = CASES[case]()
    assert 1e-9 < error <= documented_bounds()[case][1], error  # it did run in float32
