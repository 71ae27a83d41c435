"""Trainer settings that Lightning accepts but cannot run (a division by zero at the first
batch, a fit without a step, a traceback after the run folder was written), refused before."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from vat.errors import VatError


def _get(trainer, name: str, default=None):
    value = trainer.get(name, default)
    return default if value is None else value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validation_is_off(trainer) -> bool:
    """`--trainer.limit_val_batches 0` (or 0.0): Lightning runs no validation."""
    return _get(trainer, "limit_val_batches", 1.0) == 0


def check_settings(trainer, subcommand: str | None = "fit") -> None:
    """Refuse, before anything is written, what no data makes right."""
    interval = _get(trainer, "val_check_interval", 1.0)
    every = trainer.get("check_val_every_n_epoch", 1)
    if isinstance(interval, int | float) and interval <= 0:
        raise VatError(
            f"--trainer.val_check_interval {interval!r}: must be a fraction of the epoch in "
            f"(0, 1] or a whole number of batches; --trainer.limit_val_batches 0 turns it off"
        )
    if every is None and isinstance(interval, float):
        raise VatError(
            f"--trainer.val_check_interval {interval!r} is a fraction of an epoch, but "
            f"--trainer.check_val_every_n_epoch null counts batches across epochs: give it as a "
            f"whole number of batches"
        )
    if every is not None and (not _is_int(every) or every < 1):
        raise VatError(f"--trainer.check_val_every_n_epoch {every!r}: must be a whole number >= 1")
    acc = _get(trainer, "accumulate_grad_batches", 1)
    if not _is_int(acc) or acc < 1:
        raise VatError(f"--trainer.accumulate_grad_batches {acc!r}: must be a whole number >= 1")
    nothing = [k for k in ("limit_train_batches", "max_steps", "max_epochs") if trainer.get(k) == 0]
    if subcommand == "fit" and nothing:
        raise VatError(f"--trainer.{nothing[0]} 0 trains nothing: give a number >= 1")


@dataclass(frozen=True)
class EpochSize:
    """The batches of one epoch, before the `limit_*_batches` settings (per process)."""

    train: int
    val: int


def check_against_data(trainer, size: EpochSize) -> None:
    """Refuse settings that do not fit the epoch `size` (after check_settings)."""
    limited = {}
    for split, n, what in (("train", size.train, "training"), ("val", size.val, "validation")):
        limit = _get(trainer, f"limit_{split}_batches", 1.0)  # as Lightning's _parse_num_batches
        whole = _is_int(limit) or limit > 1  # 8.0 is 8 batches (_determine_batch_limits)
        limited[split] = min(n, int(limit)) if whole else int(n * limit)
        if isinstance(limit, float) and limit > 0 and n > 0 and limited[split] == 0:
            raise VatError(
                f"--trainer.limit_{split}_batches {limit} keeps less than one of the {n} {what} "
                f"batches of an epoch: give at least {1 / n:.4g}, or a whole number of batches"
            )
    n, interval = limited["train"], _get(trainer, "val_check_interval", 1.0)
    every = trainer.get("check_val_every_n_epoch", 1)
    if _is_int(interval) and interval > n and every is not None and not validation_is_off(trainer):
        raise VatError(
            f"--trainer.val_check_interval {interval} is longer than an epoch ({n} training "
            f"batch{'es' * (n != 1)}): give at most {n}, or add "
            f"--trainer.check_val_every_n_epoch null to validate every {interval} batches"
        )
    acc = _get(trainer, "accumulate_grad_batches", 1)
    if acc > n:
        raise VatError(
            f"--trainer.accumulate_grad_batches {acc} is more than "
            f"the {n} training batches of an epoch: Lightning ends each step with the epoch, so "
            f"every optimiser step would average {n}; give at most {n}"
        )


def epoch_size(datamodule, trainer) -> EpochSize:
    """The batches of one epoch per process, from the data module set up for `fit` (idempotent)
    with the trainer attached, so that the sampler shards them as fit will."""
    datamodule.trainer = trainer
    datamodule.setup("fit")
    return EpochSize(len(datamodule.train_dataloader()), len(datamodule.val_dataloader()))


def check_devices(accelerator, devices) -> None:
    """A GPU asked for where there is none, or more than there are, refused before anything is
    built; several processes on the CPU said in one line."""
    if isinstance(devices, str) and devices.isdigit():
        devices = int(devices)
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        cuda = torch.version.cuda
        build = "a CPU-only build" if cuda is None else f"built for CUDA {cuda}"
        raise VatError(
            f"--trainer.accelerator {accelerator}: no GPU is visible to torch {torch.__version__} "
            f"({build}); use --trainer.accelerator cpu, or auto to take a GPU when there is one"
        )
    if not isinstance(devices, int) or devices <= 0:
        return
    if gpu:
        have = torch.cuda.device_count()
        if devices > have:
            raise VatError(
                f"--trainer.devices {devices} asks for more GPUs than exist ({have} found)"
            )
    elif devices > 1 and rank_zero_only.rank == 0:
        print(
            f"vat: --trainer.devices {devices} on the CPU runs {devices} training processes "
            f"(DDP over gloo) that share this machine's {os.cpu_count()} cores and split "
            f"every batch; on one machine that is rarely faster than one process",
            file=sys.stderr,
        )
