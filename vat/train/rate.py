"""Rate control: hold the KL at a target number of nats per token (`model.loss.target_kl`).

A PI controller on log(weight), after ControlVAE (Shao et al. 2020, eq. 6-7):

    e_t     = clamp(log(KL_t / target), -e_max, e_max)   error (dimensionless)
    I_t     = clamp(I_{t-1} + e_t, I_min, I_max)          integral, clamped (anti-windup)
    log w_t = clamp(log w_init + kp * e_t + ki * I_t, log w_min, log w_max)

With kp = 0 this is dual ascent on the multiplier of KL = target, w <- w * exp(ki * e); in
log space one gain serves weights from 1e-4 to 10, and the integral's clamp is the output's
range, so it never winds up beyond what the output can express. The error is a clipped
log-ratio because the relative error (KL - target) / target, which it equals near the
target, drives the weight to its clamp within steps when an untrained encoder's KL is tens
of times the target (RESULTS.md, "The rate controller's start"); `kl_control_error:
relative` with `kl_control_max_error: null` is that earlier controller. Everything is a
tensor update on the device: no host sync per step.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn


class KLController(nn.Module):
    """PI controller of the KL weight; its state is two 0-d float64 buffers on the device."""

    def __init__(
        self,
        target: float,
        kp: float,
        ki: float,
        initial: float,
        w_min: float,
        w_max: float,
        error_kind: Literal["log_ratio", "relative"] = "log_ratio",
        max_error: float | None = 1.0,
    ) -> None:
        super().__init__()
        self.target, self.kp, self.ki = target, kp, ki
        self.error_kind, self.max_error = error_kind, max_error
        self.log_w_init, self.log_w_min, self.log_w_max = map(math.log, (initial, w_min, w_max))
        # Not in the state_dict (which holds weights only): saved with the training state.
        self.register_buffer("integral", torch.zeros((), dtype=torch.float64), persistent=False)
        self.register_buffer(
            "log_weight", torch.tensor(self.log_w_init, dtype=torch.float64), persistent=False
        )

    @classmethod
    def from_config(cls, loss) -> KLController:
        """From a `vat.train.config.LossConfig` with `target_kl` set."""
        return cls(
            loss.target_kl,
            loss.kl_control_kp,
            loss.kl_control_ki,
            loss.kl_control_initial,
            loss.kl_control_min,
            loss.kl_control_max,
            loss.kl_control_error,
            loss.kl_control_max_error,
        )

    @property
    def weight(self) -> torch.Tensor:
        """The current KL weight (0-d, float64, on the device)."""
        return self.log_weight.exp()

    @torch.no_grad()
    def update(self, kl: torch.Tensor) -> None:
        """Feed the measured rate (nats per token, 0-d tensor); updates the weight in place."""
        kl = kl.detach()
        if self.error_kind == "log_ratio":
            error = torch.log(kl.double() / self.target)
        else:
            error = (kl.double() - self.target) / self.target
        if self.max_error is not None:
            error = error.clamp(-self.max_error, self.max_error)  # KL = 0: -max_error
        integral = self.integral
        if self.ki > 0:  # the integral's reach is the output range: ki * I in [min, max] - init
            integral = (integral + error).clamp(
                (self.log_w_min - self.log_w_init) / self.ki,
                (self.log_w_max - self.log_w_init) / self.ki,
            )
        log_w = (self.log_w_init + self.kp * error + self.ki * integral).clamp(
            self.log_w_min, self.log_w_max
        )
        # A non-finite rate (a diverged step, stopped by the non-finite guard) leaves the state.
        ok = torch.isfinite(kl)
        self.integral.copy_(torch.where(ok, integral, self.integral))
        self.log_weight.copy_(torch.where(ok, log_w, self.log_weight))

    def state(self) -> dict[str, torch.Tensor]:
        return {"integral": self.integral.cpu(), "log_weight": self.log_weight.cpu()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.integral.copy_(state["integral"])
        self.log_weight.copy_(state["log_weight"])
