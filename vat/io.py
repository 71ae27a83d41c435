"""Atomic file writes: a kill or an error mid-write never leaves a partial file, and an
existing file stays intact until the new one is complete (temp file + fsync + os.replace).

Temp files are named `.NAME.tmp-PID@HOST-XXXXXXXX` beside their target, so that a temp left
by a killed process is recognisable: the next write to the same directory removes the temps
of dead processes of this host (`remove_stale_temps`). A failed write (a full disk, a
read-only filesystem) removes its own temp and raises a one-line `VatError` naming the path.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

_HOST = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"
# `.NAME.tmp-` then, for temps written by this version, `PID@HOST-` and mkstemp's 8 characters.
TEMP_RE = re.compile(
    r"^\.(?P<name>.+)\.tmp-(?:(?P<pid>\d+)@(?P<host>[A-Za-z0-9._-]+)-)?[A-Za-z0-9_]+$"
)


def temp_prefix(path: Path) -> str:
    return f".{path.name}.tmp-{os.getpid()}@{_HOST}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def remove_stale_temps(directory: str | os.PathLike, any_owner: bool = False) -> list[Path]:
    """Remove vat temp files in `directory` left by killed processes; return what was removed.

    A temp is stale when its process (same host) no longer exists. With `any_owner` (used by
    train.py while it holds the run directory's lock, so no other vat process writes there),
    every vat temp file is stale, including those of other hosts and of older vat versions.
    """
    removed = []
    d = Path(directory)
    if not d.is_dir():
        return removed
    for p in d.iterdir():
        m = TEMP_RE.match(p.name)
        if not m or not p.is_file():
            continue
        if not any_owner:
            if (
                m["pid"] is None
                or m["host"] != _HOST
                or int(m["pid"]) == os.getpid()
                or _pid_alive(int(m["pid"]))
            ):
                continue
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def write_error(path: str | os.PathLike, e: OSError) -> Exception:
    """A one-line user error for a failed write (full disk, quota, read-only filesystem...)."""
    from vat.errors import VatError  # local: vat.errors imports vat.checkpoint, which imports this

    what = (
        "no space left on device"
        if e.errno in (errno.ENOSPC, errno.EDQUOT)
        else (e.strerror or str(e))
    )
    return VatError(
        f"cannot write {path}: {what}; nothing was written there (the temporary file was removed)"
    )


def _filesystem_error(e: BaseException) -> OSError | None:
    """The OSError (with an errno) behind e: torch.save wraps its writer's OSError in a
    RuntimeError ("unexpected pos"), so the cause chain is searched too."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, OSError) and e.errno is not None:
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def atomic_write(
    path: str | os.PathLike, write: Callable[[IO], None], binary: bool = False
) -> None:
    """Call `write(f)` on a temp file beside `path`, fsync it, then rename it to `path`.

    An OSError of the filesystem (ENOSPC, EDQUOT, EROFS, EIO...) becomes a one-line VatError
    naming `path`; any error or interrupt (KeyboardInterrupt too) removes the temp file and
    leaves an existing `path` untouched.
    """
    from vat.input_checks import writable_target  # local: input_checks imports vat.errors

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
        os_error = _filesystem_error(e)
        if os_error is None or isinstance(
            os_error, FileNotFoundError | NotADirectoryError | PermissionError
        ):
            raise  # not the filesystem's, or already one line naming the file (USER_ERRORS)
        raise write_error(path, os_error) from e
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def write_json_atomic(path: str | os.PathLike, obj: object, indent: int = 1) -> None:
    """JSON (UTF-8, trailing newline) written atomically."""

    def _write(f: IO) -> None:
        json.dump(obj, f, indent=indent)
        f.write("\n")

    atomic_write(path, _write)
