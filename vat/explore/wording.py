"""Which words of a decoding changed against a reference: those outside difflib's matching
blocks, so an insertion marks only the inserted words."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import NamedTuple


class MarkedText(NamedTuple):
    """A decoding with each of its words marked True where it differs from a reference."""

    text: str
    words: tuple[tuple[str, bool], ...]
    dropped: int = 0  # reference words not matched (a deletion has no word to mark)

    @property
    def changed(self) -> list[str]:
        return [w for w, marked in self.words if marked]

    @property
    def same(self) -> bool:
        return not self.changed and not self.dropped


def mark_changes(reference: str, text: str) -> MarkedText:
    """`text`'s words, each marked where it is not matched in `reference`."""
    ref, out = reference.split(), text.split()
    blocks = difflib.SequenceMatcher(a=ref, b=out, autojunk=False).get_matching_blocks()
    kept = {j for block in blocks for j in range(block.b, block.b + block.size)}
    words = tuple((w, j not in kept) for j, w in enumerate(out))
    return MarkedText(text, words, len(ref) - sum(block.size for block in blocks))


def path_changes(texts: Sequence[str]) -> list[tuple[MarkedText, bool]]:
    """Each decoding marked against the one before it, and whether its wording is new."""
    return [
        (mark_changes(texts[i - 1] if i else text, text), text not in texts[:i])
        for i, text in enumerate(texts)
    ]
