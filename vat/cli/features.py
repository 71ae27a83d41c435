"""Feature-spec options of `vat evaluate`, and `vat features compare` (every spec scored on the
STS tasks present: vat.features.compare)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vat.cli.common import Parser, add_batch_size, add_data_dir, add_model_option, whole
from vat.errors import VatError, run_cli

if TYPE_CHECKING:
    from vat.features.fitting import FitOptions


def add_fit_options(p, *, sentences: bool = True) -> None:
    """--fit-files, --fit-sentences and --count-files: what a feature spec is fitted on."""
    p.add_argument(
        "--fit-files",
        nargs="+",
        metavar="FILE",
        help="fit the post-processing on these text files, not the checkpoint's fitting sample",
    )
    if sentences:
        p.add_argument(
            "--fit-sentences", type=whole(2), default=20_000, metavar="N", help="sampled (20000)"
        )
    p.add_argument(
        "--count-files",
        nargs="+",
        metavar="FILE",
        help="count sif's token frequencies in these text files (if the checkpoint has none)",
    )


def add_feature_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("feature spec (vat checkpoints; see vat.feature_spec)")
    g.add_argument(
        "--features",
        metavar="SPEC",
        help="SOURCE/WEIGHTING/POST, e.g. mu/sif/pc1 or firstlast/mean/whiten64 (replaces "
        "--pooling); post-processing is fitted on the checkpoint's fitting sample",
    )
    add_fit_options(g)
    g.add_argument(
        "--fit-transductive",
        action="store_true",
        help="allow fitting on the evaluation data (--fit-files in --data-dir, else the tasks')",
    )


def fit_options(args: argparse.Namespace, tasks: Sequence[str]) -> tuple[FitOptions, bool]:
    """What `vat evaluate --features` fits on, and whether the fit is stored beside the model."""
    from vat.features.fitting import FitOptions, check_not_evaluation_data

    common = {"n_fit": args.fit_sentences, "count_files": args.count_files or None}
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
    # stored statistics are used as they are (check_fitted); a new fit reads the fitting sample
    return FitOptions(**common), True


def check_fitted(fitted, args: argparse.Namespace) -> None:
    """A stored statistics file fitted transductively is refused without the flag."""
    if fitted.fit.get("transductive") and not args.fit_transductive:
        raise VatError(
            f"the statistics of {fitted.spec} were fitted on evaluation data (transductive); "
            "pass --fit-transductive to use them, or refit with --fit-files"
        )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vat features compare",
        description="Score every feature spec (source x weighting x post-processing) of one "
        "checkpoint on the STS tasks present; write a table (CSV, markdown) and a plot.",
    )
    p.add_argument("command", choices=["compare"], help="compare: the sweep over specs")
    add_model_option(p)
    p.add_argument("--output-dir", required=True, help="folder for compare.csv/.md/.png")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    add_data_dir(p)
    p.add_argument(
        "--classification", action="store_true", help="transfer tasks for mean-of-mu and best 3 too"
    )
    add_fit_options(p)
    p.add_argument(
        "--word-vectors", action="append", metavar="FILE",
        help="a same-data baseline row: a bag of these word vectors (vat evaluate --word-vectors; "
        "repeat for more)",
    )  # fmt: skip
    p.add_argument(
        "--word-counts", action="append", metavar="FILE",
        help="SIF counts of each --word-vectors, in order (vat baseline word-vectors writes them)",
    )  # fmt: skip
    add_batch_size(p, 128)
    p.add_argument("--seed", type=int, default=0, help="seed of the fitting sample")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from vat.data.paths import default_senteval_dir
    from vat.features.compare import (
        OUTPUT_NAMES,
        CompareSettings,
        add_classification,
        check_output_set,
        compare_markdown,
        compare_sts,
        load_sts_tasks,
        write_compare_set,
    )
    from vat.features.fitting import check_not_evaluation_data
    from vat.share.resolve import load_model

    data_dir = args.data_dir or str(default_senteval_dir())
    # every check before the minutes of encoding
    settings = CompareSettings(
        fit_sentences=args.fit_sentences,
        count_files=args.count_files,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    out_dir = check_output_set(args.output_dir, args.overwrite)
    vectors, counts = args.word_vectors or [], args.word_counts or []
    if counts and len(counts) != len(vectors):
        raise VatError(
            f"--word-counts pairs with --word-vectors in order: give one per vectors file "
            f"({len(counts)} for {len(vectors)}) or none"
        )
    baselines = []
    if vectors:
        from vat.eval.word_vectors import word_vector_baselines

        baselines = word_vector_baselines(list(zip(vectors, counts or [None] * len(vectors))))
    tasks = load_sts_tasks(data_dir)
    loaded = load_model(args.model)  # read once; everything below takes the loaded model
    if args.fit_files:
        check_not_evaluation_data(args.fit_files, data_dir, "--fit-files")
    comparison = compare_sts(
        loaded, tasks, args.fit_files, settings, name=str(args.model), baselines=baselines
    )
    write_compare_set(out_dir, comparison)
    if args.classification:  # the STS table is on disk first: classification takes longer
        print("vat: STS table written; classification tasks next", file=sys.stderr)
        add_classification(comparison, loaded, data_dir, args.batch_size)
        write_compare_set(out_dir, comparison)
    for name in OUTPUT_NAMES:
        print(f"wrote {Path(args.output_dir) / name}", file=sys.stderr)
    # the table compare.md holds
    print(compare_markdown([*comparison.rows, *comparison.baselines], comparison.meta))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
