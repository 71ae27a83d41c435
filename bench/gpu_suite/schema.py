"""Reading a record of the report from JSON and writing it back, checked from its type.

The report's records are dataclasses (records.py); their field types are the schema. A report
is read back by the next call on the same OUT_DIR, and by `--seed` on a fresh machine, and
every stage then reads its fields as the suite wrote them: a field broken since (by hand, by a
tool, by a partial copy) would stop a call mid-way with an AttributeError or TypeError, or
render NaN seconds and negative step counts as if measured. So `read` checks every field
against its type before any stage runs, and the first broken one is one line naming the
field's path in the report (`report.reference.launches[0].seconds`).

What a field's type says:

- a field without a default is a key every report has; one with a default may be missing (a
  report written by an earlier call, before a stage added it) and is written from then on;
- `absent()`: a key the suite writes only sometimes (a run's `eval` once it is evaluated):
  None in the record is the key left out of the JSON;
- `int`: a whole number; `float`: a finite number (JSON allows NaN and Infinity, the suite
  never writes them), each within its `Range` when annotated with one; `bool`, `str`,
  `Literal[...]` (one of those strings), `Matches` (a string of that pattern), `X | None`,
  `list[X]` (`NonEmpty`: at least one), `dict[str, X]` (keys that are names: runs, stages),
  `Any` (not checked), and a nested record.

What a type cannot say (a finished variant has its result; a reference with steps says why)
each record's `broken()` says. Keys a record does not declare (a newer suite's, or those of a
tool's own output, like bench_train_side_by_side.py's) are kept as read and written back."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints


class Broken(Exception):
    """`field` (its path in the report) is not `expected`."""

    def __init__(self, field: str, expected: str) -> None:
        super().__init__(f"'{field}' must be {expected}")
        self.field, self.expected = field, expected


@dataclass(frozen=True)
class Range:
    """A number at least `low` (above it when `strict`) and at most `high`."""

    low: float | None = None
    high: float | None = None
    strict: bool = False

    def holds(self, x: float) -> bool:
        if self.low is not None and not (x > self.low if self.strict else x >= self.low):
            return False
        return self.high is None or x <= self.high

    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return f" in [{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f" {'>' if self.strict else '>='} {self.low:g}"
        return ""


@dataclass(frozen=True)
class Matches:
    """A string the whole of which `pattern` matches; `what` says it."""

    pattern: re.Pattern[str]
    what: str


@dataclass(frozen=True)
class NonEmpty:
    """A list with at least one item."""


_ABSENT = "absent_when_none"


def absent() -> Any:
    """A field whose key the suite writes only sometimes: None is the key left out."""
    return field(default=None, metadata={_ABSENT: True})


@dataclass(kw_only=True)
class Record:
    """A record of the report: its declared fields, and the keys it does not declare."""

    other_keys: dict[str, Any] = field(default_factory=dict, repr=False)
    """Keys read that the record does not declare, written back as they were."""

    def broken(self) -> tuple[str, str] | None:
        """What the field types cannot say: (the field, what it must be) when it is not."""
        return None


R = TypeVar("R", bound=Record)


@functools.cache
def _fields(cls: type[Record]) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = get_type_hints(cls, include_extras=True)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls) if f.name != "other_keys")


def read(tp: Any, value: Any, where: str) -> Any:
    """`value` (parsed JSON) as type `tp`, every field checked; Broken names `where`."""
    marks: list[Any] = []
    while get_origin(tp) is Annotated:
        tp, *more = get_args(tp)
        marks += more
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(tp):
            return None
        inner = _without_none(tp)
        return read(Annotated[(inner, *marks)] if marks else inner, value, where)
    if isinstance(tp, type) and issubclass(tp, Record):
        return _read_record(tp, value, where)
    if origin is Literal:
        if not isinstance(value, str) or value not in get_args(tp):
            raise Broken(where, f"one of {', '.join(get_args(tp))}")
        return value
    if origin is list:
        nonempty = any(isinstance(m, NonEmpty) for m in marks)
        if not isinstance(value, list) or (nonempty and not value):
            raise Broken(where, "a non-empty list" if nonempty else "a list")
        (item,) = get_args(tp)
        return [read(item, x, f"{where}[{i}]") for i, x in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise Broken(where, "an object")
        _, item = get_args(tp)
        return {k: read(item, x, f"{where}.{k}") for k, x in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise Broken(where, "true or false")
        return value
    if tp is str:
        pattern = next((m for m in marks if isinstance(m, Matches)), None)
        if pattern and not (isinstance(value, str) and pattern.pattern.fullmatch(value)):
            raise Broken(where, pattern.what)
        if not isinstance(value, str):
            raise Broken(where, "a string")
        return value
    if tp in (int, float):
        rng = next((m for m in marks if isinstance(m, Range)), Range())
        kinds = int if tp is int else (int, float)
        ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
        if not (ok and rng.holds(value)):
            what = "a whole number" if tp is int else "a finite number"
            raise Broken(where, what + rng.text())
        return value
    raise TypeError(f"{where}: no reader for {tp!r}")  # a record declared with a new kind


def _read_record(cls: type[R], value: Any, where: str) -> R:
    if not isinstance(value, dict):
        raise Broken(where, "an object")
    given: dict[str, Any] = {}
    for f, tp in _fields(cls):
        has_default = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        if f.name not in value:
            if not has_default:
                raise Broken(f"{where}.{f.name}", "present")
            continue
        if f.metadata.get(_ABSENT):  # its key left out is None: a null is not one
            tp = _without_none(tp)
        given[f.name] = read(tp, value[f.name], f"{where}.{f.name}")
    known = {f.name for f, _ in _fields(cls)}
    record = cls(**given, other_keys={k: v for k, v in value.items() if k not in known})
    broken = record.broken()
    if broken is not None:
        raise Broken(f"{where}.{broken[0]}", broken[1])
    return record


def _without_none(tp: Any) -> Any:
    if get_origin(tp) not in (Union, types.UnionType):
        return tp
    (inner,) = [a for a in get_args(tp) if a is not type(None)]
    return inner


def write(value: Any) -> Any:
    """A record (or a list, dict or value holding records) as JSON: declared fields in their
    order (an `absent()` field that is None left out), then the undeclared keys."""
    if isinstance(value, Record):
        out = {}
        for f, _ in _fields(type(value)):
            x = getattr(value, f.name)
            if x is None and f.metadata.get(_ABSENT):
                continue
            out[f.name] = write(x)
        return {**out, **value.other_keys}
    if isinstance(value, list | tuple):
        return [write(x) for x in value]
    if isinstance(value, dict):
        return {k: write(x) for k, x in value.items()}
    return value
