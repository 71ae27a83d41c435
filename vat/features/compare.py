"""The feature-spec comparison (`vat features compare`): one model's sentence vectors under every
source x weighting x post-processing, scored on the STS tasks present, fitted never on them."""

from __future__ import annotations

import csv
import io
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vat.errors import OptionError, VatError, check_count
from vat.eval.engine import EvalSettings, evaluate
from vat.eval.sts import correlations, cosine_scores
from vat.eval.tasks.registry import load_task
from vat.feature_spec import WEIGHTINGS, FeatureSpec
from vat.features.encoder import apply_post, pooled_features, pooled_ids
from vat.features.fitting import (
    DEFAULT_FIT_SENTENCES,
    FitOptions,
    count_tokens,
    fit_ids_for,
    fit_post,
    sif_weights_for,
)
from vat.io import atomic_write, figure_class, folder, remove_stale_temps, save_png, temp_path
from vat.share.loaded import LoadedVAT

POSTS = ("none", "pc1", "whiten", "whiten-half")
OUTPUT_NAMES = ("compare.csv", "compare.md", "compare.png")
STS_TASKS = ("STS12", "STSBenchmark")
CLASSIFICATION_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
SELECT = "select (STS12 sets + STS-B dev)"  # the column the rows are sorted by
BASELINE = "mu/mean/none"  # always among the classified specs, the dashed line of the plot


@dataclass(frozen=True)
class CompareSettings:
    """How the comparison fits and encodes; a bad value is an OptionError naming its field."""

    fit_sentences: int = DEFAULT_FIT_SENTENCES  # sampled for fitting every post-processing
    count_files: Sequence[str] | None = None  # to count sif's tokens in (default: the model's)
    batch_size: int = 128
    seed: int = 0  # of the fitting sample

    def __post_init__(self) -> None:
        check_count(self.fit_sentences, "fit_sentences", minimum=2)
        check_count(self.batch_size, "batch_size")
        check_count(self.seed, "seed", minimum=0)


@dataclass
class Comparison:
    """The table and how it was made; `fit_x` (the pooled fitting sentences per source x
    weighting) and `sif` let `add_classification` fit without encoding them again."""

    rows: list[dict]  # one row per spec, best first (by SELECT)
    meta: dict
    fit_x: dict[tuple[str, str], np.ndarray]
    sif: np.ndarray | None
    baselines: list[dict] = field(default_factory=list)  # rows of other encoders, never specs


def sts_scores(vectors: dict[str, np.ndarray], tasks: dict) -> dict[str, float]:
    """{column: Spearman x 100} of the cosine protocol, vectors keyed by sentence."""

    def spearman(pairs) -> float:
        a = np.stack([vectors[s] for s in pairs.a])
        b = np.stack([vectors[s] for s in pairs.b])
        return 100 * correlations(cosine_scores(a, b), pairs.y)["spearman"]

    out = {}
    for name, data in tasks.items():
        if data.kind == "sts":
            per = [spearman(pairs) for pairs in data.splits.values()]
            out.update({f"{name}.{subset}": r for subset, r in zip(data.splits, per)})
            out[name] = float(np.mean(per))
        else:  # STSBenchmark: dev and test
            out.update({f"STS-B {s}": spearman(data.splits[s]) for s in ("dev", "test")})
    return out


def selection_score(row: dict) -> float:
    """The mean of STS12's five sets and STS-B dev: the rule that chose the default spec of
    exported models (vat.feature_spec.DEFAULT_EXPORT_SPEC), blind to STS-B test."""
    cols = [k for k in row if k.startswith("STS12.")] + [k for k in row if k == "STS-B dev"]
    return float(np.mean([row[c] for c in cols])) if cols else float("nan")


def baseline_row(name: str, encode, tasks: dict) -> dict:
    """The row of another encoder (sentences -> (n, D) vectors, e.g. a bag of same-data word
    vectors, vat.eval.word_vectors), scored on `tasks` exactly as the specs are."""
    sentences = sorted({s for data in tasks.values() for s in data.sentences()})
    row = {"spec": name, **sts_scores(dict(zip(sentences, encode(sentences))), tasks)}
    row[SELECT] = selection_score(row)
    return row


