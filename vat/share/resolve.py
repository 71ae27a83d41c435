"""What a model argument names, and reading it: the one place that resolves `--model` /
`vat.load(...)`.

Every command's `--model` (alias `--ckpt`), `vat export`'s source and `vat.load` accept

    a training checkpoint      runs/demo/checkpoints/last.ckpt
    an exported folder         my-vat/              (config.json, model.safetensors, ...)
    a run folder               runs/demo            its best checkpoint (checkpoints/best-*.ckpt,
                                                     on --best_monitor), else checkpoints/last.ckpt
    a Hugging Face Hub repo id user/my-vat          downloaded into the Hub cache
    a shipped model's name     demo-wordnet-d64     (or vat:demo-wordnet-d64) inside the
                                                     package, offline (`vat pretrained`)

How they are told apart: `vat:NAME` is always a shipped model; a path that exists is a path;
a bare NAME (no slash) that is a shipped model and no path is that model, and one that is
both is refused (write ./NAME or vat:NAME); only a name that is no path and looks like
`user/name` (one slash, which a shipped name never has) is a Hub id.

`resolve_model` says which (downloading a Hub repo, checking a shipped model's SHA-256 sums);
`load_model` reads it, once, into a `vat.share.loaded.LoadedVAT` that travels on. Errors
name the Python argument (`model`); the command line shows its flag (`--model`,
vat.errors.run_cli).
"""

from __future__ import annotations

import difflib
import errno
import os
from pathlib import Path

import torch

from vat.errors import OptionError
from vat.share.checkpoint import load_checkpoint
from vat.share.folder import CONFIG_NAME, load_folder
from vat.share.hub import download, looks_like_repo_id
from vat.share.loaded import LoadedVAT, ModelSource
from vat.share.pretrained import (
    PREFIX,
    ShippedModel,
    named_shipped,
    shipped_model,
    shipped_models,
)


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
    text = os.fspath(model) if isinstance(model, str | os.PathLike) else model
    if not isinstance(text, str):
        raise OptionError(
            name,
            f"expected a path, a shipped model's name or a Hub repo id, got {type(model).__name__}",
        )
    if not text.strip():  # Path("") is ".", which nobody means by an empty name
        raise OptionError(name, "is empty (expected a .ckpt, a folder, a run folder or a Hub id)")
    p = Path(text).expanduser()
    _check_not_a_loop(p, name)
    shipped = _shipped(text, p, name) if isinstance(model, str) else None
    if shipped is not None:
        shipped.verify()  # SHA-256 of every file, before anything is read
        return ModelSource("shipped", shipped.name, folder=str(shipped.folder))
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
    close = difflib.get_close_matches(text, [m.name for m in shipped_models()], n=1)
    hint = f"; did you mean the shipped model {close[0]}?" if close else ""
    raise OptionError(
        name,
        f"{model} does not exist (expected a .ckpt, an exported folder, a run folder, a "
        f"shipped model's name (vat pretrained) or a Hub repo id user/name){hint}",
    )


def _check_not_a_loop(path: Path, name: str) -> None:
    """A symbolic link loop (the path, or a folder on the way to it) is named as one: to
    Path.exists() it is simply missing, and "does not exist" sends the user looking for a
    file that is there."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            where = "is" if path.is_symlink() else "passes through"
            raise OptionError(
                name, f"{path} {where} a symbolic link loop (a link that leads back to itself)"
            ) from None


def _shipped(text: str, path: Path, name: str) -> ShippedModel | None:
    """The shipped model `text` names (`vat:NAME`, or a bare NAME that is no path), None if
    it names none; a NAME that is both a shipped model and an existing path is refused."""
    if text.startswith(PREFIX):
        return named_shipped(text, name)
    entry = shipped_model(text)
    if entry is not None and (path.exists() or path.is_symlink()):
        raise OptionError(
            name,
            f"{text!r} names both a shipped model and the path {path}: write ./{text} for "
            f"the path or {PREFIX}{text} for the shipped model",
        )
    return entry


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
