"""SS-NO: shapes and gradients on odd grids, ablation switches (the damping-free ones have ρ = 0
exactly), the temporal memory as an S4 block (nonlinear, residual), agreement of the S4D
backends, exact save/load, golden outputs, configuration errors raised at build time, the
paper's parameter counts (Table 2 and TorusLi), and the earlier layout (``layout="ssmpde"``)
that checkpoints written before the paper's layout load into (the contract of every model:
test_contract.py)."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from ssmpde.kernels.s4d import s4d_kernel
from ssmpde.surrogates import (
    build_model,
    model_from_json,
    model_to_json,
    parameter_count,
)
from ssmpde.surrogates.ssno import S4DLayer, _along

GOLDEN = Path(__file__).parent / "golden" / "ssno_tiny.json"
#: The first SS-NO's output (now layout="ssmpde"), written before the paper's layout existed.
#: Never regenerated: it is what the checkpoints of that version compute.
GOLDEN_SSMPDE = Path(__file__).parent / "golden" / "ssno_ssmpde_tiny.json"


def tiny(**overrides):
    """A small SS-NO (few channels, modes and blocks) on a 9×13 grid."""
    config = dict(grid=(9, 13), width=8, depth=2, state_size=4, memory_state_size=4,
                  memory_after=1)
    config.update(overrides)
    return build_model("ssno", **config)


def input_for(model, batch=2, generator=None, dtype=torch.float32):
    """A random input of the model's full shape ``[batch, window, in_channels, *grid]``."""
    c = model.config
    return torch.randn(batch, c.window, c.in_channels, *c.grid, generator=generator,
                       dtype=dtype)


def forward_backward(model, x):
    out = model(x)
    (out.square().mean() + out.mean()).backward()
    return out


def s4d_layers(model):
    """The spatial S4D layers of the blocks (not the temporal memory)."""
    return [getattr(layer, "ssm", layer) for block in model.blocks for layer in block.axes]


# ---------------------------------------------------------------------------------------
# Shapes, finiteness and gradients on odd grids.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, batch", [
    (dict(grid=(32,), in_channels=2, out_channels=3), 2),
    (dict(grid=(97,), window=4, memory=True), 3),
    (dict(grid=(512,), window=2), 2),
    (dict(grid=(64, 64), window=3, memory=True, memory_after=2), 2),
    (dict(grid=(33, 17), window=2, memory=True, mixing="parallel", in_channels=3), 2),
    (dict(grid=(9, 13), learn_damping=False, learn_frequency=False), 3),
    (dict(grid=(33, 17), window=2, memory=True, layout="ssmpde"), 2),
    (dict(grid=(21,), window=3, memory=True, layout="ssmpde", learn_damping=False), 2),
], ids=["1d-32", "1d-97-memory", "1d-512", "64x64-memory", "33x17-parallel", "9x13-fixed",
        "33x17-ssmpde", "1d-21-ssmpde-frequency-only"])
def test_forward_backward_shapes_and_gradients(overrides, batch):
    torch.manual_seed(0)
    model = tiny(**overrides)
    c = model.config
    x = input_for(model, batch)
    if c.window == 1:
        x = x[:, 0]                               # the [batch, in_channels, *grid] form
    out = forward_backward(model, x)
    assert out.shape == (batch, c.out_channels, *c.grid)
    assert torch.isfinite(out).all()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"zero gradient on {name}"
    buffers = dict(model.named_buffers())
    for layer in s4d_layers(model):
        for name, learn in (("damping", c.learn_damping), ("frequency", c.learn_frequency)):
            tensor = getattr(layer, name)
            assert isinstance(tensor, torch.nn.Parameter) == learn, name
            assert any(b is tensor for b in buffers.values()) == (not learn), name


# ---------------------------------------------------------------------------------------
# Ablation switches.
# ---------------------------------------------------------------------------------------
MEMORY_VARIANTS = {
    "no-memory-w1": dict(memory=False, window=1),
    "no-memory-w3": dict(memory=False, window=3),
    "memory-w1": dict(memory=True, window=1, memory_after=0),
    "memory-w3-after0": dict(memory=True, window=3, memory_after=0),
    "memory-w3-afterdepth": dict(memory=True, window=3, memory_after=2),
}


