"""`vat sweep -c CONFIG ...`: dispatches to `vat.experiments.sweep.main` (docs/sweep.md).

Only `-c NAME` is resolved here, so that a packaged config (`vat config`) works by name.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from vat.cli.config import resolve_config_args
    from vat.experiments.sweep import main as sweep_main

    return int(sweep_main(None if argv is None else resolve_config_args(argv)) or 0)
