"""Checkpoint policy: atomic writes, last.ckpt with the final step, the best on
`--best_monitor`, and on_exception.ckpt after an error."""

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
    """Writes each checkpoint atomically, and reads a resumed checkpoint once."""

    def __init__(self) -> None:
        super().__init__()
        self._read: dict[Path, dict] = {}

    def read(self, path) -> dict:
        key = Path(path).resolve()
        if key not in self._read:
            self._read[key] = read_checkpoint(path)
        return self._read[key]

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict:
        # weights-only (read_checkpoint): no pickled code runs, a bad file is one line
        kept = self._read.pop(Path(path).resolve(), None)  # handed over once, then released
        if kept is not None and map_location in (None, "cpu"):
            return kept
        return read_checkpoint(path, map_location=map_location or "cpu")


class FinalLastCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose last.ckpt always holds the final step. A stop requested mid-epoch
    is saved when requested: by the end of fit Lightning counts the epoch as completed, and a
    resume would skip the rest of its data (tests/test_resume.py)."""

    def name_folder_as_given(self, dirpath: str | os.PathLike) -> None:
        """Keep the checkpoint folder as the user named it, links unresolved."""
        self.dirpath = os.path.normpath(os.path.expanduser(str(dirpath)))

    def state_dict(self) -> dict:
        # recorded with links resolved, as Lightning does, whatever folder the run started from
        state = super().state_dict()
        for key in ("dirpath", "last_model_path"):
            if state.get(key):
                state[key] = os.path.realpath(state[key])
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        # Lightning restores the record only when the recorded folder is this one as written;
        # the same folder under another spelling is the same run, named as this run names it
        recorded = state_dict.get("dirpath")
        if recorded is not None and self.dirpath is not None and _same(recorded, self.dirpath):
            state_dict = {**state_dict, "dirpath": self.dirpath}
            last = state_dict.get("last_model_path")
            if last and _same(os.path.dirname(last), self.dirpath):
                state_dict["last_model_path"] = os.path.join(self.dirpath, os.path.basename(last))
        super().load_state_dict(state_dict)

    def _should_remove_checkpoint(self, trainer, previous: str, current: str) -> bool:
        # Lightning compares the two names as strings and deletes the previous one after
        # saving: under two spellings of one file it would delete the checkpoint just written
        if _same(previous, current):
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
        """Write last.ckpt as the state is now, even when this step was saved before."""
        self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        return self.last_model_path


def _same(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


class ExceptionCheckpoint(Callback):
    """DIR/on_exception.ckpt after an error (not Lightning's, which makes a fresh fit resume)."""

    def __init__(self, dirpath: str | os.PathLike) -> None:
        self.ckpt_path = str(Path(dirpath) / "on_exception.ckpt")

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
            # what is saved (the whole state); unset, Lightning logs a line that reads like an
            # unsafe load, and every load is weights-only (tests/test_checkpoint_safety.py)
            trainer.save_checkpoint(self.ckpt_path, weights_only=False)
        except (VatError, NonFiniteLossError):
            pass  # the original exception is the one the user must see


def was_interrupted() -> bool:
    return _state["interrupted"]


def reset_state() -> None:
    _state["interrupted"] = False


def best_checkpoint(monitor: str) -> ModelCheckpoint:
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
    """Demand the STSBSpearman callback up front for val/stsb_spearman."""
    if monitor != "val/stsb_spearman":
        return
    items = callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else []
    names = [
        c.get("class_path", "")
        if isinstance(c, dict)
        else getattr(c, "class_path", type(c).__name__)
        for c in items
    ]
    if not any(str(n).endswith("STSBSpearman") for n in names):
        raise VatError(
            "--best_monitor val/stsb_spearman needs the callback that logs it: add "
            "--trainer.callbacks+=vat.callbacks.sts.STSBSpearman"
        )
