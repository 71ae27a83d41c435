"""Probe sets for the geometry measurements: which sentences, read from where.

The paper (Ferner & Wegenkittl 2022), "Latent-space measurements": STS12's sentences, from a
SentEval data/downstream folder (`$VAT_SENTEVAL_DIR`, default ../shared/data/senteval:
vat.data.paths), or any text file. Kept apart from `vat.geometry.metrics`, which is maths
only. Used by the geometry callbacks, `vat geometry` and the sweep.
"""

from __future__ import annotations

import errno
import gzip
import itertools
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from vat.data.corpus import MAX_LINE_BYTES, bounded_lines, open_sentence_file
from vat.errors import VatError
from vat.io import regular_file

STS12_DIR = ("STS", "STS12-en-test")
"""Where SentEval's downstream layout keeps STS12 (STS.input.*.txt: two sentences a line)."""


def sts12_files(senteval_dir: str | os.PathLike) -> list[Path]:
    """The STS12 input files under a SentEval `data/downstream` folder, sorted by name."""
    root = Path(senteval_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(errno.ENOENT, "SentEval folder does not exist", str(root))
    folder = root.joinpath(*STS12_DIR)
    files = sorted(folder.glob("STS.input.*.txt"))
    if not files:
        raise FileNotFoundError(
            errno.ENOENT, "no STS12 files (expected STS/STS12-en-test/STS.input.*.txt)", str(folder)
        )
    return files


def iter_lines(path: str | os.PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The non-empty stripped lines of a text file (plain or .gz), read one at a time and
    each kept to its first `max_line_bytes`: a reader that wants the first N holds N lines,
    not the file. A line that is not UTF-8 or a damaged gzip file is one VatError naming
    the file (and the line)."""
    path = Path(path).expanduser()
    try:
        with open_sentence_file(path) as f:
            for number, raw in bounded_lines(f, max_line_bytes):  # a cut line ends whole
                try:
                    line = raw.decode("utf-8").strip()
                except UnicodeDecodeError:
                    raise VatError(
                        f"{path}:{number}: bytes that are not UTF-8 (expected UTF-8 text, "
                        "one sentence per line)"
                    ) from None
                if line:
                    yield line
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise VatError(f"{path} is a truncated or corrupt gzip file ({e})") from None


def iter_sentences(path: str | os.PathLike) -> Iterator[str]:
    """Sentences of a text file (plain or .gz): one per line; a tab-separated line gives one
    per field (so STS input files, two sentences a line, read as they are). Blank fields are
    skipped."""
    for line in iter_lines(path):
        yield from (f.strip() for f in line.split("\t") if f.strip())


def _first_occurrences(items: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item


def load_probe_sentences(
    probe_file: str | os.PathLike | None = None,
    senteval_dir: str | os.PathLike | None = None,
    max_sentences: int | None = None,
    deduplicate: bool = True,
) -> list[str]:
    """The probe set the geometry is measured on: a text file, or STS12 from a SentEval folder.

    The paper ("Latent-space measurements") measures on STS12's sentences, as
    Ethayarajh (2019) does on STS 2012-2016. STS12 repeats sentences; with `deduplicate`
    (default) each is kept once, because a deterministic encoder maps the copies to identical
    vectors, and their pairs would inflate self-similarity with "different contexts" that are
    the same context. Order is kept (first occurrence), so `max_sentences` takes a fixed prefix.
    """
    if (probe_file is None) == (senteval_dir is None):
        raise ValueError("give exactly one of a probe file or a SentEval folder")
    if max_sentences is not None and max_sentences < 1:
        raise ValueError(f"max_sentences must be >= 1, got {max_sentences}")
    if probe_file is not None:
        if Path(probe_file).exists() or Path(probe_file).is_symlink():
            regular_file(probe_file, "--probe")  # not a folder, a FIFO, a device or a loop
        files = [Path(probe_file)]
    else:
        files = sts12_files(senteval_dir)
    stream = (s for f in files for s in iter_sentences(f))
    if deduplicate:
        stream = _first_occurrences(stream)
    # read only as far as the sentences asked for: a large probe file is not held whole
    sentences = list(itertools.islice(stream, max_sentences))
    if len(sentences) < 2:
        where = probe_file if probe_file is not None else senteval_dir
        raise ValueError(f"probe {where} has {len(sentences)} sentence(s); need at least 2")
    return sentences
