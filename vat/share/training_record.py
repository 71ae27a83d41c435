"""What a checkpoint records about its own training, for the model card.

`training_facts` gathers it from a checkpoint already read: the recorded training below, the
step and epoch, ModelCheckpoint's scores, the loss and optimiser settings, and the run's data.

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
import os
from pathlib import Path
from typing import Any

import torch

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


def training_facts(ckpt: dict, ckpt_path: str | os.PathLike) -> dict[str, Any]:
    """Plain facts about how a checkpoint (read by `vat.share.checkpoint.read_checkpoint`) was
    trained: step, epoch, ModelCheckpoint's best score, loss/optimiser hyperparameters, and
    the training data (recorded, else from the run's config.yaml)."""
    facts: dict[str, Any] = {"source_checkpoint": Path(ckpt_path).name}
    recorded = (ckpt.get("vat") or {}).get("training")  # vat.share.training_record, at save time
    if isinstance(recorded, dict):
        facts.update(_plain(recorded))
    for key in ("global_step", "epoch"):
        if isinstance(ckpt.get(key), int):
            facts[key] = ckpt[key]
    hp = ckpt.get("hyper_parameters") or {}
    for key in ("loss", "optim"):
        if isinstance(hp.get(key), dict):
            facts[key] = _plain(hp[key])
    metrics = dict(facts.get("metrics") or {})
    for state in (ckpt.get("callbacks") or {}).values():  # ModelCheckpoint states (Lightning)
        if not isinstance(state, dict) or not state.get("monitor"):
            continue
        if state.get("current_score") is not None:  # the monitored value when this file was saved
            metrics[str(state["monitor"])] = float(state["current_score"])
        if state.get("best_model_score") is not None:
            metrics[f"best {state['monitor']} of the run"] = float(state["best_model_score"])
    if metrics:
        facts["metrics"] = metrics
    if not facts.get("data"):  # checkpoints from before vat.share.training_record: the run's config
        run_config = Path(ckpt_path).resolve().parent.parent / "config.yaml"
        data = _run_data(run_config)
        if data:
            facts["data"] = data
    return facts


def _run_data(config_yaml: Path) -> dict[str, Any]:
    """The `data` section of a run's config.yaml (training files, vocabulary, max length)."""
    if not config_yaml.is_file():
        return {}
    import yaml

    try:
        cfg = yaml.safe_load(config_yaml.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError):
        return {}
    data = cfg.get("data") if isinstance(cfg, dict) else None
    return _plain(data) if isinstance(data, dict) else {}


def _plain(obj: Any) -> Any:
    """obj with only JSON types (anything else becomes its str)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, bool | int | float | str) or obj is None:
        return obj
    if isinstance(obj, torch.Tensor) and obj.numel() == 1:
        return obj.item()
    return str(obj)
