"""GeoMaNO: ablation switches, the geometric correction, golden output, configuration errors
raised at build time, the preset parameter counts, and the fast layouts against the paper's
equations (the contract of every model, shapes, gradients and save/load included:
test_contract.py)."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ssmpde.surrogates import build_model, config_from_dict, parameter_count
from ssmpde.surrogates.geomano import PAPER_OPTIONS
from ssmpde.surrogates.geometry import GeometryDecoder
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
# Ablation switches (the shapes, gradients and save/load of every preset: test_contract).
# ---------------------------------------------------------------------------------------
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
# Golden output.
# ---------------------------------------------------------------------------------------
def golden_output():
    """The tiny model of the golden test and its output on a fixed input, in float64."""
    from tests.surrogates.make_golden import built_in_float64

    torch.manual_seed(0)
    with built_in_float64():
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
])
def test_bad_configs_fail_at_build_time(overrides, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tiny(**overrides)


# ---------------------------------------------------------------------------------------
# Registry.
# ---------------------------------------------------------------------------------------
def test_preset_parameter_counts_are_stable():
    # The configurations stated in the notes; a change here is a change of architecture.
    # The paper's models lift 2 fewer input channels (no coordinates): 2 · width fewer.
    with torch.device("meta"):
        counts = {p: parameter_count(build_model("geomano", preset=p))
                  for p in ("darcy", "navier-stokes", "paper-darcy", "paper-navier-stokes")}
    assert counts == {"darcy": 1_074_267, "navier-stokes": 8_100_865,
                      "paper-darcy": 1_074_267 - 2 * 64,
                      "paper-navier-stokes": 8_100_865 - 2 * 256}
    assert math.prod(build_model("geomano", preset="darcy").config.latent_grid) == 289


# ---------------------------------------------------------------------------------------
# The fast layouts against GeoMaNO written out (Algorithm 1, Eq. 6, Eq. 7), float64.
# ---------------------------------------------------------------------------------------
def mixer_reference(mixer, tokens):
    """Algorithm 1 as the paper draws it: every direction a flipped or transposed copy,
    stacked, scanned by the loop reference, mapped back and summed. ``[b, E, *grid]``."""
    import torch.nn.functional as F

    from ssmpde.kernels import cross_merge, cross_scan, selective_scan_ref
    from ssmpde.surrogates.layers import channels_first, channels_last

    _, _, *grid = tokens.shape
    x, z = channels_first(mixer.in_proj(channels_last(tokens))).chunk(2, dim=1)
    x = mixer.conv(x)
    if mixer.spatial_dims == 1:
        x = x[..., : grid[0]]
    x = F.silu(x)
    xs = torch.stack([x, x.flip(-1)], dim=1) if mixer.spatial_dims == 1 else cross_scan(x)
    projected = torch.einsum("bkdl,kcd->bkcl", xs, mixer.x_proj)
    dt, B, C = projected.split([mixer.rank, mixer.state_size, mixer.state_size], dim=2)
    dt = torch.einsum("bkrl,kdr->bkdl", dt, mixer.dt_proj)
    y = selective_scan_ref(xs.flatten(1, 2), dt.flatten(1, 2), -torch.exp(mixer.A_log), B, C,
                           D=mixer.D, R=mixer.R, delta_bias=mixer.dt_bias.flatten())
    y = y.unflatten(1, (mixer.directions, mixer.inner))
    y = y[:, 0] + y[:, 1].flip(-1) if mixer.spatial_dims == 1 else cross_merge(y, *grid)
    y = mixer.norm(channels_last(y))
    if mixer.norm_activation:     # line 10: σ(LayerNorm(Y)) ∘ σ(Z)
        y = F.silu(y)
    return channels_first(mixer.out_proj(y * F.silu(channels_last(z))))


def assert_same_map(fast, reference, inputs, parameters):
    """Equal values, and equal gradients for the inputs and every parameter."""
    torch.testing.assert_close(fast, reference, rtol=1e-10, atol=1e-12)
    weights = torch.randn_like(reference)
    leaves = [*inputs, *parameters]
    for a, b in zip(torch.autograd.grad((fast * weights).sum(), leaves, retain_graph=True),
                    torch.autograd.grad((reference * weights).sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dims, grid, norm_activation",
                         [(2, (5, 7), False), (2, (1, 4), False), (1, (9,), False),
                          (1, (1,), False), (2, (5, 7), True), (1, (9,), True)],
                         ids=["5x7", "1x4", "length9", "length1", "5x7-activation",
                              "length9-activation"])
def test_mixer_equals_algorithm_1_with_copies(dims, grid, norm_activation):
    # The mixer scans the reversed directions with reverse=True on one sequence, the column
    # orders on one transposed copy, and projects every direction in one product in grid
    # order; the paper's flips, stacks and merges must give the same map.
    torch.manual_seed(6)
    mixer = SelectiveScanMixer(8, spatial_dims=dims, state_size=3, scan="1d",
                               correction="learnable",
                               norm_activation=norm_activation).double()
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.1 * torch.randn_like(p))   # R ≠ 0, D ≠ 1, and so on
    tokens = torch.randn(2, 8, *grid, dtype=torch.float64, requires_grad=True)
    assert_same_map(mixer(tokens), mixer_reference(mixer, tokens), [tokens],
                    list(mixer.parameters()))


@pytest.mark.parametrize("preset", ["darcy", "paper-darcy"])
def test_encoder_and_decoder_equal_equations_6_and_7(preset):
    torch.manual_seed(7)
    model = tiny(preset=preset, grid=(7, 5), latent_grid=(3, 2)).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    encoder, decoder = model.encoder, model.decoder
    ours = preset == "darcy"   # the coordinates as inputs, the prior and the point skip
    x = torch.randn(2, 3 if ours else 1, 7, 5, dtype=torch.float64, requires_grad=True)
    prior = encoder.prior if ours else 0.0

    # Eq. 6: Y = GELU(Linear(X)), W = softmax_L(Linear(Y) [+ prior]), Z = LN(W^T Y).
    y = F.gelu(encoder.lift(x.flatten(2).transpose(1, 2)))
    w = torch.softmax(encoder.weights(y) + prior, dim=-1)
    z = encoder.norm(w.transpose(1, 2) @ y).transpose(1, 2).unflatten(2, (3, 2))
    tokens, points = encoder(x, return_points=True)
    assert_same_map(tokens, z, [x], list(encoder.parameters()))

    # Eq. 7, token by point: W = softmax_L(Linear(Z) [+ prior^T]), X = LN(proj(W^T Z)), then
    # the head [of X + Y, the point skip].
    zz = z.detach().requires_grad_()
    flat = zz.flatten(2).transpose(1, 2)
    w = torch.softmax(decoder.weights(flat) + (decoder.prior.T if ours else 0.0), dim=1)
    x_out = decoder.norm(decoder.proj(w.transpose(1, 2) @ flat))
    expected = decoder.head(x_out + y if ours else x_out).transpose(1, 2).unflatten(2, (7, 5))
    assert_same_map(decoder(zz, y if ours else None), expected, [zz],
                    list(decoder.parameters()))


# ---------------------------------------------------------------------------------------
# The paper's models: the presets without this package's additions.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["darcy", "navier-stokes"])
def test_paper_presets_are_ours_without_the_additions(preset):
    ours = config_from_dict("geomano", preset=preset)
    paper = config_from_dict("geomano", preset=f"paper-{preset}")
    assert (ours.input_coordinates, ours.geometric_prior, ours.point_skip,
            ours.norm_activation) == (True, True, True, False)
    assert paper == dataclasses.replace(ours, **PAPER_OPTIONS)
    assert (paper.input_coordinates, paper.geometric_prior, paper.point_skip,
            paper.norm_activation) == (False, False, False, True)
    # Positional information only where the paper's best model has it (Table 3).
    assert paper.positional_encoding == (preset == "navier-stokes")


def test_configs_saved_before_the_paper_options_build_the_model_they_trained():
    # A checkpoint's config.json from before these options lacks them: its defaults must be
    # that earlier model (coordinates, prior, skip, no activation of LN(Y)).
    config = config_from_dict("geomano", preset="darcy", values=dict(width=8, depth=1))
    earlier = {name: value for name, value in dataclasses.asdict(config).items()
               if name not in ("input_coordinates", "geometric_prior", "norm_activation")}
    assert config_from_dict("geomano", earlier) == config
    assert tuple(PAPER_OPTIONS) == ("input_coordinates", "geometric_prior", "point_skip",
                                    "norm_activation")


def test_paper_model_has_no_geometric_prior():
    model = tiny(preset="paper-darcy")
    assert model.encoder.prior is None and model.decoder.prior is None
    assert not [name for name, _ in model.named_buffers() if "prior" in name]
    assert tiny().encoder.prior is not None   # ours has it, so the check can fail


def test_paper_model_has_no_point_skip(monkeypatch):
    # The decoder is asked for no skip; ours hands it the lifted points.
    seen = []
    decode = GeometryDecoder.decode

    def spy(self, tokens, points=None):
        seen.append(points)
        return decode(self, tokens, points)

    monkeypatch.setattr(GeometryDecoder, "decode", spy)
    x = torch.randn(2, 1, 9, 9)
    tiny(preset="paper-darcy")(x)
    tiny()(x)
    assert seen[0] is None and seen[1] is not None


def test_paper_model_reads_no_coordinates():
    model = tiny(preset="paper-darcy", in_channels=2)
    assert model.encoder.lift.in_features == 2
    assert "coordinates" not in dict(model.named_buffers())
    assert tiny(in_channels=2).encoder.lift.in_features == 2 + 2   # ours: values + (y, x)


@pytest.mark.parametrize("scan", ["1d", "2d"])
def test_paper_model_applies_the_activation_of_algorithm_1_line_10(scan):
    # Hooks read LN(Y), the gate's input Z and what out_proj receives in every mixer: it must
    # be SiLU(LN(Y)) ⊙ SiLU(Z) in the paper's model, LN(Y) ⊙ SiLU(Z) in ours.
    torch.manual_seed(8)
    x = torch.randn(2, 1, 9, 9)
    for preset, activation in (("paper-darcy", F.silu), ("darcy", lambda t: t)):
        model = tiny(preset=preset, scan=scan, depth=2)
        captured = []
        for layer in model.layers:
            mixer, seen = layer.mixer, {}
            hooks = [mixer.in_proj.register_forward_hook(
                         lambda m, i, o, seen=seen: seen.update(z=o[..., o.shape[-1] // 2:])),
                     mixer.norm.register_forward_hook(
                         lambda m, i, o, seen=seen: seen.update(norm=o)),
                     mixer.out_proj.register_forward_hook(
                         lambda m, i, o, seen=seen: seen.update(gated=i[0]))]
            captured.append((mixer, seen, hooks))
        with torch.no_grad():
            model(x)
            for mixer, seen, hooks in captured:
                expected = activation(seen["norm"]) * F.silu(seen["z"])
                torch.testing.assert_close(seen["gated"], expected, rtol=1e-6, atol=1e-7)
                for hook in hooks:
                    hook.remove()
