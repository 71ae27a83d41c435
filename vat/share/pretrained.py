"""The models that ship with vat: exported folders inside the package, vat/shipped/NAME/.

Each is an ordinary exported folder (vat.share.folder) with half-precision weights and a
shipped.json that says what the model is (name, summary, good_for, not_for, rebuild), its
dtype, how far its weights move encode and generate from float32 (fp32_match), and the
SHA-256 and size of every other file. Loading checks that each listed file is a regular file
of the folder (no link, no other file) of its recorded size; tests/test_shipped.py checks the
SHA-256 sums. `vat pretrained add DIR --name NAME` writes an entry (vat.shipping); no code
names a model. How a model argument is told apart from a path or a Hub id: vat.share.resolve.
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
import stat
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vat.errors import CheckpointError, OptionError, VatError
from vat.io import remove_stale_temps, temp_prefix
from vat.share import CARD_NAME, CONFIG_NAME, SHIPPED_NAME, WEIGHTS_NAME

if TYPE_CHECKING:  # listing reads JSON only; adding a model imports torch where it runs
    from vat.share.loaded import LoadedVAT

SHIPPED_DIR_ENV = "VAT_SHIPPED_DIR"
PACKAGE_SHIPPED_DIR = Path(__file__).resolve().parents[1] / "shipped"
PREFIX = "vat:"
# lowercase letters, digits, '.', '_' and '-', and no slash, so that it is never a Hub id
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
DTYPES = ("float16", "bfloat16")
SHIPPED_FORMAT = 1
REPAIR = "reinstall vat, or write the entry again: vat pretrained add DIR --name NAME --overwrite"
RECORD_LIMIT = 1 << 20  # a shipped.json is kilobytes: a larger one is damaged, and not read
CONFIG_LIMIT = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


def shipped_dir() -> Path:
    """Where the registry is: $VAT_SHIPPED_DIR if set, else the package's vat/shipped/."""
    env = os.environ.get(SHIPPED_DIR_ENV)
    return Path(env).expanduser() if env else PACKAGE_SHIPPED_DIR


@dataclass(frozen=True)
class ShippedModel:
    """One shipped model: its folder and its shipped.json (checked by `_check_record`)."""

    name: str
    folder: Path
    info: dict[str, Any]

    @property
    def files(self) -> dict[str, str]:
        """File name -> SHA-256 of every file of the folder except shipped.json."""
        return dict(self.info["sha256"])

    @property
    def size_bytes(self) -> int:
        return sum(self.info["bytes"].values())

    def facts(self) -> dict[str, str]:
        """What `vat pretrained` lists: shape, rate, training data, recorded scores, size."""
        path = self.folder / CONFIG_NAME
        try:
            config = _read_json(path, CONFIG_LIMIT)
            return listing_facts(config, self.size_bytes, self.info["dtype"])
        except (OSError, ValueError, RecursionError, AttributeError, TypeError) as e:
            why = _reason(e)
            raise CheckpointError(f"shipped model {self.name}: {path}: {why}; {REPAIR}") from None

    def verify(self) -> None:
        """Every file shipped.json lists is a regular file of the folder (no link, which could
        lead out of it) of the size it records, and the folder holds no other file."""
        for fname, size in sorted(self.info["bytes"].items()):
            path = self.folder / fname
            st = os.lstat(path) if path.exists() or path.is_symlink() else None
            if st is None:
                problem = "is missing"
            elif stat.S_ISLNK(st.st_mode):
                problem = "is a symbolic link, which could lead out of the entry"
            elif not stat.S_ISREG(st.st_mode):
                problem = "is not a regular file"
            elif st.st_size != size:
                problem = f"is {st.st_size} bytes where {SHIPPED_NAME} records {size}: altered"
            else:
                continue
            raise CheckpointError(f"shipped model {self.name}: {path} {problem}; {REPAIR}")
        extra = sorted({p.name for p in self.folder.iterdir()} - set(self.files) - {SHIPPED_NAME})
        if extra:
            raise CheckpointError(
                f"shipped model {self.name}: {self.folder} holds files its {SHIPPED_NAME} does "
                f"not list ({', '.join(extra[:3])}); {REPAIR}"
            )


