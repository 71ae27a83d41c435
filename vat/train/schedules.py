"""Schedules over training progress: the KL weight w of the paper's eq. 5 and Noam's rate.

Progress is counted in steps, sentences or tokens (`unit`), so a schedule means the same
thing whatever the batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from vat.errors import check, check_count, finite

ScheduleName = Literal["logistic", "constant", "linear", "cyclical"]
Unit = Literal["steps", "sentences", "tokens"]
UNITS = ("steps", "sentences", "tokens")


def check_unit(value, option: str) -> None:
    """`check` that `value` names a progress unit (UNITS)."""
    check(value in UNITS, option, "steps, sentences or tokens", value)


@dataclass
class KLSchedule:
    """The KL weight w(progress) of the paper's eq. 5, times a constant `beta`."""

    kind: ScheduleName = "logistic"
    """logistic (the paper), constant, linear, or cyclical (Fu et al. 2019)."""
    warmup_steps: int = 50_000
    """W: progress until the weight reaches (1 - w0) (logistic) or 1 (linear), counted in
    `unit`. Paper: 50,000 steps of 128 sentences, i.e. 6.4 million sentences."""
    initial_weight: float = 0.00025
    """w0 = w(0) for logistic and linear; the weight of the constant schedule. Paper: 0.00025."""
    beta: float = 1.0
    """Constant multiplier of the schedule (beta-VAE style, beta < 1 weakens the KL)."""
    cycle_steps: int = 10_000
    """cyclical: length of one cycle, counted in `unit`."""
    cycle_ramp: float = 0.5
    """cyclical: fraction of each cycle spent ramping linearly from 0 to 1 (then held at 1)."""
    unit: Unit = "steps"
    """What `warmup_steps` and `cycle_steps` count: optimiser steps, or sentences or non-pad
    tokens seen (summed over DDP ranks). Sentences or tokens keep the schedule's meaning when
    the batch size changes; steps keep how many updates the decoder gets before the weight
    rises. At large batches a W in sentences is few updates, and a weight that rises before
    the decoder has learned collapses the posterior: so a schedule in sentences needs W large
    in updates too, or use `target_kl`, which cannot collapse."""

    def __post_init__(self) -> None:
        o = "model.loss.kl_schedule"
        check(
            self.kind in ("logistic", "constant", "linear", "cyclical"),
            f"{o}.kind",
            "logistic, constant, linear or cyclical",
            self.kind,
        )
        check_unit(self.unit, f"{o}.unit")
        check_count(self.warmup_steps, f"{o}.warmup_steps")
        check_count(self.cycle_steps, f"{o}.cycle_steps")
        if self.kind == "logistic":
            check(
                finite(self.initial_weight) and 0 < self.initial_weight < 0.5,
                f"{o}.initial_weight",
                "in (0, 0.5) for the logistic schedule",
                self.initial_weight,
            )
        else:
            check(
                finite(self.initial_weight) and self.initial_weight >= 0,
                f"{o}.initial_weight",
                "finite and >= 0",
                self.initial_weight,
            )
        check(finite(self.beta) and self.beta >= 0, f"{o}.beta", "finite and >= 0", self.beta)
        check(
            finite(self.cycle_ramp) and 0 < self.cycle_ramp <= 1,
            f"{o}.cycle_ramp",
            "in (0, 1]",
            self.cycle_ramp,
        )

    def __call__(self, progress: int | float | torch.Tensor) -> float | torch.Tensor:
        return self.beta * self.weight(progress)

    def weight(self, progress: int | float | torch.Tensor) -> float | torch.Tensor:
        """w(progress) before beta; `progress` in `unit`. A tensor in gives a tensor out, on
        its device, so a schedule in sentences or tokens never reads a counter on the host."""
        if isinstance(progress, torch.Tensor):
            return self._weight_tensor(progress.double())
        W, w0 = self.warmup_steps, self.initial_weight
        if self.kind == "constant":
            return w0
        if self.kind == "logistic":
            x = -self._logistic_k() * (progress - W / 2)
            return 1.0 / (1.0 + math.exp(x)) if x < 700 else 0.0
        if self.kind == "linear":
            return min(1.0, w0 + (1.0 - w0) * progress / W)
        # cyclical (Fu et al. 2019): ramp 0 -> 1 over the first `cycle_ramp` of each cycle.
        pos = (progress % self.cycle_steps) / self.cycle_steps
        return min(1.0, pos / self.cycle_ramp)

    def _logistic_k(self) -> float:
        # Our choice where the paper is silent: w(step) = 1 / (1 + exp(-k (step - W/2))), with k
        # chosen so that w(0) = w0, i.e. k = 2 ln((1 - w0) / w0) / W; then w(W) = 1 - w0.
        w0 = self.initial_weight
        return 2.0 * math.log((1.0 - w0) / w0) / self.warmup_steps

    def _weight_tensor(self, p: torch.Tensor) -> torch.Tensor:
        W, w0 = self.warmup_steps, self.initial_weight
        if self.kind == "constant":
            return torch.full_like(p, w0)
        if self.kind == "logistic":
            return torch.sigmoid(self._logistic_k() * (p - W / 2))
        if self.kind == "linear":
            return (w0 + (1.0 - w0) * p / W).clamp(max=1.0)
        pos = torch.remainder(p, self.cycle_steps) / self.cycle_steps
        return (pos / self.cycle_ramp).clamp(max=1.0)


def noam_lr(step, d_model: int, warmup_steps: int, scale: float = 1.0):
    """Vaswani et al. (2017) eq. 3: lr = scale * d^-0.5 * min(step^-0.5, step * warmup^-1.5).

    `step` counts from 1 (step 0 is mapped to 1 so the first update is not at lr 0). It may
    be a tensor (progress in sentences or tokens, on the device): then so is the result.
    The peak, at step = warmup, is scale * d^-0.5 * warmup^-0.5.
    """
    if isinstance(step, torch.Tensor):
        step = step.double().clamp_min(1.0)
        return scale * d_model**-0.5 * torch.minimum(step.rsqrt(), step * warmup_steps**-1.5)
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
