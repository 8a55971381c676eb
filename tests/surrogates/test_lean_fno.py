"""Lean FNO: shapes and gradients on odd grids, one spectral layer against exactly known Fourier
multipliers (derivatives, heat kernels) computed with NumPy's FFT, translation equivariance,
fitting tasks, exact save/load, golden output and configuration errors at build time (the
contract of every model: test_contract.py)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from ssmpde.surrogates import build_model, model_from_json, model_to_json, parameter_count
from ssmpde.surrogates.datasets import Task
from ssmpde.surrogates.lean_fno import LeanFNOConfig, mode_limits

GOLDEN = Path(__file__).parent / "golden" / "lean_fno_tiny.json"

SHAPES = [
    pytest.param((63,), (9,), 1, 1, id="1d-63"),
    pytest.param((64,), (33,), 3, 2, id="1d-64-all-modes"),
    pytest.param((85, 85), (6, 7), 2, 1, id="2d-85x85"),
    pytest.param((12, 9), (6, 5), 3, 2, id="2d-12x9-all-modes"),
]


def tiny(grid, modes, **overrides):
    config = dict(grid=grid, modes=modes, width=6, depth=2)
    config.update(overrides)
    return build_model("lean-fno", **config)


# ---------------------------------------------------------------------------------------
# Shapes, gradients.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid, modes, in_channels, out_channels", SHAPES)
def test_shapes_and_finite_gradients_reaching_every_parameter(grid, modes, in_channels,
                                                              out_channels):
    torch.manual_seed(0)
    model = tiny(grid, modes, in_channels=in_channels, out_channels=out_channels)
    x = torch.randn(3, in_channels, *grid, requires_grad=True)
    out = model(x)
    assert out.shape == (3, out_channels, *grid)
    (out.square().mean() + out.mean()).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize("grid, modes", [((7,), (3,)), ((8,), (5,)), ((6, 5), (2, 2)),
                                         ((5, 6), (2, 4))],
                         ids=["1d-7", "1d-8-nyquist", "2d-6x5", "2d-5x6-nyquist"])
def test_gradients_match_finite_differences(grid, modes):
    torch.manual_seed(1)
    model = tiny(grid, modes, width=3, in_channels=2, out_channels=2).double()
    x = torch.randn(2, 2, *grid, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(model, (x,), eps=1e-6, atol=1e-7)


def test_float64_agrees_with_float32():
    torch.manual_seed(2)
    model = tiny((85, 85), (12, 12), in_channels=3)
    x = torch.randn(2, 3, 85, 85)
    with torch.no_grad():
        single = model(x)
        double = model.double()(x.double())
    torch.testing.assert_close(single.double(), double, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# One spectral layer against exactly known Fourier multipliers.
# ---------------------------------------------------------------------------------------
def single_layer(grid, modes, multiplier):
    """A width-1, depth-1 lean FNO that computes ``F⁻¹(multiplier · F u)`` on the kept modes:
    identity lifting and projection, no skip; ``multiplier(ky, kx)`` (2D) or
    ``multiplier(k)`` (1D) of the integer wavenumbers of each kept mode."""
    model = build_model("lean-fno", grid=grid, modes=modes, width=1, depth=1).double()
    layer = model.layers[0]
    if len(grid) == 1:
        values = multiplier(np.arange(modes[0]))
    else:
        ky = np.fft.fftfreq(grid[0], 1 / grid[0])[layer.rows.numpy()]
        values = multiplier(ky[:, None], np.arange(modes[1])[None, :]).ravel()
    values = np.broadcast_to(values, (layer.spectral.shape[0],))
    with torch.no_grad():
        for linear in (model.lift, model.project):
            linear.weight.fill_(1.0)
            linear.bias.zero_()
        layer.skip.weight.zero_()
        layer.skip.bias.zero_()
        layer.spectral.copy_(torch.tensor(np.stack([values.real, values.imag], axis=-1)
                                          ).reshape(layer.spectral.shape))
    return model


def kept_mask(grid, modes):
    """The kept modes on NumPy's rfft/rfft2 layout."""
    if len(grid) == 1:
        mask = np.zeros(grid[0] // 2 + 1)
        mask[:modes[0]] = 1
        return mask
    mask = np.zeros((grid[0], grid[1] // 2 + 1))
    mask[:modes[0], :modes[1]] = mask[grid[0] - modes[0]:, :modes[1]] = 1
    return mask


@pytest.mark.parametrize("n", [63, 64])
def test_one_layer_computes_the_spectral_derivative(n):
    # u = Σ_k a_k cos(kx) + b_k sin(kx) with k < m: the kept modes hold it exactly, so the
    # layer with multiplier i k (period 2π) returns u' to round-off.
    x = 2 * np.pi * np.arange(n) / n
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 9))
    u = sum(a[k] * np.cos(k * x) + b[k] * np.sin(k * x) for k in range(9))
    du = sum(k * (b[k] * np.cos(k * x) - a[k] * np.sin(k * x)) for k in range(9))
    model = single_layer((n,), (12,), lambda k: 1j * k)
    with torch.no_grad():
        out = model(torch.tensor(u).reshape(1, 1, n)).numpy().ravel()
    np.testing.assert_allclose(out, du, rtol=0, atol=1e-12 * np.abs(du).max())
    reference = np.fft.irfft(1j * np.arange(n // 2 + 1) * kept_mask((n,), (12,))
                             * np.fft.rfft(u), n)
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-13 * np.abs(du).max())


@pytest.mark.parametrize("n, m", [(63, 10), (64, 33), (256, 16)],
                         ids=["63", "64-all-modes", "256"])
def test_one_layer_is_the_truncated_heat_kernel_1d(n, m):
    t = 0.01
    u = np.random.default_rng(4).standard_normal((2, 1, n))
    model = single_layer((n,), (m,), lambda k: np.exp(-k ** 2 * t))
    k = np.arange(n // 2 + 1)
    reference = np.fft.irfft(np.exp(-k ** 2 * t) * kept_mask((n,), (m,)) * np.fft.rfft(u), n)
    with torch.no_grad():
        out = model(torch.tensor(u)).numpy()
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-13)


@pytest.mark.parametrize("grid, modes", [((15, 12), (4, 5)), ((12, 10), (6, 6)),
                                         ((85, 85), (12, 12))],
                         ids=["15x12", "12x10-all-modes", "85x85"])
def test_one_layer_is_the_truncated_heat_kernel_2d(grid, modes):
    # The corners ±m_y × the first m_x: a wrong row order or a mode on the wrong corner
    # shows up as an O(1) error.
    t = 0.02
    u = np.random.default_rng(5).standard_normal((2, 1, *grid))
    model = single_layer(grid, modes, lambda ky, kx: np.exp(-(ky ** 2 + 2 * kx ** 2) * t))
    ky = np.fft.fftfreq(grid[0], 1 / grid[0])[:, None]
    kx = np.arange(grid[1] // 2 + 1)[None, :]
    multiplier = np.exp(-(ky ** 2 + 2 * kx ** 2) * t) * kept_mask(grid, modes)
    reference = np.fft.irfft2(multiplier * np.fft.rfft2(u), s=grid)
    with torch.no_grad():
        out = model(torch.tensor(u)).numpy()
    np.testing.assert_allclose(out, reference, rtol=0, atol=1e-13)


def test_one_layer_computes_the_2d_gradient_components():
    grid = (15, 12)
    y = 2 * np.pi * np.arange(grid[0])[:, None] / grid[0]
    x = 2 * np.pi * np.arange(grid[1])[None, :] / grid[1]
    u = np.sin(2 * x + 3 * y) + np.cos(x - 4 * y) + 0.5 * np.cos(y)
    for multiplier, expected in (
            (lambda ky, kx: 1j * kx + 0 * ky,
             2 * np.cos(2 * x + 3 * y) - np.sin(x - 4 * y)),
            (lambda ky, kx: 1j * ky + 0 * kx,
             3 * np.cos(2 * x + 3 * y) + 4 * np.sin(x - 4 * y) - 0.5 * np.sin(y))):
        model = single_layer(grid, (5, 4), multiplier)
        with torch.no_grad():
            out = model(torch.tensor(u).reshape(1, 1, *grid)).numpy()[0, 0]
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Translation equivariance.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid, modes, shifts", [
    ((63,), (20,), (5,)), ((64,), (33,), (-17,)), ((85, 85), (12, 12), (7, -30)),
    ((12, 10), (6, 6), (5, 3))], ids=["1d-63", "1d-64-all-modes", "2d-85x85",
                                      "2d-12x10-all-modes"])
