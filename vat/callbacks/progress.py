"""A progress bar counting optimizer steps towards max_steps across epochs, on stderr
(Lightning's reads "Epoch 0/-2" for step-budgeted runs)."""

from __future__ import annotations

import sys
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm


class StepProgressBar(TQDMProgressBar):
    """`training: 120/2000 [01:02<16:12, 1.9step/s, loss=5.12, kl=3.41 nats/tok, tok/s=9,870]`."""

    def init_train_tqdm(self) -> Tqdm:
        total = self._budget(self.trainer) if self._trainer is not None else None
        if total is None:  # no step budget: Lightning's epoch bar
            return self._stderr_bar(self.train_description, smoothing=0)
        return self._stderr_bar("training", total=total, unit="step", smoothing=0)

    def init_sanity_tqdm(self):  # validation draws no bar: its results show in the postfix
        return Tqdm(disable=True)

    init_validation_tqdm = init_sanity_tqdm

    def init_test_tqdm(self) -> Tqdm:
        return self._stderr_bar("Testing")

    def _stderr_bar(self, desc: str, **kwargs: Any) -> Tqdm:
        return Tqdm(
            desc=desc,
            position=(2 * self.process_position),
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stderr,
            bar_format=self.BAR_FORMAT,
            **kwargs,
        )

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        logged = trainer.callback_metrics
        kl, rate = logged.get("train/kl"), logged.get("train/tokens_per_s")
        if kl is not None:
            items["kl"] = f"{float(kl):.3g} nats/tok"
        if rate is not None:
            items["tok/s"] = f"{float(rate):,.0f}"
        return items

    @staticmethod
    def _budget(trainer: pl.Trainer) -> int | None:
        steps = trainer.max_steps
        return steps if steps is not None and steps > 0 else None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        bar = self.train_progress_bar
        if self._budget(trainer) is not None and not bar.disable and trainer.global_step:
            # a resume's earlier steps are tqdm's `initial`, so that steps/s and the time
            # left count only the steps run in this process
            bar.initial = bar.n = bar.last_print_n = trainer.global_step
            bar.start_t = bar.last_print_t = bar._time()
            bar.refresh()

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if self._budget(trainer) is None:
            return super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        if bar.n != trainer.global_step:  # a later epoch (or a resume): no second line
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
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            if n < total:  # the last step is drawn once, when the bar closes
                bar.refresh()  # one write per update (set_postfix would write a second one)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._budget(trainer) is None:
            return super().on_validation_end(trainer, pl_module)
        self.val_progress_bar.close()
        self.reset_dataloader_idx_tracker()
        if self._train_progress_bar is not None and trainer.state.fn == "fit":
            # the validation numbers show at the next update (a log gets no extra line)
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._budget(trainer) is None:
            return super().on_train_epoch_end(trainer, pl_module)
        if not self.train_progress_bar.disable:  # drawn at the next update or at the end
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
