"""The collapse alarm (vat.callbacks.collapse_alarm): its thresholds and the active units in
closed form, one line per episode, and real runs: one squeezed far below its target fires
at the step and with the numbers TensorBoard holds, a healthy one stays silent, and
`--enable_collapse_alarm false` turns it off."""

from __future__ import annotations

import functools
import re
from types import SimpleNamespace

import pytest
import torch
from helpers import fit_args, scalars, train_main

from vat.callbacks.collapse_alarm import (
    CollapseAlarm,
    kl_is_low,
    kl_threshold,
    mu_moment_sums,
    rate_target,
    units_dropped,
    variances_from_sums,
)
from vat.geometry.collapse import active_unit_variances


def test_the_target_and_the_thresholds():
    assert rate_target(25.0, 0.5, 64) == 25.0  # the controller's target wins
    assert rate_target(None, 0.25, 64) == 16.0  # free bits x latent dimensions
    assert rate_target(None, 0.0, 64) is None
    assert kl_threshold(25.0, 0.1, 0.05) == pytest.approx(2.5)
    assert kl_threshold(None, 0.1, 0.05) == 0.05
    # hysteresis: low below the threshold; once low, clear only at twice it
    assert kl_is_low(2.4, 2.5, False) and not kl_is_low(2.6, 2.5, False)
    assert kl_is_low(4.9, 2.5, True) and not kl_is_low(5.0, 2.5, True)
    assert units_dropped(5, 12, 0.5) and not units_dropped(6, 12, 0.5)
    assert not units_dropped(0, None, 0.5) and not units_dropped(0, 0, 0.5)


def test_the_moment_sums_give_the_active_unit_variances():
    """Summed batch by batch over real tokens only, as geometry's variance of the tokens."""
    g = torch.Generator().manual_seed(0)
    scales = torch.tensor([1.0, 0.3, 0.05, 0.01])  # Var 1, 0.09 active; 0.0025, 1e-4 not
    batches = []
    for b, t in ((3, 7), (2, 5)):
        mu = torch.randn(b, t, 4, generator=g) * scales + 3.0  # (B, T, d), a large mean
        mask = torch.rand(b, t, generator=g) < 0.7  # (B, T)
        batches.append((mu, mask))
    sums = [mu_moment_sums(mu, mask) for mu, mask in batches]
    s1, s2, n = (sum(parts) for parts in zip(*sums))
    tokens = torch.cat([mu[mask] for mu, mask in batches])  # (N, d)
    expected = active_unit_variances(tokens)
    assert n == len(tokens)
    torch.testing.assert_close(variances_from_sums(s1, s2, n).numpy(), expected, rtol=1e-9, atol=0)


class _Recorder:
    def __init__(self) -> None:
        self.logged: list[tuple[int, float]] = []

    def log_metrics(self, metrics: dict, step: int) -> None:
        self.logged.append((step, metrics["alarm/collapse"]))


def _trainer(step: int, recorder: _Recorder, **metrics: float) -> SimpleNamespace:
    """What the alarm reads of a Trainer: the step, logging, metrics, loggers."""
    return SimpleNamespace(
        global_step=step,
        sanity_checking=False,
        callback_metrics={k.replace("_", "/"): torch.tensor(v) for k, v in metrics.items()},
        loggers=[recorder],
        _logger_connector=SimpleNamespace(should_update_logs=True),
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=step - 1)),
    )


def _system(target_kl: float | None = 20.0, d: int = 8) -> SimpleNamespace:
    mu_head = torch.nn.Identity()
    return SimpleNamespace(
        loss_cfg=SimpleNamespace(target_kl=target_kl, free_bits=0.0),
        arch=SimpleNamespace(d_model=d),
        model=SimpleNamespace(mu_head=mu_head, config=SimpleNamespace(pad_id=0)),
    )


