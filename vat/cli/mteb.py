"""`vat mteb --model DIR`: MTEB's English STS tasks on a VAT (`vat.integrations.mteb`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from vat.cli.common import Parser, add_batch_size, add_model_option, add_renamed
from vat.errors import run_cli
from vat.io import folder
from vat.runtime import resolve_device


def _parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vat mteb",
        description="Run MTEB's English STS tasks on a VAT (task data from the HF Hub).",
    )
    add_model_option(p)
    p.add_argument("--tasks", help="comma-separated MTEB tasks (default: MTEB(eng, v2)'s STS)")
    p.add_argument("--pooling", help="pool mu by mean | sum | start | precision")
    p.add_argument("--features", help="feature spec SOURCE/WEIGHTING/POST (default: the model's)")
    add_batch_size(p, 64)
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default auto)")
    output_dir = p.add_argument("--output-dir", default="mteb-results", help="MTEB's result folder")
    add_renamed(p, "--output", output_dir)  # an older spelling (docs/cli.md)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)  # before torch is imported: --help answers at once
    from vat.api import load
    from vat.integrations.mteb import VATMTEBEncoder, check_no_links, evaluate, select_tasks

    args.device = resolve_device(args.device)  # one line for meta, xyz, cuda:7, ...
    if Path(args.output_dir).exists() or Path(args.output_dir).is_symlink():
        folder(args.output_dir, "--output-dir")  # MTEB writes a folder of result files
        check_no_links(args.output_dir)  # before the model loads, not after
    tasks = select_tasks(args.tasks)  # checked before the model loads; "" and ",,," name none
    encoder = VATMTEBEncoder(
        args.model,
        model=load(args.model, device=args.device),  # read once
        device=args.device,
        pooling=args.pooling,
        batch_size=args.batch_size,
        features=args.features,
    )
    # the task data comes from the Hub: offline at once when it cannot be reached
    result = evaluate(encoder, tasks, args.output_dir)
    print(f"{args.model}: features {encoder.spec} ({encoder.why})")
    for task_result in result.task_results:
        print(f"{task_result.task_name:<24} {task_result.get_score():.4f}")
    print(f"results in {args.output_dir}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)
