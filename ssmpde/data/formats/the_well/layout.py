"""The Well's names and what reading and writing share: the format's constants, the JSON of
attributes kept in ``ssmpde_metadata``, h5py, and the HDF5 files of a Well path."""

from __future__ import annotations

import importlib.util
import math
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...reading import check_path
from ...schema import DatasetFileError, X, Y

NAME = "the-well"
DESCRIPTION = ("The Well: a directory with data/train|valid|test/*.hdf5 and stats.yaml, or one "
               ".hdf5 file" + ("" if importlib.util.find_spec("h5py") is not None
                               else " (needs h5py: pip install 'ssmpde[interop]')"))
#: The split directories under ``data/``, in the order :func:`export` fills them.
SPLITS = ("train", "valid", "test")
#: Default shares of the samples per split: :func:`split_sizes` says how they are rounded.
SPLIT_FRACTIONS = (0.8, 0.1, 0.1)
#: The normalisation statistics beside ``data/`` (read by The Well's ``ZScoreNormalization``
#: and ``RMSNormalization``).
STATS_FILE = "stats.yaml"
#: The files The Well's loaders read in a split directory (they glob ``*.h5`` and ``*.hdf5``):
#: fewer than the HDF5 suffixes of :data:`ssmpde.data.formats.hdf5.HDF5_SUFFIXES`.
_WELL_SUFFIXES = (".hdf5", ".h5")
#: Extra root dataset (JSON text): what The Well has no place for, for :func:`open`.
METADATA = "ssmpde_metadata"
#: Extra root attribute: the ssmpde sample index of each trajectory in the file.
SAMPLE_INDICES = "ssmpde_sample"
_METADATA_VERSION = 1
_REEXPORT = "the file was changed after ssmpde wrote it; export it again"
#: The Well's spatial dimension names, in its array order, for an ssmpde grid.
_WELL_DIMS = {1: (X,), 2: (X, Y)}
_TO_WELL_BC = {"periodic": "PERIODIC", "reflective": "WALL", "dirichlet": "WALL",
               "outflow": "OPEN", "neumann": "OPEN"}
# The Well's WALL does not say slip or no-slip; a wall the flow does not cross is `reflective`.
_FROM_WELL_BC = {"PERIODIC": "periodic", "WALL": "reflective", "OPEN": "outflow"}
_GROUPS = ("t0_fields", "t1_fields", "t2_fields")
_ROOT_ATTRS = ("dataset_name", "grid_type", "n_spatial_dims", "n_trajectories",
               "simulation_parameters", SAMPLE_INDICES)
_REFERENCES = ("Ohana et al., The Well: a large-scale collection of diverse physics simulations "
               "for machine learning, NeurIPS 2024 Datasets and Benchmarks")


def _h5py():
    try:
        import h5py
    except ImportError as error:
        raise ImportError("reading or writing The Well's HDF5 files needs h5py: pip install "
                          "'ssmpde[interop]' (or pip install h5py)") from error
    return h5py


def _json_value(value: Any) -> Any:
    """An attribute value as JSON that :func:`_from_json_value` turns back into an equal one."""
    if isinstance(value, np.ndarray):
        return {"__ndarray__": [_json_value(v) for v in value.tolist()],
                "dtype": value.dtype.str}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    return value


def _from_json_value(value: Any) -> Any:
    if isinstance(value, dict) and "__ndarray__" in value:
        return np.array([_from_json_value(v) for v in value["__ndarray__"]],
                        dtype=np.dtype(value["dtype"]))
    if isinstance(value, dict) and "__float__" in value:
        return float(value["__float__"])
    if isinstance(value, list):
        return [_from_json_value(v) for v in value]
    return value


def _attrs_json(attrs: Mapping) -> dict:
    return {str(key): _json_value(value) for key, value in attrs.items()}


def _attrs_from_json(attrs: Mapping) -> dict:
    return {key: _from_json_value(value) for key, value in attrs.items()}


class DamagedLayoutError(DatasetFileError):
    """A Well directory whose split or file is no directory or file (a link that loops or
    leads nowhere, a FIFO, a file where a split belongs): The Well's layout, damaged."""


def _refuse(path: pathlib.Path) -> None:
    """:func:`~ssmpde.data.reading.check_path`'s refusal of ``path``, as a damaged layout."""
    try:
        check_path(path)
    except DatasetFileError as error:
        raise DamagedLayoutError(str(error)) from None


def _files(root: pathlib.Path) -> list[pathlib.Path]:
    """The HDF5 files of a Well file, split directory or dataset directory, in reading order."""
    if not (root.exists() or root.is_symlink()):
        raise FileNotFoundError(f"no Well dataset at '{root}': no such file or directory "
                                "(check the path)")
    if root.is_file():
        return [root]

    def hdf5_in(folder: pathlib.Path) -> list[pathlib.Path]:
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in _WELL_SUFFIXES)
        for p in found:
            if not (p.is_file() or p.is_dir()):
                _refuse(p)  # a link that loops or leads nowhere, a FIFO: named, not skipped
        return [p for p in found if p.is_file()]

    def split_directory(split: str) -> bool:
        folder = root / "data" / split
        if folder.is_dir() or not (folder.exists() or folder.is_symlink()):
            return folder.is_dir()
        _refuse(folder)  # a link that loops or leads nowhere: named, not skipped
        raise DamagedLayoutError(f"'{folder}' is a file, where a Well dataset has its {split} "
                                 "split directory: move it away, or give the split's files")

    if (root / "data").is_dir():
        files = [p for split in SPLITS if split_directory(split)
                 for p in hdf5_in(root / "data" / split)]
    else:
        files = hdf5_in(root)
    if not files:
        raise DatasetFileError(f"'{root}' holds no HDF5 files: a Well dataset directory has "
                               "data/train, data/valid, data/test with .hdf5 files in them "
                               "(or give one split directory or one file)")
    return files
