"""The sweep's outputs (docs/sweep.md): sweep.csv/.json/.md, the plots, a TensorBoard view."""

from __future__ import annotations

import csv
import io
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vat.errors import VatError, finite
from vat.experiments.config import cli_value, leaf, point_label
from vat.experiments.measure import FEATURE_COMPARE_FIELDS, GEOMETRY_FIELDS, VAL_TAGS, sts_column
from vat.feature_spec import DEFAULT_EXPORT_SPEC
from vat.features.compare import BASELINE
from vat.io import atomic_write, figure_class, save_png, temp_path, write_json_atomic

Record = dict[str, Any]


def table_columns(records: Sequence[Record], keys: Sequence[str] = ()) -> list[str]:
    """The swept keys first, then every other record key but the curves and the settings."""
    skip = ("curves", "train_settings", "measure_settings")
    cols: list[str] = list(keys)
    for r in records:
        cols += [k for k in r if k not in skip and k not in cols]
    return cols


def write_table(records: Sequence[Record], keys: Sequence[str], out: Path) -> str:
    cols = table_columns(records, keys)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in cols})
    atomic_write(out / "sweep.csv", lambda f: f.write(buf.getvalue()))
    write_json_atomic(out / "sweep.json", {"columns": cols, "runs": list(records)})
    table = markdown_table(records, keys)
    atomic_write(out / "sweep.md", lambda f: f.write(table + "\n"))
    return table


FAILED = "failed"  # a failed point's record field: its one-line reason
UNSET = "-"  # the cell of a key a point does not set
TEXT = "text"  # the format of a column shown as it is

STS_LABELS = {
    "STSBenchmark": "STS-B",
    **{f"STS1{i}": f"STS1{i}" for i in range(2, 7)},
    "SICKRelatedness": "SICK-R",
}

# record field, header, format, scale (STS is stored as a fraction, select_* x 100 already)
HEADLINE = (
    ("step", "steps", "{:d}", 1),
    ("val_kl", "val KL (nats/token)", "{:.2f}", 1),
    ("val_nll", "val NLL", "{:.3f}", 1),
    ("bleu", "BLEU", "{:.1f}", 1),
    *((sts_column(t), label, "{:.2f}", 100) for t, label in STS_LABELS.items()),
    ("geometry_active_units", "active units", "{:d}", 1),
    ("select_mu_mean", f"select {BASELINE}", "{:.2f}", 1),
    ("select_layer0_sif", f"select {DEFAULT_EXPORT_SPEC}", "{:.2f}", 1),
    ("best_contextual_spec", "best contextual spec", TEXT, 1),
    ("select_best_contextual", "select best contextual", "{:.2f}", 1),
    ("best_sentence_spec", "best sentence spec", TEXT, 1),
    ("select_best_sentence", "select best sentence", "{:.2f}", 1),
    ("best_spec", "best spec", TEXT, 1),
    ("select_best", "select best", "{:.2f}", 1),
    ("stsb_test_best", "STS-B test (best spec)", "{:.2f}", 1),
    (FAILED, FAILED, TEXT, 1),
)


def _cell(value: Any, fmt: str, scale: float) -> str:
    if fmt == TEXT:  # a reason may hold a "|", which would end the cell
        return value.replace("|", "\\|") if isinstance(value, str) and value else "-"
    if not finite(value):
        return "-"
    return fmt.format(int(value) if fmt == "{:d}" else value * scale)


def _headline_columns(records: Sequence[Record]) -> list[tuple[str, str, str, float]]:
    return [c for c in HEADLINE if any(r.get(c[0]) is not None for r in records)]


