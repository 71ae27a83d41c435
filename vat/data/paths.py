"""Where the SentEval data/downstream folder is when a command is not told (`vat evaluate`,
`vat score`'s STS-B pairs, the geometry probes, `vat export --evaluate`)."""

from __future__ import annotations

import os
from pathlib import Path

SENTEVAL_ENV = "VAT_SENTEVAL_DIR"
"""The one environment variable naming the SentEval data/downstream folder."""
SENTEVAL_DEFAULT = Path("..", "shared", "data", "senteval")
"""The folder used when $VAT_SENTEVAL_DIR is unset, relative to the working directory."""


def default_senteval_dir() -> Path:
    """$VAT_SENTEVAL_DIR, else ../shared/data/senteval (relative to the working directory)."""
    return Path(os.environ.get(SENTEVAL_ENV) or SENTEVAL_DEFAULT).expanduser()
