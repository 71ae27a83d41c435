"""Test-only callbacks that simulate failures inside a real training subprocess."""

import os
import signal
import signal as signal_module

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
    bytes, then the process signals itself. With `hard` (a second Ctrl-C, or Python's own
    handler) the KeyboardInterrupt lands inside the write; otherwise vat's handler takes the
    signal as a first Ctrl-C and the write goes on. Saves after the interrupt complete.
    """

    def __init__(self, step: int, hard: bool = True) -> None:
        self.step, self.hard = step, hard

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        import time

        import vat.share.checkpoint

        real_save = torch.save
        if self.hard:  # (a background job may inherit SIGINT ignored; a terminal's is not)
            signal.signal(signal.SIGINT, signal.default_int_handler)

        def interrupted_save(obj, f, *args, **kwargs):
            vat.share.checkpoint.torch = torch  # one Ctrl-C, in this write only
            f.write(b"PK\x03\x04 partial checkpoint")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # a hard interrupt's KeyboardInterrupt is raised here, mid-write
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


class SignalAt(L.Callback):
    """Send this process a real signal (SIGINT by default: a Ctrl-C) during training step
    `step`, at `phase`:

    - "batch_end": when the step has ended (its on_train_batch_end);
    - "mid_step": between the backward pass and the optimizer step of the step;
    - "validation": at the first batch of the validation that step runs.

    `times` signals at once (2: a second Ctrl-C right after the first). Under DDP, `rank`
    names the one process that gets it (`kill -INT PID`), else every process does (a
    terminal's Ctrl-C)."""

    def __init__(
        self,
        step: int,
        phase: str = "batch_end",
        signal: str = "SIGINT",
        times: int = 1,
        rank: int | None = None,
    ):
        self.step, self.phase, self.times, self.rank = step, phase, times, rank
        self.signum = getattr(signal_module, signal)
        self._trainer = None

    def setup(self, trainer, pl_module, stage) -> None:
        self._trainer = trainer

    def _fire(self) -> None:
        if self.rank is not None and self._trainer.global_rank != self.rank:
            return
        for _ in range(self.times):
            os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.phase == "batch_end" and trainer.global_step == self.step:
            self._fire()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.phase == "mid_step" and trainer.global_step == self.step - 1:
            self._fire()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if self.phase == "validation" and trainer.global_step == self.step and batch_idx == 0:
            if not trainer.sanity_checking:
                self._fire()


class SlowSteps(L.Callback):
    """Sleep `seconds` after every training step: a run slow enough for a progress bar's
    steps/s to mean something, or for another process to signal it mid-run."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        import time

        time.sleep(self.seconds)


class RaiseAtStep(L.Callback):
    """Raise a RuntimeError (a bug, not a user error) at the end of training step `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError(f"a failure at step {self.step}")
