"""Ctrl-C and SIGTERM stop training after the step under way and save last.ckpt there, so
`--ckpt_path last` continues bitwise; a second signal stops at once and saves nothing."""

from __future__ import annotations

import copy
import signal
import sys
import threading

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vat.train.checkpointing import FinalLastCheckpoint

_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_ANOTHER = "a signal to another process"
EXIT_CODES = {"Ctrl-C": 130, "SIGTERM": 143, _ANOTHER: 130}  # 128 + the signal


class StopOnSignal(Callback):
    """The first SIGINT or SIGTERM: stop after this step, save last.ckpt; `stopped` names the
    signal once saved (`vat train` exits with its code). Under DDP the processes agree at
    logging steps, where they sync anyway."""

    def __init__(self) -> None:
        self.requested: str | None = None  # "Ctrl-C" or "SIGTERM", once one arrived
        self.stopping = False  # the stop was handed to Lightning (at a whole step)
        self.stopped: str | None = None  # the stop was saved
        self._previous: dict[int, object] = {}
        self._loops: tuple[dict, int] | None = None  # the fit loop's state at the stop step's end
        self._saving = False

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for s in _NAMES:
            previous = signal.getsignal(s)
            if previous is signal.SIG_IGN:
                continue  # ignored by whoever started us (a background job): stays ignored
            self._previous[s] = previous
            signal.signal(s, self._handle)

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.requested is None:
            self.requested = _NAMES[signum]
            print(
                f"\nvat: {self.requested}: stopping at the end of a step, with last.ckpt saved "
                f"there (Ctrl-C again: stop at once, without saving)",
                file=sys.stderr,
                flush=True,
            )
            return
        self._restore()
        raise KeyboardInterrupt  # the second signal: at once

    def on_train_start(self, trainer, pl_module) -> None:
        self.requested, self.stopping, self.stopped = None, False, None
        self._loops, self._saving = None, False
        self._install()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.stopping or not _at_optimizer_step(trainer) or not self._agreed(trainer):
            return
        self.stopping = True
        self.requested = self.requested or _ANOTHER  # under DDP: a signal to another process
        # the loops at the step's end, the state Lightning resumes from (as its
        # every_n_train_steps checkpoints), whatever the rest of the step does before the stop
        self._loops = copy.deepcopy(trainer.fit_loop.state_dict()), trainer.current_epoch
        _stop_after_this_step(trainer, True)

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.stopping and trainer.state.fn == "fit":
            # the step's validation runs whole (the SIGTERM flag would cut it after a batch)
            _stop_after_this_step(trainer, False)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.stopping and trainer.state.fn == "fit" and not trainer.sanity_checking:
            _stop_after_this_step(trainer, True)

    def _agreed(self, trainer) -> bool:
        if trainer.world_size == 1:
            return self.requested is not None
        if trainer.global_step % max(1, trainer.log_every_n_steps):
            return False
        return bool(trainer.strategy.reduce_boolean_decision(self.requested is not None, all=False))

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()
        if not (self.stopping and isinstance(exception, SIGTERMException)):
            return
        step = trainer.global_step
        last = [c for c in trainer.checkpoint_callbacks if isinstance(c, FinalLastCheckpoint)]
        if not last:
            where = "no checkpoint is written (checkpointing is off)"
        else:
            self._saving = True
            try:
                path = last[0].save_now(trainer)
            finally:
                self._saving = False
            where = f"{path} holds it: resume with the same command plus --ckpt_path last"
        self.stopped = self.requested
        if trainer.is_global_zero:
            print(f"vat: stopped by {self.requested} after step {step}; {where}", file=sys.stderr)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """The stop's save, the loops as at the step's end (Lightning 2.6 resumes wrongly)."""
        if self._saving and self._loops is not None:
            checkpoint["loops"]["fit_loop"], checkpoint["epoch"] = copy.deepcopy(self._loops)

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()
        if self.requested is not None and not self.stopping:
            # the signal came after the last step had ended: the run ends whole, and the
            # command still exits as a stopped one, so that whoever sent it knows
            self.stopped = self.requested
            if trainer.is_global_zero:
                print(f"vat: stopped by {self.requested} at the run's last step "
                      f"({trainer.global_step})", file=sys.stderr)  # fmt: skip

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()


def _at_optimizer_step(trainer) -> bool:
    """True at a batch that ended with an optimizer step (no accumulated gradients)."""
    return (
        trainer.accumulate_grad_batches == 1 or not trainer.fit_loop.epoch_loop._should_accumulate()
    )


def _stop_after_this_step(trainer, stop: bool) -> None:
    """Raise or lower Lightning's SIGTERM flag (private: tests/test_resume.py fails if it moves)."""
    trainer._signal_connector.received_sigterm = stop
