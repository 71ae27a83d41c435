"""Crash safety: SIGKILL mid-epoch, a Ctrl-C (SIGINT) or SIGTERM anywhere, then
`--ckpt_path last` equals an uninterrupted run (weights, optimizer, step, checkpoint names,
TensorBoard curves); non-finite losses stop the run without touching the last good
checkpoint.

What vat does runs in-process (`vat train` as `vat.cli.train.main`, exit code and stderr
lines): the reference, every resume, a requested stop, and the signals a callback sends to
its own process (crash_callbacks.SignalAt: vat's handler takes them in this process as it
would in any other). Two runs stay real processes, where the process is the subject: a SIGKILL
(nothing of the process survives) and a terminal's Ctrl-C to a whole process group (the
training process and its data loader worker)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
import torch
from conftest import ROOT
from helpers import fit_args, train_captured, train_env, train_subprocess, vat_python
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from train_fixtures import train_once

# 12 training sentences / batch 4 = 3 steps per epoch; 8 steps cross two epoch boundaries.
COMMON = [
    "--trainer.max_steps",
    "8",
    "--checkpoint.every_n_train_steps",
    "2",
    "--trainer.val_check_interval",
    "2",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--data.batch_size",
    "4",
]


def _weights(path):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    return ckpt["state_dict"], ckpt["optimizer_states"][0]["state"], ckpt["global_step"]


@pytest.fixture(autouse=True)
def signal_handlers():
    """A terminal's SIGINT for the test (conftest.py's rule: an earlier in-process run may
    have left it ignored, and vat's handler leaves an ignored SIGINT ignored), and this
    process's SIGINT and SIGTERM handlers as they were afterwards: the in-process runs get
    real signals, and Lightning leaves SIGINT ignored after a second Ctrl-C (its
    `_call_and_handle_interrupt`), which later runs and subprocesses would inherit."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if before[signal.SIGINT] is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 8-step run (and the data cache the interrupted runs share)."""
    base = tmp_path_factory.mktemp("resume")
    code, err = train_once(fit_args(base / "ref", base / "cache", *COMMON))
    assert code == 0, err[-20:]
    return base / "ref" / "checkpoints" / "last.ckpt", base / "cache"


def _resume_matches_reference(run, cache, reference_ckpt, *extra: str) -> str:
    """`--ckpt_path last` in-process, compared with the reference; returns its stderr."""
    code, err = train_captured(fit_args(run, cache, *COMMON, "--ckpt_path", "last", *extra))
    assert code == 0, err[-20:]
    ref_w, ref_opt, ref_step = _weights(reference_ckpt)
    got_w, got_opt, got_step = _weights(run / "checkpoints" / "last.ckpt")
    assert ref_step == got_step == 8
    # CPU kernels are deterministic here, so bitwise equality is the bar: same data order,
    # same dropout/sampling noise, same KL weight and learning rate at every step.
    for k in ref_w:
        assert torch.equal(ref_w[k], got_w[k]), k
    for i in ref_opt:
        for k in ref_opt[i]:
            assert torch.equal(ref_opt[i][k], got_opt[i][k]), (i, k)
    return "\n".join(err)


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tmp_path, reference):
    ref_ckpt, cache = reference
    crash = tmp_path / "crash"
    kill = ["--trainer.callbacks+=crash_callbacks.KillAtStep", "--trainer.callbacks.step=5"]
    r = train_subprocess(fit_args(crash, cache, *COMMON, *kill))
    assert r.returncode == -9  # SIGKILL: no clean shutdown, no on_exception checkpoint
    # the last checkpoint before the kill, mid-epoch (epoch 2, batch 1 of 3)
    assert _weights(crash / "checkpoints" / "last.ckpt")[2] == 4
    # no half-written files left visible as checkpoints
    assert not list((crash / "checkpoints").glob(".*tmp*"))
    _resume_matches_reference(crash, cache, ref_ckpt)


def test_stop_mid_epoch_then_resume_matches_uninterrupted(tmp_path, reference):
    """A requested stop (max_time, EarlyStopping) mid-epoch: last.ckpt is taken with the loops
    mid-epoch, so the resume finishes that epoch's batches instead of skipping to the next
    epoch (Lightning counts the interrupted epoch as completed by the end of fit)."""
    ref_ckpt, cache = reference
    run = tmp_path / "run"
    stop = ["--trainer.callbacks+=crash_callbacks.StopAtStep", "--trainer.callbacks.step=5"]
    code, err = train_captured(fit_args(run, cache, *COMMON, *stop))
    assert code == 0, err[-20:]
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 5 and last["epoch"] == 1  # step 5 is batch 2 of epoch 1
    _resume_matches_reference(run, cache, ref_ckpt)


