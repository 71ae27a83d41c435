"""The model card (README.md) of an exported folder: config.json's contents (the training
facts of `vat.share.training_record` included) with a Hugging Face Hub metadata header."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vat.feature_spec import DEFAULT_EXPORT_SPEC, FOLDER_STATS_NAME, FeatureSpec, FittedFeatures

DISTRIBUTION = "variational-auto-transformer"  # PyPI's "vat" is an unrelated package
INSTALL = f'pip install "{DISTRIBUTION}[integrations]"'
DEFAULT_LICENSE = "apache-2.0"
DEFAULT_LANGUAGE = "en"


METRIC_NOTES = {
    "val/nll": "reconstruction NLL (given z): nats per target token of -log p(x | z), z drawn "
    "from the posterior q(z | x)",
    "val/ppl": "reconstruction perplexity (given z): exp(val/nll), the perplexity of x given "
    "its own latent z drawn from q(z | x); not a language model's perplexity of x, which "
    "`vat score` estimates",
    "val/kl": "nats per token, KL(q(z | x) || p(z)): the rate",
    "val/recon_bleu": "BLEU of the reconstructions decoded from the posterior means mu",
}  # text-VAE readers take "ppl" for the model's own perplexity, which `vat score` estimates


def card_data(config: dict[str, Any], spec: FeatureSpec | None = None) -> Any:
    """The Hub metadata of a folder's config.json, its model-index the scores of `spec`."""
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
        if scored_spec(s, spec) == str(spec or FeatureSpec())
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
    features: FittedFeatures | FeatureSpec | None = None,
    shipped: dict[str, Any] | None = None,
) -> str:
    """README.md of an exported folder, every sentence made from config.json, `features`
    (`folder_features`) and, for a shipped model, its shipped.json record."""
    from huggingface_hub import ModelCard

    mc, training = config["model_config"], config.get("training") or {}
    card = config.get("card") or {}
    data, metrics = training.get("data") or {}, training.get("metrics") or {}
    repo = shipped["name"] if shipped else card.get("repo_id") or "PATH_OR_REPO_ID"
    spec = features if isinstance(features, FeatureSpec | None) else features.spec
    sentence = spec is not None and spec.source == "sentence"
    dim = (spec.whiten_dim if spec is not None else None) or int(  # whitenK: K
        mc["sentence_dim"] if sentence else mc["d_model"]
    )
    lines = [
        "# Variational Auto-Transformer (VAT)" + (f": {shipped['name']}" if shipped else ""),
        "",
        "A token-level Variational Auto-Transformer trained with "
        "[vat](https://pypi.org/project/variational-auto-transformer/). Every token has a "
        "Gaussian posterior q(z_t | x) = N(mu_t, diag(sigma_t^2)); its sentence features "
        f"({dim} dimensions) are " + describe_features(spec) + ".",
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
        f'embeddings = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, {dim})',
        "print(model.similarity(embeddings, embeddings))",
        'print(model.reconstruct(["A man plays a guitar."]))',
        "```",
        "",
    ]
    lines += _integration_lines(repo, shipped is not None, spec)
    lines += ["## Architecture", "", "| field | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in mc.items()]
    lines += [f"| tokenizer vocabulary | {vocab_size} |", "", "## Prior and rate", ""]
    lines.append(f"- prior: N(0, s^2 I) with s = {config['prior_std']:g}")
    for key, label in (("val/kl", "validation"), ("train/kl", "training")):
        if key in metrics:
            lines.append(f"- rate ({label}): {metrics[key]:.3f} nats per token (KL to the prior)")
    lines += ["", "## Training", ""]
    if data.get("hf_dataset"):
        cfg = f", config {data['hf_config']}" if data.get("hf_config") else ""
        field = f", field {data['hf_text_field']}" if data.get("hf_text_field") else ""
        lines.append(f"- data: the Hub dataset `{data['hf_dataset']}`{cfg}{field}")
    elif data.get("train_files"):
        # file names only: config.json records where they were on the training machine
        lines.append(f"- data: {_names(data['train_files'])}{_records_note(data)}")
    lines += _token_lines(training)
    lines += _noise_lines(training.get("noise"))
    lines += _sentence_lines(training.get("sentence_latent"))
    for key, label in (
        ("sentences_seen", "training sentences"),
        ("global_step", "optimizer steps"),
        ("epoch", "epoch"),
    ):
        if key in training:
            value = training[key]
            lines.append(f"- {label}: {f'{value:,}' if isinstance(value, int) else value}")
    if "source_checkpoint" in training:
        lines.append(f"- exported from: {Path(str(training['source_checkpoint'])).name}")
    if lines[-1] == "":
        lines.append("Not recorded.")
    lines += ["", "## Metrics", ""]
    if metrics:
        lines += [
            "Recorded with the checkpoint during training (`val/`: the validation data, "
            "`train/`: the training batches); they measure the model itself, not the sentence "
            "features.",
            "",
        ]
    lines += [
        f"- {k}: {v:.4f}" + (f" ({METRIC_NOTES[k]})" if k in METRIC_NOTES else "")
        for k, v in metrics.items()
    ] or ["None recorded with the checkpoint."]
    lines += _evaluation_lines(config.get("evaluation") or [], spec)
    for m in config.get("measurements") or []:  # vat.share.folder.record_measurements
        lines += ["", f"## {m['title']}", "", m["text"], "", "| measure | value |", "|---|---|"]
        lines += [f"| {a} | {b} |" for a, b in m["rows"]]
    if features is not None:
        lines += ["", "## Sentence features", "", _features_paragraph(features, config, dim)]
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
    content = f"---\n{card_data(config, spec).to_yaml()}\n---\n\n" + "\n".join(lines)
    return str(ModelCard(content))


def scored_spec(entry: dict[str, Any], spec: FeatureSpec | None) -> str:
    """The feature spec a recorded score measured (an old score's: the folder's `spec`)."""
    return str(entry.get("features") or spec or FeatureSpec())


def _evaluation_lines(evaluation: list[dict[str, Any]], spec: FeatureSpec | None) -> list[str]:
    if not evaluation:
        return []
    now = str(spec or FeatureSpec())
    lines = ["", "## Evaluation", ""]
    for scored in dict.fromkeys(scored_spec(s, spec) for s in evaluation):
        rows = [s for s in evaluation if scored_spec(s, spec) == scored]
        if scored == now:
            lines.append(
                f"`vat evaluate` (SentEval's protocol) on this folder's sentence features "
                f"(`{scored}`); percent (Spearman x 100 for STS, accuracy for classification)."
            )
        else:
            lines.append(
                f"Recorded by `vat evaluate` (SentEval's protocol) for the feature spec "
                f"`{scored}`, which this folder no longer uses (it now gives `{now}`, not "
                "scored): they do not describe its vectors. Percent (Spearman x 100 for STS, "
                "accuracy for classification)."
            )
        lines += ["", "| task | split | metric | value |", "|---|---|---|---|"]
        lines += [
            f"| {s['task']} | {s['split']} | {s['metric']} | {s['value']:.2f} |" for s in rows
        ]
        lines.append("")
    return lines[:-1]


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


def _integration_lines(repo: str, shipped: bool, spec: FeatureSpec | None) -> list[str]:
    # The loaded model builds the SentenceTransformer: nothing in the folder runs, which
    # matters for a Hub id. sentence-transformers and transformers know paths and Hub ids,
    # not vat's shipped names, so a shipped model's folder is its loaded path.
    st = [
        "import vat",
        "from vat.integrations.sentence_transformers import to_sentence_transformer",
        "",
        f'st = to_sentence_transformer(vat.load("{repo}"))',
    ]
    if shipped:
        auto = f'AutoModel.from_pretrained(vat.load("{repo}").loaded.path)'
        flag = []
    else:
        auto = f'AutoModel.from_pretrained("{repo}")'
        flag = [
            "`to_sentence_transformer` builds the module from the installed vat package and runs "
            "no code from the folder. "
            f'`SentenceTransformer("{repo}", trust_remote_code=True)` loads the same model '
            "by name: the flag runs the Python code that the folder's `modules.json` names, the "
            "vat package's own module for a folder `vat export` wrote; from a Hub id, pass it "
            "only for repositories you trust.",
            "",
        ]
    # vat.integrations.transformers_auto: encode follows the folder's spec (features_for),
    # forward gives the token means, as every transformers encoder gives its hidden states
    vectors = f"the `{spec}` vectors" if spec is not None else "the mean of mu"
    return [
        "With sentence-transformers (the same vectors as `model.encode`):",
        "",
        "```python",
        *st,
        'embeddings = st.encode(["A man plays a guitar.", "A dog runs."])',
        "```",
        "",
        *flag,
        "With transformers (after `import vat`, which registers the `vat` model type):",
        "",
        "```python",
        "import vat",
        "from transformers import AutoModel",
        "",
        f"model = {auto}",
        f'embeddings = model.encode(["A man plays a guitar.", "A dog runs."])  # {vectors}',
        "```",
        "",
        "`model.encode` gives the same vectors as `vat.load(...).encode`; calling the model on "
        "token ids (`model.tokenizer`, vat's own) gives each token's posterior mean mu as "
        "`last_hidden_state`, not the sentence features.",
        "",
    ]


def _shipped_lines(shipped: dict[str, Any]) -> list[str]:
    lines = ["## Shipped with vat", ""]
    dtype = shipped.get("dtype")
    match = shipped.get("fp32_match") or {}
    if dtype:
        lines.append(
            f"- weights: stored in {dtype} (safetensors) and computed in float32; every file's "
            "size (shipped.json) is checked each time the model is loaded, and its SHA-256 by "
            "vat's tests"
        )
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
    "sentence": "the mean of the sentence latent s (attention pooling of the encoder's last layer)",
}
_WEIGHTINGS = {
    "mean": "averaged over the sentence's subwords",
    "sum": "summed over the sentence's subwords",
    "start": "taken at the sentence's first subword",
    "precision": "averaged over the subwords with weights exp(-logvar) (precision weighting)",
}
# Why vat exports folders with DEFAULT_EXPORT_SPEC, said on the card itself: its readers have
# the folder, not vat's repository (RESULTS.md, "The default for exported models").
DEFAULT_SPEC_REASON = (
    "vat gives exported folders this spec by default: among the specs `vat features compare` "
    "scores, it had the best mean of STS12 and STS-B dev on both models vat compared them on "
    "(11.2 and 5.4 Spearman points above the mean of mu), and it needs only the subword "
    "counts of the training text, nothing fitted on sentences."
)


