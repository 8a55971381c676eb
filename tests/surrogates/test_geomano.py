"""GeoMaNO: shapes and gradients on odd grids, ablation switches, exact save/load, golden
output, and configuration errors raised at build time."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ssmpde.surrogates import (
    build_model,
    model_from_json,
    model_to_json,
    parameter_count,
)
from ssmpde.surrogates.s6 import CORRECTIONS, SelectiveScanMixer

GOLDEN = Path(__file__).parent / "golden" / "geomano_tiny.json"


def tiny(**overrides):
    """A small GeoMaNO (the darcy preset with few channels and layers) on a 9×9 grid."""
    config = dict(preset="darcy", grid=(9, 9), latent_grid=(3, 3), width=8, depth=1,
                  state_size=4)
    config.update(overrides)
    return build_model("geomano", **config)


def forward_backward(model, x):
    out = model(x)
    (out.square().mean() + out.mean()).backward()
    return out


# ---------------------------------------------------------------------------------------
# Shapes, finiteness and gradients on odd grids.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, input_shape", [
    (dict(preset="darcy"), (2, 1, 85, 85)),
    (dict(preset="navier-stokes"), (1, 10, 64, 64)),
    (dict(preset="darcy", grid=(29, 29), latent_grid=(7, 7)), (3, 1, 29, 29)),
    (dict(preset="navier-stokes", grid=(1024,), latent_grid=(64,), in_channels=2,
          out_channels=3, width=64), (2, 2, 1024)),
], ids=["darcy-85x85", "ns-64x64x10", "29x29", "1d-1024"])
def test_forward_backward_shapes_and_gradients(overrides, input_shape):
    torch.manual_seed(0)
    model = build_model("geomano", **overrides)
    x = torch.randn(*input_shape)
    out = forward_backward(model, x)
    c = model.config
    assert out.shape == (input_shape[0], c.out_channels, *c.grid)
    assert torch.isfinite(out).all()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"zero gradient on {name}"


@pytest.mark.parametrize("scan", ["1d", "2d"])
@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("positional_encoding", [False, True])
def test_every_ablation_switch_builds_and_runs(scan, correction, positional_encoding):
    torch.manual_seed(1)
    model = tiny(scan=scan, correction=correction, positional_encoding=positional_encoding,
                 grid=(7, 5), latent_grid=(3, 2))
    out = forward_backward(model, torch.randn(2, 1, 7, 5))
    assert out.shape == (2, 1, 7, 5) and torch.isfinite(out).all()


def test_the_mixer_scans_with_the_kernels_not_its_own_loops(monkeypatch):
    # Every scan of the mixer goes through ssmpde.kernels: replacing the kernel's entry
    # point changes the model's output.
    torch.manual_seed(2)
    model = tiny(scan="1d", correction="learnable")
    x = torch.randn(1, 1, 9, 9)
    before = model(x)
    import ssmpde.surrogates.s6 as s6

    calls = []

    def fake_scan(u, *args, **kwargs):
        calls.append(u.shape)
        return torch.zeros_like(u)

    monkeypatch.setattr(s6, "selective_scan", fake_scan)
    after = model(x)
    assert calls and not torch.equal(before, after)


# ---------------------------------------------------------------------------------------
# The geometric correction.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("scan", ["1d", "2d"])
def test_no_correction_equals_a_zero_learnable_correction(scan):
    torch.manual_seed(3)
    learnable = tiny(scan=scan, correction="learnable", depth=2)
    with torch.no_grad():
        for layer in learnable.layers:
            layer.mixer.R.zero_()
    plain = tiny(scan=scan, correction="none", depth=2)
    state = {k: v for k, v in learnable.state_dict().items() if not k.endswith("mixer.R")}
    plain.load_state_dict(state, strict=True)
    x = torch.randn(2, 1, 9, 9)
    assert torch.equal(plain(x), learnable(x))
    # ... and a non-zero R changes the output, so the comparison above can fail.
    with torch.no_grad():
        learnable.layers[0].mixer.R.fill_(0.5)
    assert not torch.allclose(plain(x), learnable(x))


@pytest.mark.parametrize("pattern", ["0001", "0011", "0111"])
def test_fixed_patterns_zero_exactly_the_intended_directions(pattern):
    mixer = SelectiveScanMixer(8, spatial_dims=2, state_size=4, scan="1d", correction=pattern)
    R = mixer.R.view(4, mixer.inner, 4)
    for direction, digit in enumerate(pattern):
        assert torch.equal(R[direction], torch.full_like(R[direction], float(digit)))
    assert "R" not in dict(mixer.named_parameters())  # fixed: a buffer, not trained
    # A fixed pattern computes what a learnable R set to that pattern computes.
    torch.manual_seed(4)
    fixed = tiny(correction=pattern)
    learnable = tiny(correction="learnable")
    learnable.load_state_dict(fixed.state_dict())
    x = torch.randn(2, 1, 9, 9)
    assert torch.equal(fixed(x), learnable(x))


# ---------------------------------------------------------------------------------------
# Saving and loading, golden output.
# ---------------------------------------------------------------------------------------
def test_json_config_and_safetensors_weights_reproduce_the_outputs(tmp_path):
    torch.manual_seed(5)
    model = tiny(scan="1d", correction="learnable", positional_encoding=True, depth=2)
    with torch.no_grad():
        for layer in model.layers:
            layer.mixer.R.normal_()
    (tmp_path / "config.json").write_text(model_to_json(model))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    torch.manual_seed(99)  # a different initialisation, overwritten by the weights
    loaded = model_from_json((tmp_path / "config.json").read_text())
    loaded.load_state_dict(load_file(tmp_path / "weights.safetensors"))
    assert loaded.config == model.config
    x = torch.randn(3, 1, 9, 9)
    assert torch.equal(model(x), loaded(x))
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["model"] == "geomano" and "ssmpde_version" in record


def golden_output():
    """The tiny model of the golden test and its output on a fixed input, in float64."""
    torch.manual_seed(0)
    model = tiny(depth=2).double()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 1, 9, 9, generator=g, dtype=torch.float64)
    with torch.no_grad():
        return model(x)


def test_golden_output():
    # Guards against silent changes of the architecture, its initialisation or the scans.
    # Regenerate only on purpose: python tests/surrogates/make_golden.py
    from tests.surrogates.make_golden import check_golden

    check_golden(GOLDEN, golden_output())


# ---------------------------------------------------------------------------------------
# Configuration errors at build time.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(correction="0101"), "unknown correction '0101'"),
    (dict(latent_grid=(10, 3)), "larger than the grid"),
    (dict(latent_grid=(3,)), "as many dimensions"),
    (dict(grid=(9,), latent_grid=(3,)), "scan='2d' needs a 2D grid"),
    (dict(grid=(9,), latent_grid=(3,), scan="1d"), "names four scan directions"),
    (dict(in_channels=0), "in_channels must be a positive integer"),
    (dict(width=2.5), "width must be a positive integer"),
    (dict(scan="3d"), "scan must be '1d' or '2d'"),
    (dict(scan_backend="cuda"), "unknown scan_backend"),
    (dict(grid=(9, 0)), "grid must be a tuple"),
    (dict(widht=8), "did you mean 'width'"),
])
def test_bad_configs_fail_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny(**overrides)


def test_wrong_input_shape_names_the_expected_one():
    model = tiny()
    with pytest.raises(ValueError, match=r"expects input \[batch, 1, 9, 9\]"):
        model(torch.randn(2, 3, 9, 9))
    with pytest.raises(ValueError, match=r"got \[2, 1, 8, 9\]"):
        model(torch.randn(2, 1, 8, 9))


def test_unknown_model_and_preset():
    with pytest.raises(ValueError, match="Did you mean 'geomano'"):
        build_model("geomamba")
    with pytest.raises(ValueError, match="unknown preset 'ns'.*navier-stokes"):
        build_model("geomano", preset="ns")


# ---------------------------------------------------------------------------------------
# Registry.
# ---------------------------------------------------------------------------------------
def test_preset_parameter_counts_are_stable():
    # The configurations stated in the notes; a change here is a change of architecture.
    counts = {p: parameter_count(build_model("geomano", preset=p))
              for p in ("darcy", "navier-stokes")}
    assert counts == {"darcy": 1_074_267, "navier-stokes": 8_100_865}
    assert math.prod(build_model("geomano", preset="darcy").config.latent_grid) == 289
