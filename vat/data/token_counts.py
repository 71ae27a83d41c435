"""Training subword counts, for SIF weighting: counted from the token cache when
the data module is set up, stored in the checkpoint's `vat.data.token_counts`."""

from __future__ import annotations

import numpy as np

from vat.data.token_cache import TokenizedDataset


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