def describe_features(spec: FeatureSpec | None, *, named: bool = True) -> str:
    """A feature spec in words (None: mu/mean); `named` adds the spec itself."""
    spec = spec or FeatureSpec()
    source = _SOURCES.get(spec.source) or (
        f"the encoder's hidden states after layer {spec.source[len('layer') :]}"
    )
    # vat.features.encoder.weighted_pool: (1/n) sum_t w_t x_t, not a weight-normalised mean
    weighting = (
        "one vector per sentence"
        if spec.source == "sentence"
        else _WEIGHTINGS.get(spec.weighting)
        or (
            f"each subword's vector times its SIF weight a / (a + p(w)) (p(w): the subword's "
            f"frequency, a = {spec.sif_a:g}), averaged over the sentence's subwords"
        )
    )
    post = ""
    if spec.pcs:
        post = f", minus their mean and top {spec.pcs} principal components"
    elif spec.post.startswith("whiten"):
        dims = spec.whiten_dim
        post = ", whitened" + (f" to {dims} dimensions" if dims else "")
    return f"{source}, {weighting}{post}" + (f" (feature spec `{spec}`)" if named else "")


def folder_features(
    spec: FeatureSpec | None, stats_path: str | os.PathLike
) -> FittedFeatures | FeatureSpec | None:
    """The spec with the statistics `stats_path` holds when they are its own, else the bare spec."""
    if spec is None:
        return None
    if not spec.needs_fit:
        return FittedFeatures(spec)
    path = Path(stats_path)
    if path.is_file():
        held = FittedFeatures.load(path)
        if held.spec == spec:
            return held
    return spec


