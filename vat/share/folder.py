"""The exported folder, Hugging Face style: what `vat export` writes, atomically, and every
`--model` reads, with no pickled code (weights in safetensors, metadata in JSON).

    config.json                 VATConfig, prior_std, length histogram, format version, the
                                training facts, the card settings and recorded scores
    model.safetensors           the weights (the tied embedding / lm_head once)
    tokenizer.json              the tokenizers JSON (vat's special-token layout)
    README.md                   the model card (vat.share.model_card)
    modules.json, sentence_vat_config.json ({"features": SPEC}), config_sentence_transformers.json
                                what sentence-transformers reads
    features.safetensors        that spec's fitted statistics, when it needs any
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vat.errors import CheckpointError, OptionError, VatError, finite, one_line
from vat.feature_spec import (
    FOLDER_STATS_NAME,
    FeatureSpec,
    FittedFeatures,
    check_token_counts,
    is_feature_file,
)
from vat.io import atomic_write, filesystem_write_error, regular_file, write_json_atomic
from vat.model import VAT, VATConfig
from vat.share import CARD_NAME, CONFIG_NAME, TOKENIZER_NAME, WEIGHTS_NAME
from vat.share.checkpoint import check_finite, check_prior_and_lengths, check_weight_shapes
from vat.share.loaded import LoadedVAT, ModelSource
from vat.share.model_card import folder_features, model_card
from vat.share.space import SPACE_FILES, space_settings, write_space_files
from vat.tokenizer import VATTokenizer

HUB_FORMAT_VERSION = 1
# sentence-transformers reads these three (see vat.integrations.sentence_transformers)
ST_MODULES_NAME = "modules.json"
ST_MODULE_CONFIG_NAME = "sentence_vat_config.json"
ST_CONFIG_NAME = "config_sentence_transformers.json"
ST_MODULE_TYPE = "vat.integrations.sentence_transformers.VATSentenceEncoder"
ST_FILES = (ST_MODULES_NAME, ST_MODULE_CONFIG_NAME, ST_CONFIG_NAME)
FILES = (CONFIG_NAME, WEIGHTS_NAME, TOKENIZER_NAME, CARD_NAME, *ST_FILES)
FEATURES_NAME = FOLDER_STATS_NAME  # present when the folder's feature spec needs statistics
ALL_FILES = (*FILES, FEATURES_NAME, *SPACE_FILES)  # what the Hub upload and download carry


def save_folder(
    directory: str | os.PathLike,
    loaded: LoadedVAT,
    *,
    features: FittedFeatures | None = None,
    card: dict[str, Any] | None = None,
    evaluation: list[dict[str, Any]] | None = None,
    overwrite: bool = False,
    space: bool = False,
) -> Path:
    """Write `loaded` as an exported folder at `directory`, atomically (with `space`, a Space)."""
    with _atomic_dir(directory, overwrite) as tmp:
        extra = {"card": card, "evaluation": evaluation, "space": space and space_settings()}
        config = write_model_files(tmp, loaded, {k: v for k, v in extra.items() if v})
        write_sentence_transformers_files(tmp, features)
        if space:
            write_space_files(tmp)
        (tmp / CARD_NAME).write_text(
            model_card(config, loaded.tokenizer.vocab_size, features), encoding="utf-8"
        )
    return Path(directory)


def write_model_files(
    folder: Path, loaded: LoadedVAT, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """config.json (with `extra` entries), model.safetensors and tokenizer.json; the config."""
    from safetensors.torch import save_model

    config = {
        "model_type": "vat",
        "format": "vat-pretrained",
        "format_version": HUB_FORMAT_VERSION,
        "model_config": loaded.config.to_dict(),
        "prior_std": float(loaded.prior_std),
        "length_histogram": [int(c) for c in loaded.length_histogram],
        "training": loaded.training,
        **(extra or {}),
    }
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    # save_model (not save_file) stores the tied embed.weight / lm_head.weight once
    save_model(loaded.model, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    # safetensors writes a private (0600) file; give it the other files' mode for shared disks
    os.chmod(folder / WEIGHTS_NAME, 0o666 & ~_umask())
    loaded.tokenizer.save(folder / TOKENIZER_NAME)
    return config


def write_sentence_transformers_files(folder: Path, features: FittedFeatures | None) -> None:
    """What sentence-transformers reads; the settings name the feature spec and nothing else."""
    files = {
        ST_MODULES_NAME: [{"idx": 0, "name": "0", "path": "", "type": ST_MODULE_TYPE}],
        ST_MODULE_CONFIG_NAME: {"features": str(features.spec)} if features is not None else {},
        ST_CONFIG_NAME: {
            "model_type": "SentenceTransformer",
            "similarity_fn_name": "cosine",
            "prompts": {},
            "default_prompt_name": None,
        },
    }
    for name, obj in files.items():
        (folder / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    write_feature_stats(folder, features)


def write_feature_stats(folder: Path, features: FittedFeatures | None) -> None:
    """features.safetensors, when the folder's spec needs statistics."""
    if features is not None and features.spec.needs_fit:
        features.save(folder / FEATURES_NAME)


