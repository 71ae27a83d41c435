"""The compiled training step kept with the run, so that the next launch reads it instead of
compiling it again: the start-up is GPU time that trains nothing.

A launch of a compiled run (`model.compile: true`) spends most of its start-up in
torch.compile, which on a short GPU allocation can be most of the launch (BENCHMARKS.md,
"Compile cache"). torch keeps what it compiles in TORCHINDUCTOR_CACHE_DIR (/tmp by default), which a
fresh machine does not have. Its portable "mega-cache" (`torch.compiler.save_cache_artifacts`,
`load_cache_artifacts`) serialises those entries (AOTAutograd's joint graphs, inductor's
generated code and, on CUDA, the Triton kernels bundled with it) as one blob that populates
the local caches of another process.

`CompileCache` (a callback `vat train` adds when model.compile is on; `--compile-cache false`
turns it off) keeps that blob in the run folder:

- RUN_DIR/compile_cache.bin: the blob, one block per kind of artifact;
- RUN_DIR/compile_cache.json: the record of what it is valid for (torch, CUDA, Triton,
  Python, the device), of the file (its size and SHA-256, its artifacts) and its
  signature.

**The blob is code.** torch unpickles its entries and runs the code inductor generated, so a
blob is as trusted as whoever wrote it; a record beside it proves nothing, since whoever
supplies the folder supplies the record. So every record is signed (HMAC-SHA256) with a key
of this user's own, kept outside every folder vat writes or shares (`key_path`: in the user's
cache folder, made at the first save, readable by the user alone), and a launch loads a blob
only when its record's signature is this key's: a cache this user's vat wrote, here or on a
machine sharing the home folder. Anything else (a copied run folder, a download, a seed) is
not loaded unless the command line says `--trust-compile-cache`, which vat never takes from a
file. Loaded or trusted, the blob is read with every length checked against its size and
every key kept to a plain file name (`artifacts`) before torch sees it.

Before the first compile it loads the blob when the record matches this machine and is
signed, or says in one `vat:` line why not. vat names no job for dynamo's profile-guided
dynamic shapes (`torch.compiler.config.job_id`): the compiled step marks its sizes dynamic
from the first call (objective.py), so there is no profile of sizes to carry from one launch
to the next, nor one run's profile to steer another's.

It saves after the first optimizer step (when the step has compiled, forward and backward),
and again at a checkpoint save, at the end of training and on an error, whenever dynamo has
compiled graphs since. Each save merges what was loaded with what
this process compiled (newer entries win), so a graph one launch needed and the next did not
(a batch of one sentence) stays for the one after. Both files are
written atomically (vat.io.atomic_write: a link there is replaced, never written through).
The cache holds compiled code only: a checkpoint and an exact resume are the same with it or
without it; on a mismatch torch compiles as it would have.

On a CPU the blob holds inductor's generated C++ source, not the built kernels (torch bundles
only Triton's): a fresh machine still runs the C++ compiler (BENCHMARKS.md, "Compile cache").
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

CACHE_FILE = "compile_cache.bin"
RECORD_FILE = "compile_cache.json"
RECORD_MAX_BYTES = 1 << 16
"""A record vat writes is a few hundred bytes; a larger one is not read."""
KEY_ENV = "VAT_COMPILE_CACHE_KEY"
"""The path of the user's signing key, instead of `$XDG_CACHE_HOME/vat/compile_cache.key`."""
MATCHED = ("torch", "cuda", "triton", "python", "device")
"""The record's keys that must equal this machine's for the cache to be loaded."""
_SAID = {
    "torch": "torch",
    "cuda": "CUDA",
    "triton": "Triton",
    "python": "Python",
    "device": "the device",
}


# -- what a cache is valid for ----------------------------------------------------------------
def device_name(device: torch.device) -> str:
    """The GPU's name ("NVIDIA H200"), or the CPU's architecture and the vector instructions
    torch's kernels use ("CPU x86_64 AVX2"): inductor's C++ for AVX-512 would not run on an
    AVX2 machine."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU {platform.machine()} {torch.backends.cpu.get_cpu_capability()}"


def machine_record(device: torch.device) -> dict[str, str | None]:
    """This machine as a cache record names it (MATCHED)."""
    triton = None
    if device.type == "cuda":
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
        "device": device_name(device),
    }


def mismatch(record: dict[str, Any], here: dict[str, Any]) -> str | None:
    """Why a cache saved as `record` is not for this machine (`here`), or None."""
    for key in MATCHED:
        if record.get(key) != here.get(key):
            if key == "device":
                return f"it was saved on {record.get(key)}, this is {here.get(key)}"
            return (
                f"it was saved with {_SAID[key]} {record.get(key)}, this machine has "
                f"{_SAID[key]} {here.get(key)}"
            )
    return None


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- who wrote it -----------------------------------------------------------------------------
def key_path() -> Path:
    """Where this user's signing key lives: outside every folder vat writes or shares."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    cache_home = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache_home).expanduser() / "vat" / "compile_cache.key"


