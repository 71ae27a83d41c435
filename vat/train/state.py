"""Training progress and the non-finite guard as device buffers, read on the host only at
logging steps and checkpoint saves (no sync per step)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from vat.train.schedules import UNITS


class TrainState(nn.Module):
    """Progress (steps, sentences, tokens) and the first non-finite step, as device buffers."""

    def __init__(self) -> None:
        super().__init__()
        # Not in the state_dict (weights only): saved in checkpoint["vat_train_state"].
        self.register_buffer("progress", torch.zeros(3, dtype=torch.long), persistent=False)
        # The first bad step's number counted from 1 (0: none), its nll, kl and gradient norm.
        self.register_buffer("fault", torch.zeros(4, dtype=torch.float64), persistent=False)

    def seen(self, unit: str) -> torch.Tensor:
        return self.progress[UNITS.index(unit)]

    @torch.no_grad()
    def count(
        self, mask: torch.Tensor, tokens: torch.Tensor, kl: torch.Tensor, reduce=None
    ) -> torch.Tensor:
        """Add one step's sentences and tokens; the step's mean KL per token over all ranks."""
        if reduce is None:
            # one process: every row holds a sentence, and the KL is already its mean
            self.progress[0].add_(1)
            self.progress[1].add_(mask.shape[0])
            self.progress[2].add_(tokens)
            return kl.detach()
        delta = torch.stack(
            [mask.any(1).sum().double(), tokens.double(), kl.detach().double() * tokens]
        )
        delta = reduce(delta)
        self.progress[0] += 1
        self.progress[1:] += delta[:2].round().long()
        return delta[2] / delta[1].clamp_min(1.0)

    @torch.no_grad()
    def record(self, nll: torch.Tensor, kl: torch.Tensor, grad_norm: torch.Tensor) -> None:
        # (steps, nll, kl, norm), float32: step numbers are exact up to 2**24
        row = torch.stack([self.progress[0], nll, kl, grad_norm])
        # x * 0 is 0 for every finite x and NaN for inf and NaN: one sum tests all four
        bad = (row * 0).sum().ne(0) & self.fault[0].eq(0)
        torch.where(bad, row, self.fault, out=self.fault)

    def read_fault(self) -> tuple[int, bool]:
        """(first bad step on any rank, or -1; whether it was this rank's). One host sync."""
        first = self.fault[:1]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            anywhere = first.clone()
            dist.all_reduce(anywhere, op=dist.ReduceOp.MAX)
            local, first_any = torch.cat([first, anywhere]).tolist()
        else:
            local = first_any = first.item()
        return int(first_any) - 1, local > 0

    def state(self) -> dict[str, torch.Tensor]:
        return {"progress": self.progress.detach().cpu()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.progress.copy_(state["progress"])
