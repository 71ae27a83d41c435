"""Helpers of the training tests (test_resume.py, test_train_cli.py, test_trainer_settings.py,
test_init_from.py): `vat train` in-process on one torch thread, as its own process runs it, for
module-scoped fixtures that train a tiny model once for several tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from helpers import train_captured


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the block, as `vat train` sets it on the CPU (vat.runtime's
    rule; `vat.cli.train.main`, which the in-process helpers call, leaves threads alone).
    Module-scoped fixtures run before conftest's `one_thread`: a run trained there on
    torch's default threads would differ in its last bits from the same run in a test."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def train_once(args: list[str]) -> tuple[int, list[str]]:
    """`vat train ARGS` in-process on one torch thread: exit code and stderr lines."""
    with one_torch_thread():
        return train_captured(args)
