"""2-process CPU DDP (gloo) against 1 process with the same global batch."""

from __future__ import annotations

import pytest
import torch
from helpers import DDP_TWO_CPU, fit_args, scalars, train_subprocess

# dropout 0 and z = mu make both runs noise-free, so they differ only by floating-point
# reduction order and by DDP averaging per-rank token means (a global token mean in 1 process).
COMMON = [
    "--trainer.max_steps",
    "6",
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


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path):
    cache = tmp_path / "cache"  # empty: both DDP ranks start together
    one = tmp_path / "one"
    r = train_subprocess(fit_args(one, cache, *COMMON, "--data.batch_size", "4"))
    assert r.returncode == 0, r.stderr[-2000:]
    two = tmp_path / "two"
    r = train_subprocess(fit_args(two, tmp_path / "cache2", *COMMON, *DDP_TWO_CPU), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]

    a, b = scalars(one), scalars(two)
    loss_a = [v for _, v in a["train/loss"]]
    loss_b = [v for _, v in b["train/loss"]]
    assert len(loss_a) == len(loss_b) == 6
    # Stated tolerance: 1e-3 relative over 6 steps.
    assert loss_b == pytest.approx(loss_a, rel=1e-3)
    assert b["val/loss"][-1][1] == pytest.approx(a["val/loss"][-1][1], rel=1e-3)
    # only rank 0 writes: one event file, one set of checkpoints, one tokenizer in the cache
    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    assert (two / "checkpoints" / "last.ckpt").is_file() and (two / "tokenizer.json").is_file()
    assert len(list((tmp_path / "cache2").glob("tokenizer-*.json"))) == 1
    assert not list((tmp_path / "cache2").glob(".*tmp*"))


@pytest.mark.slow
def test_ctrl_c_to_one_ddp_process_stops_both_after_the_same_step(tmp_path):
    """`kill -INT` to rank 0 alone at step 3: the processes agree at the next logging step
    (every step here), both stop after it, last.ckpt holds it, and nothing hangs."""
    run = tmp_path / "run"
    sig = ["--trainer.callbacks+=crash_callbacks.SignalAt", "--trainer.callbacks.step=3",
           "--trainer.callbacks.rank=0"]  # fmt: skip
    r = train_subprocess(
        fit_args(run, tmp_path / "cache", *DDP_TWO_CPU, "--trainer.max_steps", "8", *sig),
        timeout=180,
    )
    assert r.returncode == 130, r.stderr[-3000:]
    assert r.stderr.strip().splitlines()[-1] == (
        f"vat: stopped by Ctrl-C after step 3; {run / 'checkpoints' / 'last.ckpt'} holds it: "
        f"resume with the same command plus --ckpt_path last"
    )
    assert "error: interrupted" not in r.stderr and "Traceback" not in r.stderr
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
