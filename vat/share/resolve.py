"""`load_vat(source)`: the one place that tells the four kinds of model source apart.

- a training checkpoint (a file, usually `.ckpt`): `vat.share.checkpoint.load_checkpoint`;
- an exported folder (holds `config.json`): `vat.share.hub.from_pretrained`;
- a run folder (what `vat train --run_dir` wrote; holds `checkpoints/`): its best checkpoint
  when the run kept one (`best-step*.ckpt`, see `vat.train.checkpointing.best_checkpoint`),
  else its `last.ckpt`;
- anything else shaped like `user/name`: a Hugging Face Hub repo id, downloaded by
  `vat.share.hub.from_pretrained`.

`vat.load`, every command's model option, the generator, the evaluation encoders and the
exporter call this; nothing else decides what a path means.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from vat.errors import CheckpointError
from vat.share.checkpoint import LoadedVAT, load_checkpoint
from vat.share.hub import from_pretrained, is_pretrained_dir

CHECKPOINTS_DIR = "checkpoints"


def run_checkpoint(run_dir: str | os.PathLike) -> Path:
    """The checkpoint a run folder stands for: its best one if it kept one, else last.ckpt."""
    folder = Path(run_dir) / CHECKPOINTS_DIR
    best = sorted(folder.glob("best-step*.ckpt"))
    if best:
        return best[-1]  # one is kept (save_top_k=1); the highest step if a copy left more
    if (folder / "last.ckpt").is_file():
        return folder / "last.ckpt"
    raise CheckpointError(
        f"{run_dir} is a run folder without checkpoints (expected {folder}/best-step*.ckpt "
        "or last.ckpt); has the run saved one yet?"
    )


def is_run_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return p.is_dir() and (p / CHECKPOINTS_DIR).is_dir() and not is_pretrained_dir(p)


def checkpoint_path(source: str | os.PathLike) -> Path | None:
    """The training checkpoint file `source` names (itself, or a run folder's), else None
    (an exported folder or a Hub id, which carry no trainer state)."""
    p = Path(source).expanduser()
    if p.is_file():
        return p
    if is_run_dir(p):
        return run_checkpoint(p)
    return None


def load_vat(
    source: str | os.PathLike,
    map_location: str | torch.device = "cpu",
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> LoadedVAT:
    """Model (eval mode), tokenizer and metadata from any model source (see the module doc).
    A missing or unusable source is a one-line CheckpointError naming it."""
    ckpt = checkpoint_path(source)
    if ckpt is not None:
        return load_checkpoint(ckpt, map_location)
    p = Path(source).expanduser()
    if p.is_dir() and not is_pretrained_dir(p):
        raise CheckpointError(
            f"{p} is a directory but neither an exported vat folder (no config.json) nor a run "
            f"folder (no {CHECKPOINTS_DIR}/)"
        )
    return from_pretrained(
        source, device=map_location, revision=revision, token=token, cache_dir=cache_dir
    )
