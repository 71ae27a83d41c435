"""Crash safety: SIGKILL mid-epoch then `--ckpt_path last` equals an uninterrupted run;
non-finite losses stop the run without touching the last good checkpoint."""

from __future__ import annotations

import pytest
import torch
from helpers import fit_args, train_subprocess

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


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 8-step run (and the data cache the interrupted runs share)."""
    base = tmp_path_factory.mktemp("resume")
    r = train_subprocess(fit_args(base / "ref", base / "cache", *COMMON))
    assert r.returncode == 0, r.stderr[-2000:]
    return base / "ref" / "checkpoints" / "last.ckpt", base / "cache"


def _resume_matches_reference(run, cache, reference_ckpt) -> None:
    r = train_subprocess(fit_args(run, cache, *COMMON, "--ckpt_path", "last"))
    assert r.returncode == 0, r.stderr[-2000:]
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


@pytest.mark.slow
def test_stop_mid_epoch_then_resume_matches_uninterrupted(tmp_path, reference):
    """A requested stop (max_time, EarlyStopping) mid-epoch: last.ckpt is taken with the loops
    mid-epoch, so the resume finishes that epoch's batches instead of skipping to the next
    epoch (Lightning counts the interrupted epoch as completed by the end of fit)."""
    ref_ckpt, cache = reference
    run = tmp_path / "run"
    stop = ["--trainer.callbacks+=crash_callbacks.StopAtStep", "--trainer.callbacks.step=5"]
    r = train_subprocess(fit_args(run, cache, *COMMON, *stop))
    assert r.returncode == 0, r.stderr[-2000:]
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 5 and last["epoch"] == 1  # step 5 is batch 2 of epoch 1
    _resume_matches_reference(run, cache, ref_ckpt)


@pytest.mark.slow
def test_non_finite_loss_stops_with_message_and_keeps_good_checkpoint(tmp_path):
    run = tmp_path / "run"
    poison = ["--trainer.callbacks+=crash_callbacks.PoisonAtStep", "--trainer.callbacks.step=3"]
    r = train_subprocess(fit_args(run, tmp_path / "cache", *COMMON, *poison))
    assert r.returncode == 2
    msg = r.stderr.strip().splitlines()[-1]
    assert (
        msg.startswith("error: non-finite loss at step 3")
        and "last.ckpt" in msg
        and "Traceback" not in r.stderr
    )
    state, _, step = _weights(run / "checkpoints" / "last.ckpt")
    assert step == 2
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
