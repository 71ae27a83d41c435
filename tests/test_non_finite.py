"""Non-finite training stops every rank in one line and never writes a non-finite checkpoint;
every config value is validated at construction, naming the option."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_config
from helpers import DDP_TWO_CPU, fit_args, train_main, train_subprocess

# six steps, scalars logged every third: the non-finite flag is read at a save or a log step
SIX_STEPS = ["--trainer.max_steps", "6", "--trainer.log_every_n_steps", "3"]


def _poison(callback: str) -> list[str]:
    """crash_callbacks.CALLBACK makes the loss non-finite at step 1."""
    return [f"--trainer.callbacks+=crash_callbacks.{callback}", "--trainer.callbacks.step=1"]


def _all_finite(path) -> bool:
    sd = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    return all(torch.isfinite(v).all() for v in sd.values() if v.is_floating_point())


def test_nan_stops_and_leaves_only_finite_checkpoints(tmp_path, capsys):
    """NaN weights at step 1 (so a NaN loss); logging every 3 steps, saving every step: the
    flag is read at the save after step 1, which is refused; the error names step 1."""
    run = tmp_path / "run"
    code, err = train_main(
        fit_args(run, tmp_path / "cache", *SIX_STEPS, *_poison("PoisonAtStep")), capsys
    )
    assert code == 2
    assert (
        err[-1].startswith("error: non-finite loss at step 1 ")
        and "last good checkpoint:" in err[-1]
    ), err
    assert err[-1].endswith("last.ckpt")
    ckpts = list((run / "checkpoints").glob("*.ckpt"))
    assert ckpts and not (run / "checkpoints" / "on_exception.ckpt").exists()
    assert all(_all_finite(p) for p in ckpts)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 1


def test_save_refuses_non_finite_weights(tmp_path, tiny_tokenizer, tiny_sentences):
    import lightning as L
    from torch.utils.data import DataLoader

    from vat.tokenizer import make_batch
    from vat.train.non_finite import NonFiniteLossError
    from vat.train.system import OptimConfig, VATSystem

    system = VATSystem(
        arch=tiny_config(tiny_tokenizer.vocab_size), optim=OptimConfig(schedule="constant", lr=1e-3)
    )
    system.tokenizer = tiny_tokenizer
    trainer = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(
        system,
        DataLoader([make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:4]))], batch_size=None),
    )
    trainer.save_checkpoint(tmp_path / "good.ckpt")
    with torch.no_grad():
        system.model.mu_head.weight[0, 0] = float("inf")
    with pytest.raises(NonFiniteLossError, match="non-finite weights"):
        trainer.save_checkpoint(tmp_path / "bad.ckpt")
    assert (tmp_path / "good.ckpt").is_file() and not (tmp_path / "bad.ckpt").exists()


@pytest.mark.slow
def test_non_finite_under_ddp_stops_all_ranks(tmp_path):
    """2-process gloo DDP: a NaN at step 1 stops both ranks (no hang at the next collective)."""
    run = tmp_path / "run"
    r = train_subprocess(
        fit_args(
            run,
            tmp_path / "cache",
            *DDP_TWO_CPU,
            *SIX_STEPS,
            "--trainer.val_check_interval",
            "3",
            *_poison("PoisonRankAtStep"),
        ),
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "error: non-finite loss at step 1" in r.stderr and "Traceback" not in r.stderr
    assert all(_all_finite(p) for p in (run / "checkpoints").glob("*.ckpt"))


BAD_VALUES = [
    ("model.arch.dropout", "1.5"),
    ("model.arch.dropout", "-0.1"),
    ("model.arch.n_heads", "0"),
    ("model.arch.n_heads", "5"),
    ("model.arch.d_ff", "0"),
    ("model.arch.n_encoder_layers", "0"),
    ("model.arch.logvar_max", "-20"),
    ("model.optim.lr", "-1"),
    ("model.optim.lr", "inf"),
    ("model.optim.lr", "1e30"),
    ("model.optim.warmup_steps", "0"),
    ("model.optim.lr_scale", "0"),
    ("model.optim.eps", "0"),
    ("model.optim.weight_decay", "-1"),
    ("model.optim.betas", "[0.9, 1.0]"),
    ("model.loss.prior_std", "0"),
    ("model.loss.prior_std", "nan"),
    ("model.loss.free_bits", "-1"),
    ("model.loss.target_kl", "0"),
    ("model.loss.kl_control_ki", "-0.1"),
    ("model.loss.kl_control_min", "0"),
    ("model.loss.kl_control_initial", "100"),
    ("model.loss.kl_schedule.warmup_steps", "0"),
    ("model.loss.kl_schedule.initial_weight", "0.7"),
    ("model.loss.kl_schedule.beta", "-1"),
    ("model.loss.kl_schedule.cycle_ramp", "0"),
]


@pytest.mark.parametrize(("option", "value"), BAD_VALUES)
def test_bad_config_value_is_one_line_error(tmp_path, capsys, option, value):
    code, err = train_main(fit_args(tmp_path, None, f"--{option}", value), capsys)
    assert code == 2
    # (in-process runs earlier in the session may leave "--- Logging error ---" noise on capsys)
    errors = [line for line in err if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == err[-1] and option in errors[0], err
