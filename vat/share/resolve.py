"""What a model argument names, and reading it: the one place that resolves `--model` /
`vat.load(...)`.

Every command's `--model` (alias `--ckpt`), `vat export`'s source and `vat.load` accept

    a training checkpoint      runs/demo/checkpoints/last.ckpt
    an exported folder         my-vat/              (config.json, model.safetensors, ...)
    a run folder               runs/demo            its best checkpoint (checkpoints/best-*.ckpt,
                                                     on --best_monitor), else checkpoints/last.ckpt
    a Hugging Face Hub repo id user/my-vat          downloaded into the Hub cache

A path that exists is a path; only a name that is no path and looks like `user/name` is a Hub
id. `resolve_model` says which (downloading a Hub repo); `load_model` reads it, once, into a
`vat.share.loaded.LoadedVAT` that travels on. Errors name the Python argument (`model`); the
command line shows its flag (`--model`, vat.errors.run_cli).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from vat.errors import OptionError
from vat.share.checkpoint import load_checkpoint
from vat.share.folder import CONFIG_NAME, load_folder
from vat.share.hub import download, looks_like_repo_id
from vat.share.loaded import LoadedVAT, ModelSource


def run_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint a run folder stands for: its best (the newest best-*.ckpt, written on
    --best_monitor), else last.ckpt; None when it has neither."""
    ckpts = run_dir / "checkpoints"
    best = sorted(ckpts.glob("best-*.ckpt"), key=lambda p: (p.stat().st_mtime, p.name))
    if best:
        return best[-1]
    last = ckpts / "last.ckpt"
    return last if last.is_file() else None


def resolve_model(
    model: str | os.PathLike,
    *,
    name: str = "model",
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> ModelSource:
    """Which kind of model `model` names, and where its files are (a Hub repo is downloaded
    into the Hub cache, with `revision`, `token` and `cache_dir`); `name` is the argument
    named in errors."""
    p = Path(model).expanduser()
    if p.is_file():
        return ModelSource("checkpoint", str(p))
    if p.is_dir():
        if (p / CONFIG_NAME).is_file():
            return ModelSource("folder", str(p), folder=str(p))
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
        folder = download(str(model), revision=revision, token=token, cache_dir=cache_dir)
        return ModelSource("hub", str(model), folder=str(folder))
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
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> LoadedVAT:
    """Whatever `model` names, read once: the model (eval mode, on `device`), its tokenizer
    and everything its files record (`LoadedVAT`)."""
    src = (
        model
        if isinstance(model, ModelSource)
        else resolve_model(model, name=name, revision=revision, token=token, cache_dir=cache_dir)
    )
    if src.kind == "checkpoint":
        return load_checkpoint(src, device)
    return load_folder(src, device)
