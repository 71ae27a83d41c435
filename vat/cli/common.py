"""What every `vat` command shares: the one-line-error parser, option types, input reading.

Option names are the same everywhere: `--model` (alias `--ckpt`), `--output`, `--device auto`,
`--debug`, `--no-progress`, `--quiet`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from vat.errors import VatError


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (`error: ...`, exit 2) like every other error,
    instead of the whole usage block. Subparsers made from it behave the same. No prefix
    matching (`allow_abbrev=False`): `--num-sample` is an error, not `--num-samples`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise VatError(f"{message} (see {self.prog} --help)")


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


def read_text_lines(source: str, option: str = "--input") -> list[str]:
    """Lines of a UTF-8 text file ('-' = stdin); bad bytes are a one-line error naming the line."""
    if source == "-":
        data, name = sys.stdin.buffer.read(), "stdin"
    else:
        from vat.io import regular_file

        path = Path(source)
        if path.is_dir():
            raise VatError(f"{option} {path} is a directory, expected a text file")
        # a regular file, or a shell's pipe such as <(head -500 file); never a named FIFO
        # (it blocks until a writer appears) or a device (/dev/zero never ends)
        regular_file(path, option, allow_pipe=True)
        data, name = path.read_bytes(), f"{option} {path}"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise VatError(
            f"{name}: line {line} has bytes that are not UTF-8 (expected UTF-8 text)"
        ) from None
    return split_lines(text)
