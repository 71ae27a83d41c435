"""Task containers and SentEval's file reading (as facebookresearch/SentEval 5d6dc11 reads them);
a missing or malformed file is a one-line VatError naming it."""

from __future__ import annotations

import codecs
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vat.data.corpus import check_text
from vat.errors import VatError

STS_SUBSETS: dict[str, list[str]] = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    # STS13 without SMT (licence), as in SentEval's STS13Eval
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}

# shown in "missing file" errors
LAYOUT: dict[str, str] = {
    **{
        t: f"STS/{t}-en-test/STS.input.<set>.txt + STS.gs.<set>.txt, sets {', '.join(s)}"
        for t, s in STS_SUBSETS.items()
    },
    "STSBenchmark": "STS/STSBenchmark/sts-{train,dev,test}.csv",
    "SICKRelatedness": "SICK/SICK_{train,trial,test_annotated}.txt",
    "SICKEntailment": "SICK/SICK_{train,trial,test_annotated}.txt",
    "MR": "MR/rt-polarity.{pos,neg}",
    "CR": "CR/custrev.{pos,neg}",
    "SUBJ": "SUBJ/subj.{objective,subjective}",
    "MPQA": "MPQA/mpqa.{pos,neg}",
    "SST2": "SST/binary/sentiment-{train,dev,test}",
    "SST5": "SST/fine/sentiment-{train,dev,test}",
    "TREC": "TREC/train_5500.label + TREC/TREC_10.label",
    "MRPC": "MRPC/msr_paraphrase_{train,test}.txt",
}


@dataclass
class Pairs:
    """Sentence pairs with a gold value each (a score, or a class id)."""

    a: list[str]
    b: list[str]
    y: np.ndarray  # (N,) float64 scores or int64 labels

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class Singles:
    """Single sentences with a class id each."""

    x: list[str]
    y: np.ndarray  # (N,) int64

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class TaskData:
    """One task's data; `kind` names its protocol: "sts" (subsets, no training), "relatedness"
    (train/dev/test), "kfold" (one "all" split), "traintest" or "split" (train/dev/test)."""

    name: str
    kind: str
    splits: dict[str, Pairs | Singles]
    nclasses: int = 0
    path: Path = field(default_factory=Path)

    def sentences(self) -> list[str]:
        """Every sentence of the task (with repeats), for encoding."""
        return [
            x for s in self.splits.values() for x in (s.a + s.b if isinstance(s, Pairs) else s.x)
        ]


class MissingTaskData(VatError):
    """A task's folder or file is absent (not malformed): a command may offer to skip the task."""


def need_file(path: Path, task: str, data_dir: Path) -> Path:
    if not path.is_file():
        what, missing = ("folder", path.parent) if not path.parent.is_dir() else ("file", path)
        raise MissingTaskData(
            f"{task}: missing {what} {missing} "
            f"(expected SentEval layout under {data_dir}: {LAYOUT[task]}; "
            "fetch it with scripts/get_senteval_data.sh from the vat source repository)"
        )
    return path


def _read_text(path: Path, encoding: str) -> str:
    """Whole file with universal newlines, as SentEval's `open` reads it; a UTF-8 file follows
    vat's rule for text (vat.data.corpus.check_text)."""
    data = Path(path).read_bytes()
    if encoding == "utf-8":
        check_text(data[:8192], path)
        data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise VatError(f"{path}:{line}: bytes that are not UTF-8 (expected UTF-8 text)") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def iter_lines(path: Path, encoding: str) -> list[str]:
    """Lines as `for line in f` yields them (split on newlines only), newline removed."""
    lines = _read_text(path, encoding).split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def split_lines(path: Path, encoding: str) -> list[str]:
    """`f.read().splitlines()`, as SentEval's binary.py and sts.py read their files."""
    return _read_text(path, encoding).splitlines()


def whitespace_tokens(s: str) -> str:
    """SentEval's `s.split()`, re-joined: collapses any whitespace run to one space."""
    return " ".join(s.split())


def _ntok(s: str) -> int:
    return len(s.split())


def bad_line(path: Path, lineno: int, expected: str) -> VatError:
    return VatError(f"{path}: line {lineno} is not in the expected format ({expected})")


def read_pair_file(
    path: Path,
    col_a: int,
    col_b: int,
    label: Callable[[list[str]], float | int],
    dtype: type,
    expected: str,
    header: bool,
) -> dict[str, np.ndarray]:
    """A tab-separated file of labelled sentence pairs (STS-B, SICK, MRPC); blank lines skipped."""
    lines = iter_lines(path, "utf-8")
    a, b, y = [], [], []
    for i, line in enumerate(lines[1:] if header else lines, 2 if header else 1):
        if not line.strip():
            continue
        cols = line.strip().split("\t")
        try:
            y.append(label(cols))
            a.append(whitespace_tokens(cols[col_a]))
            b.append(whitespace_tokens(cols[col_b]))
        except (IndexError, ValueError, KeyError):
            raise bad_line(path, i, expected) from None
        if not math.isfinite(y[-1]):
            raise bad_line(path, i, expected + ", with a finite score")
    return _pairs(a, b, y, dtype)


def scored(pairs: Pairs, path: Path, train: bool = False) -> Pairs:
    """Pairs whose gold scores can be correlated with: at least 2, not all equal."""
    if len(pairs) < 2:
        raise VatError(
            f"{path}: {len(pairs)} scored pair(s); a correlation needs at least 2 "
            "(empty gold lines are unscored pairs)"
        )
    if np.ptp(pairs.y) == 0:
        raise VatError(
            f"{path}: every gold score is {pairs.y[0]:g}; a correlation needs scores that differ"
        )
    return pairs


def labelled(split: Pairs | Singles, path: Path, train: bool) -> Pairs | Singles:
    """A non-empty classification split; a training split needs two classes."""
    if len(split) == 0:
        raise VatError(
            f"{path}: no examples; expected "
            f"{'labelled lines' if train else 'at least one labelled line'}"
        )
    if train and len(np.unique(split.y)) < 2:
        raise VatError(
            f"{path}: every example has label {split.y[0]}; a classifier needs at least two classes"
        )
    return split


def _pairs(a: list[str], b: list[str], y: list, dtype: type) -> Pairs:
    """SentEval's sort for pair tasks: key (len(tokens a), len(tokens b), y), stable."""
    order = sorted(range(len(y)), key=lambda i: (_ntok(a[i]), _ntok(b[i]), y[i]))
    return Pairs([a[i] for i in order], [b[i] for i in order], np.asarray(y, dtype)[order])


def singles(x: list[str], y: list[int]) -> Singles:
    """SentEval's sort for single-sentence tasks: key (len(tokens), label), stable."""
    order = sorted(range(len(y)), key=lambda i: (_ntok(x[i]), y[i]))
    return Singles([x[i] for i in order], np.asarray(y, np.int64)[order])


def read_pair_splits(
    folder: Path,
    files: Iterable[tuple[str, str]],
    task: str,
    data_dir: Path,
    check: Callable[[Pairs, Path, bool], Pairs | Singles],
    *fmt: Any,
    header: bool,
) -> dict[str, Pairs | Singles]:
    """{split: check(pairs, path, split == "train")} of each (split, file name) under `folder`."""
    splits = {}
    for split, fname in files:
        path = need_file(folder / fname, task, data_dir)
        splits[split] = check(read_pair_file(path, *fmt, header=header), path, split == "train")
    return splits