def markdown_table(records: Sequence[Record], keys: Sequence[str]) -> str:
    """One row per run: the swept key(s) and the `HEADLINE` columns measured."""
    cols = _headline_columns(records)
    header = [*keys, *(c[1] for c in cols)]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" for _ in header) + "|",
    ]
    for r in records:
        cells = [cli_value(r[k]) if k in r else UNSET for k in keys]
        cells += [_cell(r.get(c[0]), c[2], c[3]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def headline(record: Record) -> str:
    """`val KL 1.06 nats/token, val NLL 4.875, BLEU 0.0, STS-B 12.34`: a run on one line."""
    parts = []
    for field, label, fmt, scale in _headline_columns([record]):
        if field in ("step", "geometry_active_units") or (
            field in FEATURE_COMPARE_FIELDS and field != "select_best"
        ):
            continue
        label = label.replace(" (nats/token)", "")
        unit = " nats/token" if field == "val_kl" else ""
        parts.append(f"{label} {_cell(record[field], fmt, scale)}{unit}")
    return ", ".join(parts)


def _subplots(figsize: tuple[float, float]):
    fig = figure_class()(figsize=figsize)
    return fig, fig.subplots()


def _save(fig, path: Path) -> None:
    save_png(fig, path, dpi=100, bbox_inches="tight")


def plot_frontier(records: Sequence[Record], keys: Sequence[str], path: Path) -> None:
    """Reconstruction BLEU and STS against the validation KL, one labelled marker per run."""
    pts = sorted((r for r in records if finite(r.get("val_kl"))), key=lambda r: r["val_kl"])
    sts_cols = [c for c in _sts_columns(records) if any(finite(r.get(c)) for r in pts)]
    fig, ax = _subplots((7, 4.5))
    bleu = _xy(pts, "bleu")
    if bleu[0]:
        ax.plot(*bleu, "o-", color="tab:blue", label="reconstruction BLEU")
        ax.set_ylim(0, max(1.0, *bleu[1]) * 1.1)  # an all-zero BLEU stays readable
    ax.set(
        xlabel="validation KL, nats per token",
        ylabel="reconstruction BLEU (mu decoding)",
        title=f"Rate frontier: sweep over {', '.join(keys) or 'the train config'}",
    )
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    for col, style in zip(sts_cols, ("s--", "^:", "v-.", "D--", "x:", "+-.", "*--")):
        x, y = _xy(pts, col)
        ax2.plot(x, [100 * v for v in y], style, color="tab:red", label=f"{col} x 100")
    ax2.set_ylabel("STS, cosine Spearman x 100 (mean pooling)", color="tab:red")
    for r in pts:
        xy = (r["val_kl"], r.get("bleu") if finite(r.get("bleu")) else 0)
        ax.annotate(
            record_label(r, keys), xy, textcoords="offset points", xytext=(4, 6), fontsize=7
        )
    handles = [h for a in (ax, ax2) for h in a.get_legend_handles_labels()[0]]
    if handles:
        ax.legend(handles, [h.get_label() for h in handles], loc="best", fontsize=8)
    _save(fig, path)


def record_label(record: Record, keys: Sequence[str]) -> str:
    return point_label({k: record[k] for k in keys if k in record})


# the feature comparison's specs in bleu_vs_select.png: field, legend, marker, colour
SELECT_SERIES = (
    ("select_mu_mean", BASELINE, "o", "tab:blue"),
    ("select_layer0_sif", DEFAULT_EXPORT_SPEC, "s", "tab:green"),
    ("select_best_contextual", "best contextual spec", "^", "tab:red"),
    ("select_best_sentence", "best sentence/* spec", "D", "tab:purple"),
)


def plot_bleu_vs_select(records: Sequence[Record], keys: Sequence[str], path: Path) -> None:
    """BLEU against selection scores; runs are numbered, their names in a key beside the plot."""
    import textwrap

    fig, ax = _subplots((10, 5))
    named = []
    for r, ys in _select_scores(records):
        named.append(f"{len(named) + 1}  {record_label(r, keys)}")
        if len(ys) > 1:  # which three belong together
            ax.plot([r["bleu"]] * 2, [min(ys), max(ys)], "-", color="0.8", lw=0.8, zorder=0)
        ax.annotate(
            str(len(named)),
            (r["bleu"], max(ys)),
            textcoords="offset points",
            xytext=(0, 5),
            ha="center",
            fontsize=8,
        )
    for field, legend, marker, color in SELECT_SERIES:
        x, y = _xy(records, field, x="bleu")
        if x:
            ax.scatter(x, y, marker=marker, color=color, label=legend)
    for r, ls in zip([r for r in records if r.get("baseline")], ("--", ":", "-.", (0, (1, 3)))):
        ax.axhline(r["select_best"], color="0.3", lw=0.9, ls=ls, label=r["run"])
    ax.margins(x=0.06, y=0.12)
    over = ", ".join(leaf(k) for k in keys) or "the train config"
    ax.set(
        xlabel="reconstruction BLEU (mu decoding)",
        ylabel="STS12 sets + STS-B dev, Spearman x 100",
        title=textwrap.fill(f"BLEU against sentence similarity, every run (over {over})", 80),
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    wrapped = [textwrap.fill(n, 44, subsequent_indent="    ") for n in named]
    fig.text(0.70, 0.88, "\n".join(wrapped), va="top", ha="left", fontsize=7, family="monospace")
    fig.subplots_adjust(right=0.68)
    _save(fig, path)


def _select_scores(records: Sequence[Record]) -> list[tuple[Record, list[float]]]:
    scored = [(r, [r[f] for f, *_ in SELECT_SERIES if finite(r.get(f))]) for r in records]
    return [(r, ys) for r, ys in scored if ys and finite(r.get("bleu"))]


def _sts_columns(records: Sequence[Record]) -> list[str]:
    return [sts_column(t) for t in STS_LABELS if any(sts_column(t) in r for r in records)]


def _xy(records: Sequence[Record], key: str, x: str = "val_kl") -> tuple[list, list]:
    pts = [(r[x], r[key]) for r in records if finite(r.get(key)) and finite(r.get(x))]
    return [p[0] for p in pts], [p[1] for p in pts]


def curve_pair(values: Sequence[float], key: str = "model.loss.prior_std") -> tuple[float, float]:
    """Figure 2's two runs: the paper's prior stds 1.0 and 0.4 if both ran, else the extremes."""
    if (
        leaf(key) == "prior_std"
        and any(abs(s - 1.0) < 1e-9 for s in values)
        and any(abs(s - 0.4) < 1e-9 for s in values)
    ):
        return 1.0, 0.4
    return max(values), min(values)


# the paper's Figure 3 against a numeric swept key: file, y label, title, series
AGAINST_KEY = (
    (
        "fig3a_similarities.png",
        "cosine similarity",
        "Similarities against {} (Figure 3a)",
        [
            ("geometry_anisotropy", "anisotropy (random words)"),
            ("geometry_self_similarity", "self-similarity"),
            ("geometry_intra_sentence_similarity", "intra-sentence similarity"),
        ],
    ),
    (
        "fig3b_losses.png",
        "nats per token",
        "Final validation losses against {} (Figure 3b)",
        [
            ("val_nll", "reconstruction (val NLL)"),
            ("val_kl_weighted", "weighted KL"),
            ("val_loss", "total loss"),
        ],
    ),
)


def plot_all(records: Sequence[Record], keys: Sequence[str], out: Path) -> list[Path]:
    """Every plot of the runs; the baselines' rows are lines across bleu_vs_select.png."""
    written = [out / "frontier.png"]
    records, everything = [r for r in records if not r.get("baseline")], records
    plot_frontier(records, keys, written[0])
    if _select_scores(records):
        written.append(out / "bleu_vs_select.png")
        plot_bleu_vs_select(everything, keys, written[-1])
    if len(keys) != 1 or not all(finite(r.get(keys[0])) for r in records):
        return written
    key = keys[0]
    for name, ylabel, title, series in AGAINST_KEY:
        fig, ax = _subplots((6, 4))
        for col, label in series:
            ax.plot(*_xy(records, col, x=key), marker="o", label=label)
        ax.set(xlabel=key, ylabel=ylabel, title=title.format(leaf(key)))
        ax.legend()
        ax.grid(alpha=0.3)
        written.append(out / name)
        _save(fig, written[-1])
    by_value = {r[key]: r for r in records}
    fig, ax = _subplots((6, 4))
    for v, color in zip(curve_pair(list(by_value), key), ("tab:red", "tab:blue")):
        for tag, style in (("train/loss", "-"), ("val/loss", "--")):
            pts = by_value[v].get("curves", {}).get(tag) or []
            if pts:
                label = f"{leaf(key)}={v:g} {tag.split('/')[0]}"
                marker = "o" if len(pts) < 3 else None
                ax.plot(*zip(*pts), style, color=color, marker=marker, label=label)
    ax.set(xlabel="step", ylabel="loss", title="Training curves (Figure 2)")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(out / "fig2_curves.png")
    _save(fig, written[-1])
    return written


HPARAM_METRICS = (
    "val_kl",
    "bleu",
    *VAL_TAGS,
    *(f"geometry_{f}" for f in GEOMETRY_FIELDS),
    *(f for f, *_ in SELECT_SERIES),
    "select_best",
)


def _hparam(record: Record, key: str, as_text: bool) -> bool | int | float | str:
    if key not in record:
        return UNSET
    value = record[key]
    if as_text:
        return cli_value(value)
    return value if isinstance(value, bool | int | float | str) else str(value)


def _folder_name(run: object) -> str:
    """A run's name read back from a record.json, as one safe folder name."""
    name = re.sub(r"[^\w.+-]", "_", str(run))
    return "_" if name in ("", ".", "..") else name


def write_hparams(records: Sequence[Record], keys: Sequence[str], out: Path) -> Path:
    """`out/hparams/<run>/` for TensorBoard's HPARAMS tab, written to a temporary folder and
    swapped in: a failed write leaves the previous view, and no link is written through."""
    from torch.utils.tensorboard import SummaryWriter

    final = out / "hparams"
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        kind = "a symbolic link" if final.is_symlink() else "not a folder"
        raise VatError(
            f"{final} is {kind}; vat replaces only the TensorBoard folder it wrote there: "
            "remove it and run the sweep again"
        )
    tmp, old = temp_path(final), temp_path(final)
    metrics = [*HPARAM_METRICS[:2], *_sts_columns(records), *HPARAM_METRICS[2:]]
    # a key some point does not set is text in every row ("-" where unset): one type per hparam
    as_text = {k for k in keys if any(k not in r for r in records)}
    try:
        with SummaryWriter(log_dir=str(tmp)) as w:
            for r in records:
                hparams = {k: _hparam(r, k, as_text=k in as_text) for k in (*keys, "checkpoint")}
                values = {f"hparam/{m}": float(r[m]) for m in metrics if finite(r.get(m))}
                w.add_hparams(
                    hparams, values, run_name=_folder_name(r["run"]), global_step=r.get("step")
                )
        if final.exists():
            final.rename(old)
        try:
            tmp.rename(final)
        except OSError:
            if old.exists():  # the previous view back in its place, not removed below
                old.rename(final)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return final
