"""The data module's caches: checking the cache folder, saving the trained tokenizer, and
tokenizing every split into the memory-mapped token cache (`vat.data.token_cache`).

`VATDataModule` (vat.data.datamodule) decides what to read and where the caches live; the functions
here do the writing, atomically, with one-line errors naming data.cache_dir.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_warn

from vat.data.token_cache import (
    SplitWriter,
    encode_chunks,
    remove,
    token_dtype,
    write_done,
)
from vat.errors import VatError
from vat.io import remove_stale_temps, temp_path
from vat.tokenizer import VATTokenizer


def hash16(text: str) -> str:
    """The first 16 hex digits of text's SHA-256 (the cache keys)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_cached_tokenizer(path: Path) -> VATTokenizer | None:
    """The tokenizer cached at `path`; None when absent or damaged (it is then trained again
    rather than failing the run)."""
    if not path.is_file():
        return None
    try:
        return VATTokenizer.from_file(path)
    except Exception as e:
        rank_zero_warn(
            f"vat: the cached tokenizer {path} is damaged ({str(e)[:80]}); training it again"
        )
        return None


def check_cache_dir(d: Path, write: bool) -> None:
    """One-line errors for an unusable data.cache_dir (read-only, a symlink loop, a file)."""
    try:
        os.stat(d)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise VatError(f"data.cache_dir: cannot use {d}: {e.strerror}") from None
    if not write:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError as e:
        raise VatError(
            f"data.cache_dir: {d} is not a writable folder ({e.strerror or e})"
        ) from None
    remove_stale_temps(d)


def save_tokenizer(tok: VATTokenizer, path: Path) -> None:
    """Write the trained tokenizer to the cache file `path`, atomically."""
    tmp = temp_path(path)
    try:
        tok.save(tmp)
        os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
    except Exception as e:  # tokenizers raises a plain Exception for I/O errors
        raise VatError(f"data.cache_dir: could not write {path} ({str(e)[:120]})") from None
    finally:
        remove(tmp) if tmp.exists() else None


def progress_bar(name: str, enabled: bool):
    """The tqdm bar of tokenizing split `name` (disabled unless `enabled`)."""
    from tqdm.auto import tqdm

    return tqdm(
        desc=f"vat: tokenizing {name}",
        unit=" lines",
        unit_scale=True,
        disable=not enabled,
        leave=False,
    )


def write_token_cache(
    cache: Path,
    tok: VATTokenizer,
    names: list[str],
    held_out: bool,
    train_val_chunks: Callable[[], Iterator[tuple[list[str], list[str]]]],
    split_chunks: Callable[[str], Iterator[list[str]]],
    *,
    max_len: int,
    overlength: str,
    num_proc: int,
    progress: bool,
) -> None:
    """Tokenize the splits `names` into the cache folder `cache`, atomically.

    `train_val_chunks()` yields the (train, held-out val) parts of each training chunk
    (val is split off the training data when `held_out`); `split_chunks(name)` yields the
    raw sentence chunks of any other split.
    """
    tmp = temp_path(cache)
    remove(tmp)
    dtype = token_dtype(tok.vocab_size)
    try:
        tmp.mkdir()
        writers = {n: SplitWriter(tmp / n, dtype, max_len, overlength) for n in names}
        n_train: deque[int] = deque()  # train lines of each chunk in flight, in order

        def train_chunks() -> Iterator[list[str]]:
            for train, val in train_val_chunks():
                n_train.append(len(train))
                yield train + val

        with progress_bar("train + val" if held_out else "train", progress) as bar:
            for chunk, ids in encode_chunks(train_chunks(), tok, num_proc):
                k = n_train.popleft()
                writers["train"].add(ids[:k])
                if held_out:
                    writers["val"].add(ids[k:])
                bar.update(len(chunk))
        for name in names:
            if name == "train" or (name == "val" and held_out):
                continue
            with progress_bar(name, progress) as bar:
                for chunk, ids in encode_chunks(split_chunks(name), tok, num_proc):
                    writers[name].add(ids)
                    bar.update(len(chunk))
        write_done(
            tmp,
            {n: w.close() for n, w in writers.items()},
            dtype,
            max_len=max_len,
            overlength=overlength,
        )
        try:
            os.replace(tmp, cache)
        except OSError:  # another process finished first: keep theirs
            pass
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise VatError(
                f"data.cache_dir: no space left on the device while writing {cache}"
            ) from None
        raise VatError(f"data.cache_dir: could not write {cache} ({e.strerror or e})") from None
    finally:
        remove(tmp)  # never leave a partial folder behind (e.g. after a full disk)
