"""Crash-safe outputs: atomic writes and write locks, for every file or directory ssmpde writes.

:func:`atomic_path` writes under a hidden temporary name that becomes the target only when the
block completes; :func:`output_lock` keeps a second writer off the same target;
:func:`remove_stale_temporaries` clears what an interrupted write left. Datasets, checkpoints,
manifests and figures all go through these. The output policy of the commands
(:func:`ssmpde.data.check_output`) lives with the dataset files, because deciding whether an
existing directory is an ssmpde output means reading it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import shutil
import time
import uuid
from collections.abc import Iterator

__all__ = [
    "OutputLockedError",
    "atomic_path",
    "output_lock",
    "remove_stale_temporaries",
]


def _remove(path: pathlib.Path, *, settle: float = 5.0) -> None:
    if not path.is_dir() or path.is_symlink():
        path.unlink(missing_ok=True)
        return
    # After an interrupt reaches the main thread, zarr's event-loop thread (and dask workers)
    # may still finish chunk writes for a moment, recreating files under `path`: delete until
    # the directory stays gone for two consecutive looks, for at most `settle` seconds.
    deadline = time.monotonic() + settle
    gone_before = False
    while time.monotonic() < deadline:
        shutil.rmtree(path, ignore_errors=True)
        gone = not path.exists()
        if gone and gone_before:
            return
        gone_before = gone
        time.sleep(0.02)


def _commit(tmp: pathlib.Path, target: pathlib.Path) -> None:
    """Move the finished ``tmp`` to ``target``, replacing whatever is there."""
    exists = target.exists() or target.is_symlink()
    if exists and (tmp.is_dir() or (target.is_dir() and not target.is_symlink())):
        # rename() cannot replace a non-empty directory (or a file by a directory): move the
        # old one aside, put the new one in place, and only then delete the old one.
        backup = target.with_name(f".{target.name}.old-{uuid.uuid4().hex}")
        os.replace(target, backup)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(backup, target)
            raise
        _remove(backup)
    else:
        os.replace(tmp, target)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Write a file or directory under a temporary name; it becomes ``target`` only if the
    block completes.

    The one atomic-write helper of the package (datasets, checkpoints, manifests, figures).
    The temporary is a hidden ``.<name>.tmp-<hex>`` beside ``target`` (same file system, so
    the final rename is atomic) and keeps the target's suffix (writers pick formats by it).
    On any exception, ``KeyboardInterrupt`` included, the temporary is removed and an
    existing ``target`` is left as it was. A directory replaces a directory whole.

    Example
    -------
    >>> with atomic_path("notes.txt") as tmp:  # doctest: +SKIP
    ...     tmp.write_text("complete or absent")
    """
    target = pathlib.Path(os.fspath(target))
    tmp = target.parent / f".{target.stem}.tmp-{uuid.uuid4().hex}{target.suffix}"
    try:
        yield tmp
        _commit(tmp, target)
    except BaseException:
        _remove(tmp)
        raise


class OutputLockedError(OSError):
    """Another process is writing the same output (it holds the lock)."""


def _lock_path(target: pathlib.Path) -> pathlib.Path:
    return target.parent / f".{target.name}.lock"


@contextlib.contextmanager
def output_lock(target: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Hold the write lock of ``target`` (a dataset, a run directory) for the block.

    The lock is an ``fcntl`` lock on a hidden ``.<name>.lock`` beside the target holding the
    writer's PID; the kernel drops it when the process dies, so a killed writer never leaves
    a stale lock. A second writer gets :class:`OutputLockedError` at once, naming the PID.
    """
    target = pathlib.Path(os.fspath(target)).expanduser()
    path = _lock_path(target)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"output directory '{path.parent}' does not exist; create it "
                                f"first (mkdir -p {path.parent})")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            # The lock is ssmpde's own hidden file: name the user's output and its directory.
            if path.is_dir() and not path.is_symlink():
                message = (f"cannot lock '{target}' for writing: '{path}', the name of its "
                           "lock, is a directory ssmpde did not make; remove it or choose "
                           "another output")
            else:
                message = (f"cannot write '{target}': '{path.parent}' does not accept new "
                           f"files ({error.strerror or error}); check that it is a writable "
                           "directory, or choose another output")
            problem = type(error)(message)
            problem.errno = error.errno
            raise problem from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutputLockedError(f"'{target}' is being written by another ssmpde process "
                                    f"(PID {holder}); wait for it to finish or choose another "
                                    "output") from None
        try:  # the file may have been unlinked by the previous holder: lock the live one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def remove_stale_temporaries(target: str | os.PathLike) -> None:
    """Delete what an interrupted write of ``target`` left beside it (call under its lock)."""
    target = pathlib.Path(os.fspath(target))
    patterns = (f".{target.stem}.tmp-*{target.suffix}", f".{target.name}.old-*")
    for pattern in patterns:
        for leftover in target.parent.glob(pattern):
            _remove(leftover)
