"""Atomic file writes: a kill or an error mid-write never leaves a partial file, and an
existing file stays intact until the new one is complete (temp file + fsync + os.replace).

Temp files and folders (`temp_path`; the token cache builds its folders under such names
too) are named `.NAME.tmp-PID@HOST-XXXXXXXX` beside their target, so that a temp left by a
killed process is recognisable: the next write to the same directory removes the temps of
dead processes of this host (`remove_stale_temps`). This is vat's one temp-file scheme.
A failed write (a full disk, a read-only filesystem) removes its own temp and raises a
one-line `VatError` naming the path.
"""

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


_TEMP_NAME_BYTES = 180
"""How much of a target's name its temp names keep: a file name may have 255 bytes, and the
temp adds `.`, `.tmp-PID@HOST-` and 8 characters, so a target with a long but valid name
still gets a temp beside it."""


def temp_prefix(path: Path) -> str:
    raw = path.name.encode("utf-8", "surrogateescape")[:_TEMP_NAME_BYTES]
    name = raw.decode("utf-8", "surrogateescape")
    return f".{name}.tmp-{os.getpid()}@{_HOST}-"


def temp_path(path: Path) -> Path:
    """A fresh hidden temp name beside `path` (a file or a folder), owned by this process."""
    return path.with_name(temp_prefix(path) + secrets.token_hex(4))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_temps(directory: str | os.PathLike, any_owner: bool = False) -> list[Path]:
    """Remove vat temp files and folders in `directory` left by killed processes; return what
    was removed.

    A temp is stale when its process (same host) no longer exists. With `any_owner` (used by
    `vat train` while it holds the run directory's lock, so no other vat process writes there),
    every vat temp file is stale, including those of other hosts and of older vat versions.
    """
    removed = []
    d = Path(directory)
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = TEMP_RE.match(p.name)
        if not m or p.is_symlink() or not (p.is_file() or p.is_dir()):
            continue  # never follow or remove a link: vat does not create them
        if not any_owner:
            if (
                m["pid"] is None
                or m["host"] != _HOST
                or int(m["pid"]) == os.getpid()
                or _pid_alive(int(m["pid"]))
            ):
                continue
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def write_error(path: str | os.PathLike, e: OSError, temp: str = "file") -> Exception:
    """A one-line user error for a failed write (full disk, quota, read-only filesystem...);
    `temp` is what was written first and removed (a temporary "file" or "folder")."""
    what = (
        "no space left on device"
        if e.errno in (errno.ENOSPC, errno.EDQUOT)
        else (e.strerror or str(e))
    )
    if e.errno == errno.ENAMETOOLONG:
        what = f"file name too long ({_too_long(path)})"
    return VatError(
        f"cannot write {shown_path(path)}: {what}; nothing was written there "
        f"(the temporary {temp} was removed)"
    )