def test_rolling_the_input_rolls_the_output(grid, modes, shifts):
    torch.manual_seed(6)
    model = tiny(grid, modes, in_channels=2, out_channels=2, depth=3).double()
    x = torch.randn(2, 2, *grid, dtype=torch.float64)
    dims = tuple(range(2, 2 + len(grid)))
    with torch.no_grad():
        rolled_first = model(torch.roll(x, shifts, dims))
        rolled_after = torch.roll(model(x), shifts, dims)
    torch.testing.assert_close(rolled_first, rolled_after, rtol=0, atol=1e-13)


# ---------------------------------------------------------------------------------------
# Presets, fitting tasks, saving and loading, golden output.
# ---------------------------------------------------------------------------------------
def test_preset_parameter_counts():
    for preset, in_channels, kept in (("ks-corrector", 3, 16), ("ns-corrector", 3, 2 * 12 * 12),
                                      ("default", 1, 2 * 12 * 12)):
        model = build_model("lean-fno", preset=preset)
        c = model.config
        per_layer = kept * c.width * c.width * 2 + c.width * c.width + c.width
        expected = (in_channels + 1) * c.width + c.depth * per_layer + c.width + 1
        assert parameter_count(model) == expected, preset
    assert parameter_count(build_model("lean-fno", preset="ks-corrector")) == 17_009


