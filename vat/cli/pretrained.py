"""`vat pretrained [show NAME]`: the models that ship with vat, loadable by name with no
network (adding one: scripts/add_pretrained.py)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from vat.cli.common import Parser
from vat.errors import OptionError, VatError, run_cli


def build_parser() -> Parser:
    p = Parser(
        prog="vat pretrained",
        usage="vat pretrained [list | show NAME] [options]",
        description="The models that ship with vat (load one with --model NAME or vat.load(NAME)).",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.add_parser("list", prog="vat pretrained list", help="list the shipped models (default)")
    show = sub.add_parser("show", prog="vat pretrained show", help="print a shipped model's card")
    show.add_argument("name", metavar="NAME")
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
        cols = list(rows[0])
        widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
        for r in [dict(zip(cols, cols)), *rows]:  # the header, then a row per model
            print("  ".join(r[c].ljust(widths[c]) for c in cols).rstrip())
        print("\nload one with `vat.load(NAME)` or `--model NAME`; `vat pretrained show NAME` "
              "prints its card")  # fmt: skip
    elif not problems:
        print("no models ship with this installation of vat")
    if problems:  # the intact models are listed; a damaged one is the one-line error
        more = f" (and {len(problems) - 1} more damaged entries)" if len(problems) > 1 else ""
        raise VatError(f"{problems[0]}{more}")
    return 0


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


def _main(argv: list[str]) -> int:
    if argv[:1] == ["add"]:
        raise VatError("adding a shipped model is a maintainer's step, in a checkout of vat: "
                       "python scripts/add_pretrained.py DIR --name NAME")  # fmt: skip
    args = build_parser().parse_args(argv)
    if args.action in (None, "list"):
        return _list()
    return _show(args.name)


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
