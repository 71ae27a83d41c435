"""SentEval's task names and groups, and `load_task`, which reads SentEval's files as SentEval
(5d6dc11) does: whitespace tokens, Latin-1 where it uses it, its length-sorted sample order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vat.errors import OptionError, VatError, check_sentences, did_you_mean, shown_path
from vat.eval.tasks.classification import BINARY_FILES, load_binary, load_mrpc, load_sst, load_trec
from vat.eval.tasks.files import LAYOUT, STS_SUBSETS, TaskData
from vat.eval.tasks.files import Pairs as Pairs
from vat.eval.tasks.sts import load_sick, load_sts, load_stsb

STS_TASKS = list(STS_SUBSETS)
RELATEDNESS_TASKS = ["STSBenchmark", "SICKRelatedness"]
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "SST5", "TREC", "MRPC", "SICKEntailment"]
ALL_TASKS = STS_TASKS + RELATEDNESS_TASKS + TRANSFER_TASKS
TASK_GROUPS: dict[str, list[str]] = {
    "sts": STS_TASKS + RELATEDNESS_TASKS,
    "transfer": TRANSFER_TASKS,
    "all": ALL_TASKS,
}

# the names tables print; `--tasks` takes either name, in any case
TABLE_NAMES: dict[str, str] = {
    "STSBenchmark": "STS-B",
    "SICKRelatedness": "SICK-R",
    "SICKEntailment": "SICK-E",
}
_BY_LOWER: dict[str, str] = {
    **{t.lower(): t for t in ALL_TASKS},
    **{label.lower(): t for t, label in TABLE_NAMES.items()},
}

# a task whose folder is absent is left out of a group; one with missing files is an error
TASK_FOLDERS = {t: layout.split(" ")[0].rsplit("/", 1)[0] for t, layout in LAYOUT.items()}


def task_name(name: str) -> str:
    """The SentEval name of one task given in any case or as tables print it ('sts-b')."""
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
    """(task, named on its own) pairs of 'sts,MR' in order, without duplicates."""
    # a list of names; 3 or None is no list
    names = spec.split(",") if isinstance(spec, str) else check_sentences(spec, "tasks")[0]
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
    """'sts,MR' -> ['STS12', ..., 'SICKRelatedness', 'MR']: groups expanded, order kept."""
    return [t for t, _ in _parse(spec)]


@dataclass(frozen=True)
class TaskChoice:
    """The tasks a spec such as 'sts,MR' runs under one data dir: a group's members whose folder
    is absent are left out (`absent`); a task named on its own runs even so (`named_absent`)."""

    tasks: list[str]
    absent: list[str]
    named_absent: list[str]


def choose_tasks(spec: str | list[str], data_dir: str | Path) -> TaskChoice:
    """Expand `spec` (`expand_tasks`) and split it by what `data_dir` holds."""
    parsed = _parse(spec)
    _need_data_dir(data_dir, parsed[0][0])
    missing = {t for t, _ in parsed if not (Path(data_dir) / TASK_FOLDERS[t]).is_dir()}
    absent = [t for t, named in parsed if not named and t in missing]
    named_absent = [t for t, named in parsed if named and t in missing]
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
