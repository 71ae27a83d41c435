"""Sentence vectors by a feature spec (vat.feature_spec), the one code path of `vat evaluate`,
`vat.load(...).encode`, sentence-transformers and MTEB: `pool_batch`, then `apply_post`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from vat.errors import OptionError
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features.pooling import padded_batches, pool
from vat.features.postprocess import apply_pc_removal, apply_whitening
from vat.model import VAT, Posterior, SentencePosterior
from vat.runtime import eval_mode
from vat.share.loaded import LoadedVAT
from vat.tokenizer import VATTokenizer

Combo = tuple[str, str]  # (source, weighting)


@torch.no_grad()
def encoder_states(
    model: VAT, src_ids: torch.Tensor, layers: Iterable[int] = ()
) -> tuple[dict[int, torch.Tensor], Posterior, SentencePosterior | None]:
    """({layer: (B, T, d)}, the two posteriors) of one batch in one encoder pass. Layer 0 is the
    embeddings; the last layer is taken after the final norm (pre-LN), the heads' input."""
    want, n = set(layers), len(model.encoder)
    mask = src_ids != model.config.pad_id  # (B, T)
    h = model._embed(src_ids)  # (B, T, d)
    states: dict[int, torch.Tensor] = {0: h} if 0 in want else {}
    for k, layer in enumerate(model.encoder, start=1):
        h = layer(h, mask)
        if k in want and k < n:
            states[k] = h
    h = model.enc_norm(h)
    if n in want:
        states[n] = h
    return states, *model.posteriors(h, mask)


def _layers_of(sources: Iterable[str], n_layers: int) -> set[int]:
    """The encoder layers the sources read (a layerK beyond the encoder fails here)."""
    out: set[int] = set()
    for s in sources:
        if s == "firstlast":
            out |= {1, n_layers}
        elif s not in ("mu", "sentence"):
            out.add(int(FeatureSpec(source=s).layer(n_layers)))
    return out


def weighted_pool(
    x: torch.Tensor,
    lengths: torch.Tensor,
    weighting: str,
    logvar: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, d) pooled x (B, T, d) over the first `lengths` subwords; `sif` is the mean of
    token_weights (B, T) times x, the others `vat.features.pool`'s."""
    if weighting != "sif":
        return pool(x, lengths, weighting, logvar)  # type: ignore[arg-type]
    n = lengths.clamp_min(1)
    keep = torch.arange(x.shape[1], device=x.device)[None, :] < n[:, None]  # (B, T)
    w = token_weights * keep  # (B, T)
    return (w[..., None] * x).sum(1) / n[:, None].to(x.dtype)


@torch.no_grad()
def pool_batch(
    model: VAT,
    src_ids: torch.Tensor,
    lengths: torch.Tensor,
    combos: Sequence[Combo],
    sif: torch.Tensor | None = None,
) -> dict[Combo, torch.Tensor]:
    """{(source, weighting): (B, d) float32} of one padded batch, in one encoder pass."""
    n_layers = len(model.encoder)
    layers = _layers_of({s for s, _ in combos}, n_layers)
    states, post, sentence = encoder_states(model, src_ids, layers)
    tw = sif.to(src_ids.device)[src_ids] if any(w == "sif" for _, w in combos) else None  # (B, T)
    out = {}
    for source, weighting in combos:
        if source == "sentence":  # one vector already: its mean is the feature
            out[(source, weighting)] = sentence.mu.float()
            continue
        if source == "mu":
            x = post.mu
        elif source == "firstlast":
            x = (states[1] + states[n_layers]) / 2
        else:
            x = states[int(source[5:])]
        logvar = post.logvar.float()
        out[(source, weighting)] = weighted_pool(x.float(), lengths, weighting, logvar, tw)
    return out


def tokenize(tokenizer: VATTokenizer, sentences: Sequence[str], max_len: int) -> list[list[int]]:
    """Subword ids cut to max_len - 1 (the cut of vat.features.iter_encoded)."""
    return tokenizer.encode_batch(list(sentences), max_tokens=max_len - 1)


def pooled_features(
    model: VAT,
    tokenizer: VATTokenizer,
    sentences: Sequence[str],
    combos: Sequence[Combo],
    sif: np.ndarray | torch.Tensor | None = None,
    batch_size: int = 128,
    progress: bool = False,
) -> dict[Combo, np.ndarray]:
    """{(source, weighting): (N, d) float32} in input order, before post-processing."""
    ids = tokenize(tokenizer, sentences, model.config.max_len)
    return pooled_ids(model, ids, combos, sif, batch_size, progress)


def pooled_ids(
    model: VAT,
    ids: Sequence[Sequence[int]],
    combos: Sequence[Combo],
    sif: np.ndarray | torch.Tensor | None = None,
    batch_size: int = 128,
    progress: bool = False,
) -> dict[Combo, np.ndarray]:
    """`pooled_features` of sentences already tokenized (at most max_len - 1 ids each)."""
    width = {c: FeatureSpec(*c).width(model.config) for c in combos}
    out = {c: np.zeros((len(ids), width[c]), dtype=np.float32) for c in combos}
    sif_t = None if sif is None else torch.as_tensor(np.asarray(sif), dtype=torch.float32)
    for index, batch, src in padded_batches(model, ids, batch_size, progress):
        lengths = torch.tensor([len(x) for x in batch], device=src.device)
        for c, v in pool_batch(model, src, lengths, combos, sif_t).items():
            out[c][index] = v.cpu().numpy()
    return out


def apply_post(spec: FeatureSpec, arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    if spec.pcs:
        return apply_pc_removal(x, arrays["mean"], arrays["components"])
    if spec.post.startswith("whiten"):
        return apply_whitening(x, arrays["mean"], arrays["matrix"])
    return np.asarray(x, dtype=np.float32)


class FeatureEncoder:
    """A loaded model with a fitted feature spec: `encoder(sentences) -> (N, k)` float32."""

    def __init__(self, loaded: LoadedVAT, fitted: FittedFeatures) -> None:
        model = loaded.model
        if not isinstance(fitted, FittedFeatures):
            raise OptionError("features", f"expected a FittedFeatures, got {type(fitted).__name__}")
        # every path to vectors passes here: the statistics are checked as the weights were
        fitted.check(model_config=model.config)
        self.model, self.tokenizer, self.fitted = model, loaded.tokenizer, fitted
        fitted.spec.layer(len(model.encoder))  # a layerK beyond the encoder fails here
        self.combo = (fitted.spec.source, fitted.spec.weighting)
        sw = fitted.arrays.get("sif_weights") if fitted.spec.weighting == "sif" else None
        self._sif = None if sw is None else torch.as_tensor(sw, dtype=torch.float32)

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec

    @property
    def dim(self) -> int:
        if self.spec.post.startswith("whiten"):  # (D, K) checked in __init__
            return int(self.fitted.arrays["matrix"].shape[1])
        return self.spec.width(self.model.config)

    def encode_ids(self, src_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, k) final vectors of a padded batch, on the batch's device."""
        with eval_mode(self.model):
            pooled = pool_batch(self.model, src_ids, lengths, [self.combo], self._sif)
        x = apply_post(self.spec, self.fitted.arrays, pooled[self.combo].cpu().numpy())
        return torch.from_numpy(x).to(src_ids.device)

    def __call__(
        self, sentences: Sequence[str], batch_size: int = 128, progress: bool = False
    ) -> np.ndarray:
        x = pooled_features(
            self.model, self.tokenizer, sentences, [self.combo], self._sif, batch_size, progress
        )
        return apply_post(self.spec, self.fitted.arrays, x[self.combo])
