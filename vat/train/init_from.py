"""`vat train --init-from MODEL`: a fresh run that starts from a trained model's weights.

MODEL is any form `--model` takes (vat.share.resolve): a shipped name, an exported folder, a
run folder, a .ckpt, a Hub id. It is read once, before anything is built, and decides:

- the architecture: every `model.arch` field but dropout (a training setting, not part of
  the weights) is the model's. A config value that differs from the model's and from the
  option's default contradicts it and is refused in one line naming both values; a value
  left at its default is simply replaced. `data.max_len` may be shorter than the model's
  position table (a CPU run on short lines), never longer.
- the tokenizer: the model's own (`VATDataModule.use_tokenizer`); no BPE is trained, and the
  tokenized cache is keyed by this tokenizer as by any other. `data.tokenizer_path` may name
  the same tokenizer, no other.
- the prior N(0, s^2 I): the model's s (its latents are scaled to it, the paper's eq. 3).

The weights are copied into the fresh model; the optimiser, the learning-rate and KL
schedules and the rate controller start fresh (an exported or shipped model holds none of
them, and another run's state belongs to its own data and settings), which the start says
in one line. A checkpoint of this very run (`--run_dir`) is resumed instead, state and all:
that is `--ckpt_path`, said so. The continued run validates once before its first step, so
its curves start at the source model's own numbers on the new data, and its checkpoints
record where it started (`init_record`): the model card then counts the tokens behind it.

A resume of a continued run (the same command plus `--ckpt_path last`) reads none of this
again: the checkpoint holds the architecture, the tokenizer and the record. Its --init-from
must name the model the record names (or a checkpoint of this run): another would be
ignored, so it is refused in one line. So is a run folder another process is training in
(the checkpoint it stands for changes as it trains), and a recorded count (steps, tokens)
that is not a whole number >= 0.
"""

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
"""The architecture fields a continued run takes from its model (dropout may change)."""


@dataclass(frozen=True)
class Source:
    """What a run continues from: the model's architecture, tokenizer and prior, and, for a
    fresh start, the loaded model whose weights are copied in."""

    name: str
    """The model as the command named it (what its lines say)."""
    arch: dict[str, Any]
    tokenizer: str
    prior_std: float
    loaded: LoadedVAT | None = None
    record: dict[str, Any] | None = None


def portable_name(loaded: LoadedVAT) -> str:
    """The source's name as the record keeps it: a shipped name or Hub id as it is; a folder
    or checkpoint by the last parts of its path (run/checkpoints/last.ckpt), never the
    training machine's absolute path, which a shipped card must not hold."""
    src = loaded.source
    if src.kind in ("shipped", "hub"):
        return src.location
    p = Path(src.location)
    if src.kind == "checkpoint" and p.parent.name == "checkpoints":
        return str(Path(p.parent.parent.name, "checkpoints", p.name))
    return p.name


def from_loaded(loaded: LoadedVAT, given: str) -> Source:
    """The source a fresh continued run starts from (weights, record and all); `given` is
    the model as the command named it."""
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
    """The model's recorded training.KEY as a count (absent or null: 0). Anything but a whole
    number >= 0 is refused here, where it is read, naming the file and the key, so that no
    malformed record reaches int() (a traceback) or the start's line (a negative count)."""
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
    """The source of a resumed continued run: its own checkpoint, which holds the same
    architecture, tokenizer and prior as the model it started from."""
    meta = ckpt.get("vat") or {}
    return Source(
        str(path),
        dict(meta.get("model_config") or {}),
        str(meta.get("tokenizer") or ""),
        float(meta.get("prior_std", 0.0)),
    )


def same_run_checkpoint(loaded: LoadedVAT, run_dir: str, ckpt_dir: str) -> Path | None:
    """The source's .ckpt when it lies in this run's checkpoint folder (then a resume, not a
    continuation, is meant), else None."""
    if loaded.source.kind != "checkpoint":
        return None
    ckpt = Path(loaded.source.location).resolve()
    return ckpt if _this_run(ckpt, run_dir, ckpt_dir) else None


def _this_run(path: Path, run_dir: str, ckpt_dir: str) -> bool:
    """`path` is this run's folder or a file in its checkpoint folder."""
    path, run = path.expanduser().resolve(), Path(run_dir).resolve()
    return path == run or path.parent in {Path(ckpt_dir).resolve(), run / "checkpoints"}


def check_not_training(given: str, src: ModelSource) -> None:
    """A run folder stands for its best checkpoint, else last.ckpt: while another process
    trains in it (holds its lock) both change, and the weights taken would depend on the
    moment. Refused, naming the file it stands for now; a file given is read as it is."""
    pid = None if src.run_dir is None else lock_holder(Path(src.run_dir))
    if pid is not None:
        raise VatError(
            f"{OPTION} {given}: that run is training now (pid {pid} holds "
            f"{Path(src.run_dir) / LOCK_NAME}), and the checkpoint its folder stands for "
            f"changes as it trains; wait for it to finish, or give the checkpoint file to "
            f"start from, such as {src.location}"
        )


def check_resumed_start(given: str, ckpt: dict, path: Path, run_dir: str, ckpt_dir: str) -> None:
    """A resume continues its checkpoint, which records the model its run started from: an
    --init-from naming another would be ignored, so it is refused. The model as the record
    names it (portable_name) and this run itself (vat's GPU suite resumes with its own
    checkpoint) are the same start."""
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
    """Whether `given` names the model a record names: a shipped name or Hub id as it is, a
    path by its last parts (run/checkpoints/x.ckpt, a run folder's record of its checkpoint
    also by the run folder's name)."""
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
    """Make the run's config the source model's shape (module docstring); a key the config
    set against the model is one VatError naming both values."""
    arch = source.arch

    def refuse(option: str, ours: Any, theirs: Any, why: str = "") -> None:
        raise VatError(
            f"--{option} is {ours!r} here but {theirs!r} in {source.name}: {OPTION} takes the "
            f"model's {why or 'architecture'}; drop the key (or use a config of its shape)"
        )

    def explicit(option: str, value: Any) -> bool:
        return value != _get(defaults, option)

    for key in ARCH_FROM_MODEL:
        if key in ("vocab_size", "max_len") or key not in arch:
            continue  # linked from data.* (below)
        option = f"model.arch.{key}"
        value = _get(cfg, option)
        if value != arch[key] and explicit(option, value):
            refuse(option, value, arch[key])
        _set(cfg, option, arch[key])
    vocab = _get(cfg, "data.vocab_size")
    if vocab != arch["vocab_size"] and explicit("data.vocab_size", vocab):
        refuse("data.vocab_size", vocab, arch["vocab_size"], "vocabulary")
    _set(cfg, "data.vocab_size", arch["vocab_size"])
    _set(cfg, "model.arch.vocab_size", arch["vocab_size"])
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
    """What a fresh continued run says when it starts: where from, and what starts fresh."""
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
    """One validation before the first training step, logged at step 0: a continued run's
    curves then start at its model's own numbers on this run's data. Lightning validates
    first only in its sanity check, whose numbers it drops; this runs the fit loop's own
    validation as Lightning does between steps (TrainingEpochLoop.on_advance_end), in the
    same logger, so TensorBoard gets no second event file."""

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
