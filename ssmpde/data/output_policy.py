"""The output policy of every command, and how ssmpde recognises what it wrote.

:func:`check_output` runs before any work: no output replaces an input (a run's training
dataset included), an existing target needs ``overwrite``, and even then only an output of
ssmpde of the same kind is replaced (:func:`is_ssmpde_output`): a dataset by its attributes, a
run directory by its ``config.json``, a figure by the creator in its metadata
(:func:`figure_metadata`). A dataset's suffix says its format (:func:`format_of_suffix`).
Deciding whether an existing directory is an ssmpde output means reading it, so the policy
lives here, above the readers, rather than in :mod:`ssmpde.data.outputs`.
"""

from __future__ import annotations

import os
import pathlib
import re
from collections.abc import Iterable
from typing import Any

from ssmpde.core import JSONFileError, decode_json

from . import formats
from .progress import PROGRESS_ATTR, _root_attributes
from .reading import _is_zarr_store, _open
from .schema import DatasetFileError

__all__ = [
    "FIGURE_FORMATS",
    "NETCDF_SUFFIXES",
    "ZARR_SUFFIXES",
    "check_output",
    "figure_metadata",
    "format_of_suffix",
    "is_ssmpde_output",
]

NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf")
ZARR_SUFFIXES = (".zarr",)


def format_of_suffix(path: pathlib.Path) -> str:
    """The format of a dataset written to ``path``, from its suffix: ``"zarr"`` for
    :data:`ZARR_SUFFIXES`, ``"netcdf"`` for :data:`NETCDF_SUFFIXES` (any case); a ValueError
    listing them for any other."""
    suffix = path.suffix.lower()
    if suffix in ZARR_SUFFIXES:
        return "zarr"
    if suffix in NETCDF_SUFFIXES:
        return "netcdf"
    accepted = ", ".join(ZARR_SUFFIXES + NETCDF_SUFFIXES)
    raise ValueError(f"cannot tell the format of '{path}' from its suffix "
                     f"{suffix or '(none)'!r}: use one of {accepted} "
                     "(.zarr for a zarr store, the others for netCDF4)")


#: Formats of the figures ssmpde draws: those whose files carry :func:`figure_metadata`.
FIGURE_FORMATS = ("png", "pdf", "svg")
_FIGURE_CREATOR = "ssmpde"
# Where each format keeps the creator: a PNG tEXt chunk before the image data, the PDF
# document information dictionary near the end of the file, the SVG Dublin Core metadata
# at the start. Figures are recognised by their first and last _FIGURE_WINDOW bytes.
_FIGURE_MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-"}
_FIGURE_MARK = {
    "png": re.compile(rb"tEXtSoftware\x00" + _FIGURE_CREATOR.encode() + rb" "),
    "pdf": re.compile(rb"/Creator \(" + _FIGURE_CREATOR.encode() + rb" "),
    "svg": re.compile(rb"<dc:creator>\s*<cc:Agent>\s*<dc:title>" + _FIGURE_CREATOR.encode()
                      + rb" "),
}
_FIGURE_WINDOW = 1 << 20


def figure_metadata(fmt: str) -> dict[str, str]:
    """The metadata every figure ssmpde writes carries (``savefig(..., metadata=...)``):
    ``ssmpde <version>`` as the PNG ``Software``, the PDF or SVG ``Creator``. It is how
    ``--overwrite`` tells a figure ssmpde drew from any other file (:func:`is_ssmpde_output`).
    """
    from ssmpde import __version__

    if fmt not in FIGURE_FORMATS:
        raise ValueError(_figure_format_message(fmt))
    key = "Software" if fmt == "png" else "Creator"
    return {key: f"{_FIGURE_CREATOR} {__version__}"}


def _figure_format_message(fmt: str, path: Any = None, flag: str = "") -> str:
    where = f"{flag} '{path}': " if path is not None else ""
    shown = f"'.{fmt}'" if fmt else "a file without a suffix"
    return (f"{where}cannot write a figure as {shown}: use one of "
            f"{', '.join('.' + f for f in FIGURE_FORMATS)}")


def _is_ssmpde_figure(path: pathlib.Path) -> bool:
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(_FIGURE_WINDOW)
            handle.seek(max(0, size - _FIGURE_WINDOW))
            tail = handle.read(_FIGURE_WINDOW)
    except OSError:
        return False
    if head.startswith(_FIGURE_MAGIC["png"]):
        return bool(_FIGURE_MARK["png"].search(head))
    if head.startswith(_FIGURE_MAGIC["pdf"]):
        return bool(_FIGURE_MARK["pdf"].search(tail))
    return b"<svg" in head and bool(_FIGURE_MARK["svg"].search(head))


def _output_kind(path: pathlib.Path) -> str | None:
    """What ssmpde output ``path`` is: ``"run"``, ``"dataset"``, ``"figure"``, or None for
    anything ssmpde did not write (a symbolic link is judged by what it points to)."""
    if path.is_dir():
        config = path / "config.json"
        if config.is_file():
            try:
                record = decode_json(config)
            except (OSError, JSONFileError):
                return None
            return "run" if "model" in record else None
        if not _is_zarr_store(path):
            # Another tool's directory (The Well, ...) is ours only if we exported it.
            foreign = formats.sniff(path)
            return "dataset" if foreign is not None and formats.is_export(foreign, path) \
                else None
        if PROGRESS_ATTR in (_root_attributes(path) or {}):
            return "dataset"  # a store that `generate` is still writing
    elif not path.is_file():
        return None
    elif _is_ssmpde_figure(path):
        return "figure"
    else:
        # A foreign format's file (a PDEBench download) is ours only if we exported it.
        foreign = formats.sniff(path)
        if foreign is not None:
            return "dataset" if formats.is_export(foreign, path) else None
    try:
        with _open(path, None) as ds:
            return "dataset" if "ssmpde_equation" in ds.attrs else None
    except (OSError, DatasetFileError, ValueError):
        return None