# Every memory variant with both mixings, and every damping/frequency combination with both
# mixings (on a memory model, so the memory's S4D runs next to fixed spatial ones).
ABLATIONS = [
    *(dict(mixing=mixing, **memory) for memory in MEMORY_VARIANTS.values()
      for mixing in ("sequential", "parallel")),
    *(dict(mixing=mixing, learn_damping=damping, learn_frequency=frequency,
           **MEMORY_VARIANTS["memory-w3-after0"])
      for mixing in ("sequential", "parallel") for damping in (True, False)
      for frequency in (True, False) if not (damping and frequency)),
]


@pytest.mark.parametrize("switches", ABLATIONS, ids=lambda d: "-".join(
    f"{k}={v}" for k, v in d.items() if k not in ("window",)))
def test_every_ablation_switch_builds_and_runs(switches):
    torch.manual_seed(1)
    model = tiny(grid=(7, 5), **switches)
    learn_damping = switches.get("learn_damping", True)
    learn_frequency = switches.get("learn_frequency", True)
    out = forward_backward(model, input_for(model))
    assert out.shape == (2, 1, 7, 5) and torch.isfinite(out).all()
    parameters = dict(model.named_parameters())
    assert ("blocks.0.axes.0.ssm.damping" in parameters) == learn_damping
    assert ("blocks.0.axes.1.ssm.frequency" in parameters) == learn_frequency
    assert ("memory.ssm.C" in parameters) == switches["memory"]
    # The temporal memory always learns its damping and frequencies.
    assert ("memory.ssm.damping" in parameters) == switches["memory"]


@pytest.mark.parametrize("learn_frequency", [True, False], ids=["frequency-only", "fixed"])
def test_without_learned_damping_there_is_none(learn_frequency):
    # The paper's "Frequency only" (and "Fixed") ablation: the damping is zero, not frozen at
    # its initial value, and stays zero through training.
    torch.manual_seed(2)
    model = tiny(window=3, memory=True, learn_damping=False, learn_frequency=learn_frequency)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        forward_backward(model, input_for(model))
        optimizer.step()
    for layer in s4d_layers(model):
        assert not isinstance(layer.damping, torch.nn.Parameter)
        assert torch.equal(layer.damping_rate, torch.zeros_like(layer.damping_rate))
    # ... not saved either (a constant of the config; −∞ would read as a diverged run) ...
    assert not any(key.endswith("ssm.damping") and key.startswith("blocks")
                   for key in model.state_dict())
    assert all(torch.isfinite(w).all() for w in model.state_dict().values())
    # ... while the memory's damping is learned.
    assert isinstance(model.memory.ssm.damping, torch.nn.Parameter)


def test_zero_damping_kernel_does_not_decay_and_the_default_one_does():
    # One mode (ω = π), Δ = 0.1: with ρ = ½ the kernel's envelope falls by e^{-5} over 100
    # lags; without damping it keeps its amplitude.
    envelopes = {}
    for learn_damping in (True, False):
        layer = S4DLayer(1, 2, bidirectional=False, learn_damping=learn_damping)
        with torch.no_grad():
            layer.log_dt.fill_(torch.log(torch.tensor(0.1)))
            layer.C.zero_()
            layer.C[0, 0, 1, 0] = 1.0
            kernel = s4d_kernel(layer.log_dt, layer.damping, layer.frequency, layer.C, 200)
        envelopes[learn_damping] = (kernel[0, 0, 100:].abs().max()
                                    / kernel[0, 0, :100].abs().max()).item()
    assert envelopes[True] < 0.01
    assert envelopes[False] == pytest.approx(1.0, abs=1e-3)


