"""The run directory of `vat train`: one run per directory, resumed only when asked.

Rules (README, "Resume" and "What happens when..."):
- A fresh `fit` (no `--ckpt_path`) never resumes. Into a run directory that already holds a
  run (checkpoints, TensorBoard events or config.yaml) it stops with a one-line error unless
  `--overwrite` is given, which moves the old run's files into a trash folder inside the run
  directory (one rename each) and deletes that folder before training starts: a failure half
  way leaves an old run without its checkpoints, never a mix of two runs' files, and the
  next start removes a left-over trash folder. Only what a vat run wrote is moved: each
  fresh run writes RUN_DIR/.vat-run.json, naming what the folder held before it began and
  the other folders it writes into; run-named files no manifest claims (a user's own
  config.yaml) are refused, never moved, and so is the command's own `-c` file.
- A start that failed before its first training step (and saved no checkpoint) is not a run:
  its manifest says `"trained": false` until then, and the next fresh start replaces its
  files without `--overwrite`. A fresh start is checked whole first (the trainer settings
  against the data included) and only then moves an old run away (`FreshStart`,
  `begin_fresh`); a start refused before that removes the folders it created.
- Folders inside another run's checkpoints/ (or any name that run's --overwrite moves) are
  refused, and so are symbolic links where Lightning writes files itself (hparams.yaml,
  metrics.csv, events, config*.yaml): Lightning would write through them.
- `--ckpt_path last` resumes from the newest of checkpoints/last.ckpt and on_exception.ckpt
  (saved where an error stopped training, and said so when resumed from);
  with neither, an empty run directory starts fresh (so a requeued job can always pass it).
- A resume may change how the run is driven (trainer.max_steps upwards, max_time, logging,
  validation and checkpoint frequency, callbacks, progress bars, devices, data.num_workers,
  data.num_proc, data.cache_dir, data.test_files, data.progress, model.compile,
  model.loss.fused_cross_entropy) and nothing that defines what is trained (the rest of
  model.* and data.*): those are refused in one line naming the option, because the
  checkpoint's optimiser, schedules and tokenizer would silently win. The keys it may
  change (RESUME_MAY_CHANGE) take this command's values (vat.cli.train applies the
  checkpoint's model hyperparameters to the other keys only), and so does its config file.
- Each start writes its resolved config without destroying the first: config.yaml, then
  config-resume-1.yaml, config-resume-2.yaml, ...
- One process at a time per run directory: an flock on RUN_DIR/.lock held for the run's
  lifetime (the kernel drops it when the process dies, so a killed run never blocks), and on
  every other folder the run writes into (a --checkpoint.dirpath elsewhere, and the run that
  folder lies in); a folder holding another run's checkpoints or events is refused. The lock
  file is opened with O_NOFOLLOW: never written through a symlink.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from lightning.pytorch.callbacks import Callback

from vat.errors import VatError
from vat.io import remove_stale_temps, write_json_atomic
from vat.runs.names import RUN_FILE_RES
from vat.share.checkpoint import read_checkpoint

LOCK_NAME = ".lock"
MANIFEST_NAME = ".vat-run.json"
TRASH_PREFIX = ".overwritten-"
TRASH_MARK = ".vat-trash"
# .vat-run.json names a run's files: a few hundred bytes, a few kilobytes for a folder with
# many files of its own; one far larger was not written by vat and is not read into memory
MANIFEST_MAX_BYTES = 1 << 20
# Options a resume may change: they drive the run, they do not define what is trained; the
# command's value is the one used (tests/test_run_dir.py checks each).
RESUME_MAY_CHANGE = {
    "model.compile",
    "model.loss.fused_cross_entropy",
    "data.num_workers",
    "data.num_proc",
    "data.cache_dir",
    "data.test_files",
    "data.progress",
}
# Trainer options a resume may change, but which make it differ from an uninterrupted run.
_RESUME_WARN = (
    "accumulate_grad_batches",
    "gradient_clip_val",
    "gradient_clip_algorithm",
    "precision",
    "devices",
    "num_nodes",
)

_held_locks: list[int] = []


def is_global_rank_zero() -> bool:
    """True in the process that owns the run directory. DDP children started by Lightning
    (LOCAL_RANK set) and torchrun/SLURM ranks other than 0 leave it to rank 0."""
    for var in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var]) == 0
    return True


# -- the lock ---------------------------------------------------------------------------------
def lock_run_dir(run_dir: Path) -> None:
    """Take RUN_DIR/.lock for the lifetime of this run (released by release_locks or exit)."""
    lock_folder(run_dir, "--run_dir")


def lock_folder(folder: Path, option: str) -> None:
    """Take FOLDER/.lock (an flock) for the lifetime of this run. The lock file is opened
    with O_NOFOLLOW: a symlink there is refused, never written through."""
    path = folder / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise VatError(
                f"{option} {folder}: its lock file {path} is a symbolic link; vat never writes "
                f"through a link it did not create: remove it"
            ) from None
        raise VatError(
            f"{option} {folder}: cannot open the lock file {path} ({e.strerror})"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise VatError(f"{option} {folder}: its lock file {path} is not a regular file; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise VatError(
            f"{option} {folder} is in use by another run (pid {holder}); wait for it to finish "
            f"or choose another {option}"
        ) from None
    # vat's lock file holds a process id or nothing; a .lock with other text is another
    # tool's, and vat does not write over it
    held = os.pread(fd, 64, 0).strip()
    if held and not held.isdigit():
        os.close(fd)
        raise VatError(
            f"{option} {folder}: {path} is not vat's lock file (it holds text, not a process "
            f"id); vat does not write over it: move it or choose another {option}"
        )
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held_locks.append(fd)


def lock_holder(folder: Path) -> str | None:
    """The process id another process holding FOLDER/.lock wrote there (a run training in
    FOLDER), or None. Probed with a shared lock, dropped at once; a lock file that is a link,
    or none, has no holder."""
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 64).decode(errors="replace").strip() or "unknown"
    except OSError:
        return None
    finally:
        os.close(fd)  # drops the probe's lock
    return None


def release_locks(failed: bool = False) -> None:
    """Drop this command's locks; after a failed start that never began (failed), first
    remove the folders it created (remove_created)."""
    if failed:
        remove_created()
    _created.clear()
    while _held_locks:
        os.close(_held_locks.pop())  # closing the descriptor drops the flock


# -- fresh runs -------------------------------------------------------------------------------
def _candidate_files(run_dir: Path) -> list[Path]:
    """Files in run_dir named like a run's (an empty checkpoints/ does not count)."""
    if not run_dir.is_dir():
        return []
    found = []
    for p in sorted(run_dir.iterdir()):
        if any(r.fullmatch(p.name) for r in RUN_FILE_RES):
            if (
                p.name == "checkpoints"
                and p.is_dir()
                and not any(c.suffix == ".ckpt" for c in p.iterdir())
            ):
                continue
            found.append(p)
    return found


