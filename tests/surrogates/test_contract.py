"""The contract of every registered model, over every model and preset at tiny sizes.

Each preset is fitted to a small rollout task of its own dimension (two fields and one
conditioning channel, a window of two frames, an odd grid) with small widths, depths and
state sizes, then: its config round-trips through JSON, it builds from the registry, it maps
``[batch, *input_shape]`` to ``[batch, out_channels, *grid]``, it refuses a config of another
type and an input of another shape with a message naming what it wanted, its parameter count
is the one the registry's memory check counts on the meta device, a seed fixes it, every
parameter gets a gradient, and its JSON config with its safetensors weights reproduces it.

What a single model does beyond this (its numerics against references, its golden output,
its own configuration errors) is tested in its own file.
"""

import dataclasses
import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from ssmpde.surrogates import (
    Surrogate,
    build_model,
    config_from_dict,
    get_model_class,
    list_models,
    model_from_json,
    model_to_json,
    parameter_count,
)
from ssmpde.surrogates.datasets import Task

MODELS = [(name, preset) for name in list_models()
          for preset in sorted(get_model_class(name).PRESETS)]
IDS = [f"{name}-{preset}" for name, preset in MODELS]

#: Small sizes, for the models that have these options.
SMALL = dict(width=8, depth=1, state_size=4, memory_state_size=4, latent_width=8,
             regressor_width=4, heads=2, latent_grid=3, chunk_size=8)
#: Odd grids of each dimension (the 2D one not square).
GRIDS = {1: (11,), 2: (7, 5)}


def tiny_config(name, preset):
    """``preset`` of model ``name`` with :data:`SMALL` sizes, fitted to a rollout of two
    fields plus one conditioning channel on the grid of :data:`GRIDS` of its dimension."""
    config = config_from_dict(name, preset=preset)
    fields = {f.name for f in dataclasses.fields(config)}
    task = Task("rollout", ("u", "v"), ("u", "v"), GRIDS[len(config.grid)], ("nu",),
                window=2, dt=0.1)
    small = {key: value for key, value in SMALL.items() if key in fields}
    return config_from_dict(name, small, preset=preset, task=task)


def build(name, config, seed=0):
    torch.manual_seed(seed)
    try:
        return build_model(name, **dataclasses.asdict(config))
    except ImportError as error:   # an optional dependency (neuraloperator for fno)
        pytest.skip(str(error))


def example_input(config, batch=2, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *config.input_shape, generator=generator)


@pytest.fixture(params=MODELS, ids=IDS)
def case(request):
    """``(name, config, model)`` of one model and preset."""
    name, preset = request.param
    config = tiny_config(name, preset)
    return name, config, build(name, config)


def test_the_config_round_trips_through_json(case):
    name, config, model = case
    record = json.loads(model_to_json(model))
    assert record["model"] == name and "ssmpde_version" in record
    assert config_from_dict(name, record["config"]) == config     # tuples restored
    assert model_from_json(model_to_json(model)).config == config


def test_it_builds_from_the_registry(case):
    name, config, model = case
    cls = get_model_class(name)
    assert type(model) is cls and isinstance(model, Surrogate) and cls.name == name
    assert isinstance(config, cls.Config) and model.config == config


def test_the_output_has_the_task_shape(case):
    name, config, model = case
    with torch.no_grad():
        out = model(example_input(config, batch=3))
    assert out.shape == (3, config.out_channels, *config.grid)
    assert torch.isfinite(out).all()


def test_a_config_of_another_type_is_refused(case):
    name, config, model = case
    cls = type(model)
    wanted = rf"expected an? {cls.Config.__name__}, got dict; use " \
             rf"ssmpde\.surrogates\.build_model\('{re.escape(name)}', \.\.\.\)"
    with pytest.raises(TypeError, match=wanted):
        cls(dataclasses.asdict(config))
    other = next(n for n in list_models() if get_model_class(n).Config is not cls.Config)
    with pytest.raises(TypeError, match=f"got {get_model_class(other).Config.__name__}"):
        cls(get_model_class(other).Config())


def test_an_input_of_another_shape_is_refused(case):
    name, config, model = case
    shape = config.input_shape
    expected = re.escape(f"expects input [batch, {', '.join(map(str, shape))}]")
    wider = (*shape[:-1], shape[-1] + 1)
    with pytest.raises(ValueError, match=rf"{expected}.*got \[2, {', '.join(map(str, wider))}\]"):
        model(torch.zeros(2, *wider))
    more_channels = list(shape)
    more_channels[-1 - len(config.grid)] += 1
    with pytest.raises(ValueError, match=expected):
        model(torch.zeros(2, *more_channels))
    with pytest.raises(ValueError, match=expected):
        model(torch.zeros(*shape))                                  # no batch axis


def test_unknown_options_and_presets_name_the_valid_ones(case):
    name, config, model = case
    with pytest.raises(ValueError, match=rf"unknown {re.escape(name)} option.*'dpeth' "
                                         r"\(did you mean 'depth'\?\)"):
        build_model(name, dpeth=2)
    presets = ", ".join(sorted(type(model).PRESETS))
    with pytest.raises(ValueError, match=re.escape(f"unknown preset 'nope' for {name}; "
                                                   f"available: {presets}")):
        build_model(name, preset="nope")


def test_the_parameter_count_is_the_one_checked_before_building(case):
    # instantiate() refuses a model too large for memory by its parameter count on the meta
    # device: that count is the built model's.
    name, config, model = case
    assert parameter_count(model) == sum(p.numel() for p in model.parameters()) > 0
    with torch.device("meta"):
        meta = build(name, config)
    assert parameter_count(meta) == parameter_count(model)


def test_a_seed_fixes_the_weights_and_the_output(case):
    name, config, model = case
    again = build(name, config)
    other = build(name, config, seed=1)
    state, same = model.state_dict(), again.state_dict()
    assert state.keys() == same.keys()
    assert all(torch.equal(state[key], same[key]) for key in state)
    x = example_input(config)
    with torch.no_grad():
        assert torch.equal(model(x), again(x))
        assert not torch.equal(model(x), other(x))


def test_every_parameter_gets_a_finite_gradient(case):
    name, config, model = case
    x = example_input(config).requires_grad_()
    out = model(x)
    (out.square().mean() + out.mean()).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for key, parameter in model.named_parameters():
        assert parameter.grad is not None, f"no gradient reached {key}"
        assert torch.isfinite(parameter.grad).all(), key
        assert parameter.grad.abs().sum() > 0, f"zero gradient on {key}"


def test_json_config_and_safetensors_weights_reproduce_the_model(case, tmp_path):
    name, config, model = case
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():       # away from the initialisation (zero embeddings, unit norms)
        for tensor in model.state_dict(keep_vars=True).values():
            if tensor.is_floating_point():
                tensor.add_(0.1 * torch.randn(tensor.shape, generator=generator))
    (tmp_path / "config.json").write_text(model_to_json(model))
    save_file(model.state_dict(), tmp_path / "weights.safetensors")
    torch.manual_seed(99)       # another initialisation, overwritten by the weights
    loaded = model_from_json((tmp_path / "config.json").read_text())
    loaded.load_state_dict(load_file(tmp_path / "weights.safetensors"), strict=True)
    x = example_input(config)
    with torch.no_grad():
        assert torch.equal(model(x), loaded(x))