def test_one_line_per_episode_and_again_after_a_recovery(caplog):
    """Target 20: alarm below 2 nats/token, cleared at 4 (per signal: the train KL's recovery
    does not clear what the val KL raised)."""
    alarm, rec, system = CollapseAlarm(warmup_steps=50), _Recorder(), _system()
    alarm.setup(None, system, "fit")
    events = [
        ("train", 10, 0.01),  # warm-up: not judged
        ("train", 60, 10.0),
        ("train", 70, 1.5),  # the alarm
        ("train", 80, 0.5),
        ("val", 100, 1.0),
        ("train", 110, 3.0),  # below 4: still low
        ("train", 120, 5.0),  # the train KL is back, the val KL is not
        ("val", 150, 6.0),  # cleared
        ("train", 160, 1.0),  # again
    ]
    with caplog.at_level("INFO"):
        for kind, step, kl in events:
            if kind == "train":
                alarm.on_train_batch_end(_trainer(step, rec, train_kl=kl), system)
            else:
                alarm.on_validation_end(_trainer(step, rec, val_kl=kl), system)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vat: ")]
    target = "below 10% of its target 20 (model.loss.target_kl)"
    assert lines == [
        f"vat: warning: posterior collapse at step 70: train KL 1.5 nats/token, {target} "
        "(collapse alarm; alarm/collapse in TensorBoard)",
        "vat: the collapse alarm of step 70 cleared at step 150: val KL 6 nats/token",
        f"vat: warning: posterior collapse at step 160: train KL 1 nats/token, {target} "
        "(collapse alarm; alarm/collapse in TensorBoard)",
    ]
    assert [r.levelname for r in caplog.records if "posterior collapse" in r.getMessage()] == [
        "WARNING",
        "WARNING",
    ]
    # at Lightning's logging step (the step before global_step's count)
    assert rec.logged == [(59, 0), (69, 1), (79, 1), (99, 1), (109, 1), (119, 1), (149, 0),
                          (159, 1)]  # fmt: skip


def _validation(alarm, system, trainer, mu: torch.Tensor) -> None:
    """One validation batch of means mu (B, T, d), no padding, through the alarm's hook."""
    alarm.on_validation_epoch_start(trainer, system)
    alarm.on_validation_batch_start(trainer, system, {"src": torch.ones(mu.shape[:2])}, 0)
    system.model.mu_head(mu)
    alarm.on_validation_batch_end(trainer, system)
    alarm.on_validation_end(trainer, system)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_reading_neither_raises_nor_clears_the_alarm(caplog, bad):
    """A NaN KL is below no threshold: it cleared the alarm ("cleared at step 110: train KL
    nan"), and NaN means counted no active unit at all. Neither is a reading: the alarm
    holds, silent, and the units of the last real count stay the ones compared with."""
    alarm, rec, system = CollapseAlarm(warmup_steps=50), _Recorder(), _system()
    alarm.setup(None, system, "fit")
    spread = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(0))  # 8 active
    with caplog.at_level("INFO"):
        alarm.on_train_batch_end(_trainer(60, rec, train_kl=bad), system)  # none raised
        _validation(alarm, system, _trainer(70, rec, val_kl=30.0), spread)
        alarm.on_train_batch_end(_trainer(80, rec, train_kl=1.5), system)  # the alarm
        alarm.on_train_batch_end(_trainer(110, rec, train_kl=bad), system)  # it holds
        _validation(alarm, system, _trainer(120, rec, val_kl=bad), spread * bad)
        alarm.on_train_batch_end(_trainer(130, rec, train_kl=5.0), system)  # cleared
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vat: ")]
    assert [ln.split(":")[1] for ln in lines] == [
        " warning",
        " the collapse alarm of step 80 cleared at step 130",
    ]
    assert rec.logged == [(69, 0), (79, 1), (129, 0)] and alarm.previous_units == 8


def test_active_units_counted_from_validation_s_own_means(caplog):
    """The hook on the mean head sums mu over the real tokens of each validation batch; a
    count under half the previous validation's is a collapse, said with both counts."""
    alarm, rec, system = CollapseAlarm(warmup_steps=0), _Recorder(), _system(target_kl=None)
    alarm.setup(None, system, "fit")
    g = torch.Generator().manual_seed(0)

    def validation(step: int, active: int) -> None:
        trainer = _trainer(step, rec, val_kl=5.0)
        alarm.on_validation_epoch_start(trainer, system)
        for _ in range(2):
            src = torch.randint(1, 9, (4, 6), generator=g)  # (B, T)
            src[:, -2:] = 0  # padding: never counted
            alarm.on_validation_batch_start(trainer, system, {"src": src}, 0)
            mu = torch.zeros(4, 6, 8)  # (B, T, d)
            mu[..., :active] = torch.randn(4, 6, active, generator=g)
            mu[:, -2:] = 100.0  # pads' means would make every dimension "active"
            system.model.mu_head(mu)
            alarm.on_validation_batch_end(trainer, system)
        system.model.mu_head(torch.randn(4, 6, 8))  # another callback's encode: not counted
        alarm.on_validation_end(trainer, system)

    with caplog.at_level("INFO"):
        validation(10, 8)
        validation(20, 5)  # fewer, not half
        validation(30, 2)
        validation(40, 2)  # steady: cleared
    assert alarm.previous_units == 2 and alarm.state_dict() == {"previous_units": 2}
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vat: ")]
    assert lines == [
        "vat: warning: posterior collapse at step 30: active units 2 of 8, fewer than 50% of "
        "the previous validation's 5 (Var over tokens of mu > 0.01, Burda et al. 2016); "
        "val KL 5 nats/token (collapse alarm; alarm/collapse in TensorBoard)",
        "vat: the collapse alarm of step 30 cleared at step 40: val KL 5 nats/token",
    ]
    assert not system.model.mu_head._forward_hooks  # removed at each validation's end


