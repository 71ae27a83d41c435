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


METRIC_NOTES = {
    "val/nll": "nats per target token of -log p(x | z), z drawn from the posterior q(z | x)",
    "val/ppl": "exp(val/nll): the perplexity of x given its own latent z, not a language "
    "model's perplexity",
    "val/kl": "nats per token, KL(q(z | x) || p(z)): the rate",
    "val/recon_bleu": "BLEU of greedy decoding from the posterior means mu",
}
"""What a metric means, said on the card: text-VAE readers take "ppl" for the model's own
perplexity (issue 30), which the importance-weighted bound estimates, not this."""


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
        **(config.get("space") or {}),  # sdk, sdk_version, app_file: the Space's settings
    )


def model_card(
    config: dict[str, Any],
    vocab_size: int,
    features: FittedFeatures | None = None,
    shipped: dict[str, Any] | None = None,
) -> str:
    """README.md of an exported folder (huggingface_hub.ModelCard): Hub metadata, install
    and usage, architecture, prior scale, rate, training data and tokens, metrics, and the
    folder's feature spec (`features`); for a model that ships with vat (`shipped`, its
    shipped.json record), what it is for, its weights' precision and how to rebuild it.
    Every fact comes from config.json, which `vat export` fills from the model itself, from
    `features` and from `shipped`."""
    from huggingface_hub import ModelCard

    mc, training = config["model_config"], config.get("training") or {}
    card = config.get("card") or {}
    data, metrics = training.get("data") or {}, training.get("metrics") or {}
    repo = shipped["name"] if shipped else card.get("repo_id") or "PATH_OR_REPO_ID"
    spec = features.spec if features is not None else None
    lines = [
        "# Variational Auto-Transformer (VAT)" + (f": {shipped['name']}" if shipped else ""),
        "",
        "A token-level Variational Auto-Transformer trained with "
        "[vat](https://pypi.org/project/variational-auto-transformer/). Every token has a "
        "Gaussian posterior q(z_t | x) = N(mu_t, diag(sigma_t^2)); its sentence features are "
        + describe_features(spec)
        + ".",
        "",
    ]
    lines += _shipped_intro(shipped) if shipped else _install_lines()
    lines += [
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
    ]
    lines += _integration_lines(repo, shipped is not None)
    lines += [
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
    lines += [
        f"- {k}: {v:.4f}" + (f" ({METRIC_NOTES[k]})" if k in METRIC_NOTES else "")
        for k, v in metrics.items()
    ] or ["None recorded with the checkpoint."]
    evaluation = config.get("evaluation") or []
    if evaluation:
        lines += [
            "",
            "## Evaluation",
            "",
            f"`vat evaluate` (SentEval's protocol) on this folder's sentence features "
            f"(`{spec or 'mu/mean/none'}`); percent (Spearman x 100 for STS, accuracy for "
            "classification).",
            "",
            "| task | split | metric | value |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['task']} | {s['split']} | {s['metric']} | {s['value']:.2f} |" for s in evaluation
        ]
    for m in config.get("measurements") or []:  # vat.share.folder.record_measurements
        lines += ["", f"## {m['title']}", "", m["text"], "", "| measure | value |", "|---|---|"]
        lines += [f"| {a} | {b} |" for a, b in m["rows"]]
    if features is not None:
        lines += ["", "## Sentence features", "", _features_paragraph(features)]
    if config.get("space"):
        lines += [
            "",
            "## Explore it in the browser",
            "",
            "This folder is also a Hugging Face Space (`app.py`, `requirements.txt`): the page "
            "of `vat explore`, where you type a sentence and see its reconstruction, each "
            "token's KL, resampled tokens, interpolations, samples and the model's facts. "
            "Locally: `pip install -r requirements.txt && python app.py`, then open "
            "http://127.0.0.1:7860.",
        ]
    if shipped:
        lines += ["", *_shipped_lines(shipped)]
    lines.append("")
    content = f"---\n{card_data(config).to_yaml()}\n---\n\n" + "\n".join(lines)
    return str(ModelCard(content))


def _install_lines() -> list[str]:
    return [
        "## Install",
        "",
        "```bash",
        INSTALL,
        "```",
        "",
        f"(The distribution is `{DISTRIBUTION}`; it installs the Python package `vat` and the "
        "`vat` command. PyPI's `vat` is an unrelated package.)",
        "",
    ]


def _shipped_intro(shipped: dict[str, Any]) -> list[str]:
    lines = [shipped.get("summary") or "", ""]
    if shipped.get("good_for"):
        lines += [f"**Good for:** {shipped['good_for']}", ""]
    if shipped.get("not_for"):
        lines += [f"**Not for:** {shipped['not_for']}", ""]
    return lines + [
        f"It ships with vat (`pip install {DISTRIBUTION}`) and loads by name with no network: "
        f'`vat.load("{shipped["name"]}")`, or `--model {shipped["name"]}` in every `vat` '
        "command. `vat pretrained` lists the models that ship with vat.",
        "",
    ]


def _integration_lines(repo: str, shipped: bool) -> list[str]:
    if shipped:
        # sentence-transformers and transformers know paths and Hub ids, not vat's shipped
        # names: the loaded model builds the SentenceTransformer, and its folder is a path.
        st = [
            "import vat",
            "from vat.integrations.sentence_transformers import to_sentence_transformer",
            "",
            f'st = to_sentence_transformer(vat.load("{repo}"))',
        ]
        auto = f'AutoModel.from_pretrained(vat.load("{repo}").loaded.path)'
    else:
        st = [
            "from sentence_transformers import SentenceTransformer",
            "",
            f'st = SentenceTransformer("{repo}", trust_remote_code=True)',
        ]
        auto = f'AutoModel.from_pretrained("{repo}")'
    return [
        "With sentence-transformers:",
        "",
        "```python",
        *st,
        'embeddings = st.encode(["A man plays a guitar.", "A dog runs."])',
        "```",
        "",
        "With transformers (after `import vat`, which registers the `vat` model type):",
        "",
        "```python",
        "import vat",
        "from transformers import AutoModel",
        "",
        f"model = {auto}",
        "```",
        "",
    ]


def _shipped_lines(shipped: dict[str, Any]) -> list[str]:
    lines = ["## Shipped with vat", ""]
    dtype = shipped.get("dtype")
    match = shipped.get("fp32_match") or {}
    if dtype:
        text = (
            f"- weights: stored in {dtype} (safetensors) and computed in float32; a SHA-256 of "
            "every file (shipped.json) is checked each time the model is loaded"
        )
        lines.append(text)
    if match:
        lines.append(
            f"- against the float32 model, on {match['sentences']} sentences "
            f"({match['from']}): sentence features within {match['max_abs_feature']:.2e} "
            f"(largest absolute difference; lowest cosine {match['min_cosine']:.6f}), token "
            f"means mu within {match['max_abs_mu']:.2e}, and {match['same_reconstructions']} of "
            f"{match['sentences']} greedy reconstructions identical"
        )
    if shipped.get("rebuild"):
        lines.append(f"- rebuild it (in a checkout of vat): `{shipped['rebuild']}`")
    return lines


_SOURCES = {
    "mu": "the posterior means mu",
    "firstlast": "the average of the encoder's first and last layers",
    "layer0": "the encoder's input (subword embeddings plus positions)",
}
_WEIGHTINGS = {
    "mean": "averaged over the sentence's subwords",
    "sum": "summed over the sentence's subwords",
    "start": "taken at the sentence's first subword",
    "precision": "averaged over the subwords with weights exp(-logvar) (precision weighting)",
}


def describe_features(spec: FeatureSpec | None, *, named: bool = True) -> str:
    """A feature spec in words (None: a folder without a spec, whose vectors are mu/mean);
    `named` adds the spec itself."""
    spec = spec or FeatureSpec()
    source = _SOURCES.get(spec.source) or (
        f"the encoder's hidden states after layer {spec.source[len('layer') :]}"
    )
    weighting = _WEIGHTINGS.get(spec.weighting) or (
        f"averaged over the subwords with SIF weights a / (a + p(w)), a = {spec.sif_a:g}"
    )
    post = ""
    if spec.post.startswith("pc"):
        post = f", minus their mean and top {spec.post[2:]} principal components"
    elif spec.post.startswith("whiten"):
        dims = spec.post[len("whiten") :]
        post = ", whitened" + (f" to {dims} dimensions" if dims else "")
    return f"{source}, {weighting}{post}" + (f" (feature spec `{spec}`)" if named else "")


def _features_paragraph(features: FittedFeatures) -> str:
    """Which spec the folder's vectors use, and where each of its statistics came from."""
    spec, fit = features.spec, features.fit
    parts = [
        f"`vat.load(...).encode`, sentence-transformers and MTEB use the feature spec "
        f"`{spec}` (source/weighting/post-processing, see vat.feature_spec): "
        f"{describe_features(spec, named=False)}."
    ]
    if spec.weighting == "sif":
        counted = fit.get("count_files")
        where = (
            "subword counts of " + ", ".join(Path(str(f)).name for f in counted)
            if counted
            else "the subword counts of the model's training text, recorded during training"
        )
        parts.append(f"The SIF weights (`{FOLDER_STATS_NAME}`) come from {where}.")
    if spec.post != "none":
        files = fit.get("files") or []
        names = f": {', '.join(Path(str(f)).name for f in files)}" if files else ""
        parts.append(
            f"The post-processing statistics (`{FOLDER_STATS_NAME}`) were fitted on "
            f"{fit.get('sentences', 0):,} unlabeled sentences "
            f"({fit.get('from', 'given sentences')}{names}) in {fit.get('seconds', '?')} s."
        )
    if not spec.needs_fit:
        parts.append("It needs no fitted statistics.")
    if spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC):
        parts.append(
            "vat gives exported folders this spec by default: among the specs `vat features "
            "compare` scores, it had the best mean of STS12 and STS-B dev over vat's "
            "CPU-trained models when the default was chosen (November 2026), and it needs "
            "only subword counts, nothing fitted on sentences."
        )
    return " ".join(parts)
