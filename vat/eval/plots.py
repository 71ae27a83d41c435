"""A bar chart comparing encoders (or poolings) across SentEval tasks (`vat evaluate --plot`), one
bar per run of each task's headline score (`vat.eval.task_scores`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from vat.errors import VatError
from vat.eval.task_scores import task_scores
from vat.eval.tasks.registry import ALL_TASKS, TABLE_NAMES
from vat.io import figure_class, regular_file, save_png


def headline_scores(results: Mapping) -> dict[str, float]:
    """{task: score in percent} of one results dict, in task order."""
    return {task: s["value"] for task, s in task_scores(results).items()}


def run_label(results: Mapping, fallback: str) -> str:
    """'encoder (feature spec)' from a results file's _meta (older files: its pooling)."""
    meta = results.get("_meta", {})
    enc = str(meta.get("encoder") or fallback)
    enc = enc.split(":", 1)[-1] if enc.startswith(("vat:", "hf:", "callable:")) else enc
    name = Path(enc).name if "/" in enc else enc
    what = meta.get("features") or meta.get("pooling")
    return f"{name} ({what})" if what else name


def load_results(path: str | Path) -> dict:
    path = Path(path)
    if path.exists() or path.is_symlink():
        regular_file(path, "--compare")  # a FIFO would block, /dev/zero fill memory
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VatError(f"--compare {path}: no such file") from None
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested too deeply
        raise VatError(f"--compare {path}: not a results JSON file ({e})") from None
    if not isinstance(obj, dict) or not headline_scores(obj):
        raise VatError(f"--compare {path}: holds no task results in vat evaluate's layout")
    return obj


def plot_comparison(
    runs: Mapping[str, Mapping], path: str | Path, title: str | None = None
) -> Path:
    """Grouped bars of `headline_scores` for each {label: results}, saved as a PNG at `path`."""
    Figure = figure_class()
    scores = {label: headline_scores(res) for label, res in runs.items()}
    tasks = [t for t in ALL_TASKS if any(t in s for s in scores.values())]
    if not tasks:
        raise VatError(f"--plot {path}: no task scores to plot")
    width = 0.8 / len(scores)
    fig = Figure(figsize=(max(6.0, 0.9 * len(tasks) + 2), 4.2))
    ax = fig.subplots()
    for i, (label, s) in enumerate(scores.items()):
        xs = [j + (i - (len(scores) - 1) / 2) * width for j, t in enumerate(tasks) if t in s]
        ax.bar(xs, [s[t] for t in tasks if t in s], width, label=label)
    ax.set_xticks(
        range(len(tasks)), [TABLE_NAMES.get(t, t) for t in tasks], rotation=30, ha="right"
    )
    ax.set_ylabel("Spearman x 100 (STS) / accuracy % (transfer)")
    ax.set_title(title or "SentEval: " + " vs ".join(scores))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return save_png(fig, path, dpi=100, bbox_inches="tight")
