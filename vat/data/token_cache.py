"""The tokenized cache (per split a flat token array and offsets, memory-mapped, checked by
size and CRC-32) and its atomic writer."""

from __future__ import annotations

import errno
import hashlib
import itertools
import json
import os
import shutil
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from vat.data.sampler import collate_ids
from vat.errors import VatError
from vat.io import temp_path
from vat.tokenizer import VATTokenizer

FORMAT = "vat-tokens-v2"
_READ = 1 << 24


class CacheDamaged(Exception):
    """A cache folder that is incomplete or corrupt; the message says what is wrong."""


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class SplitWriter:
    """Appends tokenized chunks of one split to its files; truncates or drops long ones."""

    FILES = ("tokens.bin", "offsets.bin")

    def __init__(self, folder: Path, dtype: np.dtype, max_len: int, overlength: str) -> None:
        folder.mkdir(parents=True)
        self.folder, self.dtype, self.cap, self.overlength = folder, dtype, max_len - 1, overlength
        self._files = {name: open(folder / name, "wb") for name in self.FILES}
        self.crc = dict.fromkeys(self._files, 0)
        self.total = self.lines = self.over = self.kept = 0
        self._write("offsets.bin", np.zeros(1, np.int64))

    def _write(self, name: str, array: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(array)).cast("B")
        self._files[name].write(data)
        self.crc[name] = zlib.crc32(data, self.crc[name])

    def add(self, ids: list[list[int]]) -> None:
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        long = lengths > self.cap
        self.lines += len(ids)
        self.over += int(long.sum())
        if long.any():
            if self.overlength == "filter":
                ids = list(itertools.compress(ids, ~long))
                lengths = lengths[~long]
            else:
                ids = [x[: self.cap] for x in ids]
                lengths = np.minimum(lengths, self.cap)
        if not len(ids):
            return
        flat = np.fromiter(itertools.chain.from_iterable(ids), self.dtype, count=int(lengths.sum()))
        ends = self.total + np.cumsum(lengths)
        self._write("tokens.bin", flat)
        self._write("offsets.bin", ends)
        self.total = int(ends[-1])
        self.kept += len(ids)

    def close(self) -> dict:
        """Flush to disk; the split's stats and its file records for done.json."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        files = {
            name: {"size": (self.folder / name).stat().st_size, "crc32": self.crc[name]}
            for name in self._files
        }
        stats = {"lines": self.lines, "overlength": self.over, "kept": self.kept}
        return {"stats": stats, "files": files}


def write_done(folder: Path, splits: dict[str, dict], dtype: np.dtype, **extra) -> None:
    info = {
        "format": FORMAT,
        "dtype": dtype.name,
        **extra,
        "stats": {k: v["stats"] for k, v in splits.items()},
        "files": {
            f"{k}/{name}": rec for k, v in splits.items() for name, rec in v["files"].items()
        },
    }
    with open(folder / "done.json", "w") as f:
        json.dump(info, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(_READ):
            crc = zlib.crc32(block, crc)
    return crc


def _check_layout(info: dict) -> None:
    """A split name leading out of the folder or a bad file record is damage, never read."""
    stats, files = info.get("stats"), info["files"]
    if not isinstance(stats, dict) or not isinstance(files, dict) or "train" not in stats:
        raise CacheDamaged("done.json does not list the splits and their files")
    for split in stats:
        if not isinstance(split, str) or not split.isidentifier():
            raise CacheDamaged(f"done.json names a split {split!r:.40} that vat never writes")
    if set(files) != {f"{split}/{name}" for split in stats for name in SplitWriter.FILES}:
        raise CacheDamaged("done.json's files are not the two files of each split")
    for rec in files.values():
        if not (
            isinstance(rec, dict) and type(rec.get("size")) is int and type(rec.get("crc32")) is int
        ):
            raise CacheDamaged("done.json has a file record without its size and CRC-32")


def verify(folder: Path, max_len: int) -> dict:
    """done.json of a complete, intact cache folder; `CacheDamaged` saying what is wrong."""
    done = folder / "done.json"
    if not done.is_file():
        raise CacheDamaged("done.json is missing (an interrupted or older write)")
    try:
        info = json.loads(done.read_text())
        files, dtype = info["files"], np.dtype(info["dtype"])
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise CacheDamaged(f"done.json is unreadable ({type(e).__name__})") from None
    if info.get("format") != FORMAT:
        raise CacheDamaged(f"format {info.get('format')!r} is not {FORMAT!r}")
    _check_layout(info)
    for name, rec in files.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():  # vat writes no links into its cache
            raise CacheDamaged(f"{name} is missing (or a link)")
        if path.stat().st_size != rec["size"]:
            raise CacheDamaged(f"{name} has {path.stat().st_size} bytes, expected {rec['size']}")
        if _crc32(path) != rec["crc32"]:
            raise CacheDamaged(f"{name} fails its CRC-32 check (damaged bytes)")
    for split in info["stats"]:
        offsets = np.fromfile(folder / split / "offsets.bin", dtype=np.int64)
        n_tokens = (folder / split / "tokens.bin").stat().st_size // dtype.itemsize
        steps = np.diff(offsets)
        if offsets[0] != 0 or offsets[-1] != n_tokens or ((steps < 0) | (steps >= max_len)).any():
            raise CacheDamaged(f"{split}/offsets.bin is inconsistent with tokens.bin")
    return info


def remove_damaged(cache: Path, why: object) -> None:
    """Remove a damaged cache folder; a link or file under its name is the user's: refused."""
    if cache.is_symlink() or not cache.is_dir():
        kind = "a symbolic link" if cache.is_symlink() else "not a folder"
        raise VatError(
            f"data.cache_dir: the tokenized cache {cache} is damaged ({why}) and is {kind}, "
            "which vat did not write and does not remove: remove it to rebuild the cache"
        )
    remove(cache)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class TokenizedDataset(Dataset):
    """One split of the cache; `__getitems__` returns a whole padded batch. The arrays are not
    pickled: each worker maps its own."""

    def __init__(self, folder: Path, dtype: str, max_len: int, pad_multiple: int = 1) -> None:
        self.folder, self.dtype, self.max_len = Path(folder), dtype, max_len
        self.pad_multiple = pad_multiple
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def _open(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:

            def load(name: str, dtype) -> np.ndarray:
                path = self.folder / name
                if path.stat().st_size == 0:  # mmap cannot map an empty file
                    return np.zeros(0, dtype)
                return np.memmap(path, dtype=dtype, mode="r")

            self._arrays = (load("tokens.bin", self.dtype), load("offsets.bin", np.int64))
        return self._arrays

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}

    @property
    def lengths(self) -> np.ndarray:
        """(N,) subwords per sentence, without </s>."""
        return np.diff(self._open()[1])

    @property
    def ids(self) -> TokenizedDataset:
        """The sentences as lists of ids (indexable, sliceable, iterable), read lazily."""
        return self

    def __len__(self) -> int:
        return len(self._open()[1]) - 1

    def __getitem__(self, i: int | slice) -> list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        tokens, offsets = self._open()
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return tokens[offsets[i] : offsets[i + 1]].tolist()

    def __getitems__(self, indices: Sequence[int]) -> dict:
        tokens, offsets = self._open()
        return collate_ids(tokens, offsets, indices, self.max_len, self.pad_multiple)


