"""What a checkpoint records about its own training, for the model card: training files both
by absolute path (`train_files`) and as another machine names them (`train_file_records`:
{"path": "corpus/x.txt.gz", "bytes": 125409, "digest": "0c5e..."}); what leaves the machine is
`portable_training`'s copy, which `check_portable` vets."""

from __future__ import annotations

import copy
import glob
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vat.data.file_digest import file_digest
from vat.errors import CheckpointError, VatError

CARD_METRICS = (  # validation and training scalars worth a card, when the run logged them
    "val/nll", "val/kl", "val/loss", "val/ppl", "val/recon_bleu", "val/stsb_spearman", "train/kl"
)  # fmt: skip
DATA_KEYS = ("train_files", "hf_dataset", "hf_config", "hf_text_field", "max_len")
RECORDS_KEY = "train_file_records"
DATA_DIR_ENV = "VAT_DATA_DIR"


def default_data_dir(folder: str | os.PathLike | None = None) -> Path:
    """The data folder: `folder`, else $VAT_DATA_DIR, else ../shared/data."""
    return Path(folder or os.environ.get(DATA_DIR_ENV) or Path("..", "shared", "data")).expanduser()


def _inside(path: str | os.PathLike, folder: Path) -> str | None:
    """`path` relative to `folder` (links resolved) in POSIX form when inside it, else None."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None


def _named(path: str, data_dir: Path) -> dict[str, Any]:
    """{"path": its path inside `data_dir`} for an absolute path there, else {"name": its name}."""
    rel = _inside(path, data_dir) if os.path.isabs(path) else None
    return {"path": rel} if rel else {"name": Path(path).name}


def file_record(path: str, data_dir: Path) -> dict[str, Any]:
    """One training file as another machine names it, with its size and digest if readable."""
    record = _named(path, data_dir)
    try:
        return {**record, "bytes": os.stat(path).st_size, "digest": file_digest(path)}
    except OSError:  # gone since it was read: the place is still worth recording
        return record


def file_records(patterns: Sequence[str], data_dir: Path) -> list[dict[str, Any]]:
    """`file_record` of every file the paths or globs name (a match-less one by its name)."""
    out = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if os.path.isfile(m)]
        out += [file_record(m, data_dir) for m in matches] or [{"name": Path(pattern).name}]
    return out


def data_record(hparams: Any) -> dict[str, Any]:
    """The training data of a DataModule's hyperparameters (in the training process)."""
    if hparams is None:
        return {}
    out: dict[str, Any] = {}
    for key in DATA_KEYS:
        value = hparams.get(key)  # a DataModule's hparams (AttributeDict) or a dict
        if value is None or value == []:
            continue
        if key == "train_files":
            value = [os.path.abspath(os.path.expanduser(str(f))) for f in value]
        out[key] = value if isinstance(value, int | str | list) else str(value)
    if out.get("train_files"):
        out[RECORDS_KEY] = file_records(out["train_files"], default_data_dir())
    return out


def metrics_record(callback_metrics: dict[str, Any]) -> dict[str, float]:
    """The finite CARD_METRICS among a trainer's last logged values, as floats."""
    values = {k: float(v) for k in CARD_METRICS if (v := callback_metrics.get(k)) is not None}
    return {k: v for k, v in values.items() if math.isfinite(v)}


