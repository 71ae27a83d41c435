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

Training files are recorded by their absolute path (made absolute in the folder `vat train`
ran in, where it read them), so every reader finds them from any folder; a Hub dataset is
recorded by its id. `recorded_training_files` is the one way to find them again: an absolute
path as it is, a relative one (records from before issue 29) only in the model's own folders,
never in the current folder, where an unrelated file of the same name could be fitted on.
"""

from __future__ import annotations

import glob
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from vat.errors import OptionError

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


def data_record(hparams: Any) -> dict[str, Any]:
    """The training data of a DataModule's hyperparameters: absolute file paths (or globs) and
    a Hub id. Called in the training process, whose current folder is the one the paths were
    typed relative to."""
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
    for key in ("loss", "optim"):
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
        # a record from before issue 29 holds bare names: the files as `vat train` was given
        # them say more (an absolute path there is found from anywhere)
        facts["data"] = {**data, "train_files": [str(f) for f in typed]}
    return facts


def _all_absolute(files: Any) -> bool:
    return (
        isinstance(files, list)
        and bool(files)
        and all(isinstance(f, str) and os.path.isabs(f) for f in files)
    )


# -- finding the recorded training files again (issue 29) -----------------------------------------
class MissingTrainingFile(OptionError):
    """A recorded training file that is not on this machine; `tried` lists where vat looked."""

    def __init__(self, name: str, recorded: str, tried: list[Path], model: str) -> None:
        self.recorded, self.tried = recorded, tried
        super().__init__(
            name,
            f"{model} records the training file {recorded!r}, which is not here: looked for "
            f"{' and '.join(str(t) for t in tried)}; give text files of unlabeled sentences "
            "(one per line) instead",
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
    elif ckpt.parent.name == "checkpoints":  # RUN/checkpoints/*.ckpt (vat.train.run_dir)
        homes.append(ckpt.parent.parent)
    homes.append(ckpt.parent)
    return list(dict.fromkeys(homes))


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


def recorded_training_files(loaded: LoadedVAT, name: str = "fit_files") -> list[str]:
    """The model's recorded training files as paths here (`resolve_recorded_file`); an
    OptionError naming the argument `name` that replaces them when the model records none,
    and a MissingTrainingFile saying where vat looked when one is not here."""
    if not loaded.train_files:
        raise OptionError(
            name,
            f"{loaded.path} names no training files to fit the features on; give text files "
            "of unlabeled sentences (one per line)",
        )
    homes = training_file_homes(loaded.source)
    out = []
    for recorded in loaded.train_files:
        found, tried = resolve_recorded_file(str(recorded), homes)
        if found is None:
            raise MissingTrainingFile(name, str(recorded), tried, str(loaded.path))
        out.append(str(found))
    return out


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