@pytest.mark.slow
def test_non_finite_loss_stops_with_message_and_keeps_good_checkpoint(tmp_path):
    run = tmp_path / "run"
    poison = ["--trainer.callbacks+=crash_callbacks.PoisonAtStep", "--trainer.callbacks.step=3"]
    code, err = train_captured(fit_args(run, tmp_path / "cache", *COMMON, *poison))
    assert code == 2
    msg = err[-1]
    assert (
        msg.startswith("error: non-finite loss at step 3")
        and "last.ckpt" in msg
        and not any("Traceback" in line for line in err)
    )
    state, _, step = _weights(run / "checkpoints" / "last.ckpt")
    assert step == 2
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())


# -- Ctrl-C and SIGTERM: the first signal stops at the end of a step and saves last.ckpt ------
# Throughput and time depend on the machine; every other curve must match point for point.
_TIMED = re.compile(r"train/(tokens_per_s|model_tflops)|time/.*")  # time/: the time split


def _curves(run) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar of a run, all event files read as written (no purge of the
    points a restart would orphan, so a point logged twice shows twice)."""
    ea = EventAccumulator(str(run), purge_orphaned_data=False)
    ea.Reload()
    return {
        t: sorted((e.step, e.value) for e in ea.Scalars(t))
        for t in ea.Tags()["scalars"]
        if not _TIMED.fullmatch(t)
    }


def _checkpoint_names(run) -> set[str]:
    return {p.name for p in (run / "checkpoints").glob("*.ckpt")}


def _signal_at(step: int, phase: str, sig: str = "SIGINT", times: int = 1) -> list[str]:
    return [
        "--trainer.callbacks+=crash_callbacks.SignalAt",
        f"--trainer.callbacks.step={step}",
        f"--trainer.callbacks.phase={phase}",
        f"--trainer.callbacks.signal={sig}",
        f"--trainer.callbacks.times={times}",
    ]


def _interrupt(
    run, cache, step: int, phase: str, sig: str = "SIGINT", resume: bool = True, stops_after=None
):
    """A run (or a resume) that gets `sig` at `phase` of step `step`, and the stop it makes:
    after that step, or (a signal during a validation) after the next one. In-process: the
    signal comes to this process, whose handler is vat's while it trains."""
    stops_after = step if stops_after is None else stops_after
    args = [*COMMON, *(["--ckpt_path", "last"] if resume else []), *_signal_at(step, phase, sig)]
    code, lines = train_captured(fit_args(run, cache, *args))
    name = {"SIGINT": "Ctrl-C", "SIGTERM": "SIGTERM"}[sig]
    assert code == {"SIGINT": 130, "SIGTERM": 143}[sig], lines[-20:]
    assert not any("Traceback" in line for line in lines)
    last = run / "checkpoints" / "last.ckpt"
    assert lines[-1] == (
        f"vat: stopped by {name} after step {stops_after}; {last} holds it: resume with the "
        f"same command plus --ckpt_path last"
    )
    # before it, the time split's line (vat.callbacks.time_split) when the fit ended at once
    stopping = f"vat: {name}: stopping at the end of a step, with last.ckpt saved there"
    assert any(stopping in line for line in lines[-3:-1]), lines[-3:]
    assert _weights(run / "checkpoints" / "last.ckpt")[2] == stops_after
    assert not (run / "checkpoints" / "on_exception.ckpt").exists()


@pytest.fixture(scope="module")
def reference_run(reference):
    ref_ckpt, cache = reference
    run = ref_ckpt.parent.parent
    return run, _checkpoint_names(run), _curves(run)


