"""The LightningModule: the objective's terms, the learnable prior scale, optimiser wiring."""

import math

import lightning as L
import pytest
import torch
from conftest import tiny_config
from torch.utils.data import DataLoader

from vat.tokenizer import make_batch
from vat.train.losses import gaussian_kl, masked_mean
from vat.train.schedules import KLSchedule, noam_lr
from vat.train.system import LossConfig, OptimConfig, VATSystem


def _system(tok, **loss):
    torch.manual_seed(0)
    return VATSystem(
        arch=tiny_config(tok.vocab_size),
        loss=LossConfig(**loss),
        optim=OptimConfig(warmup_steps=10),
    )


def test_shared_step_is_nll_plus_weighted_kl(tiny_tokenizer, tiny_sentences):
    system = _system(
        tiny_tokenizer,
        kl_schedule=KLSchedule(kind="constant", initial_weight=0.3),
        sample_latent=False,
    )
    batch = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:4]))
    out = system._shared_step(batch, "train")
    mu, logvar, mask = system.model.encode(batch["src"])
    kl = masked_mean(gaussian_kl(mu, logvar, 0.4).sum(-1), mask)
    torch.testing.assert_close(out.kl, kl)
    torch.testing.assert_close(out.loss, out.nll + 0.3 * kl)


def test_learnable_prior_std_gets_gradients_and_is_logged(tiny_tokenizer, tiny_sentences, tmp_path):
    system = _system(tiny_tokenizer, learn_prior_std=True, prior_std=0.4)
    assert isinstance(system.log_prior_std, torch.nn.Parameter)
    assert system.prior_std.item() == pytest.approx(0.4)
    system.tokenizer = tiny_tokenizer
    batches = [
        make_batch(tiny_tokenizer.encode_batch(tiny_sentences[i : i + 4])) for i in range(0, 12, 4)
    ]
    logger = L.pytorch.loggers.CSVLogger(tmp_path)
    trainer = L.Trainer(
        max_steps=3,
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(system, DataLoader(batches, batch_size=None))
    assert system.prior_std.item() != pytest.approx(0.4)  # it moved
    metrics = (tmp_path / "lightning_logs" / "version_0" / "metrics.csv").read_text()
    assert "train/prior_std" in metrics.splitlines()[0]
    fixed = _system(tiny_tokenizer)
    assert "log_prior_std" not in dict(fixed.named_parameters())


def test_noam_schedule_drives_the_optimizer(tiny_tokenizer):
    system = _system(tiny_tokenizer)
    conf = system.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(noam_lr(1, 32, 10))
    assert lrs[9] == pytest.approx(32**-0.5 * 10**-0.5)  # the peak, at step = warmup
    assert lrs[19] == pytest.approx(32**-0.5 * 20**-0.5)
    assert max(lrs) == pytest.approx(lrs[9]) and math.isfinite(lrs[0])
