"""What the training callbacks share: when to run, where TensorBoard is, how text reads."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from vat.errors import VatError
from vat.runtime import eval_mode


def tensorboard_writer(trainer: Trainer) -> Any | None:
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def clock_text(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour."""
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def relative_to_cwd(path: str | os.PathLike) -> str:
    """A path relative to the current folder when inside it (links unresolved)."""
    here, full = Path.cwd(), Path(os.path.abspath(path))
    return os.path.relpath(full, here) if full.is_relative_to(here) else str(path)


def markdown_cell(text: str) -> str:
    """Text safe inside a markdown table cell (TensorBoard renders text as Markdown)."""
    return text.replace("|", "\\|").replace("\n", " ") or "(empty)"


def markdown_table(rows: Sequence[tuple[str, str]], header: tuple[str, str] = ("", "text")) -> str:
    if not rows:
        return ""
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return "\n".join(lines + [f"| {markdown_cell(k)} | {markdown_cell(v)} |" for k, v in rows])


class EveryNValidations(Callback):
    """Runs `_run` after every n-th validation run, in eval mode; the count is checkpointed."""

    starts_at_first_validation = False  # True: runs 1, 1 + n, ...; False: n, 2n, ...
    rank_zero_only = True  # False: every rank (a synced metric)

    def __init__(self, every_n_validations: int = 1) -> None:
        if every_n_validations < 1:
            raise VatError(
                f"{type(self).__name__}: every_n_validations must be >= 1, "
                f"got {every_n_validations}"
            )
        self.every_n_validations = every_n_validations
        self.val_runs = 0

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.val_runs += 1
        if (self.val_runs - self.starts_at_first_validation) % self.every_n_validations:
            return
        if self.rank_zero_only and not trainer.is_global_zero:
            return
        if getattr(pl_module, "tokenizer", None) is None:
            rank_zero_warn(f"{type(self).__name__}: pl_module.tokenizer is not set; skipping")
            return
        with eval_mode(pl_module):  # the whole module, so submodules get their mode back too
            self._run(trainer, pl_module)

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        raise NotImplementedError

    def _state_key_fields(self) -> dict[str, Any]:
        return {"every_n_validations": self.every_n_validations}

    @property
    def state_key(self) -> str:
        return self._generate_state_key(**self._state_key_fields())

    def state_dict(self) -> dict[str, Any]:
        return {"val_runs": self.val_runs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.val_runs = int(state_dict.get("val_runs", 0))
