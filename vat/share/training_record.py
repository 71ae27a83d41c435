"""What a checkpoint records about its own training, for the model card.

`VATSystem.on_save_checkpoint` stores `training_record(...)` as checkpoint["vat"]["training"],
so a .ckpt copied out of its run folder still says what it was trained on, for how long, and
how well it did:

    {"global_step": 1200, "epoch": 3,
     "tokens_seen": 1843200, "sentences_seen": 153600,
     "data": {"train_files": ["demo_en.txt.gz"], "hf_dataset": None, ...},
     "metrics": {"val/nll": 2.31, "val/kl": 11.9, "val/recon_bleu": 71.2, ...}}

Training files are recorded by name (not their local path); a Hub dataset by its id.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

# Validation and training scalars worth a card (when the run logged them).
CARD_METRICS = (
    "val/nll",
    "val/kl",
    "val/loss",
    "val/ppl",
    "val/recon_bleu",
    "val/stsb_spearman",
    "train/kl",
)
DATA_KEYS = ("train_files", "hf_dataset", "hf_config", "hf_text_field", "max_len")


def data_record(hparams: Any) -> dict[str, Any]:
    """The training data of a DataModule's hyperparameters: file names and a Hub id."""
    if hparams is None:
        return {}
    out: dict[str, Any] = {}
    for key in DATA_KEYS:
        value = hparams.get(key) if hasattr(hparams, "get") else getattr(hparams, key, None)
        if value is None or value == []:
            continue
        if key == "train_files":
            value = [Path(str(f)).name for f in value]
        out[key] = value if isinstance(value, int | str | list) else str(value)
    return out


def metrics_record(callback_metrics: dict[str, Any]) -> dict[str, float]:
    """The finite CARD_METRICS among a trainer's last logged values, as floats."""
    out = {}
    for key in CARD_METRICS:
        value = callback_metrics.get(key)
        if value is None:
            continue
        value = float(value.item() if hasattr(value, "item") else value)
        if math.isfinite(value):
            out[key] = value
    return out


def training_record(
    *,
    global_step: int,
    epoch: int,
    tokens_seen: int,
    sentences_seen: int,
    data_hparams: Any = None,
    callback_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """checkpoint["vat"]["training"]: plain types only (weights_only loading)."""
    return {
        "global_step": int(global_step),
        "epoch": int(epoch),
        "tokens_seen": int(tokens_seen),
        "sentences_seen": int(sentences_seen),
        "data": data_record(data_hparams),
        "metrics": metrics_record(callback_metrics or {}),
    }
