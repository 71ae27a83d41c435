"""`vat COMMAND ...`: the one command line of vat, one module per command (`COMMANDS`); errors
are one line, exit 2 (130 on Ctrl-C), and `--debug` shows the traceback instead."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from vat.errors import VatError, debug_requested, did_you_mean, run_cli

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("vat.cli.train:vat_train", "train a VAT (LightningCLI; see `vat train --help`)"),
    "evaluate": ("vat.cli.evaluate:main", "SentEval-style evaluation of a checkpoint or encoder"),
    "geometry": ("vat.cli.geometry:main", "isotropy, self-similarity and collapse diagnostics"),
    "score": ("vat.cli.score:main", "the text-VAE table: NLL (IWAE), -ELBO, KL, MI, AU, BLEU"),
    "generate": ("vat.cli.generate:main", "reconstruct, sample, interpolate, decode the prior"),
    "explore": ("vat.cli.explore:main", "the latent space of a model in the browser (gradio)"),
    "sweep": ("vat.cli.sweep:main", "train and measure one run per value of any config key"),
    "export": ("vat.cli.export:main", "export a checkpoint to a shareable model folder"),
    "features": ("vat.cli.features:main", "compare sentence-feature specs of a model"),
    "mteb": ("vat.cli.mteb:main", "run MTEB's English STS tasks on an exported model"),
    "config": ("vat.cli.config:main", "list the packaged configs, or print one"),
    "pretrained": ("vat.cli.pretrained:main", "the models that ship with vat: list, show a card"),
    "baseline": (
        "vat.cli.baseline:main",
        "train same-data word-vector baselines (fastText, word2vec)",
    ),
}
"""name -> ("module:function", one-line help); each function takes the command's arguments."""


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    return (
        "usage: vat COMMAND [options]   (vat COMMAND --help for a command's options)\n\n"
        f"commands:\n{rows}\n\nErrors are one line, exit code 2; --debug shows tracebacks."
    )


def command(name: str):
    """The entry function of command `name` (imported only when it runs: fast --help)."""
    module, function = COMMANDS[name][0].split(":")
    return getattr(importlib.import_module(module), function)


def _no_command(argv: list[str]) -> int:
    if not argv:
        raise VatError(
            "no command given; expected one of " + ", ".join(COMMANDS) + " (see vat --help)"
        )
    name = argv[0]
    if name in ("-h", "--help", "help"):
        print(usage())
        return 0
    if name == "--version":
        from vat import __version__

        print(f"vat {__version__}")
        return 0
    raise VatError(
        f"unknown command {name!r}{did_you_mean(name, list(COMMANDS))}; expected one of "
        f"{', '.join(COMMANDS)} (see vat --help)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The `vat` console script; each command wraps its own errors (run_cli)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:
        # --debug belongs to the command, which strips and honours it itself.
        with one_line_warnings(enabled=not debug_requested(argv)):
            return int(command(argv[0])(argv[1:]) or 0)
    return run_cli(_no_command, argv)


@contextlib.contextmanager
def one_line_warnings(enabled: bool = True):
    """vat's own warnings as one line, `warning: MESSAGE` (other packages' keep Python's form)."""
    previous = warnings.showwarning
    package = str(Path(__file__).resolve().parents[1]) + os.sep

    def show(message, category, filename, lineno, file=None, line=None):
        if not str(filename).startswith(package):
            return previous(message, category, filename, lineno, file, line)
        text = " ".join(str(message).split())
        print(f"warning: {text.removeprefix('vat: ')}", file=file or sys.stderr)

    if enabled:
        warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
