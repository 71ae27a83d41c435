"""Feature-spec options of `vat evaluate`, and `vat features compare`.

    vat evaluate --ckpt last.ckpt --tasks sts --features firstlast/sif/pc1
    vat features compare --ckpt last.ckpt --output-dir feature-compare [--classification]

`compare` scores every combination of source x weighting x post-processing on the STS tasks
present (STS12, STS-B dev and test; optionally the classification tasks for the best
three), writing `compare.csv`, `compare.md` and `compare.png` and printing the table of
`compare.md` on stdout at the end (notes and bars go to stderr). The experiment and its
output set are vat.features.compare; here are its options, the fitting sentences (the
checkpoint's fitting sample, or --fit-files, never the evaluation sentences) and the report.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vat.cli.common import add_model_option
from vat.errors import VatError, run_cli

if TYPE_CHECKING:
    from vat.features.fitting import FitOptions


# -- vat evaluate's options ----------------------------------------------------------------
def add_feature_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("feature spec (vat checkpoints; see vat.feature_spec)")
    g.add_argument(
        "--features",
        metavar="SPEC",
        default=None,
        help="SOURCE/WEIGHTING/POST, e.g. mu/sif/pc1 or firstlast/mean/whiten64; replaces "
        "--pooling. Post-processing is fitted on unlabeled sentences: by default the "
        "checkpoint's fitting sample of its training sentences, stored beside the checkpoint",
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


def fit_options(args: argparse.Namespace, tasks: Sequence[str]) -> tuple[FitOptions, bool]:
    """What `vat evaluate --features` fits on (vat.features.fitting.FitOptions), and whether
    the fit is stored beside the model, with the guard against evaluation data."""
    from vat.features.fitting import FitOptions, check_not_evaluation_data

    if args.fit_sentences < 2:
        raise VatError(f"--fit-sentences must be >= 2, got {args.fit_sentences}")
    common = {
        "n_fit": args.fit_sentences,
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
    # statistics stored with the model are used as they are (check_fitted guards them); a
    # fit still to come reads the checkpoint's own fitting sample
    return FitOptions(**common), True


def check_fitted(fitted, args: argparse.Namespace) -> None:
    """A stored statistics file fitted transductively is refused without the flag."""
    if fitted.fit.get("transductive") and not args.fit_transductive:
        raise VatError(
            f"the statistics of {fitted.spec} were fitted on evaluation data (transductive); "
            "pass --fit-transductive to use them, or refit with --fit-files"
        )


# -- vat features compare ------------------------------------------------------------------
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
    p.add_argument("--batch-size", type=int, default=128)
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
    # every check before the minutes of encoding, not at the first write
    settings = CompareSettings(
        fit_sentences=args.fit_sentences,
        count_files=args.count_files,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    out_dir = check_output_set(args.output_dir, args.overwrite)
    tasks = load_sts_tasks(data_dir)
    loaded = load_model(args.model)  # read once; everything below takes the loaded model
    if args.fit_files:
        check_not_evaluation_data(args.fit_files, data_dir, "--fit-files")
    comparison = compare_sts(loaded, tasks, args.fit_files, settings, name=str(args.model))
    write_compare_set(out_dir, comparison)
    if args.classification:  # the STS table is on disk first: classification takes longer
        print("vat: STS table written; classification tasks next", file=sys.stderr)
        add_classification(comparison, loaded, data_dir, args.batch_size)
        write_compare_set(out_dir, comparison)
    for name in OUTPUT_NAMES:
        print(f"wrote {Path(args.output_dir) / name}", file=sys.stderr)
    print(compare_markdown(comparison.rows, comparison.meta))  # the table compare.md holds
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
