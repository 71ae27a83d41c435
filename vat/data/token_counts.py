"""What a checkpoint keeps of its training split for fitting features: the subword counts
(SIF weights) and a fitting sample of sentences (post-processing), taken when the data module
is set up and stored in the checkpoint's `vat` entry, so that no later command has to find
the training files again."""

from __future__ import annotations

import numpy as np
import torch

from vat.data.token_cache import TokenizedDataset

FIT_SAMPLE_SIZE = 20_000


def train_token_counts(dataset: TokenizedDataset, vocab_size: int) -> list[int]:
    """(vocab_size,) counts of every subword id in a cached split (without </s>)."""
    tokens = dataset._open()[0]  # the split's flat token array (memory-mapped)
    if not len(tokens):
        return [0] * vocab_size
    counts = np.zeros(vocab_size, dtype=np.int64)
    step = 1 << 24  # count in slices: bincount of the whole memmap would copy it to int64
    for i in range(0, len(tokens), step):
        c = np.bincount(np.asarray(tokens[i : i + step], dtype=np.int64), minlength=vocab_size)
        counts += c[:vocab_size]
    return counts.tolist()


def fit_sample(
    dataset: TokenizedDataset, n: int = FIT_SAMPLE_SIZE, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Up to n sentences of a cached split drawn uniformly without replacement by a fixed
    seed (the same corpus and tokenizer give the same sample), in corpus order: `ids` their
    subwords end to end (int32) and `lengths` each one's count (int32)."""
    tokens, offsets = dataset._open()
    size = len(dataset)
    pick = np.sort(np.random.default_rng(seed).choice(size, min(n, size), replace=False))
    lengths = offsets[pick + 1] - offsets[pick]
    ids = [np.asarray(tokens[offsets[i] : offsets[i + 1]]) for i in pick]
    flat = np.concatenate(ids) if ids else np.zeros(0)
    return {
        "ids": torch.from_numpy(flat.astype(np.int32)),
        "lengths": torch.from_numpy(np.asarray(lengths, dtype=np.int32)),
    }
