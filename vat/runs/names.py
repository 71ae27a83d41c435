"""The names a training run writes into its folder, in a module of their own (no Lightning,
no torch) so that tools that only look at run folders, like the GPU suite deciding whether a
run folder holds only what it may remove, read the one list vat keeps."""

from __future__ import annotations

import re

RUN_FILE_PATTERNS = (
    r"checkpoints",
    r"events\.out\.tfevents\..*",  # the TensorBoard logger's
    r"config\.yaml",
    r"config-resume-\d+\.yaml",
    r"hparams\.yaml",
    r"tokenizer\.json",
    r"projector_config\.pbtxt",
    r"time_split\.json",  # vat.callbacks.time_split
    r"compile_cache\.(bin|json)",  # vat.train.compile_cache
    r"\d{5,}",
)
"""What a run writes into its directory (the TensorBoard logger's and vat's own files)."""

RUN_FILE_RES = [re.compile(p) for p in RUN_FILE_PATTERNS]
