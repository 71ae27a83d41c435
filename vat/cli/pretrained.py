"""`vat pretrained`: the models that ship with vat, loadable by name with no network.

    vat pretrained                               list them: name, shape, rate, data, scores, size
    vat pretrained show NAME                     print one model's card
    vat pretrained add DIR --name NAME [...]     add an exported folder to the registry

Every command's `--model NAME` (or `--model vat:NAME`) and `vat.load(NAME)` load a shipped
model; how names, paths and Hub ids are told apart is in vat.share.resolve, the registry's
layout in vat.share.pretrained.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vat.cli.common import Parser, add_train_data_dir, read_text_lines
from vat.errors import OptionError, VatError, run_cli


def build_parser() -> Parser:
    p = Parser(
        prog="vat pretrained",
        usage="vat pretrained [list | show NAME | add DIR --name NAME ...] [options]",
        description="The models that ship with vat: list them, show one's card, or add an "
        "exported folder to the registry. Load one with --model NAME or vat.load(NAME).",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.add_parser("list", prog="vat pretrained list", help="list the shipped models (default)")
    show = sub.add_parser(
        "show", prog="vat pretrained show", help="print a shipped model's card (README.md)"
    )
    show.add_argument("name", metavar="NAME")
    add = sub.add_parser(
        "add",
        prog="vat pretrained add",
        help="add an exported folder (vat export) to the shipped models",
        description="Copy an exported folder into the registry with half-precision weights, "
        "SHA-256 sums, and a card that says what the model is and how far the stored weights "
        "move its outputs from float32.",
    )
    add.add_argument("folder", metavar="DIR", help="an exported folder (vat export MODEL DIR)")
    add.add_argument("--name", required=True, help="the name it loads by (no slash)")
    add.add_argument("--summary", default=None, help="one line: what the model is")
    add.add_argument("--good-for", default=None, help="one line: what it is good for")
    add.add_argument("--not-for", default=None, help="one line: what it is not for")
    add.add_argument("--rebuild", default=None, help="the commands that rebuild it")
    add.add_argument(
        "--dtype",
        default="float16",
        choices=("float16", "bfloat16"),
        help="how the weights are stored (default float16: 10 mantissa bits against "
        "bfloat16's 7; bfloat16 for weights beyond float16's range)",
    )
    add.add_argument(
        "--check-file",
        default=None,
        metavar="FILE",
        help="sentences (one per line) to compare the stored weights with float32 on "
        "(default: vat's built-in check sentences)",
    )
    add.add_argument(
        "--registry",
        default=None,
        metavar="DIR",
        help="the registry folder (default: the installed package's vat/shipped, or "
        "$VAT_SHIPPED_DIR)",
    )
    add_train_data_dir(add)  # the records it ships name files by their path inside it
    add.add_argument("--overwrite", action="store_true", help="replace a shipped model")
    add.add_argument(
        "--allow-outside-tolerance",
        action="store_true",
        help="add it even when its stored weights move its outputs from float32 beyond the "
        "tolerance docs/sharing.md states for shipped models (refused without)",
    )
    add.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return p


def _list() -> int:
    from vat.share.pretrained import shipped_models

    problems: list[VatError] = []
    rows = []
    for e in shipped_models(problems=problems):
        try:
            rows.append({"name": e.name, **e.facts()})
        except VatError as error:
            problems.append(error)
    if rows:
        _print_rows(rows)
    elif not problems:
        print("no models ship with this installation of vat")
    if problems:  # the intact models are listed; a damaged one is the one-line error
        more = f" (and {len(problems) - 1} more damaged entries)" if len(problems) > 1 else ""
        raise VatError(f"{problems[0]}{more}")
    return 0


def _print_rows(rows: list[dict[str, str]]) -> None:
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols).rstrip())
    for r in rows:
        print("  ".join(r[c].ljust(widths[c]) for c in cols).rstrip())
    print(
        "\nload one with `vat.load(NAME)` or `--model NAME`; `vat pretrained show NAME` "
        "prints its card"
    )


def _show(name: str) -> int:
    from vat.share import CARD_NAME
    from vat.share.pretrained import named_shipped

    try:
        entry = named_shipped(name)
    except OptionError as e:  # NAME is a positional argument, not a flag
        raise VatError(f"NAME {e.problem}") from None
    # the card is only as true as the files it describes: checked as loading checks them
    entry.verify()
    sys.stdout.write((entry.folder / CARD_NAME).read_text(encoding="utf-8"))
    return 0


def _add(args) -> int:
    from vat.api import load
    from vat.share.folder import is_model_folder
    from vat.share.training_record import portable_name
    from vat.shipping import add_pretrained

    if not is_model_folder(args.folder):
        raise VatError(
            f"DIR: {args.folder} is not an exported folder (no config.json); export a "
            "checkpoint or run folder first: vat export MODEL DIR"
        )
    sentences = None
    if args.check_file is not None:
        sentences = read_text_lines(args.check_file, "--check-file")
        if not any(s.strip() for s in sentences):
            raise VatError(f"--check-file {args.check_file} holds no non-empty line")
    entry = add_pretrained(
        load(args.folder, "cpu"),
        args.name,
        summary=args.summary,
        good_for=args.good_for,
        not_for=args.not_for,
        rebuild=args.rebuild,
        dtype=args.dtype,
        check_sentences=sentences,
        # the card names the file as the training records do: no path of this machine
        check_from=None
        if args.check_file is None
        else portable_name(args.check_file, args.train_data_dir),
        registry=args.registry,
        overwrite=args.overwrite,
        train_data_dir=args.train_data_dir,
        allow_outside_tolerance=args.allow_outside_tolerance,
    )
    m = entry.info["fp32_match"]
    print(
        f"wrote {entry.folder} ({entry.size_bytes / 2**20:.1f} MiB, {entry.info['dtype']}); "
        f"against float32 on {m['sentences']} sentences: features within "
        f"{m['max_abs_feature']:.2e} (lowest cosine {m['min_cosine']:.6f}), "
        f"{m['same_reconstructions']}/{m['sentences']} reconstructions identical"
    )
    print(f"load it with vat.load({entry.name!r}) or --model {entry.name}")
    return 0


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action in (None, "list"):
        return _list()
    if args.action == "show":
        return _show(args.name)
    return _add(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
