"""Lightning's model summary without the FLOPs column it did not measure."""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import ModelSummary as LightningModelSummary
from lightning.pytorch.callbacks import model_summary as lightning_summary
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table


class ModelSummary(LightningModelSummary):
    """Lightning counts FLOPs only through `example_input_array`, which VATSystem lacks."""

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
