"""Reading sentences from text files (plain or .gz) or a `datasets` dataset, in chunks, by one
decoding rule (docs/cli.md, "How vat reads text")."""

from __future__ import annotations

import codecs
import glob
import gzip
import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from vat.errors import VatError
from vat.io import regular_file

if TYPE_CHECKING:  # numpy is imported where it is used: `vat --help` reads this module
    import numpy as np

CHUNK_BYTES = 1 << 20  # read ~1 MB of text at a time (~10,000 sentences)
HUB_CHUNK = 10_000  # rows of a `datasets` table per chunk


def expand_files(patterns: Sequence[str], option: str) -> list[Path]:
    """Expand globs; every pattern must match at least one regular file."""
    files: list[Path] = []
    for pat in patterns:
        pat = os.path.expanduser(pat)
        matches = sorted(glob.glob(pat)) if glob.has_magic(pat) else [pat]
        if not matches:
            raise VatError(f"{option}: no file matches {pat!r}")
        for m in matches:
            p = Path(m)
            try:
                is_dir = p.is_dir()
            except OSError:  # a name too long for the system, ...: regular_file says it in one line
                regular_file(p, option)
                raise
            if is_dir:
                raise VatError(
                    f"{option}: {p} is a directory, expected a text file "
                    "(one sentence per line, plain or .gz)"
                )
            if not p.exists() and not p.is_symlink():
                raise VatError(f"{option}: file {p} does not exist")
            files.append(regular_file(p, option))  # not a FIFO, a device or a symlink loop
    return files


def open_sentence_file(path: Path):
    """A sentence file opened for reading bytes, gzip-decompressed when its name ends in .gz."""
    return gzip.open(path, "rb") if Path(path).suffix == ".gz" else open(path, "rb")


MAX_LINE_BYTES = 1 << 20  # far more than any model reads: a line without an end is bounded

_READ_BYTES = 1 << 16  # what one read of a file or a pipe asks for


def bounded_lines(
    f, max_line_bytes: int = MAX_LINE_BYTES, where: str | None = None
) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line end) of each line of the binary file `f`, as they
    arrive; a longer line than `max_line_bytes` is cut at a character's start, the rest
    skipped. The first bytes go through `check_text`."""
    # read1 returns what has arrived (at most one read of the pipe) instead of waiting for
    # a whole buffer, so a slow writer's first lines are scored without waiting for more
    read = getattr(f, "read1", f.read)
    where = getattr(f, "name", "the input") if where is None else where
    line, number, cut, head = bytearray(), 0, False, 0
    while chunk := read(_READ_BYTES):
        if head < 8192:
            check_text(chunk[: 8192 - head], where, start=head == 0)
            head += len(chunk)
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end < 0 else end
            if not cut:
                room = max_line_bytes - len(line)
                line += chunk[start : min(stop, start + room)]
                if stop - start > room:  # this line is longer than the bound: hand it on now
                    cut = True
                    number += 1
                    yield number, _whole_characters(_text_bytes(line, number))
            if end < 0:
                break
            if not cut:
                number += 1
                yield number, _text_bytes(line, number)
            line.clear()
            cut = False
            start = end + 1
    if line and not cut:  # a last line without a final newline
        yield number + 1, _text_bytes(line, number + 1)


def _text_bytes(line: bytearray, number: int) -> bytes:
    """A line without the `\\r` of a `\\r\\n` end, the first without a UTF-8 byte-order mark."""
    if line.endswith(b"\r"):
        del line[-1]
    if number == 1 and line.startswith(codecs.BOM_UTF8):
        del line[: len(codecs.BOM_UTF8)]
    return bytes(line)


def _whole_characters(data: bytes) -> bytes:
    """`data` without a UTF-8 character cut at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: ASCII or a character's start
            size = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return data[:-back] if byte >= 0xC0 and size > back else data
    return data


# byte-order marks of the encodings vat does not read (UTF-32's first: FF FE 00 00 starts
# with UTF-16's FF FE)
_OTHER_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def check_text(head: bytes, where: object, start: bool = True) -> None:
    """A UTF-16/32 byte-order mark or a NUL in the first 8 KB is a VatError naming `where`."""
    for bom, encoding in _OTHER_BOMS if start else ():
        if head.startswith(bom):
            raise VatError(
                f"{where} is {encoding} text (it starts with a {encoding} byte-order mark), "
                f"expected UTF-8: convert it first, e.g. iconv -f {encoding} -t UTF-8"
            )
    if b"\x00" in head[:8192]:
        raise VatError(
            f"{where} looks like a binary file (NUL bytes; or UTF-16/UTF-32 text without a "
            "byte-order mark), expected UTF-8 text"
        )


def warn_skipped(where: object, bad: int) -> None:
    """The one warning for skipped lines: printed (warnings.warn says it once per place)."""
    if not bad:
        return
    # Lightning takes seconds to import: only when there is something to say
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    if getattr(rank_zero_only, "rank", 0) == 0:
        lines = "line" if bad == 1 else "lines"
        print(
            f"warning: {where}: skipped {bad} {lines} with bytes that are not UTF-8",
            file=sys.stderr,
        )


