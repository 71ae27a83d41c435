"""The model summary `vat train` prints when a fit starts, on stderr, without a FLOPs count
that nothing measured.

Lightning's default summary (RichModelSummary when rich is installed) prints to stdout and
adds a FLOPs column and a "Total FLOPs" line. Lightning counts FLOPs only by running the
module's `example_input_array`, which VATSystem has none of, so every count reads 0: a
misleading number. This summary is Lightning's plain table, logged through Lightning's own
logger (stderr, like its other info lines), with the FLOPs column and total left out when
they were not measured (all zero) and kept when they were.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import model_summary as lightning_summary
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table

FLOPS_COLUMN = "FLOPs"
FLOPS_TOTAL = "Total Flops"
"""The column and the last line of Lightning's table (`_format_summary_table`)."""


class ModelSummary(LightningModelSummary):
    """Lightning's ModelSummary without the FLOPs it did not measure."""

    @staticmethod
    def summarize(*table_args: Any, total_flops: int = 0, **summarize_kwargs: Any) -> None:
        """Lightning calls this with `summary_table`'s arguments (and its own keywords)."""
        table = summary_table(*table_args, total_flops=total_flops)
        lightning_summary.log.info("\n" + table)


def summary_table(
    summary_data: list[tuple[str, list[str]]],
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
    total_flops: int,
) -> str:
    """Lightning's summary table; without the FLOPs column and total when total_flops is 0
    (Lightning counts FLOPs only through an example input, so 0 means "not measured")."""
    if total_flops:
        data = summary_data
    else:
        data = [col for col in summary_data if col[0] != FLOPS_COLUMN]
    table = _format_summary_table(
        total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, *data
    )
    if total_flops:
        return table
    return "\n".join(line for line in table.splitlines() if not line.endswith(FLOPS_TOTAL))
