"""Data: text files or a Hugging Face hub dataset -> tokenizer -> tokenized cache -> buckets.

`VATDataModule` reads local text files (plain or .gz, one sentence per line, several files
or globs) or a hub dataset through `datasets`, trains the tokenizer once (or loads it from a
file), tokenizes once with `datasets.map` (batched, several processes) and caches the result
on disk keyed by the tokenizer and the input files, so a second run starts at once. Training
batches come from `BucketBatchSampler`, which groups sentences of similar length.

Under DDP, `prepare_data` (local rank 0 only) does the expensive work and writes every cache
file atomically; `setup` on every rank only reads the caches.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import math
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset, Sampler

from vat.errors import VatError
from vat.tokenizer import VATTokenizer, make_batch

# --------------------------------------------------------------------------------------
# Reading text


def expand_files(patterns: Sequence[str], option: str) -> list[Path]:
    """Expand globs; every pattern must match at least one regular file."""
    files: list[Path] = []
    for pat in patterns:
        matches = sorted(glob.glob(os.path.expanduser(pat))) if glob.has_magic(pat) else [os.path.expanduser(pat)]
        if not matches:
            raise VatError(f"{option}: no file matches {pat!r}")
        for m in matches:
            p = Path(m)
            if p.is_dir():
                raise VatError(f"{option}: {p} is a directory, expected a text file (one sentence per line, plain or .gz)")
            if not p.is_file():
                raise VatError(f"{option}: file {p} does not exist")
            files.append(p)
    return files


def read_lines(path: Path, on_bad_bytes: Literal["skip", "error"] = "skip") -> tuple[list[str], int]:
    """Non-empty stripped lines of a UTF-8 text file (plain or gzip) and the number of lines
    skipped for undecodable bytes. With on_bad_bytes="error" such a line is an error instead."""
    opener = gzip.open if path.suffix == ".gz" else open
    lines: list[str] = []
    bad = 0
    try:
        with opener(path, "rb") as f:
            head = f.read(8192)
            if b"\x00" in head:
                raise VatError(f"{path} looks like a binary file (NUL bytes), expected UTF-8 text, one sentence per line")
            f.seek(0)
            for lineno, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    if on_bad_bytes == "error":
                        raise VatError(f"{path}:{lineno}: bytes that are not UTF-8 (set data.on_bad_bytes: skip to skip such lines)") from None
                    bad += 1
                    continue
                text = text.strip()
                if text:
                    lines.append(text)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise VatError(f"{path} is a truncated or corrupt gzip file ({e})") from None
    return lines, bad


def read_corpus(paths: Sequence[Path], on_bad_bytes: Literal["skip", "error"], option: str) -> list[str]:
    lines: list[str] = []
    for p in paths:
        got, bad = read_lines(p, on_bad_bytes)
        if bad:
            rank_zero_warn(f"{p}: skipped {bad} lines with bytes that are not UTF-8")
        if not got:
            raise VatError(f"{option}: {p} has no non-empty lines, expected one sentence per line")
        lines.extend(got)
    return lines


def read_hub(name: str, config: str | None, split: str, text_field: str) -> list[str]:
    """Sentences of a `datasets` dataset (hub name or local dataset folder); `text_field` may
    be dotted, e.g. "translation.en" for WMT19 de-en."""
    import datasets

    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # datasets raises many types (connection, FileNotFound, ValueError)
        raise VatError(f"data.hf_dataset: could not load {name!r} (config {config!r}, split {split!r}): {str(e).splitlines()[0]}") from None
    head, *rest = text_field.split(".")
    if head not in ds.column_names:
        raise VatError(f"data.hf_text_field: {name} has no column {head!r} (columns: {ds.column_names})")
    out = []
    for value in ds[head]:
        for key in rest:
            value = value[key]
        value = str(value).strip()
        if value:
            out.append(value)
    return out


# --------------------------------------------------------------------------------------
# Batching


class TokenizedDataset(Dataset):
    """Subword id lists; items are lists of ints, collated by `make_batch`."""

    def __init__(self, ids: list[list[int]]) -> None:
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> list[int]:
        return self.ids[i]


class BucketBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches that shuffle, resume mid-epoch, and shard under DDP.

    Each epoch: shuffle all indices with a generator seeded by (seed, epoch); cut them into
    pools of `pool_batches` global batches; sort each pool by length and cut it into global
    batches of `batch_size * num_replicas` sentences; shuffle the batch order. Every rank
    builds the same list and takes its contiguous `batch_size` slice of each global batch,
    so the global batches are the same whatever the number of processes (1 process with
    batch 8 sees exactly what 2 processes with batch 4 see together), and every rank runs
    the same number of steps (a short last batch is filled up by repetition).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        pool_batches: int = 100,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if batch_size < 1:
            raise VatError(f"data.batch_size must be at least 1, got {batch_size}")
        self.lengths = np.asarray(lengths)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.pool_batches = pool_batches
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.start_batch = 0  # batches of the current epoch to skip (mid-epoch resume)

    @property
    def sampler(self) -> BucketBatchSampler:
        # Lightning calls `dataloader.batch_sampler.sampler.set_epoch(epoch)` at each epoch
        # start; exposing ourselves here is how a batch sampler receives that call.
        return self

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.start_batch = 0
        self.epoch = epoch

    def global_batches(self) -> list[np.ndarray]:
        """This epoch's global batches (index arrays), before sharding."""
        n = len(self.lengths)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(n, generator=g).numpy() if self.shuffle else np.arange(n)
        size = self.batch_size * self.num_replicas
        pool = size * self.pool_batches
        batches: list[np.ndarray] = []
        for start in range(0, n, pool):
            chunk = order[start : start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches.extend(chunk[i : i + size] for i in range(0, len(chunk), size))
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        for b in self.global_batches()[self.start_batch :]:
            if len(b) % self.num_replicas:
                b = np.resize(b, len(b) + self.num_replicas - len(b) % self.num_replicas)
            per_rank = len(b) // self.num_replicas
            yield b[self.rank * per_rank : (self.rank + 1) * per_rank].tolist()

    def __len__(self) -> int:
        size = self.batch_size * self.num_replicas
        pool = size * self.pool_batches
        n = len(self.lengths)
        # Pools may end in a short batch each, so count per pool rather than estimate. This is
        # the whole epoch's length even when resuming mid-epoch: Lightning's own batch counter
        # resumes at `start_batch` and stops at this length.
        return sum(math.ceil(min(pool, n - s) / size) for s in range(0, n, pool))


class ResumableDataLoader(DataLoader):
    """A DataLoader that Lightning checkpoints (it has state_dict/load_state_dict).

    Lightning stores the state of such loaders in the checkpoint and restores it on
    `--ckpt_path`, so a run killed mid-epoch resumes at the next unseen batch instead of
    replaying or skipping part of the epoch. The loader has a length, so Lightning's fetcher
    does not pre-fetch: every batch handed out has been trained on when a checkpoint is taken.
    """

    def __init__(self, dataset: Dataset, batch_sampler: BucketBatchSampler, **kwargs) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self._yielded = 0

    def __iter__(self):
        sampler: BucketBatchSampler = self.batch_sampler
        self._yielded = sampler.start_batch
        for batch in super().__iter__():
            self._yielded += 1
            yield batch
        sampler.start_batch = 0

    def state_dict(self) -> dict:
        return {"epoch": self.batch_sampler.epoch, "batches_consumed": self._yielded}

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.epoch = int(state["epoch"])
        self.batch_sampler.start_batch = int(state["batches_consumed"])


def collate(max_len: int):
    def _collate(batch: list[list[int]]) -> dict[str, torch.Tensor]:
        return make_batch(batch, max_len)

    return _collate


# --------------------------------------------------------------------------------------
# The DataModule


class VATDataModule(L.LightningDataModule):
    """Sentences -> tokenizer -> cached token ids -> length-bucketed batches."""

    def __init__(
        self,
        *,
        train_files: list[str] | None = None,
        val_files: list[str] | None = None,
        test_files: list[str] | None = None,
        hf_dataset: str | None = None,
        hf_config: str | None = None,
        hf_text_field: str = "text",
        hf_train_split: str = "train",
        hf_val_split: str | None = "validation",
        hf_test_split: str | None = "test",
        val_fraction: float = 0.0,
        max_train_lines: int | None = None,
        tokenizer_path: str | None = None,
        vocab_size: int = 32768,
        tokenizer_train_lines: int = 1_000_000,
        max_len: int = 128,
        overlength: Literal["truncate", "filter"] = "truncate",
        on_bad_bytes: Literal["skip", "error"] = "skip",
        batch_size: int = 128,
        pool_batches: int = 100,
        num_workers: int = 0,
        num_proc: int = 1,
        cache_dir: str = ".cache/vat",
        seed: int = 1234,
    ) -> None:
        """
        Args:
            train_files: Training text files or globs (plain or .gz, one sentence per line).
            val_files: Validation files. If unset, `val_fraction` of the training lines is held out.
            test_files: Test files for `train.py test`.
            hf_dataset: A `datasets` hub name (or local dataset folder) used instead of files,
                e.g. "wmt19" with hf_config "de-en" and hf_text_field "translation.en".
            hf_config: The hub dataset's configuration name.
            hf_text_field: Column holding the sentence; dotted for nested fields.
            hf_train_split: Hub split for training.
            hf_val_split: Hub split for validation (None: use val_fraction).
            hf_test_split: Hub split for testing (None: no test set).
            val_fraction: Fraction of training lines held out for validation when no
                validation files/split are given (chosen with `seed`).
            max_train_lines: Use only the first N training lines (quick experiments).
            tokenizer_path: A tokenizers JSON to load. If unset, byte-level BPE is trained on
                the training split (at most `tokenizer_train_lines` lines) and cached.
            vocab_size: Vocabulary size of the trained tokenizer; the model's vocabulary
                (linked to model.arch.vocab_size). Paper: 32,768.
            tokenizer_train_lines: Cap on lines used to train the tokenizer.
            max_len: Longest sequence in tokens, counting the final </s> (linked to model.arch.max_len).
            overlength: "truncate" cuts longer sentences to max_len; "filter" drops them.
                Either way the number of affected lines is logged.
            on_bad_bytes: Lines that are not valid UTF-8 are skipped and counted ("skip")
                or stop the run with the file and line number ("error").
            batch_size: Sentences per batch, per process (paper: 128).
            pool_batches: Bucketing pool size, in batches: sentences are length-sorted within
                pools of batch_size * pool_batches random sentences.
            num_workers: DataLoader worker processes.
            num_proc: Processes for tokenizing with `datasets.map`.
            cache_dir: Where the tokenizer and tokenized data are cached.
            seed: Seed for the held-out split and the batch order.
        """
        super().__init__()
        if not train_files and not hf_dataset:
            raise VatError("data: set data.train_files (text files) or data.hf_dataset (a datasets hub name)")
        if overlength not in ("truncate", "filter"):
            raise VatError(f"data.overlength must be 'truncate' or 'filter', got {overlength!r}")
        if not 0.0 <= val_fraction < 1.0:
            raise VatError(f"data.val_fraction must be in [0, 1), got {val_fraction}")
        if max_len < 2:
            raise VatError(f"data.max_len must be at least 2, got {max_len}")
        self.save_hyperparameters()
        self.tokenizer: VATTokenizer | None = None
        self.splits: dict[str, TokenizedDataset] = {}
        self.length_histogram: list[int] = []

    # -- sources --------------------------------------------------------------------------
    def _has_val(self) -> bool:
        h = self.hparams
        return bool(h.val_files) or (bool(h.hf_dataset) and h.hf_val_split is not None) or h.val_fraction > 0

    def _source_files(self) -> dict[str, list[Path]]:
        h = self.hparams
        out = {"train": expand_files(h.train_files or [], "data.train_files")}
        if h.val_files:
            out["val"] = expand_files(h.val_files, "data.val_files")
        if h.test_files:
            out["test"] = expand_files(h.test_files, "data.test_files")
        return out

    def _source_key(self) -> str:
        """Identifies the raw data: file paths, sizes and mtimes, or the hub dataset."""
        h = self.hparams
        if h.hf_dataset:
            desc: object = [h.hf_dataset, h.hf_config, h.hf_text_field, h.hf_train_split, h.hf_val_split, h.hf_test_split]
        else:
            desc = {k: [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in v] for k, v in self._source_files().items()}
        desc = [desc, h.val_fraction, h.max_train_lines, h.seed, h.on_bad_bytes]
        return hashlib.sha256(json.dumps(desc, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def _raw_splits(self) -> dict[str, list[str]]:
        h = self.hparams
        if h.hf_dataset:
            splits = {"train": read_hub(h.hf_dataset, h.hf_config, h.hf_train_split, h.hf_text_field)}
            if h.hf_val_split:
                splits["val"] = read_hub(h.hf_dataset, h.hf_config, h.hf_val_split, h.hf_text_field)
            if h.hf_test_split:
                splits["test"] = read_hub(h.hf_dataset, h.hf_config, h.hf_test_split, h.hf_text_field)
        else:
            files = self._source_files()
            splits = {k: read_corpus(v, h.on_bad_bytes, f"data.{k}_files") for k, v in files.items()}
        if h.max_train_lines:
            splits["train"] = splits["train"][: h.max_train_lines]
        if "val" not in splits and h.val_fraction > 0:
            lines = splits["train"]
            perm = np.random.default_rng(h.seed).permutation(len(lines))
            n_val = max(1, int(round(h.val_fraction * len(lines))))
            splits["val"] = [lines[i] for i in perm[:n_val]]
            splits["train"] = [lines[i] for i in sorted(perm[n_val:])]
        return splits

    # -- caches ---------------------------------------------------------------------------
    def _cache(self) -> Path:
        return Path(self.hparams.cache_dir)

    def _tokenizer_cache_path(self) -> Path:
        h = self.hparams
        key = hashlib.sha256(f"{self._source_key()}|{h.vocab_size}|{h.tokenizer_train_lines}|bpe-bytelevel-v1".encode()).hexdigest()[:16]
        return self._cache() / f"tokenizer-{key}.json"

    def _data_cache_path(self, tokenizer: VATTokenizer) -> Path:
        h = self.hparams
        tok_hash = hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:16]
        key = hashlib.sha256(f"{self._source_key()}|{tok_hash}|{h.max_len}|{h.overlength}".encode()).hexdigest()[:16]
        return self._cache() / f"data-{key}"

    def _load_or_train_tokenizer(self, splits: dict[str, list[str]] | None) -> VATTokenizer:
        h = self.hparams
        if h.tokenizer_path:
            tok = VATTokenizer.from_file(h.tokenizer_path)
        else:
            path = self._tokenizer_cache_path()
            if path.is_file():
                tok = VATTokenizer.from_file(path)
            else:
                if splits is None:
                    splits = self._raw_splits()
                rank_zero_info(f"vat: training a {h.vocab_size}-token BPE tokenizer on {min(len(splits['train']), h.tokenizer_train_lines)} lines")
                tok = VATTokenizer.train(splits["train"][: h.tokenizer_train_lines], vocab_size=h.vocab_size)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
                tok.save(tmp)
                os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
        if tok.vocab_size > h.vocab_size:
            src = h.tokenizer_path or "the cached tokenizer"
            raise VatError(f"data.tokenizer_path: {src} has {tok.vocab_size} tokens but data.vocab_size is {h.vocab_size}")
        return tok

    def prepare_data(self) -> None:
        """Local rank 0 only: train the tokenizer and tokenize every split into the cache."""
        tok_path_exists = bool(self.hparams.tokenizer_path) or self._tokenizer_cache_path().is_file()
        splits = None if tok_path_exists else self._raw_splits()
        tok = self._load_or_train_tokenizer(splits)
        cache = self._data_cache_path(tok)
        if (cache / "done.json").is_file():
            return
        splits = splits or self._raw_splits()
        self._tokenize_to_cache(tok, splits, cache)

    def _tokenize_to_cache(self, tok: VATTokenizer, splits: dict[str, list[str]], cache: Path) -> None:
        import datasets

        h = self.hparams
        tmp = cache.with_name(f".{cache.name}.tmp-{os.getpid()}")
        stats = {}
        tok_json = tok.to_str()
        for name, lines in splits.items():
            ds = datasets.Dataset.from_dict({"text": lines})
            ds = ds.map(
                _tokenize_batch, batched=True, batch_size=1000, num_proc=h.num_proc if len(lines) > 10_000 else None,
                fn_kwargs={"tokenizer_json": tok_json}, remove_columns=["text"], desc=f"tokenizing {name}",
            )
            lengths = np.asarray(ds["length"])
            over = int((lengths > h.max_len - 1).sum())
            if h.overlength == "filter":
                ds = ds.filter(lambda b: [n <= h.max_len - 1 for n in b["length"]], batched=True)
            stats[name] = {"lines": len(lines), "overlength": over, "kept": len(ds)}
            ds.save_to_disk(str(tmp / name))
        (tmp / "done.json").write_text(json.dumps({"stats": stats, "max_len": h.max_len, "overlength": h.overlength}))
        try:
            os.replace(tmp, cache)
        except OSError:  # another process finished first: keep theirs
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)

    def setup(self, stage: str | None = None) -> None:
        import datasets

        if self.tokenizer is not None and self.splits:
            return
        self.tokenizer = self._load_or_train_tokenizer(None)
        cache = self._data_cache_path(self.tokenizer)
        if not (cache / "done.json").is_file():
            # prepare_data runs only on local rank 0 of each node; with a node-local cache
            # dir on a multi-node job the other nodes tokenize here.
            self.prepare_data()
        info = json.loads((cache / "done.json").read_text())
        h = self.hparams
        for name, st in info["stats"].items():
            ds = datasets.load_from_disk(str(cache / name))
            self.splits[name] = TokenizedDataset([ids[: h.max_len - 1] for ids in ds["ids"]])
            if st["overlength"]:
                verb = "truncated to" if h.overlength == "truncate" else "dropped for exceeding"
                rank_zero_info(f"vat: {name}: {st['overlength']} of {st['lines']} lines {verb} max_len={h.max_len} tokens")
        if not len(self.splits["train"]):
            raise VatError("data: no training sentence is left after filtering to data.max_len")
        counts = np.bincount([len(x) + 1 for x in self.splits["train"].ids], minlength=h.max_len + 1)
        self.length_histogram = counts.tolist()
        self.overlength_stats = info["stats"]

    # -- loaders ----------------------------------------------------------------------------
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        h = self.hparams
        ds = self.splits[split]
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = BucketBatchSampler(
            [len(x) for x in ds.ids], h.batch_size, shuffle=shuffle, seed=h.seed, pool_batches=h.pool_batches,
            num_replicas=world, rank=rank,
        )
        # A private generator: creating the iterator then draws no number from torch's global
        # RNG, so dropout/sampling noise is the same in a resumed and an uninterrupted run.
        kwargs = dict(collate_fn=collate(h.max_len), num_workers=h.num_workers,
                      generator=torch.Generator().manual_seed(h.seed), persistent_workers=h.num_workers > 0)
        if split == "train":
            return ResumableDataLoader(ds, sampler, **kwargs)
        return DataLoader(ds, batch_sampler=sampler, **kwargs)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        if "val" not in self.splits:
            return []
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        if "test" not in self.splits:
            raise VatError("`vat train test` needs data.test_files or data.hf_test_split")
        return self._loader("test", shuffle=False)


def _tokenize_batch(batch: dict, tokenizer_json: str) -> dict:
    tok = _tokenizer_from_json(tokenizer_json)
    ids = tok.encode_batch(batch["text"])
    return {"ids": ids, "length": [len(x) for x in ids]}


_TOKENIZERS: dict[int, VATTokenizer] = {}


def _tokenizer_from_json(tokenizer_json: str) -> VATTokenizer:
    key = hash(tokenizer_json)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = VATTokenizer.from_str(tokenizer_json)
    return _TOKENIZERS[key]
