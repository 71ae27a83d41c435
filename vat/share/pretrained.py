"""The models that ship with vat: a registry of exported folders inside the package.

    vat/shipped/NAME/          an ordinary exported folder (vat.share.folder): config.json,
                               model.safetensors (float16 or bfloat16), tokenizer.json, the
                               card (README.md), the sentence-transformers files, the feature
                               statistics; plus shipped.json (below)

shipped.json says what the model is and how it was checked: its name, a one-line summary,
what it is good for and not, the weights' dtype, how far the half-precision weights move
encode and generate from the float32 model (measured when it was added), how to rebuild it,
and the SHA-256 and size of every other file, checked each time the model is loaded (and by
`vat pretrained show`): every file it names sits directly in the entry's folder, no link (nor
is the folder one: the registry does not follow a link in an entry's place), and all sizes are
checked before any file is hashed. A second model is a second folder
(`vat pretrained add DIR --name NAME` writes one); no code names a model.

How a model argument is told apart (vat.share.resolve):
- `vat:NAME` always names a shipped model;
- a bare NAME (no slash) that is a shipped model and no existing path is that model; a NAME
  that is both is refused in one line (write `./NAME` for the path, `vat:NAME` for the model);
- a Hub repo id has exactly one slash (`user/name`), which a shipped name never has.

$VAT_SHIPPED_DIR points the registry at another folder (tests; a site's own models).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Iterator
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


REPAIR = "reinstall vat, or write the entry again: vat pretrained add DIR --name NAME --overwrite"
"""How a damaged entry is put right, as every error about one says it."""
RECORD_LIMIT = 1 << 20
"""The most bytes vat reads of a shipped.json (one is a few kilobytes; a larger one is
damaged, and reading it whole would take memory by the file's size)."""
CONFIG_LIMIT = 64 << 20
"""The most bytes `vat pretrained` reads of an entry's config.json to list it."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
    def sizes(self) -> dict[str, int] | None:
        """File name -> size in bytes, as written; None for an entry written before vat
        recorded sizes."""
        sizes = self.info.get("bytes")
        return None if sizes is None else dict(sizes)

    @property
    def size_bytes(self) -> int:
        total = 0
        for f in self.files:
            try:
                st = os.lstat(self.folder / f)
            except OSError:
                continue  # a missing file is verify's to name
            total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        return total

    @property
    def config(self) -> dict[str, Any]:
        """The folder's config.json (for listing; loading goes through vat.load)."""
        path = self.folder / CONFIG_NAME
        try:
            return _read_json(path, CONFIG_LIMIT)
        except (OSError, ValueError, RecursionError) as e:
            raise CheckpointError(
                f"shipped model {self.name}: {path}: {_reason(e)}; {REPAIR}"
            ) from None

    def facts(self) -> dict[str, str]:
        """What `vat pretrained` lists: shape, rate, training data, recorded scores, size."""
        config = self.config
        if not isinstance(config, dict):
            raise CheckpointError(
                f"shipped model {self.name}: {self.folder / CONFIG_NAME} is not a JSON object; "
                f"{REPAIR}"
            )
        try:
            return listing_facts(config, self.size_bytes, self.info["dtype"])
        except (AttributeError, TypeError, ValueError) as e:  # a key of the wrong type
            raise CheckpointError(
                f"shipped model {self.name}: {self.folder / CONFIG_NAME} is not the config.json "
                f"vat writes ({type(e).__name__}: {e}); {REPAIR}"
            ) from None

    def verify(self) -> None:
        """Every file shipped.json lists is a regular file of the folder (no link, which
        could lead out of it) of the size it records, checked for all before any is read,
        then has its SHA-256; and the folder holds no other file. A mismatch is one line
        naming the file."""
        sizes = self.sizes
        for fname in sorted(self.files):
            path = self.folder / fname
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                raise CheckpointError(
                    f"shipped model {self.name}: {path} is missing; {REPAIR}"
                ) from None
            if stat.S_ISLNK(st.st_mode):
                raise CheckpointError(
                    f"shipped model {self.name}: {path} is a symbolic link, which could lead "
                    f"out of the entry; a shipped model holds only its own files; {REPAIR}"
                )
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointError(
                    f"shipped model {self.name}: {path} is not a regular file; {REPAIR}"
                )
            if sizes is not None and st.st_size != sizes[fname]:
                raise CheckpointError(
                    f"shipped model {self.name}: {path} is {st.st_size} bytes where its "
                    f"{SHIPPED_NAME} records {sizes[fname]}: the file was altered or damaged; "
                    f"{REPAIR}"
                )
        for fname, expected in sorted(self.files.items()):
            path = self.folder / fname
            got = file_sha256(path)
            if got != expected:
                raise CheckpointError(
                    f"shipped model {self.name}: {path} fails its SHA-256 check (expected "
                    f"{expected[:12]}..., got {got[:12]}...): the file was altered or damaged; "
                    f"{REPAIR}"
                )
        extra = sorted(
            p.name
            for p in self.folder.iterdir()
            if p.name not in self.files and p.name != SHIPPED_NAME
        )
        if extra:
            raise CheckpointError(
                f"shipped model {self.name}: {self.folder} holds files its {SHIPPED_NAME} does "
                f"not list ({', '.join(extra[:3])}); {REPAIR}"
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


def _reason(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nested too deeply to be vat's JSON"
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return f"not valid JSON ({e})" if isinstance(e, ValueError) else str(e)


def _read_json(path: Path, limit: int) -> Any:
    """The JSON in the regular file `path` (never through a link), at most `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than vat reads ({limit})")
        return json.loads(f.read(limit + 1).decode("utf-8"))


def _plain_file_name(fname: object) -> bool:
    """A name of a file directly inside the entry's folder: no folder part, no '..', not
    absolute, nothing a path could climb out with."""
    return (
        isinstance(fname, str)
        and fname not in ("", ".", "..", SHIPPED_NAME)
        and "/" not in fname
        and "\\" not in fname
        and "\0" not in fname
    )


def _check_record(path: Path, info: Any, name: str) -> dict[str, Any]:
    """shipped.json's contents as vat wrote them, or one line naming `path` and what is
    wrong: every file it lists is a plain name inside the entry's folder, its SHA-256 a
    64-digit hex string, its size (when recorded) a whole number of bytes."""

    def bad(problem: str) -> CheckpointError:
        return CheckpointError(f"{path} {problem}; {REPAIR}")

    if not isinstance(info, dict):
        raise bad(f"holds {type(info).__name__}, not the JSON object vat writes")
    if info.get("name") != name:
        raise bad(f"does not describe the model {name!r} (its name is {info.get('name')!r:.80})")
    sums = info.get("sha256")
    if not isinstance(sums, dict) or not sums:
        raise bad('lists no files with their SHA-256 ("sha256": {file: sum})')
    for fname, value in sums.items():
        if not _plain_file_name(fname):
            raise bad(
                f"lists {fname!r:.300}, which is not a file name inside the entry's folder "
                "(a shipped model's files sit directly in it)"
            )
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise bad(f"gives {fname} the SHA-256 {value!r:.80}, not 64 hexadecimal digits")
    sizes = info.get("bytes")
    if sizes is not None:
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
    """The entry in `folder`, None when it has no shipped.json (a folder that is no entry),
    a one-line CheckpointError naming its shipped.json when that is damaged, or the folder
    when it is a symbolic link: an entry's files are its own (`verify` checks each one)."""
    if folder.is_symlink():
        raise CheckpointError(
            f"shipped model {folder.name}: {folder} is a symbolic link, which the registry does "
            "not follow; put the entry's folder itself there (vat pretrained add DIR --name "
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
    try:
        if not root.is_dir():
            return []
        # a dot-folder is a write in progress (or one a crash left), never an entry
        folders = [p for p in sorted(root.iterdir()) if p.is_dir() and p.name[0] != "."]
    except OSError as e:
        error = VatError(f"shipped models: cannot read the registry {root} ({e.strerror or e})")
        if problems is None:
            raise error from None
        problems.append(error)
        return []
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
    root = shipped_dir() if registry is None else Path(registry)
    entry = root / name
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
    """What `write_shipped` refuses, checked before any work: a path instead of a loaded
    model, a training checkpoint (a shipped model is an exported folder), a bad name or
    dtype, a registry that exists and is no folder, a file of the folder that is an export
    file's name but no regular file, and anything that would name a place on this machine
    (`check_portable`: the folder's config.json made portable, its statistics' fit record,
    and `info`, shipped.json's texts); given `overwrite` (True or False), also an entry of
    that name it may not replace (`_check_replaceable`). Returns the registry folder
    ($VAT_SHIPPED_DIR or the package's by default)."""

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

    from vat.share.training_record import portable_training

    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    config["training"] = portable_training(config.get("training") or {}, train_data_dir)
    return config


def _shipped_stats(loaded: LoadedVAT, train_data_dir: str | os.PathLike | None):
    """The folder's feature statistics with their fit record as it ships (the files a fit
    read named as the training records name them), or None."""

    from vat.share.training_record import portable_fit

    stats = loaded.feature_stats
    if stats is not None and portable_fit(stats.fit, train_data_dir) != stats.fit:
        stats = dataclasses.replace(stats, fit=portable_fit(stats.fit, train_data_dir))
    return stats


def _files_to_copy(folder: Path) -> tuple[list[Path], list[str]]:
    """The files of the exported `folder` an entry copies as they are (every file an export
    writes, `vat.share.folder.is_export_file`, but those the entry writes itself: weights,
    card, shipped.json), and the names of what it leaves out (anything else: the user's own
    files, links, folders, pipes). A file under an export file's name that is no regular
    file (a link, a pipe, a folder) is refused in one line: leaving it out would ship a
    model without it, and following a link would copy a file from elsewhere."""

    from vat.share.folder import ALL_FILES, is_export_file

    copy, left_out = [], []
    for p in sorted(folder.iterdir()):
        if p.name in (WEIGHTS_NAME, SHIPPED_NAME, CARD_NAME, CONFIG_NAME):
            continue  # written anew: the weights cast, config.json made portable, the card
        if is_export_file(p):
            copy.append(p)
        elif p.name in ALL_FILES:
            what = "a symbolic link" if p.is_symlink() else "not a regular file"
            raise VatError(
                f"{p} is {what}; vat copies only regular files into the shipped models: "
                "put the file itself there (or export the model again)"
            )
        else:
            left_out.append(p.name)
    return copy, left_out


def _check_replaceable(out: Path, name: str, overwrite: bool) -> None:
    """An existing entry `out` is replaced only with `overwrite`, and only when vat wrote
    all of it: a folder holding its shipped.json (damaged or not: `--overwrite` is how a
    damaged entry is repaired) and no file but those an export writes or its shipped.json
    lists, no link, no folder; what vat did not write is never deleted."""

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


@contextlib.contextmanager
def registry_lock(root: Path) -> Iterator[None]:
    """Hold the registry `root` (an flock on the folder itself, so that no lock file is
    added to the package) while an entry is written: a second `vat pretrained add` waits,
    then finds the first one's entry, instead of both saying they wrote it."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _clean_up_after_killed_adds(root: Path, name: str) -> None:
    """With the registry held, what a killed add left: its temp folders (named after their
    process, `vat.io.temp_prefix`, removed once that process is gone), and the old entry a
    replace had moved aside (`replace_dir`'s `.NAME.old-*/x`), put back when the new one
    never arrived, else removed."""
    remove_stale_temps(root)
    out = root / name
    for old in sorted(root.glob(f".{name}.old-*")):
        kept = old / "x"
        if old.is_symlink() or not old.is_dir() or {p.name for p in old.iterdir()} - {"x"}:
            continue  # not the shape replace_dir leaves: not vat's to touch
        if kept.is_dir() and not kept.is_symlink() and not (out.exists() or out.is_symlink()):
            os.replace(kept, out)
            old.rmdir()
        elif out.exists():
            shutil.rmtree(old)


def _mode(source: Path, private: int) -> int:
    """Package data is readable by everyone, like the code beside it (0644), except what
    the user made private: the source file's permission bits mask it, never widened."""
    try:
        return 0o644 & os.stat(source).st_mode
    except OSError:
        return 0o644 & private


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
    Only the files an export writes are copied, as regular files (a warning names what is
    left out), never with wider permissions than the source's. Written into a temp folder
    and renamed into place, with the registry held (`registry_lock`); an existing entry
    needs `overwrite` and must hold only what vat wrote (`_check_replaceable`)."""
    import torch
    from safetensors.torch import save_model

    from vat.share.folder import FEATURES_NAME, replace_dir
    from vat.share.model_card import model_card

    record = {"format": SHIPPED_FORMAT, "name": name, **info, "dtype": dtype}
    root = check_shipping(loaded, name, dtype, registry, record, train_data_dir)
    out = root / name
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
    with registry_lock(root):
        _clean_up_after_killed_adds(root, name)
        _check_replaceable(out, name, overwrite)  # again: another add may have written it
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=temp_prefix(out)))
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
            own = loaded.own_features
            if own is not None and own is loaded.feature_stats:
                own = stats  # with the fit record as it ships
            card = model_card(config, loaded.tokenizer.vocab_size, own, record)
            (tmp / CARD_NAME).write_text(card, encoding="utf-8")
            files = sorted(tmp.iterdir())
            record["sha256"] = {p.name: file_sha256(p) for p in files}
            record["bytes"] = {p.name: p.stat().st_size for p in files}
            (tmp / SHIPPED_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            private = _mode(folder / CONFIG_NAME, 0o644)
            for p in tmp.iterdir():
                source = folder / (p.name if p.name != SHIPPED_NAME else CONFIG_NAME)
                os.chmod(p, _mode(source, private))
            os.chmod(tmp, (0o755 & os.stat(folder).st_mode) | 0o700)
            replace_dir(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    entry = _read_entry(out)
    assert entry is not None
    return entry
