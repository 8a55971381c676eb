"""The surrogates' registry, the base classes of their models and configs, and the checks
they share.

A model is a :class:`Surrogate` with a frozen config dataclass deriving from
:class:`ModelConfig` and named presets, registered with :func:`register_model`; the module's
name goes in :data:`BUILTIN_MODELS`. :func:`build_model`, :func:`list_models` and
:func:`model_to_json` / :func:`model_from_json` are the entry points (re-exported by
:mod:`ssmpde.surrogates`), as :mod:`ssmpde.solvers.base` holds the solvers' registry.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import nn

from ssmpde.core import Registry, decode_json, format_bytes, memory_limit

__all__ = ["BUILTIN_MODELS", "ModelConfig", "Surrogate", "build_model", "check_positive_ints",
           "check_sizes", "config_from_dict", "describe_models", "get_model_class",
           "instantiate", "list_models", "model_from_json", "model_to_json", "parameter_count",
           "register_model"]

#: Modules of the built-in models (importing one registers it): a new model adds a line here.
BUILTIN_MODELS = (
    "conv_corrector",
    "fno",
    "geomano",
    "lamo",
    "lean_fno",
    "mno",
    "ssno",
)

_MODELS: Registry[Surrogate] = Registry("model", __package__, BUILTIN_MODELS)


class ModelConfig:
    """Base of the models' frozen config dataclasses: the one hook that fits a model to a task.

    :meth:`for_task` is how a model receives its task (``ssmpde.surrogates.datasets.Task``):
    ``in_channels``, ``out_channels``, ``grid`` (and ``window`` for history models) come from
    the data; every field named in :attr:`spatial_fields` (one entry per grid dimension, such
    as Fourier ``modes`` or a ``latent_grid``) is adapted to the task's dimension (a preset's
    first entry repeated) and capped at the grid; :meth:`adapt` adds model-specific choices.

    Class attributes
    ----------------
    input_layout : {"channels", "history"}
        ``channels``: the model takes ``[batch, window * fields + conditioning, *grid]``
        (history folded into channels); ``history``: ``[batch, window, fields + conditioning,
        *grid]`` (temporal-memory models), the conditioning repeated on every frame.
    spatial_fields : tuple of str
    label : str
        The model's name in messages ("GeoMaNO expects input ...").
    """

    input_layout: ClassVar[str] = "channels"
    spatial_fields: ClassVar[tuple[str, ...]] = ()
    label: ClassVar[str] = "the model"

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of the model's input after the batch axis: ``(in_channels, *grid)``, or
        ``(window, in_channels, *grid)`` for the ``history`` layout."""
        frames = (self.window,) if self.input_layout == "history" else ()
        return (*frames, self.in_channels, *self.grid)

    @classmethod
    def adapt(cls, task, values: dict[str, Any]) -> dict[str, Any]:
        """Model-specific changes for ``task`` (e.g. a 1D scan on a 1D grid); default none."""
        return {}

    def check_data(self, task, variables: Mapping[str, Mapping[str, Any]]) -> None:
        """Refuse (ValueError) data whose fields this config cannot mean what they are;
        default: any. ``variables``: the task's fields' attributes (``role``,
        ``boundary_conditions``, ``long_name``, ...) by name. Called by training before any
        work, so an option that needs a particular field (a vorticity) is never fed another."""

    @classmethod
    def for_task(cls, task, **values: Any):
        """The config with ``values`` (preset and options) fitted to ``task``."""
        names = {f.name for f in dataclasses.fields(cls)}
        defaults = {f.name: f.default for f in dataclasses.fields(cls)
                    if f.default is not dataclasses.MISSING}
        values = dict(values)
        ndim = len(task.grid)
        derived = {"in_channels": task.input_channels(cls.input_layout),
                   "out_channels": task.out_channels, "grid": tuple(task.grid)}
        if task.kind == "rollout":
            derived["window"] = task.window
        values.update({k: v for k, v in derived.items() if k in names})
        for name in cls.spatial_fields:
            value = values.get(name, defaults.get(name, ()))
            # One number stands for every dimension, like a preset's single entry.
            if isinstance(value, int) and not isinstance(value, bool):
                value = (value,)
            elif isinstance(value, (list, tuple)) and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in value):
                value = tuple(value)
            else:
                raise ValueError(f"{name} must be a whole number or a list of them (one per "
                                 f"grid dimension), got {value!r}")
            if value and len(value) != ndim:
                value = (value[0],) * ndim
            values[name] = tuple(min(int(v), n) for v, n in zip(value, task.grid))
        values.update(cls.adapt(task, {**defaults, **values}))
        return cls(**values)


