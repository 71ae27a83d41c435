"""What a stage works with: one call of the suite on OUT_DIR.

OUT_DIR holds at most 8 files, each under 16 MiB: OUT_FILES (the report, its Markdown, the
plot, three exported models, the logs) and, after a call that trained the reference, its
checkpoint in parts (carry.py); the runs, caches and logs live in OUT_DIR/work/. The state
(the report: records.Report) is saved as OUT_DIR/gpu_report.json as the stages go (after each
stage, throughput variant and evaluated run), so that the next call continues from there."""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import json
import os
import re
import shutil
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import yaml

from bench.gpu_suite import schema
from bench.gpu_suite.plan import BASE_CONFIG, REFERENCE_CONFIG, SHARED_PREFIX, Plan
from vat.errors import VatError
from vat.io import TEMP_RE, atomic_write, write_json_atomic
from vat.runs.names import RUN_FILE_PATTERNS

if TYPE_CHECKING:
    from bench.gpu_suite.records import Report

# OUT_DIR's top-level names and what a call returns at most: out_files.py (the wrapper's
# --copy-to reads them without vat)
from bench.gpu_suite.out_files import (  # noqa: E402, F401 (re-exported)
    MAX_OUT_BYTES,
    MAX_OUT_FILE,
    MAX_OUT_FILES,
    MAX_REPORT_BYTES,
    OUT_FILES,
    REPORT,
    WORK,
    WORK_FOLDERS,
    link_text,
    suite_named,
)

RETURNED = "returned"
"""OUT_DIR/work/returned/: files an earlier call wrote and returned, moved out of OUT_DIR's
top level when this call's own files need the room (make_room)."""
DATA_LINK = "data"
"""OUT_DIR/work/data: a link to this machine's data folder. `vat train --ckpt_path last`
refuses a resume whose data.train_files differ from the checkpoint's (vat.runs.run_dir
.check_resume), and the data folder's absolute path differs between machines (the bundle's
offline/data sits wherever the checkout was copied): the reference's config names its files
through this link, relative to OUT_DIR/work, so that its checkpoint resumes on any machine.
(The exported folder's card then names them as data/corpus/..., no machine's path.)"""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tokens_text(n: float | None) -> str:
    """600.0M, or 6,000 below a million (the smoke run's budgets)."""
    if n is None:
        return "n/a"
    return f"{n / 1e6:,.1f}M" if n >= 1e6 else f"{n:,.0f}"


def pack(dest: Path, folder: Path, arcname: str, gz: bool = False) -> None:
    """A folder as one tar file (atomically: vat.io.atomic_write's fresh temporary file,
    renamed into place; a link at `dest` is replaced, never written through)."""

    def write(f) -> None:
        with tarfile.open(fileobj=f, mode="w:gz" if gz else "w") as tf:
            tf.add(folder, arcname=arcname)

    atomic_write(dest, write, binary=True)


TAR_SLACK = 2**20
"""What a tar holds besides its members' content, at most: a 512-byte header each (and a pax
header with its mtime, as tarfile writes), padding to 512 bytes, the end blocks."""


class TarRefused(tarfile.TarError):
    """A tar file the suite does not unpack (read_tar); its text says why, for one line."""


class _Capped:
    """`raw`'s bytes, at most `limit` of them (and TAR_SLACK), then TarRefused: tarfile reads
    a tar through it, so that neither a member nor a header (tarfile reads a pax or long-name
    header whole, into memory) makes gzip expand further than the cap."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self.raw, self.limit, self.left = raw, limit, limit + TAR_SLACK

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(self.left + 1 if n < 0 or n > self.left else n)
        self.left -= len(data)
        if self.left < 0:
            raise TarRefused(f"it unpacks to more than {self.limit / 2**20:g} MiB")
        return data


@contextlib.contextmanager
def read_tar(
    src: BinaryIO, gz: bool, max_bytes: int, max_members: int
) -> Iterator[tuple[list[tarfile.TarInfo], tarfile.TarFile]]:
    """A tar file the suite wrote (gzipped when `gz`), open as `src`: its members and the
    tar, open to be read once, in order (mode "r|"), after a first pass over its headers
    found at most `max_members` files and folders (no link, device or sparse file) holding
    at most `max_bytes`. Else TarRefused, before anything is written. Both passes read
    through _Capped: the bytes read, and so memory and what is written, stay within the
    caps (the tar's own framing aside, TAR_SLACK), whatever the headers say."""

    def tar() -> tarfile.TarFile:
        src.seek(0)
        raw = gzip.GzipFile(fileobj=src, mode="rb") if gz else src
        return tarfile.open(fileobj=_Capped(raw, max_bytes), mode="r|")

    members, total = [], 0
    with tar() as tf:
        for m in tf:
            members.append(m)
            total += m.size
            if not (m.isfile() or m.isdir()) or m.issparse():
                raise TarRefused(f"{m.name} is not a file or a folder")
            if len(members) > max_members:
                raise TarRefused(f"it holds more than {max_members} files and folders")
            if total > max_bytes:
                raise TarRefused(f"its files hold more than {max_bytes / 2**20:g} MiB")
    with tar() as tf:
        yield members, tf


def copy_atomic(src: Path, dest: Path) -> None:
    """`src` copied to `dest` through vat.io.atomic_write (a fresh temporary file renamed
    into place: a link at `dest` is replaced, never written through)."""

    def write(f) -> None:
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f)

    atomic_write(dest, write, binary=True)


