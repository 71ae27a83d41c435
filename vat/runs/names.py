"""The names a training run writes into its folder (no torch: the GPU suite reads them too)."""

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

RUN_FILE_RES = [re.compile(p) for p in RUN_FILE_PATTERNS]
