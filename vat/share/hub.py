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
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vat.errors import VatError
from vat.io import regular_file
from vat.model import VAT, VATConfig
from vat.share.checkpoint import CheckpointError, LoadedVAT, check_finite
from vat.share.model_card import model_card
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
# Present when the folder's feature spec needs statistics (vat.features.spec, issue 23).
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
    extra: dict[str, Any] | None = None,
    features: Any = None,
) -> Path:
    """Write the pretrained folder for `model` at `directory`, atomically (a temp folder
    beside it, renamed into place). An existing non-empty `directory` needs `overwrite`.

    `training` (optional, plain JSON types) goes into config.json and the model card: e.g.
    {"global_step": ..., "train_files": [...], "metrics": {...}}. `extra` adds top-level
    config.json entries: "card" ({license, language, repo_id}) and "evaluation" (a list of
    `vat.eval.scores` entries), both shown on the model card. `features` (a
    vat.features.spec.FittedFeatures) becomes the folder's feature spec and statistics.
    """
    with _atomic_dir(directory, overwrite) as tmp:
        write_model_files(
            tmp, model, tokenizer, prior_std, length_histogram, training or {}, extra=extra
        )
        write_sentence_transformers_files(tmp)
        if features is not None:
            features.write_into(tmp)  # a vat.features.spec.FittedFeatures (issue 23)
    return Path(directory)


def save_loaded(
    directory: str | os.PathLike,
    loaded: LoadedVAT,
    *,
    training: dict[str, Any] | None = None,
    overwrite: bool = False,
    extra: dict[str, Any] | None = None,
    features: Any = None,
) -> Path:
    """`save_pretrained` of what `vat.share.resolve.load_vat` / `from_pretrained` returned."""
    return save_pretrained(
        directory,
        loaded.model,
        loaded.tokenizer,
        loaded.prior_std,
        loaded.length_histogram,
        training=training,
        overwrite=overwrite,
        extra=extra,
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
    extra: dict[str, Any] | None = None,
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
        **(extra or {}),
    }
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    # save_model (not save_file) finds tensors that share storage, here the tied
    # embed.weight / lm_head.weight, and stores one of them; load_model re-ties them.
    save_model(model, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    # safetensors writes through a private temp file (0600); give the weights the mode of
    # the other files, so colleagues on a shared filesystem can read them.
    os.chmod(folder / WEIGHTS_NAME, 0o666 & ~_umask())
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
    out = check_output_dir(directory, overwrite)
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


def _check_earlier_export(out: Path) -> None:
    """overwrite replaces an earlier export and nothing else (issue 20): every entry of `out`
    must be a plain file vat's export writes, and its config.json must say it is one."""
    foreign = sorted(
        p.name for p in out.iterdir() if p.name not in FILES or p.is_symlink() or not p.is_file()
    )
    try:
        config = json.loads((out / CONFIG_NAME).read_text(encoding="utf-8"))
        marked = isinstance(config, dict) and config.get("format") == "vat-pretrained"
    except (OSError, ValueError):
        marked = False
    if foreign or not marked:
        what = ", ".join(foreign[:3]) if foreign else f"no {CONFIG_NAME} written by vat export"
        raise VatError(
            f"output {out} is not an earlier vat export ({what}); --overwrite replaces only "
            f"a folder vat exported, never other files: choose another folder"
        )


def check_output_dir(directory: str | os.PathLike, overwrite: bool) -> Path:
    """The folder to export into, refused before any work: a file, a non-empty folder
    without `overwrite`, or (with it) a folder that is not an earlier export."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise VatError(f"output {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise VatError(
            f"output {out} exists and is not empty; pass overwrite (--overwrite) to replace it"
        )
    if out.is_dir() and any(out.iterdir()):
        _check_earlier_export(out)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
    if (folder / TOKENIZER_NAME).exists() or (folder / TOKENIZER_NAME).is_symlink():
        regular_file(folder / TOKENIZER_NAME, "model folder file")
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
    prior_std, hist = _check_folder_metadata(folder, config)
    model = VAT(model_config)
    if (folder / WEIGHTS_NAME).exists():
        regular_file(folder / WEIGHTS_NAME, "model folder file")
    _load_weights(model, folder / WEIGHTS_NAME)
    # the same checks as a .ckpt (vat.share.checkpoint.check_finite): NaN/inf weights are refused
    check_finite(folder / WEIGHTS_NAME, model.state_dict())
    model.to(device).eval()
    return LoadedVAT(model, tokenizer, prior_std, hist, str(path_or_repo_id))


def _check_folder_metadata(folder: Path, config: dict[str, Any]) -> tuple[float, list[int]]:
    """prior_std a finite positive number, length_histogram a list of counts: what a
    checkpoint's `vat` metadata must satisfy (as vat.share.checkpoint checks it), for a
    folder."""
    path = folder / CONFIG_NAME
    s = config.get("prior_std")
    if isinstance(s, bool) or not isinstance(s, int | float) or not (math.isfinite(s) and s > 0):
        raise CheckpointError(f"{path}: 'prior_std' must be a positive number, got {s!r}")
    hist = config.get("length_histogram", [])
    if not isinstance(hist, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in hist
    ):
        raise CheckpointError(f"{path}: 'length_histogram' must be a list of counts")
    return float(s), list(hist)


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """config.json of a pretrained folder, checked for format and version."""
    path = Path(folder) / CONFIG_NAME
    if path.exists() or path.is_symlink():
        regular_file(path, "model folder file")  # a FIFO in a tampered folder would hang
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
