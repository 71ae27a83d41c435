"""Training progress counted in optimizer steps of max_steps.

vat budgets runs in steps (`trainer.max_steps`) with max_epochs = -1, for which Lightning's
bar reads "Epoch 0/-2" and restarts at every pass over the data. This bar counts
`trainer.global_step` towards max_steps across epochs instead (one bar for the whole run).
With no step budget it is Lightning's own bar.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar


class StepProgressBar(TQDMProgressBar):
    """`training: 120/2000 steps [...]` with the logged metrics as the postfix."""

    @staticmethod
    def _budget(trainer: pl.Trainer) -> int | None:
        steps = trainer.max_steps
        return steps if steps is not None and steps > 0 else None

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        total = self._budget(trainer)
        if total is None:
            return super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if bar.total != total:  # the first epoch (or a resume): one bar for the whole run
            bar.reset(total=total)
            bar.unit = "step"
            bar.set_description("training")
        bar.n = trainer.global_step
        bar.refresh()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        total = self._budget(trainer)
        if total is None:
            return super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        n = trainer.global_step
        bar = self.train_progress_bar
        if bar is not None and self._should_update(n, total):
            bar.n = n
            bar.set_postfix(self.get_metrics(trainer, pl_module))
            bar.refresh()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._budget(trainer) is None:
            return super().on_train_epoch_end(trainer, pl_module)
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module))
