"""`vat sweep -c CONFIG ...`: dispatches to `vat.experiments.sweep.main` (docs/sweep.md).

Only `-c NAME` is resolved here, so that a packaged config (`vat config`) works by name.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from vat.cli.config import resolve_config_args
    from vat.errors import VatError, run_cli
    from vat.experiments.sweep import main as sweep_main

    failed: list[VatError] = []  # a -c that is a FIFO, a device, a folder or a symlink loop
    try:
        resolved = None if argv is None else resolve_config_args(argv)
    except VatError as e:
        failed.append(e)
    if failed:

        def fail(_: list[str]) -> None:
            raise failed[0]

        return run_cli(fail, list(argv or []))
    return int(sweep_main(resolved) or 0)