def decode_each(
    raw: Sequence[bytes],
    first_line: int,
    where: object,
    on_bad_bytes: Literal["skip", "error"],
    skip_hint: str = "set data.on_bad_bytes: skip to skip such lines",
) -> tuple[list[str], int]:
    """(the UTF-8 lines of `raw`, how many were not); "error": a VatError naming `where`:LINE."""
    out, bad = [], 0
    for i, line in enumerate(raw, first_line):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            if on_bad_bytes == "error":
                raise VatError(f"{where}:{i}: bytes that are not UTF-8 ({skip_hint})") from None
            bad += 1
    return out, bad


class LineReader:
    """Chunks of non-empty stripped lines of one text file; bad lines counted in `bad`."""

    def __init__(self, path: Path, on_bad_bytes: Literal["skip", "error"] = "skip") -> None:
        self.path, self.on_bad_bytes, self.bad = path, on_bad_bytes, 0

    def __iter__(self) -> Iterator[list[str]]:
        path = self.path
        lineno = 0
        try:
            with open_sentence_file(path) as f:
                head = f.read(8192)
                check_text(head, path)
                f.seek(len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0)
                while raw := f.readlines(CHUNK_BYTES):
                    try:
                        # Fast path: the whole chunk decodes; one split, no per-line decode.
                        text = b"".join(raw).decode("utf-8").split("\n")
                    except UnicodeDecodeError:
                        text, bad = decode_each(raw, lineno + 1, path, self.on_bad_bytes)
                        self.bad += bad
                    lineno += len(raw)
                    chunk = [s for s in (t.strip() for t in text) if s]
                    if chunk:
                        yield chunk
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise VatError(f"{path} is a truncated or corrupt gzip file ({e})") from None


def read_lines(
    path: Path, on_bad_bytes: Literal["skip", "error"] = "skip"
) -> tuple[list[str], int]:
    """All non-empty stripped lines of a small file and how many were skipped as not UTF-8."""
    reader = LineReader(Path(path), on_bad_bytes)
    lines = [s for chunk in reader for s in chunk]
    return lines, reader.bad


def iter_files(
    paths: Sequence[Path], on_bad_bytes: Literal["skip", "error"], option: str
) -> Iterator[list[str]]:
    """Chunks of sentences of several files, in order; an empty file is an error."""
    for p in paths:
        reader = LineReader(p, on_bad_bytes)
        got = 0
        for chunk in reader:
            got += len(chunk)
            yield chunk
        warn_skipped(p, reader.bad)
        if not got:
            raise VatError(f"{option}: {p} has no non-empty lines, expected one sentence per line")


def iter_hub(name: str, config: str | None, split: str, text_field: str) -> Iterator[list[str]]:
    """Chunks of sentences of a `datasets` split; `text_field` may be dotted ("translation.en")."""
    import datasets

    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # datasets raises many types (connection, FileNotFound, ValueError)
        first = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        raise VatError(
            f"data.hf_dataset: could not load {name!r} (config {config!r}, "
            f"split {split!r}): {first}"
        ) from None
    head, *rest = text_field.split(".")
    if head not in ds.column_names:
        raise VatError(
            f"data.hf_text_field: {name} has no column {head!r} (columns: {ds.column_names})"
        )
    column = ds.select_columns([head])
    for start in range(0, len(column), HUB_CHUNK):
        values = column[start : start + HUB_CHUNK][head]
        for key in rest:
            values = [v[key] for v in values]
        chunk = [s for s in (str(v).strip() for v in values) if s]
        if chunk:
            yield chunk


def limit_lines(chunks: Iterator[list[str]], limit: int | None) -> Iterator[list[str]]:
    if limit is None:
        yield from chunks
        return
    left = limit
    for chunk in chunks:
        if left <= 0:
            return
        yield chunk[:left]
        left -= len(chunk)


def held_out_indices(n: int, fraction: float, seed: int) -> np.ndarray:
    """Sorted indices of the `fraction` of n lines held out for validation (at least one)."""
    import numpy as np

    n_val = min(n - 1, max(1, int(round(fraction * n))))
    if n_val < 1:
        raise VatError(
            f"data.val_fraction: {n} training line(s) are too few to hold out a "
            "validation set; give data.val_files instead"
        )
    return np.sort(np.random.default_rng(seed).choice(n, n_val, replace=False))


def split_held_out(
    chunks: Iterator[list[str]], val_idx: np.ndarray
) -> Iterator[tuple[list[str], list[str]]]:
    """(train, val) parts of each chunk, given the sorted global indices of held-out lines."""
    import numpy as np

    start = 0
    for chunk in chunks:
        lo, hi = np.searchsorted(val_idx, [start, start + len(chunk)])
        held = set((val_idx[lo:hi] - start).tolist())
        start += len(chunk)
        yield (
            [s for i, s in enumerate(chunk) if i not in held],
            [s for i, s in enumerate(chunk) if i in held],
        )
