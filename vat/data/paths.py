"""Where the SentEval data/downstream folder is when a command is not told."""

from __future__ import annotations

import os
from pathlib import Path

SENTEVAL_ENV = "VAT_SENTEVAL_DIR"
SENTEVAL_DEFAULT = Path("..", "shared", "data", "senteval")


def default_senteval_dir() -> Path:
    """$VAT_SENTEVAL_DIR, else ../shared/data/senteval (relative to the working directory)."""
    return Path(os.environ.get(SENTEVAL_ENV) or SENTEVAL_DEFAULT).expanduser()
