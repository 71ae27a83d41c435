"""`vat generate`'s subcommands: each reads its inputs, decodes with a `VATGenerator` and
writes one output line per input line (or JSON Lines)."""

from __future__ import annotations

import json
import sys
import warnings
from argparse import Namespace
from collections.abc import Sequence
from typing import TextIO

from vat.cli.common import read_text_lines
from vat.errors import VatError
from vat.generate.decoding import DecodeOptions
from vat.generate.generator import TruncationWarning, VATGenerator, reconstruction_score
from vat.generate.latents import InterpolationMethod
from vat.generate.variation import deterministic_note, sample_agreement
from vat.tokenizer import EOS_ID


def _read_lines(args: Namespace, limit: int | None = None) -> list[str]:
    if args.input is not None and args.sentences:
        raise VatError("give sentences as arguments or --input FILE, not both")
    if args.input is None:
        if not args.sentences:
            raise VatError("no input: give sentences as arguments or --input FILE")
        return list(args.sentences)
    lines = read_text_lines(args.input, "--input", limit)
    if not any(s.strip() for s in lines):  # an exit 0 with no output reads as success
        where = "- (stdin)" if args.input == "-" else args.input
        raise VatError(f"--input {where} holds no sentence (no non-empty line): nothing to decode")
    return lines


def _non_empty(lines: Sequence[str], quiet: bool = False) -> list[int]:
    """Indices of non-blank lines; one stderr note for the skipped blank ones."""
    keep = [i for i, s in enumerate(lines) if s.strip()]
    skipped = [i + 1 for i, s in enumerate(lines) if not s.strip()]
    if skipped and not quiet:
        shown = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        print(
            f"note: skipped {len(skipped)} empty input line(s) ({shown}); "
            "their output lines are left empty",
            file=sys.stderr,
        )
    return keep


def _labels(args: Namespace, keep: Sequence[int]) -> list[str]:
    """How warnings name input i: its line in --input, else its position among the arguments."""
    what = "line" if args.input is not None else "argument"
    return [f"{what} {i + 1}" for i in keep]


def _emit(out: TextIO, as_json: bool, record: dict, lines: Sequence[str]) -> None:
    if as_json:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        for line in lines:
            out.write(line.replace("\n", " ") + "\n")


def _run_reconstruct(gen: VATGenerator, args: Namespace, opts: DecodeOptions, out: TextIO) -> None:
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


def _run_sample(gen: VATGenerator, args: Namespace, opts: DecodeOptions, out: TextIO) -> None:
    lines = _read_lines(args)
    keep = _non_empty(lines, quiet=args.quiet)
    labels = _labels(args, keep)
    texts = [lines[i] for i in keep]
    n = args.num_samples
    positions = getattr(args, "positions", None)
    if positions is None:
        results = gen.sample(texts, n, args.tau, opts, args.seed, labels=labels)
    else:
        results = gen.resample_token(
            texts, positions, n, args.tau, opts, args.seed, labels=labels, source=args.source
        )
    # one note when latent samples repeat the mu-decoding: n copies of the input are no n samples
    prior = getattr(args, "source", "") == "prior"
    if not (args.quiet or opts.strategy == "sample" or args.tau == 0 or prior):
        with warnings.catch_warnings():  # the sampling call already warned about cut sentences
            warnings.simplefilter("ignore", TruncationWarning)
            means = gen.reconstruct(texts, opts, labels=labels)
        agreement = sample_agreement(results, means, texts)
        if agreement.nearly_deterministic:
            print(f"note: {deterministic_note(agreement, args.tau)}", file=sys.stderr)
    by_line = dict(zip(keep, results))
    for i, src in enumerate(lines):
        samples = by_line.get(i)
        if samples is None:
            _emit(out, args.json, {"input": src, "skipped": True}, [""] * n)
            continue
        record: dict = {"input": src, "tau": args.tau, "samples": samples}
        if positions is not None:
            # the positions' tokens as the model encoded them (cut as it cut them)
            ids = gen.tokenizer.encode(src)[: gen.max_len - 1] + [EOS_ID]
            record["positions"] = list(positions)
            record["tokens"] = [
                gen.tokenizer.token_text(ids[p]) if p < len(ids) else None for p in positions
            ]
        _emit(out, args.json, record, samples)


def _run_interpolate(gen: VATGenerator, args: Namespace, opts: DecodeOptions, out: TextIO) -> None:
    if args.input is None and len(args.sentences) != 2:
        raise VatError(
            "interpolate needs exactly two sentences (or --input FILE of tab-separated "
            f"pairs), got {len(args.sentences)}"
        )
    lines = ["\t".join(args.sentences)] if args.input is None else _read_lines(args)
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


def _run_prior(gen: VATGenerator, args: Namespace, opts: DecodeOptions, out: TextIO) -> None:
    for T, text in gen.prior(args.num_samples, args.length, opts, args.seed, args.prior_std):
        _emit(out, args.json, {"length": T, "output": text}, [text])


def _run_bleu(gen: VATGenerator, args: Namespace, opts: DecodeOptions, out: TextIO) -> None:
    lines = _read_lines(args, args.limit)
    keep = _non_empty(lines, quiet=args.quiet)
    if args.limit is not None:
        keep = keep[: args.limit]
    if not keep:
        raise VatError("no non-empty sentence to score")
    texts = [lines[i] for i in keep]
    hyps = gen.reconstruct(texts, opts, labels=_labels(args, keep))
    s = reconstruction_score(hyps, texts)
    strategy = f"beam {opts.beam_size}" if opts.strategy == "beam" else opts.strategy
    record = {
        "bleu": s.bleu,
        "exact_match": s.exact_match,
        "exact": s.exact,
        "n": s.n,
        "decoding": strategy,
        "bleu_metric": "torchmetrics SacreBLEUScore(tokenize='13a')",
    }
    shown = [
        f"BLEU {s.bleu:.2f}  exact match {s.exact}/{s.n} ({100 * s.exact_match:.1f}%)  "
        f"decoding {strategy}"
    ]
    if args.long_over is not None:
        # lines longer than a model's max_len are truncated, so report them apart
        long = [len(ids) > args.long_over for ids in gen.tokenizer.encode_batch(texts)]
        for name, wanted in (("long", True), ("short", False)):
            part = [i for i, is_long in enumerate(long) if is_long == wanted]
            bound = f"{'>' if wanted else '<='} {args.long_over}"
            if not part:
                record[name] = {"subwords": bound, "n": 0}
                continue
            sub = reconstruction_score([hyps[i] for i in part], [texts[i] for i in part])
            record[name] = {"subwords": bound, "bleu": sub.bleu, "exact_match": sub.exact_match,
                            "n": sub.n}  # fmt: skip
            shown.append(f"  {name} (subwords {bound}): BLEU {sub.bleu:.2f}  "
                         f"exact match {sub.exact}/{sub.n}")  # fmt: skip
    _emit(out, args.json, record, shown)


RUNNERS = {
    "reconstruct": _run_reconstruct,
    "sample": _run_sample,
    "resample-token": _run_sample,
    "interpolate": _run_interpolate,
    "prior": _run_prior,
    "bleu": _run_bleu,
}
