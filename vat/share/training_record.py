"""What a checkpoint records about its own training, for the model card: provenance only,
which no vat command opens (features fit on the checkpoint's own fitting sample,
vat.data.token_counts).

`training_facts` gathers it from a checkpoint already read: the recorded training below, the
step and epoch, ModelCheckpoint's scores, the loss and optimiser settings, and the run's data.

`VATSystem.on_save_checkpoint` stores `training_record(...)` as checkpoint["vat"]["training"],
so a .ckpt copied out of its run folder still says what it was trained on, for how long, and
how well it did:

    {"global_step": 1200, "epoch": 3,
     "tokens_seen": 1843200, "sentences_seen": 153600,
     "data": {"train_files": ["/data/demo_en.txt.gz"], "hf_dataset": None, ...},
     "metrics": {"val/nll": 2.31, "val/kl": 11.9, "val/recon_bleu": 71.2, ...}}

Training files are recorded twice. `train_files` holds them by their absolute path, as the
training machine knew them; a Hub dataset is recorded by its id. `train_file_records` holds
each file the patterns matched as another machine would name it: its path inside the data
folder ($VAT_DATA_DIR, else ../shared/data) when it lies there, else its name alone, with
its size and digest (`vat.data.file_digest`), so that a reader can tell which file it was:

    "train_files": ["/home/u/shared/data/corpus/newstest_en.201[0-7].txt.gz"],
    "train_file_records": [{"path": "corpus/newstest_en.2010.txt.gz", "bytes": 125409,
                            "digest": "0c5e..."}, ...]

`portable_training` is what leaves the machine (scripts/add_pretrained.py, an export for the
Hub): the records alone, and `machine_paths` finds any string that still names a place on it.
"""

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

# Validation and training scalars worth a card (when the run logged them).
CARD_METRICS = (
    "val/nll",
    "val/kl",
    "val/loss",
    "val/ppl",
    "val/recon_bleu",
    "val/stsb_spearman",
    "train/kl",
)
DATA_KEYS = ("train_files", "hf_dataset", "hf_config", "hf_text_field", "max_len")
RECORDS_KEY = "train_file_records"
"""data[RECORDS_KEY]: each training file as another machine finds it (module docstring)."""
DATA_DIR_ENV = "VAT_DATA_DIR"
DATA_DIR_DEFAULT = Path("..", "shared", "data")
"""The data folder when $VAT_DATA_DIR is unset, relative to the working directory (as
$VAT_SENTEVAL_DIR's default, vat.geometry.probes, which is its `senteval/` subfolder)."""


def default_data_dir() -> Path:
    """The data folder: $VAT_DATA_DIR, else ../shared/data (relative to the working folder)."""
    return Path(os.environ.get(DATA_DIR_ENV) or DATA_DIR_DEFAULT).expanduser()


def _data_dir(train_data_dir: str | os.PathLike | None) -> Path:
    return default_data_dir() if train_data_dir is None else Path(train_data_dir).expanduser()


