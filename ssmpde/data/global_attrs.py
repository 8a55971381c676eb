"""The global attributes of a dataset and the generator config they hold.

Every ssmpde dataset carries :data:`REQUIRED_GLOBAL_ATTRS`: ``Conventions`` (always
:data:`CONVENTIONS`), ``title``, ``source`` (ssmpde version and solver), ``history``,
``ssmpde_equation``, ``references`` and ``ssmpde_config``, the full generator config (seed
included) as a JSON object, which :func:`config_of` reads back.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr

from ssmpde.core import JSONFileError, decode_json

from .errors import _schema_error

__all__ = ["CONVENTIONS", "REQUIRED_GLOBAL_ATTRS", "config_of"]

CONVENTIONS = "CF-1.10"
REQUIRED_GLOBAL_ATTRS = ("Conventions", "title", "source", "history", "ssmpde_equation",
                         "ssmpde_config", "references")


def _key_repr(path: str, key: object) -> str:
    return f"{path}[{key!r}]"


def _jsonable(value: Any, path: str) -> Any:
    """Return ``value`` as plain JSON types, or raise naming the offending key path."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (numbers.Integral, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            # Python's json writes NaN/Infinity, which is not JSON: other readers reject it.
            raise ValueError(f"{path} is {float(value)!r}; JSON has no NaN or infinity, "
                             "store a finite number, a string or null instead")
        return float(value)
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                # json.dumps would turn the key into a string and the config would not
                # round-trip; better to say so now.
                raise TypeError(f"{_key_repr(path, key)}: config keys must be strings, "
                                f"got {type(key).__name__}")
            result[key] = _jsonable(item, _key_repr(path, key))
        return result
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" and value.dtype != object:
            raise TypeError(f"{path} is an array of dtype {value.dtype}, which JSON cannot "
                            "represent; convert it to a list of numbers or strings")
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value.tolist())]
    if isinstance(value, (list, tuple)):
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # Frozen config dataclasses are the house style; store their fields.
        return _jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)},
                         path)
    raise TypeError(f"{path} has type {type(value).__name__}, which JSON cannot represent; "
                    "convert it to a number, string, bool, None, list or dict "
                    "(e.g. str() for a path)")


def _config_json(config: Mapping) -> str:
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    return json.dumps(_jsonable(config, "config"), sort_keys=True, allow_nan=False)


def config_of(ds: xr.Dataset) -> dict:
    """Return the generator config stored in ``ds.attrs["ssmpde_config"]``.

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    dict
        The parsed JSON object (a new dict each call).

    Raises
    ------
    SchemaError
        If the attribute is missing, not valid JSON, or not a JSON object.
    """
    source = ds.encoding.get("source")
    config, problem = _decode_config(ds.attrs, f" of {source}" if source else "")
    if problem is not None:
        raise _schema_error([problem])
    return config


def _config_problem(attrs: Mapping) -> str | None:
    return _decode_config(attrs)[1]


def _decode_config(attrs: Mapping, of: str = "") -> tuple[dict | None, str | None]:
    """(the ``ssmpde_config`` object, None) or (None, the problem with it); ``of`` names the
    file (``" of PATH"``) where it is known."""
    fix = "rebuild the dataset with build_dataset(..., config=...)"
    where = f"global attribute 'ssmpde_config'{of}"
    if "ssmpde_config" not in attrs:
        return None, f"{where} is missing: {fix}"
    text = attrs["ssmpde_config"]
    if not isinstance(text, str):
        return None, f"{where} must be a JSON string, got {type(text).__name__}: {fix}"
    try:
        return decode_json(where, text=text, fix=fix), None
    except JSONFileError as error:
        return None, str(error)


def _global_problems(ds: xr.Dataset) -> list[str]:
    """What is wrong with the global attributes of ``ds``, each problem with its fix."""
    problems = []
    for key in REQUIRED_GLOBAL_ATTRS:
        if key not in ds.attrs:
            problems.append(f"global attribute '{key}' is missing: set ds.attrs['{key}'] "
                            "(build_dataset() sets all of them)")
        elif key != "ssmpde_config" and not isinstance(ds.attrs[key], str):
            problems.append(f"global attribute '{key}' must be a string, got "
                            f"{type(ds.attrs[key]).__name__}: set ds.attrs['{key}'] to text")
    conventions = ds.attrs.get("Conventions")
    if isinstance(conventions, str) and conventions != CONVENTIONS:
        problems.append(f"global attribute 'Conventions' is {conventions!r}, expected "
                        f"{CONVENTIONS!r}: set ds.attrs['Conventions'] = {CONVENTIONS!r}")
    if "ssmpde_config" in ds.attrs:
        problem = _config_problem(ds.attrs)
        if problem is not None:
            problems.append(problem)
    equation = ds.attrs.get("ssmpde_equation")
    if isinstance(equation, str) and not equation.strip():
        problems.append("global attribute 'ssmpde_equation' is empty: set it to the PDE's name, "
                        "e.g. ds.attrs['ssmpde_equation'] = 'navier_stokes'")
    return problems
