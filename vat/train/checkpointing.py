"""Checkpoint policy, in one place: how checkpoints are written and which ones a run keeps.

- `AtomicCheckpointIO`: every checkpoint is written to a temp file and renamed into place.
- `FinalLastCheckpoint` (`--checkpoint.*`): last.ckpt always holds the final step, also
  after a stop requested mid-epoch.
- `best_checkpoint(monitor)`: the best checkpoint on `--best_monitor` (BEST_MONITORS).
- `ExceptionCheckpoint`: on_exception.ckpt when an error ends training (a Ctrl-C or SIGTERM
  stops at a whole step instead and saves last.ckpt: `vat.train.interrupt`).
Nothing non-finite is ever saved: `vat.train.non_finite` (the guard, with
`last_checkpoint(trainer)` for its messages) runs in the system's `on_save_checkpoint`.
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning.fabric.plugins import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from vat.errors import VatError
from vat.share.checkpoint import atomic_torch_save, read_checkpoint
from vat.train.non_finite import NonFiniteLossError

BEST_MONITORS = {"val/loss": "min", "val/nll": "min", "val/stsb_spearman": "max"}
_state = {"interrupted": False}


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file and renames it into place, and reads each
    checkpoint a command resumes from once.

    Lightning's default writer streams into the final path, so a SIGKILL during the write
    leaves a truncated last.ckpt and the run cannot resume. os.replace is atomic on POSIX:
    the old file stays whole until the new one is complete.

    A resume needs the checkpoint before the Trainer exists (its hyperparameters, the run
    folder's checks) and again when the Trainer restores it: `read` keeps what it read until
    `load_checkpoint` hands it over, so the file is read once per command.
    """

    def __init__(self) -> None:
        super().__init__()
        self._read: dict[Path, dict] = {}

    def read(self, path) -> dict:
        """The checkpoint at `path`, read once and kept for the Trainer's restore."""
        key = Path(path).resolve()
        if key not in self._read:
            self._read[key] = read_checkpoint(path)
        return self._read[key]

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict:
        # vat checkpoints hold tensors and plain Python types only: weights_only=True, so no
        # pickled code runs; a corrupt or foreign file is a one-line CheckpointError.
        kept = self._read.pop(Path(path).resolve(), None)  # handed over once, then released
        if kept is not None and map_location in (None, "cpu"):
            return kept
        return read_checkpoint(path, map_location=map_location or "cpu")


class FinalLastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose last.ckpt always holds the final training step.

    Lightning 2.6 writes last.ckpt at the end of fit only when none was written during the
    run, so a run that stops (max_steps, max_time) between two `every_n_train_steps` saves
    would keep a stale one, and resume, evaluation and the sweep all read last.ckpt.

    A stop requested mid-epoch (`trainer.should_stop`: max_time's Timer, EarlyStopping, a
    callback) is saved when it is requested, with the loops mid-epoch: by the end of fit
    Lightning has counted the interrupted epoch as completed, so a last.ckpt written then
    would resume at the next epoch and skip the rest of this one's data (tests/test_resume.py).
    """

    def name_folder_as_given(self, dirpath: str | os.PathLike) -> None:
        """Keep the checkpoint folder as the user named it: Lightning resolves symbolic links
        in it, so a RUN/checkpoints linked to another disk would make last.ckpt's path (and
        the hints built from it) name the link's target, not the run folder."""
        self.dirpath = os.path.normpath(os.path.expanduser(str(dirpath)))

    def state_dict(self) -> dict:
        # recorded with links resolved, as Lightning always did: a checkpoint says where its
        # files are whatever folder the run was started from
        state = super().state_dict()
        for key in ("dirpath", "last_model_path"):
            if state.get(key):
                state[key] = os.path.realpath(state[key])
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        # Lightning restores the last checkpoint's record only when the recorded folder is
        # this one as written; the same folder under another spelling (links resolved, or a
        # resume from another working folder) is the same run, and its last.ckpt is named as
        # this run names it
        recorded = state_dict.get("dirpath")
        if (
            recorded is not None
            and self.dirpath is not None
            and os.path.realpath(recorded) == os.path.realpath(self.dirpath)
        ):
            state_dict = {**state_dict, "dirpath": self.dirpath}
            last = state_dict.get("last_model_path")
            if last and _same_file_place(os.path.dirname(last), self.dirpath):
                state_dict["last_model_path"] = os.path.join(self.dirpath, os.path.basename(last))
        super().load_state_dict(state_dict)

    def _should_remove_checkpoint(self, trainer, previous: str, current: str) -> bool:
        # Lightning compares the two names as strings and deletes the previous one after
        # saving: under two spellings of one file it would delete the checkpoint just written
        if _same_file_place(previous, current):
            return False
        return super()._should_remove_checkpoint(trainer, previous, current)

    def _save_final(self, trainer) -> None:
        if (
            self.save_last
            and not trainer.fast_dev_run
            and self._last_global_step_saved != trainer.global_step
        ):
            # _save_last_checkpoint is what the parent's own on_train_end calls (Lightning 2.6).
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        if trainer.should_stop:  # checkpoint callbacks run after the others: Timer has decided
            self._save_final(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        super().on_validation_end(trainer, pl_module)
        if trainer.should_stop and trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._save_final(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        super().on_train_end(trainer, pl_module)
        self._save_final(trainer)

    def save_now(self, trainer) -> str:
        """Write last.ckpt from the trainer's state as it is now, even when this step was saved
        before: a stop after a step's validation (vat.train.interrupt) must keep what that
        validation changed (the best checkpoint's record), which the `every_n_train_steps`
        save of the same step, taken before it, does not hold. Returns its path."""
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        return self.last_model_path


def _same_file_place(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Two names of one place on disk (links resolved), whether or not it exists yet."""
    return os.path.realpath(a) == os.path.realpath(b)


class ExceptionCheckpoint(Callback):
    """Saves DIR/on_exception.ckpt when an exception ends training after it began.

    Not on Ctrl-C or SIGTERM: the first one stops at the end of a step and saves last.ckpt
    (vat.train.interrupt.StopOnSignal), and a second one stops at once, where the state is
    not whole (a half-done step resumed from differs from the run it interrupted).

    Not a subclass of Lightning's OnExceptionCheckpoint on purpose: with one of those,
    Lightning turns `fit(ckpt_path=None)` into `ckpt_path="last"`, so a fresh run silently
    resumed an old one. `--ckpt_path last` still finds this file (vat.runs.run_dir.find_last).
    """

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        self.ckpt_path = str(Path(dirpath) / f"{filename}.ckpt")

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        if isinstance(exception, NonFiniteLossError):
            return  # the weights may be non-finite: the last good checkpoint stays the latest
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            _state["interrupted"] = True
            return  # a signal: StopOnSignal saved the whole state, or nothing is whole
        if trainer.global_step == 0 or getattr(pl_module, "tokenizer", None) is None:
            return  # nothing trained yet: an error while reading data or building the model
        if isinstance(exception, VatError) and str(exception).startswith("cannot write "):
            return  # the disk is full or read-only: a second write would fail the same way
        try:
            # Lightning's `weights_only` here says what is saved (False: the whole training
            # state, to resume from); unset, it logs "`weights_only` was not set, defaulting
            # to `False`", which reads like an unsafe load. Every load is weights-only
            # (AtomicCheckpointIO.load_checkpoint, tests/test_checkpoint_safety.py).
            trainer.save_checkpoint(self.ckpt_path, weights_only=False)
        except (VatError, NonFiniteLossError):
            pass  # the original exception is the one the user must see


def was_interrupted() -> bool:
    """True once a Ctrl-C or SIGTERM ended training (Lightning then exits with SystemExit:
    SystemExit(1) after a KeyboardInterrupt, SIGTERMException after a stop at a whole step)."""
    return _state["interrupted"]


def reset_state() -> None:
    _state["interrupted"] = False


def best_checkpoint(monitor: str) -> ModelCheckpoint:
    """The best checkpoint on `monitor` (mode: max for a correlation, min for a loss)."""
    return ModelCheckpoint(
        monitor=monitor,
        mode=BEST_MONITORS[monitor],
        save_top_k=1,
        filename="best-step{step:07d}",
        auto_insert_metric_name=False,
        save_last=False,
        enable_version_counter=False,
    )


def check_monitor(monitor: str, callbacks: object) -> None:
    """val/stsb_spearman is logged only by the STSBSpearman callback: demand it up front,
    not after the first validation."""
    if monitor != "val/stsb_spearman":
        return
    items = callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else []
    names = [
        str(
            c.get("class_path", "")
            if isinstance(c, dict)
            else getattr(c, "class_path", type(c).__name__)
        )
        for c in items
    ]
    if not any(n.endswith("STSBSpearman") for n in names):
        raise VatError(
            "--best_monitor val/stsb_spearman needs the callback that logs it: add "
            "--trainer.callbacks+=vat.callbacks.sts.STSBSpearman"
        )
