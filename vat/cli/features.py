"""Feature-spec options of `vat evaluate`, and `vat features compare`.

    vat evaluate --ckpt last.ckpt --tasks sts --features firstlast/sif/pc1
    vat features compare --ckpt last.ckpt --output-dir feature-compare [--classification]

`compare` scores every combination of source x weighting x post-processing on the STS tasks
present (STS12, STS-B dev and test; optionally the classification tasks for the best
three), writing `compare.csv`, `compare.md` and `compare.png` and printing the table of
`compare.md` on stdout at the end (notes and bars go to stderr): the three are written into a
temporary folder beside --output-dir, which then replaces it whole, so an interrupted run
leaves the old set or the new one, never a mix. --output-dir is the command's own folder:
one holding anything else (a run folder, the current folder) is refused. Every
post-processing is
fitted on a sample of the checkpoint's own training sentences (or --fit-files), never on
the evaluation sentences; the fitting cost (seconds, sentences) is in the table.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vat.cli.common import add_model_option, add_train_data_dir
from vat.errors import OptionError, VatError, check_count, run_cli
from vat.io import folder, remove_stale_temps, temp_path

if TYPE_CHECKING:
    from vat.features.fitting import FitOptions

WEIGHTINGS = ("mean", "sum", "start", "precision", "sif")
POSTS = ("none", "pc1", "whiten", "whiten-half")
OUTPUT_NAMES = ("compare.csv", "compare.md", "compare.png")


# -- vat evaluate's options ----------------------------------------------------------------
def add_feature_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("feature spec (vat checkpoints; see vat.feature_spec)")
    g.add_argument(
        "--features",
        metavar="SPEC",
        default=None,
        help="SOURCE/WEIGHTING/POST, e.g. mu/sif/pc1 or firstlast/mean/whiten64; replaces "
        "--pooling. Post-processing is fitted on unlabeled sentences: by default a sample of "
        "the checkpoint's own training files, stored beside the checkpoint",
    )
    g.add_argument(
        "--fit-files",
        nargs="+",
        metavar="FILE",
        default=None,
        help="fit the post-processing on these text files (one sentence a line) instead",
    )
    g.add_argument(
        "--fit-sentences",
        type=int,
        default=20_000,
        metavar="N",
        help="sentences sampled for fitting (default 20000)",
    )
    g.add_argument(
        "--count-files",
        nargs="+",
        metavar="FILE",
        default=None,
        help="count token frequencies for sif weighting in these text files (for checkpoints "
        "that store none)",
    )
    g.add_argument(
        "--fit-transductive",
        action="store_true",
        help="allow fitting on the evaluation data: on --fit-files inside --data-dir, or, "
        "without --fit-files, on the sentences of the tasks being evaluated (not stored)",
    )
    add_train_data_dir(g)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def check_not_evaluation_data(files: Sequence[str], data_dir: str, option: str) -> None:
    """Refuse fitting files that lie in the evaluation data folder."""
    from vat.data.corpus import expand_files

    for f in expand_files(list(files), option):
        if _inside(f, Path(data_dir)):
            raise VatError(
                f"{option}: {f} lies in the evaluation data ({data_dir}); fitting on the "
                "evaluation sentences needs --fit-transductive"
            )


def fit_options(args: argparse.Namespace, tasks: Sequence[str], loaded) -> tuple[FitOptions, bool]:
    """What `vat evaluate --features` fits on (vat.features.fitting.FitOptions), and whether
    the fit is stored beside the model, with the guard against evaluation data."""
    from vat.features.fitting import FitOptions

    if args.fit_sentences < 2:
        raise VatError(f"--fit-sentences must be >= 2, got {args.fit_sentences}")
    common = {
        "n_fit": args.fit_sentences,
        "train_data_dir": args.train_data_dir,
        "count_files": args.count_files or None,
    }
    if args.fit_files:
        if not args.fit_transductive:
            check_not_evaluation_data(args.fit_files, args.data_dir, "--fit-files")
        info = {"transductive": bool(args.fit_transductive)}
        return FitOptions(fit_files=args.fit_files, info=info, **common), True
    if args.fit_transductive:
        from vat.eval.tasks.registry import load_task

        sentences = sorted({s for t in tasks for s in load_task(args.data_dir, t).sentences()})
        info = {"from": f"evaluation tasks {','.join(tasks)}", "transductive": True}
        # a transductive fit never becomes the checkpoint's stored default: not saved
        return FitOptions(fit_sentences=sentences, info=info, **common), False
    from vat.feature_spec import FeatureSpec
    from vat.features.choice import stored_features
    from vat.features.fitting import training_files

    spec = FeatureSpec.parse(args.features)
    # statistics stored with the model are used as they are (check_fitted guards them);
    # only a fit still to come reads the training files
    if spec.post != "none" and stored_features(loaded, spec) is None:
        check_not_evaluation_data(
            training_files(loaded, "fit_files", args.train_data_dir),
            args.data_dir,
            "the checkpoint's training files",
        )
    return FitOptions(**common), True


def check_fitted(fitted, args: argparse.Namespace) -> None:
    """A stored statistics file fitted transductively is refused without the flag."""
    if fitted.fit.get("transductive") and not args.fit_transductive:
        raise VatError(
            f"the statistics of {fitted.spec} were fitted on evaluation data (transductive); "
            "pass --fit-transductive to use them, or refit with --fit-files"
        )


# -- vat features compare ------------------------------------------------------------------
def sources_of(n_layers: int) -> list[str]:
    return ["mu", *(f"layer{k}" for k in range(n_layers + 1)), "firstlast"]


def combos_of(n_layers: int, sif: bool) -> list[tuple[str, str]]:
    out = []
    for s in sources_of(n_layers):
        for w in WEIGHTINGS:
            if (w == "precision" and s != "mu") or (w == "sif" and not sif):
                continue
            out.append((s, w))
    return out


def post_spec(post: str, d: int) -> str:
    return f"whiten{d // 2}" if post == "whiten-half" else post


def build_parser() -> argparse.ArgumentParser:
    from vat.cli.common import Parser

    p = Parser(
        prog="vat features compare",
        description="Score every feature spec (source x weighting x post-processing) of one "
        "checkpoint on the STS tasks present; write a table (CSV, markdown) and a plot.",
    )
    p.add_argument("command", choices=["compare"], help="compare: the sweep over specs")
    add_model_option(p)
    p.add_argument("--output-dir", required=True, help="folder for compare.csv/.md/.png")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    p.add_argument("--data-dir", default=None, help="SentEval data/downstream folder")
    p.add_argument(
        "--classification",
        action="store_true",
        help="also run MR, CR, SUBJ, MPQA, SST2, TREC, MRPC for mean-of-mu and the best three",
    )
    p.add_argument("--fit-files", nargs="+", default=None, metavar="FILE")
    p.add_argument("--fit-sentences", type=int, default=20_000, metavar="N")
    p.add_argument("--count-files", nargs="+", default=None, metavar="FILE")
    add_train_data_dir(p)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0, help="seed of the fitting sample")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def sts_scores(vectors: dict[str, np.ndarray], tasks: dict) -> dict[str, float]:
    """{column: Spearman x 100} of the cosine protocol, vectors keyed by sentence."""
    from vat.eval.sts import correlations, cosine_scores

    out = {}
    for name, data in tasks.items():
        if data.kind == "sts":
            per = []
            for subset, pairs in data.splits.items():
                a = np.stack([vectors[s] for s in pairs.a])
                b = np.stack([vectors[s] for s in pairs.b])
                rho = correlations(cosine_scores(a, b), pairs.y)["spearman"]
                out[f"{name}.{subset}"] = 100 * rho
                per.append(100 * rho)
            out[name] = float(np.mean(per))
        else:  # STSBenchmark: dev and test
            for split in ("dev", "test"):
                pairs = data.splits[split]
                a = np.stack([vectors[s] for s in pairs.a])
                b = np.stack([vectors[s] for s in pairs.b])
                out[f"STS-B {split}"] = 100 * correlations(cosine_scores(a, b), pairs.y)["spearman"]
    return out


def selection_score(row: dict) -> float:
    """The mean of STS12's five sets and STS-B dev (the choice rule of issue 23)."""
    cols = [k for k in row if k.startswith("STS12.")]
    cols += ["STS-B dev"] if "STS-B dev" in row else []
    return float(np.mean([row[c] for c in cols])) if cols else float("nan")


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from vat.data.paths import default_senteval_dir
    from vat.eval.tasks.registry import load_task
    from vat.feature_spec import FeatureSpec
    from vat.features.encoder import apply_post, pooled_features
    from vat.features.fitting import count_tokens, fit_post, sample_lines, training_files
    from vat.features.postprocess import sif_weights
    from vat.io import atomic_write
    from vat.share.resolve import load_model

    data_dir = args.data_dir or str(default_senteval_dir())
    # every check before the minutes of encoding, not at the first write
    check_count(args.fit_sentences, "fit_sentences", minimum=2)  # a fit needs two rows
    check_count(args.batch_size, "batch_size")
    check_count(args.seed, "seed", minimum=0)  # numpy's seeds are non-negative
    out_dir = check_output_set(args.output_dir, args.overwrite)
    tasks = {}
    for t in ("STS12", "STSBenchmark"):
        try:
            tasks[t] = load_task(data_dir, t)
        except VatError as e:
            print(f"warning: skipping {e}", file=sys.stderr)
    if not tasks:
        raise VatError(f"no STS task (STS12, STSBenchmark) under {data_dir}")
    loaded = load_model(args.model)  # read once; everything below takes the loaded model
    model, tok = loaded.model, loaded.tokenizer
    n_layers, d = len(model.encoder), model.config.d_model

    fit_files = args.fit_files or training_files(loaded, "fit_files", args.train_data_dir)
    check_not_evaluation_data(fit_files, data_dir, "fit files")
    t0 = time.perf_counter()
    fit_sents = sample_lines(fit_files, args.fit_sentences, args.seed)
    t_read = time.perf_counter() - t0
    counts = (
        count_tokens(tok, args.count_files, model.config.vocab_size)
        if args.count_files
        else loaded.token_counts
    )
    if counts is None:
        print(
            "warning: no token frequencies stored in the checkpoint and no --count-files: "
            "sif weighting left out",
            file=sys.stderr,
        )
    sif = None
    if counts is not None:
        full = np.zeros(model.config.vocab_size)
        full[: min(len(counts), len(full))] = counts[: len(full)]
        sif = sif_weights(full)
    combos = combos_of(n_layers, sif is not None)
    eval_sents = sorted({s for data in tasks.values() for s in data.sentences()})
    t0 = time.perf_counter()
    fit_x = pooled_features(model, tok, fit_sents, combos, sif, args.batch_size)
    t_fit_encode = time.perf_counter() - t0
    t0 = time.perf_counter()
    eval_in = [s or "." for s in eval_sents]
    eval_x = pooled_features(model, tok, eval_in, combos, sif, args.batch_size)
    t_eval_encode = time.perf_counter() - t0
    print(
        f"vat: encoded {len(fit_sents)} fitting sentences ({t_fit_encode:.1f} s, "
        f"{len(combos)} source x weighting at once) and {len(eval_sents)} evaluation sentences "
        f"({t_eval_encode:.1f} s)",
        file=sys.stderr,
    )
    rows = []
    for source, weighting in combos:
        for post in POSTS:
            spec = FeatureSpec(source, weighting, post_spec(post, d))
            t0 = time.perf_counter()
            arrays = fit_post(spec, fit_x[(source, weighting)])
            t_fit = time.perf_counter() - t0
            vecs = apply_post(spec, arrays, eval_x[(source, weighting)])
            lookup = dict(zip(eval_sents, vecs))
            row = {"spec": str(spec), **sts_scores(lookup, tasks)}
            row["select (STS12 sets + STS-B dev)"] = selection_score(row)
            row["fit s"] = round(t_fit, 3) if post != "none" else 0.0
            row["fit sentences"] = len(fit_sents) if post != "none" else 0
            rows.append(row)
    rows.sort(key=lambda r: -r["select (STS12 sets + STS-B dev)"])
    meta = {
        "model": str(args.model),
        "fit_files": [str(f) for f in fit_files],
        "fit_sentences": len(fit_sents),
        "read_s": round(t_read, 2),
        "fit_encode_s": round(t_fit_encode, 2),
        "combos_encoded": len(combos),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    write_output_set(out_dir, lambda tmp: _write(rows, meta, tmp, atomic_write))
    if args.classification:  # the STS table is on disk first: classification takes longer
        print("vat: STS table written; classification tasks next", file=sys.stderr)
        _classification(rows, loaded, args, data_dir, sif, fit_x)
        write_output_set(out_dir, lambda tmp: _write(rows, meta, tmp, atomic_write))
    for name in OUTPUT_NAMES:
        print(f"wrote {Path(args.output_dir) / name}", file=sys.stderr)
    print(compare_markdown(rows, meta))  # the result, on stdout: the table compare.md holds
    return 0


# -- the output folder: written whole -------------------------------------------------------
def check_output_set(directory: str, overwrite: bool) -> Path:
    """The absolute --output-dir, refused before any work when it cannot be replaced whole:
    not a folder (a file, a FIFO, a link: vat replaces links, never writes through them),
    the current folder or one containing it (replacing it would pull the folder from under
    this process and its shell), a folder holding anything but the compare files, or earlier
    compare files without --overwrite."""
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
    if not out.is_dir():
        return
    foreign = sorted(
        p.name
        for p in out.iterdir()
        if p.name not in OUTPUT_NAMES or p.is_symlink() or not p.is_file()
    )
    if foreign:
        raise VatError(
            f"--output-dir {shown} holds files vat features compare did not write "
            f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); the set replaces "
            f"the whole folder, so name a new one, e.g. {shown / 'feature-compare'}"
        )


