"""`val/stsb_spearman`: the STS-B dev Spearman `vat evaluate --tasks STSBenchmark` reports,
synced over ranks so checkpoint selection agrees under DDP."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule, Trainer

from vat.callbacks.base import EveryNValidations
from vat.data.paths import default_senteval_dir
from vat.errors import VatError, check
from vat.eval.engine import cosine_correlations
from vat.eval.tasks.registry import Pairs, load_task
from vat.features import POOLINGS, Pooling, sentence_features

METRIC = "val/stsb_spearman"


class STSBSpearman(EveryNValidations):
    """Log `val/stsb_spearman` and `val/stsb_seconds` at validation runs 1, 1 + n, ..."""

    starts_at_first_validation = True
    rank_zero_only = False  # every rank scores and the value is synced

    def __init__(
        self,
        senteval_dir: str | None = None,
        every_n_validations: int = 1,
        pooling: Pooling = "mean",
        batch_size: int = 128,
    ) -> None:
        """
        Args:
            senteval_dir: SentEval data/downstream folder (default: $VAT_SENTEVAL_DIR).
            every_n_validations: Score at the first validation run and every n-th after it
                (keep 1 when a ModelCheckpoint selects on it: in between it sees a stale tie).
            pooling: mean (the paper's VAT-mean; the default), sum, start or precision.
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations)
        check(
            pooling in POOLINGS, "STSBSpearman: pooling", f"one of {', '.join(POOLINGS)}", pooling
        )
        if batch_size < 1:
            raise VatError(f"STSBSpearman: batch_size must be >= 1, got {batch_size}")
        self.senteval_dir, self.pooling, self.batch_size = senteval_dir, pooling, batch_size
        self.pairs: Pairs | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # read now: a missing or broken file fails before training
        if self.pairs is not None:
            return
        if self.senteval_dir is None:
            self.senteval_dir = str(default_senteval_dir())
        self.pairs = load_task(Path(self.senteval_dir), "STSBenchmark").splits["dev"]

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        start = time.perf_counter()
        spearman = stsb_dev_spearman(
            pl_module.model, pl_module.tokenizer, self.pairs, self.pooling, self.batch_size
        )
        # sync_dist: GPU kernels may differ in the last bits, and the ranks must agree
        pl_module.log(METRIC, spearman, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        pl_module.log("val/stsb_seconds", time.perf_counter() - start, on_step=False, on_epoch=True)

    def _state_key_fields(self) -> dict[str, Any]:
        return {"pooling": self.pooling, "every_n_validations": self.every_n_validations}


def stsb_dev_spearman(
    model, tokenizer, pairs: Pairs, pooling: Pooling = "mean", batch_size: int = 128
) -> float:
    """Spearman of pooled-mu cosines against gold on `pairs` (NaN for a collapsed encoder)."""
    encode = partial(sentence_features, model, tokenizer, pooling=pooling, batch_size=batch_size)
    scores = cosine_correlations(encode, pairs, batch_size, name="STSBenchmark dev")
    return float(scores["spearman"])
