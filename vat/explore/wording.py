"""Which words changed: the marks `vat explore` puts on resamples, samples and paths.

Words are whitespace-separated, as the page shows them. A word of a decoding is "changed"
when it lies outside the longest matching blocks of words between it and a reference
(difflib's Ratcliff/Obershelp matching: the same alignment `diff` users read), so an insertion
marks only the inserted words and a shifted word is not marked twice.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import NamedTuple


class MarkedText(NamedTuple):
    """A decoding with each of its words marked True where it differs from a reference."""

    text: str
    words: tuple[tuple[str, bool], ...]
    dropped: int = 0
    """Reference words not matched here (replaced or deleted: a deletion has no word to mark)."""

    @property
    def changed(self) -> list[str]:
        """The marked words, in order."""
        return [w for w, marked in self.words if marked]

    @property
    def same(self) -> bool:
        """True when no word is marked and no reference word was dropped."""
        return not self.changed and not self.dropped


def mark_changes(reference: str, text: str) -> MarkedText:
    """`text`'s words, each marked where it is not matched in `reference`."""
    ref, out = reference.split(), text.split()
    matcher = difflib.SequenceMatcher(a=ref, b=out, autojunk=False)
    kept = [False] * len(out)
    matched = 0
    for block in matcher.get_matching_blocks():
        matched += block.size
        for j in range(block.b, block.b + block.size):
            kept[j] = True
    words = tuple((w, not k) for w, k in zip(out, kept))
    return MarkedText(text, words, len(ref) - matched)


def path_changes(texts: Sequence[str]) -> list[tuple[MarkedText, bool]]:
    """An interpolation path's decodings, each marked against the wording before it, and
    True where that wording first appears on the path (the first decoding always does)."""
    out: list[tuple[MarkedText, bool]] = []
    seen: set[str] = set()
    for i, text in enumerate(texts):
        previous = texts[i - 1] if i else text
        out.append((mark_changes(previous, text), text not in seen))
        seen.add(text)
    return out