def test_fixed_frequency_stays_at_its_initial_value():
    torch.manual_seed(2)
    model = tiny(learn_damping=True, learn_frequency=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    forward_backward(model, input_for(model))
    optimizer.step()
    after = model.state_dict()
    for key, value in before.items():
        if key.endswith("frequency") and key.startswith("blocks"):
            assert torch.equal(value, after[key]), key
    assert not torch.equal(before["blocks.0.axes.0.ssm.C"], after["blocks.0.axes.0.ssm.C"])
    assert not torch.equal(before["blocks.0.axes.0.ssm.damping"],
                           after["blocks.0.axes.0.ssm.damping"])
    # S4D-Lin: Re A = −½ at the start, Im A = π n.
    layer = tiny().blocks[0].axes[0].ssm
    torch.testing.assert_close(layer.damping_rate, torch.full_like(layer.damping, 0.5))
    torch.testing.assert_close(layer.frequency[0], torch.pi * torch.arange(4.0))


def test_parallel_and_sequential_mixing_differ_in_2d_and_agree_in_1d():
    for grid, same in (((9, 13), False), ((23,), True)):
        torch.manual_seed(3)
        sequential = tiny(grid=grid, mixing="sequential", window=2, memory=True)
        parallel = tiny(grid=grid, mixing="parallel", window=2, memory=True)
        parallel.load_state_dict(sequential.state_dict(), strict=True)
        x = input_for(sequential)
        with torch.no_grad():
            a, b = sequential(x), parallel(x)
        if same:
            assert torch.equal(a, b)
        else:
            assert not torch.allclose(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("axis", [0, 1])
def test_s4d_along_an_axis_acts_on_the_lines_of_that_axis(axis):
    # An independent loop over the lines of the grid: _along must move the right axis.
    torch.manual_seed(4)
    layer = S4DLayer(3, 4, bidirectional=True)
    v = torch.randn(2, 3, 6, 5)
    with torch.no_grad():
        out = _along(v, axis, layer)
        for j in range(v.shape[3 - axis]):
            line = v[:, :, :, j] if axis == 0 else v[:, :, j, :]
            got = out[:, :, :, j] if axis == 0 else out[:, :, j, :]
            torch.testing.assert_close(got, layer(line))


def test_spatial_layer_is_residual_with_its_feed_forward():
    # u + F(GELU(K(LN u))): zero the feed-forward's output layer and a block is its channel
    # mixing alone; the feed-forward is width → 2·width → width.
    torch.manual_seed(4)
    model = tiny(grid=(11,), window=1)
    block = model.blocks[0]
    layer = block.axes[0]
    assert [m.out_features for m in layer.feedforward if hasattr(m, "out_features")] == [16, 8]
    v = torch.randn(2, 8, 11)
    with torch.no_grad():
        layer.feedforward[-1].weight.zero_()
        layer.feedforward[-1].bias.zero_()
        torch.testing.assert_close(layer(v), torch.zeros_like(v))
        mix = block.mix(torch.nn.functional.gelu(block.norm(v.movedim(1, -1)))).movedim(-1, 1)
        torch.testing.assert_close(block(v), v + mix)


# ---------------------------------------------------------------------------------------
# Temporal memory: an S4 block (S4D, GELU, output linear, residual).
# ---------------------------------------------------------------------------------------
def test_memory_reads_earlier_frames_through_the_temporal_kernel():
    torch.manual_seed(5)
    model = tiny(window=4, memory=True, memory_after=1)
    x = input_for(model)
    perturbed = x.clone()
    perturbed[:, 0] += 1.0
    with torch.no_grad():
        assert not torch.allclose(model(x), model(perturbed), rtol=1e-4, atol=1e-5)
        # With the temporal kernel switched off (C = 0) only the last frame is left, so the
        # dependence above goes through the memory and nothing else.
        model.memory.ssm.C.zero_()
        torch.testing.assert_close(model(x), model(perturbed), rtol=0, atol=0)
        last = x.clone()
        last[:, -1] += 1.0
        assert not torch.allclose(model(x), model(last))


def test_memory_block_is_nonlinear_with_a_residual():
    torch.manual_seed(5)
    memory = tiny(grid=(6, 5), window=4, memory=True).memory
    a, b = torch.randn(2, 2, 4, 8, 6, 5).unbind(0)      # [batch, T, width, *grid] each
    with torch.no_grad():
        zero = memory(torch.zeros_like(a))
        # An affine map M has M(a + b) − M(a) − M(b) + M(0) = 0; the GELU breaks it.
        defect = memory(a + b) - memory(a) - memory(b) + zero
        assert defect.abs().max() > 1e-2
        # The residual: without the output linear (W = 0, b = 0) the memory passes the last
        # frame through unchanged.
        memory.mix.weight.zero_()
        memory.mix.bias.zero_()
        torch.testing.assert_close(memory(a), a[:, -1], rtol=0, atol=0)


def test_without_memory_the_frames_are_channels():
    torch.manual_seed(6)
    model = tiny(window=3, memory=False)
    x = input_for(model)
    perturbed = x.clone()
    perturbed[:, 0] += 1.0
    with torch.no_grad():
        assert not torch.allclose(model(x), model(perturbed))
    assert model.lift.in_features == 3 * 1 + 2     # one shared linear lifting


@pytest.mark.parametrize("bidirectional", [False, True])
def test_temporal_s4d_is_causal_and_spatial_s4d_is_not(bidirectional):
    torch.manual_seed(7)
    layer = S4DLayer(3, 4, bidirectional=bidirectional)
    u = torch.randn(2, 3, 12)
    t = 7
    bumped = u.clone()
    bumped[..., t] += 1.0
    with torch.no_grad():
        a, b = layer(u), layer(bumped)
    changed = (a - b).abs().amax(dim=(0, 1)) > 1e-6
    assert changed[t:].all()
    assert changed[:t].any() == bidirectional
    # The model's temporal memory is a causal layer (one kernel), its spatial ones are not.
    model = tiny(window=3, memory=True)
    assert model.memory.ssm.C.shape[0] == 1
    assert all(layer.C.shape[0] == 2 for layer in s4d_layers(model))


@pytest.mark.parametrize("memory", [False, True])
def test_window_one_accepts_both_input_layouts(memory):
    torch.manual_seed(8)
    model = tiny(window=1, memory=memory, memory_after=1)
    x = input_for(model)
    with torch.no_grad():
        assert torch.equal(model(x), model(x[:, 0]))


# ---------------------------------------------------------------------------------------
# The FFT convolution and the loop recurrence give the same model.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid", [(11,), (6, 5)], ids=["1d", "2d"])
def test_fft_and_reference_backends_agree_in_values_and_gradients(grid, monkeypatch):
    from ssmpde.kernels import reference

    calls = []
    loop = reference.s4d_ref

    def counted(u, *args, **kwargs):
        calls.append(u.shape)
        return loop(u, *args, **kwargs)

    monkeypatch.setattr(reference, "s4d_ref", counted)
    results = []
    for backend in ("fft", "reference"):
        torch.manual_seed(9)
        model = tiny(grid=grid, window=3, memory=True, memory_after=1, s4d_backend=backend)
        model = model.double()
        with torch.no_grad():                 # away from the S4D-Lin initialisation
            for layer in [*s4d_layers(model), model.memory.ssm]:
                layer.damping.add_(0.3 * torch.randn_like(layer.damping))
                layer.frequency.add_(torch.randn_like(layer.frequency))
        x = input_for(model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        out = forward_backward(model, x)
        results.append((out.detach(), {n: p.grad for n, p in model.named_parameters()}))
        # Every S4D application (one per block and grid axis, and the memory) ran the loop
        # under "reference", none under "fft".
        assert len(calls) == (0 if backend == "fft" else 2 * len(grid) + 1)
    (out_fft, grads_fft), (out_ref, grads_ref) = results
    torch.testing.assert_close(out_fft, out_ref, rtol=1e-9, atol=1e-9)
    assert grads_fft.keys() == grads_ref.keys()
    for name in grads_fft:
        torch.testing.assert_close(grads_fft[name], grads_ref[name], rtol=1e-9, atol=1e-9,
                                   msg=lambda m, name=name: f"{name}: {m}")


# ---------------------------------------------------------------------------------------
# Resolution.
# ---------------------------------------------------------------------------------------
def test_weights_do_not_depend_on_the_grid_size():
    torch.manual_seed(10)
    coarse = tiny(grid=(32,), window=2, memory=True)
    fine = tiny(grid=(64,), window=2, memory=True)
    assert parameter_count(coarse) == parameter_count(fine)
    fine.load_state_dict(coarse.state_dict(), strict=True)   # same shapes, same names
    with torch.no_grad():
        out = fine(input_for(fine))
    assert out.shape == (2, 1, 64) and torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------
# Saving and loading, golden output.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fixed", [False, True], ids=["learned", "fixed"])
def test_json_config_and_safetensors_weights_reproduce_the_outputs(tmp_path, fixed):
    torch.manual_seed(11)
    model = tiny(window=3, memory=True, mixing="parallel", learn_damping=not fixed,
                 learn_frequency=not fixed)
    with torch.no_grad():
        for layer in s4d_layers(model):      # move away from the initialisation
            if not fixed:
                layer.damping.normal_()
            layer.frequency.uniform_(-3, 3)
    (tmp_path / "config.json").write_text(model_to_json(model))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    torch.manual_seed(99)  # a different initialisation, overwritten by the weights
    loaded = model_from_json((tmp_path / "config.json").read_text())
    weights = load_file(tmp_path / "weights.safetensors")
    assert ("blocks.0.axes.0.ssm.damping" in weights) == (not fixed)
    assert "blocks.1.axes.1.ssm.frequency" in weights
    loaded.load_state_dict(weights, strict=True)
    assert loaded.config == model.config
    x = input_for(model, batch=3)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))
    record = json.loads((tmp_path / "config.json").read_text())
    assert record["model"] == "ssno" and "ssmpde_version" in record
    assert record["config"]["learn_damping"] == (not fixed)


#: The model_config of a KS checkpoint written before the paper's layout: no ``layout``.
OLD_KS_CONFIG = {
    "in_channels": 1, "out_channels": 1, "grid": [128], "window": 4, "width": 64,
    "lifting": 128, "depth": 4, "state_size": 64, "learn_damping": True,
    "learn_frequency": True, "mixing": "sequential", "memory": True, "memory_after": None,
    "memory_state_size": 64, "s4d_backend": "fft"}


def test_an_old_checkpoint_config_is_the_ssmpde_layout():
    text = json.dumps({"model": "ssno", "config": OLD_KS_CONFIG, "ssmpde_version": "0.1"})
    model = model_from_json(text)
    assert model.config.layout == "ssmpde" and model.config.lifting == 128
    assert parameter_count(model) == 149_057          # what that version's KS model had
    assert model.config == build_model("ssno", preset="ks", layout="ssmpde").config
    # the resolved layout is what a new checkpoint records
    assert json.loads(model_to_json(model))["config"]["layout"] == "ssmpde"


def test_damping_weights_for_a_damping_free_layer_are_refused_with_the_reason():
    # learn_damping=False used to freeze ρ at ½ (a saved buffer); now it means ρ = 0.
    model = tiny(grid=(11,), layout="ssmpde", learn_damping=False)
    weights = model.state_dict()
    weights["blocks.0.axes.0.damping"] = torch.zeros(8, 4)
    with pytest.raises(RuntimeError, match=r"blocks\.0\.axes\.0\.damping is in the weights "
                                           r"but this layer has no damping .* retrain it"):
        model.load_state_dict(weights)


def golden_output(**overrides):
    """The tiny model of the golden test and its output on a fixed input, in float64."""
    from tests.surrogates.make_golden import built_in_float64

    torch.manual_seed(0)
    with built_in_float64():
        model = tiny(grid=(12, 10), in_channels=2, window=3, memory=True, memory_after=1,
                     **overrides).double()
    g = torch.Generator().manual_seed(0)
    x = input_for(model, generator=g, dtype=torch.float64)
    with torch.no_grad():
        return model(x)


def test_golden_output():
    # Guards against silent changes of the architecture, its initialisation or the S4D
    # kernels. Regenerate only on purpose: python tests/surrogates/make_golden.py --model ssno
    from tests.surrogates.make_golden import check_golden

    check_golden(GOLDEN, golden_output())


def test_ssmpde_layout_is_the_first_ssno_bit_for_bit():
    # The first version's tiny golden model (lifting 16): its initialisation and output are
    # reproduced, so its checkpoints load into layout="ssmpde" and compute what they did.
    from tests.surrogates.make_golden import check_golden

    check_golden(GOLDEN_SSMPDE, golden_output(lifting=16))


# ---------------------------------------------------------------------------------------
# Configuration errors at build time.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (dict(mixing="zigzag"), "mixing must be one of ('sequential', 'parallel'), got 'zigzag'"),
    (dict(s4d_backend="cuda"), "unknown s4d_backend 'cuda'"),
    (dict(s4d_backend="reference", learn_damping=False),
     "s4d_backend='reference' needs learn_damping"),
    (dict(memory_after=3), "memory_after must be an integer in 0..depth=2, got 3"),
    (dict(memory_after=-1), "memory_after must be an integer in 0..depth=2, got -1"),
    (dict(grid=(4, 4, 4)), "grid must be a tuple of 1 or 2 positive integers"),
    (dict(grid=(0,)), "grid must be a tuple of 1 or 2 positive integers, got (0,)"),
    (dict(width=0), "width must be a positive integer, got 0"),
    (dict(mlp_ratio=0), "mlp_ratio must be a positive integer, got 0"),
    (dict(state_size=2.5), "state_size must be a positive integer, got 2.5"),
    (dict(learn_damping="yes"), "learn_damping must be true or false, got 'yes'"),
    (dict(layout="ffno"), "layout must be one of ('paper', 'ssmpde'), got 'ffno'"),
    (dict(layout="paper", lifting=16), "SS-NO lifting=16 is the hidden width of the lifting "
                                       "and projection MLPs of layout='ssmpde'"),
    (dict(layout="ssmpde", lifting=0), "lifting must be a positive integer, got 0"),
])
def test_bad_configs_fail_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        tiny(**overrides)


