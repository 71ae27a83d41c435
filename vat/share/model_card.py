"""The model card (README.md) of an exported folder.

`model_card` renders config.json's contents (the training facts of
`vat.share.training_record.training_facts` included) as the folder's README.md with a Hugging
Face Hub metadata header.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vat.feature_spec import DEFAULT_EXPORT_SPEC, FOLDER_STATS_NAME, FeatureSpec, FittedFeatures

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


def model_card(
    config: dict[str, Any], vocab_size: int, features: FittedFeatures | None = None
) -> str:
    """README.md of an exported folder (huggingface_hub.ModelCard): Hub metadata, install
    and usage, architecture, prior scale, rate, training data and tokens, metrics, and the
    folder's feature spec (`features`). Every fact comes
    from config.json, which `vat export` fills from the model itself, and from `features`."""
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
    if features is not None:
        lines += ["", "## Sentence features", "", _features_paragraph(features)]
    lines.append("")
    content = f"---\n{card_data(config).to_yaml()}\n---\n\n" + "\n".join(lines)
    return str(ModelCard(content))


def _features_paragraph(features: FittedFeatures) -> str:
    """Which spec the folder's vectors use, and how its statistics were fitted."""
    spec, fit = features.spec, features.fit
    how = (
        f" Its statistics (`{FOLDER_STATS_NAME}`) were fitted on {fit.get('sentences', 0)} "
        f"unlabeled sentences ({fit.get('from', 'given sentences')}) in "
        f"{fit.get('seconds', '?')} s."
        if spec.needs_fit
        else ""
    )
    if spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC):
        how += (
            " This is vat's default spec for exported models, chosen by the mean of STS12 "
            "(five sets) and STS-B dev over the CPU-trained models in vat's RESULTS.md "
            '("Sentence features").'
        )
    return (
        f"`vat.load(...).encode`, sentence-transformers and MTEB use the feature spec "
        f"`{spec}` (source/weighting/post-processing, see vat.feature_spec).{how}"
    )
