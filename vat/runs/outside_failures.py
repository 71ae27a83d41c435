"""Failures from outside vat turned into one line that names the cause and the way out.
`--debug` keeps the full traceback (vat.errors.run_cli re-raises).
"""

from __future__ import annotations

from vat.errors import VatError


def _chain(e: BaseException):
    seen = 0
    while e is not None and seen < 8:
        yield e
        e, seen = e.__cause__ or e.__context__, seen + 1


def missing_compiler(e: BaseException) -> VatError | None:
    """torch.compile on CPU (inductor) needs a working C++ compiler; without one inductor
    raises InductorError("InvalidCxxCompiler: No working C++ compiler found ...")."""
    for x in _chain(e):
        text = f"{type(x).__name__}: {x}"
        if "InvalidCxxCompiler" in text or "No working C++ compiler" in text:
            return VatError(
                "model.compile: torch.compile found no working C++ compiler for the CPU "
                "(InvalidCxxCompiler); install one (e.g. `apt install g++`, or set CXX) or "
                "train with --model.compile false"
            )
    return None


# What the surviving ranks' collectives raise when a peer process dies (gloo on CPU; NCCL's
# watchdog and store errors on GPUs).
_DEAD_PEER = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "Watchdog caught collective operation timeout",
    "DistNetworkError",
)


def dead_peer(e: BaseException) -> VatError | None:
    """A DDP collective that failed because another rank's process died."""
    for x in _chain(e):
        text = f"{type(x).__name__}: {x}"
        if type(x).__module__.startswith("torch") or "gloo" in text or "NCCL" in text:
            found = next((s for s in _DEAD_PEER if s in text), None)
            if found:
                return VatError(
                    f"a DDP peer process died or stopped answering ({found}); its own log "
                    "says why (out of memory, a kill, a lost node); resume the run with "
                    "--ckpt_path last"
                )
    return None


def outside_failure(e: BaseException) -> VatError | None:
    """The one-line error for a known outside failure, or None."""
    return missing_compiler(e) or dead_peer(e)
