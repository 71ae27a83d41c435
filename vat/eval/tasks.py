"""Loaders for SentEval's downstream tasks, from SentEval's own file layout.

Paths are relative to a SentEval `data/downstream/` folder (the `--data-dir`). Each loader
reads the files exactly as facebookresearch/SentEval (commit 5d6dc11) does, so the same
encoder sees the same token sequences:

- sentences are split on whitespace (`str.split()`), then re-joined with single spaces,
  because SentEval hands token lists to its batchers and ours take strings;
- MR/CR/SUBJ/MPQA and TREC are read as Latin-1 (SentEval's `io.open(..., 'latin-1')`),
  everything else as UTF-8 (a leading byte-order mark is dropped);
- the trained tasks keep SentEval's length-sorted sample order
  (`sorted(..., key=(len(tokens), label))` in binary.py, trec.py, sst.py, mrpc.py, sick.py),
  because its stratified k-fold splits and training permutations index into that order.

A missing folder or file raises `VatError` naming the path and the expected layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vat.errors import VatError

# ----------------------------------------------------------------------------- task names

STS_SUBSETS: dict[str, list[str]] = {
    "STS12": ["MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"],
    # STS13 without SMT (licence), as in SentEval's STS13Eval
    "STS13": ["FNWN", "headlines", "OnWN"],
    "STS14": ["deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"],
    "STS15": ["answers-forums", "answers-students", "belief", "headlines", "images"],
    "STS16": ["answer-answer", "headlines", "plagiarism", "postediting", "question-question"],
}
STS_TASKS = list(STS_SUBSETS)
RELATEDNESS_TASKS = ["STSBenchmark", "SICKRelatedness"]
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment"]
ALL_TASKS = STS_TASKS + RELATEDNESS_TASKS + TRANSFER_TASKS
TASK_GROUPS: dict[str, list[str]] = {
    "sts": STS_TASKS + RELATEDNESS_TASKS,
    "transfer": TRANSFER_TASKS,
    "all": ALL_TASKS,
}

# Expected layout of each task under the data dir (shown in "missing file" errors).
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


def expand_tasks(spec: str | list[str]) -> list[str]:
    """'sts,MR' -> ['STS12', ..., 'SICKRelatedness', 'MR'] (groups expanded, order kept, no
    duplicates). Unknown names raise VatError listing the valid ones."""
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for name in filter(None, names):
        expanded = TASK_GROUPS.get(name.lower(), [name])
        for t in expanded:
            if t not in ALL_TASKS:
                raise VatError(
                    f"unknown task {t!r}; valid tasks: {', '.join(ALL_TASKS)}; groups: {', '.join(TASK_GROUPS)}"
                )
            if t not in out:
                out.append(t)
    if not out:
        raise VatError(
            f"no task given; valid tasks: {', '.join(ALL_TASKS)}; groups: {', '.join(TASK_GROUPS)}"
        )
    return out


# ----------------------------------------------------------------------------- containers


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
    """One task's data. `kind` says which protocol runs it:

    - "sts": `splits` holds the STS subsets (Pairs of scores), no training;
    - "relatedness": train/dev/test Pairs of scores (cosine, or SentEval's regressor);
    - "kfold": one Singles "all" split, SentEval's InnerKFoldClassifier (MR, CR, SUBJ, MPQA);
    - "traintest": train/test, SentEval's KFoldClassifier (TREC: Singles, MRPC: Pairs);
    - "split": train/dev/test, SentEval's SplitClassifier (SST2, SST5, SICKEntailment).
    """

    name: str
    kind: str
    splits: dict[str, Pairs | Singles]
    nclasses: int = 0
    path: Path = field(default_factory=Path)

    def sentences(self) -> list[str]:
        """Every sentence of the task (with repeats), for encoding."""
        out: list[str] = []
        for s in self.splits.values():
            out += s.a + s.b if isinstance(s, Pairs) else s.x
        return out


# ----------------------------------------------------------------------------- file reading


def _need(path: Path, task: str, data_dir: Path) -> Path:
    if not path.is_file():
        what = "folder" if not path.parent.is_dir() else "file"
        missing = path.parent if what == "folder" else path
        raise VatError(
            f"{task}: missing {what} {missing} (expected SentEval layout under {data_dir}: {LAYOUT[task]}; "
            "fetch it with scripts/get_senteval_data.sh from the vat source repository)"
        )
    return path


def _read_text(path: Path, encoding: str) -> str:
    """Whole file, universal newlines (CRLF -> LF), a UTF-8 byte-order mark dropped."""
    enc = "utf-8-sig" if encoding == "utf-8" else encoding
    try:
        with open(path, encoding=enc) as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise VatError(f"{path}: not valid {encoding} at byte {e.start} ({e.reason})") from None


def _iter_lines(path: Path, encoding: str) -> list[str]:
    """Lines as `for line in f` yields them (split on newlines only), newline removed."""
    text = _read_text(path, encoding)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _splitlines(path: Path, encoding: str) -> list[str]:
    """`f.read().splitlines()`, as SentEval's binary.py and sts.py read their files."""
    return _read_text(path, encoding).splitlines()


def _toks(s: str) -> str:
    """SentEval's `s.split()`, re-joined: collapses any whitespace run to one space."""
    return " ".join(s.split())


def _ntok(s: str) -> int:
    return len(s.split())


def _bad_line(path: Path, lineno: int, expected: str) -> VatError:
    return VatError(f"{path}: line {lineno} is not in the expected format ({expected})")


def _read_pair_file(
    path: Path,
    col_a: int,
    col_b: int,
    label: Callable[[list[str]], float | int],
    dtype: type,
    expected: str,
    header: bool,
) -> dict[str, np.ndarray]:
    """A tab-separated file of sentence pairs with a label per line (STS-B, SICK, MRPC):
    blank lines skipped, a bad line is a one-line error naming it and the expected columns."""
    lines = _iter_lines(path, "utf-8")
    first = 2 if header else 1
    a, b, y = [], [], []
    for i, line in enumerate(lines[1:] if header else lines, first):
        if not line.strip():
            continue
        cols = line.strip().split("\t")
        try:
            y.append(label(cols))
            a.append(_toks(cols[col_a]))
            b.append(_toks(cols[col_b]))
        except (IndexError, ValueError, KeyError):
            raise _bad_line(path, i, expected) from None
        if not math.isfinite(y[-1]):
            raise _bad_line(path, i, expected + ", with a finite score")
    return _pairs(a, b, y, dtype)


# ----------------------------------------------------------------------------- loaders


def load_sts(data_dir: Path, task: str) -> TaskData:
    """STS12-16 (SentEval's STSEval.loadFile): 'a<TAB>b' lines, gold on the same line of
    STS.gs.<set>.txt; pairs with an empty gold line are skipped."""
    folder = data_dir / "STS" / f"{task}-en-test"
    splits: dict[str, Pairs] = {}
    for subset in STS_SUBSETS[task]:
        inp = _need(folder / f"STS.input.{subset}.txt", task, data_dir)
        gs = _need(folder / f"STS.gs.{subset}.txt", task, data_dir)
        pairs = _splitlines(inp, "utf-8")
        gold = _splitlines(gs, "utf-8")
        if len(gold) != len(pairs):
            raise VatError(
                f"{task}: {gs} has {len(gold)} lines but {inp} has {len(pairs)}; they must match line by line"
            )
        a, b, y = [], [], []
        for i, (line, g) in enumerate(zip(pairs, gold), 1):
            if not g.strip():  # unscored pair: SentEval drops it (raw_scores != '')
                continue
            cols = line.split("\t")
            if len(cols) < 2:
                raise _bad_line(inp, i, "sentence<TAB>sentence")
            try:
                score = float(g)
            except ValueError:
                raise _bad_line(gs, i, "a number or an empty line") from None
            if not math.isfinite(score):
                raise _bad_line(gs, i, "a finite number or an empty line")
            a.append(_toks(cols[0]))
            b.append(_toks(cols[1]))
            y.append(score)
        splits[subset] = _scored(Pairs(a, b, np.asarray(y, dtype=np.float64)), gs)
    return TaskData(task, "sts", splits, path=folder)


def _scored(pairs: Pairs, path: Path) -> Pairs:
    """Pairs whose gold scores can be correlated with: at least 2, not all equal. Otherwise
    every correlation would be NaN (a `null` in the JSON, a dash in the table)."""
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


def _labelled(split: Pairs | Singles, path: Path, train: bool) -> Pairs | Singles:
    """A classification split that is not empty; a training split needs two classes (one
    class scores a meaningless 100% accuracy)."""
    if len(split) == 0:
        raise VatError(
            f"{path}: no examples; expected {'labelled lines' if train else 'at least one labelled line'}"
        )
    if train and len(np.unique(split.y)) < 2:
        raise VatError(
            f"{path}: every example has label {split.y[0]}; a classifier needs at least two classes"
        )
    return split


def _sorted_pairs(a: list[str], b: list[str], y: list) -> tuple[list[str], list[str], list]:
    """SentEval's sort for pair tasks: key (len(tokens a), len(tokens b), y), stable."""
    order = sorted(range(len(y)), key=lambda i: (_ntok(a[i]), _ntok(b[i]), y[i]))
    return [a[i] for i in order], [b[i] for i in order], [y[i] for i in order]


def _sorted_singles(x: list[str], y: list[int]) -> tuple[list[str], list[int]]:
    """SentEval's sort for single-sentence tasks: key (len(tokens), label), stable."""
    order = sorted(range(len(y)), key=lambda i: (_ntok(x[i]), y[i]))
    return [x[i] for i in order], [y[i] for i in order]


def _pairs(a: list[str], b: list[str], y: list, dtype: type) -> Pairs:
    a, b, y = _sorted_pairs(a, b, y)
    return Pairs(a, b, np.asarray(y, dtype=dtype))


def load_stsb(data_dir: Path, task: str = "STSBenchmark") -> TaskData:
    """STSBenchmark: tab-separated, score in column 4, sentences in 5 and 6 (0-based)."""
    folder = data_dir / "STS" / "STSBenchmark"
    splits = {}
    for split, fname in (
        ("train", "sts-train.csv"),
        ("dev", "sts-dev.csv"),
        ("test", "sts-test.csv"),
    ):
        path = _need(folder / fname, task, data_dir)
        pairs = _read_pair_file(
            path,
            5,
            6,
            lambda c: float(c[4]),
            np.float64,
            "genre<TAB>file<TAB>year<TAB>id<TAB>score<TAB>sentence<TAB>sentence",
            header=False,
        )
        splits[split] = _scored(pairs, path)
    return TaskData(task, "relatedness", splits, path=folder)


_SICK_LABELS = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}


