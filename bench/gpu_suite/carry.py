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
checksums instead of being joined into the wrong checkpoint."""

from __future__ import annotations

import hashlib
import math
import re
import shutil
from pathlib import Path
from typing import Any

from bench.gpu_suite.call import MAX_OUT_FILE
from vat.io import atomic_write

PART_PREFIX = "reference.ckpt.part"
PART_RE = re.compile(re.escape(PART_PREFIX) + r"[1-9][0-9]{0,2}")
"""A part's name: numbered from 1 (the schema refuses any other name in a manifest, so that a
hand-edited report cannot make the suite read or write outside OUT_DIR)."""
PART_BYTES = MAX_OUT_FILE


def part_files(folder: Path) -> list[Path]:
    """The checkpoint parts in `folder`, in order."""
    found = [p for p in folder.glob(PART_PREFIX + "*") if PART_RE.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name[len(PART_PREFIX) :]))


def remove_parts(folder: Path) -> None:
    for p in part_files(folder):
        p.unlink(missing_ok=True)


def split(ckpt: Path, folder: Path, step: int) -> dict[str, Any]:
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
            parts.append(
                {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            )
    for stale in part_files(folder)[len(parts) :]:
        stale.unlink(missing_ok=True)
    return {
        "file": ckpt.name,
        "step": int(step),
        "bytes": total,
        "sha256": whole.hexdigest(),
        "parts": parts,
    }


def join(folder: Path, manifest: dict[str, Any], dest: Path) -> str | None:
    """Join the parts `manifest` names from `folder` into `dest` (atomically), each part and
    the whole checked against the manifest first. None when joined, else why not (a line for
    the report); `dest` is then left as it was."""
    whole = hashlib.sha256()
    n = len(manifest["parts"])
    for p in manifest["parts"]:
        path = folder / p["name"]
        if not path.is_file():
            return f"{p['name']} is missing (the call that wrote it returned {n} parts)"
        size = path.stat().st_size
        if size != p["bytes"]:
            return f"{p['name']} has {size:,} bytes, its manifest {p['bytes']:,} (cut short?)"
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                h.update(block)
                whole.update(block)
        if h.hexdigest() != p["sha256"]:
            return f"{p['name']} fails its SHA-256 check (altered or damaged on the way)"
    total = sum(p["bytes"] for p in manifest["parts"])
    if total != manifest["bytes"] or whole.hexdigest() != manifest["sha256"]:
        return "the parts, each sound, do not make up the checkpoint their manifest describes"

    def write(out) -> None:
        for p in manifest["parts"]:
            with open(folder / p["name"], "rb") as f:
                shutil.copyfileobj(f, out)

    atomic_write(dest, write, binary=True)
    return None
