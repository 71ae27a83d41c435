"""A bar chart comparing encoders (or poolings) across SentEval tasks.

    vat evaluate --ckpt last.ckpt --pooling precision --tasks sts --output prec.json \\
        --plot compare.png --compare mean.json sum.json

One group of bars per task, one bar per run: STS12-16 as SentEval's `all.spearman.mean`,
STS-B and SICK-R as the cosine protocol's test Spearman (the regressor's when only it ran),
both x 100; classification tasks as test accuracy in %. These are the headline numbers of
the printed tables. Drawn with matplotlib's Agg canvas (no display, no global backend
change), written atomically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from vat.errors import VatError
from vat.eval.task_scores import task_scores
from vat.eval.tasks.registry import ALL_TASKS
from vat.io import figure_class, regular_file, save_png

SHORT = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "SICKEntailment": "SICK-E"}


def headline_scores(results: Mapping) -> dict[str, float]:
    """{task: score in percent} of one results dict (SentEval layout), in task order;
    tasks without a finite score are left out (the rule: `vat.eval.task_scores`)."""
    return {task: s["value"] for task, s in task_scores(results).items()}


def run_label(results: Mapping, fallback: str) -> str:
    """'encoder (feature spec)' from a results file's _meta (older files, which name no spec
    for a checkpoint's mean of mu: 'encoder (pooling)'), else `fallback`."""
    meta = results.get("_meta", {})
    enc = str(meta.get("encoder") or fallback)
    enc = enc.split(":", 1)[-1] if enc.startswith(("vat:", "hf:", "callable:")) else enc
    name = Path(enc).name if "/" in enc else enc
    what = meta.get("features") or meta.get("pooling")
    return f"{name} ({what})" if what else name


def load_results(path: str | Path) -> dict:
    """A results JSON written by `vat evaluate`; a one-line error if it is not one."""
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
    ax.set_xticks(range(len(tasks)), [SHORT.get(t, t) for t in tasks], rotation=30, ha="right")
    ax.set_ylabel("Spearman x 100 (STS) / accuracy % (transfer)")
    ax.set_title(title or "SentEval: " + " vs ".join(scores))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    return save_png(fig, path, dpi=100, bbox_inches="tight")