def previous_run_files(run_dir: Path) -> list[Path]:
    """The files of an earlier vat run in run_dir: named like a run's files and not there
    before that run started (its manifest says which were). Without a manifest, none."""
    manifest = read_manifest(run_dir)
    if manifest is None:
        return []
    before = set(manifest.get("preexisting", []))
    return [p for p in _candidate_files(run_dir) if p.name not in before]


def foreign_files(run_dir: Path) -> list[Path]:
    """Files named like a run's that no vat run in run_dir recorded writing (a user's own
    config.yaml or tokenizer.json, or a run of a vat without manifests)."""
    ours = set(previous_run_files(run_dir))
    return [p for p in _candidate_files(run_dir) if p not in ours]


def read_manifest(run_dir: Path) -> dict | None:
    """RUN_DIR/.vat-run.json, written by each fresh run: what it found there before it began
    (so `--overwrite` moves only what the run wrote) and the other folders it wrote into."""
    path = Path(run_dir) / MANIFEST_NAME
    try:
        if path.is_symlink() or not path.is_file():
            return None
        size = path.stat().st_size
        if size > MANIFEST_MAX_BYTES:
            raise VatError(
                f"{path} is {size:,} bytes, not a record vat wrote (a few hundred): it records "
                f"which files of {run_dir} a vat run wrote; remove it (its run's files then "
                f"count as not written by vat)"
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    try:
        m = json.loads(text)
    except (ValueError, RecursionError) as e:
        # vat writes it atomically: a file that is not JSON (or nests too deeply for Python's
        # parser, a RecursionError) was changed by something else; it decides what
        # --overwrite moves, so it is never guessed at
        why = "nested too deeply" if isinstance(e, RecursionError) else "not valid JSON"
        raise VatError(
            f"{path} is damaged ({why}): it records which files of {run_dir} a vat run wrote; "
            f"remove it (its run's files then count as not written by vat)"
        ) from None
    if not isinstance(m, dict) or m.get("written_by") != "vat train":
        return None
    if not isinstance(m.get("preexisting"), list):
        return None
    return m


def _present(run_dir: Path) -> list[str]:
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir() if p.name not in (LOCK_NAME, MANIFEST_NAME))


