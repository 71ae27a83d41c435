"""User-facing errors: one line, no traceback (unless --debug), non-zero exit; a leaf module."""

from __future__ import annotations

import difflib
import errno
import math
import operator
import os
import sys
from collections.abc import Callable, Sequence


class VatError(Exception):
    """An error caused by user input, on one line (control characters made `visible`)."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(visible(str(message)), *args)


class OptionError(VatError, ValueError):
    """A bad value of the Python argument `name`; a command names its flag (`cli_message`)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, visible(problem)
        super().__init__(f"{name}: {problem}")


def flag(name: str) -> str:
    """num_samples -> --num-samples; a dotted config key stays as YAML spells it."""
    if name.startswith("-") or "." in name:
        return name
    return "--" + name.replace("_", "-")


def cli_message(e: BaseException) -> str:
    """The one line a command prints for `e`: an OptionError names the flag."""
    if isinstance(e, OptionError):
        return f"{flag(e.name)}: {e.problem}"
    return one_line(e)


class CheckpointError(VatError, ValueError):
    """A checkpoint that is missing, unreadable, or not a vat checkpoint."""


# "Bad input" rather than "bug in vat"; whoever raises them names the path or option.
USER_ERRORS: tuple[type[BaseException], ...] = (
    VatError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
    UnicodeDecodeError,
)


def debug_requested(argv: Sequence[str]) -> bool:
    """`--debug` on the command line or VAT_DEBUG=1: show tracebacks of user errors."""
    return "--debug" in argv or os.environ.get("VAT_DEBUG") == "1"


def visible(text: str) -> str:
    """`text` with unprintable characters escaped as repr does, so a message stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_path(path: str | os.PathLike) -> str:
    """`path` made `visible`, and beyond 300 characters shortened to its two ends."""
    text = visible(os.fspath(path))
    if len(text) <= 300:
        return text
    return f"{text[:40]}...{text[-40:]} ({len(text):,} characters)"


def one_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    if isinstance(e, OSError) and not isinstance(e, VatError) and e.filename and e.strerror:
        name = e.filename if isinstance(e.filename, str | bytes | os.PathLike) else str(e.filename)
        return f"{e.strerror}: {shown_path(os.fsdecode(name))}"
    text = str(e).strip()
    return visible(text.splitlines()[0]) if text else type(e).__name__


def run_cli(
    main: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    extra_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Call `main(argv)`: a user error exits 2 with one line, Ctrl-C 130; `--debug` re-raises."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(argv)
    argv = [a for a in argv if a != "--debug"]
    try:
        return int(main(argv) or 0)
    except (*USER_ERRORS, *extra_errors) as e:
        if debug:
            raise
        print(f"error: {cli_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        # a path too long wherever it was opened: the user typed it, so it is theirs to fix
        if debug or e.errno != errno.ENAMETOOLONG:
            raise
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2


def check(ok: bool, option: str, expected: str, value) -> None:
    """Raise a one-line VatError naming the option unless `ok`."""
    if not ok:
        raise VatError(f"{option} must be {expected}, got {value!r}")


def finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_count(value: int, name: str, minimum: int = 1) -> int:
    """A whole number >= minimum (int or numpy integer), else an OptionError."""
    n = _whole(value)
    if n is None:
        raise OptionError(name, f"must be a whole number >= {minimum}, got {_shown(value)}")
    if n < minimum:
        raise OptionError(name, f"must be at least {minimum}, got {value!r}")
    return n


def _whole(value) -> int | None:
    """`value` as an int if it is an int or numpy integer (not bool), else None."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return None
    try:
        return operator.index(value)  # int and numpy integers; 2.5, "3" and None are not
    except TypeError:
        return None