_WORKER_TOKENIZER = None


def init_worker(tokenizer_json: str) -> None:
    global _WORKER_TOKENIZER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker process
    _WORKER_TOKENIZER = VATTokenizer.from_str(tokenizer_json)


def encode_in_worker(chunk: list[str]) -> list[list[int]]:
    return _WORKER_TOKENIZER.encode_batch(chunk)


def encode_chunks(
    chunks: Iterator[list[str]], tok, num_proc: int
) -> Iterator[tuple[list[str], list[list[int]]]]:
    """(chunk, ids) for each chunk, in order, a bounded window in flight (not Pool.imap)."""
    if num_proc <= 1:  # the tokenizers library already encodes a batch on every core
        for chunk in chunks:
            yield chunk, tok.encode_batch(chunk)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")  # fork after tokenizers' threads is unsafe
    with ProcessPoolExecutor(
        num_proc, mp_context=ctx, initializer=init_worker, initargs=(tok.to_str(),)
    ) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append((chunk, pool.submit(encode_in_worker, chunk)))
            if len(pending) >= 2 * num_proc:
                c, fut = pending.popleft()
                yield c, fut.result()
        while pending:
            c, fut = pending.popleft()
            yield c, fut.result()


def hash16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_cached_tokenizer(path: Path) -> VATTokenizer | None:
    """The tokenizer cached at `path`; None when absent or damaged (then trained again)."""
    if not path.is_file():
        return None
    try:
        return VATTokenizer.from_file(path)
    except Exception as e:
        # imported here: this module runs in every data.num_proc worker, which needs no Lightning
        from lightning.pytorch.utilities import rank_zero_warn

        rank_zero_warn(
            f"vat: the cached tokenizer {path} is damaged ({str(e)[:80]}); training it again"
        )
        return None


def save_tokenizer(tok: VATTokenizer, path: Path) -> None:
    tmp = temp_path(path)
    try:
        tok.save(tmp)
        os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
    except Exception as e:  # tokenizers raises a plain Exception for I/O errors
        raise VatError(f"data.cache_dir: could not write {path} ({str(e)[:120]})") from None
    finally:
        tmp.unlink(missing_ok=True)


def write_token_cache(
    cache: Path,
    tok: VATTokenizer,
    train_chunks: Iterable[tuple[list[str], list[str]]],
    other_chunks: Mapping[str, Iterable[list[str]]],
    *,
    max_len: int,
    overlength: str,
    num_proc: int,
    progress: bool,
    held_out_val: bool,
) -> None:
    """Tokenize every split into the cache folder `cache`, atomically. `train_chunks` yields
    the (train, held-out val) parts of each training chunk; `other_chunks` maps every other
    split to its chunks."""
    from tqdm.auto import tqdm

    bar_args = {"unit": " lines", "unit_scale": True, "disable": not progress, "leave": False}
    names = ["train", *(["val"] if held_out_val else []), *other_chunks]
    tmp = temp_path(cache)
    remove(tmp)
    dtype = token_dtype(tok.vocab_size)
    try:
        tmp.mkdir()
        writers = {n: SplitWriter(tmp / n, dtype, max_len, overlength) for n in names}
        n_train: deque[int] = deque()  # train lines of each chunk in flight, in order

        def train_parts() -> Iterator[list[str]]:
            for train, val in train_chunks:
                n_train.append(len(train))
                yield train + val

        for name, chunks in {"train": train_parts(), **other_chunks}.items():
            shown = "train + val" if name == "train" and held_out_val else name
            with tqdm(desc=f"vat: tokenizing {shown}", **bar_args) as bar:
                for chunk, ids in encode_chunks(chunks, tok, num_proc):
                    k = n_train.popleft() if name == "train" else len(ids)
                    writers[name].add(ids[:k])
                    if k < len(ids):  # the held-out val lines of a training chunk
                        writers["val"].add(ids[k:])
                    bar.update(len(chunk))
        splits = {n: w.close() for n, w in writers.items()}
        write_done(tmp, splits, dtype, max_len=max_len, overlength=overlength)
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
