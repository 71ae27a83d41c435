"""The models that ship with vat: a registry of exported folders inside the package.

    vat/shipped/NAME/          an ordinary exported folder (vat.share.folder): config.json,
                               model.safetensors (float16 or bfloat16), tokenizer.json, the
                               card (README.md), the sentence-transformers files, the feature
                               statistics; plus shipped.json (below)

shipped.json says what the model is and how it was checked: its name, a one-line summary,
what it is good for and not, the weights' dtype, how far the half-precision weights move
encode and generate from the float32 model (measured when it was added), how to rebuild it,
and the SHA-256 of every other file, checked each time the model is loaded. A second model is
a second folder (`vat pretrained add DIR --name NAME` writes one); no code names a model.

How a model argument is told apart (vat.share.resolve):
- `vat:NAME` always names a shipped model;
- a bare NAME (no slash) that is a shipped model and no existing path is that model; a NAME
  that is both is refused in one line (write `./NAME` for the path, `vat:NAME` for the model);
- a Hub repo id has exactly one slash (`user/name`), which a shipped name never has.

$VAT_SHIPPED_DIR points the registry at another folder (tests; a site's own models).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vat.errors import CheckpointError, OptionError, VatError
from vat.share.folder import (
    CARD_NAME,
    CONFIG_NAME,
    FEATURES_NAME,
    SHIPPED_NAME,
    WEIGHTS_NAME,
    replace_dir,
)
from vat.share.loaded import LoadedVAT, check_loaded
from vat.share.model_card import model_card
from vat.share.training_record import check_portable, portable_fit, portable_training

SHIPPED_DIR_ENV = "VAT_SHIPPED_DIR"
PACKAGE_SHIPPED_DIR = Path(__file__).resolve().parents[1] / "shipped"
"""The folder of shipped models inside the installed package (package data)."""
PREFIX = "vat:"
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
"""A shipped name: lowercase letters, digits, '.', '_' and '-', no slash (never a Hub id)."""
DTYPES = ("float16", "bfloat16")
SHIPPED_FORMAT = 1


def shipped_dir() -> Path:
    """Where the registry is: $VAT_SHIPPED_DIR if set, else the package's vat/shipped/."""
    env = os.environ.get(SHIPPED_DIR_ENV)
    return Path(env).expanduser() if env else PACKAGE_SHIPPED_DIR


@dataclass(frozen=True)
class ShippedModel:
    """One shipped model: its folder and its shipped.json."""

    name: str
    folder: Path
    info: dict[str, Any]

    @property
    def files(self) -> dict[str, str]:
        """File name -> SHA-256 of every file of the folder except shipped.json."""
        return dict(self.info.get("sha256") or {})

    @property
    def size_bytes(self) -> int:
        return sum(
            (self.folder / f).stat().st_size for f in self.files if (self.folder / f).is_file()
        )

    @property
    def config(self) -> dict[str, Any]:
        """The folder's config.json (for listing; loading goes through vat.load)."""
        try:
            return json.loads((self.folder / CONFIG_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            raise CheckpointError(
                f"shipped model {self.name}: unreadable {CONFIG_NAME} ({e}); reinstall vat"
            ) from None

    def facts(self) -> dict[str, str]:
        """What `vat pretrained` lists: shape, rate, training data, recorded scores, size."""
        return listing_facts(self.config, self.size_bytes, self.info.get("dtype", "?"))

    def verify(self) -> None:
        """Every file shipped.json lists has its SHA-256, and the folder holds no other file;
        a mismatch is one line naming the file."""
        for fname, expected in sorted(self.files.items()):
            path = self.folder / fname
            if not path.is_file() or path.is_symlink():
                raise CheckpointError(
                    f"shipped model {self.name}: {path} is missing; reinstall vat"
                )
            got = file_sha256(path)
            if got != expected:
                raise CheckpointError(
                    f"shipped model {self.name}: {path} fails its SHA-256 check (expected "
                    f"{expected[:12]}..., got {got[:12]}...): the file was altered or damaged; "
                    "reinstall vat"
                )
        extra = sorted(
            p.name
            for p in self.folder.iterdir()
            if p.name not in self.files and p.name != SHIPPED_NAME
        )
        if extra:
            raise CheckpointError(
                f"shipped model {self.name}: {self.folder} holds files its {SHIPPED_NAME} does "
                f"not list ({', '.join(extra[:3])}); reinstall vat"
            )


def listing_facts(config: dict[str, Any], size_bytes: int, dtype: str) -> dict[str, str]:
    """A model's one-line facts from its config.json: shape, rate, data, scores, size."""
    mc = config.get("model_config") or {}
    training = config.get("training") or {}
    metrics = training.get("metrics") or {}
    data = training.get("data") or {}
    names = list(dict.fromkeys(Path(str(f)).name for f in data.get("train_files") or []))
    if data.get("hf_dataset"):
        names = [str(data["hf_dataset"])]
    if len(names) > 3:  # one line per model: the first two and a count
        names = [*names[:2], f"{len(names) - 2} more files"]
    # a continued run (vat train --init-from): the tokens behind the whole model
    tokens = training.get("tokens_total", training.get("tokens_seen"))
    trained = ", ".join(names) or "not recorded"
    start = training.get("init_from")
    if isinstance(tokens, int) and not isinstance(tokens, bool):
        since = f", from {start.get('model')}" if isinstance(start, dict) else ""
        trained += f" ({tokens / 1e6:.3g}M tokens{since})"
    kl = metrics.get("val/kl", metrics.get("train/kl"))
    scores = ", ".join(
        f"{e.get('task')} {e.get('value', float('nan')):.1f}"
        for e in config.get("evaluation") or []
        if isinstance(e, dict)
    )
    return {
        "shape": (
            f"{mc.get('n_encoder_layers')}+{mc.get('n_decoder_layers')} layers, "
            f"d {mc.get('d_model')}, {mc.get('vocab_size')} BPE"
        ),
        "rate": f"{kl:.1f} nats/token" if isinstance(kl, int | float) else "not recorded",
        "trained on": trained,
        "scores": scores or "none recorded",
        "size": f"{size_bytes / 2**20:.1f} MiB {dtype}",
    }


def default_summary(config: dict[str, Any]) -> str:
    """A one-line summary from the facts alone, for a model added without one."""
    f = listing_facts(config, 0, "")
    return f"A VAT ({f['shape']}) trained on {f['trained on']}, rate {f['rate']}."


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_entry(folder: Path) -> ShippedModel | None:
    path = folder / SHIPPED_NAME
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e}); reinstall vat") from None
    if not isinstance(info, dict) or info.get("name") != folder.name:
        raise CheckpointError(f"{path} does not describe the model {folder.name!r}; reinstall vat")
    return ShippedModel(folder.name, folder, info)


