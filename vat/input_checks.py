"""Kinds of paths (issue 20, section 3): a path that should be a regular file is one, and a
folder is a folder, checked before anything opens it. A named pipe (FIFO) blocks a reader
until some writer appears, and a device such as /dev/zero never ends, so either would hang a
command or fill memory; a symlink loop is named as such rather than as a missing file.

Every check is a one-line VatError naming the option and the path. A shell's process
substitution (`--input <(head -500 file)`, a pipe under /dev/fd) stays allowed where a
stream is read once (`allow_pipe`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from vat.errors import VatError

_PIPE_DIRS = ("/dev/fd/", "/proc/self/fd/", "/proc/")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _stat(path: Path, what: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None  # missing, or under a file: the caller's own message says so
        reason = (
            "a symbolic link loop (too many levels of symbolic links)"
            if e.errno == errno.ELOOP
            else e.strerror
        )
        raise VatError(f"{what} {path}: {reason}") from None


def regular_file(path: str | os.PathLike, what: str, *, allow_pipe: bool = False) -> Path:
    """`path` as a Path if it is a regular file (or, with allow_pipe, a /dev/fd pipe);
    otherwise a one-line error naming `what` (an option such as --ckpt) and the path."""
    p = Path(path)
    st = _stat(p, what)
    if st is None:
        raise VatError(f"{what} {p}: no such file")
    if stat.S_ISREG(st.st_mode):
        return p
    if allow_pipe and stat.S_ISFIFO(st.st_mode) and str(p).startswith(_PIPE_DIRS):
        return p
    raise VatError(f"{what} {p} is {_kind(st.st_mode)}, expected a regular file")


def folder(path: str | os.PathLike, what: str) -> Path:
    """`path` as a Path if it is a folder; otherwise a one-line error."""
    p = Path(path)
    st = _stat(p, what)
    if st is None:
        raise VatError(f"{what} {p}: no such folder")
    if not stat.S_ISDIR(st.st_mode):
        raise VatError(f"{what} {p} is {_kind(st.st_mode)}, expected a folder")
    return p


def file_or_folder(path: str | os.PathLike, what: str) -> Path:
    """A regular file or a folder (a .ckpt or an exported model folder)."""
    p = Path(path)
    st = _stat(p, what)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return p
    return regular_file(p, what)


def writable_target(path: str | os.PathLike, what: str) -> Path:
    """A file path to (re)place: missing, or an existing regular file (or a link to one,
    which a rename replaces without writing through it); never a folder, FIFO or device."""
    p = Path(path)
    st = _stat(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise VatError(f"{what} {p} is {_kind(st.st_mode)}, expected a file path to write")
    return p