class Surrogate(nn.Module):
    """Base of the registered models: the config type check and the input-shape check.

    A model takes its config as the only constructor argument and passes it to
    ``super().__init__(config)``, which refuses anything but an instance of the model's
    ``Config`` and keeps it as ``self.config``; ``forward`` starts with
    ``x = self.check_input(x)``.

    Class attributes
    ----------------
    Config : type
        The model's frozen config dataclass, deriving from :class:`ModelConfig`.
    PRESETS : dict
        Preset name → dict of config values.
    name : str
        The registered name, set by :func:`register_model`.
    """

    Config: ClassVar[type[ModelConfig]]
    PRESETS: ClassVar[dict[str, dict[str, Any]]]
    name: ClassVar[str]

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, self.Config):
            kind = self.Config.__name__
            name = getattr(self, "name", type(self).__name__.lower())
            raise TypeError(f"expected {_article(kind)} {kind}, got {type(config).__name__}; "
                            f"use ssmpde.surrogates.build_model({name!r}, ...)")
        self.config = config

    def check_input(self, x):
        """``x`` (a tensor ``[batch, *config.input_shape]``) as the model takes it; ValueError
        naming the expected shape otherwise.

        A ``history`` model with ``window == 1`` also takes ``[batch, in_channels, *grid]``,
        returned with its window axis.
        """
        c = self.config
        given = list(x.shape)
        expected = c.input_shape
        history = c.input_layout == "history"
        if history and c.window == 1 and x.dim() == len(expected):
            x = x.unsqueeze(1)
        if x.dim() != 1 + len(expected) or tuple(x.shape[1:]) != expected:
            axes = "window, in_channels" if history else "in_channels"
            raise ValueError(f"{c.label} expects input [batch, {', '.join(map(str, expected))}] "
                             f"({axes}, *grid of its config), got {given}")
        return x


def _article(word: str) -> str:
    """"an" before a vowel sound ("an MNOConfig", "an SSNOConfig"), "a" otherwise."""
    acronym = word[:2].isupper()
    return "an" if word[0] in "AEIOU" or (acronym and word[0] in "FHLMNRSX") else "a"


def register_model(name: str):
    """Class decorator: make ``cls`` buildable as ``build_model(name, ...)``.

    The class must derive from :class:`Surrogate`, define ``Config`` (a frozen dataclass
    deriving from :class:`ModelConfig`) and ``PRESETS`` (preset name → dict of config values),
    and take its config as the only constructor argument.
    """

    def check(cls) -> None:
        if not issubclass(cls, Surrogate):
            raise TypeError(f"model {cls.__name__} must derive from ssmpde.surrogates.Surrogate")
        for attribute in ("Config", "PRESETS"):
            if not hasattr(cls, attribute):
                raise TypeError(f"model {cls.__name__} needs a {attribute} class attribute")
        if not issubclass(cls.Config, ModelConfig):
            raise TypeError(f"{cls.__name__}.Config must derive from ModelConfig")

    return _MODELS.register(name, check)


def check_positive_ints(model: str, config, names) -> None:
    """Raise ValueError unless each named config field is a positive integer (not a bool)."""
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{model} {name} must be a positive integer, got {value!r}")


def check_sizes(model: str, config, names, dims: tuple[int, ...]) -> None:
    """Raise ValueError unless each named field is a tuple of positive integers whose length
    is one of ``dims``."""
    for name in names:
        value = getattr(config, name)
        if (not isinstance(value, tuple) or len(value) not in dims
                or not all(isinstance(n, int) and n >= 1 for n in value)):
            lengths = " or ".join(map(str, dims))
            raise ValueError(f"{model} {name} must be a tuple of {lengths} positive integers, "
                             f"got {value!r}")


def list_models() -> list[str]:
    """Names of the registered models, sorted."""
    return _MODELS.names()


