"""When a training step logs, the scalars it logs, and the token throughput."""

from __future__ import annotations

import time

import torch


def logs_now(trainer, global_step: int) -> bool:
    return bool(trainer._logger_connector.should_update_logs)


def train_scalars(out, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | float]:
    return {
        "train/loss": out.loss,
        "train/nll": out.nll,
        "train/ppl": out.nll.exp(),
        "train/kl": out.kl,
        "train/kl_weight": out.kl_weight,
        "train/kl_weighted": out.kl_weight * out.kl,
        "train/nonpad_frac": out.ntokens / batch["src"].numel(),
    }


def host_scalars(scalars: dict[str, torch.Tensor | float], reduce=None) -> dict[str, torch.Tensor]:
    """The scalars as 0-d host tensors, the device ones copied in one transfer (one sync)."""
    on_device = {k: v for k, v in scalars.items() if isinstance(v, torch.Tensor)}
    host = {}
    if on_device:
        stacked = torch.stack([v.detach().double() for v in on_device.values()])  # (n,)
        if reduce is not None:
            stacked = reduce(stacked)
        values = stacked.cpu().unbind()
        host = {k: x.to(v.dtype) for (k, v), x in zip(on_device.items(), values, strict=True)}
    default = torch.get_default_dtype()
    return {k: host[k] if k in host else torch.tensor(v, dtype=default) for k, v in scalars.items()}


def matmul_flops_per_token(model: torch.nn.Module) -> float:
    """6 N training FLOPs per token (Kaplan et al. 2020), N the nn.Linear weights (no attention)."""
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
        now, tokens = time.perf_counter(), tokens.clone()
        rate = None
        if self._last is not None:  # logging steps wait for the device: the interval is whole
            rate = (tokens - self._last[1]).double() / max(now - self._last[0], 1e-9)
        self._last = (now, tokens)
        return rate
