"""Tests for the ``ds.ssmpde`` accessor (the rest of it is exercised by the other data tests)."""

from __future__ import annotations

import pytest

from ssmpde.data import SchemaError

from .helpers import make_dataset


def test_accessor_equation():
    ds = make_dataset()
    assert ds.ssmpde.equation == "navier_stokes"
    del ds.attrs["ssmpde_equation"]
    with pytest.raises(SchemaError, match="ssmpde_equation"):
        ds.ssmpde.equation
