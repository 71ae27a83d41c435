"""Test-only callbacks that simulate failures inside a real training subprocess."""

import os
import signal

import lightning as L
import torch


class KillAtStep(L.Callback):
    """SIGKILL this process at the end of training step `step` (no clean-up of any kind).

    Lightning runs ModelCheckpoint after other callbacks, so the kill comes before that
    step's checkpoint: the run loses work back to its previous `last.ckpt`, like a real crash.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class PoisonAtStep(L.Callback):
    """Make the batch at `step` produce a non-finite loss (an inf in the encoder's input scale)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.mu_head.bias.fill_(float("nan"))


class PoisonRankAtStep(PoisonAtStep):
    """PoisonAtStep on one DDP rank only: the others must stop too, not hang."""

    def __init__(self, step: int, rank: int = 1) -> None:
        super().__init__(step)
        self.rank = rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank:
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)
