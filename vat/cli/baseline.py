"""`vat baseline word-vectors`: same-data word vectors (gensim's skip-gram fastText or word2vec)
and their counts, for `vat evaluate --word-vectors OUT/vectors.txt --word-counts OUT/counts.txt`
(vat/eval/word_vectors.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from vat.cli.common import Parser, whole
from vat.errors import VatError, run_cli, shown_path

OUTPUTS = ("vectors.txt", "counts.txt", "baseline.json")
NEEDS_GENSIM = (
    'vat baseline word-vectors needs gensim: pip install "variational-auto-transformer[baselines]"'
)


def build_parser() -> Parser:
    p = Parser(
        prog="vat baseline",
        usage="vat baseline word-vectors [options] OUT_DIR",
        description="Baselines trained on the same text as a VAT.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser, required=True)
    wv = sub.add_parser(
        "word-vectors",
        prog="vat baseline word-vectors",
        help="train skip-gram fastText or word2vec vectors (gensim) and count the words",
        description="Train skip-gram (sg=1) word vectors with gensim on the text files and write "
        "OUT_DIR/vectors.txt (word2vec text format, header 'N D'), OUT_DIR/counts.txt (every "
        "token of the text and its count, for SIF) and OUT_DIR/baseline.json (the settings and "
        "the data seen). Tokens: re.findall(r'\\w+|[^\\w\\s]', line.lower()), one sentence per "
        "non-empty line. Score them with `vat evaluate --word-vectors OUT_DIR/vectors.txt "
        "--word-counts OUT_DIR/counts.txt`. Needs the optional gensim "
        '(pip install "variational-auto-transformer[baselines]").',
    )
    wv.add_argument(
        "--train-files",
        nargs="+",
        required=True,
        metavar="FILE",
        help="text files, one sentence per line, plain or .gz (globs are expanded)",
    )
    wv.add_argument("--method", required=True, choices=["fasttext", "word2vec"])
    wv.add_argument("--dim", type=whole(1), required=True, metavar="D", help="vector size")
    wv.add_argument("--epochs", type=whole(1), required=True, metavar="E", help="passes")
    wv.add_argument("--min-count", type=whole(1), default=2, metavar="N", help="(default 2)")
    wv.add_argument("--window", type=whole(1), default=5, metavar="N", help="(default 5)")
    wv.add_argument("--seed", type=whole(0, 2**32 - 1), default=1, help="(default 1)")
    wv.add_argument(
        "--workers",
        type=whole(1),
        default=1,
        metavar="N",
        help="training threads (default 1: only one thread gives the same vectors every run)",
    )
    wv.add_argument("--quiet", action="store_true", help="no notes on stderr")
    wv.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    wv.add_argument(
        "out_dir", metavar="OUT_DIR", help="a folder holding none of " + ", ".join(OUTPUTS)
    )
    return p


def _check_out_dir(out_dir: Path) -> None:
    """Nothing is overwritten: OUT_DIR may exist, but none of the outputs in it."""
    if out_dir.is_symlink():  # files would land in a folder vat did not name
        raise VatError(f"OUT_DIR {shown_path(out_dir)} is a symbolic link; name the folder itself")
    if out_dir.exists() and not out_dir.is_dir():
        raise VatError(f"OUT_DIR {shown_path(out_dir)} is not a folder")
    for name in OUTPUTS:
        if (out_dir / name).exists() or (out_dir / name).is_symlink():
            raise VatError(
                f"OUT_DIR {shown_path(out_dir)} already holds {name}; choose another folder "
                "(nothing was written)"
            )


def _word_vectors(args) -> int:
    from vat.data.corpus import expand_files

    try:
        import gensim  # noqa: F401  (fail before reading the text)
    except ImportError:
        raise VatError(NEEDS_GENSIM) from None
    out_dir = Path(args.out_dir)
    _check_out_dir(out_dir)
    files = expand_files(args.train_files, "--train-files")
    from vat.eval.word_vectors import (
        TOKEN,
        TokenLines,
        count_tokens,
        train_word_vectors,
        write_word_counts,
        write_word_vectors,
    )
    from vat.io import write_json_atomic

    t0 = time.perf_counter()
    corpus = TokenLines(files)
    counts, lines = count_tokens(corpus)
    trained = train_word_vectors(
        corpus,
        method=args.method,
        dim=args.dim,
        epochs=args.epochs,
        window=args.window,
        min_count=args.min_count,
        seed=args.seed,
        workers=args.workers,
    )
    write_word_vectors(out_dir / "vectors.txt", trained.words, trained.vectors)
    write_word_counts(out_dir / "counts.txt", counts)
    record = {
        "method": args.method,
        "sg": 1,
        "dim": args.dim,
        "epochs": args.epochs,
        "window": args.window,
        "min_count": args.min_count,
        "seed": args.seed,
        "workers": args.workers,
        "tokens_pattern": TOKEN.pattern,
        "lowercase": True,
        "train_files": [{"path": str(f), "bytes": f.stat().st_size} for f in files],
        "lines": lines,
        "tokens": sum(counts.values()),
        "types": len(counts),
        "vocabulary": len(trained.words),
        "gensim": trained.gensim_version,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    write_json_atomic(out_dir / "baseline.json", record)  # last: its presence means complete
    if not args.quiet:
        print(
            f"wrote {out_dir}/{{{','.join(OUTPUTS)}}}: {len(trained.words):,} {args.method} "
            f"vectors of {args.dim} d from {record['tokens']:,} tokens in {lines:,} lines "
            f"({record['seconds']:.0f} s)",
            file=sys.stderr,
        )
    return 0


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return _word_vectors(args)  # the one action so far


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
