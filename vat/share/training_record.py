"""What a checkpoint records about its own training, for the model card.

`training_facts` gathers it from a checkpoint already read: the recorded training below, the
step and epoch, ModelCheckpoint's scores, the loss and optimiser settings, and the run's data.

`VATSystem.on_save_checkpoint` stores `training_record(...)` as checkpoint["vat"]["training"],
so a .ckpt copied out of its run folder still says what it was trained on, for how long, and
how well it did:

    {"global_step": 1200, "epoch": 3,
     "tokens_seen": 1843200, "sentences_seen": 153600,
     "data": {"train_files": ["/data/demo_en.txt.gz"], "hf_dataset": None, ...},
     "metrics": {"val/nll": 2.31, "val/kl": 11.9, "val/recon_bleu": 71.2, ...}}

Training files are recorded twice. `train_files` holds them by their absolute path
(made absolute in the folder `vat train` ran in), for the training machine itself; a Hub
dataset is recorded by its id. `train_file_records` holds each file the patterns matched as
it can be found on another machine: its path inside the data folder ($VAT_DATA_DIR, else
../shared/data: the folder the tests, the offline bundle and the GPU suite copy with the same
layout) when it lies there, else its name alone, with its size and digest
(`vat.data.file_digest`), so that a file found elsewhere is known to be the one trained on:

    "train_files": ["/home/u/shared/data/corpus/newstest_en.201[0-7].txt.gz"],
    "train_file_records": [{"path": "corpus/newstest_en.2010.txt.gz", "bytes": 125409,
                            "digest": "0c5e..."}, ...]

`recorded_training_files` is the one way to find them again, and it treats the record as a
label, never as an instruction: a file the user did not name is read only when it lies inside
the model's own folders (links and `..` resolved) or when it is byte for byte a file the
record describes (its size and digest match, so its contents were already known to whoever
wrote the model). That holds the absolute paths on the training machine, and each record
under the data folder, else in the model's own folders; older records (plain strings, no
`train_file_records`, so no digest) only in the model's own folders, never in the current
folder, where an unrelated file of the same name could be fitted on, and never at an
absolute path elsewhere, which a downloaded model could point at any file of its user's.
Every file so read is named on stderr, with the reason.

`portable_training` is what leaves the machine (`vat pretrained add`, a Hub push): the
records alone, and `machine_paths` finds any string that still names a place on it.
"""

from __future__ import annotations

import copy
import glob
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from vat.data.file_digest import file_digest
from vat.errors import CheckpointError, OptionError, VatError

if TYPE_CHECKING:
    from vat.share.loaded import LoadedVAT, ModelSource

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
        # an older record holds bare names: the files as `vat train` was given
        # them say more (an absolute path there is found from anywhere)
        facts["data"] = {**data, "train_files": [str(f) for f in typed]}
    return facts


def _all_absolute(files: Any) -> bool:
    return (
        isinstance(files, list)
        and bool(files)
        and all(isinstance(f, str) and os.path.isabs(f) for f in files)
    )


# -- finding the recorded training files again ------------------------------------------------
class MissingTrainingFile(OptionError):
    """A recorded training file that is not on this machine; `tried` lists where vat looked."""

    def __init__(
        self, name: str, recorded: str, tried: list[Path], model: str, hint: str = ""
    ) -> None:
        self.recorded, self.tried = recorded, tried
        super().__init__(
            name,
            f"{model} records the training file {recorded!r}, which is not here: looked for "
            f"{' and '.join(str(t) for t in tried)}; {hint}give text files of unlabeled "
            "sentences (one per line) instead",
        )


def training_file_homes(source: ModelSource) -> list[Path]:
    """The folders a relative recorded training file is relative to: an exported folder
    (also a Hub download or a shipped model), else a checkpoint's run folder and the
    checkpoint's own folder. Never the current folder: a name looked up there finds whatever
    file happens to share it."""
    if source.kind != "checkpoint":
        return [source.path.absolute()]
    ckpt = Path(source.location).absolute()
    homes = []
    if source.run_dir:
        homes.append(Path(source.run_dir).absolute())
    elif ckpt.parent.name == "checkpoints":  # RUN/checkpoints/*.ckpt (vat.runs.run_dir)
        homes.append(ckpt.parent.parent)
    homes.append(ckpt.parent)
    return list(dict.fromkeys(homes))


INSIDE = "inside the model's folder"
MATCHES = "its size and digest match the model's record"


def _own_roots(source: ModelSource, homes: Sequence[Path]) -> list[Path]:
    """The model's folders with links resolved, for the test of what lies inside them. A Hub
    download's snapshot folder holds links into its repository's cache folder (../../blobs),
    so that folder counts as the model's own too."""
    roots = [Path(os.path.realpath(h)) for h in homes]
    if source.kind == "hub" and roots and roots[0].parent.name == "snapshots":
        roots.append(roots[0].parent.parent)
    return roots


