"""The exported folder: what `vat export` writes and every `--model` reads, Hugging Face style.

    config.json                 VATConfig, prior_std, length histogram, format version, the
                                training facts, the card settings and recorded scores
    model.safetensors           the weights (safetensors; the tied embedding / lm_head once)
    tokenizer.json              the tokenizers JSON (vat's special-token layout)
    README.md                   the model card (vat.share.model_card)
    modules.json, sentence_vat_config.json, config_sentence_transformers.json
                                what sentence-transformers reads; sentence_vat_config.json
                                names the folder's feature spec (vat.feature_spec), the
                                one thing it says: {"features": "layer0/sif/none"}
    features.safetensors        that spec's fitted statistics, when it needs any

Nothing here runs pickled code: the weights are safetensors and the metadata JSON. A folder is
written into a temp folder beside its destination and renamed into place; it is read once,
by `load_folder`, into a `vat.share.loaded.LoadedVAT`.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from vat.errors import CheckpointError, OptionError, VatError
from vat.feature_spec import (
    FOLDER_STATS_NAME,
    FeatureSpec,
    FittedFeatures,
    check_token_counts,
    is_feature_file,
)
from vat.io import atomic_write, filesystem_write_error, regular_file, write_json_atomic
from vat.model import VAT, VATConfig, prior_std_problem
from vat.share import CARD_NAME, CONFIG_NAME, TOKENIZER_NAME, WEIGHTS_NAME
from vat.share.checkpoint import check_finite, check_weight_shapes
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
FILES = (
    CONFIG_NAME,
    WEIGHTS_NAME,
    TOKENIZER_NAME,
    CARD_NAME,
    ST_MODULES_NAME,
    ST_MODULE_CONFIG_NAME,
    ST_CONFIG_NAME,
)
FEATURES_NAME = FOLDER_STATS_NAME  # present when the folder's feature spec needs statistics
ALL_FILES = (*FILES, FEATURES_NAME, *SPACE_FILES)  # what the Hub upload and download carry


# -- writing ---------------------------------------------------------------------------------
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
    """Write `loaded` as an exported folder at `directory`, atomically (a temp folder beside
    it, renamed into place). An existing non-empty `directory` needs `overwrite`, and then
    must be an earlier export (`check_output_dir`). With `space`, the folder is also a
    Hugging Face Space running `vat explore`'s page (`vat.share.space`).

    `features` (a fitted vat.feature_spec spec) becomes the folder's feature spec and
    statistics; `card` ({license, language, name, repo_id}) and `evaluation` (a list of
    `vat.eval.task_scores` entries) go into config.json and the model card, with the training
    facts `loaded` records.
    """
    with _atomic_dir(directory, overwrite) as tmp:
        extra: dict[str, Any] = {}
        if card:
            extra["card"] = card
        if evaluation:
            extra["evaluation"] = evaluation
        if space:
            extra["space"] = space_settings()
        config = write_model_files(tmp, loaded, extra)
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
    """config.json, model.safetensors and tokenizer.json in `folder`; returns config.json's
    contents. `extra` adds top-level config.json entries ("card", "evaluation")."""
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
    # save_model (not save_file) finds tensors that share storage, here the tied
    # embed.weight / lm_head.weight, and stores one of them; load_model re-ties them.
    save_model(loaded.model, str(folder / WEIGHTS_NAME), metadata={"format": "pt"})
    # safetensors writes through a private temp file (0600); give the weights the mode of
    # the other files, so colleagues on a shared filesystem can read them.
    os.chmod(folder / WEIGHTS_NAME, 0o666 & ~_umask())
    loaded.tokenizer.save(folder / TOKENIZER_NAME)
    return config


def write_sentence_transformers_files(folder: Path, features: FittedFeatures | None) -> None:
    """modules.json (one module: vat's VATSentenceEncoder), its settings (the folder's feature
    spec, and nothing else: the spec names its own weighting, so a `pooling` beside it could
    only contradict it), config_sentence_transformers.json (cosine similarity), and the
    spec's statistics, so that `SentenceTransformer(folder, trust_remote_code=True)` loads
    the folder and gives the vectors its card names."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": ST_MODULE_TYPE}]
    st_config = {
        "model_type": "SentenceTransformer",
        "similarity_fn_name": "cosine",
        "prompts": {},
        "default_prompt_name": None,
    }
    module_config: dict[str, Any] = {}
    if features is not None:
        module_config["features"] = str(features.spec)
    for name, obj in (
        (ST_MODULES_NAME, modules),
        (ST_MODULE_CONFIG_NAME, module_config),
        (ST_CONFIG_NAME, st_config),
    ):
        (folder / name).write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    write_feature_stats(folder, features)


