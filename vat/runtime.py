"""Where and how a model runs outside training: the `--device auto` rule, eval mode, and
the memory a request would need against what the device has.

Each is written once here; every command, the callbacks and the sweep use them.
"""

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
    """The one device rule of every command and API call. "auto" (or None) is "cuda" when a
    CUDA GPU is visible, else "cpu". Otherwise the name must be a device vat can run on, here:
    "cpu"; "cuda" or "cuda:N" when CUDA is available and N < the number of GPUs; "mps" when
    torch.backends.mps is available. "meta" (a device without data: nothing computes there)
    and names torch does not know ("xyz") are refused. Errors are one line naming `option`,
    the Python argument (a command shows it as its flag, `--device`)."""
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
    if device.type == "cpu":
        return text
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise OptionError(
                option, f"{text} asks for CUDA, which is not available on this machine"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise OptionError(
                option,
                f"{text} does not exist: this machine has {count} CUDA device(s), "
                f"cuda:0 to cuda:{count - 1}",
            )
        return text
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise OptionError(option, f"{text} (Apple's Metal) is not available on this machine")
        return text
    if device.type == "meta":
        raise OptionError(
            option, "meta is a device without data, so vat cannot run on it; use cpu or cuda"
        )
    raise OptionError(
        option, f"{text} is not a device vat runs on (expected auto, cpu, cuda or cuda:N)"
    )


THREADS_ENV = "OMP_NUM_THREADS"


def cpu_threads(requested: int | None, env: str | None, cuda: bool) -> tuple[int | None, str]:
    """How many intra-op threads torch uses for a training command, and why.

    `requested` is `--threads N`; `env` the value of $OMP_NUM_THREADS; `cuda` whether a CUDA
    GPU is visible. Returns (threads, reason) where None threads means "leave torch's
    default". The rule, first match wins:
    1. `--threads N` (N >= 1);
    2. $OMP_NUM_THREADS, as OpenMP programs honour it (torch already applied it);
    3. with a CUDA GPU, torch's default: the CPU only feeds the GPU;
    4. on the CPU, one thread. vat's models (d 64-128) multiply matrices too small for thread
       hand-offs to pay on a quiet machine, and on a shared one torch's default (one thread
       per core) spin-waits in OpenMP barriers whenever another process holds a core
       (bench/bench_threads.py, BENCHMARKS.md "CPU threads").
    """
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
    """`text` read as a thread count, a whole number >= 1; else one line naming `what` (the
    option or the environment variable it came from)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise VatError(f"{what} {text!r}: expected a whole number >= 1")
    return n


def apply_cpu_threads(requested: int | None = None) -> tuple[int | None, str]:
    """Apply `cpu_threads` to this process. Returns (threads set, or None where torch's
    default stays; reason). Processes that DDP starts re-run the command and so the rule; the
    environment is left alone (in-process callers such as the sweep share it)."""
    import torch

    n, why = cpu_threads(requested, os.environ.get(THREADS_ENV), torch.cuda.is_available())
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return n, why


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no autograd for the block. Afterwards every submodule gets
    back the mode it had (a LightningModule in train mode may hold a model in eval mode)."""
    import torch

    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in modes:
            m.training = training


# -- what the machine can hold: requests checked before allocating -----------------------------
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
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
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
