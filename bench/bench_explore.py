"""`vat explore`: start-up time, and the latency of each view through the page's server.

    python bench/bench_explore.py                          # the shipped demo, 50 requests a view
    python bench/bench_explore.py --model runs/demo --requests 100 --json explore.json

Start-up: `vat explore` is started as a user starts it (a new process; --corpus
data/demo_val.txt, 1,000 lines, and without a corpus), and timed to the printed address and
to the first page served. Latency: every view is called --requests times over HTTP, as the
browser calls it (gradio_client: a request to the queue, the result streamed back), on a
20-subword sentence; median and worst. Baseline, in the same run: the same Explorer method
called in this process without a server, so the table shows what the page adds to the
model's own time. Target: each view well under a second on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import vat  # noqa: E402
from vat.explore import Explorer  # noqa: E402

SENTENCE = (  # 20 subwords for the demo's tokenizer
    "A young woman in a bright red coat is reading the morning newspaper on a crowded old train."
)
OTHER = "Two children are playing football in the park near the old stone church."
CORPUS = ROOT / "data" / "demo_val.txt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model: str, corpus: Path | None) -> tuple[subprocess.Popen, str, float, float]:
    """A `vat explore` process; (process, URL, seconds to the address, seconds to a page)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vat", "explore", "--model", model, "--port", str(port),
           "--no-progress"]  # fmt: skip
    if corpus is not None:
        cmd += ["--corpus", str(corpus)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("vat explore: http"):
        proc.kill()
        raise SystemExit(f"vat explore did not start: {line!r}")
    printed = time.perf_counter() - t0
    url = line.split()[2]
    with urllib.request.urlopen(url, timeout=60) as r:
        r.read()
    return proc, url, printed, time.perf_counter() - t0


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def timed(call, n: int) -> list[float]:
    call()  # warm-up: first calls pay for allocation and caches
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


VIEWS = {  # api name: (HTTP arguments, the same view in Python)
    "encode": ((SENTENCE, 1), lambda ex: ex.encode(SENTENCE)),
    "resample": (
        (SENTENCE, "4: woman", "posterior", 5, 1.0, 0),
        lambda ex: ex.resample(SENTENCE, 4, 5, 1.0),
    ),
    "interpolate": ((SENTENCE, OTHER, 7, "linear"), lambda ex: ex.interpolate(SENTENCE, OTHER, 7)),
    "sample": ((SENTENCE, 5, 1.0, 0), lambda ex: ex.sample(SENTENCE, 5, 1.0, 0)),
    "prior": ((5, 20, 0), lambda ex: ex.prior(5, 20, 0)),
    "neighbours": ((SENTENCE, 5), lambda ex: ex.neighbours(SENTENCE, 5)),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="demo-wordnet-d64")
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = p.parse_args()
    from gradio_client import Client

    model = vat.load(args.model, device="cpu")
    subwords = len(model.tokenizer.encode(SENTENCE))
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    explorer = Explorer(model, lines, corpus_name=CORPUS.name)

    startup = {}
    for name, corpus in (("no corpus", None), (f"--corpus {CORPUS.name}", CORPUS)):
        proc, url, printed, served = start(args.model, corpus)
        startup[name] = {"address_s": printed, "page_s": served}
        if corpus is None:
            stop(proc)
    client = Client(url, verbose=False)
    rows = {}
    try:
        for view, (http_args, python) in VIEWS.items():
            page = timed(
                lambda a=http_args, v=view: client.predict(*a, api_name=f"/{v}"), args.requests
            )
            bare = timed(lambda f=python: f(explorer), args.requests)
            check = client.predict(*http_args, api_name=f"/{view}")
            assert "vat-error" not in check, (view, check)
            rows[view] = {
                "page_median_ms": 1000 * statistics.median(page),
                "page_worst_ms": 1000 * max(page),
                "python_median_ms": 1000 * statistics.median(bare),
                "python_worst_ms": 1000 * max(bare),
            }
    finally:
        stop(proc)

    print(f"# vat explore: {args.model}, a {subwords}-subword sentence, {args.requests} "
          f"requests a view; torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}")  # fmt: skip
    print("\n| start-up | to the printed address (s) | to the first page (s) |\n|---|---:|---:|")
    for name, r in startup.items():
        print(f"| {name} | {r['address_s']:.2f} | {r['page_s']:.2f} |")
    print(
        "\n| view | page median (ms) | page worst (ms) | Python median (ms) | Python worst (ms) |"
    )
    print("|---|---:|---:|---:|---:|")
    for view, r in rows.items():
        print(f"| {view} | {r['page_median_ms']:.1f} | {r['page_worst_ms']:.1f} | "
              f"{r['python_median_ms']:.1f} | {r['python_worst_ms']:.1f} |")  # fmt: skip
    if args.json:
        record = {"model": args.model, "subwords": subwords, "requests": args.requests,
                  "startup": startup, "views": rows}  # fmt: skip
        args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
