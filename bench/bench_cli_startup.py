"""How long `vat` takes to answer: the help and listing commands, and `vat train`'s time to
its first step, at two revisions side by side, with `python -c "import torch"` as the yardstick.

    python bench/bench_cli_startup.py --before /path/to/old/checkout           # 5 rounds
    python bench/bench_cli_startup.py --before OLD --rounds 3 --no-train       # help only

Each timed command is a fresh `python -m vat ...` process run with PYTHONPATH set to one
checkout (this one, "after", and --before's), so both use the same installed packages.
Rounds interleave before, after and the yardstick, so that drift in the machine's load hits
each alike; the table gives the median wall seconds of each. A command that answers
without importing torch should take a fraction of the yardstick.

Time to first step: `vat train -c configs/demo.yaml --trainer.max_steps 1` on one thread, its
data cache made by an untimed run first, read from vat's own line "first optimizer step (step
1) S s after the process started" (the process start to the end of the first step: imports,
set-up, data, model, step).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [
    ["--help"],
    ["config"],
    ["pretrained"],
    *(
        [name, "--help"]
        for name in (
            "evaluate",
            "generate",
            "score",
            "export",
            "explore",
            "features",
            "pretrained",
            "config",
            "sweep",
            "mteb",
            "geometry",
            "train",
        )
    ),
]
FIRST_STEP = re.compile(r"first optimizer step \(step 1\) ([\d.]+) s after the process started")


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """(wall seconds, stdout + stderr) of one process."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-500:]}")
    return wall, done.stdout + done.stderr


def tree_env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def first_step(tree: Path, work: Path) -> float:
    """Seconds from the start of `vat train` to the end of its first step (vat's own line)."""
    argv = [sys.executable, "-m", "vat", "train", "-c", "configs/demo.yaml", "--no-progress",
            "--trainer.max_steps", "1", "--trainer.val_check_interval", "1",
            "--trainer.limit_val_batches", "1", "--data.cache_dir", str(work / "cache"),
            "--run_dir", str(work / f"run{time.monotonic_ns()}")]  # fmt: skip
    _, out = timed(argv, tree_env(tree), tree)
    match = FIRST_STEP.search(out)
    if match is None:
        raise SystemExit(f"no first-step line from {tree}: {out[-500:]}")
    return float(match[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="a checkout of the older revision")
    p.add_argument("--rounds", type=int, default=5, help="timed runs of each command (default 5)")
    p.add_argument("--no-train", action="store_true", help="skip vat train's time to first step")
    args = p.parse_args()
    trees = {"before": args.before.resolve(), "after": REPO}
    times: dict[tuple[str, str], list[float]] = {}
    yardstick: list[float] = []
    torch_argv = [sys.executable, "-c", "import torch"]
    for _ in range(args.rounds):
        yardstick.append(timed(torch_argv, tree_env(REPO), REPO)[0])
        for argv in COMMANDS:
            for name, tree in trees.items():
                wall, _ = timed([sys.executable, "-m", "vat", *argv], tree_env(tree), tree)
                times.setdefault((" ".join(argv), name), []).append(wall)
    print(f'python -c "import torch": median {statistics.median(yardstick):.2f} s '
          f"({args.rounds} runs)\n")  # fmt: skip
    print("| command | before (s) | after (s) | after / import torch |")
    print("|---|---:|---:|---:|")
    for argv in COMMANDS:
        key = " ".join(argv)
        b, a = (statistics.median(times[key, n]) for n in ("before", "after"))
        print(f"| `vat {key}` | {b:.2f} | {a:.2f} | {a / statistics.median(yardstick):.2f} |")
    if args.no_train:
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = {name: Path(tmp) / name for name in trees}
        for name, tree in trees.items():  # untimed: the tokenizer and the data cache
            first_step(tree, work[name])
        steps: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(max(1, args.rounds // 2)):
            for name, tree in trees.items():
                steps[name].append(first_step(tree, work[name]))
    print("\n| `vat train -c configs/demo.yaml`: to the end of step 1 | before (s) | after (s) |")
    print("|---|---:|---:|")
    b, a = (statistics.median(steps[n]) for n in ("before", "after"))
    print(f"| median of {len(steps['after'])} runs, data cache warm | {b:.2f} | {a:.2f} |")


if __name__ == "__main__":
    main()