@pytest.mark.parametrize("preset, grid, modes", [
    ("ks-corrector", (24,), (13,)), ("ks-corrector", (12, 10), (6, 6)),
    ("ns-corrector", (85, 85), (12, 12)), ("ns-corrector", (12, 10), (6, 6)),
    ("ns-corrector", (20,), (11,))])
def test_fitting_a_corrector_task_caps_the_modes(preset, grid, modes):
    from ssmpde.surrogates import config_from_dict

    task = Task("rollout", ("u",), ("u",), grid, ("viscosity",), window=1, dt=0.1,
                correction=True)
    config = config_from_dict("lean-fno", preset=preset, task=task)
    assert config.modes == modes and config.grid == grid
    assert config.in_channels == 3 and config.out_channels == 1  # u, coarse u, viscosity
    model = build_model("lean-fno", **{k: getattr(config, k) for k in ("in_channels", "grid",
                                                                       "modes", "width")})
    assert model(torch.randn(1, 3, *grid)).shape == (1, 1, *grid)


def test_json_config_and_safetensors_weights_reproduce_the_outputs(tmp_path):
    torch.manual_seed(7)
    model = tiny((12, 9), (3, 4), in_channels=2, out_channels=2)
    (tmp_path / "config.json").write_text(model_to_json(model))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    torch.manual_seed(99)  # a different initialisation, overwritten by the weights
    loaded = model_from_json((tmp_path / "config.json").read_text())
    loaded.load_state_dict(load_file(tmp_path / "weights.safetensors"))
    x = torch.randn(3, 2, 12, 9)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["model"] == "lean-fno" and record["config"]["modes"] == [3, 4]
    assert loaded.config == model.config
    assert "layers.0.rows" not in model.state_dict()  # derived from the config, not saved


def golden_output():
    """The tiny models of the golden test (1D on 63 points, 2D on 9×8) and their outputs on a
    fixed input, in float64, flattened into one tensor."""
    from tests.surrogates.make_golden import built_in_float64

    torch.manual_seed(0)
    with built_in_float64():
        one_d = tiny((63,), (10,), in_channels=2).double()
        two_d = tiny((9, 8), (3, 4), in_channels=2).double()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        return torch.cat([
            one_d(torch.randn(2, 2, 63, generator=g, dtype=torch.float64)).flatten(),
            two_d(torch.randn(2, 2, 9, 8, generator=g, dtype=torch.float64)).flatten()])


def test_golden_output():
    # Guards against silent changes of the architecture or its initialisation. Regenerate
    # only on purpose: python tests/surrogates/make_golden.py --model lean-fno
    from tests.surrogates.make_golden import check_golden

    check_golden(GOLDEN, golden_output())


# ---------------------------------------------------------------------------------------
# Configuration errors at build time.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(grid=(256,), modes=(130,)), r"exceed what the grid \(256,\) holds: at most \(129,\)"),
    (dict(grid=(85, 85), modes=(43, 12)), r"at most \(42, 43\)"),
    (dict(grid=(64, 64), modes=(12, 34)), r"at most \(32, 33\)"),
    (dict(grid=(64, 64), modes=(12,)), "one entry per grid dimension"),
    (dict(grid=(8, 8, 8), modes=(2, 2, 2)), "grid must be a tuple of 1 or 2 positive"),
    (dict(modes=(0, 4)), "modes must be a tuple of 1 or 2 positive integers"),
    (dict(depth=0), "depth must be a positive integer"),
    (dict(width=True), "width must be a positive integer"),
    (dict(in_channels=2.0), "in_channels must be a positive integer"),
])
def test_bad_configs_fail_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=message):
        build_model("lean-fno", **overrides)


def test_mode_limits():
    assert mode_limits((63,)) == (32,) and mode_limits((64,)) == (33,)
    assert mode_limits((85, 85)) == (42, 43) and mode_limits((12, 9)) == (6, 5)
    assert LeanFNOConfig(grid=(12, 9), modes=mode_limits((12, 9))).modes == (6, 5)
