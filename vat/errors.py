"""User-facing errors: one line, no traceback (unless --debug), non-zero exit.

A leaf module (it imports nothing from vat), so every other module can raise `VatError`.
Every command (`vat ...`) runs through `run_cli`, so an error caused
by the user's input (a missing file, a bad option, a corrupt checkpoint) reads as
`error: <what> (<path or option>): <what was expected>` instead of a traceback.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence


class VatError(Exception):
    """An error caused by user input; its message is the whole story."""


class OptionError(VatError, ValueError):
    """A bad value of the Python argument `name` (e.g. `num_samples`). The library names the
    argument; a command names its flag instead (`--num-samples`, see `cli_message`)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{name}: {problem}")


def flag(name: str) -> str:
    """The command-line flag of a Python argument: every vat command spells its options as
    the Python names in kebab case (num_samples -> --num-samples, model -> --model). A
    dotted config key (model.optim.warmup_steps) is named as the YAML and LightningCLI
    spell it."""
    if name.startswith("-") or "." in name:
        return name
    return "--" + name.replace("_", "-")


def cli_message(e: BaseException) -> str:
    """The one line a command prints for `e`: an OptionError names the flag, not the
    Python argument (the one place where Python names become flags)."""
    if isinstance(e, OptionError):
        return f"{flag(e.name)}: {e.problem}"
    return one_line(e)


class CheckpointError(VatError, ValueError):
    """A checkpoint that is missing, unreadable, or not a vat checkpoint."""


# Exceptions that mean "bad input" rather than "bug in vat". Each message must already name
# the path or option at fault; the places that raise them make sure it does.
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


def one_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    if isinstance(e, OSError) and not isinstance(e, VatError) and e.filename and e.strerror:
        return f"{e.strerror}: {e.filename}"
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def run_cli(
    main: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    extra_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Call `main(argv)`; turn user errors into one line on stderr and exit code 2.

    `--debug` anywhere in argv (or VAT_DEBUG=1) re-raises so the full traceback shows; it is
    removed from the arguments `main` sees. Ctrl-C is one line and exit code 130 (128 +
    SIGINT, the shell's convention). `extra_errors` are further exception types that mean
    bad input for this command (e.g. Lightning's MisconfigurationException for training).
    """
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


# -- option checks: one-line errors naming the option (configs, the API, the CLI)
def check(ok: bool, option: str, expected: str, value) -> None:
    """Raise a one-line VatError naming the option unless `ok` (config validation)."""
    if not ok:
        raise VatError(f"{option} must be {expected}, got {value!r}")


def finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_non_negative_finite(value: float, name: str, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 with `positive`), else an OptionError naming `name` (a
    Python argument; a command shows its flag)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise OptionError(name, f"must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise OptionError(
            name, f"must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return x


def check_count(value: int, name: str, minimum: int = 1) -> int:
    """A whole number >= minimum (booleans and floats refused), else an OptionError naming
    `name` (a Python argument, or a dotted config key such as model.optim.warmup_steps)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(name, f"must be a whole number >= {minimum}, got {value!r}")
    if value < minimum:
        raise OptionError(name, f"must be at least {minimum}, got {value!r}")
    return value