def load_sick(data_dir: Path, task: str) -> TaskData:
    """SICK (SICKRelatedness: score column 3; SICKEntailment: label column 4), header skipped;
    trial is the dev split."""
    folder = data_dir / "SICK"
    entail = task == "SICKEntailment"
    splits = {}
    for split, fname in (
        ("train", "SICK_train.txt"),
        ("dev", "SICK_trial.txt"),
        ("test", "SICK_test_annotated.txt"),
    ):
        path = _need(folder / fname, task, data_dir)
        label = (lambda c: _SICK_LABELS[c[4].strip()]) if entail else (lambda c: float(c[3]))
        pairs = _read_pair_file(
            path,
            1,
            2,
            label,
            np.int64 if entail else np.float64,
            "pair_ID<TAB>sentence_A<TAB>sentence_B<TAB>relatedness_score<TAB>entailment_judgment",
            header=True,
        )
        splits[split] = _labelled(pairs, path, split == "train") if entail else _scored(pairs, path)
    if entail:
        return TaskData(task, "split", splits, nclasses=3, path=folder)
    return TaskData(task, "relatedness", splits, path=folder)


_BINARY_FILES = {
    # task: (folder, file with label 1, file with label 0); SUBJ: objective is label 1 (binary.py)
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}


def load_binary(data_dir: Path, task: str) -> TaskData:
    """MR/CR/SUBJ/MPQA: one sentence a line, Latin-1; empty lines are (empty) samples, as in
    SentEval's BinaryClassifierEval."""
    folder, pos_f, neg_f = _BINARY_FILES[task]
    sides = []
    for fname in (pos_f, neg_f):
        path = _need(data_dir / folder / fname, task, data_dir)
        lines = [_toks(s) for s in _splitlines(path, "latin-1")]
        if not any(lines):  # no sentence at all: one class only, a meaningless 100% accuracy
            raise VatError(f"{path}: no sentences; expected one {task} sentence a line")
        sides.append(lines)
    pos, neg = sides
    x, y = _sorted_singles(pos + neg, [1] * len(pos) + [0] * len(neg))
    return TaskData(
        task,
        "kfold",
        {"all": Singles(x, np.asarray(y, np.int64))},
        nclasses=2,
        path=data_dir / folder,
    )


