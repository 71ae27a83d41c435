"""The input files a `vat train` config names, checked before anything starts (a relative path
is read from the folder vat runs in, LightningCLI's rule, not the config's)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path

from vat.errors import VatError

INPUT_KEYS = (
    "train_files",
    "val_files",
    "test_files",
    "tokenizer_path",
    "sentences_file",
    "probe_file",
    "senteval_dir",
)
"""The config keys that name files or folders vat reads (outputs such as run_dir are made)."""


def input_paths(cfg) -> Iterator[tuple[str, str]]:
    """(how the config names it, path) of every input path of a parsed `vat train` config."""
    data = cfg.get("data") or {}
    for key in INPUT_KEYS:
        for value in _strings(data.get(key)):
            yield f"data.{key}", value
    callbacks = (cfg.get("trainer") or {}).get("callbacks")
    for cb in callbacks if isinstance(callbacks, list) else [callbacks] if callbacks else []:
        if not hasattr(cb, "get"):
            continue  # an instance given in Python, not from the config
        name = str(cb.get("class_path", "")).rsplit(".", 1)[-1]
        args = cb.get("init_args") or {}
        for key in INPUT_KEYS:
            for value in _strings(args.get(key)):
                yield f"{name}: {key}", value


def _strings(value) -> list[str]:
    if isinstance(value, str | os.PathLike):
        return [str(value)]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if isinstance(v, str | os.PathLike)]
    return []


def check_input_paths(cfg, config_files: list[Path], checkout: Path | None) -> None:
    """One line for the first relative input path of `cfg` that is not there (globs are the data
    module's), naming where it was looked for and where it is."""
    cwd = Path.cwd()
    for label, value in input_paths(cfg):
        p = Path(value)
        if p.is_absolute() or glob.has_magic(value) or p.exists() or p.is_symlink():
            continue
        found = [d for d in (*(f.parent for f in config_files), checkout) if d and (d / p).exists()]
        where = f"; it is in {found[0]}: run there, or give it as {found[0] / p}" if found else ""
        raise VatError(
            f"{label} {value}: not found; a config's relative paths are read from the folder "
            f"vat runs in ({cwd}), not from the config's folder{where}"
        )


def checkout_root() -> Path | None:
    """The folder of vat's source checkout (whose data/ the packaged configs name), or None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "vat").is_dir() else None
