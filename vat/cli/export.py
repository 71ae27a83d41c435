"""`vat export CKPT DIR`: a training checkpoint as a shareable model folder (no trainer state).

    vat export runs/vat/checkpoints/last.ckpt my-vat
    vat export runs/vat/checkpoints/last.ckpt my-vat --push-to-hub user/my-vat

The folder (config.json, model.safetensors, tokenizer.json, a README.md model card and the
sentence-transformers files) loads with `vat.load(DIR)`, every `--ckpt`, and
`SentenceTransformer(DIR, trust_remote_code=True)`; see `vat.hub` and docs/sharing.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from vat.cli.common import Parser
from vat.errors import run_cli


def build_parser() -> Parser:
    p = Parser(
        prog="vat export",
        description="Export a vat training checkpoint (.ckpt) to a model folder that vat.load, "
        "sentence-transformers and the Hugging Face Hub read; trainer state is dropped.",
    )
    p.add_argument("ckpt", metavar="CKPT", help="training checkpoint (.ckpt written by vat train)")
    p.add_argument("output", metavar="DIR", help="folder to write (must not exist, or be empty)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export in DIR")
    p.add_argument(
        "--push-to-hub",
        metavar="REPO_ID",
        default=None,
        help="also upload the folder to this Hub model repo (needs a login or HF_TOKEN)",
    )
    p.add_argument("--private", action="store_true", help="with --push-to-hub: a private repo")
    p.add_argument(
        "--features",
        metavar="SPEC",
        default=None,
        help="the folder's sentence-feature spec SOURCE/WEIGHTING/POST (vat.feature_spec; "
        "default vat.feature_spec.DEFAULT_EXPORT_SPEC); post-processing is fitted on the "
        "checkpoint's training sentences or --fit-files",
    )
    p.add_argument("--fit-files", nargs="+", metavar="FILE", default=None)
    p.add_argument("--count-files", nargs="+", metavar="FILE", default=None)
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    return p


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from vat.hub import export_checkpoint, push_to_hub  # lazily: hub dependencies load here

    fit = {k: v for k, v in (("fit_files", args.fit_files), ("count_files", args.count_files)) if v}
    out = export_checkpoint(
        args.ckpt, args.output, overwrite=args.overwrite, features=args.features, **fit
    )
    print(f"wrote {out}")
    if args.push_to_hub:
        info = push_to_hub(out, args.push_to_hub, private=args.private or None)
        print(f"pushed to {getattr(info, 'commit_url', None) or args.push_to_hub}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
