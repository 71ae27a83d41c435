"""The run directory of `train.py fit`: one run per directory, resumed only when asked.

Rules (README, "Resume" and "What happens when..."):
- A fresh `fit` (no `--ckpt_path`) never resumes. Into a run directory that already holds a
  run (checkpoints, TensorBoard events or config.yaml) it stops with a one-line error unless
  `--overwrite` is given, which moves the old run's files into a trash folder inside the run
  directory (one rename each) and deletes that folder before training starts: a failure half
  way leaves an old run without its checkpoints, never a mix of two runs' files, and the
  next start removes a left-over trash folder.
- `--ckpt_path last` resumes from the newest of checkpoints/last.ckpt and on_exception.ckpt;
  with neither, an empty run directory starts fresh (so a requeued job can always pass it).
- A resume may change how the run is driven (trainer.max_steps upwards, max_time, logging,
  validation and checkpoint frequency, callbacks, progress bars, devices, data.num_workers,
  data.num_proc, data.cache_dir, data.test_files, data.progress, model.compile,
  model.loss.fused_cross_entropy) and nothing that defines what is trained (the rest of
  model.* and data.*): those are refused in one line naming the option, because the
  checkpoint's optimiser, schedules and tokenizer would silently win.
- Each start writes its resolved config without destroying the first: config.yaml, then
  config-resume-1.yaml, config-resume-2.yaml, ...
- One process at a time per run directory: an flock on RUN_DIR/.lock held for the run's
  lifetime (the kernel drops it when the process dies, so a killed run never blocks).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import sys
from pathlib import Path

import yaml

from vat.errors import VatError
from vat.io import remove_stale_temps
from vat.share.checkpoint import read_checkpoint

LOCK_NAME = ".lock"
TRASH_PREFIX = ".overwritten-"
# What a run writes into its directory (the TensorBoard logger's and vat's own files).
_RUN_FILE_RES = [
    re.compile(p)
    for p in (
        r"checkpoints",
        r"events\.out\.tfevents\..*",
        r"config\.yaml",
        r"config-resume-\d+\.yaml",
        r"hparams\.yaml",
        r"tokenizer\.json",
        r"projector_config\.pbtxt",
        r"\d{5,}",
    )
]
# Options a resume may change: they drive the run, they do not define what is trained.
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
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise VatError(
            f"--run_dir {run_dir} is in use by another run (pid {holder}); wait for it to finish "
            f"or choose another --run_dir"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held_locks.append(fd)


def release_locks() -> None:
    while _held_locks:
        os.close(_held_locks.pop())  # closing the descriptor drops the flock


# -- fresh runs -------------------------------------------------------------------------------
def previous_run_files(run_dir: Path) -> list[Path]:
    """The files of an earlier run in run_dir (an empty checkpoints/ does not count)."""
    if not run_dir.is_dir():
        return []
    found = []
    for p in sorted(run_dir.iterdir()):
        if any(r.fullmatch(p.name) for r in _RUN_FILE_RES):
            if (
                p.name == "checkpoints"
                and p.is_dir()
                and not any(c.suffix == ".ckpt" for c in p.iterdir())
            ):
                continue
            found.append(p)
    return found


def clear_previous_run(run_dir: Path, files: list[Path]) -> None:
    """--overwrite: move the old run's files into a trash folder (renames, checkpoints first),
    then delete it. Other files in run_dir (e.g. a sweep's log) are left alone."""
    trash = run_dir / f"{TRASH_PREFIX}{os.getpid()}"
    trash.mkdir()
    for p in sorted(files, key=lambda p: p.name != "checkpoints"):
        os.replace(p, trash / p.name)
    shutil.rmtree(trash)


def _remove_old_trash(run_dir: Path) -> None:
    for p in run_dir.glob(f"{TRASH_PREFIX}*"):
        shutil.rmtree(p, ignore_errors=True)


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
    try:
        before = (yaml.safe_load(prev.read_text()) or {}).get("trainer", {}) if prev else {}
    except (OSError, yaml.YAMLError):
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


def prepare_fit(cfg) -> str:
    """Checks and prepares cfg.run_dir for `fit`; resolves cfg.ckpt_path ("last" -> a file or
    None). Returns the name of the config file this start writes."""
    run_dir = Path(cfg.run_dir)
    ckpt_dir = Path(cfg.checkpoint.dirpath) if cfg.checkpoint.dirpath else run_dir / "checkpoints"
    rank_zero = is_global_rank_zero()
    if rank_zero:
        _check_writable(run_dir)
        lock_run_dir(run_dir)
        _remove_old_trash(run_dir)
        for d in (
            run_dir,
            ckpt_dir,
        ):  # temps of killed writes; the lock says no vat run writes here
            remove_stale_temps(d, any_owner=True)
    if cfg.get("overwrite") and cfg.ckpt_path:
        raise VatError("--overwrite starts a fresh run and cannot be combined with --ckpt_path")
    if cfg.ckpt_path == "last":
        last = find_last(ckpt_dir)
        if last is None:
            if rank_zero and previous_run_files(run_dir):
                raise VatError(
                    f"--ckpt_path last: {ckpt_dir} holds no checkpoint to resume, but {run_dir} "
                    f"holds an earlier run's files; start afresh with --overwrite "
                    f"(without --ckpt_path)"
                )
            print(
                f"vat: --ckpt_path last: no checkpoint in {ckpt_dir} yet; starting a fresh run",
                file=sys.stderr,
            )
        cfg.ckpt_path = str(last) if last else None
    if cfg.ckpt_path is None:
        old = previous_run_files(run_dir) if rank_zero else []
        if old and not cfg.get("overwrite"):
            raise VatError(
                f"--run_dir {run_dir} already holds a run ({', '.join(p.name for p in old[:3])}); "
                f"resume it with --ckpt_path last, or replace it with --overwrite"
            )
        if old:
            clear_previous_run(run_dir, old)
        return "config.yaml"
    ckpt_path = Path(cfg.ckpt_path)
    if rank_zero and ckpt_path.is_file():
        check_resume(cfg, ckpt_path, read_checkpoint(ckpt_path))
        warn_trainer_changes(cfg, run_dir)
    return config_filename(run_dir, resuming=True)


def _check_writable(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise VatError(f"--run_dir {run_dir} is not writable ({e.strerror})") from None
