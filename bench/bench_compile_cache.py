"""Launch to first step of a resumed compiled `vat train`, with and without the compile cache
(vat/train/compile_cache.py), since a launch's start-up is GPU time that trains nothing.

    python bench/bench_compile_cache.py --output bench_compile_cache.json           # CPU
    python bench/bench_compile_cache.py --config configs/reference_gpu.yaml --steps 50 --device gpu

Three launches of one small compiled run (default configs/demo.yaml with model.compile true),
one after the other, each a fresh process with a fresh TORCHINDUCTOR_CACHE_DIR, so that only
the run folder's compile_cache.bin can help (torch's local cache in /tmp would otherwise
hide the effect, as it does between launches on one machine):

- `fresh`: a new run of --steps steps (it saves the cache after its first step);
- `resumed, no cache`: a copy of that run folder without the cache, resumed (`--ckpt_path
  last`) for --steps more;
- `resumed, cache`: a second copy, with it, resumed the same way.

The two resumed launches start from the same checkpoint and data cache (the fresh launch
built it). For each: seconds from the process's start to its first optimizer step, and the
compile seconds in them, from TimeSplit's line (`vat: first optimizer step (step N) X s
after the process started: ... compile C s ...`), else measured here from the start to the
compile cache's "saved" line (written right after the first step); the wall time to the
process's exit; the artifacts loaded and the inductor graphs read from the cache. A table
on stdout, and --output JSON.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_STEP_RE = re.compile(
    r"vat: first optimizer step \(step [\d,]+\) ([\d.]+) s after the process started: (.*)"
)
COMPILE_RE = re.compile(r"compile ([\d.]+) s")
LOADED_RE = re.compile(r"vat: compile cache: loaded (\d+) artifacts")
SAVED_RE = re.compile(
    r"vat: compile cache: saved (\d+) artifacts[^;]*(?:; (\d+) of (\d+) inductor graphs)?"
)
LAUNCHES = ("fresh", "resumed, no cache", "resumed, cache")


def launch(args: list[str], inductor_dir: Path, log: Path, threads: int | None) -> dict:
    """One `vat train ARGS` in a fresh process and inductor cache: its seconds and lines."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_dir), "PYTHONWARNINGS": "ignore"}
    if threads is not None:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "vat", "train", *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=log.open("w"),
                            text=True)  # fmt: skip
    stamped: list[tuple[float, str]] = []

    def read() -> None:  # stderr line by line, each with its time since the start
        for line in proc.stderr:
            stamped.append((time.monotonic() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    rc = proc.wait()
    reader.join()
    wall = time.monotonic() - t0
    with log.open("a") as f:
        f.write("\n".join(line for _, line in stamped) + "\n")
    if rc != 0:
        tail = "\n".join(line for _, line in stamped[-15:])
        raise SystemExit(f"error: `vat train` exited with {rc} (log: {log}):\n{tail}")
    return summarise(stamped, wall)


def summarise(stamped: list[tuple[float, str]], wall: float) -> dict:
    """The launch's figures from its stamped stderr lines."""
    out = {"wall_s": round(wall, 1), "first_step_s": None, "compile_s": None,
           "first_step_from": None, "loaded_artifacts": None, "graphs_read": None,
           "graphs_looked_up": None}  # fmt: skip
    for t, line in stamped:
        if m := FIRST_STEP_RE.search(line):
            out["first_step_s"], out["first_step_from"] = float(m[1]), "time split line"
            if c := COMPILE_RE.search(m[2]):
                out["compile_s"] = float(c[1])
        elif (m := SAVED_RE.search(line)) and out["graphs_looked_up"] is None:
            if out["first_step_s"] is None:  # no time split here: the save's own moment
                out["first_step_s"], out["first_step_from"] = round(t, 1), "cache saved line"
            if m[3] is not None:
                out["graphs_read"], out["graphs_looked_up"] = int(m[2]), int(m[3])
        elif m := LOADED_RE.search(line):
            out["loaded_artifacts"] = int(m[1])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--steps", type=int, default=5, help="steps of each launch")
    p.add_argument("--device", default="cpu", help="--trainer.accelerator (cpu, gpu, auto)")
    p.add_argument("--threads", type=int, default=1, help="vat train --threads (CPU)")
    p.add_argument("--compile-threads", type=int, default=None,
                   help="TORCHINDUCTOR_COMPILE_THREADS (default: torch's)")  # fmt: skip
    p.add_argument("--work", default=None, help="folder for the runs (default: a temp folder)")
    p.add_argument("--output", default=None, help="JSON of the three launches")
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="bench_compile_cache_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    common = ["-c", a.config, "--model.compile", "true", "--trainer.accelerator", a.device,
              "--trainer.callbacks=[]", "--trainer.enable_progress_bar", "false",
              "--data.cache_dir", str(work / "data_cache"),
              "--threads", str(a.threads)]  # fmt: skip
    runs = {name: work / f"run{i}" for i, name in enumerate(LAUNCHES)}
    results: dict[str, dict] = {}
    fresh = runs["fresh"]
    if fresh.exists():
        shutil.rmtree(fresh)
    print(f"bench_compile_cache: runs in {work}", file=sys.stderr)
    results["fresh"] = launch(
        [*common, "--run_dir", str(fresh), "--trainer.max_steps", str(a.steps)],
        work / "inductor0",
        work / "fresh.log",
        a.compile_threads,
    )
    if not (fresh / "compile_cache.bin").is_file():
        raise SystemExit(f"error: the fresh launch saved no compile cache in {fresh}")
    for i, name in enumerate(LAUNCHES[1:], 1):
        run = runs[name]
        if run.exists():
            shutil.rmtree(run)
        shutil.copytree(fresh, run, symlinks=True)
        (run / ".lock").unlink(missing_ok=True)
        if name == "resumed, no cache":
            for f in ("compile_cache.bin", "compile_cache.json"):
                (run / f).unlink()
        results[name] = launch(
            [*common, "--run_dir", str(run), "--trainer.max_steps", str(2 * a.steps),
             "--ckpt_path", "last"],
            work / f"inductor{i}", work / f"run{i}.log", a.compile_threads,
        )  # fmt: skip
    import torch

    record = {
        "date": _dt.date.today().isoformat(),
        "command": " ".join(["python", "bench/bench_compile_cache.py", *(argv or sys.argv[1:])]),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "config": a.config,
        "steps": a.steps,
        "cache_bytes": (fresh / "compile_cache.bin").stat().st_size,
        "launches": results,
    }
    print(table(record))
    if a.output:
        Path(a.output).write_text(json.dumps(record, indent=1) + "\n")
    return 0


def table(record: dict) -> str:
    def s(x) -> str:
        return "n/a" if x is None else f"{x:.1f}"

    rows = [
        "| launch | to first step (s) | of it compile (s) | wall (s) | artifacts loaded | "
        "inductor graphs read from the cache |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in record["launches"].items():
        read = (
            "n/a"
            if r["graphs_looked_up"] is None
            else f"{r['graphs_read']} of {r['graphs_looked_up']}"
        )
        rows.append(
            f"| {name} | {s(r['first_step_s'])} | {s(r['compile_s'])} | {s(r['wall_s'])} | "
            f"{r['loaded_artifacts'] or 0} | {read} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