def check_out_dir(out: Path) -> None:
    """OUT_DIR before any work: never a link (the suite writes, replaces and removes there);
    its report, when there, a file of at most MAX_REPORT_BYTES; without one, no file of the
    suite's names (a user's gpu_report.md or reference.tar would be replaced); and none of
    the suite's folders in work/ a link. Each refusal is one line naming the path."""
    if out.is_symlink():
        raise VatError(f"OUT_DIR {out} is {link_text(out)}; the suite never writes through "
                       "links: name the folder itself")  # fmt: skip
    if not out.exists():
        return
    if not out.is_dir():
        raise VatError(f"OUT_DIR {out} is a file, expected a folder")
    report = out / REPORT
    if report.is_symlink():
        raise VatError(f"{report} is {link_text(report)}; the suite never writes through "
                       "links: move it away")  # fmt: skip
    if not report.exists():
        theirs = sorted(p.name for p in out.iterdir() if suite_named(p.name) or p.name == WORK)
        if theirs:
            raise VatError(
                f"OUT_DIR {out} holds {out / theirs[0]} but no {REPORT}: not a folder the "
                "suite wrote, and it would replace them; move them away or choose another "
                "OUT_DIR"
            )
    for p in sorted(out.iterdir()):
        if suite_named(p.name) and p.is_symlink():
            raise VatError(f"{p} is {link_text(p)}; the suite never writes through links: "
                           "move it away")  # fmt: skip
    work = out / WORK
    folders = [work, *(work / f for f in WORK_FOLDERS)]
    for sub in ("frontier", "export"):
        if (work / sub).is_dir() and not (work / sub).is_symlink():
            folders += sorted((work / sub).iterdir())
    for f in folders:
        if f.is_symlink():
            raise VatError(f"{f} is {link_text(f)}; the suite writes and removes files there "
                           "and never through a link: move it away")  # fmt: skip


RUN_NAMES = [
    re.compile(p)
    for p in (
        # what `vat train` writes in its run folder, as vat lists it
        *RUN_FILE_PATTERNS,
        r"\.lock",
        r"\.vat-run\.json",
        # what the suite writes there: the finished mark and the evaluations
        r"\.trained",
        r"suite_eval\.json",
        r"bleu_.*\.json",
        r"sts_.*\.json",
        r"feature_compare",
    )
]
"""The names in a training run's folder that vat or the suite wrote; a run folder holding
anything else is not removed (remove_run)."""


def remove_run(run_dir: Path) -> None:
    """Remove a training run's folder that the suite starts again, only when it holds
    nothing but what vat and the suite write there (RUN_NAMES; in checkpoints/, .ckpt files
    and vat's temporary files): a user's file in it is named instead, and the folder kept.
    A link is never followed or removed."""
    if run_dir.is_symlink():
        raise VatError(f"{run_dir} is {link_text(run_dir)}; the suite never removes through "
                       "links: move it away")  # fmt: skip
    if not run_dir.exists():
        return
    for p in sorted(run_dir.iterdir()):
        ours = any(r.fullmatch(p.name) for r in RUN_NAMES) or bool(TEMP_RE.match(p.name))
        if ours and p.name == "checkpoints":
            inside = [] if p.is_symlink() or not p.is_dir() else sorted(p.iterdir())
            stray = [c for c in inside if not (c.suffix == ".ckpt" or TEMP_RE.match(c.name))]
            ours = not p.is_symlink() and not stray
            p = stray[0] if stray else p
        if not ours:
            raise VatError(
                f"{p} was not written by vat or the suite, and the suite would remove "
                f"{run_dir} to start that run again; move it away"
            )
    shutil.rmtree(run_dir)


LISTING = ".suite_files.json"
"""In a folder the suite fills from a tar file (work/start/): every path it unpacked, so that
the next unpack removes the folder only when it holds nothing else (remove_listed)."""


def write_listing(folder: Path) -> None:
    """Record every path under `folder` (just unpacked by the suite) in folder/LISTING."""
    paths = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
    write_json_atomic(folder / LISTING, paths)


