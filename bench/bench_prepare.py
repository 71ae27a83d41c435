"""Corpus preparation: wall time and peak memory against corpus size.

Builds corpora of the shared corpus repeated 1x (534,646 lines) and Rx (R = --repeats,
default 10: 5.3 million lines) under --work (never in the repository), then runs
`VATDataModule.prepare_data` on each in a fresh process under `/usr/bin/time -v` (tokenizer
training on at most 300,000 lines, 8,192-token BPE, max_len 64, as configs/corpus_*.yaml)
and prints wall time, peak RSS and the cache size. Peak RSS should not grow with the corpus.

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python bench/bench_prepare.py --work /tmp/vat-bench-prepare
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VAT_DATA_DIR", ROOT.parent / "shared" / "data")) / "corpus"
SOURCES = ["wmt_newstest_en/newstest_en.20*.txt.gz", "tatoeba_en.txt.gz", "multi30k_en.txt.gz"]


def build_corpus(path: Path, repeats: int) -> int:
    """The shared corpus' training files, concatenated, `repeats` times; its line count."""
    if path.is_file():
        return sum(1 for _ in open(path, "rb"))
    files = sorted(f for pat in SOURCES for f in SHARED.glob(pat))
    tmp = path.with_suffix(".tmp")
    lines = 0
    with open(tmp, "wb") as out:
        for _ in range(repeats):
            for f in files:
                with gzip.open(f, "rb") as src:
                    for block in iter(lambda s=src: s.read(1 << 22), b""):
                        out.write(block)
                        lines += block.count(b"\n")
    os.replace(tmp, path)
    return lines


def prepare(corpus: str, cache: str, num_proc: int) -> None:
    """The measured work, run in its own process."""
    sys.path.insert(0, str(ROOT))
    from vat.data.datamodule import VATDataModule

    dm = VATDataModule(
        train_files=[corpus],
        val_files=[str(SHARED / "wmt_newstest_deen/newstest2018.de-en.en")],
        vocab_size=8192,
        tokenizer_train_lines=300_000,
        max_len=64,
        cache_dir=cache,
        num_proc=num_proc,
        progress=False,
    )
    dm.prepare_data()


def measure(corpus: Path, cache: Path, num_proc: int) -> dict:
    shutil.rmtree(cache, ignore_errors=True)
    cmd = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        __file__,
        "--_prepare",
        str(corpus),
        str(cache),
        str(num_proc),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        sys.exit(f"prepare failed:\n{res.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time .*: (\S+)", res.stderr).group(1)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
    cpu = sum(
        float(re.search(rf"{k} time \(seconds\): (\S+)", res.stderr).group(1))
        for k in ("User", "System")
    )
    parts = [float(x) for x in wall.split(":")]
    seconds = sum(p * 60**i for i, p in enumerate(reversed(parts)))
    (data,) = cache.glob("data-*")
    size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
    kept = json.loads((data / "done.json").read_text())["stats"]["train"]["kept"]
    return {
        "lines": kept,
        "wall_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(rss / 1024),
        "cache_mib": round(size / 2**20, 1),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--_prepare":
        prepare(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path("/tmp/vat-bench-prepare"))
    p.add_argument("--repeats", type=int, nargs="+", default=[1, 10])
    p.add_argument("--num_proc", type=int, default=1)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for r in args.repeats:
        corpus = args.work / f"corpus-x{r}.txt"
        n = build_corpus(corpus, r)
        row = measure(corpus, args.work / f"cache-x{r}", args.num_proc)
        print(json.dumps({"repeats": r, "corpus_lines": n, **row}), flush=True)


if __name__ == "__main__":
    main()
