"""`vat.load(path)`: one object to encode sentences and generate text with a trained VAT.

    import vat

    model = vat.load("runs/vat/checkpoints/last.ckpt")   # or an exported folder, or a Hub id
    features = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, d) numpy
    model.reconstruct(["A man plays a guitar."])
    model.sample(["A man plays a guitar."], n=3, tau=1.0)
    model.interpolate("A man plays a guitar.", "A dog runs.")

Features are pooled posterior means mu (`vat.features`, PAPER.md: representations use mu);
generation is `vat.generate.VATGenerator`, whose decoding options (strategy, beam_size,
temperature, top_k, top_p, max_len, ...) every generation method takes as keywords.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vat.checkpoint import LoadedVAT
from vat.errors import VatError


def _device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load(
    path: str | os.PathLike, device: str | torch.device | None = None, batch_size: int = 64
) -> PretrainedVAT:
    """A training checkpoint (.ckpt), an exported folder, or a Hugging Face Hub repo id.

    `device` defaults to CUDA when available, else CPU; `batch_size` is the generation batch.
    """
    from vat.checkpoint import load_vat
    from vat.hub import from_pretrained

    dev = _device(device)
    loaded = (
        load_vat(path, map_location=dev)
        if Path(path).expanduser().exists()
        else from_pretrained(path, device=dev)
    )
    return PretrainedVAT(loaded, batch_size=batch_size)


class PretrainedVAT:
    """A loaded VAT with its tokenizer, prior scale and length histogram."""

    def __init__(self, loaded: LoadedVAT, batch_size: int = 64) -> None:
        from vat.generate import VATGenerator

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
        self.model.to(_device(device))
        return self

    def save_pretrained(self, directory: str | os.PathLike, overwrite: bool = False) -> Path:
        """Write the exported folder (config.json, model.safetensors, tokenizer.json, README.md)."""
        from vat.hub import save_loaded

        return save_loaded(directory, self.loaded, overwrite=overwrite)

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Upload to the Hugging Face Hub (`vat.hub.push_to_hub`'s keywords)."""
        from vat.hub import push_to_hub

        return push_to_hub(self.loaded, repo_id, **kwargs)

    # -- features ------------------------------------------------------------------------------
    def encode(
        self,
        sentences: Sequence[str],
        pooling: str = "mean",
        batch_size: int = 64,
        normalize: bool = False,
        device: str | torch.device | None = None,
        features: str | Any | None = None,
    ) -> np.ndarray:
        """(N, d) float32 sentence features: token means mu pooled with `pooling` (the
        names of `vat.features.Pooling`); unit length with `normalize`. `device` moves the
        model first (default: where it is). `features` is a feature spec
        (`vat.feature_spec`, e.g. "mu/sif/pc1", "firstlast/mean/whiten"; or a FittedFeatures)
        and replaces `pooling`; an exported folder's own spec is the default."""
        from vat.features import sentence_features

        if features is not None or (pooling == "mean" and self._folder_spec() is not None):
            if isinstance(sentences, str):
                raise VatError(
                    "encode takes a list of sentences, got a single string (wrap it in a list)"
                )
            if batch_size < 1:
                raise VatError(f"batch_size must be >= 1, got {batch_size}")
            if device is not None:
                self.to(device)
            out = self.feature_encoder(features)(list(sentences), batch_size=batch_size)
            if normalize:
                norms = np.linalg.norm(out, axis=1, keepdims=True)
                out = out / np.where(norms == 0, 1.0, norms)
            return out
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

    def _folder_spec(self) -> str | None:
        """The feature spec an exported folder was saved with (None: plain mean of mu)."""
        from vat.feature_encoder import folder_spec

        if not hasattr(self, "_folder_spec_cache"):
            self._folder_spec_cache = folder_spec(self.loaded.path)
        return self._folder_spec_cache

    def feature_encoder(self, features: str | Any | None = None, **fit_options: Any):
        """A `vat.feature_encoder.FeatureEncoder` for a spec (default: the folder's own, else
        mu/mean/none). Statistics come from beside the model or are fitted on its training
        sentences (`resolve_features`'s keywords: fit_files, count_files, n_fit, save...)."""
        from vat.feature_encoder import FeatureEncoder, resolve_features
        from vat.feature_spec import FittedFeatures

        if isinstance(features, FittedFeatures):
            return FeatureEncoder(self.model, self.tokenizer, features)
        spec = features if features is not None else (self._folder_spec() or "mu/mean/none")
        key = (str(spec), tuple(sorted((k, str(v)) for k, v in fit_options.items())))
        cache = self.__dict__.setdefault("_feature_encoders", {})
        if key not in cache:
            fitted = resolve_features(
                self.loaded.path, self.model, self.tokenizer, spec, **fit_options
            )
            cache[key] = FeatureEncoder(self.model, self.tokenizer, fitted)
        return cache[key]

    # -- generation (vat.generate.VATGenerator) ------------------------------------------------
    @staticmethod
    def _options(options: dict[str, Any]):
        from vat.generate import DecodeOptions

        try:
            return DecodeOptions(**options)
        except TypeError as e:
            raise VatError(
                f"unknown decoding option ({e}); see vat.generate.DecodeOptions"
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