def _is_own(path: str | os.PathLike, roots: Sequence[Path]) -> bool:
    """`path` lies inside one of the model's folders once links and `..` are resolved, so a
    recorded name cannot climb out of them or lead out through a link."""
    return any(_inside(path, root) for root in roots)


def _matches(path: str | os.PathLike, record: dict) -> bool:
    """The file holds the bytes `record` describes: its size (cheap, first), then its digest."""
    if not isinstance(record.get("bytes"), int) or not isinstance(record.get("digest"), str):
        return False
    if not os.path.isfile(path):  # reading a FIFO or a device to digest it would block
        return False
    try:
        return os.stat(path).st_size == record["bytes"] and file_digest(path) == record["digest"]
    except OSError:
        return False


def _why_readable(path: str | os.PathLike, roots: Sequence[Path], records: list[dict]) -> str:
    """Why vat may read a file the model names ("" when it may not): it lies inside the
    model's own folders, or it is byte for byte a file the model's record describes, which
    means the model's author already knew its contents and reading it reveals nothing."""
    if _is_own(path, roots):
        return INSIDE
    if any(_matches(path, r) for r in records):
        return MATCHES
    return ""


def _refused(name: str, model: str, path: str | os.PathLike, records: list[dict]) -> OptionError:
    """A file the model names outside its own folders that vat will not read."""
    why = (
        "that file's size and digest match none of the files the model records"
        if any("digest" in r for r in records)
        else "the model records no size and digest to check it by (an older record)"
    )
    real = os.path.realpath(path)
    link = f" (that is {real})" if real != os.path.abspath(path) else ""
    return OptionError(
        name,
        f"{model} names the training file {str(path)!r}{link}, outside the model's own "
        "folder, and "
        f"{why}; vat reads a file a model names only inside its folder or when it is "
        "byte for byte the file recorded, so give the text files yourself (one sentence "
        "per line)",
    )


def resolve_recorded_file(recorded: str, homes: Sequence[Path]) -> tuple[Path | None, list[Path]]:
    """(the file or glob `recorded` names here, or None; the paths tried): an absolute path
    as it is, a relative one in the first of `homes` where it exists."""
    p = Path(os.path.expanduser(recorded))
    tried = [p] if p.is_absolute() else [Path(h) / p for h in homes]
    for t in tried:
        # a glob counts when it matches; a path when anything is there (a link, a folder or a
        # FIFO is then named as such by vat.data.corpus.expand_files, not skipped)
        if (glob.has_magic(str(t)) and glob.glob(str(t))) or os.path.lexists(t):
            return t, tried
    return None, tried


def _expanded(pattern: Path) -> list[Path]:
    """The files a found path or glob names, in the order vat.data.corpus reads them."""
    if glob.has_magic(str(pattern)):
        return [Path(m) for m in sorted(glob.glob(str(pattern)))]
    return [pattern]


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


def _check_record(found: Path, record: dict, model: str, name: str, hint: str) -> None:
    """The file found for `record` is the one trained on: its size, then its digest (a read
    of the file, which a fit reads anyway), when recorded."""
    label = record.get("path") or record["name"]
    size = os.stat(found).st_size
    if "bytes" in record and size != record["bytes"]:
        why = f"{size:,} bytes where the model's file had {record['bytes']:,}"
    elif "digest" in record and file_digest(found) != record["digest"]:
        why = "the same size but other bytes (its digest differs from the recorded one)"
    else:
        return
    raise OptionError(
        name,
        f"{found} is not the training file {label!r} that {model} records: it has {why}; "
        f"{hint}give text files of unlabeled sentences (one per line) instead",
    )


def _locate_record(
    record: dict,
    loaded: LoadedVAT,
    data_dir: Path,
    homes: list[Path],
    roots: list[Path],
    name: str,
) -> tuple[Path, str]:
    """Where `record` is here, and why vat may read it: inside the data folder when its size
    and digest match (a record without them is never read from there: vat could not tell the
    file from another), else in the model's own folders; a file found is checked against the
    record's size and digest."""
    model = str(loaded.path)
    label = record.get("path") or record["name"]
    tried: list[Path] = []
    hint = (
        f"the data folder is {os.path.abspath(data_dir)}: point $VAT_DATA_DIR at the one that "
        f"holds {label}, or "
        if "path" in record
        else ""
    )
    if "path" in record:
        candidate = Path(os.path.abspath(data_dir)) / record["path"]
        tried.append(candidate)
        if os.path.lexists(candidate):
            if not candidate.is_file():  # a folder or a FIFO: named by expand_files
                return candidate, ""
            _check_record(candidate, record, model, name, hint)
            if _matches(candidate, record) or _is_own(candidate, roots):
                return candidate, MATCHES if _matches(candidate, record) else INSIDE
            raise _refused(name, model, candidate, [record])
    found, more = resolve_recorded_file(label, homes)
    tried += more
    if found is None:
        raise MissingTrainingFile(name, label, tried, model, hint)
    if not found.is_file():  # a folder or a FIFO is named by vat.data.corpus.expand_files
        return found, ""
    _check_record(found, record, model, name, hint)
    why = _why_readable(found, roots, [record])
    if not why:  # a link in the model's folder that leads out of it
        raise _refused(name, model, found, [record])
    return found, why


