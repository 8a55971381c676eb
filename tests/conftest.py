import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

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
