"""Loaders for SentEval's STS12-16, STSBenchmark and SICK (relatedness and entailment) tasks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from vat.errors import VatError
from vat.eval.tasks.files import (
    STS_SUBSETS,
    Pairs,
    TaskData,
    bad_line,
    labelled,
    need_file,
    read_pair_file,
    read_pair_splits,
    scored,
    split_lines,
    whitespace_tokens,
)


def load_sts(data_dir: Path, task: str) -> TaskData:
    """STS12-16 (SentEval's STSEval.loadFile): 'a<TAB>b' lines, gold on the same line of
    STS.gs.<set>.txt; pairs with an empty gold line are skipped."""
    folder = data_dir / "STS" / f"{task}-en-test"
    splits: dict[str, Pairs] = {}
    for subset in STS_SUBSETS[task]:
        inp = need_file(folder / f"STS.input.{subset}.txt", task, data_dir)
        gs = need_file(folder / f"STS.gs.{subset}.txt", task, data_dir)
        pairs, gold = split_lines(inp, "utf-8"), split_lines(gs, "utf-8")
        if len(gold) != len(pairs):
            raise VatError(
                f"{task}: {gs} has {len(gold)} lines but {inp} has {len(pairs)}; "
                "they must match line by line"
            )
        a, b, y = [], [], []
        for i, (line, g) in enumerate(zip(pairs, gold), 1):
            if not g.strip():  # unscored pair: SentEval drops it (raw_scores != '')
                continue
            cols = line.split("\t")
            if len(cols) < 2:
                raise bad_line(inp, i, "sentence<TAB>sentence")
            try:
                score = float(g)
            except ValueError:
                raise bad_line(gs, i, "a number or an empty line") from None
            if not math.isfinite(score):
                raise bad_line(gs, i, "a finite number or an empty line")
            a.append(whitespace_tokens(cols[0]))
            b.append(whitespace_tokens(cols[1]))
            y.append(score)
        splits[subset] = scored(Pairs(a, b, np.asarray(y, dtype=np.float64)), gs)
    return TaskData(task, "sts", splits, path=folder)


# STSBenchmark's columns (0-based): the sentences in 5 and 6, the score (0-5) in 4
STSB_COLUMNS = "genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>sentence<TAB>sentence"
STSB_FORMAT = (5, 6, lambda c: float(c[4]), np.float64, STSB_COLUMNS)


def load_stsb(data_dir: Path, task: str = "STSBenchmark") -> TaskData:
    folder = data_dir / "STS" / "STSBenchmark"
    files = (("train", "sts-train.csv"), ("dev", "sts-dev.csv"), ("test", "sts-test.csv"))
    splits = read_pair_splits(folder, files, task, data_dir, scored, *STSB_FORMAT, header=False)
    return TaskData(task, "relatedness", splits, path=folder)


def read_stsb_file(path: Path) -> Pairs:
    """One file in STSBenchmark's layout, read and checked as `load_stsb` reads each split."""
    return scored(read_pair_file(Path(path), *STSB_FORMAT, header=False), Path(path))


_SICK_LABELS = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}


def load_sick(data_dir: Path, task: str) -> TaskData:
    """SICK (relatedness: score column 3; entailment: label column 4); trial is dev."""
    folder = data_dir / "SICK"
    entail = task == "SICKEntailment"
    files = (
        ("train", "SICK_train.txt"),
        ("dev", "SICK_trial.txt"),
        ("test", "SICK_test_annotated.txt"),
    )
    label = (lambda c: _SICK_LABELS[c[4].strip()]) if entail else (lambda c: float(c[3]))
    check, dtype = (labelled, np.int64) if entail else (scored, np.float64)
    cols = "pair_ID<TAB>sentence_A<TAB>sentence_B<TAB>relatedness_score<TAB>entailment_judgment"
    splits = read_pair_splits(
        folder, files, task, data_dir, check, 1, 2, label, dtype, cols, header=True
    )
    kind, nclasses = ("split", 3) if entail else ("relatedness", 0)
    return TaskData(task, kind, splits, nclasses=nclasses, path=folder)
