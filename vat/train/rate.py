"""Rate control: hold the KL at a target number of nats per token (`model.loss.target_kl`).

The KL weight is set by a PI controller acting on log(weight), in the spirit of ControlVAE
(Shao et al. 2020, eq. 6-7), which sets beta by a PI controller on the KL error:

    e_t     = clamp(log(KL_t / target), -e_max, e_max)   error (dimensionless)
    I_t     = clamp(I_{t-1} + e_t, I_min, I_max)          integral, clamped (anti-windup)
    log w_t = clamp(log w_init + kp * e_t + ki * I_t, log w_min, log w_max)

A KL above the target raises the weight; below it, lowers it. With kp = 0 this is dual
ascent on the Lagrange multiplier of the constraint KL = target in log space,
w <- w * exp(ki * e), which keeps the weight positive. Acting on log w makes one gain work
for weights from 1e-4 to 10. The integral clamp is the range of the output clamp, so the
integral never winds up beyond what the output can express.

Why the error is a clipped log-ratio (`kl_control_error: log_ratio`, `kl_control_max_error:
1`): near the target log(KL / target) is the relative error (KL - target) / target, so the
gains mean what they meant; far above it (an untrained encoder's KL is tens of times the
target) the relative error drives the weight to its clamp within steps, while below the
target it is bounded by -1, so the way back is slow and squeezes the posterior meanwhile
(RESULTS.md, "The rate controller's start"). Clipped at +-1, the weight moves at most by
exp(ki) per step either way, so the start moves it only as fast as a KL e times the target
would, and a collapse below target/e is undone as fast as it was made. `relative` with no clip
(`kl_control_max_error: null`) is the earlier controller, kept for comparison.

Everything is a tensor update on the device: no host synchronisation per step.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn


def pi_step(
    integral: torch.Tensor,
    kl: torch.Tensor,
    target: float,
    kp: float,
    ki: float,
    log_w_init: float,
    log_w_min: float,
    log_w_max: float,
    error_kind: Literal["log_ratio", "relative"] = "log_ratio",
    max_error: float | None = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One controller update: (new integral, new log weight). Pure; all scalars (0-d)."""
    error = control_error(kl, target, error_kind, max_error)
    if ki > 0:
        # The integral's reach is bounded by the output range: ki * I in [min, max] - init.
        integral = (integral + error).clamp(
            (log_w_min - log_w_init) / ki, (log_w_max - log_w_init) / ki
        )
    log_w = (log_w_init + kp * error + ki * integral).clamp(log_w_min, log_w_max)
    return integral, log_w


def control_error(
    kl: torch.Tensor,
    target: float,
    error_kind: Literal["log_ratio", "relative"] = "log_ratio",
    max_error: float | None = 1.0,
) -> torch.Tensor:
    """The controller's error for a measured rate (0-d, float64): log(KL / target) or
    (KL - target) / target, clipped to [-max_error, max_error] unless max_error is None.
    A KL of 0 gives -max_error (log-ratio: -inf before the clip)."""
    kl = kl.double()
    if error_kind == "log_ratio":
        error = torch.log(kl / target)
    else:
        error = (kl - target) / target
    if max_error is not None:
        error = error.clamp(-max_error, max_error)
    return error


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
        self.log_w_init, self.log_w_min, self.log_w_max = (
            math.log(initial),
            math.log(w_min),
            math.log(w_max),
        )
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
        integral, log_w = pi_step(
            self.integral,
            kl.detach(),
            self.target,
            self.kp,
            self.ki,
            self.log_w_init,
            self.log_w_min,
            self.log_w_max,
            self.error_kind,
            self.max_error,
        )
        # A non-finite rate (a diverged step, stopped by the non-finite guard) leaves the state.
        ok = torch.isfinite(kl)
        self.integral.copy_(torch.where(ok, integral, self.integral))
        self.log_weight.copy_(torch.where(ok, log_w, self.log_weight))

    def state(self) -> dict[str, torch.Tensor]:
        return {
            "integral": self.integral.detach().cpu(),
            "log_weight": self.log_weight.detach().cpu(),
        }

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.integral.copy_(state["integral"])
        self.log_weight.copy_(state["log_weight"])
