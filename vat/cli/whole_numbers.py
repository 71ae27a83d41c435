"""`vat train` reads `--trainer.limit_val_batches 8` as 8 batches, not 8.0: typing caches
`Union[int, float] == Union[float, int]` in whichever order was built first, and jsonargparse
tries a union's types in that order."""

from __future__ import annotations

import types
import typing
from typing import Any, Union


def int_before_float(typehint: Any) -> Any:
    """`typehint` with int moved before float in a union holding both, else the same object
    (rebuilt from a tuple, the key of typing's cache, which keeps this order)."""
    origin = typing.get_origin(typehint)
    if origin is not Union and origin is not types.UnionType:
        return typehint
    args = typing.get_args(typehint)
    if int not in args or float not in args or args.index(int) < args.index(float):
        return typehint
    reordered = [a for a in args if a is not int]
    reordered.insert(reordered.index(float), int)
    return Union[tuple(reordered)]  # noqa: UP007 (typing.Union, as Lightning declares it)


def read_whole_numbers_as_int(parser) -> None:
    """`int_before_float` on every typed argument of a jsonargparse parser (its private
    `_typehint`, the one place the order lives; tests/test_whole_numbers.py guards it)."""
    for action in parser._actions:
        hint = getattr(action, "_typehint", None)
        if hint is not None:
            action._typehint = int_before_float(hint)