def load_sst(data_dir: Path, task: str) -> TaskData:
    """SST2 ('sentence<TAB>label', binary/) and SST5 ('label sentence', fine/)."""
    fine = task == "SST5"
    folder = data_dir / "SST" / ("fine" if fine else "binary")
    nclasses = 5 if fine else 2
    splits = {}
    for split in ("train", "dev", "test"):
        path = _need(folder / f"sentiment-{split}", task, data_dir)
        x, y = [], []
        for i, line in enumerate(_iter_lines(path, "utf-8"), 1):
            if not line.strip():
                continue
            try:
                if fine:
                    label, sent = line.strip().split(" ", 1)
                else:
                    sent, label = line.strip().split("\t")[:2]
                lab = int(label)
            except ValueError:
                raise _bad_line(
                    path, i, "label sentence" if fine else "sentence<TAB>label"
                ) from None
            if not 0 <= lab < nclasses:
                raise _bad_line(path, i, f"label in 0..{nclasses - 1}")
            x.append(_toks(sent))
            y.append(lab)
        x, y = _sorted_singles(x, y)
        splits[split] = _labelled(Singles(x, np.asarray(y, np.int64)), path, split == "train")
    return TaskData(task, "split", splits, nclasses=nclasses, path=folder)


_TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}


def load_trec(data_dir: Path, task: str = "TREC") -> TaskData:
    """TREC: 'COARSE:fine question words', Latin-1; train_5500 for CV, TREC_10 as test."""
    folder = data_dir / "TREC"
    splits = {}
    for split, fname in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        path = _need(folder / fname, task, data_dir)
        x, y = [], []
        for i, line in enumerate(_iter_lines(path, "latin-1"), 1):
            if not line.strip():
                continue
            try:
                target, sample = line.strip().split(":", 1)
                x.append(_toks(sample.split(" ", 1)[1]))
                y.append(_TREC_CLASSES[target])
            except (ValueError, IndexError, KeyError):
                raise _bad_line(
                    path, i, "COARSE:fine question, COARSE in " + "/".join(_TREC_CLASSES)
                ) from None
        x, y = _sorted_singles(x, y)
        splits[split] = _labelled(Singles(x, np.asarray(y, np.int64)), path, split == "train")
    return TaskData(task, "traintest", splits, nclasses=6, path=folder)