def _inside(path: str | os.PathLike, folder: Path) -> str | None:
    """`path` relative to `folder` in POSIX form when it lies inside it (links resolved on both
    sides, so a data folder reached through a link still counts), else None."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None


def file_record(path: str | os.PathLike, data_dir: Path) -> dict[str, Any]:
    """One training file as another machine finds it: {"path": its path inside `data_dir`}
    or {"name": its name} when it lies elsewhere, with "bytes" and "digest" (BLAKE2b-128 of
    the bytes as stored, vat.data.file_digest) when it can be read."""
    rel = _inside(path, data_dir)
    record: dict[str, Any] = {"path": rel} if rel else {"name": Path(path).name}
    try:
        record["bytes"] = os.stat(path).st_size
        record["digest"] = file_digest(path)
    except OSError:  # gone since it was read: the place is still worth recording
        record.pop("bytes", None)
    return record


def file_records(patterns: Sequence[str], data_dir: Path) -> list[dict[str, Any]]:
    """`file_record` of every file the paths or globs name (in their order, a glob's matches
    sorted, as vat.data.corpus.expand_files reads them); a pattern matching nothing is
    recorded by its name, so that the record still lists every source."""
    out = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if os.path.isfile(m)]
        out += [file_record(m, data_dir) for m in matches] or [{"name": Path(pattern).name}]
    return out


def data_record(hparams: Any, train_data_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """The training data of a DataModule's hyperparameters: absolute file paths (or globs), a
    Hub id, and the files' portable records (`file_records`, against the data folder
    `train_data_dir`, default $VAT_DATA_DIR). Called in the training process, whose current
    folder is the one the paths were typed relative to. The digests cost one read of each
    file per process (vat.data.file_digest remembers them; the token cache has read them)."""
    if hparams is None:
        return {}
    out: dict[str, Any] = {}
    for key in DATA_KEYS:
        value = hparams.get(key) if hasattr(hparams, "get") else getattr(hparams, key, None)
        if value is None or value == []:
            continue
        if key == "train_files":
            value = [os.path.abspath(os.path.expanduser(str(f))) for f in value]
        out[key] = value if isinstance(value, int | str | list) else str(value)
    if out.get("train_files"):
        out[RECORDS_KEY] = file_records(out["train_files"], _data_dir(train_data_dir))
    return out


def metrics_record(callback_metrics: dict[str, Any]) -> dict[str, float]:
    """The finite CARD_METRICS among a trainer's last logged values, as floats."""
    out = {}
    for key in CARD_METRICS:
        value = callback_metrics.get(key)
        if value is None:
            continue
        value = float(value.item() if hasattr(value, "item") else value)
        if math.isfinite(value):
            out[key] = value
    return out


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
    """Plain facts about how a checkpoint (read by `vat.share.checkpoint.read_checkpoint`) was
    trained: step, epoch, ModelCheckpoint's best score, loss/optimiser hyperparameters, and
    the training data (recorded, else from the run's config.yaml)."""
    facts: dict[str, Any] = {"source_checkpoint": Path(ckpt_path).name}
    recorded = (ckpt.get("vat") or {}).get("training")  # vat.share.training_record, at save time
    if isinstance(recorded, dict):
        facts.update(_plain(recorded))
    for key in ("global_step", "epoch"):
        if isinstance(ckpt.get(key), int):
            facts[key] = ckpt[key]
    hp = ckpt.get("hyper_parameters") or {}
    for key in ("loss", "optim", "noise"):
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
    typed = (ckpt.get("datamodule_hyper_parameters") or {}).get("train_files")
    data = facts.get("data") if isinstance(facts.get("data"), dict) else {}
    if not _all_absolute(data.get("train_files")) and isinstance(typed, list | tuple) and typed:
        # an older record holds bare names: the files as `vat train` was given them say more
        facts["data"] = {**data, "train_files": [str(f) for f in typed]}
    return facts


def _all_absolute(files: Any) -> bool:
    return (
        isinstance(files, list)
        and bool(files)
        and all(isinstance(f, str) and os.path.isabs(f) for f in files)
    )


def training_file_records(training: dict[str, Any], model: str = "the model") -> list[dict]:
    """The portable records of a training record (`file_records`; [] for older records, which
    have none), each checked: a dict naming a "path" inside the data folder (relative, never
    climbing out of it) or a bare "name", with an int size and a str digest when present. A
    malformed one is a CheckpointError naming its key: config.json can be edited by hand."""
    data = training.get("data") if isinstance(training, dict) else None
    records = data.get(RECORDS_KEY) if isinstance(data, dict) else None
    if records is None:
        return []
    key = f"{model}: training.data.{RECORDS_KEY}"
    if not isinstance(records, list):
        raise CheckpointError(f"{key} is a {type(records).__name__}, expected a list")
    for i, r in enumerate(records):
        where = r.get("path") if isinstance(r, dict) else None
        name = r.get("name") if isinstance(r, dict) else None
        ok = isinstance(r, dict) and (
            (isinstance(where, str) and machine_path(where) is None and where.strip("/") != "")
            or (isinstance(name, str) and name and "/" not in name and name != "..")
        )
        ok = ok and all(
            isinstance(r.get(k, t()), t) and not isinstance(r.get(k), bool)
            for k, t in (("bytes", int), ("digest", str))
        )
        if not ok:
            raise CheckpointError(
                f'{key}[{i}] is {r!r:.80}: expected {{"path": a path inside the data '
                'folder} or {"name": a file name}, with "bytes" (int) and "digest" (str)'
            )
    return records


