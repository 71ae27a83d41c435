"""The command line (bench/gpu_suite.sh runs this folder: `python bench/gpu_suite ARGS`).

Recipes (docs/gpu.md, "The GPU suite"; the bundle installed first):

- one call, a cluster user with 25 minutes:  bench/gpu_suite.sh --budget-min 24 results/gpu
- a GPU allocation with 10-minute commands and 30 minutes in all: plan.RECIPE's three calls back
  to back (plan.recipe_command prints each; the arithmetic is in plan.py);
- with 15 minutes in all: plan.RECIPE_SHORT's two calls, `--plan short`.

`--seed DIR`: a folder holding the files an earlier call returned (gpu_report.json, the
.tar files, the reference's checkpoint parts), copied into OUT_DIR only when OUT_DIR has no
report (a fresh node: the allocation's node was released between calls), regular files only
(a link is refused); a node that kept its OUT_DIR uses its own. (The lost
checkpoints are noticed: the reference resumes from its returned parts, or continues from
the newest weights; the frontier trains again.)

`--trust-compile-cache`: the compile cache an earlier call returned (carry.py) is code that
torch runs; the reference's resumed launch uses it only with this option (for files your own
earlier call returned), else compiles afresh.

`--stages` naming `reference` when it is finished trains it further (another round:
reference.begin_round); the default, every stage, leaves a finished reference as it is.

Exit codes: 0 when every stage that ran finished or was skipped for time, 1 when a stage
failed (named on stderr and in the report), 2 with one line when a prerequisite is missing
(no CUDA without --smoke, a Python package, a data file), 130 when a signal stopped it
(SIGINT, SIGTERM: the report is written first). gpu_report.json records each call's exit.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

if not __package__:
    # run as a folder (python bench/gpu_suite): Python put this folder first on sys.path,
    # where its modules (plan, state, report) would shadow top-level names; the checkout
    # goes there instead, so that bench.gpu_suite and vat import from it
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.gpu_suite.call import (  # noqa: E402
    MAX_OUT_FILE,
    OUT_FILES,
    REPORT,
    check_out_dir,
)
from bench.gpu_suite.carry import checkpoint_parts, part_files  # noqa: E402
from bench.gpu_suite.out_files import CACHE_PACK, open_regular  # noqa: E402
from bench.gpu_suite.plan import (  # noqa: E402
    PLANS,
    ROOT,
    check_data,
    check_packages,
    make_plan,
)
from bench.gpu_suite.state import STAGES, Budget, Suite, read_report  # noqa: E402
from vat.errors import VatError, run_cli  # noqa: E402
from vat.io import atomic_write  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    from vat.cli.common import Parser

    p = Parser(
        prog="bench/gpu_suite.sh",
        description="The GPU suite: device facts, throughput side by side, a "
        "reference model, the rate frontier and its artefacts, within a time budget, "
        "resumable in OUT_DIR. For one call of an allocated machine, bench/gpu_suite.sh also takes "
        "--bundle DIR, --call-limit-s N and --copy-to DIR (see its header).",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="report, artefacts and state (work/)")
    p.add_argument(
        "--budget-min", type=float, default=24.0, help="minutes this call may take (default 24)"
    )
    p.add_argument(
        "--stages",
        default=None,
        help=f"comma-separated stages to run (default all): {','.join(STAGES)}; naming "
        "`reference` trains a finished reference further (another round)",
    )
    p.add_argument(
        "--plan",
        choices=sorted(PLANS),
        default="full",
        help="the stages' time shares: full (default; a 30-minute GPU allocation in three "
        "calls, or one 24-minute call) or short (a 15-minute allocation: the reference alone in "
        "one launch, then facts and the 8k throughput; plan.RECIPE_SHORT)",
    )
    p.add_argument("--smoke", action="store_true", help="every stage on CPU with tiny shapes")
    p.add_argument(
        "--data-dir",
        default=None,
        help="the shared data folder (default $VAT_DATA_DIR, else ../shared/data)",
    )
    p.add_argument(
        "--frontier-steps",
        type=int,
        default=None,
        help="steps per frontier run (default: sized from the 8k throughput and the time the "
        "stage has in the call it starts in)",
    )
    p.add_argument(
        "--seed",
        metavar="DIR",
        default=None,
        help="files an earlier call returned (gpu_report.json, .tar): copied into OUT_DIR "
        "when it has no report (a fresh node), regular files only (a link is refused); "
        "ignored otherwise",
    )
    p.add_argument(
        "--trust-compile-cache",
        action="store_true",
        help="use the compile cache in the --seed folder / OUT_DIR from an earlier call "
        f"({CACHE_PACK}): code that torch runs; only for files your own earlier call "
        "returned. Without it the reference's resumed launch compiles afresh",
    )
    p.add_argument("--debug", action="store_true", help="tracebacks for errors")
    return p


def seed_out_dir(out: Path, seed: Path, smoke: bool) -> str:
    """Copy the suite's files from `seed` into `out` when `out` holds no report; says what
    it did (for stderr). A seed report that this call could not continue (another mode, a
    broken field), or a file of the suite's names that is not a regular file of at most what
    a call returns (a link, whatever it points to), is one line before anything is copied."""
    if (out / REPORT).exists():
        return f"--seed {seed}: ignored, {out} has its own report (this machine kept it)"
    names = [*OUT_FILES, *(p.name for p in checkpoint_parts(seed)), CACHE_PACK]
    found = [seed / n for n in names if os.path.lexists(seed / n)]  # links too: refused below
    if seed / REPORT not in found:
        return f"--seed {seed}: no {REPORT} there; starting afresh"
    with contextlib.ExitStack() as stack:
        opened = {}
        for f in found:  # each opened once, never through a link, and copied from that open
            try:
                opened[f] = stack.enter_context(open_regular(f))
            except OSError as e:
                raise VatError(f"--seed {seed}: {f} is {e.strerror}; a seed holds the regular "
                               "files a call returned: move it away") from None  # fmt: skip
            if os.fstat(opened[f].fileno()).st_size > MAX_OUT_FILE:
                raise VatError(
                    f"--seed {seed}: {f} is over {MAX_OUT_FILE // 2**20} MiB, more than a call "
                    "returns; use another --seed, or none to start afresh"
                )
        read_report(seed / REPORT, smoke, "use another --seed, or none to start afresh")
        out.mkdir(parents=True, exist_ok=True)
        for f, src in opened.items():
            atomic_write(out / f.name, lambda o, s=src: shutil.copyfileobj(s, o), binary=True)
    return f"--seed {seed}: copied {', '.join(f.name for f in found)} into {out} (a fresh machine)"


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt  # stopped like a Ctrl-C: children stopped, report written


def _main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    named = args.stages is not None  # a finished reference trains on only when named
    stages = [s.strip() for s in (args.stages or ",".join(STAGES)).split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise VatError(f"--stages: unknown {', '.join(unknown) or '(none)'}; choose from "
                       f"{', '.join(STAGES)}")  # fmt: skip
    if not (math.isfinite(args.budget_min) and args.budget_min > 0):
        raise VatError(f"--budget-min must be a positive number of minutes, got {args.budget_min}")
    if args.frontier_steps is not None and args.frontier_steps < 1:
        raise VatError(f"--frontier-steps must be at least 1, got {args.frontier_steps}")
    out = Path(args.out_dir)
    check_out_dir(out)  # before any work: links, a user's files under the suite's names
    default_data = os.environ.get("VAT_DATA_DIR") or str(ROOT.parent / "shared" / "data")
    data_dir = Path(args.data_dir or default_data).resolve()
    check_packages()
    if not args.smoke:
        import torch

        if not torch.cuda.is_available():
            raise VatError(
                "no CUDA device here: the GPU suite measures a GPU (--smoke runs every stage "
                "on CPU with tiny shapes, to check the suite itself)"
            )
    check_data(data_dir)
    if args.seed:
        print(f"gpu_suite: {seed_out_dir(out, Path(args.seed), args.smoke)}", file=sys.stderr)
    budget = Budget(args.budget_min)
    out.mkdir(parents=True, exist_ok=True)
    suite = Suite(out.resolve(), make_plan(args.plan, args.smoke), data_dir, budget,
                  args.frontier_steps, args.trust_compile_cache)  # fmt: skip
    # SIGINT at Python's default even if the suite inherited it ignored (a background job of
    # a shell without job control): stopping the suite must stop its children cleanly
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        # the arguments given, not this process's: main(argv) may run inside another program
        rc = suite.run(stages, again=named, command=" ".join(["gpu_suite", *argv]))
    finally:
        for s, h in handlers.items():
            if h is not None:  # None: a handler not set from Python, left as it is
                signal.signal(s, h)
    parts = {p.name for p in part_files(out)}
    extra = sorted(
        p.name for p in out.iterdir() if p.is_file() and p.name not in {*OUT_FILES, *parts}
    )
    if extra:
        print(f"gpu_suite: note: OUT_DIR also holds {', '.join(extra)}", file=sys.stderr)
    print(f"wrote {out / REPORT} and {out / 'gpu_report.md'}", file=sys.stderr)
    if suite.failed:
        print(f"error: stages failed: {', '.join(suite.failed)} (see {out / 'gpu_report.md'})",
              file=sys.stderr)  # fmt: skip
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
