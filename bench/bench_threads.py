"""The first command's CPU thread count: vat's default against torch's, on a quiet and on a
loaded machine.

    python bench/bench_threads.py                         # demo config, 300 steps, load 0 and 2
    python bench/bench_threads.py --steps 2000 --loads 2  # the whole demo, 2 busy processes

Each timed run is the README's first training command as a user types it,
`vat train -c configs/demo.yaml`, shortened to `--steps` steps with one validation at the end
(`--trainer.val_check_interval STEPS`, 8 batches as the config says), in its own process
and its own run folder. Three settings run side by side, interleaved round by round so
that drift in the machine's load hits each alike:

- `vat default`: no option, no OMP_NUM_THREADS: vat's rule (`vat.runtime.cpu_threads`);
- `torch default`: OMP_NUM_THREADS = the usable cores, which is what torch chose by itself
  before vat had a rule (the baseline);
- `1 thread`: OMP_NUM_THREADS=1, the setting the README used to recommend.

The machine is loaded by `--loads` K processes that spin on a core each (Python busy loops,
started before the timed runs and stopped after), standing in for other users' jobs. Per
run it reports the wall time of the whole command (start-up, tokenizer and cache reuse,
training, the last validation) and the training steps/s that vat's end-of-training line
prints (training only). Load 0 is only quiet if nothing else runs: the load average is
printed beside each run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS_LINE = re.compile(r"vat: (\d+) steps in \S+ \(([\d.]+) steps/s")


def _spin() -> None:  # a busy loop on one core: another user's job
    while True:
        pass


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def settings(cores: int) -> dict[str, dict[str, str]]:
    """Name -> environment changes of each timed setting."""
    return {
        "vat default": {},
        "torch default": {"OMP_NUM_THREADS": str(cores)},
        "1 thread": {"OMP_NUM_THREADS": "1"},
    }


def one_run(config: str, steps: int, env_change: dict[str, str], work: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(env_change)
    run_dir = work / "run"
    cmd = [
        sys.executable, "-m", "vat", "train", "-c", config,
        "--run_dir", str(run_dir), "--overwrite", "--no-progress",
        "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
    ]  # fmt: skip
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    found = STEPS_LINE.search(done.stdout + done.stderr)
    threads = re.search(r"(\d+) CPU thread", done.stdout + done.stderr)
    return {
        "wall_s": round(wall, 2),
        "steps_per_s": float(found.group(2)) if found else None,
        "threads": int(threads.group(1)) if threads else None,
        "load_before": round(load_before, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--loads", default="0,2", help="comma-separated numbers of busy processes (default 0,2)"
    )
    p.add_argument("--json", help="also write the results to this JSON file")
    a = p.parse_args()
    cores = usable_cores()
    loads = [int(x) for x in a.loads.split(",")]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="vat-threads-") as tmp:
        work = Path(tmp)
        # untimed: the tokenizer and the tokenized-data cache exist before any timed run
        one_run(a.config, 2, {"OMP_NUM_THREADS": "1"}, work)
        for load in loads:
            spinners = [mp.Process(target=_spin, daemon=True) for _ in range(load)]
            for s in spinners:
                s.start()
            try:
                time.sleep(2 if load else 0)
                for r in range(a.rounds):
                    for name, change in settings(cores).items():
                        res = one_run(a.config, a.steps, change, work)
                        res.update(setting=name, load=load, round=r)
                        results.append(res)
                        print(json.dumps(res), flush=True)
            finally:
                for s in spinners:
                    s.terminate()
    print(
        f"\n{a.config}, {a.steps} steps, {a.rounds} rounds, {cores} usable cores; "
        f"median over rounds\n"
    )
    print("| busy processes | setting | torch threads | wall s | train steps/s |")
    print("|---|---|---|---|---|")
    for load in loads:
        for name in settings(cores):
            rows = [x for x in results if x["load"] == load and x["setting"] == name]
            wall = statistics.median(x["wall_s"] for x in rows)
            rates = [x["steps_per_s"] for x in rows if x["steps_per_s"] is not None]
            rate = f"{statistics.median(rates):.1f}" if rates else "?"
            print(f"| {load} | {name} | {rows[0]['threads']} | {wall:.1f} | {rate} |")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
