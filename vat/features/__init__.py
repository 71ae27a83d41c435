"""Sentence and token features of a VAT.

- `pooling.py`     the encoder over sentences: iter_encoded (length-sorted batches), pool
                   (mean/sum/start/precision), sentence_features, token_vectors
- `postprocess.py` SIF weights, top-PC removal and whitening as pure numpy functions
- `encoder.py`     FeatureEncoder: one spec computed the same way by `vat evaluate`,
                   `vat.load(...).encode`, sentence-transformers and MTEB
- `fitting.py`     fitting a spec's statistics on unlabeled text (never the evaluation data
                   by default): FitOptions and the steps of a fit
- `choice.py`      `features_for`: which vectors a model gives (its own by one rule that
                   never fits), or a named spec's statistics, found, fitted or stored
- `compare.py`     the experiment behind `vat features compare`: every source x weighting x
                   post-processing scored on STS, as a table and a plot

`from vat.features import sentence_features, pool, POOLINGS` keeps working.
"""

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
