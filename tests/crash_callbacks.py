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


class StopAtStep(L.Callback):
    """Ask the trainer to stop after training step `step`, as max_time's Timer does (it sets
    `trainer.should_stop` in on_train_batch_end); a clean stop, mid-epoch."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


class PoisonAtStep(L.Callback):
    """Make the batch at `step` produce a non-finite loss (an inf in the encoder's input scale)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                pl_module.model.mu_head.bias.fill_(float("nan"))


class InterruptDuringSave(L.Callback):
    """Ctrl-C (SIGINT) in the middle of writing the checkpoint of step `step`.

    From that step on, torch.save (as called by vat's atomic checkpoint writer) writes a few
    bytes, then the process signals itself; the KeyboardInterrupt lands inside the write.
    Saves after the interrupt (Lightning ignores SIGINT while shutting down) complete.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        import time

        import vat.share.checkpoint

        real_save = torch.save
        # A background job may inherit SIGINT ignored; a terminal's Ctrl-C is not.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupted_save(obj, f, *args, **kwargs):
            f.write(b"PK\x03\x04 partial checkpoint")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the KeyboardInterrupt is raised here, mid-write
            f.seek(0)
            f.truncate()
            real_save(obj, f, *args, **kwargs)

        vat.share.checkpoint.torch = _TorchWith(interrupted_save)


class _TorchWith:
    """`torch` with another `save` (only vat.share.checkpoint's reference is replaced)."""

    def __init__(self, save) -> None:
        self.save = save

    def __getattr__(self, name):
        return getattr(torch, name)


class ScriptedSTSBSpearman(L.Callback):
    """Logs `val/stsb_spearman` like vat.callbacks.sts.STSBSpearman, with scripted values
    (one per validation), so that a test knows which checkpoint must be the best."""

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)
        self.calls = 0

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        pl_module.log(
            "val/stsb_spearman", float(self.values[min(self.calls, len(self.values) - 1)])
        )
        self.calls += 1


class PoisonRankAtStep(PoisonAtStep):
    """PoisonAtStep on one DDP rank only: the others must stop too, not hang."""

    def __init__(self, step: int, rank: int = 1) -> None:
        super().__init__(step)
        self.rank = rank

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank:
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)


class KillRankAtStep(L.Callback):
    """SIGKILL the DDP process of global rank `rank` at the end of training step `step`: a
    dead peer (an OOM kill, a lost node) while the other ranks go on to the next collective."""

    def __init__(self, rank: int, step: int) -> None:
        self.rank, self.step = rank, step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