def _fit(tmp_path, capsys, caplog, *extra: str) -> tuple[list[str], dict]:
    run = tmp_path / "run"
    with caplog.at_level("INFO"):
        code, err = train_main(fit_args(run, tmp_path / "cache", *extra), capsys)
    assert code == 0, err
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("vat: ")]
    return lines, scalars(run)


def _with_warmup(steps: int):
    """The alarm `vat train` registers, judging from `steps` on (tiny runs are short)."""
    return functools.partial(CollapseAlarm, warmup_steps=steps)


EVERY_STEP = ["--trainer.log_every_n_steps", "1", "--trainer.check_val_every_n_epoch", "null"]


def test_a_run_squeezed_far_below_its_target_fires_once_at_its_step(
    tmp_path, capsys, caplog, monkeypatch
):
    """The reference run's incident in small: a controller started at its largest weight
    (x beta 1000) squeezes the rate far below target 15. The line names the first reading
    under 1.5 after the warm-up (here 20 steps), train KL at each logging step or val KL at
    each validation, at the step the progress bar counts (TensorBoard's + 1)."""
    import vat.cli.train

    monkeypatch.setattr(vat.cli.train, "CollapseAlarm", _with_warmup(20))
    squeeze = ["--model.loss.target_kl", "15", "--model.loss.kl_control_initial", "10",
               "--model.loss.kl_schedule.beta", "1000", "--model.optim.lr", "0.005"]  # fmt: skip
    steps = ["--trainer.max_steps", "50", "--trainer.val_check_interval", "25"]
    lines, tb = _fit(tmp_path, capsys, caplog, *EVERY_STEP, *squeeze, *steps)
    # the readings in the order the alarm saw them: a step's train KL before its validation
    readings = sorted(
        [(s + 1, 0, "train KL", v) for s, v in tb["train/kl"]]
        + [(s + 1, 1, "val KL", v) for s, v in tb["val/kl"]]
    )
    step, _, signal, kl = next(r for r in readings if r[0] >= 20 and r[3] < 1.5)
    warnings = [ln for ln in lines if "posterior collapse" in ln]
    assert warnings == [
        f"vat: warning: posterior collapse at step {step}: {signal} {kl:.4g} nats/token, "
        "below 10% of its target 15 (model.loss.target_kl) (collapse alarm; alarm/collapse "
        "in TensorBoard)"
    ]
    alarm = dict(tb["alarm/collapse"])
    assert alarm[step - 1] == 1.0 and set(alarm.values()) <= {0.0, 1.0}
    assert all(v == 0.0 for s, v in alarm.items() if s < step - 1)
    assert not [ln for ln in lines if "cleared" in ln]


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
def test_a_healthy_run_stays_silent_and_the_alarm_turns_off(
    tmp_path, capsys, caplog, monkeypatch, enabled
):
    import vat.cli.train

    monkeypatch.setattr(vat.cli.train, "CollapseAlarm", _with_warmup(2))
    steps = ["--trainer.max_steps", "12", "--trainer.val_check_interval", "4"]
    switch = ["--enable_collapse_alarm", str(enabled).lower()]
    lines, tb = _fit(tmp_path, capsys, caplog, *EVERY_STEP, *steps, *switch)
    assert not [ln for ln in lines if re.search("collapse", ln)]
    if enabled:  # read at every logging step from step 2, and at the 3 validations
        assert [v for _, v in tb["alarm/collapse"]] == [0.0] * (11 + 3)
    else:
        assert "alarm/collapse" not in tb


def test_a_damaged_alarm_state_in_a_checkpoint_is_one_line_naming_it(tmp_path, capsys):
    """A resume whose checkpoint holds `previous_units: "abc"` stopped with int()'s
    ValueError: it is refused as any damaged checkpoint is, and nothing is written in its
    place (no on_exception.ckpt)."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    code, err = train_main(fit_args(run, cache), capsys)
    assert code == 0, err
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    for bad in ("abc", -1):
        ckpt["callbacks"]["CollapseAlarm"]["previous_units"] = bad
        torch.save(ckpt, last)
        resume = fit_args(run, cache, "--ckpt_path", "last", "--trainer.max_steps", "3")
        code, err = train_main(resume, capsys)
        assert code == 2 and not [ln for ln in err if "Traceback" in ln], err
        assert err[-1] == (
            f"error: checkpoint {last}: the collapse alarm's state has previous_units {bad!r}, "
            "not a count of active units (damaged or not written by vat)"
        )
        assert sorted(p.name for p in last.parent.iterdir()) == [
            "best-step0000002.ckpt",
            "last.ckpt",
        ]
