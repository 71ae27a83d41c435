"""`vat train --init-from MODEL`: a fresh run that starts from a trained model's weights,
architecture, tokenizer and prior; the optimiser, schedules and rate controller start fresh."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from vat.errors import VatError
from vat.model import VATConfig
from vat.runs.run_dir import LOCK_NAME, lock_holder
from vat.share.loaded import LoadedVAT, ModelSource
from vat.tokenizer import VATTokenizer

OPTION = "--init-from"
ARCH_FROM_MODEL = tuple(f.name for f in fields(VATConfig) if f.name != "dropout")


@dataclass(frozen=True)
class Source:
    """What a run continues from; `loaded` and `record` only for a fresh start."""

    name: str
    arch: dict[str, Any]
    tokenizer: str
    prior_std: float
    loaded: LoadedVAT | None = None
    record: dict[str, Any] | None = None


def portable_name(loaded: LoadedVAT) -> str:
    """The source's name as the record keeps it: never the machine's absolute path."""
    src = loaded.source
    if src.kind in ("shipped", "hub"):
        return src.location
    p = Path(src.location)
    if src.kind == "checkpoint" and p.parent.name == "checkpoints":
        return str(Path(p.parent.parent.name, "checkpoints", p.name))
    return p.name


def from_loaded(loaded: LoadedVAT, given: str) -> Source:
    """The source a fresh continued run starts from; `given`: as the command named it."""
    own = _count(loaded, given, "tokens_seen")
    record = {
        "model": portable_name(loaded),
        "kind": loaded.source.kind,
        "global_step": _count(loaded, given, "global_step"),
        "tokens_seen": own,
        # the tokens behind the source, its own start included when it was itself continued
        "tokens_total": _count(loaded, given, "tokens_total") or own,
    }
    return Source(
        given,
        loaded.config.to_dict(),
        loaded.tokenizer.to_str(),
        float(loaded.prior_std),
        loaded,
        record,
    )


def _count(loaded: LoadedVAT, given: str, key: str) -> int:
    """The recorded training.KEY as a count (absent: 0); anything else is refused."""
    value = (loaded.training or {}).get(key)
    if value is None:
        return 0
    if (type(value) is int and value >= 0) or (
        type(value) is float and math.isfinite(value) and value >= 0 and value.is_integer()
    ):
        return int(value)
    src = loaded.source
    where, entry = (
        (src.location, "vat.training")
        if src.kind == "checkpoint"
        else (Path(src.folder or src.location) / "config.json", "training")
    )
    raise VatError(
        f"{OPTION} {given}: {entry}.{key} in {where} is {value!r:.40}, not a count (a whole "
        f"number >= 0)"
    )


def from_checkpoint(ckpt: dict, path: Path) -> Source:
    meta = ckpt.get("vat") or {}
    return Source(
        str(path),
        dict(meta.get("model_config") or {}),
        str(meta.get("tokenizer") or ""),
        float(meta.get("prior_std", 0.0)),
    )


def same_run_checkpoint(loaded: LoadedVAT, run_dir: str, ckpt_dir: str) -> Path | None:
    if loaded.source.kind != "checkpoint":
        return None
    ckpt = Path(loaded.source.location).resolve()
    return ckpt if _this_run(ckpt, run_dir, ckpt_dir) else None


def _this_run(path: Path, run_dir: str, ckpt_dir: str) -> bool:
    path, run = path.expanduser().resolve(), Path(run_dir).resolve()
    return path == run or path.parent in {Path(ckpt_dir).resolve(), run / "checkpoints"}


def check_not_training(given: str, src: ModelSource) -> None:
    """Refuse a run folder another process trains in (a file given is read as it is)."""
    pid = None if src.run_dir is None else lock_holder(Path(src.run_dir))
    if pid is not None:
        raise VatError(
            f"{OPTION} {given}: that run is training now (pid {pid} holds "
            f"{Path(src.run_dir) / LOCK_NAME}), and the checkpoint its folder stands for "
            f"changes as it trains; wait for it to finish, or give the checkpoint file to "
            f"start from, such as {src.location}"
        )


def check_resumed_start(given: str, ckpt: dict, path: Path, run_dir: str, ckpt_dir: str) -> None:
    """Refuse an --init-from that a resume would ignore."""
    if _this_run(Path(given), run_dir, ckpt_dir):
        return
    record = ((ckpt.get("vat") or {}).get("training") or {}).get("init_from")
    model = record.get("model") if isinstance(record, dict) else None
    if model is not None and _names(given, str(model)):
        return
    started, way = (
        (model, "that model (or no --init-from)") if model else ("nothing", "no --init-from")
    )
    raise VatError(
        f"{OPTION} {given}: this run started from {started}, as {path} records, and a resume "
        f"continues that checkpoint; give {way} to resume, or a fresh --run_dir to start "
        f"from {given}"
    )


def _names(given: str, recorded: str) -> bool:
    """Whether `given` names the recorded model: as it is, by its last parts, or its run."""
    parts, ours = Path(recorded).parts, Path(given).expanduser().resolve().parts
    run_folder = len(parts) == 3 and parts[1] == "checkpoints" and ours[-1:] == parts[:1]
    return given == recorded or (bool(parts) and ours[-len(parts) :] == parts) or run_folder


def _get(ns: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        ns = ns.get(part) if hasattr(ns, "get") else getattr(ns, part, None)
    return ns


def _set(ns: Any, dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for part in path:
        ns = ns[part] if hasattr(ns, "__getitem__") else getattr(ns, part)
    ns[last] = value


def apply_to_config(cfg: Any, defaults: Any, source: Source) -> None:
    """Make the run's config the source model's shape: architecture, tokenizer and prior; a
    key the config set against the model is refused naming both values. `data.max_len` may
    be shorter than the model's positions, never longer."""
    arch = source.arch

    def refuse(option: str, ours: Any, theirs: Any, why: str = "") -> None:
        raise VatError(
            f"--{option} is {ours!r} here but {theirs!r} in {source.name}: {OPTION} takes the "
            f"model's {why or 'architecture'}; drop the key (or use a config of its shape)"
        )

    def explicit(option: str, value: Any) -> bool:
        return value != _get(defaults, option)

    for key in ARCH_FROM_MODEL:
        if key == "max_len" or key not in arch:
            continue  # below
        option = "data.vocab_size" if key == "vocab_size" else f"model.arch.{key}"  # linked
        value = _get(cfg, option)
        if value != arch[key] and explicit(option, value):
            refuse(option, value, arch[key], "vocabulary" if key == "vocab_size" else "")
        _set(cfg, option, arch[key])
        _set(cfg, f"model.arch.{key}", arch[key])
    max_len = _get(cfg, "data.max_len")
    if not explicit("data.max_len", max_len):
        max_len = arch["max_len"]
    elif max_len > arch["max_len"]:
        raise VatError(
            f"--data.max_len is {max_len} here but {source.name} has positions for "
            f"{arch['max_len']} tokens: {OPTION} can train on shorter lines, not on longer ones"
        )
    _set(cfg, "data.max_len", max_len)
    _set(cfg, "model.arch.max_len", arch["max_len"])  # the model's position table
    prior = _get(cfg, "model.loss.prior_std")
    if not math.isclose(prior, source.prior_std, rel_tol=1e-6):  # s is kept as float32
        if explicit("model.loss.prior_std", prior):
            refuse("model.loss.prior_std", prior, round(source.prior_std, 6), "prior N(0, s^2 I)")
        _set(cfg, "model.loss.prior_std", round(source.prior_std, 6))
    given = _get(cfg, "data.tokenizer_path")
    if given:
        try:
            same = VATTokenizer.from_file(given).to_str() == source.tokenizer
        except (OSError, ValueError) as e:
            raise VatError(f"--data.tokenizer_path {given}: {e}") from None
        if not same:
            raise VatError(
                f"--data.tokenizer_path {given} is not the tokenizer of {source.name}: "
                f"{OPTION} trains with the model's own tokenizer; drop data.tokenizer_path"
            )


