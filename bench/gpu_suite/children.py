"""The child processes of the stages (throughput variants, frontier runs): run from the
checkout, logged, and stopped for time the way vat saves its state."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from bench.gpu_suite.plan import ROOT, Plan

STOP_GRACE_S = 30.0
"""Children stopped for time get SIGINT (vat saves its state) and this long before SIGKILL;
they are stopped this long before their stage's time is up."""


def child_env(plan: Plan) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if plan.smoke:
        env["OMP_NUM_THREADS"] = "1"
    return env


def run_child(cmd: list[str], log: Path, timeout_s: float, plan: Plan) -> tuple[int | None, float]:
    """Run one child to completion or `timeout_s` (then SIGINT, then kill): (rc, seconds).

    rc is None when it was stopped for time."""
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=child_env(plan)
        )
        try:
            # stopped STOP_GRACE_S before its time, so that stopping it fits in that time
            rc: int | None = proc.wait(timeout=max(timeout_s - STOP_GRACE_S, 0.1))
        except subprocess.TimeoutExpired:
            stop([proc])
            rc = None
    return rc, time.monotonic() - t0


def stop(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT (vat saves its state on Ctrl-C), then SIGKILL after `grace_s`."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    end = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def last_line(path: Path) -> str:
    """A child's log's last non-empty line (at most 300 characters), for a failure's note."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"
