"""The reference's resumable checkpoint carried from one call (and machine) to the next.

A call's files come back capped at MAX_OUT_FILE each, and the reference's last.ckpt (weights,
Adam's two moments, the schedules, the rate controller, the data loader's place) is larger:
about 34 MiB for the d128 model in fp32. So the call that trained the reference leaves it in
OUT_DIR as parts of at most MAX_OUT_FILE bytes (`reference.ckpt.part1`, ...), and the report
keeps their manifest (each part's size and SHA-256, and the whole file's): a later call on a
fresh machine, seeded with the returned files (`--seed`), joins them into its run folder and
resumes the run exactly. A part that is missing, cut short or altered is found before any
training starts, and the stage falls back to the newest weights it has (reference.py).

The manifest lives in gpu_report.json rather than in a file of its own: the report always
travels, and a returned folder's parts older than its report are then caught by their
checksums instead of being joined into the wrong checkpoint.

The run's compile cache (vat.train.compile_cache: compile_cache.bin and its record) travels
beside the parts as one more file, CACHE_PACK, so that the next launch reads the compiled
training step instead of compiling it again (before, a resumed H200 launch spent 67.5 s of
86 s starting). Its size, SHA-256 and record (torch, CUDA, Triton, Python, the device) are in
the report; a cache over MAX_OUT_FILE stays behind (said): a call returns at most 8 files.
The cache is code that torch runs, and the next node's vat did not sign it: that call unpacks
it into the run folder only with --trust-compile-cache (and tells vat train so), when all
three match, within CACHE_UNPACKED_BYTES."""

from __future__ import annotations

import hashlib
import io
import math
import os
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import Any

from bench.gpu_suite import schema
from bench.gpu_suite.call import MAX_OUT_FILE, TarRefused, read_tar
from bench.gpu_suite.out_files import open_regular, sha256_of
from bench.gpu_suite.records import (
    CACHE_PACK,
    PART_PREFIX,
    PART_RE,
    CacheRecord,
    CheckpointParts,
    CompileCachePack,
    Part,
)
from vat.io import atomic_write

# vat.train.compile_cache (CACHE_FILE, RECORD_FILE, MATCHED, its record's readers) is imported
# where it is used: it imports Lightning, seconds that a call's start (its report written,
# its first stages) need not wait for, nor a call stopped early (--call-limit-s) lose

PART_BYTES = MAX_OUT_FILE
"""A part's size at most. Parts are named PART_PREFIX + N from 1 (records.PART_RE: the report
refuses any other name, so that a hand-edited one cannot make the suite read or write outside
OUT_DIR)."""
CACHE_PACK_BYTES = MAX_OUT_FILE
"""The compile cache's pack (records.CACHE_PACK: compile_cache.bin and compile_cache.json) at
most: gzipped, since what torch serialises (pickled graphs, generated source, Triton's kernel
binaries) is not compressed, and a pack over MAX_OUT_FILE is left behind."""
CACHE_UNPACKED_BYTES = 16 * CACHE_PACK_BYTES
"""What a pack may unpack to (restore_compile_cache), 256 MiB: the caches measured so far
gzip about 8:1 (2.2 MiB to 0.27, 4.5 to 0.55 on a CPU: generated source; Triton's binaries
on a GPU compress less), so a pack within its 16 MiB holds about 128 MiB at most; twice
that, and no more: a 3 MiB pack of zeros unpacked to 3 GiB before this cap."""


def checkpoint_parts(folder: Path) -> list[Path]:
    """The checkpoint parts in `folder`, in order."""
    found = [p for p in folder.glob(PART_PREFIX + "*") if PART_RE.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name[len(PART_PREFIX) :]))


def part_files(folder: Path) -> list[Path]:
    """What carries the reference to the next call, found in `folder`: the checkpoint parts
    in order, then the compile cache's pack when there (a seed copies them all, a call that
    wrote none of them returns none)."""
    pack = folder / CACHE_PACK
    return checkpoint_parts(folder) + ([pack] if pack.is_file() else [])


def remove_parts(folder: Path) -> None:
    for p in part_files(folder):
        p.unlink(missing_ok=True)


