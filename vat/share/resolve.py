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

How they are told apart: `vat:NAME` is always a shipped model; a path that exists is a path
(a `pathlib.Path` that does not exist is read as its string is); a bare NAME that is a shipped
model is that model, and one that is also a path is refused (write ./NAME or vat:NAME); a
`user/name` that is no path is a Hub id, unless its first part is a local folder (a mistyped
path). A name that is no model says so with the nearest model path or shipped name, and a
text file is named for what it is, not read as a corrupt checkpoint. Errors name the Python
argument (`model`); the command line shows its flag (vat.errors.run_cli).
"""

from __future__ import annotations

import difflib
import errno
import os
from pathlib import Path

import torch

from vat.errors import OptionError, VatError, nearest
from vat.share.checkpoint import load_checkpoint
from vat.share.folder import CONFIG_NAME, load_folder
from vat.share.hub import download, looks_like_repo_id
from vat.share.loaded import LoadedVAT, ModelSource
from vat.share.pretrained import PREFIX, named_shipped, shipped_model, shipped_models


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
    with `revision`, `token` and `cache_dir`); `name` is the argument named in errors."""
    text = os.fspath(model) if isinstance(model, str | os.PathLike) else model
    if not isinstance(text, str):
        raise OptionError(
            name,
            f"expected a path, a shipped model's name or a Hub repo id, got {type(model).__name__}",
        )
    if not text.strip():  # Path("") is ".", which nobody means by an empty name
        raise OptionError(name, "is empty (expected a .ckpt, a folder, a run folder or a Hub id)")
    p = Path(text).expanduser()
    if text.startswith(PREFIX):  # always a shipped model, never a path
        shipped = named_shipped(text, name)
    else:
        _check_path_name(p, text, name)
        exists = p.exists() or p.is_symlink()
        # a Path that exists is that path (a Path cannot be spelled ./NAME); one that does not
        # is read as its string is, as on the command line, which cannot tell the two apart
        shipped = None if exists and not isinstance(model, str) else shipped_model(text)
        if shipped is not None and exists:
            raise OptionError(
                name,
                f"{text!r} names both a shipped model and the path {p}: write ./{text} for "
                f"the path or {PREFIX}{text} for the shipped model",
            )
    if shipped is not None:
        shipped.verify()  # every file's recorded size, before anything is read
        return ModelSource("shipped", shipped.name, folder=str(shipped.folder))
    if p.is_file():
        _check_not_text(p, name)
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
    if looks_like_repo_id(text) and not _meant_as_path(text):
        try:
            folder = download(text, revision=revision, token=token, cache_dir=cache_dir)
        except VatError as e:  # offline, unreachable, no such repo: the path reading first
            raise OptionError(
                name, f"{text} does not exist here{_did_you_mean(text)}, and {e}"
            ) from None
        return ModelSource("hub", text, folder=str(folder))
    raise OptionError(name, f"{text} does not exist{_did_you_mean(text)}; expected {ACCEPTED}")


ACCEPTED = (
    "a run folder, a .ckpt checkpoint, an exported folder, a shipped model's name "
    "(vat pretrained) or a Hub repo id user/name"
)
"""What a model argument accepts, as every error about one says it."""


def _meant_as_path(text: str) -> bool:
    """A user/name whose first part exists here is a mistyped path (runs/dmeo beside runs/),
    never sent to the Hub: a download error would send the user looking for a network problem."""
    first = Path(text).parts[0]
    return Path(first).exists() or Path(first).is_symlink()


def _did_you_mean(text: str) -> str:
    """The " (did you mean X?)" of whichever is nearer to `text`: the nearest model path or,
    for a bare name, the shipped model's name (which wins a tie: `demo-wordnet` means
    demo-wordnet-d64, not a demo-export folder in the current folder); "" when none is close."""
    near = nearest_model_path(text)
    if "/" not in text:
        # a damaged entry is no name to offer, and no reason to lose the path's suggestion
        close = nearest(text, [m.name for m in shipped_models(problems=[])])
        if close is not None and (near is None or _likeness(text, close) >= _likeness(text, near)):
            near = f"the shipped model {close}"
    return f" (did you mean {near}?)" if near else ""