def get_model_class(name: str) -> type[Surrogate]:
    """The model class registered as ``name``; a ValueError with suggestions otherwise."""
    return _MODELS.get(name)


def config_from_dict(name: str, values: dict[str, Any] | None = None, *,
                     preset: str | None = None, task=None):
    """The config of model ``name``: its defaults, then ``preset``, then ``values``; fitted to
    ``task`` (see :meth:`ModelConfig.for_task`) when one is given.

    JSON lists become tuples where the field is a tuple; unknown keys and unknown presets
    raise ValueError naming the valid ones.
    """
    cls = get_model_class(name)
    merged: dict[str, Any] = {}
    if preset is not None:
        if preset not in cls.PRESETS:
            raise ValueError(f"unknown preset {preset!r} for {name}; available: "
                             f"{', '.join(sorted(cls.PRESETS))}")
        merged.update(cls.PRESETS[preset])
    merged.update(values or {})
    fields = [f.name for f in dataclasses.fields(cls.Config)]
    unknown = sorted(set(merged) - set(fields))
    if unknown:
        hints = [f"{key!r} (did you mean {difflib.get_close_matches(key, fields, n=1)[0]!r}?)"
                 if difflib.get_close_matches(key, fields, n=1) else repr(key) for key in unknown]
        raise ValueError(f"unknown {name} option(s): {', '.join(hints)}; valid options: "
                         f"{', '.join(fields)}")
    hints = typing.get_type_hints(cls.Config)
    for key, value in merged.items():
        if isinstance(value, list) and typing.get_origin(hints[key]) is tuple:
            merged[key] = tuple(value)
    if task is not None:
        return cls.Config.for_task(task, **merged)
    return cls.Config(**merged)


#: Sizes a model takes from its data (they fit the data, so never absurd): not probed.
_DATA_SIZES = frozenset({"in_channels", "out_channels", "grid", "window"})
#: Integer options above this are not built to be counted but extrapolated (see
#: :func:`_parameter_estimate`): building a model of 10**9 layers, even on the meta device,
#: would take days, and 10**10 channels overflow torch's size arithmetic.
_PROBE = 64


def _count_parameters(cls, config) -> int:
    """Exact parameter count of ``cls(config)``, built on the meta device (no memory)."""
    import torch

    try:
        with torch.device("meta"):
            return sum(p.numel() for p in cls(config).parameters())
    except (RuntimeError, OverflowError) as error:
        # torch's own size arithmetic gave out ("Storage size calculation overflowed"):
        # a tensor of more than 2**63 bytes, which no machine holds.
        raise ValueError(f"this {cls.Config.__name__} makes a tensor too large for any machine "
                         f"({_one_line(error)}): lower the sizes (width, depth, state_size, "
                         "...)") from None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:200]


def _large_sizes(config) -> dict[tuple[str, int | None], int]:
    """The integer options (and entries of integer tuples) of ``config`` above :data:`_PROBE`
    that do not come from the data: ``{(field, index or None): value}``."""
    large = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name in _DATA_SIZES:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > _PROBE:
            large[(field.name, None)] = value
        elif isinstance(value, tuple):
            for index, entry in enumerate(value):
                if isinstance(entry, int) and not isinstance(entry, bool) and entry > _PROBE:
                    large[(field.name, index)] = entry
    return large


def _with_sizes(config, sizes: dict[tuple[str, int | None], int]):
    changes: dict[str, Any] = {}
    for (name, index), value in sizes.items():
        if index is None:
            changes[name] = value
        else:
            entries = list(changes.get(name, getattr(config, name)))
            entries[index] = value
            changes[name] = tuple(entries)
    return dataclasses.replace(config, **changes)