def split(ckpt: Path, folder: Path, step: int) -> CheckpointParts:
    """Write `ckpt` into `folder` as parts of at most PART_BYTES each (atomically, each a fresh
    file renamed into place) and return their manifest; parts an earlier, longer checkpoint
    left there are removed."""
    whole = hashlib.sha256()
    parts = []
    total = ckpt.stat().st_size
    with open(ckpt, "rb") as f:
        for i in range(1, max(1, math.ceil(total / PART_BYTES)) + 1):
            data = f.read(PART_BYTES)
            whole.update(data)
            name = f"{PART_PREFIX}{i}"
            atomic_write(folder / name, lambda out, data=data: out.write(data), binary=True)
            parts.append(Part(name=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
    for stale in checkpoint_parts(folder)[len(parts) :]:
        stale.unlink(missing_ok=True)
    return CheckpointParts(
        file=ckpt.name, step=int(step), bytes=total, sha256=whole.hexdigest(), parts=parts
    )


def join(folder: Path, manifest: CheckpointParts, dest: Path) -> str | None:
    """Join the parts `manifest` names from `folder` into `dest` (atomically), each part and
    the whole checked against the manifest first. None when joined, else why not (a line for
    the report); `dest` is then left as it was."""
    whole = hashlib.sha256()
    n = len(manifest.parts)
    for p in manifest.parts:
        path = folder / p.name
        if path.is_symlink():
            return f"{p.name} is a symbolic link: the suite reads no part through one"
        if not path.is_file():
            return f"{p.name} is missing (the call that wrote it returned {n} parts)"
        size = path.stat().st_size
        if size != p.bytes:
            return f"{p.name} has {size:,} bytes, its manifest {p.bytes:,} (cut short?)"
        h = hashlib.sha256()
        with open_regular(path) as f:  # never through a link (nor below)
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(block)
                whole.update(block)
        if h.hexdigest() != p.sha256:
            return f"{p.name} fails its SHA-256 check (altered or damaged on the way)"
    total = sum(p.bytes for p in manifest.parts)
    if total != manifest.bytes or whole.hexdigest() != manifest.sha256:
        return "the parts, each sound, do not make up the checkpoint their manifest describes"

    def write(out) -> None:
        for p in manifest.parts:
            with open_regular(folder / p.name) as f:
                shutil.copyfileobj(f, out)

    atomic_write(dest, write, binary=True)
    return None


def this_machine(smoke: bool) -> dict[str, Any]:
    """This machine as a compile cache's record names it, for the device the reference
    trains on (the GPU; the CPU in --smoke)."""
    import torch

    from vat.train.compile_cache import machine_record

    gpu = not smoke and torch.cuda.is_available()
    return machine_record(torch.device("cuda" if gpu else "cpu"))


def pack_compile_cache(run_dir: Path, folder: Path) -> tuple[CompileCachePack | None, str | None]:
    """RUN_DIR's compile cache and its record as FOLDER/CACHE_PACK (atomically): (its
    manifest, None); (None, None) when the run has none (not compiled, or compile_cache off);
    (None, why) when it is not carried (a line for the report). A pack of an earlier launch
    that is not replaced is removed: it would describe another cache."""
    from vat.train.compile_cache import CACHE_FILE, MATCHED, RECORD_FILE, read_record

    bin_, rec = run_dir / CACHE_FILE, run_dir / RECORD_FILE
    if not all(p.is_file() and not p.is_symlink() for p in (bin_, rec)):
        (folder / CACHE_PACK).unlink(missing_ok=True)
        return None, None
    record, why = read_record(run_dir)
    if record is None:
        (folder / CACHE_PACK).unlink(missing_ok=True)
        return None, f"its compile cache is not carried: {why}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tf:
        for path in (bin_, rec):
            data = path.read_bytes()
            info = tarfile.TarInfo(path.name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    if len(data) > CACHE_PACK_BYTES:
        (folder / CACHE_PACK).unlink(missing_ok=True)
        return None, (
            f"its compile cache ({len(data) / 2**20:.1f} MiB) is over the "
            f"{CACHE_PACK_BYTES / 2**20:.0f} MiB a returned file may hold: not carried (the "
            "next machine compiles afresh)"
        )
    atomic_write(folder / CACHE_PACK, lambda out: out.write(data), binary=True)
    return CompileCachePack(
        file=CACHE_PACK,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        record=CacheRecord(**{k: record.get(k) for k in MATCHED}),
    ), None


def restore_compile_cache(
    folder: Path,
    manifest: CompileCachePack | None,
    run_dir: Path,
    here: dict[str, Any],
    trusted: bool,
) -> tuple[bool, str | None]:
    """The pack `manifest` names, from `folder`, unpacked into `run_dir` (each file
    atomically) when `trusted` (--trust-compile-cache: the cache is code that torch runs),
    its size and SHA-256 are the manifest's, its record names this machine (`here`) and it
    holds what pack_compile_cache packs, within CACHE_UNPACKED_BYTES. (Whether it was
    unpacked, what happened: a line for the report, None when no cache travelled.)"""
    from vat.train.compile_cache import CACHE_FILE, RECORD_FILE, mismatch

    if not manifest:
        return False, None
    if not trusted:
        return False, (
            f"its compile cache {manifest.file} is code that torch runs and was not used: "
            "compiled afresh (--trust-compile-cache uses it, for files your own earlier call "
            "returned)"
        )
    why = mismatch(schema.write(manifest.record), here)
    if why is not None:
        return False, f"its compile cache is not for this machine ({why}): compiled afresh"
    try:
        with open_regular(folder / manifest.file) as f:
            size = os.fstat(f.fileno()).st_size  # before reading: no more than a file returns
            if size != manifest.bytes or size > CACHE_PACK_BYTES or sha256_of(f) != manifest.sha256:
                return False, (
                    f"its compile cache {manifest.file} fails its size or SHA-256 check (altered "
                    "or damaged on the way): compiled afresh"
                )
            with read_tar(f, True, CACHE_UNPACKED_BYTES, 2) as (members, tf):
                names = [m.name for m in members if m.isfile()]
                if names != [CACHE_FILE, RECORD_FILE]:  # what pack_compile_cache writes
                    raise TarRefused(f"it holds {names}, not {CACHE_FILE} and its record")
                # streamed into place under the suite's names (never the tar's), the record
                # last: it vouches for the file
                for m, name in zip(tf, (CACHE_FILE, RECORD_FILE)):
                    src = tf.extractfile(m)
                    atomic_write(run_dir / name, lambda out, s=src: shutil.copyfileobj(s, out),
                                 binary=True)  # fmt: skip
    except FileNotFoundError:
        return False, f"its compile cache {manifest.file} did not come back: compiled afresh"
    except (OSError, EOFError, zlib.error, tarfile.TarError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return False, f"its compile cache {manifest.file} is not unpacked ({why}): compiled afresh"
    rec = manifest.record
    return True, (
        f"its compile cache came back ({members[0].size / 2**20:.1f} MiB, saved on "
        f"{rec.device}, torch {rec.torch}): the launch reads its compiled step"
    )
