"""The compiled training step kept in RUN_DIR/compile_cache.bin (torch's mega-cache) with a
record signed by the user's own key, so the next launch reads it instead of compiling again.

The blob is code torch unpickles: a launch loads only a blob its user's vat signed (or one
`--trust-compile-cache` admits), after parsing it with every length bounded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import platform
import re
import secrets
import sys
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from vat.errors import VatError, shown_path
from vat.io import atomic_write, temp_path, write_json_atomic
from vat.train.objective import graphs_compiled

CACHE_FILE = "compile_cache.bin"
RECORD_FILE = "compile_cache.json"
RECORD_MAX_BYTES = 1 << 16  # a record vat writes is a few hundred bytes
KEY_ENV = "VAT_COMPILE_CACHE_KEY"
MATCHED = ("torch", "cuda", "triton", "python", "device")


def machine_record(device: torch.device) -> dict[str, str | None]:
    """This machine as a record names it (a CPU by its vector instructions)."""
    triton = name = None
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        try:
            import triton as _triton

            triton = _triton.__version__
        except ImportError:
            pass
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton,
        "python": platform.python_version(),
        "device": name or f"CPU {platform.machine()} {torch.backends.cpu.get_cpu_capability()}",
    }


def mismatch(record: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Why a cache saved as `record` is not for this machine (`here`), or None."""
    for key in MATCHED:
        theirs, ours = record.get(key), here.get(key)
        if theirs != ours and key == "device":
            return f"it was saved on {theirs}, this is {ours}"
        if theirs != ours:
            said = {"cuda": "CUDA", "triton": "Triton", "python": "Python"}.get(key, key)
            return f"it was saved with {said} {theirs}, this machine has {said} {ours}"
    return None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_path() -> Path:
    """Where this user's signing key lives: outside every folder vat writes or shares."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache_home).expanduser() / "vat" / "compile_cache.key"


def user_key(create: bool = False) -> bytes:
    """This user's signing key, made when `create`; VatError if missing or not private."""
    path = key_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        if not create:
            raise VatError(f"there is no signing key at {shown_path(path)} yet") from None
        _make_key(path)
        return user_key()
    except OSError as e:
        raise VatError(f"the signing key {shown_path(path)} cannot be read ({e.strerror})") from e
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        key = f.read(33)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or len(key) != 32:
        raise VatError(
            f"the signing key {shown_path(path)} is not 32 bytes readable by this user alone "
            f"(mode {st.st_mode & 0o777:o}); remove it and vat makes a new one"
        )
    return key


def _make_key(path: Path) -> None:
    """A new key at `path`, mode 0600, linked into place: one made first is kept."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        pass  # another launch made it: use theirs
    finally:
        tmp.unlink(missing_ok=True)


def signature(record: dict[str, Any], key: bytes) -> str:
    """HMAC-SHA256 of the record without its signature."""
    signed = {k: v for k, v in record.items() if k != "signature"}
    text = json.dumps(signed, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def signed_by_user(record: dict[str, Any]) -> str | None:
    """None when `record` carries this user's signature, else why not."""
    try:
        key = user_key()
    except VatError as e:
        return f"it is not signed with your key ({e})"
    given = record.get("signature")
    if not (isinstance(given, str) and hmac.compare_digest(given, signature(record, key))):
        return f"it is not signed with your key ({shown_path(key_path())})"
    return None


