"""Sweep any train-config key: train one run per value, measure each, chart the frontier.

    vat sweep -c configs/sweeps/frontier_cpu_target_kl.yaml [--output-dir DIR]
        [--values 0.1,0.2] [--jobs N] [--device auto] [--debug]

(the command line is `vat.cli.sweep`; this module is the library it drives)

For each point of the sweep YAML (one value of one key, a combination for a grid over two
keys, or one of a listed set of points; see `vat.experiments.config`), trains a model with
the same train config, seed, data and budget plus that point's `--<key> <value>` into
`out_dir/<leaf>_<value>/` (`defaults/` for the empty point; through the `Runner`'s `vat
train` entry point, in-process), then records its final validation losses, latent geometry,
STS, mu-decoding BLEU and, when asked, the feature-spec comparison in `record.json`
(`vat.experiments.measure`).
Finally it writes the table, the frontier and other plots, and a TensorBoard hparams view
(`vat.experiments.frontier`).

A sweep speaks for its runs: each run trains without its own end-of-fit summary, `next:`
hints and Lightning's info lines (`quiet_training`); the sweep logs one line when a run
starts and one with its headline measurements when it is done, and the command prints the
results table (`frontier.markdown_table`, also written as sweep.md) at the end.

With `jobs > 1` the runs train and are measured in that many child processes at once (one
per point, each logging to its run's `sweep.log`) after the parent has built the tokenizer
and the tokenized-data cache once. A small model does not fill a GPU, so several runs share
one; on a CPU keep jobs = 1 (the runs would only compete for the cores).

Every point's arguments pass `vat train`'s own checks (its parser and the constructors of its
config, model, data and trainer) before the first point trains. A point that fails later, in
training or measuring, does not stop the others, one after another or in children alike: its
record is `{point, run, failed: one-line reason}`, a row of the table, and `vat sweep` ends
with exit 2 naming it.

Resume: a run whose record.json exists is skipped; a run with checkpoints/last.ckpt but no
`.trained` marker continues training with `--ckpt_path last`; a trained run without a record
is only measured again. Paths in the sweep YAML are relative to the working directory.
"""

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

from vat.data.file_digest import file_digest
from vat.errors import USER_ERRORS, VatError, one_line
from vat.eval.tasks.registry import load_task
from vat.experiments.config import Point, SweepConfig, cli_value, point_args, run_name
from vat.experiments.frontier import FAILED, headline, plot_all, write_hparams, write_table
from vat.experiments.measure import FEATURE_COMPARE_FIELDS, measure_run
from vat.io import write_json_atomic
from vat.train.interrupt import EXIT_CODES

TRAINED_MARKER = ".trained"
"""Written into a run directory once its training has finished."""

Log = Callable[[str], None]


def train_args(cfg: SweepConfig, point: Point, run_dir: Path) -> list[str]:
    """`vat train` arguments of one point's run: the train config, extra_args, then the point."""
    return [
        "fit",
        "-c",
        cfg.train_config,
        "--run_dir",
        str(run_dir),
        *cfg.extra_args,
        *point_args(point),
    ]


@dataclass(frozen=True)
class Runner:
    """How a sweep trains, supplied by the `vat sweep` command (the library never imports
    the CLI): `train(argv)` is `vat train`'s entry point, `check(argv)` its parse and build
    without a fit and `prepare(argv)` its data preparation (each returns an exit code; the
    last two take the arguments without the subcommand), `child` the command that runs one
    point in a child process (`--run NAME ...` is appended)."""

    train: Callable[[list[str]], int]
    check: Callable[[list[str]], int]
    prepare: Callable[[list[str]], int]
    child: tuple[str, ...]

    def run_train(self, args: list[str]) -> int:
        return _exit_code(self.train, args)


def _exit_code(entry: Callable[[list[str]], int], args: list[str]) -> int:
    try:
        return entry(args)
    except SystemExit as e:  # the argument parser exits by itself
        return e.code if isinstance(e.code, int) else 2


def check_point(runner: Runner, cfg: SweepConfig, point: Point) -> None:
    """Let `vat train` check a point's arguments before anything trains, with its own rules:
    its parser (a key the train config does not have, a value of the wrong type) and the
    constructors of what it builds (a value out of range), without data or a fit."""
    err = io.StringIO()
    with quiet_training(), contextlib.redirect_stderr(err):
        code = _exit_code(
            runner.check, train_args(cfg, point, Path(cfg.out_dir) / run_name(point))[1:]
        )
    if code != 0:
        msg = err.getvalue().strip().splitlines()
        raise VatError(
            f"sweep point {run_name(point)}: vat train rejects its arguments "
            f"({msg[-1].removeprefix('error: ') if msg else f'exit {code}'})"
        )


LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
"""Where Lightning's info lines come from ("Seed set to 7", "GPU available", its model summary,
"`Trainer.fit` stopped")."""


