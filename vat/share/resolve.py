"""What a model argument names: the one place that resolves `--model` / `vat.load(...)`.

Every command's `--model` (alias `--ckpt`), `vat export`'s source and `vat.load` accept

    a training checkpoint      runs/demo/checkpoints/last.ckpt
    an exported folder         my-vat/              (config.json, model.safetensors, ...)
    a run folder               runs/demo            its best checkpoint (checkpoints/best-*.ckpt,
                                                     on --best_monitor), else checkpoints/last.ckpt
    a Hugging Face Hub repo id user/my-vat          downloaded into the Hub cache

`resolve_model` says which (without loading anything); `load_model` loads it. Errors name the
Python argument (`model`); the command line shows its flag (`--model`, vat.errors.run_cli).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from vat.errors import OptionError
from vat.share.checkpoint import LoadedVAT, read_checkpoint, vat_from_checkpoint
from vat.share.hub import CONFIG_NAME, from_pretrained

Kind = Literal["checkpoint", "folder", "hub"]


@dataclass(frozen=True)
class ModelSource:
    kind: Kind
    location: str  # a local path (checkpoint, folder) or a Hub repo id
    run_dir: str | None = None  # the run folder it was chosen from, if any

    @property
    def path(self) -> Path:
        return Path(self.location)


def run_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run folder stands for: its best (the newest best-*.ckpt, written on
    --best_monitor), else last.ckpt; None when it has neither."""
    ckpts = run_dir / "checkpoints"
    best = sorted(ckpts.glob("best-*.ckpt"), key=lambda p: (p.stat().st_mtime, p.name))
    if best:
        return best[-1]
    last = ckpts / "last.ckpt"
    return last if last.is_file() else None


def looks_like_repo_id(text: str) -> bool:
    """user/name: one slash, not a relative or absolute path, not a file name."""
    return (
        text.count("/") == 1
        and not text.startswith((".", "/", "~"))
        and not text.endswith((".ckpt", "/"))
        and all(text.split("/"))
    )


def resolve_model(model: str | os.PathLike, *, name: str = "model") -> ModelSource:
    """Which kind of model `model` names; `name` is the argument named in errors."""
    p = Path(model).expanduser()
    if p.is_file():
        return ModelSource("checkpoint", str(p))
    if p.is_dir():
        if (p / CONFIG_NAME).is_file():
            return ModelSource("folder", str(p))
        if (p / "checkpoints").is_dir():
            ckpt = run_checkpoint(p)
            if ckpt is None:
                raise OptionError(
                    name, f"{p} is a run folder without checkpoints/best-*.ckpt or last.ckpt"
                )
            return ModelSource("checkpoint", str(ckpt), run_dir=str(p))
        raise OptionError(
            name,
            f"{p} is a directory but neither an exported vat folder (config.json) nor a run "
            "folder (checkpoints/)",
        )
    if p.exists():
        raise OptionError(name, f"{p} is neither a file nor a folder")
    if looks_like_repo_id(str(model)):
        return ModelSource("hub", str(model))
    raise OptionError(
        name,
        f"{model} does not exist (expected a .ckpt, an exported folder, a run folder or a "
        "Hub repo id user/name)",
    )


def load_model(
    model: str | os.PathLike | ModelSource,
    device: str | torch.device = "cpu",
    *,
    name: str = "model",
) -> LoadedVAT:
    """Model (eval mode), tokenizer and metadata of whatever `model` names."""
    src = model if isinstance(model, ModelSource) else resolve_model(model, name=name)
    if src.kind == "checkpoint":
        return vat_from_checkpoint(read_checkpoint(src.location, device), src.location, device)
    return from_pretrained(src.location, device=device)


def checkpoint_path(model: str | os.PathLike) -> Path | None:
    """The training checkpoint file `model` names (itself, or a run folder's), else None (an
    exported folder or a Hub id carries no trainer state)."""
    src = resolve_model(model)
    return src.path if src.kind == "checkpoint" else None


def load_vat(
    model: str | os.PathLike | ModelSource, map_location: str | torch.device = "cpu"
) -> LoadedVAT:
    """`load_model` by the name the library has used since issue 14 (`vat.checkpoint.load_vat`)."""
    return load_model(model, map_location)