def test_wrong_input_shape_names_the_expected_one():
    model = tiny(window=3, memory=True)
    with pytest.raises(ValueError, match=r"expects input \[batch, 3, 1, 9, 13\]"):
        model(torch.randn(2, 3, 1, 9, 12))
    with pytest.raises(ValueError, match=r"got \[2, 3, 1, 8, 13\]"):
        model(torch.randn(2, 3, 1, 8, 13))
    with pytest.raises(ValueError, match=r"expects input \[batch, 3, 1, 9, 13\]"):
        model(torch.randn(2, 1, 9, 13))   # the short form is for window 1 only
    single = tiny()
    with pytest.raises(ValueError, match=r"expects input \[batch, 1, 1, 9, 13\]"):
        single(torch.randn(2, 2, 9, 13))


# ---------------------------------------------------------------------------------------
# The paper's parameter counts, presets and the registry.
# ---------------------------------------------------------------------------------------
def ks_count(**overrides):
    return parameter_count(build_model("ssno", preset="ks", **overrides))


#: Table 2 of the paper: SS-NO on KS at 128 points, by state size and ablation.
TABLE_2 = {
    (64, "all"): 203_713, (64, "damping only"): 187_329,
    (64, "frequency only"): 187_329, (64, "fixed"): 170_945,
    (32, "all"): 154_561, (32, "damping only"): 146_369,
    (32, "frequency only"): 146_369, (32, "fixed"): 138_177,
    (16, "all"): 129_985, (16, "damping only"): 125_889,
    (16, "frequency only"): 125_889, (16, "fixed"): 121_793,
}
SETTINGS = {"all": dict(learn_damping=True, learn_frequency=True),
            "damping only": dict(learn_damping=True, learn_frequency=False),
            "frequency only": dict(learn_damping=False, learn_frequency=True),
            "fixed": dict(learn_damping=False, learn_frequency=False)}


@pytest.mark.parametrize("state, setting", list(TABLE_2), ids=lambda v: str(v))
def test_ks_counts_are_the_papers_table_2(state, setting):
    assert ks_count(state_size=state, **SETTINGS[setting]) == TABLE_2[state, setting]


def test_torus_count_is_the_papers_torusli_369k():
    # The paper gives 369k parameters for SS-NO on TorusLi (64², vorticity in and out).
    count = parameter_count(build_model("ssno", preset="torus"))
    assert count == 369_409 and round(count, -3) == 369_000


@pytest.mark.parametrize("preset, count", [("ks", 149_057), ("torus", 248_001)])
def test_ssmpde_layout_counts_are_the_first_versions(preset, count):
    assert parameter_count(build_model("ssno", preset=preset, layout="ssmpde")) == count


@pytest.mark.e2e
def test_models_command_lists_ssno_and_its_presets(capsys):
    from ssmpde.cli import main

    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "| ssno | ks | 203,713 |" in text
    assert "| ssno | torus | 369,409 |" in text
    assert main(["models", "--describe", "ssno"]) == 0
    text = capsys.readouterr().out
    assert "ssno preset 'ks': 203,713 parameters" in text
    assert '"memory": true' in text
