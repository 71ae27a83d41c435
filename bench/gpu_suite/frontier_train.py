"""Stage 4, `frontier_train`: one `vat train` per `model.loss.target_kl` value, all at once
on the one GPU: the paper-shaped model of configs/corpus_gpu.yaml (8k vocabulary, max_len
256, token batches, bf16, compiled) on the shared corpus, the same step (and so token)
budget each. How many runs, and their steps, are sized when the stage first starts, from the
measured 8k throughput and the time this call gives the stage (frontier_size), so that every
run starts and ends in one call: a resume costs a start-up and a recompile. If they are
stopped anyway, each saves its state and the next call resumes it (runs.py).

Run NAME trains in OUT_DIR/work/frontier/NAME/ and leaves `.trained` there when it ends."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bench.gpu_suite.call import Call, tokens_text
from bench.gpu_suite.plan import FRONTIER_SHARE_OF_SINGLE, Plan
from bench.gpu_suite.records import FrontierRun, Report
from bench.gpu_suite.runs import TRAINED, TrainRun, launch_overhead_s, prepare_data, train
from bench.gpu_suite.throughput import measured_throughput

TARGET_KL_KEY = "model.loss.target_kl"


def run(call: Call, allot: float) -> str:
    end = time.monotonic() + allot  # everything below counts, the data preparation included
    fr = call.state.frontier
    prepare_data(call, call.config)
    if fr.steps is None:
        start_s = launch_overhead_s(call.state, call.plan)
        train_s = end - time.monotonic() - start_s - call.plan.stop_grace_s
        fr.values, fr.steps, fr.steps_from = frontier_size(
            call.state, call.plan, train_s, call.steps_override
        )
        call.note("frontier_train", f"{len(fr.values)} runs, {fr.steps} steps each "
                                    f"({fr.steps_from})")  # fmt: skip
    runs_dir = call.work / "frontier"
    runs = [
        TrainRun(
            run_name(v),
            runs_dir / run_name(v),
            train_cmd(call.config, runs_dir / run_name(v), v, fr.steps),
            fr.steps,
            call.logs / f"train_{run_name(v)}.log",
        )
        for v in fr.values
        if not (runs_dir / run_name(v) / TRAINED).exists() and not evaluated(call.state, v)
    ]
    outcomes = train(call, "frontier_train", runs, end)
    failed = []
    for name, o in outcomes.items():
        rec = fr.runs.setdefault(name, FrontierRun())
        rec.seconds = round((rec.seconds or 0.0) + o.seconds, 1)
        if o.status == "trained":
            rec.trained = True
        elif o.status == "failed":
            failed.append(name)
            call.note("frontier_train", f"{name} failed ({o.note})")
    if failed:
        return "failed"
    return "partial" if any(o.status == "interrupted" for o in outcomes.values()) else "done"


def run_name(value: float) -> str:
    from vat.experiments.config import run_name as sweep_run_name

    return sweep_run_name({TARGET_KL_KEY: value})


def evaluated(state: Report, value: float) -> bool:
    """Whether the frontier's run of `value` has its evaluation in the report."""
    run = state.frontier.runs.get(run_name(value))
    return run is not None and run.eval is not None


def frontier_size(
    state: Report, plan: Plan, train_s: float, override: int | None
) -> tuple[list[float], int, str]:
    """The frontier's targets and steps per run: the runs, all at once, share
    FRONTIER_SHARE_OF_SINGLE x the measured tokens/s over `train_s` seconds of training;
    as many runs as get at least plan.min_run_tokens each (never fewer than two), the
    targets taken from plan.target_kls in order."""
    m = measured_throughput(state, plan)
    if m is None:
        runs = plan.frontier_runs_default
        steps = override or plan.frontier_steps_default
        why = "--frontier-steps" if override else "default (no 8k throughput measured)"
        return sorted(plan.target_kls[:runs]), steps, why
    variant, tok_s, per_step = m
    train_s = max(train_s, 0.0)
    total = FRONTIER_SHARE_OF_SINGLE * tok_s * train_s
    runs = min(len(plan.target_kls), max(2, int(total // plan.min_run_tokens)))
    steps = max(1, min(int(total / (runs * per_step)), plan.max_steps))
    why = (
        f"{variant}: {tok_s:,.0f} tokens/s x {FRONTIER_SHARE_OF_SINGLE} (the runs share the "
        f"GPU) x {train_s:.0f} s of training = {tokens_text(total)} tokens; {runs} runs "
        f"(>= {tokens_text(plan.min_run_tokens)} tokens each, at least 2) of "
        f"{tokens_text(steps * per_step)} tokens = {steps:,} steps of {per_step:,.0f} tokens"
    )
    if override:
        steps, why = override, f"--frontier-steps; sized: {why}"
    elif steps == plan.max_steps:
        why += f" (capped at {plan.max_steps:,})"
    return sorted(plan.target_kls[:runs]), steps, why


def train_cmd(config: Path, run_dir: Path, value: float, steps: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vat",
        "train",
        "-c",
        str(config),
        "--run_dir",
        str(run_dir),
        "--trainer.max_steps",
        str(steps),
        "--trainer.max_time",
        "null",
        "--trainer.val_check_interval",
        str(steps),  # one validation, at the end: val/kl and val/nll
        "--checkpoint.every_n_train_steps",
        str(max(1, steps // 4)),
        f"--{TARGET_KL_KEY}",
        str(value),
        "--model.loss.free_bits",
        "0.0",  # the controller holds the rate (configs/corpus_gpu.yaml's alternative)
        "--ckpt_path",
        "last",  # resumes a stopped run (runs.train removes a folder with no checkpoint)
    ]


def check_frontier_files(call: Call) -> None:
    """A report carried to a fresh machine: runs trained (or half trained) there but not
    evaluated have lost their folders and checkpoints, so the frontier is trained again.
    (A folder without a checkpoint on this machine is runs.train's: it starts afresh.)"""
    fr, st = call.state.frontier, call.state.stages["frontier_train"]
    if st.status not in ("done", "partial"):
        return
    lost = [
        run_name(v)
        for v in fr.values
        if not evaluated(call.state, v) and not (call.work / "frontier" / run_name(v)).is_dir()
    ]
    if lost:
        st.status, st.seconds = "pending", 0.0
        call.state.stages["frontier_eval"].status = "pending"
        call.note("frontier_train", f"checkpoints of {', '.join(lost)} are gone: retraining")