def _records_note(data: dict[str, Any]) -> str:
    records = data.get("train_file_records")
    if not isinstance(records, list) or not records:
        return ""
    sizes = [r.get("bytes") if isinstance(r, dict) else None for r in records]
    ok = all(isinstance(b, int) and not isinstance(b, bool) for b in sizes)
    total = f", {sum(sizes) / 2**20:.1f} MiB" if ok else ""
    return (
        f" ({len(records)} files{total}; config.json records each by its path inside the data "
        "folder, else its name, with its size and digest)"
    )


NOISE_LABELS = (
    ("decoder_word_dropout", "decoder word dropout {:g} (Bowman et al. 2016)"),
    ("encoder_delete", "encoder-input deletion {:g}"),
    ("encoder_mask", "encoder-input masking {:g}"),
    ("encoder_shuffle_distance", "encoder-input local shuffle over at most {} places"),
)


def _noise_lines(noise: Any) -> list[str]:
    """The training's input noise: a denoising autoencoder is not the paper's setting."""
    if not isinstance(noise, dict):
        return []
    parts = [
        label.format(noise[key])
        for key, label in NOISE_LABELS
        if isinstance(noise.get(key), int | float) and noise[key] > 0
    ]
    if not parts:
        return []
    replaced = "<unk>" if noise.get("replace_with", "unk") == "unk" else "a random word"
    if noise.get("decoder_word_dropout") or noise.get("encoder_mask"):
        parts.append(f"a dropped or masked word became {replaced}")
    return [f"- input noise in training (validation and evaluation were clean): {'; '.join(parts)}"]


