"""The `vat train` runs the suite owns (the reference, each frontier run): the data prepared
once, each run started afresh, resumed or found finished, stopped for time, and judged by
the step its checkpoint reached.

Judged by the checkpoint, not by how the process ended: a run that reaches its last step
while being stopped is finished (the rehearsal counted such a run as interrupted and
relaunched it in the next call), and a finished run whose marker was never written (the
suite stopped in between) is not launched again. A run folder without a checkpoint (a run
stopped or killed, out of memory say, before its first one) is removed and the run starts
afresh: `vat train --ckpt_path last` refuses such a folder, and every later call failed."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import time
from dataclasses import dataclass, fields
from pathlib import Path

from bench.gpu_suite import schema
from bench.gpu_suite.call import Call, remove_run
from bench.gpu_suite.children import last_line, shield, spawn, stop
from bench.gpu_suite.in_process import run_vat
from bench.gpu_suite.plan import Plan
from bench.gpu_suite.records import CallLaunch, Report, TimeSplit
from vat.errors import VatError

TRAINED = ".trained"
"""Written into a run folder when its run reached its steps."""


@dataclass
class TrainRun:
    name: str
    run_dir: Path
    cmd: list[str]
    """The whole `vat train ... --ckpt_path last` command."""
    steps: int
    log: Path
    cwd: Path | None = None
    """Where it runs (default: the checkout); the reference runs in OUT_DIR/work, which its
    config's data paths are relative to (call.DATA_LINK)."""


@dataclass
class Outcome:
    status: str
    """"trained", "interrupted" (stopped for time; resumes) or "failed"."""
    step: int | None
    """The step of the run's latest checkpoint after this call (None: no checkpoint)."""
    seconds: float
    """Wall seconds of this call's process (0 when not launched)."""
    launched: bool
    note: str = ""
    time_split: TimeSplit | None = None
    """Where the launch's seconds went (vat.callbacks.time_split's RUN_DIR/time_split.json,
    written by this launch: set-up, compile, training steps, validation, checkpoint saving,
    other); None when it wrote none (not launched, killed, or a vat without it)."""


def launch_split(run_dir: Path, since: float) -> TimeSplit | None:
    """The time split the launch started at `since` (a time.time() value) wrote into its run
    folder, the fields of records.TimeSplit only, or None (an earlier launch's file is not
    this one's, or it is not a time split)."""
    from vat.callbacks.time_split import read_split

    split = read_split(run_dir, since)
    if split is None:
        return None
    kept = {f.name for f in fields(TimeSplit)} - {"other_keys"}
    try:
        return schema.read(TimeSplit, {k: v for k, v in split.items() if k in kept}, "time_split")
    except schema.Broken:  # kept, it would make the report unreadable for the next call
        return None


def record_launch(call: Call, stage: str, name: str, o: Outcome) -> None:
    """The launch in the record of the call under way (state.Suite.run appends it before
    any stage runs): its stage, run, seconds, status and time split, so that the report says
    where each call's seconds went."""
    if not call.state.calls:
        return
    record = CallLaunch(stage=stage, run=name, seconds=round(o.seconds, 1), step=o.step,
                        status=o.status, time_split=o.time_split)  # fmt: skip
    this_call = call.state.calls[-1]
    this_call.launches = [*(this_call.launches or []), record]


def checkpoint_step(run_dir: Path) -> int | None:
    """The global step of the checkpoint `--ckpt_path last` would resume (None: none, or
    unreadable)."""
    from vat.runs.run_dir import find_last
    from vat.share.checkpoint import read_checkpoint

    last = find_last(run_dir / "checkpoints")
    if last is None:
        return None
    try:
        return int(read_checkpoint(last).get("global_step", 0))
    except VatError:
        return None


def launch_overhead_s(state: Report, plan: Plan) -> float:
    """Seconds a launch costs besides its training steps (imports, data, compile, the last
    validation, the stop): the plan's estimate, or the reference's measured overhead
    (reference.py records each launch) when larger."""
    launches = state.reference.launches
    measured = [la.overhead_s for la in launches if la.overhead_s is not None]
    return max([plan.startup_s, *measured])


def prepare_data(call: Call, config: Path, cwd: Path | None = None) -> None:
    """The tokenizer and tokenized cache of `config`, once, before runs read them (in the
    stage's clock: the caller counts it); in `cwd` when the config's paths are relative to
    it (the reference's)."""
    from vat.cli.train import prepare_data as vat_prepare

    here = os.getcwd()
    try:
        os.chdir(cwd or here)
        with contextlib.redirect_stdout(io.StringIO()):
            run_vat(
                vat_prepare,
                ["-c", str(config), "--run_dir", str(call.work / ".prepare")],
                f"preparing the data of {config}",
            )
    finally:
        os.chdir(here)


def train(call: Call, stage: str, runs: list[TrainRun], end: float) -> dict[str, Outcome]:
    """Run `runs` at once until each ends or `end` (a time.monotonic() value) less the stop
    grace, then stop the rest: the stage ends by `end`. Writes TRAINED into finished runs."""
    plan = call.plan
    started: dict[str, tuple[subprocess.Popen, float]] = {}
    since: dict[str, float] = {}  # each launch's wall-clock start: its time split is newer
    out: dict[str, Outcome] = {}
    try:
        for r in runs:
            step = checkpoint_step(r.run_dir)
            if step is not None and step >= r.steps:
                out[r.name] = Outcome("trained", step, 0.0, False, "finished in an earlier call")
                continue
            if step is None and r.run_dir.exists():
                remove_run(r.run_dir)  # a user's file in it: one line, kept
                call.note(stage, f"{r.name}: no checkpoint from its earlier start (stopped or "
                                 "killed before its first one): started afresh")  # fmt: skip
            since[r.name] = time.time()
            started[r.name] = (spawn(r.cmd, r.log, plan, r.cwd), time.monotonic())
        ended: dict[str, float] = {}  # when each process was seen to end

        def seen() -> None:
            for name, (p, _) in started.items():
                if name not in ended and p.poll() is not None:
                    ended[name] = time.monotonic()

        while len(ended) < len(started) and time.monotonic() < end - plan.stop_grace_s:
            time.sleep(plan.poll_s)
            seen()
        stopped = [p for name, (p, _) in started.items() if name not in ended]
        if stopped:
            call.note(stage, f"{len(stopped)} run(s) stopped at the stage's time (each saves "
                             "its state); the next call resumes them")  # fmt: skip
            stop(stopped, plan.stop_grace_s)
            seen()
    except KeyboardInterrupt:
        shield()
        stop([p for p, _ in started.values()], plan.stop_grace_s)
        raise
    for r in runs:
        if r.name in out:
            continue
        p, t0 = started[r.name]
        secs = ended[r.name] - t0
        step = checkpoint_step(r.run_dir)
        if step is not None and step >= r.steps:
            out[r.name] = Outcome("trained", step, secs, True)
        elif p in stopped:
            out[r.name] = Outcome("interrupted", step, secs, True)
        else:
            out[r.name] = Outcome(
                "failed", step, secs, True, f"exit {p.returncode}: {last_line(r.log)}"
            )
    for r in runs:
        if r.name in since:
            out[r.name].time_split = launch_split(r.run_dir, since[r.name])
            record_launch(call, stage, r.name, out[r.name])
        if out[r.name].status == "trained":
            (r.run_dir / TRAINED).write_text("")
    return out