def shipped_models(registry: Path | None = None) -> list[ShippedModel]:
    """Every shipped model (each folder of the registry with a shipped.json), by name."""
    root = shipped_dir() if registry is None else Path(registry)
    if not root.is_dir():
        return []
    # a dot-folder is a write in progress (or one a crash left), never an entry
    entries = (_read_entry(p) for p in sorted(root.iterdir()) if p.is_dir() and p.name[0] != ".")
    return [e for e in entries if e is not None]


def list_pretrained() -> list[ShippedModel]:
    """The models that ship with the installed vat (`vat pretrained`), by name; each loads
    with `vat.load(entry.name)`."""
    return shipped_models()


def shipped_model(name: str, registry: Path | None = None) -> ShippedModel | None:
    """The shipped model called `name`, or None."""
    if not NAME_PATTERN.fullmatch(name):
        return None
    root = shipped_dir() if registry is None else Path(registry)
    return _read_entry(root / name) if (root / name).is_dir() else None


def check_name(name: str, option: str = "name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise OptionError(
            option,
            f"{name!r} is not a shipped-model name (lowercase letters, digits, '.', '_', '-'; "
            "at most 64 characters; no slash, so that it is never a Hub repo id)",
        )
    return name


def named_shipped(text: str, option: str = "name") -> ShippedModel:
    """The shipped model `text` (`NAME` or `vat:NAME`) names; one line listing the shipped
    names when there is none."""
    bare = text[len(PREFIX) :] if text.startswith(PREFIX) else text
    entry = shipped_model(bare)
    if entry is None:
        names = ", ".join(m.name for m in shipped_models()) or "none"
        raise OptionError(
            option, f"{text}: vat ships no model named {bare!r} (shipped models: {names})"
        )
    return entry


