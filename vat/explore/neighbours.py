"""Nearest sentences by cosine, brute force: exact and fast enough for a page's corpus, no faiss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from vat.errors import OptionError, check_count


class Neighbour(NamedTuple):
    cosine: float
    sentence: str
    line: int  # 1-based, among the indexed lines


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; a zero row stays zero (its cosine with anything is 0)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


class NeighbourIndex:
    """Sentences and their features (N, d), searched by cosine similarity."""

    def __init__(self, sentences: Sequence[str], features: np.ndarray) -> None:
        features = np.asarray(features, dtype=np.float32)
        if features.ndim != 2 or features.shape[0] != len(sentences):
            raise OptionError(
                "features",
                f"expected one row per sentence ({len(sentences)}), got shape {features.shape}",
            )
        if not np.isfinite(features).all():
            raise OptionError("features", "hold NaN or infinite values")
        self.sentences = list(sentences)
        self.unit = unit_rows(features)  # (N, d)

    def __len__(self) -> int:
        return len(self.sentences)

    def search(self, query: np.ndarray, k: int = 5) -> list[Neighbour]:
        """The k sentences most cosine-similar to `query` (d,), best first, ties in line order."""
        k = min(check_count(k, "k"), len(self.sentences))
        q = unit_rows(np.asarray(query, dtype=np.float32).reshape(1, -1))[0]  # (d,)
        if q.shape[0] != self.unit.shape[1]:
            raise OptionError(
                "query", f"has {q.shape[0]} dimensions, the index {self.unit.shape[1]}"
            )
        cos = self.unit @ q  # (N,)
        top = np.argpartition(-cos, k - 1)[:k] if k < len(cos) else np.arange(len(cos))
        top = top[np.lexsort((top, -cos[top]))]  # by cosine, then line
        return [Neighbour(float(cos[i]), self.sentences[i], int(i) + 1) for i in top]