def user_key(create: bool = False) -> bytes:
    """This user's signing key (32 random bytes), made when `create` and there is none.
    Raises VatError when it is missing or another user could read or replace it (then it
    could sign a cache for this user)."""
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
    """32 random bytes at `path`, mode 0600, made whole or not at all: written to a temp
    file, then linked into place, which fails rather than replace a key another process made
    first."""
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
    """HMAC-SHA256 of the record (all but its signature; the blob through its SHA-256)."""
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


# -- the files --------------------------------------------------------------------------------
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
    """(the blob in FOLDER/compile_cache.bin, its record, None) when its record matches
    `here`, describes the file and is signed with the user's key (or `trust`), and the blob
    parses; else (None, None, why not). Links are not followed: vat reads and writes its own
    files only."""
    path = folder / CACHE_FILE
    if path.is_symlink():
        return None, None, "it is a symbolic link (vat neither reads nor writes through links)"
    if not path.is_file():
        return None, None, "it is not a regular file"
    record, why = read_record(folder)
    if record is None:
        return None, None, why
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
    """The blob, then its signed record (with the blob's size and SHA-256), each atomically:
    a link at either name is replaced, never written through; a record that does not
    describe the blob beside it (a kill between the two writes) makes the next launch ignore
    both. Raises VatError when the user's key cannot be made or read."""
    key = user_key(create=True)  # first: no unsigned blob is left behind
    atomic_write(folder / CACHE_FILE, lambda f: f.write(blob), binary=True)
    full = {"written_by": "vat train", **record, "bytes": len(blob), "sha256": digest(blob)}
    write_json_atomic(folder / RECORD_FILE, {**full, "signature": signature(full, key)})


# -- torch's blob -----------------------------------------------------------------------------
# torch 2.13's format (torch.utils._appending_byte_serializer, torch.compiler._cache): a
# CRC32, the version (uint64 1), then per kind of artifact its name, its count and each
# artifact's key and content; a name or key is base64 text, every field a big-endian uint64
# length and its bytes. Read and written here, not with torch's reader, which trusts the
# counts: a small blob claiming a huge count would make it allocate until memory runs out.
# The record pins the torch version that wrote the blob.
_KEY_RE = re.compile(r"[A-Za-z0-9_+=:-][A-Za-z0-9_.+=:-]*")
"""An artifact's key, which torch joins onto its cache folder: a plain file name."""


def artifacts(blob: bytes) -> list[tuple[str, str, bytes]]:
    """(kind, key, content) of each artifact in `blob`, each length checked against the
    bytes left; ValueError says what is wrong."""
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
    """`artifacts`' inverse, one block per kind (later artifacts win on a key), and the count
    of each kind."""
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
    """The artifacts of all `blobs` (later ones win on a key) as one blob, one block per kind,
    and the count of each kind. torch's own blob appends a block per kind at each
    `save_cache_artifacts()`, and `load_cache_artifacts` keeps only the last block of each
    kind, so a cache saved twice in one process would load only what the second save added."""
    return blob_of(a for blob in blobs if blob for a in artifacts(blob))


def _graphs() -> int:
    """Graphs dynamo has built in this process (a hit in the cache counts too)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def reuse() -> tuple[int, int]:
    """(inductor graphs read from a cache, inductor graphs looked up) in this process: a
    compiled step is a forward and a backward graph."""
    from torch._dynamo.utils import counters

    hit = int(counters["inductor"]["fxgraph_cache_hit"])
    return hit, hit + int(counters["inductor"]["fxgraph_cache_miss"])


def _artifacts_text(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    return f"{total} artifact{'s' * (total != 1)} ({kinds})"


def _say(line: str) -> None:
    print(f"vat: compile cache: {line}", file=sys.stderr)


def _load_into_torch(blob: bytes) -> dict[str, int]:
    """Populate torch's local caches from a blob `read_cache` accepted; the count of each
    kind. torch logs its own failures with a traceback: kept quiet, since vat says why."""
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


# -- the callback -----------------------------------------------------------------------------
class CompileCache(Callback):
    """Loads RUN_DIR/compile_cache.bin before the first compile (every process: each has its
    own inductor cache) and saves it from global rank 0 (module docstring). `trust`: load a
    cache that is not signed with the user's key (`vat train --trust-compile-cache`)."""

    def __init__(self, run_dir: str | os.PathLike, trust: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.trust = trust
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
        """Load the run folder's cache into torch's local caches when it is for this machine
        and signed with the user's key (or trusted); the line that says what happened."""
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

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        self.save(trainer)  # nothing of the cache goes into the checkpoint

    def on_train_end(self, trainer, pl_module) -> None:
        self.save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.save(trainer)

    def save(self, trainer) -> None:
        """Write the cache (global rank 0) when dynamo built graphs since the last save."""
        if self._off or not trainer.is_global_zero or self._here is None:
            return
        graphs = _graphs()
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
        hit, looked_up = reuse()
        read = f"; {hit} of {looked_up} inductor graphs read from it" if self._loaded else ""
        _say(
            f"saved {_artifacts_text(counts)}, {len(blob) / 2**20:.1f} MiB, to "
            f"{self.run_dir / CACHE_FILE} at step {trainer.global_step:,}{read}"
        )
