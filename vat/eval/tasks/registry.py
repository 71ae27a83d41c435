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

This module holds the task names, `expand_tasks` and `load_task`; the loaders are in
`vat.eval.tasks.sts` (STS12-16, STSBenchmark, SICK) and `vat.eval.tasks.classification`
(MR, CR, SUBJ, MPQA, SST2/5, TREC, MRPC), the containers and file reading in
`vat.eval.tasks.files`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vat.errors import VatError
from vat.eval.tasks.classification import (
    BINARY_FILES,
    load_binary,
    load_mrpc,
    load_sst,
    load_trec,
)
from vat.eval.tasks.files import LAYOUT, STS_SUBSETS, TaskData
from vat.eval.tasks.files import Pairs as Pairs
from vat.eval.tasks.sts import load_sick, load_sts, load_stsb

# ----------------------------------------------------------------------------- task names
STS_TASKS = list(STS_SUBSETS)
RELATEDNESS_TASKS = ["STSBenchmark", "SICKRelatedness"]
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment"]
ALL_TASKS = STS_TASKS + RELATEDNESS_TASKS + TRANSFER_TASKS
TASK_GROUPS: dict[str, list[str]] = {
    "sts": STS_TASKS + RELATEDNESS_TASKS,
    "transfer": TRANSFER_TASKS,
    "all": ALL_TASKS,
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
                    f"unknown task {t!r}; valid tasks: {', '.join(ALL_TASKS)}; "
                    f"groups: {', '.join(TASK_GROUPS)}"
                )
            if t not in out:
                out.append(t)
    if not out:
        raise VatError(
            f"no task given; valid tasks: {', '.join(ALL_TASKS)}; groups: {', '.join(TASK_GROUPS)}"
        )
    return out


_LOADERS: dict[str, Callable[[Path, str], TaskData]] = {
    **{t: load_sts for t in STS_TASKS},
    "STSBenchmark": load_stsb,
    "SICKRelatedness": load_sick,
    "SICKEntailment": load_sick,
    **{t: load_binary for t in BINARY_FILES},
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
            f"data dir {data_dir} does not exist (expected SentEval's data/downstream layout, "
            f"e.g. {data_dir}/{LAYOUT[task]}; set --data-dir or VAT_SENTEVAL_DIR; "
            "scripts/get_senteval_data.sh in the vat source repository fetches it)"
        )
    return _LOADERS[task](data_dir, task)