def _sentence_lines(sentence: Any) -> list[str]:
    """The sentence latent's training settings (its size is in the model's config)."""
    if not isinstance(sentence, dict) or not sentence.get("dim"):
        return []
    parts = [f"{sentence['dim']} dimensions"] + [
        label.format(sentence[key])
        for key, label in (
            ("bow_weight", "a bag-of-words loss from it, weight {:g}"),
            ("memory_dropout", "token latents dropped from the decoder's memory with p = {:g}"),
            ("drop_all_rate", "all of a sentence's token latents dropped in {:g} of sentences"),
        )
        if isinstance(sentence.get(key), int | float) and sentence[key] > 0
    ]
    return [
        f"- a sentence latent beside the token latents (training only drops): {'; '.join(parts)}"
    ]


def _token_lines(training: dict[str, Any]) -> list[str]:
    """The training tokens, with those of the model an --init-from run started from."""
    seen, total = training.get("tokens_seen"), training.get("tokens_total")
    start = training.get("init_from")
    if not isinstance(seen, int):
        return []
    if not isinstance(start, dict):
        return [f"- training tokens: {seen:,}"]
    model = start.get("model") or "another model"
    if isinstance(total, int) and not isinstance(total, bool):
        tokens = f"{seen:,} (this run) + {total - seen:,} (started from {model}) = {total:,}"
    else:
        tokens = f"{seen:,} (this run; started from {model}, whose earlier tokens are not recorded)"
    kind = {
        "shipped": "a model that ships with vat",
        "folder": "an exported folder",
        "checkpoint": "a training checkpoint",
        "hub": "a Hugging Face Hub model",
    }.get(str(start.get("kind")), "")
    step = start.get("global_step")
    parts = [kind] if kind else []
    if isinstance(step, int) and not isinstance(step, bool):
        parts.append(f"at its step {step:,}")
    what = f" ({', '.join(parts)})" if parts else ""
    return [f"- training tokens: {tokens}", f"- started from: {model}{what}"]


