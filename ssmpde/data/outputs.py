"""Crash-safe outputs: atomic writes and write locks, for every file or directory ssmpde writes.

:func:`atomic_path` writes under a hidden temporary name that becomes the target only when the
block completes; :func:`output_lock` keeps a second writer off the same target;
:func:`remove_stale_temporaries` clears what an interrupted write left; :func:`disk_space`
turns a write that ran out of disk space into one :class:`DiskFullError` naming the path and the
space needed. Datasets, checkpoints, manifests and figures all go through these. The output
policy of the commands (:func:`ssmpde.data.check_output`) lives above the dataset readers
(:mod:`ssmpde.data.output_policy`), because deciding whether an existing directory is an ssmpde
output means reading it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pathlib
import shutil
import time
import uuid
from collections.abc import Callable, Iterator

from ssmpde.core import format_bytes

__all__ = [
    "DiskFullError",
    "OutputLockedError",
    "atomic_path",
    "block_size",
    "disk_space",
    "disk_usage",
    "free_space",
    "output_lock",
    "remove_output",
    "remove_stale_temporaries",
]

# The errors of a file system that has no room left: the device is full, or the user's quota.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_MESSAGES = tuple(os.strerror(code) for code in sorted(_FULL_ERRNOS))
# Writers that hide the errno (netCDF-C reports ENOSPC as "NetCDF: HDF error", safetensors as
# its own error type) failed for want of space if less than this was free when they failed.
_NEARLY_FULL = 4 * 2 ** 20
_RERUN = "then run the same command again"
# Errors of a caller's logic, never of a write: not judged by the free space.
_NOT_WRITES = (ValueError, TypeError, AttributeError, LookupError, AssertionError,
               ArithmeticError)


class DiskFullError(OSError):
    """A write ran out of disk space (``ENOSPC``) or quota (``EDQUOT``).

    The message names the path, the space it needed where known and the space free, and
    says how to go on (``hint``: by default, free space and run the same command again).
    Nothing partial is left behind by the writers that raise it. Picklable, so a dask worker
    can hand it to the driver unchanged.
    """

    def __init__(self, path: str | os.PathLike, *, needed: int | None = None,
                 free: int | None = None, hint: str | None = None) -> None:
        self.path, self.needed, self.free, self.hint = os.fspath(path), needed, free, hint
        room = [] if needed is None else [f"it needs up to {format_bytes(needed)}"]
        if free is not None:
            room.append(f"{format_bytes(free)} free there")
        super().__init__(
            f"no space left on the disk to write '{self.path}'"
            + (f" ({', '.join(room)})" if room else "")
            + f": {hint or f'free some space (or choose a path on a larger disk), {_RERUN}'}")
        self.errno = errno.ENOSPC

    def __reduce__(self):
        return _rebuild_disk_full, (self.path, self.needed, self.free, self.hint)


def _rebuild_disk_full(path, needed, free, hint) -> DiskFullError:
    return DiskFullError(path, needed=needed, free=free, hint=hint)


def free_space(path: str | os.PathLike) -> int:
    """Bytes an unprivileged user may still write on the file system holding ``path`` (or its
    nearest existing parent)."""
    path = pathlib.Path(os.fspath(path)).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def block_size(path: str | os.PathLike) -> int:
    """The allocation unit of the file system holding ``path``: every file, however small,
    occupies a whole number of these."""
    try:
        return max(512, os.statvfs(os.fspath(path)).f_frsize)
    except OSError:
        return 4096


def disk_usage(path: str | os.PathLike) -> int:
    """Bytes ``path`` occupies on disk (a file, or a directory with everything under it)."""
    path = pathlib.Path(os.fspath(path))
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_blocks * 512
    except OSError:
        return 0
    total = 0
    for root, _, names in os.walk(path):
        for name in [".", *names]:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue  # removed meanwhile
    return total


def _reports_full(error: BaseException) -> bool:
    """Whether ``error`` or an error it was raised from says the disk or quota is full."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DiskFullError) or (
                isinstance(error, OSError) and error.errno in _FULL_ERRNOS):
            return True
        if any(message in str(error) for message in _FULL_MESSAGES):
            return True
        error = error.__cause__ or error.__context__
    return False


