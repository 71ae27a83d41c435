"""SentEval's tasks read from SentEval's own file layout.

- `registry.py`        task names and groups, `expand_tasks`, `choose_tasks`, `load_task`
- `files.py`           the containers (Pairs, Singles, TaskData) and file reading helpers
- `sts.py`             STS12-16, STSBenchmark, SICK
- `classification.py`  MR, CR, SUBJ, MPQA, SST2/5, TREC, MRPC
"""

from vat.eval.tasks.files import Pairs, Singles, TaskData
from vat.eval.tasks.registry import (
    ALL_TASKS,
    RELATEDNESS_TASKS,
    STS_TASKS,
    TASK_GROUPS,
    TRANSFER_TASKS,
    TaskChoice,
    choose_tasks,
    expand_tasks,
    load_task,
)

__all__ = [
    "ALL_TASKS",
    "RELATEDNESS_TASKS",
    "STS_TASKS",
    "TASK_GROUPS",
    "TRANSFER_TASKS",
    "Pairs",
    "Singles",
    "TaskChoice",
    "TaskData",
    "choose_tasks",
    "expand_tasks",
    "load_task",
]