def _filesystem_error(e: BaseException) -> OSError | None:
    """The OSError (with an errno) behind e: torch.save wraps its writer's OSError in a
    RuntimeError ("unexpected pos"), so the cause chain is searched too; safetensors (Rust)
    raises a SafetensorError whose message alone carries it ("... (os error 28)")."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            return e
        code = (
            re.search(r"\(os error (\d+)\)", str(e))
            if type(e).__name__ == "SafetensorError"
            else None
        )
        if code:
            return OSError(int(code[1]), os.strerror(int(code[1])))
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def filesystem_write_error(
    path: str | os.PathLike, e: BaseException, temp: str = "file"
) -> Exception | None:
    """The one-line error for a write to `path` that failed on the filesystem (full disk,
    quota, read-only, I/O error), or None when `e` is not such a failure (or is already one
    line naming the file: missing folder, permission)."""
    os_error = _filesystem_error(e)
    if os_error is None or isinstance(
        os_error, FileNotFoundError | NotADirectoryError | PermissionError
    ):
        return None
    return write_error(path, os_error, temp)


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False
) -> None:
    """Call `write(f)` on a temp file beside `path`, fsync it, then rename it to `path`.

    An OSError of the filesystem (ENOSPC, EDQUOT, EROFS, EIO...) becomes a one-line VatError
    naming `path`; any error or interrupt (KeyboardInterrupt too) removes the temp file and
    leaves an existing `path` untouched.
    """
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
        with os.fdopen(
            fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})
        ) as f:
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
    """JSON (UTF-8, trailing newline) written atomically."""

    def _write(f: IO) -> None:
        json.dump(obj, f, indent=indent)
        f.write("\n")

    atomic_write(path, _write)


# -- output guards: checked before any work, the same way by every command -------------------
def check_output_file(
    path: str | os.PathLike | None,
    overwrite: bool,
    option: str = "--output",
    kind: str = "file",
) -> Path | None:
    """The output file `path` (None passes through), after refusing what must not be written:
    a folder, an existing file without `overwrite`, a symbolic link (vat never writes
    through a link it did not create), or a folder where nothing can be created."""
    if path is None:
        return None
    # a folder, a FIFO, a device such as /dev/null and a name the system refuses as too long
    # are refused here, before any work, not when the result is written
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
    parent = out.parent if str(out.parent) else Path(".")
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


# -- figures: matplotlib is optional (`pip install "vat[plots]"`) ------------------------------
def figure_class():
    """matplotlib's Figure class: figures made without pyplot use the Agg canvas and no
    global state, so plotting never needs (or changes) a display backend. Without matplotlib
    this is a one-line VatError, raised before any work when called first."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise VatError(
            "plots need matplotlib: pip install 'variational-auto-transformer[plots]' "
            "(or pip install matplotlib)"
        ) from None
    return Figure


def save_png(fig, path: str | os.PathLike, **savefig_kwargs) -> Path:
    """Write a matplotlib figure as a PNG, atomically."""
    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, format="png", **savefig_kwargs), binary=True)
    return path


# -- kinds of paths, checked before anything opens them -----------------------------------------
# Kinds of paths: a path that should be a regular file is one, and a folder is a folder,
# checked before anything opens it. A named pipe (FIFO) blocks a reader until some writer
# appears, and a device such as /dev/zero never ends, so either would hang a command or fill
# memory; a symlink loop is named as such rather than as a missing file.
#
# Every check is a one-line VatError naming the option and the path. A shell's process
# substitution (`--input <(head -500 file)`, a pipe under /dev/fd) stays allowed where a
# stream is read once (`allow_pipe`).
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
    if stat.S_ISREG(mode):
        return "a file"
    return "not a regular file"


def _too_long(path: str | os.PathLike) -> str:
    """Why the system refused `path` as too long: a name (one part between slashes) longer than
    the filesystem allows, or the whole path longer than the system's limit."""
    text = os.fspath(path)
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in text.split(os.sep)),
                  default=0)  # fmt: skip
    if longest > 255:  # NAME_MAX of every common filesystem
        return f"a name in it has {longest} bytes, more than the 255 a file name may have"
    return f"{len(text)} characters, more than a path may have on this system"


def name_too_long(path: str | os.PathLike, what: str) -> VatError:
    """The one-line error for a path the system refused as too long (ENAMETOOLONG)."""
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
    """`path` as a Path if it is a regular file (or, with allow_pipe, a /dev/fd pipe);
    otherwise a one-line error naming `what` (an option such as --ckpt) and the path."""
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
    """`path` as a Path if it is a folder; otherwise a one-line error."""
    p = Path(path)
    st = _stat(p, what)
    if st is None:
        raise VatError(f"{what} {shown_path(p)}: no such folder")
    if not stat.S_ISDIR(st.st_mode):
        raise VatError(f"{what} {shown_path(p)} is {_kind(st.st_mode)}, expected a folder")
    return p


def writable_target(path: str | os.PathLike, what: str) -> Path:
    """A file path to (re)place: missing, or an existing regular file (or a link to one,
    which a rename replaces without writing through it); never a folder, FIFO or device."""
    p = Path(path)
    st = _stat(p, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise VatError(
            f"{what} {shown_path(p)} is {_kind(st.st_mode)}, expected a file path to write"
        )
    return p