def load_mrpc(data_dir: Path, task: str = "MRPC") -> TaskData:
    """MRPC: header line (maybe with a BOM), then 'Quality #1_ID #2_ID #1_String #2_String'."""
    folder = data_dir / "MRPC"
    splits = {}
    for split in ("train", "test"):
        path = _need(folder / f"msr_paraphrase_{split}.txt", task, data_dir)
        pairs = _read_pair_file(
            path,
            3,
            4,
            lambda c: int(c[0]),
            np.int64,
            "Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String",
            header=True,
        )
        splits[split] = _labelled(pairs, path, split == "train")
    return TaskData(task, "traintest", splits, nclasses=2, path=folder)


_LOADERS: dict[str, Callable[[Path, str], TaskData]] = {
    **{t: load_sts for t in STS_TASKS},
    "STSBenchmark": load_stsb,
    "SICKRelatedness": load_sick,
    "SICKEntailment": load_sick,
    **{t: load_binary for t in _BINARY_FILES},
    "SST2": load_sst,
    "SST5": load_sst,
    "TREC": load_trec,
    "MRPC": load_mrpc,
}


def load_task(data_dir: str | Path, task: str) -> TaskData:
    """Load one task (SentEval name) from a SentEval `data/downstream` folder."""
    data_dir = Path(data_dir)
    if task not in _LOADERS:
        raise VatError(f"unknown task {task!r}; valid tasks: {', '.join(ALL_TASKS)}")
    if not data_dir.is_dir():
        raise VatError(
            f"data dir {data_dir} does not exist (expected SentEval's data/downstream layout, e.g. {data_dir}/{LAYOUT[task]}; "
            "set --data-dir or VAT_SENTEVAL_DIR; scripts/get_senteval_data.sh in the vat source repository fetches it)"
        )
    return _LOADERS[task](data_dir, task)
