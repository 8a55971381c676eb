"""LaMO: shapes and gradients on odd grids and patchings, the plumbing of the scan directions
(against an independent computation), the transpose symmetry of the four-direction scan,
agreement of the SSD backends, exact save/load, golden output, configuration errors at build
time and the preset parameter counts (the contract of every model: test_contract.py)."""

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import ssmpde.surrogates.lamo as lamo
from ssmpde.surrogates import (
    build_model,
    config_from_dict,
    model_from_json,
    model_to_json,
    parameter_count,
)
from ssmpde.surrogates.datasets import Task
from ssmpde.surrogates.lamo import SSDMixer, scan_orders

GOLDEN = Path(__file__).parent / "golden" / "lamo_tiny.json"


def tiny(**overrides):
    """A small LaMO (the darcy preset with few channels and layers) on a 9×9 grid."""
    config = dict(preset="darcy", grid=(9, 9), width=8, depth=1, state_size=4, chunk_size=8)
    config.update(overrides)
    return build_model("lamo", **config)


def forward_backward(model, x):
    out = model(x)
    (out.square().mean() + out.mean()).backward()
    return out


def check_gradients(model):
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"zero gradient on {name}"


# ---------------------------------------------------------------------------------------
# Shapes, finiteness and gradients: the paper's grids with narrow models, and odd grids.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, input_shape", [
    (dict(grid=(17, 23), in_channels=3, out_channels=2, depth=2), (2, 3, 17, 23)),
    (dict(grid=(1, 5), depth=2), (3, 1, 1, 5)),
    (dict(grid=(6, 1), directions=2, patch=3, pad_multiple=3), (2, 1, 6, 1)),
    (dict(grid=(13, 11), directions=1, heads=4, expand=3), (2, 1, 13, 11)),
], ids=["17x23", "1x5", "6x1-patch3", "13x11-1dir"])
def test_forward_backward_shapes_and_gradients(overrides, input_shape):
    torch.manual_seed(0)
    config = dict(width=8, depth=1, state_size=4, chunk_size=16)
    config.update(overrides)
    model = build_model("lamo", **config)
    x = torch.randn(*input_shape)
    out = forward_backward(model, x)
    c = model.config
    assert out.shape == (input_shape[0], c.out_channels, *c.grid)
    assert torch.isfinite(out).all()
    check_gradients(model)