def _out_of_space(error: BaseException, path: pathlib.Path, needed: int | None,
                  written: int) -> bool:
    """Whether the failed write ``error`` of ``path`` ran out of space.

    By its errno (or the message of one) where the writer keeps it; else, for writers that
    hide it, by the space left: less than a few MiB, or less than the rest of ``needed`` (the
    write's upper bound, of which ``written`` bytes were on disk when it failed).
    """
    if isinstance(error, (KeyboardInterrupt, SystemExit, MemoryError)):
        return False
    if _reports_full(error):
        return True
    if not isinstance(error, Exception) or isinstance(error, _NOT_WRITES):
        return False
    try:
        free = free_space(path)
    except OSError:
        return False
    return free < _NEARLY_FULL or (needed is not None and free < needed - written)


@contextlib.contextmanager
def disk_space(path: str | os.PathLike, *, needed: int | None = None,
               cleanup: Callable[[], None] | None = None,
               hint: str | None = None) -> Iterator[None]:
    """Turn a write inside the block that ran out of disk space into :class:`DiskFullError`.

    The one place that recognises a full disk, for every writer of the package: by errno
    (``ENOSPC``, ``EDQUOT``) anywhere in the chain of errors, or, for writers that hide it
    (netCDF-C reports ``NetCDF: HDF error``), by the free space when the write failed.

    Parameters
    ----------
    path : path
        What the block writes (named in the message; its file system is the one checked).
    needed : int, optional
        An upper bound of the bytes the block writes, shown in the message.
    cleanup : callable, optional
        Removes what the block wrote so far; called on a full disk (other errors leave the
        block's files to the writer's own recovery, as a kill would).
    hint : str, optional
        How to go on, instead of "free some space ..., then run the same command again".
    """
    path = pathlib.Path(os.fspath(path))
    try:
        yield
    except BaseException as error:
        if not _out_of_space(error, path, needed, 0):
            raise
        if cleanup is not None:
            cleanup()
        inner = error if isinstance(error, DiskFullError) else None
        raise DiskFullError(inner.path if inner else path,
                            needed=needed if needed is not None or not inner else inner.needed,
                            free=_free_or_none(path),
                            hint=hint or (inner.hint if inner else None)) \
            from (inner.__cause__ if inner else error)


def _free_or_none(path: pathlib.Path) -> int | None:
    try:
        return free_space(path)
    except OSError:
        return None


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


def remove_output(path: str | os.PathLike) -> None:
    """Delete an output ssmpde wrote (a file, or a directory such as a zarr store), for a run
    that failed on its own input. Writes still landing after an interrupt or a cancelled
    dask task (which may recreate files for a moment) are waited out, for a few seconds."""
    _remove(pathlib.Path(os.fspath(path)))


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
def atomic_path(target: str | os.PathLike, *, needed: int | None = None) -> Iterator[pathlib.Path]:
    """Write a file or directory under a temporary name; it becomes ``target`` only if the
    block completes.

    The one atomic-write helper of the package (datasets, checkpoints, manifests, figures).
    The temporary is a hidden ``.<name>.tmp-<hex>`` beside ``target`` (same file system, so
    the final rename is atomic) and keeps the target's suffix (writers pick formats by it).
    On any exception, ``KeyboardInterrupt`` included, the temporary is removed and an
    existing ``target`` is left as it was. A directory replaces a directory whole. A write
    that runs out of disk space raises :class:`DiskFullError` naming ``target`` and
    ``needed`` (an upper bound of the bytes written, where the caller knows one), after the
    temporary is removed.

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
    except BaseException as error:
        # Judged before the temporary goes: its bytes are what the write got onto the disk.
        written = disk_usage(tmp)
        full = not isinstance(error, DiskFullError) and _out_of_space(
            error, target.parent, needed, written)
        free = _free_or_none(target.parent) if full else None
        _remove(tmp)
        if not full:
            raise
        # Free once the temporary is gone (a writer that failed may hold it open until exit).
        raise DiskFullError(target, needed=needed,
                            free=None if free is None else free + written) from error


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
        with disk_space(path):
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
