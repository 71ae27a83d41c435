"""Where a fit's wall time goes (set-up, compile, training, validation, checkpoint saving,
other): one `vat:` line, RUN_DIR/time_split.json and `time/*` scalars."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException
from tqdm import tqdm

from vat.callbacks.base import clock_text, relative_to_cwd
from vat.errors import VatError, one_line
from vat.io import write_json_atomic

PARTS = ("setup", "compile", "training", "validation", "checkpoint", "other")
WORDS = dict(
    zip(PARTS, ("set-up", "compile", "training steps", "validation", "checkpoint saving", "other"))
)
FILE_NAME = "time_split.json"
_STARTED = {"process start": "process started", "command start": "command started"}


def process_seconds(stat: str = "/proc/self/stat") -> float | None:
    """Seconds since this process started (imports included), or None where /proc is silent."""
    try:
        with open(stat, "rb") as f:
            text = f.read()
        # field 2, the command name, may hold spaces and ")": the fields after its last ")"
        # start at field 3, so field 22 is the 20th of them
        ticks = int(text[text.rindex(b")") + 2 :].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def compile_seconds() -> float:
    """Seconds torch._dynamo has spent compiling in this process (0.0 where torch lacks it)."""
    try:
        from torch._dynamo.utils import calculate_time_spent

        return float(calculate_time_spent().get("total_wall_time", 0.0))
    except Exception:  # an internal API: a torch without it has no compile time to report
        return 0.0


class Ledger:
    """Seconds charged to the part under way at each boundary (compile's to `compile`); parts
    nest around a base phase and add up exactly."""

    def __init__(self, origin: float, compiled: float) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self._stack = ["setup"]
        self._last = origin
        self._compiled = compiled

    def charge(self, now: float, compiled: float) -> None:
        # a compile count lower than the last one was reset to 0 in between
        elapsed = max(now - self._last, 0.0)
        new_compile = compiled - self._compiled if compiled >= self._compiled else compiled
        new_compile = min(max(new_compile, 0.0), elapsed)
        self.seconds["compile"] += new_compile
        self.seconds[self._stack[-1]] += elapsed - new_compile
        self._last, self._compiled = now, compiled

    def enter(self, part: str, now: float, compiled: float) -> None:
        self.charge(now, compiled)
        self._stack.append(part)

    def leave(self, part: str, now: float, compiled: float) -> None:
        self.charge(now, compiled)
        if len(self._stack) > 1 and self._stack[-1] == part:
            self._stack.pop()

    def become(self, base: str, now: float, compiled: float) -> None:
        self.charge(now, compiled)
        self._stack[0] = base

    def total(self) -> float:
        return sum(self.seconds.values())


def split_line(record: dict[str, Any], where: str | None) -> str:
    total = record["total_s"]
    parts = ", ".join(
        f"{WORDS[p]} {record[f'{p}_s']:.1f} s ({record[f'{p}_s'] / total:.0%})" for p in PARTS
    )
    written = f"; written to {where}" if where else ""
    since = _STARTED[record["clock_from"]]
    return f"vat: time split of {clock_text(total)} since the {since}: {parts}{written}"


_clock_started: list[str] = []  # only the first TimeSplit of a process counts from its start


class TimeSplit(Callback):
    """Times a fit; time_split.json goes to `run_dir` (None: not written)."""

    def __init__(self, run_dir: str | os.PathLike | None = None) -> None:
        self.run_dir = None if run_dir is None else Path(run_dir)
        since = process_seconds() if not _clock_started else None
        self.clock_from = "process start" if since is not None else "command start"
        _clock_started.append(self.clock_from)
        self._ledger = Ledger(time.perf_counter() - (since or 0.0), compile_seconds())
        self._first_step_s: float | None = None
        self._start_step = 0
        self._train_started = False  # a finished run resumed skips on_train_start
        self._stepped = self._training = False
        self._counts = {"validations": 0, "checkpoint_saves": 0}
        self._saver: Callable[..., Any] | None = None

    def _at(self, trainer: Trainer, boundary: Callable[..., None], *args: str) -> None:
        """A ledger boundary, once the device is done (CUDA runs behind the host)."""
        device = trainer.lightning_module.device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        boundary(*args, time.perf_counter(), compile_seconds())

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" or self._saver is not None:
            return
        # Lightning has no hook around a save (on_save_checkpoint comes before the write):
        # every checkpoint callback saves through trainer.save_checkpoint, so it is timed there
        saver = trainer.save_checkpoint

        def timed_save(*args: Any, **kwargs: Any) -> Any:
            self._at(trainer, self._ledger.enter, "checkpoint")
            try:
                saved = saver(*args, **kwargs)
            finally:
                self._at(trainer, self._ledger.leave, "checkpoint")
            self._counts["checkpoint_saves"] += 1  # (a save the guard refused wrote nothing)
            return saved

        self._saver = saver
        trainer.save_checkpoint = timed_save  # an instance attribute: teardown removes it

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start_step = trainer.global_step  # a resume's step, restored by now
        self._train_started = True

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._at(trainer, self._ledger.enter, "validation")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._at(trainer, self._ledger.leave, "validation")
        if not trainer.sanity_checking:  # timed as validation, not counted as one
            self._counts["validations"] += 1

    def on_train_batch_start(self, trainer: Trainer, *args: Any) -> None:
        if not self._training:
            self._at(trainer, self._ledger.become, "training")
            self._training = True

    def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
        if self._stepped or trainer.global_step <= self._start_step:
            return  # checked on the host (an int), no device read
        self._at(trainer, self._ledger.charge)  # once: the first step, finished on the device
        self._stepped = True
        self._first_step_s = self._ledger.total()
        s = self._ledger.seconds
        so_far = ", ".join(f"{WORDS[p]} {s[p]:.1f} s" for p in PARTS if s[p] >= 0.05)
        with tqdm.external_write_mode(file=sys.stderr):  # not glued to the bar's line
            rank_zero_info(
                f"vat: first optimizer step (step {trainer.global_step:,}) "
                f"{self._first_step_s:.1f} s after the {_STARTED[self.clock_from]}: {so_far}"
            )

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._at(trainer, self._ledger.become, "other")

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # after every on_fit_end, before the loggers close
        if stage == "fit":
            self._finish(trainer, pl_module, "finished")

    def on_exception(
        self, trainer: Trainer, pl_module: LightningModule, exception: BaseException
    ) -> None:
        ended = "stopped" if isinstance(exception, SIGTERMException) else "failed"
        # a NaN step ran but did not train: the steps done are those before it
        done = getattr(exception, "steps_done", None)  # (vat.train.non_finite)
        try:
            self._finish(trainer, pl_module, ended, done)
        except Exception:  # (a full disk, a failed device): the stop or the error is the news
            return

    def _finish(
        self, trainer: Trainer, pl_module: LightningModule, ended: str, done: int | None = None
    ) -> None:
        if self._saver is None:
            return  # not a fit, or said already
        if trainer.__dict__.get("save_checkpoint") is not None:
            del trainer.save_checkpoint  # the Trainer's own method again
        self._saver = None
        if not self._train_started:  # nothing was left to train: no steps, from where it was
            self._start_step = trainer.global_step
        self._at(trainer, self._ledger.charge)
        last = trainer.global_step if done is None else max(done, self._start_step)
        first = self._first_step_s  # None: no step ran (a finished run resumed)
        record = {
            "total_s": round(self._ledger.total(), 3),
            **{f"{p}_s": round(self._ledger.seconds[p], 3) for p in PARTS},
            "first_step_s": None if first is None else round(first, 3),
            "clock_from": self.clock_from,
            "ended": ended,
            "first_step": self._start_step,
            "last_step": last,
            "steps": last - self._start_step,
            **self._counts,
            "device": str(pl_module.device.type),
        }
        if not trainer.is_global_zero:
            return
        where = None
        if self.run_dir is not None:
            try:
                write_json_atomic(self.run_dir / FILE_NAME, record)
                where = self.run_dir / FILE_NAME
            except (OSError, VatError) as e:
                if ended != "finished":
                    raise  # on_exception drops it: the stop's or the error's line stays last
                # the run trained and saved: a record of its time is no reason to fail it
                with tqdm.external_write_mode(file=sys.stderr):
                    print(f"vat: warning: time split not written: {one_line(e)}", file=sys.stderr)
        scalars = {
            f"time/{k}": float(v) for k, v in record.items() if k.endswith("_s") and v is not None
        }
        for logger in trainer.loggers:
            logger.log_metrics(scalars, step=trainer.global_step)
        if ended == "finished":  # a stop's or an error's own line stays the last one said
            rank_zero_info(split_line(record, None if where is None else relative_to_cwd(where)))


def read_split(run_dir: str | os.PathLike, since: float | None = None) -> dict[str, Any] | None:
    """RUN_DIR/time_split.json, or None: missing, unreadable, or older than `since`."""
    path = Path(run_dir) / FILE_NAME
    try:
        if since is not None and path.stat().st_mtime < since:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    keys = ["total_s", *(f"{p}_s" for p in PARTS)]
    if not isinstance(record, dict) or not all(
        isinstance(record.get(k), int | float) and not isinstance(record.get(k), bool) for k in keys
    ):
        return None
    return record