def test_paper_padding_and_token_grids():
    # The LaMO paper's grids: 85 → 88 → 44² = 1936 tokens for Darcy, 64² → 32² = 1024 for
    # Navier–Stokes.
    darcy = config_from_dict("lamo", preset="darcy")
    ns = config_from_dict("lamo", preset="navier-stokes")
    assert darcy.padded_grid == (88, 88) and darcy.token_grid == (44, 44)
    assert ns.padded_grid == (64, 64) and ns.token_grid == (32, 32)
    assert (darcy.num_heads, darcy.inner // darcy.num_heads) == (4, 32)   # ⌈64/16⌉ heads
    assert (ns.num_heads, ns.inner // ns.num_heads) == (16, 32)
    tight = config_from_dict("lamo", dict(pad_multiple=2), preset="darcy")
    assert tight.padded_grid == (86, 86)


def test_padding_adds_zeros_on_the_right_and_bottom():
    # The patch embedding sees the fields and coordinates at the top-left and zeros in the
    # padded rows and columns.
    torch.manual_seed(1)
    model = tiny(grid=(5, 7), pad_multiple=4)
    assert model.config.padded_grid == (8, 8)
    captured = {}
    model.embed.register_forward_hook(lambda module, args, out: captured.update(x=args[0]))
    with torch.no_grad():
        model(torch.randn(2, 1, 5, 7))
    padded = captured["x"]
    assert padded.shape == (2, 3, 8, 8)
    assert torch.equal(padded[:, :, 5:], torch.zeros_like(padded[:, :, 5:]))
    assert torch.equal(padded[:, :, :, 7:], torch.zeros_like(padded[:, :, :, 7:]))


# ---------------------------------------------------------------------------------------
# The scan directions.
# ---------------------------------------------------------------------------------------
def _ranks(order, height, width):
    """Position of each grid point (row-major index) in traversal ``order``, by index
    arithmetic rather than through cross_scan."""
    i, j = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    rank = i * width + j if order % 2 == 0 else j * height + i
    return (height * width - 1 - rank if order >= 2 else rank).flatten()


@pytest.mark.parametrize("directions, grid", [(1, (3, 5)), (2, (3, 5)), (4, (3, 5)),
                                              (4, (4, 4)), (1, (7,)), (2, (7,))])
def test_directions_are_traversed_and_merged_back_in_place(directions, grid, monkeypatch):
    # A stand-in scan, the running sum along the sequence, makes the output at each point the
    # sum of the inputs before it in each direction's order: checked against rank masks.
    # It also checks that direction k's heads read B/C group k.
    def running_sum(x, dt, A, B, C, **kwargs):
        groups = B.shape[2]
        assert groups == directions and x.shape[2] == directions * mixer.heads
        return x.cumsum(dim=1)

    monkeypatch.setattr(lamo, "ssd_scan", running_sum)
    mixer = SSDMixer(4, spatial_dims=len(grid), state_size=3, heads=2,
                     directions=directions).double()
    x = torch.randn(2, mixer.inner, *grid, dtype=torch.float64)
    got = mixer.scan(x)
    height, width = (1, *grid) if len(grid) == 1 else grid
    flat = x.reshape(2, mixer.inner, height * width)
    expected = torch.zeros_like(flat)
    for order in scan_orders(directions, len(grid)):
        rank = _ranks(order, height, width)
        before = (rank[None, :] <= rank[:, None]).to(x.dtype)     # [point, earlier point]
        expected += flat @ before.T
    torch.testing.assert_close(got, expected.reshape(x.shape), rtol=1e-12, atol=1e-12)


def _copy_directions(source, target, picked):
    """Copy ``source``'s weights into ``target``, whose directions are ``picked`` of
    ``source``'s (per-direction parameters sliced), everything else as is."""
    state = {}
    for name, value in source.state_dict().items():
        if name.endswith(("mixer.x_proj", "mixer.A_log", "mixer.dt_bias", "mixer.D")):
            per = value.unflatten(0, (len(source.layers[0].mixer.orders), -1))
            value = per[list(picked)].flatten(0, 1)
        state[name] = value
    target.load_state_dict(state, strict=True)


def test_fewer_directions_equal_four_with_the_others_silenced():
    # Directions 1 and 2 are orders (0,) and (0, 2) of the four: a four-direction model whose
    # other directions output nothing (B = C = Δ-input = 0 and D = 0) computes exactly what
    # the smaller model computes with the same weights; switched on, the outputs differ.
    torch.manual_seed(2)
    four = tiny(depth=2, directions=4).double()
    x = torch.randn(2, 1, 9, 9, dtype=torch.float64)
    outputs = {}
    with torch.no_grad():
        outputs[4] = four(x)
        for directions, picked in ((1, (0,)), (2, (0, 2))):
            smaller = tiny(depth=2, directions=directions).double()
            _copy_directions(four, smaller, picked)
            outputs[directions] = smaller(x)
            silenced = tiny(depth=2, directions=4).double()
            silenced.load_state_dict(four.state_dict())
            heads = silenced.layers[0].mixer.heads
            for layer in silenced.layers:
                mixer = layer.mixer
                for k in set(range(4)) - set(picked):
                    mixer.x_proj[k].zero_()
                    mixer.D[k * heads:(k + 1) * heads].zero_()
            torch.testing.assert_close(silenced(x), outputs[directions], rtol=1e-12,
                                       atol=1e-12)
    for a, b in ((1, 2), (1, 4), (2, 4)):
        assert not torch.allclose(outputs[a], outputs[b], rtol=1e-3, atol=1e-4), (a, b)


def _symmetrise(model):
    """Weights under which transposing the input transposes the output: direction 1
    (column-major) shares direction 0's parameters and 3 shares 2's, depthwise and patch kernels
    are symmetric, the two coordinate channels swap under transposition, and the de-patchify
    places value (i, j) of a patch like (j, i)."""
    with torch.no_grad():
        model.position.normal_()                               # zero at initialisation
        w = model.embed.weight                                 # [E, in + 2, p, p]
        data = w[:, :-2]
        data.copy_((data + data.transpose(-1, -2)) / 2)
        w[:, -1].copy_(w[:, -2].transpose(-1, -2))             # row ↔ column coordinate
        model.position.copy_((model.position + model.position.transpose(-1, -2)) / 2)
        p = model.config.patch
        head = model.head.weight.unflatten(0, (-1, p, p))     # [out, p, p, E]
        head.copy_((head + head.transpose(1, 2)) / 2)
        bias = model.head.bias.unflatten(0, (-1, p, p))
        bias.copy_((bias + bias.transpose(1, 2)) / 2)
        for layer in model.layers:
            mixer = layer.mixer
            conv = mixer.conv.weight
            conv.copy_((conv + conv.transpose(-1, -2)) / 2)
            heads = mixer.heads
            mixer.x_proj[1].copy_(mixer.x_proj[0])
            mixer.x_proj[3].copy_(mixer.x_proj[2])
            for tensor in (mixer.A_log, mixer.dt_bias, mixer.D):
                tensor.normal_(0.0, 0.5)                       # away from the uniform init
                per = tensor.unflatten(0, (4, heads))
                per[1].copy_(per[0])
                per[3].copy_(per[2])


def test_four_directions_commute_with_transposition():
    # Transposing the grid swaps row-major and column-major traversals (and their reverses),
    # so with the symmetric weights above the four-direction model is transpose-equivariant.
    # Two directions (row-major and its reverse) are not, which shows the check can fail.
    torch.manual_seed(3)
    model = tiny(grid=(9, 9), depth=2, pad_multiple=2).double()
    _symmetrise(model)
    x = torch.randn(2, 1, 9, 9, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(model(x.transpose(-1, -2)), model(x).transpose(-1, -2),
                                   rtol=1e-10, atol=1e-12)
        two = tiny(grid=(9, 9), depth=2, pad_multiple=2, directions=2).double()
        _copy_directions(model, two, (0, 2))
        assert not torch.allclose(two(x.transpose(-1, -2)), two(x).transpose(-1, -2),
                                  rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------
# The SSD scan: one kernel call per layer, backends and chunking agree.
# ---------------------------------------------------------------------------------------
def test_each_layer_scans_all_directions_in_one_kernel_call(monkeypatch):
    calls = []
    scan = lamo.ssd_scan

    def counted(x, *args, **kwargs):
        calls.append((tuple(x.shape), kwargs["chunk_size"], kwargs["backend"]))
        return scan(x, *args, **kwargs)

    monkeypatch.setattr(lamo, "ssd_scan", counted)
    model = tiny(depth=3, chunk_size=5)
    with torch.no_grad():
        model(torch.randn(2, 1, 9, 9))
    # 9 → 16 (pad_multiple 8) → 8² = 64 tokens; 4 directions × 1 head of 16 channels.
    assert calls == [((2, 64, 4, 16), 5, "auto")] * 3


def test_reference_and_chunked_backends_agree_in_values_and_gradients():
    results = []
    for backend, chunk_size in (("auto", 8), ("auto", 64), ("reference", 64)):
        torch.manual_seed(4)
        model = tiny(grid=(7, 6), depth=2, pad_multiple=2, scan_backend=backend,
                     chunk_size=chunk_size).double()
        x = torch.randn(2, 1, 7, 6, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(0))
        out = forward_backward(model, x)
        results.append((out.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (out_ref, grads_ref) = results[-1]
    for out, grads in results[:-1]:
        torch.testing.assert_close(out, out_ref, rtol=1e-10, atol=1e-12)
        for name, grad in grads.items():
            torch.testing.assert_close(grad, grads_ref[name], rtol=1e-9, atol=1e-11,
                                       msg=lambda m, name=name: f"{name}: {m}")


# ---------------------------------------------------------------------------------------
# Fitting tasks, saving and loading, golden output.
# ---------------------------------------------------------------------------------------
def test_for_task_folds_history_into_channels_and_halves_directions_on_a_line():
    rollout = Task("rollout", ("u", "v"), ("u", "v"), (64, 64), ("nu",), window=10,
                   horizon=1, dt=0.1)
    config = config_from_dict("lamo", preset="navier-stokes", task=rollout)
    assert (config.in_channels, config.out_channels, config.directions) == (21, 2, 4)
    line = Task("operator", ("a",), ("u",), (100,))
    config = config_from_dict("lamo", preset="darcy", task=line)
    assert (config.grid, config.directions) == ((100,), 2)
    config = config_from_dict("lamo", dict(directions=1), preset="darcy", task=line)
    assert config.directions == 1


def test_json_config_and_safetensors_weights_reproduce_the_outputs(tmp_path):
    torch.manual_seed(5)
    model = tiny(grid=(10, 7), depth=2, heads=2, in_channels=2)
    with torch.no_grad():      # move away from the initialisation (zero position embedding)
        model.position.normal_()
        for layer in model.layers:
            layer.mixer.A_log.normal_()
    (tmp_path / "config.json").write_text(model_to_json(model))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    torch.manual_seed(99)  # a different initialisation, overwritten by the weights
    loaded = model_from_json((tmp_path / "config.json").read_text())
    weights = load_file(tmp_path / "weights.safetensors")
    assert "position" in weights and "layers.1.mixer.A_log" in weights
    assert "coordinates" not in weights                    # rebuilt from the config
    loaded.load_state_dict(weights, strict=True)
    assert loaded.config == model.config
    x = torch.randn(3, 2, 10, 7)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["model"] == "lamo" and "ssmpde_version" in record
    assert record["config"]["heads"] == 2 and record["config"]["grid"] == [10, 7]


def golden_output():
    """The tiny model of the golden test and its output on a fixed input, in float64."""
    from tests.surrogates.make_golden import built_in_float64

    torch.manual_seed(0)
    with built_in_float64():
        model = tiny(grid=(9, 7), depth=2, in_channels=2, chunk_size=16).double()
    with torch.no_grad():      # a non-zero position embedding, so the golden file covers it
        model.position.normal_(0.0, 0.1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 9, 7, generator=g, dtype=torch.float64)
    with torch.no_grad():
        return model(x)


def test_golden_output():
    # Guards against silent changes of the architecture, its initialisation or the SSD kernel.
    # Regenerate only on purpose: python tests/surrogates/make_golden.py --model lamo
    from tests.surrogates.make_golden import check_golden

    check_golden(GOLDEN, golden_output())


# ---------------------------------------------------------------------------------------
# Configuration errors at build time.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(directions=3), "directions must be 1, 2 or 4 on a 2D grid, got 3"),
    (dict(grid=(9,)), "directions must be 1 or 2 (a line has two orders) on a 1D grid, got 4"),
    (dict(heads=3), "heads=3 must divide the inner width expand · width = 16"),
    (dict(heads=0), "heads must be a positive integer, got 0"),
    (dict(pad_multiple=3), "pad_multiple=3 must be a multiple of patch=2"),
    (dict(patch=0), "patch must be a positive integer, got 0"),
    (dict(scan_backend="cuda"), "unknown scan_backend 'cuda'"),
    (dict(positional_embedding="yes"), "positional_embedding must be true or false"),
    (dict(grid=(4, 4, 4)), "grid must be a tuple of 1 or 2 positive integers"),
    (dict(state_size=2.5), "state_size must be a positive integer, got 2.5"),
])
def test_bad_configs_fail_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tiny(**overrides)


# ---------------------------------------------------------------------------------------
# Presets, parameter counts and the registry.
# ---------------------------------------------------------------------------------------
#: Preset → (parameters, the paper's figure or None).
COUNTS = {"darcy": (1_145_924, 1.15e6), "navier-stokes": (10_061_060, 10e6),
          "small": (258_404, None), "1d": (775_490, None)}


@pytest.mark.parametrize("preset", sorted(COUNTS))
def test_preset_parameter_counts_are_stable_and_near_the_papers(preset):
    # A change here is a change of architecture (or of a preset). Built on the meta device:
    # only the count matters.
    with torch.device("meta"):
        count = parameter_count(build_model("lamo", preset=preset))
    expected, paper = COUNTS[preset]
    if paper is not None:
        print(f"lamo {preset}: {count:,} parameters; the paper: about {paper:,.0f} "
              f"({(count - paper) / paper:+.2%})")
        assert abs(count - paper) / paper < 0.01
    assert count == expected


def test_counts_follow_the_released_code_term_by_term():
    # Per layer of the darcy preset (E = 64, inner 128, 4 directions × 4 heads of 32, N = 64):
    # in_proj 64·256, conv 128·9 + 128, x_proj 4·(4 + 2·64)·128, A_log 16, dt_bias 16,
    # D 16·32, out norm 2·128, out_proj 128·64, two LayerNorms 2·2·64, MLP 64·256 + 256 +
    # 256·64 + 64; plus the patch embedding (3·2·2·64 + 64, LayerNorm 128), the positional
    # embedding 44²·64 and the head (LayerNorm 128, 64·4 + 4).
    mixer = 64 * 256 + (128 * 9 + 128) + 4 * (4 + 128) * 128 + 16 + 16 + 16 * 32 + 256 \
        + 128 * 64
    layer = mixer + 4 * 64 + (64 * 256 + 256 + 256 * 64 + 64)
    total = 8 * layer + (3 * 4 * 64 + 64 + 128) + 44 * 44 * 64 + (128 + 64 * 4 + 4)
    assert total == COUNTS["darcy"][0]
    without = parameter_count(tiny(positional_embedding=False))
    assert parameter_count(tiny()) - without == 8 * 8 * 8     # width × 8² tokens


def test_models_command_lists_lamo_and_its_presets(capsys):
    from ssmpde.cli import main

    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "| lamo | darcy | 1,145,924 |" in text
    assert "| lamo | navier-stokes | 10,061,060 |" in text
    assert main(["models", "--describe", "lamo"]) == 0
    text = capsys.readouterr().out
    assert "lamo preset 'small': 258,404 parameters" in text
    assert '"directions": 4' in text
