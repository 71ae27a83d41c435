"""`vat evaluate`: SentEval-style evaluation of a vat model or any encoder; results are JSON in
SentEval's layout (docs/evaluate.md)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from vat.cli.common import (
    Parser,
    add_batch_size,
    add_common,
    add_data_dir,
    add_model_option,
    add_output,
    add_renamed,
    finite,
    show_progress,
    whole,
)
from vat.cli.features import add_feature_options
from vat.data.paths import default_senteval_dir
from vat.errors import VatError, run_cli
from vat.eval.tasks.files import MissingTaskData
from vat.eval.tasks.registry import ALL_TASKS, TASK_GROUPS, TaskChoice, choose_tasks
from vat.io import check_output_file, figure_class, write_json_atomic
from vat.runtime import resolve_device


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vat evaluate",
        description="SentEval-compatible evaluation (STS and transfer tasks) of a sentence "
        "encoder.",
        epilog=f"Tasks: {', '.join(ALL_TASKS)}. Groups: "
        + "; ".join(f"{g} = {','.join(t)}" for g, t in TASK_GROUPS.items())
        + ". See docs/evaluate.md.",
    )
    enc = p.add_mutually_exclusive_group(required=True)
    add_model_option(enc, required=False)
    enc.add_argument(
        "--encoder",
        metavar="FILE:FUNC",
        help="Python file and function: f(list[str]) -> array (n, d). The file is "
        "imported, i.e. EXECUTED as Python code: only pass files you trust",
    )
    enc.add_argument("--hf-model", metavar="DIR", help="local Hugging Face encoder (transformers)")
    enc.add_argument(
        "--word-vectors",
        metavar="FILE",
        help="a bag of word vectors (GloVe/word2vec text format, header optional, plain or .gz): "
        "each sentence is the mean of its known tokens' vectors, SIF-weighted with "
        "--word-counts (a / (a + p(w)), a = 1e-3; no common-component removal); tokens: "
        r"re.findall(r'\w+|[^\w\s]', text.lower()), unknown ones skipped, none known: zeros",
    )
    p.add_argument(
        "--tasks",
        default="all",
        help="comma-separated task names (any case, or as the tables print them) and/or groups "
        "sts, transfer, all; a group runs those present, a named task must be there",
    )
    p.add_argument(
        "--word-counts",
        metavar="FILE",
        help="with --word-vectors: `word count` lines (vat baseline word-vectors writes them); "
        "p(w) = count / total",
    )
    add_data_dir(p)
    add_output(p, "JSON results file (written atomically)")
    p.add_argument(
        "--pooling",
        help="vat: pool mu by mean | sum | start | precision (default: the model's own vectors, "
        "docs/features.md); HF: mean (default) | cls",
    )
    p.add_argument(
        "--preset",
        choices=["prototyping", "full"],
        default="prototyping",
        help="SentEval classifier preset: prototyping (kfold 5, rmsprop) or full (kfold 10, adam)",
    )
    p.add_argument(
        "--classifier", choices=["logreg", "mlp"], default="logreg", help="mlp: one hidden layer"
    )
    p.add_argument("--nhid", type=whole(1), default=50, help="hidden units of --classifier mlp")
    p.add_argument(
        "--relatedness",
        choices=["cosine", "regressor", "both"],
        default="cosine",
        help="STS-B/SICK-R: cosine (default), SentEval's trained regressor, or both",
    )
    p.add_argument("--seed", type=whole(0, 2**32 - 1), default=1111, help="(default 1111)")
    add_batch_size(p, 128)
    p.add_argument("--skip-missing", action="store_true", help="skip named tasks lacking data")
    p.add_argument("--finetune", action="store_true", help="fine-tune encoder + a dense layer")
    p.add_argument("--strict", action="store_true", help="exit 1 on a degenerate encoder, not warn")
    p.add_argument("--epochs", type=whole(1), default=5, help="fine-tuning epochs")
    p.add_argument("--lr", type=finite(positive=True), default=1e-4, help="fine-tuning Adam lr")
    add_common(p)
    add_feature_options(p)
    plot = p.add_argument("--plot", metavar="PNG", help="write a bar chart of the scores")
    add_renamed(p, "--plots", plot)  # an older spelling (docs/cli.md)
    p.add_argument(
        "--compare", nargs="+", metavar="JSON", default=[], help="--output files to plot too"
    )
    return p


def json_safe(x: object) -> object:
    """JSON-safe: NaN/inf -> null, numpy scalars -> Python."""
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, str):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _pct(x: object) -> str:
    return f"{100 * float(x):.2f}" if x is not None and math.isfinite(float(x)) else "—"


def format_table(results: dict) -> str:
    """Paper-style tables (Tables 4 and 5): Spearman x 100 for STS, accuracy for transfer."""
    lines: list[str] = []
    sts = {  # column: (mean of sets, concatenated)
        t: (results[t]["all"]["spearman"]["mean"], results[t]["all"]["spearman"].get("all"))
        for t in ("STS12", "STS13", "STS14", "STS15", "STS16")
        if t in results
    }
    for t, label in (("STSBenchmark", "STS-B"), ("SICKRelatedness", "SICK-R")):
        if f"{t}-cosine" in results:
            sts[label] = (results[f"{t}-cosine"]["test"]["spearman"],) * 2
        elif t in results:
            sts[label + " (reg)"] = (results[t]["spearman"],) * 2
    if sts:
        width = max(8, *(len(c) + 1 for c in sts))
        lines.append(
            "STS, Spearman x 100 (cosine similarity; "
            "STS12-16: SentEval all.spearman.mean / concatenated 'all')"
        )
        lines.append(f"{'':14}" + "".join(f"{c:>{width}}" for c in sts) + f"{'Avg.':>{width}}")
        for i, name in enumerate(("mean of sets", "concatenated")):
            row = [pair[i] for pair in sts.values()]
            vals = [v for v in row if v is not None and math.isfinite(v)]
            avg = sum(vals) / len(vals) if vals else None
            cells = [*map(_pct, row), _pct(avg)]
            lines.append(f"{name:14}" + "".join(f"{c:>{width}}" for c in cells))
    transfer = ("MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment")
    cls = [t for t in transfer if t in results]
    if cls:
        if lines:
            lines.append("")
        lines.append("Transfer, accuracy %" + (" (MRPC: acc/F1)" if "MRPC" in cls else ""))
        labels = [{"SICKEntailment": "SICK-E"}.get(t, t) for t in cls]
        lines.append(f"{'':14}" + "".join(f"{c:>12}" for c in [*labels, "Avg."]))
        for key, name in (("devacc", "dev"), ("acc", "test")):
            row = [results[t][key] for t in cls]
            cells = [f"{v:.2f}" for v in row]
            if key == "acc" and "f1" in results.get("MRPC", {}):
                cells[cls.index("MRPC")] += f"/{results['MRPC']['f1']:.1f}"
            avg = sum(row) / len(row)
            lines.append(f"{name:14}" + "".join(f"{c:>12}" for c in cells) + f"{avg:>12.2f}")
    for t in ("STSBenchmark", "SICKRelatedness"):
        if t in results and "devpearson" in results[t]:
            r = results[t]
            lines.append(
                f"{t} (SentEval regressor): dev Pearson {_pct(r['devpearson'])}, test Pearson "
                f"{_pct(r['pearson'])}, Spearman {_pct(r['spearman'])}, MSE {r['mse']:.3f}"
            )
    return "\n".join(lines)


def _make_encoder(args: argparse.Namespace, loaded, tasks: list[str], device: str):
    from vat.eval import encoders

    if loaded is not None and args.features:
        from vat.cli.features import check_fitted, fit_options
        from vat.features.choice import features_for

        fit, save = fit_options(args, tasks)
        chosen = features_for(
            loaded, args.features, fit, save=save, batch_size=args.batch_size, quiet=args.quiet
        )
        check_fitted(chosen.fitted, args)
        enc = encoders.vat_encoder(loaded, batch_size=args.batch_size, features=chosen)
        return enc, f"vat:{args.model}"
    if loaded is not None:  # the model's own vectors, or --pooling of mu (one rule)
        return encoders.vat_encoder(loaded, args.pooling, args.batch_size), f"vat:{args.model}"
    if args.encoder:
        return encoders.callable_encoder(args.encoder), f"callable:{args.encoder}"
    if args.word_vectors:
        from vat.eval.word_vectors import word_vector_encoder

        names = ("--word-vectors", "--word-counts")
        enc = word_vector_encoder(args.word_vectors, args.word_counts, names=names)
        return enc, f"word-vectors:{args.word_vectors}"
    return encoders.hf_encoder(
        args.hf_model, args.pooling or "mean", args.batch_size, device, name="hf_model"
    ), f"hf:{args.hf_model}"


def _tasks_to_run(choice: TaskChoice, data_dir: str, skip_missing: bool) -> list[str]:
    """A group's tasks present, and those named (with --skip-missing: those that load)."""
    if choice.named_absent and not skip_missing:
        return choice.tasks
    skipped = choice.absent + choice.named_absent
    tasks = [t for t in choice.tasks if t not in skipped]
    if skipped:
        print(
            f"warning: skipping {', '.join(skipped)}: no data under {data_dir} (SentEval's "
            f"layout, docs/evaluate.md); running {', '.join(tasks)}",
            file=sys.stderr,
        )
    if not skip_missing:
        return tasks
    from vat.eval.tasks.registry import load_task

    keep = []
    for t in tasks:
        try:
            load_task(data_dir, t)
            keep.append(t)
        except VatError as e:
            print(f"warning: skipping {e}", file=sys.stderr)
    if not keep:
        raise VatError(f"none of the tasks has data under {data_dir}")
    return keep


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.finetune and not args.model:
        raise VatError("--finetune needs --model (it trains the vat encoder)")
    if args.features and not args.model:
        raise VatError("--features needs --model (a vat checkpoint or exported folder)")
    if args.features and args.finetune:
        raise VatError("--features applies to frozen features; --finetune uses --pooling")
    if args.word_counts and not args.word_vectors:
        raise VatError("--word-counts needs --word-vectors (the counts weight those vectors)")
    if args.word_vectors and args.pooling:
        raise VatError("--pooling does not apply to --word-vectors (the mean, SIF-weighted with "
                       "--word-counts)")  # fmt: skip
    if args.features:
        from vat.features.choice import check_pooling

        check_pooling(args.pooling, args.features)  # a spec names its own weighting
    args.data_dir = args.data_dir or str(default_senteval_dir())
    choice = choose_tasks(args.tasks, args.data_dir)  # names and folder, before any work
    device = resolve_device(args.device)
    out = check_output_file(args.output, args.overwrite, "--output", ".json file")
    plot = check_output_file(args.plot, args.overwrite, "--plot", ".png file")
    if args.compare and plot is None:
        raise VatError("--compare needs --plot (the chart the runs are compared in)")
    if plot is not None:
        from vat.eval.plots import load_results

        figure_class()  # one line now, not after the evaluation, if matplotlib is missing
        earlier = {f: load_results(f) for f in args.compare}
    loaded = None
    if args.model:  # read once; everything below takes the loaded model
        from vat.share.resolve import load_model

        loaded = load_model(args.model, device)
    tasks = _tasks_to_run(choice, args.data_dir, args.skip_missing)
    t0 = time.perf_counter()
    meta = {
        "tasks": tasks,
        "seed": args.seed,
        "data_dir": str(args.data_dir),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        if args.finetune:
            results, seconds = _finetune(args, loaded, tasks, device, meta)
        else:
            results, seconds = _evaluate(args, loaded, tasks, device, meta)
    except MissingTaskData as e:
        raise VatError(f"{e}; --skip-missing runs the tasks that are present") from None
    meta.update(seconds=seconds, total_seconds=round(time.perf_counter() - t0, 2))
    if "features" in meta:  # the table's title names the vectors it scored
        print(f"{meta['encoder']}: features {meta['features']} ({meta['features_why']})")
    if args.word_vectors:  # so is a bag of word vectors' weighting
        counts = f", counts {args.word_counts}" if args.word_counts else ""
        print(f"{meta['encoder']} ({meta['pooling']}{counts})")
    if args.finetune:
        print("Fine-tuning (encoder + dense layer), accuracy %")
        print(f"{'task':16}{'dev':>8}{'test':>8}")
        for t, r in results.items():
            print(f"{t:16}{r['devacc']:>8.2f}{r['acc']:>8.2f}")
    else:
        print(format_table(results))
    if out is not None:
        from vat.eval.task_scores import task_scores  # one unit (percent), the requested names

        scores = task_scores(results, tasks)
        write_json_atomic(out, json_safe({**results, "_scores": scores, "_meta": meta}))
        if not args.quiet:
            print(f"wrote {out}", file=sys.stderr)
    if plot is not None:
        from vat.eval.plots import plot_comparison, run_label

        runs = {run_label({"_meta": meta}, "this run"): results}
        for f, res in earlier.items():
            label = run_label(res, Path(f).stem)
            runs[label if label not in runs else f"{label} [{Path(f).name}]"] = res
        plot_comparison(runs, plot)
        if not args.quiet:
            print(f"wrote {plot}", file=sys.stderr)
    from vat.eval.degenerate import degenerate_tasks, warning_lines

    found = degenerate_tasks(results)
    for line in warning_lines(found):
        print(line, file=sys.stderr)
    if found and args.strict:
        print(
            f"error: --strict: degenerate encoder on {', '.join(found)} (see the warnings above)",
            file=sys.stderr,
        )
        return 1
    return 0


def _finetune(args: argparse.Namespace, loaded, tasks: list[str], device: str, meta: dict):
    from vat.eval.finetune import FinetuneSettings, finetune_tasks

    settings = FinetuneSettings(
        epochs=args.epochs,
        lr=args.lr,
        pooling=args.pooling or "mean",
        seed=args.seed,
        device=device,
        progress=show_progress(args),
    )
    results, seconds = finetune_tasks(loaded, tasks, args.data_dir, settings)
    meta.update(
        mode="finetune",
        encoder=f"vat:{args.model}",
        pooling=settings.pooling,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=settings.batch_size,
    )
    return results, seconds


def _evaluate(args: argparse.Namespace, loaded, tasks: list[str], device: str, meta: dict):
    from dataclasses import asdict

    from vat.eval.engine import EvalSettings, evaluate

    encoder, name = _make_encoder(args, loaded, tasks, device)
    settings = EvalSettings(
        preset=args.preset,
        classifier=args.classifier,
        nhid=args.nhid,
        seed=args.seed,
        relatedness=args.relatedness,
        batch_size=args.batch_size,
        device=device,
        progress=show_progress(args),
    )
    results, seconds = evaluate(encoder, tasks, args.data_dir, settings)
    pooling = (args.pooling or "mean") if args.hf_model else args.model and args.pooling
    if args.word_vectors:
        pooling = encoder.weighting  # "mean" or "sif a=0.001"
    meta.update(
        mode="features",
        encoder=name,
        pooling=pooling,
        **({"word_counts": args.word_counts} if args.word_vectors else {}),
        # every vat table and results file names the vectors it scored (features.md)
        **(
            {"features": encoder.features, "features_why": encoder.why}
            if hasattr(encoder, "features")
            else {}
        ),
        **({"features_fit": encoder.fitted.fit} if hasattr(encoder, "fitted") else {}),
        preset=args.preset,
        classifier=asdict(settings.classifier_config()),
        relatedness=args.relatedness,
    )
    return results, seconds


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