@contextlib.contextmanager
def quiet_training():
    """One run of a sweep without what `vat train` prints for a user who trains one model:
    its end-of-fit summary and `next:` hints (stdout; the sweep's record and table hold the
    numbers) and Lightning's info lines, the model summary among them, once per run.
    Warnings, errors and progress bars (stderr) still show."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
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
    """A stream written through to `stream`, keeping the last `error: ...` line: what `vat
    train` says when it fails, for the point's row in the table."""

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
    """Train (or finish training) the model of one point in run_dir (`quiet_training`)."""
    if (run_dir / TRAINED_MARKER).exists():
        return
    args = train_args(cfg, point, run_dir)
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        args += ["--ckpt_path", "last"]
    said = _LastError(sys.stderr)
    with quiet_training(), contextlib.redirect_stderr(said):
        code = runner.run_train(args)
    name = run_name(point)
    if code in EXIT_CODES.values():  # Ctrl-C / SIGTERM: the run stopped at a step and saved
        print(
            f"vat sweep: {name} stopped with its state in {run_dir / 'checkpoints' / 'last.ckpt'};"
            f" the same sweep command resumes it",
            file=sys.stderr,
        )
        raise KeyboardInterrupt
    if code != 0:
        raise VatError(f"training failed: {said.line or f'exit {code}'}")
    if not (run_dir / "checkpoints" / "last.ckpt").is_file():
        raise VatError(f"training wrote no checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}")
    write_json_atomic(run_dir / TRAINED_MARKER, {"train_settings": train_settings(cfg, point)})


def train_settings(cfg: SweepConfig, point: Point) -> dict[str, Any]:
    """What defines a point's trained model: the train config's bytes and every argument
    `vat train` gets (extra_args and the point's values, exactly as passed)."""
    return {
        "train_config_digest": file_digest(cfg.train_config),
        "train_args": [*cfg.extra_args, *point_args(point)],
    }


COMPARE_SETTINGS = ("feature_compare", "fit_files", "fit_sentences")
"""The feature comparison's measurement settings."""


def measure_settings(cfg: SweepConfig) -> dict[str, Any]:
    """What defines a run's measurements (a change re-measures, it does not retrain). The
    feature comparison's settings are there only when it runs: a sweep without it keeps the
    comparison a record has (`_measured`, `_keep_comparison`)."""
    names = [
        "probe",
        "probe_max_sentences",
        "min_count",
        "senteval_dir",
        "sts_tasks",
        "bleu_file",
        "bleu_lines",
    ]
    if cfg.feature_compare:
        names += COMPARE_SETTINGS
    return {k: getattr(cfg, k) for k in names}


def _recorded_train_settings(run_dir: Path) -> dict[str, Any] | None:
    """The train settings a finished run recorded (record.json or the .trained marker);
    {} for a run of an older vat that recorded none; None when the run is not finished."""
    for path in (run_dir / "record.json", run_dir / TRAINED_MARKER):
        if path.is_file():
            text = path.read_text(encoding="utf-8").strip()
            try:
                found = json.loads(text) if text else {}
            except (json.JSONDecodeError, RecursionError):  # nested too deeply to parse
                found = {}
            got = found.get("train_settings") if isinstance(found, dict) else None
            return got if isinstance(got, dict) else {}
    return None


def check_not_stale(cfg: SweepConfig, points: Sequence[Point]) -> None:
    """A finished run counts as done only if it was trained with this sweep's settings: one
    frontier never mixes, say, 4-step and 8-step runs."""
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