def check_shipping(
    loaded: LoadedVAT,
    name: str,
    dtype: str,
    registry: str | os.PathLike | None,
    info: dict[str, Any] | None = None,
    train_data_dir: str | os.PathLike | None = None,
) -> Path:
    """What `write_shipped` refuses, checked before any work: a path instead of a loaded
    model, a training checkpoint (a shipped model is an exported folder), a bad name or
    dtype, a registry that exists and is no folder, and anything that would name a place on
    this machine (`check_portable`: the folder's config.json made portable, its statistics'
    fit record, and `info`, shipped.json's texts). Returns the registry folder
    ($VAT_SHIPPED_DIR or the package's by default)."""
    check_loaded(loaded, "write_shipped")
    check_name(name)
    if dtype not in DTYPES:
        raise OptionError("dtype", f"must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if loaded.source.kind == "checkpoint":
        raise OptionError(
            "model",
            f"{loaded.source.location} is a training checkpoint; a shipped model is an "
            "exported folder: export it first (vat export MODEL DIR)",
        )
    root = shipped_dir() if registry is None else Path(registry)
    if (root.exists() or root.is_symlink()) and not root.is_dir():
        raise OptionError("registry", f"{root} exists and is not a folder")
    config = _shipped_config(loaded.source.path / CONFIG_NAME, train_data_dir)
    stats = _shipped_stats(loaded, train_data_dir)
    check_portable(
        {
            CONFIG_NAME: config,
            SHIPPED_NAME: info or {},
            FEATURES_NAME: {"fit": stats.fit} if stats is not None else {},
        },
        f"cannot add {name} to the shipped models",
        "rewrite it in the exported folder (or the text given) first",
    )
    return root


def _shipped_config(path: Path, train_data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """An exported folder's config.json as it ships: its training record made portable (a
    shipped model goes to every machine: the builder's paths stay behind, where an export
    keeps them absolute for fitting; the portable records go)."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    config["training"] = portable_training(config.get("training") or {}, train_data_dir)
    return config


def _shipped_stats(loaded: LoadedVAT, train_data_dir: str | os.PathLike | None):
    """The folder's feature statistics with their fit record as it ships (the files a fit
    read named as the training records name them), or None."""
    stats = loaded.feature_stats
    if stats is not None and portable_fit(stats.fit, train_data_dir) != stats.fit:
        stats = dataclasses.replace(stats, fit=portable_fit(stats.fit, train_data_dir))
    return stats


def write_shipped(
    loaded: LoadedVAT,
    name: str,
    info: dict[str, Any],
    *,
    dtype: str = "float16",
    registry: Path | None = None,
    overwrite: bool = False,
    train_data_dir: str | os.PathLike | None = None,
) -> ShippedModel:
    """Write the exported folder `loaded` was read from into the registry as `name`: its
    files as they are, but the weights in `dtype` (the loaded model's floating tensors cast;
    tied tensors stay one tensor), config.json's training record in its portable form
    (`vat.share.training_record.portable_training`: training files by their path inside the
    data folder `train_data_dir`, default $VAT_DATA_DIR, else by name), a card (README.md)
    that says what the shipped model is (`info`: summary, good_for, not_for, rebuild,
    fp32_match), and shipped.json (`info`, the dtype and every file's SHA-256). Nothing that
    names a place on this machine is written (`check_portable`: one line naming the key).
    Written into a temp folder and renamed into place; an existing entry needs `overwrite`
    and must itself be a shipped model (vat replaces only what it wrote)."""
    from safetensors.torch import save_model

    record = {"format": SHIPPED_FORMAT, "name": name, **info, "dtype": dtype}
    root = check_shipping(loaded, name, dtype, registry, record, train_data_dir)
    out = root / name
    if out.exists() and not overwrite:
        raise VatError(
            f"{out} exists: vat already ships a model named {name} (overwrite replaces it)"
        )
    if out.exists() and _read_entry(out) is None:
        raise VatError(f"{out} exists and is not a shipped model; vat replaces only its entries")
    half = copy.deepcopy(loaded.model).to("cpu", getattr(torch, dtype))
    for key, tensor in half.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise VatError(f"{key} does not fit in {dtype} (inf after the cast): use bfloat16")
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}.tmp-"))
    try:
        folder = loaded.source.path
        for p in sorted(folder.iterdir()):
            if p.name in (WEIGHTS_NAME, SHIPPED_NAME, CARD_NAME) or not p.is_file():
                continue
            shutil.copyfile(p, tmp / p.name)
        save_model(half, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        config = _shipped_config(tmp / CONFIG_NAME, train_data_dir)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        record.setdefault("summary", default_summary(config))
        stats = _shipped_stats(loaded, train_data_dir)
        if stats is not loaded.feature_stats:
            stats.save(tmp / FEATURES_NAME)
        own = loaded.own_features
        if own is not None and own is loaded.feature_stats:
            own = stats  # with the fit record as it ships
        card = model_card(config, loaded.tokenizer.vocab_size, own, record)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
        record["sha256"] = {p.name: file_sha256(p) for p in sorted(tmp.iterdir())}
        (tmp / SHIPPED_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        for p in tmp.iterdir():
            os.chmod(p, 0o644)  # package data: readable by everyone, like the code beside it
        os.chmod(tmp, 0o755)
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    entry = _read_entry(out)
    assert entry is not None
    return entry