def load_sts_tasks(data_dir: str | os.PathLike) -> dict:
    """The STS_TASKS found under `data_dir` (a missing one is a warning)."""
    tasks = {}
    for t in STS_TASKS:
        try:
            tasks[t] = load_task(data_dir, t)
        except VatError as e:
            print(f"warning: skipping {e}", file=sys.stderr)
    if not tasks:
        raise VatError(f"no STS task (STS12, STSBenchmark) under {data_dir}")
    return tasks


def compare_sts(
    loaded: LoadedVAT,
    tasks: dict,
    fit_files: Sequence[str] | None,
    settings: CompareSettings,
    name: str = "",
    baselines: Sequence[tuple[str, Callable]] = (),
) -> Comparison:
    """Score every spec of `loaded` on the STS `tasks`, post-processing fitted on a sample of
    `fit_files` (kept clear of the evaluation data by the caller), else the checkpoint's; each
    (name, encoder) of `baselines` adds a row beside them."""
    model, tok = loaded.model, loaded.tokenizer
    n_layers, vocab = len(model.encoder), model.config.vocab_size
    t0 = time.perf_counter()
    fit = FitOptions(fit_files=fit_files, n_fit=settings.fit_sentences, seed=settings.seed)
    fit_sents, fit_info = fit_ids_for(loaded, fit)
    t_read = time.perf_counter() - t0
    counts = loaded.token_counts
    if settings.count_files:
        counts = count_tokens(tok, settings.count_files, vocab)
    if counts is None:
        print(
            "warning: no token frequencies stored in the checkpoint and no --count-files: "
            "sif weighting left out",
            file=sys.stderr,
        )
    sif = None if counts is None else sif_weights_for(counts, vocab)
    # every source x weighting pair: precision weights only mu, sif needs token counts
    sources = ["mu", *(f"layer{k}" for k in range(n_layers + 1)), "firstlast"]
    combos = [(s, w) for s in sources for w in WEIGHTINGS if w != "precision" or s == "mu"]
    combos = [(s, w) for s, w in combos if w != "sif" or sif is not None]
    if model.config.sentence_dim:  # one vector per sentence: no weighting to choose
        combos.append(("sentence", "mean"))
    eval_sents = sorted({s for data in tasks.values() for s in data.sentences()})
    t0 = time.perf_counter()
    fit_x = pooled_ids(model, fit_sents, combos, sif, settings.batch_size)
    t1 = time.perf_counter()
    eval_in = [s or "." for s in eval_sents]
    eval_x = pooled_features(model, tok, eval_in, combos, sif, settings.batch_size)
    t_fit_encode, t_eval_encode = t1 - t0, time.perf_counter() - t1
    print(
        f"vat: encoded {len(fit_sents)} fitting sentences ({t_fit_encode:.1f} s, "
        f"{len(combos)} source x weighting at once) and {len(eval_sents)} evaluation sentences "
        f"({t_eval_encode:.1f} s)",
        file=sys.stderr,
    )
    rows = []
    for combo in combos:
        for post in POSTS:
            width = FeatureSpec(*combo).width(model.config)
            spec = FeatureSpec(*combo, f"whiten{width // 2}" if post == "whiten-half" else post)
            t0 = time.perf_counter()
            arrays = fit_post(spec, fit_x[combo])
            t_fit = time.perf_counter() - t0
            vecs = apply_post(spec, arrays, eval_x[combo])
            row = {"spec": str(spec), **sts_scores(dict(zip(eval_sents, vecs)), tasks)}
            row[SELECT] = selection_score(row)
            row["fit s"] = round(t_fit, 3) if post != "none" else 0.0
            row["fit sentences"] = len(fit_sents) if post != "none" else 0
            rows.append(row)
    rows.sort(key=lambda r: -r[SELECT])
    meta = {
        "model": name,
        "fit_from": fit_info["from"],
        "fit_files": [str(f) for f in fit_files or []],
        "fit_sentences": len(fit_sents),
        "read_s": round(t_read, 2),
        "fit_encode_s": round(t_fit_encode, 2),
        "combos_encoded": len(combos),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    others = [baseline_row(label, encode, tasks) for label, encode in baselines]
    return Comparison(rows, meta, fit_x, sif, others)


def add_classification(
    comparison: Comparison, loaded: LoadedVAT, data_dir: str | os.PathLike, batch_size: int = 128
) -> None:
    """Add the SentEval accuracy (logreg, prototyping) of the classification tasks present to
    the rows of mean-of-mu and the three best specs, each fitted as in the STS table."""
    rows, fit_x = comparison.rows, comparison.fit_x
    tasks = []
    for t in CLASSIFICATION_TASKS:
        try:
            tasks.append(load_task(data_dir, t))
        except VatError:
            pass
    if not tasks:
        print("warning: no classification task found", file=sys.stderr)
        return
    base = next(r for r in rows if r["spec"] == BASELINE)
    chosen = [base] + [r for r in rows if r is not base][:3]
    specs = [FeatureSpec.parse(r["spec"]) for r in chosen]
    combos = sorted({(s.source, s.weighting) for s in specs})
    sents = sorted({s for data in tasks for s in data.sentences()})
    t0 = time.perf_counter()
    texts = [s or "." for s in sents]
    x = pooled_features(loaded.model, loaded.tokenizer, texts, combos, comparison.sif, batch_size)
    print(
        f"vat: encoded {len(sents)} classification sentences in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    names, settings = [d.name for d in tasks], EvalSettings(progress=False, batch_size=4096)
    for row, spec in zip(chosen, specs):
        pair = (spec.source, spec.weighting)
        vecs = apply_post(spec, fit_post(spec, fit_x[pair]), x[pair])
        lookup = dict(zip(sents, vecs))
        if "" in lookup:  # the harness passes an empty sentence as ".", which encoded it
            lookup.setdefault(".", lookup[""])
        res, _ = evaluate(
            lambda b, lookup=lookup: np.stack([lookup[s] for s in b]), names, data_dir, settings
        )
        row.update({t: res[t]["acc"] for t in names})


def _columns(rows: list[dict]) -> list[str]:
    """Every key of the rows, in first-seen order."""
    return list(dict.fromkeys(k for r in rows for k in r))


def compare_markdown(rows: list[dict], meta: dict) -> str:
    """compare.md: how it was measured, then one row per spec (STS12's sets: compare.csv only)."""
    show = [c for c in _columns(rows) if not c.startswith("STS12.")]
    fit_source = ", ".join(meta.get("fit_files") or []) or meta.get(
        "fit_from", "the fitting sample"
    )
    md = [
        f"Feature specs of `{meta['model']}` ({meta['date']}), Spearman x 100 (cosine); sorted "
        f"by the mean of STS12's five sets and STS-B dev. Post-processing fitted on "
        f"{meta['fit_sentences']} sentences of {fit_source}; encoding them "
        f"for all {meta['combos_encoded']} source x weighting pairs took "
        f"{meta['fit_encode_s']} s (reading {meta['read_s']} s).",
        "",
        "| " + " | ".join(show) + " |",
        "|" + "|".join("---" if c == "spec" else "---:" for c in show) + "|",
    ]
    for r in rows:
        cells = [f"{r[c]:.2f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in show]
        md.append("| " + " | ".join(cells) + " |")
    return "\n".join(md)


def _plot(rows: list[dict], path: Path, baselines: Sequence[dict] = ()) -> None:
    """compare.png: the selection score of every spec, one bar per post-processing; the
    baselines' as lines across."""
    posts = ["none", "pc", "whiten", "whiten-half"]

    def post_of(spec: str) -> str:  # POSTS, with whiten-half's dimension and pc's count
        p = spec.split("/")[2]
        return "pc" if p.startswith("pc") else p if p in posts else "whiten-half"

    score = {("/".join(r["spec"].split("/")[:2]), post_of(r["spec"])): r[SELECT] for r in rows}
    pairs = sorted({sw for sw, _ in score})
    fig = figure_class()(figsize=(max(8, 0.35 * len(pairs)), 4.5))
    ax = fig.subplots()
    width = 0.8 / len(posts)
    for i, post in enumerate(posts):
        vals = [score.get((sw, post), np.nan) for sw in pairs]
        ax.bar(np.arange(len(pairs)) + (i - 1.5) * width, vals, width, label=post)
    base = next((r for r in rows if r["spec"] == BASELINE), None)
    if base:
        ax.axhline(base[SELECT], color="k", lw=0.8, ls="--", label=BASELINE)
    for row, color in zip(baselines, ("tab:red", "tab:purple", "tab:brown", "tab:gray")):
        ax.axhline(row[SELECT], color=color, lw=0.8, ls=":", label=row["spec"])
    ax.set_xticks(np.arange(len(pairs)), pairs, rotation=70, fontsize=7)
    ax.set_ylabel("mean of STS12 sets + STS-B dev (Spearman x 100)")
    ax.legend(fontsize=7, ncol=5)
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def _write(rows: list[dict], meta: dict, where: Path, baselines: Sequence[dict] = ()) -> None:
    """The three files of the set, into the folder `where`; baselines after the specs."""
    plotted, rows = rows, [*rows, *baselines]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=_columns(rows), lineterminator="\n")
    w.writeheader()
    w.writerows({k: f"{v:.2f}" if isinstance(v, float) else v for k, v in r.items()} for r in rows)
    atomic_write(where / OUTPUT_NAMES[0], lambda f: f.write(buf.getvalue()))
    md = compare_markdown(rows, meta)
    atomic_write(where / OUTPUT_NAMES[1], lambda f: f.write(md + "\n"))
    _plot(plotted, where / OUTPUT_NAMES[2], baselines)


def check_output_set(directory: str, overwrite: bool) -> Path:
    """The absolute --output-dir, refused before any work when it cannot be replaced whole."""
    if not str(directory).strip():
        raise OptionError("output_dir", "is empty; name a folder for the compare files")
    shown = Path(directory)
    if shown.exists() or shown.is_symlink():
        folder(shown, "--output-dir")  # never a file, a FIFO, a device or a dangling link
    if shown.is_symlink():  # the swap would replace the link itself, not the folder it names
        raise VatError(f"--output-dir {shown} is a symbolic link; name the folder itself")
    out = Path(os.path.abspath(shown))  # `..` and `a/..` by their folder
    if out.is_dir() and Path.cwd().resolve().is_relative_to(out.resolve()):
        raise VatError(
            f"--output-dir {shown} is the current folder or contains it, which the compare "
            f"set cannot replace; name a new folder, e.g. {shown / 'feature-compare'}"
        )
    _check_own_files(out, shown)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        names = ", ".join(sorted(p.name for p in out.iterdir()))
        raise VatError(
            f"--output-dir {shown} already holds a compare set ({names}); pass --overwrite "
            "to replace it"
        )
    return out


def _check_own_files(out: Path, shown: Path) -> None:
    """`out` holds nothing but plain compare files (what this command writes)."""
    foreign = sorted(
        p.name
        for p in (out.iterdir() if out.is_dir() else ())
        if p.name not in OUTPUT_NAMES or p.is_symlink() or not p.is_file()
    )
    if foreign:
        raise VatError(
            f"--output-dir {shown} holds files vat features compare did not write "
            f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); the set replaces "
            f"the whole folder, so name a new one, e.g. {shown / 'feature-compare'}"
        )


def write_compare_set(out: Path, comparison: Comparison) -> None:
    """The compare set, written into a temporary folder that then replaces `out` whole, so an
    interrupted run leaves the old set or the new one."""
    from vat.share.folder import replace_dir

    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent)  # temp folders of dead vat processes only
    _check_own_files(out, out)  # again at the swap: nothing added meanwhile is removed
    tmp = temp_path(out)
    tmp.mkdir()
    try:
        _write(comparison.rows, comparison.meta, tmp, comparison.baselines)
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