def listing_facts(config: dict[str, Any], size_bytes: int, dtype: str) -> dict[str, str]:
    """A model's one-line facts from its config.json: shape, rate, data, scores, size."""
    mc = config.get("model_config") or {}
    training = config.get("training") or {}
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
    metrics = training.get("metrics") or {}
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


def _reason(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply to be vat's JSON"
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return f"not valid JSON ({e})" if isinstance(e, ValueError) else f"not vat's JSON ({e})"


def _read_json(path: Path, limit: int) -> Any:
    """The JSON in the regular file `path` (never through a link), at most `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if st.st_size > limit:
            raise OSError(0, f"{st.st_size} bytes, more than vat reads ({limit})")
        return json.loads(f.read(limit + 1).decode("utf-8"))


def _check_record(path: Path, info: Any, name: str) -> dict[str, Any]:
    """shipped.json's contents as vat writes them, or one line naming `path` and what is
    wrong: every file it lists a plain name inside the entry's folder (nothing a path could
    climb out with), with a 64-digit SHA-256 and a size."""

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{path} {problem}; {REPAIR}")

    if not isinstance(info, dict):
        raise bad(f"holds {type(info).__name__}, not the JSON object vat writes")
    if info.get("name") != name:
        raise bad(f"does not describe the model {name!r} (its name is {info.get('name')!r:.80})")
    sums, sizes = info.get("sha256"), info.get("bytes")
    if not isinstance(sums, dict) or not sums:
        raise bad('lists no files with their SHA-256 ("sha256": {file: sum})')
    for fname, value in sums.items():
        if fname in ("", ".", "..", SHIPPED_NAME) or any(c in fname for c in "/\\\0"):
            raise bad(f"lists {fname!r:.300}, which is not a file name inside the entry's folder")
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise bad(f"gives {fname} the SHA-256 {value!r:.80}, not 64 hexadecimal digits")
    if not isinstance(sizes, dict) or sizes.keys() != sums.keys():
        raise bad('records sizes ("bytes") for other files than it lists')
    for fname, n in sizes.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise bad(f"gives {fname} the size {n!r:.80}, not a number of bytes")
    if info.get("dtype") not in DTYPES:
        raise bad(f"gives the dtype {info.get('dtype')!r:.80}, not one of {', '.join(DTYPES)}")
    if not isinstance(info.get("fp32_match", {}), dict):
        raise bad("gives fp32_match as no JSON object")
    return info


def _read_entry(folder: Path) -> ShippedModel | None:
    """The entry in `folder`; None when it has no shipped.json (no entry)."""
    if folder.is_symlink():
        raise CheckpointError(
            f"shipped model {folder.name}: {folder} is a symbolic link, which the registry does "
            f"not follow; put the entry's folder itself there (vat pretrained add DIR --name "
            f"{folder.name})"
        )
    path = folder / SHIPPED_NAME
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        info = _read_json(path, RECORD_LIMIT)
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: {_reason(e)}; {REPAIR}") from None
    return ShippedModel(folder.name, folder, _check_record(path, info, folder.name))


def shipped_models(
    registry: Path | None = None, problems: list[VatError] | None = None
) -> list[ShippedModel]:
    """Every shipped model (each folder of the registry with a shipped.json), by name. A
    damaged entry raises its one-line error, or with `problems` (a list) is left out and its
    error appended there: what lists or suggests names goes on with the intact ones."""
    root = shipped_dir() if registry is None else Path(registry)
    found = []
    try:  # a dot-folder is a write in progress (or one a kill left), never an entry
        folders = [p for p in sorted(root.iterdir()) if p.is_dir() and p.name[0] != "."]
    except OSError as e:
        folders, why = [], e.strerror or str(e)
        if root.is_dir() and problems is None:
            raise VatError(f"shipped models: cannot read the registry {root} ({why})") from None
        if root.is_dir():
            problems.append(VatError(f"shipped models: cannot read the registry {root} ({why})"))
    for p in folders:
        try:
            entry = _read_entry(p)
        except VatError as e:
            if problems is None:
                raise
            problems.append(e)
            continue
        if entry is not None:
            found.append(entry)
    return found


def list_pretrained() -> list[ShippedModel]:
    """The models that ship with the installed vat (`vat pretrained`), by name; each loads
    with `vat.load(entry.name)`."""
    return shipped_models()


def shipped_model(name: str, registry: Path | None = None) -> ShippedModel | None:
    """The shipped model called `name`, or None."""
    if not NAME_PATTERN.fullmatch(name):
        return None
    entry = (shipped_dir() if registry is None else Path(registry)) / name
    return _read_entry(entry) if entry.is_dir() or entry.is_symlink() else None


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
        # a damaged entry is named when asked for by name, not in every other lookup
        names = ", ".join(m.name for m in shipped_models(problems=[])) or "none"
        shown = f"{text[:60]}... ({len(text)} characters)" if len(text) > 80 else text
        raise OptionError(
            option, f"{shown}: vat ships no model named {bare!r:.80} (shipped models: {names})"
        )
    return entry


def check_shipping(
    loaded: LoadedVAT,
    name: str,
    dtype: str,
    registry: str | os.PathLike | None,
    info: dict[str, Any] | None = None,
    train_data_dir: str | os.PathLike | None = None,
    overwrite: bool | None = None,
) -> Path:
    """What `write_shipped` refuses, checked before any work: a training checkpoint (a shipped
    model is an exported folder), a bad name or dtype, a registry that is no folder, an export
    file that is no regular file, anything that would name a place on this machine
    (`check_portable`), and, given `overwrite`, an entry it may not replace. Returns the
    registry folder."""
    from vat.share.folder import FEATURES_NAME
    from vat.share.loaded import check_loaded
    from vat.share.training_record import check_portable

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
    _files_to_copy(loaded.source.path)
    if overwrite is not None:
        _check_replaceable(root / name, name, overwrite)
    stats = _shipped_stats(loaded, train_data_dir)
    check_portable(
        {
            CONFIG_NAME: _shipped_config(loaded.source.path / CONFIG_NAME, train_data_dir),
            SHIPPED_NAME: info or {},
            FEATURES_NAME: {"fit": stats.fit} if stats is not None else {},
        },
        f"cannot add {name} to the shipped models",
        "rewrite it in the exported folder (or the text given) first",
    )
    return root


def _shipped_config(path: Path, train_data_dir: str | os.PathLike | None) -> dict[str, Any]:
    """An exported folder's config.json as it ships: its training record in the portable
    form (a shipped model goes to every machine: the builder's paths stay behind)."""
    from vat.share.training_record import portable_training

    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    config["training"] = portable_training(config.get("training") or {}, train_data_dir)
    return config


def _shipped_stats(loaded: LoadedVAT, train_data_dir: str | os.PathLike | None):
    """The folder's feature statistics with their fit record as it ships, or None."""
    from vat.share.training_record import portable_fit

    stats = loaded.feature_stats
    if stats is not None and portable_fit(stats.fit, train_data_dir) != stats.fit:
        stats = dataclasses.replace(stats, fit=portable_fit(stats.fit, train_data_dir))
    return stats


def _files_to_copy(folder: Path) -> tuple[list[Path], list[str]]:
    """The files of the exported `folder` an entry copies as they are, and the names of what
    it leaves out (the user's own files, links, folders). A file under an export file's name
    that is no regular file is refused: following a link would copy a file from elsewhere."""
    from vat.share.folder import ALL_FILES, is_export_file

    copied, left_out = [], []
    for p in sorted(folder.iterdir()):
        if p.name in (WEIGHTS_NAME, SHIPPED_NAME, CARD_NAME, CONFIG_NAME):
            continue  # written anew: the weights cast, config.json made portable, the card
        if is_export_file(p):
            copied.append(p)
        elif p.name in ALL_FILES:
            what = "a symbolic link" if p.is_symlink() else "not a regular file"
            raise VatError(
                f"{p} is {what}; vat copies only regular files into the shipped models: "
                "put the file itself there (or export the model again)"
            )
        else:
            left_out.append(p.name)
    return copied, left_out


def _check_replaceable(out: Path, name: str, overwrite: bool) -> None:
    """An existing entry is replaced only with `overwrite`, and only when vat wrote all of it
    (a shipped.json, damaged or not, and only files an export writes or it lists)."""
    from vat.share.folder import is_export_file

    if not (out.exists() or out.is_symlink()):
        return
    if not overwrite:
        raise VatError(
            f"{out} exists: vat already ships a model named {name} (overwrite replaces it)"
        )
    record = out / SHIPPED_NAME
    if out.is_symlink() or not out.is_dir() or record.is_symlink() or not record.is_file():
        raise VatError(f"{out} exists and is not a shipped model; vat replaces only its entries")
    try:
        listed = set(_read_json(record, RECORD_LIMIT).get("sha256") or {})
    except (OSError, ValueError, RecursionError, AttributeError, TypeError):
        listed = set()  # damaged: the names an export writes still tell vat's files
    foreign = sorted(
        p.name
        for p in out.iterdir()
        if p.name != SHIPPED_NAME
        and not is_export_file(p)
        and not (p.name in listed and p.is_file() and not p.is_symlink())
    )
    if foreign:
        raise VatError(
            f"{out} holds files vat did not write ({', '.join(foreign[:3])}); overwrite "
            "replaces only a shipped model's own files: move them out first"
        )


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
    export files as they are (a warning names what is left out), the weights cast to `dtype`,
    config.json's training record in its portable form, a card (README.md) saying what the
    model is (`info`: summary, good_for, not_for, rebuild, fp32_match), and shipped.json
    (`info`, the dtype, each file's SHA-256 and size). Written into a temp folder and renamed
    into place; an existing entry needs `overwrite` (`_check_replaceable`)."""
    import torch
    from safetensors.torch import save_model

    from vat.share.folder import FEATURES_NAME, replace_dir
    from vat.share.model_card import model_card

    record = {"format": SHIPPED_FORMAT, "name": name, **info, "dtype": dtype}
    root = check_shipping(loaded, name, dtype, registry, record, train_data_dir, overwrite)
    half = copy.deepcopy(loaded.model).to("cpu", getattr(torch, dtype))
    for key, tensor in half.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise VatError(f"{key} does not fit in {dtype} (inf after the cast): use bfloat16")
    folder = loaded.source.path
    copied, left_out = _files_to_copy(folder)
    if left_out:
        warnings.warn(
            f"left out of {name}, as no part of an exported folder: {', '.join(left_out)}",
            stacklevel=2,
        )
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(root)  # the temp folders of killed adds
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=temp_prefix(root / name)))
    try:
        for p in copied:
            shutil.copyfile(p, tmp / p.name, follow_symlinks=False)
        save_model(half, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        config = _shipped_config(folder / CONFIG_NAME, train_data_dir)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        record.setdefault("summary", default_summary(config))
        stats = _shipped_stats(loaded, train_data_dir)
        if stats is not loaded.feature_stats:
            stats.save(tmp / FEATURES_NAME)
        own = stats if loaded.own_features is loaded.feature_stats else loaded.own_features
        card = model_card(config, loaded.tokenizer.vocab_size, own, record)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
        files = sorted(tmp.iterdir())
        record["sha256"] = {p.name: file_sha256(p) for p in files}
        record["bytes"] = {p.name: p.stat().st_size for p in files}
        (tmp / SHIPPED_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o755)  # package data: readable by all, like the code beside it
        if overwrite:
            replace_dir(tmp, root / name)
        else:  # a rename never replaces a folder that holds files: two adds write it once
            try:
                os.rename(tmp, root / name)
            except OSError:
                _check_replaceable(root / name, name, overwrite)
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    entry = _read_entry(root / name)
    assert entry is not None
    return entry
