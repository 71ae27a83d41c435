"""Sentence and token features of a VAT.

- `pooling.py`     the encoder over sentences: iter_encoded (length-sorted batches), pool
                   (mean/sum/start/precision), sentence_features, token_vectors
- `spec.py`        a feature spec SOURCE/WEIGHTING/POST ("mu/mean/none", "layer0/sif/none",
                   "firstlast/mean/whiten64"), its fitted statistics and their file
- `postprocess.py` SIF weights, top-PC removal and whitening as pure numpy functions
- `encoder.py`     FeatureEncoder: one spec computed the same way by `vat evaluate`,
                   `vat.load(...).encode`, sentence-transformers and MTEB; fitting on
                   unlabeled text (never the evaluation data by default)

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
