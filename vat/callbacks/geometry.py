"""Watch the latent space during training: geometry metrics, a projector snapshot, reconstructions.

Three independent callbacks; list any of them under `trainer.callbacks` to switch it on:

    trainer:
      callbacks:
        - class_path: vat.callbacks.GeometryMetrics      # geometry/* scalars + KL histogram
          init_args: {senteval_dir: ../shared/data/senteval, every_n_validations: 1}
        - class_path: vat.callbacks.LatentProjector      # token mu vectors in the projector
          init_args: {senteval_dir: ../shared/data/senteval, max_tokens: 2000}
        - class_path: vat.callbacks.ReconstructionText   # greedy mu-decoding as text
          init_args: {senteval_dir: ../shared/data/senteval, num_sentences: 8}

Each runs after every `every_n_validations`-th validation run (the sanity check does not count),
on global rank zero only, under no_grad, and puts the model back in the train/eval mode it
found. It encodes a fixed probe set with the run's tokenizer and uses the posterior means mu
(no sampling). They need only `pl_module.model`, `.tokenizer` and `.prior_std`. Images,
histograms and text go to the first TensorBoardLogger; without one they warn once and log
only scalars (GeometryMetrics) or nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn

from vat.encode import token_posteriors, token_vectors
from vat.errors import VatError
from vat.geometry import default_senteval_dir, geometry_report, load_probe_sentences
from vat.model import VAT
from vat.tokenizer import VATTokenizer, make_batch

# Scalars logged under geometry/ (GeometryReport field names).
LOGGED_METRICS = (
    "anisotropy", "self_similarity", "self_similarity_adjusted", "intra_sentence_similarity",
    "intra_sentence_similarity_adjusted", "isoscore", "effective_rank", "active_units",
    "kl_per_token", "mutual_information",
)


def tensorboard_writer(trainer: Trainer) -> Any | None:
    """The SummaryWriter of the trainer's first TensorBoardLogger, or None."""
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def projector_label(text: str) -> str:
    """A token's text as one TSV cell: tabs/newlines escaped, blank text shown as repr."""
    label = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return label if label.strip() else repr(text)


@torch.no_grad()
def greedy_reconstruct(model: VAT, tokenizer: VATTokenizer, sentences: Sequence[str], max_new_tokens: int | None = None) -> list[str]:
    """Decode each sentence from its posterior means Z = mu, greedily (vat.generate's
    cached greedy decoder). Stops at </s> or after max_new_tokens (default: max_len)."""
    from vat.generate import greedy_decode

    device = next(model.parameters()).device
    max_len = model.config.max_len
    ids = [s[: max_len - 1] for s in tokenizer.encode_batch(list(sentences))]
    mu, _, mask = model.encode(make_batch(ids)["src"].to(device))  # (B, T, d), (B, T)
    generated = greedy_decode(model, mu, mask, min(max_new_tokens or max_len, max_len))
    return [tokenizer.decode(g) for g in generated]


