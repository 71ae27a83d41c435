"""Helpers of the training system's step logging (vat.module): when a step logs, the
scalars it logs, and the token throughput between logging steps."""

from __future__ import annotations

import time

import torch


def logs_now(trainer, global_step: int) -> bool:
    """Whether this training step logs (Lightning's own decision where it exposes one)."""
    connector = getattr(trainer, "_logger_connector", None)
    if connector is not None:
        return bool(connector.should_update_logs)
    return (global_step + 1) % max(trainer.log_every_n_steps, 1) == 0


def train_scalars(out, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | float]:
    """The per-step training scalars of a `vat.module.StepOutput`."""
    return {
        "train/loss": out.loss,
        "train/nll": out.nll,
        "train/ppl": out.nll.exp(),
        "train/kl": out.kl,
        "train/kl_weight": out.kl_weight,
        "train/kl_weighted": out.kl_weight * out.kl,
        "train/nonpad_frac": out.ntokens / batch["src"].numel(),
    }


class TokenRate:
    """Tokens per second between two logging steps."""

    def __init__(self) -> None:
        self._last: tuple[float, torch.Tensor] | None = None  # (time, tokens seen)

    def update(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """The rate since the previous call (None at the first), given the tokens seen."""
        now, tokens = time.perf_counter(), tokens.clone()
        rate = None
        if self._last is not None:
            # Tokens (all ranks) between two logging steps over the host time between them: the
            # device is waited for at every logging step, so the interval is measured in full.
            rate = (tokens - self._last[1]).double() / max(now - self._last[0], 1e-9)
        self._last = (now, tokens)
        return rate
