"""Latent-space geometry metrics and a projector snapshot during training, on a probe set."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_warn

from vat.callbacks.base import EveryNValidations, tensorboard_writer
from vat.data.paths import default_senteval_dir
from vat.errors import VatError
from vat.features import token_posteriors, token_vectors
from vat.geometry.metrics import covariance_eigenvalues, geometry_report
from vat.geometry.plots import figure_to_array, geometry_figures
from vat.geometry.probes import load_probe_sentences
from vat.tokenizer import VATTokenizer


def projector_label(text: str) -> str:
    """A token's text as one TSV cell; blank text shown as repr."""
    label = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    label = label.replace("\r", "\\r")
    return label if label.strip() else repr(text)


class _ProbeCallback(EveryNValidations):
    """Reads its probe set at setup, so that a bad path fails before training."""

    def __init__(
        self,
        every_n_validations: int,
        probe_file: str | None,
        senteval_dir: str | None,
        max_sentences: int | None,
    ) -> None:
        super().__init__(every_n_validations)
        self.probe_file, self.senteval_dir = probe_file, senteval_dir
        self.max_sentences = max_sentences
        self.sentences: list[str] = []

    def _state_key_fields(self) -> dict[str, Any]:
        return {**super()._state_key_fields(), "probe": self.probe_file or self.senteval_dir}

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.sentences:
            return
        senteval = self.senteval_dir
        if self.probe_file is None and senteval is None:
            senteval = default_senteval_dir()
        try:
            self.sentences = load_probe_sentences(self.probe_file, senteval, self.max_sentences)
        except (ValueError, FileNotFoundError) as e:
            raise VatError(
                f"{type(self).__name__}: cannot read the probe set ({e}); "
                "set init_args.probe_file or init_args.senteval_dir"
            ) from None


class GeometryMetrics(_ProbeCallback):
    """Log the probe's `geometry/*` metrics, histograms and `vat geometry --plot-dir` figures."""

    def __init__(
        self,
        every_n_validations: int = 1,
        probe_file: str | None = None,
        senteval_dir: str | None = None,
        max_sentences: int | None = None,
        min_count: int = 5,
        batch_size: int = 128,
    ) -> None:
        """
        Args:
            every_n_validations: Run after every n-th validation run.
            probe_file: Text file of probe sentences (one a line; tab-separated fields split).
            senteval_dir: SentEval folder whose STS12 sentences are the probe (the paper's);
                default when neither is given: $VAT_SENTEVAL_DIR or ../shared/data/senteval.
            max_sentences: Use only the first n probe sentences (None: all).
            min_count: Occurrences a token type needs to count in self-similarity.
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations, probe_file, senteval_dir, max_sentences)
        self.min_count, self.batch_size = min_count, batch_size
        self._plots_warned = False

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        start = time.perf_counter()
        mu, logvar, token_ids, sentence_ids = token_posteriors(
            pl_module.model, pl_module.tokenizer, self.sentences, self.batch_size
        )  # on the model's device, so geometry_report runs there too
        prior_std = float(pl_module.prior_std)
        try:
            report = geometry_report(
                mu, token_ids, sentence_ids, logvar, prior_std, min_count=self.min_count
            )
        except ValueError as e:
            rank_zero_warn(f"GeometryMetrics: skipped at step {trainer.global_step}: {e}")
            return
        scalars = {**report.metrics(), "seconds": time.perf_counter() - start}
        for name, value in scalars.items():
            pl_module.log(
                f"geometry/{name}", value, rank_zero_only=True, on_step=False, on_epoch=True
            )
        writer = tensorboard_writer(trainer)
        if writer is not None:
            step = trainer.global_step
            writer.add_histogram("geometry/kl_per_dim", np.asarray(report.kl_per_dim), step)
            writer.add_histogram(
                "geometry/mu_variance_per_dim", np.asarray(report.active_unit_variances), step
            )
            self._log_figures(writer, mu, report, step)

    def _log_figures(self, writer: Any, mu: torch.Tensor, report: Any, step: int) -> None:
        try:
            figures = geometry_figures(
                covariance_eigenvalues(mu), report.kl_per_dim, report.active_unit_variances
            )
        except VatError as e:  # matplotlib is missing (vat.io.figure_class says which extra)
            if not self._plots_warned:
                rank_zero_warn(
                    "GeometryMetrics: the TensorBoard images geometry/plots/{spectrum,"
                    f"kl_per_dim,active_units}} are skipped ({e}); the geometry/* scalars "
                    "and histograms are still logged"
                )
                self._plots_warned = True
            return
        for name, fig in figures.items():
            writer.add_image(
                f"geometry/plots/{name}", figure_to_array(fig), step, dataformats="HWC"
            )


class LatentProjector(_ProbeCallback):
    """Snapshot the probe's first `max_tokens` token mu vectors into TensorBoard's projector."""

    def __init__(
        self,
        every_n_validations: int = 1,
        probe_file: str | None = None,
        senteval_dir: str | None = None,
        max_tokens: int = 2000,
        batch_size: int = 128,
    ) -> None:
        """
        Args:
            every_n_validations: Run after every n-th validation run.
            probe_file: Text file of probe sentences (one a line; tab-separated fields split).
            senteval_dir: SentEval folder whose STS12 sentences are the probe.
            max_tokens: Most token vectors per snapshot (the projector slows beyond ~10k).
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations, probe_file, senteval_dir, None)
        if max_tokens < 1:
            raise VatError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens, self.batch_size = max_tokens, batch_size
        self._warned = False

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            if not self._warned:
                rank_zero_warn(
                    "LatentProjector needs a TensorBoardLogger; no projector snapshot is written"
                )
                self._warned = True
            return
        tokenizer: VATTokenizer = pl_module.tokenizer
        lengths = np.cumsum([len(x) for x in tokenizer.encode_batch(self.sentences)])
        enough = int(np.searchsorted(lengths, self.max_tokens)) + 1  # to fill max_tokens
        tv = token_vectors(pl_module.model, tokenizer, self.sentences[:enough], self.batch_size)
        keep = slice(0, self.max_tokens)
        labels = [
            [projector_label(tokenizer.token_text(int(t))), str(int(s))]
            for t, s in zip(tv.token_ids[keep], tv.sentence_ids[keep])
        ]
        writer.add_embedding(
            torch.from_numpy(tv.vectors[keep]),
            metadata=labels,
            metadata_header=["token", "sentence"],
            tag="geometry/token_mu",
            global_step=trainer.global_step,
        )
