"""A miniature SentEval data/downstream folder, in the exact file formats of every task.

Used by the harness tests for the tasks that ../shared/data does not hold (STS13-16, SICK)
and for fast CLI runs. The files carry the quirks the real ones have: CRLF line endings
(SICK test), a UTF-8 byte-order mark (MRPC header), Latin-1 bytes (MR, TREC), empty lines
(CR), empty gold lines (STS15), extra columns (STSBenchmark), non-ASCII text (STS).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from vat.eval.tasks.registry import STS_SUBSETS

POS = ["good", "great", "fine", "lovely", "superb", "nice"]
NEG = ["bad", "awful", "poor", "dull", "boring", "weak"]
FILL = ["the", "movie", "was", "really", "quite", "a", "plot", "and", "café", "story"]


def sentence(rng: random.Random, words: list[str], n: int = 5) -> str:
    return " ".join(rng.choice(words) if i % 2 else rng.choice(FILL) for i in range(n))


def _w(path: Path, text: str, encoding: str = "utf-8", newline: str = "\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.replace("\n", newline).encode(encoding))


def write_sts(root: Path, task: str, n: int = 12, empty_gold: bool = False, seed: int = 0) -> None:
    rng = random.Random(seed)
    for subset in STS_SUBSETS[task]:
        inp, gs = [], []
        for i in range(n):
            a = sentence(rng, POS + NEG)
            b = a if i % 3 == 0 else sentence(rng, POS + NEG)
            inp.append(f"{a}\t{b}")
            gs.append("" if empty_gold and i == 1 else f"{rng.uniform(0, 5):.3f}")
        folder = root / "STS" / f"{task}-en-test"
        _w(folder / f"STS.input.{subset}.txt", "\n".join(inp) + "\n")
        _w(folder / f"STS.gs.{subset}.txt", "\n".join(gs) + "\n")


def write_mini_senteval(root: Path, n: int = 40, seed: int = 0) -> Path:
    """Every SentEval task, n examples per class-ish. Returns root."""
    rng = random.Random(seed)
    for task in STS_SUBSETS:
        write_sts(root, task, empty_gold=task == "STS15", seed=seed)
    # STS13's SMT gold file without an input file: not part of the task
    _w(root / "STS" / "STS13-en-test" / "STS.gs.SMT.txt", "1.0\n")
    for split, m in (("train", 3 * n), ("dev", n), ("test", n)):
        rows = [
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{rng.uniform(0, 5):.3f}\t"
            f"{sentence(rng, POS)}\t{sentence(rng, NEG)}\textra\tcolumns"
            for i in range(m)
        ]
        _w(root / "STS" / "STSBenchmark" / f"sts-{split}.csv", "\n".join(rows) + "\n")
    labels = ["NEUTRAL", "ENTAILMENT", "CONTRADICTION"]
    for split, m in (("train", 3 * n), ("trial", n), ("test_annotated", n)):
        rows = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
        rows += [
            f"{i}\t{sentence(rng, POS)}\t{sentence(rng, NEG)}\t"
            f"{rng.uniform(1, 5):.1f}\t{labels[i % 3]}"
            for i in range(m)
        ]
        _w(
            root / "SICK" / f"SICK_{split}.txt",
            "\n".join(rows) + "\n",
            newline="\r\n" if split == "test_annotated" else "\n",
        )
    for folder, pos, neg, enc in (
        ("MR", "rt-polarity.pos", "rt-polarity.neg", "latin-1"),
        ("CR", "custrev.pos", "custrev.neg", "utf-8"),
        ("SUBJ", "subj.objective", "subj.subjective", "utf-8"),
        ("MPQA", "mpqa.pos", "mpqa.neg", "utf-8"),
    ):
        p = [sentence(rng, POS) for _ in range(n)]
        q = [sentence(rng, NEG) for _ in range(n)]
        if folder == "CR":
            p[3] = ""  # CR has a few empty lines: they are (empty) samples
        _w(root / folder / pos, "\n".join(p) + "\n", enc)
        _w(root / folder / neg, "\n".join(q) + "\n", enc)
    for sub, fine in (("binary", False), ("fine", True)):
        for split in ("train", "dev", "test"):
            rows = []
            for i in range(2 * n if split == "train" else n):
                lab = i % (5 if fine else 2)
                s = sentence(rng, POS if lab >= (3 if fine else 1) else NEG)
                rows.append(f"{lab} {s}" if fine else f"{s} \t{lab}")
            _w(root / "SST" / sub / f"sentiment-{split}", "\n".join(rows) + "\n")
    coarse = ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    for fname, m in (("train_5500.label", 6 * n), ("TREC_10.label", 3 * n)):
        rows = [
            f"{coarse[i % 6]}:fine What {coarse[i % 6].lower()} {sentence(rng, FILL, 3)} ?"
            for i in range(m)
        ]
        _w(root / "TREC" / fname, "\n".join(rows) + "\n", "latin-1")
    for split, m in (("train", 3 * n), ("test", n)):
        rows = ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
        for i in range(m):
            a = sentence(rng, POS)
            rows.append(f"{i % 2}\t{i}\t{i + 1}\t{a}\t{a if i % 2 else sentence(rng, NEG)}")
        _w(root / "MRPC" / f"msr_paraphrase_{split}.txt", "\n".join(rows) + "\n")
    return root


def bag_encoder(sentences: list[str], dim: int = 16) -> np.ndarray:
    """A deterministic bag-of-words encoder (like the oracle's hashbow, tiny and local)."""
    out = np.zeros((len(sentences), dim), dtype=np.float32)
    for i, s in enumerate(sentences):
        toks = s.split() or ["."]
        for t in toks:
            out[i] += np.random.default_rng(sum(map(ord, t)) * 7919 + len(t)).standard_normal(dim)
        out[i] /= len(toks)
    return out
