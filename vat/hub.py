"""Share a trained VAT: a Hugging Face style folder, the Hub, and exporting a checkpoint.

A pretrained folder (what `save_pretrained` and `export_checkpoint` write, what
`from_pretrained` and every `--ckpt` read) holds:

    config.json        VATConfig, prior_std, length histogram, format version, training facts
    model.safetensors  the weights (safetensors; the tied embedding / lm_head stored once)
    tokenizer.json     the tokenizers JSON (vat's special-token layout)
    README.md          a generated model card

`from_pretrained` also takes a Hub repo id ("user/name"), fetched with
`huggingface_hub.snapshot_download`; `push_to_hub` uploads such a folder with
`huggingface_hub.HfApi.upload_folder`. Nothing here runs pickled code: the weights are
safetensors and the metadata JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vat.checkpoint import CheckpointError, LoadedVAT
from vat.errors import VatError
from vat.model import VAT, VATConfig
from vat.model_card import model_card, training_facts
from vat.tokenizer import VATTokenizer

HUB_FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TOKENIZER_NAME = "tokenizer.json"
CARD_NAME = "README.md"
# sentence-transformers reads these three (see vat.integrations.sentence_transformers)
ST_MODULES_NAME = "modules.json"
ST_MODULE_CONFIG_NAME = "sentence_vat_config.json"
ST_CONFIG_NAME = "config_sentence_transformers.json"
ST_MODULE_TYPE = "vat.integrations.sentence_transformers.VATSentenceEncoder"
FILES = (
    CONFIG_NAME,
    WEIGHTS_NAME,
    TOKENIZER_NAME,
    CARD_NAME,
    ST_MODULES_NAME,
    ST_MODULE_CONFIG_NAME,
    ST_CONFIG_NAME,
)
# Present when the folder's feature spec needs statistics (vat.feature_spec, issue 23).
FEATURES_NAME = "features.safetensors"
HUB_PATTERNS = (*FILES, FEATURES_NAME)  # what push_to_hub uploads and from_pretrained fetches


# -- writing ---------------------------------------------------------------------------------
def save_pretrained(
    directory: str | os.PathLike,
    model: VAT,
    tokenizer: VATTokenizer,
    prior_std: float,
    length_histogram: Sequence[int] = (),
    *,
    training: dict[str, Any] | None = None,
    overwrite: bool = False,
    features: Any = None,
) -> Path:
    """Write the pretrained folder for `model` at `directory`, atomically (a temp folder
    beside it, renamed into place). An existing non-empty `directory` needs `overwrite`.

    `training` (optional, plain JSON types) goes into config.json and the model card: e.g.
    {"global_step": ..., "train_files": [...], "metrics": {...}}. `features` (a
    vat.feature_spec.FittedFeatures) becomes the folder's feature spec and statistics.
    """
    with _atomic_dir(directory, overwrite) as tmp:
        write_model_files(tmp, model, tokenizer, prior_std, length_histogram, training or {})
        write_sentence_transformers_files(tmp)
        if features is not None:
            from vat.feature_encoder import write_folder_features

            write_folder_features(tmp, features)
    return Path(directory)


def save_loaded(
    directory: str | os.PathLike,
    loaded: LoadedVAT,
    *,
    training: dict[str, Any] | None = None,
    overwrite: bool = False,
    features: Any = None,
) -> Path:
    """`save_pretrained` of what `vat.checkpoint.load_vat` / `from_pretrained` returned."""
    return save_pretrained(
        directory,
        loaded.model,
        loaded.tokenizer,
        loaded.prior_std,
        loaded.length_histogram,
        training=training,
        overwrite=overwrite,
        features=features,
    )


def write_model_files(
    folder: Path,
    model: VAT,
    tokenizer: VATTokenizer,
    prior_std: float,
    length_histogram: Sequence[int],
    training: dict[str, Any],
    card: bool = True,
) -> None:
    """config.json, model.safetensors, tokenizer.json and (with `card`) README.md in `folder`."""
    from safetensors.torch import save_model

    config = {
        "model_type": "vat",
        "format": "vat-pretrained",
        "format_version": HUB_FORMAT_VERSION,
        "model_config": model.config.to_dict(),
        "prior_std": float(prior_std),
        "length_histogram": [int(c) for c in length_histogram],
        "training": training,
    }
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    # save_model (not save_file) finds tensors that share storage, here the tied
    # embed.weight / lm_head.weight, and stores one of them; load_model re-ties them.
    save_model(model, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    tokenizer.save(folder / TOKENIZER_NAME)
    if card:
        (folder / CARD_NAME).write_text(model_card(config, tokenizer.vocab_size), encoding="utf-8")


def write_sentence_transformers_files(folder: Path, pooling: str = "mean") -> None:
    """modules.json (one module: vat's VATSentenceEncoder), its settings, and
    config_sentence_transformers.json (cosine similarity), so that
    `SentenceTransformer(folder, trust_remote_code=True)` loads the folder."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_MODULE_TYPE}]
    st_config = {
        "model_type": "SentenceTransformer",
        "similarity_fn_name": "cosine",
        "prompts": {},
        "default_prompt_name": None,
    }
    for name, obj in (
        (ST_MODULES_NAME, modules),
        (ST_MODULE_CONFIG_NAME, {"pooling": pooling}),
        (ST_CONFIG_NAME, st_config),
    ):
        (folder / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


@contextmanager
def _atomic_dir(directory: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """Yield an empty temp folder beside `directory`; on success it replaces `directory`
    by a rename, so a failed write never leaves a half-written or half-replaced folder."""
    out = _check_output_dir(directory, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give it a plain mkdir's mode
        if not out.exists():
            os.replace(tmp, out)
            return
        # Replacing a folder takes two renames (POSIX has no portable directory swap): move
        # the old one aside, move the new one in, and put the old one back if that fails.
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
        os.replace(out, old / "x")
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old / "x", out)  # if this fails too, the old folder stays in `old`
            old.rmdir()
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _check_output_dir(directory: str | os.PathLike, overwrite: bool) -> Path:
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise VatError(f"output {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise VatError(
            f"output {out} exists and is not empty; pass overwrite (--overwrite) to replace it"
        )
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    `features` is the folder's feature spec (default vat.feature_spec.DEFAULT_EXPORT_SPEC),
    fitted as `vat.feature_encoder.resolve_features` does (`fit_options` are its keywords).
    """
    from vat.checkpoint import load_vat
    from vat.feature_spec import DEFAULT_EXPORT_SPEC, FeatureSpec

    ckpt_path = Path(ckpt_path)
    if ckpt_path.is_dir():
        raise VatError(f"{ckpt_path} is a directory; export takes a training checkpoint (.ckpt)")
    loaded = load_vat(ckpt_path)
    _check_output_dir(output_dir, overwrite)  # before any fitting
    spec = FeatureSpec.parse(features or DEFAULT_EXPORT_SPEC)
    fitted = None
    if features is not None or spec != FeatureSpec():
        import sys

        from vat.feature_encoder import resolve_features

        fit_options.setdefault("save", False)  # the folder holds them; nothing beside the ckpt
        try:
            fitted = resolve_features(
                ckpt_path, loaded.model, loaded.tokenizer, spec, **fit_options
            )
        except VatError as e:
            if features is not None:
                raise
            # the default spec cannot be fitted for this checkpoint: keep the mean of mu
            print(f"warning: exporting with mu/mean/none, not {spec} ({e})", file=sys.stderr)
    if fitted is None:  # the folder still names its spec (and the card says so)
        from vat.feature_spec import FittedFeatures

        fitted = FittedFeatures(FeatureSpec())
    return save_loaded(
        output_dir,
        loaded,
        training=training_facts(ckpt_path),
        overwrite=overwrite,
        features=fitted,
    )


# -- reading ---------------------------------------------------------------------------------
def is_pretrained_dir(path: str | os.PathLike) -> bool:
    """True for a folder holding a config.json (what `load_vat` dispatches here)."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_NAME).is_file()


def from_pretrained(
    path_or_repo_id: str | os.PathLike,
    *,
    device: str | torch.device = "cpu",
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> LoadedVAT:
    """Model (eval mode), tokenizer and metadata from a pretrained folder or a Hub repo id."""
    folder = resolve(path_or_repo_id, revision=revision, token=token, cache_dir=cache_dir)
    config = read_config(folder)
    try:
        model_config = VATConfig.from_dict(config["model_config"])
        tokenizer = VATTokenizer.from_file(folder / TOKENIZER_NAME)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as e:
        raise CheckpointError(f"{folder}: unusable config.json or tokenizer.json ({e})") from None
    if tokenizer.vocab_size > model_config.vocab_size:
        raise CheckpointError(
            f"{folder}: its tokenizer has {tokenizer.vocab_size} tokens but the model only "
            f"{model_config.vocab_size}"
        )
    model = VAT(model_config)
    _load_weights(model, folder / WEIGHTS_NAME)
    model.to(device).eval()
    return LoadedVAT(
        model,
        tokenizer,
        float(config["prior_std"]),
        [int(c) for c in config.get("length_histogram", [])],
        str(path_or_repo_id),
    )


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """config.json of a pretrained folder, checked for format and version."""
    path = Path(folder) / CONFIG_NAME
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{folder} has no {CONFIG_NAME}; expected a folder written by `vat export`"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None
    if (
        not isinstance(config, dict)
        or config.get("model_type") != "vat"
        or "model_config" not in config
    ):
        raise CheckpointError(
            f"{path} is not a vat config (expected model_type 'vat'; was it written by vat export?)"
        )
    if config.get("format_version") != HUB_FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: unsupported vat folder format {config.get('format_version')!r}"
        )
    return config


def _load_weights(model: VAT, path: Path) -> None:
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; a vat folder needs {WEIGHTS_NAME}")
    try:
        load_model(model, str(path), strict=True)  # re-ties the shared embedding / lm_head
    except (RuntimeError, SafetensorError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path}: weights do not match its config.json or are corrupt ({first[:200]})"
        ) from None


def resolve(
    path_or_repo_id: str | os.PathLike,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> Path:
    """A local folder as is; anything else that looks like a Hub repo id is downloaded
    (config, weights, tokenizer, card) with `snapshot_download` into the Hub cache."""
    p = Path(path_or_repo_id).expanduser()
    if p.exists():
        if not p.is_dir():
            raise CheckpointError(
                f"{p} is a file; a pretrained vat is a folder (a .ckpt loads with load_vat)"
            )
        return p
    repo_id = str(path_or_repo_id)
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")) or repo_id.endswith(".ckpt"):
        raise CheckpointError(
            f"{repo_id} does not exist (expected a .ckpt, a vat folder or a Hub repo id user/name)"
        )
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            token=token,
            cache_dir=cache_dir,
            allow_patterns=list(HUB_PATTERNS),
        )
    except (OSError, ValueError) as e:  # network, offline mode, missing repo, a malformed id
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VatError(
            f"cannot download {repo_id} from the Hugging Face Hub ({first[:200]})"
        ) from None
    return Path(folder)


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
        except (OSError, ValueError) as e:
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
