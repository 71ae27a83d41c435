"""A posterior-collapse alarm: one `vat:` warning, an `alarm/collapse` scalar and a text entry
when the KL falls far below its target (or near 0) or the active units halve."""

from __future__ import annotations

import logging
import math
import sys
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_only
from tqdm import tqdm

from vat.callbacks.base import markdown_table, tensorboard_writer
from vat.errors import CheckpointError
from vat.geometry.collapse import ACTIVE_UNIT_THRESHOLD
from vat.train.step_logging import logs_now

WARN = logging.WARNING
RECOVERY_FACTOR = 2.0  # a low KL reading clears only at this multiple of its threshold


def rate_target(target_kl: float | None, free_bits: float, latent_dims: int) -> float | None:
    """The rate a run holds: target_kl, else free bits x latent dimensions, else None."""
    if target_kl is not None:
        return float(target_kl)
    if free_bits > 0:
        return float(free_bits) * latent_dims
    return None


def kl_threshold(target: float | None, below_target: float, min_kl: float) -> float:
    return below_target * target if target is not None else min_kl


def kl_is_low(kl: float, threshold: float, was_low: bool) -> bool:
    """Low below the threshold; once low, clear only at RECOVERY_FACTOR times it."""
    return kl < (threshold * RECOVERY_FACTOR if was_low else threshold)


def units_dropped(now: int, before: int | None, fraction: float) -> bool:
    return before is not None and before > 0 and now < fraction * before


