"""The run folder of `vat train`: one run per folder, resumed only when asked (README, "Resume").

One lock (FOLDER/.lock), one record of what the run wrote (RUN/.vat-run.json, all --overwrite
deletes), no write through a link; a resume may change how the run is driven, never what is trained.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from vat.errors import VatError
from vat.io import remove_stale_temps, write_json_atomic
from vat.runs.names import RUN_FILE_RES
from vat.share.checkpoint import read_checkpoint

LOCK_NAME = ".lock"
MANIFEST_NAME = ".vat-run.json"
MAX_RECORD_BYTES = 1 << 20  # vat's record and configs are kilobytes: a far larger one is not read
# What a resume may change: it drives the run, it does not define what is trained; the
# command's value is used (tests/test_run_dir.py checks each).
RESUME_MAY_CHANGE = {
    "model.compile",
    "model.loss.fused_cross_entropy",
    "data.num_workers",
    "data.num_proc",
    "data.cache_dir",
    "data.test_files",
    "data.progress",
}
# Trainer options a resume may change, which make it differ from an uninterrupted run.
_RESUME_WARN = "accumulate_grad_batches gradient_clip_val gradient_clip_algorithm precision".split()
_RESUME_WARN += ["devices", "num_nodes"]
# Files Lightning opens for writing itself (vat's own are renamed into place).
_LIGHTNING_FILE = re.compile(
    r"hparams\.yaml|metrics\.csv|events\.out\.tfevents\..*|config(-resume-\d+|-validate|-test)?\.yaml"
)
_held_locks: list[int] = []
_created: list[Path] = []  # folders this start made: removed if it is refused before it begins


def lock_folder(folder: Path, option: str) -> None:
    """Create FOLDER if needed and hold FOLDER/.lock until release_locks or exit."""
    try:
        missing = [p for p in (folder, *folder.parents) if not p.exists() and not p.is_symlink()]
        folder.mkdir(parents=True, exist_ok=True)
        _created.extend(reversed(missing))
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        link = e.errno == errno.ELOOP  # O_NOFOLLOW met a link
        why = "is a symbolic link; vat never writes through a link" if link else e.strerror
        raise VatError(f"{option} {folder}: its lock file {LOCK_NAME} {why}") from None
    held = os.pread(fd, 64, 0).decode(errors="replace").strip()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise VatError(
            f"{option} {folder} is in use by another run (pid {held or '?'}); wait for it to "
            f"finish or choose another {option}"
        ) from None
    if held and not held.isdigit():  # another tool's .lock: not vat's to write over
        os.close(fd)
        raise VatError(
            f"{option} {folder}: {LOCK_NAME} is not vat's lock file (it holds text, not a "
            f"process id); vat does not write over it: move it or choose another {option}"
        )
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held_locks.append(fd)


def lock_holder(folder: Path) -> str | None:
    """The process id of another process holding FOLDER/.lock, or None."""
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a probe, dropped at once by the close
    except BlockingIOError:
        return os.read(fd, 64).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None


def release_locks(failed: bool = False) -> None:
    """Drop this command's locks; after a refused start (failed), first remove the folders it
    created that hold nothing but its lock."""
    for d in reversed(_created) if failed else ():
        with contextlib.suppress(OSError):
            if [p.name for p in d.iterdir()] == [LOCK_NAME]:
                (d / LOCK_NAME).unlink()
            d.rmdir()  # not empty: something else wrote there, so it stays
    _created.clear()
    while _held_locks:
        os.close(_held_locks.pop())  # closing the descriptor drops the flock


def _read_record(path: Path) -> bytes:
    """A file vat wrote (kilobytes): one far larger was not, and is not read (ValueError)."""
    with open(path, "rb") as f:
        raw = f.read(MAX_RECORD_BYTES + 1)
    if len(raw) > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is too large")
    return raw


def read_manifest(run_dir: Path) -> dict | None:
    """RUN/.vat-run.json, or None where there is none of vat's shape; a damaged one is refused,
    never guessed at, since it decides what --overwrite deletes."""
    path = Path(run_dir) / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return None
    try:
        m = json.loads(_read_record(path))
    except (OSError, ValueError, RecursionError):
        raise VatError(
            f"{path} is damaged (not the small JSON record vat writes): it records which files "
            f"of {run_dir} a vat run wrote; remove it (they then count as not written by vat)"
        ) from None
    ok = isinstance(m, dict) and m.get("written_by") == "vat train"
    ok = ok and isinstance(m.get("preexisting"), list) and isinstance(m.get("write_dirs", {}), dict)
    return m if ok else None


def run_files(run_dir: Path, dirs: dict[str, Path]) -> tuple[list[Path], list[Path]]:
    """An earlier run's files where this run writes (run-named files in run_dir, checkpoints and
    events in its other folders), split into those the record claims and those it does not."""
    record = read_manifest(run_dir) or {"preexisting": None, "write_dirs": {}}
    before, recorded = record["preexisting"], record.get("write_dirs", {})
    ours: list[Path] = []
    foreign: list[Path] = []
    for option, d in dirs.items():
        same = d.resolve() == run_dir.resolve()
        skip = same and option not in ("--run_dir", "--checkpoint.dirpath")
        # run_dir/checkpoints is itself one of run_dir's files
        if skip or not d.is_dir() or d.resolve() == (run_dir / "checkpoints").resolve():
            continue
        for p in sorted(d.iterdir()):
            if option == "--run_dir":
                empty = p.name == "checkpoints" and p.is_dir() and not any(p.glob("*.ckpt"))
                if not any(r.fullmatch(p.name) for r in RUN_FILE_RES) or empty:
                    continue
                mine = before is not None and p.name not in before
            elif p.suffix == ".ckpt" or (not same and p.name.startswith("events.out.tfevents.")):
                mine = recorded.get(option) == str(d.resolve())
            else:
                continue
            (ours if mine else foreign).append(p)
    return ours, foreign


class MarkTrained(Callback):
    """Records "trained" once the first optimiser step passed the non-finite guard."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir, self.done = Path(run_dir), False

    def on_train_batch_start(self, trainer, *_) -> None:
        if self.done or trainer.global_step < 1 or not trainer.is_global_zero:
            return
        self.done = True
        with contextlib.suppress(VatError):  # damaged since the start: the next start says so
            m = read_manifest(self.run_dir)
            if m is not None and m.get("trained") is False:
                write_json_atomic(self.run_dir / MANIFEST_NAME, {**m, "trained": True})

    on_train_end = on_train_batch_start


