"""`vat export CKPT DIR`: a training checkpoint into a shareable folder (see vat.hub).

    python -m vat.export_cli runs/vat/checkpoints/last.ckpt my-vat
    python -m vat.export_cli runs/vat/checkpoints/last.ckpt my-vat --push-to-hub user/my-vat

The folder (config.json, model.safetensors, tokenizer.json, README.md model card and the
sentence-transformers files) loads with `vat.load`, every `--ckpt`, and
`SentenceTransformer(DIR, trust_remote_code=True)`. Trainer state is dropped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vat.errors import run_cli


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (`error: ...`, exit 2), like every other vat entry point."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "vat export") -> argparse.ArgumentParser:
    p = _OneLineParser(prog=prog, description="Export a vat training checkpoint into a folder others can load "
                       "(safetensors weights, config, tokenizer, model card); trainer state is dropped.")
    p.add_argument("ckpt", help="training checkpoint (.ckpt)")
    p.add_argument("output", help="folder to write (must not exist or be empty, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    p.add_argument("--push-to-hub", metavar="REPO_ID", default=None,
                   help="also upload the folder to this Hugging Face Hub model repo (needs a login or HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _main(argv: Sequence[str] | None) -> int:
    from vat.hub import export_checkpoint, push_to_hub

    args = build_parser().parse_args(argv)
    out = export_checkpoint(args.ckpt, args.output, overwrite=args.overwrite)
    print(f"wrote {out}")
    if args.push_to_hub:
        info = push_to_hub(out, args.push_to_hub, private=args.private or None)
        print(f"pushed to {getattr(info, 'commit_url', None) or args.push_to_hub}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