@contextmanager
def _atomic_dir(directory: str | os.PathLike, overwrite: bool) -> Iterator[Path]:
    """A temp folder beside `directory` that replaces it on success, so no write is half done."""
    out = check_output_dir(directory, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; give it a plain mkdir's mode
        replace_dir(tmp, out)
    except Exception as e:
        error = filesystem_write_error(out, e, temp="folder")  # a full disk: one line
        if error is None:
            raise
        raise error from e
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(tmp: Path, out: Path) -> None:
    """Move `tmp` to its sibling `out`; an old `out` is moved aside, and back if that fails."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
    os.replace(out, old / "x")
    try:
        os.replace(tmp, out)
    except OSError:
        os.replace(old / "x", out)  # if this fails too, the old folder stays in `old`
        old.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)


def _check_earlier_export(out: Path) -> None:
    """overwrite replaces an earlier export only: plain export files and a vat config.json."""
    foreign = sorted(p.name for p in out.iterdir() if not is_export_file(p))
    try:
        config = json.loads((out / CONFIG_NAME).read_text(encoding="utf-8"))
        marked = isinstance(config, dict) and config.get("format") == "vat-pretrained"
    except (OSError, ValueError):
        marked = False
    if foreign or not marked:
        what = ", ".join(foreign[:3]) if foreign else f"no {CONFIG_NAME} written by vat export"
        raise VatError(
            f"output {out} is not an earlier vat export ({what}); overwrite replaces only "
            f"a folder vat exported, never other files: choose another folder"
        )


def is_export_file(p: Path) -> bool:
    """A plain file an export wrote: one of ALL_FILES, or a features-<spec>.safetensors."""
    if p.is_symlink() or not p.is_file():
        return False
    if p.name in ALL_FILES:
        return True
    return bool(re.fullmatch(r"features-[\w.-]+\.safetensors", p.name)) and is_feature_file(p)


def check_output_dir(directory: str | os.PathLike, overwrite: bool) -> Path:
    """The folder to export into, refused before any work if it cannot be (re)placed."""
    out = Path(directory)
    if str(directory) == "":
        raise OptionError("directory", "is empty; name the folder to export into")
    if out.exists() and not out.is_dir():
        raise VatError(f"output {out} exists and is not a directory")
    if out.is_dir() and Path.cwd().resolve().is_relative_to(out.resolve()):
        # replacing it would pull the folder out from under this process and its shell
        raise VatError(
            f"output {out} is the current folder or contains it; export into a new folder, "
            f"e.g. {Path(directory) / 'model'}"
        )
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise OptionError(
                "overwrite",
                f"output {out} exists and is not empty; set it to replace an earlier export there",
            )
        _check_earlier_export(out)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def record_measurements(
    folder: str | os.PathLike, title: str, text: str, rows: list[tuple[str, str]]
) -> None:
    """Add (or replace, by `title`) measurements to an exported folder's config.json and card."""
    folder = Path(folder)
    config = read_config(folder)
    entry = {"title": str(title), "text": str(text), "rows": [[str(a), str(b)] for a, b in rows]}
    kept = [m for m in config.get("measurements") or [] if m.get("title") != entry["title"]]
    config["measurements"] = [*kept, entry]
    try:
        vocab = VATTokenizer.from_file(folder / TOKENIZER_NAME).vocab_size
    except (ValueError, OSError) as e:
        raise CheckpointError(f"{folder / TOKENIZER_NAME}: unusable tokenizer ({e})") from None
    # the spec the folder gives now, with its statistics only when they are that spec's
    features = folder_features(_folder_spec(folder), folder / FEATURES_NAME)
    write_json_atomic(folder / CONFIG_NAME, config)
    card = model_card(config, vocab, features)
    atomic_write(folder / CARD_NAME, lambda f: f.write(card))


def is_model_folder(path: str | os.PathLike) -> bool:
    """True for a folder holding a config.json (what `vat.share.resolve` calls a folder)."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_NAME).is_file()


def load_folder(source: ModelSource, device: str | torch.device = "cpu") -> LoadedVAT:
    """The model an exported folder holds, with what it records, every file read once."""
    folder = source.path
    config = read_config(folder)
    for name in (TOKENIZER_NAME, WEIGHTS_NAME):  # a FIFO would block its read
        if (folder / name).exists() or (folder / name).is_symlink():
            regular_file(folder / name, "model folder file")
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
    prior_std, hist = check_prior_and_lengths(
        f"{folder / CONFIG_NAME}: '", config.get("prior_std"), config.get("length_histogram", [])
    )
    model = _load_weights(model_config, folder / WEIGHTS_NAME)
    training = config.get("training") if isinstance(config.get("training"), dict) else {}
    _check_training_data(folder, training)
    counts = check_token_counts(config.get("token_counts"), folder / CONFIG_NAME, model_config)
    spec = _folder_spec(folder)
    stats, stats_file = None, folder / FEATURES_NAME
    if stats_file.exists() or stats_file.is_symlink():  # a FIFO or folder is named, not skipped
        stats = FittedFeatures.load(stats_file, model_config=model_config)  # checked as weights
    return LoadedVAT(
        model.to(device).eval(), tokenizer, prior_std, hist, source, training=training,
        token_counts=counts, feature_spec=spec, feature_stats=stats,
        card=dict(config.get("card") or {}), evaluation=_check_evaluation(folder, config),
    )  # fmt: skip


def _read_json(path: Path, what: str) -> Any:
    """The JSON in a folder's file (None when it is empty), or one line naming it."""
    try:
        regular_file(path, "model folder file")  # a FIFO in a tampered folder would hang
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if text.strip() else None
    except VatError as e:
        raise CheckpointError(str(e)) from None
    except (ValueError, OSError) as e:  # JSONDecodeError, UnicodeDecodeError
        raise CheckpointError(f"{path} is not valid JSON ({one_line(e)[:120]})") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise CheckpointError(f"{path} is not {what} (JSON nested too deeply)") from None


def _folder_spec(folder: Path) -> FeatureSpec | None:
    """The spec sentence_vat_config.json names, None before specs; stray statistics refused."""
    path = folder / ST_MODULE_CONFIG_NAME
    stats = folder / FEATURES_NAME
    has_stats = stats.exists() or stats.is_symlink()
    if not (path.exists() or path.is_symlink()):
        if has_stats:
            raise CheckpointError(
                f"{folder} holds {FEATURES_NAME} but no {ST_MODULE_CONFIG_NAME} naming its "
                "feature spec; restore that file or export the folder again"
            )
        return None
    settings = _read_json(path, "a module config")
    if not isinstance(settings, dict):
        what = "empty" if settings is None else f"a JSON {type(settings).__name__}"
        raise CheckpointError(
            f"{path} is {what}; expected a JSON object naming the folder's feature spec "
            '(e.g. {"features": "layer0/sif/none"})'
        )
    spec, pooling = settings.get("features"), settings.get("pooling")
    if spec is None and pooling not in (None, "mean"):  # an older file: pooling of mu
        spec = f"mu/{pooling}/none"
    if spec is not None and not isinstance(spec, str):
        raise CheckpointError(
            f"{path}: 'features' must be a feature spec such as 'mu/sif/pc1', got {spec!r:.60}"
        )
    if not spec:
        if has_stats:
            raise CheckpointError(
                f"{path} names no feature spec, but the folder holds {FEATURES_NAME}; "
                "restore the spec there or export the folder again"
            )
        return None
    try:
        return FeatureSpec.parse(spec)
    except VatError as e:
        raise CheckpointError(f"{path}: {e}") from None


def _check_training_data(folder: Path, training: dict[str, Any]) -> None:
    """config.json's training.data: an object whose train_files is a list of names."""
    data = training.get("data")
    if data is not None and not isinstance(data, dict):
        raise CheckpointError(
            f"{folder / CONFIG_NAME}: training.data must be an object, got {data!r:.60}"
        )
    files = (data or {}).get("train_files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise CheckpointError(
            f"{folder / CONFIG_NAME}: training.data.train_files must be a list of file names, "
            f"got {files!r:.60}"
        )


def _check_evaluation(folder: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """config.json's recorded scores, checked once at load as every reader expects them."""
    scores = config.get("evaluation")
    path = folder / CONFIG_NAME
    if scores is None:
        return []
    if not isinstance(scores, list):
        raise CheckpointError(
            f"{path}: 'evaluation' must be a list of scores, got {type(scores).__name__}"
        )
    for i, score in enumerate(scores):
        key = f"{path}: evaluation[{i}]"
        if not isinstance(score, dict):
            raise CheckpointError(f"{key} must be an object, got {score!r:.60}")
        for name in ("task", "split", "metric"):
            if not isinstance(score.get(name), str) or not score[name]:
                raise CheckpointError(f"{key}.{name} must be text, got {score.get(name)!r:.60}")
        for name in ("type", "features"):
            if name in score and not isinstance(score[name], str):
                raise CheckpointError(f"{key}.{name} must be text, got {score[name]!r:.60}")
        if not finite(score.get("value")):
            raise CheckpointError(
                f"{key}.value must be a finite number, got {score.get('value')!r:.60}"
            )
    return [dict(s) for s in scores]


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """config.json of an exported folder, checked for format and version."""
    path = Path(folder) / CONFIG_NAME
    if not (path.exists() or path.is_symlink()):
        raise CheckpointError(
            f"{folder} has no {CONFIG_NAME}; expected a folder written by `vat export`"
        )
    config = _read_json(path, "a vat config")
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


def _load_weights(config: VATConfig, path: Path) -> VAT:
    """The model of `config` with the weights of `path`, its header checked before building."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; a vat folder needs {WEIGHTS_NAME}")
    try:
        with safe_open(str(path), framework="pt") as f:
            check_weight_shapes(
                path, config, {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            )
            state = {k: f.get_tensor(k) for k in f.keys()}
        check_finite(path, state)  # the same checks as a .ckpt's weights, as stored
        model = VAT(config)
        # tied embeddings are stored under one name; check_weight_shapes vetted the rest
        model.load_state_dict(state, strict=False)
    except CheckpointError:  # check_weight_shapes' and check_finite's own refusals say why
        raise
    except (RuntimeError, SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(
            f"{path}: weights do not match its config.json or are corrupt ({one_line(e)[:200]})"
        ) from None
    return model
