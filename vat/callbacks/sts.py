"""Select checkpoints on sentence similarity: `val/stsb_spearman` at every validation.

    trainer:
      callbacks:
        - class_path: vat.callbacks.sts.STSBSpearman
          init_args: {senteval_dir: ../shared/data/senteval}
        - class_path: lightning.pytorch.callbacks.ModelCheckpoint
          init_args: {monitor: val/stsb_spearman, mode: max, filename: best-stsb}

`val/stsb_spearman` is the Spearman correlation (x1, in [-1, 1]) between the cosine of the
two sentence vectors and the gold score on the STS-B dev split, with the harness's own loader
and scoring: the number `vat evaluate --tasks STSBenchmark` reports as
`STSBenchmark-cosine.dev.spearman` for the same weights. `val/stsb_seconds` is the time it
took (docs/evaluate.md). It runs on every rank and is averaged over ranks, so that a
ModelCheckpoint monitoring it takes the same decision on all ranks under DDP.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from lightning.pytorch import LightningModule, Trainer

from vat.callbacks.base import EveryNValidations
from vat.data.paths import default_senteval_dir
from vat.errors import VatError
from vat.eval.engine import cosine_correlations
from vat.eval.tasks.registry import Pairs, load_task
from vat.features import POOLINGS, Pooling, sentence_features

METRIC = "val/stsb_spearman"


class STSBSpearman(EveryNValidations):
    """Log `val/stsb_spearman` (and `val/stsb_seconds`) at validation runs 1, 1 + n, 1 + 2n, ..."""

    starts_at_first_validation = True
    rank_zero_only = False  # every rank scores and the value is synced (see the module doc)

    def __init__(
        self,
        senteval_dir: str | None = None,
        every_n_validations: int = 1,
        pooling: Pooling = "mean",
        batch_size: int = 128,
    ) -> None:
        """
        Args:
            senteval_dir: SentEval data/downstream folder holding STS/STSBenchmark/sts-dev.csv.
                Default: $VAT_SENTEVAL_DIR (../shared/data/senteval).
            every_n_validations: Score at the first validation run and every n-th after it.
                With n > 1 a ModelCheckpoint monitoring the metric sees the last computed
                value at the validations in between (a tie, so save_top_k=1 keeps the
                checkpoint where it was measured); keep n = 1 when selecting on it.
            pooling: mean (the paper's VAT-mean; the default), sum, start or precision.
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations)
        if pooling not in POOLINGS:
            raise VatError(
                f"STSBSpearman: pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}"
            )
        if batch_size < 1:
            raise VatError(f"STSBSpearman: batch_size must be >= 1, got {batch_size}")
        self.senteval_dir = senteval_dir
        self.pooling = pooling
        self.batch_size = batch_size
        self.pairs: Pairs | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Read the dev split now, so a missing or broken file fails before training."""
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
    """Spearman (x1) of pooled-mu cosines against gold on `pairs`, by the harness's scoring;
    NaN (constant cosines: a collapsed encoder) is the worst value to a ModelCheckpoint."""

    def encode(sentences: list[str]) -> np.ndarray:
        return sentence_features(
            model, tokenizer, sentences, pooling=pooling, batch_size=batch_size
        )

    scores = cosine_correlations(encode, pairs, batch_size, name="STSBenchmark dev")
    return float(scores["spearman"])
