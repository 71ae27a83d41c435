"""Ctrl-C (SIGINT) and SIGTERM stop training where its state is whole, and last.ckpt keeps it.

Lightning turns a Ctrl-C into a KeyboardInterrupt wherever Python happens to be: inside a
forward pass, between the optimizer step and the loop's counters, half-way through a
validation. A checkpoint of that state resumes into a different run than the one
interrupted (docs/FAULTS.md has the demo's figures).

Here the first signal only asks for a stop. Training finishes the step it is in, and the
validation (and epoch end) that step runs, and stops where Lightning stops for SIGTERM: after
the step's last hook and before the next batch is fetched. last.ckpt is written there: the
weights, optimizer, RNG, rate controller and callbacks as they are then, and the loops'
counters as they stood when the step ended (the form Lightning resumes from correctly, see
`on_save_checkpoint`). `--ckpt_path last` then continues bitwise as if nothing had happened
(tests/test_resume.py). A second signal stops at once and saves nothing: last.ckpt then holds
the last whole state, and no half-step is ever offered as a resume point.

SIGTERM (a cluster's time limit, `timeout`, `kill`) is handled like the first Ctrl-C: the
allocation's grace period is spent finishing the step, not lost with it.

Under DDP the processes must stop after the same step: they agree at logging steps
(`log_every_n_steps`, where they synchronise anyway), so a stop comes within that many steps.
"""

from __future__ import annotations

import copy
import signal
import sys
import threading

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_ANOTHER = "a signal to another process"
EXIT_CODES = {"Ctrl-C": 130, "SIGTERM": 143, _ANOTHER: 130}
"""The exit code of a run stopped by each signal (128 + the signal, the shell's convention)."""


class StopOnSignal(Callback):
    """The first SIGINT or SIGTERM during training: stop after this step, save last.ckpt.

    `stopped` names the signal once the stop was saved (`vat train` exits with its code)."""

    def __init__(self) -> None:
        self.requested: str | None = None  # "Ctrl-C" or "SIGTERM", once one arrived
        self.stopping = False  # the stop was handed to Lightning (at a whole step)
        self.stopped: str | None = None  # the stop was saved
        self._previous: dict[int, object] = {}
        self._loops: tuple[dict, int] | None = None  # the fit loop's state at the stop step's end
        self._saving = False

    # -- the signals --------------------------------------------------------------------------
    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for s in _SIGNALS:
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
            self.requested = _NAMES.get(signum, signal.Signals(signum).name)
            print(
                f"\nvat: {self.requested}: stopping at the end of a step, with last.ckpt saved "
                f"there (Ctrl-C again: stop at once, without saving)",
                file=sys.stderr,
                flush=True,
            )
            return
        self._restore()
        raise KeyboardInterrupt  # the second signal: at once

    # -- when to stop -------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self.requested, self.stopping, self.stopped = None, False, None
        self._loops, self._saving = None, False
        self._install()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.stopping or not _at_optimizer_step(trainer) or not self._agreed(trainer):
            return
        self.stopping = True
        self.requested = self.requested or _ANOTHER  # under DDP: a signal to another process
        # The loops as they stand when a step has ended: the state Lightning resumes from at
        # a step's end (its every_n_train_steps checkpoints are taken here), whatever the
        # rest of the step (a validation, an epoch's end) does before the stop.
        self._loops = copy.deepcopy(trainer.fit_loop.state_dict()), trainer.current_epoch
        _stop_after_this_step(trainer, True)

    def on_validation_start(self, trainer, pl_module) -> None:
        if self.stopping and trainer.state.fn == "fit":
            # the validation of this step runs whole (Lightning's SIGTERM flag would cut it
            # after its current batch, and a half validation is not a state to resume from)
            _stop_after_this_step(trainer, False)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.stopping and trainer.state.fn == "fit" and not trainer.sanity_checking:
            _stop_after_this_step(trainer, True)

    def _agreed(self, trainer) -> bool:
        """Whether to stop after this step: at once in one process; under DDP every process
        decides alike, at logging steps (one small all-reduce where they sync anyway)."""
        if trainer.world_size == 1:
            return self.requested is not None
        if trainer.global_step % max(1, trainer.log_every_n_steps):
            return False
        return bool(trainer.strategy.reduce_boolean_decision(self.requested is not None, all=False))

    # -- the stop -----------------------------------------------------------------------------
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()
        if not (self.stopping and isinstance(exception, SIGTERMException)):
            return
        step = trainer.global_step
        last = _last_checkpoint_callback(trainer)
        if last is None:
            where = "no checkpoint is written (checkpointing is off)"
        else:
            self._saving = True
            try:
                path = last.save_now(trainer)
            finally:
                self._saving = False
            where = f"{path} holds it: resume with the same command plus --ckpt_path last"
        self.stopped = self.requested
        if trainer.is_global_zero:
            print(f"vat: stopped by {self.requested} after step {step}; {where}", file=sys.stderr)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """The stop's own save: everything as it is now (weights, optimizer, RNG, the rate
        controller, the callbacks after this step's validation), and the loops as they stood
        at the step's end. Lightning 2.6 resumes wrongly from the loops as they stand at the
        stop itself: after the last batch of an epoch it skips the whole next epoch, and after
        a validation it logs every later point one step late (tests/test_resume.py)."""
        if self._saving and self._loops is not None:
            checkpoint["loops"]["fit_loop"], checkpoint["epoch"] = copy.deepcopy(self._loops)

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()
        if self.requested is not None and not self.stopping:
            # the signal came after the last step had ended (in its validation or checkpoint):
            # the run ends whole where it would have, and the command still exits as a
            # stopped one, so that whoever pressed it (a script at its time limit) knows
            self.stopped = self.requested
            if trainer.is_global_zero:
                print(f"vat: stopped by {self.requested} at the run's last step "
                      f"({trainer.global_step})", file=sys.stderr)  # fmt: skip

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()


def _at_optimizer_step(trainer) -> bool:
    """True at a batch that ended with an optimizer step: in the middle of gradient
    accumulation the accumulated gradients are in no checkpoint (Lightning 2.6's own rule,
    `_TrainingEpochLoop._should_accumulate`)."""
    if trainer.accumulate_grad_batches == 1:
        return True
    return not trainer.fit_loop.epoch_loop._should_accumulate()


def _stop_after_this_step(trainer, stop: bool) -> None:
    """Raise or lower Lightning's SIGTERM flag: when raised, the training loop ends the step
    it is in (its validation included) and raises SIGTERMException at the end of
    `_TrainingEpochLoop.on_advance_end`, where `on_exception` saves the whole state. The flag
    is Lightning's private attribute (`Trainer.received_sigterm` reads it); tests/test_resume.py
    fails if Lightning moves it."""
    trainer._signal_connector.received_sigterm = stop


def _last_checkpoint_callback(trainer):
    from vat.train.checkpointing import FinalLastCheckpoint

    return next(
        (c for c in trainer.checkpoint_callbacks if isinstance(c, FinalLastCheckpoint)), None
    )
