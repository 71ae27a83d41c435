"""SentEval's tasks, read from SentEval's own file layout."""

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
