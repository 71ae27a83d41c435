"""`vat sweep`: train one run per point (in-process, or `jobs` child processes), measure
each into record.json, chart the frontier; a failed point does not stop the others, and a
second call resumes (a current record is skipped, a `.trained` run only measured again)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from vat.callbacks.base import clock_text
from vat.data.file_digest import file_digest
from vat.errors import USER_ERRORS, VatError, one_line
from vat.eval.tasks.registry import load_task
from vat.experiments.config import Point, SweepConfig, cli_value, point_args, run_name
from vat.experiments.frontier import FAILED, headline, plot_all, write_hparams, write_table
from vat.experiments.measure import FEATURE_COMPARE_FIELDS, baseline_records, measure_run
from vat.io import write_json_atomic
from vat.train.interrupt import EXIT_CODES

TRAINED_MARKER = ".trained"  # written into a run directory once its training has finished

Log = Callable[[str], None]


def train_args(cfg: SweepConfig, point: Point, run_dir: Path) -> list[str]:
    base = ["fit", "-c", cfg.train_config, "--run_dir", str(run_dir)]
    return [*base, *cfg.extra_args, *point_args(point)]


@dataclass(frozen=True)
class Runner:
    """`vat train`'s entry points and child command, handed in by the CLI (never imported)."""

    train: Callable[[list[str]], int]
    check: Callable[[list[str]], int]
    prepare: Callable[[list[str]], int]
    child: tuple[str, ...]


def _exit_code(entry: Callable[[list[str]], int], args: list[str]) -> int:
    try:
        return entry(args)
    except SystemExit as e:  # the argument parser exits by itself
        return e.code if isinstance(e.code, int) else 2


def check_point(runner: Runner, cfg: SweepConfig, point: Point) -> None:
    """`vat train`'s own checks of a point's arguments, before anything trains."""
    args = train_args(cfg, point, Path(cfg.out_dir) / run_name(point))[1:]  # no subcommand
    err = io.StringIO()
    with quiet_training(), contextlib.redirect_stderr(err):
        code = _exit_code(runner.check, args)
    if code != 0:
        said = err.getvalue().strip().splitlines()
        raise VatError(
            f"sweep point {run_name(point)}: vat train rejects its arguments "
            f"({said[-1].removeprefix('error: ') if said else f'exit {code}'})"
        )


@contextlib.contextmanager
def quiet_training():
    """No `vat train` stdout or Lightning info lines; stderr (warnings, bars) still shows."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class _LastError:
    """`stream`, keeping the last `error: ...` line written to it (why `vat train` failed)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self.line = stream, None

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("error: "):
                self.line = line.removeprefix("error: ")
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, isatty, encoding, ...
        return getattr(self.stream, name)


def train_run(runner: Runner, cfg: SweepConfig, point: Point, run_dir: Path) -> None:
    if (run_dir / TRAINED_MARKER).exists():
        return
    last = run_dir / "checkpoints" / "last.ckpt"
    args = [*train_args(cfg, point, run_dir), *(["--ckpt_path", "last"] if last.is_file() else [])]
    said = _LastError(sys.stderr)
    with quiet_training(), contextlib.redirect_stderr(said):
        code = _exit_code(runner.train, args)
    if code in EXIT_CODES.values():  # Ctrl-C / SIGTERM: the run stopped at a step and saved
        print(
            f"vat sweep: {run_name(point)} stopped with its state in {last}; the same sweep "
            "command resumes it",
            file=sys.stderr,
        )
        raise KeyboardInterrupt
    if code != 0:
        raise VatError(f"training failed: {said.line or f'exit {code}'}")
    if not last.is_file():
        raise VatError(f"training wrote no checkpoint {last}")
    write_json_atomic(run_dir / TRAINED_MARKER, {"train_settings": train_settings(cfg, point)})


def train_settings(cfg: SweepConfig, point: Point) -> dict[str, Any]:
    return {
        "train_config_digest": file_digest(cfg.train_config),
        "train_args": [*cfg.extra_args, *point_args(point)],
    }


COMPARE_SETTINGS = ("feature_compare", "fit_files", "fit_sentences")


def measure_settings(cfg: SweepConfig) -> dict[str, Any]:
    """What defines a run's measurements (a change re-measures, it does not retrain)."""
    names = ["probe", "probe_max_sentences", "min_count", "senteval_dir", "sts_tasks"]
    names += ["bleu_file", "bleu_lines", *(COMPARE_SETTINGS if cfg.feature_compare else ())]
    return {k: getattr(cfg, k) for k in names}


