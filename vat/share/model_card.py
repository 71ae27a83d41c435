"""The model card (README.md) of a pretrained folder, and the training facts it reports.

`training_facts` reads a training checkpoint (step, epoch, ModelCheckpoint scores, loss and
optimiser settings, the run's training data); `model_card` renders config.json's contents,
those facts included, as the folder's README.md with a Hugging Face Hub metadata header.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from vat.share.checkpoint import read_checkpoint


def training_facts(ckpt_path: str | os.PathLike) -> dict[str, Any]:
    """Plain facts about how a checkpoint was trained: step, epoch, ModelCheckpoint's best
    score, loss/optimiser hyperparameters, and the training data from the run's config.yaml."""
    ckpt = read_checkpoint(ckpt_path)
    facts: dict[str, Any] = {"source_checkpoint": Path(ckpt_path).name}
    for key in ("global_step", "epoch"):
        if isinstance(ckpt.get(key), int):
            facts[key] = ckpt[key]
    hp = ckpt.get("hyper_parameters") or {}
    for key in ("loss", "optim"):
        if isinstance(hp.get(key), dict):
            facts[key] = _plain(hp[key])
    metrics = {}
    for state in (ckpt.get("callbacks") or {}).values():  # ModelCheckpoint states (Lightning)
        if not isinstance(state, dict) or not state.get("monitor"):
            continue
        if state.get("current_score") is not None:  # the monitored value when this file was saved
            metrics[str(state["monitor"])] = float(state["current_score"])
        if state.get("best_model_score") is not None:
            metrics[f"best {state['monitor']} of the run"] = float(state["best_model_score"])
    if metrics:
        facts["metrics"] = metrics
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


# -- model card ------------------------------------------------------------------------------
def model_card(config: dict[str, Any], vocab_size: int) -> str:
    """README.md for a pretrained folder: Hub metadata header, architecture, prior scale,
    training data and steps, and any recorded metrics."""
    mc, training = config["model_config"], config.get("training") or {}
    lines = [
        "---",
        "library_name: vat",
        "tags:",
        "- vat",
        "- variational-autoencoder",
        "- sentence-embeddings",
        "- sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "---",
        "",
        "# Variational Auto-Transformer (VAT)",
        "",
        "A token-level Variational Auto-Transformer trained with vat. "
        "Every token has a Gaussian posterior "
        "q(z_t | x) = N(mu_t, diag(sigma_t^2)); sentence features pool the token means mu.",
        "",
        "## Architecture",
        "",
        "| field | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in mc.items()]
    lines += [
        f"| tokenizer vocabulary | {vocab_size} |",
        "",
        "## Prior",
        "",
        f"Scaled prior N(0, s^2 I) with s = {config['prior_std']:g}.",
        "",
        "## Training",
        "",
    ]
    data = training.get("data") or {}
    if data.get("train_files"):
        lines.append(f"- training data: {', '.join(str(f) for f in data['train_files'])}")
    for key, label in (("global_step", "optimizer steps"), ("epoch", "epoch")):
        if key in training:
            lines.append(f"- {label}: {training[key]}")
    if "source_checkpoint" in training:
        lines.append(f"- exported from: {training['source_checkpoint']}")
    if lines[-1] == "":
        lines.append("Not recorded.")
    lines += ["", "## Metrics", ""]
    metrics = training.get("metrics") or {}
    lines += [f"- {k}: {v:.4f}" for k, v in metrics.items()] or [
        "None recorded with the checkpoint."
    ]
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "import vat",
        "",
        'model = vat.load("PATH_OR_REPO_ID")',
        'features = model.encode(["A sentence.", "Another one."])  # (2, d) numpy array',
        'print(model.reconstruct(["A sentence."]))',
        "```",
        "",
        "With sentence-transformers (vat installed):",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        'st = SentenceTransformer("PATH_OR_REPO_ID", trust_remote_code=True)',
        "```",
        "",
    ]
    return "\n".join(lines)
