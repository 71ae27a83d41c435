"""`vat sweep -c CONFIG ...`: train one run per value of any config key, measure each and
chart the frontier (docs/sweep.md; the library is `vat.experiments.sweep`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from vat.cli.common import Parser, add_renamed
from vat.cli.config import existing, resolve_config_args
from vat.errors import VatError, run_cli
from vat.io import folder


def _values(text: str) -> list[Any]:
    """--values 0.1,0.2 or --values constant,linear: YAML scalars, as in the sweep YAML."""
    values = [yaml.safe_load(v) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated values like 0.1,0.4, got {text!r}"
        )
    return values


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="vat sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("-c", "--config", required=True, help="sweep YAML (see configs/sweeps/)")
    output_dir = p.add_argument("--output-dir", help="output folder (overrides out_dir)")
    add_renamed(p, "--output", output_dir)  # an older spelling (docs/cli.md)
    p.add_argument("--values", type=_values, help="comma-separated values of the one swept key")
    p.add_argument("--jobs", type=int, help="runs trained at once, a process each (overrides jobs)")
    p.add_argument("--device", help="where runs are measured: auto, cpu, cuda, cuda:N")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("--no-progress", action="store_true", help="no progress bar over the runs")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no [sweep] lines")
    # the child processes' options: the point each runs, and no table of its own
    p.add_argument("--run", action="append", help=argparse.SUPPRESS)
    p.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    return p


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    # torch and Lightning are imported once the arguments are parsed: --help answers at once
    from tqdm import tqdm

    from vat.cli.train import check_args, prepare_data
    from vat.cli.train import main as train_main
    from vat.experiments.config import SweepConfig
    from vat.experiments.frontier import FAILED, markdown_table
    from vat.experiments.sweep import Runner, run_sweep
    from vat.runs.run_dir import MANIFEST_NAME, check_place
    from vat.runtime import apply_cpu_threads

    cfg = SweepConfig.from_yaml(existing(args.config, "sweep"))  # else: the nearest config
    if args.output_dir:
        cfg.out_dir = args.output_dir
    what = "--output-dir" if args.output_dir else f"{args.config}: out_dir"
    if not str(cfg.out_dir).strip():
        raise VatError(f"{what} is empty: name the sweep's output folder")
    if Path(cfg.out_dir).exists() or Path(cfg.out_dir).is_symlink():
        folder(cfg.out_dir, what)  # the sweep's runs are folders inside it
        if (Path(cfg.out_dir) / MANIFEST_NAME).is_file():
            raise VatError(
                f"{what} {cfg.out_dir} is the folder of a vat train run; a sweep writes its "
                f"runs, table and plots into a folder of its own: choose another"
            )
    check_place(Path(cfg.out_dir), what)  # not inside a run's checkpoints/
    if args.values is not None:
        if cfg.is_point_list or len(cfg.sweep) != 1:
            shape = (
                f"lists its points ({len(cfg.sweep)}): edit the list there"
                if cfg.is_point_list
                else f"is a grid over {', '.join(cfg.sweep)}"
            )
            raise VatError(f"--values needs a sweep over one key; {args.config} {shape}")
        cfg.sweep = {cfg.keys[0]: args.values}
    for opt in ("jobs", "device"):
        if getattr(args, opt) is not None:
            setattr(cfg, opt, getattr(args, opt))
    cfg.validate("--values/--jobs/--device")
    apply_cpu_threads()  # each run trains in this process: vat train's CPU thread rule

    def log(message: str) -> None:
        if not args.quiet:
            tqdm.write(f"[sweep] {message}", file=sys.stderr)

    run = Runner(train_main, check_args, prepare_data, (sys.executable, "-m", "vat", "sweep"))
    records = run_sweep(
        run,
        cfg,
        log=log,
        config_path=args.config,
        summary=not args.no_summary,
        only=args.run,
        progress=not (args.quiet or args.no_progress or args.run),
    )
    if not args.no_summary:  # the results, on stdout (the table sweep.md holds)
        print(markdown_table(records, cfg.keys), flush=True)
    failed = [r for r in records if FAILED in r]
    if failed:  # after every other point ran and the table holds each reason
        raise VatError(
            f"{len(failed)} of {len(records)} runs failed: "
            + ", ".join(f"{r['run']} ({r[FAILED]})" for r in failed)
            + "; rerun the same command to resume "
            + ("it" if len(failed) == 1 else "them")
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`vat sweep`, with `-c NAME` resolved first (a packaged config by name)."""

    def run(args: Sequence[str] | None) -> int:
        return _main(None if args is None else resolve_config_args(list(args), kind=None))

    return run_cli(run, argv)
