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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from vat.data.file_digest import file_digest
from vat.errors import VatError
from vat.eval.tasks.registry import load_task
from vat.experiments.config import Point, SweepConfig, cli_value, point_args, run_name
from vat.experiments.frontier import headline, plot_all, write_hparams, write_table
from vat.experiments.measure import measure_run
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
    the CLI): `train(argv)` is `vat train`'s entry point and `prepare(argv)` its data
    preparation (both return an exit code), `child` the command that runs one point in a
    child process (`--run NAME ...` is appended)."""

    train: Callable[[list[str]], int]
    prepare: Callable[[list[str]], int]
    child: tuple[str, ...]

    def run_train(self, args: list[str]) -> int:
        try:
            return self.train(args)
        except SystemExit as e:  # the argument parser exits by itself
            return e.code if isinstance(e.code, int) else 2


def check_point(runner: Runner, cfg: SweepConfig, point: Point) -> None:
    """Let `vat train`'s own parser check a point's arguments (a key the train config does not
    have, a value of the wrong type) before anything trains: `--print_config` parses and
    exits without building data or a model."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = runner.run_train(
            [*train_args(cfg, point, Path(cfg.out_dir) / run_name(point)), "--print_config"]
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


def train_run(runner: Runner, cfg: SweepConfig, point: Point, run_dir: Path) -> None:
    """Train (or finish training) the model of one point in run_dir (`quiet_training`)."""
    if (run_dir / TRAINED_MARKER).exists():
        return
    args = train_args(cfg, point, run_dir)
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        args += ["--ckpt_path", "last"]
    with quiet_training():
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
        raise VatError(
            f"training {name} failed (exit {code}; see the message above), run dir {run_dir}"
        )
    if not (run_dir / "checkpoints" / "last.ckpt").is_file():
        raise VatError(
            f"training {name} wrote no checkpoint {run_dir / 'checkpoints' / 'last.ckpt'}"
        )
    write_json_atomic(run_dir / TRAINED_MARKER, {"train_settings": train_settings(cfg, point)})


def train_settings(cfg: SweepConfig, point: Point) -> dict[str, Any]:
    """What defines a point's trained model: the train config's bytes and every argument
    `vat train` gets (extra_args and the point's values, exactly as passed)."""
    return {
        "train_config_digest": file_digest(cfg.train_config),
        "train_args": [*cfg.extra_args, *point_args(point)],
    }


def measure_settings(cfg: SweepConfig) -> dict[str, Any]:
    """What defines a run's measurements (a change re-measures, it does not retrain). The
    feature comparison's settings are there only when it runs: a sweep without it keeps the
    records it measured before the comparison existed."""
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
        names += ["feature_compare", "fit_files", "fit_sentences"]
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
    if cfg.jobs > 1 and len(pending) > 1:
        if config_path is None:
            raise VatError("jobs > 1 needs the sweep YAML's path to start the child processes")
        run_parallel(runner, cfg, config_path, pending, log)
    records = []
    bar = tqdm(points, desc="sweep", unit="run", disable=not progress, file=sys.stderr)
    for i, point in enumerate(bar, 1):
        name, run_dir = run_name(point), out / run_name(point)
        rec_path = run_dir / "record.json"
        if _measured(cfg, run_dir):
            log(f"{name}: done, skipping ({rec_path})")
            records.append(_load_json(rec_path))
            continue
        t0 = time.perf_counter()
        values = ", ".join(f"{k} {cli_value(v)}" for k, v in point.items()) or "as configured"
        log(f"{name}: training ({values}; run {i} of {len(points)}) in {run_dir}")
        train_run(runner, cfg, point, run_dir)
        log(f"{name}: measuring")
        record = measure_run(cfg, point, run_dir)
        record["train_settings"] = train_settings(cfg, point)
        record["measure_settings"] = measure_settings(cfg)
        write_json_atomic(rec_path, record)
        records.append(record)
        log(f"{name}: finished in {_clock(time.perf_counter() - t0)}: {_steps(record)}")
    if summary:
        write_table(records, cfg.keys, out)
        plots = plot_all(records, cfg.keys, out)
        write_hparams(records, cfg.keys, out)
        log(
            f"wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {out / 'sweep.md'}, "
            f"{', '.join(p.name for p in plots)} and {out / 'hparams'} "
            f"(tensorboard --logdir {out / 'hparams'})"
        )
    return records


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
    output in the run's `sweep.log`; a failed child does not stop the others, and the
    failures are reported together at the end (their runs resume on the next invocation).
    """
    out = Path(cfg.out_dir)
    for point in points:  # before any child starts, not when the first ones are running
        check_log(out / run_name(point) / "sweep.log")
    log(f"preparing the data once for {len(points)} parallel runs")
    prepare_data(runner, cfg, out)
    queue = list(points)
    running: list[tuple[str, subprocess.Popen, Any]] = []
    failed: list[tuple[str, Path]] = []
    while queue or running:
        while queue and len(running) < cfg.jobs:
            point = queue.pop(0)
            name = run_name(point)
            run_dir = out / name
            run_dir.mkdir(parents=True, exist_ok=True)
            logf = open_log(run_dir / "sweep.log")  # closed when the child ends
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
                (name, subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT), logf)
            )
        time.sleep(poll_s)
        for item in list(running):
            name, proc, logf = item
            if proc.poll() is None:
                continue
            running.remove(item)
            logf.close()
            if proc.returncode == 0:
                rec_path = out / name / "record.json"
                done = f": {_steps(_load_json(rec_path))}" if rec_path.is_file() else ""
                log(f"{name}: finished{done}")
            else:
                failed.append((name, out / name / "sweep.log"))
                log(f"{name}: failed (exit {proc.returncode}; see {out / name / 'sweep.log'})")
    if failed:
        names = ", ".join(f"{n} ({p})" for n, p in failed)
        raise VatError(
            f"{len(failed)} of {len(points)} runs failed: {names}; "
            "rerun the same command to resume them"
        )


def _measured(cfg: SweepConfig, run_dir: Path) -> bool:
    """record.json exists and was measured with this sweep's measurement settings."""
    path = run_dir / "record.json"
    if not path.is_file():
        return False
    rec = _load_json(path)
    return isinstance(rec, dict) and rec.get("measure_settings") == _plain(measure_settings(cfg))


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