def _shown(value) -> str:
    if value is None:
        return "None"
    text = repr(value).replace("\n", " ")
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_number(
    value: float,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> float:
    """A finite real number (not bool or str) in [low, high] ((low, high] with `low_open`)."""
    ok = not isinstance(value, bool | str | bytes) and type(value).__name__ != "bool_"
    try:
        x = float(value) if ok else math.nan
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise OptionError(name, f"must be a number, got {_shown(value)}")
    bounds = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
    bounds += [f"<= {high:g}"] if high is not None else []
    want = " ".join(["a finite number", " and ".join(bounds)]).strip()
    if (
        not math.isfinite(x)
        or (low is not None and (x < low or (low_open and x == low)))
        or (high is not None and x > high)
    ):
        raise OptionError(name, f"must be {want}, got {value!r}")
    return x


def check_seed(value: int | None, name: str = "seed") -> int | None:
    """None or a whole number in [0, 2**63), what torch's and numpy's generators both take."""
    if value is None:
        return None
    n = _whole(value)
    if n is None or not 0 <= n < 2**63:
        raise OptionError(
            name, f"must be None or a whole number in [0, 2**63), got {_shown(value)}"
        )
    return n


def nearest(word: object, choices: Sequence[str]) -> str | None:
    """The choice nearest to a mistyped `word` (difflib's ratio, case ignored), else None."""
    if not isinstance(word, str) or not word.strip():
        return None
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.strip().lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def did_you_mean(word: object, choices: Sequence[str]) -> str:
    """` (did you mean X?)` naming `nearest(word, choices)`, else ""."""
    near = nearest(word, choices)
    return f" (did you mean {near}?)" if near else ""


def check_choice(value: str, name: str, choices: Sequence[str]) -> str:
    """One of `choices`, else an OptionError listing them (and the nearest one)."""
    if not isinstance(value, str) or value not in choices:
        raise OptionError(
            name,
            f"must be one of {', '.join(choices)}, got {_shown(value)}"
            + did_you_mean(value, choices),
        )
    return str(value)


def check_optional_text(value: str | None, name: str) -> str | None:
    """None or a str (numpy's str too)."""
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    raise OptionError(name, f"must be a string or None, got {_shown(value)}")


TEXTS = "expected a string or a list of strings"


def _bytes_hint(value) -> str:
    return "; decode bytes first (data.decode('utf-8'))" if isinstance(value, bytes) else ""


def check_sentence(value: str, name: str) -> str:
    """One sentence: a str (or a 0-d array of one), else an OptionError."""
    if _is_array(value) and value.ndim == 0:
        value = value.tolist()
    if isinstance(value, str):
        return str(value)
    hint = _bytes_hint(value)
    if isinstance(value, list | tuple) or _is_array(value):
        hint = "; this argument is one sentence, not a list"
    raise OptionError(name, f"expected one sentence (a string), got {_shown(value)}{hint}")


def _is_array(value) -> bool:
    """A numpy array or tensor, without importing numpy."""
    return hasattr(value, "ndim") and hasattr(value, "tolist") and not isinstance(value, str)


def check_sentences(value, name: str = "sentences") -> tuple[list[str], bool]:
    """(sentences, single), as sentence-transformers' `encode` reads them: a str is one
    sentence; a list, tuple, generator or 1-D array of strings is a batch."""
    if isinstance(value, str):
        return [str(value)], True
    if _is_array(value):
        if value.ndim == 0:
            return [check_sentence(value, name)], True
        if value.ndim != 1:
            raise OptionError(name, f"{TEXTS}, got a {value.ndim}-D array")
        value = value.tolist()
    if value is None or isinstance(value, bytes | bytearray | memoryview | dict):
        raise OptionError(name, f"{TEXTS}, got {_shown(value)}{_bytes_hint(value)}")
    try:
        items = list(value)
    except TypeError:
        raise OptionError(name, f"{TEXTS}, got {_shown(value)}") from None
    for i, x in enumerate(items):
        if not isinstance(x, str):
            raise OptionError(name, f"{TEXTS}, but {name}[{i}] is {_shown(x)}{_bytes_hint(x)}")
    return [str(x) for x in items], False


def check_path(value, name: str, *, optional: bool = False):
    """A non-empty str or os.PathLike (None when `optional`), returned unchanged."""
    if value is None and optional:
        return None
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if not isinstance(text, str):
        raise OptionError(name, f"expected a path (str or pathlib.Path), got {_shown(value)}")
    if not text.strip():  # Path("") is ".", which nobody means by an empty name
        raise OptionError(name, "is empty; name a file or folder")
    return value
