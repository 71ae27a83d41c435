"""Helpers of the training system's step logging (vat.train.system): when a step logs, the
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
    """The per-step training scalars of a `vat.train.system.StepOutput`."""
    return {
        "train/loss": out.loss,
        "train/nll": out.nll,
        "train/ppl": out.nll.exp(),
        "train/kl": out.kl,
        "train/kl_weight": out.kl_weight,
        "train/kl_weighted": out.kl_weight * out.kl,
        "train/nonpad_frac": out.ntokens / batch["src"].numel(),
    }


def matmul_flops_per_token(model: torch.nn.Module) -> float:
    """Training FLOPs per non-pad token of the model's matmuls: 6 N (2 N forward, 4 N
    backward; Kaplan et al. 2020), N = the weights of every nn.Linear, a tied output
    projection counted once. Attention's length-dependent term (12 d T per token and layer)
    is left out: small for d = 128 and sentence lengths, so MFU = model TFLOP/s / the
    device's peak, computed from this, slightly underestimates (bench/ counts it in full)."""
    weights = {
        id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)
    }
    return 6.0 * sum(weights.values())


class TokenRate:
    """Tokens per second between two logging steps, and the model FLOP/s they imply."""

    def __init__(self, flops_per_token: float = 0.0) -> None:
        self.flops_per_token = flops_per_token
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