def locate_training_files(
    loaded: LoadedVAT,
    name: str = "fit_files",
    train_data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
) -> list[tuple[str, str]]:
    """(path here, why vat may read it) of each of the model's recorded training files.

    A model's record of where it was trained is a label, not an instruction: it never makes
    vat read a file the user did not name unless the file lies inside the model's own
    folders (`training_file_homes`, links and `..` resolved), or it is byte for byte a file
    the model records (size and digest of a portable record), which tells its author
    nothing new. So: the recorded absolute paths when every one is here and each passes that
    test (the training machine); else each portable record inside the data folder
    `train_data_dir` (default $VAT_DATA_DIR, else ../shared/data), its size and digest
    matching, or inside the model's own folders; an older record (no sizes and digests) only
    inside the model's own folders. An OptionError naming the argument `name` when the model
    records none or a file is refused, a MissingTrainingFile saying where vat looked when one
    is not here. `limit`: only the first so many files (vat explore browses one)."""
    model = str(loaded.path)
    records = training_file_records(loaded.training, model)
    if not loaded.train_files and not records:
        raise OptionError(
            name,
            f"{loaded.path} names no training files to fit the features on; give text files "
            "of unlabeled sentences (one per line)",
        )
    homes = training_file_homes(loaded.source)
    roots = _own_roots(loaded.source, homes)
    absolute = [f for f in loaded.train_files if os.path.isabs(os.path.expanduser(str(f)))]
    refusal: OptionError | None = None
    if records and absolute:
        here = [resolve_recorded_file(str(f), [])[0] for f in absolute]
        if all(here):  # the training machine: each file checked before it is read
            files = [f for p in here for f in _expanded(p)][:limit]
            whys = [_why_readable(f, roots, records) for f in files]
            if all(whys):
                return [(str(f), w) for f, w in zip(files, whys)]
            refusal = _refused(name, model, files[whys.index("")], records)
    if records:
        data_dir = _data_dir(train_data_dir)
        try:
            return [
                (str(p), why)
                for p, why in (
                    _locate_record(r, loaded, data_dir, homes, roots, name) for r in records[:limit]
                )
            ]
        except OptionError:
            if refusal is not None:  # the file at the recorded place says more
                raise refusal from None
            raise
    out: list[tuple[str, str]] = []
    for recorded in loaded.train_files:
        found, tried = resolve_recorded_file(str(recorded), homes)
        if found is None:
            raise MissingTrainingFile(name, str(recorded), tried, model)
        for f in _expanded(found):
            if f.is_file() and not _is_own(f, roots):
                raise _refused(name, model, f, [])
            out.append((str(f), INSIDE if f.is_file() else ""))
        if limit and len(out) >= limit:
            break
    return out[:limit]


_SAID: set[tuple] = set()


def say_training_files(found: list[tuple[str, str]], doing: str) -> None:
    """One line on stderr naming the training files vat reads for `doing` and why it may, once
    per process for the same files: a file a user did not name is never read silently."""
    key = (doing, tuple(found))
    if not found or key in _SAID:
        return
    _SAID.add(key)
    paths = [p for p, _ in found]
    whys = list(dict.fromkeys(w for _, w in found if w))
    if len(paths) == 1:
        what = f"the model's training file {paths[0]}"
    else:
        shown = ", ".join(paths[:2]) + (f" and {len(paths) - 2} more" if len(paths) > 2 else "")
        what = f"the model's {len(paths)} training files {shown}"
    if len(whys) == 1 and len(paths) > 1:
        why = {INSIDE: "inside the model's folder", MATCHES: "their sizes and digests match "
               "the model's record"}[whys[0]]  # fmt: skip
    else:
        why = " or ".join(whys)
    print(f"vat: {doing} {what}" + (f" ({why})" if why else ""), file=sys.stderr)


def recorded_training_files(
    loaded: LoadedVAT,
    name: str = "fit_files",
    train_data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    doing: str | None = "fitting on",
) -> list[str]:
    """The model's recorded training files as paths here (`locate_training_files`), said on
    stderr (`say_training_files`: "vat: fitting on the model's training file X (inside the
    model's folder)") unless `doing` is None."""
    found = locate_training_files(loaded, name, train_data_dir, limit)
    if doing:
        say_training_files(found, doing)
    return [p for p, _ in found]


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
