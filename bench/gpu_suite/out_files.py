"""What OUT_DIR holds at its top level, what one call returns, and bench/gpu_suite.sh's
--copy-to (`python bench/gpu_suite/out_files.py check DIR` before the suite runs, `... copy
OUT_DIR DIR EXIT LIMIT` after it).

Standard library only: the wrapper runs it without vat or torch (seconds, not a minute, on a
busy node), and whatever the suite did.

The copy writes only the suite's own files (OUT_FILES and the reference's parts), within
what a call may return (MAX_OUT_FILES files of at most MAX_OUT_FILE, MAX_OUT_BYTES in all),
each under a fresh temporary name in DIR renamed into place: a link at DIR/NAME is
replaced, never written through. It replaces only what an earlier copy wrote: the copied
gpu_report.md ends with a record (an HTML comment, invisible when rendered) of each file
the copy wrote and its SHA-256, and a file of the suite's names in DIR that the record does
not vouch for (a user's, or one changed since) is refused before the suite runs. The record
lives in the Markdown rather than a file of its own: a call returns at most 8 files."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

REPORT = "gpu_report.json"
MARKDOWN = "gpu_report.md"
OUT_FILES = (
    "gpu_report.json",
    "gpu_report.md",
    "frontier.png",
    "best_sts.tar",
    "best_bleu.tar",
    "reference.tar",
    "logs.tar.gz",
)
"""Everything the suite writes at OUT_DIR's top level (each <= 16 MiB), besides the reference's
checkpoint parts (carry.py: reference.ckpt.part1, ...), which only a call that trained the
reference leaves there: at most 8 files in all."""
PART_PREFIX = "reference.ckpt.part"
PART_RE = re.compile(re.escape(PART_PREFIX) + r"[1-9][0-9]{0,2}")
"""The reference's checkpoint parts (carry.py), part1 to part999."""
CACHE_PACK = "reference.compile_cache.tar.gz"
"""The reference's compile cache, carried beside its parts (carry.py)."""
MAX_OUT_FILE = 16 * 2**20
MAX_OUT_FILES = 8
MAX_OUT_BYTES = 64 * 2**20
"""What comes back from one call at most: 8 files of at most MAX_OUT_FILE, 64 MiB in all (the
copy-back of the allocations the recipes are sized for)."""
MAX_REPORT_BYTES = 4 * 2**20
"""gpu_report.json at most (a GPU call's is about 50 KB): a larger one was not written by
the suite, and is refused before it is read."""
WORK = "work"
WORK_FOLDERS = ("reference", "frontier", "export", "start", "logs", "cache", "returned",
                "throughput", "feature_compare")  # fmt: skip
"""The suite's folders in OUT_DIR/work (and each run or export folder one level below
frontier/ and export/), where it writes, replaces and removes: never a link."""
COPY_ORDER = (REPORT, MARKDOWN, "<parts>", CACHE_PACK, "reference.tar", "best_sts.tar",
              "best_bleu.tar", "frontier.png", "logs.tar.gz")  # fmt: skip
"""What --copy-to takes first when the limits leave something behind: the state, then what
continues the reference, then the models, then the plot and logs."""
RECORD_START = "<!-- bench/gpu_suite.sh --copy-to wrote: "
RECORD_END = " -->"


class CopyError(Exception):
    """A user error: one line, exit code 2."""


def suite_named(name: str) -> bool:
    """A name the suite writes at OUT_DIR's top level (and --copy-to in its folder)."""
    return name in OUT_FILES or name == CACHE_PACK or bool(PART_RE.fullmatch(name))


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISREG(mode):
        return "a file"
    return "a device or socket"


def link_text(path: Path) -> str:
    """How a symbolic link at `path` is named in an error: dangling, a loop, or where to."""
    try:
        os.stat(path)
    except OSError:
        return "a dangling symbolic link (or a link loop)"
    return f"a symbolic link to {os.path.realpath(path)}"


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file. Never through a link: O_NOFOLLOW
    refuses one at open, so a link swapped in after any check is refused too (a seed's
    `ln -s ~/secret best_sts.tar` would otherwise be copied out); O_NONBLOCK: a FIFO does not
    hang the call. Else OSError whose strerror says what is there ("a symbolic link to ...")."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(e.errno, link_text(path), str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, _kind(mode), str(path))
    return os.fdopen(fd, "rb")


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return sha256_of(f)


