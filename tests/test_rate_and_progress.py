"""Schedules in sentences/tokens, progress counters across resume, the KL rate controller."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from conftest import tiny_config
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from vat.tokenizer import make_batch
from vat.train.losses import gaussian_kl
from vat.train.rate import KLController
from vat.train.schedules import KLSchedule, noam_lr
from vat.train.system import LossConfig, OptimConfig, VATSystem

SIZES = [4, 2, 3, 4, 1]  # sentences per batch: known, unequal


def _batches(tok, sentences):
    out, i = [], 0
    for n in SIZES:
        out.append(make_batch(tok.encode_batch(sentences[i : i + n])))
        i += n
    return out


def _system(tok, loss=None, optim=None):
    torch.manual_seed(0)
    s = VATSystem(
        arch=tiny_config(tok.vocab_size), loss=loss or LossConfig(), optim=optim or OptimConfig()
    )
    s.tokenizer = tok
    return s


def _fit(system, batches, steps, tmp_path, ckpt_path=None, callbacks=()):
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        log_every_n_steps=2,
    )
    trainer.fit(system, DataLoader(batches, batch_size=None), ckpt_path=ckpt_path)
    return trainer


def test_schedules_in_sentences_and_tokens_closed_form(tiny_tokenizer, tiny_sentences, tmp_path):
    batches = _batches(tiny_tokenizer, tiny_sentences)
    tokens = [int((b["src"] != 0).sum()) for b in batches]
    loss = LossConfig(
        kl_schedule=KLSchedule(kind="linear", initial_weight=0.0, warmup_steps=40, unit="sentences")
    )
    optim = OptimConfig(schedule="noam", warmup_steps=60, warmup_unit="tokens", lr_scale=2.0)
    system = _system(tiny_tokenizer, loss, optim)
    trainer = _fit(system, batches, 5, tmp_path)
    assert system.train_state.progress.tolist() == [5, sum(SIZES), sum(tokens)]
    # w = sentences / W for the linear schedule from w0 = 0: 14 / 40
    assert float(system.kl_weight()) == pytest.approx(sum(SIZES) / 40)
    # The lr of the last update: Noam at the tokens seen including that batch.
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert float(lr) == pytest.approx(noam_lr(sum(tokens), 32, 60, 2.0), rel=1e-6)


def test_resume_keeps_counters_and_controller(tiny_tokenizer, tiny_sentences, tmp_path):
    batches = _batches(tiny_tokenizer, tiny_sentences)
    loss = LossConfig(target_kl=10.0, kl_control_ki=0.05, kl_schedule=KLSchedule(unit="tokens"))
    whole = _system(tiny_tokenizer, loss)
    _fit(whole, batches, 5, tmp_path / "a")
    ckpt = ModelCheckpoint(
        dirpath=tmp_path / "ck", save_last=True, every_n_train_steps=3, save_top_k=0
    )
    first = _system(tiny_tokenizer, loss)
    _fit(first, batches[:3], 3, tmp_path / "b", callbacks=[ckpt])
    second = _system(tiny_tokenizer, loss)
    # A plain DataLoader restarts its epoch on resume: hand it the batches not yet seen.
    _fit(second, batches[3:], 5, tmp_path / "b", ckpt_path=tmp_path / "ck" / "last.ckpt")
    assert second.train_state.progress.tolist() == whole.train_state.progress.tolist()
    assert second.rate.integral.item() != 0
    torch.testing.assert_close(second.rate.log_weight, whole.rate.log_weight, rtol=1e-4, atol=1e-6)


def test_controller_holds_a_toy_rate_at_the_target():
    """A 1-D Gaussian posterior q = N(m, e^lv) against N(0, 1), reconstruction term
    E_q[(x - c)^2] / 2 = ((m - c)^2 + e^lv) / 2: the optimum's KL falls as the weight rises
    (for weight w: e^lv = w / (1 + w), m = c / (1 + w)), so the controller has one answer."""
    c, target = 3.0, 1.0
    m = torch.zeros((), requires_grad=True)
    lv = torch.zeros((), requires_grad=True)
    ctrl = KLController(target, kp=0.0, ki=0.02, initial=1e-3, w_min=1e-5, w_max=100.0)
    opt = torch.optim.Adam([m, lv], lr=0.05)
    for _ in range(3000):
        kl = gaussian_kl(m, lv, 1.0)
        loss = ((m - c) ** 2 + lv.exp()) / 2 + ctrl.weight.float() * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        ctrl.update(kl.detach())
    kl = gaussian_kl(m, lv, 1.0).item()
    assert kl == pytest.approx(target, abs=0.05)
    # and the weight is the one whose optimum has KL = target (closed form above)
    w = ctrl.weight.item()
    m_opt, var_opt = c / (1 + w), w / (1 + w)
    assert 0.5 * (m_opt**2 + var_opt - math.log(var_opt) - 1) == pytest.approx(target, abs=0.05)


def test_controller_weight_rises_when_the_rate_is_above_target():
    ctrl = KLController(2.0, kp=0.5, ki=0.1, initial=0.01, w_min=1e-4, w_max=1.0)
    ctrl.update(torch.tensor(2.0 * math.exp(0.4)))  # log-ratio error +0.4, within the clip
    assert ctrl.weight.item() == pytest.approx(0.01 * math.exp(0.5 * 0.4 + 0.1 * 0.4))
    for _ in range(1000):
        ctrl.update(torch.tensor(4.0))
    assert ctrl.weight.item() == pytest.approx(
        1.0
    )  # clamped at w_max; the integral did not wind up
    ctrl.update(torch.tensor(0.0))  # error -1 (log 0 = -inf, clipped): leaves the bound at once
    assert ctrl.weight.item() < 1.0
    ctrl.update(torch.tensor(float("nan")))  # a non-finite rate leaves the state as it is
    assert math.isfinite(ctrl.weight.item())


def test_relative_error_is_the_earlier_controller():
    """`relative` with no clip: e = (KL - target) / target, as before the log-ratio."""
    ctrl = KLController(2.0, 0.5, 0.1, 0.01, 1e-4, 1.0, error_kind="relative", max_error=None)
    ctrl.update(torch.tensor(4.0))  # error +1
    assert ctrl.weight.item() == pytest.approx(0.01 * math.exp(0.5 + 0.1))


def _step_response(ctrl, kl: float, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        ctrl.update(torch.tensor(kl))
        out.append(ctrl.weight.item())
    return out


def test_step_in_kl_closed_form():
    """The reference recipe's start: an untrained encoder's KL, 900 nats per token, 45 times
    the target of 20, from the first step. With kp = 0 the log weight after t steps is
    log w0 + ki * t * e (until the clamp): the clipped log-ratio has e = 1, so the weight
    grows by exp(0.01) per step and needs ln(10 / 0.001) / 0.01 = 921.03 steps to reach the
    clamp; the earlier relative error, e = 44, reached it in ln(1e4) / 0.44 = 20.9 steps."""
    args = dict(target=20.0, kp=0.0, ki=0.01, initial=1e-3, w_min=1e-5, w_max=10.0)
    new = _step_response(KLController(**args), 900.0, 1000)
    for t in (1, 10, 100, 921):
        assert new[t - 1] == pytest.approx(1e-3 * math.exp(0.01 * t), rel=1e-9)
    assert new[921] == pytest.approx(10.0)  # step 922: at the clamp
    assert max(new[:100]) < 1e-3 * math.e * (1 + 1e-9)  # far below the clamp for 100 steps
    old = _step_response(KLController(**args, error_kind="relative", max_error=None), 900.0, 30)
    assert old[19] == pytest.approx(1e-3 * math.exp(0.01 * 44 * 20), rel=1e-9)  # step 20
    assert old[20] == pytest.approx(10.0)  # step 21: clamped


def test_step_down_is_as_fast_as_the_step_up():
    """Clipped at +-1, a KL far below the target (a collapse, 0.06 nats per token against
    20) lowers the log weight by ki per step, exactly as a KL far above raised it: 100 steps
    up, 100 steps down, back at the start. The earlier relative error is bounded by -1 below
    the target but not above: the same 100 steps up took it to the clamp, and the way down
    from there needs ln(10 / 0.001) / 0.01 / 0.997 = 924 steps."""
    ctrl = KLController(20.0, 0.0, 0.01, 1e-3, 1e-5, 10.0)
    _step_response(ctrl, 900.0, 100)
    down = _step_response(ctrl, 0.06, 100)
    assert down[-1] == pytest.approx(1e-3, rel=1e-9)
    old = KLController(20.0, 0.0, 0.01, 1e-3, 1e-5, 10.0, error_kind="relative", max_error=None)
    _step_response(old, 900.0, 100)
    e = (0.06 - 20.0) / 20.0
    old_down = _step_response(old, 0.06, 924)
    assert old_down[99] == pytest.approx(10.0 * math.exp(0.01 * e * 100), rel=1e-9)
    assert old_down[99] > 3.0  # still near the clamp after 100 steps of collapse
    assert old_down[-1] < 1.01e-3


def test_log_ratio_is_the_relative_error_near_the_target():
    """Small errors: log(1 + x) = x - x^2 / 2 + ...: the gains mean what they meant."""
    for x in (0.01, -0.01, 0.05):
        a = KLController(20.0, 0.5, 0.01, 1e-3, 1e-5, 10.0)
        b = KLController(20.0, 0.5, 0.01, 1e-3, 1e-5, 10.0, error_kind="relative", max_error=None)
        a.update(torch.tensor(20.0 * (1 + x)))
        b.update(torch.tensor(20.0 * (1 + x)))
        la, lb = a.log_weight.item(), b.log_weight.item()
        assert abs(la - lb) == pytest.approx(0.51 * x * x / 2, rel=0.1)


def test_tiny_run_moves_the_rate_toward_the_target(tiny_tokenizer, tiny_sentences, tmp_path):
    batches = [
        make_batch(tiny_tokenizer.encode_batch(tiny_sentences[i : i + 6])) for i in range(0, 12, 6)
    ] * 15
    loss = LossConfig(target_kl=5.0, kl_control_ki=0.3, kl_control_initial=0.01)
    system = _system(tiny_tokenizer, loss, OptimConfig(schedule="constant", lr=3e-3))
    probe = make_batch(tiny_tokenizer.encode_batch(tiny_sentences[:12]))
    kl0 = system._shared_step(probe, "val", torch.Generator().manual_seed(0)).kl.item()
    _fit(system, batches, 30, tmp_path)
    kl1 = system._shared_step(probe, "val", torch.Generator().manual_seed(0)).kl.item()
    assert kl0 > 20  # a random encoder is far above the target
    assert system.rate.weight.item() > 0.01  # the weight rose
    assert abs(kl1 - 5.0) < 0.5 * abs(kl0 - 5.0)  # and the rate came at least half way