def write_dirs(cfg, run_dir: Path) -> dict[str, Path]:
    """Every folder this run writes into, by the option that names it (a logger's only with a
    fixed version: one that picks a new version_N never writes into an earlier one)."""
    ckpt = cfg.checkpoint.dirpath if hasattr(cfg, "checkpoint") else None
    dirs = {"--run_dir": run_dir, "--checkpoint.dirpath": Path(ckpt or run_dir / "checkpoints")}
    loggers = cfg.trainer.get("logger") if hasattr(cfg, "trainer") else None
    for i, lg in enumerate(loggers if isinstance(loggers, list) else [loggers]):
        init = lg.get("init_args") if isinstance(lg, dict) else getattr(lg, "init_args", None)
        get = init.get if hasattr(init, "get") else (lambda k, d=None: d)
        if get("save_dir") is not None and isinstance(get("version"), str):
            name = get("name", "lightning_logs") or ""
            dirs[f"--trainer.logger ({i})"] = Path(get("save_dir")) / name / get("version")
    return dirs


def check_place(path: Path, what: str, own_run: Path | None = None) -> None:
    """Refuse a folder inside another run's files (its checkpoints/, or any name that run's
    --overwrite deletes): that run's next --overwrite would delete it."""
    p = path.resolve()
    for owner in p.parents:
        if own_run is not None and owner == own_run.resolve():
            return  # inside this run's own folder
        if (owner / MANIFEST_NAME).is_file():
            top = p.relative_to(owner).parts[0]
            if any(r.fullmatch(top) for r in RUN_FILE_RES):
                where = "is the" if p == owner / top else "lies inside the"
                raise VatError(
                    f"{what} {path} {where} {top} folder of the run in {owner}, which a "
                    f"--overwrite of that run removes: choose a folder outside it"
                )
            return


def check_folders(cfg) -> None:
    """Refuse an empty folder option (Path("") is a folder the user did not name) and a link
    where Lightning opens a file itself."""
    named = {"--run_dir": cfg.run_dir, "--checkpoint.dirpath": cfg.checkpoint.dirpath}
    for option, value in named.items():
        if value is not None and not str(value).strip():
            raise VatError(f"{option} is empty: name a folder (. for the current one)")
    for option, d in write_dirs(cfg, Path(cfg.run_dir)).items():
        for p in sorted(d.iterdir()) if d.is_dir() else ():
            if p.is_symlink() and _LIGHTNING_FILE.fullmatch(p.name):
                raise VatError(
                    f"{option} {d}: {p.name} is a symbolic link; Lightning writes that file "
                    f"itself and would write through the link into {os.readlink(p)}: remove it"
                )


