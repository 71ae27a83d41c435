"""Where and how a model runs: the device rule, CPU threads, eval mode, memory checks."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from vat.errors import OptionError, VatError

if TYPE_CHECKING:  # torch is imported where a function runs: `vat CMD --help` stays light
    import torch
    from torch import nn


def resolve_device(name: str | torch.device | None = "auto", option: str = "device") -> str:
    """auto (or None) is cuda when a GPU is visible, else cpu; else cpu, cuda[:N] or mps."""
    import torch

    if name is None or (isinstance(name, str) and name == "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(name, str | torch.device):
        raise OptionError(
            option,
            f"expected a device name such as auto, cpu, cuda or cuda:1, got "
            f"{type(name).__name__} {name!r}",
        )
    text = str(name)
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):  # torch.device("xyz") is a RuntimeError
        raise OptionError(
            option, f"{text!r} is not a device name (expected auto, cpu, cuda or cuda:N)"
        ) from None
    kind = device.type
    if kind == "cuda" and not torch.cuda.is_available():
        raise OptionError(option, f"{text} asks for CUDA, which is not available on this machine")
    if kind == "cuda" and (device.index or 0) >= (count := torch.cuda.device_count()):
        raise OptionError(
            option,
            f"{text} does not exist: this machine has {count} CUDA device(s), "
            f"cuda:0 to cuda:{count - 1}",
        )
    if kind == "mps" and not torch.backends.mps.is_available():
        raise OptionError(option, f"{text} (Apple's Metal) is not available on this machine")
    if kind == "meta":
        raise OptionError(
            option, "meta is a device without data, so vat cannot run on it; use cpu or cuda"
        )
    if kind not in ("cpu", "cuda", "mps"):
        raise OptionError(
            option, f"{text} is not a device vat runs on (expected auto, cpu, cuda or cuda:N)"
        )
    return text


THREADS_ENV = "OMP_NUM_THREADS"


def cpu_threads(requested: int | None, env: str | None, cuda: bool) -> tuple[int | None, str]:
    """(threads, reason): --threads, else $OMP_NUM_THREADS, else torch's default beside a GPU,
    else one thread (vat's small matrices gain nothing from more; BENCHMARKS.md)."""
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise OptionError("threads", f"expected a whole number >= 1, got {requested!r}")
        return requested, "--threads"
    if env is not None and env.strip():
        return thread_count(env, f"${THREADS_ENV}"), f"${THREADS_ENV}"
    if cuda:
        return None, "torch's default beside a GPU"
    return 1, "vat's default on the CPU"


def thread_count(text: str, what: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise VatError(f"{what} {text!r}: expected a whole number >= 1")
    return n


def apply_cpu_threads(requested: int | None = None) -> tuple[int | None, str]:
    """Apply `cpu_threads` to this process, not to the environment the sweep's runs share."""
    import torch

    n, why = cpu_threads(requested, os.environ.get(THREADS_ENV), torch.cuda.is_available())
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return n, why


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and no autograd for the block; afterwards every submodule gets back its mode."""
    import torch

    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


def device_memory(device: torch.device | str) -> int:
    """Total memory of `device` in bytes (physical RAM for the CPU)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 1 << 40


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def check_allocation(nbytes: float, what: str, device: torch.device | str) -> None:
    """Refuse a request whose tensors alone would need more than the device's memory."""
    import torch

    have = device_memory(device)
    if not math.isfinite(nbytes) or nbytes > have:
        raise VatError(
            f"{what} would need about {_human(nbytes)} of memory for its latents alone, "
            f"more than the {_human(have)} of {torch.device(device).type}; ask for fewer"
        )
