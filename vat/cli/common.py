"""What every `vat` command shares: the one-line-error parser, its options (one vocabulary,
docs/cli.md) and types, and input reading."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import re
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import Literal, NoReturn

from vat.data.corpus import (
    MAX_LINE_BYTES,
    bounded_lines,
    decode_each,
    open_sentence_file,
    warn_skipped,
)
from vat.data.paths import SENTEVAL_ENV
from vat.errors import VatError, did_you_mean
from vat.io import regular_file


class Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit 2) naming the nearest choice, and no prefixes."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise VatError(f"{message}{self._did_you_mean(message)} (see {self.prog} --help)")

    def _did_you_mean(self, message: str) -> str:
        # argparse's own wording (3.11-3.13)
        choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice:
            return did_you_mean(choice[1], re.findall(r"'([^']*)'", choice[2]))
        unknown = re.match(r"unrecognized arguments: (-\S+)", message)
        if unknown:
            return did_you_mean(unknown[1].split("=")[0], option_strings(self))
        return ""


def option_strings(p: argparse.ArgumentParser) -> list[str]:
    """Every option string of `p` and of its subcommands' parsers."""
    out = []
    for action in p._actions:  # argparse keeps no public list of a parser's options
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += option_strings(sub)
        elif action.help != argparse.SUPPRESS:
            out += [o for o in action.option_strings if o.startswith("--")]
    return out


class _Renamed(argparse.Action):
    """An older spelling of an option (`add_renamed`)."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        warn_renamed(parser.prog, option_string, self.new)
        setattr(namespace, self.dest, values)


def warn_renamed(prog: str, old: str | None, new: str) -> None:
    print(
        f"warning: {prog}: {old} is now {new} (docs/cli.md); the old spelling still works",
        file=sys.stderr,
    )


def add_renamed(p, old: str, option: argparse.Action) -> None:
    """`old` as a hidden older spelling of `option` (in parser or group `p`), warning when used."""
    p.add_argument(
        old,
        action=_Renamed,
        new=option.option_strings[0],
        dest=option.dest,
        nargs=option.nargs,
        type=option.type,
        metavar=option.metavar,
        default=argparse.SUPPRESS,  # the new option's default stands
        help=argparse.SUPPRESS,
    )


def add_common(p: argparse.ArgumentParser) -> None:
    """--device, --debug, --no-progress and --quiet."""
    p.add_argument("--device", default="auto", help="auto (cuda if any, else cpu), cpu, cuda:N")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--quiet", action="store_true", help="no progress bars and no notes on stderr")


MODEL_HELP = (
    "the model: a training checkpoint (.ckpt), an exported folder, a run folder (its best "
    "checkpoint, else last.ckpt), a model that ships with vat by name (vat pretrained) or a "
    "Hugging Face Hub repo id (--ckpt is an alias)"
)


def add_model_option(p, *, required: bool = True) -> None:
    """`--model` (alias `--ckpt`), the same on every command; `vat.share.resolve` resolves it."""
    p.add_argument(
        "--model", "--ckpt", dest="model", metavar="MODEL", required=required, help=MODEL_HELP
    )


def add_output(p, help: str) -> None:
    """`--output FILE` and `--overwrite` (an existing file is replaced only with it)."""
    p.add_argument("--output", metavar="FILE", help=help)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")


def add_data_dir(p, what: str = "") -> argparse.Action:
    """`--data-dir DIR`: SentEval's data/downstream folder, `what` saying what it is for."""
    return p.add_argument(
        "--data-dir",
        metavar="DIR",
        help=f"SentEval's data/downstream folder{what} (default ${SENTEVAL_ENV}, else "
        "../shared/data/senteval)",
    )


def add_batch_size(p, default: int) -> None:
    text = f"sentences per model call (default {default})"
    p.add_argument("--batch-size", type=whole(1), default=default, metavar="N", help=text)


def add_train_data_dir(p) -> None:
    """`--train-data-dir DIR`, for outputs that leave this machine (not SentEval's --data-dir)."""
    p.add_argument(
        "--train-data-dir",
        metavar="DIR",
        help="the data folder a shared model's record names its training files against "
        "(their path inside it, else their name); default $VAT_DATA_DIR, else ../shared/data",
    )


def show_progress(args: argparse.Namespace) -> bool:
    return not (getattr(args, "no_progress", False) or getattr(args, "quiet", False))


def whole(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type: a whole number in minimum..maximum, refused as the option is read."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"at least {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def finite(minimum: float | None = None, *, positive: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number, >= minimum, and > 0 if `positive`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if (positive and value <= 0) or (minimum is not None and value < minimum):
            bound = "> 0" if positive else f">= {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


def number_list(kind: type[int] | type[float]) -> Callable[[str], list]:
    """argparse type for "1,3" or "0,0.5,1": not nargs="+", which would swallow the sentences."""

    one = finite() if kind is float else int

    def parse(text: str) -> list:
        try:
            values = [one(x) for x in text.split(",") if x.strip()]
        except (ValueError, argparse.ArgumentTypeError):
            what = "finite numbers" if kind is float else "integers"
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def iter_text_lines(source: str, option: str = "--input") -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line of a text file (or .gz, '-': stdin), cut to MAX_LINE_BYTES."""
    if source == "-":
        where = "stdin"
        stream = contextlib.nullcontext(sys.stdin.buffer)  # vat does not close its stdin
    else:
        # a file or a shell's <(pipe); never a FIFO (it blocks) or a device (/dev/zero never ends)
        path = regular_file(source, option, allow_pipe=True)
        where = f"{option} {path}"
        stream = open_sentence_file(path)
    try:
        with stream as f:
            yield from bounded_lines(f, MAX_LINE_BYTES, where)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise VatError(f"{where} is a truncated or corrupt gzip file ({e})") from None


def read_text_lines(
    source: str,
    option: str = "--input",
    limit: int | None = None,
    on_bad_bytes: Literal["error", "skip"] = "error",
    hint: str = "expected UTF-8 text",
) -> list[str]:
    """The lines of `iter_text_lines(source)` as text, up to the `limit`-th non-empty one; a line
    that is not UTF-8 is an error naming FILE:LINE and `hint`, or skipped and counted."""
    where = "stdin" if source == "-" else source
    lines, kept, bad = [], 0, 0
    with contextlib.closing(iter_text_lines(source, option)) as numbered:  # closed at --limit
        for number, raw in numbered:
            decoded, skipped = decode_each([raw], number, where, on_bad_bytes, hint)
            lines += decoded
            bad += skipped
            kept += any(text.strip() for text in decoded)
            if kept == limit:
                break
    warn_skipped(where, bad)
    return lines
