"""`vat export CKPT DIR`: a training checkpoint as a shareable model folder (no trainer state).

The folder (config.json, model.safetensors, tokenizer.json, README.md) loads with
`vat.load(DIR)` and is accepted by every `--ckpt`; see `vat.hub`.
"""

from __future__ import annotations

from collections.abc import Sequence

from vat.cli.common import Parser
from vat.errors import run_cli


def _main(argv: list[str]) -> int:
    p = Parser(
        prog="vat export",
        description="Export a vat training checkpoint (.ckpt) to a "
        "model folder that vat.load, sentence-transformers and the Hugging Face Hub read.",
    )
    p.add_argument("ckpt", metavar="CKPT", help="training checkpoint (.ckpt written by vat train)")
    p.add_argument("output", metavar="DIR", help="folder to write (must not exist, or be empty)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export in DIR")
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    args = p.parse_args(argv)
    from vat.hub import export_checkpoint  # lazily: the hub dependencies load only here

    out = export_checkpoint(args.ckpt, args.output, overwrite=args.overwrite)
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