def read_record(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(FOLDER/compile_cache.json, None), or (None, why it cannot be read)."""
    path = folder / RECORD_FILE
    if path.is_symlink() or not path.is_file():
        return None, f"its record {RECORD_FILE} is missing"
    if path.stat().st_size > RECORD_MAX_BYTES:
        return None, f"its record {RECORD_FILE} is over {RECORD_MAX_BYTES // 1024} KiB"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:  # json recurses once per nesting level
        return None, f"its record {RECORD_FILE} cannot be read ({type(e).__name__})"
    if not isinstance(record, dict):
        return None, f"its record {RECORD_FILE} is not a cache record"
    return record, None


def read_cache(
    folder: Path, here: dict[str, Any], trust: bool = False
) -> tuple[bytes | None, dict[str, Any] | None, str | None]:
    """(blob, record, None) when all checks pass, else (None, None, why not)."""
    path = folder / CACHE_FILE
    if path.is_symlink():
        return None, None, "it is a symbolic link (vat neither reads nor writes through links)"
    if not path.is_file():
        return None, None, "it is not a regular file"
    record, why = read_record(folder)
    if record is not None:
        why = mismatch(record, here) or (None if trust else signed_by_user(record))
    if why is not None:
        return None, None, why
    if path.stat().st_size != record.get("bytes"):  # before reading: the file may be huge
        return None, None, "its size differs from its record (damaged, or not this record's)"
    blob = path.read_bytes()
    if len(blob) != record.get("bytes") or digest(blob) != record.get("sha256"):
        return None, None, "its SHA-256 differs from its record (damaged, or not this record's)"
    try:
        artifacts(blob)
    except ValueError as e:
        return None, None, f"it is not a cache torch wrote ({e})"
    return blob, record, None


def write_cache(folder: Path, blob: bytes, record: dict[str, Any]) -> None:
    """The blob, then its signed record (a kill between the two leaves a mismatch: ignored)."""
    key = user_key(create=True)  # first: no unsigned blob is left behind
    atomic_write(folder / CACHE_FILE, lambda f: f.write(blob), binary=True)
    full = {"written_by": "vat train", **record, "bytes": len(blob), "sha256": digest(blob)}
    write_json_atomic(folder / RECORD_FILE, {**full, "signature": signature(full, key)})


# torch 2.13's format (torch.compiler._cache): a CRC32, the version (uint64 1), then per kind
# of artifact its name, its count and each artifact's key and content; names and keys are
# base64 text, every field a big-endian uint64 length and its bytes. Parsed here because
# torch's reader trusts the counts: a small blob claiming a huge count would exhaust memory.
_KEY_RE = re.compile(r"[A-Za-z0-9_+=:-][A-Za-z0-9_.+=:-]*")  # torch joins keys onto a folder


def artifacts(blob: bytes) -> list[tuple[str, str, bytes]]:
    """(kind, key, content) of each artifact in `blob`; ValueError says what is wrong."""
    if len(blob) < 12 or zlib.crc32(blob[4:]).to_bytes(4, "big") != blob[:4]:
        raise ValueError("its checksum does not match")
    at = 4

    def take(n: int) -> bytes:
        nonlocal at
        if n > len(blob) - at:
            raise ValueError(f"a field of {n:,} bytes at byte {at:,} runs past its end")
        at += n
        return blob[at - n : at]

    def number() -> int:
        return int.from_bytes(take(8), "big")

    def text() -> str:
        try:
            return base64.b64decode(take(number()), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"a name before byte {at:,} is not base64 text") from None

    if number() != 1:
        raise ValueError("its format version is not 1")
    found = []
    while at < len(blob):
        kind = text()
        for _ in range(number()):  # each artifact takes 16 bytes or more: a false count ends
            key, content = text(), take(number())
            if not _KEY_RE.fullmatch(key):
                raise ValueError(f"the {kind} key {key[:80]!r} is not a plain file name")
            found.append((kind, key, content))
    return found


def blob_of(found: Iterable[tuple[str, str, bytes]]) -> tuple[bytes, dict[str, int]]:
    """`artifacts`' inverse (later artifacts win on a key) and the count of each kind."""
    kinds: dict[str, dict[str, bytes]] = {}
    for kind, key, content in found:
        kinds.setdefault(kind, {})[key] = content

    def field(data: bytes) -> bytes:
        return len(data).to_bytes(8, "big") + data

    body = bytearray((1).to_bytes(8, "big"))
    for kind, by_key in kinds.items():
        body += field(base64.b64encode(kind.encode())) + len(by_key).to_bytes(8, "big")
        for key, content in by_key.items():
            body += field(base64.b64encode(key.encode())) + field(content)
    blob = zlib.crc32(body).to_bytes(4, "big") + bytes(body)
    return blob, {kind: len(by_key) for kind, by_key in kinds.items()}


def merge(*blobs: bytes | None) -> tuple[bytes, dict[str, int]]:
    """All `blobs` as one, a block per kind (torch's loader keeps a kind's last block only)."""
    return blob_of(a for blob in blobs if blob for a in artifacts(blob))


def _artifacts_text(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f"{total} artifact{'s' * (total != 1)} ({kinds})"


def _say(line: str) -> None:
    print(f"vat: compile cache: {line}", file=sys.stderr)


def _load_into_torch(blob: bytes) -> dict[str, int]:
    """Load a blob into torch's local caches, quieting torch's traceback (vat says why)."""
    log = logging.getLogger("torch.compiler._cache")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        info = torch.compiler.load_cache_artifacts(blob)
    finally:
        log.setLevel(level)
    if info is None:
        raise ValueError("torch could not read it")
    return {kind: len(keys) for kind, keys in info.artifacts.items()}


class CompileCache(Callback):
    """Loads the cache before the first compile (every process has its own inductor cache),
    saves it from global rank 0 after the first step, at checkpoints, at the end and on an
    error, whenever dynamo compiled since."""

    def __init__(self, run_dir: str | os.PathLike, trust: bool = False) -> None:
        self.run_dir, self.trust = Path(run_dir), trust
        self._here: dict[str, Any] | None = None
        self._loaded: bytes | None = None  # the blob this launch loaded: kept in every save
        self._saved_graphs: int | None = None  # dynamo's graph count at the last save
        self._start_step = 0
        self._saves = 0
        self._off = False  # a save failed (full disk, a folder at the name): said once

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        self._here = machine_record(trainer.strategy.root_device)
        line = self.load()
        if trainer.is_global_zero:
            _say(line)

    def load(self) -> str:
        """Load the run folder's cache when it may be; the line that says what happened."""
        path = self.run_dir / CACHE_FILE
        if not (path.exists() or path.is_symlink()):
            return f"none in {self.run_dir} yet; this launch saves its compiled step there"
        blob, record, why = read_cache(self.run_dir, self._here or {}, self.trust)
        if blob is not None:
            try:
                counts = _load_into_torch(blob)
            except Exception as e:  # torch's own loaders: anything they raise means "not used"
                blob, why = None, f"torch could not load it ({type(e).__name__}: {e})"
        if blob is None:
            if why.startswith("it is not signed"):
                why += (
                    ": a compile cache is code that torch runs, so vat loads only the caches "
                    "you saved; for a run folder you copied from your own other machine, add "
                    "--trust-compile-cache"
                )
            return f"{path} not used: {why}; this launch saves its own"
        self._loaded = blob
        trusted = "" if signed_by_user(record) is None else ", trusted by --trust-compile-cache"
        return (
            f"loaded {_artifacts_text(counts)} from {path}{trusted}; graphs that match them "
            "are read, not compiled"
        )

    def on_train_start(self, trainer, pl_module) -> None:
        self._start_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._saves == 0 and trainer.global_step > self._start_step:
            self.save(trainer)  # the first optimizer step: forward and backward compiled

    def on_train_end(self, trainer, *_) -> None:
        self.save(trainer)

    # also at each checkpoint save (nothing of the cache goes into it) and on an error
    on_save_checkpoint = on_exception = on_train_end

    def save(self, trainer) -> None:
        if self._off or not trainer.is_global_zero or self._here is None:
            return
        graphs = graphs_compiled()
        if graphs == 0 or graphs == self._saved_graphs:
            return
        self._saved_graphs = graphs
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            return  # nothing cacheable (a backend other than inductor, its caches off)
        try:
            blob, counts = merge(self._loaded, saved[0])
            record = {**self._here, "artifacts": counts, "step": trainer.global_step}
            write_cache(self.run_dir, blob, record)
        except (OSError, VatError, ValueError) as e:  # ValueError: torch's format changed
            self._off = True
            _say(f"not saved ({e}); training goes on without it")
            return
        self._saves += 1
        read = ""
        if self._loaded:
            from torch._dynamo.utils import counters

            hit = int(counters["inductor"]["fxgraph_cache_hit"])
            looked_up = hit + int(counters["inductor"]["fxgraph_cache_miss"])
            read = f"; {hit} of {looked_up} inductor graphs read from it"
        _say(
            f"saved {_artifacts_text(counts)}, {len(blob) / 2**20:.1f} MiB, to "
            f"{self.run_dir / CACHE_FILE} at step {trainer.global_step:,}{read}"
        )
