"""Input checks and grouping helpers shared by `vat.geometry.metrics` and `vat.geometry.collapse`.

Every function takes token vectors as an (N, d) torch tensor or numpy array and works in
float64 on the input's device; bad input raises ValueError with the reason (never a NaN).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor | Sequence


# -- input checking -----------------------------------------------------------------------
def as_matrix(vectors: ArrayLike, name: str = "vectors") -> torch.Tensor:
    """(N, d) float64 tensor (on the input's device) from a tensor / array; rejects
    non-finite input."""
    if isinstance(vectors, torch.Tensor):
        x = vectors.detach().to(torch.float64)
    else:
        x = torch.from_numpy(np.asarray(vectors, dtype=np.float64))
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (N, d) array, got shape {tuple(x.shape)}")
    if x.shape[1] == 0:
        raise ValueError(f"{name} has zero columns (d = 0)")
    if not torch.isfinite(x.sum()):  # one reduction; NaN/inf anywhere makes the sum non-finite
        bad = int((~torch.isfinite(x).all(1)).sum())
        raise ValueError(
            f"{name} contains NaN or infinite values ({bad} rows)"
            if bad
            else f"{name}: values overflow"
        )
    return x


def as_ids(ids: ArrayLike, n: int, name: str, device: torch.device) -> torch.Tensor:
    """(N,) int64 tensor on `device`."""
    a = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if len(a) != n:
        raise ValueError(f"{name} has {len(a)} entries but vectors has {n} rows; they must match")
    if len(a) and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be integers, got dtype {a.dtype}")
    return torch.from_numpy(a.astype(np.int64, copy=False)).to(device)


def unit_rows(x: torch.Tensor, name: str = "vectors") -> torch.Tensor:
    """Rows scaled to unit length; zero rows have no direction, so they are an error."""
    norms = torch.linalg.vector_norm(x, dim=1)  # (N,)
    zero = norms == 0
    if zero.any():
        raise ValueError(
            f"{name} has {int(zero.sum())} zero vector(s) "
            f"(first at row {int(zero.int().argmax())}); "
            "cosine similarity is undefined for them"
        )
    return x / norms[:, None]  # (N, d)


def need_two(n: int, what: str = "tokens") -> None:
    if n < 2:
        raise ValueError(f"need at least 2 {what} for a pairwise similarity, got {n}")


def group_ids(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(unique ids (G,), inverse index (N,), counts (G,)) of an id tensor."""
    return torch.unique(ids, return_inverse=True, return_counts=True)


def group_sums(x: torch.Tensor, inverse: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Row sums of x (N, d) per group: (G, d), O(N d)."""
    return torch.zeros(n_groups, x.shape[1], dtype=x.dtype, device=x.device).index_add_(
        0, inverse, x
    )


class Prepared:
    """Validated float64 vectors with their unit rows, shared by the metrics of one report."""

    def __init__(self, vectors: ArrayLike) -> None:
        self.x = as_matrix(vectors)  # (N, d)
        self.u = unit_rows(self.x)  # (N, d)
        need_two(len(self.x))


def prepared(vectors: ArrayLike | Prepared) -> Prepared:
    return vectors if isinstance(vectors, Prepared) else Prepared(vectors)