def write_output_set(out: Path, write: Callable[[Path], None]) -> None:
    """Write the compare set into a fresh temporary folder beside `out` and swap it in
    whole (vat.share.folder.replace_dir); the temporary folder never outlives the call (an
    interrupt included), and one left by a killed run is removed by the next."""
    from vat.share.folder import replace_dir

    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out.parent)  # temp folders of dead vat processes only
    _check_own_files(out, out)  # again at the swap: nothing added meanwhile is removed
    tmp = temp_path(out)
    tmp.mkdir()
    try:
        write(tmp)
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _classification(rows, loaded, args, data_dir, sif, fit_x) -> None:
    """Classification accuracy (SentEval logreg, prototyping preset) for mean-of-mu and the
    three best specs. The tasks' sentences are encoded once for every source x weighting
    needed; each spec then only applies its post-processing."""
    from vat.eval.engine import EvalSettings, evaluate
    from vat.eval.tasks.registry import load_task
    from vat.feature_spec import FeatureSpec
    from vat.features.encoder import apply_post, pooled_features
    from vat.features.fitting import fit_post

    tasks = []
    for t in ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"):
        try:
            tasks.append(load_task(data_dir, t))
        except VatError:
            pass
    if not tasks:
        print("warning: no classification task found", file=sys.stderr)
        return
    base = next(r for r in rows if r["spec"] == "mu/mean/none")
    chosen = [base] + [r for r in rows if r is not base][:3]
    specs = [FeatureSpec.parse(r["spec"]) for r in chosen]
    combos = sorted({(s.source, s.weighting) for s in specs})
    sents = sorted({s for data in tasks for s in data.sentences()})
    t0 = time.perf_counter()
    x = pooled_features(
        loaded.model, loaded.tokenizer, [s or "." for s in sents], combos, sif, args.batch_size
    )
    print(
        f"vat: encoded {len(sents)} classification sentences in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )
    names = [d.name for d in tasks]
    for row, spec in zip(chosen, specs):
        pair = (spec.source, spec.weighting)
        vecs = apply_post(spec, fit_post(spec, fit_x[pair]), x[pair])
        lookup = dict(zip(sents, vecs))
        if "" in lookup:  # the harness passes an empty sentence as ".", which encoded it
            lookup.setdefault(".", lookup[""])
        res, _ = evaluate(
            lambda batch, lookup=lookup: np.stack([lookup[s] for s in batch]),
            names,
            data_dir,
            EvalSettings(progress=False, batch_size=4096),
        )
        for t in names:
            row[t] = res[t]["acc"]


def _write(rows: list[dict], meta: dict, where: Path, atomic_write) -> None:
    outputs = [where / name for name in OUTPUT_NAMES]
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write(outputs[0], lambda f: f.write(buf.getvalue()))
    md = compare_markdown(rows, meta)
    atomic_write(outputs[1], lambda f: f.write(md + "\n"))
    _plot(rows, outputs[2])


def compare_markdown(rows: list[dict], meta: dict) -> str:
    """compare.md: a sentence on how it was measured, then one row per spec, best first
    (STS12's five sets are in compare.csv only)."""
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    show = [c for c in cols if not c.startswith("STS12.")]
    md = [
        f"Feature specs of `{meta['model']}` ({meta['date']}), Spearman x 100 (cosine); sorted "
        f"by the mean of STS12's five sets and STS-B dev. Post-processing fitted on "
        f"{meta['fit_sentences']} sentences of {', '.join(meta['fit_files'])}; encoding them "
        f"for all {meta['combos_encoded']} source x weighting pairs took "
        f"{meta['fit_encode_s']} s (reading {meta['read_s']} s).",
        "",
        "| " + " | ".join(show) + " |",
        "|" + "|".join("---" if c == "spec" else "---:" for c in show) + "|",
    ]
    for r in rows:
        cells = [
            (f"{r[c]:.2f}" if isinstance(r.get(c), float) else str(r.get(c, ""))) for c in show
        ]
        md.append("| " + " | ".join(cells) + " |")
    return "\n".join(md)


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vat.io import atomic_write

    posts = ["none", "pc", "whiten", "whiten-half"]

    def post_of(spec: str) -> str:
        p = spec.split("/")[2]
        if p.startswith("pc"):
            return "pc"
        return "whiten" if p == "whiten" else ("whiten-half" if p.startswith("whiten") else "none")

    pairs = []
    for r in rows:
        sw = "/".join(r["spec"].split("/")[:2])
        if sw not in pairs:
            pairs.append(sw)
    pairs.sort()
    fig, ax = plt.subplots(figsize=(max(8, 0.35 * len(pairs)), 4.5))
    width = 0.8 / len(posts)
    for i, post in enumerate(posts):
        vals = []
        for sw in pairs:
            got = [
                r["select (STS12 sets + STS-B dev)"]
                for r in rows
                if "/".join(r["spec"].split("/")[:2]) == sw and post_of(r["spec"]) == post
            ]
            vals.append(got[0] if got else np.nan)
        ax.bar(np.arange(len(pairs)) + (i - 1.5) * width, vals, width, label=post)
    base = next((r for r in rows if r["spec"] == "mu/mean/none"), None)
    if base:
        ax.axhline(
            base["select (STS12 sets + STS-B dev)"],
            color="k",
            lw=0.8,
            ls="--",
            label="mu/mean/none",
        )
    ax.set_xticks(np.arange(len(pairs)), pairs, rotation=70, fontsize=7)
    ax.set_ylabel("mean of STS12 sets + STS-B dev (Spearman x 100)")
    ax.legend(fontsize=7, ncol=5)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write(path, lambda f: f.write(buf.getvalue()), binary=True)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
