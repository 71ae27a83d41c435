"""Export and publish: a model (any source `--model` takes) into an exported folder, with
its card and optional evaluation results, and that folder onto the Hugging Face Hub.

The folder layout and reading it back are `vat.share.hub`; what a model path means is
`vat.share.resolve`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vat.errors import OptionError, VatError
from vat.eval.engine import EvalSettings, evaluate
from vat.eval.scores import task_scores
from vat.eval.tasks.registry import expand_tasks
from vat.features.encoder import FeatureEncoder, folder_spec, resolve_features
from vat.features.spec import DEFAULT_EXPORT_SPEC, FeatureSpec, FittedFeatures
from vat.geometry.probes import default_senteval_dir
from vat.share.checkpoint import LoadedVAT, load_checkpoint
from vat.share.hub import (
    CONFIG_NAME,
    HUB_PATTERNS,
    check_output_dir,
    is_pretrained_dir,
    read_config,
    resolve,
    save_loaded,
)
from vat.share.model_card import DEFAULT_LANGUAGE, DEFAULT_LICENSE, training_facts
from vat.share.resolve import load_model, resolve_model


# -- export ----------------------------------------------------------------------------------
def export_checkpoint(
    ckpt_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    features: str | None = None,
    **fit_options: Any,
) -> Path:
    """A training checkpoint (.ckpt) into a pretrained folder; trainer state is dropped.

    The card and config.json record the step and epoch, the best score the run's
    ModelCheckpoint saw, and, when the checkpoint sits in a run directory
    (RUN/checkpoints/x.ckpt), the training files named in RUN/config.yaml.
    `features` is the folder's feature spec (default vat.features.spec.DEFAULT_EXPORT_SPEC),
    fitted as `vat.features.encoder.resolve_features` does (`fit_options` are its keywords).
    """
    ckpt_path = Path(ckpt_path)
    if ckpt_path.is_dir():
        raise VatError(f"{ckpt_path} is a directory; export takes a training checkpoint (.ckpt)")
    loaded = load_checkpoint(ckpt_path)
    check_output_dir(output_dir, overwrite)  # before any fitting
    fitted = export_features(ckpt_path, loaded, features, DEFAULT_EXPORT_SPEC, fit_options)
    return save_loaded(
        output_dir,
        loaded,
        training=training_facts(ckpt_path),
        overwrite=overwrite,
        features=fitted,
    )


def export_features(
    path: str | os.PathLike,
    loaded: LoadedVAT,
    features: str | None,
    default: str,
    fit_options: dict[str, Any],
) -> FittedFeatures:
    """The feature spec an exported folder carries, with its statistics: `features` if given
    (fitted as `resolve_features` does), else `default`; a default that cannot be fitted
    for this model (e.g. a checkpoint without token counts) falls back to the mean of mu
    with a warning, and the folder and its card name the spec they hold."""
    spec = FeatureSpec.parse(features or default)
    fit_options = {**fit_options, "save": False}  # the folder holds them; nothing beside it
    try:
        return resolve_features(path, loaded.model, loaded.tokenizer, spec, **fit_options)
    except VatError as e:
        if features is not None:
            raise
        print(f"warning: exporting with mu/mean/none, not {spec} ({e})", file=sys.stderr)
        return FittedFeatures(FeatureSpec())


def export_model(
    model: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    overwrite: bool = False,
    license: str | None = None,
    language: str | None = None,
    repo_id: str | None = None,
    evaluate: str | Sequence[str] | None = None,
    data_dir: str | os.PathLike | None = None,
    device: str | torch.device = "cpu",
    features: str | None = None,
    **fit_options: Any,
) -> Path:
    """Whatever `--model` names (a .ckpt, a run folder, an exported folder, a Hub id) as a
    pretrained folder at `output_dir`. The card's facts come from the model itself: a
    checkpoint's recorded training (`vat.share.training_record`), an exported folder's config.json.

    `license` / `language` go on the card (defaults: an exported folder's, else
    vat.share.model_card.DEFAULT_LICENSE / DEFAULT_LANGUAGE); `repo_id` names the model in the
    card's usage snippets. `evaluate` (task names or groups of `vat evaluate`) runs the
    SentEval harness on the model (mean pooling, SentEval data in `data_dir`, default
    $VAT_SENTEVAL_DIR) and records each task's score (`vat.eval.scores`) in config.json and
    the card's model-index. `features` is the folder's feature spec (default: an exported
    folder's own, else vat.features.spec.DEFAULT_EXPORT_SPEC), fitted on the model's training
    sentences or `fit_options` (`resolve_features`'s keywords: fit_files, count_files, ...).
    """

    tasks = _evaluation_tasks(evaluate)  # unknown task names fail before anything loads
    source = resolve_model(model)
    if source.kind == "checkpoint":
        training, old = training_facts(source.location), {}
    else:
        old = read_config(resolve(source.location))
        training = old.get("training") or {}
    check_output_dir(output_dir, overwrite)  # before anything is fitted or evaluated
    loaded = load_model(source, device)
    where = resolve(source.location) if source.kind == "hub" else source.location
    default = (folder_spec(where) if source.kind != "checkpoint" else None) or DEFAULT_EXPORT_SPEC
    fitted = export_features(where, loaded, features, default, fit_options)
    card = dict(old.get("card") or {})
    card["license"] = license or card.get("license") or DEFAULT_LICENSE
    card["language"] = language or card.get("language") or DEFAULT_LANGUAGE
    card["name"] = Path(output_dir).name  # the model-index's name unless a repo id is given
    if repo_id:
        card["repo_id"] = repo_id
    extra: dict[str, Any] = {"card": card}
    # scores describe the folder's vectors: an earlier export's only while the spec is its own
    evaluation = old.get("evaluation") if str(fitted.spec) == default else None
    if tasks:
        evaluation = list(_evaluate(loaded, fitted, tasks, data_dir).values())
    if evaluation:
        extra["evaluation"] = evaluation
    return save_loaded(
        output_dir, loaded, training=training, overwrite=overwrite, extra=extra, features=fitted
    )


def _evaluation_tasks(evaluate: str | Sequence[str] | None) -> list[str]:
    if not evaluate:
        return []

    try:
        return expand_tasks(evaluate if isinstance(evaluate, str) else ",".join(evaluate))
    except VatError as e:
        raise OptionError("evaluate", str(e)) from None


def _evaluate(
    loaded: LoadedVAT, fitted: FittedFeatures, tasks: list[str], data_dir
) -> dict[str, dict]:
    """{task: score} of the harness on `loaded` with the folder's feature spec `fitted` (the
    vectors vat.load, sentence-transformers and MTEB give; cosine protocol for STS-B)."""
    encode = FeatureEncoder(loaded.model, loaded.tokenizer, fitted)

    def encoder(sentences: list[str]):
        return encode(sentences, batch_size=128)

    folder = data_dir if data_dir is not None else default_senteval_dir()
    device = next(loaded.model.parameters()).device
    results, _ = evaluate(encoder, tasks, folder, EvalSettings(device=str(device), progress=False))
    return task_scores(results, tasks)


# -- the Hub ---------------------------------------------------------------------------------
def push_to_hub(
    source: str | os.PathLike | LoadedVAT,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload VAT",
    api: Any = None,
) -> Any:
    """Upload a pretrained VAT to the Hub repo `repo_id` (created if missing); returns the
    `huggingface_hub.CommitInfo`.

    `source` is a pretrained folder, a training checkpoint (exported to a temp folder
    first) or a loaded model. `api` defaults to `huggingface_hub.HfApi(token=token)`.
    """
    from huggingface_hub import HfApi

    api = api if api is not None else HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="vat-push-") as tmp:
        folder = _folder_for(source, Path(tmp) / "model")
        try:
            api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=str(folder),
                repo_type="model",
                revision=revision,
                commit_message=commit_message,
                allow_patterns=list(HUB_PATTERNS),
            )
        except Exception as e:  # no network (httpx/requests errors), offline mode, no login
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise VatError(
                f"cannot push to the Hugging Face Hub repo {repo_id} ({first[:200]})"
            ) from None


def _folder_for(source: str | os.PathLike | LoadedVAT, scratch: Path) -> Path:
    if isinstance(source, LoadedVAT):
        return save_loaded(scratch, source)
    p = Path(source)
    if is_pretrained_dir(p):
        read_config(p)  # refuse to upload a folder that is not a vat folder
        return p
    if p.is_file():
        return export_checkpoint(p, scratch)
    raise VatError(f"{p} is neither a vat folder (with {CONFIG_NAME}) nor a checkpoint file")