def remove_listed(folder: Path) -> None:
    """Remove `folder` when every path under it is one its LISTING records (the suite wrote
    them); else one line naming the first other path, and the folder is kept."""
    if folder.is_symlink():
        raise VatError(f"{folder} is {link_text(folder)}; the suite never removes through "
                       "links: move it away")  # fmt: skip
    if not folder.exists():
        return
    listing = folder / LISTING
    try:
        ours = set(json.loads(listing.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, RecursionError):
        ours = set()
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if rel != LISTING and rel not in ours:
            raise VatError(f"{p} was not unpacked by the suite, and the suite would remove "
                           f"{folder} to unpack there again; move it away")  # fmt: skip
    shutil.rmtree(folder)


class Call:
    """OUT_DIR and its work folder, the train config, the plan, the data folder, the state
    (gpu_report.json's content) and the notes of one call; every stage's `run` gets one."""

    def __init__(
        self,
        out: Path,
        plan: Plan,
        data_dir: Path,
        steps: int | None,
        state: Report,
        trust_compile_cache: bool = False,
    ) -> None:
        self.out, self.plan, self.data_dir, self.state = out, plan, data_dir, state
        self.trust_compile_cache = trust_compile_cache
        """--trust-compile-cache: the compile cache an earlier call returned is unpacked into
        the reference's run folder and vat train told to load it (it is code torch runs)."""
        self.work = out / "work"
        self.logs = self.work / "logs"
        self.config = self.work / "suite_config.yaml"
        self.reference_config = self.work / "reference_config.yaml"
        """The reference's config: its data files named relative to OUT_DIR/work, where its
        runs start, through the link DATA_LINK: its checkpoint resumes on another machine."""
        self.steps_override = steps
        self.parts_written = False
        """Whether this call wrote the reference's checkpoint parts into OUT_DIR (carry.py):
        a call returns them only then (Suite.run removes the others at its end), so that a
        call that trains no reference returns at most OUT_FILES (8 files at most come back,
        and the frontier's call already fills 7)."""

    def write_config(self) -> None:
        """The train configs the stages use, with the data folder's paths and the mode's
        overrides: configs/corpus_gpu.yaml (throughput, frontier) and
        configs/reference_gpu.yaml (the reference)."""
        self.work.mkdir(parents=True, exist_ok=True)
        self._link_data()
        self._write_config(BASE_CONFIG, self.config, self.data_dir)
        self._write_config(REFERENCE_CONFIG, self.reference_config, Path(DATA_LINK))

    def _link_data(self) -> None:
        """work/data -> this machine's data folder (replaced atomically when it points
        elsewhere: a seeded OUT_DIR, or a data folder that moved)."""
        link = self.work / DATA_LINK
        if link.exists() and not link.is_symlink():
            raise VatError(f"{link} is not the suite's link to the data folder; move it away")
        if link.is_symlink() and Path(os.readlink(link)) == self.data_dir:
            return
        tmp = link.with_name(f".{DATA_LINK}.tmp{os.getpid()}")
        tmp.unlink(missing_ok=True)
        os.symlink(self.data_dir, tmp)
        os.replace(tmp, link)

    def _write_config(self, base: Path, dest: Path, data_dir: Path) -> None:
        cfg = yaml.safe_load(base.read_text(encoding="utf-8"))
        data = cfg["data"]
        for key in ("train_files", "val_files"):
            data[key] = [str(data_dir / p[len(SHARED_PREFIX) :]) for p in data[key]]
        data["cache_dir"] = str(self.work / "cache")
        cfg["trainer"].pop("callbacks", None)  # samples and geometry: measured after training
        cfg["trainer"]["enable_progress_bar"] = False
        for dotted, value in self.plan.config_overrides.items():
            node = cfg
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        text = f"# Written by bench/gpu_suite from configs/{base.name}\n"
        dest.write_text(text + yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")

    def make_room(self, since: float) -> list[str]:
        """Within MAX_OUT_FILES and MAX_OUT_BYTES at OUT_DIR's top level, by moving files
        written before `since` (a time.time() value: an earlier call's, which that call
        returned) into work/returned/, largest first; the names moved. A call that trains
        the reference adds its checkpoint's parts (34 MiB for d128) to an OUT_DIR that may
        already hold the frontier's artefacts, returned by the call that made them."""
        files = [p for p in self.out.iterdir() if p.is_file() and not p.name.startswith(".")]
        older = sorted((p for p in files if p.stat().st_mtime < since),
                       key=lambda p: p.stat().st_size, reverse=True)  # fmt: skip
        moved = []
        while older and (
            len(files) > MAX_OUT_FILES or sum(p.stat().st_size for p in files) > MAX_OUT_BYTES
        ):
            p = older.pop(0)
            (self.work / RETURNED).mkdir(parents=True, exist_ok=True)
            os.replace(p, self.work / RETURNED / p.name)
            files.remove(p)
            moved.append(p.name)
        return moved

    def save(self) -> None:
        write_json_atomic(self.out / REPORT, schema.write(self.state))

    def note(self, stage: str, text: str) -> None:
        self.state.stages[stage].notes.append(f"[{now_iso()}] {text}")
        print(f"gpu_suite: {stage}: {text}", file=sys.stderr)
