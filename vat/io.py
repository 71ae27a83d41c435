"""Atomic writes (temp file + fsync + os.replace: a kill never leaves a partial file), and
the kinds of paths, checked before anything opens them."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from vat.errors import VatError, shown_path

_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
# `.NAME.tmp-` then, for temps written by this version, `PID@HOST-` and mkstemp's 8 characters.
TEMP_RE = re.compile(
    r"^\.(?P<name>.+)\.tmp-(?:(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)-)?[A-Za-z0-9_]+$"
)


_TEMP_NAME_BYTES = 180  # of a name's 255 bytes, leaving room for the temp's additions


def temp_prefix(path: Path) -> str:
    raw = path.name.encode("utf-8", "surrogateescape")[:_TEMP_NAME_BYTES]
    name = raw.decode("utf-8", "surrogateescape")
    return f".{name}.tmp-{os.getpid()}@{_HOST}-"


def temp_path(path: Path) -> Path:
    """A fresh hidden temp name beside `path`, owned by this process."""
    return path.with_name(temp_prefix(path) + secrets.token_hex(4))


def _orphaned(m: re.Match) -> bool:
    """A temp whose process, on this host, no longer exists."""
    if m["pid"] is None or m["host"] != _HOST or int(m["pid"]) == os.getpid():
        return False
    try:
        os.kill(int(m["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        pass
    return False


def remove_stale_temps(directory: str | os.PathLike, any_owner: bool = False) -> list[Path]:
    """Remove (and return) the vat temps in `directory` of dead processes (`any_owner`: all)."""
    removed = []
    d = Path(directory)
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = TEMP_RE.match(p.name)
        if not m or p.is_symlink() or not (p.is_file() or p.is_dir()):
            continue  # never follow or remove a link: vat does not create them
        if not (any_owner or _orphaned(m)):
            continue
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def _filesystem_error(e: BaseException) -> OSError | None:
    """The OSError behind e, searched along the cause chain (torch.save wraps it in a
    RuntimeError) or read from a SafetensorError's message ("... (os error 28)")."""
    for _ in range(8):
        if e is None or (isinstance(e, OSError) and e.errno is not None):
            return e
        code = re.search(r"\(os error (\d+)\)", str(e))
        if code and type(e).__name__ == "SafetensorError":
            return OSError(int(code[1]), os.strerror(int(code[1])))
        e = e.__cause__ or e.__context__
    return None


def filesystem_write_error(
    path: str | os.PathLike, e: BaseException, temp: str = "file"
) -> Exception | None:
    """The one-line error for a write that failed on the filesystem (full disk, read-only...),
    or None when `e` is not one or already names the file."""
    err = _filesystem_error(e)
    if err is None or isinstance(err, FileNotFoundError | NotADirectoryError | PermissionError):
        return None
    what = err.strerror or str(err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        what = "no space left on device"
    elif err.errno == errno.ENAMETOOLONG:
        what = f"file name too long ({_too_long(path)})"
    return VatError(
        f"cannot write {shown_path(path)}: {what}; nothing was written there "
        f"(the temporary {temp} was removed)"
    )


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False
) -> None:
    """`write(f)` a temp file beside `path`, fsync, rename; a failure leaves `path` untouched."""
    path = writable_target(path, "cannot write: output")  # never a folder, FIFO or device
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path))
        # mkstemp creates 0600; give the file the mode a plain open() would (or the old file's)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~umask)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as e:
        error = filesystem_write_error(path, e)
        if error is None:
            raise  # not the filesystem's, or already one line naming the file (USER_ERRORS)
        raise error from e
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def write_json_atomic(path: str | os.PathLike, obj: object, indent: int = 1) -> None:
    atomic_write(path, lambda f: f.write(json.dumps(obj, indent=indent) + "\n"))


def check_output_file(
    path: str | os.PathLike | None,
    overwrite: bool,
    option: str = "--output",
    kind: str = "file",
) -> Path | None:
    """The output file `path` (None passes through), checked before any work: a writable file
    path, not a link, not existing unless `overwrite`."""
    if path is None:
        return None
    out = Path(path)
    st = _stat(out, option)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise VatError(f"{option} {shown_path(out)} is a directory; expected a {kind} path")
    writable_target(out, option)
    if out.is_symlink():
        raise VatError(
            f"{option} {shown_path(out)} is a symbolic link; vat does not write through links"
        )
    if out.exists() and not overwrite:
        raise VatError(f"{option} {shown_path(out)} already exists; pass --overwrite to replace it")
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=temp_prefix(out) + "probe-"):
            pass
    except OSError as e:
        raise VatError(
            f"{option} {shown_path(out)}: cannot write in {shown_path(parent)} "
            f"({e.strerror or type(e).__name__})"
        ) from None
    return out


def figure_class():
    """matplotlib's Figure class (no pyplot: no display backend, no global state)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise VatError(
            "plots need matplotlib: pip install 'variational-auto-transformer[plots]' "
            "(or pip install matplotlib)"
        ) from None
    return Figure


def save_png(fig, path: str | os.PathLike, **savefig_kwargs) -> Path:
    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, format="png", **savefig_kwargs), binary=True)
    return path


# a FIFO would block a reader and a device never end; process substitution stays allowed
_PIPE_DIRS = ("/dev/fd/", "/proc/self/fd/", "/proc/")
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
    (stat.S_ISREG, "a file"),
)


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def _too_long(path: str | os.PathLike) -> str:
    """Why the system refused `path` as too long: one name in it, or the whole path."""
    text = os.fspath(path)
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in text.split(os.sep)),
                  default=0)  # fmt: skip
    if longest > 255:  # NAME_MAX of every common filesystem
        return f"a name in it has {longest} bytes, more than the 255 a file name may have"
    return f"{len(text)} characters, more than a path may have on this system"


def name_too_long(path: str | os.PathLike, what: str) -> VatError:
    return VatError(f"{what} {shown_path(path)}: file name too long ({_too_long(path)})")


def _stat(path: Path, what: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None  # missing, or under a file: the caller's own message says so
        if e.errno == errno.ENAMETOOLONG:
            raise name_too_long(path, what) from None
        reason = (
            "a symbolic link loop (too many levels of symbolic links)"
            if e.errno == errno.ELOOP
            else e.strerror
        )
        raise VatError(f"{what} {shown_path(path)}: {reason}") from None


def regular_file(path: str | os.PathLike, what: str, *, allow_pipe: bool = False) -> Path:
    """`path` if it is a regular file (or, with allow_pipe, a /dev/fd pipe), else a VatError."""
    p = Path(path)
    st = _stat(p, what)
    if st is None:
        raise VatError(f"{what} {shown_path(p)}: no such file")
    if stat.S_ISREG(st.st_mode):
        return p
    if allow_pipe and stat.S_ISFIFO(st.st_mode) and str(p).startswith(_PIPE_DIRS):
        return p
    raise VatError(f"{what} {shown_path(p)} is {_kind(st.st_mode)}, expected a regular file")


def folder(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    st = _stat(p, what)
    if st is None:
        raise VatError(f"{what} {shown_path(p)}: no such folder")
    if not stat.S_ISDIR(st.st_mode):
        raise VatError(f"{what} {shown_path(p)} is {_kind(st.st_mode)}, expected a folder")
    return p


def writable_target(path: str | os.PathLike, what: str) -> Path:
    """A file path to (re)place: missing or a regular file, never a folder, FIFO or device."""
    p = Path(path)
    st = _stat(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise VatError(
            f"{what} {shown_path(p)} is {_kind(st.st_mode)}, expected a file path to write"
        )
    return p
