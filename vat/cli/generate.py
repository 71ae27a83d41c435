"""`vat generate COMMAND`: text from a model's latent space (docs/generate.md), one stdout line
per input line (or JSON Lines); notes go to stderr. Only \\n and \\r\\n end an input line."""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vat.cli import one_line_warnings
from vat.cli.common import (
    Parser,
    add_batch_size,
    add_common,
    add_model_option,
    add_output,
    finite,
    number_list,
    show_progress,
    whole,
)
from vat.errors import VatError, run_cli
from vat.io import atomic_write, check_output_file

if TYPE_CHECKING:
    from vat.generate.decoding import DecodeOptions


DECODING = (  # (flag, type, default, help) of every subcommand's decoding options
    ("--beam", whole(1), 1, "beam size; 1 = greedy (default), the paper uses 5"),
    ("--length-penalty", finite(), 1.0, "beam score = logprob / length**this (default 1)"),
    ("--top-k", whole(0), 0, "with --sampling: k most probable tokens only (0 = all)"),
    ("--top-p", finite(), 1.0, "with --sampling: nucleus probability mass (default 1)"),
    ("--temperature", finite(), 1.0, "with --sampling: temperature (default 1)"),
    ("--max-len", whole(1), None, "most tokens to generate (default: the model's max_len)"),
)


def _parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    g = common.add_argument_group("checkpoint and output")
    add_model_option(g)
    add_batch_size(g, 64)
    g.add_argument("--json", action="store_true", help="one JSON object per input (JSON Lines)")
    add_output(g, "write the results to FILE (atomically, once all are done) instead of stdout")
    g.add_argument("--seed", type=int, default=0, help="seed of all sampling (default 0)")
    add_common(g)
    d = common.add_argument_group("decoding")
    d.add_argument("--sampling", action="store_true", help="sample tokens instead of argmax")
    for flag, kind, default, help in DECODING:
        d.add_argument(flag, type=kind, default=default, help=help)

    inputs = Parser(add_help=False)
    inputs.add_argument("sentences", nargs="*", help="sentences to process (or use --input)")
    inputs.add_argument("--input", help="text file, one sentence a line (plain, .gz; '-': stdin)")

    variational = Parser(add_help=False)
    variational.add_argument(
        "-n", "--num-samples", type=whole(1), default=5, help="samples per sentence (default 5)"
    )
    variational.add_argument(
        "--tau", type=finite(0), default=1.0, help="noise: z = mu + tau * sigma * eps (default 1)"
    )

    p = Parser(
        prog="vat generate",
        description="Generate text from a vat checkpoint's latent space: results on stdout, "
        "notes on stderr.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("reconstruct", parents=[common, inputs], help="decode each sentence's mu")
    sub.add_parser(
        "sample",
        parents=[common, inputs, variational],
        help="n variants per sentence, every token's latent sampled (n lines per input)",
    )
    r = sub.add_parser(
        "resample-token",
        parents=[common, inputs, variational],
        help="n variants per sentence, only the latents at --positions sampled (n lines per input)",
    )
    r.add_argument(
        "--positions",
        type=number_list(int),
        required=True,
        help="comma-separated 0-based subword positions, e.g. 1,3 (the number of subwords: </s>)",
    )
    r.add_argument(
        "--source",
        choices=("posterior", "prior"),
        default="posterior",
        help="draw them from the posterior at --tau (default) or the prior N(0, s^2 I)",
    )
    i = sub.add_parser("interpolate", parents=[common], help="decode (1-a) Z1 + a Z2 per alpha")
    i.add_argument("sentences", nargs="*", help="two sentences (or use --input)")
    i.add_argument(
        "--input",
        help="file of tab-separated sentence pairs, one a line (plain or .gz; '-' = stdin)",
    )
    i.add_argument(
        "--alphas",
        type=number_list(float),
        default=[0.0, 0.25, 0.5, 0.75, 1.0],
        help="comma-separated interpolation weights (default 0,0.25,0.5,0.75,1)",
    )
    i.add_argument("--slerp", action="store_true", help="spherical, not linear, per position")
    pr = sub.add_parser(
        "prior", parents=[common], help="decode latents drawn from the prior N(0, s^2 I) (n lines)"
    )
    pr.add_argument("-n", "--num-samples", type=whole(1), default=10, help="samples (default 10)")
    pr.add_argument(
        "--length",
        type=whole(1),
        help="latent length T (subwords + 1); default: drawn from the training lengths",
    )
    pr.add_argument(
        "--prior-std", type=finite(positive=True), help="s of the prior (default: the checkpoint's)"
    )
    b = sub.add_parser(
        "bleu",
        parents=[common, inputs],
        help="reconstruction corpus BLEU (sacrebleu 13a) and exact-match rate of mu-decoding",
    )
    b.add_argument("--limit", type=whole(1), help="use only the first N non-empty lines")
    b.add_argument(
        "--long-over",
        type=whole(1),
        metavar="N",
        help="also score lines over N subwords and the rest apart (e.g. 63 for max_len 64)",
    )
    return p


def _options(args: argparse.Namespace) -> DecodeOptions:
    from vat.generate.decoding import DecodeOptions, Strategy

    if args.sampling and args.beam > 1:
        raise VatError("--sampling and --beam > 1 exclude each other")
    strategy: Strategy = "sample" if args.sampling else "beam" if args.beam > 1 else "greedy"
    return DecodeOptions(
        strategy=strategy,
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_len=args.max_len,
    )


def _main(argv: Sequence[str]) -> int:
    for i, value in enumerate(argv, 1):
        try:
            value.encode("utf-8")  # a lone surrogate: bytes that are not UTF-8
        except UnicodeEncodeError:
            raise VatError(f"argument {i} is not valid UTF-8 text") from None
    args = _parser().parse_args(argv)  # counts and scales refused here, before the model loads
    opts = _options(args)
    output = check_output_file(args.output, args.overwrite, "--output", "text file")
    # torch is imported once the arguments are good: `vat generate --help` answers at once
    from vat.cli.generate_runners import RUNNERS
    from vat.generate.generator import TruncationWarning, VATGenerator
    from vat.runtime import resolve_device
    from vat.share.resolve import load_model

    device = resolve_device(args.device)
    loaded = load_model(args.model, device)  # read once
    gen = VATGenerator.from_loaded(loaded, batch_size=args.batch_size)
    # Bars only for a file or stdin: a few sentences on the command line decode in a blink.
    gen.progress = show_progress(args) and getattr(args, "input", None) is not None
    with warnings.catch_warnings(), one_line_warnings():
        warnings.simplefilter("always", TruncationWarning)
        out = io.StringIO() if output is not None else sys.stdout
        RUNNERS[args.command](gen, args, opts, out)
    if output is not None:
        atomic_write(output, lambda f: f.write(out.getvalue()))  # a failed run writes nothing
        if not args.quiet:
            print(f"wrote {output}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
