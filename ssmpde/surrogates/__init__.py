"""Surrogate models behind one registry and one config format.

Each model lives in its own file with a frozen config dataclass and named presets, derives
from :class:`~ssmpde.surrogates.base.Surrogate` and registers itself with
:func:`~ssmpde.surrogates.base.register_model`::

    from ssmpde.surrogates import build_model, list_models
    model = build_model("geomano", preset="darcy")            # the paper's Darcy configuration
    model = build_model("geomano", preset="darcy", depth=4)   # a preset with overrides
    same = model_from_json(model_to_json(model))               # configs round-trip through JSON

Configs are plain JSON (``{"model": ..., "config": {...}, "ssmpde_version": ...}``), never
pickles; a checkpoint is that JSON next to a safetensors state dict. The registry, the base
classes and the checks they share live in :mod:`ssmpde.surrogates.base`.
"""

from .base import (
    BUILTIN_MODELS,
    ModelConfig,
    Surrogate,
    build_model,
    config_from_dict,
    describe_models,
    get_model_class,
    instantiate,
    list_models,
    model_from_json,
    model_to_json,
    parameter_count,
    register_model,
)
from .compiled import compile_model

__all__ = ["BUILTIN_MODELS", "ModelConfig", "Surrogate", "build_model", "compile_model",
           "config_from_dict", "describe_models", "get_model_class", "instantiate",
           "list_models", "model_from_json", "model_to_json", "parameter_count",
           "register_model"]
