"""A digest of a file's bytes for the cache key (size and mtime miss `touch -r` edits),
computed once per process per file state."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_BLOCK = 1 << 20
_memo: dict[tuple, str] = {}


def file_digest(path: str | os.PathLike) -> str:
    """Hex BLAKE2b-128 of the file's bytes (compressed bytes for a .gz: the file as stored)."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _memo:
        h = hashlib.blake2b(digest_size=16)
        with open(p, "rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
        _memo[key] = h.hexdigest()
    return _memo[key]