def _recorded_train_settings(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's recorded train settings ({} if none), else None."""
    for path in (run_dir / "record.json", run_dir / TRAINED_MARKER):
        if path.is_file():
            with contextlib.suppress(ValueError, RecursionError):  # empty, or not JSON
                found = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(found, dict) and isinstance(found.get("train_settings"), dict):
                    return found["train_settings"]
            return {}
    return None


def check_not_stale(cfg: SweepConfig, points: Sequence[Point]) -> None:
    """Refuse a finished run trained with other settings: one frontier never mixes them."""
    for point in points:
        run_dir = Path(cfg.out_dir) / run_name(point)
        then = _recorded_train_settings(run_dir)
        now = train_settings(cfg, point)
        if then is None or then == now:
            continue
        if not then:
            why = "it records no settings (an older vat trained it)"
        elif then.get("train_config_digest") != now["train_config_digest"]:
            why = f"{cfg.train_config} has changed since"
        else:
            why = f"train arguments {then.get('train_args')} then, {now['train_args']} now"
        raise VatError(
            f"sweep run {run_name(point)} in {run_dir} was trained with other settings ({why}); "
            f"a frontier must not mix them: choose another --output-dir, or remove that run folder "
            f"to train it again"
        )


def _check_sts_data(cfg: SweepConfig) -> None:
    """Fail before training, not after it, when an STS task's files are missing."""
    if cfg.senteval_dir is None:
        return
    for task in cfg.sts_tasks:
        load_task(cfg.senteval_dir, task)
    if cfg.feature_compare:  # STS12 or STS-B: the comparison needs one of them
        from vat.features.compare import load_sts_tasks

        load_sts_tasks(cfg.senteval_dir)


def run_sweep(
    runner: Runner,
    cfg: SweepConfig,
    log: Log = print,
    config_path: str | None = None,
    summary: bool = True,
    only: Sequence[str] | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Train and measure every point (or those in `only`), then write the outputs."""
    out = Path(cfg.out_dir)
    points = cfg.points()
    if only is not None:
        missing = sorted(set(only) - {run_name(p) for p in points})
        if missing:
            raise VatError(
                f"--run {', '.join(missing)}: not a point of this sweep "
                f"(points: {', '.join(run_name(p) for p in points)})"
            )
        points = [p for p in points if run_name(p) in only]
    check_not_stale(cfg, points)
    pending = [p for p in points if not _measured(cfg, out / run_name(p))]
    untrained = [p for p in pending if not (out / run_name(p) / TRAINED_MARKER).exists()]
    for p in untrained:
        check_point(runner, cfg, p)
    if pending:
        _check_sts_data(cfg)
    out.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}  # run name -> why
    if cfg.jobs > 1 and len(pending) > 1:
        if config_path is None:
            raise VatError("jobs > 1 needs the sweep YAML's path to start the child processes")
        failed = run_parallel(runner, cfg, config_path, pending, log)
    records = []
    bar = tqdm(points, desc="sweep", unit="run", disable=not progress, file=sys.stderr)
    for i, point in enumerate(bar, 1):
        name, run_dir = run_name(point), out / run_name(point)
        rec_path = run_dir / "record.json"
        if _measured(cfg, run_dir):
            log(f"{name}: done, skipping ({rec_path})")
            records.append(_load_json(rec_path))
            continue
        if name in failed:  # in its child process, which said why
            records.append({**point, "run": name, FAILED: failed[name]})
            continue
        t0 = time.perf_counter()
        values = ", ".join(f"{k} {cli_value(v)}" for k, v in point.items()) or "as configured"
        log(f"{name}: training ({values}; run {i} of {len(points)}) in {run_dir}")
        try:
            train_run(runner, cfg, point, run_dir)
            log(f"{name}: measuring")
            record = measure_run(cfg, point, run_dir)
        except Exception as e:  # the point fails, not the sweep, as a child process would
            why = one_line(e)
            if not isinstance(e, USER_ERRORS):  # a bug: its traceback, as a child's log has it
                traceback.print_exc()
                why = f"{type(e).__name__}: {why}"
            log(f"{name}: failed: {why}")
            records.append({**point, "run": name, FAILED: why})
            continue
        record["train_settings"] = train_settings(cfg, point)
        record["measure_settings"] = measure_settings(cfg)
        _keep_comparison(cfg, record, rec_path)
        write_json_atomic(rec_path, record)
        records.append(record)
        log(f"{name}: finished in {clock_text(time.perf_counter() - t0)}: {_steps(record)}")
    if summary:
        records += baseline_records(cfg)  # rows, not runs: no BLEU, lines across the plots
        write_table(records, cfg.keys, out)
        measured = [r for r in records if FAILED not in r]  # the plots show measurements
        plots = plot_all(measured, cfg.keys, out) if measured else []
        write_hparams([r for r in measured if not r.get("baseline")], cfg.keys, out)
        files = [str(out / f"sweep.{ext}") for ext in ("csv", "json", "md")]
        log(
            f"wrote {', '.join(files + [p.name for p in plots])} and {out / 'hparams'} "
            f"(tensorboard --logdir {out / 'hparams'})"
        )
    return records


def _keep_comparison(cfg: SweepConfig, record: dict[str, Any], rec_path: Path) -> None:
    """A run measured again without the comparison keeps the one its record holds."""
    if cfg.feature_compare or not rec_path.is_file():
        return
    old = _load_json(rec_path)
    then = old.get("measure_settings") if isinstance(old, dict) else None
    if isinstance(then, dict) and then.get("feature_compare"):
        record.update({k: old.get(k) for k in FEATURE_COMPARE_FIELDS})
        record["measure_settings"].update({k: then.get(k) for k in COMPARE_SETTINGS})


def _steps(record: dict[str, Any]) -> str:
    return ", ".join(x for x in (f"{record.get('step')} steps", headline(record)) if x)


def prepare_data(runner: Runner, cfg: SweepConfig, out: Path) -> None:
    """Build the tokenizer and data cache once, so that parallel runs only read it."""
    code = runner.prepare(
        ["-c", cfg.train_config, "--run_dir", str(out / ".prepare"), *cfg.extra_args]
    )
    if code != 0:
        raise VatError(
            f"preparing the data of {cfg.train_config} failed (exit {code}; see the message above)"
        )


def check_log(path: Path) -> None:
    """A run's sweep.log must be a regular file (or absent): never a link, FIFO or device."""
    with contextlib.suppress(FileNotFoundError):
        mode = path.lstat().st_mode
        if not stat.S_ISREG(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
            raise VatError(
                f"{path} is {kind}; vat appends a run's log only to a file of its own: remove "
                "it and run the sweep again"
            )


def open_log(path: Path) -> IO[str]:
    """A run's sweep.log, opened to append; O_NOFOLLOW refuses a link made after the check."""
    check_log(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        return os.fdopen(os.open(path, flags, 0o666), "a", encoding="utf-8")
    except OSError as e:
        raise VatError(f"cannot write the run's log {path} ({e.strerror or e})") from None


def run_parallel(
    runner: Runner,
    cfg: SweepConfig,
    config_path: str,
    points: Sequence[Point],
    log: Log = print,
    poll_s: float = 1.0,
) -> dict[str, str]:
    """Train and measure `points` in up to cfg.jobs child processes; the failed runs' reasons."""
    out = Path(cfg.out_dir)
    for point in points:  # before any child starts, not when the first ones are running
        check_log(out / run_name(point) / "sweep.log")
    log(f"preparing the data once for {len(points)} parallel runs")
    prepare_data(runner, cfg, out)
    queue = list(points)
    running: list[tuple[str, subprocess.Popen, Any, int]] = []
    failed: dict[str, str] = {}
    while queue or running:
        while queue and len(running) < cfg.jobs:
            point = queue.pop(0)
            name = run_name(point)
            run_dir = out / name
            run_dir.mkdir(parents=True, exist_ok=True)
            logf = open_log(run_dir / "sweep.log")  # closed when the child ends
            start = os.fstat(logf.fileno()).st_size  # where this child's output begins
            cmd = [*runner.child, "-c", config_path, "--output-dir", str(out)]
            cmd += ["--device", cfg.device, "--run", name, "--jobs", "1", "--no-summary"]
            if not cfg.is_point_list and len(cfg.keys) == 1:
                # the parent's --values may differ from the YAML's (a list of points takes
                # none: the child reads the same points from the YAML)
                cmd += ["--values", cli_value(next(iter(point.values())))]
            log(f"{name}: started in a child process (log: {run_dir / 'sweep.log'})")
            running.append(
                (name, subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), logf, start)
            )
        time.sleep(poll_s)
        for item in list(running):
            name, proc, logf, start = item
            if proc.poll() is None:
                continue
            running.remove(item)
            logf.close()
            if proc.returncode == 0:
                rec_path = out / name / "record.json"
                done = f": {_steps(_load_json(rec_path))}" if rec_path.is_file() else ""
                log(f"{name}: finished{done}")
            else:
                failed[name] = _child_failure(
                    out / name / "sweep.log", start, name, proc.returncode
                )
                log(f"{name}: failed: {failed[name]}")
    return failed


def _child_failure(path: Path, start: int, name: str, code: int) -> str:
    """Why a child failed: its `failed:` line in its log from `start` on, else its last line."""
    with open(path, "rb") as f:
        f.seek(max(start, os.fstat(f.fileno()).st_size - (64 << 10)))  # the end says it
        lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln]
    prefix = f"[sweep] {name}: failed: "
    said = [ln.removeprefix(prefix) for ln in lines if ln.startswith(prefix)]
    why = said[-1] if said else lines[-1].removeprefix("error: ") if lines else f"exit {code}"
    return f"{why}; log: {path}"


def _measured(cfg: SweepConfig, run_dir: Path) -> bool:
    path = run_dir / "record.json"
    if not path.is_file():
        return False
    rec = _load_json(path)
    then = rec.get("measure_settings") if isinstance(rec, dict) else None
    now = json.loads(json.dumps(measure_settings(cfg)))  # as JSON reads it back
    return isinstance(then, dict) and {k: then.get(k) for k in now} == now


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise VatError(
            f"{path} is not valid JSON ({why}); delete it to redo that run's measurements"
        ) from None
