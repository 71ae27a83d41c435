"""Benchmark: the SentEval harness on every task in ../shared, hashbow features, prototyping.

Compares with the original SentEval toolkit on the same features and machine class (the
oracle README: about 370 s on two CPU cores), task by task, and checks the numbers against
../shared/oracle/expected.json while at it.

    python bench/bench_senteval.py                      # all tasks found in ../shared
    python bench/bench_senteval.py --device cuda        # classifiers on a GPU
    python bench/bench_senteval.py --json bench/senteval.json

Times include reading the files, encoding (hashbow, each distinct sentence once) and
training; they do not include Python start-up and imports.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vat.errors import VatError  # noqa: E402
from vat.eval.engine import EvalSettings, evaluate  # noqa: E402
from vat.eval.tasks.registry import ALL_TASKS, load_task  # noqa: E402


def _flat(d: dict, prefix: str = "") -> dict[str, float]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        elif isinstance(v, int | float) and k != "seconds_on_2_cpu_cores":
            out[key] = float(v)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--oracle-dir", default=str(ROOT.parent / "shared" / "oracle"))
    p.add_argument(
        "--data-dir",
        default=os.environ.get(
            "VAT_SENTEVAL_DIR", str(ROOT.parent / "shared" / "data" / "senteval")
        ),
    )
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help="sentences per encoder call (vat evaluate's default)",
    )
    p.add_argument("--json", help="write the timings and deltas here")
    args = p.parse_args()

    spec = importlib.util.spec_from_file_location("hashbow", Path(args.oracle_dir) / "hashbow.py")
    hashbow = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hashbow)
    expected = json.loads((Path(args.oracle_dir) / "expected.json").read_text())

    tasks = []
    for t in ALL_TASKS:
        try:
            load_task(args.data_dir, t)
            tasks.append(t)
        except VatError:
            pass
    settings = EvalSettings(
        preset="prototyping",
        relatedness="both",
        device=args.device,
        progress=False,
        batch_size=args.batch_size,
    )
    t0 = time.perf_counter()
    results, seconds = evaluate(hashbow.encode, tasks, args.data_dir, settings)
    total = time.perf_counter() - t0

    print(
        f"{'task':14}{'ours (s)':>10}{'encode (s)':>12}{'SentEval (s)':>14}"
        f"{'speed-up':>10}{'max |delta|':>13}"
    )
    ref_total = 0.0
    deltas = {}
    for t in tasks:
        ref = expected.get(t, {}).get("seconds_on_2_cpu_cores")
        ref_total += ref or 0.0
        d = 0.0
        for key in (t, f"{t}-cosine"):
            if key in expected and key in results:
                e, g = _flat(expected[key]), _flat(results[key])
                d = max([d] + [abs(g[k] - e[k]) for k in e if k in g])
        deltas[t] = d
        tot, enc = seconds[t]["total"], seconds[t]["encode"]
        speed = f"{ref / tot:.1f}x" if ref else "-"
        print(
            f"{t:14}{tot:>10.2f}{enc:>12.2f}{(ref if ref else float('nan')):>14.1f}"
            f"{speed:>10}{d:>13.4g}"
        )
    enc_total = sum(s["encode"] for s in seconds.values())
    print(
        f"{'total':14}{total:>10.2f}{enc_total:>12.2f}{ref_total:>14.1f}{ref_total / total:>9.1f}x"
    )
    print(f"(SentEval's README figure for the whole suite: 370 s -> {370 / total:.1f}x)")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; device {args.device}; encoder batch {args.batch_size}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "seconds": seconds,
                    "total": total,
                    "reference_total": ref_total,
                    "max_abs_delta": deltas,
                    "device": args.device,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
