"""What keying the tokenized cache on content costs: the BLAKE2b digest of the
5.3-million-line corpus (the shared corpus repeated 10x, as bench/bench_prepare.py builds it)
against the old key (path, size, mtime: one stat).

    PYTHONPATH=$PWD python bench/bench_cache_key.py --work /tmp/vat-bench-prepare

Prints the corpus size, the digest's time on the first read in this process and again (the
page cache warm), and the stat key's time. The digest is computed once per process and file
(vat.data.file_digest memoises it), i.e. once per `vat train` start.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_prepare import build_corpus  # noqa: E402

from vat.data import file_digest as fd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/vat-bench-prepare")
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"corpus_{args.repeats}x.txt"
    lines = build_corpus(corpus, args.repeats)
    size = corpus.stat().st_size
    times = []
    for _ in range(3):
        fd._memo.clear()
        t = time.perf_counter()
        fd.file_digest(corpus)
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    st = corpus.stat()
    _ = (str(corpus.resolve()), st.st_size, st.st_mtime_ns)
    stat_s = time.perf_counter() - t
    print(f"corpus: {lines:,} lines, {size / 2**20:.1f} MiB")
    print("digest (BLAKE2b-128), 3 runs: " + ", ".join(f"{s:.2f} s" for s in times))
    print(f"throughput (best): {size / 2**20 / min(times):.0f} MiB/s")
    print(f"old key (stat): {stat_s * 1e6:.0f} us")


if __name__ == "__main__":
    main()
