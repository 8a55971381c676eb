"""The FNO baseline: neuraloperator's FNO behind the registry, its own configuration errors,
and a clear message without it (the contract of every model: test_contract.py)."""

import sys

import pytest

from ssmpde.surrogates import build_model

pytest.importorskip("neuralop")


def test_fno_is_neuraloperators_model_with_our_config():
    from neuralop.models import FNO as NeuralopFNO

    model = build_model("fno", preset="darcy", grid=(29, 29), modes=(8, 8), width=8)
    assert isinstance(model.fno, NeuralopFNO)


@pytest.mark.parametrize("overrides, message", [
    (dict(modes=(90, 12)), "exceed the grid"),
    (dict(modes=(12,)), "one entry per grid dimension"),
    (dict(depth=0), "depth must be a positive integer"),
])
def test_fno_bad_configs(overrides, message):
    with pytest.raises(ValueError, match=message):
        build_model("fno", preset="darcy", **overrides)


def test_missing_neuraloperator_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "neuralop", None)
    monkeypatch.setitem(sys.modules, "neuralop.models", None)
    with pytest.raises(ImportError, match=r"pip install 'ssmpde\[fno\]'"):
        build_model("fno", preset="darcy")
