"""`vat.load(path)`: one object to encode sentences and generate text with a trained VAT.

    import vat

    model = vat.load("runs/vat")   # a run folder, a .ckpt, an exported folder or a Hub id
    features = model.encode(["A man plays a guitar.", "A dog runs."])  # (2, d) numpy
    model.similarity(features, features)                                # (2, 2) cosines
    model.reconstruct(["A man plays a guitar."], beam=5)
    model.sample(["A man plays a guitar."], num_samples=3, tau=1.0)
    model.interpolate("A man plays a guitar.", "A dog runs.")

Features are pooled posterior means mu (`vat.features`, PAPER.md: representations use mu);
generation is `vat.generate.generator.VATGenerator`, whose decoding options (strategy, beam,
temperature, top_k, top_p, max_len, ...) every generation method takes as keywords.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vat.errors import OptionError, VatError
from vat.features import sentence_features
from vat.features.encoder import FeatureEncoder, folder_spec, resolve_features
from vat.features.spec import FittedFeatures
from vat.generate.generator import DecodeOptions, VATGenerator
from vat.runtime import resolve_device
from vat.share.checkpoint import LoadedVAT
from vat.share.export import push_to_hub
from vat.share.hub import save_loaded
from vat.share.resolve import ModelSource, load_model, resolve_model


def _device(device: str | torch.device | None) -> torch.device:
    return torch.device(resolve_device(device, option="device"))  # the one "auto" rule


def load(
    model: str | os.PathLike | None = None,
    device: str | torch.device | None = None,
    batch_size: int = 64,
    *,
    path: str | os.PathLike | None = None,
) -> PretrainedVAT:
    """A training checkpoint (.ckpt), an exported folder, a run folder (its best checkpoint,
    else last.ckpt) or a Hugging Face Hub repo id: what every command's `--model` takes
    (`vat.share.resolve`).

    `device` defaults to CUDA when available, else CPU; `batch_size` is the generation batch.
    `path=` is the deprecated name of `model`.
    """

    if path is not None:
        if model is not None:
            raise OptionError("model", "given twice (as model and as its old name path)")
        warnings.warn("path= is deprecated; use model=", DeprecationWarning, stacklevel=2)
        model = path
    if model is None:
        raise OptionError("model", "is required (a .ckpt, a folder, a run folder or a Hub id)")

    source = resolve_model(model)
    return PretrainedVAT(load_model(source, _device(device)), batch_size=batch_size, source=source)


PROGRESS_BAR_MIN_SENTENCES = 1000
"""encode shows a progress bar by default from this many sentences on (show_progress_bar=None)."""


def _renamed(options: dict[str, Any], old: str, new: str) -> None:
    """Accept the deprecated keyword `old` for `new` (with a DeprecationWarning)."""
    if old in options:
        if new in options:
            raise OptionError(new, f"given twice (as {new} and as its old name {old})")
        warnings.warn(f"{old}= is deprecated; use {new}=", DeprecationWarning, stacklevel=3)
        options[new] = options.pop(old)


class PretrainedVAT:
    """A loaded VAT with its tokenizer, prior scale and length histogram."""

    def __init__(
        self, loaded: LoadedVAT, batch_size: int = 64, source: ModelSource | None = None
    ) -> None:

        self.loaded = loaded
        self.source = source
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

        return save_loaded(directory, self.loaded, overwrite=overwrite)

    def push_to_hub(self, repo_id: str, **kwargs: Any) -> Any:
        """Upload to the Hugging Face Hub (`vat.share.export.push_to_hub`'s keywords)."""

        return push_to_hub(self.loaded, repo_id, **kwargs)

    # -- features (sentence-transformers' encode and similarity) ---------------------------------
    def encode(
        self,
        sentences: str | Sequence[str],
        batch_size: int = 64,
        show_progress_bar: bool | None = None,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        normalize_embeddings: bool = False,
        pooling: str = "mean",
        features: str | Any | None = None,
        **deprecated: Any,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Sentence features as `SentenceTransformer.encode` returns them: token means mu
        pooled with `pooling` (the names of `vat.features.Pooling`), or any feature spec.

        A single string gives one vector (d,), a list an (N, d) float32 array;
        `convert_to_tensor` gives a torch tensor on the model's device instead, and
        `convert_to_numpy=False` a list of 1-D tensors. `normalize_embeddings` scales each
        vector to unit length (a zero vector stays zero). `show_progress_bar` defaults to a
        bar from PROGRESS_BAR_MIN_SENTENCES sentences on. `device` moves the model first
        (default: where it is). `normalize=` is the deprecated name of `normalize_embeddings`.
        `features` is a feature spec (`vat.features.spec`, e.g. "mu/sif/pc1",
        "firstlast/mean/whiten"; or a FittedFeatures) and replaces `pooling`; an exported
        folder's own spec is the default.
        """

        _renamed(deprecated, "normalize", "normalize_embeddings")
        normalize_embeddings = deprecated.pop("normalize_embeddings", normalize_embeddings)
        if deprecated:
            raise TypeError(f"encode() got unexpected keyword arguments {sorted(deprecated)}")
        single = isinstance(sentences, str)
        batch = [sentences] if single else list(sentences)
        if not all(isinstance(x, str) for x in batch):
            raise OptionError("sentences", "expected a string or a list of strings")
        if batch_size < 1:
            raise OptionError("batch_size", f"must be >= 1, got {batch_size}")
        if device is not None:
            self.to(device)
        if show_progress_bar is None:
            show_progress_bar = len(batch) >= PROGRESS_BAR_MIN_SENTENCES
        if features is not None or (pooling == "mean" and self._folder_spec() is not None):
            out = self.feature_encoder(features)(
                batch, batch_size=batch_size, progress=bool(show_progress_bar)
            )
        else:
            try:
                out = sentence_features(
                    self.model, self.tokenizer, batch, pooling, batch_size, bool(show_progress_bar)
                )
            except ValueError as e:  # an unknown pooling name
                raise OptionError("pooling", str(e)) from None
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.where(norms == 0, 1.0, norms)  # a zero vector stays zero
        if single:
            out = out[0]
        if convert_to_tensor:
            return torch.from_numpy(out).to(self.device)
        if not convert_to_numpy:
            return list(torch.from_numpy(out).to(self.device).unbind(0))
        return out

    @staticmethod
    def similarity(a: Any, b: Any) -> torch.Tensor:
        """Cosine similarity of every row of `a` with every row of `b` (vectors or (N, d)
        arrays / tensors), as sentence-transformers' `similarity` (cosine): (N, M) tensor."""
        ta = torch.as_tensor(np.asarray(a) if not torch.is_tensor(a) else a).float()
        tb = torch.as_tensor(np.asarray(b) if not torch.is_tensor(b) else b).float()
        ta, tb = ta.reshape(-1, ta.shape[-1]), tb.reshape(-1, tb.shape[-1])
        ta = torch.nn.functional.normalize(ta, dim=-1)
        tb = torch.nn.functional.normalize(tb.to(ta.device), dim=-1)
        return ta @ tb.T

    def _folder_spec(self) -> str | None:
        """The feature spec an exported folder was saved with (None: plain mean of mu)."""

        if not hasattr(self, "_folder_spec_cache"):
            self._folder_spec_cache = folder_spec(self.loaded.path)
        return self._folder_spec_cache

    def feature_encoder(self, features: str | Any | None = None, **fit_options: Any):
        """A `vat.features.encoder.FeatureEncoder` for a spec (default: the folder's own, else
        mu/mean/none). Statistics come from beside the model or are fitted on its training
        sentences (`resolve_features`'s keywords: fit_files, count_files, n_fit, save...)."""

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

    # -- generation (vat.generate.VATGenerator) ----------------------------------------------
    @staticmethod
    def _options(options: dict[str, Any]):
        """DecodeOptions from the generation keywords; `beam` (as `--beam`) sets the beam
        size and, above 1, beam search (`beam_size=` is its deprecated name)."""

        options = dict(options)
        _renamed(options, "beam_size", "beam")
        if "beam" in options:
            options["beam_size"] = beam = options.pop("beam")
            if isinstance(beam, int) and beam > 1:
                options.setdefault("strategy", "beam")
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
        num_samples: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        **options: Any,
    ) -> list[list[str]]:
        """num_samples decodings per sentence of z_t = mu_t + tau sigma_t eps at every token
        (Table 1). `n=` is the deprecated name of `num_samples`."""
        if "n" in options:  # the deprecated name of num_samples
            warnings.warn("n= is deprecated; use num_samples=", DeprecationWarning, stacklevel=2)
            num_samples = options.pop("n")
        return self.generator.sample(
            list(sentences), num_samples, tau, self._options(options), seed
        )

    def resample_token(
        self,
        sentences: Sequence[str],
        positions: Sequence[int],
        num_samples: int = 5,
        tau: float = 1.0,
        seed: int | None = 0,
        **options: Any,
    ) -> list[list[str]]:
        """num_samples decodings per sentence redrawing only the latents at `positions`
        (Table 2). `n=` is the deprecated name of `num_samples`."""
        if "n" in options:  # the deprecated name of num_samples
            warnings.warn("n= is deprecated; use num_samples=", DeprecationWarning, stacklevel=2)
            num_samples = options.pop("n")
        return self.generator.resample_token(
            list(sentences), list(positions), num_samples, tau, self._options(options), seed
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
        num_samples: int = 10,
        length: int | None = None,
        seed: int | None = 0,
        prior_std: float | None = None,
        **options: Any,
    ) -> list[tuple[int, str]]:
        """num_samples decodings of Z ~ N(0, s^2 I); (latent length, text) pairs. `n=` is
        the deprecated name of `num_samples`."""
        if "n" in options:  # the deprecated name of num_samples
            warnings.warn("n= is deprecated; use num_samples=", DeprecationWarning, stacklevel=2)
            num_samples = options.pop("n")
        return self.generator.prior(num_samples, length, self._options(options), seed, prior_std)

    def __repr__(self) -> str:
        return f"PretrainedVAT({self.loaded.path!r}, d={self.dim}, prior_std={self.prior_std:g})"