def _likeness(a: str, b: str) -> float:
    """difflib's ratio of two names, case ignored (what `vat.errors.nearest` ranks by)."""
    return difflib.SequenceMatcher(None, a.lower(), Path(b).name.lower()).ratio()


def nearest_model_path(text: str, limit: int = 2000) -> str | None:
    """The existing model path closest to the mistyped `text` (difflib on each part that
    does not exist, among the first `limit` entries of its folder), spelled as `text` is
    (relative stays relative), or None."""
    p = Path(text).expanduser()
    base = Path(p.anchor) if p.is_absolute() else Path()
    parts = p.parts[1:] if p.is_absolute() else p.parts
    if not parts:
        return None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if (base / part).exists() and not last:
            base = base / part
            continue
        try:
            with os.scandir(base) as entries:
                names = [
                    e.name
                    for _, e in zip(range(limit), entries, strict=False)
                    if (_is_model_path(Path(e.path)) if last else e.is_dir())
                ]
        except OSError:
            return None
        close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
        if not close:
            return None
        base = base / close[0]
    if base == p:
        return None
    return f"./{base}" if text.startswith("./") else str(base)


def _is_model_path(p: Path) -> bool:
    """A .ckpt file, an exported folder or a run folder: what a suggestion may name."""
    try:
        if p.is_dir():
            return (p / CONFIG_NAME).is_file() or (p / "checkpoints").is_dir()
        return p.suffix == ".ckpt" and p.is_file()
    except OSError:
        return False


# What a torch checkpoint starts with: a zip archive (torch.save's format since 1.6) or a
# pickle (the legacy format; protocol 2+ opens with 0x80).
_CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80")


def _check_not_text(p: Path, name: str) -> None:
    """A text file (a config.json, a .yaml, a Git LFS pointer) is no checkpoint: say what it
    is, not torch.load's "Unsupported operand 123" (the byte '{')."""
    try:
        with open(p, "rb") as f:
            head = f.read(4096)
    except OSError:
        return  # load_checkpoint names the unreadable file
    if not head or head.startswith(_CHECKPOINT_MAGIC) or b"\x00" in head:  # NUL: binary
        return
    what = _text_kind(p, head.decode("utf-8", errors="ignore").lstrip())
    owner = next((d for d in (p.parent, p.parent.parent) if _is_model_path(d)), None)
    hint = f" (did you mean the folder {owner}?)" if owner is not None else ""
    raise OptionError(name, f"{p} is {what}, not a model{hint}; expected {ACCEPTED}")


def _text_kind(p: Path, text: str) -> str:
    if text.startswith("version https://git-lfs"):
        return "a Git LFS pointer (the file itself was not fetched: git lfs pull)"
    if p.suffix.lower() == ".json" or text.startswith(("{", "[")):
        return "a JSON file"
    if p.suffix.lower() in (".yaml", ".yml"):
        return "a YAML file"
    return "a text file"


def _check_path_name(path: Path, text: str, name: str) -> None:
    """A symbolic link loop is named as one (to Path.exists() it is missing, which sends the
    user looking for a file that is there); a name too long for the filesystem is one line,
    not the OSError every later check of the path would raise."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            shown = f"{text[:60]}... ({len(text)} characters)" if len(text) > 80 else text
            raise OptionError(
                name,
                f"{shown} is too long to be a path on this system (or a part of it is), so it "
                f"names no model; expected {ACCEPTED}",
            ) from None
        if e.errno == errno.ELOOP:
            where = "is" if path.is_symlink() else "passes through"
            raise OptionError(
                name, f"{path} {where} a symbolic link loop (a link that leads back to itself)"
            ) from None


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
