"""`vat generate COMMAND`: text from a checkpoint's latent space (see docs/generate.md).

Results go to stdout, one line per input line in input order (or JSON Lines with --json);
notes, warnings and progress bars go to stderr. Only \\n and \\r\\n end an input line.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from vat.cli.common import (
    Parser,
    add_common,
    check_utf8_arguments,
    finite_float,
    number_list,
    read_text_lines,
    show_progress,
)
from vat.decoding import DecodeOptions, Strategy
from vat.errors import VatError, run_cli
from vat.generate import TruncationWarning, VATGenerator
from vat.io import atomic_write
from vat.latents import InterpolationMethod
from vat.runtime import resolve_device
from vat.tokenizer import EOS_ID

COMMANDS = ("reconstruct", "sample", "resample-token", "interpolate", "prior", "bleu")


def _parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    g = common.add_argument_group("checkpoint and output")
    g.add_argument(
        "--ckpt",
        required=True,
        help="vat checkpoint (.ckpt written by `vat train`) or exported model folder",
    )
    g.add_argument(
        "--batch-size", type=int, default=64, help="sentences per decoding batch (default 64)"
    )
    g.add_argument(
        "--json", action="store_true", help="one JSON object per input (JSON Lines) instead of text"
    )
    g.add_argument(
        "--output",
        metavar="FILE",
        help="write the results to FILE (atomically, once all are done) instead of stdout",
    )
    g.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    g.add_argument(
        "--seed", type=int, default=0, help="seed of latent and token sampling (default 0)"
    )
    add_common(g)
    d = common.add_argument_group("decoding")
    d.add_argument(
        "--beam", type=int, default=1, help="beam size; 1 = greedy (default), the paper uses 5"
    )
    d.add_argument(
        "--length-penalty",
        type=finite_float,
        default=1.0,
        help="beam score = logprob / length**this (default 1)",
    )
    d.add_argument(
        "--sampling",
        action="store_true",
        help="sample tokens (top-k/top-p/temperature) instead of argmax",
    )
    d.add_argument(
        "--top-k",
        type=int,
        default=0,
        help="with --sampling: k most probable tokens only (0 = all)",
    )
    d.add_argument(
        "--top-p",
        type=finite_float,
        default=1.0,
        help="with --sampling: nucleus probability mass (default 1)",
    )
    d.add_argument(
        "--temperature",
        type=finite_float,
        default=1.0,
        help="with --sampling: temperature (default 1)",
    )
    d.add_argument(
        "--max-len",
        type=int,
        default=None,
        help="most tokens to generate (default: the model's max_len)",
    )

    inputs = Parser(add_help=False)
    inputs.add_argument("sentences", nargs="*", help="sentences to process (or use --input)")
    inputs.add_argument("--input", help="text file, one sentence per line ('-' = stdin)")

    variational = Parser(add_help=False)
    variational.add_argument(
        "-n", "--num-samples", type=int, default=5, help="samples per sentence (default 5)"
    )
    variational.add_argument(
        "--tau",
        type=finite_float,
        default=1.0,
        help="noise scale: z = mu + tau * sigma * eps (default 1)",
    )

    p = Parser(
        prog="vat generate",
        description="Generate text from a vat checkpoint's latent space. Results go to stdout, "
        "one per line in input order (or --json); notes and warnings go to stderr.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser(
        "reconstruct",
        parents=[common, inputs],
        help="decode each sentence's token means (one line per input line)",
    )
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
        help="comma-separated 0-based subword positions to resample, e.g. 1,3 "
        "(position = number of subwords is the </s> latent)",
    )
    i = sub.add_parser(
        "interpolate",
        parents=[common],
        help="decode (1-a) Z1 + a Z2 for each alpha (one line per alpha)",
    )
    i.add_argument("sentences", nargs="*", help="two sentences (or use --input)")
    i.add_argument(
        "--input", help="file of sentence pairs, one pair per line separated by a tab ('-' = stdin)"
    )
    i.add_argument(
        "--alphas",
        type=number_list(float),
        default=[0.0, 0.25, 0.5, 0.75, 1.0],
        help="comma-separated interpolation weights (default 0,0.25,0.5,0.75,1)",
    )
    i.add_argument(
        "--slerp",
        action="store_true",
        help="spherical instead of linear interpolation, per position",
    )
    pr = sub.add_parser(
        "prior", parents=[common], help="decode latents drawn from the prior N(0, s^2 I) (n lines)"
    )
    pr.add_argument(
        "-n", "--num-samples", type=int, default=10, help="number of samples (default 10)"
    )
    pr.add_argument(
        "--length",
        type=int,
        default=None,
        help="latent length T (subwords + 1); default: drawn from the training length histogram",
    )
    pr.add_argument(
        "--prior-std",
        type=finite_float,
        default=None,
        help="s of the prior (default: the checkpoint's)",
    )
    b = sub.add_parser(
        "bleu",
        parents=[common, inputs],
        help="reconstruction corpus BLEU (sacrebleu 13a) and exact-match rate of mu-decoding",
    )
    b.add_argument("--limit", type=int, default=None, help="use only the first N non-empty lines")
    return p


def _options(args: argparse.Namespace) -> DecodeOptions:
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


def _read_lines(args: argparse.Namespace) -> list[str]:
    if args.input is not None and args.sentences:
        raise VatError("give sentences as arguments or --input FILE, not both")
    if args.input is None:
        if not args.sentences:
            raise VatError("no input: give sentences as arguments or --input FILE")
        return list(args.sentences)
    return read_text_lines(args.input)


def _non_empty(lines: Sequence[str], what: str = "line", quiet: bool = False) -> list[int]:
    """Indices of non-blank lines; one stderr note for the skipped blank ones."""
    keep = [i for i, s in enumerate(lines) if s.strip()]
    skipped = [i + 1 for i, s in enumerate(lines) if not s.strip()]
    if skipped and not quiet:
        shown = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        print(
            f"note: skipped {len(skipped)} empty input {what}(s) ({shown}); "
            "their output lines are left empty",
            file=sys.stderr,
        )
    return keep


def _labels(args: argparse.Namespace, keep: Sequence[int]) -> list[str]:
    """How warnings name input i: its line in --input, else its position among the arguments."""
    what = "line" if args.input is not None else "argument"
    return [f"{what} {i + 1}" for i in keep]


def _emit(out: TextIO, as_json: bool, record: dict, lines: Sequence[str]) -> None:
    if as_json:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        for line in lines:
            out.write(line.replace("\n", " ") + "\n")


def _run_reconstruct(
    gen: VATGenerator, args: argparse.Namespace, opts: DecodeOptions, out: TextIO
) -> None:
    lines = _read_lines(args)
    keep = _non_empty(lines, quiet=args.quiet)
    hyps = gen.reconstruct_hypotheses([lines[i] for i in keep], opts, labels=_labels(args, keep))
    by_line = dict(zip(keep, hyps))
    for i, src in enumerate(lines):
        if i not in by_line:
            _emit(out, args.json, {"input": src, "skipped": True}, [""])
            continue
        best = gen.text(by_line[i][0])
        record = {"input": src, "output": best, "score": by_line[i][0].score}
        if opts.strategy == "beam":
            record["hypotheses"] = [
                {"text": gen.text(h), "score": h.score, "finished": h.finished} for h in by_line[i]
            ]
        _emit(out, args.json, record, [best])


def _run_sample(
    gen: VATGenerator, args: argparse.Namespace, opts: DecodeOptions, out: TextIO
) -> None:
    lines = _read_lines(args)
    keep = _non_empty(lines, quiet=args.quiet)
    labels = _labels(args, keep)
    texts = [lines[i] for i in keep]
    n = args.num_samples
    positions = getattr(args, "positions", None)
    if positions is None:
        results = gen.sample(texts, n, args.tau, opts, args.seed, labels=labels)
    else:
        results = gen.resample_token(texts, positions, n, args.tau, opts, args.seed, labels=labels)
    by_line = dict(zip(keep, results))
    for i, src in enumerate(lines):
        samples = by_line.get(i)
        if samples is None:
            _emit(out, args.json, {"input": src, "skipped": True}, [""] * n)
            continue
        record: dict = {"input": src, "tau": args.tau, "samples": samples}
        if positions is not None:
            ids = gen.tokenizer.encode(src)[: gen.max_len - 1] + [
                EOS_ID
            ]  # as encoded (no 2nd warning)
            record["positions"] = list(positions)
            record["tokens"] = [
                gen.tokenizer.token_text(ids[p]) if p < len(ids) else None for p in positions
            ]
        _emit(out, args.json, record, samples)


def _run_interpolate(
    gen: VATGenerator, args: argparse.Namespace, opts: DecodeOptions, out: TextIO
) -> None:
    if args.input is None:
        if len(args.sentences) != 2:
            raise VatError(
                "interpolate needs exactly two sentences (or --input FILE of tab-separated "
                f"pairs), got {len(args.sentences)}"
            )
        lines = ["\t".join(args.sentences)]
    else:
        if args.sentences:
            raise VatError("give two sentences as arguments or --input FILE, not both")
        lines = _read_lines(args)
    keep = set(_non_empty(lines, quiet=args.quiet))
    pairs: dict[int, list[str]] = {}
    for i in sorted(keep):  # check every line before printing anything
        parts = lines[i].split("\t")
        if len(parts) != 2 or not all(x.strip() for x in parts):
            raise VatError(f"--input line {i + 1}: expected two sentences separated by one tab")
        pairs[i] = parts
    method: InterpolationMethod = "slerp" if args.slerp else "linear"
    for i, line in enumerate(lines):
        if i not in pairs:
            _emit(out, args.json, {"input": line, "skipped": True}, [""] * len(args.alphas))
            continue
        a, b = pairs[i]
        where = f"line {i + 1}" if args.input is not None else "the pair"
        texts = gen.interpolate(
            a, b, args.alphas, method, opts, labels=[f"{where} (first)", f"{where} (second)"]
        )
        record = {"a": a, "b": b, "method": method, "alphas": list(args.alphas), "outputs": texts}
        _emit(out, args.json, record, texts)


def _run_prior(
    gen: VATGenerator, args: argparse.Namespace, opts: DecodeOptions, out: TextIO
) -> None:
    for T, text in gen.prior(args.num_samples, args.length, opts, args.seed, args.prior_std):
        _emit(out, args.json, {"length": T, "output": text}, [text])


def _run_bleu(
    gen: VATGenerator, args: argparse.Namespace, opts: DecodeOptions, out: TextIO
) -> None:
    lines = _read_lines(args)
    keep = _non_empty(lines, quiet=args.quiet)
    if args.limit is not None:
        keep = keep[: args.limit]
    if not keep:
        raise VatError("no non-empty sentence to score")
    texts = [lines[i] for i in keep]
    s = gen.score(texts, opts, labels=_labels(args, keep))
    strategy = f"beam {opts.beam_size}" if opts.strategy == "beam" else opts.strategy
    record = {
        "bleu": s.bleu,
        "exact_match": s.exact_match,
        "exact": s.exact,
        "n": s.n,
        "decoding": strategy,
        "bleu_metric": "torchmetrics SacreBLEUScore(tokenize='13a')",
    }
    _emit(
        out,
        args.json,
        record,
        [
            f"BLEU {s.bleu:.2f}  exact match {s.exact}/{s.n} ({100 * s.exact_match:.1f}%)  "
            f"decoding {strategy}"
        ],
    )


RUNNERS = {
    "reconstruct": _run_reconstruct,
    "sample": _run_sample,
    "resample-token": _run_sample,
    "interpolate": _run_interpolate,
    "prior": _run_prior,
    "bleu": _run_bleu,
}


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _main(argv: Sequence[str]) -> int:
    check_utf8_arguments(argv)
    args = _parser().parse_args(argv)
    opts = _options(args)
    if args.batch_size < 1:
        raise VatError(f"--batch-size must be at least 1, got {args.batch_size}")
    output = Path(args.output) if args.output is not None else None
    if output is not None and output.is_dir():
        raise VatError(f"--output {output} is a directory, expected a file path")
    if output is not None and output.exists() and not args.overwrite:
        raise VatError(f"--output {output} already exists; pass --overwrite to replace it")
    device = resolve_device(args.device)
    gen = VATGenerator.from_checkpoint(args.ckpt, device=device, batch_size=args.batch_size)
    # Bars only for a file or stdin: a few sentences on the command line decode in a blink.
    gen.progress = show_progress(args) and getattr(args, "input", None) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("always", TruncationWarning)
        warnings.showwarning = _one_line_warning
        out = io.StringIO() if output is not None else sys.stdout
        RUNNERS[args.command](gen, args, opts, out)
    if output is not None:
        atomic_write(output, lambda f: f.write(out.getvalue()))  # a failed run writes nothing
        if not args.quiet:
            print(f"wrote {output}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`vat generate ...` (and the `vat-generate` alias)."""
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