def _parameter_estimate(cls, config) -> tuple[int, bool]:
    """(parameters, exact): the exact count where every option is small; otherwise a lower
    bound from small models, cheap to build, whatever the sizes asked for.

    A model's parameter count grows with each of its sizes (width, depth, state size,
    modes, ...), as a polynomial with non-negative coefficients up to floor divisions (the
    ``m // 2 + 1`` modes of a real FFT). With every large size ``v_i`` set to ``p``
    (:data:`_PROBE`), the count ``c(p)`` and each size's slope ``s_i`` between ``p / 2`` and
    ``p`` (a secant, below the slope at ``p`` for a convex count) give ``c(v) >= c(p) +
    sum_i s_i (v_i - p) / 2``; the half covers what a floor division loses between probes.
    A config whose small probes are themselves invalid (sizes tied to each other, such as
    heads dividing the width) is counted exactly.
    """
    large = _large_sizes(config)
    if not large:
        return _count_parameters(cls, config), True
    probe = {key: _PROBE for key in large}
    try:
        base = _count_parameters(cls, _with_sizes(config, probe))
        total = base
        for key, value in large.items():
            half = _count_parameters(cls, _with_sizes(config, {**probe, key: _PROBE // 2}))
            total += max(0, base - half) * (value - _PROBE) // _PROBE
    except (ValueError, TypeError):
        return _count_parameters(cls, config), True
    return total, False


def instantiate(name: str, config) -> Surrogate:
    """Build model ``name`` from its config, after checking its size.

    The parameters, their gradients and two AdamW moments (16 bytes per parameter) must fit
    :func:`ssmpde.core.memory_limit`, so ``width=100000``, ``depth=10**9`` or a crafted
    checkpoint fails with one message instead of allocating until the machine gives out (or
    overflowing torch's size arithmetic). The count is exact for ordinary sizes (the model
    built on the meta device) and a lower bound past them (:func:`_parameter_estimate`).
    """
    cls = get_model_class(name)
    count, exact = _parameter_estimate(cls, config)
    limit = memory_limit()
    if 16 * count <= limit and not exact:
        count = _count_parameters(cls, config)
    needed = 16 * count
    if needed > limit:
        about = "" if exact else "at least "
        raise ValueError(f"{name} with this config has {about}{count:,} parameters and needs "
                         f"{about or 'about '}{format_bytes(needed)} to train, more than the "
                         f"limit of {format_bytes(limit)}: lower width/depth, or raise "
                         "SSMPDE_MAX_MEMORY")
    return cls(config)


def build_model(name: str, *, preset: str | None = None, **config) -> Surrogate:
    """Build model ``name`` from its defaults, a ``preset`` and keyword overrides.

    Every check of the configuration happens here, before any tensor is allocated.

    Examples
    --------
    >>> model = build_model("geomano", preset="darcy", depth=1, width=8, grid=(9, 9),
    ...                     latent_grid=(3, 3))
    >>> sum(p.numel() for p in model.parameters()) > 0
    True
    """
    return instantiate(name, config_from_dict(name, config, preset=preset))


def model_to_json(model: Surrogate) -> str:
    """The model's name and config as JSON (with the ssmpde version that wrote it)."""
    from ssmpde import __version__

    return json.dumps({"model": model.name, "config": dataclasses.asdict(model.config),
                       "ssmpde_version": __version__}, indent=2)


def model_from_json(text: str) -> Surrogate:
    """A freshly initialised model from :func:`model_to_json`'s output."""
    record = decode_json("the model config", text=text, keys={"model": str, "config": dict},
                         fix="expected the JSON of model_to_json, with 'model' and 'config'")
    name, values = record["model"], record["config"]
    return build_model(name, **values)


def parameter_count(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe_models(name: str | None = None) -> str:
    """A table of every model's presets and parameter counts; with ``name``, that model's
    presets in full (the config JSON of each).

    Building a preset needs the model's dependencies; one that is missing is reported in
    place of the count.
    """
    names = [get_model_class(name).name] if name else list_models()
    lines = []
    if not name:
        lines += ["| model | preset | parameters |", "|---|---|---|"]
    for model_name in names:
        cls = get_model_class(model_name)
        for preset in sorted(cls.PRESETS):
            try:
                model = build_model(model_name, preset=preset)
                count = f"{parameter_count(model):,}"
            except ImportError as error:
                model, count = None, f"unavailable ({error})"
            if not name:
                lines.append(f"| {model_name} | {preset} | {count} |")
                continue
            config = dataclasses.asdict(config_from_dict(model_name, preset=preset))
            lines += [f"{model_name} preset {preset!r}: {count} parameters",
                      json.dumps(config, indent=2), ""]
    return "\n".join(lines).rstrip()