def probe_posteriors(
    model: VAT, tokenizer: VATTokenizer, sentences: Sequence[str], batch_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """mu (N, d), logvar (N, d) on the model's device, token ids (N,) and sentence ids (N,):
    `vat.encode.token_posteriors`, kept on the device so `geometry_report` runs there too."""
    return token_posteriors(model, tokenizer, sentences, batch_size)


class _EveryNValidationRuns(Callback):
    """Runs `_run` after every n-th validation run, on rank zero, under no_grad, in eval mode."""

    def __init__(self, every_n_validations: int) -> None:
        if every_n_validations < 1:
            raise VatError(f"every_n_validations must be >= 1, got {every_n_validations}")
        self.every_n_validations = every_n_validations
        self.val_runs = 0

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.val_runs += 1
        if self.val_runs % self.every_n_validations or not trainer.is_global_zero:
            return
        if getattr(pl_module, "tokenizer", None) is None:
            rank_zero_warn(f"{type(self).__name__}: pl_module.tokenizer is not set; skipping")
            return
        model: VAT = pl_module.model
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                self._run(trainer, pl_module)
        finally:
            model.train(was_training)

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        raise NotImplementedError

    @property
    def state_key(self) -> str:
        # Two instances of one class (say, two probes) keep separate counters in a checkpoint.
        return self._generate_state_key(every_n_validations=self.every_n_validations,
                                        probe=getattr(self, "probe_file", None) or getattr(self, "senteval_dir", None))

    def state_dict(self) -> dict[str, Any]:
        return {"val_runs": self.val_runs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.val_runs = int(state_dict.get("val_runs", 0))


class _ProbeCallback(_EveryNValidationRuns):
    """A callback that reads a probe set once, at setup (so a bad path fails before training)."""

    def __init__(
        self, every_n_validations: int, probe_file: str | None, senteval_dir: str | None, max_sentences: int | None
    ) -> None:
        super().__init__(every_n_validations)
        self.probe_file = probe_file
        self.senteval_dir = senteval_dir
        self.max_sentences = max_sentences
        self.sentences: list[str] = []

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.sentences:
            return
        senteval = self.senteval_dir
        if self.probe_file is None and senteval is None:
            senteval = str(default_senteval_dir())
        try:
            self.sentences = load_probe_sentences(self.probe_file, senteval, self.max_sentences)
        except (ValueError, FileNotFoundError) as e:
            raise VatError(f"{type(self).__name__}: cannot read the probe set ({e}); "
                           "set init_args.probe_file or init_args.senteval_dir") from None


class GeometryMetrics(_ProbeCallback):
    """Log every `vat.geometry` metric of the probe's token means under `geometry/`.

    Scalars: anisotropy, self- and intra-sentence similarity (unadjusted and adjusted),
    IsoScore, effective rank, active units, KL per token, mutual information, and the
    seconds this took (`geometry/seconds`, encoding included). Histograms (TensorBoard
    only): KL per latent dimension (`geometry/kl_per_dim`) and the variance of mu per
    dimension (`geometry/mu_variance_per_dim`, the active-units statistic). Images
    (TensorBoard, with matplotlib): `geometry/plots/{spectrum,kl_per_dim,active_units}`, the
    figures of `vat.plots` that the geometry CLI writes with --plots.
    """

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
            senteval_dir: SentEval data/downstream folder; its STS12 sentences are the probe
                (the paper's choice). Default when neither is given: $VAT_DATA_DIR/senteval.
            max_sentences: Use only the first n probe sentences (None: all; STS12 has 4,946 distinct).
            min_count: Occurrences a token type needs to count in self-similarity.
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations, probe_file, senteval_dir, max_sentences)
        self.min_count = min_count
        self.batch_size = batch_size

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        start = time.perf_counter()
        mu, logvar, token_ids, sentence_ids = probe_posteriors(pl_module.model, pl_module.tokenizer, self.sentences,
                                                               self.batch_size)
        try:
            report = geometry_report(mu, token_ids, sentence_ids, logvar, float(pl_module.prior_std),
                                     min_count=self.min_count)
        except ValueError as e:
            rank_zero_warn(f"GeometryMetrics: skipped at step {trainer.global_step}: {e}")
            return
        seconds = time.perf_counter() - start
        scalars = {f"geometry/{k}": float(getattr(report, k)) for k in LOGGED_METRICS if getattr(report, k) is not None}
        scalars["geometry/seconds"] = seconds
        for name, value in scalars.items():
            pl_module.log(name, value, rank_zero_only=True, on_step=False, on_epoch=True)
        writer = tensorboard_writer(trainer)
        if writer is not None:
            step = trainer.global_step
            writer.add_histogram("geometry/kl_per_dim", np.asarray(report.kl_per_dim), step)
            writer.add_histogram("geometry/mu_variance_per_dim", np.asarray(report.active_unit_variances), step)
            self._log_figures(writer, mu, report, step)

    @staticmethod
    def _log_figures(writer: Any, mu: torch.Tensor, report: Any, step: int) -> None:
        """The geometry CLI's --plots figures as TensorBoard images (skipped without matplotlib)."""
        from vat.geometry import covariance_eigenvalues
        from vat.plots import figure_to_array, geometry_figures

        try:
            figures = geometry_figures(covariance_eigenvalues(mu), report.kl_per_dim, report.active_unit_variances)
        except VatError:  # matplotlib is missing
            return
        for name, fig in figures.items():
            writer.add_image(f"geometry/plots/{name}", figure_to_array(fig), step, dataformats="HWC")


class LatentProjector(_ProbeCallback):
    """Snapshot token mu vectors into TensorBoard's embedding projector, labelled with their text.

    Takes the first `max_tokens` tokens of the probe, in order; metadata columns are the
    token's text and the index of its sentence. Needs a TensorBoardLogger.
    """

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
            senteval_dir: SentEval folder whose STS12 sentences are the probe (default
                $VAT_DATA_DIR/senteval when neither is given).
            max_tokens: Most token vectors per snapshot (the projector slows beyond ~10k).
            batch_size: Sentences per encoder batch.
        """
        super().__init__(every_n_validations, probe_file, senteval_dir, None)
        if max_tokens < 1:
            raise VatError(f"max_tokens must be >= 1, got {max_tokens}")
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._warned = False

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        writer = tensorboard_writer(trainer)
        if writer is None:
            if not self._warned:
                rank_zero_warn("LatentProjector needs a TensorBoardLogger; no projector snapshot is written")
                self._warned = True
            return
        tokenizer: VATTokenizer = pl_module.tokenizer
        lengths = np.cumsum([len(x) for x in tokenizer.encode_batch(self.sentences)])
        n_sentences = int(np.searchsorted(lengths, self.max_tokens, side="left")) + 1  # enough to fill max_tokens
        tv = token_vectors(pl_module.model, tokenizer, self.sentences[:n_sentences], self.batch_size)
        keep = slice(0, self.max_tokens)
        labels = [[projector_label(tokenizer.token_text(int(t))), str(int(s))]
                  for t, s in zip(tv.token_ids[keep], tv.sentence_ids[keep])]
        writer.add_embedding(torch.from_numpy(tv.vectors[keep]), metadata=labels, metadata_header=["token", "sentence"],
                             tag="geometry/token_mu", global_step=trainer.global_step)


class ReconstructionText(_ProbeCallback):
    """Log greedy mu-decodings of a few fixed sentences as TensorBoard text.

    Tag `reconstructions/greedy_mu`: a markdown table of input and reconstruction; the
    fraction reconstructed exactly is also logged as the scalar `reconstructions/exact_match`.
    """

    def __init__(
        self,
        every_n_validations: int = 1,
        sentences: list[str] | None = None,
        probe_file: str | None = None,
        senteval_dir: str | None = None,
        num_sentences: int = 8,
    ) -> None:
        """
        Args:
            every_n_validations: Run after every n-th validation run.
            sentences: The sentences to reconstruct; if unset, the first `num_sentences` of the probe.
            probe_file: Text file of probe sentences (one a line; tab-separated fields split).
            senteval_dir: SentEval folder whose STS12 sentences are the probe (default
                $VAT_DATA_DIR/senteval when neither `sentences` nor a probe is given).
            num_sentences: How many probe sentences to reconstruct.
        """
        super().__init__(every_n_validations, probe_file, senteval_dir, num_sentences)
        if sentences is not None:
            if not sentences:
                raise VatError("ReconstructionText: sentences must not be empty")
            self.sentences = list(sentences)

    def _run(self, trainer: Trainer, pl_module: LightningModule) -> None:
        outputs = greedy_reconstruct(pl_module.model, pl_module.tokenizer, self.sentences)
        exact = float(np.mean([o.strip() == s.strip() for o, s in zip(outputs, self.sentences)]))
        pl_module.log("reconstructions/exact_match", exact, rank_zero_only=True, on_step=False, on_epoch=True)
        writer = tensorboard_writer(trainer)
        if writer is not None:
            rows = ["| input | greedy mu-decoding |", "|---|---|"]
            rows += [f"| {_md(s)} | {_md(o)} |" for s, o in zip(self.sentences, outputs)]
            writer.add_text("reconstructions/greedy_mu", "\n".join(rows), trainer.global_step)


def _md(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ") or "(empty)"
