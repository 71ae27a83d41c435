"""Failures from outside vat turned into one line that names the cause and the way out
(issue 20, section 3). `--debug` keeps the full traceback (vat.errors.run_cli re-raises).
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