@pytest.mark.slow
def test_ctrl_c_mid_step_in_validation_and_sigterm_at_a_checkpoint_resume_exactly(
    tmp_path, reference, reference_run
):
    """Three stops in one run, each resumed with --ckpt_path last: Ctrl-C in the middle of
    step 3 (the last batch of the first epoch), Ctrl-C during the validation of step 4 (which
    runs whole; the stop comes after step 5), and SIGTERM at the end of step 6 (a validation, a
    checkpoint and an epoch end at once). The run ends as the uninterrupted one did, bit for
    bit: weights, optimizer state, step, checkpoint names and every TensorBoard point."""
    ref_ckpt, cache = reference
    ref_run, ref_names, ref_curves = reference_run
    run = tmp_path / "run"
    _interrupt(run, cache, 3, "mid_step", resume=False)
    _interrupt(run, cache, 4, "validation", stops_after=5)
    _interrupt(run, cache, 6, "batch_end", sig="SIGTERM")
    # the last resume with a progress bar, slowed to at most 5 steps/s (0.2 s a step)
    slow = ["--trainer.callbacks+=crash_callbacks.SlowSteps", "--trainer.callbacks.seconds=0.2"]
    err = _resume_matches_reference(
        run, cache, ref_ckpt, "--trainer.enable_progress_bar", "true", *slow
    )
    assert _checkpoint_names(run) == ref_names
    assert _curves(run) == ref_curves
    # steps/s counts the 2 steps run by this command, not the 8 of the whole run
    rates = [float(m) for m in re.findall(r"8/8 \[[^\]]*?([0-9.]+)step/s", err)]
    assert rates and rates[-1] <= 5.0, err[-1500:]


@pytest.mark.slow
def test_a_second_ctrl_c_stops_at_once_and_saves_nothing(tmp_path, reference):
    """Two Ctrl-Cs at the end of step 5: the second stops at once; last.ckpt keeps step 4 (the
    last whole state, an every-2-steps checkpoint, whose resume is the SIGKILL test's) and no
    on_exception.ckpt offers the half-stopped one."""
    _, cache = reference
    run = tmp_path / "run"
    code, err = train_captured(fit_args(run, cache, *COMMON, *_signal_at(5, "batch_end", times=2)))
    assert code == 130, err[-20:]
    assert err[-1] == "error: interrupted"
    assert not any("Traceback" in line for line in err)
    assert _weights(run / "checkpoints" / "last.ckpt")[2] == 4
    assert not (run / "checkpoints" / "on_exception.ckpt").exists()


@pytest.mark.slow
def test_ctrl_c_from_a_terminal_at_any_moment_resumes_exactly(tmp_path, reference, reference_run):
    """A real Ctrl-C as a terminal sends it, to the whole process group (the training process
    and its data loader worker), at whatever moment the run has reached once its first
    checkpoint (step 2) exists (steps slowed to 0.05 s). The worker ignores it and the run stops
    cleanly; the resume is exact."""
    ref_ckpt, cache = reference
    _, ref_names, ref_curves = reference_run
    run = tmp_path / "run"
    slow = ["--trainer.callbacks+=crash_callbacks.SlowSteps", "--trainer.callbacks.seconds=0.05"]
    workers = ["--data.num_workers", "1"]
    args = [vat_python(), "-m", "vat", "train", *fit_args(run, cache, *COMMON, *slow, *workers)]
    env = {**train_env(), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not (run / "checkpoints" / "last.ckpt").exists() and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]  # steps 3 to 8 take >= 0.3 s: it came in time
    assert "Traceback" not in err and not (run / "checkpoints" / "on_exception.ckpt").exists()
    assert re.search(r"vat: stopped by Ctrl-C after step \d", err.strip().splitlines()[-1])
    _resume_matches_reference(run, cache, ref_ckpt)
    assert _checkpoint_names(run) == ref_names and _curves(run) == ref_curves


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["mid_step", "batch_end", "validation"])
def test_a_ctrl_c_during_the_last_step_is_not_lost(tmp_path, reference, phase):
    """A Ctrl-C in the run's last step (step 8 of 8): the run ends there whole, as it would
    have, and the command still exits 130, so that a script that sent it (at its time limit)
    learns that it was stopped. (During the last validation it used to be lost: exit 0.)"""
    ref_ckpt, cache = reference
    run = tmp_path / "run"
    code, err = train_captured(fit_args(run, cache, *COMMON, *_signal_at(8, phase)))
    assert code == 130, err[-20:]
    assert not any("Traceback" in line for line in err)
    assert _weights(run / "checkpoints" / "last.ckpt")[2] == 8
    assert any(line.startswith("vat: Ctrl-C: stopping at the end of a step") for line in err)
    if phase == "validation":  # after the last step had ended: it ends where it would have
        assert "vat: stopped by Ctrl-C at the run's last step (8)" in err
