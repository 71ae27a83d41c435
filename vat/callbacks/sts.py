"""Select checkpoints on sentence similarity: `val/stsb_spearman` at every validation.

    trainer:
      callbacks:
        - class_path: vat.callbacks.sts.STSBSpearman
          init_args: {senteval_dir: ../shared/data/senteval}
        - class_path: lightning.pytorch.callbacks.ModelCheckpoint
          init_args: {monitor: val/stsb_spearman, mode: max, filename: best-stsb}

`val/stsb_spearman` is the Spearman correlation (x1, a fraction in [-1, 1], as the harness's
JSON results and the sweep record it; tables show x100) between the cosine of the two
sentence vectors and the gold score on the STS-B dev split (1,500 pairs), with mean pooling
of mu by default. It is the number `vat evaluate --tasks STSBenchmark` reports as
`STSBenchmark-cosine.dev.spearman` for the same weights: the loader
(`vat.eval.tasks.registry`) and the scoring (`vat.eval.engine.cosine_correlations`) are
the harness's own. `val/stsb_seconds` is the time it took.

Cost: the ~2,900 distinct dev sentences are encoded once per validation (encoder only, no
decoder), in length-sorted batches, under no_grad (timings: docs/evaluate.md).

It runs on every rank (each holds the whole model) and is averaged over ranks, so a
ModelCheckpoint that monitors it takes the same decision on all ranks under DDP.
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
        # sync_dist: every rank then holds the same number (GPU kernels may differ in the last
        # bits), so their ModelCheckpoints take the same decision and save together
        pl_module.log(METRIC, spearman, on_step=False, on_epoch=True, prog_bar=True, sync_dist=True)
        pl_module.log("val/stsb_seconds", time.perf_counter() - start, on_step=False, on_epoch=True)

    def _state_key_fields(self) -> dict[str, Any]:
        return {"pooling": self.pooling, "every_n_validations": self.every_n_validations}


def stsb_dev_spearman(
    model, tokenizer, pairs: Pairs, pooling: Pooling = "mean", batch_size: int = 128
) -> float:
    """Spearman (x1) of pooled-mu cosines against gold on `pairs`, by the harness's scoring.
    NaN (constant cosines, e.g. a collapsed encoder) counts as the worst value in a
    ModelCheckpoint (Lightning maps a NaN monitor to -inf for mode max)."""

    def encode(sentences: list[str]) -> np.ndarray:
        return sentence_features(
            model, tokenizer, sentences, pooling=pooling, batch_size=batch_size
        )

    return float(
        cosine_correlations(encode, pairs, batch_size, name="STSBenchmark dev")["spearman"]
    )