def sha256_of(f: BinaryIO) -> str:
    """The SHA-256 of what is left to read in `f`."""
    h = hashlib.sha256()
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
    return h.hexdigest()


def _split_record(text: str) -> tuple[str, dict | None]:
    """gpu_report.md's text without its copy record, and the record (None: none, or one
    that does not vouch for this very text)."""
    lines = text.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i].rstrip("\n")
        if line.startswith(RECORD_START) and line.endswith(RECORD_END):
            rest = "".join(lines[:i] + lines[i + 1 :])
            try:
                record = json.loads(line[len(RECORD_START) : -len(RECORD_END)])
            except (ValueError, RecursionError):
                return rest, None
            ok = (
                isinstance(record, dict)
                and isinstance(record.get("files"), dict)
                and record.get("md") == hashlib.sha256(rest.encode("utf-8")).hexdigest()
            )
            return rest, record if ok else None
    return text, None


def copied_record(dest: Path) -> dict[str, str]:
    """{name: SHA-256} of the files an earlier copy wrote into `dest`, as its gpu_report.md
    records them ({} when there is no such record, or the Markdown changed since)."""
    md = dest / MARKDOWN
    try:
        st = os.lstat(md)
    except FileNotFoundError:
        return {}
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_OUT_FILE:
        return {}
    _, record = _split_record(md.read_text(encoding="utf-8", errors="replace"))
    if record is None:
        return {}
    files = {k: v for k, v in record["files"].items() if isinstance(v, str) and suite_named(k)}
    return {**files, MARKDOWN: "(the record's own file)"}


def check_dest(dest: Path) -> dict[str, str]:
    """--copy-to DIR, before the suite runs: a folder (or absent), never a link, holding no
    file of the suite's names that an earlier copy did not write (or that changed since).
    Returns the record of what an earlier copy wrote there."""
    opt = f"--copy-to {dest}"
    if dest.is_symlink():
        raise CopyError(f"{opt} is {link_text(dest)}; the copy never writes through links: "
                        "name a folder")  # fmt: skip
    if not dest.exists():
        return {}
    st = os.stat(dest)
    if not stat.S_ISDIR(st.st_mode):
        raise CopyError(f"{opt} is {_kind(st.st_mode)}, expected a folder")
    record = copied_record(dest)
    # the Markdown first: it holds the record, and without it no other file is vouched for
    for p in sorted(dest.iterdir(), key=lambda p: (p.name != MARKDOWN, p.name)):
        if not suite_named(p.name):
            continue  # the user's own files: never touched
        if p.is_symlink():
            raise CopyError(f"{opt}: {p} is {link_text(p)}; the copy never writes through "
                            "links: move it away or choose another folder")  # fmt: skip
        st = os.stat(p)
        if not stat.S_ISREG(st.st_mode):
            raise CopyError(f"{opt}: {p} is {_kind(st.st_mode)}; move it away or choose "
                            "another folder")  # fmt: skip
        ours = p.name == MARKDOWN and MARKDOWN in record
        if not ours and p.name in record and st.st_size <= MAX_OUT_FILE:
            ours = sha256(p) == record[p.name]
        if not ours:
            raise CopyError(
                f"{opt}: {p} was not written by an earlier copy (or changed since); the copy "
                "replaces only its own files: move it away or choose another folder"
            )
    return record


def out_files(out: Path) -> list[Path]:
    """The suite's files at OUT_DIR's top level (regular files, never links), in COPY_ORDER."""
    if out.is_symlink() or not out.is_dir():
        return []
    found = {
        p.name: p
        for p in out.iterdir()
        if suite_named(p.name) and not p.is_symlink() and p.is_file()
    }
    parts = sorted(
        (n for n in found if PART_RE.fullmatch(n)), key=lambda n: int(n[len(PART_PREFIX) :])
    )
    order = [n for key in COPY_ORDER for n in (parts if key == "<parts>" else [key])]
    return [found[n] for n in order if n in found]