def write_manifest(run_dir: Path, write_dirs: dict[str, Path], preexisting: list[str]) -> None:
    write_json_atomic(
        run_dir / MANIFEST_NAME,
        {
            "written_by": "vat train",
            "manifest_version": 2,
            "preexisting": preexisting,
            "write_dirs": {k: str(v.resolve()) for k, v in write_dirs.items()},
            # false until the first optimiser step: a start that failed before it (a setting
            # Lightning rejects late, bad data, no memory) is not a run
            "trained": False,
        },
    )


def failed_start(run_dir: Path) -> bool:
    """True when run_dir's files are those of a start that never finished a training step
    (its manifest says so; manifests of older vats, without the key, count as runs)."""
    m = read_manifest(run_dir)
    return m is not None and m.get("trained") is False


def mark_trained(run_dir: Path) -> None:
    """Record in the manifest that this run has finished a training step (a manifest
    damaged since the start is left for the next start to report, not raised mid-run)."""
    try:
        m = read_manifest(run_dir)
    except VatError:
        return
    if m is not None and m.get("trained") is False:
        write_json_atomic(Path(run_dir) / MANIFEST_NAME, {**m, "trained": True})


class MarkTrained(Callback):
    """Sets the manifest's "trained" (global rank 0) once the first optimiser step has passed
    the non-finite guard: when the next batch starts, or training ends cleanly. A run whose
    first step was NaN is still a failed start (and one that saved a checkpoint is a run
    whatever the manifest says: prepare_fit)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self._done = False

    def _mark(self, trainer) -> None:
        if not self._done:
            self._done = True
            if trainer.is_global_zero:
                mark_trained(self.run_dir)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= 1:
            self._mark(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.global_step >= 1:
            self._mark(trainer)


def write_dirs(cfg, run_dir: Path, ckpt_dir: Path) -> dict[str, Path]:
    """Every folder this run writes into, by the option that names it: the run directory, the
    checkpoint folder and each logger's folder with a fixed name (a logger that picks a new
    version_N folder itself never writes into an earlier one)."""
    dirs = {"--run_dir": run_dir, "--checkpoint.dirpath": ckpt_dir}
    loggers = cfg.trainer.get("logger") if hasattr(cfg, "trainer") else None
    items = loggers if isinstance(loggers, list) else [loggers]
    for i, lg in enumerate(items):
        init = (
            lg.get("init_args") if isinstance(lg, dict) else getattr(lg, "init_args", None)
        ) or {}
        get = init.get if hasattr(init, "get") else (lambda k, d=None: d)
        save_dir, version = get("save_dir"), get("version")
        if save_dir is None or version is None or isinstance(version, int):
            continue
        name = get("name", "lightning_logs")
        dirs[f"--trainer.logger ({i})"] = Path(save_dir) / (name or "") / str(version)
    return dirs


def lock_write_dirs(run_dir: Path, dirs: dict[str, Path]) -> None:
    """Lock every folder this run writes into, each once. run_dir's lock covers what lies
    inside it (checkpoints/); a folder elsewhere is created and locked itself, and when it
    lies inside another run's directory (one with a manifest), that run's lock is taken too,
    so a fresh run cannot write into the checkpoints of a run that is training now."""
    locked: list[Path] = [run_dir]
    lock_folder(run_dir, "--run_dir")
    for option, d in dirs.items():
        if d.resolve().is_relative_to(run_dir.resolve()):
            continue
        try:
            _make_dir(d)
        except OSError as e:
            raise VatError(f"{option} {d}: cannot create the folder ({e.strerror})") from None
        owners = [p for p in d.resolve().parents if (p / MANIFEST_NAME).is_file()][:1]
        for folder in [d, *owners]:
            if not any(_same(folder, x) for x in locked):
                lock_folder(
                    folder, option if folder == d else f"{option} (inside the run {folder})"
                )
                locked.append(folder)


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve()


def check_write_dirs(run_dir: Path, dirs: dict[str, Path]) -> list[Path]:
    """Refuse folders (other than run_dir, whose files previous_run_files judges) that hold an
    earlier run's checkpoints or events which this run directory's manifest does not claim;
    return those it does claim (replaced by --overwrite)."""
    manifest = read_manifest(run_dir) or {}
    recorded_dirs = manifest.get("write_dirs")
    if not isinstance(recorded_dirs, dict):
        recorded_dirs = {}
    recorded = {Path(v) for v in recorded_dirs.values()}
    claimed: list[Path] = []
    for option, d in dirs.items():
        if _same(d, run_dir / "checkpoints") or not d.is_dir():
            continue
        if _same(d, run_dir):
            if option != "--checkpoint.dirpath":
                continue  # run_dir's own run files: previous_run_files judges them
            # checkpoints written straight into run_dir: the run's only if its manifest says
            # that run wrote its checkpoints there too
            found = sorted(p for p in d.iterdir() if p.suffix == ".ckpt")
            ours = recorded_dirs.get("--checkpoint.dirpath")
            if found and ours is not None and Path(ours) == d.resolve():
                claimed += found
                continue
        else:
            found = sorted(
                p
                for p in d.iterdir()
                if p.suffix == ".ckpt" or p.name.startswith("events.out.tfevents.")
            )
        if not found:
            continue
        if not _same(d, run_dir) and d.resolve() in recorded:
            claimed += found
            continue
        raise VatError(
            f"{option} {d} already holds files of another run "
            f"({', '.join(p.name for p in found[:3])}); a fresh run would replace them: "
            f"choose an empty folder"
        )
    return claimed


def clear_previous_run(run_dir: Path, files: list[Path]) -> None:
    """--overwrite: move the old run's files into a trash folder beside each (renames,
    checkpoints first), then delete it. Other files in run_dir (e.g. a sweep's log) are left
    alone."""
    by_parent: dict[Path, list[Path]] = {}
    for p in files:
        by_parent.setdefault(p.parent, []).append(p)
    for parent, group in by_parent.items():
        trash = parent / f"{TRASH_PREFIX}{os.getpid()}"
        trash.mkdir()
        (trash / TRASH_MARK).touch()  # before anything moves in: what marks it as vat's
        for p in sorted(group, key=lambda p: p.name != "checkpoints"):
            os.replace(p, trash / p.name)
        shutil.rmtree(trash)


def _remove_old_trash(run_dir: Path) -> None:
    """The trash folders a killed --overwrite left: only those vat made (its mark inside, not
    a link), never a user's folder that merely has the name."""
    for p in run_dir.glob(f"{TRASH_PREFIX}*"):
        mark = p / TRASH_MARK
        if p.is_dir() and not p.is_symlink() and mark.is_file() and not mark.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def _input_configs(cfg) -> list[Path]:
    found = cfg.get("config") if hasattr(cfg, "get") else None
    items = found if isinstance(found, list) else [found] if found else []
    out = []
    for c in items:
        path = getattr(c, "absolute", None) or getattr(c, "relative", None) or c
        try:
            out.append(Path(str(path)))
        except TypeError:
            continue
    return [p for p in out if p.is_file()]


def _check_inputs_kept(cfg, files: list[Path]) -> None:
    """--overwrite never moves the config file the command itself was given."""
    for c in _input_configs(cfg):
        for f in files:
            inside = [f] if f.is_file() else list(f.rglob("*")) if f.is_dir() else []
            if any(x.is_file() and os.path.samefile(x, c) for x in inside):
                raise VatError(
                    f"--overwrite would remove {f}, which is this command's own config (-c {c}); "
                    f"copy it out of the run directory first"
                )


# -- resuming ---------------------------------------------------------------------------------
def find_last(ckpt_dir: Path) -> Path | None:
    """What `--ckpt_path last` means (as in Lightning): the newer of last.ckpt and the
    on_exception.ckpt written when training died of an exception."""
    found = [p for p in (ckpt_dir / "last.ckpt", ckpt_dir / "on_exception.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else None


def _plain(x: object) -> object:
    """Plain JSON-like values, so a YAML/CLI value compares equal to a checkpoint's."""
    return json.loads(json.dumps(x, default=str))


def _first_difference(now: object, then: object, prefix: str) -> tuple[str, object, object] | None:
    if isinstance(now, dict) and isinstance(then, dict):
        for k in now:
            if k.startswith("_") or k not in then or f"{prefix}.{k}" in RESUME_MAY_CHANGE:
                continue  # keys the checkpoint did not record (newer options) cannot be compared
            diff = _first_difference(now[k], then[k], f"{prefix}.{k}")
            if diff:
                return diff
        return None
    return None if now == then else (prefix, now, then)


def check_resume(cfg, ckpt_path: Path, ckpt: dict) -> None:
    """Refuse a resume whose model/data options differ from the checkpoint's, or whose
    trainer.max_steps (max_epochs) lies below the checkpoint's step (epoch)."""
    recorded = {
        "model": ckpt.get("hyper_parameters") or {},
        "data": ckpt.get("datamodule_hyper_parameters") or {},
    }
    for section in ("model", "data"):
        now = _plain(cfg[section].as_dict() if hasattr(cfg[section], "as_dict") else cfg[section])
        diff = _first_difference(now, _plain(recorded[section]), section)
        if diff:
            key, new, old = diff
            raise VatError(
                f"--{key}: a resume cannot change it ({old!r} in {ckpt_path}, {new!r} now); "
                f"a resume continues the checkpoint's model, data and optimiser; "
                f"start a fresh run to change it"
            )
    step = int(ckpt.get("global_step", 0))
    max_steps = cfg.trainer.max_steps
    if max_steps is not None and max_steps >= 0 and max_steps < step:
        raise VatError(
            f"--trainer.max_steps {max_steps} is below the step of {ckpt_path} ({step}): "
            f"a resume can only train further"
        )
    # Lightning's "epoch" is the 0-based epoch under way: a resume with max_epochs below it
    # would end at once, without a word, and the run would look finished.
    epoch = int(ckpt.get("epoch", 0))
    max_epochs = cfg.trainer.get("max_epochs")
    if max_epochs is not None and 0 <= max_epochs < epoch:
        raise VatError(
            f"--trainer.max_epochs {max_epochs} is below the epoch of {ckpt_path} "
            f"({epoch}, counted from 0): a resume can only train further"
        )


def _latest_config(run_dir: Path) -> Path | None:
    resumes = sorted(
        run_dir.glob("config-resume-*.yaml"), key=lambda p: int(p.stem.rsplit("-", 1)[1])
    )
    return (
        resumes[-1]
        if resumes
        else (run_dir / "config.yaml" if (run_dir / "config.yaml").is_file() else None)
    )


def warn_trainer_changes(cfg, run_dir: Path) -> None:
    """One line per trainer option that makes the resumed run differ from an uninterrupted one."""
    prev = _latest_config(run_dir)
    if prev is None:
        return
    try:
        # a config vat wrote is kilobytes; a larger one is not read whole for a warning
        if prev.stat().st_size > MANIFEST_MAX_BYTES:
            return
        recorded = yaml.safe_load(prev.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return
    before = recorded.get("trainer") if isinstance(recorded, dict) else None
    if not isinstance(before, dict):  # hand-edited into another shape: nothing to compare
        return
    for k in _RESUME_WARN:
        if k in before and _plain(cfg.trainer.get(k)) != _plain(before[k]):
            print(
                f"vat: warning: this resume changes trainer.{k} from {before[k]!r} "
                f"to {cfg.trainer.get(k)!r} (recorded in the new config file); "
                f"the run will differ from an uninterrupted one",
                file=sys.stderr,
            )


def config_filename(run_dir: Path, resuming: bool) -> str:
    """config.yaml for the first start; config-resume-N.yaml for each resume after it."""
    if not resuming or not (run_dir / "config.yaml").exists():
        return "config.yaml"
    n = [int(p.stem.rsplit("-", 1)[1]) for p in run_dir.glob("config-resume-*.yaml")]
    return f"config-resume-{max(n, default=0) + 1}.yaml"


@dataclass
class FreshStart:
    """A fresh run, checked by prepare_fit and begun by begin_fresh once the data is ready:
    the old files it replaces (`old`, an earlier run's with --overwrite, or those of a start
    that never trained a step) are moved only then, so a start refused before training
    leaves the earlier run whole."""

    run_dir: Path
    dirs: dict[str, Path]
    present: list[str]
    old: list[Path]
    replaces_failed_start: bool


def prepare_fit(
    cfg, read: Callable[[Path], dict] = read_checkpoint
) -> tuple[str, FreshStart | None]:
    """Checks and prepares cfg.run_dir for `fit`; resolves cfg.ckpt_path ("last" -> a file or
    None). Returns the name of the config file this start writes and, for a fresh run on
    global rank 0, what begin_fresh does before training. `read` reads the checkpoint a
    resume starts from (the command's one read, `AtomicCheckpointIO.read`)."""
    run_dir = Path(cfg.run_dir)
    ckpt_dir = Path(cfg.checkpoint.dirpath) if cfg.checkpoint.dirpath else run_dir / "checkpoints"
    rank_zero = is_global_rank_zero()
    dirs = write_dirs(cfg, run_dir, ckpt_dir)
    if cfg.get("overwrite") and cfg.ckpt_path:
        raise VatError("--overwrite starts a fresh run and cannot be combined with --ckpt_path")
    present = _present(run_dir)  # before this start creates anything (checkpoints/, .lock)
    if rank_zero:
        check_places(run_dir, dirs)
        refuse_linked_lightning_files(dirs)
        _check_writable(run_dir)
        lock_write_dirs(run_dir, dirs)
        _remove_old_trash(run_dir)
        for d in (
            run_dir,
            ckpt_dir,
        ):  # temps of killed writes; the lock says no vat run writes here
            remove_stale_temps(d, any_owner=True)
    if cfg.ckpt_path == "last":
        last = find_last(ckpt_dir)
        if last is None:
            if rank_zero and _candidate_files(run_dir) and not _only_failed_start(run_dir):
                raise VatError(_nothing_to_resume(run_dir, ckpt_dir))
            print(
                f"vat: --ckpt_path last: no checkpoint in {ckpt_dir} yet; starting a fresh run",
                file=sys.stderr,
            )
        cfg.ckpt_path = str(last) if last else None
    if cfg.ckpt_path is None:
        if not rank_zero:
            return "config.yaml", None
        foreign = foreign_files(run_dir)
        if foreign:
            raise VatError(
                f"--run_dir {run_dir} holds files that no vat run recorded writing "
                f"({', '.join(p.name for p in foreign[:3])}); a fresh run would overwrite them "
                f"and --overwrite only replaces what a vat run wrote: move them away or choose "
                f"another --run_dir"
            )
        old = previous_run_files(run_dir) + check_write_dirs(run_dir, dirs)
        # a start that never trained a step and saved no checkpoint is not a run
        failed = (
            bool(old)
            and failed_start(run_dir)
            and not any(p.name == "checkpoints" or p.suffix == ".ckpt" for p in old)
        )
        if old and not cfg.get("overwrite") and not failed:
            raise VatError(
                f"--run_dir {run_dir} already holds a run ({', '.join(p.name for p in old[:3])}); "
                f"resume it with --ckpt_path last, or replace it with --overwrite"
            )
        if old:
            _check_inputs_kept(cfg, old)
        return "config.yaml", FreshStart(run_dir, dirs, present, old, failed)
    ckpt_path = Path(cfg.ckpt_path)
    if rank_zero and ckpt_path.is_file():
        check_resume(cfg, ckpt_path, read(ckpt_path))
        warn_trainer_changes(cfg, run_dir)
        if ckpt_path.name == "on_exception.ckpt":
            print(
                f"vat: resuming from {ckpt_path}, saved where an error stopped training, perhaps "
                f"inside a step: not bitwise the run it would have been (resumes from last.ckpt, "
                f"and from a Ctrl-C stop, are)",
                file=sys.stderr,
            )
    return config_filename(run_dir, resuming=True), None


def _nothing_to_resume(run_dir: Path, ckpt_dir: Path) -> str:
    """Why `--ckpt_path last` stops in a run folder with no checkpoint, and what the user can
    do. Files no vat run recorded writing are refused by --overwrite too (it replaces only a
    run's own files), so the advice for them is to move them away."""
    head = f"--ckpt_path last: {ckpt_dir} holds no checkpoint to resume"
    foreign = foreign_files(run_dir)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        names = ", ".join(p.name for p in foreign[:3]) + more
        return (
            f"{head}, but {run_dir} holds files named like a run's that no vat run recorded "
            f"writing ({names}); vat neither resumes nor replaces them: move them out of "
            f"{run_dir} or choose another --run_dir"
        )
    return (
        f"{head}, but {run_dir} holds an earlier run's files; start afresh with --overwrite "
        f"(without --ckpt_path)"
    )


def _only_failed_start(run_dir: Path) -> bool:
    """run_dir's run files are all those of a start that never trained a step (with no
    checkpoint in its checkpoint folder: `--ckpt_path last` found none)."""
    return failed_start(run_dir) and not foreign_files(run_dir)


def begin_fresh(start: FreshStart) -> None:
    """Move the files a fresh run replaces away and write its manifest: from here on the
    folder is this run's (a start that fails before its first step still is not a run)."""
    if start.old:
        if start.replaces_failed_start:
            names = ", ".join(p.name for p in start.old[:3])
            print(
                f"vat: {start.run_dir} held a start that failed before its first step "
                f"({names}); replacing it",
                file=sys.stderr,
            )
        clear_previous_run(start.run_dir, start.old)
    cleared = {p.name for p in start.old if p.parent == start.run_dir}
    write_manifest(start.run_dir, start.dirs, [n for n in start.present if n not in cleared])
    _created.clear()  # the folders hold a run now: a later failure leaves them


# -- where a run may write --------------------------------------------------------------------
def _owning_run(path: Path, skip: Path | None = None) -> tuple[Path, str] | None:
    """The nearest run folder (one with a manifest) strictly above `path`, other than `skip`,
    and the first part of `path` below it."""
    p = path.resolve()
    for parent in p.parents:
        if skip is not None and parent == skip.resolve():
            return None  # inside this run's own folder
        if (parent / MANIFEST_NAME).is_file():
            return parent, p.relative_to(parent).parts[0]
    return None


def check_place(path: Path, what: str, own_run: Path | None = None) -> None:
    """Refuse a folder that lies inside the files of another run (its checkpoints/, or any
    name that run's --overwrite moves away): that run's next --overwrite would delete it."""
    found = _owning_run(path, skip=own_run)
    if found and any(r.fullmatch(found[1]) for r in RUN_FILE_RES):
        owner, top = found
        where = (
            f"is the {top} folder"
            if path.resolve() == (owner / top).resolve()
            else f"lies inside the {top} folder"
        )
        raise VatError(
            f"{what} {path} {where} of the run in {owner}, which a --overwrite of that run "
            f"removes: choose a folder outside it"
        )


def check_places(run_dir: Path, dirs: dict[str, Path]) -> None:
    """Every folder this run writes into, checked by check_place (a folder inside this run's
    own folder is its own business)."""
    check_place(run_dir, "--run_dir")
    for option, d in dirs.items():
        if option != "--run_dir":
            check_place(d, option, own_run=run_dir)


# Files Lightning writes itself (its loggers' and LightningCLI's config), opening the path for
# writing: a symbolic link there would be written through. vat's own files (tokenizer.json,
# checkpoints, the manifest) are written atomically and replace a link instead.
_LIGHTNING_FILE_RES = [
    re.compile(p)
    for p in (
        r"hparams\.yaml",
        r"metrics\.csv",
        r"events\.out\.tfevents\..*",
        r"config(-resume-\d+|-validate|-test)?\.yaml",
    )
]


def refuse_linked_lightning_files(dirs: dict[str, Path]) -> None:
    """A symbolic link where Lightning writes a file (hparams.yaml, metrics.csv, events, the
    config) is refused in one line: Lightning would write into the link's target."""
    for option, d in dirs.items():
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.is_symlink() and any(r.fullmatch(p.name) for r in _LIGHTNING_FILE_RES):
                raise VatError(
                    f"{option} {d}: {p.name} is a symbolic link; Lightning writes that file "
                    f"itself and would write through the link into {os.readlink(p)}: remove it"
                )


def check_folder_options(cfg) -> None:
    """An empty --run_dir or --checkpoint.dirpath is refused: Path("") is the current folder,
    which the user did not name."""
    ckpt = cfg.checkpoint.dirpath if hasattr(cfg, "checkpoint") else None
    for option, value in (("--run_dir", cfg.run_dir), ("--checkpoint.dirpath", ckpt)):
        if value is not None and not str(value).strip():
            raise VatError(f"{option} is empty: name a folder (. for the current one)")


def check_lightning_files(cfg) -> None:
    """For `vat train validate|test`: refuse symbolic links where Lightning writes."""
    if is_global_rank_zero():
        run_dir = Path(cfg.run_dir)
        ckpt = cfg.checkpoint.dirpath if hasattr(cfg, "checkpoint") else None
        refuse_linked_lightning_files(
            write_dirs(cfg, run_dir, Path(ckpt) if ckpt else run_dir / "checkpoints")
        )


# -- folders this command created -------------------------------------------------------------
_created: list[Path] = []
"""Folders this command created for a run that has not begun (begin_fresh): a start refused
before it removes them again (with its .lock), so a refused command leaves no empty folder."""


def _make_dir(d: Path) -> None:
    missing = [p for p in (d, *d.parents) if not p.exists() and not p.is_symlink()]
    d.mkdir(parents=True, exist_ok=True)
    _created.extend(reversed(missing))  # outermost first


def remove_created() -> None:
    """After a failed start that never began: remove the folders it created, innermost first,
    when they hold nothing but this command's lock file."""
    for d in reversed(_created):
        lock = d / LOCK_NAME
        try:
            if lock.is_file() and not lock.is_symlink() and len(list(d.iterdir())) == 1:
                lock.unlink()
            d.rmdir()
        except OSError:
            pass  # not empty: something else wrote there, so it stays
    _created.clear()


def _check_writable(run_dir: Path) -> None:
    try:
        _make_dir(run_dir)
        probe = run_dir / f".write-test-{os.getpid()}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        probe.unlink()
    except OSError as e:
        raise VatError(f"--run_dir {run_dir} is not writable ({e.strerror})") from None
