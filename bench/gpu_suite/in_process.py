"""vat's commands run inside the suite's own process (export, evaluate, features, generate,
data preparation), and what their exit codes mean to the suite."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vat.errors import VatError
from vat.train.interrupt import EXIT_CODES

INTERRUPTED = EXIT_CODES["Ctrl-C"]
"""What a vat command returns when a SIGINT reached it (vat.errors.run_cli: 130)."""


def run_vat(main: Callable[[list[str]], int], argv: Sequence[str], what: str) -> None:
    """`main(argv)`, a vat command's entry point, in this process: a failure is a VatError
    naming `what`. Exit 130 is the suite's own stop (a Ctrl-C, or --call-limit-s's SIGINT),
    which the command's Ctrl-C handler caught and turned into an exit code; it is raised
    again as KeyboardInterrupt, so that the suite stops and writes its report instead of
    calling the stage failed and starting the next one (which the call's kill then cut
    short, with no report)."""
    rc = main(list(argv))
    if rc == INTERRUPTED:
        raise KeyboardInterrupt
    if rc != 0:
        raise VatError(f"{what} failed (exit {rc})")
