"""The one place that resolves `--model` / `vat.load(...)`: a .ckpt, an exported or run
folder, a Hub repo id or a shipped name (`vat:NAME` is always one; a bare NAME that is also a
path is refused; a `user/name` that is no path is a Hub id unless its first part exists)."""

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
    """A run folder's newest checkpoints/best-*.ckpt, else its last.ckpt, else None."""
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
    """Which kind of model `model` names and where its files are; errors name `name`."""
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
        # an existing Path is that path (a Path cannot be spelled ./NAME); else read as text
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
            if (ckpt := run_checkpoint(p)) is None:
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


ACCEPTED = (  # what every error about a model argument says it accepts
    "a run folder, a .ckpt checkpoint, an exported folder, a shipped model's name "
    "(vat pretrained) or a Hub repo id user/name"
)


def _meant_as_path(text: str) -> bool:
    """A user/name whose first part exists here is a mistyped path, not a Hub id."""
    first = Path(text).parts[0]
    return Path(first).exists() or Path(first).is_symlink()


def _did_you_mean(text: str) -> str:
    """The " (did you mean X?)" for the nearest model path or shipped name (which wins a tie)."""
    near = nearest_model_path(text)
    if "/" not in text:
        # a damaged entry is no name to offer, and no reason to lose the path's suggestion
        close = nearest(text, [m.name for m in shipped_models(problems=[])])
        if close is not None and (near is None or _likeness(text, close) >= _likeness(text, near)):
            near = f"the shipped model {close}"
    return f" (did you mean {near}?)" if near else ""


def _likeness(a: str, b: str) -> float:
    """difflib's ratio of two names, case ignored, as `vat.errors.nearest` ranks them."""
    return difflib.SequenceMatcher(None, a.lower(), Path(b).name.lower()).ratio()


def nearest_model_path(text: str, limit: int = 2000) -> str | None:
    """The existing model path closest to the mistyped `text`, part by part, or None."""
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
    return None if base == p else f"./{base}" if text.startswith("./") else str(base)


def _is_model_path(p: Path) -> bool:
    """A .ckpt file, an exported folder or a run folder: what a suggestion may name."""
    try:
        if p.is_dir():
            return (p / CONFIG_NAME).is_file() or (p / "checkpoints").is_dir()
        return p.suffix == ".ckpt" and p.is_file()
    except OSError:
        return False


# what a torch checkpoint starts with: a zip archive or a pickle (protocol 2+)
_CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80")


def _check_not_text(p: Path, name: str) -> None:
    """Name a text file (JSON, YAML, a Git LFS pointer) for what it is, not as a bad checkpoint."""
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
    """One line for a symbolic link loop (Path.exists() says missing) or a too long name."""
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
    """Whatever `model` names, read once, the model in eval mode on `device`."""
    if not isinstance(model, ModelSource):
        model = resolve_model(model, name=name, revision=revision, token=token, cache_dir=cache_dir)
    return (load_checkpoint if model.kind == "checkpoint" else load_folder)(model, device)
