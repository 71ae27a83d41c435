"""Which sentences geometry is measured on: STS12's, as in the paper, or any text file."""

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


def sts12_files(senteval_dir: str | os.PathLike) -> list[Path]:
    """The STS12 input files under a SentEval `data/downstream` folder, sorted."""
    root = Path(senteval_dir).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(errno.ENOENT, "SentEval folder does not exist", str(root))
    folder = root / "STS" / "STS12-en-test"
    files = sorted(folder.glob("STS.input.*.txt"))
    if not files:
        raise FileNotFoundError(
            errno.ENOENT, "no STS12 files (expected STS/STS12-en-test/STS.input.*.txt)", str(folder)
        )
    return files


def iter_lines(path: str | os.PathLike, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[str]:
    """The non-empty stripped lines of a text file (plain or .gz), read lazily, each kept to its
    first `max_line_bytes`; bad UTF-8 or gzip is a VatError naming the file."""
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
    """Sentences of a text file: one per line, or per tab-separated field (STS input files)."""
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
    """The probe set from a text file or a SentEval folder's STS12; `deduplicate` keeps each
    sentence once (copies would inflate self-similarity), in first-occurrence order."""
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