def write_feature_stats(folder: Path, features: FittedFeatures | None) -> None:
    """features.safetensors, when the folder's spec needs statistics."""
    if features is not None and features.spec.needs_fit:
        features.save(folder / FEATURES_NAME)


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
    """Move the finished folder `tmp` to `out` (a sibling), replacing an old `out`. Replacing
    a folder takes two renames (POSIX has no portable directory swap): move the old one
    aside, move the new one in, and put the old one back if that fails."""
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
    """overwrite replaces an earlier export and nothing else: every entry of `out`
    must be a plain file vat's export writes, and its config.json must say it is one."""
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
    """A plain file an export wrote: one of ALL_FILES, or statistics vat fitted for another
    spec and stored in the folder (`stats_path_for`: features-<spec>.safetensors, when
    `vat.load(folder).encode(features=...)` fitted them)."""
    if p.is_symlink() or not p.is_file():
        return False
    if p.name in ALL_FILES:
        return True
    return bool(re.fullmatch(r"features-[\w.-]+\.safetensors", p.name)) and is_feature_file(p)


def check_output_dir(directory: str | os.PathLike, overwrite: bool) -> Path:
    """The folder to export into, refused before any work: a file, a non-empty folder
    without `overwrite`, or (with it) a folder that is not an earlier export."""
    out = Path(directory)
    if str(directory) == "":
        raise OptionError("directory", "is empty; name the folder to export into")
    if out.exists() and not out.is_dir():
        raise VatError(f"output {out} exists and is not a directory")
    if out.is_dir() and Path.cwd().resolve().is_relative_to(out.resolve()):
        # replacing it would pull the folder out from under this process (and the shell that
        # started it): `.`, `..`, the current folder by its absolute path, or an ancestor
        raise VatError(
            f"output {out} is the current folder or contains it; export into a new folder, "
            f"e.g. {Path(directory) / 'model'}"
        )
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OptionError(
            "overwrite",
            f"output {out} exists and is not empty; set it to replace an earlier export there",
        )
    if out.is_dir() and any(out.iterdir()):
        _check_earlier_export(out)
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def record_measurements(
    folder: str | os.PathLike, title: str, text: str, rows: list[tuple[str, str]]
) -> None:
    """Add measurements made outside `vat export` (e.g. the GPU suite's BLEU) to an exported
    folder: config.json's "measurements" (one entry per `title`, replaced when given again)
    and the card, rendered again from config.json, so that every later copy of the folder
    (`python scripts/add_pretrained.py`, the Hub) keeps them. Both files are written atomically."""
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


