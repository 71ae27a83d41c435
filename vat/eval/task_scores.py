"""One headline score per task, in percent, read from SentEval's result layout (which mixes
fractions and percentages): the `scores` of `vat evaluate`'s JSON, the model card's, the chart's."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from vat.eval.tasks.registry import ALL_TASKS


def task_score(task: str, results: Mapping) -> dict[str, Any] | None:
    """The headline score of `task` (None when absent or not finite): STS12-16 all.spearman.mean,
    STS-B / SICK-R the cosine protocol's test Spearman (else the regressor's), else accuracy."""
    kind, metric, scale = "sentence-similarity", "spearman", 100  # correlations are fractions
    if task.startswith("STS1") and task in results:
        field, value = f"{task}.all.spearman.mean", results[task]["all"]["spearman"]["mean"]
    elif f"{task}-cosine" in results:
        field, value = f"{task}-cosine.test.spearman", results[f"{task}-cosine"]["test"]["spearman"]
    elif task in ("STSBenchmark", "SICKRelatedness") and task in results:
        field, value = f"{task}.spearman", results[task]["spearman"]
    elif task in results and "acc" in results[task]:
        kind, metric, scale = "text-classification", "accuracy", 1
        field, value = f"{task}.acc", results[task]["acc"]
    else:
        return None
    value = float(value) * scale
    if not math.isfinite(value):
        return None
    return {
        "task": task,
        "type": kind,
        "metric": metric,
        "split": "test",
        "value": round(value, 4),
        "unit": "percent",
        "field": field,
    }


def task_scores(results: Mapping, tasks: Iterable[str] | None = None) -> dict[str, dict]:
    """{task: task_score} for `tasks` (default: every task present), in the harness's order."""
    wanted = list(ALL_TASKS) if tasks is None else list(tasks)
    order = sorted(wanted, key=lambda t: ALL_TASKS.index(t) if t in ALL_TASKS else 99)
    return {t: score for t in order if (score := task_score(t, results)) is not None}
