"""A fast digest of a file's bytes, which the tokenized cache is keyed on: size and mtime
would miss edits that keep both (`touch -r`, a checkout). Within one process a file is
hashed once, remembered under its inode, size, mtime and ctime (an edit always changes the
ctime). Its cost: BENCHMARKS.md, "The tokenized cache keyed on content".
"""

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
