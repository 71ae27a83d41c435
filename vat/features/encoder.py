"""Sentence vectors by a feature spec (vat.feature_spec): sources, weightings and fitted
post-processing, for a loaded model (vat.share.loaded).

One code path makes the vectors for `vat evaluate`, `vat.load(...).encode`, the
sentence-transformers module and the MTEB encoder: `FeatureEncoder.pool_ids` (source and
weighting of one padded batch) then `FeatureEncoder.post` (the fitted post-processing, in
float64 numpy). Which spec and statistics a model uses is `vat.features.choice`'s; fitting
them on unlabeled text is `vat.features.fitting`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from vat.errors import OptionError, VatError
from vat.feature_spec import FeatureSpec, FittedFeatures
from vat.features.pooling import length_sorted_batches, pool
from vat.features.postprocess import apply_pc_removal, apply_whitening
from vat.model import VAT
from vat.runtime import eval_mode
from vat.share.loaded import LoadedVAT
from vat.tokenizer import VATTokenizer, make_batch

Combo = tuple[str, str]  # (source, weighting)


# -- sources -----------------------------------------------------------------------------------
@torch.no_grad()
def encoder_states(
    model: VAT, src_ids: torch.Tensor, layers: Iterable[int] = ()
) -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """({layer: (B, T, d)}, mu, logvar, mask) of one batch, in one encoder pass.

    Layer 0 is the scaled embeddings plus positions, layer k the output of encoder layer k;
    the last layer is taken after the final norm (pre-LN), i.e. the input of the mu and
    log-variance heads. mu and logvar are `VAT.encode`'s (the same steps, in eval mode).
    """
    want = set(layers)
    n = len(model.encoder)
    mask = src_ids != model.config.pad_id  # (B, T)
    h = model._embed(src_ids)  # (B, T, d)
    states: dict[int, torch.Tensor] = {}
    if 0 in want:
        states[0] = h
    for k, layer in enumerate(model.encoder, start=1):
        h = layer(h, mask)
        if k in want and k < n:
            states[k] = h
    h = model.enc_norm(h)
    if n in want:
        states[n] = h
    mu = model.mu_head(h)
    logvar = model.logvar_head(h).clamp(model.config.logvar_min, model.config.logvar_max)
    return states, mu, logvar, mask


def _layers_of(sources: Iterable[str], n_layers: int) -> set[int]:
    out: set[int] = set()
    for s in sources:
        if s == "firstlast":
            out |= {1, n_layers}
        elif s != "mu":
            k = FeatureSpec(source=s).layer(n_layers)
            out.add(int(k))
    return out


def source_tensor(
    source: str, states: dict[int, torch.Tensor], mu: torch.Tensor, n_layers: int
) -> torch.Tensor:
    if source == "mu":
        return mu
    if source == "firstlast":
        return (states[1] + states[n_layers]) / 2
    return states[int(source[5:])]


# -- weighting ---------------------------------------------------------------------------------
def weighted_pool(
    x: torch.Tensor,
    lengths: torch.Tensor,
    weighting: str,
    logvar: torch.Tensor | None = None,
    token_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, d) pooled x (B, T, d) over the first `lengths` subwords. `sif` is the mean of
    token_weights (B, T) times x (Arora et al.'s (1/|s|) sum a / (a + p(w)) v_w); the other
    weightings are `vat.features.pool`'s."""
    if weighting != "sif":
        return pool(x, lengths, weighting, logvar)  # type: ignore[arg-type]
    if token_weights is None:
        raise ValueError("sif weighting needs token weights")
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
    """{(source, weighting): (B, d) float32} for one padded batch, from one encoder pass.
    `sif` (V,) holds a / (a + p(w)) for every token id (needed by `sif` weighting)."""
    n_layers = len(model.encoder)
    states, mu, logvar, _ = encoder_states(
        model, src_ids, _layers_of({s for s, _ in combos}, n_layers)
    )
    tw = None
    if any(w == "sif" for _, w in combos):
        if sif is None:
            raise VatError("sif weighting needs token frequencies (SIF weights)")
        tw = sif.to(src_ids.device)[src_ids]  # (B, T)
    out = {}
    for source, weighting in combos:
        x = source_tensor(source, states, mu, n_layers).float()
        out[(source, weighting)] = weighted_pool(x, lengths, weighting, logvar.float(), tw)
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
    """{(source, weighting): (N, d) float32} in input order, before post-processing; with
    `progress` a bar over the batches on stderr (as `vat.features.sentence_features`)."""
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
    d = model.config.d_model
    out = {c: np.zeros((len(ids), d), dtype=np.float32) for c in combos}
    device = next(model.parameters()).device
    sif_t = None if sif is None else torch.as_tensor(np.asarray(sif), dtype=torch.float32)
    with eval_mode(model):
        batches = list(length_sorted_batches([len(x) for x in ids], batch_size))
        for index in tqdm(
            batches, desc="encoding", unit="batch", disable=not progress, leave=False
        ):
            batch = [list(ids[i]) for i in index]
            src = make_batch(batch)["src"].to(device)
            lengths = torch.tensor([len(x) for x in batch], device=device)
            for c, v in pool_batch(model, src, lengths, combos, sif_t).items():
                out[c][index] = v.cpu().numpy()
    return out


