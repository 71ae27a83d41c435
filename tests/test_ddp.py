"""2-process CPU DDP (gloo) against 1 process with the same global batch, and a Ctrl-C to one
of the two processes. The DDP run is one real run of two processes (Lightning starts the
second rank as a process of its own), shared by both tests; the 1-process run is in-process."""

from __future__ import annotations

import pytest
import torch
from helpers import DDP_TWO_CPU, fit_args, scalars, train_main, train_subprocess

# dropout 0 and z = mu make both runs noise-free, so they differ only by floating-point
# reduction order and by DDP averaging per-rank token means (a global token mean in 1 process).
COMMON = [
    "--trainer.max_steps",
    "8",
    "--trainer.val_check_interval",
    "3",
    "--trainer.check_val_every_n_epoch",
    "null",
    "--model.arch.dropout",
    "0.0",
    "--model.loss.sample_latent",
    "false",
    "--trainer.accelerator",
    "cpu",
    "--checkpoint.every_n_train_steps",
    "3",
    "--data.val_fraction",
    "0.25",
]
# `kill -INT` to rank 0 alone at the end of step 7 (of 8): the processes agree at the next
# logging step (every step: tiny.yaml logs every step), both stop after it, and last.ckpt
# holds it (step 7 is no periodic save: every 3 steps here).
STOP_STEP = 7
SIGNAL_RANK_0 = [
    "--trainer.callbacks+=crash_callbacks.SignalAt",
    f"--trainer.callbacks.step={STOP_STEP}",
    "--trainer.callbacks.rank=0",
]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """The 2-process run, stopped by a Ctrl-C to rank 0 after step 7: (its folder, its cache
    (empty before: both ranks start together), the finished process)."""
    base = tmp_path_factory.mktemp("ddp")
    run, cache = base / "two", base / "cache2"
    r = train_subprocess(fit_args(run, cache, *COMMON, *DDP_TWO_CPU, *SIGNAL_RANK_0), timeout=300)
    return run, cache, r


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path, capsys, ddp_run):
    two, cache2, r = ddp_run
    assert r.returncode == 130, r.stderr[-3000:]  # the stop after step 7 (the other test's)
    one = tmp_path / "one"
    code, err = train_main(
        fit_args(one, tmp_path / "cache", *COMMON, "--data.batch_size", "4")
        + ["--trainer.max_steps", str(STOP_STEP)],
        capsys,
    )
    assert code == 0, err[-20:]

    a, b = scalars(one), scalars(two)
    loss_a = [v for _, v in a["train/loss"]]
    loss_b = [v for _, v in b["train/loss"]]
    assert len(loss_a) == len(loss_b) == STOP_STEP
    # Stated tolerance: 1e-3 relative over 7 steps (validations at steps 3 and 6).
    assert loss_b == pytest.approx(loss_a, rel=1e-3)
    assert [s for s, _ in a["val/loss"]] == [s for s, _ in b["val/loss"]] and len(
        b["val/loss"]
    ) == 2
    assert b["val/loss"][-1][1] == pytest.approx(a["val/loss"][-1][1], rel=1e-3)
    # only rank 0 writes: one event file, one set of checkpoints, one tokenizer in the cache
    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    assert (two / "checkpoints" / "last.ckpt").is_file() and (two / "tokenizer.json").is_file()
    assert len(list(cache2.glob("tokenizer-*.json"))) == 1
    assert not list(cache2.glob(".*tmp*"))


@pytest.mark.slow
def test_ctrl_c_to_one_ddp_process_stops_both_after_the_same_step(ddp_run):
    """`kill -INT` to rank 0 alone at step 7: the processes agree at the next logging step
    (every step here), both stop after it, last.ckpt holds it, and nothing hangs."""
    run, _, r = ddp_run
    assert r.returncode == 130, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"vat: stopped by Ctrl-C after step {STOP_STEP}; {run / 'checkpoints' / 'last.ckpt'} "
        f"holds it: resume with the same command plus --ckpt_path last"
    )
    assert "error: interrupted" not in r.stderr and "Traceback" not in r.stderr
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == STOP_STEP
