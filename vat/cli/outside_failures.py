"""Failures from outside vat as one line naming the cause and the way out (`--debug` keeps
the traceback: vat.errors.run_cli re-raises)."""

from __future__ import annotations

from vat.errors import VatError

_NO_COMPILER = ("InvalidCxxCompiler", "No working C++ compiler")  # inductor on the CPU
# What the surviving ranks' collectives (gloo, NCCL) raise when a peer process dies.
_DEAD_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe",
              "NCCL communicator was aborted", "Watchdog caught collective operation timeout",
              "DistNetworkError")  # fmt: skip


def causes(e: BaseException | None):
    """`e`, then each error it was raised from or during, once each."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def outside_failure(e: BaseException | None) -> VatError | None:
    """The one-line error for a known outside failure anywhere in e's chain, or None."""
    for cause in causes(e):
        text = f"{type(cause).__name__}: {cause}"
        if any(m in text for m in _NO_COMPILER):
            return VatError(
                "model.compile: torch.compile found no working C++ compiler for the CPU "
                "(InvalidCxxCompiler); install one (e.g. `apt install g++`, or set CXX) or "
                "train with --model.compile false"
            )
        # a "Broken pipe" of vat's own output (`vat train | head`) is not a peer's death
        torch_side = type(cause).__module__.startswith("torch") or "gloo" in text or "NCCL" in text
        found = next((m for m in _DEAD_PEER if m in text), None) if torch_side else None
        if found:
            return VatError(
                f"a DDP peer process died or stopped answering ({found}); its own log says why "
                "(out of memory, a kill, a lost node); resume the run with --ckpt_path last"
            )
    return None
