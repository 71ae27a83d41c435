"""Trainer settings checked before a run starts, in vat's option names.

Lightning checks some trainer settings only once training has started: against the data
(`val_check_interval` longer than an epoch is a ValueError with a traceback after the run
folder was written), or not at all (`val_check_interval 0` and `check_val_every_n_epoch 0`
divide by zero at the first batch; `limit_train_batches 0` and `max_steps 0` "train" without
a step and exit 0; `accumulate_grad_batches` above the batches of an epoch silently steps on
fewer batches). Two checks run first instead:

- `check_settings(trainer, subcommand)`: what needs no data, before anything is written;
- `check_against_data(trainer, EpochSize(...))`: what needs the number of batches of an
  epoch, once the data is ready and before the run folder holds anything of this run.

Each message names the `--trainer.*` option and says what to change. The rules mirror
Lightning 2.6's (`lightning.pytorch.loops.fit_loop._FitLoop.setup_data` and
`trainer.connectors.data_connector._parse_num_batches`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from vat.errors import VatError

_FRACTION = "a fraction of the epoch in (0, 1], or a whole number of batches"


def _batches(n: int, what: str = "training") -> str:
    return f"{n} {what} batch{'es' if n != 1 else ''}"


def _get(trainer, name: str, default=None):
    value = trainer.get(name, default) if hasattr(trainer, "get") else default
    return default if value is None else value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_count(v) -> bool:
    return _is_int(v) or isinstance(v, float)


def validation_is_off(trainer) -> bool:
    """`--trainer.limit_val_batches 0` (or 0.0): Lightning runs no validation."""
    return _get(trainer, "limit_val_batches", 1.0) == 0


def _whole(v) -> str:
    """The hint for a float above 1 that is a whole number: 8.0 is not 8 batches."""
    if isinstance(v, float) and v > 1.0 and v.is_integer():
        return f" (write {int(v)} for {int(v)} batches)"
    return ""


def _check_limit(trainer, split: str) -> None:
    name = f"limit_{split}_batches"
    v = _get(trainer, name, 1.0)
    if not _is_count(v) or v < 0 or (isinstance(v, float) and v > 1.0):
        raise VatError(f"--trainer.{name} {v!r}: must be {_FRACTION}{_whole(v)}")


def _check_val_interval(trainer) -> None:
    v = _get(trainer, "val_check_interval", 1.0)
    if isinstance(v, str | timedelta | dict):
        return  # a time interval ("00:01:00:00"): Lightning parses and checks it at once
    if not _is_count(v) or v <= 0 or (isinstance(v, float) and v > 1.0):
        raise VatError(
            f"--trainer.val_check_interval {v!r}: must be {_FRACTION} between two "
            f"validations{_whole(v)}; to turn validation off, set --trainer.limit_val_batches 0"
        )
    every = trainer.get("check_val_every_n_epoch", 1) if hasattr(trainer, "get") else 1
    if every is None and isinstance(v, float):
        raise VatError(
            f"--trainer.val_check_interval {v!r} is a fraction of an epoch, but "
            f"--trainer.check_val_every_n_epoch null counts batches across epochs: give "
            f"--trainer.val_check_interval as a whole number of batches"
        )


def check_settings(trainer, subcommand: str | None = "fit") -> None:
    """Refuse trainer settings that are wrong whatever the data (before anything is written)."""
    for split in ("train", "val", "test"):
        _check_limit(trainer, split)
    _check_val_interval(trainer)
    every = trainer.get("check_val_every_n_epoch", 1) if hasattr(trainer, "get") else 1
    if every is not None and (not _is_int(every) or every < 1):
        raise VatError(
            f"--trainer.check_val_every_n_epoch {every!r}: must be a whole number >= 1 "
            f"(or null, to count --trainer.val_check_interval in batches across epochs)"
        )
    acc = _get(trainer, "accumulate_grad_batches", 1)
    if not _is_int(acc) or acc < 1:
        raise VatError(
            f"--trainer.accumulate_grad_batches {acc!r}: must be a whole number >= 1 "
            f"(the batches whose gradients make one optimiser step)"
        )
    if subcommand != "fit":
        return
    if _get(trainer, "limit_train_batches", 1.0) == 0:
        raise VatError(
            "--trainer.limit_train_batches 0 trains nothing: give a fraction of the epoch "
            "in (0, 1] or a whole number of batches >= 1"
        )
    for name in ("max_steps", "max_epochs"):
        v = trainer.get(name) if hasattr(trainer, "get") else None
        if v is None:
            continue
        if not _is_int(v) or v < -1:
            raise VatError(f"--trainer.{name} {v!r}: must be a whole number >= 1, or -1 (no limit)")
        if v == 0:
            raise VatError(f"--trainer.{name} 0 trains nothing: give a number >= 1, or -1")


@dataclass(frozen=True)
class EpochSize:
    """The batches of one epoch, before the `limit_*_batches` settings (per process)."""

    train: int
    val: int


def _limited(n: int, limit: int | float) -> int:
    """The batches Lightning runs of `n` under a `limit_*_batches` (its _parse_num_batches)."""
    return min(n, limit) if _is_int(limit) else int(n * limit)


def train_batches(trainer, size: EpochSize) -> int:
    """The training batches of one epoch under --trainer.limit_train_batches."""
    return _limited(size.train, _get(trainer, "limit_train_batches", 1.0))


def check_against_data(trainer, size: EpochSize) -> None:
    """Refuse settings that do not fit the epoch `size` (after check_settings)."""
    for split, n, what in (("train", size.train, "training"), ("val", size.val, "validation")):
        limit = _get(trainer, f"limit_{split}_batches", 1.0)
        if isinstance(limit, float) and limit > 0 and n > 0 and _limited(n, limit) == 0:
            raise VatError(
                f"--trainer.limit_{split}_batches {limit} keeps less than one of the "
                f"{_batches(n, what)} of an epoch: give at least {1 / n:.4g}, or a whole "
                f"number of batches"
            )
    n = train_batches(trainer, size)
    interval = _get(trainer, "val_check_interval", 1.0)
    every = trainer.get("check_val_every_n_epoch", 1) if hasattr(trainer, "get") else 1
    if _is_int(interval) and interval > n and every is not None and not validation_is_off(trainer):
        raise VatError(
            f"--trainer.val_check_interval {interval} is longer than an epoch "
            f"({_batches(n)}): give at most {n}, or add --trainer.check_val_every_n_epoch null to "
            f"validate every {interval} batches across epochs"
        )
    acc = _get(trainer, "accumulate_grad_batches", 1)
    if acc > n:
        raise VatError(
            f"--trainer.accumulate_grad_batches {acc} is more than the {_batches(n)} of an "
            f"epoch: Lightning ends each step with the epoch, so every optimiser step would "
            f"average {n}, not {acc}; give at most {n}"
        )


def epoch_size(datamodule, trainer) -> EpochSize:
    """The batches of one epoch per process, from the data module set up for `fit` (its setup
    is idempotent: Lightning's fit then reuses what this read). Attaches the trainer, as fit
    would, so that the sampler shards the batches over `trainer.world_size` processes."""
    datamodule.trainer = trainer
    datamodule.setup("fit")
    return EpochSize(len(datamodule.train_dataloader()), len(datamodule.val_dataloader()))