def pick(files: list[Path]) -> tuple[list[Path], list[str]]:
    """What a call may return of `files` (in order): each at most MAX_OUT_FILE, at most
    MAX_OUT_FILES of them and MAX_OUT_BYTES in all; and what stays behind, with why."""
    taken, left, total = [], [], 0
    for p in files:
        size = p.stat().st_size
        if size > MAX_OUT_FILE:
            left.append(f"{p.name} (over {MAX_OUT_FILE // 2**20} MiB)")
        elif len(taken) >= MAX_OUT_FILES:
            left.append(f"{p.name} (over {MAX_OUT_FILES} files)")
        elif total + size > MAX_OUT_BYTES:
            left.append(f"{p.name} (over {MAX_OUT_BYTES // 2**20} MiB in all)")
        else:
            taken.append(p)
            total += size
    return taken, left


def _write_new(dest: Path, write) -> None:
    """`write(f)` into a fresh temporary file in dest's folder (O_EXCL: never a link), then
    renamed over dest: a link there is replaced, not written through."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.tmp-")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600: the mode a plain copy would have
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def exit_line(rc: int, limit: str, left: list[str]) -> str:
    why = {
        0: "every stage that ran finished or was skipped for time",
        1: "a stage failed: see Stages",
        2: "a prerequisite is missing or the bundle did not install: see the call's output",
        124: f"stopped by --call-limit-s {limit} (its state saved: the same call continues)",
        130: "stopped by a signal (its state saved: the same call continues)",
        137: "killed 28 s after --call-limit-s stopped it (what it saved before is here)",
    }.get(rc, "killed or crashed: see the call's output")
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    behind = f"; not copied: {', '.join(left)}" if left else ""
    return f"**This call: exit {rc}** ({why}; bench/gpu_suite.sh, {when}{behind}).\n"


def copy(out: Path, dest: Path, rc: int, limit: str = "") -> list[str]:
    """OUT_DIR's own files into `dest` (checked again: the suite ran in between), the exit
    line added to the copied gpu_report.md with the record of what was written; what stayed
    behind (names and why)."""
    record = check_dest(dest)
    dest.mkdir(parents=True, exist_ok=True)
    taken, left = pick(out_files(out))
    wrote = {k: v for k, v in record.items() if k != MARKDOWN and (dest / k).is_file()}
    for p in taken:
        if p.name == MARKDOWN:
            continue

        def write(f, p=p) -> None:
            with open_regular(p) as src:  # not a link swapped in since out_files() looked
                h = hashlib.sha256()
                for block in iter(lambda: src.read(1 << 20), b""):
                    f.write(block)
                    h.update(block)
            wrote[p.name] = h.hexdigest()

        _write_new(dest / p.name, write)
    md = out / MARKDOWN
    body = ""
    if md in taken:
        body, _ = _split_record(md.read_text(encoding="utf-8", errors="replace"))
    end = exit_line(rc, limit, left)
    text = f"{body}\n{end}"
    rec = {"md": hashlib.sha256(text.encode("utf-8")).hexdigest(), "files": wrote}
    # the record before the exit line, which stays the last thing a reader sees
    full = f"{body}\n{RECORD_START}{json.dumps(rec, sort_keys=True)}{RECORD_END}\n{end}"
    _write_new(dest / MARKDOWN, lambda f: f.write(full.encode("utf-8")))
    return left


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "check":
            check_dest(Path(argv[1]))
            return 0
        if len(argv) == 5 and argv[0] == "copy":
            left = copy(Path(argv[1]), Path(argv[2]), int(argv[3]), argv[4])
            if left:
                print(f"gpu_suite: not copied: {', '.join(left)}", file=sys.stderr)
            return 0
        raise CopyError("usage: out_files.py check DIR | copy OUT_DIR DIR EXIT LIMIT")
    except CopyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # open_regular's refusal, a full disk: one line naming the file
        print(f"error: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
