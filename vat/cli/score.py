"""`vat score`: the table text-VAE papers report, for one model on one text file
(`vat.score.table.score_table`; formulas in docs/score.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from vat.cli.common import (
    Parser,
    add_batch_size,
    add_common,
    add_data_dir,
    add_model_option,
    add_output,
    read_text_lines,
    show_progress,
    whole,
)
from vat.errors import VatError, run_cli
from vat.io import check_output_file, folder, regular_file, write_json_atomic


def build_parser() -> argparse.ArgumentParser:
    from vat.score.settings import DEFAULT_SAMPLES, ScoreSettings

    defaults = ScoreSettings()
    p = Parser(
        prog="vat score",
        description="The text-VAE table (NLL, PPL, -ELBO, KL, MI, AU, BLEU, diversity, "
        "alignment, uniformity) of a model on a text file. See docs/score.md.",
    )
    add_model_option(p)
    p.add_argument(
        "file", metavar="FILE", help="text file, one sentence a line (or .gz; '-': stdin)"
    )
    p.add_argument(
        "--samples",
        type=int,
        default=DEFAULT_SAMPLES,
        help=f"K importance samples (decoder passes) per sentence for the NLL (default "
        f"{DEFAULT_SAMPLES})",
    )
    p.add_argument("--limit", type=whole(1), help="score only the first N sentences")
    add_batch_size(p, defaults.batch_size)
    p.add_argument(
        "--diversity-samples",
        type=int,
        default=defaults.diversity_samples,
        help=f"samples per sentence for diversity (default {defaults.diversity_samples}; 0 skips)",
    )
    p.add_argument(
        "--prior-samples",
        type=int,
        default=defaults.prior_samples,
        help=f"prior samples for diversity (default {defaults.prior_samples}; 0 skips)",
    )
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of every draw (default 0)")
    rep = p.add_mutually_exclusive_group()
    rep.add_argument(
        "--sts-pairs",
        metavar="FILE",
        help="STS-B-layout pairs for alignment and uniformity (default: --data-dir's STS-B)",
    )
    add_data_dir(rep, " whose STS-B test split gives the pairs (skipped if it has none)")
    rep.add_argument("--no-representation", action="store_true", help="no alignment, uniformity")
    p.add_argument(
        "--on-bad-bytes",
        choices=("error", "skip"),
        default="error",
        help="a line that is not UTF-8: an error (default), or skipped and counted",
    )
    add_output(p, "also write the table as JSON to FILE")
    add_common(p)
    return p


def _read(source: str, on_bad_bytes: Literal["error", "skip"], limit: int | None) -> list[str]:
    hint = "--on-bad-bytes skip skips such lines"
    lines = read_text_lines(source, "FILE", limit, on_bad_bytes, hint)
    return [s.strip() for s in lines if s.strip()]


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)  # before torch is imported: --help answers at once
    from vat.runtime import resolve_device
    from vat.score.settings import ScoreSettings
    from vat.score.table import representation_pairs, score_table
    from vat.share.resolve import load_model

    device = resolve_device(args.device)
    output = check_output_file(args.output, args.overwrite, "--output", "JSON file")
    settings = ScoreSettings(  # its checks name Python arguments; run_cli shows their flags
        samples=args.samples,
        batch_size=args.batch_size,
        diversity_samples=args.diversity_samples,
        prior_samples=args.prior_samples,
        seed=args.seed,
        progress=show_progress(args),
    )
    # named inputs are checked before the model is read
    if args.sts_pairs is not None:
        regular_file(args.sts_pairs, "--sts-pairs")
    if args.data_dir is not None:
        folder(args.data_dir, "--data-dir")
    sentences = _read(args.file, args.on_bad_bytes, args.limit)
    if not sentences:
        raise VatError(f"FILE {args.file}: no non-empty line to score")
    pairs = None if args.no_representation else representation_pairs(args.sts_pairs, args.data_dir)

    loaded = load_model(args.model, device)
    source = "stdin" if args.file == "-" else Path(args.file).name
    table = score_table(loaded, sentences, settings, pairs, source=source)
    if output is not None:
        record = {"model_location": str(loaded.source.location), "file": args.file}
        write_json_atomic(output, {**record, **table.to_dict()}, indent=2)
    print(table.table())
    if not args.quiet:
        wrote = f"; wrote {output}" if output is not None else ""
        print(f"\n{table.seconds['total']:.1f} s ({table.seconds['likelihood']:.1f} s for "
              f"the K = {settings.samples} samples){wrote}", file=sys.stderr)  # fmt: skip
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
