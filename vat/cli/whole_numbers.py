"""`vat train` reads a whole number as the int the user wrote, whatever was imported first.

Lightning declares `limit_val_batches: Optional[Union[int, float]]` (also limit_train/test/
predict_batches and gradient_clip_val): an int counts batches, a float is a fraction of the
epoch. jsonargparse tries a union's types in the order of its `__args__`, but typing caches
unions and `Union[int, float] == Union[float, int]`, so that order is whichever spelling was
built first, which depends on what was imported and evicted (lightning_fabric builds it
float-first, and then `8` is read as `8.0` and refused). So once the parser is built, every
union holding both tries int first: `8` stays batches and `0.5` or `1.0` a fraction, as
Lightning documents.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Union


def int_before_float(typehint: Any) -> Any:
    """`typehint` with int moved before float when it is a union holding both, float first;
    any other type hint unchanged (the same object).

    The union is rebuilt from its flat subtypes: typing's cache is keyed on that tuple, and
    tuples of plain types compare in order, so the result keeps the order given here."""
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
    """Apply `int_before_float` to every typed argument of a jsonargparse parser (built by
    LightningCLI).

    jsonargparse keeps an argument's type on its action as `_typehint` (private, but the one
    place the order lives; tests/test_whole_numbers.py parses through it in a subprocess that
    imports what a plain install imports, so a change in jsonargparse fails a test)."""
    for action in parser._actions:
        hint = getattr(action, "_typehint", None)
        if hint is not None:
            action._typehint = int_before_float(hint)
