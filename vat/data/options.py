"""Checks of the data options (`VATDataModule`'s arguments): one-line errors naming the option."""

from __future__ import annotations

import os

import numpy as np

from vat.errors import VatError
from vat.tokenizer import SPECIAL_TOKENS


def validate_data_options(args: dict) -> None:
    """Check every data option at construction; the message names the option."""

    def fail(name: str, expected: str) -> None:
        raise VatError(f"data.{name} must be {expected}, got {args[name]!r}")

    def is_int(v) -> bool:
        return isinstance(v, int | np.integer) and not isinstance(v, bool)

    if not args["train_files"] and not args["hf_dataset"]:
        raise VatError(
            "data: set data.train_files (text files) or data.hf_dataset (a datasets hub name)"
        )
    for name in ("train_files", "val_files", "test_files"):
        v = args[name]
        if v is not None and (isinstance(v, str) or not all(isinstance(p, str) and p for p in v)):
            fail(name, "a list of file paths or globs")
    minimum = {
        "vocab_size": len(SPECIAL_TOKENS) + 1,
        "tokenizer_train_lines": 1,
        "max_len": 2,
        "batch_size": 1,
        "pool_batches": 1,
        "num_workers": 0,
        "num_proc": 1,
    }
    for name, low in minimum.items():
        if not is_int(args[name]) or args[name] < low:
            fail(name, f"an integer >= {low}")
    if not is_int(args["seed"]):
        fail("seed", "an integer")
    v = args["max_train_lines"]
    if v is not None and (not is_int(v) or v < 1):
        fail("max_train_lines", "an integer >= 1 or null")
    v = args["max_tokens"]
    if v is not None and (not is_int(v) or v < args["max_len"]):
        fail(
            "max_tokens",
            f"null or an integer >= data.max_len ({args['max_len']}), so the longest sentence fits",
        )
    v = args["val_fraction"]
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v < 1.0:
        fail("val_fraction", "a number in [0, 1)")
    if args["overlength"] not in ("truncate", "filter"):
        fail("overlength", "'truncate' or 'filter'")
    if args["on_bad_bytes"] not in ("skip", "error"):
        fail("on_bad_bytes", "'skip' or 'error'")
    if not isinstance(args["cache_dir"], str | os.PathLike) or not str(args["cache_dir"]):
        fail("cache_dir", "a folder path")
    if not isinstance(args["progress"], bool):
        fail("progress", "true or false")
    for name in ("hf_text_field", "hf_train_split"):
        if not isinstance(args[name], str) or not args[name]:
            fail(name, "a non-empty string")