# -- post-processing (fitted by vat.features.fitting.fit_post) ---------------------------
def apply_post(spec: FeatureSpec, arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    if spec.pcs:
        return apply_pc_removal(x, arrays["mean"], arrays["components"])
    if spec.post.startswith("whiten"):
        return apply_whitening(x, arrays["mean"], arrays["matrix"])
    return np.asarray(x, dtype=np.float32)


class FeatureEncoder:
    """A loaded model with a fitted feature spec: `encoder(sentences) -> (N, k)` float32."""

    def __init__(self, loaded: LoadedVAT, fitted: FittedFeatures) -> None:
        # `loaded` was checked where it was loaded (vat.share.resolve.load_model), or by the
        # entry point that took it from a user (vat_encoder, vat.load(...).feature_encoder)
        model = loaded.model
        if not isinstance(fitted, FittedFeatures):
            raise OptionError("features", f"expected a FittedFeatures, got {type(fitted).__name__}")
        # Every path to vectors (vat.load(...).encode, sentence-transformers, MTEB, vat
        # evaluate, a FittedFeatures a user built) passes here: the statistics are checked
        # against this model's sizes as its weights were (finite, shapes, dtype, SIF range).
        fitted.check(model_config=model.config)
        self.model, self.tokenizer, self.fitted = model, loaded.tokenizer, fitted
        fitted.spec.layer(len(model.encoder))  # a layerK beyond the encoder fails here
        sw = fitted.arrays.get("sif_weights") if fitted.spec.weighting == "sif" else None
        self._sif = None if sw is None else torch.as_tensor(sw, dtype=torch.float32)

    @property
    def spec(self) -> FeatureSpec:
        return self.fitted.spec

    @property
    def dim(self) -> int:
        if self.spec.post.startswith("whiten"):  # (D, K) checked in __init__
            return int(self.fitted.arrays["matrix"].shape[1])
        return int(self.model.config.d_model)

    def pool_ids(self, src_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, d) source + weighting of one padded batch (no post-processing)."""
        combo = (self.spec.source, self.spec.weighting)
        return pool_batch(self.model, src_ids, lengths, [combo], self._sif)[combo]

    def post(self, x: np.ndarray) -> np.ndarray:
        return apply_post(self.spec, self.fitted.arrays, x)

    def encode_ids(self, src_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, k) final vectors of a padded batch, on the batch's device."""
        with eval_mode(self.model):
            x = self.pool_ids(src_ids, lengths).cpu().numpy()
        return torch.from_numpy(self.post(x)).to(src_ids.device)

    def __call__(
        self, sentences: Sequence[str], batch_size: int = 128, progress: bool = False
    ) -> np.ndarray:
        combo = (self.spec.source, self.spec.weighting)
        x = pooled_features(
            self.model, self.tokenizer, sentences, [combo], self._sif, batch_size, progress
        )
        return self.post(x[combo])
