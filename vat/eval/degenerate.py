"""Scores that say the encoder is degenerate: one vector for every sentence (or non-finite
vectors) makes every STS correlation undefined; `vat evaluate` says so, and fails under --strict."""

from __future__ import annotations

import math
from typing import Any


def _walk(obj: Any, path: str) -> list[str]:
    found: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            sub = f"{path}.{k}" if path else str(k)
            undefined = v is None or (isinstance(v, float) and not math.isfinite(v))
            if k in ("spearman", "pearson") and undefined:
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
