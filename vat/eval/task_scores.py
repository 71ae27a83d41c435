"""One headline score per requested task, in one unit, under the name the user asked for.

SentEval's result layout (what `vat evaluate --output` writes, kept for the conformance
tests) mixes units and names: STS correlations are fractions (0.334) under
`STS12.all.spearman.mean`, accuracies are percentages (55.4) under `MR.acc`, and the cosine
protocol of STS-B is stored as `STSBenchmark-cosine`. `task_scores` reads that layout and
gives, for each task asked for, one score in percent (correlations x 100), with the task
type, metric, split and the SentEval field it came from. `vat evaluate` writes it as the
`scores` entry of its JSON, the export's model card takes its model-index from it, and the
comparison chart draws it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from vat.eval.tasks.registry import ALL_TASKS

CLASSIFICATION = "text-classification"
SIMILARITY = "sentence-similarity"


def task_score(task: str, results: Mapping) -> dict[str, Any] | None:
    """The headline score of `task` in SentEval-layout `results`; None when absent or not
    finite. Percent for every task: STS12-16 all.spearman.mean (mean over the subsets),
    STS-B / SICK-R the cosine protocol's test Spearman (the trained regressor's when only it
    ran), classification the test accuracy."""
    if task.startswith("STS1") and task in results:
        source, field = task, "all.spearman.mean"
        value = results[task]["all"]["spearman"]["mean"]
    elif f"{task}-cosine" in results:
        source, field = f"{task}-cosine", "test.spearman"
        value = results[source]["test"]["spearman"]
    elif task in ("STSBenchmark", "SICKRelatedness") and task in results:
        source, field, value = task, "spearman", results[task]["spearman"]
    elif task in results and "acc" in results[task]:
        return _score(results[task]["acc"], task, CLASSIFICATION, "accuracy", f"{task}.acc")
    else:
        return None
    return _score(100 * float(value), task, SIMILARITY, "spearman", f"{source}.{field}")


def _score(value, task, kind, metric, field) -> dict[str, Any] | None:
    value = float(value)
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