def _check_inputs_kept(cfg, files: list[Path]) -> None:
    """--overwrite never deletes the config file the command itself was given."""
    for c in [Path(str(getattr(c, "absolute", None) or c)) for c in cfg.get("config") or []]:
        for f in files:
            inside = f.rglob("*") if f.is_dir() and not f.is_symlink() else [f]
            if c.is_file() and any(x.is_file() and os.path.samefile(x, c) for x in inside):
                raise VatError(
                    f"--overwrite would remove {f}, which is this command's own config (-c {c}); "
                    f"copy it out of the run directory first"
                )


def find_last(ckpt_dir: Path) -> Path | None:
    """What `--ckpt_path last` means: the newer of last.ckpt and on_exception.ckpt."""
    found = [p for p in (ckpt_dir / "last.ckpt", ckpt_dir / "on_exception.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def _plain(x: object) -> object:  # so a YAML/CLI value compares equal to a checkpoint's
    return json.loads(json.dumps(x, default=str))


def _first_difference(now: object, then: object, prefix: str) -> tuple[str, object, object] | None:
    if isinstance(now, dict) and isinstance(then, dict):
        for k in now:  # keys the checkpoint did not record (newer options) cannot be compared
            if not k.startswith("_") and k in then and f"{prefix}.{k}" not in RESUME_MAY_CHANGE:
                diff = _first_difference(now[k], then[k], f"{prefix}.{k}")
                if diff:
                    return diff
        return None
    return None if now == then else (prefix, now, then)


def check_resume(cfg, ckpt_path: Path, ckpt: dict) -> None:
    """Refuse a resume that changes model/data options or asks for fewer steps (epochs)."""
    for section, key in (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters")):
        now = cfg[section].as_dict() if hasattr(cfg[section], "as_dict") else cfg[section]
        diff = _first_difference(_plain(now), _plain(ckpt.get(key) or {}), section)
        if diff:
            raise VatError(
                f"--{diff[0]}: a resume cannot change it ({diff[2]!r} in {ckpt_path}, "
                f"{diff[1]!r} now); start a fresh run to change it"
            )
    # Lightning's "epoch" is the 0-based epoch under way: a resume with max_epochs below it
    # would end at once, without a word, and the run would look finished.
    for what, reached, counted in (("step", "global_step", ""), ("epoch", "epoch", ", from 0")):
        limit, at = cfg.trainer.get(f"max_{what}s"), int(ckpt.get(reached, 0))
        if limit is not None and 0 <= limit < at:
            raise VatError(
                f"--trainer.max_{what}s {limit} is below the {what} of {ckpt_path} "
                f"({at}{counted}): a resume can only train further"
            )


def _resumes(run_dir: Path) -> list[int]:  # N of each config-resume-N.yaml
    return [int(p.stem.rsplit("-", 1)[1]) for p in run_dir.glob("config-resume-*.yaml")]


def warn_trainer_changes(cfg, run_dir: Path) -> None:
    """Warn about each trainer option that makes the resume differ from an uninterrupted run."""
    n = _resumes(run_dir)
    try:
        recorded = yaml.safe_load(
            _read_record(run_dir / (f"config-resume-{max(n)}.yaml" if n else "config.yaml"))
        )
    except (OSError, ValueError, yaml.YAMLError):
        return
    before = recorded.get("trainer") if isinstance(recorded, dict) else None
    for k in _RESUME_WARN if isinstance(before, dict) else ():
        if k in before and _plain(cfg.trainer.get(k)) != _plain(before[k]):
            print(
                f"vat: warning: this resume changes trainer.{k} from {before[k]!r} to "
                f"{cfg.trainer.get(k)!r}; the run will differ from an uninterrupted one",
                file=sys.stderr,
            )


@dataclass
class FreshStart:
    """A fresh run that begin_fresh starts once the data is ready (a refused start: no change)."""

    run_dir: Path
    dirs: dict[str, Path]
    present: list[str]
    old: list[Path]
    replaces_failed_start: bool


def prepare_fit(
    cfg, read: Callable[[Path], dict] = read_checkpoint
) -> tuple[str, FreshStart | None]:
    """Check and lock the folders of `fit` and resolve cfg.ckpt_path; return the config file
    this start writes and, for a fresh run on rank 0, what begin_fresh does."""
    run_dir = Path(cfg.run_dir)
    dirs = write_dirs(cfg, run_dir)
    rank_zero = rank_zero_only.rank == 0  # the run folder's owner, known before any Trainer
    if cfg.get("overwrite") and cfg.ckpt_path:
        raise VatError("--overwrite starts a fresh run and cannot be combined with --ckpt_path")
    present = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if rank_zero:
        for option, d in dirs.items():
            check_place(d, option, own_run=None if option == "--run_dir" else run_dir)
        locked: set[Path] = set()
        for option, d in dirs.items():  # run_dir's lock covers the folders inside it
            inside = option != "--run_dir" and d.resolve().is_relative_to(run_dir.resolve())
            if not inside and d.resolve() not in locked:
                lock_folder(d, option)
                locked.add(d.resolve())
        for d in dirs.values():  # temps of killed writes: the locks say no run writes here
            remove_stale_temps(d, any_owner=True)
    last = cfg.ckpt_path == "last"
    if last:
        cfg.ckpt_path = find_last(dirs["--checkpoint.dirpath"])
    if cfg.ckpt_path is None:
        if not rank_zero:
            return "config.yaml", None
        old, foreign = run_files(run_dir, dirs)
        # a start that never trained a step and saved no checkpoint is not a run
        record = read_manifest(run_dir) or {}
        failed = record.get("trained") is False and not any(
            p.name == "checkpoints" or p.suffix == ".ckpt" for p in old
        )
        names = ", ".join(p.name for p in (foreign or old)[:3])
        no_ckpt = f"--ckpt_path last: no checkpoint, but {run_dir} holds" if last else None
        if foreign:
            raise VatError(
                f"{no_ckpt} files no vat run recorded writing ({names}): move them away or "
                f"choose another --run_dir"
                if last
                else f"{foreign[0].parent} holds files no vat run recorded writing ({names}); "
                f"neither a fresh run nor --overwrite replaces them: move them away or choose "
                f"another folder"
            )
        if old and not cfg.get("overwrite") and not failed:
            raise VatError(
                f"{no_ckpt} an earlier run ({names}): start afresh with --overwrite"
                if last
                else f"--run_dir {run_dir} already holds a run ({names}); resume it with "
                f"--ckpt_path last, or replace it with --overwrite"
            )
        _check_inputs_kept(cfg, old)
        if last:
            print("vat: --ckpt_path last: no checkpoint yet; starting a fresh run", file=sys.stderr)
        return "config.yaml", FreshStart(run_dir, dirs, present, old, failed and bool(old))
    cfg.ckpt_path = str(cfg.ckpt_path)
    ckpt_path = Path(cfg.ckpt_path)
    if rank_zero and ckpt_path.is_file():
        check_resume(cfg, ckpt_path, read(ckpt_path))
        warn_trainer_changes(cfg, run_dir)
        if ckpt_path.name == "on_exception.ckpt":
            print(
                f"vat: resuming from {ckpt_path}, saved where an error stopped training, perhaps "
                f"inside a step: not bitwise the run it would have been",
                file=sys.stderr,
            )
    if not (run_dir / "config.yaml").exists():
        return "config.yaml", None
    return f"config-resume-{max(_resumes(run_dir), default=0) + 1}.yaml", None


def begin_fresh(start: FreshStart) -> None:
    """Delete what a fresh run replaces (checkpoints first, so a failure half way still leaves
    a run) and write its record."""
    if start.replaces_failed_start:
        names = ", ".join(p.name for p in start.old[:3])
        print(f"vat: replacing a start that failed before its step 1 ({names})", file=sys.stderr)
    for p in sorted(start.old, key=lambda p: p.name != "checkpoints"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    gone = {p.name for p in start.old if p.parent == start.run_dir} | {LOCK_NAME, MANIFEST_NAME}
    record = {
        "written_by": "vat train",
        "manifest_version": 2,
        "preexisting": [n for n in start.present if n not in gone],
        "write_dirs": {k: str(v.resolve()) for k, v in start.dirs.items()},
        "trained": False,  # until the first optimiser step (MarkTrained)
    }
    write_json_atomic(start.run_dir / MANIFEST_NAME, record)
    _created.clear()  # the folders hold a run now: a later failure leaves them
