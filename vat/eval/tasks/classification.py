"""Loaders for SentEval's classification tasks MR, CR, SUBJ, MPQA, SST2/5, TREC and MRPC."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vat.errors import VatError
from vat.eval.tasks.files import (
    TaskData,
    bad_line,
    iter_lines,
    labelled,
    need_file,
    read_pair_splits,
    singles,
    split_lines,
    whitespace_tokens,
)

BINARY_FILES = {
    # task: (folder, file with label 1, file with label 0); SUBJ: objective is label 1 (binary.py)
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}


def load_binary(data_dir: Path, task: str) -> TaskData:
    """MR/CR/SUBJ/MPQA: one sentence a line, Latin-1; empty lines are (empty) samples."""
    folder, pos_f, neg_f = BINARY_FILES[task]
    sides = []
    for fname in (pos_f, neg_f):
        path = need_file(data_dir / folder / fname, task, data_dir)
        lines = [whitespace_tokens(s) for s in split_lines(path, "latin-1")]
        if not any(lines):  # no sentence at all: one class only, a meaningless 100% accuracy
            raise VatError(f"{path}: no sentences; expected one {task} sentence a line")
        sides.append(lines)
    pos, neg = sides
    both = {"all": singles(pos + neg, [1] * len(pos) + [0] * len(neg))}
    return TaskData(task, "kfold", both, nclasses=2, path=data_dir / folder)


def _read_singles(path: Path, encoding: str, parse, expected: str, nclasses: int, train: bool):
    """Labelled sentences, `parse(line) -> (sentence, label)`, one a line; blank lines skipped."""
    x, y = [], []
    for i, line in enumerate(iter_lines(path, encoding), 1):
        if not line.strip():
            continue
        try:
            sent, label = parse(line.strip())
        except (ValueError, IndexError, KeyError):
            raise bad_line(path, i, expected) from None
        if not 0 <= label < nclasses:
            raise bad_line(path, i, f"label in 0..{nclasses - 1}")
        x.append(whitespace_tokens(sent))
        y.append(label)
    return labelled(singles(x, y), path, train)


SST_FORMATS = {  # task: (line -> (sentence, label), the format an error names)
    "SST2": (lambda s: (s.split("\t")[0], int(s.split("\t")[1])), "sentence<TAB>label"),
    "SST5": (lambda s: (s.split(" ", 1)[1], int(s.split(" ", 1)[0])), "label sentence"),
}


def load_sst(data_dir: Path, task: str) -> TaskData:
    """SST2 ('sentence<TAB>label', binary/) and SST5 ('label sentence', fine/)."""
    subfolder, nclasses = ("fine", 5) if task == "SST5" else ("binary", 2)
    folder = data_dir / "SST" / subfolder
    parse, expected = SST_FORMATS[task]
    splits = {}
    for split in ("train", "dev", "test"):
        path = need_file(folder / f"sentiment-{split}", task, data_dir)
        splits[split] = _read_singles(path, "utf-8", parse, expected, nclasses, split == "train")
    return TaskData(task, "split", splits, nclasses=nclasses, path=folder)


_TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
TREC_FORMAT = (  # line -> (question, class), the format an error names
    lambda s: (s.split(":", 1)[1].split(" ", 1)[1], _TREC_CLASSES[s.split(":", 1)[0]]),
    "COARSE:fine question, COARSE in " + "/".join(_TREC_CLASSES),
)


def load_trec(data_dir: Path, task: str = "TREC") -> TaskData:
    """TREC: 'COARSE:fine question words', Latin-1; train_5500 for CV, TREC_10 as test."""
    folder = data_dir / "TREC"
    splits = {}
    for split, fname in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = need_file(folder / fname, task, data_dir)
        splits[split] = _read_singles(path, "latin-1", *TREC_FORMAT, 6, split == "train")
    return TaskData(task, "traintest", splits, nclasses=6, path=folder)


def load_mrpc(data_dir: Path, task: str = "MRPC") -> TaskData:
    """MRPC: header line (maybe with a BOM), then 'Quality #1_ID #2_ID #1_String #2_String'."""
    folder = data_dir / "MRPC"
    files = [(split, f"msr_paraphrase_{split}.txt") for split in ("train", "test")]
    cols = "Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String"
    fmt = (3, 4, lambda c: int(c[0]), np.int64, cols)
    splits = read_pair_splits(folder, files, task, data_dir, labelled, *fmt, header=True)
    return TaskData(task, "traintest", splits, nclasses=2, path=folder)
