"""Sentence and token features of a VAT: pooling, feature specs, their fitting and comparison."""

from vat.features.pooling import (
    POOLINGS,
    EncodedBatch,
    Pooling,
    TokenVectors,
    iter_encoded,
    iter_encoded_ids,
    length_sorted_batches,
    pool,
    sentence_features,
    token_posteriors,
    token_vectors,
)

__all__ = [
    "POOLINGS",
    "EncodedBatch",
    "Pooling",
    "TokenVectors",
    "iter_encoded",
    "iter_encoded_ids",
    "length_sorted_batches",
    "pool",
    "sentence_features",
    "token_posteriors",
    "token_vectors",
]
