"""SentEval's task names and groups, `expand_tasks`, `choose_tasks` and `load_task`.

Paths are relative to a SentEval `data/downstream/` folder (the `--data-dir`). The loaders
(`vat.eval.tasks.sts`, `vat.eval.tasks.classification`) read the files exactly as
facebookresearch/SentEval (commit 5d6dc11) does, so an encoder sees the same token sequences:
- sentences are split on whitespace and re-joined with single spaces (SentEval hands token
  lists to its batchers; ours take strings);
- MR/CR/SUBJ/MPQA and TREC are read as Latin-1, everything else as UTF-8;
- the trained tasks keep SentEval's length-sorted sample order, because its stratified k-fold
  splits and training permutations index into that order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vat.errors import OptionError, VatError, check_sentences, did_you_mean, shown_path
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


# The names tables print (vat evaluate's, the paper's) for tasks whose SentEval name differs;
# `--tasks` takes either, in any case.
TABLE_NAMES: dict[str, str] = {
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
    "SICKEntailment": "SICK-E",
}
_BY_LOWER: dict[str, str] = {
    **{t.lower(): t for t in ALL_TASKS},
    **{label.lower(): t for t, label in TABLE_NAMES.items()},
}

# The folder each task's files live in, under the data dir: a task whose folder is absent has
# no data (left out of a group); a folder with missing or broken files is an error.
TASK_FOLDERS: dict[str, str] = {
    **{t: f"STS/{t}-en-test" for t in STS_TASKS},
    "STSBenchmark": "STS/STSBenchmark",
    "SICKRelatedness": "SICK",
    "SICKEntailment": "SICK",
    **{t: t for t in ("MR", "CR", "SUBJ", "MPQA", "TREC", "MRPC")},
    "SST2": "SST/binary",
    "SST5": "SST/fine",
}


def task_name(name: str) -> str:
    """The SentEval name of one task given in any case or as tables print it ('sts-b',
    'STS-B', 'stsbenchmark' -> 'STSBenchmark'). An unknown name is an OptionError naming
    `tasks` (a command shows --tasks), the nearest known name and them all."""
    found = _BY_LOWER.get(name.strip().lower())
    if found is None:
        hint = did_you_mean(name, [*ALL_TASKS, *TABLE_NAMES.values()]) or did_you_mean(
            name, list(TASK_GROUPS)
        )
        raise OptionError(
            "tasks",
            f"unknown task {name!r}{hint}; valid tasks: "
            f"{', '.join(ALL_TASKS)} ({', '.join(f'{v} = {k}' for k, v in TABLE_NAMES.items())}"
            f"; any case); groups: {', '.join(TASK_GROUPS)}",
        )
    return found


def _parse(spec: str | list[str]) -> list[tuple[str, bool]]:
    """(task, named on its own) pairs of 'sts,MR' in order, without duplicates (a task named
    on its own and through a group counts as named on its own)."""
    if not isinstance(spec, str):
        spec = check_sentences(spec, "tasks")[0]  # a list of names; 3 or None is no list
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else spec
    out: dict[str, bool] = {}
    for name in filter(None, (str(n).strip() for n in names)):
        group = TASK_GROUPS.get(name.lower())
        for t in group if group is not None else [task_name(name)]:
            out[t] = out.get(t, False) or group is None
    if not out:
        raise OptionError(
            "tasks",
            f"no task given; valid tasks: {', '.join(ALL_TASKS)}; groups: {', '.join(TASK_GROUPS)}",
        )
    return list(out.items())


def expand_tasks(spec: str | list[str]) -> list[str]:
    """'sts,MR' -> ['STS12', ..., 'SICKRelatedness', 'MR'] (groups expanded, order kept, no
    duplicates; names in any case or as tables print them, 'STS-B'). Unknown names raise
    VatError naming the nearest valid one and listing them all."""
    return [t for t, _ in _parse(spec)]


def task_present(data_dir: str | Path, task: str) -> bool:
    """Whether the data dir holds `task`'s folder (TASK_FOLDERS); its files are checked when
    the task loads."""
    return (Path(data_dir) / TASK_FOLDERS[task]).is_dir()


@dataclass(frozen=True)
class TaskChoice:
    """The tasks a spec such as 'sts,MR' runs under one data dir. A group means the members
    present: those whose folder is absent are left out (`absent`, reported by the caller). A
    task named on its own is always run, so one whose folder is absent (`named_absent`)
    fails when it loads, unless the caller leaves it out on purpose."""

    tasks: list[str]
    absent: list[str]
    named_absent: list[str]


def choose_tasks(spec: str | list[str], data_dir: str | Path) -> TaskChoice:
    """Expand `spec` (see `expand_tasks`) and split it by what `data_dir` holds. A spec whose
    groups hold no task present, and that names no task on its own, raises VatError."""
    parsed = _parse(spec)
    _need_data_dir(data_dir, parsed[0][0])
    absent = [t for t, named in parsed if not named and not task_present(data_dir, t)]
    named_absent = [t for t, named in parsed if named and not task_present(data_dir, t)]
    tasks = [t for t, _ in parsed if t not in absent]
    if not tasks:
        raise VatError(
            f"no task of {spec if isinstance(spec, str) else ','.join(spec)!r} has data under "
            f"{data_dir} (looked for {', '.join(sorted({TASK_FOLDERS[t] for t in absent}))}; "
            "SentEval's data/downstream layout)"
        )
    return TaskChoice(tasks, absent, named_absent)


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
        task = task_name(task)
    _need_data_dir(data_dir, task)
    return _LOADERS[task](data_dir, task)


def _need_data_dir(data_dir: str | Path, task: str) -> None:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        # the folder is named, not the option: commands, the API and training name it apart
        raise VatError(
            f"SentEval data folder {shown_path(data_dir)} does not exist (expected SentEval's "
            f"data/downstream layout, e.g. {shown_path(data_dir / LAYOUT[task])}; the default "
            "is $VAT_SENTEVAL_DIR; scripts/get_senteval_data.sh in the vat source repository "
            "fetches it)"
        )
