"""`VATDataModule`: sources -> tokenizer -> tokenized cache -> length-bucketed batches. Under
DDP `prepare_data` (local rank 0) writes the caches; `setup` on every rank reads them."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from torch.utils.data import DataLoader

from vat.data.corpus import (  # noqa: F401 (read_lines, expand_files: public API)
    expand_files,
    held_out_indices,
    iter_files,
    iter_hub,
    limit_lines,
    read_lines,
    split_held_out,
)
from vat.data.file_digest import file_digest
from vat.data.sampler import PAD_MULTIPLE, BucketBatchSampler, ResumableDataLoader, passthrough
from vat.data.token_cache import (  # noqa: F401 (TokenizedDataset: public API)
    CacheDamaged,
    TokenizedDataset,
    hash16,
    read_cached_tokenizer,
    remove_damaged,
    save_tokenizer,
    verify,
    write_token_cache,
)
from vat.data.token_counts import fit_sample, train_token_counts
from vat.errors import VatError, check
from vat.io import regular_file, remove_stale_temps
from vat.tokenizer import SPECIAL_TOKENS, VATTokenizer


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
        max_tokens: int | None = None,
        pool_batches: int = 100,
        num_workers: int = 0,
        num_proc: int = 1,
        cache_dir: str = ".cache/vat",
        seed: int = 1234,
        progress: bool = True,
    ) -> None:
        """
        Args:
            train_files: Training text files or globs (plain or .gz, one sentence per line).
            val_files: Validation files. If unset, `val_fraction` of the training lines is held out.
            test_files: Test files for `vat train test`.
            hf_dataset: A `datasets` hub name (or local folder) used instead of files.
            hf_config: The hub dataset's configuration name.
            hf_text_field: Column holding the sentence; dotted for nested fields.
            hf_train_split: Hub split for training.
            hf_val_split: Hub split for validation (None: use val_fraction).
            hf_test_split: Hub split for testing (None: no test set).
            val_fraction: Fraction of training lines held out when no validation set is given.
            max_train_lines: Use only the first N training lines (quick experiments).
            tokenizer_path: A tokenizers JSON to load; unset: byte-level BPE trained and cached.
            vocab_size: The (trained) tokenizer's and the model's vocabulary. Paper: 32,768.
            tokenizer_train_lines: Cap on lines used to train the tokenizer.
            max_len: Longest sequence in tokens, counting the final </s>.
            overlength: "truncate" cuts longer sentences to max_len; "filter" drops them.
            on_bad_bytes: Lines that are not UTF-8 are skipped and counted, or an "error".
            batch_size: Sentences per batch, per process (paper: 128); unused with max_tokens.
            max_tokens: Padded tokens per batch, per process (fairseq's --max-tokens), instead of
                batch_size; lengths are then padded to a multiple of 8. At least max_len.
            pool_batches: Sentences are length-sorted within pools of this many batches.
            num_workers: DataLoader worker processes (0: load in the training process).
            num_proc: Processes for tokenizing (1 already uses every core).
            cache_dir: Where the tokenizer and tokenized data are cached.
            seed: Seed for the held-out split and the batch order.
            progress: Progress bars for tokenizer training and corpus tokenizing (rank 0 only).
        """
        super().__init__()
        validate_data_options(locals())
        self.save_hyperparameters()
        self.tokenizer: VATTokenizer | None = None
        self._given_tokenizer: VATTokenizer | None = None
        self.splits: dict[str, TokenizedDataset] = {}
        self.length_histogram: list[int] = []
        self.token_counts: list[int] = []  # training subword counts (for SIF weights)
        self.fit_sample: dict | None = None  # training sentences for fitting features
        self._verified: dict[Path, dict] = {}
        if max_tokens is not None:
            rank_zero_info(
                f"vat: data.max_tokens={max_tokens} sets the batch size "
                "(data.batch_size is not used)"
            )

    def _source_files(self) -> dict[str, list[Path]]:
        h = self.hparams
        names = ["train", *(split for split in ("val", "test") if h[f"{split}_files"])]
        return {
            split: expand_files(h[f"{split}_files"] or [], f"data.{split}_files") for split in names
        }

    def _source_key(self) -> str:
        """Identifies the raw data: file paths and a digest of their bytes, or the hub dataset."""
        h = self.hparams
        if h.hf_dataset:
            hub = ("dataset", "config", "text_field", "train_split", "val_split", "test_split")
            desc: object = [h[f"hf_{k}"] for k in hub]
        else:
            desc = {
                k: [(str(p.resolve()), p.stat().st_size, file_digest(p)) for p in v]
                for k, v in self._source_files().items()
            }
        desc = [desc, h.val_fraction, h.max_train_lines, h.seed, h.on_bad_bytes]
        return hash16(json.dumps(desc, sort_keys=True, default=str))

    def _other_sources(self) -> list[str]:
        h = self.hparams
        if h.hf_dataset:
            return [n for n, s in (("val", h.hf_val_split), ("test", h.hf_test_split)) if s]
        return [n for n in self._source_files() if n != "train"]

    def _chunks(self, split: str) -> Iterator[list[str]]:
        h = self.hparams
        if h.hf_dataset:
            chunks = iter_hub(h.hf_dataset, h.hf_config, h[f"hf_{split}_split"], h.hf_text_field)
        else:
            chunks = iter_files(self._source_files()[split], h.on_bad_bytes, f"data.{split}_files")
        return limit_lines(chunks, h.max_train_lines) if split == "train" else chunks

    def _train_val_chunks(self) -> Iterator[tuple[list[str], list[str]]]:
        """(train, held-out val) parts of each training chunk (val chosen after a counting pass)."""
        h = self.hparams
        if not self._val_is_held_out():
            return ((c, []) for c in self._chunks("train"))
        n = sum(len(c) for c in self._chunks("train"))
        return split_held_out(self._chunks("train"), held_out_indices(n, h.val_fraction, h.seed))

    def _val_is_held_out(self) -> bool:
        h = self.hparams
        has_source = bool(h.val_files) or (bool(h.hf_dataset) and h.hf_val_split is not None)
        return not has_source and h.val_fraction > 0

    def _check_cache_dir(self, write: bool) -> None:
        """One-line errors for an unusable data.cache_dir (read-only, a symlink loop, a file)."""
        d = Path(self.hparams.cache_dir)
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

    def _progress(self) -> bool:
        return bool(self.hparams.progress) and rank_zero_only.rank == 0

    def _tokenizer_cache_path(self) -> Path:
        h = self.hparams
        key = hash16(
            f"{self._source_key()}|{h.vocab_size}|{h.tokenizer_train_lines}|bpe-bytelevel-v2"
        )
        return Path(h.cache_dir) / f"tokenizer-{key}.json"

    def _data_cache_path(self, tokenizer: VATTokenizer) -> Path:
        h = self.hparams
        tok_hash = hash16(tokenizer.to_str())
        key = hash16(f"{self._source_key()}|{tok_hash}|{h.max_len}|{h.overlength}|tokens-v2")
        return Path(h.cache_dir) / f"data-{key}"

    def use_tokenizer(self, tokenizer: VATTokenizer) -> None:
        """Tokenize with a model's own tokenizer (`vat train --init-from`)."""
        self._given_tokenizer = tokenizer

    def _load_or_train_tokenizer(self) -> VATTokenizer:
        h = self.hparams
        if self._given_tokenizer is not None:
            tok = self._given_tokenizer
        elif h.tokenizer_path:
            regular_file(h.tokenizer_path, "data.tokenizer_path")  # not a FIFO or a device
            try:
                tok = VATTokenizer.from_file(h.tokenizer_path)
            except ValueError as e:
                raise VatError(f"data.tokenizer_path: {e}") from None
        else:
            tok = read_cached_tokenizer(self._tokenizer_cache_path()) or self._train_tokenizer()
        if tok.vocab_size > h.vocab_size:
            src = h.tokenizer_path or "the cached tokenizer"
            raise VatError(
                f"data.tokenizer_path: {src} has {tok.vocab_size} tokens "
                f"but data.vocab_size is {h.vocab_size}"
            )
        return tok

    def _train_tokenizer(self) -> VATTokenizer:
        h = self.hparams
        self._check_cache_dir(write=True)
        train_chunks = (train for train, _ in self._train_val_chunks())
        # limit_lines counts sentences across chunks; flatten only after the cut.
        texts = (s for chunk in limit_lines(train_chunks, h.tokenizer_train_lines) for s in chunk)
        rank_zero_info(
            f"vat: training a {h.vocab_size}-token BPE tokenizer "
            f"on up to {h.tokenizer_train_lines} training lines"
        )
        tok = VATTokenizer.train(texts, vocab_size=h.vocab_size, progress=self._progress())
        save_tokenizer(tok, self._tokenizer_cache_path())
        return tok

    def _verified_cache(self, cache: Path) -> dict | None:
        if cache in self._verified:
            return self._verified[cache]
        if not cache.exists():
            return None
        try:
            info = verify(cache, self.hparams.max_len)
        except CacheDamaged as e:
            self._check_cache_dir(write=True)
            remove_damaged(cache, e)
            rank_zero_warn(f"vat: the tokenized cache {cache} is damaged ({e}); rebuilding it")
            return None
        self._verified[cache] = info
        return info

    def prepare_data(self) -> None:
        """Local rank 0 only: train the tokenizer and tokenize every split into the cache."""
        self._check_cache_dir(write=False)
        tok = self._load_or_train_tokenizer()
        cache = self._data_cache_path(tok)
        if self._verified_cache(cache) is not None:
            return
        self._check_cache_dir(write=True)
        h = self.hparams
        write_token_cache(
            cache,
            tok,
            self._train_val_chunks(),
            {name: self._chunks(name) for name in self._other_sources()},
            max_len=h.max_len,
            overlength=h.overlength,
            num_proc=h.num_proc,
            progress=self._progress(),
            held_out_val=self._val_is_held_out(),
        )

    def setup(self, stage: str | None = None) -> None:
        if self.tokenizer is not None and self.splits:
            return
        self._check_cache_dir(write=False)
        self.tokenizer = self._load_or_train_tokenizer()
        cache = self._data_cache_path(self.tokenizer)
        info = self._verified_cache(cache)
        if info is None:
            # prepare_data runs only on local rank 0 of each node; with a node-local cache
            # dir on a multi-node job the other nodes tokenize here.
            self.prepare_data()
            info = self._verified_cache(cache)
        h = self.hparams
        pad = PAD_MULTIPLE if h.max_tokens is not None else 1
        for name, st in info["stats"].items():
            self.splits[name] = TokenizedDataset(cache / name, info["dtype"], h.max_len, pad)
            if st["overlength"]:
                verb = "truncated to" if h.overlength == "truncate" else "dropped for exceeding"
                rank_zero_info(
                    f"vat: {name}: {st['overlength']} of {st['lines']} lines "
                    f"{verb} max_len={h.max_len} tokens"
                )
        if not len(self.splits["train"]):
            raise VatError("data: no training sentence is left after filtering to data.max_len")
        counts = np.bincount(self.splits["train"].lengths + 1, minlength=h.max_len + 1)
        self.length_histogram = counts.tolist()
        self.token_counts = train_token_counts(self.splits["train"], self.tokenizer.vocab_size)
        self.fit_sample = fit_sample(self.splits["train"])
        self.overlength_stats = info["stats"]

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        h = self.hparams
        ds = self.splits[split]
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        sampler = BucketBatchSampler(
            ds.lengths + 1,
            h.batch_size,
            shuffle=shuffle,
            seed=h.seed,
            pool_batches=h.pool_batches,
            num_replicas=world,
            rank=rank,
            max_tokens=h.max_tokens,
            pad_multiple=PAD_MULTIPLE,
            max_len=h.max_len,
        )
        # A private generator: creating the iterator then draws no number from torch's global
        # RNG, so dropout/sampling noise is the same in a resumed and an uninterrupted run.
        kwargs = dict(
            collate_fn=passthrough,
            num_workers=h.num_workers,
            pin_memory=self._pin_memory(),
            generator=torch.Generator().manual_seed(h.seed),
            persistent_workers=h.num_workers > 0,
            worker_init_fn=ignore_ctrl_c if h.num_workers > 0 else None,
        )
        if split == "train":
            return ResumableDataLoader(ds, sampler, **kwargs)
        return DataLoader(ds, batch_sampler=sampler, **kwargs)

    def _pin_memory(self) -> bool:
        try:
            return self.trainer.strategy.root_device.type == "cuda"
        except (AttributeError, RuntimeError):
            return torch.cuda.is_available()

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


def ignore_ctrl_c(worker_id: int) -> None:
    """A terminal's Ctrl-C reaches every worker: one that died of it would fail training."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def validate_data_options(args: dict) -> None:
    def need(name: str, ok: bool, expected: str) -> None:
        check(ok, f"data.{name}", expected, args[name])

    def is_int(v) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    if not args["train_files"] and not args["hf_dataset"]:
        raise VatError(
            "data: set data.train_files (text files) or data.hf_dataset (a datasets hub name)"
        )
    for name in ("train_files", "val_files", "test_files"):
        v = args[name]
        bad = v is not None and (isinstance(v, str) or not all(isinstance(p, str) and p for p in v))
        need(name, not bad, "a list of file paths or globs")
    minimum = {
        "vocab_size": len(SPECIAL_TOKENS) + 1,
        "tokenizer_train_lines": 1,
        "max_len": 2,
        "batch_size": 1,
        "pool_batches": 1,
        "num_workers": 0,
        "num_proc": 1,
    }
    for name, low in minimum.items():
        need(name, is_int(args[name]) and args[name] >= low, f"an integer >= {low}")
    need("seed", is_int(args["seed"]), "an integer")
    v = args["max_train_lines"]
    need("max_train_lines", v is None or (is_int(v) and v >= 1), "an integer >= 1 or null")
    v, max_len = args["max_tokens"], args["max_len"]
    need(
        "max_tokens",
        v is None or (is_int(v) and v >= max_len),
        f"null or an integer >= data.max_len ({max_len}), so the longest sentence fits",
    )
    v = args["val_fraction"]
    ok = not isinstance(v, bool) and isinstance(v, int | float) and 0.0 <= v < 1.0
    need("val_fraction", ok, "a number in [0, 1)")
    need("overlength", args["overlength"] in ("truncate", "filter"), "'truncate' or 'filter'")
    need("on_bad_bytes", args["on_bad_bytes"] in ("skip", "error"), "'skip' or 'error'")
    v = args["cache_dir"]
    need("cache_dir", isinstance(v, str | os.PathLike) and bool(str(v)), "a folder path")
    need("progress", isinstance(args["progress"], bool), "true or false")
    for name in ("hf_text_field", "hf_train_split"):
        need(name, isinstance(args[name], str) and bool(args[name]), "a non-empty string")