# -- what leaves the machine: portable records only -----------------------------------------
def portable_name(path: str | os.PathLike, train_data_dir: str | os.PathLike | None = None) -> str:
    """How a file is named in what leaves this machine: its path inside the data folder when
    it lies there, else its name."""
    return _inside(os.path.expanduser(str(path)), _data_dir(train_data_dir)) or Path(path).name


def portable_training(
    training: dict[str, Any], train_data_dir: str | os.PathLike | None = None
) -> dict[str, Any]:
    """A copy of a training record (config.json's "training") that names no place on this
    machine: `train_files` becomes the portable records' paths and names (older records, which
    have none, get them here: each file the recorded paths find now, under the data folder
    `train_data_dir`, else its name), and a path given as the model training started from
    (init_from.model) its name. Everything else is kept; `machine_paths` finds what remains."""
    out = copy.deepcopy(training) if isinstance(training, dict) else {}
    data = out.get("data")
    if isinstance(data, dict) and (data.get("train_files") or data.get(RECORDS_KEY)):
        records = training_file_records(out)
        if not records:
            records = []
            for f in data.get("train_files") or []:
                f = os.path.expanduser(str(f))
                if os.path.isabs(f):
                    records += file_records([f], _data_dir(train_data_dir))
                else:  # relative to folders this machine had: its name is what travels
                    records.append({"name": Path(f).name})
        data[RECORDS_KEY] = records
        data["train_files"] = [r.get("path") or r["name"] for r in records]
    start = out.get("init_from")
    if isinstance(start, dict) and isinstance(start.get("model"), str):
        if machine_path(start["model"]) is not None:
            start["model"] = Path(os.path.expanduser(start["model"])).name
    return out


def portable_fit(fit: dict[str, Any], train_data_dir: str | os.PathLike | None = None) -> dict:
    """A copy of feature statistics' fit record (vat.feature_spec.FittedFeatures.fit) whose
    file lists ("files", "count_files") name each file as `portable_name` does."""
    out = dict(fit)
    for key in ("files", "count_files"):
        if isinstance(out.get(key), list):
            out[key] = [portable_name(f, train_data_dir) for f in out[key]]
    return out


# An absolute POSIX path, a Windows drive or UNC path, a home folder (~, ~user/...), or a
# path that climbs out of its folder (.., ../x, x/../y): each means something only on the
# machine that wrote it. A word is what whitespace and "=" separate, less the punctuation that
# wraps paths in prose ("`/x`", "(/x),", "a=/x"), so "nats/token", "28.00 / 0.770" or "</s>"
# are not paths and a glob keeps its brackets.
_WRAPPING = "`'\"()[]{},;:"
_MACHINE = re.compile(r"^(/[^/\s]|[A-Za-z]:[\\/]|\\\\|~([\w.-]*/|$))|(^|[/\\])\.\.([/\\]|$)")


def machine_path(text: str) -> str | None:
    """The first word of `text` that names a place on the machine that wrote it (an
    absolute path, a `~` home path, or a `../` escape), else None."""
    for token in text.split():
        for word in token.split("="):
            word = word.strip(_WRAPPING)
            if word and _MACHINE.search(word):
                return word
    return None


def machine_paths(obj: Any, key: str = "") -> list[tuple[str, str]]:
    """(key, string) of every string in a JSON-like value that `machine_path` flags; keys
    read as in the file ("training.data.train_files[0]")."""
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
    """Refuse, in one line naming the file and key, a value of what is about to leave this
    machine (config.json, shipped.json's texts, the feature statistics' fit record) that
    names a place on it. `values`: file label -> its JSON-like contents; `doing` starts the
    message ("cannot push ..."), `remedy` ends it."""
    for label, obj in values.items():
        hits = machine_paths(obj)
        if hits:
            key, text = hits[0]
            more = f" (and {len(hits) - 1} more such values)" if len(hits) > 1 else ""
            raise VatError(
                f"{doing}: {label} {key} names a place on this machine "
                f"({machine_path(text)!r}){more}; a shared model names its files by their "
                "path inside the data folder or by name" + (f"; {remedy}" if remedy else "")
            )


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
