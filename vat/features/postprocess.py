"""Training-free post-processing of sentence vectors in numpy, fitted then applied: SIF weights
(Arora et al. 2017), top-PC removal (Mu & Viswanath 2018, centred), whitening (Su et al. 2021)."""

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