def training_record(
    *,
    global_step: int,
    epoch: int,
    tokens_seen: int,
    sentences_seen: int,
    data_hparams: Any = None,
    callback_metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """checkpoint["vat"]["training"]: plain types only (weights_only loading)."""
    return {
        "global_step": int(global_step),
        "epoch": int(epoch),
        "tokens_seen": int(tokens_seen),
        "sentences_seen": int(sentences_seen),
        "data": data_record(data_hparams),
        "metrics": metrics_record(callback_metrics or {}),
    }


def training_facts(ckpt: dict, ckpt_path: str | os.PathLike) -> dict[str, Any]:
    """Plain facts about how a checkpoint was trained, for its card."""
    facts: dict[str, Any] = {"source_checkpoint": Path(ckpt_path).name}
    recorded = (ckpt.get("vat") or {}).get("training")
    if isinstance(recorded, dict):
        facts.update(_plain(recorded))
    facts.update({k: ckpt[k] for k in ("global_step", "epoch") if isinstance(ckpt.get(k), int)})
    hp = ckpt.get("hyper_parameters") or {}
    for key in ("loss", "optim", "noise", "sentence_latent"):
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
    typed = ckpt.get("datamodule_hyper_parameters") or {}
    if not facts.get("data") and isinstance(typed, dict):
        # a checkpoint saved before the record: the data as `vat train` was given it
        data = {k: typed[k] for k in DATA_KEYS if typed.get(k) not in (None, [])}
        if data:
            facts["data"] = _plain(data)
    return facts


def portable_name(path: str | os.PathLike, train_data_dir: str | os.PathLike | None = None) -> str:
    """A file's name in what leaves this machine: its path inside the data folder, else its name."""
    path = os.path.expanduser(str(path))
    return _inside(path, default_data_dir(train_data_dir)) or Path(path).name


def portable_training(
    training: dict[str, Any], train_data_dir: str | os.PathLike | None = None
) -> dict[str, Any]:
    """A copy of a training record whose files and init_from.model name no place here."""
    out = copy.deepcopy(training) if isinstance(training, dict) else {}
    data = out.get("data")
    if isinstance(data, dict) and (data.get("train_files") or data.get(RECORDS_KEY)):
        records = data.get(RECORDS_KEY)
        if records is None:  # an older record: each file named as a record names it, unread
            files = [os.path.expanduser(str(f)) for f in data.get("train_files") or []]
            records = [_named(f, default_data_dir(train_data_dir)) for f in files]
        ok = isinstance(records, list) and all(isinstance(r, dict) for r in records)
        names = [r.get("path") or r.get("name") for r in records] if ok else []
        if not ok or not all(isinstance(n, str) for n in names):
            raise CheckpointError(
                f"training.data.{RECORDS_KEY} is {records!r:.80}: expected a list of "
                '{"path": a path inside the data folder} or {"name": a file name}'
            )
        data[RECORDS_KEY], data["train_files"] = records, names
    start = out.get("init_from")
    if isinstance(start, dict) and isinstance(start.get("model"), str):
        if machine_path(start["model"]) is not None:
            start["model"] = Path(os.path.expanduser(start["model"])).name
    return out


def portable_fit(fit: dict[str, Any], train_data_dir: str | os.PathLike | None = None) -> dict:
    """A copy of a FittedFeatures.fit record whose file lists are `portable_name`s."""
    out = dict(fit)
    for key in ("files", "count_files"):
        if isinstance(out.get(key), list):
            out[key] = [portable_name(f, train_data_dir) for f in out[key]]
    return out


# An absolute, drive, UNC, ~home or ..-climbing path means something only where it was written.
_WRAPPING = "`'\"()[]{},;:"
_MACHINE = re.compile(r"^(/[^/\s]|[A-Za-z]:[\\/]|\\\\|~([\w.-]*/|$))|(^|[/\\])\.\.([/\\]|$)")


def machine_path(text: str) -> str | None:
    """The first word of `text` (unwrapped) that names a place on the writing machine, or None."""
    for token in text.split():
        for word in token.split("="):
            word = word.strip(_WRAPPING)
            if word and _MACHINE.search(word):
                return word
    return None


def machine_paths(obj: Any, key: str = "") -> list[tuple[str, str]]:
    """(key, string), e.g. ("training.data.train_files[0]", ...), of every string flagged."""
    if isinstance(obj, str):
        return [(key, obj)] if machine_path(obj) else []
    if isinstance(obj, dict):
        return [
            hit for k, v in obj.items() for hit in machine_paths(v, f"{key}.{k}" if key else str(k))
        ]
    if isinstance(obj, list | tuple):
        return [hit for i, v in enumerate(obj) for hit in machine_paths(v, f"{key}[{i}]")]
    return []


def check_portable(values: dict[str, Any], doing: str, remedy: str = "") -> None:
    """Refuse a value of `values` (file label -> JSON) that names a place on this machine."""
    for label, obj in values.items():
        if hits := machine_paths(obj):
            key, text = hits[0]
            more = f" (and {len(hits) - 1} more such values)" if len(hits) > 1 else ""
            raise VatError(
                f"{doing}: {label} {key} names a place on this machine "
                f"({machine_path(text)!r}){more}; a shared model names its files by their "
                "path inside the data folder or by name" + (f"; {remedy}" if remedy else "")
            )


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
