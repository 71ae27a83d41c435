"""Load a vat checkpoint without Lightning and without executing pickled code.

A vat checkpoint is a Lightning checkpoint whose `state_dict` holds the model under the
prefix `model.` and whose `vat` entry carries everything needed to use it alone:

    checkpoint["vat"] = {
        "format_version": 1,
        "model_config": {...},          # VATConfig fields
        "prior_std": float,             # s of the scaled prior N(0, s^2 I)
        "tokenizer": str,               # the tokenizers JSON
        "length_histogram": [int, ...], # counts of training sequence lengths (with </s>)
    }
"""

from __future__ import annotations

import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from vat.io import atomic_write
from vat.model import VAT, VATConfig
from vat.tokenizer import VATTokenizer

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or not a vat checkpoint."""


@dataclass
class LoadedVAT:
    model: VAT
    tokenizer: VATTokenizer
    prior_std: float
    length_histogram: list[int]
    path: str


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """torch.load with weights_only=True (no pickled code runs) and one-line errors."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"checkpoint {p} does not exist")
    if p.is_dir():
        raise CheckpointError(f"checkpoint {p} is a directory, expected a .ckpt file")
    try:
        ckpt = torch.load(p, map_location=map_location, weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {p} is truncated, corrupt or not a torch checkpoint ({first[:200]})") from None
    if not isinstance(ckpt, dict) or "vat" not in ckpt or "state_dict" not in ckpt:
        raise CheckpointError(f"{p} is not a vat checkpoint (no 'vat' metadata; was it written by vat's train.py?)")
    return ckpt


def load_vat(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> LoadedVAT:
    """Model (in eval mode), tokenizer and metadata from a vat checkpoint."""
    return vat_from_checkpoint(read_checkpoint(path, map_location), path, map_location)


def vat_from_checkpoint(
    ckpt: dict, path: str | os.PathLike, map_location: str | torch.device = "cpu"
) -> LoadedVAT:
    """`load_vat` on a checkpoint dict already read by `read_checkpoint` (`path` names it in
    errors), for callers that also need its trainer state (e.g. `global_step`): one read."""
    meta = ckpt["vat"]
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: unsupported vat checkpoint format {meta.get('format_version')!r}")
    config = VATConfig.from_dict(meta["model_config"])
    tokenizer = VATTokenizer.from_str(meta["tokenizer"])
    if tokenizer.vocab_size > config.vocab_size:
        raise CheckpointError(
            f"{path}: its tokenizer has {tokenizer.vocab_size} tokens but the model only {config.vocab_size}"
        )
    model = VAT(config)
    state = {k[len("model.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("model.")}
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise CheckpointError(f"{path}: weights do not match its model config ({str(e).splitlines()[0]})") from None
    model.to(map_location).eval()
    return LoadedVAT(model, tokenizer, float(meta["prior_std"]), list(meta.get("length_histogram", [])), str(path))


def vat_metadata(model: VAT, tokenizer: VATTokenizer, prior_std: float, length_histogram: list[int]) -> dict:
    """The `checkpoint["vat"]` entry (plain types only, so weights_only loading works)."""
    return {
        "format_version": FORMAT_VERSION,
        "model_config": model.config.to_dict(),
        "prior_std": float(prior_std),
        "tokenizer": tokenizer.to_str(),
        "length_histogram": [int(c) for c in length_histogram],
    }


def save_vat(
    path: str | os.PathLike, model: VAT, tokenizer: VATTokenizer, prior_std: float, length_histogram: list[int] | None = None
) -> None:
    """Write a minimal vat checkpoint (no trainer state) atomically: temp file, then rename."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    ckpt = {"state_dict": state, "vat": vat_metadata(model, tokenizer, prior_std, length_histogram or [])}
    atomic_torch_save(ckpt, path)


def atomic_torch_save(obj: object, path: str | os.PathLike) -> None:
    """torch.save through `vat.io.atomic_write`: a killed write never leaves a truncated
    checkpoint at `path`, and an existing one stays intact until the rename."""
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)
