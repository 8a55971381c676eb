"""The FNO baseline: neuraloperator's FNO behind the registry, and a clear message without it."""

import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from ssmpde.surrogates import build_model, model_from_json, model_to_json

pytest.importorskip("neuralop")


def test_fno_is_neuraloperators_model_with_our_config():
    from neuralop.models import FNO as NeuralopFNO

    torch.manual_seed(0)
    model = build_model("fno", preset="darcy", grid=(29, 29), modes=(8, 8), width=8)
    assert isinstance(model.fno, NeuralopFNO)
    x = torch.randn(2, 1, 29, 29)
    out = model(x)
    out.square().mean().backward()
    assert out.shape == (2, 1, 29, 29) and torch.isfinite(out).all()
    assert all(p.grad is not None for p in model.parameters())


def test_fno_round_trips_through_json_and_safetensors(tmp_path):
    torch.manual_seed(1)
    model = build_model("fno", preset="navier-stokes", width=8, modes=(6, 6))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    loaded = model_from_json(model_to_json(model))
    loaded.load_state_dict(load_file(tmp_path / "weights.safetensors"))
    x = torch.randn(1, 10, 64, 64)
    assert torch.equal(model(x), loaded(x))


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
