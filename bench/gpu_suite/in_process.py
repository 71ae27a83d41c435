"""vat's commands run inside the suite's own process (export, evaluate, features, generate,
data preparation), and what their exit codes mean to the suite."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vat.errors import VatError


def interrupted_code() -> int:
    """What a vat command returns when a SIGINT reached it (vat.errors.run_cli: 130), from
    vat.train.interrupt, imported when first needed: it imports Lightning, seconds that a
    call's start need not wait for (a --call-limit-s stop then finds its report written)."""
    from vat.train.interrupt import EXIT_CODES

    return EXIT_CODES["Ctrl-C"]


def run_vat(main: Callable[[list[str]], int], argv: Sequence[str], what: str) -> None:
    """`main(argv)`, a vat command's entry point, in this process: a failure is a VatError
    naming `what`. Exit 130 is the suite's own stop (a Ctrl-C, or --call-limit-s's SIGINT),
    which the command's Ctrl-C handler caught and turned into an exit code; it is raised
    again as KeyboardInterrupt, so that the suite stops and writes its report instead of
    calling the stage failed and starting the next one (which the call's kill then cut
    short, with no report)."""
    rc = main(list(argv))
    if rc == interrupted_code():
        raise KeyboardInterrupt
    if rc != 0:
        raise VatError(f"{what} failed (exit {rc})")
