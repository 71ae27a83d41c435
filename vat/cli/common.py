"""What every `vat` command shares: the one-line-error parser, option types, input reading.

Option names are one vocabulary (docs/cli.md): `--model` (alias `--ckpt`), `--output FILE`
(always a file), `--output-dir DIR` (a folder a command writes), `--plot FILE` (a PNG),
`--plot-dir DIR` (a folder of PNGs), `--data-dir DIR` (SentEval's data), `--train-data-dir
DIR` (what a shared model's record names its training files against), `--device auto`, `--debug`,
`--no-progress`, `--quiet`. An older spelling users already type stays as a
renamed option (`add_renamed`): it works, with one warning line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

from vat.data.corpus import MAX_LINE_BYTES, bounded_lines, decode_each
from vat.errors import VatError, did_you_mean


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`error: ...`, exit 2) like every other error,
    instead of the whole usage block, with the nearest valid name for a mistyped choice or
    option. Subparsers made from it behave the same. No prefix matching
    (`allow_abbrev=False`): `--num-sample` is an error, not `--num-samples`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise VatError(f"{message}{self._did_you_mean(message)} (see {self.prog} --help)")

    def _did_you_mean(self, message: str) -> str:
        # argparse's own wording (3.11-3.13): "invalid choice: 'x' (choose from 'a', 'b')" and
        # "unrecognized arguments: --x 1 ..."
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
    """An older spelling of an option: stores into the new option's dest, with one warning line
    on stderr naming both spellings."""

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
    """`old` as an older spelling of `option` (what `add_argument` returned): same value, same
    dest, hidden from --help, and a one-line warning when used. `p` is the parser or group
    `option` was added to (so a mutually exclusive group excludes both spellings)."""
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


def add_common(p: argparse.ArgumentParser, *, progress: bool = True) -> None:
    """--device, --debug and (where there are progress bars) --no-progress / --quiet."""
    p.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:1, ... (default auto: cuda if available, else cpu)",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    if progress:
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument(
            "--quiet",
            action="store_true",
            help="no progress bars and no notes on stderr (errors still show)",
        )


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


def add_train_data_dir(p) -> None:
    """`--train-data-dir DIR`, on the commands whose output leaves this machine (`vat export
    --repo-id`, scripts/add_pretrained.py): its record names each training file by its path
    inside this folder, else by name. Not `--data-dir`: every command spells SentEval's folder that
    way (docs/cli.md), and `vat export` takes both."""
    p.add_argument(
        "--train-data-dir",
        metavar="DIR",
        default=None,
        help="the data folder a shared model's record names its training files against "
        "(their path inside it, else their name); default $VAT_DATA_DIR, else ../shared/data",
    )


def show_progress(args: argparse.Namespace) -> bool:
    return not (getattr(args, "no_progress", False) or getattr(args, "quiet", False))


def finite_float(text: str) -> float:
    """argparse type: a finite float (NaN and infinities are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def number_list(kind: type[int] | type[float]) -> Callable[[str], list]:
    """argparse type for "1,3" or "0,0.5,1" (finite values). Comma lists, not nargs="+", so
    that a list option never swallows the positional sentences after it."""

    def parse(text: str) -> list:
        try:
            values = [
                (finite_float if kind is float else int)(x) for x in text.split(",") if x.strip()
            ]
        except (ValueError, argparse.ArgumentTypeError):
            what = "finite numbers" if kind is float else "integers"
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def check_utf8_arguments(values: Sequence[str], what: str = "argument") -> None:
    """Python decodes undecodable command-line bytes to lone surrogates; refuse them here,
    in one line, rather than fail later when the text is encoded or printed."""
    for i, value in enumerate(values, 1):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise VatError(f"{what} {i} is not valid UTF-8 text") from None


def split_lines(text: str) -> list[str]:
    """Lines ended by \\n or \\r\\n only. str.splitlines() also splits on form feed, U+2028,
    \\x85, \\x1c-\\x1e..., so output would stop lining up with the input's lines."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def iter_text_lines(
    source: str, option: str = "--input", max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of a text file, plain or .gz, or of stdin for '-',
    read as they arrive: a caller that stops early (`--limit`) never waits for the rest of a
    pipe, and memory holds one line at a time. A line longer than `max_line_bytes` is cut
    there (at a character's start, so that it still decodes), handed on as soon as it is
    cut, and the rest of it skipped. The text rule of every reader applies
    (vat.data.corpus.bounded_lines: a UTF-16 file or a binary one refused, a UTF-8
    byte-order mark and the \\r of \\r\\n dropped)."""
    from vat.data.corpus import open_sentence_file
    from vat.io import regular_file

    if source == "-":
        where = "stdin"
        stream = contextlib.nullcontext(sys.stdin.buffer)  # vat does not close its stdin
    else:
        if os.path.isdir(source):  # isdir, unlike Path.is_dir, says False for a too-long name
            raise VatError(f"{option} {source} is a directory, expected a text file")
        # a regular file, or a shell's pipe such as <(head -500 file); never a named FIFO
        # (it blocks until a writer appears) or a device (/dev/zero never ends)
        path = regular_file(source, option, allow_pipe=True)
        where = f"{option} {path}"
        stream = open_sentence_file(path)
    try:
        with stream as f:
            yield from bounded_lines(f, max_line_bytes, where)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise VatError(f"{where} is a truncated or corrupt gzip file ({e})") from None


def read_text_lines(source: str, option: str = "--input", limit: int | None = None) -> list[str]:
    """Lines of a UTF-8 text file, plain or .gz as training reads them ('-' = stdin), each
    kept to its first MAX_LINE_BYTES (`iter_text_lines`: a line without an end does not fill
    memory), up to the `limit`-th non-empty one (all without one: `--limit N` holds N
    sentences, and does not wait for the rest of a pipe). A line that is not UTF-8 is a
    one-line error naming FILE:LINE (`decode_each`, the one rule of every reader)."""
    where = "stdin" if source == "-" else source
    lines, kept = [], 0
    with contextlib.closing(iter_text_lines(source, option)) as numbered:  # closed at --limit
        for number, raw in numbered:
            (text,), _ = decode_each([raw], number, where, "error", "expected UTF-8 text")
            lines.append(text)
            kept += bool(text.strip())
            if kept == limit:
                break
    return lines
