"""Schedules over training progress (steps, sentences or tokens): the KL weight w of the
paper's eq. 5 and Noam's learning rate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from vat.errors import check, check_count, finite

ScheduleName = Literal["logistic", "constant", "linear", "cyclical"]
Unit = Literal["steps", "sentences", "tokens"]
UNITS = ("steps", "sentences", "tokens")
KINDS = ("logistic", "constant", "linear", "cyclical")


def check_unit(value, option: str) -> None:
    check(value in UNITS, option, "steps, sentences or tokens", value)


def check_fields(config, prefix: str, rules) -> None:
    """The first field failing its (field, test, expected) rule is a VatError naming it."""
    for name, ok, expected in rules:
        value = getattr(config, name)
        check(ok(value), f"{prefix}.{name}", expected, value)


@dataclass
class KLSchedule:
    """The KL weight w(progress) of the paper's eq. 5, times a constant `beta`."""

    kind: ScheduleName = "logistic"
    """logistic (the paper), constant, linear, or cyclical (Fu et al. 2019)."""
    warmup_steps: int = 50_000
    """W: progress until the weight reaches (1 - w0) (logistic) or 1 (linear). Paper: 50,000
    steps of 128 sentences."""
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
    tokens seen, which keep the schedule's meaning across batch sizes."""

    def __post_init__(self) -> None:
        o = "model.loss.kl_schedule"
        check(self.kind in KINDS, f"{o}.kind", "logistic, constant, linear or cyclical", self.kind)
        check_unit(self.unit, f"{o}.unit")
        check_count(self.warmup_steps, f"{o}.warmup_steps")
        check_count(self.cycle_steps, f"{o}.cycle_steps")
        logistic, w0, ramp = self.kind == "logistic", self.initial_weight, self.cycle_ramp
        check(
            finite(w0) and (0 < w0 < 0.5 if logistic else w0 >= 0),
            f"{o}.initial_weight",
            "in (0, 0.5) for the logistic schedule" if logistic else "finite and >= 0",
            w0,
        )
        check(finite(self.beta) and self.beta >= 0, f"{o}.beta", "finite and >= 0", self.beta)
        check(finite(ramp) and 0 < ramp <= 1, f"{o}.cycle_ramp", "in (0, 1]", ramp)

    def __call__(self, progress: int | float | torch.Tensor) -> float | torch.Tensor:
        return self.beta * self.weight(progress)

    def weight(self, progress: int | float | torch.Tensor) -> float | torch.Tensor:
        """w(progress) before beta; a tensor in gives a tensor out (no host read)."""
        tensor = isinstance(progress, torch.Tensor)
        p = progress.double() if tensor else progress
        W, w0 = self.warmup_steps, self.initial_weight
        if self.kind == "constant":
            return torch.full_like(p, w0) if tensor else w0
        if self.kind == "logistic":
            if tensor:
                return torch.sigmoid(self._logistic_k() * (p - W / 2))
            x = -self._logistic_k() * (p - W / 2)
            return 1.0 / (1.0 + math.exp(x)) if x < 700 else 0.0
        if self.kind == "linear":
            w = w0 + (1.0 - w0) * p / W
        else:  # cyclical (Fu et al. 2019): ramp 0 -> 1 over the first `cycle_ramp` of each cycle
            w = (p % self.cycle_steps) / self.cycle_steps / self.cycle_ramp
        return w.clamp(max=1.0) if tensor else min(1.0, w)

    def _logistic_k(self) -> float:
        # where the paper is silent: k so that w(0) = w0, hence w(W) = 1 - w0
        w0 = self.initial_weight
        return 2.0 * math.log((1.0 - w0) / w0) / self.warmup_steps


def noam_lr(step, d_model: int, warmup_steps: int, scale: float = 1.0):
    """Vaswani et al. (2017) eq. 3, `step` from 1; a tensor step gives a tensor."""
    if isinstance(step, torch.Tensor):
        step = step.double().clamp_min(1.0)
        return scale * d_model**-0.5 * torch.minimum(step.rsqrt(), step * warmup_steps**-1.5)
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)