def start_line(source: Source) -> str:
    rec = source.record or {}
    tokens = int(rec.get("tokens_total") or 0)
    behind = f", {count(tokens)} tokens behind it" if tokens else ""
    why = (
        "it is another run's checkpoint: its state belongs to that run's data and settings"
        if rec.get("kind") == "checkpoint"
        else "an exported model holds no training state"
    )
    return (
        f"vat: {OPTION} {source.name}: starting from its weights and tokenizer (step "
        f"{rec.get('global_step', 0):,}{behind}); the optimiser, the learning-rate and KL "
        f"schedules and the rate controller start fresh ({why})"
    )


class ValidateFirst(Callback):
    """One logged validation before the first step (Lightning's sanity check drops its numbers)."""

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.global_step != 0 or not trainer.limit_val_batches:
            return
        trainer.validating = True  # as the loop sets it (an empty validation set is skipped)
        first_loop_iter = trainer._logger_connector._first_loop_iter
        trainer.fit_loop.epoch_loop.val_loop.run()
        trainer.training = True
        trainer._logger_connector._first_loop_iter = first_loop_iter


def count(tokens: int) -> str:
    """323, 1.65M, 238.4M, 12.5B, 3.2T, 1.00e+308: a token count as people read it."""
    if tokens < 1_000_000:
        return f"{tokens:,}"
    for unit, power in (("M", 6), ("B", 9), ("T", 12)) if tokens < 10**15 else ():
        text = f"{tokens / 10**power:.4g}"
        if float(text) < 1000:  # 999,999,999 is 1B, not 1000M
            return f"{text}{unit}"
    digits = str(tokens)  # not via float: a recorded count may be larger than a float holds
    return f"{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"


def say(line: str) -> None:
    print(line, file=sys.stderr)
