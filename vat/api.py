"""`vat.load(path)`: one object to encode sentences and generate text with a trained VAT.

    import vat

    model = vat.load("runs/vat/checkpoints/last.ckpt")   # or an exported folder, or a Hub id
    features = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, d) numpy
    model.reconstruct(["A man plays a guitar."])
    model.sample(["A man plays a guitar."], n=3, tau=1.0)
    model.interpolate("A man plays a guitar.", "A dog runs.")

Features are pooled posterior means mu (`vat.features`, PAPER.md: representations use mu);
generation is `vat.generate.generator.VATGenerator`, whose decoding options (strategy, beam_size,
temperature, top_k, top_p, max_len, ...) every generation method takes as keywords.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vat.errors import VatError
from vat.features import sentence_features
from vat.generate.generator import DecodeOptions, VATGenerator
from vat.runtime import resolve_device
from vat.share.checkpoint import LoadedVAT
from vat.share.hub import push_to_hub, save_loaded
from vat.share.resolve import load_vat


def load(
    path: str | os.PathLike, device: str | torch.device | None = None, batch_size: int = 64
) -> PretrainedVAT:
    """A training checkpoint (.ckpt), an exported folder, a run folder (its best checkpoint,
    else its last) or a Hugging Face Hub repo id (`vat.share.resolve.load_vat`).

    `device` defaults to CUDA when available, else CPU; `batch_size` is the generation batch.
    """
    dev = torch.device(resolve_device(device, option="device"))
    return PretrainedVAT(load_vat(path, map_location=dev), batch_size=batch_size)


class PretrainedVAT:
    """A loaded VAT with its tokenizer, prior scale and length histogram."""

    def __init__(self, loaded: LoadedVAT, batch_size: int = 64) -> None:

        self.loaded = loaded
        self.generator = VATGenerator.from_loaded(loaded, batch_size=batch_size)

    @property
    def model(self):
        return self.loaded.model

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def prior_std(self) -> float:
        return self.loaded.prior_std

    @property
    def dim(self) -> int:
        """Width d of every latent z_t, and of the sentence features."""
        return int(self.model.config.d_model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def to(self, device: str | torch.device) -> PretrainedVAT:
        self.model.to(torch.device(resolve_device(device, option="device")))
        return self

    def save_pretrained(self, directory: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the exported folder (config.json, model.safetensors, tokenizer.json, README.md)."""

        return save_loaded(directory, self.loaded, overwrite=overwrite)

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Upload to the Hugging Face Hub (`vat.share.hub.push_to_hub`'s keywords)."""

        return push_to_hub(self.loaded, repo_id, **kwargs)

    # -- features ------------------------------------------------------------------------------
    def encode(
        self,
        sentences: Sequence[str],
        pooling: str = "mean",
        batch_size: int = 64,
        normalize: bool = False,
        device: str | torch.device | None = None,
    ) -> np.ndarray:
        """(N, d) float32 sentence features: token means mu pooled with `pooling` (the
        names of `vat.features.Pooling`); unit length with `normalize`. `device` moves the
        model first (default: where it is)."""

        if isinstance(sentences, str):
            raise VatError(
                "encode takes a list of sentences, got a single string (wrap it in a list)"
            )
        if batch_size < 1:
            raise VatError(f"batch_size must be >= 1, got {batch_size}")
        if device is not None:
            self.to(device)
        try:
            out = sentence_features(
                self.model, self.tokenizer, list(sentences), pooling=pooling, batch_size=batch_size
            )
        except ValueError as e:  # an unknown pooling name
            raise VatError(str(e)) from None
        if normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.where(norms == 0, 1.0, norms)  # a zero vector stays zero
        return out

    # -- generation (vat.generate.generator.VATGenerator) ---------------------------------
    @staticmethod
    def _options(options: dict[str, Any]):

        try:
            return DecodeOptions(**options)
        except TypeError as e:
            raise VatError(
                f"unknown decoding option ({e}); see vat.generate.generator.DecodeOptions"
            ) from None

    def reconstruct(self, sentences: Sequence[str], **options: Any) -> list[str]:
        """Decode each sentence from its token means Z = mu."""
        return self.generator.reconstruct(list(sentences), self._options(options))

    def sample(
        self,
        sentences: Sequence[str],
        n: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        **options: Any,
    ) -> list[list[str]]:
        """n decodings per sentence of z_t = mu_t + tau sigma_t eps at every token (Table 1)."""
        return self.generator.sample(list(sentences), n, tau, self._options(options), seed)

    def resample_token(
        self,
        sentences: Sequence[str],
        positions: Sequence[int],
        n: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        **options: Any,
    ) -> list[list[str]]:
        """n decodings per sentence redrawing only the latents at `positions` (Table 2)."""
        return self.generator.resample_token(
            list(sentences), list(positions), n, tau, self._options(options), seed
        )

    def interpolate(
        self,
        a: str,
        b: str,
        alphas: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
        method: str = "linear",
        **options: Any,
    ) -> list[str]:
        """Decodings along the path between two sentences' token means (Table 3)."""
        return self.generator.interpolate(a, b, alphas, method, self._options(options))  # type: ignore[arg-type]

    def prior(
        self,
        n: int = 10,
        length: int | None = None,
        seed: int | None = 0,
        prior_std: float | None = None,
        **options: Any,
    ) -> list[tuple[int, str]]:
        """n decodings of Z ~ N(0, s^2 I); (latent length, text) pairs."""
        return self.generator.prior(n, length, self._options(options), seed, prior_std)

    def __repr__(self) -> str:
        return f"PretrainedVAT({self.loaded.path!r}, d={self.dim}, prior_std={self.prior_std:g})"