def is_ssmpde_output(path: str | os.PathLike) -> bool:
    """Whether ``path`` is something ssmpde writes, which ``--overwrite`` may replace.

    Recognised by a marker each kind of output carries: a dataset (netCDF file or zarr store)
    by its global attribute ``ssmpde_equation`` (a zarr store still being written by its
    progress record), a run directory by its ``config.json`` naming a ``model``, a figure
    (PNG, PDF or SVG) by the creator in its metadata (:func:`figure_metadata`). Anything else,
    a user's text file or a file ssmpde cannot read, is not.
    """
    return _output_kind(pathlib.Path(os.fspath(path)).expanduser()) is not None


def _inputs_with_recorded_data(inputs: Iterable[str | os.PathLike]
                               ) -> list[tuple[pathlib.Path, str]]:
    """``inputs``, and for each run directory among them the dataset its checkpoint was
    trained on (recorded in its ``config.json``): an output must not replace it either.
    Each with the words a message names it by."""
    found = []
    for source in inputs:
        source = pathlib.Path(os.fspath(source)).expanduser()
        found.append((source, "one of the inputs"))
        try:
            recorded = decode_json(source / "config.json")["dataset"]["path"]
        except (OSError, JSONFileError, TypeError, KeyError):
            continue
        if isinstance(recorded, str) and recorded:
            found.append((pathlib.Path(recorded),
                          f"the dataset the run '{source}' was trained on"))
    return found


def _same_or_inside(source: pathlib.Path, target: pathlib.Path) -> bool:
    """Whether writing ``target`` would replace ``source`` (the same path, another name of
    the same file, or a path inside a directory ``target`` would replace)."""
    resolved = source.resolve()
    if resolved == target.resolve() or resolved.is_relative_to(target.resolve()):
        return True
    try:
        return target.exists() and source.exists() and os.path.samefile(target, source)
    except OSError:
        return False


def check_output(target: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                 overwrite: bool = False, flag: str = "--out",
                 kind: str | None = None, named_format: bool = False) -> pathlib.Path:
    """The output policy of every command, checked before any work.

    Parameters
    ----------
    target : str or os.PathLike
        The output about to be written.
    inputs : iterable of paths
        What the command reads: datasets and run directories. A run directory's training
        dataset (the path recorded in its ``config.json``) counts as an input too.
    overwrite : bool
        Whether an existing ``target`` may be replaced (``--overwrite``).
    flag : str
        The option that named ``target``, for messages.
    kind : {None, "dataset", "figure"}
        What will be written. A dataset needs a netCDF or zarr suffix, a figure one of
        :data:`FIGURE_FORMATS`; both are checked here, before any work. An existing target
        is then replaced only by an output of its own kind.
    named_format : bool
        The dataset's format is settled already, so the suffix is not checked here: the
        caller chose it by name (``convert --to``: the suffix need not be netCDF's or
        zarr's), or read it from the suffix before (:func:`format_of_suffix`, as
        :func:`save` and generate do).

    Returns
    -------
    pathlib.Path
        ``target``, with ``~`` expanded.

    Raises
    ------
    ValueError
        For a target that would replace one of the ``inputs``; for a suffix that does not fit
        ``kind``; and, even with ``overwrite``, for an existing target that is not an output
        of ssmpde (:func:`is_ssmpde_output`) or is one of another kind (a run directory is
        never replaced by a dataset, a dataset never by a figure). So ``--overwrite`` can
        lose only what an earlier ssmpde command wrote.
    FileExistsError
        For an existing target without ``overwrite``.
    """
    target = pathlib.Path(os.fspath(target)).expanduser()
    if kind == "dataset":
        if not named_format:
            format_of_suffix(target)
    elif kind == "figure":
        fmt = target.suffix[1:].lower()
        if fmt not in FIGURE_FORMATS:
            raise ValueError(_figure_format_message(fmt, target, flag))
    elif kind is not None:
        raise ValueError(f"kind must be None, 'dataset' or 'figure', got {kind!r}")
    for source, role in _inputs_with_recorded_data(inputs):
        if _same_or_inside(source, target):
            inside = source.resolve() != target.resolve() and source.resolve().is_relative_to(
                target.resolve())
            what = f"holds '{source}', {role}" if inside else f"is {role}"
            raise ValueError(f"{flag} '{target}' {what}: choose another path (outputs never "
                             "replace their inputs)")
    if target.exists() or target.is_symlink():
        if not overwrite:
            raise FileExistsError(f"'{target}' already exists: pass --overwrite "
                                  "(overwrite=True) to replace it, or choose another path")
        found = _output_kind(target)
        if found is None:
            what = "directory" if target.is_dir() else "file"
            raise ValueError(f"'{target}' is a {what} that ssmpde did not write: refusing to "
                             "replace it, even with --overwrite; remove it yourself or choose "
                             "another path")
        if kind is not None and found != kind:
            raise ValueError(f"'{target}' is {_ARTICLE[found]} ssmpde wrote, not "
                             f"{_ARTICLE[kind]}: refusing to replace it with one, even with "
                             "--overwrite; choose another path")
    return target


_ARTICLE = {"run": "a run directory", "dataset": "a dataset", "figure": "a figure"}
