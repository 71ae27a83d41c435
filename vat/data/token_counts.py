"""The training subword counts and fitting sample a checkpoint keeps, so no later command has
to find the training files again."""

from __future__ import annotations

import numpy as np
import torch

from vat.data.token_cache import TokenizedDataset


def train_token_counts(dataset: TokenizedDataset, vocab_size: int) -> list[int]:
    tokens = dataset._open()[0]  # the split's flat token array (memory-mapped)
    counts = np.zeros(vocab_size, dtype=np.int64)
    step = 1 << 24  # count in slices: bincount of the whole memmap would copy it to int64
    for i in range(0, len(tokens), step):
        c = np.bincount(np.asarray(tokens[i : i + step], dtype=np.int64), minlength=vocab_size)
        counts += c[:vocab_size]
    return counts.tolist()


def fit_sample(
    dataset: TokenizedDataset, n: int = 20_000, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Up to n sentences of a split, drawn by a fixed seed, in corpus order."""
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