def _names(files: Any) -> str:
    """File names: the exporting machine's folders mean nothing to a folder's users."""
    return ", ".join(Path(str(f)).name for f in files)


def _features_paragraph(
    features: FittedFeatures | FeatureSpec, config: dict[str, Any], dim: int
) -> str:
    spec = features if isinstance(features, FeatureSpec) else features.spec
    parts = [
        f"`vat.load(...).encode`, `AutoModel.from_pretrained(...).encode`, sentence-transformers "
        f"and MTEB give {dim}-dimensional vectors with the feature spec `{spec}` "
        f"(source/weighting/post-processing): {describe_features(spec, named=False)}."
    ]
    if not spec.needs_fit:
        parts.append("It needs no fitted statistics: the vectors come from the weights alone.")
    elif isinstance(features, FeatureSpec):
        parts.append(_missing_statistics(spec, config))
    else:
        if spec.weighting == "sif":
            parts.append(_sif_source(features.fit))
        if spec.post != "none":
            parts.append(_post_source(spec, features.fit))
    if spec == FeatureSpec.parse(DEFAULT_EXPORT_SPEC):
        parts.append(DEFAULT_SPEC_REASON)
    return " ".join(parts)


def _sif_source(fit: dict[str, Any]) -> str:
    counted, source = fit.get("count_files"), fit.get("counts_from")
    tokens = fit.get("count_tokens")
    of = f" ({tokens:,} subwords)" if isinstance(tokens, int) and tokens > 0 else ""
    if counted:
        where = f"the subword counts of {_names(counted)}{of}"
    elif source in (None, "training"):
        # features_for takes the model's recorded counts unless count files are named
        # (records from before counts_from was written all came that way)
        where = f"the subword counts of the model's training text{of}, recorded during training"
    else:
        where = "subword counts that were given directly (their source is not recorded)"
    return f"The SIF weights (`{FOLDER_STATS_NAME}`) come from {where}."


def _post_source(spec: FeatureSpec, fit: dict[str, Any]) -> str:
    what = "mean and principal components" if spec.pcs else "whitening mean and matrix"
    n = fit.get("sentences")
    count = (
        f"{n:,} sentences"
        if isinstance(n, int) and n > 0
        else "sentences (how many is not recorded)"
    )
    files, origin = fit.get("files") or [], fit.get("from")
    seed = f" (seed {fit['seed']})" if files and isinstance(fit.get("seed"), int) else ""
    if files:
        where = f"sampled{seed} from {_names(files)}"
    elif origin:
        where = f"from {origin}"
    else:
        where = "given to the fit directly, not read from files"
    took = fit.get("seconds")
    took = f" in {took:g} s" if isinstance(took, int | float) and not isinstance(took, bool) else ""
    text = f"The {what} (`{FOLDER_STATS_NAME}`) were fitted on {count} {where}{took}."
    if fit.get("transductive"):
        text += (
            " It was fitted transductively (evaluation data allowed among those sentences), "
            "so scores on that data may overstate what unseen text gets."
        )
    return text


def _missing_statistics(spec: FeatureSpec, config: dict[str, Any]) -> str:
    needs = []
    if spec.weighting == "sif":
        needs.append(
            "its SIF weights come from the subword counts config.json records"
            if config.get("token_counts")
            else "its SIF weights need the training text's subword counts, which this folder "
            "does not record (`count_files` of `vat.load(...).feature_encoder` counts them)"
        )
    if spec.post != "none":
        needs.append(
            f"its {spec.post} statistics need sentences, and an exported folder carries no "
            "training text (`--fit-files`, or `fit_files` of `vat.load(...).feature_encoder`, "
            "names some)"
        )
    return (
        f"This folder does not hold the statistics this spec needs (`{FOLDER_STATS_NAME}` is "
        "absent or holds another spec's), so its vectors are refused until they are fitted; "
        f"naming the spec fits them and stores them in the folder (`--features {spec}`, or "
        f'`vat.load(DIR).feature_encoder("{spec}")`): ' + "; ".join(needs) + "."
    )