# -- the sweep ----------------------------------------------------------------------------
def run_sweep(
    runner: Runner,
    cfg: SweepConfig,
    log: Log = print,
    config_path: str | None = None,
    summary: bool = True,
    only: Sequence[str] | None = None,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Train and measure every point (skipping finished runs), then write the outputs.

    `progress`: a bar over the sweep's points on stderr (runs done of all).

    `only`: run names to do (the others are left alone and the summary covers only these).
    `config_path` (the sweep YAML) is needed only with cfg.jobs > 1, to start the children.
    A point that fails is the record `{point, run, failed: reason}` (none is written for it,
    so the next invocation does it again) and the other points still run.
    """
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
            if not isinstance(e, USER_ERRORS):  # a bug: its traceback, as a child's log has it
                traceback.print_exc()
            why = (
                one_line(e) if isinstance(e, USER_ERRORS) else f"{type(e).__name__}: {one_line(e)}"
            )
            log(f"{name}: failed: {why}")
            records.append({**point, "run": name, FAILED: why})
            continue
        record["train_settings"] = train_settings(cfg, point)
        record["measure_settings"] = measure_settings(cfg)
        _keep_comparison(cfg, record, rec_path)
        write_json_atomic(rec_path, record)
        records.append(record)
        log(f"{name}: finished in {_clock(time.perf_counter() - t0)}: {_steps(record)}")
    if summary:
        write_table(records, cfg.keys, out)
        measured = [r for r in records if FAILED not in r]  # the plots show measurements
        plots = plot_all(measured, cfg.keys, out) if measured else []
        write_hparams(measured, cfg.keys, out)
        files = [str(out / f"sweep.{ext}") for ext in ("csv", "json", "md")]
        log(
            f"wrote {', '.join(files + [p.name for p in plots])} and {out / 'hparams'} "
            f"(tensorboard --logdir {out / 'hparams'})"
        )
    return records


def _keep_comparison(cfg: SweepConfig, record: dict[str, Any], rec_path: Path) -> None:
    """A run measured again without the feature comparison (another probe, say) keeps the
    comparison its record.json holds, fields and settings: it is of the same trained model
    (`check_not_stale`), and a sweep without the comparison drops nothing it measured."""
    if cfg.feature_compare or not rec_path.is_file():
        return
    old = _load_json(rec_path)
    then = old.get("measure_settings") if isinstance(old, dict) else None
    if isinstance(then, dict) and then.get("feature_compare"):
        record.update({k: old.get(k) for k in FEATURE_COMPARE_FIELDS})
        record["measure_settings"].update({k: then.get(k) for k in COMPARE_SETTINGS})


def _steps(record: dict[str, Any]) -> str:
    """`600 steps, val KL 1.06 nats/token, ...`: a finished run's line."""
    return ", ".join(x for x in (f"{record.get('step')} steps", headline(record)) if x)


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def prepare_data(runner: Runner, cfg: SweepConfig, out: Path) -> None:
    """Build the tokenizer and tokenized-data cache of the train config once, so that
    parallel runs only read it (each would otherwise build its own copy at the same time)."""
    code = runner.prepare(
        ["-c", cfg.train_config, "--run_dir", str(out / ".prepare"), *cfg.extra_args]
    )
    if code != 0:
        raise VatError(
            f"preparing the data of {cfg.train_config} failed (exit {code}; see the message above)"
        )


def check_log(path: Path) -> None:
    """A run's sweep.log may be appended to only when it is a file of vat's own (or absent):
    a symbolic link there is not followed, so a child's output never lands in the file it
    points to, and a FIFO or a device (which would block or swallow the log) is refused;
    each is one line naming the path."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise VatError(
            f"{path} is {kind}; vat appends a run's log only to a file of its own: remove it "
            "and run the sweep again"
        )


def open_log(path: Path) -> IO[str]:
    """A run's sweep.log, opened to append (a resumed run adds to it); `check_log` first."""
    check_log(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:  # O_NOFOLLOW: a link made after the check is refused too
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        raise VatError(f"cannot write the run's log {path} ({e.strerror or e})") from None
    return os.fdopen(fd, "a", encoding="utf-8")


def run_parallel(
    runner: Runner,
    cfg: SweepConfig,
    config_path: str,
    points: Sequence[Point],
    log: Log = print,
    poll_s: float = 1.0,
) -> None:
    """Train and measure `points` in up to cfg.jobs child processes at once.

    Each child is this command for one point (`--run NAME --jobs 1 --no-summary`) with its
    output in the run's `sweep.log`; a failed child does not stop the others. Returns the
    failed points, run name -> why (`_child_failure`); their runs resume on the next
    invocation.
    """
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
            cmd = [
                *runner.child,
                "-c",
                config_path,
                "--output-dir",
                str(out),
                "--device",
                cfg.device,
                "--run",
                name,
                "--jobs",
                "1",
                "--no-summary",
            ]
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
    """Why a child failed, from what it wrote into its log from `start` on: its own
    `[sweep] NAME: failed: ...` line, else its last line (an error before its point began,
    the end of a traceback), then where the log is."""
    with open(path, "rb") as f:
        f.seek(max(start, os.fstat(f.fileno()).st_size - (64 << 10)))  # the end says it
        lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
    lines = [ln for ln in lines if ln]
    prefix = f"[sweep] {name}: failed: "
    said = [ln.removeprefix(prefix) for ln in lines if ln.startswith(prefix)]
    why = said[-1] if said else lines[-1].removeprefix("error: ") if lines else f"exit {code}"
    return f"{why}; log: {path}"


def _measured(cfg: SweepConfig, run_dir: Path) -> bool:
    """record.json exists and was measured with this sweep's measurement settings; without
    the feature comparison, whatever a record's comparison was (it is kept, not redone)."""
    path = run_dir / "record.json"
    if not path.is_file():
        return False
    rec = _load_json(path)
    then = rec.get("measure_settings") if isinstance(rec, dict) else None
    now = _plain(measure_settings(cfg))
    return isinstance(then, dict) and {k: then.get(k) for k in now} == now


def _plain(x: Any) -> Any:
    return json.loads(json.dumps(x))


def _load_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise VatError(
            f"{path} is not valid JSON ({why}); delete it to redo that run's measurements"
        ) from None


__all__ = [
    "TRAINED_MARKER",
    "quiet_training",
    "Runner",
    "check_point",
    "open_log",
    "prepare_data",
    "run_parallel",
    "run_sweep",
    "train_args",
    "train_run",
]
