"""Requests checked against what the machine can hold, before allocating (issue 20): a
request that would need more memory than the device has fails at once, naming the option
and the number of bytes it would need, instead of a raw allocator traceback minutes later.
"""

from __future__ import annotations

import math
import os

import torch

from vat.errors import VatError


def device_memory(device: torch.device | str) -> int:
    """Total memory of `device` in bytes (physical RAM for the CPU)."""
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
    have = device_memory(device)
    if not math.isfinite(nbytes) or nbytes > have:
        raise VatError(
            f"{what} would need about {_human(nbytes)} of memory for its latents alone, "
            f"more than the {_human(have)} of {torch.device(device).type}; ask for fewer"
        )


def check_non_negative_finite(value: float, what: str, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 with `positive`), else a one-line error naming `what`."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise VatError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise VatError(
            f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return x


def check_count(value: int, what: str, minimum: int = 1) -> int:
    """A whole number >= minimum (booleans and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise VatError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    return value
