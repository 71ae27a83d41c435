"""The child processes of the stages (throughput variants, training runs): run from the
checkout, logged, and stopped for time the way vat saves its state.

Each child runs in its own process group with SIGINT at its default. Own group: a Ctrl-C at
a terminal (or `timeout --foreground`) reaches the suite alone, and the suite stops each child
once; a second SIGINT would interrupt the checkpoint vat writes on the first. Default SIGINT:
a suite started in the background by a shell without job control inherits SIGINT ignored,
and so would its children, which then never save their state when stopped (the rehearsal's
runs killed before their first checkpoint). A new group stays in the suite's POSIX session,
so whatever ends the call's processes (a scheduler at the end of an allocation) ends these
too."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from bench.gpu_suite.plan import ROOT, Plan


def child_env(plan: Plan) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    if plan.smoke:
        env["OMP_NUM_THREADS"] = "1"
    return env


def _child_setup() -> None:  # runs in the child between fork and exec
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn(cmd: list[str], log: Path, plan: Plan, cwd: Path | None = None) -> subprocess.Popen:
    """Start one child, its output appended to `log` (after the command line), in `cwd`
    (default: the checkout)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    # O_NOFOLLOW: a link at the log's place is refused, never appended through
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    with open(fd, "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        return subprocess.Popen(
            cmd,
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=cwd or ROOT,
            env=child_env(plan),
            preexec_fn=_child_setup,  # safe here: the suite starts no threads
        )


def run_child(cmd: list[str], log: Path, timeout_s: float, plan: Plan) -> tuple[int | None, float]:
    """Run one child to completion or `timeout_s` (then SIGINT, then kill): (rc, seconds).

    rc is None when it was stopped for time."""
    t0 = time.monotonic()
    proc = spawn(cmd, log, plan)
    try:
        # stopped stop_grace_s before its time, so that stopping it fits in that time
        rc: int | None = proc.wait(timeout=max(timeout_s - plan.stop_grace_s, 0.1))
    except subprocess.TimeoutExpired:
        stop([proc], plan.stop_grace_s)
        rc = None
    except KeyboardInterrupt:
        shield()
        stop([proc], plan.stop_grace_s)
        raise
    return rc, time.monotonic() - t0


def stop(procs: Sequence[subprocess.Popen], grace_s: float) -> None:
    """SIGINT (vat saves its state on Ctrl-C), then SIGKILL to the child's whole group (its
    data loader and compile workers) after `grace_s`."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    end = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def shield() -> None:
    """The suite is stopping (a signal): further SIGINT/SIGTERM must not cut short its own
    clean-up (children stopped, the report written)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def last_line(path: Path) -> str:
    """A child's log's last non-empty line (at most 300 characters), for a failure's note."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"