def mu_moment_sums(
    mu: torch.Tensor,  # (B, T, d)
    mask: torch.Tensor,  # (B, T) bool: real tokens
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sum mu, sum mu^2 over the real tokens and their count, in float64 (float32 on MPS)."""
    dtype = torch.float32 if mu.device.type == "mps" else torch.float64
    m = mask.to(dtype)[..., None]  # (B, T, 1)
    x = mu.detach().to(dtype)  # (B, T, d)
    return (x * m).sum((0, 1)), (x * x * m).sum((0, 1)), m.sum()


def variances_from_sums(s1: torch.Tensor, s2: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    n = n.clamp_min(2.0)
    return ((s2 - s1 * s1 / n) / (n - 1)).clamp_min(0.0)


def _finite(value: Any) -> float | None:
    """A logged KL as a float, or None when missing or not finite (a NaN would clear the alarm)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@rank_zero_only
def _say(text: str, level: int = logging.INFO) -> None:
    """A line on Lightning's logger (not warnings.warn, which filters can hide), bar cleared."""
    with tqdm.external_write_mode(file=sys.stderr):
        logging.getLogger("lightning.pytorch.utilities.rank_zero").log(level, text)


class CollapseAlarm(Callback):
    """Reads the target from the VAT system (`loss_cfg`, `arch`) at setup. It judges `train/kl`
    at logging steps and `val/kl` and the active units (Burda et al. 2016) at validation ends,
    each signal on its own, says so once per episode and `cleared` when all are back.

    Args:
        below_target: A rate under this fraction of its target is a collapse (0.1).
        min_kl: Without a target, a KL under this many nats per token is one (0.05).
        units_fraction: Active units under this fraction of the previous validation's (0.5).
        warmup_steps: Steps not judged at the start (50).
    """

    def __init__(
        self,
        below_target: float = 0.1,
        min_kl: float = 0.05,
        units_fraction: float = 0.5,
        warmup_steps: int = 50,
    ) -> None:
        self.below_target, self.min_kl = below_target, min_kl
        self.units_fraction, self.warmup_steps = units_fraction, warmup_steps
        self.target: float | None = None
        self.target_name = ""
        self.previous_units: int | None = None  # in checkpoints: a drop across a resume
        self._low = {"train KL": False, "val KL": False, "units": False}
        self._alarm_step: int | None = None  # the step the episode under way began
        self._sums: list[torch.Tensor] | None = None
        self._mask: torch.Tensor | None = None
        self._hook: Any = None
        self._checkpoint: str | None = None  # the checkpoint restored from, for its errors

    def state_dict(self) -> dict[str, Any]:
        return {"previous_units": self.previous_units}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, ckpt: dict) -> None:
        self._checkpoint = trainer.ckpt_path  # Lightning calls load_state_dict next

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # a damaged state is refused as vat refuses a damaged checkpoint: one line naming it
        units = state_dict.get("previous_units")
        if units is not None and (type(units) is not int or units < 0):  # (a bool is no count)
            raise CheckpointError(
                f"checkpoint {self._checkpoint or '(unnamed)'}: the collapse alarm's state has "
                f"previous_units {units!r:.40}, not a count of active units (damaged or "
                "not written by vat)"
            )
        self.previous_units = units

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        loss, arch = getattr(pl_module, "loss_cfg", None), getattr(pl_module, "arch", None)
        if loss is None or arch is None:
            return
        self.target = rate_target(loss.target_kl, loss.free_bits, arch.d_model)
        if loss.target_kl is not None:
            self.target_name = f"its target {loss.target_kl:g} (model.loss.target_kl)"
        elif loss.free_bits > 0:
            self.target_name = (
                f"its floor {self.target:g} (model.loss.free_bits {loss.free_bits:g} x "
                f"{arch.d_model} latent dimensions)"
            )

    @property
    def threshold(self) -> float:
        return kl_threshold(self.target, self.below_target, self.min_kl)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args) -> None:
        step = trainer.global_step
        if step < self.warmup_steps or not logs_now(trainer, step):
            return  # host checks only: no device value is read between logging steps
        kl = _finite(trainer.callback_metrics.get("train/kl"))
        if kl is not None:
            self._judge(trainer, "train KL", kl, None)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        head = getattr(getattr(pl_module, "model", None), "mu_head", None)
        if trainer.sanity_checking or head is None:
            return
        self._sums = None
        self._hook = head.register_forward_hook(self._add_mu)

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, *args
    ) -> None:
        if self._hook is not None and isinstance(batch, dict) and "src" in batch:
            self._mask = batch["src"] != pl_module.model.config.pad_id  # (B, T)

    def on_validation_batch_end(self, trainer: Trainer, *args) -> None:
        self._mask = None  # other callbacks' encodes (at the epoch's end) are not validation's

    def _add_mu(self, module: torch.nn.Module, inputs: Any, mu: torch.Tensor) -> None:
        mask = self._mask
        if mask is None or mu.dim() != 3 or tuple(mu.shape[:2]) != tuple(mask.shape):
            return
        sums = mu_moment_sums(mu, mask)
        self._sums = list(sums) if self._sums is None else [a + b for a, b in zip(self._sums, sums)]

    def _remove_hook(self) -> None:
        if self._hook is not None:
            self._hook.remove()
        self._hook, self._mask = None, None

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._remove_hook()
        if trainer.sanity_checking:
            return
        units, dims = self._active_units()
        drop = None
        if units is not None:
            if units_dropped(units, self.previous_units, self.units_fraction):
                drop = (
                    f"active units {units} of {dims}, fewer than {self.units_fraction:.0%} of "
                    f"the previous validation's {self.previous_units} (Var over tokens of mu > "
                    f"{ACTIVE_UNIT_THRESHOLD}, Burda et al. 2016)"
                )
            self.previous_units = units
        kl = _finite(trainer.callback_metrics.get("val/kl"))
        if trainer.global_step >= self.warmup_steps and (kl is not None or units is not None):
            self._judge(trainer, "val KL", kl, drop)

    def _active_units(self) -> tuple[int | None, int]:
        if self._sums is None:
            return None, 0
        s1, s2, n = self._sums
        self._sums = None
        variances = variances_from_sums(s1, s2, n)
        if float(n) < 2 or not bool(variances.isfinite().all()):  # NaN means: no count
            return None, 0
        return int((variances > ACTIVE_UNIT_THRESHOLD).sum()), len(s1)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._remove_hook()

    def _judge(self, trainer: Trainer, signal: str, kl: float | None, drop: str | None) -> None:
        """One reading of `signal`: the alarm starts, holds or clears. The train KL (dropout on)
        reads several times the val KL near a collapse, so one must not clear the other."""
        reading = "" if kl is None else f"{signal} {kl:.4g} nats/token"
        reasons = []
        if kl is not None:
            self._low[signal] = kl_is_low(kl, self.threshold, self._low[signal])
            if self._low[signal]:
                reasons.append(f"{reading}, {self._why_low()}")
        if signal == "val KL":  # the units are counted at validation only
            self._low["units"] = drop is not None
            if drop is not None:
                reasons.append(drop if not reading or reasons else f"{drop}; {reading}")
        step = trainer.global_step
        if reasons and self._alarm_step is None:
            self._alarm_step = step
            text = f"posterior collapse at step {step:,}: {'; '.join(reasons)}"
            _say(f"vat: warning: {text} (collapse alarm; alarm/collapse in TensorBoard)", WARN)
            self._log(trainer, 1.0, text)
        elif self._alarm_step is not None and not any(self._low.values()):
            text = f"the collapse alarm of step {self._alarm_step:,} cleared at step {step:,}"
            text += f": {reading}" if reading else ""
            self._alarm_step = None
            _say(f"vat: {text}")
            self._log(trainer, 0.0, text)
        else:
            self._log(trainer, 0.0 if self._alarm_step is None else 1.0, None)

    def _why_low(self) -> str:
        if self.target is not None:
            return f"below {self.below_target:.0%} of {self.target_name}"
        return f"below {self.min_kl:g} in a run without a target (the decoder ignores z)"

    @rank_zero_only
    def _log(self, trainer: Trainer, value: float, text: str | None) -> None:
        # the step Lightning logs train/kl and val/kl at, so that the curves line up
        step = trainer.fit_loop.epoch_loop._batches_that_stepped
        for logger in trainer.loggers:
            logger.log_metrics({"alarm/collapse": value}, step=step)
        writer = tensorboard_writer(trainer)
        if text is not None and writer is not None:
            row = (f"step {trainer.global_step:,}", text)
            writer.add_text("alarm/collapse", markdown_table([row]), step)
