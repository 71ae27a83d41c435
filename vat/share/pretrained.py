"""The models that ship with vat: exported folders vat/shipped/NAME/ with half-precision
weights and a shipped.json (its dtype, every other file's SHA-256 and size)."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vat.errors import CheckpointError, OptionError, VatError
from vat.share import CONFIG_NAME, SHIPPED_NAME

SHIPPED_DIR_ENV = "VAT_SHIPPED_DIR"
PACKAGE_SHIPPED_DIR = Path(__file__).resolve().parents[1] / "shipped"
PREFIX = "vat:"
# lowercase letters, digits, '.', '_' and '-', and no slash, so that it is never a Hub id
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
DTYPES = ("float16", "bfloat16")
REPAIR = "reinstall vat (or write it again: scripts/add_pretrained.py DIR --name NAME --overwrite)"
RECORD_LIMIT = 1 << 20  # a shipped.json is kilobytes: a larger one is damaged, and not read
CONFIG_LIMIT = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


def shipped_dir() -> Path:
    """$VAT_SHIPPED_DIR if set, else the package's vat/shipped/."""
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

    @property
    def config(self) -> Any:
        """The folder's config.json (for listing; loading goes through vat.load)."""
        return _read_json(self.folder / CONFIG_NAME, CONFIG_LIMIT)

    def facts(self) -> dict[str, str]:
        """What `vat pretrained` lists: shape, rate, training data, recorded scores, size."""
        try:
            return listing_facts(self.config, self.size_bytes, self.info["dtype"])
        except (OSError, ValueError, RecursionError, AttributeError, TypeError) as e:
            where = f"shipped model {self.name}: {self.folder / CONFIG_NAME}"
            raise CheckpointError(f"{where}: {_reason(e)}; {REPAIR}") from None

    def verify(self) -> None:
        """Every listed file is a regular file (no link) of its recorded size, and no other."""
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
    layers = f"{mc.get('n_encoder_layers')}+{mc.get('n_decoder_layers')} layers"
    return {
        "shape": f"{layers}, d {mc.get('d_model')}, {mc.get('vocab_size')} BPE",
        "rate": f"{kl:.1f} nats/token" if isinstance(kl, int | float) else "not recorded",
        "trained on": trained,
        "scores": scores or "none recorded",
        "size": f"{size_bytes / 2**20:.1f} MiB {dtype}",
    }


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
    """shipped.json's contents as vat writes them, or one line naming `path` and the fault."""

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
            "not follow; put the entry's folder itself there"
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
    """Every shipped model by name; a damaged one raises, or goes to `problems` if given."""
    root = shipped_dir() if registry is None else Path(registry)
    if not root.is_dir():
        return []
    try:  # a dot-folder is a write in progress (or one a kill left), never an entry
        folders = [p for p in sorted(root.iterdir()) if p.is_dir() and p.name[0] != "."]
    except OSError as e:
        error = VatError(f"shipped models: cannot read the registry {root} ({e.strerror or e})")
        if problems is None:
            raise error from None
        problems.append(error)
        return []
    found = []
    for p in folders:
        try:
            entry = _read_entry(p)
        except VatError as e:
            if problems is None:
                raise
            problems.append(e)
        else:
            found += [entry] if entry is not None else []
    return found


def list_pretrained() -> list[ShippedModel]:
    """The models that ship with vat (`vat pretrained`), by name."""
    return shipped_models()


def shipped_model(name: str, registry: Path | None = None) -> ShippedModel | None:
    """The shipped model called `name`, or None."""
    if not NAME_PATTERN.fullmatch(name):
        return None
    entry = (shipped_dir() if registry is None else Path(registry)) / name
    return _read_entry(entry) if entry.is_dir() or entry.is_symlink() else None


def named_shipped(text: str, option: str = "name") -> ShippedModel:
    """The shipped model `text` (`NAME` or `vat:NAME`) names, else one line listing them."""
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
