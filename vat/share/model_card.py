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


# -- model card ------------------------------------------------------------------------------
DISTRIBUTION = "variational-auto-transformer"
"""vat's name on PyPI (PyPI's "vat" is an unrelated package); it installs `import vat`."""
INSTALL = f'pip install "{DISTRIBUTION}[integrations]"'
DEFAULT_LICENSE = "apache-2.0"
DEFAULT_LANGUAGE = "en"


def card_data(config: dict[str, Any]) -> Any:
    """The Hub metadata (huggingface_hub.ModelCardData) of a pretrained folder's config.json:
    license, language, datasets (Hub ids only), tags and a model-index of the recorded
    evaluation (config["evaluation"], `vat.eval.scores` entries)."""
    from huggingface_hub import EvalResult, ModelCardData

    card = config.get("card") or {}
    training = config.get("training") or {}
    data = training.get("data") or {}
    name = card.get("repo_id") or card.get("name") or "vat"
    results = [
        EvalResult(
            task_type=s["type"],
            dataset_type=f"senteval/{s['task']}",
            dataset_name=f"SentEval {s['task']}",
            dataset_split=s["split"],
            metric_type=s["metric"],
            metric_name=f"{s['metric']} x 100" if s["metric"] == "spearman" else s["metric"],
            metric_value=s["value"],
        )
        for s in config.get("evaluation") or []
    ]
    return ModelCardData(
        license=card.get("license") or DEFAULT_LICENSE,
        language=card.get("language") or DEFAULT_LANGUAGE,
        library_name="vat",
        datasets=[data["hf_dataset"]] if data.get("hf_dataset") else None,
        tags=["vat", "variational-autoencoder", "sentence-embeddings", "sentence-transformers"],
        pipeline_tag="sentence-similarity",
        model_name=name,
        eval_results=results or None,
    )


def model_card(config: dict[str, Any], vocab_size: int) -> str:
    """README.md of a pretrained folder (huggingface_hub.ModelCard): Hub metadata, install
    and usage, architecture, prior scale, rate, training data and tokens, and metrics. Every
    fact comes from config.json, which `vat export` fills from the checkpoint itself."""
    from huggingface_hub import ModelCard

    mc, training = config["model_config"], config.get("training") or {}
    card = config.get("card") or {}
    data, metrics = training.get("data") or {}, training.get("metrics") or {}
    repo = card.get("repo_id") or "PATH_OR_REPO_ID"
    lines = [
        "# Variational Auto-Transformer (VAT)",
        "",
        "A token-level Variational Auto-Transformer trained with "
        "[vat](https://pypi.org/project/variational-auto-transformer/). Every token has a "
        "Gaussian posterior q(z_t | x) = N(mu_t, diag(sigma_t^2)); sentence features pool the "
        "token means mu.",
        "",
        "## Install",
        "",
        "```bash",
        INSTALL,
        "```",
        "",
        f"(The distribution is `{DISTRIBUTION}`; it installs the Python package `vat` and the "
        "`vat` command. PyPI's `vat` is an unrelated package.)",
        "",
        "## Use",
        "",
        "```python",
        "import vat",
        "",
        f'model = vat.load("{repo}")',
        'embeddings = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, d)',
        "print(model.similarity(embeddings, embeddings))",
        'print(model.reconstruct(["A man plays a guitar."]))',
        "```",
        "",
        "With sentence-transformers:",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'st = SentenceTransformer("{repo}", trust_remote_code=True)',
        'embeddings = st.encode(["A man plays a guitar.", "A dog runs."])',
        "```",
        "",
        "With transformers (after `import vat`, which registers the `vat` model type):",
        "",
        "```python",
        "import vat",
        "from transformers import AutoModel",
        "",
        f'model = AutoModel.from_pretrained("{repo}")',
        "```",
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
        "## Prior and rate",
        "",
        f"- prior: N(0, s^2 I) with s = {config['prior_std']:g}",
    ]
    for key, label in (("val/kl", "validation"), ("train/kl", "training")):
        if key in metrics:
            lines.append(f"- rate ({label}): {metrics[key]:.3f} nats per token (KL to the prior)")
    lines += ["", "## Training", ""]
    if data.get("hf_dataset"):
        cfg = f", config {data['hf_config']}" if data.get("hf_config") else ""
        field = f", field {data['hf_text_field']}" if data.get("hf_text_field") else ""
        lines.append(f"- data: the Hub dataset `{data['hf_dataset']}`{cfg}{field}")
    elif data.get("train_files"):
        names = ", ".join(Path(str(f)).name for f in data["train_files"])
        lines.append(f"- data: {names}")
    for key, label in (
        ("tokens_seen", "training tokens"),
        ("sentences_seen", "training sentences"),
        ("global_step", "optimizer steps"),
        ("epoch", "epoch"),
    ):
        if key in training:
            value = training[key]
            lines.append(
                f"- {label}: {value:,}" if isinstance(value, int) else f"- {label}: {value}"
            )
    if "source_checkpoint" in training:
        lines.append(f"- exported from: {training['source_checkpoint']}")
    if lines[-1] == "":
        lines.append("Not recorded.")
    lines += ["", "## Metrics", ""]
    lines += [f"- {k}: {v:.4f}" for k, v in metrics.items()] or [
        "None recorded with the checkpoint."
    ]
    evaluation = config.get("evaluation") or []
    if evaluation:
        lines += [
            "",
            "## Evaluation",
            "",
            "`vat evaluate` (SentEval's protocol, mean pooling); percent (Spearman x 100 for "
            "STS, accuracy for classification).",
            "",
            "| task | split | metric | value |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['task']} | {s['split']} | {s['metric']} | {s['value']:.2f} |" for s in evaluation
        ]
    lines.append("")
    content = f"---\n{card_data(config).to_yaml()}\n---\n\n" + "\n".join(lines)
    return str(ModelCard(content))
