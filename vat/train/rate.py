"""Rate control: a PI controller on log(KL weight) that holds the KL at `model.loss.target_kl`
(after ControlVAE, Shao et al. 2020), updated on the device without a host sync."""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn


class KLController(nn.Module):
    """PI controller on log(weight): e = clamp(log(KL / target)), I += e (clamped to the
    output's range: no windup), log w = log w_init + kp e + ki I, clamped. With kp = 0 it is
    dual ascent; the clipped log-ratio keeps an untrained encoder's large KL from driving w
    to its clamp (RESULTS.md, "The rate controller's start")."""

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
        names = ("kp", "ki", "initial", "min", "max", "error", "max_error")  # __init__'s order
        return cls(loss.target_kl, *(getattr(loss, f"kl_control_{n}") for n in names))

    @property
    def weight(self) -> torch.Tensor:
        return self.log_weight.exp()

    @torch.no_grad()
    def update(self, kl: torch.Tensor) -> None:
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
