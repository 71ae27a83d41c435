"""Training-free post-processing of sentence vectors, fitted on unlabeled sentences.

Pure numpy, no model: each `fit_*` takes an (N, d) matrix of sentence vectors and returns
the small arrays its `apply_*` needs, so the fitted statistics can be stored beside a
checkpoint (vat.feature_spec) and applied to any later batch.

- SIF weights (Arora et al. 2017): a / (a + p(w)) per token, p(w) the token's unigram
  probability in the training corpus.
- Removing the top k principal components (Mu & Viswanath 2018, "All-but-the-Top"):
  subtract the mean, then the projection on the k leading directions of the centred data.
  With k = 1 after SIF weighting this is Arora et al.'s common-component removal (they do
  not centre; the mean is removed here, as All-but-the-Top does).
- Whitening (Su et al. 2021): y = (x - mean) W with W = U diag(1 / sqrt(s)), from the SVD
  of the covariance, cut to the first `dim` columns for an optional lower output dimension.
  The whitened training vectors have mean 0 and identity covariance.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-8  # floor on eigenvalues before 1/sqrt: a direction with no variance stays finite


def sif_weights(counts: np.ndarray, a: float = 1e-3) -> np.ndarray:
    """(V,) a / (a + p(w)) from (V,) token counts; tokens never seen get weight 1."""
    counts = np.asarray(counts, dtype=np.float64)  # a > 0: checked by FeatureSpec
    total = counts.sum()
    p = counts / total if total > 0 else np.zeros_like(counts)
    return (a / (a + p)).astype(np.float32)


def _check(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"{what} needs an (N, d) matrix with N >= 2, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{what}: the vectors hold NaN or inf")
    return x


def fit_pc_removal(x: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """{'mean': (d,), 'components': (k, d)} orthonormal rows: the top k principal directions."""
    x = _check(x, "principal-component removal")
    if not 1 <= k <= min(x.shape):
        raise ValueError(f"cannot remove {k} components from {x.shape[0]} x {x.shape[1]} vectors")
    mean = x.mean(0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)  # rows of vt: principal directions
    return {"mean": mean.astype(np.float32), "components": vt[:k].astype(np.float32)}


def apply_pc_removal(x: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """(N, d): x - mean with its projection on `components` (k, d) removed."""
    c = np.asarray(x, dtype=np.float64) - mean
    u = components.astype(np.float64)
    return (c - (c @ u.T) @ u).astype(np.float32)


def fit_whitening(x: np.ndarray, dim: int | None = None) -> dict[str, np.ndarray]:
    """{'mean': (d,), 'matrix': (d, k)} with k = dim or d: BERT-whitening's mu and W."""
    x = _check(x, "whitening")
    d = x.shape[1]
    k = d if dim is None else dim
    if not 1 <= k <= d:
        raise ValueError(f"whitening output dimension must be in 1..{d}, got {dim}")
    mean = x.mean(0)
    cov = np.cov(x - mean, rowvar=False)  # (d, d)
    u, s, _ = np.linalg.svd(cov)  # cov is symmetric PSD: u diag(s) u^T
    w = u[:, :k] / np.sqrt(np.maximum(s[:k], EPS))  # (d, k)
    return {"mean": mean.astype(np.float32), "matrix": w.astype(np.float32)}


def apply_whitening(x: np.ndarray, mean: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """(N, k): (x - mean) @ matrix."""
    return ((np.asarray(x, dtype=np.float64) - mean) @ matrix.astype(np.float64)).astype(np.float32)
