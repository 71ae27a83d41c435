"""`vat export MODEL DIR`: `vat.load(MODEL).save_pretrained(DIR, ...)`, a shareable folder
(docs/sharing.md), then an optional upload to the Hub."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from vat.cli.common import (
    MODEL_HELP,
    Parser,
    add_common,
    add_data_dir,
    add_train_data_dir,
    show_progress,
)
from vat.cli.features import add_fit_options
from vat.errors import OptionError, VatError, run_cli
from vat.share.model_card import DEFAULT_LANGUAGE, DEFAULT_LICENSE


def build_parser() -> Parser:
    p = Parser(
        prog="vat export",
        usage="vat export MODEL [DIR] [options]",
        description="Export a vat model to a folder that vat.load, sentence-transformers and "
        "the Hugging Face Hub read (trainer state dropped).",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="MODEL DIR",
        help=f"MODEL, {MODEL_HELP}; DIR: the new or empty folder to write (without it, "
        "--push-to-hub pushes an exported MODEL as it is)",
    )
    p.add_argument("--model", "--ckpt", dest="model", help="MODEL as an option")
    p.add_argument("--overwrite", action="store_true", help="replace an existing export in DIR")
    p.add_argument(
        "--push-to-hub",
        metavar="REPO_ID",
        help="also upload the folder to this Hub model repo (needs a login or HF_TOKEN)",
    )
    p.add_argument("--private", action="store_true", help="with --push-to-hub: a private repo")
    p.add_argument("--license", help=f"the card's license (default: MODEL's or {DEFAULT_LICENSE})")
    p.add_argument("--language", help=f"card language (default: MODEL's or {DEFAULT_LANGUAGE})")
    p.add_argument(
        "--evaluate",
        metavar="TASKS",
        help="record `vat evaluate`'s scores on these tasks (e.g. sts) in config.json and card",
    )
    add_data_dir(p, " for --evaluate")
    p.add_argument(
        "--features",
        metavar="SPEC",
        help="the folder's feature spec SOURCE/WEIGHTING/POST (default: MODEL's own, else "
        "vat.feature_spec.DEFAULT_EXPORT_SPEC)",
    )
    p.add_argument(
        "--space",
        action="store_true",
        help="also write app.py and requirements.txt: DIR runs `vat explore` as a Hub Space",
    )
    add_fit_options(p, sentences=False)
    add_train_data_dir(p)
    add_common(p)
    return p


def scores_table(folder: Path) -> str:
    """The scores an export recorded in config.json, one row per task."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    scores = config.get("evaluation") or []
    specs = ", ".join(dict.fromkeys(str(s.get("features", "?")) for s in scores))
    lines = [
        f"scores of {folder}'s sentence features ({specs}), percent:",
        "| task | split | metric | value |",
        "|---|---|---|---:|",
    ]
    lines += [f"| {s['task']} | {s['split']} | {s['metric']} | {s['value']:.2f} |" for s in scores]
    return "\n".join(lines)


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    paths = ([args.model] if args.model is not None else []) + args.paths
    if not paths:
        raise VatError("the model to export is required: vat export MODEL DIR")
    if len(paths) > 2:
        raise VatError(f"expected MODEL and DIR, got extra arguments {paths[2:]}")
    model_arg, output = paths[0], (paths[1] if len(paths) > 1 else None)
    from vat.api import check_export, load
    from vat.runtime import resolve_device
    from vat.share.folder import is_model_folder
    from vat.share.hub import check_pushable, upload

    if output is None and not (args.push_to_hub and is_model_folder(model_arg)):
        raise VatError(
            "DIR (the folder to write) is required, unless MODEL is an exported folder "
            "to push with --push-to-hub"
        )
    if args.space and output is None:
        raise OptionError(
            "space", "writes into DIR; give the folder to write (vat export MODEL DIR --space)"
        )
    if output is not None:  # the output folder and task names, before the model is read
        check_export(output, overwrite=args.overwrite, evaluate=args.evaluate)
    model = load(model_arg, resolve_device(args.device))  # read once (and checked)
    if output is None:
        out = model.loaded.source.path  # pushed as it is
    else:
        out = model.save_pretrained(
            output,
            overwrite=args.overwrite,
            features=args.features,
            evaluate=args.evaluate,
            data_dir=args.data_dir,
            license=args.license,
            language=args.language,
            repo_id=args.push_to_hub,
            fit_files=args.fit_files,
            count_files=args.count_files,
            train_data_dir=args.train_data_dir,
            space=args.space,
            # the long work (fitting a named spec, evaluating) says what it does
            show_progress_bar=show_progress(args)
            and (args.evaluate is not None or args.features is not None),
        )
        space = f" (a Space too: python {out}/app.py serves it)" if args.space else ""
        print(f"wrote {out}{space}")
        if args.evaluate is not None:
            print(scores_table(Path(out)))
    if args.push_to_hub:
        check_pushable(out, args.push_to_hub)  # its own line, not "retry the upload"
        try:
            info = upload(out, args.push_to_hub, private=args.private or None)
        except VatError as e:
            private = " --private" if args.private else ""
            raise VatError(
                f"{e}; the folder {out} is written and complete: retry the upload with "
                f"`vat export {out} --push-to-hub {args.push_to_hub}{private}`"
            ) from None
        print(f"pushed to {getattr(info, 'commit_url', None) or args.push_to_hub}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
