"""The compiled training step kept with the run, so that the next launch reads it instead of
compiling it again: the start-up is GPU time that trains nothing.

A launch of a compiled run (`model.compile: true`) spends most of its start-up in
torch.compile: an H200 launch of the reference trained 219 steps in 86 s, 67.5 s of them
start-up. torch keeps what it compiles in TORCHINDUCTOR_CACHE_DIR (/tmp by default), which a
fresh machine does not have. Its portable "mega-cache" (`torch.compiler.save_cache_artifacts`,
`load_cache_artifacts`) serialises those entries (dynamo's automatic-dynamic profile,
AOTAutograd's joint graphs, inductor's generated code and, on CUDA, the Triton kernels bundled
with it) as one blob that populates the local caches of another process.

`CompileCache` (a callback `vat train` adds when model.compile is on; `--compile-cache false`
turns it off) keeps that blob in the run folder:

- RUN_DIR/compile_cache.bin: the blob, one block per kind of artifact;
- RUN_DIR/compile_cache.json: the record of what it is valid for (torch, CUDA, Triton,
  Python, the device) and of the file (its size and SHA-256, its artifacts).

Before the first compile it loads the blob when the record matches this machine, or says in
one `vat:` line why not. It also names the job for dynamo's profile-guided dynamic shapes
(`torch.compiler.config.job_id`, unless one is set): without a job id dynamo keeps no record
of which sizes it saw vary, and each launch compiles a graph for its first padded length
before the dynamic one it needs at the second (objective.py); with it, that record travels
in the blob and a resumed launch compiles (or reads) the dynamic graph at once.

It saves after the first optimizer step (when the step has compiled, forward and backward),
and again at a checkpoint save, at the end of training and on an error, whenever dynamo has
compiled graphs since. Each save merges what was loaded with what
this process compiled (newer entries win), so a graph one launch needed and the next did not
(a batch of one sentence, a second padded length) stays for the one after. Both files are
written atomically (vat.io.atomic_write: a link there is replaced, never written through).
The cache holds compiled code only: a checkpoint and an exact resume are the same with it or
without it; on a mismatch torch compiles as it would have.

On a CPU the blob holds inductor's generated C++ source, not the built kernels (torch bundles
only Triton's): a fresh machine still runs the C++ compiler (BENCHMARKS.md, "Compile cache").
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from vat.errors import VatError
from vat.io import atomic_write, write_json_atomic

PGO_JOB_ID = "vat-train"
"""dynamo's profile-guided job id while a run keeps a cache: the same compiled function in
every vat run, whose dynamic sizes (the batch, the padded length) are the same too."""
CACHE_FILE = "compile_cache.bin"
RECORD_FILE = "compile_cache.json"
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


# -- the files --------------------------------------------------------------------------------
def read_record(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(FOLDER/compile_cache.json, None), or (None, why it cannot be read)."""
    path = folder / RECORD_FILE
    if path.is_symlink() or not path.is_file():
        return None, f"its record {RECORD_FILE} is missing"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"its record {RECORD_FILE} cannot be read ({type(e).__name__})"
    if not isinstance(record, dict):
        return None, f"its record {RECORD_FILE} is not a cache record"
    return record, None


