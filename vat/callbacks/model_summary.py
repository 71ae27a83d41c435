"""The model summary `vat train` prints when a fit starts: Lightning's plain table, logged to
stderr like its other info lines, without the FLOPs it did not measure.

Lightning counts FLOPs only by running the module's `example_input_array`, which VATSystem
has none of, so its FLOPs column and total read 0: they are left out when all zero.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import model_summary as lightning_summary
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table


class ModelSummary(LightningModelSummary):
    """Lightning's ModelSummary without the FLOPs it did not measure."""

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        if not total_flops:
            summary_data = [col for col in summary_data if col[0] != "FLOPs"]
        table = _format_summary_table(
            total_parameters,
            trainable_parameters,
            model_size,
            total_training_modes,
            total_flops,
            *summary_data,
        )
        if not total_flops:
            lines = table.splitlines()
            table = "\n".join(line for line in lines if not line.endswith("Total Flops"))
        lightning_summary.log.info("\n" + table)
