"""Stage 3, `frontier_train`: one `vat train` per `model.loss.target_kl` value (5, 10, 15,
20, 30, 45 nats per token), all at once on the one GPU: the paper-shaped model of
configs/corpus_gpu.yaml (8k vocabulary, max_len 256, token batches, bf16, compiled) on the
shared corpus, the same step (and so token) budget each, sized from the throughput stage to
fill the stage's share. At the end of a call's budget the runs are interrupted (each saves
its state) and the next call resumes them (`--ckpt_path last`).

Run NAME trains in OUT_DIR/work/frontier/NAME/ and leaves `.trained` there when it ends."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.gpu_suite.call import Call
from bench.gpu_suite.children import STOP_GRACE_S, child_env, last_line, stop
from bench.gpu_suite.plan import ROOT, Plan
from vat.errors import VatError

TARGET_KL_KEY = "model.loss.target_kl"


def run(call: Call, allot: float) -> str:
    fr = call.state["frontier"]
    if fr["steps"] is None:
        fr["steps"], fr["steps_from"] = frontier_steps(call.state, call.plan, call.steps_override)
        fr["values"] = list(call.plan.target_kls)
        call.note("frontier_train", f"{fr['steps']} steps per run ({fr['steps_from']})")
    runs_dir = call.work / "frontier"
    pending = [
        v
        for v in fr["values"]
        if not (runs_dir / run_name(v) / ".trained").exists()
        and "eval" not in fr["runs"].get(run_name(v), {})
    ]
    _prepare_data(call)
    procs: list[tuple[float, subprocess.Popen, Any]] = []
    end = time.monotonic() + allot - STOP_GRACE_S  # stopping the runs fits in allot
    for v in pending:
        run_dir = runs_dir / run_name(v)
        log = call.logs / f"train_{run_name(v)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        f = open(log, "a", encoding="utf-8")  # noqa: SIM115 (closed when the child ends)
        cmd = train_cmd(call.config, run_dir, v, fr["steps"])
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        p = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=child_env(call.plan)
        )
        procs.append((v, p, f))
    while any(p.poll() is None for _, p, _ in procs) and time.monotonic() < end:
        time.sleep(call.plan.poll_s)
    interrupted = [p for _, p, _ in procs if p.poll() is None]
    if interrupted:
        call.note(
            "frontier_train",
            f"{len(interrupted)} runs interrupted at the call's budget (each saves its "
            "state); the next call resumes them",
        )
        stop(interrupted)
    failed = []
    for v, p, f in procs:
        f.close()
        name = run_name(v)
        if p in interrupted:
            continue
        if p.returncode == 0:
            (runs_dir / name / ".trained").write_text("")
            fr["runs"].setdefault(name, {})["trained"] = True
        else:
            failed.append(name)
            call.note(
                "frontier_train",
                f"{name} failed (exit {p.returncode}): "
                f"{last_line(call.logs / f'train_{name}.log')}",
            )
    if failed:
        return "failed"
    return "partial" if interrupted else "done"


def run_name(value: float) -> str:
    from vat.experiments.config import run_name as sweep_run_name

    return sweep_run_name({TARGET_KL_KEY: value})


def frontier_steps(state: dict[str, Any], plan: Plan, override: int | None) -> tuple[int, str]:
    """The step budget of every frontier run: the same token budget each, sized so that the
    runs, all at once, fill the frontier_train share at the measured 8k throughput (80% of a
    single run's tokens/s, shared between the runs)."""
    if override:
        return override, "--frontier-steps"
    variants = state["throughput"]["variants"]
    for name in ("8k_compiled", "8k_eager"):
        v = variants.get(name)
        if not v or v.get("status") != "done":
            continue
        voc = v["result"]["vocabs"][0]
        tokens_per_step = voc["timed_nonpad_tokens"] / v["result"]["timed_steps"]
        tok_s = voc["vat"]["tokens_per_s"]
        runs = len(plan.target_kls)
        steps = int(0.8 * tok_s * plan.shares_s["frontier_train"] / (runs * tokens_per_step))
        return max(100, min(steps, 50_000)), (
            f"{name}: {tok_s:,.0f} tokens/s x 0.8, {runs} runs, "
            f"{tokens_per_step:,.0f} tokens/step, {plan.shares_s['frontier_train']:.0f} s"
        )
    return plan.frontier_steps_default, "default (no 8k throughput measured)"


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
        "last",  # resumes an interrupted run; starts fresh in an empty run directory
    ]


def _prepare_data(call: Call) -> None:
    """The tokenizer and tokenized cache once, before the parallel runs read them."""
    from vat.cli.train import prepare_data

    with contextlib.redirect_stdout(io.StringIO()):
        rc = prepare_data(["-c", str(call.config), "--run_dir", str(call.work / ".prepare")])
    if rc != 0:
        raise VatError(f"preparing the data of {call.config} failed (exit {rc})")


def check_frontier_files(call: Call) -> None:
    """A report carried to a fresh machine: runs trained (or half trained) there but not
    evaluated have lost their checkpoints, so the frontier is trained again."""
    fr, st = call.state["frontier"], call.state["stages"]["frontier_train"]
    if st["status"] not in ("done", "partial"):
        return
    lost = [
        run_name(v)
        for v in fr["values"]
        if "eval" not in fr["runs"].get(run_name(v), {})
        and not (call.work / "frontier" / run_name(v) / "checkpoints").is_dir()
    ]
    if lost:
        st.update(status="pending", seconds=0.0)
        call.state["stages"]["frontier_eval"]["status"] = "pending"
        call.note("frontier_train", f"checkpoints of {', '.join(lost)} are gone: retraining")
