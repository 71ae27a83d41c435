"""Scores that say the encoder is degenerate: an encoder that returns the same
vector for every sentence (or NaN/inf vectors, which SentEval's cosine turns into zeros)
gives every pair the same similarity, so every STS correlation is undefined (NaN, written
as null and shown as "—"). `vat evaluate` says so on stderr, naming the task and the reason,
and fails under `--strict`.
"""

from __future__ import annotations

import math
from typing import Any

_CORRELATIONS = ("spearman", "pearson")


def _undefined(x: Any) -> bool:
    return x is None or (isinstance(x, float) and not math.isfinite(x))


def _walk(obj: Any, path: str) -> list[str]:
    found: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            if k in _CORRELATIONS and not isinstance(v, dict) and _undefined(v):
                found.append(sub)
            else:
                found += _walk(v, sub)
    return found


def degenerate_tasks(results: dict[str, Any]) -> dict[str, list[str]]:
    """task -> the result keys whose correlation is undefined (empty dict: none)."""
    return {
        task: bad
        for task, res in results.items()
        if not task.startswith("_") and (bad := _walk(res, ""))
    }


def warning_lines(found: dict[str, list[str]]) -> list[str]:
    return [
        f"vat: warning: {task}: the correlation is undefined ({', '.join(keys[:3])}"
        f"{', ...' if len(keys) > 3 else ''} = null): every sentence pair got the same "
        f"similarity, so the encoder returns constant (or non-finite) vectors"
        for task, keys in found.items()
    ]