# -- reading ---------------------------------------------------------------------------------
def is_model_folder(path: str | os.PathLike) -> bool:
    """True for a folder holding a config.json (what `vat.share.resolve` calls a folder)."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_NAME).is_file()


def load_folder(source: ModelSource, device: str | torch.device = "cpu") -> LoadedVAT:
    """The model an exported folder (local, or a Hub repo's download) holds, with what it
    records: every file read once, checked as a .ckpt is (finite weights, prior, tokenizer)."""
    folder = source.path
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
    if (folder / WEIGHTS_NAME).exists():
        regular_file(folder / WEIGHTS_NAME, "model folder file")
    model = _load_weights(model_config, folder / WEIGHTS_NAME)
    training = config.get("training") if isinstance(config.get("training"), dict) else {}
    _check_training_data(folder, training)
    counts = check_token_counts(config.get("token_counts"), folder / CONFIG_NAME, model_config)
    spec = _folder_spec(folder)
    stats_file = folder / FEATURES_NAME
    stats = None
    if stats_file.exists() or stats_file.is_symlink():  # a FIFO or folder is named, not skipped
        # checked as the weights are: finite, float32, the shapes of this model and its spec
        stats = FittedFeatures.load(stats_file, model_config=model_config)
    return LoadedVAT(
        model.to(device).eval(),
        tokenizer,
        prior_std,
        hist,
        source,
        training=training,
        token_counts=counts,
        feature_spec=spec,
        feature_stats=stats,
        card=dict(config.get("card") or {}),
        evaluation=_check_evaluation(folder, config),
    )


def _folder_spec(folder: Path) -> FeatureSpec | None:
    """The feature spec sentence_vat_config.json names; None for a folder from before specs,
    whose vectors follow vat.features.choice.features_for. An older file's `pooling` is
    read too: "mean" says nothing, another pooling without a spec is mu/POOLING/none. A file
    that cannot say (not a regular file or JSON object, nested too deeply, a `features` that
    is no spec), or statistics no spec names, is a CheckpointError naming it: read as "no
    spec" it would silently give other vectors and ignore features.safetensors."""
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
    try:
        regular_file(path, "model folder file")  # a FIFO would block the read below
        text = path.read_text(encoding="utf-8")
        settings = json.loads(text) if text.strip() else None
    except VatError as e:
        raise CheckpointError(str(e)) from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not valid JSON ({reason})") from None
    except RecursionError:  # json's parser recurses once per nesting level
        raise CheckpointError(f"{path} is not a module config (JSON nested too deeply)") from None
    if not isinstance(settings, dict):
        what = "empty" if settings is None else f"a JSON {type(settings).__name__}"
        raise CheckpointError(
            f"{path} is {what}; expected a JSON object naming the folder's feature spec "
            '(e.g. {"features": "layer0/sif/none"})'
        )
    spec = settings.get("features")
    pooling = settings.get("pooling")
    if spec is None and pooling not in (None, "mean"):  # an older file: pooling of mu
        if not isinstance(pooling, str):
            raise CheckpointError(f"{path}: 'pooling' must be a string, got {pooling!r:.60}")
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


def _check_folder_metadata(folder: Path, config: dict[str, Any]) -> tuple[float, list[int]]:
    """prior_std a finite positive number, length_histogram a list of counts: what a
    checkpoint's `vat` metadata must satisfy (as vat.share.checkpoint checks it), for a
    folder."""
    path = folder / CONFIG_NAME
    s = config.get("prior_std")
    problem = prior_std_problem(s)
    if problem is not None:
        raise CheckpointError(f"{path}: 'prior_std' {problem}")
    hist = config.get("length_histogram", [])
    if not isinstance(hist, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in hist
    ):
        raise CheckpointError(f"{path}: 'length_histogram' must be a list of counts")
    return float(s), list(hist)


def _check_training_data(folder: Path, training: dict[str, Any]) -> None:
    """config.json's training.data, which the card and the listing show: an object whose
    train_files, when present, is a list of names (provenance; vat never opens them)."""
    data = training.get("data")
    if data is None:
        return
    if not isinstance(data, dict):
        raise CheckpointError(
            f"{folder / CONFIG_NAME}: training.data must be an object, got {data!r:.60}"
        )
    files = data.get("train_files") or []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise CheckpointError(
            f"{folder / CONFIG_NAME}: training.data.train_files must be a list of file names, "
            f"got {files!r:.60}"
        )


EVALUATION_TEXT_KEYS = ("task", "split", "metric")
"""What every recorded score names (`vat.eval.task_scores` entries); its "value" is a number."""


def _check_evaluation(folder: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """config.json's recorded scores, each checked as its readers use it (the model card,
    `vat pretrained`, `vat explore`'s Model view format "value" as a number): a list of
    objects with a text task, split and metric and a finite number as value; the optional
    type and features, text. A hand-edited score is a CheckpointError naming its key, at
    load, not a failure in whichever reader meets it first."""
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
        for name in EVALUATION_TEXT_KEYS:
            if not isinstance(score.get(name), str) or not score[name]:
                raise CheckpointError(f"{key}.{name} must be text, got {score.get(name)!r:.60}")
        for name in ("type", "features"):
            if name in score and not isinstance(score[name], str):
                raise CheckpointError(f"{key}.{name} must be text, got {score[name]!r:.60}")
        value = score.get("value")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise CheckpointError(f"{key}.value must be a finite number, got {value!r:.60}")
    return [dict(s) for s in scores]


def read_config(folder: str | os.PathLike) -> dict[str, Any]:
    """config.json of an exported folder, checked for format and version."""
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
    except RecursionError:  # json's parser recurses once per nesting level
        raise CheckpointError(f"{path} is not a vat config (JSON nested too deeply)") from None
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
    """The model of `config` with the weights of `path`, one read of the file. config.json's
    sizes are trusted only once the safetensors header agrees with them
    (`check_weight_shapes`), so a tampered size is refused before the model is built."""
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
        # Tied embeddings are stored under one of their two names (safetensors' save_model);
        # both names are one Parameter, so loading either fills both. check_weight_shapes has
        # made sure that nothing else is missing or extra.
        model.load_state_dict(state, strict=False)
    except CheckpointError:  # check_weight_shapes' and check_finite's own refusals say why
        raise
    except (RuntimeError, SafetensorError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(
            f"{path}: weights do not match its config.json or are corrupt ({first[:200]})"
        ) from None
    return model