def read_cache(folder: Path, here: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """(the blob in FOLDER/compile_cache.bin, None) when its record matches `here` and the
    file its record; else (None, why not). Links are not followed: vat reads and writes its
    own files only."""
    path = folder / CACHE_FILE
    if path.is_symlink():
        return None, "it is a symbolic link (vat neither reads nor writes through links)"
    if not path.is_file():
        return None, "it is not a regular file"
    record, why = read_record(folder)
    if record is None:
        return None, why
    why = mismatch(record, here)
    if why is not None:
        return None, why
    if path.stat().st_size != record.get("bytes"):  # before reading: the file may be huge
        return None, "its size differs from its record (damaged, or not this record's)"
    blob = path.read_bytes()
    if len(blob) != record.get("bytes") or digest(blob) != record.get("sha256"):
        return None, "its size or SHA-256 differs from its record (damaged, or not this record's)"
    return blob, None


def write_cache(folder: Path, blob: bytes, record: dict[str, Any]) -> None:
    """The blob, then its record (with the blob's size and SHA-256), each atomically: a link
    at either name is replaced, never written through; a record that does not describe the
    blob beside it (a kill between the two writes) makes the next launch ignore both."""
    atomic_write(folder / CACHE_FILE, lambda f: f.write(blob), binary=True)
    full = {"written_by": "vat train", **record, "bytes": len(blob), "sha256": digest(blob)}
    write_json_atomic(folder / RECORD_FILE, full)


# -- torch's blob -----------------------------------------------------------------------------
def merge(*blobs: bytes | None) -> tuple[bytes, dict[str, int]]:
    """The artifacts of all `blobs` (later ones win on a key) as one blob, one block per kind,
    and the count of each kind.

    Not torch's own bytes: each `save_cache_artifacts()` appends a block per kind to the
    blob, and `load_cache_artifacts` keeps only the last block of each kind (torch 2.13:
    `dict()` of the blocks), so a cache saved twice in one process would load only what the
    second save added. The helpers are those torch's serialiser uses; the record pins the
    torch version that wrote them."""
    from torch.compiler._cache import (
        CacheArtifactManager,
        _deserialize_single_cache,
        _serialize_single_cache,
    )
    from torch.utils._appending_byte_serializer import AppendingByteSerializer

    CacheArtifactManager._ensure_cache_artifacts_registered()
    kinds: dict[str, dict[str, Any]] = {}
    for blob in blobs:
        if not blob:
            continue
        blocks = AppendingByteSerializer.to_list(blob, deserialize_fn=_deserialize_single_cache)
        for kind, artifacts in blocks:
            kinds.setdefault(kind, {}).update((a.key, a) for a in artifacts)
    out = AppendingByteSerializer(serialize_fn=_serialize_single_cache)
    out.extend((kind, list(by_key.values())) for kind, by_key in kinds.items())
    return out.to_bytes(), {kind: len(by_key) for kind, by_key in kinds.items()}


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


# -- the callback -----------------------------------------------------------------------------
class CompileCache(Callback):
    """Loads RUN_DIR/compile_cache.bin before the first compile (every process: each has its
    own inductor cache) and saves it from global rank 0 (module docstring)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self._here: dict[str, Any] | None = None
        self._loaded: bytes | None = None  # the blob this launch loaded: kept in every save
        self._saved_graphs: int | None = None  # dynamo's graph count at the last save
        self._start_step = 0
        self._saves = 0
        self._off = False  # a save failed (full disk, a folder at the name): said once
        self._job_id: list[str | None] = []  # torch's job id before setup (restored after)

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        self._here = machine_record(trainer.strategy.root_device)
        self._job_id = [torch.compiler.config.job_id]
        if torch.compiler.config.job_id is None:
            torch.compiler.config.job_id = PGO_JOB_ID
        line = self.load()
        if trainer.is_global_zero:
            _say(line)

    def load(self) -> str:
        """Load the run folder's cache into torch's local caches when it is for this machine;
        the line that says what happened."""
        path = self.run_dir / CACHE_FILE
        if not (path.exists() or path.is_symlink()):
            return f"none in {self.run_dir} yet; this launch saves its compiled step there"
        blob, why = read_cache(self.run_dir, self._here or {})
        if blob is not None:
            try:
                info = torch.compiler.load_cache_artifacts(blob)
            except Exception as e:  # torch's own format: anything it raises means "not used"
                info, why = None, f"torch could not load it ({type(e).__name__}: {e})"
            if info is None and why is None:
                why = "torch could not read it"
        if why is not None:
            return f"{path} not used: {why}; this launch saves its own"
        self._loaded = blob
        counts = {kind: len(keys) for kind, keys in info.artifacts.items()}
        return (
            f"loaded {_artifacts_text(counts)} from {path}; graphs that match them are read, "
            "not compiled"
        )

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit" and self._job_id:
            torch.compiler.config.job_id = self._job_id.pop()

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
            try:
                blob, counts = merge(self._loaded, saved[0])
            except Exception:  # torch's private helpers changed (another release): its bytes
                blob, counts = saved[0], {k: len(v) for k, v in saved[1].artifacts.items()}
            write_cache(
                self.run_dir, blob, {**self._here, "artifacts": counts, "step": trainer.global_step}
            )
        except (OSError, VatError) as e:
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
