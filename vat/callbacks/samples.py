"""Reconstruction BLEU and text samples (reconstructions, samples, interpolation) in TensorBoard."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn

from vat.callbacks.base import EveryNValidations, markdown_table, tensorboard_writer
from vat.errors import VatError
from vat.generate.generator import DecodeOptions, VATGenerator, corpus_bleu
from vat.geometry.probes import iter_lines
from vat.tokenizer import VATTokenizer

__all__ = ["SamplesCallback"]


class SamplesCallback(EveryNValidations):
    """Log `val/recon_bleu` (sacrebleu 13a, mu-decoded), `val/recon_exact_match` and text."""

    def __init__(
        self,
        sentences: list[str] | None = None,
        sentences_file: str | None = None,
        num_sentences: int = 32,
        every_n_validations: int = 1,
        num_show: int = 4,
        num_samples: int = 3,
        tau: float = 1.0,
        alphas: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
        beam_size: int = 1,
        max_len: int | None = None,
        seed: int = 0,
    ) -> None:
        """
        Args:
            sentences: The fixed set itself; overrides `sentences_file`.
            sentences_file: Text file whose first non-empty lines are the fixed set; None: the
                first validation sentences.
            num_sentences: Size of the fixed set that `val/recon_bleu` is computed on.
            every_n_validations: Run on every n-th validation run (sanity checks do not count).
            num_show: How many sentences' reconstructions and samples go to the text.
            num_samples: Variational samples per shown sentence.
            tau: Noise scale of the variational samples, z = mu + tau * sigma * eps.
            alphas: Interpolation weights between the first two sentences.
            beam_size: 1 decodes greedily (fast); the paper's figures use 5.
            max_len: Most generated tokens per sentence (None = the model's max_len).
            seed: Seed of the variational samples, so that runs are comparable.
        """
        super().__init__(every_n_validations)
        if num_sentences < 1:
            raise VatError(
                f"SamplesCallback: num_sentences must be at least 1, got {num_sentences}"
            )
        if sentences is not None and not [x for x in sentences if x.strip()]:
            raise VatError("SamplesCallback: sentences must hold at least one non-empty sentence")
        if sentences_file is not None and not Path(sentences_file).is_file():
            raise VatError(f"SamplesCallback: sentences_file {sentences_file} does not exist")
        if sentences is None and sentences_file is not None:
            # read now, so that a bad file fails before training; only the lines used
            sentences = list(itertools.islice(iter_lines(sentences_file), num_sentences))
        self.num_sentences, self.num_show, self.num_samples = num_sentences, num_show, num_samples
        self.tau = tau
        self.alphas = list(alphas)
        self.options = DecodeOptions(
            strategy="beam" if beam_size > 1 else "greedy", beam_size=beam_size, max_len=max_len
        )
        self.seed = seed
        self._sentences: list[str] | None = None
        if sentences is not None:
            self._sentences = [x for x in sentences if x.strip()][:num_sentences]

    def _from_val_data(self, trainer: pl.Trainer, tokenizer: VATTokenizer) -> list[str]:
        """The first validation sentences, decoded from their ids (the tokenizer is lossless)."""
        split = getattr(getattr(trainer, "datamodule", None), "splits", {}).get("val")
        if split is not None and hasattr(split, "ids"):
            return [tokenizer.decode(ids) for ids in split.ids[: self.num_sentences]]
        loaders = trainer.val_dataloaders
        out: list[str] = []
        for loader in loaders if isinstance(loaders, list | tuple) else [loaders]:
            for batch in loader or []:
                out.extend(tokenizer.decode_batch(batch["src"].tolist()))  # src (B, T)
                if len(out) >= self.num_sentences:
                    return out[: self.num_sentences]
        return out

    def sentences(self, trainer: pl.Trainer, tokenizer: VATTokenizer) -> list[str]:
        if self._sentences is None:
            self._sentences = [s for s in self._from_val_data(trainer, tokenizer) if s.strip()]
        return self._sentences

    def _run(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        sentences = self.sentences(trainer, pl_module.tokenizer)
        if not sentences:
            rank_zero_warn("SamplesCallback: no sentences to reconstruct; skipping")
            return
        gen = VATGenerator(
            pl_module.model,
            pl_module.tokenizer,
            prior_std=float(pl_module.prior_std),
            length_histogram=list(getattr(pl_module, "length_histogram", []) or []),
        )
        recon = gen.reconstruct(sentences, self.options)
        shown = sentences[: self.num_show]
        samples = gen.sample(shown, self.num_samples, self.tau, self.options, seed=self.seed)
        interp = []
        if len(sentences) > 1:
            interp = gen.interpolate(sentences[0], sentences[1], self.alphas, options=self.options)
        exact = sum(r.strip() == x.strip() for r, x in zip(recon, sentences)) / len(sentences)
        pl_module.log("val/recon_bleu", corpus_bleu(recon, sentences), rank_zero_only=True)
        pl_module.log("val/recon_exact_match", exact, rank_zero_only=True)
        recon_rows, sample_rows = [], []
        for i, s in enumerate(shown):
            recon_rows += [(f"{i} input", s), (f"{i} mu-decoded", recon[i])]
            sample_rows += [(f"{i} input", s)] + [
                (f"{i} sample {j} (tau {self.tau:g})", t) for j, t in enumerate(samples[i])
            ]
        interp_rows = [(f"a={a:g}", t) for a, t in zip(self.alphas, interp)]
        if interp:
            interp_rows = [("Z1", sentences[0]), *interp_rows, ("Z2", sentences[1])]
        writer = tensorboard_writer(trainer)
        if writer is None:
            return
        texts = {
            "val/reconstructions": recon_rows,
            "val/variational_samples": sample_rows,
            "val/interpolation": interp_rows,
        }
        for tag, rows in texts.items():
            if rows:
                writer.add_text(tag, markdown_table(rows), global_step=trainer.global_step)
